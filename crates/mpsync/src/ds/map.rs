//! The map interface shared by the hash tables of Hart's thesis (papers/002_… §3.2,
//! §5.3): [`ConcurrentMap`] hands each thread a [`MapHandle`], so one test or
//! benchmark drives every table, whatever its synchronization and reclamation.
//!
//! The tables are **insert-if-absent** maps, as Hart's are (a key is in a table
//! at most once and an insert of a present key fails): [`MapHandle::insert`]
//! does not replace a value; remove the key first (its result is
//! `#[must_use]`). For a map whose `insert` replaces, with atomic
//! read-modify-write updates, use [`HashMap`](super::hash_map::HashMap) (or
//! [`CrHashMap::compute`](super::cr_hash::CrHashMap::compute)). Values are handed out as
//! clones, because a lock-free table cannot move a value out of a node that
//! concurrent readers may still be reading.
//!
//! Every table also has an `iter` yielding clones of its entries
//! ([`CrHashMap::iter`](super::cr_hash::CrHashMap::iter),
//! [`LfHashMap::iter`](super::hash::LfHashMap::iter), …), *weakly consistent*
//! under concurrent updates: each key present for the whole iteration is
//! yielded exactly once, no key twice, and a key yielded was present with that
//! value at some moment during the iteration; keys inserted or removed
//! meanwhile may or may not appear. [`len`](super::hash::LfHashMap::len) is
//! likewise exact only when nobody updates the table meanwhile.
//! [`CrHashMap::new`](super::cr_hash::CrHashMap::new) grows and shrinks by
//! itself; the other tables keep the bucket count they were made with.
//!
//! **Your keys' and values' code.** A `Drop` never runs under a table's lock,
//! so it may use any table, the one dropping it included (the lock-free and
//! CR tables' keys and values are `'static`: they are freed by a reclamation
//! domain that may outlive the table). `Hash`, `Eq`/`Ord` and `Clone` may use
//! any table where they run with no lock held — everywhere in the lock-free
//! tables, in the CR table's reads — and only lock-free reads where a table
//! runs them under its lock (the CR table's writers and resize, every
//! `LockedHashMap` operation): a lock-taking operation started there panics
//! instead of deadlocking. A panic in any of them leaves the table consistent
//! and usable. Each table's module documentation says exactly where.
//!
//! ```
//! use mpsync::ds::map::{ConcurrentMap, MapHandle};
//! use mpsync::ds::hash::LfHashMap;
//! use mpsync::ds::locked_hash::LockedHashMap;
//! use mpsync::lock::TasB;
//! use mpsync::reclaim::HazardPointers;
//!
//! fn exercise<M: ConcurrentMap<u64, String>>(m: &M) {
//!     let mut h = m.handle();
//!     assert!(h.insert(1, "one".into()));
//!     assert!(!h.insert(1, "uno".into()), "insert does not replace");
//!     assert_eq!(h.get(&1).as_deref(), Some("one"));
//!     assert!(h.contains_key(&1));
//!     assert_eq!(h.remove(&1).as_deref(), Some("one"));
//!     assert_eq!(h.get(&1), None);
//! }
//! exercise(&LfHashMap::<u64, String>::new());
//! exercise(&LfHashMap::<u64, String, HazardPointers>::new());
//! exercise(&LockedHashMap::<u64, String, TasB>::new());
//! ```

use std::fmt;
use std::marker::PhantomData;

use super::lf::AutoQuiescent;
use crate::reclaim::Reclaimer;
use crate::sync::Arc;

/// A map shared by threads, each working through its own handle.
pub trait ConcurrentMap<K, V>: Send + Sync {
    /// One thread's access.
    type Handle<'a>: MapHandle<K, V>
    where
        Self: 'a;
    /// The calling thread's access (the lock-free tables register the thread
    /// with their reclamation scheme here; dropping the handle leaves it).
    fn handle(&self) -> Self::Handle<'_>;
}

/// One thread's operations on a [`ConcurrentMap`].
pub trait MapHandle<K, V> {
    /// Inserts `key → value` if `key` is absent; `false` (and `value` dropped) if
    /// it was present.
    #[must_use = "insert does not replace: `false` means the key was present and `value` was dropped"]
    fn insert(&mut self, key: K, value: V) -> bool;
    /// A clone of `key`'s value, or `None`.
    fn get(&mut self, key: &K) -> Option<V>;
    /// Removes `key`; its value (a clone, for the lock-free tables) or `None`.
    fn remove(&mut self, key: &K) -> Option<V>;
    /// Whether `key` is present.
    fn contains_key(&mut self, key: &K) -> bool;
    /// As [`QueueHandle::quiescent`](super::QueueHandle::quiescent): a no-op
    /// unless the table reclaims with QSBR.
    fn quiescent(&mut self) {}
}

/// A map whose operations take the calling thread's registration with its
/// reclamation domain explicitly (the lock-free and concurrently-readable
/// tables). [`RegisteredHandle`] turns any of them into a [`MapHandle`]: the one
/// handle type that registers the thread and announces its quiescent states.
pub trait RegisteredMap<K, V>: Sync {
    /// The reclamation scheme.
    type R: Reclaimer;
    /// The domain threads register with.
    fn domain(&self) -> &Arc<Self::R>;
    /// As [`MapHandle::insert`].
    #[must_use = "insert does not replace: `false` means the key was present and `value` was dropped"]
    fn insert_in(&self, local: &LocalOf<Self::R>, key: K, value: V) -> bool;
    /// As [`MapHandle::get`].
    fn get_in(&self, local: &LocalOf<Self::R>, key: &K) -> Option<V>;
    /// As [`MapHandle::remove`].
    fn remove_in(&self, local: &LocalOf<Self::R>, key: &K) -> Option<V>;
    /// As [`MapHandle::contains_key`].
    fn contains_key_in(&self, local: &LocalOf<Self::R>, key: &K) -> bool;
}

/// The registration type of scheme `R`.
pub type LocalOf<R> = <R as Reclaimer>::Local;

/// One thread's access to a [`RegisteredMap`]: its registration with the map's
/// domain, and a quiescent state every 100 operations (Hart's test loop; needed
/// by QSBR, harmless for the other schemes).
pub struct RegisteredHandle<'a, M: RegisteredMap<K, V>, K, V> {
    map: &'a M,
    local: LocalOf<M::R>,
    auto: AutoQuiescent,
    _kv: PhantomData<fn(K) -> V>,
}

impl<'a, M: RegisteredMap<K, V>, K, V> RegisteredHandle<'a, M, K, V> {
    /// Registers the calling thread with `map`'s domain.
    pub fn new(map: &'a M) -> Self {
        Self {
            map,
            local: <M::R as Reclaimer>::register(map.domain()),
            auto: AutoQuiescent::new(),
            _kv: PhantomData,
        }
    }

    /// The thread's registration (for the map's explicit-`local` methods).
    pub fn local(&mut self) -> &mut LocalOf<M::R> {
        &mut self.local
    }
}

impl<M: RegisteredMap<K, V> + fmt::Debug, K, V> fmt::Debug for RegisteredHandle<'_, M, K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredHandle")
            .field("map", self.map)
            .field("auto", &self.auto)
            .finish_non_exhaustive()
    }
}

impl<M: RegisteredMap<K, V>, K, V> MapHandle<K, V> for RegisteredHandle<'_, M, K, V> {
    fn insert(&mut self, key: K, value: V) -> bool {
        let r = self.map.insert_in(&self.local, key, value);
        self.auto.tick(&mut self.local);
        r
    }

    fn get(&mut self, key: &K) -> Option<V> {
        let r = self.map.get_in(&self.local, key);
        self.auto.tick(&mut self.local);
        r
    }

    fn remove(&mut self, key: &K) -> Option<V> {
        let r = self.map.remove_in(&self.local, key);
        self.auto.tick(&mut self.local);
        r
    }

    fn contains_key(&mut self, key: &K) -> bool {
        let r = self.map.contains_key_in(&self.local, key);
        self.auto.tick(&mut self.local);
        r
    }

    fn quiescent(&mut self) {
        self.auto.now(&mut self.local);
    }
}

// ---- what the tables share about users' code ------------------------------------

/// Drops a node's key and value and frees its memory, panic-safely: the pair
/// is moved out and the memory freed (`free_mem`) first, so a key whose drop
/// panics still has its value dropped, and no node memory leaks.
///
/// # Safety
/// `key` and `value` are the fields of one node nobody else reaches any more,
/// and `free_mem` frees that node's memory once (without dropping anything).
#[inline]
pub(crate) unsafe fn drop_pair_and_free<K, V>(
    key: *const K,
    value: *const V,
    free_mem: impl FnOnce(),
) {
    // SAFETY: the contract: the fields are valid, read (moved out) once.
    let (k, v) = unsafe { (std::ptr::read(key), std::ptr::read(value)) };
    free_mem();
    drop(k);
    drop(v);
}

/// Frees a chain of nodes owned by a structure at the end of its life: `free`
/// on each node from `first` on, following `next` (read before the node is
/// freed). A panicking key or value drop does not stop it: the rest of the
/// chain is freed while the panic unwinds (as a `Vec`'s drop goes on), so
/// nothing leaks.
///
/// # Safety
/// Every node of the chain is reached only through it, owned by the caller,
/// and freed once by `free` (which `next` must not be called after).
pub(crate) unsafe fn free_chain<N>(
    first: *mut N,
    next: impl Fn(*mut N) -> *mut N + Copy,
    free: unsafe fn(*mut u8),
) {
    /// The rest of the chain, freed if a node's drop unwinds.
    struct Rest<N, F: Fn(*mut N) -> *mut N + Copy> {
        p: *mut N,
        next: F,
        free: unsafe fn(*mut u8),
    }
    impl<N, F: Fn(*mut N) -> *mut N + Copy> Drop for Rest<N, F> {
        fn drop(&mut self) {
            // SAFETY: the rest of the caller's chain, not yet freed.
            unsafe { free_chain(self.p, self.next, self.free) }
        }
    }
    let mut p = first;
    while !p.is_null() {
        let rest = Rest {
            p: next(p),
            next,
            free,
        };
        // SAFETY: the contract: a node of the chain, freed once, here.
        unsafe { free(p.cast()) };
        p = rest.p;
        std::mem::forget(rest);
    }
}

/// Frees the chains whose first nodes are `heads` (a table's buckets) as one
/// chain ([`free_chain`]): each chain's last node is linked to the next
/// chain's first (`set_next`), so a panicking drop in one bucket does not
/// stop the others either. `next` reads a node's successor (null at a chain's
/// end).
///
/// # Safety
/// As [`free_chain`], for every chain; the chains are disjoint, and the
/// caller's access to them exclusive (their links are rewritten).
pub(crate) unsafe fn free_chains<N>(
    heads: impl IntoIterator<Item = *mut N>,
    next: impl Fn(*mut N) -> *mut N + Copy,
    set_next: impl Fn(*mut N, *mut N),
    free: unsafe fn(*mut u8),
) {
    let (mut first, mut last): (*mut N, *mut N) = (std::ptr::null_mut(), std::ptr::null_mut());
    for h in heads.into_iter().filter(|h| !h.is_null()) {
        if last.is_null() {
            first = h;
        } else {
            set_next(last, h);
        }
        last = h;
        while !next(last).is_null() {
            last = next(last);
        }
    }
    // SAFETY: the contract: one chain of owned nodes now, each reached once.
    unsafe { free_chain(first, next, free) }
}

#[cfg(not(loom))]
std::thread_local! {
    /// This thread is running users' code (`Hash`, `Eq`, `Clone`, a `for_each`
    /// callback) under a lock of a lock-based or CR table.
    static UNDER_LOCK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the region of a table operation in which the calling thread holds
/// (or is about to take) the table's locks and runs users' `Hash`, `Eq` or
/// `Clone` there. Made *before* the first lock is taken, dropped after the last
/// is released (also when the operation unwinds).
///
/// A lock-taking operation of any table started inside such a region — from
/// the user's code the region runs — would wait for a lock its own thread
/// holds (the same table), or take two tables' locks in an order another
/// thread may take in reverse. Instead it panics at once, before it takes any
/// lock ([`enter`](Self::enter)): a documented panic, never a deadlock.
/// Lock-free reads and every `Drop` are unaffected (the tables run no user
/// `Drop` under a lock).
pub(crate) struct UnderLock(());

impl UnderLock {
    /// Enters the region for operation `op`.
    ///
    /// # Panics
    /// If the calling thread is already inside one (see the type's doc).
    #[inline]
    #[track_caller]
    pub(crate) fn enter(op: &'static str) -> Self {
        #[cfg(not(loom))]
        if UNDER_LOCK.replace(true) {
            reentered(op);
        }
        #[cfg(loom)]
        let _ = op;
        UnderLock(())
    }
}

impl Drop for UnderLock {
    #[inline]
    fn drop(&mut self) {
        #[cfg(not(loom))]
        UNDER_LOCK.set(false);
    }
}

#[cfg(not(loom))]
#[cold]
#[inline(never)]
#[track_caller]
fn reentered(op: &'static str) -> ! {
    panic!(
        "{op} was called from a key's or value's `Hash`, `Eq` or `Clone` (or a `for_each` callback, or an update \
         closure) that a lock-based or CR table runs while it holds one of its locks: it \
         would deadlock. From there, use only lock-free reads (`CrHashMap::get`, the \
         lock-free tables), or defer the update"
    )
}

/// Invalid table parameters supplied by the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MapError {
    /// A table needs at least one bucket.
    ZeroBuckets,
    /// A resize policy's entries per bucket must be at least 1.
    ZeroLoad,
}

impl std::fmt::Display for MapError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ZeroBuckets => f.write_str(
                "hash table with 0 buckets: must be >= 1 (about the number of keys expected; Hart uses 32)",
            ),
            Self::ZeroLoad => f.write_str(
                "resize policy with a maximum load of 0 entries per bucket: must be >= 1 (default 2)",
            ),
        }
    }
}

impl std::error::Error for MapError {}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn error_says_what_would_be_right() {
        assert!(MapError::ZeroBuckets.to_string().contains(">= 1"));
        assert!(MapError::ZeroLoad.to_string().contains(">= 1"));
    }
}
