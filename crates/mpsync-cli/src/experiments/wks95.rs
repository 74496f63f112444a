//! `wks95-mutex`: the lock program of Wisniewski, Kontothanassis & Scott, PPoPP
//! 1995 §4 (papers/001): 5000 iterations per worker, quantum 50 ms, and a
//! critical : non-critical work ratio inversely proportional to the number of
//! processors. The paper gives no absolute section lengths; mpsync uses a 15 µs
//! critical section (as its companion paper 003) and a non-critical section of
//! 120 µs × processors, so the lock is busy about the same fraction of the time
//! (≈ 1/8 per processor's share) at every processor count. Varies the MP level at
//! all processors, or — when `--procs` lists several counts — the processors at
//! the first `--mp` level (default 2).

use super::wks94::{AMONG_THE_BEST, Program, run_program};
use super::{Experiment, Params};
use crate::env::Preempt;
use crate::output::{Point, RunRecord, Status, Verdict};

/// The paper's conclusion, as a statement.
pub const CONCLUSION: &str = "the scheduler-conscious ticket lock (Ticket-np) is more than 10x \
better than the plain ticket lock under multiprogramming, and the best software lock at most \
multiprogramming levels";

/// "More than an order of magnitude".
pub const ORDER_OF_MAGNITUDE: f64 = 10.0;

/// Paper 001's lock program.
pub const WKS95: Program = Program {
    cs_us: 15.0,
    ncs_us: |procs| 120.0 * f64::from(procs.max(1)),
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
    verdict,
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

/// Evaluates 001's conclusion: Ticket / Ticket-np ≥ 10 at the most
/// multiprogrammed point, and Ticket-np within [`AMONG_THE_BEST`] of the fastest
/// implementation (peers included) at a majority of the multiprogrammed points.
pub fn verdict(
    points: &[Point],
    setup: &[(u32, f64)],
    by_procs: bool,
    preempt: Preempt,
) -> Verdict {
    let mut details = Vec::new();
    if preempt == Preempt::None {
        details
            .push("--preempt none: no multiprogramming, so the conclusion is not evaluated".into());
        return Verdict {
            clauses: Vec::new(),
            conclusion: CONCLUSION.into(),
            status: Status::Measurement,
            details,
        };
    }
    let xof = |&(n, m): &(u32, f64)| if by_procs { f64::from(n) } else { m };
    let at = |name: &str, x: f64| {
        points
            .iter()
            .find(|p| p.implementation == name && p.x == x)
            .map(|p| p.value)
    };
    let label = if by_procs { "processors" } else { "MP" };
    let multiprogrammed: Vec<&(u32, f64)> = setup.iter().filter(|(_, m)| *m > 1.0).collect();
    if multiprogrammed.is_empty() {
        details.push("no multiprogrammed point measured: use MP levels above 1".into());
        return Verdict {
            clauses: Vec::new(),
            conclusion: CONCLUSION.into(),
            status: Status::DoesNotHold,
            details,
        };
    }
    let mut holds = true;
    let mut missing = false;
    // Clause 1 at the most multiprogrammed point (the last when varying MP; the
    // most processors when varying processors).
    let target = multiprogrammed
        .iter()
        .max_by(|a, b| {
            if by_procs {
                a.0.cmp(&b.0)
            } else {
                a.1.total_cmp(&b.1)
            }
        })
        .copied();
    if let Some(t) = target {
        let x = xof(t);
        match (at("Ticket", x), at("Ticket-np", x)) {
            (Some(plain), Some(np)) => {
                let r = plain / np;
                let ok = r >= ORDER_OF_MAGNITUDE;
                holds &= ok;
                details.push(format!(
                    "{label} {x}: Ticket / Ticket-np = {r:.2} ({} the {ORDER_OF_MAGNITUDE:.0}x of the paper)",
                    if ok { "reaches" } else { "falls short of" }
                ));
            }
            _ => {
                missing = true;
                details.push("not evaluated: Ticket and Ticket-np were not both measured".into());
            }
        }
    }
    // Clause 2: best software lock at most multiprogrammed points.
    let mut best_at = 0;
    let mut counted = 0;
    for t in &multiprogrammed {
        let x = xof(t);
        let (Some(np), Some(best)) = (
            at("Ticket-np", x),
            points
                .iter()
                .filter(|p| p.x == x)
                .min_by(|a, b| a.value.total_cmp(&b.value)),
        ) else {
            continue;
        };
        counted += 1;
        let r = np / best.value;
        if r <= AMONG_THE_BEST {
            best_at += 1;
        }
        details.push(format!(
            "{label} {x}: Ticket-np / best ({}) = {r:.2}",
            best.implementation
        ));
    }
    if counted > 0 {
        let ok = best_at * 2 > counted;
        holds &= ok;
        details.push(format!(
            "Ticket-np within {AMONG_THE_BEST:.2}x of the best at {best_at} of {counted} multiprogrammed points ({})",
            if ok { "most" } else { "not most" }
        ));
    }
    Verdict {
        clauses: Vec::new(),
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
            panel: None,
            implementation: name.into(),
            x,
            value: v,
            normalized: v,
        }
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
        let v = verdict(&pts(40.0, 2.0, 3.0), &SETUP, false, Preempt::Emulated);
        assert_eq!(v.status, Status::Holds, "{v:?}");
        assert!(v.details.iter().any(|d| d.contains("= 13.33 (reaches")));
    }

    #[test]
    fn short_of_ten_times_does_not_hold() {
        let v = verdict(&pts(20.0, 2.0, 3.0), &SETUP, false, Preempt::Os);
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
        assert!(v.details.iter().any(|d| d.contains("falls short")));
    }

    #[test]
    fn ticket_np_behind_at_most_points_does_not_hold() {
        let v = verdict(&pts(60.0, 3.0, 5.0), &SETUP, false, Preempt::Emulated);
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
        assert!(v.details.iter().any(|d| d.contains("at 0 of 2")));
    }

    #[test]
    fn missing_locks_are_partly_evaluable_and_none_is_a_measurement() {
        let only = vec![pt("Ticket-np", 2.0, 1.0), pt("TAS-B", 2.0, 2.0)];
        let v = verdict(&only, &[(2, 2.0)], false, Preempt::Emulated);
        assert_eq!(v.status, Status::PartlyEvaluable, "{v:?}");
        let v = verdict(&only, &[(2, 2.0)], false, Preempt::None);
        assert_eq!(v.status, Status::Measurement);
    }
}
