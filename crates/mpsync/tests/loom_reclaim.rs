//! Loom models of each reclamation scheme's protect against a concurrent unlink,
//! retire and reclaim: a reader loads a node through the scheme while a writer
//! unlinks it, retires it and tries to free it at once (HP: scan at every retire;
//! EBR: advance at every critical section and `try_reclaim`; QSBR: quiescent
//! states). The "free" function poisons the node through a loom `UnsafeCell`: a
//! free not ordered after the reader's read is a data race loom reports, and a free
//! ordered before it makes the read see the poison. Memory is deallocated by the
//! model itself after the threads join. Every node must be freed exactly once by
//! the time the domain drops.
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p mpsync --release --target-dir target/loom --test loom_reclaim`
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicUsize;
use loom::thread;
use mpsync::reclaim::{Ebr, Guard, HazardPointers, Local, Qsbr, Reclaimer};
use mpsync::sync::{Arc, AtomicPtr, Ordering};

const VALUE: u64 = 7;
const POISON: u64 = 0xdead;

struct Node {
    value: UnsafeCell<u64>,
    frees: AtomicUsize,
}

/// The scheme's free function: poison (a tracked write) and count.
unsafe fn poison(p: *mut u8) {
    // SAFETY: only `Node`s are retired here; memory is kept until the model ends.
    let n = unsafe { &*p.cast::<Node>() };
    // SAFETY: loom checks this write against every unsynchronized access.
    n.value.with_mut(|v| unsafe { *v = POISON });
    n.frees.fetch_add(1, Ordering::Relaxed);
}

/// Reads the protected node's value; it must not have been freed.
fn read(p: *mut Node) {
    if p.is_null() {
        return; // unlinked before we looked: nothing to read
    }
    // SAFETY: `p` is protected by the caller's guard (memory itself lives until
    // the model ends).
    let v = unsafe { (*p).value.with(|v| *v) };
    assert_eq!(v, VALUE, "read a freed node");
}

/// Unlinks the node from `src` and retires it (by CAS; see `mpsync::sync` on
/// loom's `swap`).
fn unlink_and_retire<G: Guard>(g: &mut G, src: &AtomicPtr<Node>) {
    let p = src.load(Ordering::Acquire);
    if src
        .compare_exchange(p, std::ptr::null_mut(), Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        // SAFETY: unlinked by our CAS, retired once; `poison` is sound anywhere.
        unsafe { g.retire_raw(p.cast(), poison) };
    }
}

/// Runs `reader` and `writer` on one node with a fresh domain, then checks the
/// node was freed exactly once when everything dropped.
fn model<R: Reclaimer>(
    make: fn() -> R,
    reader: fn(&Arc<R>, &AtomicPtr<Node>),
    writer: fn(&Arc<R>, &AtomicPtr<Node>),
) {
    model_with(make, reader, writer, None, 3);
}

/// As [`model`], with a third thread, `other`, beside the reader and the writer.
fn model_with<R: Reclaimer>(
    make: fn() -> R,
    reader: fn(&Arc<R>, &AtomicPtr<Node>),
    writer: fn(&Arc<R>, &AtomicPtr<Node>),
    other: Option<fn(&Arc<R>)>,
    preemptions: usize,
) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.check(move || {
        let node = Box::into_raw(Box::new(Node {
            value: UnsafeCell::new(VALUE),
            frees: AtomicUsize::new(0),
        }));
        let domain = Arc::new(make());
        let src = Arc::new(AtomicPtr::new(node));
        let t = {
            let (d, s) = (domain.clone(), src.clone());
            thread::spawn(move || reader(&d, &s))
        };
        let o = other.map(|f| {
            let d = domain.clone();
            thread::spawn(move || f(&d))
        });
        writer(&domain, &src);
        t.join().unwrap();
        if let Some(o) = o {
            o.join().unwrap();
        }
        drop(domain);
        // SAFETY: all threads joined; the node was allocated above.
        let node = unsafe { Box::from_raw(node) };
        assert_eq!(
            node.frees.load(Ordering::Relaxed),
            1,
            "{}: freed once",
            R::NAME
        );
    });
}

#[test]
fn hp_protect_vs_retire_and_scan() {
    model(
        || HazardPointers::with_threshold(1, 1).unwrap(),
        |d, src| {
            let mut l = HazardPointers::register(d);
            let mut g = l.enter();
            let p = g.protect(0, src);
            read(p);
        },
        |d, src| {
            let mut l = HazardPointers::register(d);
            // Threshold 1: the retire scans at once.
            unlink_and_retire(&mut l.enter(), src);
            l.scan();
        },
    );
}

#[test]
fn ebr_protect_vs_retire_and_advance() {
    model(
        || Ebr::with_advance_every(1).unwrap(),
        |d, src| {
            let mut l = Ebr::register(d);
            let mut g = l.enter();
            let p = g.protect(0, src);
            read(p);
        },
        |d, src| {
            let mut l = Ebr::register(d);
            unlink_and_retire(&mut l.enter(), src);
            for _ in 0..3 {
                l.try_reclaim();
            }
        },
    );
}

#[test]
fn qsbr_protect_vs_retire_and_quiescent_states() {
    model(
        Qsbr::new,
        |d, src| {
            let mut l = Qsbr::register(d);
            let p = l.enter().protect(0, src);
            read(p);
            l.quiescent();
        },
        |d, src| {
            let mut l = Qsbr::register(d);
            unlink_and_retire(&mut l.enter(), src);
            for _ in 0..3 {
                l.quiescent();
            }
        },
    );
}

/// A thread leaves (drops its handle) with its node pending while another thread
/// reclaims and leaves: the hand-over to the domain loses nothing and frees
/// nothing twice.
#[test]
fn ebr_leave_hands_over_concurrently() {
    model(
        || Ebr::with_advance_every(1).unwrap(),
        |d, src| {
            let mut l = Ebr::register(d);
            unlink_and_retire(&mut l.enter(), src);
            drop(l);
        },
        |d, src| {
            let mut l = Ebr::register(d);
            let p = l.enter().protect(0, src);
            let _ = p; // not dereferenced after the guard: only leaving matters here
            l.try_reclaim();
            drop(l);
        },
    );
}

/// The stale-pin window (a pin that read the global epoch `g`, then published
/// it after the epoch had moved on to `g + 2`): a third thread advances the epoch
/// twice while the writer is between reading `G` and publishing its pin; the
/// reader then pins at the new epoch and reads the node the writer unlinks and
/// retires. A retire tagged with the stale epoch is freed one epoch too early,
/// under the reader.
#[test]
fn ebr_pin_window_vs_two_advances() {
    model_with(
        || Ebr::with_advance_every(1000).unwrap(),
        |d, src| {
            let mut l = Ebr::register(d);
            let mut g = l.enter();
            let p = g.protect(0, src);
            read(p);
        },
        |d, src| {
            let mut l = Ebr::register(d);
            unlink_and_retire(&mut l.enter(), src);
            for _ in 0..2 {
                l.try_reclaim();
            }
        },
        Some(|d| {
            let mut l = Ebr::register(d);
            l.try_reclaim();
            l.try_reclaim();
        }),
        2,
    );
}

/// QSBR's `register` pins with the same window; the third thread (with a node of
/// its own pending, so that its quiescent states try to advance) advances twice
/// and leaves.
#[test]
fn qsbr_register_window_vs_two_advances() {
    model_with(
        Qsbr::new,
        |d, src| {
            let mut l = Qsbr::register(d);
            let p = l.enter().protect(0, src);
            read(p);
            l.quiescent();
        },
        |d, src| {
            let mut l = Qsbr::register(d);
            unlink_and_retire(&mut l.enter(), src);
            for _ in 0..2 {
                l.quiescent();
            }
        },
        Some(|d| {
            let mut l = Qsbr::register(d);
            // SAFETY: a fresh box nobody else can reach.
            unsafe { l.enter().retire_box(Box::into_raw(Box::new(0u8))) };
            l.quiescent();
            l.quiescent();
        }),
        2,
    );
}
