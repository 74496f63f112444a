//! The implementations the lock experiments compare: mpsync's locks and the
//! peers Rust programmers use today, run in the same process. Adding a lock is
//! adding a row.

use std::hint::black_box;

use mpsync::lock::{
    Anderson, BoundedSteal, Clh, ClhTp, McsTp, Native, NativeNp, Queued, QueuedHandshaking,
    QueuedNp, SmartQ, SpinThenPark, Tas, TasB, TasBNp, Ticket, TicketNp, TicketSplit,
};
use mpsync::util::clock::now_ns;

/// A lock the harness can drive.
pub trait BenchLock: Send + Sync + 'static {
    /// An unlocked lock.
    fn create() -> Self;
    /// Runs `f` holding the lock.
    fn with(&self, f: impl FnOnce());
}

impl<R: mpsync::lock_api::RawMutex + Send + Sync + 'static> BenchLock
    for mpsync::lock::Mutex<R, ()>
{
    fn create() -> Self {
        mpsync::lock::Mutex::new(())
    }
    #[inline]
    fn with(&self, f: impl FnOnce()) {
        let _g = self.lock();
        f();
    }
}

/// `std::sync::Mutex`.
pub struct StdMutex(std::sync::Mutex<()>);

impl BenchLock for StdMutex {
    fn create() -> Self {
        Self(std::sync::Mutex::new(()))
    }
    #[inline]
    fn with(&self, f: impl FnOnce()) {
        let _g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f();
    }
}

/// `parking_lot::Mutex`.
pub struct ParkingLot(parking_lot::Mutex<()>);

impl BenchLock for ParkingLot {
    fn create() -> Self {
        Self(parking_lot::Mutex::new(()))
    }
    #[inline]
    fn with(&self, f: impl FnOnce()) {
        let _g = self.0.lock();
        f();
    }
}

/// `spin::mutex::SpinMutex` with relax strategy `R` (`Spin` or `Yield`).
pub struct SpinCrate<R>(spin::mutex::SpinMutex<(), R>);

impl<R: spin::RelaxStrategy + 'static> BenchLock for SpinCrate<R> {
    fn create() -> Self {
        Self(spin::mutex::SpinMutex::new(()))
    }
    #[inline]
    fn with(&self, f: impl FnOnce()) {
        let _g = self.0.lock();
        f();
    }
}

/// A lock behind a pointer: what a program holding many locks of one row
/// (the applications of `wks_apps`) keeps, one per queue or column.
pub trait DynLock: Send + Sync {
    /// Runs `f` holding the lock.
    fn with_dyn(&self, f: &mut dyn FnMut());
}

impl<L: BenchLock> DynLock for L {
    #[inline]
    fn with_dyn(&self, f: &mut dyn FnMut()) {
        self.with(f);
    }
}

/// A fresh unlocked `L`, boxed.
fn boxed<L: BenchLock>() -> Box<dyn DynLock> {
    Box::new(L::create())
}

/// Where an implementation comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A lock of the papers, implemented in mpsync.
    Paper,
    /// mpsync's own addition beyond the papers.
    Mpsync,
    /// A crate people use today.
    Peer,
}

/// A worker body: called with the worker's index.
pub type WorkerBody = Box<dyn Fn(u32) + Sync>;

/// One row of the lock table.
#[derive(Debug, Clone, Copy)]
pub struct LockImpl {
    /// The paper's name (or the crate's).
    pub name: &'static str,
    /// Where it comes from.
    pub origin: Origin,
    /// Whether it spins (rather than blocks) while waiting.
    pub spins: bool,
    /// Makes a fresh lock and runs the synthetic program's worker loop on it.
    pub synthetic: fn(&SyntheticSpec) -> WorkerBody,
    /// A fresh lock of this row, boxed (the applications hold many).
    pub boxed: fn() -> Box<dyn DynLock>,
    /// Uncontended lock+unlock, ns per pair, over `iters` pairs.
    pub latency: fn(u64) -> f64,
    /// Fixed-duration contended run (`lock-oversub`): per-thread acquisitions.
    pub throughput: fn(&ThroughputSpec) -> anyhow::Result<Vec<u64>>,
}

/// A fixed-duration run: `threads` threads loop {lock; CS; unlock; non-CS}.
#[derive(Debug, Clone)]
pub struct ThroughputSpec {
    /// Threads (more than the cores: real Linux preemption).
    pub threads: u32,
    /// How long the threads run.
    pub duration: std::time::Duration,
    /// Critical-section work, busy-work iterations.
    pub cs_iters: u64,
    /// Non-critical work, busy-work iterations.
    pub ncs_iters: u64,
    /// CPUs to pin thread `i` to (`pin[i % pin.len()]`); empty: unpinned.
    pub pin: Vec<usize>,
}

fn throughput<L: BenchLock>(spec: &ThroughputSpec) -> anyhow::Result<Vec<u64>> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let lock = L::create();
    // Updated only inside the critical section with a plain load + store: if two
    // threads were ever inside at once, increments would be lost.
    let guarded = AtomicU64::new(0);
    let w = mpsync::util::busy::BusyWork::global();
    let counts = run_workers(spec, || {
        lock.with(|| {
            // Relaxed: protected by the lock under test.
            let v = guarded.load(Ordering::Relaxed);
            w.run_iters(spec.cs_iters);
            guarded.store(v + 1, Ordering::Relaxed);
        });
    })?;
    let total: u64 = counts.iter().sum();
    let seen = guarded.into_inner();
    anyhow::ensure!(
        seen == total,
        "mutual exclusion violated: {total} acquisitions but the guarded counter says {seen}"
    );
    Ok(counts)
}

/// The ceiling of a [`ThroughputSpec`] run: the same loop with no lock at all,
/// the critical section's work done by every thread at once and nothing
/// shared. No lock can run the loop faster (`lock-oversub` reports it beside
/// the locks, in the same rounds). Per-thread iterations.
pub fn ceiling_throughput(spec: &ThroughputSpec) -> anyhow::Result<Vec<u64>> {
    let w = mpsync::util::busy::BusyWork::global();
    run_workers(spec, || w.run_iters(spec.cs_iters))
}

/// Runs `spec.threads` workers, each looping {`section`; non-critical work}
/// until `spec.duration` has passed, pinned as `spec.pin` says; returns each
/// worker's iterations.
fn run_workers(spec: &ThroughputSpec, section: impl Fn() + Sync) -> anyhow::Result<Vec<u64>> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = AtomicBool::new(false);
    let start = std::sync::Barrier::new(spec.threads as usize + 1);
    let w = mpsync::util::busy::BusyWork::global();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..spec.threads)
            .map(|i| {
                let (section, stop, start) = (&section, &stop, &start);
                let cpu = (!spec.pin.is_empty()).then(|| spec.pin[i as usize % spec.pin.len()]);
                s.spawn(move || {
                    let pinned = cpu.map(mpsync::sched::native::pin_current_thread);
                    start.wait();
                    if let Some(Err(e)) = pinned {
                        return Err(anyhow::anyhow!("pinning a worker: {e}"));
                    }
                    let mut n = 0u64;
                    // Relaxed: a stop request; the join orders everything after.
                    while !stop.load(Ordering::Relaxed) {
                        section();
                        n += 1;
                        w.run_iters(spec.ncs_iters);
                    }
                    Ok(n)
                })
            })
            .collect();
        start.wait();
        // The harness (not a lock algorithm) may sleep: it is the timer.
        std::thread::sleep(spec.duration);
        stop.store(true, Ordering::Relaxed);
        hs.into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("a worker panicked"))
                    .and_then(|r| r)
            })
            .collect::<anyhow::Result<Vec<u64>>>()
    })
}

/// The synthetic lock program of paper 003 §4.1: each worker loops
/// {lock; critical section; unlock; non-critical section}, with seeded ±10% jitter.
#[derive(Debug, Clone)]
pub struct SyntheticSpec {
    /// Loop iterations per worker.
    pub iters: u64,
    /// Critical-section work, in busy-work loop iterations.
    pub cs_iters: u64,
    /// Non-critical work, in busy-work loop iterations.
    pub ncs_iters: u64,
    /// Seed of the jitter.
    pub seed: u64,
    /// A time cap on the run, shared by its workers (none: run to completion).
    pub cap: Option<std::sync::Arc<Censor>>,
}

/// A time cap on one synthetic run. Under `--preempt os` a FIFO queue lock can
/// collapse (every hand-over waits for a preempted waiter's next quantum) and a
/// run may take hours; past the cap its workers stop, and the run reports the
/// fraction of its iterations done, so its time can be extrapolated and marked
/// censored instead of silently dropped or waited for.
#[derive(Debug)]
pub struct Censor {
    cap_ns: u64,
    planned: u64,
    /// When the first worker started (ns), 0 before.
    started: std::sync::atomic::AtomicU64,
    /// Iterations completed by finished workers.
    done: std::sync::atomic::AtomicU64,
}

impl Censor {
    /// A cap of `cap` on a run of `planned` iterations in all.
    pub fn new(cap: std::time::Duration, planned: u64) -> Self {
        Self {
            cap_ns: cap.as_nanos().min(u128::from(u64::MAX)) as u64,
            planned: planned.max(1),
            started: std::sync::atomic::AtomicU64::new(0),
            done: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Whether the cap has passed (the first call starts the clock).
    fn expired(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let now = now_ns();
        // Relaxed: one timestamp; which worker wins does not matter.
        let t0 = match self.started.compare_exchange(0, now, Relaxed, Relaxed) {
            Ok(_) => now,
            Err(t) => t,
        };
        now.saturating_sub(t0) > self.cap_ns
    }

    /// The fraction of the planned iterations done (1.0: ran to completion).
    pub fn completed(&self) -> f64 {
        // Relaxed: read after the workers were joined.
        let d = self.done.load(std::sync::atomic::Ordering::Relaxed);
        (d as f64 / self.planned as f64).min(1.0)
    }
}

fn synthetic<L: BenchLock>(spec: &SyntheticSpec) -> WorkerBody {
    let lock = L::create();
    let spec = spec.clone();
    Box::new(move |worker| {
        let w = mpsync::util::busy::BusyWork::global();
        let mut rng = mpsync::util::rng::SplitMix64::stream(spec.seed, u64::from(worker));
        let mut i = 0;
        while i < spec.iters {
            if i % 8 == 0 && spec.cap.as_ref().is_some_and(|c| c.expired()) {
                break;
            }
            let cs = rng.jitter(spec.cs_iters as f64, 0.1) as u64;
            let ncs = rng.jitter(spec.ncs_iters as f64, 0.1) as u64;
            lock.with(|| w.run_iters(cs));
            w.run_iters(ncs);
            i += 1;
        }
        if let Some(c) = &spec.cap {
            // Relaxed: read after the join.
            c.done.fetch_add(i, std::sync::atomic::Ordering::Relaxed);
        }
    })
}

fn latency<L: BenchLock>(iters: u64) -> f64 {
    let lock = L::create();
    for _ in 0..1000 {
        lock.with(|| black_box(()));
    }
    let t0 = now_ns();
    for _ in 0..iters {
        black_box(&lock).with(|| black_box(()));
    }
    (now_ns() - t0) as f64 / iters.max(1) as f64
}

/// The floor: a bare `swap(true, Acquire)` + `store(false, Release)` pair.
pub fn floor_latency(iters: u64) -> f64 {
    use std::sync::atomic::{AtomicBool, Ordering};
    let flag = AtomicBool::new(false);
    let t0 = now_ns();
    for _ in 0..iters {
        let f = black_box(&flag);
        // Acquire/Release: the same orderings a lock would use.
        black_box(f.swap(true, Ordering::Acquire));
        f.store(false, Ordering::Release);
    }
    (now_ns() - t0) as f64 / iters.max(1) as f64
}

macro_rules! row {
    ($name:expr, $origin:expr, $spins:expr, $t:ty) => {
        LockImpl {
            name: $name,
            origin: $origin,
            spins: $spins,
            synthetic: synthetic::<$t>,
            boxed: boxed::<$t>,
            latency: latency::<$t>,
            throughput: throughput::<$t>,
        }
    };
}

/// The locks of the mutual-exclusion experiments, papers' first, then peers.
pub fn mutex_table() -> Vec<LockImpl> {
    vec![
        row!("TAS-B", Origin::Paper, true, mpsync::lock::Mutex<TasB, ()>),
        row!("TAS-B-np", Origin::Paper, true, mpsync::lock::Mutex<TasBNp, ()>),
        row!("Native", Origin::Paper, false, mpsync::lock::Mutex<Native, ()>),
        row!("Native-np", Origin::Paper, false, mpsync::lock::Mutex<NativeNp, ()>),
        row!("Queued", Origin::Paper, true, mpsync::lock::Mutex<Queued, ()>),
        row!("Queued-np", Origin::Paper, true, mpsync::lock::Mutex<QueuedNp, ()>),
        row!("Queued-Handshaking", Origin::Paper, true, mpsync::lock::Mutex<QueuedHandshaking, ()>),
        row!("Smart-Q", Origin::Paper, true, mpsync::lock::Mutex<SmartQ, ()>),
        row!("Ticket", Origin::Paper, true, mpsync::lock::Mutex<Ticket, ()>),
        row!("Ticket-np", Origin::Paper, true, mpsync::lock::Mutex<TicketNp, ()>),
        row!("TAS", Origin::Mpsync, true, mpsync::lock::Mutex<Tas, ()>),
        row!("Ticket-split", Origin::Mpsync, true, mpsync::lock::Mutex<TicketSplit, ()>),
        row!("Anderson", Origin::Mpsync, true, mpsync::lock::Mutex<Anderson, ()>),
        row!("CLH", Origin::Mpsync, true, mpsync::lock::Mutex<Clh, ()>),
        row!("MCS-TP", Origin::Mpsync, true, mpsync::lock::Mutex<McsTp, ()>),
        row!("CLH-TP", Origin::Mpsync, true, mpsync::lock::Mutex<ClhTp, ()>),
        row!("spin-then-park", Origin::Mpsync, false, mpsync::lock::Mutex<SpinThenPark, ()>),
        row!("bounded-steal", Origin::Mpsync, false, mpsync::lock::Mutex<BoundedSteal, ()>),
        row!("std::sync::Mutex", Origin::Peer, false, StdMutex),
        row!("parking_lot::Mutex", Origin::Peer, false, ParkingLot),
        row!(
            "spin::Mutex (spin)",
            Origin::Peer,
            true,
            SpinCrate<spin::relax::Spin>
        ),
        row!(
            "spin::Mutex (yield)",
            Origin::Peer,
            true,
            SpinCrate<spin::relax::Yield>
        ),
    ]
}

/// The rows named in `names`, in the table's order (names not in the table are
/// ignored, so an experiment lists the paper's set).
pub fn select(names: &[&str]) -> Vec<LockImpl> {
    mutex_table()
        .into_iter()
        .filter(|i| names.contains(&i.name) || i.origin == Origin::Peer)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn spec(iters: u64, cap: &Arc<Censor>) -> SyntheticSpec {
        SyntheticSpec {
            iters,
            cs_iters: 10,
            ncs_iters: 10,
            seed: 1,
            cap: Some(cap.clone()),
        }
    }

    #[test]
    fn a_run_inside_its_cap_completes() {
        let cap = Arc::new(Censor::new(Duration::from_secs(3600), 2 * 200));
        let body = synthetic::<mpsync::lock::Mutex<mpsync::lock::TasB, ()>>(&spec(200, &cap));
        body(0);
        body(1);
        assert_eq!(cap.completed(), 1.0);
    }

    #[test]
    fn a_run_past_its_cap_stops_and_reports_the_fraction_done() {
        let cap = Arc::new(Censor::new(Duration::ZERO, u64::MAX / 4));
        let body =
            synthetic::<mpsync::lock::Mutex<mpsync::lock::TasB, ()>>(&spec(u64::MAX / 4, &cap));
        body(0);
        let done = cap.completed();
        assert!(done < 1e-6, "{done}");
        // It stopped at its first check past the cap, having done some work.
        assert!(cap.done.load(std::sync::atomic::Ordering::Relaxed) >= 8);
    }
}
