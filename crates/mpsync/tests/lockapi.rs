//! lock_api completeness (issue 13 §4): the condition variable, fair unlocks and
//! timed acquisitions, under real oversubscription (8 threads on the machine's
//! cores) and, through `.ci/run`, in the chaos build.
//!
//! Every test that could hang on a lost wake-up runs its threads detached and
//! waits for them with a deadline, so a hang fails with a message instead of
//! stalling the suite. Nothing here asserts speed.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, channel};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use lock_api::{MutexGuard, RawMutex, RawMutexTimed};
use mpsync::lock::Mutex;
use mpsync::lock::{
    BoundedSteal, ClhTp, Condvar, McsTp, Native, NativeNp, Np, QueuedHandshaking, QueuedNp, SmartQ,
    SpinThenPark, TasB, TasBNp, Ticket, TicketNp,
};
use mpsync::sched;
use mpsync::sched::emulated::{Emulated, EmulatedConfig};
use mpsync::sched::stall::{self, Trap};

/// How long a test waits for threads that should finish in well under a
/// second before it calls them stuck (generous: the chaos build on a loaded
/// 2-core machine runs many times slower).
const STUCK: Duration = Duration::from_secs(120);

/// Runs `f` on a detached thread and waits for it at most `STUCK`.
fn within_deadline<R: Send + 'static>(what: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(STUCK) {
        Ok(r) => r,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: not finished after {STUCK:?} (a lost wake-up or a lock never released)")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: a thread panicked"),
    }
}

// --- condition variable ----------------------------------------------------

/// A bounded buffer guarded by `Mutex<L, _>`, with two condvars.
struct Buffer<L: RawMutex> {
    state: Mutex<L, (Vec<u64>, usize)>, // (items, producers still running)
    not_empty: Condvar,
    not_full: Condvar,
}

const CAP: usize = 4;

/// 4 producers and 4 consumers move `per_producer` items each through a
/// 4-slot buffer; every item must come out exactly once (sum and count), and
/// everyone must finish (no lost wake-up). `notify_all` for one of the two
/// condvars when `broadcast`.
fn producer_consumer<L: RawMutex + Send + Sync + 'static>(name: &str, broadcast: bool) {
    const PRODUCERS: u64 = 4;
    const CONSUMERS: usize = 4;
    let per_producer = common::sized(3_000, 20);
    let b = Arc::new(Buffer::<L> {
        state: Mutex::new((Vec::new(), PRODUCERS as usize)),
        not_empty: Condvar::new(),
        not_full: Condvar::new(),
    });
    let (count, sum) = within_deadline(name, move || {
        let start = Arc::new(Barrier::new(PRODUCERS as usize + CONSUMERS));
        let mut producers = Vec::new();
        for p in 0..PRODUCERS {
            let (b, start) = (b.clone(), start.clone());
            producers.push(thread::spawn(move || {
                start.wait();
                for i in 0..per_producer {
                    let mut g = b.state.lock();
                    b.not_full.wait_while(&mut g, |s| s.0.len() >= CAP);
                    g.0.push(p * per_producer + i + 1);
                    drop(g);
                    if broadcast {
                        b.not_empty.notify_all();
                    } else {
                        b.not_empty.notify_one();
                    }
                }
                let mut g = b.state.lock();
                g.1 -= 1;
                drop(g);
                b.not_empty.notify_all(); // consumers re-check "done"
            }));
        }
        let mut consumers = Vec::new();
        for _ in 0..CONSUMERS {
            let (b, start) = (b.clone(), start.clone());
            consumers.push(thread::spawn(move || {
                start.wait();
                let (mut n, mut s) = (0u64, 0u64);
                loop {
                    let mut g = b.state.lock();
                    b.not_empty
                        .wait_while(&mut g, |s| s.0.is_empty() && s.1 > 0);
                    let Some(v) = g.0.pop() else {
                        break; // empty and every producer done
                    };
                    drop(g);
                    b.not_full.notify_one();
                    n += 1;
                    s += v;
                }
                (n, s)
            }));
        }
        for p in producers {
            p.join().unwrap();
        }
        consumers
            .into_iter()
            .map(|c| c.join().unwrap())
            .fold((0, 0), |a, c| (a.0 + c.0, a.1 + c.1))
    });
    let total = PRODUCERS * per_producer;
    assert_eq!(count, total, "{name}: items lost or duplicated");
    assert_eq!(sum, total * (total + 1) / 2, "{name}: wrong items came out");
}

#[test]
fn condvar_producer_consumer_native() {
    producer_consumer::<Native>("Native", false);
}

#[test]
fn condvar_producer_consumer_tas_b_np_broadcast() {
    producer_consumer::<TasBNp>("TAS-B-np", true);
}

#[test]
fn condvar_producer_consumer_bounded_steal() {
    producer_consumer::<BoundedSteal>("BoundedSteal", false);
}

#[test]
fn condvar_producer_consumer_smart_q() {
    producer_consumer::<SmartQ>("Smart-Q", false);
}

#[test]
fn condvar_producer_consumer_spin_then_park_broadcast() {
    producer_consumer::<SpinThenPark>("SpinThenPark", true);
}

/// The lost-wake-up window, forced: the waiter is stopped after it released the
/// mutex and before it parks; the notifier changes the condition and notifies
/// right then. The waiter (a plain `wait`, no timeout) must still wake.
fn notify_in_the_wait_window<L: RawMutex + Send + Sync + 'static>(name: &str, all: bool) {
    let shared = Arc::new((Mutex::<L, bool>::new(false), Condvar::new()));
    let (id_tx, id_rx) = channel();
    let s = shared.clone();
    let (done_tx, done_rx) = channel();
    let (go_tx, go_rx) = channel::<()>();
    thread::spawn(move || {
        id_tx.send(sched::current().id()).unwrap();
        go_rx.recv().unwrap(); // the trap is armed
        let mut g = s.0.lock();
        while !*g {
            s.1.wait(&mut g);
        }
        drop(g);
        let _ = done_tx.send(());
    });
    let trap = Trap::at(stall::CONDVAR_WAIT)
        .thread(id_rx.recv().unwrap())
        .arm();
    go_tx.send(()).unwrap();
    trap.wait_hit(STUCK)
        .unwrap_or_else(|e| panic!("{name}: waiter never reached condvar.wait: {e:?}"));
    // The mutex is free now (the waiter released it): take it, set, notify.
    *shared.0.lock() = true;
    if all {
        shared.1.notify_all();
    } else {
        shared.1.notify_one();
    }
    trap.release();
    done_rx.recv_timeout(STUCK).unwrap_or_else(|_| {
        panic!("{name}: a notification made between the waiter's unlock and its park was lost")
    });
}

#[test]
fn condvar_notify_before_park_is_not_lost() {
    notify_in_the_wait_window::<Native>("Native", false);
    notify_in_the_wait_window::<NativeNp>("Native-np", true);
    notify_in_the_wait_window::<QueuedNp>("Queued-np", false);
}

/// A notification made before anyone waits is not stored: a later wait times out.
#[test]
fn condvar_notifications_are_not_stored() {
    let m: Mutex<SpinThenPark, ()> = Mutex::new(());
    let c = Condvar::new();
    c.notify_all();
    c.notify_one();
    let mut g = m.lock();
    assert!(c.wait_timeout(&mut g, Duration::from_millis(5)).timed_out());
}

// --- timed acquisitions ----------------------------------------------------

/// A timed waiter that gives up while the holder is stalled never gets the
/// lock afterwards: it is stopped right where it gives up (stall point
/// `timed_lock.gave_up`), the holder releases, other threads take and release
/// the lock many times; then it returns `None`, and the lock is free.
fn timed_waiter_gives_up<L>(name: &str)
where
    L: RawMutexTimed<Duration = Duration, Instant = Instant> + Send + Sync + 'static,
{
    let m = Arc::new(Mutex::<L, u64>::new(0));
    let holder_go = Arc::new(Barrier::new(2));
    let holding = m.clone();
    let hg = holder_go.clone();
    let (held_tx, held_rx) = channel();
    // The holder: takes the lock and stalls until told to go on.
    let holder = thread::spawn(move || {
        let mut g = holding.lock();
        held_tx.send(()).unwrap();
        hg.wait();
        *g += 1;
    });
    held_rx.recv().unwrap();
    let (id_tx, id_rx) = channel();
    let (res_tx, res_rx) = channel();
    let w = m.clone();
    let (go_tx, go_rx) = channel::<()>();
    thread::spawn(move || {
        id_tx.send(sched::current().id()).unwrap();
        go_rx.recv().unwrap(); // the trap is armed
        let got = w.try_lock_for(Duration::from_millis(2)).map(|mut g| {
            *g += 100;
        });
        res_tx.send(got.is_some()).unwrap();
    });
    let trap = Trap::at(stall::TIMED_GAVE_UP)
        .thread(id_rx.recv().unwrap())
        .arm();
    go_tx.send(()).unwrap();
    trap.wait_hit(STUCK)
        .unwrap_or_else(|e| panic!("{name}: the timed waiter never gave up: {e:?}"));
    // The holder goes on and releases; others use the lock meanwhile.
    holder_go.wait();
    holder.join().unwrap();
    within_deadline(name, {
        let m = m.clone();
        move || {
            let ts: Vec<_> = (0..4)
                .map(|_| {
                    let m = m.clone();
                    thread::spawn(move || {
                        for _ in 0..200 {
                            *m.lock() += 1;
                        }
                    })
                })
                .collect();
            for t in ts {
                t.join().unwrap();
            }
        }
    });
    trap.release();
    let got = res_rx.recv_timeout(STUCK).unwrap();
    assert!(
        !got,
        "{name}: the timed waiter stopped at gave_up still got the lock"
    );
    assert!(
        !m.is_locked(),
        "{name}: the lock stayed held after a timed waiter gave up"
    );
    assert_eq!(*m.lock(), 801, "{name}: lost or extra critical sections");
}

#[test]
fn timed_waiter_that_gave_up_never_gets_the_lock() {
    timed_waiter_gives_up::<Native>("Native");
    timed_waiter_gives_up::<SpinThenPark>("SpinThenPark");
    timed_waiter_gives_up::<BoundedSteal>("BoundedSteal");
    timed_waiter_gives_up::<NativeNp>("Native-np");
    timed_waiter_gives_up::<TasB>("TAS-B");
    timed_waiter_gives_up::<TicketNp>("Ticket-np");
}

/// A timed waiter whose lock is released long before its deadline gets it:
/// the holder keeps the lock 20 ms (the waiter is parked by then), the waiter
/// allows 60 s. A waiter that drops the lock it took when woken (and sleeps
/// on, or gives up holding it) fails here.
fn timed_waiter_gets_a_released_lock<L>(name: &str)
where
    L: RawMutexTimed<Duration = Duration, Instant = Instant> + Send + Sync + 'static,
{
    let m = Arc::new(Mutex::<L, u32>::new(0));
    let m2 = m.clone();
    let got = within_deadline(name, move || {
        let g = m2.lock();
        let (m3, start) = (m2.clone(), Arc::new(Barrier::new(2)));
        let s2 = start.clone();
        let waiter = thread::spawn(move || {
            s2.wait();
            let t = Instant::now();
            let got = m3
                .try_lock_for(Duration::from_secs(60))
                .map(|mut g| *g += 1);
            (got.is_some(), t.elapsed())
        });
        start.wait();
        thread::sleep(Duration::from_millis(20));
        drop(g);
        waiter.join().unwrap()
    });
    assert!(
        got.0,
        "{name}: a timed waiter did not get a lock released 20 ms into its 60 s (gave up after {:?})",
        got.1
    );
    assert!(!m.is_locked(), "{name}: lock left held");
    assert_eq!(*m.lock(), 1);
}

#[test]
fn timed_waiter_gets_a_lock_released_before_its_deadline() {
    timed_waiter_gets_a_released_lock::<Native>("Native");
    timed_waiter_gets_a_released_lock::<SpinThenPark>("SpinThenPark");
    timed_waiter_gets_a_released_lock::<BoundedSteal>("BoundedSteal");
    timed_waiter_gets_a_released_lock::<NativeNp>("Native-np");
    timed_waiter_gets_a_released_lock::<TasBNp>("TAS-B-np");
    timed_waiter_gets_a_released_lock::<SmartQ>("Smart-Q");
    timed_waiter_gets_a_released_lock::<QueuedHandshaking>("Queued-Handshaking");
    timed_waiter_gets_a_released_lock::<McsTp>("MCS-TP");
    timed_waiter_gets_a_released_lock::<TicketNp>("Ticket-np");
    timed_waiter_gets_a_released_lock::<ClhTp>("CLH-TP");
}

/// 8 threads on the machine's cores: half acquire with `lock`, half with short
/// timeouts. Every critical section is exclusive (an in-section flag), every
/// success is counted, and the counter equals the successes; at the end the
/// lock is free. A timed waiter that left the lock held would hang the others
/// (caught by the deadline); one that returned `None` holding it, or `Some`
/// without it, breaks the count or the flag.
fn timed_torture<L>(name: &str)
where
    L: RawMutexTimed<Duration = Duration, Instant = Instant> + Send + Sync + 'static,
{
    let iters = common::sized(4_000, 20);
    let m = Arc::new(Mutex::<L, u64>::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let successes = Arc::new(AtomicU64::new(0));
    let timeouts = Arc::new(AtomicU64::new(0));
    let (m2, inside2, s2, t2) = (
        m.clone(),
        inside.clone(),
        successes.clone(),
        timeouts.clone(),
    );
    within_deadline(name, move || {
        let ts: Vec<_> = (0..8)
            .map(|i| {
                let (m, inside, s, t) = (m2.clone(), inside2.clone(), s2.clone(), t2.clone());
                thread::spawn(move || {
                    for k in 0..iters {
                        let g = if i % 2 == 0 {
                            Some(m.lock())
                        } else {
                            // 1 µs .. 64 µs: many give up under contention.
                            m.try_lock_for(Duration::from_micros(1 << (k % 7)))
                        };
                        let Some(mut g) = g else {
                            t.fetch_add(1, Ordering::Relaxed);
                            continue;
                        };
                        assert!(!inside.swap(true, Ordering::Acquire), "two holders");
                        *g += 1;
                        for _ in 0..(k % 8) {
                            std::hint::spin_loop();
                        }
                        inside.store(false, Ordering::Release);
                        drop(g);
                        s.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
    });
    assert!(!m.is_locked(), "{name}: lock left held");
    assert_eq!(*m.lock(), successes.load(Ordering::Relaxed), "{name}");
    // Not asserted: how many timed out (depends on the machine's load).
    eprintln!(
        "{name}: {} critical sections, {} timed attempts gave up",
        successes.load(Ordering::Relaxed),
        timeouts.load(Ordering::Relaxed)
    );
}

#[test]
fn timed_torture_native() {
    timed_torture::<Native>("Native");
}

#[test]
fn timed_torture_spin_then_park() {
    timed_torture::<SpinThenPark>("SpinThenPark");
}

#[test]
fn timed_torture_bounded_steal() {
    timed_torture::<BoundedSteal>("BoundedSteal");
}

#[test]
fn timed_torture_tas_b() {
    timed_torture::<TasB>("TAS-B");
}

#[test]
fn timed_torture_np_bounded_steal() {
    timed_torture::<Np<BoundedSteal>>("BoundedSteal-np");
}

#[test]
fn timed_torture_smart_q() {
    timed_torture::<SmartQ>("Smart-Q");
}

#[test]
fn timed_torture_handshaking() {
    timed_torture::<QueuedHandshaking>("Queued-Handshaking");
}

#[test]
fn timed_torture_mcs_tp() {
    timed_torture::<McsTp>("MCS-TP");
}

#[test]
fn timed_torture_np_mcs_tp() {
    timed_torture::<Np<McsTp>>("MCS-TP-np");
}

/// Ticket-np's timed takers leave their numbers to be withdrawn (marked
/// departed) among plain takers that claim theirs.
#[test]
fn timed_torture_ticket_np() {
    timed_torture::<TicketNp>("Ticket-np");
}

/// CLH-TP's timed waiters leave their nodes abandoned in the queue, to be
/// unlinked by the waiter behind (or the next arrival); natively its stalled
/// waiters also withdraw to nap (the same CAS) and enqueue again.
#[test]
fn timed_torture_clh_tp() {
    timed_torture::<ClhTp>("CLH-TP");
}

#[test]
fn timed_torture_np_clh_tp() {
    timed_torture::<Np<ClhTp>>("CLH-TP-np");
}

// --- timed acquisition of the self-withdrawing queue locks -----------------

/// Timed waiters queued behind a holder *and* behind plain waiters all time out
/// while the holder keeps the lock (it releases only once every timed waiter
/// has returned), and withdraw without disturbing the queue: the plain waiters
/// queued around them then each get the lock once, and the lock ends free.
fn timed_waiters_withdraw_from_the_queue<L>(name: &str)
where
    L: RawMutexTimed<Duration = Duration, Instant = Instant> + Send + Sync + 'static,
{
    let m = Arc::new(Mutex::<L, u64>::new(0));
    let m2 = m.clone();
    let gave_up = within_deadline(name, move || {
        let g = m2.lock();
        let plain = |m: &Arc<Mutex<L, u64>>| {
            let m = m.clone();
            thread::spawn(move || *m.lock() += 1)
        };
        // Plain waiters first, then timed ones behind them, then more plain
        // ones behind those (the sleeps only order the arrivals; nothing
        // depends on them being long enough).
        let mut ps: Vec<_> = (0..2).map(|_| plain(&m2)).collect();
        thread::sleep(Duration::from_millis(10));
        let timed: Vec<_> = (0..3u64)
            .map(|i| {
                let m = m2.clone();
                thread::spawn(move || {
                    m.try_lock_for(Duration::from_millis(5 + 5 * i))
                        .map(|mut g| *g += 1000)
                        .is_none()
                })
            })
            .collect();
        thread::sleep(Duration::from_millis(10));
        ps.extend((0..2).map(|_| plain(&m2)));
        // The holder keeps the lock until every timed waiter has returned.
        let gave_up = timed
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|&none| none)
            .count();
        drop(g);
        for p in ps {
            p.join().unwrap();
        }
        gave_up
    });
    assert_eq!(
        gave_up, 3,
        "{name}: a timed waiter got a lock its holder never released"
    );
    assert!(!m.is_locked(), "{name}: lock left held");
    assert_eq!(
        *m.lock(),
        4,
        "{name}: the plain waiters did not each get it"
    );
}

#[test]
fn timed_queue_waiters_withdraw() {
    timed_waiters_withdraw_from_the_queue::<SmartQ>("Smart-Q");
    timed_waiters_withdraw_from_the_queue::<QueuedHandshaking>("Queued-Handshaking");
    timed_waiters_withdraw_from_the_queue::<McsTp>("MCS-TP");
    // Numbers, not nodes: the timed takers' numbers come up after the holder
    // releases, and are withdrawn (they are marked departed).
    timed_waiters_withdraw_from_the_queue::<TicketNp>("Ticket-np");
    // Nodes: the plain waiters behind the abandoned ones unlink them.
    timed_waiters_withdraw_from_the_queue::<ClhTp>("CLH-TP");
}

/// The grant arrives exactly as a timed waiter gives up: the waiter is stopped
/// at `timed_lock.gave_up`, right before its withdrawing CAS, while queued
/// behind a holder; a helper keeps the stopped waiter's heartbeat fresh (so
/// that a releaser judging by heartbeats sees it running, and claims it); the
/// holder releases, which grants the lock to the waiter (or skips it, if the
/// releaser judged it stalled or, Handshaking, got no acknowledgement). Then
/// the waiter goes on. Either outcome is correct, but it must be consistent:
/// if the grant won, the waiter returns the guard (and runs its section); if it
/// returns `None`, nobody holds the lock. A waiter that withdrew over a grant
/// leaves the lock held forever, which the bounded `try_lock_for` below
/// reports. Rounds repeat (at most `rounds`) until one saw the grant win.
/// Returns how many rounds the grant won. The waiter's `timeout` is zero
/// where a zero timeout queues (it then gives up at its first look), and a
/// short one for Ticket-np, where a deadline already past takes no number.
fn grant_as_timed_waiter_gives_up<L>(name: &str, rounds: u32, timeout: Duration) -> u32
where
    L: RawMutexTimed<Duration = Duration, Instant = Instant> + Send + Sync + 'static,
{
    let mut won = 0;
    for round in 0..rounds {
        let m = Arc::new(Mutex::<L, u64>::new(0));
        let inside = Arc::new(AtomicBool::new(false));
        let holder_go = Arc::new(Barrier::new(2));
        let (holding, hg, hin) = (m.clone(), holder_go.clone(), inside.clone());
        let (held_tx, held_rx) = channel();
        let holder = thread::spawn(move || {
            let mut g = holding.lock();
            assert!(!hin.swap(true, Ordering::Acquire), "two holders");
            held_tx.send(()).unwrap();
            hg.wait();
            *g += 1;
            hin.store(false, Ordering::Release);
        });
        held_rx.recv().unwrap();
        let (id_tx, id_rx) = channel();
        let (res_tx, res_rx) = channel();
        let (w, win) = (m.clone(), inside.clone());
        let (go_tx, go_rx) = channel::<()>();
        thread::spawn(move || {
            let cb = sched::current();
            id_tx.send((cb.id(), cb)).unwrap();
            go_rx.recv().unwrap(); // the trap is armed
            // A deadline already due: the waiter gives up at its first look,
            // while spinning (WAITING), not after parking (a releaser that
            // finds a parked waiter wakes it and skips it rather than grant).
            let got = w.try_lock_for(timeout).map(|mut g| {
                assert!(!win.swap(true, Ordering::Acquire), "two holders");
                *g += 100;
                win.store(false, Ordering::Release);
            });
            res_tx.send(got.is_some()).unwrap();
        });
        let (id, cb) = id_rx.recv().unwrap();
        let trap = Trap::at(stall::TIMED_GAVE_UP).thread(id).arm();
        go_tx.send(()).unwrap();
        trap.wait_hit(STUCK)
            .unwrap_or_else(|e| panic!("{name}: the timed waiter never gave up: {e:?}"));
        // Keep the stopped waiter looking alive while the holder releases.
        let stop = Arc::new(AtomicBool::new(false));
        let keeper = {
            let stop = stop.clone();
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    cb.publish_heartbeat();
                    std::hint::spin_loop();
                }
            })
        };
        holder_go.wait();
        holder.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        keeper.join().unwrap();
        trap.release();
        let got = res_rx.recv_timeout(STUCK).unwrap_or_else(|_| {
            panic!("{name}: the timed waiter never returned after the trap was released")
        });
        // The lock must be free now (the waiter dropped the guard it got, or
        // holds nothing): a plain thread gets it within a generous bound.
        let probe = m.clone();
        let free = thread::spawn(move || {
            probe
                .try_lock_for(Duration::from_secs(20))
                .map(|mut g| *g += 10)
                .is_some()
        })
        .join()
        .unwrap();
        assert!(
            free,
            "{name}, round {round}: the lock stayed held after the timed waiter returned {}",
            if got { "the guard" } else { "None" }
        );
        assert!(!m.is_locked(), "{name}: lock left held");
        assert_eq!(
            *m.lock(),
            1 + 10 + if got { 100 } else { 0 },
            "{name}: lost or extra critical sections (waiter got: {got})"
        );
        if got {
            won += 1;
            break;
        }
    }
    eprintln!("{name}: the grant won the race in {won} round(s)");
    won
}

#[test]
fn timed_queue_waiter_grant_races_withdrawal() {
    grant_as_timed_waiter_gives_up::<SmartQ>("Smart-Q", 20, Duration::ZERO);
    grant_as_timed_waiter_gives_up::<McsTp>("MCS-TP", 20, Duration::ZERO);
    // The releaser waits for an acknowledgement the stopped waiter cannot
    // give: it rescinds, and the waiter finds FAILURE.
    grant_as_timed_waiter_gives_up::<QueuedHandshaking>("Queued-Handshaking", 3, Duration::ZERO);
    // The releaser offers the stopped waiter's number and withdraws it after
    // its patience (20 µs; at once where the kernel says the waiter sleeps in
    // the trap): the waiter then finds it withdrawn. The late win, with a
    // patience that outlasts the stop, is `ticket.rs`'s unit test
    // `a_timed_taker_that_sees_its_offer_on_the_way_out_claims_it`. A zero
    // timeout takes no number (it is a `try_lock`): 1 ms, which passes
    // while the taker waits behind the holder.
    grant_as_timed_waiter_gives_up::<TicketNp>("Ticket-np", 3, Duration::from_millis(1));
    // CLH-TP: the lock reaches a waiter only through its own CAS, so the
    // stopped waiter gives up and the release lands behind its abandoned node
    // (the queue's tail): the probe must unlink it and get the lock, and
    // `is_locked` must read the lock as free.
    grant_as_timed_waiter_gives_up::<ClhTp>("CLH-TP", 3, Duration::ZERO);
}

/// CLH-TP: timed waiters that gave up leave their nodes in the queue, the last
/// one as the tail. While the holder keeps the lock, `is_locked` reads held and
/// `try_lock` fails; once it releases, the lock is free behind the abandoned
/// nodes: `is_locked` reads free and `try_lock` takes it (unlinking them).
#[test]
fn clh_tp_abandoned_tail_reads_free() {
    let m = Arc::new(Mutex::<ClhTp, u64>::new(0));
    let g = m.lock();
    let w = m.clone();
    let gave_up = within_deadline("CLH-TP", move || {
        (0..3)
            .filter(|_| w.try_lock_for(Duration::from_millis(2)).is_none())
            .count()
    });
    assert_eq!(gave_up, 3, "a timed waiter got a lock that was held");
    assert!(
        m.is_locked(),
        "held, behind abandoned nodes, but reads free"
    );
    assert!(m.try_lock().is_none(), "try_lock took a held lock");
    drop(g);
    assert!(
        !m.is_locked(),
        "released behind abandoned nodes, but reads held"
    );
    let mut g = m
        .try_lock()
        .expect("try_lock failed on a lock free behind abandoned nodes");
    *g += 1;
    drop(g);
    assert!(!m.is_locked());
    assert_eq!(*m.lock(), 1);
}

/// Serialises the tests that run the emulated pseudo-scheduler (one at a time
/// per process).
static EMU: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Timed and plain acquisitions under the emulated pseudo-scheduler (MP 3, a
/// short quantum): threads are preempted and warned while they wait and while
/// they hold the lock; exclusion (an in-section flag) and the count hold, and
/// the lock ends free.
fn timed_torture_emulated<L>(name: &str)
where
    L: RawMutexTimed<Duration = Duration, Instant = Instant> + Send + Sync + 'static,
{
    let _serial = EMU.lock().unwrap_or_else(|e| e.into_inner());
    let procs = thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(4) as u32;
    let cfg = EmulatedConfig::new(procs, 3.0)
        .expect("valid config")
        .quantum(Duration::from_millis(2))
        .extension_bound(Duration::from_micros(500))
        .seed(13);
    let emu = Arc::new(Emulated::start(cfg).expect("pseudo-scheduler starts"));
    let iters = common::sized(2_000, 10);
    let m = Arc::new(Mutex::<L, u64>::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let successes = Arc::new(AtomicU64::new(0));
    let timeouts = Arc::new(AtomicU64::new(0));
    let (m2, in2, s2, t2, e2) = (
        m.clone(),
        inside.clone(),
        successes.clone(),
        timeouts.clone(),
        emu.clone(),
    );
    within_deadline(name, move || {
        let ts: Vec<_> = (0..procs * 2)
            .map(|i| {
                let (m, inside, s, t, emu) =
                    (m2.clone(), in2.clone(), s2.clone(), t2.clone(), e2.clone());
                thread::spawn(move || {
                    let _att = emu.attach(i % procs).expect("attach");
                    for k in 0..iters {
                        let g = if i % 2 == 0 {
                            Some(m.lock())
                        } else {
                            m.try_lock_for(Duration::from_micros(1 << (k % 9)))
                        };
                        let Some(mut g) = g else {
                            t.fetch_add(1, Ordering::Relaxed);
                            continue;
                        };
                        assert!(!inside.swap(true, Ordering::Acquire), "two holders");
                        *g += 1;
                        for _ in 0..(k % 16) * 8 {
                            std::hint::spin_loop();
                        }
                        inside.store(false, Ordering::Release);
                        drop(g);
                        s.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
    });
    let emu = Arc::try_unwrap(emu).unwrap_or_else(|_| panic!("{name}: emulator still shared"));
    let stats = emu.stop();
    assert!(!m.is_locked(), "{name}: lock left held");
    assert_eq!(*m.lock(), successes.load(Ordering::Relaxed), "{name}");
    eprintln!(
        "{name} (emulated): {} critical sections, {} timed attempts gave up, {} preemptions, {} warnings",
        successes.load(Ordering::Relaxed),
        timeouts.load(Ordering::Relaxed),
        stats.preemptions,
        stats.warnings
    );
    assert!(
        stats.preemptions + stats.warnings > 0,
        "{name}: the pseudo-scheduler never intervened: {stats:?}"
    );
}

#[test]
fn timed_torture_emulated_smart_q() {
    timed_torture_emulated::<SmartQ>("Smart-Q");
}

#[test]
fn timed_torture_emulated_ticket_np() {
    timed_torture_emulated::<TicketNp>("Ticket-np");
}

#[test]
fn timed_torture_emulated_handshaking() {
    timed_torture_emulated::<QueuedHandshaking>("Queued-Handshaking");
}

#[test]
fn timed_torture_emulated_mcs_tp() {
    timed_torture_emulated::<McsTp>("MCS-TP");
}

#[test]
fn timed_torture_emulated_clh_tp() {
    timed_torture_emulated::<ClhTp>("CLH-TP");
}

// --- fair unlocks ----------------------------------------------------------

/// BoundedSteal's fair unlock, forced: a queue head is stopped after announcing
/// that it parks (stall point `waiter.park`); the holder unlocks fairly and
/// then tries to take the lock again at once: it must not (only the head may),
/// and the head gets the lock once released.
#[test]
fn bounded_steal_fair_unlock_lets_the_head_in() {
    let m = Arc::new(Mutex::<BoundedSteal, Vec<&'static str>>::new(Vec::new()));
    let g = m.lock();
    let (id_tx, id_rx) = channel();
    let (done_tx, done_rx) = channel();
    let head = m.clone();
    let (go_tx, go_rx) = channel::<()>();
    thread::spawn(move || {
        id_tx.send(sched::current().id()).unwrap();
        go_rx.recv().unwrap(); // the trap is armed
        head.lock().push("head");
        done_tx.send(()).unwrap();
    });
    // The head parks once the holder has kept the lock past its patience
    // (50 µs): it stops at waiter.park with HEAD_PARKED announced.
    let trap = Trap::at(stall::WAITER_PARK)
        .thread(id_rx.recv().unwrap())
        .arm();
    go_tx.send(()).unwrap();
    trap.wait_hit(STUCK)
        .unwrap_or_else(|e| panic!("the waiter never announced parking: {e:?}"));
    MutexGuard::unlock_fair(g);
    assert!(
        m.try_lock().is_none(),
        "a fair unlock let the releaser steal the lock past the queue head"
    );
    trap.release();
    done_rx
        .recv_timeout(STUCK)
        .expect("the queue head never got the lock after a fair unlock");
    m.lock().push("releaser");
    assert_eq!(*m.lock(), ["head", "releaser"]);
}

/// `bump` under contention: a holder that bumps until the other threads have
/// each had the lock once never starves them (every lock with RawMutexFair
/// that lets waiters in; run to a deadline).
fn bump_lets_waiters_in<L: lock_api::RawMutexFair + Send + Sync + 'static>(name: &str) {
    let m = Arc::new(Mutex::<L, u32>::new(0));
    let m2 = m.clone();
    within_deadline(name, move || {
        let start = Arc::new(Barrier::new(4));
        let ts: Vec<_> = (0..3)
            .map(|_| {
                let (m, start) = (m2.clone(), start.clone());
                thread::spawn(move || {
                    start.wait();
                    *m.lock() += 1;
                })
            })
            .collect();
        let mut g = m2.lock();
        start.wait();
        while *g < 3 {
            MutexGuard::bump(&mut g);
        }
        drop(g);
        for t in ts {
            t.join().unwrap();
        }
    });
    assert_eq!(*m.lock(), 3, "{name}");
}

#[test]
fn bump_lets_waiters_in_every_fair_lock() {
    bump_lets_waiters_in::<BoundedSteal>("BoundedSteal");
    bump_lets_waiters_in::<Ticket>("Ticket");
    bump_lets_waiters_in::<SmartQ>("Smart-Q");
    bump_lets_waiters_in::<QueuedNp>("Queued-np");
}

/// Timed acquirers steal only where stealing is allowed: a queue head that has
/// waited past the fairness bound (1 µs here) has turned stealing off and is
/// stopped right after announcing that it parks; the holder releases; a timed
/// acquirer must then time out rather than take the lock past the head, and
/// the head gets it once it goes on.
#[test]
fn bounded_steal_timed_acquirer_respects_a_starved_head() {
    let raw = BoundedSteal::with_fair_after(Duration::from_micros(1)).unwrap();
    let m = Arc::new(Mutex::<BoundedSteal, Vec<&'static str>>::from_raw(
        raw,
        Vec::new(),
    ));
    let g = m.lock();
    let (id_tx, id_rx) = channel();
    let (done_tx, done_rx) = channel();
    let (go_tx, go_rx) = channel::<()>();
    let head = m.clone();
    thread::spawn(move || {
        id_tx.send(sched::current().id()).unwrap();
        go_rx.recv().unwrap(); // the trap is armed
        head.lock().push("head");
        done_tx.send(()).unwrap();
    });
    let trap = Trap::at(stall::WAITER_PARK)
        .thread(id_rx.recv().unwrap())
        .arm();
    go_tx.send(()).unwrap();
    trap.wait_hit(STUCK)
        .unwrap_or_else(|e| panic!("the head never announced parking: {e:?}"));
    drop(g);
    let other = m.clone();
    let stole = thread::spawn(move || other.try_lock_for(Duration::from_millis(5)).is_some())
        .join()
        .unwrap();
    assert!(
        !stole,
        "a timed acquirer took the lock past a queue head that had turned stealing off"
    );
    trap.release();
    done_rx
        .recv_timeout(STUCK)
        .expect("the starved head never got the lock");
    assert_eq!(*m.lock(), ["head"]);
}

// --- the front door: defaults, Tas timed, RW downgrade and timed, Barrier --------

/// `mpsync::Mutex`, `RwLock`, `Condvar` and `Barrier` need no type parameters.
#[test]
fn defaults_need_no_type_parameters() {
    let m = mpsync::Mutex::new(0u32);
    *m.lock() += 1;
    assert!(m.try_lock_for(Duration::from_millis(1)).is_some());
    let l = mpsync::RwLock::new(1u32);
    *l.write() += 1;
    assert_eq!(*l.read(), 2);
    assert!(l.try_write_for(Duration::ZERO).is_some());
    let cv = mpsync::Condvar::new();
    let mut g = m.lock();
    assert!(cv.wait_for(&mut g, Duration::ZERO).timed_out());
    assert!(
        cv.wait_while_for(&mut g, |v| *v == 1, Duration::from_millis(1))
            .timed_out()
    );
    drop(g);
    let b = Arc::new(mpsync::Barrier::new(3));
    let leaders: Vec<bool> = (0..3)
        .map(|_| {
            let b = b.clone();
            thread::spawn(move || b.wait().is_leader())
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    assert_eq!(leaders.iter().filter(|&&l| l).count(), 1);
    assert!(
        mpsync::Barrier::new(0).wait().is_leader(),
        "new(0) acts as new(1)"
    );
    assert_eq!(mpsync::Barrier::new(0).participants(), 1);
    assert!(mpsync::barrier::SimpleBarrier::try_new(usize::MAX).is_err());
}

/// `Barrier::wait` from threads that come and go: any thread may arrive, and
/// every episode has exactly one leader.
#[test]
fn simple_barrier_takes_any_threads() {
    let b = Arc::new(mpsync::Barrier::new(4));
    let leaders = Arc::new(AtomicU64::new(0));
    for _round in 0..3 {
        let ts: Vec<_> = (0..4)
            .map(|_| {
                let (b, leaders) = (b.clone(), leaders.clone());
                thread::spawn(move || {
                    for _ in 0..50 {
                        if b.wait().is_leader() {
                            leaders.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        within_deadline("simple barrier round", move || {
            for t in ts {
                t.join().unwrap();
            }
        });
    }
    assert_eq!(leaders.load(Ordering::Relaxed), 150);
}

/// TAS's timed forms: a held lock times out (not before the deadline), a free
/// one is taken, a zero or past deadline is a `try_lock`.
#[test]
fn tas_timed() {
    let m: Arc<Mutex<mpsync::lock::Tas, u32>> = Arc::new(Mutex::new(0));
    let g = m.lock();
    let start = Instant::now();
    let m2 = m.clone();
    let got = thread::spawn(move || m2.try_lock_for(Duration::from_millis(5)).is_some())
        .join()
        .unwrap();
    assert!(!got && start.elapsed() >= Duration::from_millis(5));
    assert!(m.try_lock_for(Duration::ZERO).is_none());
    drop(g);
    assert!(
        m.try_lock_until(Instant::now() - Duration::from_secs(1))
            .is_some()
    );
    assert!(
        m.try_lock_for(Duration::MAX).is_some(),
        "no deadline: a lock"
    );
}

use lock_api::{RawRwLockDowngrade, RawRwLockTimed, RwLockWriteGuard};
use mpsync::rwlock::{Bravo, RwLock, RwNative, RwNativeNp, RwQueued, RwSmartQ, RwTasB, RwTasBNp};

/// A downgrade keeps writers out and lets readers in: a writer that waited
/// for the write guard still waits while the downgraded guard is held, a
/// reader that waited (parked, behind the writer) gets in, and after the
/// downgraded guard goes the waiting writer gets the lock. `queued`: a
/// waiting writer holds the admission lock (the queued locks), so readers
/// arriving after it wait behind it.
fn downgrade<L: RawRwLockDowngrade + Send + Sync + 'static>(name: &str, queued: bool) {
    let l: Arc<RwLock<L, Vec<u32>>> = Arc::new(RwLock::new(Vec::new()));
    let mut w = l.write();
    w.push(1);
    let (reader_l, writer_l) = (l.clone(), l.clone());
    let reader = thread::spawn(move || reader_l.read().len());
    thread::sleep(Duration::from_millis(10)); // the reader waits (and may park)
    let writer = thread::spawn(move || writer_l.write().push(2));
    thread::sleep(Duration::from_millis(10)); // so does the writer, behind it
    let r = RwLockWriteGuard::downgrade(w);
    assert_eq!(*r, [1]);
    // A reader parked behind the writer is woken by the downgrade. (A queued
    // lock's reader may instead have queued behind the second writer, on a
    // slow machine: then it gets in after that writer, below.)
    let reader = if queued {
        Some(reader)
    } else {
        let got = within_deadline(
            &format!("{name}: reader behind a downgraded writer"),
            move || reader.join().unwrap(),
        );
        assert_eq!(got, 1, "{name}: the reader saw the write section");
        None
    };
    assert!(
        l.try_write().is_none(),
        "{name}: a writer beside a downgraded guard"
    );
    if !queued {
        assert!(
            l.try_read().is_some(),
            "{name}: readers share with a downgraded guard"
        );
    }
    thread::sleep(Duration::from_millis(5));
    assert!(
        !writer.is_finished(),
        "{name}: the waiting writer entered beside a reader"
    );
    drop(r);
    within_deadline(
        &format!("{name}: writer after the downgraded reader"),
        move || {
            writer.join().unwrap();
            if let Some(reader) = reader {
                let n = reader.join().unwrap();
                assert!(n == 1 || n == 2, "the reader saw {n} items");
            }
        },
    );
    assert_eq!(*l.read(), [1, 2]);
    assert!(!l.is_locked(), "{name}: held after everyone left");
    assert_eq!(sched::current().depth(), 0);
}

#[test]
fn rw_downgrade() {
    downgrade::<RwTasB>("RwTasB", false);
    downgrade::<RwTasBNp>("RwTasBNp", false);
    downgrade::<RwQueued>("RwQueued", true);
    downgrade::<RwSmartQ>("RwSmartQ", true);
    downgrade::<RwNative>("RwNative", true);
    downgrade::<RwNativeNp>("RwNativeNp", true);
    downgrade::<mpsync::rwlock::Bravo<RwTasB>>("Bravo<RwTasB>", false);
    downgrade::<mpsync::rwlock::Bravo<RwSmartQ>>("Bravo<RwSmartQ>", true);
}

/// Timed reads and writes: they time out (not before the deadline) against a
/// writer, a writer times out against readers — and leaves the lock as it
/// found it (`try_write` succeeds once the readers leave) — and they get a
/// lock released before their deadline.
fn rw_timed<L>(name: &str)
where
    L: RawRwLockTimed<Duration = Duration, Instant = Instant> + Send + Sync + 'static,
{
    let l: Arc<RwLock<L, u32>> = Arc::new(RwLock::new(0));
    let w = l.write();
    for zero in [Duration::ZERO, Duration::from_nanos(1)] {
        assert!(l.try_read_for(zero).is_none() && l.try_write_for(zero).is_none());
    }
    let past = Instant::now() - Duration::from_secs(1);
    assert!(l.try_read_until(past).is_none() && l.try_write_until(past).is_none());
    let l2 = l.clone();
    let start = Instant::now();
    let (r, wr) = thread::spawn(move || {
        (
            l2.try_read_for(Duration::from_millis(3)).is_some(),
            l2.try_write_for(Duration::from_millis(3)).is_some(),
        )
    })
    .join()
    .unwrap();
    assert!(
        !r && !wr,
        "{name}: a timed attempt got a lock held for writing"
    );
    assert!(
        start.elapsed() >= Duration::from_millis(6),
        "{name}: gave up early"
    );
    drop(w);
    // Readers inside: a timed writer waits out its deadline (spinning, then
    // parked), gives up, and leaves the lock as it found it.
    let r = l.read();
    let l2 = l.clone();
    let wr = thread::spawn(move || l2.try_write_for(Duration::from_millis(30)).is_some())
        .join()
        .unwrap();
    assert!(!wr, "{name}: a timed writer got in beside a reader");
    assert!(
        l.try_read_for(Duration::ZERO).is_some(),
        "{name}: readers refused after a timed-out writer"
    );
    drop(r);
    assert!(
        l.try_write().is_some(),
        "{name}: try_write refused on the free lock after a timed-out writer"
    );
    // Released before the deadline: got.
    let w = l.write();
    let l2 = l.clone();
    let t = thread::spawn(move || {
        let r = l2.try_read_for(Duration::from_secs(60)).map(|g| *g);
        let w = l2.try_write_for(Duration::from_secs(60)).map(|g| *g);
        (r, w)
    });
    thread::sleep(Duration::from_millis(10));
    drop(w);
    let (r, w) = within_deadline(name, move || t.join().unwrap());
    assert_eq!((r, w), (Some(0), Some(0)));
    assert!(
        l.try_write_for(Duration::MAX).is_some(),
        "{name}: no deadline: a lock"
    );
    assert!(!l.is_locked());
    assert_eq!(sched::current().depth(), 0);
}

#[test]
fn rw_timed_tas_b() {
    rw_timed::<RwTasB>("RwTasB");
    rw_timed::<RwTasBNp>("RwTasBNp");
}

#[test]
fn rw_timed_bravo() {
    rw_timed::<Bravo<RwTasB>>("Bravo<RwTasB>");
    rw_timed::<Bravo<RwSmartQ>>("Bravo<RwSmartQ>");
}

/// A BRAVO writer whose deadline passes while a fast reader (one that never
/// touched the underlying lock) is inside gives up: it lets the underlying
/// lock go, the bias stays off, and once the reader leaves a writer gets in.
#[test]
fn bravo_timed_writer_gives_up_on_a_fast_reader() {
    let l: Arc<RwLock<Bravo<RwTasB>, u32>> = Arc::new(RwLock::new(0));
    // SAFETY (raw, here and below): only its statistics are read.
    let raw = || unsafe { l.raw() };
    // The first slow reader enables the bias; a later read takes the fast path.
    let r = (0..10_000)
        .find_map(|_| {
            let r = l.read();
            (raw().fast_readers() > 0).then_some(r)
        })
        .expect("Bravo<RwTasB>: no read took the fast path in 10,000 tries");
    let l2 = l.clone();
    let start = Instant::now();
    let got = thread::spawn(move || l2.try_write_for(Duration::from_millis(20)).is_some())
        .join()
        .unwrap();
    assert!(!got, "a timed writer got in beside a fast reader");
    assert!(start.elapsed() >= Duration::from_millis(20));
    assert!(
        !raw().is_biased(),
        "the bias came back on after the revocation gave up"
    );
    assert!(
        !lock_api::RawRwLock::is_locked(raw().inner()),
        "the timed writer kept the underlying lock"
    );
    assert!(
        l.try_write().is_none(),
        "try_write got in beside a fast reader"
    );
    drop(r);
    assert_eq!(raw().fast_readers(), 0);
    *l.try_write_for(Duration::from_millis(20))
        .expect("no writer got in after the fast reader left") += 1;
    assert_eq!(*l.read(), 1);
}

#[test]
fn rw_timed_queued() {
    rw_timed::<RwSmartQ>("RwSmartQ");
    rw_timed::<RwNative>("RwNative");
    rw_timed::<RwNativeNp>("RwNativeNp");
}

/// A queued RW lock's timed writer gives up its parked drain while the last
/// reader leaves: stopped between its timeout and clearing its parked bit
/// (`RW_WRITER_DRAIN_GAVE_UP`), the reader leaves (and sees the bit); the
/// writer then holds nothing, the bit is cleared, and `try_write` gets the
/// free lock.
fn timed_drain_races_last_reader<L>(name: &str)
where
    L: RawRwLockTimed<Duration = Duration, Instant = Instant> + Send + Sync + 'static,
    L: std::fmt::Debug,
{
    let l: Arc<RwLock<L, u32>> = Arc::new(RwLock::new(0));
    let r = l.read();
    let (id_tx, id_rx) = channel();
    let (go_tx, go_rx) = channel::<()>();
    let l2 = l.clone();
    let writer = thread::spawn(move || {
        id_tx.send(sched::current().id()).unwrap();
        go_rx.recv().unwrap(); // the trap is armed
        l2.try_write_for(Duration::from_millis(20)).is_some()
    });
    let trap = Trap::at(stall::RW_WRITER_DRAIN_GAVE_UP)
        .thread(id_rx.recv().unwrap())
        .arm();
    go_tx.send(()).unwrap();
    trap.wait_hit(STUCK)
        .unwrap_or_else(|e| panic!("{name}: the timed writer never gave up its drain: {e:?}"));
    // SAFETY (raw, here and below): only its `Debug` snapshot is read.
    let parked = format!("{:?}", unsafe { l.raw() });
    drop(r); // the last reader out, the writer's bit set (or not yet)
    trap.release();
    assert!(
        !writer.join().unwrap(),
        "{name}: the timed writer got the lock"
    );
    // SAFETY: as above.
    let after = format!("{:?}", unsafe { l.raw() });
    assert!(
        after.contains("writer_parked: false") && after.contains("readers: 0"),
        "{name}: {after} after a timed-out writer (before: {parked})"
    );
    assert!(
        l.try_write().is_some(),
        "{name}: try_write refused on the free lock"
    );
    assert!(!l.is_locked());
}

#[test]
fn rw_timed_drain_races_last_reader() {
    timed_drain_races_last_reader::<RwSmartQ>("RwSmartQ");
    timed_drain_races_last_reader::<RwNative>("RwNative");
}

/// Compile errors and `type_name` name the locks a user wrote, not their
/// construction (`SkipQueue<SmartQPolicy>`, `RwQueue<SkipQueue<…>, true>`).
#[test]
fn named_locks_say_their_names() {
    use std::any::type_name;
    for (name, full) in [
        ("SmartQ", type_name::<mpsync::lock::SmartQ>()),
        ("McsTp", type_name::<mpsync::lock::McsTp>()),
        (
            "QueuedHandshaking",
            type_name::<mpsync::lock::QueuedHandshaking>(),
        ),
        ("RwSmartQ", type_name::<RwSmartQ>()),
        ("RwQueued", type_name::<RwQueued>()),
    ] {
        assert_eq!(full.rsplit("::").next(), Some(name), "{full}");
    }
}

/// `RawRwLockUpgradeDowngrade`: a writer becomes the upgradable reader
/// (readers get in, writers and other upgradable readers do not), the
/// upgradable reader a plain reader (another upgradable reader gets in, a
/// writer does not); a thread parked for the upgradable slot is woken by the
/// downgrade that frees it, and a writer parked meanwhile by the last reader.
fn upgrade_downgrades<L>(name: &str)
where
    L: lock_api::RawRwLockUpgradeDowngrade + Send + Sync + 'static,
{
    use lock_api::RwLockUpgradableReadGuard as Up;
    let l: Arc<RwLock<L, u32>> = Arc::new(RwLock::new(0));
    let mut w = Up::upgrade(l.upgradable_read());
    *w += 1;
    let u = RwLockWriteGuard::downgrade_to_upgradable(w);
    assert_eq!(
        l.try_read().map(|r| *r),
        Some(1),
        "{name}: no reader beside the downgraded writer"
    );
    assert!(
        l.try_upgradable_read().is_none() && l.try_write().is_none(),
        "{name}: upgradable slot or write free after downgrade_to_upgradable"
    );
    // A second upgradable reader parks (after its patience) until `u` is gone.
    let l2 = l.clone();
    let (tx, rx) = channel();
    let up = thread::spawn(move || {
        let g = l2.upgradable_read();
        tx.send(*g).unwrap();
        rx_hold(g);
    });
    thread::sleep(Duration::from_millis(20));
    let r = Up::downgrade(u);
    assert_eq!(
        rx.recv_timeout(STUCK)
            .expect("the parked upgradable reader was not woken by the downgrade"),
        1,
        "{name}"
    );
    assert!(
        l.try_write().is_none(),
        "{name}: a writer got in beside the downgraded reader"
    );
    up.join().unwrap();
    // A writer parked behind the downgraded reader gets in once it leaves.
    let l2 = l.clone();
    let wr = thread::spawn(move || *l2.write() += 1);
    thread::sleep(Duration::from_millis(20));
    drop(r);
    within_deadline(name, move || wr.join().unwrap());
    assert_eq!(*l.read(), 2);
    assert!(!l.is_locked());
    assert_eq!(
        sched::current().depth(),
        0,
        "{name}: a no-preempt request left over"
    );
}

/// Holds `g` a moment (the upgradable reader's section), then drops it.
fn rx_hold<G>(g: G) {
    thread::sleep(Duration::from_millis(5));
    drop(g);
}

#[test]
fn rw_upgrade_downgrades() {
    upgrade_downgrades::<RwTasB>("RwTasB");
    upgrade_downgrades::<RwTasBNp>("RwTasBNp");
}
