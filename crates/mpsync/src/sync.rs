//! The atomics shim: `loom`'s types under `cfg(loom)`, `std`'s otherwise.
//!
//! Every algorithm imports atomics, `spin_loop` and `thread_local!` from here, so
//! the same source is model-checked by loom and shipped (CONVENTIONS.md).

#[cfg(loom)]
pub use loom::sync::atomic::{
    AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize,
    Ordering, fence,
};
#[cfg(not(loom))]
pub use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize,
    Ordering, fence,
};

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
