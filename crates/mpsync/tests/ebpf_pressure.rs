//! The kernel's counts of registered threads waiting for a CPU right now (the
//! eBPF programs on `tp_btf/sched_switch` and `tp_btf/sched_wakeup`): the
//! preempted ones (`sched::native::threads_preempted_now`, `cpu_pressure`) and
//! the woken ones not yet on a CPU (`threads_woken_now`,
//! `cpu_pressure_counting_wakeups`), and the [`Waiter`] rule that rests on them
//! (issue 13 §2: busy-wait while nobody is preempted, block otherwise):
//!
//! - a registered thread preempted by a pinned competitor makes the preempted
//!   count ≥ 1 while it is off its CPU, and both counts are 0 again once both
//!   threads are gone;
//! - a thread sleeping in a futex counts in neither;
//! - a thread woken from a futex, waiting for its CPU (held by a `SCHED_FIFO`
//!   burst), counts in the woken count only;
//! - a `Waiter` watching a running thread spins past its patience while nobody
//!   is preempted, and parks on patience under pressure or when the kernel's
//!   answers are switched off (the heartbeat behaviour, unchanged).
//!
//! A test binary of its own, its tests one at a time (`SERIAL`): the count is
//! process-wide, so no other test's threads may be registered meanwhile. Where
//! this process may not load eBPF each test prints `SKIPPED: <reason>`;
//! `MPSYNC_EBPF_REQUIRED=1` makes that a failure (as in `tests/ebpf.rs`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use mpsync::sched::{self, ContextBlock, Wait, Waiter, native};

static SERIAL: Mutex<()> = Mutex::new(());

/// Generous: a loaded 2-core CI machine.
const PATIENT: Duration = Duration::from_secs(30);

mod common;
use common::ebpf::{OnDrop, kernel_answers, pin, with_contended_victim, with_futex_sleeper};

/// The registered threads and what the kernel says of them (for messages).
fn registered() -> String {
    sched::live_threads()
        .iter()
        .map(|cb| format!("#{}: {:?}", cb.id(), native::kernel_view(cb)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// [`common::ebpf::wait_for_zero`] with this file's patience.
fn wait_for_zero(what: &str) {
    common::ebpf::wait_for_zero(what, PATIENT);
}

/// Runs `f` on the observer while a registered victim and a competitor share
/// one CPU ([`with_contended_victim`]).
fn with_pressure<R>(f: impl FnOnce(&'static ContextBlock) -> R) -> Option<R> {
    with_contended_victim(std::hint::spin_loop, |victim, _stop| f(victim))
}

#[test]
fn a_preempted_registered_thread_counts_while_off_its_cpu_and_zero_after() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !kernel_answers("a_preempted_registered_thread_counts_while_off_its_cpu_and_zero_after") {
        return;
    }
    wait_for_zero("before the test");
    let seen = with_pressure(|victim| {
        let deadline = Instant::now() + PATIENT;
        let (mut preempted_looks, mut counted) = (0u64, 0u64);
        let mut counts = Vec::new();
        while counted < 20 && Instant::now() < deadline {
            // A count read between two looks that both find the victim off
            // its CPU in the same preemption (no switch-in between).
            let Some(a) = native::kernel_view(victim) else {
                continue;
            };
            if a.state != native::KernelState::Preempted {
                continue;
            }
            let n = native::threads_preempted_now().expect("the kernel answers");
            let b = native::kernel_view(victim).expect("the victim has a slot");
            if b.state == native::KernelState::Preempted && b.switches_in == a.switches_in {
                preempted_looks += 1;
                if n >= 1 {
                    counted += 1;
                }
                if counts.len() < 16 {
                    counts.push(n);
                }
            }
        }
        assert!(
            counted >= 20,
            "the victim was seen preempted {preempted_looks} times, the count ≥ 1 meanwhile only {counted} times (counts seen: {counts:?}; victim {:?})",
            native::kernel_view(victim)
        );
        (preempted_looks, counts)
    });
    let Some((looks, counts)) = seen else { return };
    // Both threads exited (unregistered while running): nobody is preempted.
    wait_for_zero("after the victim and its competitor exited");
    println!("{looks} looks at the preempted victim; counts seen: {counts:?}");
}

#[test]
fn a_futex_sleeper_does_not_count() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !kernel_answers("a_futex_sleeper_does_not_count") {
        return;
    }
    wait_for_zero("before the test");
    with_futex_sleeper(
        PATIENT,
        || (),
        |sleeper, _wake| {
            // While it sleeps, the only other registered thread is this one, which
            // runs whenever it looks: both counts are 0 at every look.
            let until = Instant::now() + Duration::from_millis(20);
            while Instant::now() < until {
                let st = native::kernel_view(sleeper);
                let n = native::threads_preempted_now();
                let w = native::threads_woken_now();
                if native::kernel_view(sleeper) == st
                    && st.map(|v| v.state) == Some(native::KernelState::Blocked)
                {
                    assert_eq!(
                        (n, w),
                        (Some(0), Some(0)),
                        "a thread sleeping in a futex counts as (preempted, woken): {st:?}"
                    );
                }
            }
        },
    );
}

/// Pins the calling (unregistered) thread to `cpu` and makes it `SCHED_FIFO`;
/// false if the process may not.
fn fifo_on(cpu: usize) -> bool {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it;
    // sched_setaffinity/pthread_setschedparam only read what they are given.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return false;
        }
        let param = libc::sched_param { sched_priority: 1 };
        libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) == 0
    }
}

#[test]
fn a_woken_thread_counts_until_it_gets_its_cpu() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !kernel_answers("a_woken_thread_counts_until_it_gets_its_cpu") {
        return;
    }
    let cpus = native::available_cpus().unwrap();
    if cpus.len() < 2 {
        println!("SKIPPED: needs 2 CPUs; have {cpus:?}");
        return;
    }
    let (contended, observer_cpu) = (cpus[0], cpus[1]);
    let deadline = Instant::now() + PATIENT;
    let mut tries = 0;
    // (preempted, woken) at the looks that found the sleeper waiting.
    let mut counts: Vec<(Option<u64>, Option<u64>)> = Vec::new();
    loop {
        tries += 1;
        let word = mpsync::sync::AtomicU32::new(0);
        let (tx, rx) = mpsc::channel::<&'static ContextBlock>();
        let (fifo_tx, fifo_rx) = mpsc::channel::<bool>();
        let stop = AtomicBool::new(false);
        // Whether the woken sleeper was seen waiting for its CPU, counted as
        // woken and not as preempted.
        let seen = std::thread::scope(|s| {
            s.spawn(|| {
                pin(contended);
                tx.send(sched::current()).unwrap();
                while word.load(mpsync::sync::Ordering::Acquire) == 0 {
                    let _ = sched::park(&word, 0, Some(Duration::from_secs(5)));
                }
            });
            let _release = OnDrop(|| {
                stop.store(true, Ordering::Relaxed);
                word.store(1, mpsync::sync::Ordering::Release);
                sched::unpark_all(&word);
            });
            pin(observer_cpu);
            let sleeper = rx.recv().unwrap();
            while native::kernel_state(sleeper) != Some(native::KernelState::Blocked) {
                assert!(Instant::now() < deadline, "the sleeper never blocked");
                std::thread::sleep(Duration::from_millis(1));
            }
            // A SCHED_FIFO burst (not registered) holds the sleeper's CPU, so
            // that once woken it waits for it for a while.
            s.spawn(|| {
                let ok = fifo_on(contended);
                fifo_tx.send(ok).unwrap();
                let until = Instant::now() + Duration::from_millis(20);
                while ok && Instant::now() < until && !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
            if !fifo_rx.recv().unwrap() {
                return None;
            }
            let before = native::kernel_view(sleeper).expect("the sleeper has a slot");
            word.store(1, mpsync::sync::Ordering::Release);
            sched::unpark_all(&word);
            // Seen: between two looks that find it woken and not yet switched
            // in (the same wait for its CPU), the woken count says ≥ 1, the
            // preempted count 0 (nobody else registered is off its CPU: this
            // thread runs as it looks), and so do the two pressures.
            let mut seen = false;
            while native::kernel_view(sleeper).is_some_and(|v| v.switches_in == before.switches_in)
            {
                let a = native::kernel_view(sleeper);
                let n = native::threads_preempted_now();
                let w = native::threads_woken_now();
                let plain = native::cpu_pressure();
                let counting = native::cpu_pressure_counting_wakeups();
                let b = native::kernel_view(sleeper);
                let waiting = |v: Option<native::KernelView>| {
                    v.is_some_and(|v| {
                        v.woken && v.waits_for_cpu && v.switches_in == before.switches_in
                    })
                };
                if waiting(a) && waiting(b) {
                    if counts.len() < 32 {
                        counts.push((n, w));
                    }
                    if n == Some(0)
                        && w.is_some_and(|w| w >= 1)
                        && plain == Some(false)
                        && counting == Some(true)
                    {
                        seen = true;
                    }
                }
                if Instant::now() > deadline {
                    break;
                }
            }
            Some(seen)
        });
        match seen {
            None => {
                println!(
                    "SKIPPED: a_woken_thread_counts_until_it_gets_its_cpu: SCHED_FIFO not permitted"
                );
                return;
            }
            Some(true) => break,
            Some(false) => assert!(
                Instant::now() < deadline,
                "in {tries} tries, a woken thread was never seen counted as woken only while it waited for its CPU ((preempted, woken) counts at the first looks that found it waiting: {counts:?})"
            ),
        }
    }
    wait_for_zero("after the woken thread ran and exited");
}

#[test]
fn a_waiter_watching_a_running_thread_spins_past_its_patience_without_pressure() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !kernel_answers(
        "a_waiter_watching_a_running_thread_spins_past_its_patience_without_pressure",
    ) {
        return;
    }
    // This thread alone registered (an earlier test's thread unregisters
    // only as it exits, after that test released SERIAL).
    let me = sched::current();
    let deadline = Instant::now() + PATIENT;
    while sched::live_threads().len() > 1 {
        assert!(
            Instant::now() < deadline,
            "other registered threads stayed: {}",
            registered()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    wait_for_zero("before the test");
    // Nobody else is registered, and this thread runs whenever it looks:
    // nobody is preempted and the watched thread (this one) runs, so a Park
    // is wrong — unless the kernel's state of this thread is stale (a
    // switch-in the program did not see, which tests/ebpf.rs has met too:
    // then the state says preempted while the thread runs). Such a look is
    // not the Waiter's fault: it is counted, and the thread takes a fresh
    // switch (a 1 ms sleep) before spinning on.
    // Both kinds of episode: nobody is woken and waiting either.
    for counting in [false, true] {
        let fresh = || {
            let w = Waiter::with_patience_ns(1_000);
            if counting { w.counting_wakeups() } else { w }
        };
        let until = Instant::now() + Duration::from_millis(20);
        let (mut spins, mut stale) = (0u64, 0u32);
        let mut w = fresh();
        while Instant::now() < until {
            spins += 1;
            if w.spin(Some(me)) == Wait::Spin {
                continue;
            }
            let (n, view) = (native::threads_preempted_now(), native::kernel_view(me));
            if view.map(|v| v.state) == Some(native::KernelState::Preempted) && stale < 100 {
                assert_eq!(
                    n,
                    Some(1),
                    "this thread's state is stale (preempted while it runs): the count must say exactly that one ({view:?})"
                );
                stale += 1;
                std::thread::sleep(Duration::from_millis(1));
                w = fresh();
                continue;
            }
            panic!(
                "after {spins} spins the waiter (counting wake-ups: {counting}) advised parking on patience alone, though nobody was preempted or woken (counts {n:?}, {:?}; watched {view:?}; registered: {})",
                native::threads_woken_now(),
                registered()
            );
        }
        println!("counting wake-ups {counting}: {spins} spins, {stale} stale looks");
    }
    // Nothing watched: a plain patience, as before.
    let mut w = Waiter::with_patience_ns(1_000);
    let deadline = Instant::now() + PATIENT;
    while w.spin(None) == Wait::Spin {
        assert!(
            Instant::now() < deadline,
            "spin(None) never advised parking"
        );
    }
}

#[test]
fn a_waiter_parks_on_patience_under_pressure() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !kernel_answers("a_waiter_parks_on_patience_under_pressure") {
        return;
    }
    wait_for_zero("before the test");
    with_pressure(|_victim| {
        // The watched thread (the observer itself) runs; the victim is
        // preempted about half the time: the patience advises parking. A Park
        // counts only if the kernel's state of this thread is not stale at
        // that moment (see the test above): else it may have come from
        // "the watched thread is preempted", not from the patience.
        let me = sched::current();
        let (mut parks, mut stale) = (0, 0u32);
        let deadline = Instant::now() + PATIENT;
        while parks < 5 {
            let mut w = Waiter::with_patience_ns(1_000);
            while w.spin(Some(me)) == Wait::Spin {
                assert!(
                    Instant::now() < deadline,
                    "under pressure ({parks} parks so far, {stale} stale looks) a waiter never advised parking on patience (count now {:?})",
                    native::threads_preempted_now()
                );
            }
            if native::kernel_state(me) == Some(native::KernelState::Running) {
                parks += 1;
            } else {
                stale += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(
                Instant::now() < deadline,
                "under pressure only {parks} parks on patience in {PATIENT:?} ({stale} stale looks)"
            );
        }
    });
}

#[test]
fn without_the_kernels_answers_patience_parks_as_before() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !kernel_answers("without_the_kernels_answers_patience_parks_as_before") {
        return;
    }
    let was = native::set_kernel_answers(false);
    let _restore = OnDrop(move || {
        native::set_kernel_answers(was);
    });
    assert_eq!(
        (
            native::cpu_pressure(),
            native::cpu_pressure_counting_wakeups()
        ),
        (None, None),
        "answers off: pressure unknown"
    );
    let me = sched::current();
    let mut w = Waiter::with_patience_ns(1_000);
    let deadline = Instant::now() + PATIENT;
    while w.spin(Some(me)) == Wait::Spin {
        assert!(
            Instant::now() < deadline,
            "with the kernel's answers off, the patience never advised parking"
        );
    }
}
