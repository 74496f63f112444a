//! TAS-B: test-and-test-and-set with bounded exponential backoff.
//!
//! Wisniewski, Kontothanassis & Scott, IPPS 1994 §4.1 (papers/003_…, "TAS-B");
//! Michael & Scott, IPPS 1997 §4 (papers/000_…: TATAS, backoff capped at 30 µs).
//! A waiter reads the lock word until it looks free, then swaps; after a failed
//! attempt it backs off for an interval that doubles up to the cap. The backoff is
//! calibrated busy work ([`crate::util::busy`]), not a sleep; the lock never
//! calibrates it itself: until something in the process has
//! ([`BusyWork::global`], as the harness does at start-up), it assumes
//! [`BusyWork::NOMINAL`], so the intervals are then right within about 2x.
//! Uses `sched`: nothing (wrap in [`Np`](super::Np) for TAS-B-np).
//! Implements [`RawMutexTimed`](lock_api::RawMutexTimed) (a waiter that gives up
//! simply stops backing off); not `RawMutexFair`: nobody is known to wait.
//! Progress: deadlock-free, not starvation-free; unfair.
//!
//! ```
//! use mpsync::lock::{Mutex, TasB};
//! use std::time::Duration;
//!
//! let m: Mutex<TasB, Vec<u32>> = Mutex::new(Vec::new());
//! m.lock().push(1);
//! // A lock with a custom backoff cap:
//! let raw = TasB::with_backoff(Duration::from_nanos(200), Duration::from_micros(10)).unwrap();
//! let m2 = Mutex::from_raw(raw, 0u64);
//! *m2.lock() += 1;
//! assert!(TasB::with_backoff(Duration::from_micros(5), Duration::from_micros(1)).is_err());
//! ```

use std::time::{Duration, Instant};

use crate::sync::{AtomicBool, Ordering};
use crate::util::backoff::{Backoff, DEFAULT_CAP_NS, DEFAULT_MIN_NS};
use crate::util::busy::BusyWork;

use super::tas::Flag;
use super::{GIVE_UP_BACKOFF_NS, LockError, SharedClaimLock};

/// Test-and-test-and-set lock with bounded exponential backoff.
#[derive(Debug)]
#[repr(C)]
pub struct TasB {
    locked: AtomicBool,
    min_ns: u32,
    cap_ns: u32,
}

super::loom_const_new! {
    impl[] TasB {
        /// An unlocked lock with the default backoff (100 ns doubling to 30 µs).
        new => Self {
            locked: AtomicBool::new(false),
            min_ns: DEFAULT_MIN_NS as u32,
            cap_ns: DEFAULT_CAP_NS as u32,
        }
    }
}

impl TasB {
    /// An unlocked lock whose backoff starts at `min` and doubles up to `cap`.
    ///
    /// Errors if `min` is zero, `min > cap`, or `cap` exceeds one second.
    pub fn with_backoff(min: Duration, cap: Duration) -> Result<Self, LockError> {
        let (min_ns, cap_ns) = (min.as_nanos(), cap.as_nanos());
        if min_ns == 0 {
            return Err(LockError::InvalidParameter(
                "TAS-B backoff minimum must be > 0 (e.g. 100 ns)".into(),
            ));
        }
        if min_ns > cap_ns {
            return Err(LockError::InvalidParameter(format!(
                "TAS-B backoff minimum {min:?} exceeds the cap {cap:?}: the cap must be >= the minimum (e.g. 100 ns .. 30 µs)"
            )));
        }
        if cap_ns > 1_000_000_000 {
            return Err(LockError::InvalidParameter(format!(
                "TAS-B backoff cap {cap:?} is over 1 s: use at most 1 s (the papers use 30 µs)"
            )));
        }
        let mut l = Self::new();
        l.min_ns = min_ns as u32;
        l.cap_ns = cap_ns as u32;
        Ok(l)
    }

    /// The backoff cap.
    pub fn backoff_cap(&self) -> Duration {
        Duration::from_nanos(self.cap_ns.into())
    }

    #[inline]
    fn try_acquire(&self) -> bool {
        // Test first (Relaxed: only a hint that avoids a useless swap), then swap.
        // Acquire on the swap pairs with the Release store in `unlock`.
        !self.locked.load(Ordering::Relaxed) && !self.locked.swap(true, Ordering::Acquire)
    }

    /// The contended path; with a `deadline`, the timed one
    /// ([`RawMutexTimed`](lock_api::RawMutexTimed), `lock/fair_timed.rs`):
    /// between two attempts it looks at the clock and gives up once the
    /// deadline has passed. A waiter holds nothing while it backs off, so
    /// giving up leaves nothing behind. Returns whether the lock was taken.
    #[cold]
    pub(super) fn lock_slow(&self, deadline: Option<Instant>) -> bool {
        // Never calibrate here (~40 ms on the first contention): before the
        // process has calibrated busy work, a nominal rate.
        let w = BusyWork::global_or_nominal();
        let mut backoff = Backoff::from_iters(
            w.iters_for_ns(self.min_ns.into()),
            w.iters_for_ns(self.cap_ns.into()),
        );
        loop {
            backoff.spin();
            if self.try_acquire() {
                return true;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                crate::sched::stall::point(crate::sched::stall::TIMED_GAVE_UP);
                return false;
            }
        }
    }
}

impl Default for TasB {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: `locked` goes false→true only by a swap that returned false, so at most one
// thread holds the lock; the Acquire swap pairs with the Release store in `unlock`.
unsafe impl lock_api::RawMutex for TasB {
    super::loom_const_init!(TasB);

    type Guard = lock_api::GuardSend;

    #[inline]
    fn lock(&self) -> Self::Guard {
        if !self.try_acquire() {
            self.lock_slow(None);
        }
        lock_api::GuardSend::new()
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        self.try_acquire().then(lock_api::GuardSend::new)
    }

    #[inline]
    unsafe fn unlock(&self, _guard: Self::Guard) {
        // Release: publishes the critical section to the next Acquire swap.
        self.locked.store(false, Ordering::Release);
    }

    #[inline]
    fn is_locked(&self) -> bool {
        // Relaxed: a momentary snapshot, documented as possibly stale.
        self.locked.load(Ordering::Relaxed)
    }
}

impl TasB {
    /// The backoff bounds in nanoseconds as `lock_or_give_up` uses them: the
    /// two parameter words as they are — in shared memory a peer may have
    /// written any `u32` there — clamped to 1 ns ..= the default cap (30 µs),
    /// minimum ≤ cap. Not to what [`with_backoff`](Self::with_backoff) accepts
    /// (up to 1 s): a waiter does not look at the lock while it backs off, so
    /// a peer that left a 1 s minimum there would make every later sender that
    /// found the lock taken once wait a second for a lock free all along —
    /// for as long as the segment lives, since `reset` cannot repair these
    /// words. A peer may make waiters spin tighter, never wait longer. Each
    /// is read once, as `lock_slow` reads them (they are written only at
    /// construction).
    fn claim_backoff_ns(&self) -> (u64, u64) {
        let cap = u64::from(self.cap_ns).clamp(1, DEFAULT_CAP_NS);
        (u64::from(self.min_ns).clamp(1, cap), cap)
    }

    /// `try_acquire` through the flag's byte view: test (a hint), then swap.
    #[inline]
    fn take_shared(&self) -> bool {
        let flag = Flag(&self.locked);
        flag.value() == 0 && flag.take()
    }
}

// SAFETY: `lock_or_give_up` takes the lock only by the Acquire swap of `lock`
// (through the flag's byte view: the same atomic byte, 0 → 1).
unsafe impl SharedClaimLock for TasB {
    /// As `lock`: test, swap, back off (the lock's own bounds, clamped), but
    /// each backoff interval in pieces of [`GIVE_UP_BACKOFF_NS`] with a call of
    /// `give_up` after each.
    fn lock_or_give_up(&self, give_up: &mut dyn FnMut() -> bool) -> Option<lock_api::GuardSend> {
        if self.take_shared() {
            return Some(lock_api::GuardSend::new());
        }
        // As in `lock_slow`: never calibrate here.
        let w = BusyWork::global_or_nominal();
        let (min_ns, cap_ns) = self.claim_backoff_ns();
        let mut backoff = Backoff::from_iters(w.iters_for_ns(min_ns), w.iters_for_ns(cap_ns));
        let slice = w.iters_for_ns(GIVE_UP_BACKOFF_NS);
        loop {
            if backoff.spin_or_stop(slice, give_up) {
                return None;
            }
            if self.take_shared() {
                return Some(lock_api::GuardSend::new());
            }
        }
    }

    /// The flag byte: it cannot show a release followed at once by the next
    /// take.
    fn progress(&self) -> u64 {
        Flag(&self.locked).value().into()
    }

    /// Frees the flag. The backoff words are plain fields that cannot be
    /// written through `&self`; `lock_or_give_up` clamps whatever they hold.
    unsafe fn reset(&self) {
        Flag(&self.locked).clear();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::lock::shared_claim_tests::attempt;

    #[test]
    #[cfg_attr(miri, ignore = "waits on real time")]
    fn scribbled_backoff_words_do_not_delay_give_up() {
        // A held lock whose backoff words a peer set to u32::MAX ns (4.3 s;
        // clamped to 30 µs): each backoff is waited in ~1 µs pieces with a
        // `give_up` call after each, so three calls take microseconds, where
        // three whole backoffs would take seconds.
        let m = Box::leak(Box::new(TasB::new()));
        (m.min_ns, m.cap_ns) = (u32::MAX, u32::MAX);
        let l: &'static TasB = m;
        let _ = lock_api::RawMutex::lock(l); // never unlocked
        let t0 = Instant::now();
        assert!(!attempt(l, 3), "a held lock");
        assert!(
            t0.elapsed() < Duration::from_millis(250),
            "three give_up calls took {:?}",
            t0.elapsed()
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "waits on real time")]
    fn scribbled_backoff_words_do_not_delay_a_free_lock() {
        // Backoff words a peer set to u32::MAX ns: a waiter that found the
        // lock held once must still take it soon after its release. (Its
        // backoff is not interrupted by the release: with a 1 s minimum, as
        // the words were clamped before, it waited a second for a free lock,
        // and in msgq every later sender did so for as long as the segment
        // lived: `reset` cannot repair these words.)
        let m = Box::leak(Box::new(TasB::new()));
        (m.min_ns, m.cap_ns) = (u32::MAX, u32::MAX);
        let l: &'static TasB = m;
        let g = lock_api::RawMutex::lock(l);
        let released = std::sync::OnceLock::new();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let got = l.lock_or_give_up(&mut || false);
                let at = Instant::now();
                // SAFETY: acquired just above on this thread.
                unsafe { lock_api::RawMutex::unlock(l, got.expect("never gives up")) };
                at
            });
            std::thread::sleep(Duration::from_millis(20));
            let _ = released.set(Instant::now());
            // SAFETY: acquired above on this thread.
            unsafe { lock_api::RawMutex::unlock(l, g) };
            let got_at = waiter.join().unwrap();
            let after = got_at.saturating_duration_since(*released.get().unwrap());
            assert!(
                after < Duration::from_millis(250),
                "the waiter took a lock free for {after:?}"
            );
        });
    }
}
