//! `report.html`: what to use on this machine, every verdict clause by
//! clause, and every run's figure, tables and parameters on one page, each
//! paper's conclusion beside its figure.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::output::{Machine, RunRecord, Status, read_runs};
use crate::svg::sig3;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const STYLE: &str = "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222;line-height:1.4}\
    .run{border-top:2px solid #ccc;padding:1em 0}\
    .holds{color:#1a7f37}.does_not_hold{color:#c62828}.partly_evaluable{color:#b26a00}.measurement{color:#555}\
    .smoke{background:#fff3cd;border:1px solid #e0c36a;padding:.1em .4em;font-size:12px;border-radius:3px}\
    table{border-collapse:collapse;font-size:13px;margin:.5em 0}td,th{border:1px solid #ddd;padding:2px 8px;text-align:right;vertical-align:top}\
    th{background:#f5f5f5}td:first-child,td.l{text-align:left}pre{background:#f7f7f7;padding:.5em;font-size:12px;overflow:auto}\
    svg{max-width:100%;height:auto}";

/// The status as a CSS class.
fn class(s: Status) -> &'static str {
    match s {
        Status::Holds => "holds",
        Status::DoesNotHold => "does_not_hold",
        Status::PartlyEvaluable => "partly_evaluable",
        Status::Measurement => "measurement",
    }
}

/// A `Debug`-printed availability ("Unavailable(\"kernel …\")", recorded
/// by runs before it was said in words) as words.
fn availability(s: &str) -> String {
    if let Some(rest) = s.strip_prefix("Unavailable(\"") {
        return format!("not available ({})", rest.trim_end_matches("\")"));
    }
    if let Some(rest) = s.strip_prefix("unavailable: ") {
        return format!("not available ({rest})");
    }
    if s == "Available" || s == "available" {
        return "available (detected; mpsync does not drive it yet)".into();
    }
    s.to_string()
}

/// The machine, in words.
pub fn machine_line(m: &Machine) -> String {
    let answers = match m.sched.preemption_answers.as_str() {
        "" => "not recorded".to_string(),
        "ebpf" => "the kernel (eBPF)".to_string(),
        other => match &m.sched.ebpf_off_reason {
            Some(why) => format!("{other} ({why})"),
            None => other.to_string(),
        },
    };
    format!(
        "{} · {} · {} processors · Linux {} · {} · mpsync {} ({}) · rseq time-slice extension: {} · preemption answers: {answers}",
        m.hostname,
        m.cpu_model,
        m.cores,
        m.kernel,
        m.rustc,
        m.mpsync_version,
        m.git_rev,
        availability(&m.slice_extension),
    )
}

/// "On this machine, use …": the same rows as `mpsync advise`.
fn use_section(h: &mut String, runs: &[(PathBuf, RunRecord)]) {
    h.push_str("<h2>On this machine, use …</h2><table><tr><th>for a</th><th>use</th><th>margin</th><th>judged at</th><th>from</th></tr>");
    for row in crate::advise::rows(runs) {
        match &row.found {
            Some((a, run, quick)) => {
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td class=\"l\"><b>{}</b>{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\"><a href=\"#{}\">{}</a>{}</td></tr>",
                    esc(row.kind),
                    esc(&a.best),
                    crate::advise::caveat(&a.kind, &a.best)
                        .map(|c| format!("<br><small>but: {}</small>", esc(c)))
                        .unwrap_or_default(),
                    esc(&crate::advise::margins(a)),
                    esc(&a.at),
                    esc(&run.replace('@', "-")),
                    esc(run),
                    if *quick {
                        " <span class=\"smoke\">smoke run</span>"
                    } else {
                        ""
                    }
                );
            }
            None => {
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td class=\"l\" colspan=\"4\">no result yet: run <code>mpsync run {}</code></td></tr>",
                    esc(row.kind),
                    esc(&row.sources.join(" / "))
                );
            }
        }
    }
    h.push_str("</table>");
}

/// Hart's guidance (Fig. 5.20–5.21) beside what this machine measured.
fn hart_section(h: &mut String, runs: &[(PathBuf, RunRecord)]) {
    h.push_str("<h2>Hart's guidance beside this machine</h2><p>papers/002 §5.2.6, Fig. 5.20 (reclamation scheme) and Fig. 5.21 (lock-free or concurrently-readable table), with what the <code>hart-*</code> runs here measured.</p><table><tr><th>figure</th><th>workload</th><th>Hart</th><th>Hart's words</th><th>this machine</th></tr>");
    for r in crate::hart_guide::rows(runs) {
        let cls = match r.agrees() {
            Some(true) => "holds",
            Some(false) => "does_not_hold",
            None => "measurement",
        };
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=\"l\">{}</td><td class=\"l\"><b>{}</b></td><td class=\"l\"><small>{}</small></td><td class=\"{cls} l\">{}</td></tr>",
            r.branch.tree.figure(),
            esc(r.branch.when),
            esc(r.branch.recommend),
            esc(r.branch.hart),
            esc(&crate::hart_guide::verdict(&r))
        );
    }
    h.push_str("</table>");
}

/// The verdict table, with clause counts.
fn verdict_table(h: &mut String, runs: &[(PathBuf, RunRecord)]) {
    h.push_str("<h2>Verdicts</h2><table><tr><th>experiment</th><th>preempt</th><th>paper</th><th>verdict</th><th>clauses</th></tr>");
    for (_, r) in runs {
        let _ = write!(
            h,
            "<tr><td><a href=\"#{id}-{p}\">{id}</a></td><td>{p}</td><td class=\"l\">{paper}</td><td class=\"{cls} l\">{v}{smoke}</td><td class=\"l\">{c}</td></tr>",
            id = esc(&r.experiment),
            p = esc(&r.preempt),
            paper = esc(&r.paper),
            cls = class(r.verdict.status),
            v = r.verdict.status.label(),
            smoke = if r.quick() {
                " <span class=\"smoke\">smoke run</span>"
            } else {
                ""
            },
            c = esc(&r.verdict.summary())
        );
    }
    h.push_str("</table>");
}

/// The clauses of a run, one row each; a list of its details for runs
/// without clauses; then its notes.
fn clauses(h: &mut String, r: &RunRecord) {
    let v = &r.verdict;
    if v.clauses.is_empty() {
        h.push_str("<ul>");
        for d in &v.details {
            let _ = write!(h, "<li>{}</li>", esc(d));
        }
        h.push_str("</ul>");
        return;
    }
    h.push_str(
        "<table><tr><th>clause</th><th>judged at</th><th>ours</th><th>paper</th><th></th></tr>",
    );
    for c in &v.clauses {
        let (cls, mark) = match c.holds {
            Some(true) => ("holds", "holds"),
            Some(false) => ("does_not_hold", "does not hold"),
            None => ("partly_evaluable", "not judged"),
        };
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"{cls} l\">{mark}</td></tr>",
            esc(&c.statement),
            esc(&c.at),
            esc(&c.ours),
            esc(c.paper.as_deref().unwrap_or("–")),
        );
    }
    h.push_str("</table>");
    let notes = v.details.get(v.clauses.len()..).unwrap_or_default();
    if !notes.is_empty() {
        h.push_str("<ul>");
        for d in notes {
            let _ = write!(h, "<li>{}</li>", esc(d));
        }
        h.push_str("</ul>");
    }
}

/// The data tables of a run: one per configuration, rows = implementations,
/// columns = x values, three significant digits.
fn data_tables(h: &mut String, r: &RunRecord) {
    let mut panels: Vec<Option<&str>> = Vec::new();
    for p in &r.points {
        if !panels.contains(&p.panel.as_deref()) {
            panels.push(p.panel.as_deref());
        }
    }
    let rows: usize = r.points.len();
    let _ = write!(
        h,
        "<details><summary>the values ({}; normalized to {}): {rows} points</summary>",
        esc(&r.unit),
        esc(&r.baseline)
    );
    for panel in panels {
        let pts: Vec<_> = r
            .points
            .iter()
            .filter(|p| p.panel.as_deref() == panel)
            .collect();
        let mut xs: Vec<f64> = pts.iter().map(|p| p.x).collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        let mut impls: Vec<&str> = Vec::new();
        for p in &pts {
            if !impls.contains(&p.implementation.as_str()) {
                impls.push(&p.implementation);
            }
        }
        if let Some(l) = panel {
            let _ = write!(h, "<h4>{}</h4>", esc(l));
        }
        let _ = write!(h, "<table><tr><th>{}</th>", esc(&r.x_label));
        for x in &xs {
            let _ = write!(h, "<th>{}</th>", crate::model::fmt_x(*x));
        }
        h.push_str("</tr>");
        for i in &impls {
            let _ = write!(h, "<tr><td>{}</td>", esc(i));
            for x in &xs {
                match pts.iter().find(|p| p.implementation == *i && p.x == *x) {
                    Some(p) => {
                        let _ = write!(h, "<td>{} ({})</td>", sig3(p.value), sig3(p.normalized));
                    }
                    None => h.push_str("<td></td>"),
                }
            }
            h.push_str("</tr>");
        }
        h.push_str("</table>");
    }
    h.push_str("</details>");
}

/// A mark for a clause's outcome.
fn mark(holds: Option<bool>) -> &'static str {
    match holds {
        Some(true) => "holds",
        Some(false) => "does not hold",
        None => "not judged",
    }
}

/// The contention-matched runs (`--match-contention`) beside the plain runs
/// of the same experiment and preemption: each clause, and each
/// implementation's time over the baseline at the last point, side by side.
fn matched_section(h: &mut String, runs: &[(PathBuf, RunRecord)]) {
    let pairs: Vec<(&RunRecord, &RunRecord)> = runs
        .iter()
        .filter_map(|(_, m)| {
            let base = m.preempt.strip_suffix(crate::output::MATCHED)?;
            let plain = runs
                .iter()
                .find(|(_, r)| r.experiment == m.experiment && r.preempt == base)?;
            Some((&plain.1, m))
        })
        .collect();
    if pairs.is_empty() {
        return;
    }
    h.push_str("<h2>Contention-matched runs beside the plain ones</h2>");
    for (plain, m) in pairs {
        let _ = write!(
            h,
            "<h3>{id} <small>(--preempt {p}: <a href=\"#{id}-{p}\">plain</a> · <a href=\"#{id}-{pm}\">matched</a>)</small></h3>",
            id = esc(&m.experiment),
            p = esc(&plain.preempt),
            pm = esc(&m.preempt)
        );
        if let Some(n) = m
            .verdict
            .details
            .iter()
            .find(|d| d.starts_with("contention-matched:"))
        {
            let _ = write!(h, "<p>{}</p>", esc(n));
        }
        h.push_str("<table><tr><th>clause</th><th>judged at</th><th>plain</th><th>contention-matched</th></tr>");
        for c in &m.verdict.clauses {
            let p = plain
                .verdict
                .clauses
                .iter()
                .find(|pc| pc.statement == c.statement);
            let _ = write!(
                h,
                "<tr><td>{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{} ({})</td></tr>",
                esc(&c.statement),
                esc(&c.at),
                p.map_or("–".to_string(), |p| format!(
                    "{} ({})",
                    esc(&p.ours),
                    mark(p.holds)
                )),
                esc(&c.ours),
                mark(c.holds)
            );
        }
        h.push_str("</table>");
        let last = |r: &RunRecord| r.points.iter().map(|p| p.x).fold(f64::MIN, f64::max);
        let (lp, lm) = (last(plain), last(m));
        let _ = write!(
            h,
            "<table><tr><th>time / {} at {} {}</th><th>plain</th><th>contention-matched</th></tr>",
            esc(&m.baseline),
            esc(&m.x_label),
            crate::model::fmt_x(lm)
        );
        for q in m.points.iter().filter(|q| q.x == lm && q.panel.is_none()) {
            let p = plain
                .points
                .iter()
                .find(|p| p.x == lp && p.implementation == q.implementation && p.panel.is_none());
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&q.implementation),
                p.map_or("–".to_string(), |p| sig3(p.normalized)),
                sig3(q.normalized)
            );
        }
        h.push_str("</table>");
    }
}

/// One run's section.
fn run_section(h: &mut String, dir: &Path, r: &RunRecord) {
    let svg = std::fs::read_to_string(dir.join("figure.svg")).unwrap_or_default();
    let summary = r.verdict.summary();
    let _ = write!(
        h,
        "<div class=\"run\" id=\"{id}-{p}\"><h2>{id} <small>({paper}, --preempt {p})</small>{smoke}</h2><p>{title}</p>{svg}\
         <p><b>Paper's conclusion:</b> {concl}<br><b>On this machine:</b> <span class=\"{cls}\">{status}</span>{summary}</p>",
        id = esc(&r.experiment),
        p = esc(&r.preempt),
        paper = esc(&r.paper),
        smoke = if r.quick() {
            " <span class=\"smoke\">--quick smoke run: short trials, few points; not a measurement to quote</span>"
        } else {
            ""
        },
        title = esc(&r.title),
        concl = esc(&r.verdict.conclusion),
        cls = class(r.verdict.status),
        status = r.verdict.status.label(),
        summary = if summary.is_empty() {
            String::new()
        } else {
            format!(" ({})", esc(&summary))
        },
    );
    clauses(h, r);
    data_tables(h, r);
    let _ = write!(
        h,
        "<details><summary>parameters, statistics, provenance</summary><pre>{}\n{}\nmachine: {}\nduration: {:.1} s</pre></details></div>",
        esc(&serde_json::to_string_pretty(&r.params).unwrap_or_default()),
        esc(&serde_json::to_string_pretty(&r.extra).unwrap_or_default()),
        esc(&machine_line(&r.machine)),
        r.duration_s
    );
}

/// Regenerates `OUT/report.html` from every run under `out`; returns its path.
pub fn write_report(out: &Path) -> anyhow::Result<PathBuf> {
    let runs = read_runs(out)?;
    let mut h = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>mpsync report</title><style>{STYLE}</style></head><body><h1>mpsync: the papers' experiments on this machine</h1>"
    );
    if let Some((_, r)) = runs.first() {
        let _ = write!(h, "<p>{}</p>", esc(&machine_line(&r.machine)));
    }
    if runs.is_empty() {
        h.push_str("<p>No results yet: run <code>mpsync repro all --quick</code>.</p>");
    }
    if runs.iter().any(|(_, r)| r.quick()) {
        h.push_str("<p><span class=\"smoke\">smoke run</span> marks a <code>--quick</code> run: short trials at few points, to see that everything works and roughly how it compares. Verdicts of a smoke run are indications, not measurements; run without <code>--quick</code> to judge.</p>");
    }
    use_section(&mut h, &runs);
    hart_section(&mut h, &runs);
    verdict_table(&mut h, &runs);
    matched_section(&mut h, &runs);
    for (dir, r) in &runs {
        run_section(&mut h, dir, r);
    }
    h.push_str("</body></html>\n");
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let path = out.join("report.html");
    std::fs::write(&path, h).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn availability_reads_as_words() {
        assert_eq!(
            availability("Unavailable(\"kernel 6.18 has no rseq slice extension\")"),
            "not available (kernel 6.18 has no rseq slice extension)"
        );
        assert_eq!(
            availability("unavailable: no rseq"),
            "not available (no rseq)"
        );
        assert!(availability("Available").starts_with("available (detected"));
    }
}
