//! Smart-Q (Wisniewski, Kontothanassis & Scott, IPPS 1994, 003 Figure 1): the
//! skipping queue ([`SkipQueue`]) whose releaser hands the lock to the next
//! waiter by making it `OtherUnpreemptable` with a CAS on its context block's
//! state word — the CAS fails, and the waiter is skipped, when the scheduler
//! has preempted it. Natively, where no scheduler writes that word, the
//! kernel's answer ([`sched::is_preempted`]: eBPF on `sched_switch`, or stale
//! heartbeats) stands in for it; the shared queue checks it before claiming
//! the waiter. The critical section is no-preempt; waiters pause their request
//! while they wait.
//!
//! ```
//! use mpsync::lock::{Mutex, SmartQ};
//! let m: Mutex<SmartQ, u32> = Mutex::new(0);
//! *m.lock() += 1;
//! assert_eq!(*m.lock(), 1);
//! ```

#[cfg(doc)]
use super::skipq::SkipQueue;
use super::skipq::{SkipNode, SkipPolicy, sealed};
#[cfg(doc)]
use crate::sched;

/// Smart-Q's policy (003 Figure 1).
#[derive(Debug)]
pub enum SmartQPolicy {}

impl sealed::Sealed for SmartQPolicy {}

impl SkipPolicy for SmartQPolicy {
    const NAME: &'static str = "Smart-Q";
    const NO_PREEMPT: bool = true;

    #[inline]
    fn offer(cand: &SkipNode, _patience_ns: u64) -> bool {
        // Figure 1's CAS: fails if the scheduler preempted the waiter. On
        // success the waiter runs its critical section unpreemptable.
        cand.owner().make_other_unpreemptable()
    }
}

super::skipq::named_skip_queue! {
    /// Smart-Q (003 Figure 1): the releaser makes the next waiter
    /// `OtherUnpreemptable` by CAS, skipping waiters it finds preempted.
    SmartQ = SmartQPolicy
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::lock::skipq::{
        WAITING,
        tests::{new_holder_is_unpreemptable, skips_a_stalled_waiter},
    };
    use crate::sched::{Actor, ThreadState};

    #[test]
    #[cfg_attr(miri, ignore = "real time: the releaser's patience is a clock")]
    fn smart_q_skips_a_preempted_waiter() {
        skips_a_stalled_waiter::<SmartQPolicy>(Some(0), WAITING, |cb| {
            cb.transition(
                ThreadState::Preemptable,
                ThreadState::Preempted,
                Actor::Kernel,
            )
            .unwrap();
        });
    }

    /// A waiter handed the lock runs its critical section unpreemptable.
    #[test]
    #[cfg_attr(miri, ignore = "real time: the waiter's patience is a clock")]
    fn smart_q_new_holder_is_unpreemptable() {
        new_holder_is_unpreemptable::<SmartQPolicy>();
    }
}
