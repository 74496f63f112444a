//! `lock-latency`: uncontended lock+unlock time of every lock and peer, one
//! thread, beside the floor — a bare `swap`/`store` pair, the least any spin lock
//! can cost. Reported as ratios measured in the same process.

use std::time::Instant;

use super::locks::{Origin, floor_latency, mutex_table};
use super::{Experiment, Params};
use crate::env::Preempt;
use crate::output::{Machine, Point, RunRecord, Status, Trial, Verdict};
use crate::stats::trimmed_mean;
use crate::svg::bar_chart;

/// Lock+unlock pairs per trial at `--scale 1`.
pub const BASE_ITERS: f64 = 2_000_000.0;

/// The no-preempt forms and the lock each one adds its request to, measured
/// a second time with the measuring thread attached to an emulated scheduler
/// (issue 13 §3: every -np form uncontended ≤ 1.3× its base lock).
pub const NP_PAIRS: [(&str, &str); 6] = [
    ("TAS-B-np", "TAS-B"),
    ("Native-np", "Native"),
    ("Queued-np", "Queued"),
    ("Queued-Handshaking", "Queued"),
    ("Smart-Q", "Queued"),
    ("Ticket-np", "Ticket"),
];

/// The target for an -np form over its base lock, uncontended.
const NP_TARGET: f64 = 1.3;

/// The name of `lock`'s row measured under the emulated scheduler.
fn emulated_name(lock: &str) -> String {
    format!("{lock} (emulated)")
}

/// Runs it.
pub fn run(exp: &Experiment, p: &Params, _preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let iters = ((BASE_ITERS * p.scale).round() as u64).max(1000);
    let table = mutex_table();
    let n_emulated = table
        .iter()
        .filter(|i| {
            NP_PAIRS
                .iter()
                .any(|(np, base)| i.name == *np || i.name == *base)
        })
        .count() as u64;
    let pb = crate::progress(
        u64::from(p.trials) * (table.len() as u64 + n_emulated + 1),
        exp.id,
    );
    let started = Instant::now();
    // Measure on a dedicated thread pinned to one CPU, so that migrations add no
    // noise and the caller's affinity is left alone.
    let cpu = mpsync::sched::native::available_cpus()?
        .first()
        .copied()
        .unwrap_or(0);
    // The -np forms and their bases once more under an emulated scheduler with
    // one processor and nothing else on it: it never preempts the measuring
    // thread, so the rows add only what a request and its release cost there.
    let emulated_rows: Vec<_> = table
        .iter()
        .filter(|i| {
            NP_PAIRS
                .iter()
                .any(|(np, base)| i.name == *np || i.name == *base)
        })
        .collect();
    let emu = mpsync::sched::emulated::Emulated::start(
        mpsync::sched::emulated::EmulatedConfig::new(1, 1.0)?.seed(p.seed),
    )?;
    let trials = std::thread::scope(|s| {
        s.spawn(|| -> anyhow::Result<Vec<Trial>> {
            mpsync::sched::native::pin_current_thread(cpu)?;
            let mut trials = Vec::new();
            for t in 0..p.trials {
                let mut row = |name: &str, ns: f64| {
                    trials.push(Trial {
                        implementation: name.into(),
                        x: 1.0,
                        trial: t,
                        value: ns,
                        procs: Some(1),
                        ..Trial::default()
                    });
                    pb.inc(1);
                };
                row("floor: swap+store", floor_latency(iters));
                for imp in &table {
                    row(imp.name, (imp.latency)(iters));
                }
                let _attached = emu.attach(0)?;
                for imp in &emulated_rows {
                    row(&emulated_name(imp.name), (imp.latency)(iters));
                }
            }
            Ok(trials)
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the measuring thread panicked"))?
    })?;
    let emu_stats = emu.stop();
    pb.finish_and_clear();
    let emulated_names: Vec<String> = emulated_rows
        .iter()
        .map(|i| emulated_name(i.name))
        .collect();
    let mut names = vec!["floor: swap+store"];
    names.extend(table.iter().map(|i| i.name));
    names.extend(emulated_names.iter().map(String::as_str));
    let floor = mean(&trials, "floor: swap+store").unwrap_or(1.0).max(1e-3);
    let points: Vec<Point> = names
        .iter()
        .filter_map(|n| {
            mean(&trials, n).map(|v| Point {
                implementation: (*n).into(),
                x: 1.0,
                value: v,
                normalized: v / floor,
            })
        })
        .collect();
    let at = |n: &str| {
        points
            .iter()
            .find(|p| p.implementation == n)
            .map(|p| p.value)
    };
    let mut details = Vec::new();
    let pl = at("parking_lot::Mutex");
    let best = table
        .iter()
        .filter(|i| i.origin != Origin::Peer)
        .filter_map(|i| at(i.name).map(|v| (i.name, v)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    if let (Some((name, v)), Some(pl)) = (best, pl) {
        details.push(format!(
            "best mpsync lock ({name}, {v:.1} ns) / parking_lot::Mutex ({pl:.1} ns) = {:.2} (target of the lock-family work: <= 1.0)",
            v / pl
        ));
    }
    for i in table.iter().filter(|i| i.spins && i.origin != Origin::Peer) {
        if let Some(v) = at(i.name) {
            details.push(format!(
                "{} / floor ({floor:.1} ns) = {:.2} (target: <= 2.0)",
                i.name,
                v / floor
            ));
        }
    }
    for (np, base) in NP_PAIRS {
        for (how, np_name, base_name) in [
            ("natively", np.to_string(), base.to_string()),
            (
                "under the emulated scheduler",
                emulated_name(np),
                emulated_name(base),
            ),
        ] {
            if let (Some(v), Some(b)) = (at(&np_name), at(&base_name)) {
                details.push(format!(
                    "{np} ({v:.1} ns) / {base} ({b:.1} ns) {how} = {:.2} (target: <= {NP_TARGET})",
                    v / b
                ));
            }
        }
    }
    if emu_stats.preemptions + emu_stats.forced_preemptions > 0 {
        details.push(format!(
            "the emulated rows were preempted {} times: they are not the request's cost alone",
            emu_stats.preemptions + emu_stats.forced_preemptions
        ));
    }
    let bars: Vec<(String, f64)> = points
        .iter()
        .map(|p| (p.implementation.clone(), p.value))
        .collect();
    let svg = bar_chart(
        "lock-latency: uncontended lock+unlock",
        "ns per lock+unlock pair (mean of median trials)",
        &bars,
    );
    let rec = RunRecord {
        experiment: exp.id.into(),
        paper: exp.reference.into(),
        title: exp.title.into(),
        preempt: "none".into(),
        started_unix: crate::unix_now(),
        duration_s: started.elapsed().as_secs_f64(),
        machine: Machine::detect(),
        params: serde_json::json!({ "common": p, "pairs_per_trial": iters }),
        busy_iters_per_us: mpsync::util::busy::BusyWork::global().iters_per_us(),
        unit: "ns per lock+unlock".into(),
        x_label: "threads".into(),
        baseline: "the swap+store floor".into(),
        trials,
        points,
        extra: serde_json::Value::Null,
        verdict: Verdict {
            conclusion:
                "no paper conclusion: uncontended cost, as ratios to parking_lot and to the floor"
                    .into(),
            status: Status::Measurement,
            details,
        },
    };
    Ok((rec, svg))
}

fn mean(trials: &[Trial], name: &str) -> Option<f64> {
    let v: Vec<f64> = trials
        .iter()
        .filter(|t| t.implementation == name)
        .map(|t| t.value)
        .collect();
    trimmed_mean(&v)
}
