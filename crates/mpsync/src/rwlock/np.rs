//! `RwNp<L>`: any reader-writer lock with its critical sections (both kinds)
//! marked no-preempt — the paper's "-np" forms (RW-TAS-B-np).
//!
//! Paper 001 §3 (extensions 1 and 2) as [`Np`](crate::lock::Np) does for mutexes:
//! the thread asks not to be preempted before it tries to acquire and clears the
//! request after it releases, yielding then if the scheduler warned it. A failed
//! `try_lock_*` cancels the request without yielding. Requests nest. Guards are
//! not `Send`: the request belongs to its thread.
//!
//! ```
//! use mpsync::{rwlock::{RwLock, RwTasBNp}, sched::{self, ThreadState}};
//! let l: RwLock<RwTasBNp, u32> = RwLock::new(0);
//! {
//!     let r = l.read();
//!     assert!(sched::current().no_preempt_requested());
//!     assert_eq!(*r, 0);
//! }
//! assert!(!sched::current().no_preempt_requested());
//! assert_eq!(sched::current().state(), ThreadState::Preemptable);
//! ```

use std::marker::PhantomData;

use crate::sched;

/// `L` with its read and write sections marked no-preempt.
#[derive(Debug, Default)]
pub struct RwNp<L> {
    inner: L,
}

impl<L> RwNp<L> {
    /// Wraps an unlocked lock.
    pub const fn new(inner: L) -> Self {
        Self { inner }
    }

    /// The wrapped lock.
    pub fn inner(&self) -> &L {
        &self.inner
    }
}

/// Guard state of [`RwNp`]: the inner guard, tied to the requesting thread.
#[derive(Debug)]
pub struct RwNpGuard<G> {
    inner: G,
    _not_send: PhantomData<*mut ()>,
}

impl<G> RwNpGuard<G> {
    fn new(inner: G) -> Self {
        Self {
            inner,
            _not_send: PhantomData,
        }
    }
}

// SAFETY: exclusion is `L`'s; the request changes only the calling thread's own
// context block, and the `!Send` guards make the release run on that thread.
unsafe impl<L: lock_api::RawRwLock> lock_api::RawRwLock for RwNp<L> {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self { inner: L::INIT };

    type SharedGuard = RwNpGuard<L::SharedGuard>;
    type ExclusiveGuard = RwNpGuard<L::ExclusiveGuard>;

    #[inline]
    fn lock_shared(&self) -> Self::SharedGuard {
        sched::request_no_preempt();
        RwNpGuard::new(self.inner.lock_shared())
    }

    #[inline]
    fn try_lock_shared(&self) -> Option<Self::SharedGuard> {
        sched::request_no_preempt();
        let g = self.inner.try_lock_shared();
        if g.is_none() {
            sched::cancel_no_preempt();
        }
        g.map(RwNpGuard::new)
    }

    #[inline]
    unsafe fn unlock_shared(&self, guard: Self::SharedGuard) {
        // SAFETY: the caller's contract: `guard.inner` came from `self.inner`.
        unsafe { self.inner.unlock_shared(guard.inner) };
        sched::release_no_preempt();
    }

    #[inline]
    fn lock_exclusive(&self) -> Self::ExclusiveGuard {
        sched::request_no_preempt();
        RwNpGuard::new(self.inner.lock_exclusive())
    }

    #[inline]
    fn try_lock_exclusive(&self) -> Option<Self::ExclusiveGuard> {
        sched::request_no_preempt();
        let g = self.inner.try_lock_exclusive();
        if g.is_none() {
            sched::cancel_no_preempt();
        }
        g.map(RwNpGuard::new)
    }

    #[inline]
    unsafe fn unlock_exclusive(&self, guard: Self::ExclusiveGuard) {
        // SAFETY: as in `unlock_shared`.
        unsafe { self.inner.unlock_exclusive(guard.inner) };
        sched::release_no_preempt();
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.inner.is_locked()
    }

    #[inline]
    fn is_locked_exclusive(&self) -> bool {
        self.inner.is_locked_exclusive()
    }
}

// SAFETY: exclusion is `L`'s, as above; the request is the calling thread's.
unsafe impl<L: lock_api::RawRwLockUpgrade> lock_api::RawRwLockUpgrade for RwNp<L> {
    type UpgradableGuard = RwNpGuard<L::UpgradableGuard>;

    #[inline]
    fn lock_upgradable(&self) -> Self::UpgradableGuard {
        sched::request_no_preempt();
        RwNpGuard::new(self.inner.lock_upgradable())
    }

    #[inline]
    fn try_lock_upgradable(&self) -> Option<Self::UpgradableGuard> {
        sched::request_no_preempt();
        let g = self.inner.try_lock_upgradable();
        if g.is_none() {
            sched::cancel_no_preempt();
        }
        g.map(RwNpGuard::new)
    }

    #[inline]
    unsafe fn unlock_upgradable(&self, guard: Self::UpgradableGuard) {
        // SAFETY: the caller's contract: `guard.inner` came from `self.inner`.
        unsafe { self.inner.unlock_upgradable(guard.inner) };
        sched::release_no_preempt();
    }

    #[inline]
    unsafe fn upgrade(&self, guard: Self::UpgradableGuard) -> Self::ExclusiveGuard {
        // The no-preempt request carries over to the write section.
        // SAFETY: as in `unlock_upgradable`.
        RwNpGuard::new(unsafe { self.inner.upgrade(guard.inner) })
    }

    #[inline]
    unsafe fn try_upgrade(
        &self,
        guard: Self::UpgradableGuard,
    ) -> Result<Self::ExclusiveGuard, Self::UpgradableGuard> {
        // SAFETY: as in `unlock_upgradable`.
        unsafe { self.inner.try_upgrade(guard.inner) }
            .map(RwNpGuard::new)
            .map_err(RwNpGuard::new)
    }
}

// SAFETY: the downgrade is `L`'s; the no-preempt request carries over from the
// write section to the read section (one request, released by the read guard).
unsafe impl<L: lock_api::RawRwLockDowngrade> lock_api::RawRwLockDowngrade for RwNp<L> {
    #[inline]
    unsafe fn downgrade(&self, guard: Self::ExclusiveGuard) -> Self::SharedGuard {
        // SAFETY: the caller's contract: `guard.inner` came from `self.inner`.
        RwNpGuard::new(unsafe { self.inner.downgrade(guard.inner) })
    }
}

// SAFETY: the downgrades are `L`'s; the no-preempt request carries over, as
// in `downgrade`.
unsafe impl<L: lock_api::RawRwLockUpgradeDowngrade> lock_api::RawRwLockUpgradeDowngrade
    for RwNp<L>
{
    #[inline]
    unsafe fn downgrade_upgradable(&self, guard: Self::UpgradableGuard) -> Self::SharedGuard {
        // SAFETY: the caller's contract: `guard.inner` came from `self.inner`.
        RwNpGuard::new(unsafe { self.inner.downgrade_upgradable(guard.inner) })
    }

    #[inline]
    unsafe fn downgrade_to_upgradable(&self, guard: Self::ExclusiveGuard) -> Self::UpgradableGuard {
        // SAFETY: as in `downgrade_upgradable`.
        RwNpGuard::new(unsafe { self.inner.downgrade_to_upgradable(guard.inner) })
    }
}

// SAFETY: the fair unlocks are `L`'s, followed by the end of the request
// exactly as the plain unlocks end it.
unsafe impl<L: lock_api::RawRwLockFair> lock_api::RawRwLockFair for RwNp<L> {
    #[inline]
    unsafe fn unlock_shared_fair(&self, guard: Self::SharedGuard) {
        // SAFETY: as in `downgrade`.
        unsafe { self.inner.unlock_shared_fair(guard.inner) };
        sched::release_no_preempt();
    }

    #[inline]
    unsafe fn unlock_exclusive_fair(&self, guard: Self::ExclusiveGuard) {
        // SAFETY: as in `downgrade`.
        unsafe { self.inner.unlock_exclusive_fair(guard.inner) };
        sched::release_no_preempt();
    }
}

/// The request, then `attempt`; the request is cancelled (no yield) if the
/// attempt fails, as for `try_lock_*`.
#[inline]
fn np_attempt<G>(attempt: impl FnOnce() -> Option<G>) -> Option<RwNpGuard<G>> {
    sched::request_no_preempt();
    let g = attempt();
    if g.is_none() {
        sched::cancel_no_preempt();
    }
    g.map(RwNpGuard::new)
}

// SAFETY: exclusion is `L`'s timed attempts'; the request is the calling
// thread's, cancelled on a timeout as on a failed `try_lock_*`.
unsafe impl<L: lock_api::RawRwLockTimed> lock_api::RawRwLockTimed for RwNp<L> {
    type Duration = L::Duration;
    type Instant = L::Instant;

    #[inline]
    fn try_lock_shared_for(&self, timeout: L::Duration) -> Option<Self::SharedGuard> {
        np_attempt(|| self.inner.try_lock_shared_for(timeout))
    }

    #[inline]
    fn try_lock_shared_until(&self, deadline: L::Instant) -> Option<Self::SharedGuard> {
        np_attempt(|| self.inner.try_lock_shared_until(deadline))
    }

    #[inline]
    fn try_lock_exclusive_for(&self, timeout: L::Duration) -> Option<Self::ExclusiveGuard> {
        np_attempt(|| self.inner.try_lock_exclusive_for(timeout))
    }

    #[inline]
    fn try_lock_exclusive_until(&self, deadline: L::Instant) -> Option<Self::ExclusiveGuard> {
        np_attempt(|| self.inner.try_lock_exclusive_until(deadline))
    }
}
