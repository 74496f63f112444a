//! Torture for the non-blocking structures (`MsQueue`, `PljQueue`, `TreiberStack`,
//! and `LscqQueue` with segments of 2 cells, so that nearly every operation
//! meets a finalized segment) over every reclamation scheme and both node
//! allocators (LSCQ: its own segments), in the style of
//! Concurrency Kit's `validate/`:
//!
//! - **conservation**: every value put in comes out exactly once (none lost, none
//!   duplicated, none invented), and a queue hands each producer's values to each
//!   consumer in the producer's order; under real oversubscription (8 threads on
//!   the machine's cores) and under the emulated pseudo-scheduler at MP 3;
//! - **linearizability** of thousands of short recorded histories
//!   (`tests/common/lincheck.rs`);
//! - values left in a structure are **dropped exactly once** when it drops;
//! - **Michael's bound** on unreclaimed nodes holds for hazard pointers while a
//!   thread stalls holding hazards.
//!
//! Longer runs: `MPSYNC_TORTURE_SCALE=10 cargo test --release --test lockfree`.
//! (Real threads and Hart's magazines: not under loom; see `loom_lockfree.rs`.)
#![cfg(not(loom))]

mod common;

use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::lincheck::{Fifo, Lifo, Recorder, Spec, check_rounds, value};
use common::sized;
use common::stepper::Stepper;
use mpsync::ds::alloc::{MagazineAlloc, NodeAlloc, SystemAlloc};
use mpsync::ds::lscq::LscqQueue;
use mpsync::ds::ms_queue::MsQueue;
use mpsync::ds::plj_queue::PljQueue;
use mpsync::ds::treiber::TreiberStack;
use mpsync::ds::{QueueHandle, StackHandle};
use mpsync::reclaim::{Ebr, Guard, HazardPointers, Leak, Local, Qsbr, Reclaimer};
use mpsync::sched::emulated::{Emulated, EmulatedConfig};
use mpsync::sched::stall::{self, Trap};
use mpsync::sync::{Arc, AtomicPtr};
use mpsync::util::busy::BusyWork;

/// Serializes the tests that start a pseudo-scheduler (one signal handler per process).
static EMU: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn scale() -> u64 {
    std::env::var("MPSYNC_TORTURE_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Put/take through one thread's handle, whatever the structure.
trait Ops {
    fn put(&mut self, v: u64);
    fn take(&mut self) -> Option<u64>;
}

struct Q<H>(H);
impl<H: QueueHandle<u64>> Ops for Q<H> {
    fn put(&mut self, v: u64) {
        self.0.enqueue(v)
    }
    fn take(&mut self) -> Option<u64> {
        self.0.dequeue()
    }
}

struct S<H>(H);
impl<H: StackHandle<u64>> Ops for S<H> {
    fn put(&mut self, v: u64) {
        self.0.push(v)
    }
    fn take(&mut self) -> Option<u64> {
        self.0.pop()
    }
}

/// A structure under test.
trait Ds: Send + Sync + Sized {
    type R: Reclaimer;
    /// Whether it is FIFO (else LIFO).
    const FIFO: bool;
    fn make(domain: Arc<Self::R>) -> Self;
    fn with_handle<T>(&self, f: impl FnOnce(&mut dyn Ops) -> T) -> T;
}

impl<R: Reclaimer, A: NodeAlloc> Ds for MsQueue<u64, R, A> {
    type R = R;
    const FIFO: bool = true;
    fn make(d: Arc<R>) -> Self {
        MsQueue::with_domain(d)
    }
    fn with_handle<T>(&self, f: impl FnOnce(&mut dyn Ops) -> T) -> T {
        f(&mut Q(self.handle()))
    }
}

impl<R: Reclaimer, A: NodeAlloc> Ds for PljQueue<u64, R, A> {
    type R = R;
    const FIFO: bool = true;
    fn make(d: Arc<R>) -> Self {
        PljQueue::with_domain(d)
    }
    fn with_handle<T>(&self, f: impl FnOnce(&mut dyn Ops) -> T) -> T {
        f(&mut Q(self.handle()))
    }
}

impl<R: Reclaimer, A: NodeAlloc> Ds for TreiberStack<u64, R, A> {
    type R = R;
    const FIFO: bool = false;
    fn make(d: Arc<R>) -> Self {
        TreiberStack::with_domain(d)
    }
    fn with_handle<T>(&self, f: impl FnOnce(&mut dyn Ops) -> T) -> T {
        f(&mut S(self.handle()))
    }
}

/// LSCQ with segments of [`LSCQ_CELLS`] cells: the tests' few values cross
/// segments all the time (finalization, linking, the head's move, retirement).
impl<R: Reclaimer> Ds for LscqQueue<u64, R> {
    type R = R;
    const FIFO: bool = true;
    fn make(d: Arc<R>) -> Self {
        LscqQueue::with_domain_and_segment_capacity(d, LSCQ_CELLS).expect("above 0")
    }
    fn with_handle<T>(&self, f: impl FnOnce(&mut dyn Ops) -> T) -> T {
        f(&mut Q(self.handle()))
    }
}

/// Cells per LSCQ segment asked for in these tests: 1, which gives the
/// smallest segments there are (2 cells).
const LSCQ_CELLS: usize = 1;

/// A fresh domain of each scheme (hazard pointers: the 2 slots the queues need).
trait Domain: Reclaimer + Sized {
    fn fresh() -> Arc<Self>;
}
impl Domain for Qsbr {
    fn fresh() -> Arc<Self> {
        Arc::new(Qsbr::new())
    }
}
impl Domain for Ebr {
    fn fresh() -> Arc<Self> {
        Arc::new(Ebr::new())
    }
}
impl Domain for HazardPointers {
    fn fresh() -> Arc<Self> {
        Arc::new(HazardPointers::new(2).expect("2 slots"))
    }
}
impl Domain for Leak {
    fn fresh() -> Arc<Self> {
        Arc::new(Leak::new())
    }
}

/// Thread `t`'s `i`-th value.
fn val(t: u64, i: u64) -> u64 {
    (t << 32) | i
}

/// Checks that `taken` (per taker, in the order taken) plus `rest` is exactly
/// `val(t, i)` for `t < threads`, `i < per` once each, and for a FIFO that every
/// taker saw each producer's values in increasing order.
fn check_conserved(fifo: bool, threads: u64, per: &[u64], taken: &[Vec<u64>], rest: &[u64]) {
    let mut seen: Vec<Vec<u8>> = per.iter().map(|&n| vec![0u8; n as usize]).collect();
    let mut count = |v: u64| {
        let (t, i) = ((v >> 32) as usize, (v & 0xffff_ffff) as usize);
        assert!(
            t < threads as usize && i < per[t] as usize,
            "invented value {v:#x}"
        );
        seen[t][i] += 1;
        assert_eq!(seen[t][i], 1, "value {v:#x} came out twice");
    };
    for list in taken {
        for &v in list {
            count(v);
        }
    }
    for &v in rest {
        count(v);
    }
    for (t, s) in seen.iter().enumerate() {
        if let Some(i) = s.iter().position(|&c| c == 0) {
            panic!("value {:#x} was lost", val(t as u64, i as u64));
        }
    }
    if fifo {
        for list in taken {
            let mut last = vec![None::<u64>; threads as usize];
            for &v in list {
                let t = (v >> 32) as usize;
                assert!(
                    last[t].is_none_or(|l| l < v),
                    "FIFO order broken: {v:#x} after {:#x}",
                    last[t].unwrap_or(0)
                );
                last[t] = Some(v);
            }
        }
    }
}

/// Drains what is left, through a fresh handle.
fn drain<D: Ds>(ds: &D) -> Vec<u64> {
    ds.with_handle(|h| std::iter::from_fn(|| h.take()).collect())
}

/// 8 threads on this machine's cores, each putting `ops` values and taking after
/// each put (sometimes twice, sometimes not), so the structure stays short and
/// nodes are retired and reused all the time.
fn oversubscribed<D: Ds>()
where
    D::R: Domain,
{
    let threads = 8u64;
    let ops = sized(
        if cfg!(debug_assertions) {
            3_000
        } else {
            20_000
        },
        4,
    ) * scale();
    let ds = D::make(D::R::fresh());
    let go = Barrier::new(threads as usize);
    let taken: Vec<Vec<u64>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (ds, go) = (&ds, &go);
                sc.spawn(move || {
                    ds.with_handle(|h| {
                        go.wait();
                        let mut got = Vec::with_capacity(ops as usize);
                        for i in 0..ops {
                            h.put(val(t, i));
                            let takes = [1, 1, 2, 0][((i + t) % 4) as usize];
                            for _ in 0..takes {
                                got.extend(h.take());
                            }
                        }
                        got
                    })
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let rest = drain(&ds);
    check_conserved(
        D::FIFO,
        threads,
        &vec![ops; threads as usize],
        &taken,
        &rest,
    );
}

/// Under the emulated pseudo-scheduler at MP 3 with a short quantum: workers are
/// preempted thousands of times, inside operations too, for a fixed wall time.
fn emulated_mp3<D: Ds>()
where
    D::R: Domain,
{
    let _serial = EMU.lock().unwrap_or_else(|e| e.into_inner());
    let procs = cores().min(4) as u32;
    let cfg = EmulatedConfig::new(procs, 3.0)
        .expect("valid config")
        .quantum(Duration::from_millis(2))
        .extension_bound(Duration::from_micros(500))
        .seed(11);
    let emu = Emulated::start(cfg).expect("pseudo-scheduler starts");
    let run = Duration::from_millis(200 * scale());
    let ds = D::make(D::R::fresh());
    let go = Barrier::new(procs as usize);
    let per: Vec<AtomicU64> = (0..procs).map(|_| AtomicU64::new(0)).collect();
    let taken: Vec<Vec<u64>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..procs)
            .map(|v| {
                let (ds, go, emu, per) = (&ds, &go, &emu, &per);
                sc.spawn(move || {
                    let _att = emu.attach(v).expect("attach");
                    ds.with_handle(|h| {
                        go.wait();
                        let end = Instant::now() + run;
                        let mut got = Vec::new();
                        let mut i = 0u64;
                        while Instant::now() < end {
                            h.put(val(u64::from(v), i));
                            if i % 3 != 2 {
                                got.extend(h.take());
                            }
                            BusyWork::global().run_ns(500);
                            i += 1;
                        }
                        // Relaxed: read after the scope joins.
                        per[v as usize].store(i, Ordering::Relaxed);
                        got
                    })
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let stats = emu.stop();
    let rest = drain(&ds);
    let per: Vec<u64> = per.iter().map(|p| p.load(Ordering::Relaxed)).collect();
    check_conserved(D::FIFO, u64::from(procs), &per, &taken, &rest);
    assert!(
        stats.preemptions + stats.warnings > 10,
        "the scheduler barely intervened: {stats:?}"
    );
}

/// 10,000 rounds of 3 threads × 4 operations, each history checked.
fn linearizable<D: Ds, Sp: Spec>()
where
    D::R: Domain,
{
    let rounds = sized(
        if cfg!(debug_assertions) {
            2_000
        } else {
            10_000
        },
        4,
    ) as usize;
    let n = check_rounds::<D, Sp, _, _>(
        rounds,
        3,
        || D::make(D::R::fresh()),
        |ds: &D, t, round, rec: &mut Recorder| {
            ds.with_handle(|h| {
                for i in 0..2 {
                    rec.put(value(t, round, i, false), |v| h.put(v));
                    rec.take(|| h.take());
                }
            })
        },
    )
    .unwrap_or_else(|e| panic!("not linearizable: {e}"));
    assert_eq!(n, rounds);
}

macro_rules! per_scheme {
    ($($name:ident: $ds:ident, $r:ty, $spec:ty;)*) => {$(
        mod $name {
            use super::*;
            type Sys = $ds<u64, $r, SystemAlloc>;
            type Mag = $ds<u64, $r, MagazineAlloc>;
            #[test]
            fn oversubscribed_system() { oversubscribed::<Sys>() }
            #[test]
            fn oversubscribed_magazines() { oversubscribed::<Mag>() }
            #[test]
            fn emulated_mp3_system() { emulated_mp3::<Sys>() }
            #[test]
            fn emulated_mp3_magazines() { emulated_mp3::<Mag>() }
            #[test]
            fn linearizable_histories() { linearizable::<Sys, $spec>() }
        }
    )*};
}

per_scheme! {
    ms_qsbr: MsQueue, Qsbr, Fifo;
    ms_ebr: MsQueue, Ebr, Fifo;
    ms_hp: MsQueue, HazardPointers, Fifo;
    ms_leak: MsQueue, Leak, Fifo;
    plj_qsbr: PljQueue, Qsbr, Fifo;
    plj_ebr: PljQueue, Ebr, Fifo;
    plj_hp: PljQueue, HazardPointers, Fifo;
    plj_leak: PljQueue, Leak, Fifo;
    treiber_qsbr: TreiberStack, Qsbr, Lifo;
    treiber_ebr: TreiberStack, Ebr, Lifo;
    treiber_hp: TreiberStack, HazardPointers, Lifo;
    treiber_leak: TreiberStack, Leak, Lifo;
}

/// The LSCQ rows: its segments are its own (no node allocator).
macro_rules! lscq_per_scheme {
    ($($name:ident: $r:ty;)*) => {$(
        mod $name {
            use super::*;
            type L = LscqQueue<u64, $r>;
            #[test]
            fn oversubscribed_system() { oversubscribed::<L>() }
            #[test]
            fn emulated_mp3_system() { emulated_mp3::<L>() }
            #[test]
            fn linearizable_histories() { linearizable::<L, Fifo>() }
        }
    )*};
}

lscq_per_scheme! {
    lscq_qsbr: Qsbr;
    lscq_ebr: Ebr;
    lscq_hp: HazardPointers;
    lscq_leak: Leak;
}

/// Counts its drops.
struct Counted(&'static AtomicUsize);
impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// 4 threads put 500 values each and take 200 each; dropping the structure drops
/// the other 1,200, each once (and the taken ones were dropped by the takers).
fn dropped_once<R: Domain>(drops: &'static AtomicUsize) {
    let q1: MsQueue<Counted, R> = MsQueue::with_domain(R::fresh());
    let q2: PljQueue<Counted, R> = PljQueue::with_domain(R::fresh());
    let s: TreiberStack<Counted, R> = TreiberStack::with_domain(R::fresh());
    std::thread::scope(|sc| {
        for _ in 0..4 {
            let (q1, q2, s) = (&q1, &q2, &s);
            sc.spawn(move || {
                let (mut a, mut b, mut c) = (q1.handle(), q2.handle(), s.handle());
                for i in 0..500 {
                    a.enqueue(Counted(drops));
                    b.enqueue(Counted(drops));
                    c.push(Counted(drops));
                    if i % 5 < 2 {
                        drop(a.dequeue().expect("non-empty: we just put one"));
                        drop(b.dequeue().expect("non-empty"));
                        drop(c.pop().expect("non-empty"));
                    }
                }
            });
        }
    });
    assert_eq!(drops.load(Ordering::Relaxed), 3 * 4 * 200);
    drop((q1, q2, s));
    assert_eq!(drops.load(Ordering::Relaxed), 3 * 4 * 500);
}

#[test]
fn values_left_inside_are_dropped_exactly_once() {
    static D1: AtomicUsize = AtomicUsize::new(0);
    static D2: AtomicUsize = AtomicUsize::new(0);
    static D3: AtomicUsize = AtomicUsize::new(0);
    static D4: AtomicUsize = AtomicUsize::new(0);
    dropped_once::<Qsbr>(&D1);
    dropped_once::<Ebr>(&D2);
    dropped_once::<HazardPointers>(&D3);
    dropped_once::<Leak>(&D4);
}

/// One thread registers and stalls holding two hazards (as if preempted inside an
/// operation) while three others run put/take pairs on all three structures in
/// the same domain; unreclaimed nodes never exceed Michael's bound N·R.
#[test]
fn hp_bound_holds_while_a_thread_stalls_inside_an_operation() {
    let domain = HazardPointers::fresh();
    let ms: MsQueue<u64, HazardPointers> = MsQueue::with_domain(domain.clone());
    let plj: PljQueue<u64, HazardPointers> = PljQueue::with_domain(domain.clone());
    let st: TreiberStack<u64, HazardPointers> = TreiberStack::with_domain(domain.clone());
    let workers = 3;
    let ops = sized(
        if cfg!(debug_assertions) {
            5_000
        } else {
            30_000
        },
        4,
    );
    let stalled = Barrier::new(workers + 1);
    // The stalled thread waits here, off the processor (a spinning one would
    // take a core from the workers: 2 of them on this machine).
    let release = Barrier::new(2);
    let worst = AtomicU64::new(0);
    let bound = AtomicU64::new(u64::MAX);
    std::thread::scope(|sc| {
        {
            let (domain, stalled, release) = (&domain, &stalled, &release);
            sc.spawn(move || {
                let local = HazardPointers::register(domain);
                let mine = AtomicPtr::new(Box::into_raw(Box::new(7u64)));
                let g = local.enter();
                g.protect_raw(0, &mine);
                g.protect_raw(1, &mine);
                stalled.wait();
                release.wait();
                drop(g);
                // SAFETY: our own box, never shared beyond this thread.
                drop(unsafe { Box::from_raw(mine.load(Ordering::Relaxed)) });
            });
        }
        let hs: Vec<_> = (0..workers)
            .map(|w| {
                let (domain, stalled, ms, plj, st, worst, bound) =
                    (&domain, &stalled, &ms, &plj, &st, &worst, &bound);
                sc.spawn(move || {
                    let (mut a, mut b, mut c) = (ms.handle(), plj.handle(), st.handle());
                    stalled.wait();
                    // Everyone is registered now: N and R are final.
                    let n_r = (domain.records() * domain.scan_threshold()) as u64;
                    bound.fetch_min(n_r, Ordering::Relaxed);
                    for i in 0..ops {
                        a.enqueue(i);
                        b.enqueue(i);
                        c.push(i);
                        a.dequeue().expect("non-empty");
                        b.dequeue().expect("non-empty");
                        c.pop().expect("non-empty");
                        if (i + w as u64).is_multiple_of(64) {
                            let p = domain.stats().pending;
                            worst.fetch_max(p, Ordering::Relaxed);
                            assert!(p <= n_r, "{p} pending > N·R = {n_r}");
                        }
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        release.wait();
    });
    let (worst, bound) = (worst.into_inner(), bound.into_inner());
    let retired = domain.stats().retired;
    assert_eq!(retired, 3 * workers as u64 * ops, "one node per take");
    assert!(worst <= bound, "worst {worst} > N·R = {bound}");
    assert!(
        worst > 0,
        "never saw a pending node: the sampling is broken"
    );
}

/// Runs `f`, which must panic saying that its `Local` belongs to another domain.
fn rejects_foreign_local(what: &str, f: impl FnOnce()) {
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .expect_err(&format!("{what}: a Local of another domain was accepted"));
    let msg = err
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| err.downcast_ref::<&str>().copied())
        .unwrap_or("");
    assert!(
        msg.contains("registered with another reclamation domain"),
        "{what}: {msg}"
    );
}

/// Every operation that takes an explicit `Local` rejects one registered with
/// another domain (with hazard pointers it would publish its hazards where this
/// structure's retirers never look: a use after free from safe code).
fn foreign_locals_rejected<R: Domain>() {
    let ms: MsQueue<u64, R> = MsQueue::with_domain(R::fresh());
    let plj: PljQueue<u64, R> = PljQueue::with_domain(R::fresh());
    let st: TreiberStack<u64, R> = TreiberStack::with_domain(R::fresh());
    let other = R::fresh();
    let foreign = R::register(&other);
    let n = R::NAME;
    rejects_foreign_local(&format!("MsQueue::enqueue {n}"), || ms.enqueue(&foreign, 1));
    rejects_foreign_local(&format!("MsQueue::dequeue {n}"), || {
        ms.dequeue(&foreign);
    });
    rejects_foreign_local(&format!("MsQueue::is_empty {n}"), || {
        ms.is_empty(&foreign);
    });
    rejects_foreign_local(&format!("PljQueue::enqueue {n}"), || {
        plj.enqueue(&foreign, 1)
    });
    rejects_foreign_local(&format!("PljQueue::dequeue {n}"), || {
        plj.dequeue(&foreign);
    });
    rejects_foreign_local(&format!("PljQueue::is_empty {n}"), || {
        plj.is_empty(&foreign);
    });
    let lscq: LscqQueue<u64, R> = LscqQueue::with_domain(R::fresh());
    rejects_foreign_local(&format!("LscqQueue::enqueue {n}"), || {
        lscq.enqueue(&foreign, 1)
    });
    rejects_foreign_local(&format!("LscqQueue::dequeue {n}"), || {
        lscq.dequeue(&foreign);
    });
    rejects_foreign_local(&format!("TreiberStack::push {n}"), || st.push(&foreign, 1));
    rejects_foreign_local(&format!("TreiberStack::pop {n}"), || {
        st.pop(&foreign);
    });
    // A registration in the structure's own domain works, shared or not.
    let own = R::register(ms.domain());
    ms.enqueue(&own, 5);
    assert_eq!(ms.dequeue(&own), Some(5));
    let shared: MsQueue<u64, R> = MsQueue::with_domain(ms.domain().clone());
    shared.enqueue(&own, 6);
    assert_eq!(shared.dequeue(&own), Some(6));
}

#[test]
fn a_local_of_another_domain_is_rejected() {
    foreign_locals_rejected::<HazardPointers>();
    foreign_locals_rejected::<Ebr>();
    foreign_locals_rejected::<Qsbr>();
    foreign_locals_rejected::<Leak>();
}

/// A node allocator that scribbles `0xdd` over a node when it is freed and keeps
/// its memory (leaked: a few nodes per test), so that a read of a freed node's
/// value sees the scribble deterministically.
#[derive(Debug)]
struct Scribble;

impl NodeAlloc for Scribble {
    const NAME: &'static str = "scribble";

    fn alloc<T>(value: T) -> std::ptr::NonNull<T> {
        std::ptr::NonNull::from(Box::leak(Box::new(value)))
    }

    unsafe fn free<T>(p: *mut u8) {
        // SAFETY: `p` came from `alloc::<T>` (the trait's contract), so it has
        // `size_of::<T>()` writable bytes; the memory is never given back.
        unsafe { std::ptr::write_bytes(p, 0xdd, std::mem::size_of::<T>()) };
    }
}

/// Domains that free as early as each scheme allows (HP: scan at every retire,
/// 2 slots; EBR: try to advance at every critical section).
trait Eager: Reclaimer + Sized {
    fn eager() -> Arc<Self>;
}
impl Eager for HazardPointers {
    fn eager() -> Arc<Self> {
        Arc::new(HazardPointers::with_threshold(2, 1).expect("valid"))
    }
}
impl Eager for Ebr {
    fn eager() -> Arc<Self> {
        Arc::new(Ebr::with_advance_every(1).expect("valid"))
    }
}
impl Eager for Qsbr {
    fn eager() -> Arc<Self> {
        Arc::new(Qsbr::new())
    }
}

const STOPPED_IN_TIME: Duration = Duration::from_secs(10);

/// Lets the domain free what it can now (every scheme's way).
fn reclaim_now<L: Local>(l: &mut L) {
    for _ in 0..4 {
        drop(l.enter());
        l.quiescent();
    }
}

/// A dequeuer stops right after its head CAS (`MS_DEQUEUE_SWUNG`: `head` moved
/// from the dummy to N1, N1's value not yet read); two more dequeues move `head`
/// past N1 and N2 and retire them (the second retire's scan no longer sees the
/// dequeuer's own hazard on N1), and the domain frees what it can. N1 must still
/// be protected (hazard slot 1 under HP): the stopped dequeuer reads 1, not the
/// scribble of a freed node.
fn ms_value_read_after_the_swing_is_protected<R: Eager>() {
    let q = Arc::new(MsQueue::<u64, R, Scribble>::with_domain(R::eager()));
    let mut main = R::register(q.domain());
    for v in 1..=4 {
        q.enqueue(&main, v);
    }
    let mut victim = Stepper::spawn({
        let q = q.clone();
        move || R::register(q.domain())
    });
    let trap = Trap::at(stall::MS_DEQUEUE_SWUNG).thread(victim.id()).arm();
    let (tx, rx) = std::sync::mpsc::channel();
    victim.start({
        let q = q.clone();
        move |l: &mut R::Local| tx.send(q.dequeue(l)).unwrap()
    });
    trap.wait_hit(STOPPED_IN_TIME).unwrap();
    assert_eq!(q.dequeue(&main), Some(2));
    assert_eq!(q.dequeue(&main), Some(3));
    reclaim_now(&mut main);
    trap.release();
    victim.wait();
    assert_eq!(
        rx.recv().unwrap(),
        Some(1),
        "{}: the dequeuer read its value from a freed node",
        R::NAME
    );
    assert_eq!(q.dequeue(&main), Some(4));
}

#[test]
fn ms_value_read_after_the_swing_is_protected_hp() {
    ms_value_read_after_the_swing_is_protected::<HazardPointers>();
}

#[test]
fn ms_value_read_after_the_swing_is_protected_ebr_qsbr() {
    ms_value_read_after_the_swing_is_protected::<Ebr>();
    ms_value_read_after_the_swing_is_protected::<Qsbr>();
}

/// A popper stops with the top (3) protected and its `next` not yet read
/// (`TREIBER_POP_READ`); another thread pops 3 and 2 meanwhile, and the domain
/// frees what it can. The stopped pop must notice that the top changed (its CAS
/// fails) and pop 1: a pop that installs its stale `next` (a store instead of
/// the CAS) would hand out 3 twice and resurrect 2.
fn treiber_pop_with_a_stale_top_retries<R: Eager>() {
    let s = Arc::new(TreiberStack::<u64, R, Scribble>::with_domain(R::eager()));
    let mut main = R::register(s.domain());
    for v in 1..=3 {
        s.push(&main, v);
    }
    let mut victim = Stepper::spawn({
        let s = s.clone();
        move || R::register(s.domain())
    });
    let trap = Trap::at(stall::TREIBER_POP_READ).thread(victim.id()).arm();
    let (tx, rx) = std::sync::mpsc::channel();
    victim.start({
        let s = s.clone();
        move |l: &mut R::Local| tx.send(s.pop(l)).unwrap()
    });
    trap.wait_hit(STOPPED_IN_TIME).unwrap();
    assert_eq!(s.pop(&main), Some(3));
    assert_eq!(s.pop(&main), Some(2));
    reclaim_now(&mut main);
    trap.release();
    victim.wait();
    assert_eq!(rx.recv().unwrap(), Some(1), "{}", R::NAME);
    assert_eq!(s.pop(&main), None, "{}: a popped node came back", R::NAME);
}

#[test]
fn treiber_pop_with_a_stale_top_retries_every_scheme() {
    treiber_pop_with_a_stale_top_retries::<HazardPointers>();
    treiber_pop_with_a_stale_top_retries::<Ebr>();
    treiber_pop_with_a_stale_top_retries::<Qsbr>();
}

/// The handle-free API (`ds::handle::Auto`) under real oversubscription: 6
/// threads on 2 cores enqueue distinct values and dequeue through `&self` only
/// (cached registrations, parked after every operation); half of them exit
/// early, so live threads keep working beside the cached registrations of exited
/// ones. Conservation: every value is dequeued exactly once (here or in the final
/// drain), and the scheme reclaims while the run goes on (an exited thread's
/// registration does not hold it up).
fn auto_queue_conservation<R: Reclaimer>(domain: R) {
    use mpsync::ds::handle::Auto;
    const THREADS: u64 = 6;
    let per = sized(20_000, 8);
    let q: Auto<MsQueue<u64, R>> = Auto::wrap(MsQueue::with_domain(Arc::new(domain)));
    let seen: Vec<AtomicU64> = (0..THREADS * per).map(|_| AtomicU64::new(0)).collect();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (q, seen) = (&q, &seen);
            s.spawn(move || {
                // The early leavers do a tenth of the work.
                let n = if t % 2 == 0 { per } else { per / 10 };
                for i in 0..n {
                    q.enqueue(t * per + i);
                    if let Some(v) = q.dequeue() {
                        seen[v as usize].fetch_add(1, Ordering::Relaxed);
                    }
                }
                for i in n..per {
                    // Enqueued but left for others (and the drain) to take.
                    q.enqueue(t * per + i);
                }
            });
        }
    });
    while let Some(v) = q.dequeue() {
        seen[v as usize].fetch_add(1, Ordering::Relaxed);
    }
    for (v, c) in seen.iter().enumerate() {
        assert_eq!(c.load(Ordering::Relaxed), 1, "{}: value {v}", R::NAME);
    }
    let st = q.inner().domain().stats();
    assert!(st.retired >= THREADS * per, "{}: {st:?}", R::NAME);
    assert!(st.freed > 0, "{}: nothing reclaimed: {st:?}", R::NAME);
    assert_eq!(st.freed + st.pending, st.retired, "{}: {st:?}", R::NAME);
    // Every worker has exited; their cached registrations stay in the cache. This
    // thread alone must still get its own nodes reclaimed.
    for i in 0..1_000 {
        q.enqueue(i);
        assert_eq!(q.dequeue(), Some(i));
    }
    let after = q.inner().domain().stats();
    assert!(
        after.freed >= st.freed + 500,
        "{}: exited threads' registrations hold reclamation up: {st:?} then {after:?}",
        R::NAME
    );
}

#[test]
fn auto_api_conserves_values_under_oversubscription() {
    auto_queue_conservation(Qsbr::new());
    auto_queue_conservation(Ebr::new());
    auto_queue_conservation(HazardPointers::new(2).unwrap());
}
