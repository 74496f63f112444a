//! Loom models of the lock protocols: TAS, TAS-B, the futex Native lock, the
//! parking locks (spin-then-park, bounded-steal: under loom the futex is modelled
//! strictly — a parked thread sleeps until a wake on its word picks it — so a
//! lost wake-up is a deadlock loom reports), and the no-preempt wrapper with a
//! "kernel" thread racing to preempt the holder.
//!
//! Every lock is modelled with its full `lock` (spinning waiters yield to the
//! model through `sync::spin_loop`), with `try_lock` and a bounded number of
//! attempts (every success exclusive and counted), and with each of two threads
//! acquiring *twice* (`acquire_twice`): a second holder, and a reused queue node,
//! only become observable when a thread comes back. (Loom 0.7.2 mis-models
//! `swap`; `mpsync::sync` works around it under `cfg(loom)`.)
//!
//! What the models cannot see: a thread stalled across a whole patience wait.
//! Under loom a `Patience` is three checks with a model yield each, and loom
//! runs every other runnable thread at a yield (and never re-reads a value seen
//! before one), so a waiter delayed between reading an offer and claiming it is
//! always back before the releaser withdraws (Ticket-np claiming by swap instead
//! of CAS passes here). The 100 ns-patience tortures of `tests/locks.rs`, in
//! the normal and the chaos build, cover those.
//!
//! The models that lock twice, and the longest ones, set their own preemption
//! bound (2–4), so the file runs the same with or without `LOOM_MAX_PREEMPTIONS`:
//! `RUSTFLAGS="--cfg loom" cargo test -p mpsync --release --target-dir target/loom --test loom_locks -- --test-threads=1`
#![cfg(loom)]

use lock_api::RawMutex;
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;
use mpsync::lock::{BoundedSteal, Native, Np, Queued, Tas, TasB};
use mpsync::sched::{self, Actor, ThreadState};

/// Two threads increment a loom-tracked cell under the lock: loom reports any
/// unsynchronized access as a data race, and the final value checks exclusion.
fn two_threads_exclusive<L: RawMutex + Send + Sync + 'static>(make: fn() -> L) {
    loom::model(move || {
        let shared = Arc::new((make(), UnsafeCell::new(0u32)));
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let s = shared.clone();
                thread::spawn(move || {
                    let g = s.0.lock();
                    // SAFETY: the lock is held.
                    s.1.with_mut(|p| unsafe { *p += 1 });
                    // SAFETY: `g` came from this lock on this thread.
                    unsafe { s.0.unlock(g) };
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        // SAFETY: all threads joined.
        assert_eq!(shared.1.with(|p| unsafe { *p }), 2);
    });
}

/// As `two_threads_exclusive`, within `preemptions` preemptions: the skipping
/// queues' park/grant protocol (issue 13 §2) takes minutes unbounded, its
/// state space grows about 4× per preemption (bound 3: seconds).
fn two_threads_exclusive_bounded<L: RawMutex + Send + Sync + 'static>(
    make: fn() -> L,
    preemptions: usize,
) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.check(move || {
        let shared = Arc::new((make(), UnsafeCell::new(0u32)));
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let s = shared.clone();
                thread::spawn(move || {
                    let g = s.0.lock();
                    // SAFETY: the lock is held.
                    s.1.with_mut(|p| unsafe { *p += 1 });
                    // SAFETY: `g` came from this lock on this thread.
                    unsafe { s.0.unlock(g) };
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        // SAFETY: all threads joined.
        assert_eq!(shared.1.with(|p| unsafe { *p }), 2);
    });
}

/// Two threads each make up to two acquire attempts; every success is exclusive
/// (loom flags a racing access to the cell) and is counted.
fn two_threads_bounded_attempts<L: RawMutex + Send + Sync + 'static>(make: fn() -> L) {
    use loom::sync::atomic::{AtomicU32, Ordering};
    loom::model(move || {
        let shared = Arc::new((make(), UnsafeCell::new(0u32), AtomicU32::new(0)));
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let s = shared.clone();
                thread::spawn(move || {
                    for _ in 0..2 {
                        if let Some(g) = s.0.try_lock() {
                            // SAFETY: the lock is held.
                            s.1.with_mut(|p| unsafe { *p += 1 });
                            s.2.fetch_add(1, Ordering::Relaxed);
                            // SAFETY: `g` came from this lock on this thread.
                            unsafe { s.0.unlock(g) };
                            return;
                        }
                        thread::yield_now();
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        // At least one attempt must succeed: the lock was free at the start.
        let wins = shared.2.load(Ordering::Relaxed);
        assert!(wins >= 1);
        // SAFETY: all threads joined.
        assert_eq!(shared.1.with(|p| unsafe { *p }), wins);
        // The lock is free again (an RMW reads the latest value).
        let g = shared.0.try_lock().expect("lock left held");
        // SAFETY: acquired just above on this thread.
        unsafe { shared.0.unlock(g) };
    });
}

/// `threads` threads each acquire the lock twice (lock, unlock, lock again),
/// exploring every interleaving with at most `preemptions` preemptions. A
/// second holder only becomes observable when a thread comes back (a releaser
/// still busy handing over while its successor already holds), and a reused
/// queue node only when its owner enqueues it again: models in which each thread
/// locks once cannot see either. Loom flags overlapping accesses to the cell;
/// the count checks that no critical section was lost.
fn acquire_twice<L: RawMutex + Send + Sync + 'static>(
    make: fn() -> L,
    threads: usize,
    preemptions: usize,
) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.check(move || {
        let shared = Arc::new((make(), UnsafeCell::new(0u32)));
        let ts: Vec<_> = (0..threads)
            .map(|_| {
                let s = shared.clone();
                thread::spawn(move || {
                    for _ in 0..2 {
                        let g = s.0.lock();
                        // SAFETY: the lock is held.
                        s.1.with_mut(|p| unsafe { *p += 1 });
                        // SAFETY: `g` came from this lock on this thread.
                        unsafe { s.0.unlock(g) };
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        // SAFETY: all threads joined.
        assert_eq!(shared.1.with(|p| unsafe { *p }), 2 * threads as u32);
    });
}

#[test]
fn tas_mutual_exclusion() {
    two_threads_bounded_attempts(Tas::new);
}

#[test]
fn tas_b_mutual_exclusion() {
    two_threads_bounded_attempts(TasB::new);
}

#[test]
fn native_mutual_exclusion_and_no_lost_wakeup() {
    two_threads_exclusive(Native::new);
}

#[test]
fn np_tas_b_mutual_exclusion() {
    two_threads_bounded_attempts(|| Np::new(TasB::new()));
}

#[test]
fn tas_b_full_lock() {
    two_threads_exclusive(TasB::new);
}

#[test]
fn tas_full_lock() {
    two_threads_exclusive(Tas::new);
}

/// The holder of an `Np` lock is never stopped by a kernel that preempts on its
/// request word's hint (the handler undoes a decision that raced the request;
/// the kernel may only warn it), and it ends `Preemptable` at depth 0.
#[test]
fn np_holder_is_not_preempted_only_warned() {
    loom::model(|| {
        let lock = Arc::new(Np::new(TasB::new()));
        let (tx, rx) = loom::sync::mpsc::channel();
        let l = lock.clone();
        let holder = thread::spawn(move || {
            let cb = sched::current();
            tx.send(cb as *const _ as usize).unwrap();
            let g = l.lock();
            // The preemption signal arrives while the lock is held: its
            // handler (a step of this thread here) never stops the holder.
            assert!(cb.no_preempt_in_force());
            assert_ne!(cb.on_preemption_signal(), sched::SignalVerdict::Stop);
            // SAFETY: `g` came from this lock on this thread.
            unsafe { l.unlock(g) };
            assert_eq!(cb.depth(), 0);
            // ... or after: then a preemption stands until the kernel resumes.
            if cb.on_preemption_signal() == sched::SignalVerdict::Stop {
                while cb.state() == ThreadState::Preempted {
                    thread::yield_now();
                }
            }
        });
        // The "kernel": try once to preempt the holder (reading its request
        // word as a hint), resume it if it succeeded and was not undone.
        // SAFETY: context blocks are leaked and never freed (registry contract).
        let cb: &'static sched::ContextBlock =
            unsafe { &*(rx.recv().unwrap() as *const sched::ContextBlock) };
        if cb.preempt_unless_requested() {
            let _ = cb.transition(
                ThreadState::Preempted,
                ThreadState::Preemptable,
                Actor::Kernel,
            );
        }
        holder.join().unwrap();
        assert_eq!(cb.state(), ThreadState::Preemptable);
    });
}

#[test]
fn queued_full_lock() {
    two_threads_exclusive(Queued::new);
}

#[test]
fn queued_try_lock() {
    two_threads_bounded_attempts(Queued::new);
}

use mpsync::lock::{
    AndersonN, Clh, ClhTp, McsTp, QueuedHandshaking, SmartQ, SpinThenPark, Ticket, TicketNp,
};

#[test]
fn ticket_full_lock() {
    two_threads_exclusive(Ticket::new);
}

#[test]
fn ticket_try_lock() {
    two_threads_bounded_attempts(Ticket::new);
}

/// Ticket-np's offer / claim / withdraw race: under loom a releaser's patience is
/// three checks, so the model explores withdrawing an offer the waiter is about
/// to claim, and the waiter re-taking a number after a withdrawal. Bound 3:
/// unbounded it took ~180 s of CI's loom step; its planted bug (the offer's
/// Release weakened to Relaxed) is caught within 3 preemptions.
#[test]
fn ticket_np_handoff_races() {
    two_threads_exclusive_bounded(TicketNp::new, 3);
}

#[test]
fn ticket_np_try_lock() {
    two_threads_bounded_attempts(TicketNp::new);
}

#[test]
fn anderson_full_lock() {
    two_threads_exclusive(AndersonN::<2>::new);
}

#[test]
fn clh_full_lock() {
    two_threads_exclusive(Clh::new);
}

#[test]
fn clh_try_lock() {
    two_threads_bounded_attempts(Clh::new);
}

/// Spin-then-park: under loom the patience runs out after three checks, so the
/// parking path (announce CONTENDED, park, unpark on release) is explored.
#[test]
fn spin_then_park_no_lost_wakeup() {
    two_threads_exclusive(SpinThenPark::new);
}

/// Queued-Handshaking: the releaser's offer, its rescinding swap and the waiter's
/// acknowledging swap race in every order (patience = three checks under loom).
#[test]
fn handshaking_offer_vs_ack() {
    two_threads_exclusive_bounded(QueuedHandshaking::new, 3);
}

#[test]
fn mcs_tp_full_lock() {
    two_threads_exclusive_bounded(McsTp::new, 3);
}

/// Smart-Q with a "kernel" that preempts the waiter (and resumes it) at any point:
/// the releaser's CAS to OtherUnpreemptable races the kernel's CAS to Preempted;
/// a waiter found preempted is skipped (FAILURE) and must re-enqueue and still
/// get the lock exactly once. (Unbounded, this model took 108 s with loom's own
/// `AtomicPtr::swap` and over 5 min with the CAS-loop swap of `sync`: bounded to
/// 4 preemptions, it takes seconds.)
#[test]
fn smart_q_handoff_vs_preemption() {
    smart_q_vs_preemption(1, 2);
}

/// As `smart_q_handoff_vs_preemption`, each thread acquiring twice: a skipped
/// waiter re-enqueues the same node, and a thread's second acquisition reuses
/// the node of its first — the reuse the FAILURE-after-successor-known rule
/// (module doc of `skipq`) is about.
#[test]
fn smart_q_twice_vs_preemption() {
    smart_q_vs_preemption(2, 1);
}

fn smart_q_vs_preemption(rounds: u32, preemptions: usize) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.check(move || {
        let shared = Arc::new((SmartQ::new(), UnsafeCell::new(0u32)));
        let (tx, rx) = loom::sync::mpsc::channel();
        let ts: Vec<_> = (0..2)
            .map(|i| {
                let s = shared.clone();
                let tx = tx.clone();
                thread::spawn(move || {
                    if i == 1 {
                        tx.send(sched::current() as *const _ as usize).unwrap();
                    }
                    for _ in 0..rounds {
                        let g = s.0.lock();
                        // SAFETY: the lock is held.
                        s.1.with_mut(|p| unsafe { *p += 1 });
                        // SAFETY: `g` came from this lock on this thread.
                        unsafe { s.0.unlock(g) };
                    }
                })
            })
            .collect();
        // SAFETY: context blocks are never freed (registry contract).
        let cb: &'static sched::ContextBlock =
            unsafe { &*(rx.recv().unwrap() as *const sched::ContextBlock) };
        if cb
            .transition(
                ThreadState::Preemptable,
                ThreadState::Preempted,
                Actor::Kernel,
            )
            .is_ok()
        {
            cb.transition(
                ThreadState::Preempted,
                ThreadState::Preemptable,
                Actor::Kernel,
            )
            .unwrap();
        }
        for t in ts {
            t.join().unwrap();
        }
        // SAFETY: all threads joined.
        assert_eq!(shared.1.with(|p| unsafe { *p }), 2 * rounds);
    });
}

#[test]
fn clh_tp_full_lock() {
    two_threads_exclusive(ClhTp::new);
}

#[test]
fn clh_tp_try_lock() {
    two_threads_bounded_attempts(ClhTp::new);
}

/// CLH-TP's removal race: the main thread holds the lock while waiters W and S
/// queue behind it in either order. W's context block says `Preempted` from
/// before it enqueues until after its critical section (the "kernel" preempted it
/// as it queued; the thread still runs in the model, as a thread does when it is
/// scheduled again). If S queues behind W, S may remove W (CAS WAITING → REMOVED)
/// while W takes the lock from the released holder (CAS WAITING → HOLDING): exactly
/// one side wins, a removed W enqueues again, and every thread gets the lock
/// exactly once, exclusively (loom checks the cell's accesses for races).
#[test]
fn clh_tp_removal_vs_handoff() {
    // Executions in which W was removed (std atomics: outside the model).
    static REMOVALS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(4);
    b.check(|| {
        let shared = Arc::new((ClhTp::new(), UnsafeCell::new(0u32)));
        let g = shared.0.lock();
        let ts: Vec<_> = (0..2)
            .map(|i| {
                let s = shared.clone();
                thread::spawn(move || {
                    let cb = sched::current();
                    if i == 0 {
                        cb.transition(
                            ThreadState::Preemptable,
                            ThreadState::Preempted,
                            Actor::Kernel,
                        )
                        .unwrap();
                    }
                    let g = s.0.lock();
                    // SAFETY: the lock is held.
                    s.1.with_mut(|p| unsafe { *p += 1 });
                    if i == 0 {
                        cb.transition(
                            ThreadState::Preempted,
                            ThreadState::Preemptable,
                            Actor::Kernel,
                        )
                        .unwrap();
                    }
                    // SAFETY: `g` came from this lock on this thread.
                    unsafe { s.0.unlock(g) };
                })
            })
            .collect();
        // SAFETY: the lock is held by this thread.
        shared.1.with_mut(|p| unsafe { *p += 1 });
        // SAFETY: `g` came from this lock on this thread.
        unsafe { shared.0.unlock(g) };
        for t in ts {
            t.join().unwrap();
        }
        // SAFETY: all threads joined.
        assert_eq!(shared.1.with(|p| unsafe { *p }), 3);
        if shared.0.removed() > 0 {
            REMOVALS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    // The model must have explored the race it is about.
    let removals = REMOVALS.load(std::sync::atomic::Ordering::Relaxed);
    assert!(removals > 0, "no explored execution removed W");
    println!("clh_tp_removal_vs_handoff: {removals} executions removed W");
}

/// Ticket-np, each of two threads locking twice: finds the releaser that
/// re-stored a withdrawn offer over its successor's fresh claim (A withdraws
/// B's number, B retakes the next one and claims it, A's next pass erased the
/// claim and A, back for its second acquisition, got in beside B).
#[test]
fn ticket_np_twice() {
    acquire_twice(TicketNp::new, 2, 3);
}

// Every lock, each of two threads acquiring twice (see `acquire_twice`). The
// preemption bound of each is the largest that keeps it to seconds.
macro_rules! twice {
    ($($name:ident: $make:expr, $bound:expr;)*) => {$(
        #[test]
        fn $name() {
            acquire_twice($make, 2, $bound);
        }
    )*};
}

twice! {
    tas_twice: Tas::new, 3;
    tas_b_twice: TasB::new, 3;
    native_twice: Native::new, 3;
    np_tas_b_twice: || Np::new(TasB::new()), 3;
    ticket_twice: Ticket::new, 3;
    anderson_twice: AndersonN::<2>::new, 3;
    queued_twice: Queued::new, 3;
    clh_twice: Clh::new, 3;
    spin_then_park_twice: SpinThenPark::new, 3;
    handshaking_twice: QueuedHandshaking::new, 2;
    smart_q_twice: SmartQ::new, 2;
    mcs_tp_twice: McsTp::new, 2;
    clh_tp_twice: ClhTp::new, 3;
}

/// Bounded-steal, two threads: the steal, the head's park on the word
/// (HEAD_PARKED) and the releaser's wake race in every order. The futex is
/// modelled strictly under loom (a parked thread sleeps until a wake picks it),
/// so a lost wake-up is a deadlock loom reports.
#[test]
fn bounded_steal_head_park_vs_unlock() {
    two_threads_exclusive(BoundedSteal::new);
}

/// Bounded-steal, each of two threads acquiring twice: a node recycled from the
/// first acquisition is queued again while its old successor may still be
/// leaving.
#[test]
fn bounded_steal_twice() {
    acquire_twice(BoundedSteal::new, 2, 2);
}

/// Bounded-steal with a steal budget of one, each of two threads acquiring
/// twice: every unlock ends a turn, and when the other is queued it is a fair
/// unlock (NO_STEAL for the queue head) — the turn that keeps the lock fair —
/// in every order with the other's steal, queueing, park and wake.
#[test]
fn bounded_steal_budget_one_twice() {
    acquire_twice(|| BoundedSteal::new().with_steal_budget(1).unwrap(), 2, 2);
}

/// Bounded-steal, three threads: the main thread holds the lock while two
/// others queue, so one of them waits *behind* the head — it announces that it
/// sleeps (SLEEPING) and sleeps on its wake word while the head takes the lock
/// and makes it head (the swap to HEAD, then `sched::wake`). Every order of
/// the announcement, the swap and the wake: no lost wake-up (loom would report
/// the sleeper deadlocked), exclusion, and every thread gets the lock once.
#[test]
fn bounded_steal_wake_one_step_ahead() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let shared = Arc::new((BoundedSteal::new(), UnsafeCell::new(0u32)));
        let g = shared.0.lock();
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let s = shared.clone();
                thread::spawn(move || {
                    let g = s.0.lock();
                    // SAFETY: the lock is held.
                    s.1.with_mut(|p| unsafe { *p += 1 });
                    // SAFETY: `g` came from this lock on this thread.
                    unsafe { s.0.unlock(g) };
                })
            })
            .collect();
        // SAFETY: the lock is held.
        shared.1.with_mut(|p| unsafe { *p += 1 });
        // SAFETY: `g` came from this lock on this thread.
        unsafe { shared.0.unlock(g) };
        for t in ts {
            t.join().unwrap();
        }
        // SAFETY: all threads joined.
        assert_eq!(shared.1.with(|p| unsafe { *p }), 3);
    });
}

/// The skipping queue's park/grant protocol (issue 13 §2), three threads: the
/// main thread holds the lock while W1 and W2 queue behind it and, since a
/// loom `Waiter` advises parking at once, park. The releaser meets parked
/// candidates (wakes them, skips those not back in time) and claims spinning
/// ones by CAS; the new holder wakes its successor one step ahead; a skipped
/// waiter re-enqueues. A lost wake-up is a deadlock (the futex is modelled
/// strictly), a grant to a sleeper one too, and every thread must get the lock
/// exactly once, exclusively. (Bound 2 takes minutes for MCS-TP and Smart-Q.)
fn skipq_park_vs_grant<L: RawMutex + Send + Sync + 'static>(make: fn() -> L, preemptions: usize) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.check(move || {
        let shared = Arc::new((make(), UnsafeCell::new(0u32)));
        let g = shared.0.lock();
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let s = shared.clone();
                thread::spawn(move || {
                    let g = s.0.lock();
                    // SAFETY: the lock is held.
                    s.1.with_mut(|p| unsafe { *p += 1 });
                    // SAFETY: `g` came from this lock on this thread.
                    unsafe { s.0.unlock(g) };
                })
            })
            .collect();
        // SAFETY: the lock is held by this thread.
        shared.1.with_mut(|p| unsafe { *p += 1 });
        // SAFETY: `g` came from this lock on this thread.
        unsafe { shared.0.unlock(g) };
        for t in ts {
            t.join().unwrap();
        }
        // SAFETY: all threads joined.
        assert_eq!(shared.1.with(|p| unsafe { *p }), 3);
    });
}

#[test]
fn skipq_park_vs_grant_mcs_tp() {
    skipq_park_vs_grant(McsTp::new, 1);
}

#[test]
fn skipq_park_vs_grant_smart_q() {
    skipq_park_vs_grant(SmartQ::new, 1);
}

#[test]
fn skipq_park_vs_grant_handshaking() {
    skipq_park_vs_grant(QueuedHandshaking::new, 1);
}
