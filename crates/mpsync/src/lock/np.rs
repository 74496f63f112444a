//! `Np<L>`: any lock with its critical section marked no-preempt — the papers'
//! "-no-preempt" forms (TAS-B-np, Native-np, Queued-np …).
//!
//! Paper 003 §3 (the Symunix interface) and paper 001 §3: the thread asks not to be
//! preempted before it tries to acquire, and clears the request after it releases;
//! if the scheduler warned it meanwhile, it yields right then, at a point where it
//! holds no lock. A `try_lock` that fails clears the request without yielding
//! (nothing was held, so no extension is to be given back). Requests nest through the context block's depth, so only the
//! outermost release clears the state.
//!
//! The request also covers the wait for the lock, so that no window exists between
//! acquiring and asking (a swap cannot be made atomic with a state change); the
//! scheduler's extension bound limits what a long wait can cost it.
//!
//! Uses `sched`: `request_no_preempt` / `release_no_preempt`. Progress and fairness:
//! those of `L`. The guard is not `Send`: the request belongs to its thread.
//!
//! ```
//! use mpsync::{Mutex, lock::{TasBNp, Np, Native}, sched::{self, ThreadState}};
//!
//! let m: Mutex<TasBNp, u32> = Mutex::new(0);
//! {
//!     let mut g = m.lock();
//!     *g += 1;
//!     assert_eq!(sched::current().state(), ThreadState::SelfUnpreemptable);
//! }
//! assert_eq!(sched::current().state(), ThreadState::Preemptable);
//! let n: Mutex<Np<Native>, u32> = Mutex::new(1);
//! assert_eq!(*n.lock(), 1);
//! ```

use std::marker::PhantomData;

use crate::sched;

/// `L` with its critical section marked no-preempt.
#[derive(Debug, Default)]
pub struct Np<L> {
    inner: L,
}

impl<L> Np<L> {
    /// Wraps an unlocked lock.
    pub const fn new(inner: L) -> Self {
        Self { inner }
    }

    /// The wrapped lock.
    pub fn inner(&self) -> &L {
        &self.inner
    }
}

/// Guard state of [`Np`]: the inner lock's guard, tied to the requesting thread.
#[derive(Debug)]
pub struct NpGuard<G> {
    inner: G,
    _not_send: PhantomData<*mut ()>,
}

impl<G> NpGuard<G> {
    /// Wraps the inner lock's guard (the request was made by this thread).
    #[inline]
    pub(super) fn new(inner: G) -> Self {
        Self {
            inner,
            _not_send: PhantomData,
        }
    }

    /// The inner lock's guard.
    #[inline]
    pub(super) fn into_inner(self) -> G {
        self.inner
    }
}

// SAFETY: mutual exclusion is `L`'s; the no-preempt request changes only the
// calling thread's own context block, and the `!Send` guard makes `unlock` run on
// the thread that made the request.
unsafe impl<L: lock_api::RawMutex> lock_api::RawMutex for Np<L> {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self { inner: L::INIT };

    type Guard = NpGuard<L::Guard>;

    #[inline]
    fn lock(&self) -> Self::Guard {
        sched::request_no_preempt();
        NpGuard {
            inner: self.inner.lock(),
            _not_send: PhantomData,
        }
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        sched::request_no_preempt();
        match self.inner.try_lock() {
            Some(g) => Some(NpGuard {
                inner: g,
                _not_send: PhantomData,
            }),
            None => {
                // Nothing was held: no yield, even if warned meanwhile.
                sched::cancel_no_preempt();
                None
            }
        }
    }

    #[inline]
    unsafe fn unlock(&self, guard: Self::Guard) {
        // SAFETY: `guard.inner` came from `self.inner` (the caller's contract).
        unsafe { self.inner.unlock(guard.inner) };
        sched::release_no_preempt();
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.inner.is_locked()
    }
}

/// Guard state of locks that are no-preempt by construction (Ticket-np, Smart-Q,
/// Queued-Handshaking): proof that this thread requested no-preempt. Not `Send`.
#[derive(Debug)]
#[must_use = "release the request with NpToken::release"]
pub struct NpToken(PhantomData<*mut ()>);

impl NpToken {
    /// Requests no-preempt for the calling thread (nests).
    #[inline]
    pub(crate) fn request() -> Self {
        sched::request_no_preempt();
        Self(PhantomData)
    }

    /// Ends the request (on the requesting thread: the token is `!Send`); yields
    /// if the scheduler warned the thread. Call after releasing the lock.
    #[inline]
    pub(crate) fn release(self) {
        sched::release_no_preempt();
    }

    /// Ends the request after a failed `try_lock`: nothing was held, so a warned
    /// thread does not yield here ([`sched::cancel_no_preempt`]).
    #[inline]
    pub(crate) fn cancel(self) {
        sched::cancel_no_preempt();
    }
}
