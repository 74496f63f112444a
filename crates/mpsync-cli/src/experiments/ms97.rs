//! `ms97-queue`, `ms97-stack`, `ms97-heap`, `ms97-counter`: the microbenchmarks
//! of Michael & Scott, JPDC 1998 / PODC 1997 §4 (papers/000). One million
//! operation pairs in all (enqueue/dequeue, push/pop, insert/delete_min; plain
//! increments for counters), split evenly among the workers, each operation
//! followed by 6 µs ±10% of calibrated busy work; quantum 10 ms; MP level m = m
//! applications per processor, one of them ours. Time at every point is
//! normalized to the preemption-safe single lock at the same point, as the paper
//! draws it. Locks are TAS-B (bounded exponential backoff, cap 30 µs), ordinary or
//! preemption-safe (`TasBNp`).
//!
//! The paper's horizontal axis is processors (1..11) with one graph per MP level;
//! mpsync plots time against the MP level at one processor count (all available
//! cores unless `--procs` names one), which on a 2-core machine is the informative
//! axis. `--quick` runs 3.5% of the pairs on top of its usual `--scale 0.3`
//! (5,250 pairs per worker on 2 cores, ≈ 63 ms of work alone: six 10 ms quanta,
//! twelve at MP 2) and only MP levels 1 and 2 (as `wks94`'s quick runs).

use std::time::{Duration, Instant};

use mpsync::util::busy::BusyWork;

use super::locks::Origin;
use super::structures::{DsImpl, Kind, Ms97Spec, of_kind};
use super::wks94::{AMONG_THE_BEST, COLLAPSE, PointEnvs, QUICK_MP_LEVELS, unmeasured};
use super::{Experiment, Params};
use crate::env::{Outcome, PointEnv, Preempt};
use crate::model::{
    self, Better, Cell, Clause, Design, Imp, Judged, Results, Role, Verdicts, fmt_x,
};
use crate::output::{RunRecord, Trial};
use crate::svg::sig3;

/// Operation pairs at `--scale 1`, over all workers.
pub const BASE_PAIRS: f64 = 1_000_000.0;
/// Extra factor on the pairs under `--quick` (0.1, then 0.05, now 0.035: cut
/// with the MP levels to keep `repro all --quick` under its 10 minutes on 2 cores).
pub const QUICK_FACTOR: f64 = 0.035;
/// Busy work after each operation.
pub const WORK_US: f64 = 6.0;
/// The paper's quantum.
pub const QUANTUM_MS: f64 = 10.0;
/// Every time is normalized to this row at the same point.
pub const BASELINE: &str = "single lock (PS)";

/// The experiment's structure kind and conclusion.
fn program(id: &str) -> anyhow::Result<(Kind, &'static str)> {
    Ok(match id {
        "ms97-queue" => (
            Kind::Queue,
            "ordinary locks degrade as the multiprogramming level rises while preemption-safe locks and non-blocking queues stay flat; the MS non-blocking queue is the fastest at every level",
        ),
        "ms97-stack" => (
            Kind::Stack,
            "the Treiber stack is the fastest, even on a dedicated machine",
        ),
        "ms97-heap" => (
            Kind::Heap,
            "the preemption-safe lock beats the general (Herlihy) non-blocking heap at every multiprogramming level",
        ),
        "ms97-counter" => (
            Kind::Counter,
            "the non-blocking (CAS loop) counter beats the preemption-safe lock by more than 50% under multiprogramming",
        ),
        other => anyhow::bail!("{other} is not an ms97 experiment"),
    })
}

/// The kind a structure of `kind` is recommended as.
pub(super) fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Queue => "queue",
        Kind::Stack => "stack",
        Kind::Heap => "priority queue",
        Kind::Counter => "counter",
    }
}

/// The design: the MP levels at one processor count, every row of `kind`
/// (peers as peers), normalized to [`BASELINE`] at the same level.
pub(super) fn design(kind: Kind, table: &[DsImpl], mps: Vec<f64>, trials: u32) -> Design {
    let imps = table
        .iter()
        .map(|i| match i.origin {
            Origin::Peer => Imp::peer(i.name, kind_name(kind)),
            _ => Imp::ours(i.name, kind_name(kind)),
        })
        .collect();
    Design::single(
        "multiprogramming level",
        "seconds",
        Better::Lower,
        mps,
        imps,
        trials,
    )
    .baseline(BASELINE)
}

/// The MP levels: 1 alone without multiprogramming.
pub(super) fn mp_levels(p: &Params, preempt: Preempt) -> Vec<f64> {
    if preempt == Preempt::None {
        return vec![1.0];
    }
    p.mp.clone().unwrap_or_else(|| {
        if p.quick {
            QUICK_MP_LEVELS.to_vec()
        } else {
            vec![1.0, 2.0, 3.0]
        }
    })
}

/// Runs one of the four microbenchmarks (by `exp.id`).
pub fn run(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let (kind, conclusion) = program(exp.id)?;
    let procs = procs_of(p);
    let mps = mp_levels(p, preempt);
    let quantum = p.quantum(QUANTUM_MS);
    let pairs = BASE_PAIRS * p.scale * if p.quick { QUICK_FACTOR } else { 1.0 };
    let spec = Ms97Spec {
        ops: ((pairs / f64::from(procs)).round() as u64).max(1),
        work_iters: BusyWork::global().iters_for_ns((WORK_US * 1e3) as u64),
        seed: p.seed,
        alloc: p.alloc,
    };
    let table: Vec<DsImpl> = of_kind(kind);
    let d = design(kind, &table, mps.clone(), p.trials);
    let mut envs = PointEnvs::new(preempt, quantum, p.seed);
    let started = Instant::now();
    let trials = collect_mp(exp.id, &d, &mps, procs, &mut envs, &mut |c, env| {
        let imp = row_of(&table, c.imp.name.as_str())?;
        let body = (imp.ms97)(
            &Ms97Spec {
                seed: spec.seed ^ u64::from(c.trial),
                ..spec
            },
            kind,
        );
        Ok(trial_of(&env.run(&*body)?, c.x, procs))
    })?;
    let params = point_params(
        procs,
        &mps,
        quantum,
        serde_json::json!({
            "pairs_total": spec.ops * u64::from(procs),
            "pairs_per_worker": spec.ops,
            "work_us_after_each_op": WORK_US,
            "work_busy_iters": spec.work_iters,
            "jitter": 0.1,
            "implementations": table.iter().map(|i| i.name).collect::<Vec<_>>(),
        }),
    );
    let points = model::summarize(&d, &trials);
    let r = Results {
        design: &d,
        points: &points,
        trials: &trials,
    };
    let multiprogrammed = preempt != Preempt::None && mps.iter().any(|&m| m > 1.0);
    let mut notes = vec![format!(
        "rule: \"degrades\" = time normalized to {BASELINE} at the top MP level at least {COLLAPSE}x that at the first; \"the fastest\" = within {AMONG_THE_BEST:.2}x of the fastest of the paper's rows"
    )];
    notes.extend(observations(&r));
    let v = Verdicts {
        conclusion: conclusion.into(),
        clauses: clauses(kind, multiprogrammed),
        notes,
        ..Verdicts::default()
    };
    let (mut rec, svg) = model::finish(exp, p, preempt, &d, trials, v, params, started);
    rec.extra = serde_json::json!({ "scheduler": envs.sched });
    Ok((rec, svg))
}

/// The processor count: `--procs`' first, else every core.
pub(super) fn procs_of(p: &Params) -> u32 {
    p.procs
        .as_ref()
        .and_then(|v| v.first().copied())
        .unwrap_or(p.cores)
}

/// The row of `table` named `name`.
pub(super) fn row_of<'a>(table: &'a [DsImpl], name: &str) -> anyhow::Result<&'a DsImpl> {
    table
        .iter()
        .find(|i| i.name == name)
        .ok_or_else(|| anyhow::anyhow!("no structure named {name}"))
}

/// The design's trials, each measured by `measure` in the environment of its
/// point (`procs` workers at the cell's MP level, one of `mps`); closes the
/// last environment.
pub(super) fn collect_mp(
    id: &str,
    d: &Design,
    mps: &[f64],
    procs: u32,
    envs: &mut PointEnvs,
    measure: &mut dyn FnMut(&Cell<'_>, &PointEnv) -> anyhow::Result<Trial>,
) -> anyhow::Result<Vec<Trial>> {
    let trials = model::collect(id, d, &mut |c| {
        let index = mps.iter().position(|&m| m == c.x).unwrap_or(0);
        let env = envs.at(c, index, procs, c.x)?;
        measure(c, env).map(Some)
    })?;
    envs.close();
    Ok(trials)
}

/// The trial of one run of the workers (`o`) at MP `mp` on `procs` processors.
pub(super) fn trial_of(o: &Outcome, mp: f64, procs: u32) -> Trial {
    Trial {
        value: o.wall.as_secs_f64(),
        preemptions: o.preemptions,
        warnings: o.warnings,
        mp: Some(mp),
        procs: Some(procs),
        finish_spread: Some(o.finish_spread),
        ..Trial::default()
    }
}

/// A run's parameters: the point's (processors, MP levels, quantum), then
/// the experiment's own (`extra`, an object).
pub(super) fn point_params(
    procs: u32,
    mps: &[f64],
    quantum: Duration,
    extra: serde_json::Value,
) -> serde_json::Value {
    let mut all = serde_json::json!({
        "processors": procs,
        "mp_levels": mps,
        "quantum_ms": quantum.as_secs_f64() * 1e3,
    });
    if let (Some(all), serde_json::Value::Object(extra)) = (all.as_object_mut(), extra) {
        all.extend(extra);
    }
    all
}

/// Per MP level: the best of mpsync's rows against the best peer.
pub(super) fn observations(r: &Results<'_>) -> Vec<String> {
    let mut notes = Vec::new();
    for &x in &r.design.panels[0].xs {
        let (Some((m, mv)), Some((peer, pv))) = (
            r.ranked(Role::Ours, None, 0, x).first().copied(),
            r.ranked(Role::Peer, None, 0, x).first().copied(),
        ) else {
            continue;
        };
        notes.push(format!(
            "observation: MP {}: best mpsync ({}) / best peer ({}) = {:.2} (time; < 1 is mpsync faster)",
            fmt_x(x),
            m.name,
            peer.name,
            mv / pv
        ));
    }
    notes
}

/// The paper's rows of `kind` (peers excluded): "the fastest" is among them.
fn paper_rows(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Queue => &[
            "single lock",
            "single lock (PS)",
            "two-lock",
            "two-lock (PS)",
            "MS non-blocking",
            "PLJ non-blocking",
        ],
        Kind::Stack => &["single lock", "single lock (PS)", "Treiber", "Herlihy"],
        Kind::Heap => &["single lock", "single lock (PS)", "Herlihy non-blocking"],
        Kind::Counter => &["single lock", "single lock (PS)", "CAS loop"],
    }
}

/// The paper's clauses for `kind`; those about multiprogramming are not
/// judged without a multiprogrammed point.
pub fn clauses(kind: Kind, multiprogrammed: bool) -> Vec<Clause> {
    match kind {
        Kind::Queue => {
            let mut c: Vec<Clause> = ["single lock", "two-lock"]
                .into_iter()
                .map(|n| degrades(n, true, multiprogrammed, "degrades significantly (Fig. 1)"))
                .collect();
            c.extend(
                ["two-lock (PS)", "MS non-blocking", "PLJ non-blocking"]
                    .into_iter()
                    .map(|n| {
                        degrades(
                            n,
                            false,
                            multiprogrammed,
                            "remains relatively unchanged (Fig. 1)",
                        )
                    }),
            );
            c.push(fastest(
                kind,
                "MS non-blocking",
                "the best performance; > 40% faster than the single PS lock on 11 processors at various MP levels (Fig. 1)",
            ));
            c
        }
        Kind::Stack => vec![fastest(
            kind,
            "Treiber",
            "outperforms all the others even on dedicated systems; > 45% faster than the PS lock on 11 processors (Fig. 2)",
        )],
        Kind::Heap => vec![heap_clause()],
        Kind::Counter => vec![counter_clause(multiprogrammed)],
    }
}

/// "`name` degrades" (or stays flat): its time normalized to [`BASELINE`]
/// at the top MP level is at least [`COLLAPSE`] × that at the first.
pub(super) fn degrades(
    name: &'static str,
    ordinary: bool,
    multiprogrammed: bool,
    paper: &'static str,
) -> Clause {
    let statement = if ordinary {
        format!(
            "{name} (ordinary lock) degrades as the MP level rises (≥ {COLLAPSE}× normalized time)"
        )
    } else {
        format!("{name} stays flat as the MP level rises (< {COLLAPSE}× normalized time)")
    };
    Clause::new(statement, Some(paper), move |r| {
        let xs = &r.design.panels[0].xs;
        let (first, top) = (xs.first().copied().unwrap_or(1.0), r.last_x(0));
        let at = format!("MP {} against MP {}", fmt_x(top), fmt_x(first));
        if !multiprogrammed {
            return unmeasured(
                at,
                "needs a multiprogrammed point: --preempt emulated|os, MP above 1",
            );
        }
        match (r.normalized(name, 0, first), r.normalized(name, 0, top)) {
            (Some(a), Some(b)) => {
                let q = b / a;
                let word = if q >= COLLAPSE {
                    "degrades"
                } else {
                    "stays flat"
                };
                Judged {
                    at,
                    ours: format!("{} ({word})", sig3(q)),
                    holds: Some((q >= COLLAPSE) == ordinary),
                }
            }
            _ => unmeasured(at, &format!("{name} or {BASELINE} has no value")),
        }
    })
}

/// "`name` is the fastest of the paper's rows at every MP level" (within
/// [`AMONG_THE_BEST`]).
fn fastest(kind: Kind, name: &'static str, paper: &str) -> Clause {
    fastest_of(
        paper_rows(kind),
        &format!("{}s", kind_name(kind)),
        name,
        paper,
    )
}

/// "`name` is the fastest of `rows` (the paper's `what`) at every MP level"
/// (within [`AMONG_THE_BEST`]).
pub(super) fn fastest_of(
    rows: &'static [&'static str],
    what: &str,
    name: &'static str,
    paper: &str,
) -> Clause {
    Clause::new(
        format!("{name} is the fastest of the paper's {what} (within {AMONG_THE_BEST}×)"),
        Some(paper),
        move |r| {
            let at = "every MP level".to_string();
            let mut each = Vec::new();
            let mut holds = true;
            for &x in &r.design.panels[0].xs {
                let (Some(v), Some((b, bv))) = (r.value(name, 0, x), r.best_of(rows, 0, x)) else {
                    continue;
                };
                holds &= v / bv <= AMONG_THE_BEST;
                each.push(format!("{} {} ({})", fmt_x(x), sig3(v / bv), b.name));
            }
            if each.is_empty() {
                return unmeasured(at, &format!("{name} has no value"));
            }
            Judged {
                at,
                ours: format!("{name} / fastest: {}", each.join(", ")),
                holds: Some(holds),
            }
        },
    )
}

/// `a / b` at every x of `xs` with both values: (x, ratio) each.
fn ratios(r: &Results<'_>, a: &str, b: &str, xs: &[f64]) -> Vec<(f64, f64)> {
    xs.iter()
        .filter_map(|&x| Some((x, r.value(a, 0, x)? / r.value(b, 0, x)?)))
        .collect()
}

/// "The single PS lock beats the Herlihy non-blocking heap at every MP level".
fn heap_clause() -> Clause {
    Clause::new(
        "single lock (PS) is faster than the Herlihy non-blocking heap",
        Some(
            "the non-blocking heap cannot match the PS lock, dedicated or multiprogrammed (Fig. 3)",
        ),
        |r| {
            let at = "every MP level".to_string();
            let got = ratios(r, "Herlihy non-blocking", BASELINE, &r.design.panels[0].xs);
            if got.is_empty() {
                return unmeasured(at, "Herlihy non-blocking or single lock (PS) has no value");
            }
            let each: Vec<String> = got
                .iter()
                .map(|(x, q)| format!("{} {}", fmt_x(*x), sig3(*q)))
                .collect();
            Judged {
                at,
                ours: format!(
                    "Herlihy non-blocking / single lock (PS): {}",
                    each.join(", ")
                ),
                holds: Some(got.iter().all(|(_, q)| *q > 1.0)),
            }
        },
    )
}

/// "The CAS loop beats the single PS lock by more than 50% at every
/// multiprogrammed level" (PS / CAS > 1.5).
fn counter_clause(multiprogrammed: bool) -> Clause {
    Clause::new(
        "single lock (PS) / CAS loop > 1.5 (the CAS loop more than 50% faster)",
        Some(
            "the non-blocking counter > 55% faster than the PS lock on 11 processors, multiprogrammed (Fig. 4)",
        ),
        move |r| {
            let at = "every multiprogrammed level".to_string();
            if !multiprogrammed {
                return unmeasured(
                    at,
                    "needs a multiprogrammed point: --preempt emulated|os, MP above 1",
                );
            }
            let xs: Vec<f64> = r.design.panels[0]
                .xs
                .iter()
                .copied()
                .filter(|&x| x > 1.0)
                .collect();
            let got = ratios(r, BASELINE, "CAS loop", &xs);
            if got.is_empty() {
                return unmeasured(at, "single lock (PS) or CAS loop has no value");
            }
            let each: Vec<String> = got
                .iter()
                .map(|(x, q)| format!("{} {}", fmt_x(*x), sig3(*q)))
                .collect();
            Judged {
                at,
                ours: format!("single lock (PS) / CAS loop: {}", each.join(", ")),
                holds: Some(got.iter().all(|(_, q)| *q > 1.5)),
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{Point, Status, Verdict};

    /// A point normalized to `n` (values as given).
    fn pt(name: &str, x: f64, v: f64) -> Point {
        Point {
            panel: None,
            implementation: name.into(),
            x,
            value: v,
            normalized: v,
        }
    }

    fn verdict(kind: Kind, pts: &[Point], mps: &[f64], multiprogrammed: bool) -> Verdict {
        let d = design(kind, &of_kind(kind), mps.to_vec(), 1);
        let r = Results {
            design: &d,
            points: pts,
            trials: &[],
        };
        let c = clauses(kind, multiprogrammed);
        Verdict::from_clauses("c", c.iter().map(|c| c.judge(&r)).collect(), vec![])
    }

    #[test]
    fn normalization_is_per_point() {
        let d = design(Kind::Counter, &of_kind(Kind::Counter), vec![1.0, 3.0], 1);
        let t = |i: &str, x: f64, v: f64| Trial {
            implementation: i.into(),
            x,
            value: v,
            ..Trial::default()
        };
        let trials = vec![
            t(BASELINE, 1.0, 2.0),
            t("CAS loop", 1.0, 1.0),
            t(BASELINE, 3.0, 6.0),
            t("CAS loop", 3.0, 12.0),
        ];
        let n: Vec<(String, f64)> = model::summarize(&d, &trials)
            .into_iter()
            .map(|p| (p.implementation, p.normalized))
            .collect();
        let want = |n: &str, v: f64| (n.to_string(), v);
        assert!(
            n.contains(&want("CAS loop", 0.5)) && n.contains(&want("CAS loop", 2.0)),
            "{n:?}"
        );
        assert!(n.contains(&want(BASELINE, 1.0)), "{n:?}");
    }

    #[test]
    fn counter_clause() {
        let mps = [1.0, 2.0];
        let pts = vec![
            pt("single lock (PS)", 1.0, 1.0),
            pt("CAS loop", 1.0, 0.9),
            pt("single lock (PS)", 2.0, 1.0),
            pt("CAS loop", 2.0, 0.5),
        ];
        let v = verdict(Kind::Counter, &pts, &mps, true);
        assert_eq!(v.status, Status::Holds, "{v:?}");
        let pts = vec![pt("single lock (PS)", 2.0, 1.0), pt("CAS loop", 2.0, 0.8)];
        let v = verdict(Kind::Counter, &pts, &mps, true);
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
        let v = verdict(Kind::Counter, &pts, &[1.0], false);
        assert_eq!(v.status, Status::PartlyEvaluable, "{v:?}");
    }

    #[test]
    fn missing_rows_are_partly_evaluable() {
        let v = verdict(
            Kind::Stack,
            &[pt("single lock (PS)", 1.0, 1.0)],
            &[1.0],
            false,
        );
        assert_eq!(v.status, Status::PartlyEvaluable, "{v:?}");
        assert!(v.clauses[0].ours.contains("Treiber"), "{v:?}");
    }

    #[test]
    fn stack_and_heap_clauses_can_fail() {
        let pts = vec![
            pt("single lock (PS)", 1.0, 1.0),
            pt("Treiber", 1.0, 1.3),
            pt("Herlihy non-blocking", 1.0, 0.9),
        ];
        let v = verdict(Kind::Stack, &pts, &[1.0], false);
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
        assert_eq!(
            v.clauses[0].ours,
            "Treiber / fastest: 1 1.30 (single lock (PS))"
        );
        let v = verdict(Kind::Heap, &pts, &[1.0], false);
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
        let pts = vec![
            pt("single lock (PS)", 1.0, 1.0),
            pt("Herlihy non-blocking", 1.0, 2.0),
        ];
        assert_eq!(
            verdict(Kind::Heap, &pts, &[1.0], false).status,
            Status::Holds
        );
    }

    #[test]
    fn queue_clauses() {
        let mps = [1.0, 3.0];
        let mut pts = Vec::new();
        for (n, a, b) in [
            ("single lock", 1.0, 3.0),
            ("single lock (PS)", 1.0, 1.0),
            ("two-lock", 0.9, 2.0),
            ("two-lock (PS)", 0.9, 1.0),
            ("MS non-blocking", 0.7, 0.7),
            ("PLJ non-blocking", 0.8, 0.9),
        ] {
            pts.push(pt(n, 1.0, a));
            pts.push(pt(n, 3.0, b));
        }
        let v = verdict(Kind::Queue, &pts, &mps, true);
        assert_eq!(v.status, Status::Holds, "{v:?}");
        assert_eq!(v.summary(), "6 of 6 clauses hold");
        // MS no longer the fastest at MP 3; PLJ now degrades.
        pts.iter_mut()
            .filter(|p| p.implementation == "PLJ non-blocking" && p.x == 3.0)
            .for_each(|p| {
                p.value = 0.5;
                p.normalized = 0.5;
            });
        pts.iter_mut()
            .filter(|p| p.implementation == "two-lock (PS)" && p.x == 3.0)
            .for_each(|p| p.normalized = 2.0);
        let v = verdict(Kind::Queue, &pts, &mps, true);
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
        assert_eq!(v.clauses[5].holds, Some(false), "{v:?}");
        assert_eq!(v.clauses[2].holds, Some(false), "{v:?}");
        // Ordinary locks that do not degrade.
        pts.iter_mut()
            .filter(|p| p.implementation == "single lock")
            .for_each(|p| p.normalized = 1.0);
        let v = verdict(Kind::Queue, &pts, &mps, true);
        assert_eq!(v.clauses[0].holds, Some(false), "{v:?}");
    }

    #[test]
    fn every_queue_clause_can_fail() {
        let mps = [1.0, 3.0];
        let mut pts = Vec::new();
        for n in paper_rows(Kind::Queue) {
            pts.push(pt(n, 1.0, 1.0));
            // Ordinary locks flat, everything else degrading 3×.
            let ordinary = *n == "single lock" || *n == "two-lock";
            pts.push(pt(n, 3.0, if ordinary { 1.0 } else { 3.0 }));
        }
        pts.push(pt("single lock", 1.0, 0.5));
        pts.retain(|p| !(p.implementation == "single lock" && p.x == 1.0 && p.value == 1.0));
        let v = verdict(Kind::Queue, &pts, &mps, true);
        // single lock: 1.0 / 0.5 = 2 (degrades, holds); the others fail.
        let holds: Vec<Option<bool>> = v.clauses.iter().map(|c| c.holds).collect();
        assert_eq!(
            holds,
            [
                Some(true),
                Some(false),
                Some(false),
                Some(false),
                Some(false),
                Some(false)
            ],
            "{v:?}"
        );
    }
}
