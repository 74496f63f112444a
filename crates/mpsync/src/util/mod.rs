//! Building blocks below every algorithm: cache padding, backoff, calibrated busy
//! work, clocks, a small seeded random-number generator, and running a batch of
//! user callbacks past a panic (`unwind`, crate-internal).

pub mod backoff;
pub mod busy;
pub mod clock;
pub mod rng;
pub(crate) mod unwind;

pub use crossbeam_utils::CachePadded;
