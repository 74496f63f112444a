//! Loom models of the no-preempt protocol (paper 001 §3, 003 Figure 1, issue 13
//! §3): the owner's request is its own word (plain stores); the "kernel" reads
//! it as a hint and preempts by CAS on the state word, warning a thread whose
//! request it sees; the owner's handler — a step of the owner's own thread
//! here, as the signal runs on it — re-reads the word and undoes a preemption
//! that raced a request; a peer hands the owner a lock by making it
//! `OtherUnpreemptable` — all racing. And `park_shared_any`, the sleep on
//! several words: a ring of any of them is never lost.
//!
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p mpsync --test loom_sched --release`
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use mpsync::sched::{Actor, ContextBlock, SignalVerdict, ThreadState};

/// The kernel's side, as the pseudo-scheduler does it: preempt a thread whose
/// request word (read from this thread: a hint) shows no request in force;
/// warn it otherwise. Returns whether it preempted.
fn kernel_tick(cb: &ContextBlock, warned: &AtomicBool) -> bool {
    if cb.preempt_unless_requested() {
        return true;
    }
    if cb.state() != ThreadState::Preempted {
        warned.store(true, Ordering::Relaxed);
    }
    false
}

/// The kernel resumes a thread it preempted, unless the thread's handler
/// undid the preemption first.
fn kernel_resume(cb: &ContextBlock) {
    let _ = cb.transition(
        ThreadState::Preempted,
        ThreadState::Preemptable,
        Actor::Kernel,
    );
}

/// The preemption signal arriving at this point of the owner: its handler's
/// step; a preemption that stands stops the thread until the kernel resumes it.
/// Returns the verdict.
fn signal_arrives(cb: &ContextBlock) -> SignalVerdict {
    let v = cb.on_preemption_signal();
    if v == SignalVerdict::Stop {
        while cb.state() == ThreadState::Preempted {
            thread::yield_now();
        }
    }
    v
}

/// The owner is never stopped inside its no-preempt section, whatever the
/// kernel decided and whenever its signal arrives (before the section, inside
/// it, after it), and ends `Preemptable` at depth 0.
#[test]
fn owner_section_vs_kernel() {
    loom::model(|| {
        let cb = Arc::new(ContextBlock::new());
        let warned = Arc::new(AtomicBool::new(false));
        let owner = {
            let cb = cb.clone();
            thread::spawn(move || {
                signal_arrives(&cb);
                cb.request_no_preempt();
                assert!(cb.no_preempt_in_force());
                assert_ne!(signal_arrives(&cb), SignalVerdict::Stop, "stopped inside");
                assert_ne!(signal_arrives(&cb), SignalVerdict::Stop, "stopped inside");
                let _must_yield = cb.release_no_preempt();
                signal_arrives(&cb);
                assert_eq!(cb.depth(), 0);
            })
        };
        // Kernel: one scheduling decision, then resume if it preempted.
        if kernel_tick(&cb, &warned) {
            kernel_resume(&cb);
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
        let preempted = cb.preempt_unless_requested();
        let handed = peer.join().unwrap();
        match (preempted, handed) {
            (true, false) => assert_eq!(cb.state(), ThreadState::Preempted),
            (false, true) => assert_eq!(cb.state(), ThreadState::OtherUnpreemptable),
            other => panic!("both or neither won the state word: {other:?}"),
        }
    });
}

/// The owner's request, pause and resume race a hand-off: they never touch the
/// state word, so a running waiter is always handed the lock, stays
/// `OtherUnpreemptable` until its outermost release, and is `Preemptable` after.
#[test]
fn request_vs_handoff() {
    loom::model(|| {
        let cb = Arc::new(ContextBlock::new());
        let peer = {
            let cb = cb.clone();
            thread::spawn(move || cb.make_other_unpreemptable())
        };
        cb.request_no_preempt();
        let paused = cb.pause_no_preempt();
        if paused {
            cb.resume_no_preempt();
        }
        let handed = peer.join().unwrap();
        assert!(handed, "a running waiter can always be handed the lock");
        assert_eq!(cb.state(), ThreadState::OtherUnpreemptable);
        let _ = cb.release_no_preempt();
        assert_eq!(cb.state(), ThreadState::Preemptable);
        assert_eq!(cb.depth(), 0);
    });
}

/// A waiter with its request paused (Smart-Q's wait) resumes it to claim the
/// lock, while the kernel decides on the paused word and a releaser hands it
/// the lock: a decision that raced the resume is undone by the handler (never
/// a stop after the resume), a hand-off wins only a running waiter, and the
/// waiter ends `Preemptable` at depth 0.
///
/// Explored within three preemptions: 2 s, where unbounded it took 108 s on
/// the 2-core machine. `LOOM_MAX_PREEMPTIONS` overrides the bound.
#[test]
fn paused_waiter_vs_kernel_and_handoff() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(
        std::env::var("LOOM_MAX_PREEMPTIONS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(3),
    );
    b.check(|| {
        let cb = Arc::new(ContextBlock::new());
        let warned = Arc::new(AtomicBool::new(false));
        let peer = {
            let cb = cb.clone();
            thread::spawn(move || cb.make_other_unpreemptable())
        };
        let owner = {
            let cb = cb.clone();
            thread::spawn(move || {
                cb.request_no_preempt();
                if cb.pause_no_preempt() {
                    // Waiting: a preemption now stands.
                    signal_arrives(&cb);
                    cb.resume_no_preempt();
                }
                assert_ne!(signal_arrives(&cb), SignalVerdict::Stop, "stopped inside");
                let _must_yield = cb.release_no_preempt();
                signal_arrives(&cb);
            })
        };
        if kernel_tick(&cb, &warned) {
            kernel_resume(&cb);
        }
        let _handed = peer.join().unwrap();
        owner.join().unwrap();
        assert_eq!(cb.depth(), 0);
        // A hand-off that came after the release lasts until the next release.
        let s = cb.state();
        assert!(
            s == ThreadState::Preemptable || s == ThreadState::OtherUnpreemptable,
            "{s:?}"
        );
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

/// Rings `word` as a doorbell does: change it, then wake its sleepers.
fn ring(word: &mpsync::sync::AtomicU32) {
    word.fetch_add(1, mpsync::sync::Ordering::Release);
    mpsync::sched::unpark_shared_all(word);
}

/// A sleeper on two words waits, with no timeout, for the ring of each in
/// turn (it acts twice: its second sleep expects the first word's new value),
/// while two ringers ring one word each. A ring the sleeper misses leaves it
/// parked for ever: a deadlock loom reports.
#[test]
fn park_shared_any_never_misses_a_ring() {
    use mpsync::sched::park_shared_any;
    use mpsync::sync::{AtomicU32, Ordering};
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| {
        let words = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
        let ringers: Vec<_> = (0..2)
            .map(|i| {
                let words = words.clone();
                thread::spawn(move || ring(&words[i]))
            })
            .collect();
        loop {
            let (a, b) = (
                words[0].load(Ordering::Acquire),
                words[1].load(Ordering::Acquire),
            );
            if a == 1 && b == 1 {
                break;
            }
            let _ = park_shared_any(&[(&words[0], a), (&words[1], b)], None);
        }
        for r in ringers {
            r.join().unwrap();
        }
    });
}
