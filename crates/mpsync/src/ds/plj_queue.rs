//! The Prakash, Lee & Johnson non-blocking queue (snapshot and help).
//!
//! Prakash, Lee & Johnson, *A nonblocking algorithm for shared queues using
//! compare-and-swap*, IEEE Trans. Computers 43(5), 1994, as paper 000
//! (papers/000_…, §4.1) describes it: "a singly-linked list with *Head* and *Tail*
//! pointers. It uses CAS to enqueue and dequeue nodes at the tail and the head of
//! the list, respectively. A process performing an enqueue or a dequeue operation
//! first takes a snapshot of the data structure and determines if there is another
//! operation in progress. If so it tries to complete the ongoing operation and then
//! takes another snapshot of the data structure. Otherwise it tries to complete its
//! own operation. The process keeps trying until it completes its operation."
//!
//! That outline is all the papers here give; this file implements it faithfully,
//! over the same dummy-headed list as [`MsQueue`](super::ms_queue::MsQueue), and is
//! not a transcription of the 1994 article's code (which has no dummy node and
//! uses counted pointers against ABA; here the reclaimer rules ABA out):
//!
//! 1. **Snapshot.** Every operation, enqueue *and* dequeue, reads ⟨`head`, `tail`,
//!    `tail.next`⟩ and re-reads `head` and `tail`; the snapshot is consistent when
//!    both are unchanged (a protected node cannot be freed and reused, and both
//!    pointers only move forward, so "unchanged" means "unchanged throughout").
//! 2. **Operation in progress?** The only intermediate state is an enqueue that
//!    linked its node but has not swung `tail` yet (`tail.next` non-null). Any
//!    operation that sees it completes it (CAS `tail` forward) and takes a new
//!    snapshot.
//! 3. **Own operation.** With a quiescent snapshot: enqueue CASes `tail.next` from
//!    null to its node (then swings `tail`, or is helped); dequeue reports empty if
//!    `head == tail`, else CASes `head` to its successor and takes the value.
//!
//! The difference from Michael & Scott's queue is the one paper 000 measures: every
//! operation pays for a consistent two-ended snapshot and for helping before acting,
//! where MS's enqueue never reads `head`. Hazard pointers need 2 slots (`head` and
//! `tail`, then `head`'s successor in place of `tail`). Bounded exponential backoff
//! after a failed CAS (paper 000 §4). Progress: lock-free, every operation (`tests/progress.rs` stops a thread at each of its
//! stall points and the others complete), given a lock-free allocator: with
//! [`MagazineAlloc`](super::alloc::MagazineAlloc) a magazine refill or spill takes
//! the depot's spinlock, as in Hart's allocator, and a thread stopped holding it
//! stops the others' refills.
//! Uses `sched`: only named stall points.
//!
//! ```
//! use mpsync::ds::plj_queue::PljQueue;
//! use mpsync::ds::{ConcurrentQueue, QueueHandle};
//! use mpsync::reclaim::{Qsbr, Reclaimer, Local};
//!
//! let q: PljQueue<u32, Qsbr> = PljQueue::new();
//! let mut h = q.handle();
//! h.enqueue(1);
//! h.enqueue(2);
//! assert_eq!(h.dequeue(), Some(1));
//! drop(h);
//! let mut local = Qsbr::register(q.domain());
//! assert_eq!(q.dequeue(&local), Some(2));
//! local.quiescent();
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
use crate::reclaim::{Ebr, Guard, Header, Local, Protected, Reclaimer};
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

/// A consistent view of the queue: `head` and `tail` did not change while
/// `tail_next` was read. `head` is protected by slot 0, `tail` by slot 1 (until
/// the guard `'g` protects into that slot again).
struct Snapshot<'g, T, R: Reclaimer> {
    head: Protected<'g, Node<T, R>>,
    tail: Protected<'g, Node<T, R>>,
    tail_next: *mut Node<T, R>,
}

/// The Prakash–Lee–Johnson non-blocking FIFO queue over reclaimer `R` and node
/// allocator `A` (see the [module documentation](self)).
pub struct PljQueue<T, R: Reclaimer = Ebr, A: NodeAlloc = SystemAlloc> {
    /// The dummy node. Never null.
    head: CachePadded<AtomicPtr<Node<T, R>>>,
    /// The last node, or the second-to-last while an enqueue is in progress.
    tail: CachePadded<AtomicPtr<Node<T, R>>>,
    domain: Arc<R>,
    /// Owns `T`s (drop check); `A` only names the allocator.
    _owns: PhantomData<(T, A)>,
}

// SAFETY: the queue owns its values and hands each to exactly one thread; nodes
// are reached only through atomics, so `T: Send` suffices.
unsafe impl<T: Send, R: Reclaimer, A: NodeAlloc> Send for PljQueue<T, R, A> {}
// SAFETY: as above; `&PljQueue` gives no `&T` to anybody.
unsafe impl<T: Send, R: Reclaimer, A: NodeAlloc> Sync for PljQueue<T, R, A> {}

impl<T, R: Reclaimer + Default, A: NodeAlloc> PljQueue<T, R, A> {
    /// An empty queue with a domain of its own (`R::default()`).
    pub fn new() -> Self {
        Self::with_domain(Arc::new(R::default()))
    }
}

impl<T, R: Reclaimer + Default, A: NodeAlloc> Default for PljQueue<T, R, A> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, R: Reclaimer, A: NodeAlloc> PljQueue<T, R, A> {
    /// An empty queue whose retired nodes go to `domain` (hazard pointers: at
    /// least 2 slots per thread).
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

    /// The reclamation domain.
    pub fn domain(&self) -> &Arc<R> {
        &self.domain
    }

    /// Step 1: a consistent snapshot (see the module doc).
    fn snapshot<'g, G: Guard>(&self, g: &'g G) -> Snapshot<'g, T, R> {
        loop {
            let head = g.protect(0, &self.head);
            let tail = g.protect(1, &self.tail);
            // SAFETY: `tail` is protected by slot 1 and `protect` validated it as
            // the tail after publishing the hazard; a node is retired only after
            // `head` passed it, and `head` never passes `tail`, so it was not
            // retired before and is not freed while protected.
            let t = unsafe { tail.deref() };
            t.live.check();
            // Acquire: pairs with the Release CAS that linked the successor, so
            // helping (a Release swing of `tail`) passes its contents on.
            let tail_next = t.next.load(Ordering::Acquire);
            // Acquire: as `protect`'s loads. Both unchanged: the triple held at the
            // load of `tail_next` (pointers only move forward and protected nodes
            // are not reused, so there was no change-and-back).
            if self.head.load(Ordering::Acquire) == head.as_ptr()
                && self.tail.load(Ordering::Acquire) == tail.as_ptr()
            {
                return Snapshot {
                    head,
                    tail,
                    tail_next,
                };
            }
        }
    }

    /// Step 2: completes the enqueue in progress that `s` shows, if any.
    /// Returns whether there was one.
    fn help(&self, s: &Snapshot<'_, T, R>) -> bool {
        if s.tail_next.is_null() {
            return false;
        }
        // Release: publishes the linked node (acquired in `snapshot`) to whoever
        // loads `tail` next. Failure Relaxed: somebody else completed it.
        let _ = self.tail.compare_exchange(
            s.tail.as_ptr(),
            s.tail_next,
            Ordering::Release,
            Ordering::Relaxed,
        );
        true
    }

    /// Appends `value` at the tail. `local` is the calling thread's registration
    /// in [`domain`](Self::domain).
    ///
    /// # Panics
    /// If `local` is registered with another domain than [`domain`](Self::domain).
    pub fn enqueue(&self, local: &R::Local, value: T) {
        check_local(&*self.domain, local, "PljQueue::enqueue");
        let node = Node::alloc::<A>(Header::of_local(local), ValueCell::new(value));
        let g = local.enter();
        let mut backoff = CasBackoff::new();
        loop {
            let s = self.snapshot(&g);
            if self.help(&s) {
                continue;
            }
            // Step 3. SAFETY: `s.tail` is protected (see `snapshot`).
            let t = unsafe { s.tail.deref() };
            t.live.check();
            // Release: publishes the node's fields to the Acquire loads of this
            // `next`. Failure Relaxed: only a new snapshot follows.
            if t.next
                .compare_exchange(ptr::null_mut(), node, Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                stall::point(stall::PLJ_ENQUEUE_LINKED);
                // Our own completion; others may have done it already.
                // Release/Relaxed: as in `help`.
                let _ = self.tail.compare_exchange(
                    s.tail.as_ptr(),
                    node,
                    Ordering::Release,
                    Ordering::Relaxed,
                );
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
        check_local(&*self.domain, local, "PljQueue::dequeue");
        let g = local.enter();
        let mut backoff = CasBackoff::new();
        loop {
            let s = self.snapshot(&g);
            if self.help(&s) {
                continue;
            }
            if s.head == s.tail {
                // Consistent snapshot: `head == tail` and `tail.next` null at the
                // load of `tail_next` — the queue was empty then.
                return None;
            }
            // Step 3: `head` is strictly before `tail`, so it has a successor.
            // SAFETY: `s.head` is protected by slot 0 and validated (as `tail` in
            // `snapshot`).
            let h = unsafe { s.head.deref() };
            h.live.check();
            // Slot 1 now protects the successor instead of `tail` (no longer used).
            let np = g.protect(1, &h.next);
            let next = np.as_ptr();
            // Acquire: as `protect`'s loads. `head` still the same after `next`
            // was protected: `next` was not retired then (that needs `head` to pass
            // it), so it stays valid while protected.
            if self.head.load(Ordering::Acquire) != s.head.as_ptr() {
                continue;
            }
            debug_assert!(!next.is_null(), "head before tail has a successor");
            // AcqRel: Release passes on what we saw of `tail` (head never passes
            // it); Acquire pairs with the previous head move. Failure Relaxed: only
            // a new snapshot follows.
            if self
                .head
                .compare_exchange(s.head.as_ptr(), next, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                stall::point(stall::PLJ_DEQUEUE_SWUNG);
                // SAFETY: `next` is protected by slot 1 (see the comment on the take).
                let n = unsafe { np.deref() };
                n.live.check();
                // SAFETY: `next` is protected (slot 1), was not the dummy before our
                // CAS, so it holds a value, which our CAS gave to us alone; its write
                // happened before the Release link we acquired in `protect`.
                let v = unsafe { n.value.take() };
                // SAFETY: the old dummy is unlinked (`head` moved past it; `tail`
                // was already past it), retired once by the CAS winner, and
                // `A::free` does not touch its (empty) value.
                unsafe { g.retire_raw(s.head.as_ptr().cast(), A::free::<Node<T, R>>) };
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
        check_local(&*self.domain, local, "PljQueue::is_empty");
        let g = local.enter();
        loop {
            let s = self.snapshot(&g);
            if !self.help(&s) {
                return s.head == s.tail;
            }
        }
    }

    /// The calling thread's handle: it registers with the domain and announces a
    /// quiescent state every 100 operations.
    pub fn handle(&self) -> PljQueueHandle<'_, T, R, A> {
        Handle::new(self)
    }
}

impl<T, R: Reclaimer, A: NodeAlloc> Drop for PljQueue<T, R, A> {
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

impl<T, R: Reclaimer, A: NodeAlloc> fmt::Debug for PljQueue<T, R, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PljQueue")
            .field("reclaimer", &R::NAME)
            .field("alloc", &A::NAME)
            .finish_non_exhaustive()
    }
}

/// One thread's access to a [`PljQueue`]: the generic [`Handle`] (its
/// registration with the queue's domain, and a quiescent state every 100
/// operations); [`Handle::local`] gives the registration (e.g. for [`PljQueue::is_empty`]).
pub type PljQueueHandle<'a, T, R = Ebr, A = SystemAlloc> = Handle<'a, PljQueue<T, R, A>>;

impl<T, R: Reclaimer, A: NodeAlloc> Registered for PljQueue<T, R, A> {
    type R = R;
    fn domain(&self) -> &Arc<R> {
        &self.domain
    }
}

impl<T, R: Reclaimer, A: NodeAlloc> QueueHandle<T> for Handle<'_, PljQueue<T, R, A>> {
    fn enqueue(&mut self, value: T) {
        self.op(|s, l| s.enqueue(l, value));
    }

    fn dequeue(&mut self) -> Option<T> {
        self.op(|s, l| s.dequeue(l))
    }

    fn quiescent(&mut self) {
        self.quiescent_now();
    }
}

impl<T: Send, R: Reclaimer, A: NodeAlloc> ConcurrentQueue<T> for PljQueue<T, R, A> {
    type Handle<'a>
        = PljQueueHandle<'a, T, R, A>
    where
        Self: 'a;

    fn handle(&self) -> Self::Handle<'_> {
        PljQueue::handle(self)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::ds::alloc::MagazineAlloc;
    use crate::reclaim::{HazardPointers, Leak, Qsbr};
    use std::sync::atomic::AtomicUsize;

    struct Counted<'a>(u32, &'a AtomicUsize);
    impl Drop for Counted<'_> {
        fn drop(&mut self) {
            self.1.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn fifo<R: Reclaimer, A: NodeAlloc>(q: PljQueue<u32, R, A>) {
        let mut h = q.handle();
        assert_eq!(h.dequeue(), None);
        assert!(q.is_empty(h.local()));
        for i in 0..5 {
            h.enqueue(i);
        }
        assert!(!q.is_empty(h.local()));
        assert_eq!(
            (0..5).map(|_| h.dequeue().unwrap()).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
        assert_eq!(h.dequeue(), None);
        h.enqueue(9);
        h.quiescent();
        assert_eq!(h.dequeue(), Some(9));
        drop(h);
        assert_eq!(q.domain().stats().retired, 6, "one old dummy per dequeue");
    }

    #[test]
    fn fifo_with_every_scheme() {
        fifo(PljQueue::<u32, Ebr>::new());
        fifo(PljQueue::<u32, Qsbr>::new());
        fifo(PljQueue::<u32, Leak>::new());
        fifo(PljQueue::<u32, HazardPointers>::with_domain(Arc::new(
            HazardPointers::new(2).unwrap(),
        )));
    }

    #[test]
    fn fifo_with_magazines() {
        fifo(PljQueue::<u32, Leak, MagazineAlloc>::new());
    }

    #[test]
    fn values_are_dropped_exactly_once() {
        let drops = AtomicUsize::new(0);
        {
            let q: PljQueue<Counted<'_>, Ebr> = PljQueue::new();
            let mut h = q.handle();
            for i in 0..4 {
                h.enqueue(Counted(i, &drops));
            }
            let v = h.dequeue().unwrap();
            assert_eq!(v.0, 0);
            drop(v);
            drop(h);
            assert_eq!(drops.load(Ordering::Relaxed), 1);
        }
        assert_eq!(drops.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn debug_names_the_scheme() {
        let q: PljQueue<u8, HazardPointers> = PljQueue::new();
        assert_eq!(
            format!("{q:?}"),
            "PljQueue { reclaimer: \"HP\", alloc: \"system\", .. }"
        );
        assert!(format!("{:?}", q.handle()).starts_with("Handle { structure: PljQueue"));
    }
}
