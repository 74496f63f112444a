//! Absolute `timespec` deadlines, as POSIX's timed calls take them.

use std::ffi::c_int;
use std::time::Duration;

use libc::{clockid_t, timespec};

/// The deadline `t`, if it is one: EINVAL for a null pointer or a `tv_nsec`
/// outside 0..1e9.
///
/// # Safety
/// `t` is null or points to a `timespec`.
pub unsafe fn check<'a>(t: *const timespec) -> Result<&'a timespec, c_int> {
    // SAFETY: the caller's contract.
    let Some(t) = (unsafe { t.as_ref() }) else {
        return Err(libc::EINVAL);
    };
    if !(0..1_000_000_000).contains(&t.tv_nsec) {
        return Err(libc::EINVAL);
    }
    Ok(t)
}

/// Whether a timed call may measure its deadline on `clock`.
pub fn clock_ok(clock: clockid_t) -> bool {
    clock == libc::CLOCK_REALTIME || clock == libc::CLOCK_MONOTONIC
}

/// The time from now until `t` on `clock`; `None` if it has passed.
pub fn until(clock: clockid_t, t: &timespec) -> Option<Duration> {
    let mut now = timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid out-pointer; `clock` is one `clock_ok` accepts.
    unsafe { libc::clock_gettime(clock, &mut now) };
    let deadline = i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec);
    let now = i128::from(now.tv_sec) * 1_000_000_000 + i128::from(now.tv_nsec);
    let left = deadline - now;
    (left > 0).then(|| Duration::from_nanos(u64::try_from(left).unwrap_or(u64::MAX)))
}
