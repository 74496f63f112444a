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
//!   when it fails. Lock-free (as the system allocator is: nodes and versions
//!   are `Box`es).
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

use super::{ConcurrentPriorityQueue, PriorityQueueHandle};
use crate::util::unwind::each;

/// An ephemeral skew heap (Sleator & Tarjan), merged top-down without recursion.
///
/// A merge is planned by comparisons alone, then carried out: a `T::Ord` that
/// panics while planning leaves the heap as it was (the operation's own value
/// is dropped); carrying out compares nothing, so cannot panic.
struct SkewHeap<T> {
    root: Link<T>,
    len: usize,
    /// The plan of the merge in progress (reused): whether each step of the
    /// top-down merge takes the second heap's root.
    steps: Vec<bool>,
}

type Link<T> = Option<Box<SkewNode<T>>>;

struct SkewNode<T> {
    value: T,
    left: Link<T>,
    right: Link<T>,
}

impl<T> SkewHeap<T> {
    const fn new() -> Self {
        Self {
            root: None,
            len: 0,
            steps: Vec::new(),
        }
    }

    /// Top-down skew merge as `plan` decided it: take the smaller root (the
    /// plan's), its old left becomes its right, and its left is the merge of its
    /// old right with the other heap. Compares nothing.
    fn apply(steps: &[bool], mut a: Link<T>, mut b: Link<T>) -> Link<T> {
        let mut result: Link<T> = None;
        let mut hole = &mut result;
        for &take_b in steps {
            let (Some(x), Some(y)) = (a.take(), b.take()) else {
                unreachable!("a merge plan runs while both heaps have a root");
            };
            let (mut s, other) = if take_b { (y, x) } else { (x, y) };
            let r = s.right.take();
            s.right = s.left.take();
            a = r;
            b = Some(other);
            hole = &mut hole.insert(s).left;
        }
        *hole = a.or(b);
        result
    }
}

impl<T: Ord> SkewHeap<T> {
    /// Plans the merge of `a` and `b` into `steps`, by comparisons only (the
    /// steps `apply` takes, read without changing anything).
    fn plan<'n>(
        steps: &mut Vec<bool>,
        mut a: Option<&'n SkewNode<T>>,
        mut b: Option<&'n SkewNode<T>>,
    ) {
        steps.clear();
        while let (Some(x), Some(y)) = (a, b) {
            let take_b = y.value < x.value;
            steps.push(take_b);
            let (s, other) = if take_b { (y, x) } else { (x, y) };
            a = s.right.as_deref();
            b = Some(other);
        }
    }

    fn insert(&mut self, value: T) {
        let single = Box::new(SkewNode {
            value,
            left: None,
            right: None,
        });
        Self::plan(&mut self.steps, self.root.as_deref(), Some(&single));
        self.root = Self::apply(&self.steps, self.root.take(), Some(single));
        self.len += 1;
    }

    fn delete_min(&mut self) -> Option<T> {
        let top = self.root.as_deref()?;
        Self::plan(&mut self.steps, top.left.as_deref(), top.right.as_deref());
        let top = self.root.take()?;
        let SkewNode { value, left, right } = *top;
        self.root = Self::apply(&self.steps, left, right);
        self.len -= 1;
        Some(value)
    }
}

impl<T> Drop for SkewHeap<T> {
    /// Iteratively, so a long path cannot overflow the stack; a value whose
    /// `Drop` panics stops none of the others (all are dropped, then the first
    /// panic goes on).
    fn drop(&mut self) {
        let mut todo: Vec<Box<SkewNode<T>>> = self.root.take().into_iter().collect();
        let nodes = std::iter::from_fn(|| {
            let mut n = todo.pop()?;
            todo.extend(n.left.take());
            todo.extend(n.right.take());
            Some(n)
        });
        each(nodes, drop).resume();
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
            heap: lock_api::Mutex::new(SkewHeap::new()),
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

pub use super::herlihy_heap::{HerlihySkewHeap, HerlihySkewHeapHandle};

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::lock::{TasB, TasBNp};
    use crate::reclaim::{Ebr, Local, Reclaimer};
    use crate::reclaim::{HazardPointers, Leak, Qsbr};
    use crate::sync::{Arc, Ordering};
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
                h.insert(&local, Counted::new(v, &live));
            }
            let a = h.delete_min(&local).expect("non-empty");
            let b = h.delete_min(&local).expect("non-empty");
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
                h.insert(&local, Fragile::new(v, &live, &trip));
            }
            let c = if clones { &trip.clones } else { &trip.cmps };
            c.store(n, Ordering::Relaxed);
            for v in [4, 0, 7, 6] {
                let ins = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    h.insert(&local, Fragile::new(v, &live, &trip))
                }));
                let del = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    drop(h.delete_min(&local))
                }));
                fired |= ins.is_err() || del.is_err();
            }
            c.store(0, Ordering::Relaxed);
            let rest: Vec<u32> = std::iter::from_fn(|| h.delete_min(&local))
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

    /// The locked heap: an `Ord` that panics on its `n`-th call during a mix of
    /// inserts and delete_mins makes that operation panic and nothing else —
    /// the heap keeps every other value (its `len` says how many, and that
    /// many drain in order), the lock is free, nothing leaks.
    #[test]
    fn locked_heap_survives_a_panicking_ord() {
        quiet_planted_panics();
        let mut n = 1;
        loop {
            let live = std::sync::Arc::new(AtomicI64::new(0));
            let trip = std::sync::Arc::new(Trip::default());
            let h: LockedSkewHeap<TasB, Fragile> = LockedSkewHeap::new();
            for v in [5, 3, 8, 1, 9, 2] {
                h.insert(Fragile::new(v, &live, &trip));
            }
            trip.cmps.store(n, Ordering::Relaxed);
            let (mut fired, mut inserted, mut removed) = (false, 0, 0);
            for v in [4, 0, 7, 6] {
                let f = Fragile::new(v, &live, &trip);
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.insert(f))) {
                    Ok(()) => inserted += 1,
                    Err(_) => fired = true,
                }
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.delete_min())) {
                    Ok(v) => removed += usize::from(v.is_some()),
                    Err(_) => fired = true,
                }
            }
            trip.cmps.store(0, Ordering::Relaxed);
            assert_eq!(h.len(), 6 + inserted - removed, "call {n}: len");
            let rest: Vec<u32> = std::iter::from_fn(|| h.delete_min()).map(|f| f.0).collect();
            assert_eq!(
                rest.len(),
                6 + inserted - removed,
                "call {n}: values lost to a panicking Ord: {rest:?}"
            );
            assert!(
                rest.windows(2).all(|w| w[0] <= w[1]),
                "still a heap: {rest:?}"
            );
            drop(h);
            assert_eq!(live.load(Ordering::Relaxed), 0, "call {n}: leaked");
            if !fired {
                break;
            }
            n += if cfg!(miri) { 3 } else { 1 };
        }
        assert!(n > 2, "the mix makes several comparisons");
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
        assert!(format!("{:?}", h.handle()).starts_with("Handle { structure: HerlihySkewHeap"));
    }
}
