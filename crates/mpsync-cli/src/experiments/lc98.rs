//! `lc98-logp`, `lc98-bandwidth`, `lc98-stress`: Lumetta & Culler (IPPS/SPDP
//! 1998, papers/004) §4.1–4.2 with separate OS processes, per claim algorithm
//! of `mpsync::msgq`, and (LogP) a Unix-domain socket and a pipe carrying the
//! same 64-byte message, same-core and cross-core; with the cargo feature
//! `iceoryx2`, also iceoryx2 publish-subscribe (LogP round trip and stress;
//! see `lc98_iceoryx2`).
//!
//! Processes are forked; a child only maps segments, sends or serves, and
//! `_exit`s (it dies with the harness: `PR_SET_PDEATHSIG`).

use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use mpsync::msgq::{Claim, Endpoint, Error as MqError, Options, Peer};

use super::{Experiment, Params};
use crate::env::Preempt;
use crate::output::{Machine, Point, RunRecord, Status, Trial, Verdict};
use crate::stats::trimmed_mean;
use crate::svg::{Series, bar_chart, line_chart};

/// Runs one of the three.
pub fn run(exp: &Experiment, p: &Params, _preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    mpsync::util::busy::BusyWork::global();
    match exp.id {
        "lc98-logp" => logp(exp, p),
        "lc98-bandwidth" => bandwidth(exp, p),
        "lc98-stress" => stress(exp, p),
        other => bail!("lc98: unknown experiment {other}"),
    }
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A fresh endpoint name (≤ 16 characters).
pub(super) fn fresh(tag: &str) -> String {
    format!(
        "lc{}{tag}{}",
        std::process::id() % 100_000,
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// Forks a child running `f` (pinned to `cpu` if given); its return is the
/// exit status.
pub(super) fn fork_child(
    cpu: Option<usize>,
    f: impl FnOnce() -> i32,
) -> anyhow::Result<libc::pid_t> {
    // SAFETY: the child runs `f` (mapping segments, sending, serving) and
    // `_exit`s without returning into the harness; glibc's fork keeps malloc
    // usable in the child.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        bail!("fork: {}", std::io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: plain prctl: the child dies with the harness.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        if let Some(c) = cpu {
            // Directly, not through `pin_current_thread`: the child inherits
            // the forking thread's (pinned) mask, which need not contain `c`.
            // SAFETY: a zeroed CPU set with one CPU (< CPU_SETSIZE: it came
            // from the process's mask) for this thread.
            let r = unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(c, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
            };
            if r != 0 {
                // SAFETY: leaving the child.
                unsafe { libc::_exit(3) };
            }
        }
        let code = f();
        // SAFETY: leaving the child without the harness's destructors.
        unsafe { libc::_exit(code) };
    }
    Ok(pid)
}

pub(super) fn wait_child(pid: libc::pid_t) -> anyhow::Result<()> {
    let mut st = 0;
    // SAFETY: waiting for our own child.
    let r = unsafe { libc::waitpid(pid, &mut st, 0) };
    if r != pid {
        bail!("waitpid({pid}): {}", std::io::Error::last_os_error());
    }
    if !(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0) {
        bail!("child {pid} failed (status {st:#x})");
    }
    Ok(())
}

/// Why a child is gone, if it is (for error messages).
fn child_status(pid: libc::pid_t) -> String {
    let mut st = 0;
    // SAFETY: polling our own child without blocking.
    let r = unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) };
    if r == pid {
        format!("the child exited with status {st:#x}")
    } else {
        "the child is still running".into()
    }
}

pub(super) fn kill_child(pid: libc::pid_t) {
    // SAFETY: our own child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let mut st = 0;
    // SAFETY: as above.
    unsafe { libc::waitpid(pid, &mut st, 0) };
}

pub(super) fn connect_retry(ep: &Endpoint, name: &str) -> anyhow::Result<Peer> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match ep.connect(name) {
            Ok(p) => return Ok(p),
            Err(MqError::NotFound(_)) | Err(MqError::Corrupt(_)) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(anyhow!("connect to {name}: {e}")),
        }
    }
}

/// Same-core and (when there are two CPUs) cross-core placements: (label,
/// client cpu, server cpu).
fn placements() -> anyhow::Result<Vec<(&'static str, usize, usize)>> {
    let cpus = mpsync::sched::native::available_cpus()?;
    let a = *cpus.first().ok_or_else(|| anyhow!("no CPU available"))?;
    let mut v = vec![("same-core", a, a)];
    if let Some(&b) = cpus.get(1) {
        v.push(("cross-core", a, b));
    }
    Ok(v)
}

const ECHO: u16 = 1;
const SINK: u16 = 2;
const REPORT: u16 = 3;
const RESET: u16 = 4;
const STOP: u16 = 5;

/// The iceoryx2 peer's name, where it is built in (cargo feature `iceoryx2`).
#[cfg(feature = "iceoryx2")]
const ICEORYX2: Option<&str> = Some(super::lc98_iceoryx2::NAME);
/// The iceoryx2 peer's name, where it is built in (cargo feature `iceoryx2`).
#[cfg(not(feature = "iceoryx2"))]
const ICEORYX2: Option<&str> = None;

/// What the verdicts of experiment `id` say where the iceoryx2 peer is not
/// built in.
fn iceoryx2_not_built(id: &str) -> String {
    format!(
        "iceoryx2 not built (cargo feature `iceoryx2`: \
         cargo run --release -p mpsync-cli --features iceoryx2 -- run {id})"
    )
}

/// The verdict clause of the target "lock-free round trip <= 1.0 x
/// iceoryx2's" at one placement: judged where iceoryx2's round trip `iox` was
/// measured, said to be not judged (and why) where it was not.
fn iceoryx2_target(label: &str, lock_free: f64, iox: Option<f64>) -> String {
    let what = format!("{label}: target lock-free RTT <= 1.0 x iceoryx2 pub-sub RTT");
    match iox {
        Some(i) => format!(
            "{what}: {lock_free:.2} / {i:.2} µs = {:.3}: {}",
            lock_free / i,
            yes(lock_free <= i)
        ),
        None => format!("{what}: not judged: {}", iceoryx2_not_built("lc98-logp")),
    }
}

/// The implementation name of the lock-free claim with sleeping receivers.
const DOORBELL: &str = "lock-free+doorbell";
/// How long a doorbell receiver polls before it sleeps.
const DOORBELL_SPIN: Duration = Duration::from_micros(20);

/// The RPC server of the LogP and bandwidth runs: echoes requests, sinks
/// one-way messages, and measures its receive overhead (time inside polls
/// that delivered messages, per message). With `spin: None` it busy-polls
/// (the paper's receivers); with `Some` it sleeps on its doorbell after
/// spinning that long.
fn serve(name: &str, claim: Claim, spin: Option<Duration>) -> i32 {
    let Ok(mut ep) = Endpoint::create(
        name,
        Options::default()
            .claim(claim)
            // Every process of the run is the harness's own: the POSIX mutex may be used.
            .trust_peers(true)
            .spin(spin),
    ) else {
        return 1;
    };
    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    let ok = ep
        .register(ECHO, |cx, m| cx.reply(m.args()))
        .and_then(|_| ep.register(SINK, |_, _| Ok(())))
        .and_then(|_| {
            let s = stats.clone();
            ep.register(REPORT, move |cx, _| {
                cx.reply(&[s.0.load(Ordering::Relaxed), s.1.load(Ordering::Relaxed)])
            })
        })
        .and_then(|_| {
            let s = stats.clone();
            ep.register(RESET, move |cx, _| {
                s.0.store(0, Ordering::Relaxed);
                s.1.store(0, Ordering::Relaxed);
                cx.reply(&[])
            })
        })
        .and_then(|_| {
            let s = stop.clone();
            ep.register(STOP, move |_, _| {
                s.store(true, Ordering::Relaxed);
                Ok(())
            })
        });
    if ok.is_err() {
        return 1;
    }
    let mut idle = 0u32;
    let deadline = Instant::now() + Duration::from_secs(600);
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        let t0 = mpsync::util::clock::now_ns();
        let n = ep.poll();
        if n > 0 {
            let dt = mpsync::util::clock::now_ns() - t0;
            stats.0.fetch_add(dt, Ordering::Relaxed);
            stats.1.fetch_add(n as u64, Ordering::Relaxed);
            idle = 0;
        } else if spin.is_some() {
            // Spin, then sleep until a sender rings (messages taken inside
            // are not timed: o_r comes from the polls above).
            ep.wait(Duration::from_millis(100));
        } else {
            idle += 1;
            if idle.is_multiple_of(64) {
                mpsync::sched::yield_now();
            }
        }
    }
    i32::from(!stop.load(Ordering::Relaxed))
}

/// LogP parameters of one (claim, placement) run, in µs.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
struct LogP {
    rtt: f64,
    o_s: f64,
    o_r: f64,
    g: f64,
    l: f64,
}

fn logp_once(
    claim: Claim,
    spin: Option<Duration>,
    server_cpu: usize,
    rounds: u64,
) -> anyhow::Result<LogP> {
    let srv = fresh("s");
    let s2 = srv.clone();
    let pid = fork_child(Some(server_cpu), move || serve(&s2, claim, spin))?;
    let r = (|| -> anyhow::Result<LogP> {
        let mut ep = Endpoint::create(
            &fresh("c"),
            Options::default()
                .claim(claim)
                // Every process of the run is the harness's own: the POSIX mutex may be used.
                .trust_peers(true)
                .spin(spin),
        )?;
        let peer = connect_retry(&ep, &srv)?;
        let args = [1u64, 2, 3, 4, 5, 6, 7, 8]; // 64 bytes
        for _ in 0..200 {
            ep.request(&peer, ECHO, &args, None)?;
        }
        let t = Instant::now();
        for _ in 0..rounds {
            ep.request(&peer, ECHO, &args, None)?;
        }
        let rtt = t.elapsed().as_secs_f64() * 1e6 / rounds as f64;
        // o_s: bursts of 8 one-way sends into an empty queue (no waiting).
        let bursts = (rounds / 8).max(10);
        let mut send_ns = 0u128;
        for _ in 0..bursts {
            let t = Instant::now();
            for _ in 0..8 {
                ep.send(&peer, SINK, &args)?;
            }
            send_ns += t.elapsed().as_nanos();
            ep.request(&peer, ECHO, &args, None)?; // drained
        }
        let o_s = send_ns as f64 / 1e3 / (bursts * 8) as f64;
        // g and o_r: a long one-way stream; the server times its delivering polls.
        ep.request(&peer, RESET, &[], None)?;
        let n = rounds * 8;
        let t = Instant::now();
        for _ in 0..n {
            ep.send(&peer, SINK, &args)?;
        }
        ep.request(&peer, ECHO, &args, None)?;
        let g = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        let rep = ep.request(&peer, REPORT, &[], None)?;
        let (busy, msgs) = (rep.args()[0] as f64, rep.args()[1].max(1) as f64);
        let o_r = busy / 1e3 / msgs;
        ep.send(&peer, STOP, &[])?;
        Ok(LogP {
            rtt,
            o_s,
            o_r,
            g,
            l: rtt / 2.0 - o_s - o_r,
        })
    })();
    match r {
        Ok(v) => {
            wait_child(pid)?;
            Ok(v)
        }
        Err(e) => {
            let why = child_status(pid);
            kill_child(pid);
            Err(e.context(why))
        }
    }
}

/// Round trip of a 64-byte message over a byte stream to an echoing child.
fn stream_rtt(
    server_cpu: usize,
    rounds: u64,
    make: fn() -> anyhow::Result<StreamPair>,
) -> anyhow::Result<f64> {
    let (mut mine, mut theirs) = make()?;
    let pid = fork_child(Some(server_cpu), move || {
        let mut b = [0u8; 64];
        while theirs.read_exact(&mut b).is_ok() {
            if theirs.write_all(&b).is_err() {
                return 1;
            }
        }
        0
    })?;
    let b = [7u8; 64];
    let mut r = [0u8; 64];
    for _ in 0..200 {
        mine.write_all(&b)?;
        mine.read_exact(&mut r)?;
    }
    let t = Instant::now();
    for _ in 0..rounds {
        mine.write_all(&b)?;
        mine.read_exact(&mut r)?;
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / rounds as f64;
    drop(mine);
    // The parent's copy of the child's end must go too, or the child never sees EOF.
    kill_child(pid);
    Ok(us)
}

/// A bidirectional byte stream.
trait ReadWrite: Read + Write + Send {}

/// Both ends of a fresh byte-stream connection.
type StreamPair = (Box<dyn ReadWrite>, Box<dyn ReadWrite>);
impl<T: Read + Write + Send> ReadWrite for T {}

fn uds_pair() -> anyhow::Result<StreamPair> {
    let (a, b) = UnixStream::pair()?;
    Ok((Box::new(a), Box::new(b)))
}

/// Two pipes, one per direction.
struct PipeEnd {
    r: std::fs::File,
    w: std::fs::File,
}
impl Read for PipeEnd {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        self.r.read(b)
    }
}
impl Write for PipeEnd {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.w.write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn pipe_pair() -> anyhow::Result<StreamPair> {
    let mut fds = [0i32; 4];
    // SAFETY: two fresh pipes; the descriptors are owned by the Files below.
    unsafe {
        if libc::pipe(fds.as_mut_ptr()) != 0 || libc::pipe(fds.as_mut_ptr().add(2)) != 0 {
            bail!("pipe: {}", std::io::Error::last_os_error());
        }
        Ok((
            Box::new(PipeEnd {
                r: std::fs::File::from_raw_fd(fds[0]),
                w: std::fs::File::from_raw_fd(fds[3]),
            }),
            Box::new(PipeEnd {
                r: std::fs::File::from_raw_fd(fds[2]),
                w: std::fs::File::from_raw_fd(fds[1]),
            }),
        ))
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn record(
    exp: &Experiment,
    p: &Params,
    started: Instant,
    unit: &str,
    x_label: &str,
    baseline: &str,
    trials: Vec<Trial>,
    points: Vec<Point>,
    extra: serde_json::Value,
    verdict: Verdict,
    params: serde_json::Value,
) -> RunRecord {
    RunRecord {
        advice: Vec::new(),
        experiment: exp.id.into(),
        paper: exp.reference.into(),
        title: exp.title.into(),
        preempt: "none".into(),
        started_unix: crate::unix_now(),
        duration_s: started.elapsed().as_secs_f64(),
        machine: Machine::detect(),
        params: serde_json::json!({ "common": p, "experiment": params }),
        busy_iters_per_us: mpsync::util::busy::BusyWork::global().iters_per_us(),
        unit: unit.into(),
        x_label: x_label.into(),
        baseline: baseline.into(),
        trials,
        points,
        extra,
        verdict,
    }
}

pub(super) fn mean_of(trials: &[Trial], name: &str, x: f64) -> Option<f64> {
    let v: Vec<f64> = trials
        .iter()
        .filter(|t| t.implementation == name && t.x == x)
        .map(|t| t.value)
        .collect();
    trimmed_mean(&v)
}

fn logp(exp: &Experiment, p: &Params) -> anyhow::Result<(RunRecord, String)> {
    let started = Instant::now();
    let rounds = ((20_000.0 * p.scale * if p.quick { 0.1 } else { 1.0 }).round() as u64).max(200);
    let places = placements()?;
    let per_place = 9 + u64::from(ICEORYX2.is_some());
    let pb = crate::progress(
        u64::from(p.trials) * places.len() as u64 * per_place,
        exp.id,
    );
    let mut trials = Vec::new();
    let mut table = serde_json::Map::new();
    let mut logps: Vec<(String, f64, LogP)> = Vec::new();
    // Interleaved: every trial runs every implementation once, in order. The
    // client runs on a dedicated thread, pinned per placement (the caller's
    // affinity is left alone); each server child pins itself.
    std::thread::scope(|scope| {
        scope
            .spawn(|| logp_trials(p, rounds, &places, &pb, &mut trials, &mut logps))
            .join()
            .map_err(|_| anyhow!("the measuring thread panicked"))?
    })?;
    pb.finish_and_clear();
    let mut names: Vec<String> = Claim::ALL.iter().map(|c| c.name().to_string()).collect();
    names.push(DOORBELL.into());
    names.push("unix-socket".into());
    names.push("pipe".into());
    names.extend(ICEORYX2.map(String::from));
    let mut points = Vec::new();
    let mut details = Vec::new();
    let mut holds = true;
    for (xi, &(label, _, _)) in places.iter().enumerate() {
        let x = xi as f64;
        let uds = mean_of(&trials, "unix-socket", x).unwrap_or(f64::NAN);
        for n in &names {
            if let Some(v) = mean_of(&trials, n, x) {
                points.push(Point {
                    panel: None,
                    implementation: n.clone(),
                    x,
                    value: v,
                    normalized: v / uds,
                });
            }
        }
        // Per claim: the LogP parameters, trimmed means over trials.
        let mut rows = serde_json::Map::new();
        let param = |c: &str, f: fn(&LogP) -> f64| {
            let v: Vec<f64> = logps
                .iter()
                .filter(|(n, px, _)| n == c && *px == x)
                .map(|(_, _, l)| f(l))
                .collect();
            trimmed_mean(&v).unwrap_or(f64::NAN)
        };
        for n in Claim::ALL.map(|c| c.name()).into_iter().chain([DOORBELL]) {
            let row = LogP {
                rtt: param(n, |l| l.rtt),
                o_s: param(n, |l| l.o_s),
                o_r: param(n, |l| l.o_r),
                g: param(n, |l| l.g),
                l: param(n, |l| l.l),
            };
            details.push(format!(
                "{label} {n}: L {:.2} µs, o_s {:.2}, o_r {:.2}, g {:.2}, RTT {:.2} µs",
                row.l, row.o_s, row.o_r, row.g, row.rtt
            ));
            rows.insert(n.into(), serde_json::to_value(row)?);
        }
        table.insert(label.into(), serde_json::Value::Object(rows));
        let rtt = |n: &str| param(n, |l| l.rtt);
        let locks_and_lf = ["tas", "tatas", "ticket", "anderson", "lock-free"];
        let vals: Vec<f64> = locks_and_lf.iter().map(|n| rtt(n)).collect();
        let (mn, mx) = vals
            .iter()
            .fold((f64::MAX, 0.0f64), |(a, b), &v| (a.min(v), b.max(v)));
        let eq = mx / mn <= 1.25;
        let posix = rtt("posix-mutex");
        let posix_worst = posix > mx;
        let os = |n: &str| param(n, |l| l.o_s);
        let mut lock_os: Vec<f64> = ["tas", "tatas", "ticket", "anderson"]
            .iter()
            .map(|n| os(n))
            .collect();
        lock_os.sort_by(f64::total_cmp);
        let lf_os_higher = os("lock-free") >= lock_os[1];
        if label == "cross-core" || places.len() == 1 {
            holds &= eq && posix_worst && lf_os_higher;
        }
        details.push(format!(
            "{label}: TAS/TATAS/Ticket/Anderson/lock-free RTTs within 25% of each other: {} (max/min = {:.2})",
            yes(eq),
            mx / mn
        ));
        details.push(format!(
            "{label}: POSIX mutex RTT ({posix:.2} µs) above all the others ({mx:.2} µs): {}",
            yes(posix_worst)
        ));
        details.push(format!(
            "{label}: lock-free o_s ({:.2} µs) at least the locks' median ({:.2} µs): {}",
            os("lock-free"),
            (lock_os[1] + lock_os[2]) / 2.0,
            yes(lf_os_higher)
        ));
        details.push(format!(
            "{label}: target lock-free RTT <= 0.1 x unix-socket RTT: {:.2} / {:.2} µs = {:.3}",
            rtt("lock-free"),
            uds,
            rtt("lock-free") / uds
        ));
        let iox = ICEORYX2.map(|n| mean_of(&trials, n, x).unwrap_or(f64::NAN));
        if let Some(i) = iox {
            details.push(format!(
                "{label}: iceoryx2 pub-sub (two services, ping and pong, 64-byte loaned samples, busy polling): RTT {i:.2} µs = {:.3} x unix-socket",
                i / uds
            ));
        }
        details.push(iceoryx2_target(label, rtt("lock-free"), iox));
        details.push(format!(
            "{label}: lock-free with the doorbell (receivers spin up to {} µs, adaptively, then sleep until rung): RTT {:.2} µs = {:.3} x unix-socket, {:.3} x busy-polling lock-free",
            DOORBELL_SPIN.as_micros(),
            rtt(DOORBELL),
            rtt(DOORBELL) / uds,
            rtt(DOORBELL) / rtt("lock-free")
        ));
    }
    if ICEORYX2.is_none() {
        details.push(format!(
            "iceoryx2 publish-subscribe peer: not run: {}; not in the default build because \
             its release build alone took ~13 min on 2 shared cores",
            iceoryx2_not_built(exp.id)
        ));
    }
    let bars: Vec<(String, f64)> = points
        .iter()
        .filter(|pt| pt.x == (places.len() - 1) as f64)
        .map(|pt| (pt.implementation.clone(), pt.value))
        .collect();
    let svg = bar_chart(
        &format!(
            "lc98-logp: 64-byte round trip, {}",
            places[places.len() - 1].0
        ),
        "µs per round trip (trimmed mean of trials)",
        &bars,
    );
    let verdict = Verdict {
        clauses: Vec::new(),
        conclusion: "all but the POSIX mutex nearly equal; the lock-free claim slightly higher o_s (cross-core clauses decide)".into(),
        status: if holds { Status::Holds } else { Status::DoesNotHold },
        details,
    };
    let rec = record(
        exp,
        p,
        started,
        "µs per 64-byte round trip",
        "placement (0 same-core, 1 cross-core)",
        "unix-socket round trip at the same placement",
        trials,
        points,
        serde_json::json!({ "logp_us": table, "iceoryx2_built": ICEORYX2.is_some() }),
        verdict,
        serde_json::json!({ "round_trips": rounds, "placements": places.iter().map(|p| p.0).collect::<Vec<_>>() }),
    );
    Ok((rec, svg))
}

#[allow(clippy::type_complexity)]
fn logp_trials(
    p: &Params,
    rounds: u64,
    places: &[(&'static str, usize, usize)],
    pb: &indicatif::ProgressBar,
    trials: &mut Vec<Trial>,
    logps: &mut Vec<(String, f64, LogP)>,
) -> anyhow::Result<()> {
    for t in 0..p.trials {
        for (xi, &(_, c, s)) in places.iter().enumerate() {
            let x = xi as f64;
            mpsync::sched::native::pin_current_thread(c)?;
            let runs = Claim::ALL.map(|c| (c, None, c.name())).into_iter().chain([(
                Claim::LockFree,
                Some(DOORBELL_SPIN),
                DOORBELL,
            )]);
            for (claim, spin, name) in runs {
                let v = logp_once(claim, spin, s, rounds)
                    .with_context(|| format!("lc98-logp {name} trial {t}"))?;
                trials.push(Trial {
                    implementation: name.into(),
                    x,
                    trial: t,
                    value: v.rtt,
                    ..Trial::default()
                });
                logps.push((name.into(), x, v));
                pb.inc(1);
            }
            for (name, make) in [
                ("unix-socket", uds_pair as fn() -> _),
                ("pipe", pipe_pair as fn() -> _),
            ] {
                let us =
                    stream_rtt(s, rounds, make).with_context(|| format!("{name} round trip"))?;
                trials.push(Trial {
                    implementation: name.into(),
                    x,
                    trial: t,
                    value: us,
                    ..Trial::default()
                });
                pb.inc(1);
            }
            #[cfg(feature = "iceoryx2")]
            {
                let us = super::lc98_iceoryx2::round_trip(c, s, rounds).with_context(|| {
                    format!("lc98-logp {} trial {t}", super::lc98_iceoryx2::NAME)
                })?;
                trials.push(Trial {
                    implementation: super::lc98_iceoryx2::NAME.into(),
                    x,
                    trial: t,
                    value: us,
                    ..Trial::default()
                });
                pb.inc(1);
            }
        }
    }
    Ok(())
}

pub(super) fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "NO" }
}

/// In-process copy rate of 8 KB blocks, MB/s: the paper's "memory copy
/// rate". Source and destination walk through 32 MB buffers, so the copies
/// come from and go to memory, not a cache-resident block.
fn memcpy_rate(blocks: u64) -> f64 {
    const BUF: usize = 32 << 20;
    let src = vec![0x5au8; BUF];
    let mut dst = vec![1u8; BUF]; // non-zero: its pages are touched before timing
    let per = BUF / 8192;
    let t = Instant::now();
    for i in 0..blocks as usize {
        let o = (i % per) * 8192;
        dst[o..o + 8192].copy_from_slice(&src[o..o + 8192]);
        std::hint::black_box(&mut dst);
    }
    blocks as f64 * 8192.0 / t.elapsed().as_secs_f64() / 1e6
}

fn bandwidth(exp: &Experiment, p: &Params) -> anyhow::Result<(RunRecord, String)> {
    let started = Instant::now();
    let blocks = ((20_000.0 * p.scale * if p.quick { 0.1 } else { 1.0 }).round() as u64).max(200);
    let places = placements()?;
    let &(label, c, s) = places.last().expect("one placement at least");
    let pb = crate::progress(u64::from(p.trials) * 7, exp.id);
    let mut trials = Vec::new();
    let mut recv_cost: Vec<(&str, f64)> = Vec::new();
    // The client runs on a dedicated thread pinned to its CPU (the caller's
    // affinity is left alone); the server child pins itself to the other.
    std::thread::scope(|scope| {
        scope
            .spawn(|| -> anyhow::Result<()> {
                mpsync::sched::native::pin_current_thread(c)?;
                let data = vec![0xa5u8; 8192];
                for t in 0..p.trials {
                    for claim in Claim::ALL {
                        let srv = fresh("b");
                        let s2 = srv.clone();
                        let pid = fork_child(Some(s), move || serve(&s2, claim, None))?;
                        let r = (|| -> anyhow::Result<(f64, f64)> {
                            let _ = c;
                            let mut ep = Endpoint::create(
                                &fresh("bc"),
                                Options::default()
                                    .claim(claim)
                                    // Every process of the run is the harness's own: the POSIX mutex may be used.
                                    .trust_peers(true)
                                    .spin(None),
                            )?;
                            let peer = connect_retry(&ep, &srv)?;
                            for _ in 0..100 {
                                ep.send_bulk(&peer, SINK, &[], &data)?;
                            }
                            ep.request(&peer, ECHO, &[], None)?;
                            ep.request(&peer, RESET, &[], None)?;
                            let t0 = Instant::now();
                            for _ in 0..blocks {
                                ep.send_bulk(&peer, SINK, &[], &data)?;
                            }
                            ep.request(&peer, ECHO, &[], None)?;
                            let mbs = blocks as f64 * 8192.0 / t0.elapsed().as_secs_f64() / 1e6;
                            // The server's time inside polls that delivered,
                            // per message: its receive cost per 8 KB block.
                            let rep = ep.request(&peer, REPORT, &[], None)?;
                            let o_r = rep.args()[0] as f64 / 1e3 / rep.args()[1].max(1) as f64;
                            ep.send(&peer, STOP, &[])?;
                            Ok((mbs, o_r))
                        })();
                        match r {
                            Ok((v, o_r)) => {
                                wait_child(pid)?;
                                trials.push(Trial {
                                    implementation: claim.name().into(),
                                    x: 1.0,
                                    trial: t,
                                    value: v,
                                    ..Trial::default()
                                });
                                recv_cost.push((claim.name(), o_r));
                            }
                            Err(e) => {
                                kill_child(pid);
                                return Err(e.context(format!("lc98-bandwidth {}", claim.name())));
                            }
                        }
                        pb.inc(1);
                    }
                    trials.push(Trial {
                        implementation: "memcpy".into(),
                        x: 1.0,
                        trial: t,
                        value: memcpy_rate(blocks * 4),
                        ..Trial::default()
                    });
                    pb.inc(1);
                }
                Ok(())
            })
            .join()
            .map_err(|_| anyhow!("the measuring thread panicked"))?
    })?;
    pb.finish_and_clear();
    let memcpy = mean_of(&trials, "memcpy", 1.0).unwrap_or(f64::NAN);
    let mut points = Vec::new();
    for n in Claim::ALL.iter().map(|c| c.name()).chain(["memcpy"]) {
        if let Some(v) = mean_of(&trials, n, 1.0) {
            points.push(Point {
                panel: None,
                implementation: n.into(),
                x: 1.0,
                value: v,
                normalized: v / memcpy,
            });
        }
    }
    let at = |n: &str| {
        points
            .iter()
            .find(|p| p.implementation == n)
            .map_or(f64::NAN, |p| p.value)
    };
    let best = Claim::ALL
        .iter()
        .map(|c| at(c.name()))
        .fold(0.0f64, f64::max);
    let lf_best = at("lock-free") >= 0.95 * best;
    let worst = Claim::ALL
        .iter()
        .map(|c| at(c.name()))
        .fold(f64::MAX, f64::min);
    let near = worst >= 0.5 * memcpy;
    let mut details = vec![format!(
        "{label}, 8 KB bulk messages, {blocks} per trial; memcpy of 8 KB blocks in one process: {memcpy:.0} MB/s"
    )];
    let o_r = |n: &str| {
        let v: Vec<f64> = recv_cost
            .iter()
            .filter(|(m, _)| *m == n)
            .map(|(_, x)| *x)
            .collect();
        trimmed_mean(&v).unwrap_or(f64::NAN)
    };
    for c in Claim::ALL {
        details.push(format!(
            "{}: {:.0} MB/s = {:.2} x memcpy; the receiver's time per 8 KB block inside delivering polls {:.2} µs (= {:.0} MB/s if it were the only cost)",
            c.name(),
            at(c.name()),
            at(c.name()) / memcpy,
            o_r(c.name()),
            8192.0 / o_r(c.name())
        ));
    }
    details.push(format!(
        "lock-free within 5% of the best claim: {}",
        yes(lf_best)
    ));
    details.push(format!(
        "every claim at least half the memcpy rate (the paper had ~80%): {} (slowest {:.2} x)",
        yes(near),
        worst / memcpy
    ));
    let bars: Vec<(String, f64)> = points
        .iter()
        .map(|p| (p.implementation.clone(), p.value))
        .collect();
    let svg = bar_chart("lc98-bandwidth: 8 KB bulk transfers", "MB/s", &bars);
    let verdict = Verdict {
        clauses: Vec::new(),
        conclusion: "lock-free highest; all near the memcpy rate".into(),
        status: if lf_best && near {
            Status::Holds
        } else {
            Status::DoesNotHold
        },
        details,
    };
    let rec = record(
        exp,
        p,
        started,
        "MB/s",
        "placement (1 cross-core)",
        "memcpy of 8 KB blocks in one process",
        trials,
        points,
        serde_json::json!({ "receiver_us_per_block": Claim::ALL.map(|c| (c.name(), o_r(c.name()))).into_iter().collect::<std::collections::BTreeMap<_, _>>() }),
        verdict,
        serde_json::json!({ "blocks_per_trial": blocks, "placement": label }),
    );
    Ok((rec, svg))
}

/// CPU time of the calling thread, seconds.
pub(super) fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// One stress run: `writers` processes send `total` one-word messages in all
/// to this process. Returns (seconds, censored: whether it hit the cap and was
/// extrapolated, the receiver's CPU seconds during the run, how many of the
/// receiver's rings of the space bell found writers asleep on the full ring,
/// how many tickets it revoked because they stayed unclaimed for a lease).
fn stress_once(
    claim: Claim,
    writers: u64,
    total: u64,
    cap: Duration,
) -> anyhow::Result<(f64, bool, f64, u64, u64)> {
    let o = Options {
        timeout: Duration::from_secs(600),
        ..Options::default()
    }
    .claim(claim)
    // Every process of the run is the harness's own: the POSIX mutex may be used.
    .trust_peers(true);
    let mut ep = Endpoint::create(&fresh("r"), o.clone())?;
    let count = Arc::new(AtomicU64::new(0));
    let sum = Arc::new(AtomicU64::new(0));
    {
        let (c, s) = (count.clone(), sum.clone());
        ep.register(SINK, move |_, m| {
            c.fetch_add(1, Ordering::Relaxed);
            s.fetch_add(m.args()[0], Ordering::Relaxed);
            Ok(())
        })?;
    }
    let mut go = [0i32; 2];
    // SAFETY: a fresh pipe; closed below (both ends in the parent, the read
    // end implicitly in the children at exit).
    if unsafe { libc::pipe(go.as_mut_ptr()) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    let per = total / writers;
    let name = ep.name().to_string();
    let mut pids = Vec::new();
    for w in 0..writers {
        let (name, o) = (name.clone(), o.clone());
        let n = if w == writers - 1 {
            total - per * (writers - 1)
        } else {
            per
        };
        pids.push(fork_child(None, move || {
            let Ok(peer) = Peer::connect(&name, &o) else {
                return 1;
            };
            let mut b = [0u8; 1];
            // SAFETY: reading one byte from the inherited pipe.
            if unsafe { libc::read(go[0], b.as_mut_ptr().cast(), 1) } != 1 {
                return 1;
            }
            for i in 0..n {
                if peer.send(SINK, &[w * 1_000_000_000 + i], None).is_err() {
                    return 1;
                }
            }
            0
        })?);
    }
    let start = Instant::now();
    let cpu0 = thread_cpu_s();
    // SAFETY: writing `writers` bytes to our pipe's write end.
    unsafe {
        let bytes = vec![1u8; writers as usize];
        libc::write(go[1], bytes.as_ptr().cast(), bytes.len());
    }
    let mut idle = 0u32;
    let mut censored = false;
    while count.load(Ordering::Relaxed) < total {
        if ep.poll() == 0 {
            idle += 1;
            if idle.is_multiple_of(64) {
                mpsync::sched::yield_now();
                if start.elapsed() > cap {
                    censored = true;
                    break;
                }
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = thread_cpu_s() - cpu0;
    // SAFETY: closing our pipe ends.
    unsafe {
        libc::close(go[0]);
        libc::close(go[1]);
    }
    if censored {
        for pid in pids {
            kill_child(pid);
        }
        let got = count.load(Ordering::Relaxed).max(1);
        return Ok((
            secs * total as f64 / got as f64,
            true,
            cpu,
            ep.stats().sender_wakeups,
            ep.stats().revoked,
        ));
    }
    for pid in pids {
        wait_child(pid)?;
    }
    let want: u64 = (0..writers)
        .map(|w| {
            let n = if w == writers - 1 {
                total - per * (writers - 1)
            } else {
                per
            };
            w * 1_000_000_000 * n + n * (n.saturating_sub(1)) / 2
        })
        .sum();
    if sum.load(Ordering::Relaxed) != want || ep.stats().rejected != 0 {
        bail!(
            "lc98-stress {}: conservation failed (sum or rejected packets)",
            claim.name()
        );
    }
    let st = ep.stats();
    Ok((secs, false, cpu, st.sender_wakeups, st.revoked))
}

/// One stress run as the receiver saw it: (claim, writers, CPU share of the
/// run, CPU µs per message, rings that woke sleeping writers, tickets revoked).
type RecvRow<'a> = (&'a str, u64, f64, f64, f64, f64);

fn stress(exp: &Experiment, p: &Params) -> anyhow::Result<(RunRecord, String)> {
    let started = Instant::now();
    let total =
        ((1_000_000.0 * p.scale * if p.quick { 0.1 } else { 1.0 }).round() as u64).max(1000);
    let writer_counts: Vec<u64> = p.threads.as_ref().map_or_else(
        || vec![1, 3, 7],
        |t| t.iter().map(|&x| u64::from(x)).collect(),
    );
    let cap = Duration::from_secs(if p.quick { 5 } else { 120 });
    let per_count = 6 + u64::from(ICEORYX2.is_some());
    let pb = crate::progress(
        u64::from(p.trials) * writer_counts.len() as u64 * per_count,
        exp.id,
    );
    let mut trials = Vec::new();
    // (claim, writers, receiver's CPU share of the run, its CPU µs per message,
    // rings that woke writers asleep on the full ring, tickets revoked)
    let mut recv: Vec<RecvRow<'_>> = Vec::new();
    for t in 0..p.trials {
        for &w in &writer_counts {
            for claim in Claim::ALL {
                let (secs, cens, cpu, woke, revoked) = stress_once(claim, w, total, cap)
                    .with_context(|| format!("lc98-stress {} with {w} writers", claim.name()))?;
                trials.push(Trial {
                    implementation: claim.name().into(),
                    x: w as f64,
                    trial: t,
                    value: secs,
                    procs: Some(p.cores),
                    censored_at: cens.then_some(cap.as_secs_f64()),
                    ..Trial::default()
                });
                if !cens {
                    recv.push((
                        claim.name(),
                        w,
                        cpu / secs,
                        cpu * 1e6 / total as f64,
                        woke as f64,
                        revoked as f64,
                    ));
                }
                pb.inc(1);
            }
            #[cfg(feature = "iceoryx2")]
            {
                let n = super::lc98_iceoryx2::NAME;
                let (secs, cens, cpu) = super::lc98_iceoryx2::stress_once(w, total, cap)
                    .with_context(|| format!("lc98-stress {n} with {w} publishers"))?;
                trials.push(Trial {
                    implementation: n.into(),
                    x: w as f64,
                    trial: t,
                    value: secs,
                    procs: Some(p.cores),
                    censored_at: cens.then_some(cap.as_secs_f64()),
                    ..Trial::default()
                });
                if !cens {
                    // No space bell and no tickets: NaN, left out of the details.
                    let per_msg = cpu * 1e6 / total as f64;
                    recv.push((n, w, cpu / secs, per_msg, f64::NAN, f64::NAN));
                }
                pb.inc(1);
            }
        }
    }
    // The claims, then the peer where it is built in.
    let impls: Vec<&str> = Claim::ALL
        .iter()
        .map(|c| c.name())
        .chain(ICEORYX2)
        .collect();
    pb.finish_and_clear();
    let recv_at = |n: &str, w: u64| {
        let f = |sel: fn(&RecvRow<'_>) -> f64| {
            let v: Vec<f64> = recv
                .iter()
                .filter(|r| r.0 == n && r.1 == w)
                .map(sel)
                .collect();
            trimmed_mean(&v).unwrap_or(f64::NAN)
        };
        (f(|r| r.2), f(|r| r.3), f(|r| r.4), f(|r| r.5))
    };
    let mut points = Vec::new();
    let w0 = writer_counts[0] as f64;
    for &c in &impls {
        for &w in &writer_counts {
            if let Some(v) = mean_of(&trials, c, w as f64) {
                let base = mean_of(&trials, c, w0).unwrap_or(v);
                points.push(Point {
                    panel: None,
                    implementation: c.into(),
                    x: w as f64,
                    value: v,
                    normalized: v / base,
                });
            }
        }
    }
    let at = |n: &str, w: u64| mean_of(&trials, n, w as f64).unwrap_or(f64::NAN);
    let (lo, hi) = (writer_counts[0], *writer_counts.last().expect("non-empty"));
    let mut details = vec![format!(
        "{total} one-word messages in all per run, writers unpinned on {} cores (oversubscribed beyond {}); time in seconds",
        p.cores,
        p.cores.saturating_sub(1)
    )];
    for &c in &impls {
        let row: Vec<String> = writer_counts
            .iter()
            .map(|&w| format!("{w}: {:.3} s", at(c, w)))
            .collect();
        details.push(format!("{c}: {}", row.join(", ")));
    }
    // Where the time goes: a receiver that is on a CPU only part of the run
    // bounds every claim alike (2 cores shared by writers + 1 processes).
    for &c in &impls {
        let row: Vec<String> = writer_counts
            .iter()
            .map(|&w| {
                let (share, us, woke, revoked) = recv_at(c, w);
                let msgq = if woke.is_nan() {
                    String::new() // the iceoryx2 peer: no space bell, no tickets
                } else {
                    format!(
                        ", {woke:.0} rings woke writers asleep on the full ring, \
                         {revoked:.0} tickets revoked (unclaimed for a lease)"
                    )
                };
                format!(
                    "{w}: on a CPU {:.0}% of the run, {us:.3} µs CPU per message{msgq}",
                    share * 100.0
                )
            })
            .collect();
        details.push(format!("{c} receiver: {}", row.join("; ")));
    }
    let lf_faster = at("lock-free", hi) <= at("lock-free", lo);
    details.push(format!(
        "lock-free gets faster with more writers ({hi} vs {lo}): {} ({:.3} vs {:.3} s)",
        yes(lf_faster),
        at("lock-free", hi),
        at("lock-free", lo)
    ));
    let mut locks_slower = true;
    for n in ["tas", "tatas", "ticket", "anderson"] {
        let s = at(n, hi) > at(n, lo);
        locks_slower &= s;
        details.push(format!(
            "{n} slows down with more writers: {} ({:.3} vs {:.3} s)",
            yes(s),
            at(n, hi),
            at(n, lo)
        ));
    }
    let posix_worst = Claim::ALL
        .iter()
        .filter(|c| **c != Claim::PosixRobust)
        .all(|c| at("posix-mutex", hi) >= at(c.name(), hi));
    details.push(format!(
        "POSIX mutex slowest with {hi} writers: {}",
        yes(posix_worst)
    ));
    details.push(format!(
        "target: lock-free throughput >= 3 x POSIX mutex with {hi} writers: {:.2} x",
        at("posix-mutex", hi) / at("lock-free", hi)
    ));
    #[cfg(feature = "iceoryx2")]
    {
        let n = super::lc98_iceoryx2::NAME;
        details.push(format!(
            "{n} ({hi} publisher processes to one subscriber process, a service that never \
             overflows: a publisher retries while the subscriber's {}-sample buffer is full; \
             clock from a start signal after every process connected): lock-free takes {:.2} x \
             its time with {hi} writers, {:.2} x with {lo}",
            super::lc98_iceoryx2::STRESS_BUFFER,
            at("lock-free", hi) / at(n, hi),
            at("lock-free", lo) / at(n, lo)
        ));
    }
    #[cfg(not(feature = "iceoryx2"))]
    details.push(format!(
        "iceoryx2 pub-sub: not run: {}",
        iceoryx2_not_built(exp.id)
    ));
    if trials.iter().any(|t| t.censored_at.is_some()) {
        details.push(format!(
            "some runs hit the {} s cap and were extrapolated from the fraction delivered (censored_at in data.csv)",
            cap.as_secs()
        ));
    }
    let series: Vec<Series> = impls
        .iter()
        .map(|&c| Series {
            label: c.into(),
            points: writer_counts
                .iter()
                .map(|&w| (w as f64, at(c, w)))
                .collect(),
        })
        .collect();
    let svg = line_chart(
        "lc98-stress: many-to-one",
        "writer processes",
        "seconds",
        &series,
    );
    let verdict = Verdict {
        clauses: Vec::new(),
        conclusion: "lock-free gets faster with more writers; locks slow down; POSIX mutex worst"
            .into(),
        status: if lf_faster && locks_slower && posix_worst {
            Status::Holds
        } else {
            Status::DoesNotHold
        },
        details,
    };
    let advice = crate::model::advice_from_points(
        "message claim",
        crate::model::Better::Lower,
        "writer processes",
        "many-to-one",
        impls
            .iter()
            .filter(|c| Claim::ALL.iter().any(|k| k.name() == **c))
            .map(|c| crate::model::Imp::ours(*c, "message claim"))
            .collect(),
        &points,
    );
    let mut rec = record(
        exp,
        p,
        started,
        "seconds per run",
        "writer processes",
        "the same claim with the fewest writers",
        trials,
        points,
        serde_json::json!({ "receiver": impls.iter().map(|&c| (c, writer_counts.iter().map(|&w| {
            let (share, us, woke, revoked) = recv_at(c, w);
            serde_json::json!({ "writers": w, "cpu_share": share, "cpu_us_per_message": us, "sender_wakeups": woke, "revoked": revoked })
        }).collect::<Vec<_>>())).collect::<std::collections::BTreeMap<_, _>>() }),
        verdict,
        serde_json::json!({ "messages_per_run": total, "writers": writer_counts, "cap_s": cap.as_secs() }),
    );
    rec.advice = advice.into_iter().collect();
    Ok((rec, svg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iceoryx2_target_is_judged_when_measured_and_explained_when_not() {
        let met = iceoryx2_target("cross-core", 0.9, Some(1.0));
        assert!(met.ends_with("= 0.900: yes"), "{met}");
        let equal = iceoryx2_target("cross-core", 1.0, Some(1.0));
        assert!(equal.ends_with(": yes"), "{equal}");
        let missed = iceoryx2_target("cross-core", 1.5, Some(1.0));
        assert!(missed.ends_with("= 1.500: NO"), "{missed}");
        let absent = iceoryx2_target("same-core", 0.9, None);
        assert!(
            absent.contains("not judged: iceoryx2 not built (cargo feature `iceoryx2`"),
            "{absent}"
        );
        assert!(
            absent.contains("--features iceoryx2 -- run lc98-logp"),
            "{absent}"
        );
    }
}
