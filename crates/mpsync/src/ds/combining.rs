//! Flat combining (Hendler, Incze, Shavit & Tzafrir, SPAA 2010): one thread
//! at a time — the *combiner* — applies every published request to a
//! sequential structure, so the structure's cache lines stay in one core and
//! the lock is taken once per batch instead of once per operation.
//!
//! [`FlatCombining<S>`] is the engine over any [`Sequential`] structure; on it
//! [`FcBinaryHeap<T>`] (`std`'s binary heap, a min-priority queue),
//! [`FcQueue<T>`] (a `VecDeque`, FIFO) and [`FcStack<T>`] (a `Vec`, LIFO).
//!
//! # Design
//!
//! - **Publication records.** A fixed table of [`SLOTS`] cache-padded
//!   records. An operation claims a free one (CAS `FREE → OWNED`; first the
//!   slot this thread used last, then the table from the start, so the live
//!   records stay at the low end and the combiner scans only up to the
//!   high-water mark), writes its request, marks it `PENDING`, and frees the
//!   record when it has taken its response. A record is held only for the
//!   length of one operation, so a thread that exits holds none and nothing
//!   needs releasing on exit. When every record is taken (more than
//!   [`SLOTS`] operations at once) the operation does not spin on the table:
//!   it takes the combiner lock and applies its request itself.
//! - **The combiner lock.** An operation that finds the lock free takes it
//!   (one CAS), applies its own request directly — no record of its own —
//!   and serves the others'; otherwise it publishes its request and, while
//!   the request is unserved, tries the lock again. The winner makes up to
//!   [`PASSES`] passes over the records, serving every `PENDING` one, then
//!   releases it. A loser waits for its
//!   record to turn `DONE` through [`sched::Waiter`](crate::sched::Waiter)
//!   (PAUSE while the combiner runs; when the Waiter advises parking — the
//!   combiner is preempted or the wait outlasted its patience —
//!   [`sched::yield_now`](crate::sched::yield_now)), trying the lock again
//!   whenever it is free.
//! - **Oversubscription.** The combiner holds a lock: a preempted combiner
//!   stalls every waiter until it runs again (it asks `sched` not to be
//!   preempted while it combines, like the `-np` locks, which narrows but
//!   does not close that window; `mpsync run ds-oversub` measures it).
//!   A preempted *waiter* costs nothing: its request is published, and the
//!   combiner serves it anyway. A thread that finds the lock free goes
//!   first with its own request, but then serves every published one before
//!   it releases, so a published request waits for at most one combining
//!   session (a TAS lock's releaser re-acquires before a woken waiter runs,
//!   again and again). That is not equal shares: at 8 threads on 2 cores
//!   (`ds-oversub`) the threads that run take more turns than those that
//!   wait, min/max per-thread operations 0.19–0.22 — the direct path
//!   doubled the throughput there (from 0.45–0.47× the `Mutex<std
//!   collection>` peers to 0.79–0.82×) and cost that fairness (0.28–0.56
//!   before).
//! - **Hostile users.** Each request is applied under `catch_unwind`: a
//!   panic in `T`'s `Ord` is handed to the thread whose request it was (its
//!   operation panics with that payload), and the combiner goes on serving
//!   the others; the structure keeps every value (their order may be wrong,
//!   as `BinaryHeap` documents for a panicking `Ord`). An `Ord` that uses the
//!   same structure again, from inside the combiner, panics ("re-entered")
//!   instead of waiting for itself — that panic is the re-entered request's
//!   panic, handed to its thread like any other. Values' `Drop` never runs in
//!   the combiner: removed values are handed out, and the structure's `Drop`
//!   drops the rest.
//!
//! Uses `sched` and `sync`.
//!
//! ```
//! use mpsync::ds::combining::FcBinaryHeap;
//!
//! let pq: FcBinaryHeap<u32> = FcBinaryHeap::new();
//! std::thread::scope(|s| {
//!     for t in 0..4 {
//!         let pq = &pq;
//!         s.spawn(move || pq.insert(t));
//!     }
//! });
//! assert_eq!((pq.len(), pq.is_empty()), (4, false));
//! assert_eq!((pq.delete_min(), pq.delete_min()), (Some(0), Some(1)));
//! ```

use std::any::Any;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use super::{
    ConcurrentPriorityQueue, ConcurrentQueue, ConcurrentStack, PriorityQueueHandle, QueueHandle,
    StackHandle,
};
use crate::sched::stall;
use crate::sync::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use crate::util::CachePadded;

/// The number of publication records of one structure.
pub const SLOTS: usize = 64;
/// The most passes a combiner makes over the records before releasing.
pub const PASSES: usize = 3;

/// A sequential structure that the combiner applies requests to.
pub trait Sequential {
    /// One operation and its argument.
    type Request;
    /// Its result.
    type Response;
    /// Applies `req`.
    fn apply(&mut self, req: Self::Request) -> Self::Response;
    /// The number of elements.
    fn len(&self) -> usize;
    /// Whether it holds no element.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(not(loom))]
type RawCell<T> = std::cell::UnsafeCell<T>;
#[cfg(loom)]
type RawCell<T> = loom::cell::UnsafeCell<T>;

/// An `UnsafeCell` that loom tracks (a data race on it is reported).
struct Cell<T>(RawCell<T>);

impl<T> Cell<T> {
    fn new(v: T) -> Self {
        Self(RawCell::new(v))
    }
    /// # Safety
    /// The caller has exclusive access to the cell's contents.
    unsafe fn with_mut<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        #[cfg(not(loom))]
        {
            // SAFETY: exclusive access, by the caller's contract.
            f(unsafe { &mut *self.0.get() })
        }
        #[cfg(loom)]
        {
            // SAFETY: exclusive access, by the caller's contract.
            self.0.with_mut(|p| f(unsafe { &mut *p }))
        }
    }
}

const FREE: u32 = 0;
const OWNED: u32 = 1;
const PENDING: u32 = 2;
const DONE: u32 = 3;

type Outcome<R> = Result<R, Box<dyn Any + Send>>;

/// One publication record.
struct Slot<S: Sequential> {
    state: AtomicU32,
    /// Written by the owner (`OWNED`), taken by the combiner (`PENDING`).
    req: Cell<Option<S::Request>>,
    /// Written by the combiner (`PENDING`), taken by the owner (`DONE`).
    resp: Cell<Option<Outcome<S::Response>>>,
}

/// The flat-combining engine over the sequential structure `S`; see the
/// module doc.
pub struct FlatCombining<S: Sequential> {
    lock: CachePadded<AtomicBool>,
    /// The combiner's thread marker (0: none), to turn re-entry into a panic.
    holder: AtomicUsize,
    /// One past the highest record ever claimed: the combiner scans below it.
    /// Read-mostly, like the records' address beside it.
    hi: AtomicUsize,
    slots: Box<[CachePadded<Slot<S>>]>,
    /// The sequential structure, on lines of its own: only the combiner
    /// touches them. Sharing a line with `hi` and `holder`, which other
    /// threads read, cost every combiner's first write a miss.
    seq: CachePadded<Cell<S>>,
}

// SAFETY: `seq` is touched only by the combiner-lock holder; a record's cells
// only by the thread its state gives them to (the protocol above). Requests
// and responses move between threads, hence `Send` on them.
unsafe impl<S: Sequential + Send> Sync for FlatCombining<S>
where
    S::Request: Send,
    S::Response: Send,
{
}
// SAFETY: owning it owns `S` and the (empty between operations) records.
unsafe impl<S: Sequential + Send> Send for FlatCombining<S>
where
    S::Request: Send,
    S::Response: Send,
{
}

#[cfg(not(loom))]
std::thread_local! {
    static MARK: u8 = const { 0 };
    static HINT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A non-zero word naming the calling thread (its thread-local's address).
#[cfg(not(loom))]
fn me() -> usize {
    MARK.with(|m| m as *const u8 as usize)
}
/// Loom runs its threads on one OS thread: no marker (no re-entry check).
#[cfg(loom)]
fn me() -> usize {
    usize::MAX
}

/// Releases the combiner lock however the combining ends.
struct Release<'a>(&'a AtomicBool, &'a AtomicUsize);
impl Drop for Release<'_> {
    fn drop(&mut self) {
        // Relaxed: only the holder stores its own marker; the Release store
        // below orders it.
        self.1.store(0, Ordering::Relaxed);
        // Release: pairs with the Acquire CAS in `try_lock`, handing the
        // structure's writes to the next combiner.
        self.0.store(false, Ordering::Release);
        #[cfg(not(loom))]
        crate::sched::release_no_preempt();
    }
}

impl<S: Sequential> FlatCombining<S> {
    /// The engine over `seq`.
    pub fn new(seq: S) -> Self {
        Self {
            lock: CachePadded::new(AtomicBool::new(false)),
            holder: AtomicUsize::new(0),
            hi: AtomicUsize::new(0),
            seq: CachePadded::new(Cell::new(seq)),
            slots: (0..SLOTS)
                .map(|_| {
                    CachePadded::new(Slot {
                        state: AtomicU32::new(FREE),
                        req: Cell::new(None),
                        resp: Cell::new(None),
                    })
                })
                .collect(),
        }
    }

    /// Takes the combiner lock if it is free.
    fn try_lock(&self) -> Option<Release<'_>> {
        // Relaxed: a pre-check only; the CAS below orders.
        if self.lock.load(Ordering::Relaxed) {
            return None;
        }
        #[cfg(not(loom))]
        crate::sched::request_no_preempt();
        // Acquire: pairs with the Release store in `Release::drop`.
        if self
            .lock
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            // Relaxed: see `Release::drop`.
            self.holder.store(me(), Ordering::Relaxed);
            Some(Release(&self.lock, &self.holder))
        } else {
            #[cfg(not(loom))]
            crate::sched::cancel_no_preempt();
            None
        }
    }

    /// Applies `req` under the held lock, catching a panic.
    fn apply_caught(&self, req: S::Request) -> Outcome<S::Response> {
        // SAFETY: called only while this thread holds the combiner lock,
        // which gives it `seq`.
        unsafe {
            self.seq
                .with_mut(|s| catch_unwind(AssertUnwindSafe(|| s.apply(req))))
        }
    }

    /// Serves every pending record, up to [`PASSES`] passes (the lock held).
    fn combine(&self) {
        for _ in 0..PASSES {
            let mut served = 0;
            // Acquire: pairs with the AcqRel `fetch_max` of a claim, so every
            // record claimed before it is scanned.
            let hi = self.hi.load(Ordering::Acquire);
            for slot in &self.slots[..hi] {
                // Acquire: pairs with the owner's Release store of PENDING,
                // so its request is visible.
                if slot.state.load(Ordering::Acquire) != PENDING {
                    continue;
                }
                // SAFETY: PENDING gives the record's cells to the combiner
                // until it stores DONE.
                let req = unsafe { slot.req.with_mut(Option::take) };
                let out = self.apply_caught(req.expect("a pending record holds a request"));
                // SAFETY: as above.
                unsafe { slot.resp.with_mut(|r| *r = Some(out)) };
                // Release: pairs with the owner's Acquire load of DONE,
                // handing it the response written above.
                slot.state.store(DONE, Ordering::Release);
                served += 1;
            }
            if served == 0 {
                break;
            }
        }
    }

    /// Claims a free record, or `None` when all are taken.
    fn claim(&self) -> Option<usize> {
        #[cfg(not(loom))]
        let hint = HINT.with(|h| h.get());
        #[cfg(loom)]
        let hint = 0;
        let try_one = |i: usize| {
            let s = &self.slots[i].state;
            // Relaxed pre-check; Acquire CAS: pairs with the previous owner's
            // Release store of FREE, after which it no longer touches the
            // cells.
            if s.load(Ordering::Relaxed) != FREE {
                return false;
            }
            stall::point(stall::FC_CLAIM_SEEN_FREE);
            s.compare_exchange(FREE, OWNED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        };
        let i = std::iter::once(hint)
            .chain(0..SLOTS)
            .find(|&i| try_one(i))?;
        #[cfg(not(loom))]
        HINT.with(|h| h.set(i));
        // Raised only when it must be: a read-modify-write of `hi` in every
        // operation moved its line (read by every combiner's scan) between
        // the cores each time — 9% of a 2-thread run's samples. Acquire:
        // pairs with the AcqRel `fetch_max` of the claim that raised it.
        if self.hi.load(Ordering::Acquire) <= i {
            // AcqRel: pairs with the combiner's Acquire load of `hi`.
            self.hi.fetch_max(i + 1, Ordering::AcqRel);
        }
        Some(i)
    }

    /// Applies `req` through the combiner and returns its response; a panic
    /// of `S::apply` on it resumes here.
    ///
    /// # Panics
    /// If called from inside `S::apply` on this same structure (re-entry), or
    /// with `S::apply`'s panic.
    pub fn execute(&self, req: S::Request) -> S::Response {
        self.refuse_reentry();
        // The lock free: apply our own request at once, then serve the
        // others' — no record of ours to claim, publish, answer and free
        // (four moves of its line between the cores whenever another thread
        // combines). A published request waits no longer for it: this
        // combiner serves every pending record before it releases.
        if let Some(_g) = self.try_lock() {
            let out = self.apply_caught(req);
            self.combine();
            return out.unwrap_or_else(|p| resume_unwind(p));
        }
        let Some(i) = self.claim() else {
            // Every record taken: wait for the lock and apply it ourselves.
            let mut w = Waiter::new();
            let out = loop {
                if let Some(_g) = self.try_lock() {
                    break self.apply_caught(req);
                }
                w.wait();
            };
            return out.unwrap_or_else(|p| resume_unwind(p));
        };
        let slot = &self.slots[i];
        // SAFETY: OWNED gives the cells to this thread.
        unsafe { slot.req.with_mut(|r| *r = Some(req)) };
        // Release: pairs with the combiner's Acquire load of PENDING.
        slot.state.store(PENDING, Ordering::Release);
        let mut w = Waiter::new();
        loop {
            // Acquire: pairs with the combiner's Release store of DONE.
            if slot.state.load(Ordering::Acquire) == DONE {
                break;
            }
            if let Some(_g) = self.try_lock() {
                self.combine();
                continue;
            }
            w.wait();
        }
        // SAFETY: DONE gives the cells back to this thread.
        let out = unsafe { slot.resp.with_mut(Option::take) };
        // Release: pairs with the Acquire CAS of the next claim.
        slot.state.store(FREE, Ordering::Release);
        out.expect("a done record holds a response")
            .unwrap_or_else(|p| resume_unwind(p))
    }

    /// Panics if the calling thread is the combiner (called from inside
    /// `S::apply`, e.g. an `Ord` that uses the same structure): waiting for
    /// the lock it holds would deadlock.
    fn refuse_reentry(&self) {
        // Relaxed: only this thread ever stores its own marker, so reading
        // it back means this thread is the combiner.
        assert!(
            self.holder.load(Ordering::Relaxed) != me() || cfg!(loom),
            "FlatCombining re-entered from inside the combiner (an Ord that uses the same structure)"
        );
    }

    /// The number of elements (a snapshot).
    ///
    /// # Panics
    /// If called from inside `S::apply` on this same structure.
    pub fn len(&self) -> usize {
        self.refuse_reentry();
        let mut w = Waiter::new();
        loop {
            if let Some(_g) = self.try_lock() {
                // SAFETY: the lock is held.
                return unsafe { self.seq.with_mut(|s| s.len()) };
            }
            w.wait();
        }
    }

    /// Whether it is empty (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Waiting for the combiner: `sched::Waiter`'s spin, then `sched::yield_now`.
/// The `sched::Waiter` (which reads the clock) is started at the first wait,
/// so an operation that combines at once pays nothing for it.
struct Waiter(#[cfg(not(loom))] Option<crate::sched::Waiter>);
impl Waiter {
    fn new() -> Self {
        Self(
            #[cfg(not(loom))]
            None,
        )
    }
    fn wait(&mut self) {
        #[cfg(not(loom))]
        {
            let w = self.0.get_or_insert_with(crate::sched::Waiter::new);
            if w.spin(None) == crate::sched::Wait::Park {
                crate::sched::yield_now();
                w.restart();
            }
        }
        #[cfg(loom)]
        crate::sync::spin_loop();
    }
}

impl<S: Sequential> fmt::Debug for FlatCombining<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlatCombining")
            .field("len", &self.len())
            .finish()
    }
}

/// A priority-queue request.
#[derive(Debug)]
pub enum HeapOp<T> {
    /// Insert a value.
    Insert(T),
    /// Remove a smallest value.
    DeleteMin,
}

impl<T: Ord> Sequential for BinaryHeap<Reverse<T>> {
    type Request = HeapOp<T>;
    type Response = Option<T>;
    fn apply(&mut self, req: HeapOp<T>) -> Option<T> {
        match req {
            HeapOp::Insert(v) => {
                self.push(Reverse(v));
                None
            }
            HeapOp::DeleteMin => self.pop().map(|Reverse(v)| v),
        }
    }
    fn len(&self) -> usize {
        BinaryHeap::len(self)
    }
}

/// A queue or stack request.
#[derive(Debug)]
pub enum PutTake<T> {
    /// Add a value.
    Put(T),
    /// Remove one (the oldest from a queue, the newest from a stack).
    Take,
}

impl<T> Sequential for VecDeque<T> {
    type Request = PutTake<T>;
    type Response = Option<T>;
    fn apply(&mut self, req: PutTake<T>) -> Option<T> {
        match req {
            PutTake::Put(v) => {
                self.push_back(v);
                None
            }
            PutTake::Take => self.pop_front(),
        }
    }
    fn len(&self) -> usize {
        VecDeque::len(self)
    }
}

impl<T> Sequential for Vec<T> {
    type Request = PutTake<T>;
    type Response = Option<T>;
    fn apply(&mut self, req: PutTake<T>) -> Option<T> {
        match req {
            PutTake::Put(v) => {
                self.push(v);
                None
            }
            PutTake::Take => self.pop(),
        }
    }
    fn len(&self) -> usize {
        Vec::len(self)
    }
}

/// A min-priority queue: `std`'s `BinaryHeap` under flat combining. Not FIFO
/// among equal keys. See the module doc for panicking and re-entering `Ord`s.
pub struct FcBinaryHeap<T: Ord>(FlatCombining<BinaryHeap<Reverse<T>>>);

impl<T: Ord> FcBinaryHeap<T> {
    /// An empty heap.
    pub fn new() -> Self {
        Self(FlatCombining::new(BinaryHeap::new()))
    }
    /// Inserts `value`.
    pub fn insert(&self, value: T) {
        self.0.execute(HeapOp::Insert(value));
    }
    /// Removes a smallest value, or `None` if the heap is empty.
    pub fn delete_min(&self) -> Option<T> {
        self.0.execute(HeapOp::DeleteMin)
    }
    /// The number of values (a snapshot).
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// Whether the heap is empty (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A FIFO queue: a `VecDeque` under flat combining.
///
/// ```
/// let q = mpsync::ds::combining::FcQueue::new();
/// q.enqueue(1);
/// q.enqueue(2);
/// assert_eq!((q.dequeue(), q.len()), (Some(1), 1));
/// ```
pub struct FcQueue<T>(FlatCombining<VecDeque<T>>);

impl<T> FcQueue<T> {
    /// An empty queue.
    pub fn new() -> Self {
        Self(FlatCombining::new(VecDeque::new()))
    }
    /// Appends `value`.
    pub fn enqueue(&self, value: T) {
        self.0.execute(PutTake::Put(value));
    }
    /// Removes the oldest value, or `None` if empty.
    pub fn dequeue(&self) -> Option<T> {
        self.0.execute(PutTake::Take)
    }
    /// The number of values (a snapshot).
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// Whether it is empty (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A LIFO stack: a `Vec` under flat combining.
///
/// ```
/// let s = mpsync::ds::combining::FcStack::new();
/// s.push(1);
/// s.push(2);
/// assert_eq!((s.pop(), s.len()), (Some(2), 1));
/// ```
pub struct FcStack<T>(FlatCombining<Vec<T>>);

impl<T> FcStack<T> {
    /// An empty stack.
    pub fn new() -> Self {
        Self(FlatCombining::new(Vec::new()))
    }
    /// Pushes `value`.
    pub fn push(&self, value: T) {
        self.0.execute(PutTake::Put(value));
    }
    /// Removes the newest value, or `None` if empty.
    pub fn pop(&self) -> Option<T> {
        self.0.execute(PutTake::Take)
    }
    /// The number of values (a snapshot).
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// Whether it is empty (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

macro_rules! fc_common {
    ($ty:ident, $name:literal, $($bound:tt)*) => {
        impl<T: $($bound)*> Default for $ty<T> {
            fn default() -> Self {
                Self::new()
            }
        }
        impl<T: $($bound)*> fmt::Debug for $ty<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct($name).field("len", &self.len()).finish()
            }
        }
    };
}
fc_common!(FcBinaryHeap, "FcBinaryHeap", Ord);
fc_common!(FcQueue, "FcQueue", Sized);
fc_common!(FcStack, "FcStack", Sized);

impl<T: Ord + Send> ConcurrentPriorityQueue<T> for FcBinaryHeap<T> {
    type Handle<'a>
        = &'a Self
    where
        Self: 'a;

    fn handle(&self) -> &Self {
        self
    }
}

impl<T: Ord> PriorityQueueHandle<T> for &FcBinaryHeap<T> {
    fn insert(&mut self, value: T) {
        FcBinaryHeap::insert(self, value)
    }
    fn delete_min(&mut self) -> Option<T> {
        FcBinaryHeap::delete_min(self)
    }
}

impl<T: Send> ConcurrentQueue<T> for FcQueue<T> {
    type Handle<'a>
        = &'a Self
    where
        Self: 'a;

    fn handle(&self) -> &Self {
        self
    }
}

impl<T> QueueHandle<T> for &FcQueue<T> {
    fn enqueue(&mut self, value: T) {
        FcQueue::enqueue(self, value)
    }
    fn dequeue(&mut self) -> Option<T> {
        FcQueue::dequeue(self)
    }
}

impl<T: Send> ConcurrentStack<T> for FcStack<T> {
    type Handle<'a>
        = &'a Self
    where
        Self: 'a;

    fn handle(&self) -> &Self {
        self
    }
}

impl<T> StackHandle<T> for &FcStack<T> {
    fn push(&mut self, value: T) {
        FcStack::push(self, value)
    }
    fn pop(&mut self) -> Option<T> {
        FcStack::pop(self)
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! `RUSTFLAGS="--cfg loom" cargo test -p mpsync --lib --release --target-dir target/loom ds::combining -- --test-threads=1`
    use super::*;
    use loom::sync::Arc;

    /// Two threads each insert and delete once: both deletions get a value,
    /// the two values are the two inserted (the response handed over is the
    /// one written, loom checks the cells for races), nothing is left.
    #[test]
    fn two_threads_twice_conserve_values() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(1);
        b.check(|| {
            let h = Arc::new(FcBinaryHeap::new());
            let ts: Vec<_> = (0..2u32)
                .map(|t| {
                    let h = h.clone();
                    loom::thread::spawn(move || {
                        h.insert(t);
                        h.delete_min().expect("own value at least")
                    })
                })
                .collect();
            let mut got: Vec<u32> = ts.into_iter().map(|t| t.join().unwrap()).collect();
            got.sort();
            assert_eq!(got, [0, 1]);
            assert!(h.is_empty());
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::sync::Arc;

    #[test]
    fn combining_conserves_values_across_threads() {
        let h: FcBinaryHeap<u64> = FcBinaryHeap::new();
        let q: FcQueue<u64> = FcQueue::new();
        let s: FcStack<u64> = FcStack::new();
        const T: u64 = 4;
        let n_per: u64 = if cfg!(miri) { 50 } else { 5_000 };
        let popped: Vec<Vec<u64>> = std::thread::scope(|sc| {
            let ts: Vec<_> = (0..T)
                .map(|t| {
                    let (h, q, s) = (&h, &q, &s);
                    sc.spawn(move || {
                        let mut got = Vec::new();
                        for i in 0..n_per {
                            let v = t * n_per + i;
                            h.insert(v);
                            q.enqueue(v);
                            s.push(v);
                            got.extend(h.delete_min());
                            got.extend(q.dequeue());
                            got.extend(s.pop());
                        }
                        got
                    })
                })
                .collect();
            ts.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let mut all: Vec<u64> = popped.into_iter().flatten().collect();
        all.sort();
        let want: Vec<u64> = (0..T * n_per).flat_map(|v| [v, v, v]).collect();
        assert_eq!(all, want, "every value popped exactly once from each");
        assert!(h.is_empty() && q.is_empty() && s.is_empty());
    }

    /// Fresh threads all try record 0 first: many short-lived threads make
    /// their claims collide, and a record two threads own loses a request
    /// (a value missing below) or a response (a thread waits for ever).
    #[test]
    fn combining_claims_are_exclusive() {
        let q: FcQueue<u64> = FcQueue::new();
        for round in 0..if cfg!(miri) { 3 } else { 300u64 } {
            let start = std::sync::Barrier::new(4);
            let got: Vec<u64> = std::thread::scope(|sc| {
                let ts: Vec<_> = (0..4u64)
                    .map(|t| {
                        let (q, start) = (&q, &start);
                        sc.spawn(move || {
                            start.wait();
                            let mut got = Vec::new();
                            for i in 0..20 {
                                q.enqueue((round * 4 + t) * 20 + i);
                                got.extend(q.dequeue());
                            }
                            got
                        })
                    })
                    .collect();
                ts.into_iter().flat_map(|t| t.join().unwrap()).collect()
            });
            let mut got = got;
            got.sort();
            let want: Vec<u64> = (round * 80..(round + 1) * 80).collect();
            assert_eq!(got, want, "round {round}: every value dequeued once");
        }
        assert!(q.is_empty());
    }

    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool as Flag, Ordering as O};
    use std::thread::ThreadId;
    /// A value whose comparisons record the thread they run on and, given a
    /// gate `(entered, open)`, hold the combiner until the test opens it.
    struct Probe {
        v: u32,
        gate: Option<Gate>,
        ran_on: Log,
    }
    impl Ord for Probe {
        fn cmp(&self, o: &Self) -> std::cmp::Ordering {
            let me = std::thread::current().id();
            self.ran_on
                .lock()
                .unwrap()
                .extend([(self.v, me), (o.v, me)]);
            if let Some(g) = self.gate.as_ref().or(o.gate.as_ref()) {
                // (entered, open): hold the combiner here until the test
                // has seen the other request published.
                g.0.store(true, O::SeqCst);
                poll_until(|| g.1.load(O::SeqCst));
            }
            self.v.cmp(&o.v)
        }
    }
    impl PartialOrd for Probe {
        fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(o))
        }
    }
    impl PartialEq for Probe {
        fn eq(&self, o: &Self) -> bool {
            self.v == o.v
        }
    }
    impl Eq for Probe {}

    type Log = Arc<Mutex<Vec<(u32, ThreadId)>>>;
    type Gate = Arc<(Flag, Flag)>;

    /// The test's own polling, through `sched` like every wait.
    fn poll_until(mut done: impl FnMut() -> bool) {
        while !done() {
            crate::sched::yield_now();
        }
    }

    /// Records whose request is published and not yet served.
    fn pending(h: &FcBinaryHeap<Probe>) -> usize {
        // Acquire: pairs with the owner's Release store of PENDING, so that
        // the test's SeqCst opening of the gate hands the combiner the whole
        // claim, `hi` raised included (with Relaxed, Miri let the combiner
        // read a stale `hi`, skip the record, and the owner serve itself).
        h.0.slots
            .iter()
            .filter(|s| s.state.load(Ordering::Acquire) == PENDING)
            .count()
    }

    /// A heap holding probe 0, a closed gate, and a maker of probes (gated
    /// or not) that log to `log`.
    fn probed_heap(
        log: &Log,
    ) -> (
        FcBinaryHeap<Probe>,
        Gate,
        impl Fn(u32, bool) -> Probe + Sync,
    ) {
        let gate: Gate = Arc::new((Flag::new(false), Flag::new(false)));
        let (g, log) = (gate.clone(), log.clone());
        let probe = move |v, gated: bool| Probe {
            v,
            gate: gated.then(|| g.clone()),
            ran_on: log.clone(),
        };
        let h = FcBinaryHeap::new();
        h.insert(probe(0, false));
        (h, gate, probe)
    }

    /// Claims race while the combiner lock is held, so every operation takes
    /// a record (none finds the lock free and applies its request directly):
    /// four fresh threads, all trying record 0 first, must end up with four
    /// records, and every value they inserted must be in the heap.
    #[test]
    fn combining_claims_are_exclusive_behind_a_held_lock() {
        let ran_on = Arc::new(Mutex::new(Vec::new()));
        for round in 0..if cfg!(miri) { 2 } else { 200u32 } {
            let (h, gate, probe) = probed_heap(&ran_on);
            let start = std::sync::Barrier::new(4);
            std::thread::scope(|sc| {
                sc.spawn(|| h.insert(probe(1, true)));
                poll_until(|| gate.0.load(O::SeqCst));
                for t in 0..4 {
                    let (h, start, probe) = (&h, &start, &probe);
                    sc.spawn(move || {
                        start.wait();
                        h.insert(probe(10 + t, false));
                    });
                }
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
                poll_until(|| pending(&h) >= 4 || std::time::Instant::now() >= deadline);
                let seen = pending(&h);
                gate.1.store(true, O::SeqCst);
                assert_eq!(seen, 4, "round {round}: four requests, four records");
            });
            let got: Vec<u32> = std::iter::from_fn(|| h.delete_min()).map(|p| p.v).collect();
            assert_eq!(got, [0, 1, 10, 11, 12, 13], "round {round}");
            ran_on.lock().unwrap().clear();
        }
    }

    /// A claimant stopped between reading a record free and taking it, while
    /// another thread claims and publishes that record, must not take it
    /// too: it moves on to another record, and both requests are served.
    #[test]
    fn combining_a_claim_that_read_a_record_free_too_early_moves_on() {
        use crate::sched::stall::Trap;
        use std::time::Duration;
        let ran_on = Arc::new(Mutex::new(Vec::new()));
        let (h, gate, probe) = probed_heap(&ran_on);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|sc| {
            // Holds the combiner lock, so the others claim records.
            sc.spawn(|| h.insert(probe(1, true)));
            poll_until(|| gate.0.load(O::SeqCst));
            sc.spawn(|| {
                tx.send(Trap::at(stall::FC_CLAIM_SEEN_FREE).this_thread().arm())
                    .unwrap();
                h.insert(probe(10, false));
            });
            let trap = rx.recv().unwrap();
            trap.wait_hit(Duration::from_secs(20))
                .expect("the first claimant stops");
            sc.spawn(|| h.insert(probe(11, false)));
            poll_until(|| pending(&h) == 1);
            trap.release();
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            poll_until(|| pending(&h) >= 2 || std::time::Instant::now() >= deadline);
            let seen = pending(&h);
            gate.1.store(true, O::SeqCst);
            assert_eq!(seen, 2, "two requests, two records");
        });
        let got: Vec<u32> = std::iter::from_fn(|| h.delete_min()).map(|p| p.v).collect();
        assert_eq!(got, [0, 1, 10, 11]);
    }

    /// A request published while another thread combines is applied by
    /// that combiner before it releases, not left for its owner to apply
    /// itself — also when the combiner found the lock free and applied its
    /// own request directly. The comparisons record the thread they run on.
    #[test]
    fn combining_serves_a_request_published_while_it_combines() {
        let ran_on = Arc::new(Mutex::new(Vec::new()));
        let (h, gate, probe) = probed_heap(&ran_on);
        let (combiner, other) = std::thread::scope(|sc| {
            let a = sc.spawn(|| {
                h.insert(probe(1, true));
                std::thread::current().id()
            });
            poll_until(|| gate.0.load(O::SeqCst));
            let b = sc.spawn(|| {
                h.insert(probe(2, false));
                std::thread::current().id()
            });
            poll_until(|| pending(&h) > 0);
            gate.1.store(true, O::SeqCst);
            (a.join().unwrap(), b.join().unwrap())
        });
        let ran_on = ran_on.lock().unwrap();
        let served: Vec<ThreadId> = ran_on.iter().filter(|r| r.0 == 2).map(|r| r.1).collect();
        assert!(!served.is_empty(), "the second insert compared");
        assert!(
            served.iter().all(|&t| t == combiner && t != other),
            "the second insert ran on its own thread, not in the combiner's session"
        );
        assert_eq!(h.len(), 3);
    }

    #[test]
    fn combining_single_thread_order() {
        let h = FcBinaryHeap::new();
        for v in [5u32, 1, 9, 3, 7, 3] {
            h.insert(v);
        }
        let out: Vec<u32> = std::iter::from_fn(|| h.delete_min()).collect();
        assert_eq!(out, [1, 3, 3, 5, 7, 9]);
        let q = FcQueue::new();
        let s = FcStack::new();
        for v in 0..4u32 {
            q.enqueue(v);
            s.push(v);
        }
        assert_eq!(
            std::iter::from_fn(|| q.dequeue()).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert_eq!(
            std::iter::from_fn(|| s.pop()).collect::<Vec<_>>(),
            [3, 2, 1, 0]
        );
        assert_eq!(
            format!("{h:?} {q:?} {s:?}"),
            "FcBinaryHeap { len: 0 } FcQueue { len: 0 } FcStack { len: 0 }"
        );
    }

    #[test]
    fn combining_more_threads_than_slots_fall_back() {
        const PER: usize = if cfg!(miri) { 5 } else { 200 };
        let h: FcStack<usize> = FcStack::new();
        std::thread::scope(|sc| {
            for t in 0..SLOTS + 8 {
                let h = &h;
                sc.spawn(move || {
                    for i in 0..PER {
                        h.push(t * 1000 + i);
                    }
                });
            }
        });
        assert_eq!(h.len(), (SLOTS + 8) * PER);
    }

    thread_local! {
        static TARGET: RefCell<Option<&'static FcBinaryHeap<Key>>> = const { RefCell::new(None) };
        static ARMED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// A key whose `Ord` may panic (`.1`, when the comparing thread is armed)
    /// or use the heap it is in (`.2`).
    #[derive(PartialEq, Eq, Debug)]
    struct Key(u32, bool, bool);
    impl PartialOrd for Key {
        fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for Key {
        fn cmp(&self, o: &Self) -> std::cmp::Ordering {
            if (self.1 || o.1) && ARMED.with(|a| a.get()) {
                panic!("Ord panics");
            }
            if self.2 || o.2 {
                TARGET.with(|t| {
                    if let Some(h) = *t.borrow() {
                        h.insert(Key(0, false, false));
                    }
                });
            }
            self.0.cmp(&o.0)
        }
    }

    #[test]
    fn combining_hostile_ord_panics_its_caller_and_others_are_served() {
        let boxed = Box::into_raw(Box::new(FcBinaryHeap::new()));
        // SAFETY: `boxed` is live until the `Box::from_raw` below, after the
        // last use of `h` and of the thread-local's copy of it.
        let h: &'static FcBinaryHeap<Key> = unsafe { &*boxed };
        TARGET.with(|t| *t.borrow_mut() = Some(h));
        h.insert(Key(2, false, false));
        ARMED.with(|a| a.set(true));
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| h.insert(Key(1, true, false))));
        ARMED.with(|a| a.set(false));
        let msg = r.expect_err("a panicking Ord panics the insert");
        assert_eq!(msg.downcast_ref::<&str>().copied(), Some("Ord panics"));
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| h.insert(Key(3, false, true))));
        let msg = r.expect_err("re-entry panics");
        let msg = msg.downcast_ref::<&str>().copied().unwrap_or_default();
        assert!(msg.contains("re-entered"), "{msg}");
        TARGET.with(|t| *t.borrow_mut() = None);
        // Usable afterwards: the lock released, other threads served.
        let n = h.len();
        assert!(n >= 2, "{n}");
        std::thread::scope(|sc| {
            for i in 0..3 {
                sc.spawn(move || h.insert(Key(10 + i, false, false)));
            }
        });
        assert_eq!(h.len(), n + 3);
        // SAFETY: made by `Box::into_raw` above; `h` is not used again and the
        // thread-local no longer holds it.
        drop(unsafe { Box::from_raw(boxed) });
    }

    #[test]
    fn combining_panics_go_to_their_own_threads() {
        // Threads whose every insert panics in `Ord`, beside threads whose
        // inserts do not: the good ones are all served, the bad ones all
        // panic, whichever thread combined.
        /// `u32::MAX` panics on its first comparison (its own insert's).
        struct P(u32, std::sync::atomic::AtomicBool);
        impl PartialEq for P {
            fn eq(&self, o: &Self) -> bool {
                self.0 == o.0
            }
        }
        impl Eq for P {}
        impl PartialOrd for P {
            fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(o))
            }
        }
        impl Ord for P {
            fn cmp(&self, o: &Self) -> std::cmp::Ordering {
                for k in [self, o] {
                    if k.0 == u32::MAX && !k.1.swap(true, std::sync::atomic::Ordering::Relaxed) {
                        panic!("bad key");
                    }
                }
                self.0.cmp(&o.0)
            }
        }
        let p = |v| P(v, std::sync::atomic::AtomicBool::new(false));
        let h: FcBinaryHeap<P> = FcBinaryHeap::new();
        h.insert(p(0));
        let (good, bad) = std::thread::scope(|sc| {
            let g: Vec<_> = (0..2)
                .map(|_| {
                    let h = &h;
                    sc.spawn(move || {
                        (0..500)
                            .filter(|i| {
                                h.insert(p(*i + 1));
                                true
                            })
                            .count()
                    })
                })
                .collect();
            let b: Vec<_> = (0..2)
                .map(|_| {
                    let h = &h;
                    sc.spawn(move || {
                        (0..50)
                            .filter(|_| {
                                std::panic::catch_unwind(AssertUnwindSafe(|| h.insert(p(u32::MAX))))
                                    .is_err()
                            })
                            .count()
                    })
                })
                .collect();
            (
                g.into_iter().map(|t| t.join().unwrap()).sum::<usize>(),
                b.into_iter().map(|t| t.join().unwrap()).sum::<usize>(),
            )
        });
        assert_eq!(good, 1000);
        assert_eq!(bad, 100, "every bad insert panicked in its own thread");
        // One comparison per bad insert at least panics; the good values and
        // the bad ones are all kept.
        assert_eq!(h.len(), 1 + 1000 + 100);
    }

    #[test]
    fn combining_borrowed_values_and_drops() {
        let words = [String::from("b"), String::from("a")];
        let h: FcBinaryHeap<&String> = FcBinaryHeap::new();
        h.insert(&words[0]);
        h.insert(&words[1]);
        assert_eq!(h.delete_min().map(String::as_str), Some("a"));
        let token = Arc::new(());
        {
            let h: FcBinaryHeap<(u32, Arc<()>)> = FcBinaryHeap::default();
            let q: FcQueue<Arc<()>> = FcQueue::default();
            for i in 0..5 {
                h.insert((i, token.clone()));
                q.enqueue(token.clone());
            }
            assert_eq!(h.delete_min().map(|v| v.0), Some(0));
            drop(q.dequeue());
            assert_eq!(Arc::strong_count(&token), 9);
        }
        assert_eq!(Arc::strong_count(&token), 1);
    }
}

#[cfg(all(test, not(loom), not(miri)))]
mod bench {
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool as StdBool, Ordering as O};
    use std::time::Duration;

    /// Each thread loops insert + delete_min for `len`: total pairs/s and
    /// min/max per-thread pairs.
    fn round(threads: usize, len: Duration, pair: &(dyn Fn(u64) + Sync)) -> (f64, f64) {
        let stop = StdBool::new(false);
        let counts: Vec<u64> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        let mut n = 0u64;
                        // Relaxed: a stop flag; the join orders the counts.
                        while !stop.load(O::Relaxed) {
                            pair(n);
                            n += 1;
                        }
                        n
                    })
                })
                .collect();
            // The bench's own timer, not a wait of the structure's.
            std::thread::sleep(len);
            stop.store(true, O::Relaxed);
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        let total: u64 = counts.iter().sum();
        (
            total as f64 / len.as_secs_f64(),
            *min as f64 / (*max).max(1) as f64,
        )
    }

    /// `FcBinaryHeap` against `Mutex<BinaryHeap>` at 2, 4 and 8 threads, 7
    /// interleaved 300 ms rounds each, medians (`cargo test -p mpsync
    /// --release --lib combining::bench -- --ignored --nocapture`); prints,
    /// asserts nothing about speed.
    #[test]
    #[ignore]
    fn fc_heap_against_a_mutex_heap() {
        let len = Duration::from_millis(300);
        for threads in [2usize, 4, 8] {
            let fc: FcBinaryHeap<u64> = FcBinaryHeap::new();
            let mx: Mutex<BinaryHeap<Reverse<u64>>> = Mutex::new(BinaryHeap::new());
            let fc_pair = |n: u64| {
                fc.insert(n);
                let _ = fc.delete_min();
            };
            let mx_pair = |n: u64| {
                mx.lock().unwrap().push(Reverse(n));
                let _ = mx.lock().unwrap().pop();
            };
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for r in 0..7 {
                if r % 2 == 0 {
                    a.push(round(threads, len, &fc_pair));
                    b.push(round(threads, len, &mx_pair));
                } else {
                    b.push(round(threads, len, &mx_pair));
                    a.push(round(threads, len, &fc_pair));
                }
            }
            let med = |v: &[(f64, f64)]| {
                let mut t: Vec<f64> = v.iter().map(|x| x.0).collect();
                let mut f: Vec<f64> = v.iter().map(|x| x.1).collect();
                t.sort_by(f64::total_cmp);
                f.sort_by(f64::total_cmp);
                (t[t.len() / 2] / 1e6, f[f.len() / 2])
            };
            let (fa, fb) = (med(&a), med(&b));
            eprintln!(
                "threads {threads}: FC {:.2} M pairs/s (fair {:.2}), Mutex<BinaryHeap> {:.2} (fair {:.2}): {:.2}x",
                fa.0,
                fa.1,
                fb.0,
                fb.1,
                fa.0 / fb.0
            );
        }
    }
}
