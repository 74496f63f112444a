//! Treiber's non-blocking stack.
//!
//! Treiber, *Systems programming: coping with parallelism*, IBM RJ 5118, 1986;
//! paper 000 (papers/000_…) §3 and §4.2 measure it ("very simple and can be expected
//! to be quite efficient"). A singly linked list whose `head` is swung by CAS:
//! push links a fresh node above the top, pop swings `head` to the top's successor.
//!
//! **ABA.** Treiber's original needs a modification counter beside `head`: a pop
//! that read `top` and `top.next` could otherwise succeed after `top` was popped,
//! freed, reallocated and pushed again, installing a stale `next`. Here the node a
//! pop works on is protected through the reclaimer (hazard slot 0, or the epoch /
//! quiescent-state guarantee), so it cannot be freed, hence not reused, while the
//! pop may still CAS it: `head == top` at the CAS means `top` never left. Generic
//! over the reclaimer `R` (hazard pointers: 1 slot) and node allocator `A`; bounded
//! exponential backoff after a failed CAS (paper 000 §4). Progress: lock-free, every operation (`tests/progress.rs` stops a thread at each of its
//! stall points and the others complete), given a lock-free allocator: with
//! [`MagazineAlloc`](super::alloc::MagazineAlloc) a magazine refill or spill takes
//! the depot's spinlock, as in Hart's allocator, and a thread stopped holding it
//! stops the others' refills.
//! Uses `sched`: only named stall points.
//!
//! ```
//! use mpsync::ds::treiber::TreiberStack;
//! use mpsync::ds::{ConcurrentStack, StackHandle};
//! use mpsync::reclaim::{HazardPointers, Reclaimer};
//! use mpsync::sync::Arc;
//!
//! let s: TreiberStack<u32> = TreiberStack::new();
//! let mut h = s.handle();
//! h.push(1);
//! h.push(2);
//! assert_eq!(h.pop(), Some(2));
//!
//! let s: TreiberStack<u32, HazardPointers> =
//!     TreiberStack::with_domain(Arc::new(HazardPointers::new(1).unwrap()));
//! let local = HazardPointers::register(s.domain());
//! s.push(&local, 7);
//! assert_eq!(s.pop(&local), Some(7));
//! assert_eq!(s.pop(&local), None);
//! ```

use std::fmt;
use std::marker::PhantomData;
use std::ptr;

use crossbeam_utils::CachePadded;

use super::alloc::{NodeAlloc, SystemAlloc};
use super::handle::{Handle, Registered};
use super::lf::{CasBackoff, Liveness, ValueCell, check_local, drop_list};
use super::{ConcurrentStack, StackHandle};
use crate::reclaim::{Ebr, Guard, Header, Local, ProtectsReachable, Reclaimer};
use crate::sched::stall;
use crate::sync::{Arc, AtomicPtr, Ordering};

/// A stack node. `#[repr(C)]` with the [`Liveness`] first (the loom test allocator
/// relies on it).
#[repr(C)]
pub(crate) struct Node<T, R: Reclaimer> {
    live: Liveness,
    /// The scheme's per-node header (zero-sized today).
    hdr: Header<R>,
    /// Written before the node is published, read by poppers; atomic so that a
    /// popper's read of a node another popper is unlinking is not a data race.
    next: AtomicPtr<Node<T, R>>,
    value: ValueCell<T>,
}

/// Treiber's non-blocking LIFO stack over reclaimer `R` and node allocator `A`
/// (see the [module documentation](self)).
pub struct TreiberStack<T, R: Reclaimer = Ebr, A: NodeAlloc = SystemAlloc> {
    /// The top node, null when empty.
    head: CachePadded<AtomicPtr<Node<T, R>>>,
    domain: Arc<R>,
    /// Owns `T`s (drop check); `A` only names the allocator.
    _owns: PhantomData<(T, A)>,
}

// SAFETY: the stack owns its values and hands each to exactly one thread; nodes are
// reached only through atomics, so `T: Send` suffices for both.
unsafe impl<T: Send, R: Reclaimer, A: NodeAlloc> Send for TreiberStack<T, R, A> {}
// SAFETY: as above; `&TreiberStack` gives no `&T` to anybody.
unsafe impl<T: Send, R: Reclaimer, A: NodeAlloc> Sync for TreiberStack<T, R, A> {}

impl<T, R: Reclaimer + Default, A: NodeAlloc> TreiberStack<T, R, A> {
    /// An empty stack with a domain of its own (`R::default()`).
    pub fn new() -> Self {
        Self::with_domain(Arc::new(R::default()))
    }
}

impl<T, R: Reclaimer + Default, A: NodeAlloc> Default for TreiberStack<T, R, A> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, R: Reclaimer, A: NodeAlloc> TreiberStack<T, R, A> {
    /// An empty stack whose retired nodes go to `domain` (hazard pointers: at least
    /// 1 slot per thread).
    ///
    /// `T` may borrow (it need not be `'static`, even with a shared domain that
    /// outlives the stack): the domain never drops a value — a removed value is
    /// moved out of its node before the node is retired, and the values still
    /// inside are dropped by the stack's own `Drop`.
    pub fn with_domain(domain: Arc<R>) -> Self {
        Self {
            head: CachePadded::new(AtomicPtr::new(ptr::null_mut())),
            domain,
            _owns: PhantomData,
        }
    }

    /// The reclamation domain (register threads with `R::register(s.domain())`).
    pub fn domain(&self) -> &Arc<R> {
        &self.domain
    }

    /// Pushes `value`. `local` is the calling thread's registration in
    /// [`domain`](Self::domain) (push never dereferences a shared node, so it needs
    /// no protection; the parameter, checked like pop's, keeps the operations
    /// uniform).
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn push(&self, local: &R::Local, value: T) {
        check_local(&*self.domain, local, "TreiberStack::push");
        let mut backoff = CasBackoff::new();
        // SAFETY: the hook never gives the node away.
        unsafe {
            self.push_with(local, value, |_| {
                backoff.spin();
                false
            })
        }
    }

    /// Push's loop, with `contended` run after every failed CAS: it may hand the
    /// unpublished node to another thread (the elimination stack's offer) and
    /// return `true`, and push then returns; `false` retries. `local` is checked
    /// by the caller.
    ///
    /// # Safety
    /// `contended` returns `true` only when it has given the node (made by
    /// `A::alloc`, holding the value, never published) to an owner that takes
    /// its value and frees it ([`take_unpublished`](Self::take_unpublished));
    /// on `false` the node is untouched and still the caller's.
    pub(crate) unsafe fn push_with(
        &self,
        local: &R::Local,
        value: T,
        mut contended: impl FnMut(*mut Node<T, R>) -> bool,
    ) {
        let node = Self::new_node(local, value);
        // Relaxed: only a guess at the top, checked by the CAS.
        let mut top = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: `node` is ours until the CAS below publishes it.
            // Relaxed: published by the Release CAS that follows.
            unsafe { &*node }.next.store(top, Ordering::Relaxed);
            stall::point(stall::TREIBER_PUSH_READ);
            // Release: publishes the node's fields to poppers' Acquire `protect`.
            // Failure Relaxed: the new top is only a guess again.
            match self
                .head
                .compare_exchange(top, node, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => {
                    top = now;
                    if contended(node) {
                        return;
                    }
                }
            }
        }
    }

    /// Pops the top value, or returns `None` if the stack is empty. `local` is the
    /// calling thread's registration in [`domain`](Self::domain).
    ///
    /// # Panics
    /// If `local` is registered with another domain than [`domain`](Self::domain).
    pub fn pop(&self, local: &R::Local) -> Option<T> {
        check_local(&*self.domain, local, "TreiberStack::pop");
        let mut backoff = CasBackoff::new();
        self.pop_with(local, || {
            backoff.spin();
            None
        })
    }

    /// Pop's loop, with `contended` run after every failed CAS (the guard
    /// still held): a value it returns (the elimination stack's, taken from a
    /// pusher) is popped; `None` retries. `local` is checked by the caller.
    pub(crate) fn pop_with(
        &self,
        local: &R::Local,
        mut contended: impl FnMut() -> Option<T>,
    ) -> Option<T> {
        let g = local.enter();
        loop {
            let top = g.protect(0, &self.head);
            stall::point(stall::TREIBER_POP_READ);
            // SAFETY: [1] `top` is protected (slot 0), validated as the head after
            // the protection was published, so it is not freed while we hold it.
            let t = unsafe { top.as_ref() }?;
            let top = top.as_ptr();
            t.live.check();
            // Relaxed: `next` was written before `top` was published, and our
            // Acquire load of `head` in `protect` synchronized with that.
            let next = t.next.load(Ordering::Relaxed);
            // AcqRel: Acquire keeps our later read of the value after the CAS
            // (already ordered by `protect`, but the CAS is what we act on);
            // Release continues the chain for the next popper, which reads `next`'s
            // fields. Failure Relaxed: only a retry follows.
            if self
                .head
                .compare_exchange(top, next, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                t.live.check();
                // SAFETY: our CAS unlinked `top`, so we alone take its value
                // (written before it was published, see above); still protected.
                let v = unsafe { t.value.take() };
                // SAFETY: `top` is unlinked (no new operation can reach it), retired
                // once (by the CAS winner); `A::free` does not touch the taken value.
                unsafe { g.retire_raw(top.cast(), A::free::<Node<T, R>>) };
                return Some(v);
            }
            if let Some(v) = contended() {
                return Some(v);
            }
        }
    }

    /// A node holding `value`, made by `A::alloc`, not yet published.
    pub(crate) fn new_node(local: &R::Local, value: T) -> *mut Node<T, R> {
        A::alloc(Node {
            live: Liveness::new(),
            hdr: Header::of_local(local),
            next: AtomicPtr::new(ptr::null_mut()),
            value: ValueCell::new(value),
        })
        .as_ptr()
    }

    /// The value of a node made by [`push_with`](Self::push_with) that was
    /// never published; the node is freed.
    ///
    /// # Safety
    /// The caller owns `node` (handed over by `push_with`'s hook, with an
    /// Acquire that pairs with the hand-over's Release), and nobody else
    /// reaches it.
    pub(crate) unsafe fn take_unpublished(node: *mut Node<T, R>) -> T {
        // SAFETY: the contract: ours alone, the value written before the
        // hand-over and not taken.
        let v = unsafe { (*node).value.take() };
        // SAFETY: made by `A::alloc`, never published, freed once (here);
        // `A::free` does not touch the taken value.
        unsafe { A::free::<Node<T, R>>(node.cast()) };
        v
    }

    /// A guess at the top node (Relaxed: used only to spread threads over the
    /// elimination slots).
    pub(crate) fn top_hint(&self) -> usize {
        self.head.load(Ordering::Relaxed) as usize
    }

    /// Whether the stack is empty at the moment of the call.
    pub fn is_empty(&self) -> bool {
        // Acquire: not needed for the answer, but a non-null result may be followed
        // by a pop that expects the node published.
        self.head.load(Ordering::Acquire).is_null()
    }

    /// The number of values on the stack: a walk from the top, O(n); exact
    /// when no thread changes the stack meanwhile. Only over schemes that
    /// protect everything reachable.
    ///
    /// ```
    /// let s: mpsync::Stack<u32> = mpsync::Stack::new();
    /// s.push(1);
    /// assert_eq!(s.len(), 1);
    /// ```
    ///
    /// # Panics
    /// If `local` is registered with another domain than [`domain`](Self::domain).
    pub fn len(&self, local: &R::Local) -> usize
    where
        R: ProtectsReachable,
    {
        check_local(&*self.domain, local, "TreiberStack::len");
        let g = local.enter();
        let mut p = g.protect(0, &self.head).as_ptr();
        let mut n = 0;
        while !p.is_null() {
            // SAFETY: `p` was the top (protected) or was reached from it
            // through `next` links under `g`; `R: ProtectsReachable` frees no
            // node reachable from a protected one before `g` ends.
            let node = unsafe { &*p };
            node.live.check();
            n += 1;
            // Acquire: pairs with the Release CAS that pushed the node.
            p = node.next.load(Ordering::Acquire);
        }
        n
    }

    /// The calling thread's handle: it registers with the domain and announces a
    /// quiescent state every 100 operations.
    pub fn handle(&self) -> TreiberStackHandle<'_, T, R, A> {
        Handle::new(self)
    }
}

impl<T, R: Reclaimer, A: NodeAlloc> Drop for TreiberStack<T, R, A> {
    /// Drops the values still on the stack; one whose `Drop` panics stops none
    /// of the others (every node is freed, then the first panic goes on).
    fn drop(&mut self) {
        // SAFETY: every node reachable from `head` is live, made by `A::alloc`,
        // owned by the stack (`&mut self`), visited once, and holds a value not
        // yet taken. Relaxed loads: no other thread can reach the stack.
        unsafe {
            drop_list::<_, _, A>(
                self.head.load(Ordering::Relaxed),
                |n| (*n).next.load(Ordering::Relaxed),
                |n| Some((*n).value.take()),
            )
        }
    }
}

impl<T, R: Reclaimer, A: NodeAlloc> fmt::Debug for TreiberStack<T, R, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TreiberStack")
            .field("reclaimer", &R::NAME)
            .field("alloc", &A::NAME)
            .finish_non_exhaustive()
    }
}

/// One thread's access to a [`TreiberStack`]: the generic [`Handle`] (its
/// registration with the stack's domain, and a quiescent state every 100
/// operations); [`Handle::local`] gives the registration.
pub type TreiberStackHandle<'a, T, R = Ebr, A = SystemAlloc> = Handle<'a, TreiberStack<T, R, A>>;

impl<T, R: Reclaimer, A: NodeAlloc> Registered for TreiberStack<T, R, A> {
    type R = R;
    fn domain(&self) -> &Arc<R> {
        &self.domain
    }
}

impl<T, R: Reclaimer, A: NodeAlloc> StackHandle<T> for Handle<'_, TreiberStack<T, R, A>> {
    fn push(&mut self, value: T) {
        self.op(|s, l| s.push(l, value));
    }

    fn pop(&mut self) -> Option<T> {
        self.op(|s, l| s.pop(l))
    }

    fn quiescent(&mut self) {
        self.quiescent_now();
    }
}

impl<T: Send, R: Reclaimer, A: NodeAlloc> ConcurrentStack<T> for TreiberStack<T, R, A> {
    type Handle<'a>
        = TreiberStackHandle<'a, T, R, A>
    where
        Self: 'a;

    fn handle(&self) -> Self::Handle<'_> {
        TreiberStack::handle(self)
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

    struct Counted<'a>(u32, &'a AtomicUsize);
    impl Drop for Counted<'_> {
        fn drop(&mut self) {
            self.1.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn lifo<R: Reclaimer, A: NodeAlloc>(s: TreiberStack<u32, R, A>) {
        let mut h = s.handle();
        assert_eq!(h.pop(), None);
        assert!(s.is_empty());
        for i in 0..5 {
            h.push(i);
        }
        assert!(!s.is_empty());
        assert_eq!(
            (0..5).map(|_| h.pop().unwrap()).collect::<Vec<_>>(),
            [4, 3, 2, 1, 0]
        );
        assert_eq!(h.pop(), None);
        h.push(9);
        h.quiescent();
        assert_eq!(h.pop(), Some(9));
        drop(h);
        assert_eq!(s.domain().stats().retired, 6, "one node per pop");
    }

    #[test]
    fn lifo_with_every_scheme() {
        lifo(TreiberStack::<u32, Ebr>::new());
        lifo(TreiberStack::<u32, Qsbr>::new());
        lifo(TreiberStack::<u32, Leak>::new());
        lifo(TreiberStack::<u32, HazardPointers>::with_domain(Arc::new(
            HazardPointers::new(1).unwrap(),
        )));
    }

    #[test]
    fn lifo_with_magazines() {
        lifo(TreiberStack::<u32, Ebr, MagazineAlloc>::new());
    }

    #[test]
    fn values_are_dropped_exactly_once() {
        let drops = AtomicUsize::new(0);
        {
            let s: TreiberStack<Counted<'_>, HazardPointers> = TreiberStack::new();
            let mut h = s.handle();
            for i in 0..5 {
                h.push(Counted(i, &drops));
            }
            let top = h.pop().unwrap();
            assert_eq!(top.0, 4);
            drop(top);
            drop(h);
            assert_eq!(drops.load(Ordering::Relaxed), 1, "retiring drops no value");
        }
        assert_eq!(drops.load(Ordering::Relaxed), 5);
    }

    #[test]
    fn debug_names_the_scheme() {
        let s: TreiberStack<u8, Qsbr> = TreiberStack::new();
        assert_eq!(
            format!("{s:?}"),
            "TreiberStack { reclaimer: \"QSBR\", alloc: \"system\", .. }"
        );
        assert!(format!("{:?}", s.handle()).starts_with("Handle { structure: TreiberStack"));
    }
}
