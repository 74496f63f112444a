//! The `mpsync` binary end to end: listing, parse errors as clap words them,
//! one-line errors of our own, flags an experiment ignores refused, and real
//! (tiny) runs that write CSV, JSON, SVG, a verdict and the report, and keep
//! the results of an earlier run.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn mpsync(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mpsync"))
        .args(args)
        .output()
        .expect("run mpsync")
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mpsync-cli-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// `mpsync run ID --trials 1 --out OUT ARGS...`: a tiny run into a fresh directory.
fn tiny_run(id: &str, name: &str, args: &[&str]) -> (PathBuf, Output) {
    let out = tmpdir(name);
    let mut all = vec!["run", id, "--trials", "1", "--out", out.to_str().unwrap()];
    all.extend_from_slice(args);
    let o = mpsync(&all);
    (out, o)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn list_shows_the_experiments() {
    let o = mpsync(&["list"]);
    assert!(o.status.success());
    let s = String::from_utf8_lossy(&o.stdout);
    for id in [
        "wks94-mplevel",
        "wks94-procs",
        "lock-latency",
        "sched-overhead",
    ] {
        assert!(s.contains(id), "{id} missing from:\n{s}");
    }
}

#[test]
fn bad_input_gets_one_clear_line_and_a_failing_exit() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let too_many = (cores + 7).to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["run", "wks94-mplevel", "--mp", "0"],
            "multiprogramming level must be >= 1",
        ),
        (
            vec!["run", "wks94-mplevel", "--mp", "1,x"],
            "comma-separated list",
        ),
        (
            vec!["run", "wks94-mplevel", "--procs", &too_many],
            "available processor",
        ),
        (
            vec!["run", "no-such-thing"],
            "unknown experiment 'no-such-thing'",
        ),
        (vec!["run", "wks94-mplevel", "--scale", "0"], "--scale 0"),
        (vec!["run", "wks94-mplevel", "--scale", "-1"], "--scale -1"),
        (
            vec!["run", "wks94-mplevel", "--trials", "0"],
            "at least 1 trial",
        ),
        (
            vec!["run", "wks94-mplevel", "--quantum-ms", "0"],
            "--quantum-ms 0",
        ),
        (vec!["repro", "nope"], "unknown paper 'nope'"),
    ];
    for (args, want) in cases {
        let o = mpsync(&args);
        let e = stderr(&o);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert_eq!(
            e.trim_end().lines().count(),
            1,
            "{args:?}: not one line:\n{e}"
        );
        assert!(e.contains(want), "{args:?}: {e:?} lacks {want:?}");
    }
}

/// A parse error is clap's whole message — what was wrong, the possible values
/// or a "similar argument" tip, the usage line — with clap's exit code 2.
#[test]
fn parse_errors_are_shown_whole() {
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec!["run"],
            vec![
                "the following required arguments were not provided",
                "<ID>",
                "Usage: mpsync run",
            ],
        ),
        (
            vec!["run", "wks94-mplevel", "--preempt", "bogus"],
            vec![
                "invalid value 'bogus' for '--preempt <PREEMPT>'",
                "[possible values: none, emulated, os]",
            ],
        ),
        (
            vec!["run", "wks94-mplevel", "--thread", "2"],
            vec![
                "unexpected argument '--thread' found",
                "tip: a similar argument exists: '--threads'",
                "Usage: mpsync run",
            ],
        ),
        (
            vec!["run", "wks94-mplevel", "--bogus"],
            vec!["unexpected argument '--bogus'", "Usage: mpsync run"],
        ),
    ];
    for (args, want) in cases {
        let o = mpsync(&args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        for w in want {
            assert!(e.contains(w), "{args:?}: {w:?} missing from:\n{e}");
        }
    }
}

/// `mpsync` alone prints the help (to stderr, as a usage error) and fails.
#[test]
fn no_arguments_prints_the_help_and_fails() {
    let o = mpsync(&[]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    for w in ["Usage: mpsync <COMMAND>", "Commands:", "repro", "report"] {
        assert!(e.contains(w), "{w:?} missing from:\n{e}");
    }
}

/// `mpsync list | head`: a reader that has gone is no error (it panicked with
/// "failed printing to stdout: Broken pipe").
#[test]
fn list_into_a_closed_pipe_is_quiet() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = Command::new(env!("CARGO_BIN_EXE_mpsync"))
        .arg("list")
        .stdout(writer)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
}

/// The columns of `list` line up, however long an id is.
#[test]
fn list_columns_are_aligned() {
    let o = mpsync(&["list"]);
    assert!(o.status.success());
    let s = String::from_utf8_lossy(&o.stdout);
    // Where the second column (the paper) starts, in characters.
    let starts: Vec<(usize, &str)> = s
        .lines()
        .map(|l| {
            let id = l.split_whitespace().next().unwrap();
            let rest = &l[id.len()..];
            let pad = rest.len() - rest.trim_start().len();
            (id.chars().count() + pad, l)
        })
        .collect();
    assert!(starts.len() > 30, "{s}");
    for (at, l) in &starts {
        assert_eq!(*at, starts[0].0, "misaligned: {l}");
    }
    let third = |l: &str| {
        let mut it = l.split_whitespace();
        let (id, paper) = (it.next().unwrap(), it.next().unwrap());
        let after = &l[l.find(id).unwrap() + id.len()..];
        let after = &after[after.find(paper).unwrap() + paper.len()..];
        l.chars().count() - after.trim_start().chars().count()
    };
    for (_, l) in &starts {
        assert_eq!(third(l), third(starts[0].1), "title misaligned: {l}");
    }
}

/// `report` of a folder that does not exist, or holds no results, is one
/// clear line and a failing exit, and writes nothing.
#[test]
fn report_needs_a_folder_of_results() {
    let out = tmpdir("report-missing");
    let o = mpsync(&["report", "--out", out.to_str().unwrap()]);
    let e = stderr(&o);
    assert!(!o.status.success(), "{e}");
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(e.contains("no such folder"), "{e}");
    assert!(!out.exists(), "report created {}", out.display());
    std::fs::create_dir_all(&out).unwrap();
    let o = mpsync(&["report", "--out", out.to_str().unwrap()]);
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains("no results in it"), "{e}");
    assert!(!out.join("report.html").exists());
    let _ = std::fs::remove_dir_all(&out);
}

/// A flag the experiment does not read is refused in one line that says what
/// does apply; nothing runs.
#[test]
fn flags_an_experiment_ignores_are_refused() {
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["run", "lock-latency", "--mp", "2"],
            "error: lock-latency has no MP levels: --mp does not apply (it uses --trials, --scale and --seed)",
        ),
        (
            vec!["run", "lock-oversub", "--preempt", "os", "--seed", "3"],
            "error: lock-oversub chooses its own preemption and has no seeded randomness: --preempt and --seed do not apply (it uses --threads, --trials and --scale)",
        ),
        (
            vec!["run", "ms97-counter", "--alloc", "system"],
            "error: ms97-counter has no node allocator to choose: --alloc does not apply",
        ),
        (
            vec!["run", "hart-memory", "--trials", "3"],
            "error: hart-memory has no trials to repeat: --trials does not apply (it uses --alloc, --scale and --seed)",
        ),
        (
            vec!["run", "lock-latency", "--match-contention"],
            "error: lock-latency has no lock program to contention-match: --match-contention does not apply",
        ),
        (
            vec!["repro", "lc98", "--mp", "2"],
            "error: repro lc98: every experiment it runs has no MP levels: --mp does not apply",
        ),
        (
            vec!["repro", "scale", "--mp", "2"],
            "error: repro scale: every experiment it runs has no MP levels: --mp does not apply",
        ),
    ];
    for (args, want) in cases {
        let out = tmpdir("refused");
        let mut all = args.clone();
        all.extend(["--out", out.to_str().unwrap()]);
        let o = mpsync(&all);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {e}");
        assert_eq!(
            e.trim_end().lines().count(),
            1,
            "{args:?}: not one line:\n{e}"
        );
        assert!(
            e.starts_with(want),
            "{args:?}: {e:?} does not start with {want:?}"
        );
        assert!(!out.exists(), "{args:?} ran");
    }
}

/// `repro` runs a flag that only some of its experiments read, and says once
/// which; a list flag of which an experiment reads the first value is a warning.
#[test]
fn repro_says_once_which_experiments_a_flag_applies_to() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let out = tmpdir("repro-wks95");
    let procs = if cores >= 2 { "1,2" } else { "1" };
    let o = mpsync(&[
        "repro",
        "wks95",
        "--quick",
        "--preempt",
        "none",
        "--mp",
        "1,2",
        "--procs",
        procs,
        "--scale",
        "0.002",
        "--trials",
        "1",
        "--out",
        out.to_str().unwrap(),
    ]);
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    let notes: Vec<&str> = e.lines().filter(|l| l.starts_with("note: --mp")).collect();
    assert_eq!(
        notes,
        [
            "note: --mp applies to wks95-mutex, wks95-rwlock and wks95-apps; the other 2 experiments ignore it"
        ],
        "{e}"
    );
    // wks95-rwlock varies the processors when --procs lists several (Fig. 6).
    assert!(!e.contains("warning: wks95-rwlock"), "{e}");
    if cores >= 2 {
        assert!(
            e.contains(
                "warning: wks95-apps runs at one processor count: --procs 1 (the first), not 2"
            ),
            "{e}"
        );
    }
    for d in [
        "wks95-mutex@none",
        "wks95-rwlock@none",
        "wks95-barrier@none",
        "wks95-gauss@none",
        "wks95-apps@none",
    ] {
        check_run(&out, d);
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// `--quick` runs the MP-level experiments at MP 1 and 2, as its help says
/// (wks95-rwlock ran 1, 2, 3).
#[test]
fn quick_runs_the_mp_level_experiments_at_mp_1_and_2() {
    let (out, o) = tiny_run(
        "wks95-rwlock",
        "rwlock-quick",
        &["--quick", "--preempt", "none", "--scale", "0.01"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let j = check_run(&out, "wks95-rwlock@none");
    assert_eq!(j["params"]["mp"], serde_json::json!([1.0, 2.0]));
    let _ = std::fs::remove_dir_all(&out);
}

/// `wks95-rwlock --procs 1,2` varies the processors at the first MP level
/// (Fig. 6) and judges Fig. 6's clauses there.
#[test]
fn wks95_rwlock_sweeps_the_processors_for_fig_6() {
    let (out, o) = tiny_run(
        "wks95-rwlock",
        "rwlock-procs",
        &["--procs", "1,2", "--mp", "2", "--scale", "0.005"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let j = check_run(&out, "wks95-rwlock@emulated");
    assert_eq!(
        j["params"]["points"],
        serde_json::json!([{"procs": 1, "mp": 2.0}, {"procs": 2, "mp": 2.0}])
    );
    let clauses = j["verdict"]["clauses"].as_array().unwrap();
    assert_eq!(clauses.len(), 2, "{clauses:?}");
    for c in clauses {
        assert!(c["paper"].as_str().unwrap().contains("Fig. 6"), "{c}");
    }
    assert_eq!(clauses[0]["at"], "processors 2");
    let _ = std::fs::remove_dir_all(&out);
}

/// `--match-contention`: the matched run goes to `<id>@<preempt>+matched/`
/// beside the plain one, its notes say the NCS and utilisation it matched,
/// and the report shows the two side by side.
#[test]
fn a_contention_matched_run_sits_beside_the_plain_one() {
    let out = tmpdir("matched");
    for extra in [&[][..], &["--match-contention"][..]] {
        let mut args = vec![
            "run",
            "wks94-mplevel",
            "--mp",
            "1,2",
            "--scale",
            "0.005",
            "--trials",
            "1",
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let o = mpsync(&args);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let plain = check_run(&out, "wks94-mplevel@emulated");
    let m = check_run(&out, "wks94-mplevel@emulated+matched");
    assert_eq!(plain["params"]["contention_matched"], false);
    assert_eq!(m["params"]["contention_matched"], true);
    assert_eq!(m["preempt"], "emulated+matched");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let details = m["verdict"]["details"].as_array().unwrap();
    let note = details
        .iter()
        .filter_map(|d| d.as_str())
        .find(|d| d.starts_with("contention-matched: NCS "))
        .unwrap_or_else(|| panic!("no matched note: {details:?}"));
    assert!(
        note.contains("(lock utilisation 0.733 as on the paper's 11 processors; ")
            && note.ends_with(&format!(" unmatched on {cores})")),
        "{note}"
    );
    assert!(
        !plain["verdict"]["details"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d.as_str().unwrap().starts_with("contention-matched"))
    );
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        report.contains("Contention-matched runs beside the plain ones"),
        "no side-by-side section"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// `mpsync advise` puts Hart's guidance (Fig. 5.20-5.21) beside the hart-*
/// runs of the results folder: measured branches name their run and say
/// whether they agree, the others which run would measure them; the report
/// has the same table.
#[test]
fn advise_puts_harts_guidance_beside_the_hart_runs() {
    let out = tmpdir("hart-guide");
    for (id, quick) in [("hart-base", false), ("hart-update-fraction", true)] {
        let mut args = vec![
            "run",
            id,
            "--scale",
            "0.01",
            "--trials",
            "1",
            "--out",
            out.to_str().unwrap(),
        ];
        if quick {
            args.push("--quick");
        }
        let o = mpsync(&args);
        assert!(o.status.success(), "{id}: {}", stderr(&o));
    }
    let o = mpsync(&["advise", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(
        t.contains("Hart's guidance (papers/002 §5.2.6, Fig. 5.20-5.21) beside this machine:"),
        "{t}"
    );
    let measured: Vec<&str> = t
        .lines()
        .filter(|l| l.trim_start().starts_with("measured: "))
        .collect();
    assert_eq!(measured.len(), 2, "{t}");
    assert!(measured[0].contains("; hart-base@none)"), "{t}");
    assert!(
        measured[1].contains("; hart-update-fraction@none, a --quick smoke run)"),
        "{t}"
    );
    for m in &measured {
        assert!(m.ends_with(": agrees") || m.ends_with(": disagrees"), "{m}");
    }
    assert!(
        t.contains("not measured yet: run `mpsync run hart-loadfactor`"),
        "{t}"
    );
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(report.contains("Hart's guidance beside this machine"));
    let _ = std::fs::remove_dir_all(&out);
}

/// Running an experiment again keeps the earlier results (moved to
/// OUT/previous/<time>/, said in one line) and the report shows the new run once.
#[test]
fn a_rerun_keeps_the_earlier_results() {
    let out = tmpdir("rerun");
    let run = || {
        mpsync(&[
            "run",
            "lock-latency",
            "--trials",
            "1",
            "--scale",
            "0.01",
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let first = run();
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(!stderr(&first).contains("previous"), "{}", stderr(&first));
    let first_json = std::fs::read_to_string(out.join("lock-latency@none/run.json")).unwrap();
    let second = run();
    let e = stderr(&second);
    assert!(second.status.success(), "{e}");
    let notes: Vec<&str> = e.lines().filter(|l| l.starts_with("note: ")).collect();
    assert_eq!(notes.len(), 1, "{e}");
    assert!(
        notes[0].contains("already held results") && notes[0].contains("previous"),
        "{e}"
    );
    let kept: Vec<PathBuf> = std::fs::read_dir(out.join("previous"))
        .expect("no OUT/previous")
        .map(|d| d.unwrap().path().join("lock-latency@none/run.json"))
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(std::fs::read_to_string(&kept[0]).unwrap(), first_json);
    check_run(&out, "lock-latency@none");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert_eq!(html.matches("id=\"lock-latency-none\"").count(), 1);
    let _ = std::fs::remove_dir_all(&out);
}

/// hart-memory's verdict says the growth rule and the numbers it was judged on.
#[test]
fn tiny_hart_memory_states_its_rule() {
    // hart-memory takes no --trials (one run per scheme), so not `tiny_run`.
    let out = tmpdir("hart-memory");
    let o = mpsync(&[
        "run",
        "hart-memory",
        "--scale",
        "0.05",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j = check_run(&out, "hart-memory@none");
    let details = j["verdict"]["details"].to_string();
    assert!(details.contains("rule: still growing = "), "{details}");
    // A clause per scheme, each judged on the series it measured.
    let clauses = j["verdict"]["clauses"].as_array().unwrap();
    let says: Vec<&str> = clauses
        .iter()
        .map(|c| c["statement"].as_str().unwrap())
        .collect();
    assert_eq!(says.len(), 3, "{says:?}");
    assert!(says[0].starts_with("HP keeps its pending nodes under Michael's bound"));
    for (c, n) in clauses[1..].iter().zip(["QSBR", "EBR"]) {
        assert!(c["statement"].as_str().unwrap().starts_with(n), "{c}");
        let ours = c["ours"].as_str().unwrap();
        assert!(ours.contains("least-squares line rises by"), "{ours}");
        assert!(c["holds"].is_boolean(), "{c}");
    }
    // 40 samples per scheme, one trial each.
    assert_eq!(j["trials"].as_array().unwrap().len(), 3 * 40);
    let _ = std::fs::remove_dir_all(&out);
}

fn check_run(out: &Path, dir: &str) -> serde_json::Value {
    let d = out.join(dir);
    for f in ["data.csv", "run.json", "figure.svg"] {
        assert!(d.join(f).is_file(), "{} missing", d.join(f).display());
    }
    let csv = std::fs::read_to_string(d.join("data.csv")).unwrap();
    assert!(csv.lines().count() > 1, "empty data.csv");
    assert!(
        std::fs::read_to_string(d.join("figure.svg"))
            .unwrap()
            .contains("</svg>")
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("run.json")).unwrap()).unwrap();
    for k in [
        "machine",
        "params",
        "verdict",
        "trials",
        "points",
        "busy_iters_per_us",
    ] {
        assert!(json.get(k).is_some(), "run.json lacks {k}");
    }
    for k in ["cpu_model", "kernel", "rustc", "git_rev", "cores"] {
        assert!(json["machine"].get(k).is_some(), "machine lacks {k}");
    }
    // The rseq time-slice extension in words, not Rust debug text.
    let se = json["machine"]["slice_extension"].as_str().unwrap();
    assert!(
        se.starts_with("not available: ") || se.starts_with("available ("),
        "{se}"
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains(&format!(
            "rseq time-slice extension: {}",
            se.split(':').next().unwrap()
        )),
        "{se}"
    );
    json
}

#[test]
fn tiny_run_without_preemption_writes_everything() {
    let (out, o) = tiny_run(
        "wks94-mplevel",
        "none",
        &["--preempt", "none", "--mp", "1,2", "--scale", "0.005"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("verdict:"), "{stdout}");
    let j = check_run(&out, "wks94-mplevel@none");
    assert_eq!(j["verdict"]["status"], "measurement");
    assert_eq!(j["params"]["common"]["trials"], 1);
    // data.csv: one row per (implementation, point), with the point's MP level,
    // processors and the workers' finish spread (fairness) in [0, 1].
    let csv = std::fs::read_to_string(out.join("wks94-mplevel@none/data.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (mp, procs, spread) = (col("mp"), col("procs"), col("finish_spread"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let impls = j["params"]["implementations"].as_array().unwrap().len();
    assert_eq!(rows.len(), 2 * impls, "{csv}");
    for r in &rows {
        assert!(["1", "2"].contains(&r[mp]), "{r:?}");
        assert!(r[procs].parse::<u32>().unwrap() >= 1, "{r:?}");
        let f: f64 = r[spread].parse().unwrap();
        assert!((0.0..=1.0).contains(&f), "{r:?}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn tiny_emulated_run_has_a_verdict_and_scheduler_stats() {
    let (out, o) = tiny_run(
        "wks94-mplevel",
        "emu",
        &[
            "--preempt",
            "emulated",
            "--mp",
            "1,2",
            "--scale",
            "0.05",
            "--quantum-ms",
            "5",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let j = check_run(&out, "wks94-mplevel@emulated");
    let status = j["verdict"]["status"].as_str().unwrap().to_string();
    assert!(
        ["partly_evaluable", "does_not_hold"].contains(&status.as_str()),
        "{status}"
    );
    // One scheduler start per point and round (the runner's rounds visit
    // every point once a round).
    let sched = j["extra"]["scheduler_per_point"].as_array().unwrap();
    let rounds = j["params"]["common"]["trials"].as_u64().unwrap() as usize;
    assert_eq!(sched.len(), 2 * rounds, "{sched:?}");
    let at_2: u64 = sched
        .iter()
        .filter(|s| s["x"] == 2.0)
        .map(|s| s["scheduler"]["preemptions"].as_u64().unwrap())
        .sum();
    assert!(at_2 > 0, "no preemption at MP 2: {sched:?}");
    // `report` regenerates the page from what is on disk.
    std::fs::remove_file(out.join("report.html")).unwrap();
    let o = mpsync(&["report", "--out", out.to_str().unwrap()]);
    assert!(o.status.success());
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("wks94-mplevel") && html.contains("<svg"));
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn tiny_os_run_leaves_no_competitor_behind() {
    let (out, o) = tiny_run(
        "wks94-procs",
        "os",
        &["--preempt", "os", "--procs", "1", "--scale", "0.005"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    check_run(&out, "wks94-procs@os");
    let left = Command::new("pgrep")
        .args(["-f", &format!("{} __compete", env!("CARGO_BIN_EXE_mpsync"))])
        .output();
    if let Ok(left) = left {
        assert!(
            left.stdout.is_empty(),
            "competitors left running: {}",
            String::from_utf8_lossy(&left.stdout)
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn tiny_lock_oversub_and_wks95_runs() {
    let (out, o) = tiny_run(
        "lock-oversub",
        "oversub",
        &["--scale", "0.05", "--threads", "1,3"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let json = check_run(&out, "lock-oversub@none");
    let csv = std::fs::read_to_string(out.join("lock-oversub@none/data.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    assert!(header.contains(&"fairness_spread"), "{header:?}");
    assert!(header.contains(&"censored_at"), "{header:?}");
    assert!(header.contains(&"configuration"), "{header:?}");
    let details = json["verdict"]["details"].to_string();
    let points = json["points"].as_array().unwrap();
    assert!(
        points
            .iter()
            .any(|p| p["panel"] == "cs1-ncs1 pinned" && p["x"] == 3.0),
        "no point of cs1-ncs1 pinned at 3 threads"
    );
    assert!(details.contains("target: bounded-steal"), "{details}");
    let clauses = json["verdict"]["clauses"].as_array().unwrap();
    assert!(
        clauses.iter().any(|c| c["statement"]
            .as_str()
            .unwrap()
            .starts_with("target: bounded-steal")),
        "{clauses:?}"
    );
    assert!(
        details.contains("cs1-ncs1 pinned+burst"),
        "the burst line ran or says why not: {details}"
    );
    let (out, o) = tiny_run(
        "wks95-mutex",
        "wks95",
        &[
            "--quick",
            "--scale",
            "0.02",
            "--preempt",
            "emulated",
            "--mp",
            "1,2",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let json = check_run(&out, "wks95-mutex@emulated");
    assert!(
        json["verdict"]["details"]
            .to_string()
            .contains("Ticket / Ticket-np")
    );
    let e = stderr(&mpsync(&["run", "lock-oversub", "--threads", "0"]));
    assert!(e.contains("--threads 0"), "{e}");
}

/// `lc98-apps` runs sample sort, both connected-components runs and the 3-D
/// FFT with separate processes (3: not a power of two), checks every run's output
/// against the sequential answer (a wrong one fails the run), and leaves a
/// verdict clause per application; a bad process count is one clear line.
#[test]
fn tiny_lc98_apps() {
    let (out, o) = tiny_run(
        "lc98-apps",
        "lc98-apps",
        &["--scale", "0.01", "--threads", "3,2"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let j = check_run(&out, "lc98-apps@none");
    let details = j["verdict"]["details"].to_string();
    assert!(
        details.contains("fft-3d with 3 processes: not run"),
        "{details}"
    );
    // Two clauses per application, at the most processes it ran with.
    let at: Vec<&str> = j["verdict"]["clauses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["at"].as_str().unwrap())
        .collect();
    let mut want = Vec::new();
    for app in [
        "processes 3, sample-sort",
        "processes 3, con-comm",
        "processes 3, con-comp",
        "processes 2, fft-3d",
    ] {
        want.extend([app, app]);
    }
    assert_eq!(at, want);
    // 3 applications x 6 claims x 2 process counts, and the FFT (whose side
    // 3 does not divide) x 6 claims at 2, one trial each.
    assert_eq!(j["trials"].as_array().unwrap().len(), 42);
    let _ = std::fs::remove_dir_all(&out);
    let e = stderr(&mpsync(&["run", "lc98-apps", "--threads", "1"]));
    assert!(e.contains("--threads 1") && e.contains("2..=16"), "{e}");
}

/// The paper-004 experiments run with separate processes and leave their
/// files and a verdict.
#[test]
fn tiny_lc98_runs() {
    for (id, args) in [
        ("lc98-logp", vec!["--scale", "0.01"]),
        ("lc98-bandwidth", vec!["--scale", "0.01"]),
        ("lc98-stress", vec!["--scale", "0.002", "--threads", "1,3"]),
    ] {
        let (out, o) = tiny_run(id, id, &args);
        assert!(o.status.success(), "{id}: {}", stderr(&o));
        let j = check_run(&out, &format!("{id}@none"));
        assert!(
            ["holds", "does_not_hold"].contains(&j["verdict"]["status"].as_str().unwrap()),
            "{id}: {}",
            j["verdict"]
        );
        if id != "lc98-bandwidth" {
            // The iceoryx2 peer: measured and judged where built in, said
            // to be absent (and how to build it) where not; never silently.
            let details = j["verdict"]["details"].to_string();
            if cfg!(feature = "iceoryx2") {
                let csv = std::fs::read_to_string(out.join(format!("{id}@none/data.csv")))
                    .expect("data.csv");
                assert!(
                    csv.contains("iceoryx2 pub-sub"),
                    "{id}: no iceoryx2 rows in {csv}"
                );
                if id == "lc98-logp" {
                    assert!(
                        details.contains("x iceoryx2 pub-sub RTT: ")
                            && !details.contains("not judged"),
                        "{id}: {details}"
                    );
                }
            } else {
                let want = if id == "lc98-logp" {
                    "x iceoryx2 pub-sub RTT: not judged: iceoryx2 not built (cargo feature `iceoryx2`"
                } else {
                    "iceoryx2 pub-sub: not run: iceoryx2 not built (cargo feature `iceoryx2`"
                };
                assert!(
                    details.contains(want),
                    "{id}: {want} missing from {details}"
                );
            }
        }
        let _ = std::fs::remove_dir_all(&out);
    }
}

/// `barrier-repartition` records the episodes of both barriers under a
/// repartitioning pseudo-scheduler and judges the recovery; one processor is
/// refused with one line (a repartition needs processors to take away).
#[test]
fn tiny_barrier_repartition_run() {
    let e = stderr(&mpsync(&["run", "barrier-repartition", "--procs", "1"]));
    assert!(e.contains("--procs 1") && e.contains("between 2"), "{e}");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 {
        return; // the refusal above is all a one-core machine can show
    }
    let (out, o) = tiny_run(
        "barrier-repartition",
        "barrier-repartition",
        &["--procs", "2", "--scale", "0.25"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let j = check_run(&out, "barrier-repartition@emulated");
    for s in j["extra"]["scheduler"].as_array().unwrap() {
        assert!(s["episodes"].as_u64().unwrap() > 100, "{s}");
        assert!(s["repartitions"].as_u64().unwrap() >= 2, "{s}");
    }
    let details = j["verdict"]["details"].to_string();
    assert!(
        details.contains("Scalable-SC:") && details.contains("Central-block:"),
        "{details}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// `wks94-convoy` measures its four locks beside the model's prediction of
/// the same runs, predicts the other machines with the model alone, and
/// judges the model against the measurement and Fig. 2's ordering.
#[test]
fn tiny_wks94_convoy_run() {
    let (out, o) = tiny_run(
        "wks94-convoy",
        "wks94-convoy",
        &["--procs", "1", "--mp", "1,2", "--scale", "0.05"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let j = check_run(&out, "wks94-convoy@emulated");
    let trials = j["trials"].as_array().unwrap();
    // Two validation panels (4 measured + 6 modelled rows) and four
    // prediction panels (6 modelled rows), at 2 MP levels, 1 trial.
    assert_eq!(trials.len(), 2 * (2 * 10 + 4 * 6), "{}", trials.len());
    let measured = trials
        .iter()
        .filter(|t| !t["implementation"].as_str().unwrap().ends_with("(model)"))
        .count();
    assert_eq!(measured, 2 * 2 * 4);
    let clauses = j["verdict"]["clauses"].as_array().unwrap();
    assert_eq!(clauses.len(), 3, "{clauses:?}");
    let all = j["verdict"].to_string();
    assert!(all.contains("model / TAS-B-np: Queued"), "{all}");
    assert!(all.contains("prediction, model: 63 processors"), "{all}");
    let _ = std::fs::remove_dir_all(&out);
}

/// The Michael & Scott applications: both quicksorts and the TSP run under
/// the emulated scheduler at MP 1 and 2 (every sort and every solve checked
/// in-run: a wrong answer would fail it), leave their files and the paper's
/// two clauses each, naming the figure; without preemption the MP clause is
/// not measured; a size SCQ cannot hold is one clear line.
#[test]
fn tiny_ms97_apps() {
    for (id, fig, rows, fastest) in [
        ("ms97-quicksort-queue", "Fig. 5", 6, "MS non-blocking"),
        ("ms97-quicksort-stack", "Fig. 6", 6, "Treiber"),
        ("ms97-tsp", "Fig. 7", 5, "hybrid"),
    ] {
        let (out, o) = tiny_run(id, id, &["--scale", "0.01", "--mp", "1,2"]);
        assert!(o.status.success(), "{id}: {}", stderr(&o));
        let j = check_run(&out, &format!("{id}@emulated"));
        let clauses = j["verdict"]["clauses"].as_array().unwrap();
        assert_eq!(clauses.len(), 2, "{id}: {clauses:?}");
        assert!(
            clauses[0]["statement"]
                .as_str()
                .unwrap()
                .contains("degrades")
        );
        assert!(
            clauses[1]["statement"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{fastest} is the fastest")),
            "{id}: {clauses:?}"
        );
        for c in clauses {
            assert!(c["paper"].as_str().unwrap().contains(fig), "{id}: {c}");
            assert!(c["holds"].is_boolean(), "{id}: {c}");
        }
        assert!(j["paper"].as_str().unwrap().contains(fig), "{id}");
        assert!(j["params"]["answer_check"].is_string(), "{id}");
        assert_eq!(j["trials"].as_array().unwrap().len(), rows * 2, "{id}");
        let _ = std::fs::remove_dir_all(&out);
    }
    let (out, o) = tiny_run(
        "ms97-quicksort-stack",
        "ms97-qs-none",
        &["--scale", "0.005", "--preempt", "none"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let j = check_run(&out, "ms97-quicksort-stack@none");
    let c = &j["verdict"]["clauses"][0];
    assert!(
        c["ours"].as_str().unwrap().starts_with("not measured"),
        "{c}"
    );
    let _ = std::fs::remove_dir_all(&out);
    let out = tmpdir("ms97-qs-big");
    let o = mpsync(&[
        "run",
        "ms97-quicksort-queue",
        "--scale",
        "6",
        "--out",
        out.to_str().unwrap(),
    ]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    let last = e.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: ms97-quicksort-queue failed: --scale 6 sorts 3000000 items")
            && last.contains("at most 5.5"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// `wks94-apps` and `wks95-apps` run Cholesky and quicksort, one panel
/// each, check every run's answer (the notes say so) and judge their
/// clauses per application; without preemption the verdict is a measurement.
#[test]
fn tiny_wks_apps() {
    let (out, o) = tiny_run("wks94-apps", "wks94-apps", &["--scale", "0.05"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j = check_run(&out, "wks94-apps@emulated");
    let clauses = j["verdict"]["clauses"].as_array().unwrap();
    assert_eq!(clauses.len(), 6, "{clauses:?}");
    for (c, app) in clauses
        .iter()
        .zip(["cholesky"; 3].iter().chain(&["quicksort"; 3]))
    {
        assert!(c["at"].as_str().unwrap().ends_with(app), "{c}");
        assert!(c["paper"].as_str().unwrap().contains("Fig. 6"), "{c}");
    }
    let details = j["verdict"]["details"].to_string();
    assert!(
        details.contains("answers: cholesky: all 16 runs"),
        "{details}"
    );
    assert!(
        details.contains("quicksort: all 16 runs of 100000 integers"),
        "{details}"
    );
    assert!(
        details.contains("bcsstk15 is not on this machine"),
        "{details}"
    );
    let (out2, o) = tiny_run(
        "wks95-apps",
        "wks95-apps",
        &["--scale", "0.05", "--preempt", "none"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let j = check_run(&out2, "wks95-apps@none");
    assert_eq!(j["verdict"]["status"], "measurement");
    assert_eq!(j["params"]["cholesky"]["order"], 4 * 7 * 2 * 3);
    let e = stderr(&mpsync(&[
        "run",
        "wks95-apps",
        "--procs",
        "999",
        "--out",
        out2.to_str().unwrap(),
    ]));
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_dir_all(&out2);
}
