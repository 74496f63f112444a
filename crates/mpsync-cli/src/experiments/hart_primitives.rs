//! `hart-primitives`: Hart's Table 5.1 on this machine — what a full fence, a
//! write fence, an uncontended compare-and-swap and a spin lock's lock+unlock
//! cost, one thread pinned to one CPU, each timed over a loop of many. These
//! are the prices the reclamation schemes pay per operation (EBR a full fence
//! per enter, HP one per protected load, QSBR none), so they say how far
//! Hart's ratios between the schemes can carry over to this machine.
//!
//! What each row times, per iteration:
//! - **full fence**: `fence(SeqCst)` (x86-64: `mfence`);
//! - **write fence**: `fence(Release)` (x86-64 orders stores already: no
//!   instruction; a compiler barrier);
//! - **CAS**: a successful `compare_exchange` on a word only this thread
//!   touches (x86-64: `lock cmpxchg`, which is also a full fence);
//! - **lock + unlock**: mpsync's TAS spin lock taken and released, no
//!   contention (Hart's "combined cost of locking and unlocking a spinlock");
//! - and beside them the loop alone (**empty loop**), the floor every row
//!   includes.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::time::Instant;

use super::{Experiment, Params};
use crate::env::Preempt;
use crate::model::{self, Better, Clause, Design, Imp, Judged, Verdicts};
use crate::output::{RunRecord, Trial};
use crate::svg::sig3;

/// Iterations per trial at `--scale 1`.
pub const BASE_ITERS: f64 = 5_000_000.0;

const EMPTY: &str = "empty loop";
const FULL: &str = "full fence";
const WRITE: &str = "write fence";
const CAS: &str = "CAS";
const LOCK: &str = "lock + unlock";

/// Hart's Table 5.1, per row: (PowerPC G5 2.0 GHz, Xeon 2.8 GHz), ns.
const PAPER: [(&str, f64, f64); 4] = [
    (FULL, 86.0, 73.4),
    (WRITE, 13.0, 0.0),
    (CAS, 33.9, 78.6),
    (LOCK, 166.0, 141.0),
];

/// The design: the loop alone, then the four primitives.
fn design(p: &Params) -> Design {
    let mut imps = vec![Imp::reference(EMPTY)];
    imps.extend(PAPER.iter().map(|(n, _, _)| Imp::reference(*n)));
    Design::single(
        "threads",
        "ns per operation (the loop included)",
        Better::Lower,
        vec![1.0],
        imps,
        p.trials,
    )
}

/// ns per iteration of `op` over `iters` iterations.
fn time(iters: u64, mut op: impl FnMut()) -> f64 {
    for _ in 0..1000 {
        op();
    }
    let t0 = Instant::now();
    for _ in 0..iters {
        op();
    }
    t0.elapsed().as_nanos() as f64 / iters.max(1) as f64
}

/// One trial of the row `name`.
fn measure(name: &str, iters: u64) -> anyhow::Result<f64> {
    let word = AtomicU64::new(0);
    let lock = mpsync::lock::Mutex::<mpsync::lock::Tas, ()>::new(());
    Ok(match name {
        EMPTY => time(iters, || {
            black_box(&word);
        }),
        FULL => time(iters, || {
            black_box(&word);
            fence(Ordering::SeqCst);
        }),
        WRITE => time(iters, || {
            black_box(&word);
            fence(Ordering::Release);
        }),
        CAS => time(iters, || {
            let w = black_box(&word);
            // Relaxed load, SeqCst CAS: the CAS the schemes and locks use,
            // on a word nobody else touches (it always succeeds).
            let v = w.load(Ordering::Relaxed);
            let _ = w.compare_exchange(v, v + 1, Ordering::SeqCst, Ordering::Relaxed);
        }),
        LOCK => time(iters, || drop(black_box(&lock).lock())),
        other => anyhow::bail!("no primitive named {other}"),
    })
}

/// "The full fence costs at least a CAS and the write fence at most a tenth
/// of it" on x86-64 — Hart's IA-32 column, where stores are ordered and a CAS
/// is a full fence — and each row beside both of Hart's machines.
fn clauses() -> Vec<Clause> {
    let mut c = vec![Clause::new(
        "a write fence costs at most a tenth of a full fence (stores are ordered on x86)",
        Some("write fence 13 ns against 86 ns (PowerPC), 0 against 73.4 (IA-32)"),
        |r| ratio_clause(r, WRITE, FULL, |x| x <= 0.1),
    )];
    c.push(Clause::new(
        "lock + unlock costs more than a CAS (a lock is a CAS or swap, then a store)",
        Some("166 ns against 33.9 (PowerPC), 141 against 78.6 (IA-32)"),
        |r| ratio_clause(r, LOCK, CAS, |x| x > 1.0),
    ));
    for (name, ppc, ia32) in PAPER {
        c.push(Clause::new(
            format!("{name}: this machine beside Hart's"),
            Some(&format!(
                "{} ns (PowerPC), {} ns (IA-32)",
                sig3(ppc),
                sig3(ia32)
            )),
            move |r| {
                let at = r.at(0, 1.0);
                match (r.value(name, 0, 1.0), r.value(EMPTY, 0, 1.0)) {
                    (Some(v), Some(e)) => Judged {
                        at,
                        ours: format!(
                            "{} ns ({} ns over the empty loop)",
                            sig3(v),
                            sig3((v - e).max(0.0))
                        ),
                        holds: None,
                    },
                    _ => Judged {
                        at,
                        ours: "not measured".into(),
                        holds: None,
                    },
                }
            },
        ));
    }
    c
}

/// Judges `a`'s cost over `b`'s, each less the empty loop, by `ok`.
fn ratio_clause(r: &model::Results, a: &str, b: &str, ok: fn(f64) -> bool) -> Judged {
    let at = r.at(0, 1.0);
    let get = |n: &str| r.value(n, 0, 1.0);
    match (get(a), get(b), get(EMPTY)) {
        (Some(x), Some(y), Some(e)) => {
            let (x, y) = ((x - e).max(0.0), (y - e).max(0.0));
            let ratio = if y > 0.0 { x / y } else { f64::INFINITY };
            Judged {
                at,
                ours: format!(
                    "{a} {} ns, {b} {} ns over the empty loop: {}×",
                    sig3(x),
                    sig3(y),
                    sig3(ratio)
                ),
                holds: Some(ok(ratio)),
            }
        }
        _ => Judged {
            at,
            ours: "not measured".into(),
            holds: None,
        },
    }
}

/// Runs it.
pub fn run(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let iters = ((BASE_ITERS * p.scale).round() as u64).max(1000);
    let d = design(p);
    let started = Instant::now();
    let cpu = mpsync::sched::native::available_cpus()?
        .first()
        .copied()
        .unwrap_or(0);
    let trials = std::thread::scope(|s| {
        s.spawn(|| -> anyhow::Result<Vec<Trial>> {
            mpsync::sched::native::pin_current_thread(cpu)?;
            model::collect(exp.id, &d, &mut |c| {
                Ok(Some(Trial {
                    value: measure(&c.imp.name, iters)?,
                    procs: Some(1),
                    ..Trial::default()
                }))
            })
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the measuring thread panicked"))?
    })?;
    let v = Verdicts {
        conclusion: "Hart's Table 5.1 on this machine: the costs of a full fence, a write fence, a CAS and a spin lock's lock+unlock".into(),
        clauses: clauses(),
        notes: vec![format!(
            "each row times {iters} iterations of a loop on one pinned thread; the empty loop is the floor every row includes"
        )],
        targets: false,
        advice: Vec::new(),
    };
    let params = serde_json::json!({ "iterations_per_trial": iters });
    Ok(model::finish(
        exp, p, preempt, &d, trials, v, params, started,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_measured_and_costs_something() {
        for name in [EMPTY, FULL, WRITE, CAS, LOCK] {
            let ns = measure(name, 10_000).unwrap();
            assert!(ns.is_finite() && ns >= 0.0, "{name}: {ns}");
        }
        assert!(measure("nothing", 10).is_err());
    }

    #[test]
    fn the_design_has_the_floor_and_the_four_rows() {
        let p = Params {
            preempt: None,
            mp: None,
            procs: None,
            threads: None,
            quantum_ms: None,
            trials: 1,
            scale: 1.0,
            seed: 1,
            out: std::path::PathBuf::new(),
            quick: true,
            cores: 2,
            alloc: super::super::AllocMode::Magazines,
            match_contention: false,
        };
        let d = design(&p);
        let names: Vec<&str> = d.imps.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, [EMPTY, FULL, WRITE, CAS, LOCK]);
        assert_eq!(clauses().len(), 2 + PAPER.len());
    }
}
