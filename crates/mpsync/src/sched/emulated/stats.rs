//! What the pseudo-scheduler planned ([`ScheduleEvent`], a function of the seed)
//! and what happened ([`SchedStats`], [`Sample`]).
//!
//! The sample vectors are reserved when the scheduler starts and never grow past
//! [`MAX_SAMPLES`]: nothing under the scheduler's lock may allocate, because an
//! attached thread may be stopped inside `malloc` holding the allocator's lock,
//! and only the scheduler (which needs its lock) would resume it.

use super::{Inner, Shared};

/// One planned round on a virtual processor: a function of the seed only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScheduleEvent {
    /// Virtual processor.
    pub vproc: u32,
    /// Round number on this vproc.
    pub seq: u64,
    /// Planned quantum of each of our threads in this round (ns).
    pub run_ns: u64,
    /// Planned off-time, the other applications' quanta together (ns); 0 when
    /// there are none on this vproc.
    pub off_ns: u64,
    /// Simulated other applications on this vproc: `⌈m⌉ − 1` on the first
    /// `round(frac(m)·P)` vprocs, `⌊m⌋ − 1` on the rest (m = 1.5 on 2 vprocs: one
    /// other application on vproc 0, none on vproc 1). See
    /// [`EmulatedConfig::others_on`](super::EmulatedConfig::others_on).
    pub others: u32,
}

/// A measured (requested, actual) duration pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// What the schedule planned (ns).
    pub requested_ns: u64,
    /// What happened (ns).
    pub actual_ns: u64,
}

/// What the pseudo-scheduler did and what it cost.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SchedStats {
    /// Wall time the scheduler ran (ns).
    pub wall_ns: u64,
    /// CPU time of the scheduler thread itself (ns).
    pub sched_cpu_ns: u64,
    /// Whether `SCHED_FIFO` was granted.
    pub realtime: bool,
    /// Preemptions by signal (not counting yields).
    pub preemptions: u64,
    /// Times an unpreemptable thread was warned instead of preempted.
    pub warnings: u64,
    /// Preemptions of a thread still unpreemptable at the extension bound.
    pub forced_preemptions: u64,
    /// Preemptions a thread's handler undid: the scheduler read its request
    /// word just before a no-preempt request began (also in `preemptions`).
    pub preemptions_undone: u64,
    /// Times a thread gave its processor away itself.
    pub voluntary_yields: u64,
    /// Repartitions done.
    pub repartitions: u64,
    /// Total extension time granted (ns), deducted from following quanta.
    pub extension_ns: u64,
    /// Quanta of our threads: planned vs actual on-time.
    pub quanta: Vec<Sample>,
    /// Off-times of our threads: planned vs actual.
    pub off_times: Vec<Sample>,
    /// Decision to the thread stopped in the handler (ns).
    pub preempt_latency_ns: Vec<u64>,
}

/// Samples kept at most, per kind (older ones are dropped from the vectors; the
/// counters stay exact).
pub(super) const MAX_SAMPLES: usize = 100_000;

impl SchedStats {
    /// Empty statistics with room for [`MAX_SAMPLES`] of each kind.
    pub(super) fn reserved() -> Self {
        Self {
            quanta: Vec::with_capacity(MAX_SAMPLES),
            off_times: Vec::with_capacity(MAX_SAMPLES),
            preempt_latency_ns: Vec::with_capacity(MAX_SAMPLES),
            ..Self::default()
        }
    }
}

/// Appends `x` unless `v` already holds [`MAX_SAMPLES`] (so it never reallocates).
pub(super) fn push_capped<T>(v: &mut Vec<T>, x: T) {
    if v.len() < MAX_SAMPLES {
        v.push(x);
    }
}

/// A copy of the statistics, allocated before taking the scheduler's lock (see the
/// module doc). The sample vectors never hold more than `MAX_SAMPLES`, so the
/// copies fit without reallocating.
pub(super) fn snapshot_stats(shared: &Shared) -> SchedStats {
    let mut quanta = Vec::with_capacity(MAX_SAMPLES);
    let mut off_times = Vec::with_capacity(MAX_SAMPLES);
    let mut preempt_latency_ns = Vec::with_capacity(MAX_SAMPLES);
    shared.with_lock_as_user(|inner: &mut Inner| {
        quanta.extend_from_slice(&inner.stats.quanta);
        off_times.extend_from_slice(&inner.stats.off_times);
        preempt_latency_ns.extend_from_slice(&inner.stats.preempt_latency_ns);
        SchedStats {
            quanta,
            off_times,
            preempt_latency_ns,
            // Relaxed: a statistic the handlers count.
            preemptions_undone: shared.undone.load(crate::sync::Ordering::Relaxed),
            ..inner.stats
        }
    })
}

/// A copy of the planned schedule, allocated before taking the lock (as above).
pub(super) fn snapshot_log(shared: &Shared) -> Vec<ScheduleEvent> {
    let mut out = Vec::with_capacity(MAX_SAMPLES);
    shared.with_lock_as_user(|inner: &mut Inner| out.extend_from_slice(&inner.log));
    out
}
