//! Hart's decision guidance as data: which memory reclamation scheme (his
//! Fig. 5.20) and which hash table, lock-free (LF) or concurrently-readable
//! (CR) (his Fig. 5.21), for which workload — papers/002 §5.2.6 "Summary of
//! Recommendations". The figures are decision trees the text copy of the
//! thesis does not hold; their branches here are the conditions §5.2.6's text
//! names, in its order, each with Hart's own words:
//!
//! * Fig. 5.20: long traversals → QSBR or EBR ("SMR performs poorly when long
//!   chains of nodes must be traversed … traversal length seems to have the
//!   greater effect"); else CPU contention with an allocation-heavy workload →
//!   hazard pointers ("EBR and QSBR perform poorly when there is CPU contention
//!   and an allocation-heavy workload"); else QSBR ("QSBR has the lowest base
//!   overhead"), or EBR where the application cannot announce quiescent states
//!   ("EBR's only advantage over QSBR is that it is application-independent").
//! * Fig. 5.21: operations besides insert, delete and search → CR; else CPU
//!   contention → LF; else a significant update fraction (above 0.1, §5.2.5)
//!   with short traversals → LF; else CR.
//!
//! Each branch that a `hart-*` experiment measures names that experiment, the
//! point that matches the branch's workload and which implementations stand for
//! which choice; `mpsync advise` and the report print Hart's recommendation
//! beside the fastest of those on this machine, and whether they agree.

use std::path::PathBuf;

use crate::model::fmt_x;
use crate::output::RunRecord;

/// Which of Hart's decision trees a branch belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tree {
    /// Fig. 5.20: the memory reclamation scheme.
    Reclamation,
    /// Fig. 5.21: the lock-free or the concurrently-readable table.
    Table,
}

impl Tree {
    /// The figure, as cited.
    pub fn figure(self) -> &'static str {
        match self {
            Tree::Reclamation => "Fig. 5.20",
            Tree::Table => "Fig. 5.21",
        }
    }
}

/// Where this machine's answer to a branch is measured: a point of a run and
/// the implementations that stand for each choice (lower values are better:
/// every `hart-*` experiment measures time per operation).
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    /// The tree it answers.
    pub tree: Tree,
    /// The workload its point runs, as the tree asks about it: the branch it
    /// measures is the tree's answer for it ([`reclamation`], [`table`]).
    pub workload: Workload,
    /// The experiment.
    pub experiment: &'static str,
    /// Its configuration (panel label), if it has several.
    pub panel: Option<&'static str>,
    /// At its last x (the longest traversal, most threads, most updates);
    /// else its first.
    pub last: bool,
    /// (implementation, the choice it stands for).
    pub candidates: &'static [(&'static str, &'static str)],
}

/// One branch of a tree: the workload, Hart's recommendation in his words,
/// and where this machine measures it.
#[derive(Debug, Clone, Copy)]
pub struct Branch {
    /// Which tree.
    pub tree: Tree,
    /// The workload, in words.
    pub when: &'static str,
    /// The recommendation, as printed.
    pub recommend: &'static str,
    /// The choices that agree with it.
    pub agrees: &'static [&'static str],
    /// Hart's words (§5.2.5–5.2.6).
    pub hart: &'static str,
    /// Why no `hart-*` run measures it, where none does.
    pub unmeasured: &'static str,
}

const SCHEMES: &[(&str, &str)] = &[("QSBR", "QSBR"), ("EBR", "EBR"), ("HP", "HP")];
const LF_SCHEMES: &[(&str, &str)] = &[
    ("hash LF QSBR", "QSBR"),
    ("hash LF EBR", "EBR"),
    ("hash LF HP", "HP"),
];
const LF_OR_CR: &[(&str, &str)] = &[("hash LF QSBR", "LF"), ("hash CR QSBR", "CR")];

/// Fig. 5.20's branches, then Fig. 5.21's, in the trees' order.
pub static GUIDE: [Branch; 8] = [
    Branch {
        tree: Tree::Reclamation,
        when: "long traversals (high load factor)",
        recommend: "QSBR or EBR",
        agrees: &["QSBR", "EBR"],
        hart: "SMR performs poorly when long chains of nodes must be traversed ... traversal length seems to have the greater effect",
        unmeasured: "",
    },
    Branch {
        tree: Tree::Reclamation,
        when: "CPU contention and an allocation-heavy workload, short traversals",
        recommend: "HP",
        agrees: &["HP"],
        hart: "EBR and QSBR perform poorly when there is CPU contention and an allocation-heavy workload",
        unmeasured: "",
    },
    Branch {
        tree: Tree::Reclamation,
        when: "no CPU contention, short traversals",
        recommend: "QSBR",
        agrees: &["QSBR"],
        hart: "QSBR has the lowest base overhead, while EBR has the most",
        unmeasured: "",
    },
    Branch {
        tree: Tree::Reclamation,
        when: "the application cannot announce quiescent states",
        recommend: "EBR",
        agrees: &["EBR"],
        hart: "EBR's only advantage over QSBR is that it is application-independent; in some cases, this advantage may make EBR preferable",
        unmeasured: "a property of the program, not a speed",
    },
    Branch {
        tree: Tree::Table,
        when: "operations besides insert, delete and search",
        recommend: "CR",
        agrees: &["CR"],
        hart: "if operations other than insertions, deletions, and searches are required, it is likely to be easier to add them to the concurrently-readable list than the lock-free one",
        unmeasured: "a property of the program, not a speed",
    },
    Branch {
        tree: Tree::Table,
        when: "CPU contention",
        recommend: "LF",
        agrees: &["LF"],
        hart: "If there is CPU contention, we can expect the lock-free algorithm to perform much better",
        unmeasured: "no hart-* experiment runs the CR table beside LF with more threads than processors",
    },
    Branch {
        tree: Tree::Table,
        when: "no CPU contention, update fraction above 0.1, short traversals",
        recommend: "LF",
        agrees: &["LF"],
        hart: "the lock-free algorithm will perform better if the update fraction is significant, and the traversal length is not so long that the per-node traversal overhead becomes significant",
        unmeasured: "",
    },
    Branch {
        tree: Tree::Table,
        when: "no CPU contention, read-only or long traversals",
        recommend: "CR",
        agrees: &["CR"],
        hart: "the per-node overhead of the extra checks becomes significant for the original version of the lock-free algorithm",
        unmeasured: "",
    },
];

/// Where the `hart-*` experiments measure a branch of the trees.
pub static PROBES: [Probe; 5] = [
    // hart-loadfactor: one thread, read-only, at its highest load factor.
    Probe {
        tree: Tree::Reclamation,
        workload: Workload {
            long_traversals: true,
            ..Workload::NONE
        },
        experiment: "hart-loadfactor",
        panel: Some("read-only"),
        last: true,
        candidates: LF_SCHEMES,
    },
    // hart-queues-threads: every operation allocates or frees, at its most threads.
    Probe {
        tree: Tree::Reclamation,
        workload: Workload {
            cpu_contention: true,
            allocation_heavy: true,
            ..Workload::NONE
        },
        experiment: "hart-queues-threads",
        panel: None,
        last: true,
        candidates: SCHEMES,
    },
    // hart-base: one thread, one queue.
    Probe {
        tree: Tree::Reclamation,
        workload: Workload::NONE,
        experiment: "hart-base",
        panel: None,
        last: true,
        candidates: SCHEMES,
    },
    // hart-update-fraction: two threads on the cores, load factor 5, write-only.
    Probe {
        tree: Tree::Table,
        workload: Workload {
            update_fraction: 1.0,
            ..Workload::NONE
        },
        experiment: "hart-update-fraction",
        panel: None,
        last: true,
        candidates: LF_OR_CR,
    },
    // hart-fastread: two threads, read-only, at its highest load factor.
    Probe {
        tree: Tree::Table,
        workload: Workload {
            long_traversals: true,
            ..Workload::NONE
        },
        experiment: "hart-fastread",
        panel: Some("read-only"),
        last: true,
        candidates: LF_OR_CR,
    },
];

/// A workload, as Hart's trees ask about it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Workload {
    /// More runnable threads than processors.
    pub cpu_contention: bool,
    /// Operations traverse long chains of nodes (a high load factor).
    pub long_traversals: bool,
    /// Most operations allocate or free a node.
    pub allocation_heavy: bool,
    /// Fraction of operations that update (insert or delete).
    pub update_fraction: f64,
    /// Operations besides insert, delete and search are needed.
    pub other_operations: bool,
    /// The application cannot announce quiescent states.
    pub no_quiescent_states: bool,
}

impl Workload {
    /// No contention, short traversals, read-only, the plain operations.
    pub const NONE: Workload = Workload {
        cpu_contention: false,
        long_traversals: false,
        allocation_heavy: false,
        update_fraction: 0.0,
        other_operations: false,
        no_quiescent_states: false,
    };
}

/// The branch `p` measures: its tree's answer for its workload.
pub fn branch_of(p: &Probe) -> &'static Branch {
    match p.tree {
        Tree::Reclamation => reclamation(&p.workload),
        Tree::Table => table(&p.workload),
    }
}

/// "Significant", for the update fraction (§5.2.5: above 0.1).
pub const SIGNIFICANT_UPDATES: f64 = 0.1;

/// Fig. 5.20: the branch for `w`'s reclamation scheme.
pub fn reclamation(w: &Workload) -> &'static Branch {
    let i = if w.long_traversals {
        0
    } else if w.cpu_contention && w.allocation_heavy {
        1
    } else if w.no_quiescent_states {
        3
    } else {
        2
    };
    &GUIDE[i]
}

/// Fig. 5.21: the branch for `w`'s table.
pub fn table(w: &Workload) -> &'static Branch {
    let i = if w.other_operations {
        4
    } else if w.cpu_contention {
        5
    } else if w.update_fraction > SIGNIFICANT_UPDATES && !w.long_traversals {
        6
    } else {
        7
    };
    &GUIDE[i]
}

/// What this machine measured for a branch.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// The fastest choice there.
    pub choice: String,
    /// Its implementation and time, and the others', in words.
    pub detail: String,
    /// The run (`<experiment>@<preempt>`) and whether it was a smoke run.
    pub run: String,
    /// Whether it was a `--quick` smoke run.
    pub quick: bool,
}

/// One branch beside this machine's answer.
#[derive(Debug, Clone)]
pub struct GuideRow {
    /// The branch.
    pub branch: &'static Branch,
    /// This machine's answer, where a run measures it.
    pub measured: Option<Measured>,
}

impl GuideRow {
    /// Whether the measurement agrees with Hart; None unmeasured.
    pub fn agrees(&self) -> Option<bool> {
        let m = self.measured.as_ref()?;
        Some(self.branch.agrees.contains(&m.choice.as_str()))
    }
}

/// The fastest candidate of `probe` in `r`, if its point was measured.
fn measure(probe: &Probe, r: &RunRecord) -> Option<Measured> {
    let on_panel = |p: &&crate::output::Point| p.panel.as_deref() == probe.panel;
    let xs = r.points.iter().filter(on_panel).map(|p| p.x);
    let x = if probe.last {
        xs.fold(f64::NEG_INFINITY, f64::max)
    } else {
        xs.fold(f64::INFINITY, f64::min)
    };
    let mut got: Vec<(&str, &str, f64)> = probe
        .candidates
        .iter()
        .filter_map(|&(imp, choice)| {
            let p = r
                .points
                .iter()
                .filter(on_panel)
                .find(|p| p.x == x && p.implementation == imp)?;
            Some((imp, choice, p.value))
        })
        .collect();
    got.sort_by(|a, b| a.2.total_cmp(&b.2));
    let &(_, choice, _) = got.first()?;
    let each: Vec<String> = got
        .iter()
        .map(|(imp, _, v)| format!("{imp} {}", crate::svg::sig3(*v)))
        .collect();
    let at = match probe.panel {
        Some(l) => format!("{} {}, {l}", r.x_label, fmt_x(x)),
        None => format!("{} {}", r.x_label, fmt_x(x)),
    };
    Some(Measured {
        choice: choice.to_string(),
        detail: format!("at {at}: {} ({})", each.join(", "), r.unit),
        run: format!("{}@{}", r.experiment, r.preempt),
        quick: r.quick(),
    })
}

/// The probe that measures `b`, if any.
pub fn probe_of(b: &Branch) -> Option<&'static Probe> {
    PROBES.iter().find(|p| std::ptr::eq(branch_of(p), b))
}

/// Every branch beside what the runs in `runs` measured for it.
pub fn rows(runs: &[(PathBuf, RunRecord)]) -> Vec<GuideRow> {
    GUIDE
        .iter()
        .map(|b| GuideRow {
            branch: b,
            measured: probe_of(b).and_then(|p| {
                runs.iter()
                    .filter(|(_, r)| r.experiment == p.experiment)
                    .find_map(|(_, r)| measure(p, r))
            }),
        })
        .collect()
}

/// What a row says about this machine, in words.
pub fn verdict(row: &GuideRow) -> String {
    match (&row.measured, probe_of(row.branch)) {
        (Some(m), _) => format!(
            "measured: {} fastest ({}; {}{}): {}",
            m.choice,
            m.detail,
            m.run,
            if m.quick { ", a --quick smoke run" } else { "" },
            if row.agrees() == Some(true) {
                "agrees"
            } else {
                "disagrees"
            }
        ),
        (None, Some(p)) => format!("not measured yet: run `mpsync run {}`", p.experiment),
        (None, None) => format!("not measured: {}", row.branch.unmeasured),
    }
}

/// The guidance beside this machine, as terminal text.
pub fn text(rows: &[GuideRow]) -> String {
    let mut lines = vec![
        "Hart's guidance (papers/002 §5.2.6, Fig. 5.20-5.21) beside this machine:".to_string(),
    ];
    for r in rows {
        lines.push(format!(
            "  [{}] {}: Hart: {} (\"{}\")",
            r.branch.tree.figure(),
            r.branch.when,
            r.branch.recommend,
            r.branch.hart
        ));
        lines.push(format!("      {}", verdict(r)));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run record of `experiment` with `points` (panel, implementation,
    /// x, value).
    pub(crate) fn record(
        experiment: &str,
        x_label: &str,
        points: &[(Option<&str>, &str, f64, f64)],
    ) -> RunRecord {
        serde_json::from_value(serde_json::json!({
            "experiment": experiment, "paper": "hart", "title": "t", "preempt": "none",
            "started_unix": 0, "duration_s": 1.0,
            "machine": {"hostname": "h", "cpu_model": "c", "cores": 2, "kernel": "k",
                "rustc": "r", "git_rev": "g", "mpsync_version": "v", "cpu_quota": null,
                "slice_extension": "s"},
            "params": {"common": {"quick": true}}, "busy_iters_per_us": 1.0,
            "unit": "ns per operation", "x_label": x_label, "baseline": "b", "trials": [],
            "points": points.iter().map(|(panel, imp, x, v)| serde_json::json!({
                "panel": panel, "implementation": imp, "x": x, "value": v, "normalized": 1.0,
            })).collect::<Vec<_>>(),
            "extra": null,
            "verdict": {"conclusion": "c", "status": "measurement", "details": []},
        }))
        .expect("a run record")
    }

    /// The rows read the probes' points: LF beats CR at update fraction 1
    /// (agrees), HP beats QSBR and EBR at load factor 10 read-only
    /// (disagrees: Hart says QSBR or EBR), and what no run measured says which
    /// run would.
    #[test]
    fn rows_put_the_measurement_beside_hart() {
        let uf = record(
            "hart-update-fraction",
            "update fraction",
            &[
                (None, "hash LF QSBR", 0.0, 30.0),
                (None, "hash CR QSBR", 0.0, 20.0),
                (None, "hash LF QSBR", 1.0, 50.0),
                (None, "hash CR QSBR", 1.0, 90.0),
            ],
        );
        let lf = record(
            "hart-loadfactor",
            "load factor",
            &[
                (Some("read-only"), "hash LF QSBR", 10.0, 50.0),
                (Some("read-only"), "hash LF EBR", 10.0, 60.0),
                (Some("read-only"), "hash LF HP", 10.0, 40.0),
                (Some("write-only"), "hash LF HP", 10.0, 1.0),
            ],
        );
        let runs = vec![(PathBuf::from("a"), uf), (PathBuf::from("b"), lf)];
        let rows = rows(&runs);
        assert_eq!(rows.len(), GUIDE.len());
        let by = |when: &str| rows.iter().find(|r| r.branch.when == when).unwrap();
        let updates = by("no CPU contention, update fraction above 0.1, short traversals");
        assert_eq!(updates.agrees(), Some(true));
        assert_eq!(
            verdict(updates),
            "measured: LF fastest (at update fraction 1: hash LF QSBR 50.0, hash CR QSBR 90.0 (ns per operation); hart-update-fraction@none, a --quick smoke run): agrees"
        );
        let long = by("long traversals (high load factor)");
        assert_eq!(long.agrees(), Some(false));
        assert!(
            verdict(long).starts_with("measured: HP fastest (at load factor 10, read-only: hash LF HP 40.0, hash LF QSBR 50.0, hash LF EBR 60.0 (ns per operation);"),
            "{}",
            verdict(long)
        );
        let base = by("no CPU contention, short traversals");
        assert_eq!(base.agrees(), None);
        assert_eq!(
            verdict(base),
            "not measured yet: run `mpsync run hart-base`"
        );
        let t = text(&rows);
        assert!(t.starts_with("Hart's guidance (papers/002 §5.2.6"), "{t}");
        assert!(t.contains("[Fig. 5.21] CPU contention: Hart: LF"), "{t}");
        assert!(t.contains("not measured: a property of the program"), "{t}");
    }

    #[test]
    fn the_trees_follow_harts_text() {
        let w = Workload::NONE;
        assert_eq!(w, Workload::default());
        assert_eq!(reclamation(&w).recommend, "QSBR");
        let contended = Workload {
            cpu_contention: true,
            allocation_heavy: true,
            ..w
        };
        assert_eq!(reclamation(&contended).recommend, "HP");
        // Traversal length has the greater effect.
        let long = Workload {
            long_traversals: true,
            ..contended
        };
        assert_eq!(reclamation(&long).recommend, "QSBR or EBR");
        let app = Workload {
            no_quiescent_states: true,
            ..w
        };
        assert_eq!(reclamation(&app).recommend, "EBR");
        // Contention without allocation does not hurt QSBR.
        let reads = Workload {
            cpu_contention: true,
            ..w
        };
        assert_eq!(reclamation(&reads).recommend, "QSBR");
        assert_eq!(table(&reads).recommend, "LF");
        let updates = Workload {
            update_fraction: 0.5,
            ..w
        };
        assert_eq!(table(&updates).recommend, "LF");
        assert_eq!(
            table(&Workload {
                update_fraction: 0.1,
                ..w
            })
            .recommend,
            "CR"
        );
        assert_eq!(
            table(&Workload {
                long_traversals: true,
                ..updates
            })
            .recommend,
            "CR"
        );
        assert_eq!(
            table(&Workload {
                other_operations: true,
                ..reads
            })
            .recommend,
            "CR"
        );
        for b in &GUIDE {
            assert!(b.agrees.iter().all(|a| b.recommend.contains(a)), "{b:?}");
            if let Some(p) = probe_of(b) {
                assert!(
                    crate::experiments::catalog()
                        .iter()
                        .any(|e| e.id == p.experiment),
                    "{}",
                    p.experiment
                );
                assert!(p.candidates.iter().any(|c| b.agrees.contains(&c.1)));
            }
        }
        assert_eq!(GUIDE.iter().filter(|b| b.tree == Tree::Table).count(), 4);
        // Every probe lands on its own branch of its own tree, one each.
        for p in &PROBES {
            assert_eq!(branch_of(p).tree, p.tree);
            assert!(std::ptr::eq(probe_of(branch_of(p)).unwrap(), p));
        }
        let measured = GUIDE.iter().filter(|b| probe_of(b).is_some()).count();
        assert_eq!(measured, PROBES.len());
        assert!(
            GUIDE
                .iter()
                .all(|b| probe_of(b).is_some() == b.unmeasured.is_empty())
        );
    }
}
