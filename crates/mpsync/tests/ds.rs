//! Torture tests of the queues, stacks, priority queues and counters, in the style
//! of Concurrency Kit's `validate/`:
//!
//! - **conservation**: every value put is taken exactly once (nothing lost,
//!   duplicated or invented), under real oversubscription (8 threads on this
//!   machine's cores) and under the emulated pseudo-scheduler at MP 3; queues also
//!   keep each producer's values in order, counters hand out every value once;
//! - **heap order**: after the inserts stop, the values each thread drains with
//!   `delete_min` come out sorted;
//! - **linearizability**: thousands of short recorded histories checked by
//!   `tests/common/lincheck` against the sequential specification;
//! - **drop**: a structure dropped while still holding values drops each once.
//!
//! Lock-based structures run with TAS-B and its no-preempt form; the Herlihy
//! structures with every reclamation scheme.
//!
//! Longer runs: `MPSYNC_TORTURE_SCALE=10 cargo test --release --test ds`.

mod common;

use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::lincheck::{Fifo, Lifo, MinPq, Spec, check_rounds, value};
use common::sized;
use mpsync::ds::binary_heap::LockedBinaryHeap;
use mpsync::ds::counter::{CasCounter, FetchAddCounter, LockedCounter};
use mpsync::ds::elimination::EliminationStack;
use mpsync::ds::heap::{HerlihySkewHeap, LockedSkewHeap};
use mpsync::ds::queue::{LockedQueue, TwoLockQueue};
use mpsync::ds::scq::ScqQueue;
use mpsync::ds::stack::{HerlihyStack, LockedStack};
use mpsync::ds::{
    ConcurrentPriorityQueue, ConcurrentQueue, ConcurrentStack, Counter, PriorityQueueHandle,
    QueueHandle, StackHandle,
};
use mpsync::lock::{TasB, TasBNp};
use mpsync::reclaim::{Ebr, HazardPointers, Leak, Qsbr, Reclaimer};
use mpsync::sched::emulated::{Emulated, EmulatedConfig};
use mpsync::sync::Arc;

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

/// What kind of container a structure is, for the checks that differ.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Fifo,
    Lifo,
    MinPq,
}

/// Any of the three container families, through one interface for the tests.
trait Bag: Send + Sync {
    type H<'a>: BagHandle
    where
        Self: 'a;
    const KIND: Kind;
    fn h(&self) -> Self::H<'_>;
}

trait BagHandle {
    fn put(&mut self, v: u64);
    fn take(&mut self) -> Option<u64>;
}

struct Q<D>(D);
struct S<D>(D);
struct P<D>(D);
struct QH<H>(H);
struct SH<H>(H);
struct PH<H>(H);

impl<D: ConcurrentQueue<u64>> Bag for Q<D> {
    type H<'a>
        = QH<D::Handle<'a>>
    where
        Self: 'a;
    const KIND: Kind = Kind::Fifo;
    fn h(&self) -> Self::H<'_> {
        QH(self.0.handle())
    }
}
impl<H: QueueHandle<u64>> BagHandle for QH<H> {
    fn put(&mut self, v: u64) {
        self.0.enqueue(v)
    }
    fn take(&mut self) -> Option<u64> {
        self.0.dequeue()
    }
}
impl<D: ConcurrentStack<u64>> Bag for S<D> {
    type H<'a>
        = SH<D::Handle<'a>>
    where
        Self: 'a;
    const KIND: Kind = Kind::Lifo;
    fn h(&self) -> Self::H<'_> {
        SH(self.0.handle())
    }
}
impl<H: StackHandle<u64>> BagHandle for SH<H> {
    fn put(&mut self, v: u64) {
        self.0.push(v)
    }
    fn take(&mut self) -> Option<u64> {
        self.0.pop()
    }
}
impl<D: ConcurrentPriorityQueue<u64>> Bag for P<D> {
    type H<'a>
        = PH<D::Handle<'a>>
    where
        Self: 'a;
    const KIND: Kind = Kind::MinPq;
    fn h(&self) -> Self::H<'_> {
        PH(self.0.handle())
    }
}
impl<H: PriorityQueueHandle<u64>> BagHandle for PH<H> {
    fn put(&mut self, v: u64) {
        self.0.insert(v)
    }
    fn take(&mut self) -> Option<u64> {
        self.0.delete_min()
    }
}

/// The value thread `t` puts as its `i`-th: unique, and carrying its producer.
/// Heaps get a scrambled order so that the merge paths vary.
fn tagged(kind: Kind, t: u64, i: u64) -> u64 {
    let low = if kind == Kind::MinPq {
        (i.wrapping_mul(0x9E37_79B9) & 0xFFFF) << 20 | i
    } else {
        i
    };
    low << 8 | t
}

/// What one worker took: in the mixed phase, then in the drain phase.
struct Taken {
    mixed: Vec<u64>,
    drained: Vec<u64>,
}

/// `threads` workers each put values and take some back until `stop(i)` says so,
/// then (after a barrier, no more puts) drain the structure together. Checks
/// conservation, per-producer FIFO order for queues, and that each thread's drain of
/// a heap is sorted. Runs each worker inside `wrap` (to attach it to a vproc).
fn conservation<B: Bag>(
    bag: &B,
    threads: u64,
    stop: impl Fn(u64) -> bool + Sync,
    wrap: impl Fn(u64, &mut dyn FnMut()) + Sync,
) -> u64 {
    let go = Barrier::new(threads as usize);
    let drain = Barrier::new(threads as usize);
    let put_counts: Vec<AtomicU64> = (0..threads).map(|_| AtomicU64::new(0)).collect();
    let taken: Vec<Taken> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (go, drain, put_counts, stop, wrap) = (&go, &drain, &put_counts, &stop, &wrap);
                sc.spawn(move || {
                    let mut out = Taken {
                        mixed: Vec::new(),
                        drained: Vec::new(),
                    };
                    wrap(t, &mut || {
                        let mut h = bag.h();
                        go.wait();
                        let mut i = 0;
                        while !stop(i) {
                            h.put(tagged(B::KIND, t, i));
                            // Take a little less than we put, so the structure is
                            // never long empty and never grows without bound.
                            if i % 8 != 7 {
                                out.mixed.extend(h.take());
                            }
                            i += 1;
                        }
                        put_counts[t as usize].store(i, Ordering::Relaxed);
                        drain.wait();
                        while let Some(v) = h.take() {
                            out.drained.push(v);
                        }
                    });
                    out
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    if B::KIND == Kind::MinPq {
        for (t, tk) in taken.iter().enumerate() {
            assert!(
                tk.drained.windows(2).all(|w| w[0] <= w[1]),
                "thread {t}'s delete_mins after the inserts stopped are not sorted"
            );
        }
    }
    if B::KIND == Kind::Fifo {
        // A consumer sees each producer's values in the order they were put.
        for tk in &taken {
            let mut last = vec![None; threads as usize];
            for &v in tk.mixed.iter().chain(&tk.drained) {
                let p = (v & 0xFF) as usize;
                assert!(last[p] < Some(v), "producer {p}'s values out of order");
                last[p] = Some(v);
            }
        }
    }
    let mut got: Vec<u64> = taken
        .into_iter()
        .flat_map(|tk| tk.mixed.into_iter().chain(tk.drained))
        .collect();
    got.sort_unstable();
    let mut want: Vec<u64> = (0..threads)
        .flat_map(|t| {
            let n = put_counts[t as usize].load(Ordering::Relaxed);
            (0..n).map(move |i| tagged(B::KIND, t, i))
        })
        .collect();
    want.sort_unstable();
    assert_eq!(got.len(), want.len(), "values lost or duplicated");
    assert!(got == want, "values lost, duplicated or invented");
    want.len() as u64
}

/// 8 threads on this machine's cores: Linux preempts them anywhere (and, in the
/// chaos build, so does the perturbation of every atomic operation).
fn oversubscribed<B: Bag>(bag: B) {
    let per = sized(50_000, 25) * scale();
    let n = conservation(&bag, 8, |i| i >= per, |_, f| f());
    assert_eq!(n, 8 * per);
}

/// Starts the pseudo-scheduler at MP 3 with a short quantum and runs `body(emu,
/// procs)`; checks the scheduler really intervened.
fn under_emulation(body: impl FnOnce(&Emulated, u32)) {
    let _serial = EMU.lock().unwrap_or_else(|e| e.into_inner());
    let procs = cores().min(4) as u32;
    let cfg = EmulatedConfig::new(procs, 3.0)
        .expect("valid config")
        .quantum(Duration::from_millis(2))
        .extension_bound(Duration::from_micros(500))
        .seed(11);
    let emu = Emulated::start(cfg).expect("pseudo-scheduler starts");
    body(&emu, procs);
    let stats = emu.stop();
    assert!(
        stats.preemptions + stats.warnings > 5,
        "the scheduler barely intervened: {stats:?}"
    );
}

/// One worker per virtual processor for a fixed wall time, preempted by the
/// pseudo-scheduler (also inside critical sections and between CAS attempts).
fn emulated_mp3<B: Bag>(bag: B) {
    under_emulation(|emu, procs| {
        let end = Instant::now() + Duration::from_millis(150 * scale());
        let n = conservation(
            &bag,
            procs.into(),
            |i| i % 64 == 0 && Instant::now() >= end,
            |t, f| {
                let _att = emu.attach(t as u32).expect("attach");
                f();
            },
        );
        assert!(n > 0);
    });
}

/// Lincheck: `rounds` histories of 3 threads × (put, take, put, take).
fn linearizable<B: Bag, Sp: Spec>(rounds: usize, make: impl Fn() -> B) {
    let heap = B::KIND == Kind::MinPq;
    let n = check_rounds::<B, Sp, _, _>(rounds, 3, make, |b, t, round, rec| {
        let mut h = b.h();
        for i in 0..2 {
            rec.put(value(t, round, i, heap), |v| h.put(v));
            rec.take(|| h.take());
        }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(n, rounds);
}

fn lin_rounds() -> usize {
    (sized(10_000, 10) * scale()) as usize
}

/// Every test for one container structure: `$wrap` is `Q`, `S` or `P`.
macro_rules! bag_tests {
    ($($name:ident: $wrap:ident, $spec:ty, $make:expr;)*) => {$(
        mod $name {
            use super::*;
            #[test]
            fn oversubscribed_8_threads() { oversubscribed($wrap($make)) }
            #[test]
            fn emulated_mp_3() { emulated_mp3($wrap($make)) }
            #[test]
            fn linearizable() { super::linearizable::<_, $spec>(lin_rounds(), || $wrap($make)) }
        }
    )*};
}

fn ebr() -> Arc<Ebr> {
    Arc::new(Ebr::new())
}
fn qsbr() -> Arc<Qsbr> {
    Arc::new(Qsbr::new())
}
fn hp() -> Arc<HazardPointers> {
    Arc::new(HazardPointers::new(1).expect("1 slot is valid"))
}
fn leak() -> Arc<Leak> {
    Arc::new(Leak::new())
}

bag_tests! {
    locked_queue_tas_b: Q, Fifo, LockedQueue::<TasB, u64>::new();
    locked_queue_tas_b_np: Q, Fifo, LockedQueue::<TasBNp, u64>::new();
    two_lock_queue_tas_b: Q, Fifo, TwoLockQueue::<TasB, u64>::new();
    two_lock_queue_tas_b_np: Q, Fifo, TwoLockQueue::<TasBNp, u64>::new();
    locked_stack_tas_b: S, Lifo, LockedStack::<TasB, u64>::new();
    locked_stack_tas_b_np: S, Lifo, LockedStack::<TasBNp, u64>::new();
    herlihy_stack_qsbr: S, Lifo, HerlihyStack::<u64, _>::with_domain(qsbr());
    herlihy_stack_ebr: S, Lifo, HerlihyStack::<u64, _>::with_domain(ebr());
    herlihy_stack_hp: S, Lifo, HerlihyStack::<u64, _>::with_domain(hp());
    herlihy_stack_leak: S, Lifo, HerlihyStack::<u64, _>::with_domain(leak());
    locked_skew_heap_tas_b: P, MinPq, LockedSkewHeap::<TasB, u64>::new();
    locked_skew_heap_tas_b_np: P, MinPq, LockedSkewHeap::<TasBNp, u64>::new();
    herlihy_heap_qsbr: P, MinPq, HerlihySkewHeap::<u64, _>::with_domain(qsbr());
    herlihy_heap_ebr: P, MinPq, HerlihySkewHeap::<u64, _>::with_domain(ebr());
    herlihy_heap_hp: P, MinPq, HerlihySkewHeap::<u64, _>::with_domain(hp());
    herlihy_heap_leak: P, MinPq, HerlihySkewHeap::<u64, _>::with_domain(leak());
    locked_binary_heap_tas_b_np: P, MinPq, LockedBinaryHeap::<u64, TasBNp>::new();
    locked_binary_heap_spin_then_park: P, MinPq, LockedBinaryHeap::<u64, mpsync::lock::SpinThenPark>::new();
    elimination_stack_ebr: S, Lifo, EliminationStack::<u64, _>::with_domain(ebr());
    elimination_stack_hp: S, Lifo, EliminationStack::<u64, _>::with_domain(hp());
}

/// Nikolaev's bounded SCQ: large enough for what the torture tests leave in
/// it (the handle trait's `enqueue` waits while full), small for lincheck, so
/// its histories also meet a full queue's `try_enqueue`.
mod scq_queue {
    use super::*;
    fn big() -> Q<ScqQueue<u64>> {
        Q(ScqQueue::new(1 << 16).unwrap())
    }
    #[test]
    fn oversubscribed_8_threads() {
        oversubscribed(big())
    }
    #[test]
    fn emulated_mp_3() {
        emulated_mp3(big())
    }
    #[test]
    fn linearizable() {
        super::linearizable::<_, Fifo>(lin_rounds(), || Q(ScqQueue::new(8).unwrap()))
    }
    /// 8 threads on a queue of 4, and on the smallest one (`new(1)`, which
    /// has 2 cells): every `try_enqueue` that fails gives its value back, and
    /// what went in comes out once, each producer's in order.
    #[test]
    fn full_queue_gives_values_back() {
        full_queue_of(4);
        full_queue_of(1);
    }

    fn full_queue_of(capacity: usize) {
        let q: ScqQueue<u64> = ScqQueue::new(capacity).unwrap();
        let per = sized(20_000, 25);
        let got: Vec<Vec<u64>> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..8u64)
                .map(|t| {
                    let q = &q;
                    sc.spawn(move || {
                        let mut got = Vec::new();
                        let mut i = 0;
                        while i < per {
                            match q.try_enqueue(t << 32 | i) {
                                Ok(()) => i += 1,
                                Err(v) => assert_eq!(v, t << 32 | i, "another value came back"),
                            }
                            got.extend(q.dequeue());
                        }
                        got
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut all: Vec<u64> = got.iter().flatten().copied().collect();
        for g in &got {
            let mut last = [None; 8];
            for &v in g {
                let p = (v >> 32) as usize;
                assert!(last[p] < Some(v), "producer {p} out of order");
                last[p] = Some(v);
            }
        }
        all.extend(std::iter::from_fn(|| q.dequeue()));
        all.sort_unstable();
        let want: Vec<u64> = (0..8u64)
            .flat_map(|t| (0..per).map(move |i| t << 32 | i))
            .collect();
        assert_eq!(all, want);
    }
}

/// `threads` threads increment until `stop(i)`; every previous value handed out
/// must be distinct and together exactly `0..total`, and the final count exact.
fn counter_conservation<C: Counter>(
    c: &C,
    threads: u64,
    stop: impl Fn(u64) -> bool + Sync,
    wrap: impl Fn(u64, &mut dyn FnMut()) + Sync,
) {
    let go = Barrier::new(threads as usize);
    let mut seen: Vec<u64> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (go, stop, wrap) = (&go, &stop, &wrap);
                sc.spawn(move || {
                    let mut got = Vec::new();
                    wrap(t, &mut || {
                        go.wait();
                        let mut i = 0;
                        while !stop(i) {
                            let v = c.increment();
                            assert!(got.last() < Some(&v), "a thread's increments went back");
                            got.push(v);
                            i += 1;
                        }
                    });
                    got
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    seen.sort_unstable();
    let total = seen.len() as u64;
    assert_eq!(c.get(), total, "final count");
    assert!(
        seen.iter().copied().eq(0..total),
        "an increment was lost or a value handed out twice"
    );
}

macro_rules! counter_tests {
    ($($name:ident: $make:expr;)*) => {$(
        mod $name {
            use super::*;
            #[test]
            fn oversubscribed_8_threads() {
                let per = sized(20_000, 25) * scale();
                let c = $make;
                counter_conservation(&c, 8, |i| i >= per, |_, f| f());
                assert_eq!(c.get(), 8 * per);
            }
            #[test]
            fn emulated_mp_3() {
                let c = $make;
                under_emulation(|emu, procs| {
                    let end = Instant::now() + Duration::from_millis(150 * scale());
                    counter_conservation(
                        &c,
                        procs.into(),
                        |i| i % 64 == 0 && Instant::now() >= end,
                        |t, f| {
                            let _att = emu.attach(t as u32).expect("attach");
                            f();
                        },
                    );
                });
            }
        }
    )*};
}

counter_tests! {
    locked_counter_tas_b: LockedCounter::<TasB>::new();
    locked_counter_tas_b_np: LockedCounter::<TasBNp>::new();
    cas_counter: CasCounter::new();
    fetch_add_counter: FetchAddCounter::new();
}

/// A value whose clones share one count (the `Arc`, only ever counted), ordered by its key.
#[derive(Clone, Debug)]
struct Tok(u64, #[allow(dead_code)] std::sync::Arc<()>);
impl PartialEq for Tok {
    fn eq(&self, o: &Self) -> bool {
        self.0 == o.0
    }
}
impl Eq for Tok {}
impl PartialOrd for Tok {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Tok {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.cmp(&o.0)
    }
}

/// 4 threads put 2,000 tokens each (500 in the chaos build) and take half back; dropping the structure (and
/// then its reclamation domain) must release every token exactly once.
fn drops_everything<D: Sync>(make: impl FnOnce() -> D, op: impl Fn(&D, bool, Tok) + Sync) {
    let token = std::sync::Arc::new(());
    let d = make();
    std::thread::scope(|sc| {
        for t in 0..4u64 {
            let (d, op, token) = (&d, &op, &token);
            sc.spawn(move || {
                for i in 0..sized(2_000, 4) {
                    op(d, i % 2 == 1, Tok(t * 10_000 + i, token.clone()));
                }
            });
        }
    });
    assert!(
        std::sync::Arc::strong_count(&token) > 1,
        "some tokens left inside"
    );
    drop(d);
    assert_eq!(
        std::sync::Arc::strong_count(&token),
        1,
        "a token leaked or dropped twice"
    );
}

#[test]
fn dropping_a_full_structure_drops_each_value_once() {
    // `take == true`: put the token and take one back (dropping it).
    drops_everything(TwoLockQueue::<TasB, Tok>::new, |q, take, v| {
        q.enqueue(v);
        if take {
            drop(q.dequeue());
        }
    });
    drops_everything(LockedQueue::<TasBNp, Tok>::new, |q, take, v| {
        q.enqueue(v);
        if take {
            drop(q.dequeue());
        }
    });
    drops_everything(LockedStack::<TasB, Tok>::new, |s, take, v| {
        s.push(v);
        if take {
            drop(s.pop());
        }
    });
    drops_everything(LockedSkewHeap::<TasB, Tok>::new, |h, take, v| {
        h.insert(v);
        if take {
            drop(h.delete_min());
        }
    });
    fn herlihy<R: Reclaimer>(domain: fn() -> Arc<R>) {
        // The handles (registrations) live inside `op`, one per call, so that the
        // domain sees threads join and leave while nodes are pending.
        drops_everything(
            || HerlihyStack::<Tok, R>::with_domain(domain()),
            |s, take, v| {
                let mut h = s.handle();
                h.push(v);
                if take {
                    drop(h.pop());
                }
            },
        );
        drops_everything(
            || HerlihySkewHeap::<Tok, R>::with_domain(domain()),
            |s, take, v| {
                let mut h = s.handle();
                h.insert(v);
                if take {
                    drop(h.delete_min());
                }
            },
        );
    }
    herlihy(ebr);
    herlihy(qsbr);
    herlihy(hp);
    herlihy(leak);
}

/// A key whose live instances are counted (clones included).
#[derive(Debug)]
struct Live(u64, std::sync::Arc<AtomicU64>);
impl Live {
    fn new(k: u64, live: &std::sync::Arc<AtomicU64>) -> Self {
        live.fetch_add(1, Ordering::Relaxed);
        Self(k, live.clone())
    }
}
impl Clone for Live {
    fn clone(&self) -> Self {
        Self::new(self.0, &self.1)
    }
}
impl Drop for Live {
    fn drop(&mut self) {
        self.1.fetch_sub(1, Ordering::Relaxed);
    }
}
impl PartialEq for Live {
    fn eq(&self, o: &Self) -> bool {
        self.0 == o.0
    }
}
impl Eq for Live {}
impl PartialOrd for Live {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Live {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.cmp(&o.0)
    }
}

/// Replaced heap nodes (each holding a clone of its value) are really freed
/// while the heap is in use: a handle's automatic quiescent states and the
/// version chain's in-order release keep the live values bounded. With the
/// leaking baseline they pile up, which shows the measure works.
fn live_values_after_churn<R: Reclaimer>(domain: Arc<R>) -> u64 {
    let live = std::sync::Arc::new(AtomicU64::new(0));
    let h = HerlihySkewHeap::<Live, R>::with_domain(domain);
    let mut t = h.handle();
    for i in 0..churn_rounds() {
        t.insert(Live::new(i % 97, &live));
        t.insert(Live::new((i * 31) % 89, &live));
        drop(t.delete_min());
        drop(t.delete_min());
    }
    let n = live.load(Ordering::Relaxed);
    drop(t);
    drop(h);
    assert_eq!(
        live.load(Ordering::Relaxed),
        0,
        "everything freed at the end"
    );
    n
}

/// Rounds of 4 operations (20,000; 2,500 in the chaos build).
fn churn_rounds() -> u64 {
    sized(20_000, 8)
}

#[test]
fn herlihy_heap_frees_replaced_nodes_while_running() {
    // 80k operations: at most 5,000 live (1 per 16 operations), against more than
    // 40,000 (1 per 2) when nothing is freed.
    let ops = 4 * churn_rounds();
    for (name, n) in [
        ("EBR", live_values_after_churn(ebr())),
        ("QSBR", live_values_after_churn(qsbr())),
        ("HP", live_values_after_churn(hp())),
    ] {
        assert!(
            n < ops / 16,
            "{name}: {n} values still live after {ops} operations"
        );
    }
    let leaked = live_values_after_churn(leak());
    assert!(leaked > ops / 2, "Leak frees only at the end: {leaked}");
}

#[test]
fn every_structure_is_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<LockedQueue<TasBNp, String>>();
    send_sync::<TwoLockQueue<TasBNp, String>>();
    send_sync::<LockedStack<TasB, String>>();
    send_sync::<HerlihyStack<String, HazardPointers>>();
    send_sync::<LockedSkewHeap<TasB, String>>();
    send_sync::<HerlihySkewHeap<String, Qsbr>>();
    send_sync::<LockedCounter<TasBNp>>();
    send_sync::<CasCounter>();
    send_sync::<FetchAddCounter>();
    fn send<T: Send>() {}
    send::<mpsync::ds::stack::HerlihyStackHandle<'static, String, Ebr>>();
    send::<mpsync::ds::heap::HerlihySkewHeapHandle<'static, String, Ebr>>();
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

/// The Herlihy structures' explicit-`Local` operations reject a registration in
/// another domain (it would protect nothing here: a use after free from safe code).
fn herlihy_rejects_foreign_locals<R: Reclaimer>(fresh: fn() -> Arc<R>) {
    let s = HerlihyStack::<u64, R>::with_domain(fresh());
    let h = HerlihySkewHeap::<u64, R>::with_domain(fresh());
    let other = fresh();
    let foreign = R::register(&other);
    let n = R::NAME;
    rejects_foreign_local(&format!("HerlihyStack::push {n}"), || s.push(&foreign, 1));
    rejects_foreign_local(&format!("HerlihyStack::pop {n}"), || {
        s.pop(&foreign);
    });
    rejects_foreign_local(&format!("HerlihySkewHeap::insert {n}"), || {
        h.insert(&foreign, 1)
    });
    rejects_foreign_local(&format!("HerlihySkewHeap::delete_min {n}"), || {
        h.delete_min(&foreign);
    });
    let own = R::register(s.domain());
    s.push(&own, 3);
    assert_eq!(s.pop(&own), Some(3));
}

#[test]
fn herlihy_structures_reject_a_local_of_another_domain() {
    herlihy_rejects_foreign_locals(hp);
    herlihy_rejects_foreign_locals(ebr);
    herlihy_rejects_foreign_locals(qsbr);
    herlihy_rejects_foreign_locals(leak);
}
