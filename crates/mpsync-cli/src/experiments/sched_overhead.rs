//! `sched-overhead`: what the pseudo-scheduler costs and how faithfully it keeps
//! its schedule — its own CPU use, requested vs actual quanta and off-times,
//! preemption latency — and whether the same seed replays the same schedule.

use std::time::{Duration, Instant};

use mpsync::sched::emulated::{Emulated, EmulatedConfig, Sample, ScheduleEvent};
use mpsync::util::busy::BusyWork;

use super::{Experiment, Params};
use crate::env::{PointEnv, Preempt, summarize};
use crate::output::{Machine, Point, RunRecord, Status, Verdict};
use crate::stats::{median, quantile};
use crate::svg::bar_chart;

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

/// Runs it.
pub fn run(exp: &Experiment, p: &Params, _preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let procs = p
        .procs
        .as_ref()
        .and_then(|v| v.first().copied())
        .unwrap_or(p.cores);
    let mp =
        p.mp.as_ref()
            .and_then(|v| v.first().copied())
            .unwrap_or(2.0);
    let quantum = p.quantum(10.0);
    let secs = if p.quick { 2.0 } else { 5.0 };
    let pb = crate::progress(3, exp.id);
    let started = Instant::now();
    let env = PointEnv::start(Preempt::Emulated, procs, mp, quantum, p.seed)?;
    let busy = BusyWork::global();
    let deadline = mpsync::util::clock::now_ns() + (secs * 1e9) as u64;
    env.run(&|_| {
        while mpsync::util::clock::now_ns() < deadline {
            busy.run_ns(100_000);
        }
    })?;
    pb.inc(1);
    let stats = env.finish().unwrap_or_default();
    let a = planned_schedule(procs, 2.5, p.seed)?;
    pb.inc(1);
    let b = planned_schedule(procs, 2.5, p.seed)?;
    pb.inc(1);
    pb.finish_and_clear();
    // Compare each vproc's common prefix of rounds.
    let mut n = 0;
    let mut same_seed_same_schedule = true;
    for v in 0..procs {
        let (x, y): (Vec<_>, Vec<_>) = (
            a.iter().filter(|e| e.vproc == v).collect(),
            b.iter().filter(|e| e.vproc == v).collect(),
        );
        let k = x.len().min(y.len());
        n += k;
        same_seed_same_schedule &= k > 0 && x[..k] == y[..k];
    }

    let cpu_pct = 100.0 * stats.sched_cpu_ns as f64 / stats.wall_ns.max(1) as f64;
    let ratios = |v: &[Sample]| -> Vec<f64> {
        v.iter()
            .filter(|s| s.requested_ns > 0)
            .map(|s| s.actual_ns as f64 / s.requested_ns as f64)
            .collect()
    };
    let q = ratios(&stats.quanta);
    let off = ratios(&stats.off_times);
    let q_med = median(&q).unwrap_or(f64::NAN);
    let req_q = median_ms(&stats.quanta, |s| s.requested_ns);
    let act_q = median_ms(&stats.quanta, |s| s.actual_ns);
    let req_off = median_ms(&stats.off_times, |s| s.requested_ns);
    let act_off = median_ms(&stats.off_times, |s| s.actual_ns);
    let lat_p50 = median(&stats.preempt_latency_ns).map_or(f64::NAN, |x| x as f64 / 1e3);
    let lat_p99 = quantile(&stats.preempt_latency_ns, 0.99).map_or(f64::NAN, |x| x as f64 / 1e3);
    let cpu_ok = cpu_pct < MAX_CPU_PERCENT;
    let q_ok = (q_med - 1.0).abs() <= MAX_QUANTUM_ERROR;
    let details = vec![
        format!(
            "scheduler CPU = {cpu_pct:.3}% of one core over {:.1} s (limit {MAX_CPU_PERCENT}%): {}",
            stats.wall_ns as f64 / 1e9,
            if cpu_ok { "ok" } else { "over" }
        ),
        format!(
            "median actual/requested quantum = {q_med:.3} (requested median {req_q:.2} ms, actual {act_q:.2} ms; limit ±{:.0}%): {}",
            MAX_QUANTUM_ERROR * 100.0,
            if q_ok { "ok" } else { "off" }
        ),
        format!(
            "median actual/requested off-time = {:.3} (requested {req_off:.2} ms, actual {act_off:.2} ms)",
            median(&off).unwrap_or(f64::NAN)
        ),
        format!(
            "preemption latency (decision to thread stopped): p50 {lat_p50:.1} µs, p99 {lat_p99:.1} µs over {} preemptions",
            stats.preempt_latency_ns.len()
        ),
        format!(
            "real-time priority (SCHED_FIFO) granted: {}",
            if stats.realtime { "yes" } else { "no" }
        ),
        format!(
            "same seed -> same planned schedule: {} ({n} rounds compared)",
            if same_seed_same_schedule { "yes" } else { "no" }
        ),
    ];
    let status = if cpu_ok && q_ok && same_seed_same_schedule {
        Status::Holds
    } else {
        Status::DoesNotHold
    };
    let bars = vec![
        ("requested quantum (ms)".to_string(), req_q),
        ("actual quantum (ms)".to_string(), act_q),
        ("requested off-time (ms)".to_string(), req_off),
        ("actual off-time (ms)".to_string(), act_off),
        ("latency p99 (µs/100)".to_string(), lat_p99 / 100.0),
        ("scheduler CPU (%)".to_string(), cpu_pct),
    ];
    let svg = bar_chart(
        "sched-overhead: the pseudo-scheduler's schedule and cost (medians)",
        "value",
        &bars,
    );
    let points = vec![
        Point {
            panel: None,
            implementation: "quantum actual/requested".into(),
            x: mp,
            value: q_med,
            normalized: q_med,
        },
        Point {
            panel: None,
            implementation: "scheduler CPU %".into(),
            x: mp,
            value: cpu_pct,
            normalized: cpu_pct,
        },
    ];
    let rec = RunRecord {
        advice: Vec::new(),
        experiment: exp.id.into(),
        paper: exp.reference.into(),
        title: exp.title.into(),
        preempt: "emulated".into(),
        started_unix: crate::unix_now(),
        duration_s: started.elapsed().as_secs_f64(),
        machine: Machine::detect(),
        params: serde_json::json!({ "common": p, "procs": procs, "mp": mp, "quantum_ms": quantum.as_secs_f64() * 1e3, "seconds": secs }),
        busy_iters_per_us: busy.iters_per_us(),
        unit: "ratio / percent".into(),
        x_label: "multiprogramming level".into(),
        baseline: "requested values".into(),
        trials: Vec::new(),
        points,
        extra: serde_json::json!({ "scheduler": summarize(&stats), "schedule_prefix": a.iter().take(8).map(|e| format!("{e:?}")).collect::<Vec<_>>() }),
        verdict: Verdict {
            clauses: Vec::new(),
            conclusion: format!(
                "the pseudo-scheduler costs under {MAX_CPU_PERCENT}% of one core, keeps the median quantum within {:.0}% of the requested one, and replays its schedule from the seed",
                MAX_QUANTUM_ERROR * 100.0
            ),
            status,
            details,
        },
    };
    Ok((rec, svg))
}
