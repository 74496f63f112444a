//! McsTree: Mellor-Crummey & Scott's tree barrier — a 4-ary arrival tree and a
//! binary wake-up tree, every thread spinning only on its own words.
//!
//! Mellor-Crummey & Scott, TOCS 1991 §3.3 (papers/001_… cites it as \[16\]; its
//! "Arrival-tree" baseline in a multiprogrammed setting). Participant `i` waits
//! until its children `4i+1 ..= 4i+4` have arrived, tells its parent
//! `(i−1)/4`, then waits to be woken by its wake-up parent `(i−1)/2` and wakes
//! `2i+1`, `2i+2`. Arrival and wake-up words are counters, so nothing is reset.
//! Participant 0, the root, is the leader. Waits spin, then sleep until the
//! thread that ends them wakes them (`wait_flag` in `barrier/mod.rs`).
//!
//! Uses `sched`: `Waiter`, `wake` (and `yield_now` on an emulated processor).
//!
//! ```
//! use mpsync::barrier::{Barrier, McsTree};
//! let b = McsTree::new(2).unwrap();
//! std::thread::scope(|s| {
//!     s.spawn(|| b.wait(1));
//!     assert!(b.wait(0).is_leader());
//! });
//! ```

use super::{
    Barrier, BarrierError, BarrierWaitResult, Sleeper, check_id, check_participants, reached,
    wait_flag,
};
use crate::sync::{AtomicU32, Ordering};
use crate::util::CachePadded;

#[derive(Debug)]
struct Slot {
    /// Children that arrived, over all episodes.
    arrived: AtomicU32,
    /// The last episode this participant was woken for.
    woken: AtomicU32,
    /// Episodes this participant has completed (owner only).
    done: AtomicU32,
    /// Its sleep announcement (see [`Sleeper`]).
    sleeper: Sleeper,
}

/// MCS tree barrier.
#[derive(Debug)]
pub struct McsTree {
    n: u32,
    slots: Vec<CachePadded<Slot>>,
}

impl McsTree {
    /// A barrier for `n` participants.
    pub fn new(n: usize) -> Result<Self, BarrierError> {
        let n = check_participants("MCS tree barrier", n)?;
        Ok(Self {
            n,
            slots: (0..n)
                .map(|_| {
                    CachePadded::new(Slot {
                        arrived: AtomicU32::new(0),
                        woken: AtomicU32::new(0),
                        done: AtomicU32::new(0),
                        sleeper: Sleeper::new(),
                    })
                })
                .collect(),
        })
    }

    fn arrival_children(&self, i: u32) -> u32 {
        let first = 4 * i as u64 + 1;
        (self.n as u64).saturating_sub(first).min(4) as u32
    }
}

impl McsTree {
    /// Whether participant `id` has announced that it sleeps (tests).
    #[cfg(test)]
    pub(super) fn announced(&self, id: usize) -> bool {
        self.slots[id].sleeper.is_announced()
    }
}

impl Barrier for McsTree {
    fn name(&self) -> &'static str {
        "MCS-tree"
    }

    fn participants(&self) -> usize {
        self.n as usize
    }

    fn wait(&self, id: usize) -> BarrierWaitResult {
        check_id("MCS tree barrier", id, self.n);
        let i = id as u32;
        let me = &self.slots[id];
        // Relaxed: owner-only.
        let k = me.done.load(Ordering::Relaxed).wrapping_add(1);
        let want = self.arrival_children(i).wrapping_mul(k);
        // Acquire: pairs with the children's Release increments.
        wait_flag(&me.sleeper, || {
            reached(me.arrived.load(Ordering::Acquire), want)
        });
        if i != 0 {
            let parent = &self.slots[((i - 1) / 4) as usize];
            // Release: hands our subtree's arrival (and work) to the parent.
            parent.arrived.fetch_add(1, Ordering::Release);
            parent.sleeper.signalled();
            // Acquire: pairs with the wake-up parent's Release store.
            wait_flag(&me.sleeper, || reached(me.woken.load(Ordering::Acquire), k));
        }
        for c in [2 * i as u64 + 1, 2 * i as u64 + 2] {
            if c < self.n as u64 {
                let child = &self.slots[c as usize];
                // Release: passes the release (and all work) down.
                child.woken.store(k, Ordering::Release);
                child.sleeper.signalled();
            }
        }
        // Relaxed: owner-only.
        me.done.store(k, Ordering::Relaxed);
        BarrierWaitResult(i == 0)
    }
}
