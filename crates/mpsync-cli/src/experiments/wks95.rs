//! `wks95-mutex`: the lock program of Wisniewski, Kontothanassis & Scott, PPoPP
//! 1995 §4 (papers/001): 5000 iterations per worker, quantum 50 ms, and a
//! critical : non-critical work ratio inversely proportional to the number of
//! processors. The paper gives no absolute section lengths; mpsync uses a 15 µs
//! critical section (as its companion paper 003) and a non-critical section of
//! 120 µs × processors, so the lock is busy about the same fraction of the time
//! (≈ 1/8 per processor's share) at every processor count. Varies the MP level at
//! all processors, or — when `--procs` lists several counts — the processors at
//! the first `--mp` level (default 2).

use super::wks94::{AMONG_THE_BEST, Program, Sweep, censored_mark, run_program, unmeasured};
use super::{Experiment, Params};
use crate::env::Preempt;
use crate::model::{Clause, Judged, fmt_x};
use crate::output::RunRecord;
use crate::svg::sig3;

/// The paper's conclusion, as a statement.
pub const CONCLUSION: &str = "the scheduler-conscious ticket lock (Ticket-np) is more than 10x \
better than the plain ticket lock under multiprogramming, and the best software lock at most \
multiprogramming levels";

/// The processors of paper 001's KSR 1 in Figs. 1 and 5: 63.
pub const PAPER_PROCS: u32 = 63;

/// "More than an order of magnitude".
pub const ORDER_OF_MAGNITUDE: f64 = 10.0;

/// Paper 001's lock program.
pub const WKS95: Program = Program {
    cs_us: 15.0,
    ncs_us: |procs| 120.0 * f64::from(procs.max(1)),
    paper_procs: PAPER_PROCS,
    quantum_ms: 50.0,
    base_iters: 5000.0,
    names: &[
        "Ticket-np",
        "Ticket",
        "Smart-Q",
        "TAS-B-np",
        "TAS-B",
        "Native",
        "Native-np",
    ],
    baseline: "TAS-B",
    by_procs: |_, p| p.procs.as_ref().is_some_and(|v| v.len() > 1),
    conclusion: CONCLUSION,
    clauses,
    observe: &["Ticket-np", "Ticket", "Smart-Q", "TAS-B-np", "TAS-B"],
    quick_names: &[
        "Ticket-np",
        "Ticket",
        "Smart-Q",
        "TAS-B-np",
        "TAS-B",
        "Native",
    ],
};

/// Runs the experiment.
pub fn run(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    run_program(exp, p, preempt, &WKS95)
}

/// 001's clauses: Ticket / Ticket-np ≥ 10 at the most multiprogrammed point,
/// and Ticket-np within [`AMONG_THE_BEST`] of the fastest implementation
/// (peers included) at most multiprogrammed points.
pub fn clauses(sw: &Sweep) -> Vec<Clause> {
    let top_mp = sw.points.last().map_or(1.0, |q| q.1);
    let order = Clause::new(
        format!("Ticket / Ticket-np ≥ {ORDER_OF_MAGNITUDE}"),
        Some("more than an order of magnitude (Figs. 1–2, 63-processor KSR 1)"),
        move |r| {
            let x = r.last_x(0);
            let at = r.at(0, x);
            if top_mp <= 1.0 {
                return Judged {
                    at,
                    ours: "no multiprogrammed point measured: use MP levels above 1".into(),
                    holds: Some(false),
                };
            }
            match (r.value("Ticket", 0, x), r.value("Ticket-np", 0, x)) {
                (Some(plain), Some(np)) => Judged {
                    at,
                    ours: format!(
                        "Ticket / Ticket-np = {}{}",
                        sig3(plain / np),
                        censored_mark(r, &["Ticket", "Ticket-np"], x)
                    ),
                    holds: Some(plain / np >= ORDER_OF_MAGNITUDE),
                },
                _ => unmeasured(at, "Ticket and Ticket-np were not both measured"),
            }
        },
    );
    vec![order, best_at_most_points(sw)]
}

/// "Ticket-np is within [`AMONG_THE_BEST`] of the fastest at most
/// multiprogrammed points".
fn best_at_most_points(sw: &Sweep) -> Clause {
    let sw = sw.clone();
    Clause::new(
        format!("Ticket-np is within {AMONG_THE_BEST}× of the fastest lock at most points"),
        Some("the best software lock at almost all multiprogramming levels (Fig. 1)"),
        move |r| {
            let at = "the multiprogrammed points".to_string();
            let multi: Vec<f64> = sw
                .xs()
                .into_iter()
                .filter(|&x| sw.mp_at(x).is_some_and(|m| m > 1.0))
                .collect();
            if multi.is_empty() {
                return Judged {
                    at,
                    ours: "no multiprogrammed point measured: use MP levels above 1".into(),
                    holds: Some(false),
                };
            }
            let mut each = Vec::new();
            let mut best_at = 0;
            for &x in &multi {
                let (Some(np), Some((b, bv))) = (r.value("Ticket-np", 0, x), r.best_of(&[], 0, x))
                else {
                    continue;
                };
                best_at += usize::from(np / bv <= AMONG_THE_BEST);
                each.push(format!("{} {} ({})", fmt_x(x), sig3(np / bv), b.name));
            }
            if each.is_empty() {
                return unmeasured(at, "Ticket-np has no value");
            }
            Judged {
                at,
                ours: format!(
                    "Ticket-np / fastest: {}; the best at {best_at} of {}",
                    each.join(", "),
                    each.len()
                ),
                holds: Some(best_at * 2 > each.len()),
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::wks94::program_clauses;
    use crate::experiments::wks94::tests::{judge, pt};
    use crate::output::{Point, Status, Verdict};

    fn sweep(setup: &[(u32, f64)], preempt: Preempt) -> Sweep {
        Sweep {
            points: setup.to_vec(),
            by_procs: false,
            preempt,
        }
    }

    fn verdict(pts: &[Point], setup: &[(u32, f64)], preempt: Preempt) -> Verdict {
        let sw = sweep(setup, preempt);
        judge(&program_clauses(&WKS95, &sw), &sw, pts)
    }

    const SETUP: [(u32, f64); 3] = [(2, 1.0), (2, 2.0), (2, 3.0)];

    fn pts(ticket3: f64, np2: f64, np3: f64) -> Vec<Point> {
        vec![
            pt("Ticket", 1.0, 1.0),
            pt("Ticket-np", 1.0, 1.1),
            pt("TAS-B-np", 2.0, 2.0),
            pt("Ticket", 2.0, 9.0),
            pt("Ticket-np", 2.0, np2),
            pt("TAS-B-np", 3.0, 3.0),
            pt("Ticket", 3.0, ticket3),
            pt("Ticket-np", 3.0, np3),
        ]
    }

    #[test]
    fn order_of_magnitude_and_best_holds() {
        let v = verdict(&pts(40.0, 2.0, 3.0), &SETUP, Preempt::Emulated);
        assert_eq!(v.status, Status::Holds, "{v:?}");
        assert_eq!(v.clauses[0].ours, "Ticket / Ticket-np = 13.3");
    }

    #[test]
    fn short_of_ten_times_does_not_hold() {
        let v = verdict(&pts(20.0, 2.0, 3.0), &SETUP, Preempt::Os);
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
        assert_eq!(v.clauses[0].holds, Some(false));
    }

    #[test]
    fn ticket_np_behind_at_most_points_does_not_hold() {
        let v = verdict(&pts(60.0, 3.0, 5.0), &SETUP, Preempt::Emulated);
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
        assert!(v.clauses[1].ours.ends_with("the best at 0 of 2"), "{v:?}");
    }

    #[test]
    fn missing_locks_are_partly_evaluable_and_none_is_a_measurement() {
        let only = vec![pt("Ticket-np", 2.0, 1.0), pt("TAS-B", 2.0, 2.0)];
        let v = verdict(&only, &[(2, 2.0)], Preempt::Emulated);
        assert_eq!(v.status, Status::PartlyEvaluable, "{v:?}");
        let v = verdict(&only, &[(2, 2.0)], Preempt::None);
        assert_eq!(v.status, Status::Measurement);
        let v = verdict(&only, &[(2, 1.0)], Preempt::Emulated);
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
    }
}
