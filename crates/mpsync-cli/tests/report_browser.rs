//! The report as a reader sees it: a few real (tiny) runs, the report made
//! from them, and the page loaded in headless Chromium, where a script
//! checks that every figure renders and that no text of a figure (title,
//! axis label, tick, legend entry) falls outside it.
//!
//! Chromium is a Debian package (`apt-get install chromium`); without it the
//! test says so and passes, unless `MPSYNC_BROWSER_REQUIRED=1` (set by
//! `.ci/run`, which installs it), where a missing browser fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const CHECK: &str = r#"<script>
(function () {
  var bad = [], figures = 0;
  document.querySelectorAll('svg').forEach(function (svg, i) {
    var box = svg.getBoundingClientRect();
    if (box.width < 50 || box.height < 50) {
      bad.push('figure ' + i + ' renders ' + box.width + 'x' + box.height);
      return;
    }
    figures++;
    var title = (svg.querySelector('text') || {}).textContent || ('figure ' + i);
    svg.querySelectorAll('text').forEach(function (t) {
      var r = t.getBoundingClientRect();
      if (!t.textContent.trim()) return;
      if (r.left < box.left - 0.5 || r.right > box.right + 0.5 ||
          r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5) {
        bad.push(title + ': "' + t.textContent + '" is clipped (' +
          [r.left - box.left, r.top - box.top, r.right - box.left, r.bottom - box.top]
            .map(Math.round).join(',') + ' in ' + Math.round(box.width) + 'x' + Math.round(box.height) + ')');
      }
    });
  });
  var pre = document.createElement('pre');
  pre.id = 'mpsync-check';
  pre.textContent = 'CHECK ' + JSON.stringify({figures: figures, bad: bad});
  document.body.appendChild(pre);
})();
</script>"#;

fn browser() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|b| {
            let ok = Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success());
            ok.then(|| PathBuf::from(b))
        })
}

fn mpsync(out: &Path, args: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_mpsync"))
        .args(args)
        .arg("--out")
        .arg(out)
        .env("MPSYNC_OVERSUB_LOCKS", "bounded-steal,Ticket-np")
        .output()
        .expect("mpsync runs");
    assert!(
        o.status.success(),
        "mpsync {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Runs, into `dir`, experiments whose figures are of every shape: a bar
/// chart (one x), small multiples with a log axis (several
/// configurations), panels per kind, and a series with a guide line.
fn run_figures(dir: &Path) {
    mpsync(
        dir,
        &["run", "lock-latency", "--scale", "0.001", "--trials", "1"],
    );
    mpsync(
        dir,
        &["run", "barrier-oversub", "--scale", "0.01", "--trials", "1"],
    );
    mpsync(
        dir,
        &[
            "run",
            "lock-oversub",
            "--threads",
            "1,4",
            "--scale",
            "0.07",
            "--trials",
            "1",
        ],
    );
    mpsync(
        dir,
        &[
            "run",
            "ds-oversub",
            "--threads",
            "1,3",
            "--scale",
            "0.07",
            "--trials",
            "1",
        ],
    );
    mpsync(
        dir,
        &["run", "hart-base", "--scale", "0.01", "--trials", "1"],
    );
    mpsync(dir, &["run", "hart-memory", "--scale", "0.05"]);
}

/// The check script's JSON from `page` (the report with [`CHECK`]) opened
/// in `chromium`.
fn check_in_browser(chromium: &Path, page: &Path, started: Instant) -> serde_json::Value {
    let o = Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    let dom = String::from_utf8_lossy(&o.stdout);
    const MARK: &str = "id=\"mpsync-check\">CHECK ";
    let Some(at) = dom.find(MARK) else {
        panic!(
            "the check script did not run in {chromium:?} ({:?}); stderr: {}",
            started.elapsed(),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let rest = &dom[at + MARK.len()..];
    let line = rest[..rest.find("</pre>").unwrap_or(rest.len())]
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    serde_json::from_str(&line).expect("the check's JSON")
}

#[test]
fn every_figure_renders_and_no_text_is_clipped() {
    let Some(chromium) = browser() else {
        let required = std::env::var("MPSYNC_BROWSER_REQUIRED").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "MPSYNC_BROWSER_REQUIRED=1 but no chromium: apt-get install chromium"
        );
        eprintln!("SKIPPED: no chromium here (apt-get install chromium to run this test)");
        return;
    };
    let dir = std::env::temp_dir().join(format!("mpsync-report-browser-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    run_figures(&dir);
    let html = std::fs::read_to_string(dir.join("report.html")).expect("a report");
    assert!(html.contains("On this machine, use"), "no summary");
    let page = dir.join("report-check.html");
    std::fs::write(&page, html.replace("</body>", &format!("{CHECK}</body>"))).unwrap();
    let started = Instant::now();
    let v = check_in_browser(&chromium, &page, started);
    let figures = v["figures"].as_u64().unwrap_or(0);
    assert!(figures >= 5, "only {figures} figures rendered: {v}");
    let bad = v["bad"].as_array().cloned().unwrap_or_default();
    assert!(bad.is_empty(), "{} problems: {bad:#?}", bad.len());
    assert!(started.elapsed() < Duration::from_secs(120));
    let _ = std::fs::remove_dir_all(&dir);
}
