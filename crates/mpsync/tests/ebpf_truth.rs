//! The kernel's answers checked against the truth: what the eBPF program says
//! of a thread (`sched::native::kernel_state`, `kernel_state_at`,
//! `kernel_view`, the pressure counts) against what the thread itself knows.
//!
//! - A thread asking about itself is running: every self-look after a blocking
//!   call must read `Running`, and `sched::is_preempted` of itself `false`.
//! - A thread known to be spinning (it raised a flag after its blocking call
//!   returned and lowers it before the next) is never reported `Blocked` by a
//!   peer: it can only lose its CPU to a preemption while it spins.
//! - While every registered thread is known to be running, the woken count is
//!   0; once they are gone, both counts are 0 (they cannot drift).
//!
//! Looks are taken across futex sleeps, short nanosleeps, futex wake-ups by a
//! partner, yields and migrations (affinity changes), several workers per CPU.
//! The lock-facing answers (those a lock's progress depends on: Ticket-np
//! withdraws the offer of a taker reported off its CPU) must never disagree;
//! the raw record (`kernel_view`, a diagnostic) may lag a switch by at most a
//! small rate, printed. Sized for CI (about 2 s per test);
//! `MPSYNC_TRUTH_SECS=<n>` runs longer.
//!
//! A kernel may hide a context switch from its tracepoints (a machine's own
//! agent whose events are not traced, a recursion miss): the tests also hide
//! switch-ins on purpose (`native::hide_next_switch_in`), so the
//! repair is checked on every machine, not only where the kernel hides some.
//!
//! Where this process may not load eBPF each test prints `SKIPPED: <reason>`;
//! `MPSYNC_EBPF_REQUIRED=1` makes that a failure. One test at a time (the counts
//! are process-wide).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use mpsync::sync::AtomicU32;
use std::time::{Duration, Instant};

use mpsync::sched::{self, ContextBlock, native};

mod common;
use common::ebpf::{OnDrop, kernel_answers, pin, spin_flagged};

static SERIAL: Mutex<()> = Mutex::new(());

fn run_for() -> Duration {
    let s = std::env::var("MPSYNC_TRUTH_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(2.0);
    Duration::from_secs_f64(s)
}

/// What the workers and the observer counted.
#[derive(Default)]
struct Tally {
    /// Self-looks through the lock-facing answers, and those not `Running`.
    self_looks: AtomicU64,
    self_wrong: AtomicU64,
    /// Self-looks at the raw record, and those not `Running`.
    raw_looks: AtomicU64,
    raw_wrong: AtomicU64,
    /// Peer looks at a thread known to be spinning, and those `Blocked`.
    peer_looks: AtomicU64,
    peer_blocked: AtomicU64,
    /// Blocking calls, migrations.
    blocking: AtomicU64,
    migrations: AtomicU64,
    /// The first disagreements, for the message.
    first: Mutex<Vec<String>>,
}

impl Tally {
    fn note(&self, what: String) {
        let mut f = self.first.lock().unwrap();
        if f.len() < 5 {
            f.push(what);
        }
    }
}

/// One worker's published facts: its block, its kernel key and whether it
/// spins right now (a generation, 0 when not).
struct Worker {
    cb: AtomicU64,
    key: AtomicU64,
    spinning: AtomicU64,
}

const NONE: u64 = u64::MAX;

/// The blocking (or migrating) call of round `round` of worker `i`.
fn blocking_call(i: usize, round: u64, bell: &[AtomicU32], cpus: &[usize], t: &Tally) {
    match round % 5 {
        0 => std::thread::sleep(Duration::from_micros(50)),
        1 => {
            // A futex sleep ended by its timeout.
            let w = AtomicU32::new(0);
            let _ = sched::park(&w, 0, Some(Duration::from_micros(30)));
        }
        2 => {
            // A futex sleep ended by a partner's wake-up (or a short timeout).
            let mine = &bell[i];
            let partner = &bell[(i + 1) % bell.len()];
            partner.fetch_add(1, mpsync::sync::Ordering::Release);
            sched::unpark_all(partner);
            let seen = mine.load(mpsync::sync::Ordering::Acquire);
            let _ = sched::park(mine, seen, Some(Duration::from_micros(200)));
        }
        3 => sched::yield_now(),
        _ => {
            // A migration: to the next CPU of the mask.
            let cpu = cpus[(i + round as usize / 5) % cpus.len()];
            pin(cpu);
            t.migrations.fetch_add(1, Ordering::Relaxed);
        }
    }
    t.blocking.fetch_add(1, Ordering::Relaxed);
}

/// Looks at itself `n` times: the lock-facing answers and the raw record.
fn self_looks(me: &'static ContextBlock, key: Option<u32>, n: u32, t: &Tally) {
    for _ in 0..n {
        let st = native::kernel_state(me);
        let pre = sched::is_preempted(me);
        let at = key.map(native::kernel_state_at);
        t.self_looks.fetch_add(1, Ordering::Relaxed);
        if st != Some(native::KernelState::Running)
            || pre
            || at.is_some_and(|a| a != Some(native::KernelState::Running))
        {
            t.self_wrong.fetch_add(1, Ordering::Relaxed);
            t.note(format!(
                "self-look: kernel_state {st:?}, is_preempted {pre}, kernel_state_at {at:?}; record {:?}",
                native::kernel_view(me)
            ));
        }
        if let Some(v) = native::kernel_view(me) {
            t.raw_looks.fetch_add(1, Ordering::Relaxed);
            if v.state != native::KernelState::Running {
                t.raw_wrong.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Spins about `ns` doing self-looks.
fn spin_looking(me: &'static ContextBlock, key: Option<u32>, ns: u64, t: &Tally) {
    let start = Instant::now();
    while (start.elapsed().as_nanos() as u64) < ns {
        self_looks(me, key, 4, t);
    }
}

#[test]
fn kernel_answers_agree_with_the_threads_own_view() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !kernel_answers("kernel_answers_agree_with_the_threads_own_view") {
        return;
    }
    let cpus = native::available_cpus().unwrap();
    let workers_n = (cpus.len() * 2).clamp(2, 8);
    let t = Tally::default();
    let stop = AtomicBool::new(false);
    let bell: Vec<AtomicU32> = (0..workers_n).map(|_| AtomicU32::new(0)).collect();
    let ws: Vec<Worker> = (0..workers_n)
        .map(|_| Worker {
            cb: AtomicU64::new(NONE),
            key: AtomicU64::new(NONE),
            spinning: AtomicU64::new(0),
        })
        .collect();
    let blocks: Mutex<Vec<&'static ContextBlock>> = Mutex::new(Vec::new());
    let duration = run_for();
    let repaired_before = native::switch_ins_repaired();
    std::thread::scope(|s| {
        let _release = OnDrop(|| stop.store(true, Ordering::Relaxed));
        for i in 0..workers_n {
            let (t, stop, bell, ws, blocks, cpus) = (&t, &stop, &bell, &ws, &blocks, &cpus);
            s.spawn(move || {
                let me = sched::current();
                let key = native::kernel_key(me);
                {
                    let mut b = blocks.lock().unwrap();
                    ws[i].cb.store(b.len() as u64, Ordering::Relaxed);
                    b.push(me);
                }
                ws[i]
                    .key
                    .store(key.map_or(NONE, u64::from), Ordering::Release);
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    blocking_call(i, round, bell, cpus, t);
                    round += 1;
                    // Running now: known to spin until the flag is lowered
                    // (in the chaos build, not stalled by it meanwhile: a
                    // chaos stall parks the thread, which is a block).
                    {
                        let _quiet = mpsync::sync::Exempt::new();
                        ws[i].spinning.store(round, Ordering::Release);
                        spin_looking(me, key, 20_000, t);
                        ws[i].spinning.store(0, Ordering::Release);
                    }
                }
                // Wake a partner that may be parked on our ring.
                for b in bell.iter() {
                    b.fetch_add(1, mpsync::sync::Ordering::Release);
                    sched::unpark_all(b);
                }
            });
        }
        // The observer: looks at workers known to be spinning.
        let start = Instant::now();
        while start.elapsed() < duration {
            for w in ws.iter() {
                let idx = w.cb.load(Ordering::Relaxed);
                if idx == NONE {
                    continue;
                }
                let cb = blocks.lock().unwrap()[idx as usize];
                let key = w.key.load(Ordering::Acquire);
                for _ in 0..16 {
                    let s1 = w.spinning.load(Ordering::Acquire);
                    if s1 == 0 {
                        break;
                    }
                    let st = native::kernel_state(cb);
                    let at = (key != NONE).then(|| native::kernel_state_at(key as u32));
                    let s2 = w.spinning.load(Ordering::Acquire);
                    if s1 != s2 {
                        break;
                    }
                    t.peer_looks.fetch_add(1, Ordering::Relaxed);
                    if st == Some(native::KernelState::Blocked)
                        || at == Some(Some(native::KernelState::Blocked))
                    {
                        t.peer_blocked.fetch_add(1, Ordering::Relaxed);
                        t.note(format!(
                            "peer look at a spinning thread: kernel_state {st:?}, kernel_state_at {at:?}; record {:?}",
                            native::kernel_view(cb)
                        ));
                    }
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let (sl, sw) = (get(&t.self_looks), get(&t.self_wrong));
    let (rl, rw) = (get(&t.raw_looks), get(&t.raw_wrong));
    let (pl, pb) = (get(&t.peer_looks), get(&t.peer_blocked));
    let rate = |w: u64, l: u64| w as f64 / l.max(1) as f64;
    println!(
        "{workers_n} workers, {:?}: {} blocking calls ({} migrations); self-looks {sl} ({sw} wrong, rate {:.2e}); raw record {rl} ({rw} not running, rate {:.2e}); peer looks at spinning threads {pl} ({pb} blocked, rate {:.2e}); switch-ins the kernel hid and the program repaired: {:?}",
        duration,
        get(&t.blocking),
        get(&t.migrations),
        rate(sw, sl),
        rate(rw, rl),
        rate(pb, pl),
        native::switch_ins_repaired()
            .zip(repaired_before)
            .map(|(a, b)| a - b),
    );
    let first = t.first.lock().unwrap().clone();
    assert!(
        sl > 100_000 && pl > 1_000,
        "too few looks to judge: {sl} self, {pl} peer"
    );
    assert_eq!(
        (sw, pb),
        (0, 0),
        "the kernel's lock-facing answers disagreed with the truth: {sw} of {sl} self-looks were not Running (rate {:.2e}), {pb} of {pl} looks at a spinning thread read Blocked (rate {:.2e}); first: {first:#?}",
        rate(sw, sl),
        rate(pb, pl)
    );
    assert!(
        rate(rw, rl) <= 1e-4,
        "the raw record lagged the truth too often: {rw} of {rl} self-looks (rate {:.2e} > 1e-4)",
        rate(rw, rl)
    );
}

fn wait_for_zero(what: &str) {
    common::ebpf::wait_for_zero(what, Duration::from_secs(30));
}

/// A switch-in the program does not see (hidden on purpose, as a kernel that
/// traces nothing while some task is current hides it) is repaired before the
/// thread runs: its own record, a peer's look while it spins and its own
/// answers all say it runs. Without the repair the record would say `Blocked`
/// for as long as it spins.
#[test]
fn a_switch_in_the_kernel_hides_is_repaired_before_the_thread_runs() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !kernel_answers("a_switch_in_the_kernel_hides_is_repaired_before_the_thread_runs") {
        return;
    }
    let Some(before) = native::switch_ins_repaired() else {
        println!(
            "SKIPPED: a_switch_in_the_kernel_hides_is_repaired_before_the_thread_runs: kernel {} has no sched_exit_tp tracepoint (Linux 6.17+): a hidden switch-in is set right only at the thread's next switch",
            native::kernel_release()
        );
        return;
    };
    const ROUNDS: u64 = 300;
    let spinning = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let (tx, rx) = std::sync::mpsc::channel::<&'static ContextBlock>();
    let cpus = native::available_cpus().unwrap();
    let (wrong, peer_looks, peer_blocked) = std::thread::scope(|s| {
        let worker = s.spawn(|| {
            pin(cpus[0]);
            let me = sched::current();
            tx.send(me).unwrap();
            let word = AtomicU32::new(0);
            let mut wrong = Vec::new();
            for round in 1..=ROUNDS {
                assert!(
                    native::hide_next_switch_in(me, false),
                    "the kernel answers for us"
                );
                // A blocking call: it always switches out and back in (a
                // yield with nobody else runnable would not).
                if round.is_multiple_of(2) {
                    std::thread::sleep(Duration::from_micros(50));
                } else {
                    let _ = sched::park(&word, 0, Some(Duration::from_micros(50)));
                }
                // Running: the record must say so already.
                let v = native::kernel_view(me);
                if v.is_none_or(|v| v.state != native::KernelState::Running)
                    || native::kernel_state(me) != Some(native::KernelState::Running)
                {
                    wrong.push(format!("round {round}: record {v:?}"));
                }
                spin_flagged(&spinning, round, Duration::from_micros(100));
            }
            done.store(true, Ordering::Release);
            wrong
        });
        let cb = rx.recv().unwrap();
        if let Some(&c) = cpus.get(1) {
            pin(c);
        }
        let (mut looks, mut blocked) = (0u64, Vec::new());
        while !done.load(Ordering::Acquire) {
            let s1 = spinning.load(Ordering::Acquire);
            if s1 == 0 {
                std::hint::spin_loop();
                continue;
            }
            let st = native::kernel_state(cb);
            if spinning.load(Ordering::Acquire) != s1 {
                continue;
            }
            looks += 1;
            if st == Some(native::KernelState::Blocked) && blocked.len() < 5 {
                blocked.push(format!("round {s1}: {:?}", native::kernel_view(cb)));
            }
        }
        (worker.join().unwrap(), looks, blocked)
    });
    let repaired = native::switch_ins_repaired().unwrap() - before;
    println!(
        "{ROUNDS} hidden switch-ins: {repaired} repaired; {peer_looks} peer looks while the thread spun"
    );
    assert!(
        wrong.is_empty() && peer_blocked.is_empty(),
        "after a switch-in the program did not see, the running thread was not reported running: its own record: {wrong:#?}; a peer's look while it spun: {peer_blocked:#?}"
    );
    // Most hidden switch-ins need the repair; not every one on a loaded
    // machine: a thread preempted right after it came back is switched out
    // and in again, and that switch-in, not hidden, sets its record right by
    // the ordinary path (291 of 300 were repaired in one CI run beside other
    // builds). The records checked above are the test of the repair; the
    // count says it ran at all.
    assert!(
        repaired >= ROUNDS / 2,
        "only {repaired} of {ROUNDS} hidden switch-ins were repaired"
    );
}

/// The pressure counts cannot drift: while every registered thread is known
/// to run, no thread is counted woken (a thread whose switch-in the kernel hid
/// is taken out of the woken count by the repair, before it runs); after
/// threads that blocked, woke, were preempted, had switch-ins hidden and
/// exited, both counts are 0 again.
#[test]
fn the_pressure_counts_do_not_drift() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !kernel_answers("the_pressure_counts_do_not_drift") {
        return;
    }
    let cpus = native::available_cpus().unwrap();
    if cpus.len() < 2 {
        println!("SKIPPED: the_pressure_counts_do_not_drift: needs 2 CPUs, have {cpus:?}");
        return;
    }
    wait_for_zero("before the test");
    let repairs = native::switch_ins_repaired().is_some();
    let spinning = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let duration = run_for();
    let (looks, woken_seen) = std::thread::scope(|s| {
        // One thread on the first CPU: sleeps, wakes, spins; its switch-ins
        // hidden every other round where the kernel can repair them.
        s.spawn(|| {
            pin(cpus[0]);
            let me = sched::current();
            let start = Instant::now();
            let mut round = 0u64;
            while start.elapsed() < duration {
                round += 1;
                if repairs && round.is_multiple_of(2) {
                    native::hide_next_switch_in(me, false);
                }
                std::thread::sleep(Duration::from_micros(50));
                spin_flagged(&spinning, round, Duration::from_micros(100));
            }
            done.store(true, Ordering::Release);
        });
        // The observer, on the second CPU, registered and running too.
        pin(cpus[1]);
        let _ = sched::current();
        let (mut looks, mut woken_seen) = (0u64, Vec::new());
        while !done.load(Ordering::Acquire) {
            let s1 = spinning.load(Ordering::Acquire);
            if s1 == 0 {
                continue;
            }
            let w = native::threads_woken_now();
            if spinning.load(Ordering::Acquire) != s1 {
                continue;
            }
            looks += 1;
            if w != Some(0) && woken_seen.len() < 5 {
                woken_seen.push(format!("round {s1}: woken count {w:?}"));
            }
        }
        (looks, woken_seen)
    });
    assert!(looks > 1000, "too few looks while the thread spun: {looks}");
    assert!(
        woken_seen.is_empty(),
        "a thread was counted woken while every registered thread ran ({looks} looks): {woken_seen:#?}"
    );
    // Churn: threads that block, wake, are preempted (more threads than
    // CPUs), have switch-ins hidden, and exit.
    std::thread::scope(|s| {
        for i in 0..cpus.len() * 3 {
            s.spawn(move || {
                for j in 0..200u32 {
                    let me = sched::current();
                    if repairs && j.is_multiple_of(3) {
                        native::hide_next_switch_in(me, false);
                    }
                    match (i as u32 + j) % 3 {
                        0 => std::thread::sleep(Duration::from_micros(20)),
                        1 => sched::yield_now(),
                        _ => {
                            let t = Instant::now();
                            while t.elapsed() < Duration::from_micros(200) {
                                std::hint::spin_loop();
                            }
                        }
                    }
                }
            });
        }
    });
    println!(
        "{looks} looks while the one thread spun, none counted woken; switch-ins repaired so far: {:?}",
        native::switch_ins_repaired()
    );
    wait_for_zero("after the churn");
}

/// Where the kernel cannot repair a switch-in it hid (no `sched_exit_tp`,
/// hidden here from the repair too), a thread asking about itself is still
/// told that it runs — through every lock-facing answer — while its record
/// says otherwise; the record is set right at its next switch.
#[test]
fn a_thread_asking_about_itself_runs_even_where_the_kernel_cannot_repair() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !kernel_answers("a_thread_asking_about_itself_runs_even_where_the_kernel_cannot_repair") {
        return;
    }
    let (stale, late, wrong) = std::thread::spawn(|| {
        let me = sched::current();
        let key = native::kernel_key(me);
        let (mut stale, mut late, mut wrong) = (0u32, 0u32, Vec::new());
        for round in 0..50 {
            assert!(native::hide_next_switch_in(me, true));
            std::thread::sleep(Duration::from_micros(50));
            let raw = native::kernel_view(me).map(|v| v.state);
            if raw != Some(native::KernelState::Running) {
                stale += 1;
            }
            let answers = (
                native::kernel_state(me),
                sched::is_preempted(me),
                key.map(native::kernel_state_at),
            );
            if answers
                != (
                    Some(native::KernelState::Running),
                    false,
                    key.map(|_| Some(native::KernelState::Running)),
                )
            {
                wrong.push(format!(
                    "round {round}: record {raw:?}, answers {answers:?}"
                ));
            }
            // The next switch out and in, seen: the record is right again.
            // Up to 5 sleeps: on a loaded machine (CI) the hidden switch-in
            // can be one the first sleep did not make (a sleep whose timer
            // fired while it was preempted inside nanosleep does not switch),
            // so the hide is used by the next one (seen once in a CI run:
            // "still Some(Blocked) after a switch the program saw").
            let mut again = None;
            let mut sleeps = 0;
            while sleeps < 5 && again != Some(native::KernelState::Running) {
                std::thread::sleep(Duration::from_micros(50));
                again = native::kernel_view(me).map(|v| v.state);
                sleeps += 1;
            }
            late += u32::from(sleeps > 1);
            if again != Some(native::KernelState::Running) {
                wrong.push(format!(
                    "round {round}: still {again:?} after {sleeps} switches the program saw"
                ));
            }
        }
        (stale, late, wrong)
    })
    .join()
    .unwrap();
    println!(
        "50 switch-ins hidden from the repair too: the record was stale after {stale}, set right after more than one further sleep {late} times"
    );
    assert!(
        wrong.is_empty(),
        "a thread asking about itself was not told that it runs: {wrong:#?}"
    );
    assert!(
        stale >= 25,
        "the hidden switch-ins left the record stale only {stale} times of 50: the scenario did not happen"
    );
}
