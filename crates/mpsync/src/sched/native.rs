//! The native Linux backend (STUB: API fixed, body being implemented).
#![allow(missing_docs, unused_variables)]

use std::time::Duration;

use super::context::ContextBlock;
use super::partition::Partition;

/// Whether the kernel offers the rseq time-slice extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SliceExtension {
    Available,
    Unavailable(String),
}

/// Detected once per process.
pub fn slice_extension() -> &'static SliceExtension {
    static U: std::sync::OnceLock<SliceExtension> = std::sync::OnceLock::new();
    U.get_or_init(|| SliceExtension::Unavailable("not implemented".into()))
}

pub(crate) fn on_request_no_preempt(cb: &ContextBlock) {}
pub(crate) fn on_release_no_preempt(cb: &ContextBlock) {}

/// A heartbeat older than this means "presumed preempted".
pub fn heartbeat_threshold() -> Duration {
    Duration::from_micros(200)
}
pub fn set_heartbeat_threshold(d: Duration) {}

/// Heartbeat staleness (He, Scherer & Scott 2005).
pub fn presumed_preempted(cb: &ContextBlock) -> bool {
    false
}

pub(crate) fn yield_now() {
    // SAFETY: sched_yield has no preconditions.
    unsafe { libc::sched_yield() };
}

/// CPUs in the calling thread's affinity mask.
pub fn available_cpus() -> std::io::Result<Vec<usize>> {
    Ok((0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect())
}

/// cgroup v2 `cpu.max` quota in processors, if set.
pub fn cgroup_cpu_quota() -> Option<f64> {
    None
}

/// Pins the calling thread to one CPU.
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    Ok(())
}

/// The machine's partition (polled; bumps the generation on change).
pub fn poll_partition() -> Partition {
    Partition {
        processors: available_cpus().map_or(1, |c| c.len() as u32),
        threads_per_processor: vec![],
        generation: super::partition::generation(),
        cpu_quota: cgroup_cpu_quota(),
        source: "native",
    }
}
