//! Helpers shared by the integration tests.

pub mod lincheck;
pub mod stepper;
