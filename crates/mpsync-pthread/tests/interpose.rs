//! The interposer, end to end: `tests/c/interpose.c`, compiled with the
//! system C compiler, run under `LD_PRELOAD=libmpsync_pthread.so` with
//! several of the locks. Each scenario first proves the interposer is the
//! one answering (`dlsym(RTLD_DEFAULT, "mpsync_pthread_lock_name")`, and a
//! non-owner unlock that glibc would allow), so none passes on glibc alone.
//!
//! Sized for a loaded 2-core machine: every process has a generous timeout
//! (a hang fails, with its output); nothing measures speed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The locks every scenario runs with.
const LOCKS: [&str; 7] = [
    "bounded-steal",
    "tas-b-np",
    "smart-q",
    "mcs-tp",
    "ticket-np",
    "spin-then-park",
    "native",
];

/// How long one process may run before it counts as hung.
const HANG: Duration = Duration::from_secs(60);

/// `libmpsync_pthread.so` of the profile this test was built in. Cargo builds
/// the library's cdylib with its rlib before any integration test, into
/// `target/<profile>/deps` (and copies it to `target/<profile>`); if neither
/// is there, it is built.
fn cdylib() -> &'static Path {
    static SO: OnceLock<PathBuf> = OnceLock::new();
    SO.get_or_init(|| {
        let exe = std::env::current_exe().expect("current_exe");
        let deps = exe.parent().expect("deps dir");
        let candidates = [
            deps.join("libmpsync_pthread.so"),
            deps.parent()
                .expect("profile dir")
                .join("libmpsync_pthread.so"),
        ];
        if let Some(p) = candidates.iter().find(|p| p.exists()) {
            return p.clone();
        }
        let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cargo.args(["build", "-p", "mpsync-pthread"]);
        if deps.parent().and_then(Path::file_name) == Some("release".as_ref()) {
            cargo.arg("--release");
        }
        let st = cargo.status().expect("run cargo build");
        assert!(st.success(), "cargo build -p mpsync-pthread failed");
        candidates
            .into_iter()
            .find(|p| p.exists())
            .expect("libmpsync_pthread.so after cargo build")
    })
}

/// A fresh directory for this test process's binaries.
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("mpsync-pthread-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("create scratch dir");
        d
    })
}

/// Compiles `tests/c/<name>.c` (with `extra` arguments) once.
fn compile(name: &str, extra: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let out = scratch().join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let o = Command::new(&cc)
        .args(["-O1", "-g", "-Wall", "-Wextra", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .args(extra)
        .arg("-ldl")
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {cc}: {e}"));
    assert!(
        o.status.success(),
        "{cc} {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn interpose_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| compile("interpose", &[]))
}

/// Runs `cmd` to completion, killing it after `HANG`.
fn run_bounded(mut cmd: Command, what: &str) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let start = Instant::now();
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("wait_with_output");
        }
        if start.elapsed() > HANG {
            let _ = child.kill();
            let o = child.wait_with_output().expect("wait_with_output");
            panic!(
                "{what}: still running after {HANG:?} (hung):\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs one scenario of `interpose.c` under the interposer with `lock`
/// (`None`: `MPSYNC_LOCK` unset) and extra environment; its output.
fn scenario_env(scenario: &str, lock: Option<&str>, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(interpose_bin());
    cmd.arg(scenario)
        .env("LD_PRELOAD", cdylib())
        // The kernel's preemption answers are sched's business, tested in
        // mpsync; loading them costs each process a thread and CPU.
        .env("MPSYNC_EBPF", "off")
        .env_remove("MPSYNC_LOCK")
        .env_remove("MPSYNC_PTHREAD_VERBOSE");
    if let Some(l) = lock {
        cmd.env("MPSYNC_LOCK", l);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let what = format!("interpose {scenario} (MPSYNC_LOCK={lock:?})");
    let o = run_bounded(cmd, &what);
    assert!(
        o.status.success()
            && String::from_utf8_lossy(&o.stdout).contains(&format!("ok {scenario}")),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn every_lock(scenario: &str) {
    for l in LOCKS {
        scenario_env(scenario, Some(l), &[]);
    }
}

#[test]
fn mutex_calls_every_lock() {
    every_lock("basic");
}

#[test]
fn condvar_every_lock() {
    every_lock("cond");
}

#[test]
fn delegated_to_glibc() {
    for l in ["bounded-steal", "smart-q"] {
        let o = scenario_env("delegated", Some(l), &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        // One line per kind of attribute, not one per call.
        for kind in [
            "recursive",
            "error-checking",
            "robust",
            "process-shared mutexes",
        ] {
            assert_eq!(
                err.matches(kind).count(),
                1,
                "one line naming {kind} on stderr, got:\n{err}"
            );
        }
    }
}

#[test]
fn fork_child_locks() {
    every_lock("fork");
}

#[test]
fn torture_oversubscribed() {
    // 8 threads on this machine's cores: oversubscribed on any CI runner.
    for l in LOCKS {
        scenario_env("torture", Some(l), &[("MPSYNC_TORTURE_ITERS", "20000")]);
    }
}

#[test]
fn hostile_caller() {
    every_lock("hostile");
}

#[test]
fn start_and_exit() {
    every_lock("startexit");
}

#[test]
fn default_and_unknown_lock() {
    // Unset: the default, silently.
    let o = scenario_env("basic", None, &[]);
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Unknown: one line naming the valid values, then the default.
    let o = scenario_env(
        "basic",
        Some("no-such-lock"),
        &[("MPSYNC_EXPECT_LOCK", "bounded-steal")],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "one line:\n{err}");
    assert!(err.contains("MPSYNC_LOCK=no-such-lock"), "{err}");
    for l in LOCKS {
        assert!(err.contains(l), "names {l}: {err}");
    }
    // Verbose: says the choice.
    let o = scenario_env("basic", Some("smart-q"), &[("MPSYNC_PTHREAD_VERBOSE", "1")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("with smart-q"), "{err}");
}

#[test]
fn with_sched_ebpf_loading() {
    // As a user runs it: sched may load its eBPF program (a thread of its
    // own, started by the first lock) where the process is allowed to.
    let mut cmd = Command::new(interpose_bin());
    cmd.arg("cond")
        .env("LD_PRELOAD", cdylib())
        .env_remove("MPSYNC_EBPF")
        .env_remove("MPSYNC_LOCK");
    let o = run_bounded(cmd, "interpose cond with eBPF");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn header_api_linked_directly() {
    let so = cdylib();
    let dir = so.parent().expect("so dir").to_str().expect("utf-8 path");
    let inc = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let bin = compile(
        "direct",
        &[
            &format!("-I{}", inc.display()),
            &format!("-L{dir}"),
            &format!("-Wl,-rpath,{dir}"),
            "-lmpsync_pthread",
        ],
    );
    for l in ["bounded-steal", "mcs-tp"] {
        let mut cmd = Command::new(&bin);
        cmd.env("MPSYNC_LOCK", l).env("MPSYNC_EBPF", "off");
        let o = run_bounded(cmd, "direct");
        assert!(
            o.status.success(),
            "direct ({l}):\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), format!("ok {l}"));
    }
}
