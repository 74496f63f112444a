//! The data structures of the papers: queues, stacks, priority queues and
//! counters, lock-based (generic over the lock) and non-blocking (generic over
//! the [`reclaim`](crate::reclaim) scheme and the node allocator).
//!
//! Michael & Scott, PODC 1996 / JPDC 1998 (papers/000_…) and Hart 2005
//! (papers/002_…).
//!
//! Every structure is `Send + Sync` and frees what it holds on drop. Threads
//! work on a structure through a **handle** ([`ConcurrentQueue::handle`], …): for
//! the lock-based structures it is just a reference; for the non-blocking ones it
//! also registers the thread with the structure's reclamation scheme (a
//! [`Local`](crate::reclaim::Local)), so the same test or benchmark drives every
//! structure. The handle traits ([`QueueHandle`], [`StackHandle`],
//! [`PriorityQueueHandle`]) carry the operations; [`quiescent`](QueueHandle::quiescent)
//! tells a QSBR-based structure that the thread holds no references (a no-op for
//! everything else). The non-blocking structures' handles are one generic type,
//! [`handle::Handle`]; [`handle::Auto`] wraps any of them (and the lock-free and
//! concurrently-readable maps) for a handle-free `&self` API with a registration
//! cached per thread (`q.enqueue(x)`, `m.insert(k, v)`).
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
//! ```

pub mod alloc;
pub mod counter;
pub mod cr_hash;
pub mod handle;
pub mod hash;
pub mod heap;
mod herlihy_heap;
mod herlihy_stack;
pub mod hm_list;
#[cfg(all(test, not(loom)))]
mod hostile;
pub mod lf;
pub mod locked_hash;
pub mod map;
pub mod ms_queue;
pub mod plj_queue;
pub mod queue;
pub mod stack;
pub mod treiber;
mod version;

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
