//! Hart's concurrently-readable (CR) hash table: lockless readers, writers under
//! a per-bucket lock — the RCU-style table of papers/002_… §3.3 (McKenney's) —
//! that can also grow and shrink while it is read.
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
//! protects the chain hand over hand (as in [`hm_list`](super::hm_list)), and
//! a node it finds marked may be one whose successor is already freed (hazard
//! pointers: the node was unlinked, the successor removed after it). So a
//! reader **steps over** a marked node only while that node is still linked —
//! it protects the successor, then checks that the link that led it to the
//! node still points there. A writer marks and unlinks under the bucket lock,
//! so a node marked and still linked is one whose writer holds the lock: its
//! successor cannot have been removed. Otherwise the reader restarts from the
//! head (the unlink is done: a writer completed a step). The reader never waits
//! for the unlink: a writer stopped between its mark and its unlink delays no
//! reader. Under QSBR and EBR the check is never needed for safety, but the
//! same code is kept for all schemes. Insert-if-absent, as the other tables
//! ([`map`](super::map)).
//!
//! # Resize
//!
//! The bucket array (a *table*) hangs off one atomic pointer. Every operation
//! first protects the current table (hazard slot 2; the epoch schemes' guard
//! covers it), then works in it. [`resize`](CrHashMap::resize) — explicit, or
//! automatic for a table made by [`new`](CrHashMap::new) or
//! [`with_policy`](CrHashMap::with_policy) ([`ResizePolicy`]) — is a *copying*
//! resize:
//!
//! 1. take the resize lock (one resizer at a time), then every bucket lock of
//!    the current table `T`, in index order (a writer holds at most one bucket
//!    lock, so this cannot deadlock); `T` is now frozen: no writer changes it;
//! 2. build the new table `T'`: a fresh node, with the key and value cloned, for
//!    every node on `T`'s chains (all linked: removal unlinks under the lock);
//! 3. publish `T'` (`Release` store of the table pointer), release the bucket
//!    locks, and retire `T` *as one object* with its chains (a deferred free
//!    that frees the bucket array and every node still on it).
//!
//! Why it is linearizable: a writer locks its bucket in the table it protected
//! and then checks that this table is still the current one, retrying in the new
//! one if not. A resizer publishes only while it holds every bucket lock, so a
//! writer holding a lock of the current table cannot be overtaken by a publish:
//! all updates happen in the current table, one bucket lock at a time, as in a
//! fixed table. A reader that protected `T` before the publish keeps walking
//! `T`: the buckets it reads after step 1 hold exactly the map's contents at the
//! publish (nothing changes between the freeze and the publish), so such a read
//! is linearized at the publish, which lies inside it. Why it is safe: `T`'s
//! nodes are freed only with `T`, and `T` only once no thread protects it (an
//! epoch that moved on, or no hazard on `T`), so a reader in `T` — which holds
//! `T` protected for its whole operation — never reads freed memory; nodes
//! removed from `T` *before* the freeze were retired one by one and are guarded
//! by the hand-over-hand window as before.
//!
//! This is not Triplett–McKenney–Walpole's relativistic resize, which moves
//! nodes between chains without copying ("zip" and "unzip") but needs to *wait
//! for readers* between steps — a grace period that hazard pointers do not
//! offer, and that would make the resizer block on a preempted reader (the very
//! thing a multiprogrammed machine punishes). The copying resize never waits
//! for a reader; its price is one allocation and one `Clone` of each key and
//! value per resize (amortized O(1) per insert: the table doubles), a pause of
//! the writers (not the readers) while it copies, and `K: Clone, V: Clone` for
//! resizing tables.
//!
//! Progress: reads (`get`, `get_with`, `contains_key`, `iter`) are lock-free
//! and never wait for a writer (they restart only after a writer completed an
//! unlink or an insert at the head of the chain they walk); writes and `len`
//! are blocking (a writer preempted holding a bucket's lock delays that
//! bucket's other writers, never its readers; a preempted resizer delays every
//! writer, never a reader). Uses `sched`: through the lock `L`, and the stall
//! points [`stall::CR_READ_STEPPED`], [`stall::CR_MARKED`] and
//! [`stall::CR_RESIZE_FROZEN`].
//!
//! # Keys and values are `'static`
//!
//! Removed nodes and replaced tables are freed by the reclamation domain
//! later, possibly after the table is gone (as for
//! [`LfHashMap`](super::hash#keys-and-values-are-static)):
//!
//! ```compile_fail,E0597
//! use mpsync::ds::cr_hash::CrHashMap;
//! use mpsync::lock::TasB;
//! use mpsync::reclaim::{Ebr, Reclaimer};
//! use mpsync::sync::Arc;
//! use std::collections::hash_map::RandomState;
//!
//! let domain = Arc::new(Ebr::new());
//! let l = Ebr::register(&domain); // keeps the domain alive after the table
//! {
//!     let name = String::from("borrowed");
//!     let m: CrHashMap<&str, u32, TasB, Ebr> =
//!         CrHashMap::with_domain(8, domain.clone(), RandomState::new()).unwrap();
//!     m.insert(&l, &name, 1); // error: `name` does not live long enough ('static)
//! }
//! ```
//!
//! # Your code inside an operation
//!
//! - **`Drop`** of a key or value never runs under one of the table's locks:
//!   a remove retires its node after unlocking, and a resize retires the table
//!   it replaced — whose keys and values may be dropped at once — only after
//!   releasing every lock. So a drop, wherever reclamation runs it (inside
//!   any operation of the domain, a resize's included), may do anything: read,
//!   write, count or resize this table, through
//!   [`Auto`](super::handle::Auto), a handle or a registration of its own (one kept in a
//!   `thread_local!` too, even the one the running operation itself uses).
//! - **Readers** (`get`, `get_with`, `contains_key`, `iter`, and the code that
//!   consumes an iterator) run `Eq` and `Clone` holding no lock: anything.
//! - **Writers** run `Eq` (insert, remove) and `V::clone` (remove) under the
//!   bucket's lock, and a resize runs `Hash` and `Clone` of every entry under
//!   all of them (`Hash` of an insert's or remove's key runs before the lock).
//!   From there the lock-free reads of any table work; an operation that takes
//!   a lock of this or another lock-based or CR table (`insert`, `remove`,
//!   `resize`, `len`, every [`LockedHashMap`](super::locked_hash::LockedHashMap)
//!   operation) **panics**, rather than wait for a lock its own thread holds.
//! - A **panic** in `Hash`, `Eq` or `Clone` propagates out of the operation
//!   and leaves the table as it was (the insert or remove not done; a resize
//!   not done, the old table in place); no lock stays held. A key whose drop
//!   panics still has its value dropped and its node freed.
//!
//! ```
//! use mpsync::ds::cr_hash::CrHashMap;
//! use mpsync::ds::map::{ConcurrentMap, MapHandle};
//! use mpsync::lock::TasBNp;
//! use mpsync::reclaim::HazardPointers;
//!
//! // Grows and shrinks by itself (default `ResizePolicy`).
//! let m: CrHashMap<u32, u32, TasBNp, HazardPointers> = CrHashMap::new();
//! let mut h = m.handle();
//! for k in 0..1000 {
//!     assert!(h.insert(k, k * 10));
//! }
//! assert_eq!(h.get(&7), Some(70));
//! assert!(m.buckets() >= 1000 / 2);
//! assert_eq!(h.remove(&7), Some(70));
//! assert!(!h.contains_key(&7));
//!
//! // Or a fixed bucket count, resized only when asked.
//! let f: CrHashMap<u32, u32, TasBNp, HazardPointers> = CrHashMap::with_buckets(32).unwrap();
//! let mut h = f.handle();
//! assert!(h.insert(1, 10));
//! f.resize(h.local(), 4).unwrap();
//! assert_eq!((f.buckets(), h.get(&1)), (4, Some(10)));
//! ```

use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::ptr;

use lock_api::{Mutex, RawMutex};

use super::alloc::{NodeAlloc, SystemAlloc};
use super::lf::{Liveness, check_local};
use super::map::{
    ConcurrentMap, MapError, RegisteredHandle, RegisteredMap, UnderLock, drop_pair_and_free,
    free_chains,
};
#[cfg(not(loom))]
use crate::reclaim::ProtectsReachable;
use crate::reclaim::{Ebr, Guard, Header, Local, Reclaimer};
use crate::sched::stall;
use crate::sync::{Arc, AtomicPtr, AtomicUsize, Ordering};
use crate::util::CachePadded;

/// The hazard slot that protects the current table (slots 0 and 1 are the
/// chain's hand-over-hand window, [`SPARE_SLOT`] its third node).
const TABLE_SLOT: usize = 2;

/// The readers' third window slot: the successor of a node being removed,
/// which a reader protects before it steps over that node (see `read_chain`).
/// With [`TABLE_SLOT`], hazard-pointer domains need 4 slots per thread.
const SPARE_SLOT: usize = 3;

/// A chain node. `#[repr(C)]` with the [`Liveness`] first (the loom test
/// allocator relies on it).
#[repr(C)]
struct Node<K, V, R: Reclaimer> {
    live: Liveness,
    /// The scheme's per-node header (zero-sized today).
    hdr: Header<R>,
    next: AtomicPtr<Node<K, V, R>>,
    key: K,
    value: V,
}

/// A bucket: the writers' lock and the chain's head.
struct Bucket<K, V, L: RawMutex, R: Reclaimer> {
    lock: Mutex<L, ()>,
    head: AtomicPtr<Node<K, V, R>>,
}

/// A bucket array and, through it, the nodes on its chains, which it owns: a
/// table retired by a resize frees them with it. `#[repr(C)]` with the
/// [`Liveness`] first (under loom a freed table is marked dead, not freed).
#[repr(C)]
struct Table<K, V, L: RawMutex, R: Reclaimer, A: NodeAlloc> {
    live: Liveness,
    buckets: Box<[Bucket<K, V, L, R>]>,
    _owns: PhantomData<(K, V, A)>,
}

impl<K, V, L: RawMutex, R: Reclaimer, A: NodeAlloc> Table<K, V, L, R, A> {
    fn new(n: usize) -> Self {
        Self {
            live: Liveness::new(),
            buckets: (0..n)
                .map(|_| Bucket {
                    lock: Mutex::new(()),
                    head: AtomicPtr::new(ptr::null_mut()),
                })
                .collect(),
            _owns: PhantomData,
        }
    }

    /// Key hash `h`'s bucket (multiply-shift: any bucket count).
    #[inline]
    fn bucket(&self, h: u64) -> &Bucket<K, V, L, R> {
        &self.buckets[((u128::from(h) * self.buckets.len() as u128) >> 64) as usize]
    }

    /// Frees every node on the chains (the table's own memory stays); a
    /// panicking drop of one does not stop the others ([`free_chains`]).
    fn free_chains(&mut self) {
        // Relaxed (here and below): `&mut self`, no other thread. Each head is
        // cleared first: the nodes are reached only through the joined chain.
        let heads = self
            .buckets
            .iter()
            .map(|b| b.head.swap(ptr::null_mut(), Ordering::Relaxed));
        // SAFETY: nodes on a chain are linked (removed ones belong to the
        // domain), owned by the table, and freed once, each `next` read before.
        unsafe {
            free_chains(
                heads,
                |p| (*p).next.load(Ordering::Relaxed),
                |p, n| (*p).next.store(n, Ordering::Relaxed),
                free_node::<K, V, R, A>,
            )
        };
    }
}

impl<K, V, L: RawMutex, R: Reclaimer, A: NodeAlloc> Drop for Table<K, V, L, R, A> {
    fn drop(&mut self) {
        self.free_chains();
    }
}

/// A table made by a resize, before it is published.
type TableBox<K, V, L, R, A> = Box<Table<K, V, L, R, A>>;

/// Frees a table retired by a resize, with the nodes on its chains. Under loom
/// the table is marked dead and kept, so a reader that uses it afterwards fails
/// the model (its nodes go to `A`, which the loom tests make poisoning too).
///
/// # Safety
/// `p` came from `Box::<Table<K, V, L, R, A>>::into_raw`, no thread can reach it or
/// its nodes any more, and it is freed once.
unsafe fn free_table<K, V, L: RawMutex, R: Reclaimer, A: NodeAlloc>(p: *mut u8) {
    let t = p.cast::<Table<K, V, L, R, A>>();
    #[cfg(not(loom))]
    // SAFETY: the contract: a box nobody reaches, dropped (with its chains) once.
    drop(unsafe { Box::from_raw(t) });
    #[cfg(loom)]
    // SAFETY: as above; the table itself is leaked, only its liveness killed.
    unsafe {
        (*t).free_chains();
        Liveness::kill(p);
    }
}

const MARK: usize = 1;

/// Drops a node's key and value and gives its memory back to `A` (panic-safely:
/// see [`drop_pair_and_free`]).
///
/// # Safety
/// `p` came from `A::alloc::<Node<K, V, R>>`, no thread can reach it any more, and it
/// is freed once.
unsafe fn free_node<K, V, R: Reclaimer, A: NodeAlloc>(p: *mut u8) {
    let n = p.cast::<Node<K, V, R>>();
    // SAFETY: the contract: a live node nobody else reaches; key and value moved
    // out and dropped once, its memory freed once, by `A`, which made it.
    unsafe {
        drop_pair_and_free(&raw const (*n).key, &raw const (*n).value, || {
            A::free::<Node<K, V, R>>(p)
        })
    }
}

/// The fewest buckets of a [`CrHashMap::new`] table.
pub const DEFAULT_MIN_BUCKETS: usize = 16;

/// When a [`CrHashMap`] resizes itself: it doubles its buckets when the entries
/// exceed `max_load` per bucket, and halves them (never below `min_buckets`)
/// when they fall under a quarter of that, so the load stays between
/// `max_load / 4` and `max_load` per bucket (a factor-2 band on either side of
/// a resize, so a table at a steady size never resizes back and forth).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResizePolicy {
    min_buckets: usize,
    max_load: usize,
}

impl ResizePolicy {
    /// Grows past `max_load` entries per bucket, never shrinks below
    /// `min_buckets`. Errors if either is 0.
    pub fn new(min_buckets: usize, max_load: usize) -> Result<Self, MapError> {
        if min_buckets == 0 {
            return Err(MapError::ZeroBuckets);
        }
        if max_load == 0 {
            return Err(MapError::ZeroLoad);
        }
        Ok(Self {
            min_buckets,
            max_load,
        })
    }

    /// The fewest buckets the table shrinks to (and starts with).
    pub fn min_buckets(&self) -> usize {
        self.min_buckets
    }

    /// Entries per bucket past which the table doubles.
    pub fn max_load(&self) -> usize {
        self.max_load
    }

    /// The bucket count a table of `buckets` buckets holding `len` entries
    /// should have, or `None` if it is fine as it is.
    pub fn target(&self, buckets: usize, len: usize) -> Option<usize> {
        if len > buckets.saturating_mul(self.max_load) {
            Some(buckets.saturating_mul(2))
        } else if buckets > self.min_buckets && len < buckets.saturating_mul(self.max_load) / 4 {
            Some((buckets / 2).max(self.min_buckets))
        } else {
            None
        }
    }
}

impl Default for ResizePolicy {
    /// [`DEFAULT_MIN_BUCKETS`] buckets at least, at most 2 entries per bucket.
    fn default() -> Self {
        Self::new(DEFAULT_MIN_BUCKETS, 2).expect("valid defaults")
    }
}

/// What [`CrHashMap::compute`] does with a key's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change<V> {
    /// Leave the entry as it is (present or absent).
    Keep,
    /// Give the key this value: insert it, or replace the present value.
    Set(V),
    /// Remove the key, if present.
    Remove,
}

/// A key handed to [`CrHashMap::compute_in`]: borrowed (cloned if a node is
/// made for it) or owned (moved into the node).
enum KeyIn<'a, K> {
    Borrowed(&'a K),
    Owned(K),
}

impl<K: Clone> KeyIn<'_, K> {
    fn get(&self) -> &K {
        match self {
            KeyIn::Borrowed(k) => k,
            KeyIn::Owned(k) => k,
        }
    }

    fn into_owned(self) -> K {
        match self {
            KeyIn::Borrowed(k) => k.clone(),
            KeyIn::Owned(k) => k,
        }
    }
}

/// A resizing table's policy and its copying resize (which needs `K: Clone,
/// V: Clone`, bounds the operations themselves do not have).
struct Auto<M: ?Sized, Lc> {
    policy: ResizePolicy,
    /// The resize step, called with the local registration after an insert
    /// or remove crossed a threshold.
    run: fn(&M, &Lc),
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
    table: AtomicPtr<Table<K, V, L, R, A>>,
    /// The current table's bucket count (for [`buckets`](Self::buckets)).
    nbuckets: AtomicUsize,
    /// Entries, counted under the bucket locks (resizing tables only).
    count: CachePadded<AtomicUsize>,
    auto: Option<Auto<Self, R::Local>>,
    /// One resizer at a time; also keeps the table in place for `len`.
    resize_lock: Mutex<L, ()>,
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
// drop them when it frees a node (`Send`); the locks are shared (`L: Sync`) and
// may be dropped by whichever thread frees a retired table (`L: Send`).
unsafe impl<
    K: Send + Sync,
    V: Send + Sync,
    L: RawMutex + Send + Sync,
    R: Reclaimer,
    A: NodeAlloc,
    S: Sync,
> Sync for CrHashMap<K, V, L, R, A, S>
{
}

impl<K, V, L, R, A, S> CrHashMap<K, V, L, R, A, S>
where
    K: Hash + Eq + Send + Clone + 'static,
    V: Send + Clone + 'static,
    L: RawMutex + Send,
    R: Reclaimer + Default,
    A: NodeAlloc,
    S: BuildHasher + Default,
{
    /// An empty table that grows and shrinks by itself ([`ResizePolicy::default`]),
    /// with a domain of its own.
    pub fn new() -> Self {
        Self::with_policy(
            ResizePolicy::default(),
            Arc::new(R::default()),
            S::default(),
        )
    }
}

impl<K, V, L, R, A, S> Default for CrHashMap<K, V, L, R, A, S>
where
    K: Hash + Eq + Send + Clone + 'static,
    V: Send + Clone + 'static,
    L: RawMutex + Send,
    R: Reclaimer + Default,
    A: NodeAlloc,
    S: BuildHasher + Default,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<K: 'static, V: 'static, L: RawMutex, R: Reclaimer + Default, A: NodeAlloc, S>
    CrHashMap<K, V, L, R, A, S>
where
    S: BuildHasher + Default,
{
    /// An empty table of `buckets` buckets (resized only by
    /// [`resize`](Self::resize)). Errors if `buckets` is 0.
    pub fn with_buckets(buckets: usize) -> Result<Self, MapError> {
        Self::with_domain(buckets, Arc::new(R::default()), S::default())
    }
}

impl<K: 'static, V: 'static, L: RawMutex, R: Reclaimer, A: NodeAlloc, S>
    CrHashMap<K, V, L, R, A, S>
{
    fn make(buckets: usize, auto: Option<Auto<Self, R::Local>>, domain: Arc<R>, hasher: S) -> Self {
        Self {
            table: AtomicPtr::new(Box::into_raw(Box::new(Table::new(buckets)))),
            nbuckets: AtomicUsize::new(buckets),
            count: CachePadded::new(AtomicUsize::new(0)),
            auto,
            resize_lock: Mutex::new(()),
            hasher,
            domain,
            _owns: PhantomData,
        }
    }

    /// An empty table of `buckets` buckets over `domain` (resized only by
    /// [`resize`](Self::resize); hazard pointers: 4 slots per thread, made on
    /// demand).
    /// Errors if `buckets` is 0.
    pub fn with_domain(buckets: usize, domain: Arc<R>, hasher: S) -> Result<Self, MapError> {
        if buckets == 0 {
            return Err(MapError::ZeroBuckets);
        }
        Ok(Self::make(buckets, None, domain, hasher))
    }
}

impl<K, V, L: RawMutex, R: Reclaimer, A: NodeAlloc, S> CrHashMap<K, V, L, R, A, S> {
    /// The reclamation domain.
    pub fn domain(&self) -> &Arc<R> {
        &self.domain
    }

    /// The current number of buckets (may change at once under a concurrent
    /// resize).
    pub fn buckets(&self) -> usize {
        // Relaxed: a snapshot; nothing is read through it.
        self.nbuckets.load(Ordering::Relaxed)
    }

    /// The resize policy, for a table that resizes itself.
    pub fn policy(&self) -> Option<ResizePolicy> {
        self.auto.as_ref().map(|a| a.policy)
    }
}

impl<K, V, L, R, A, S> CrHashMap<K, V, L, R, A, S>
where
    K: Hash + Eq + Send + Clone + 'static,
    V: Send + Clone + 'static,
    L: RawMutex + Send,
    R: Reclaimer,
    A: NodeAlloc,
    S: BuildHasher,
{
    /// An empty table of `policy.min_buckets()` buckets over `domain`, which
    /// grows and shrinks by itself as `policy` says (hazard pointers: 4
    /// slots per thread, made on demand).
    pub fn with_policy(policy: ResizePolicy, domain: Arc<R>, hasher: S) -> Self {
        let auto = Auto {
            policy,
            run: Self::auto_resize,
        };
        Self::make(policy.min_buckets, Some(auto), domain, hasher)
    }

    /// Rebuilds the table with `buckets` buckets (see the [module
    /// documentation](self#resize)): readers go on meanwhile, writers wait. A
    /// table that resizes itself may resize again later. Errors if `buckets` is 0.
    ///
    /// May be called from a key's or value's `Drop` (also one that a resize
    /// runs: see [Your code inside an operation](self#your-code-inside-an-operation)).
    ///
    /// # Panics
    /// If `local` is registered with another domain; if a key's `Hash` or a
    /// key's or value's `Clone` panics (the table is then left as it was); if
    /// called from a `Hash`, `Eq` or `Clone` that a table runs under its locks.
    pub fn resize(&self, local: &R::Local, buckets: usize) -> Result<(), MapError> {
        check_local(&*self.domain, local, "CrHashMap::resize");
        if buckets == 0 {
            return Err(MapError::ZeroBuckets);
        }
        self.resize_with(local, "CrHashMap::resize", |_| Some(buckets));
        Ok(())
    }

    /// The policy's resize, after an update crossed a threshold: re-decided
    /// under the resize lock (another thread may have resized already).
    fn auto_resize(&self, local: &R::Local) {
        let Some(auto) = &self.auto else { return };
        self.resize_with(local, "CrHashMap's automatic resize", |buckets| {
            // Relaxed: a hint; the count is exact under all bucket locks, not here.
            auto.policy
                .target(buckets, self.count.load(Ordering::Relaxed))
        });
    }

    /// The copying resize (module documentation, steps 1–3) to the bucket
    /// count `target` picks for the current one (`None`, or the same count: no
    /// resize), decided under the resize lock.
    ///
    /// No user `Drop` runs while a lock is held: a `Hash` or `Clone` that
    /// panics unwinds out of every lock before the partial copy is dropped,
    /// and the replaced table is retired — which may free it at once, dropping
    /// its keys and values — only after every lock is released, so those drops
    /// may use the table, resize it included.
    fn resize_with(
        &self,
        local: &R::Local,
        op: &'static str,
        target: impl FnOnce(usize) -> Option<usize>,
    ) {
        // Declared before the locks, so dropped after them when a `clone` or
        // `hash` unwinds: the copy made so far, and a key cloned for a node
        // whose value's clone panicked, are dropped with no lock held.
        let mut new: Option<TableBox<K, V, L, R, A>> = None;
        let mut key: Option<K>;
        let old = {
            let _u = UnderLock::enter(op);
            let _r = self.resize_lock.lock();
            // Acquire: pairs with the previous resizer's Release publish. Only a
            // resizer replaces or retires tables, and we hold the resize lock.
            let old = self.table.load(Ordering::Acquire);
            // SAFETY: the current table, which only we (the resizer) could retire.
            let t = unsafe { &*old };
            let n = t.buckets.len();
            let Some(buckets) = target(n).filter(|&b| b != n) else {
                return;
            };
            // [1] Freeze: every bucket lock, in index order.
            let held: Vec<_> = t.buckets.iter().map(|b| b.lock.lock()).collect();
            // [2] Copy.
            let nt = new.insert(Box::new(Table::<K, V, L, R, A>::new(buckets)));
            for b in t.buckets.iter() {
                // Relaxed: under the bucket lock, as in `insert`.
                let mut p = b.head.load(Ordering::Relaxed);
                while !p.is_null() {
                    // SAFETY: as in `insert`: linked under the lock, so not freed.
                    let n = unsafe { &*p };
                    let nb = nt.bucket(self.hasher.hash_one(&n.key));
                    key = Some(n.key.clone());
                    let value = n.value.clone();
                    // Relaxed: `new` is not shared yet; [3]'s Release publishes it all.
                    let head = nb.head.load(Ordering::Relaxed);
                    let copy = A::alloc(Node {
                        live: Liveness::new(),
                        hdr: Header::of_local(local),
                        next: AtomicPtr::new(head),
                        key: key.take().expect("cloned just above"),
                        value,
                    });
                    nb.head.store(copy.as_ptr(), Ordering::Relaxed);
                    p = n.next.load(Ordering::Relaxed);
                }
            }
            stall::point(stall::CR_RESIZE_FROZEN);
            // [3] Publish. Release: pairs with the Acquire in `current` (readers
            // and writers see the copied chains); a writer waiting on a lock of
            // `old` sees it after the unlock (the lock's own ordering).
            self.nbuckets.store(buckets, Ordering::Relaxed);
            let nt = new.take().expect("made above");
            self.table.store(Box::into_raw(nt), Ordering::Release);
            drop(held);
            old
        };
        // Every lock released: reclamation (which may run users' drops) only now.
        let g = local.enter();
        // SAFETY: `old` is no longer the current table, so no new operation
        // reaches it or its nodes; it is retired once (by the resizer that
        // replaced it: the next resizer finds the new table current); `free_table`
        // frees what `Box::new` made, with its chains, from any thread (`K`, `V`,
        // `L`: `Send`).
        unsafe { g.retire_raw(old.cast(), free_table::<K, V, L, R, A>) };
    }
}

impl<K, V, L, R, A, S> CrHashMap<K, V, L, R, A, S>
where
    K: Hash + Eq + Send,
    V: Send,
    L: RawMutex + Send,
    R: Reclaimer,
    A: NodeAlloc,
    S: BuildHasher,
{
    /// The current table, protected by `g` (hazard slot [`TABLE_SLOT`]) for
    /// as long as `g` lives.
    #[inline]
    fn current<'g, G: Guard>(&self, g: &'g G) -> &'g Table<K, V, L, R, A> {
        // SAFETY: protected (validated against the table pointer: not retired
        // then), so not freed while `g` holds it (nothing else protects into
        // `TABLE_SLOT`). Never null: a map always has a table.
        let t = unsafe { g.protect(TABLE_SLOT, &self.table).deref() };
        t.live.check();
        t
    }

    /// Locks the bucket of hash `h` in the current table (protected by `g`),
    /// inside an [`UnderLock`] region for operation `op` (entered before the
    /// lock is taken: a call from a `Hash`/`Eq`/`Clone` run under a table's
    /// lock panics instead of waiting).
    fn lock_bucket<'g, G: Guard>(
        &self,
        g: &'g G,
        h: u64,
        op: &'static str,
    ) -> Locked<'g, K, V, L, R> {
        let region = UnderLock::enter(op);
        loop {
            let t: &'g Table<K, V, L, R, A> = self.current(g);
            let b = t.bucket(h);
            let w = b.lock.lock();
            // Relaxed: a resizer changes the pointer only while it holds every
            // bucket lock of `t`, and we hold one: if it was replaced, the
            // unlock we acquired ordered the store before this load.
            if ptr::eq(self.table.load(Ordering::Relaxed), t) {
                return Locked {
                    bucket: b,
                    _lock: w,
                    _region: region,
                };
            }
            // `t` was replaced while we waited: retry in the new table.
        }
    }

    /// The reader's search: `key`'s node, protected by `g` until `g` protects
    /// into its slots again ([`read_chain`]), or `None`.
    fn search<'g, G: Guard, Q>(
        b: &'g Bucket<K, V, L, R>,
        key: &Q,
        g: &'g G,
    ) -> Option<&'g Node<K, V, R>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        // Present: reached through a validated link (see `read_chain`), so in
        // the chain then. (A remove linearizes at its unlink; a reader that
        // finds the node marked but still linked overlaps that remove, so
        // reporting it present is linearizable — no mark check.)
        read_chain(
            b,
            g,
            |seen| matches!(seen, Seen::Node(c) if c.key.borrow() == key),
        )
    }

    /// A clone of `key`'s value, if present (lockless).
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn get<Q>(&self, local: &R::Local, key: &Q) -> Option<V>
    where
        V: Clone,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get_with(local, key, V::clone)
    }

    /// `f` applied to `key`'s value, if present (lockless; the reference is valid
    /// during the call, so `V` need not be `Clone`).
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn get_with<T, Q>(&self, local: &R::Local, key: &Q, f: impl FnOnce(&V) -> T) -> Option<T>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        check_local(&*self.domain, local, "CrHashMap::get");
        let g = local.enter();
        let h = self.hasher.hash_one(key);
        let b = self.current(&g).bucket(h);
        Self::search(b, key, &g).map(|n| {
            n.live.check();
            f(&n.value)
        })
    }

    /// `key`'s value, borrowed for as long as `g` lives (lockless). Only over
    /// schemes that protect everything reachable: the node stays allocated
    /// until `g` ends even if it is removed meanwhile.
    ///
    /// # Safety
    /// `g` is a guard of a registration in this map's [`domain`](Self::domain).
    #[cfg(not(loom))]
    pub(crate) unsafe fn get_pinned<'g, G: Guard, Q>(&'g self, g: &'g G, key: &Q) -> Option<&'g V>
    where
        R: ProtectsReachable,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let h = self.hasher.hash_one(key);
        let b = self.current(g).bucket(h);
        // The node was reached under `g` (see `search`); `R: ProtectsReachable`
        // and the caller's contract (a guard of this domain) keep it, and the
        // table it is on, allocated until `g` ends.
        Self::search(b, key, g).map(|n| {
            n.live.check();
            &n.value
        })
    }

    /// The entries of the current table, borrowed for as long as `g` lives
    /// (as [`get_pinned`](Self::get_pinned)), weakly consistent as
    /// [`iter`](Self::iter).
    ///
    /// # Safety
    /// As [`get_pinned`](Self::get_pinned).
    #[cfg(not(loom))]
    pub(crate) unsafe fn iter_pinned<'g, G: Guard>(
        &'g self,
        g: &'g G,
    ) -> PinnedIter<'g, K, V, L, R, A, G>
    where
        R: ProtectsReachable,
    {
        PinnedIter {
            table: self.current(g),
            guard: g,
            next_bucket: 0,
            buf: Vec::new().into_iter(),
        }
    }

    /// Whether `key` is present (lockless).
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn contains_key<Q>(&self, local: &R::Local, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        check_local(&*self.domain, local, "CrHashMap::contains_key");
        let g = local.enter();
        let h = self.hasher.hash_one(key);
        let b = self.current(&g).bucket(h);
        Self::search(b, key, &g).is_some()
    }

    /// Inserts `key → value` if `key` is absent (under the bucket's lock);
    /// `false` if it was present. A resizing table may then resize (the caller
    /// does the copying).
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    #[must_use = "insert does not replace: `false` means the key was present and `value` was dropped"]
    pub fn insert(&self, local: &R::Local, key: K, value: V) -> bool {
        check_local(&*self.domain, local, "CrHashMap::insert");
        let g = local.enter();
        let h = self.hasher.hash_one(&key);
        let locked = self.lock_bucket(&g, h, "CrHashMap::insert");
        let b = locked.bucket;
        // Relaxed (in this walk): we hold the lock, and every change to this chain
        // is made under it, so our loads see the chain as the last writer left it.
        let head = b.head.load(Ordering::Relaxed);
        let mut p = head;
        while !p.is_null() {
            // SAFETY: under the lock, every node on the chain is linked (removal
            // unlinks under the lock before retiring), so none is freed.
            let n = unsafe { &*p };
            if n.key == key {
                // Unlocks; `key` and `value` are dropped after, with no lock held.
                drop(locked);
                return false;
            }
            p = n.next.load(Ordering::Relaxed);
        }
        let node = A::alloc(Node {
            live: Liveness::new(),
            hdr: Header::new(&g),
            next: AtomicPtr::new(head),
            key,
            value,
        });
        // Release: publishes the node (key, value, next) to readers' Acquire loads.
        b.head.store(node.as_ptr(), Ordering::Release);
        let len = self.counted(1);
        drop(locked);
        drop(g);
        self.maybe_resize(local, len);
        true
    }

    /// Removes `key` (under the bucket's lock), returning a clone of its value.
    /// A resizing table may then resize.
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn remove<Q>(&self, local: &R::Local, key: &Q) -> Option<V>
    where
        V: Clone,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        check_local(&*self.domain, local, "CrHashMap::remove");
        let g = local.enter();
        let h = self.hasher.hash_one(key);
        let locked = self.lock_bucket(&g, h, "CrHashMap::remove");
        let mut link: &AtomicPtr<Node<K, V, R>> = &locked.bucket.head;
        // Relaxed: as in `insert` (the lock orders writers).
        let mut p = link.load(Ordering::Relaxed);
        while !p.is_null() {
            // SAFETY: as in `insert`.
            let n = unsafe { &*p };
            let next = n.next.load(Ordering::Relaxed);
            if n.key.borrow() == key {
                let v = n.value.clone();
                // [1] Mark, then [2] unlink. Release on both: a reader that sees
                // the mark (or the new link) also sees everything before it.
                n.next.store(next.map_addr(|a| a | MARK), Ordering::Release);
                stall::point(stall::CR_MARKED);
                link.store(next, Ordering::Release);
                let len = self.counted(-1);
                drop(locked);
                // No lock held: the retire may run users' drops.
                // SAFETY: unlinked by us ([2]) under the lock, so retired once;
                // `free_node` frees what `A::alloc` made, from any thread.
                unsafe { g.retire_raw(p.cast(), free_node::<K, V, R, A>) };
                drop(g);
                self.maybe_resize(local, len);
                return Some(v);
            }
            link = &n.next;
            p = next;
        }
        None
    }

    /// Changes `key`'s entry as `f` decides, atomically: under the bucket's
    /// lock, `f` sees the key's value (`None`: absent) and returns what to do
    /// with the entry ([`Change`]) and a result for the caller. No other
    /// writer changes the key between what `f` saw and the change; lockless
    /// readers see the entry before or after it, never between. A resizing
    /// table may then resize. The key is cloned when a node is made for it
    /// ([`Change::Set`]); [`compute_owned`](Self::compute_owned) moves it instead.
    ///
    /// A [`Set`](Change::Set) over a present key replaces its node (RCU-style:
    /// a new node with the new value takes the old one's place in the chain;
    /// the old one is marked first, then unlinked by that store, then retired:
    /// readers still on it read the old value, which stays valid under their
    /// guard).
    ///
    /// `f` runs under the bucket's lock, as `Eq` and `Clone` of writers do (see
    /// [Your code inside an operation](self#your-code-inside-an-operation)): it
    /// may read any table lock-free; a lock-taking operation started from it
    /// panics. A panic in `f` (or in the key's `Clone`) leaves the entry as it
    /// was and the lock released; the value `f` returned is then dropped after
    /// the unlock.
    ///
    /// ```
    /// use mpsync::ds::cr_hash::{Change, CrHashMap};
    /// use mpsync::lock::SpinThenPark;
    /// use mpsync::reclaim::{HazardPointers, Reclaimer};
    ///
    /// let m: CrHashMap<&str, u64, SpinThenPark, HazardPointers> = CrHashMap::new();
    /// let l = HazardPointers::register(m.domain());
    /// // Count a word: insert 1, or add 1 to what is there; return the old count.
    /// let bump = |old: Option<&u64>| (Change::Set(old.map_or(1, |n| n + 1)), old.copied());
    /// assert_eq!(m.compute(&l, &"a", bump), None);
    /// assert_eq!(m.compute(&l, &"a", bump), Some(1));
    /// assert_eq!(m.get(&l, &"a"), Some(2));
    /// assert_eq!(m.compute(&l, &"a", |_| (Change::Remove, ())), ());
    /// assert_eq!(m.get(&l, &"a"), None);
    /// ```
    ///
    /// # Panics
    /// If `local` is registered with another domain; if `f` or the key's
    /// `Clone` panics; if called from code a table runs under its lock.
    pub fn compute<T>(
        &self,
        local: &R::Local,
        key: &K,
        f: impl FnOnce(Option<&V>) -> (Change<V>, T),
    ) -> T
    where
        K: Clone,
    {
        self.compute_in(local, KeyIn::Borrowed(key), f)
    }

    /// As [`compute`](Self::compute), with the key moved into the node a
    /// [`Change::Set`] makes (no `Clone` of the key); a key not stored is
    /// dropped after the unlock.
    ///
    /// # Panics
    /// As [`compute`](Self::compute).
    pub fn compute_owned<T>(
        &self,
        local: &R::Local,
        key: K,
        f: impl FnOnce(Option<&V>) -> (Change<V>, T),
    ) -> T
    where
        K: Clone,
    {
        self.compute_in(local, KeyIn::Owned(key), f)
    }

    fn compute_in<T>(
        &self,
        local: &R::Local,
        key: KeyIn<'_, K>,
        f: impl FnOnce(Option<&V>) -> (Change<V>, T),
    ) -> T
    where
        K: Clone,
    {
        check_local(&*self.domain, local, "CrHashMap::compute");
        let g = local.enter();
        let h = self.hasher.hash_one(key.get());
        // Declared before the lock, so dropped after it also when something
        // unwinds under the lock: the value to store and the caller's result
        // (users' drops never run under a table's lock).
        let mut held: (Option<V>, Option<T>) = (None, None);
        // The key, until it moves into a node (else dropped after the unlock).
        let mut key = Some(key);
        let locked = self.lock_bucket(&g, h, "CrHashMap::compute");
        let b = locked.bucket;
        let k = key.as_ref().expect("set above").get();
        // Relaxed (in this walk): as in `insert` (the lock orders writers).
        let mut link: &AtomicPtr<Node<K, V, R>> = &b.head;
        let mut p = link.load(Ordering::Relaxed);
        let mut found: Option<&Node<K, V, R>> = None;
        while !p.is_null() {
            // SAFETY: as in `insert`: linked under the lock, so not freed.
            let n = unsafe { &*p };
            if n.key == *k {
                found = Some(n);
                break;
            }
            link = &n.next;
            p = n.next.load(Ordering::Relaxed);
        }
        let (change, r) = f(found.map(|n| &n.value));
        held.1 = Some(r);
        let mut retired: *mut Node<K, V, R> = ptr::null_mut();
        let mut delta = 0;
        match change {
            Change::Keep => {}
            Change::Remove => {
                if let Some(n) = found {
                    let next = n.next.load(Ordering::Relaxed);
                    // [1] Mark, then [2] unlink, Release on both, as in `remove`.
                    n.next.store(next.map_addr(|a| a | MARK), Ordering::Release);
                    stall::point(stall::CR_MARKED);
                    link.store(next, Ordering::Release);
                    retired = p;
                    delta = -1;
                }
            }
            Change::Set(v) => {
                held.0 = Some(v);
                // May panic (a key's `Clone`): the value is dropped after the unlock.
                let k = key.take().expect("set above").into_owned();
                let v = held.0.take().expect("set just above");
                // The new node's successor: the replaced node's (it takes its
                // place) or the head (it goes first).
                let succ = match found {
                    Some(n) => n.next.load(Ordering::Relaxed),
                    None => b.head.load(Ordering::Relaxed),
                };
                let node = A::alloc(Node {
                    live: Liveness::new(),
                    hdr: Header::new(&g),
                    next: AtomicPtr::new(succ),
                    key: k,
                    value: v,
                });
                match found {
                    Some(n) => {
                        // [1] Mark the old node (a reader standing on it must
                        // not step to its successor once it is unlinked: see
                        // `read_chain`), then [2] put the new one in its place:
                        // the Release store publishes the new node (key, value,
                        // next) and unlinks the old one in one step, the
                        // replacement's linearization point.
                        n.next.store(succ.map_addr(|a| a | MARK), Ordering::Release);
                        stall::point(stall::CR_MARKED);
                        link.store(node.as_ptr(), Ordering::Release);
                        retired = p;
                    }
                    None => {
                        // Release: publishes the node, as in `insert`.
                        b.head.store(node.as_ptr(), Ordering::Release);
                        delta = 1;
                    }
                }
            }
        }
        let len = if delta == 0 { 0 } else { self.counted(delta) };
        drop(locked);
        // No lock held: the retire may run users' drops.
        if !retired.is_null() {
            // SAFETY: unlinked by us ([2]) under the lock, so retired once;
            // `free_node` frees what `A::alloc` made, from any thread.
            unsafe { g.retire_raw(retired.cast(), free_node::<K, V, R, A>) };
        }
        drop(g);
        if delta != 0 {
            self.maybe_resize(local, len);
        }
        drop(key);
        held.1.take().expect("set under the lock")
    }

    /// The entry count a resizing table keeps (counted under the bucket locks:
    /// exact when no update is under way, a hint otherwise), in O(1); `None`
    /// for a fixed table, which counts nothing (use [`len`](Self::len)).
    pub fn len_hint(&self) -> Option<usize> {
        // Relaxed: a snapshot of a counter; nothing is read through it.
        self.auto
            .as_ref()
            .map(|_| self.count.load(Ordering::Relaxed))
    }

    /// Counts an insert (`+1`) or remove (`-1`) of a resizing table, under the
    /// bucket lock; the count after it (0 for a fixed table, which counts
    /// nothing: no shared counter on its writers' path).
    #[inline]
    fn counted(&self, d: isize) -> usize {
        if self.auto.is_none() {
            return 0;
        }
        // Relaxed: a counter; under the bucket locks it is exact once a resizer
        // holds them all, and only a hint otherwise.
        if d > 0 {
            self.count.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            self.count.fetch_sub(1, Ordering::Relaxed) - 1
        }
    }

    #[inline]
    fn maybe_resize(&self, local: &R::Local, len: usize) {
        if let Some(auto) = &self.auto
            && auto.policy.target(self.buckets(), len).is_some()
        {
            (auto.run)(self, local);
        }
    }

    /// The number of entries (each bucket counted under its lock, one after
    /// another, with resizes held off: approximate under concurrent updates).
    pub fn len(&self) -> usize {
        let _u = UnderLock::enter("CrHashMap::len");
        let _r = self.resize_lock.lock();
        // Acquire: pairs with the resizer's Release publish.
        // SAFETY: the current table; only a resizer retires it, and we hold the
        // resize lock.
        let t = unsafe { &*self.table.load(Ordering::Acquire) };
        let mut total = 0;
        for b in t.buckets.iter() {
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

    /// An iterator over clones of the entries, bucket after bucket, under one
    /// guard held until it is dropped (lockless: it takes no lock and never
    /// waits).
    ///
    /// Under concurrent updates and resizes it is *weakly consistent*:
    /// - every key present for the whole iteration is yielded exactly once;
    /// - no key is yielded twice, and a key yielded was present, with that
    ///   value, at some moment during the iteration;
    /// - a key inserted or removed meanwhile may or may not be yielded.
    ///
    /// It walks the table that was current when it was made (a resize meanwhile
    /// does not move it: that table is frozen with the entries it held at the
    /// resize), each bucket in one pass whose entries it buffers; a pass that
    /// has to restart (hazard pointers: the node it stood on was removed)
    /// discards its buffer. Under QSBR and EBR the guard holds back reclamation
    /// (of this table and every structure in the domain) while the iterator
    /// lives: drop it when done.
    ///
    /// `local` is shared, not exclusive: while the iterator lives, the same
    /// registration may go on inserting, removing and reading (each operation
    /// takes a guard of its own beside the iterator's; see
    /// [`Local::enter`]).
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    ///
    /// ```
    /// use mpsync::ds::cr_hash::CrHashMap;
    /// use mpsync::lock::TasB;
    /// use mpsync::reclaim::{Ebr, HazardPointers, Reclaimer};
    ///
    /// let m: CrHashMap<u32, u32, TasB, Ebr> = CrHashMap::new();
    /// let local = Ebr::register(m.domain());
    /// for k in 0..100 {
    ///     assert!(m.insert(&local, k, k * 2));
    /// }
    /// let mut all: Vec<(u32, u32)> = m.iter(&local).collect();
    /// all.sort();
    /// assert_eq!(all, (0..100).map(|k| (k, k * 2)).collect::<Vec<_>>());
    ///
    /// // Updating through the same registration while iterating (here with
    /// // hazard pointers, and a table that resizes itself meanwhile):
    /// let m: CrHashMap<u32, u32, TasB, HazardPointers> = CrHashMap::new();
    /// let local = HazardPointers::register(m.domain());
    /// for k in 0..10 {
    ///     assert!(m.insert(&local, k, k));
    /// }
    /// let mut yielded = 0;
    /// for (k, v) in m.iter(&local) {
    ///     assert_eq!(k, v);
    ///     yielded += 1;
    ///     assert!(m.insert(&local, 1000 + k, 1000 + k)); // may or may not be yielded
    ///     assert_eq!(m.get(&local, &(1000 + k)), Some(1000 + k));
    /// }
    /// assert!(yielded >= 10);
    /// ```
    pub fn iter<'l>(&self, local: &'l R::Local) -> Iter<'_, 'l, K, V, L, R, A, S>
    where
        K: Clone,
        V: Clone,
    {
        check_local(&*self.domain, local, "CrHashMap::iter");
        let guard = local.enter();
        // Raw: the iterator keeps the table beside the guard that protects it
        // (a borrow of the guard cannot live in the same struct); see `next`.
        let table: *const Table<K, V, L, R, A> = guard.protect_raw(TABLE_SLOT, &self.table);
        Iter {
            map: self,
            guard,
            table,
            next_bucket: 0,
            buf: Vec::new().into_iter(),
        }
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
        // Relaxed: `&mut self`, no other thread. Retired tables belong to the
        // domain.
        let t = self.table.load(Ordering::Relaxed);
        // SAFETY: the current table came from `Box::into_raw` and is owned by
        // the map; dropping it frees its chains.
        drop(unsafe { Box::from_raw(t) });
    }
}

impl<K, V, L: RawMutex, R: Reclaimer, A: NodeAlloc, S> fmt::Debug for CrHashMap<K, V, L, R, A, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CrHashMap")
            .field("buckets", &self.buckets())
            .field("policy", &self.policy())
            .field("lock", &std::any::type_name::<L>())
            .field("reclaimer", &R::NAME)
            .finish_non_exhaustive()
    }
}

/// A bucket locked by a writer: its lock, and the [`UnderLock`] region around
/// it (fields drop in order: the lock is released first).
struct Locked<'g, K, V, L: RawMutex, R: Reclaimer> {
    bucket: &'g Bucket<K, V, L, R>,
    _lock: lock_api::MutexGuard<'g, L, ()>,
    _region: UnderLock,
}

/// What [`read_chain`] shows its visitor.
enum Seen<'g, K, V, R: Reclaimer> {
    /// A node of the chain, protected by the guard until the walk moves two
    /// nodes on (or returns it).
    Node(&'g Node<K, V, R>),
    /// The walk starts again from the head: forget the nodes shown so far.
    Restart,
}

/// The readers' traversal of bucket `b`'s chain: shows `visit` each node in
/// chain order and returns the first it accepts (`None`: the end).
///
/// Hand over hand under hazard pointers: the predecessor (slot `s_prev`), the
/// node stood on (`s_cur`) and, while stepping, its successor (`s_next`).
/// A node found **marked** is one a writer is removing; the reader does not
/// wait for its unlink, it **steps over** it, if it is still linked:
/// it protects the successor, then re-reads the link that led to the marked
/// node. If that link (of the unmarked predecessor, or the head) still points
/// to it, the node was still in the chain after the successor's hazard was
/// published — so its remover, which marks and unlinks under the bucket lock
/// and releases it only after the unlink, still held the lock, and the
/// successor (removable only under that lock) was in the chain too, and is now
/// protected. Otherwise (the node was unlinked meanwhile, a node inserted at
/// the head) the walk restarts: only a writer's completed step makes it.
/// Lock-free, and never waits for a writer.
fn read_chain<'g, K, V, L: RawMutex, R: Reclaimer, G: Guard>(
    b: &'g Bucket<K, V, L, R>,
    g: &'g G,
    mut visit: impl FnMut(Seen<'g, K, V, R>) -> bool,
) -> Option<&'g Node<K, V, R>> {
    'retry: loop {
        // [1] `link` is the bucket's head or the `next` of the node protected
        // by slot `s_prev`, and pointed to `cur` (unmarked) when `cur` was
        // validated: directly (protected through it), or through marked nodes
        // stepped over, which were still linked.
        let mut link: &'g AtomicPtr<Node<K, V, R>> = &b.head;
        let (mut s_cur, mut s_prev, mut s_next) = (0usize, 1usize, SPARE_SLOT);
        let mut cur = g.protect(s_cur, link);
        loop {
            // SAFETY: [2] `cur` is protected by `s_cur` (not protected into
            // again before the walk moves past it) and was in the chain after
            // its hazard was published: validated against the head, against an
            // unmarked `next` of its predecessor (a node is unlinked only after
            // it is marked, so the predecessor was in the chain then, and so was
            // `cur`), or stepped onto from a marked node still linked (see the
            // function's doc). So it was not retired then, and is not freed while
            // the slot holds it (nor while the table, protected too, lives).
            let c = unsafe { cur.as_ref() }?;
            c.live.check();
            if visit(Seen::Node(c)) {
                return Some(c);
            }
            stall::point(stall::CR_READ_STEPPED);
            let next = g.protect(s_next, &c.next);
            if next.tag() & MARK == 0 {
                // `c` is not being removed: `next` is its successor in the chain.
                link = &c.next;
                (s_prev, s_cur, s_next) = (s_cur, s_next, s_prev);
            } else {
                // `c` is being removed. Acquire: pairs with the writer's Release
                // unlink; the hazard on `next` is published before this load
                // (`protect`'s fence), as Michael's validation needs.
                if link.load(Ordering::Acquire) != cur.as_ptr() {
                    // Unlinked meanwhile (or a node inserted before it): its
                    // successor may be removed and freed by now.
                    visit(Seen::Restart);
                    continue 'retry;
                }
                // Still linked: step over it (`link` stays; `c`'s slot is free).
                (s_cur, s_next) = (s_next, s_cur);
            }
            cur = next.untagged();
        }
    }
}

/// The guard type of scheme `R`.
type GuardOf<'l, R> = <<R as Reclaimer>::Local as Local>::Guard<'l>;

/// The iterator of [`CrHashMap::iter`]: clones of the entries, under a guard.
pub struct Iter<'m, 'l, K, V, L: RawMutex, R: Reclaimer, A: NodeAlloc, S>
where
    R::Local: 'l,
{
    map: &'m CrHashMap<K, V, L, R, A, S>,
    guard: GuardOf<'l, R>,
    /// The table walked: protected by `guard` (slot [`TABLE_SLOT`]).
    table: *const Table<K, V, L, R, A>,
    next_bucket: usize,
    buf: std::vec::IntoIter<(K, V)>,
}

impl<K, V, L, R, A, S> Iter<'_, '_, K, V, L, R, A, S>
where
    K: Clone,
    V: Clone,
    L: RawMutex,
    R: Reclaimer,
    A: NodeAlloc,
{
    /// One pass over bucket `b`'s chain into a fresh buffer ([`read_chain`]);
    /// a pass that restarts empties the buffer.
    fn fill(&mut self, b: &Bucket<K, V, L, R>) -> Vec<(K, V)> {
        let mut out = Vec::new();
        read_chain(b, &self.guard, |seen| {
            match seen {
                Seen::Node(c) => out.push((c.key.clone(), c.value.clone())),
                Seen::Restart => out.clear(),
            }
            false
        });
        out
    }
}

impl<K, V, L, R, A, S> Iterator for Iter<'_, '_, K, V, L, R, A, S>
where
    K: Hash + Eq + Send + Clone,
    V: Send + Clone,
    L: RawMutex + Send,
    R: Reclaimer,
    A: NodeAlloc,
    S: BuildHasher,
{
    type Item = (K, V);

    fn next(&mut self) -> Option<(K, V)> {
        loop {
            if let Some(e) = self.buf.next() {
                return Some(e);
            }
            // SAFETY: protected by `self.guard` since `iter` (slot TABLE_SLOT is
            // never reused by `fill`), so not freed while the iterator lives.
            // (Not the table current now: across a resize that would yield
            // keys twice or miss them.)
            let t = unsafe { &*self.table };
            let b = t.buckets.get(self.next_bucket)?;
            self.next_bucket += 1;
            self.buf = self.fill(b).into_iter();
        }
    }
}

impl<K, V, L: RawMutex, R: Reclaimer, A: NodeAlloc, S> fmt::Debug
    for Iter<'_, '_, K, V, L, R, A, S>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Iter")
            .field("map", self.map)
            .field("next_bucket", &self.next_bucket)
            .field("buffered", &self.buf.len())
            .finish_non_exhaustive()
    }
}

/// The iterator of [`CrHashMap::iter_pinned`]: borrowed entries of one table,
/// one bucket's pass at a time.
#[cfg(not(loom))]
pub(crate) struct PinnedIter<'g, K, V, L: RawMutex, R: Reclaimer, A: NodeAlloc, G> {
    table: &'g Table<K, V, L, R, A>,
    guard: &'g G,
    next_bucket: usize,
    buf: std::vec::IntoIter<(&'g K, &'g V)>,
}

#[cfg(not(loom))]
impl<'g, K, V, L: RawMutex, R: ProtectsReachable, A: NodeAlloc, G: Guard> Iterator
    for PinnedIter<'g, K, V, L, R, A, G>
{
    type Item = (&'g K, &'g V);

    fn next(&mut self) -> Option<(&'g K, &'g V)> {
        loop {
            if let Some(e) = self.buf.next() {
                return Some(e);
            }
            let b = self.table.buckets.get(self.next_bucket)?;
            self.next_bucket += 1;
            let mut out = Vec::new();
            read_chain(b, self.guard, |seen| {
                match seen {
                    // Valid for `'g`: reached under the guard, which (over a
                    // `ProtectsReachable` scheme) keeps it allocated.
                    Seen::Node(c) => out.push((&c.key, &c.value)),
                    Seen::Restart => out.clear(),
                }
                false
            });
            self.buf = out.into_iter();
        }
    }
}

/// One thread's access to a [`CrHashMap`] (see [`RegisteredHandle`]).
pub type CrHashMapHandle<'a, K, V, L, R = Ebr, A = SystemAlloc, S = RandomState> =
    RegisteredHandle<'a, CrHashMap<K, V, L, R, A, S>, K, V>;

impl<K, V, L, R, A, S> RegisteredMap<K, V> for CrHashMap<K, V, L, R, A, S>
where
    K: Hash + Eq + Send + Sync,
    V: Send + Sync + Clone,
    L: RawMutex + Send + Sync,
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

    /// The per-node header is free for today's schemes (see `ds::hm_list`).
    #[test]
    fn the_node_header_adds_nothing() {
        #[repr(C)]
        struct Bare {
            live: Liveness,
            next: AtomicPtr<u8>,
            key: u64,
            value: u8,
        }
        crate::reclaim::assert_header_free!(R => Node<u64, u8, R>, Bare);
    }
    /// Issue 14, small enough for Miri: an iterator (its guard protects the
    /// table it walks) lives while the same registration inserts enough to
    /// grow the table and removes it all again (resizes retire tables; hazard
    /// pointers scan at every retire). The iterator must read no freed table or
    /// node and yield each key present throughout exactly once.
    #[test]
    fn iter_survives_resizes_by_its_own_registration() {
        let hp = Arc::new(HazardPointers::with_threshold(3, 1).unwrap());
        let policy = ResizePolicy::new(1, 1).unwrap();
        let m: CrHashMap<u64, u64, TasB, HazardPointers> =
            CrHashMap::with_policy(policy, hp.clone(), RandomState::new());
        let l = HazardPointers::register(&hp);
        for k in 0..6 {
            assert!(m.insert(&l, k, k + 100));
        }
        let mut it = m.iter(&l);
        let mut seen = Vec::new();
        let mut resizes = 0;
        let mut fresh = 1000;
        loop {
            let before = m.buckets();
            for k in fresh..fresh + 12 {
                assert!(m.insert(&l, k, k + 100));
            }
            for k in fresh..fresh + 12 {
                assert_eq!(m.remove(&l, &k), Some(k + 100));
            }
            fresh += 12;
            assert_eq!(m.get(&l, &3), Some(103));
            resizes += usize::from(m.buckets() != before);
            let Some((k, v)) = it.next() else { break };
            assert_eq!(v, k + 100, "key {k} with a wrong value");
            seen.push(k);
        }
        drop(it);
        seen.sort_unstable();
        // Keys inserted during the iteration may be yielded too (the walked
        // table is the one current when `iter` began, frozen by the resize
        // that replaced it), but none twice, and each of 0..6 once.
        let (held, fresh_seen): (Vec<u64>, Vec<u64>) = seen.iter().partition(|&&k| k < 6);
        assert_eq!(
            held,
            (0..6).collect::<Vec<_>>(),
            "every held key exactly once"
        );
        let mut dedup = fresh_seen.clone();
        dedup.dedup();
        assert_eq!(dedup, fresh_seen, "a key inserted meanwhile yielded twice");
        assert!(fresh_seen.iter().all(|&k| (1000..fresh).contains(&k)));
        assert!(resizes > 0, "the table never resized under the iterator");
    }

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
    struct Counted(std::sync::Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[test]
    fn values_are_dropped_exactly_once() {
        let drops = std::sync::Arc::new(AtomicUsize::new(0));
        {
            let m: CrHashMap<u32, Counted, TasB, Qsbr> = CrHashMap::with_buckets(2).unwrap();
            let mut h = m.handle();
            for k in 0..5 {
                assert!(h.insert(k, Counted(drops.clone())));
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

    fn resize_keeps_everything<R: Reclaimer + Default>() {
        let m: CrHashMap<u32, u32, TasB, R> = CrHashMap::with_buckets(1).unwrap();
        let mut h = m.handle();
        for k in 0..40 {
            assert!(h.insert(k, k + 100));
        }
        for n in [7, 1, 64, 2] {
            m.resize(h.local(), n).unwrap();
            assert_eq!(m.buckets(), n);
            assert_eq!(m.len(), 40);
            for k in 0..40 {
                assert_eq!(h.get(&k), Some(k + 100), "key {k} after resizing to {n}");
            }
        }
        assert_eq!(m.resize(h.local(), 0), Err(MapError::ZeroBuckets));
        assert_eq!(h.remove(&3), Some(103));
        let mut all: Vec<_> = m.iter(h.local()).collect();
        all.sort_unstable();
        assert_eq!(all.len(), 39);
        assert!(all.iter().all(|&(k, v)| k != 3 && v == k + 100));
        h.quiescent();
        drop(h);
        // Four retired tables (their nodes with them) and one removed node.
        assert_eq!(m.domain().stats().retired, 5);
    }

    #[test]
    fn resize_keeps_everything_with_every_scheme() {
        resize_keeps_everything::<Ebr>();
        resize_keeps_everything::<Qsbr>();
        resize_keeps_everything::<HazardPointers>();
        resize_keeps_everything::<Leak>();
    }

    /// A value that, when dropped, counts, resizes and writes the table that
    /// held it (reached through a `Weak`: inert once the table is dropping).
    struct Reenter<R: Reclaimer> {
        table: std::sync::Weak<CrHashMap<u32, Reenter<R>, TasB, R>>,
        k: u32,
        /// Re-entries left (shared): each resize copies values, whose drops
        /// come here again.
        budget: std::sync::Arc<AtomicUsize>,
    }
    impl<R: Reclaimer> Clone for Reenter<R> {
        /// A resize's copy keeps the table: its drop (when the replaced table
        /// is freed) re-enters too.
        fn clone(&self) -> Self {
            Reenter {
                table: self.table.clone(),
                k: self.k,
                budget: self.budget.clone(),
            }
        }
    }
    impl<R: Reclaimer> Drop for Reenter<R> {
        fn drop(&mut self) {
            let Some(m) = self.table.upgrade() else {
                return;
            };
            let left = self.budget.fetch_update(
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
                |b| b.checked_sub(1),
            );
            if left.is_err() {
                return;
            }
            let l = R::register(m.domain());
            assert!(m.len() <= 8);
            m.resize(&l, 1 + (self.k as usize % 3)).unwrap();
            let fresh = 100 + self.k;
            let inert = Reenter {
                table: std::sync::Weak::new(),
                k: fresh,
                budget: self.budget.clone(),
            };
            {
                if m.insert(&l, fresh, inert) {
                    assert!(m.remove(&l, &fresh).is_some());
                }
            }
        }
    }

    /// Values whose drop — run while a resize frees the table it replaced
    /// (hazard pointers scan at every retire: at once) — calls `len`,
    /// `resize` and insert/remove of the same table. Used to deadlock (the
    /// resize retired the old table holding the resize lock). Miri-sized.
    fn a_drop_during_a_resize_reenters<R: Reclaimer>(d: Arc<R>) {
        let m = std::sync::Arc::new(
            CrHashMap::<u32, Reenter<R>, TasB, R>::with_domain(1, d, RandomState::new()).unwrap(),
        );
        let l = R::register(m.domain());
        let budget = std::sync::Arc::new(AtomicUsize::new(12));
        for k in 0..6 {
            let v = Reenter {
                table: std::sync::Arc::downgrade(&m),
                k,
                budget: budget.clone(),
            };
            assert!(m.insert(&l, k, v));
        }
        for n in [4, 2, 5] {
            m.resize(&l, n).unwrap();
        }
        assert_eq!(m.len(), 6);
        for k in 0..6 {
            assert_eq!(m.get(&l, &k).map(|v| v.k), Some(k));
        }
        assert!(
            budget.load(std::sync::atomic::Ordering::Relaxed) < 12,
            "{}: no drop re-entered the table",
            R::NAME
        );
        drop(l);
        drop(m);
    }

    #[test]
    fn a_drop_during_a_resize_may_count_resize_and_write() {
        a_drop_during_a_resize_reenters(Arc::new(HazardPointers::with_threshold(4, 1).unwrap()));
        a_drop_during_a_resize_reenters(Arc::new(Ebr::with_advance_every(1).unwrap()));
    }

    /// A key whose clone or hash calls a lock-taking operation of the table
    /// from under the table's lock: the documented panic, not a deadlock; the
    /// table is usable after.
    #[test]
    fn a_lock_taking_call_from_under_a_lock_panics() {
        struct Key(u32, std::sync::Weak<CrHashMap<Key, u32, TasB, Leak>>);
        impl PartialEq for Key {
            fn eq(&self, o: &Self) -> bool {
                self.0 == o.0
            }
        }
        impl Eq for Key {}
        impl Hash for Key {
            fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
                self.0.hash(h)
            }
        }
        impl Clone for Key {
            fn clone(&self) -> Self {
                if let Some(m) = self.1.upgrade() {
                    m.len(); // from a resize: under every bucket lock
                }
                Key(self.0, self.1.clone())
            }
        }
        let m = std::sync::Arc::new(CrHashMap::<Key, u32, TasB, Leak>::with_buckets(2).unwrap());
        let l = Leak::register(m.domain());
        assert!(m.insert(&l, Key(1, std::sync::Arc::downgrade(&m)), 10));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.resize(&l, 4)));
        let msg = r.expect_err("a resize that cloned the key");
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("would deadlock"), "{msg}");
        assert_eq!((m.buckets(), m.len()), (2, 1), "the table as it was");
        assert!(m.insert(&l, Key(2, std::sync::Weak::new()), 20), "usable");
        assert_eq!(m.get(&l, &Key(1, std::sync::Weak::new())), Some(10));
    }

    #[test]
    fn policy_grows_and_shrinks() {
        let p = ResizePolicy::new(4, 2).unwrap();
        assert_eq!(p.target(4, 8), None);
        assert_eq!(p.target(4, 9), Some(8));
        assert_eq!(p.target(8, 4), None);
        assert_eq!(p.target(8, 3), Some(4));
        assert_eq!(p.target(4, 0), None, "never below the minimum");
        assert_eq!(ResizePolicy::new(0, 2), Err(MapError::ZeroBuckets));
        assert_eq!(ResizePolicy::new(1, 0), Err(MapError::ZeroLoad));
        /// Counts live values: made and cloned +1, dropped -1.
        struct Tracked(std::sync::Arc<AtomicUsize>);
        impl Tracked {
            fn new(c: &std::sync::Arc<AtomicUsize>) -> Self {
                c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Tracked(c.clone())
            }
        }
        impl Clone for Tracked {
            fn clone(&self) -> Self {
                Tracked::new(&self.0)
            }
        }
        impl Drop for Tracked {
            fn drop(&mut self) {
                self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let live = std::sync::Arc::new(AtomicUsize::new(0));
        {
            let m: CrHashMap<u32, Tracked, TasB, Qsbr> =
                CrHashMap::with_policy(p, Arc::new(Qsbr::new()), RandomState::new());
            assert_eq!(m.policy(), Some(p));
            let mut h = m.handle();
            for k in 0..20 {
                assert!(h.insert(k, Tracked::new(&live)));
            }
            assert_eq!(m.buckets(), 16, "4 -> 8 -> 16 buckets for 20 keys");
            for k in 0..18 {
                drop(h.remove(&k));
            }
            assert_eq!(m.buckets(), 4, "back to the minimum");
            assert_eq!(m.len(), 2);
        }
        // Every value, and every copy a resize made, dropped exactly once (the
        // retired tables too, when the domain dropped with the map).
        assert_eq!(live.load(std::sync::atomic::Ordering::Relaxed), 0);
    }
}
