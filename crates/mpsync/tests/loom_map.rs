//! Loom models of the Harris–Michael list under the hash tables, over hazard
//! pointers and EBR with reclamation as eager as each scheme allows (HP: scan at
//! every retire; EBR: try to advance at every critical section), one bucket so
//! every operation meets every node:
//!
//! - a remove racing a search that walks past the removed node (mark, then
//!   unlink; under HP the search's hand-over-hand window);
//! - a remove racing an insert linked right after the removed node (the insert
//!   must not be lost: why a node is marked before it is unlinked);
//! - two removers of one key, one of which then inserts it again (threads act
//!   twice: a reused key and a helped unlink);
//! - the fast read (EBR) walking past two removed nodes;
//! - the CR table's resize (a copying resize under every bucket lock, the old
//!   table retired with its chains) racing a reader that walks the old table,
//!   and racing an insert that must land in the new one;
//! - the CR table's reader racing two removals: it may step over a node
//!   marked and still linked, never onto a successor freed after the unlink;
//! - the CR table's replace (`compute` setting a present key: the old node
//!   marked, the new one stored in its place) racing readers of the replaced
//!   key (old or new value, never absent) and of its successor, removed and
//!   freed right after (never reached through the unlinked old node).
//!
//! Nodes come from a test allocator whose "free" marks the node dead
//! (`ds::lf::Liveness`, checked at every node access) and keeps the memory: a
//! node read after its free fails the model.
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p mpsync --release --target-dir target/loom --test loom_map -- --test-threads=1`
#![cfg(loom)]

use std::collections::hash_map::RandomState;
use std::ptr::NonNull;

use loom::thread;
use mpsync::ds::alloc::NodeAlloc;
use mpsync::ds::cr_hash::{Change, CrHashMap};
use mpsync::ds::hash::{FastReadHashMap, LfHashMap};
use mpsync::ds::lf::Liveness;
use mpsync::reclaim::{Ebr, HazardPointers, Reclaimer};
use mpsync::sync::{Arc, Ordering};

/// Nodes are boxed and never given back; `free` marks them dead.
#[derive(Debug)]
struct Poisoning;

impl NodeAlloc for Poisoning {
    const NAME: &'static str = "poisoning";

    fn alloc<T>(value: T) -> NonNull<T> {
        NonNull::from(Box::leak(Box::new(value)))
    }

    unsafe fn free<T>(p: *mut u8) {
        // SAFETY: only mpsync nodes are allocated here, and each starts with its
        // `Liveness`; the memory is never deallocated.
        unsafe { Liveness::kill(p) };
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    model_bound(2, f)
}

/// A model explored up to `default` preemptions (`LOOM_MAX_PREEMPTIONS` overrides).
fn model_bound(default: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(
        std::env::var("LOOM_MAX_PREEMPTIONS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default),
    );
    b.check(f);
}

trait Eager: Reclaimer + Sized {
    fn eager() -> Arc<Self>;
}
impl Eager for Ebr {
    fn eager() -> Arc<Self> {
        Arc::new(Ebr::with_advance_every(1).unwrap())
    }
}
impl Eager for HazardPointers {
    fn eager() -> Arc<Self> {
        // 4 slots: the CR table protects its bucket array in the third, and
        // its readers step over a removed node with the fourth.
        Arc::new(HazardPointers::with_threshold(4, 1).unwrap())
    }
}

type Map<R> = LfHashMap<u32, u32, R, Poisoning, RandomState>;

fn make<R: Eager>(keys: &[u32]) -> Arc<Map<R>> {
    let m: Map<R> = LfHashMap::with_domain(1, R::eager(), RandomState::new()).unwrap();
    let l = R::register(m.domain());
    for &k in keys {
        assert!(m.insert(&l, k, k * 10));
    }
    Arc::new(m)
}

/// {1, 2, 3}: one thread removes 2 while another searches for 3 (walking past 2)
/// and then for 2. Three preemptions: a search that loses its predecessor's
/// hazard (no hand-over-hand) is only caught with the remover run in the window
/// between the new hazard's publish and the link's re-read.
fn remove_vs_search<R: Eager>() {
    model_bound(3, || {
        let m = make::<R>(&[1, 2, 3]);
        let m1 = m.clone();
        let r = thread::spawn(move || {
            let l = R::register(m1.domain());
            m1.remove(&l, &2)
        });
        let l = R::register(m.domain());
        assert_eq!(m.get(&l, &3), Some(30));
        let saw2 = m.get(&l, &2);
        assert!(saw2 == Some(20) || saw2.is_none());
        assert_eq!(r.join().unwrap(), Some(20));
        assert_eq!(m.get(&l, &2), None);
        assert_eq!(m.len(&l), 2);
    });
}

/// {1, 2}: one thread removes 2 while another inserts 3 (right after 2).
fn remove_vs_adjacent_insert<R: Eager>() {
    model(|| {
        let m = make::<R>(&[1, 2]);
        let m1 = m.clone();
        let r = thread::spawn(move || {
            let l = R::register(m1.domain());
            m1.remove(&l, &2)
        });
        let l = R::register(m.domain());
        assert!(m.insert(&l, 3, 30));
        assert_eq!(r.join().unwrap(), Some(20));
        assert_eq!(m.get(&l, &3), Some(30), "the insert after 2 was lost");
        assert_eq!(m.get(&l, &2), None);
        assert_eq!(m.get(&l, &1), Some(10));
    });
}

/// {2}: two removers of 2; the first then inserts 2 again.
fn two_removers_then_reinsert<R: Eager>() {
    model(|| {
        let m = make::<R>(&[2]);
        let m1 = m.clone();
        let a = thread::spawn(move || {
            let l = R::register(m1.domain());
            let r = m1.remove(&l, &2);
            let i = m1.insert(&l, 2, 21);
            (r, i)
        });
        let l = R::register(m.domain());
        let b = m.remove(&l, &2);
        let (ra, ia) = a.join().unwrap();
        // Exactly one remover took the original 20; the other took nothing or
        // the reinserted 21 (if it ran after the reinsert).
        let took: Vec<u32> = [ra, b].into_iter().flatten().collect();
        assert_eq!(took.iter().filter(|&&v| v == 20).count(), 1, "{took:?}");
        assert!(ia, "2 was absent when A reinserted it");
        let left = m.get(&l, &2);
        assert_eq!(left.is_some(), !took.contains(&21), "{took:?} {left:?}");
    });
}

#[test]
fn loom_map_remove_vs_search_hp() {
    remove_vs_search::<HazardPointers>();
}

#[test]
fn loom_map_remove_vs_search_ebr() {
    remove_vs_search::<Ebr>();
}

#[test]
fn loom_map_remove_vs_adjacent_insert_hp() {
    remove_vs_adjacent_insert::<HazardPointers>();
}

#[test]
fn loom_map_remove_vs_adjacent_insert_ebr() {
    remove_vs_adjacent_insert::<Ebr>();
}

#[test]
fn loom_map_two_removers_then_reinsert_hp() {
    two_removers_then_reinsert::<HazardPointers>();
}

/// {1, 2, 3, 4} over EBR: one thread removes 2 and 3 while a fast read looks
/// for 4 (walking past both) and then for 3.
#[test]
fn loom_map_fast_read_past_removed_nodes_ebr() {
    model(|| {
        let m: FastReadHashMap<u32, u32, Ebr, Poisoning, RandomState> =
            FastReadHashMap::with_domain(1, Ebr::eager(), RandomState::new()).unwrap();
        let m = Arc::new(m);
        {
            let l = Ebr::register(m.domain());
            for k in 1..=4 {
                assert!(m.insert(&l, k, k * 10));
            }
        }
        let m1 = m.clone();
        let r = thread::spawn(move || {
            let l = Ebr::register(m1.domain());
            (m1.remove(&l, &2), m1.remove(&l, &3))
        });
        let l = Ebr::register(m.domain());
        assert_eq!(m.get(&l, &4), Some(40));
        let saw3 = m.get(&l, &3);
        assert_eq!(r.join().unwrap(), (Some(20), Some(30)));
        assert!(saw3.is_none() || saw3 == Some(30));
        assert_eq!(m.get(&l, &3), None);
    });
}

/// The CR table's bucket lock under loom: a test-and-set lock on a loom atomic.
/// `lock_api` makes locks from a `const INIT`, which a loom atomic cannot be
/// (mpsync's own locks refuse `INIT` under loom), so the atomic is made on first
/// use (a loom atomic's creation is no scheduling point: two threads cannot
/// both make it).
struct LoomLock(std::sync::OnceLock<loom::sync::atomic::AtomicBool>);

impl LoomLock {
    fn flag(&self) -> &loom::sync::atomic::AtomicBool {
        self.0
            .get_or_init(|| loom::sync::atomic::AtomicBool::new(false))
    }
}

// SAFETY: `false → true` only by a CAS, so one holder at a time; Acquire on
// taking pairs with the Release store in `unlock`.
unsafe impl mpsync::lock_api::RawMutex for LoomLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = LoomLock(std::sync::OnceLock::new());
    type Guard = mpsync::lock_api::GuardSend;

    fn lock(&self) -> Self::Guard {
        loop {
            if let Some(g) = self.try_lock() {
                return g;
            }
            thread::yield_now();
        }
    }

    fn try_lock(&self) -> Option<Self::Guard> {
        self.flag()
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then(mpsync::lock_api::GuardSend::new)
    }

    unsafe fn unlock(&self, _guard: Self::Guard) {
        self.flag().store(false, Ordering::Release);
    }

    fn is_locked(&self) -> bool {
        self.flag().load(Ordering::Relaxed)
    }
}

/// A fixed hasher: a resize spreads keys by hash, and a model must be
/// deterministic across its executions (`RandomState` differs in each).
type Fixed = std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;

type Cr<R> = CrHashMap<u32, u32, LoomLock, R, Poisoning, Fixed>;

fn make_cr<R: Eager>(keys: &[u32]) -> Arc<Cr<R>> {
    let m: Cr<R> = CrHashMap::with_domain(1, R::eager(), Fixed::default()).unwrap();
    let l = R::register(m.domain());
    for &k in keys {
        assert!(m.insert(&l, k, k * 10));
    }
    Arc::new(m)
}

/// CR {1, 2} in one bucket: one thread resizes to 2 buckets (the old table is
/// retired, and freed as eagerly as the scheme allows) and then removes 1,
/// while another reads 2 and 1 (its reads may walk the old table after the
/// resize: a table freed under it fails the model).
fn cr_resize_vs_reader<R: Eager>() {
    model(|| {
        let m = make_cr::<R>(&[1, 2]);
        let m1 = m.clone();
        let r = thread::spawn(move || {
            let l = R::register(m1.domain());
            m1.resize(&l, 2).unwrap();
            m1.remove(&l, &1)
        });
        let l = R::register(m.domain());
        assert_eq!(m.get(&l, &2), Some(20), "a resize hid a present key");
        let saw1 = m.get(&l, &1);
        assert!(saw1 == Some(10) || saw1.is_none());
        assert_eq!(r.join().unwrap(), Some(10));
        assert_eq!(m.buckets(), 2);
        assert_eq!(m.get(&l, &1), None);
        assert_eq!(m.get(&l, &2), Some(20));
    });
}

/// CR {1}: one thread resizes to 2 buckets while another inserts 2 and then
/// removes 1: neither update may be lost in the table the resize dropped.
fn cr_resize_vs_updates<R: Eager>() {
    model(|| {
        let m = make_cr::<R>(&[1]);
        let m1 = m.clone();
        let r = thread::spawn(move || {
            let l = R::register(m1.domain());
            m1.resize(&l, 2).unwrap();
        });
        let l = R::register(m.domain());
        assert!(m.insert(&l, 2, 20));
        assert_eq!(m.remove(&l, &1), Some(10));
        r.join().unwrap();
        assert_eq!(m.get(&l, &2), Some(20), "the insert was lost by the resize");
        assert_eq!(m.get(&l, &1), None, "the remove was undone by the resize");
        assert_eq!(m.len(), 1);
    });
}

/// CR chain 1, 2, 3 (one bucket): a writer removes 2 and then 3 while a
/// reader looks for 3. The reader may find 2 marked (its writer between the
/// mark and the unlink) and step over it to 3 — allowed only while 2 is still
/// linked, when 3 cannot be removed yet; a reader that stepped onto 3 after
/// 2's unlink, with 3 removed and freed as eagerly as the scheme allows,
/// fails the model.
fn cr_reader_steps_over_a_removed_node<R: Eager>() {
    model(|| {
        let m = make_cr::<R>(&[3, 2, 1]);
        let m1 = m.clone();
        let w = thread::spawn(move || {
            let l = R::register(m1.domain());
            assert_eq!(m1.remove(&l, &2), Some(20));
            assert_eq!(m1.remove(&l, &3), Some(30));
        });
        let l = R::register(m.domain());
        let got = m.get(&l, &3);
        assert!(got == Some(30) || got.is_none(), "{got:?}");
        w.join().unwrap();
        assert_eq!(m.get(&l, &3), None);
        assert_eq!(m.get(&l, &1), Some(10));
    });
}

/// CR chain 1, 2, 3 (one bucket): a writer replaces 2's value (20 → 21,
/// `compute`) and then removes 3, while a reader looks up the keys `reads`.
/// The reader sees 20 or 21 for 2, never nothing (the replace is one store);
/// looking for 3 it may stand on the old node 2 when it is unlinked, and must
/// not step from it to 3 once 3 is removed and freed (why the old node is
/// marked first). Under hazard pointers (where the freeing is immediate) the
/// reader looks for 3 only, to keep the model small.
fn cr_replace_vs_readers<R: Eager>(reads: &'static [u32]) {
    model(move || {
        let m = make_cr::<R>(&[3, 2, 1]);
        let m1 = m.clone();
        let w = thread::spawn(move || {
            let l = R::register(m1.domain());
            let old = m1.compute(&l, &2, |v| (Change::Set(21), v.copied()));
            assert_eq!(old, Some(20));
            assert_eq!(m1.remove(&l, &3), Some(30));
        });
        let l = R::register(m.domain());
        for &k in reads {
            let got = m.get(&l, &k);
            match k {
                2 => assert!(got == Some(20) || got == Some(21), "2 was absent: {got:?}"),
                _ => assert!(got == Some(30) || got.is_none(), "{got:?}"),
            }
        }
        w.join().unwrap();
        assert_eq!((m.get(&l, &2), m.get(&l, &3)), (Some(21), None));
    });
}

#[test]
fn loom_map_cr_replace_vs_readers_hp() {
    cr_replace_vs_readers::<HazardPointers>(&[3]);
}

#[test]
fn loom_map_cr_replace_vs_readers_ebr() {
    cr_replace_vs_readers::<Ebr>(&[2, 3]);
}

#[test]
fn loom_map_cr_reader_steps_over_a_removed_node_hp() {
    cr_reader_steps_over_a_removed_node::<HazardPointers>();
}

#[test]
fn loom_map_cr_reader_steps_over_a_removed_node_ebr() {
    cr_reader_steps_over_a_removed_node::<Ebr>();
}

#[test]
fn loom_map_cr_resize_vs_reader_hp() {
    cr_resize_vs_reader::<HazardPointers>();
}

#[test]
fn loom_map_cr_resize_vs_reader_ebr() {
    cr_resize_vs_reader::<Ebr>();
}

#[test]
fn loom_map_cr_resize_vs_updates_hp() {
    cr_resize_vs_updates::<HazardPointers>();
}
