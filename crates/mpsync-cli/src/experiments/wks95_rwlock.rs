//! `wks95-rwlock`: the reader-writer lock program of Wisniewski, Kontothanassis &
//! Scott, PPoPP 1995 §4 (papers/001, Figure 5 "Varying the multiprogramming
//! level on a 63-processor KSR 1" and Figure 6 "Varying the number of
//! processors on the KSR 1"): the lock program of `wks95-mutex` with the longer
//! critical sections the paper describes ("we modified the synthetic program
//! ... to increase the amount of time spent in the critical section"). The
//! paper gives neither the section lengths nor the read/write mix; mpsync uses
//! 30 µs sections, 120 µs × processors outside, 80% reads, 5000 iterations per
//! worker (× `--scale`; `--quick` a tenth of its scale), quantum 50 ms, one
//! worker per processor and the multiprogramming level made of other
//! applications (emulated) or competitor processes (os).
//!
//! Varies the MP level at the first `--procs` count (Fig. 5; `--quick`: 1 and
//! 2, as the other MP-level experiments), or — when `--procs` lists several
//! counts — the processors at the first `--mp` level (default 2; Fig. 6, as
//! `wks95-mutex` does for Fig. 2). The paper's text states one claim for both
//! figures, without values beyond it: RW-Smart-Q is "more than an order of
//! magnitude" better than RW-Queued and "significantly better" than
//! RW-TAS-B-np; Fig. 6's clauses are judged at the last processor count and
//! at every processor count (all at the one MP level, so judged only when it is
//! above 1). Times normalized to RW-TAS-B at the same point. A run stops at
//! 25× its ideal time (at least 2 s; `--quick`: 5×, at least 0.5 s) and is
//! reported censored.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mpsync::util::busy::BusyWork;
use mpsync::util::clock::now_ns;
use mpsync::util::rng::SplitMix64;

use super::rwlock_oversub::{BenchRw, rw_table};
use super::wks94::{
    CAP_FACTOR, CAP_MIN_S, Contention, PointEnvs, Sweep, censored_mark, sweep_of, unmeasured,
};
use super::{Experiment, Params};
use crate::env::{PointEnv, Preempt};
use crate::model::{self, Better, Clause, Design, Imp, Judged, Verdicts, fmt_x};
use crate::output::{RunRecord, Trial};
use crate::svg::sig3;

/// The paper's conclusion, as a statement.
pub const CONCLUSION: &str = "the scheduler-conscious queued reader-writer lock (RW-Smart-Q) is more \
than 10x better than the naive queued lock (RW-Queued) under multiprogramming, and better than the \
scheduler-conscious centralized lock (RW-TAS-B-np)";

/// Critical section (µs).
pub const CS_US: f64 = 30.0;
/// Outside the section, per processor (µs).
pub const NCS_PER_PROC_US: f64 = 120.0;
/// Fraction of sections that are reads.
pub const READS: f64 = 0.8;
/// Iterations per worker at `--scale 1`.
pub const BASE_ITERS: f64 = 5000.0;

/// One run of the program on a fresh `L`: returns the fraction of the planned
/// iterations done before `deadline_ns` (1.0 = all).
fn program<L: BenchRw>(
    env: &PointEnv,
    iters: u64,
    cs: u64,
    ncs: u64,
    seed: u64,
    cap: Duration,
) -> anyhow::Result<(crate::env::Outcome, f64)> {
    let lock = L::create();
    let done = AtomicU64::new(0);
    let workers = AtomicU64::new(0);
    let deadline = AtomicU64::new(0);
    let w = BusyWork::global();
    let body = |id: u32| {
        // Relaxed: the first worker sets the deadline; a late one sees 0 or it.
        let d = match deadline.compare_exchange(
            0,
            now_ns() + cap.as_nanos() as u64,
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => now_ns() + cap.as_nanos() as u64,
            Err(d) => d,
        };
        workers.fetch_add(1, Ordering::Relaxed);
        let mut rng = SplitMix64::stream(seed, u64::from(id));
        let mut i = 0;
        while i < iters && now_ns() < d {
            if rng.next_f64() < READS {
                lock.read(|| w.run_iters(cs));
            } else {
                lock.write(|| w.run_iters(cs));
            }
            w.run_iters(ncs);
            i += 1;
        }
        done.fetch_add(i, Ordering::Relaxed);
    };
    let o = env.run(&body)?;
    let planned = iters * workers.into_inner().max(1);
    Ok((o, done.into_inner() as f64 / planned as f64))
}

type Runner =
    fn(&PointEnv, u64, u64, u64, u64, Duration) -> anyhow::Result<(crate::env::Outcome, f64)>;

fn runner(name: &str) -> Option<Runner> {
    use super::rwlock_oversub::{ParkingLotRw, Sharded, StdRw};
    use mpsync::rwlock::{RwNative, RwNativeNp, RwQueued, RwSmartQ, RwTasB, RwTasBNp};
    Some(match name {
        "RW-Smart-Q" => program::<mpsync::rwlock::RwLock<RwSmartQ, ()>>,
        "RW-Queued" => program::<mpsync::rwlock::RwLock<RwQueued, ()>>,
        "RW-TAS-B-np" => program::<mpsync::rwlock::RwLock<RwTasBNp, ()>>,
        "RW-TAS-B" => program::<mpsync::rwlock::RwLock<RwTasB, ()>>,
        "RW-Native-np" => program::<mpsync::rwlock::RwLock<RwNativeNp, ()>>,
        "RW-Native" => program::<mpsync::rwlock::RwLock<RwNative, ()>>,
        "parking_lot::RwLock" => program::<ParkingLotRw>,
        "std::sync::RwLock" => program::<StdRw>,
        "crossbeam ShardedLock" => program::<Sharded>,
        _ => return None,
    })
}

/// The sizes of one run.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    procs: u32,
    iters: u64,
    cs: u64,
    ncs: u64,
    cap: Duration,
}

/// The program's sections: `NCS_PER_PROC_US` × processors outside, or
/// contention-matched to the paper's 63-processor KSR 1.
fn contention(p: &Params) -> Contention {
    Contention {
        cs_us: CS_US,
        ncs: |procs| NCS_PER_PROC_US * f64::from(procs),
        paper_procs: super::wks95::PAPER_PROCS,
        matched: p.match_contention,
    }
}

fn sizes(p: &Params, procs: u32) -> Sizes {
    let quick = if p.quick { 0.1 } else { 1.0 };
    let iters = ((BASE_ITERS * p.scale * quick).round() as u64).max(10);
    let busy = BusyWork::global();
    let ncs_us = contention(p).ncs_us(procs);
    let ideal_s = iters as f64 * (CS_US + ncs_us) * 1e-6;
    Sizes {
        procs,
        iters,
        cs: busy.iters_for_ns((CS_US * 1e3) as u64),
        ncs: busy.iters_for_ns((ncs_us * 1e3) as u64),
        cap: if p.quick {
            Duration::from_secs_f64((5.0 * ideal_s).max(0.5))
        } else {
            Duration::from_secs_f64((CAP_FACTOR * ideal_s).max(CAP_MIN_S))
        },
    }
}

/// The paper's locks (ours) and the peers, of kind "rwlock"; the BRAVO forms
/// are rwlock-oversub's.
fn design(sw: &Sweep, trials: u32) -> Design {
    let imps = rw_table()
        .iter()
        .filter(|i| i.biased_from.is_none())
        .map(|i| {
            if i.peer {
                Imp::peer(i.name, "rwlock")
            } else {
                Imp::ours(i.name, "rwlock")
            }
        })
        .collect();
    Design::single(
        sw.x_label(),
        "seconds",
        Better::Lower,
        sw.xs(),
        imps,
        trials,
    )
    .baseline("RW-TAS-B")
}

/// Whether the run varies the processors (`--procs` lists several).
fn by_procs(p: &Params) -> bool {
    p.procs.as_ref().is_some_and(|v| v.len() > 1)
}

/// Runs the experiment.
pub fn run(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let sw = sweep_of(p, preempt, by_procs(p));
    if sw.points.is_empty() {
        anyhow::bail!("no points to run");
    }
    let quantum = p.quantum(50.0);
    let sizes_at: Vec<Sizes> = sw.points.iter().map(|&(n, _)| sizes(p, n)).collect();
    let d = design(&sw, p.trials);
    let mut envs = PointEnvs::new(preempt, quantum, p.seed);
    let mut censored = Vec::new();
    let started = Instant::now();
    let trials = model::collect(exp.id, &d, &mut |c| {
        let name = c.imp.name.as_str();
        let run = runner(name).ok_or_else(|| anyhow::anyhow!("no runner for {name}"))?;
        let (index, &(_, mp)) = sw
            .points
            .iter()
            .enumerate()
            .find(|(_, q)| sw.x(**q) == c.x)
            .ok_or_else(|| anyhow::anyhow!("no point at {}", c.x))?;
        let sz = sizes_at[index];
        let env = envs.at(c, index, sz.procs, mp)?;
        let (o, frac) = run(
            env,
            sz.iters,
            sz.cs,
            sz.ncs,
            p.seed ^ u64::from(c.trial),
            sz.cap,
        )?;
        if frac < 1.0 {
            censored.push(format!(
                "{name} at {} {} (trial {}: {:.0}% done)",
                if sw.by_procs { "processors" } else { "MP" },
                fmt_x(c.x),
                c.trial,
                100.0 * frac
            ));
        }
        Ok(Some(Trial {
            value: o.wall.as_secs_f64() / frac.max(1e-9),
            preemptions: o.preemptions,
            warnings: o.warnings,
            mp: Some(mp),
            procs: Some(sz.procs),
            finish_spread: Some(o.finish_spread),
            censored_at: (frac < 1.0).then_some(frac),
            ..Trial::default()
        }))
    })?;
    envs.close();
    let mut notes = Vec::new();
    let procs: Vec<u32> = sw.points.iter().map(|q| q.0).collect();
    notes.extend(contention(p).note(&procs));
    if preempt == Preempt::None {
        notes
            .push("--preempt none: no multiprogramming, so the conclusion is not evaluated".into());
    }
    if !censored.is_empty() {
        let mut caps: Vec<String> = sizes_at
            .iter()
            .map(|s| format!("{:.1}", s.cap.as_secs_f64()))
            .collect();
        caps.dedup();
        notes.push(format!(
            "censored: {} run(s) hit the time cap ({} s per point); their times are extrapolated from the fraction done: {}",
            censored.len(),
            caps.join(", "),
            censored.join("; ")
        ));
    }
    let v = Verdicts {
        conclusion: CONCLUSION.into(),
        clauses: verdict_clauses(&sw),
        notes,
        ..Verdicts::default()
    };
    let mps: Vec<f64> = sw.points.iter().map(|q| q.1).collect();
    let params = serde_json::json!({
        "points": sw.points.iter().map(|&(n, m)| serde_json::json!({"procs": n, "mp": m})).collect::<Vec<_>>(),
        "processors": sizes_at[0].procs, "mp": mps, "iterations_per_worker": sizes_at[0].iters,
        "critical_section_us": CS_US,
        "non_critical_us_per_point": sw.points.iter().map(|&(n, _)| contention(p).ncs_us(n)).collect::<Vec<_>>(),
        "contention_matched": p.match_contention,
        "paper_lock_utilisation": contention(p).paper_utilisation(),
        "read_fraction": READS, "quantum_ms": quantum.as_secs_f64() * 1e3,
        "cap_s_per_point": sizes_at.iter().map(|s| s.cap.as_secs_f64()).collect::<Vec<_>>(),
        "implementations": d.imps.iter().map(|i| i.name.clone()).collect::<Vec<_>>(),
    });
    let (mut rec, svg) = model::finish(exp, p, preempt, &d, trials, v, params, started);
    rec.extra = serde_json::json!({ "scheduler": envs.sched });
    Ok((rec, svg))
}

/// The clauses of a run: none without multiprogramming (the verdict is
/// then a measurement).
pub fn verdict_clauses(sw: &Sweep) -> Vec<Clause> {
    if sw.preempt == Preempt::None {
        Vec::new()
    } else {
        clauses(sw)
    }
}

/// 001's clauses: RW-Queued / RW-Smart-Q ≥ 10 at the last point (the most
/// multiprogrammed level, or the most processors), and RW-Smart-Q faster than
/// RW-TAS-B-np at most multiprogrammed points. Without a point above MP 1
/// neither holds.
pub fn clauses(sw: &Sweep) -> Vec<Clause> {
    let multi: Vec<f64> = sw
        .xs()
        .into_iter()
        .filter(|&x| sw.mp_at(x).is_some_and(|m| m > 1.0))
        .collect();
    let none = || "no multiprogrammed point measured: use MP levels above 1".to_string();
    let top_multi = sw.points.last().is_some_and(|q| q.1 > 1.0);
    let (fig_order, fig_better) = if sw.by_procs {
        (
            "more than an order of magnitude (Fig. 6, varying the processors on the KSR 1)",
            "significantly better than the scheduler-conscious centralized lock (Fig. 6)",
        )
    } else {
        (
            "more than an order of magnitude (Fig. 5, 63-processor KSR 1)",
            "significantly better than the scheduler-conscious centralized lock (Fig. 5)",
        )
    };
    let by_procs = sw.by_procs;
    let order = Clause::new("RW-Queued / RW-Smart-Q ≥ 10", Some(fig_order), move |r| {
        let x = r.last_x(0);
        let at = r.at(0, x);
        if !top_multi {
            return Judged {
                at,
                ours: none(),
                holds: Some(false),
            };
        }
        match (r.value("RW-Queued", 0, x), r.value("RW-Smart-Q", 0, x)) {
            (Some(q), Some(s)) => Judged {
                at,
                ours: format!(
                    "RW-Queued / RW-Smart-Q = {}{}",
                    sig3(q / s),
                    censored_mark(r, &["RW-Queued", "RW-Smart-Q"], x)
                ),
                holds: Some(q / s >= 10.0),
            },
            _ => unmeasured(at, "RW-Queued and RW-Smart-Q were not both measured"),
        }
    });
    let better = Clause::new(
        if sw.by_procs {
            "RW-Smart-Q is faster than RW-TAS-B-np at most points"
        } else {
            "RW-Smart-Q is faster than RW-TAS-B-np at most levels"
        },
        Some(fig_better),
        move |r| {
            let at = if by_procs {
                "the processor counts".to_string()
            } else {
                "the multiprogrammed levels".to_string()
            };
            if multi.is_empty() {
                return Judged {
                    at,
                    ours: none(),
                    holds: Some(false),
                };
            }
            let got: Vec<(f64, f64)> = multi
                .iter()
                .filter_map(|&m| {
                    Some((
                        m,
                        r.value("RW-Smart-Q", 0, m)? / r.value("RW-TAS-B-np", 0, m)?,
                    ))
                })
                .collect();
            if got.is_empty() {
                return unmeasured(at, "RW-Smart-Q and RW-TAS-B-np were not both measured");
            }
            let faster = got.iter().filter(|(_, q)| *q < 1.0).count();
            let each: Vec<String> = got
                .iter()
                .map(|(m, q)| {
                    let unit = if by_procs { " processors" } else { "" };
                    format!("{}{unit} {}", fmt_x(*m), sig3(*q))
                })
                .collect();
            Judged {
                at,
                ours: format!(
                    "RW-Smart-Q / RW-TAS-B-np: {}; faster at {faster} of {}",
                    each.join(", "),
                    got.len()
                ),
                holds: Some(faster * 2 > got.len()),
            }
        },
    );
    vec![order, better]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Results;
    use crate::output::{Point, Status, Verdict};

    fn pt(name: &str, x: f64, v: f64) -> Point {
        Point {
            panel: None,
            implementation: name.into(),
            x,
            value: v,
            normalized: v,
        }
    }

    fn mp_sweep(mps: &[f64], preempt: Preempt) -> Sweep {
        Sweep {
            points: mps.iter().map(|&m| (2, m)).collect(),
            by_procs: false,
            preempt,
        }
    }

    fn judge_on(pts: &[Point], sw: &Sweep) -> Verdict {
        let d = design(sw, 1);
        let r = Results {
            design: &d,
            points: pts,
            trials: &[],
        };
        let c = clauses(sw);
        Verdict::from_clauses("c", c.iter().map(|c| c.judge(&r)).collect(), vec![])
    }

    fn verdict(pts: &[Point], mps: &[f64]) -> Verdict {
        judge_on(pts, &mp_sweep(mps, Preempt::Emulated))
    }

    /// Fig. 6: the processors at MP 2; both clauses judged over the counts,
    /// and nothing holds at MP 1.
    #[test]
    fn the_processor_sweep_judges_fig_6() {
        let procs = |mp: f64| Sweep {
            points: vec![(1, mp), (2, mp)],
            by_procs: true,
            preempt: Preempt::Emulated,
        };
        let pts = vec![
            pt("RW-Queued", 1.0, 3.0),
            pt("RW-Smart-Q", 1.0, 1.0),
            pt("RW-TAS-B-np", 1.0, 2.0),
            pt("RW-Queued", 2.0, 30.0),
            pt("RW-Smart-Q", 2.0, 2.0),
            pt("RW-TAS-B-np", 2.0, 1.0),
        ];
        let v = judge_on(&pts, &procs(2.0));
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
        assert_eq!(v.clauses[0].ours, "RW-Queued / RW-Smart-Q = 15.0");
        assert_eq!(v.clauses[0].holds, Some(true));
        assert!(v.clauses[0].paper.as_deref().unwrap().contains("Fig. 6"));
        assert_eq!(
            v.clauses[1].ours,
            "RW-Smart-Q / RW-TAS-B-np: 1 processors 0.500, 2 processors 2.00; faster at 1 of 2"
        );
        assert_eq!(v.clauses[1].holds, Some(false));
        let v = judge_on(&pts, &procs(1.0));
        assert_eq!(
            (v.clauses[0].holds, v.clauses[1].holds),
            (Some(false), Some(false))
        );
    }

    #[test]
    fn clauses_hold_fail_or_cannot_be_judged() {
        let good = vec![
            pt("RW-Queued", 2.0, 50.0),
            pt("RW-Smart-Q", 2.0, 2.0),
            pt("RW-TAS-B-np", 2.0, 3.0),
        ];
        assert_eq!(verdict(&good, &[1.0, 2.0]).status, Status::Holds);
        let short = vec![
            pt("RW-Queued", 2.0, 5.0),
            pt("RW-Smart-Q", 2.0, 2.0),
            pt("RW-TAS-B-np", 2.0, 3.0),
        ];
        let v = verdict(&short, &[1.0, 2.0]);
        assert_eq!(v.status, Status::DoesNotHold);
        assert_eq!(v.clauses[0].ours, "RW-Queued / RW-Smart-Q = 2.50");
        let slower = vec![
            pt("RW-Queued", 2.0, 50.0),
            pt("RW-Smart-Q", 2.0, 4.0),
            pt("RW-TAS-B-np", 2.0, 3.0),
        ];
        let v = verdict(&slower, &[1.0, 2.0]);
        assert_eq!(
            (v.clauses[0].holds, v.clauses[1].holds),
            (Some(true), Some(false))
        );
        assert_eq!(
            verdict(&good[1..], &[1.0, 2.0]).status,
            Status::PartlyEvaluable
        );
        assert_eq!(verdict(&good, &[1.0]).status, Status::DoesNotHold);
        assert!(verdict_clauses(&mp_sweep(&[2.0], Preempt::None)).is_empty());
        assert_eq!(verdict_clauses(&mp_sweep(&[2.0], Preempt::Os)).len(), 2);
        assert!(runner("RW-Smart-Q").is_some() && runner("nope").is_none());
    }
}
