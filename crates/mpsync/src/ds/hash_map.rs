//! [`HashMap`]: the map to reach for — a concurrent hash map with the API of
//! `std`'s, dashmap's and papaya's, no handles, no type parameters to choose.
//!
//! It is Hart's concurrently-readable table ([`CrHashMap`], papers/002_… §3.3)
//! over EBR, with [`SpinThenPark`] bucket locks, resizing itself
//! ([`ResizePolicy::default`]), and each thread's EBR registration made on its
//! first operation and cached in the map (as `crossbeam_epoch::pin()` and
//! papaya cache theirs). Why this table: its reads take no lock, write nothing
//! shared and never wait for a writer (a preempted writer delays only the
//! writers of its bucket), and it is the one table here that grows and
//! shrinks; keys need only `Hash + Eq`. The lock-free tables
//! ([`LfHashMap`](super::hash::LfHashMap),
//! [`FastReadHashMap`](super::hash::FastReadHashMap)) have fixed bucket counts
//! and insert-if-absent updates only; use them through
//! [`Auto`](super::handle::Auto) when writers must never block.
//!
//! # What is atomic
//!
//! Every update — [`insert`](HashMap::insert), [`try_insert`](HashMap::try_insert),
//! [`remove`](HashMap::remove), [`get_or_insert_with`](HashMap::get_or_insert_with),
//! [`update`](HashMap::update), [`compute`](HashMap::compute) — is
//! linearizable: it reads and changes one key's entry under that key's bucket
//! lock, so no other update of the key comes between what a closure saw and
//! what it changed (a read-modify-write, not a CAS loop: the closure runs
//! exactly once). Reads ([`get`](HashMap::get), [`Pinned::get`], …) take no
//! lock and see each entry before or after an update, never in between. A
//! replaced value is not overwritten in place: the key gets a new node and
//! the old one is retired, so a reader still holding the old value (a
//! [`Pinned`] reference) keeps reading it, unchanged, until its guard ends.
//!
//! Walks — [`len`](HashMap::len), [`iter`](HashMap::iter),
//! [`Pinned::iter`], [`retain`](HashMap::retain), [`clear`](HashMap::clear),
//! `Debug` — are *weakly consistent*, as dashmap's and papaya's: each key
//! present for the whole walk is seen exactly once, no key twice, a key seen
//! was present with that value at some moment during the walk, and keys
//! inserted or removed meanwhile may or may not be seen. `len` is the count
//! the table keeps for its resize policy: O(1), exact when no update is
//! under way.
//!
//! # Values are cloned
//!
//! A value cannot be moved out of a node that lock-free readers may still be
//! reading, so [`get`](HashMap::get), [`remove`](HashMap::remove) and the old
//! value [`insert`](HashMap::insert) returns are clones (`V: Clone`), and the
//! copying resize clones every key and value (`K: Clone`). For values that are
//! costly to clone, store an `Arc<V>`, or borrow under a guard:
//! [`pin`](HashMap::pin) hands out `&V` tied to the guard, as papaya does.
//!
//! # Keys and values are `'static`
//!
//! A removed or replaced node is freed by the map's reclamation domain later,
//! possibly on another thread, so keys and values cannot borrow:
//!
//! ```compile_fail,E0597
//! use mpsync::HashMap;
//!
//! let m: HashMap<u32, &str> = HashMap::new();
//! let name = String::from("borrowed");
//! m.insert(1, &name); // error: `name` does not live long enough ('static)
//! ```
//!
//! # Your code inside an operation
//!
//! As for [`CrHashMap`](super::cr_hash#your-code-inside-an-operation): a
//! key's or value's `Drop` never runs under a lock and may do anything (use
//! this map included). The closures of `update`, `compute`,
//! `get_or_insert_with` and `retain`, and `Eq` and `Clone` in the writers,
//! run under the bucket's lock: from there, reads of any map work, and an
//! update of a lock-based map (this one included) **panics** instead of
//! deadlocking. A panic in any of them leaves the entry as it was and the map
//! usable.
//!
//! # Reclamation, and the idle-thread trap
//!
//! Each thread's registration is pinned only inside an operation (or while a
//! [`Pinned`] guard or an [`Iter`] lives), so a thread that stops using the map
//! — idle, blocked, exited — holds nothing back: removed nodes are freed as
//! the other threads go on (see [`ds`](super#memory-reclamation-and-idle-threads)
//! for the QSBR handle pattern where this is not so).
//!
//! ```
//! use mpsync::HashMap;
//!
//! let m: HashMap<String, u64> = HashMap::new();
//! std::thread::scope(|s| {
//!     for t in 0..4 {
//!         let m = &m;
//!         s.spawn(move || {
//!             for i in 0..100 {
//!                 m.update_or_insert(format!("k{}", i % 10), 1, |n| n + 1);
//!             }
//!             m.insert(format!("t{t}"), t);
//!         });
//!     }
//! });
//! assert_eq!(m.get(&"k3".to_string()), Some(40));
//! assert_eq!(m.len(), 14);
//! let total: u64 = m.pin().iter().filter(|(k, _)| k.starts_with('k')).map(|(_, v)| *v).sum();
//! assert_eq!(total, 400);
//! ```

use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hash};

use super::alloc::SystemAlloc;
pub use super::cr_hash::Change;
use super::cr_hash::{self, CrHashMap, ResizePolicy};
use super::map::{ConcurrentMap, MapHandle};
use crate::lock::SpinThenPark;
use crate::reclaim::{Ebr, EbrGuard, EbrLocal, Local, Reclaimer};
use crate::sync::Arc;

/// The table underneath a [`HashMap`].
pub type Table<K, V, S> = CrHashMap<K, V, SpinThenPark, Ebr, SystemAlloc, S>;

/// A concurrent hash map with `&self` methods and no handles (see the
/// [module documentation](self)): lockless reads, per-bucket-locked atomic
/// updates, automatic resizing, keys `Hash + Eq`.
///
/// ```
/// use mpsync::HashMap;
///
/// let m = HashMap::new();
/// assert_eq!(m.insert(1, "one"), None);
/// assert_eq!(m.insert(1, "uno"), Some("one"), "insert replaces");
/// assert!(!m.try_insert(1, "ein"), "try_insert does not");
/// assert_eq!(m.get(&1), Some("uno"));
/// assert_eq!(m.remove(&1), Some("uno"));
/// assert!(m.is_empty());
/// ```
pub struct HashMap<K, V, S = RandomState> {
    // Declared first, so dropped first: the registrations leave the domain
    // (handing it what they retired) while the table still exists.
    locals: thread_local::ThreadLocal<EbrLocal>,
    table: Table<K, V, S>,
}

impl<K, V> HashMap<K, V, RandomState>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// An empty map (it grows as keys come, and shrinks as they go).
    pub fn new() -> Self {
        Self::with_hasher(RandomState::new())
    }

    /// An empty map sized for about `capacity` keys before its first resize
    /// (it never shrinks below that).
    ///
    /// ```
    /// let m: mpsync::HashMap<u32, u32> = mpsync::HashMap::with_capacity(10_000);
    /// assert!(m.table().buckets() >= 5_000);
    /// ```
    pub fn with_capacity(capacity: usize) -> Self {
        Self::with_capacity_and_hasher(capacity, RandomState::new())
    }
}

impl<K, V, S> HashMap<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    S: BuildHasher + Send + Sync,
{
    /// An empty map that hashes keys with `hasher`.
    ///
    /// ```
    /// use std::hash::BuildHasherDefault;
    /// use std::collections::hash_map::DefaultHasher;
    ///
    /// let m: mpsync::HashMap<u8, u8, BuildHasherDefault<DefaultHasher>> =
    ///     mpsync::HashMap::with_hasher(Default::default());
    /// m.insert(1, 2);
    /// assert_eq!(m.get(&1), Some(2));
    /// ```
    pub fn with_hasher(hasher: S) -> Self {
        Self::from_table(CrHashMap::with_policy(
            ResizePolicy::default(),
            Arc::new(Ebr::new()),
            hasher,
        ))
    }

    /// An empty map whose removed nodes go to `domain`, hashing with
    /// `hasher`: maps sharing a domain share its reclamation (a thread's
    /// operation on one may free the other's nodes).
    ///
    /// ```
    /// use mpsync::reclaim::Ebr;
    /// use mpsync::sync::Arc;
    /// use std::collections::hash_map::RandomState;
    ///
    /// let d = Arc::new(Ebr::new());
    /// let a: mpsync::HashMap<u8, u8> = mpsync::HashMap::with_domain(d.clone(), RandomState::new());
    /// let b: mpsync::HashMap<u8, u8> = mpsync::HashMap::with_domain(d, RandomState::new());
    /// a.insert(1, 1);
    /// b.insert(1, 2);
    /// assert!(Arc::ptr_eq(a.table().domain(), b.table().domain()));
    /// ```
    pub fn with_domain(domain: Arc<Ebr>, hasher: S) -> Self {
        Self::from_table(CrHashMap::with_policy(
            ResizePolicy::default(),
            domain,
            hasher,
        ))
    }

    /// An empty map sized for about `capacity` keys, hashing with `hasher`.
    pub fn with_capacity_and_hasher(capacity: usize, hasher: S) -> Self {
        let d = ResizePolicy::default();
        let min = (capacity / d.max_load()).max(d.min_buckets());
        let policy =
            ResizePolicy::new(min, d.max_load()).expect("min >= the default's, load the default's");
        Self::from_table(CrHashMap::with_policy(policy, Arc::new(Ebr::new()), hasher))
    }

    fn from_table(table: Table<K, V, S>) -> Self {
        Self {
            locals: thread_local::ThreadLocal::new(),
            table,
        }
    }

    /// The calling thread's registration with the map's domain, made on its
    /// first use. Shared: operations nested in one (a value's `Drop` run by
    /// reclamation) use it too, their guards nesting in the outer one's pin.
    #[inline]
    fn local(&self) -> &EbrLocal {
        self.locals.get_or(|| Ebr::register(self.table.domain()))
    }

    /// Sets `key` to `value`, returning (a clone of) the value it replaced, or
    /// `None` if the key was absent. Atomic (see [What is
    /// atomic](self#what-is-atomic)).
    ///
    /// ```
    /// let m = mpsync::HashMap::new();
    /// assert_eq!(m.insert("a", 1), None);
    /// assert_eq!(m.insert("a", 2), Some(1));
    /// assert_eq!(m.get(&"a"), Some(2));
    /// ```
    pub fn insert(&self, key: K, value: V) -> Option<V> {
        let mut value = Some(value); // dropped after the unlock if a clone panics
        self.table.compute_owned(self.local(), key, |old| {
            let prev = old.cloned();
            (Change::Set(value.take().expect("once")), prev)
        })
    }

    /// Inserts `key → value` only if `key` is absent; `false` (and `value`
    /// dropped) if it was present, whose value stays.
    ///
    /// ```
    /// let m = mpsync::HashMap::new();
    /// assert!(m.try_insert(1, 'a'));
    /// assert!(!m.try_insert(1, 'b'));
    /// assert_eq!(m.get(&1), Some('a'));
    /// ```
    #[must_use = "`false` means the key was present and `value` was not stored"]
    pub fn try_insert(&self, key: K, value: V) -> bool {
        let mut value = Some(value);
        self.table
            .compute_owned(self.local(), key, |old| match old {
                Some(_) => (Change::Keep, false),
                None => (Change::Set(value.take().expect("once")), true),
            })
    }

    /// A clone of `key`'s value, or `None` (lockless). As with std's map,
    /// `key` may be any borrowed form of the key type (`&str` for `String`
    /// keys) whose `Hash` and `Eq` agree with the key's.
    ///
    /// ```
    /// let m = mpsync::HashMap::new();
    /// m.insert(1, vec![1, 2]);
    /// assert_eq!(m.get(&1), Some(vec![1, 2]));
    /// assert_eq!(m.get(&2), None);
    /// let words = mpsync::HashMap::new();
    /// words.insert(String::from("hello"), 1);
    /// assert_eq!(words.get("hello"), Some(1));
    /// ```
    #[must_use]
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.table.get(self.local(), key)
    }

    /// `f` applied to `key`'s value, if present (lockless; no clone: the
    /// reference is valid during the call).
    ///
    /// ```
    /// let m = mpsync::HashMap::new();
    /// m.insert(1, String::from("hello"));
    /// assert_eq!(m.get_with(&1, |s| s.len()), Some(5));
    /// ```
    pub fn get_with<T, Q>(&self, key: &Q, f: impl FnOnce(&V) -> T) -> Option<T>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.table.get_with(self.local(), key, f)
    }

    /// Whether `key` is present (lockless).
    ///
    /// ```
    /// let m = mpsync::HashMap::new();
    /// m.insert(1, ());
    /// assert!(m.contains_key(&1) && !m.contains_key(&2));
    /// ```
    #[must_use]
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.table.contains_key(self.local(), key)
    }

    /// Removes `key`, returning (a clone of) its value, or `None` if absent.
    ///
    /// ```
    /// let m = mpsync::HashMap::new();
    /// m.insert(1, 'a');
    /// assert_eq!(m.remove(&1), Some('a'));
    /// assert_eq!(m.remove(&1), None);
    /// ```
    pub fn remove<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.table.remove(self.local(), key)
    }

    /// `key`'s value, inserting `make()` first if the key is absent (atomic:
    /// `make` runs at most once, under the bucket's lock, and only if the key
    /// is absent); a clone of the value.
    ///
    /// ```
    /// let m = mpsync::HashMap::new();
    /// assert_eq!(m.get_or_insert_with(1, || 10), 10);
    /// assert_eq!(m.get_or_insert_with(1, || unreachable!()), 10);
    /// ```
    pub fn get_or_insert_with(&self, key: K, make: impl FnOnce() -> V) -> V {
        // Outside the closure, so dropped after the unlock if a clone panics.
        let mut fresh: Option<V> = None;
        self.table
            .compute_owned(self.local(), key, |old| match old {
                Some(v) => (Change::Keep, v.clone()),
                None => {
                    let v = fresh.insert(make()).clone();
                    (Change::Set(fresh.take().expect("just made")), v)
                }
            })
    }

    /// Replaces `key`'s value `v` by `f(&v)`, atomically (no update of the key
    /// comes between the read and the write); returns a clone of the new
    /// value, or `None` (and `f` is not called) if the key is absent.
    ///
    /// ```
    /// let m = mpsync::HashMap::new();
    /// m.insert("hits", 1);
    /// assert_eq!(m.update(&"hits", |n| n + 1), Some(2));
    /// assert_eq!(m.update(&"misses", |n| n + 1), None);
    /// ```
    pub fn update(&self, key: &K, f: impl FnOnce(&V) -> V) -> Option<V> {
        let mut new: Option<V> = None;
        self.table.compute(self.local(), key, |old| match old {
            None => (Change::Keep, None),
            Some(v) => {
                let c = new.insert(f(v)).clone();
                (Change::Set(new.take().expect("just made")), Some(c))
            }
        })
    }

    /// Sets `key` to `f(&v)` if it holds `v`, or to `value` if it is absent,
    /// atomically (an upsert: counting, accumulating).
    ///
    /// ```
    /// let m = mpsync::HashMap::new();
    /// for w in ["a", "b", "a"] {
    ///     m.update_or_insert(w, 1, |n| n + 1);
    /// }
    /// assert_eq!((m.get(&"a"), m.get(&"b")), (Some(2), Some(1)));
    /// ```
    pub fn update_or_insert(&self, key: K, value: V, f: impl FnOnce(&V) -> V) {
        let mut value = Some(value);
        self.table.compute_owned(self.local(), key, |old| {
            let new = match old {
                Some(v) => f(v),
                None => value.take().expect("once"),
            };
            (Change::Set(new), ())
        })
    }

    /// The general atomic update: `f` sees `key`'s value (`None`: absent) and
    /// returns what to do with the entry ([`Change::Keep`], [`Change::Set`],
    /// [`Change::Remove`]) and a result, which `compute` returns. `f` runs
    /// once, under the bucket's lock (see [Your code inside an
    /// operation](self#your-code-inside-an-operation)).
    ///
    /// ```
    /// use mpsync::ds::hash_map::Change;
    ///
    /// let m = mpsync::HashMap::new();
    /// m.insert("stock", 3u32);
    /// // Take one if any are left; remove the entry at zero.
    /// let take = |n: Option<&u32>| match n {
    ///     Some(&1) => (Change::Remove, true),
    ///     Some(&n) => (Change::Set(n - 1), true),
    ///     None => (Change::Keep, false),
    /// };
    /// let taken = (0..5).filter(|_| m.compute("stock", take)).count();
    /// assert_eq!(taken, 3);
    /// assert!(!m.contains_key(&"stock"));
    /// ```
    pub fn compute<T>(&self, key: K, f: impl FnOnce(Option<&V>) -> (Change<V>, T)) -> T {
        self.table.compute_owned(self.local(), key, f)
    }

    /// The number of entries: O(1), exact when no update is under way (the
    /// count the table keeps under its bucket locks).
    ///
    /// ```
    /// let m: mpsync::HashMap<u32, u32> = (0..10).map(|k| (k, k)).collect();
    /// assert_eq!(m.len(), 10);
    /// ```
    #[must_use]
    pub fn len(&self) -> usize {
        self.table
            .len_hint()
            .expect("a HashMap's table resizes, so counts")
    }

    /// Whether [`len`](Self::len) is 0.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An iterator over clones of the entries, weakly consistent (see [What
    /// is atomic](self#what-is-atomic)). It holds an EBR guard until dropped
    /// (reclamation of this map waits for it meanwhile): drop it when done.
    /// [`Pinned::iter`] borrows instead of cloning.
    ///
    /// ```
    /// let m: mpsync::HashMap<u32, u32> = (0..5).map(|k| (k, k * k)).collect();
    /// let mut all: Vec<(u32, u32)> = m.iter().collect();
    /// all.sort();
    /// assert_eq!(all, [(0, 0), (1, 1), (2, 4), (3, 9), (4, 16)]);
    /// ```
    pub fn iter(&self) -> Iter<'_, K, V, S> {
        Iter(self.table.iter(self.local()))
    }

    /// Keeps only the entries for which `f` returns `true`. Each key is
    /// decided atomically (under its bucket's lock, with its value at that
    /// moment); the walk over the keys is weakly consistent, so entries
    /// inserted meanwhile may or may not be visited.
    ///
    /// ```
    /// let m: mpsync::HashMap<u32, u32> = (0..10).map(|k| (k, k)).collect();
    /// m.retain(|k, _| k % 2 == 0);
    /// assert_eq!(m.len(), 5);
    /// assert!(!m.contains_key(&3));
    /// ```
    pub fn retain(&self, mut f: impl FnMut(&K, &V) -> bool) {
        let local = self.local();
        let keys: Vec<K> = {
            let g = local.enter();
            // SAFETY: `g` is a guard of this map's domain (our own registration).
            unsafe { self.table.iter_pinned(&g) }
                .map(|(k, _)| k.clone())
                .collect()
        };
        for k in &keys {
            self.table.compute(local, k, |v| match v {
                Some(v) if !f(k, v) => (Change::Remove, ()),
                _ => (Change::Keep, ()),
            });
        }
    }

    /// Removes every entry present when the walk reaches it (weakly
    /// consistent, as [`retain`](Self::retain)).
    ///
    /// ```
    /// let m: mpsync::HashMap<u32, u32> = (0..10).map(|k| (k, k)).collect();
    /// m.clear();
    /// assert!(m.is_empty());
    /// ```
    pub fn clear(&self) {
        self.retain(|_, _| false);
    }

    /// A guard over the map (an EBR critical section of the calling thread)
    /// whose reads borrow: [`Pinned::get`] returns `&V`, valid as long as the
    /// guard, however the map changes meanwhile (a removed or replaced value
    /// stays allocated and unchanged until the guard ends). papaya's
    /// `pin()`. While it lives, reclamation of this map waits: keep it short.
    ///
    /// ```
    /// let m = mpsync::HashMap::new();
    /// m.insert(1, String::from("one"));
    /// let p = m.pin();
    /// let one: &String = p.get(&1).unwrap();
    /// m.insert(1, String::from("uno")); // replaced, but `one` is still valid
    /// assert_eq!(one, "one");
    /// assert_eq!(p.get(&1).map(String::as_str), Some("uno"));
    /// ```
    pub fn pin(&self) -> Pinned<'_, K, V, S> {
        Pinned {
            guard: self.local().enter(),
            map: self,
        }
    }

    /// The table underneath, for its explicit-registration API and statistics.
    pub fn table(&self) -> &Table<K, V, S> {
        &self.table
    }
}

impl<K, V> Default for HashMap<K, V, RandomState>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<K, V, S> Extend<(K, V)> for HashMap<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    S: BuildHasher + Send + Sync,
{
    /// Inserts every pair, replacing present keys' values.
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        for (k, v) in iter {
            let mut v = Some(v);
            self.table.compute_owned(self.local(), k, |_| {
                (Change::Set(v.take().expect("once")), ())
            });
        }
    }
}

impl<K, V> FromIterator<(K, V)> for HashMap<K, V, RandomState>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut m = Self::new();
        m.extend(iter);
        m
    }
}

impl<K, V, S> fmt::Debug for HashMap<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + fmt::Debug + 'static,
    V: Clone + Send + Sync + fmt::Debug + 'static,
    S: BuildHasher + Send + Sync,
{
    /// The entries, as `std`'s map prints them (a weakly consistent walk).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.pin().iter()).finish()
    }
}

impl<K, V, S> ConcurrentMap<K, V> for HashMap<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    S: BuildHasher + Send + Sync,
{
    type Handle<'a>
        = &'a Self
    where
        Self: 'a;

    /// The map itself: it needs no handle (for the code that drives every
    /// table through [`MapHandle`]).
    fn handle(&self) -> &Self {
        self
    }
}

/// [`MapHandle`]'s insert-if-absent is [`HashMap::try_insert`].
impl<K, V, S> MapHandle<K, V> for &HashMap<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    S: BuildHasher + Send + Sync,
{
    fn insert(&mut self, key: K, value: V) -> bool {
        self.try_insert(key, value)
    }
    fn get(&mut self, key: &K) -> Option<V> {
        HashMap::get(self, key)
    }
    fn remove(&mut self, key: &K) -> Option<V> {
        HashMap::remove(self, key)
    }
    fn contains_key(&mut self, key: &K) -> bool {
        HashMap::contains_key(self, key)
    }
}

/// The iterator of [`HashMap::iter`]: clones of the entries, under a guard.
pub struct Iter<'m, K, V, S>(cr_hash::Iter<'m, 'm, K, V, SpinThenPark, Ebr, SystemAlloc, S>);

impl<K, V, S> Iterator for Iter<'_, K, V, S>
where
    K: Hash + Eq + Clone + Send,
    V: Clone + Send,
    S: BuildHasher,
{
    type Item = (K, V);

    fn next(&mut self) -> Option<(K, V)> {
        self.0.next()
    }
}

impl<K, V, S> fmt::Debug for Iter<'_, K, V, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Iter").finish_non_exhaustive()
    }
}

/// A guard over a [`HashMap`] whose reads borrow for as long as it lives (see
/// [`HashMap::pin`]). Not `Send`: it is the calling thread's critical section.
///
/// A guard cannot outlive the map:
///
/// ```compile_fail,E0505
/// let m = mpsync::HashMap::new();
/// m.insert(1, 1);
/// let p = m.pin();
/// let v = p.get(&1);
/// drop(m); // error: `m` is borrowed by the guard
/// assert_eq!(v, Some(&1));
/// ```
///
/// and a reference cannot outlive its guard:
///
/// ```compile_fail,E0505
/// let m = mpsync::HashMap::new();
/// m.insert(1, 1);
/// let p = m.pin();
/// let v = p.get(&1);
/// drop(p); // error: `p` is borrowed by `v`
/// assert_eq!(v, Some(&1));
/// ```
pub struct Pinned<'m, K, V, S> {
    guard: EbrGuard<'m>,
    map: &'m HashMap<K, V, S>,
}

impl<K, V, S> Pinned<'_, K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    S: BuildHasher + Send + Sync,
{
    /// `key`'s value, borrowed for as long as the guard (lockless).
    ///
    /// ```
    /// let m = mpsync::HashMap::new();
    /// m.insert("k", vec![0u8; 1000]);
    /// assert_eq!(m.pin().get(&"k").map(Vec::len), Some(1000)); // no clone
    /// ```
    #[must_use]
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // SAFETY: the guard is of the map's own domain (its thread's cached
        // registration); EBR protects everything reachable.
        unsafe { self.map.table.get_pinned(&self.guard, key) }
    }

    /// Whether `key` is present.
    #[must_use]
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get(key).is_some()
    }

    /// The entries, borrowed for as long as the guard, weakly consistent (see
    /// [What is atomic](self#what-is-atomic)).
    ///
    /// ```
    /// let m: mpsync::HashMap<u32, u32> = (1..=4).map(|k| (k, 10 * k)).collect();
    /// let p = m.pin();
    /// assert_eq!(p.iter().map(|(_, v)| *v).sum::<u32>(), 100);
    /// ```
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        // SAFETY: as in `get`.
        unsafe { self.map.table.iter_pinned(&self.guard) }
    }

    /// The map.
    pub fn map(&self) -> &HashMap<K, V, S> {
        self.map
    }
}

impl<K, V, S> fmt::Debug for Pinned<'_, K, V, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pinned").finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn the_map_api() {
        let m: HashMap<String, u32> = HashMap::new();
        assert!(m.is_empty());
        assert_eq!(m.insert("a".into(), 1), None);
        assert_eq!(m.insert("a".into(), 2), Some(1));
        assert!(!m.try_insert("a".into(), 3));
        assert!(m.try_insert("b".into(), 3));
        assert_eq!(m.get("a"), Some(2));
        assert_eq!(m.get_with("b", |v| v * 10), Some(30));
        assert!(m.contains_key("b"));
        assert_eq!(m.len(), 2);
        assert_eq!(m.update(&"a".into(), |v| v + 5), Some(7));
        assert_eq!(m.update(&"zz".into(), |v| v + 5), None);
        assert!(!m.contains_key("zz"), "update does not insert");
        assert_eq!(m.get_or_insert_with("c".into(), || 9), 9);
        assert_eq!(m.get_or_insert_with("c".into(), || 10), 9);
        m.update_or_insert("c".into(), 0, |v| v * 2);
        m.update_or_insert("d".into(), 4, |_| unreachable!());
        assert_eq!((m.get("c"), m.get("d")), (Some(18), Some(4)));
        assert_eq!(m.remove("d"), Some(4));
        assert_eq!(m.remove("d"), None);
        let got = m.compute("b".into(), |v| (Change::Remove, v.copied()));
        assert_eq!(got, Some(3));
        assert_eq!(m.compute("b".into(), |v| (Change::Keep, v.copied())), None);
        let mut all: Vec<_> = m.iter().collect();
        all.sort();
        assert_eq!(all, [("a".to_string(), 7), ("c".to_string(), 18)]);
        assert_eq!(
            format!("{:?}", HashMap::<u8, u8>::from_iter([(1, 2)])),
            "{1: 2}"
        );
        let mut m2: HashMap<u32, u32> = (0..100).map(|k| (k, k)).collect();
        m2.extend((0..10).map(|k| (k, k + 1000)));
        assert_eq!((m2.len(), m2.get(&3)), (100, Some(1003)));
        m2.retain(|k, v| k % 2 == 0 && *v < 1000);
        assert_eq!(m2.len(), 45);
        assert!(m2.pin().iter().all(|(k, v)| k == v && k % 2 == 0));
        m2.clear();
        assert!(m2.is_empty());
        assert_eq!(m2.iter().count(), 0);
    }

    #[test]
    fn it_grows_and_shrinks() {
        let m: HashMap<u32, u32> = HashMap::new();
        let small = m.table().buckets();
        // Under Miri every resize's copy is interpreted: 5,000 keys took minutes.
        let n = if cfg!(miri) { 200 } else { 5_000 };
        for k in 0..n {
            m.insert(k, k);
        }
        assert!(
            m.table().buckets() >= n as usize / 2,
            "{}",
            m.table().buckets()
        );
        for k in 0..n {
            assert_eq!(m.remove(&k), Some(k));
        }
        assert_eq!(m.table().buckets(), small);
        let c: HashMap<u32, u32> = HashMap::with_capacity(1000);
        assert_eq!(c.table().buckets(), 500);
    }

    #[test]
    fn a_pinned_reference_survives_removal_and_replacement() {
        let m: HashMap<u32, String> = HashMap::new();
        m.insert(1, "one".into());
        m.insert(2, "two".into());
        let p = m.pin();
        let one = p.get(&1).unwrap();
        let two = p.get(&2).unwrap();
        assert_eq!(m.insert(1, "uno".into()).as_deref(), Some("one"));
        assert_eq!(m.remove(&2).as_deref(), Some("two"));
        // Reclamation runs in these operations: the guard keeps both nodes.
        for k in 10..400 {
            m.insert(k, k.to_string());
            m.remove(&k);
        }
        assert_eq!((one.as_str(), two.as_str()), ("one", "two"));
        assert_eq!(p.get(&1).map(String::as_str), Some("uno"));
        assert!(!p.contains_key(&2));
        assert_eq!(p.map().len(), 1);
        drop(p);
        assert!(format!("{:?}", m.pin()).starts_with("Pinned"));
    }

    /// Counts its makings (clones included) and its drops.
    struct Counted(std::sync::Arc<(AtomicUsize, AtomicUsize)>);
    impl Counted {
        fn new(c: &std::sync::Arc<(AtomicUsize, AtomicUsize)>) -> Self {
            c.0.fetch_add(1, Ordering::Relaxed);
            Counted(c.clone())
        }
    }
    impl Clone for Counted {
        fn clone(&self) -> Self {
            Counted::new(&self.0)
        }
    }
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.1.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Every value made — inserted, replaced, refused, returned as a clone,
    /// copied by a resize — is dropped exactly once, by the time the map is.
    #[test]
    fn every_value_is_dropped_once() {
        let c = std::sync::Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
        {
            let m: HashMap<u32, Counted> = HashMap::new();
            for k in 0..50 {
                m.insert(k, Counted::new(&c));
                drop(m.insert(k, Counted::new(&c)));
                assert!(!m.try_insert(k, Counted::new(&c)));
                drop(m.get_or_insert_with(k, || Counted::new(&c)));
            }
            m.retain(|k, _| k % 2 == 0);
            for k in 0..10 {
                drop(m.update(&(k * 2), Counted::clone));
            }
            m.update_or_insert(1, Counted::new(&c), Counted::clone);
            let live = c.0.load(Ordering::Relaxed) - c.1.load(Ordering::Relaxed);
            assert!(live >= m.len(), "{live} live, {} in the map", m.len());
        }
        let (made, dropped) = (c.0.load(Ordering::Relaxed), c.1.load(Ordering::Relaxed));
        assert_eq!(made, dropped);
        assert!(made > 200);
    }

    #[test]
    fn panicking_closures_change_nothing_and_release_the_lock() {
        use std::panic::{AssertUnwindSafe, catch_unwind};
        let m: HashMap<u32, u32> = HashMap::new();
        m.insert(1, 10);
        let r = catch_unwind(AssertUnwindSafe(|| m.update(&1, |_| panic!("update"))));
        assert!(r.is_err());
        let r = catch_unwind(AssertUnwindSafe(|| {
            m.get_or_insert_with(2, || panic!("make"))
        }));
        assert!(r.is_err());
        let r = catch_unwind(AssertUnwindSafe(|| m.retain(|_, _| panic!("retain"))));
        assert!(r.is_err());
        let r = catch_unwind(AssertUnwindSafe(|| {
            m.compute(1, |_| -> (Change<u32>, ()) { panic!("compute") })
        }));
        assert!(r.is_err());
        // Unchanged, and every lock free again (these would deadlock otherwise).
        assert_eq!((m.get(&1), m.get(&2), m.len()), (Some(10), None, 1));
        assert_eq!(m.insert(1, 11), Some(10));
        assert!(m.try_insert(2, 20));
    }

    #[test]
    #[should_panic(expected = "would deadlock")]
    fn an_update_from_an_update_closure_panics_instead_of_deadlocking() {
        let m: HashMap<u32, u32> = HashMap::new();
        m.insert(1, 1);
        m.update(&1, |v| {
            m.insert(2, 2); // same bucket lock, or another: refused
            *v
        });
    }

    #[test]
    fn an_update_closure_may_read() {
        let m: HashMap<u32, u32> = HashMap::new();
        m.insert(1, 1);
        m.insert(2, 5);
        assert_eq!(m.update(&1, |v| v + m.get(&2).unwrap()), Some(6));
    }
}
