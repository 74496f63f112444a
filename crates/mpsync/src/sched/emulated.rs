//! The emulated backend: the papers' pseudo-scheduler (STUB: API fixed, body being
//! implemented).
#![allow(missing_docs, unused_variables, dead_code)]

use std::time::Duration;

use super::context::ContextBlock;

/// Errors of the emulated backend (bad configuration or OS refusal).
#[derive(Debug, Clone, PartialEq)]
pub enum SchedError {
    /// A user-supplied parameter is out of range: what was wrong, what would be right.
    InvalidConfig(String),
    /// The virtual processor does not exist or already has a thread attached.
    BadVproc {
        vproc: u32,
        processors: u32,
        reason: &'static str,
    },
    /// The thread is already attached to a pseudo-scheduler.
    AlreadyAttached,
    /// An OS call failed (signal installation, thread creation, ...).
    Os(String),
}

impl std::fmt::Display for SchedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}
impl std::error::Error for SchedError {}

/// Configuration of a pseudo-scheduler run.
#[derive(Debug, Clone, PartialEq)]
pub struct EmulatedConfig {
    /// Virtual processors (1..=cores).
    pub processors: u32,
    /// Multiprogramming level m >= 1 (fractional allowed).
    pub mp: f64,
    /// Quantum q.
    pub quantum: Duration,
    /// Uniform jitter fraction on quanta (0.1 = ±10%).
    pub jitter: f64,
    /// Seed of the schedule.
    pub seed: u64,
    /// Longest extension granted to an unpreemptable thread before forced preemption.
    pub extension_bound: Duration,
    /// Repartition every this often (paper 001 §4), or never.
    pub repartition_every: Option<Duration>,
    /// Try SCHED_FIFO for the scheduler thread.
    pub realtime: bool,
}

impl EmulatedConfig {
    /// Validated config with defaults (quantum 10 ms, jitter 0.1, seed 1, extension
    /// bound 2 ms, no repartitioning, realtime true).
    pub fn new(processors: u32, mp: f64) -> Result<Self, SchedError> {
        Ok(Self {
            processors,
            mp,
            quantum: Duration::from_millis(10),
            jitter: 0.1,
            seed: 1,
            extension_bound: Duration::from_millis(2),
            repartition_every: None,
            realtime: true,
        })
    }
    pub fn quantum(mut self, q: Duration) -> Self {
        self.quantum = q;
        self
    }
    pub fn seed(mut self, s: u64) -> Self {
        self.seed = s;
        self
    }
    pub fn jitter(mut self, j: f64) -> Self {
        self.jitter = j;
        self
    }
    pub fn extension_bound(mut self, d: Duration) -> Self {
        self.extension_bound = d;
        self
    }
    pub fn repartition_every(mut self, d: Option<Duration>) -> Self {
        self.repartition_every = d;
        self
    }
    pub fn realtime(mut self, r: bool) -> Self {
        self.realtime = r;
        self
    }
    /// Re-checks every field (the builder methods do not).
    pub fn validate(&self) -> Result<(), SchedError> {
        Ok(())
    }
}

/// One planned scheduling decision: a function of the seed only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScheduleEvent {
    pub vproc: u32,
    /// Sequence number on this vproc.
    pub seq: u64,
    /// Planned on-time of our thread (ns).
    pub run_ns: u64,
    /// Planned off-time, the other applications' quanta (ns); 0 when m == 1 here.
    pub off_ns: u64,
}

/// A measured (requested, actual) duration pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub requested_ns: u64,
    pub actual_ns: u64,
}

/// What the pseudo-scheduler did and what it cost.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SchedStats {
    pub wall_ns: u64,
    /// CPU time of the scheduler thread itself.
    pub sched_cpu_ns: u64,
    pub realtime: bool,
    pub preemptions: u64,
    pub warnings: u64,
    pub forced_preemptions: u64,
    pub voluntary_yields: u64,
    pub repartitions: u64,
    /// Total extension time granted (ns), deducted from following quanta.
    pub extension_ns: u64,
    pub quanta: Vec<Sample>,
    pub off_times: Vec<Sample>,
    /// Decision to the thread spinning in the handler (ns).
    pub preempt_latency_ns: Vec<u64>,
}

/// A running pseudo-scheduler. Stops (and resumes every thread) on drop.
#[derive(Debug)]
pub struct Emulated {
    _p: (),
}

impl Emulated {
    pub fn start(cfg: EmulatedConfig) -> Result<Self, SchedError> {
        Err(SchedError::Os(
            "emulated backend not implemented yet".into(),
        ))
    }
    pub fn config(&self) -> &EmulatedConfig {
        unimplemented!()
    }
    /// Attaches the calling thread to virtual processor `vproc`.
    pub fn attach(&self, vproc: u32) -> Result<Attachment<'_>, SchedError> {
        Err(SchedError::Os(
            "emulated backend not implemented yet".into(),
        ))
    }
    pub fn stats(&self) -> SchedStats {
        SchedStats::default()
    }
    /// The planned schedule so far (a function of the seed only).
    pub fn schedule_log(&self) -> Vec<ScheduleEvent> {
        Vec::new()
    }
    pub fn stop(self) -> SchedStats {
        SchedStats::default()
    }
}

/// The calling thread's attachment to a virtual processor; detaches on drop.
#[derive(Debug)]
pub struct Attachment<'a> {
    _s: &'a Emulated,
    _not_send: std::marker::PhantomData<*mut ()>,
}

/// Whether `cb`'s thread is attached to a running pseudo-scheduler.
pub fn is_attached(cb: &ContextBlock) -> bool {
    !cb.emu.load(crate::sync::Ordering::Acquire).is_null()
}

/// Yield of an attached thread: give the virtual processor away.
pub(crate) fn yield_attached(_cb: &'static ContextBlock) {}

/// Called by the registry when an attached thread exits without detaching.
pub(crate) fn detach_exiting(_cb: &'static ContextBlock) {}
