//! The skipping queue shared by Smart-Q and Queued-Handshaking (Wisniewski,
//! Kontothanassis & Scott, IPPS 1994 §3, papers/003_…) and MCS-TP (He, Scherer
//! & Scott, HiPC 2005): the MCS list lock ([`super::Queued`]) with one change at
//! the hand-over. Before passing the lock to the next waiter, the releaser
//! checks that the waiter is running; if it is not, the releaser removes it
//! from the queue (its verdict becomes *failure*; it re-enqueues when it runs
//! again) and looks at the one behind. Each lock's own check — its
//! [`SkipPolicy`] — is one file: [`SmartQ`](super::SmartQ) (`smartq.rs`),
//! [`QueuedHandshaking`](super::QueuedHandshaking) (`handshaking.rs`),
//! [`McsTp`](super::McsTp) (`mcs_tp.rs`).
//!
//! The shared skip loop follows 003 Figure 1 with one correction: Figure 1 marks
//! a skipped waiter *failure* before it has finished reading that waiter's `next`
//! link (when the link is still nil it reads it again later), but a failed waiter
//! immediately re-enqueues the same node and resets `next` — the releaser could
//! then follow the node's *new* position. Here a skipped node is marked only after
//! its successor is known or the queue was emptied behind it, and only then may
//! its owner reuse it.
//!
//! # Waiting
//!
//! Under the emulated pseudo-scheduler waiters wait as in the papers: they spin,
//! publish heartbeats, and give their processor away when the scheduler warns
//! them (Smart-Q, Handshaking) or the holder is preempted (MCS-TP). Natively
//! they wait through the one waiting policy, [`sched::Waiter`]: spin while the
//! holder runs, **park** when it is preempted (the kernel's answer through
//! [`sched::is_preempted`]) or the episode outlasts the waiter's patience while
//! parking can help — with the kernel's answer, only while some registered
//! thread is preempted or the holder is off its CPU ([`Waiter`]'s rule,
//! FlexGuard's: under no CPU pressure every waiter keeps spinning, since a
//! hand-over to a thread that must first be woken costs the releaser its
//! patience and a skip). Threads woken and not yet on a CPU are not pressure
//! here (the default `Waiter`, not [`Waiter::counting_wakeups`]): the waiter
//! a releaser wakes one step ahead is mostly coming up on an idle core, and
//! counting it parked the other spinners again. No lock here calls
//! `sched_yield` natively.
//!
//! Where the kernel does not answer (eBPF off or not permitted), "preempted"
//! is a stale heartbeat, and two rules keep heartbeats honest: a new holder
//! publishes one as it takes the lock (else one that took it from an empty
//! queue looked preempted to every waiter, which parked at once), and the
//! releaser hands the lock only to a waiter whose heartbeat is at most
//! [`GRANT_FRESH_NS`] old — a spinning waiter publishes every few µs, and the
//! general 100 µs threshold let a waiter preempted less than 100 µs ago be
//! granted, the lock then waiting out its time off the CPU.
//!
//! A parked waiter must never be handed the lock — the lock would then wait
//! for it to wake up. So the grant is a CAS on the waiter's node state:
//!
//! | state     | meaning                                       | who moves it out            |
//! |-----------|-----------------------------------------------|-----------------------------|
//! | `WAITING` | spinning, running                             | waiter → `PARKED`; releaser → `CLAIMED` |
//! | `PARKED`  | announced it sleeps (took its wake token first) | a waker → `WOKEN` (then [`sched::wake`]) |
//! | `WOKEN`   | woken, not yet seen running                   | waiter → `WAITING`          |
//! | `CLAIMED` | the releaser is deciding: the waiter may not park | releaser → `SUCCESS`/`FAILURE` |
//! | `SUCCESS` | holds the lock                                | —                           |
//! | `FAILURE` | skipped: re-enqueue                           | —                           |
//! | `ABANDONED` | a timed waiter gave up and left             | — (the releaser that skips it frees it) |
//!
//! The releaser grants only to a waiter it *claimed* from `WAITING`, i.e. one
//! that was spinning; a `PARKED` candidate is woken and given the releaser's
//! patience to come back to `WAITING`, after which it is skipped like a
//! preempted one (woken, it finds `FAILURE` and re-enqueues). A new holder
//! wakes its successor **one step ahead** of its turn (`PARKED` → `WOKEN`), so
//! that it is spinning again by the time the lock is handed over.
//!
//! # Timed acquisition
//!
//! A timed waiter ([`lock_api::RawMutexTimed`]) whose deadline passes withdraws
//! with the same kind of CAS the releaser grants with: `WAITING`/`PARKED`/`WOKEN`
//! → `ABANDONED`. The releaser claims only from `WAITING` (`WAITING` →
//! `CLAIMED`), so exactly one of the two CASes wins: if the waiter's wins, the
//! releaser finds `ABANDONED` and skips the node as it skips a preempted one
//! (and, being the last to read it, frees it); if the claim won, the waiter
//! cannot withdraw while `CLAIMED` — the releaser's verdict follows within its
//! patience — and a `SUCCESS` verdict makes the late waiter the holder (its
//! `try_lock_until` returns `Some`, past the deadline). A waiter skipped with
//! `FAILURE` after its deadline gives up holding nothing.
//!
//! Uses `sched`: [`Waiter`], [`wake`](sched::wake), [`is_preempted`](sched::is_preempted),
//! `request/release_no_preempt`, `pause/resume_no_preempt`,
//! `make_other_unpreemptable`, `heartbeat`, and (emulated only) `yield_now`.
//! Queue nodes come from a per-thread cache; the guard carries one.
//!
//! ```
//! use mpsync::{lock::{Mutex, SmartQ, QueuedHandshaking, McsTp}};
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
use std::time::Instant;

use super::np::NpToken;
use crate::sched::{self, ContextBlock, Wait, Waiter, stall, waiter::CHECK_EVERY};
use crate::sync::{AtomicPtr, AtomicU32, AtomicU64, Ordering, spin_loop};

/// Spinning and running.
pub(super) const WAITING: u32 = 0;
/// Announced it sleeps: must be woken, never granted.
pub(super) const PARKED: u32 = 1;
/// Woken, not yet seen running.
pub(super) const WOKEN: u32 = 2;
/// The releaser is deciding; the waiter keeps spinning.
pub(super) const CLAIMED: u32 = 3;
/// Handed the lock.
pub(super) const SUCCESS: u32 = 4;
/// Skipped: removed from the queue, try again.
pub(super) const FAILURE: u32 = 5;
/// Withdrawn by a timed waiter that gave up (by CAS from `WAITING`, `PARKED`
/// or `WOKEN`): the node stays linked until a releaser walks past it, and that
/// releaser owns it then.
pub(super) const ABANDONED: u32 = 6;

/// A queue node: one per acquisition attempt in progress.
#[derive(Debug)]
pub struct SkipNode {
    /// The successor, written by it.
    pub(super) next: AtomicPtr<SkipNode>,
    /// The node state (module doc).
    pub(super) state: AtomicU32,
    /// Queued-Handshaking's notification word (see `handshaking.rs`); only
    /// that policy reads it, and resets it at each attempt.
    pub(super) offer: AtomicU32,
    /// The waiting thread's context block.
    pub(super) owner: AtomicPtr<ContextBlock>,
}

impl SkipNode {
    pub(super) fn new() -> Self {
        Self {
            next: AtomicPtr::new(ptr::null_mut()),
            state: AtomicU32::new(WAITING),
            offer: AtomicU32::new(0),
            owner: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// The waiting thread's block.
    pub(super) fn owner(&self) -> &'static ContextBlock {
        // Relaxed: written before the node was published by the AcqRel tail swap,
        // which the reader's Acquire load of `next` follows.
        let p = self.owner.load(Ordering::Relaxed);
        // SAFETY: set to a `&'static ContextBlock` (blocks are never freed) before
        // the node is enqueued.
        unsafe { &*p }
    }
}

super::node_cache!(SkipNode, SkipNode::new());

pub(super) mod sealed {
    /// Seals [`super::SkipPolicy`].
    pub trait Sealed {}
}

/// How a skipping queue lock decides whether a waiter may be handed the lock.
/// Sealed: implemented by [`SmartQPolicy`](super::SmartQPolicy),
/// [`HandshakePolicy`](super::HandshakePolicy), [`TpPolicy`](super::TpPolicy).
pub trait SkipPolicy: sealed::Sealed + 'static {
    /// The lock's name in the papers.
    const NAME: &'static str;
    /// Whether the critical section is no-preempt (then waiters pause their
    /// request while they wait).
    const NO_PREEMPT: bool;
    /// Whether [`offer`](Self::offer) asks the waiter itself (a handshake it
    /// must answer within the patience). Such a policy learns that a waiter
    /// is off its CPU from the missing answer, so natively, without the
    /// kernel's answer, the releaser does not also skip waiters by
    /// a 20 µs heartbeat age (`GRANT_FRESH_NS`: the extra skips cost
    /// Queued-Handshaking speed).
    const ASKS_THE_WAITER: bool = false;

    /// Releaser side, `cand` claimed (it spins and cannot park meanwhile) and
    /// not known preempted: hand it the lock (`true`), or skip it (`false`).
    /// `patience_ns` bounds any wait.
    fn offer(cand: &SkipNode, patience_ns: u64) -> bool;

    /// Waiter side, every spin while the verdict is out: the policy's part of
    /// the waiter's loop. `paused`: the waiter's no-preempt request is paused
    /// (the policy may resume it and clear the flag).
    #[inline]
    fn on_spin(me: &SkipNode, cb: &ContextBlock, paused: &mut bool) {
        let _ = (me, cb, paused);
    }
}

/// The MCS queue lock with preempted-waiter skipping, generic over the policy.
/// Use the named locks (newtypes of it) [`SmartQ`](super::SmartQ),
/// [`QueuedHandshaking`](super::QueuedHandshaking), [`McsTp`](super::McsTp).
pub struct SkipQueue<P> {
    pub(super) tail: AtomicPtr<SkipNode>,
    /// The holder's context block, a hint for waiters' "is it preempted?"
    /// (null: unknown). Written after each acquisition, so it may name the
    /// previous holder for a moment; only advice depends on it.
    holder: AtomicPtr<ContextBlock>,
    /// Waiters skipped so far (diagnostic).
    skipped: AtomicU64,
    patience_ns: u64,
    _policy: PhantomData<fn() -> P>,
}

// SAFETY: all shared state is atomics; raw pointers in it name nodes owned by
// queued threads (see the queue protocol) and context blocks, never freed.
unsafe impl<P> Send for SkipQueue<P> {}
// SAFETY: as above.
unsafe impl<P> Sync for SkipQueue<P> {}

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

/// Default bound on a releaser's wait for one waiter (a handshake, a woken
/// waiter getting its processor back).
pub const SKIP_DEFAULT_PATIENCE_NS: u64 = 20_000;

/// Natively, where the kernel does not answer for a waiter (heartbeats only),
/// the releaser hands the lock only to a waiter whose heartbeat is at most
/// this old. A spinning waiter publishes one every
/// [`CHECK_EVERY`] spins (≈ 1–2 µs), so a running one is far fresher; the
/// general staleness threshold ([`sched::native::heartbeat_threshold`],
/// 100 µs) let a waiter preempted up to 100 µs ago be handed the lock, which
/// then waited out its whole time off the CPU (a tick or more). Skipping a
/// running waiter by mistake only sends it round the queue again.
// (Unused under loom, where real time is not part of the model.)
#[cfg_attr(loom, allow(dead_code))]
pub const GRANT_FRESH_NS: u64 = 20_000;

super::loom_const_new! {
    impl[P: SkipPolicy] SkipQueue<P> {
        /// An unlocked lock.
        new => Self {
            tail: AtomicPtr::new(ptr::null_mut()),
            holder: AtomicPtr::new(ptr::null_mut()),
            skipped: AtomicU64::new(0),
            patience_ns: SKIP_DEFAULT_PATIENCE_NS,
            _policy: PhantomData,
        }
    }
}

impl<P: SkipPolicy> SkipQueue<P> {
    /// Waiters removed from the queue because they looked preempted (or did
    /// not come back from parking within the releaser's patience).
    pub fn skipped(&self) -> u64 {
        // Relaxed: a statistic.
        self.skipped.load(Ordering::Relaxed)
    }

    pub(super) fn guard(node: NonNull<SkipNode>, token: Option<NpToken>) -> SkipGuard {
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
        me.state.store(WAITING, Ordering::Relaxed);
        // Only a policy that asks the waiter uses the offer word.
        if P::ASKS_THE_WAITER {
            me.offer.store(0, Ordering::Relaxed);
        }
        me.owner.store(
            cb as *const ContextBlock as *mut ContextBlock,
            Ordering::Relaxed,
        );
    }

    /// Waits until `node`'s successor has linked itself, and returns it (see
    /// [`super::wait_for_link`] for what bounds the wait).
    fn wait_next(node: &SkipNode) -> NonNull<SkipNode> {
        // Acquire: pairs with the successor's Release store of the link.
        super::wait_for_link(|| NonNull::new(node.next.load(Ordering::Acquire)))
    }

    /// The holder as last recorded.
    #[inline]
    fn holder(&self) -> Option<&ContextBlock> {
        // Acquire: pairs with the Release store of `acquired`.
        let p = self.holder.load(Ordering::Acquire);
        // SAFETY: context blocks are never freed, so a stale pointer still
        // names a valid block.
        unsafe { p.as_ref() }
    }

    /// The calling thread (`cb`) now holds the lock: record it for the
    /// waiters' advice, with a fresh heartbeat where the kernel does not
    /// answer for it.
    #[inline]
    fn acquired(&self, cb: &'static ContextBlock) {
        // Where the kernel does not answer for us (eBPF off or not permitted),
        // waiters judge the holder by its heartbeat (`Waiter::spin`, the
        // retry rule of `wait_native`). A thread that took the lock from an
        // empty queue has published none since its last wait, maybe long
        // ago: it looked preempted to every waiter at its first look, and
        // they all parked (cs1-ncs1 pinned, 8 threads on 2 cores, eBPF off:
        // ~50k parks/s, most hand-overs to a parked waiter that had to be
        // woken first). One clock read, only without the kernel's answer
        // (and not under loom, where heartbeats are not part of the model).
        #[cfg(not(loom))]
        if sched::native::kernel_preempted(cb).is_none() {
            publish_heartbeat(cb);
        }
        // Release: pairs with the Acquire load of `holder()`.
        self.holder.store(
            cb as *const ContextBlock as *mut ContextBlock,
            Ordering::Release,
        );
    }

    /// After a wait in the queue (`me` was handed the lock): wake our
    /// successor, if it parked, one step ahead of its turn. (An acquisition
    /// from an empty queue skips this: a successor that enqueued behind it
    /// since is still in its first spins.)
    fn wake_successor(me: &SkipNode) {
        // Acquire: pairs with the successor's Release link store.
        if let Some(s) = NonNull::new(me.next.load(Ordering::Acquire)) {
            // SAFETY: our successor waits for a verdict only our release gives,
            // so its node stays valid until then.
            wake_if_parked(unsafe { s.as_ref() });
        }
    }

    /// Waits for the verdict on `me` (SUCCESS or FAILURE), or, past
    /// `deadline`, withdraws (ABANDONED: the node is no longer ours). `retry`:
    /// this thread was skipped before in this acquisition.
    fn wait(
        &self,
        me: &SkipNode,
        cb: &'static ContextBlock,
        retry: bool,
        deadline: Option<Instant>,
    ) -> u32 {
        if sched::emulated::is_attached(cb) {
            self.wait_emulated(me, cb, deadline)
        } else {
            self.wait_native(me, cb, retry, deadline)
        }
    }

    /// A timed waiter whose deadline passed leaves the queue: `me`'s state
    /// `from` (`WAITING`, `PARKED` or `WOKEN`) → `ABANDONED` by CAS, against
    /// the releaser's claim (`WAITING` → `CLAIMED`) or verdict. `true`: withdrawn,
    /// the node belongs to whichever releaser skips it; `false`: a releaser
    /// moved the state first (re-read it: a claim is decided within the
    /// releaser's patience, `SUCCESS` means we hold the lock).
    #[inline]
    fn withdraw(me: &SkipNode, from: u32) -> bool {
        stall::point(stall::TIMED_GAVE_UP);
        // Release: our last touch of the node happens before the releaser that
        // finds ABANDONED (Acquire in `try_grant`/`fail`) reuses it. Acquire on
        // failure: pairs with the releaser's Release verdict.
        me.state
            .compare_exchange(from, ABANDONED, Ordering::Release, Ordering::Acquire)
            .is_ok()
    }

    /// The papers' waiting, under the emulated scheduler: spin, publish
    /// heartbeats, give the processor away when warned (with the no-preempt
    /// request paused) or — MCS-TP — when the holder is preempted.
    fn wait_emulated(&self, me: &SkipNode, cb: &ContextBlock, deadline: Option<Instant>) -> u32 {
        let mut paused = P::NO_PREEMPT && cb.pause_no_preempt();
        let mut spins = 0u32;
        loop {
            // Acquire: pairs with the releaser's Release verdict.
            let v = me.state.load(Ordering::Acquire);
            if v == SUCCESS || v == FAILURE {
                if paused && v == FAILURE {
                    cb.resume_no_preempt();
                }
                return v;
            }
            P::on_spin(me, cb, &mut paused);
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(CHECK_EVERY) {
                cb.publish_heartbeat();
                if v == WAITING && past(deadline) && Self::withdraw(me, WAITING) {
                    if paused {
                        cb.resume_no_preempt();
                    }
                    return ABANDONED;
                }
                let give_up = if P::NO_PREEMPT {
                    // The scheduler wanted our processor while we only wait.
                    paused && cb.warned()
                } else {
                    self.holder().is_some_and(sched::is_preempted)
                };
                if give_up {
                    sched::yield_now();
                }
            }
            spin_loop();
        }
    }

    /// Native waiting through the [`Waiter`]: spin while the holder runs, park
    /// when it is preempted or the patience is spent under CPU pressure (module
    /// doc; the Waiter's rule). A waiter
    /// that was skipped before (`retry`) parks only when the holder is
    /// preempted: else a releaser could meet it parked again and again, each
    /// skip sending it behind the releaser's walk (a livelock the loom model
    /// `skipq_park_vs_grant` finds, where every waiter parks at once).
    fn wait_native(
        &self,
        me: &SkipNode,
        cb: &ContextBlock,
        retry: bool,
        deadline: Option<Instant>,
    ) -> u32 {
        let mut paused = P::NO_PREEMPT && cb.pause_no_preempt();
        let mut waiter = Waiter::new();
        let mut spins = 0u32;
        loop {
            // Acquire: pairs with the releaser's Release verdict.
            let v = me.state.load(Ordering::Acquire);
            match v {
                SUCCESS => return v,
                FAILURE => {
                    if paused {
                        cb.resume_no_preempt();
                    }
                    return v;
                }
                CLAIMED => {
                    // The releaser is deciding: stay running, answer it.
                    P::on_spin(me, cb, &mut paused);
                    spin_loop();
                }
                PARKED | WOKEN => {
                    if past(deadline) {
                        if Self::withdraw(me, v) {
                            if paused {
                                cb.resume_no_preempt();
                            }
                            return ABANDONED;
                        }
                        continue;
                    }
                    // Back from sleeping (woken, or spuriously): running again.
                    // Relaxed: a failure means a releaser moved the state on,
                    // which the Acquire load above re-reads.
                    let _ =
                        me.state
                            .compare_exchange(v, WAITING, Ordering::Relaxed, Ordering::Relaxed);
                    cb.publish_heartbeat();
                    waiter.restart();
                }
                _ => {
                    spins = spins.wrapping_add(1);
                    let look = spins.is_multiple_of(CHECK_EVERY);
                    if look {
                        // For the heartbeat fallback of `is_preempted`.
                        cb.publish_heartbeat();
                    }
                    let advice = waiter.spin(self.holder());
                    // A timed waiter reads the clock at each look and before
                    // it would park (never on the untimed path).
                    if deadline.is_some() && (look || advice == Wait::Park) && past(deadline) {
                        if Self::withdraw(me, WAITING) {
                            if paused {
                                cb.resume_no_preempt();
                            }
                            return ABANDONED;
                        }
                        continue;
                    }
                    if advice == Wait::Park
                        && (!retry || self.holder().is_some_and(sched::is_preempted))
                    {
                        // Token first, then the announcement: a wake after the
                        // token is not lost (sched::waiter).
                        let t = Waiter::token();
                        // AcqRel: Release orders the token load before the
                        // announcement the waker reads; Acquire pairs with a
                        // releaser's claim or verdict when it fails.
                        if me
                            .state
                            .compare_exchange(WAITING, PARKED, Ordering::AcqRel, Ordering::Acquire)
                            .is_ok()
                        {
                            stall::point(stall::WAITER_PARK);
                            // A timed waiter sleeps at most to its deadline
                            // (then withdraws from PARKED above).
                            Waiter::sleep(
                                t,
                                deadline.map(|d| d.saturating_duration_since(Instant::now())),
                            );
                        }
                    }
                }
            }
        }
    }

    /// `lock`, or with a `deadline` the timed form: `None` after withdrawing
    /// (module doc, "Timed acquisition"), holding nothing. The uncontended
    /// acquisition (the queue empty at our look and at our swap) is inline;
    /// everything else is out of line ([`Self::acquire_contended`]).
    #[inline]
    pub(super) fn acquire(&self, deadline: Option<Instant>) -> Option<SkipGuard> {
        let token = P::NO_PREEMPT.then(NpToken::request);
        // The token carries our block: one thread-local lookup, not two.
        let cb = token.as_ref().map_or_else(sched::current, NpToken::cb);
        let node = take_node();
        // SAFETY: our node, valid until we give it back; shared fields are atomics.
        let me = unsafe { node.as_ref() };
        Self::prepare(me, cb);
        // A look before the swap: if the lock looks held we will wait, and
        // publish a fresh heartbeat before anyone can judge us by it (see
        // `acquire_contended`). Relaxed: a hint (see there if it was wrong).
        // (Under loom, where heartbeats are not part of the model, no look:
        // it would only add a scheduling point.)
        if !cfg!(loom) && !self.tail.load(Ordering::Relaxed).is_null() {
            return self.acquire_contended(node, cb, token, None, deadline);
        }
        // AcqRel: Release publishes the node's fields to the next acquirer;
        // Acquire orders us after the predecessor's enqueue.
        let pred = self.tail.swap(node.as_ptr(), Ordering::AcqRel);
        if let Some(pred) = NonNull::new(pred) {
            // Taken between our look and our swap.
            return self.acquire_contended(node, cb, token, Some(pred), deadline);
        }
        self.acquired(cb);
        Some(Self::guard(node, token))
    }

    /// `acquire` past its uncontended case: wait in the queue (and enqueue
    /// again after each skip). `swapped`: `Some(pred)` when `acquire` already
    /// swapped `node` in behind `pred` (the lock looked free and was taken
    /// meanwhile); `None` when the lock looked held and `node` (prepared) is
    /// not enqueued yet.
    #[inline(never)]
    fn acquire_contended(
        &self,
        node: NonNull<SkipNode>,
        cb: &'static ContextBlock,
        token: Option<NpToken>,
        mut swapped: Option<NonNull<SkipNode>>,
        deadline: Option<Instant>,
    ) -> Option<SkipGuard> {
        // SAFETY: our node, valid until we give it back; shared fields are atomics.
        let me = unsafe { node.as_ref() };
        let mut retry = false;
        loop {
            let (pred, looked_held) = match swapped.take() {
                Some(pred) => (pred, false),
                None => {
                    if retry {
                        Self::prepare(me, cb);
                    }
                    // Whether the lock looks held (on the first round `acquire`
                    // looked). Relaxed: a hint.
                    let held =
                        !cfg!(loom) && (!retry || !self.tail.load(Ordering::Relaxed).is_null());
                    // We will probably wait: a fresh heartbeat before anyone
                    // can judge us by it (a releaser sees our node only through
                    // the link below, which the Release store publishes after
                    // this) — and before the swap, so the clock read does not
                    // widen the window between the swap and the link that a
                    // releaser may be waiting on.
                    if held {
                        cb.publish_heartbeat();
                    }
                    // AcqRel: as in `acquire`.
                    match NonNull::new(self.tail.swap(node.as_ptr(), Ordering::AcqRel)) {
                        Some(pred) => (pred, held),
                        None => break,
                    }
                }
            };
            // The window a releaser may wait on (`wait_next`).
            stall::point(stall::QUEUE_LOCK_LINK);
            // SAFETY: the predecessor's node stays valid until its holder (or a
            // releaser skipping it) has read the link we write here.
            // Release: publishes our node to whoever reads the link.
            unsafe { pred.as_ref().next.store(node.as_ptr(), Ordering::Release) };
            if !looked_held {
                // Taken between our look and our swap: publish now. A releaser
                // that judged us by an old heartbeat meanwhile skipped us, which
                // only sends us round again.
                cb.publish_heartbeat();
            }
            match self.wait(me, cb, retry, deadline) {
                SUCCESS => break,
                ABANDONED => {
                    // Withdrawn: the node is the releaser's now; nothing held.
                    if let Some(t) = token {
                        t.cancel();
                    }
                    return None;
                }
                _ => {}
            }
            // FAILURE: skipped while we looked preempted or slept; nobody
            // refers to our node any more. Enqueue again — unless the deadline
            // passed meanwhile.
            if past(deadline) {
                stall::point(stall::TIMED_GAVE_UP);
                // SAFETY: skipped: no queue refers to our node.
                unsafe { return_node(node) };
                if let Some(t) = token {
                    t.cancel();
                }
                return None;
            }
            retry = true;
        }
        self.acquired(cb);
        Self::wake_successor(me);
        Some(Self::guard(node, token))
    }

    /// Releaser side: hand the lock to `c` (`true`) or decide to skip it.
    /// Grants only a candidate claimed from `WAITING`; a parked one is woken
    /// and given the patience to come back.
    fn try_grant(&self, c: &SkipNode) -> bool {
        let cb = c.owner();
        let mut waiter = Waiter::with_patience_ns(self.patience_ns);
        loop {
            // Acquire: pairs with the waiter's AcqRel announcement.
            match c.state.load(Ordering::Acquire) {
                WAITING => {
                    if not_running::<P>(cb) {
                        return false;
                    }
                    // Acquire: pairs with the waiter's announcement when it
                    // fails; on success the waiter cannot park any more.
                    if c.state
                        .compare_exchange(WAITING, CLAIMED, Ordering::Acquire, Ordering::Acquire)
                        .is_ok()
                    {
                        return P::offer(c, self.patience_ns);
                    }
                    continue;
                }
                PARKED => {
                    wake_if_parked(c);
                }
                // A timed waiter withdrew: skip it (`fail` frees the node).
                ABANDONED => return false,
                _ => {} // WOKEN: give it the time to get its processor back.
            }
            if waiter.spin(None) == Wait::Park {
                return false;
            }
        }
    }

    /// Releaser side, done with `c` (skipped): the verdict FAILURE, and a wake
    /// if it sleeps; or, if its timed waiter withdrew (before or while we
    /// decided), the node is ours to free. After this nothing of `c` is touched.
    fn fail(&self, c: NonNull<SkipNode>) {
        // SAFETY: `c` has no verdict yet: its owner does not reuse it before
        // the swap below, and a withdrawn node is ours.
        let cr = unsafe { c.as_ref() };
        let cb = cr.owner();
        // Relaxed: a statistic.
        self.skipped.fetch_add(1, Ordering::Relaxed);
        // AcqRel: Release pairs with the owner's Acquire verdict load; Acquire
        // pairs with its announcement, so its token came before our wake, and
        // with its withdrawal, so its last touch came before our reuse.
        let old = cr.state.swap(FAILURE, Ordering::AcqRel);
        if old == PARKED || old == WOKEN {
            stall::point(stall::WAITER_WAKE);
            sched::wake(cb);
        } else if old == ABANDONED {
            // SAFETY: the waiter left for good and we are the last to read the
            // node (its successor's link is read, or the queue emptied behind it).
            unsafe { return_node(c) };
        }
    }
}

/// Releaser side: whether the spinning (`WAITING`) waiter `cb` is to be
/// skipped as not running — [`sched::is_preempted`], and natively, where the
/// kernel does not answer for it, also a heartbeat older than
/// [`GRANT_FRESH_NS`] (unless the policy [asks the waiter](SkipPolicy::ASKS_THE_WAITER)).
/// Threads attached to the emulated scheduler are judged as in the papers (its
/// state word, the general threshold).
#[inline]
fn not_running<P: SkipPolicy>(cb: &ContextBlock) -> bool {
    if sched::is_preempted(cb) {
        return true;
    }
    if P::ASKS_THE_WAITER {
        return false;
    }
    // Under loom real time is not part of the model (as in `presumed_preempted`).
    #[cfg(not(loom))]
    if sched::native::kernel_preempted(cb).is_none() && !sched::emulated::is_attached(cb) {
        let hb = cb.heartbeat_ns();
        return hb != 0 && crate::util::clock::now_ns().saturating_sub(hb) > GRANT_FRESH_NS;
    }
    false
}

/// `cb.publish_heartbeat()` out of line: the clock read kept off the inline
/// acquisition (it runs there only where the kernel does not answer).
#[cfg(not(loom))]
#[inline(never)]
fn publish_heartbeat(cb: &ContextBlock) {
    cb.publish_heartbeat();
}

/// Whether `deadline` (if any) has passed. Reads the clock only for a timed
/// acquisition.
#[inline]
fn past(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// Wakes `s`'s owner if `s` announced it sleeps (`PARKED` → `WOKEN`).
#[inline]
fn wake_if_parked(s: &SkipNode) {
    // Relaxed: a first look; the CAS decides.
    if s.state.load(Ordering::Relaxed) != PARKED {
        return;
    }
    let cb = s.owner();
    // Acquire: pairs with the waiter's AcqRel announcement, so the token it
    // took comes before our wake.
    if s.state
        .compare_exchange(PARKED, WOKEN, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
    {
        stall::point(stall::WAITER_WAKE);
        sched::wake(cb);
    }
}

/// One of the named skipping queue locks: a `#[repr(transparent)]` newtype of
/// [`SkipQueue<P>`] (so that compile errors and `type_name` say `SmartQ`, not
/// `SkipQueue<SmartQPolicy>`), delegating every trait to it.
macro_rules! named_skip_queue {
    ($(#[$m:meta])* $name:ident = $policy:ty) => {
        $(#[$m])*
        #[repr(transparent)]
        pub struct $name($crate::lock::skipq::SkipQueue<$policy>);

        impl $name {
            /// An unlocked lock.
            #[cfg(not(loom))]
            pub const fn new() -> Self {
                Self($crate::lock::skipq::SkipQueue::new())
            }

            /// An unlocked lock.
            #[cfg(loom)]
            pub fn new() -> Self {
                Self($crate::lock::skipq::SkipQueue::new())
            }

            /// Waiters removed from the queue because they looked preempted
            /// (or did not come back from parking within the releaser's
            /// patience).
            pub fn skipped(&self) -> u64 {
                self.0.skipped()
            }

            /// The construction it names: the skipping queue under this
            /// lock's policy.
            pub fn as_skip_queue(&self) -> &$crate::lock::skipq::SkipQueue<$policy> {
                &self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }

        // SAFETY: every method is `SkipQueue`'s (the newtype is transparent).
        unsafe impl lock_api::RawMutex for $name {
            $crate::lock::loom_const_init!($name);

            type Guard = $crate::lock::skipq::SkipGuard;

            #[inline]
            fn lock(&self) -> Self::Guard {
                self.0.lock()
            }
            #[inline]
            fn try_lock(&self) -> Option<Self::Guard> {
                self.0.try_lock()
            }
            #[inline]
            unsafe fn unlock(&self, guard: Self::Guard) {
                // SAFETY: the caller's contract, passed on.
                unsafe { self.0.unlock(guard) }
            }
            #[inline]
            fn is_locked(&self) -> bool {
                self.0.is_locked()
            }
        }

        // SAFETY: `SkipQueue`'s.
        unsafe impl lock_api::RawMutexFair for $name {
            #[inline]
            unsafe fn unlock_fair(&self, guard: Self::Guard) {
                // SAFETY: the caller's contract, passed on.
                unsafe { self.0.unlock_fair(guard) }
            }
        }

        // SAFETY: `SkipQueue`'s.
        unsafe impl lock_api::RawMutexTimed for $name {
            type Duration = std::time::Duration;
            type Instant = std::time::Instant;

            #[inline]
            fn try_lock_for(&self, timeout: Self::Duration) -> Option<Self::Guard> {
                self.0.try_lock_for(timeout)
            }
            #[inline]
            fn try_lock_until(&self, deadline: Self::Instant) -> Option<Self::Guard> {
                self.0.try_lock_until(deadline)
            }
        }
    };
}
pub(super) use named_skip_queue;

impl<P: SkipPolicy> Default for SkipQueue<P> {
    fn default() -> Self {
        Self::new()
    }
}

// The holder is the thread whose node became the tail of an empty queue, or whose
// state a releaser set to SUCCESS; a releaser sets SUCCESS on exactly one node
// (one it claimed) and then never touches the lock again. A skipped node is
// marked FAILURE only after the releaser stops reading it, and its owner does
// not touch the node before it sees the verdict.
// SAFETY: mutual exclusion as for MCS (`Queued`), by the above; Acquire loads of
// the state pair with the Release SUCCESS store.
unsafe impl<P: SkipPolicy> lock_api::RawMutex for SkipQueue<P> {
    super::loom_const_init!(SkipQueue);

    type Guard = SkipGuard;

    #[inline]
    fn lock(&self) -> Self::Guard {
        match self.acquire(None) {
            Some(g) => g,
            None => unreachable!("an acquisition without a deadline never gives up"),
        }
    }

    fn try_lock(&self) -> Option<Self::Guard> {
        let token = P::NO_PREEMPT.then(NpToken::request);
        // The token carries our block: one thread-local lookup, not two.
        let cb = token.as_ref().map_or_else(sched::current, NpToken::cb);
        let node = take_node();
        // SAFETY: as in `lock`.
        let me = unsafe { node.as_ref() };
        Self::prepare(me, cb);
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
            self.acquired(cb);
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

    #[inline]
    unsafe fn unlock(&self, guard: Self::Guard) {
        // The uncontended release inline: nobody linked behind us, and the
        // queue empties by one CAS. Everything else out of line (`unlock_slow`,
        // which starts over from the link).
        let mine = guard.node;
        // SAFETY: the caller's contract: `guard` came from this lock, so `mine` is
        // the holder's node.
        let me = unsafe { mine.as_ref() };
        // Acquire: pairs with the successor's Release link store. Release (the
        // CAS): publishes the critical section to the next acquirer.
        if me.next.load(Ordering::Acquire).is_null()
            && self
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
        // SAFETY: the caller's contract, passed on.
        unsafe { self.unlock_slow(guard) }
    }

    fn is_locked(&self) -> bool {
        // Relaxed: a momentary snapshot.
        !self.tail.load(Ordering::Relaxed).is_null()
    }
}

impl<P: SkipPolicy> SkipQueue<P> {
    /// `unlock` past its uncontended case: a successor linked (or is linking)
    /// behind us.
    ///
    /// # Safety
    /// As `unlock`: `guard` came from this lock, on this thread.
    #[cold]
    #[inline(never)]
    unsafe fn unlock_slow(&self, guard: SkipGuard) {
        let mine = guard.node;
        // SAFETY: the caller's contract: `guard` came from this lock, so `mine` is
        // the holder's node.
        let me = unsafe { mine.as_ref() };
        // `unlock` found a link, or its CAS failed: a successor swapped itself
        // in and links (or has linked) behind us. Acquire: pairs with the
        // successor's Release link store.
        let mut cand =
            NonNull::new(me.next.load(Ordering::Acquire)).unwrap_or_else(|| Self::wait_next(me));
        // Our successor linked itself: nobody reads our node any more.
        // SAFETY: as just said.
        unsafe { return_node(mine) };
        loop {
            // SAFETY: `cand` has no verdict yet: its owner does not reuse the
            // node before we give it one.
            let c = unsafe { cand.as_ref() };
            if self.try_grant(c) {
                // Release: publishes the critical section to the waiter's Acquire.
                c.state.store(SUCCESS, Ordering::Release);
                break;
            }
            // Skip `c`: find what follows it before releasing it to its owner.
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
                        self.fail(cand);
                        break;
                    }
                    Self::wait_next(c)
                }
            };
            self.fail(cand);
            cand = after;
        }
        if let Some(t) = guard.token {
            t.release();
        }
    }
}

#[cfg(all(test, not(loom)))]
pub(super) mod tests {
    use super::*;
    use lock_api::RawMutex;

    /// Holds `l`, enqueues a waiter that cannot run (its node is driven by hand,
    /// in `state`, its context block set up by `stall`), then a live waiter
    /// thread; on release the stalled waiter must be skipped with FAILURE and
    /// the live one served. `fresh`: `Some(age)`: right before the release,
    /// set the stalled waiter's heartbeat to `age` ns ago (`Some(0)`: publish
    /// it), so that only the policy's own check (the state word, the
    /// handshake, the node state, the grant's freshness rule) can find it
    /// stalled, not a heartbeat gone stale while the test set up. Returns the
    /// stalled block.
    pub(in crate::lock) fn skips_a_stalled_waiter<P: SkipPolicy>(
        fresh: Option<u64>,
        state: u32,
        stall: impl FnOnce(&'static ContextBlock),
    ) -> &'static ContextBlock {
        let l = SkipQueue::<P>::new();
        let g = l.lock();
        let cb = crate::sched::unregistered_block();
        cb.publish_heartbeat();
        stall(cb);
        let ghost = Box::leak(Box::new(SkipNode::new()));
        ghost
            .owner
            .store(cb as *const _ as *mut _, Ordering::Relaxed);
        ghost.state.store(state, Ordering::Relaxed);
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
            if let Some(age) = fresh {
                // Relaxed: a hint, as `publish_heartbeat`'s store.
                cb.peer.heartbeat.store(
                    crate::util::clock::now_ns().saturating_sub(age),
                    Ordering::Relaxed,
                );
            }
            // SAFETY: `g` came from `l.lock()` on this thread.
            unsafe { l.unlock(g) };
            // The releaser has decided on the ghost before returning.
            let v = ghost.state.load(Ordering::Acquire);
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
        cb
    }

    /// A waiter that parked and does not come back (a thread that announced
    /// PARKED and sleeps on, as under a long wake-up delay) is woken and then
    /// skipped, never handed the lock — for every policy.
    fn a_parked_waiter_is_woken_and_skipped<P: SkipPolicy>() {
        let cb = skips_a_stalled_waiter::<P>(Some(0), PARKED, |_| ());
        // The releaser bumped the sleeper's wake word (one wake when it found
        // it parked, as it does ahead of a turn).
        assert_ne!(
            crate::sched::waiter::wake_word(cb).load(Ordering::Relaxed),
            0,
            "the parked waiter was never woken"
        );
    }

    /// For a no-preempt policy: a waiter handed the lock runs its critical
    /// section unpreemptable (Smart-Q: the releaser's CAS made it
    /// `OtherUnpreemptable`; Handshaking: it resumed its request before
    /// acknowledging; either, served from an empty queue after a skip: it
    /// resumed its own request). 20 hand-overs to a thread queued behind us.
    /// Natively a thread's own request is its depth count, so
    /// this accepts either; the state-word protocol of threads attached to the
    /// pseudo-scheduler is checked by `tests/emulated.rs`'s signal storm, which
    /// runs Smart-Q and Queued-Handshaking attached.
    pub(in crate::lock) fn new_holder_is_unpreemptable<P: SkipPolicy>() {
        let mut l = SkipQueue::<P>::new();
        // A releaser as patient as a loaded test machine needs: B is handed
        // the lock (not skipped for answering late), which is what is checked.
        l.patience_ns = 1_000_000_000;
        for _ in 0..20 {
            let g = l.lock();
            // Relaxed: a look at who is last in the queue (our node, then B's).
            let mine = l.tail.load(Ordering::Relaxed);
            std::thread::scope(|s| {
                let b = s.spawn(|| {
                    let g = l.lock();
                    let me = crate::sched::current();
                    // Natively a thread's own request is its depth count alone
                    // (the state word stays Preemptable); a releaser's hand-off
                    // CAS (Smart-Q) shows in the state word.
                    let state = (me.state(), me.no_preempt_requested());
                    // SAFETY: acquired just above on this thread.
                    unsafe { l.unlock(g) };
                    state
                });
                // B queued behind us.
                while l.tail.load(Ordering::Relaxed) == mine {
                    crate::sched::yield_now();
                }
                // SAFETY: `g` came from `l.lock()` on this thread.
                unsafe { l.unlock(g) };
                let (state, requested) = b.join().unwrap();
                assert!(
                    state.is_unpreemptable() || requested,
                    "the new holder ran its critical section {state:?}, no-preempt requested: {requested}"
                );
            });
        }
    }

    /// A holder handed the lock after a wait wakes its parked successor one
    /// step ahead of its turn: `PARKED` → `WOKEN` and a bump of the
    /// successor's wake word.
    #[test]
    fn the_new_holder_wakes_its_successor_one_step_ahead() {
        let cb = crate::sched::unregistered_block();
        let me = SkipNode::new();
        let succ = SkipNode::new();
        succ.owner
            .store(cb as *const _ as *mut _, Ordering::Relaxed);
        succ.state.store(PARKED, Ordering::Relaxed);
        me.next
            .store(&succ as *const _ as *mut SkipNode, Ordering::Relaxed);
        let word = crate::sched::waiter::wake_word(cb).load(Ordering::Relaxed);
        SkipQueue::<crate::lock::TpPolicy>::wake_successor(&me);
        assert_eq!(succ.state.load(Ordering::Relaxed), WOKEN);
        assert_ne!(
            crate::sched::waiter::wake_word(cb).load(Ordering::Relaxed),
            word,
            "the parked successor was not woken"
        );
        // A spinning successor is left alone.
        succ.state.store(WAITING, Ordering::Relaxed);
        SkipQueue::<crate::lock::TpPolicy>::wake_successor(&me);
        assert_eq!(succ.state.load(Ordering::Relaxed), WAITING);
    }

    /// Where the kernel does not answer for the new holder (eBPF off or not
    /// permitted; here a block the eBPF program never registered), taking the
    /// lock publishes a fresh heartbeat — also from an empty queue, where the
    /// thread published none while waiting — so that waiters judging the
    /// holder by heartbeats do not find it preempted and park at once.
    #[test]
    fn a_new_holder_without_kernel_answers_publishes_a_heartbeat() {
        let cb = crate::sched::unregistered_block();
        // Relaxed: test setup before the block is shared.
        cb.peer.heartbeat.store(1, Ordering::Relaxed); // long ago: looks preempted
        assert!(crate::sched::is_preempted(cb));
        let l = SkipQueue::<crate::lock::SmartQPolicy>::new();
        let before = crate::util::clock::now_ns();
        l.acquired(cb);
        assert!(
            cb.heartbeat_ns() >= before,
            "no fresh heartbeat at the acquisition: {} < {before}",
            cb.heartbeat_ns()
        );
        assert_eq!(
            l.holder().map(|h| h as *const ContextBlock),
            Some(cb as *const ContextBlock)
        );
    }

    /// With heartbeats only, a waiter whose heartbeat is fresh by the general
    /// threshold but older than [`GRANT_FRESH_NS`] is skipped as not running
    /// by Smart-Q and MCS-TP, not by Queued-Handshaking, whose handshake asks
    /// the waiter itself ([`SkipPolicy::ASKS_THE_WAITER`]).
    #[test]
    #[cfg_attr(miri, ignore = "real time: heartbeat ages")]
    fn only_policies_that_do_not_ask_the_waiter_skip_by_heartbeat_age() {
        use super::super::{HandshakePolicy, SmartQPolicy, TpPolicy};
        let cb = crate::sched::unregistered_block();
        let threshold = crate::sched::native::heartbeat_threshold().as_nanos() as u64;
        assert!(GRANT_FRESH_NS < threshold);
        // Older than the grant's limit, well within the general threshold.
        let age = GRANT_FRESH_NS + (threshold - GRANT_FRESH_NS) / 4;
        // A round counts only if it ran before the heartbeat aged past the
        // general threshold (this thread may be preempted in between).
        for _ in 0..1000 {
            let t0 = crate::util::clock::now_ns();
            // Relaxed: test setup; the block is not shared.
            cb.peer.heartbeat.store(t0 - age, Ordering::Relaxed);
            let seen = (
                not_running::<TpPolicy>(cb),
                not_running::<SmartQPolicy>(cb),
                not_running::<HandshakePolicy>(cb),
            );
            if crate::util::clock::now_ns() - t0 + age < threshold {
                assert_eq!(
                    seen,
                    (true, true, false),
                    "(MCS-TP, Smart-Q, Queued-Handshaking) skipping a waiter whose heartbeat is {age} ns old"
                );
                return;
            }
        }
        panic!("1000 rounds each outlasted the heartbeat threshold (a machine this loaded?)");
    }

    #[test]
    #[cfg_attr(miri, ignore = "real time: the releaser's patience is a clock")]
    fn parked_waiters_are_woken_and_skipped() {
        a_parked_waiter_is_woken_and_skipped::<super::super::SmartQPolicy>();
        a_parked_waiter_is_woken_and_skipped::<super::super::HandshakePolicy>();
        a_parked_waiter_is_woken_and_skipped::<super::super::TpPolicy>();
    }
}
