//! `lock-latency`: uncontended lock+unlock time of every lock and peer, one
//! thread, beside the floor — a bare `swap`/`store` pair, the least any spin lock
//! can cost. Reported as ratios measured in the same process.

use std::time::Instant;

use super::locks::{Origin, floor_latency, mutex_table};
use super::{Experiment, Params};
use crate::env::Preempt;
use crate::model::{self, Better, Clause, Design, Imp, Judged, Role, Verdicts};
use crate::output::{RunRecord, Trial};
use crate::svg::sig3;

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

const FLOOR: &str = "floor: swap+store";

/// The design: every lock and peer once natively, the -np forms and their
/// bases once more under the emulated scheduler, and the floor.
fn design(p: &Params) -> Design {
    let table = mutex_table();
    let mut imps = vec![Imp::reference(FLOOR)];
    for i in &table {
        imps.push(match i.origin {
            Origin::Peer => Imp::peer(i.name, "mutex"),
            _ => Imp::ours(i.name, "mutex"),
        });
    }
    for i in table.iter().filter(|i| emulated_too(i.name)) {
        imps.push(Imp::reference(emulated_name(i.name)));
    }
    Design::single(
        "threads",
        "ns per lock+unlock pair",
        Better::Lower,
        vec![1.0],
        imps,
        p.trials,
    )
    .baseline(FLOOR)
}

/// Whether `lock` is measured under the emulated scheduler too.
fn emulated_too(lock: &str) -> bool {
    NP_PAIRS
        .iter()
        .any(|(np, base)| lock == *np || lock == *base)
}

/// The clauses: the lock-family targets (issue 13), each judged on the
/// means of the median trials.
fn clauses() -> Vec<Clause> {
    let mut c = vec![Clause::new(
        "target: the best mpsync lock ≤ 1.0× parking_lot::Mutex",
        None,
        |r| {
            let at = r.at(0, 1.0);
            let best = r.ranked(Role::Ours, Some("mutex"), 0, 1.0).first().copied();
            match (best, r.value("parking_lot::Mutex", 0, 1.0)) {
                (Some((i, v)), Some(pl)) => Judged {
                    at,
                    ours: format!(
                        "{} {} ns / {} ns = {}",
                        i.name,
                        sig3(v),
                        sig3(pl),
                        sig3(v / pl)
                    ),
                    holds: Some(v <= pl),
                },
                _ => Judged {
                    at,
                    ours: "not measured".into(),
                    holds: None,
                },
            }
        },
    )];
    for i in mutex_table()
        .iter()
        .filter(|i| i.spins && i.origin != Origin::Peer)
    {
        c.push(Clause::ratio_at_most(
            format!("target: {} ≤ 2× the floor", i.name),
            None,
            i.name,
            FLOOR,
            0,
            2.0,
        ));
    }
    for (np, base) in NP_PAIRS {
        c.push(Clause::ratio_at_most(
            format!("target: {np} ≤ {NP_TARGET}× {base}, natively"),
            None,
            np,
            base,
            0,
            NP_TARGET,
        ));
        c.push(Clause::ratio_at_most(
            format!("target: {np} ≤ {NP_TARGET}× {base}, under the emulated scheduler"),
            None,
            &emulated_name(np),
            &emulated_name(base),
            0,
            NP_TARGET,
        ));
    }
    c
}

/// Runs it.
pub fn run(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let iters = ((BASE_ITERS * p.scale).round() as u64).max(1000);
    let d = design(p);
    let table = mutex_table();
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
    let emu = mpsync::sched::emulated::Emulated::start(
        mpsync::sched::emulated::EmulatedConfig::new(1, 1.0)?.seed(p.seed),
    )?;
    let trials = std::thread::scope(|s| {
        s.spawn(|| -> anyhow::Result<Vec<Trial>> {
            mpsync::sched::native::pin_current_thread(cpu)?;
            model::collect(exp.id, &d, &mut |c| {
                let name = c.imp.name.as_str();
                let ns = if name == FLOOR {
                    floor_latency(iters)
                } else if let Some(i) = table.iter().find(|i| i.name == name) {
                    (i.latency)(iters)
                } else {
                    let i = table
                        .iter()
                        .find(|i| emulated_name(i.name) == name)
                        .ok_or_else(|| anyhow::anyhow!("no lock named {name}"))?;
                    let _attached = emu.attach(0)?;
                    (i.latency)(iters)
                };
                Ok(Some(Trial {
                    value: ns,
                    procs: Some(1),
                    ..Trial::default()
                }))
            })
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the measuring thread panicked"))?
    })?;
    let emu_stats = emu.stop();
    let mut notes = Vec::new();
    if emu_stats.preemptions + emu_stats.forced_preemptions > 0 {
        notes.push(format!(
            "the emulated rows were preempted {} times: they are not the request's cost alone",
            emu_stats.preemptions + emu_stats.forced_preemptions
        ));
    }
    let v = Verdicts {
        conclusion:
            "no paper conclusion: uncontended cost, against the lock-family targets (issue 13)"
                .into(),
        clauses: clauses(),
        notes,
        targets: true,
        advice: Vec::new(),
    };
    let params = serde_json::json!({ "pairs_per_trial": iters });
    Ok(model::finish(
        exp, p, preempt, &d, trials, v, params, started,
    ))
}
