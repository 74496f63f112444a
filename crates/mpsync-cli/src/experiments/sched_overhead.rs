//! `sched-overhead`: what the pseudo-scheduler costs and how faithfully it keeps
//! its schedule — its own CPU use, requested vs actual quanta and off-times,
//! preemption latency — and whether the same seed replays the same schedule.

use std::time::{Duration, Instant};

use mpsync::sched::emulated::{Emulated, EmulatedConfig, Sample, ScheduleEvent};
use mpsync::util::busy::BusyWork;

use super::{Experiment, Params};
use crate::env::{PointEnv, Preempt, summarize};
use crate::model::{self, Better, Clause, Design, Imp, Judged, Results, Verdicts};
use crate::output::{RunRecord, Trial};
use crate::stats::{median, quantile};

/// Acceptance of the foundation issue: scheduler CPU below 2% of one core…
pub const MAX_CPU_PERCENT: f64 = 2.0;
/// …and the median actual quantum within 10% of the requested one.
pub const MAX_QUANTUM_ERROR: f64 = 0.10;

fn planned_schedule(procs: u32, mp: f64, seed: u64) -> anyhow::Result<Vec<ScheduleEvent>> {
    let cfg = EmulatedConfig::new(procs, mp)?
        .quantum(Duration::from_millis(1))
        .seed(seed);
    let emu = Emulated::start(cfg)?;
    std::thread::scope(|s| -> anyhow::Result<()> {
        let workers: Vec<_> = (0..procs)
            .map(|v| {
                let emu = &emu;
                s.spawn(move || -> anyhow::Result<()> {
                    let _a = emu.attach(v)?;
                    BusyWork::global().run_ns(30_000_000);
                    Ok(())
                })
            })
            .collect();
        for w in workers {
            w.join()
                .map_err(|_| anyhow::anyhow!("a worker panicked"))??;
        }
        Ok(())
    })?;
    // Rounds of different vprocs interleave in wall-clock order; the plan is per vproc.
    let mut log = emu.schedule_log();
    emu.stop();
    log.sort_by_key(|e| (e.vproc, e.seq));
    Ok(log)
}

/// Median of one field of the samples, in milliseconds (NaN if none).
fn median_ms(samples: &[Sample], field: fn(&Sample) -> u64) -> f64 {
    let v: Vec<u64> = samples.iter().map(field).collect();
    median(&v).map_or(f64::NAN, |ns| ns as f64 / 1e6)
}

/// The median ratio actual / requested of the samples (NaN if none).
fn median_ratio(v: &[Sample]) -> f64 {
    let r: Vec<f64> = v
        .iter()
        .filter(|s| s.requested_ns > 0)
        .map(|s| s.actual_ns as f64 / s.requested_ns as f64)
        .collect();
    median(&r).unwrap_or(f64::NAN)
}

/// The median actual / requested quantum.
pub const QUANTUM: &str = "quantum actual/requested";
/// The scheduler's CPU use, percent of one core.
pub const CPU: &str = "scheduler CPU %";

/// What the run measured: each bar's value, and the replay check.
#[derive(Debug, Default)]
struct Measured {
    bars: Vec<(&'static str, f64)>,
    off_ratio: f64,
    lat_p50_us: f64,
    lat_p99_us: f64,
    preemptions: usize,
    wall_s: f64,
    realtime: bool,
    /// Rounds compared, and whether the same seed planned the same schedule.
    replay: (usize, bool),
    stats: serde_json::Value,
    prefix: Vec<String>,
}

/// The bars (the design's "implementations"), in order.
const BARS: [&str; 7] = [
    QUANTUM,
    CPU,
    "requested quantum (ms)",
    "actual quantum (ms)",
    "requested off-time (ms)",
    "actual off-time (ms)",
    "latency p99 (µs/100)",
];

/// Two planned schedules from the same seed: rounds compared, and whether
/// each vproc's common prefix of rounds is the same.
fn replay(procs: u32, seed: u64) -> anyhow::Result<(usize, bool, Vec<String>)> {
    let a = planned_schedule(procs, 2.5, seed)?;
    let b = planned_schedule(procs, 2.5, seed)?;
    let mut n = 0;
    let mut same = true;
    for v in 0..procs {
        let (x, y): (Vec<_>, Vec<_>) = (
            a.iter().filter(|e| e.vproc == v).collect(),
            b.iter().filter(|e| e.vproc == v).collect(),
        );
        let k = x.len().min(y.len());
        n += k;
        same &= k > 0 && x[..k] == y[..k];
    }
    Ok((
        n,
        same,
        a.iter().take(8).map(|e| format!("{e:?}")).collect(),
    ))
}

/// Busy threads for `secs` under the pseudo-scheduler, then the replay check.
fn measure(
    procs: u32,
    mp: f64,
    quantum: Duration,
    secs: f64,
    seed: u64,
) -> anyhow::Result<Measured> {
    let env = PointEnv::start(Preempt::Emulated, procs, mp, quantum, seed)?;
    let busy = BusyWork::global();
    let deadline = mpsync::util::clock::now_ns() + (secs * 1e9) as u64;
    env.run(&|_| {
        while mpsync::util::clock::now_ns() < deadline {
            busy.run_ns(100_000);
        }
    })?;
    let stats = env.finish().unwrap_or_default();
    let (n, same, prefix) = replay(procs, seed)?;
    let us = |x: Option<u64>| x.map_or(f64::NAN, |x| x as f64 / 1e3);
    let lat_p99_us = us(quantile(&stats.preempt_latency_ns, 0.99));
    Ok(Measured {
        bars: vec![
            (QUANTUM, median_ratio(&stats.quanta)),
            (
                CPU,
                100.0 * stats.sched_cpu_ns as f64 / stats.wall_ns.max(1) as f64,
            ),
            (BARS[2], median_ms(&stats.quanta, |s| s.requested_ns)),
            (BARS[3], median_ms(&stats.quanta, |s| s.actual_ns)),
            (BARS[4], median_ms(&stats.off_times, |s| s.requested_ns)),
            (BARS[5], median_ms(&stats.off_times, |s| s.actual_ns)),
            (BARS[6], lat_p99_us / 100.0),
        ],
        off_ratio: median_ratio(&stats.off_times),
        lat_p50_us: us(median(&stats.preempt_latency_ns)),
        lat_p99_us,
        preemptions: stats.preempt_latency_ns.len(),
        wall_s: stats.wall_ns as f64 / 1e9,
        realtime: stats.realtime,
        replay: (n, same),
        stats: summarize(&stats),
        prefix,
    })
}

/// The acceptance targets as clauses; the rest of what was measured as notes.
fn verdicts(m: &Measured, mp: f64) -> Verdicts {
    let (rounds, same) = m.replay;
    let clauses = vec![
        Clause::new(
            format!("target: the scheduler's CPU < {MAX_CPU_PERCENT}% of one core"),
            None,
            move |r| bar_clause(r, CPU, mp, |v| v < MAX_CPU_PERCENT, |v| format!("{v:.3}%")),
        ),
        Clause::new(
            format!(
                "target: the median actual/requested quantum within ±{:.0}% of 1",
                MAX_QUANTUM_ERROR * 100.0
            ),
            None,
            move |r| {
                bar_clause(
                    r,
                    QUANTUM,
                    mp,
                    |v| (v - 1.0).abs() <= MAX_QUANTUM_ERROR,
                    |v| format!("{v:.3}"),
                )
            },
        ),
        Clause::new(
            "target: the same seed plans the same schedule",
            None,
            move |_| Judged {
                at: format!("two plans from one seed, {rounds} rounds compared"),
                ours: if same { "the same" } else { "different" }.into(),
                holds: Some(same),
            },
        ),
    ];
    let bar = |i: usize| m.bars.get(i).map_or(f64::NAN, |b| b.1);
    let notes = vec![
        format!(
            "measured over {:.1} s; quanta: requested median {:.2} ms, actual {:.2} ms; off-times: requested {:.2} ms, actual {:.2} ms",
            m.wall_s,
            bar(2),
            bar(3),
            bar(4),
            bar(5)
        ),
        format!("median actual/requested off-time = {:.3}", m.off_ratio),
        format!(
            "preemption latency (decision to thread stopped): p50 {:.1} µs, p99 {:.1} µs over {} preemptions",
            m.lat_p50_us, m.lat_p99_us, m.preemptions
        ),
        format!(
            "real-time priority (SCHED_FIFO) granted: {}",
            if m.realtime { "yes" } else { "no" }
        ),
    ];
    Verdicts {
        conclusion: format!(
            "the pseudo-scheduler costs under {MAX_CPU_PERCENT}% of one core, keeps the median quantum within {:.0}% of the requested one, and replays its schedule from the seed",
            MAX_QUANTUM_ERROR * 100.0
        ),
        clauses,
        notes,
        advice: Vec::new(),
        targets: true,
    }
}

/// Judges bar `name` at `x` by `ok`.
fn bar_clause(
    r: &Results<'_>,
    name: &str,
    x: f64,
    ok: impl Fn(f64) -> bool,
    show: impl Fn(f64) -> String,
) -> Judged {
    let at = r.at(0, x);
    match r.value(name, 0, x) {
        Some(v) => Judged {
            at,
            ours: show(v),
            holds: Some(ok(v)),
        },
        None => Judged {
            at,
            ours: "not measured".into(),
            holds: None,
        },
    }
}

/// Runs it: one measurement (at the first bar; the others read it).
pub fn run(exp: &Experiment, p: &Params, _preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let procs = p.first_procs();
    let mp =
        p.mp.as_ref()
            .and_then(|v| v.first().copied())
            .unwrap_or(2.0);
    let quantum = p.quantum(10.0);
    let secs = if p.quick { 2.0 } else { 5.0 };
    let d = Design::single(
        "multiprogramming level",
        "ratio / percent / ms",
        Better::Lower,
        vec![mp],
        BARS.iter().map(|&b| Imp::reference(b)).collect(),
        1,
    );
    let started = Instant::now();
    let mut m: Option<Measured> = None;
    let trials = model::collect(exp.id, &d, &mut |c| {
        if m.is_none() {
            m = Some(measure(procs, mp, quantum, secs, p.seed)?);
        }
        let v = m
            .as_ref()
            .and_then(|m| m.bars.iter().find(|b| b.0 == c.imp.name));
        Ok(v.filter(|b| b.1.is_finite()).map(|b| Trial {
            value: b.1,
            mp: Some(mp),
            procs: Some(procs),
            ..Trial::default()
        }))
    })?;
    let m = m.unwrap_or_default();
    let v = verdicts(&m, mp);
    let params = serde_json::json!({ "procs": procs, "mp": mp, "quantum_ms": quantum.as_secs_f64() * 1e3, "seconds": secs });
    let (mut rec, svg) = model::finish(exp, p, Preempt::Emulated, &d, trials, v, params, started);
    rec.extra = serde_json::json!({ "scheduler": m.stats, "schedule_prefix": m.prefix });
    Ok((rec, svg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{Point, Status, Verdict};

    fn verdict(cpu: f64, q: f64, same: bool) -> Verdict {
        let d = Design::single(
            "mp",
            "",
            Better::Lower,
            vec![2.0],
            BARS.iter().map(|&b| Imp::reference(b)).collect(),
            1,
        );
        let pt = |n: &str, v: f64| Point {
            panel: None,
            implementation: n.into(),
            x: 2.0,
            value: v,
            normalized: v,
        };
        let points = [pt(CPU, cpu), pt(QUANTUM, q)];
        let r = Results {
            design: &d,
            points: &points,
            trials: &[],
        };
        let m = Measured {
            replay: (10, same),
            ..Measured::default()
        };
        let v = verdicts(&m, 2.0);
        Verdict::from_clauses("c", v.clauses.iter().map(|c| c.judge(&r)).collect(), vec![])
    }

    #[test]
    fn each_target_can_miss() {
        assert_eq!(verdict(0.5, 1.02, true).status, Status::Holds);
        let held = |v: Verdict| v.clauses.iter().map(|c| c.holds).collect::<Vec<_>>();
        assert_eq!(
            held(verdict(3.0, 1.02, true)),
            [Some(false), Some(true), Some(true)]
        );
        assert_eq!(
            held(verdict(0.5, 1.2, true)),
            [Some(true), Some(false), Some(true)]
        );
        assert_eq!(
            held(verdict(0.5, 0.95, false)),
            [Some(true), Some(true), Some(false)]
        );
    }
}
