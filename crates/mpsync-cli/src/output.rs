//! What every run leaves behind in `OUT/<experiment>@<preempt>/`: `data.csv` (one
//! row per trial and point), `run.json` (provenance, parameters, statistics, the
//! verdict) and `figure.svg`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// The machine a run was measured on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    /// Host name.
    pub hostname: String,
    /// CPU model from /proc/cpuinfo.
    pub cpu_model: String,
    /// Processors available to the process.
    pub cores: usize,
    /// `uname -r`.
    pub kernel: String,
    /// Compiler that built the harness.
    pub rustc: String,
    /// Git revision of the harness.
    pub git_rev: String,
    /// mpsync version.
    pub mpsync_version: String,
    /// cgroup CPU quota in processors, if any.
    pub cpu_quota: Option<f64>,
    /// rseq time-slice extension availability, as a person reads it.
    pub slice_extension: String,
    /// What `sched` used: preemption answers (eBPF or heartbeats and why),
    /// affinity, ... (`mpsync env`). Absent in runs recorded before it existed.
    #[serde(default)]
    pub sched: crate::envinfo::SchedEnv,
}

impl Machine {
    /// Reads this machine's description.
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .and_then(|r| r.split(':').nth(1))
            })
            .map_or_else(|| "unknown".into(), |s| s.trim().to_string());
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map_or_else(|_| "unknown".into(), |s| s.trim().to_string());
        Self {
            hostname,
            cpu_model,
            cores: mpsync::sched::native::available_cpus().map_or(1, |c| c.len()),
            kernel: mpsync::sched::native::kernel_release(),
            rustc: env!("MPSYNC_RUSTC_VERSION").into(),
            git_rev: env!("MPSYNC_GIT_REV").into(),
            mpsync_version: env!("CARGO_PKG_VERSION").into(),
            cpu_quota: mpsync::sched::native::cgroup_cpu_quota(),
            slice_extension: crate::envinfo::slice_extension_text(
                mpsync::sched::native::slice_extension(),
            ),
            sched: crate::envinfo::SchedEnv::detect(),
        }
    }
}

/// Whether a paper's conclusion holds on the fresh data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Every evaluable clause holds and every clause was evaluable.
    Holds,
    /// Some evaluable clause does not hold.
    DoesNotHold,
    /// What could be evaluated holds, but some clauses need implementations that
    /// do not exist yet.
    PartlyEvaluable,
    /// A measurement with no paper conclusion behind it (the figures are the result).
    Measurement,
}

impl Status {
    /// As printed.
    pub fn label(self) -> &'static str {
        match self {
            Self::Holds => "holds",
            Self::DoesNotHold => "does not hold",
            Self::PartlyEvaluable => "partly evaluable",
            Self::Measurement => "measurement",
        }
    }
}

/// The verdict on a paper's conclusion, with the ratios behind it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verdict {
    /// The conclusion being checked, as a statement.
    pub conclusion: String,
    /// Outcome.
    pub status: Status,
    /// One line per clause: what was checked, with the numbers.
    pub details: Vec<String>,
    /// The clauses judged one by one (experiments on the experiment model;
    /// empty in records of experiments that only write `details`).
    #[serde(default)]
    pub clauses: Vec<ClauseResult>,
}

/// One clause of a verdict: a rule judged at one point, our value beside the
/// paper's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClauseResult {
    /// What the clause says, as a statement ("Smart-Q ≤ 1.1× TAS-B-np").
    pub statement: String,
    /// Where it is judged ("MP 2", "8 threads, cs1-ncs1 unpinned").
    pub at: String,
    /// Our value there, with its unit or as a ratio.
    pub ours: String,
    /// The paper's own value, where the paper gives one.
    pub paper: Option<String>,
    /// Whether it holds; `None` when it could not be judged (`ours` says why).
    pub holds: Option<bool>,
}

impl ClauseResult {
    /// As printed in the terminal: "holds: … (ours …; paper …) at …".
    pub fn line(&self) -> String {
        let mark = match self.holds {
            Some(true) => "holds",
            Some(false) => "does not hold",
            None => "not judged",
        };
        let paper = self
            .paper
            .as_deref()
            .map(|p| format!("; paper: {p}"))
            .unwrap_or_default();
        format!(
            "[{mark}] {} at {}: ours {}{paper}",
            self.statement, self.at, self.ours
        )
    }
}

impl Verdict {
    /// The verdict of `clauses`: holds when every one holds, does not hold
    /// when one does not, partly evaluable when one could not be judged, a
    /// measurement when there are none. `notes` follow the clause lines in
    /// `details`.
    pub fn from_clauses(
        conclusion: impl Into<String>,
        clauses: Vec<ClauseResult>,
        notes: Vec<String>,
    ) -> Self {
        let status = if clauses.is_empty() {
            Status::Measurement
        } else if clauses.iter().any(|c| c.holds == Some(false)) {
            Status::DoesNotHold
        } else if clauses.iter().any(|c| c.holds.is_none()) {
            Status::PartlyEvaluable
        } else {
            Status::Holds
        };
        let mut details: Vec<String> = clauses.iter().map(ClauseResult::line).collect();
        details.extend(notes);
        Self {
            conclusion: conclusion.into(),
            status,
            details,
            clauses,
        }
    }

    /// "2 of 3 clauses hold" (and how many could not be judged); empty for a
    /// verdict without clauses.
    pub fn summary(&self) -> String {
        let n = self.clauses.len();
        if n == 0 {
            return String::new();
        }
        let held = self
            .clauses
            .iter()
            .filter(|c| c.holds == Some(true))
            .count();
        let unjudged = self.clauses.iter().filter(|c| c.holds.is_none()).count();
        let mut s = if self.status == Status::Measurement {
            format!("{held} of {n} target{} met", if n == 1 { "" } else { "s" })
        } else {
            format!("{held} of {n} clause{} hold", if n == 1 { "" } else { "s" })
        };
        if unjudged > 0 {
            s.push_str(&format!(", {unjudged} not judged"));
        }
        s
    }
}

/// One trial of one implementation at one x value.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Trial {
    /// Implementation name.
    pub implementation: String,
    /// The x value (MP level, processors, ...).
    pub x: f64,
    /// Trial number.
    pub trial: u32,
    /// The configuration (panel of the figure) it belongs to, where the
    /// experiment has several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub panel: Option<String>,
    /// The measured value (seconds, ns/op, ...).
    pub value: f64,
    /// Preemptions by the emulated scheduler during the trial.
    pub preemptions: u64,
    /// Warnings (honoured no-preempt requests) during the trial.
    pub warnings: u64,
    /// Multiprogramming level of the point, where the experiment has one.
    #[serde(default)]
    pub mp: Option<f64>,
    /// Processors (worker threads) of the point, where the experiment has them.
    #[serde(default)]
    pub procs: Option<u32>,
    /// Fairness: (last worker's finish - first worker's finish) / wall time.
    /// Every worker does the same work, so an unfair lock finishes some early.
    #[serde(default)]
    pub finish_spread: Option<f64>,
    /// Fairness of a fixed-duration run: (max - min) / mean of the per-thread
    /// acquisition counts (0 = every thread got the lock equally often).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fairness_spread: Option<f64>,
    /// Fairness of a fixed-duration run as min / max of the per-thread
    /// acquisition counts (1 = perfectly fair, 0 = some thread starved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fairness_min_max: Option<f64>,
    /// Set when the run hit its time cap: the fraction of the planned work it
    /// completed. `value` is then extrapolated (wall time / fraction) — an
    /// estimate, reported as censored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub censored_at: Option<f64>,
}

/// A summary point: trimmed mean of the trials, and that normalized.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    /// Implementation name.
    pub implementation: String,
    /// The x value.
    pub x: f64,
    /// The configuration (panel of the figure) it belongs to, where the
    /// experiment has several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub panel: Option<String>,
    /// Mean of the median trials.
    pub value: f64,
    /// `value` divided by the baseline's.
    pub normalized: f64,
}

/// Everything `run.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    /// Experiment id.
    pub experiment: String,
    /// Paper it reproduces.
    pub paper: String,
    /// One-line description.
    pub title: String,
    /// `none`, `emulated` or `os`.
    pub preempt: String,
    /// Unix time the run started.
    pub started_unix: u64,
    /// Wall time of the run (s).
    pub duration_s: f64,
    /// Where it ran.
    pub machine: Machine,
    /// Every parameter, as given and as derived.
    pub params: serde_json::Value,
    /// Busy-work calibration: loop iterations per microsecond.
    pub busy_iters_per_us: f64,
    /// What `value` measures.
    pub unit: String,
    /// x axis label.
    pub x_label: String,
    /// What the normalization divides by.
    pub baseline: String,
    /// Every trial.
    pub trials: Vec<Trial>,
    /// Summary points.
    pub points: Vec<Point>,
    /// Scheduler statistics and other experiment-specific figures.
    pub extra: serde_json::Value,
    /// The verdict.
    pub verdict: Verdict,
    /// What this run recommends, per kind of structure (`mpsync advise`).
    #[serde(default)]
    pub advice: Vec<Advice>,
}

impl RunRecord {
    /// Whether it was a `--quick` smoke run (read from its parameters).
    pub fn quick(&self) -> bool {
        self.params
            .pointer("/common/quick")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false)
    }
}

/// What an experiment recommends for one kind of structure on this machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Advice {
    /// The kind, as `mpsync advise` groups them ("mutex", "queue", …).
    pub kind: String,
    /// The recommended implementation: mpsync's or a peer's, whichever won.
    pub best: String,
    /// Its figure over the runner-up's, as "1.23× <name>" (higher is better
    /// whatever the unit: a time is inverted).
    pub over_runner_up: Option<String>,
    /// Its figure over the best peer's (when the best is mpsync's) or over
    /// mpsync's best (when a peer won).
    pub over_other_side: Option<String>,
    /// Where it was judged ("8 threads on 2 cores, cs1-ncs1 unpinned").
    pub at: String,
}

/// The suffix of a contention-matched run's preemption (`--match-contention`):
/// its results go to `OUT/<experiment>@<preempt>+matched/`.
pub const MATCHED: &str = "+matched";

/// The directory of one experiment's results.
pub fn run_dir(out: &Path, id: &str, preempt: &str) -> PathBuf {
    out.join(format!("{id}@{preempt}"))
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Writes data.csv, run.json and figure.svg into `dir`.
pub fn write_run(dir: &Path, rec: &RunRecord, svg: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut csv = String::from(
        "experiment,implementation,preempt,mp,procs,x,trial,value,unit,preemptions,warnings,finish_spread,fairness_spread,censored_at,configuration,fairness_min_max\n",
    );
    let opt = |v: Option<String>| v.unwrap_or_default();
    for t in &rec.trials {
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            csv_field(&rec.experiment),
            csv_field(&t.implementation),
            rec.preempt,
            opt(t.mp.map(|m| m.to_string())),
            opt(t.procs.map(|n| n.to_string())),
            t.x,
            t.trial,
            t.value,
            csv_field(&rec.unit),
            t.preemptions,
            t.warnings,
            opt(t.finish_spread.map(|f| format!("{f:.4}"))),
            opt(t.fairness_spread.map(|f| format!("{f:.4}"))),
            opt(t.censored_at.map(|f| format!("{f:.4}"))),
            csv_field(t.panel.as_deref().unwrap_or("")),
            opt(t.fairness_min_max.map(|f| format!("{f:.4}")))
        );
    }
    let w = |name: &str, body: &[u8]| {
        std::fs::write(dir.join(name), body)
            .with_context(|| format!("cannot write {}", dir.join(name).display()))
    };
    w("data.csv", csv.as_bytes())?;
    w("run.json", serde_json::to_string_pretty(rec)?.as_bytes())?;
    w("figure.svg", svg.as_bytes())?;
    Ok(())
}

/// Reads every `run.json` under `out`, sorted by directory name.
pub fn read_runs(out: &Path) -> anyhow::Result<Vec<(PathBuf, RunRecord)>> {
    let mut runs = Vec::new();
    let Ok(entries) = std::fs::read_dir(out) else {
        return Ok(runs);
    };
    for e in entries.flatten() {
        let p = e.path().join("run.json");
        if let Ok(text) = std::fs::read_to_string(&p) {
            match serde_json::from_str::<RunRecord>(&text) {
                Ok(r) => runs.push((e.path(), r)),
                Err(err) => eprintln!(
                    "warning: skipping {}: not a run record ({err})",
                    p.display()
                ),
            }
        }
    }
    runs.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(runs)
}
