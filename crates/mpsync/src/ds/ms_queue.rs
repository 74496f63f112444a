//! The Michael & Scott non-blocking queue.
//!
//! Michael & Scott, PODC 1996 (papers/000_… §3 describes it; Hart, papers/002_…
//! §3.3.2, Figures 3.9 and 3.11, and Figure 4.4 for hazard pointers). A singly
//! linked list with a **dummy** node: `head` always points to the dummy (the node
//! last dequeued, or the initial one), `tail` to the last or second-to-last node.
//! Enqueue links a node after the last one with a CAS on its `next`, then swings
//! `tail` with a second CAS that anybody may do for it ("helping"); dequeue moves
//! `head` to the dummy's successor, which becomes the new dummy, takes the value
//! out of it and retires the old dummy.
//!
//! Generic over the reclamation scheme `R` (hazard pointers need 2 slots: the head
//! and its successor, or the tail) and the node allocator `A`. After a failed CAS
//! it backs off (bounded exponential, paper 000 §4). Progress: lock-free, every operation (`tests/progress.rs` stops a thread at each of its
//! stall points and the others complete), given a lock-free allocator: with
//! [`MagazineAlloc`](super::alloc::MagazineAlloc) a magazine refill or spill takes
//! the depot's spinlock, as in Hart's allocator, and a thread stopped holding it
//! stops the others' refills.
//! Uses `sched`: only named stall points — a preempted thread never blocks
//! another one.
//!
//! ```
//! use mpsync::ds::ms_queue::MsQueue;
//! use mpsync::ds::{ConcurrentQueue, QueueHandle};
//! use mpsync::reclaim::{HazardPointers, Local, Reclaimer};
//! use mpsync::sync::Arc;
//!
//! // Through per-thread handles (EBR, the default scheme):
//! let q: MsQueue<String> = MsQueue::new();
//! std::thread::scope(|s| {
//!     s.spawn(|| q.handle().enqueue("a".to_string()));
//! });
//! let mut h = q.handle();
//! assert_eq!(h.dequeue().as_deref(), Some("a"));
//! assert_eq!(h.dequeue(), None);
//!
//! // Or with an explicit registration, here with hazard pointers:
//! let q: MsQueue<u64, HazardPointers> =
//!     MsQueue::with_domain(Arc::new(HazardPointers::new(2).unwrap()));
//! let mut local = HazardPointers::register(q.domain());
//! q.enqueue(&local, 1);
//! q.enqueue(&local, 2);
//! assert_eq!(q.dequeue(&local), Some(1));
//! local.quiescent(); // between operations (needed by QSBR only)
//! assert_eq!(q.dequeue(&local), Some(2));
//! assert!(q.is_empty(&local));
//! ```

use std::fmt;
use std::marker::PhantomData;
use std::ptr;

use crossbeam_utils::CachePadded;

use super::alloc::{NodeAlloc, SystemAlloc};
use super::handle::{Handle, Registered};
use super::lf::{CasBackoff, Liveness, ValueCell, check_local, drop_list};
use super::{ConcurrentQueue, QueueHandle};
use crate::reclaim::{Ebr, Guard, Header, Local, ProtectsReachable, Reclaimer};
use crate::sched::stall;
use crate::sync::{Arc, AtomicPtr, Ordering};

/// A list node. `#[repr(C)]` with the [`Liveness`] first (the loom test allocator
/// relies on it).
#[repr(C)]
struct Node<T, R: Reclaimer> {
    live: Liveness,
    /// The scheme's per-node header (zero-sized today).
    hdr: Header<R>,
    next: AtomicPtr<Node<T, R>>,
    value: ValueCell<T>,
}

impl<T, R: Reclaimer> Node<T, R> {
    fn alloc<A: NodeAlloc>(hdr: Header<R>, value: ValueCell<T>) -> *mut Self {
        A::alloc(Node {
            live: Liveness::new(),
            hdr,
            next: AtomicPtr::new(ptr::null_mut()),
            value,
        })
        .as_ptr()
    }
}

/// The Michael & Scott non-blocking FIFO queue over reclaimer `R` and node
/// allocator `A` (see the [module documentation](self)).
pub struct MsQueue<T, R: Reclaimer = Ebr, A: NodeAlloc = SystemAlloc> {
    /// The dummy node. Never null.
    head: CachePadded<AtomicPtr<Node<T, R>>>,
    /// The last or second-to-last node. Never null, never behind `head`.
    tail: CachePadded<AtomicPtr<Node<T, R>>>,
    domain: Arc<R>,
    /// Owns `T`s (drop check); `A` only names the allocator.
    _owns: PhantomData<(T, A)>,
}

// SAFETY: the queue owns its values and hands each to exactly one thread; nodes
// are reached only through atomics and freed through the reclaimer, so sharing or
// sending the queue only ever moves `T`s between threads: `T: Send` suffices.
unsafe impl<T: Send, R: Reclaimer, A: NodeAlloc> Send for MsQueue<T, R, A> {}
// SAFETY: as above; `&MsQueue` gives no `&T` to anybody.
unsafe impl<T: Send, R: Reclaimer, A: NodeAlloc> Sync for MsQueue<T, R, A> {}

impl<T, R: Reclaimer + Default, A: NodeAlloc> MsQueue<T, R, A> {
    /// An empty queue with a domain of its own (`R::default()`; for hazard
    /// pointers that is 3 slots per thread, enough for the queue's 2).
    pub fn new() -> Self {
        Self::with_domain(Arc::new(R::default()))
    }
}

impl<T, R: Reclaimer + Default, A: NodeAlloc> Default for MsQueue<T, R, A> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, R: Reclaimer, A: NodeAlloc> MsQueue<T, R, A> {
    /// An empty queue whose retired nodes go to `domain` (which other structures
    /// may share). With hazard pointers the domain needs at least 2 slots per
    /// thread.
    ///
    /// `T` may borrow (it need not be `'static`, even with a shared domain that
    /// outlives the queue): the domain never drops a value — a removed value is
    /// moved out of its node before the node is retired, and the values still
    /// inside are dropped by the queue's own `Drop`.
    pub fn with_domain(domain: Arc<R>) -> Self {
        let dummy = Node::<T, R>::alloc::<A>(Header::default(), ValueCell::empty());
        Self {
            head: CachePadded::new(AtomicPtr::new(dummy)),
            tail: CachePadded::new(AtomicPtr::new(dummy)),
            domain,
            _owns: PhantomData,
        }
    }

    /// The reclamation domain (register threads with `R::register(q.domain())`).
    pub fn domain(&self) -> &Arc<R> {
        &self.domain
    }

    /// Appends `value` at the tail. `local` is the calling thread's registration
    /// in [`domain`](Self::domain).
    ///
    /// # Panics
    /// If `local` is registered with another domain than [`domain`](Self::domain).
    pub fn enqueue(&self, local: &R::Local, value: T) {
        check_local(&*self.domain, local, "MsQueue::enqueue");
        let node = Node::alloc::<A>(Header::of_local(local), ValueCell::new(value));
        let g = local.enter();
        let mut backoff = CasBackoff::new();
        loop {
            let t = g.protect(0, &self.tail);
            // SAFETY: [1] `t` was loaded from `tail` (never null) and is protected:
            // it is not freed while the guard holds it (it cannot have been retired
            // before: a node is retired only after `head`, and so `tail`, passed it,
            // and `protect` validated that `tail` still pointed to it).
            let tr = unsafe { t.deref() };
            let t = t.as_ptr();
            tr.live.check();
            // Acquire: pairs with the Release CAS that linked `next`, so a later
            // Release swing of `tail` to it carries the node's initialization.
            let next = tr.next.load(Ordering::Acquire);
            if !next.is_null() {
                // `tail` lags: help the enqueue in progress finish, then retry.
                // Release: publishes `next`'s contents to whoever loads `tail`
                // (transitively, through our Acquire above). Failure Relaxed:
                // someone else swung it; we only retry.
                let _ = self
                    .tail
                    .compare_exchange(t, next, Ordering::Release, Ordering::Relaxed);
                continue;
            }
            // Release: publishes the node's fields to every Acquire load of this
            // `next` (dequeuers' `protect`, enqueuers above). Failure Relaxed:
            // only a retry follows.
            if tr
                .next
                .compare_exchange(ptr::null_mut(), node, Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                stall::point(stall::MS_ENQUEUE_LINKED);
                // Swing `tail`; failure means somebody helped already.
                // Release/Relaxed: as for the helping CAS above.
                let _ = self
                    .tail
                    .compare_exchange(t, node, Ordering::Release, Ordering::Relaxed);
                return;
            }
            backoff.spin();
        }
    }

    /// Removes the value at the head, or returns `None` if the queue is empty.
    /// `local` is the calling thread's registration in [`domain`](Self::domain).
    ///
    /// # Panics
    /// If `local` is registered with another domain than [`domain`](Self::domain).
    pub fn dequeue(&self, local: &R::Local) -> Option<T> {
        check_local(&*self.domain, local, "MsQueue::dequeue");
        let g = local.enter();
        let mut backoff = CasBackoff::new();
        loop {
            let hp = g.protect(0, &self.head);
            let h = hp.as_ptr();
            // Acquire: [2] the `tail` we read is at least as new as every swing of
            // `tail` that happened before `h` became the head (the dequeuer that
            // installed `h` saw `tail` past its predecessor, and our `protect`
            // load of `head` synchronized with its Release CAS). So `t != h`
            // means `tail` is past `h`.
            let t = self.tail.load(Ordering::Acquire);
            // SAFETY: `h` is protected by slot 0 and was validated as the head
            // (see [1] in `enqueue`, with `head` for `tail`).
            let hr = unsafe { hp.deref() };
            hr.live.check();
            let np = g.protect(1, &hr.next);
            let next = np.as_ptr();
            // Acquire: as `protect`'s own load. `head` still `h` after `next` was
            // protected means `next` was not yet retired then (it is retired only
            // after `head` moves past `h` and then past `next`), so it stays valid.
            if self.head.load(Ordering::Acquire) != h {
                continue;
            }
            if next.is_null() {
                // Linearized at the load of `h.next` in `protect`: `h` was the head.
                return None;
            }
            if h == t {
                // `tail` lags behind a linked node: help before moving `head`
                // (so `head` never passes `tail`). Release/Relaxed as in `enqueue`.
                let _ = self
                    .tail
                    .compare_exchange(t, next, Ordering::Release, Ordering::Relaxed);
                continue;
            }
            // AcqRel: Release publishes our read of `tail` ([2]) to the next
            // dequeuer; Acquire is not needed for the value (the `protect` load of
            // `next` synchronized with its link) but keeps the CAS an acquire of
            // the previous dequeuer's release. Failure Relaxed: only a retry follows.
            if self
                .head
                .compare_exchange(h, next, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                stall::point(stall::MS_DEQUEUE_SWUNG);
                // SAFETY: `next` is protected by slot 1 (see the comment on the take).
                let n = unsafe { np.deref() };
                n.live.check();
                // SAFETY: `next` is protected by slot 1 ([3]), holds a value (only
                // the dummy is empty and `next` was not yet the dummy), and our CAS
                // made it the dummy, so no other thread takes the value; its write
                // happened before the Release link we acquired in `protect`.
                let v = unsafe { n.value.take() };
                // SAFETY: `h` is unlinked (head moved past it; tail was already past
                // it), retired once (only the CAS winner retires), and
                // `A::free::<Node<T, R>>` frees what `A::alloc` made without touching
                // the (empty) value, from any thread.
                unsafe { g.retire_raw(h.cast(), A::free::<Node<T, R>>) };
                return Some(v);
            }
            backoff.spin();
        }
    }

    /// Whether the queue is empty at some moment during the call.
    ///
    /// # Panics
    /// If `local` is registered with another domain than [`domain`](Self::domain).
    pub fn is_empty(&self, local: &R::Local) -> bool {
        check_local(&*self.domain, local, "MsQueue::is_empty");
        let g = local.enter();
        // SAFETY: protected and validated, as in `dequeue`.
        let hr = unsafe { g.protect(0, &self.head).deref() };
        hr.live.check();
        // Acquire: the node it leads to, if any, was published by a Release link.
        hr.next.load(Ordering::Acquire).is_null()
    }

    /// The number of values queued: a walk from the head to the end, O(n);
    /// exact when no thread changes the queue meanwhile, otherwise a count the
    /// queue had at no particular moment (enqueues during the walk lengthen
    /// it). Only over schemes that protect everything reachable.
    ///
    /// ```
    /// let q: mpsync::Queue<u32> = mpsync::Queue::new();
    /// q.enqueue(1);
    /// q.enqueue(2);
    /// assert_eq!(q.len(), 2);
    /// ```
    ///
    /// # Panics
    /// If `local` is registered with another domain than [`domain`](Self::domain).
    pub fn len(&self, local: &R::Local) -> usize
    where
        R: ProtectsReachable,
    {
        check_local(&*self.domain, local, "MsQueue::len");
        let g = local.enter();
        let mut p = g.protect(0, &self.head).as_ptr();
        let mut n = 0;
        loop {
            // SAFETY: `p` is the dummy (protected, never null) or was reached
            // from it through `next` links under `g`; `R: ProtectsReachable`
            // frees no node reachable from a protected one before `g` ends.
            let node = unsafe { &*p };
            node.live.check();
            // Acquire: pairs with the Release CAS that linked the successor.
            let next = node.next.load(Ordering::Acquire);
            if next.is_null() {
                return n;
            }
            n += 1;
            p = next;
        }
    }

    /// The calling thread's handle: it registers with the domain and announces a
    /// quiescent state every 100 operations.
    pub fn handle(&self) -> MsQueueHandle<'_, T, R, A> {
        Handle::new(self)
    }
}

impl<T, R: Reclaimer, A: NodeAlloc> Drop for MsQueue<T, R, A> {
    /// Drops the values still queued; one whose `Drop` panics stops none of the
    /// others (every node is freed, then the first panic goes on).
    fn drop(&mut self) {
        let mut dummy = true;
        // SAFETY: every node reachable from `head` is live (retired nodes are
        // behind `head`), made by `A::alloc`, owned by the queue (`&mut self`) and
        // visited once; the nodes after the dummy hold a value not yet taken.
        // Relaxed loads: no other thread can reach the queue.
        unsafe {
            drop_list::<_, _, A>(
                self.head.load(Ordering::Relaxed),
                |n| (*n).next.load(Ordering::Relaxed),
                |n| (!std::mem::take(&mut dummy)).then(|| (*n).value.take()),
            )
        }
    }
}

impl<T, R: Reclaimer, A: NodeAlloc> fmt::Debug for MsQueue<T, R, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MsQueue")
            .field("reclaimer", &R::NAME)
            .field("alloc", &A::NAME)
            .finish_non_exhaustive()
    }
}

/// One thread's access to an [`MsQueue`]: the generic [`Handle`] (its
/// registration with the queue's domain, and a quiescent state every 100
/// operations); [`Handle::local`] gives the registration (e.g. for
/// [`MsQueue::is_empty`]).
pub type MsQueueHandle<'a, T, R = Ebr, A = SystemAlloc> = Handle<'a, MsQueue<T, R, A>>;

impl<T, R: Reclaimer, A: NodeAlloc> Registered for MsQueue<T, R, A> {
    type R = R;
    fn domain(&self) -> &Arc<R> {
        &self.domain
    }
}

impl<T, R: Reclaimer, A: NodeAlloc> QueueHandle<T> for Handle<'_, MsQueue<T, R, A>> {
    fn enqueue(&mut self, value: T) {
        self.op(|q, l| q.enqueue(l, value));
    }

    fn dequeue(&mut self) -> Option<T> {
        self.op(|q, l| q.dequeue(l))
    }

    fn quiescent(&mut self) {
        self.quiescent_now();
    }
}

impl<T: Send, R: Reclaimer, A: NodeAlloc> ConcurrentQueue<T> for MsQueue<T, R, A> {
    type Handle<'a>
        = MsQueueHandle<'a, T, R, A>
    where
        Self: 'a;

    fn handle(&self) -> Self::Handle<'_> {
        MsQueue::handle(self)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::ds::alloc::MagazineAlloc;
    use crate::reclaim::{HazardPointers, Leak, Qsbr};
    use std::sync::atomic::AtomicUsize;

    /// The per-node header is free for today's schemes: a node is exactly as
    /// large (and as aligned) as the same fields without it.
    #[test]
    fn the_node_header_adds_nothing() {
        #[repr(C)]
        struct Bare {
            live: Liveness,
            next: AtomicPtr<u8>,
            value: ValueCell<[u8; 3]>,
        }
        crate::reclaim::assert_header_free!(R => Node<[u8; 3], R>, Bare);
    }

    /// Counts its drops in a shared counter.
    struct Counted<'a>(u32, &'a AtomicUsize);
    impl Drop for Counted<'_> {
        fn drop(&mut self) {
            self.1.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn fifo<R: Reclaimer, A: NodeAlloc>(q: MsQueue<u32, R, A>) {
        let mut h = q.handle();
        assert_eq!(h.dequeue(), None);
        for i in 0..5 {
            h.enqueue(i);
        }
        assert!(!q.is_empty(h.local()));
        assert_eq!(
            (0..5).map(|_| h.dequeue().unwrap()).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
        assert_eq!(h.dequeue(), None);
        assert!(q.is_empty(h.local()));
        h.enqueue(9);
        h.quiescent();
        assert_eq!(h.dequeue(), Some(9));
        drop(h);
        let s = q.domain().stats();
        assert_eq!(s.retired, 6, "one old dummy per dequeue");
    }

    #[test]
    fn fifo_with_every_scheme() {
        fifo(MsQueue::<u32, Ebr>::new());
        fifo(MsQueue::<u32, Qsbr>::new());
        fifo(MsQueue::<u32, Leak>::new());
        fifo(MsQueue::<u32, HazardPointers>::with_domain(Arc::new(
            HazardPointers::new(2).unwrap(),
        )));
    }

    #[test]
    fn fifo_with_magazines() {
        fifo(MsQueue::<u32, Ebr, MagazineAlloc>::new());
    }

    #[test]
    fn values_are_dropped_exactly_once() {
        let drops = AtomicUsize::new(0);
        {
            let q: MsQueue<Counted<'_>, Qsbr> = MsQueue::new();
            let mut h = q.handle();
            for i in 0..6 {
                h.enqueue(Counted(i, &drops));
            }
            let first = h.dequeue().unwrap();
            assert_eq!(first.0, 0);
            drop(first);
            assert_eq!(drops.load(Ordering::Relaxed), 1);
            let second = h.dequeue().unwrap();
            assert_eq!(second.0, 1);
            drop(h);
            // The old dummies are retired, not dropped as values.
            assert_eq!(drops.load(Ordering::Relaxed), 1);
            drop(second);
        }
        // 2 dequeued and dropped by us, 4 left in the queue dropped by its Drop.
        assert_eq!(drops.load(Ordering::Relaxed), 6);
    }

    #[test]
    fn debug_names_the_scheme() {
        let q: MsQueue<u8, Leak> = MsQueue::new();
        assert_eq!(
            format!("{q:?}"),
            "MsQueue { reclaimer: \"Leak\", alloc: \"system\", .. }"
        );
        let h = q.handle();
        assert!(format!("{h:?}").starts_with("Handle { structure: MsQueue"));
    }

    #[test]
    fn shared_domain_between_queues() {
        let d = Arc::new(Ebr::new());
        let a: MsQueue<u8> = MsQueue::with_domain(d.clone());
        let b: MsQueue<u8> = MsQueue::with_domain(d.clone());
        let l = Ebr::register(&d);
        a.enqueue(&l, 1);
        b.enqueue(&l, 2);
        assert_eq!((a.dequeue(&l), b.dequeue(&l)), (Some(1), Some(2)));
        assert_eq!(d.stats().retired, 2);
    }
}
