//! Native: a blocking mutex on the OS's own primitive — the papers' "native lock",
//! here Linux's futex (through [`sched::park`]).
//!
//! Drepper's three-state futex mutex ("Futexes Are Tricky", 2011, mutex 2) with a
//! short spin before sleeping, as glibc's adaptive mutex does.
//!
//! | word | meaning                                   |
//! |------|-------------------------------------------|
//! | 0    | unlocked                                  |
//! | 1    | locked, no thread parked                  |
//! | 2    | locked, a thread may be parked on the word|
//!
//! Uses `sched`: `park`/`unpark_one`. Progress: deadlock-free; not FIFO.
//! Implements [`RawMutexTimed`](lock_api::RawMutexTimed) (a waiter that gives up
//! simply stops: the lock is never handed over, so nothing can be granted to
//! it later); not `RawMutexFair`: the word names no waiter to hand the lock
//! to — use [`BoundedSteal`](super::BoundedSteal) for fair unlocks.
//!
//! ```
//! use mpsync::lock::{Mutex, Native};
//! let m: Mutex<Native, String> = Mutex::new(String::new());
//! m.lock().push_str("hi");
//! assert_eq!(&*m.lock(), "hi");
//! ```

use std::time::Instant;

use crate::sched;
use crate::sync::{AtomicU32, Ordering, spin_loop};

const UNLOCKED: u32 = 0;
const LOCKED: u32 = 1;
const CONTENDED: u32 = 2;

/// Spins before parking (glibc's adaptive mutex spins about this much).
const SPINS: u32 = 100;

/// Futex-based blocking mutex.
#[derive(Debug)]
pub struct Native {
    word: AtomicU32,
}

super::loom_const_new! {
    impl[] Native {
        /// An unlocked lock.
        new => Self {
            word: AtomicU32::new(UNLOCKED),
        }
    }
}

impl Native {
    /// The contended path; with a `deadline`, the timed one
    /// ([`RawMutexTimed`](lock_api::RawMutexTimed), `lock/fair_timed.rs`).
    /// Returns whether the lock was taken (always, without a deadline).
    ///
    /// A timed waiter that gives up leaves nothing behind but the word's
    /// "contended" mark, which only costs the next unlock a spurious wake: the
    /// lock is never handed to anyone, every holder takes it itself by CAS or
    /// swap. It checks the lock *before* the clock, so a waiter woken by an
    /// unlock takes the free lock even if its deadline has passed meanwhile —
    /// a wake it consumed is never dropped while the lock is free.
    #[cold]
    pub(super) fn lock_slow(&self, deadline: Option<Instant>) -> bool {
        for _ in 0..SPINS {
            // Relaxed: a hint; the CAS below re-checks with Acquire.
            if self.word.load(Ordering::Relaxed) == UNLOCKED
                // Acquire: pairs with the Release swap in `unlock`.
                && self
                    .word
                    .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return true;
            }
            spin_loop();
        }
        // From here on we may sleep, so the word must say "contended" (2) whenever we
        // take the lock: we cannot know whether other sleepers remain.
        // Acquire: pairs with the Release swap in `unlock`.
        loop {
            if self.word.swap(CONTENDED, Ordering::Acquire) == UNLOCKED {
                return true;
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
            sched::park(&self.word, CONTENDED, timeout);
        }
    }
}

impl Default for Native {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: the word leaves UNLOCKED only by a CAS or swap that observed UNLOCKED, so
// at most one thread holds the lock; those Acquire operations pair with the Release
// swap in `unlock`.
unsafe impl lock_api::RawMutex for Native {
    super::loom_const_init!(Native);

    type Guard = lock_api::GuardSend;

    #[inline]
    fn lock(&self) -> Self::Guard {
        // Acquire: pairs with the Release swap in `unlock`.
        if self
            .word
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_slow(None);
        }
        lock_api::GuardSend::new()
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        // Acquire: as in `lock`.
        self.word
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then(lock_api::GuardSend::new)
    }

    #[inline]
    unsafe fn unlock(&self, _guard: Self::Guard) {
        // Release: publishes the critical section to the next Acquire CAS/swap.
        if self.word.swap(UNLOCKED, Ordering::Release) == CONTENDED {
            sched::unpark_one(&self.word);
        }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        // Relaxed: a momentary snapshot, documented as possibly stale.
        self.word.load(Ordering::Relaxed) != UNLOCKED
    }
}
