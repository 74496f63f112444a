//! Real-OS multiprogramming (`--preempt os`) — STUB: API fixed, body being implemented.
#![allow(dead_code, unused_variables)]

/// CPU-bound competitor processes pinned to CPUs, so that Linux itself preempts
/// our workers. Killed and reaped on drop, on error and on Ctrl-C.
#[derive(Debug)]
pub struct Competitors {
    pids: Vec<i32>,
}

/// How many competitors go on each CPU for multiprogramming level `mp`:
/// m−1 on every CPU, plus one more on the first ⌈frac(m)·P⌉ CPUs.
pub fn plan_for_mp(cpus: &[usize], mp: f64) -> Vec<(usize, u32)> {
    cpus.iter()
        .map(|&c| (c, (mp - 1.0).round() as u32))
        .collect()
}

impl Competitors {
    /// Starts `count` competitors pinned to `cpu` for each `(cpu, count)`.
    pub fn spawn(plan: &[(usize, u32)]) -> anyhow::Result<Self> {
        Ok(Self { pids: Vec::new() })
    }

    /// Number of live competitor processes.
    pub fn len(&self) -> usize {
        self.pids.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.pids.is_empty()
    }

    /// Kills and reaps every competitor.
    pub fn stop(self) {}
}

/// Body of the hidden `mpsync __compete --cpu N` subcommand: pin, then spin until
/// the parent dies (PR_SET_PDEATHSIG) or we are killed.
pub fn competitor_main(cpu: usize) -> ! {
    std::process::exit(0)
}
