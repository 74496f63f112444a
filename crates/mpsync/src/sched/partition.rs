//! Partition information (paper 001 §3, extension 3): processors available to the
//! application, threads per processor, and a generation counter bumped at every
//! change. The emulated backend publishes it when it repartitions; the native
//! backend derives it from the affinity mask and the cgroup CPU quota.

use std::sync::Mutex;

use crate::sync::{AtomicU64, Ordering};

/// A snapshot of the application's partition.
#[derive(Debug, Clone, PartialEq)]
pub struct Partition {
    /// Processors available to the application now.
    pub processors: u32,
    /// Threads scheduled on each available processor (ours and others'), where
    /// known; empty if unknown.
    pub threads_per_processor: Vec<u32>,
    /// Bumped at every change of the partition.
    pub generation: u64,
    /// CPU quota in processors (cgroup `cpu.max`), if one is set.
    pub cpu_quota: Option<f64>,
    /// Which backend produced it: `"emulated"` or `"native"`.
    pub source: &'static str,
}

#[cfg(not(loom))]
static GENERATION: AtomicU64 = AtomicU64::new(0);
#[cfg(loom)]
loom::lazy_static! {
    static ref GENERATION: AtomicU64 = AtomicU64::new(0);
}

/// The partition the emulated scheduler published, while one is running.
static EMULATED: Mutex<Option<Partition>> = Mutex::new(None);

/// The current partition generation (cheap: one load).
#[inline]
pub fn generation() -> u64 {
    // Acquire: pairs with the Release in `bump`, so a reader that sees the new
    // generation also sees the partition published before it.
    GENERATION.load(Ordering::Acquire)
}

/// Advances the generation; returns the new value.
pub(crate) fn bump() -> u64 {
    // Release: publishes the partition stored before the bump (see `generation`).
    GENERATION.fetch_add(1, Ordering::Release) + 1
}

/// The emulated backend publishes (or, with `None`, withdraws) its partition.
pub(crate) fn publish_emulated(p: Option<Partition>) {
    *EMULATED.lock().unwrap_or_else(|e| e.into_inner()) = p;
}

/// The emulated partition, if a pseudo-scheduler is running.
pub(crate) fn emulated() -> Option<Partition> {
    EMULATED.lock().unwrap_or_else(|e| e.into_inner()).clone()
}
