//! CLH-TP: the time-published CLH lock of He, Scherer & Scott (HiPC 2005): a CLH
//! queue whose waiters remove a *preempted predecessor* from the queue, so the
//! lock is never handed to a thread that is not running — without kernel help.
//!
//! As in [`super::Clh`], a waiter spins on its predecessor's node. A waiter whose
//! predecessor is itself a waiter that looks preempted ([`sched::is_preempted`]:
//! the scheduler says `Preempted`, or its published heartbeat is stale) unlinks
//! it: it marks that node *removed* and from then on spins on the node before it.
//! The removed thread notices when it runs again and enqueues anew.
//!
//! ## When a waiter stops spinning
//! Natively — with the kernel's answers (eBPF) and with heartbeats only — a
//! waiter stops spinning when its predecessor is the holder and the kernel
//! says it is preempted ([`sched::native::kernel_preempted`], the eBPF
//! answer: the lock cannot move before the holder runs again), or when its
//! predecessor's node has not changed for longer than the heartbeat threshold
//! (a preempted holder without the kernel's answer, a long queue) and some
//! thread may be waiting for a CPU ([`sched::native::cpu_pressure`] true, or
//! unknown: with heartbeats only it is always unknown, so there the
//! threshold alone decides). It then *withdraws* first, with the timed
//! waiter's CAS (WAITING → ABANDONED, below), naps for [`NAP`] through
//! `sched` (a timed sleep on its own wake word, which nobody needs to wake)
//! and enqueues again at the tail with a fresh node. So the lock never waits
//! for a sleeping thread: a CLH release is a store to the releaser's own
//! node, taken by the waiter behind it by its own CAS, and a withdrawn node
//! is unlinked by the waiter behind it or the next arrival, which takes the
//! lock in its place. No lock calls `sched_yield` natively: a waiter staying
//! runnable behind a preempted holder queues with the spinners for the CPU
//! the holder needs. Under the emulated scheduler (and loom) a waiter past
//! the threshold instead gives its virtual processor away
//! ([`sched::yield_now`]) and keeps its place, as in the paper. The
//! waiting-time clock is read by waiters only, never on the uncontended path.
//!
//! Why withdraw and nap rather than yield: without the kernel's answer a
//! waiter cannot tell a preempted holder from a long queue; a `sched_yield`
//! that keeps its place collapsed on a 16-core machine at 32 threads
//! (0.06–0.17× parking_lot, `lock-oversub`, eBPF off) where the nap held
//! 0.78–1.10×. The measurements, and where the nap costs (cs1 points on 2
//! CPUs without eBPF): CHANGELOG.md.
//!
//! ## The status word
//! Each node has one word, `generation << 3 | state`; the generation grows every
//! time the owner enqueues the node and every time it edits its own `prev` link,
//! so a remover's CAS cannot succeed against a link it did not read.
//!
//! | state    | set by                         | meaning                                          |
//! |----------|--------------------------------|--------------------------------------------------|
//! | WAITING  | the owner, enqueuing/after BUSY| waiting for the predecessor; may be removed      |
//! | BUSY     | the owner, by CAS from WAITING | editing its own `prev` (removing *its* pred)     |
//! | REMOVED  | the successor, by CAS          | unlinked while presumed preempted: enqueue again |
//! | HOLDING  | the owner, by CAS from WAITING | holds the lock; cannot be removed                |
//! | RELEASED | the owner, leaving the CS      | the successor may take the lock and this node    |
//! | ABANDONED | a timed owner giving up, by CAS from WAITING | it left; the successor unlinks and keeps the node |
//!
//! Why it is safe: only a node's current successor may remove it, and a waiter
//! acts on its predecessor (removes it, or takes the lock from it) only after a
//! CAS on its *own* word proves it is still queued (BUSY, or WAITING → HOLDING).
//! A node is referenced by the queue until its successor takes it over (after
//! RELEASED) or removes it, so a queued waiter's predecessor is never recycled
//! under it. Threads that were removed may still read nodes they no longer own;
//! nodes are therefore *type-stable*: they come from a global pool and are never
//! freed (the pool is as large as the most nodes ever in use at once).
//!
//! ## Timed acquisition
//!
//! A timed waiter ([`lock_api::RawMutexTimed`]) reads the clock at every turn
//! of its wait (the untimed one never does) and, once its deadline has passed
//! and its predecessor has not released, gives up: it moves its own word from
//! WAITING to ABANDONED by CAS (`timed_lock.gave_up` just before) and leaves,
//! its node still linked. The lock reaches a waiter only through its own
//! WAITING → HOLDING CAS, so there is no grant to race: the CAS races only the
//! successor's removal (WAITING → REMOVED), exactly one wins, and a waiter
//! removed first gives up holding nothing (its node is its own again).
//!
//! The waiter behind an abandoned node unlinks it at once, as it unlinks a
//! preempted one, takes the node into its pool (its owner left), and waits on
//! the node before it — taking the lock if that one was released meanwhile.
//! An abandoned *tail* has no successor yet: the lock may be free behind it
//! (its predecessor released) while the tail is not null. The next arrival
//! unlinks it; `is_locked` walks back from the tail past abandoned nodes (free
//! if it reaches a released node), and `try_lock`, whose CAS on an empty
//! queue fails, makes the same walk and, if the lock is free, enqueues and
//! takes it as a timed acquisition with a deadline of now. Nodes left
//! abandoned by a lock that is dropped are not returned to the pool.
//!
//! Uses `sched`: `current`, `is_preempted`, heartbeats, the kernel's
//! preemption answer and CPU pressure, `Waiter::sleep` (the nap), `yield_now`
//! (emulated only).
//! Progress: FIFO among running waiters; a preempted waiter loses its place,
//! and so does one that withdraws to nap.
//!
//! ```
//! use mpsync::lock::{Mutex, ClhTp};
//! let m: Mutex<ClhTp, Vec<u8>> = Mutex::new(vec![]);
//! m.lock().push(1);
//! let g = m.lock();
//! let other: Mutex<ClhTp, u8> = Mutex::new(0);
//! *other.lock() += 1; // nested acquisitions each take their own node
//! drop(g);
//! assert_eq!(m.lock().len(), 1);
//!
//! // Timed: a waiter that gives up leaves its node abandoned in the queue;
//! // the lock, released behind it, reads free and is taken.
//! use std::time::Duration;
//! let g = m.lock();
//! std::thread::scope(|s| {
//!     s.spawn(|| assert!(m.try_lock_for(Duration::from_millis(1)).is_none()));
//! });
//! drop(g);
//! assert!(!m.is_locked());
//! assert!(m.try_lock().is_some());
//! ```

use std::marker::PhantomData;
use std::ptr::{self, NonNull};
use std::time::{Duration, Instant};

use crate::sched::{self, ContextBlock, stall};
use crate::sync::{AtomicPtr, AtomicU64, Ordering, spin_loop};

const WAITING: u64 = 0;
const BUSY: u64 = 1;
const REMOVED: u64 = 2;
const HOLDING: u64 = 3;
const RELEASED: u64 = 4;
const ABANDONED: u64 = 5;

/// How long a native waiter that stopped spinning naps, withdrawn from the
/// queue, before it enqueues again (module doc): below a scheduler slice
/// (1–4 ms natively), long enough that the napper does not come back into a
/// queue still stalled behind the same preempted holder (20 µs naps were
/// slower: more withdraw/re-enqueue rounds; CHANGELOG.md).
pub const NAP: Duration = Duration::from_micros(200);
const STATE_BITS: u32 = 3;
const STATE_MASK: u64 = (1 << STATE_BITS) - 1;

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

/// How a wait in the queue ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Waited {
    /// We hold the lock.
    Held,
    /// Our successor removed us: enqueue again (or give up, past the deadline).
    Removed,
    /// A timed waiter gave up: its node is ABANDONED and the queue's now.
    Left,
    /// A native waiter stopped spinning: its node is ABANDONED and the
    /// queue's now; nap, then enqueue again with a fresh node.
    Napping,
}

/// Whether `deadline` (if any) has passed. Reads the clock only for a timed
/// waiter.
#[inline]
fn past(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// At most this many nodes are walked by `is_locked`/`try_lock` past
/// abandoned ones (a racy walk over recycled nodes could otherwise cycle).
const WALK_LIMIT: u32 = 1 << 12;

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
}

impl TpNode {
    fn new() -> Self {
        Self {
            status: AtomicU64::new(pack(0, RELEASED)),
            prev: AtomicPtr::new(ptr::null_mut()),
            owner: AtomicPtr::new(ptr::null_mut()),
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

    pub(super) fn take() -> &'static TpNode {
        if let Some(n) = CACHE.try_with(|c| c.0.borrow_mut().pop()).ok().flatten() {
            return n;
        }
        if let Some(n) = SPARE.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return n;
        }
        let n: &'static TpNode = Box::leak(Box::new(TpNode::new()));
        ALL.lock().unwrap_or_else(|e| e.into_inner()).push(n);
        n
    }

    pub(super) fn give(n: &'static TpNode) {
        if CACHE.try_with(|c| c.0.borrow_mut().push(n)).is_err() {
            SPARE.lock().unwrap_or_else(|e| e.into_inner()).push(n);
        }
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

/// The CLH-TP queue lock. Natively a waiter that stops spinning — behind a
/// holder the kernel says is preempted, or past the heartbeat threshold while
/// some thread may wait for a CPU — withdraws its node and naps 200 µs, with
/// the kernel's answers (eBPF) and with heartbeats only; it never calls
/// `sched_yield`. Under the emulated scheduler it yields its virtual
/// processor, as in the paper (module doc, "When a waiter stops spinning").
///
/// ```
/// use mpsync::lock::{Mutex, ClhTp};
/// let m: Mutex<ClhTp, u32> = Mutex::new(0);
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         s.spawn(|| *m.lock() += 1);
///     }
/// });
/// assert_eq!(*m.lock(), 4);
/// ```
pub struct ClhTp {
    tail: AtomicPtr<TpNode>,
    /// Waiters removed so far (diagnostic).
    removed: AtomicU64,
}

impl std::fmt::Debug for ClhTp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClhTp")
            // Relaxed: diagnostic snapshots.
            .field("locked", &lock_api::RawMutex::is_locked(self))
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

    /// Waits as `me` (status `mine`) behind `pred`, given a `deadline` at most
    /// until then (module doc, "Timed acquisition").
    fn wait(
        &self,
        me: &'static TpNode,
        mut mine: u64,
        mut pred: &'static TpNode,
        deadline: Option<Instant>,
    ) -> Waited {
        let cb = me.owner();
        // Natively, a waiter that stops spinning withdraws and naps, with the
        // kernel's answers and with heartbeats only; under the emulated
        // scheduler it yields its virtual processor (module doc).
        let native = !cfg!(loom) && !sched::emulated::is_attached(cb);
        let mut spins = 0u32;
        let mut last_seen = u64::MAX;
        let mut seen_since = 0u64;
        loop {
            // Acquire: pairs with the predecessor's Release RELEASED store (its
            // critical section) and with its Release store after editing `prev`.
            let ps = pred.status.load(Ordering::Acquire);
            match state(ps) {
                RELEASED => {
                    // Take the lock unless our successor removed us meanwhile; if
                    // it did, `pred` may no longer be ours to take.
                    // Acquire on failure: pairs with the remover's AcqRel CAS.
                    return match me.status.compare_exchange(
                        mine,
                        pack(generation(mine), HOLDING),
                        Ordering::Relaxed, // the Acquire load of `ps` ordered the CS
                        Ordering::Acquire,
                    ) {
                        Ok(_) => {
                            // The predecessor's node is ours now.
                            pool::give(pred);
                            Waited::Held
                        }
                        Err(_) => Waited::Removed,
                    };
                }
                // A timed waiter ahead gave up: unlink it at once (its link
                // is set: it gave up waiting, after linking), whatever its
                // thread does — the lock may be free in front of it.
                ABANDONED => match self.remove(me, mine, pred, ps) {
                    Some((m, p)) => {
                        mine = m;
                        pred = p;
                        continue;
                    }
                    None => return Waited::Removed,
                },
                // Relaxed pre-check of the link: `remove` re-reads it with Acquire.
                WAITING
                    if sched::is_preempted(pred.owner())
                        && !pred.prev.load(Ordering::Relaxed).is_null() =>
                {
                    match self.remove(me, mine, pred, ps) {
                        Some((m, p)) => {
                            mine = m;
                            let moved = !ptr::eq(p, pred);
                            pred = p;
                            if moved {
                                continue;
                            }
                            // Not removed (it moved on meanwhile): wait as usual.
                        }
                        None => return Waited::Removed,
                    }
                }
                _ => {}
            }
            spins = spins.wrapping_add(1);
            // (Under loom every time: shorter executions for the model checker.)
            if cfg!(loom) || spins.is_multiple_of(16) {
                // Acquire: pairs with the remover's AcqRel CAS.
                if me.status.load(Ordering::Acquire) != mine {
                    return Waited::Removed; // removed while we looked preempted
                }
            }
            // A timed waiter reads the clock at every turn (never the
            // untimed one): the lock was not free in front of us above.
            if past(deadline) {
                return Self::give_up(me, mine);
            }
            if spins.is_multiple_of(16) {
                cb.publish_heartbeat();
            }
            if !cfg!(loom) && spins.is_multiple_of(256) {
                // Nothing moved ahead of us for longer than a running thread
                // would take: presume a preempted holder (or a long queue) and
                // leave our CPU to it: withdraw and nap natively, yield the
                // virtual processor emulated.
                let now = crate::util::clock::now_ns();
                if ps != last_seen {
                    last_seen = ps;
                    seen_since = now;
                } else if now.saturating_sub(seen_since)
                    > sched::native::heartbeat_threshold().as_nanos() as u64
                {
                    if !native {
                        // The paper's waiting, emulated only: give the
                        // virtual processor away.
                        sched::yield_now();
                        cb.publish_heartbeat();
                    } else if sched::native::cpu_pressure() != Some(false) {
                        // Some thread may wait for our CPU (or nobody knows).
                        return Self::withdraw(me, mine);
                    }
                }
            }
            // The holder is off its CPU by the kernel's answer: the lock cannot
            // move before it runs again, and it may need our CPU.
            if native
                && spins.is_multiple_of(16)
                && Self::holder_preempted(pred, ps, sched::native::kernel_preempted)
            {
                return Self::withdraw(me, mine);
            }
            spin_loop();
        }
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
        // stays our predecessor and cannot be recycled.
        // Acquire: pairs with a remover's AcqRel CAS if this fails.
        if me
            .status
            .compare_exchange(mine, pack(g, BUSY), Ordering::Acquire, Ordering::Acquire)
            .is_err()
        {
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
                if state(ps) == ABANDONED {
                    // Its thread left: the node is ours (nobody else refers to
                    // it as a predecessor now; late readers see a new
                    // generation once we reuse it).
                    pool::give(pred);
                } else {
                    // Relaxed: a statistic.
                    self.removed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        // [4] Back to WAITING with a new generation, publishing the new link.
        let w = pack(g.wrapping_add(1), WAITING);
        // Release: pairs with a would-be remover's Acquire status load ([2]).
        me.status.store(w, Ordering::Release);
        Some((w, new_pred))
    }
}

impl ClhTp {
    /// `lock`, or with a `deadline` the timed form: `None` after giving up,
    /// holding nothing (module doc, "Timed acquisition").
    #[inline]
    pub(super) fn acquire(&self, deadline: Option<Instant>) -> Option<ClhTpGuard> {
        let cb = sched::current();
        let mut me = pool::take();
        loop {
            let mine = Self::prepare(me, cb);
            // If we will wait, a fresh heartbeat before anyone can judge us by
            // it, and before the swap, so that the clock read does not widen the
            // window between the swap and the link. Only if the lock looks held
            // (no clock read on the uncontended path). Relaxed: a hint.
            // (Under loom, where heartbeats are not part of the model, after
            // the link: the look would only add a scheduling point.)
            let contended = !cfg!(loom) && !self.tail.load(Ordering::Relaxed).is_null();
            if contended {
                cb.publish_heartbeat();
            }
            // AcqRel: Release publishes our node's fields to the successor;
            // Acquire orders us after the predecessor's enqueue.
            let pred = self
                .tail
                .swap(me as *const TpNode as *mut TpNode, Ordering::AcqRel);
            let Some(pred) = NonNull::new(pred) else {
                // An empty queue: ours. Not removable (`prev` stays null).
                // Relaxed: only we and a successor's failing CAS look at it.
                me.status
                    .store(pack(generation(mine), HOLDING), Ordering::Relaxed);
                return Some(Self::guard(me));
            };
            // Until the link below, our successor cannot remove our predecessor
            // through us (it sees a null `prev`), and nobody waits on it.
            stall::point(stall::QUEUE_LOCK_LINK);
            // Release: a remover's Acquire status load then sees our link.
            me.prev.store(pred.as_ptr(), Ordering::Release);
            if !contended {
                // Taken between our look and our swap: publish now.
                cb.publish_heartbeat();
            }
            // SAFETY: queued nodes are type-stable (never freed).
            let pred: &'static TpNode = unsafe { &*pred.as_ptr() };
            match self.wait(me, mine, pred, deadline) {
                Waited::Held => return Some(Self::guard(me)),
                // The node stays in the queue; whoever unlinks it keeps it.
                Waited::Left => return None,
                // Withdrawn natively (module doc): the node stays in the
                // queue, whoever unlinks it keeps it; nap, then enqueue again
                // with a fresh node.
                Waited::Napping => {
                    stall::point(stall::CLH_TP_NAP);
                    let nap = match deadline {
                        Some(d) => NAP.min(d.saturating_duration_since(Instant::now())),
                        None => NAP,
                    };
                    // Nobody wakes this sleep (we are on no queue): it times
                    // out, or ends early on a stray wake of our wake word.
                    sched::Waiter::sleep(sched::Waiter::token(), Some(nap));
                    if past(deadline) {
                        stall::point(stall::TIMED_GAVE_UP);
                        return None;
                    }
                    me = pool::take();
                }
                // Removed: nobody refers to our node as a predecessor any more.
                Waited::Removed if past(deadline) => {
                    stall::point(stall::TIMED_GAVE_UP);
                    pool::give(me);
                    return None;
                }
                Waited::Removed => {}
            }
        }
    }

    /// A timed waiter `me` (status `mine`) whose deadline passed leaves: it
    /// marks its node ABANDONED by CAS against its successor's removal (the
    /// successor's CAS from `mine` to REMOVED): exactly one wins. The grant
    /// cannot race it: the lock reaches us only when *we* move our word to
    /// HOLDING; a predecessor RELEASED before or after this CAS is taken by
    /// whoever unlinks our node.
    #[cold]
    fn give_up(me: &'static TpNode, mine: u64) -> Waited {
        stall::point(stall::TIMED_GAVE_UP);
        if Self::abandon(me, mine) {
            Waited::Left
        } else {
            Waited::Removed
        }
    }

    /// A native waiter `me` (status `mine`) stops spinning (module doc): it
    /// withdraws as a timed waiter gives up, so that the lock never waits for
    /// it while it naps. `Removed` if its successor removed it first.
    #[cold]
    fn withdraw(me: &'static TpNode, mine: u64) -> Waited {
        if Self::abandon(me, mine) {
            Waited::Napping
        } else {
            Waited::Removed
        }
    }

    /// Moves our own word from `mine` (WAITING) to ABANDONED by CAS, against
    /// our successor's removal: `false` if the successor removed us first.
    #[inline]
    fn abandon(me: &TpNode, mine: u64) -> bool {
        // Release: pairs with the unlinker's Acquire status load, which then
        // sees our link ([2] in `remove`). Acquire on failure: pairs with the
        // remover's AcqRel CAS (our node is ours again).
        me.status
            .compare_exchange(
                mine,
                pack(generation(mine), ABANDONED),
                Ordering::Release,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// Whether `pred`, whose word was `ps`, is the holder's node and
    /// `kernel_preempted` (the kernel's answer, asked only then) says its
    /// thread is preempted: a native waiter then stops spinning (module doc).
    #[inline]
    fn holder_preempted(
        pred: &TpNode,
        ps: u64,
        kernel_preempted: impl FnOnce(&ContextBlock) -> Option<bool>,
    ) -> bool {
        Self::is_holder(pred, ps) && kernel_preempted(pred.owner()) == Some(true)
    }

    /// Whether `pred`, whose word was `ps`, is the holder's node: HOLDING, or
    /// WAITING unlinked (an uncontended holder's word before its HOLDING
    /// store). A hint: a wrong answer costs a nap at most.
    #[inline]
    fn is_holder(pred: &TpNode, ps: u64) -> bool {
        match state(ps) {
            HOLDING => true,
            // Relaxed: a hint (see above).
            WAITING => pred.prev.load(Ordering::Relaxed).is_null(),
            _ => false,
        }
    }

    /// Whether the queue ending at `tail` holds the lock: walks back past
    /// abandoned nodes (module doc, "Timed acquisition"). A snapshot: exact
    /// when nothing moves, a hint otherwise.
    fn held_behind(mut n: *mut TpNode) -> bool {
        for _ in 0..WALK_LIMIT {
            // SAFETY: nodes are type-stable (never freed).
            let Some(node) = (unsafe { n.as_ref() }) else {
                return false;
            };
            // Acquire: pairs with the owner's Release transitions, so that an
            // ABANDONED node's link is seen.
            match state(node.status.load(Ordering::Acquire)) {
                // Acquire: pairs with the owner's Release link store.
                ABANDONED => n = node.prev.load(Ordering::Acquire),
                RELEASED => return false,
                _ => return true,
            }
        }
        true
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
// (a removed waiter's CAS fails; a timed waiter that gave up, by its own CAS
// to ABANDONED, no longer takes it: the thread that unlinks its node does).
// Acquire/Release as commented at each step.
unsafe impl lock_api::RawMutex for ClhTp {
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(not(loom))]
    const INIT: Self = Self::new();
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(loom)]
    const INIT: Self = panic!("under loom, use ClhTp::new()");

    type Guard = ClhTpGuard;

    #[inline]
    fn lock(&self) -> Self::Guard {
        match self.acquire(None) {
            Some(g) => g,
            None => unreachable!("an acquisition without a deadline never gives up"),
        }
    }

    fn try_lock(&self) -> Option<Self::Guard> {
        let me = pool::take();
        let mine = Self::prepare(me, sched::current());
        // Relaxed: published by the CAS below.
        me.status
            .store(pack(generation(mine), HOLDING), Ordering::Relaxed);
        // AcqRel: as the swap in `lock`; only on an empty queue. Acquire on
        // failure: pairs with the AcqRel swap that enqueued the tail we see,
        // so that its fields are seen by the walk below (off the fast path).
        match self.tail.compare_exchange(
            ptr::null_mut(),
            me as *const TpNode as *mut TpNode,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Some(Self::guard(me)),
            Err(tail) => {
                pool::give(me);
                // The tail may be a node whose timed waiter left, in front of
                // a released lock: then the lock is free, and we take it as
                // `lock` would, unlinking the abandoned nodes, giving up at
                // once if a live waiter or holder is found.
                if Self::held_behind(tail) {
                    None
                } else {
                    self.acquire(Some(Instant::now()))
                }
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
        // Relaxed: our own word; nobody else changes a HOLDING word.
        let g = generation(me.status.load(Ordering::Relaxed));
        // Release: pairs with the successor's Acquire load in `wait`.
        me.status.store(pack(g, RELEASED), Ordering::Release);
    }

    fn is_locked(&self) -> bool {
        // Acquire: the tail's fields, read by the walk (a snapshot).
        Self::held_behind(self.tail.load(Ordering::Acquire))
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
        let cb = crate::sched::unregistered_block();
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

    /// A node abandoned by a timed waiter whose thread runs (this one: not
    /// preempted) is unlinked by the waiter behind it at once, which then gets
    /// the lock from the holder; it is not counted as a removal.
    #[test]
    fn unlinks_an_abandoned_node_whatever_its_thread_does() {
        let l = ClhTp::new();
        let g = l.lock();
        let ghost = pool::take();
        let w = ClhTp::prepare(ghost, sched::current());
        let holder = l.tail.swap(ghost as *const _ as *mut _, Ordering::AcqRel);
        ghost.prev.store(holder, Ordering::Release);
        assert_eq!(ClhTp::give_up(ghost, w), Waited::Left);
        assert!(l.is_locked(), "held behind an abandoned tail, reads free");
        let unlinked = std::thread::scope(|s| {
            let live = s.spawn(|| {
                let g = l.lock();
                // SAFETY: acquired just above on this thread.
                unsafe { l.unlock(g) };
            });
            let t = std::time::Instant::now();
            let mut unlinked = true;
            while ghost.status.load(Ordering::Acquire) == pack(generation(w), ABANDONED) {
                if t.elapsed() > std::time::Duration::from_secs(20) {
                    // Let the live waiter through, so that the scope ends
                    // and the failure is reported.
                    unlinked = false;
                    ghost
                        .status
                        .store(pack(generation(w), RELEASED), Ordering::Release);
                    break;
                }
                std::hint::spin_loop();
            }
            // SAFETY: `g` came from `l.lock()` on this thread.
            unsafe { l.unlock(g) };
            live.join().unwrap();
            unlinked
        });
        assert!(
            unlinked,
            "the waiter behind an abandoned node did not unlink it in 20 s"
        );
        assert_eq!(l.removed(), 0, "an abandoned node counted as a removal");
        assert!(!l.is_locked());
    }

    /// The kernel's trigger for a native waiter to stop spinning: its
    /// predecessor is the holder (HOLDING, or WAITING without a link) and the
    /// kernel says it is preempted; not a waiter ahead (that one is removed
    /// instead), not a holder that runs or that the kernel does not answer for.
    #[test]
    fn stops_spinning_behind_a_holder_the_kernel_says_is_preempted() {
        let n = pool::take();
        let w = ClhTp::prepare(n, sched::current());
        let holding = pack(generation(w), HOLDING);
        assert!(ClhTp::holder_preempted(n, holding, |_| Some(true)));
        // An uncontended holder before its HOLDING store (no link).
        assert!(ClhTp::holder_preempted(n, w, |_| Some(true)));
        assert!(!ClhTp::holder_preempted(n, holding, |_| Some(false)));
        assert!(!ClhTp::holder_preempted(n, holding, |_| None));
        // A linked waiter ahead, preempted: removed, not napped behind.
        n.prev
            .store(n as *const TpNode as *mut TpNode, Ordering::Relaxed);
        assert!(!ClhTp::holder_preempted(n, w, |_| Some(true)));
        assert!(!ClhTp::holder_preempted(
            n,
            pack(generation(w), RELEASED),
            |_| Some(true)
        ));
        n.prev.store(ptr::null_mut(), Ordering::Relaxed);
        pool::give(n);
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
