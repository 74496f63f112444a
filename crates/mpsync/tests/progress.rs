//! The progress matrix of the non-blocking structures: every operation
//! documented lock-free must complete while another thread is stopped for good
//! at any point of its own operations.
//!
//! For each structure (Michael & Scott's and Prakash, Lee & Johnson's queues,
//! Nikolaev's LSCQ, Treiber's stack, Herlihy's stack and skew heap) and each named stall point
//! its operations pass — its own (between a successful CAS and the helping
//! step, between building and installing a version, …) and those of the
//! reclamation scheme under it (an epoch pin being published, an epoch advance
//! about to be made, a hazard being published or validated) — one thread is
//! stopped at the point (a `Trap`), and three others must then complete all
//! their operations, every kind of the structure's, within a generous bound
//! (a loaded 2-core CI machine must not make it flaky). A timeout fails with
//! the structure, the scheme and the point. Afterwards the stopped thread is
//! released and every value is accounted for exactly once.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use common::sized;
use mpsync::ds::handle::{Auto, Registered};
use mpsync::ds::heap::HerlihySkewHeap;
use mpsync::ds::lscq::LscqQueue;
use mpsync::ds::ms_queue::MsQueue;
use mpsync::ds::plj_queue::PljQueue;
use mpsync::ds::stack::HerlihyStack;
use mpsync::ds::treiber::TreiberStack;
use mpsync::reclaim::{Ebr, HazardPointers, Qsbr, Reclaimer};
use mpsync::sched::stall::{self, Point, Trap};

/// How long the other threads may take, all together, while one is stopped.
const BOUND: Duration = Duration::from_secs(60);
/// How long the stopped thread may take to reach its point.
const TO_REACH: Duration = Duration::from_secs(20);
const OTHERS: u64 = 3;

/// A structure of the matrix: its two operations on `u64`s.
trait Subject: Registered + Send + Sync + 'static {
    const NAME: &'static str;
    /// Its own stall points.
    const POINTS: &'static [Point];
    fn make(d: mpsync::sync::Arc<Self::R>) -> Self;
    fn put(&self, l: &<Self::R as Reclaimer>::Local, v: u64);
    fn take(&self, l: &<Self::R as Reclaimer>::Local) -> Option<u64>;
}

macro_rules! subject {
    ($ty:ident, $name:literal, [$($p:ident),*], $put:ident, $take:ident) => {
        impl<R: Reclaimer> Subject for $ty<u64, R> {
            const NAME: &'static str = $name;
            const POINTS: &'static [Point] = &[$(stall::$p),*];
            fn make(d: mpsync::sync::Arc<R>) -> Self {
                $ty::with_domain(d)
            }
            fn put(&self, l: &R::Local, v: u64) {
                self.$put(l, v)
            }
            fn take(&self, l: &R::Local) -> Option<u64> {
                self.$take(l)
            }
        }
    };
}

subject!(
    MsQueue,
    "MsQueue",
    [MS_ENQUEUE_LINKED, MS_DEQUEUE_SWUNG],
    enqueue,
    dequeue
);
subject!(
    PljQueue,
    "PljQueue",
    [PLJ_ENQUEUE_LINKED, PLJ_DEQUEUE_SWUNG],
    enqueue,
    dequeue
);
subject!(
    TreiberStack,
    "TreiberStack",
    [TREIBER_PUSH_READ, TREIBER_POP_READ],
    push,
    pop
);
subject!(
    HerlihyStack,
    "HerlihyStack",
    [HERLIHY_BUILT, HERLIHY_SWUNG],
    push,
    pop
);
subject!(
    HerlihySkewHeap,
    "HerlihySkewHeap",
    [HERLIHY_BUILT, HERLIHY_SWUNG],
    insert,
    delete_min
);

/// LSCQ with the smallest segments (2 cells), so that the 64 values queued
/// first span many of them and every operation meets finalization, linking
/// and the head's move.
impl<R: Reclaimer> Subject for LscqQueue<u64, R> {
    const NAME: &'static str = "LscqQueue";
    const POINTS: &'static [Point] = &[
        stall::SCQ_CELL_WRITTEN,
        stall::LSCQ_LINKED,
        stall::LSCQ_HEAD_PASSED,
    ];
    fn make(d: mpsync::sync::Arc<R>) -> Self {
        LscqQueue::with_domain_and_segment_capacity(d, 2).expect("above 0")
    }
    fn put(&self, l: &R::Local, v: u64) {
        self.enqueue(l, v)
    }
    fn take(&self, l: &R::Local) -> Option<u64> {
        self.dequeue(l)
    }
}

/// One thread's record: what it put and what it took.
#[derive(Default)]
struct Record {
    put: Vec<u64>,
    took: Vec<u64>,
}

/// A put and a take, through `Auto` (the thread's cached registration).
fn round<S: Subject>(s: &Auto<S>, v: u64, rec: &mut Record) {
    s.with(|s, l| s.put(l, v));
    rec.put.push(v);
    if let Some(x) = s.with(|s, l| s.take(l)) {
        rec.took.push(x);
    }
}

/// One cell of the matrix: a thread stopped at `p` while three others
/// complete their operations on `S` under the scheme `d`.
fn stopped_at<S: Subject>(p: Point, d: S::R) {
    let what = format!(
        "{} under {}, one thread stopped at {}",
        S::NAME,
        S::R::NAME,
        p.name()
    );
    let s = Arc::new(Auto::wrap(S::make(mpsync::sync::Arc::new(d))));
    // Values to take, so that every take passes its points.
    let mut main = Record::default();
    for v in 0..64 {
        s.with(|s, l| s.put(l, v));
        main.put.push(v);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (id_tx, id_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let victim = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            id_tx.send(mpsync::sched::current().id()).unwrap();
            let mut rec = Record::default();
            if go_rx.recv().is_err() {
                return rec;
            }
            let mut v = 1 << 40;
            while !stop.load(Ordering::Relaxed) {
                round(&s, v, &mut rec);
                v += 1;
            }
            rec
        })
    };
    let trap = Trap::at(p).thread(id_rx.recv().unwrap()).arm();
    go_tx.send(()).unwrap();
    if let Err(e) = trap.wait_hit(TO_REACH) {
        stop.store(true, Ordering::Relaxed);
        panic!("{what}: the thread never got there: {e}");
    }
    let ops = sized(2_000, 10);
    let (done_tx, done_rx) = mpsc::channel();
    for t in 1..=OTHERS {
        let (s, done_tx) = (s.clone(), done_tx.clone());
        std::thread::spawn(move || {
            let mut rec = Record::default();
            for i in 0..ops {
                round(&s, (t << 32) + i, &mut rec);
            }
            let _ = done_tx.send(rec);
        });
    }
    let start = Instant::now();
    let mut recs = vec![main];
    for n in 0..OTHERS {
        let left = BOUND.saturating_sub(start.elapsed());
        match done_rx.recv_timeout(left) {
            Ok(rec) => recs.push(rec),
            Err(_) => {
                // The stuck threads are left behind (the test fails; the process
                // ends with the test run).
                panic!(
                    "{what}: {} of {OTHERS} other threads did not complete their {ops} rounds \
                     within {BOUND:?} — an operation documented lock-free waited for the \
                     stopped thread",
                    OTHERS - n
                );
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    trap.release();
    recs.push(victim.join().unwrap());
    // Every value put is taken exactly once (by someone, or by the drain).
    let mut count: HashMap<u64, i64> = HashMap::new();
    for r in &recs {
        for &v in &r.put {
            *count.entry(v).or_default() += 1;
        }
        for &v in &r.took {
            *count.entry(v).or_default() -= 1;
        }
    }
    while let Some(v) = s.with(|s, l| s.take(l)) {
        *count.entry(v).or_default() -= 1;
    }
    let wrong: Vec<_> = count.into_iter().filter(|&(_, c)| c != 0).collect();
    assert!(
        wrong.is_empty(),
        "{what}: values not taken exactly once: {wrong:?}"
    );
}

/// The matrix row of one structure: its own points under EBR and hazard
/// pointers, and the reclamation points under the scheme that has them.
fn row<S1, S2, S3>()
where
    S1: Subject<R = Ebr>,
    S2: Subject<R = HazardPointers>,
    S3: Subject<R = Qsbr>,
{
    for &p in S1::POINTS {
        stopped_at::<S1>(p, Ebr::with_advance_every(1).unwrap());
        stopped_at::<S2>(p, HazardPointers::with_threshold(3, 8).unwrap());
    }
    stopped_at::<S1>(stall::EPOCH_PIN, Ebr::with_advance_every(1).unwrap());
    stopped_at::<S1>(
        stall::EPOCH_ADVANCE_SCANNED,
        Ebr::with_advance_every(1).unwrap(),
    );
    stopped_at::<S3>(stall::EPOCH_PIN, Qsbr::new());
    stopped_at::<S2>(
        stall::HP_PROTECT_LOADED,
        HazardPointers::with_threshold(3, 8).unwrap(),
    );
    stopped_at::<S2>(
        stall::HP_PROTECT_PUBLISHED,
        HazardPointers::with_threshold(3, 8).unwrap(),
    );
}

#[test]
fn ms_queue_is_lock_free() {
    row::<MsQueue<u64, Ebr>, MsQueue<u64, HazardPointers>, MsQueue<u64, Qsbr>>();
}

#[test]
fn lscq_queue_is_lock_free() {
    row::<LscqQueue<u64, Ebr>, LscqQueue<u64, HazardPointers>, LscqQueue<u64, Qsbr>>();
}

#[test]
fn plj_queue_is_lock_free() {
    row::<PljQueue<u64, Ebr>, PljQueue<u64, HazardPointers>, PljQueue<u64, Qsbr>>();
}

#[test]
fn treiber_stack_is_lock_free() {
    row::<TreiberStack<u64, Ebr>, TreiberStack<u64, HazardPointers>, TreiberStack<u64, Qsbr>>();
}

#[test]
fn herlihy_stack_is_lock_free() {
    row::<HerlihyStack<u64, Ebr>, HerlihyStack<u64, HazardPointers>, HerlihyStack<u64, Qsbr>>();
}

#[test]
fn herlihy_skew_heap_is_lock_free() {
    row::<
        HerlihySkewHeap<u64, Ebr>,
        HerlihySkewHeap<u64, HazardPointers>,
        HerlihySkewHeap<u64, Qsbr>,
    >();
}
