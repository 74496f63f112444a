//! Loom models of the non-blocking structures over EBR and hazard pointers, with
//! reclamation as eager as each scheme allows (HP: scan at every retire; EBR: try to
//! advance at every critical section):
//!
//! - MS queue: an enqueue against a dequeue (of a value already there, and from
//!   an empty queue), and two dequeuers;
//! - PLJ queue: the same;
//! - Treiber stack: a push against a pop, and two poppers;
//! - elimination stack: two threads that each push and pop twice (an offer
//!   taken, withdrawn, and a slot reused by its second offer);
//! - SCQ (bounded, 2 cells): two threads that each enqueue and dequeue twice,
//!   so cells and ring entries are reused in the model;
//! - LSCQ (segments of 2 cells, the first one full): an enqueue that finalizes
//!   the segment and links a new one, against a dequeuer that empties the
//!   first, moves the head past it and retires it (freed at once when no
//!   hazard or pin holds it: a segment used after its free is reported).
//!
//! Nodes come from a test allocator whose "free" marks the node dead through
//! `ds::lf::Liveness` (a loom-tracked cell, the first field of every node) and
//! keeps the memory until the process ends: a node used after it was freed, or
//! concurrently with its free, is reported (a failed assertion or a loom data race),
//! and so is a value read that is not ordered after its write (`ValueCell`). Each
//! model also checks the outcome: values are conserved and in order.
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p mpsync --release --test loom_lockfree`
#![cfg(loom)]

use std::ptr::NonNull;

use loom::thread;
use mpsync::ds::alloc::NodeAlloc;
use mpsync::ds::elimination::EliminationStack;
use mpsync::ds::lf::Liveness;
use mpsync::ds::lscq::LscqQueue;
use mpsync::ds::ms_queue::MsQueue;
use mpsync::ds::plj_queue::PljQueue;
use mpsync::ds::scq::ScqQueue;
use mpsync::ds::treiber::TreiberStack;
use mpsync::reclaim::{Ebr, HazardPointers, Leak, Reclaimer};
use mpsync::sync::Arc;

/// Nodes are boxed and never given back; `free` marks them dead (see the module doc).
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
    model_bounded(2, f)
}

/// As [`model`], with `bound` preemptions unless `LOOM_MAX_PREEMPTIONS` says
/// otherwise.
fn model_bounded(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(
        std::env::var("LOOM_MAX_PREEMPTIONS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(bound),
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
/// No reclamation and no fences: the structure's own orderings alone must
/// publish a node to whoever takes it (the schemes' SeqCst fences, which loom
/// models as synchronizing every thread, would hide a missing Release/Acquire).
impl Eager for Leak {
    fn eager() -> Arc<Self> {
        Arc::new(Leak::new())
    }
}
impl Eager for HazardPointers {
    fn eager() -> Arc<Self> {
        Arc::new(HazardPointers::with_threshold(2, 1).unwrap())
    }
}

/// The queue operations both queues share.
trait Queue: Send + Sync + 'static {
    type R: Eager;
    fn make() -> Self;
    fn domain(&self) -> &Arc<Self::R>;
    fn put(&self, l: &mut <Self::R as Reclaimer>::Local, v: u32);
    fn take(&self, l: &mut <Self::R as Reclaimer>::Local) -> Option<u32>;
}

impl<R: Eager> Queue for MsQueue<u32, R, Poisoning> {
    type R = R;
    fn make() -> Self {
        MsQueue::with_domain(R::eager())
    }
    fn domain(&self) -> &Arc<R> {
        MsQueue::domain(self)
    }
    fn put(&self, l: &mut R::Local, v: u32) {
        self.enqueue(l, v)
    }
    fn take(&self, l: &mut R::Local) -> Option<u32> {
        self.dequeue(l)
    }
}

impl<R: Eager> Queue for PljQueue<u32, R, Poisoning> {
    type R = R;
    fn make() -> Self {
        PljQueue::with_domain(R::eager())
    }
    fn domain(&self) -> &Arc<R> {
        PljQueue::domain(self)
    }
    fn put(&self, l: &mut R::Local, v: u32) {
        self.enqueue(l, v)
    }
    fn take(&self, l: &mut R::Local) -> Option<u32> {
        self.dequeue(l)
    }
}

/// One value in the queue; one thread enqueues 2 while another dequeues (and, the
/// first node being retired, frees the old dummy at once).
fn enqueue_vs_dequeue<Q: Queue>() {
    model(|| {
        let q = Arc::new(Q::make());
        let mut main = <Q::R as Reclaimer>::register(q.domain());
        q.put(&mut main, 1);
        let q1 = q.clone();
        let e = thread::spawn(move || {
            let mut l = <Q::R as Reclaimer>::register(q1.domain());
            q1.put(&mut l, 2);
        });
        let q2 = q.clone();
        let d = thread::spawn(move || {
            let mut l = <Q::R as Reclaimer>::register(q2.domain());
            q2.take(&mut l)
        });
        e.join().unwrap();
        assert_eq!(d.join().unwrap(), Some(1), "FIFO: 1 was there first");
        assert_eq!(q.take(&mut main), Some(2));
        assert_eq!(q.take(&mut main), None);
    });
}

/// An empty queue; one thread enqueues 1 while another dequeues: the dequeuer
/// gets nothing or 1, and if 1, its read of the value must be ordered after the
/// enqueuer's write (the link CAS publishes the node).
fn enqueue_vs_dequeue_from_empty<Q: Queue>() {
    model(|| {
        let q = Arc::new(Q::make());
        let q1 = q.clone();
        let e = thread::spawn(move || {
            let mut l = <Q::R as Reclaimer>::register(q1.domain());
            q1.put(&mut l, 1);
        });
        let mut l = <Q::R as Reclaimer>::register(q.domain());
        let got = q.take(&mut l);
        e.join().unwrap();
        let rest = q.take(&mut l);
        let all: Vec<u32> = got.into_iter().chain(rest).collect();
        assert_eq!(all, [1], "1 taken exactly once");
        assert_eq!(q.take(&mut l), None);
    });
}

/// Two values; two dequeuers each get one, different ones.
fn two_dequeuers<Q: Queue>() {
    model(|| {
        let q = Arc::new(Q::make());
        let mut main = <Q::R as Reclaimer>::register(q.domain());
        q.put(&mut main, 1);
        q.put(&mut main, 2);
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let q = q.clone();
                thread::spawn(move || {
                    let mut l = <Q::R as Reclaimer>::register(q.domain());
                    q.take(&mut l)
                })
            })
            .collect();
        let mut got: Vec<u32> = hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect();
        got.sort_unstable();
        assert_eq!(got, [1, 2]);
        assert_eq!(q.take(&mut main), None);
        drop(main);
        let s = q.domain().stats();
        assert_eq!((s.retired, s.freed + s.pending), (2, 2));
    });
}

/// Three values; one thread dequeues once while another dequeues twice, so the
/// node the first one is taking its value from can be retired (and freed) by the
/// second one's second dequeue if it is not protected.
fn one_vs_two_dequeues<Q: Queue>(bound: usize) {
    model_bounded(bound, || {
        let q = Arc::new(Q::make());
        let mut main = <Q::R as Reclaimer>::register(q.domain());
        for v in 1..=3 {
            q.put(&mut main, v);
        }
        let q1 = q.clone();
        let a = thread::spawn(move || {
            let mut l = <Q::R as Reclaimer>::register(q1.domain());
            vec![q1.take(&mut l).unwrap()]
        });
        let q2 = q.clone();
        let b = thread::spawn(move || {
            let mut l = <Q::R as Reclaimer>::register(q2.domain());
            let x = q2.take(&mut l).unwrap();
            let y = q2.take(&mut l).unwrap();
            assert!(x < y, "FIFO within a thread");
            vec![x, y]
        });
        let mut got = a.join().unwrap();
        got.extend(b.join().unwrap());
        got.sort_unstable();
        assert_eq!(got, [1, 2, 3]);
        assert_eq!(q.take(&mut main), None);
    });
}

#[test]
fn ms_one_vs_two_dequeues_ebr() {
    one_vs_two_dequeues::<MsQueue<u32, Ebr, Poisoning>>(2);
}

// The hazard-pointer forms at one preemption: at two they took 100–150 s
// each on the 2-core CI machine (HP's per-load protect-and-validate loops
// multiply the interleavings), the longest models of the suite. A dequeue
// that forgets to protect `next` is caught without loom (`lockfree`'s
// `swing`, `ms_hp`, `plj_hp` and their planted bugs); run them at two with
// LOOM_MAX_PREEMPTIONS=2.
#[test]
fn ms_one_vs_two_dequeues_hp() {
    one_vs_two_dequeues::<MsQueue<u32, HazardPointers, Poisoning>>(1);
}

#[test]
fn plj_one_vs_two_dequeues_hp() {
    one_vs_two_dequeues::<PljQueue<u32, HazardPointers, Poisoning>>(1);
}

#[test]
fn ms_enqueue_vs_dequeue_ebr() {
    enqueue_vs_dequeue::<MsQueue<u32, Ebr, Poisoning>>();
}

#[test]
fn ms_enqueue_vs_dequeue_hp() {
    enqueue_vs_dequeue::<MsQueue<u32, HazardPointers, Poisoning>>();
}

#[test]
fn ms_enqueue_vs_dequeue_from_empty_ebr() {
    enqueue_vs_dequeue_from_empty::<MsQueue<u32, Ebr, Poisoning>>();
}

#[test]
fn ms_enqueue_vs_dequeue_from_empty_hp() {
    enqueue_vs_dequeue_from_empty::<MsQueue<u32, HazardPointers, Poisoning>>();
}

#[test]
fn ms_enqueue_vs_dequeue_from_empty_leak() {
    enqueue_vs_dequeue_from_empty::<MsQueue<u32, Leak, Poisoning>>();
}

#[test]
fn plj_enqueue_vs_dequeue_from_empty_leak() {
    enqueue_vs_dequeue_from_empty::<PljQueue<u32, Leak, Poisoning>>();
}

#[test]
fn plj_enqueue_vs_dequeue_from_empty_hp() {
    enqueue_vs_dequeue_from_empty::<PljQueue<u32, HazardPointers, Poisoning>>();
}

#[test]
fn ms_two_dequeuers_ebr() {
    two_dequeuers::<MsQueue<u32, Ebr, Poisoning>>();
}

#[test]
fn ms_two_dequeuers_hp() {
    two_dequeuers::<MsQueue<u32, HazardPointers, Poisoning>>();
}

#[test]
fn plj_enqueue_vs_dequeue_ebr() {
    enqueue_vs_dequeue::<PljQueue<u32, Ebr, Poisoning>>();
}

#[test]
fn plj_enqueue_vs_dequeue_hp() {
    enqueue_vs_dequeue::<PljQueue<u32, HazardPointers, Poisoning>>();
}

#[test]
fn plj_two_dequeuers_ebr() {
    two_dequeuers::<PljQueue<u32, Ebr, Poisoning>>();
}

#[test]
fn plj_two_dequeuers_hp() {
    two_dequeuers::<PljQueue<u32, HazardPointers, Poisoning>>();
}

/// One value on the stack; a push of 2 against a pop: the pop gets 1 or 2 and the
/// other is left.
fn treiber_push_vs_pop<R: Eager>() {
    model(|| {
        let s: Arc<TreiberStack<u32, R, Poisoning>> =
            Arc::new(TreiberStack::with_domain(R::eager()));
        let main = R::register(s.domain());
        s.push(&main, 1);
        let s1 = s.clone();
        let p = thread::spawn(move || {
            let l = R::register(s1.domain());
            s1.push(&l, 2);
        });
        let s2 = s.clone();
        let q = thread::spawn(move || {
            let l = R::register(s2.domain());
            s2.pop(&l)
        });
        p.join().unwrap();
        let popped = q.join().unwrap().expect("1 was there");
        let left = s.pop(&main).expect("one value left");
        let mut both = [popped, left];
        both.sort_unstable();
        assert_eq!(both, [1, 2]);
        assert_eq!(s.pop(&main), None);
    });
}

/// Two values; two poppers each get one, different ones.
fn treiber_two_poppers<R: Eager>() {
    model(|| {
        let s: Arc<TreiberStack<u32, R, Poisoning>> =
            Arc::new(TreiberStack::with_domain(R::eager()));
        let main = R::register(s.domain());
        s.push(&main, 1);
        s.push(&main, 2);
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let s = s.clone();
                thread::spawn(move || {
                    let l = R::register(s.domain());
                    s.pop(&l)
                })
            })
            .collect();
        let mut got: Vec<u32> = hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect();
        got.sort_unstable();
        assert_eq!(got, [1, 2]);
        assert!(s.is_empty());
    });
}

#[test]
fn treiber_push_vs_pop_ebr() {
    treiber_push_vs_pop::<Ebr>();
}

#[test]
fn treiber_push_vs_pop_hp() {
    treiber_push_vs_pop::<HazardPointers>();
}

#[test]
fn treiber_two_poppers_ebr() {
    treiber_two_poppers::<Ebr>();
}

#[test]
fn treiber_two_poppers_hp() {
    treiber_two_poppers::<HazardPointers>();
}

/// The detector itself: a check racing with a kill fails in some interleaving.
#[test]
#[should_panic(expected = "used after it was freed")]
fn liveness_detects_a_free_racing_with_a_use() {
    model(|| {
        let p: &'static Liveness = Box::leak(Box::new(Liveness::new()));
        let a = thread::spawn(move || p.check());
        // SAFETY: test.
        unsafe { Liveness::kill(p as *const Liveness as *mut u8) };
        a.join().unwrap();
    });
}

/// Two threads push a value and pop one, thread 0 `rounds` times, thread 1
/// twice: every value pushed is popped once (by a thread, or by the final
/// drain), whether the push went to the stack or met a pop in a collision slot.
fn elimination_act_twice<R: Eager>(rounds: u32) {
    model(move || {
        let s: Arc<EliminationStack<u32, R, Poisoning>> =
            Arc::new(EliminationStack::with_domain(R::eager()));
        let hs: Vec<_> = (0..2u32)
            .map(|t| {
                let s = s.clone();
                thread::spawn(move || {
                    let l = R::register(s.domain());
                    let mut got = Vec::new();
                    for i in 0..if t == 0 { rounds } else { 2 } {
                        s.push(&l, t * 2 + i + 1);
                        got.extend(s.pop(&l));
                    }
                    got
                })
            })
            .collect();
        let mut got: Vec<u32> = hs.into_iter().flat_map(|h| h.join().unwrap()).collect();
        let main = R::register(s.domain());
        got.extend(std::iter::from_fn(|| s.pop(&main)));
        got.sort_unstable();
        let want: Vec<u32> = (1..=rounds).chain([3, 4]).collect();
        assert_eq!(got, want);
    });
}

/// No reclamation fences: the slot's own Release/Acquire must publish an
/// offered node to its popper.
#[test]
fn elimination_act_twice_leak() {
    elimination_act_twice::<Leak>(2);
}

/// EBR freeing eagerly, each thread acting once (acting twice took over 60 s;
/// the Treiber models above check the stack's reclamation, the slot models
/// below the elimination array).
#[test]
fn elimination_act_once_ebr() {
    model(|| {
        let s: Arc<EliminationStack<u32, Ebr, Poisoning>> =
            Arc::new(EliminationStack::with_domain(Ebr::eager()));
        let hs: Vec<_> = (1..=2u32)
            .map(|v| {
                let s = s.clone();
                thread::spawn(move || {
                    let l = Ebr::register(s.domain());
                    s.push(&l, v);
                    s.pop(&l)
                })
            })
            .collect();
        let mut got: Vec<u32> = hs.into_iter().filter_map(|h| h.join().unwrap()).collect();
        let main = Ebr::register(s.domain());
        got.extend(std::iter::from_fn(|| s.pop(&main)));
        got.sort_unstable();
        assert_eq!(got, [1, 2]);
    });
}

/// The elimination array alone (the stack's own models rarely reach it: a
/// push must lose its CAS and a pop lose its own meanwhile): thread 0 offers,
/// then looks for an offer; thread 1 the other way round. Each value is
/// taken once or given back, and a taken value is read after its write.
#[test]
fn elimination_slot_act_twice() {
    model(|| {
        let s: Arc<EliminationStack<u32, Leak, Poisoning>> =
            Arc::new(EliminationStack::with_domain(Leak::eager()));
        let hs: Vec<_> = (0..2u32)
            .map(|t| {
                let s = s.clone();
                thread::spawn(move || {
                    let l = Leak::register(s.domain());
                    let (mut taken, mut back) = (Vec::new(), Vec::new());
                    for step in 0..2 {
                        if (step + t) % 2 == 0 {
                            back.extend(s.exchange_push(&l, t + 1).err());
                        } else {
                            taken.extend(s.exchange_pop());
                        }
                    }
                    (taken, back)
                })
            })
            .collect();
        let mut all = Vec::new();
        for h in hs {
            let (taken, back) = h.join().unwrap();
            all.extend(taken);
            all.extend(back);
        }
        all.sort_unstable();
        assert_eq!(all, [1, 2]);
    });
}

/// One offer, two takers: at most one gets it (a second would take the same
/// node twice), and if neither does the pusher has it back.
#[test]
fn elimination_slot_two_takers() {
    model(|| {
        let s: Arc<EliminationStack<u32, Leak, Poisoning>> =
            Arc::new(EliminationStack::with_domain(Leak::eager()));
        let takers: Vec<_> = (0..2)
            .map(|_| {
                let s = s.clone();
                thread::spawn(move || s.exchange_pop())
            })
            .collect();
        let l = Leak::register(s.domain());
        let mut all: Vec<u32> = s.exchange_push(&l, 7).err().into_iter().collect();
        for t in takers {
            all.extend(t.join().unwrap());
        }
        assert_eq!(all, [7]);
    });
}

/// LSCQ with segments of 2 cells, the first full (1, 2): one thread enqueues
/// 3, which finalizes it and links a second segment, while another dequeues
/// three times — the third meets the empty first segment, looks again with a
/// fresh threshold, moves the head (and the tail, if it lags) past it and
/// retires it. FIFO, every value once.
fn lscq_grow_vs_drain<R: Eager>(bound: usize) {
    model_bounded(bound, || {
        let q =
            Arc::new(LscqQueue::<u32, R>::with_domain_and_segment_capacity(R::eager(), 2).unwrap());
        let main = R::register(q.domain());
        q.enqueue(&main, 1);
        q.enqueue(&main, 2);
        let q1 = q.clone();
        let e = thread::spawn(move || {
            let l = R::register(q1.domain());
            q1.enqueue(&l, 3);
        });
        let q2 = q.clone();
        let d = thread::spawn(move || {
            let l = R::register(q2.domain());
            [q2.dequeue(&l), q2.dequeue(&l), q2.dequeue(&l)]
        });
        e.join().unwrap();
        let [a, b, c] = d.join().unwrap();
        assert_eq!((a, b), (Some(1), Some(2)), "FIFO: 1 and 2 were there first");
        let rest: Vec<u32> = c
            .into_iter()
            .chain(std::iter::from_fn(|| q.dequeue(&main)))
            .collect();
        assert_eq!(rest, [3], "3 taken exactly once");
    });
}

// Leak (no reclamation fences: the queue's own orderings must publish a
// segment and its values) at 3 preemptions takes about 3 s; EBR and hazard
// pointers at 2 took about 60 s together on 2 cores, so they run at 1 here
// (LOOM_MAX_PREEMPTIONS=2 for the deeper run).
#[test]
fn lscq_grow_vs_drain_leak() {
    lscq_grow_vs_drain::<Leak>(3);
}

#[test]
fn lscq_grow_vs_drain_ebr() {
    lscq_grow_vs_drain::<Ebr>(1);
}

#[test]
fn lscq_grow_vs_drain_hp() {
    lscq_grow_vs_drain::<HazardPointers>(1);
}

/// SCQ of 2 cells: two threads each enqueue a value and dequeue one, twice;
/// every value comes out once, each thread's in order, a cell's value read
/// only after its write (the cells are loom-tracked).
#[test]
fn scq_act_twice() {
    model(|| {
        let q = Arc::new(ScqQueue::<u32>::new(2).unwrap());
        let hs: Vec<_> = (0..2u32)
            .map(|t| {
                let q = q.clone();
                thread::spawn(move || {
                    let mut got = Vec::new();
                    for i in 0..2 {
                        q.try_enqueue(t * 2 + i + 1)
                            .expect("never more than 2 values");
                        got.extend(q.dequeue());
                    }
                    got
                })
            })
            .collect();
        let mut each: Vec<Vec<u32>> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        each.push(std::iter::from_fn(|| q.dequeue()).collect());
        for w in &each {
            for p in [[1, 2], [3, 4]] {
                let seen: Vec<u32> = w.iter().copied().filter(|v| p.contains(v)).collect();
                assert!(seen.windows(2).all(|x| x[0] < x[1]), "FIFO per producer");
            }
        }
        let mut got: Vec<u32> = each.concat();
        got.sort_unstable();
        assert_eq!(got, [1, 2, 3, 4]);
    });
}
