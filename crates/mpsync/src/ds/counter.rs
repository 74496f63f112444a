//! Shared counters: under a lock, by a CAS loop, and by fetch-and-add.
//!
//! Michael & Scott, PODC 1996 (papers/000_…) §4.4: the paper compares a counter
//! under ordinary and preemption-safe locks with the LL/SC read-modify-write loop
//! and notes that fetch-and-add would do better still.
//!
//! | type                 | paper name            | progress                          |
//! |----------------------|-----------------------|-----------------------------------|
//! | [`LockedCounter<L>`] | single lock (`-np`)   | blocking (as `L`)                 |
//! | [`CasCounter`]       | LL/SC counter         | lock-free; bounded backoff on failure |
//! | [`FetchAddCounter`]  | fetch_and_add         | wait-free                         |
//!
//! Each counter word is alone on its cache line. Uses `lock` (through the type
//! parameter), `util` (padding), `ds::lf` (the CAS backoff), `sync`.

use std::fmt;

use super::lf::CasBackoff;
use crate::sync::{AtomicU64, Ordering};
use crate::util::CachePadded;

use super::Counter;

/// A counter under one lock of type `L`.
///
/// ```
/// use mpsync::ds::Counter;
/// use mpsync::ds::counter::LockedCounter;
/// use mpsync::lock::TasBNp;
///
/// let c: LockedCounter<TasBNp> = LockedCounter::new();
/// assert_eq!(c.increment(), 0);
/// assert_eq!(c.increment(), 1);
/// assert_eq!(c.get(), 2);
/// ```
pub struct LockedCounter<L: lock_api::RawMutex> {
    value: CachePadded<lock_api::Mutex<L, u64>>,
}

impl<L: lock_api::RawMutex> LockedCounter<L> {
    /// A counter at zero.
    pub fn new() -> Self {
        Self {
            value: CachePadded::new(lock_api::Mutex::new(0)),
        }
    }
}

impl<L: lock_api::RawMutex> Default for LockedCounter<L> {
    fn default() -> Self {
        Self::new()
    }
}

impl<L: lock_api::RawMutex + Send + Sync> Counter for LockedCounter<L> {
    fn increment(&self) -> u64 {
        let mut v = self.value.lock();
        let before = *v;
        *v = before.wrapping_add(1);
        before
    }

    fn get(&self) -> u64 {
        *self.value.lock()
    }
}

impl<L: lock_api::RawMutex> fmt::Debug for LockedCounter<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockedCounter")
            .field("value", &*self.value.lock())
            .finish()
    }
}

/// A counter incremented by a compare-and-swap loop (the LL/SC counter of paper
/// 000 §4.4), backing off (bounded exponential, cap 30 µs) after each failure.
///
/// ```
/// use mpsync::ds::Counter;
/// use mpsync::ds::counter::CasCounter;
///
/// let c = CasCounter::new();
/// assert_eq!(c.increment(), 0);
/// assert_eq!(c.get(), 1);
/// ```
#[derive(Default)]
pub struct CasCounter {
    value: CachePadded<AtomicU64>,
}

impl CasCounter {
    /// A counter at zero.
    pub fn new() -> Self {
        Self {
            value: CachePadded::new(AtomicU64::new(0)),
        }
    }
}

impl Counter for CasCounter {
    fn increment(&self) -> u64 {
        // Relaxed: a counter orders nothing but itself, and the CAS below checks
        // the value it read is still the latest in the word's modification order.
        let mut cur = self.value.load(Ordering::Relaxed);
        let mut backoff = CasBackoff::new();
        loop {
            // Relaxed (both): as above; only the word's own modification order matters.
            match self.value.compare_exchange_weak(
                cur,
                cur.wrapping_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(before) => return before,
                Err(now) => {
                    cur = now;
                    backoff.spin();
                }
            }
        }
    }

    fn get(&self) -> u64 {
        // Relaxed: a snapshot of the word; it synchronizes nothing.
        self.value.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for CasCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CasCounter")
            .field("value", &self.get())
            .finish()
    }
}

/// A counter incremented by one hardware fetch-and-add.
///
/// ```
/// use mpsync::ds::Counter;
/// use mpsync::ds::counter::FetchAddCounter;
///
/// let c = FetchAddCounter::new();
/// assert_eq!(c.increment(), 0);
/// assert_eq!(c.increment(), 1);
/// assert_eq!(c.get(), 2);
/// ```
#[derive(Default)]
pub struct FetchAddCounter {
    value: CachePadded<AtomicU64>,
}

impl FetchAddCounter {
    /// A counter at zero.
    pub fn new() -> Self {
        Self {
            value: CachePadded::new(AtomicU64::new(0)),
        }
    }
}

impl Counter for FetchAddCounter {
    fn increment(&self) -> u64 {
        // Relaxed: an RMW always sees the latest value; the counter orders nothing else.
        self.value.fetch_add(1, Ordering::Relaxed)
    }

    fn get(&self) -> u64 {
        // Relaxed: a snapshot of the word; it synchronizes nothing.
        self.value.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for FetchAddCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FetchAddCounter")
            .field("value", &self.get())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::lock::{TasB, TasBNp};

    fn counts<C: Counter>(c: C) {
        for i in 0..10 {
            assert_eq!(c.increment(), i);
        }
        assert_eq!(c.get(), 10);
        let (threads, per) = if cfg!(miri) { (2, 10) } else { (4, 10_000) };
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    let mut last = None;
                    for _ in 0..per {
                        let v = c.increment();
                        // One thread's increments return increasing values.
                        assert!(last < Some(v));
                        last = Some(v);
                    }
                });
            }
        });
        assert_eq!(c.get(), 10 + threads * per);
    }

    #[test]
    fn every_counter_counts() {
        counts(LockedCounter::<TasB>::new());
        counts(LockedCounter::<TasBNp>::default());
        counts(CasCounter::new());
        counts(FetchAddCounter::default());
    }

    #[test]
    fn debug_shows_the_value() {
        let c = CasCounter::new();
        c.increment();
        assert_eq!(format!("{c:?}"), "CasCounter { value: 1 }");
        assert_eq!(
            format!("{:?}", FetchAddCounter::new()),
            "FetchAddCounter { value: 0 }"
        );
        assert_eq!(
            format!("{:?}", LockedCounter::<TasB>::new()),
            "LockedCounter { value: 0 }"
        );
    }
}
