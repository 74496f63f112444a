//! Interposed condition variables.
//!
//! # Representation
//!
//! | bytes  | glibc's field   | an interposed condvar's use                           |
//! |--------|-----------------|-------------------------------------------------------|
//! | 0..4   | `__wseq` (low)  | `seq`: bumped by every signal; the futex waiters sleep on |
//! | 4..8   | `__wseq` (high) | `waiters`: threads between announcing a wait and waking |
//! | 36..40 | `__wrefs`       | `flags`: bit 0 process-shared (then all 48 bytes are glibc's), bit 1 `CLOCK_MONOTONIC` |
//! | 40..44 | `__g_signals[0]`| `state`: `DESTROYED` after `destroy`                  |
//!
//! `PTHREAD_COND_INITIALIZER` is all zero bytes: an interposed condvar on
//! `CLOCK_REALTIME`. glibc's `pthread_cond_init` sets bit 0 of `__wrefs` for
//! a process-shared condvar, so one made with that attribute is glibc's
//! from then on (and must be waited on with a process-shared mutex: glibc's
//! too; with an interposed mutex the wait says EINVAL).
//!
//! # The protocol, and why not `mpsync::Condvar` itself
//!
//! The protocol is [`mpsync::Condvar`]'s (a sequence word and a waiter count,
//! SeqCst fences on both sides, `sched::park`/`unpark`), with one change
//! POSIX needs: a waiter stops counting itself (its last access to the
//! condvar's memory) *before* it re-locks the mutex, not after. POSIX lets a
//! program destroy and free a condvar as soon as no thread is blocked on it —
//! right after a broadcast, while the woken threads still wait for the mutex
//! the destroyer may hold — so `destroy` waits for the count to reach zero,
//! which it may do only if nobody needs the mutex to get there.
//! `mpsync::Condvar` keeps its count until after the re-lock (its memory is
//! owned by Rust, which cannot free it under a waiter).
//!
//! The mutex is released and re-taken through the interposer's own
//! `unlock`/`lock`, so a condvar works with interposed and delegated (glibc)
//! mutexes alike: a recursive or error-checking mutex is released once and
//! re-taken once, as glibc does.

use std::ffi::c_int;
use std::time::Duration;

use libc::{pthread_cond_t, timespec};
use mpsync::sched::{self, ParkResult};
use mpsync::sync::{AtomicU32, Ordering, fence};

use crate::config::{self, Delegated};
use crate::mutex::{self, Mutex};
use crate::real;
use crate::time;

/// `state` of a destroyed condvar.
const DESTROYED: u32 = 0xdead_c0de;
/// `flags`: glibc's process-shared bit (`__PTHREAD_COND_SHARED_MASK`).
const SHARED: u32 = 1;
/// `flags`: glibc's monotonic-clock bit (`__PTHREAD_COND_CLOCK_MONOTONIC_MASK`).
const MONOTONIC: u32 = 2;

/// How long a `destroy` that waits for leaving waiters naps between looks.
const DESTROY_NAP: Duration = Duration::from_micros(100);

/// The bytes of a `pthread_cond_t` as an interposed condvar sees them.
#[repr(C)]
pub struct CondRepr {
    seq: AtomicU32,
    waiters: AtomicU32,
    _glibc: [u32; 7],
    flags: AtomicU32,
    state: AtomicU32,
    _rest: u32,
}

const _: () = assert!(std::mem::size_of::<pthread_cond_t>() == 48);
const _: () = assert!(std::mem::size_of::<CondRepr>() == 48);
const _: () = assert!(std::mem::offset_of!(CondRepr, flags) == 36);

/// A condvar as the entry points see it.
#[derive(Clone, Copy)]
pub enum Cond<'a> {
    /// Interposed.
    Ours(&'a CondRepr),
    /// glibc's (process-shared).
    Glibc(*mut pthread_cond_t),
}

impl<'a> Cond<'a> {
    /// Which of the two `c` is.
    ///
    /// # Safety
    /// `c` points to a `pthread_cond_t` valid for `'a`.
    #[inline]
    pub unsafe fn classify(c: *mut pthread_cond_t) -> Cond<'a> {
        // SAFETY: the caller's contract; `CondRepr` has its size and layout,
        // and every field is valid for any bytes.
        let r = unsafe { &*c.cast::<CondRepr>() };
        // Relaxed: written at init, before the condvar is shared.
        if r.flags.load(Ordering::Relaxed) & SHARED != 0 {
            Cond::Glibc(c)
        } else {
            Cond::Ours(r)
        }
    }

    /// An interposed condvar, whatever its flags (the `mpsync_cond_*` API).
    ///
    /// # Safety
    /// As for `classify`.
    pub unsafe fn ours(c: *mut pthread_cond_t) -> Cond<'a> {
        // SAFETY: as in `classify`.
        Cond::Ours(unsafe { &*c.cast::<CondRepr>() })
    }
}

/// `pthread_cond_init` for an interposed condvar.
///
/// # Safety
/// `c` is valid for writes of a `pthread_cond_t` and not in use.
pub unsafe fn init_ours(c: *mut pthread_cond_t, monotonic: bool) {
    // SAFETY: the caller's contract.
    unsafe {
        std::ptr::write_bytes(c, 0, 1);
        let r = &*c.cast::<CondRepr>();
        // Relaxed: before the condvar is shared (see `classify`).
        r.flags
            .store(if monotonic { MONOTONIC } else { 0 }, Ordering::Relaxed);
    }
}

/// Waits on `c` with `m` held; `deadline` is an absolute time, on the
/// condvar's clock, or on `clock` where given (`pthread_cond_clockwait`).
///
/// # Safety
/// `deadline`, if given, is null or points to a `timespec`; `m` is valid
/// for as long as the wait lasts.
pub unsafe fn wait(
    c: Cond<'_>,
    m: Mutex<'_>,
    deadline: Option<*const timespec>,
    clock: Option<libc::clockid_t>,
) -> c_int {
    let t = match deadline {
        // SAFETY: the caller's contract.
        Some(t) => match unsafe { time::check(t) } {
            Ok(t) => Some(t),
            Err(e) => return e,
        },
        None => None,
    };
    if let Some(k) = clock
        && !time::clock_ok(k)
    {
        return libc::EINVAL;
    }
    match (c, m) {
        (Cond::Ours(r), m) => wait_ours(r, m, t, clock),
        (Cond::Glibc(cp), Mutex::Glibc(mp)) => match (t, clock) {
            // SAFETY: glibc's condvar and mutex, as `classify` found.
            (None, _) => unsafe { real::cond_wait(cp, mp) },
            // SAFETY: as above.
            (Some(t), None) => unsafe { real::cond_timedwait(cp, mp, t) },
            // SAFETY: as above.
            (Some(t), Some(k)) => unsafe { real::cond_clockwait(cp, mp, k, t) },
        },
        (Cond::Glibc(_), Mutex::Ours(_)) => {
            config::note(Delegated::SharedCondPrivateMutex);
            libc::EINVAL
        }
    }
}

fn wait_ours(
    c: &CondRepr,
    m: Mutex<'_>,
    t: Option<&timespec>,
    clock: Option<libc::clockid_t>,
) -> c_int {
    // Relaxed: a check for a program's mistake; see `destroy`.
    if c.state.load(Ordering::Relaxed) == DESTROYED {
        return libc::EINVAL;
    }
    if !mutex::owned(m) {
        return libc::EPERM;
    }
    let clock = clock.unwrap_or_else(|| {
        // Relaxed: written at init, before the condvar was shared.
        if c.flags.load(Ordering::Relaxed) & MONOTONIC != 0 {
            libc::CLOCK_MONOTONIC
        } else {
            libc::CLOCK_REALTIME
        }
    });
    // Relaxed: ordered before the read of `seq` by the fence.
    c.waiters.fetch_add(1, Ordering::Relaxed);
    // SeqCst fence: pairs with the notifier's fence in `notify` (Dekker:
    // either it sees our count, or we see its bump) and with `destroy`'s.
    fence(Ordering::SeqCst);
    // Relaxed: ordered by the fence; read while we still hold the mutex, so
    // every notification made after we release it bumps `seq` past this.
    let seq = c.seq.load(Ordering::Relaxed);
    let rc = mutex::unlock(m);
    if rc != 0 {
        leave(c);
        return rc;
    }
    let timed_out = match t {
        None => {
            sched::park(&c.seq, seq, None);
            false
        }
        Some(t) => match time::until(clock, t) {
            None => true,
            Some(left) => sched::park(&c.seq, seq, Some(left)) == ParkResult::TimedOut,
        },
    };
    leave(c);
    // The condvar's memory is not touched from here on (module doc).
    let rc = mutex::lock(m);
    if rc != 0 {
        return rc; // e.g. EOWNERDEAD from a robust mutex
    }
    if timed_out { libc::ETIMEDOUT } else { 0 }
}

/// A waiter's last access to the condvar.
#[inline]
fn leave(c: &CondRepr) {
    // Release: pairs with `destroy`'s Acquire load: everything this waiter
    // did with the condvar happens before `destroy` returns.
    c.waiters.fetch_sub(1, Ordering::Release);
}

/// `pthread_cond_signal` (`all`: `_broadcast`).
pub fn notify(c: Cond<'_>, all: bool) -> c_int {
    match c {
        Cond::Ours(r) => {
            // Relaxed: a check for a program's mistake.
            if r.state.load(Ordering::Relaxed) == DESTROYED {
                return libc::EINVAL;
            }
            // Relaxed: what the notifier wrote is published by the mutex,
            // not by `seq`; the kernel's futex compare reads `seq` itself.
            r.seq.fetch_add(1, Ordering::Relaxed);
            // SeqCst fence: pairs with the waiter's fence in `wait_ours`.
            fence(Ordering::SeqCst);
            // Relaxed: ordered after the bump by the fence.
            if r.waiters.load(Ordering::Relaxed) != 0 {
                if all {
                    sched::unpark_all(&r.seq);
                } else {
                    sched::unpark_one(&r.seq);
                }
            }
            0
        }
        // SAFETY: glibc's condvar, as `classify` found.
        Cond::Glibc(p) if all => unsafe { real::cond_broadcast(p) },
        // SAFETY: as above.
        Cond::Glibc(p) => unsafe { real::cond_signal(p) },
    }
}

/// `pthread_cond_destroy`: wakes any waiter still there and waits until
/// every waiter has stopped touching the condvar (they may still be
/// re-taking their mutex); EINVAL if destroyed already.
pub fn destroy(c: Cond<'_>) -> c_int {
    let r = match c {
        Cond::Ours(r) => r,
        // SAFETY: glibc's condvar, as `classify` found.
        Cond::Glibc(p) => return unsafe { real::cond_destroy(p) },
    };
    // Relaxed: a program's mistake (destroying twice) is all this detects.
    if r.state.swap(DESTROYED, Ordering::Relaxed) == DESTROYED {
        return libc::EINVAL;
    }
    loop {
        // Relaxed + SeqCst fence: as a notification (see `notify`), so a
        // waiter between its count and its park does not sleep through it.
        r.seq.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        // Acquire: pairs with `leave`'s Release.
        let w = r.waiters.load(Ordering::Acquire);
        if w == 0 {
            return 0;
        }
        sched::unpark_all(&r.seq);
        // Waiters leave without waking us (after leaving they may not touch
        // the condvar), so nap and look again.
        sched::park(&r.waiters, w, Some(DESTROY_NAP));
    }
}
