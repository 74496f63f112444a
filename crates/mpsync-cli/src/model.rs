//! The experiment model: an experiment is data.
//!
//! A [`Design`] names the configurations (the figure's panels), the x axis
//! of each, the implementations (each with its [`Role`] and the kind of
//! structure it is), the unit and which way is better. The experiment
//! supplies a measure function (one trial of one implementation at one
//! point) and its verdict [`Clause`]s — each a rule, the paper's own value
//! where the paper gives one, and the point where it is judged — and what it
//! recommends ([`AdviceRule`]). The runner owns the rest, the same for every
//! experiment:
//!
//! - **interleaved rounds**: trial `t` of every point and implementation is
//!   measured before trial `t + 1` of any, and each round starts with a
//!   different implementation, so that a noisy minute on a shared machine
//!   falls on all of them;
//! - **summaries**: the mean of the median trials (the papers' "median 5 of
//!   7") per point, normalized to the baseline at the same point;
//! - **censoring**: a trial that hit its time cap says so (`censored_at`),
//!   and every clause judged on it says so;
//! - **progress** with an ETA, **output** (`data.csv`, `run.json`,
//!   `figure.svg`), and the **figure**: one panel per configuration, at
//!   most [`crate::svg::MAX_LINES`] lines a panel (the best first), a log
//!   axis when the values span more than 10×, and the design's [`Guide`]s
//!   (a bound, a paper's value) drawn across every panel.
//!
//! A measure is one of two shapes. Most give one value a trial, at one
//! point ([`collect`]). A *series* measure ([`collect_series`]) gives, in
//! one run, a value at every x of its configuration — a count sampled over
//! time, say — and its clauses read the whole series
//! ([`Results::series`]); `experiments::hart`'s `hart-memory` is one.
//!
//! Adding an experiment means writing its design, its measure function and
//! its clauses; see `experiments::latency` for a small one.

use std::time::Instant;

use crate::env::Preempt;
use crate::experiments::{Experiment, Params};
use crate::output::{Advice, ClauseResult, Machine, Point, RunRecord, Trial, Verdict};
use crate::svg::{MAX_LINES, Series, sig3};

/// Which way a measured value is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// Times, latencies: less is better.
    Lower,
    /// Throughputs: more is better.
    Higher,
}

/// What an implementation is to the verdicts and the advice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// mpsync's own.
    Ours,
    /// Another crate's, or std's: what a user would pick today.
    Peer,
    /// A floor, ceiling or sequential baseline: drawn and tabled, never
    /// recommended.
    Reference,
}

/// One implementation an experiment measures.
#[derive(Debug, Clone)]
pub struct Imp {
    /// As printed.
    pub name: String,
    /// Ours, a peer's, or a reference line.
    pub role: Role,
    /// The kind it is recommended as (`advise` groups by it), if any.
    pub kind: Option<&'static str>,
}

impl Imp {
    /// One of mpsync's, of `kind`.
    pub fn ours(name: impl Into<String>, kind: &'static str) -> Self {
        Self {
            name: name.into(),
            role: Role::Ours,
            kind: Some(kind),
        }
    }

    /// A peer of `kind`.
    pub fn peer(name: impl Into<String>, kind: &'static str) -> Self {
        Self {
            name: name.into(),
            role: Role::Peer,
            kind: Some(kind),
        }
    }

    /// A reference line (floor, ceiling, sequential run).
    pub fn reference(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            role: Role::Reference,
            kind: None,
        }
    }
}

/// How a point summarizes its trials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Summary {
    /// The mean of the median `n - 2` (the papers' "median 5 of 7").
    TrimmedMean,
    /// The median (for throughputs of no-work loops, whose outliers are
    /// streaks of one thread running alone).
    Median,
}

impl Summary {
    fn of(self, v: &[f64]) -> Option<f64> {
        match self {
            Self::TrimmedMean => crate::stats::trimmed_mean(v),
            Self::Median => crate::stats::median(v),
        }
    }
}

/// One configuration: a panel of the figure, with its own x values.
#[derive(Debug, Clone)]
pub struct Panel {
    /// As printed ("cs1-ncs1 unpinned"); empty for an experiment with one.
    pub label: String,
    /// The x values it is measured at, in order.
    pub xs: Vec<f64>,
    /// Its own baseline, where it differs from the design's.
    pub baseline: Option<String>,
}

impl Panel {
    /// A configuration with the design's baseline.
    pub fn new(label: impl Into<String>, xs: Vec<f64>) -> Self {
        Self {
            label: label.into(),
            xs,
            baseline: None,
        }
    }
}

/// Everything the runner needs to know about an experiment's sweep.
#[derive(Debug, Clone)]
pub struct Design {
    /// The x axis ("threads", "MP level").
    pub x_label: String,
    /// What a value measures ("ns per lock+unlock").
    pub unit: String,
    /// Which way is better.
    pub better: Better,
    /// The configurations, at least one.
    pub panels: Vec<Panel>,
    /// The implementations, in the order the tables list them.
    pub imps: Vec<Imp>,
    /// The implementation every point is normalized to, if any.
    pub baseline: Option<String>,
    /// Trials per point (interleaved rounds).
    pub trials: u32,
    /// How a point summarizes its trials.
    pub summary: Summary,
    /// Horizontal lines drawn across every panel of a line figure.
    pub guides: Vec<Guide>,
}

/// A horizontal line across every panel of the figure: a bound or a
/// paper's value, drawn beside the measured lines but not one of them (it
/// is in no table; the experiment's parameters should say where it comes
/// from).
#[derive(Debug, Clone, PartialEq)]
pub struct Guide {
    /// As the legend prints it ("HP bound (N·R)").
    pub label: String,
    /// Its value, in the design's unit.
    pub y: f64,
}

/// One trial to measure.
#[derive(Debug, Clone, Copy)]
pub struct Cell<'a> {
    /// Index of the configuration in [`Design::panels`].
    pub panel: usize,
    /// The x value.
    pub x: f64,
    /// The implementation.
    pub imp: &'a Imp,
    /// The round.
    pub trial: u32,
}

impl Design {
    /// A design with one configuration.
    pub fn single(
        x_label: impl Into<String>,
        unit: impl Into<String>,
        better: Better,
        xs: Vec<f64>,
        imps: Vec<Imp>,
        trials: u32,
    ) -> Self {
        Self {
            x_label: x_label.into(),
            unit: unit.into(),
            better,
            panels: vec![Panel::new("", xs)],
            imps,
            baseline: None,
            trials,
            summary: Summary::TrimmedMean,
            guides: Vec::new(),
        }
    }

    /// Summarizes points by their median.
    pub fn median(mut self) -> Self {
        self.summary = Summary::Median;
        self
    }

    /// Normalizes to `name`.
    pub fn baseline(mut self, name: impl Into<String>) -> Self {
        self.baseline = Some(name.into());
        self
    }

    /// The trials the runner will measure, in order.
    pub fn cells(&self) -> Vec<Cell<'_>> {
        self.cells_at(|pn| &pn.xs)
    }

    /// The runs of a series measure, in order: one cell per round,
    /// configuration and implementation (rotated as in [`cells`](Self::cells)),
    /// its `x` the configuration's last (where the series ends).
    pub fn series_cells(&self) -> Vec<Cell<'_>> {
        self.cells_at(|pn| pn.xs.last().map_or(&[], std::slice::from_ref))
    }

    /// Per round, configuration and x of `xs`, every implementation, the
    /// first one rotating with the round.
    fn cells_at(&self, xs: impl Fn(&Panel) -> &[f64]) -> Vec<Cell<'_>> {
        let mut cells = Vec::new();
        let n = self.imps.len();
        for trial in 0..self.trials {
            for (panel, pn) in self.panels.iter().enumerate() {
                for &x in xs(pn) {
                    for k in 0..n {
                        cells.push(Cell {
                            panel,
                            x,
                            imp: &self.imps[(k + trial as usize) % n],
                            trial,
                        });
                    }
                }
            }
        }
        cells
    }

    /// The baseline of configuration `panel`.
    pub fn baseline_of(&self, panel: usize) -> Option<&str> {
        self.panels[panel]
            .baseline
            .as_deref()
            .or(self.baseline.as_deref())
    }

    fn panel_key(&self, panel: usize) -> Option<String> {
        (self.panels.len() > 1).then(|| self.panels[panel].label.clone())
    }

    /// How much better `a` is than `b` (> 1: better), whichever way is better.
    pub fn goodness(&self, a: f64, b: f64) -> f64 {
        match self.better {
            Better::Higher => a / b,
            Better::Lower => b / a,
        }
    }
}

/// Measures every cell of `d` in interleaved rounds, with a progress bar
/// that shows an ETA. `measure` returns the trial's value and whatever else
/// it knows (preemptions, fairness, censoring), or `None` where the
/// implementation does not apply at that point; the runner fills in the
/// implementation, point and round.
pub fn collect(
    id: &str,
    d: &Design,
    measure: &mut dyn FnMut(&Cell<'_>) -> anyhow::Result<Option<Trial>>,
) -> anyhow::Result<Vec<Trial>> {
    let cells = d.cells();
    let pb = crate::progress(cells.len() as u64, id);
    let mut trials = Vec::with_capacity(cells.len());
    for c in &cells {
        if let Some(t) = measure(c)? {
            trials.push(stamp(d, c, c.x, t));
        }
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok(trials)
}

/// `t`, named after the cell that measured it, at `x`.
fn stamp(d: &Design, c: &Cell<'_>, x: f64, mut t: Trial) -> Trial {
    t.implementation.clone_from(&c.imp.name);
    t.x = x;
    t.trial = c.trial;
    t.panel = d.panel_key(c.panel);
    t
}

/// Measures every implementation of `d` in interleaved rounds where one
/// run yields a series: `measure` is called once per [`Design::series_cells`]
/// cell and returns one trial per x of the cell's configuration, in the
/// order of its xs (or `None` where the implementation does not apply); the
/// runner fills in the implementation, x, round and configuration. A series
/// of another length is an error.
pub fn collect_series(
    id: &str,
    d: &Design,
    measure: &mut dyn FnMut(&Cell<'_>) -> anyhow::Result<Option<Vec<Trial>>>,
) -> anyhow::Result<Vec<Trial>> {
    let cells = d.series_cells();
    let pb = crate::progress(cells.len() as u64, id);
    let mut trials = Vec::new();
    for c in &cells {
        let xs = &d.panels[c.panel].xs;
        if let Some(series) = measure(c)? {
            anyhow::ensure!(
                series.len() == xs.len(),
                "{id}: {} gave {} samples, not one per x ({})",
                c.imp.name,
                series.len(),
                xs.len()
            );
            trials.extend(series.into_iter().zip(xs).map(|(t, &x)| stamp(d, c, x, t)));
        }
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok(trials)
}

/// The trial of a fixed-duration run from its per-thread operation counts:
/// operations per second, and its fairness both ways ((max − min) / mean, and
/// min / max).
pub fn counts_trial(counts: &[u64], duration: std::time::Duration, threads: u32) -> Trial {
    let total: u64 = counts.iter().sum();
    let mean = total as f64 / counts.len().max(1) as f64;
    let lo = counts.iter().copied().min().unwrap_or(0);
    let hi = counts.iter().copied().max().unwrap_or(0);
    Trial {
        value: total as f64 / duration.as_secs_f64(),
        procs: Some(threads),
        fairness_spread: Some(if mean > 0.0 {
            (hi - lo) as f64 / mean
        } else {
            0.0
        }),
        fairness_min_max: Some(if hi > 0 { lo as f64 / hi as f64 } else { 0.0 }),
        ..Trial::default()
    }
}

/// The summary points of `trials`: per configuration, x and implementation,
/// the mean of the median trials, normalized to the baseline there.
pub fn summarize(d: &Design, trials: &[Trial]) -> Vec<Point> {
    let mut points = Vec::new();
    for (pi, pn) in d.panels.iter().enumerate() {
        let key = d.panel_key(pi);
        let at = |name: &str, x: f64| {
            let v: Vec<f64> = trials
                .iter()
                .filter(|t| t.implementation == name && t.x == x && t.panel == key)
                .map(|t| t.value)
                .collect();
            d.summary.of(&v)
        };
        for &x in &pn.xs {
            let base = d.baseline_of(pi).and_then(|b| at(b, x));
            for imp in &d.imps {
                if let Some(v) = at(&imp.name, x) {
                    points.push(Point {
                        implementation: imp.name.clone(),
                        x,
                        panel: key.clone(),
                        value: v,
                        normalized: base.map_or(v, |b| v / b),
                    });
                }
            }
        }
    }
    points
}

/// The measured results, as clauses and advice read them.
#[derive(Debug, Clone, Copy)]
pub struct Results<'a> {
    /// The design.
    pub design: &'a Design,
    /// Summary points.
    pub points: &'a [Point],
    /// Every trial.
    pub trials: &'a [Trial],
}

impl<'a> Results<'a> {
    /// The results of `design`: its summary `points` and every trial.
    pub fn new(design: &'a Design, points: &'a [Point], trials: &'a [Trial]) -> Self {
        Self {
            design,
            points,
            trials,
        }
    }

    /// `name`'s summary value at (`panel`, `x`).
    pub fn value(&self, name: &str, panel: usize, x: f64) -> Option<f64> {
        let key = self.design.panel_key(panel);
        self.points
            .iter()
            .find(|p| p.implementation == name && p.x == x && p.panel == key)
            .map(|p| p.value)
    }

    /// The median of `f` over `name`'s trials at (`panel`, `x`) (fairness,
    /// preemptions, …).
    pub fn median_of(
        &self,
        name: &str,
        panel: usize,
        x: f64,
        f: impl Fn(&Trial) -> Option<f64>,
    ) -> Option<f64> {
        let key = self.design.panel_key(panel);
        let v: Vec<f64> = self
            .trials
            .iter()
            .filter(|t| t.implementation == name && t.x == x && t.panel == key)
            .filter_map(f)
            .collect();
        crate::stats::median(&v)
    }

    /// `name`'s summary values in `panel`, as (x, value) in the order of
    /// the configuration's xs: what a series measure's clauses judge.
    pub fn series(&self, name: &str, panel: usize) -> Vec<(f64, f64)> {
        self.design.panels[panel]
            .xs
            .iter()
            .filter_map(|&x| Some((x, self.value(name, panel, x)?)))
            .collect()
    }

    /// Whether a trial of `name` at (`panel`, `x`) hit its time cap.
    pub fn censored(&self, name: &str, panel: usize, x: f64) -> bool {
        let key = self.design.panel_key(panel);
        self.trials.iter().any(|t| {
            t.implementation == name && t.x == x && t.panel == key && t.censored_at.is_some()
        })
    }

    /// How much better `a` is than `b` at (`panel`, `x`) (> 1: better).
    pub fn goodness(&self, a: &str, b: &str, panel: usize, x: f64) -> Option<f64> {
        Some(
            self.design
                .goodness(self.value(a, panel, x)?, self.value(b, panel, x)?),
        )
    }

    /// The implementations of `role` (and of `kind`, when given) that have a
    /// value at (`panel`, `x`), best first.
    pub fn ranked(
        &self,
        role: Role,
        kind: Option<&str>,
        panel: usize,
        x: f64,
    ) -> Vec<(&'a Imp, f64)> {
        let mut v: Vec<(&'a Imp, f64)> = self
            .design
            .imps
            .iter()
            .filter(|i| i.role == role && (kind.is_none() || i.kind == kind))
            .filter_map(|i| self.value(&i.name, panel, x).map(|v| (i, v)))
            .collect();
        v.sort_by(|a, b| self.design.goodness(b.1, a.1).total_cmp(&1.0));
        v
    }

    /// "x 8" or "8 threads, cs1-ncs1 unpinned": where a clause is judged.
    pub fn at(&self, panel: usize, x: f64) -> String {
        let label = &self.design.panels[panel].label;
        let mut s = format!("{} {}", self.design.x_label, fmt_x(x));
        if !label.is_empty() {
            s = format!("{s}, {label}");
        }
        s
    }

    /// The last x value of `panel` (the most oversubscribed or
    /// multiprogrammed point, where the papers judge).
    pub fn last_x(&self, panel: usize) -> f64 {
        self.design.panels[panel].xs.last().copied().unwrap_or(0.0)
    }

    /// `name`'s value at (`panel`, `x`) normalized to the baseline there
    /// (as measured where there is none).
    pub fn normalized(&self, name: &str, panel: usize, x: f64) -> Option<f64> {
        let key = self.design.panel_key(panel);
        self.points
            .iter()
            .find(|p| p.implementation == name && p.x == x && p.panel == key)
            .map(|p| p.normalized)
    }

    /// The best of `names` (every implementation when empty) at (`panel`,
    /// `x`), whatever its role.
    pub fn best_of(&self, names: &[&str], panel: usize, x: f64) -> Option<(&'a Imp, f64)> {
        self.design
            .imps
            .iter()
            .filter(|i| names.is_empty() || names.contains(&i.name.as_str()))
            .filter_map(|i| self.value(&i.name, panel, x).map(|v| (i, v)))
            .reduce(|a, b| {
                if self.design.goodness(b.1, a.1) > 1.0 {
                    b
                } else {
                    a
                }
            })
    }
}

/// An x value as printed: whole numbers without decimals.
pub fn fmt_x(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        sig3(x)
    }
}

/// A verdict clause: a statement, the paper's value, and its rule.
pub struct Clause {
    /// What it says.
    pub statement: String,
    /// The paper's own value, where the paper gives one.
    pub paper: Option<String>,
    /// Judges it: where, our value, whether it holds (`None`: not judged).
    pub judge: Box<dyn Fn(&Results<'_>) -> Judged>,
}

impl std::fmt::Debug for Clause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clause")
            .field("statement", &self.statement)
            .field("paper", &self.paper)
            .finish_non_exhaustive()
    }
}

/// What a clause's rule found.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    /// Where it was judged.
    pub at: String,
    /// Our value there.
    pub ours: String,
    /// Whether it holds; `None` when it could not be judged.
    pub holds: Option<bool>,
}

/// The best of mpsync's `kind` against `peer` at (`panel`, `x`): what the
/// `best_ours_*` clauses judge.
struct Against {
    kind: &'static str,
    peer: String,
    panel: usize,
    x: f64,
}

impl Against {
    /// `rule(design, best's value, peer's value, best's name, peer)` gives our
    /// value as printed and whether it holds; a censored trial is marked.
    fn judge(
        &self,
        r: &Results<'_>,
        rule: impl Fn(&Design, f64, f64, &str, &str) -> (String, bool),
    ) -> Judged {
        let (panel, x, peer) = (self.panel, self.x, self.peer.as_str());
        let at = r.at(panel, x);
        let best = r
            .ranked(Role::Ours, Some(self.kind), panel, x)
            .first()
            .copied();
        match (best, r.value(peer, panel, x)) {
            (Some((i, v)), Some(pv)) => {
                let (ours, holds) = rule(r.design, v, pv, &i.name, peer);
                Judged {
                    at,
                    ours: format!("{ours}{}", censored_mark(r, &[&i.name, peer], panel, x)),
                    holds: Some(holds),
                }
            }
            _ => Judged {
                at,
                ours: format!("not measured (no mpsync {} or no {peer} there)", self.kind),
                holds: None,
            },
        }
    }
}

/// " (censored: extrapolated)" when a trial of `names` at (`panel`, `x`) hit
/// its time cap; empty otherwise.
pub fn censored_mark(r: &Results<'_>, names: &[&str], panel: usize, x: f64) -> &'static str {
    if names.iter().any(|n| r.censored(n, panel, x)) {
        " (censored: extrapolated)"
    } else {
        ""
    }
}

impl Clause {
    /// A clause with its own rule.
    pub fn new(
        statement: impl Into<String>,
        paper: Option<&str>,
        judge: impl Fn(&Results<'_>) -> Judged + 'static,
    ) -> Self {
        Self {
            statement: statement.into(),
            paper: paper.map(String::from),
            judge: Box::new(judge),
        }
    }

    /// "`a` is at most `limit` × `b`" in the measured unit (value of `a` /
    /// value of `b` ≤ `limit`) at the last x of `panel`.
    pub fn ratio_at_most(
        statement: impl Into<String>,
        paper: Option<&str>,
        a: &str,
        b: &str,
        panel: usize,
        limit: f64,
    ) -> Self {
        let (a, b) = (a.to_string(), b.to_string());
        Self::new(statement, paper, move |r| {
            let x = r.last_x(panel);
            let at = r.at(panel, x);
            match (r.value(&a, panel, x), r.value(&b, panel, x)) {
                (Some(va), Some(vb)) => {
                    let q = va / vb;
                    let cens = censored_mark(r, &[&a, &b], panel, x);
                    Judged {
                        at,
                        ours: format!("{a} / {b} = {}{cens}", sig3(q)),
                        holds: Some(q <= limit),
                    }
                }
                _ => Judged {
                    at,
                    ours: format!("not measured ({a} or {b} has no value)"),
                    holds: None,
                },
            }
        })
    }

    /// "`a` ≥ `limit` × `b`" in goodness (throughput ratio, or inverse time
    /// ratio) at every x of `panel`.
    pub fn at_least_everywhere(
        statement: impl Into<String>,
        paper: Option<&str>,
        a: &str,
        b: &str,
        panel: usize,
        limit: f64,
    ) -> Self {
        let (a, b) = (a.to_string(), b.to_string());
        Self::new(statement, paper, move |r| {
            let label = &r.design.panels[panel].label;
            let at = if label.is_empty() {
                "every point".to_string()
            } else {
                format!("every point, {label}")
            };
            let got: Vec<(f64, f64)> = r.design.panels[panel]
                .xs
                .iter()
                .filter_map(|&x| Some((x, r.goodness(&a, &b, panel, x)?)))
                .collect();
            if got.is_empty() {
                return Judged {
                    at,
                    ours: format!("not measured ({a} or {b} has no value)"),
                    holds: None,
                };
            }
            let each: Vec<String> = got
                .iter()
                .map(|(x, g)| format!("{} {}", fmt_x(*x), sig3(*g)))
                .collect();
            Judged {
                at,
                ours: format!("{a} / {b}: {}", each.join(", ")),
                holds: Some(got.iter().all(|(_, g)| *g >= limit)),
            }
        })
    }

    /// "the best of mpsync's (of `kind`) is at most `limit` × `peer`" in the
    /// measured unit, at (`panel`, `x`).
    pub fn best_ours_at_most(
        statement: impl Into<String>,
        paper: Option<&str>,
        kind: &'static str,
        peer: &str,
        panel: usize,
        x: f64,
        limit: f64,
    ) -> Self {
        let against = Against {
            kind,
            peer: peer.into(),
            panel,
            x,
        };
        Self::new(statement, paper, move |r| {
            against.judge(r, |_, v, pv, best, peer| {
                (
                    format!("{best} / {peer} = {}", sig3(v / pv)),
                    v / pv <= limit,
                )
            })
        })
    }

    /// "the best of mpsync's (of `kind`) is at least `limit` × `peer`" in
    /// goodness (a throughput ratio, or the inverse of a time ratio), at
    /// (`panel`, `x`).
    pub fn best_ours_at_least(
        statement: impl Into<String>,
        paper: Option<&str>,
        kind: &'static str,
        peer: &str,
        panel: usize,
        x: f64,
        limit: f64,
    ) -> Self {
        let against = Against {
            kind,
            peer: peer.into(),
            panel,
            x,
        };
        Self::new(statement, paper, move |r| {
            against.judge(r, |d, v, pv, best, peer| {
                let g = d.goodness(v, pv);
                (format!("{best} is {}× {peer}", sig3(g)), g >= limit)
            })
        })
    }

    /// Judges it.
    pub fn judge(&self, r: &Results<'_>) -> ClauseResult {
        let j = (self.judge)(r);
        ClauseResult {
            statement: self.statement.clone(),
            at: j.at,
            ours: j.ours,
            paper: self.paper.clone(),
            holds: j.holds,
        }
    }
}

/// What an experiment recommends: the best implementation of `kind` at
/// the last x of `panel`.
#[derive(Debug, Clone)]
pub struct AdviceRule {
    /// The kind.
    pub kind: &'static str,
    /// The configuration judged.
    pub panel: usize,
}

/// The advice of `rule` on `r`; `None` when nothing of that kind was measured.
pub fn advise(rule: &AdviceRule, r: &Results<'_>) -> Option<Advice> {
    let x = r.last_x(rule.panel);
    let ours = r.ranked(Role::Ours, Some(rule.kind), rule.panel, x);
    let peers = r.ranked(Role::Peer, Some(rule.kind), rule.panel, x);
    let mut all: Vec<(&Imp, f64)> = ours.iter().chain(peers.iter()).copied().collect();
    all.sort_by(|a, b| r.design.goodness(b.1, a.1).total_cmp(&1.0));
    let (best, bv) = *all.first()?;
    let margin = |other: Option<&(&Imp, f64)>| {
        other.map(|(i, v)| format!("{}× {}", sig3(r.design.goodness(bv, *v)), i.name))
    };
    let other_side = if best.role == Role::Ours {
        peers.first()
    } else {
        ours.first()
    };
    Some(Advice {
        kind: rule.kind.into(),
        best: best.name.clone(),
        over_runner_up: margin(all.get(1)),
        over_other_side: margin(other_side),
        at: r.at(rule.panel, x),
    })
}

/// The bars of a figure whose configurations each have one x: every
/// implementation, best first.
fn bars(d: &Design, points: &[Point], y_of: &dyn Fn(&Point) -> f64) -> Vec<(String, f64)> {
    let mut bars = Vec::new();
    for (pi, pn) in d.panels.iter().enumerate() {
        let mut v: Vec<(String, f64)> = points
            .iter()
            .filter(|p| p.panel == d.panel_key(pi))
            .map(|p| match pn.label.as_str() {
                "" => (p.implementation.clone(), y_of(p)),
                l => (format!("{} · {l}", p.implementation), y_of(p)),
            })
            .collect();
        let by_value = |a: &(String, f64), b: &(String, f64)| {
            let o = a.1.total_cmp(&b.1);
            if d.better == Better::Lower {
                o
            } else {
                o.reverse()
            }
        };
        v.sort_by(by_value);
        bars.extend(v);
    }
    bars
}

/// The figure. With one x value, bars of every implementation (best
/// first). Otherwise one panel per configuration, normalized values when
/// there is a baseline: the baseline and up to two reference lines, then the
/// best of the rest at the configuration's last x, and the design's guides,
/// [`MAX_LINES`] in all (the title says how many are shown; the table has
/// every one).
pub fn figure(title: &str, d: &Design, points: &[Point]) -> String {
    let normalized = (0..d.panels.len()).any(|pi| d.baseline_of(pi).is_some());
    let y_label = match (d.baseline.as_deref(), normalized) {
        (Some(b), _) if d.panels.iter().all(|p| p.baseline.is_none()) => {
            format!("{} normalized to {b}", d.unit)
        }
        (_, true) => format!("{} normalized to each panel's baseline", d.unit),
        (_, false) => d.unit.clone(),
    };
    let y_of = |p: &Point| if normalized { p.normalized } else { p.value };
    if d.panels.iter().all(|p| p.xs.len() <= 1) {
        return crate::svg::bar_chart(title, &y_label, &bars(d, points, &y_of));
    }
    let panels: Vec<(String, Vec<Series>)> = (0..d.panels.len())
        .map(|pi| panel_lines(title, d, points, pi, &y_of))
        .collect();
    crate::svg::small_multiples(&panels, &d.x_label, &y_label)
}

/// One panel of [`figure`]: its title and lines.
fn panel_lines(
    title: &str,
    d: &Design,
    points: &[Point],
    pi: usize,
    y_of: &dyn Fn(&Point) -> f64,
) -> (String, Vec<Series>) {
    let r = Results {
        design: d,
        points,
        trials: &[],
    };
    let pn = &d.panels[pi];
    let line = |name: &str| Series {
        label: name.to_string(),
        points: points
            .iter()
            .filter(|p| p.implementation == name && p.panel == d.panel_key(pi))
            .map(|p| (p.x, y_of(p)))
            .collect(),
    };
    let x = r.last_x(pi);
    let has = |name: &str| {
        points
            .iter()
            .any(|p| p.implementation == name && p.panel == d.panel_key(pi))
    };
    let base = d.baseline_of(pi).filter(|b| has(b));
    let refs: Vec<&str> = d
        .imps
        .iter()
        .filter(|i| i.role == Role::Reference && has(&i.name) && Some(i.name.as_str()) != base)
        .map(|i| i.name.as_str())
        .collect();
    let fixed: Vec<&str> = base
        .into_iter()
        .chain(refs.iter().copied().filter(|_| refs.len() <= 2))
        .collect();
    let mut rest: Vec<(&str, f64)> = d
        .imps
        .iter()
        .filter(|i| !fixed.contains(&i.name.as_str()))
        .filter_map(|i| r.value(&i.name, pi, x).map(|v| (i.name.as_str(), v)))
        .collect();
    rest.sort_by(|a, b| d.goodness(b.1, a.1).total_cmp(&1.0));
    let room = MAX_LINES.saturating_sub(fixed.len() + d.guides.len());
    let shown = rest.len().min(room);
    let mut lines: Vec<Series> = rest[..shown].iter().map(|(n, _)| line(n)).collect();
    lines.extend(fixed.iter().map(|n| line(n)));
    let (x0, x1) = (pn.xs.first().copied().unwrap_or(0.0), x);
    lines.extend(d.guides.iter().map(|g| Series {
        label: g.label.clone(),
        points: vec![(x0, g.y), (x1, g.y)],
    }));
    let mut t = title.to_string();
    if !pn.label.is_empty() {
        t = format!("{t}: {}", pn.label);
    }
    if shown < rest.len() {
        t = format!(
            "{t} (the best {shown} of {} at {}; all in the table)",
            rest.len(),
            r.at(pi, x)
        );
    }
    (t, lines)
}

/// What the experiment contributes besides its sweep.
#[derive(Debug, Default)]
pub struct Verdicts {
    /// The paper's conclusion, as a statement (or what the measurement is).
    pub conclusion: String,
    /// Its clauses.
    pub clauses: Vec<Clause>,
    /// Lines printed after the clauses (observations, warnings).
    pub notes: Vec<String>,
    /// What it recommends.
    pub advice: Vec<AdviceRule>,
    /// Whether the clauses are mpsync's targets rather than a paper's
    /// conclusion: the verdict is then a measurement, its clauses "met" or
    /// not.
    pub targets: bool,
}

/// Everything a model-based run produces: its record and its figure.
#[allow(
    clippy::too_many_arguments,
    reason = "the run's parts, each of a different kind; every experiment calls it once"
)]
pub fn finish(
    exp: &Experiment,
    p: &Params,
    preempt: Preempt,
    d: &Design,
    trials: Vec<Trial>,
    v: Verdicts,
    params: serde_json::Value,
    started: Instant,
) -> (RunRecord, String) {
    let points = summarize(d, &trials);
    let r = Results {
        design: d,
        points: &points,
        trials: &trials,
    };
    let clauses: Vec<ClauseResult> = v.clauses.iter().map(|c| c.judge(&r)).collect();
    let advice: Vec<Advice> = v.advice.iter().filter_map(|a| advise(a, &r)).collect();
    let svg = figure(exp.id, d, &points);
    let rec = RunRecord {
        experiment: exp.id.into(),
        paper: exp.reference.into(),
        title: exp.title.into(),
        preempt: preempt.name().into(),
        started_unix: crate::unix_now(),
        duration_s: started.elapsed().as_secs_f64(),
        machine: Machine::detect(),
        params: {
            // The experiment's own parameters beside the common ones and the
            // implementations, at the top level as every record has them.
            let mut all = match params {
                serde_json::Value::Object(m) => m,
                serde_json::Value::Null => serde_json::Map::new(),
                other => serde_json::Map::from_iter([("experiment".to_string(), other)]),
            };
            all.insert("common".into(), serde_json::json!(p));
            all.entry("implementations").or_insert_with(|| {
                serde_json::json!(d.imps.iter().map(|i| i.name.as_str()).collect::<Vec<_>>())
            });
            // Who is whose and which way is better, for readers of the record
            // that have no design (`repro scale`'s table).
            let named = |role: Role| {
                serde_json::json!(
                    d.imps
                        .iter()
                        .filter(|i| i.role == role)
                        .map(|i| i.name.as_str())
                        .collect::<Vec<_>>()
                )
            };
            all.insert(
                "roles".into(),
                serde_json::json!({ "ours": named(Role::Ours), "peers": named(Role::Peer) }),
            );
            all.insert(
                "better".into(),
                serde_json::json!(if d.better == Better::Lower {
                    "lower"
                } else {
                    "higher"
                }),
            );
            serde_json::Value::Object(all)
        },
        busy_iters_per_us: mpsync::util::busy::BusyWork::global().iters_per_us(),
        unit: d.unit.clone(),
        x_label: d.x_label.clone(),
        baseline: match (&d.baseline, d.panels.iter().any(|p| p.baseline.is_some())) {
            (_, true) => d
                .panels
                .iter()
                .filter_map(|p| Some(format!("{}: {}", p.label, p.baseline.as_ref()?)))
                .collect::<Vec<_>>()
                .join("; "),
            (Some(b), false) => b.clone(),
            (None, false) => "none (values as measured)".into(),
        },
        trials,
        points,
        extra: serde_json::Value::Null,
        verdict: {
            let mut verdict = Verdict::from_clauses(v.conclusion, clauses, v.notes);
            if v.targets {
                verdict.status = crate::output::Status::Measurement;
            }
            verdict
        },
        advice,
    };
    (rec, svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn design() -> Design {
        Design::single(
            "threads",
            "ops/s",
            Better::Higher,
            vec![1.0, 4.0],
            vec![
                Imp::ours("A", "mutex"),
                Imp::ours("B", "mutex"),
                Imp::peer("P", "mutex"),
                Imp::reference("ceiling"),
            ],
            3,
        )
        .baseline("P")
    }

    fn measured(d: &Design) -> Vec<Trial> {
        let m = |c: &Cell<'_>| {
            let base = match c.imp.name.as_str() {
                "A" => 30.0,
                "B" => 10.0,
                "P" => 20.0,
                _ => 100.0,
            };
            Ok::<_, anyhow::Error>(Trial {
                value: base * c.x + f64::from(c.trial),
                censored_at: (c.imp.name == "B" && c.x == 4.0).then_some(0.5),
                ..Trial::default()
            })
        };
        let cells = d.cells();
        cells
            .iter()
            .map(|c| {
                let mut t = m(c).unwrap();
                t.implementation.clone_from(&c.imp.name);
                t.x = c.x;
                t.trial = c.trial;
                t
            })
            .collect()
    }

    #[test]
    fn rounds_interleave_and_rotate_the_first_implementation() {
        let d = design();
        let cells = d.cells();
        assert_eq!(cells.len(), 3 * 2 * 4);
        // Every trial 0 comes before any trial 1.
        let first_1 = cells.iter().position(|c| c.trial == 1).unwrap();
        assert!(cells[..first_1].iter().all(|c| c.trial == 0));
        assert_eq!(cells[0].imp.name, "A");
        assert_eq!(cells[first_1].imp.name, "B");
    }

    #[test]
    fn summaries_normalize_to_the_baseline_and_rank_by_better() {
        let d = design();
        let trials = measured(&d);
        let points = summarize(&d, &trials);
        let r = Results {
            design: &d,
            points: &points,
            trials: &trials,
        };
        assert_eq!(r.value("A", 0, 4.0), Some(121.0));
        let a = points
            .iter()
            .find(|p| p.implementation == "A" && p.x == 4.0)
            .unwrap();
        assert!((a.normalized - 121.0 / 81.0).abs() < 1e-9);
        let ranked: Vec<&str> = r
            .ranked(Role::Ours, Some("mutex"), 0, 4.0)
            .iter()
            .map(|(i, _)| i.name.as_str())
            .collect();
        assert_eq!(ranked, ["A", "B"]);
        assert!(r.censored("B", 0, 4.0) && !r.censored("A", 0, 4.0));
    }

    #[test]
    fn clauses_hold_fail_or_cannot_be_judged_and_say_so() {
        let d = design();
        let trials = measured(&d);
        let points = summarize(&d, &trials);
        let r = Results {
            design: &d,
            points: &points,
            trials: &trials,
        };
        let holds = Clause::ratio_at_most("P ≤ A", Some("1.0"), "P", "A", 0, 1.0).judge(&r);
        assert_eq!(holds.holds, Some(true));
        assert_eq!(holds.at, "threads 4");
        let fails = Clause::ratio_at_most("A ≤ B", None, "A", "B", 0, 1.0).judge(&r);
        assert_eq!(fails.holds, Some(false));
        assert!(fails.ours.contains("censored"), "{}", fails.ours);
        let unjudged = Clause::ratio_at_most("Z ≤ A", None, "Z", "A", 0, 1.0).judge(&r);
        assert_eq!(unjudged.holds, None);
        let v = Verdict::from_clauses("c", vec![holds.clone(), fails], vec![]);
        assert_eq!(v.status, crate::output::Status::DoesNotHold);
        assert_eq!(v.summary(), "1 of 2 clauses hold");
        let v = Verdict::from_clauses("c", vec![holds, unjudged], vec!["note".into()]);
        assert_eq!(v.status, crate::output::Status::PartlyEvaluable);
        assert_eq!(v.summary(), "1 of 2 clauses hold, 1 not judged");
        assert_eq!(v.details.last().map(String::as_str), Some("note"));
    }

    #[test]
    fn advice_picks_the_best_of_its_kind_with_both_margins() {
        let d = design();
        let trials = measured(&d);
        let points = summarize(&d, &trials);
        let r = Results {
            design: &d,
            points: &points,
            trials: &trials,
        };
        let a = advise(
            &AdviceRule {
                kind: "mutex",
                panel: 0,
            },
            &r,
        )
        .unwrap();
        assert_eq!(a.best, "A");
        assert_eq!(a.over_runner_up.as_deref(), Some("1.49× P"));
        assert_eq!(a.over_other_side.as_deref(), Some("1.49× P"));
        assert!(
            advise(
                &AdviceRule {
                    kind: "queue",
                    panel: 0
                },
                &r
            )
            .is_none()
        );
    }

    #[test]
    fn the_figure_draws_at_most_eight_lines_a_panel_best_first() {
        let imps: Vec<Imp> = (0..20)
            .map(|i| Imp::ours(format!("L{i}"), "mutex"))
            .collect();
        let d = Design::single("threads", "ops/s", Better::Higher, vec![1.0, 2.0], imps, 1)
            .baseline("L0");
        let trials = d
            .cells()
            .iter()
            .map(|c| Trial {
                implementation: c.imp.name.clone(),
                x: c.x,
                value: c.x * (1.0 + c.imp.name[1..].parse::<f64>().unwrap()),
                ..Trial::default()
            })
            .collect::<Vec<_>>();
        let svg = figure("t", &d, &summarize(&d, &trials));
        assert_eq!(svg.matches("<polyline").count(), 8);
        assert!(svg.contains("the best 7 of 19"), "{svg}");
        assert!(svg.contains(">L19<") && svg.contains(">L0<") && !svg.contains(">L12<"));
    }

    #[test]
    fn one_x_is_drawn_as_bars_of_every_implementation() {
        let imps: Vec<Imp> = (0..12)
            .map(|i| Imp::ours(format!("L{i}"), "mutex"))
            .collect();
        let d = Design::single("threads", "ns", Better::Lower, vec![1.0], imps, 1);
        let trials = d
            .cells()
            .iter()
            .map(|c| Trial {
                implementation: c.imp.name.clone(),
                x: c.x,
                value: 1.0,
                ..Trial::default()
            })
            .collect::<Vec<_>>();
        let svg = figure("t", &d, &summarize(&d, &trials));
        assert_eq!(svg.matches("<rect").count(), 13);
    }

    #[test]
    fn a_series_measure_runs_once_per_round_and_gets_the_xs_of_its_panel() {
        let mut d = Design::single(
            "seconds",
            "pending",
            Better::Lower,
            vec![0.5, 1.0, 1.5],
            vec![Imp::ours("A", "reclaimer"), Imp::ours("B", "reclaimer")],
            2,
        );
        let mut runs = Vec::new();
        let trials = collect_series("t", &d, &mut |c| {
            runs.push((c.imp.name.clone(), c.trial, c.x));
            let k = if c.imp.name == "A" { 10.0 } else { 1.0 };
            Ok(Some(
                (1..=3)
                    .map(|i| Trial {
                        value: k * f64::from(i) + f64::from(c.trial),
                        ..Trial::default()
                    })
                    .collect(),
            ))
        })
        .unwrap();
        // One run per implementation and round, rotated; x = where the series ends.
        let names: Vec<(&str, u32)> = runs.iter().map(|r| (r.0.as_str(), r.1)).collect();
        assert_eq!(names, [("A", 0), ("B", 0), ("B", 1), ("A", 1)]);
        assert!(runs.iter().all(|r| r.2 == 1.5));
        assert_eq!(trials.len(), 12);
        let points = summarize(&d, &trials);
        let r = Results {
            design: &d,
            points: &points,
            trials: &trials,
        };
        assert_eq!(r.series("A", 0), [(0.5, 10.5), (1.0, 20.5), (1.5, 30.5)]);
        // A series of the wrong length is refused.
        let short = collect_series("t", &d, &mut |_| Ok(Some(vec![Trial::default()])));
        assert!(
            short
                .unwrap_err()
                .to_string()
                .contains("1 samples, not one per x (3)")
        );
        // A guide is drawn across the panel, in the legend, beside the lines.
        d.guides.push(Guide {
            label: "bound".into(),
            y: 25.0,
        });
        let svg = figure("t", &d, &points);
        assert_eq!(svg.matches("<polyline").count(), 3, "{svg}");
        assert!(svg.contains(">bound<"), "{svg}");
    }
}
