//! The multiprogramming environment of one experiment point: nothing
//! (`--preempt none`), the emulated pseudo-scheduler (`emulated`), or competitor
//! processes and real Linux preemption (`os`). Workers are pinned one per CPU.

use std::sync::Barrier;
use std::time::Duration;

use anyhow::{Context, anyhow};
use clap::ValueEnum;
use mpsync::sched::emulated::{Emulated, EmulatedConfig, SchedStats};
use mpsync::util::clock::now_ns;
use serde::Serialize;

use crate::osmp::{self, Competitors};

/// Where preemption comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Preempt {
    /// No multiprogramming: a dedicated machine (MP levels are ignored).
    None,
    /// The papers' pseudo-scheduler: preemption by signal, controlled and seeded.
    Emulated,
    /// Real Linux preemption by CPU-bound competitor processes.
    Os,
}

impl Preempt {
    /// As written on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Emulated => "emulated",
            Self::Os => "os",
        }
    }
}

/// What one run of the workers measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct Outcome {
    /// From the first worker's start (after the start barrier) to the last one's finish.
    pub wall: Duration,
    /// Emulated preemptions during the run.
    pub preemptions: u64,
    /// Emulated warnings during the run.
    pub warnings: u64,
    /// (last worker's finish - first worker's finish) / `wall`: 0 when all
    /// workers (each doing the same work) finish together.
    pub finish_spread: f64,
}

/// One point's environment: started once, used for every trial and implementation.
#[derive(Debug)]
pub struct PointEnv {
    cpus: Vec<usize>,
    emu: Option<Emulated>,
    competitors: Option<Competitors>,
}

impl PointEnv {
    /// Starts the environment for `procs` workers at multiprogramming level `mp`.
    pub fn start(
        mode: Preempt,
        procs: u32,
        mp: f64,
        quantum: Duration,
        seed: u64,
    ) -> anyhow::Result<Self> {
        let all =
            mpsync::sched::native::available_cpus().context("cannot read the affinity mask")?;
        if procs == 0 || procs as usize > all.len() {
            return Err(anyhow!(
                "{procs} processors requested but {} are available",
                all.len()
            ));
        }
        let cpus = all[..procs as usize].to_vec();
        let mut env = Self {
            cpus,
            emu: None,
            competitors: None,
        };
        match mode {
            Preempt::None => {}
            Preempt::Emulated => {
                let cfg = EmulatedConfig::new(procs, mp)?.quantum(quantum).seed(seed);
                env.emu = Some(Emulated::start(cfg)?);
            }
            Preempt::Os => {
                env.competitors = Some(Competitors::spawn(&osmp::plan_for_mp(&env.cpus, mp))?);
            }
        }
        Ok(env)
    }

    /// Runs `body(worker)` on `cpus.len()` pinned workers (attached to the
    /// pseudo-scheduler when emulated); returns when all are done.
    pub fn run(&self, body: &(dyn Fn(u32) + Sync)) -> anyhow::Result<Outcome> {
        let n = self.cpus.len();
        let before = self.emu.as_ref().map(Emulated::stats).unwrap_or_default();
        // Only the workers meet at the barrier, and each takes its own start time:
        // the program runs from the first worker's start to the last one's finish,
        // however late the spawning thread gets a processor back.
        let start = Barrier::new(n);
        let spans = std::thread::scope(|s| -> anyhow::Result<Vec<(u64, u64)>> {
            let handles: Vec<_> = (0..n)
                .map(|i| {
                    let start = &start;
                    s.spawn(move || -> anyhow::Result<(u64, u64)> {
                        let setup = (|| -> anyhow::Result<_> {
                            mpsync::sched::native::pin_current_thread(self.cpus[i])?;
                            Ok(match &self.emu {
                                Some(e) => Some(e.attach(i as u32)?),
                                None => None,
                            })
                        })();
                        start.wait();
                        let _attached = setup?;
                        let t0 = now_ns();
                        body(i as u32);
                        Ok((t0, now_ns()))
                    })
                })
                .collect();
            let mut spans = Vec::with_capacity(n);
            for h in handles {
                spans.push(
                    h.join()
                        .map_err(|_| anyhow!("a worker thread panicked"))??,
                );
            }
            Ok(spans)
        })?;
        let after = self.emu.as_ref().map(Emulated::stats).unwrap_or_default();
        let t0 = spans.iter().map(|s| s.0).min().unwrap_or(0);
        let end = spans.iter().map(|s| s.1).max().unwrap_or(t0);
        let first = spans.iter().map(|s| s.1).min().unwrap_or(end);
        let wall = end.saturating_sub(t0);
        Ok(Outcome {
            wall: Duration::from_nanos(wall),
            finish_spread: if wall > 0 {
                (end - first) as f64 / wall as f64
            } else {
                0.0
            },
            preemptions: after.preemptions - before.preemptions,
            warnings: after.warnings - before.warnings,
        })
    }

    /// The pseudo-scheduler's planned schedule so far (a function of the seed), if emulated.
    pub fn schedule_log(&self) -> Vec<mpsync::sched::emulated::ScheduleEvent> {
        self.emu
            .as_ref()
            .map(Emulated::schedule_log)
            .unwrap_or_default()
    }

    /// Stops the scheduler / competitors; returns the scheduler's statistics.
    pub fn finish(self) -> Option<SchedStats> {
        drop(self.competitors);
        self.emu.map(Emulated::stop)
    }
}

/// Scheduler statistics reduced to what run.json keeps.
pub fn summarize(s: &SchedStats) -> serde_json::Value {
    use crate::stats::{median, quantile};
    let ratio = |v: &[mpsync::sched::emulated::Sample]| {
        let r: Vec<f64> = v
            .iter()
            .filter(|x| x.requested_ns > 0)
            .map(|x| x.actual_ns as f64 / x.requested_ns as f64)
            .collect();
        median(&r)
    };
    serde_json::json!({
        "wall_s": s.wall_ns as f64 / 1e9,
        "scheduler_cpu_percent_of_one_core": if s.wall_ns > 0 { 100.0 * s.sched_cpu_ns as f64 / s.wall_ns as f64 } else { 0.0 },
        "realtime_priority": s.realtime,
        "preemptions": s.preemptions,
        "warnings": s.warnings,
        "forced_preemptions": s.forced_preemptions,
        "voluntary_yields": s.voluntary_yields,
        "repartitions": s.repartitions,
        "extension_ms_total": s.extension_ns as f64 / 1e6,
        "median_quantum_actual_over_requested": ratio(&s.quanta),
        "median_off_actual_over_requested": ratio(&s.off_times),
        "preempt_latency_us_p50": median(&s.preempt_latency_ns).map(|x| x as f64 / 1e3),
        "preempt_latency_us_p99": quantile(&s.preempt_latency_ns, 0.99).map(|x| x as f64 / 1e3),
    })
}
