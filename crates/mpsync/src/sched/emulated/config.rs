//! What a pseudo-scheduler run is asked to do ([`EmulatedConfig`]), how a
//! preempted thread waits ([`HandlerWait`]), and what can go wrong ([`SchedError`]).

use std::fmt;
use std::time::Duration;

use crate::sched::{native, partition};

/// Errors of the emulated backend.
#[derive(Debug, Clone, PartialEq)]
pub enum SchedError {
    /// A user-supplied parameter is out of range: what was wrong, what would be right.
    InvalidConfig(String),
    /// The virtual processor does not exist or cannot take this thread.
    BadVproc {
        /// The requested virtual processor.
        vproc: u32,
        /// Virtual processors of the scheduler.
        processors: u32,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The calling thread is already attached to a pseudo-scheduler.
    AlreadyAttached,
    /// An OS call failed (signal installation, thread creation, ...).
    Os(String),
}

impl fmt::Display for SchedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidConfig(m) => f.write_str(m),
            Self::BadVproc {
                vproc,
                processors,
                reason,
            } => write!(
                f,
                "virtual processor {vproc}: {reason} (this scheduler has processors 0..{processors})"
            ),
            Self::AlreadyAttached => f.write_str(
                "this thread is already attached to a pseudo-scheduler; drop its Attachment first",
            ),
            Self::Os(m) => write!(f, "pseudo-scheduler: {m}"),
        }
    }
}

impl std::error::Error for SchedError {}

/// How a preempted thread waits in the signal handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandlerWait {
    /// Spin: the real processor stays busy, as if another application ran on it
    /// (the papers' method). Right when attached threads ≤ real cores.
    Spin,
    /// Sleep on a futex: the real processor is free. Right when more threads are
    /// attached than there are real cores (several per virtual processor): a
    /// spinning preempted thread would then take real time from a running one.
    Block,
    /// The default: [`Spin`](Self::Spin) while the attached threads fit the cores
    /// available to the process, [`Block`](Self::Block) when there are more
    /// (decided at each preemption, from the number attached then).
    Auto,
}

/// Configuration of a pseudo-scheduler run.
#[derive(Debug, Clone, PartialEq)]
pub struct EmulatedConfig {
    /// Virtual processors (1..=cores available to the process).
    pub processors: u32,
    /// Multiprogramming level m ≥ 1 (fractional allowed).
    pub mp: f64,
    /// Quantum q.
    pub quantum: Duration,
    /// Uniform jitter fraction on quanta (0.1 = ±10%).
    pub jitter: f64,
    /// Seed of the schedule.
    pub seed: u64,
    /// Longest extension granted to an unpreemptable thread before it is preempted anyway.
    pub extension_bound: Duration,
    /// Repartition every this often (paper 001 §4), or never.
    pub repartition_every: Option<Duration>,
    /// Ask for `SCHED_FIFO` for the scheduler thread.
    pub realtime: bool,
    /// How preempted threads wait (default [`HandlerWait::Auto`]).
    pub handler_wait: HandlerWait,
}

/// Cores available to the process (at least 1).
pub(super) fn cores_available() -> u32 {
    native::available_cpus().map_or(1, |c| c.len().max(1) as u32)
}

impl EmulatedConfig {
    /// A validated config with defaults: quantum 10 ms, jitter ±10%, seed 1,
    /// extension bound 2 ms, no repartitioning, real-time priority if permitted,
    /// handler that spins while the attached threads fit the cores and sleeps
    /// beyond ([`HandlerWait::Auto`]).
    pub fn new(processors: u32, mp: f64) -> Result<Self, SchedError> {
        let c = Self {
            processors,
            mp,
            quantum: Duration::from_millis(10),
            jitter: 0.1,
            seed: 1,
            extension_bound: Duration::from_millis(2),
            repartition_every: None,
            realtime: true,
            handler_wait: HandlerWait::Auto,
        };
        c.validate()?;
        Ok(c)
    }

    /// Sets the quantum.
    pub fn quantum(mut self, q: Duration) -> Self {
        self.quantum = q;
        self
    }

    /// Sets the seed.
    pub fn seed(mut self, s: u64) -> Self {
        self.seed = s;
        self
    }

    /// Sets the jitter fraction.
    pub fn jitter(mut self, j: f64) -> Self {
        self.jitter = j;
        self
    }

    /// Sets the extension bound.
    pub fn extension_bound(mut self, d: Duration) -> Self {
        self.extension_bound = d;
        self
    }

    /// Sets the repartitioning period.
    pub fn repartition_every(mut self, d: Option<Duration>) -> Self {
        self.repartition_every = d;
        self
    }

    /// Sets whether to ask for real-time priority.
    pub fn realtime(mut self, r: bool) -> Self {
        self.realtime = r;
        self
    }

    /// Sets how preempted threads wait.
    pub fn handler_wait(mut self, w: HandlerWait) -> Self {
        self.handler_wait = w;
        self
    }

    /// Re-checks every field (the builder methods do not; `start` does).
    pub fn validate(&self) -> Result<(), SchedError> {
        let bad = |m: String| Err(SchedError::InvalidConfig(m));
        // A published partition describes at most MAX_EMULATED_PROCESSORS.
        let cores = cores_available().min(partition::MAX_EMULATED_PROCESSORS as u32);
        if self.processors == 0 || self.processors > cores {
            return bad(format!(
                "processors {}: must be between 1 and the {cores} processors available to this process",
                self.processors
            ));
        }
        if !self.mp.is_finite() || self.mp < 1.0 || self.mp > 64.0 {
            return bad(format!(
                "multiprogramming level {}: must be >= 1 and <= 64 (e.g. 1, 1.5, 2, 3)",
                self.mp
            ));
        }
        if self.quantum < Duration::from_micros(100) || self.quantum > Duration::from_secs(10) {
            return bad(format!(
                "quantum {:?}: must be between 100 µs and 10 s (the papers use 10-50 ms)",
                self.quantum
            ));
        }
        if !(0.0..=0.5).contains(&self.jitter) {
            return bad(format!(
                "jitter {}: must be between 0 and 0.5 (e.g. 0.1 for ±10%)",
                self.jitter
            ));
        }
        if self.extension_bound.is_zero() || self.extension_bound > Duration::from_secs(1) {
            return bad(format!(
                "extension bound {:?}: must be > 0 and at most 1 s (Symunix grants well under a quantum; default 2 ms)",
                self.extension_bound
            ));
        }
        if let Some(t) = self.repartition_every.filter(|t| *t < self.quantum) {
            return bad(format!(
                "repartition period {t:?}: must be at least one quantum ({:?}); the papers use 1 s",
                self.quantum
            ));
        }
        Ok(())
    }

    /// Other applications on virtual processor `v` (`m − 1`, fractional part on the
    /// first `round(frac(m)·P)` processors).
    pub fn others_on(&self, v: u32) -> u32 {
        let base = self.mp.floor();
        let frac = self.mp - base;
        let extra = (frac * f64::from(self.processors)).round() as u32;
        (base as u32 - 1) + u32::from(v < extra)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn others_split_fractional_levels() {
        let c = |p, m| EmulatedConfig {
            processors: p,
            mp: m,
            ..EmulatedConfig::new(1, 1.0).unwrap()
        };
        let cfg = c(2, 1.5);
        assert_eq!((cfg.others_on(0), cfg.others_on(1)), (1, 0));
        let cfg = c(2, 3.0);
        assert_eq!((cfg.others_on(0), cfg.others_on(1)), (2, 2));
        let cfg = c(4, 2.25);
        assert_eq!(
            (0..4).map(|v| cfg.others_on(v)).collect::<Vec<_>>(),
            [2, 1, 1, 1]
        );
    }

    #[test]
    fn rejects_bad_configs_with_clear_messages() {
        let e = EmulatedConfig::new(1, 0.5).unwrap_err().to_string();
        assert!(e.contains("must be >= 1"), "{e}");
        let e = EmulatedConfig::new(0, 2.0).unwrap_err().to_string();
        assert!(e.contains("processors 0"), "{e}");
        let e = EmulatedConfig::new(10_000, 2.0).unwrap_err().to_string();
        assert!(e.contains("available"), "{e}");
        let base = EmulatedConfig::new(1, 2.0).unwrap();
        assert!(base.clone().quantum(Duration::ZERO).validate().is_err());
        assert!(base.clone().jitter(0.9).validate().is_err());
        assert!(
            base.clone()
                .extension_bound(Duration::from_secs(2))
                .validate()
                .is_err()
        );
        assert!(
            base.clone()
                .repartition_every(Some(Duration::from_micros(1)))
                .validate()
                .is_err()
        );
        assert!(base.validate().is_ok());
    }
}
