//! Loom models of the non-blocking structures of `ds`: Herlihy's stack (a push
//! racing two pops, with EBR and with QSBR), Herlihy's skew heap (an insert racing a delete_min), both
//! reclaiming with EBR set to advance at every critical section so that versions
//! and nodes are really freed inside the model; and the CAS counter (two
//! increments).
//!
//! Stack values carry a loom `UnsafeCell` written by the pusher and read by the
//! popper: a pop that took a value without synchronizing with its push is a data
//! race loom reports. Every model checks conservation (each value taken once).
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p mpsync --release --target-dir target/loom --test loom_ds`
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::thread;
use mpsync::ds::Counter;
use mpsync::ds::counter::CasCounter;
use mpsync::ds::heap::HerlihySkewHeap;
use mpsync::ds::stack::HerlihyStack;
use mpsync::reclaim::{Ebr, Local, Qsbr, Reclaimer};
use mpsync::sync::Arc;

fn builder() -> loom::model::Builder {
    // Calibrate the backoff's busy-work loop outside the model: the first CAS
    // failure would otherwise do it inside one execution and not the others.
    mpsync::util::busy::BusyWork::global();
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b
}

/// A value whose payload loom tracks.
struct Val(UnsafeCell<u64>);

impl Val {
    /// Made and written by the putting thread (an explicit tracked write).
    fn new(v: u64) -> Self {
        let c = UnsafeCell::new(0);
        // SAFETY: the cell is not shared yet.
        c.with_mut(|p| unsafe { *p = v });
        Self(c)
    }
    fn get(&self) -> u64 {
        // SAFETY: loom checks that this read is ordered after the write in `new`.
        self.0.with(|p| unsafe { *p })
    }
}

/// One value pushed before, one pushed by another thread while this one pops
/// twice (calling `quiescent` after each pop, which QSBR needs to reclaim).
fn stack_push_vs_pops<R: Reclaimer>(make: fn() -> R) {
    builder().check(move || {
        let domain = Arc::new(make());
        let s = Arc::new(HerlihyStack::<Val, R>::with_domain(domain.clone()));
        {
            let l = R::register(&domain);
            s.push(&l, Val::new(1));
        }
        let pusher = {
            let (s, d) = (s.clone(), domain.clone());
            thread::spawn(move || {
                let l = R::register(&d);
                s.push(&l, Val::new(2));
            })
        };
        let mut got = Vec::new();
        {
            let mut l = R::register(&domain);
            for _ in 0..2 {
                if let Some(v) = s.pop(&l) {
                    got.push(v.get());
                }
                l.quiescent();
            }
        }
        pusher.join().unwrap();
        let l = R::register(&domain);
        while let Some(v) = s.pop(&l) {
            got.push(v.get());
        }
        drop(l);
        got.sort_unstable();
        assert_eq!(got, [1, 2], "each value popped exactly once");
    });
}

#[test]
fn herlihy_stack_push_vs_pops_ebr() {
    stack_push_vs_pops(|| Ebr::with_advance_every(1).unwrap());
}

/// QSBR has no fences of its own, so this model also checks that the stack's
/// own orderings publish a pushed value to its popper.
#[test]
fn herlihy_stack_push_vs_pops_qsbr() {
    stack_push_vs_pops(Qsbr::new);
}

#[test]
fn herlihy_heap_insert_vs_delete_min() {
    builder().check(|| {
        let domain = Arc::new(Ebr::with_advance_every(1).unwrap());
        let h = Arc::new(HerlihySkewHeap::<u64, Ebr>::with_domain(domain.clone()));
        {
            let l = Ebr::register(&domain);
            h.insert(&l, 2);
            h.insert(&l, 3);
        }
        let inserter = {
            let (h, d) = (h.clone(), domain.clone());
            thread::spawn(move || {
                let l = Ebr::register(&d);
                h.insert(&l, 1);
            })
        };
        let first = {
            let l = Ebr::register(&domain);
            h.delete_min(&l)
        };
        // Linearizable: either before the insert (2) or after it (1).
        assert!(matches!(first, Some(1) | Some(2)), "{first:?}");
        inserter.join().unwrap();
        let l = Ebr::register(&domain);
        let mut got = vec![first.unwrap()];
        let rest: Vec<u64> = std::iter::from_fn(|| h.delete_min(&l)).collect();
        assert!(rest.windows(2).all(|w| w[0] <= w[1]), "drained in order");
        got.extend(rest);
        drop(l);
        got.sort_unstable();
        assert_eq!(got, [1, 2, 3], "each value deleted exactly once");
    });
}

#[test]
fn cas_counter_two_increments() {
    builder().check(|| {
        let c = Arc::new(CasCounter::new());
        let t = {
            let c = c.clone();
            thread::spawn(move || c.increment())
        };
        let a = c.increment();
        let b = t.join().unwrap();
        let mut v = [a, b];
        v.sort_unstable();
        assert_eq!(v, [0, 1]);
        assert_eq!(c.get(), 2);
    });
}
