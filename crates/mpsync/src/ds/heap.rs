//! Priority queues: a skew heap under one lock, and Herlihy's non-blocking skew
//! heap with optimized copying.
//!
//! Michael & Scott, PODC 1996 (papers/000_…) §4.3; Herlihy, *A Methodology for
//! Implementing Highly Concurrent Data Objects*, TOPLAS 1993 (his skew-heap
//! example); Sleator & Tarjan's skew heap (top-down merge).
//!
//! - [`LockedSkewHeap<L, T>`]: an ordinary skew heap under any
//!   `lock_api::RawMutex`; `LockedSkewHeap<TasBNp, T>` is the paper's
//!   preemption-safe heap. Blocking.
//! - [`HerlihySkewHeap<T, R>`]: a *persistent* skew heap. An operation reads the
//!   current version's root, copies only the nodes on its merge path (every other
//!   subtree is shared with the old version), builds a new version around the new
//!   root and swings the shared version pointer with CAS, backing off (bounded)
//!   when it fails. Lock-free.
//!
//! # Ownership of nodes (Herlihy heap)
//! A node is created by one operation and belongs to every later version until a
//! transition copies or removes it: that transition's new version no longer
//! contains it, and no version after it does (new versions only ever share or
//! copy nodes of the current one). So the originals an operation copied (and, for
//! `delete_min`, the old root) are exactly the nodes the old version alone owns;
//! the CAS winner puts them on the old version's dead list and retires the
//! version, and `ds/version.rs` frees the list once no thread can hold that
//! version or an older one. Each node is on one dead list (freed once, its value
//! dropped once); nodes still in the current version are on none and are freed by
//! `Drop`. A losing operation frees only the copies it made itself, which nobody
//! else saw. Readers protect only the version they read.
//!
//! An operation's private work (its copies, insert's new node, the candidate
//! version) is owned by an `Attempt` until the winning CAS publishes it, and freed
//! by the `Attempt`'s drop otherwise — also when `T`'s `Clone` or `Ord` panics.
//! `delete_min` clones its result before the CAS, so a panicking `Clone` cannot
//! leave a replaced version unretired (versions are freed in chain order, so that
//! would leak every later version too).
//!
//! Uses `reclaim`, `lock` (through the type parameter), `ds::lf` (the CAS backoff), `sync`.

use std::fmt;
use std::ptr;

use super::lf::{CasBackoff, check_local};
use crate::reclaim::{Ebr, Guard, Local, Reclaimer};
use crate::sync::{Arc, AtomicPtr, Ordering};

use super::stack::QUIESCE_EVERY;
use super::version::{DeadNode, Version, link_dead};
use super::{ConcurrentPriorityQueue, PriorityQueueHandle};

/// An ephemeral skew heap (Sleator & Tarjan), merged top-down without recursion.
struct SkewHeap<T> {
    root: Link<T>,
    len: usize,
}

type Link<T> = Option<Box<SkewNode<T>>>;

struct SkewNode<T> {
    value: T,
    left: Link<T>,
    right: Link<T>,
}

impl<T: Ord> SkewHeap<T> {
    /// Top-down skew merge: take the smaller root, its old left becomes its right,
    /// and its left is the merge of its old right with the other heap.
    fn merge(mut a: Link<T>, mut b: Link<T>) -> Link<T> {
        let mut result: Link<T> = None;
        let mut hole = &mut result;
        loop {
            match (a, b) {
                (None, rest) | (rest, None) => {
                    *hole = rest;
                    break;
                }
                (Some(x), Some(y)) => {
                    let (mut s, other) = if y.value < x.value { (y, x) } else { (x, y) };
                    let r = s.right.take();
                    s.right = s.left.take();
                    a = r;
                    b = Some(other);
                    hole = &mut hole.insert(s).left;
                }
            }
        }
        result
    }

    fn insert(&mut self, value: T) {
        let single = Some(Box::new(SkewNode {
            value,
            left: None,
            right: None,
        }));
        self.root = Self::merge(self.root.take(), single);
        self.len += 1;
    }

    fn delete_min(&mut self) -> Option<T> {
        let top = self.root.take()?;
        let SkewNode { value, left, right } = *top;
        self.root = Self::merge(left, right);
        self.len -= 1;
        Some(value)
    }
}

impl<T> Drop for SkewHeap<T> {
    fn drop(&mut self) {
        // Iteratively, so a long path cannot overflow the stack.
        let mut todo: Vec<Box<SkewNode<T>>> = self.root.take().into_iter().collect();
        while let Some(mut n) = todo.pop() {
            todo.extend(n.left.take());
            todo.extend(n.right.take());
        }
    }
}

/// A min-priority queue: a skew heap under one lock of type `L`.
///
/// ```
/// use mpsync::ds::heap::LockedSkewHeap;
/// use mpsync::lock::TasBNp;
///
/// let h: LockedSkewHeap<TasBNp, u32> = LockedSkewHeap::new();
/// for v in [5, 1, 4, 1] {
///     h.insert(v);
/// }
/// assert_eq!(h.len(), 4);
/// assert_eq!(h.delete_min(), Some(1));
/// assert_eq!(h.delete_min(), Some(1));
/// assert_eq!(h.delete_min(), Some(4));
/// ```
pub struct LockedSkewHeap<L: lock_api::RawMutex, T> {
    heap: lock_api::Mutex<L, SkewHeap<T>>,
}

impl<L: lock_api::RawMutex, T: Ord> LockedSkewHeap<L, T> {
    /// An empty heap.
    pub fn new() -> Self {
        Self {
            heap: lock_api::Mutex::new(SkewHeap { root: None, len: 0 }),
        }
    }

    /// Inserts `value`.
    pub fn insert(&self, value: T) {
        self.heap.lock().insert(value);
    }

    /// Removes a smallest value, or `None` if the heap is empty.
    pub fn delete_min(&self) -> Option<T> {
        self.heap.lock().delete_min()
    }

    /// The number of values (a snapshot).
    pub fn len(&self) -> usize {
        self.heap.lock().len
    }

    /// Whether the heap is empty (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<L: lock_api::RawMutex, T: Ord> Default for LockedSkewHeap<L, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<L: lock_api::RawMutex, T> fmt::Debug for LockedSkewHeap<L, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockedSkewHeap")
            .field("len", &self.heap.lock().len)
            .finish()
    }
}

impl<L, T> ConcurrentPriorityQueue<T> for LockedSkewHeap<L, T>
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

impl<L: lock_api::RawMutex, T: Ord> PriorityQueueHandle<T> for &LockedSkewHeap<L, T> {
    fn insert(&mut self, value: T) {
        LockedSkewHeap::insert(self, value)
    }
    fn delete_min(&mut self) -> Option<T> {
        LockedSkewHeap::delete_min(self)
    }
}

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
struct Attempt<T> {
    copies: Vec<*mut Node<T>>,
    replaced: Vec<*mut Node<T>>,
    /// Insert's node holding the new value (null for delete_min, or published).
    single: *mut Node<T>,
    /// The candidate version (null until made, or published).
    cand: *mut Version<Node<T>>,
}

impl<T> Attempt<T> {
    fn new() -> Self {
        Self {
            copies: Vec::new(),
            replaced: Vec::new(),
            single: ptr::null_mut(),
            cand: ptr::null_mut(),
        }
    }

    /// Frees the copies of a failed attempt and forgets the originals.
    fn abandon(&mut self) {
        for c in self.copies.drain(..) {
            // SAFETY: copies are private boxes nobody else has seen.
            drop(unsafe { Box::from_raw(c) });
        }
        self.replaced.clear();
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

impl<T> Drop for Attempt<T> {
    fn drop(&mut self) {
        self.abandon();
        if !self.single.is_null() {
            // SAFETY: not published: a private box; dropping it drops the value
            // the failed (panicked) insert was given.
            drop(unsafe { Box::from_raw(self.single) });
        }
        if !self.cand.is_null() {
            // SAFETY: not published: never shared.
            unsafe { Version::discard(self.cand) };
        }
    }
}

impl<T: Ord + Clone> Attempt<T> {
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
/// let mut local = Qsbr::register(&domain);
/// h.insert(&mut local, "b");
/// h.insert(&mut local, "a");
/// assert_eq!(h.delete_min(&mut local), Some("a"));
/// ```
pub struct HerlihySkewHeap<T, R: Reclaimer = Ebr> {
    current: crate::util::CachePadded<AtomicPtr<Version<Node<T>>>>,
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
        HerlihySkewHeapHandle {
            heap: self,
            local: R::register(&self.domain),
            ops: 0,
        }
    }

    /// Inserts `value`; `local` is the calling thread's registration in
    /// [`domain`](Self::domain).
    ///
    /// # Panics
    /// If `local` is registered with another domain than [`domain`](Self::domain),
    /// or if `T`'s `Clone` or `Ord` panics — then the heap is unchanged, `value`
    /// is dropped and nothing leaks.
    pub fn insert(&self, local: &mut R::Local, value: T) {
        check_local(&*self.domain, local, "HerlihySkewHeap::insert");
        let mut at = Attempt::new();
        at.single = Node::alloc(value, ptr::null_mut(), ptr::null_mut());
        at.cand = Version::candidate(ptr::null_mut());
        let (single, cand) = (at.single, at.cand);
        let mut backoff = CasBackoff::new();
        let mut g = local.enter();
        loop {
            let cur = g.protect(0, &self.current);
            // SAFETY: `cur` is protected, so not freed; `root` is immutable.
            let root = unsafe { (*cur).root };
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
            match self
                .current
                .compare_exchange(cur, cand, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
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
    pub fn delete_min(&self, local: &mut R::Local) -> Option<T> {
        check_local(&*self.domain, local, "HerlihySkewHeap::delete_min");
        let mut at = Attempt::new();
        let mut backoff = CasBackoff::new();
        let mut g = local.enter();
        loop {
            let cur = g.protect(0, &self.current);
            // SAFETY: `cur` is protected, so not freed; `root` is immutable.
            let root = unsafe { (*cur).root };
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
                at.cand = Version::candidate(new_root);
            } else {
                // SAFETY: `cand` is still private.
                unsafe { (*at.cand).root = new_root };
            }
            let cand = at.cand;
            // AcqRel/Relaxed: as in `insert`.
            match self
                .current
                .compare_exchange(cur, cand, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
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
    fn drop(&mut self) {
        // Relaxed: `&mut self`, no operation is in flight.
        let cur = self.current.load(Ordering::Relaxed);
        // SAFETY: the current version is alive (the structure holds a reference).
        let mut todo = vec![unsafe { (*cur).root }];
        while let Some(n) = todo.pop() {
            if n.is_null() {
                continue;
            }
            // SAFETY: nodes of the current version are on no dead list (see the
            // module doc) and a tree: each is reached and freed once.
            let node = unsafe { Box::from_raw(n) };
            todo.push(node.left);
            todo.push(node.right);
        }
        // SAFETY: the structure's own reference to its current version, whose dead
        // list is empty; `release` does not touch the (now freed) tree.
        unsafe { Version::release(cur) };
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

/// A thread's handle on a [`HerlihySkewHeap`]: its registration with the domain.
/// Announces a quiescent state every 100 operations by itself.
pub struct HerlihySkewHeapHandle<'a, T, R: Reclaimer> {
    heap: &'a HerlihySkewHeap<T, R>,
    local: R::Local,
    ops: u32,
}

impl<T: Ord + Clone + Send + Sync + 'static, R: Reclaimer> PriorityQueueHandle<T>
    for HerlihySkewHeapHandle<'_, T, R>
{
    fn insert(&mut self, value: T) {
        self.heap.insert(&mut self.local, value);
        self.tick();
    }
    fn delete_min(&mut self) -> Option<T> {
        let v = self.heap.delete_min(&mut self.local);
        self.tick();
        v
    }
    fn quiescent(&mut self) {
        self.local.quiescent();
    }
}

impl<T, R: Reclaimer> HerlihySkewHeapHandle<'_, T, R> {
    fn tick(&mut self) {
        self.ops += 1;
        if self.ops >= QUIESCE_EVERY {
            self.ops = 0;
            self.local.quiescent();
        }
    }
}

impl<T, R: Reclaimer> fmt::Debug for HerlihySkewHeapHandle<'_, T, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HerlihySkewHeapHandle")
            .field("reclaimer", &R::NAME)
            .field("ops_since_quiescent", &self.ops)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::lock::{TasB, TasBNp};
    use crate::reclaim::{HazardPointers, Leak, Qsbr};
    use crate::util::rng::SplitMix64;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    use std::sync::atomic::AtomicI64;

    /// Random insert/delete_min mixes (with many ties) against `BinaryHeap`.
    fn matches_binary_heap<H: ConcurrentPriorityQueue<u64>>(make: impl Fn() -> H) {
        let ops = if cfg!(miri) { 60 } else { 2_000 };
        for seed in 0..3 {
            let q = make();
            let mut h = q.handle();
            let mut model = BinaryHeap::new();
            let mut g = SplitMix64::new(seed);
            for _ in 0..ops {
                let r = g.next_u64();
                if r % 5 < 3 {
                    let v = (r >> 8) % 50;
                    h.insert(v);
                    model.push(Reverse(v));
                } else {
                    assert_eq!(h.delete_min(), model.pop().map(|Reverse(v)| v));
                }
            }
            while let Some(Reverse(v)) = model.pop() {
                assert_eq!(h.delete_min(), Some(v));
            }
            assert_eq!(h.delete_min(), None);
        }
    }

    #[test]
    fn locked_skew_heap_is_a_min_heap() {
        matches_binary_heap(LockedSkewHeap::<TasB, u64>::new);
        matches_binary_heap(LockedSkewHeap::<TasBNp, u64>::new);
    }

    #[test]
    fn herlihy_skew_heap_is_a_min_heap_with_every_reclaimer() {
        matches_binary_heap(HerlihySkewHeap::<u64>::new);
        matches_binary_heap(|| HerlihySkewHeap::<u64, _>::with_domain(Arc::new(Qsbr::new())));
        matches_binary_heap(|| {
            HerlihySkewHeap::<u64, _>::with_domain(Arc::new(HazardPointers::new(1).unwrap()))
        });
        matches_binary_heap(|| HerlihySkewHeap::<u64, _>::with_domain(Arc::new(Leak::new())));
    }

    /// Counts live instances, so that a value dropped twice or never shows.
    #[derive(Debug)]
    struct Counted(u32, std::sync::Arc<AtomicI64>);
    impl Counted {
        fn new(v: u32, live: &std::sync::Arc<AtomicI64>) -> Self {
            live.fetch_add(1, Ordering::Relaxed);
            Self(v, live.clone())
        }
    }
    impl Clone for Counted {
        fn clone(&self) -> Self {
            Self::new(self.0, &self.1)
        }
    }
    impl Drop for Counted {
        fn drop(&mut self) {
            self.1.fetch_sub(1, Ordering::Relaxed);
        }
    }
    impl PartialEq for Counted {
        fn eq(&self, o: &Self) -> bool {
            self.0 == o.0
        }
    }
    impl Eq for Counted {}
    impl PartialOrd for Counted {
        fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for Counted {
        fn cmp(&self, o: &Self) -> std::cmp::Ordering {
            self.0.cmp(&o.0)
        }
    }

    /// Every copy made along merge paths and every original is dropped exactly
    /// once, whether replaced (dead lists), still in the heap (`Drop`), or handed out.
    fn drops_once<R: Reclaimer>(domain: Arc<R>) {
        let live = std::sync::Arc::new(AtomicI64::new(0));
        {
            let h = HerlihySkewHeap::with_domain(domain.clone());
            let mut local = R::register(&domain);
            for v in [5, 3, 8, 1, 9, 2, 7, 3] {
                h.insert(&mut local, Counted::new(v, &live));
            }
            let a = h.delete_min(&mut local).expect("non-empty");
            let b = h.delete_min(&mut local).expect("non-empty");
            assert_eq!((a.0, b.0), (1, 2));
            local.quiescent();
            let st = domain.stats();
            assert_eq!(st.retired, 10, "{}: one version per operation", R::NAME);
        }
        drop(domain);
        assert_eq!(live.load(Ordering::Relaxed), 0, "every value dropped once");
    }

    #[test]
    fn values_are_dropped_once() {
        drops_once(Arc::new(Ebr::new()));
        drops_once(Arc::new(Qsbr::new()));
        drops_once(Arc::new(HazardPointers::new(1).unwrap()));
        drops_once(Arc::new(Leak::new()));
        let live = std::sync::Arc::new(AtomicI64::new(0));
        {
            let h: LockedSkewHeap<TasB, Counted> = LockedSkewHeap::new();
            for v in 0..10 {
                h.insert(Counted::new(v % 4, &live));
            }
            assert_eq!(h.delete_min().map(|c| c.0), Some(0));
        }
        assert_eq!(live.load(Ordering::Relaxed), 0);
    }

    /// Calls left before a planted panic, per kind (0: disarmed).
    #[derive(Debug, Default)]
    struct Trip {
        clones: AtomicI64,
        cmps: AtomicI64,
    }

    impl Trip {
        fn tick(c: &AtomicI64, what: &str) {
            if c.load(Ordering::Relaxed) > 0 && c.fetch_sub(1, Ordering::Relaxed) == 1 {
                panic!("planted panic in {what}");
            }
        }
    }

    /// A value that counts its live instances and panics in `clone` or `cmp` on
    /// the call its [`Trip`] is armed for.
    #[derive(Debug)]
    struct Fragile(u32, std::sync::Arc<AtomicI64>, std::sync::Arc<Trip>);
    impl Fragile {
        fn new(v: u32, live: &std::sync::Arc<AtomicI64>, trip: &std::sync::Arc<Trip>) -> Self {
            live.fetch_add(1, Ordering::Relaxed);
            Self(v, live.clone(), trip.clone())
        }
    }
    impl Clone for Fragile {
        fn clone(&self) -> Self {
            Trip::tick(&self.2.clones, "Clone");
            Self::new(self.0, &self.1, &self.2)
        }
    }
    impl Drop for Fragile {
        fn drop(&mut self) {
            self.1.fetch_sub(1, Ordering::Relaxed);
        }
    }
    impl PartialEq for Fragile {
        fn eq(&self, o: &Self) -> bool {
            self.0 == o.0
        }
    }
    impl Eq for Fragile {}
    impl PartialOrd for Fragile {
        fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for Fragile {
        fn cmp(&self, o: &Self) -> std::cmp::Ordering {
            Trip::tick(&self.2.cmps, "Ord");
            self.0.cmp(&o.0)
        }
    }

    /// Keeps the planted panics' messages out of the test output (other panics
    /// go to the previous hook).
    fn quiet_planted_panics() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            let prev = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                let planted = info
                    .payload()
                    .downcast_ref::<String>()
                    .is_some_and(|m| m.starts_with("planted panic"));
                if !planted {
                    prev(info);
                }
            }));
        });
    }

    /// A `Clone` (`clones == true`) or `Ord` that panics on its `n`-th call during
    /// a mix of inserts and delete_mins: nothing leaks (every value created is
    /// dropped once the heap and its domain drop), and the heap stays a heap.
    /// Returns whether the planted panic fired.
    fn panic_safe<R: Reclaimer>(domain: Arc<R>, clones: bool, n: i64) -> bool {
        quiet_planted_panics();
        let live = std::sync::Arc::new(AtomicI64::new(0));
        let trip = std::sync::Arc::new(Trip::default());
        let mut fired = false;
        {
            let h = HerlihySkewHeap::with_domain(domain.clone());
            let mut local = R::register(&domain);
            for v in [5, 3, 8, 1, 9, 2] {
                h.insert(&mut local, Fragile::new(v, &live, &trip));
            }
            let c = if clones { &trip.clones } else { &trip.cmps };
            c.store(n, Ordering::Relaxed);
            for v in [4, 0, 7, 6] {
                let ins = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    h.insert(&mut local, Fragile::new(v, &live, &trip))
                }));
                let del = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    drop(h.delete_min(&mut local))
                }));
                fired |= ins.is_err() || del.is_err();
            }
            c.store(0, Ordering::Relaxed);
            let rest: Vec<u32> = std::iter::from_fn(|| h.delete_min(&mut local))
                .map(|f| f.0)
                .collect();
            assert!(
                rest.windows(2).all(|w| w[0] <= w[1]),
                "still a heap: {rest:?}"
            );
            local.quiescent();
        }
        drop(domain);
        assert_eq!(
            live.load(Ordering::Relaxed),
            0,
            "{}: values leaked after a panic in {} (call {n})",
            R::NAME,
            if clones { "Clone" } else { "Ord" }
        );
        fired
    }

    fn panic_safe_every_call<R: Reclaimer>(fresh: impl Fn() -> Arc<R>) {
        for clones in [true, false] {
            let mut n = 1;
            // Until the planted panic no longer fires (its call is past the mix).
            while panic_safe(fresh(), clones, n) {
                n += if cfg!(miri) { 3 } else { 1 };
            }
            assert!(n > 2, "the mix makes several calls");
        }
    }

    #[test]
    fn panicking_clone_or_ord_leaks_nothing() {
        panic_safe_every_call(|| Arc::new(Ebr::with_advance_every(1).unwrap()));
        panic_safe_every_call(|| Arc::new(Qsbr::new()));
        panic_safe_every_call(|| Arc::new(HazardPointers::with_threshold(1, 1).unwrap()));
        panic_safe_every_call(|| Arc::new(Leak::new()));
    }

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
            h.insert(&mut b, Dropped(v, drops.clone()));
        }
        let mut a = HazardPointers::register(&domain);
        let mut ga = a.enter();
        let held = ga.protect(0, &h.current);
        // Replaced before `held` was current: freed already, or by the next scan.
        b.scan();
        let before = drops.load(Ordering::Relaxed);
        let mut out = Vec::new();
        for v in [4, 6] {
            out.extend(h.delete_min(&mut b));
            h.insert(&mut b, Dropped(v, drops.clone()));
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

    #[test]
    fn concurrent_inserts_and_deletes_conserve_values() {
        let (threads, per) = if cfg!(miri) { (2u64, 8u64) } else { (4, 2_000) };
        let q: HerlihySkewHeap<u64> = HerlihySkewHeap::new();
        let mut all: Vec<u64> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    let q = &q;
                    sc.spawn(move || {
                        let mut h = q.handle();
                        let mut got = Vec::new();
                        for i in 0..per {
                            h.insert(t + threads * ((i * 7919) % per));
                            if i % 2 == 1 {
                                got.extend(h.delete_min());
                            }
                        }
                        got
                    })
                })
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let mut h = q.handle();
        let rest: Vec<u64> = std::iter::from_fn(|| h.delete_min()).collect();
        assert!(rest.windows(2).all(|w| w[0] <= w[1]), "drained in order");
        all.extend(rest);
        all.sort_unstable();
        let mut want: Vec<u64> = (0..threads)
            .flat_map(|t| (0..per).map(move |i| t + threads * ((i * 7919) % per)))
            .collect();
        want.sort_unstable();
        assert_eq!(all, want);
    }

    #[test]
    fn long_paths_do_not_overflow() {
        // Decreasing inserts build a left spine; the locked heap's drop and merge
        // are iterative.
        let n = if cfg!(miri) { 200 } else { 200_000 };
        let h: LockedSkewHeap<TasB, u32> = LockedSkewHeap::new();
        for v in (0..n).rev() {
            h.insert(v);
        }
        assert_eq!(h.delete_min(), Some(0));
        assert_eq!(h.len(), n as usize - 1);
    }

    #[test]
    fn debug_says_what_it_is() {
        let h: LockedSkewHeap<TasB, u8> = LockedSkewHeap::default();
        h.insert(3);
        assert_eq!(format!("{h:?}"), "LockedSkewHeap { len: 1 }");
        let h: HerlihySkewHeap<u8> = HerlihySkewHeap::default();
        assert_eq!(
            format!("{h:?}"),
            "HerlihySkewHeap { reclaimer: \"EBR\", .. }"
        );
        assert!(format!("{:?}", h.handle()).starts_with("HerlihySkewHeapHandle"));
    }
}
