//! STUB — being implemented.
use crate::sync::{AtomicBool, Ordering};

/// Futex-based blocking mutex.
#[derive(Debug)]
pub struct Native(AtomicBool);

// SAFETY: stub; mutual exclusion by the swap.
unsafe impl lock_api::RawMutex for Native {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Native(AtomicBool::new(false));
    type Guard = lock_api::GuardSend;
    fn lock(&self) -> Self::Guard {
        while self.0.swap(true, Ordering::Acquire) {}
        lock_api::GuardSend::new()
    }
    fn try_lock(&self) -> Option<Self::Guard> {
        (!self.0.swap(true, Ordering::Acquire)).then(lock_api::GuardSend::new)
    }
    unsafe fn unlock(&self, _g: Self::Guard) {
        self.0.store(false, Ordering::Release)
    }
    fn is_locked(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}
