//! The chaos build (`RUSTFLAGS="--cfg mpsync_chaos"`): schedule perturbation at
//! every atomic operation.
//!
//! The bugs that survive torture, lincheck, loom and Miri need a thread to stall
//! at one exact point — between reading the global epoch and publishing a pin,
//! right after a releaser's grant, between a successful CAS and the next read.
//! Two idle cores almost never produce that stall. In this build every atomic
//! type of [`crate::sync`] is a `#[repr(transparent)]` wrapper around std's
//! that, before and after each operation, draws from a seeded per-thread
//! generator and sometimes
//!
//! - spins a few hundred `spin_loop` hints (another core's window opens),
//! - yields the processor (`sched_yield`, through `sched`'s native backend: an
//!   emulated virtual processor is not given away, since the pseudo-scheduler
//!   already preempts its threads at random points, a whole quantum at a time), or
//! - stalls for tens of microseconds, parked through [`crate::sched::park`] so
//!   the core goes to another thread — a preemption at that exact point.
//!
//! Named stall points ([`crate::sched::stall`]) stall far more often than plain
//! atomics, so the windows a protocol's safety argument depends on are the ones
//! hit hardest.
//!
//! This is the one place where `sync`, below every module, calls up into
//! `sched`, and only in this build: the perturbation must reach the scheduler
//! the way a real preemption does.
//!
//! Controlled by environment variables, read once per process:
//! - `MPSYNC_CHAOS`: `off`, `light`, `on` (the default) or `heavy`;
//! - `MPSYNC_CHAOS_SEED`: the seed (default 1); thread `i` of the process (in
//!   order of first atomic operation) draws from stream `i` of that seed.
//!
//! Perturbation never nests (the perturbation's own atomics are not perturbed),
//! and threads can opt out ([`Exempt`]): the pseudo-scheduler's thread and its
//! preemption signal handler do, since timing is their job.

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic as std_atomic;
use std::time::Duration;

use crate::util::rng::SplitMix64;

/// How often each perturbation fires: one in `n` draws (0 = never).
#[derive(Debug, Clone, Copy)]
struct Rates {
    spin: u32,
    yield_: u32,
    stall: u32,
    /// At a named stall point: one in `n` stalls.
    point_stall: u32,
}

#[derive(Debug)]
struct Config {
    seed: u64,
    rates: Rates,
}

static CONFIG: OnceLock<Config> = OnceLock::new();
/// Streams handed out so far (one per thread).
static STREAMS: std_atomic::AtomicU64 = std_atomic::AtomicU64::new(0);
/// Perturbations done, by kind (spins, yields, stalls), for reports.
static COUNTS: [std_atomic::AtomicU64; 3] = [const { std_atomic::AtomicU64::new(0) }; 3];

thread_local! {
    /// This thread's generator state (0: not seeded yet).
    static STATE: Cell<u64> = const { Cell::new(0) };
    /// Set while perturbing (no nesting) or while the thread is exempt.
    static QUIET: Cell<u32> = const { Cell::new(0) };
}

fn config() -> &'static Config {
    CONFIG.get_or_init(|| {
        let level = std::env::var("MPSYNC_CHAOS").unwrap_or_default();
        let rates = match level.as_str() {
            "off" | "0" => Rates {
                spin: 0,
                yield_: 0,
                stall: 0,
                point_stall: 0,
            },
            "light" => Rates {
                spin: 64,
                yield_: 2048,
                stall: 65536,
                point_stall: 256,
            },
            "heavy" => Rates {
                spin: 8,
                yield_: 128,
                stall: 1024,
                point_stall: 8,
            },
            _ => Rates {
                spin: 16,
                yield_: 512,
                stall: 8192,
                point_stall: 32,
            },
        };
        let seed = std::env::var("MPSYNC_CHAOS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        Config { seed, rates }
    })
}

/// The next draw of this thread's generator.
#[inline]
fn draw() -> u64 {
    STATE.with(|s| {
        let mut x = s.get();
        if x == 0 {
            // Relaxed: a counter handing out distinct stream numbers.
            let stream = STREAMS.fetch_add(1, std_atomic::Ordering::Relaxed);
            x = SplitMix64::stream(config().seed, stream).next_u64() | 1;
        }
        // xorshift64*: cheap, and never 0 from a non-zero state.
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}

/// Runs `f` unless this thread is already perturbing or exempt.
#[inline]
fn unless_quiet(f: impl FnOnce()) {
    let Ok(quiet) = QUIET.try_with(|q| q.get()) else {
        return;
    };
    if quiet != 0 {
        return;
    }
    QUIET.with(|q| q.set(1));
    f();
    QUIET.with(|q| q.set(0));
}

fn one_in(r: u64, n: u32) -> bool {
    n != 0 && r.is_multiple_of(u64::from(n))
}

/// Parks the thread for 5–65 µs or — at a named point, one time in four — for
/// 100–600 µs: long enough for the other threads to go through several whole
/// operations (two epoch advances, a retire and a reuse; a withdrawn waiter's
/// retake and claim) inside the window the point names.
fn stall(r: u64, at_point: bool) {
    // Relaxed: statistics.
    COUNTS[2].fetch_add(1, std_atomic::Ordering::Relaxed);
    let us = if at_point && (r >> 20).is_multiple_of(4) {
        100 + (r >> 40) % 500
    } else {
        5 + (r >> 40) % 60
    };
    let word = crate::sync::AtomicU32::new(0);
    let _ = crate::sched::park(&word, 0, Some(Duration::from_micros(us)));
}

/// One draw at an atomic operation: maybe spin, yield or stall.
#[inline]
pub(crate) fn perturb() {
    unless_quiet(|| {
        let r = draw();
        let rates = config().rates;
        // Disjoint bit ranges of one draw decide the three events.
        if one_in(r & 0xFFFF, rates.spin) {
            COUNTS[0].fetch_add(1, std_atomic::Ordering::Relaxed);
            for _ in 0..(r >> 16) % 512 {
                std::hint::spin_loop();
            }
        }
        if one_in((r >> 24) & 0xFF_FFFF, rates.yield_) {
            COUNTS[1].fetch_add(1, std_atomic::Ordering::Relaxed);
            crate::sched::native::yield_now();
        } else if one_in(r >> 48, rates.stall) {
            stall(r, false);
        }
    });
}

/// At a named stall point: stall far more often than at a plain atomic, and
/// `boost` times more often again at a rarely opened window.
pub(crate) fn at_point(boost: u32) {
    unless_quiet(|| {
        let r = draw();
        let rate = config().rates.point_stall;
        if rate != 0 && one_in(r >> 32, (rate / boost.max(1)).max(1)) {
            stall(r, true);
        } else if one_in(r & 0xFF, 4) {
            COUNTS[1].fetch_add(1, std_atomic::Ordering::Relaxed);
            crate::sched::native::yield_now();
        }
    });
}

/// Perturbations done so far in this process: `(spins, yields, stalls)`.
pub fn counts() -> (u64, u64, u64) {
    // Relaxed: statistics.
    let c = |i: usize| COUNTS[i].load(std_atomic::Ordering::Relaxed);
    (c(0), c(1), c(2))
}

/// While alive, the calling thread is not perturbed (nests). The pseudo-scheduler's
/// thread and its signal handler hold one: their timing is the experiment.
/// Async-signal-safe (a const thread-local counter).
#[derive(Debug)]
pub struct Exempt(std::marker::PhantomData<*mut ()>);

impl Exempt {
    /// Stops perturbing this thread until the guard drops.
    #[inline]
    pub fn new() -> Self {
        let _ = QUIET.try_with(|q| q.set(q.get() + 1));
        Self(std::marker::PhantomData)
    }
}

impl Default for Exempt {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Exempt {
    #[inline]
    fn drop(&mut self) {
        let _ = QUIET.try_with(|q| q.set(q.get() - 1));
    }
}

/// Defines a chaos wrapper around a std atomic with the methods mpsync uses.
macro_rules! chaos_atomic {
    ($(#[$doc:meta])* $name:ident, $t:ty $(, int: $($op:ident),*)?) => {
        $(#[$doc])*
        #[derive(Default)]
        #[repr(transparent)]
        pub struct $name(std_atomic::$name);

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Debug::fmt(&self.0, f)
            }
        }

        impl $name {
            /// As std's `new`.
            pub const fn new(v: $t) -> Self {
                Self(std_atomic::$name::new(v))
            }
            /// As std's `load`, perturbed.
            #[inline]
            pub fn load(&self, o: Ordering) -> $t {
                around(|| self.0.load(o))
            }
            /// As std's `store`, perturbed.
            #[inline]
            pub fn store(&self, v: $t, o: Ordering) {
                around(|| self.0.store(v, o))
            }
            /// As std's `swap`, perturbed.
            #[inline]
            pub fn swap(&self, v: $t, o: Ordering) -> $t {
                around(|| self.0.swap(v, o))
            }
            /// As std's `compare_exchange`, perturbed.
            #[inline]
            pub fn compare_exchange(&self, c: $t, n: $t, s: Ordering, f: Ordering) -> Result<$t, $t> {
                around(|| self.0.compare_exchange(c, n, s, f))
            }
            /// As std's `compare_exchange_weak`, perturbed.
            #[inline]
            pub fn compare_exchange_weak(&self, c: $t, n: $t, s: Ordering, f: Ordering) -> Result<$t, $t> {
                around(|| self.0.compare_exchange_weak(c, n, s, f))
            }
            /// As std's `as_ptr` (not perturbed).
            #[inline]
            pub const fn as_ptr(&self) -> *mut $t {
                self.0.as_ptr()
            }
            /// As std's `get_mut` (exclusive access: not perturbed).
            #[inline]
            pub fn get_mut(&mut self) -> &mut $t {
                self.0.get_mut()
            }
            /// As std's `into_inner` (not perturbed).
            #[inline]
            pub fn into_inner(self) -> $t {
                self.0.into_inner()
            }
            $($(
                /// As std's method of the same name, perturbed.
                #[inline]
                pub fn $op(&self, v: $t, o: Ordering) -> $t {
                    around(|| self.0.$op(v, o))
                }
            )*)?
        }
    };
}

/// `f`, with a perturbation draw before and after it.
#[inline(always)]
fn around<R>(f: impl FnOnce() -> R) -> R {
    perturb();
    let r = f();
    perturb();
    r
}

pub use std_atomic::Ordering;

chaos_atomic!(
    /// `std`'s `AtomicBool`, perturbed (chaos build).
    AtomicBool, bool, int: fetch_and, fetch_or, fetch_xor
);
chaos_atomic!(
    /// `std`'s `AtomicU8`, perturbed (chaos build).
    AtomicU8, u8, int: fetch_add, fetch_sub, fetch_and, fetch_or, fetch_xor, fetch_max, fetch_min
);
chaos_atomic!(
    /// `std`'s `AtomicU32`, perturbed (chaos build).
    AtomicU32, u32, int: fetch_add, fetch_sub, fetch_and, fetch_or, fetch_xor, fetch_max, fetch_min
);
chaos_atomic!(
    /// `std`'s `AtomicU64`, perturbed (chaos build).
    AtomicU64, u64, int: fetch_add, fetch_sub, fetch_and, fetch_or, fetch_xor, fetch_max, fetch_min
);
chaos_atomic!(
    /// `std`'s `AtomicUsize`, perturbed (chaos build).
    AtomicUsize, usize, int: fetch_add, fetch_sub, fetch_and, fetch_or, fetch_xor, fetch_max, fetch_min
);
chaos_atomic!(
    /// `std`'s `AtomicI32`, perturbed (chaos build).
    AtomicI32, i32, int: fetch_add, fetch_sub, fetch_and, fetch_or, fetch_xor, fetch_max, fetch_min
);
chaos_atomic!(
    /// `std`'s `AtomicI64`, perturbed (chaos build).
    AtomicI64, i64, int: fetch_add, fetch_sub, fetch_and, fetch_or, fetch_xor, fetch_max, fetch_min
);

/// `std`'s `AtomicPtr`, perturbed (chaos build).
#[repr(transparent)]
pub struct AtomicPtr<T>(std_atomic::AtomicPtr<T>);

impl<T> Default for AtomicPtr<T> {
    fn default() -> Self {
        Self::new(std::ptr::null_mut())
    }
}

impl<T> std::fmt::Debug for AtomicPtr<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl<T> AtomicPtr<T> {
    /// As std's `new`.
    pub const fn new(p: *mut T) -> Self {
        Self(std_atomic::AtomicPtr::new(p))
    }
    /// As std's `load`, perturbed.
    #[inline]
    pub fn load(&self, o: Ordering) -> *mut T {
        around(|| self.0.load(o))
    }
    /// As std's `store`, perturbed.
    #[inline]
    pub fn store(&self, p: *mut T, o: Ordering) {
        around(|| self.0.store(p, o))
    }
    /// As std's `swap`, perturbed.
    #[inline]
    pub fn swap(&self, p: *mut T, o: Ordering) -> *mut T {
        around(|| self.0.swap(p, o))
    }
    /// As std's `compare_exchange`, perturbed.
    #[inline]
    pub fn compare_exchange(
        &self,
        c: *mut T,
        n: *mut T,
        s: Ordering,
        f: Ordering,
    ) -> Result<*mut T, *mut T> {
        around(|| self.0.compare_exchange(c, n, s, f))
    }
    /// As std's `compare_exchange_weak`, perturbed.
    #[inline]
    pub fn compare_exchange_weak(
        &self,
        c: *mut T,
        n: *mut T,
        s: Ordering,
        f: Ordering,
    ) -> Result<*mut T, *mut T> {
        around(|| self.0.compare_exchange_weak(c, n, s, f))
    }
    /// As std's `as_ptr` (not perturbed).
    #[inline]
    pub const fn as_ptr(&self) -> *mut *mut T {
        self.0.as_ptr()
    }
    /// As std's `get_mut` (exclusive access: not perturbed).
    #[inline]
    pub fn get_mut(&mut self) -> &mut *mut T {
        self.0.get_mut()
    }
    /// As std's `into_inner` (not perturbed).
    #[inline]
    pub fn into_inner(self) -> *mut T {
        self.0.into_inner()
    }
}

/// As std's `fence`, perturbed.
#[inline]
pub fn fence(o: Ordering) {
    around(|| std_atomic::fence(o))
}
