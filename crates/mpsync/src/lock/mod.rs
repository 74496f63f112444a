//! Mutual-exclusion locks. Every one implements `lock_api::RawMutex`, so
//! `mpsync::Mutex<L, T>` works with guards.

mod tas_b;
pub use tas_b::TasB;
