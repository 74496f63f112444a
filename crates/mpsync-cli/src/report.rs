//! `report.html`: every run's figure, verdict and parameters on one page, laid
//! out like the papers' figures with each paper's conclusion beside them.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::output::{Status, read_runs};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Regenerates `OUT/report.html` from every run under `out`; returns its path.
pub fn write_report(out: &Path) -> anyhow::Result<PathBuf> {
    let runs = read_runs(out)?;
    let mut h = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>mpsync report</title><style>\
         body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}\
         .run{border-top:2px solid #ccc;padding:1em 0}\
         .holds{color:#1a7f37}.does_not_hold{color:#c62828}.partly_evaluable{color:#b26a00}.measurement{color:#555}\
         table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:2px 8px;text-align:right}\
         th{background:#f5f5f5}td:first-child{text-align:left}pre{background:#f7f7f7;padding:.5em;font-size:12px;overflow:auto}\
         </style></head><body><h1>mpsync: the papers' experiments on this machine</h1>",
    );
    if let Some((_, r)) = runs.first() {
        let m = &r.machine;
        let _ = write!(
            h,
            "<p>{} · {} · {} processors · Linux {} · {} · mpsync {} ({}) · rseq slice extension: {} · preemption answers: {}</p>",
            esc(&m.hostname),
            esc(&m.cpu_model),
            m.cores,
            esc(&m.kernel),
            esc(&m.rustc),
            esc(&m.mpsync_version),
            esc(&m.git_rev),
            esc(&m.slice_extension),
            esc(if m.sched.preemption_answers.is_empty() {
                "not recorded"
            } else {
                &m.sched.preemption_answers
            })
        );
    }
    if runs.is_empty() {
        h.push_str("<p>No results yet: run <code>mpsync repro all --quick</code>.</p>");
    }
    h.push_str("<h2>Verdicts</h2><table><tr><th>experiment</th><th>preempt</th><th>paper</th><th>verdict</th></tr>");
    for (_, r) in &runs {
        let cls = serde_json::to_value(r.verdict.status)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        let _ = write!(
            h,
            "<tr><td><a href=\"#{id}-{p}\">{id}</a></td><td>{p}</td><td>{paper}</td><td class=\"{cls}\">{v}</td></tr>",
            id = esc(&r.experiment),
            p = esc(&r.preempt),
            paper = esc(&r.paper),
            v = r.verdict.status.label()
        );
    }
    h.push_str("</table>");
    for (dir, r) in &runs {
        let svg = std::fs::read_to_string(dir.join("figure.svg")).unwrap_or_default();
        let cls = match r.verdict.status {
            Status::Holds => "holds",
            Status::DoesNotHold => "does_not_hold",
            Status::PartlyEvaluable => "partly_evaluable",
            Status::Measurement => "measurement",
        };
        let _ = write!(
            h,
            "<div class=\"run\" id=\"{}-{}\"><h2>{} <small>({}, --preempt {})</small></h2><p>{}</p>{}\
             <p><b>Paper's conclusion:</b> {}<br><b>On this machine:</b> <span class=\"{cls}\">{}</span></p><ul>",
            esc(&r.experiment),
            esc(&r.preempt),
            esc(&r.experiment),
            esc(&r.paper),
            esc(&r.preempt),
            esc(&r.title),
            svg,
            esc(&r.verdict.conclusion),
            r.verdict.status.label()
        );
        for d in &r.verdict.details {
            let _ = write!(h, "<li>{}</li>", esc(d));
        }
        h.push_str("</ul>");
        // Summary table: rows = implementations, columns = x values.
        let mut xs: Vec<f64> = r.points.iter().map(|p| p.x).collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        let mut impls: Vec<&str> = Vec::new();
        for p in &r.points {
            if !impls.contains(&p.implementation.as_str()) {
                impls.push(&p.implementation);
            }
        }
        if !xs.is_empty() {
            let _ = write!(
                h,
                "<table><tr><th>{} ({}; normalized to {})</th>",
                esc(&r.x_label),
                esc(&r.unit),
                esc(&r.baseline)
            );
            for x in &xs {
                let _ = write!(h, "<th>{x}</th>");
            }
            h.push_str("</tr>");
            for i in &impls {
                let _ = write!(h, "<tr><td>{}</td>", esc(i));
                for x in &xs {
                    match r
                        .points
                        .iter()
                        .find(|p| p.implementation == *i && p.x == *x)
                    {
                        Some(p) => {
                            let _ = write!(h, "<td>{:.4} ({:.2})</td>", p.value, p.normalized);
                        }
                        None => h.push_str("<td></td>"),
                    }
                }
                h.push_str("</tr>");
            }
            h.push_str("</table>");
        }
        let _ = write!(
            h,
            "<details><summary>parameters, statistics, provenance</summary><pre>{}\n{}\nmachine: {}\nduration: {:.1} s</pre></details></div>",
            esc(&serde_json::to_string_pretty(&r.params).unwrap_or_default()),
            esc(&serde_json::to_string_pretty(&r.extra).unwrap_or_default()),
            esc(&serde_json::to_string(&r.machine).unwrap_or_default()),
            r.duration_s
        );
    }
    h.push_str("</body></html>\n");
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let path = out.join("report.html");
    std::fs::write(&path, h).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}
