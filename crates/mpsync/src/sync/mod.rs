//! The atomics shim: `loom`'s types under `cfg(loom)`, `std`'s otherwise.
//!
//! Every algorithm imports atomics, `spin_loop` and `thread_local!` from here, so
//! the same source is model-checked by loom and shipped (CONVENTIONS.md).
//!
//! Three builds of the same types:
//! - normal: `std`'s atomics;
//! - `cfg(loom)`: `loom`'s, with `swap` re-modelled where loom 0.7.2 gets it wrong
//!   (`loom_fix`);
//! - `cfg(mpsync_chaos)`: `std`'s behind `#[repr(transparent)]` wrappers that
//!   perturb the schedule around every operation (seeded spins, yields and
//!   stalls; see the `chaos` module of that build), so that tests meet the interleavings that need a
//!   thread to stall at one exact point.

#[cfg(all(not(loom), mpsync_chaos))]
pub use chaos::{
    AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize,
    Ordering, fence,
};
#[cfg(loom)]
pub use loom::sync::atomic::{
    AtomicI32, AtomicI64, AtomicU8, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(loom)]
pub use loom_fix::{AtomicBool, AtomicPtr, AtomicU32};
#[cfg(all(not(loom), not(mpsync_chaos)))]
pub use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize,
    Ordering, fence,
};

#[cfg(all(not(loom), mpsync_chaos))]
pub mod chaos;
#[cfg(loom)]
mod loom_fix;

/// Whether this is the chaos build (`--cfg mpsync_chaos`).
pub const CHAOS: bool = cfg!(all(not(loom), mpsync_chaos));

/// While alive, the calling thread's atomics are not perturbed by the chaos
/// build (nests; a no-op in other builds). Async-signal-safe.
#[cfg(all(not(loom), mpsync_chaos))]
pub use chaos::Exempt;

/// While alive, the calling thread's atomics are not perturbed by the chaos
/// build (nests; a no-op in other builds). Async-signal-safe.
#[cfg(not(all(not(loom), mpsync_chaos)))]
#[derive(Debug, Default)]
pub struct Exempt(());

#[cfg(not(all(not(loom), mpsync_chaos)))]
impl Exempt {
    /// A no-op outside the chaos build.
    #[inline(always)]
    pub fn new() -> Self {
        Self(())
    }
}

#[cfg(loom)]
pub use loom::sync::{Arc, Mutex as StdMutex};
#[cfg(not(loom))]
pub use std::sync::{Arc, Mutex as StdMutex};

/// A busy-wait hint. Under loom it yields to the model checker, which cannot
/// explore an unbounded spin otherwise.
#[inline(always)]
pub fn spin_loop() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}
