//! The two-level barrier under a real partition change: while 6 threads run
//! barrier episodes, the test shrinks the process's CPU set
//! (`sched_setaffinity` on the process) to one CPU and later restores it. The
//! barrier must reorganize after each change (to one processor group, then
//! back to as many as the mask has) and stay correct throughout. Its own test
//! binary: narrowing the process's mask must not slow other tests' threads.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mpsync::barrier::{Barrier, ScalableSc};
use mpsync::sched::native::available_cpus;

/// Restores the process's CPU set when dropped (also when the test fails).
struct Mask(libc::cpu_set_t);

fn get_mask() -> libc::cpu_set_t {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the kernel fills it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(
            libc::sched_getaffinity(
                libc::getpid(),
                std::mem::size_of::<libc::cpu_set_t>(),
                &mut set
            ),
            0
        );
        set
    }
}

fn set_mask(set: &libc::cpu_set_t) {
    // SAFETY: `set` is a valid cpu_set_t; the call only reads it.
    let r = unsafe {
        libc::sched_setaffinity(libc::getpid(), std::mem::size_of::<libc::cpu_set_t>(), set)
    };
    assert_eq!(
        r,
        0,
        "sched_setaffinity: {}",
        std::io::Error::last_os_error()
    );
}

impl Drop for Mask {
    fn drop(&mut self) {
        set_mask(&self.0);
    }
}

#[test]
fn scalable_sc_reorganizes_when_the_cpu_set_changes() {
    let cpus = available_cpus().expect("affinity mask");
    assert!(
        cpus.len() >= 2,
        "this test needs at least 2 CPUs in the affinity mask to shrink it (have {cpus:?})"
    );
    let n = 6;
    let b = ScalableSc::new(n).unwrap();
    let episodes = AtomicU64::new(0);
    let early = AtomicU64::new(0);
    let arrivals = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let want_stop = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs(30);
    let wait_for = |what: &str, cond: &dyn Fn() -> bool| {
        while !cond() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {b:?}"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    std::thread::scope(|s| {
        for id in 0..n {
            let (b, episodes, early, arrivals, stop, want_stop) =
                (&b, &episodes, &early, &arrivals, &stop, &want_stop);
            s.spawn(move || {
                let mut waits = 0u64;
                loop {
                    // Two waits per iteration; the stop flag is set by the
                    // leader of the first and read after the second.
                    for half in 0..2 {
                        arrivals.fetch_add(1, Ordering::SeqCst);
                        let r = b.wait(id);
                        waits += 1;
                        if arrivals.load(Ordering::SeqCst) < waits * n as u64 {
                            early.fetch_add(1, Ordering::Relaxed);
                        }
                        if r.is_leader() {
                            episodes.fetch_add(1, Ordering::SeqCst);
                            if half == 0
                                && (want_stop.load(Ordering::SeqCst) || Instant::now() >= deadline)
                            {
                                stop.store(true, Ordering::SeqCst);
                            }
                        }
                    }
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                }
            });
        }
        let full = Mask(get_mask());
        let r0 = b.reorganizations();
        wait_for("200 episodes", &|| episodes.load(Ordering::SeqCst) >= 200);
        // Shrink to the first CPU.
        // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes in range.
        let one = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpus[0], &mut set);
            set
        };
        set_mask(&one);
        wait_for("a reorganization to one processor group", &|| {
            b.reorganizations() > r0 && b.groups() == 1
        });
        let r1 = b.reorganizations();
        let e1 = episodes.load(Ordering::SeqCst);
        wait_for("100 episodes on one CPU", &|| {
            episodes.load(Ordering::SeqCst) >= e1 + 100
        });
        drop(full); // grow back
        wait_for("a reorganization back to the full mask", &|| {
            b.reorganizations() > r1 && b.groups() == cpus.len().min(n)
        });
        let e2 = episodes.load(Ordering::SeqCst);
        wait_for("100 more episodes", &|| {
            episodes.load(Ordering::SeqCst) >= e2 + 100
        });
        // Only a leader, between the two waits of an iteration, sets `stop`,
        // so that every thread reads the same decision.
        want_stop.store(true, Ordering::SeqCst);
    });
    assert_eq!(
        early.into_inner(),
        0,
        "a wait returned before everyone arrived"
    );
}
