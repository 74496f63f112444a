//! Queue locks that skip preempted waiters: Smart-Q and Queued-Handshaking
//! (Wisniewski, Kontothanassis & Scott, IPPS 1994 §3, papers/003_…) and MCS-TP
//! (He, Scherer & Scott, HiPC 2005 — "time-published" queue locks).
//!
//! All three are the MCS list lock ([`super::Queued`]) with one change at the
//! hand-over: before passing the lock to the next waiter, the releaser checks
//! that the waiter is running. If it is not, the releaser removes it from the
//! queue (its verdict becomes *failure*; it re-enqueues when it runs again) and
//! looks at the one behind. They differ in how "running" is decided — the
//! [`SkipPolicy`]:
//!
//! | lock                   | how the releaser decides                                         | CS no-preempt |
//! |------------------------|------------------------------------------------------------------|---------------|
//! | [`SmartQ`]             | CAS the waiter's state word to `OtherUnpreemptable` (003 Fig. 1); natively also a stale heartbeat | yes |
//! | [`QueuedHandshaking`]  | offers the lock, waits briefly for an acknowledgement, rescinds by swap | yes |
//! | [`McsTp`]              | the waiter's published heartbeat is fresh (no kernel help)       | no            |
//!
//! The shared skip loop follows 003 Figure 1 with one correction: Figure 1 marks
//! a skipped waiter *failure* before it has finished reading that waiter's `next`
//! link (when the link is still nil it reads it again later), but a failed waiter
//! immediately re-enqueues the same node and resets `next` — the releaser could
//! then follow the node's *new* position. Here a skipped node is marked only after
//! its successor is known or the queue was emptied behind it, and only then may
//! its owner reuse it.
//!
//! Waiters let the scheduler preempt them while they wait
//! ([`ContextBlock::pause_no_preempt`]) — that is the point: an unpreemptable
//! waiter would hold its processor against the other applications. Skipping
//! gives up FIFO order for preempted waiters, as the papers note.
//!
//! Uses `sched`: `request/release_no_preempt`, `pause/resume_no_preempt`,
//! `make_other_unpreemptable`, `is_preempted`, `heartbeat`, `heartbeat_stale`,
//! `yield_now`. Queue nodes come from a per-thread cache; the guard carries one.
//!
//! ```
//! use mpsync::{Mutex, lock::{SmartQ, QueuedHandshaking, McsTp}};
//! let v: Mutex<SmartQ, Vec<u32>> = Mutex::new(Vec::new());
//! v.lock().push(1);
//! let h: Mutex<QueuedHandshaking, u32> = Mutex::new(0);
//! let t: Mutex<McsTp, u32> = Mutex::new(0);
//! {
//!     let _outer = v.lock(); // nesting keeps the thread unpreemptable
//!     *h.lock() += 1;
//!     *t.lock() += 1;
//! }
//! assert_eq!(*h.lock() + *t.lock(), 2);
//! ```

use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use super::np::NpToken;
use crate::sched::{self, ContextBlock, stall};
use crate::sync::{AtomicPtr, AtomicU32, AtomicU64, Ordering, spin_loop};
use crate::util::clock::{Patience, now_ns};

const WAITING: u32 = 0;
const SUCCESS: u32 = 1;
const FAILURE: u32 = 2;

const IDLE: u32 = 0;
const OFFERED: u32 = 1;
const SEEN: u32 = 2;
const RESCINDED: u32 = 3;

/// A queue node: one per acquisition attempt in progress.
#[derive(Debug)]
pub struct SkipNode {
    /// The successor, written by it.
    next: AtomicPtr<SkipNode>,
    /// WAITING until the releaser decides: SUCCESS (lock handed over) or FAILURE
    /// (skipped: removed from the queue, try again).
    verdict: AtomicU32,
    /// Queued-Handshaking's notification word (IDLE/OFFERED/SEEN/RESCINDED).
    offer: AtomicU32,
    /// The waiting thread's context block.
    owner: AtomicPtr<ContextBlock>,
}

impl SkipNode {
    fn new() -> Self {
        Self {
            next: AtomicPtr::new(ptr::null_mut()),
            verdict: AtomicU32::new(WAITING),
            offer: AtomicU32::new(IDLE),
            owner: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// The waiting thread's block.
    fn owner(&self) -> &'static ContextBlock {
        // Relaxed: written before the node was published by the AcqRel tail swap,
        // which the reader's Acquire load of `next` follows.
        let p = self.owner.load(Ordering::Relaxed);
        // SAFETY: set to a `&'static ContextBlock` (blocks are never freed) before
        // the node is enqueued.
        unsafe { &*p }
    }
}

super::node_cache!(SkipNode, SkipNode::new());

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::SmartQPolicy {}
    impl Sealed for super::HandshakePolicy {}
    impl Sealed for super::TpPolicy {}
}

/// How a skipping queue lock decides whether a waiter may be handed the lock.
/// Sealed: implemented by [`SmartQPolicy`], [`HandshakePolicy`], [`TpPolicy`].
pub trait SkipPolicy: sealed::Sealed + 'static {
    /// The lock's name in the papers.
    const NAME: &'static str;
    /// Whether the critical section is no-preempt.
    const NO_PREEMPT: bool;

    /// Releaser side: hand the lock to `cand` (`true`), or skip it (`false`).
    /// `patience_ns` bounds any wait.
    fn offer(cand: &SkipNode, patience_ns: u64) -> bool;

    /// Waiter side: wait on `me` until the verdict is in; returns it.
    fn wait(me: &SkipNode, cb: &ContextBlock, lock: &SkipQueue<Self>) -> u32
    where
        Self: Sized;
}

/// The MCS queue lock with preempted-waiter skipping, generic over the policy.
/// Use the aliases [`SmartQ`], [`QueuedHandshaking`], [`McsTp`].
pub struct SkipQueue<P> {
    tail: AtomicPtr<SkipNode>,
    /// Acquisitions so far, bumped by each new holder (a plain increment: only the
    /// holder writes it). TP waiters that see it unchanged for longer than the
    /// heartbeat threshold presume the holder preempted — the clock is read by
    /// waiters only, never on the holder's path.
    acquisitions: AtomicU64,
    /// Waiters skipped so far (diagnostic).
    skipped: AtomicU64,
    patience_ns: u64,
    _policy: PhantomData<fn() -> P>,
}

impl<P> std::fmt::Debug for SkipQueue<P>
where
    P: SkipPolicy,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(P::NAME)
            // Relaxed: diagnostic snapshots.
            .field("locked", &!self.tail.load(Ordering::Relaxed).is_null())
            .field("skipped", &self.skipped.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Guard state of [`SkipQueue`]: the acquisition's node and, for the no-preempt
/// policies, the no-preempt request. Not `Send`.
#[derive(Debug)]
pub struct SkipGuard {
    node: NonNull<SkipNode>,
    token: Option<NpToken>,
    _not_send: PhantomData<*mut ()>,
}

/// Default bound on a releaser's wait for one waiter's handshake, and the hold
/// time after which TP waiters presume the holder preempted.
pub const SKIP_DEFAULT_PATIENCE_NS: u64 = 20_000;

impl<P: SkipPolicy> SkipQueue<P> {
    /// An unlocked lock.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            tail: AtomicPtr::new(ptr::null_mut()),
            acquisitions: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            patience_ns: SKIP_DEFAULT_PATIENCE_NS,
            _policy: PhantomData,
        }
    }

    /// An unlocked lock.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            tail: AtomicPtr::new(ptr::null_mut()),
            acquisitions: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            patience_ns: SKIP_DEFAULT_PATIENCE_NS,
            _policy: PhantomData,
        }
    }

    /// Waiters removed from the queue because they looked preempted.
    pub fn skipped(&self) -> u64 {
        // Relaxed: a statistic.
        self.skipped.load(Ordering::Relaxed)
    }

    fn guard(node: NonNull<SkipNode>, token: Option<NpToken>) -> SkipGuard {
        SkipGuard {
            node,
            token,
            _not_send: PhantomData,
        }
    }

    /// Resets `me` for one attempt by `cb`.
    fn prepare(me: &SkipNode, cb: &'static ContextBlock) {
        // Relaxed: all published by the AcqRel tail swap (or the try_lock CAS).
        me.next.store(ptr::null_mut(), Ordering::Relaxed);
        me.verdict.store(WAITING, Ordering::Relaxed);
        me.offer.store(IDLE, Ordering::Relaxed);
        me.owner.store(
            cb as *const ContextBlock as *mut ContextBlock,
            Ordering::Relaxed,
        );
    }

    /// Waits until `node`'s successor has linked itself, and returns it: spins,
    /// then yields (see [`super::wait_for_link`] for what bounds the wait).
    fn wait_next(node: &SkipNode) -> NonNull<SkipNode> {
        // Acquire: pairs with the successor's Release store of the link.
        super::wait_for_link(|| NonNull::new(node.next.load(Ordering::Acquire)))
    }

    #[inline]
    fn acquired(&self) {
        if !P::NO_PREEMPT {
            // Relaxed (both): a hint for waiters (see `acquisitions`); only the
            // holder writes it, so load + store loses no increment.
            let n = self.acquisitions.load(Ordering::Relaxed);
            self.acquisitions
                .store(n.wrapping_add(1), Ordering::Relaxed);
        }
    }

    /// The acquisition count (TP waiters' hint that the lock moves).
    fn acquisitions(&self) -> u64 {
        // Relaxed: see `acquisitions`.
        self.acquisitions.load(Ordering::Relaxed)
    }
}

impl<P: SkipPolicy> Default for SkipQueue<P> {
    fn default() -> Self {
        Self::new()
    }
}

// The holder is the thread whose node became the tail of an empty queue, or whose
// verdict a releaser set to SUCCESS; a releaser sets SUCCESS on exactly one node
// and then never touches the lock again. A skipped node is marked FAILURE only
// after the releaser stops reading it, and its owner does not touch the node
// before it sees the verdict.
// SAFETY: mutual exclusion as for MCS (`Queued`), by the above; Acquire loads of
// the verdict pair with the Release SUCCESS store.
unsafe impl<P: SkipPolicy> lock_api::RawMutex for SkipQueue<P> {
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(not(loom))]
    const INIT: Self = Self::new();
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(loom)]
    const INIT: Self = panic!("under loom, use SkipQueue::new()");

    type Guard = SkipGuard;

    fn lock(&self) -> Self::Guard {
        let token = P::NO_PREEMPT.then(NpToken::request);
        let cb = sched::current();
        let node = take_node();
        // SAFETY: our node, valid until we give it back; shared fields are atomics.
        let me = unsafe { node.as_ref() };
        loop {
            Self::prepare(me, cb);
            // If we will wait, a fresh heartbeat before anyone can judge us by it
            // (a releaser sees our node only through the link below, which the
            // Release store publishes after this) — and before the swap, so the
            // clock read does not widen the window between the swap and the link
            // that a releaser may be waiting on. Not on the uncontended path: only
            // if the lock looks held. Relaxed: a hint (see below if it was wrong).
            // (Under loom, where heartbeats are not part of the model, after
            // the link: the look would only add a scheduling point.)
            let contended = !cfg!(loom) && !self.tail.load(Ordering::Relaxed).is_null();
            if contended {
                cb.publish_heartbeat();
            }
            // AcqRel: Release publishes the node's fields to the next acquirer;
            // Acquire orders us after the predecessor's enqueue.
            let pred = self.tail.swap(node.as_ptr(), Ordering::AcqRel);
            if pred.is_null() {
                break;
            }
            // The window a releaser may wait on (`wait_next`).
            stall::point(stall::QUEUE_LOCK_LINK);
            // SAFETY: the predecessor's node stays valid until its holder (or a
            // releaser skipping it) has read the link we write here.
            // Release: publishes our node to whoever reads the link.
            unsafe { (*pred).next.store(node.as_ptr(), Ordering::Release) };
            if !contended {
                // Taken between our look and our swap: publish now. A releaser
                // that judged us by an old heartbeat meanwhile skipped us, which
                // only sends us round again.
                cb.publish_heartbeat();
            }
            if P::wait(me, cb, self) == SUCCESS {
                break;
            }
            // FAILURE: skipped while we looked preempted; nobody refers to our
            // node any more. Enqueue again.
        }
        self.acquired();
        Self::guard(node, token)
    }

    fn try_lock(&self) -> Option<Self::Guard> {
        let token = P::NO_PREEMPT.then(NpToken::request);
        let cb = sched::current();
        let node = take_node();
        // SAFETY: as in `lock`.
        Self::prepare(unsafe { node.as_ref() }, cb);
        // AcqRel: as the swap in `lock`; succeeds only on an empty queue.
        if self
            .tail
            .compare_exchange(
                ptr::null_mut(),
                node.as_ptr(),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            self.acquired();
            return Some(Self::guard(node, token));
        }
        // SAFETY: the CAS failed: no queue refers to `node`.
        unsafe { return_node(node) };
        if let Some(t) = token {
            // Nothing was held: no yield, even if warned meanwhile.
            t.cancel();
        }
        None
    }

    unsafe fn unlock(&self, guard: Self::Guard) {
        let mine = guard.node;
        // SAFETY: the caller's contract: `guard` came from this lock, so `mine` is
        // the holder's node.
        let me = unsafe { mine.as_ref() };
        // Acquire: pairs with the successor's Release link store.
        let mut cand = match NonNull::new(me.next.load(Ordering::Acquire)) {
            Some(c) => c,
            None => {
                // Release: publishes the critical section to the next acquirer.
                if self
                    .tail
                    .compare_exchange(
                        mine.as_ptr(),
                        ptr::null_mut(),
                        Ordering::Release,
                        Ordering::Relaxed,
                    )
                    .is_ok()
                {
                    // SAFETY: the queue is empty: nobody refers to our node.
                    unsafe { return_node(mine) };
                    if let Some(t) = guard.token {
                        t.release();
                    }
                    return;
                }
                Self::wait_next(me)
            }
        };
        // Our successor linked itself: nobody reads our node any more.
        // SAFETY: as just said.
        unsafe { return_node(mine) };
        loop {
            // SAFETY: `cand` is waiting (verdict WAITING): its owner does not reuse
            // the node before we set the verdict.
            let c = unsafe { cand.as_ref() };
            if P::offer(c, self.patience_ns) {
                // Release: publishes the critical section to the waiter's Acquire.
                c.verdict.store(SUCCESS, Ordering::Release);
                break;
            }
            // Skip `c`: find what follows it before releasing it to its owner.
            // Relaxed: a statistic.
            self.skipped.fetch_add(1, Ordering::Relaxed);
            // Acquire: pairs with the Release link store of c's successor.
            let after = match NonNull::new(c.next.load(Ordering::Acquire)) {
                Some(a) => a,
                None => {
                    // Release: the next acquirer of the empty queue sees our CS.
                    if self
                        .tail
                        .compare_exchange(
                            cand.as_ptr(),
                            ptr::null_mut(),
                            Ordering::Release,
                            Ordering::Relaxed,
                        )
                        .is_ok()
                    {
                        // Release: pairs with the owner's Acquire verdict load;
                        // after this store we never touch `c` again.
                        c.verdict.store(FAILURE, Ordering::Release);
                        break;
                    }
                    Self::wait_next(c)
                }
            };
            // Release: as above; done reading `c`.
            c.verdict.store(FAILURE, Ordering::Release);
            cand = after;
        }
        if let Some(t) = guard.token {
            t.release();
        }
    }

    fn is_locked(&self) -> bool {
        // Relaxed: a momentary snapshot.
        !self.tail.load(Ordering::Relaxed).is_null()
    }
}

/// Waits for the verdict on `me`, publishing heartbeats; with `pause`, lets the
/// scheduler preempt the thread meanwhile (only a lock whose own no-preempt
/// request is the outermost may pause: an outer lock's must stay in force).
/// `on_spin` runs every iteration and may end the pause itself.
#[inline]
fn wait_verdict(
    me: &SkipNode,
    cb: &ContextBlock,
    pause: bool,
    mut on_spin: impl FnMut(&mut bool),
) -> u32 {
    let mut paused = pause && cb.pause_no_preempt();
    let mut spins = 0u32;
    loop {
        // Acquire: pairs with the releaser's Release verdict store.
        let v = me.verdict.load(Ordering::Acquire);
        if v != WAITING {
            if paused && v == FAILURE {
                cb.resume_no_preempt();
            }
            return v;
        }
        on_spin(&mut paused);
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(16) {
            cb.publish_heartbeat();
            if paused && cb.warned() {
                // The scheduler wanted our processor while we only wait.
                sched::yield_now();
            }
        }
        spin_loop();
    }
}

/// Smart-Q's policy (003 Figure 1).
#[derive(Debug)]
pub enum SmartQPolicy {}

impl SkipPolicy for SmartQPolicy {
    const NAME: &'static str = "Smart-Q";
    const NO_PREEMPT: bool = true;

    fn offer(cand: &SkipNode, _patience_ns: u64) -> bool {
        let cb = cand.owner();
        // A stale heartbeat is the native backend's "preempted" (the kernel does
        // not write our state word); the CAS is Figure 1's.
        !sched::heartbeat_stale(cb) && cb.make_other_unpreemptable()
    }

    fn wait(me: &SkipNode, cb: &ContextBlock, _lock: &SkipQueue<Self>) -> u32 {
        // On SUCCESS the releaser made us OtherUnpreemptable (or we never paused).
        wait_verdict(me, cb, true, |_| ())
    }
}

/// Queued-Handshaking's policy (003 §3).
#[derive(Debug)]
pub enum HandshakePolicy {}

impl SkipPolicy for HandshakePolicy {
    const NAME: &'static str = "Queued-Handshaking";
    const NO_PREEMPT: bool = true;

    fn offer(cand: &SkipNode, patience_ns: u64) -> bool {
        // Release: nothing to publish yet (the verdict store does), but keep the
        // offer ordered after our critical section for clarity of reasoning.
        cand.offer.store(OFFERED, Ordering::Release);
        let mut patience = Patience::start(patience_ns);
        while !patience.exhausted() {
            // Relaxed: the swap below decides; this is a fast path.
            if cand.offer.load(Ordering::Relaxed) == SEEN {
                return true;
            }
            spin_loop();
        }
        // Rescind; the swap decides the race with the waiter's swap (003 §3).
        // AcqRel: totally ordered with the waiter's swap on the same word.
        cand.offer.swap(RESCINDED, Ordering::AcqRel) == SEEN
    }

    fn wait(me: &SkipNode, cb: &ContextBlock, _lock: &SkipQueue<Self>) -> u32 {
        let mut acked = false;
        wait_verdict(me, cb, true, |paused| {
            // Relaxed: the swap decides.
            if !acked && me.offer.load(Ordering::Relaxed) != IDLE {
                if *paused {
                    // Unpreemptable before acknowledging: an acknowledged lock is
                    // never handed to a thread the scheduler may then preempt.
                    cb.resume_no_preempt();
                    *paused = false;
                }
                // AcqRel: see `offer`. Whatever it returns, the releaser's final
                // verdict (ACK = SUCCESS, NACK = FAILURE) follows.
                me.offer.swap(SEEN, Ordering::AcqRel);
                acked = true;
            }
        })
    }
}

/// MCS-TP's policy (He, Scherer & Scott 2005): heartbeats only.
#[derive(Debug)]
pub enum TpPolicy {}

impl SkipPolicy for TpPolicy {
    const NAME: &'static str = "MCS-TP";
    const NO_PREEMPT: bool = false;

    fn offer(cand: &SkipNode, _patience_ns: u64) -> bool {
        !sched::heartbeat_stale(cand.owner())
    }

    fn wait(me: &SkipNode, cb: &ContextBlock, lock: &SkipQueue<Self>) -> u32 {
        let mut spins = 0u32;
        // (acquisition count last seen, when it was first seen: ns)
        let mut seen = (u64::MAX, 0u64);
        // Not paused: MCS-TP has no no-preempt section of its own.
        wait_verdict(me, cb, false, |_| {
            spins = spins.wrapping_add(1);
            // Under loom real time is not modelled (see `sched::heartbeat_stale`).
            if cfg!(loom) || !spins.is_multiple_of(256) {
                return;
            }
            let now = now_ns();
            let n = lock.acquisitions();
            if n != seen.0 {
                seen = (n, now);
            } else if now.saturating_sub(seen.1)
                > sched::native::heartbeat_threshold().as_nanos() as u64
            {
                // Nobody acquired for far longer than a critical section lasts:
                // presume the holder preempted and give our processor away.
                cb.publish_heartbeat();
                sched::yield_now();
            }
        })
    }
}

/// Smart-Q (003 Figure 1): the releaser makes the next waiter
/// `OtherUnpreemptable` by CAS, skipping waiters it finds preempted.
pub type SmartQ = SkipQueue<SmartQPolicy>;
/// Queued-Handshaking (003 §3): offer, acknowledge, rescind by swap.
pub type QueuedHandshaking = SkipQueue<HandshakePolicy>;
/// MCS-TP (He, Scherer & Scott 2005): skip waiters whose heartbeat is stale.
pub type McsTp = SkipQueue<TpPolicy>;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sched::{Actor, ThreadState};
    use lock_api::RawMutex;

    /// Holds `l`, enqueues a waiter that cannot run (its node is driven by hand,
    /// its context block set up by `stall`), then a live waiter thread; on release
    /// the stalled waiter must be skipped with FAILURE and the live one served.
    /// `fresh`: publish the stalled waiter's heartbeat right before the release,
    /// so that only the policy's own check (the state word, the handshake) can
    /// find it stalled, not a heartbeat gone stale while the test set up.
    fn skips_a_stalled_waiter<P: SkipPolicy>(
        fresh: bool,
        stall: impl FnOnce(&'static ContextBlock),
    ) {
        let l = SkipQueue::<P>::new();
        let g = l.lock();
        // Context blocks are never freed (the registry's contract); this one is
        // kept reachable from a static, as the registry keeps its own.
        static KEEP: std::sync::Mutex<Vec<&'static ContextBlock>> =
            std::sync::Mutex::new(Vec::new());
        let cb: &'static ContextBlock = Box::leak(Box::new(ContextBlock::new()));
        KEEP.lock().unwrap_or_else(|e| e.into_inner()).push(cb);
        cb.publish_heartbeat();
        stall(cb);
        let ghost = Box::leak(Box::new(SkipNode::new()));
        ghost
            .owner
            .store(cb as *const _ as *mut _, Ordering::Relaxed);
        let pred = l.tail.swap(ghost, Ordering::AcqRel);
        // SAFETY: `pred` is our holder's node, valid while we hold the lock.
        unsafe { (*pred).next.store(ghost, Ordering::Release) };
        std::thread::scope(|s| {
            let live = s.spawn(|| {
                let g = l.lock();
                // SAFETY: acquired just above on this thread.
                unsafe { l.unlock(g) };
            });
            while ghost.next.load(Ordering::Acquire).is_null() {
                std::hint::spin_loop();
            }
            if fresh {
                cb.publish_heartbeat();
            }
            // SAFETY: `g` came from `l.lock()` on this thread.
            unsafe { l.unlock(g) };
            // The releaser has decided on the ghost before returning.
            let v = ghost.verdict.load(Ordering::Acquire);
            if v == SUCCESS {
                // Handed to the stalled waiter (the bug under test): release it
                // on the ghost's behalf so that the live waiter, and the test,
                // can finish and report.
                let ghost_guard = SkipQueue::<P>::guard(NonNull::from(&*ghost), None);
                // SAFETY: the ghost holds the lock; its node is `ghost`.
                unsafe { l.unlock(ghost_guard) };
            }
            live.join().unwrap();
            assert_eq!(v, FAILURE, "the lock was handed to a stalled waiter");
        });
        // At least the ghost; the live waiter too if the OS descheduled it past
        // the patience (then it re-enqueued and was served later).
        assert!(l.skipped() >= 1);
        assert!(!l.is_locked());
        // SAFETY: the lock is free and nobody refers to the ghost node any more.
        drop(unsafe { Box::from_raw(ghost) });
    }

    #[test]
    fn smart_q_skips_a_preempted_waiter() {
        skips_a_stalled_waiter::<SmartQPolicy>(true, |cb| {
            cb.transition(
                ThreadState::Preemptable,
                ThreadState::Preempted,
                Actor::Kernel,
            )
            .unwrap();
        });
    }

    #[test]
    fn handshaking_rescinds_an_unacknowledged_offer() {
        skips_a_stalled_waiter::<HandshakePolicy>(true, |_| ());
    }

    #[test]
    fn mcs_tp_skips_a_waiter_with_a_stale_heartbeat() {
        skips_a_stalled_waiter::<TpPolicy>(false, |cb| {
            // Relaxed: test setup before the block is shared.
            cb.peer.heartbeat.store(1, Ordering::Relaxed); // long ago
        });
    }
}
