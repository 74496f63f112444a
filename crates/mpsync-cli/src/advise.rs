//! "On this machine, use …": for each kind of structure, the implementation
//! the results recommend, from the experiments that measure it. The report's
//! summary and `mpsync advise` print the same rows, then Hart's decision
//! guidance beside what the `hart-*` runs measured ([`crate::hart_guide`]).

use std::path::{Path, PathBuf};

use crate::output::{Advice, RunRecord};

/// The kinds, in the order the summary lists them: (kind as the experiments
/// name it, as printed, the experiments that recommend one, best first).
pub const KINDS: [(&str, &str, &[&str]); 9] = [
    ("mutex", "mutex", &["lock-oversub"]),
    ("rwlock", "reader-writer lock", &["rwlock-oversub"]),
    ("map", "concurrent map", &["map-oversub"]),
    ("queue", "queue", &["ds-oversub"]),
    ("stack", "stack", &["ds-oversub"]),
    ("priority queue", "priority queue", &["ds-oversub"]),
    ("reclaimer", "memory reclamation", &["hart-queues-threads"]),
    ("barrier", "barrier", &["barrier-oversub"]),
    ("message claim", "message-queue claim", &["lc98-stress"]),
];

/// One row of the summary.
#[derive(Debug, Clone)]
pub struct Row {
    /// The kind, as printed.
    pub kind: &'static str,
    /// The experiments that would recommend one.
    pub sources: &'static [&'static str],
    /// The recommendation, the run it comes from (`<experiment>@<preempt>`),
    /// and whether that was a `--quick` smoke run.
    pub found: Option<(Advice, String, bool)>,
}

/// The rows for `runs`: per kind, the advice of the first source experiment
/// that has a run with advice of that kind.
pub fn rows(runs: &[(PathBuf, RunRecord)]) -> Vec<Row> {
    KINDS
        .iter()
        .map(|&(kind, label, sources)| {
            let found = sources.iter().find_map(|src| {
                runs.iter()
                    .filter(|(_, r)| r.experiment == *src)
                    .find_map(|(_, r)| {
                        r.advice.iter().find(|a| a.kind == kind).map(|a| {
                            (
                                a.clone(),
                                format!("{}@{}", r.experiment, r.preempt),
                                r.quick(),
                            )
                        })
                    })
            });
            Row {
                kind: label,
                sources,
                found,
            }
        })
        .collect()
}

/// What a recommendation costs where the measurement cannot show it: (kind,
/// implementation, caveat). The experiments measure busy threads; these are
/// the traps of idle or stopped ones.
const CAVEATS: [(&str, &str, &str); 2] = [
    (
        "reclaimer",
        "QSBR",
        "QSBR frees a node only after every registered thread announces a quiescent state: one idle \
         thread holding a handle holds back every node retired after it (hart-memory); where threads \
         idle, use EBR, or the handle-free form (`ds::Auto`), which announces for them",
    ),
    (
        "reclaimer",
        "EBR",
        "EBR is bounded only while no thread stops inside an operation: one preempted for long inside \
         a guard holds the epoch (hart-memory); hazard pointers bound the backlog even then",
    ),
];

/// The caveat that goes with recommending `best` for `kind`, if any.
pub fn caveat(kind: &str, best: &str) -> Option<&'static str> {
    CAVEATS
        .iter()
        .find(|(k, b, _)| *k == kind && *b == best)
        .map(|c| c.2)
}

/// The margins of `a`, as one phrase ("1.23× Smart-Q (runner-up); 1.10×
/// parking_lot::Mutex (best peer)").
pub fn margins(a: &Advice) -> String {
    let mut m = Vec::new();
    if let Some(r) = &a.over_runner_up {
        m.push(format!("{r} (runner-up)"));
    }
    if let Some(o) = &a.over_other_side
        && a.over_runner_up.as_ref() != Some(o)
    {
        m.push(format!("{o} (best of the other side)"));
    }
    if m.is_empty() {
        "the only one measured".into()
    } else {
        m.join("; ")
    }
}

/// The summary as terminal text.
pub fn text(rows: &[Row]) -> String {
    let mut lines = vec!["On this machine, use:".to_string()];
    let w = rows.iter().map(|r| r.kind.len()).max().unwrap_or(0);
    for r in rows {
        let line = match &r.found {
            Some((a, run, quick)) => format!(
                "  {:<w$}  {}: {} — {}, from {run}{}",
                r.kind,
                a.best,
                margins(a),
                a.at,
                if *quick { " (a --quick smoke run)" } else { "" }
            ),
            None => format!(
                "  {:<w$}  no result yet: run `mpsync run {}`",
                r.kind,
                r.sources.join("` or `mpsync run ")
            ),
        };
        lines.push(line);
        if let Some(c) = r
            .found
            .as_ref()
            .and_then(|(a, _, _)| caveat(&a.kind, &a.best))
        {
            lines.push(format!("  {:<w$}  but: {c}", ""));
        }
    }
    let missing: Vec<&str> = rows
        .iter()
        .filter(|r| r.found.is_none())
        .flat_map(|r| r.sources.iter().copied())
        .collect();
    if !missing.is_empty() {
        let mut m = missing;
        m.dedup();
        lines.push(format!("Missing experiments: {}.", m.join(", ")));
    }
    lines.join("\n")
}

/// `mpsync advise`: prints the summary of the results under `out`.
pub fn main(out: &Path) -> anyhow::Result<()> {
    if !out.is_dir() {
        anyhow::bail!(
            "no results folder {}: run `mpsync repro all --quick` first, or give --out the folder it wrote",
            out.display()
        );
    }
    let runs = crate::output::read_runs(out)?;
    println!("{}", text(&rows(&runs)));
    println!(
        "{}",
        crate::hart_guide::text(&crate::hart_guide::rows(&runs))
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn advice(kind: &str, best: &str) -> Advice {
        Advice {
            kind: kind.into(),
            best: best.into(),
            over_runner_up: Some("1.20× B".into()),
            over_other_side: Some("1.50× P".into()),
            at: "threads 8".into(),
        }
    }

    #[test]
    fn every_kind_has_a_row_and_missing_ones_name_their_experiment() {
        let rows = rows(&[]);
        assert_eq!(rows.len(), KINDS.len());
        let t = text(&rows);
        assert!(
            t.contains("no result yet: run `mpsync run lock-oversub`"),
            "{t}"
        );
        assert!(
            t.contains("Missing experiments: lock-oversub, rwlock-oversub"),
            "{t}"
        );
    }

    #[test]
    fn a_recommendation_names_its_margins_and_its_run() {
        let a = advice("mutex", "Smart-Q");
        assert_eq!(
            margins(&a),
            "1.20× B (runner-up); 1.50× P (best of the other side)"
        );
        let row = Row {
            kind: "mutex",
            sources: &["lock-oversub"],
            found: Some((a, "lock-oversub@none".into(), true)),
        };
        let t = text(&[row]);
        assert!(t.contains("Smart-Q: 1.20× B"), "{t}");
        assert!(
            t.contains("from lock-oversub@none (a --quick smoke run)"),
            "{t}"
        );
        assert!(!t.contains("Missing"), "{t}");
        assert!(!t.contains("but:"), "{t}");
    }

    #[test]
    fn recommending_qsbr_says_what_an_idle_thread_does() {
        let row = Row {
            kind: "memory reclamation",
            sources: &["hart-queues-threads"],
            found: Some((
                advice("reclaimer", "QSBR"),
                "hart-queues-threads@none".into(),
                false,
            )),
        };
        let t = text(&[row]);
        assert!(t.contains("but: QSBR frees a node only after"), "{t}");
        assert_eq!(caveat("reclaimer", "HP"), None);
        assert_eq!(caveat("mutex", "QSBR"), None);
    }
}
