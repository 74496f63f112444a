//! TAS: the plain test-and-set spin lock, the baseline every paper starts from.
//!
//! Every attempt is an atomic swap, so waiters hammer the lock's cache line; see
//! [`TasB`](super::TasB) for the test-and-test-and-set form with backoff.
//! Uses `sched`: nothing. Progress: deadlock-free, not starvation-free; unfair.
//!
//! ```
//! use mpsync::lock::{Mutex, Tas};
//! let m: Mutex<Tas, u32> = Mutex::new(0);
//! *m.lock() += 1;
//! assert_eq!(*m.lock(), 1);
//! ```

use super::{GiveUp, SharedClaimLock};
#[cfg(not(loom))]
use crate::sync::AtomicU8;
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

/// The flag of [`Tas`] and [`TasB`] as the [`SharedClaimLock`] paths see it:
/// a byte that a peer in shared memory may have set to any of 256 values
/// (0 free, anything else held). Natively it is read and written as an
/// `AtomicU8`, so that no byte a peer wrote is ever read as a `bool`; under
/// loom (no peers, and loom's atomics are not bytes) through the `AtomicBool`.
pub(super) struct Flag<'a>(pub(super) &'a AtomicBool);

#[cfg(not(loom))]
impl Flag<'_> {
    #[inline]
    fn byte(&self) -> &AtomicU8 {
        // SAFETY: `AtomicBool` and `AtomicU8` have the same size, alignment and
        // in-memory representation (a `bool`'s, a `u8`'s: one byte; the chaos
        // build's types are `repr(transparent)` wrappers of std's), so this is
        // the same atomic byte; only 0 and 1 are ever stored through it, so the
        // lock's `bool` paths never meet a value this view wrote that is not a
        // `bool`.
        unsafe { &*std::ptr::from_ref(self.0).cast::<AtomicU8>() }
    }

    /// Takes the lock by a swap, as `lock` does: whether it was free.
    #[inline]
    pub(super) fn take(&self) -> bool {
        // Acquire: pairs with the Release store in `unlock` (or `clear`).
        self.byte().swap(1, Ordering::Acquire) == 0
    }

    /// The byte now (Relaxed: a snapshot, a hint or a progress sample; the
    /// lock is taken only by [`take`](Self::take)).
    #[inline]
    pub(super) fn value(&self) -> u8 {
        self.byte().load(Ordering::Relaxed)
    }

    /// Free, whatever it held.
    pub(super) fn clear(&self) {
        // Release: as `unlock`'s store; the next `take` pairs with it.
        self.byte().store(0, Ordering::Release);
    }
}

#[cfg(loom)]
impl Flag<'_> {
    /// Takes the lock by a swap, as `lock` does: whether it was free.
    pub(super) fn take(&self) -> bool {
        // Acquire: pairs with the Release store in `unlock` (or `clear`).
        !self.0.swap(true, Ordering::Acquire)
    }

    /// The flag now (Relaxed: a snapshot, a hint or a progress sample).
    pub(super) fn value(&self) -> u8 {
        self.0.load(Ordering::Relaxed).into()
    }

    /// Free.
    pub(super) fn clear(&self) {
        // Release: as `unlock`'s store; the next `take` pairs with it.
        self.0.store(false, Ordering::Release);
    }
}

// SAFETY: `lock_or_give_up` takes the lock only by the Acquire swap of `lock`
// (through the flag's byte view: the same atomic byte, 0 → 1).
unsafe impl SharedClaimLock for Tas {
    fn lock_or_give_up(&self, give_up: &mut dyn FnMut() -> bool) -> Option<lock_api::GuardSend> {
        let flag = Flag(&self.locked);
        let mut g = GiveUp::new(give_up);
        // A swap per look, as `lock` does.
        while !flag.take() {
            if g.spin(1) {
                return None;
            }
        }
        Some(lock_api::GuardSend::new())
    }

    /// The flag byte: it cannot show a release followed at once by the next
    /// take.
    fn progress(&self) -> u64 {
        Flag(&self.locked).value().into()
    }

    unsafe fn reset(&self) {
        Flag(&self.locked).clear();
    }
}
