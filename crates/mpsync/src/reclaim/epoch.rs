//! The epoch machinery shared by [`Ebr`](super::Ebr) and [`Qsbr`](super::Qsbr).
//!
//! Fraser's scheme (Hart §4.1.1): a global epoch `G`; each thread's record holds
//! the epoch it last observed and whether it is *pinned* (may hold references).
//! EBR pins for each operation (critical section); QSBR is pinned whenever it is
//! registered and re-pins at each quiescent state. `G` advances from `g` to `g+1`
//! only when every pinned thread has observed `g`.
//!
//! A thread retires nodes into the limbo bag of its own epoch `e` (three bags,
//! indexed `e mod 3`, as in Fraser's three limbo lists). They are freed once
//! `G >= e + 3`: while the thread is pinned at `e`, `G <= e + 1`; the advance to
//! `e + 2` needed every pinned thread at `e + 1`, so it came after this thread
//! unpinned (or re-pinned) — after the unlink; and the advance to `e + 3` needed
//! every pinned thread to have pinned at `e + 2`, i.e. after that. (This is at
//! least as strict as crossbeam-epoch's `G >= sealed + 2`, where the bag is sealed
//! with a `G` read after the unlink, which is `<= e + 1`.) So when a thread moves
//! to epoch `e + 3`, the bag it reuses (same index) is safe to free — Fraser's rule.
//!
//! Orderings, numbered and referred to below:
//! - \[1\] pin: `state.store((g, pinned), Release)` then `fence(SeqCst)`. The fence
//!   orders the store before the operation's loads of shared pointers (the
//!   store-load pairing with \[2\]); the Release makes everything this thread did
//!   before (earlier operations' reads of nodes) visible to an advancer's Acquire
//!   load of `state` in \[2\].
//! - \[2\] try_advance: `fence(SeqCst)`, then `state.load(Acquire)` of every record,
//!   then `G.compare_exchange(g, g + 1, Release)`. If the scan misses a concurrent
//!   pin, that pin's fence \[1\] follows \[2\]'s fence in the SeqCst order, so the
//!   pinned thread's later loads see every unlink that happened before \[2\].
//! - \[3\] unpin: `state.store((e, unpinned), Release)`, pairing with \[2\]'s Acquire.
//! - \[4\] whoever frees loads `G` with Acquire (or Relaxed followed by \[1\]'s fence),
//!   pairing with \[2\]'s Release CAS, so the readers' accesses, which happen before
//!   the advances (\[1\]/\[3\] → \[2\]), happen before the free.

use std::ptr::NonNull;

use crate::sched::stall;
use crate::sync::{AtomicU64, Ordering, fence};
use crate::util::CachePadded;

use super::ReclaimStats;
use super::limbo::{Counters, Orphans, Retired, free_all};
use super::registry::{Record, Registry};

/// `state` of a thread's record: `epoch << 1 | pinned`.
///
/// | pinned | who sets it                      | meaning                                 |
/// |--------|----------------------------------|-----------------------------------------|
/// | 1      | the thread, at pin / quiescence  | may hold references; observed `epoch`   |
/// | 0      | the thread, at unpin / leave     | holds no reference; ignored by advances |
#[derive(Default)]
pub(crate) struct EpochRecord {
    state: AtomicU64,
    counters: Counters,
}

const PINNED: u64 = 1;

/// Whether nodes retired in epoch `tag` may be freed when the global epoch is `g`.
#[inline]
pub(crate) fn expired(tag: u64, g: u64) -> bool {
    g >= tag + 3
}

/// The shared part of an epoch domain.
pub(crate) struct EpochDomain {
    global: CachePadded<AtomicU64>,
    registry: Registry<EpochRecord>,
    orphans: Orphans,
}

impl EpochDomain {
    pub(crate) fn new() -> Self {
        Self {
            global: CachePadded::new(AtomicU64::new(0)),
            registry: Registry::new(),
            orphans: Orphans::new(),
        }
    }

    /// The global epoch, acquired (\[4\]).
    pub(crate) fn global(&self) -> u64 {
        // Acquire: [4], pairs with the Release CAS in `try_advance`.
        self.global.load(Ordering::Acquire)
    }

    /// Advances the global epoch if every pinned thread has observed it (\[2\]).
    pub(crate) fn try_advance(&self) -> bool {
        // Relaxed: a guess that the CAS below re-checks.
        let g = self.global.load(Ordering::Relaxed);
        // SeqCst fence: [2], the store-load pairing with each pin's fence [1].
        fence(Ordering::SeqCst);
        for r in self.registry.iter() {
            // Acquire: [2], pairs with the Release stores of pin [1] and unpin [3].
            let s = r.data.state.load(Ordering::Acquire);
            if s & PINNED != 0 && s >> 1 != g {
                return false;
            }
        }
        // Release: [2]/[4], publishes the scan (and what it acquired) to whoever
        // frees after reading the new epoch.
        self.global
            .compare_exchange(g, g + 1, Ordering::Release, Ordering::Relaxed)
            .is_ok()
    }

    /// Frees the orphaned batches that have expired at epoch `g`; returns how many
    /// nodes. `g` must have been read with Acquire (\[4\]).
    fn collect_orphans(&self, g: u64) -> u64 {
        if self.orphans.is_empty() {
            return 0;
        }
        let mut n = 0;
        for b in self.orphans.take_all() {
            if expired(b.tag, g) {
                let b = *b;
                // SAFETY: retired in epoch `b.tag` and `G >= tag + 3` (module doc).
                n += unsafe { free_all(b.nodes) };
            } else {
                self.orphans.push_batch(b);
            }
        }
        self.orphans.freed(n);
        n
    }

    pub(crate) fn stats(&self) -> ReclaimStats {
        let mut s = ReclaimStats::default();
        for r in self.registry.iter() {
            r.data.counters.add_to(&mut s);
        }
        self.orphans.add_to(&mut s);
        s
    }

    /// Whether threads that left handed over nodes not yet freed (a hint).
    pub(crate) fn has_orphans(&self) -> bool {
        !self.orphans.is_empty()
    }

    pub(crate) fn records(&self) -> usize {
        self.registry.len()
    }

    /// The global epoch, for tests and diagnostics (a relaxed snapshot).
    pub(crate) fn epoch(&self) -> u64 {
        // Relaxed: a snapshot that orders nothing.
        self.global.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for EpochDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EpochDomain")
            // Relaxed: a debugging snapshot.
            .field("global", &self.global.load(Ordering::Relaxed))
            .field("records", &self.registry.len())
            .field("orphans", &self.orphans)
            .finish()
    }
}

/// One of a thread's three limbo lists.
#[derive(Default)]
struct Bag {
    tag: u64,
    nodes: Vec<Retired>,
}

/// A thread's side of an epoch domain: its record and its limbo bags.
pub(crate) struct EpochThread {
    rec: NonNull<Record<EpochRecord>>,
    /// The epoch this thread last pinned at.
    epoch: u64,
    pinned: bool,
    bags: [Bag; 3],
}

// SAFETY: the record is owned by this handle (its `in_use` flag) and lives as long
// as the domain, which the owning `Local` keeps alive; retired nodes are `Send`.
unsafe impl Send for EpochThread {}

impl EpochThread {
    /// Joins `d`, unpinned.
    pub(crate) fn join(d: &EpochDomain) -> Self {
        let rec = d.registry.acquire();
        // SAFETY: records live as long as the registry.
        // Relaxed: the record is ours; `Registry::acquire`'s Acquire CAS made the
        // last owner's final store visible.
        let state = unsafe { rec.as_ref() }.data.state.load(Ordering::Relaxed);
        Self {
            rec,
            epoch: state >> 1,
            pinned: false,
            bags: Default::default(),
        }
    }

    fn record(&self) -> &EpochRecord {
        // SAFETY: the record lives as long as the domain, which outlives `self`
        // (the owning `Local` holds the domain).
        &unsafe { self.rec.as_ref() }.data
    }

    /// Pins at the current global epoch (\[1\]); frees own bags that expired.
    pub(crate) fn pin(&mut self, d: &EpochDomain) {
        // Relaxed: followed by the SeqCst fence, which acquires it ([4]).
        let g = d.global.load(Ordering::Relaxed);
        stall::point(stall::EPOCH_PIN);
        // Release: [1], this thread's earlier accesses happen before an advancer
        // that reads this state.
        self.record()
            .state
            .store(g << 1 | PINNED, Ordering::Release);
        // SeqCst fence: [1], orders the store above before this operation's loads.
        fence(Ordering::SeqCst);
        self.pinned = true;
        if g != self.epoch {
            self.epoch = g;
            self.free_expired(g);
        }
    }

    /// Unpins (\[3\]).
    pub(crate) fn unpin(&mut self) {
        // Release: [3], pairs with the Acquire load in `try_advance`.
        self.record()
            .state
            .store(self.epoch << 1, Ordering::Release);
        self.pinned = false;
    }

    /// Retires a node into the bag of this thread's epoch. Must be pinned.
    pub(crate) fn retire(&mut self, r: Retired) {
        debug_assert!(self.pinned, "retire outside a critical section");
        let e = self.epoch;
        let bag = &mut self.bags[(e % 3) as usize];
        if bag.tag != e {
            // The bag holds nodes from epoch `tag <= e - 3`, and `G >= e`.
            debug_assert!(bag.nodes.is_empty() || expired(bag.tag, e));
            let nodes = std::mem::take(&mut bag.nodes);
            bag.tag = e;
            // SAFETY: expired (module doc); `e` was acquired at pin ([4]).
            let n = unsafe { free_all(nodes) };
            self.record().counters.freed(n);
        }
        self.bags[(e % 3) as usize].nodes.push(r);
        self.record().counters.retired(1);
    }

    /// Frees this thread's bags that expired at epoch `g` (acquired, \[4\]).
    fn free_expired(&mut self, g: u64) -> u64 {
        let mut n = 0;
        for bag in &mut self.bags {
            if !bag.nodes.is_empty() && expired(bag.tag, g) {
                // SAFETY: expired (module doc); `g` was acquired ([4]).
                n += unsafe { free_all(std::mem::take(&mut bag.nodes)) };
            }
        }
        if n > 0 {
            self.record().counters.freed(n);
        }
        n
    }

    /// Nodes in this thread's bags.
    pub(crate) fn pending(&self) -> usize {
        self.bags.iter().map(|b| b.nodes.len()).sum()
    }

    /// Tries to advance the epoch, then frees what expired: own bags and orphans.
    /// Returns the number of nodes freed.
    pub(crate) fn collect(&mut self, d: &EpochDomain) -> u64 {
        d.try_advance();
        let g = d.global();
        self.free_expired(g) + d.collect_orphans(g)
    }

    /// Leaves `d`: unpins, hands the bags to the domain, gives the record back.
    pub(crate) fn leave(&mut self, d: &EpochDomain) {
        self.unpin();
        // Reclaim what we can first, so fewer nodes become orphans.
        self.collect(d);
        for bag in &mut self.bags {
            let nodes = std::mem::take(&mut bag.nodes);
            // SAFETY (of the deref in `record`): see `record`.
            d.orphans
                .push(nodes, bag.tag, &unsafe { self.rec.as_ref() }.data.counters);
        }
        // SAFETY: `rec` came from `d.registry.acquire()`; this handle is leaving,
        // unpinned, and no longer touches the record.
        unsafe { d.registry.release(self.rec) };
    }
}

impl std::fmt::Debug for EpochThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EpochThread")
            .field("epoch", &self.epoch)
            .field("pinned", &self.pinned)
            .field("pending", &self.pending())
            .finish()
    }
}
