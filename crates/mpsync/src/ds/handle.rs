//! The one handle type of the non-blocking structures: a thread's registration
//! with a structure's reclamation domain, and Hart's automatic quiescent states.
//!
//! Every non-blocking structure ([`MsQueue`],
//! [`PljQueue`], [`TreiberStack`],
//! [`HerlihyStack`], [`HerlihySkewHeap`])
//! takes the caller's registration ([`Local`]) explicitly in its operations. A
//! [`Handle`] holds one for a thread, passes it to each operation, and announces
//! a quiescent state every [`QUIESCENT_EVERY`](super::lf::QUIESCENT_EVERY)
//! operations (Hart's test loop: needed by QSBR, harmless for the other
//! schemes). The structures' own handle names (`MsQueueHandle`, …) are aliases
//! of `Handle<'_, TheStructure>`; each structure implements its handle trait
//! ([`QueueHandle`](super::QueueHandle), …) for its `Handle` with
//! [`Handle::op`].
//!
//! ```
//! use mpsync::ds::handle::Handle;
//! use mpsync::ds::ms_queue::MsQueue;
//! use mpsync::ds::QueueHandle;
//! use mpsync::reclaim::Qsbr;
//!
//! let q: MsQueue<u32, Qsbr> = MsQueue::new();
//! let mut h: Handle<'_, MsQueue<u32, Qsbr>> = q.handle();
//! h.enqueue(7);
//! // Any explicit-registration operation, counted like the trait's.
//! assert!(!h.op(|q, local| q.is_empty(local)));
//! assert_eq!(h.dequeue(), Some(7));
//! ```

#[cfg(not(loom))]
use std::cell::{RefCell, RefMut};
use std::fmt;
#[cfg(not(loom))]
use std::hash::{BuildHasher, Hash};

#[cfg(not(loom))]
use lock_api::RawMutex;

use super::lf::AutoQuiescent;
#[cfg(not(loom))]
use super::{
    alloc::NodeAlloc,
    cr_hash::{Change, CrHashMap},
    elimination::EliminationStack,
    hash::{FastReadHashMap, LfHashMap},
    heap::HerlihySkewHeap,
    lscq::LscqQueue,
    map::RegisteredMap,
    ms_queue::MsQueue,
    plj_queue::PljQueue,
    stack::HerlihyStack,
    treiber::TreiberStack,
};
use crate::reclaim::Reclaimer;
#[cfg(not(loom))]
use crate::reclaim::{Local, ProtectsReachable};
use crate::sync::Arc;

/// A structure whose operations take the calling thread's registration with its
/// reclamation domain explicitly.
pub trait Registered {
    /// The reclamation scheme.
    type R: Reclaimer;
    /// The domain threads register with.
    fn domain(&self) -> &Arc<Self::R>;
}

/// One thread's access to a [`Registered`] structure `S`: its registration with
/// `S`'s domain (left when the handle drops) and a quiescent state every 100
/// operations.
pub struct Handle<'a, S: Registered> {
    ds: &'a S,
    local: <S::R as Reclaimer>::Local,
    auto: AutoQuiescent,
}

impl<'a, S: Registered> Handle<'a, S> {
    /// Registers the calling thread with `ds`'s domain.
    pub fn new(ds: &'a S) -> Self {
        Self {
            ds,
            local: <S::R as Reclaimer>::register(ds.domain()),
            auto: AutoQuiescent::new(),
        }
    }

    /// The structure.
    pub fn structure(&self) -> &'a S {
        self.ds
    }

    /// The thread's registration (for the structure's explicit-`local` methods).
    pub fn local(&mut self) -> &mut <S::R as Reclaimer>::Local {
        &mut self.local
    }

    /// Runs one operation `f` with the registration, then counts it (every
    /// 100th, a quiescent state: `f` must not return a reference into a node).
    #[inline]
    pub fn op<T>(&mut self, f: impl FnOnce(&'a S, &mut <S::R as Reclaimer>::Local) -> T) -> T {
        let r = f(self.ds, &mut self.local);
        self.auto.tick(&mut self.local);
        r
    }

    /// Announces a quiescent state now (and restarts the count).
    pub fn quiescent_now(&mut self) {
        self.auto.now(&mut self.local);
    }
}

impl<S: Registered + fmt::Debug> fmt::Debug for Handle<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("structure", self.ds)
            .field("auto", &self.auto)
            .finish_non_exhaustive()
    }
}

/// A structure whose operations take `&self` and nothing else: each thread's
/// registration with the structure's domain is made on its first operation and
/// cached (per structure, per thread, the way `crossbeam_epoch::pin()` caches
/// its participant), so `queue.enqueue(x)` and `map.insert(k, v)` just work.
///
/// After every operation the cached registration goes offline
/// ([`Local::park`]): under QSBR an idle thread, or one that has exited, never
/// holds reclamation up; every 100 operations it also announces a quiescent
/// state, as a [`Handle`] does. The registrations are dropped (leaving the
/// domain) with the `Auto`; those of exited threads are reused by new threads.
/// An operation started from inside another on the same thread (a value's `Drop`
/// run by reclamation, say) uses a fresh registration of its own. A panic out
/// of an operation (a value's `Drop`, `Clone` or `Ord`) leaves the cached
/// registration parked and consistent: the thread's next operation, and every
/// other thread's reclamation, go on as before. The explicit
/// API stays underneath ([`inner`](Self::inner)): a [`Handle`] saves the cache
/// lookup (a thread-id read and an index) and the park per operation.
///
/// ```
/// use mpsync::ds::handle::Auto;
/// use mpsync::ds::hash::LfHashMap;
/// use mpsync::ds::ms_queue::MsQueue;
/// use mpsync::reclaim::{HazardPointers, Qsbr};
///
/// let q: Auto<MsQueue<u32, Qsbr>> = Auto::wrap(MsQueue::new());
/// std::thread::scope(|s| {
///     for t in 0..4 {
///         let q = &q;
///         s.spawn(move || q.enqueue(t));
///     }
/// });
/// let mut got: Vec<u32> = std::iter::from_fn(|| q.dequeue()).collect();
/// got.sort();
/// assert_eq!(got, [0, 1, 2, 3]);
///
/// let m: Auto<LfHashMap<u64, String, HazardPointers>> = Auto::wrap(LfHashMap::new());
/// assert!(m.try_insert(1, "one".into()));
/// assert_eq!(m.get(&1).as_deref(), Some("one"));
/// assert!(m.contains_key(&1));
/// assert_eq!(m.remove(&1).as_deref(), Some("one"));
/// ```
#[cfg(not(loom))]
pub struct Auto<S: Registered> {
    // Declared first, so dropped first: the registrations leave (and free what
    // they can) while the structure still exists.
    cache: thread_local::ThreadLocal<RefCell<Cached<S::R>>>,
    ds: S,
}

/// A thread's cached registration and its operation count.
#[cfg(not(loom))]
struct Cached<R: Reclaimer> {
    local: R::Local,
    auto: AutoQuiescent,
}

/// One operation's use of a cached registration: parks it when dropped, also
/// when the operation panics.
#[cfg(not(loom))]
struct Op<'a, R: Reclaimer>(RefMut<'a, Cached<R>>);

#[cfg(not(loom))]
impl<R: Reclaimer> Drop for Op<'_, R> {
    fn drop(&mut self) {
        self.0.local.park();
    }
}

#[cfg(not(loom))]
impl<S: Registered> Auto<S> {
    /// Wraps `ds`; no thread is registered yet.
    pub fn wrap(ds: S) -> Self {
        Self {
            cache: thread_local::ThreadLocal::new(),
            ds,
        }
    }

    /// The structure, for its explicit-registration API.
    pub fn inner(&self) -> &S {
        &self.ds
    }

    /// The structure back; the cached registrations leave its domain.
    pub fn into_inner(self) -> S {
        let Self { cache, ds } = self;
        drop(cache);
        ds
    }

    /// Runs `f` with the calling thread's cached registration (made on first
    /// use), counts the operation and parks the registration (see the type's
    /// doc). `f` must not return a reference into a node.
    pub fn with<T>(&self, f: impl FnOnce(&S, &mut <S::R as Reclaimer>::Local) -> T) -> T {
        let cell = self.cache.get_or(|| {
            RefCell::new(Cached {
                local: <S::R as Reclaimer>::register(self.ds.domain()),
                auto: AutoQuiescent::new(),
            })
        });
        match cell.try_borrow_mut() {
            Ok(c) => {
                let mut op = Op(c);
                let c = &mut *op.0;
                let r = f(&self.ds, &mut c.local);
                c.auto.tick(&mut c.local);
                r // `op` parks the registration
            }
            // Re-entered on this thread (e.g. from a `Drop` run by reclamation
            // inside an operation): the cached registration is in use.
            Err(_) => {
                let mut local = <S::R as Reclaimer>::register(self.ds.domain());
                f(&self.ds, &mut local)
            }
        }
    }
}

#[cfg(not(loom))]
impl<S: Registered + Default> Auto<S> {
    /// An empty structure: `mpsync::Queue::new()`, `mpsync::Stack::new()`.
    ///
    /// ```
    /// let q = mpsync::Queue::new();
    /// q.enqueue(1);
    /// assert_eq!(q.dequeue(), Some(1));
    /// ```
    pub fn new() -> Self {
        Self::wrap(S::default())
    }
}

#[cfg(not(loom))]
impl<S: Registered + Default> Default for Auto<S> {
    /// [`Auto::new`].
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(not(loom))]
impl<S: Registered> From<S> for Auto<S> {
    fn from(ds: S) -> Self {
        Self::wrap(ds)
    }
}

#[cfg(not(loom))]
impl<S: Registered + fmt::Debug> fmt::Debug for Auto<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Auto")
            .field("structure", &self.ds)
            .finish_non_exhaustive()
    }
}

/// The handle-free operations of one structure: `enqueue`/`dequeue`-like pairs.
macro_rules! auto_ops {
    ($(#[$m:meta])* [$($g:tt)*] $ty:ty, $put:ident, $take:ident, $what:literal) => {
        #[cfg(not(loom))]
        impl<$($g)*> Auto<$ty> {
            #[doc = concat!("As the structure's `", stringify!($put), "`, with this thread's cached registration (", $what, ").")]
            pub fn $put(&self, value: T) {
                self.with(|s, l| s.$put(l, value))
            }

            #[doc = concat!("As the structure's `", stringify!($take), "`, with this thread's cached registration (", $what, ").")]
            pub fn $take(&self) -> Option<T> {
                self.with(|s, l| s.$take(l))
            }
        }
    };
}

auto_ops!([T, R: Reclaimer, A: NodeAlloc] MsQueue<T, R, A>, enqueue, dequeue, "FIFO");
auto_ops!([T, R: Reclaimer, A: NodeAlloc] PljQueue<T, R, A>, enqueue, dequeue, "FIFO");
auto_ops!([T, R: Reclaimer] LscqQueue<T, R>, enqueue, dequeue, "FIFO");
auto_ops!([T, R: Reclaimer, A: NodeAlloc] TreiberStack<T, R, A>, push, pop, "LIFO");
auto_ops!([T, R: Reclaimer, A: NodeAlloc] EliminationStack<T, R, A>, push, pop, "LIFO");
auto_ops!([T: Send + 'static, R: Reclaimer] HerlihyStack<T, R>, push, pop, "LIFO");
auto_ops!([T: Ord + Clone + Send + Sync + 'static, R: Reclaimer] HerlihySkewHeap<T, R>, insert, delete_min, "smallest first");

/// `is_empty` and `len` of the handle-free queues and stacks.
macro_rules! auto_len {
    ([$($g:tt)*] $ty:ty, $empty:expr) => {
        #[cfg(not(loom))]
        impl<$($g)*> Auto<$ty> {
            /// Whether the structure is empty at some moment during the call.
            pub fn is_empty(&self) -> bool {
                self.with(|s, l| $empty(s, l))
            }
        }

        #[cfg(not(loom))]
        impl<T, R: ProtectsReachable, A: NodeAlloc> Auto<$ty> {
            /// The number of values: a walk, O(n); exact when no thread
            /// changes the structure meanwhile.
            pub fn len(&self) -> usize {
                self.with(|s, l| s.len(l))
            }
        }
    };
}

auto_len!([T, R: Reclaimer, A: NodeAlloc] MsQueue<T, R, A>, |s: &MsQueue<T, R, A>, l| s.is_empty(l));
auto_len!([T, R: Reclaimer, A: NodeAlloc] TreiberStack<T, R, A>, |s: &TreiberStack<T, R, A>, _| s.is_empty());
auto_len!([T, R: Reclaimer, A: NodeAlloc] EliminationStack<T, R, A>, |s: &EliminationStack<T, R, A>, _| s.is_empty());

#[cfg(not(loom))]
impl<T, R: ProtectsReachable> Auto<LscqQueue<T, R>> {
    /// The number of values (a walk of every segment's ring, O(cells); exact
    /// when no thread changes the queue meanwhile).
    pub fn len(&self) -> usize {
        self.with(|s, l| s.len(l))
    }

    /// Whether [`len`](Self::len) is 0 (as costly).
    pub fn is_empty(&self) -> bool {
        self.with(|s, l| s.is_empty(l))
    }
}

#[cfg(not(loom))]
impl<T, R: Reclaimer, A: NodeAlloc> Auto<PljQueue<T, R, A>> {
    /// Whether the queue is empty at some moment during the call.
    pub fn is_empty(&self) -> bool {
        self.with(|s, l| s.is_empty(l))
    }
}

#[cfg(not(loom))]
impl<K, V, R, A, S> Registered for LfHashMap<K, V, R, A, S>
where
    K: Hash + Ord + Send + Sync,
    V: Send + Sync,
    R: Reclaimer,
    A: NodeAlloc,
    S: BuildHasher + Sync,
{
    type R = R;
    fn domain(&self) -> &Arc<R> {
        LfHashMap::domain(self)
    }
}

#[cfg(not(loom))]
impl<K, V, R, A, S> Registered for FastReadHashMap<K, V, R, A, S>
where
    K: Hash + Ord + Send + Sync,
    V: Send + Sync,
    R: ProtectsReachable,
    A: NodeAlloc,
    S: BuildHasher + Sync,
{
    type R = R;
    fn domain(&self) -> &Arc<R> {
        FastReadHashMap::domain(self)
    }
}

#[cfg(not(loom))]
impl<K, V, L, R, A, S> Registered for CrHashMap<K, V, L, R, A, S>
where
    K: Hash + Eq + Send + Sync,
    V: Send + Sync,
    L: RawMutex + Send + Sync,
    R: Reclaimer,
    A: NodeAlloc,
    S: BuildHasher + Sync,
{
    type R = R;
    fn domain(&self) -> &Arc<R> {
        CrHashMap::domain(self)
    }
}

/// The handle-free operations of a map ([`MapHandle`](super::map::MapHandle)'s,
/// and the walks). `$len` and `$iter` say how the table counts and walks.
macro_rules! auto_map_ops {
    ([$($g:tt)*] $ty:ty, len: $len:expr, iter: $iter:expr, where $($w:tt)*) => {
        #[cfg(not(loom))]
        impl<$($g)*> Auto<$ty> where $($w)* {
            /// Inserts `key → value` if `key` is absent; `false` (and `value`
            /// dropped) if it was present, whose value stays.
            #[must_use = "`false` means the key was present and `value` was not stored"]
            pub fn try_insert(&self, key: K, value: V) -> bool {
                self.with(|m, l| m.insert_in(l, key, value))
            }

            /// A clone of `key`'s value, or `None`.
            #[must_use]
            pub fn get(&self, key: &K) -> Option<V> {
                self.with(|m, l| m.get_in(l, key))
            }

            /// Removes `key`; a clone of its value, or `None`.
            pub fn remove(&self, key: &K) -> Option<V> {
                self.with(|m, l| m.remove_in(l, key))
            }

            /// Whether `key` is present.
            #[must_use]
            pub fn contains_key(&self, key: &K) -> bool {
                self.with(|m, l| m.contains_key_in(l, key))
            }

            /// The number of entries (exact when no thread updates the map
            /// meanwhile; see the table's `len` for its cost).
            #[must_use]
            pub fn len(&self) -> usize {
                self.with(|m, l| $len(m, l))
            }

            /// Whether [`len`](Self::len) is 0.
            #[must_use]
            pub fn is_empty(&self) -> bool {
                self.len() == 0
            }

            /// Clones of the entries, collected by one weakly consistent walk
            /// (each key present throughout is yielded once, none twice; see
            /// the table's `iter`), handed out after the walk: no guard is
            /// held while the iterator lives.
            pub fn iter(&self) -> std::vec::IntoIter<(K, V)> {
                self.with(|m, l| $iter(m, l))
            }
        }
    };
}

auto_map_ops!([K, V, R, A, S] LfHashMap<K, V, R, A, S>,
    len: |m: &LfHashMap<K, V, R, A, S>, l| m.len(l),
    iter: |m: &LfHashMap<K, V, R, A, S>, l| m.iter(l).collect::<Vec<_>>().into_iter(),
    where K: Hash + Ord + Send + Sync + Clone, V: Send + Sync + Clone, R: Reclaimer, A: NodeAlloc,
    S: BuildHasher + Sync);
auto_map_ops!([K, V, R, A, S] FastReadHashMap<K, V, R, A, S>,
    len: |m: &FastReadHashMap<K, V, R, A, S>, l| m.as_lf().len(l),
    iter: |m: &FastReadHashMap<K, V, R, A, S>, l| m.iter(l).collect::<Vec<_>>().into_iter(),
    where K: Hash + Ord + Send + Sync + Clone, V: Send + Sync + Clone, R: ProtectsReachable,
    A: NodeAlloc, S: BuildHasher + Sync);
auto_map_ops!([K, V, L, R, A, S] CrHashMap<K, V, L, R, A, S>,
    len: |m: &CrHashMap<K, V, L, R, A, S>, _| m.len_hint().unwrap_or_else(|| m.len()),
    iter: |m: &CrHashMap<K, V, L, R, A, S>, l| m.iter(l).collect::<Vec<_>>().into_iter(),
    where K: Hash + Eq + Send + Sync + Clone, V: Send + Sync + Clone, L: RawMutex + Send + Sync,
    R: Reclaimer, A: NodeAlloc, S: BuildHasher + Sync);

#[cfg(not(loom))]
impl<K, V, L, R, A, S> Auto<CrHashMap<K, V, L, R, A, S>>
where
    K: Hash + Eq + Send + Sync + Clone,
    V: Send + Sync + Clone,
    L: RawMutex + Send + Sync,
    R: Reclaimer,
    A: NodeAlloc,
    S: BuildHasher + Sync,
{
    /// Sets `key` to `value`; a clone of the value it replaced, or `None`
    /// (atomic: [`CrHashMap::compute`]).
    pub fn insert(&self, key: K, value: V) -> Option<V> {
        let mut value = Some(value); // dropped after the unlock if a clone panics
        self.with(|m, l| {
            m.compute_owned(l, key, |old| {
                let prev = old.cloned();
                (Change::Set(value.take().expect("once")), prev)
            })
        })
    }

    /// As [`CrHashMap::compute`].
    pub fn compute<T>(&self, key: K, f: impl FnOnce(Option<&V>) -> (Change<V>, T)) -> T {
        self.with(|m, l| m.compute_owned(l, key, f))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::ds::StackHandle;
    use crate::lock::TasB;
    use crate::reclaim::{Ebr, HazardPointers, Qsbr};

    #[test]
    fn every_structure_works_without_a_handle() {
        let q: Auto<MsQueue<u32, HazardPointers>> = Auto::wrap(MsQueue::new());
        q.enqueue(1);
        q.enqueue(2);
        assert_eq!(
            (q.dequeue(), q.dequeue(), q.dequeue()),
            (Some(1), Some(2), None)
        );
        let q: Auto<PljQueue<u32, Qsbr>> = Auto::wrap(PljQueue::new());
        q.enqueue(3);
        assert_eq!(q.dequeue(), Some(3));
        let s: Auto<TreiberStack<u32, Ebr>> = Auto::wrap(TreiberStack::new());
        s.push(1);
        s.push(2);
        assert_eq!((s.pop(), s.pop(), s.pop()), (Some(2), Some(1), None));
        let s: Auto<HerlihyStack<u32, Qsbr>> =
            Auto::wrap(HerlihyStack::with_domain(Arc::new(Qsbr::new())));
        s.push(4);
        assert_eq!(s.pop(), Some(4));
        let h: Auto<HerlihySkewHeap<u32, Ebr>> = Auto::wrap(HerlihySkewHeap::new());
        for v in [5, 1, 3] {
            h.insert(v);
        }
        assert_eq!((h.delete_min(), h.delete_min()), (Some(1), Some(3)));
        let m: Auto<CrHashMap<u64, u64, TasB, Qsbr>> = Auto::wrap(CrHashMap::new());
        assert_eq!(m.insert(1, 10), None);
        assert!(!m.try_insert(1, 11), "try_insert does not replace");
        assert_eq!(m.insert(1, 12), Some(10), "insert does");
        assert_eq!(m.compute(1, |v| (Change::Set(v.unwrap() - 2), ())), ());
        assert_eq!(m.get(&1), Some(10));
        assert_eq!((m.len(), m.is_empty(), m.iter().count()), (1, false, 1));
        assert_eq!(m.remove(&1), Some(10));
        assert!(!m.contains_key(&1));
        let m: Auto<FastReadHashMap<u64, u64, Ebr>> = Auto::wrap(FastReadHashMap::new());
        assert!(m.try_insert(2, 20));
        assert_eq!(m.with(|m, l| m.as_lf().len(l)), 1);
        assert_eq!((m.len(), m.iter().collect::<Vec<_>>()), (1, vec![(2, 20)]));
        let lf: Auto<LfHashMap<u64, u64, HazardPointers>> = Auto::default();
        assert!(lf.try_insert(3, 30) && lf.contains_key(&3) && !lf.is_empty());
        assert_eq!((lf.len(), lf.iter().next()), (1, Some((3, 30))));
        assert!(format!("{m:?}").starts_with("Auto { structure: FastReadHashMap"));
        // One registration per thread, made once and reused.
        assert_eq!(m.inner().domain().records(), 1);
    }

    /// The README's queue pattern, with one thread registered and idle while
    /// another runs `n` enqueue/dequeue pairs: through the default `Queue`
    /// (`Auto` over EBR) almost nothing stays pending; through an explicit
    /// QSBR handle held by the idle thread, everything does (the trap the
    /// `ds` docs describe) until that handle is dropped.
    #[test]
    fn an_idle_thread_holds_nothing_back_in_the_default_queue_but_its_qsbr_handle_holds_everything()
    {
        let n: u64 = if cfg!(miri) { 300 } else { 20_000 };
        /// `idle` runs on a thread of its own and calls its second argument
        /// to sit idle (registered) while `work` runs.
        fn run<Q: Sync>(q: &Q, idle: impl FnOnce(&Q, &dyn Fn()) + Send, work: impl Fn(&Q)) {
            let (ready, go) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
            std::thread::scope(|s| {
                s.spawn(|| {
                    idle(q, &|| {
                        ready.wait();
                        go.wait();
                    })
                });
                ready.wait();
                work(q);
                go.wait();
            });
        }
        let q: crate::ds::Queue<u64> = crate::ds::Queue::default();
        let pending = std::cell::Cell::new(0);
        run(
            &q,
            |q, sit| {
                q.enqueue(0);
                sit();
            },
            |q| {
                for i in 0..n {
                    q.enqueue(i);
                    assert!(q.dequeue().is_some());
                }
                pending.set(q.inner().domain().stats().pending);
            },
        );
        assert!(
            pending.get() < 1_000,
            "EBR/Auto: {} of {n} nodes pending with an idle thread",
            pending.get()
        );

        let q: MsQueue<u64, Qsbr> = MsQueue::new();
        run(
            &q,
            |q, sit| {
                let mut h = q.handle();
                crate::ds::QueueHandle::enqueue(&mut h, 0);
                sit(); // idle, holding its handle
            },
            |q| {
                let mut h = q.handle();
                for i in 0..n {
                    crate::ds::QueueHandle::enqueue(&mut h, i);
                    assert!(crate::ds::QueueHandle::dequeue(&mut h).is_some());
                }
                pending.set(q.domain().stats().pending);
            },
        );
        assert!(
            pending.get() >= n,
            "QSBR with an idle handle: {} of {n} pending",
            pending.get()
        );
    }

    #[test]
    fn a_nested_operation_uses_a_registration_of_its_own() {
        let q: Auto<MsQueue<u32, Ebr>> = Auto::wrap(MsQueue::new());
        q.with(|_, _| q.enqueue(1));
        assert_eq!(q.dequeue(), Some(1));
        assert_eq!(
            q.inner().domain().records(),
            2,
            "the cached one and the nested one"
        );
    }

    /// The cached registration of a thread that has stopped using the structure
    /// (here: idle, waiting until the main thread is done) must not hold QSBR
    /// up: it is parked after each operation.
    #[test]
    fn an_idle_cached_registration_does_not_hold_qsbr_up() {
        let s: Auto<TreiberStack<u64, Qsbr>> = Auto::wrap(TreiberStack::new());
        let d = s.inner().domain().clone();
        // This thread's registration first (so the other thread's is its own).
        s.push(1);
        assert_eq!(s.pop(), Some(1));
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|sc| {
            // Owned here, so a failing assertion below drops it and the idle
            // thread stops waiting (no deadlock on failure).
            let go_tx = go_tx;
            let s = &s;
            sc.spawn(move || {
                s.push(0);
                done_tx.send(()).unwrap();
                let _ = go_rx.recv(); // idle, registered, until told (or failed)
            });
            done_rx.recv().unwrap();
            assert_eq!(d.records(), 2);
            let n = if cfg!(miri) { 300 } else { 3_000 };
            for i in 0..n {
                s.push(i);
                assert!(s.pop().is_some());
            }
            let st = d.stats();
            assert!(st.retired >= n, "{st:?}");
            assert!(
                st.freed > 0,
                "the idle thread's registration held QSBR up: {st:?}"
            );
            go_tx.send(()).unwrap();
        });
        let mut h = s.inner().handle();
        assert_eq!(h.pop(), Some(0));
        drop(h);
        let inner = s.into_inner();
        drop(inner);
        let st = d.stats();
        assert_eq!(st.freed + st.pending, st.retired, "{st:?}");
        drop(d); // the last reference: frees the rest (Miri: no leak)
    }
}
