//! `ds-oversub`: throughput of every queue, stack, heap and counter (mpsync's and
//! the peers') with unpinned threads on the machine's cores — no work between
//! operations, so the structure itself is measured; beyond the core count Linux
//! preempts threads inside operations for real. Fixed-duration trials; each
//! thread loops {put; take} (counters: increment), announcing a quiescent state
//! every 100 operations (Hart's test loop); value = operations per second,
//! normalized to the reference peer of its kind at the same thread count.
//! Every point is the **median** of at least [`MIN_ROUNDS`] rounds interleaved
//! across the rows (the model runner's), and each trial records its
//! **fairness**, min / max of the per-thread operation counts (the CSV's
//! `fairness_min_max`; the notes give it beside the best rows' ratios): a
//! lock that lets one thread run a streak of operations while the others are
//! descheduled shows a high throughput and a fairness near 0.
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
use crate::model::{self, AdviceRule, Better, Clause, Design, Imp, Panel, Results, Role, Verdicts};
use crate::output::RunRecord;
use crate::svg::sig3;

/// Trial length at `--scale 1`.
pub const BASE_DURATION_MS: f64 = 300.0;
/// Trial length under `--quick` (at its `--scale 0.3`): 36 ms, nine 4 ms
/// scheduler ticks — enough to see preemption inside operations, and it keeps
/// the smoke run (5 rounds of 2 thread counts, about 380 trials) near 16 s.
pub const QUICK_DURATION_FACTOR: f64 = 0.4;

/// Rounds at least (whatever `--trials` says): a point is their median, so
/// that one lucky streak (a thread running many operations alone) cannot
/// make it.
pub const MIN_ROUNDS: u32 = 5;

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

/// The kinds, in the order of the figure's panels, and what `advise` calls
/// each.
const KINDS: [(Kind, Option<&str>); 4] = [
    (Kind::Queue, Some("queue")),
    (Kind::Stack, Some("stack")),
    (Kind::Heap, Some("priority queue")),
    (Kind::Counter, None),
];

/// The design: a panel per kind, normalized to the kind's reference peer.
fn design(threads: &[u32], trials: u32) -> Design {
    let imps = ds_table()
        .iter()
        .map(|i| {
            let kind = KINDS.iter().find(|k| k.0 == i.kind).and_then(|k| k.1);
            Imp {
                name: qualified(i.kind, i.name),
                role: if i.origin == Origin::Peer {
                    Role::Peer
                } else {
                    Role::Ours
                },
                kind,
            }
        })
        .collect();
    let xs: Vec<f64> = threads.iter().map(|&n| f64::from(n)).collect();
    let mut d = Design::single(
        "threads",
        "operations per second",
        Better::Higher,
        Vec::new(),
        imps,
        trials,
    )
    .median();
    d.panels = KINDS
        .iter()
        .map(|(k, _)| Panel {
            baseline: Some(qualified(*k, reference(*k))),
            ..Panel::new(structure(*k), xs.clone())
        })
        .collect();
    d
}

/// The targets as clauses, and the handle-free rows as notes.
fn verdicts(threads: &[u32], cores: u32) -> Verdicts {
    let panel = |k: Kind| KINDS.iter().position(|x| x.0 == k).unwrap_or(0);
    let clauses = TARGETS
        .iter()
        .map(|&(kind, ours, peer)| {
            Clause::at_least_everywhere(
                format!("target: {ours} ≥ 1.0× {peer} ({})", structure(kind)),
                None,
                &qualified(kind, ours),
                &qualified(kind, peer),
                panel(kind),
                1.0,
            )
        })
        .collect();
    let notes = vec![format!(
        "{cores} cores: {} threads run unpinned, so counts above {cores} are oversubscribed (real Linux preemption); each thread loops put+take with no work between; every point is the median of its rounds; fair = median min/max per-thread operations",
        threads
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    )];
    Verdicts {
        conclusion: "no paper conclusion: structure throughput under real oversubscription, as ratios to the peers".into(),
        clauses,
        notes,
        targets: true,
        advice: KINDS
            .iter()
            .enumerate()
            .filter_map(|(pi, (_, kind))| Some(AdviceRule { kind: (*kind)?, panel: pi }))
            .collect(),
    }
}

/// Per kind and thread count, the best mpsync row and the best peer, each
/// with its fairness: "stack 8 threads: best mpsync Treiber 1.70× best peer
/// crossbeam-epoch Treiber (fair 0.93 vs 0.88)".
fn fairness_notes(r: &Results<'_>, threads: &[u32]) -> Vec<String> {
    let fair = |name: &str, pi: usize, x: f64| {
        r.median_of(name, pi, x, |t| t.fairness_min_max)
            .map_or_else(|| "-".to_string(), |f| format!("{f:.2}"))
    };
    let mut notes = Vec::new();
    for (pi, (kind, _)) in KINDS.iter().enumerate() {
        let parts: Vec<String> = threads
            .iter()
            .filter_map(|&n| {
                let x = f64::from(n);
                let (ours, _) = *r.ranked(Role::Ours, None, pi, x).first()?;
                let (peer, _) = *r.ranked(Role::Peer, None, pi, x).first()?;
                let g = r.goodness(&ours.name, &peer.name, pi, x)?;
                let short = |s: &str| {
                    s.strip_prefix(&format!("{}: ", structure(*kind)))
                        .unwrap_or(s)
                        .to_string()
                };
                Some(format!(
                    "{n} thr {} {}× {} (fair {} vs {})",
                    short(&ours.name),
                    sig3(g),
                    short(&peer.name),
                    fair(&ours.name, pi, x),
                    fair(&peer.name, pi, x)
                ))
            })
            .collect();
        if !parts.is_empty() {
            notes.push(format!(
                "{}: best mpsync / best peer: {}",
                structure(*kind),
                parts.join("; ")
            ));
        }
    }
    notes
}

/// Runs the experiment.
pub fn run(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let cores = p.cores.max(1);
    let threads: Vec<u32> = p.threads.clone().unwrap_or_else(|| {
        if p.quick {
            vec![2, 3 * cores]
        } else {
            vec![1, 2, 4, 3 * cores, 4 * cores]
        }
    });
    let quick_factor = if p.quick { QUICK_DURATION_FACTOR } else { 1.0 };
    let duration =
        Duration::from_secs_f64((BASE_DURATION_MS * p.scale * quick_factor).max(20.0) / 1e3);
    let table = ds_table();
    let rounds = p.trials.max(MIN_ROUNDS);
    let d = design(&threads, rounds);
    let started = Instant::now();
    let trials = model::collect(exp.id, &d, &mut |c| {
        let (kind, _) = KINDS[c.panel];
        let Some(imp) = table
            .iter()
            .find(|i| i.kind == kind && qualified(i.kind, i.name) == c.imp.name)
        else {
            return Ok(None);
        };
        let spec = DsThroughputSpec {
            threads: c.x as u32,
            duration,
            alloc: p.alloc,
        };
        let counts = (imp.throughput)(&spec, imp.kind);
        Ok(Some(model::counts_trial(&counts, duration, c.x as u32)))
    })?;
    let mut v = verdicts(&threads, cores);
    // What the handle-free API's thread-local cache costs: each `Auto` row over
    // the same structure with an explicit handle (a measurement, no target).
    let points = model::summarize(&d, &trials);
    let r = Results {
        design: &d,
        points: &points,
        trials: &trials,
    };
    v.notes.extend(fairness_notes(&r, &threads));
    for &(kind, handle, auto) in AUTO_PAIRS {
        let pi = KINDS.iter().position(|k| k.0 == kind).unwrap_or(0);
        let (handle, auto) = (qualified(kind, handle), qualified(kind, auto));
        let parts: Vec<String> = threads
            .iter()
            .filter_map(|&n| {
                let g = r.goodness(&auto, &handle, pi, f64::from(n))?;
                Some(format!("{n} threads {}", sig3(g)))
            })
            .collect();
        if !parts.is_empty() {
            v.notes.push(format!(
                "{auto} / {handle} throughput (the cached registration's cost): {}",
                parts.join(", ")
            ));
        }
    }
    let params = serde_json::json!({
        "threads": threads,
        "rounds": rounds,
        "summary": "median",
        "trial_ms": duration.as_secs_f64() * 1e3,
        "ops_per_quiescent_state": super::structures::OPS_PER_QUIESCENT,
        "references": KINDS.map(|(k, _)| qualified(k, reference(k))),
    });
    Ok(model::finish(
        exp, p, preempt, &d, trials, v, params, started,
    ))
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
