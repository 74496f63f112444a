//! Dissemination: ⌈log₂ n⌉ rounds; in round `r` participant `i` signals
//! participant `(i + 2^r) mod n` and waits for the signal of `(i − 2^r) mod n`.
//!
//! Hensgen, Finkel & Manber (1988), as in Mellor-Crummey & Scott (TOCS 1991,
//! §3.3). Each flag is a counter of signals (episode `k` is complete in a round
//! when the flag has reached `k`), so there is no parity or sense to keep. Every
//! thread spins on its own flags; after 20 µs it yields between checks
//! ([`spin_then_yield`](super::spin_then_yield)). No natural leader:
//! participant 0 is the leader of every episode.
//!
//! Uses `sched`: `yield_now`.
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
    Barrier, BarrierError, BarrierWaitResult, check_id, check_participants, reached,
    spin_then_yield,
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
        })
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
            let mine = &self.flags[(i * rounds + r) as usize];
            // Acquire: pairs with the sender's Release increment.
            spin_then_yield(|| reached(mine.load(Ordering::Acquire), k));
        }
        // Relaxed: owner-only.
        self.done[id].store(k, Ordering::Relaxed);
        BarrierWaitResult(id == 0)
    }
}
