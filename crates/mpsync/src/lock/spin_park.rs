//! Spin-then-park: an adaptive mutex that spins while the holder is believed to
//! be running and parks (futex) once it is believed preempted — mpsync's own
//! combination of paper 003 §2's spin-versus-block question with He, Scherer &
//! Scott's time-published holders.
//!
//! The lock word (futex) holds a 2-bit state in its low bits and an *acquisition
//! sequence* in the rest: every acquisition bumps the sequence. A waiter watches
//! the word: while the sequence keeps moving, holders are running and handing the
//! lock on, so spinning pays; if one holder keeps it longer than
//! [`SpinThenPark::with_patience`] (default 50 µs — far above a critical section
//! that runs, far below a scheduler quantum), that holder is presumed preempted
//! and the waiter parks instead of burning a processor the holder may need.
//!
//! | low bits | meaning                                    |
//! |----------|--------------------------------------------|
//! | 0        | unlocked                                   |
//! | 1        | locked, nobody parked                      |
//! | 2        | locked, a waiter may be parked on the word |
//!
//! Uses `sched`: `park`, `unpark_one`. Progress: deadlock-free; not FIFO.
//! Implements [`RawMutexTimed`](lock_api::RawMutexTimed) (a waiter that gives up
//! simply stops; the lock is never handed over); not `RawMutexFair`: the word
//! names no waiter to hand the lock to — use [`BoundedSteal`](super::BoundedSteal)
//! for fair unlocks.
//!
//! ```
//! use mpsync::lock::{Mutex, SpinThenPark};
//! use std::time::Duration;
//! let m: Mutex<SpinThenPark, u32> = Mutex::new(0);
//! *m.lock() += 1;
//! let custom = Mutex::from_raw(SpinThenPark::with_patience(Duration::from_micros(10)).unwrap(), 0u8);
//! assert_eq!(*custom.lock(), 0);
//! assert!(SpinThenPark::with_patience(Duration::ZERO).is_err());
//! ```

use std::time::{Duration, Instant};

use super::LockError;
use crate::sched;
use crate::sync::{AtomicU32, Ordering, spin_loop};
use crate::util::clock::Patience;

const STATE: u32 = 0b11;
const UNLOCKED: u32 = 0;
const LOCKED: u32 = 1;
const CONTENDED: u32 = 2;
const SEQ: u32 = 4;

/// Spins between two looks at a timed waiter's deadline (a clock read).
const DEADLINE_EVERY: u32 = if cfg!(loom) { 1 } else { 16 };

/// Default time a holder may keep the lock before waiters presume it preempted.
pub const SPIN_THEN_PARK_DEFAULT_PATIENCE: Duration = Duration::from_micros(50);

/// The adaptive spin-then-park mutex.
#[derive(Debug)]
pub struct SpinThenPark {
    word: AtomicU32,
    patience_ns: u32,
}

super::loom_const_new! {
    impl[] SpinThenPark {
        /// An unlocked lock with the default patience (50 µs).
        new => Self {
            word: AtomicU32::new(UNLOCKED),
            patience_ns: SPIN_THEN_PARK_DEFAULT_PATIENCE.as_nanos() as u32,
        }
    }
}

impl SpinThenPark {
    /// A lock whose waiters park after one holder kept it for `patience`.
    /// Errors unless 100 ns ≤ `patience` ≤ 1 s.
    pub fn with_patience(patience: Duration) -> Result<Self, LockError> {
        let ns = patience.as_nanos();
        if !(100..=1_000_000_000).contains(&ns) {
            return Err(LockError::InvalidParameter(format!(
                "spin-then-park patience {patience:?} is out of range: use 100 ns ..= 1 s (default 50 µs)"
            )));
        }
        let mut l = Self::new();
        l.patience_ns = ns as u32;
        Ok(l)
    }

    /// Takes the lock if free, setting the state to `to`. Returns the word seen.
    #[inline]
    fn try_take(&self, w: u32, to: u32) -> Result<u32, u32> {
        let new = (w & !STATE).wrapping_add(SEQ) | to;
        // Acquire: pairs with the Release of `unlock`.
        self.word
            .compare_exchange(w, new, Ordering::Acquire, Ordering::Relaxed)
    }

    /// The contended path; with a `deadline`, the timed one
    /// ([`RawMutexTimed`](lock_api::RawMutexTimed), `lock/fair_timed.rs`).
    /// Returns whether the lock was taken (always, without a deadline).
    ///
    /// A timed waiter gives up only after it has looked at the word and, in
    /// the parking phase, marked it contended: a wake it consumed is then
    /// either turned into taking the free lock or passed on by the next
    /// unlock, which sees the mark. The lock is never handed over, so a waiter
    /// that gave up cannot be granted it later.
    #[cold]
    pub(super) fn lock_slow(&self, deadline: Option<Instant>) -> bool {
        // Relaxed: every decision is re-validated by a CAS.
        let mut w = self.word.load(Ordering::Relaxed);
        let mut watched = w & !STATE;
        let mut patience = Patience::start(u64::from(self.patience_ns));
        let mut looks = 0u32;
        // Phase 1: spin while the sequence moves (holders run and hand on).
        loop {
            if w & STATE == UNLOCKED {
                match self.try_take(w, LOCKED) {
                    Ok(_) => return true,
                    Err(now) => {
                        w = now;
                        continue;
                    }
                }
            }
            if w & !STATE != watched {
                watched = w & !STATE;
                patience = Patience::start(u64::from(self.patience_ns));
            } else if patience.exhausted() {
                break; // one holder for too long: presumed preempted
            }
            looks = looks.wrapping_add(1);
            if looks.is_multiple_of(DEADLINE_EVERY) && deadline.is_some_and(|d| Instant::now() >= d)
            {
                sched::stall::point(sched::stall::TIMED_GAVE_UP);
                return false;
            }
            spin_loop();
            w = self.word.load(Ordering::Relaxed);
        }
        // Phase 2: park (Drepper's mutex 2). From here on we take the lock as
        // CONTENDED, since other parked waiters may remain.
        loop {
            if w & STATE == UNLOCKED {
                match self.try_take(w, CONTENDED) {
                    Ok(_) => return true,
                    Err(now) => {
                        w = now;
                        continue;
                    }
                }
            }
            if w & STATE == LOCKED {
                // Announce a parked waiter. Relaxed: the futex re-checks the word.
                if let Err(now) = self.word.compare_exchange(
                    w,
                    (w & !STATE) | CONTENDED,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    w = now;
                    continue;
                }
                w = (w & !STATE) | CONTENDED;
            }
            let timeout = match deadline {
                None => None,
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        sched::stall::point(sched::stall::TIMED_GAVE_UP);
                        return false;
                    }
                    Some(d - now)
                }
            };
            sched::park(&self.word, w, timeout);
            w = self.word.load(Ordering::Relaxed);
        }
    }
}

impl Default for SpinThenPark {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: the state bits go UNLOCKED → held only by a successful Acquire CAS, so one
// thread holds the lock at a time; `unlock` clears them with a Release RMW.
unsafe impl lock_api::RawMutex for SpinThenPark {
    super::loom_const_init!(SpinThenPark);

    type Guard = lock_api::GuardSend;

    #[inline]
    fn lock(&self) -> Self::Guard {
        // Relaxed: a guess re-validated by the CAS.
        let w = self.word.load(Ordering::Relaxed);
        if w & STATE != UNLOCKED || self.try_take(w, LOCKED).is_err() {
            self.lock_slow(None);
        }
        lock_api::GuardSend::new()
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        // Relaxed: as in `lock`.
        let w = self.word.load(Ordering::Relaxed);
        (w & STATE == UNLOCKED && self.try_take(w, LOCKED).is_ok()).then(lock_api::GuardSend::new)
    }

    #[inline]
    unsafe fn unlock(&self, _guard: Self::Guard) {
        // Release: publishes the critical section to the next Acquire CAS.
        let old = self.word.fetch_and(!STATE, Ordering::Release);
        if old & STATE == CONTENDED {
            sched::unpark_one(&self.word);
        }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        // Relaxed: a momentary snapshot.
        self.word.load(Ordering::Relaxed) & STATE != UNLOCKED
    }
}
