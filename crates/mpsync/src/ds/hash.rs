//! Hart's lock-free chaining hash table and its fast-read variant.
//!
//! Michael, SPAA 2002; Hart, papers/002_… §3.2 (Figure 3.8: a fixed array of
//! buckets, each a [Harris–Michael list](super::hm_list)) and §5.3.5 (Figure 5.16:
//! searches that ignore marks). Generic over the reclamation scheme `R` (hazard
//! pointers need 2 slots per thread: a list traversal's predecessor and current
//! node, hand over hand), the node allocator `A` and the hasher `S`.
//!
//! - [`LfHashMap`]: every operation searches with Michael's `Find`, which unlinks
//!   the deleted nodes it meets and restarts when its window breaks.
//! - [`FastReadHashMap`]: the same table whose `get` walks past marked nodes
//!   without helping or restarting. Only with schemes that protect every node
//!   reachable from a protected one ([`ProtectsReachable`]: QSBR, EBR, Leak);
//!   with hazard pointers it does not compile.
//!
//! The bucket count is fixed at construction (no resize): choose about the number
//! of keys expected. Both tables are insert-if-absent maps (see
//! [`map`](super::map)). Progress: every operation — `get`, `insert`,
//! `remove`, `contains_key`, and the walks `len`, `is_empty`, `for_each`,
//! `iter` — is lock-free: a thread stopped anywhere (a remover between marking
//! a node and unlinking it included: the others unlink it for it) never holds
//! another up. Uses `sched`: only named stall points.
//!
//! # Keys and values are `'static`
//!
//! A removed node is freed by the reclamation domain later — possibly after the
//! table is gone, since a registration or another table of the domain keeps the
//! domain alive — so its key and value cannot borrow anything:
//!
//! ```compile_fail,E0597
//! use mpsync::ds::hash::LfHashMap;
//! use mpsync::reclaim::{Ebr, Reclaimer};
//! use mpsync::sync::Arc;
//! use std::collections::hash_map::RandomState;
//!
//! let domain = Arc::new(Ebr::new());
//! let l = Ebr::register(&domain); // keeps the domain alive after the table
//! {
//!     let name = String::from("borrowed");
//!     let m: LfHashMap<u32, &str, Ebr> =
//!         LfHashMap::with_domain(8, domain.clone(), RandomState::new()).unwrap();
//!     m.insert(&l, 1, &name); // error: `name` does not live long enough ('static)
//!     m.remove(&l, &1); // its node is the domain's now, to be dropped later
//! }
//! ```
//!
//! # Your code inside an operation
//!
//! The tables take no lock, so what a key's or value's code does cannot
//! deadlock them:
//!
//! - **`Drop`** of a key or value runs when its node is freed: by the domain's
//!   reclamation, inside an operation on any structure of the domain, on any
//!   thread (EBR: as an operation starts; QSBR: at a quiescent state; hazard
//!   pointers: at a removal's scan), or when the table or the domain is
//!   dropped. It may do anything — operations on this table or another of its
//!   domain included — through [`Auto`](super::handle::Auto), a handle, or a
//!   registration of its own (one kept in a
//!   `thread_local!` too, even the one the running operation itself uses).
//! - **`Hash`** and **`Ord`** of keys, **`Clone`** of keys and values, the
//!   callback of [`for_each`](LfHashMap::for_each) and the code that consumes
//!   an [`iter`](LfHashMap::iter) run inside operations, holding no lock: they
//!   may call any operation of this or any table (a nested operation takes a
//!   guard of its own).
//! - A **panic** in any of them propagates out of the operation that ran it;
//!   the table stays consistent and usable: an insert, read or walk that
//!   panics has changed nothing, except that a `remove` whose `V::clone`
//!   panics has removed the key (the panic comes after its linearization
//!   point). A key whose drop panics still has its value dropped and its node
//!   freed.
//!
//! ```
//! use mpsync::ds::hash::{FastReadHashMap, LfHashMap};
//! use mpsync::reclaim::{HazardPointers, Qsbr, Reclaimer};
//!
//! let m: LfHashMap<u32, &str, HazardPointers> = LfHashMap::with_buckets(32).unwrap();
//! let local = HazardPointers::register(m.domain());
//! assert!(m.insert(&local, 7, "seven"));
//! assert_eq!(m.get(&local, &7), Some("seven"));
//! assert_eq!(m.len(&local), 1);
//! assert_eq!(m.remove(&local, &7), Some("seven"));
//! assert!(!m.contains_key(&local, &7));
//!
//! // Fast reads, over QSBR, through a handle (it announces quiescent states):
//! use mpsync::ds::map::{ConcurrentMap, MapHandle};
//! let f: FastReadHashMap<u32, u32, Qsbr> = FastReadHashMap::new();
//! let mut h = f.handle();
//! h.insert(1, 10);
//! assert_eq!(h.get(&1), Some(10));
//! ```

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::ptr;

use super::alloc::{NodeAlloc, SystemAlloc};
use super::hm_list::{self, Head, Node};
use super::lf::check_local;
use super::map::{ConcurrentMap, MapError, RegisteredHandle, RegisteredMap};
use crate::reclaim::{Ebr, Local, ProtectsReachable, Reclaimer};
use crate::sync::{Arc, AtomicPtr};

/// Buckets of [`LfHashMap::new`].
pub const DEFAULT_BUCKETS: usize = 1024;

/// Hart's lock-free chaining hash table over reclaimer `R` (see the
/// [module documentation](self)).
pub struct LfHashMap<K, V, R: Reclaimer = Ebr, A: NodeAlloc = SystemAlloc, S = RandomState> {
    /// Not padded: a table sized for its keys has many buckets, and a cache line
    /// per bucket would multiply its footprint by 16 (reads would miss in cache
    /// far more than updates of neighbouring buckets would contend).
    buckets: Box<[Head<K, V, R>]>,
    hasher: S,
    domain: Arc<R>,
    /// Owns `K`s and `V`s (drop check); `A` only names the allocator.
    _owns: PhantomData<(K, V, A)>,
}

// SAFETY: the table owns its keys and values; nodes are reached only through
// atomics and freed through the reclaimer (possibly on another thread), so
// sending the table moves `K`s and `V`s between threads: `Send` suffices.
unsafe impl<K: Send, V: Send, R: Reclaimer, A: NodeAlloc, S: Send> Send
    for LfHashMap<K, V, R, A, S>
{
}
// SAFETY: `&LfHashMap` lets any thread read keys and clone values concurrently
// (`Sync`) and drop them when it frees a node (`Send`).
unsafe impl<K: Send + Sync, V: Send + Sync, R: Reclaimer, A: NodeAlloc, S: Sync> Sync
    for LfHashMap<K, V, R, A, S>
{
}

impl<K: 'static, V: 'static, R: Reclaimer + Default, A: NodeAlloc, S: BuildHasher + Default>
    LfHashMap<K, V, R, A, S>
{
    /// An empty table of [`DEFAULT_BUCKETS`] buckets with a domain of its own.
    pub fn new() -> Self {
        Self::with_buckets(DEFAULT_BUCKETS).expect("the default is >= 1")
    }

    /// An empty table of `buckets` buckets (fixed) with a domain of its own.
    /// Errors if `buckets` is 0.
    pub fn with_buckets(buckets: usize) -> Result<Self, MapError> {
        Self::with_domain(buckets, Arc::new(R::default()), S::default())
    }
}

impl<K: 'static, V: 'static, R: Reclaimer + Default, A: NodeAlloc, S: BuildHasher + Default> Default
    for LfHashMap<K, V, R, A, S>
{
    fn default() -> Self {
        Self::new()
    }
}

impl<K: 'static, V: 'static, R: Reclaimer, A: NodeAlloc, S: BuildHasher> LfHashMap<K, V, R, A, S> {
    /// An empty table of `buckets` buckets whose retired nodes go to `domain`
    /// (with hazard pointers: at least 2 slots per thread). Errors if `buckets`
    /// is 0.
    pub fn with_domain(buckets: usize, domain: Arc<R>, hasher: S) -> Result<Self, MapError> {
        if buckets == 0 {
            return Err(MapError::ZeroBuckets);
        }
        Ok(Self {
            buckets: (0..buckets)
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect(),
            hasher,
            domain,
            _owns: PhantomData,
        })
    }
}

impl<K, V, R: Reclaimer, A: NodeAlloc, S> LfHashMap<K, V, R, A, S> {
    /// The reclamation domain (register threads with `R::register(m.domain())`).
    pub fn domain(&self) -> &Arc<R> {
        &self.domain
    }

    /// The number of buckets (fixed).
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }
}

impl<K, V, R, A, S> LfHashMap<K, V, R, A, S>
where
    K: Hash + Ord + Send,
    V: Send,
    R: Reclaimer,
    A: NodeAlloc,
    S: BuildHasher,
{
    fn bucket(&self, key: &K) -> &AtomicPtr<Node<K, V, R>> {
        let h = self.hasher.hash_one(key);
        // Multiply-shift: the high bits of `h · n` are uniform in `0..n`.
        let i = ((u128::from(h) * self.buckets.len() as u128) >> 64) as usize;
        &self.buckets[i]
    }

    /// Inserts `key → value` if `key` is absent; `false` (and the pair dropped)
    /// if it was present. `local` is the calling thread's registration in
    /// [`domain`](Self::domain).
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    #[must_use = "insert does not replace: `false` means the key was present and `value` was dropped"]
    pub fn insert(&self, local: &R::Local, key: K, value: V) -> bool {
        check_local(&*self.domain, local, "LfHashMap::insert");
        let b = self.bucket(&key);
        let g = local.enter();
        hm_list::insert::<K, V, R, A>(b, key, value, &g).is_ok()
    }

    /// Removes `key`, returning a clone of its value if it was present.
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn remove(&self, local: &R::Local, key: &K) -> Option<V>
    where
        V: Clone,
    {
        check_local(&*self.domain, local, "LfHashMap::remove");
        let g = local.enter();
        hm_list::remove::<K, V, R, A>(self.bucket(key), key, &g)
    }

    /// A clone of `key`'s value, if present.
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn get(&self, local: &R::Local, key: &K) -> Option<V>
    where
        V: Clone,
    {
        self.get_with(local, key, V::clone)
    }

    /// `f` applied to `key`'s value, if present: the reference is valid during
    /// the call (the node stays protected), so `V` need not be `Clone`.
    ///
    /// ```
    /// use mpsync::ds::hash::LfHashMap;
    /// use mpsync::reclaim::{Ebr, Reclaimer};
    ///
    /// let m: LfHashMap<u32, Vec<u8>> = LfHashMap::new();
    /// let l = Ebr::register(m.domain());
    /// assert!(m.insert(&l, 1, vec![1, 2, 3]));
    /// assert_eq!(m.get_with(&l, &1, |v| v.len()), Some(3));
    /// ```
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn get_with<T>(&self, local: &R::Local, key: &K, f: impl FnOnce(&V) -> T) -> Option<T> {
        check_local(&*self.domain, local, "LfHashMap::get");
        let g = local.enter();
        hm_list::get_with::<K, V, R, A, T>(self.bucket(key), key, &g, f)
    }

    /// Whether `key` is present.
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn contains_key(&self, local: &R::Local, key: &K) -> bool {
        check_local(&*self.domain, local, "LfHashMap::contains_key");
        let g = local.enter();
        hm_list::contains::<K, V, R, A>(self.bucket(key), key, &g)
    }

    /// The number of entries: exact when no thread changes the table meanwhile,
    /// otherwise approximate (buckets are counted one after another, each under
    /// its own traversal). Walks the whole table; lock-free, as
    /// [`for_each`](Self::for_each).
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn len(&self, local: &R::Local) -> usize
    where
        K: Clone,
    {
        let mut n = 0;
        self.for_each(local, |_, _| n += 1);
        n
    }

    /// Whether [`len`](Self::len) is 0 (as approximate).
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn is_empty(&self, local: &R::Local) -> bool
    where
        K: Clone,
    {
        self.len(local) == 0
    }

    /// Calls `f` on every entry, bucket after bucket (in each, in key order), each
    /// key at most once; entries inserted or removed during the walk may or may not
    /// be seen. The references are valid only during the call of `f`, which may
    /// use the table (see [Your code inside an operation](self#your-code-inside-an-operation)).
    ///
    /// Lock-free: the walk unlinks the removed nodes it meets (Michael's
    /// search), so a remover stopped between its mark and its unlink does not
    /// hold it up.
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn for_each(&self, local: &R::Local, mut f: impl FnMut(&K, &V))
    where
        K: Clone,
    {
        check_local(&*self.domain, local, "LfHashMap::for_each");
        for b in self.buckets.iter() {
            // One guard per bucket: under EBR a walk of the whole table would
            // otherwise hold the epoch back for its whole length.
            let g = local.enter();
            hm_list::for_each::<K, V, R, A>(b, &g, &mut f);
        }
    }

    /// An iterator over clones of the entries, bucket after bucket (in each, in
    /// key order). Each bucket is read in one traversal under a guard of its own
    /// (as [`for_each`](Self::for_each)), buffered, and handed out; no guard is
    /// held between buckets, so a long or paused iteration holds back no
    /// reclamation.
    ///
    /// Under concurrent updates it is *weakly consistent*: every key present
    /// for the whole iteration is yielded exactly once; no key is yielded twice;
    /// a key yielded was present, with that value, at some moment during the
    /// iteration; a key inserted or removed meanwhile may or may not be yielded.
    /// `local` is shared, not exclusive: while the iterator lives, the same
    /// registration may go on inserting, removing and reading.
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    ///
    /// ```
    /// use mpsync::ds::hash::LfHashMap;
    /// use mpsync::reclaim::{HazardPointers, Reclaimer};
    ///
    /// let m: LfHashMap<u32, u32, HazardPointers> = LfHashMap::with_buckets(8).unwrap();
    /// let local = HazardPointers::register(m.domain());
    /// for k in 0..20 {
    ///     assert!(m.insert(&local, k, k + 1));
    /// }
    /// assert_eq!(m.iter(&local).map(|(k, v)| v - k).sum::<u32>(), 20);
    /// ```
    pub fn iter<'l>(&self, local: &'l R::Local) -> Iter<'_, 'l, K, V, R, A, S>
    where
        K: Clone,
        V: Clone,
    {
        check_local(&*self.domain, local, "LfHashMap::iter");
        Iter {
            map: self,
            local,
            next_bucket: 0,
            buf: Vec::new().into_iter(),
        }
    }

    /// The calling thread's handle: it registers with the domain and announces a
    /// quiescent state every 100 operations.
    pub fn handle(&self) -> LfHashMapHandle<'_, K, V, R, A, S>
    where
        K: Sync,
        V: Sync + Clone,
        S: Sync,
    {
        RegisteredHandle::new(self)
    }
}

/// The iterator of [`LfHashMap::iter`] (and [`FastReadHashMap::iter`]):
/// clones of the entries, one bucket's traversal at a time.
pub struct Iter<'m, 'l, K, V, R: Reclaimer, A: NodeAlloc, S> {
    map: &'m LfHashMap<K, V, R, A, S>,
    local: &'l R::Local,
    next_bucket: usize,
    buf: std::vec::IntoIter<(K, V)>,
}

impl<K, V, R, A, S> Iterator for Iter<'_, '_, K, V, R, A, S>
where
    K: Ord + Send + Clone,
    V: Send + Clone,
    R: Reclaimer,
    A: NodeAlloc,
{
    type Item = (K, V);

    fn next(&mut self) -> Option<(K, V)> {
        loop {
            if let Some(e) = self.buf.next() {
                return Some(e);
            }
            let b = self.map.buckets.get(self.next_bucket)?;
            self.next_bucket += 1;
            let mut out = Vec::new();
            let g = self.local.enter();
            hm_list::for_each::<K, V, R, A>(b, &g, &mut |k, v| out.push((k.clone(), v.clone())));
            drop(g);
            self.buf = out.into_iter();
        }
    }
}

impl<K, V, R: Reclaimer, A: NodeAlloc, S> fmt::Debug for Iter<'_, '_, K, V, R, A, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Iter")
            .field("next_bucket", &self.next_bucket)
            .field("buffered", &self.buf.len())
            .finish_non_exhaustive()
    }
}

impl<K, V, R: Reclaimer, A: NodeAlloc, S> Drop for LfHashMap<K, V, R, A, S> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no thread uses the table any more; retired nodes
        // belong to the domain, which frees them.
        unsafe { hm_list::free_all::<K, V, R, A>(&self.buckets) };
    }
}

impl<K, V, R: Reclaimer, A: NodeAlloc, S> fmt::Debug for LfHashMap<K, V, R, A, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LfHashMap")
            .field("buckets", &self.buckets.len())
            .field("reclaimer", &R::NAME)
            .field("alloc", &A::NAME)
            .finish_non_exhaustive()
    }
}

/// One thread's access to an [`LfHashMap`] (see [`RegisteredHandle`]).
pub type LfHashMapHandle<'a, K, V, R = Ebr, A = SystemAlloc, S = RandomState> =
    RegisteredHandle<'a, LfHashMap<K, V, R, A, S>, K, V>;

impl<K, V, R, A, S> RegisteredMap<K, V> for LfHashMap<K, V, R, A, S>
where
    K: Hash + Ord + Send + Sync,
    V: Send + Sync + Clone,
    R: Reclaimer,
    A: NodeAlloc,
    S: BuildHasher + Sync,
{
    type R = R;
    fn domain(&self) -> &Arc<R> {
        &self.domain
    }
    fn insert_in(&self, local: &R::Local, key: K, value: V) -> bool {
        self.insert(local, key, value)
    }
    fn get_in(&self, local: &R::Local, key: &K) -> Option<V> {
        self.get(local, key)
    }
    fn remove_in(&self, local: &R::Local, key: &K) -> Option<V> {
        self.remove(local, key)
    }
    fn contains_key_in(&self, local: &R::Local, key: &K) -> bool {
        self.contains_key(local, key)
    }
}

impl<K, V, R, A, S> ConcurrentMap<K, V> for LfHashMap<K, V, R, A, S>
where
    K: Hash + Ord + Send + Sync,
    V: Send + Sync + Clone,
    R: Reclaimer,
    A: NodeAlloc,
    S: BuildHasher + Send + Sync,
{
    type Handle<'a>
        = LfHashMapHandle<'a, K, V, R, A, S>
    where
        Self: 'a;

    fn handle(&self) -> Self::Handle<'_> {
        LfHashMap::handle(self)
    }
}

impl<K: 'static, V: 'static, R: ProtectsReachable, A: NodeAlloc, S: BuildHasher>
    FastReadHashMap<K, V, R, A, S>
{
    /// An empty table of `buckets` buckets over `domain`. Errors if `buckets` is 0.
    pub fn with_domain(buckets: usize, domain: Arc<R>, hasher: S) -> Result<Self, MapError> {
        Ok(Self {
            inner: LfHashMap::with_domain(buckets, domain, hasher)?,
        })
    }
}

/// Hart's fast-read table (Figure 5.16): an [`LfHashMap`] whose `get` and
/// `contains_key` walk past deleted nodes without helping or restarting. Only
/// over schemes that protect everything reachable (`R: ProtectsReachable`).
///
/// Keys and values are `'static`, as [`LfHashMap`]'s
/// ([why](self#keys-and-values-are-static)):
///
/// ```compile_fail,E0597
/// use mpsync::ds::hash::FastReadHashMap;
/// use mpsync::reclaim::{Qsbr, Reclaimer};
///
/// let name = String::from("borrowed");
/// let m: FastReadHashMap<&str, u32, Qsbr> = FastReadHashMap::with_buckets(4).unwrap();
/// let l = Qsbr::register(m.domain());
/// m.insert(&l, &name, 1); // error: `name` does not live long enough ('static)
/// ```
pub struct FastReadHashMap<
    K,
    V,
    R: ProtectsReachable = Ebr,
    A: NodeAlloc = SystemAlloc,
    S = RandomState,
> {
    inner: LfHashMap<K, V, R, A, S>,
}

impl<K: 'static, V: 'static, R: ProtectsReachable + Default, A: NodeAlloc, S>
    FastReadHashMap<K, V, R, A, S>
where
    S: BuildHasher + Default,
{
    /// An empty table of [`DEFAULT_BUCKETS`] buckets with a domain of its own.
    pub fn new() -> Self {
        Self {
            inner: LfHashMap::new(),
        }
    }

    /// An empty table of `buckets` buckets (fixed). Errors if `buckets` is 0.
    pub fn with_buckets(buckets: usize) -> Result<Self, MapError> {
        Ok(Self {
            inner: LfHashMap::with_buckets(buckets)?,
        })
    }
}

impl<K: 'static, V: 'static, R: ProtectsReachable + Default, A: NodeAlloc, S> Default
    for FastReadHashMap<K, V, R, A, S>
where
    S: BuildHasher + Default,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<K, V, R, A, S> FastReadHashMap<K, V, R, A, S>
where
    K: Hash + Ord + Send,
    V: Send,
    R: ProtectsReachable,
    A: NodeAlloc,
    S: BuildHasher,
{
    /// As [`LfHashMap::iter`] (the traversal is Michael's, not the fast read).
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn iter<'l>(&self, local: &'l R::Local) -> Iter<'_, 'l, K, V, R, A, S>
    where
        K: Hash + Ord + Send + Clone,
        V: Send + Clone,
        S: BuildHasher,
    {
        self.inner.iter(local)
    }

    /// The table underneath: its updates are the fast-read table's updates.
    pub fn as_lf(&self) -> &LfHashMap<K, V, R, A, S> {
        &self.inner
    }

    /// The reclamation domain.
    pub fn domain(&self) -> &Arc<R> {
        self.inner.domain()
    }

    /// As [`LfHashMap::insert`].
    #[must_use = "insert does not replace: `false` means the key was present and `value` was dropped"]
    pub fn insert(&self, local: &R::Local, key: K, value: V) -> bool {
        self.inner.insert(local, key, value)
    }

    /// As [`LfHashMap::remove`].
    pub fn remove(&self, local: &R::Local, key: &K) -> Option<V>
    where
        V: Clone,
    {
        self.inner.remove(local, key)
    }

    /// A clone of `key`'s value, if present: a fast read (no helping, no restarts).
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn get(&self, local: &R::Local, key: &K) -> Option<V>
    where
        V: Clone,
    {
        self.get_with(local, key, V::clone)
    }

    /// `f` applied to `key`'s value, if present, by a fast read (as
    /// [`LfHashMap::get_with`]).
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn get_with<T>(&self, local: &R::Local, key: &K, f: impl FnOnce(&V) -> T) -> Option<T> {
        check_local(&*self.inner.domain, local, "FastReadHashMap::get");
        let g = local.enter();
        hm_list::get_fast_with::<K, V, R, T>(self.inner.bucket(key), key, &g, f)
    }

    /// Whether `key` is present: a fast read.
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn contains_key(&self, local: &R::Local, key: &K) -> bool {
        check_local(&*self.inner.domain, local, "FastReadHashMap::contains_key");
        let g = local.enter();
        hm_list::contains_fast::<K, V, R>(self.inner.bucket(key), key, &g)
    }

    /// The calling thread's handle.
    pub fn handle(&self) -> FastReadHashMapHandle<'_, K, V, R, A, S>
    where
        K: Sync,
        V: Sync + Clone,
        S: Sync,
    {
        RegisteredHandle::new(self)
    }
}

impl<K, V, R: ProtectsReachable, A: NodeAlloc, S> fmt::Debug for FastReadHashMap<K, V, R, A, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FastReadHashMap")
            .field("buckets", &self.inner.buckets.len())
            .field("reclaimer", &R::NAME)
            .field("alloc", &A::NAME)
            .finish_non_exhaustive()
    }
}

/// One thread's access to a [`FastReadHashMap`] (see [`RegisteredHandle`]).
pub type FastReadHashMapHandle<'a, K, V, R = Ebr, A = SystemAlloc, S = RandomState> =
    RegisteredHandle<'a, FastReadHashMap<K, V, R, A, S>, K, V>;

impl<K, V, R, A, S> RegisteredMap<K, V> for FastReadHashMap<K, V, R, A, S>
where
    K: Hash + Ord + Send + Sync,
    V: Send + Sync + Clone,
    R: ProtectsReachable,
    A: NodeAlloc,
    S: BuildHasher + Sync,
{
    type R = R;
    fn domain(&self) -> &Arc<R> {
        self.inner.domain()
    }
    fn insert_in(&self, local: &R::Local, key: K, value: V) -> bool {
        self.insert(local, key, value)
    }
    fn get_in(&self, local: &R::Local, key: &K) -> Option<V> {
        self.get(local, key)
    }
    fn remove_in(&self, local: &R::Local, key: &K) -> Option<V> {
        self.remove(local, key)
    }
    fn contains_key_in(&self, local: &R::Local, key: &K) -> bool {
        self.contains_key(local, key)
    }
}

impl<K, V, R, A, S> ConcurrentMap<K, V> for FastReadHashMap<K, V, R, A, S>
where
    K: Hash + Ord + Send + Sync,
    V: Send + Sync + Clone,
    R: ProtectsReachable,
    A: NodeAlloc,
    S: BuildHasher + Send + Sync,
{
    type Handle<'a>
        = FastReadHashMapHandle<'a, K, V, R, A, S>
    where
        Self: 'a;

    fn handle(&self) -> Self::Handle<'_> {
        FastReadHashMap::handle(self)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::ds::map::MapHandle;
    use crate::reclaim::{Guard, HazardPointers, Leak, Qsbr};
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn sequential<M: ConcurrentMap<u32, u32>>(m: &M) {
        let mut h = m.handle();
        for k in [5, 1, 9, 3, 7] {
            assert!(h.insert(k, k * 10));
        }
        assert!(!h.insert(3, 0), "present: not replaced");
        assert_eq!(h.get(&3), Some(30));
        for k in [0, 2, 4, 6, 8, 10] {
            assert_eq!(h.get(&k), None);
            assert!(!h.contains_key(&k));
        }
        assert_eq!(h.remove(&5), Some(50));
        assert_eq!(h.remove(&5), None);
        assert!(h.insert(5, 51));
        assert_eq!(h.get(&5), Some(51));
        h.quiescent();
        for k in [1, 3, 5, 7, 9] {
            assert!(h.contains_key(&k));
            assert!(h.remove(&k).is_some());
        }
        assert_eq!(h.get(&1), None);
    }

    #[test]
    fn sequential_with_every_scheme_and_bucket_count() {
        for b in [1, 3, 32] {
            sequential(&LfHashMap::<u32, u32, Ebr>::with_buckets(b).unwrap());
            sequential(&LfHashMap::<u32, u32, Qsbr>::with_buckets(b).unwrap());
            sequential(&LfHashMap::<u32, u32, Leak>::with_buckets(b).unwrap());
            let hp = Arc::new(HazardPointers::with_threshold(2, 1).unwrap());
            sequential(&LfHashMap::<u32, u32, _>::with_domain(b, hp, RandomState::new()).unwrap());
            sequential(&FastReadHashMap::<u32, u32, Ebr>::with_buckets(b).unwrap());
            sequential(&FastReadHashMap::<u32, u32, Qsbr>::with_buckets(b).unwrap());
        }
    }

    #[test]
    fn len_and_for_each_see_every_entry_once() {
        let m: LfHashMap<u32, u32, HazardPointers> = LfHashMap::with_buckets(4).unwrap();
        let l = HazardPointers::register(m.domain());
        assert!(m.is_empty(&l));
        for k in 0..20 {
            let _ = m.insert(&l, k, k);
        }
        m.remove(&l, &7);
        assert_eq!(m.len(&l), 19);
        assert_eq!(m.get_with(&l, &3, |v| v + 1), Some(4));
        assert_eq!(m.get_with(&l, &7, |v| v + 1), None);
        let mut seen = Vec::new();
        m.for_each(&l, |k, v| {
            assert_eq!(k, v);
            seen.push(*k)
        });
        seen.sort_unstable();
        assert_eq!(seen, (0..20).filter(|&k| k != 7).collect::<Vec<_>>());
    }

    /// Counts its drops in a shared counter.
    #[derive(Clone)]
    struct Counted(std::sync::Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn keys_and_values_are_dropped_exactly_once() {
        let drops = std::sync::Arc::new(AtomicUsize::new(0));
        {
            let m: LfHashMap<u32, Counted, Qsbr> = LfHashMap::with_buckets(2).unwrap();
            let mut h = m.handle();
            for k in 0..6 {
                assert!(h.insert(k, Counted(drops.clone())));
            }
            assert!(
                !h.insert(0, Counted(drops.clone())),
                "the refused value is dropped"
            );
            assert_eq!(drops.load(Ordering::Relaxed), 1);
            drop(h.get(&1)); // a clone, dropped
            drop(h.remove(&2)); // a clone; the node's own value goes with the node
            assert_eq!(drops.load(Ordering::Relaxed), 3);
        }
        // 6 in nodes (one removed, freed by the domain) + 3 before.
        assert_eq!(drops.load(Ordering::Relaxed), 9);
    }

    #[test]
    fn removed_nodes_are_retired_once() {
        let m: LfHashMap<u32, u32, Leak> = LfHashMap::with_buckets(1).unwrap();
        let l = Leak::register(m.domain());
        for k in 0..10 {
            let _ = m.insert(&l, k, k);
        }
        for k in 0..10 {
            assert_eq!(m.remove(&l, &k), Some(k));
        }
        assert_eq!(m.domain().stats().retired, 10);
    }

    #[test]
    fn zero_buckets_is_an_error() {
        assert_eq!(
            LfHashMap::<u32, u32>::with_buckets(0).unwrap_err(),
            MapError::ZeroBuckets
        );
        assert!(FastReadHashMap::<u32, u32>::with_buckets(0).is_err());
    }

    #[test]
    #[should_panic(expected = "another reclamation domain")]
    fn a_foreign_registration_is_refused() {
        let m: LfHashMap<u32, u32, Ebr> = LfHashMap::with_buckets(1).unwrap();
        let other = Arc::new(Ebr::new());
        let l = Ebr::register(&other);
        let _ = m.insert(&l, 1, 1);
    }

    /// A value that, when dropped, uses the table that held it: inserts a
    /// fresh key and reads and counts the table, through a registration of
    /// its own (the table is reached through a `Weak`, so a drop run by the
    /// table's own `Drop` finds it gone).
    struct Reenter<R: Reclaimer> {
        table: std::sync::Weak<LfHashMap<u32, Reenter<R>, R>>,
        k: u32,
    }
    impl<R: Reclaimer> Clone for Reenter<R> {
        fn clone(&self) -> Self {
            Reenter {
                table: std::sync::Weak::new(), // clones are inert
                k: self.k,
            }
        }
    }
    impl<R: Reclaimer> Drop for Reenter<R> {
        fn drop(&mut self) {
            if let Some(m) = self.table.upgrade() {
                let l = R::register(m.domain());
                let fresh = 1000 + self.k;
                let inert = Reenter {
                    table: std::sync::Weak::new(),
                    k: fresh,
                };
                assert!(m.insert(&l, fresh, inert));
                assert!(m.contains_key(&l, &fresh));
                assert!(m.len(&l) >= 1);
                assert_eq!(m.iter(&l).filter(|(k, _)| *k == fresh).count(), 1);
            }
        }
    }

    /// Values whose drop, run by reclamation inside the table's own
    /// operations (hazard pointers: a remove's scan; EBR: an operation's
    /// critical section), re-enters the table. Miri-sized: under Miri, also no
    /// use after free and no leak.
    fn a_drop_reenters<R: Reclaimer>(d: Arc<R>) {
        let m = std::sync::Arc::new(
            LfHashMap::<u32, Reenter<R>, R>::with_domain(2, d, RandomState::new()).unwrap(),
        );
        let l = R::register(m.domain());
        for k in 0..6 {
            let v = Reenter {
                table: std::sync::Arc::downgrade(&m),
                k,
            };
            assert!(m.insert(&l, k, v));
        }
        for k in 0..6 {
            assert_eq!(m.remove(&l, &k).map(|v| v.k), Some(k));
            m.get(&l, &(1000 + k)); // operations: reclamation runs in them
        }
        drop(l);
        let mut l = R::register(m.domain());
        for _ in 0..4 {
            l.enter().defer(|| ());
            l.quiescent();
        }
        let keys: std::collections::BTreeSet<u32> = m.iter(&l).map(|(k, _)| k).collect();
        assert!(keys.iter().all(|k| (1000..1006).contains(k)), "{keys:?}");
        drop(l);
        drop(m);
    }

    #[test]
    fn a_drop_reenters_the_table() {
        a_drop_reenters(Arc::new(HazardPointers::with_threshold(2, 1).unwrap()));
        a_drop_reenters(Arc::new(Ebr::with_advance_every(1).unwrap()));
        a_drop_reenters(Arc::new(Qsbr::new()));
    }

    /// Drops of [`Fragile`]s (only `a_panicking_key_drop_leaks_nothing` makes them).
    static FRAGILE_DROPS: AtomicUsize = AtomicUsize::new(0);

    /// Counts its drops; the drop of `Fragile(0)` panics.
    #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
    struct Fragile(u32);
    impl Drop for Fragile {
        fn drop(&mut self) {
            FRAGILE_DROPS.fetch_add(1, Ordering::Relaxed);
            if self.0 == 0 {
                panic!("the key's drop panics (on purpose)");
            }
        }
    }

    /// Hashes key `k` (a `u32`) to `k << 61`: with 3 buckets, keys 0–2 go to
    /// the first, 3–5 to the second.
    #[derive(Default)]
    struct Spread(u64);
    impl std::hash::Hasher for Spread {
        fn write(&mut self, bytes: &[u8]) {
            for &b in bytes.iter().rev() {
                self.0 = self.0 << 8 | u64::from(b);
            }
        }
        fn finish(&self) -> u64 {
            self.0 << 61
        }
    }

    /// A table dropped with a key whose drop panics (in its first bucket)
    /// still drops every other key and value, the other buckets' too, and
    /// frees every node (Miri: no leak).
    #[test]
    fn a_panicking_key_drop_leaks_nothing() {
        let m: LfHashMap<Fragile, Fragile, Leak, SystemAlloc, _> = LfHashMap::with_domain(
            3,
            Arc::new(Leak::new()),
            std::hash::BuildHasherDefault::<Spread>::default(),
        )
        .unwrap();
        let l = Leak::register(m.domain());
        for k in 0..6 {
            assert!(m.insert(&l, Fragile(k), Fragile(k + 100)));
        }
        drop(l);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(m)));
        assert!(r.is_err(), "the key's drop panicked");
        let drops = FRAGILE_DROPS.load(Ordering::Relaxed);
        assert_eq!(drops, 12, "every key and value dropped");
    }

    #[test]
    fn debug_names_the_scheme() {
        let m: LfHashMap<u8, u8, Leak> = LfHashMap::with_buckets(2).unwrap();
        assert_eq!(
            format!("{m:?}"),
            "LfHashMap { buckets: 2, reclaimer: \"Leak\", alloc: \"system\", .. }"
        );
        assert!(format!("{:?}", m.handle()).starts_with("RegisteredHandle { map: LfHashMap"));
        let f: FastReadHashMap<u8, u8, Qsbr> = FastReadHashMap::with_buckets(2).unwrap();
        assert!(format!("{f:?}").starts_with("FastReadHashMap { buckets: 2, reclaimer: \"QSBR\""));
        assert!(format!("{:?}", f.handle()).starts_with("RegisteredHandle { map: FastReadHashMap"));
        assert_eq!(f.as_lf().buckets(), 2);
        let l = Qsbr::register(f.domain());
        assert!(f.insert(&l, 5, 6));
        assert_eq!(f.get_with(&l, &5, |v| v * 2), Some(12));
        assert_eq!(f.get_with(&l, &4, |v| v * 2), None);
    }
}
