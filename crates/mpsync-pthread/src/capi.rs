//! The exported C functions: glibc's `pthread_*` names (the interposer) and
//! the `mpsync_*` names of `include/mpsync_pthread.h`.
//!
//! Every function takes the C caller's pointers as POSIX does: a pointer to
//! an initialized (or statically initialized) object, valid for the call.
//! That is their safety contract; none checks more than POSIX asks for.

// SAFETY (every `#[unsafe(no_mangle)]` below): these names are exported on
// purpose, to take the place of glibc's functions of the same names (or to be
// the header's); each has the C signature of the function it replaces, and no
// other symbol of the process is meant to have these `mpsync_*` names.

use std::ffi::{c_char, c_int};

use libc::timespec;
use libc::{clockid_t, pthread_cond_t, pthread_condattr_t, pthread_mutex_t, pthread_mutexattr_t};

use crate::cond::{self, Cond};
use crate::config::{self, Delegated};
use crate::mutex::{self, Mutex, MutexRepr};
use crate::real;

/// The name of the lock in use (`MPSYNC_LOCK`'s value, or the default), a
/// static NUL-terminated string.
#[unsafe(no_mangle)]
pub extern "C" fn mpsync_pthread_lock_name() -> *const c_char {
    config::kind().c_name().as_ptr()
}

/// Which attributes of `a` send a mutex to glibc (`None`: ours).
///
/// # Safety
/// `a` points to an initialized mutex attribute object.
unsafe fn delegated_by(a: *const pthread_mutexattr_t) -> Option<Delegated> {
    let (mut ty, mut proto, mut robust, mut shared) = (0, 0, 0, 0);
    // SAFETY: the caller's contract; the out-pointers are valid.
    unsafe {
        real::pthread_mutexattr_gettype(a, &mut ty);
        real::pthread_mutexattr_getprotocol(a, &mut proto);
        real::pthread_mutexattr_getrobust(a, &mut robust);
        real::pthread_mutexattr_getpshared(a, &mut shared);
    }
    if ty == libc::PTHREAD_MUTEX_RECURSIVE {
        Some(Delegated::Recursive)
    } else if ty == libc::PTHREAD_MUTEX_ERRORCHECK {
        Some(Delegated::ErrorCheck)
    } else if robust != 0 {
        Some(Delegated::Robust)
    } else if proto == libc::PTHREAD_PRIO_INHERIT {
        Some(Delegated::PrioInherit)
    } else if proto == libc::PTHREAD_PRIO_PROTECT {
        Some(Delegated::PrioProtect)
    } else if shared == libc::PTHREAD_PROCESS_SHARED {
        Some(Delegated::SharedMutex)
    } else {
        None // normal, default or adaptive, private: ours
    }
}

/// `pthread_mutex_init`: ours unless `a` asks for what we do not implement.
///
/// # Safety
/// `m` is valid for writes of a `pthread_mutex_t` and not in use; `a` is null
/// or an initialized attribute object.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_init(
    m: *mut pthread_mutex_t,
    a: *const pthread_mutexattr_t,
) -> c_int {
    if m.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: `a` is null or initialized (the caller's contract).
    if !a.is_null()
        && let Some(d) = unsafe { delegated_by(a) }
    {
        config::note(d);
        // SAFETY: glibc's init on the caller's memory and attribute.
        return unsafe { real::mutex_init(m, a) };
    }
    // SAFETY: `m` is valid for writes and not in use (the caller's contract).
    unsafe {
        std::ptr::write_bytes(m, 0, 1);
        mutex::init_ours(&*m.cast::<MutexRepr>());
    }
    0
}

/// `pthread_mutex_lock`.
///
/// # Safety
/// `m` points to an initialized mutex.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_lock(m: *mut pthread_mutex_t) -> c_int {
    if m.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract.
    mutex::lock(unsafe { Mutex::classify(m) })
}

/// `pthread_mutex_trylock`: `EBUSY` if held.
///
/// # Safety
/// As `pthread_mutex_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_trylock(m: *mut pthread_mutex_t) -> c_int {
    if m.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract.
    mutex::trylock(unsafe { Mutex::classify(m) })
}

/// `pthread_mutex_timedlock`: by `t` (absolute, `CLOCK_REALTIME`).
///
/// # Safety
/// As `pthread_mutex_lock`; `t` points to a `timespec`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_timedlock(
    m: *mut pthread_mutex_t,
    t: *const timespec,
) -> c_int {
    if m.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract.
    unsafe { mutex::timedlock(Mutex::classify(m), libc::CLOCK_REALTIME, t) }
}

/// `pthread_mutex_clocklock` (glibc 2.30): by `t` on `clock`.
///
/// # Safety
/// As `pthread_mutex_timedlock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_clocklock(
    m: *mut pthread_mutex_t,
    clock: clockid_t,
    t: *const timespec,
) -> c_int {
    if m.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract.
    unsafe { mutex::timedlock(Mutex::classify(m), clock, t) }
}

/// `pthread_mutex_unlock`: `EPERM` if the caller does not hold it.
///
/// # Safety
/// As `pthread_mutex_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_unlock(m: *mut pthread_mutex_t) -> c_int {
    if m.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract.
    mutex::unlock(unsafe { Mutex::classify(m) })
}

/// `pthread_mutex_destroy`: `EBUSY` if held.
///
/// # Safety
/// As `pthread_mutex_lock`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_destroy(m: *mut pthread_mutex_t) -> c_int {
    if m.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract.
    mutex::destroy(unsafe { Mutex::classify(m) })
}

/// `pthread_cond_init`: glibc's if `a` makes it process-shared.
///
/// # Safety
/// `c` is valid for writes of a `pthread_cond_t` and not in use; `a` is null
/// or an initialized attribute object.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_init(
    c: *mut pthread_cond_t,
    a: *const pthread_condattr_t,
) -> c_int {
    if c.is_null() {
        return libc::EINVAL;
    }
    let mut monotonic = false;
    if !a.is_null() {
        let (mut shared, mut clock) = (0, libc::CLOCK_REALTIME);
        // SAFETY: `a` is initialized (the caller's contract); valid out-pointers.
        unsafe {
            real::pthread_condattr_getpshared(a, &mut shared);
            real::pthread_condattr_getclock(a, &mut clock);
        }
        if shared == libc::PTHREAD_PROCESS_SHARED {
            config::note(Delegated::SharedCond);
            // SAFETY: glibc's init on the caller's memory and attribute.
            return unsafe { real::cond_init(c, a) };
        }
        monotonic = clock == libc::CLOCK_MONOTONIC;
    }
    // SAFETY: the caller's contract.
    unsafe { cond::init_ours(c, monotonic) };
    0
}

/// `pthread_cond_wait`.
///
/// # Safety
/// `c` and `m` point to initialized objects; `m` stays valid until the call returns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_wait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
) -> c_int {
    if c.is_null() || m.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract.
    unsafe { cond::wait(Cond::classify(c), Mutex::classify(m), None, None) }
}

/// `pthread_cond_timedwait`: until `t` (absolute, on the condvar's clock).
///
/// # Safety
/// As `pthread_cond_wait`; `t` points to a `timespec`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_timedwait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    t: *const timespec,
) -> c_int {
    if c.is_null() || m.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract.
    unsafe { cond::wait(Cond::classify(c), Mutex::classify(m), Some(t), None) }
}

/// `pthread_cond_clockwait` (glibc 2.30): until `t` on `clock`.
///
/// # Safety
/// As `pthread_cond_timedwait`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_clockwait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    clock: clockid_t,
    t: *const timespec,
) -> c_int {
    if c.is_null() || m.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract.
    unsafe { cond::wait(Cond::classify(c), Mutex::classify(m), Some(t), Some(clock)) }
}

/// `pthread_cond_signal`.
///
/// # Safety
/// `c` points to an initialized condvar.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_signal(c: *mut pthread_cond_t) -> c_int {
    if c.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract.
    cond::notify(unsafe { Cond::classify(c) }, false)
}

/// `pthread_cond_broadcast`.
///
/// # Safety
/// As `pthread_cond_signal`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_broadcast(c: *mut pthread_cond_t) -> c_int {
    if c.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract.
    cond::notify(unsafe { Cond::classify(c) }, true)
}

/// `pthread_cond_destroy`: returns once no waiter touches `c` any more.
///
/// # Safety
/// As `pthread_cond_signal`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_destroy(c: *mut pthread_cond_t) -> c_int {
    if c.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract.
    cond::destroy(unsafe { Cond::classify(c) })
}

/// `mpsync_mutex_t` of the header: a `pthread_mutex_t`'s size and alignment,
/// always mpsync's lock.
#[repr(C, align(8))]
#[derive(Debug)]
pub struct mpsync_mutex_t {
    _opaque: [u64; 5],
}

/// `mpsync_cond_t` of the header: a `pthread_cond_t`'s size and alignment.
#[repr(C, align(8))]
#[derive(Debug)]
pub struct mpsync_cond_t {
    _opaque: [u64; 6],
}

const _: () = assert!(size_of::<mpsync_mutex_t>() == size_of::<pthread_mutex_t>());
const _: () = assert!(size_of::<mpsync_cond_t>() == size_of::<pthread_cond_t>());

/// `mpsync_mutex_init`: an unlocked mutex (as `MPSYNC_MUTEX_INITIALIZER`).
///
/// # Safety
/// `m` is valid for writes and not in use.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mpsync_mutex_init(m: *mut mpsync_mutex_t) -> c_int {
    if m.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract.
    unsafe {
        std::ptr::write_bytes(m, 0, 1);
        mutex::init_ours(&*m.cast::<MutexRepr>());
    }
    0
}

macro_rules! mpsync_mutex_fn {
    ($($(#[$doc:meta])* $name:ident => $f:path;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// `m` points to an initialized `mpsync_mutex_t`.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(m: *mut mpsync_mutex_t) -> c_int {
            if m.is_null() {
                return libc::EINVAL;
            }
            // SAFETY: the caller's contract; same layout as a pthread mutex.
            $f(unsafe { Mutex::ours(m.cast()) })
        }
    )*};
}

mpsync_mutex_fn! {
    /// `mpsync_mutex_lock`: 0, or `EDEADLK` if the caller holds it.
    mpsync_mutex_lock => mutex::lock;
    /// `mpsync_mutex_trylock`: 0, or `EBUSY`.
    mpsync_mutex_trylock => mutex::trylock;
    /// `mpsync_mutex_unlock`: 0, or `EPERM` if the caller does not hold it.
    mpsync_mutex_unlock => mutex::unlock;
    /// `mpsync_mutex_destroy`: 0, `EBUSY` if held, `EINVAL` if destroyed.
    mpsync_mutex_destroy => mutex::destroy;
}

/// `mpsync_mutex_timedlock`: by `t` (absolute, `CLOCK_REALTIME`).
///
/// # Safety
/// `m` points to an initialized `mpsync_mutex_t`, `t` to a `timespec`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mpsync_mutex_timedlock(
    m: *mut mpsync_mutex_t,
    t: *const timespec,
) -> c_int {
    if m.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract.
    unsafe { mutex::timedlock(Mutex::ours(m.cast()), libc::CLOCK_REALTIME, t) }
}

/// `mpsync_cond_init`: a condvar on `CLOCK_REALTIME` (as `MPSYNC_COND_INITIALIZER`).
///
/// # Safety
/// `c` is valid for writes and not in use.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mpsync_cond_init(c: *mut mpsync_cond_t) -> c_int {
    if c.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract.
    unsafe { cond::init_ours(c.cast(), false) };
    0
}

/// `mpsync_cond_wait`.
///
/// # Safety
/// `c` and `m` point to initialized objects.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mpsync_cond_wait(c: *mut mpsync_cond_t, m: *mut mpsync_mutex_t) -> c_int {
    if c.is_null() || m.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract.
    unsafe { cond::wait(Cond::ours(c.cast()), Mutex::ours(m.cast()), None, None) }
}

/// `mpsync_cond_timedwait`: until `t` (absolute, `CLOCK_REALTIME`).
///
/// # Safety
/// As `mpsync_cond_wait`; `t` points to a `timespec`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mpsync_cond_timedwait(
    c: *mut mpsync_cond_t,
    m: *mut mpsync_mutex_t,
    t: *const timespec,
) -> c_int {
    if c.is_null() || m.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract.
    unsafe { cond::wait(Cond::ours(c.cast()), Mutex::ours(m.cast()), Some(t), None) }
}

/// `mpsync_cond_signal`.
///
/// # Safety
/// `c` points to an initialized `mpsync_cond_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mpsync_cond_signal(c: *mut mpsync_cond_t) -> c_int {
    if c.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract.
    cond::notify(unsafe { Cond::ours(c.cast()) }, false)
}

/// `mpsync_cond_broadcast`.
///
/// # Safety
/// As `mpsync_cond_signal`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mpsync_cond_broadcast(c: *mut mpsync_cond_t) -> c_int {
    if c.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract.
    cond::notify(unsafe { Cond::ours(c.cast()) }, true)
}

/// `mpsync_cond_destroy`.
///
/// # Safety
/// As `mpsync_cond_signal`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mpsync_cond_destroy(c: *mut mpsync_cond_t) -> c_int {
    if c.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's contract.
    cond::destroy(unsafe { Cond::ours(c.cast()) })
}
