//! RW-TAS-B: a centralized reader-writer lock — one word holding a writer flag and
//! a reader count — with bounded exponential backoff.
//!
//! Wisniewski, Kontothanassis & Scott, PPoPP 1995 §4 (papers/001_…, "RW-TAS-B", the
//! centralized `test_and_set`-based baseline); wear [`RwNp`](super::RwNp) for
//! RW-TAS-B-np. Readers enter by CAS-incrementing the count while no writer holds
//! the word; a writer enters by CAS from 0 (no reader, no writer). A failed
//! attempt backs off (calibrated busy work, 100 ns doubling to 30 µs, as
//! [`TasB`](crate::lock::TasB)), asking the shared waiting policy
//! ([`Waiter`]) after each interval whether to go on;
//! once it advises parking (the patience is spent: the holder is slow or
//! preempted), the waiter sets [`SLEEPERS`] and parks on the word
//! (`sched::park`) — only while what it waits for is still held — and the
//! release that ends that hold wakes every sleeper. No `sched_yield`.
//!
//! | word bits              | meaning                                         |
//! |------------------------|-------------------------------------------------|
//! | 0..29: `n`             | `n` readers inside                              |
//! | [`SLEEPERS`] (29)      | a waiter is (about to be) parked on the word    |
//! | [`UPGRADABLE`] (30)    | an upgradable reader inside (beside `n` readers)|
//! | [`WRITER`] (31)        | one writer inside, no reader                    |
//!
//! Who waits for what, and which release wakes it (only a release that sees
//! [`SLEEPERS`] set calls `unpark_all`, after clearing the bit):
//!
//! | waiter             | parks while              | woken by                              |
//! |--------------------|--------------------------|---------------------------------------|
//! | reader             | WRITER                   | `unlock_exclusive`                    |
//! | writer             | anything but SLEEPERS    | the last reader out, `unlock_exclusive`, `unlock_upgradable` |
//! | upgradable reader  | WRITER or UPGRADABLE     | `unlock_exclusive`, `unlock_upgradable` |
//! | upgrade            | a reader inside          | the last reader out                   |
//!
//! The acquisitions keep [`SLEEPERS`] as they find it. No wake-up is lost: a
//! sleeper sets the bit by a CAS from the very value it found blocked, and
//! parks only while the word still holds that value (the futex compares); a
//! release is a read-modify-write of the same word, so it either comes before
//! the CAS (which then fails, and the waiter looks again) or reads the bit.
//!
//! Upgradable reads (`lock_api::RawRwLockUpgrade`): one thread at a time holds
//! [`UPGRADABLE`] beside any number of readers, excluding writers and other
//! upgradable readers; it upgrades by CAS from exactly `UPGRADABLE` (no reader
//! left) to [`WRITER`], backing off meanwhile — new readers may still enter, so
//! like a writer it can be starved by a stream of readers.
//!
//! Uses `sched`: `Waiter`, `park`/`unpark_all`, `pause/resume_no_preempt`
//! around a park (a parked waiter holds no processor). Progress: deadlock-free; neither FIFO nor fair —
//! a stream of readers can starve a writer (the reason the paper's fair queued
//! locks exist).
//!
//! ```
//! use mpsync::rwlock::{RwLock, RwTasB};
//! let l: RwLock<RwTasB, u32> = RwLock::new(1);
//! {
//!     let (a, b) = (l.read(), l.read()); // readers share
//!     assert_eq!(*a + *b, 2);
//! }
//! *l.write() += 1;
//! assert_eq!(*l.read(), 2);
//! ```

use std::time::{Duration, Instant};

use crate::sched::{self, Wait, Waiter, waiter::CHECK_EVERY};
use crate::sync::{AtomicU32, Ordering};
use crate::util::backoff::{Backoff, DEFAULT_CAP_NS, DEFAULT_MIN_NS};
use crate::util::busy::BusyWork;

/// The writer bit of [`RwTasB`]'s word.
pub const WRITER: u32 = 1 << 31;
/// The upgradable-reader bit of [`RwTasB`]'s word.
pub const UPGRADABLE: u32 = 1 << 30;
/// The sleepers bit of [`RwTasB`]'s word: a waiter is (about to be) parked.
pub const SLEEPERS: u32 = 1 << 29;
/// The reader count's bits of [`RwTasB`]'s word.
const COUNT: u32 = SLEEPERS - 1;

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
        if v & WRITER != 0 { 0 } else { v & COUNT }
    }

    #[inline]
    fn try_shared(&self) -> bool {
        // Relaxed: a hint; the CAS re-checks.
        let v = self.word.load(Ordering::Relaxed);
        // Acquire: pairs with the writer's Release swap in `unlock_exclusive`.
        // The count (bits 0..29) must not carry into the SLEEPERS bit.
        v & WRITER == 0
            && v & COUNT != COUNT
            && self
                .word
                .compare_exchange(v, v + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    #[inline]
    fn try_exclusive(&self) -> bool {
        // Relaxed load: a hint. Acquire CAS: pairs with the Release of the last
        // reader's decrement and of the previous writer's swap. Keeps SLEEPERS.
        let v = self.word.load(Ordering::Relaxed);
        v & !SLEEPERS == 0
            && self
                .word
                .compare_exchange(v, v | WRITER, Ordering::Acquire, Ordering::Relaxed)
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
        // Relaxed load: a hint. Acquire CAS: pairs with the Release decrements
        // of the readers that were inside beside us (their sections happen
        // before our write section). Keeps SLEEPERS.
        let v = self.word.load(Ordering::Relaxed);
        v & !SLEEPERS == UPGRADABLE
            && self
                .word
                .compare_exchange(
                    v,
                    WRITER | (v & SLEEPERS),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// Backs off and retries `attempt` until it succeeds; parks on the word
    /// while `blocked` (the waiter's row of the module's table) holds, once
    /// the shared waiting policy advises it.
    #[cold]
    fn wait(&self, attempt: impl FnMut() -> bool, blocked: impl Fn(u32) -> bool) {
        let got = self.wait_until(attempt, blocked, None);
        debug_assert!(got);
    }

    /// As [`wait`](Self::wait), giving up at `deadline` (if any): whether
    /// `attempt` succeeded. A waiter that gives up has changed nothing but
    /// perhaps [`SLEEPERS`], which only costs the next release a wake-up call
    /// (module doc: a sleeper that left is one that was woken early).
    #[cold]
    fn wait_until(
        &self,
        mut attempt: impl FnMut() -> bool,
        blocked: impl Fn(u32) -> bool,
        deadline: Option<Instant>,
    ) -> bool {
        // The nominal rate until the process calibrated (never calibrate here).
        let bw = BusyWork::global_or_nominal();
        let (min, cap) = (
            bw.iters_for_ns(DEFAULT_MIN_NS),
            bw.iters_for_ns(DEFAULT_CAP_NS),
        );
        let mut backoff = Backoff::from_iters(min, cap);
        let mut w = Waiter::new();
        loop {
            let left = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return false,
                },
            };
            // One look per interval; at the cap (30 µs intervals) a full
            // look-period of PAUSEs, so that the advice comes in time. (Under
            // loom the first look advises parking: the models see the sleep.)
            let spins = if backoff.current_iters() >= cap.max(1) {
                CHECK_EVERY
            } else {
                1
            };
            if (0..spins).any(|_| w.spin(None) == Wait::Park) {
                self.sleep(&blocked, left);
                w.restart();
                backoff.reset(min);
            } else {
                backoff.spin();
            }
            if attempt() {
                return true;
            }
        }
    }

    /// Parks on the word if it still shows what the caller waits for
    /// (`blocked`), announcing it with [`SLEEPERS`], for at most `timeout`;
    /// see the module doc.
    #[cold]
    fn sleep(&self, blocked: &impl Fn(u32) -> bool, timeout: Option<Duration>) {
        // Relaxed: a hint; the CAS and the futex compare re-check.
        let v = self.word.load(Ordering::Relaxed);
        if !blocked(v) {
            return;
        }
        let s = v | SLEEPERS;
        // Relaxed: the announcement orders nothing else; the releaser reads
        // it by its read-modify-write of the same word.
        if v != s
            && self
                .word
                .compare_exchange(v, s, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let cb = sched::current();
        // Parked, we hold no processor: let the scheduler preempt us meanwhile
        // (only the outermost request of the owner's own pauses).
        let paused = cb.depth() > 0 && cb.pause_no_preempt();
        sched::park(&self.word, s, timeout);
        if paused {
            cb.resume_no_preempt();
        }
    }

    /// A release saw [`SLEEPERS`] (and what they wait for is over): clear the
    /// bit, then wake them all (each looks again, and parks again if need be).
    #[cold]
    fn wake_sleepers(&self) {
        // Relaxed: a sleeper that set the bit before this clears it is parked
        // (woken below) or not yet (its futex compare fails on the change).
        self.word.fetch_and(!SLEEPERS, Ordering::Relaxed);
        sched::unpark_all(&self.word);
    }
}

impl Default for RwTasB {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: the word gains WRITER only by a CAS from 0 (no reader, no writer;
// SLEEPERS, which only says someone may be parked, kept), and a reader
// increments only a word without WRITER, so a writer is alone. The
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
            self.wait(|| self.try_shared(), |v| v & WRITER != 0);
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
        let prev = self.word.fetch_sub(1, Ordering::Release);
        if prev & SLEEPERS != 0 && prev & COUNT == 1 {
            // The last reader out, and someone parked (a writer or an upgrade).
            self.wake_sleepers();
        }
    }

    #[inline]
    fn lock_exclusive(&self) -> Self::ExclusiveGuard {
        if !self.try_exclusive() {
            self.wait(|| self.try_exclusive(), |v| v & !SLEEPERS != 0);
        }
        lock_api::GuardSend::new()
    }

    #[inline]
    fn try_lock_exclusive(&self) -> Option<Self::ExclusiveGuard> {
        self.try_exclusive().then(lock_api::GuardSend::new)
    }

    #[inline]
    unsafe fn unlock_exclusive(&self, _guard: Self::ExclusiveGuard) {
        // Release: publishes the write section to the next Acquire CAS. A swap:
        // the sleepers bit is read in the same step as the word is freed.
        if self.word.swap(0, Ordering::Release) & SLEEPERS != 0 {
            sched::unpark_all(&self.word);
        }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        // Relaxed: a snapshot.
        self.word.load(Ordering::Relaxed) & !SLEEPERS != 0
    }

    #[inline]
    fn is_locked_exclusive(&self) -> bool {
        // Relaxed: a snapshot.
        self.word.load(Ordering::Relaxed) & WRITER != 0
    }
}

// SAFETY: [`UPGRADABLE`] is set only by CAS from a word with neither it nor
// WRITER, so at most one upgradable reader holds it, and no writer (WRITER is
// set only from 0, SLEEPERS aside). The upgrade CASes from exactly UPGRADABLE
// (no reader, no writer; SLEEPERS kept) to WRITER, with Acquire pairing with
// the readers' Release decrements.
unsafe impl lock_api::RawRwLockUpgrade for RwTasB {
    type UpgradableGuard = lock_api::GuardSend;

    #[inline]
    fn lock_upgradable(&self) -> Self::UpgradableGuard {
        if !self.try_upgradable() {
            self.wait(|| self.try_upgradable(), |v| v & (WRITER | UPGRADABLE) != 0);
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
        if self.word.fetch_sub(UPGRADABLE, Ordering::Release) & SLEEPERS != 0 {
            self.wake_sleepers();
        }
    }

    #[inline]
    unsafe fn upgrade(&self, _guard: Self::UpgradableGuard) -> Self::ExclusiveGuard {
        if !self.try_upgrade_now() {
            self.wait(|| self.try_upgrade_now(), |v| v & COUNT != 0);
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

// SAFETY: while a writer holds the word it is `WRITER` or `WRITER | SLEEPERS`
// (readers and writers enter only without WRITER; a waiter only adds
// SLEEPERS), so the swap to one reader turns the writer into that reader
// without a moment in which the word is free: no writer can enter in between.
unsafe impl lock_api::RawRwLockDowngrade for RwTasB {
    #[inline]
    unsafe fn downgrade(&self, _guard: Self::ExclusiveGuard) -> Self::SharedGuard {
        // Release: publishes the write section to the readers' Acquire CAS
        // (and, through the last reader's Release decrement, to the next
        // writer). A swap, as in `unlock_exclusive`: the sleepers bit is read
        // in the same step; the readers parked while WRITER are woken (a
        // writer among the woken parks again, on our read).
        if self.word.swap(1, Ordering::Release) & SLEEPERS != 0 {
            sched::unpark_all(&self.word);
        }
        lock_api::GuardSend::new()
    }
}

// SAFETY: an upgradable reader's word is `UPGRADABLE | n` (SLEEPERS aside):
// the CAS that counts it in as a reader and clears UPGRADABLE leaves the count
// above 0, so no writer enters in between (WRITER is set only from no reader);
// it is refused while the count is full, so it never carries into SLEEPERS. A
// writer's word is `WRITER` (SLEEPERS aside): the swap to `UPGRADABLE` turns
// it into the upgradable reader, excluding writers and other upgradable
// readers throughout, as `try_upgradable` would.
unsafe impl lock_api::RawRwLockUpgradeDowngrade for RwTasB {
    unsafe fn downgrade_upgradable(&self, _guard: Self::UpgradableGuard) -> Self::SharedGuard {
        // Relaxed (load and CAS): an upgradable reader wrote nothing to
        // publish; the reader it becomes publishes its section by its Release
        // decrement in `unlock_shared`. SLEEPERS cleared in the same step: the
        // upgradable readers parked while UPGRADABLE are woken below (a
        // writer among the woken parks again, on our read).
        let mut v = self.word.load(Ordering::Relaxed);
        loop {
            if v & COUNT == COUNT {
                // 2^29 − 1 readers inside (forgotten guards, surely): wait
                // for one to leave rather than carry into SLEEPERS. No park:
                // a reader's unlock wakes nobody until the last one leaves.
                sched::yield_now();
                v = self.word.load(Ordering::Relaxed);
                continue;
            }
            let new = (v - UPGRADABLE + 1) & !SLEEPERS;
            match self
                .word
                .compare_exchange_weak(v, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => v = now,
            }
        }
        if v & SLEEPERS != 0 {
            sched::unpark_all(&self.word);
        }
        lock_api::GuardSend::new()
    }

    unsafe fn downgrade_to_upgradable(
        &self,
        _guard: Self::ExclusiveGuard,
    ) -> Self::UpgradableGuard {
        // Release: publishes the write section to the readers' Acquire CAS, as
        // in `downgrade`; the readers parked while WRITER are woken.
        if self.word.swap(UPGRADABLE, Ordering::Release) & SLEEPERS != 0 {
            sched::unpark_all(&self.word);
        }
        lock_api::GuardSend::new()
    }
}

// SAFETY: a timed attempt is the untimed one's loop ([`RwTasB::wait_until`])
// stopped at the deadline: it acquires only by the same CASes, and one that
// gives up holds nothing (it may leave SLEEPERS set, which only makes the next
// release call `unpark_all`).
unsafe impl lock_api::RawRwLockTimed for RwTasB {
    type Duration = Duration;
    type Instant = Instant;

    fn try_lock_shared_for(&self, timeout: Duration) -> Option<Self::SharedGuard> {
        super::try_shared_for_until(self, timeout)
    }

    fn try_lock_shared_until(&self, deadline: Instant) -> Option<Self::SharedGuard> {
        (self.try_shared()
            || self.wait_until(|| self.try_shared(), |v| v & WRITER != 0, Some(deadline)))
        .then(lock_api::GuardSend::new)
    }

    fn try_lock_exclusive_for(&self, timeout: Duration) -> Option<Self::ExclusiveGuard> {
        super::try_exclusive_for_until(self, timeout)
    }

    fn try_lock_exclusive_until(&self, deadline: Instant) -> Option<Self::ExclusiveGuard> {
        (self.try_exclusive()
            || self.wait_until(
                || self.try_exclusive(),
                |v| v & !SLEEPERS != 0,
                Some(deadline),
            ))
        .then(lock_api::GuardSend::new)
    }
}
