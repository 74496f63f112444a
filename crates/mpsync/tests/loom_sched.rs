//! Loom models of the state-word protocol (paper 001 §3, 003 Figure 1): the owner
//! entering and leaving a no-preempt section, the "kernel" preempting/resuming by
//! CAS and warning an unpreemptable thread, and a peer handing the owner a lock by
//! making it `OtherUnpreemptable` — all racing.
//!
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p mpsync --test loom_sched --release`
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use mpsync::sched::{Actor, ContextBlock, ThreadState};

/// The kernel's side, as the pseudo-scheduler does it: preempt a `Preemptable`
/// thread; warn an unpreemptable one instead. Returns whether it preempted.
fn kernel_tick(cb: &ContextBlock, warned: &AtomicBool) -> bool {
    match cb.state() {
        ThreadState::Preemptable => cb
            .transition(
                ThreadState::Preemptable,
                ThreadState::Preempted,
                Actor::Kernel,
            )
            .is_ok(),
        s if s.is_unpreemptable() => {
            warned.store(true, Ordering::Relaxed);
            false
        }
        _ => false,
    }
}

/// The owner is never `Preempted` while inside its no-preempt section, whatever
/// the kernel does, and ends `Preemptable` at depth 0.
#[test]
fn owner_section_vs_kernel() {
    loom::model(|| {
        let cb = Arc::new(ContextBlock::new());
        let inside = Arc::new(AtomicBool::new(false));
        let warned = Arc::new(AtomicBool::new(false));
        let owner = {
            let (cb, inside) = (cb.clone(), inside.clone());
            thread::spawn(move || {
                cb.request_no_preempt();
                inside.store(true, Ordering::SeqCst);
                assert_ne!(cb.state(), ThreadState::Preempted);
                inside.store(false, Ordering::SeqCst);
                let _must_yield = cb.release_no_preempt();
                assert_eq!(cb.depth(), 0);
            })
        };
        // Kernel: one scheduling decision, then resume if it preempted.
        if kernel_tick(&cb, &warned) {
            // The owner cannot be inside: it was Preemptable when we preempted it
            // and it waits in `request_no_preempt` until we resume it.
            assert!(!inside.load(Ordering::SeqCst));
            cb.transition(
                ThreadState::Preempted,
                ThreadState::Preemptable,
                Actor::Kernel,
            )
            .unwrap();
        }
        owner.join().unwrap();
        assert_eq!(cb.state(), ThreadState::Preemptable);
    });
}

/// A releaser handing over a lock races the kernel preempting the waiter: exactly
/// one of them wins the waiter's state word, and a preempted waiter is never
/// handed the lock (003 Figure 1).
#[test]
fn handoff_vs_preemption() {
    loom::model(|| {
        let cb = Arc::new(ContextBlock::new());
        let peer = {
            let cb = cb.clone();
            thread::spawn(move || cb.make_other_unpreemptable())
        };
        let preempted = cb
            .transition(
                ThreadState::Preemptable,
                ThreadState::Preempted,
                Actor::Kernel,
            )
            .is_ok();
        let handed = peer.join().unwrap();
        match (preempted, handed) {
            (true, false) => assert_eq!(cb.state(), ThreadState::Preempted),
            (false, true) => assert_eq!(cb.state(), ThreadState::OtherUnpreemptable),
            other => panic!("both or neither won the state word: {other:?}"),
        }
    });
}

/// The owner's request races a handoff: a waiter that re-enters no-preempt mode
/// while its predecessor hands it the lock stays unpreemptable either way, and its
/// release makes it `Preemptable` again.
#[test]
fn request_vs_handoff() {
    loom::model(|| {
        let cb = Arc::new(ContextBlock::new());
        let peer = {
            let cb = cb.clone();
            thread::spawn(move || cb.make_other_unpreemptable())
        };
        cb.request_no_preempt();
        assert!(cb.state().is_unpreemptable());
        let handed = peer.join().unwrap();
        assert!(handed, "a running waiter can always be handed the lock");
        assert!(cb.state().is_unpreemptable());
        let _ = cb.release_no_preempt();
        assert_eq!(cb.state(), ThreadState::Preemptable);
    });
}

/// User code can never move a thread out of `Preempted`: with the kernel holding
/// the thread preempted, neither the owner's nor a peer's transitions succeed.
#[test]
fn user_code_cannot_leave_preempted() {
    loom::model(|| {
        let cb = Arc::new(ContextBlock::new());
        cb.transition(
            ThreadState::Preemptable,
            ThreadState::Preempted,
            Actor::Kernel,
        )
        .unwrap();
        let peer = {
            let cb = cb.clone();
            thread::spawn(move || cb.make_other_unpreemptable())
        };
        for to in [ThreadState::Preemptable, ThreadState::SelfUnpreemptable] {
            assert!(
                cb.transition(ThreadState::Preempted, to, Actor::Thread)
                    .is_err()
            );
        }
        assert!(!peer.join().unwrap());
        assert_eq!(cb.state(), ThreadState::Preempted);
    });
}
