//! BRAVO: a reader bias that any reader-writer lock can wear.
//!
//! Dice & Kogan, *BRAVO — Biased Locking for Reader-Writer Locks*, USENIX ATC
//! 2019 (beyond the five papers). While the lock is *reader-biased*,
//! a reader does not touch the underlying lock at all: it publishes the lock's
//! name in one slot of a global **visible-readers table** (hashed by thread
//! and lock, so readers of one lock write different cache lines) and re-checks
//! the bias. (The paper's name is the lock's address; here it is an id the
//! table hands out when the lock is first biased — see "Forgotten guards"
//! below.) A writer takes the underlying lock for writing, *revokes* the bias
//! (clears it, then waits until no slot of the table names this lock), and
//! then — because revocation costs a scan of the whole table — keeps the bias
//! off for an *inhibit period* of [`INHIBIT_MULTIPLIER`] × the revocation's
//! cost. A reader that finds the bias off, or its slot taken, reads through
//! the underlying lock, and re-enables the bias once the inhibit period is over.
//!
//! The reader's publish / the writer's revoke are a Dekker pair:
//!
//! ```text
//! reader (fast path)                       writer (revocation)
//! CAS slot: empty -> this lock    [R1]     rbias := false               [W1]
//! fence(SeqCst)                   [R2]     fence(SeqCst)                [W2]
//! if rbias: read (fast)           [R3]     wait while any slot == lock  [W3]
//! else: clear the slot as an unlock does ([U1]–[U2] below), slow path
//! ```
//!
//! The two SeqCst fences order \[R1\] before \[R3\] and \[W1\] before \[W3\] in one
//! total order, so either the writer sees the slot (and waits for the reader's
//! release) or the reader sees the bias off (and withdraws). The bias is set
//! only by a reader that holds the underlying lock for reading, so it stays
//! off while a writer is inside. (Loom model: `tests/loom_rwlock_barrier.rs`,
//! `bravo_*`.)
//!
//! | `rbias` | who sets it                                   | meaning                             |
//! |---------|-----------------------------------------------|-------------------------------------|
//! | false   | a writer holding the lock (revocation), INIT  | readers go through the lock         |
//! | true    | a slow-path reader holding it, inhibit over   | readers may publish in the table    |
//!
//! A revocation that gives up (`try_lock_exclusive`, `try_upgrade`: a fast
//! reader is inside) leaves the bias off, so that the fast readers drain and
//! a later attempt can succeed — but then the bias being off no longer means
//! that no slot names the lock. `draining` says so:
//!
//! | `draining` | who sets it                                            | meaning                                   |
//! |------------|--------------------------------------------------------|-------------------------------------------|
//! | false      | a revocation that saw no slot naming the lock, INIT    | with the bias off, no fast reader is inside |
//! | true       | a revocation that gave up at a slot naming the lock    | fast readers may be inside: writers revoke (scan) even with the bias off |
//!
//! Only writers (holding `L` exclusively, or upgradably in `try_upgrade`,
//! which excludes the other writers) write and read it, so `L` orders it.
//!
//! Uses `sched`: the writer's wait for a published reader spins through
//! [`Waiter`] and, when advised to park (the patience is
//! spent: a fast reader that is preempted holds the writer up, as any reader
//! does), parks on the lock's `revoker` word (`sched::park`), woken by the
//! fast reader's unlock — never `sched_yield`:
//!
//! ```text
//! writer (waiting for slot s)              fast reader (unlock)
//! revoker := 1                    [P1]     swap s: lock -> empty      [U1]
//! fence(SeqCst)                            fence(SeqCst)
//! if s == lock: park(revoker, 1)  [P2]     if revoker != 0:           [U2]
//!                                              if swap revoker -> 0 != 0: unpark_one
//! ```
//!
//! A second Dekker pair (fences, as loom checks them): if \[P2\] still sees the
//! reader's slot, \[U2\] sees the announcement and its swap changes the futex
//! word, so the park does not start or is woken. Only one thread waits in a revocation at a
//! time (it holds `L` exclusively), and it clears the word when it is done, so
//! a fast unlock costs one more load of a line it read on entry. Progress and fairness: those of the underlying lock for writers;
//! a writer never waits for a reader that arrived after its revocation.
//!
//! Upgradable reads (`lock_api::RawRwLockUpgrade`, when `L` has them): an
//! upgradable reader always takes the slow path — it must exclude writers and
//! other upgradable readers, which only `L` can do — and fast readers go on
//! beside it. Its upgrade is a writer's entry: `L`'s upgrade (no slow reader
//! left, none can re-enable the bias), then the revocation, waiting for the
//! fast readers to drain. (Loom model: `tests/loom_rwlock_barrier.rs`, `bravo_upgrade_vs_fast_reader`.)
//!
//! **Forgotten guards.** A forgotten read guard (`mem::forget`) leaves its
//! slot set: like a forgotten guard of any lock, later writers of that lock
//! wait forever. The slot names the lock by its id, not its address, so it
//! holds up no other lock: the forgotten guard's borrow is over, so the lock
//! may be moved (`mem::replace`, a `Vec` that reallocates) and a new lock made
//! where it was — which a slot naming an address would refuse its writers
//! forever. Dropping the lock clears its slots (whether or not the bias is
//! still on: a writer turns it off and leaves the forgotten reader's slot),
//! so they do not stay taken; a lock that was never biased has none, and its
//! drop does not scan the table.
//!
//! ```
//! use mpsync::{rwlock::{RwLock, Bravo, RwTasB}};
//! let l: RwLock<Bravo<RwTasB>, u32> = RwLock::new(1);
//! {
//!     let (a, b) = (l.read(), l.read()); // the second read may take the fast path
//!     assert_eq!(*a + *b, 2);
//! }
//! *l.write() += 1; // revokes the bias
//! assert_eq!(*l.read(), 2);
//! ```

use std::fmt;
use std::time::{Duration, Instant};

use crate::sched::{self, Wait, Waiter};
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

/// The inhibit period's clock: `CLOCK_MONOTONIC`; under loom a constant 0 (a
/// model must not branch on real time; the inhibit period is then empty, so
/// models see the bias re-enabled as often as possible).
#[inline]
fn clock() -> u64 {
    #[cfg(loom)]
    return 0;
    #[cfg(not(loom))]
    crate::util::clock::now_ns()
}

/// Slots of the global visible-readers table (the paper's 4096).
#[cfg(not(loom))]
pub const TABLE_SLOTS: usize = 4096;
/// Slots of the visible-readers table (small under loom).
#[cfg(loom)]
pub const TABLE_SLOTS: usize = 4;

/// The inhibit period is this many times the revocation's cost (the paper's N = 9).
pub const INHIBIT_MULTIPLIER: u64 = 9;

/// The visible-readers table: each slot is empty (0) or holds the id of a
/// [`Bravo`] lock that one fast-path reader holds for reading. The table
/// hands the ids out (1, 2, …), one to each lock when it is first biased.
pub struct VisibleReaders {
    slots: [AtomicUsize; TABLE_SLOTS],
    /// The last id handed out.
    ids: AtomicUsize,
}

impl VisibleReaders {
    /// An empty table.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            slots: [const { AtomicUsize::new(0) }; TABLE_SLOTS],
            ids: AtomicUsize::new(0),
        }
    }

    /// An empty table.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            slots: std::array::from_fn(|_| AtomicUsize::new(0)),
            ids: AtomicUsize::new(0),
        }
    }

    /// Slots that name the lock with id `lock` now (a snapshot; 0 counts
    /// the empty slots). [`Bravo::fast_readers`] asks with its lock's id.
    pub fn readers_of(&self, lock: usize) -> usize {
        self.slots
            .iter()
            // Relaxed: a snapshot (Debug, is_locked).
            .filter(|s| s.load(Ordering::Relaxed) == lock)
            .count()
    }

    /// Slots taken now, by any lock's fast reader (a snapshot).
    pub fn used(&self) -> usize {
        TABLE_SLOTS - self.readers_of(0)
    }

    /// A new lock id: never 0 (an empty slot), never handed out before.
    fn fresh_id(&self) -> usize {
        // Relaxed: only uniqueness matters (a read-modify-write).
        self.ids.fetch_add(1, Ordering::Relaxed) + 1
    }
}

impl Default for VisibleReaders {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for VisibleReaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VisibleReaders")
            .field("slots", &TABLE_SLOTS)
            .field("used", &self.used())
            .finish()
    }
}

/// The process-wide table every [`Bravo`] lock made by `INIT`/`new` uses.
#[cfg(not(loom))]
pub static GLOBAL_TABLE: VisibleReaders = VisibleReaders::new();

/// `L` with a BRAVO reader bias (see the module doc).
pub struct Bravo<L> {
    /// Whether readers may take the fast path (state table in the module doc).
    rbias: AtomicBool,
    /// A revocation gave up with a fast reader inside (second table in the
    /// module doc).
    draining: AtomicBool,
    /// This lock's id in the table's slots: 0 until the bias is first
    /// enabled (only then can a slot name the lock: a reader publishes only
    /// after seeing the bias on), then an id from the table, set once.
    ident: AtomicUsize,
    /// `clock()` before which slow-path readers must not re-enable the bias.
    inhibit_until: AtomicU64,
    /// 1 while a revoking writer is (about to be) parked waiting for a fast
    /// reader's slot; the reader that clears it wakes the writer.
    revoker: AtomicU32,
    table: &'static VisibleReaders,
    inner: L,
}

/// How long a revoking writer waits for the fast readers to drain.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Drain {
    /// Until they are gone.
    Forever,
    /// Not at all: give up at the first slot that names the lock.
    No,
    /// Until the deadline.
    Until(Instant),
}

impl<L> Bravo<L> {
    /// Wraps an unlocked lock; readers publish in the global table.
    #[cfg(not(loom))]
    pub const fn new(inner: L) -> Self {
        Self::with_table(inner, &GLOBAL_TABLE)
    }

    /// Wraps an unlocked lock whose fast readers publish in `table` (tests and
    /// models give a lock its own; a program normally uses [`Bravo::new`]).
    #[cfg(not(loom))]
    pub const fn with_table(inner: L, table: &'static VisibleReaders) -> Self {
        Self {
            rbias: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            ident: AtomicUsize::new(0),
            inhibit_until: AtomicU64::new(0),
            revoker: AtomicU32::new(0),
            table,
            inner,
        }
    }

    /// Wraps an unlocked lock whose fast readers publish in `table`.
    #[cfg(loom)]
    pub fn with_table(inner: L, table: &'static VisibleReaders) -> Self {
        Self {
            rbias: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            ident: AtomicUsize::new(0),
            inhibit_until: AtomicU64::new(0),
            revoker: AtomicU32::new(0),
            table,
            inner,
        }
    }

    /// The wrapped lock.
    pub fn inner(&self) -> &L {
        &self.inner
    }

    /// Whether the lock is reader-biased now (a snapshot).
    pub fn is_biased(&self) -> bool {
        // Relaxed: a snapshot.
        self.rbias.load(Ordering::Relaxed)
    }

    /// Fast-path readers inside now (a snapshot; scans the table).
    pub fn fast_readers(&self) -> usize {
        match self.ident() {
            0 => 0, // never biased: no slot names this lock
            me => self.table.readers_of(me),
        }
    }

    /// This lock's id in the table (0: never biased). Relaxed: once not 0 it
    /// never changes (set once, by a CAS from 0); who must see it does so
    /// through `inner` (writers) or checks for 0 (fast readers: see `try_fast`).
    #[inline]
    fn ident(&self) -> usize {
        self.ident.load(Ordering::Relaxed)
    }

    /// The calling thread's slot for this lock (Fibonacci hash of thread and lock).
    #[inline]
    fn slot(&self) -> usize {
        let t = sched::current().id() as usize;
        // Under loom the lock's address (which differs between executions) is
        // left out: a model must take the same path each time it replays.
        let lock = if cfg!(loom) {
            0
        } else {
            self as *const Self as usize >> 6
        };
        let h = (t ^ lock).wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as usize);
        (h >> 16) % TABLE_SLOTS
    }

    /// The reader's fast path: publish, then re-check the bias ([R1]–[R3]).
    #[inline]
    fn try_fast(&self) -> Option<usize> {
        sched::stall::point(sched::stall::BRAVO_BIAS_SEEN);
        let me = self.ident();
        if me == 0 {
            // The bias was enabled with the id (the Release store after it
            // in `maybe_rebias`), but our look at the bias was only a hint:
            // the id is not in sight yet. Read through the lock.
            return None;
        }
        let slot = self.slot();
        let s = &self.table.slots[slot];
        // [R1] Relaxed failure: the slot is someone else's; take the slow path.
        // The success ordering is irrelevant beside the fence that follows.
        if s.compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        // [R2] SeqCst fence: with [W2], one of [R3] and [W3] sees the other
        // side's store (Dekker). It also orders the read section after [R1]
        // and [R3] (acquire side of the bias the writer set false after its
        // section — see `revoke`).
        fence(Ordering::SeqCst);
        // [R3] Relaxed: ordered by the fences.
        if self.rbias.load(Ordering::Relaxed) {
            // Acquire fence: the read section must see the last writer's
            // section, which happened before a reader re-enabled the bias
            // under the underlying lock (Release store in `lock_shared`'s slow path).
            fence(Ordering::Acquire);
            return Some(slot);
        }
        // The bias is off: withdraw — as an unlock ([U1]–[U2]): a revoking
        // writer may have seen the slot and parked for it.
        self.clear_slot(s);
        None
    }

    /// A reader's fast-path guard, if the bias is on and [`try_fast`](Self::try_fast)
    /// got in (every shared acquisition tries it first).
    #[inline]
    fn fast_guard<G>(&self) -> Option<BravoShared<G>> {
        // Relaxed: a hint; [R3] decides.
        if self.rbias.load(Ordering::Relaxed) {
            return self.try_fast().map(BravoShared::Fast);
        }
        None
    }

    /// Whether a writer holding `inner` must revoke: the bias is on, or a
    /// revocation gave up with fast readers inside (`draining`). Relaxed
    /// (both): set only by threads holding `inner` (readers the bias,
    /// writers `draining`), whose release our acquisition of `inner` follows.
    #[inline]
    fn must_revoke(&self) -> bool {
        self.rbias.load(Ordering::Relaxed) || self.draining.load(Ordering::Relaxed)
    }

    /// The writer's revocation ([W1]–[W3]); the caller holds `inner` exclusively
    /// and saw [`must_revoke`](Self::must_revoke). With [`Drain::No`], gives up
    /// (returns false) at the first slot still naming this lock, leaving the
    /// bias off and `draining` set; with [`Drain::Until`], at the deadline, in
    /// the same state. (`try_upgrade` also calls it holding `inner` only
    /// upgradably, as a try: a slow reader may then re-enable the bias at
    /// once, so it re-checks under the exclusive hold.)
    fn revoke(&self, drain: Drain) -> bool {
        let start = clock();
        // [W1] Relaxed: ordered before [W3] by the fence.
        self.rbias.store(false, Ordering::Relaxed);
        // [W2] SeqCst fence: pairs with [R2].
        fence(Ordering::SeqCst);
        // The id: the reader that first biased the lock set it holding
        // `inner` for reading, before enabling the bias we saw; holding
        // `inner` exclusively (`wait`), we acquired it after that reader's
        // release, so we see it. Holding it only upgradably (a `try_upgrade`)
        // we may not yet: give up then (a try may fail).
        let me = self.ident();
        if me == 0 && drain == Drain::No {
            self.draining.store(true, Ordering::Relaxed); // (`L` orders it)
            return false;
        }
        // (Holding `inner` exclusively and no id, the lock was never biased:
        // no slot names it.)
        for s in &self.table.slots {
            // [W3] Acquire: pairs with the fast reader's Release clearing of
            // its slot in `unlock_shared` — its section is over before ours.
            if me != 0 && s.load(Ordering::Acquire) == me {
                let drained = match drain {
                    Drain::No => false,
                    Drain::Forever => self.wait_slot(s, me, None),
                    Drain::Until(d) => self.wait_slot(s, me, Some(d)),
                };
                if !drained {
                    // The bias stays off, so the fast readers drain; until a
                    // revocation sees none, writers must look (`must_revoke`).
                    self.draining.store(true, Ordering::Relaxed);
                    return false;
                }
            }
        }
        self.draining.store(false, Ordering::Relaxed);
        let cost = clock().saturating_sub(start);
        // Relaxed: read by slow-path readers that hold `inner` for reading,
        // which they acquired after our release of `inner`.
        self.inhibit_until.store(
            clock().saturating_add(cost.saturating_mul(INHIBIT_MULTIPLIER)),
            Ordering::Relaxed,
        );
        true
    }
}

impl<L> Bravo<L> {
    /// The revoking writer's wait for one slot that names this lock ([W3],
    /// [P1]–[P2] in the module doc): spins while the shared waiting policy
    /// advises it, then parks on `revoker`, woken by the reader's unlock.
    /// Returns false if the `deadline` passed first (the slot still names
    /// the lock).
    #[cold]
    fn wait_slot(&self, s: &AtomicUsize, me: usize, deadline: Option<Instant>) -> bool {
        let mut w = Waiter::new();
        let mut paused = false;
        let mut drained = true;
        // [W3] Acquire: as in `revoke`.
        while s.load(Ordering::Acquire) == me {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                drained = false;
                break;
            }
            if w.spin(None) == Wait::Park {
                let cb = sched::current();
                // Parked, we hold no processor: let the scheduler preempt us
                // meanwhile (only the owner's own outermost request
                // pauses), as RW-Queued's writer does in its drain.
                paused |= cb.depth() > 0 && cb.pause_no_preempt();
                // [P1] Relaxed: ordered before [P2] by the fence.
                self.revoker.store(1, Ordering::Relaxed);
                // SeqCst fence: pairs with the fast reader's fence between
                // [U1] and [U2] (Dekker; see the module doc).
                fence(Ordering::SeqCst);
                // [P2] Acquire: as [W3].
                if s.load(Ordering::Acquire) == me {
                    sched::park(&self.revoker, 1, left);
                }
                w.restart();
            }
        }
        // Relaxed: only this thread announces; a reader's swap to 0 racing
        // this store writes the same value.
        self.revoker.store(0, Ordering::Relaxed);
        if paused {
            sched::current().resume_no_preempt();
        }
        drained
    }

    /// A fast reader leaves its slot `s` (unlock, or withdrawal after it saw
    /// the bias off): [U1], then [U2] — a revoking writer may be parked for it.
    #[inline]
    fn clear_slot(&self, s: &AtomicUsize) {
        // [U1] Release: pairs with the revoking writer's Acquire [W3]/[P2].
        // A swap, not a store: every write to a slot is a read-modify-write,
        // so a writer that reads a later value of the slot (another lock's
        // reader took and left it since) still synchronizes with this
        // release, which heads an unbroken release sequence.
        s.swap(0, Ordering::Release);
        // SeqCst fence: pairs with the parking writer's fence between [P1]
        // and [P2] (Dekker; see the module doc).
        fence(Ordering::SeqCst);
        // [U2] Relaxed: ordered after [U1] by the fence.
        if self.revoker.load(Ordering::Relaxed) != 0 {
            self.wake_revoker();
        }
    }

    /// A fast reader's unlock saw a revoker announced ([U2]): wake it.
    #[cold]
    fn wake_revoker(&self) {
        // SeqCst: changes the futex word before the wake, so a park that has
        // not started yet returns at once.
        if self.revoker.swap(0, Ordering::SeqCst) != 0 {
            sched::unpark_one(&self.revoker);
        }
    }
}

impl<L: lock_api::RawRwLock> Bravo<L> {
    /// Slow-path bookkeeping of a reader that holds `inner` for reading:
    /// re-enable the bias once the inhibit period is over.
    #[inline]
    fn maybe_rebias(&self) {
        // Relaxed loads: `inner`'s read acquisition ordered us after the last
        // writer's stores of both.
        if !self.rbias.load(Ordering::Relaxed)
            && clock() >= self.inhibit_until.load(Ordering::Relaxed)
        {
            if self.ident() == 0 {
                // The first bias: the lock gets its id. Relaxed: a fast
                // reader that sees the bias (Release below) but not yet the
                // id takes the slow path; writers see it through `inner`.
                let _ = self.ident.compare_exchange(
                    0,
                    self.table.fresh_id(),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            // Release: pairs with the fast reader's Acquire fence after [R3]:
            // the last writer's section (ordered before our `inner` read
            // acquisition) is visible to readers that see the bias on.
            self.rbias.store(true, Ordering::Release);
        }
    }
}

impl<L: Default> Default for Bravo<L> {
    #[cfg(not(loom))]
    fn default() -> Self {
        Self::new(L::default())
    }
    #[cfg(loom)]
    fn default() -> Self {
        Self::with_table(L::default(), Box::leak(Box::new(VisibleReaders::new())))
    }
}

impl<L: fmt::Debug> fmt::Debug for Bravo<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bravo")
            .field("biased", &self.is_biased())
            .field("fast_readers", &self.fast_readers())
            .field("inner", &self.inner)
            .finish()
    }
}

impl<L> Drop for Bravo<L> {
    fn drop(&mut self) {
        // No guard can be alive: a slot naming this lock is a forgotten guard's.
        // Clear it, so that it does not stay taken. Whether the bias is on
        // *now* does not tell: a writer (a failed `try_lock_exclusive` too)
        // turns it off and leaves the forgotten reader's slot; only a lock
        // that was never biased (id 0) has none.
        let me = self.ident(); // `&mut self`: every use happened before
        if me != 0 {
            for s in &self.table.slots {
                // Relaxed: `&mut self`; no reader of this lock can exist.
                let _ = s.compare_exchange(me, 0, Ordering::Relaxed, Ordering::Relaxed);
            }
        }
    }
}

/// A read guard of [`Bravo`]: the slot a fast reader published in, or the
/// underlying lock's guard.
pub enum BravoShared<G> {
    /// Read on the fast path; the slot to clear.
    Fast(usize),
    /// Read through the underlying lock.
    Slow(G),
}

impl<G> fmt::Debug for BravoShared<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fast(slot) => f.debug_tuple("Fast").field(slot).finish(),
            Self::Slow(_) => f.write_str("Slow"),
        }
    }
}

// SAFETY: a fast reader holds the lock only while its slot names it (by the
// lock's id, which no other lock has) and the bias was on after it published
// (Dekker pair in the module doc); a writer holds `inner` exclusively and,
// having revoked the bias, waited until no slot names the lock, so no fast
// reader is inside and none can enter (the bias is set again only by a reader
// holding `inner`). A writer skips the revocation only when the bias is off
// and no revocation gave up since the last one that saw no slot (`draining`
// false): then no fast reader has entered since that one. Slow readers and
// writers are excluded by `inner`.
unsafe impl<L: lock_api::RawRwLock> lock_api::RawRwLock for Bravo<L> {
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(not(loom))]
    const INIT: Self = Self::new(L::INIT);
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(loom)]
    const INIT: Self = panic!("under loom, use Bravo::with_table");

    type SharedGuard = BravoShared<L::SharedGuard>;
    type ExclusiveGuard = L::ExclusiveGuard;

    #[inline]
    fn lock_shared(&self) -> Self::SharedGuard {
        if let Some(g) = self.fast_guard() {
            return g;
        }
        let g = self.inner.lock_shared();
        self.maybe_rebias();
        BravoShared::Slow(g)
    }

    #[inline]
    fn try_lock_shared(&self) -> Option<Self::SharedGuard> {
        if let Some(g) = self.fast_guard() {
            return Some(g);
        }
        let g = self.inner.try_lock_shared()?;
        self.maybe_rebias();
        Some(BravoShared::Slow(g))
    }

    #[inline]
    unsafe fn unlock_shared(&self, guard: Self::SharedGuard) {
        match guard {
            // [U1]–[U2]: see `clear_slot`.
            BravoShared::Fast(slot) => self.clear_slot(&self.table.slots[slot]),
            // SAFETY: the caller's contract: the guard came from this lock.
            BravoShared::Slow(g) => unsafe { self.inner.unlock_shared(g) },
        }
    }

    #[inline]
    fn lock_exclusive(&self) -> Self::ExclusiveGuard {
        let g = self.inner.lock_exclusive();
        if self.must_revoke() {
            self.revoke(Drain::Forever);
        }
        g
    }

    #[inline]
    fn try_lock_exclusive(&self) -> Option<Self::ExclusiveGuard> {
        let g = self.inner.try_lock_exclusive()?;
        if self.must_revoke() && !self.revoke(Drain::No) {
            // A fast reader is inside: give up (the bias stays off, so it
            // drains; a later attempt can succeed; writers meanwhile look
            // for it: `draining`).
            // SAFETY: `g` came from `inner` just now, on this thread.
            unsafe { self.inner.unlock_exclusive(g) };
            return None;
        }
        Some(g)
    }

    #[inline]
    unsafe fn unlock_exclusive(&self, guard: Self::ExclusiveGuard) {
        // SAFETY: the caller's contract: the guard came from this lock.
        unsafe { self.inner.unlock_exclusive(guard) };
    }

    #[inline]
    fn is_locked(&self) -> bool {
        // Fast readers can be inside with the bias off (`draining`).
        self.inner.is_locked() || self.fast_readers() > 0
    }

    #[inline]
    fn is_locked_exclusive(&self) -> bool {
        self.inner.is_locked_exclusive()
    }
}

// SAFETY: an upgradable reader holds `inner` upgradably — it never takes the
// fast path, since only `inner` excludes writers and other upgradable readers
// — so those are excluded by `inner`; fast readers may go on beside it, as
// beside any reader. Its upgrade is a writer's entry: `inner`'s upgrade makes
// it the exclusive holder of `inner`, so no slow reader is inside and none can
// re-enable the bias, and then, like `lock_exclusive`, it revokes the bias and
// waits until no slot names this lock.
unsafe impl<L: lock_api::RawRwLockUpgrade> lock_api::RawRwLockUpgrade for Bravo<L> {
    type UpgradableGuard = L::UpgradableGuard;

    #[inline]
    fn lock_upgradable(&self) -> Self::UpgradableGuard {
        self.inner.lock_upgradable()
    }

    #[inline]
    fn try_lock_upgradable(&self) -> Option<Self::UpgradableGuard> {
        self.inner.try_lock_upgradable()
    }

    #[inline]
    unsafe fn unlock_upgradable(&self, guard: Self::UpgradableGuard) {
        // SAFETY: the caller's contract: the guard came from this lock.
        unsafe { self.inner.unlock_upgradable(guard) };
    }

    #[inline]
    unsafe fn upgrade(&self, guard: Self::UpgradableGuard) -> Self::ExclusiveGuard {
        // SAFETY: the caller's contract: the guard came from this lock.
        let g = unsafe { self.inner.upgrade(guard) };
        // As in `lock_exclusive`: we hold `inner` exclusively now.
        if self.must_revoke() {
            self.revoke(Drain::Forever);
        }
        g
    }

    /// Fails while a fast reader is inside. The revocation is tried *before*
    /// `inner`'s upgrade (while we still can give up: lock_api has no way back
    /// from exclusive to upgradable); if a slow reader re-enabled the bias
    /// between the two (possible only once the inhibit period of the last
    /// revocation is over), the fast readers that came in since are waited for
    /// — readers that arrived after this call began, never the caller's own.
    #[inline]
    unsafe fn try_upgrade(
        &self,
        guard: Self::UpgradableGuard,
    ) -> Result<Self::ExclusiveGuard, Self::UpgradableGuard> {
        // A hint (we hold `inner` only upgradably); `revoke` orders itself
        // against the fast readers.
        if self.must_revoke() && !self.revoke(Drain::No) {
            // A fast reader is inside (it drains: the bias stays off).
            return Err(guard);
        }
        // SAFETY: the caller's contract: the guard came from this lock.
        let g = unsafe { self.inner.try_upgrade(guard) }?;
        // As in `upgrade`.
        if self.must_revoke() {
            self.revoke(Drain::Forever);
        }
        Ok(g)
    }
}

// SAFETY: a writer holds `L` exclusively and, after its revocation, no fast
// reader is inside and the bias is off (only a slow reader sets it); `L`'s
// downgrade turns it into a slow reader of `L` — what `lock_shared`'s slow
// path holds — without a moment in which a writer could enter.
unsafe impl<L: lock_api::RawRwLockDowngrade> lock_api::RawRwLockDowngrade for Bravo<L> {
    #[inline]
    unsafe fn downgrade(&self, guard: Self::ExclusiveGuard) -> Self::SharedGuard {
        // SAFETY: the caller's contract: `guard` is `L`'s exclusive guard.
        BravoShared::Slow(unsafe { self.inner.downgrade(guard) })
    }
}

// SAFETY: a fast reader holds nothing of `L`: its unlock is the plain one
// (clearing its slot); a slow reader's and a writer's are `L`'s fair unlocks.
unsafe impl<L: lock_api::RawRwLockFair> lock_api::RawRwLockFair for Bravo<L> {
    #[inline]
    unsafe fn unlock_shared_fair(&self, guard: Self::SharedGuard) {
        match guard {
            BravoShared::Fast(slot) => self.clear_slot(&self.table.slots[slot]),
            // SAFETY: the caller's contract: `g` came from `self.inner`.
            BravoShared::Slow(g) => unsafe { self.inner.unlock_shared_fair(g) },
        }
    }

    #[inline]
    unsafe fn unlock_exclusive_fair(&self, guard: Self::ExclusiveGuard) {
        // SAFETY: the caller's contract.
        unsafe { self.inner.unlock_exclusive_fair(guard) };
    }
}

// SAFETY: the timed forms take the lock exactly as the untimed ones do: a
// reader by the fast path or by `inner`'s timed shared acquisition; a writer
// by `inner`'s timed exclusive acquisition followed by the revocation, which
// at the deadline gives up as `try_lock_exclusive` does (the bias off,
// `draining` set, `inner` released), so no writer is inside beside a fast
// reader.
unsafe impl<L> lock_api::RawRwLockTimed for Bravo<L>
where
    L: lock_api::RawRwLockTimed<Duration = Duration, Instant = Instant>,
{
    type Duration = Duration;
    type Instant = Instant;

    #[inline]
    fn try_lock_shared_for(&self, timeout: Duration) -> Option<Self::SharedGuard> {
        super::try_shared_for_until(self, timeout)
    }

    fn try_lock_shared_until(&self, deadline: Instant) -> Option<Self::SharedGuard> {
        if let Some(g) = self.fast_guard() {
            return Some(g);
        }
        let g = self.inner.try_lock_shared_until(deadline)?;
        self.maybe_rebias();
        Some(BravoShared::Slow(g))
    }

    #[inline]
    fn try_lock_exclusive_for(&self, timeout: Duration) -> Option<Self::ExclusiveGuard> {
        super::try_exclusive_for_until(self, timeout)
    }

    fn try_lock_exclusive_until(&self, deadline: Instant) -> Option<Self::ExclusiveGuard> {
        let g = self.inner.try_lock_exclusive_until(deadline)?;
        if self.must_revoke() && !self.revoke(Drain::Until(deadline)) {
            // Fast readers still inside at the deadline: give up as
            // `try_lock_exclusive` does (they drain; `draining` is set).
            // SAFETY: `g` came from `inner` just now, on this thread.
            unsafe { self.inner.unlock_exclusive(g) };
            return None;
        }
        Some(g)
    }
}
