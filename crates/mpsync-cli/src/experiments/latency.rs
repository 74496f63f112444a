//! `lock-latency`: uncontended lock+unlock time of every lock and peer, one
//! thread, beside the floor — a bare `swap`/`store` pair, the least any spin lock
//! can cost. Reported as ratios measured in the same process.

use std::time::Instant;

use super::locks::{Origin, floor_latency, mutex_table};
use super::{Experiment, Params};
use crate::env::Preempt;
use crate::output::{Machine, Point, RunRecord, Status, Trial, Verdict};
use crate::stats::trimmed_mean;
use crate::svg::bar_chart;

/// Lock+unlock pairs per trial at `--scale 1`.
pub const BASE_ITERS: f64 = 2_000_000.0;

/// Runs it.
pub fn run(exp: &Experiment, p: &Params, _preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let iters = ((BASE_ITERS * p.scale).round() as u64).max(1000);
    let table = mutex_table();
    let pb = crate::progress(u64::from(p.trials) * (table.len() as u64 + 1), exp.id);
    let started = Instant::now();
    // Measure on a dedicated thread pinned to one CPU, so that migrations add no
    // noise and the caller's affinity is left alone.
    let cpu = mpsync::sched::native::available_cpus()?
        .first()
        .copied()
        .unwrap_or(0);
    let trials = std::thread::scope(|s| {
        s.spawn(|| -> anyhow::Result<Vec<Trial>> {
            mpsync::sched::native::pin_current_thread(cpu)?;
            let mut trials = Vec::new();
            for t in 0..p.trials {
                let mut row = |name: &str, ns: f64| {
                    trials.push(Trial {
                        implementation: name.into(),
                        x: 1.0,
                        trial: t,
                        value: ns,
                        procs: Some(1),
                        ..Trial::default()
                    });
                    pb.inc(1);
                };
                row("floor: swap+store", floor_latency(iters));
                for imp in &table {
                    row(imp.name, (imp.latency)(iters));
                }
            }
            Ok(trials)
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the measuring thread panicked"))?
    })?;
    pb.finish_and_clear();
    let mut names = vec!["floor: swap+store"];
    names.extend(table.iter().map(|i| i.name));
    let floor = mean(&trials, "floor: swap+store").unwrap_or(1.0).max(1e-3);
    let points: Vec<Point> = names
        .iter()
        .filter_map(|n| {
            mean(&trials, n).map(|v| Point {
                implementation: (*n).into(),
                x: 1.0,
                value: v,
                normalized: v / floor,
            })
        })
        .collect();
    let at = |n: &str| {
        points
            .iter()
            .find(|p| p.implementation == n)
            .map(|p| p.value)
    };
    let mut details = Vec::new();
    let pl = at("parking_lot::Mutex");
    let best = table
        .iter()
        .filter(|i| i.origin != Origin::Peer)
        .filter_map(|i| at(i.name).map(|v| (i.name, v)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    if let (Some((name, v)), Some(pl)) = (best, pl) {
        details.push(format!(
            "best mpsync lock ({name}, {v:.1} ns) / parking_lot::Mutex ({pl:.1} ns) = {:.2} (target of the lock-family work: <= 1.0)",
            v / pl
        ));
    }
    for i in table.iter().filter(|i| i.spins && i.origin != Origin::Peer) {
        if let Some(v) = at(i.name) {
            details.push(format!(
                "{} / floor ({floor:.1} ns) = {:.2} (target: <= 2.0)",
                i.name,
                v / floor
            ));
        }
    }
    let bars: Vec<(String, f64)> = points
        .iter()
        .map(|p| (p.implementation.clone(), p.value))
        .collect();
    let svg = bar_chart(
        "lock-latency: uncontended lock+unlock",
        "ns per lock+unlock pair (mean of median trials)",
        &bars,
    );
    let rec = RunRecord {
        experiment: exp.id.into(),
        paper: exp.reference.into(),
        title: exp.title.into(),
        preempt: "none".into(),
        started_unix: crate::unix_now(),
        duration_s: started.elapsed().as_secs_f64(),
        machine: Machine::detect(),
        params: serde_json::json!({ "common": p, "pairs_per_trial": iters }),
        busy_iters_per_us: mpsync::util::busy::BusyWork::global().iters_per_us(),
        unit: "ns per lock+unlock".into(),
        x_label: "threads".into(),
        baseline: "the swap+store floor".into(),
        trials,
        points,
        extra: serde_json::Value::Null,
        verdict: Verdict {
            conclusion:
                "no paper conclusion: uncontended cost, as ratios to parking_lot and to the floor"
                    .into(),
            status: Status::Measurement,
            details,
        },
    };
    Ok((rec, svg))
}

fn mean(trials: &[Trial], name: &str) -> Option<f64> {
    let v: Vec<f64> = trials
        .iter()
        .filter(|t| t.implementation == name)
        .map(|t| t.value)
        .collect();
    trimmed_mean(&v)
}
