//! The maps' progress matrix: for every operation a map documents as lock-free
//! (and, for the concurrently-readable table, every operation that must never
//! wait for a reader), one thread is stopped at each named stall point of that
//! map — between a node's mark and its unlink, on a node mid-traversal, in the
//! middle of a resize — and every other thread's operations must complete
//! within a generous bound ([`map_support::bound`]); a timeout fails the test
//! with a message naming the operation, the map and the point.
//!
//! | map               | stall points (victim's operation)                         | others must complete                    |
//! |-------------------|-----------------------------------------------------------|-----------------------------------------|
//! | `LfHashMap`       | `hm_list.remove.marked` (remove), `hm_list.find.stepped` (get) | every operation                    |
//! | `FastReadHashMap` | the same                                                  | every operation                         |
//! | `CrHashMap`       | `cr_hash.remove.marked` (remove, bucket lock held)        | reads; writes to other buckets          |
//! |                   | `cr_hash.read.stepped` (get)                              | every operation                         |
//! |                   | `cr_hash.resize.frozen` (resize, every lock held)          | reads                                   |
//!
//! Every map over every scheme it supports. `LockedHashMap` has no lock-free
//! operation (every operation locks its bucket).
#![cfg(not(loom))]

mod map_support;

use std::collections::HashSet;
use std::sync::mpsc::channel;

use map_support::{Split, bound, within};
use mpsync::ds::alloc::SystemAlloc;
use mpsync::ds::cr_hash::CrHashMap;
use mpsync::ds::hash::{FastReadHashMap, LfHashMap};
use mpsync::lock::TasB;
use mpsync::reclaim::{Ebr, HazardPointers, Leak, ProtectsReachable, Qsbr, Reclaimer};
use mpsync::sched::stall::{self, Point, Trap};
use mpsync::sync::Arc;

/// One operation of the matrix. Keys below 100 share the first bucket (a
/// chain 1, 2, 3 at the start), keys from 100 the last ([`Split`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Get(u64),
    GetWith(u64),
    Contains(u64),
    Insert(u64),
    Remove(u64),
    Len,
    IsEmpty,
    Iter,
    ForEach,
    Resize(usize),
}
use Op::*;

/// A map under test, its operations run with a registration of the calling
/// thread's own. The answer: a value (`Get`…), 0/1 (`Insert`, `Contains`…), a
/// count (`Len`) or the keys yielded (`Iter`, `ForEach`).
trait Subject: Send + Sync + 'static {
    fn name(&self) -> String;
    fn run(&self, op: Op) -> Vec<u64>;
}

fn opt(v: Option<u64>) -> Vec<u64> {
    v.into_iter().collect()
}

macro_rules! lf_ops {
    ($m:expr, $l:expr, $op:expr, $get:ident, $get_with:ident, $contains:ident, $lf:expr) => {
        match $op {
            Get(k) => opt($m.$get($l, &k)),
            GetWith(k) => opt($m.$get_with($l, &k, |v| *v)),
            Contains(k) => vec![u64::from($m.$contains($l, &k))],
            Insert(k) => vec![u64::from($m.insert($l, k, k * 10))],
            Remove(k) => opt($m.remove($l, &k)),
            Len => vec![$lf.len($l) as u64],
            IsEmpty => vec![u64::from($lf.is_empty($l))],
            Iter => $m.iter($l).map(|(k, _)| k).collect(),
            ForEach => {
                let mut keys = Vec::new();
                $lf.for_each($l, |k, _| keys.push(*k));
                keys
            }
            Resize(_) => unreachable!("fixed tables do not resize"),
        }
    };
}

type Lf<R> = LfHashMap<u64, u64, R, SystemAlloc, Split>;
type Fast<R> = FastReadHashMap<u64, u64, R, SystemAlloc, Split>;
type Cr<R> = CrHashMap<u64, u64, TasB, R, SystemAlloc, Split>;

impl<R: Reclaimer> Subject for Lf<R> {
    fn name(&self) -> String {
        format!("LfHashMap<{}>", R::NAME)
    }
    fn run(&self, op: Op) -> Vec<u64> {
        let l = R::register(self.domain());
        lf_ops!(self, &l, op, get, get_with, contains_key, self)
    }
}

impl<R: ProtectsReachable> Subject for Fast<R> {
    fn name(&self) -> String {
        format!("FastReadHashMap<{}>", R::NAME)
    }
    fn run(&self, op: Op) -> Vec<u64> {
        let l = R::register(self.domain());
        lf_ops!(self, &l, op, get, get_with, contains_key, self.as_lf())
    }
}

impl<R: Reclaimer> Subject for Cr<R> {
    fn name(&self) -> String {
        format!("CrHashMap<{}>", R::NAME)
    }
    fn run(&self, op: Op) -> Vec<u64> {
        let l = R::register(self.domain());
        match op {
            Get(k) => opt(self.get(&l, &k)),
            GetWith(k) => opt(self.get_with(&l, &k, |v| *v)),
            Contains(k) => vec![u64::from(self.contains_key(&l, &k))],
            Insert(k) => vec![u64::from(self.insert(&l, k, k * 10))],
            Remove(k) => opt(self.remove(&l, &k)),
            Len => vec![self.len() as u64],
            IsEmpty => vec![u64::from(self.is_empty())],
            Iter => self.iter(&l).map(|(k, _)| k).collect(),
            ForEach => unreachable!("the CR table has no for_each"),
            Resize(n) => {
                self.resize(&l, n).unwrap();
                vec![]
            }
        }
    }
}

/// One cell of the matrix: a fresh map holding 1, 2, 3 (one chain) and 100; a
/// victim thread runs `victim` and is stopped at `point` (after `skip`
/// passages); meanwhile `op` must complete within the bound on a thread of its
/// own, against the state the victim left. Then the victim goes on, and the
/// map must still be consistent.
fn cell<S: Subject>(s: S, point: Point, skip: u64, victim: Op, op: Op) {
    let s = Arc::new(s);
    let name = s.name();
    for k in [3, 2, 1, 100] {
        assert_eq!(s.run(Insert(k)), [1], "{name}: setup");
    }
    let (id_tx, id_rx) = channel();
    let (go_tx, go_rx) = channel::<()>();
    let v = {
        let s = s.clone();
        std::thread::spawn(move || {
            id_tx.send(mpsync::sched::current().id()).unwrap();
            go_rx.recv().unwrap();
            s.run(victim)
        })
    };
    let trap = Trap::at(point)
        .thread(id_rx.recv().unwrap())
        .skip(skip)
        .arm();
    go_tx.send(()).unwrap();
    trap.wait_hit(bound())
        .unwrap_or_else(|e| panic!("{name}: the victim ({victim:?}) never stopped: {e}"));
    let s2 = s.clone();
    match within(bound(), move || s2.run(op)) {
        Ok(out) => {
            if matches!(op, Iter | ForEach) {
                let set: HashSet<u64> = out.iter().copied().collect();
                assert_eq!(
                    set.len(),
                    out.len(),
                    "{name}: {op:?} yielded a key twice ({out:?}) while a thread was stopped at {point}"
                );
                for k in [1, 3, 100] {
                    assert!(
                        set.contains(&k),
                        "{name}: {op:?} missed key {k}, present throughout ({out:?}), while a thread was stopped at {point}"
                    );
                }
            }
        }
        Err(overdue) => {
            // Let the victim go, so the stuck operation can finish and the
            // process is left clean, then fail.
            trap.release();
            let _ = overdue.0.join();
            let _ = v.join();
            panic!(
                "{name}: {op:?} did not complete within {:?} while another thread ({victim:?}) was stopped at {point}",
                bound()
            );
        }
    }
    trap.release();
    v.join().expect("the victim finishes once released");
    // Consistent afterwards: iteration agrees with the point reads; key 1
    // (never touched) is there.
    let keys = s.run(Iter);
    let set: HashSet<u64> = keys.iter().copied().collect();
    assert_eq!(
        set.len(),
        keys.len(),
        "{name}: a key twice after the run: {keys:?}"
    );
    for k in (0..8).chain(100..104) {
        assert_eq!(
            s.run(Get(k)).is_empty(),
            !set.contains(&k),
            "{name}: key {k}: get and iter disagree ({keys:?})"
        );
    }
    assert!(set.contains(&1), "{name}: key 1 lost");
}

/// Every operation of `ops`, each in a cell of its own.
fn cells<S: Subject>(make: &impl Fn() -> S, point: Point, skip: u64, victim: Op, ops: &[Op]) {
    for &op in ops {
        cell(make(), point, skip, victim, op);
    }
}

/// The point reads (of the chain 1, 2, 3, and of an absent key) and an
/// iteration: every table's lock-free reads.
const READS: &[Op] = &[
    Get(1),
    Get(2),
    Get(3),
    Get(4),
    GetWith(3),
    Contains(3),
    Contains(4),
    Iter,
];

/// Everything else a Harris–Michael table documents lock-free: the walks and
/// updates of the stopped thread's chain.
const LF_MORE: &[Op] = &[
    Len,
    IsEmpty,
    ForEach,
    Insert(4),
    Remove(4),
    Remove(3),
    Insert(3),
    Remove(2),
    Insert(2),
];

/// Writes to the CR table's other bucket (its lock is free).
const CR_OTHER_BUCKET: &[Op] = &[Insert(101), Remove(101), Remove(100), Insert(100)];

/// Every CR write, count and resize: nothing waits for a reader.
const CR_WRITES: &[Op] = &[
    Insert(4),
    Remove(4),
    Remove(2),
    Insert(2),
    Len,
    IsEmpty,
    Resize(4),
    Insert(5),
    Resize(1),
    Remove(5),
    Insert(101),
    Remove(101),
];

fn hp() -> Arc<HazardPointers> {
    // Scans at every retire: a node freed too early is freed at once.
    Arc::new(HazardPointers::with_threshold(4, 1).unwrap())
}

fn lf<R: Reclaimer>(d: Arc<R>) -> Lf<R> {
    LfHashMap::with_domain(1, d, Split).unwrap()
}

fn fast<R: ProtectsReachable>(d: Arc<R>) -> Fast<R> {
    FastReadHashMap::with_domain(1, d, Split).unwrap()
}

fn cr<R: Reclaimer>(d: Arc<R>) -> Cr<R> {
    CrHashMap::with_domain(2, d, Split).unwrap()
}

/// `search`: an operation whose search passes nodes 1 and 2 (the fast read
/// has no stall point: a reader that writes nothing cannot hold anyone up).
fn lf_cells<S: Subject>(make: impl Fn() -> S, search: Op) {
    // A remover stopped between its mark and its unlink of node 2.
    let all = [READS, LF_MORE].concat();
    cells(&make, stall::HM_MARKED, 0, Remove(2), &all);
    // A search stopped on node 2 (node 1 passed).
    cells(&make, stall::HM_FIND_STEPPED, 1, search, &all);
}

#[test]
fn lf_every_operation_completes_beside_a_stopped_thread() {
    lf_cells(|| lf(Arc::new(Ebr::with_advance_every(1).unwrap())), Get(3));
    lf_cells(|| lf(Arc::new(Qsbr::new())), Get(3));
    lf_cells(|| lf(hp()), Get(3));
    lf_cells(|| lf(Arc::new(Leak::new())), Get(3));
}

#[test]
fn fast_every_operation_completes_beside_a_stopped_thread() {
    lf_cells(
        || fast(Arc::new(Ebr::with_advance_every(1).unwrap())),
        Insert(4),
    );
    lf_cells(|| fast(Arc::new(Qsbr::new())), Insert(4));
    lf_cells(|| fast(Arc::new(Leak::new())), Insert(4));
}

fn cr_cells<R: Reclaimer>(d: impl Fn() -> Arc<R>) {
    // A writer stopped between its mark and its unlink of node 2, holding
    // the first bucket's lock: readers step over the node; writers of the
    // other bucket go on.
    let make = || cr(d());
    cells(&make, stall::CR_MARKED, 0, Remove(2), READS);
    cells(&make, stall::CR_MARKED, 0, Remove(2), CR_OTHER_BUCKET);
    // A reader stopped on node 2: nobody waits for it.
    cells(&make, stall::CR_READ_STEPPED, 1, Get(3), READS);
    cells(&make, stall::CR_READ_STEPPED, 1, Get(3), CR_WRITES);
    // A resizer stopped with every bucket lock held, before it publishes:
    // readers go on in the old table.
    cells(&make, stall::CR_RESIZE_FROZEN, 0, Resize(8), READS);
}

#[test]
fn cr_reads_complete_beside_a_stopped_thread() {
    cr_cells(|| Arc::new(Ebr::with_advance_every(1).unwrap()));
    cr_cells(|| Arc::new(Qsbr::new()));
    cr_cells(hp);
    cr_cells(|| Arc::new(Leak::new()));
}
