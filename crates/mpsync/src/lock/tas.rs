//! TAS: the plain test-and-set spin lock, the baseline every paper starts from.
//!
//! Every attempt is an atomic swap, so waiters hammer the lock's cache line; see
//! [`TasB`](super::TasB) for the test-and-test-and-set form with backoff.
//! Uses `sched`: nothing. Progress: deadlock-free, not starvation-free; unfair.
//!
//! ```
//! use mpsync::{Mutex, lock::Tas};
//! let m: Mutex<Tas, u32> = Mutex::new(0);
//! *m.lock() += 1;
//! assert_eq!(*m.lock(), 1);
//! ```

use crate::sync::{AtomicBool, Ordering, spin_loop};

/// Test-and-set spin lock.
#[derive(Debug)]
#[repr(C)]
pub struct Tas {
    locked: AtomicBool,
}

super::loom_const_new! {
    impl[] Tas {
        /// An unlocked lock.
        new => Self {
            locked: AtomicBool::new(false),
        }
    }
}

impl Default for Tas {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: `locked` goes false→true only by a swap that returned false, so at most one
// thread holds the lock; the Acquire swap pairs with the Release store in `unlock`.
unsafe impl lock_api::RawMutex for Tas {
    super::loom_const_init!(Tas);

    type Guard = lock_api::GuardSend;

    #[inline]
    fn lock(&self) -> Self::Guard {
        // Acquire: pairs with the Release store in `unlock`; the CS sees the previous one.
        while self.locked.swap(true, Ordering::Acquire) {
            spin_loop();
        }
        lock_api::GuardSend::new()
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        // Acquire: as in `lock`.
        (!self.locked.swap(true, Ordering::Acquire)).then(lock_api::GuardSend::new)
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
