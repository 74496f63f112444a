//! Bounded-steal: mpsync's own lock for oversubscribed machines. Ownership is one
//! word that any *running* thread may take (so the lock never waits for a
//! sleeping thread to wake up and take a hand-over), waiters queue only for
//! order among themselves, and stealing is bounded so nobody starves.
//!
//! - **Ownership in one word.** `word` holds [`LOCKED`]; acquiring is one CAS
//!   that sets it, releasing one `fetch_and` that clears it. The lock is never
//!   *granted* to anyone: a waiter that stopped spinning — parked, preempted —
//!   is never handed it, it takes it itself when it runs.
//! - **A queue for order among waiters** (an MCS queue of per-acquisition
//!   nodes). Only its head waits for the lock, spinning through a
//!   [`Waiter`] that watches the holder; the head parks
//!   when the holder is preempted or holds the lock beyond the waiter's
//!   patience ([`HEAD_PARKED`] tells the releaser to wake it). Later waiters
//!   spin at most [`QUEUED_PATIENCE`] (a hand-over under way), then park, and
//!   are woken *one step ahead*: when the waiter in front of them
//!   takes the lock and leaves the queue, so they are awake and spinning by the
//!   time the lock is free again. That new holder sends the wake-up from its
//!   `unlock`, after its critical section, not from inside it (a futex wake is
//!   a system call of a few µs). With the kernel's answer, patience parks the
//!   head and later waiters only under CPU pressure (some registered thread
//!   preempted, or woken and not yet on a CPU: [`counting_wakeups`](crate::sched::Waiter::counting_wakeups),
//!   since a woken head may wait for a spinner's slice) or while the holder is
//!   off its CPU; otherwise they keep
//!   spinning (the [`Waiter`]'s rule). The arrival's
//!   steal spin stays bounded whatever the pressure: its end means "queue".
//! - **Bounded stealing.** A thread arriving while the lock is held spins for it
//!   a little before queueing ([`STEAL_PATIENCE`]); a running thread takes a
//!   free lock even when a queue waits (that is what keeps the lock busy while a
//!   woken waiter is still getting its processor back). A head that has waited
//!   longer than the lock's fairness bound (default [`FAIR_AFTER`], 0.5 ms, as
//!   parking_lot's fair unlock) sets [`NO_STEAL`]: from then on only the head may
//!   take the free lock, which it does as soon as it runs.
//! - **A steal budget per thread** (long-term fairness). Stealing keeps the lock
//!   busy, but left alone the threads that happen to be running take almost
//!   every acquisition while the queued ones get one per fairness bound: over a
//!   second, some threads of an oversubscribed machine get a hundred times the
//!   acquisitions of others. So a thread may take the lock at most
//!   [`STEAL_BUDGET`] times in a row (per thread, counted in a thread-local)
//!   before its turn ends: the unlock that ends it is a *fair* unlock when
//!   someone is queued — it sets [`NO_STEAL`], so the queue head takes the lock
//!   next — and refills the budget. Coming out of the queue refills it too.
//!   A turn also lasts at least [`MIN_TURN`] (1 ms; per lock,
//!   [`with_min_turn`](BoundedSteal::with_min_turn)): a thread that spends its
//!   budget sooner refills it and goes on, and its turn ends at the first
//!   budget spent after that. The budget alone made turns far shorter than the
//!   ≈ 1 ms it was sized for wherever the critical section is shorter than the
//!   microsecond it was sized at, and every turn is a wake-up: `sysbench mutex`
//!   through the interposer (8 threads, 2 cores, a ~20 ns critical section)
//!   ended a turn every ≈ 60 µs, with 14× glibc's voluntary context switches.
//!   The spender itself never queues for fairness's sake: it goes on running
//!   and stealing, and the queue moves one step per turn, each step a wake-up
//!   sent one step ahead. (The first budget made the spender join the queue's
//!   tail and sleep there. That rotated the running set, but each turn then
//!   also put a running thread to sleep, and when all the threads of one CPU
//!   were queued that CPU went idle: at CS 0.2 µs / NCS 2 µs, 8 threads pinned
//!   to 2 CPUs, 16–22 % of the CPUs' time was idle and the lock ran at
//!   0.72–0.79× parking_lot; ending a turn with a fair unlock instead left
//!   3–6 % idle — see [`STEAL_BUDGET`].)
//!
//! Waiters' nodes come from a per-thread cache and are off the queue before the
//! critical section starts. A waker never touches a node its wakee may already
//! have recycled: it reads the wakee's context block (never freed) first and
//! wakes the thread through it ([`sched::wake`]).
//!
//! Also [`RawMutexFair`](lock_api::RawMutexFair) (a fair unlock sets
//! [`NO_STEAL`] for the queue head) and [`RawMutexTimed`](lock_api::RawMutexTimed)
//! (a timed acquirer never queues, so there is nothing to withdraw): see
//! `lock/fair_timed.rs`.
//!
//! Progress: deadlock-free; starvation-free for a waiter that runs (once at the
//! head, it waits at most one fairness bound plus one critical section; the
//! queue ahead of it is FIFO). Uses `sched`: [`Waiter`],
//! [`is_preempted`](sched::is_preempted), [`wake`](sched::wake).
//!
//! | `word` bit    | set by                         | cleared by                 |
//! |---------------|--------------------------------|----------------------------|
//! | [`LOCKED`]    | the acquiring CAS              | `unlock`'s `fetch_and`     |
//! | [`NO_STEAL`]  | the queue head, after waiting; a holder ending its turn | the head's acquiring CAS |
//! | [`HEAD_PARKED`]| the queue head, before parking| `unlock` (then wakes it), or the head's CAS |
//!
//! ```
//! use mpsync::lock::{Mutex, BoundedSteal};
//! let m: Mutex<BoundedSteal, Vec<u32>> = Mutex::new(Vec::new());
//! std::thread::scope(|s| {
//!     for i in 0..4 {
//!         let m = &m;
//!         s.spawn(move || m.lock().push(i));
//!     }
//! });
//! assert_eq!(m.lock().len(), 4);
//! let fairer = BoundedSteal::with_fair_after(std::time::Duration::from_micros(100)).unwrap();
//! assert!(BoundedSteal::with_fair_after(std::time::Duration::ZERO).is_err());
//! # drop(fairer);
//! ```

use std::ptr::{self, NonNull};
use std::time::Duration;

use super::LockError;
use crate::sched::{self, ContextBlock, Wait, Waiter};
use crate::sync::{AtomicPtr, AtomicU32, Ordering};
use crate::util::clock::Patience;

/// The lock is held.
pub const LOCKED: u32 = 1;
/// The queue head has waited past the fairness bound: only it may take the lock.
pub const NO_STEAL: u32 = 2;
/// The queue head sleeps on `word`: the releaser wakes it.
pub const HEAD_PARKED: u32 = 4;

/// Default fairness bound: a queue head waiting this long stops stealing.
pub const FAIR_AFTER: Duration = Duration::from_micros(500);

/// How long an arriving thread spins for a held lock before it queues (less
/// if the holder is preempted: the [`Waiter`] then says so at once). Long
/// enough to outlast a critical section that runs, including one lengthened
/// by the wake-up a new holder sends its successor from inside it (a futex
/// wake, a few µs): an arrival that gives up queues behind every waiter and
/// sleeps, and starts a turn out of order. (How 10 µs was chosen over 2 µs:
/// CHANGELOG.md.)
pub const STEAL_PATIENCE: Duration = Duration::from_micros(10);

/// How long a waiter queued behind the head spins before it sleeps (it spins
/// at all only while the holder runs and, where the kernel answers, nobody
/// waits for a CPU): a hand-over already under way; beyond that its processor
/// is better left to the holder and the head.
pub const QUEUED_PATIENCE: Duration = Duration::from_micros(2);

/// Default steal budget: acquisitions a thread may make in a row before its
/// turn ends with a fair unlock (module doc, "a steal budget per thread"): a
/// turn of ≈ 1 ms for microsecond critical sections. Without turns
/// bounded-steal is as fast as parking_lot but no fairer; with 512 (8 threads
/// on 2 cores, ratio to `parking_lot::Mutex` in the same process) it kept
/// fairness (min/max per-thread acquisitions) ≥ 0.93 at 0.9–1.0× parking_lot
/// where the critical section is short and the lock seldom contended, and
/// ≈ 1.35× where it is contended. (The measurements: CHANGELOG.md.)
pub const STEAL_BUDGET: u32 = 512;

/// Default shortest turn: a thread that spends its [`STEAL_BUDGET`] sooner
/// than this after its turn began refills it without ending the turn (module
/// doc, "a steal budget per thread"); 2 × [`FAIR_AFTER`], so a queue head
/// still gets the lock within a fairness bound of the turn's end being due.
pub const MIN_TURN: Duration = Duration::from_millis(1);

#[cfg(not(loom))]
thread_local! {
    /// This thread's steals left (module doc: "a steal budget per thread").
    static STEALS_LEFT: std::cell::Cell<u32> = const { std::cell::Cell::new(u32::MAX) };
}
#[cfg(loom)]
loom::thread_local! {
    /// This thread's steals left (module doc: "a steal budget per thread").
    static STEALS_LEFT: std::cell::Cell<u32> = std::cell::Cell::new(u32::MAX);
}

/// This thread's steals left, at most `budget` (a fresh thread, or one coming
/// from a lock with a larger budget, starts a full turn of this lock's); 1
/// while its thread-locals are torn down (an exiting thread is not made to queue).
#[inline]
fn steals_left(budget: u32) -> u32 {
    STEALS_LEFT
        .try_with(std::cell::Cell::get)
        .unwrap_or(1)
        .min(budget)
}

#[inline]
fn set_steals_left(n: u32) {
    let _ = STEALS_LEFT.try_with(|c| c.set(n));
}

#[cfg(not(loom))]
thread_local! {
    /// When this thread's turn began ([`now_ns`](crate::util::clock::now_ns));
    /// 0: not yet (module doc: "a turn also lasts at least `MIN_TURN`").
    static TURN_BEGAN_NS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Whether this thread's turn has lasted `min_turn_ns`; if so, the next turn
/// begins now. A thread's first look begins its first turn (and says no).
/// Always yes for a zero `min_turn_ns`, and under loom (no real time there:
/// every spent budget ends the turn, the unlock the models explore), and while
/// the thread-locals are torn down.
#[inline]
fn turn_lasted(min_turn_ns: u64) -> bool {
    if min_turn_ns == 0 {
        return true;
    }
    #[cfg(loom)]
    {
        true
    }
    #[cfg(not(loom))]
    {
        let now = crate::util::clock::now_ns();
        TURN_BEGAN_NS
            .try_with(|began| {
                let b = began.get();
                let lasted = b != 0 && now.saturating_sub(b) >= min_turn_ns;
                if lasted || b == 0 {
                    began.set(now);
                }
                lasted
            })
            .unwrap_or(true)
    }
}

/// This thread's turn begins now (it came out of the queue).
#[inline]
fn begin_turn(min_turn_ns: u64) {
    #[cfg(not(loom))]
    if min_turn_ns != 0 {
        let now = crate::util::clock::now_ns();
        let _ = TURN_BEGAN_NS.try_with(|c| c.set(now));
    }
    #[cfg(loom)]
    let _ = min_turn_ns;
}

/// A queued waiter, not yet at the head.
const WAITING: u32 = 0;
/// A queued waiter that announced it sleeps (its waker must wake it).
const SLEEPING: u32 = 1;
/// The queue head.
const HEAD: u32 = 2;

/// One acquisition's place in the waiters' queue.
#[derive(Debug)]
pub(super) struct Node {
    next: AtomicPtr<Node>,
    status: AtomicU32,
    /// The waiter's context block (never freed): how its waker wakes it.
    cb: AtomicPtr<ContextBlock>,
}

impl Node {
    fn new() -> Self {
        Self {
            next: AtomicPtr::new(ptr::null_mut()),
            status: AtomicU32::new(WAITING),
            cb: AtomicPtr::new(ptr::null_mut()),
        }
    }
}

super::node_cache!(Node, Node::new());

/// The bounded-steal lock (module doc).
#[derive(Debug)]
pub struct BoundedSteal {
    pub(super) word: AtomicU32,
    /// The holder's context block, a hint for the head's "is it preempted?"
    /// (null: unknown). Written after each acquisition, so it may name the
    /// previous holder for a moment; only advice depends on it.
    holder: AtomicPtr<ContextBlock>,
    /// Last node of the waiters' queue (null: nobody queued).
    pub(super) tail: AtomicPtr<Node>,
    /// A sleeping successor that the holder made queue head and must wake,
    /// after its critical section ([`unlock`](lock_api::RawMutex::unlock)):
    /// null if none. Read and written only by the holder.
    wake_after: AtomicPtr<ContextBlock>,
    fair_after_ns: u64,
    /// A thread's steals per turn ([`STEAL_BUDGET`] by default).
    steal_budget: u32,
    /// A turn's shortest length, ns ([`MIN_TURN`] by default; 0: none).
    min_turn_ns: u64,
}

// SAFETY: all shared state is atomics; raw pointers in it name nodes owned by
// queued threads (see the queue protocol) and context blocks, which are never freed.
unsafe impl Send for BoundedSteal {}
// SAFETY: as above.
unsafe impl Sync for BoundedSteal {}

impl Default for BoundedSteal {
    fn default() -> Self {
        Self::new()
    }
}

super::loom_const_new! {
    impl[] BoundedSteal {
        /// An unlocked lock with the default fairness bound ([`FAIR_AFTER`]).
        new => Self {
            word: AtomicU32::new(0),
            holder: AtomicPtr::new(ptr::null_mut()),
            tail: AtomicPtr::new(ptr::null_mut()),
            wake_after: AtomicPtr::new(ptr::null_mut()),
            fair_after_ns: FAIR_AFTER.as_nanos() as u64,
            steal_budget: STEAL_BUDGET,
            min_turn_ns: MIN_TURN.as_nanos() as u64,
        }
    }
}

impl BoundedSteal {
    /// A lock whose queue head stops others' stealing after waiting
    /// `fair_after`. Errors unless 1 µs ≤ `fair_after` ≤ 1 s.
    pub fn with_fair_after(fair_after: Duration) -> Result<Self, LockError> {
        let ns = fair_after.as_nanos();
        if !(1_000..=1_000_000_000).contains(&ns) {
            return Err(LockError::InvalidParameter(format!(
                "bounded-steal fairness bound {fair_after:?} is out of range: use 1 µs ..= 1 s (default 500 µs)"
            )));
        }
        let mut l = Self::new();
        l.fair_after_ns = ns as u64;
        Ok(l)
    }

    /// This lock with a thread's steals per turn set to `budget` (module doc:
    /// fewer is fairer, more keeps more acquisitions on the running threads).
    /// Errors unless 1 ≤ `budget` ≤ 1,000,000.
    ///
    /// ```
    /// use mpsync::lock::BoundedSteal;
    /// let l = BoundedSteal::new().with_steal_budget(16).unwrap();
    /// assert_eq!(l.steal_budget(), 16);
    /// assert!(BoundedSteal::new().with_steal_budget(0).is_err());
    /// ```
    pub fn with_steal_budget(mut self, budget: u32) -> Result<Self, LockError> {
        if !(1..=1_000_000).contains(&budget) {
            return Err(LockError::InvalidParameter(format!(
                "bounded-steal steal budget {budget} is out of range: use 1 ..= 1000000 (default {STEAL_BUDGET})"
            )));
        }
        self.steal_budget = budget;
        Ok(self)
    }

    /// A thread's steals per turn.
    pub fn steal_budget(&self) -> u32 {
        self.steal_budget
    }

    /// This lock with a turn's shortest length set to `min_turn` (module doc:
    /// a thread that spends its steal budget sooner goes on stealing; zero
    /// ends every turn at its budget). Errors unless `min_turn` ≤ 1 s.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mpsync::lock::BoundedSteal;
    /// let l = BoundedSteal::new().with_min_turn(Duration::ZERO).unwrap();
    /// assert_eq!(l.min_turn(), Duration::ZERO);
    /// assert!(BoundedSteal::new().with_min_turn(Duration::from_secs(2)).is_err());
    /// ```
    pub fn with_min_turn(mut self, min_turn: Duration) -> Result<Self, LockError> {
        let ns = min_turn.as_nanos();
        if ns > 1_000_000_000 {
            return Err(LockError::InvalidParameter(format!(
                "bounded-steal shortest turn {min_turn:?} is out of range: use 0 ..= 1 s (default {MIN_TURN:?})"
            )));
        }
        self.min_turn_ns = ns as u64;
        Ok(self)
    }

    /// A turn's shortest length.
    pub fn min_turn(&self) -> Duration {
        Duration::from_nanos(self.min_turn_ns)
    }

    /// Counts one acquisition outside the queue against this thread's budget.
    #[inline]
    fn spend_steal(left: u32) {
        set_steals_left(left.saturating_sub(1));
    }

    /// Takes the lock if it is free and stealing is allowed.
    #[inline]
    fn try_steal(&self) -> bool {
        // Relaxed: a guess re-validated by the CAS.
        let w = self.word.load(Ordering::Relaxed);
        // Acquire: pairs with the Release RMW of `unlock`.
        w & (LOCKED | NO_STEAL) == 0
            && self
                .word
                .compare_exchange(w, w | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    /// Records the holder (advice for the head's Waiter).
    #[inline]
    fn set_holder(&self) {
        // Release: pairs with the Acquire load of `holder()`, so a reader of
        // the pointer sees the block initialized (free on x86: a plain store).
        self.holder.store(
            ptr::from_ref(sched::current()).cast_mut(),
            Ordering::Release,
        );
    }

    /// The holder as last recorded.
    #[inline]
    pub(super) fn holder(&self) -> Option<&ContextBlock> {
        // Acquire: pairs with the Release store of `set_holder`.
        let p = self.holder.load(Ordering::Acquire);
        // SAFETY: context blocks are never freed (sched::context), so a stale
        // pointer still names a valid block.
        unsafe { p.as_ref() }
    }

    /// The end of a turn: a holder that spent its steal budget refills it, and
    /// if its turn has lasted the shortest turn and someone is queued, releases
    /// fairly (module doc: "a steal budget per thread") — the queue head takes
    /// the lock next.
    #[cold]
    fn end_turn(&self) {
        set_steals_left(self.steal_budget);
        if turn_lasted(self.min_turn_ns) {
            self.let_the_head_in();
        }
    }

    /// The holder's fair release, before its `unlock`: if someone is queued,
    /// NO_STEAL, so the queue head takes the lock next (`end_turn`, and
    /// `unlock_fair` in `lock/fair_timed.rs`).
    #[inline]
    pub(super) fn let_the_head_in(&self) {
        // Relaxed: we hold the lock, and every queue change that matters was
        // made by a holder before us (ordered to us by the Acquire of our own
        // acquisition) or by ourselves; the queue cannot empty while we hold
        // the lock (only a new holder leaves it). A thread queueing right now
        // is a newcomer, and a plain unlock is fair to it.
        if !self.tail.load(Ordering::Relaxed).is_null() {
            // Relaxed: the lock is still ours; the Release RMW of `unlock`
            // publishes the bit with the critical section.
            self.word.fetch_or(NO_STEAL, Ordering::Relaxed);
        }
    }

    #[cold]
    fn lock_slow(&self) {
        // Phase 1: a running arrival spins briefly for the lock.
        // The steal patience is the Waiter's own: the clock is read once
        // every CHECK_EVERY spins, with the look at the holder, not at
        // every spin. Bounded: here `Park` means "queue", which must
        // happen even while everyone runs (else nobody queues and the
        // fairness bound never applies).
        let mut waiter = Self::waiter(Waiter::bounded_ns(STEAL_PATIENCE.as_nanos() as u64));
        loop {
            if self.try_steal() {
                Self::spend_steal(steals_left(self.steal_budget));
                return;
            }
            if waiter.spin(self.holder()) == Wait::Park {
                break;
            }
        }
        // Phase 2: queue.
        let node = take_node();
        // SAFETY: the node is ours until it is on the queue.
        let n = unsafe { node.as_ref() };
        let me = sched::current();
        // Relaxed: published by the AcqRel swap into `tail` below.
        n.next.store(ptr::null_mut(), Ordering::Relaxed);
        n.status.store(WAITING, Ordering::Relaxed);
        n.cb.store(ptr::from_ref(me).cast_mut(), Ordering::Relaxed);
        // AcqRel: Release publishes the node's fields to the successor that
        // links behind it; Acquire pairs with the predecessor's, so its node is
        // valid to link into.
        let pred = self.tail.swap(node.as_ptr(), Ordering::AcqRel);
        if let Some(pred) = NonNull::new(pred) {
            // SAFETY: a predecessor leaves the queue only after it has seen our
            // link (it waits for it in `leave_queue`), so its node is alive.
            let p = unsafe { pred.as_ref() };
            sched::stall::point(sched::stall::QUEUE_LOCK_LINK);
            // Release: publishes our node's fields to the predecessor.
            p.next.store(node.as_ptr(), Ordering::Release);
            self.wait_to_be_head(n);
        }
        // Phase 3: the head waits for the lock.
        self.head_acquire();
        self.leave_queue(node);
        // Out of the queue: a new turn.
        set_steals_left(self.steal_budget);
        begin_turn(self.min_turn_ns);
    }

    /// This lock's waits count threads woken and not yet on a CPU as CPU
    /// pressure (`sched::waiter`'s module doc): its queue head, woken one step
    /// ahead, may wait for the processor of a spinner that would otherwise
    /// spin its whole slice away.
    #[inline]
    fn waiter(w: Waiter) -> Waiter {
        w.counting_wakeups()
    }

    /// Queued behind someone: sleep until made head (woken one step ahead).
    /// Only the head waits for the lock spinning; a waiter behind it spins at
    /// most [`QUEUED_PATIENCE`] (a hand-over already under way), then sleeps,
    /// leaving its processor to the holder and the head.
    fn wait_to_be_head(&self, n: &Node) {
        let mut waiter = Self::waiter(Waiter::with_patience_ns(QUEUED_PATIENCE.as_nanos() as u64));
        loop {
            // Acquire: pairs with the predecessor's AcqRel swap to HEAD.
            if n.status.load(Ordering::Acquire) == HEAD {
                return;
            }
            // Not the head: spin only while the holder runs and a short while,
            // then sleep.
            if waiter.spin(self.holder()) == Wait::Spin {
                continue;
            }
            let t = Waiter::token();
            // AcqRel: Release orders the token load before the announcement
            // (the waker's swap reads it, then bumps the wake word); Acquire
            // pairs with the predecessor's swap when it fails.
            match n
                .status
                .compare_exchange(WAITING, SLEEPING, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    sched::stall::point(sched::stall::WAITER_PARK);
                    Waiter::sleep(t, None);
                    // A spurious wake-up, or the swap to HEAD and its wake: the
                    // predecessor may have run since; back to spinning.
                    // Relaxed: our own word; re-checked with Acquire above.
                    let _ = n.status.compare_exchange(
                        SLEEPING,
                        WAITING,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                    waiter.restart();
                }
                Err(_) => return, // HEAD already
            }
        }
    }

    /// The queue head takes the lock: spin while the holder runs, park on the
    /// word when it does not, stop stealing after the fairness bound.
    fn head_acquire(&self) {
        let mut fair = Patience::start(self.fair_after_ns);
        let mut waiter = Self::waiter(Waiter::new());
        // Loop turns since the last look at the fairness clock (one look every
        // CHECK_EVERY turns, as the Waiter looks at its own).
        let mut turns = 0u32;
        // Relaxed: every decision is re-validated by a CAS.
        let mut w = self.word.load(Ordering::Relaxed);
        loop {
            if w & LOCKED == 0 {
                // Acquire: pairs with the Release RMW of `unlock`. Clears
                // NO_STEAL (ours) and HEAD_PARKED (ours, stale).
                match self
                    .word
                    .compare_exchange(w, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                {
                    Ok(_) => {
                        self.set_holder();
                        return;
                    }
                    Err(now) => {
                        w = now;
                        continue;
                    }
                }
            }
            turns = turns.wrapping_add(1);
            if w & NO_STEAL == 0
                && turns.is_multiple_of(sched::waiter::CHECK_EVERY)
                && fair.exhausted()
            {
                // Relaxed: a flag re-validated by CASes; nothing is published.
                match self.word.compare_exchange(
                    w,
                    w | NO_STEAL,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => w |= NO_STEAL,
                    Err(now) => w = now,
                }
                continue;
            }
            if waiter.spin(self.holder()) == Wait::Park {
                // Announce, then sleep on the word while it still says so. A
                // head already past the fairness bound also stops stealing as
                // it goes to sleep: between the unlock that wakes it and its
                // running again, nobody may take the lock past it (the check
                // above runs only every CHECK_EVERY turns; the Waiter may
                // advise parking sooner).
                let sleeping = if fair.exhausted() {
                    w | HEAD_PARKED | NO_STEAL
                } else {
                    w | HEAD_PARKED
                };
                // Relaxed: the futex re-checks the word atomically.
                match self
                    .word
                    .compare_exchange(w, sleeping, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => {
                        sched::stall::point(sched::stall::WAITER_PARK);
                        sched::park(&self.word, sleeping, None);
                        waiter.restart();
                    }
                    Err(now) => {
                        w = now;
                        continue;
                    }
                }
            }
            // Relaxed: as above.
            w = self.word.load(Ordering::Relaxed);
        }
    }

    /// The new holder leaves the queue, making its successor head (and waking
    /// it if it sleeps); then recycles its node.
    fn leave_queue(&self, node: NonNull<Node>) {
        // SAFETY: our node, on the queue until we leave it here.
        let n = unsafe { node.as_ref() };
        // Acquire: pairs with the successor's Release link store.
        let mut next = n.next.load(Ordering::Acquire);
        if next.is_null() {
            // AcqRel/Acquire: on success nobody refers to our node any more; on
            // failure a successor swapped itself in and will link.
            if self
                .tail
                .compare_exchange(
                    node.as_ptr(),
                    ptr::null_mut(),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            {
                // SAFETY: off the queue; nobody refers to it.
                unsafe { return_node(node) };
                return;
            }
            next = super::wait_for_link(|| {
                // Acquire: as above.
                let s = n.next.load(Ordering::Acquire);
                (!s.is_null()).then_some(s)
            });
        }
        // SAFETY: the successor's node stays alive until it has seen HEAD,
        // which only the swap below tells it.
        let s = unsafe { &*next };
        // Relaxed: written before the successor's Release link store, which
        // our Acquire load of `next` read.
        let cb = s.cb.load(Ordering::Relaxed);
        // AcqRel: Release tells the successor it is head; Acquire pairs with
        // its announcement (SLEEPING), so its token came before our wake.
        let old = s.status.swap(HEAD, Ordering::AcqRel);
        if old == SLEEPING {
            // Woken by our `unlock`, after the critical section: a futex wake
            // here would lengthen it by a system call (module doc). `s` may be
            // recycled by then, so only `cb` (never freed) is kept. Relaxed:
            // only the holder touches `wake_after` (we hold the lock).
            self.wake_after.store(cb, Ordering::Relaxed);
        }
        // SAFETY: off the queue (the successor is head) and nobody refers to it.
        unsafe { return_node(node) };
    }
}

// SAFETY: LOCKED goes 0 → 1 only by a successful Acquire CAS (steal or head),
// so one thread holds the lock at a time; `unlock` clears it with a Release RMW.
unsafe impl lock_api::RawMutex for BoundedSteal {
    super::loom_const_init!(BoundedSteal);

    type Guard = lock_api::GuardSend;

    #[inline]
    fn lock(&self) -> Self::Guard {
        // Acquire: pairs with the Release RMW of `unlock`.
        if self
            .word
            .compare_exchange(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            Self::spend_steal(steals_left(self.steal_budget));
            self.set_holder();
        } else {
            self.lock_slow();
            self.set_holder();
        }
        lock_api::GuardSend::new()
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        if self.try_steal() {
            Self::spend_steal(steals_left(self.steal_budget));
            self.set_holder();
            Some(lock_api::GuardSend::new())
        } else {
            None
        }
    }

    #[inline]
    unsafe fn unlock(&self, _guard: Self::Guard) {
        // This thread's budget is spent: its turn ends here (module doc).
        if steals_left(self.steal_budget) == 0 {
            self.end_turn();
        }
        // Relaxed: written by this thread (the holder) in `leave_queue`.
        let wake = self.wake_after.load(Ordering::Relaxed);
        if !wake.is_null() {
            // Relaxed: as above; the next holder reads it only after its
            // acquisition, which the Release RMW below orders after this.
            self.wake_after.store(ptr::null_mut(), Ordering::Relaxed);
        }
        // Release: publishes the critical section to the next Acquire CAS.
        // Keeps NO_STEAL (the head's); clears HEAD_PARKED, and wakes the head.
        let old = self
            .word
            .fetch_and(!(LOCKED | HEAD_PARKED), Ordering::Release);
        if old & HEAD_PARKED != 0 {
            sched::unpark_one(&self.word);
        }
        if !wake.is_null() {
            sched::stall::point(sched::stall::WAITER_WAKE);
            // SAFETY: context blocks are never freed (sched::context).
            sched::wake(unsafe { &*wake });
        }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        // Relaxed: a momentary snapshot.
        self.word.load(Ordering::Relaxed) & LOCKED != 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use lock_api::RawMutex;
    use std::sync::atomic::{AtomicU32 as StdU32, Ordering as StdOrdering};
    use std::time::Instant;

    /// Every wait of this lock counts woken threads as CPU pressure (its woken
    /// queue head may wait for a spinner's slice), keeping each wait's own
    /// patience rule (the steal spin stays bounded).
    #[test]
    fn its_waits_count_wakeups() {
        for w in [
            Waiter::bounded_ns(STEAL_PATIENCE.as_nanos() as u64),
            Waiter::with_patience_ns(QUEUED_PATIENCE.as_nanos() as u64),
            Waiter::new(),
        ] {
            assert!(!w.counts_wakeups());
            assert!(
                BoundedSteal::waiter(w).counts_wakeups(),
                "a bounded-steal wait that does not count wake-ups"
            );
        }
    }

    /// A thread that spent its steal budget while someone is queued ends its
    /// turn with a fair unlock: the queued waiter gets the lock before the
    /// spender's next acquisition, even though the spender asks at once and
    /// the fairness bound (1 s here) has not stopped stealing. Without the
    /// budget the spender takes the free lock again at once.
    #[test]
    #[cfg_attr(miri, ignore = "waits on real time for a queued thread")]
    fn a_thread_out_of_steals_lets_the_queue_head_in() {
        let l = BoundedSteal::with_fair_after(Duration::from_secs(1))
            .unwrap()
            .with_steal_budget(1)
            .unwrap()
            .with_min_turn(Duration::ZERO)
            .unwrap();
        // Several rounds: without the fair unlock, A's immediate re-lock wins
        // the race against the spinning head almost always, but not always.
        for round in 0..20 {
            let order = StdU32::new(0);
            let (b_at, a_again_at) = std::thread::scope(|s| {
                l.lock(); // A's one steal of this turn
                let b = s.spawn(|| {
                    l.lock();
                    let at = order.fetch_add(1, StdOrdering::SeqCst);
                    // SAFETY: locked just above, by this thread.
                    unsafe { l.unlock(lock_api::GuardSend::new()) };
                    at
                });
                // Wait until B is queued.
                let t0 = Instant::now();
                while l.tail.load(Ordering::Relaxed).is_null() {
                    assert!(t0.elapsed() < Duration::from_secs(20), "B never queued");
                    crate::sched::yield_now();
                }
                // SAFETY: A holds the lock (locked above).
                unsafe { l.unlock(lock_api::GuardSend::new()) };
                // Budget spent, B queued: that unlock was fair, B goes first.
                l.lock();
                let a_again = order.fetch_add(1, StdOrdering::SeqCst);
                // SAFETY: locked just above.
                unsafe { l.unlock(lock_api::GuardSend::new()) };
                (b.join().unwrap(), a_again)
            });
            assert!(
                b_at < a_again_at,
                "round {round}: A took the lock again ({a_again_at}) before the queued B ({b_at}) with its steal budget spent"
            );
        }
    }

    /// A queue head that has waited past the fairness bound sets NO_STEAL
    /// while the holder still holds the lock (it looks at the fairness clock
    /// every CHECK_EVERY turns, before its Waiter may advise parking), so the
    /// holder's next acquisition cannot steal past it.
    #[test]
    #[cfg_attr(miri, ignore = "waits on real time for the queue head")]
    fn a_head_past_the_fairness_bound_stops_stealing() {
        let l = BoundedSteal::with_fair_after(Duration::from_micros(1))
            .unwrap()
            .with_steal_budget(1_000_000)
            .unwrap();
        let got = StdU32::new(0);
        std::thread::scope(|s| {
            l.lock();
            s.spawn(|| {
                l.lock();
                got.store(1, StdOrdering::SeqCst);
                // SAFETY: locked just above, by this thread.
                unsafe { l.unlock(lock_api::GuardSend::new()) };
            });
            let t0 = Instant::now();
            while l.word.load(Ordering::Relaxed) & NO_STEAL == 0
                && t0.elapsed() < Duration::from_secs(20)
            {
                crate::sched::yield_now();
            }
            let word = l.word.load(Ordering::Relaxed);
            // The holder may not take the lock back outside the queue now.
            // (Unlocked before asserting, so that a failure does not leave the
            // head waiting forever and the scope hanging.)
            // SAFETY: locked above by this thread.
            unsafe { l.unlock(lock_api::GuardSend::new()) };
            assert!(
                word & NO_STEAL != 0,
                "the queue head never stopped stealing (word {word:#x}) in 20 s of waiting past a 1 µs fairness bound"
            );
            if let Some(g) = l.try_lock() {
                // Only after the head has had its turn (its CAS clears NO_STEAL).
                let head_done = got.load(StdOrdering::SeqCst) == 1;
                // SAFETY: taken just above.
                unsafe { l.unlock(g) };
                assert!(
                    head_done,
                    "the releaser stole the lock back past a starved head"
                );
            }
        });
        assert_eq!(got.load(StdOrdering::SeqCst), 1);
    }

    /// Only the head waits for the lock spinning: a waiter queued behind it
    /// announces SLEEPING and sleeps (after at most QUEUED_PATIENCE of
    /// spinning), while the holder still holds the lock.
    #[test]
    #[cfg_attr(miri, ignore = "waits on real time for queued threads")]
    fn a_waiter_behind_the_head_sleeps() {
        let l = BoundedSteal::new();
        let queued_behind = |prev: *mut Node| {
            let t0 = Instant::now();
            loop {
                let t = l.tail.load(Ordering::Acquire);
                if !t.is_null() && t != prev {
                    return t;
                }
                assert!(t0.elapsed() < Duration::from_secs(20), "never queued");
                crate::sched::yield_now();
            }
        };
        std::thread::scope(|s| {
            l.lock();
            let take = || {
                l.lock();
                // SAFETY: locked just above, by this thread.
                unsafe { l.unlock(lock_api::GuardSend::new()) };
            };
            s.spawn(take);
            let head = queued_behind(ptr::null_mut());
            s.spawn(take);
            let behind = queued_behind(head);
            // SAFETY: the waiter behind the head stays queued (its node alive)
            // until it has the lock, which we hold.
            let status = unsafe { &(*behind).status };
            let t0 = Instant::now();
            while status.load(Ordering::Acquire) != SLEEPING
                && t0.elapsed() < Duration::from_secs(20)
            {
                crate::sched::yield_now();
            }
            let seen = status.load(Ordering::Acquire);
            // Unlocked before asserting (a failure must not leave the waiters
            // queued forever and the scope hanging).
            // SAFETY: locked above by this thread.
            unsafe { l.unlock(lock_api::GuardSend::new()) };
            assert_eq!(
                seen, SLEEPING,
                "the waiter behind the head never went to sleep in 20 s (status {seen}; {SLEEPING} = sleeping)"
            );
        });
        assert!(!l.is_locked());
    }

    #[test]
    fn the_steal_budget_is_validated_and_clamps_a_threads_turn() {
        assert!(BoundedSteal::new().with_steal_budget(0).is_err());
        assert!(BoundedSteal::new().with_steal_budget(1_000_001).is_err());
        let l = BoundedSteal::new().with_steal_budget(3).unwrap();
        assert_eq!(l.steal_budget(), 3);
        // Uncontended, the budget refills whenever it runs out: no queueing,
        // no waiting.
        for _ in 0..10 {
            l.lock();
            // SAFETY: locked just above.
            unsafe { l.unlock(lock_api::GuardSend::new()) };
        }
        assert!(steals_left(3) <= 3);
        assert!(!l.is_locked());
    }

    /// A thread that spends its budget before its turn has lasted the
    /// shortest turn does not end it: its unlock leaves stealing on although
    /// someone is queued; once the turn has lasted, the unlock that spends the
    /// budget is fair. (The queue is faked: `let_the_head_in` only asks
    /// whether it is empty.)
    #[test]
    fn a_turn_lasts_at_least_the_shortest_turn() {
        assert!(
            BoundedSteal::new()
                .with_min_turn(Duration::from_millis(1001))
                .is_err()
        );
        let mut fake = Node::new();
        let fake: *mut Node = &mut fake;
        let queued = |l: &BoundedSteal| l.tail.store(fake, Ordering::Relaxed);
        // One acquisition (the whole budget of 1); the word it leaves behind,
        // reset for the next.
        let spend = |l: &BoundedSteal| {
            l.lock();
            // SAFETY: locked just above.
            unsafe { l.unlock(lock_api::GuardSend::new()) };
            l.word.swap(0, Ordering::Relaxed)
        };
        let with_min_turn = |d| {
            BoundedSteal::new()
                .with_steal_budget(1)
                .unwrap()
                .with_min_turn(d)
                .unwrap()
        };
        let wait = |d| {
            let t0 = Instant::now();
            while t0.elapsed() < d {
                crate::sched::yield_now();
            }
        };
        let long = with_min_turn(Duration::from_secs(1));
        // This thread's turn begins (or a lasted one ends) with nobody queued.
        spend(&long);
        queued(&long);
        for _ in 0..3 {
            assert_eq!(
                spend(&long),
                0,
                "a spent budget ended a turn shorter than its 1 s shortest turn"
            );
        }
        long.tail.store(ptr::null_mut(), Ordering::Relaxed);
        let short = with_min_turn(Duration::from_micros(1));
        wait(Duration::from_micros(5));
        queued(&short);
        assert_eq!(
            spend(&short),
            NO_STEAL,
            "a spent budget after the shortest turn did not let the queue head in"
        );
        short.tail.store(ptr::null_mut(), Ordering::Relaxed);
        // A turn that lasted is followed by a new one, which must last too.
        let medium = with_min_turn(Duration::from_millis(200));
        queued(&medium);
        wait(Duration::from_millis(210));
        assert_eq!(
            spend(&medium),
            NO_STEAL,
            "a turn of over 200 ms did not end"
        );
        assert_eq!(
            spend(&medium),
            0,
            "the turn after one that lasted ended at once: it never began"
        );
        medium.tail.store(ptr::null_mut(), Ordering::Relaxed);
    }
}
