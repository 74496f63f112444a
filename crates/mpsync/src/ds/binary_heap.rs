//! A binary heap under one lock: the sequentially faster heap behind a lock
//! that copes with preemption.
//!
//! Michael & Scott 1997 (papers/000_…) §4.3 run their priority queue under one
//! lock (a skew heap there: [`LockedSkewHeap`](super::heap::LockedSkewHeap));
//! this is the same design with `std`'s binary heap, an implicit array heap
//! (Williams 1964): no allocation per operation, `O(log n)` swaps within one
//! contiguous buffer, so the critical section is several times shorter than
//! the skew heap's pointer merge. With a `-np` lock (the default, TAS-B-np:
//! the holder asks `sched` not to be preempted, Kontothanassis, Wisniewski &
//! Scott 1997) a thread is rarely preempted while others wait for it.
//! Blocking; not FIFO among equal keys.
//!
//! Uses `lock` (through the type parameter) and `sync`.
//!
//! ```
//! use mpsync::ds::binary_heap::LockedBinaryHeap;
//!
//! let pq: LockedBinaryHeap<u32> = LockedBinaryHeap::new();
//! for v in [5, 1, 4] {
//!     pq.insert(v);
//! }
//! assert_eq!((pq.len(), pq.is_empty()), (3, false));
//! assert_eq!((pq.delete_min(), pq.delete_min(), pq.delete_min()), (Some(1), Some(4), Some(5)));
//! assert_eq!(pq.delete_min(), None);
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;

use super::{ConcurrentPriorityQueue, PriorityQueueHandle};
use crate::lock::TasBNp;
use crate::sync::{AtomicUsize, Ordering};

/// A min-priority queue: `std`'s `BinaryHeap` under one lock of type `L`.
///
/// **Re-entry.** `T`'s `Ord` runs under the lock; an `Ord` (or anything it
/// calls) that uses the same heap again panics (“re-entered”) instead of
/// deadlocking. An `Ord` that panics makes the operation panic; the lock is
/// released and the heap keeps every value (their order may be wrong, as
/// `BinaryHeap` documents for a panicking `Ord`). Values' `Drop` never runs
/// under the lock: a removed value is handed out, and the heap's own `Drop`
/// drops the rest.
pub struct LockedBinaryHeap<T, L: lock_api::RawMutex = TasBNp> {
    heap: lock_api::Mutex<L, BinaryHeap<Reverse<T>>>,
    /// The holder's thread marker (0: none) — only to turn re-entry into a
    /// panic.
    holder: AtomicUsize,
}

std::thread_local! {
    static MARK: u8 = const { 0 };
}

/// A non-zero word naming the calling thread (its thread-local's address).
fn me() -> usize {
    MARK.with(|m| m as *const u8 as usize)
}

impl<T: Ord, L: lock_api::RawMutex> LockedBinaryHeap<T, L> {
    /// An empty heap.
    pub fn new() -> Self {
        Self {
            heap: lock_api::Mutex::new(BinaryHeap::new()),
            holder: AtomicUsize::new(0),
        }
    }

    /// Runs `f` on the heap under the lock.
    fn with<R>(&self, f: impl FnOnce(&mut BinaryHeap<Reverse<T>>) -> R) -> R {
        let me = me();
        // Relaxed: only this thread ever stores its own marker, so reading it
        // back means this thread holds the lock (a stale other value is not
        // `me`).
        assert!(
            self.holder.load(Ordering::Relaxed) != me,
            "LockedBinaryHeap re-entered from the values' Ord while this thread holds its lock"
        );
        let mut g = self.heap.lock();
        /// Clears the marker however `f` ends (also by a panic in `Ord`).
        struct Clear<'a>(&'a AtomicUsize);
        impl Drop for Clear<'_> {
            fn drop(&mut self) {
                // Relaxed: see above; the unlock that follows orders it.
                self.0.store(0, Ordering::Relaxed);
            }
        }
        // Relaxed: see above.
        self.holder.store(me, Ordering::Relaxed);
        let _clear = Clear(&self.holder);
        f(&mut g)
    }

    /// Inserts `value`.
    pub fn insert(&self, value: T) {
        self.with(|h| h.push(Reverse(value)));
    }

    /// Removes a smallest value, or `None` if the heap is empty.
    pub fn delete_min(&self) -> Option<T> {
        self.with(|h| h.pop()).map(|Reverse(v)| v)
    }

    /// The number of values (a snapshot).
    pub fn len(&self) -> usize {
        self.heap.lock().len()
    }

    /// Whether the heap is empty (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: Ord, L: lock_api::RawMutex> Default for LockedBinaryHeap<T, L> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, L: lock_api::RawMutex> fmt::Debug for LockedBinaryHeap<T, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockedBinaryHeap")
            .field("len", &self.heap.lock().len())
            .finish()
    }
}

impl<T, L> ConcurrentPriorityQueue<T> for LockedBinaryHeap<T, L>
where
    L: lock_api::RawMutex + Send + Sync,
    T: Ord + Send,
{
    type Handle<'a>
        = &'a Self
    where
        Self: 'a;

    fn handle(&self) -> &Self {
        self
    }
}

impl<T: Ord, L: lock_api::RawMutex> PriorityQueueHandle<T> for &LockedBinaryHeap<T, L> {
    fn insert(&mut self, value: T) {
        LockedBinaryHeap::insert(self, value)
    }
    fn delete_min(&mut self) -> Option<T> {
        LockedBinaryHeap::delete_min(self)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::panic::{AssertUnwindSafe, catch_unwind};

    thread_local! {
        static TARGET: RefCell<Option<&'static LockedBinaryHeap<Key>>> = const { RefCell::new(None) };
        static ARMED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// A key whose `Ord` may panic or use the heap it is in.
    #[derive(PartialEq, Eq)]
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
    fn an_ord_that_panics_or_reenters_panics_and_leaves_the_heap_usable() {
        // `'static` for the thread-local the re-entering `Ord` reads; freed at
        // the end (Miri checks for leaks).
        let boxed = Box::into_raw(Box::new(LockedBinaryHeap::new()));
        // SAFETY: `boxed` is live until the `Box::from_raw` below, after the
        // last use of `h` and of the thread-local's copy of it.
        let h: &'static LockedBinaryHeap<Key> = unsafe { &*boxed };
        TARGET.with(|t| *t.borrow_mut() = Some(h));
        h.insert(Key(2, false, false));
        ARMED.with(|a| a.set(true));
        let r = catch_unwind(AssertUnwindSafe(|| h.insert(Key(1, true, false))));
        ARMED.with(|a| a.set(false));
        assert!(r.is_err(), "a panicking Ord panics the insert");
        let r = catch_unwind(AssertUnwindSafe(|| h.insert(Key(3, false, true))));
        let msg = r.expect_err("re-entry panics");
        let msg = msg.downcast_ref::<&str>().copied().unwrap_or_default();
        assert!(msg.contains("re-entered"), "{msg}");
        // Usable afterwards, the lock released, no value lost.
        let n = h.len();
        assert!(n >= 2, "{n}");
        TARGET.with(|t| *t.borrow_mut() = None);
        h.insert(Key(4, false, false));
        assert_eq!(h.len(), n + 1);
        // SAFETY: made by `Box::into_raw` above; `h` is not used again and the
        // thread-local no longer holds it.
        drop(unsafe { Box::from_raw(boxed) });
    }

    #[test]
    fn values_are_dropped_once() {
        let token = std::sync::Arc::new(());
        {
            let h: LockedBinaryHeap<(u32, std::sync::Arc<()>)> = LockedBinaryHeap::new();
            for i in 0..5 {
                h.insert((i, token.clone()));
            }
            assert_eq!(h.delete_min().map(|v| v.0), Some(0));
            assert_eq!(std::sync::Arc::strong_count(&token), 5);
        }
        assert_eq!(std::sync::Arc::strong_count(&token), 1);
        let h: LockedBinaryHeap<u8> = LockedBinaryHeap::default();
        h.insert(1);
        assert_eq!(format!("{h:?}"), "LockedBinaryHeap { len: 1 }");
    }
}
