//! The thundering herd of `Condvar::notify_all` (issue 13 §4): W threads wait
//! on one condvar under a `Mutex<Native, _>`; each round the main thread bumps
//! a generation and wakes them, and every waiter re-locks the mutex, runs a
//! short critical section (~1 µs) and waits again.
//!
//! - `all`:   one `notify_all` — every waiter wakes at once and all but one go
//!   back to sleep on the mutex word (the herd a requeueing `notify_all` would
//!   avoid by moving them onto the mutex's futex without waking them);
//! - `chain`: one `notify_one`, and every woken waiter passes it on with
//!   another `notify_one` after its critical section — at most one waiter runs
//!   towards the mutex at a time: the hand-offs a requeue would give, here
//!   paid for by W wake-up system calls in series.
//!
//! Per round: wall time from the notification until all W have re-locked, and
//! the process's voluntary + involuntary context switches (`getrusage`), the
//! measure of threads woken only to sleep again. Medians over the rounds.
//!
//! `cargo run --release -p mpsync --example condvar_herd [waiters rounds]`
//! (defaults: 8 2000).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use mpsync::lock::Mutex;
use mpsync::lock::{Condvar, Native};
use mpsync::util::busy::BusyWork;

struct State {
    generation: u64,
    waiting: usize,
    arrived: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Voluntary + involuntary context switches of the whole process so far.
fn context_switches() -> i64 {
    // SAFETY: `getrusage` fills the zeroed struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a `rusage`.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    assert_eq!(rc, 0, "getrusage failed");
    u.ru_nvcsw + u.ru_nivcsw
}

/// One mode: per-round (µs until all re-locked, context switches).
fn run(waiters: usize, rounds: usize, chain: bool) -> (f64, f64) {
    let m: Mutex<Native, State> = Mutex::new(State {
        generation: 0,
        waiting: 0,
        arrived: 0,
    });
    let cv = Condvar::new();
    let stop = AtomicBool::new(false);
    let cs = BusyWork::global().iters_for_ns(1_000);
    let mut micros = Vec::with_capacity(rounds);
    let mut switches = Vec::with_capacity(rounds);
    std::thread::scope(|s| {
        for _ in 0..waiters {
            s.spawn(|| {
                let mut seen = 0u64;
                let mut g = m.lock();
                loop {
                    g.waiting += 1;
                    cv.wait_while(&mut g, |st| {
                        st.generation == seen && !stop.load(Ordering::Relaxed)
                    });
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    seen = g.generation;
                    g.arrived += 1;
                    BusyWork::global().run_iters(cs);
                    if chain {
                        cv.notify_one();
                    }
                }
            });
        }
        for _ in 0..rounds {
            // Wait until every waiter is back in its wait.
            loop {
                let g = m.lock();
                if g.waiting == waiters {
                    break;
                }
                drop(g);
                mpsync::sched::yield_now();
            }
            let (t0, c0) = {
                let mut g = m.lock();
                g.generation += 1;
                g.waiting = 0;
                g.arrived = 0;
                (Instant::now(), context_switches())
            };
            if chain {
                cv.notify_one();
            } else {
                cv.notify_all();
            }
            loop {
                let g = m.lock();
                if g.arrived == waiters {
                    break;
                }
                drop(g);
                mpsync::sched::yield_now();
            }
            micros.push(t0.elapsed().as_secs_f64() * 1e6);
            switches.push((context_switches() - c0) as f64);
        }
        stop.store(true, Ordering::Relaxed);
        let _g = m.lock();
        cv.notify_all();
    });
    (median(micros), median(switches))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: usize| -> usize {
        args.get(i).map_or(d, |s| {
            s.parse()
                .unwrap_or_else(|_| panic!("argument {}: {s:?} is not a number", i + 1))
        })
    };
    let (waiters, rounds) = (arg(0, 8), arg(1, 2000));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("condvar herd: {waiters} waiters, {rounds} rounds, {cores} cores, Mutex<Native>");
    println!("mode   µs/round (median)   context switches/round (median)");
    // Interleaved, twice each, so that a load change hits both modes.
    for _ in 0..2 {
        for (name, chain) in [("all", false), ("chain", true)] {
            let (us, cs) = run(waiters, rounds, chain);
            println!("{name:<6} {us:>18.1}   {cs:>10.1}");
        }
    }
}
