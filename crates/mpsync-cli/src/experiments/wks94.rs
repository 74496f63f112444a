//! `wks94-mplevel` and `wks94-procs`: the synthetic lock program of Wisniewski,
//! Kontothanassis & Scott (IPPS 1994, papers/003 §4.1-4.3): each of P workers
//! loops {lock; ~15 µs critical section; unlock; ~210 µs non-critical section}
//! with small random variation; the number of iterations is proportional to the
//! number of workers; quantum 20 ms. Time is normalized to TAS-B at the first point.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mpsync::util::busy::BusyWork;

use super::locks::{Censor, SyntheticSpec, select};
use super::{Experiment, Params};
use crate::env::{PointEnv, Preempt, summarize};
use crate::output::{Machine, Point, RunRecord, Status, Trial, Verdict};
use crate::stats::trimmed_mean;
use crate::svg::line_chart;

/// The paper's conclusion, as a statement.
pub const CONCLUSION: &str = "plain and -np queued locks collapse as the multiprogramming level rises; \
Queued-Handshaking and Smart-Q do not; TAS-B-np is among the best";

/// "Among the best": within this factor of the fastest implementation.
pub const AMONG_THE_BEST: f64 = 1.10;

/// "Collapse": at least this many times slower than TAS-B-np.
pub const COLLAPSE: f64 = 1.5;

/// Loop iterations per worker at `--scale 1`.
pub const BASE_ITERS: f64 = 4000.0;

/// A run stops at this many times the time one worker's loop takes alone (a
/// collapsing FIFO lock under `--preempt os` would otherwise run for hours); its
/// time is then extrapolated from the fraction done and reported as censored.
pub const CAP_FACTOR: f64 = 25.0;
/// The cap is never shorter than this (seconds).
pub const CAP_MIN_S: f64 = 2.0;
/// ... nor, under `--quick`, than this: a collapsing lock is as recognizable
/// after 1 s as after 2, and the smoke run has many of them under `--preempt os`.
pub const QUICK_CAP_MIN_S: f64 = 1.0;

/// Extra factor on the iterations under `--quick`, on top of its `--scale 0.3`
/// (as ms97's): wks94 then runs 420 iterations per worker, ≈ 95 ms alone, and
/// at MP 2 about ten 20 ms quanta per processor; wks95 525, ≈ 134 ms alone and
/// five 50 ms quanta at MP 2. Keeps `repro all --quick` under its 10 minutes.
pub const QUICK_FACTOR: f64 = 0.35;

/// MP levels of the MP-level experiments under `--quick` (full runs: 1, 1.5, 2,
/// 2.5, 3). MP 2 is the most multiprogrammed point, where every clause is
/// judged; MP 1 is the dedicated reference. MP 3 only deepens a collapse that
/// MP 2 already shows, at half the run's time.
pub const QUICK_MP_LEVELS: [f64; 2] = [1.0, 2.0];

/// Judges a conclusion on (points, (processors, MP) per x, x is processors, preemption).
pub type VerdictFn = fn(&[Point], &[(u32, f64)], bool, Preempt) -> Verdict;

/// A synthetic lock program: the papers' {lock; CS; unlock; non-CS} loop, its
/// sizes, the locks it compares and how its conclusion is judged.
#[derive(Debug, Clone, Copy)]
pub struct Program {
    /// Critical section, µs.
    pub cs_us: f64,
    /// Non-critical section, µs, given the number of processors.
    pub ncs_us: fn(u32) -> f64,
    /// Default quantum, ms.
    pub quantum_ms: f64,
    /// Loop iterations per worker at `--scale 1`.
    pub base_iters: f64,
    /// The paper's implementations (peers are always added).
    pub names: &'static [&'static str],
    /// Normalization baseline (at the first point).
    pub baseline: &'static str,
    /// Whether x is processors (else the MP level) — given the experiment and params.
    pub by_procs: fn(&Experiment, &Params) -> bool,
    /// Judges the conclusion on the points.
    pub verdict: VerdictFn,
    /// Locks whose ratio to `baseline` is printed as an observation.
    pub observe: &'static [&'static str],
    /// The mpsync locks a `--quick` run measures (every peer is measured too, as
    /// the verdicts compare against the fastest): those the verdict and the
    /// observations name. A full run measures all of `names`.
    pub quick_names: &'static [&'static str],
}

/// Paper 003's program (§4.1-4.3).
pub const WKS94: Program = Program {
    cs_us: 15.0,
    ncs_us: |_| 210.0,
    quantum_ms: 20.0,
    base_iters: BASE_ITERS,
    names: &[
        "TAS-B",
        "TAS-B-np",
        "Queued",
        "Queued-np",
        "Queued-Handshaking",
        "Smart-Q",
        "Native",
        "Native-np",
        "Ticket-np",
        "MCS-TP",
        "CLH-TP",
        "spin-then-park",
    ],
    baseline: "TAS-B",
    by_procs: |exp, _| exp.id == "wks94-procs",
    verdict,
    observe: &[
        "TAS-B",
        "TAS-B-np",
        "Queued",
        "Queued-np",
        "Queued-Handshaking",
        "Smart-Q",
        "Native",
        "parking_lot::Mutex",
    ],
    quick_names: &[
        "TAS-B",
        "TAS-B-np",
        "Queued",
        "Queued-np",
        "Queued-Handshaking",
        "Smart-Q",
        "Native",
    ],
};

/// Runs either experiment.
pub fn run(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    run_program(exp, p, preempt, &WKS94)
}

/// Runs a synthetic lock program over its points (MP levels or processor counts).
pub fn run_program(
    exp: &Experiment,
    p: &Params,
    preempt: Preempt,
    prog: &Program,
) -> anyhow::Result<(RunRecord, String)> {
    let by_procs = (prog.by_procs)(exp, p);
    let quantum = p.quantum(prog.quantum_ms);
    let points: Vec<(u32, f64)> = if by_procs {
        let mp =
            p.mp.as_ref()
                .and_then(|v| v.first().copied())
                .unwrap_or(2.0);
        let procs = p.procs.clone().unwrap_or_else(|| (1..=p.cores).collect());
        procs.into_iter().map(|n| (n, mp)).collect()
    } else {
        let procs = p
            .procs
            .as_ref()
            .and_then(|v| v.first().copied())
            .unwrap_or(p.cores);
        let mps = p.mp.clone().unwrap_or_else(|| {
            if p.quick {
                QUICK_MP_LEVELS.to_vec()
            } else {
                vec![1.0, 1.5, 2.0, 2.5, 3.0]
            }
        });
        mps.into_iter().map(|m| (procs, m)).collect()
    };
    let busy = BusyWork::global();
    let quick_factor = if p.quick { QUICK_FACTOR } else { 1.0 };
    let iters = ((prog.base_iters * p.scale * quick_factor).round() as u64).max(1);
    let cap_min_s = if p.quick { QUICK_CAP_MIN_S } else { CAP_MIN_S };
    let spec_at = |procs: u32| SyntheticSpec {
        iters,
        cs_iters: busy.iters_for_ns((prog.cs_us * 1e3) as u64),
        ncs_iters: busy.iters_for_ns(((prog.ncs_us)(procs) * 1e3) as u64),
        seed: p.seed,
        cap: None,
    };
    // A run's time cap: CAP_FACTOR times what one worker's loop takes alone.
    let cap_at = |procs: u32| {
        let ideal_s = iters as f64 * (prog.cs_us + (prog.ncs_us)(procs)) * 1e-6;
        Duration::from_secs_f64((CAP_FACTOR * ideal_s).max(cap_min_s))
    };
    let mut censored: Vec<String> = Vec::new();
    let spec = spec_at(points.first().map_or(1, |p| p.0));
    let table = if p.quick {
        select(prog.quick_names)
    } else {
        select(prog.names)
    };
    let pb = crate::progress(
        (points.len() * p.trials as usize * table.len()) as u64,
        exp.id,
    );
    let started = Instant::now();
    let mut trials = Vec::new();
    let mut sched = Vec::new();
    for (pi, &(procs, mp)) in points.iter().enumerate() {
        let x = if by_procs { f64::from(procs) } else { mp };
        let env = PointEnv::start(preempt, procs, mp, quantum, p.seed.wrapping_add(pi as u64))?;
        let spec = spec_at(procs);
        for t in 0..p.trials {
            // Rotate the order each trial so no implementation always runs first.
            for k in 0..table.len() {
                let imp = &table[(k + t as usize) % table.len()];
                let cap = Arc::new(Censor::new(cap_at(procs), spec.iters * u64::from(procs)));
                let body = (imp.synthetic)(&SyntheticSpec {
                    seed: spec.seed ^ u64::from(t),
                    cap: Some(cap.clone()),
                    ..spec.clone()
                });
                let o = env.run(&*body)?;
                let done = cap.completed();
                let censored_at = (done < 1.0).then_some(done);
                if censored_at.is_some() {
                    censored.push(format!(
                        "{} at {x} (trial {t}: {:.0}% done in {:.1} s)",
                        imp.name,
                        100.0 * done,
                        o.wall.as_secs_f64()
                    ));
                }
                trials.push(Trial {
                    implementation: imp.name.into(),
                    x,
                    trial: t,
                    // Censored: extrapolated to the whole run (an estimate).
                    value: o.wall.as_secs_f64() / done.max(1e-9),
                    censored_at,
                    preemptions: o.preemptions,
                    warnings: o.warnings,
                    mp: Some(mp),
                    procs: Some(procs),
                    finish_spread: Some(o.finish_spread),
                    fairness_spread: None,
                    fairness_min_max: None,
                    panel: None,
                });
                pb.inc(1);
            }
        }
        // The planned schedule (a function of the seed): two runs with the same
        // --seed log the same rounds. Kept to the first rounds of each vproc.
        let mut schedule: Vec<[u64; 4]> = env
            .schedule_log()
            .iter()
            .filter(|e| e.seq < 32)
            .map(|e| [u64::from(e.vproc), e.seq, e.run_ns, e.off_ns])
            .collect();
        schedule.sort_unstable();
        if let Some(s) = env.finish() {
            sched.push(serde_json::json!({
                "x": x,
                "scheduler": summarize(&s),
                "schedule_first_rounds_vproc_seq_run_ns_off_ns": schedule,
            }));
        }
    }
    pb.finish_and_clear();
    let names: Vec<&str> = table.iter().map(|i| i.name).collect();
    let pts = summarize_points(&trials, &names, prog.baseline);
    let xs: Vec<f64> = points
        .iter()
        .map(|&(n, m)| if by_procs { f64::from(n) } else { m })
        .collect();
    let mut verdict = (prog.verdict)(&pts, &points, by_procs, preempt);
    if !censored.is_empty() {
        verdict.details.push(format!(
            "censored: {} run(s) hit the time cap ({CAP_FACTOR}× one worker's solo time, at least {cap_min_s} s); their times are extrapolated from the fraction done: {}",
            censored.len(),
            censored.join("; ")
        ));
    }
    if !by_procs {
        let (Some(&first), Some(&last)) = (points.first(), points.last()) else {
            anyhow::bail!("no points to run");
        };
        let at = |name: &str, x: f64| {
            pts.iter()
                .find(|q| q.implementation == name && q.x == x)
                .map(|q| q.value)
        };
        for name in prog.observe {
            if let (Some(a), Some(b)) = (at(name, first.1), at(name, last.1)) {
                verdict.details.push(format!(
                    "observation: {name} time at MP {} / MP {} = {:.2}",
                    last.1,
                    first.1,
                    b / a
                ));
            }
        }
    }
    for &x in &xs {
        let v: Vec<f64> = trials
            .iter()
            .filter(|t| t.implementation == "TAS-B-np" && t.x == x)
            .map(|t| t.value)
            .collect();
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &y| (a.min(y), b.max(y)));
        if let Some(m) = trimmed_mean(&v).filter(|m| *m > 0.0 && v.len() > 1) {
            verdict.details.push(format!(
                "noise: TAS-B-np trials at {x} spread {:.0}% of their mean (min {lo:.3} s, max {hi:.3} s, {} trials)",
                100.0 * (hi - lo) / m,
                v.len()
            ));
        }
    }
    // Fairness at the last point: every worker does the same work, so an unfair
    // lock lets some finish well before the others.
    if let Some(&x) = xs
        .last()
        .filter(|_| points.last().is_some_and(|p| p.0 >= 2))
    {
        let spreads: Vec<String> = names
            .iter()
            .filter_map(|n| {
                let v: Vec<f64> = trials
                    .iter()
                    .filter(|t| t.implementation == *n && t.x == x)
                    .filter_map(|t| t.finish_spread)
                    .collect();
                crate::stats::median(&v).map(|m| format!("{n} {m:.2}"))
            })
            .collect();
        verdict.details.push(format!(
            "fairness at {x}: median (last - first worker finish) / run time: {}",
            spreads.join(", ")
        ));
    }
    let x_label = if by_procs {
        "processors"
    } else {
        "multiprogramming level"
    };
    let series = Point::series(&names, &pts, |q| q.normalized);
    let title = format!(
        "{} (--preempt {}, {})",
        exp.id,
        preempt.name(),
        verdict.status.label()
    );
    let svg = line_chart(
        &title,
        x_label,
        &format!("time normalized to {} at the first point", prog.baseline),
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
            "points": points.iter().map(|&(n, m)| serde_json::json!({"procs": n, "mp": m})).collect::<Vec<_>>(),
            "quantum_ms": quantum.as_secs_f64() * 1e3,
            "iterations_per_worker": spec.iters,
            "time_cap_s_per_point": points.iter().map(|&(n, _)| cap_at(n).as_secs_f64()).collect::<Vec<_>>(),
            "critical_section_us": prog.cs_us,
            "non_critical_us_per_point": points.iter().map(|&(n, _)| (prog.ncs_us)(n)).collect::<Vec<_>>(),
            "jitter": 0.1,
            "cs_busy_iters": spec.cs_iters, "ncs_busy_iters_first_point": spec.ncs_iters,
            "implementations": names,
        }),
        busy_iters_per_us: busy.iters_per_us(),
        unit: "seconds".into(),
        x_label: x_label.into(),
        baseline: format!("{} at the first point", prog.baseline),
        trials,
        points: pts,
        extra: serde_json::json!({ "scheduler_per_point": sched }),
        verdict,
    };
    Ok((rec, svg))
}

/// Trimmed means per (implementation, x), normalized to `baseline` at the first x.
pub fn summarize_points(trials: &[Trial], names: &[&str], baseline: &str) -> Vec<Point> {
    let xs = Trial::xs(trials);
    let mean = |name: &str, x: f64| Trial::mean_at(trials, name, x);
    let base = xs
        .first()
        .and_then(|&x| mean(baseline, x))
        .filter(|b| *b > 0.0)
        .unwrap_or(1.0);
    let mut out = Vec::new();
    for n in names {
        for &x in &xs {
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
    out
}

/// Evaluates 003's conclusion on the points (`setup`: (processors, MP level) of
/// each x, in order). Evaluable now: "TAS-B-np is among the best" and "Queued and
/// Queued-np collapse"; the Handshaking/Smart-Q clause waits for those locks.
pub fn verdict(
    points: &[Point],
    setup: &[(u32, f64)],
    by_procs: bool,
    preempt: Preempt,
) -> Verdict {
    let mut details = Vec::new();
    if preempt == Preempt::None {
        details
            .push("--preempt none: no multiprogramming, so the conclusion is not evaluated".into());
        return Verdict {
            clauses: Vec::new(),
            conclusion: CONCLUSION.into(),
            status: Status::Measurement,
            details,
        };
    }
    let xof = |&(n, m): &(u32, f64)| if by_procs { f64::from(n) } else { m };
    let xs: Vec<f64> = setup.iter().map(xof).collect();
    let at = |name: &str, x: f64| {
        points
            .iter()
            .find(|p| p.implementation == name && p.x == x)
            .map(|p| p.value)
    };
    let label = if by_procs { "processors" } else { "MP" };
    let mut holds = true;

    // Clause 1: TAS-B-np among the best at every multiprogrammed point.
    let mut checked = 0;
    for &x in &xs {
        if !by_procs && x <= 1.0 {
            continue; // the clause is about multiprogramming
        }
        let Some(np) = at("TAS-B-np", x) else {
            continue;
        };
        let Some(best) = points
            .iter()
            .filter(|p| p.x == x)
            .min_by(|a, b| a.value.total_cmp(&b.value))
        else {
            continue;
        };
        let ratio = np / best.value;
        let ok = ratio <= AMONG_THE_BEST;
        holds &= ok;
        checked += 1;
        details.push(format!(
            "{label} {x}: TAS-B-np / best ({}) = {ratio:.2} ({})",
            best.implementation,
            if ok {
                "among the best"
            } else {
                "not among the best"
            }
        ));
    }
    if checked == 0 {
        holds = false;
        details.push("no multiprogrammed point measured: use MP levels above 1".into());
    }
    details.push(format!("rule: \"among the best\" = within {AMONG_THE_BEST:.2}x of the fastest implementation at every point"));

    // Clause 2: the plain and -np queued locks collapse: at the most multiprogrammed
    // point with at least two workers (a queue needs a waiter), each is at least
    // COLLAPSE times slower than TAS-B-np.
    let target = setup
        .iter()
        .filter(|(n, m)| *n >= 2 && *m > 1.0)
        .max_by(|a, b| {
            if by_procs {
                a.0.cmp(&b.0)
            } else {
                a.1.total_cmp(&b.1)
            }
        });
    match target {
        Some(t) => {
            let x = xof(t);
            for q in ["Queued", "Queued-np"] {
                if let (Some(v), Some(np)) = (at(q, x), at("TAS-B-np", x)) {
                    let ratio = v / np;
                    let ok = ratio >= COLLAPSE;
                    holds &= ok;
                    details.push(format!(
                        "{label} {x}: {q} / TAS-B-np = {ratio:.2} ({})",
                        if ok { "collapsed" } else { "did not collapse" }
                    ));
                }
            }
            details.push(format!("rule: \"collapse\" = at least {COLLAPSE:.1}x slower than TAS-B-np at the most multiprogrammed point"));
        }
        None => {
            holds = false;
            details.push(
                "the queued-lock clause needs a point with at least 2 processors and MP above 1"
                    .into(),
            );
        }
    }
    // Clause 3: Queued-Handshaking and Smart-Q do not collapse (same point, same rule).
    let mut missing = Vec::new();
    if let Some(t) = target {
        let x = xof(t);
        for q in ["Queued-Handshaking", "Smart-Q"] {
            match (at(q, x), at("TAS-B-np", x)) {
                (Some(v), Some(np)) => {
                    let ratio = v / np;
                    let ok = ratio < COLLAPSE;
                    holds &= ok;
                    details.push(format!(
                        "{label} {x}: {q} / TAS-B-np = {ratio:.2} ({})",
                        if ok { "did not collapse" } else { "collapsed" }
                    ));
                }
                _ => missing.push(q),
            }
        }
    }
    // Not part of the paper's conclusion: mpsync's speed target for the
    // scheduler-conscious locks (each at least 5x faster than plain Queued).
    if let Some(t) = target {
        let x = xof(t);
        for q in [
            "Smart-Q",
            "Queued-Handshaking",
            "Ticket-np",
            "MCS-TP",
            "CLH-TP",
        ] {
            if let (Some(v), Some(plain)) = (at(q, x), at("Queued", x)) {
                let r = plain / v;
                details.push(format!(
                    "observation: {label} {x}: Queued / {q} = {r:.2} (mpsync target >= 5: {})",
                    if r >= 5.0 { "met" } else { "missed" }
                ));
            }
        }
    }
    let status = if !holds {
        Status::DoesNotHold
    } else if !missing.is_empty() {
        details.push(format!(
            "not evaluated: {} not measured",
            missing.join(", ")
        ));
        Status::PartlyEvaluable
    } else {
        Status::Holds
    };
    Verdict {
        clauses: Vec::new(),
        conclusion: CONCLUSION.into(),
        status,
        details,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(name: &str, x: f64, v: f64) -> Point {
        Point {
            panel: None,
            implementation: name.into(),
            x,
            value: v,
            normalized: v,
        }
    }

    fn mp_points(np2: f64, queued2: f64) -> Vec<Point> {
        vec![
            pt("TAS-B-np", 1.0, 1.0),
            pt("TAS-B", 1.0, 1.0),
            pt("Queued", 1.0, 1.0),
            pt("Queued-np", 1.0, 1.0),
            pt("TAS-B-np", 2.0, np2),
            pt("TAS-B", 2.0, 3.0),
            pt("Native", 2.0, 2.0),
            pt("Queued", 2.0, queued2),
            pt("Queued-np", 2.0, queued2),
        ]
    }
    const SETUP: [(u32, f64); 2] = [(2, 1.0), (2, 2.0)];

    #[test]
    fn evaluable_clauses_holding_is_partly_evaluable() {
        let v = verdict(&mp_points(2.05, 5.0), &SETUP, false, Preempt::Emulated);
        assert_eq!(v.status, Status::PartlyEvaluable, "{v:?}");
        assert!(
            v.details
                .iter()
                .any(|d| d.contains("Queued / TAS-B-np = 2.44 (collapsed)")),
            "{v:?}"
        );
        assert!(v.details.iter().any(|d| d.contains("not evaluated")));
    }

    #[test]
    fn scheduler_conscious_queues_holding_makes_it_hold() {
        let mut pts = mp_points(2.05, 5.0);
        pts.push(pt("Queued-Handshaking", 2.0, 2.3));
        pts.push(pt("Smart-Q", 2.0, 2.1));
        let v = verdict(&pts, &SETUP, false, Preempt::Emulated);
        assert_eq!(v.status, Status::Holds, "{v:?}");
        pts.push(pt("Smart-Q", 2.0, 2.1));
        let mut bad = mp_points(2.05, 5.0);
        bad.push(pt("Queued-Handshaking", 2.0, 2.3));
        bad.push(pt("Smart-Q", 2.0, 4.0));
        let v = verdict(&bad, &SETUP, false, Preempt::Emulated);
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
        assert!(
            v.details
                .iter()
                .any(|d| d.contains("Smart-Q / TAS-B-np = 1.95 (collapsed)")),
            "{v:?}"
        );
    }

    #[test]
    fn tas_b_np_far_behind_does_not_hold() {
        let v = verdict(&mp_points(3.0, 9.0), &SETUP, false, Preempt::Os);
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
    }

    #[test]
    fn queued_locks_that_do_not_collapse_do_not_hold() {
        let v = verdict(&mp_points(2.0, 2.2), &SETUP, false, Preempt::Emulated);
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
        assert!(
            v.details.iter().any(|d| d.contains("did not collapse")),
            "{v:?}"
        );
    }

    #[test]
    fn one_processor_cannot_show_a_queue_collapse() {
        let pts = vec![pt("TAS-B-np", 2.0, 1.0), pt("Queued", 2.0, 1.0)];
        let v = verdict(&pts, &[(1, 2.0)], false, Preempt::Emulated);
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
        assert!(
            v.details
                .iter()
                .any(|d| d.contains("at least 2 processors")),
            "{v:?}"
        );
    }

    #[test]
    fn no_multiprogramming_is_not_a_verdict() {
        let v = verdict(
            &[pt("TAS-B-np", 1.0, 1.0)],
            &[(2, 1.0)],
            false,
            Preempt::None,
        );
        assert_eq!(v.status, Status::Measurement);
    }

    #[test]
    fn points_are_normalized_to_the_baseline_at_the_first_x() {
        let t = |i: &str, x: f64, v: f64| Trial {
            implementation: i.into(),
            x,
            trial: 0,
            value: v,
            ..Trial::default()
        };
        let trials = vec![
            t("TAS-B", 1.0, 2.0),
            t("TAS-B", 2.0, 4.0),
            t("X", 1.0, 1.0),
            t("X", 2.0, 3.0),
        ];
        let pts = summarize_points(&trials, &["TAS-B", "X"], "TAS-B");
        let n: Vec<f64> = pts.iter().map(|p| p.normalized).collect();
        assert_eq!(n, [1.0, 2.0, 0.5, 1.5]);
    }
}
