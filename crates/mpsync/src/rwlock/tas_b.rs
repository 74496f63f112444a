//! RW-TAS-B: a centralized reader-writer lock — one word holding a writer flag and
//! a reader count — with bounded exponential backoff.
//!
//! Wisniewski, Kontothanassis & Scott, PPoPP 1995 §4 (papers/001_…, "RW-TAS-B", the
//! centralized `test_and_set`-based baseline); wear [`RwNp`](super::RwNp) for
//! RW-TAS-B-np. Readers enter by CAS-incrementing the count while no writer holds
//! the word; a writer enters by CAS from 0 (no reader, no writer). A failed
//! attempt backs off (calibrated busy work, 100 ns doubling to 30 µs, as
//! [`TasB`](crate::lock::TasB)).
//!
//! | word                | meaning                          |
//! |---------------------|----------------------------------|
//! | 0                   | free                             |
//! | `n` (1 ≤ n < 2^31)  | `n` readers inside               |
//! | [`WRITER`]          | one writer inside, no reader     |
//! | [`UPGRADABLE`] + `n`| an upgradable reader and `n` readers |
//!
//! Upgradable reads (`lock_api::RawRwLockUpgrade`): one thread at a time holds
//! [`UPGRADABLE`] beside any number of readers, excluding writers and other
//! upgradable readers; it upgrades by CAS from exactly `UPGRADABLE` (no reader
//! left) to [`WRITER`], backing off meanwhile — new readers may still enter, so
//! like a writer it can be starved by a stream of readers.
//!
//! Uses `sched`: nothing. Progress: deadlock-free; neither FIFO nor fair —
//! a stream of readers can starve a writer (the reason the paper's fair queued
//! locks exist).
//!
//! ```
//! use mpsync::{RwLock, rwlock::RwTasB};
//! let l: RwLock<RwTasB, u32> = RwLock::new(1);
//! {
//!     let (a, b) = (l.read(), l.read()); // readers share
//!     assert_eq!(*a + *b, 2);
//! }
//! *l.write() += 1;
//! assert_eq!(*l.read(), 2);
//! ```

use crate::sync::{AtomicU32, Ordering};
use crate::util::backoff::{Backoff, DEFAULT_CAP_NS, DEFAULT_MIN_NS};
use crate::util::busy::BusyWork;

/// The writer bit of [`RwTasB`]'s word.
pub const WRITER: u32 = 1 << 31;
/// The upgradable-reader bit of [`RwTasB`]'s word.
pub const UPGRADABLE: u32 = 1 << 30;

/// Centralized reader-writer lock with bounded exponential backoff.
#[derive(Debug)]
#[repr(C)]
pub struct RwTasB {
    word: AtomicU32,
}

impl RwTasB {
    /// An unlocked lock.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            word: AtomicU32::new(0),
        }
    }

    /// An unlocked lock.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            word: AtomicU32::new(0),
        }
    }

    /// Readers inside now (a snapshot).
    pub fn readers(&self) -> u32 {
        // Relaxed: a momentary snapshot.
        let v = self.word.load(Ordering::Relaxed);
        if v & WRITER != 0 { 0 } else { v & !UPGRADABLE }
    }

    #[inline]
    fn try_shared(&self) -> bool {
        // Relaxed: a hint; the CAS re-checks.
        let v = self.word.load(Ordering::Relaxed);
        // Acquire: pairs with the writer's Release store in `unlock_exclusive`.
        // The count (bits 0..30) must not carry into the UPGRADABLE bit.
        v & WRITER == 0
            && v < WRITER - 1
            && v & (UPGRADABLE - 1) != UPGRADABLE - 1
            && self
                .word
                .compare_exchange(v, v + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    #[inline]
    fn try_exclusive(&self) -> bool {
        // Relaxed load: a hint. Acquire CAS: pairs with the Release of the last
        // reader's decrement and of the previous writer's store.
        self.word.load(Ordering::Relaxed) == 0
            && self
                .word
                .compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    #[inline]
    fn try_upgradable(&self) -> bool {
        // Relaxed: a hint; the CAS re-checks.
        let v = self.word.load(Ordering::Relaxed);
        // Acquire: pairs with the last writer's Release store (and the last
        // upgradable reader's Release decrement).
        v & (WRITER | UPGRADABLE) == 0
            && self
                .word
                .compare_exchange(v, v | UPGRADABLE, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    #[inline]
    fn try_upgrade_now(&self) -> bool {
        // Acquire: pairs with the Release decrements of the readers that were
        // inside beside us (their sections happen before our write section).
        self.word
            .compare_exchange(UPGRADABLE, WRITER, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[cold]
    fn wait(&self, mut attempt: impl FnMut() -> bool) {
        // The nominal rate until the process calibrated (never calibrate here).
        let w = BusyWork::global_or_nominal();
        let mut backoff = Backoff::from_iters(
            w.iters_for_ns(DEFAULT_MIN_NS),
            w.iters_for_ns(DEFAULT_CAP_NS),
        );
        loop {
            backoff.spin();
            if attempt() {
                return;
            }
        }
    }
}

impl Default for RwTasB {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: the word leaves 0 for WRITER only by a CAS from 0 (no reader, no writer),
// and a reader increments only a word without WRITER, so a writer is alone. The
// Acquire CASes pair with the Release decrement / store on unlock.
unsafe impl lock_api::RawRwLock for RwTasB {
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(not(loom))]
    const INIT: Self = Self::new();
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(loom)]
    const INIT: Self = panic!("under loom, use RwTasB::new()");

    type SharedGuard = lock_api::GuardSend;
    type ExclusiveGuard = lock_api::GuardSend;

    #[inline]
    fn lock_shared(&self) -> Self::SharedGuard {
        if !self.try_shared() {
            self.wait(|| self.try_shared());
        }
        lock_api::GuardSend::new()
    }

    #[inline]
    fn try_lock_shared(&self) -> Option<Self::SharedGuard> {
        self.try_shared().then(lock_api::GuardSend::new)
    }

    #[inline]
    unsafe fn unlock_shared(&self, _guard: Self::SharedGuard) {
        // Release: publishes the read section's loads as done before a writer's
        // Acquire CAS (a writer must not overwrite what a reader still reads).
        self.word.fetch_sub(1, Ordering::Release);
    }

    #[inline]
    fn lock_exclusive(&self) -> Self::ExclusiveGuard {
        if !self.try_exclusive() {
            self.wait(|| self.try_exclusive());
        }
        lock_api::GuardSend::new()
    }

    #[inline]
    fn try_lock_exclusive(&self) -> Option<Self::ExclusiveGuard> {
        self.try_exclusive().then(lock_api::GuardSend::new)
    }

    #[inline]
    unsafe fn unlock_exclusive(&self, _guard: Self::ExclusiveGuard) {
        // Release: publishes the write section to the next Acquire CAS.
        self.word.store(0, Ordering::Release);
    }

    #[inline]
    fn is_locked(&self) -> bool {
        // Relaxed: a snapshot.
        self.word.load(Ordering::Relaxed) != 0
    }

    #[inline]
    fn is_locked_exclusive(&self) -> bool {
        // Relaxed: a snapshot.
        self.word.load(Ordering::Relaxed) == WRITER
    }
}

// SAFETY: [`UPGRADABLE`] is set only by CAS from a word with neither it nor
// WRITER, so at most one upgradable reader holds it, and no writer (WRITER is
// set only from 0). The upgrade CASes from exactly UPGRADABLE (no reader, no
// writer) to WRITER, with Acquire pairing with the readers' Release decrements.
unsafe impl lock_api::RawRwLockUpgrade for RwTasB {
    type UpgradableGuard = lock_api::GuardSend;

    #[inline]
    fn lock_upgradable(&self) -> Self::UpgradableGuard {
        if !self.try_upgradable() {
            self.wait(|| self.try_upgradable());
        }
        lock_api::GuardSend::new()
    }

    #[inline]
    fn try_lock_upgradable(&self) -> Option<Self::UpgradableGuard> {
        self.try_upgradable().then(lock_api::GuardSend::new)
    }

    #[inline]
    unsafe fn unlock_upgradable(&self, _guard: Self::UpgradableGuard) {
        // Release: the upgradable read section happens before a later writer's
        // Acquire CAS.
        self.word.fetch_sub(UPGRADABLE, Ordering::Release);
    }

    #[inline]
    unsafe fn upgrade(&self, _guard: Self::UpgradableGuard) -> Self::ExclusiveGuard {
        if !self.try_upgrade_now() {
            self.wait(|| self.try_upgrade_now());
        }
        lock_api::GuardSend::new()
    }

    #[inline]
    unsafe fn try_upgrade(
        &self,
        guard: Self::UpgradableGuard,
    ) -> Result<Self::ExclusiveGuard, Self::UpgradableGuard> {
        if self.try_upgrade_now() {
            Ok(lock_api::GuardSend::new())
        } else {
            Err(guard)
        }
    }
}
