//! A small linearizability checker for queues, stacks and priority queues, in
//! the style of Wing & Gong / Lowe: record real concurrent histories (invocation
//! and response stamped from one global clock), then search for a sequential
//! order that respects real time and the sequential specification.
//!
//! The search linearizes, at each step, one pending operation that was invoked
//! before every pending operation responded (the "minimal" operations), and
//! memoizes (set of linearized operations, abstract state) so that a history of
//! a few dozen operations is checked in microseconds.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex, RwLock};

/// One operation of a history: `put` (enqueue / push / insert) of a value, or
/// `take` (dequeue / pop / delete_min) that returned a value or `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Enqueue / push / insert.
    Put(u64),
    /// Dequeue / pop / delete_min, with what it returned.
    Take(Option<u64>),
}

/// A completed operation with its real-time interval.
#[derive(Debug, Clone, Copy)]
pub struct Event {
    /// The thread that ran it.
    pub thread: usize,
    /// Clock reading before the call.
    pub invoke: u64,
    /// Clock reading after the return.
    pub response: u64,
    /// What it did.
    pub op: Op,
}

/// A sequential specification: an abstract state and how operations change it.
pub trait Spec: Clone + Eq + Hash + Default {
    /// Applies `op`; `false` if its recorded result is impossible in this state.
    fn apply(&mut self, op: Op) -> bool;
}

/// FIFO queue.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Fifo(VecDeque<u64>);
impl Spec for Fifo {
    fn apply(&mut self, op: Op) -> bool {
        match op {
            Op::Put(v) => {
                self.0.push_back(v);
                true
            }
            Op::Take(r) => self.0.pop_front() == r,
        }
    }
}

/// LIFO stack.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Lifo(Vec<u64>);
impl Spec for Lifo {
    fn apply(&mut self, op: Op) -> bool {
        match op {
            Op::Put(v) => {
                self.0.push(v);
                true
            }
            Op::Take(r) => self.0.pop() == r,
        }
    }
}

/// Min-priority queue (a multiset: value → count).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct MinPq(BTreeMap<u64, u32>);
impl Spec for MinPq {
    fn apply(&mut self, op: Op) -> bool {
        match op {
            Op::Put(v) => {
                *self.0.entry(v).or_insert(0) += 1;
                true
            }
            Op::Take(r) => {
                let min = self.0.keys().next().copied();
                if min != r {
                    return false;
                }
                if let Some(m) = min {
                    let c = self.0.get_mut(&m).expect("present");
                    *c -= 1;
                    if *c == 0 {
                        self.0.remove(&m);
                    }
                }
                true
            }
        }
    }
}

/// `Ok` if `history` (at most 64 operations) is linearizable with respect to
/// `S` from the empty state; otherwise the history, for the failure message.
pub fn check<S: Spec>(history: &[Event]) -> Result<(), String> {
    assert!(
        history.len() <= 64,
        "histories are limited to 64 operations"
    );
    let mut seen = HashSet::new();
    if search(history, 0, &S::default(), &mut seen) {
        Ok(())
    } else {
        let mut h = history.to_vec();
        h.sort_by_key(|e| e.invoke);
        Err(format!("not linearizable: {h:#?}"))
    }
}

fn search<S: Spec>(h: &[Event], done: u64, state: &S, seen: &mut HashSet<(u64, S)>) -> bool {
    if done.count_ones() as usize == h.len() {
        return true;
    }
    if !seen.insert((done, state.clone())) {
        return false;
    }
    let pending = || (0..h.len()).filter(|&i| done & (1 << i) == 0);
    let first_response = pending().map(|i| h[i].response).min().expect("pending");
    for i in pending() {
        if h[i].invoke > first_response {
            continue;
        }
        let mut next = state.clone();
        if next.apply(h[i].op) && search(h, done | (1 << i), &next, seen) {
            return true;
        }
    }
    false
}

/// The global clock histories are stamped from.
static CLOCK: AtomicU64 = AtomicU64::new(0);

fn tick() -> u64 {
    // SeqCst: the stamps must be totally ordered with the operations they
    // bracket, so that "a responded before b was invoked" is real time.
    CLOCK.fetch_add(1, Ordering::SeqCst)
}

/// One thread's recorder.
#[derive(Debug)]
pub struct Recorder {
    thread: usize,
    events: Vec<Event>,
}

impl Recorder {
    /// Runs `f` (a put of `v`) and records it.
    pub fn put(&mut self, v: u64, f: impl FnOnce(u64)) {
        let invoke = tick();
        f(v);
        let response = tick();
        self.events.push(Event {
            thread: self.thread,
            invoke,
            response,
            op: Op::Put(v),
        });
    }

    /// Runs `f` (a take) and records what it returned.
    pub fn take(&mut self, f: impl FnOnce() -> Option<u64>) {
        let invoke = tick();
        let r = f();
        let response = tick();
        self.events.push(Event {
            thread: self.thread,
            invoke,
            response,
            op: Op::Take(r),
        });
    }
}

/// Records `rounds` short histories: in each, a fresh structure from `make` is
/// driven by `threads` threads released together, each running `body(&ds,
/// thread, round, recorder)`; every history is checked against `S`. Threads are
/// spawned once and reused, so 10,000 rounds take about a second.
///
/// Returns the number of histories checked, or the first violation.
pub fn check_rounds<D, S, M, B>(
    rounds: usize,
    threads: usize,
    make: M,
    body: B,
) -> Result<usize, String>
where
    D: Send + Sync,
    S: Spec,
    M: Fn() -> D,
    B: Fn(&D, usize, usize, &mut Recorder) + Sync,
{
    let slot: RwLock<Option<Arc<D>>> = RwLock::new(None);
    let start = Barrier::new(threads + 1);
    let end = Barrier::new(threads + 1);
    let events: Mutex<Vec<Event>> = Mutex::new(Vec::new());
    let quit = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (slot, start, end, events, quit, body) =
                (&slot, &start, &end, &events, &quit, &body);
            s.spawn(move || {
                for round in 0.. {
                    start.wait();
                    // Relaxed: set before the barrier, which orders it.
                    if quit.load(Ordering::Relaxed) {
                        return;
                    }
                    let ds = slot.read().unwrap().clone().expect("structure set");
                    let mut rec = Recorder {
                        thread: t,
                        events: Vec::with_capacity(8),
                    };
                    body(&ds, t, round, &mut rec);
                    drop(ds);
                    events.lock().unwrap().extend(rec.events);
                    end.wait();
                }
            });
        }
        let mut result = Ok(rounds);
        for _ in 0..rounds {
            *slot.write().unwrap() = Some(Arc::new(make()));
            start.wait();
            end.wait();
            // Drop the structure here, between rounds (its Drop is exercised too).
            slot.write().unwrap().take();
            let h = std::mem::take(&mut *events.lock().unwrap());
            if let Err(e) = check::<S>(&h) {
                result = Err(e);
                break;
            }
        }
        // Relaxed: the barrier below orders it.
        quit.store(true, Ordering::Relaxed);
        start.wait();
        result
    })
}

/// The values thread `t` puts in round `round`: distinct across threads and
/// rounds, so a duplicated or invented value cannot hide. Heaps get keys that
/// collide across threads, so ties are exercised too.
pub fn value(t: usize, round: usize, i: usize, heap: bool) -> u64 {
    if heap {
        ((round * 7 + t * 3 + i * 5) % 11) as u64
    } else {
        ((round as u64) << 16) | ((t as u64) << 8) | i as u64
    }
}
