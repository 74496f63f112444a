//! Loom models of lock_api completeness (issue 13 §4): the condition variable's
//! wait/notify protocol (the futex is modelled strictly under loom: a parked
//! thread sleeps until a wake on its word picks it, so a lost wake-up is a
//! deadlock loom reports), BoundedSteal's fair unlock, and timed acquisitions
//! racing plain ones (for the skipping queue locks: grant racing withdrawal).
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p mpsync --release --target-dir target/loom --test loom_lockapi -- --test-threads=1`
#![cfg(loom)]

use std::time::Duration;

use lock_api::{MutexGuard, RawMutex, RawMutexFair, RawMutexTimed};
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;
use mpsync::lock::Mutex;
use mpsync::lock::{BoundedSteal, ClhTp, Condvar, McsTp, Native, SmartQ, SpinThenPark, TicketNp};

fn builder(preemptions: usize) -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b
}

/// Ping-pong: two threads take turns twice each, every turn a `wait_while` on
/// one condvar with `notify_one` — each thread waits more than once, and a
/// notification lost in any interleaving leaves a thread asleep forever.
#[test]
fn loom_condvar_ping_pong() {
    builder(2).check(|| {
        let s = Arc::new((Mutex::from_raw(Native::new(), 0u32), Condvar::new()));
        let ts: Vec<_> = (0..2u32)
            .map(|me| {
                let s = s.clone();
                thread::spawn(move || {
                    for round in 0..2u32 {
                        let mut g = s.0.lock();
                        // Turn k belongs to thread k % 2.
                        s.1.wait_while(&mut g, |turn| *turn != 2 * round + me);
                        *g += 1;
                        drop(g);
                        s.1.notify_one();
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        assert_eq!(*s.0.lock(), 4);
    });
}

/// Two waiters, one `notify_all`: both wake (each may wait more than once on a
/// spurious wake-up).
#[test]
fn loom_condvar_notify_all_wakes_every_waiter() {
    builder(2).check(|| {
        let s = Arc::new((Mutex::from_raw(SpinThenPark::new(), false), Condvar::new()));
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let s = s.clone();
                thread::spawn(move || {
                    let mut g = s.0.lock();
                    s.1.wait_while(&mut g, |set| !*set);
                })
            })
            .collect();
        *s.0.lock() = true;
        s.1.notify_all();
        for t in ts {
            t.join().unwrap();
        }
    });
}

/// Two threads each acquire BoundedSteal twice and release with `unlock_fair`
/// (and one `bump` while holding): exclusive (loom flags racing accesses to the
/// cell), nothing lost, nobody left asleep with the lock free.
#[test]
fn loom_bounded_steal_fair_unlock() {
    builder(2).check(|| {
        let s = Arc::new((BoundedSteal::new(), UnsafeCell::new(0u32)));
        let ts: Vec<_> = (0..2)
            .map(|i| {
                let s = s.clone();
                thread::spawn(move || {
                    for _ in 0..2 {
                        let mut g = s.0.lock();
                        // SAFETY: the lock is held.
                        s.1.with_mut(|p| unsafe { *p += 1 });
                        if i == 0 {
                            // SAFETY: `g` came from this lock on this thread.
                            unsafe { s.0.bump(&mut g) };
                        }
                        // SAFETY: as above (re-filled by `bump`).
                        unsafe { s.0.unlock_fair(g) };
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        // SAFETY: all threads joined.
        assert_eq!(s.1.with(|p| unsafe { *p }), 4);
        assert!(!s.0.is_locked());
    });
}

/// A timed acquirer (deadline already passed: one attempt through the whole
/// slow path, then give up) races a thread that locks twice: every success is
/// exclusive and counted, the plain locker is never left asleep, and the lock
/// ends free.
fn timed_races_plain<L: RawMutexTimed<Duration = Duration> + Send + Sync + 'static>(
    make: fn() -> L,
) {
    timed_attempt_races_plain(make, |l| l.try_lock_for(Duration::ZERO));
}

/// [`timed_races_plain`] with the timed attempt given.
fn timed_attempt_races_plain<L: RawMutex + Send + Sync + 'static>(
    make: fn() -> L,
    attempt: fn(&L) -> Option<L::Guard>,
) {
    builder(2).check(move || {
        let s = Arc::new((make(), UnsafeCell::new(0u32)));
        let plain = {
            let s = s.clone();
            thread::spawn(move || {
                for _ in 0..2 {
                    let g = s.0.lock();
                    // SAFETY: the lock is held.
                    s.1.with_mut(|p| unsafe { *p += 1 });
                    // SAFETY: `g` came from this lock on this thread.
                    unsafe { s.0.unlock(g) };
                }
            })
        };
        let mut wins = 0;
        for _ in 0..2 {
            if let Some(g) = attempt(&s.0) {
                // SAFETY: the lock is held.
                s.1.with_mut(|p| unsafe { *p += 1 });
                wins += 1;
                // SAFETY: `g` came from this lock on this thread.
                unsafe { s.0.unlock(g) };
            }
        }
        plain.join().unwrap();
        // SAFETY: all threads joined.
        assert_eq!(s.1.with(|p| unsafe { *p }), 2 + wins);
        assert!(!s.0.is_locked());
    });
}

#[test]
fn loom_native_timed_races_plain() {
    timed_races_plain(Native::new);
}

#[test]
fn loom_spin_then_park_timed_races_plain() {
    timed_races_plain(SpinThenPark::new);
}

#[test]
fn loom_bounded_steal_timed_races_plain() {
    timed_races_plain(BoundedSteal::new);
}

/// The skipping queue's grant (the releaser's claim CAS, `WAITING` →
/// `CLAIMED`) racing a timed waiter's withdrawal (`WAITING` → `ABANDONED`):
/// the timed thread queues behind the plain one and gives up at its first look;
/// a withdrawal that overwrote a claim would leave the lock granted to nobody
/// (the plain thread's second `lock` then sleeps forever: a deadlock loom
/// reports), and one that returned `None` after the grant the same.
#[test]
fn loom_mcs_tp_timed_grant_races_withdrawal() {
    timed_races_plain(McsTp::new);
}

/// The same for Smart-Q, whose grant also makes the waiter
/// `OtherUnpreemptable` (its no-preempt request paused while it waits, and
/// cancelled when it withdraws).
#[test]
fn loom_smart_q_timed_grant_races_withdrawal() {
    timed_races_plain(SmartQ::new);
}

/// CLH-TP's grant (the predecessor's RELEASED, taken by the waiter's own
/// WAITING → HOLDING CAS) racing a timed waiter's withdrawal (its own WAITING
/// → ABANDONED CAS, against its successor's removal): the timed thread queues
/// behind or ahead of the plain one, twice, and gives up at its first look.
/// A waiter that returned `None` after taking the lock, or an abandoned node
/// that nobody unlinks, leaves the plain thread's `lock` waiting forever (a
/// deadlock loom reports); an abandoned tail in front of a released lock must
/// read free at the end.
#[test]
fn loom_clh_tp_timed_grant_races_withdrawal() {
    timed_races_plain(ClhTp::new);
}

/// Ticket-np: a timed taker that gives up leaves its number, and whoever
/// offers it must withdraw it — or the taker, on its way out, sees the offer
/// and claims it (a late win, returned as `Some`). The race is an idle
/// releaser's look at `next` against the departing taker's look at
/// `serving` (a store-buffer pair, closed by a SeqCst fence on each side):
/// if both missed each other, the offer would be stranded and the lock would
/// end reserved for a thread that left (`is_locked` after the joins); a
/// departing taker that returned `None` after its claim won would leave it
/// held by nobody (the plain thread's next `lock` spins forever). A zero
/// timeout takes no number (it is a `try_lock`), so the timed attempt here
/// is one whose deadline passes between its take and its first look.
#[test]
fn loom_ticket_np_timed_offer_races_departure() {
    timed_attempt_races_plain(TicketNp::new, TicketNp::try_lock_leaving_at_first_wait);
}

/// Ticket-np's zero timeout (a `try_lock`: no number taken) beside a plain
/// thread that locks twice.
#[test]
fn loom_ticket_np_zero_timeout_races_plain() {
    timed_races_plain(TicketNp::new);
}

/// `MutexGuard::unlocked_fair` round trip on the lock_api wrapper (the path a
/// condvar-like user takes), under the model.
#[test]
fn loom_bounded_steal_unlocked_fair_guard() {
    builder(2).check(|| {
        let m = Arc::new(Mutex::from_raw(BoundedSteal::new(), 0u32));
        let t = {
            let m = m.clone();
            thread::spawn(move || *m.lock() += 1)
        };
        let mut g = m.lock();
        MutexGuard::unlocked_fair(&mut g, || ());
        *g += 1;
        drop(g);
        t.join().unwrap();
        assert_eq!(*m.lock(), 2);
    });
}
