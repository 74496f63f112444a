//! `ClhTp`'s native waiting without `sched_yield` (issue 13 §2;
//! lock/clh_tp.rs, "When a waiter stops spinning"): a waiter that stops
//! spinning withdraws its node first (the timed waiter's WAITING → ABANDONED
//! CAS), naps, and enqueues again — so the lock never waits for a sleeping
//! thread — with the kernel's answers and with heartbeats only. The heartbeat
//! trigger is forced here, with the kernel's answers switched off (CPU
//! pressure unknown): the waiter must reach `clh_tp.nap`, where a yielding
//! waiter would keep its place and never get there. The kernel's trigger (a
//! preempted holder) is a unit test in `lock/clh_tp.rs`, and is seen here
//! where eBPF answers.
//!
//! Its own test binary: the test switches process-wide settings (the kernel's
//! answers, the heartbeat threshold). Nothing here asserts speed; every wait
//! is bounded with a message.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex as StdMutex};
use std::thread;
use std::time::{Duration, Instant};

use common::ebpf::{OnDrop, kernel_answers, with_contended_victim};
use mpsync::lock::ClhTp;
use mpsync::lock::Mutex;
use mpsync::sched::stall::{self, Trap};
use mpsync::sched::{self, native};

/// Generous on a loaded 2-core machine (the chaos build runs many times
/// slower); the events waited for take microseconds when all goes well.
const STUCK: Duration = Duration::from_secs(60);

/// The test changes process-wide settings: one at a time (should another
/// test join this binary).
static SERIAL: StdMutex<()> = StdMutex::new(());

/// One round: this thread holds the lock; a waiter queues behind it and, with
/// the kernel's answers off, withdraws after the heartbeat threshold (1 s here:
/// nothing moved ahead of it, CPU pressure unknown): it is stopped at
/// `clh_tp.nap`, its node withdrawn, while a keeper keeps its heartbeat fresh
/// (so a successor judging it by heartbeats does not take it for preempted;
/// the 1 s threshold leaves the keeper ample slack on a loaded machine). The
/// holder releases. With `probe`, another thread must get the lock while the
/// napper is still stopped (a napper whose node still waited in the queue
/// would hold it up forever), and `is_locked` must read free after it. Then
/// the napper goes on: it must get the lock after its nap.
fn napper_round(probe: bool) {
    let m = Arc::new(Mutex::<ClhTp, u64>::new(0));
    let g = m.lock();
    let (id_tx, id_rx) = channel();
    let (go_tx, go_rx) = channel::<()>();
    let (done_tx, done_rx) = channel();
    let w = m.clone();
    thread::spawn(move || {
        let cb = sched::current();
        id_tx.send((cb.id(), cb)).unwrap();
        go_rx.recv().unwrap(); // the trap is armed
        *w.lock() += 1;
        done_tx.send(()).unwrap();
    });
    let (id, cb) = id_rx.recv().unwrap();
    let trap = Trap::at(stall::CLH_TP_NAP).thread(id).arm();
    go_tx.send(()).unwrap();
    trap.wait_hit(STUCK).unwrap_or_else(|e| {
        panic!("the waiter never withdrew to nap behind a holder that kept the lock: {e:?}")
    });
    let stop = Arc::new(AtomicBool::new(false));
    let (kept_tx, kept_rx) = channel();
    let keeper = {
        let stop = stop.clone();
        thread::spawn(move || {
            cb.publish_heartbeat();
            kept_tx.send(()).unwrap();
            while !stop.load(Ordering::Relaxed) {
                cb.publish_heartbeat();
                std::hint::spin_loop();
            }
        })
    };
    kept_rx.recv().unwrap();
    drop(g);
    if probe {
        let p = m.clone();
        let got = thread::spawn(move || {
            p.try_lock_for(Duration::from_secs(20))
                .map(|mut g| *g += 10)
                .is_some()
        })
        .join()
        .unwrap();
        assert!(
            got,
            "the lock waited 20 s for a waiter that had withdrawn to nap (stopped before its nap)"
        );
        assert!(
            !m.is_locked(),
            "released behind a withdrawn napper's node, but reads held"
        );
    }
    stop.store(true, Ordering::Relaxed);
    keeper.join().unwrap();
    trap.release();
    done_rx
        .recv_timeout(STUCK)
        .expect("the napper never got the lock after its nap (released long before)");
    assert!(!m.is_locked(), "lock left held");
    assert_eq!(*m.lock(), 1 + if probe { 10 } else { 0 });
}

/// `ClhTp` with heartbeats only (the kernel's answers switched off) withdraws
/// and naps past the heartbeat threshold instead of yielding in place. Twice:
/// with a probe (the lock does not wait for the napper), and without (the
/// napper enqueues again behind its own withdrawn node, unlinks it and takes
/// the lock released behind it).
#[test]
fn a_withdrawn_napper_never_holds_up_the_lock() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let was = native::set_kernel_answers(false);
    let threshold = native::heartbeat_threshold();
    native::set_heartbeat_threshold(Duration::from_secs(1));
    let _restore = OnDrop(move || {
        native::set_kernel_answers(was);
        native::set_heartbeat_threshold(threshold);
    });
    napper_round(true);
    napper_round(false);
}

/// `ClhTp` waits the nap way also where the kernel answers: a waiter behind a
/// holder that the kernel reports preempted (it shares its CPU with a
/// CPU-bound competitor, [`with_contended_victim`]) withdraws to nap — it
/// reaches `clh_tp.nap` — instead of calling `sched_yield`.
#[test]
fn with_the_kernels_answers_clh_tp_naps_behind_a_preempted_holder() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !kernel_answers("with_the_kernels_answers_clh_tp_naps_behind_a_preempted_holder") {
        return;
    }
    let m = Mutex::<ClhTp, u64>::new(0);
    // The victim holds the lock 500 µs at a time, preempted about half the time.
    let hold = || {
        let mut g = m.lock();
        *g += 1;
        let t = Instant::now();
        while t.elapsed() < Duration::from_micros(500) {
            std::hint::spin_loop();
        }
    };
    let seen = with_contended_victim(hold, |_victim, stop| {
        let (id_tx, id_rx) = channel();
        let (go_tx, go_rx) = channel::<()>();
        let m = &m;
        thread::scope(|s| {
            s.spawn(move || {
                id_tx.send(sched::current().id()).unwrap();
                go_rx.recv().unwrap();
                while !stop.load(Ordering::Relaxed) {
                    *m.lock() += 1;
                }
            });
            let trap = Trap::at(stall::CLH_TP_NAP)
                .thread(id_rx.recv().unwrap())
                .arm();
            go_tx.send(()).unwrap();
            let hit = trap.wait_hit(Duration::from_secs(20));
            // Let the waiter and the victim finish whatever happened.
            stop.store(true, Ordering::Relaxed);
            trap.release();
            hit
        })
    });
    if let Some(hit) = seen {
        hit.unwrap_or_else(|e| {
            panic!(
                "in 20 s, a ClhTp waiter behind a holder sharing its CPU with a competitor never withdrew to nap with the kernel's answers on: {e:?}"
            )
        });
    }
}
