//! BRAVO: a reader bias that any reader-writer lock can wear.
//!
//! Dice & Kogan, *BRAVO — Biased Locking for Reader-Writer Locks*, USENIX ATC
//! 2019 (beyond the five papers; issue 15). While the lock is *reader-biased*,
//! a reader does not touch the underlying lock at all: it publishes the lock's
//! address in one slot of a global **visible-readers table** (hashed by thread
//! and lock, so readers of one lock write different cache lines) and re-checks
//! the bias. A writer takes the underlying lock for writing, *revokes* the bias
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
//! else: slot := empty, slow path
//! ```
//!
//! The two SeqCst fences order [R1] before [R3] and [W1] before [W3] in one
//! total order, so either the writer sees the slot (and waits for the reader's
//! release) or the reader sees the bias off (and withdraws). The bias is set
//! only by a reader that holds the underlying lock for reading, so it stays
//! off while a writer is inside. (Loom model: `tests/loom_rwlock_barrier.rs`,
//! `loom_bravo_*`.)
//!
//! | `rbias` | who sets it                                   | meaning                             |
//! |---------|-----------------------------------------------|-------------------------------------|
//! | false   | a writer holding the lock (revocation), INIT  | readers go through the lock         |
//! | true    | a slow-path reader holding it, inhibit over   | readers may publish in the table    |
//!
//! Uses `sched`: the writer's wait for published readers spins through
//! [`Waiter`](crate::sched::Waiter) and yields through `sched` when advised to
//! park (a fast reader that is preempted holds the writer up, as any reader
//! does). Progress and fairness: those of the underlying lock for writers;
//! a writer never waits for a reader that arrived after its revocation.
//!
//! A forgotten read guard (`mem::forget`) leaves its slot set: like a forgotten
//! guard of any lock, later writers of that lock wait forever; dropping the lock
//! clears its slots, so a new lock at the same address is not affected.
//!
//! ```
//! use mpsync::{RwLock, rwlock::{Bravo, RwTasB}};
//! let l: RwLock<Bravo<RwTasB>, u32> = RwLock::new(1);
//! {
//!     let (a, b) = (l.read(), l.read()); // the second read may take the fast path
//!     assert_eq!(*a + *b, 2);
//! }
//! *l.write() += 1; // revokes the bias
//! assert_eq!(*l.read(), 2);
//! ```

use std::fmt;

use crate::sched::{self, Wait, Waiter};
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};

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

/// The visible-readers table: each slot is empty (0) or holds the address of
/// a [`Bravo`] lock that one fast-path reader holds for reading.
pub struct VisibleReaders {
    slots: [AtomicUsize; TABLE_SLOTS],
}

impl VisibleReaders {
    /// An empty table.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            slots: [const { AtomicUsize::new(0) }; TABLE_SLOTS],
        }
    }

    /// An empty table.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            slots: std::array::from_fn(|_| AtomicUsize::new(0)),
        }
    }

    /// Slots that name the lock at address `lock` now (a snapshot).
    pub fn readers_of(&self, lock: usize) -> usize {
        self.slots
            .iter()
            // Relaxed: a snapshot (Debug, is_locked).
            .filter(|s| s.load(Ordering::Relaxed) == lock)
            .count()
    }
}

impl Default for VisibleReaders {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for VisibleReaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let used = self
            .slots
            .iter()
            // Relaxed: a snapshot.
            .filter(|s| s.load(Ordering::Relaxed) != 0)
            .count();
        f.debug_struct("VisibleReaders")
            .field("slots", &TABLE_SLOTS)
            .field("used", &used)
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
    /// `clock()` before which slow-path readers must not re-enable the bias.
    inhibit_until: AtomicU64,
    table: &'static VisibleReaders,
    inner: L,
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
            inhibit_until: AtomicU64::new(0),
            table,
            inner,
        }
    }

    /// Wraps an unlocked lock whose fast readers publish in `table`.
    #[cfg(loom)]
    pub fn with_table(inner: L, table: &'static VisibleReaders) -> Self {
        Self {
            rbias: AtomicBool::new(false),
            inhibit_until: AtomicU64::new(0),
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
        self.table.readers_of(self.id())
    }

    #[inline]
    fn id(&self) -> usize {
        self as *const Self as usize
    }

    /// The calling thread's slot for this lock (Fibonacci hash of thread and lock).
    #[inline]
    fn slot(&self) -> usize {
        let t = sched::current().id() as usize;
        // Under loom the lock's address (which differs between executions) is
        // left out: a model must take the same path each time it replays.
        let lock = if cfg!(loom) { 0 } else { self.id() >> 6 };
        let h = (t ^ lock).wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as usize);
        (h >> 16) % TABLE_SLOTS
    }

    /// The reader's fast path: publish, then re-check the bias ([R1]–[R3]).
    #[inline]
    fn try_fast(&self) -> Option<usize> {
        sched::stall::point(sched::stall::BRAVO_BIAS_SEEN);
        let slot = self.slot();
        let s = &self.table.slots[slot];
        // [R1] Relaxed failure: the slot is someone else's; take the slow path.
        // The success ordering is irrelevant beside the fence that follows.
        if s.compare_exchange(0, self.id(), Ordering::Relaxed, Ordering::Relaxed)
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
        // The bias is off: withdraw. Relaxed: nothing was read under it; a
        // swap, not a store, so as not to end a release sequence ([U1]).
        s.swap(0, Ordering::Relaxed);
        None
    }

    /// The writer's revocation ([W1]–[W3]); the caller holds `inner` exclusively
    /// and saw the bias on. With `wait` false, gives up (returns false) at the
    /// first slot still naming this lock.
    fn revoke(&self, wait: bool) -> bool {
        let start = clock();
        // [W1] Relaxed: ordered before [W3] by the fence.
        self.rbias.store(false, Ordering::Relaxed);
        // [W2] SeqCst fence: pairs with [R2].
        fence(Ordering::SeqCst);
        let me = self.id();
        for s in &self.table.slots {
            let mut w = Waiter::new();
            // [W3] Acquire: pairs with the fast reader's Release clearing of
            // its slot in `unlock_shared` — its section is over before ours.
            while s.load(Ordering::Acquire) == me {
                if !wait {
                    return false;
                }
                if w.spin(None) == Wait::Park {
                    sched::yield_now();
                    w.restart();
                }
            }
        }
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
        // Clear it so that a lock later made at this address is not held up.
        // Relaxed: `&mut self`, nothing runs concurrently.
        if self.rbias.load(Ordering::Relaxed) {
            let me = self.id();
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

// SAFETY: a fast reader holds the lock only while its slot names it and the
// bias was on after it published (Dekker pair in the module doc); a writer
// holds `inner` exclusively and, having revoked the bias, waited until no slot
// names the lock, so no fast reader is inside and none can enter (the bias is
// set again only by a reader holding `inner`). Slow readers and writers are
// excluded by `inner`.
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
        // Relaxed: a hint; [R3] decides.
        if self.rbias.load(Ordering::Relaxed)
            && let Some(slot) = self.try_fast()
        {
            return BravoShared::Fast(slot);
        }
        let g = self.inner.lock_shared();
        self.maybe_rebias();
        BravoShared::Slow(g)
    }

    #[inline]
    fn try_lock_shared(&self) -> Option<Self::SharedGuard> {
        // Relaxed: a hint; [R3] decides.
        if self.rbias.load(Ordering::Relaxed)
            && let Some(slot) = self.try_fast()
        {
            return Some(BravoShared::Fast(slot));
        }
        let g = self.inner.try_lock_shared()?;
        self.maybe_rebias();
        Some(BravoShared::Slow(g))
    }

    #[inline]
    unsafe fn unlock_shared(&self, guard: Self::SharedGuard) {
        match guard {
            // [U1] Release: pairs with the revoking writer's Acquire [W3]. A
            // swap, not a store: every write to a slot is a read-modify-write,
            // so a writer that reads a later value of the slot (another
            // lock's reader took and left it since) still synchronizes with
            // this release, which heads an unbroken release sequence.
            BravoShared::Fast(slot) => {
                self.table.slots[slot].swap(0, Ordering::Release);
            }
            // SAFETY: the caller's contract: the guard came from this lock.
            BravoShared::Slow(g) => unsafe { self.inner.unlock_shared(g) },
        }
    }

    #[inline]
    fn lock_exclusive(&self) -> Self::ExclusiveGuard {
        let g = self.inner.lock_exclusive();
        // Relaxed: set only by readers holding `inner`, whose release our
        // acquisition of `inner` follows.
        if self.rbias.load(Ordering::Relaxed) {
            self.revoke(true);
        }
        g
    }

    #[inline]
    fn try_lock_exclusive(&self) -> Option<Self::ExclusiveGuard> {
        let g = self.inner.try_lock_exclusive()?;
        // Relaxed: as in `lock_exclusive`.
        if self.rbias.load(Ordering::Relaxed) && !self.revoke(false) {
            // A fast reader is inside: give up (the bias stays off, so it
            // drains; a later attempt can succeed).
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
        self.inner.is_locked() || (self.is_biased() && self.fast_readers() > 0)
    }

    #[inline]
    fn is_locked_exclusive(&self) -> bool {
        self.inner.is_locked_exclusive()
    }
}
