//! Herlihy's non-blocking skew heap with optimized copying (re-exported by
//! [`heap`](super::heap), whose module documentation describes it and the
//! ownership of its nodes).
//!
//! Michael & Scott, PODC 1996 (papers/000_…) §4.3; Herlihy, *A Methodology for
//! Implementing Highly Concurrent Data Objects*, TOPLAS 1993.
//!
//! Uses `reclaim`, `ds::lf` (the CAS backoff), `sync`, and from `sched` only named
//! stall points. Progress: lock-free, every operation (`tests/progress.rs`).

use std::fmt;
use std::ptr;

use super::lf::{CasBackoff, check_local};
use crate::reclaim::{Ebr, Guard, Header, Local, Reclaimer};
use crate::sched::stall;
use crate::sync::{Arc, AtomicPtr, Ordering};
use crate::util::unwind::each;

use super::handle::{Handle, Registered};
use super::version::{DeadNode, Version, link_dead};
use super::{ConcurrentPriorityQueue, PriorityQueueHandle};

/// A node of [`HerlihySkewHeap`]: immutable once published (only `dead_next`, which
/// no reader uses, is written later, by the CAS winner that removed it).
struct Node<T> {
    value: T,
    left: *mut Node<T>,
    right: *mut Node<T>,
    dead_next: AtomicPtr<Node<T>>,
}

impl<T> DeadNode for Node<T> {
    fn dead_next(&self) -> &AtomicPtr<Self> {
        &self.dead_next
    }
}

// SAFETY: a node holds a `T` that may be dropped on another thread (`T: Send`);
// the links are addresses the heap owns.
unsafe impl<T: Send> Send for Node<T> {}

impl<T> Node<T> {
    fn alloc(value: T, left: *mut Node<T>, right: *mut Node<T>) -> *mut Node<T> {
        Box::into_raw(Box::new(Node {
            value,
            left,
            right,
            dead_next: AtomicPtr::new(ptr::null_mut()),
        }))
    }
}

/// One operation's private work: the copies its current attempt made (freed if
/// the CAS fails), the originals they replace (the old version's dead list if it
/// succeeds), insert's new node and the candidate version. All of it is private
/// until the winning CAS publishes it ([`publish`](Self::publish)); until then
/// `Drop` frees it, so a `Clone` or `Ord` that panics mid-attempt leaks nothing.
struct Attempt<T, R: Reclaimer> {
    copies: Vec<*mut Node<T>>,
    replaced: Vec<*mut Node<T>>,
    /// Insert's node holding the new value (null for delete_min, or published).
    single: *mut Node<T>,
    /// The candidate version (null until made, or published).
    cand: *mut Version<Node<T>, R>,
}

impl<T, R: Reclaimer> Attempt<T, R> {
    fn new() -> Self {
        Self {
            copies: Vec::new(),
            replaced: Vec::new(),
            single: ptr::null_mut(),
            cand: ptr::null_mut(),
        }
    }

    /// Frees the copies of a failed attempt and forgets the originals. A copy
    /// whose value panics in its `Drop` stops none of the others.
    fn abandon(&mut self) {
        self.replaced.clear();
        // SAFETY: copies are private boxes nobody else has seen, each freed once.
        each(self.copies.drain(..), |c| drop(unsafe { Box::from_raw(c) })).resume();
    }

    /// After the winning CAS: the copies, `single` and `cand` now belong to the
    /// structure. Returns the originals they replaced (the old version's dead list).
    fn publish(&mut self) -> Vec<*mut Node<T>> {
        self.copies.clear();
        self.single = ptr::null_mut();
        self.cand = ptr::null_mut();
        std::mem::take(&mut self.replaced)
    }
}

impl<T, R: Reclaimer> Drop for Attempt<T, R> {
    /// Frees whatever is still private — also when a value panics in its
    /// `Drop` (the rest is freed, then the first panic goes on).
    fn drop(&mut self) {
        self.replaced.clear();
        if !self.cand.is_null() {
            // SAFETY: not published: never shared.
            unsafe { Version::discard(self.cand) };
        }
        let single = (!self.single.is_null()).then_some(self.single);
        // SAFETY: copies and `single` (not published) are private boxes, each
        // freed once; dropping `single` drops the value the failed (panicked)
        // insert was given.
        each(self.copies.drain(..).chain(single), |c| {
            drop(unsafe { Box::from_raw(c) })
        })
        .resume();
    }
}

impl<T: Ord + Clone, R: Reclaimer> Attempt<T, R> {
    /// A copy of `orig` (a node of the protected version) with new children.
    ///
    /// # Safety
    /// `orig` is a node of a version the caller's guard protects.
    unsafe fn copy(&mut self, orig: *mut Node<T>) -> *mut Node<T> {
        // SAFETY: `orig` is live (the caller's contract) and its value immutable.
        let c = Node::alloc(unsafe { (*orig).value.clone() }, ptr::null_mut(), unsafe {
            (*orig).left
        });
        self.copies.push(c);
        self.replaced.push(orig);
        c
    }

    /// Persistent top-down skew merge of two subtrees of the protected version:
    /// every node on the merge path is copied (its old left becomes the copy's
    /// right; the copy's left is the merge of its old right with the other side);
    /// the other subtrees are shared.
    ///
    /// # Safety
    /// `a` and `b` are null or disjoint subtrees of a version the guard protects.
    unsafe fn merge(&mut self, mut a: *mut Node<T>, mut b: *mut Node<T>) -> *mut Node<T> {
        let mut result = ptr::null_mut();
        let mut hole: *mut *mut Node<T> = &mut result;
        loop {
            if a.is_null() || b.is_null() {
                let rest = if a.is_null() { b } else { a };
                // SAFETY: `hole` is `result` or the `left` of a private copy.
                unsafe { *hole = rest };
                return result;
            }
            // SAFETY: both are live nodes of the protected version.
            if unsafe { (*b).value < (*a).value } {
                std::mem::swap(&mut a, &mut b);
            }
            // SAFETY: `a` is a node of the protected version.
            let c = unsafe { self.copy(a) };
            // SAFETY: `hole` is `result` or a private copy's `left`; `a` is live.
            unsafe {
                *hole = c;
                hole = &mut (*c).left;
                a = (*a).right;
            }
        }
    }
}

/// Herlihy's non-blocking skew heap with optimized copying (000 §4.3): a
/// persistent skew heap whose current version is swung by CAS; memory reclaimed
/// with `R`.
///
/// ```
/// use mpsync::ds::heap::HerlihySkewHeap;
/// use mpsync::ds::{ConcurrentPriorityQueue, PriorityQueueHandle};
/// use mpsync::reclaim::{Qsbr, Reclaimer};
/// use std::sync::Arc;
///
/// let h: HerlihySkewHeap<u32> = HerlihySkewHeap::new(); // EBR
/// let mut t = h.handle();
/// for v in [3, 1, 2] {
///     t.insert(v);
/// }
/// assert_eq!(t.delete_min(), Some(1));
///
/// let domain = Arc::new(Qsbr::new());
/// let h = HerlihySkewHeap::with_domain(domain.clone());
/// let local = Qsbr::register(&domain);
/// h.insert(&local, "b");
/// h.insert(&local, "a");
/// assert_eq!(h.delete_min(&local), Some("a"));
/// ```
pub struct HerlihySkewHeap<T, R: Reclaimer = Ebr> {
    current: crate::util::CachePadded<AtomicPtr<Version<Node<T>, R>>>,
    domain: Arc<R>,
}

// SAFETY: values move between threads and are dropped on any thread (`T: Send`),
// and several threads read (compare, clone) the same value at once (`T: Sync`).
unsafe impl<T: Send + Sync, R: Reclaimer> Send for HerlihySkewHeap<T, R> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync, R: Reclaimer> Sync for HerlihySkewHeap<T, R> {}

impl<T: Ord + Clone + Send + Sync + 'static> HerlihySkewHeap<T, Ebr> {
    /// An empty heap with its own EBR domain.
    pub fn new() -> Self {
        Self::with_domain(Arc::new(Ebr::new()))
    }
}

impl<T: Ord + Clone + Send + Sync + 'static> Default for HerlihySkewHeap<T, Ebr> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Ord + Clone + Send + Sync + 'static, R: Reclaimer> HerlihySkewHeap<T, R> {
    /// An empty heap reclaiming through `domain`. Hazard pointers need one slot.
    ///
    /// `T: 'static`: a removed value (the original, of which `delete_min`
    /// returns a clone) and the originals of copied nodes are dropped by the
    /// domain when their version is reclaimed — possibly after the heap is
    /// gone, since other structures and registrations may keep the domain.
    /// A borrowed value would be dropped after its borrow ended, so the
    /// compiler refuses one:
    ///
    /// ```compile_fail,E0597
    /// use mpsync::ds::heap::HerlihySkewHeap;
    /// use mpsync::reclaim::{Ebr, Reclaimer};
    /// use mpsync::sync::Arc;
    ///
    /// let domain = Arc::new(Ebr::new());
    /// let local = Ebr::register(&domain);
    /// let name = String::from("borrowed");
    /// let h = HerlihySkewHeap::with_domain(domain.clone());
    /// h.insert(&local, &name); // error: `name` does not live long enough
    /// ```
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
    pub fn handle(&self) -> HerlihySkewHeapHandle<'_, T, R> {
        Handle::new(self)
    }

    /// Inserts `value`; `local` is the calling thread's registration in
    /// [`domain`](Self::domain).
    ///
    /// # Panics
    /// If `local` is registered with another domain than [`domain`](Self::domain),
    /// or if `T`'s `Clone` or `Ord` panics — then the heap is unchanged, `value`
    /// is dropped and nothing leaks.
    pub fn insert(&self, local: &R::Local, value: T) {
        check_local(&*self.domain, local, "HerlihySkewHeap::insert");
        let mut at = Attempt::new();
        at.single = Node::alloc(value, ptr::null_mut(), ptr::null_mut());
        at.cand = Version::candidate(Header::of_local(local), ptr::null_mut());
        let (single, cand) = (at.single, at.cand);
        let mut backoff = CasBackoff::new();
        let mut g = local.enter();
        loop {
            let cur = g.protect(0, &self.current);
            // SAFETY: `cur` is protected (slot 0) and was validated as the current
            // version, which is retired only once replaced, so it is not freed; `root`
            // is immutable.
            let root = unsafe { cur.deref() }.root;
            let cur = cur.as_ptr();
            // Merge with the private singleton: copy the path down while the
            // version's node is not larger; the singleton then takes the rest as its
            // left subtree (merge(x, h) = x{left: h} when x is smaller).
            let mut result = ptr::null_mut();
            let mut hole: *mut *mut Node<T> = &mut result;
            let mut a = root;
            loop {
                // SAFETY: `single` is private; `a` is null or a node of `cur`.
                let stop = a.is_null() || unsafe { (*single).value < (*a).value };
                if stop {
                    // SAFETY: `single` is private; `hole` is `result` or a copy's
                    // `left`.
                    unsafe {
                        (*single).left = a;
                        *hole = single;
                    }
                    break;
                }
                // SAFETY: `a` is a node of the protected version.
                let c = unsafe { at.copy(a) };
                // SAFETY: as above; `hole` points into private memory.
                unsafe {
                    *hole = c;
                    hole = &mut (*c).left;
                    a = (*a).right;
                }
            }
            // SAFETY: `cand` is still private.
            unsafe { (*cand).root = result };
            // AcqRel on success: the Release publishes the new nodes and `cand` to
            // the Acquire loads in `protect`; Relaxed on failure (we re-protect).
            stall::point(stall::HERLIHY_BUILT);
            match self
                .current
                .compare_exchange(cur, cand, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    stall::point(stall::HERLIHY_SWUNG);
                    let replaced = at.publish();
                    // SAFETY: our CAS replaced `cur` by `cand`; `replaced` are exactly
                    // the nodes of `cur` that `cand` copied instead of sharing.
                    unsafe {
                        let dead = link_dead(&replaced);
                        Version::retire(&mut g, cur, cand, dead);
                    }
                    return;
                }
                Err(_) => {
                    at.abandon();
                    backoff.spin();
                }
            }
        }
    }

    /// Removes a smallest value (a clone of it; the original is dropped when its
    /// node is reclaimed), or `None` if the heap is empty; `local` is the calling
    /// thread's registration in [`domain`](Self::domain).
    ///
    /// # Panics
    /// If `local` is registered with another domain than [`domain`](Self::domain),
    /// or if `T`'s `Clone` or `Ord` panics — then the heap is unchanged and
    /// nothing leaks (the value is cloned before the CAS).
    pub fn delete_min(&self, local: &R::Local) -> Option<T> {
        check_local(&*self.domain, local, "HerlihySkewHeap::delete_min");
        let mut at = Attempt::new();
        let mut backoff = CasBackoff::new();
        let mut g = local.enter();
        loop {
            let cur = g.protect(0, &self.current);
            // SAFETY: `cur` is protected (slot 0) and was validated as the current
            // version, which is retired only once replaced, so it is not freed; `root`
            // is immutable.
            let root = unsafe { cur.deref() }.root;
            let cur = cur.as_ptr();
            if root.is_null() {
                return None; // `at`'s drop frees the candidate, if one was made
            }
            // Cloned before the CAS, so that a panicking `Clone` leaves the heap
            // unchanged (a failed attempt drops its clone).
            // SAFETY: `root` belongs to the protected version; values are immutable.
            let value = unsafe { (*root).value.clone() };
            // SAFETY: `root` and its subtrees belong to the protected version.
            let new_root = unsafe { at.merge((*root).left, (*root).right) };
            at.replaced.push(root);
            if at.cand.is_null() {
                at.cand = Version::candidate(Header::new(&g), new_root);
            } else {
                // SAFETY: `cand` is still private.
                unsafe { (*at.cand).root = new_root };
            }
            let cand = at.cand;
            // AcqRel/Relaxed: as in `insert`.
            stall::point(stall::HERLIHY_BUILT);
            match self
                .current
                .compare_exchange(cur, cand, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    stall::point(stall::HERLIHY_SWUNG);
                    let replaced = at.publish();
                    // SAFETY: our CAS replaced `cur` by `cand`; `replaced` are the old
                    // root and the originals of the merge path, which `cand` lacks.
                    unsafe {
                        let dead = link_dead(&replaced);
                        Version::retire(&mut g, cur, cand, dead);
                    }
                    return Some(value);
                }
                Err(_) => {
                    at.abandon();
                    backoff.spin();
                }
            }
        }
    }
}

impl<T, R: Reclaimer> Drop for HerlihySkewHeap<T, R> {
    /// Drops the values still in the heap; one whose `Drop` panics stops none
    /// of the others (every node is freed, then the first panic goes on).
    fn drop(&mut self) {
        // Relaxed: `&mut self`, no operation is in flight.
        let cur = self.current.load(Ordering::Relaxed);
        // SAFETY: the current version is alive (the structure holds a reference).
        let mut todo = vec![unsafe { (*cur).root }];
        // Each node once, its children read before it is handed out.
        let nodes = std::iter::from_fn(|| {
            loop {
                let n = todo.pop()?;
                if !n.is_null() {
                    // SAFETY: a node of the current version's tree, not yet freed.
                    unsafe { todo.extend([(*n).left, (*n).right]) };
                    return Some(n);
                }
            }
        });
        // SAFETY: nodes of the current version are on no dead list (see the
        // module doc) and a tree: each is reached and freed once.
        let caught = each(nodes, |n| drop(unsafe { Box::from_raw(n) }));
        // SAFETY: the structure's own reference to its current version, whose dead
        // list is empty; `release` does not touch the (now freed) tree.
        unsafe { Version::release(cur) };
        caught.resume();
    }
}

impl<T, R: Reclaimer> fmt::Debug for HerlihySkewHeap<T, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HerlihySkewHeap")
            .field("reclaimer", &R::NAME)
            .finish_non_exhaustive()
    }
}

impl<T: Ord + Clone + Send + Sync + 'static, R: Reclaimer> ConcurrentPriorityQueue<T>
    for HerlihySkewHeap<T, R>
{
    type Handle<'a>
        = HerlihySkewHeapHandle<'a, T, R>
    where
        Self: 'a;

    fn handle(&self) -> HerlihySkewHeapHandle<'_, T, R> {
        HerlihySkewHeap::handle(self)
    }
}

/// A thread's handle on a [`HerlihySkewHeap`]: the generic [`Handle`] (its
/// registration with the domain, and a quiescent state every 100 operations).
pub type HerlihySkewHeapHandle<'a, T, R = Ebr> = Handle<'a, HerlihySkewHeap<T, R>>;

impl<T, R: Reclaimer> Registered for HerlihySkewHeap<T, R> {
    type R = R;
    fn domain(&self) -> &Arc<R> {
        &self.domain
    }
}

impl<T: Ord + Clone + Send + Sync + 'static, R: Reclaimer> PriorityQueueHandle<T>
    for Handle<'_, HerlihySkewHeap<T, R>>
{
    fn insert(&mut self, value: T) {
        self.op(|h, l| h.insert(l, value));
    }
    fn delete_min(&mut self) -> Option<T> {
        self.op(|h, l| h.delete_min(l))
    }
    fn quiescent(&mut self) {
        self.quiescent_now();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::reclaim::HazardPointers;
    use std::sync::atomic::AtomicI64;

    /// Counts its drops.
    #[derive(Debug, Clone)]
    struct Dropped(u32, std::sync::Arc<AtomicI64>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.1.fetch_add(1, Ordering::Relaxed);
        }
    }
    impl PartialEq for Dropped {
        fn eq(&self, o: &Self) -> bool {
            self.0 == o.0
        }
    }
    impl Eq for Dropped {}
    impl PartialOrd for Dropped {
        fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for Dropped {
        fn cmp(&self, o: &Self) -> std::cmp::Ordering {
            self.0.cmp(&o.0)
        }
    }

    /// Versions are freed in chain order: while one thread holds a version
    /// (protected by a hazard pointer, which protects that version only), no later
    /// version and none of the nodes the later transitions removed — some of them
    /// nodes of the held version — may be freed, however eagerly the others scan.
    #[test]
    fn a_held_version_holds_back_every_later_one() {
        let drops = std::sync::Arc::new(AtomicI64::new(0));
        let domain = Arc::new(HazardPointers::with_threshold(1, 1).unwrap());
        let h = HerlihySkewHeap::with_domain(domain.clone());
        let mut b = HazardPointers::register(&domain);
        for v in [5, 3, 8, 1, 9, 2, 7] {
            h.insert(&b, Dropped(v, drops.clone()));
        }
        let a = HazardPointers::register(&domain);
        let ga = a.enter();
        let held = ga.protect_raw(0, &h.current);
        // Replaced before `held` was current: freed already, or by the next scan.
        b.scan();
        let before = drops.load(Ordering::Relaxed);
        let mut out = Vec::new();
        for v in [4, 6] {
            out.extend(h.delete_min(&b));
            h.insert(&b, Dropped(v, drops.clone()));
        }
        assert_eq!(
            drops.load(Ordering::Relaxed),
            before,
            "a node was freed while an older version was held"
        );
        // SAFETY: still protected; its nodes are alive (checked above).
        assert_eq!(unsafe { (*(*held).root).value.0 }, 1);
        drop(ga);
        drop((a, b, out, h));
        drop(domain);
    }
}
