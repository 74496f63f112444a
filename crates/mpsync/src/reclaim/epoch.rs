//! The epoch machinery shared by [`Ebr`](super::Ebr) and [`Qsbr`](super::Qsbr).
//!
//! Fraser's scheme (Hart §4.1.1): a global epoch `G`; each thread's record holds
//! the epoch it last observed and whether it is *pinned* (may hold references).
//! EBR pins for each operation (critical section); QSBR is pinned whenever it is
//! registered and re-pins at each quiescent state. `G` advances from `g` to `g+1`
//! only when every pinned thread has observed `g`.
//!
//! A thread retires nodes into the limbo bag of the epoch `e` it is pinned at
//! (three bags, indexed `e mod 3`, as in Fraser's three limbo lists). They are
//! freed once `G >= e + 3` — Fraser's rule; when a thread moves to epoch `e + 3`,
//! the bag it reuses (same index) is safe to free.
//!
//! Orderings, numbered and referred to below and in the code:
//! - \[1\] pin: `g = G.load(Relaxed)`; `state.store((g, pinned), Release)`;
//!   `fence(SeqCst)`; `G.load(Relaxed)` again — the pin is *validated* if that
//!   re-read still returns `g`, else the thread re-pins at the value it read.
//!   The fence orders the published state before the operation's loads of shared
//!   pointers (the store-load pairing with \[2\]) and acquires the `G` read before
//!   it (\[4\]); the Release makes the thread's earlier accesses visible to an
//!   advancer that reads this state (\[2\]).
//! - \[2\] try_advance: `g = G.load(Relaxed)`; `fence(SeqCst)`; every record's
//!   `state.load(Acquire)`; if every pinned one is at `g`,
//!   `G.compare_exchange(g, g + 1, Release)`.
//! - \[3\] unpin: `state.store((e, unpinned), Release)`, read by \[2\]'s Acquire.
//!   (QSBR never unpins: its next pin, also a Release store, ends the section.)
//! - \[4\] whoever frees reads `G` with Acquire, or with Relaxed followed by \[1\]'s
//!   fence. `G` changes only by \[2\]'s Release CAS, so every later value is in
//!   the release sequence of each earlier advance: reading `G >= k` makes the
//!   advance to `k`, and what happened before it, happen before the free.
//!
//! Why the node is unreachable when it is freed (a node `X`, unlinked inside a
//! critical section of thread `T` pinned at `e`, retired into bag `e`):
//! - (a) *While `T` is pinned at `e`, `G <= e + 1`.* An advance to `e + 2` read
//!   `G = e + 1` before its fence \[2\]. `T`'s validating re-read \[1\] returned
//!   `e`, which precedes `e + 1` in `G`'s modification order, so the re-read is
//!   coherence-ordered before the advancer's read; with a SeqCst fence before the
//!   one and after the other, `T`'s fence precedes the advancer's in the single
//!   SeqCst order (C++20 \[atomics.order\] p4). So the advancer's scan reads `T`'s
//!   pinned state or a later one, and while `T` stays pinned at `e` it sees
//!   `e != e + 1` and fails. (Without the re-read this is false: a thread that
//!   read `G = e`, stalled, and published its pin after two advances is pinned at
//!   `e` with `G = e + 2`, and its bag `e` is freed at `e + 3` under a reader that
//!   pinned at `e + 2` — the stale pin the `*stale*` tests in `tests/reclaim.rs`
//!   and the `*window*` models in `tests/loom_reclaim.rs` force.)
//! - (b) *The unlink happens before the advance to `e + 2`.* By (a), that
//!   advance's scan read `T`'s state at or after its pin at `e`, and not that pin
//!   itself (it would have failed): so a later Release store of `T` (\[3\], or
//!   QSBR's next pin), which follows the unlink; the scan's Acquire \[2\] and the
//!   Release CAS carry the unlink into the advance.
//! - (c) *Every critical section that can load `X` happens before the advance to
//!   `e + 3`.* Take any thread `U` and the state of `U` that this advance's scan
//!   read. If it is the end of one of `U`'s sections or later, that section
//!   happens before the advance (\[3\] → \[2\]). If it is `U` pinned, `U` is pinned
//!   at `e + 2`: its pin read `G = e + 2` before its fence, so the advance to
//!   `e + 2`, hence the unlink (b), happens before `U`'s loads, which cannot
//!   return `X`. If it is a state before one of `U`'s pins, the scanner's fence
//!   precedes that pin's fence in the SeqCst order (p4 again), and the scanner's
//!   read of `G = e + 2` acquired the unlink (b): `U`'s loads after that pin see
//!   the unlink too.
//! - (d) *The free happens after all of them*, by \[4\] with `G >= e + 3`.
//!
//! Batches handed to the domain by a thread that leaves keep their bag's epoch;
//! any thread frees them at `G >= tag + 3`, by the same argument.

use std::ptr::NonNull;

use crate::sched::stall;
use crate::sync::{AtomicU64, Ordering, fence};
use crate::util::CachePadded;

use super::ReclaimStats;
use super::limbo::{Counters, Garbage, Orphans, Retired};
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
        stall::point(stall::EPOCH_ADVANCE_SCANNED);
        // Release: [2]/[4], publishes the scan (and what it acquired) to whoever
        // frees after reading the new epoch.
        self.global
            .compare_exchange(g, g + 1, Ordering::Release, Ordering::Relaxed)
            .is_ok()
    }

    /// Takes the orphaned batches that have expired at epoch `g` into `garbage`
    /// (adopted by `to`, whose frees count them). `g` must have been read with
    /// Acquire (\[4\]).
    fn collect_orphans(&self, g: u64, garbage: &mut Garbage, to: &Counters) {
        if self.orphans.is_empty() {
            return;
        }
        for b in self.orphans.take_all() {
            if expired(b.tag, g) {
                let b = *b;
                self.orphans.adopted(b.nodes.len() as u64, to);
                // Freed by the caller: retired in epoch `b.tag` and `G >= tag + 3`
                // (module doc).
                garbage.add(b.nodes, to);
            } else {
                self.orphans.push_batch(b);
            }
        }
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
    /// Expired nodes taken out of the bags (by `pin`, `retire`, `collect`) and
    /// not yet freed: the caller frees them, once its own state is consistent,
    /// through [`take_garbage`](Self::take_garbage) (see [`Garbage`]). Kept
    /// here rather than returned, so that the common case — nothing expired —
    /// costs the caller one flag.
    expired: Garbage,
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
            expired: Garbage::none(),
        }
    }

    fn record(&self) -> &EpochRecord {
        // SAFETY: the record lives as long as the domain, which outlives `self`
        // (the owning `Local` holds the domain).
        &unsafe { self.rec.as_ref() }.data
    }

    /// Pins at the current global epoch (\[1\], validated); takes the own bags
    /// that expired out, and returns whether there are expired nodes for the
    /// caller to free ([`take_garbage`](Self::take_garbage)) once its state is
    /// consistent.
    #[must_use = "expired nodes wait to be freed (`take_garbage`)"]
    pub(crate) fn pin(&mut self, d: &EpochDomain) -> bool {
        // Relaxed: [1]/[4], followed by the SeqCst fence, which acquires it.
        let mut g = d.global.load(Ordering::Relaxed);
        loop {
            stall::point(stall::EPOCH_PIN);
            // Release: [1], this thread's earlier accesses happen before an
            // advancer that reads this state.
            self.record()
                .state
                .store(g << 1 | PINNED, Ordering::Release);
            // SeqCst fence: [1], orders the store above before this operation's
            // loads and the re-read below (the store-load pairing with [2]).
            fence(Ordering::SeqCst);
            // Relaxed: [1], the validating re-read; argument (a) in the module doc
            // needs only its place in `G`'s modification order, after the fence.
            let now = d.global.load(Ordering::Relaxed);
            if now == g {
                break;
            }
            // `G` moved while we were invisible: re-pin at the newer epoch (read
            // before the next fence, which acquires it).
            g = now;
        }
        self.pinned = true;
        if g != self.epoch {
            self.epoch = g;
            return self.take_expired(g);
        }
        false
    }

    /// Whether the thread is pinned (QSBR: online).
    pub(crate) fn is_pinned(&self) -> bool {
        self.pinned
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
    /// Takes the nodes of the bag it reuses out (they expired), and returns
    /// whether there are expired nodes for the caller to free
    /// ([`take_garbage`](Self::take_garbage)).
    #[must_use = "expired nodes wait to be freed (`take_garbage`)"]
    pub(crate) fn retire(&mut self, r: Retired) -> bool {
        debug_assert!(self.pinned, "retire outside a critical section");
        let e = self.epoch;
        let mut took = false;
        // SAFETY (of the deref in `record`, by hand: a field borrow disjoint
        // from `bags`): see `record`.
        let counters = &unsafe { self.rec.as_ref() }.data.counters;
        let bag = &mut self.bags[(e % 3) as usize];
        if bag.tag != e {
            // The bag holds nodes from epoch `tag <= e - 3`, and `G >= e`: they
            // expired (module doc; `e` was acquired at pin, [4]).
            debug_assert!(bag.nodes.is_empty() || expired(bag.tag, e));
            if !bag.nodes.is_empty() {
                self.expired.add(std::mem::take(&mut bag.nodes), counters);
                took = true;
            }
            bag.tag = e;
        }
        bag.nodes.push(r);
        counters.retired(1);
        took
    }

    /// Moves this thread's bags that expired at epoch `g` (acquired, \[4\])
    /// to the expired nodes; returns whether any wait to be freed.
    #[cold]
    #[inline(never)]
    fn take_expired(&mut self, g: u64) -> bool {
        // SAFETY (of the deref in `record`, by hand): see `retire`.
        let counters = &unsafe { self.rec.as_ref() }.data.counters;
        for bag in &mut self.bags {
            if !bag.nodes.is_empty() && expired(bag.tag, g) {
                // Expired (module doc); `g` was acquired ([4]).
                self.expired.add(std::mem::take(&mut bag.nodes), counters);
            }
        }
        self.expired.len() > 0
    }

    /// The expired nodes `pin`, `retire` and `collect` took out, for the
    /// caller to free now that its state is consistent (see [`Garbage`]).
    pub(crate) fn take_garbage(&mut self) -> Garbage {
        std::mem::replace(&mut self.expired, Garbage::none())
    }

    /// Nodes in this thread's bags.
    pub(crate) fn pending(&self) -> usize {
        self.bags.iter().map(|b| b.nodes.len()).sum()
    }

    /// Tries to advance the epoch, then takes what expired — own bags and
    /// orphans — out; returns whether there are expired nodes for the caller
    /// to free ([`take_garbage`](Self::take_garbage)).
    #[must_use = "expired nodes wait to be freed (`take_garbage`)"]
    pub(crate) fn collect(&mut self, d: &EpochDomain) -> bool {
        d.try_advance();
        let g = d.global();
        self.take_expired(g);
        // SAFETY (of the deref in `record`, by hand): see `retire`.
        let counters = &unsafe { self.rec.as_ref() }.data.counters;
        d.collect_orphans(g, &mut self.expired, counters);
        self.expired.len() > 0
    }

    /// Leaves `d`: unpins, frees what has expired, hands the other bags to the
    /// domain, gives the record back. A value whose `Drop` panics as it is
    /// freed stops none of this: the panic goes on once the record is back.
    pub(crate) fn leave(&mut self, d: &EpochDomain) {
        self.unpin();
        // Reclaim what we can first, so fewer nodes become orphans.
        let _ = self.collect(d);
        let garbage = self.take_garbage();
        for bag in &mut self.bags {
            let nodes = std::mem::take(&mut bag.nodes);
            // SAFETY (of the deref in `record`): see `record`.
            d.orphans
                .push(nodes, bag.tag, &unsafe { self.rec.as_ref() }.data.counters);
        }
        // SAFETY: expired (`collect`); the record (its counters) is still ours.
        let caught = unsafe { garbage.free() };
        // SAFETY: `rec` came from `d.registry.acquire()`; this handle is leaving,
        // unpinned, and no longer touches the record.
        unsafe { d.registry.release(self.rec) };
        caught.resume();
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
