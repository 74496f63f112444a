//! Queued-Handshaking (Wisniewski, Kontothanassis & Scott, IPPS 1994, 003 §3):
//! the skipping queue ([`SkipQueue`]) whose releaser *offers* the lock to the
//! next waiter and waits, boundedly, for an acknowledgement; without one it
//! rescinds the offer by swap (the swaps of both sides decide the race) and
//! skips the waiter. It needs no help from the kernel — a waiter that does not
//! answer is treated as preempted — but natively a waiter the kernel already
//! reports preempted ([`sched::is_preempted`]) is skipped without the wait, and
//! only a waiter claimed while spinning is offered the lock (the shared queue's
//! grant protocol), so a parked one never is. The critical section is
//! no-preempt; a waiter resumes its paused request before acknowledging, so an
//! acknowledged lock is never held by a preemptable thread.
//!
//! ```
//! use mpsync::lock::{Mutex, QueuedHandshaking};
//! let m: Mutex<QueuedHandshaking, u32> = Mutex::new(0);
//! *m.lock() += 1;
//! assert_eq!(*m.lock(), 1);
//! ```

#[cfg(doc)]
use super::skipq::SkipQueue;
use super::skipq::{SkipNode, SkipPolicy, sealed};
use crate::sched::{self, ContextBlock, waiter::CHECK_EVERY};
use crate::sync::{Ordering, spin_loop};
use crate::util::clock::Patience;

// 0: no offer (the shared queue resets the word for each attempt).
/// The releaser offers the lock.
const OFFERED: u32 = 1;
/// The waiter acknowledged.
const SEEN: u32 = 2;
/// The releaser gave up waiting and withdrew the offer.
const RESCINDED: u32 = 3;

/// Queued-Handshaking's policy (003 §3).
#[derive(Debug)]
pub enum HandshakePolicy {}

impl sealed::Sealed for HandshakePolicy {}

impl SkipPolicy for HandshakePolicy {
    const NAME: &'static str = "Queued-Handshaking";
    const NO_PREEMPT: bool = true;
    const ASKS_THE_WAITER: bool = true;

    fn offer(cand: &SkipNode, patience_ns: u64) -> bool {
        // Release: nothing to publish yet (the SUCCESS store does), but keep the
        // offer ordered after our critical section for clarity of reasoning.
        cand.offer.store(OFFERED, Ordering::Release);
        let owner = cand.owner();
        let mut patience = Patience::start(patience_ns);
        let mut spins = 0u32;
        loop {
            // Relaxed: the swap below decides; this is a fast path.
            if cand.offer.load(Ordering::Relaxed) == SEEN {
                return true;
            }
            // Stop waiting for the answer when the waiter is known preempted
            // or the patience is spent. (A Patience, not a `Waiter`: under loom
            // a Waiter gives up at once, and a releaser that always rescinds
            // walks a queue of re-enqueuing waiters forever.)
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(CHECK_EVERY)
                && (patience.exhausted() || sched::is_preempted(owner))
            {
                break;
            }
            spin_loop();
        }
        // Rescind; the swap decides the race with the waiter's swap (003 §3).
        // AcqRel: totally ordered with the waiter's swap on the same word.
        cand.offer.swap(RESCINDED, Ordering::AcqRel) == SEEN
    }

    #[inline]
    fn on_spin(me: &SkipNode, cb: &ContextBlock, paused: &mut bool) {
        // Relaxed: the swap decides. Once acknowledged (SEEN) or rescinded, the
        // word is not IDLE/OFFERED: nothing more to do.
        if me.offer.load(Ordering::Relaxed) != OFFERED {
            return;
        }
        if *paused {
            // Unpreemptable before acknowledging: an acknowledged lock is never
            // handed to a thread the scheduler may then preempt.
            cb.resume_no_preempt();
            *paused = false;
        }
        // AcqRel: see `offer`. Whatever it returns, the releaser's final verdict
        // (ACK = SUCCESS, NACK = FAILURE) follows; a rescinded offer stays
        // RESCINDED (the swap back is harmless: the releaser already decided).
        if me.offer.swap(SEEN, Ordering::AcqRel) == RESCINDED {
            // Relaxed: our own node; the releaser no longer reads the word.
            me.offer.store(RESCINDED, Ordering::Relaxed);
        }
    }
}

super::skipq::named_skip_queue! {
    /// Queued-Handshaking (003 §3): offer, acknowledge, rescind by swap.
    QueuedHandshaking = HandshakePolicy
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::lock::skipq::{
        WAITING,
        tests::{new_holder_is_unpreemptable, skips_a_stalled_waiter},
    };

    #[test]
    #[cfg_attr(miri, ignore = "real time: the releaser's patience is a clock")]
    fn handshaking_rescinds_an_unacknowledged_offer() {
        skips_a_stalled_waiter::<HandshakePolicy>(Some(0), WAITING, |_| ());
    }

    /// An acknowledged waiter resumed its no-preempt request first.
    #[test]
    #[cfg_attr(miri, ignore = "real time: the waiter's patience is a clock")]
    fn handshaking_new_holder_is_unpreemptable() {
        new_holder_is_unpreemptable::<HandshakePolicy>();
    }
}
