//! `wks94-convoy`: where the papers' convoy went (issue 31 §6). The headline of
//! papers/003 Fig. 2–5 — plain queue locks many times slower at MP 2–3 on 11
//! and 63 processors — has not appeared on 2 cores, nor at 16 processors on a
//! lent machine. This experiment puts a discrete-event model of the synthetic
//! program ([`crate::convoy`]) beside measurements:
//!
//! - **validation** on this machine: the synthetic lock program measured under
//!   the emulated scheduler (TAS-B, TAS-B-np, Queued, Smart-Q) at this
//!   machine's processors, with the paper's sections (CS 15 µs, NCS 210 µs)
//!   and contention-matched (NCS shortened so the lock is as busy as on the
//!   paper's 11 processors), each beside the model's prediction of the same
//!   run;
//! - **prediction** where no machine is at hand: the model alone at 11
//!   processors (the SGI of Fig. 2), 16 (the lent machine), with the emulated
//!   scheduler's synchronized phases and with independent ones, and 63 (the
//!   KSR of Fig. 3, NCS shortened to the 11-processor SGI's lock utilisation,
//!   since the paper's KSR ratio is not given).
//!
//! Every time is normalized to TAS-B-np at the same point (the measured one in
//! the validation panels, the model's in the prediction panels).

use std::sync::Arc;
use std::time::{Duration, Instant};

use mpsync::util::busy::BusyWork;

use super::locks::{Censor, LockImpl, SyntheticSpec, select};
use super::wks94::{COLLAPSE, PointEnvs, QUICK_FACTOR, QUICK_MP_LEVELS, unmeasured};
use super::{Experiment, Params};
use crate::convoy::{self, Costs, Lock, Phase, Program};
use crate::env::Preempt;
use crate::model::{
    self, Better, Cell, Clause, Design, Imp, Judged, Panel, Results, Verdicts, fmt_x,
};
use crate::output::{RunRecord, Trial};
use crate::svg::sig3;

/// The locks measured (and modelled) on this machine: the figure's panel
/// holds at most 8 lines.
pub const MEASURED: [&str; 4] = ["TAS-B", "TAS-B-np", "Queued", "Smart-Q"];
/// The normalization baseline.
pub const BASELINE: &str = "TAS-B-np";
/// Within this factor of the measurement, the model agrees with it.
pub const AGREE: f64 = 1.25;
/// The papers' SGI: the processors contention is matched to.
pub const SGI_PROCS: u32 = 11;
/// The papers' KSR.
pub const KSR_PROCS: u32 = 63;
/// The lent many-core machine of 2026-11-26.
pub const LENT_PROCS: u32 = 16;
/// The paper's critical section, µs.
const CS_US: f64 = Program::WKS94.cs_ns as f64 / 1e3;
/// The model stops a run at this many times one worker's time alone.
const MODEL_CAP: f64 = 100.0;

/// The name of `lock`'s model row.
fn model_name(lock: &str) -> String {
    format!("{lock} (model)")
}

/// What a panel is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// Measured and modelled on this machine, with this NCS (µs).
    Here { ncs_us: f64 },
    /// The model alone.
    Model {
        procs: u32,
        phase: Phase,
        ncs_us: f64,
    },
}

/// The experiment's panels, given this machine's processors.
fn panels(procs: u32) -> Vec<(String, Kind)> {
    let paper = Program::WKS94;
    let ncs = paper.ncs_ns as f64 / 1e3;
    let matched = |p: u32| paper.matched_ncs_ns(p, SGI_PROCS) as f64 / 1e3;
    vec![
        (
            format!("{procs} processors, NCS {ncs:.0} µs: measured and model"),
            Kind::Here { ncs_us: ncs },
        ),
        (
            format!(
                "{procs} processors, NCS {:.1} µs (lock as busy as on {SGI_PROCS}): measured and model",
                matched(procs)
            ),
            Kind::Here {
                ncs_us: matched(procs),
            },
        ),
        (
            format!("model: {SGI_PROCS} processors (Fig. 2's SGI), independent phases"),
            Kind::Model {
                procs: SGI_PROCS,
                phase: Phase::Independent,
                ncs_us: ncs,
            },
        ),
        (
            format!("model: {LENT_PROCS} processors, the emulation's synchronized phases"),
            Kind::Model {
                procs: LENT_PROCS,
                phase: Phase::Synchronized,
                ncs_us: ncs,
            },
        ),
        (
            format!("model: {LENT_PROCS} processors, independent phases"),
            Kind::Model {
                procs: LENT_PROCS,
                phase: Phase::Independent,
                ncs_us: ncs,
            },
        ),
        (
            format!(
                "model: {KSR_PROCS} processors (Fig. 3's KSR), NCS {:.1} µs, independent phases",
                matched(KSR_PROCS)
            ),
            Kind::Model {
                procs: KSR_PROCS,
                phase: Phase::Independent,
                ncs_us: matched(KSR_PROCS),
            },
        ),
    ]
}

/// The MP levels.
fn mp_levels(p: &Params) -> Vec<f64> {
    p.mp.clone().unwrap_or_else(|| {
        if p.quick {
            QUICK_MP_LEVELS.to_vec()
        } else {
            vec![1.0, 1.5, 2.0, 2.5, 3.0]
        }
    })
}

/// One trial of either kind.
struct Runner {
    procs: u32,
    kinds: Vec<Kind>,
    table: Vec<LockImpl>,
    /// Iterations per worker of the measured program at NCS 210 µs.
    iters: u64,
    /// Iterations per worker of the model's runs.
    model_iters: u64,
    quantum: Duration,
    seed: u64,
    envs: PointEnvs,
    censored: Vec<String>,
}

impl Runner {
    /// The paper's program with this NCS.
    fn program(
        &self,
        procs: u32,
        mp: f64,
        ncs_us: f64,
        phase: Phase,
        iters: u64,
        trial: u32,
    ) -> Program {
        Program {
            procs,
            mp,
            quantum_ns: self.quantum.as_nanos() as u64,
            ncs_ns: (ncs_us * 1e3) as u64,
            iters,
            phase,
            seed: self.seed ^ (u64::from(trial) << 32) ^ u64::from(procs),
            cap_factor: MODEL_CAP,
            ..Program::WKS94
        }
    }

    /// Iterations that keep one worker's time alone at the paper NCS's.
    fn iters_at(&self, ncs_us: f64) -> u64 {
        let paper = Program::WKS94;
        let per = (paper.cs_ns + paper.ncs_ns) as f64 / 1e3;
        ((self.iters as f64 * per / (CS_US + ncs_us)).round() as u64).max(1)
    }

    fn trial(&mut self, c: &Cell<'_>) -> anyhow::Result<Option<Trial>> {
        let kind = self.kinds[c.panel];
        let mp = c.x;
        let name = c.imp.name.as_str();
        match kind {
            Kind::Here { ncs_us } => {
                if let Some(lock) = name.strip_suffix(" (model)") {
                    let lock =
                        Lock::named(lock).ok_or_else(|| anyhow::anyhow!("no model of {lock}"))?;
                    let prog = self.program(
                        self.procs,
                        mp,
                        ncs_us,
                        Phase::Synchronized,
                        self.iters_at(ncs_us),
                        c.trial,
                    );
                    return Ok(Some(modelled(&prog, lock)));
                }
                if !MEASURED.contains(&name) {
                    return Ok(None);
                }
                self.measure(c, ncs_us).map(Some)
            }
            Kind::Model {
                procs,
                phase,
                ncs_us,
            } => {
                let Some(lock) = name.strip_suffix(" (model)").and_then(Lock::named) else {
                    return Ok(None);
                };
                let prog = self.program(procs, mp, ncs_us, phase, self.model_iters, c.trial);
                Ok(Some(modelled(&prog, lock)))
            }
        }
    }

    /// The synthetic program with `c`'s lock under the emulated scheduler.
    fn measure(&mut self, c: &Cell<'_>, ncs_us: f64) -> anyhow::Result<Trial> {
        let imp = self
            .table
            .iter()
            .find(|i| i.name == c.imp.name)
            .ok_or_else(|| anyhow::anyhow!("no lock named {}", c.imp.name))?;
        let busy = BusyWork::global();
        let iters = self.iters_at(ncs_us);
        let solo_s = iters as f64 * (CS_US + ncs_us) * 1e-6;
        let cap = Arc::new(Censor::new(
            Duration::from_secs_f64((MODEL_CAP * solo_s).clamp(1.0, 60.0)),
            iters * u64::from(self.procs),
        ));
        let body = (imp.synthetic)(&SyntheticSpec {
            iters,
            cs_iters: busy.iters_for_ns(Program::WKS94.cs_ns),
            ncs_iters: busy.iters_for_ns((ncs_us * 1e3) as u64),
            seed: self.seed ^ u64::from(c.trial),
            cap: Some(cap.clone()),
        });
        let index = c.panel * 100 + (c.x * 10.0) as usize;
        let o = self.envs.at(c, index, self.procs, c.x)?.run(&*body)?;
        let done = cap.completed();
        let censored_at = (done < 1.0).then_some(done);
        if censored_at.is_some() {
            self.censored.push(format!(
                "{} at MP {} (panel {}, trial {}: {:.0}% done)",
                imp.name,
                fmt_x(c.x),
                c.panel,
                c.trial,
                100.0 * done
            ));
        }
        Ok(Trial {
            value: o.wall.as_secs_f64() / done.max(1e-9),
            censored_at,
            preemptions: o.preemptions,
            warnings: o.warnings,
            mp: Some(c.x),
            procs: Some(self.procs),
            ..Trial::default()
        })
    }
}

/// The model's trial: its time in seconds, censored where it hit its cap.
fn modelled(prog: &Program, lock: Lock) -> Trial {
    let o = convoy::simulate(prog, lock, &Costs::default());
    let total = prog.iters * u64::from(prog.procs);
    Trial {
        value: o.time_ns as f64 / 1e9,
        censored_at: (!o.completed).then(|| o.acquisitions as f64 / total.max(1) as f64),
        mp: Some(prog.mp),
        procs: Some(prog.procs),
        ..Trial::default()
    }
}

/// Runs the experiment.
pub fn run(exp: &Experiment, p: &Params, _preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let procs = p.first_procs();
    let mps = mp_levels(p);
    if mps.iter().any(|&m| m < 1.0) {
        anyhow::bail!("--mp: every level must be at least 1 (1 = one worker per processor)");
    }
    let quantum = p.quantum(super::wks94::WKS94.quantum_ms);
    let named = panels(procs);
    let mut imps: Vec<Imp> = MEASURED.iter().map(|n| Imp::reference(*n)).collect();
    imps.extend(
        Lock::ALL
            .iter()
            .map(|l| Imp::reference(model_name(l.name()))),
    );
    let mut d = Design::single(
        "multiprogramming level",
        "seconds",
        Better::Lower,
        mps.clone(),
        imps,
        p.trials,
    )
    .baseline(BASELINE);
    d.panels = named
        .iter()
        .map(|(label, kind)| {
            let mut pn = Panel::new(label.clone(), mps.clone());
            if matches!(kind, Kind::Model { .. }) {
                pn.baseline = Some(model_name(BASELINE));
            }
            pn
        })
        .collect();
    let quick_factor = if p.quick { QUICK_FACTOR } else { 1.0 };
    let mut runner = Runner {
        procs,
        kinds: named.iter().map(|(_, k)| *k).collect(),
        table: select(&MEASURED)
            .into_iter()
            .filter(|i| MEASURED.contains(&i.name))
            .collect(),
        iters: ((super::wks94::BASE_ITERS * p.scale * quick_factor).round() as u64).max(1),
        model_iters: ((super::wks94::BASE_ITERS * p.scale).round() as u64).max(1),
        quantum,
        seed: p.seed,
        envs: PointEnvs::new(Preempt::Emulated, quantum, p.seed),
        censored: Vec::new(),
    };
    let started = Instant::now();
    let trials = model::collect(exp.id, &d, &mut |c| runner.trial(c))?;
    runner.envs.close();
    let costs = Costs::default();
    let params = serde_json::json!({
        "processors_measured": procs,
        "mp_levels": mps,
        "quantum_ms": quantum.as_secs_f64() * 1e3,
        "critical_section_us": CS_US,
        "panels": named.iter().map(|(l, k)| serde_json::json!({"label": l, "kind": format!("{k:?}")})).collect::<Vec<_>>(),
        "iterations_per_worker_measured_at_ncs_210us": runner.iters,
        "iterations_per_worker_model": runner.model_iters,
        "model_costs_ns": {
            "handoff": costs.handoff_ns, "tas_notice_mean": costs.tas_notice_ns,
            "smart_q_skip": costs.skip_ns, "handshake_skip": costs.handshake_ns,
        },
        "model_cap_factor": MODEL_CAP,
        "agreement_factor": AGREE,
    });
    let points = model::summarize(&d, &trials);
    let r = Results::new(&d, &points, &trials);
    let mut notes = vec![
        format!(
            "method: the model ({}) simulates the same program: one worker per processor, each processor round-robin between its worker and m − 1 other applications (quantum ±10%), sections ±10%; the validation panels model the emulated scheduler's synchronized phases",
            "crates/mpsync-cli/src/convoy.rs"
        ),
        format!(
            "lock utilisation (processors × CS / (CS + NCS), all running): {}",
            named
                .iter()
                .map(|(l, k)| {
                    let (n, ncs) = match *k {
                        Kind::Here { ncs_us } => (procs, ncs_us),
                        Kind::Model { procs, ncs_us, .. } => (procs, ncs_us),
                    };
                    let prog = Program {
                        procs: n,
                        ncs_ns: (ncs * 1e3) as u64,
                        ..Program::WKS94
                    };
                    format!("{} {:.2}", short(l), prog.utilisation())
                })
                .collect::<Vec<_>>()
                .join("; ")
        ),
        "a queue convoy needs waiters queued behind a preempted one: at least 3 processors and a busy lock; with 2 processors at most one worker waits".into(),
    ];
    if !runner.censored.is_empty() {
        notes.push(format!(
            "censored (measured runs past their cap, extrapolated): {}",
            runner.censored.join("; ")
        ));
    }
    notes.extend(prediction_notes(&r, &named));
    let v = Verdicts {
        conclusion: "mpsync's own: the discrete-event model agrees with this machine's measurements, and predicts the papers' convoy where the papers measured it".into(),
        clauses: clauses(&named),
        notes,
        ..Verdicts::default()
    };
    let (mut rec, svg) = model::finish(exp, p, Preempt::Emulated, &d, trials, v, params, started);
    rec.extra = serde_json::json!({ "scheduler_per_point": runner.envs.sched });
    Ok((rec, svg))
}

/// A panel's label up to its colon.
fn short(label: &str) -> &str {
    label.split(':').next().unwrap_or(label)
}

/// Per prediction panel, Queued / TAS-B-np at the last MP level.
fn prediction_notes(r: &Results<'_>, named: &[(String, Kind)]) -> Vec<String> {
    let mut notes = Vec::new();
    for (pn, (label, kind)) in named.iter().enumerate() {
        let Kind::Model { .. } = kind else { continue };
        let x = r.last_x(pn);
        let np = r.value(&model_name(BASELINE), pn, x);
        let each: Vec<String> = Lock::ALL
            .iter()
            .filter(|l| **l != Lock::TasBNp)
            .filter_map(|l| {
                let v = r.value(&model_name(l.name()), pn, x)?;
                let mark = model::censored_mark(r, &[&model_name(l.name())], pn, x);
                Some(format!("{} {}{mark}", l.name(), sig3(v / np?)))
            })
            .collect();
        notes.push(format!(
            "prediction, {label}, MP {}: / TAS-B-np: {}",
            fmt_x(x),
            each.join(", ")
        ));
    }
    notes
}

/// The clauses: the model agrees with the measurements here; it shows Fig.
/// 2's ordering at 11 processors; at 16 processors it predicts a convoy with
/// the emulation's own phases.
fn clauses(named: &[(String, Kind)]) -> Vec<Clause> {
    let here: Vec<usize> = named
        .iter()
        .enumerate()
        .filter(|(_, (_, k))| matches!(k, Kind::Here { .. }))
        .map(|(i, _)| i)
        .collect();
    let find = |procs: u32, phase: Phase| {
        named.iter().position(|(_, k)| {
            matches!(*k, Kind::Model { procs: n, phase: f, .. } if n == procs && f == phase)
        })
    };
    let sgi = find(SGI_PROCS, Phase::Independent);
    let lent = find(LENT_PROCS, Phase::Synchronized);
    vec![
        Clause::new(
            format!(
                "the model predicts every lock's measured slowdown over TAS-B-np here within {AGREE}×"
            ),
            None,
            move |r| agreement(r, &here),
        ),
        Clause::new(
            format!(
                "at {SGI_PROCS} processors the model shows Fig. 2's ordering: Queued and Queued-np collapse (≥ {COLLAPSE}× TAS-B-np), Queued-Handshaking and Smart-Q do not"
            ),
            Some(
                "Queued and Queued-np 'much greater degradation'; Handshaking and Smart-Q 'far better' (003 §4.2, Fig. 2)",
            ),
            move |r| ordering(r, sgi),
        ),
        Clause::new(
            format!(
                "at {LENT_PROCS} processors, with the emulated scheduler's phases, the model predicts a Queued convoy (≥ {COLLAPSE}× TAS-B-np)"
            ),
            Some(
                "Fig. 4: Queued and Queued-np 'perform very badly' at MP 2 as processors are added",
            ),
            move |r| convoy_at(r, lent),
        ),
    ]
}

/// Per validation point and lock, the model's slowdown over TAS-B-np
/// against the measured one (ratios cancel what a loaded machine adds to
/// every lock alike); the worst decides.
fn agreement(r: &Results<'_>, panels: &[usize]) -> Judged {
    let mut worst: Option<(f64, String)> = None;
    let mut n = 0;
    for &pn in panels {
        for &x in &r.design.panels[pn].xs {
            let (Some(m_np), Some(p_np)) = (
                r.value(BASELINE, pn, x),
                r.value(&model_name(BASELINE), pn, x),
            ) else {
                continue;
            };
            for lock in MEASURED.into_iter().filter(|l| *l != BASELINE) {
                let (Some(m), Some(p)) = (r.value(lock, pn, x), r.value(&model_name(lock), pn, x))
                else {
                    continue;
                };
                n += 1;
                let (measured, predicted) = (m / m_np, p / p_np);
                let off = (predicted / measured).max(measured / predicted);
                if worst.as_ref().is_none_or(|w| off > w.0) {
                    worst = Some((
                        off,
                        format!(
                            "{lock} / TAS-B-np at MP {} in panel {}: model {}, measured {}",
                            fmt_x(x),
                            pn + 1,
                            sig3(predicted),
                            sig3(measured)
                        ),
                    ));
                }
            }
        }
    }
    match worst {
        None => unmeasured(
            "the validation panels".into(),
            "no measured point with its model",
        ),
        Some((off, at)) => Judged {
            at: format!("{n} measured slowdowns"),
            ours: format!("worst: {at}"),
            holds: Some(off <= AGREE),
        },
    }
}

fn ordering(r: &Results<'_>, panel: Option<usize>) -> Judged {
    let Some(pn) = panel else {
        return unmeasured("11 processors".into(), "no such panel");
    };
    let x = r.last_x(pn);
    let at = format!("{} processors, MP {}", SGI_PROCS, fmt_x(x));
    if x <= 1.0 {
        return unmeasured(at, "no MP level above 1");
    }
    let Some(np) = r.value(&model_name(BASELINE), pn, x) else {
        return unmeasured(at, "no TAS-B-np prediction");
    };
    let mut holds = true;
    let mut each = Vec::new();
    for (lock, collapses) in [
        (Lock::Queued, true),
        (Lock::QueuedNp, true),
        (Lock::Handshaking, false),
        (Lock::SmartQ, false),
    ] {
        let Some(v) = r.value(&model_name(lock.name()), pn, x) else {
            return unmeasured(at, &format!("no {} prediction", lock.name()));
        };
        holds &= (v / np >= COLLAPSE) == collapses;
        each.push(format!("{} {}", lock.name(), sig3(v / np)));
    }
    Judged {
        at,
        ours: format!("model / TAS-B-np: {}", each.join(", ")),
        holds: Some(holds),
    }
}

fn convoy_at(r: &Results<'_>, panel: Option<usize>) -> Judged {
    let Some(pn) = panel else {
        return unmeasured("16 processors".into(), "no such panel");
    };
    let x = r.last_x(pn);
    let at = format!(
        "{LENT_PROCS} processors, synchronized phases, MP {}",
        fmt_x(x)
    );
    if x <= 1.0 {
        return unmeasured(at, "no MP level above 1");
    }
    match (
        r.value(&model_name("Queued"), pn, x),
        r.value(&model_name(BASELINE), pn, x),
    ) {
        (Some(q), Some(np)) => Judged {
            at,
            ours: format!(
                "model Queued / TAS-B-np = {}{} (a lent 16-core machine measured 1.27× in wks94-procs --quick, 2026-11-26: the emulation differs from the model there)",
                sig3(q / np),
                model::censored_mark(r, &[&model_name("Queued")], pn, x)
            ),
            holds: Some(q / np >= COLLAPSE),
        },
        _ => unmeasured(at, "no Queued or TAS-B-np prediction"),
    }
}
