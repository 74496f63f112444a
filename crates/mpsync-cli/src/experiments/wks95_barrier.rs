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
//! Times are normalized to Central-block at the same processor count.

use std::time::{Duration, Instant};

use mpsync::sched::emulated::{Emulated, EmulatedConfig};

use super::barrier_oversub::{BarrierImpl, BenchBarrier, barrier_table, run_episodes_with};
use super::wks94::{AMONG_THE_BEST, CAP_FACTOR, CAP_MIN_S};
use super::{Experiment, Params};
use crate::env::{Preempt, summarize};
use crate::model::{self, Better, Cell, Clause, Design, Imp, Judged, Results, Verdicts, fmt_x};
use crate::output::{RunRecord, Trial};
use crate::svg::sig3;

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
    check_procs(&procs)?;
    let quantum = p.quantum(50.0);
    // --quick runs a tenth of its scale (a smoke run of well under a minute).
    let quick = if p.quick { 0.1 } else { 1.0 };
    let episodes = (BASE_EPISODES * p.scale * quick).max(20.0) as u64;
    let per_proc = if preempt == Preempt::None { 1 } else { MP };
    let table = paper_table();
    let started = Instant::now();
    // Ideal: each processor runs its threads' work one after the other.
    let ideal_s = episodes as f64 * f64::from(per_proc) * (WORK_NS.0 + WORK_NS.1) as f64 / 2e9;
    let tr = run_barrier_table(
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
    let params = serde_json::json!({
        "processors": procs,
        "threads_per_processor": per_proc,
        "episodes": episodes,
        "work_ns": [WORK_NS.0, WORK_NS.1],
        "quantum_ms": quantum.as_secs_f64() * 1e3,
        "repartition_every_s": if preempt == Preempt::Emulated { Some(1.0) } else { None },
        "implementations": table.iter().map(|i| i.name).collect::<Vec<_>>(),
    });
    let v = verdicts(CONCLUSION, "Fig. 7", preempt, &tr.censored);
    let (mut rec, svg) = model::finish(exp, p, preempt, &tr.design, tr.trials, v, params, started);
    rec.extra = serde_json::json!({ "scheduler": tr.sched });
    Ok((rec, svg))
}

/// Rejects processor counts this machine cannot give.
pub fn check_procs(procs: &[u32]) -> anyhow::Result<()> {
    let cpus = mpsync::sched::native::available_cpus()?;
    if let Some(bad) = procs.iter().find(|&&n| n == 0 || n as usize > cpus.len()) {
        anyhow::bail!(
            "--procs {bad}: must be between 1 and the {} available processors (e.g. --procs 1,2)",
            cpus.len()
        );
    }
    Ok(())
}

/// The paper's four barriers and the peers.
pub fn paper_table() -> Vec<BarrierImpl> {
    barrier_table()
        .into_iter()
        .filter(|i| NAMES.contains(&i.name))
        .collect()
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
#[derive(Debug)]
pub struct TableRun {
    /// The design it measured (x: processors; Central-block the baseline).
    pub design: Design,
    /// Every trial (censored ones extrapolated from the fraction done).
    pub trials: Vec<Trial>,
    /// The pseudo-scheduler's statistics per processor count and round (emulated).
    pub sched: Vec<serde_json::Value>,
    /// One line per run that hit its cap.
    pub censored: Vec<String>,
}

/// The barrier applications' design: x the processors, the paper's barriers
/// ours and the peers peers (kind "barrier"), normalized to Central-block
/// at the same count.
pub fn design(procs: &[u32], table: &[BarrierImpl], trials: u32) -> Design {
    let imps = table
        .iter()
        .map(|i| {
            if i.peer {
                Imp::peer(i.name, "barrier")
            } else {
                Imp::ours(i.name, "barrier")
            }
        })
        .collect();
    Design::single(
        "processors",
        "seconds (lower is better)",
        Better::Lower,
        procs.iter().map(|&n| f64::from(n)).collect(),
        imps,
        trials,
    )
    .baseline("Central-block")
}

/// The pseudo-scheduler of the processor count a cell is at (emulated),
/// started when the cell's x changes and its statistics kept per start.
struct Scheduler {
    preempt: Preempt,
    quantum: Duration,
    seed: u64,
    at: Option<(f64, u32)>,
    emu: Option<Emulated>,
    sched: Vec<serde_json::Value>,
}

impl Scheduler {
    fn enter(&mut self, c: &Cell<'_>, index: usize, np: u32) -> anyhow::Result<()> {
        if self.at.is_some_and(|(x, _)| x == c.x) {
            return Ok(());
        }
        self.close();
        self.at = Some((c.x, c.trial));
        if self.preempt == Preempt::Emulated {
            let seed = self
                .seed
                .wrapping_add(index as u64)
                .wrapping_add(u64::from(c.trial) << 16);
            self.emu = Some(Emulated::start(
                EmulatedConfig::new(np, 1.0)?
                    .quantum(self.quantum)
                    .repartition_every(Some(Duration::from_secs(1)))
                    .seed(seed),
            )?);
        }
        Ok(())
    }

    fn close(&mut self) {
        if let (Some(e), Some((x, round))) = (self.emu.take(), self.at) {
            let s = e.stop();
            self.sched.push(
                serde_json::json!({"processors": x, "round": round, "scheduler": summarize(&s)}),
            );
        }
    }
}

/// The barrier applications' common loop (`wks95-barrier`, `wks95-gauss`),
/// in the runner's interleaved rounds: at every processor count `np` (MP 2
/// from the application's own threads unless `--preempt none`; emulated: a
/// pseudo-scheduler with the quantum and a repartition every second, started
/// when the cell's count changes; threads pinned `id % np`), runs `one` with
/// a time cap derived from `ideal_s(np)` (25×, at least 2 s; `--quick` 5×,
/// at least 0.5 s).
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
    let per_proc = if preempt == Preempt::None { 1 } else { MP };
    let d = design(procs, table, p.trials);
    let mut sched = Scheduler {
        preempt,
        quantum: p.quantum(50.0),
        seed: p.seed,
        at: None,
        emu: None,
        sched: Vec::new(),
    };
    let mut censored = Vec::new();
    let trials = model::collect(exp.id, &d, &mut |c| {
        let np = c.x as u32;
        let index = procs.iter().position(|&n| n == np).unwrap_or(0);
        let imp = table
            .iter()
            .find(|i| i.name == c.imp.name)
            .ok_or_else(|| anyhow::anyhow!("no barrier named {}", c.imp.name))?;
        let n = (np * per_proc) as usize;
        let ideal = ideal_s(np);
        let cap = if p.quick {
            Duration::from_secs_f64((QUICK_CAP_FACTOR * ideal).max(QUICK_CAP_MIN_S))
        } else {
            Duration::from_secs_f64((CAP_FACTOR * ideal).max(CAP_MIN_S))
        };
        sched.enter(c, index, np)?;
        let emu = sched.emu.as_ref();
        let b = (imp.make)(n);
        let before = emu.map(Emulated::stats).unwrap_or_default();
        let setup = |id: usize| {
            let v = id % np as usize;
            let _ = mpsync::sched::native::pin_current_thread(cpus[v]);
            emu.map(|e| e.attach(v as u32).expect("attach"))
        };
        let (done, elapsed) = one(b.as_ref(), n, np, c.trial, &setup, cap)
            .map_err(|e| anyhow::anyhow!("{} on {np} processors: {e}", imp.name))?;
        let after = emu.map(Emulated::stats).unwrap_or_default();
        if done < 1.0 {
            censored.push(format!(
                "{} at {np} processors (trial {}: {:.0}% done in {:.1} s)",
                imp.name,
                c.trial,
                100.0 * done,
                elapsed.as_secs_f64()
            ));
        }
        Ok(Some(Trial {
            value: elapsed.as_secs_f64() / done.max(1e-9),
            preemptions: after.preemptions - before.preemptions,
            warnings: after.warnings - before.warnings,
            mp: Some(f64::from(per_proc)),
            procs: Some(np),
            censored_at: (done < 1.0).then_some(done),
            ..Trial::default()
        }))
    })?;
    sched.close();
    Ok(TableRun {
        design: d,
        trials,
        sched: sched.sched,
        censored,
    })
}

/// The verdict of a barrier application: its clauses (none with `--preempt
/// none`: one thread per processor is no multiprogramming) and the method
/// lines.
pub fn verdicts(
    conclusion: &str,
    fig: &'static str,
    preempt: Preempt,
    censored: &[String],
) -> Verdicts {
    let mut notes = Vec::new();
    if preempt == Preempt::None {
        notes.push("--preempt none: one thread per processor, no multiprogramming: the conclusion is not evaluated".into());
    }
    if !censored.is_empty() {
        notes.push(format!(
            "censored: {} run(s) hit the time cap; their times are extrapolated from the fraction done: {}",
            censored.len(),
            censored.join("; ")
        ));
    }
    Verdicts {
        conclusion: conclusion.into(),
        clauses: if preempt == Preempt::None {
            Vec::new()
        } else {
            clauses(fig)
        },
        notes,
        ..Verdicts::default()
    }
}

/// A barrier application's clauses (the ordering of 001's Figure 7 or 8),
/// each judged at most processor counts where all four of the paper's
/// barriers were measured: (1) Scalable-SC within [`AMONG_THE_BEST`] of the
/// fastest of the four, (2) Central-block faster than Heuristic-tree, (3)
/// Arrival-tree the slowest of the four.
pub fn clauses(fig: &'static str) -> Vec<Clause> {
    let one = |statement: String, paper: String, rule: Rule| {
        Clause::new(statement, Some(&paper), move |r| at_most_counts(r, rule))
    };
    vec![
        one(
            format!(
                "Scalable-SC is the best of the four (within {AMONG_THE_BEST}×) at most processor counts"
            ),
            format!("the best performance ({fig}, KSR 1, MP 2)"),
            |v| {
                let (best, bv) = v[0];
                let s = time(v, "Scalable-SC");
                (
                    s <= bv * AMONG_THE_BEST,
                    format!("Scalable-SC / fastest ({best}) {}", sig3(s / bv)),
                )
            },
        ),
        one(
            "Central-block is faster than Heuristic-tree at most processor counts".into(),
            format!("even better than Heuristic-tree: fewer context switches ({fig})"),
            |v| {
                let q = time(v, "Central-block") / time(v, "Heuristic-tree");
                (
                    q < 1.0,
                    format!("Central-block / Heuristic-tree {}", sig3(q)),
                )
            },
        ),
        one(
            "Arrival-tree is the slowest of the four at most processor counts".into(),
            format!("performs terribly with multiprogramming ({fig})"),
            |v| {
                let order: Vec<String> = v.iter().map(|(n, t)| format!("{n} {t:.3} s")).collect();
                (v[v.len() - 1].0 == "Arrival-tree", order.join(" < "))
            },
        ),
    ]
}

/// A clause's rule on the four barriers' times at one count, fastest first:
/// whether it holds there, and what it found.
type Rule = fn(&[(&str, f64)]) -> (bool, String);

/// `name`'s time among `v`.
fn time(v: &[(&str, f64)], name: &str) -> f64 {
    v.iter().find(|q| q.0 == name).map_or(f64::MAX, |q| q.1)
}

/// Whether `rule` holds at most processor counts where all four of the
/// paper's barriers were measured.
fn at_most_counts(r: &Results<'_>, rule: Rule) -> Judged {
    let paper = &NAMES[..4];
    let at = "the processor counts".to_string();
    let (mut held, mut each) = (0, Vec::new());
    for &x in &r.design.panels[0].xs {
        let mut v: Vec<(&str, f64)> = paper
            .iter()
            .filter_map(|n| Some((*n, r.value(n, 0, x)?)))
            .collect();
        if v.len() < paper.len() {
            continue;
        }
        v.sort_by(|a, b| a.1.total_cmp(&b.1));
        let (ok, found) = rule(&v);
        held += usize::from(ok);
        each.push(format!("{}: {found}", fmt_x(x)));
    }
    if each.is_empty() {
        return Judged {
            at,
            ours: "not measured (the four barriers were not all measured at any count)".into(),
            holds: None,
        };
    }
    Judged {
        at,
        ours: format!("at {held} of {}: {}", each.len(), each.join("; ")),
        holds: Some(held * 2 > each.len()),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::output::{Point, Status, Verdict};

    pub(crate) fn pt(name: &str, x: f64, v: f64) -> Point {
        Point {
            panel: None,
            implementation: name.into(),
            x,
            value: v,
            normalized: v,
        }
    }

    /// The verdict of a barrier application on `pts` at `procs`.
    pub(crate) fn verdict(pts: &[Point], procs: &[u32], preempt: Preempt) -> Verdict {
        let d = design(procs, &paper_table(), 1);
        let r = Results {
            design: &d,
            points: pts,
            trials: &[],
        };
        let v = verdicts("c", "Fig. 7", preempt, &[]);
        Verdict::from_clauses("c", v.clauses.iter().map(|c| c.judge(&r)).collect(), vec![])
    }

    #[test]
    fn scalable_best_and_arrival_worst_holds() {
        let p = vec![
            pt("Scalable-SC", 1.0, 1.0),
            pt("Central-block", 1.0, 1.2),
            pt("Heuristic-tree", 1.0, 2.0),
            pt("Arrival-tree", 1.0, 9.0),
        ];
        let v = verdict(&p, &[1], Preempt::Emulated);
        assert_eq!(v.status, Status::Holds, "{v:?}");
        let p2 = vec![
            pt("Scalable-SC", 1.0, 3.0),
            pt("Central-block", 1.0, 1.2),
            pt("Heuristic-tree", 1.0, 2.0),
            pt("Arrival-tree", 1.0, 9.0),
        ];
        let v = verdict(&p2, &[1], Preempt::Os);
        assert_eq!(v.status, Status::DoesNotHold);
        assert_eq!(v.clauses[0].holds, Some(false));
        assert_eq!(
            verdict(&p2, &[1], Preempt::None).status,
            Status::Measurement
        );
        assert_eq!(
            verdict(&p2[..2], &[1], Preempt::Os).status,
            Status::PartlyEvaluable
        );
        // Arrival-tree not the slowest.
        let mut p3 = p.clone();
        p3[3].value = 1.5;
        let v = verdict(&p3, &[1], Preempt::Emulated);
        assert_eq!(v.clauses[2].holds, Some(false), "{v:?}");
        assert!(
            v.clauses[2].ours.starts_with("at 0 of 1: 1: Scalable-SC"),
            "{v:?}"
        );
    }
}
