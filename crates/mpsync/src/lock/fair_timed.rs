//! `lock_api`'s optional mutex traits: [`RawMutexFair`] (`unlock_fair`, `bump`)
//! and [`RawMutexTimed`] (`try_lock_for`, `try_lock_until`), for every lock where
//! they mean something.
//!
//! | lock                                      | `RawMutexFair`                              | `RawMutexTimed`                          |
//! |-------------------------------------------|---------------------------------------------|------------------------------------------|
//! | [`Ticket`], [`TicketSplit`], [`AndersonN`], [`Queued`], [`Clh`] | yes: the plain unlock (FIFO hand-off) | no: a taken ticket or queued node cannot be withdrawn |
//! | [`SmartQ`], [`QueuedHandshaking`], [`McsTp`] | yes: the plain unlock (queue order, skipping preempted waiters) | yes: a waiter that gives up withdraws by CAS, as against a releaser's claim |
//! | [`TicketNp`]                              | yes: the plain unlock (queue order, skipping preempted waiters) | yes: a waiter that gives up leaves its number to be withdrawn (see below) |
//! | [`ClhTp`]                                 | yes: the plain unlock (queue order, skipping preempted waiters) | yes: a waiter that gives up marks its own node ABANDONED by CAS; its unlinker takes the lock in its place (see below) |
//! | [`BoundedSteal`]                          | yes: the queue head gets the lock, stealing is off | yes: timed acquirers steal, never queue |
//! | [`Native`], [`SpinThenPark`]              | no: the word names no waiter to hand to     | yes: a waiter that gives up just stops   |
//! | [`TasB`]                                  | no: nobody is known to wait                 | yes: a waiter that gives up stops backing off |
//! | [`Tas`]                                   | no: nobody is known to wait                 | yes: a waiter that gives up stops swapping |
//! | [`Np<L>`](Np)                             | as `L`, the request ends after the unlock   | as `L`, the request cancelled on timeout |
//!
//! **Fair unlocks.** A fair unlock hands the lock to a thread that is already
//! waiting instead of letting a newcomer take it. The FIFO locks (Ticket,
//! Anderson, MCS, CLH) do nothing else: their plain unlock already passes the
//! lock to the next waiter in arrival order and no thread can overtake one
//! that waits, so `unlock_fair` *is* `unlock`. The scheduler-conscious queue
//! locks are fair in the same sense — the lock goes to the next waiter in
//! queue order that runs; one that is preempted is skipped (its papers'
//! algorithm) but keeps or regains its place, and a newcomer never takes the
//! lock past the queue. [`BoundedSteal`] lets running threads steal a free
//! lock; its fair unlock sets [`NO_STEAL`]
//! when a waiter is queued, so only the queue head may take the lock next
//! (what its fairness bound does after 0.5 ms). Native and SpinThenPark are
//! barging futex locks whose word records only "someone may sleep": there is
//! no waiter to hand the lock to, so they do not claim fairness. TAS and TAS-B
//! know nothing of their waiters at all.
//!
//! `bump` is lock_api's default (a fair unlock, then `lock`) except for
//! BoundedSteal, where it returns at once when nobody is queued.
//!
//! **Timed acquisitions.** A timed waiter that gives up must never be granted
//! the lock afterwards. Native and SpinThenPark never grant: every holder
//! takes the word itself, and a waiter checks the word before the clock, so a
//! wake-up it consumed is turned into taking the free lock (even past its
//! deadline: a successful `try_lock_for` may return late) or is passed on,
//! because it left the word marked contended. BoundedSteal never grants
//! either, and a timed acquirer never joins its queue (an MCS node cannot
//! leave from the middle of the queue without a removal protocol): it steals
//! while the holder runs and naps — at most 1 ms at a time, on its own wake
//! word, which nobody wakes — while it does not. So a timed acquirer has no
//! place in the queue: while a starved head has turned stealing off it waits,
//! and it may time out while queued waiters proceed.
//!
//! The skipping queue locks (Smart-Q, Queued-Handshaking, MCS-TP) grant only to
//! a waiter the releaser *claimed* by CAS from `WAITING`; a timed waiter whose
//! deadline passes withdraws by a CAS from the same states (`WAITING`,
//! `PARKED`, `WOKEN` → `ABANDONED`), so exactly one of grant and withdrawal
//! wins. A withdrawn node stays linked until the next releaser walks past it,
//! as past a preempted waiter, and that releaser frees it. A waiter whose
//! withdrawal lost to the grant holds the lock and returns it, possibly after
//! its deadline.
//!
//! Ticket-np never hands the lock over (the releaser offers a number; its
//! taker holds the lock only by its own claim CAS), so a timed taker whose
//! deadline passes leaves its number to be withdrawn like a preempted
//! taker's, and marks its taker slot departed so that whoever finds the
//! number on offer withdraws it at once: its releaser, any waiter behind it,
//! or `try_lock`. The one offerer that does not wait for a claim is a
//! releaser that finds the lock idle (`next` equals its offer); that look is
//! not fenced against the takes (the uncontended unlock stays a store and a
//! load), so it can miss a number taken just then — an untimed taker claims
//! it later, and a departed one's offer is withdrawn by the next acquirer
//! (loom's timed model checks that the lock ends free). A departing taker
//! that sees its own offer on the way out claims it and returns the lock
//! past its deadline, as the queue locks' late winners do. Left numbers are
//! bounded: an attempt whose deadline has already passed takes no number
//! (it is a `try_lock`), and a timed taker joins only while fewer than 8
//! numbers are outstanding, waiting outside a longer queue (so every left
//! number keeps its departed mark, and a storm of zero or tiny timeouts
//! cannot bury the lock; ticket.rs, "Timed acquisition").
//!
//! CLH-TP never hands the lock over either: a releaser writes only its own
//! node, and the waiter behind it takes the lock by its own WAITING → HOLDING
//! CAS. A timed waiter that gives up moves its own word WAITING → ABANDONED
//! by CAS instead; the CAS races only its successor's removal (WAITING →
//! REMOVED), so exactly one wins, and a waiter that took the lock never
//! gives up. The abandoned node stays linked: the waiter behind it (or the
//! next arrival, if it was the tail) unlinks it as it unlinks a preempted
//! waiter, recycles it, and takes the lock if the node before it was
//! released — so a departed waiter never strands the lock. A free lock may
//! thus have a non-null tail (abandoned nodes in front of a released one):
//! `is_locked` walks back past abandoned nodes, and `try_lock`, if it finds
//! the lock free that way, enqueues and takes it with a deadline of now
//! (clh_tp.rs, "Timed acquisition"). The untimed `lock`/`unlock` gained no
//! RMW and no fence.
//!
//! ```
//! use mpsync::{lock::{Mutex, MutexGuard, BoundedSteal, Native, NativeNp, Ticket}};
//! use std::time::Duration;
//!
//! let m: Mutex<Native, u32> = Mutex::new(0);
//! let g = m.lock();
//! std::thread::scope(|s| {
//!     // Held elsewhere: a timed attempt gives up after its timeout.
//!     s.spawn(|| assert!(m.try_lock_for(Duration::from_millis(1)).is_none()));
//! });
//! drop(g);
//! assert!(m.try_lock_for(Duration::from_millis(1)).is_some());
//!
//! let f: Mutex<BoundedSteal, Vec<u8>> = Mutex::new(Vec::new());
//! let mut g = f.lock();
//! g.push(1);
//! MutexGuard::bump(&mut g); // lets a queued waiter in first, if there is one
//! MutexGuard::unlock_fair(g);
//!
//! let t: Mutex<Ticket, u8> = Mutex::new(0);
//! MutexGuard::unlock_fair(t.lock()); // FIFO: the plain unlock
//! let n: Mutex<NativeNp, u8> = Mutex::new(0);
//! assert!(n.try_lock_for(Duration::ZERO).is_some());
//! ```

use std::time::{Duration, Instant};

use lock_api::{RawMutex, RawMutexFair, RawMutexTimed};

use super::Tas;
use super::bounded_steal::{HEAD_PARKED, LOCKED, NO_STEAL};
use super::{
    AndersonN, BoundedSteal, Clh, ClhTp, Native, Np, NpGuard, Queued, SkipPolicy, SkipQueue,
    SpinThenPark, TasB, Ticket, TicketNp, TicketSplit,
};
#[allow(unused_imports)] // named by the module doc's table
use super::{McsTp, QueuedHandshaking, SmartQ};
use crate::sched::{self, Wait, Waiter};
use crate::sync::Ordering;

/// `try_lock_for` of every lock here: `try_lock_until` the deadline `timeout`
/// from now, or a plain `lock` (no deadline) if that instant cannot be
/// represented.
#[inline]
pub(crate) fn try_lock_for_until<L: RawMutexTimed<Instant = Instant>>(
    l: &L,
    timeout: Duration,
) -> Option<L::Guard> {
    match Instant::now().checked_add(timeout) {
        Some(d) => l.try_lock_until(d),
        None => Some(l.lock()),
    }
}

/// `RawMutexFair` as the plain unlock, for locks that never let a newcomer
/// overtake a waiter (module doc).
macro_rules! fair_is_plain_unlock {
    ($($(#[$m:meta])* [$($g:tt)*] $t:ty;)*) => {$(
        $(#[$m])*
        // SAFETY: `unlock_fair` is `unlock`, under the same contract; `bump`
        // is lock_api's default (unlock_fair, then lock).
        unsafe impl<$($g)*> RawMutexFair for $t {
            #[inline]
            unsafe fn unlock_fair(&self, guard: Self::Guard) {
                // SAFETY: the caller's contract is `unlock`'s.
                unsafe { self.unlock(guard) }
            }
        }
    )*};
}

fair_is_plain_unlock! {
    [] Ticket;
    [] TicketSplit;
    [const N: usize] AndersonN<N>;
    [] Queued;
    [] Clh;
    [] TicketNp;
    [P: SkipPolicy] SkipQueue<P>;
    [] ClhTp;
}

// SAFETY: `unlock_fair` is `unlock` with NO_STEAL set first while the lock is
// still held, so mutual exclusion is `unlock`'s; the head's acquiring CAS
// clears NO_STEAL, as after a fairness-bound wait.
unsafe impl RawMutexFair for BoundedSteal {
    #[inline]
    unsafe fn unlock_fair(&self, guard: Self::Guard) {
        self.let_the_head_in();
        // SAFETY: the caller's contract is `unlock`'s.
        unsafe { self.unlock(guard) }
    }

    #[inline]
    unsafe fn bump(&self, guard: &mut Self::Guard) {
        // Relaxed: as in `unlock_fair`.
        if self.tail.load(Ordering::Relaxed).is_null() {
            return; // nobody queued to let in
        }
        // SAFETY: the caller's contract; the guard is re-filled by `lock`
        // (GuardSend carries no state, so nothing is read twice).
        unsafe { self.unlock_fair(lock_api::GuardSend::new()) };
        *guard = self.lock();
    }
}

// SAFETY: `unlock_fair` is `L`'s, followed by the end of the no-preempt
// request exactly as `Np::unlock` ends it.
unsafe impl<L: RawMutexFair> RawMutexFair for Np<L> {
    #[inline]
    unsafe fn unlock_fair(&self, guard: Self::Guard) {
        let (inner, cb) = guard.into_parts();
        // SAFETY: `inner` came from `self.inner()` (the caller's contract).
        unsafe { self.inner().unlock_fair(inner) };
        sched::release_no_preempt_on(cb);
    }
}

/// `RawMutexTimed` for a lock whose `lock_slow(deadline)` takes the lock only by
/// the CAS/swap that `lock` uses and, given a deadline, gives up holding nothing
/// (returns `false`): the timed forms are a `try_lock`, then the slow path with
/// the deadline.
macro_rules! timed_by_lock_slow {
    ($($lock:ty),+ $(,)?) => {$(
        // SAFETY: `try_lock_until` takes the lock only where `lock` would (the
        // same CAS/swap, in `lock_slow`); giving up holds and leaves nothing.
        unsafe impl RawMutexTimed for $lock {
            type Duration = Duration;
            type Instant = Instant;

            #[inline]
            fn try_lock_for(&self, timeout: Duration) -> Option<Self::Guard> {
                try_lock_for_until(self, timeout)
            }

            #[inline]
            fn try_lock_until(&self, deadline: Instant) -> Option<Self::Guard> {
                if let Some(g) = self.try_lock() {
                    return Some(g);
                }
                self.lock_slow(Some(deadline))
                    .then(lock_api::GuardSend::new)
            }
        }
    )+};
}

timed_by_lock_slow!(Native, TasB, SpinThenPark);

// SAFETY: the timed wait takes the lock only by `try_lock`'s swap (as `lock`
// does); giving up holds and leaves nothing.
unsafe impl RawMutexTimed for Tas {
    type Duration = Duration;
    type Instant = Instant;

    #[inline]
    fn try_lock_for(&self, timeout: Duration) -> Option<Self::Guard> {
        try_lock_for_until(self, timeout)
    }

    fn try_lock_until(&self, deadline: Instant) -> Option<Self::Guard> {
        loop {
            if let Some(g) = self.try_lock() {
                return Some(g);
            }
            if Instant::now() >= deadline {
                return None;
            }
            for _ in 0..TAS_SPINS_PER_CLOCK {
                crate::sync::spin_loop();
            }
        }
    }
}

/// PAUSEs a timed [`Tas`] waiter makes between two reads of the clock.
const TAS_SPINS_PER_CLOCK: u32 = if cfg!(loom) { 1 } else { 32 };

// SAFETY: a timed waiter takes the lock only by the claim CAS that `lock`
// uses (on its own number's offer); when it gives up it has claimed nothing,
// and an offer of its number is withdrawn by whoever finds it (the departed
// mark, see `TicketNp::depart`) or claimed by the waiter itself on its way
// out, which then returns the guard.
unsafe impl RawMutexTimed for TicketNp {
    type Duration = Duration;
    type Instant = Instant;

    #[inline]
    fn try_lock_for(&self, timeout: Duration) -> Option<Self::Guard> {
        try_lock_for_until(self, timeout)
    }

    #[inline]
    fn try_lock_until(&self, deadline: Instant) -> Option<Self::Guard> {
        self.try_lock_until_impl(deadline)
    }
}

// SAFETY: a timed waiter takes the lock only as `lock` does (the tail swap on
// an empty queue, or a SUCCESS verdict on a node the releaser claimed); when it
// gives up it withdraws by CAS against the releaser's claim (skipq.rs, "Timed
// acquisition"), so a releaser never hands the lock to a waiter that left, and
// a waiter whose withdrawal lost to a SUCCESS returns the guard.
unsafe impl<P: SkipPolicy> RawMutexTimed for SkipQueue<P> {
    type Duration = Duration;
    type Instant = Instant;

    #[inline]
    fn try_lock_for(&self, timeout: Duration) -> Option<Self::Guard> {
        try_lock_for_until(self, timeout)
    }

    #[inline]
    fn try_lock_until(&self, deadline: Instant) -> Option<Self::Guard> {
        self.acquire(Some(deadline))
    }
}

// SAFETY: a timed waiter takes the lock only as `lock` does (the tail swap on
// an empty queue, or its own WAITING → HOLDING CAS after its predecessor
// released); when it gives up it marks its node ABANDONED by CAS on its own
// word, so it can no longer take the lock, and whoever unlinks the node takes
// the lock in its place (clh_tp.rs, "Timed acquisition").
unsafe impl RawMutexTimed for ClhTp {
    type Duration = Duration;
    type Instant = Instant;

    #[inline]
    fn try_lock_for(&self, timeout: Duration) -> Option<Self::Guard> {
        try_lock_for_until(self, timeout)
    }

    #[inline]
    fn try_lock_until(&self, deadline: Instant) -> Option<Self::Guard> {
        self.acquire(Some(deadline))
    }
}

/// Longest nap of a timed BoundedSteal acquirer that sees a held lock whose
/// holder is preempted or slow: short enough to notice the lock coming free
/// soon, long enough to leave the processor to the threads that need it.
const MAX_NAP: Duration = Duration::from_millis(1);

/// First nap; doubled after each nap without getting the lock.
const MIN_NAP: Duration = Duration::from_micros(20);

// SAFETY: a timed acquirer takes the lock only by `try_lock` (a steal, an
// Acquire CAS that respects NO_STEAL); it never joins the queue, so nothing can hand it the
// lock after it gave up.
unsafe impl RawMutexTimed for BoundedSteal {
    type Duration = Duration;
    type Instant = Instant;

    #[inline]
    fn try_lock_for(&self, timeout: Duration) -> Option<Self::Guard> {
        try_lock_for_until(self, timeout)
    }

    fn try_lock_until(&self, deadline: Instant) -> Option<Self::Guard> {
        let mut waiter = Waiter::new();
        let mut nap = MIN_NAP;
        let mut looks = 0u32;
        loop {
            // `try_lock`: a steal, counted as `try_lock` counts it.
            if let Some(g) = self.try_lock() {
                return Some(g);
            }
            let advice = waiter.spin(self.holder());
            looks = looks.wrapping_add(1);
            if advice == Wait::Spin && !looks.is_multiple_of(sched::waiter::CHECK_EVERY) {
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                sched::stall::point(sched::stall::TIMED_GAVE_UP);
                return None;
            }
            if advice == Wait::Park {
                // Nobody wakes this nap (we are on no queue): it times out.
                let t = Waiter::token();
                Waiter::sleep(t, Some(nap.min(deadline - now)));
                nap = (nap * 2).min(MAX_NAP);
                waiter.restart();
            }
        }
    }
}

// SAFETY: `L`'s timed acquisition under a no-preempt request, cancelled when it
// fails, as `Np::try_lock` does.
unsafe impl<L: RawMutexTimed> RawMutexTimed for Np<L> {
    type Duration = L::Duration;
    type Instant = L::Instant;

    #[inline]
    fn try_lock_for(&self, timeout: L::Duration) -> Option<Self::Guard> {
        let cb = sched::current();
        sched::request_no_preempt_on(cb);
        match self.inner().try_lock_for(timeout) {
            Some(g) => Some(NpGuard::new(g, cb)),
            None => {
                // Nothing was held: no yield, even if warned meanwhile.
                sched::cancel_no_preempt_on(cb);
                None
            }
        }
    }

    #[inline]
    fn try_lock_until(&self, deadline: L::Instant) -> Option<Self::Guard> {
        let cb = sched::current();
        sched::request_no_preempt_on(cb);
        match self.inner().try_lock_until(deadline) {
            Some(g) => Some(NpGuard::new(g, cb)),
            None => {
                sched::cancel_no_preempt_on(cb);
                None
            }
        }
    }
}

/// Keeps the bits the fair unlock relies on in sight of this file's readers.
const _: () = assert!(LOCKED & NO_STEAL == 0 && HEAD_PARKED & NO_STEAL == 0);

#[cfg(all(test, not(loom)))]
mod tests {
    //! Single-thread protocol (Miri-friendly); the threaded tests are in
    //! `tests/lockapi.rs`.
    use super::*;
    use crate::lock::Mutex;
    use lock_api::MutexGuard;

    fn fair_protocol<L: RawMutexFair>() {
        let m: Mutex<L, u32> = Mutex::new(0);
        let mut g = m.lock();
        *g += 1;
        MutexGuard::bump(&mut g);
        *g += 1;
        MutexGuard::unlocked_fair(&mut g, || ());
        *g += 1;
        MutexGuard::unlock_fair(g);
        assert!(!m.is_locked());
        assert_eq!(*m.lock(), 3);
        assert_eq!(sched::current().depth(), 0);
    }

    fn timed_protocol<L: RawMutexTimed<Duration = Duration, Instant = Instant>>() {
        let m: Mutex<L, u32> = Mutex::new(0);
        let g = m.try_lock_for(Duration::from_millis(1)).expect("free lock");
        // Held by this thread: a second timed attempt gives up, not before its
        // deadline.
        let start = Instant::now();
        assert!(m.try_lock_for(Duration::from_millis(2)).is_none());
        assert!(start.elapsed() >= Duration::from_millis(2));
        assert!(m.try_lock_until(Instant::now()).is_none());
        drop(g);
        assert!(!m.is_locked());
        drop(m.try_lock_until(Instant::now()).expect("free lock"));
        // A timeout too large for an Instant waits without a deadline.
        drop(m.try_lock_for(Duration::MAX).expect("free lock"));
        assert!(!m.is_locked());
        assert_eq!(sched::current().depth(), 0);
    }

    macro_rules! fair {
        ($($name:ident: $l:ty),*) => {$(
            #[test]
            fn $name() { fair_protocol::<$l>() }
        )*};
    }
    macro_rules! timed {
        ($($name:ident: $l:ty),*) => {$(
            #[test]
            #[cfg_attr(miri, ignore = "real time: timeouts run on the monotonic clock")]
            fn $name() { timed_protocol::<$l>() }
        )*};
    }

    fair!(
        fair_ticket: Ticket,
        fair_ticket_split: TicketSplit,
        fair_anderson: AndersonN<4>,
        fair_queued: Queued,
        fair_clh: Clh,
        fair_ticket_np: TicketNp,
        fair_smart_q: SmartQ,
        fair_handshaking: QueuedHandshaking,
        fair_mcs_tp: McsTp,
        fair_clh_tp: ClhTp,
        fair_bounded_steal: BoundedSteal,
        fair_queued_np: super::super::QueuedNp
    );
    timed!(
        timed_native: Native,
        timed_tas_b: TasB,
        timed_tas_b_np: super::super::TasBNp,
        timed_spin_then_park: SpinThenPark,
        timed_bounded_steal: BoundedSteal,
        timed_native_np: super::super::NativeNp,
        timed_bounded_steal_np: Np<BoundedSteal>,
        timed_smart_q: SmartQ,
        timed_handshaking: QueuedHandshaking,
        timed_mcs_tp: McsTp,
        timed_mcs_tp_np: Np<McsTp>,
        timed_clh_tp: ClhTp,
        timed_clh_tp_np: Np<ClhTp>
    );
}
