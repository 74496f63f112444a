//! Helpers of the eBPF tests (`tests/ebpf.rs`, `tests/ebpf_pressure.rs`, `tests/clh_tp_nap.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use mpsync::sched::{self, ContextBlock, native};

/// Whether the kernel answers here; prints `SKIPPED: <test>: <reason>` when it
/// may not (the program not built, not root, no BTF, or switched off by
/// `MPSYNC_EBPF=`). Any other reason fails the test, and so does every reason
/// under `MPSYNC_EBPF_REQUIRED=1`.
pub fn kernel_answers(test: &str) -> bool {
    match native::preemption_answers() {
        native::PreemptionAnswers::Ebpf => true,
        native::PreemptionAnswers::Heartbeat(why) => {
            let environmental = ["not built", "needs root", "MPSYNC_EBPF=", "BTF"]
                .iter()
                .any(|k| why.contains(k));
            assert!(
                environmental,
                "eBPF could not be used for a reason that is not the machine's: {why}"
            );
            assert!(
                std::env::var("MPSYNC_EBPF_REQUIRED").as_deref() != Ok("1"),
                "MPSYNC_EBPF_REQUIRED=1 but eBPF is not in use: {why}"
            );
            println!("SKIPPED: {test}: {why}");
            eprintln!("SKIPPED: {test}: {why}");
            false
        }
    }
}

/// Runs `f` when dropped — also while a failed assertion unwinds, so that the
/// threads of a scope are released and the failure is reported, not a hang.
pub struct OnDrop<F: FnMut()>(pub F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// Pins the calling thread to `cpu`.
pub fn pin(cpu: usize) {
    native::pin_current_thread(cpu).expect("pin");
}

/// Runs `f` on the observer (this thread, pinned to the second available CPU)
/// while a registered victim and a registered competitor, both CPU-bound, share
/// the first CPU: the victim is preempted about half the time. The victim runs
/// `on_spin` in its loop; `f` gets the victim's context block and the flag that
/// stops both (set again when `f` returns or unwinds). `None`, after printing
/// `SKIPPED: ...`, with fewer than 2 CPUs.
pub fn with_contended_victim<R>(
    on_spin: impl Fn() + Sync,
    f: impl FnOnce(&'static ContextBlock, &AtomicBool) -> R,
) -> Option<R> {
    let cpus = native::available_cpus().unwrap();
    if cpus.len() < 2 {
        println!("SKIPPED: needs 2 CPUs (an observer beside the contended one); have {cpus:?}");
        return None;
    }
    let (contended, observer_cpu) = (cpus[0], cpus[1]);
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<&'static ContextBlock>();
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            pin(contended);
            tx.send(sched::current()).unwrap();
            while !stop.load(Ordering::Relaxed) {
                on_spin();
            }
        });
        // The competitor: CPU-bound on the same CPU.
        s.spawn(|| {
            pin(contended);
            let mut x = 0u64;
            while !stop.load(Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        });
        let _release = OnDrop(|| stop.store(true, Ordering::Relaxed));
        let victim = rx.recv().unwrap();
        pin(observer_cpu);
        f(victim, &stop)
    });
    Some(r)
}

/// Runs `f` while a registered thread sleeps in a futex (`sched::park` on a
/// word of its own), once the kernel reports it blocked (within `patience`,
/// else the test fails). `f` gets the sleeper's context block and `wake`, which
/// ends the sleep (also done when `f` returns or unwinds); the sleeper runs
/// `on_wake` once its sleep has ended.
pub fn with_futex_sleeper<R>(
    patience: Duration,
    on_wake: impl FnOnce() + Send,
    f: impl FnOnce(&'static ContextBlock, &dyn Fn()) -> R,
) -> R {
    let word = mpsync::sync::AtomicU32::new(0);
    let wake = || {
        word.store(1, mpsync::sync::Ordering::Release);
        sched::unpark_all(&word);
    };
    let (tx, rx) = mpsc::channel::<&'static ContextBlock>();
    std::thread::scope(|s| {
        s.spawn(|| {
            tx.send(sched::current()).unwrap();
            while word.load(mpsync::sync::Ordering::Acquire) == 0 {
                let _ = sched::park(&word, 0, Some(Duration::from_secs(5)));
            }
            on_wake();
        });
        let _release = OnDrop(&wake);
        let sleeper = rx.recv().unwrap();
        let deadline = Instant::now() + patience;
        while native::kernel_state(sleeper) != Some(native::KernelState::Blocked) {
            assert!(
                Instant::now() < deadline,
                "a thread parked in a futex was not reported blocked within {patience:?}: {:?}",
                native::kernel_view(sleeper)
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        f(sleeper, &wake)
    })
}

/// Waits until no registered thread is preempted or woken and not yet running
/// (the threads of an earlier test may still be exiting); fails with what it
/// saw after `patience`.
pub fn wait_for_zero(what: &str, patience: Duration) {
    let deadline = Instant::now() + patience;
    let mut seen = Vec::new();
    loop {
        let n = (native::threads_preempted_now(), native::threads_woken_now());
        if n == (Some(0), Some(0)) {
            return;
        }
        if seen.last() != Some(&n) && seen.len() < 32 {
            seen.push(n);
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the counts of (preempted, woken) threads never came back to 0 in {patience:?} (values seen: {seen:?}; registered: {:?})",
            sched::live_threads()
                .iter()
                .map(|cb| native::kernel_view(cb))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Raises `flag` to `round` (the calling thread is known to run), spins for
/// `d`, lowers it: what an observer may check the kernel's answers against.
pub fn spin_flagged(flag: &std::sync::atomic::AtomicU64, round: u64, d: Duration) {
    flag.store(round, Ordering::Release);
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
    flag.store(0, Ordering::Release);
}
