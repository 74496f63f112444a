//! The preemption signal and its handler: how a thread is stopped.
//!
//! The scheduler CASes a thread's state word to `Preempted` (under its lock) and
//! then sends it [`preemption_signal`]. The handler stops the thread only if its
//! state word says `Preempted` — a stray or late signal returns at once — and the
//! preemption stands: the scheduler decided on a read of the thread's no-preempt
//! request word from its own thread, and here, on the owner, that word is exact,
//! so a request that began after the read undoes the preemption
//! ([`ContextBlock::on_preemption_signal`]; counted in
//! [`SchedStats::preemptions_undone`](super::SchedStats::preemptions_undone)).
//! A stopped thread waits until the scheduler resumes it: that wait is the time
//! the processor spends on the other applications. Everything here is
//! async-signal-safe.

use std::sync::atomic::{AtomicI32, Ordering as StdOrdering};
use std::time::Duration;

use crate::sched::context::{ContextBlock, SignalVerdict};
use crate::sched::registry;
use crate::sched::state::ThreadState;
use crate::sync::{Ordering, spin_loop};
use crate::util::clock::now_ns;

use super::attach::{detach_in_forked_child, shared_of};
use super::{SchedError, Shared};
use crate::sched::once::ForkSafeOnce;
use crate::sched::stall;

/// The signal the pseudo-scheduler preempts with: `SIGRTMIN + 3`.
pub fn preemption_signal() -> i32 {
    libc::SIGRTMIN() + 3
}

/// Once per process, and once more in a child of `fork` forked while another
/// thread installed them (a `Once` would make that child wait forever).
static HANDLER: ForkSafeOnce = ForkSafeOnce::new();
/// Why installing failed: 0 (it did not), `errno` of `sigaction`, or minus
/// the error of `pthread_atfork`. An atomic, not a lock a child of `fork`
/// could find held.
static HANDLER_ERR: AtomicI32 = AtomicI32::new(0);

/// Errno is thread-local and the handler may run between a syscall and the read of
/// its errno: save and restore it.
struct ErrnoGuard(i32);

impl ErrnoGuard {
    fn save() -> Self {
        // SAFETY: __errno_location returns the calling thread's errno slot.
        Self(unsafe { *libc::__errno_location() })
    }
}

impl Drop for ErrnoGuard {
    fn drop(&mut self) {
        // SAFETY: as in `save`.
        unsafe { *libc::__errno_location() = self.0 };
    }
}

/// The preemption handler. Async-signal-safe: a const thread-local read, atomics,
/// `clock_gettime` and the futex syscall only.
extern "C" fn on_preempt_signal(_sig: libc::c_int) {
    let _errno = ErrnoGuard::save();
    // The chaos build does not perturb the handler: its timing is the experiment
    // (and a const thread-local counter is all `Exempt` touches).
    let _quiet = crate::sync::Exempt::new();
    let Some(cb) = registry::current_if_registered() else {
        return;
    };
    match cb.on_preemption_signal() {
        SignalVerdict::NotPreempted => return,
        SignalVerdict::Undone => {
            if let Some(s) = shared_of(cb) {
                // Relaxed: a statistic, read when the scheduler snapshots them.
                s.undone.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        SignalVerdict::Stop => {}
    }
    // Relaxed: read by the scheduler for statistics only, after it sees the resume.
    cb.owner
        .preempt_stopped_ns
        .store(now_ns(), Ordering::Relaxed);
    // Relaxed: a statistic (`ContextBlock::times_stopped`).
    cb.owner.stops.fetch_add(1, Ordering::Relaxed);
    wait_resumed(cb, blocking_wait(cb));
}

/// Whether `cb`'s scheduler wants a preempted thread to sleep rather than spin.
fn blocking_wait(cb: &ContextBlock) -> bool {
    shared_of(cb).is_some_and(Shared::blocking)
}

/// Waits while the scheduler keeps `cb` preempted: in the handler, and in a
/// thread's own yield ([`super::yield_attached`]).
pub(super) fn wait_resumed(cb: &ContextBlock, block: bool) {
    loop {
        // Acquire: pairs with the Release bump in `resume`.
        let seq = cb.sched.resume.load(Ordering::Acquire);
        if cb.state() != ThreadState::Preempted {
            return;
        }
        if block {
            crate::sched::futex::wait(&cb.sched.resume, seq, Some(Duration::from_millis(1)));
        } else {
            spin_loop();
        }
    }
}

/// Installs the preemption handler and the fork handler, once per process.
pub(super) fn install_handler() -> Result<(), SchedError> {
    HANDLER.call(|| {
        stall::point(stall::SCHED_EMU_HANDLER);
        // SAFETY: `sa` is zero-initialized then filled; the handler is an `extern "C"`
        // function that only does async-signal-safe work; SA_RESTART makes interrupted
        // syscalls (e.g. a parked futex wait) restart or report EINTR, which every
        // caller of `park` already handles.
        let r = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_preempt_signal as extern "C" fn(libc::c_int) as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(preemption_signal(), &sa, std::ptr::null_mut())
        };
        if r != 0 {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(1);
            // Relaxed: published by the once's Release store.
            HANDLER_ERR.store(errno.max(1), StdOrdering::Relaxed);
            return;
        }
        // SAFETY: `detach_in_forked_child` is an `extern "C"` function with no
        // arguments that does only async-signal-safe work, as a child handler must
        // (and is idempotent: installed twice — again in a child forked while
        // the parent installed it — it runs twice at a fork, harmlessly).
        let r = unsafe { libc::pthread_atfork(None, None, Some(detach_in_forked_child)) };
        if r != 0 {
            // Relaxed: as above.
            HANDLER_ERR.store(-r.max(1), StdOrdering::Relaxed);
        }
    });
    // Relaxed: the once's Acquire load ordered this after its store.
    match HANDLER_ERR.load(StdOrdering::Relaxed) {
        0 => Ok(()),
        e if e > 0 => Err(SchedError::Os(format!(
            "sigaction failed: {}",
            std::io::Error::from_raw_os_error(e)
        ))),
        e => Err(SchedError::Os(format!(
            "pthread_atfork failed: {}",
            std::io::Error::from_raw_os_error(-e)
        ))),
    }
}
