//! CLH-TP: the time-published CLH lock of He, Scherer & Scott (HiPC 2005): a CLH
//! queue whose waiters remove a *preempted predecessor* from the queue, so the
//! lock is never handed to a thread that is not running — without kernel help.
//!
//! As in [`super::Clh`], a waiter spins on its predecessor's node. A waiter whose
//! predecessor is itself a waiter that looks preempted ([`sched::is_preempted`]:
//! the scheduler says `Preempted`, the kernel does, or its published heartbeat
//! is stale) unlinks it: it marks that node *removed* and from then on spins on
//! the node before it. The removed thread notices when it runs again and
//! enqueues anew.
//!
//! ## Waiting (issue 13 §2)
//!
//! Waiters wait through the one waiting policy, [`sched::Waiter`], watching the
//! predecessor's owner: they spin while it runs; the queue head (whose
//! predecessor holds the lock) **parks** when the holder is preempted —
//! spinning then only takes the processor it needs — or when the holder has
//! not released for [`PATIENCE`]. A waiter behind another waiter never parks:
//! the lock would reach it asleep (a convoy of wake-ups); it removes a
//! preempted predecessor, and a *parked* one as soon as the lock is free in
//! front of it (waking it to enqueue again), and takes the lock itself. No
//! native `sched_yield`: a thread attached to the emulated scheduler gives its
//! virtual processor away through [`sched::yield_now`] instead of sleeping, as
//! in the paper.
//!
//! A CLH releaser writes only its own node and does not know its successor, so
//! a waiter that parks leaves word on the node it waits on: it writes its
//! context block into that node's `sleeper` and sets the node's [`SLEEPY`] flag
//! by CAS against the state it read. The node's owner clears the flag, and
//! wakes the sleeper ([`sched::wake`]), whenever it moves its own word to
//! HOLDING (one step ahead of the sleeper's turn: it is spinning again by the
//! time the lock comes) or RELEASED. All of the owner's own transitions are CASes
//! (or the release swap) that see the flag, so a wake cannot be lost: the
//! sleeper took its wake token before its flag CAS, and either the owner's
//! transition came first (the flag CAS fails: no sleep) or it reads the flag.
//! A parked waiter also shows PARKED in its own word, so that the waiter behind
//! it, if it removes it, wakes it to enqueue again.
//!
//! Not handled: a parked queue head with nobody spinning behind it is still
//! handed the lock when the holder releases (a CLH release is a store to the
//! releaser's own node), and takes it after its wake-up.
//!
//! ## The status word
//! Each node has one word, `generation << 4 | SLEEPY | state`; the generation
//! grows every time the owner enqueues the node and every time it edits its own
//! `prev` link, so a remover's CAS cannot succeed against a link it did not read.
//!
//! | state    | set by                         | meaning                                          |
//! |----------|--------------------------------|--------------------------------------------------|
//! | WAITING  | the owner, enqueuing/after BUSY/PARKED | waiting for the predecessor; may be removed; also the uncontended holder's word (its null `prev` makes it unremovable) |
//! | BUSY     | the owner, by CAS from WAITING | editing its own `prev` (removing *its* pred)     |
//! | REMOVED  | the successor, by CAS          | unlinked while presumed preempted: enqueue again |
//! | HOLDING  | the owner, by CAS from WAITING | holds the lock; cannot be removed                |
//! | RELEASED | the owner, leaving the CS      | the successor may take the lock and this node    |
//! | PARKED   | the owner, by CAS from WAITING | sleeps; a remover wakes it                       |
//!
//! | flag     | set by                         | cleared by                                       |
//! |----------|--------------------------------|--------------------------------------------------|
//! | SLEEPY   | the successor, by CAS, before it sleeps (`sleeper` written first) | the owner, moving to HOLDING/RELEASED (then it wakes `sleeper`); a remover (REMOVED) |
//!
//! Why it is safe: only a node's current successor may remove it, and a waiter
//! acts on its predecessor (removes it, or takes the lock from it) only after a
//! CAS on its *own* word proves it is still queued (BUSY, or WAITING → HOLDING).
//! A node is referenced by the queue until its successor takes it over (after
//! RELEASED) or removes it, so a queued waiter's predecessor is never recycled
//! under it. Threads that were removed may still read nodes they no longer own;
//! nodes are therefore *type-stable*: they come from a global pool and are never
//! freed (the pool is as large as the most nodes ever in use at once). A waker
//! that reads `sleeper` from a node recycled meanwhile wakes some thread
//! spuriously, which every sleeper tolerates (it re-checks).
//!
//! Uses `sched`: `current`, `is_preempted`, heartbeats, [`sched::Waiter`],
//! [`sched::wake`], and (emulated only) `yield_now`.
//! Progress: FIFO among running waiters; a preempted waiter loses its place.
//!
//! ```
//! use mpsync::{Mutex, lock::ClhTp};
//! let m: Mutex<ClhTp, Vec<u8>> = Mutex::new(vec![]);
//! m.lock().push(1);
//! let g = m.lock();
//! let other: Mutex<ClhTp, u8> = Mutex::new(0);
//! *other.lock() += 1; // nested acquisitions each take their own node
//! drop(g);
//! assert_eq!(m.lock().len(), 1);
//! ```

use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use std::time::Duration;

use crate::sched::{self, ContextBlock, Wait, Waiter, stall, waiter::CHECK_EVERY};
use crate::sync::{AtomicPtr, AtomicU64, Ordering};

const WAITING: u64 = 0;
const BUSY: u64 = 1;
const REMOVED: u64 = 2;
const HOLDING: u64 = 3;
const RELEASED: u64 = 4;
const PARKED: u64 = 5;
/// The successor sleeps on this node (table in the module doc).
pub const SLEEPY: u64 = 1 << 3;
const STATE_BITS: u32 = 4;
const STATE_MASK: u64 = 0b111;

/// How long a waiter spins while nothing moves ahead of it and the thread it
/// watches runs, before it parks: far above a queue of running critical
/// sections, far below a scheduler quantum, so that parking for patience
/// stays rare (a wake-up costs tens of µs).
pub const PATIENCE: Duration = Duration::from_micros(200);

#[inline]
const fn pack(generation: u64, state: u64) -> u64 {
    (generation << STATE_BITS) | state
}
#[inline]
const fn state(word: u64) -> u64 {
    word & STATE_MASK
}
#[inline]
const fn generation(word: u64) -> u64 {
    word >> STATE_BITS
}

/// A CLH-TP queue node (type-stable: never freed, see the module doc).
#[derive(Debug)]
struct TpNode {
    /// `generation << 3 | state` (see the table in the module doc).
    status: AtomicU64,
    /// The node this waiter spins on; written only by the owner, before the
    /// status store that publishes it (or null while not yet known).
    prev: AtomicPtr<TpNode>,
    /// The thread queued on this node.
    owner: AtomicPtr<ContextBlock>,
    /// The successor that sleeps on this node (valid while SLEEPY is set).
    sleeper: AtomicPtr<ContextBlock>,
}

impl TpNode {
    fn new() -> Self {
        Self {
            status: AtomicU64::new(pack(0, RELEASED)),
            prev: AtomicPtr::new(ptr::null_mut()),
            owner: AtomicPtr::new(ptr::null_mut()),
            sleeper: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Moves the owner's own word from `from` (with or without [`SLEEPY`]) to
    /// `to`, keeping the flag if `keep`, else clearing it and waking the
    /// sleeper. `Err` (the word seen) if the word is no longer `from`: a
    /// successor removed us. Owner only.
    #[inline]
    fn own_cas(&self, from: u64, to: u64, keep: bool) -> Result<(), u64> {
        let mut cur = from;
        loop {
            let new = if keep { to | (cur & SLEEPY) } else { to };
            // AcqRel: Acquire pairs with the successor's Release flag CAS (so
            // `sleeper` is seen) and with a remover's CAS; Release publishes
            // what we did before (the critical section, a new link, a wake
            // token taken before a PARKED announcement).
            match self
                .status
                .compare_exchange(cur, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    if !keep && cur & SLEEPY != 0 {
                        self.wake_sleeper();
                    }
                    return Ok(());
                }
                // Only the flag differs (the successor set it): retry with it.
                Err(a) if a & !SLEEPY == from => cur = a,
                Err(a) => return Err(a),
            }
        }
    }

    /// Wakes the successor that set [`SLEEPY`] (after the RMW that cleared it).
    #[cold]
    #[inline(never)]
    fn wake_sleeper(&self) {
        // Acquire: pairs with the Release store of `sleeper` in `park`, so the
        // block we wake is seen initialized even when the value read is a later
        // successor's than the one whose flag our RMW read (a spurious wake,
        // tolerated; so is one from a node recycled meanwhile).
        let p = self.sleeper.load(Ordering::Acquire);
        // SAFETY: context blocks are never freed.
        if let Some(cb) = unsafe { p.as_ref() } {
            stall::point(stall::WAITER_WAKE);
            sched::wake(cb);
        }
    }

    /// The queued thread's context block.
    fn owner(&self) -> &'static ContextBlock {
        // Relaxed: written before the node was published by the owner's AcqRel
        // tail swap, which the reader's own swap (Acquire) follows.
        let p = self.owner.load(Ordering::Relaxed);
        // SAFETY: set to a `&'static ContextBlock` (blocks are never freed) before
        // the node is enqueued; a reader sees the node only after that.
        unsafe { &*p }
    }
}

/// The type-stable node pool: per-thread caches over a global spare list; every
/// node ever allocated is also kept in `ALL`, so none is ever freed (a removed
/// waiter may still read a node it no longer owns) and none is lost.
#[cfg(not(loom))]
mod pool {
    use super::TpNode;
    use std::cell::RefCell;
    use std::sync::Mutex;

    static ALL: Mutex<Vec<&'static TpNode>> = Mutex::new(Vec::new());
    static SPARE: Mutex<Vec<&'static TpNode>> = Mutex::new(Vec::new());

    struct Cache(RefCell<Vec<&'static TpNode>>);

    impl Drop for Cache {
        fn drop(&mut self) {
            let mut spare = SPARE.lock().unwrap_or_else(|e| e.into_inner());
            spare.append(self.0.get_mut());
        }
    }

    thread_local! {
        static CACHE: Cache = const { Cache(RefCell::new(Vec::new())) };
    }

    /// A node from this thread's cache (the uncontended path: inlined), else
    /// from the spare list or new.
    #[inline]
    pub(super) fn take() -> &'static TpNode {
        match CACHE.try_with(|c| c.0.borrow_mut().pop()) {
            Ok(Some(n)) => n,
            _ => take_slow(),
        }
    }

    #[cold]
    #[inline(never)]
    fn take_slow() -> &'static TpNode {
        if let Some(n) = SPARE.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return n;
        }
        let n: &'static TpNode = Box::leak(Box::new(TpNode::new()));
        ALL.lock().unwrap_or_else(|e| e.into_inner()).push(n);
        n
    }

    #[inline]
    pub(super) fn give(n: &'static TpNode) {
        if CACHE.try_with(|c| c.0.borrow_mut().push(n)).is_err() {
            give_slow(n);
        }
    }

    #[cold]
    #[inline(never)]
    fn give_slow(n: &'static TpNode) {
        SPARE.lock().unwrap_or_else(|e| e.into_inner()).push(n);
    }
}

/// Under loom: nodes are leaked (type-stable for the model's lifetime) and
/// recycled through a per-thread list.
#[cfg(loom)]
mod pool {
    use super::TpNode;
    use std::cell::RefCell;

    loom::thread_local! {
        static CACHE: RefCell<Vec<&'static TpNode>> = RefCell::new(Vec::new());
    }

    pub(super) fn take() -> &'static TpNode {
        CACHE
            .with(|c| c.borrow_mut().pop())
            .unwrap_or_else(|| Box::leak(Box::new(TpNode::new())))
    }

    pub(super) fn give(n: &'static TpNode) {
        CACHE.with(|c| c.borrow_mut().push(n));
    }
}

/// The CLH-TP queue lock.
pub struct ClhTp {
    tail: AtomicPtr<TpNode>,
    /// Waiters removed so far (diagnostic).
    removed: AtomicU64,
}

impl std::fmt::Debug for ClhTp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClhTp")
            // Relaxed: diagnostic snapshots.
            .field("locked", &!self.tail.load(Ordering::Relaxed).is_null())
            .field("removed", &self.removed.load(Ordering::Relaxed))
            .finish()
    }
}

/// Guard state of [`ClhTp`]: the holder's node. Not `Send`.
#[derive(Debug)]
pub struct ClhTpGuard {
    node: NonNull<TpNode>,
    _not_send: PhantomData<*mut ()>,
}

impl ClhTp {
    /// An unlocked lock.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            tail: AtomicPtr::new(ptr::null_mut()),
            removed: AtomicU64::new(0),
        }
    }

    /// An unlocked lock.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            tail: AtomicPtr::new(ptr::null_mut()),
            removed: AtomicU64::new(0),
        }
    }

    /// Preempted waiters removed from the queue so far.
    pub fn removed(&self) -> u64 {
        // Relaxed: a statistic.
        self.removed.load(Ordering::Relaxed)
    }

    /// Readies `me` for one enqueue by `cb` with a new generation; returns the
    /// WAITING word.
    fn prepare(me: &TpNode, cb: &'static ContextBlock) -> u64 {
        // Relaxed: only the owner writes its status outside the queue.
        let g = generation(me.status.load(Ordering::Relaxed)).wrapping_add(1);
        let w = pack(g, WAITING);
        // Relaxed (all three): published by the AcqRel tail swap that enqueues.
        me.owner.store(
            cb as *const ContextBlock as *mut ContextBlock,
            Ordering::Relaxed,
        );
        me.prev.store(ptr::null_mut(), Ordering::Relaxed);
        me.status.store(w, Ordering::Relaxed);
        w
    }

    fn guard(node: &'static TpNode) -> ClhTpGuard {
        ClhTpGuard {
            node: NonNull::from(node),
            _not_send: PhantomData,
        }
    }

    /// The contended part of `lock`: `me` (status `mine`) was swapped into
    /// the tail behind `pred`; links and waits. Returns `true` holding the
    /// lock, `false` if `me` was removed from the queue (enqueue again). Out
    /// of line, so that the uncontended path stays small.
    #[inline(never)]
    fn enqueued(&self, me: &'static TpNode, mine: u64, pred: NonNull<TpNode>) -> bool {
        // We will wait: a fresh heartbeat before anyone can judge us by it.
        // A successor judges us only once it sees our link (a null `prev`
        // makes us unremovable), which the Release store below publishes
        // after this; no clock read on the uncontended path.
        me.owner().publish_heartbeat();
        // Until the link below, our successor cannot remove our predecessor
        // through us (it sees a null `prev`), and nobody waits on it.
        stall::point(stall::QUEUE_LOCK_LINK);
        // Release: a remover's Acquire status load then sees our link.
        me.prev.store(pred.as_ptr(), Ordering::Release);
        // SAFETY: queued nodes are type-stable (never freed).
        let pred: &'static TpNode = unsafe { &*pred.as_ptr() };
        self.wait(me, mine, pred)
    }

    /// Waits as `me` (status `mine`) behind `pred`. Returns `true` holding the
    /// lock, `false` if `me` was removed from the queue (enqueue again).
    fn wait(&self, me: &'static TpNode, mut mine: u64, mut pred: &'static TpNode) -> bool {
        let cb = me.owner();
        let emulated = sched::emulated::is_attached(cb);
        let mut waiter = Waiter::with_patience_ns(PATIENCE.as_nanos() as u64);
        let mut spins = 0u32;
        let mut last_seen = u64::MAX;
        loop {
            // Every CHECK_EVERY spins, a look at the predecessor's thread and
            // at our own word (a look reads lines other threads write).
            let look = spins.is_multiple_of(CHECK_EVERY);
            spins = spins.wrapping_add(1);
            // Acquire: pairs with the predecessor's Release RELEASED swap (its
            // critical section) and with its Release CAS after editing `prev`.
            let ps = pred.status.load(Ordering::Acquire);
            match state(ps) {
                RELEASED => {
                    // Take the lock unless our successor removed us meanwhile; if
                    // it did, `pred` may no longer be ours to take. Wakes our
                    // sleeping successor, one step ahead of its turn.
                    return match me.own_cas(mine, pack(generation(mine), HOLDING), false) {
                        Ok(()) => {
                            // The predecessor's node is ours now.
                            pool::give(pred);
                            true
                        }
                        Err(_) => false,
                    };
                }
                // Relaxed pre-check of the link: `remove` re-reads it with Acquire.
                WAITING | PARKED
                    if look
                        && !pred.prev.load(Ordering::Relaxed).is_null()
                        && (sched::is_preempted(pred.owner())
                            || (state(ps) == PARKED && Self::free_ahead_of(pred))) =>
                {
                    match self.remove(me, mine, pred, ps) {
                        Some((m, p)) => {
                            mine = m;
                            let moved = !ptr::eq(p, pred);
                            pred = p;
                            if moved {
                                waiter.restart();
                                continue;
                            }
                            // Not removed (it moved on meanwhile): wait as usual.
                        }
                        None => return false,
                    }
                }
                _ => {}
            }
            if ps & !SLEEPY != last_seen {
                // Progress ahead of us: the patience starts over.
                last_seen = ps & !SLEEPY;
                waiter.restart();
            }
            if look {
                // Acquire: pairs with the remover's AcqRel CAS.
                if me.status.load(Ordering::Acquire) & !SLEEPY != mine {
                    return false; // removed while we looked preempted
                }
                // For the heartbeat fallback of `is_preempted`.
                if !cfg!(loom) {
                    cb.publish_heartbeat();
                }
            }
            if waiter.spin(Some(pred.owner())) == Wait::Park {
                if !emulated && !Self::is_holder(pred, ps) {
                    // Park only behind the holder: behind a waiter, the lock
                    // would be handed to us asleep when it moves (a convoy of
                    // wake-ups); a parked waiter ahead is removed instead.
                    waiter.restart();
                    continue;
                }
                if emulated {
                    // The paper's waiting: give the virtual processor away.
                    sched::yield_now();
                    cb.publish_heartbeat();
                } else if !self.park(me, mine, pred, ps) {
                    return false;
                }
                waiter.restart();
            }
        }
    }

    /// Whether `pred` (word `ps`) holds the lock: HOLDING, or the WAITING
    /// word of an uncontended holder (null `prev`; also, briefly, a waiter
    /// that has not linked yet).
    #[inline]
    fn is_holder(pred: &TpNode, ps: u64) -> bool {
        match state(ps) {
            HOLDING => true,
            // Relaxed: a hint for whether to park; a wrong answer costs time only.
            WAITING => pred.prev.load(Ordering::Relaxed).is_null(),
            _ => false,
        }
    }

    /// Whether the lock is free in front of the sleeping waiter `pred`: its
    /// predecessor released. It must not be handed the lock asleep, so its
    /// successor removes it (waking it) and takes the lock itself.
    #[inline]
    fn free_ahead_of(pred: &TpNode) -> bool {
        // Acquire: pairs with pred's Release link store.
        let pp = pred.prev.load(Ordering::Acquire);
        // SAFETY: nodes are type-stable (never freed); a stale answer only
        // makes `remove`'s CAS against `ps` decide.
        !pp.is_null() && state(unsafe { &*pp }.status.load(Ordering::Relaxed)) == RELEASED
    }

    /// Sleeps as `me` (status `mine`) on `pred`, whose word was `ps`, until
    /// its owner moves its word to HOLDING or RELEASED, or a remover wakes us
    /// (module doc). `false` if we were removed.
    fn park(&self, me: &'static TpNode, mine: u64, pred: &'static TpNode, ps: u64) -> bool {
        if !matches!(state(ps), WAITING | BUSY | HOLDING | PARKED) {
            return true; // RELEASED: take it; (REMOVED: only we remove pred)
        }
        let cb = me.owner();
        let g = generation(mine);
        // [1] Token first: a wake after it is not lost (sched::waiter).
        let t = Waiter::token();
        // [2] Pin ourselves (BUSY: nobody removes us), so that we are still
        // pred's successor when we write its `sleeper`: a waiter that removed
        // us and parked on pred in our place must not have its `sleeper`
        // overwritten by ours (a lost wake-up the loom model
        // `clh_tp_removal_vs_handoff` finds).
        let busy = pack(g, BUSY);
        if me.own_cas(mine, busy, true).is_err() {
            return false;
        }
        // [3] Release: pairs with the Acquire load in `wake_sleeper` (which may
        // read it without reading our flag CAS [5]).
        pred.sleeper.store(
            cb as *const ContextBlock as *mut ContextBlock,
            Ordering::Release,
        );
        // [4] Show that we sleep, so that a remover wakes us.
        let parked = pack(g, PARKED);
        let r = me.own_cas(busy, parked, true);
        debug_assert!(r.is_ok(), "a BUSY node is not removable");
        // [5] The flag, against the state we read: if pred's owner moved its
        // word since, the CAS fails and we do not sleep; if it moves it later,
        // its RMW sees the flag and wakes us (after our token [1]). ps may
        // already carry the flag (set by a waiter we removed): a no-op CAS
        // that still publishes [3]. AcqRel: Release publishes [3]; Acquire
        // pairs with pred's owner's transitions.
        if pred
            .status
            .compare_exchange(ps, ps | SLEEPY, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            stall::point(stall::WAITER_PARK);
            Waiter::sleep(t, None);
        }
        // [6] Running again: back to WAITING (unless removed meanwhile).
        me.own_cas(parked, mine, true).is_ok()
    }

    /// Removes the presumed-preempted waiter `pred` (whose word was `ps`) from
    /// in front of `me`. Returns our new (status, predecessor), or `None` if
    /// we were removed ourselves.
    fn remove(
        &self,
        me: &'static TpNode,
        mine: u64,
        pred: &'static TpNode,
        ps: u64,
    ) -> Option<(u64, &'static TpNode)> {
        let g = generation(mine);
        // [1] Pin ourselves in the queue: while BUSY nobody removes us, so `pred`
        // stays our predecessor and cannot be recycled. (Keeps a SLEEPY flag:
        // our sleeping successor waits for HOLDING or RELEASED.)
        if me.own_cas(mine, pack(g, BUSY), true).is_err() {
            return None;
        }
        let mut new_pred = pred;
        // [2] `pred`'s link, read after its status `ps` (Acquire above): if pred
        // edits its link after this read, its word leaves `ps` and [3] fails.
        // Acquire: pairs with pred's Release link store.
        if let Some(pp) = NonNull::new(pred.prev.load(Ordering::Acquire)) {
            // [3] The CAS decides against pred claiming the lock (WAITING →
            // HOLDING) or pinning itself (→ BUSY).
            // AcqRel: totally ordered with pred's own CASes on the word.
            if pred
                .status
                .compare_exchange(
                    ps,
                    pack(generation(ps), REMOVED),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                // SAFETY: `pp` is pred's predecessor and, pred being unlinked
                // now, ours; queued nodes are type-stable (never freed).
                new_pred = unsafe { &*pp.as_ptr() };
                // Relaxed: published by the Release status store below.
                me.prev.store(pp.as_ptr(), Ordering::Relaxed);
                // Relaxed: a statistic.
                self.removed.fetch_add(1, Ordering::Relaxed);
                if state(ps) == PARKED {
                    // It sleeps: wake it to enqueue again. (Its block, read
                    // after the CAS: the owner re-enqueues the node under the
                    // same block.)
                    stall::point(stall::WAITER_WAKE);
                    sched::wake(pred.owner());
                }
            }
        }
        // [4] Back to WAITING with a new generation, publishing the new link
        // (Release in `own_cas`: pairs with a would-be remover's Acquire status
        // load [2]). Only our successor's flag can have changed the word.
        let w = pack(g.wrapping_add(1), WAITING);
        let r = me.own_cas(pack(g, BUSY), w, true);
        debug_assert!(r.is_ok(), "a BUSY node is not removable");
        Some((w, new_pred))
    }
}

impl Default for ClhTp {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: the holder is the thread whose node became the tail of an empty queue,
// or whose WAITING → HOLDING CAS succeeded after its predecessor was RELEASED; a
// node is RELEASED once and taken over by the one thread still queued behind it
// (a removed waiter's CAS fails). Acquire/Release as commented at each step.
unsafe impl lock_api::RawMutex for ClhTp {
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(not(loom))]
    const INIT: Self = Self::new();
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(loom)]
    const INIT: Self = panic!("under loom, use ClhTp::new()");

    type Guard = ClhTpGuard;

    fn lock(&self) -> Self::Guard {
        let cb = sched::current();
        let me = pool::take();
        loop {
            let mine = Self::prepare(me, cb);
            // AcqRel: Release publishes our node's fields to the successor;
            // Acquire orders us after the predecessor's enqueue.
            let pred = self
                .tail
                .swap(me as *const TpNode as *mut TpNode, Ordering::AcqRel);
            let Some(pred) = NonNull::new(pred) else {
                // An empty queue: ours. Our word stays WAITING with a null
                // `prev`: nobody can remove us (a remover needs the link), and
                // only our own `unlock` moves the word on — one store fewer on
                // the uncontended path than a HOLDING store.
                return Self::guard(me);
            };
            if self.enqueued(me, mine, pred) {
                return Self::guard(me);
            }
            // Removed: nobody refers to our node as a predecessor any more.
        }
    }

    fn try_lock(&self) -> Option<Self::Guard> {
        let me = pool::take();
        let mine = Self::prepare(me, sched::current());
        // Relaxed: published by the CAS below.
        me.status
            .store(pack(generation(mine), HOLDING), Ordering::Relaxed);
        // AcqRel: as the swap in `lock`; only on an empty queue.
        match self.tail.compare_exchange(
            ptr::null_mut(),
            me as *const TpNode as *mut TpNode,
            Ordering::AcqRel,
            Ordering::Relaxed,
        ) {
            Ok(_) => Some(Self::guard(me)),
            Err(_) => {
                pool::give(me);
                None
            }
        }
    }

    unsafe fn unlock(&self, guard: Self::Guard) {
        // SAFETY: nodes are type-stable; the caller's contract makes this the
        // holder's node.
        let me: &'static TpNode = unsafe { &*guard.node.as_ptr() };
        // Release: publishes the critical section to the next acquirer's swap.
        if self
            .tail
            .compare_exchange(
                me as *const TpNode as *mut TpNode,
                ptr::null_mut(),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            pool::give(me);
            return;
        }
        // A successor waits on our node and takes it over.
        // Relaxed: our own word; only the successor's SLEEPY flag changes it
        // (the swap below sees that).
        let g = generation(me.status.load(Ordering::Relaxed));
        // AcqRel: Release pairs with the successor's Acquire load in `wait`;
        // Acquire with its Release flag CAS, so `sleeper` is seen.
        let old = me.status.swap(pack(g, RELEASED), Ordering::AcqRel);
        if old & SLEEPY != 0 {
            me.wake_sleeper();
        }
    }

    fn is_locked(&self) -> bool {
        // Relaxed: a momentary snapshot.
        !self.tail.load(Ordering::Relaxed).is_null()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sched::{Actor, ThreadState};
    use lock_api::RawMutex;

    #[test]
    fn word_packing() {
        let w = pack(41, BUSY);
        assert_eq!((generation(w), state(w)), (41, BUSY));
        assert_eq!(state(pack(u64::MAX >> STATE_BITS, RELEASED)), RELEASED);
    }

    /// A waiter queued behind the holder whose thread is "preempted" (a ghost
    /// node driven by hand) is removed by the live waiter behind it, which then
    /// gets the lock from the holder directly.
    #[test]
    fn removes_a_preempted_waiter() {
        let l = ClhTp::new();
        let g = l.lock();
        static KEEP: std::sync::Mutex<Vec<&'static ContextBlock>> =
            std::sync::Mutex::new(Vec::new());
        let cb: &'static ContextBlock = Box::leak(Box::new(ContextBlock::new()));
        KEEP.lock().unwrap_or_else(|e| e.into_inner()).push(cb);
        cb.transition(
            ThreadState::Preemptable,
            ThreadState::Preempted,
            Actor::Kernel,
        )
        .unwrap();
        let ghost = pool::take();
        let w = ClhTp::prepare(ghost, cb);
        let holder = l.tail.swap(ghost as *const _ as *mut _, Ordering::AcqRel);
        ghost.prev.store(holder, Ordering::Release);
        std::thread::scope(|s| {
            let live = s.spawn(|| {
                let g = l.lock();
                // SAFETY: acquired just above on this thread.
                unsafe { l.unlock(g) };
            });
            while ghost.status.load(Ordering::Acquire) == w {
                std::hint::spin_loop();
            }
            assert_eq!(state(ghost.status.load(Ordering::Acquire)), REMOVED);
            // SAFETY: `g` came from `l.lock()` on this thread.
            unsafe { l.unlock(g) };
            live.join().unwrap();
        });
        assert_eq!(l.removed(), 1);
        assert!(!l.is_locked());
        // The ghost's owner would now enqueue again; here it just returns it.
        pool::give(ghost);
    }

    /// Natively, a waiter behind a holder that is preempted parks (it flags
    /// the holder's node SLEEPY and shows PARKED) instead of spinning or
    /// yielding, and the holder's release wakes it: it then gets the lock.
    /// A lost wake-up shows as the waiter never finishing (bounded wait).
    #[test]
    fn waiter_parks_behind_a_preempted_holder_and_is_woken() {
        use std::sync::mpsc::channel;
        use std::time::{Duration, Instant};
        let l: &'static ClhTp = Box::leak(Box::new(ClhTp::new()));
        let g = l.lock();
        // SAFETY: nodes are type-stable.
        let holder_node: &'static TpNode = unsafe { &*g.node.as_ptr() };
        let me = sched::current();
        me.transition(
            ThreadState::Preemptable,
            ThreadState::Preempted,
            Actor::Kernel,
        )
        .unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let g = l.lock();
            // SAFETY: acquired just above on this thread.
            unsafe { l.unlock(g) };
            tx.send(()).unwrap();
        });
        let start = Instant::now();
        while holder_node.status.load(Ordering::Acquire) & SLEEPY == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the waiter never parked on the preempted holder's node (word {:#x})",
                holder_node.status.load(Ordering::Acquire)
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        me.transition(
            ThreadState::Preempted,
            ThreadState::Preemptable,
            Actor::Kernel,
        )
        .unwrap();
        // SAFETY: `g` came from `l.lock()` on this thread.
        unsafe { l.unlock(g) };
        rx.recv_timeout(Duration::from_secs(20))
            .expect("the parked waiter was not woken by the release (lost wake-up)");
        assert!(!l.is_locked());
    }

    /// A holder that is the only node empties the queue and keeps its node; a
    /// waiter's takeover of the holder's node is exercised by the lock tests.
    #[test]
    fn try_lock_fails_while_held_and_gives_the_node_back() {
        let l = ClhTp::new();
        let g = l.try_lock().expect("free");
        assert!(l.try_lock().is_none());
        // SAFETY: `g` came from this lock on this thread.
        unsafe { l.unlock(g) };
        assert!(!l.is_locked());
    }
}
