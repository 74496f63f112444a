//! Mutual-exclusion locks. Every one implements `lock_api::RawMutex`, so
//! [`Mutex<L, T>`](Mutex) works with guards ([`crate::Mutex<T>`] is the one
//! with the recommended lock; the crate's front page says which to choose):
//!
//! | type                   | paper name         | waits by                                  | source                  |
//! |------------------------|--------------------|-------------------------------------------|-------------------------|
//! | [`Tas`]                | TAS                | swapping                                  | all papers' baseline    |
//! | [`TasB`]               | TAS-B              | test, backoff (cap 30 µs)                 | 003 §4.1, 000 §4        |
//! | [`Ticket`]             | Ticket             | proportional backoff, FIFO                | 001 §3.1, 004 §3.1      |
//! | [`TicketSplit`]        | (Ticket, split)    | as Ticket, counters on two cache lines    | 004 §3.1                |
//! | [`TicketNp`]           | Ticket-np          | handshake: offer, claim, withdraw; uncontended: claim in place | 001 §3.1 |
//! | [`AndersonN`]          | Anderson           | spinning on its own array slot, FIFO      | 004 §3.1                |
//! | [`Queued`]             | Queued (MCS)       | spinning on its own node, FIFO            | 003 §4.1                |
//! | [`QueuedHandshaking`]  | Queued-Handshaking | own node; ack or be skipped               | 003 §3                  |
//! | [`SmartQ`]             | Smart-Q            | own node; skipped if preempted            | 003 Figure 1            |
//! | [`Clh`]                | CLH                | spinning on the predecessor's node, FIFO  | Craig; Magnusson et al. |
//! | [`McsTp`]              | MCS-TP             | own node, heartbeats; skipped if stale    | He, Scherer & Scott 2005|
//! | [`ClhTp`]              | CLH-TP             | pred's node; removes a preempted pred; stalled: withdraws, naps | He, Scherer & Scott 2005 |
//! | [`SpinThenPark`]       | (mpsync)           | spin while holders move, then futex       | 003 §2 + TP holders     |
//! | [`Native`]             | Native             | futex (`sched::park`)                     | 003 §4.1, 001 §4        |
//! | [`BoundedSteal`]       | (mpsync)           | head spins on the holder, others park; stealing bounded | pv-qspinlock, parking_lot |
//! | [`Np<L>`]              | L-np               | as `L`, CS no-preempt                     | 003 §3, 001 §3 (Symunix)|
//!
//! ## lock_api's optional traits, and a condition variable
//!
//! | lock | `RawMutexFair` | `RawMutexTimed` |
//! |------|----------------|-----------------|
//! | [`Ticket`], [`TicketSplit`], [`AndersonN`], [`Queued`], [`Clh`] | yes: the plain unlock already hands over in FIFO order | no: a taken ticket or queued node cannot be withdrawn |
//! | [`SmartQ`], [`QueuedHandshaking`], [`McsTp`] | yes: the plain unlock (queue order; preempted waiters skipped, as their papers do) | yes: a waiter that gives up withdraws by CAS against the releaser's claim |
//! | [`TicketNp`] | yes: the plain unlock (queue order; preempted takers skipped) | yes: a taker that gives up leaves its number, marked departed, to be withdrawn; a passed deadline takes no number, and a timed taker joins only a short queue |
//! | [`ClhTp`] | yes: the plain unlock (queue order; preempted waiters skipped) | yes: a waiter that gives up marks its node abandoned by CAS; whoever unlinks it takes the lock in its place |
//! | [`BoundedSteal`] | yes: a fair unlock turns stealing off, so the queue head gets the lock | yes: timed acquirers steal, never queue |
//! | [`Native`], [`SpinThenPark`] | no: the word names no waiter to hand the lock to | yes: a waiter that gives up just stops; the lock is never granted |
//! | [`TasB`] | no: nobody is known to wait | yes: a waiter that gives up stops backing off |
//! | [`Tas`] | no: nobody is known to wait | yes: a waiter that gives up stops swapping |
//! | [`Np<L>`](Np) | as `L` | as `L`; the request is cancelled on a timeout |
//!
//! [`Condvar`] works with `Mutex<L, T>` for every `L` (wait, `wait_while`,
//! `wait_timeout`, `notify_one`, `notify_all`; spurious wake-ups possible).
//!
//! Ticket-np, Smart-Q and Queued-Handshaking are no-preempt by construction; any
//! other lock gets its -np form as `Np<L>`. The pointer-free locks implement
//! [`ProcessShared`] and work in memory shared between processes.
//!
//! ## What a caller may do
//!
//! Nothing a caller does through the safe API (nor `force_unlock` under its
//! contract) makes a lock unsound or hangs a thread that did nothing wrong;
//! `tests/hostile_locks.rs` does each of these to every lock:
//!
//! - **Zero and past timeouts** (`try_lock_for(Duration::ZERO)`,
//!   `try_lock_until` an instant gone by): at least a `try_lock`, which gets
//!   a free lock; they leave nothing behind that others must clear, so storms
//!   of them (or of `try_lock`, or of tiny timeouts) beside untimed lockers
//!   leave a free lock free (`is_locked` false, `try_lock` succeeds, `lock`
//!   returns).
//! - **Forgotten guards** (`mem::forget`, `MutexGuard::leak`): the lock stays
//!   held for good, as any lock would — attempts fail (timed ones by their
//!   deadline), `lock` waits forever. The lock may still be dropped or moved,
//!   and a new lock made where it was works. A forgotten guard of a
//!   no-preempt lock (`Np<L>`, Ticket-np, Smart-Q, Queued-Handshaking) also
//!   leaves its thread's no-preempt request raised until the thread exits
//!   (the thread's context block starts afresh for its next owner).
//! - **`force_unlock`** takes the raw guard of the acquisition (from
//!   `raw().lock()`): it is `unlock`. A forgotten `MutexGuard` took its raw
//!   guard with it, so its lock cannot be force-unlocked.
//! - **A panic inside a critical section** unwinds the guard, which releases
//!   the lock and ends the no-preempt request; waiters get the lock. There is
//!   no poisoning (lock_api has none): the data is as the section left it.
//! - **`fork`**: the child is a copy of the forking thread alone. It can use
//!   locks made after the fork, and locks that were free with nobody waiting
//!   at the fork. A lock another thread held or waited for at the fork stays
//!   that way in the child: its `lock` waits forever (`try_lock` answers
//!   `None`). A child should not start threads that use mpsync unless no
//!   other thread of the parent could have been starting one at the fork
//!   (`sched` registers threads under a process-wide lock).
//!
//! ```
//! use mpsync::{lock::{Mutex, TasBNp, NativeNp}};
//! let a: Mutex<TasBNp, u8> = Mutex::new(1);
//! let b: Mutex<NativeNp, u8> = Mutex::new(2);
//! assert_eq!(*a.lock() + *b.lock(), 3);
//! let q: Mutex<mpsync::lock::SmartQ, Vec<u32>> = Mutex::new(Vec::new());
//! q.lock().push(7);
//! assert_eq!(*q.lock(), [7]);
//! ```

/// Per-thread cache of queue nodes for a queue lock module: defines
/// `take_node() -> NonNull<$node>` and `unsafe return_node(NonNull<$node>)`.
/// A node is in the cache only while no queue refers to it; nodes are boxed so
/// they keep their address while queued.
macro_rules! node_cache {
    ($node:ty, $new:expr) => {
        #[cfg(not(loom))]
        thread_local! {
            #[allow(clippy::vec_box)]
            static CACHE: std::cell::RefCell<Vec<Box<$node>>> =
                const { std::cell::RefCell::new(Vec::new()) };
        }
        #[cfg(loom)]
        loom::thread_local! {
            #[allow(clippy::vec_box)]
            static CACHE: std::cell::RefCell<Vec<Box<$node>>> =
                std::cell::RefCell::new(Vec::new());
        }

        /// A node for one acquisition: from this thread's cache, or new.
        fn take_node() -> std::ptr::NonNull<$node> {
            let b = CACHE
                .try_with(|c| c.borrow_mut().pop())
                .ok()
                .flatten()
                .unwrap_or_else(|| Box::new($new));
            std::ptr::NonNull::from(Box::leak(b))
        }

        /// Gives a node back to this thread's cache (freed if the thread is
        /// tearing down its thread-locals).
        ///
        /// # Safety
        /// `n` came from `take_node` and no queue or thread refers to it any more.
        unsafe fn return_node(n: std::ptr::NonNull<$node>) {
            // SAFETY: the caller's contract; `n` came from `Box::leak`.
            let b = unsafe { Box::from_raw(n.as_ptr()) };
            let _ = CACHE.try_with(|c| c.borrow_mut().push(b));
        }
    };
}
pub(crate) use node_cache;

/// The loom twins of a lock's constructor, in one place: `pub const fn new()`
/// natively, `pub fn new()` under loom (loom's atomics are not `const`).
/// `loom_const_new! { impl[generics] Type { /// doc
/// new => expr } }`; where the native expression is not valid under loom (a
/// `[const { .. }; N]` array of atomics), the loom one follows:
/// `new => expr, loom => expr`.
macro_rules! loom_const_new {
    (impl[$($gen:tt)*] $ty:ty { $(#[$m:meta])* new => $body:expr, loom => $loom:expr $(,)? }) => {
        impl<$($gen)*> $ty {
            $(#[$m])*
            #[cfg(not(loom))]
            pub const fn new() -> Self {
                $body
            }
            $(#[$m])*
            #[cfg(loom)]
            pub fn new() -> Self {
                $loom
            }
        }
    };
    (impl[$($gen:tt)*] $ty:ty { $(#[$m:meta])* new => $body:expr }) => {
        $crate::lock::loom_const_new! {
            impl[$($gen)*] $ty { $(#[$m])* new => $body, loom => $body }
        }
    };
}
pub(crate) use loom_const_new;

/// `lock_api::RawMutex::INIT` of a lock built by `loom_const_new!`: `new()`
/// natively; under loom, where nothing is `const`, a compile-time panic that
/// says to call `new()`. Use inside the `RawMutex` impl: `loom_const_init!(Type);`.
macro_rules! loom_const_init {
    ($name:ident) => {
        #[allow(clippy::declare_interior_mutable_const)]
        #[cfg(not(loom))]
        const INIT: Self = Self::new();
        #[allow(clippy::declare_interior_mutable_const)]
        #[cfg(loom)]
        const INIT: Self = panic!(concat!("under loom, use ", stringify!($name), "::new()"));
    };
}
pub(crate) use loom_const_init;

/// Checks of a missing successor link spent spinning before the releaser starts
/// waiting through the [`Waiter`](crate::sched::Waiter) (natively) or giving
/// its processor away (emulated) (≈ 1–5 µs: far longer than the two
/// instructions between a running successor's tail swap and its link store).
/// Under loom one: every spin is a scheduling point there.
const LINK_SPINS: u32 = if cfg!(loom) { 1 } else { 128 };

/// Natively, how long a releaser that has waited out the [`Waiter`]'s patience
/// for a successor's link sleeps before it looks again (a timed park on its own
/// wake word, through `sched`; see [`wait_for_link`]).
///
/// [`Waiter`]: crate::sched::Waiter
pub(crate) const LINK_NAP: std::time::Duration = std::time::Duration::from_micros(50);

/// A releaser's wait for the successor that has swapped itself into the tail
/// to link its node behind ours (`link` returns the link once written) — the
/// window marked [`QUEUE_LOCK_LINK`](crate::sched::stall::QUEUE_LOCK_LINK) in
/// every MCS-style lock.
///
/// What bounds it: the window is two instructions of the successor's, so the
/// wait is long only if the successor is preempted inside it, and then it
/// lasts until the successor runs again — its next time slice, which spinning
/// here can only delay when it shares our processor. After [`LINK_SPINS`]
/// checks, with this thread's outermost no-preempt request paused meanwhile
/// (nobody but that successor can move the lock on now, and it may be waiting
/// for our processor; an emulated yield inside a no-preempt section would be
/// ignored; the request is resumed before returning):
///
/// - **natively** (no lock calls `sched_yield`) the wait goes through
///   the [`Waiter`](crate::sched::Waiter): spin, and once it advises parking
///   (its patience, 50 µs, spent: the successor is off its CPU) sleep
///   [`LINK_NAP`] on our own wake word and look again. A bounded nap rather
///   than a wake from the successor: a successor that links cannot tell that
///   its predecessor's releaser sleeps without reading the predecessor's node
///   after linking — which that releaser may already have recycled — or a flag
///   on every enqueue, a cost paid by every contended acquisition for a wait
///   that happens only when a thread is preempted inside a two-instruction
///   window. The nap's latency (≤ 50 µs plus timer slack) is small beside that
///   preemption (a scheduler slice, ≥ 1 ms);
/// - **emulated** (and under loom) every further check gives the processor
///   away through [`sched::yield_now`](crate::sched::yield_now), as the papers'
///   locks do. A holder that a Smart-Q releaser made `OtherUnpreemptable`
///   cannot pause (only the owner's own request pauses): on the emulated backend
///   its yields are ignored, and the scheduler's extension bound, which
///   preempts it anyway, is what limits its wait.
///
/// Out of line and cold: it runs only when a successor is between its swap
/// and its link, and inlined it made every caller's uncontended unlock save
/// and restore the registers of its loops.
#[cold]
#[inline(never)]
pub(crate) fn wait_for_link<T>(mut link: impl FnMut() -> Option<T>) -> T {
    for _ in 0..LINK_SPINS {
        if let Some(n) = link() {
            return n;
        }
        crate::sync::spin_loop();
    }
    let cb = crate::sched::current();
    let paused = cb.depth() > 0 && cb.pause_no_preempt();
    let n = if cfg!(loom) || crate::sched::emulated::is_attached(cb) {
        loop {
            if let Some(n) = link() {
                break n;
            }
            crate::sched::yield_now();
        }
    } else {
        let mut waiter = crate::sched::Waiter::new();
        loop {
            if let Some(n) = link() {
                break n;
            }
            if waiter.spin(None) == crate::sched::Wait::Park {
                // A timed park: nobody wakes us (see above), so the token only
                // makes a stray wake of this thread end the nap early.
                let t = crate::sched::Waiter::token();
                let _ = crate::sched::Waiter::sleep(t, Some(LINK_NAP));
                waiter.restart();
            }
        }
    };
    if paused {
        cb.resume_no_preempt();
    }
    n
}

pub mod anderson;
pub mod bounded_steal;
pub mod clh;
pub mod clh_tp;
pub mod condvar;
pub mod fair_timed;
pub mod handshaking;
pub mod mcs_tp;
pub mod native;
pub mod np;
pub mod queued;
#[cfg(all(test, loom))]
mod shared_claim_loom;
#[cfg(all(test, not(loom)))]
mod shared_claim_tests;
pub mod skipq;
pub mod smartq;
pub mod spin_park;
pub mod tas;
pub mod tas_b;
pub mod ticket;

pub use anderson::{Anderson, AndersonGuard, AndersonN};
pub use bounded_steal::{
    BoundedSteal, FAIR_AFTER, MIN_TURN, QUEUED_PATIENCE, STEAL_BUDGET, STEAL_PATIENCE,
};
pub use clh::{Clh, ClhGuard};
pub use clh_tp::{ClhTp, ClhTpGuard};
pub use condvar::{Condvar, WaitTimeoutResult};
pub use handshaking::{HandshakePolicy, QueuedHandshaking};
pub use mcs_tp::{McsTp, TpPolicy};
pub use native::Native;
pub use np::{Np, NpGuard, NpToken};
pub use queued::{Queued, QueuedGuard};
pub use skipq::{SkipGuard, SkipNode, SkipPolicy, SkipQueue};
pub use smartq::{SmartQ, SmartQPolicy};
pub use spin_park::{SPIN_THEN_PARK_DEFAULT_PATIENCE, SpinThenPark};
pub use tas::Tas;
pub use tas_b::TasB;
pub use ticket::{TICKET_NP_DEFAULT_PATIENCE, Ticket, TicketNp, TicketNpGuard, TicketSplit};

/// A mutex over any mpsync lock `L`: `lock::Mutex<SmartQ, T>`. (The same
/// type as `lock_api::Mutex<L, T>`; [`crate::lock::Mutex<T>`] is this with the
/// recommended lock.)
pub type Mutex<L, T> = lock_api::Mutex<L, T>;
/// The guard of a [`Mutex`].
pub type MutexGuard<'a, L, T> = lock_api::MutexGuard<'a, L, T>;

/// TAS-B with its critical section marked no-preempt (paper 003 §4.1).
pub type TasBNp = Np<TasB>;
/// The native (futex) lock with its critical section marked no-preempt.
pub type NativeNp = Np<Native>;
/// The MCS queue lock with its critical section marked no-preempt (003 "Queued-no-preempt").
pub type QueuedNp = Np<Queued>;

/// Locks that work when placed in memory shared by several processes (an
/// `mmap(MAP_SHARED)` region, a `shm_open` file): they hold no pointers and no
/// per-process state, are `#[repr(C)]`, never park (no private futex), and are
/// valid when their bytes are a copy of an unlocked lock made by
/// `new()` — so one process can initialize the region and others map it at any
/// address. The shared-memory message queue (paper 004) builds on them.
///
/// # Safety
/// Implementors promise exactly the above: mutual exclusion holds between
/// threads of different processes operating on the same physical memory.
///
/// ```
/// use mpsync::lock::{ProcessShared, Ticket, init_shared};
/// use std::mem::MaybeUninit;
/// // Stand-in for a shared mapping: any suitably aligned memory.
/// let mut region = MaybeUninit::<Ticket>::uninit();
/// // SAFETY: `region` is valid for writes and aligned for `Ticket`.
/// let lock: &Ticket = unsafe { init_shared(region.as_mut_ptr()) };
/// use mpsync::lock_api::RawMutex;
/// let g = lock.lock();
/// unsafe { lock.unlock(g) };
/// ```
pub unsafe trait ProcessShared: lock_api::RawMutex + Sync {}

// SAFETY (all): pointer-free `#[repr(C)]` structs of atomics and plain
// parameters; they spin (never park) and keep no per-process state in the lock.
unsafe impl ProcessShared for Tas {}
// SAFETY: see above.
unsafe impl ProcessShared for TasB {}
// SAFETY: see above.
unsafe impl ProcessShared for Ticket {}
// SAFETY: see above.
unsafe impl ProcessShared for TicketSplit {}
// SAFETY: see above; the no-preempt request lives in each process's own
// context block, which is per-thread state outside the lock.
unsafe impl ProcessShared for TicketNp {}
// SAFETY: see above.
unsafe impl<const N: usize> ProcessShared for AndersonN<N> {}

/// A [`ProcessShared`] lock in memory that another, possibly hostile,
/// process may write: msgq's claim locks. Waiting can be abandoned, hand-overs
/// can be observed, and the lock can be put back to unlocked from any state.
///
/// Every method works whatever values the lock's words hold (a peer may have
/// scribbled any of them, and may keep doing so): no overflow panic, no
/// out-of-bounds index, no wait that does not keep asking `give_up`. The
/// `lock_api` paths are unchanged: in scribbled memory `lock` may wait
/// forever; `unlock`, and Ticket's and Anderson's `try_lock`, read only
/// integers and are sound whatever they hold; Tas's and TAS-B's `try_lock`
/// read the flag byte as a `bool`, which a byte other than 0 or 1 is not
/// (these paths read it as a byte). Where a peer may write the memory, wait
/// by [`lock_or_give_up`](Self::lock_or_give_up) and release by `unlock`.
///
/// | lock | `progress()` is | it changes when |
/// |------|-----------------|-----------------|
/// | [`Tas`], [`TasB`] | the flag byte (0 free, 1 held) | the lock is taken or released; a release straight followed by the next take can be missed: a held lock and one that changes hands between two looks look alike |
/// | [`Ticket`], [`TicketSplit`] | `serving` | every release (the hand-over to the next number); not when numbers are taken |
/// | [`AndersonN`] | the wrapping sum of the slots | every release (one slot rises by `N`); not when tickets are taken |
///
/// All three change at a `reset` of a lock that was not already in the reset
/// state.
///
/// # Safety
/// Implementors promise that a guard from `lock_or_give_up` is as one from
/// `lock`: mutual exclusion (among callers that never `reset`) and the same
/// Acquire/Release hand-over.
#[cfg_attr(
    loom,
    allow(dead_code, reason = "msgq, its user, is not built under loom")
)]
pub(crate) unsafe trait SharedClaimLock: ProcessShared {
    /// Waits for the lock as `lock` does, but while it waits asks `give_up`
    /// (at least every [`GIVE_UP_SPINS`] spins, or TAS-B's every
    /// [`GIVE_UP_BACKOFF_NS`] of backoff; not at all if the first look gets
    /// the lock) and returns `None` as soon as it answers `true`. Never
    /// panics: Anderson's refusal of a user beyond its `N` slots is a wait too.
    /// Not a `try_lock` even when `give_up` answers `true` at once: it asks
    /// only after the first [`GIVE_UP_SPINS`] spins, and a FIFO waiter has
    /// taken a number by then (see below).
    ///
    /// A FIFO lock's ([`Ticket`], [`AndersonN`]) waiter that gives up leaves
    /// its number unserved: when the hand-over reaches it, the lock stays held
    /// until a [`reset`](Self::reset). A waiter whose number a `reset` (or a
    /// peer) has moved the queue past takes a new one and waits on.
    fn lock_or_give_up(
        &self,
        give_up: &mut dyn FnMut() -> bool,
    ) -> Option<<Self as lock_api::RawMutex>::Guard>;

    /// A value that changes at every hand-over (see the table above), for
    /// telling a lock that is busy but moving from one that is stuck.
    fn progress(&self) -> u64;

    /// Puts the lock back to unlocked, whatever state it is in: the next
    /// `lock_or_give_up` (or `try_lock`) gets it at once. Holders and waiters
    /// from before are forgotten.
    ///
    /// A holder from before that unlocks afterwards causes no UB and no hang
    /// of a `lock_or_give_up` (its `give_up` still works), but it may leave the
    /// lock held or refusing everyone (its unlock hands over or decrements a
    /// count that the reset already cleared); the next `reset` repairs that.
    ///
    /// # Safety
    /// The lock's mutual exclusion does not survive a reset: a holder from
    /// before may still be in its critical section while the next holder
    /// enters, and (see above) its late unlock may let two later ones in at
    /// once. Call it only where what the lock protects stays sound with
    /// several holders at once (msgq's claim: every step is a CAS from an exact
    /// word) — as it must anyway for a lock that a peer can write.
    unsafe fn reset(&self);
}

/// Spins a [`SharedClaimLock`] waiter makes between two calls of its
/// `give_up` (64 `PAUSE`s: about 0.1–3 µs on current x86, where a `PAUSE`
/// takes 10–140 cycles by model). Under loom one: every spin is a scheduling
/// point there.
pub(crate) const GIVE_UP_SPINS: u32 = if cfg!(loom) { 1 } else { 64 };

/// Nanoseconds of busy-work backoff (TAS-B) between two calls of a
/// [`SharedClaimLock`] waiter's `give_up`.
pub(crate) const GIVE_UP_BACKOFF_NS: u64 = 1_000;

/// A [`SharedClaimLock`] waiter's spinning: asks `give_up` after every
/// [`GIVE_UP_SPINS`] spins, counted across calls.
pub(crate) struct GiveUp<'a> {
    give_up: &'a mut dyn FnMut() -> bool,
    left: u32,
}

impl<'a> GiveUp<'a> {
    pub(crate) fn new(give_up: &'a mut dyn FnMut() -> bool) -> Self {
        Self {
            give_up,
            left: GIVE_UP_SPINS,
        }
    }

    /// Spins `n` times (at least once), asking `give_up` every
    /// [`GIVE_UP_SPINS`] spins; whether it said to give up.
    #[inline]
    pub(crate) fn spin(&mut self, n: u32) -> bool {
        for _ in 0..n.max(1) {
            crate::sync::spin_loop();
            self.left -= 1;
            if self.left == 0 {
                self.left = GIVE_UP_SPINS;
                if (self.give_up)() {
                    return true;
                }
            }
        }
        false
    }
}

/// Writes an unlocked `L` at `at` (e.g. the start of a shared mapping) and
/// returns it. Other processes that map the same memory use it as is.
///
/// # Safety
/// `at` must be valid for writes of `L`, aligned, and stay mapped for `'a`; no
/// one may be using a lock at that address while it is (re)initialized.
#[cfg(not(loom))]
pub unsafe fn init_shared<'a, L: ProcessShared>(at: *mut L) -> &'a L {
    // SAFETY: the caller's contract.
    unsafe {
        at.write(L::INIT);
        &*at
    }
}

/// Invalid lock parameters supplied by the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockError {
    /// What was wrong and what would be right.
    InvalidParameter(String),
    /// More threads tried to use a lock than it has room for (Anderson's slots).
    TooManyThreads(String),
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InvalidParameter(m) | Self::TooManyThreads(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for LockError {}

#[cfg(all(test, not(loom)))]
mod tests {
    //! Small enough for Miri: single-thread protocol and a two-thread handoff.
    use super::*;
    use crate::lock::Mutex;
    use lock_api::RawMutex;

    fn protocol<L: RawMutex>() {
        let l = L::INIT;
        assert!(!l.is_locked());
        let g = l.lock();
        assert!(l.is_locked());
        assert!(l.try_lock().is_none());
        // SAFETY: `g` came from `l.lock()` on this thread.
        unsafe { l.unlock(g) };
        let g = l.try_lock().expect("free lock");
        // SAFETY: as above.
        unsafe { l.unlock(g) };
        assert!(!l.is_locked());
        assert_eq!(crate::sched::current().depth(), 0);
    }

    fn two_threads<L: RawMutex + Sync>() {
        let m: Mutex<L, u64> = Mutex::new(0);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..50 {
                        *m.lock() += 1;
                    }
                });
            }
        });
        assert_eq!(m.into_inner(), 100);
    }

    macro_rules! lock_tests {
        ($($name:ident: $l:ty),*) => {$(
            mod $name {
                use super::*;
                #[test]
                fn single_thread_protocol() { protocol::<$l>() }
                #[test]
                fn two_thread_counter() { two_threads::<$l>() }
            }
        )*};
    }

    lock_tests!(
        tas: Tas,
        tas_b: TasB,
        native: Native,
        tas_b_np: TasBNp,
        native_np: NativeNp,
        queued: Queued,
        queued_np: QueuedNp,
        ticket: Ticket,
        ticket_split: TicketSplit,
        ticket_np: TicketNp,
        anderson: AndersonN<4>,
        smart_q: SmartQ,
        handshaking: QueuedHandshaking,
        mcs_tp: McsTp,
        clh: Clh,
        clh_tp: ClhTp,
        spin_then_park: SpinThenPark,
        bounded_steal: BoundedSteal
    );

    #[test]
    fn lock_error_displays_its_message() {
        let e = LockError::InvalidParameter("x must be > 0".into());
        assert_eq!(e.to_string(), "x must be > 0");
    }
}
