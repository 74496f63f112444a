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
//! (see [`super::ProcessShared`]).
//!
//! Uses `sched`: nothing. Progress: FIFO, starvation-free.
//!
//! ```
//! use mpsync::{Mutex, lock::{Anderson, AndersonN}, lock_api::RawMutex};
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

use super::LockError;
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
