//! `lock-oversub`: throughput of every lock and peer with 1..8 unpinned threads
//! on the machine's cores — beyond the core count, Linux preempts lock holders
//! and queued waiters for real (the case people hit every day in containers and
//! on busy servers). Fixed-duration trials; each thread loops {lock; ~100 ns
//! critical section; unlock; ~200 ns non-critical}; value = acquisitions per
//! second; fairness = spread of the per-thread acquisition counts (as Concurrency
//! Kit's throughput benchmark reports it).

use std::time::{Duration, Instant};

use mpsync::util::busy::BusyWork;

use super::locks::{Origin, ThroughputSpec, mutex_table};
use super::{Experiment, Params};
use crate::env::Preempt;
use crate::output::{Machine, Point, RunRecord, Status, Trial, Verdict};
use crate::stats::{median, trimmed_mean};
use crate::svg::{Series, line_chart};

/// Trial length at `--scale 1`.
pub const BASE_DURATION_MS: f64 = 300.0;

/// Runs the experiment.
pub fn run(exp: &Experiment, p: &Params, _preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let threads: Vec<u32> = p.threads.clone().unwrap_or_else(|| {
        if p.quick {
            vec![1, 2, 4, 8]
        } else {
            (1..=8).collect()
        }
    });
    let duration = Duration::from_secs_f64((BASE_DURATION_MS * p.scale).max(20.0) / 1e3);
    let busy = BusyWork::global();
    let table = mutex_table();
    let pb = crate::progress(
        (threads.len() * p.trials as usize * table.len()) as u64,
        exp.id,
    );
    let started = Instant::now();
    let mut trials = Vec::new();
    for &n in &threads {
        let spec = ThroughputSpec {
            threads: n,
            duration,
            cs_iters: busy.iters_for_ns(100),
            ncs_iters: busy.iters_for_ns(200),
        };
        for t in 0..p.trials {
            for k in 0..table.len() {
                let imp = &table[(k + t as usize) % table.len()];
                let counts = (imp.throughput)(&spec)
                    .map_err(|e| anyhow::anyhow!("{} with {n} threads: {e}", imp.name))?;
                let total: u64 = counts.iter().sum();
                let mean = total as f64 / counts.len().max(1) as f64;
                let (lo, hi) = (
                    counts.iter().copied().min().unwrap_or(0),
                    counts.iter().copied().max().unwrap_or(0),
                );
                trials.push(Trial {
                    implementation: imp.name.into(),
                    x: f64::from(n),
                    trial: t,
                    value: total as f64 / duration.as_secs_f64(),
                    procs: Some(n),
                    fairness_spread: Some(if mean > 0.0 {
                        (hi - lo) as f64 / mean
                    } else {
                        0.0
                    }),
                    ..Trial::default()
                });
                pb.inc(1);
            }
        }
    }
    pb.finish_and_clear();
    let names: Vec<&str> = table.iter().map(|i| i.name).collect();
    let mean_of = |name: &str, x: f64| {
        let v: Vec<f64> = trials
            .iter()
            .filter(|t| t.implementation == name && t.x == x)
            .map(|t| t.value)
            .collect();
        trimmed_mean(&v)
    };
    let mut points = Vec::new();
    for &n in &threads {
        let x = f64::from(n);
        let base = mean_of("parking_lot::Mutex", x)
            .filter(|b| *b > 0.0)
            .unwrap_or(1.0);
        for name in &names {
            if let Some(v) = mean_of(name, x) {
                points.push(Point {
                    implementation: (*name).into(),
                    x,
                    value: v,
                    normalized: v / base,
                });
            }
        }
    }
    let cores = p.cores.max(1);
    let mut details = vec![format!(
        "{cores} cores: {} threads run unpinned, so counts above {cores} are oversubscribed (real Linux preemption)",
        threads
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    )];
    for per_core in [3, 4] {
        let x = f64::from(per_core * cores);
        let Some(pl) = points
            .iter()
            .find(|q| q.x == x && q.implementation == "parking_lot::Mutex")
        else {
            continue;
        };
        let best = table
            .iter()
            .filter(|i| i.origin != Origin::Peer)
            .filter_map(|i| {
                points
                    .iter()
                    .find(|q| q.x == x && q.implementation == i.name)
            })
            .max_by(|a, b| a.value.total_cmp(&b.value));
        if let Some(b) = best {
            let r = b.value / pl.value;
            details.push(format!(
                "{per_core} threads per core ({x} threads): best mpsync lock ({}) / parking_lot::Mutex = {r:.2} (target >= 1.0: {})",
                b.implementation,
                if r >= 1.0 { "met" } else { "missed" }
            ));
        }
    }
    if let Some(&last) = threads.last() {
        let x = f64::from(last);
        let fair: Vec<String> = names
            .iter()
            .filter_map(|n| {
                let v: Vec<f64> = trials
                    .iter()
                    .filter(|t| t.implementation == *n && t.x == x)
                    .filter_map(|t| t.fairness_spread)
                    .collect();
                median(&v).map(|m| format!("{n} {m:.2}"))
            })
            .collect();
        details.push(format!(
            "fairness at {last} threads: median (max - min) / mean of per-thread acquisitions: {}",
            fair.join(", ")
        ));
    }
    let series: Vec<Series> = names
        .iter()
        .map(|n| Series {
            label: (*n).into(),
            points: points
                .iter()
                .filter(|q| q.implementation == *n)
                .map(|q| (q.x, q.normalized))
                .collect(),
        })
        .collect();
    let svg = line_chart(
        "lock-oversub: throughput, unpinned threads on this machine's cores",
        "threads",
        "acquisitions/s normalized to parking_lot::Mutex (higher is better)",
        &series,
    );
    let rec = RunRecord {
        experiment: exp.id.into(),
        paper: exp.reference.into(),
        title: exp.title.into(),
        preempt: "none".into(),
        started_unix: crate::unix_now(),
        duration_s: started.elapsed().as_secs_f64(),
        machine: Machine::detect(),
        params: serde_json::json!({
            "common": p,
            "threads": threads,
            "trial_ms": duration.as_secs_f64() * 1e3,
            "critical_section_ns": 100, "non_critical_ns": 200,
            "implementations": names,
        }),
        busy_iters_per_us: busy.iters_per_us(),
        unit: "acquisitions per second (higher is better)".into(),
        x_label: "threads".into(),
        baseline: "parking_lot::Mutex at the same thread count".into(),
        trials,
        points,
        extra: serde_json::Value::Null,
        verdict: Verdict {
            conclusion: "no paper conclusion: throughput under real oversubscription, as ratios to parking_lot".into(),
            status: Status::Measurement,
            details,
        },
    };
    Ok((rec, svg))
}
