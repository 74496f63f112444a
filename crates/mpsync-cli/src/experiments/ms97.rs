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

use std::time::Instant;

use mpsync::util::busy::BusyWork;

use super::structures::{DsImpl, Kind, Ms97Spec, of_kind};
use super::wks94::{AMONG_THE_BEST, COLLAPSE, QUICK_MP_LEVELS};
use super::{Experiment, Params};
use crate::env::{PointEnv, Preempt, summarize};
use crate::output::{Machine, Point, RunRecord, Status, Trial, Verdict};
use crate::svg::line_chart;

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

/// Runs one of the four microbenchmarks (by `exp.id`).
pub fn run(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let (kind, conclusion) = program(exp.id)?;
    let procs = p
        .procs
        .as_ref()
        .and_then(|v| v.first().copied())
        .unwrap_or(p.cores);
    let mps: Vec<f64> = if preempt == Preempt::None {
        vec![1.0]
    } else {
        p.mp.clone().unwrap_or_else(|| {
            if p.quick {
                QUICK_MP_LEVELS.to_vec()
            } else {
                vec![1.0, 2.0, 3.0]
            }
        })
    };
    let quantum = p.quantum(QUANTUM_MS);
    let pairs = BASE_PAIRS * p.scale * if p.quick { QUICK_FACTOR } else { 1.0 };
    let spec = Ms97Spec {
        ops: ((pairs / f64::from(procs)).round() as u64).max(1),
        work_iters: BusyWork::global().iters_for_ns((WORK_US * 1e3) as u64),
        seed: p.seed,
        alloc: p.alloc,
    };
    let table: Vec<DsImpl> = of_kind(kind);
    let names: Vec<&str> = table.iter().map(|i| i.name).collect();
    let pb = crate::progress((mps.len() * p.trials as usize * table.len()) as u64, exp.id);
    let started = Instant::now();
    let mut trials = Vec::new();
    let mut sched = Vec::new();
    for (pi, &mp) in mps.iter().enumerate() {
        let env = PointEnv::start(preempt, procs, mp, quantum, p.seed.wrapping_add(pi as u64))?;
        for t in 0..p.trials {
            // Rotate the order each trial so no implementation always runs first.
            for k in 0..table.len() {
                let imp = &table[(k + t as usize) % table.len()];
                let body = (imp.ms97)(
                    &Ms97Spec {
                        seed: spec.seed ^ u64::from(t),
                        ..spec
                    },
                    kind,
                );
                let o = env.run(&*body)?;
                trials.push(Trial {
                    implementation: imp.name.into(),
                    x: mp,
                    trial: t,
                    value: o.wall.as_secs_f64(),
                    preemptions: o.preemptions,
                    warnings: o.warnings,
                    mp: Some(mp),
                    procs: Some(procs),
                    finish_spread: Some(o.finish_spread),
                    ..Trial::default()
                });
                pb.inc(1);
            }
        }
        if let Some(s) = env.finish() {
            sched.push(serde_json::json!({"x": mp, "scheduler": summarize(&s)}));
        }
    }
    pb.finish_and_clear();
    let (pts, base_name) = normalize_per_point(&trials, &names, BASELINE);
    let mut verdict = verdict(kind, conclusion, &pts, &mps, preempt);
    if base_name != BASELINE {
        verdict.details.push(format!(
            "{BASELINE} was not measured: times are normalized to {base_name} instead, so the clauses that need it are not evaluated"
        ));
        if verdict.status == Status::Holds {
            verdict.status = Status::PartlyEvaluable;
        }
    }
    for &x in &mps {
        let best = |origin_peer: bool| {
            pts.iter()
                .filter(|q| q.x == x)
                .filter(|q| {
                    table.iter().any(|i| {
                        i.name == q.implementation
                            && (i.origin == super::locks::Origin::Peer) == origin_peer
                    })
                })
                .min_by(|a, b| a.value.total_cmp(&b.value))
        };
        if let (Some(m), Some(peer)) = (best(false), best(true)) {
            verdict.details.push(format!(
                "observation: MP {x}: best mpsync ({}) / best peer ({}) = {:.2} (time; < 1 is mpsync faster)",
                m.implementation,
                peer.implementation,
                m.value / peer.value
            ));
        }
    }
    let series = Point::series(&names, &pts, |q| q.normalized);
    let title = format!(
        "{} (--preempt {}, {} processors, {})",
        exp.id,
        preempt.name(),
        procs,
        verdict.status.label()
    );
    let svg = line_chart(
        &title,
        "multiprogramming level",
        &format!("time normalized to {base_name} at the same level"),
        &series,
    );
    let rec = RunRecord {
        advice: Vec::new(),
        experiment: exp.id.into(),
        paper: exp.reference.into(),
        title: exp.title.into(),
        preempt: preempt.name().into(),
        started_unix: crate::unix_now(),
        duration_s: started.elapsed().as_secs_f64(),
        machine: Machine::detect(),
        params: serde_json::json!({
            "common": p,
            "processors": procs,
            "mp_levels": mps,
            "quantum_ms": quantum.as_secs_f64() * 1e3,
            "pairs_total": spec.ops * u64::from(procs),
            "pairs_per_worker": spec.ops,
            "work_us_after_each_op": WORK_US,
            "work_busy_iters": spec.work_iters,
            "jitter": 0.1,
            "implementations": names,
        }),
        busy_iters_per_us: BusyWork::global().iters_per_us(),
        unit: "seconds".into(),
        x_label: "multiprogramming level".into(),
        baseline: format!("{base_name} at the same multiprogramming level"),
        trials,
        points: pts,
        extra: serde_json::json!({ "scheduler": sched }),
        verdict,
    };
    Ok((rec, svg))
}

/// Mean of the middle trials per (implementation, x), normalized to `baseline`
/// at the same x (the paper's normalization); where `baseline` was not measured
/// at some x, to the first of `names` that was. Returns the points and the
/// baseline used.
pub fn normalize_per_point(
    trials: &[Trial],
    names: &[&str],
    baseline: &str,
) -> (Vec<Point>, String) {
    let xs = Trial::xs(trials);
    let mean = |name: &str, x: f64| Trial::mean_at(trials, name, x);
    let measured_everywhere = |n: &str| xs.iter().all(|&x| mean(n, x).is_some_and(|b| b > 0.0));
    let base_name = std::iter::once(baseline)
        .chain(names.iter().copied())
        .find(|n| measured_everywhere(n))
        .unwrap_or(baseline);
    let mut out = Vec::new();
    for &x in &xs {
        let base = mean(base_name, x).filter(|b| *b > 0.0).unwrap_or(1.0);
        for n in names {
            if let Some(v) = mean(n, x) {
                out.push(Point {
                    panel: None,
                    implementation: (*n).into(),
                    x,
                    value: v,
                    normalized: v / base,
                });
            }
        }
    }
    (out, base_name.to_string())
}

/// Evaluates the paper's conclusion for `kind` on normalized points.
pub fn verdict(
    kind: Kind,
    conclusion: &str,
    pts: &[Point],
    mps: &[f64],
    preempt: Preempt,
) -> Verdict {
    let mut details = Vec::new();
    let at = |name: &str, x: f64| {
        pts.iter()
            .find(|q| q.implementation == name && q.x == x)
            .map(|q| q.normalized)
            .filter(|v| v.is_finite())
    };
    let mut holds = true;
    let mut missing: Vec<&str> = Vec::new();
    let need = |name: &'static str, x: f64, missing: &mut Vec<&str>| {
        let v = at(name, x);
        if v.is_none() && !missing.contains(&name) {
            missing.push(name);
        }
        v
    };
    let first = mps.first().copied().unwrap_or(1.0);
    let top = mps.iter().copied().fold(first, f64::max);
    let multiprogrammed = top > 1.0 && preempt != Preempt::None;
    // The fastest of the paper's implementations at x (peers excluded).
    let paper_rows: &[&str] = match kind {
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
    };
    let fastest = |x: f64| {
        paper_rows
            .iter()
            .filter_map(|n| at(n, x).map(|v| (*n, v)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    };
    match kind {
        Kind::Queue => {
            if !multiprogrammed {
                missing.push("a multiprogrammed point (--preempt emulated|os, MP above 1) for the degradation clauses");
            } else {
                for n in ["single lock", "two-lock"] {
                    if let (Some(a), Some(b)) =
                        (need(n, first, &mut missing), need(n, top, &mut missing))
                    {
                        let r = b / a;
                        let ok = r >= COLLAPSE;
                        holds &= ok;
                        details.push(format!(
                            "{n} (ordinary): normalized time at MP {top} / MP {first} = {r:.2} ({})",
                            if ok { "degrades" } else { "does not degrade" }
                        ));
                    }
                }
                for n in ["two-lock (PS)", "MS non-blocking", "PLJ non-blocking"] {
                    if let (Some(a), Some(b)) =
                        (need(n, first, &mut missing), need(n, top, &mut missing))
                    {
                        let r = b / a;
                        let ok = r < COLLAPSE;
                        holds &= ok;
                        details.push(format!(
                            "{n}: normalized time at MP {top} / MP {first} = {r:.2} ({})",
                            if ok { "stays flat" } else { "degrades" }
                        ));
                    }
                }
                details.push(format!("rule: \"degrades\" = normalized time at the top MP level at least {COLLAPSE}x that at the first"));
            }
            for &x in mps {
                if let (Some(ms), Some((best, b))) =
                    (need("MS non-blocking", x, &mut missing), fastest(x))
                {
                    let r = ms / b;
                    let ok = r <= AMONG_THE_BEST;
                    holds &= ok;
                    details.push(format!(
                        "MP {x}: MS non-blocking / fastest ({best}) = {r:.2} ({})",
                        if ok { "fastest" } else { "not the fastest" }
                    ));
                }
            }
        }
        Kind::Stack => {
            for &x in mps {
                if let (Some(tr), Some((best, b))) = (need("Treiber", x, &mut missing), fastest(x))
                {
                    let r = tr / b;
                    let ok = r <= AMONG_THE_BEST;
                    holds &= ok;
                    details.push(format!(
                        "MP {x}: Treiber / fastest ({best}) = {r:.2} ({})",
                        if ok { "fastest" } else { "not the fastest" }
                    ));
                }
            }
        }
        Kind::Heap => {
            for &x in mps {
                if let (Some(ps), Some(h)) = (
                    need("single lock (PS)", x, &mut missing),
                    need("Herlihy non-blocking", x, &mut missing),
                ) {
                    let ok = ps < h;
                    holds &= ok;
                    details.push(format!(
                        "MP {x}: Herlihy non-blocking / single lock (PS) = {:.2} ({})",
                        h / ps,
                        if ok {
                            "the PS lock wins"
                        } else {
                            "the non-blocking heap wins"
                        }
                    ));
                }
            }
        }
        Kind::Counter => {
            if !multiprogrammed {
                missing.push("a multiprogrammed point (--preempt emulated|os, MP above 1)");
            }
            for &x in mps.iter().filter(|&&x| x > 1.0) {
                if let (Some(ps), Some(cas)) = (
                    need("single lock (PS)", x, &mut missing),
                    need("CAS loop", x, &mut missing),
                ) {
                    let r = ps / cas;
                    let ok = r > 1.5;
                    holds &= ok;
                    details.push(format!("MP {x}: single lock (PS) / CAS loop = {r:.2} ({} the 1.5 of \"more than 50%\")", if ok { "beyond" } else { "short of" }));
                }
            }
        }
    }
    if !missing.is_empty() {
        details.push(format!(
            "not evaluated (not measured): {}",
            missing.join(", ")
        ));
    }
    let status = if !holds {
        Status::DoesNotHold
    } else if !missing.is_empty() {
        Status::PartlyEvaluable
    } else {
        Status::Holds
    };
    Verdict {
        clauses: Vec::new(),
        conclusion: conclusion.into(),
        status,
        details,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(name: &str, x: f64, n: f64) -> Point {
        Point {
            panel: None,
            implementation: name.into(),
            x,
            value: n,
            normalized: n,
        }
    }

    #[test]
    fn normalization_is_per_point() {
        let t = |i: &str, x: f64, v: f64| Trial {
            implementation: i.into(),
            x,
            value: v,
            ..Trial::default()
        };
        let trials = vec![
            t(BASELINE, 1.0, 2.0),
            t("X", 1.0, 1.0),
            t(BASELINE, 3.0, 6.0),
            t("X", 3.0, 12.0),
        ];
        let (pts, base) = normalize_per_point(&trials, &[BASELINE, "X"], BASELINE);
        assert_eq!(base, BASELINE);
        let n: Vec<f64> = pts.iter().map(|p| p.normalized).collect();
        assert_eq!(n, [1.0, 0.5, 1.0, 2.0]);
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
        let v = verdict(Kind::Counter, "c", &pts, &mps, Preempt::Emulated);
        assert_eq!(v.status, Status::Holds, "{v:?}");
        let pts = vec![pt("single lock (PS)", 2.0, 1.0), pt("CAS loop", 2.0, 0.8)];
        let v = verdict(Kind::Counter, "c", &pts, &mps, Preempt::Emulated);
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
    }

    #[test]
    fn missing_rows_are_partly_evaluable() {
        let v = verdict(
            Kind::Stack,
            "s",
            &[pt("single lock (PS)", 1.0, 1.0)],
            &[1.0],
            Preempt::None,
        );
        assert_eq!(v.status, Status::PartlyEvaluable, "{v:?}");
        assert!(v.details.iter().any(|d| d.contains("Treiber")));
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
        let v = verdict(Kind::Queue, "q", &pts, &mps, Preempt::Emulated);
        assert_eq!(v.status, Status::Holds, "{v:?}");
        // MS no longer the fastest at MP 3.
        pts.push(pt("X", 3.0, 0.1));
        pts.iter_mut()
            .filter(|p| p.implementation == "PLJ non-blocking" && p.x == 3.0)
            .for_each(|p| p.normalized = 0.5);
        let v = verdict(Kind::Queue, "q", &pts, &mps, Preempt::Emulated);
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
    }
}
