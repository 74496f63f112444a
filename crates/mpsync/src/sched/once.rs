//! A once-per-process initialisation that a child of `fork` can always finish.
//!
//! `std::sync::Once` (and `OnceLock`) wait for a thread that is running the
//! initialisation; in a child forked while another thread of the parent ran
//! it, that thread does not exist, and the child would wait forever. A
//! [`ForkSafeOnce`] remembers *which process* runs it: a child that finds it
//! begun by another process runs it again itself (what the initialisations
//! here do — install a handler, create a key — is fine to do twice).

use std::sync::atomic::{AtomicU64, Ordering};

/// Not begun; being run; done (the low two bits of the state; the pid of the
/// process that began it above them).
const NONE: u64 = 0;
const RUNNING: u64 = 1;
const DONE: u64 = 2;

/// See the module doc. A `std` atomic: process-wide set-up, outside anything
/// loom models or the chaos build perturbs.
#[derive(Debug)]
pub(crate) struct ForkSafeOnce {
    state: AtomicU64,
}

impl ForkSafeOnce {
    pub(crate) const fn new() -> Self {
        Self {
            state: AtomicU64::new(NONE),
        }
    }

    /// Runs `f` unless it ran (or runs now) in this process; waits for a
    /// thread of this process that runs it. `f` must be fine to run again in a
    /// child of `fork` (it may find the parent's work half done).
    pub(crate) fn call(&self, f: impl FnOnce()) {
        // SAFETY: getpid has no preconditions.
        let me = (unsafe { libc::getpid() } as u32 as u64) << 2;
        let mut f = Some(f);
        loop {
            // Acquire: pairs with the Release store of DONE: what `f` did is
            // seen by whoever finds it done.
            let s = self.state.load(Ordering::Acquire);
            match s & 3 {
                DONE => return,
                RUNNING if s & !3 == me => {
                    // Another thread of this process runs it: wait (rare, and
                    // short: installing a handler).
                    // SAFETY: sched_yield has no preconditions.
                    unsafe { libc::sched_yield() };
                }
                _ => {
                    // Not begun — or begun by the process we were forked
                    // from, whose thread running it is not ours.
                    // Relaxed: only the winner runs `f`; DONE publishes it.
                    if self
                        .state
                        .compare_exchange(s, me | RUNNING, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
                    {
                        if let Some(f) = f.take() {
                            f();
                        }
                        // Release: see the Acquire load above.
                        self.state.store(me | DONE, Ordering::Release);
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn runs_once_in_a_process() {
        let once = ForkSafeOnce::new();
        let mut n = 0;
        once.call(|| n += 1);
        once.call(|| n += 1);
        assert_eq!(n, 1);
    }

    #[test]
    #[cfg_attr(miri, ignore)] // fork
    fn a_child_forked_while_another_thread_runs_it_runs_it_again() {
        let once = &ForkSafeOnce::new();
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            s.spawn(move || {
                once.call(|| {
                    started_tx.send(()).unwrap();
                    go_rx.recv().unwrap();
                })
            });
            started_rx.recv().unwrap();
            // SAFETY: the child only runs `call` (atomics, getpid, a plain
            // closure) and leaves with _exit.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0);
            if pid == 0 {
                let mut ran = false;
                once.call(|| ran = true);
                // SAFETY: ends the child without running the parent's destructors.
                unsafe { libc::_exit(if ran { 0 } else { 1 }) };
            }
            go_tx.send(()).unwrap();
            let mut status = 0;
            // SAFETY: waits for the child forked above (it cannot hang: `call`
            // never waits for another process's runner).
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "the child did not run it: {status:#x}"
            );
        });
    }
}
