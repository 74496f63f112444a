//! The programs of `real-programs`: how each is found, installed, run and
//! read.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{Outcome, judge_run, whole_seconds};
use crate::experiments::Params;

/// One program (a configuration of the experiment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// `sysbench mutex`.
    SysbenchMutex,
    /// `sysbench threads`.
    SysbenchThreads,
    /// `stress-ng --mutex`.
    StressNgMutex,
    /// RocksDB `db_bench --benchmarks=readrandom`.
    DbBenchReadrandom,
    /// RocksDB `db_bench --benchmarks=readwhilewriting` (one writer beside
    /// the reading threads).
    DbBenchReadwhilewriting,
}

/// `sysbench mutex` lock+unlock pairs per run at `--scale 1`, split over
/// the threads.
const SYSBENCH_MUTEX_LOCKS: f64 = 4.0e6;
/// Seconds a run may take past its own length before `timeout` stops it.
pub const CAP_S: u64 = 20;
/// Keys of the `db_bench` database.
const DB_KEYS: u32 = 50_000;
/// Threads of one `stress-ng` mutex instance at most (its `--mutex-procs` range).
const STRESS_NG_MAX_PROCS: u32 = 64;

impl Program {
    /// Every program, in the order of the panels.
    pub const ALL: [Program; 5] = [
        Program::SysbenchMutex,
        Program::SysbenchThreads,
        Program::StressNgMutex,
        Program::DbBenchReadrandom,
        Program::DbBenchReadwhilewriting,
    ];

    /// As printed (the configuration's label).
    pub fn label(self) -> &'static str {
        match self {
            Self::SysbenchMutex => "sysbench mutex",
            Self::SysbenchThreads => "sysbench threads",
            Self::StressNgMutex => "stress-ng mutex",
            Self::DbBenchReadrandom => "db_bench readrandom",
            Self::DbBenchReadwhilewriting => "db_bench readwhilewriting",
        }
    }

    /// Its executable.
    pub fn binary(self) -> &'static str {
        match self {
            Self::SysbenchMutex | Self::SysbenchThreads => "sysbench",
            Self::StressNgMutex => "stress-ng",
            Self::DbBenchReadrandom | Self::DbBenchReadwhilewriting => "db_bench",
        }
    }

    /// The Debian package that has it.
    pub fn package(self) -> &'static str {
        match self {
            Self::SysbenchMutex | Self::SysbenchThreads => "sysbench",
            Self::StressNgMutex => "stress-ng",
            Self::DbBenchReadrandom | Self::DbBenchReadwhilewriting => "rocksdb-tools",
        }
    }

    /// Its `db_bench` benchmark, if it is one.
    fn db_bench_name(self) -> Option<&'static str> {
        match self {
            Self::DbBenchReadrandom => Some("readrandom"),
            Self::DbBenchReadwhilewriting => Some("readwhilewriting"),
            _ => None,
        }
    }

    /// Left out of `--quick` (a database to make, seconds a run).
    pub fn heavy(self) -> bool {
        self.binary() == "db_bench"
    }

    /// Its arguments at `threads` threads, `secs` a run, `scale`, the
    /// database in `db`.
    pub fn args(self, threads: u32, secs: u64, scale: f64, db: &Path) -> Vec<String> {
        let v: Vec<String> = match self {
            Self::SysbenchMutex => {
                let per = (SYSBENCH_MUTEX_LOCKS * scale / f64::from(threads)).max(1000.0) as u64;
                vec![
                    "mutex".into(),
                    format!("--threads={threads}"),
                    "--mutex-num=4".into(),
                    format!("--mutex-locks={per}"),
                    "--mutex-loops=50".into(),
                    "run".into(),
                ]
            }
            // Timed, not a fixed count of events: 20,000 events (the first
            // form) took 0.1 s at 2 threads, where a 40 ms start-up transient
            // moved the ratio from 1.12x glibc (400,000 events) to 0.83x,
            // and a lock that collapses ran into the time cap and was
            // censored instead of measured.
            Self::SysbenchThreads => vec![
                "threads".into(),
                format!("--threads={threads}"),
                "--thread-yields=10".into(),
                "--thread-locks=2".into(),
                format!("--time={secs}"),
                "--events=0".into(),
                "run".into(),
            ],
            Self::StressNgMutex => {
                let (n, procs) = stress_ng_split(threads);
                vec![
                    format!("--mutex={n}"),
                    format!("--mutex-procs={procs}"),
                    format!("--timeout={secs}"),
                    "--metrics-brief".into(),
                ]
            }
            Self::DbBenchReadrandom | Self::DbBenchReadwhilewriting => vec![
                format!("--benchmarks={}", self.db_bench_name().unwrap_or_default()),
                "--use_existing_db=1".into(),
                format!("--db={}", db.display()),
                format!("--num={DB_KEYS}"),
                format!("--threads={threads}"),
                format!("--duration={secs}"),
            ],
        };
        v
    }
}

/// `stress-ng` instances and threads each for `threads` in all: as few
/// instances as its 2..=64 threads an instance allow.
pub fn stress_ng_split(threads: u32) -> (u32, u32) {
    let n = threads.div_ceil(STRESS_NG_MAX_PROCS).max(1);
    (n, (threads / n).clamp(2, STRESS_NG_MAX_PROCS))
}

/// The number after `key` on a line of `s` that starts (after blanks) with it.
fn after(s: &str, key: &str) -> Option<f64> {
    s.lines()
        .find_map(|l| l.trim_start().strip_prefix(key))
        .and_then(|r| r.trim().trim_end_matches('s').parse().ok())
}

/// The program's figure from its output, as ops/s: `sysbench mutex` lock
/// pairs (threads × `--mutex-locks`) over its total time; `sysbench
/// threads` events over its total time; `stress-ng`'s bogo ops/s (real
/// time) of the mutex stressor; `db_bench`'s ops/sec.
pub fn parse(prog: Program, threads: u32, stdout: &str, stderr: &str) -> Option<f64> {
    let v = match prog {
        Program::SysbenchMutex => {
            f64::from(threads) * args_locks(stdout)? / after(stdout, "total time:")?
        }
        Program::SysbenchThreads => {
            after(stdout, "total number of events:")? / after(stdout, "total time:")?
        }
        Program::StressNgMutex => stress_ng_ops(&format!("{stdout}\n{stderr}"))?,
        Program::DbBenchReadrandom | Program::DbBenchReadwhilewriting => stdout
            .lines()
            .chain(stderr.lines())
            .find(|l| l.split_whitespace().next() == prog.db_bench_name() && l.contains("ops/sec"))
            .and_then(|l| {
                let t: Vec<&str> = l.split_whitespace().collect();
                let i = t.iter().position(|x| *x == "ops/sec")?;
                t.get(i.checked_sub(1)?)?.parse().ok()
            })?,
    };
    (v.is_finite() && v > 0.0).then_some(v)
}

/// `sysbench mutex` does not print its `--mutex-locks`; the runner writes
/// it as a first line `mutex-locks: N` of the captured output.
fn args_locks(stdout: &str) -> Option<f64> {
    after(stdout, "mutex-locks:")
}

/// The mutex stressor's bogo ops/s (real time): the fifth number of its
/// `--metrics-brief` line.
fn stress_ng_ops(out: &str) -> Option<f64> {
    out.lines().find_map(|l| {
        let rest = l.split_once("] ")?.1.trim_start().strip_prefix("mutex ")?;
        let nums: Vec<f64> = rest
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        (nums.len() >= 5).then(|| nums[4])
    })
}

/// Whether `bin` is on the `PATH`.
fn on_path(bin: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
}

/// The programs of `progs` that can run: those missing are installed with
/// `apt-get` where the process is root and has it (once, quietly, before
/// anything is timed); each still missing is one line to `say`.
pub fn install_missing(progs: &[Program], say: &mut dyn FnMut(String)) -> Vec<Program> {
    let missing: Vec<&str> = progs
        .iter()
        .filter(|p| !on_path(p.binary()))
        .map(|p| p.package())
        .collect();
    let mut pkgs = missing.clone();
    pkgs.dedup();
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !pkgs.is_empty()
        && root
        && on_path("apt-get")
        && std::env::var_os("MPSYNC_NO_INSTALL").is_none()
    {
        eprintln!(
            "real-programs: installing {} (apt-get, not timed) ...",
            pkgs.join(" ")
        );
        let apt = |args: &[&str]| {
            Command::new("timeout")
                .arg("300")
                .arg("apt-get")
                .args(args)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .output()
                .is_ok_and(|o| o.status.success())
        };
        let mut install = vec!["install", "-y", "-qq"];
        install.extend(&pkgs);
        if !apt(&install) {
            let _ = apt(&["update", "-qq"]);
            let _ = apt(&install);
        }
    }
    let how = if root {
        "apt-get could not install it"
    } else {
        "not root: apt-get install it"
    };
    progs
        .iter()
        .copied()
        .filter(|p| {
            let ok = on_path(p.binary());
            if !ok {
                say(format!(
                    "{}: `{}` not found ({how}: package {}); not measured",
                    p.label(),
                    p.binary(),
                    p.package()
                ));
            }
            ok
        })
        .collect()
}

/// Run length of the fixed-duration programs: 2 s (`--scale 1`), 1 s under `--quick`.
pub fn seconds(p: &Params) -> Duration {
    Duration::from_secs(if p.quick {
        1
    } else {
        whole_seconds(Duration::from_secs_f64(2.0 * p.scale))
    })
}

/// A temporary directory with the `db_bench` database (made once, by
/// `fillrandom`, when `db_bench` runs), removed when dropped.
pub struct Workdir {
    dir: PathBuf,
    scale: f64,
    quick: bool,
}

impl Workdir {
    /// Makes it (and the database, where `db_bench` is among `progs`).
    pub fn new(progs: &[Program], p: &Params) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("mpsync-real-programs-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let w = Self {
            dir,
            scale: p.scale,
            quick: p.quick,
        };
        if progs.iter().any(|p| p.heavy()) {
            let st = Command::new("db_bench")
                .args([
                    "--benchmarks=fillrandom",
                    "--compression_type=none",
                    "--disable_wal=1",
                    &format!("--num={DB_KEYS}"),
                    &format!("--db={}", w.db().display()),
                ])
                .output()?;
            anyhow::ensure!(
                st.status.success(),
                "db_bench fillrandom failed: {}",
                String::from_utf8_lossy(&st.stderr)
            );
        }
        Ok(w)
    }

    fn db(&self) -> PathBuf {
        self.dir.join("db")
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One run of `prog` at `threads`, through the interposer with `lock` (or
/// glibc alone), capped by `timeout` at [`CAP_S`] past its own length (4 s
/// under `--quick`); and the interposer's lines saying which mutexes went to
/// glibc.
pub fn run_once(
    prog: Program,
    lock: Option<&str>,
    lib: Option<&PathBuf>,
    threads: u32,
    secs: Duration,
    w: &Workdir,
) -> anyhow::Result<(Outcome, Vec<String>)> {
    let s = whole_seconds(secs);
    let args = prog.args(threads, s, w.scale, &w.db());
    let cap = s + if w.quick { 4 } else { CAP_S };
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", &cap.to_string(), prog.binary()])
        .args(&args)
        .env_remove("LD_PRELOAD")
        .env_remove("MPSYNC_LOCK");
    if let (Some(lock), Some(lib)) = (lock, lib) {
        cmd.env("LD_PRELOAD", lib)
            .env("MPSYNC_LOCK", lock)
            .env("MPSYNC_PTHREAD_VERBOSE", "1");
    }
    let out = cmd.output()?;
    let mut stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if let Some(l) = args.iter().find_map(|a| a.strip_prefix("--mutex-locks=")) {
        stdout = format!("mutex-locks: {l}\n{stdout}");
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let delegated = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("mpsync-pthread: "))
        .filter(|l| l.contains("go to glibc"))
        .map(String::from)
        .collect();
    let outcome = judge_run(prog, lock, threads, out.status.code(), &stdout, &stderr);
    Ok((outcome, delegated))
}
