//! [`SimpleBarrier`]: `std::sync::Barrier`'s interface (no participant ids, no
//! `Result`) over the centralized barrier, [`Central`], blocking.

use super::{BarrierWaitResult, Central, MAX_PARTICIPANTS, WaitMode};

/// A barrier with `std::sync::Barrier`'s interface: `new(n)`, and `wait()`
/// from any thread, returning a [`BarrierWaitResult`] whose
/// [`is_leader`](BarrierWaitResult::is_leader) is true for exactly one thread
/// per episode. Re-exported as [`mpsync::Barrier`](crate::Barrier).
///
/// It is the centralized barrier ([`Central`]: one arrival counter, one
/// episode word) waiting as [`WaitMode::Block`], the papers' Central-block:
/// a waiter parks at once, woken by the last arriver, so a waiter whose
/// partners were preempted gives its processor to them instead of spinning.
/// Measured (`barrier-oversub --quick`, 2, 4 and 8 threads on 2 cores, 2–4 µs
/// of work between episodes): 0.47–0.76× `std::sync::Barrier`'s episode time,
/// where spinning 20 µs first ([`WaitMode::HEURISTIC`]) took 1.00–1.42×.
/// It needs no participant ids: any `n` threads may arrive,
/// in any order, episode after episode. The barriers of the papers that do
/// need ids (the trees, dissemination, Scalable-SC) implement the
/// [`Barrier`](super::Barrier) trait, `wait(id)`.
///
/// As `std::sync::Barrier::new`, `new(0)` makes a barrier that behaves as
/// `new(1)`: every `wait` returns at once, as the leader.
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// let barrier = mpsync::Barrier::new(4);
/// let leaders = AtomicU32::new(0);
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         s.spawn(|| {
///             for _ in 0..3 {
///                 if barrier.wait().is_leader() {
///                     leaders.fetch_add(1, Ordering::Relaxed);
///                 }
///             }
///         });
///     }
/// });
/// assert_eq!(leaders.into_inner(), 3); // one leader per episode
/// assert!(mpsync::Barrier::new(0).wait().is_leader());
/// ```
#[derive(Debug)]
pub struct SimpleBarrier {
    central: Central,
}

impl SimpleBarrier {
    /// A barrier for `n` threads (`0` acts as `1`, as std's).
    ///
    /// # Panics
    /// If `n` is above [`MAX_PARTICIPANTS`] (2²⁰); [`try_new`](Self::try_new)
    /// returns an error instead.
    #[track_caller]
    pub fn new(n: usize) -> Self {
        match Self::try_new(n) {
            Ok(b) => b,
            Err(e) => panic!("{e}"),
        }
    }

    /// As [`new`](Self::new), but an `n` above [`MAX_PARTICIPANTS`] is an
    /// error rather than a panic.
    pub fn try_new(n: usize) -> Result<Self, super::BarrierError> {
        Ok(Self {
            central: Central::new(n.max(1), WaitMode::Block)?,
        })
    }

    /// The number of threads an episode waits for.
    pub fn participants(&self) -> usize {
        super::Barrier::participants(&self.central)
    }

    /// Blocks until `n` threads have called `wait` in this episode, then
    /// returns in all of them; exactly one gets a leader result. Everything a
    /// thread did before `wait` happens before everything every thread does
    /// after its `wait` returns.
    #[inline]
    pub fn wait(&self) -> BarrierWaitResult {
        self.central.arrive()
    }
}

const _: () = assert!(MAX_PARTICIPANTS <= u32::MAX as usize);
