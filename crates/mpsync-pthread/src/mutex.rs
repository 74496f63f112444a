//! Interposed mutexes: the representation inside a `pthread_mutex_t`, and
//! lock/trylock/timedlock/unlock/destroy for ours and glibc's.
//!
//! # Representation
//!
//! | bytes  | glibc's field     | an interposed mutex's use                          |
//! |--------|-------------------|----------------------------------------------------|
//! | 0..8   | `__lock`, `__count` | `word`: 0 (no slot yet), `DESTROYED`, or a slot handle |
//! | 16..20 | `__kind`          | 0 (or 3, adaptive): ours; anything else: glibc's   |
//! | rest   |                   | unused (zero after `pthread_mutex_init`)           |
//!
//! `PTHREAD_MUTEX_INITIALIZER` is all zero bytes: word 0, kind 0 — an
//! interposed mutex with no slot yet. Its first lock (or trylock,
//! timedlock) takes a slot (`slab.rs`) and installs its handle by CAS; a
//! loser of that race gives its slot back. glibc's static initializers for
//! other kinds (`PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP`, …) set `__kind`,
//! so they are glibc's from the first call; `pthread_mutex_init` with an
//! attribute we do not implement calls glibc's init, which sets `__kind` too.
//!
//! | `word`      | set by                        | meaning                           |
//! |-------------|-------------------------------|-----------------------------------|
//! | 0           | static init, `init`           | unlocked, no slot yet             |
//! | handle      | the first locker, by CAS from 0 | the slot holds the lock         |
//! | `DESTROYED` | `destroy`, by CAS             | every call but `init` says EINVAL |
//!
//! The holder is recorded in the slot (its context block), so unlock by a
//! non-owner is `EPERM`, relocking a held mutex `EDEADLK` (for a normal
//! mutex POSIX leaves both undefined; glibc would deadlock or unlock), and
//! `destroy` of a held mutex `EBUSY`.

use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::Duration;

use libc::{pthread_mutex_t, timespec};
use mpsync::lock::{BoundedSteal, McsTp, Native, SmartQ, SpinThenPark, TasBNp, TicketNp};
use mpsync::lock_api::{RawMutex, RawMutexTimed};
use mpsync::sched;

use crate::config::{self, Delegated, Kind};
use crate::real;
use crate::slab::{self, Slot};
use crate::time;

/// `word` of a destroyed mutex (no handle is this: its index would be 2³²−2).
pub const DESTROYED: u64 = u64::MAX;

/// The bytes of a `pthread_mutex_t` as an interposed mutex sees them.
#[repr(C)]
pub struct MutexRepr {
    word: AtomicU64,
    _glibc_owner_nusers: [u32; 2],
    kind: AtomicI32,
    _rest: [u32; 5],
}

const _: () = assert!(std::mem::size_of::<pthread_mutex_t>() == 40);
const _: () = assert!(std::mem::align_of::<pthread_mutex_t>() == 8);
const _: () = assert!(std::mem::size_of::<MutexRepr>() == 40);
const _: () = assert!(std::mem::offset_of!(MutexRepr, kind) == 16);

/// glibc's `__kind` bits (nptl/pthreadP.h): the type in the low bits, then
/// the robust, priority-inheritance, priority-protect and process-shared flags.
const KIND_TYPE_MASK: i32 = 3;
const KIND_ROBUST: i32 = 16;
const KIND_PI: i32 = 32;
const KIND_PP: i32 = 64;
const KIND_PSHARED: i32 = 128;
/// `PTHREAD_MUTEX_ADAPTIVE_NP`: a normal mutex that spins first — ours.
const KIND_ADAPTIVE: i32 = 3;

/// A mutex as the entry points see it.
#[derive(Clone, Copy)]
pub enum Mutex<'a> {
    /// Interposed: its lock is mpsync's.
    Ours(&'a MutexRepr),
    /// glibc's (an attribute we do not implement).
    Glibc(*mut pthread_mutex_t),
}

impl<'a> Mutex<'a> {
    /// Which of the two `m` is, by its `__kind`.
    ///
    /// # Safety
    /// `m` points to a `pthread_mutex_t` (initialized, statically or by
    /// `pthread_mutex_init`) that stays valid for `'a`.
    #[inline]
    pub unsafe fn classify(m: *mut pthread_mutex_t) -> Mutex<'a> {
        // SAFETY: the caller's contract; `MutexRepr` has its size and layout,
        // and every field is valid for any bytes.
        let r = unsafe { &*m.cast::<MutexRepr>() };
        // Relaxed: written at init (before the mutex is shared) or by glibc's
        // own destroy; only which implementation to call depends on it.
        let k = r.kind.load(Ordering::Relaxed);
        if k == 0 || k == KIND_ADAPTIVE {
            Mutex::Ours(r)
        } else {
            note_kind(k);
            Mutex::Glibc(m)
        }
    }

    /// An interposed mutex, whatever its `__kind` (the `mpsync_mutex_*` API).
    ///
    /// # Safety
    /// As for `classify`.
    pub unsafe fn ours(m: *mut pthread_mutex_t) -> Mutex<'a> {
        // SAFETY: as in `classify`.
        Mutex::Ours(unsafe { &*m.cast::<MutexRepr>() })
    }
}

/// Says which delegated kind a statically initialized (or glibc-initialized)
/// mutex is, once per kind.
fn note_kind(k: i32) {
    if k < 0 {
        return; // glibc's destroyed mutex: its own calls say EINVAL.
    }
    match k & KIND_TYPE_MASK {
        1 => config::note(Delegated::Recursive),
        2 => config::note(Delegated::ErrorCheck),
        _ => {}
    }
    if k & KIND_ROBUST != 0 {
        config::note(Delegated::Robust);
    }
    if k & KIND_PI != 0 {
        config::note(Delegated::PrioInherit);
    }
    if k & KIND_PP != 0 {
        config::note(Delegated::PrioProtect);
    }
    if k & KIND_PSHARED != 0 {
        config::note(Delegated::SharedMutex);
    }
}

/// Calls `$f::<L>($args)` for the process's lock `L`.
macro_rules! with_lock {
    ($f:ident($($a:expr),*)) => {
        match config::kind() {
            Kind::BoundedSteal => $f::<BoundedSteal>($($a),*),
            Kind::TasBNp => $f::<TasBNp>($($a),*),
            Kind::SmartQ => $f::<SmartQ>($($a),*),
            Kind::McsTp => $f::<McsTp>($($a),*),
            Kind::TicketNp => $f::<TicketNp>($($a),*),
            Kind::SpinThenPark => $f::<SpinThenPark>($($a),*),
            Kind::Native => $f::<Native>($($a),*),
        }
    };
}

// Slot sizes, as the crate doc says: 128 bytes, 256 for Ticket-np (its two
// counters are on cache lines of their own).
const _: () = {
    use std::mem::size_of;
    assert!(size_of::<Slot<BoundedSteal>>() == 128);
    assert!(size_of::<Slot<TasBNp>>() == 128);
    assert!(size_of::<Slot<SmartQ>>() == 128);
    assert!(size_of::<Slot<McsTp>>() == 128);
    assert!(size_of::<Slot<TicketNp>>() == 256);
    assert!(size_of::<Slot<SpinThenPark>>() == 128);
    assert!(size_of::<Slot<Native>>() == 128);
};

/// What every lock the interposer uses implements.
pub trait Lock: RawMutex + RawMutexTimed<Duration = Duration> + Sync + 'static {}
impl<L: RawMutex + RawMutexTimed<Duration = Duration> + Sync + 'static> Lock for L {}

/// The calling thread's identity for `owner` (its context block).
#[inline]
fn me() -> *mut sched::ContextBlock {
    std::ptr::from_ref(sched::current()).cast_mut()
}

/// The slot of `r`, installing one if it has none yet.
#[inline]
fn slot_of<L: Lock>(r: &MutexRepr) -> Result<&'static Slot<L>, c_int> {
    // Acquire: pairs with the AcqRel CAS of `install` (the slot is made).
    match r.word.load(Ordering::Acquire) {
        0 => install(r),
        DESTROYED => Err(libc::EINVAL),
        h => slab::lookup::<L>(h).ok_or(libc::EINVAL),
    }
}

/// Takes a slot and installs its handle in `r` (static init, or after `init`).
#[cold]
fn install<L: Lock>(r: &MutexRepr) -> Result<&'static Slot<L>, c_int> {
    let (s, h) = slab::alloc::<L>().ok_or(libc::EAGAIN)?;
    // AcqRel: Release publishes the slot to other users of the mutex;
    // Acquire (also on failure) reads the winner's.
    match r
        .word
        .compare_exchange(0, h, Ordering::AcqRel, Ordering::Acquire)
    {
        Ok(_) => Ok(s),
        Err(other) => {
            // SAFETY: `s` came from `alloc` and was never published.
            unsafe { slab::free(s, h) };
            match other {
                DESTROYED => Err(libc::EINVAL),
                h => slab::lookup::<L>(h).ok_or(libc::EINVAL),
            }
        }
    }
}

/// `pthread_mutex_init` for an interposed mutex: no slot yet, kind 0.
pub fn init_ours(r: &MutexRepr) {
    // Relaxed (both): init happens before the mutex is shared, and sharing it
    // (a thread's start, a store the other side acquires) publishes it.
    r.kind.store(0, Ordering::Relaxed);
    r.word.store(0, Ordering::Relaxed);
}

fn lock_ours<L: Lock>(r: &MutexRepr) -> c_int {
    let s = match slot_of::<L>(r) {
        Ok(s) => s,
        Err(e) => return e,
    };
    let me = me();
    // Relaxed: see `Slot::owner`.
    if s.owner.load(Ordering::Relaxed) == me {
        return libc::EDEADLK;
    }
    took(s, s.lock.lock(), me)
}

/// Records the calling thread `me` as the holder of `s`, with the guard `g`
/// of the acquisition it just made.
fn took<L: Lock>(s: &Slot<L>, g: L::Guard, me: *mut sched::ContextBlock) -> c_int {
    // SAFETY: we hold the lock: `g` is our acquisition's guard.
    unsafe { s.keep_guard(g) };
    // Relaxed: see `Slot::owner`.
    s.owner.store(me, Ordering::Relaxed);
    0
}

fn trylock_ours<L: Lock>(r: &MutexRepr) -> c_int {
    let s = match slot_of::<L>(r) {
        Ok(s) => s,
        Err(e) => return e,
    };
    match s.lock.try_lock() {
        Some(g) => took(s, g, me()),
        None => libc::EBUSY,
    }
}

fn timedlock_ours<L: Lock>(r: &MutexRepr, clock: libc::clockid_t, t: &timespec) -> c_int {
    let s = match slot_of::<L>(r) {
        Ok(s) => s,
        Err(e) => return e,
    };
    let me = me();
    // Relaxed: see `Slot::owner`.
    if s.owner.load(Ordering::Relaxed) == me {
        return libc::EDEADLK;
    }
    // A deadline gone by is a trylock (POSIX: never time out on a free mutex).
    let left = time::until(clock, t).unwrap_or(Duration::ZERO);
    let g = if left.is_zero() {
        s.lock.try_lock()
    } else {
        s.lock.try_lock_for(left)
    };
    match g {
        Some(g) => took(s, g, me),
        None => libc::ETIMEDOUT,
    }
}

fn unlock_ours<L: Lock>(r: &MutexRepr) -> c_int {
    // Acquire: as in `slot_of`. A mutex with no slot was never locked.
    let s = match r.word.load(Ordering::Acquire) {
        0 => return libc::EPERM,
        DESTROYED => return libc::EINVAL,
        h => match slab::lookup::<L>(h) {
            Some(s) => s,
            None => return libc::EINVAL,
        },
    };
    // Relaxed: see `Slot::owner`.
    if s.owner.load(Ordering::Relaxed) != me() {
        return libc::EPERM;
    }
    // Relaxed: see `Slot::owner`; cleared before the release, so the next
    // holder's store comes after ours.
    s.owner.store(std::ptr::null_mut(), Ordering::Relaxed);
    // SAFETY: we hold the lock (owner was us) and kept its guard.
    unsafe {
        let g = s.take_guard();
        s.lock.unlock(g);
    }
    0
}

/// Whether the calling thread holds `r` (for a condvar wait).
fn owned_ours<L: Lock>(r: &MutexRepr) -> bool {
    // Acquire: as in `slot_of`.
    let h = r.word.load(Ordering::Acquire);
    // Relaxed: see `Slot::owner`.
    slab::lookup::<L>(h).is_some_and(|s| s.owner.load(Ordering::Relaxed) == me())
}

fn destroy_ours<L: Lock>(r: &MutexRepr) -> c_int {
    // Acquire: as in `slot_of`.
    let h = r.word.load(Ordering::Acquire);
    match h {
        DESTROYED => return libc::EINVAL,
        0 => {
            // Relaxed: nothing to publish; a racing install loses to us or
            // we to it (then the CAS fails and we look again).
            return match r
                .word
                .compare_exchange(0, DESTROYED, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => 0,
                Err(_) => destroy_ours::<L>(r),
            };
        }
        _ => {}
    }
    let Some(s) = slab::lookup::<L>(h) else {
        return libc::EINVAL;
    };
    // Relaxed: see `Slot::owner`; is_locked is the lock's own snapshot.
    if s.lock.is_locked() || !s.owner.load(Ordering::Relaxed).is_null() {
        return libc::EBUSY;
    }
    // Acquire: pairs with `install`'s Release (we own the slot we free).
    if r.word
        .compare_exchange(h, DESTROYED, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return libc::EINVAL; // another destroy won
    }
    // SAFETY: `s` came from `alloc`; the CAS took its handle out, once.
    unsafe { slab::free(s, h) };
    0
}

/// Locks `m`.
pub fn lock(m: Mutex<'_>) -> c_int {
    match m {
        Mutex::Ours(r) => with_lock!(lock_ours(r)),
        // SAFETY: a glibc mutex, as `classify` found.
        Mutex::Glibc(p) => unsafe { real::mutex_lock(p) },
    }
}

/// Tries to lock `m`: EBUSY if held.
pub fn trylock(m: Mutex<'_>) -> c_int {
    match m {
        Mutex::Ours(r) => with_lock!(trylock_ours(r)),
        // SAFETY: as in `lock`.
        Mutex::Glibc(p) => unsafe { real::mutex_trylock(p) },
    }
}

/// Locks `m` by the absolute time `t` on `clock` at the latest: ETIMEDOUT
/// after; EINVAL for a `tv_nsec` out of range (checked first).
///
/// # Safety
/// `t` is null or points to a `timespec`.
pub unsafe fn timedlock(m: Mutex<'_>, clock: libc::clockid_t, t: *const timespec) -> c_int {
    // SAFETY: the caller's contract.
    let t = match unsafe { time::check(t) } {
        Ok(t) => t,
        Err(e) => return e,
    };
    match m {
        Mutex::Ours(r) => {
            if !time::clock_ok(clock) {
                return libc::EINVAL;
            }
            with_lock!(timedlock_ours(r, clock, t))
        }
        // SAFETY: as in `lock`; `t` is a valid timespec.
        Mutex::Glibc(p) if clock == libc::CLOCK_REALTIME => unsafe { real::mutex_timedlock(p, t) },
        // SAFETY: as above.
        Mutex::Glibc(p) => unsafe { real::mutex_clocklock(p, clock, t) },
    }
}

/// Unlocks `m`: EPERM if the caller does not hold it.
pub fn unlock(m: Mutex<'_>) -> c_int {
    match m {
        Mutex::Ours(r) => with_lock!(unlock_ours(r)),
        // SAFETY: as in `lock`.
        Mutex::Glibc(p) => unsafe { real::mutex_unlock(p) },
    }
}

/// Destroys `m`: EBUSY if held, EINVAL if destroyed already.
pub fn destroy(m: Mutex<'_>) -> c_int {
    match m {
        Mutex::Ours(r) => with_lock!(destroy_ours(r)),
        // SAFETY: as in `lock`.
        Mutex::Glibc(p) => unsafe { real::mutex_destroy(p) },
    }
}

/// Whether the calling thread holds `m` (a condvar wait requires it).
pub fn owned(m: Mutex<'_>) -> bool {
    match m {
        Mutex::Ours(r) => with_lock!(owned_ours(r)),
        Mutex::Glibc(p) => {
            // glibc records the holder's tid in `__owner` (bytes 8..12) for
            // every kind of mutex.
            // SAFETY: `p` is a glibc mutex; the field is an aligned i32 that
            // glibc writes atomically (we only compare it with our tid).
            let owner = unsafe { &*p.cast::<AtomicI32>().add(2) };
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            // Relaxed: only compared with our own tid, which only we store.
            owner.load(Ordering::Relaxed) == tid
        }
    }
}
