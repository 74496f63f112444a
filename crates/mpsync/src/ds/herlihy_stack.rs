//! Herlihy's non-blocking stack with unneeded copying removed (re-exported by
//! [`stack`](super::stack), whose module documentation describes it).
//!
//! Michael & Scott, PODC 1996 (papers/000_…) §4.2; Herlihy, *A Methodology for
//! Implementing Highly Concurrent Data Objects*, TOPLAS 1993.
//!
//! Uses `reclaim`, `ds::lf` (the CAS backoff), `sync`, and from `sched` only named
//! stall points. Progress: lock-free, every operation (`tests/progress.rs`).

use std::fmt;
use std::mem::ManuallyDrop;
use std::ptr;

use super::lf::{CasBackoff, check_local, free_chain};
use crate::reclaim::{Ebr, Guard, Header, Local, Reclaimer};
use crate::sched::stall;
use crate::sync::{Arc, AtomicPtr, Ordering};

use super::handle::{Handle, Registered};
use super::version::{DeadNode, Version};
use super::{ConcurrentStack, StackHandle};

/// A node of [`HerlihyStack`]. `next` is immutable once published; `value` is
/// moved out only by the pop whose CAS removed the node, so freeing a node never
/// drops its value (hence `ManuallyDrop`).
struct Node<T> {
    value: ManuallyDrop<T>,
    next: *mut Node<T>,
    dead_next: AtomicPtr<Node<T>>,
}

impl<T> DeadNode for Node<T> {
    fn dead_next(&self) -> &AtomicPtr<Self> {
        &self.dead_next
    }
}

// SAFETY: a node only carries a `T` from the pushing thread to the popping one
// (`T: Send`); `next` is an address the stack owns.
unsafe impl<T: Send> Send for Node<T> {}

/// Herlihy's non-blocking stack, copying optimized away (000 §4.2): a shared
/// pointer to the current version, swung by CAS; memory reclaimed with `R`.
///
/// ```
/// use mpsync::ds::stack::HerlihyStack;
/// use mpsync::ds::{ConcurrentStack, StackHandle};
/// use mpsync::reclaim::{HazardPointers, Reclaimer};
/// use std::sync::Arc;
///
/// let s: HerlihyStack<String> = HerlihyStack::new(); // EBR
/// let mut h = s.handle();
/// h.push("a".to_string());
/// h.push("b".to_string());
/// assert_eq!(h.pop().as_deref(), Some("b"));
///
/// // Any scheme; the inherent API takes the thread's registration explicitly.
/// let domain = Arc::new(HazardPointers::new(1).unwrap());
/// let s = HerlihyStack::with_domain(domain.clone());
/// let local = HazardPointers::register(&domain);
/// s.push(&local, 7);
/// assert_eq!(s.pop(&local), Some(7));
/// assert_eq!(s.pop(&local), None);
/// ```
pub struct HerlihyStack<T, R: Reclaimer = Ebr> {
    current: crate::util::CachePadded<AtomicPtr<Version<Node<T>, R>>>,
    domain: Arc<R>,
}

// SAFETY: values move between threads (`T: Send`); everything else is reached
// through the atomic version pointer and the reclaimer (see the module doc).
unsafe impl<T: Send, R: Reclaimer> Send for HerlihyStack<T, R> {}
// SAFETY: as above; `&HerlihyStack` never hands out `&T`, only moves `T`s.
unsafe impl<T: Send, R: Reclaimer> Sync for HerlihyStack<T, R> {}

impl<T: Send + 'static> HerlihyStack<T, Ebr> {
    /// An empty stack with its own EBR domain.
    pub fn new() -> Self {
        Self::with_domain(Arc::new(Ebr::new()))
    }
}

impl<T: Send + 'static> Default for HerlihyStack<T, Ebr> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Send + 'static, R: Reclaimer> HerlihyStack<T, R> {
    /// An empty stack reclaiming through `domain` (shared with other structures
    /// if you like). Hazard pointers need one slot. (A popped value is moved
    /// out of its node before the node is retired, so the domain never drops a
    /// value; `T: 'static` is not needed for that, and kept for uniformity with
    /// the heap.)
    pub fn with_domain(domain: Arc<R>) -> Self {
        Self {
            current: crate::util::CachePadded::new(AtomicPtr::new(Version::first(ptr::null_mut()))),
            domain,
        }
    }

    /// The reclamation domain.
    pub fn domain(&self) -> &Arc<R> {
        &self.domain
    }

    /// The calling thread's handle: registers it with the domain.
    pub fn handle(&self) -> HerlihyStackHandle<'_, T, R> {
        Handle::new(self)
    }

    /// Pushes `value`; `local` is the calling thread's registration in
    /// [`domain`](Self::domain).
    ///
    /// # Panics
    /// If `local` is registered with another domain than [`domain`](Self::domain).
    pub fn push(&self, local: &R::Local, value: T) {
        check_local(&*self.domain, local, "HerlihyStack::push");
        let node = Box::into_raw(Box::new(Node {
            value: ManuallyDrop::new(value),
            next: ptr::null_mut(),
            dead_next: AtomicPtr::new(ptr::null_mut()),
        }));
        let cand = Version::candidate(Header::of_local(local), node);
        let mut backoff = CasBackoff::new();
        let mut g = local.enter();
        loop {
            let cur = g.protect(0, &self.current);
            // SAFETY: `cur` is protected (slot 0) and was validated as the current
            // version, which is retired only once replaced, so it is not freed; `root`
            // is immutable.
            let top = unsafe { cur.deref() }.root;
            let cur = cur.as_ptr();
            // SAFETY: `node` is still private to this thread.
            unsafe { (*node).next = top };
            // AcqRel on success: the Release publishes `node` and `cand` to the
            // Acquire loads in `protect`; the Acquire is not needed by push but keeps
            // the chain of versions one release sequence. Relaxed on failure: we
            // re-protect before using anything.
            stall::point(stall::HERLIHY_BUILT);
            match self
                .current
                .compare_exchange(cur, cand, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    stall::point(stall::HERLIHY_SWUNG);
                    // SAFETY: our CAS replaced `cur` by `cand`; `cur` is protected by
                    // `g`; a push removes no node, so the dead list is empty.
                    unsafe { Version::retire(&mut g, cur, cand, ptr::null_mut()) };
                    return;
                }
                Err(_) => backoff.spin(),
            }
        }
    }

    /// Pops the top value, or `None` if the stack is empty; `local` is the calling
    /// thread's registration in [`domain`](Self::domain).
    ///
    /// # Panics
    /// If `local` is registered with another domain than [`domain`](Self::domain).
    pub fn pop(&self, local: &R::Local) -> Option<T> {
        check_local(&*self.domain, local, "HerlihyStack::pop");
        let mut cand: *mut Version<Node<T>, R> = ptr::null_mut();
        let mut backoff = CasBackoff::new();
        let mut g = local.enter();
        loop {
            let cur = g.protect(0, &self.current);
            // SAFETY: `cur` is protected (slot 0) and was validated as the current
            // version, which is retired only once replaced, so it is not freed; `root`
            // is immutable.
            let top = unsafe { cur.deref() }.root;
            let cur = cur.as_ptr();
            if top.is_null() {
                if !cand.is_null() {
                    // SAFETY: `cand` was never published.
                    unsafe { Version::discard(cand) };
                }
                return None;
            }
            // SAFETY: `top` belongs to `cur`'s list; it is freed only after every
            // version up to the one whose replacement popped it, `cur` included, is
            // released (ds/version.rs), and `cur` is protected. `next` is immutable.
            let next = unsafe { (*top).next };
            if cand.is_null() {
                cand = Version::candidate(Header::new(&g), next);
            } else {
                // SAFETY: `cand` is still private to this thread.
                unsafe { (*cand).root = next };
            }
            // AcqRel/Relaxed: as in `push`.
            stall::point(stall::HERLIHY_BUILT);
            match self
                .current
                .compare_exchange(cur, cand, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    stall::point(stall::HERLIHY_SWUNG);
                    // The pusher's write is visible: our protect acquired `cur`, whose
                    // release sequence of version CASes includes the push.
                    // SAFETY: our CAS removed `top`; only the CAS that removes a node
                    // takes its value, and the node is freed without dropping it.
                    let value = unsafe { ManuallyDrop::into_inner(ptr::read(&(*top).value)) };
                    // SAFETY: our CAS replaced `cur` by `cand`, `cur` is protected,
                    // and `top` is the one node `cand` no longer has.
                    unsafe {
                        let dead = super::version::link_dead(&[top]);
                        Version::retire(&mut g, cur, cand, dead);
                    }
                    return Some(value);
                }
                Err(_) => backoff.spin(),
            }
        }
    }
}

impl<T, R: Reclaimer> Drop for HerlihyStack<T, R> {
    /// Drops the values still on the stack; one whose `Drop` panics stops none
    /// of the others (every node is freed, then the first panic goes on).
    fn drop(&mut self) {
        // Relaxed: `&mut self`, no operation is in flight.
        let cur = self.current.load(Ordering::Relaxed);
        // SAFETY: the current version is alive (the structure holds a reference);
        // its nodes are in no dead list and reachable only from here now, and
        // `free_chain` visits each once. Each value was never popped (not moved
        // out): dropped once, after its node is freed.
        let caught = unsafe {
            free_chain(
                (*cur).root,
                |n| (*n).next,
                |n| {
                    let node = Box::from_raw(n);
                    drop(ManuallyDrop::into_inner(node.value));
                },
            )
        };
        // SAFETY: the structure's reference to its current version; the version's
        // dead list is empty and its root list was just freed, and `release` reads
        // neither the list nor the root.
        unsafe { Version::release(cur) };
        caught.resume();
    }
}

impl<T, R: Reclaimer> fmt::Debug for HerlihyStack<T, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HerlihyStack")
            .field("reclaimer", &R::NAME)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static, R: Reclaimer> ConcurrentStack<T> for HerlihyStack<T, R> {
    type Handle<'a>
        = HerlihyStackHandle<'a, T, R>
    where
        Self: 'a;

    fn handle(&self) -> HerlihyStackHandle<'_, T, R> {
        HerlihyStack::handle(self)
    }
}

/// A thread's handle on a [`HerlihyStack`]: the generic [`Handle`] (its
/// registration with the domain, and a quiescent state every 100 operations
/// and whenever [`quiescent`](StackHandle::quiescent) is called).
pub type HerlihyStackHandle<'a, T, R = Ebr> = Handle<'a, HerlihyStack<T, R>>;

impl<T, R: Reclaimer> Registered for HerlihyStack<T, R> {
    type R = R;
    fn domain(&self) -> &Arc<R> {
        &self.domain
    }
}

impl<T: Send + 'static, R: Reclaimer> StackHandle<T> for Handle<'_, HerlihyStack<T, R>> {
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
