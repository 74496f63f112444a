//! `wks95-barrier`: the barrier program of Wisniewski, Kontothanassis & Scott,
//! PPoPP 1995 §4 (papers/001, Figure 7): every thread loops {work uniform in
//! 240–290 µs; barrier}, 4000 episodes (× `--scale`), all threads belong to the
//! application at multiprogramming level 2 (two threads per processor), and —
//! emulated — the pseudo-scheduler repartitions the processors once a second
//! (all of them w.p. ½, else ½, ⅓ or ¼ of them). Varies the processors
//! (`--procs`, default 1..cores). The paper's four barriers (Arrival-tree,
//! Heuristic-tree, Central-block, Scalable-SC) beside `std::sync::Barrier`
//! and `hurdles`. `--preempt os`: the same threads pinned two per CPU, Linux
//! time-slicing them (no repartitioning); `none`: one thread per processor.
//! A run stops at 25× its ideal time (at least 2 s; `--quick`: 5×, at least
//! 0.5 s, and a tenth of the episodes) and is reported censored.

use std::time::{Duration, Instant};

use mpsync::sched::emulated::{Emulated, EmulatedConfig};
use mpsync::util::busy::BusyWork;

use super::barrier_oversub::{BarrierImpl, BenchBarrier, barrier_table, run_episodes_with};
use super::wks94::{AMONG_THE_BEST, CAP_FACTOR, CAP_MIN_S};
use super::{Experiment, Params};
use crate::env::{Preempt, summarize};
use crate::output::{Machine, Point, RunRecord, Status, Trial, Verdict};
use crate::stats::trimmed_mean;
use crate::svg::{Series, line_chart};

/// The paper's conclusion, as a statement.
pub const CONCLUSION: &str = "with multiprogramming, the scheduler-conscious two-level barrier \
(Scalable-SC) performs best, then Central-block, then Heuristic-tree; the always-spinning \
Arrival-tree performs terribly";

/// Episodes at `--scale 1` (the paper's 4000 iterations).
pub const BASE_EPISODES: f64 = 4000.0;
/// Work between barriers (the paper's 240–290 µs).
pub const WORK_NS: (u64, u64) = (240_000, 290_000);
/// `--quick`: a run stops at this many times its ideal time …
pub const QUICK_CAP_FACTOR: f64 = 5.0;
/// … and never before this (seconds).
pub const QUICK_CAP_MIN_S: f64 = 0.5;
/// Threads per processor (the paper's MP level 2).
pub const MP: u32 = 2;
/// The paper's barriers, then the peers.
pub const NAMES: &[&str] = &[
    "Scalable-SC",
    "Central-block",
    "Heuristic-tree",
    "Arrival-tree",
    "std::sync::Barrier",
    "hurdles",
];

/// Runs the experiment.
pub fn run(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let procs: Vec<u32> = p.procs.clone().unwrap_or_else(|| (1..=p.cores).collect());
    let cpus = mpsync::sched::native::available_cpus()?;
    if let Some(bad) = procs.iter().find(|&&n| n == 0 || n as usize > cpus.len()) {
        anyhow::bail!(
            "--procs {bad}: must be between 1 and the {} available processors (e.g. --procs 1,2)",
            cpus.len()
        );
    }
    let quantum = p.quantum(50.0);
    // --quick runs a tenth of its scale (a smoke run of well under a minute).
    let quick = if p.quick { 0.1 } else { 1.0 };
    let episodes = (BASE_EPISODES * p.scale * quick).max(20.0) as u64;
    let per_proc = if preempt == Preempt::None { 1 } else { MP };
    let table: Vec<BarrierImpl> = barrier_table()
        .into_iter()
        .filter(|i| NAMES.contains(&i.name))
        .collect();
    let started = Instant::now();
    // Ideal: each processor runs its threads' work one after the other.
    let ideal_s = episodes as f64 * f64::from(per_proc) * (WORK_NS.0 + WORK_NS.1) as f64 / 2e9;
    let TableRun {
        trials,
        sched,
        censored,
        points,
    } = run_barrier_table(
        exp,
        p,
        preempt,
        &procs,
        &table,
        &|_| ideal_s,
        &mut |b, n, _np, t, setup, cap| {
            let r = run_episodes_with(b, n, episodes, cap, WORK_NS, p.seed ^ u64::from(t), setup)?;
            Ok((r.episodes as f64 / episodes as f64, r.elapsed))
        },
    )?;
    let verdict = verdict(&points, &procs, preempt, &censored);
    let series: Vec<Series> = table
        .iter()
        .map(|i| Series {
            label: i.name.into(),
            points: points
                .iter()
                .filter(|q| q.implementation == i.name)
                .map(|q| (q.x, q.normalized))
                .collect(),
        })
        .collect();
    let svg = line_chart(
        &format!(
            "{} (--preempt {}, {})",
            exp.id,
            preempt.name(),
            verdict.status.label()
        ),
        "processors",
        "time normalized to Central-block at the first point (lower is better)",
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
            "threads_per_processor": per_proc,
            "episodes": episodes,
            "work_ns": [WORK_NS.0, WORK_NS.1],
            "quantum_ms": quantum.as_secs_f64() * 1e3,
            "repartition_every_s": if preempt == Preempt::Emulated { Some(1.0) } else { None },
            "implementations": table.iter().map(|i| i.name).collect::<Vec<_>>(),
        }),
        busy_iters_per_us: BusyWork::global().iters_per_us(),
        unit: "seconds for all episodes (lower is better)".into(),
        x_label: "processors".into(),
        baseline: "Central-block at the first processor count".into(),
        trials,
        points,
        extra: serde_json::json!({ "scheduler": sched }),
        verdict,
    };
    Ok((rec, svg))
}

/// A virtual processor's attachment to the pseudo-scheduler, if emulated.
pub type Attached<'a> = Option<mpsync::sched::emulated::Attachment<'a>>;

/// One trial of a barrier application: `(barrier, threads, processors, trial,
/// per-thread setup, time cap)` → (fraction of the planned episodes done,
/// wall time).
pub type TrialFn<'f> = dyn for<'s> FnMut(
        &dyn BenchBarrier,
        usize,
        u32,
        u32,
        &(dyn Fn(usize) -> Attached<'s> + Sync + 's),
        Duration,
    ) -> anyhow::Result<(f64, Duration)>
    + 'f;

/// What [`run_barrier_table`] measured.
#[derive(Debug, Default)]
pub struct TableRun {
    /// Every trial (censored ones extrapolated from the fraction done).
    pub trials: Vec<Trial>,
    /// The pseudo-scheduler's statistics per processor count (emulated).
    pub sched: Vec<serde_json::Value>,
    /// One line per run that hit its cap.
    pub censored: Vec<String>,
    /// Trimmed means, normalized to Central-block at the first processor count.
    pub points: Vec<Point>,
}

/// The barrier applications' common loop (`wks95-barrier`, `wks95-gauss`):
/// for every processor count `np` (MP 2 from the application's own threads
/// unless `--preempt none`; emulated: a pseudo-scheduler with the quantum
/// and a repartition every second; threads pinned `id % np`), every trial and
/// every barrier of `table` (rotated per trial), runs `one` with a time cap
/// derived from `ideal_s(np)` (25×, at least 2 s; `--quick` 5×, at least 0.5 s).
pub fn run_barrier_table(
    exp: &Experiment,
    p: &Params,
    preempt: Preempt,
    procs: &[u32],
    table: &[BarrierImpl],
    ideal_s: &dyn Fn(u32) -> f64,
    one: &mut TrialFn<'_>,
) -> anyhow::Result<TableRun> {
    let cpus = mpsync::sched::native::available_cpus()?;
    let quantum = p.quantum(50.0);
    let per_proc = if preempt == Preempt::None { 1 } else { MP };
    let pb = crate::progress(
        (procs.len() * p.trials as usize * table.len()) as u64,
        exp.id,
    );
    let mut out = TableRun::default();
    for (pi, &np) in procs.iter().enumerate() {
        let n = (np * per_proc) as usize;
        let ideal = ideal_s(np);
        let cap = if p.quick {
            Duration::from_secs_f64((QUICK_CAP_FACTOR * ideal).max(QUICK_CAP_MIN_S))
        } else {
            Duration::from_secs_f64((CAP_FACTOR * ideal).max(CAP_MIN_S))
        };
        let emu = match preempt {
            Preempt::Emulated => Some(Emulated::start(
                EmulatedConfig::new(np, 1.0)?
                    .quantum(quantum)
                    .repartition_every(Some(Duration::from_secs(1)))
                    .seed(p.seed.wrapping_add(pi as u64)),
            )?),
            _ => None,
        };
        for t in 0..p.trials {
            for k in 0..table.len() {
                let imp = &table[(k + t as usize) % table.len()];
                let b = (imp.make)(n);
                let before = emu.as_ref().map(Emulated::stats).unwrap_or_default();
                let setup = |id: usize| {
                    let v = id % np as usize;
                    let _ = mpsync::sched::native::pin_current_thread(cpus[v]);
                    emu.as_ref().map(|e| e.attach(v as u32).expect("attach"))
                };
                let (done, elapsed) = one(b.as_ref(), n, np, t, &setup, cap)
                    .map_err(|e| anyhow::anyhow!("{} on {np} processors: {e}", imp.name))?;
                let after = emu.as_ref().map(Emulated::stats).unwrap_or_default();
                if done < 1.0 {
                    out.censored.push(format!(
                        "{} at {np} processors (trial {t}: {:.0}% done in {:.1} s)",
                        imp.name,
                        100.0 * done,
                        elapsed.as_secs_f64()
                    ));
                }
                out.trials.push(Trial {
                    implementation: imp.name.into(),
                    x: f64::from(np),
                    trial: t,
                    value: elapsed.as_secs_f64() / done.max(1e-9),
                    preemptions: after.preemptions - before.preemptions,
                    warnings: after.warnings - before.warnings,
                    mp: Some(f64::from(per_proc)),
                    procs: Some(np),
                    censored_at: (done < 1.0).then_some(done),
                    ..Trial::default()
                });
                pb.inc(1);
            }
        }
        if let Some(s) = emu.map(Emulated::stop) {
            out.sched
                .push(serde_json::json!({"processors": np, "scheduler": summarize(&s)}));
        }
    }
    pb.finish_and_clear();
    let mean_of = |name: &str, x: f64| {
        let v: Vec<f64> = out
            .trials
            .iter()
            .filter(|t| t.implementation == name && t.x == x)
            .map(|t| t.value)
            .collect();
        trimmed_mean(&v)
    };
    let first = procs.first().copied().unwrap_or(1);
    let base = mean_of("Central-block", f64::from(first))
        .filter(|b| *b > 0.0)
        .unwrap_or(1.0);
    for &np in procs {
        for imp in table {
            if let Some(v) = mean_of(imp.name, f64::from(np)) {
                out.points.push(Point {
                    panel: None,
                    implementation: imp.name.into(),
                    x: f64::from(np),
                    value: v,
                    normalized: v / base,
                });
            }
        }
    }
    Ok(out)
}

/// Judges 001's conclusion (the ordering of Figure 7) with
/// [`verdict_clauses`].
pub fn verdict(points: &[Point], procs: &[u32], preempt: Preempt, censored: &[String]) -> Verdict {
    verdict_clauses(CONCLUSION, points, procs, preempt, censored)
}

/// Judges a barrier application's conclusion (`wks95-barrier`, `wks95-gauss`)
/// clause by clause at every processor count measured:
/// (1) Scalable-SC within [`AMONG_THE_BEST`] of the fastest of the paper's four
/// barriers, (2) Central-block faster than Heuristic-tree, (3) Arrival-tree the
/// slowest of the four — each at most processor counts.
pub fn verdict_clauses(
    conclusion: &str,
    points: &[Point],
    procs: &[u32],
    preempt: Preempt,
    censored: &[String],
) -> Verdict {
    let mut details = Vec::new();
    if preempt == Preempt::None {
        details.push("--preempt none: one thread per processor, no multiprogramming: the conclusion is not evaluated".into());
        return Verdict {
            clauses: Vec::new(),
            conclusion: conclusion.into(),
            status: Status::Measurement,
            details,
        };
    }
    let paper = &NAMES[..4];
    let at = |name: &str, x: f64| {
        points
            .iter()
            .find(|p| p.implementation == name && p.x == x)
            .map(|p| p.value)
    };
    let (mut c1, mut c2, mut c3, mut counted) = (0, 0, 0, 0);
    for &np in procs {
        let x = f64::from(np);
        let vals: Vec<(&str, f64)> = paper
            .iter()
            .filter_map(|n| at(n, x).map(|v| (*n, v)))
            .collect();
        if vals.len() < paper.len() {
            continue;
        }
        counted += 1;
        let min = vals.iter().map(|v| v.1).fold(f64::MAX, f64::min);
        let (slow, _) = vals
            .iter()
            .copied()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or(("", 0.0));
        let get = |name: &str| at(name, x).unwrap_or(f64::MAX);
        if get("Scalable-SC") <= min * AMONG_THE_BEST {
            c1 += 1;
        }
        if get("Central-block") < get("Heuristic-tree") {
            c2 += 1;
        }
        if slow == "Arrival-tree" {
            c3 += 1;
        }
        let mut v = vals.clone();
        v.sort_by(|a, b| a.1.total_cmp(&b.1));
        let order: Vec<String> = v.iter().map(|(n, t)| format!("{n} {t:.3} s")).collect();
        details.push(format!("{np} processors: {}", order.join(" < ")));
    }
    let mut status = Status::PartlyEvaluable;
    if counted > 0 {
        let most = |c: usize| c * 2 > counted;
        let word = |c: usize| if most(c) { "holds" } else { "does not hold" };
        details.push(format!(
            "(1) Scalable-SC within {AMONG_THE_BEST:.2}x of the best of the four at {c1} of {counted} processor counts: {}",
            word(c1)
        ));
        details.push(format!(
            "(2) Central-block faster than Heuristic-tree at {c2} of {counted}: {}",
            word(c2)
        ));
        details.push(format!(
            "(3) Arrival-tree the slowest of the four at {c3} of {counted}: {}",
            word(c3)
        ));
        status = if most(c1) && most(c2) && most(c3) {
            Status::Holds
        } else {
            Status::DoesNotHold
        };
    } else {
        details.push("not evaluated: the four barriers were not all measured at any point".into());
    }
    if !censored.is_empty() {
        details.push(format!(
            "censored: {} run(s) hit the time cap; their times are extrapolated from the fraction done: {}",
            censored.len(),
            censored.join("; ")
        ));
    }
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

    fn pt(name: &str, x: f64, v: f64) -> Point {
        Point {
            panel: None,
            implementation: name.into(),
            x,
            value: v,
            normalized: v,
        }
    }

    #[test]
    fn scalable_best_and_arrival_worst_holds() {
        let p = vec![
            pt("Scalable-SC", 1.0, 1.0),
            pt("Central-block", 1.0, 1.2),
            pt("Heuristic-tree", 1.0, 2.0),
            pt("Arrival-tree", 1.0, 9.0),
        ];
        let v = verdict(&p, &[1], Preempt::Emulated, &[]);
        assert_eq!(v.status, Status::Holds, "{v:?}");
        let p2 = vec![
            pt("Scalable-SC", 1.0, 3.0),
            pt("Central-block", 1.0, 1.2),
            pt("Heuristic-tree", 1.0, 2.0),
            pt("Arrival-tree", 1.0, 9.0),
        ];
        assert_eq!(
            verdict(&p2, &[1], Preempt::Os, &[]).status,
            Status::DoesNotHold
        );
        assert_eq!(
            verdict(&p2, &[1], Preempt::None, &[]).status,
            Status::Measurement
        );
        assert_eq!(
            verdict(&p2[..2], &[1], Preempt::Os, &[]).status,
            Status::PartlyEvaluable
        );
    }
}
