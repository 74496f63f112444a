//! The per-bucket-lock hash table: Hart's lock-based baseline (papers/002_…
//! §5.3, "spinlock"), generic over any mpsync lock.
//!
//! A fixed array of buckets, each a `Vec` of pairs behind its own
//! [`lock_api::RawMutex`]. Every operation locks one
//! bucket. With a preemption-safe lock (`TasBNp`, `NativeNp`, …) a preempted
//! holder is rare; with a plain spin lock a holder preempted inside a bucket stalls
//! every thread that needs that bucket — the contrast Hart's experiments draw
//! with the lock-free table. Insert-if-absent, as the other tables (see
//! [`map`](super::map)). Needs nothing from `sched` beyond what the lock uses.
//!
//! # Your code inside an operation
//!
//! `Hash` runs before the bucket's lock is taken; `Eq`, `Clone` and the
//! callback of [`for_each`](LockedHashMap::for_each) run under it. From there,
//! operations of the lock-free tables work; an operation of this or another
//! lock-based or CR table **panics** (it would wait for a lock its own thread
//! holds, or take two tables' locks in an order another thread may reverse).
//! **`Drop`** of a key or value never runs under a lock (a refused insert's
//! pair and a removed key are dropped after the lock is released), so it may
//! use the table; so may the code that consumes an [`iter`](LockedHashMap::iter),
//! which copies each bucket under its lock and yields after. A panic in any of
//! them leaves the table as it was and releases the lock. Keys and values may
//! borrow (nothing outlives the table).
//!
//! ```
//! use mpsync::ds::locked_hash::LockedHashMap;
//! use mpsync::lock::TasBNp;
//!
//! let m: LockedHashMap<u32, u32, TasBNp> = LockedHashMap::with_buckets(32).unwrap();
//! assert!(m.insert(1, 10));
//! assert!(!m.insert(1, 11));
//! assert_eq!(m.get(&1), Some(10));
//! assert_eq!(m.len(), 1);
//! assert_eq!(m.remove(&1), Some(10));
//! assert!(LockedHashMap::<u32, u32, TasBNp>::with_buckets(0).is_err());
//! ```

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hash};

use lock_api::{Mutex, RawMutex};

use super::hash::DEFAULT_BUCKETS;
use super::map::{ConcurrentMap, MapError, MapHandle, UnderLock};

/// One bucket: its pairs behind its lock.
type Bucket<K, V, L> = Mutex<L, Vec<(K, V)>>;

/// A hash table of `Vec` buckets, each behind its own lock `L`.
pub struct LockedHashMap<K, V, L: RawMutex, S = RandomState> {
    /// Not padded (as `LfHashMap`'s buckets): the footprint of a large table
    /// matters more than neighbouring buckets' contention.
    buckets: Box<[Bucket<K, V, L>]>,
    hasher: S,
}

impl<K, V, L: RawMutex, S: BuildHasher + Default> LockedHashMap<K, V, L, S> {
    /// An empty table of [`DEFAULT_BUCKETS`] buckets.
    pub fn new() -> Self {
        Self::with_buckets(DEFAULT_BUCKETS).expect("the default is >= 1")
    }

    /// An empty table of `buckets` buckets (fixed). Errors if `buckets` is 0.
    pub fn with_buckets(buckets: usize) -> Result<Self, MapError> {
        Self::with_hasher(buckets, S::default())
    }
}

impl<K, V, L: RawMutex, S: BuildHasher + Default> Default for LockedHashMap<K, V, L, S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K, V, L: RawMutex, S: BuildHasher> LockedHashMap<K, V, L, S> {
    /// An empty table of `buckets` buckets hashing with `hasher`. Errors if
    /// `buckets` is 0.
    pub fn with_hasher(buckets: usize, hasher: S) -> Result<Self, MapError> {
        if buckets == 0 {
            return Err(MapError::ZeroBuckets);
        }
        Ok(Self {
            buckets: (0..buckets).map(|_| Mutex::new(Vec::new())).collect(),
            hasher,
        })
    }

    /// The number of buckets (fixed).
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }
}

impl<K: Hash + Eq, V, L: RawMutex, S: BuildHasher> LockedHashMap<K, V, L, S> {
    fn bucket(&self, key: &K) -> &Mutex<L, Vec<(K, V)>> {
        let h = self.hasher.hash_one(key);
        // Multiply-shift, as `LfHashMap`.
        &self.buckets[((u128::from(h) * self.buckets.len() as u128) >> 64) as usize]
    }

    /// Inserts `key → value` if `key` is absent; `false` if it was present
    /// (the pair is then dropped, after the lock is released).
    ///
    /// # Panics
    /// If called from a `Hash`, `Eq` or `Clone` (or `for_each` callback) that a
    /// table runs under its lock (see the [module documentation](self)).
    #[must_use = "insert does not replace: `false` means the key was present and `value` was dropped"]
    pub fn insert(&self, key: K, value: V) -> bool {
        let b = self.bucket(&key);
        let _u = UnderLock::enter("LockedHashMap::insert");
        let mut b = b.lock();
        if b.iter().any(|(k, _)| *k == key) {
            // The lock is released before `key` and `value` (parameters) drop.
            return false;
        }
        b.push((key, value));
        true
    }

    /// Removes `key` and returns its value (the key is dropped after the lock
    /// is released).
    ///
    /// # Panics
    /// As [`insert`](Self::insert).
    pub fn remove(&self, key: &K) -> Option<V> {
        let b = self.bucket(key);
        let (k, v) = {
            let _u = UnderLock::enter("LockedHashMap::remove");
            let mut b = b.lock();
            let i = b.iter().position(|(k, _)| k == key)?;
            b.swap_remove(i)
        };
        drop(k);
        Some(v)
    }

    /// A clone of `key`'s value.
    ///
    /// # Panics
    /// As [`insert`](Self::insert).
    pub fn get(&self, key: &K) -> Option<V>
    where
        V: Clone,
    {
        let b = self.bucket(key);
        let _u = UnderLock::enter("LockedHashMap::get");
        let b = b.lock();
        b.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    }

    /// Whether `key` is present.
    ///
    /// # Panics
    /// As [`insert`](Self::insert).
    pub fn contains_key(&self, key: &K) -> bool {
        let b = self.bucket(key);
        let _u = UnderLock::enter("LockedHashMap::contains_key");
        b.lock().iter().any(|(k, _)| k == key)
    }

    /// The number of entries: buckets are locked one after another, so under
    /// concurrent updates the sum is approximate.
    ///
    /// # Panics
    /// As [`insert`](Self::insert).
    pub fn len(&self) -> usize {
        let _u = UnderLock::enter("LockedHashMap::len");
        self.buckets.iter().map(|b| b.lock().len()).sum()
    }

    /// Whether [`len`](Self::len) is 0 (as approximate).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An iterator over clones of the entries, one bucket at a time (each
    /// copied under its lock, so no lock is held between calls to `next`: the
    /// code that consumes the iterator may use the table).
    /// Weakly consistent, as [`LfHashMap::iter`](super::hash::LfHashMap::iter):
    /// a key present throughout is yielded exactly once, none twice.
    ///
    /// # Panics
    /// As [`insert`](Self::insert) (each `next` that copies a bucket).
    pub fn iter(&self) -> impl Iterator<Item = (K, V)> + '_
    where
        K: Clone,
        V: Clone,
    {
        self.buckets.iter().flat_map(|b| {
            // Filled under the lock, dropped after it (also when a `clone`
            // panics midway): no `Drop` runs under the lock.
            let (mut ks, mut vs) = (Vec::new(), Vec::new());
            {
                let _u = UnderLock::enter("LockedHashMap::iter");
                let b = b.lock();
                ks.reserve(b.len());
                vs.reserve(b.len());
                for (k, v) in b.iter() {
                    ks.push(k.clone());
                    vs.push(v.clone());
                }
            }
            ks.into_iter().zip(vs)
        })
    }

    /// Calls `f` on every entry, one bucket (locked) at a time.
    ///
    /// `f` runs under the bucket's lock: it must not call an operation of this
    /// (or any lock-based or CR) table, which panics ([`iter`](Self::iter)
    /// runs no user code under a lock).
    ///
    /// # Panics
    /// As [`insert`](Self::insert).
    pub fn for_each(&self, mut f: impl FnMut(&K, &V)) {
        for b in self.buckets.iter() {
            let _u = UnderLock::enter("LockedHashMap::for_each");
            for (k, v) in b.lock().iter() {
                f(k, v);
            }
        }
    }
}

impl<K, V, L: RawMutex, S> fmt::Debug for LockedHashMap<K, V, L, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockedHashMap")
            .field("buckets", &self.buckets.len())
            .field("lock", &std::any::type_name::<L>())
            .finish_non_exhaustive()
    }
}

impl<K, V, L, S> MapHandle<K, V> for &LockedHashMap<K, V, L, S>
where
    K: Hash + Eq,
    V: Clone,
    L: RawMutex,
    S: BuildHasher,
{
    fn insert(&mut self, key: K, value: V) -> bool {
        LockedHashMap::insert(self, key, value)
    }

    fn get(&mut self, key: &K) -> Option<V> {
        LockedHashMap::get(self, key)
    }

    fn remove(&mut self, key: &K) -> Option<V> {
        LockedHashMap::remove(self, key)
    }

    fn contains_key(&mut self, key: &K) -> bool {
        LockedHashMap::contains_key(self, key)
    }
}

impl<K, V, L, S> ConcurrentMap<K, V> for LockedHashMap<K, V, L, S>
where
    K: Hash + Eq + Send + Sync,
    V: Clone + Send + Sync,
    L: RawMutex + Send + Sync,
    S: BuildHasher + Send + Sync,
{
    type Handle<'a>
        = &'a Self
    where
        Self: 'a;

    fn handle(&self) -> &Self {
        self
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::lock::{Native, TasB};

    #[test]
    fn map_operations() {
        let m: LockedHashMap<u32, String, TasB> = LockedHashMap::with_buckets(3).unwrap();
        for k in 0..10 {
            assert!(m.insert(k, k.to_string()));
        }
        assert!(!m.insert(4, "x".into()));
        assert_eq!(m.get(&4).as_deref(), Some("4"));
        assert_eq!(m.remove(&4).as_deref(), Some("4"));
        assert!(!m.contains_key(&4));
        assert_eq!(m.len(), 9);
        let mut n = 0;
        m.for_each(|k, v| {
            assert_eq!(k.to_string(), *v);
            n += 1
        });
        assert_eq!(n, 9);
        assert!(!m.is_empty());
        assert_eq!(m.buckets(), 3);
        assert!(format!("{m:?}").starts_with("LockedHashMap { buckets: 3, lock: "));
        let mut h = ConcurrentMap::handle(&m);
        assert!(MapHandle::insert(&mut h, 4, "four".into()));
        assert_eq!(MapHandle::get(&mut h, &4).as_deref(), Some("four"));
        assert!(LockedHashMap::<u8, u8, Native>::with_buckets(0).is_err());
    }

    /// A key whose drop uses the table (a removed key is dropped after the
    /// lock is released), and whose `Eq` tries to: the documented panic, the
    /// lock released, the table usable after.
    #[test]
    fn a_key_may_use_the_table_from_drop_not_from_eq() {
        type Table = LockedHashMap<Key, u32, TasB>;
        struct Key(u32, std::sync::Weak<Table>, bool);
        impl PartialEq for Key {
            fn eq(&self, o: &Self) -> bool {
                let armed = if self.2 { self } else { o };
                if let (true, Some(m)) = (armed.2, armed.1.upgrade()) {
                    m.contains_key(&Key(0, std::sync::Weak::new(), false));
                }
                self.0 == o.0
            }
        }
        impl Eq for Key {}
        impl std::hash::Hash for Key {
            fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
                self.0.hash(h)
            }
        }
        impl Drop for Key {
            fn drop(&mut self) {
                if let (false, Some(m)) = (self.2, self.1.upgrade()) {
                    assert!(m.insert(Key(self.0 + 100, std::sync::Weak::new(), false), 0));
                }
            }
        }
        let m = std::sync::Arc::new(Table::with_buckets(1).unwrap());
        let w = std::sync::Arc::downgrade(&m);
        assert!(m.insert(Key(1, w.clone(), false), 1));
        assert_eq!(m.remove(&Key(1, std::sync::Weak::new(), false)), Some(1));
        assert!(
            m.contains_key(&Key(101, std::sync::Weak::new(), false)),
            "the drop inserted"
        );
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            m.get(&Key(101, w.clone(), true))
        }));
        let msg = r.expect_err("`Eq` under the lock called contains_key");
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("would deadlock"), "{msg}");
        assert_eq!(m.len(), 1, "usable: the lock was released");
        assert_eq!(m.remove(&Key(101, std::sync::Weak::new(), false)), Some(0));
    }
}
