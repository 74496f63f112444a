//! `wks95-rwlock`: the reader-writer lock program of Wisniewski, Kontothanassis &
//! Scott, PPoPP 1995 §4 (papers/001, Figure 5; Figure 6's processor sweep is
//! not run: one processor count, the first of `--procs`): the lock program of
//! `wks95-mutex` with the longer critical sections the paper describes ("we
//! modified the synthetic program ... to increase the amount of time spent in
//! the critical section"). The paper gives neither the section lengths nor the
//! read/write mix; mpsync uses 30 µs sections, 120 µs × processors outside,
//! 80% reads, 5000 iterations per worker (× `--scale`; `--quick` a tenth of its
//! scale), quantum 50 ms, one worker per processor and the multiprogramming
//! level made of other applications (emulated) or competitor processes (os).
//! Varies the MP level (`--quick`: 1 and 2, as the other MP-level
//! experiments). A run stops at 25× its ideal time (at least 2 s;
//! `--quick`: 5×, at least 0.5 s) and is reported censored.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mpsync::util::busy::BusyWork;
use mpsync::util::clock::now_ns;
use mpsync::util::rng::SplitMix64;

use super::rwlock_oversub::{BenchRw, rw_table};
use super::wks94::{CAP_FACTOR, CAP_MIN_S, QUICK_MP_LEVELS};
use super::{Experiment, Params};
use crate::env::{PointEnv, Preempt, summarize};
use crate::output::{Machine, Point, RunRecord, Status, Trial, Verdict};
use crate::stats::trimmed_mean;
use crate::svg::line_chart;

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
        "RW-Smart-Q" => program::<mpsync::RwLock<RwSmartQ, ()>>,
        "RW-Queued" => program::<mpsync::RwLock<RwQueued, ()>>,
        "RW-TAS-B-np" => program::<mpsync::RwLock<RwTasBNp, ()>>,
        "RW-TAS-B" => program::<mpsync::RwLock<RwTasB, ()>>,
        "RW-Native-np" => program::<mpsync::RwLock<RwNativeNp, ()>>,
        "RW-Native" => program::<mpsync::RwLock<RwNative, ()>>,
        "parking_lot::RwLock" => program::<ParkingLotRw>,
        "std::sync::RwLock" => program::<StdRw>,
        "crossbeam ShardedLock" => program::<Sharded>,
        _ => return None,
    })
}

/// Runs the experiment.
pub fn run(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
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
    let quantum = p.quantum(50.0);
    let quick = if p.quick { 0.1 } else { 1.0 };
    let iters = ((BASE_ITERS * p.scale * quick).round() as u64).max(10);
    let busy = BusyWork::global();
    let (cs, ncs) = (
        busy.iters_for_ns((CS_US * 1e3) as u64),
        busy.iters_for_ns((NCS_PER_PROC_US * f64::from(procs) * 1e3) as u64),
    );
    let ideal_s = iters as f64 * (CS_US + NCS_PER_PROC_US * f64::from(procs)) * 1e-6;
    let cap = if p.quick {
        Duration::from_secs_f64((5.0 * ideal_s).max(0.5))
    } else {
        Duration::from_secs_f64((CAP_FACTOR * ideal_s).max(CAP_MIN_S))
    };
    // The paper's locks and the peers; the BRAVO forms are rwlock-oversub's.
    let names: Vec<&'static str> = rw_table()
        .iter()
        .filter(|i| i.biased_from.is_none())
        .map(|i| i.name)
        .collect();
    let pb = crate::progress((mps.len() * p.trials as usize * names.len()) as u64, exp.id);
    let started = Instant::now();
    let mut trials = Vec::new();
    let mut sched = Vec::new();
    let mut censored = Vec::new();
    for (pi, &mp) in mps.iter().enumerate() {
        let env = PointEnv::start(preempt, procs, mp, quantum, p.seed.wrapping_add(pi as u64))?;
        for t in 0..p.trials {
            for k in 0..names.len() {
                let name = names[(k + t as usize) % names.len()];
                let run = runner(name).ok_or_else(|| anyhow::anyhow!("no runner for {name}"))?;
                let (o, frac) = run(&env, iters, cs, ncs, p.seed ^ u64::from(t), cap)?;
                if frac < 1.0 {
                    censored.push(format!(
                        "{name} at MP {mp} (trial {t}: {:.0}% done)",
                        100.0 * frac
                    ));
                }
                trials.push(Trial {
                    implementation: name.into(),
                    x: mp,
                    trial: t,
                    value: o.wall.as_secs_f64() / frac.max(1e-9),
                    preemptions: o.preemptions,
                    warnings: o.warnings,
                    mp: Some(mp),
                    procs: Some(procs),
                    finish_spread: Some(o.finish_spread),
                    censored_at: (frac < 1.0).then_some(frac),
                    ..Trial::default()
                });
                pb.inc(1);
            }
        }
        if let Some(s) = env.finish() {
            sched.push(serde_json::json!({"mp": mp, "scheduler": summarize(&s)}));
        }
    }
    pb.finish_and_clear();
    let mean_of = |name: &str, x: f64| {
        let v: Vec<f64> = trials
            .iter()
            .filter(|t| t.implementation == name && t.x == x)
            .map(|t| t.value)
            .collect();
        trimmed_mean(&v)
    };
    let base = mps
        .first()
        .and_then(|&m| mean_of("RW-TAS-B", m))
        .filter(|b| *b > 0.0)
        .unwrap_or(1.0);
    let mut points = Vec::new();
    for &mp in &mps {
        for n in &names {
            if let Some(v) = mean_of(n, mp) {
                points.push(Point {
                    implementation: (*n).into(),
                    x: mp,
                    value: v,
                    normalized: v / base,
                });
            }
        }
    }
    let mut verdict = verdict(&points, &mps, preempt);
    if !censored.is_empty() {
        verdict.details.push(format!(
            "censored: {} run(s) hit the time cap ({:.1} s); their times are extrapolated from the fraction done: {}",
            censored.len(),
            cap.as_secs_f64(),
            censored.join("; ")
        ));
    }
    let series = Point::series(&names, &points, |q| q.normalized);
    let svg = line_chart(
        &format!(
            "{} (--preempt {}, {})",
            exp.id,
            preempt.name(),
            verdict.status.label()
        ),
        "multiprogramming level",
        "time normalized to RW-TAS-B at the first point (lower is better)",
        &series,
    );
    let rec = RunRecord {
        experiment: exp.id.into(),
        paper: exp.reference.into(),
        title: exp.title.into(),
        preempt: preempt.name().into(),
        started_unix: crate::unix_now(),
        duration_s: started.elapsed().as_secs_f64(),
        machine: Machine::detect(),
        params: serde_json::json!({
            "common": p, "processors": procs, "mp": mps, "iterations_per_worker": iters,
            "critical_section_us": CS_US, "non_critical_us": NCS_PER_PROC_US * f64::from(procs),
            "read_fraction": READS, "quantum_ms": quantum.as_secs_f64() * 1e3, "cap_s": cap.as_secs_f64(),
            "implementations": names,
        }),
        busy_iters_per_us: busy.iters_per_us(),
        unit: "seconds (lower is better)".into(),
        x_label: "multiprogramming level".into(),
        baseline: "RW-TAS-B at the first MP level".into(),
        trials,
        points,
        extra: serde_json::json!({ "scheduler": sched }),
        verdict,
    };
    Ok((rec, svg))
}

/// 001's conclusion: RW-Queued / RW-Smart-Q ≥ 10 at the most multiprogrammed
/// level, and RW-Smart-Q faster than RW-TAS-B-np at most multiprogrammed levels.
pub fn verdict(points: &[Point], mps: &[f64], preempt: Preempt) -> Verdict {
    let mut details = Vec::new();
    if preempt == Preempt::None {
        details
            .push("--preempt none: no multiprogramming, so the conclusion is not evaluated".into());
        return Verdict {
            conclusion: CONCLUSION.into(),
            status: Status::Measurement,
            details,
        };
    }
    let at = |name: &str, x: f64| {
        points
            .iter()
            .find(|p| p.implementation == name && p.x == x)
            .map(|p| p.value)
    };
    let multi: Vec<f64> = mps.iter().copied().filter(|m| *m > 1.0).collect();
    let Some(&top) = multi.iter().max_by(|a, b| a.total_cmp(b)) else {
        details.push("no multiprogrammed point measured: use MP levels above 1".into());
        return Verdict {
            conclusion: CONCLUSION.into(),
            status: Status::DoesNotHold,
            details,
        };
    };
    let mut holds = true;
    let mut missing = false;
    match (at("RW-Queued", top), at("RW-Smart-Q", top)) {
        (Some(q), Some(s)) => {
            let r = q / s;
            holds &= r >= 10.0;
            details.push(format!(
                "MP {top}: RW-Queued / RW-Smart-Q = {r:.2} ({} the 10x of the paper)",
                if r >= 10.0 {
                    "reaches"
                } else {
                    "falls short of"
                }
            ));
        }
        _ => {
            missing = true;
            details.push("not evaluated: RW-Queued and RW-Smart-Q were not both measured".into());
        }
    }
    let (mut better, mut counted) = (0, 0);
    for &m in &multi {
        if let (Some(s), Some(t)) = (at("RW-Smart-Q", m), at("RW-TAS-B-np", m)) {
            counted += 1;
            if s < t {
                better += 1;
            }
            details.push(format!("MP {m}: RW-Smart-Q / RW-TAS-B-np = {:.2}", s / t));
        }
    }
    if counted > 0 {
        let ok = better * 2 > counted;
        holds &= ok;
        details.push(format!("RW-Smart-Q faster than RW-TAS-B-np at {better} of {counted} multiprogrammed levels ({})", if ok { "most" } else { "not most" }));
    } else {
        missing = true;
    }
    Verdict {
        conclusion: CONCLUSION.into(),
        status: if !holds {
            Status::DoesNotHold
        } else if missing {
            Status::PartlyEvaluable
        } else {
            Status::Holds
        },
        details,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(name: &str, x: f64, v: f64) -> Point {
        Point {
            implementation: name.into(),
            x,
            value: v,
            normalized: v,
        }
    }

    #[test]
    fn clauses() {
        let good = vec![
            pt("RW-Queued", 2.0, 50.0),
            pt("RW-Smart-Q", 2.0, 2.0),
            pt("RW-TAS-B-np", 2.0, 3.0),
        ];
        assert_eq!(
            verdict(&good, &[1.0, 2.0], Preempt::Emulated).status,
            Status::Holds
        );
        let short = vec![
            pt("RW-Queued", 2.0, 5.0),
            pt("RW-Smart-Q", 2.0, 2.0),
            pt("RW-TAS-B-np", 2.0, 3.0),
        ];
        assert_eq!(
            verdict(&short, &[1.0, 2.0], Preempt::Os).status,
            Status::DoesNotHold
        );
        assert_eq!(
            verdict(&good[1..], &[1.0, 2.0], Preempt::Os).status,
            Status::PartlyEvaluable
        );
        assert_eq!(
            verdict(&good, &[1.0], Preempt::Os).status,
            Status::DoesNotHold
        );
        assert_eq!(
            verdict(&good, &[2.0], Preempt::None).status,
            Status::Measurement
        );
        assert!(runner("RW-Smart-Q").is_some() && runner("nope").is_none());
    }
}
