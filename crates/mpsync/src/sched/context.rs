//! The per-thread context block and the registry that hands one to each thread.
//!
//! Blocks are never freed: a thread that exits returns its block to the registry
//! and a later thread reuses it (as hazard-pointer records are reused). So a
//! `&'static ContextBlock` held by a peer — in a lock's queue node, say — always
//! points to valid memory, and memory stays bounded by the largest number of
//! threads alive at once.

use std::fmt;
use std::sync::atomic::compiler_fence;

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering, spin_loop};
use crate::util::clock::now_ns;

use super::state::{Actor, StateWord, ThreadState, TransitionError};

/// No processor known.
pub const NO_PROCESSOR: u32 = u32::MAX;

/// The pause bit of the owner's request word, beside the depth
/// ([`ContextBlock::pause_no_preempt`]).
const PAUSED: u32 = 1 << 31;

/// What the preemption signal's handler decided
/// ([`ContextBlock::on_preemption_signal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalVerdict {
    /// The thread is not `Preempted` (a stray or late signal): it goes on.
    NotPreempted,
    /// The preemption stands: the thread stops until the scheduler resumes it.
    Stop,
    /// A no-preempt request began after the scheduler decided: the handler
    /// moved the thread back to `Preemptable` (and warned it); it goes on.
    Undone,
}

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
/// - `owner` — written by the owning thread (its no-preempt request word at
///   every section, its attachment, its yield and the time its handler stopped);
/// - `sched` — written by the emulated scheduler at its decisions.
///
/// # Protocol of the emulated backend's fields
///
/// The state word has its own table in [`super::state`]; the owner's no-preempt
/// request is not in it (issue 13 §3): it is `depth`, the owner's own word, and
/// the state word keeps what two parties arbitrate by CAS — a releaser's
/// hand-off (`OtherUnpreemptable`) against the scheduler's `Preempted`. The
/// other fields the emulated backend ([`super::emulated`]) uses:
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
/// | `depth`              | owner | owner only: plain stores, each followed (request, resume) or preceded and followed (outermost release, pause) by a compiler fence | owner; its handler (exact: same thread, program order); the scheduler, before it preempts (a hint) | the no-preempt nesting depth, and a pause bit | Relaxed: the owner's own word; the scheduler's stale read is corrected by the handler ([`on_preemption_signal`](ContextBlock::on_preemption_signal)) |
/// | `undoable`           | sched | scheduler: `true` before a preemption decided on the `depth` hint, `false` before a forced one | owner's handler | "undo me if a request began after my read" | Relaxed: published by the AcqRel CAS to `Preempted` that follows it |
/// | `stops`              | owner | owner's handler, when it stops the thread    | anyone ([`times_stopped`](ContextBlock::times_stopped)) | times the preemption signal stopped the thread | Relaxed: a statistic |
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
    /// The no-preempt request: nesting depth, plus the pause bit; written
    /// only by the owner (see the field table of [`ContextBlock`]).
    pub(crate) depth: AtomicU32,
    /// Times the preemption signal's handler stopped the thread.
    pub(crate) stops: AtomicU64,
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
    /// The last preemption was decided on the request word's hint: the
    /// handler undoes it if a request began meanwhile (not a forced one).
    pub(crate) undoable: AtomicBool,
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
                stops: AtomicU64::new(0),
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
                undoable: AtomicBool::new(false),
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

    /// Current no-preempt nesting depth (a pause does not change it).
    #[inline]
    pub fn depth(&self) -> u32 {
        // Relaxed: written only by the owning thread, read by it (or for Debug).
        self.owner.depth.load(Ordering::Relaxed) & !PAUSED
    }

    /// Times the emulated scheduler's preemption signal stopped this thread
    /// (its handler waited to be resumed), over the block's life.
    pub fn times_stopped(&self) -> u64 {
        // Relaxed: a statistic, written by the owner's handler.
        self.owner.stops.load(Ordering::Relaxed)
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
    /// The request is the owner's own word (issue 13 §3): one plain store of
    /// the depth and a compiler fence, no atomic read-modify-write and no load
    /// of the shared state word, on every backend. Natively nothing else reads
    /// it (the kernel's rseq time-slice extension is detected, not asked: see
    /// [`super::native::slice_extension`]). The emulated scheduler reads it from its
    /// own thread as a hint before it preempts; its preemption signal runs on
    /// this thread, where the handler re-reads the word in program order (the
    /// fence keeps the compiler from moving the section's first access above
    /// the store) and undoes a preemption decided just before the request
    /// ([`on_preemption_signal`](Self::on_preemption_signal)). The state word
    /// stays what peers and the scheduler arbitrate by CAS: `Preemptable`,
    /// `OtherUnpreemptable` (a releaser's hand-off) or `Preempted`.
    ///
    /// Use [`no_preempt_requested`](Self::no_preempt_requested) to ask whether
    /// a request is in force.
    #[inline]
    pub fn request_no_preempt(&self) {
        // Relaxed: the owner's own word (see `OwnerLine::depth`).
        let w = self.owner.depth.load(Ordering::Relaxed);
        self.owner.depth.store(w + 1, Ordering::Relaxed);
        // In force before the section's first instruction, for the handler
        // that interrupts this thread (same thread: program order suffices).
        compiler_fence(Ordering::SeqCst);
    }

    /// Whether the owning thread is in a no-preempt section (paused or not).
    #[inline]
    pub fn no_preempt_requested(&self) -> bool {
        self.depth() > 0
    }

    /// Whether a no-preempt request is in force: inside a section and not
    /// paused ([`pause_no_preempt`](Self::pause_no_preempt)). Exact on the
    /// owning thread (its signal handler included); from another thread — the
    /// emulated scheduler deciding whether to preempt — a hint that may be
    /// stale, which the owner's handler corrects.
    #[inline]
    pub fn no_preempt_in_force(&self) -> bool {
        // Relaxed: the owner's own word; another thread reads it as a hint only.
        let w = self.owner.depth.load(Ordering::Relaxed);
        w != 0 && w & PAUSED == 0
    }

    /// Leaves a no-preempt section (owner only). The outermost release ends the
    /// request (and a pause) with one store and a compiler fence, then only
    /// loads the state word: a peer's hand-off (`OtherUnpreemptable`) goes back
    /// to `Preemptable` by one CAS. Returns `true` if the scheduler had warned
    /// the thread, which must then yield ([`super::release_no_preempt`] does).
    #[inline]
    #[must_use = "a warned thread must yield its processor"]
    pub fn release_no_preempt(&self) -> bool {
        // Relaxed: the owner's own word.
        let w = self.owner.depth.load(Ordering::Relaxed);
        let d = w & !PAUSED;
        debug_assert!(d > 0, "release_no_preempt without request_no_preempt");
        if d == 0 {
            return false;
        }
        if d > 1 {
            self.owner.depth.store(w - 1, Ordering::Relaxed);
            return false;
        }
        // The section's last access (the lock's release) stays before the end
        // of the request, as the handler on this thread sees it.
        compiler_fence(Ordering::SeqCst);
        self.owner.depth.store(0, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        // The common case inline (nobody touched our state); the rest out of
        // line, so that an unlock with its release stays small enough to inline.
        if self.peer.state.load() == ThreadState::Preemptable {
            return self.warned();
        }
        self.end_request_slow()
    }

    /// [`release_no_preempt`](Self::release_no_preempt) past the outermost
    /// release's store, where the state word is not `Preemptable`.
    #[cold]
    #[inline(never)]
    fn end_request_slow(&self) -> bool {
        loop {
            let s = self.peer.state.load();
            let r = match s {
                ThreadState::Preemptable => return self.warned(),
                ThreadState::Preempted => {
                    // A preemption whose signal has not arrived yet (the
                    // handler stops us: the request has ended), or a forced
                    // one of a handed-over thread: its resume restores the
                    // hand-off, which we then end.
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
    /// waiter whose word changes in between (found by the loom model `request_vs_handoff`):
    /// it retries whenever the word changed to another running state. A thread
    /// already `OtherUnpreemptable` (handed another lock it still holds) is running
    /// and unpreemptable, so the answer is `true` and the word is left as it is.
    ///
    /// A thread the scheduler has just marked `Preempted` may be running still
    /// (its handler undoes a preemption that raced its own request): it is
    /// skipped like a preempted one. That is only a skip — the grant is this
    /// one CAS, and a word the handler moves back to `Preemptable` afterwards
    /// is granted by nobody unless a releaser's next CAS succeeds on it.
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
    /// Only the outermost section pauses, and not a thread a peer handed a lock
    /// (`OtherUnpreemptable`): a thread that already holds another no-preempt
    /// lock stays unpreemptable. Returns whether the request was paused; the
    /// depth is unchanged. One owner-only store: the pause is a bit beside the
    /// depth. If the scheduler had warned the thread, the caller should yield
    /// (it is only waiting). Pair with
    /// [`resume_no_preempt`](Self::resume_no_preempt) before claiming the lock,
    /// unless a peer handed it over ([`make_other_unpreemptable`](Self::make_other_unpreemptable));
    /// the outermost release ends a pause too.
    #[inline]
    pub fn pause_no_preempt(&self) -> bool {
        // Relaxed: the owner's own word.
        if self.owner.depth.load(Ordering::Relaxed) != 1
            || self.state() == ThreadState::OtherUnpreemptable
        {
            return false;
        }
        compiler_fence(Ordering::SeqCst);
        self.owner.depth.store(1 | PAUSED, Ordering::Relaxed);
        true
    }

    /// Owner only: undoes [`pause_no_preempt`](Self::pause_no_preempt) without
    /// changing the depth — one owner-only store and a compiler fence. A
    /// preemption the scheduler decided while the request was paused, whose
    /// signal has not arrived yet, is undone by the handler (the request is in
    /// force when it runs); meanwhile peers may see the thread `Preempted` and
    /// skip it.
    #[inline]
    pub fn resume_no_preempt(&self) {
        // Relaxed: the owner's own word.
        let w = self.owner.depth.load(Ordering::Relaxed);
        debug_assert!(w & !PAUSED > 0, "resume_no_preempt outside a section");
        self.owner.depth.store(w & !PAUSED, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
    }

    /// The scheduler's decision (sched's kernel side; public for models):
    /// preempts the thread — `Preemptable → Preempted` by CAS, the decision a
    /// releaser's hand-off races — if, by a read of its request word from the
    /// scheduler's thread (a hint), no no-preempt request is in force. The
    /// thread's handler undoes it if a request began after that read
    /// ([`on_preemption_signal`](Self::on_preemption_signal)). Returns whether
    /// this call preempted the thread; the caller then signals it. Only one
    /// scheduler decides for a thread at a time (the emulated one, under its
    /// lock).
    pub fn preempt_unless_requested(&self) -> bool {
        if self.state() != ThreadState::Preemptable || self.no_preempt_in_force() {
            return false;
        }
        // Relaxed (both): the scheduler's own fields, published to the
        // thread's handler by the AcqRel CAS that follows.
        self.sched
            .saved_state
            .store(ThreadState::Preemptable as u32, Ordering::Relaxed);
        self.sched.undoable.store(true, Ordering::Relaxed);
        self.peer
            .state
            .transition(
                ThreadState::Preemptable,
                ThreadState::Preempted,
                Actor::Kernel,
            )
            .is_ok()
    }

    /// The emulated scheduler's preemption signal, on the owning thread (its
    /// handler calls this; a loom model calls it as the owner's own step):
    /// decides whether the scheduler's `Preempted` stands.
    ///
    /// The scheduler preempts a `Preemptable` thread only when its read of the
    /// owner's request word (a hint, from another thread) found no request in
    /// force. Here, on the owner, the word is exact: if a request began after
    /// the scheduler's read, the preemption is undone — `Preempted →
    /// Preemptable` by CAS as the kernel, the warning set so that the thread
    /// yields when its section ends. A forced preemption (the extension bound)
    /// always stands.
    #[inline]
    pub fn on_preemption_signal(&self) -> SignalVerdict {
        if self.state() != ThreadState::Preempted {
            return SignalVerdict::NotPreempted;
        }
        // Relaxed: written by the scheduler before its AcqRel CAS to
        // `Preempted`, which the Acquire load above observed.
        if !self.sched.undoable.load(Ordering::Relaxed) || !self.no_preempt_in_force() {
            return SignalVerdict::Stop;
        }
        match self.peer.state.transition(
            ThreadState::Preempted,
            ThreadState::Preemptable,
            Actor::Kernel,
        ) {
            Ok(()) => {
                // Relaxed: advisory (see the field table); the scheduler
                // clears it when the thread stops.
                self.sched.warning.store(true, Ordering::Relaxed);
                SignalVerdict::Undone
            }
            // Resumed meanwhile: running, and the request is in force.
            Err(_) => SignalVerdict::NotPreempted,
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
        // Relaxed (all seven): nobody else writes these while the block is detached;
        // the next owner gets them through the registry's `in_use` Release/Acquire.
        self.owner.depth.store(0, Ordering::Relaxed);
        self.sched.warning.store(false, Ordering::Relaxed);
        self.owner.yielded.store(false, Ordering::Relaxed);
        self.sched
            .saved_state
            .store(ThreadState::Preemptable as u32, Ordering::Relaxed);
        self.sched.preempt_decided_ns.store(0, Ordering::Relaxed);
        self.sched.undoable.store(false, Ordering::Relaxed);
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
