//! `real-programs`: third-party programs from Debian packages, unmodified,
//! through `libmpsync_pthread.so` (`LD_PRELOAD`, one lock per run by
//! `MPSYNC_LOCK`) and through glibc alone, at 1×, 2× and 4× the cores.
//!
//! | configuration | program and figure |
//! |---|---|
//! | `sysbench mutex` | `sysbench mutex`: every thread takes one of 4 mutexes a fixed number of times (the total split over the threads); lock+unlock pairs per second from its total time |
//! | `sysbench threads` | `sysbench threads` for the run length (`--time`): events, each 10 × {lock one of 2 mutexes (thread *i* takes mutex *i* mod 2), `sched_yield`, unlock}; events per second |
//! | `stress-ng mutex` | `stress-ng --mutex`: threads of one process (64 at most a process) lock one mutex; its bogo ops/s (real time) |
//! | `db_bench readrandom`, `db_bench readwhilewriting` | RocksDB's `db_bench` on a small DB (50,000 keys) made by `fillrandom` in a temporary directory (once, not timed); readwhilewriting adds one writer to the readers; ops/sec (not under `--quick`) |
//!
//! Every point is the median of interleaved rounds (the model's runner).
//! Each interposed run is checked: it must exit 0 and its stderr must carry
//! the interposer's `MPSYNC_PTHREAD_VERBOSE=1` line naming the lock; a
//! glibc run must carry none. A run that fails either is dropped and the
//! verdict names it and why (censored); so is one past its time cap, and a
//! program and lock that hit the cap are not run again at more threads or
//! in later rounds (more threads only wait longer). Where the interposer
//! sends some of a program's mutexes to glibc (recursive, priority-
//! inheritance, …: it says so on stderr; sysbench makes a recursive one)
//! the verdict says so in a note: the figure is the program's, its other
//! mutexes mpsync's. A program that is not installed is one note, never a
//! number. Pinned runs are not
//! made: `taskset` can bind the whole program to the cores, not thread `i`
//! to CPU `i`, so it would only repeat the unpinned run.
//!
//! Missing programs are installed with `apt-get install -y -qq` (once,
//! before anything is timed) where the process is root and has `apt-get`,
//! unless `MPSYNC_NO_INSTALL` is set. `--threads` replaces the default
//! counts (the cores × 1, 2, 4); the clauses read its first three as 1×, 2×
//! and 4×. `--quick` measures bounded-steal and tas-b-np only, 1 s runs,
//! without `db_bench` (about 50 s on 2 cores).
//!
//! The clauses are mpsync's targets (issue 28): through the interposer the
//! best of mpsync's locks ≥ 1.0× glibc on every program at 2× and 4× the
//! cores and ≥ 0.95× at 1×; on at least one program ≥ 1.5× at 4×.

mod progs;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{Experiment, Params};
use crate::env::Preempt;
use crate::model::{self, Better, Clause, Design, Imp, Judged, Panel, Results, Verdicts};
use crate::output::{RunRecord, Trial};
use crate::svg::sig3;

pub use progs::{Program, parse};

/// The baseline: the program as linked, glibc's mutexes.
pub const GLIBC: &str = "glibc";
/// mpsync's locks measured through the interposer (`MPSYNC_LOCK` values).
pub const LOCKS: &[&str] = &["bounded-steal", "tas-b-np", "smart-q", "mcs-tp"];
/// Those measured under `--quick`.
pub const QUICK_LOCKS: &[&str] = &["bounded-steal", "tas-b-np"];
/// Restricts a run to the named programs (configuration labels, comma-separated).
pub const PROGRAMS_ENV: &str = "MPSYNC_REAL_PROGRAMS";
/// Where the interposer is, if not next to `mpsync`.
pub const LIB_ENV: &str = "MPSYNC_PTHREAD_LIB";
/// The interposer's file name.
pub const LIB_NAME: &str = "libmpsync_pthread.so";

/// `libmpsync_pthread.so`: `MPSYNC_PTHREAD_LIB`, else next to the running
/// binary (the same target directory); the error says how to build it.
pub fn find_lib(env: Option<PathBuf>, exe: Option<PathBuf>) -> Result<PathBuf, String> {
    let mut tried = Vec::new();
    if let Some(p) = env {
        if p.is_file() {
            return Ok(p);
        }
        tried.push(format!("{LIB_ENV}={}", p.display()));
    }
    if let Some(dir) = exe.as_deref().and_then(Path::parent) {
        for d in [Some(dir), dir.parent()].into_iter().flatten() {
            let p = d.join(LIB_NAME);
            if p.is_file() {
                return Ok(p);
            }
            tried.push(p.display().to_string());
        }
    }
    Err(format!(
        "{LIB_NAME} not found ({}): build it with `cargo build --release -p mpsync-pthread` (or set {LIB_ENV})",
        tried.join(", ")
    ))
}

/// How a run past its cap is reported.
pub const TIMED_OUT: &str = "past its time cap";

/// Why a run is not a point, or its figure.
pub type Outcome = Result<f64, String>;

/// Judges one run: exit status, the interposer's lines on stderr, the figure.
pub fn judge_run(
    prog: Program,
    lock: Option<&str>,
    threads: u32,
    status: Option<i32>,
    stdout: &str,
    stderr: &str,
) -> Outcome {
    match status {
        Some(0) => {}
        Some(124) => {
            return Err(format!(
                "{TIMED_OUT}: not run again at more threads or in later rounds"
            ));
        }
        Some(c) => return Err(format!("exit status {c}{}", tail(stderr))),
        None => return Err(format!("killed by a signal{}", tail(stderr))),
    }
    let said = |l: &str| {
        stderr
            .lines()
            .any(|x| x.starts_with("mpsync-pthread: ") && x.contains(l))
    };
    match lock {
        Some(lock) => {
            let want = format!("interposing pthread mutexes and condvars with {lock}");
            if !said(&want) {
                return Err(format!("no `{want}` on stderr: the interposer did not run"));
            }
        }
        None if said("") => return Err("the interposer ran in a glibc run".into()),
        None => {}
    }
    parse(prog, threads, stdout, stderr).ok_or_else(|| {
        format!(
            "no figure in its output{}",
            tail(&format!("{stdout}\n{stderr}"))
        )
    })
}

/// The last non-empty line of `s`, as ": …" (empty when none).
fn tail(s: &str) -> String {
    s.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| format!(": {}", l.trim().chars().take(160).collect::<String>()))
        .unwrap_or_default()
}

/// The programs this run measures: all, or those named in
/// [`PROGRAMS_ENV`]; `--quick` leaves out the `db_bench` ones.
fn programs(quick: bool) -> Vec<Program> {
    let want = std::env::var(PROGRAMS_ENV).ok();
    Program::ALL
        .iter()
        .copied()
        .filter(|p| !(quick && p.heavy()))
        .filter(|p| {
            want.as_deref()
                .is_none_or(|w| w.split(',').any(|n| n.trim() == p.label()))
        })
        .collect()
}

/// The design: a panel per program, threads at 1×, 2×, 4× the cores,
/// glibc (the baseline) and the locks.
fn design(progs: &[Program], threads: &[u32], locks: &[&str], trials: u32) -> Design {
    let mut imps = vec![Imp::peer(GLIBC, "pthread mutex")];
    imps.extend(locks.iter().map(|l| Imp::ours(*l, "pthread mutex")));
    let xs: Vec<f64> = threads.iter().map(|&t| f64::from(t)).collect();
    let mut d = Design::single(
        "threads",
        "the program's own figure (ops/s)",
        Better::Higher,
        xs.clone(),
        imps,
        trials,
    )
    .median()
    .baseline(GLIBC);
    d.panels = progs
        .iter()
        .map(|p| Panel::new(p.label(), xs.clone()))
        .collect();
    d
}

/// "every program": at each `x`, the best of mpsync's ≥ `min` × glibc in
/// every configuration (not judged where one is not measured, unless another
/// already fails).
fn every_program(statement: String, xs: Vec<f64>, min: f64) -> Clause {
    Clause::new(statement, None, move |r| {
        let mut each = Vec::new();
        let (mut fails, mut missing) = (false, false);
        for pi in 0..r.design.panels.len() {
            for &x in &xs {
                match best_ratio(r, pi, x) {
                    Some((g, who)) => {
                        fails |= g < min;
                        each.push(format!(
                            "{} {}: {} ({who})",
                            r.design.panels[pi].label,
                            model::fmt_x(x),
                            sig3(g)
                        ));
                    }
                    None => missing = true,
                }
            }
        }
        let at = format!(
            "threads {}",
            xs.iter()
                .map(|x| model::fmt_x(*x))
                .collect::<Vec<_>>()
                .join(" and ")
        );
        Judged {
            at,
            ours: if each.is_empty() {
                "not measured".into()
            } else {
                each.join("; ")
            },
            holds: if fails {
                Some(false)
            } else if missing || each.is_empty() {
                None
            } else {
                Some(true)
            },
        }
    })
}

/// The best of mpsync's over glibc in configuration `pi` at `x`, and its name.
fn best_ratio(r: &Results<'_>, pi: usize, x: f64) -> Option<(f64, String)> {
    let (imp, v) = *r.ranked(model::Role::Ours, None, pi, x).first()?;
    let g = r.value(GLIBC, pi, x)?;
    Some((r.design.goodness(v, g), imp.name.clone()))
}

/// "some program": the best of mpsync's ≥ `min` × glibc in at least one
/// configuration at `x`.
fn some_program(statement: String, x: f64, min: f64) -> Clause {
    Clause::new(statement, None, move |r| {
        let got: Vec<(f64, String)> = (0..r.design.panels.len())
            .filter_map(|pi| {
                best_ratio(r, pi, x).map(|(g, w)| {
                    (
                        g,
                        format!("{} {} ({w})", r.design.panels[pi].label, sig3(g)),
                    )
                })
            })
            .collect();
        let top = got.iter().map(|g| g.0).fold(f64::NAN, f64::max);
        Judged {
            at: format!("threads {}", model::fmt_x(x)),
            ours: if got.is_empty() {
                "not measured".into()
            } else {
                got.iter()
                    .map(|g| g.1.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            },
            holds: (!got.is_empty()).then_some(top >= min),
        }
    })
}

/// The three targets at the design's 1×, 2×, 4× points.
fn clauses(xs: &[f64]) -> Vec<Clause> {
    let (x1, x2, x4) = (xs[0], xs[1], xs[2]);
    vec![
        every_program("target: through the interposer, mpsync's best lock ≥ 1.0× glibc on every program at 2× and 4× the cores".into(), vec![x2, x4], 1.0),
        every_program("target: … and ≥ 0.95× glibc at 1× the cores".into(), vec![x1], 0.95),
        some_program("target: on at least one program ≥ 1.5× glibc at 4× the cores".into(), x4, 1.5),
    ]
}

/// What a run cannot measure, said once each (programs missing, the
/// interposer missing, dropped runs).
#[derive(Default)]
struct Censor(Vec<String>);

impl Censor {
    fn say(&mut self, line: String) {
        if !self.0.contains(&line) {
            self.0.push(line);
        }
    }
}

/// Runs it.
pub fn run(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let started = Instant::now();
    let threads = p
        .threads
        .clone()
        .unwrap_or_else(|| crate::scale::threads_for(p.cores));
    anyhow::ensure!(
        threads.len() >= 3,
        "--threads {threads:?}: real-programs needs three counts (1x, 2x and 4x the cores)"
    );
    let locks = if p.quick { QUICK_LOCKS } else { LOCKS };
    let progs = programs(p.quick);
    anyhow::ensure!(
        !progs.is_empty(),
        "{PROGRAMS_ENV} names no program of this run (use some of: {})",
        Program::ALL.map(Program::label).join(", ")
    );
    let d = design(&progs, &threads, locks, p.trials);
    let mut censor = Censor::default();
    let lib = find_lib(
        std::env::var_os(LIB_ENV).map(PathBuf::from),
        std::env::current_exe().ok(),
    )
    .inspect_err(|e| censor.say(e.clone()));
    let available = progs::install_missing(&progs, &mut |l| censor.say(l));
    let secs = progs::seconds(p);
    let work = progs::Workdir::new(&available, p)?;
    let mut capped: Vec<(usize, String)> = Vec::new();
    let trials = model::collect(exp.id, &d, &mut |c| {
        let prog = progs[c.panel];
        let lock = (c.imp.name != GLIBC).then_some(c.imp.name.as_str());
        let key = (c.panel, c.imp.name.clone());
        if !available.contains(&prog) || (lock.is_some() && lib.is_err()) || capped.contains(&key) {
            return Ok(None);
        }
        let t = c.x as u32;
        let (out, delegated) = progs::run_once(prog, lock, lib.as_ref().ok(), t, secs, &work)?;
        for l in delegated {
            censor.say(format!(
                "{}: {l} (its other mutexes are mpsync's)",
                prog.label()
            ));
        }
        if out.as_ref().is_err_and(|e| e.starts_with(TIMED_OUT)) {
            capped.push(key);
        }
        Ok(match out {
            Ok(v) => Some(Trial {
                value: v,
                procs: Some(t),
                ..Trial::default()
            }),
            Err(why) => {
                censor.say(format!(
                    "censored: {} with {} at {t} threads: {why}",
                    prog.label(),
                    c.imp.name
                ));
                None
            }
        })
    })?;
    let v = Verdicts {
        conclusion: "no paper conclusion: unmodified programs through the interposer against glibc (issue 28's targets)".into(),
        clauses: clauses(&d.panels[0].xs),
        notes: censor.0,
        advice: Vec::new(),
        targets: true,
    };
    let params = serde_json::json!({
        "threads": threads,
        "locks": locks,
        "programs": progs.iter().map(|p| p.label()).collect::<Vec<_>>(),
        "run_seconds": secs.as_secs_f64(),
        "interposer": lib.as_ref().map(|l| l.display().to_string()).ok(),
    });
    Ok(model::finish(
        exp, p, preempt, &d, trials, v, params, started,
    ))
}

/// A fixed-duration program's run length (whole seconds, at least 1).
pub fn whole_seconds(d: Duration) -> u64 {
    d.as_secs_f64().round().max(1.0) as u64
}

#[cfg(test)]
mod tests {
    use super::progs::stress_ng_split;
    use super::*;
    use crate::output::Trial;

    /// `sysbench mutex --threads=8 --mutex-locks=150000` (1.0.20), with the
    /// line the runner puts first.
    const SYSBENCH_MUTEX: &str = "mutex-locks: 150000
sysbench 1.0.20 (using system LuaJIT 2.1.0-beta3)

Running the test with following options:
Number of threads: 8
Initializing random number generator from current time

Initializing worker threads...

Threads started!

General statistics:
    total time:                          0.0809s
    total number of events:              8

Latency (ms):
         min:                                   46.15
";

    const SYSBENCH_THREADS: &str = "Threads started!

General statistics:
    total time:                          0.6224s
    total number of events:              12000

Threads fairness:
    events (avg/stddev):           1500.0000/36.50
";

    const STRESS_NG: &str = "stress-ng: info:  [27791] setting to a 1 second run per stressor
stress-ng: info:  [27791] dispatching hogs: 1 mutex
stress-ng: metrc: [27791] stressor       bogo ops real time  usr time  sys time   bogo ops/s     bogo ops/s
stress-ng: metrc: [27791]                           (secs)    (secs)    (secs)   (real time) (usr+sys time)
stress-ng: metrc: [27791] mutex            342358      1.00      0.61      1.25    341012.10      183930.04
stress-ng: metrc: [27791] miscellaneous metrics:
stress-ng: metrc: [27791] mutex               1099.64 nanosecs per mutex (geometic mean of 1 instances)
stress-ng: info:  [27791] successful run completed in 1.00s
";

    const DB_BENCH: &str = "Initializing RocksDB Options from command-line flags
DB path: [/tmp/dbt]
readrandom   :      28.033 micros/op 137980 ops/sec 1.044 seconds 143996 operations;    9.6 MB/s (22479 of 35999 found)
";

    const DB_BENCH_RWW: &str = "DB path: [/tmp/dbt]
readwhilewriting :      78.861 micros/op 49996 ops/sec 1.040 seconds 51996 operations;    3.6 MB/s (9129 of 13999 found)
";

    const VERBOSE: &str =
        "mpsync-pthread: interposing pthread mutexes and condvars with bounded-steal
mpsync-pthread: recursive mutexes go to glibc's implementation
";

    #[test]
    fn sysbench_threads_runs_for_the_run_length_not_a_count_of_events() {
        // A count of events let a collapsed lock run into the time cap
        // (censored, not measured) and made a fast run a start-up transient.
        let a = Program::SysbenchThreads.args(8, 3, 1.0, Path::new("/nonexistent"));
        assert!(a.contains(&"--time=3".to_string()), "{a:?}");
        assert!(a.contains(&"--events=0".to_string()), "{a:?}");
        assert!(a.contains(&"--threads=8".to_string()), "{a:?}");
        let quick = Program::SysbenchThreads.args(2, 1, 0.1, Path::new("/nonexistent"));
        assert!(quick.contains(&"--time=1".to_string()), "{quick:?}");
    }

    #[test]
    fn each_programs_figure_is_read_from_its_output() {
        let m = parse(Program::SysbenchMutex, 8, SYSBENCH_MUTEX, "").unwrap();
        assert!((m - 8.0 * 150_000.0 / 0.0809).abs() < 1.0, "{m}");
        let t = parse(Program::SysbenchThreads, 8, SYSBENCH_THREADS, "").unwrap();
        assert!((t - 12000.0 / 0.6224).abs() < 1e-6, "{t}");
        // stress-ng writes its metrics on stderr.
        assert_eq!(
            parse(Program::StressNgMutex, 8, "", STRESS_NG),
            Some(341012.10)
        );
        assert_eq!(
            parse(Program::DbBenchReadwhilewriting, 4, DB_BENCH_RWW, ""),
            Some(49996.0)
        );
        assert_eq!(
            parse(Program::DbBenchReadwhilewriting, 4, DB_BENCH, ""),
            None
        );
        assert_eq!(
            parse(Program::DbBenchReadrandom, 4, DB_BENCH, ""),
            Some(137980.0)
        );
        for p in Program::ALL {
            assert_eq!(parse(p, 2, "garbage\n", "total time: 0s\n"), None, "{p:?}");
        }
        // Without the runner's mutex-locks line there is no count to divide.
        let bare = SYSBENCH_MUTEX.split_once('\n').unwrap().1;
        assert_eq!(parse(Program::SysbenchMutex, 8, bare, ""), None);
    }

    #[test]
    fn a_run_is_a_point_only_if_it_exited_0_and_the_right_lock_ran() {
        let ok = judge_run(
            Program::StressNgMutex,
            Some("bounded-steal"),
            8,
            Some(0),
            "",
            &format!("{VERBOSE}{STRESS_NG}"),
        );
        assert_eq!(ok, Ok(341012.10));
        let wrong = judge_run(
            Program::StressNgMutex,
            Some("smart-q"),
            8,
            Some(0),
            "",
            &format!("{VERBOSE}{STRESS_NG}"),
        );
        assert!(wrong.unwrap_err().contains("the interposer did not run"));
        let glibc = judge_run(Program::StressNgMutex, None, 8, Some(0), "", STRESS_NG);
        assert_eq!(glibc, Ok(341012.10));
        let leaked = judge_run(
            Program::StressNgMutex,
            None,
            8,
            Some(0),
            "",
            &format!("{VERBOSE}{STRESS_NG}"),
        );
        assert!(leaked.unwrap_err().contains("in a glibc run"));
        let capped = judge_run(Program::SysbenchThreads, None, 8, Some(124), "", "");
        assert!(capped.unwrap_err().starts_with(TIMED_OUT));
        let failed = judge_run(
            Program::DbBenchReadrandom,
            None,
            8,
            Some(1),
            "",
            "open: IO error\n\n",
        );
        assert_eq!(failed, Err("exit status 1: open: IO error".into()));
        let killed = judge_run(Program::DbBenchReadrandom, None, 8, None, "", "");
        assert_eq!(killed, Err("killed by a signal".into()));
        let silent = judge_run(Program::SysbenchMutex, None, 8, Some(0), "hello\n", "");
        assert_eq!(silent, Err("no figure in its output: hello".into()));
    }

    #[test]
    fn the_interposer_is_found_next_to_the_binary_or_by_its_variable() {
        let dir = std::env::temp_dir().join(format!("mpsync-rp-lib-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("deps")).unwrap();
        let exe = dir.join("deps").join("mpsync");
        let e = find_lib(None, Some(exe.clone())).unwrap_err();
        assert!(e.contains("cargo build --release -p mpsync-pthread"), "{e}");
        std::fs::write(dir.join(LIB_NAME), b"").unwrap();
        assert_eq!(find_lib(None, Some(exe.clone())), Ok(dir.join(LIB_NAME)));
        let other = dir.join("other.so");
        std::fs::write(&other, b"").unwrap();
        assert_eq!(find_lib(Some(other.clone()), Some(exe.clone())), Ok(other));
        // A variable naming nothing falls back to the binary's directory.
        assert_eq!(
            find_lib(Some(dir.join("nope")), Some(exe)),
            Ok(dir.join(LIB_NAME))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn stress_ng_gets_at_most_64_threads_an_instance() {
        assert_eq!(stress_ng_split(1), (1, 2));
        assert_eq!(stress_ng_split(8), (1, 8));
        assert_eq!(stress_ng_split(64), (1, 64));
        assert_eq!(stress_ng_split(128), (2, 64));
        assert_eq!(stress_ng_split(96), (2, 48));
    }

    #[test]
    fn the_targets_are_judged_on_every_program_and_unmeasured_ones_say_so() {
        let progs = [Program::SysbenchMutex, Program::StressNgMutex];
        let d = design(&progs, &[2, 4, 8], &["bounded-steal", "tas-b-np"], 1);
        let value = |panel: usize, name: &str| match (panel, name) {
            (_, GLIBC) => 100.0,
            (0, "bounded-steal") => 120.0,
            (0, _) => 90.0,
            (_, "tas-b-np") => 160.0,
            _ => 50.0,
        };
        let trials: Vec<Trial> = d
            .cells()
            .iter()
            .map(|c| Trial {
                implementation: c.imp.name.clone(),
                x: c.x,
                panel: Some(d.panels[c.panel].label.clone()),
                value: value(c.panel, &c.imp.name),
                ..Trial::default()
            })
            .collect();
        let points = model::summarize(&d, &trials);
        let r = Results::new(&d, &points, &trials);
        let cs = clauses(&d.panels[0].xs);
        let j: Vec<crate::output::ClauseResult> = cs.iter().map(|c| c.judge(&r)).collect();
        assert_eq!(j[0].holds, Some(true), "{}", j[0].ours);
        assert!(
            j[0].ours.contains("stress-ng mutex 8: 1.60 (tas-b-np)"),
            "{}",
            j[0].ours
        );
        assert_eq!(j[2].holds, Some(true));
        // Without the stress-ng points: "every program" cannot be judged.
        let some: Vec<Trial> = trials
            .iter()
            .filter(|t| t.panel.as_deref() == Some("sysbench mutex"))
            .cloned()
            .collect();
        let points = model::summarize(&d, &some);
        let r = Results::new(&d, &points, &some);
        assert_eq!(clauses(&d.panels[0].xs)[0].judge(&r).holds, None);
        assert_eq!(clauses(&d.panels[0].xs)[2].judge(&r).holds, Some(false));
        // Nothing measured at all (no program installed): nothing judged.
        let r = Results::new(&d, &[], &[]);
        for c in clauses(&d.panels[0].xs) {
            let j = c.judge(&r);
            assert_eq!((j.holds, j.ours.as_str()), (None, "not measured"));
        }
    }
}
