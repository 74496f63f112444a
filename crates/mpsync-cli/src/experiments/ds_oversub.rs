//! `ds-oversub`: throughput of every queue, stack, heap and counter (mpsync's and
//! the peers') with unpinned threads on the machine's cores — no work between
//! operations, so the structure itself is measured; beyond the core count Linux
//! preempts threads inside operations for real. Fixed-duration trials; each
//! thread loops {put; take} (counters: increment), announcing a quiescent state
//! every 100 operations (Hart's test loop); value = operations per second,
//! normalized to the reference peer of its kind at the same thread count.
//!
//! The table holds every kind at once, and some rows have the same name in
//! several kinds ("single lock" is a queue, a stack, a heap and a counter), so the
//! implementation names written to the trials, points, CSVs and figure say which
//! structure they belong to: `"queue: single lock"`, `"stack: Treiber (HP)"`
//! ([`qualified`]).

use std::time::{Duration, Instant};

use super::locks::Origin;
use super::structures::{DsThroughputSpec, Kind, ds_table};
use super::{Experiment, Params};
use crate::env::Preempt;
use crate::output::{Machine, Point, RunRecord, Status, Trial, Verdict};
use crate::stats::trimmed_mean;
use crate::svg::line_chart;

/// Trial length at `--scale 1`.
pub const BASE_DURATION_MS: f64 = 300.0;
/// Trial length under `--quick` (at its `--scale 0.3`): 60 ms, fifteen 4 ms
/// scheduler ticks — enough to see preemption inside operations, and it keeps
/// the 270 trials of the smoke run near 16 s.
pub const QUICK_DURATION_FACTOR: f64 = 2.0 / 3.0;

/// The structure a kind's rows belong to, as the implementation names say it.
pub fn structure(kind: Kind) -> &'static str {
    match kind {
        Kind::Queue => "queue",
        Kind::Stack => "stack",
        Kind::Heap => "heap",
        Kind::Counter => "counter",
    }
}

/// A row's name as written to this experiment's output: the structure, then the
/// implementation (`"queue: single lock"`).
pub fn qualified(kind: Kind, name: &str) -> String {
    format!("{}: {name}", structure(kind))
}

/// The peer every row of a kind is compared with (unqualified table name).
pub fn reference(kind: Kind) -> &'static str {
    match kind {
        Kind::Queue => "SegQueue",
        Kind::Stack => "crossbeam-epoch Treiber",
        Kind::Heap => "Mutex<BinaryHeap>",
        Kind::Counter => "AtomicU64::fetch_add",
    }
}

/// The speed targets: (kind, mpsync row, peer row), ratio of throughputs
/// ≥ 1.
pub const TARGETS: &[(Kind, &str, &str)] = &[
    (Kind::Queue, "MS non-blocking", "SegQueue"),
    (Kind::Stack, "Treiber", "crossbeam-epoch Treiber"),
    (Kind::Stack, "Treiber (HP)", "haphazard Treiber"),
];

/// Each handle-free (`Auto`) row and the explicit-handle row of the same
/// structure it is reported against.
pub const AUTO_PAIRS: &[(Kind, &str, &str)] = &[
    (
        Kind::Queue,
        "MS non-blocking (EBR)",
        "MS non-blocking (EBR, Auto)",
    ),
    (Kind::Stack, "Treiber (EBR)", "Treiber (EBR, Auto)"),
];

/// Runs the experiment.
pub fn run(exp: &Experiment, p: &Params, _preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let cores = p.cores.max(1);
    let threads: Vec<u32> = p.threads.clone().unwrap_or_else(|| {
        if p.quick {
            vec![1, 2, 3 * cores]
        } else {
            vec![1, 2, 4, 3 * cores, 4 * cores]
        }
    });
    let quick_factor = if p.quick { QUICK_DURATION_FACTOR } else { 1.0 };
    let duration =
        Duration::from_secs_f64((BASE_DURATION_MS * p.scale * quick_factor).max(20.0) / 1e3);
    let table = ds_table();
    let pb = crate::progress(
        (threads.len() * p.trials as usize * table.len()) as u64,
        exp.id,
    );
    let started = Instant::now();
    let mut trials = Vec::new();
    for &n in &threads {
        let spec = DsThroughputSpec {
            threads: n,
            duration,
            alloc: p.alloc,
        };
        for t in 0..p.trials {
            for k in 0..table.len() {
                let imp = &table[(k + t as usize) % table.len()];
                let counts = (imp.throughput)(&spec, imp.kind);
                let total: u64 = counts.iter().sum();
                let mean = total as f64 / counts.len().max(1) as f64;
                let (lo, hi) = (
                    counts.iter().copied().min().unwrap_or(0),
                    counts.iter().copied().max().unwrap_or(0),
                );
                trials.push(Trial {
                    implementation: qualified(imp.kind, imp.name),
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
    let names: Vec<String> = table.iter().map(|i| qualified(i.kind, i.name)).collect();
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
        for imp in &table {
            let base = mean_of(&qualified(imp.kind, reference(imp.kind)), x)
                .filter(|b| *b > 0.0)
                .unwrap_or(1.0);
            let name = qualified(imp.kind, imp.name);
            if let Some(v) = mean_of(&name, x) {
                points.push(Point {
                    panel: None,
                    implementation: name,
                    x,
                    value: v,
                    normalized: v / base,
                });
            }
        }
    }
    let mut details = vec![format!(
        "{cores} cores: {} threads run unpinned, so counts above {cores} are oversubscribed (real Linux preemption)",
        threads
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    )];
    let at = |name: &str, x: f64| {
        points
            .iter()
            .find(|q| q.implementation == name && q.x == x)
            .map(|q| q.value)
    };
    for &(kind, ours, peer) in TARGETS {
        let (ours, peer) = (&qualified(kind, ours), &qualified(kind, peer));
        let mut parts = Vec::new();
        for &n in &threads {
            let x = f64::from(n);
            if let (Some(a), Some(b)) = (at(ours, x), at(peer, x)) {
                let r = a / b;
                parts.push(format!(
                    "{n} threads {r:.2} ({})",
                    if r >= 1.0 { "met" } else { "missed" }
                ));
            }
        }
        if parts.is_empty() {
            details.push(format!("{ours} / {peer}: not measured"));
        } else {
            details.push(format!(
                "{ours} / {peer} throughput (target >= 1.0): {}",
                parts.join(", ")
            ));
        }
    }
    // What the handle-free API's thread-local cache costs: each `Auto` row over
    // the same structure with an explicit handle (a measurement, no target).
    for &(kind, handle, auto) in AUTO_PAIRS {
        let (handle, auto) = (&qualified(kind, handle), &qualified(kind, auto));
        let parts: Vec<String> = threads
            .iter()
            .filter_map(|&n| {
                let x = f64::from(n);
                Some(format!("{n} threads {:.2}", at(auto, x)? / at(handle, x)?))
            })
            .collect();
        if !parts.is_empty() {
            details.push(format!(
                "{auto} / {handle} throughput (the cached registration's cost): {}",
                parts.join(", ")
            ));
        }
    }
    for kind in [Kind::Queue, Kind::Stack, Kind::Heap, Kind::Counter] {
        let Some(&last) = threads.last() else { break };
        let x = f64::from(last);
        let best = |peer: bool| {
            table
                .iter()
                .filter(|i| i.kind == kind && (i.origin == Origin::Peer) == peer)
                .filter_map(|i| at(&qualified(kind, i.name), x).map(|v| (i.name, v)))
                .max_by(|a, b| a.1.total_cmp(&b.1))
        };
        if let (Some(m), Some(pe)) = (best(false), best(true)) {
            details.push(format!(
                "{kind:?} at {last} threads: best mpsync ({}) / best peer ({}) = {:.2}",
                m.0,
                pe.0,
                m.1 / pe.1
            ));
        }
    }
    let series = Point::series(&names, &points, |q| q.normalized);
    let svg = line_chart(
        "ds-oversub: structure throughput, unpinned threads on this machine's cores",
        "threads",
        "operations/s normalized to the reference peer of the kind (higher is better)",
        &series,
    );
    let rec = RunRecord {
        advice: Vec::new(),
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
            "ops_per_quiescent_state": super::structures::OPS_PER_QUIESCENT,
            "implementations": names,
            "references": ([Kind::Queue, Kind::Stack, Kind::Heap, Kind::Counter]
                .map(|k| qualified(k, reference(k)))),
        }),
        busy_iters_per_us: mpsync::util::busy::BusyWork::global().iters_per_us(),
        unit: "operations per second (higher is better)".into(),
        x_label: "threads".into(),
        baseline: "the reference peer of each kind at the same thread count".into(),
        trials,
        points,
        extra: serde_json::Value::Null,
        verdict: Verdict {
            clauses: Vec::new(),
            conclusion:
                "no paper conclusion: structure throughput under real oversubscription, as ratios to the peers"
                    .into(),
            status: Status::Measurement,
            details,
        },
    };
    Ok((rec, svg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_names_are_unique_and_say_their_structure() {
        let table = ds_table();
        let mut names: Vec<String> = table.iter().map(|i| qualified(i.kind, i.name)).collect();
        assert!(
            names.iter().any(|n| n == "queue: single lock")
                && names.iter().any(|n| n == "stack: single lock"),
            "{names:?}"
        );
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "two rows would share a name in the CSV");
        for (kind, ours, peer) in TARGETS {
            for row in [ours, peer] {
                assert!(
                    table.iter().any(|i| i.kind == *kind && i.name == *row),
                    "target row {row} is not a {} row",
                    structure(*kind)
                );
            }
        }
        for k in [Kind::Queue, Kind::Stack, Kind::Heap, Kind::Counter] {
            assert!(table.iter().any(|i| i.kind == k && i.name == reference(k)));
        }
        for (kind, handle, auto) in AUTO_PAIRS {
            for row in [handle, auto] {
                assert!(
                    table.iter().any(|i| i.kind == *kind && i.name == *row),
                    "{row}"
                );
            }
        }
    }
}
