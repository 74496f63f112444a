//! Dissemination: ⌈log₂ n⌉ rounds; in round `r` participant `i` signals
//! participant `(i + 2^r) mod n` and waits for the signal of `(i − 2^r) mod n`.
//!
//! Hensgen, Finkel & Manber (1988), as in Mellor-Crummey & Scott (TOCS 1991,
//! §3.3). Each flag is a counter of signals (episode `k` is complete in a round
//! when the flag has reached `k`), so there is no parity or sense to keep. Every
//! thread spins on its own flags; after 20 µs it sleeps until the partner
//! that signals it wakes it (`wait_flag` in `barrier/mod.rs`). No natural leader:
//! participant 0 is the leader of every episode.
//!
//! Uses `sched`: `Waiter`, `wake` (and `yield_now` on an emulated processor).
//!
//! ```
//! use mpsync::barrier::{Barrier, Dissemination};
//! let b = Dissemination::new(3).unwrap();
//! std::thread::scope(|s| {
//!     s.spawn(|| b.wait(1));
//!     s.spawn(|| b.wait(2));
//!     assert!(b.wait(0).is_leader());
//! });
//! ```

use super::{
    Barrier, BarrierError, BarrierWaitResult, Sleeper, check_id, check_participants, reached,
    wait_flag,
};
use crate::sync::{AtomicU32, Ordering};
use crate::util::CachePadded;

/// Dissemination barrier.
#[derive(Debug)]
pub struct Dissemination {
    n: u32,
    rounds: u32,
    /// `flags[i * rounds + r]`: signals participant `i` received in round `r`.
    flags: Vec<CachePadded<AtomicU32>>,
    /// Episodes participant `i` has completed (its own; Relaxed).
    done: Vec<CachePadded<AtomicU32>>,
    /// Participant `i`'s sleep announcement (see [`Sleeper`]).
    sleepers: Vec<CachePadded<Sleeper>>,
}

impl Dissemination {
    /// A barrier for `n` participants.
    pub fn new(n: usize) -> Result<Self, BarrierError> {
        let n = check_participants("dissemination barrier", n)?;
        let rounds = u32::BITS - (n - 1).leading_zeros();
        let new = |k: u32| {
            (0..k)
                .map(|_| CachePadded::new(AtomicU32::new(0)))
                .collect()
        };
        Ok(Self {
            n,
            rounds,
            flags: new(n * rounds),
            done: new(n),
            sleepers: (0..n).map(|_| CachePadded::new(Sleeper::new())).collect(),
        })
    }
}

impl Dissemination {
    /// Whether participant `id` has announced that it sleeps (tests).
    #[cfg(test)]
    pub(super) fn announced(&self, id: usize) -> bool {
        self.sleepers[id].is_announced()
    }
}

impl Barrier for Dissemination {
    fn name(&self) -> &'static str {
        "Dissemination"
    }

    fn participants(&self) -> usize {
        self.n as usize
    }

    fn wait(&self, id: usize) -> BarrierWaitResult {
        check_id("dissemination barrier", id, self.n);
        let (i, n, rounds) = (id as u32, self.n, self.rounds);
        // Relaxed: only participant `id` touches its own count.
        let k = self.done[id].load(Ordering::Relaxed).wrapping_add(1);
        for r in 0..rounds {
            let partner = ((i as u64 + (1u64 << r)) % n as u64) as u32;
            // Release: hands everything we know (our work and the signals we
            // received, which we Acquired) to the partner.
            self.flags[(partner * rounds + r) as usize].fetch_add(1, Ordering::Release);
            self.sleepers[partner as usize].signalled();
            let mine = &self.flags[(i * rounds + r) as usize];
            // Acquire: pairs with the sender's Release increment.
            wait_flag(&self.sleepers[id], || {
                reached(mine.load(Ordering::Acquire), k)
            });
        }
        // Relaxed: owner-only.
        self.done[id].store(k, Ordering::Relaxed);
        BarrierWaitResult(id == 0)
    }
}
