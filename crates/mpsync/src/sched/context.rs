//! The per-thread context block and the registry that hands one to each thread.
//!
//! Blocks are never freed: a thread that exits returns its block to the registry
//! and a later thread reuses it (as hazard-pointer records are reused). So a
//! `&'static ContextBlock` held by a peer — in a lock's queue node, say — always
//! points to valid memory, and memory stays bounded by the largest number of
//! threads alive at once.

use std::fmt;

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering, spin_loop};
use crate::util::clock::now_ns;

use super::state::{Actor, StateWord, ThreadState, TransitionError};

/// No processor known.
pub const NO_PROCESSOR: u32 = u32::MAX;

/// What the scheduler and one thread tell each other (paper 001 §3).
///
/// Only the owning thread calls [`request_no_preempt`](Self::request_no_preempt)
/// and [`release_no_preempt`](Self::release_no_preempt); peers use
/// [`make_other_unpreemptable`](Self::make_other_unpreemptable) and
/// [`is_preempted`](super::is_preempted).
///
/// # Layout: three cache lines
///
/// Fields sit on the line of the party that touches them on its hot path, so
/// that one party's writes do not evict what another keeps reading:
/// - `peer` — what peers read: the state word (every party CASes it: it *is* the
///   handshake), the heartbeat waiters publish and peers judge, and the identity
///   fields written once per registration;
/// - `owner` — written by the owning thread (its no-preempt depth at every
///   section, its attachment, its yield and the time its handler stopped);
/// - `sched` — written by the emulated scheduler at its decisions.
///
/// # Protocol of the emulated backend's fields
///
/// The state word has its own table in [`super::state`]. The other fields the
/// emulated backend ([`super::emulated`]) uses:
///
/// | field                | line  | written by                                   | read by                          | meaning                                           | ordering |
/// |----------------------|-------|----------------------------------------------|----------------------------------|---------------------------------------------------|----------|
/// | `warning`            | sched | scheduler: set when it honours a no-preempt request instead of preempting; cleared when the thread stops (preempted, forced, yielded); owner, once detached (detach, the fork handler) | owner, at its outermost release ([`warned`](Self::warned)) | "I wanted your processor: yield when you leave your section" | Relaxed: advisory; the yield it prompts synchronizes through the state word and the kick |
/// | `saved_state`        | sched | scheduler, just before its CAS to `Preempted`; reset at the resume; the fork handler, in the child (no scheduler there) | scheduler, at the resume; the fork handler | the state to restore (the unpreemptable state of a forced preemption) | Relaxed: the scheduler's own (under its lock); published to others by the AcqRel CAS that follows it |
/// | `preempt_decided_ns` | sched | scheduler, when it decides to preempt        | scheduler, at the resume         | start of the preemption-latency sample            | Relaxed: the scheduler's own |
/// | `resume`             | sched | scheduler, bumped after each CAS out of `Preempted` | owner's handler or yield (`wait_resumed`), as a futex word | "you were resumed": wakes a handler sleeping under [`HandlerWait::Block`](super::emulated::HandlerWait::Block) | Release bump, Acquire load: the waiter re-reads the state after the value it saw |
/// | `yielded`            | owner | owner, `true` in its yield after its own CAS to `Preempted`; scheduler, `false` when it consumes the yield | scheduler, at every pass | "I gave my processor away myself" | Release store, Acquire load/swap: the scheduler then sees the `Preempted` state and `preempt_stopped_ns` written before it |
/// | `preempt_stopped_ns` | owner | owner: its handler, or its yield, when it stops | scheduler, at the resume | end of the preemption-latency sample | Relaxed: statistics; a stale value only drops the sample (`stopped < decided`) |
/// | `emu`                | owner | owner: attach (a strong `Arc<Shared>`), detach (null); the fork handler, in the child (null) | owner only (`is_attached`, its handler, its yield) | the scheduler the thread is attached to | Release store / Acquire load: the same thread, so program order would do; they also publish the `Shared` if another thread ever reads it |
/// | `vproc`              | owner | owner: attach, detach, fork handler          | `Debug`                          | the virtual processor attached to                 | Relaxed: informational |
///
/// When the block changes owner, `reset_for_new_owner`
/// (sched's kernel side, detached blocks only) clears `warning`, `yielded`,
/// `saved_state` and the two timestamps.
pub struct ContextBlock {
    /// What peers read.
    pub(crate) peer: CachePadded<PeerLine>,
    /// What the owning thread writes.
    pub(crate) owner: CachePadded<OwnerLine>,
    /// What the emulated scheduler writes.
    pub(crate) sched: CachePadded<SchedLine>,
}

/// [`ContextBlock`]'s line of what peers read.
pub(crate) struct PeerLine {
    /// The state word (see [`super::state`]).
    pub(crate) state: StateWord,
    /// Last time (ns, [`now_ns`]) the thread said "I am running" while waiting.
    pub(crate) heartbeat: AtomicU64,
    /// Processor the thread runs or is scheduled on, or [`NO_PROCESSOR`].
    pub(crate) processor: AtomicU32,
    /// Registration id, unique over the process lifetime (blocks are reused, ids not).
    pub(crate) id: AtomicU64,
    /// Whether a live thread owns this block.
    pub(crate) in_use: AtomicBool,
    /// Kernel thread id of the owner (for signals and affinity), 0 if none.
    pub(crate) tid: AtomicU32,
    /// `pthread_t` of the owner, for `pthread_kill` (0 if none).
    pub(crate) pthread: AtomicU64,
    /// The owner's wake-up word ([`super::waiter`]): peers bump it and wake the
    /// owner parked on it. Lives here, in a block that is never freed, so a waker
    /// never touches memory its wakee may have freed.
    pub(crate) wake: AtomicU32,
    /// The owner's slot in the eBPF program's mapped array (`super::ebpf`), null
    /// when the kernel does not answer for it. A `std` atomic, not the `sync`
    /// shim's: it points into memory the kernel writes, outside any loom model
    /// (the eBPF half is compiled out under loom and Miri).
    #[cfg_attr(any(loom, miri, not(target_os = "linux")), allow(dead_code))]
    pub(crate) kslot: std::sync::atomic::AtomicPtr<()>,
    /// The owner's tid as the kernel sees it (for the eBPF program's map).
    #[cfg_attr(any(loom, miri, not(target_os = "linux")), allow(dead_code))]
    pub(crate) ktid: std::sync::atomic::AtomicU32,
}

/// [`ContextBlock`]'s line of what the owning thread writes.
pub(crate) struct OwnerLine {
    /// Nesting depth of no-preempt sections; written only by the owner.
    pub(crate) depth: AtomicU32,
    /// Emulated backend: the scheduler this thread is attached to (null if none).
    /// Owned by `super::emulated`.
    pub(crate) emu: AtomicPtr<()>,
    /// Emulated backend: virtual processor of the attachment.
    pub(crate) vproc: AtomicU32,
    /// Emulated backend: the thread gave its processor away itself (`yield_now`).
    pub(crate) yielded: AtomicBool,
    /// Emulated backend: when the preemption handler (or a yield) stopped (ns).
    pub(crate) preempt_stopped_ns: AtomicU64,
}

/// [`ContextBlock`]'s line of what the emulated scheduler writes.
pub(crate) struct SchedLine {
    /// Set by the scheduler when it wanted to preempt but honoured a no-preempt
    /// request; cleared by the scheduler when the thread stops running.
    pub(crate) warning: AtomicBool,
    /// State to restore on resume after a forced preemption.
    pub(crate) saved_state: AtomicU32,
    /// When the scheduler decided to preempt (ns), for latency.
    pub(crate) preempt_decided_ns: AtomicU64,
    /// Futex word bumped at every resume (blocking handler wait).
    pub(crate) resume: AtomicU32,
}

impl fmt::Debug for ContextBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContextBlock")
            .field("id", &self.peer.id.load(Ordering::Relaxed))
            .field("state", &self.peer.state.load())
            .field("warning", &self.sched.warning.load(Ordering::Relaxed))
            .field("depth", &self.owner.depth.load(Ordering::Relaxed))
            .field("processor", &self.peer.processor.load(Ordering::Relaxed))
            .field("vproc", &self.owner.vproc.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Default for ContextBlock {
    fn default() -> Self {
        Self::new()
    }
}

impl ContextBlock {
    /// A block in `Preemptable`, owned by nobody. Threads get theirs from
    /// [`super::current`]; a standalone block is for tests and models.
    pub fn new() -> Self {
        Self {
            peer: CachePadded::new(PeerLine {
                state: StateWord::new(),
                heartbeat: AtomicU64::new(0),
                processor: AtomicU32::new(NO_PROCESSOR),
                id: AtomicU64::new(0),
                in_use: AtomicBool::new(false),
                tid: AtomicU32::new(0),
                pthread: AtomicU64::new(0),
                wake: AtomicU32::new(0),
                kslot: std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()),
                ktid: std::sync::atomic::AtomicU32::new(0),
            }),
            owner: CachePadded::new(OwnerLine {
                depth: AtomicU32::new(0),
                emu: AtomicPtr::new(std::ptr::null_mut()),
                vproc: AtomicU32::new(NO_PROCESSOR),
                yielded: AtomicBool::new(false),
                preempt_stopped_ns: AtomicU64::new(0),
            }),
            sched: CachePadded::new(SchedLine {
                warning: AtomicBool::new(false),
                saved_state: AtomicU32::new(ThreadState::Preemptable as u32),
                preempt_decided_ns: AtomicU64::new(0),
                resume: AtomicU32::new(0),
            }),
        }
    }

    /// The current state.
    #[inline]
    pub fn state(&self) -> ThreadState {
        self.peer.state.load()
    }

    /// Attempts a state transition (see the table in [`super::state`]).
    #[inline]
    pub fn transition(
        &self,
        from: ThreadState,
        to: ThreadState,
        actor: Actor,
    ) -> Result<(), TransitionError> {
        self.peer.state.transition(from, to, actor)
    }

    /// Whether the scheduler wanted to preempt this thread and was asked not to.
    #[inline]
    pub fn warned(&self) -> bool {
        // Relaxed: an advisory flag; the yield it triggers re-synchronizes.
        self.sched.warning.load(Ordering::Relaxed)
    }

    /// Current no-preempt nesting depth.
    #[inline]
    pub fn depth(&self) -> u32 {
        // Relaxed: written only by the owning thread, read by it (or for Debug).
        self.owner.depth.load(Ordering::Relaxed)
    }

    /// Registration id of the owning thread (0 for a standalone block).
    pub fn id(&self) -> u64 {
        self.peer.id.load(Ordering::Relaxed)
    }

    /// Processor the thread runs or is scheduled on, if known.
    pub fn processor(&self) -> Option<u32> {
        // Relaxed: informational; the partition generation orders changes.
        let p = self.peer.processor.load(Ordering::Relaxed);
        (p != NO_PROCESSOR).then_some(p)
    }

    /// Publishes "I am running now" (He, Scherer & Scott's time-published
    /// heartbeat). Waiting threads call this in their spin loops.
    #[inline]
    pub fn publish_heartbeat(&self) {
        // Relaxed: a timestamp read by peers only as a hint (stale = presumed preempted).
        self.peer.heartbeat.store(now_ns(), Ordering::Relaxed);
    }

    /// The last published heartbeat (ns), 0 if never.
    #[inline]
    pub fn heartbeat_ns(&self) -> u64 {
        // Relaxed: see `publish_heartbeat`.
        self.peer.heartbeat.load(Ordering::Relaxed)
    }

    /// Enters a no-preempt section (owner only). Nested sections only count depth.
    ///
    /// On a thread attached to the emulated scheduler (and under loom, whose
    /// models play the scheduler), the outermost request also moves the state
    /// word to `SelfUnpreemptable`, the word the scheduler reads before it
    /// preempts; it waits while the scheduler has the thread `Preempted` (the
    /// preemption signal is on its way, or the thread is in sched's own yield).
    /// Natively no scheduler reads the word (Linux has no such interface; the
    /// rseq time-slice extension, where present, is asked by
    /// [`super::request_no_preempt`]), so the request is the depth count alone:
    /// two plain owner-only stores, no atomic read-modify-write (issue 13 §3).
    /// Use [`no_preempt_requested`](Self::no_preempt_requested) to ask whether
    /// a request is in force; `state()` says only what a scheduler was told.
    #[inline]
    pub fn request_no_preempt(&self) {
        let d = self.depth();
        // Relaxed: owner-only counter.
        self.owner.depth.store(d + 1, Ordering::Relaxed);
        if d == 0 && self.state_is_read_by_a_scheduler() {
            self.become_self_unpreemptable();
        }
    }

    /// Whether the owning thread is in a no-preempt section.
    #[inline]
    pub fn no_preempt_requested(&self) -> bool {
        self.depth() > 0
    }

    /// Whether a scheduler decides by this thread's state word: it is attached
    /// to the emulated scheduler (always, under loom). Owner only (only the
    /// owner attaches and detaches itself).
    #[inline]
    fn state_is_read_by_a_scheduler(&self) -> bool {
        // Relaxed: only the owning thread changes its own attachment.
        cfg!(loom) || !self.owner.emu.load(Ordering::Relaxed).is_null()
    }

    /// Leaves a no-preempt section (owner only). At the outermost level the state
    /// goes back to `Preemptable`; returns `true` if the scheduler had warned the
    /// thread, which must then yield ([`super::release_no_preempt`] does).
    #[inline]
    #[must_use = "a warned thread must yield its processor"]
    pub fn release_no_preempt(&self) -> bool {
        let d = self.depth();
        debug_assert!(d > 0, "release_no_preempt without request_no_preempt");
        if d == 0 {
            return false;
        }
        // Relaxed: owner-only counter.
        self.owner.depth.store(d - 1, Ordering::Relaxed);
        if d > 1 {
            return false;
        }
        loop {
            let s = self.peer.state.load();
            let r = match s {
                ThreadState::Preemptable => return self.warned(),
                ThreadState::Preempted => {
                    self.wait_while_preempted();
                    continue;
                }
                _ => self
                    .peer
                    .state
                    .transition(s, ThreadState::Preemptable, Actor::Thread),
            };
            if r.is_ok() {
                return self.warned();
            }
        }
    }

    /// A peer makes this (waiting) thread `OtherUnpreemptable`, e.g. to hand it a
    /// lock (paper 003 Figure 1). Returns `false` only if the thread is preempted.
    ///
    /// Figure 1 tries `SelfUnpreemptable` then `Preemptable`, which covers a waiter
    /// that drops its own request while the releaser looks; this loop also covers a
    /// waiter that re-requests in between (found by the loom model `request_vs_handoff`):
    /// it retries whenever the word changed to another running state. A thread
    /// already `OtherUnpreemptable` (handed another lock it still holds) is running
    /// and unpreemptable, so the answer is `true` and the word is left as it is.
    #[inline]
    pub fn make_other_unpreemptable(&self) -> bool {
        let mut s = self.peer.state.load();
        loop {
            match s {
                ThreadState::Preempted => return false,
                ThreadState::OtherUnpreemptable => return true,
                ThreadState::SelfUnpreemptable | ThreadState::Preemptable => {
                    match self.peer.state.transition(
                        s,
                        ThreadState::OtherUnpreemptable,
                        Actor::Peer,
                    ) {
                        Ok(()) => return true,
                        Err(TransitionError::Conflict(now)) => s = now,
                        Err(TransitionError::Illegal { .. }) => return false,
                    }
                }
            }
        }
    }

    /// Owner only, inside a no-preempt section: lets the scheduler preempt the
    /// thread while it *waits* for a lock (Smart-Q's `compare_and_swap(&cb->state,
    /// unpreemptable_self, preemptable)`, paper 003 Figure 1), so a waiting thread
    /// does not hold its processor against the other applications.
    ///
    /// Only the outermost section pauses: a thread that already holds another
    /// no-preempt lock stays unpreemptable. Returns whether the state was
    /// dropped; the depth is unchanged. If the scheduler had warned the thread,
    /// the caller should yield (it is only waiting). Pair with
    /// [`resume_no_preempt`](Self::resume_no_preempt) before claiming the lock,
    /// unless a peer handed it over ([`make_other_unpreemptable`](Self::make_other_unpreemptable)).
    /// Natively (no scheduler reads the state word) it returns `false` without
    /// touching the word.
    #[inline]
    pub fn pause_no_preempt(&self) -> bool {
        // Natively nothing reads the state word (the request is the depth
        // alone, see `request_no_preempt`), so there is nothing to drop: skip
        // the CAS, which would fail anyway at the cost of an atomic RMW.
        self.depth() == 1
            && self.state_is_read_by_a_scheduler()
            && self
                .peer
                .state
                .transition(
                    ThreadState::SelfUnpreemptable,
                    ThreadState::Preemptable,
                    Actor::Thread,
                )
                .is_ok()
    }

    /// Owner only: undoes [`pause_no_preempt`](Self::pause_no_preempt) — back to
    /// `SelfUnpreemptable` without changing the depth. Waits while `Preempted`; a
    /// thread a peer already made unpreemptable stays as it is.
    #[inline]
    pub fn resume_no_preempt(&self) {
        debug_assert!(self.depth() > 0, "resume_no_preempt outside a section");
        self.become_self_unpreemptable();
    }

    /// `Preemptable` → `SelfUnpreemptable`, waiting while `Preempted`.
    #[inline]
    fn become_self_unpreemptable(&self) {
        loop {
            match self.peer.state.transition(
                ThreadState::Preemptable,
                ThreadState::SelfUnpreemptable,
                Actor::Thread,
            ) {
                Ok(()) => return,
                // A peer already made us unpreemptable (Smart-Q handoff): same effect.
                Err(TransitionError::Conflict(s)) if s.is_unpreemptable() => return,
                Err(_) => self.wait_while_preempted(),
            }
        }
    }

    /// Sched's own kernel side, when the block changes owner (the registry, as a
    /// thread exits and as the next one takes the block): forgets every request of
    /// the previous owner — depth 0, `Preemptable`, no warning, no yield or
    /// preemption in progress — so that, say, a thread that `mem::forget`s a
    /// no-preempt guard does not leave the next owner unpreemptable forever.
    ///
    /// Only when no scheduler holds the block (detached): nobody else writes
    /// `depth`, `warning`, `yielded` or `saved_state` then. Peers may still hold
    /// `&'static` references (in a lock's queue node) and CAS the state word; the
    /// word is therefore changed only by CAS along legal transitions
    /// (`Self`/`OtherUnpreemptable → Preemptable` as the thread; `Preempted →
    /// Preemptable` as the kernel, since no scheduler will resume a detached
    /// block). A stale peer that makes the block `OtherUnpreemptable` afterwards
    /// does what it could do to any running thread: the state lasts until the
    /// owner's next outermost release.
    #[cfg_attr(loom, allow(dead_code))] // the loom registry never reuses blocks
    pub(crate) fn reset_for_new_owner(&self) {
        debug_assert!(
            self.owner.emu.load(Ordering::Relaxed).is_null(),
            "reset of an attached block"
        );
        // Relaxed (all six): nobody else writes these while the block is detached;
        // the next owner gets them through the registry's `in_use` Release/Acquire.
        self.owner.depth.store(0, Ordering::Relaxed);
        self.sched.warning.store(false, Ordering::Relaxed);
        self.owner.yielded.store(false, Ordering::Relaxed);
        self.sched
            .saved_state
            .store(ThreadState::Preemptable as u32, Ordering::Relaxed);
        self.sched.preempt_decided_ns.store(0, Ordering::Relaxed);
        self.owner.preempt_stopped_ns.store(0, Ordering::Relaxed);
        loop {
            let s = self.peer.state.load();
            let actor = match s {
                ThreadState::Preemptable => return,
                ThreadState::Preempted => Actor::Kernel,
                _ => Actor::Thread,
            };
            // Err(Conflict): a peer changed the word meanwhile; look again.
            let _ = self
                .peer
                .state
                .transition(s, ThreadState::Preemptable, actor);
        }
    }

    /// Spins until the scheduler resumes this thread.
    #[inline]
    pub(crate) fn wait_while_preempted(&self) {
        while self.peer.state.load() == ThreadState::Preempted {
            spin_loop();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Convention: shared hot words live on their own cache line.
    #[test]
    fn owner_peer_and_scheduler_fields_sit_on_separate_cache_lines() {
        use std::mem::offset_of;
        assert!(align_of::<ContextBlock>() >= 64);
        let lines = [
            offset_of!(ContextBlock, peer),
            offset_of!(ContextBlock, owner),
            offset_of!(ContextBlock, sched),
        ];
        for (i, a) in lines.iter().enumerate() {
            for b in &lines[i + 1..] {
                assert!(a.abs_diff(*b) >= 64, "{lines:?}");
            }
        }
    }

    #[test]
    fn reset_forgets_the_previous_owner() {
        let cb = ContextBlock::new();
        cb.request_no_preempt();
        cb.request_no_preempt();
        cb.sched.warning.store(true, Ordering::Relaxed);
        cb.owner.yielded.store(true, Ordering::Relaxed);
        cb.reset_for_new_owner();
        assert_eq!(
            (cb.state(), cb.depth(), cb.warned()),
            (ThreadState::Preemptable, 0, false)
        );
        assert!(!cb.owner.yielded.load(Ordering::Relaxed));
        // A peer's handoff, or a kernel preemption nobody will resume, is undone too.
        assert!(cb.make_other_unpreemptable());
        cb.reset_for_new_owner();
        assert_eq!(cb.state(), ThreadState::Preemptable);
        cb.transition(
            ThreadState::Preemptable,
            ThreadState::Preempted,
            Actor::Kernel,
        )
        .unwrap();
        cb.reset_for_new_owner();
        assert_eq!(cb.state(), ThreadState::Preemptable);
    }
}
