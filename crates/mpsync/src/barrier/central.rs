//! Central: the centralized sense-reversing barrier — one arrival counter, one
//! episode word — spinning, blocking (the paper's Central-block), or spinning
//! then blocking.
//!
//! Paper 001 §4 (papers/001_…, "Central-block", Figure 7) and the small-scale
//! barrier of Kontothanassis & Wisniewski (PPoPP 1993, 001's reference \[10\]). The episode word
//! replaces the sense flag: a waiter remembers the episode it arrived in and
//! waits for the word to move (no sense to reverse, so nothing to get wrong when
//! a thread is slow to leave). The last arriver resets the counter and releases
//! the episode; it is the leader.
//!
//! Uses `sched`: `park`/`unpark_all` when blocking. Progress: blocking (a
//! barrier); the counter is a single hot word (fine on a few processors).
//!
//! ```
//! use mpsync::barrier::{Barrier, Central, WaitMode};
//! let b = Central::new(2, WaitMode::Block).unwrap();
//! std::thread::scope(|s| {
//!     s.spawn(|| b.wait(0));
//!     b.wait(1);
//! });
//! ```

use super::{
    Barrier, BarrierError, BarrierWaitResult, Release, WaitMode, check_id, check_participants,
};
use crate::sched::stall;
use crate::sync::{AtomicU32, Ordering};
use crate::util::CachePadded;

/// Centralized barrier.
#[derive(Debug)]
pub struct Central {
    n: u32,
    mode: WaitMode,
    count: CachePadded<AtomicU32>,
    release: Release,
}

impl Central {
    /// A barrier for `n` participants, waiting as `mode` says. Errors if `n`
    /// is 0 or above [`MAX_PARTICIPANTS`](super::MAX_PARTICIPANTS).
    pub fn new(n: usize, mode: WaitMode) -> Result<Self, BarrierError> {
        Ok(Self {
            n: check_participants("Central barrier", n)?,
            mode,
            count: CachePadded::new(AtomicU32::new(0)),
            release: Release::new(),
        })
    }

    /// How waiters wait.
    pub fn mode(&self) -> WaitMode {
        self.mode
    }
}

impl Barrier for Central {
    fn name(&self) -> &'static str {
        match self.mode {
            WaitMode::Spin => "Central",
            WaitMode::Block => "Central-block",
            WaitMode::SpinThenBlock(_) => "Central-spin-block",
        }
    }

    fn participants(&self) -> usize {
        self.n as usize
    }

    fn wait(&self, id: usize) -> BarrierWaitResult {
        check_id("Central barrier", id, self.n);
        self.arrive()
    }
}

impl Central {
    /// Arrives without an id: the centralized barrier counts arrivals, it
    /// does not need to know who arrives (so [`SimpleBarrier`](super::SimpleBarrier)
    /// can take any thread).
    #[inline]
    pub(crate) fn arrive(&self) -> BarrierWaitResult {
        let seen = self.release.current();
        // AcqRel: Release publishes our pre-barrier work to the last arriver;
        // Acquire (for the last arriver) gathers everyone's.
        if self.count.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            // Relaxed: ordered before the next episode's arrivals by the
            // release below (they read the new episode with Acquire first).
            self.count.store(0, Ordering::Relaxed);
            stall::point(stall::BARRIER_LAST_ARRIVED);
            self.release.release();
            BarrierWaitResult(true)
        } else {
            self.release.wait(seen, self.mode);
            BarrierWaitResult(false)
        }
    }
}
