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
//! The guard carries the thread's context block, so a section looks it up
//! once; natively (no scheduler reads the state word) the request is the
//! block's depth count alone: plain stores, no atomic read-modify-write.
//!
//! Uses `sched`: `request_no_preempt` / `release_no_preempt`. Progress and fairness:
//! those of `L`. The guard is not `Send`: the request belongs to its thread.
//!
//! ```
//! use mpsync::{lock::{Mutex, TasBNp, Np, Native}, sched::{self, ThreadState}};
//!
//! let m: Mutex<TasBNp, u32> = Mutex::new(0);
//! {
//!     let mut g = m.lock();
//!     *g += 1;
//!     assert!(sched::current().no_preempt_requested());
//! }
//! assert!(!sched::current().no_preempt_requested());
//! assert_eq!(sched::current().state(), ThreadState::Preemptable);
//! let n: Mutex<Np<Native>, u32> = Mutex::new(1);
//! assert_eq!(*n.lock(), 1);
//! ```

use std::marker::PhantomData;

use crate::sched::{self, ContextBlock};

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

/// Guard state of [`Np`]: the inner lock's guard and the requesting thread's
/// context block (carried so that the release does not look it up again). Not
/// `Send`: the request belongs to that thread.
#[derive(Debug)]
pub struct NpGuard<G> {
    inner: G,
    cb: &'static ContextBlock,
    _not_send: PhantomData<*mut ()>,
}

impl<G> NpGuard<G> {
    /// Wraps the inner lock's guard; `cb` is the calling thread's block, on
    /// which the request was made.
    #[inline]
    pub(super) fn new(inner: G, cb: &'static ContextBlock) -> Self {
        Self {
            inner,
            cb,
            _not_send: PhantomData,
        }
    }

    /// The inner lock's guard and the requesting thread's block.
    #[inline]
    pub(super) fn into_parts(self) -> (G, &'static ContextBlock) {
        (self.inner, self.cb)
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
        let cb = sched::current();
        sched::request_no_preempt_on(cb);
        NpGuard::new(self.inner.lock(), cb)
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        let cb = sched::current();
        sched::request_no_preempt_on(cb);
        match self.inner.try_lock() {
            Some(g) => Some(NpGuard::new(g, cb)),
            None => {
                // Nothing was held: no yield, even if warned meanwhile.
                sched::cancel_no_preempt_on(cb);
                None
            }
        }
    }

    #[inline]
    unsafe fn unlock(&self, guard: Self::Guard) {
        let (inner, cb) = guard.into_parts();
        // SAFETY: `inner` came from `self.inner` (the caller's contract).
        unsafe { self.inner.unlock(inner) };
        sched::release_no_preempt_on(cb);
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.inner.is_locked()
    }
}

/// Guard state of locks that are no-preempt by construction (Ticket-np, Smart-Q,
/// Queued-Handshaking): proof that this thread requested no-preempt, carrying
/// its context block. Not `Send`.
#[derive(Debug)]
#[must_use = "release the request with NpToken::release"]
pub struct NpToken {
    cb: &'static ContextBlock,
    _not_send: PhantomData<*mut ()>,
}

impl NpToken {
    /// Requests no-preempt for the calling thread (nests).
    #[inline]
    pub(crate) fn request() -> Self {
        let cb = sched::current();
        sched::request_no_preempt_on(cb);
        Self {
            cb,
            _not_send: PhantomData,
        }
    }

    /// The requesting thread's context block (carried, so the lock does not
    /// look it up again).
    #[inline]
    pub(crate) fn cb(&self) -> &'static ContextBlock {
        self.cb
    }

    /// Ends the request (on the requesting thread: the token is `!Send`); yields
    /// if the scheduler warned the thread. Call after releasing the lock.
    #[inline]
    pub(crate) fn release(self) {
        sched::release_no_preempt_on(self.cb);
    }

    /// Ends the request after a failed `try_lock`: nothing was held, so a warned
    /// thread does not yield here ([`sched::cancel_no_preempt`]).
    #[inline]
    pub(crate) fn cancel(self) {
        sched::cancel_no_preempt_on(self.cb);
    }
}
