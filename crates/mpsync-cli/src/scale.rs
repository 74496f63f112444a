//! `mpsync repro scale`: the oversubscription tables of locks, RW locks,
//! maps and structures at 1×, 2× and 4× the machine's cores in one call,
//! sized to finish within [`BUDGET_S`] (on 2 cores and on 16: every trial
//! runs for a fixed time, so the cores change the thread counts, not the
//! length), and one compact table of mpsync's best against the best peer.

use std::fmt::Write as _;

use crate::output::RunRecord;
use crate::svg::sig3;

/// The experiments it runs, in order.
pub const EXPERIMENTS: &[&str] = &[
    "lock-oversub",
    "rwlock-oversub",
    "map-oversub",
    "ds-oversub",
];

/// Threads per core at each column.
pub const MULTIPLES: [u32; 3] = [1, 2, 4];

/// The plan's time budget, in seconds (8 minutes).
pub const BUDGET_S: f64 = 480.0;

/// Seconds each experiment takes per thread count at `--quick` (3 trials,
/// `--scale 0.3`), with room: on a loaded 2-core machine they took 17, 4,
/// 9 and 9 (`repro scale`, 117 s in all). Trials are fixed-duration, so the
/// count of points, not the cores, sets the length.
pub const SECONDS_PER_COUNT: &[(&str, f64)] = &[
    ("lock-oversub", 25.0),
    ("rwlock-oversub", 10.0),
    ("map-oversub", 12.0),
    ("ds-oversub", 12.0),
];

/// What `repro scale` runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Thread counts: 1×, 2× and 4× the cores.
    pub threads: Vec<u32>,
    /// Trials per point.
    pub trials: u32,
    /// `--scale` (trial lengths).
    pub scale: f64,
}

impl Plan {
    /// The plan for `cores` cores, with `--trials`/`--scale` where given
    /// (else the `--quick` preset's 3 and 0.3).
    pub fn new(cores: u32, trials: Option<u32>, scale: Option<f64>) -> Self {
        Self {
            threads: threads_for(cores),
            trials: trials.unwrap_or(3),
            scale: scale.unwrap_or(0.3),
        }
    }

    /// Its length by [`SECONDS_PER_COUNT`], in seconds.
    pub fn estimate_s(&self) -> f64 {
        let per_run = f64::from(self.trials) / 3.0 * self.scale / 0.3;
        SECONDS_PER_COUNT
            .iter()
            .map(|(_, s)| s * self.threads.len() as f64 * per_run)
            .sum()
    }
}

/// 1×, 2× and 4× `cores` (at least one core).
pub fn threads_for(cores: u32) -> Vec<u32> {
    MULTIPLES.iter().map(|m| m * cores.max(1)).collect()
}

/// Names of `role` ("ours" or "peers") in a record's `params.roles`.
fn role_names<'a>(rec: &'a RunRecord, role: &str) -> Vec<&'a str> {
    rec.params["roles"][role]
        .as_array()
        .map(|v| v.iter().filter_map(|s| s.as_str()).collect())
        .unwrap_or_default()
}

/// The best of `names` in `rec` at (`panel`, `x`): name and value.
fn best<'a>(
    rec: &'a RunRecord,
    names: &[&str],
    panel: &Option<String>,
    x: f64,
    lower: bool,
) -> Option<(&'a str, f64)> {
    rec.points
        .iter()
        .filter(|p| &p.panel == panel && p.x == x && names.contains(&p.implementation.as_str()))
        .map(|p| (p.implementation.as_str(), p.value))
        .reduce(|a, b| {
            if (b.1 < a.1) == lower && b.1 != a.1 {
                b
            } else {
                a
            }
        })
}

/// The median per-thread fairness (min/max operations) of `name`'s trials
/// at (`panel`, `x`), where the experiment records it.
fn fairness(rec: &RunRecord, name: &str, panel: &Option<String>, x: f64) -> Option<f64> {
    let f: Vec<f64> = rec
        .trials
        .iter()
        .filter(|t| &t.panel == panel && t.x == x && t.implementation == name)
        .filter_map(|t| t.fairness_min_max)
        .collect();
    crate::stats::median(&f)
}

/// One cell of the table: mpsync's best over the best peer, and the two's
/// fairness where the experiment measures it (a structure or lock that
/// serves one thread wins throughput and is no use: the reader needs both).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cell {
    /// Best of ours / best peer (> 1: ours is better; time ratios inverted).
    pub ratio: f64,
    /// Median min/max per-thread operations of our best, and of the peer.
    pub fair: Option<(f64, f64)>,
}

/// One row per experiment and configuration: the best of mpsync's over the
/// best peer (> 1: mpsync's is better) at each thread count, and who those
/// were at the last.
pub fn rows(runs: &[RunRecord], threads: &[u32]) -> Vec<(String, Vec<Option<Cell>>, String)> {
    let mut out = Vec::new();
    for rec in runs {
        let (ours, peers) = (role_names(rec, "ours"), role_names(rec, "peers"));
        let lower = rec.params["better"].as_str() == Some("lower");
        let mut panels: Vec<Option<String>> = Vec::new();
        for p in &rec.points {
            if !panels.contains(&p.panel) {
                panels.push(p.panel.clone());
            }
        }
        for panel in &panels {
            let mut who = String::new();
            let cells: Vec<Option<Cell>> = threads
                .iter()
                .map(|&t| {
                    let x = f64::from(t);
                    let o = best(rec, &ours, panel, x, lower)?;
                    let q = best(rec, &peers, panel, x, lower)?;
                    who = format!("{} / {}", o.0, q.0);
                    let fair = fairness(rec, o.0, panel, x).zip(fairness(rec, q.0, panel, x));
                    let ratio = if lower { q.1 / o.1 } else { o.1 / q.1 };
                    Some(Cell { ratio, fair })
                })
                .collect();
            // A configuration run at none of these thread counts (one with
            // its own, as lock-oversub's burst on other core counts once
            // had) says nothing here: left out, not printed as dashes.
            if cells.iter().all(Option::is_none) {
                continue;
            }
            let label = match panel {
                Some(l) => format!("{} · {l}", rec.experiment),
                None => rec.experiment.clone(),
            };
            out.push((label, cells, who));
        }
    }
    out
}

/// A cell as printed: the ratio, then the fairness of ours/the peer.
fn cell_text(c: Option<Cell>) -> String {
    match c {
        None => "-".into(),
        Some(Cell { ratio, fair: None }) => sig3(ratio),
        Some(Cell {
            ratio,
            fair: Some((o, q)),
        }) => format!("{} f{:.2}/{:.2}", sig3(ratio), o, q),
    }
}

/// The table as printed (and written to `OUT/scale.txt`).
pub fn table(runs: &[RunRecord], cores: u32, plan: &Plan, wall_s: f64) -> String {
    let rows = rows(runs, &plan.threads);
    let w = rows.iter().map(|r| r.0.chars().count()).max().unwrap_or(10);
    let mut s = format!(
        "scale check on {cores} cores: threads {} ({} trials, --scale {}; {:.0} s)\n\
         each cell: mpsync's best / the best peer (> 1: mpsync's is better; time ratios inverted); \
         fA/B: min/max per-thread operations of that best of ours (A) and that peer (B), medians of the rounds, \
         where measured (1 = every thread served alike)\n",
        plan.threads
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(","),
        plan.trials,
        plan.scale,
        wall_s
    );
    let _ = write!(s, "{:<w$}", "experiment · configuration");
    for (m, t) in MULTIPLES.iter().zip(&plan.threads) {
        let _ = write!(s, "  {:>19}", format!("{m}x ({t})"));
    }
    let _ = writeln!(s, "  best ours / best peer (last column measured)");
    for (label, cells, who) in rows {
        let _ = write!(s, "{label:<w$}");
        for c in cells {
            let _ = write!(s, "  {:>19}", cell_text(c));
        }
        let _ = writeln!(s, "  {who}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::Point;

    #[test]
    fn thread_lists_are_one_two_and_four_per_core() {
        assert_eq!(threads_for(2), [2, 4, 8]);
        assert_eq!(threads_for(16), [16, 32, 64]);
        assert_eq!(threads_for(0), [1, 2, 4]);
        for cores in [2, 16] {
            let plan = Plan::new(cores, None, None);
            assert!(
                plan.estimate_s() <= BUDGET_S,
                "{cores} cores: {} s",
                plan.estimate_s()
            );
        }
        assert_eq!(
            SECONDS_PER_COUNT.iter().map(|e| e.0).collect::<Vec<_>>(),
            EXPERIMENTS
        );
        // Twice the trials doubles the estimate.
        let long = Plan::new(2, Some(6), None);
        assert!((long.estimate_s() - 2.0 * Plan::new(2, None, None).estimate_s()).abs() < 1e-9);
    }

    fn point(name: &str, x: f64, value: f64) -> Point {
        Point {
            implementation: name.into(),
            x,
            panel: Some("p".into()),
            value,
            normalized: value,
        }
    }

    #[test]
    fn the_table_divides_the_best_of_ours_by_the_best_peer() {
        let rec: RunRecord = serde_json::from_value(serde_json::json!({
            "experiment": "lock-oversub", "paper": "", "title": "", "preempt": "none",
            "started_unix": 0, "duration_s": 1.0,
            "machine": serde_json::to_value(crate::output::Machine::detect()).unwrap(),
            "params": {"roles": {"ours": ["A", "B"], "peers": ["P", "Q"]}, "better": "higher"},
            "busy_iters_per_us": 1.0, "unit": "ops/s", "x_label": "threads", "baseline": "P",
            "trials": [], "points": [], "extra": null,
            "verdict": {"conclusion": "", "status": "measurement", "details": [], "clauses": []},
            "advice": []
        }))
        .unwrap();
        let mut rec = rec;
        rec.points = vec![
            point("A", 2.0, 10.0),
            point("B", 2.0, 30.0),
            point("P", 2.0, 20.0),
            point("Q", 2.0, 15.0),
            point("A", 4.0, 10.0),
            point("P", 4.0, 40.0),
        ];
        let r = rows(std::slice::from_ref(&rec), &[2, 4, 8]);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].0, "lock-oversub · p");
        let ratios: Vec<Option<f64>> = r[0].1.iter().map(|c| c.map(|c| c.ratio)).collect();
        assert_eq!(ratios, [Some(1.5), Some(0.25), None]);
        assert!(r[0].1[0].unwrap().fair.is_none(), "no trials, no fairness");
        assert_eq!(r[0].2, "A / P");
        let t = table(&[rec], 2, &Plan::new(2, None, None), 1.0);
        assert!(t.contains("1.50") && t.contains("0.250"), "{t}");
    }

    #[test]
    fn cells_carry_the_fairness_and_rows_run_elsewhere_are_left_out() {
        let mut rec: RunRecord = serde_json::from_value(serde_json::json!({
            "experiment": "ds-oversub", "paper": "", "title": "", "preempt": "none",
            "started_unix": 0, "duration_s": 1.0,
            "machine": serde_json::to_value(crate::output::Machine::detect()).unwrap(),
            "params": {"roles": {"ours": ["A"], "peers": ["P"]}, "better": "higher"},
            "busy_iters_per_us": 1.0, "unit": "ops/s", "x_label": "threads", "baseline": "P",
            "trials": [], "points": [], "extra": null,
            "verdict": {"conclusion": "", "status": "measurement", "details": [], "clauses": []},
            "advice": []
        }))
        .unwrap();
        rec.points = vec![point("A", 2.0, 30.0), point("P", 2.0, 10.0)];
        // Another configuration, run only at 4 threads: not a row of [2].
        let mut other = point("A", 4.0, 1.0);
        other.panel = Some("elsewhere".into());
        rec.points.push(other);
        let trial = |name: &str, f: f64| crate::output::Trial {
            implementation: name.into(),
            x: 2.0,
            panel: Some("p".into()),
            fairness_min_max: Some(f),
            ..Default::default()
        };
        rec.trials = vec![
            trial("A", 0.9),
            trial("A", 0.1),
            trial("A", 0.5),
            trial("P", 0.2),
        ];
        let r = rows(std::slice::from_ref(&rec), &[2]);
        assert_eq!(r.len(), 1, "{r:?}");
        let c = r[0].1[0].unwrap();
        assert_eq!(c.ratio, 3.0);
        assert_eq!(c.fair, Some((0.5, 0.2)), "the median of the rounds");
        let t = table(&[rec], 2, &Plan::new(2, None, None), 1.0);
        assert!(t.contains("3.00 f0.50/0.20"), "{t}");
        assert!(!t.contains("elsewhere"), "{t}");
    }
}
