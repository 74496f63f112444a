//! The data structures the `ms97-*` and `ds-oversub` experiments compare:
//! mpsync's queues, stacks, heaps and counters and the peers Rust programmers
//! use today, run in the same process. Adding a structure is adding a row.

use std::collections::{BinaryHeap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use mpsync::util::busy::BusyWork;
use mpsync::util::rng::SplitMix64;

use mpsync::ds::alloc::{MagazineAlloc, NodeAlloc, SystemAlloc};
use mpsync::ds::binary_heap::LockedBinaryHeap;
use mpsync::ds::combining::{FcBinaryHeap, FcQueue, FcStack};
use mpsync::ds::counter::{CasCounter, FetchAddCounter, LockedCounter};
use mpsync::ds::elimination::EliminationStack;
use mpsync::ds::handle::Auto;
use mpsync::ds::heap::{HerlihySkewHeap, LockedSkewHeap};
use mpsync::ds::lscq::LscqQueue;
use mpsync::ds::ms_queue::MsQueue;
use mpsync::ds::plj_queue::PljQueue;
use mpsync::ds::queue::{LockedQueue, TwoLockQueue};
use mpsync::ds::scq::ScqQueue;
use mpsync::ds::stack::{HerlihyStack, LockedStack};
use mpsync::ds::treiber::TreiberStack;
use mpsync::ds::{
    ConcurrentPriorityQueue, ConcurrentQueue, ConcurrentStack, Counter, PriorityQueueHandle,
    QueueHandle, StackHandle,
};
use mpsync::lock::{TasB, TasBNp};
use mpsync::reclaim::{Ebr, HazardPointers, Leak, Qsbr, Reclaimer};
use mpsync::sync::Arc;

use super::AllocMode;
use super::locks::{Origin, WorkerBody};
use crate::peers::{EpochTreiber, HaphazardTreiber, SeizeTreiber};

/// Which abstract type a row implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// FIFO queue: `put` = enqueue, `take` = dequeue.
    Queue,
    /// LIFO stack: `put` = push, `take` = pop.
    Stack,
    /// Priority queue: `put` = insert, `take` = delete_min.
    Heap,
    /// Counter: `put` = increment; `take` is not used.
    Counter,
}

/// A structure the harness can drive (values are `u64`). Each worker thread
/// works through its own [`BenchHandle`] (the lock-free structures register the
/// thread with their reclamation scheme there).
pub trait BenchDs: Send + Sync + 'static {
    /// One thread's access.
    type Handle<'a>: BenchHandle
    where
        Self: 'a;
    /// An empty structure.
    fn create() -> Self;
    /// The calling thread's access.
    fn handle(&self) -> Self::Handle<'_>;
}

/// One thread's access to a [`BenchDs`].
pub trait BenchHandle {
    /// Enqueue / push / insert / increment.
    fn put(&mut self, v: u64);
    /// Dequeue / pop / delete_min (counters: read).
    fn take(&mut self) -> Option<u64>;
    /// The calling thread is between operations (QSBR's quiescent state). The
    /// harness calls it every [`OPS_PER_QUIESCENT`] operations, as Hart's test
    /// loop does; a no-op for everything but QSBR-based structures.
    fn quiescent(&mut self) {}
}

/// A structure whose operations need no per-thread state.
pub trait SharedDs: Send + Sync + 'static {
    /// An empty structure.
    fn create() -> Self;
    /// As [`BenchHandle::put`].
    fn put(&self, v: u64);
    /// As [`BenchHandle::take`].
    fn take(&self) -> Option<u64>;
}

/// The handle of a [`SharedDs`]: a reference.
#[derive(Debug)]
pub struct Shared<'a, S>(&'a S);

impl<S: SharedDs> BenchHandle for Shared<'_, S> {
    #[inline]
    fn put(&mut self, v: u64) {
        self.0.put(v);
    }
    #[inline]
    fn take(&mut self) -> Option<u64> {
        self.0.take()
    }
}

impl<S: SharedDs> BenchDs for S {
    type Handle<'a> = Shared<'a, S>;
    fn create() -> Self {
        <S as SharedDs>::create()
    }
    fn handle(&self) -> Shared<'_, S> {
        Shared(self)
    }
}

/// A [`BenchDs`] behind a trait object: what the applications (`ms97_apps`)
/// drive, several structures of different rows at once.
pub trait DynDs: Send + Sync {
    /// The calling thread's access.
    fn dyn_handle(&self) -> Box<dyn BenchHandle + '_>;
}

impl<S: BenchDs> DynDs for S {
    fn dyn_handle(&self) -> Box<dyn BenchHandle + '_> {
        Box::new(self.handle())
    }
}

/// Operations between two quiescent-state announcements (Hart 2005 §5.1.3).
pub const OPS_PER_QUIESCENT: u64 = 100;

/// The handle-free (`Auto`) MS queue over EBR: the same queue as the row
/// "MS non-blocking (EBR)", each operation through the thread's cached
/// registration (a thread-local lookup per operation) instead of an explicit
/// handle, so the two rows show what the cache costs.
impl<A: NodeAlloc> SharedDs for Auto<MsQueue<u64, Ebr, A>> {
    fn create() -> Self {
        Auto::wrap(MsQueue::new())
    }
    fn put(&self, v: u64) {
        self.enqueue(v);
    }
    fn take(&self) -> Option<u64> {
        self.dequeue()
    }
}

/// The handle-free (`Auto`) Treiber stack over EBR, beside "Treiber (EBR)"
/// (see the queue's).
impl<A: NodeAlloc> SharedDs for Auto<TreiberStack<u64, Ebr, A>> {
    fn create() -> Self {
        Auto::wrap(TreiberStack::new())
    }
    fn put(&self, v: u64) {
        self.push(v);
    }
    fn take(&self) -> Option<u64> {
        self.pop()
    }
}

/// `Mutex<VecDeque>` (std).
#[derive(Debug, Default)]
pub struct StdDeque(std::sync::Mutex<VecDeque<u64>>);
impl SharedDs for StdDeque {
    fn create() -> Self {
        Self::default()
    }
    fn put(&self, v: u64) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(v);
    }
    fn take(&self) -> Option<u64> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).pop_front()
    }
}

/// `Mutex<Vec>` (std) as a stack.
#[derive(Debug, Default)]
pub struct StdVec(std::sync::Mutex<Vec<u64>>);
impl SharedDs for StdVec {
    fn create() -> Self {
        Self::default()
    }
    fn put(&self, v: u64) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(v);
    }
    fn take(&self) -> Option<u64> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }
}

/// `Mutex<BinaryHeap>` (std) as a min-heap.
#[derive(Debug, Default)]
pub struct StdHeap(std::sync::Mutex<BinaryHeap<std::cmp::Reverse<u64>>>);
impl SharedDs for StdHeap {
    fn create() -> Self {
        Self::default()
    }
    fn put(&self, v: u64) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(std::cmp::Reverse(v));
    }
    fn take(&self) -> Option<u64> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .map(|r| r.0)
    }
}

/// `crossbeam_queue::SegQueue`.
#[derive(Debug, Default)]
pub struct SegQueue(crossbeam_queue::SegQueue<u64>);
impl SharedDs for SegQueue {
    fn create() -> Self {
        Self::default()
    }
    fn put(&self, v: u64) {
        self.0.push(v);
    }
    fn take(&self) -> Option<u64> {
        self.0.pop()
    }
}

/// Capacity of the bounded queues' rows (SCQ, `ArrayQueue`): more than the
/// values the harness's threads hold at once (one each), so never full.
pub const BOUNDED_CAPACITY: usize = 1024;

/// `crossbeam_queue::ArrayQueue` of [`BOUNDED_CAPACITY`]: SCQ's bounded peer.
#[derive(Debug)]
pub struct ArrayQueue(crossbeam_queue::ArrayQueue<u64>);
impl SharedDs for ArrayQueue {
    fn create() -> Self {
        Self(crossbeam_queue::ArrayQueue::new(BOUNDED_CAPACITY))
    }
    fn put(&self, v: u64) {
        let mut v = v;
        while let Err(back) = self.0.push(v) {
            v = back;
            std::hint::spin_loop();
        }
    }
    fn take(&self) -> Option<u64> {
        self.0.pop()
    }
}

/// `concurrent_queue::ConcurrentQueue::unbounded`.
#[derive(Debug)]
pub struct ConcQueue(concurrent_queue::ConcurrentQueue<u64>);
impl SharedDs for ConcQueue {
    fn create() -> Self {
        Self(concurrent_queue::ConcurrentQueue::unbounded())
    }
    fn put(&self, v: u64) {
        // An unbounded queue refuses a push only once closed; this one never is.
        let _ = self.0.push(v);
    }
    fn take(&self) -> Option<u64> {
        self.0.pop().ok()
    }
}

macro_rules! peer_stack {
    ($t:ty) => {
        impl SharedDs for $t {
            fn create() -> Self {
                Self::default()
            }
            fn put(&self, v: u64) {
                self.push(v);
            }
            fn take(&self) -> Option<u64> {
                self.pop()
            }
        }
    };
}
peer_stack!(EpochTreiber);
peer_stack!(SeizeTreiber);
peer_stack!(HaphazardTreiber);

/// `AtomicU64::fetch_add`.
#[derive(Debug, Default)]
pub struct FetchAdd(AtomicU64);
impl SharedDs for FetchAdd {
    fn create() -> Self {
        Self::default()
    }
    fn put(&self, _v: u64) {
        // Relaxed: a counter; the total is read after the workers are joined.
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    fn take(&self) -> Option<u64> {
        // Relaxed: as above.
        Some(self.0.load(Ordering::Relaxed))
    }
}

/// How the harness makes an empty mpsync structure.
pub trait Make: Sized {
    /// An empty structure (lock-free ones with a fresh reclamation domain).
    fn make() -> Self;
}

/// How the harness makes a fresh reclamation domain.
pub trait NewDomain: Reclaimer + Sized {
    /// A domain whose threads need `hp_slots` hazard pointers (ignored by the
    /// epoch schemes).
    fn new_domain(hp_slots: usize) -> Arc<Self>;
}

impl NewDomain for Qsbr {
    fn new_domain(_: usize) -> Arc<Self> {
        Arc::new(Qsbr::new())
    }
}
impl NewDomain for Ebr {
    fn new_domain(_: usize) -> Arc<Self> {
        Arc::new(Ebr::new())
    }
}
impl NewDomain for Leak {
    fn new_domain(_: usize) -> Arc<Self> {
        Arc::new(Leak::new())
    }
}
impl NewDomain for HazardPointers {
    fn new_domain(hp_slots: usize) -> Arc<Self> {
        Arc::new(HazardPointers::new(hp_slots).expect("1 or 2 hazard slots are valid"))
    }
}

impl<L: mpsync::lock_api::RawMutex + Send + Sync + 'static> Make for LockedQueue<L, u64> {
    fn make() -> Self {
        Self::new()
    }
}
impl<L: mpsync::lock_api::RawMutex + Send + Sync + 'static> Make for TwoLockQueue<L, u64> {
    fn make() -> Self {
        Self::new()
    }
}
impl<L: mpsync::lock_api::RawMutex + Send + Sync + 'static> Make for LockedStack<L, u64> {
    fn make() -> Self {
        Self::new()
    }
}
impl<L: mpsync::lock_api::RawMutex + Send + Sync + 'static> Make for LockedBinaryHeap<u64, L> {
    fn make() -> Self {
        Self::new()
    }
}
impl<L: mpsync::lock_api::RawMutex + Send + Sync + 'static> Make for LockedSkewHeap<L, u64> {
    fn make() -> Self {
        Self::new()
    }
}
impl<R: NewDomain, A: NodeAlloc> Make for MsQueue<u64, R, A> {
    fn make() -> Self {
        Self::with_domain(R::new_domain(2))
    }
}
impl<R: NewDomain, A: NodeAlloc> Make for PljQueue<u64, R, A> {
    fn make() -> Self {
        Self::with_domain(R::new_domain(2))
    }
}
impl<R: NewDomain, A: NodeAlloc> Make for TreiberStack<u64, R, A> {
    fn make() -> Self {
        Self::with_domain(R::new_domain(1))
    }
}
impl<R: NewDomain, A: NodeAlloc> Make for EliminationStack<u64, R, A> {
    fn make() -> Self {
        Self::with_domain(R::new_domain(1))
    }
}
impl Make for FcQueue<u64> {
    fn make() -> Self {
        Self::new()
    }
}
impl Make for FcStack<u64> {
    fn make() -> Self {
        Self::new()
    }
}
impl Make for FcBinaryHeap<u64> {
    fn make() -> Self {
        Self::new()
    }
}
impl<R: NewDomain> Make for LscqQueue<u64, R> {
    fn make() -> Self {
        Self::with_domain(R::new_domain(1))
    }
}
impl Make for ScqQueue<u64> {
    fn make() -> Self {
        Self::new(BOUNDED_CAPACITY).expect("a capacity above 0")
    }
}
impl<R: NewDomain> Make for HerlihyStack<u64, R> {
    fn make() -> Self {
        Self::with_domain(R::new_domain(1))
    }
}
impl<R: NewDomain> Make for HerlihySkewHeap<u64, R> {
    fn make() -> Self {
        Self::with_domain(R::new_domain(1))
    }
}

macro_rules! ds_row {
    ($(#[$m:meta])* $row:ident, $handle:ident, $tr:ident, $h:ident, $put:ident, $take:ident) => {
        $(#[$m])*
        #[derive(Debug)]
        pub struct $row<S>(S);

        /// Its per-thread handle: the structure's own.
        #[derive(Debug)]
        pub struct $handle<H>(H);

        impl<S: $tr<u64> + Make + 'static> BenchDs for $row<S> {
            type Handle<'a> = $handle<S::Handle<'a>>;
            fn create() -> Self {
                Self(S::make())
            }
            fn handle(&self) -> Self::Handle<'_> {
                $handle(self.0.handle())
            }
        }

        impl<H: $h<u64>> BenchHandle for $handle<H> {
            #[inline]
            fn put(&mut self, v: u64) {
                self.0.$put(v);
            }
            #[inline]
            fn take(&mut self) -> Option<u64> {
                self.0.$take()
            }
            #[inline]
            fn quiescent(&mut self) {
                self.0.quiescent();
            }
        }
    };
}

ds_row!(
    /// An mpsync queue, driven through its [`ConcurrentQueue`] handle.
    QueueRow, QueueRowHandle, ConcurrentQueue, QueueHandle, enqueue, dequeue
);
ds_row!(
    /// An mpsync stack, driven through its [`ConcurrentStack`] handle.
    StackRow, StackRowHandle, ConcurrentStack, StackHandle, push, pop
);
ds_row!(
    /// An mpsync priority queue, driven through its [`ConcurrentPriorityQueue`] handle.
    HeapRow, HeapRowHandle, ConcurrentPriorityQueue, PriorityQueueHandle, insert, delete_min
);

/// An mpsync [`Counter`] (`put` increments, `take` reads).
#[derive(Debug)]
pub struct CounterRow<C>(C);

impl<C: Counter + Default + 'static> SharedDs for CounterRow<C> {
    fn create() -> Self {
        Self(C::default())
    }
    fn put(&self, _v: u64) {
        self.0.increment();
    }
    fn take(&self) -> Option<u64> {
        Some(self.0.get())
    }
}

/// The `ms97-*` microbenchmark of one worker: `ops` operations (pairs of
/// put + take, or increments for counters), each followed by `work_iters` of
/// calibrated busy work (±10%).
#[derive(Debug, Clone, Copy)]
pub struct Ms97Spec {
    /// Pairs (increments for counters) per worker.
    pub ops: u64,
    /// Busy work after every operation, iterations.
    pub work_iters: u64,
    /// Seed of the work jitter and the heap keys.
    pub seed: u64,
    /// Node allocator of the lock-free rows.
    pub alloc: AllocMode,
}

/// A fixed-duration run: `threads` unpinned threads loop {put; take} (counters:
/// increment) with no work between, counting operations per thread.
#[derive(Debug, Clone, Copy)]
pub struct DsThroughputSpec {
    /// Threads (may exceed the cores: real Linux preemption).
    pub threads: u32,
    /// How long they run.
    pub duration: Duration,
    /// Node allocator of the lock-free rows.
    pub alloc: AllocMode,
}

/// One row of the structure table.
#[derive(Debug, Clone, Copy)]
pub struct DsImpl {
    /// The paper's name (or the crate's).
    pub name: &'static str,
    /// Where it comes from.
    pub origin: Origin,
    /// What it implements.
    pub kind: Kind,
    /// Makes a fresh structure and the microbenchmark's worker loop over it.
    pub ms97: fn(&Ms97Spec, Kind) -> WorkerBody,
    /// Fixed-duration contended run: per-thread operation counts.
    pub throughput: fn(&DsThroughputSpec, Kind) -> Vec<u64>,
    /// A fresh, empty structure (lock-free rows over the allocator given).
    pub make: fn(AllocMode) -> Box<dyn DynDs>,
}

fn dyn_make<S: BenchDs>(_: AllocMode) -> Box<dyn DynDs> {
    Box::new(S::create())
}

fn dyn_make_by_alloc<S: BenchDs, M: BenchDs>(alloc: AllocMode) -> Box<dyn DynDs> {
    match alloc {
        AllocMode::System => dyn_make::<S>(alloc),
        AllocMode::Magazines => dyn_make::<M>(alloc),
    }
}

fn ms97<S: BenchDs>(spec: &Ms97Spec, kind: Kind) -> WorkerBody {
    let ds = S::create();
    let spec = *spec;
    Box::new(move |worker| {
        let w = BusyWork::global();
        let mut ds = ds.handle();
        let mut rng = SplitMix64::stream(spec.seed, u64::from(worker));
        let work = |rng: &mut SplitMix64| {
            w.run_iters(rng.jitter(spec.work_iters as f64, 0.1) as u64);
        };
        for i in 0..spec.ops {
            let v = match kind {
                // Heap keys are random; queue and stack values name their origin.
                Kind::Heap => rng.next_u64() >> 1,
                _ => (u64::from(worker) << 40) | i,
            };
            ds.put(v);
            work(&mut rng);
            if kind != Kind::Counter {
                std::hint::black_box(ds.take());
                work(&mut rng);
            }
            if i % OPS_PER_QUIESCENT == OPS_PER_QUIESCENT - 1 {
                ds.quiescent();
            }
        }
    })
}

fn throughput<S: BenchDs>(spec: &DsThroughputSpec, kind: Kind) -> Vec<u64> {
    let ds = S::create();
    let stop = AtomicBool::new(false);
    let counts: Vec<AtomicU64> = (0..spec.threads).map(|_| AtomicU64::new(0)).collect();
    std::thread::scope(|s| {
        for c in &counts {
            let (ds, stop) = (&ds, &stop);
            s.spawn(move || {
                let mut ds = ds.handle();
                let mut n = 0u64;
                // At least one round, however late this thread first runs.
                loop {
                    for _ in 0..OPS_PER_QUIESCENT {
                        ds.put(n);
                        if kind != Kind::Counter {
                            std::hint::black_box(ds.take());
                        }
                        n += 1;
                    }
                    ds.quiescent();
                    // Relaxed: a stop flag; the scope's join orders the counts.
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
                // Relaxed: read after the join.
                c.store(n, Ordering::Relaxed);
            });
        }
        // The harness (not an algorithm) may sleep: it is the timer.
        std::thread::sleep(spec.duration);
        // Relaxed: see above.
        stop.store(true, Ordering::Relaxed);
    });
    counts.into_iter().map(AtomicU64::into_inner).collect()
}

macro_rules! row {
    ($name:expr, $origin:expr, $kind:expr, $t:ty) => {
        DsImpl {
            name: $name,
            origin: $origin,
            kind: $kind,
            ms97: ms97::<$t>,
            throughput: throughput::<$t>,
            make: dyn_make::<$t>,
        }
    };
}

fn ms97_by_alloc<S: BenchDs, M: BenchDs>(spec: &Ms97Spec, kind: Kind) -> WorkerBody {
    match spec.alloc {
        AllocMode::System => ms97::<S>(spec, kind),
        AllocMode::Magazines => ms97::<M>(spec, kind),
    }
}

fn throughput_by_alloc<S: BenchDs, M: BenchDs>(spec: &DsThroughputSpec, kind: Kind) -> Vec<u64> {
    match spec.alloc {
        AllocMode::System => throughput::<S>(spec, kind),
        AllocMode::Magazines => throughput::<M>(spec, kind),
    }
}

/// A lock-free row over `--alloc`'s node allocator: `$t` is the structure's type
/// constructor, given the value type, the reclaimer and the allocator.
macro_rules! lf_row {
    ($name:expr, $kind:expr, $w:ident, $t:ident, $r:ty) => {
        DsImpl {
            name: $name,
            origin: Origin::Paper,
            kind: $kind,
            ms97: ms97_by_alloc::<$w<$t<u64, $r, SystemAlloc>>, $w<$t<u64, $r, MagazineAlloc>>>,
            throughput: throughput_by_alloc::<
                $w<$t<u64, $r, SystemAlloc>>,
                $w<$t<u64, $r, MagazineAlloc>>,
            >,
            make: dyn_make_by_alloc::<$w<$t<u64, $r, SystemAlloc>>, $w<$t<u64, $r, MagazineAlloc>>>,
        }
    };
}

/// Every structure, mpsync's first, then peers. The paper's lock-based rows use
/// TAS-B with bounded backoff, ordinary or preemption-safe (PS = `TasBNp`); the
/// lock-free rows reclaim with QSBR unless the name says otherwise and take their
/// nodes from `--alloc`'s allocator (the lock-based ones and Herlihy's from `Box`).
/// An `Auto` row is the structure of the row named without `Auto`, each operation
/// through the thread's cached registration instead of an explicit handle.
pub fn ds_table() -> Vec<DsImpl> {
    [
        queue_rows(),
        stack_rows(),
        heap_rows(),
        counter_rows(),
        peer_rows(),
    ]
    .concat()
}

/// The papers' queues: single lock and two locks (ordinary and PS), MS (over
/// each reclaimer, and through the cached registration), PLJ, Nikolaev's
/// bounded SCQ (of [`BOUNDED_CAPACITY`]) and unbounded LSCQ (QSBR, segments
/// of its default size: one serves the benchmark's short queue).
fn queue_rows() -> Vec<DsImpl> {
    use Kind::*;
    use Origin::Paper;
    vec![
        row!(
            "single lock",
            Paper,
            Queue,
            QueueRow<LockedQueue<TasB, u64>>
        ),
        row!(
            "single lock (PS)",
            Paper,
            Queue,
            QueueRow<LockedQueue<TasBNp, u64>>
        ),
        row!("two-lock", Paper, Queue, QueueRow<TwoLockQueue<TasB, u64>>),
        row!(
            "two-lock (PS)",
            Paper,
            Queue,
            QueueRow<TwoLockQueue<TasBNp, u64>>
        ),
        lf_row!("MS non-blocking", Queue, QueueRow, MsQueue, Qsbr),
        lf_row!("MS non-blocking (EBR)", Queue, QueueRow, MsQueue, Ebr),
        lf_row!(
            "MS non-blocking (HP)",
            Queue,
            QueueRow,
            MsQueue,
            HazardPointers
        ),
        lf_row!("MS non-blocking (EBR, Auto)", Queue, Auto, MsQueue, Ebr),
        lf_row!("PLJ non-blocking", Queue, QueueRow, PljQueue, Qsbr),
        row!("SCQ (bounded)", Paper, Queue, QueueRow<ScqQueue<u64>>),
        row!("LSCQ", Paper, Queue, QueueRow<LscqQueue<u64, Qsbr>>),
        row!(
            "flat combining",
            Origin::Mpsync,
            Queue,
            QueueRow<FcQueue<u64>>
        ),
    ]
}

/// The papers' stacks: single lock (ordinary and PS), Treiber (over each
/// reclaimer, and through the cached registration), Hendler–Shavit–Yerushalmi's
/// elimination-backoff stack over Treiber's, and Herlihy's.
fn stack_rows() -> Vec<DsImpl> {
    use Kind::*;
    use Origin::Paper;
    vec![
        row!(
            "single lock",
            Paper,
            Stack,
            StackRow<LockedStack<TasB, u64>>
        ),
        row!(
            "single lock (PS)",
            Paper,
            Stack,
            StackRow<LockedStack<TasBNp, u64>>
        ),
        lf_row!("Treiber", Stack, StackRow, TreiberStack, Qsbr),
        lf_row!("Treiber (EBR)", Stack, StackRow, TreiberStack, Ebr),
        lf_row!(
            "Treiber (HP)",
            Stack,
            StackRow,
            TreiberStack,
            HazardPointers
        ),
        lf_row!("Treiber (EBR, Auto)", Stack, Auto, TreiberStack, Ebr),
        lf_row!("elimination (EBR)", Stack, StackRow, EliminationStack, Ebr),
        lf_row!(
            "elimination (HP)",
            Stack,
            StackRow,
            EliminationStack,
            HazardPointers
        ),
        row!("Herlihy", Paper, Stack, StackRow<HerlihyStack<u64, Qsbr>>),
        row!(
            "flat combining",
            Origin::Mpsync,
            Stack,
            StackRow<FcStack<u64>>
        ),
    ]
}

/// The papers' priority queues: single lock (ordinary and PS) and Herlihy's
/// non-blocking skew heap; then `std`'s binary heap under a preemption-safe
/// lock and under spin-then-park.
fn heap_rows() -> Vec<DsImpl> {
    use Kind::*;
    use Origin::Paper;
    vec![
        row!(
            "single lock",
            Paper,
            Heap,
            HeapRow<LockedSkewHeap<TasB, u64>>
        ),
        row!(
            "single lock (PS)",
            Paper,
            Heap,
            HeapRow<LockedSkewHeap<TasBNp, u64>>
        ),
        row!(
            "Herlihy non-blocking",
            Paper,
            Heap,
            HeapRow<HerlihySkewHeap<u64, Qsbr>>
        ),
        row!(
            "binary heap (PS)",
            Paper,
            Heap,
            HeapRow<LockedBinaryHeap<u64, TasBNp>>
        ),
        row!(
            "binary heap (spin-then-park)",
            Paper,
            Heap,
            HeapRow<LockedBinaryHeap<u64, mpsync::lock::SpinThenPark>>
        ),
        row!(
            "binary heap (flat combining)",
            Origin::Mpsync,
            Heap,
            HeapRow<FcBinaryHeap<u64>>
        ),
    ]
}

/// The papers' counters: single lock (ordinary and PS), a CAS loop, fetch_add.
fn counter_rows() -> Vec<DsImpl> {
    use Kind::*;
    use Origin::Paper;
    vec![
        row!(
            "single lock",
            Paper,
            Counter,
            CounterRow<LockedCounter<TasB>>
        ),
        row!(
            "single lock (PS)",
            Paper,
            Counter,
            CounterRow<LockedCounter<TasBNp>>
        ),
        row!("CAS loop", Paper, Counter, CounterRow<CasCounter>),
        row!("fetch_add", Paper, Counter, CounterRow<FetchAddCounter>),
    ]
}

/// The peers, of every kind: what a user would pick today.
fn peer_rows() -> Vec<DsImpl> {
    use Kind::*;
    use Origin::Peer;
    vec![
        row!("SegQueue", Peer, Queue, SegQueue),
        row!("concurrent-queue", Peer, Queue, ConcQueue),
        row!("ArrayQueue (bounded)", Peer, Queue, ArrayQueue),
        row!("Mutex<VecDeque>", Peer, Queue, StdDeque),
        row!("crossbeam-epoch Treiber", Peer, Stack, EpochTreiber),
        row!("seize Treiber", Peer, Stack, SeizeTreiber),
        row!("haphazard Treiber", Peer, Stack, HaphazardTreiber),
        row!("Mutex<Vec>", Peer, Stack, StdVec),
        row!("Mutex<BinaryHeap>", Peer, Heap, StdHeap),
        row!("AtomicU64::fetch_add", Peer, Counter, FetchAdd),
    ]
}

/// The rows of `kind`.
pub fn of_kind(kind: Kind) -> Vec<DsImpl> {
    ds_table().into_iter().filter(|i| i.kind == kind).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row's microbenchmark body runs, and a put is taken back out.
    #[test]
    fn every_row_runs_and_conserves() {
        for imp in ds_table() {
            let body = (imp.ms97)(
                &Ms97Spec {
                    ops: 50,
                    work_iters: 1,
                    seed: 3,
                    alloc: AllocMode::Magazines,
                },
                imp.kind,
            );
            std::thread::scope(|s| {
                for w in 0..3 {
                    let body = &body;
                    s.spawn(move || body(w));
                }
            });
            let counts = (imp.throughput)(
                &DsThroughputSpec {
                    threads: 2,
                    duration: Duration::from_millis(5),
                    alloc: AllocMode::System,
                },
                imp.kind,
            );
            assert_eq!(counts.len(), 2, "{}", imp.name);
            assert!(counts.iter().all(|&c| c > 0), "{}: {counts:?}", imp.name);
        }
    }

    #[test]
    fn peers_keep_their_order() {
        let q = <SegQueue as SharedDs>::create();
        q.put(1);
        q.put(2);
        assert_eq!(q.take(), Some(1));
        let s = <StdVec as SharedDs>::create();
        s.put(1);
        s.put(2);
        assert_eq!(s.take(), Some(2));
        let h = <StdHeap as SharedDs>::create();
        h.put(5);
        h.put(3);
        assert_eq!(h.take(), Some(3));
        let c = <FetchAdd as SharedDs>::create();
        c.put(0);
        c.put(0);
        assert_eq!(c.take(), Some(2));
    }
}
