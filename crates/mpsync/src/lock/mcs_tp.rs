//! MCS-TP (He, Scherer & Scott, HiPC 2005 — "time-published" queue locks): the
//! skipping queue ([`SkipQueue`]) whose releaser hands the lock only to a
//! waiter that is running. The paper judges that by heartbeats the waiters
//! publish, without help from the kernel; natively mpsync takes the kernel's
//! answer where it has one ([`sched::is_preempted`]: eBPF on `sched_switch`)
//! and heartbeats otherwise, checked by the shared queue before it claims the
//! waiter. Waiters wait for a preempted holder without spinning: under the
//! emulated scheduler they give their processor away (the paper's yield),
//! natively they park through the [`Waiter`](sched::Waiter). No no-preempt
//! section of its own (use `Np<McsTp>` for one).
//!
//! ```
//! use mpsync::lock::{Mutex, McsTp};
//! let m: Mutex<McsTp, u32> = Mutex::new(0);
//! *m.lock() += 1;
//! assert_eq!(*m.lock(), 1);
//! ```

#[cfg(doc)]
use super::skipq::SkipQueue;
use super::skipq::{SkipNode, SkipPolicy, sealed};
#[cfg(doc)]
use crate::sched;

/// MCS-TP's policy (He, Scherer & Scott 2005): running waiters only.
#[derive(Debug)]
pub enum TpPolicy {}

impl sealed::Sealed for TpPolicy {}

impl SkipPolicy for TpPolicy {
    const NAME: &'static str = "MCS-TP";
    const NO_PREEMPT: bool = false;

    #[inline]
    fn offer(_cand: &SkipNode, _patience_ns: u64) -> bool {
        // The shared queue found the waiter not preempted and claimed it while
        // it spun: that is the whole test.
        true
    }
}

super::skipq::named_skip_queue! {
    /// MCS-TP (He, Scherer & Scott 2005): skip waiters that are not running.
    McsTp = TpPolicy
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::lock::skipq::{GRANT_FRESH_NS, WAITING, tests::skips_a_stalled_waiter};
    use crate::sync::Ordering;

    #[test]
    #[cfg_attr(miri, ignore = "real time: the releaser's patience is a clock")]
    fn mcs_tp_skips_a_waiter_with_a_stale_heartbeat() {
        skips_a_stalled_waiter::<TpPolicy>(None, WAITING, |cb| {
            // Relaxed: test setup before the block is shared.
            cb.peer.heartbeat.store(1, Ordering::Relaxed); // long ago
        });
    }

    /// Natively, with heartbeats only, a waiter whose heartbeat is fresh by
    /// the general threshold (100 µs) but older than the grant's
    /// [`GRANT_FRESH_NS`] is not handed the lock: a spinning waiter publishes
    /// every few µs, so it is most likely off its CPU.
    #[test]
    #[cfg_attr(miri, ignore = "real time: the releaser's patience is a clock")]
    fn mcs_tp_skips_a_waiter_preempted_less_than_the_threshold_ago() {
        let age = 3 * GRANT_FRESH_NS;
        assert!(std::time::Duration::from_nanos(age) < crate::sched::native::heartbeat_threshold());
        skips_a_stalled_waiter::<TpPolicy>(Some(age), WAITING, |_| ());
    }
}
