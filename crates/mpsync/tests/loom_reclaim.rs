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
    // Closures that capture nothing: `with_node` takes plain functions.
    let body = move |domain: &Arc<R>, src: &Arc<AtomicPtr<Node>>| {
        let t = {
            let (d, s) = (domain.clone(), src.clone());
            thread::spawn(move || reader(&d, &s))
        };
        writer(domain, src);
        t.join().unwrap();
    };
    with_node(make, 3, body);
}

/// Runs `body` (which starts and joins its threads) on one node linked from `src`
/// with a fresh domain, then checks the node was freed exactly once when
/// everything dropped.
fn with_node<R: Reclaimer>(
    make: fn() -> R,
    preemptions: usize,
    body: impl Fn(&Arc<R>, &Arc<AtomicPtr<Node>>) + Sync + Send + 'static,
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
        body(&domain, &src);
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
            let l = HazardPointers::register(d);
            let g = l.enter();
            let p = g.protect_raw(0, src);
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

/// As above with the hazard in a slot the reader does not have yet: `protect`
/// allocates a block of slots (linked into the reader's record with a Release
/// store) while the writer's scan walks the records. The scan must see the
/// hazard in the new block whenever the reader may still read the node.
#[test]
fn hp_protect_into_a_slot_allocated_on_demand_vs_scan() {
    model(
        || HazardPointers::with_threshold(1, 1).unwrap(),
        |d, src| {
            let l = HazardPointers::register(d);
            let g = l.enter();
            let p = g.protect_raw(5, src); // K = 1: slot 5 is in a second block
            read(p);
        },
        |d, src| {
            let mut l = HazardPointers::register(d);
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
            let l = Ebr::register(d);
            let g = l.enter();
            let p = g.protect_raw(0, src);
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
            let p = l.enter().protect_raw(0, src);
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

/// A QSBR registration that went offline (`Local::park`, as the handle-free API's
/// cached registrations do after each operation) re-joins on its next `enter`:
/// the re-pin races the writer's quiescent states (epoch advances), and a node
/// the reader then reaches is not freed under it. Without the re-pin the parked
/// reader would read while the epoch advances past it.
#[test]
fn qsbr_parked_registration_rejoins_before_reading() {
    model(
        Qsbr::new,
        |d, src| {
            let mut l = Qsbr::register(d);
            l.park();
            {
                let g = l.enter();
                let p = g.protect_raw(0, src);
                read(p);
            }
            l.park();
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
            let l = Ebr::register(d);
            unlink_and_retire(&mut l.enter(), src);
            drop(l);
        },
        |d, src| {
            let mut l = Ebr::register(d);
            let p = l.enter().protect_raw(0, src);
            let _ = p; // not dereferenced after the guard: only leaving matters here
            l.try_reclaim();
            drop(l);
        },
    );
}

/// The stale-pin window: the writer reads the global epoch `G`, and before it
/// publishes its pin the other thread advances the epoch (three times: the
/// writer, not yet visible, blocks none of them), pins at the new epoch and reads
/// the node. The writer's pin, if not re-validated, is at the old epoch: it
/// unlinks the node and retires it into that epoch's bag, which its next pin
/// finds expired and frees — under the reader (a loom data race on the node).
///
/// Both registrations are made before the threads start and the reader's is
/// dropped only after the join, so that the model explores only the operations
/// (and the reader's leaving, with its SeqCst fence, cannot hide the race: loom's
/// partial-order reduction does not reorder fences of unrelated threads).
#[test]
fn ebr_pin_window_vs_advances() {
    with_node(
        || Ebr::with_advance_every(1000).unwrap(),
        2,
        |d, src| {
            let w = Ebr::register(d);
            let mut r = Ebr::register(d);
            let t = {
                let src = src.clone();
                thread::spawn(move || {
                    for _ in 0..3 {
                        r.try_reclaim();
                    }
                    read(r.enter().protect_raw(0, &src));
                    r
                })
            };
            unlink_and_retire(&mut w.enter(), src);
            drop(w.enter()); // the next pin frees what has expired
            drop(t.join().unwrap());
        },
    );
}

/// QSBR's `register` pins with the same window: the other thread (with a node of
/// its own pending, so that its quiescent states try to advance) advances three
/// times and reads the node while the writer is joining.
#[test]
fn qsbr_register_window_vs_advances() {
    with_node(Qsbr::new, 2, |d, src| {
        let mut r = Qsbr::register(d);
        // SAFETY: a fresh box nobody else can reach.
        unsafe { r.enter().retire_box(Box::into_raw(Box::new(0u8))) };
        let t = {
            let src = src.clone();
            thread::spawn(move || {
                for _ in 0..3 {
                    r.quiescent();
                }
                read(r.enter().protect_raw(0, &src));
                r
            })
        };
        let mut w = Qsbr::register(d);
        unlink_and_retire(&mut w.enter(), src);
        w.quiescent(); // re-pins, and frees what has expired
        drop(t.join().unwrap());
    });
}
