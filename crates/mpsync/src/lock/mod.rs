//! Mutual-exclusion locks. Every one implements `lock_api::RawMutex`, so
//! `mpsync::Mutex<L, T>` works with guards. (STUB bodies being implemented.)

mod native;
mod np;
mod tas;
mod tas_b;

pub use native::Native;
pub use np::Np;
pub use tas::Tas;
pub use tas_b::TasB;

/// TAS-B with its critical section marked no-preempt (paper 003 §4.1).
pub type TasBNp = Np<TasB>;
/// The native (futex) lock with its critical section marked no-preempt.
pub type NativeNp = Np<Native>;
