//! `park`/`unpark` on a 32-bit word: the Linux futex, the only place in mpsync
//! that calls it. Under loom, parking is a model yield (callers re-check anyway).

use std::time::Duration;

use crate::sync::AtomicU32;

/// How a [`park`](super::park) ended. Either way the caller re-checks its condition:
/// wake-ups may be spurious.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParkResult {
    /// Woken by `unpark`, a signal, or spuriously.
    Woken,
    /// The word did not hold the expected value; did not sleep.
    Mismatch,
    /// The timeout passed.
    TimedOut,
}

#[cfg(not(loom))]
pub(crate) fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> ParkResult {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned 32-bit atomic for the duration of the call;
    // FUTEX_WAIT only reads it; `ts_ptr` is null or points to a live timespec.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            ts_ptr,
        )
    };
    if r == 0 {
        return ParkResult::Woken;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) => ParkResult::Mismatch,
        Some(libc::ETIMEDOUT) => ParkResult::TimedOut,
        _ => ParkResult::Woken, // EINTR: a signal (e.g. the pseudo-scheduler's)
    }
}

#[cfg(not(loom))]
pub(crate) fn wake(word: &AtomicU32, n: i32) -> usize {
    // SAFETY: `word` is a live, aligned 32-bit atomic; FUTEX_WAKE does not access
    // memory, it only wakes waiters queued on this address.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            n,
        )
    };
    r.max(0) as usize
}

#[cfg(loom)]
pub(crate) fn wait(word: &AtomicU32, expected: u32, _timeout: Option<Duration>) -> ParkResult {
    use crate::sync::Ordering;
    if word.load(Ordering::Acquire) != expected {
        return ParkResult::Mismatch;
    }
    loom::thread::yield_now();
    ParkResult::Woken
}

#[cfg(loom)]
pub(crate) fn wake(_word: &AtomicU32, _n: i32) -> usize {
    0
}
