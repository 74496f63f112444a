//! The map interface shared by the hash tables of Hart's thesis (papers/002_… §3.2,
//! §5.3): [`ConcurrentMap`] hands each thread a [`MapHandle`], so one test or
//! benchmark drives every table, whatever its synchronization and reclamation.
//!
//! The tables are **insert-if-absent** maps, as Hart's are (a key is in a table
//! at most once and an insert of a present key fails): [`MapHandle::insert`]
//! does not replace a value; remove the key first. Values are handed out as
//! clones, because a lock-free table cannot move a value out of a node that
//! concurrent readers may still be reading.
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

/// Invalid table parameters supplied by the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MapError {
    /// A table needs at least one bucket.
    ZeroBuckets,
}

impl std::fmt::Display for MapError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ZeroBuckets => f.write_str(
                "hash table with 0 buckets: must be >= 1 (about the number of keys expected; Hart uses 32)",
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
    }
}
