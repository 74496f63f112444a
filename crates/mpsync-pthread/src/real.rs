//! glibc's own `pthread_mutex_*` and `pthread_cond_*`, found with
//! `dlsym(RTLD_NEXT, …)` at their first use: where delegated mutexes and
//! condvars go.
//!
//! glibc has two versions of the `pthread_cond_*` symbols on x86_64 (the
//! 2.2.5 one is the old, compatibility condvar); `dlvsym` asks for 2.3.2 by
//! name, and plain `dlsym` (the default version) is the fallback.

use std::ffi::{CStr, c_int, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

use libc::{RTLD_NEXT, timespec};
use libc::{clockid_t, pthread_cond_t, pthread_condattr_t, pthread_mutex_t, pthread_mutexattr_t};

/// The address of `name` in the next object after ours (glibc), cached in `slot`.
/// Aborts if it is missing: a program that calls a pthread function has a C
/// library that defines it, so this cannot happen with glibc.
#[cold]
fn find(slot: &AtomicPtr<c_void>, name: &CStr, version: Option<&CStr>) -> *mut c_void {
    let mut p = std::ptr::null_mut();
    if let Some(v) = version {
        // SAFETY: RTLD_NEXT is a valid pseudo-handle; both strings are
        // NUL-terminated.
        p = unsafe { libc::dlvsym(RTLD_NEXT, name.as_ptr(), v.as_ptr()) };
    }
    if p.is_null() {
        // SAFETY: as above.
        p = unsafe { libc::dlsym(RTLD_NEXT, name.as_ptr()) };
    }
    if p.is_null() {
        let msg = b"mpsync-pthread: glibc's pthread functions not found (dlsym RTLD_NEXT)\n";
        // SAFETY: writing a static buffer to stderr, then aborting.
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::abort();
        }
    }
    // Release: pairs with the Acquire load in the callers (a function
    // address; nothing else is published, and every thread finds the same).
    slot.store(p, Ordering::Release);
    p
}

macro_rules! real {
    ($( $(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),*) = $sym:literal $(@ $ver:literal)?; )*) => {$(
        $(#[$m])*
        ///
        /// # Safety
        /// As glibc's function of that name: the arguments must be what it accepts.
        pub unsafe fn $name($($arg: $ty),*) -> c_int {
            static SLOT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
            // Acquire: pairs with the Release store in `find`.
            let mut p = SLOT.load(Ordering::Acquire);
            if p.is_null() {
                #[allow(unused_mut, unused_assignments)]
                let mut v: Option<&CStr> = None;
                $( v = Some($ver); )?
                p = find(&SLOT, $sym, v);
            }
            // SAFETY: `p` is glibc's function of this name, whose C signature
            // is the one we transmute to.
            let f: unsafe extern "C" fn($($ty),*) -> c_int = unsafe { std::mem::transmute(p) };
            // SAFETY: the caller's contract.
            unsafe { f($($arg),*) }
        }
    )*};
}

real! {
    /// glibc's `pthread_mutex_init`.
    fn mutex_init(m: *mut pthread_mutex_t, a: *const pthread_mutexattr_t) = c"pthread_mutex_init";
    /// glibc's `pthread_mutex_lock`.
    fn mutex_lock(m: *mut pthread_mutex_t) = c"pthread_mutex_lock";
    /// glibc's `pthread_mutex_trylock`.
    fn mutex_trylock(m: *mut pthread_mutex_t) = c"pthread_mutex_trylock";
    /// glibc's `pthread_mutex_timedlock`.
    fn mutex_timedlock(m: *mut pthread_mutex_t, t: *const timespec) = c"pthread_mutex_timedlock";
    /// glibc's `pthread_mutex_clocklock` (glibc 2.30+).
    fn mutex_clocklock(m: *mut pthread_mutex_t, c: clockid_t, t: *const timespec) = c"pthread_mutex_clocklock";
    /// glibc's `pthread_mutex_unlock`.
    fn mutex_unlock(m: *mut pthread_mutex_t) = c"pthread_mutex_unlock";
    /// glibc's `pthread_mutex_destroy`.
    fn mutex_destroy(m: *mut pthread_mutex_t) = c"pthread_mutex_destroy";
    /// glibc's `pthread_cond_init`.
    fn cond_init(c: *mut pthread_cond_t, a: *const pthread_condattr_t) = c"pthread_cond_init" @ c"GLIBC_2.3.2";
    /// glibc's `pthread_cond_wait`.
    fn cond_wait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t) = c"pthread_cond_wait" @ c"GLIBC_2.3.2";
    /// glibc's `pthread_cond_timedwait`.
    fn cond_timedwait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, t: *const timespec) = c"pthread_cond_timedwait" @ c"GLIBC_2.3.2";
    /// glibc's `pthread_cond_clockwait` (glibc 2.30+).
    fn cond_clockwait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, k: clockid_t, t: *const timespec) = c"pthread_cond_clockwait";
    /// glibc's `pthread_cond_signal`.
    fn cond_signal(c: *mut pthread_cond_t) = c"pthread_cond_signal" @ c"GLIBC_2.3.2";
    /// glibc's `pthread_cond_broadcast`.
    fn cond_broadcast(c: *mut pthread_cond_t) = c"pthread_cond_broadcast" @ c"GLIBC_2.3.2";
    /// glibc's `pthread_cond_destroy`.
    fn cond_destroy(c: *mut pthread_cond_t) = c"pthread_cond_destroy" @ c"GLIBC_2.3.2";
}

// The attribute getters are not interposed: these are glibc's.
unsafe extern "C" {
    pub fn pthread_mutexattr_gettype(a: *const pthread_mutexattr_t, t: *mut c_int) -> c_int;
    pub fn pthread_mutexattr_getprotocol(a: *const pthread_mutexattr_t, p: *mut c_int) -> c_int;
    pub fn pthread_mutexattr_getrobust(a: *const pthread_mutexattr_t, r: *mut c_int) -> c_int;
    pub fn pthread_mutexattr_getpshared(a: *const pthread_mutexattr_t, s: *mut c_int) -> c_int;
    pub fn pthread_condattr_getpshared(a: *const pthread_condattr_t, s: *mut c_int) -> c_int;
    pub fn pthread_condattr_getclock(a: *const pthread_condattr_t, c: *mut clockid_t) -> c_int;
}
