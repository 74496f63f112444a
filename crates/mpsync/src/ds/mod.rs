//! The data structures of the papers — queues, stacks, priority queues,
//! counters and hash maps — and, in front of them, the defaults to reach for.
//!
//! Michael & Scott, PODC 1996 / JPDC 1998 (papers/000_…) and Hart 2005
//! (papers/002_…).
//!
//! # Start here
//!
//! | you need            | use                      | what it is                                                                 |
//! |---------------------|--------------------------|----------------------------------------------------------------------------|
//! | a hash map          | [`HashMap<K, V>`]        | [`hash_map`]: lockless reads, atomic updates, resizes; `std`/dashmap API     |
//! | a FIFO queue        | [`Queue<T>`]             | Michael–Scott's lock-free queue over EBR, no handles                       |
//! | a LIFO stack        | [`Stack<T>`]             | Treiber's lock-free stack over EBR, no handles                             |
//! | a priority queue    | [`PriorityQueue<T>`]     | a skew heap under a [`SpinThenPark`](crate::lock::SpinThenPark) lock       |
//!
//! All take `&self` and need no setup: each thread's registration with the
//! structure's reclamation domain is made on its first operation and cached
//! ([`Auto`](handle::Auto), like `crossbeam_epoch::pin()`). The other
//! implementations are one type parameter away: [`QueueWith<T, Qsbr>`],
//! [`StackWith<T, HazardPointers>`], [`PriorityQueueWith<T, TasB>`], or any structure
//! below wrapped in [`Auto`](handle::Auto) (`Auto<PljQueue<T>>`,
//! `Auto<LfHashMap<K, V>>`, …).
//!
//! ```
//! use mpsync::{HashMap, PriorityQueue, Queue, Stack};
//!
//! let q: Queue<u32> = Queue::new();
//! let s: Stack<u32> = Stack::new();
//! let pq: PriorityQueue<u32> = PriorityQueue::new();
//! let m: HashMap<u32, String> = HashMap::new();
//! std::thread::scope(|sc| {
//!     for t in 0..4 {
//!         let (q, s, pq, m) = (&q, &s, &pq, &m);
//!         sc.spawn(move || {
//!             q.enqueue(t);
//!             s.push(t);
//!             pq.insert(t);
//!             m.insert(t, t.to_string());
//!         });
//!     }
//! });
//! assert_eq!((q.len(), s.len(), pq.len(), m.len()), (4, 4, 4, 4));
//! assert_eq!(pq.delete_min(), Some(0));
//! assert_eq!(m.get(&3).as_deref(), Some("3"));
//! assert!(!q.is_empty());
//! ```
//!
//! Why these: the queue and stack are the papers' non-blocking algorithms
//! (a preempted thread never blocks another; `mpsync run ds-oversub` measures
//! them against the lock-based ones and crossbeam), over EBR because EBR
//! needs no help from the caller (see below). The map is Hart's
//! concurrently-readable table: the one here that resizes, with lockless
//! reads and atomic read-modify-write updates (`mpsync run map-oversub`
//! measures every table against papaya and dashmap). Skew-heap priority
//! queues are lock-based or copy the heap per operation (Herlihy's); the
//! lock-based one with a lock that parks a waiter whose holder is preempted is
//! the default.
//!
//! Beside the defaults, four structures aimed at oversubscribed machines,
//! each measured by `mpsync run ds-oversub` against the defaults and the
//! peers: [`elimination::EliminationStack`] (Treiber's stack whose failed
//! CASes meet an opposite operation in a collision slot instead of backing
//! off), [`scq::ScqQueue`] (a bounded FIFO over fetch-and-add rings; no
//! reclamation, no handles), [`lscq::LscqQueue`] (the unbounded one: SCQ
//! rings linked into a list, spent ones retired through a reclaimer) and
//! [`binary_heap::LockedBinaryHeap`] (`std`'s binary heap under a
//! preemption-safe lock).
//!
//! # Handles, for hot paths
//!
//! Under the defaults sit the papers' structures, which take the caller's
//! registration explicitly. A **handle** ([`ConcurrentQueue::handle`], …)
//! holds one for a thread: it saves the per-operation lookup of the cached
//! registration (a thread-id read and an index) and, under QSBR, announces a
//! quiescent state every 100 operations (Hart's test loop). Use one in a
//! thread's hot loop; the handle traits ([`QueueHandle`], [`StackHandle`],
//! [`PriorityQueueHandle`]) let the same test or benchmark drive every
//! structure; [`quiescent`](QueueHandle::quiescent) tells a QSBR-based
//! structure that the thread holds no references (a no-op for everything
//! else). The non-blocking structures' handles are one generic type,
//! [`handle::Handle`].
//!
//! # Memory reclamation and idle threads
//!
//! A removed node is freed only when no thread can still be reading it, and
//! what "can still be reading" means is the scheme's
//! ([`reclaim`](crate::reclaim)). The trap is **QSBR with a handle held by a
//! thread that has stopped operating**: QSBR frees a node only after every
//! registered thread announced a quiescent state since the node was removed,
//! and an idle thread holding its handle announces none, so *nothing* is freed
//! until it operates again or drops the handle — with one idle handle, a
//! million enqueue/dequeue pairs leave a million nodes pending. The defaults
//! avoid it twice over: EBR needs no announcements (a thread outside an
//! operation holds nothing back), and [`Auto`](handle::Auto) parks each
//! thread's cached registration after every operation (so even
//! `Auto<MsQueue<T, Qsbr>>` is safe from it). With explicit QSBR handles,
//! drop a thread's handle (or call [`quiescent`](QueueHandle::quiescent))
//! before it goes idle.
//!
//! ```
//! use mpsync::Queue;
//! use mpsync::reclaim::Reclaimer;
//!
//! let q: Queue<u64> = Queue::new();
//! let domain = q.inner().domain().clone();
//! let (started, stop) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
//! std::thread::scope(|s| {
//!     s.spawn(|| {
//!         q.enqueue(0); // registered with the domain, then idle
//!         started.wait();
//!         stop.wait();
//!     });
//!     started.wait();
//!     for i in 0..10_000 {
//!         q.enqueue(i);
//!         q.dequeue();
//!     }
//!     stop.wait();
//! });
//! let st = domain.stats();
//! assert!(st.pending < 1_000, "the idle thread held nothing back: {st:?}");
//! ```
//!
//! **Values' `Drop`, `Clone` and `Ord`.** A value's `Drop` may run inside any
//! operation of a non-blocking structure (reclamation frees removed values and
//! replaced nodes there, also of other structures of the domain); it may use
//! any structure, the same one included, and any registration (see
//! [`reclaim`](crate::reclaim#what-a-retired-values-drop-or-a-deferred-closure-may-do)).
//! A `Drop`, `Clone` or `Ord` that panics makes the operation that called it
//! panic and nothing else: the structure keeps its contents and stays usable,
//! no value is lost or dropped twice, and a structure being dropped drops all
//! the values it holds before the first panic comes out. Values dropped by a
//! shared domain must be `'static` (Herlihy's heap requires it); structures
//! whose domain never drops a value accept borrowed ones.
//!
//! ```
//! use mpsync::ds::{ConcurrentQueue, QueueHandle};
//!
//! fn fifo<Q: ConcurrentQueue<u32>>(q: &Q) {
//!     let mut h = q.handle();
//!     h.enqueue(1);
//!     h.enqueue(2);
//!     assert_eq!(h.dequeue(), Some(1));
//!     assert_eq!(h.dequeue(), Some(2));
//!     assert_eq!(h.dequeue(), None);
//! }
//! fifo(&mpsync::ds::ms_queue::MsQueue::<u32>::new());
//! ```

pub mod alloc;
pub mod binary_heap;
pub mod combining;
pub mod counter;
pub mod cr_hash;
pub mod elimination;
pub mod handle;
pub mod hash;
#[cfg(not(loom))]
pub mod hash_map;
pub mod heap;
mod herlihy_heap;
mod herlihy_stack;
pub mod hm_list;
#[cfg(all(test, not(loom)))]
mod hostile;
pub mod lf;
pub mod locked_hash;
pub mod lscq;
pub mod map;
pub mod ms_queue;
pub mod plj_queue;
pub mod queue;
pub mod scq;
pub mod stack;
pub mod treiber;
mod version;

#[cfg(not(loom))]
#[doc(inline)]
pub use hash_map::HashMap;

/// The default FIFO queue: Michael & Scott's lock-free queue over EBR,
/// handle-free ([`Auto`](handle::Auto): `enqueue`, `dequeue`, `is_empty`,
/// `len` on `&self`). Make one with `Queue::new()`; [`QueueWith`] takes
/// another reclaimer. (No type parameter but `T`, so `Queue::new()`
/// needs no annotation: a defaulted parameter would not be inferred.)
///
/// ```
/// let q = mpsync::Queue::new();
/// q.enqueue("a");
/// q.enqueue("b");
/// assert_eq!(q.len(), 2);
/// assert_eq!((q.dequeue(), q.dequeue(), q.dequeue()), (Some("a"), Some("b"), None));
/// assert!(q.is_empty());
/// ```
#[cfg(not(loom))]
pub type Queue<T> = QueueWith<T, crate::reclaim::Ebr>;

/// [`Queue`] over reclaimer `R`: `QueueWith<T, Qsbr>` frees sooner when
/// every thread passes quiescent states, `QueueWith<T, HazardPointers>`
/// bounds the backlog a stopped thread can cause.
///
/// ```
/// use mpsync::{ds::QueueWith, reclaim::HazardPointers};
///
/// let q: QueueWith<u32, HazardPointers> = QueueWith::new();
/// q.enqueue(1);
/// assert_eq!(q.dequeue(), Some(1));
/// ```
#[cfg(not(loom))]
pub type QueueWith<T, R> = handle::Auto<ms_queue::MsQueue<T, R>>;

/// The default LIFO stack: Treiber's lock-free stack over EBR, handle-free
/// (`push`, `pop`, `is_empty`, `len` on `&self`). Make one with
/// `Stack::new()`; [`StackWith`] takes another reclaimer.
///
/// ```
/// let s = mpsync::Stack::new();
/// s.push(1);
/// s.push(2);
/// assert_eq!((s.pop(), s.pop(), s.pop()), (Some(2), Some(1), None));
/// ```
#[cfg(not(loom))]
pub type Stack<T> = StackWith<T, crate::reclaim::Ebr>;

/// [`Stack`] over reclaimer `R`.
///
/// ```
/// use mpsync::{ds::StackWith, reclaim::Qsbr};
///
/// let s: StackWith<u8, Qsbr> = StackWith::new();
/// s.push(1);
/// assert_eq!(s.pop(), Some(1));
/// ```
#[cfg(not(loom))]
pub type StackWith<T, R> = handle::Auto<treiber::TreiberStack<T, R>>;

/// The default min-priority queue: a skew heap under a
/// [`SpinThenPark`](crate::lock::SpinThenPark) lock (it spins while the
/// holder runs and parks once it is preempted); [`PriorityQueueWith`] takes
/// another lock.
///
/// ```
/// let pq = mpsync::PriorityQueue::new();
/// for v in [5, 1, 3] {
///     pq.insert(v);
/// }
/// assert_eq!((pq.delete_min(), pq.len()), (Some(1), 2));
/// ```
pub type PriorityQueue<T> = PriorityQueueWith<T, crate::lock::SpinThenPark>;

/// [`PriorityQueue`] under lock `L`.
///
/// ```
/// use mpsync::{ds::PriorityQueueWith, lock::TasBNp};
///
/// let pq: PriorityQueueWith<u32, TasBNp> = PriorityQueueWith::new();
/// pq.insert(2);
/// assert_eq!(pq.delete_min(), Some(2));
/// ```
pub type PriorityQueueWith<T, L> = heap::LockedSkewHeap<L, T>;

/// A FIFO queue shared by threads, each working through its own handle.
pub trait ConcurrentQueue<T>: Send + Sync {
    /// One thread's access.
    type Handle<'a>: QueueHandle<T>
    where
        Self: 'a;
    /// The calling thread's access (the non-blocking queues register the thread
    /// with their reclamation scheme here; dropping the handle leaves it).
    fn handle(&self) -> Self::Handle<'_>;
}

/// One thread's operations on a [`ConcurrentQueue`].
pub trait QueueHandle<T> {
    /// Appends `value` at the tail.
    fn enqueue(&mut self, value: T);
    /// Removes the value at the head, or `None` if the queue is empty.
    fn dequeue(&mut self) -> Option<T>;
    /// This thread holds no reference into the structure (QSBR's quiescent
    /// state); a no-op unless the structure reclaims with QSBR.
    fn quiescent(&mut self) {}
}

/// A LIFO stack shared by threads, each working through its own handle.
pub trait ConcurrentStack<T>: Send + Sync {
    /// One thread's access.
    type Handle<'a>: StackHandle<T>
    where
        Self: 'a;
    /// The calling thread's access.
    fn handle(&self) -> Self::Handle<'_>;
}

/// One thread's operations on a [`ConcurrentStack`].
pub trait StackHandle<T> {
    /// Pushes `value` on top.
    fn push(&mut self, value: T);
    /// Removes the top value, or `None` if the stack is empty.
    fn pop(&mut self) -> Option<T>;
    /// As [`QueueHandle::quiescent`].
    fn quiescent(&mut self) {}
}

/// A min-priority queue shared by threads, each working through its own handle.
pub trait ConcurrentPriorityQueue<T: Ord>: Send + Sync {
    /// One thread's access.
    type Handle<'a>: PriorityQueueHandle<T>
    where
        Self: 'a;
    /// The calling thread's access.
    fn handle(&self) -> Self::Handle<'_>;
}

/// One thread's operations on a [`ConcurrentPriorityQueue`].
pub trait PriorityQueueHandle<T: Ord> {
    /// Inserts `value`.
    fn insert(&mut self, value: T);
    /// Removes a smallest value, or `None` if the queue is empty.
    fn delete_min(&mut self) -> Option<T>;
    /// As [`QueueHandle::quiescent`].
    fn quiescent(&mut self) {}
}

/// A shared counter (paper 000 §4.4).
pub trait Counter: Send + Sync {
    /// Adds one and returns the value before.
    fn increment(&self) -> u64;
    /// The current value.
    fn get(&self) -> u64;
}
