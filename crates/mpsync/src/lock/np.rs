//! STUB — being implemented.
/// No-preempt wrapper.
#[derive(Debug)]
pub struct Np<R>(R);

// SAFETY: stub; delegates to R.
unsafe impl<R: lock_api::RawMutex> lock_api::RawMutex for Np<R> {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Np(R::INIT);
    type Guard = R::Guard;
    fn lock(&self) -> Self::Guard {
        self.0.lock()
    }
    fn try_lock(&self) -> Option<Self::Guard> {
        self.0.try_lock()
    }
    unsafe fn unlock(&self, g: Self::Guard) {
        // SAFETY: forwarded contract.
        unsafe { self.0.unlock(g) }
    }
    fn is_locked(&self) -> bool {
        self.0.is_locked()
    }
}
