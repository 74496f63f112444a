//! Building blocks below every algorithm: cache padding, backoff, calibrated busy
//! work, clocks, and a small seeded random-number generator.

pub mod backoff;
pub mod busy;
pub mod clock;
pub mod rng;

pub use crossbeam_utils::CachePadded;
