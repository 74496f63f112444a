//! Anderson's array-based queue lock (Anderson, IEEE TPDS 1990), one of the
//! locking alternatives of Lumetta & Culler 1998 §3.1 (papers/004_…).
//!
//! Each acquirer takes a slot number with `fetch_add` and spins on its own slot,
//! each slot on its own cache line; the releaser passes the lock by writing the
//! next slot. FIFO like the ticket lock, but every waiter spins locally.
//!
//! The array has `N` slots (a power of two, checked at compile time), so at most
//! `N` threads may hold or wait for the lock at once. A further thread does not
//! corrupt the queue: it is refused with a clear error —
//! [`AndersonN::lock_checked`] returns [`LockError::TooManyThreads`](super::LockError),
//! `try_lock` returns `None`, and `lock` (which cannot return an error) panics
//! with that message *before* touching the queue.
//!
//! Pointer-free and `#[repr(C)]`: usable in memory shared by several processes
//! (see [`super::ProcessShared`]); where a peer may write that memory, the
//! crate's `SharedClaimLock` paths wait for admission instead of refusing.
//!
//! Uses `sched`: nothing. Progress: FIFO, starvation-free.
//!
//! ```
//! use mpsync::{lock::{Mutex, Anderson, AndersonN}, lock_api::RawMutex};
//! let m: Mutex<Anderson, u32> = Mutex::new(0);
//! *m.lock() += 1;
//! // Two slots: a third simultaneous user is refused, not admitted.
//! let small = AndersonN::<2>::new();
//! let a = small.lock_checked().unwrap();
//! let b = small.try_lock();
//! assert!(b.is_none());
//! unsafe { small.unlock(a) };
//! ```

use crossbeam_utils::CachePadded;

use super::{GiveUp, LockError, SharedClaimLock};
use crate::sync::{AtomicU32, Ordering, spin_loop};

/// Anderson's lock with the default 64 slots.
pub type Anderson = AndersonN<64>;

/// Anderson's array lock with `N` slots (`N` a power of two, 2 ..= 65536).
///
/// Slot `k mod N` holds the number of the ticket it currently admits: ticket
/// `k` may enter when `slots[k mod N] == k`. Because `N` divides 2³², the slot of
/// a ticket stays right when the 32-bit counter wraps.
#[repr(C)]
pub struct AndersonN<const N: usize> {
    next: CachePadded<AtomicU32>,
    /// Threads holding or waiting (admission control).
    users: CachePadded<AtomicU32>,
    slots: [CachePadded<AtomicU32>; N],
}

impl<const N: usize> std::fmt::Debug for AndersonN<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Anderson")
            .field("slots", &N)
            // Relaxed: a diagnostic snapshot.
            .field("users", &self.users.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Guard state of [`AndersonN`]: the ticket being served.
#[derive(Debug)]
pub struct AndersonGuard {
    ticket: u32,
}

super::loom_const_new! {
    impl[const N: usize] AndersonN<N> {
        /// An unlocked lock.
        new => {
            let () = Self::VALID;
            Self {
                next: CachePadded::new(AtomicU32::new(0)),
                users: CachePadded::new(AtomicU32::new(0)),
                slots: [const { CachePadded::new(AtomicU32::new(0)) }; N],
            }
        },
        loom => {
            let () = Self::VALID;
            Self {
                next: CachePadded::new(AtomicU32::new(0)),
                users: CachePadded::new(AtomicU32::new(0)),
                slots: std::array::from_fn(|_| CachePadded::new(AtomicU32::new(0))),
            }
        }
    }
}

impl<const N: usize> AndersonN<N> {
    const VALID: () = assert!(
        N.is_power_of_two() && N >= 2 && N <= 65536,
        "Anderson lock: the slot count N must be a power of two in 2..=65536"
    );

    /// Number of slots: the most threads that may hold or wait at once.
    pub const fn capacity(&self) -> usize {
        N
    }

    /// Reserves a place among the `N` users, or says why not.
    fn admit(&self) -> Result<(), LockError> {
        // Relaxed: admission counting only; the lock's order comes from the slots.
        let mut u = self.users.load(Ordering::Relaxed);
        loop {
            if u as usize >= N {
                return Err(LockError::TooManyThreads(format!(
                    "Anderson lock with {N} slots: a thread tried to use it while {u} threads \
                     already hold or wait for it; use AndersonN::<M> with M >= the number of \
                     threads (a power of two)"
                )));
            }
            match self
                .users
                .compare_exchange_weak(u, u + 1, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(now) => u = now,
            }
        }
    }

    /// Like `lock`, but refuses a thread beyond the `N` slots with an error
    /// instead of panicking.
    pub fn lock_checked(&self) -> Result<AndersonGuard, LockError> {
        self.admit()?;
        // Relaxed: the ticket only picks our slot; the slot's Acquire load syncs.
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        let slot = &self.slots[ticket as usize % N];
        // Acquire: pairs with the Release store of the previous holder's unlock.
        while slot.load(Ordering::Acquire) != ticket {
            spin_loop();
        }
        Ok(AndersonGuard { ticket })
    }
}

impl<const N: usize> Default for AndersonN<N> {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: at most N users are admitted, so the N pending tickets map to distinct
// slots; ticket k enters only when slot k mod N says k, which only ticket k−1's
// unlock writes (or the initial 0 for ticket 0). Acquire/Release pair on the slot.
unsafe impl<const N: usize> lock_api::RawMutex for AndersonN<N> {
    super::loom_const_init!(AndersonN);

    type Guard = AndersonGuard;

    fn lock(&self) -> Self::Guard {
        match self.lock_checked() {
            Ok(g) => g,
            Err(e) => panic!("{e}"),
        }
    }

    fn try_lock(&self) -> Option<Self::Guard> {
        // Relaxed: as in `admit`; the slot check below synchronizes.
        let t = self.next.load(Ordering::Relaxed);
        // Acquire: pairs with the previous holder's Release (is slot t open?).
        if self.slots[t as usize % N].load(Ordering::Acquire) != t || self.admit().is_err() {
            return None;
        }
        // Take ticket t only if nobody took it meanwhile. Acquire: as above.
        if self
            .next
            .compare_exchange(t, t.wrapping_add(1), Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            Some(AndersonGuard { ticket: t })
        } else {
            // Relaxed: undoing our own admission.
            self.users.fetch_sub(1, Ordering::Relaxed);
            None
        }
    }

    unsafe fn unlock(&self, guard: Self::Guard) {
        let next = guard.ticket.wrapping_add(1);
        // Relaxed: admission counting (see `admit`); ordered before the hand-over
        // below so a refused thread never sees a free slot it may not use.
        self.users.fetch_sub(1, Ordering::Relaxed);
        // Release: publishes the critical section to the next ticket's Acquire.
        self.slots[next as usize % N].store(next, Ordering::Release);
    }

    fn is_locked(&self) -> bool {
        // Relaxed: a momentary snapshot.
        self.users.load(Ordering::Relaxed) != 0
    }
}

/// Whether slot value `v` says that ticket `t`, waiting on that slot, has been
/// passed over: `v` is a ticket of the same slot (≡ `t` mod `N`) ahead of `t`.
/// While `t` waits honestly its slot holds `t - N` (or an older ticket of the
/// slot, or the initial 0), never one ahead: only `t`'s entry lets `t + N` be
/// admitted. After a [`reset`](SharedClaimLock::reset) every slot holds a
/// ticket of the new round, ahead of every ticket taken before.
#[inline]
fn passed<const N: usize>(v: u32, t: u32) -> bool {
    let d = v.wrapping_sub(t);
    (d as usize).is_multiple_of(N) && (d as i32) > 0
}

// SAFETY: `lock_or_give_up` enters only as `lock` does: admitted, then its own
// ticket seen in its slot by the Acquire load. A ticket it leaves (given up,
// or passed) is never taken again before the counter wraps.
unsafe impl<const N: usize> SharedClaimLock for AndersonN<N> {
    /// As `lock`, asking `give_up` every [`GIVE_UP_SPINS`](super::GIVE_UP_SPINS)
    /// spins, in two waits: for admission (while `N` users hold or wait —
    /// instead of `lock`'s panic), then for its slot. A waiter whose ticket
    /// has been passed over (see [`passed`]: a `reset`, or a peer's write) is
    /// admitted again and takes a new one.
    fn lock_or_give_up(&self, give_up: &mut dyn FnMut() -> bool) -> Option<AndersonGuard> {
        let mut g = GiveUp::new(give_up);
        loop {
            // Relaxed (all three): admission counting, as in `admit`.
            let mut u = self.users.load(Ordering::Relaxed);
            loop {
                if (u as usize) < N {
                    match self.users.compare_exchange_weak(
                        u,
                        u + 1,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => break,
                        Err(now) => u = now,
                    }
                } else {
                    u = self.users.load(Ordering::Relaxed);
                }
                if g.spin(1) {
                    return None;
                }
            }
            // Relaxed: as in `lock_checked`.
            let ticket = self.next.fetch_add(1, Ordering::Relaxed);
            let slot = &self.slots[ticket as usize % N];
            loop {
                // Acquire: pairs with the Release store of the previous
                // holder's unlock (or of `reset`).
                let v = slot.load(Ordering::Acquire);
                if v == ticket {
                    return Some(AndersonGuard { ticket });
                }
                if passed::<N>(v, ticket) {
                    break; // admitted again below, with a new ticket
                }
                if g.spin(1) {
                    return None;
                }
            }
            if g.spin(1) {
                return None;
            }
        }
    }

    /// The wrapping sum of the slots: a release raises one slot by `N`
    /// (mod 2³²), taking a ticket changes none. Costs `N` loads.
    fn progress(&self) -> u64 {
        self.slots.iter().fold(0u64, |sum, s| {
            // Relaxed: a sample the caller compares with later ones; nothing
            // is read through it.
            sum.wrapping_add(s.load(Ordering::Relaxed).into())
        })
    }

    /// Nobody counted, and a new round: the ticket counter moves `N` on
    /// (`n`, the first new ticket), each slot gets the ticket one round
    /// before the first new one it will admit, and then `n`'s slot admits `n`.
    /// Every ticket taken before is behind its slot's new value, so its
    /// `lock_or_give_up` waiter sees itself passed over and queues again.
    unsafe fn reset(&self) {
        let round = N as u32; // N ≤ 2¹⁶ (VALID)
        // [1] Relaxed: admission counting, as in `admit`. A swap, not a
        // store (the same effect, and a reset is rare): loom orders a plain
        // store only partially against a racing CAS, so in the model a waiter
        // could re-read forever the count its own CAS had raised.
        let _ = self.users.swap(0, Ordering::Relaxed);
        // [2] Relaxed: the ticket counter orders nothing (as in `lock_checked`).
        let n = self
            .next
            .fetch_add(round, Ordering::Relaxed)
            .wrapping_add(round);
        for k in 1..round {
            let t = n.wrapping_add(k);
            // [3] Relaxed: published by the Release store in [4], which the
            // first new holder reads with Acquire; every hand-over of the new
            // round follows from that entry, so none of their stores to this
            // slot is overwritten by this one.
            self.slots[t as usize % N].store(t.wrapping_sub(round), Ordering::Relaxed);
        }
        // [4] Release: admits `n`, publishing [3] (and as `unlock`'s store).
        self.slots[n as usize % N].store(n, Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::lock::shared_claim_tests::{Waiter, attempt, leaked, within, works};
    use std::sync::atomic::Ordering::SeqCst;

    #[test]
    fn passed_only_by_a_ticket_of_the_same_slot_ahead() {
        for t in [0, 1, 5, 1 << 31, u32::MAX - 1, u32::MAX] {
            // Honest slot values while `t` waits: older tickets of its slot.
            assert!(!passed::<4>(t.wrapping_sub(4), t));
            assert!(!passed::<4>(t.wrapping_sub(8), t));
            assert!(!passed::<4>(t, t));
            // Another slot's ticket (a fresh lock's 0, or a peer's write).
            assert!(!passed::<4>(t.wrapping_add(1), t));
            // The same slot, rounds ahead (after a reset), also across the wrap.
            assert!(passed::<4>(t.wrapping_add(4), t));
            assert!(passed::<4>(t.wrapping_add(8), t));
        }
    }

    #[test]
    fn a_full_admission_count_is_a_wait_and_reset_repairs_it() {
        let l = leaked::<AndersonN<4>>();
        // A peer wrote N into the count: every place looks taken. Refused
        // while it stays so — by a wait that asks give_up, not a panic.
        l.users.store(4, SeqCst);
        assert!(!attempt(l, 50), "refused while the count is full");
        // A place frees up (as an unlock would make it): a waiter is admitted.
        let w = Waiter::start(l);
        l.users.store(3, SeqCst);
        assert!(w.got(), "admitted once a place is free");
        w.release();

        l.users.store(4, SeqCst);
        // SAFETY: nobody holds the lock.
        unsafe { l.reset() };
        within("after the reset", move || works(l));
    }
}
