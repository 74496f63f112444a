//! `wks94-mplevel` and `wks94-procs`: the synthetic lock program of Wisniewski,
//! Kontothanassis & Scott (IPPS 1994, papers/003 §4.1-4.3): each of P workers
//! loops {lock; ~15 µs critical section; unlock; ~210 µs non-critical section}
//! with small random variation; the number of iterations is proportional to the
//! number of workers; quantum 20 ms. Time is normalized to TAS-B at the same point.
//!
//! # `--match-contention`
//!
//! With P workers each looping {CS; NCS} and short waits, each holds the lock
//! CS of every CS + NCS, so the lock is busy
//!
//! ```text
//! u(P) = P × CS / (CS + NCS(P))        (lock utilisation, ≤ 1)
//! ```
//!
//! of the time. On a machine with fewer processors than the paper's the lock
//! is far less busy (wks94: 2 × 15 / 225 = 0.133 on 2 processors against
//! 11 × 15 / 225 = 0.733 on the paper's 11-processor SGI), and the
//! preemption of a lock holder or waiter costs the others less. The flag
//! (`wks94-mplevel`, `wks94-procs`, `wks95-mutex`, `wks95-rwlock`) solves
//! u(P) = u_paper for the non-critical section at each point:
//!
//! ```text
//! NCS' = P × CS / u_paper − CS,  u_paper = P_paper × CS / (CS + NCS(P_paper))
//! ```
//!
//! (at least 0), with P_paper 11 for paper 003 (the SGI of §4.2's Fig. 2; its
//! Fig. 4 goes up to the same 11) and 63 for paper 001 (the KSR 1 of Figs. 1
//! and 5). wks94 on 2 processors then runs NCS ≈ 25.9 µs instead of 210 µs;
//! paper 001's program already scales its NCS with the processors (120 µs ×
//! P), so there the change is small (240 → 225 µs for wks95-mutex on 2). The
//! verdict's notes say so, and the run's results go to
//! `OUT/<experiment>@<preempt>+matched/`, beside the plain run's, which the
//! report shows next to it. For the reader-writer program u counts every
//! section as exclusive (an upper bound: readers share).

use std::sync::Arc;
use std::time::{Duration, Instant};

use mpsync::util::busy::BusyWork;

use super::locks::{Censor, LockImpl, Origin, SyntheticSpec, select};
use super::{Experiment, Params};
use crate::env::{PointEnv, Preempt, summarize};
use crate::model::{self, Better, Cell, Clause, Design, Imp, Judged, Results, Verdicts, fmt_x};
use crate::output::{RunRecord, Trial};
use crate::stats::trimmed_mean;
use crate::svg::sig3;

/// The paper's conclusion, as a statement.
pub const CONCLUSION: &str = "plain and -np queued locks collapse as the multiprogramming level rises; \
Queued-Handshaking and Smart-Q do not; TAS-B-np is among the best";

/// "Among the best": within this factor of the fastest implementation.
pub const AMONG_THE_BEST: f64 = 1.10;

/// "Collapse": at least this many times slower than TAS-B-np.
pub const COLLAPSE: f64 = 1.5;

/// Loop iterations per worker at `--scale 1`.
pub const BASE_ITERS: f64 = 4000.0;

/// A run stops at this many times the time one worker's loop takes alone (a
/// collapsing FIFO lock under `--preempt os` would otherwise run for hours); its
/// time is then extrapolated from the fraction done and reported as censored.
pub const CAP_FACTOR: f64 = 25.0;
/// The cap is never shorter than this (seconds).
pub const CAP_MIN_S: f64 = 2.0;
/// ... nor, under `--quick`, than this: a collapsing lock is as recognizable
/// after 1 s as after 2, and the smoke run has many of them under `--preempt os`.
pub const QUICK_CAP_MIN_S: f64 = 1.0;

/// Extra factor on the iterations under `--quick`, on top of its `--scale 0.3`
/// (as ms97's): wks94 then runs 420 iterations per worker, ≈ 95 ms alone, and
/// at MP 2 about ten 20 ms quanta per processor; wks95 525, ≈ 134 ms alone and
/// five 50 ms quanta at MP 2. Keeps `repro all --quick` under its 10 minutes.
pub const QUICK_FACTOR: f64 = 0.35;

/// MP levels of the MP-level experiments under `--quick` (full runs: 1, 1.5, 2,
/// 2.5, 3). MP 2 is the most multiprogrammed point, where every clause is
/// judged; MP 1 is the dedicated reference. MP 3 only deepens a collapse that
/// MP 2 already shows, at half the run's time.
pub const QUICK_MP_LEVELS: [f64; 2] = [1.0, 2.0];

/// The points of a synthetic lock program: (processors, MP level) per x, in
/// order, and what preempts.
#[derive(Debug, Clone)]
pub struct Sweep {
    /// (processors, MP level) of each x.
    pub points: Vec<(u32, f64)>,
    /// Whether x is the processors (else the MP level).
    pub by_procs: bool,
    /// Where preemption comes from.
    pub preempt: Preempt,
}

impl Sweep {
    /// The x of a point.
    pub fn x(&self, (n, m): (u32, f64)) -> f64 {
        if self.by_procs { f64::from(n) } else { m }
    }

    /// The xs, in order.
    pub fn xs(&self) -> Vec<f64> {
        self.points.iter().map(|&q| self.x(q)).collect()
    }

    /// The MP level at `x`.
    pub fn mp_at(&self, x: f64) -> Option<f64> {
        self.points.iter().find(|&&q| self.x(q) == x).map(|q| q.1)
    }

    /// The x label.
    pub fn x_label(&self) -> &'static str {
        if self.by_procs {
            "processors"
        } else {
            "multiprogramming level"
        }
    }
}

/// A synthetic lock program: the papers' {lock; CS; unlock; non-CS} loop, its
/// sizes, the locks it compares and its verdict clauses.
#[derive(Debug, Clone, Copy)]
pub struct Program {
    /// Critical section, µs.
    pub cs_us: f64,
    /// Non-critical section, µs, given the number of processors.
    pub ncs_us: fn(u32) -> f64,
    /// The processors of the paper's machine (`--match-contention`).
    pub paper_procs: u32,
    /// Default quantum, ms.
    pub quantum_ms: f64,
    /// Loop iterations per worker at `--scale 1`.
    pub base_iters: f64,
    /// The paper's implementations (peers are always added).
    pub names: &'static [&'static str],
    /// Normalization baseline (at the same point).
    pub baseline: &'static str,
    /// Whether x is processors (else the MP level) — given the experiment and params.
    pub by_procs: fn(&Experiment, &Params) -> bool,
    /// The paper's conclusion, as a statement.
    pub conclusion: &'static str,
    /// The verdict clauses, given the sweep (none without multiprogramming).
    pub clauses: fn(&Sweep) -> Vec<Clause>,
    /// Locks whose time at the last MP level over the first is noted.
    pub observe: &'static [&'static str],
    /// The mpsync locks a `--quick` run measures (every peer is measured too, as
    /// the verdicts compare against the fastest): those the verdict and the
    /// observations name. A full run measures all of `names`.
    pub quick_names: &'static [&'static str],
}

/// The processors of paper 003's SGI Challenge in §4.2 (Fig. 2): 11.
pub const PAPER_PROCS: u32 = 11;

/// The lock's utilisation with `procs` workers looping {`cs_us`; `ncs_us`}:
/// `procs × cs / (cs + ncs)` (module docs).
pub fn lock_utilisation(procs: u32, cs_us: f64, ncs_us: f64) -> f64 {
    f64::from(procs) * cs_us / (cs_us + ncs_us)
}

/// The non-critical section (µs, at least 0) that gives `procs` workers with
/// `cs_us` sections the lock utilisation `u`.
pub fn matched_ncs_us(procs: u32, cs_us: f64, u: f64) -> f64 {
    (f64::from(procs) * cs_us / u - cs_us).max(0.0)
}

/// The non-critical sections of a lock program, plain or contention-matched
/// (`--match-contention`): the program's `ncs(P)`, or the one that makes the
/// lock as busy as on the paper's `paper_procs` processors.
#[derive(Debug, Clone, Copy)]
pub struct Contention {
    /// Critical section, µs.
    pub cs_us: f64,
    /// The program's non-critical section, µs, given the processors.
    pub ncs: fn(u32) -> f64,
    /// The processors of the paper's machine.
    pub paper_procs: u32,
    /// Whether `--match-contention` was given.
    pub matched: bool,
}

impl Contention {
    /// The lock's utilisation on the paper's machine.
    pub fn paper_utilisation(&self) -> f64 {
        lock_utilisation(self.paper_procs, self.cs_us, (self.ncs)(self.paper_procs))
    }

    /// The non-critical section a point at `procs` runs, µs.
    pub fn ncs_us(&self, procs: u32) -> f64 {
        if self.matched {
            matched_ncs_us(procs, self.cs_us, self.paper_utilisation())
        } else {
            (self.ncs)(procs)
        }
    }

    /// The verdict's note on a matched run at `procs` (one count per point;
    /// repeated counts said once): "contention-matched: NCS x µs instead of y
    /// µs (lock utilisation u as on the paper's P processors)". None unmatched.
    pub fn note(&self, procs: &[u32]) -> Option<String> {
        if !self.matched {
            return None;
        }
        let mut seen: Vec<u32> = procs.to_vec();
        seen.dedup();
        let each: Vec<String> = seen
            .iter()
            .map(|&n| {
                let at = if seen.len() > 1 {
                    format!(" at {n} processor{}", if n == 1 { "" } else { "s" })
                } else {
                    String::new()
                };
                format!(
                    "NCS {} µs instead of {} µs{at}",
                    sig3(self.ncs_us(n)),
                    sig3((self.ncs)(n))
                )
            })
            .collect();
        Some(format!(
            "contention-matched: {} (lock utilisation {} as on the paper's {} processors; {} unmatched on {})",
            each.join(", "),
            sig3(self.paper_utilisation()),
            self.paper_procs,
            sig3(lock_utilisation(
                seen[seen.len() - 1],
                self.cs_us,
                (self.ncs)(seen[seen.len() - 1])
            )),
            seen[seen.len() - 1]
        ))
    }
}

/// Paper 003's program (§4.1-4.3).
pub const WKS94: Program = Program {
    cs_us: 15.0,
    ncs_us: |_| 210.0,
    paper_procs: PAPER_PROCS,
    quantum_ms: 20.0,
    base_iters: BASE_ITERS,
    names: &[
        "TAS-B",
        "TAS-B-np",
        "Queued",
        "Queued-np",
        "Queued-Handshaking",
        "Smart-Q",
        "Native",
        "Native-np",
        "Ticket-np",
        "MCS-TP",
        "CLH-TP",
        "spin-then-park",
    ],
    baseline: "TAS-B",
    by_procs: |exp, _| exp.id == "wks94-procs",
    conclusion: CONCLUSION,
    clauses,
    observe: &[
        "TAS-B",
        "TAS-B-np",
        "Queued",
        "Queued-np",
        "Queued-Handshaking",
        "Smart-Q",
        "Native",
        "parking_lot::Mutex",
    ],
    quick_names: &[
        "TAS-B",
        "TAS-B-np",
        "Queued",
        "Queued-np",
        "Queued-Handshaking",
        "Smart-Q",
        "Native",
    ],
};

/// Runs either experiment.
pub fn run(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    run_program(exp, p, preempt, &WKS94)
}

/// The points of `prog` in `exp`: the MP levels at all processors, or the
/// processor counts at one MP level.
fn sweep(exp: &Experiment, p: &Params, preempt: Preempt, prog: &Program) -> Sweep {
    sweep_of(p, preempt, (prog.by_procs)(exp, p))
}

/// The points of an MP-level lock program: the processor counts of `--procs`
/// (default 1..=cores) at the first `--mp` level (default 2) when `by_procs`,
/// else the MP levels (default 1, 1.5, 2, 2.5, 3; `--quick` 1 and 2) at the
/// first `--procs` count (default all processors).
pub fn sweep_of(p: &Params, preempt: Preempt, by_procs: bool) -> Sweep {
    let points = if by_procs {
        let mp =
            p.mp.as_ref()
                .and_then(|v| v.first().copied())
                .unwrap_or(2.0);
        let procs = p.procs.clone().unwrap_or_else(|| (1..=p.cores).collect());
        procs.into_iter().map(|n| (n, mp)).collect()
    } else {
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
        mps.into_iter().map(|m| (procs, m)).collect()
    };
    Sweep {
        points,
        by_procs,
        preempt,
    }
}

/// The environment of the point a cell is at, held across cells: started
/// when the cell's (configuration, x) changes — the runner's rounds visit
/// every point once a round, so once a round and point, or once for an
/// experiment of one point — and its scheduler's statistics kept per start.
#[derive(Debug)]
pub struct PointEnvs {
    preempt: Preempt,
    quantum: Duration,
    seed: u64,
    at: Option<(usize, f64, u32)>,
    env: Option<PointEnv>,
    /// Per start: x, round, the scheduler's summary and (first round only)
    /// its planned schedule.
    pub sched: Vec<serde_json::Value>,
}

impl PointEnvs {
    /// None started yet.
    pub fn new(preempt: Preempt, quantum: Duration, seed: u64) -> Self {
        Self {
            preempt,
            quantum,
            seed,
            at: None,
            env: None,
            sched: Vec::new(),
        }
    }

    /// The environment of `c` (point number `index`), for `procs` workers
    /// at MP `mp`. Seeded by the seed, the point and the round, so that two
    /// runs with the same `--seed` plan the same schedules.
    pub fn at(
        &mut self,
        c: &Cell<'_>,
        index: usize,
        procs: u32,
        mp: f64,
    ) -> anyhow::Result<&PointEnv> {
        if self.at.is_none_or(|(pn, x, _)| (pn, x) != (c.panel, c.x)) || self.env.is_none() {
            self.close();
            let seed = self
                .seed
                .wrapping_add(index as u64)
                .wrapping_add(u64::from(c.trial) << 16);
            self.env = Some(PointEnv::start(
                self.preempt,
                procs,
                mp,
                self.quantum,
                seed,
            )?);
            self.at = Some((c.panel, c.x, c.trial));
        }
        self.env
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("no environment at {}", c.x))
    }

    /// Stops the environment started last and keeps its statistics.
    pub fn close(&mut self) {
        let (Some(env), Some((_, x, round))) = (self.env.take(), self.at) else {
            return;
        };
        // The planned schedule (a function of the seed), first rounds of each
        // vproc, of the first round only.
        let mut schedule: Vec<[u64; 4]> = env
            .schedule_log()
            .iter()
            .filter(|e| e.seq < 32 && round == 0)
            .map(|e| [u64::from(e.vproc), e.seq, e.run_ns, e.off_ns])
            .collect();
        schedule.sort_unstable();
        if let Some(s) = env.finish() {
            self.sched.push(serde_json::json!({
                "x": x,
                "round": round,
                "scheduler": summarize(&s),
                "schedule_first_rounds_vproc_seq_run_ns_off_ns": schedule,
            }));
        }
    }
}

/// What one trial of a synthetic lock program needs.
struct Runner<'a> {
    prog: &'a Program,
    contention: Contention,
    sweep: &'a Sweep,
    table: &'a [LockImpl],
    iters: u64,
    seed: u64,
    cap_min_s: f64,
    envs: PointEnvs,
    censored: Vec<String>,
}

impl Runner<'_> {
    fn spec(&self, procs: u32) -> SyntheticSpec {
        let busy = BusyWork::global();
        SyntheticSpec {
            iters: self.iters,
            cs_iters: busy.iters_for_ns((self.prog.cs_us * 1e3) as u64),
            ncs_iters: busy.iters_for_ns((self.contention.ncs_us(procs) * 1e3) as u64),
            seed: self.seed,
            cap: None,
        }
    }

    /// A run's time cap: CAP_FACTOR times what one worker's loop takes alone.
    fn cap(&self, procs: u32) -> Duration {
        let ideal_s = self.iters as f64 * (self.prog.cs_us + self.contention.ncs_us(procs)) * 1e-6;
        Duration::from_secs_f64((CAP_FACTOR * ideal_s).max(self.cap_min_s))
    }

    /// One trial: the run's time, extrapolated from the fraction done when
    /// it hit its cap (then censored).
    fn trial(&mut self, c: &Cell<'_>) -> anyhow::Result<Option<Trial>> {
        let (index, &(procs, mp)) = self
            .sweep
            .points
            .iter()
            .enumerate()
            .find(|(_, q)| self.sweep.x(**q) == c.x)
            .ok_or_else(|| anyhow::anyhow!("no point at {}", c.x))?;
        let imp = self
            .table
            .iter()
            .find(|i| i.name == c.imp.name)
            .ok_or_else(|| anyhow::anyhow!("no lock named {}", c.imp.name))?;
        let spec = self.spec(procs);
        let cap = Arc::new(Censor::new(self.cap(procs), spec.iters * u64::from(procs)));
        let body = (imp.synthetic)(&SyntheticSpec {
            seed: spec.seed ^ u64::from(c.trial),
            cap: Some(cap.clone()),
            ..spec
        });
        let o = self.envs.at(c, index, procs, mp)?.run(&*body)?;
        let done = cap.completed();
        let censored_at = (done < 1.0).then_some(done);
        if censored_at.is_some() {
            self.censored.push(format!(
                "{} at {} (trial {}: {:.0}% done in {:.1} s)",
                imp.name,
                fmt_x(c.x),
                c.trial,
                100.0 * done,
                o.wall.as_secs_f64()
            ));
        }
        Ok(Some(Trial {
            value: o.wall.as_secs_f64() / done.max(1e-9),
            censored_at,
            preemptions: o.preemptions,
            warnings: o.warnings,
            mp: Some(mp),
            procs: Some(procs),
            finish_spread: Some(o.finish_spread),
            ..Trial::default()
        }))
    }
}

/// mpsync's locks as ours, the peers as peers, all of kind "mutex".
pub fn mutex_imps(table: &[LockImpl]) -> Vec<Imp> {
    table
        .iter()
        .map(|i| match i.origin {
            Origin::Peer => Imp::peer(i.name, "mutex"),
            _ => Imp::ours(i.name, "mutex"),
        })
        .collect()
}

/// Runs a synthetic lock program over its points (MP levels or processor counts).
pub fn run_program(
    exp: &Experiment,
    p: &Params,
    preempt: Preempt,
    prog: &Program,
) -> anyhow::Result<(RunRecord, String)> {
    let sw = sweep(exp, p, preempt, prog);
    if sw.points.is_empty() {
        anyhow::bail!("no points to run");
    }
    let quantum = p.quantum(prog.quantum_ms);
    let quick_factor = if p.quick { QUICK_FACTOR } else { 1.0 };
    let table = select(if p.quick {
        prog.quick_names
    } else {
        prog.names
    });
    let d = Design::single(
        sw.x_label(),
        "seconds",
        Better::Lower,
        sw.xs(),
        mutex_imps(&table),
        p.trials,
    )
    .baseline(prog.baseline);
    let mut runner = Runner {
        prog,
        contention: Contention {
            cs_us: prog.cs_us,
            ncs: prog.ncs_us,
            paper_procs: prog.paper_procs,
            matched: p.match_contention,
        },
        sweep: &sw,
        table: &table,
        iters: ((prog.base_iters * p.scale * quick_factor).round() as u64).max(1),
        seed: p.seed,
        cap_min_s: if p.quick { QUICK_CAP_MIN_S } else { CAP_MIN_S },
        envs: PointEnvs::new(preempt, quantum, p.seed),
        censored: Vec::new(),
    };
    let started = Instant::now();
    let trials = model::collect(exp.id, &d, &mut |c| runner.trial(c))?;
    runner.envs.close();
    let spec = runner.spec(sw.points[0].0);
    let params = serde_json::json!({
        "points": sw.points.iter().map(|&(n, m)| serde_json::json!({"procs": n, "mp": m})).collect::<Vec<_>>(),
        "quantum_ms": quantum.as_secs_f64() * 1e3,
        "iterations_per_worker": spec.iters,
        "time_cap_s_per_point": sw.points.iter().map(|&(n, _)| runner.cap(n).as_secs_f64()).collect::<Vec<_>>(),
        "critical_section_us": prog.cs_us,
        "non_critical_us_per_point": sw.points.iter().map(|&(n, _)| runner.contention.ncs_us(n)).collect::<Vec<_>>(),
        "contention_matched": p.match_contention,
        "paper_lock_utilisation": runner.contention.paper_utilisation(),
        "jitter": 0.1,
        "cs_busy_iters": spec.cs_iters, "ncs_busy_iters_first_point": spec.ncs_iters,
        "implementations": table.iter().map(|i| i.name).collect::<Vec<_>>(),
    });
    let points = model::summarize(&d, &trials);
    let r = Results {
        design: &d,
        points: &points,
        trials: &trials,
    };
    let mut notes = method_notes(&runner.censored, runner.cap_min_s, preempt);
    let procs: Vec<u32> = sw.points.iter().map(|q| q.0).collect();
    notes.extend(runner.contention.note(&procs));
    notes.extend(observations(prog, &sw, &r));
    let v = Verdicts {
        conclusion: prog.conclusion.into(),
        clauses: program_clauses(prog, &sw),
        notes,
        ..Verdicts::default()
    };
    let (mut rec, svg) = model::finish(exp, p, preempt, &d, trials, v, params, started);
    rec.extra = serde_json::json!({ "scheduler_per_point": runner.envs.sched });
    Ok((rec, svg))
}

/// The clauses of `prog` on `sw`: none without multiprogramming (the
/// verdict is then a measurement).
pub fn program_clauses(prog: &Program, sw: &Sweep) -> Vec<Clause> {
    if sw.preempt == Preempt::None {
        Vec::new()
    } else {
        (prog.clauses)(sw)
    }
}

/// The method lines: the rules, censoring, and `--preempt none`.
fn method_notes(censored: &[String], cap_min_s: f64, preempt: Preempt) -> Vec<String> {
    let mut notes = Vec::new();
    if preempt == Preempt::None {
        notes
            .push("--preempt none: no multiprogramming, so the conclusion is not evaluated".into());
    }
    notes.push(format!(
        "rule: \"among the best\" = within {AMONG_THE_BEST:.2}x of the fastest implementation; \"collapse\" = at least {COLLAPSE:.1}x TAS-B-np's time at the most multiprogrammed point"
    ));
    if !censored.is_empty() {
        notes.push(format!(
            "censored: {} run(s) hit the time cap ({CAP_FACTOR}× one worker's solo time, at least {cap_min_s} s); their times are extrapolated from the fraction done: {}",
            censored.len(),
            censored.join("; ")
        ));
    }
    notes
}

/// Observations: time at the last MP level over the first, mpsync's 5×
/// target over plain Queued, TAS-B-np's noise, and fairness at the last point.
fn observations(prog: &Program, sw: &Sweep, r: &Results<'_>) -> Vec<String> {
    let mut notes = Vec::new();
    let xs = sw.xs();
    let (first, last) = (xs[0], r.last_x(0));
    let label = if sw.by_procs { "processors" } else { "MP" };
    if !sw.by_procs {
        for name in prog.observe {
            if let (Some(a), Some(b)) = (r.value(name, 0, first), r.value(name, 0, last)) {
                notes.push(format!(
                    "observation: {name} time at MP {} / MP {} = {:.2}",
                    fmt_x(last),
                    fmt_x(first),
                    b / a
                ));
            }
        }
    }
    // Not part of the paper's conclusion: mpsync's speed target for the
    // scheduler-conscious locks (each at least 5x faster than plain Queued).
    for q in [
        "Smart-Q",
        "Queued-Handshaking",
        "Ticket-np",
        "MCS-TP",
        "CLH-TP",
    ] {
        if let (Some(v), Some(plain)) = (r.value(q, 0, last), r.value("Queued", 0, last)) {
            let k = plain / v;
            notes.push(format!(
                "observation: {label} {}: Queued / {q} = {k:.2} (mpsync target >= 5: {})",
                fmt_x(last),
                if k >= 5.0 { "met" } else { "missed" }
            ));
        }
    }
    for &x in &xs {
        let v: Vec<f64> = r
            .trials
            .iter()
            .filter(|t| t.implementation == "TAS-B-np" && t.x == x)
            .map(|t| t.value)
            .collect();
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &y| (a.min(y), b.max(y)));
        if let Some(m) = trimmed_mean(&v).filter(|m| *m > 0.0 && v.len() > 1) {
            notes.push(format!(
                "noise: TAS-B-np trials at {} spread {:.0}% of their mean (min {lo:.3} s, max {hi:.3} s, {} trials)",
                fmt_x(x),
                100.0 * (hi - lo) / m,
                v.len()
            ));
        }
    }
    // Fairness at the last point: every worker does the same work, so an unfair
    // lock lets some finish well before the others.
    if sw.points.last().is_some_and(|q| q.0 >= 2) {
        let spreads: Vec<String> = r
            .design
            .imps
            .iter()
            .filter_map(|i| {
                let m = r.median_of(&i.name, 0, last, |t| t.finish_spread)?;
                Some(format!("{} {m:.2}", i.name))
            })
            .collect();
        notes.push(format!(
            "fairness at {}: median (last - first worker finish) / run time: {}",
            fmt_x(last),
            spreads.join(", ")
        ));
    }
    notes
}

/// " (censored: extrapolated)" when a trial of `names` at (0, `x`) hit its cap.
pub fn censored_mark(r: &Results<'_>, names: &[&str], x: f64) -> &'static str {
    crate::model::censored_mark(r, names, 0, x)
}

/// Judged when a clause lacks its values.
pub fn unmeasured(at: String, what: &str) -> Judged {
    Judged {
        at,
        ours: format!("not measured ({what})"),
        holds: None,
    }
}

/// 003's clauses: TAS-B-np among the best; Queued and Queued-np collapse;
/// Queued-Handshaking and Smart-Q do not.
pub fn clauses(sw: &Sweep) -> Vec<Clause> {
    let (best, bad, good) = if sw.by_procs {
        (
            "the best software lock with Native-np, unaffected by contention up to ~8 processors (Fig. 4, MP 2)",
            "perform very badly (Fig. 4, MP 2)",
            "Smart-Q degrades more slowly than the Queued locks (Fig. 4, MP 2)",
        )
    } else {
        (
            "the best results, with Native (Fig. 2, 11-processor SGI)",
            "much greater degradation than the other locks (Fig. 2)",
            "far better than the other Queued locks, and better than Native and TAS-B at MP ≥ 2 (Fig. 2)",
        )
    };
    vec![
        among_the_best("TAS-B-np", best, sw),
        collapse("Queued", true, bad, sw),
        collapse("Queued-np", true, bad, sw),
        collapse("Queued-Handshaking", false, good, sw),
        collapse("Smart-Q", false, good, sw),
    ]
}

/// "`name` is among the best at every multiprogrammed point" (within
/// [`AMONG_THE_BEST`] of the fastest implementation there); with no
/// multiprogrammed point, it does not hold.
fn among_the_best(name: &'static str, paper: &str, sw: &Sweep) -> Clause {
    let sw = sw.clone();
    Clause::new(
        format!("{name} is among the best (within {AMONG_THE_BEST}× of the fastest)"),
        Some(paper),
        move |r| {
            let at = "every multiprogrammed point".to_string();
            let mut each = Vec::new();
            let mut holds = true;
            for x in sw.xs().into_iter().filter(|&x| sw.by_procs || x > 1.0) {
                let (Some(v), Some((b, bv))) = (r.value(name, 0, x), r.best_of(&[], 0, x)) else {
                    continue;
                };
                holds &= v / bv <= AMONG_THE_BEST;
                each.push(format!(
                    "{} {} ({}){}",
                    fmt_x(x),
                    sig3(v / bv),
                    b.name,
                    censored_mark(r, &[name, &b.name], x)
                ));
            }
            if each.is_empty() {
                return Judged {
                    at,
                    ours: "no multiprogrammed point measured: use MP levels above 1".into(),
                    holds: Some(false),
                };
            }
            Judged {
                at,
                ours: format!("{name} / fastest: {}", each.join(", ")),
                holds: Some(holds),
            }
        },
    )
}

/// "`name` collapses" (or does not): at the most multiprogrammed point, at
/// least [`COLLAPSE`] × TAS-B-np's time. Needs a queue there: at least 2
/// processors at MP above 1 (else it does not hold).
fn collapse(name: &'static str, collapses: bool, paper: &str, sw: &Sweep) -> Clause {
    let eligible = sw.points.last().is_some_and(|&(n, m)| n >= 2 && m > 1.0);
    let word = if collapses {
        format!("collapses (≥ {COLLAPSE}× TAS-B-np's time)")
    } else {
        format!("does not collapse (< {COLLAPSE}× TAS-B-np's time)")
    };
    Clause::new(format!("{name} {word}"), Some(paper), move |r| {
        let x = r.last_x(0);
        let at = r.at(0, x);
        if !eligible {
            return Judged {
                at,
                ours:
                    "the queued-lock clauses need a point with at least 2 processors and MP above 1"
                        .into(),
                holds: Some(false),
            };
        }
        match (r.value(name, 0, x), r.value("TAS-B-np", 0, x)) {
            (Some(v), Some(np)) => {
                let q = v / np;
                let did = if q >= COLLAPSE {
                    "collapsed"
                } else {
                    "did not collapse"
                };
                Judged {
                    at,
                    ours: format!(
                        "{name} / TAS-B-np = {}{} ({did})",
                        sig3(q),
                        censored_mark(r, &[name, "TAS-B-np"], x)
                    ),
                    holds: Some((q >= COLLAPSE) == collapses),
                }
            }
            _ => unmeasured(at, &format!("{name} or TAS-B-np has no value")),
        }
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::output::{Point, Status, Verdict};

    /// `--match-contention`: paper 003's 11 SGI processors keep the lock
    /// 0.733 busy; 2 processors need NCS 25.9 µs for the same; a matched NCS
    /// gives back the paper's utilisation; unmatched runs the program's NCS.
    #[test]
    fn contention_matching_gives_the_papers_lock_utilisation() {
        let c = |matched| Contention {
            cs_us: WKS94.cs_us,
            ncs: WKS94.ncs_us,
            paper_procs: WKS94.paper_procs,
            matched,
        };
        assert_eq!(sig3(c(true).paper_utilisation()), "0.733");
        assert_eq!(sig3(c(true).ncs_us(2)), "25.9");
        assert_eq!(c(false).ncs_us(2), 210.0);
        for n in [1, 2, 4, 11] {
            let u = lock_utilisation(n, 15.0, c(true).ncs_us(n));
            assert!((u - c(true).paper_utilisation()).abs() < 1e-9, "{n}: {u}");
        }
        assert!((c(true).ncs_us(11) - 210.0).abs() < 1e-9);
        // Never negative: 1 worker cannot keep the lock busier than 1.
        assert_eq!(matched_ncs_us(1, 15.0, 2.0), 0.0);
        assert_eq!(
            c(true).note(&[2, 2]).unwrap(),
            "contention-matched: NCS 25.9 µs instead of 210 µs (lock utilisation 0.733 as on the paper's 11 processors; 0.133 unmatched on 2)"
        );
        assert!(
            c(true)
                .note(&[1, 2])
                .unwrap()
                .starts_with("contention-matched: NCS 5.45 µs instead of 210 µs at 1 processor, NCS 25.9 µs instead of 210 µs at 2 processors")
        );
        assert_eq!(c(false).note(&[2]), None);
        // Paper 001's program scales its NCS with the processors: little changes.
        let w = Contention {
            cs_us: crate::experiments::wks95::WKS95.cs_us,
            ncs: crate::experiments::wks95::WKS95.ncs_us,
            paper_procs: crate::experiments::wks95::PAPER_PROCS,
            matched: true,
        };
        assert_eq!(sig3(w.ncs_us(2)), "225");
    }

    pub(crate) fn pt(name: &str, x: f64, v: f64) -> Point {
        Point {
            panel: None,
            implementation: name.into(),
            x,
            value: v,
            normalized: v,
        }
    }

    /// The verdict of `clauses` on `pts` over `sw` (every name in `pts` an
    /// implementation).
    pub(crate) fn judge(clauses: &[Clause], sw: &Sweep, pts: &[Point]) -> Verdict {
        let mut names: Vec<&str> = pts.iter().map(|p| p.implementation.as_str()).collect();
        names.dedup();
        names.sort_unstable();
        names.dedup();
        let imps = names.iter().map(|n| Imp::ours(*n, "mutex")).collect();
        let d = Design::single(sw.x_label(), "s", Better::Lower, sw.xs(), imps, 1);
        let r = Results {
            design: &d,
            points: pts,
            trials: &[],
        };
        Verdict::from_clauses("c", clauses.iter().map(|c| c.judge(&r)).collect(), vec![])
    }

    fn verdict(pts: &[Point], setup: &[(u32, f64)]) -> Verdict {
        let sw = Sweep {
            points: setup.to_vec(),
            by_procs: false,
            preempt: Preempt::Emulated,
        };
        judge(&clauses(&sw), &sw, pts)
    }

    fn mp_points(np2: f64, queued2: f64) -> Vec<Point> {
        vec![
            pt("TAS-B-np", 1.0, 1.0),
            pt("TAS-B", 1.0, 1.0),
            pt("Queued", 1.0, 1.0),
            pt("Queued-np", 1.0, 1.0),
            pt("TAS-B-np", 2.0, np2),
            pt("TAS-B", 2.0, 3.0),
            pt("Native", 2.0, 2.0),
            pt("Queued", 2.0, queued2),
            pt("Queued-np", 2.0, queued2),
        ]
    }
    const SETUP: [(u32, f64); 2] = [(2, 1.0), (2, 2.0)];

    #[test]
    fn evaluable_clauses_holding_is_partly_evaluable() {
        let v = verdict(&mp_points(2.05, 5.0), &SETUP);
        assert_eq!(v.status, Status::PartlyEvaluable, "{v:?}");
        assert_eq!(v.clauses[1].ours, "Queued / TAS-B-np = 2.44 (collapsed)");
        assert_eq!(v.clauses[1].at, "multiprogramming level 2");
        assert_eq!(v.clauses[3].holds, None);
    }

    #[test]
    fn scheduler_conscious_queues_holding_makes_it_hold() {
        let mut pts = mp_points(2.05, 5.0);
        pts.push(pt("Queued-Handshaking", 2.0, 2.3));
        pts.push(pt("Smart-Q", 2.0, 2.1));
        let v = verdict(&pts, &SETUP);
        assert_eq!(v.status, Status::Holds, "{v:?}");
        assert_eq!(v.summary(), "5 of 5 clauses hold");
        let mut bad = mp_points(2.05, 5.0);
        bad.push(pt("Queued-Handshaking", 2.0, 2.3));
        bad.push(pt("Smart-Q", 2.0, 4.0));
        let v = verdict(&bad, &SETUP);
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
        assert_eq!(v.clauses[4].ours, "Smart-Q / TAS-B-np = 1.95 (collapsed)");
        assert_eq!(v.clauses[4].holds, Some(false));
        bad.retain(|p| p.implementation != "Queued-Handshaking");
        bad.push(pt("Queued-Handshaking", 2.0, 3.1));
        let v = verdict(&bad, &SETUP);
        assert_eq!(v.clauses[3].holds, Some(false), "{v:?}");
    }

    #[test]
    fn tas_b_np_far_behind_does_not_hold() {
        let v = verdict(&mp_points(3.0, 9.0), &SETUP);
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
        assert_eq!(v.clauses[0].holds, Some(false));
        assert!(
            v.clauses[0].ours.contains("2 1.50 (Native)"),
            "{:?}",
            v.clauses[0]
        );
    }

    #[test]
    fn queued_locks_that_do_not_collapse_do_not_hold() {
        let v = verdict(&mp_points(2.0, 2.2), &SETUP);
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
        assert_eq!(v.clauses[1].holds, Some(false));
        assert!(v.clauses[2].ours.contains("did not collapse"), "{v:?}");
    }

    #[test]
    fn one_processor_cannot_show_a_queue_collapse() {
        let pts = vec![pt("TAS-B-np", 2.0, 1.0), pt("Queued", 2.0, 1.0)];
        let v = verdict(&pts, &[(1, 2.0)]);
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
        assert!(v.clauses[1].ours.contains("at least 2 processors"), "{v:?}");
    }

    #[test]
    fn no_multiprogrammed_point_does_not_hold() {
        let pts = vec![pt("TAS-B-np", 1.0, 1.0), pt("Queued", 1.0, 1.0)];
        let v = verdict(&pts, &[(2, 1.0)]);
        assert!(
            v.clauses[0].ours.contains("no multiprogrammed point"),
            "{v:?}"
        );
        assert_eq!(v.status, Status::DoesNotHold);
    }

    #[test]
    fn no_multiprogramming_is_not_a_verdict() {
        let sw = Sweep {
            points: vec![(2, 1.0)],
            by_procs: false,
            preempt: Preempt::None,
        };
        let v = judge(
            &program_clauses(&WKS94, &sw),
            &sw,
            &[pt("TAS-B-np", 1.0, 1.0)],
        );
        assert_eq!(v.status, Status::Measurement);
    }

    #[test]
    fn points_are_normalized_to_the_baseline_at_the_same_x() {
        let d = Design::single(
            "MP",
            "s",
            Better::Lower,
            vec![1.0, 2.0],
            vec![Imp::ours("TAS-B", "mutex"), Imp::ours("X", "mutex")],
            1,
        )
        .baseline("TAS-B");
        let t = |i: &str, x: f64, v: f64| Trial {
            implementation: i.into(),
            x,
            value: v,
            ..Trial::default()
        };
        let trials = vec![
            t("TAS-B", 1.0, 2.0),
            t("TAS-B", 2.0, 4.0),
            t("X", 1.0, 1.0),
            t("X", 2.0, 3.0),
        ];
        let n: Vec<f64> = model::summarize(&d, &trials)
            .iter()
            .map(|p| p.normalized)
            .collect();
        assert_eq!(n, [1.0, 0.5, 1.0, 0.75]);
    }
}
