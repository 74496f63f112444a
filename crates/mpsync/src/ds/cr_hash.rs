//! Hart's concurrently-readable (CR) hash table: lockless readers, writers under
//! a per-bucket lock — the RCU-style table of papers/002_… §3.3 (McKenney's).
//!
//! Each bucket is a singly linked, unordered chain with its own lock `L` (any
//! [`lock_api::RawMutex`]). Readers take no lock and write nothing shared: they
//! walk the chain under a reclamation guard. Writers lock the bucket, so they
//! never race each other there, and change the chain with single pointer stores
//! that a concurrent reader sees either before or after:
//!
//! - insert: a new node, its `next` set to the current head, published by a
//!   `Release` store of the head (a reader sees the whole node or none of it);
//! - remove: **mark** the node (bit 0 of its own `next`), then unlink it (store
//!   its successor into its predecessor's link), then retire it.
//!
//! | `next` of node `n` | who sets it                      | meaning                    |
//! |--------------------|----------------------------------|----------------------------|
//! | `p` (bit 0 clear)  | insert; unlink of `n`'s successor | `n` is in the chain        |
//! | `p | 1`            | remove, under the bucket lock    | `n` is removed; frozen     |
//!
//! The mark is what makes the table correct over **any** scheme: a reader
//! protects the chain hand over hand (as in [`hm_list`](super::hm_list)) and
//! restarts when the node it stands on is marked, because under hazard pointers
//! the successor of a removed node may already be freed. Under QSBR and EBR a
//! reader never needs to restart for that reason, but the same code is kept for
//! all schemes. The bucket count is fixed (no resize yet). Insert-if-absent, as
//! the other tables ([`map`](super::map)).
//!
//! Progress: reads are lock-free (they restart only when a writer removed the
//! node they stand on); writes are blocking (a writer preempted holding a
//! bucket's lock delays that bucket's other writers, never its readers). Uses
//! `sched`: through the lock `L`, and the stall point
//! [`stall::CR_READ_STEPPED`].
//!
//! ```
//! use mpsync::ds::cr_hash::CrHashMap;
//! use mpsync::ds::map::{ConcurrentMap, MapHandle};
//! use mpsync::lock::TasBNp;
//! use mpsync::reclaim::HazardPointers;
//!
//! let m: CrHashMap<u32, u32, TasBNp, HazardPointers> = CrHashMap::with_buckets(32).unwrap();
//! let mut h = m.handle();
//! assert!(h.insert(1, 10));
//! assert_eq!(h.get(&1), Some(10));
//! assert_eq!(h.remove(&1), Some(10));
//! assert!(!h.contains_key(&1));
//! ```

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::ptr;

use lock_api::{Mutex, RawMutex};

use super::alloc::{NodeAlloc, SystemAlloc};
use super::hash::DEFAULT_BUCKETS;
use super::lf::{Liveness, check_local};
use super::map::{ConcurrentMap, MapError, RegisteredHandle, RegisteredMap};
use crate::reclaim::{Ebr, Guard, Local, Reclaimer};
use crate::sched::stall;
use crate::sync::{Arc, AtomicPtr, Ordering};

/// A chain node. `#[repr(C)]` with the [`Liveness`] first (the loom test
/// allocator relies on it).
#[repr(C)]
struct Node<K, V> {
    live: Liveness,
    next: AtomicPtr<Node<K, V>>,
    key: K,
    value: V,
}

/// A bucket: the writers' lock and the chain's head.
struct Bucket<K, V, L: RawMutex> {
    lock: Mutex<L, ()>,
    head: AtomicPtr<Node<K, V>>,
}

const MARK: usize = 1;

#[inline(always)]
fn marked<T>(p: *mut T) -> bool {
    p.addr() & MARK != 0
}

/// Drops a node's key and value and gives its memory back to `A`.
///
/// # Safety
/// `p` came from `A::alloc::<Node<K, V>>`, no thread can reach it any more, and it
/// is freed once.
unsafe fn free_node<K, V, A: NodeAlloc>(p: *mut u8) {
    let n = p.cast::<Node<K, V>>();
    // SAFETY: the contract: a live node nobody else reaches, dropped and freed once.
    unsafe {
        ptr::drop_in_place(&raw mut (*n).key);
        ptr::drop_in_place(&raw mut (*n).value);
        A::free::<Node<K, V>>(p);
    }
}

/// Hart's concurrently-readable hash table (see the [module documentation](self)).
pub struct CrHashMap<
    K,
    V,
    L: RawMutex,
    R: Reclaimer = Ebr,
    A: NodeAlloc = SystemAlloc,
    S = RandomState,
> {
    buckets: Box<[Bucket<K, V, L>]>,
    hasher: S,
    domain: Arc<R>,
    _owns: PhantomData<(K, V, A)>,
}

// SAFETY: as `LfHashMap`: the table owns its keys and values, reached only
// through atomics (and the bucket locks) and freed through the reclaimer,
// possibly on another thread.
unsafe impl<K: Send, V: Send, L: RawMutex + Send, R: Reclaimer, A: NodeAlloc, S: Send> Send
    for CrHashMap<K, V, L, R, A, S>
{
}
// SAFETY: concurrent readers read keys and clone values (`Sync`); any thread may
// drop them when it frees a node (`Send`); the locks are shared (`L: Sync`).
unsafe impl<K: Send + Sync, V: Send + Sync, L: RawMutex + Sync, R: Reclaimer, A: NodeAlloc, S: Sync>
    Sync for CrHashMap<K, V, L, R, A, S>
{
}

impl<K, V, L: RawMutex, R: Reclaimer + Default, A: NodeAlloc, S: BuildHasher + Default>
    CrHashMap<K, V, L, R, A, S>
{
    /// An empty table of [`DEFAULT_BUCKETS`] buckets with a domain of its own.
    pub fn new() -> Self {
        Self::with_buckets(DEFAULT_BUCKETS).expect("the default is >= 1")
    }

    /// An empty table of `buckets` buckets (fixed). Errors if `buckets` is 0.
    pub fn with_buckets(buckets: usize) -> Result<Self, MapError> {
        Self::with_domain(buckets, Arc::new(R::default()), S::default())
    }
}

impl<K, V, L: RawMutex, R: Reclaimer + Default, A: NodeAlloc, S: BuildHasher + Default> Default
    for CrHashMap<K, V, L, R, A, S>
{
    fn default() -> Self {
        Self::new()
    }
}

impl<K, V, L: RawMutex, R: Reclaimer, A: NodeAlloc, S> CrHashMap<K, V, L, R, A, S> {
    /// An empty table of `buckets` buckets over `domain` (hazard pointers: at
    /// least 2 slots per thread). Errors if `buckets` is 0.
    pub fn with_domain(buckets: usize, domain: Arc<R>, hasher: S) -> Result<Self, MapError> {
        if buckets == 0 {
            return Err(MapError::ZeroBuckets);
        }
        Ok(Self {
            buckets: (0..buckets)
                .map(|_| Bucket {
                    lock: Mutex::new(()),
                    head: AtomicPtr::new(ptr::null_mut()),
                })
                .collect(),
            hasher,
            domain,
            _owns: PhantomData,
        })
    }

    /// The reclamation domain.
    pub fn domain(&self) -> &Arc<R> {
        &self.domain
    }

    /// The number of buckets (fixed).
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }
}

impl<K, V, L, R, A, S> CrHashMap<K, V, L, R, A, S>
where
    K: Hash + Eq + Send,
    V: Send,
    L: RawMutex,
    R: Reclaimer,
    A: NodeAlloc,
    S: BuildHasher,
{
    fn bucket(&self, key: &K) -> &Bucket<K, V, L> {
        let h = self.hasher.hash_one(key);
        &self.buckets[((u128::from(h) * self.buckets.len() as u128) >> 64) as usize]
    }

    /// The reader's search: `key`'s node, protected by `g` (slots 0 and 1, hand
    /// over hand), or null.
    fn search<G: Guard>(b: &Bucket<K, V, L>, key: &K, g: &mut G) -> *mut Node<K, V> {
        'retry: loop {
            let mut link: *const AtomicPtr<Node<K, V>> = &b.head;
            let (mut s_cur, mut s_prev) = (0usize, 1usize);
            loop {
                // SAFETY: [1] `link` is the bucket's head or the `next` of the node
                // protected by slot `s_prev` (see [2]).
                let cur = g.protect(s_cur, unsafe { &*link });
                if marked(cur) {
                    // The node we stand on was removed: its successor may be freed.
                    continue 'retry;
                }
                if cur.is_null() {
                    return cur;
                }
                // SAFETY: [2] `cur` is protected by `s_cur`, validated against an
                // unmarked `link`: the node holding `link` was not removed then, so
                // `cur` was in the chain, not retired, and is not freed while the
                // slot holds it.
                let c = unsafe { &*cur };
                c.live.check();
                // Present: `cur` was reached through a validated, unmarked link, so
                // it was in the chain then. (A remove linearizes at its unlink; a
                // reader that finds the node marked but still linked overlaps that
                // remove, so reporting it present is linearizable — no mark check.)
                if c.key == *key {
                    return cur;
                }
                link = &c.next;
                std::mem::swap(&mut s_cur, &mut s_prev);
                stall::point(stall::CR_READ_STEPPED);
            }
        }
    }

    /// A clone of `key`'s value, if present (lockless).
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn get(&self, local: &mut R::Local, key: &K) -> Option<V>
    where
        V: Clone,
    {
        self.get_with(local, key, V::clone)
    }

    /// `f` applied to `key`'s value, if present (lockless; the reference is valid
    /// during the call, so `V` need not be `Clone`).
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn get_with<T>(&self, local: &mut R::Local, key: &K, f: impl FnOnce(&V) -> T) -> Option<T> {
        check_local(&*self.domain, local, "CrHashMap::get");
        let mut g = local.enter();
        let n = Self::search(self.bucket(key), key, &mut g);
        (!n.is_null()).then(|| {
            // SAFETY: protected by `g` (see `search`, [2]), which outlives `f`'s call.
            let n = unsafe { &*n };
            n.live.check();
            f(&n.value)
        })
    }

    /// Whether `key` is present (lockless).
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn contains_key(&self, local: &mut R::Local, key: &K) -> bool {
        check_local(&*self.domain, local, "CrHashMap::contains_key");
        let mut g = local.enter();
        !Self::search(self.bucket(key), key, &mut g).is_null()
    }

    /// Inserts `key → value` if `key` is absent (under the bucket's lock);
    /// `false` if it was present.
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn insert(&self, local: &mut R::Local, key: K, value: V) -> bool {
        check_local(&*self.domain, local, "CrHashMap::insert");
        let b = self.bucket(&key);
        let _w = b.lock.lock();
        // Relaxed (in this walk): we hold the lock, and every change to this chain
        // is made under it, so our loads see the chain as the last writer left it.
        let head = b.head.load(Ordering::Relaxed);
        let mut p = head;
        while !p.is_null() {
            // SAFETY: under the lock, every node on the chain is linked (removal
            // unlinks under the lock before retiring), so none is freed.
            let n = unsafe { &*p };
            if n.key == key {
                return false;
            }
            p = n.next.load(Ordering::Relaxed);
        }
        let node = A::alloc(Node {
            live: Liveness::new(),
            next: AtomicPtr::new(head),
            key,
            value,
        });
        // Release: publishes the node (key, value, next) to readers' Acquire loads.
        b.head.store(node.as_ptr(), Ordering::Release);
        true
    }

    /// Removes `key` (under the bucket's lock), returning a clone of its value.
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn remove(&self, local: &mut R::Local, key: &K) -> Option<V>
    where
        V: Clone,
    {
        check_local(&*self.domain, local, "CrHashMap::remove");
        let b = self.bucket(key);
        let mut g = local.enter();
        let w = b.lock.lock();
        let mut link: &AtomicPtr<Node<K, V>> = &b.head;
        // Relaxed: as in `insert` (the lock orders writers).
        let mut p = link.load(Ordering::Relaxed);
        while !p.is_null() {
            // SAFETY: as in `insert`.
            let n = unsafe { &*p };
            let next = n.next.load(Ordering::Relaxed);
            if n.key == *key {
                let v = n.value.clone();
                // [1] Mark, then [2] unlink. Release on both: a reader that sees
                // the mark (or the new link) also sees everything before it.
                n.next.store(next.map_addr(|a| a | MARK), Ordering::Release);
                link.store(next, Ordering::Release);
                drop(w);
                // SAFETY: unlinked by us ([2]) under the lock, so retired once;
                // `free_node` frees what `A::alloc` made, from any thread.
                unsafe { g.retire_raw(p.cast(), free_node::<K, V, A>) };
                return Some(v);
            }
            link = &n.next;
            p = next;
        }
        None
    }

    /// The number of entries (each bucket counted under its lock, one after
    /// another: approximate under concurrent updates).
    pub fn len(&self) -> usize {
        let mut total = 0;
        for b in self.buckets.iter() {
            let _w = b.lock.lock();
            // Relaxed: under the lock, as in `insert`.
            let mut p = b.head.load(Ordering::Relaxed);
            while !p.is_null() {
                total += 1;
                // SAFETY: as in `insert`.
                p = unsafe { &*p }.next.load(Ordering::Relaxed);
            }
        }
        total
    }

    /// Whether [`len`](Self::len) is 0 (as approximate).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The calling thread's handle: it registers with the domain and announces a
    /// quiescent state every 100 operations.
    pub fn handle(&self) -> CrHashMapHandle<'_, K, V, L, R, A, S>
    where
        K: Sync,
        V: Sync + Clone,
        L: Sync,
        S: Sync,
    {
        RegisteredHandle::new(self)
    }
}

impl<K, V, L: RawMutex, R: Reclaimer, A: NodeAlloc, S> Drop for CrHashMap<K, V, L, R, A, S> {
    fn drop(&mut self) {
        for b in self.buckets.iter() {
            // Relaxed: `&mut self`, no other thread.
            let mut p = b.head.load(Ordering::Relaxed);
            while !p.is_null() {
                // SAFETY: nodes on a chain are linked, owned by the table, visited
                // once; removed ones belong to the domain.
                let next = unsafe { &*p }.next.load(Ordering::Relaxed);
                // SAFETY: as above; freed once, here.
                unsafe { free_node::<K, V, A>(p.cast()) };
                p = next;
            }
        }
    }
}

impl<K, V, L: RawMutex, R: Reclaimer, A: NodeAlloc, S> fmt::Debug for CrHashMap<K, V, L, R, A, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CrHashMap")
            .field("buckets", &self.buckets.len())
            .field("lock", &std::any::type_name::<L>())
            .field("reclaimer", &R::NAME)
            .finish_non_exhaustive()
    }
}

/// One thread's access to a [`CrHashMap`] (see [`RegisteredHandle`]).
pub type CrHashMapHandle<'a, K, V, L, R = Ebr, A = SystemAlloc, S = RandomState> =
    RegisteredHandle<'a, CrHashMap<K, V, L, R, A, S>, K, V>;

impl<K, V, L, R, A, S> RegisteredMap<K, V> for CrHashMap<K, V, L, R, A, S>
where
    K: Hash + Eq + Send + Sync,
    V: Send + Sync + Clone,
    L: RawMutex + Sync,
    R: Reclaimer,
    A: NodeAlloc,
    S: BuildHasher + Sync,
{
    type R = R;
    fn domain(&self) -> &Arc<R> {
        &self.domain
    }
    fn insert_in(&self, local: &mut R::Local, key: K, value: V) -> bool {
        self.insert(local, key, value)
    }
    fn get_in(&self, local: &mut R::Local, key: &K) -> Option<V> {
        self.get(local, key)
    }
    fn remove_in(&self, local: &mut R::Local, key: &K) -> Option<V> {
        self.remove(local, key)
    }
    fn contains_key_in(&self, local: &mut R::Local, key: &K) -> bool {
        self.contains_key(local, key)
    }
}

impl<K, V, L, R, A, S> ConcurrentMap<K, V> for CrHashMap<K, V, L, R, A, S>
where
    K: Hash + Eq + Send + Sync,
    V: Send + Sync + Clone,
    L: RawMutex + Send + Sync,
    R: Reclaimer,
    A: NodeAlloc,
    S: BuildHasher + Send + Sync,
{
    type Handle<'a>
        = CrHashMapHandle<'a, K, V, L, R, A, S>
    where
        Self: 'a;

    fn handle(&self) -> Self::Handle<'_> {
        CrHashMap::handle(self)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::ds::map::MapHandle;
    use crate::lock::TasB;
    use crate::reclaim::{HazardPointers, Leak, Qsbr};
    use std::sync::atomic::AtomicUsize;

    fn sequential<R: Reclaimer + Default>() {
        let m: CrHashMap<u32, u32, TasB, R> = CrHashMap::with_buckets(3).unwrap();
        let mut h = m.handle();
        for k in 0..10 {
            assert!(h.insert(k, k * 10));
        }
        assert!(!h.insert(4, 0));
        assert_eq!(h.get(&4), Some(40));
        assert_eq!(h.remove(&4), Some(40));
        assert_eq!(h.remove(&4), None);
        assert!(!h.contains_key(&4));
        assert!(h.contains_key(&5));
        assert_eq!(m.get_with(h.local(), &5, |v| v + 1), Some(51));
        assert_eq!(m.get_with(h.local(), &4, |v| v + 1), None);
        h.quiescent();
        drop(h);
        assert_eq!(m.len(), 9);
        assert!(!m.is_empty());
        assert_eq!(m.domain().stats().retired, 1);
    }

    #[test]
    fn sequential_with_every_scheme() {
        sequential::<Ebr>();
        sequential::<Qsbr>();
        sequential::<HazardPointers>();
        sequential::<Leak>();
    }

    #[derive(Clone)]
    struct Counted<'a>(&'a AtomicUsize);
    impl Drop for Counted<'_> {
        fn drop(&mut self) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[test]
    fn values_are_dropped_exactly_once() {
        let drops = AtomicUsize::new(0);
        {
            let m: CrHashMap<u32, Counted<'_>, TasB, Qsbr> = CrHashMap::with_buckets(2).unwrap();
            let mut h = m.handle();
            for k in 0..5 {
                assert!(h.insert(k, Counted(&drops)));
            }
            drop(h.remove(&1));
            assert_eq!(drops.load(std::sync::atomic::Ordering::Relaxed), 1);
        }
        assert_eq!(drops.load(std::sync::atomic::Ordering::Relaxed), 6);
        assert!(CrHashMap::<u8, u8, TasB>::with_buckets(0).is_err());
        let m: CrHashMap<u8, u8, TasB, Leak> = CrHashMap::with_buckets(2).unwrap();
        assert!(format!("{m:?}").starts_with("CrHashMap { buckets: 2"));
        assert!(format!("{:?}", m.handle()).starts_with("RegisteredHandle { map: CrHashMap"));
    }
}
