//! Lock-based FIFO queues: a single-lock queue and Michael & Scott's two-lock
//! queue.
//!
//! Michael & Scott, PODC 1996 (papers/000_…) §3 and its Figure 2 (two-lock
//! queue). Both are generic over any `lock_api::RawMutex`; with a `-np` lock
//! (`LockedQueue<TasBNp, T>`, `TwoLockQueue<TasBNp, T>`) they are the paper's
//! preemption-safe queues. Blocking; the two-lock queue lets one enqueuer and one
//! dequeuer proceed at once (head and tail locks on separate cache lines).
//!
//! Uses `lock` (through the type parameter), `util` (padding), `sync`.

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::fmt;
use std::mem::MaybeUninit;
use std::ptr;

use crate::sync::{AtomicPtr, Ordering};
use crate::util::CachePadded;

use super::lf::free_chain;
use super::{ConcurrentQueue, QueueHandle};

/// A FIFO queue: a `VecDeque` under one lock of type `L`.
///
/// ```
/// use mpsync::ds::queue::LockedQueue;
/// use mpsync::lock::TasBNp;
///
/// let q: LockedQueue<TasBNp, u32> = LockedQueue::new();
/// q.enqueue(1);
/// q.enqueue(2);
/// assert_eq!(q.len(), 2);
/// assert_eq!(q.dequeue(), Some(1));
/// assert_eq!(q.dequeue(), Some(2));
/// assert!(q.is_empty());
/// ```
pub struct LockedQueue<L: lock_api::RawMutex, T> {
    items: lock_api::Mutex<L, VecDeque<T>>,
}

impl<L: lock_api::RawMutex, T> LockedQueue<L, T> {
    /// An empty queue.
    pub fn new() -> Self {
        Self {
            items: lock_api::Mutex::new(VecDeque::new()),
        }
    }

    /// Appends `value` at the tail.
    pub fn enqueue(&self, value: T) {
        self.items.lock().push_back(value);
    }

    /// Removes the value at the head, or `None` if the queue is empty.
    pub fn dequeue(&self) -> Option<T> {
        self.items.lock().pop_front()
    }

    /// The number of values (a snapshot).
    pub fn len(&self) -> usize {
        self.items.lock().len()
    }

    /// Whether the queue is empty (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<L: lock_api::RawMutex, T> Default for LockedQueue<L, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<L: lock_api::RawMutex, T> fmt::Debug for LockedQueue<L, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockedQueue")
            .field("len", &self.len())
            .finish()
    }
}

impl<L, T> ConcurrentQueue<T> for LockedQueue<L, T>
where
    L: lock_api::RawMutex + Send + Sync,
    T: Send,
{
    type Handle<'a>
        = &'a Self
    where
        Self: 'a;

    fn handle(&self) -> &Self {
        self
    }
}

impl<L: lock_api::RawMutex, T> QueueHandle<T> for &LockedQueue<L, T> {
    fn enqueue(&mut self, value: T) {
        LockedQueue::enqueue(self, value)
    }
    fn dequeue(&mut self) -> Option<T> {
        LockedQueue::dequeue(self)
    }
}

/// A node of [`TwoLockQueue`]. The value is initialized in every node except the
/// dummy (the node `head` points to), whose value was taken by the dequeue that
/// made it the dummy, or never set (the first dummy).
struct Node<T> {
    value: UnsafeCell<MaybeUninit<T>>,
    /// Written by an enqueuer (tail lock) and read by a dequeuer (head lock) at
    /// the same time when the queue is empty, hence atomic.
    next: AtomicPtr<Node<T>>,
}

impl<T> Node<T> {
    fn alloc(value: MaybeUninit<T>) -> *mut Node<T> {
        Box::into_raw(Box::new(Node {
            value: UnsafeCell::new(value),
            next: AtomicPtr::new(ptr::null_mut()),
        }))
    }
}

/// A pointer guarded by one of the queue's locks.
struct End<T>(*mut Node<T>);

/// Michael & Scott's two-lock FIFO queue: a linked list with a dummy node, `head`
/// under one lock and `tail` under another, on separate cache lines.
///
/// ```
/// use mpsync::ds::queue::TwoLockQueue;
/// use mpsync::ds::{ConcurrentQueue, QueueHandle};
/// use mpsync::lock::{TasB, TasBNp};
///
/// let q: TwoLockQueue<TasBNp, String> = TwoLockQueue::new();
/// q.enqueue("a".into());
/// q.enqueue("b".into());
/// assert_eq!(q.dequeue().as_deref(), Some("a"));
///
/// let q: TwoLockQueue<TasB, u8> = TwoLockQueue::new();
/// let mut h = q.handle();
/// h.enqueue(7);
/// assert_eq!(h.dequeue(), Some(7));
/// assert!(q.is_empty());
/// ```
pub struct TwoLockQueue<L: lock_api::RawMutex, T> {
    head: CachePadded<lock_api::Mutex<L, End<T>>>,
    tail: CachePadded<lock_api::Mutex<L, End<T>>>,
}

// SAFETY: the queue owns its nodes and moves `T`s between threads (`T: Send`); the
// raw pointers are only followed under the locks as the protocol below says.
unsafe impl<L: lock_api::RawMutex + Send, T: Send> Send for TwoLockQueue<L, T> {}
// SAFETY: as above; `&TwoLockQueue` never hands out `&T`. The locks are shared.
unsafe impl<L: lock_api::RawMutex + Sync, T: Send> Sync for TwoLockQueue<L, T> {}

impl<L: lock_api::RawMutex, T> TwoLockQueue<L, T> {
    /// An empty queue (just the dummy node).
    pub fn new() -> Self {
        let dummy = Node::alloc(MaybeUninit::uninit());
        Self {
            head: CachePadded::new(lock_api::Mutex::new(End(dummy))),
            tail: CachePadded::new(lock_api::Mutex::new(End(dummy))),
        }
    }

    /// Appends `value` at the tail.
    pub fn enqueue(&self, value: T) {
        let node = Node::alloc(MaybeUninit::new(value));
        let mut tail = self.tail.lock();
        // Release: publishes the node (its value) to the dequeuer's Acquire load.
        // SAFETY: the tail node is live: a dequeuer frees only the old dummy, and
        // the dummy is the tail only while the queue is empty, when the dequeuer
        // sees `next == null` and frees nothing. We hold the tail lock, so we are
        // the only writer of its `next`.
        unsafe { (*tail.0).next.store(node, Ordering::Release) };
        tail.0 = node;
    }

    /// Removes the value at the head, or `None` if the queue is empty.
    pub fn dequeue(&self) -> Option<T> {
        let mut head = self.head.lock();
        let dummy = head.0;
        // SAFETY: the dummy is live; only the holder of the head lock frees it.
        // Acquire: pairs with the enqueuer's Release store of `next`.
        let next = unsafe { (*dummy).next.load(Ordering::Acquire) };
        if next.is_null() {
            return None;
        }
        // SAFETY: `next` is initialized (it is not the dummy) and its value is read
        // once, here, under the head lock; it becomes the new dummy. The enqueuer
        // that linked it no longer touches its value.
        let value = unsafe { (*(*next).value.get()).assume_init_read() };
        head.0 = next;
        drop(head);
        // SAFETY: the old dummy is unreachable: `head` moved past it and `tail` is
        // not it (its `next` was non-null, and the enqueuer that set it stored it
        // before moving `tail` on, under the tail lock it no longer needed it for).
        // Its value was taken earlier (or never set), so only the box is freed.
        drop(unsafe { Box::from_raw(dummy) });
        Some(value)
    }

    /// Whether the queue is empty (a snapshot).
    pub fn is_empty(&self) -> bool {
        let head = self.head.lock();
        // SAFETY: the dummy is live while we hold the head lock.
        // Acquire: pairs with the enqueuer's Release store of `next`.
        unsafe { (*head.0).next.load(Ordering::Acquire).is_null() }
    }
}

impl<L: lock_api::RawMutex, T> Default for TwoLockQueue<L, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<L: lock_api::RawMutex, T> Drop for TwoLockQueue<L, T> {
    /// Drops the values still queued; one whose `Drop` panics stops none of the
    /// others (every node is freed, then the first panic goes on).
    fn drop(&mut self) {
        let mut dummy = true;
        // SAFETY: `&mut self`: nobody else touches the nodes; each is reached once,
        // from its unique predecessor (`free_chain` reads `next` before freeing).
        // The dummy's value is uninitialized; every later node's is initialized
        // and dropped once, after its box is freed. Relaxed (all loads here):
        // `&mut self` orders everything before us.
        unsafe {
            free_chain(
                self.head.get_mut().0,
                |n| (*n).next.load(Ordering::Relaxed),
                |n| {
                    let node = Box::from_raw(n);
                    let value = node.value.into_inner();
                    if !std::mem::take(&mut dummy) {
                        drop(value.assume_init());
                    }
                },
            )
        }
        .resume();
    }
}

impl<L: lock_api::RawMutex, T> fmt::Debug for TwoLockQueue<L, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TwoLockQueue")
            .field("empty", &self.is_empty())
            .finish()
    }
}

impl<L, T> ConcurrentQueue<T> for TwoLockQueue<L, T>
where
    L: lock_api::RawMutex + Send + Sync,
    T: Send,
{
    type Handle<'a>
        = &'a Self
    where
        Self: 'a;

    fn handle(&self) -> &Self {
        self
    }
}

impl<L: lock_api::RawMutex, T> QueueHandle<T> for &TwoLockQueue<L, T> {
    fn enqueue(&mut self, value: T) {
        TwoLockQueue::enqueue(self, value)
    }
    fn dequeue(&mut self) -> Option<T> {
        TwoLockQueue::dequeue(self)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::lock::{TasB, TasBNp};
    use crate::util::rng::SplitMix64;
    use std::rc::Rc;

    /// Random enqueue/dequeue mixes against `VecDeque`, through the handle trait.
    fn matches_vecdeque<Q: ConcurrentQueue<u64>>(make: impl Fn() -> Q) {
        let ops = if cfg!(miri) { 60 } else { 2_000 };
        for seed in 0..4 {
            let q = make();
            let mut h = q.handle();
            let mut model = VecDeque::new();
            let mut g = SplitMix64::new(seed);
            for i in 0..ops {
                if !g.next_u64().is_multiple_of(3) {
                    h.enqueue(i);
                    model.push_back(i);
                } else {
                    assert_eq!(h.dequeue(), model.pop_front());
                }
            }
            while let Some(v) = model.pop_front() {
                assert_eq!(h.dequeue(), Some(v));
            }
            assert_eq!(h.dequeue(), None);
        }
    }

    #[test]
    fn locked_queue_is_fifo() {
        matches_vecdeque(LockedQueue::<TasB, u64>::new);
        matches_vecdeque(LockedQueue::<TasBNp, u64>::new);
    }

    #[test]
    fn two_lock_queue_is_fifo() {
        matches_vecdeque(TwoLockQueue::<TasB, u64>::new);
        matches_vecdeque(TwoLockQueue::<TasBNp, u64>::new);
    }

    #[test]
    fn values_are_dropped_once() {
        let token = Rc::new(());
        {
            let q: TwoLockQueue<TasB, Rc<()>> = TwoLockQueue::new();
            for _ in 0..5 {
                q.enqueue(token.clone());
            }
            drop(q.dequeue());
            assert_eq!(Rc::strong_count(&token), 5);
        }
        assert_eq!(Rc::strong_count(&token), 1, "drop frees the rest");
        {
            let q: LockedQueue<TasB, Rc<()>> = LockedQueue::new();
            q.enqueue(token.clone());
            q.enqueue(token.clone());
        }
        assert_eq!(Rc::strong_count(&token), 1);
    }

    #[test]
    fn two_lock_queue_concurrent_conservation() {
        let (threads, per) = if cfg!(miri) { (2, 10) } else { (4, 2_000) };
        let q: TwoLockQueue<TasB, u64> = TwoLockQueue::new();
        let got: Vec<Vec<u64>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    let q = &q;
                    s.spawn(move || {
                        let mut got = Vec::new();
                        for i in 0..per {
                            q.enqueue(t * per + i);
                            got.extend(q.dequeue());
                        }
                        got
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut all: Vec<u64> = got.into_iter().flatten().collect();
        all.extend(std::iter::from_fn(|| q.dequeue()));
        all.sort_unstable();
        assert_eq!(all, (0..threads * per).collect::<Vec<_>>());
    }

    #[test]
    fn debug_says_what_it_is() {
        let q: LockedQueue<TasB, u8> = LockedQueue::new();
        q.enqueue(1);
        assert_eq!(format!("{q:?}"), "LockedQueue { len: 1 }");
        let q: TwoLockQueue<TasB, u8> = TwoLockQueue::default();
        assert_eq!(format!("{q:?}"), "TwoLockQueue { empty: true }");
    }
}
