//! The four-valued state word of paper 001 §3 (and 003 §3), changed only by CAS
//! along legal transitions.
//!
//! | state              | who sets it                      | meaning                              |
//! |--------------------|----------------------------------|--------------------------------------|
//! | Preemptable        | the thread, leaving a CS; kernel, resuming | running; may be preempted  |
//! | SelfUnpreemptable  | the thread, entering a CS        | please don't preempt me              |
//! | OtherUnpreemptable | a peer (lock releaser), by CAS   | you were just handed a lock          |
//! | Preempted          | the scheduler (kernel), by CAS   | not running                          |
//!
//! Legal transitions, by actor ([`Actor`]):
//!
//! | from \ to          | Preemptable  | SelfUnpre.  | OtherUnpre. | Preempted   |
//! |--------------------|--------------|-------------|-------------|-------------|
//! | Preemptable        | –            | Thread      | Peer        | Kernel      |
//! | SelfUnpreemptable  | Thread       | –           | Peer        | Kernel\[1\] |
//! | OtherUnpreemptable | Thread       | –           | –           | Kernel\[1\] |
//! | Preempted          | Kernel       | Kernel\[2\] | Kernel\[2\] | –           |
//!
//! \[1\] only when the extension granted to an unpreemptable thread is used up: the
//!     kernel keeps ultimate control of the processor (Symunix).
//! \[2\] resuming a thread that was forcibly preempted restores the state it had.
//!
//! User code (`Thread`, `Peer`) can never move a thread out of `Preempted`.
//!
//! mpsync's own no-preempt request is not in this word (issue 13 §3): it is the
//! owner's request word ([`ContextBlock::request_no_preempt`](super::ContextBlock::request_no_preempt)),
//! written with plain stores, which the scheduler reads as a hint and the
//! owner's signal handler re-checks exactly (undoing, as the kernel, a
//! `Preempted` that raced a request). `sched` no longer enters
//! `SelfUnpreemptable`; the word keeps it, and its transitions, for the papers'
//! protocol (a peer's hand-off and the kernel treat it as they always did).

use crate::sync::{AtomicU8, Ordering};

/// The state of a thread as the scheduler and its peers see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ThreadState {
    /// Running; the scheduler may preempt it.
    Preemptable = 0,
    /// Not running: the scheduler took its processor away.
    Preempted = 1,
    /// Running, and asked not to be preempted (it is entering a critical section).
    SelfUnpreemptable = 2,
    /// Running, and made unpreemptable by a peer that handed it a lock.
    OtherUnpreemptable = 3,
}

impl ThreadState {
    /// Decodes a raw state byte.
    pub const fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(Self::Preemptable),
            1 => Some(Self::Preempted),
            2 => Some(Self::SelfUnpreemptable),
            3 => Some(Self::OtherUnpreemptable),
            _ => None,
        }
    }

    /// Whether the thread asked (or was asked) not to be preempted.
    pub const fn is_unpreemptable(self) -> bool {
        matches!(self, Self::SelfUnpreemptable | Self::OtherUnpreemptable)
    }
}

/// Who attempts a transition; decides which transitions are legal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actor {
    /// The thread that owns the state word.
    Thread,
    /// Another user thread (e.g. a lock releaser handing over a lock).
    Peer,
    /// The scheduler (the pseudo-scheduler, or sched's own kernel-side code).
    Kernel,
}

/// Why a transition did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransitionError {
    /// The transition is not in the table above for this actor.
    Illegal {
        /// Expected current state.
        from: ThreadState,
        /// Requested new state.
        to: ThreadState,
        /// Who asked.
        actor: Actor,
    },
    /// Legal, but the word did not hold `from`: it holds this.
    Conflict(ThreadState),
}

impl std::fmt::Display for TransitionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Illegal { from, to, actor } => {
                write!(
                    f,
                    "illegal state transition {from:?} -> {to:?} by {actor:?}"
                )
            }
            Self::Conflict(s) => write!(f, "state word changed concurrently (now {s:?})"),
        }
    }
}

impl std::error::Error for TransitionError {}

/// Whether `actor` may move a state word from `from` to `to` (the table above).
pub const fn is_legal(from: ThreadState, to: ThreadState, actor: Actor) -> bool {
    use Actor::*;
    use ThreadState::*;
    matches!(
        (from, to, actor),
        (Preemptable, SelfUnpreemptable, Thread)
            | (SelfUnpreemptable, Preemptable, Thread)
            | (OtherUnpreemptable, Preemptable, Thread)
            | (Preemptable, OtherUnpreemptable, Peer)
            | (SelfUnpreemptable, OtherUnpreemptable, Peer)
            | (Preemptable, Preempted, Kernel)
            | (SelfUnpreemptable, Preempted, Kernel)
            | (OtherUnpreemptable, Preempted, Kernel)
            | (Preempted, Preemptable, Kernel)
            | (Preempted, SelfUnpreemptable, Kernel)
            | (Preempted, OtherUnpreemptable, Kernel)
    )
}

/// A thread's state word. Only [`transition`](Self::transition) changes it.
#[derive(Debug)]
pub struct StateWord(AtomicU8);

impl Default for StateWord {
    fn default() -> Self {
        Self::new()
    }
}

impl StateWord {
    /// A word in `Preemptable`.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self(AtomicU8::new(ThreadState::Preemptable as u8))
    }

    /// A word in `Preemptable`.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self(AtomicU8::new(ThreadState::Preemptable as u8))
    }

    /// The current state.
    #[inline]
    pub fn load(&self) -> ThreadState {
        // Acquire: pairs with the AcqRel CAS in `transition`, so a thread that sees
        // `OtherUnpreemptable` also sees what the peer wrote before handing over.
        decode(self.0.load(Ordering::Acquire))
    }

    /// CAS `from` → `to` if the table allows it for `actor`.
    #[inline]
    pub fn transition(
        &self,
        from: ThreadState,
        to: ThreadState,
        actor: Actor,
    ) -> Result<(), TransitionError> {
        if !is_legal(from, to, actor) {
            return Err(TransitionError::Illegal { from, to, actor });
        }
        // AcqRel: the transitions are the handshake between a thread, its peers and
        // the scheduler (e.g. a lock handed over under OtherUnpreemptable); each side
        // must see what the other wrote before its CAS.
        self.0
            .compare_exchange(from as u8, to as u8, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| ())
            .map_err(|actual| TransitionError::Conflict(decode(actual)))
    }
}

#[inline]
fn decode(v: u8) -> ThreadState {
    // Only `transition` stores into the word, and only valid discriminants.
    ThreadState::from_u8(v).unwrap_or(ThreadState::Preemptable)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use Actor::*;
    use ThreadState::*;

    const ALL: [ThreadState; 4] = [
        Preemptable,
        Preempted,
        SelfUnpreemptable,
        OtherUnpreemptable,
    ];

    #[test]
    fn user_code_never_leaves_preempted() {
        for to in ALL {
            assert!(!is_legal(Preempted, to, Thread));
            assert!(!is_legal(Preempted, to, Peer));
        }
    }

    #[test]
    fn only_kernel_preempts() {
        for from in ALL {
            assert!(!is_legal(from, Preempted, Thread));
            assert!(!is_legal(from, Preempted, Peer));
        }
    }

    #[test]
    fn every_pair_against_the_table() {
        let mut legal = 0;
        for from in ALL {
            for to in ALL {
                for actor in [Thread, Peer, Kernel] {
                    let w = StateWord::new();
                    // Drive the word to `from` by legal kernel/thread steps.
                    match from {
                        Preemptable => {}
                        Preempted => w.transition(Preemptable, Preempted, Kernel).unwrap(),
                        SelfUnpreemptable => w
                            .transition(Preemptable, SelfUnpreemptable, Thread)
                            .unwrap(),
                        OtherUnpreemptable => {
                            w.transition(Preemptable, OtherUnpreemptable, Peer).unwrap()
                        }
                    }
                    let r = w.transition(from, to, actor);
                    if is_legal(from, to, actor) {
                        legal += 1;
                        assert_eq!(r, Ok(()));
                        assert_eq!(w.load(), to);
                    } else {
                        assert!(matches!(r, Err(TransitionError::Illegal { .. })));
                        assert_eq!(w.load(), from);
                    }
                }
            }
        }
        assert_eq!(legal, 11);
    }

    #[test]
    fn conflict_reports_actual_state() {
        let w = StateWord::new();
        w.transition(Preemptable, Preempted, Kernel).unwrap();
        assert_eq!(
            w.transition(Preemptable, SelfUnpreemptable, Thread),
            Err(TransitionError::Conflict(Preempted))
        );
    }
}
