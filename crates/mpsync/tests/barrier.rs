//! Barrier torture for every barrier of `mpsync::barrier`: across thousands of
//! episodes nobody leaves episode `k` before all participants arrived in it, and
//! exactly one participant per episode is the leader — with 8 threads on the
//! machine's cores (real Linux preemption) and under the emulated
//! pseudo-scheduler repartitioning its processors every few milliseconds (the
//! two-level barrier must reorganize, and stay correct while it does).
//! The real affinity change is in `tests/barrier_affinity.rs` (its own process).
//!
//! Longer runs: `MPSYNC_TORTURE_SCALE=10 cargo test --release --test barrier`.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mpsync::barrier::{
    Barrier, Central, CombiningTree, Dissemination, McsTree, ScalableSc, WaitMode,
};
use mpsync::sched::emulated::{Emulated, EmulatedConfig};

/// Serializes the tests that start a pseudo-scheduler (one signal handler per process).
static EMU: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn scale() -> u64 {
    std::env::var("MPSYNC_TORTURE_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// What the participants check and count.
#[derive(Default)]
struct Check {
    arrivals: AtomicU64,
    leaders: AtomicU64,
    early: AtomicU64,
    bad_leaders: AtomicU64,
    stop: AtomicBool,
}

impl Check {
    /// One participant's loop: iterations of two waits (A, B). Between them
    /// the leader of A decides whether to stop (`more(iteration)` false), and
    /// everyone reads the decision after B, so all stop together.
    fn run<B: Barrier + ?Sized>(&self, b: &B, id: usize, mut more: impl FnMut(u64) -> bool) -> u64 {
        let n = b.participants() as u64;
        let mut waits = 0u64;
        let mut i = 0u64;
        loop {
            for half in 0..2 {
                self.arrivals.fetch_add(1, Ordering::SeqCst);
                let r = b.wait(id);
                waits += 1;
                let a = self.arrivals.load(Ordering::SeqCst);
                if a < waits * n {
                    self.early.fetch_add(1, Ordering::Relaxed);
                }
                if r.is_leader() {
                    self.leaders.fetch_add(1, Ordering::SeqCst);
                    if half == 0 && !more(i) {
                        self.stop.store(true, Ordering::SeqCst);
                    }
                }
                if half == 1 {
                    // A's leader counted before arriving at B; B's may not yet.
                    let l = self.leaders.load(Ordering::SeqCst);
                    if l + 1 < waits || l > waits {
                        self.bad_leaders.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            i += 1;
            if self.stop.load(Ordering::SeqCst) {
                return waits;
            }
        }
    }

    fn verify(&self, episodes: u64) {
        let early = self.early.load(Ordering::Relaxed);
        assert_eq!(early, 0, "{early} waits returned before everyone arrived");
        let bad = self.bad_leaders.load(Ordering::Relaxed);
        assert_eq!(bad, 0, "{bad} episodes without exactly one leader");
        assert_eq!(
            self.leaders.load(Ordering::SeqCst),
            episodes,
            "leaders ≠ episodes"
        );
    }
}

/// 8 threads on the machine's cores, `iters` iterations of two episodes.
fn oversubscribed<B: Barrier>(b: B, iters: u64) {
    let iters = common::sized(iters * scale(), 8).max(2);
    let c = Check::default();
    let waits = std::thread::scope(|s| {
        let hs: Vec<_> = (0..b.participants())
            .map(|id| {
                let (b, c) = (&b, &c);
                s.spawn(move || c.run(b, id, |i| i + 1 < iters))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    assert!(waits.iter().all(|&w| w == 2 * iters), "{waits:?}");
    c.verify(2 * iters);
}

/// Under the emulated pseudo-scheduler: 2 processors, two of our threads on
/// each (MP 2, all ours, as the paper's barrier experiments), quantum 2 ms,
/// repartitioned every 5 ms (all processors w.p. 1/2, else 1/2 of them).
/// Runs `iters` iterations and, for the two-level barrier, until it has
/// reorganized at least twice (deadline 20 s).
fn emulated_repartitioning<B: Barrier>(b: B, iters: u64, reorgs: impl Fn(&B) -> u64 + Sync) {
    let _serial = EMU.lock().unwrap_or_else(|e| e.into_inner());
    assert_eq!(b.participants(), 4);
    let cfg = EmulatedConfig::new(2, 1.0)
        .expect("valid config")
        .quantum(Duration::from_millis(2))
        .extension_bound(Duration::from_micros(500))
        .repartition_every(Some(Duration::from_millis(5)))
        .seed(5);
    let emu = Emulated::start(cfg).expect("pseudo-scheduler starts");
    let iters = common::sized(iters * scale(), 4).max(2);
    let deadline = Instant::now() + Duration::from_secs(20);
    let c = Check::default();
    let total = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|id| {
                let (b, c, emu, reorgs) = (&b, &c, &emu, &reorgs);
                s.spawn(move || {
                    let _att = emu.attach(id as u32 / 2).expect("attach");
                    c.run(b, id, |i| {
                        i + 1 < iters || (reorgs(b) < 2 && Instant::now() < deadline)
                    })
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    let stats = emu.stop();
    c.verify(total[0]);
    assert!(stats.repartitions > 0, "no repartition happened: {stats:?}");
    let r = reorgs(&b);
    assert!(
        r >= 2 || r == u64::MAX,
        "reorganized {r} times in 20 s ({stats:?})"
    );
}

fn none<B>(_: &B) -> u64 {
    u64::MAX
}

macro_rules! suite {
    ($($name:ident: $make:expr, $os:expr, $emu:expr;)*) => {$(
        mod $name {
            use super::*;
            #[test]
            fn oversubscribed_episodes() { oversubscribed($make(8), $os) }
            #[test]
            fn emulated_repartitioning_episodes() { emulated_repartitioning($make(4), $emu, none) }
        }
    )*};
}

suite! {
    central_spin: |n| Central::new(n, WaitMode::Spin).unwrap(), 25, 40;
    central_block: |n| Central::new(n, WaitMode::Block).unwrap(), 1500, 300;
    central_spin_block: |n| Central::new(n, WaitMode::HEURISTIC).unwrap(), 1500, 300;
    arrival_tree: |n| CombiningTree::new(n, WaitMode::Spin).unwrap(), 25, 40;
    heuristic_tree: |n| CombiningTree::new(n, WaitMode::HEURISTIC).unwrap(), 1500, 300;
    dissemination: |n| Dissemination::new(n).unwrap(), 300, 200;
    mcs_tree: |n| McsTree::new(n).unwrap(), 300, 200;
}

#[test]
fn scalable_sc_oversubscribed_episodes() {
    oversubscribed(ScalableSc::new(8).unwrap(), 1500);
}

#[test]
fn scalable_sc_reorganizes_under_emulated_repartitioning() {
    emulated_repartitioning(ScalableSc::new(4).unwrap(), 300, |b| b.reorganizations());
}

/// Odd sizes: partial tree nodes, non-power-of-two dissemination.
#[test]
fn odd_sizes() {
    for n in [3, 5, 7] {
        oversubscribed(Central::new(n, WaitMode::Block).unwrap(), 200);
        oversubscribed(CombiningTree::new(n, WaitMode::HEURISTIC).unwrap(), 200);
        oversubscribed(Dissemination::new(n).unwrap(), 50);
        oversubscribed(McsTree::new(n).unwrap(), 50);
        oversubscribed(ScalableSc::new(n).unwrap(), 200);
    }
}
