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
use crate::model::{
    self, AdviceRule, Better, Clause, Design, Imp, Judged, Panel, Results, Role, Verdicts, fmt_x,
};
use crate::output::{RunRecord, Trial};
use crate::stats::trimmed_mean;

/// Runs one of the three.
pub fn run(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    mpsync::util::busy::BusyWork::global();
    match exp.id {
        "lc98-logp" => logp(exp, p, preempt),
        "lc98-bandwidth" => bandwidth(exp, p, preempt),
        "lc98-stress" => stress(exp, p, preempt),
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

/// The trial of a run of `secs` seconds on `cores` cores, `censored` when
/// it hit `cap` (it then counts as the cap).
pub(super) fn capped_trial(secs: f64, censored: bool, cap: Duration, cores: u32) -> Trial {
    Trial {
        value: secs,
        procs: Some(cores),
        censored_at: censored.then_some(cap.as_secs_f64()),
        ..Trial::default()
    }
}

fn mean_of(trials: &[Trial], name: &str, x: f64) -> Option<f64> {
    let v: Vec<f64> = trials
        .iter()
        .filter(|t| t.implementation == name && t.x == x)
        .map(|t| t.value)
        .collect();
    trimmed_mean(&v)
}

fn yes(b: bool) -> &'static str {
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

/// How many of `total` messages writer `w` of `writers` sends (the last
/// one takes the remainder).
pub(super) fn writer_share(w: u64, writers: u64, total: u64) -> u64 {
    let per = total / writers;
    if w == writers - 1 {
        total - per * (writers - 1)
    } else {
        per
    }
}

/// The sum of every message's word when writer `w` sends
/// `w · 10⁹ + i` for each `i` below its [`writer_share`]: what the
/// receiver must have added up.
pub(super) fn stress_sum(writers: u64, total: u64) -> u64 {
    (0..writers)
        .map(|w| {
            let n = writer_share(w, writers, total);
            w * 1_000_000_000 * n + n * n.saturating_sub(1) / 2
        })
        .sum()
}

/// Forks the `writers` writer processes of a stress run to endpoint `name`:
/// each connects, waits for a byte on `go_r`, then sends its share.
fn fork_writers(
    name: &str,
    o: &Options,
    writers: u64,
    total: u64,
    go_r: i32,
) -> anyhow::Result<Vec<libc::pid_t>> {
    let mut pids = Vec::new();
    for w in 0..writers {
        let n = writer_share(w, writers, total);
        let fork = fork_child(None, move || {
            let Ok(peer) = Peer::connect(name, o) else {
                return 1;
            };
            let mut b = [0u8; 1];
            // SAFETY: reading one byte from the inherited pipe.
            if unsafe { libc::read(go_r, b.as_mut_ptr().cast(), 1) } != 1 {
                return 1;
            }
            for i in 0..n {
                if peer.send(SINK, &[w * 1_000_000_000 + i], None).is_err() {
                    return 1;
                }
            }
            0
        });
        match fork {
            Ok(pid) => pids.push(pid),
            Err(e) => {
                pids.into_iter().for_each(kill_child);
                return Err(e);
            }
        }
    }
    Ok(pids)
}

/// Closes both ends of a pipe of ours.
fn close_pipe(fds: [i32; 2]) {
    // SAFETY: closing our own pipe's ends, once.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
}

/// Polls `ep` until `count` reaches `total`, or past `cap` from `start`
/// (checked every 64 empty polls, after a yield): whether it hit the cap.
fn drain(ep: &mut Endpoint, count: &AtomicU64, total: u64, start: Instant, cap: Duration) -> bool {
    let mut idle = 0u32;
    while count.load(Ordering::Relaxed) < total {
        if ep.poll() == 0 {
            idle += 1;
            if idle.is_multiple_of(64) {
                mpsync::sched::yield_now();
                if start.elapsed() > cap {
                    return true;
                }
            }
        }
    }
    false
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
    let pids =
        fork_writers(ep.name(), &o, writers, total, go[0]).inspect_err(|_| close_pipe(go))?;
    let start = Instant::now();
    let cpu0 = thread_cpu_s();
    // SAFETY: writing `writers` bytes to our pipe's write end.
    unsafe {
        let bytes = vec![1u8; writers as usize];
        libc::write(go[1], bytes.as_ptr().cast(), bytes.len());
    }
    let censored = drain(&mut ep, &count, total, start, cap);
    let secs = start.elapsed().as_secs_f64();
    let cpu = thread_cpu_s() - cpu0;
    close_pipe(go);
    if censored {
        let st = ep.stats();
        for pid in pids {
            kill_child(pid);
        }
        let got = count.load(Ordering::Relaxed).max(1);
        let secs = secs * total as f64 / got as f64;
        return Ok((secs, true, cpu, st.sender_wakeups, st.revoked));
    }
    for pid in pids {
        wait_child(pid)?;
    }
    if sum.load(Ordering::Relaxed) != stress_sum(writers, total) || ep.stats().rejected != 0 {
        bail!(
            "lc98-stress {}: conservation failed (sum or rejected packets)",
            claim.name()
        );
    }
    let st = ep.stats();
    Ok((secs, false, cpu, st.sender_wakeups, st.revoked))
}

/// The kind the claims are measured and recommended as.
pub(super) const CLAIM: &str = "message claim";
/// The kind of the other transports (never recommended as a claim).
const TRANSPORT: &str = "transport";
const UDS: &str = "unix-socket";
const PIPE: &str = "pipe";
/// The spin locks among the claims.
const SPIN_LOCKS: [&str; 4] = ["tas", "tatas", "ticket", "anderson"];
/// The claims the paper finds nearly equal in LogP.
const NEAR_EQUAL: [&str; 5] = ["tas", "tatas", "ticket", "anderson", "lock-free"];
/// The LogP message size: the x of its panels.
const MSG_BYTES: f64 = 64.0;

/// A clause not judged because `what` has no value at `at`.
fn unjudged(at: String, what: &str) -> Judged {
    Judged {
        at,
        ours: format!("not measured ({what} has no value)"),
        holds: None,
    }
}

/// " (censored: extrapolated)" when a trial of `names` at (`panel`, `x`) hit its cap.
fn censored_note(r: &Results<'_>, names: &[&str], panel: usize, x: f64) -> &'static str {
    if names.iter().any(|n| r.censored(n, panel, x)) {
        " (censored: extrapolated)"
    } else {
        ""
    }
}

/// The LogP design: one panel per placement (same core, cross core), each
/// at one x, the message size; normalized to the unix socket there.
/// Placements are configurations, not a numeric axis: panels keep them
/// named in every clause, table row and figure bar.
fn logp_design(trials: u32, places: &[(&'static str, usize, usize)]) -> Design {
    let mut imps: Vec<Imp> = Claim::ALL
        .iter()
        .map(|c| Imp::ours(c.name(), CLAIM))
        .collect();
    imps.push(Imp::ours(DOORBELL, CLAIM));
    imps.push(Imp::peer(UDS, TRANSPORT));
    imps.push(Imp::peer(PIPE, TRANSPORT));
    imps.extend(ICEORYX2.map(|n| Imp::peer(n, TRANSPORT)));
    let mut d = Design::single(
        "message bytes",
        "µs per 64-byte round trip",
        Better::Lower,
        vec![MSG_BYTES],
        imps,
        trials,
    )
    .baseline(UDS);
    d.panels = places
        .iter()
        .map(|(l, _, _)| Panel::new(*l, vec![MSG_BYTES]))
        .collect();
    d
}

/// One LogP trial of `name` with the client on `client` and the server on
/// `server`: its round trip in µs and, for the claims, its LogP parameters.
fn logp_trial(
    name: &str,
    (client, server): (usize, usize),
    rounds: u64,
    trial: u32,
) -> anyhow::Result<(f64, Option<LogP>)> {
    let claim = Claim::ALL.into_iter().find(|c| c.name() == name);
    let run = match (claim, name) {
        (Some(c), _) => Some((c, None)),
        (None, DOORBELL) => Some((Claim::LockFree, Some(DOORBELL_SPIN))),
        _ => None,
    };
    if let Some((claim, spin)) = run {
        let v = logp_once(claim, spin, server, rounds)
            .with_context(|| format!("lc98-logp {name} trial {trial}"))?;
        return Ok((v.rtt, Some(v)));
    }
    let make = match name {
        UDS => Some(uds_pair as fn() -> _),
        PIPE => Some(pipe_pair as fn() -> _),
        _ => None,
    };
    if let Some(make) = make {
        let us = stream_rtt(server, rounds, make).with_context(|| format!("{name} round trip"))?;
        return Ok((us, None));
    }
    #[cfg(feature = "iceoryx2")]
    if name == super::lc98_iceoryx2::NAME {
        let us = super::lc98_iceoryx2::round_trip(client, server, rounds)
            .with_context(|| format!("lc98-logp {name} trial {trial}"))?;
        return Ok((us, None));
    }
    #[cfg(not(feature = "iceoryx2"))]
    let _ = client;
    bail!("lc98-logp: no implementation named {name}")
}

/// The LogP parameters of the claims (and the doorbell) per placement:
/// trimmed means over trials.
type LogPTable = Vec<(String, Vec<(String, LogP)>)>;

fn logp_table(
    places: &[(&'static str, usize, usize)],
    logps: &[(usize, String, LogP)],
) -> LogPTable {
    let names = Claim::ALL.map(|c| c.name()).into_iter().chain([DOORBELL]);
    let names: Vec<&str> = names.collect();
    places
        .iter()
        .enumerate()
        .map(|(pi, (label, _, _))| {
            let param = |n: &str, f: fn(&LogP) -> f64| {
                let v: Vec<f64> = logps
                    .iter()
                    .filter(|(px, m, _)| *px == pi && m == n)
                    .map(|(_, _, l)| f(l))
                    .collect();
                trimmed_mean(&v).unwrap_or(f64::NAN)
            };
            let rows = names
                .iter()
                .map(|&n| {
                    let row = LogP {
                        rtt: param(n, |l| l.rtt),
                        o_s: param(n, |l| l.o_s),
                        o_r: param(n, |l| l.o_r),
                        g: param(n, |l| l.g),
                        l: param(n, |l| l.l),
                    };
                    (n.to_string(), row)
                })
                .collect();
            (label.to_string(), rows)
        })
        .collect()
}

/// "TAS, TATAS, Ticket, Anderson and lock-free round trips within 25% of
/// each other" at `panel` (Table 1: 5.4–5.6 µs).
fn logp_near_equal(panel: usize) -> Clause {
    Clause::new(
        "the TAS, TATAS, Ticket, Anderson and lock-free round trips are within 25% of each other (max/min ≤ 1.25)",
        Some("5.4–5.6 µs: max/min 1.04 (Table 1)"),
        move |r| {
            let x = r.last_x(panel);
            let at = r.at(panel, x);
            let v: Option<Vec<f64>> = NEAR_EQUAL.iter().map(|n| r.value(n, panel, x)).collect();
            let Some(v) = v else {
                return unjudged(at, "a spin lock or lock-free");
            };
            let mn = v.iter().copied().fold(f64::MAX, f64::min);
            let mx = v.iter().copied().fold(0.0, f64::max);
            Judged {
                at,
                ours: format!("{mn:.2}–{mx:.2} µs: max/min {:.2}", mx / mn),
                holds: Some(mx / mn <= 1.25),
            }
        },
    )
}

/// "The POSIX mutex's round trip is above all the other claims'" at `panel`
/// (Table 1: 6.9 µs against 5.4–5.6).
fn logp_posix_worst(panel: usize) -> Clause {
    Clause::new(
        "the POSIX mutex's round trip is above those of the spin locks and lock-free",
        Some("6.9 µs vs at most 5.6 µs (more than 25% worse; Table 1)"),
        move |r| {
            let x = r.last_x(panel);
            let at = r.at(panel, x);
            let v: Option<Vec<f64>> = NEAR_EQUAL.iter().map(|n| r.value(n, panel, x)).collect();
            let (Some(v), Some(posix)) = (v, r.value("posix-mutex", panel, x)) else {
                return unjudged(at, "a claim");
            };
            let mx = v.iter().copied().fold(0.0, f64::max);
            Judged {
                at,
                ours: format!("POSIX mutex {posix:.2} µs vs at most {mx:.2} µs"),
                holds: Some(posix > mx),
            }
        },
    )
}

/// "The lock-free claim's send overhead is at least the spin locks' (their
/// lower median)" at `panel`, on the LogP table's `o_s` of that placement
/// (Table 1: 1.9 µs against 1.6–1.7).
fn logp_lf_send_overhead(panel: usize, o_s: Vec<(String, f64)>) -> Clause {
    Clause::new(
        "the lock-free claim's send overhead o_s is at least the spin locks' (their lower median)",
        Some("1.9 µs vs 1.6–1.7 µs (Table 1)"),
        move |r| {
            let at = r.at(panel, r.last_x(panel));
            let os = |n: &str| o_s.iter().find(|(m, _)| m == n).map(|(_, v)| *v);
            let locks: Option<Vec<f64>> = SPIN_LOCKS.iter().map(|n| os(n)).collect();
            let (Some(mut locks), Some(lf)) = (locks, os("lock-free")) else {
                return unjudged(at, "an o_s");
            };
            if locks.iter().chain([&lf]).any(|v| v.is_nan()) {
                return unjudged(at, "an o_s");
            }
            locks.sort_by(f64::total_cmp);
            Judged {
                at,
                ours: format!(
                    "lock-free {lf:.2} µs vs the spin locks' lower median {:.2} µs",
                    locks[1]
                ),
                holds: Some(lf >= locks[1]),
            }
        },
    )
}

/// The LogP clauses at `panel`.
fn logp_clauses(panel: usize, table: &LogPTable) -> Vec<Clause> {
    let o_s = table[panel]
        .1
        .iter()
        .map(|(n, l)| (n.clone(), l.o_s))
        .collect();
    vec![
        logp_near_equal(panel),
        logp_posix_worst(panel),
        logp_lf_send_overhead(panel, o_s),
    ]
}

/// The LogP notes of placement `pi`: its table, the targets and the peers.
fn logp_notes(r: &Results<'_>, pi: usize, table: &LogPTable) -> Vec<String> {
    let (label, rows) = &table[pi];
    let mut notes: Vec<String> = rows
        .iter()
        .map(|(n, row)| {
            format!(
                "{label} {n}: L {:.2} µs, o_s {:.2}, o_r {:.2}, g {:.2}, RTT {:.2} µs",
                row.l, row.o_s, row.o_r, row.g, row.rtt
            )
        })
        .collect();
    let v = |n: &str| r.value(n, pi, MSG_BYTES).unwrap_or(f64::NAN);
    let (lf, uds) = (v("lock-free"), v(UDS));
    notes.push(format!(
        "{label}: target lock-free RTT <= 0.1 x unix-socket RTT: {lf:.2} / {uds:.2} µs = {:.3}",
        lf / uds
    ));
    let iox = ICEORYX2.map(v);
    if let Some(i) = iox {
        notes.push(format!(
            "{label}: iceoryx2 pub-sub (two services, ping and pong, 64-byte loaned samples, busy polling): RTT {i:.2} µs = {:.3} x unix-socket",
            i / uds
        ));
    }
    notes.push(iceoryx2_target(label, lf, iox));
    let bell = v(DOORBELL);
    notes.push(format!(
        "{label}: lock-free with the doorbell (receivers spin up to {} µs, adaptively, then sleep until rung): RTT {bell:.2} µs = {:.3} x unix-socket, {:.3} x busy-polling lock-free",
        DOORBELL_SPIN.as_micros(),
        bell / uds,
        bell / lf
    ));
    notes
}

fn logp(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let started = Instant::now();
    let rounds = ((20_000.0 * p.scale * if p.quick { 0.1 } else { 1.0 }).round() as u64).max(200);
    let places = placements()?;
    let d = logp_design(p.trials, &places);
    let mut logps: Vec<(usize, String, LogP)> = Vec::new();
    // The client runs on a dedicated thread, pinned per placement (the
    // caller's affinity is left alone); each server child pins itself.
    let trials = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                model::collect(exp.id, &d, &mut |c| {
                    let (_, client, server) = places[c.panel];
                    mpsync::sched::native::pin_current_thread(client)?;
                    let name = c.imp.name.as_str();
                    let (us, lp) = logp_trial(name, (client, server), rounds, c.trial)?;
                    logps.extend(lp.map(|l| (c.panel, name.to_string(), l)));
                    Ok(Some(Trial {
                        value: us,
                        ..Trial::default()
                    }))
                })
            })
            .join()
            .map_err(|_| anyhow!("the measuring thread panicked"))?
    })?;
    let table = logp_table(&places, &logps);
    let last = places.len() - 1;
    let points = model::summarize(&d, &trials);
    let r = Results {
        design: &d,
        points: &points,
        trials: &trials,
    };
    let mut notes = Vec::new();
    for (pi, &(label, _, _)) in places.iter().enumerate() {
        notes.extend(logp_notes(&r, pi, &table));
        if pi != last {
            // The other placement's clauses, as measured: the verdict is the last's.
            for c in logp_clauses(pi, &table) {
                notes.push(format!(
                    "{label} (not in the verdict): {}",
                    c.judge(&r).line()
                ));
            }
        }
    }
    if ICEORYX2.is_none() {
        notes.push(format!(
            "iceoryx2 publish-subscribe peer: not run: {}; not in the default build because \
             its release build alone took ~13 min on 2 shared cores",
            iceoryx2_not_built(exp.id)
        ));
    }
    let v = Verdicts {
        conclusion: "all but the POSIX mutex nearly equal; the lock-free claim slightly higher o_s (cross-core clauses decide)".into(),
        clauses: logp_clauses(last, &table),
        notes,
        ..Verdicts::default()
    };
    let extra = serde_json::json!({
        "logp_us": table.iter().map(|(l, rows)| (l.clone(), rows.iter().cloned().collect::<std::collections::BTreeMap<_, _>>())).collect::<std::collections::BTreeMap<_, _>>(),
        "iceoryx2_built": ICEORYX2.is_some(),
    });
    let params = serde_json::json!({ "round_trips": rounds, "placements": places.iter().map(|p| p.0).collect::<Vec<_>>() });
    let (mut rec, svg) = model::finish(exp, p, preempt, &d, trials, v, params, started);
    rec.extra = extra;
    Ok((rec, svg))
}

/// One bandwidth trial of `claim`: MB/s of 8 KB bulk messages from this
/// (pinned) thread to a server child on `server`, and the server's time
/// per block inside delivering polls, µs.
fn bandwidth_once(
    claim: Claim,
    server: usize,
    blocks: u64,
    data: &[u8],
) -> anyhow::Result<(f64, f64)> {
    let srv = fresh("b");
    let s2 = srv.clone();
    let pid = fork_child(Some(server), move || serve(&s2, claim, None))?;
    let r = (|| -> anyhow::Result<(f64, f64)> {
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
            ep.send_bulk(&peer, SINK, &[], data)?;
        }
        ep.request(&peer, ECHO, &[], None)?;
        ep.request(&peer, RESET, &[], None)?;
        let t0 = Instant::now();
        for _ in 0..blocks {
            ep.send_bulk(&peer, SINK, &[], data)?;
        }
        ep.request(&peer, ECHO, &[], None)?;
        let mbs = blocks as f64 * 8192.0 / t0.elapsed().as_secs_f64() / 1e6;
        // The server's time inside polls that delivered, per message: its
        // receive cost per 8 KB block.
        let rep = ep.request(&peer, REPORT, &[], None)?;
        let o_r = rep.args()[0] as f64 / 1e3 / rep.args()[1].max(1) as f64;
        ep.send(&peer, STOP, &[])?;
        Ok((mbs, o_r))
    })();
    match r {
        Ok(v) => {
            wait_child(pid)?;
            Ok(v)
        }
        Err(e) => {
            kill_child(pid);
            Err(e.context(format!("lc98-bandwidth {}", claim.name())))
        }
    }
}

/// "The lock-free claim's bandwidth is within 5% of the best claim's"
/// (§4.1: lock-free highest, 166 MB/s).
fn bandwidth_lf_best() -> Clause {
    Clause::new(
        "the lock-free claim's bandwidth is within 5% of the best claim's",
        Some("lock-free the highest: 166 MB/s, POSIX mutex 158 MB/s (§4.1)"),
        |r| {
            let x = r.last_x(0);
            let at = r.at(0, x);
            let best = r.ranked(Role::Ours, Some(CLAIM), 0, x).first().copied();
            match (best, r.value("lock-free", 0, x)) {
                (Some((i, b)), Some(lf)) => Judged {
                    at,
                    ours: format!(
                        "lock-free {lf:.0} MB/s = {:.3} × the best ({})",
                        lf / b,
                        i.name
                    ),
                    holds: Some(lf >= 0.95 * b),
                },
                _ => unjudged(at, "lock-free"),
            }
        },
    )
}

/// "Every claim reaches at least half the memory copy rate" (§4.1: about
/// 80%).
fn bandwidth_near_memcpy() -> Clause {
    Clause::new(
        "every claim's bandwidth is at least half the memory copy rate",
        Some("158–166 MB/s, roughly 80% of the memory copy rate (§4.1)"),
        |r| {
            let x = r.last_x(0);
            let at = r.at(0, x);
            let worst = r.ranked(Role::Ours, Some(CLAIM), 0, x).last().copied();
            match (worst, r.value("memcpy", 0, x)) {
                (Some((i, w)), Some(m)) => Judged {
                    at,
                    ours: format!(
                        "the slowest ({}) {w:.0} MB/s = {:.2} × memcpy",
                        i.name,
                        w / m
                    ),
                    holds: Some(w >= 0.5 * m),
                },
                _ => unjudged(at, "memcpy or a claim"),
            }
        },
    )
}

/// The bandwidth design: the claims and the in-process memcpy rate, 8 KB
/// blocks, at one placement (cross core where there are two CPUs).
fn bandwidth_design(trials: u32, label: &str) -> Design {
    let mut imps: Vec<Imp> = Claim::ALL
        .iter()
        .map(|c| Imp::ours(c.name(), CLAIM))
        .collect();
    imps.push(Imp::reference("memcpy"));
    let mut d = Design::single(
        "KB per message",
        "MB/s",
        Better::Higher,
        vec![8.0],
        imps,
        trials,
    )
    .baseline("memcpy");
    d.panels[0].label = label.into();
    d
}

fn bandwidth(
    exp: &Experiment,
    p: &Params,
    preempt: Preempt,
) -> anyhow::Result<(RunRecord, String)> {
    let started = Instant::now();
    let blocks = ((20_000.0 * p.scale * if p.quick { 0.1 } else { 1.0 }).round() as u64).max(200);
    let places = placements()?;
    let &(label, c, s) = places.last().expect("one placement at least");
    let d = bandwidth_design(p.trials, label);
    let mut recv_cost: Vec<(String, f64)> = Vec::new();
    // The client runs on a dedicated thread pinned to its CPU (the caller's
    // affinity is left alone); the server child pins itself to the other.
    let trials = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                mpsync::sched::native::pin_current_thread(c)?;
                let data = vec![0xa5u8; 8192];
                model::collect(exp.id, &d, &mut |cell| {
                    let name = cell.imp.name.as_str();
                    let value = match Claim::ALL.into_iter().find(|k| k.name() == name) {
                        Some(claim) => {
                            let (mbs, o_r) = bandwidth_once(claim, s, blocks, &data)?;
                            recv_cost.push((name.to_string(), o_r));
                            mbs
                        }
                        None => memcpy_rate(blocks * 4),
                    };
                    Ok(Some(Trial {
                        value,
                        ..Trial::default()
                    }))
                })
            })
            .join()
            .map_err(|_| anyhow!("the measuring thread panicked"))?
    })?;
    let o_r = |n: &str| {
        let v: Vec<f64> = recv_cost
            .iter()
            .filter(|(m, _)| m == n)
            .map(|(_, x)| *x)
            .collect();
        trimmed_mean(&v).unwrap_or(f64::NAN)
    };
    let memcpy = mean_of(&trials, "memcpy", 8.0).unwrap_or(f64::NAN);
    let mut notes = vec![format!(
        "{label}, 8 KB bulk messages, {blocks} per trial; memcpy of 8 KB blocks in one process: {memcpy:.0} MB/s"
    )];
    for n in Claim::ALL.map(|c| c.name()) {
        let mbs = mean_of(&trials, n, 8.0).unwrap_or(f64::NAN);
        notes.push(format!(
            "{n}: {mbs:.0} MB/s = {:.2} x memcpy; the receiver's time per 8 KB block inside delivering polls {:.2} µs (= {:.0} MB/s if it were the only cost)",
            mbs / memcpy,
            o_r(n),
            8192.0 / o_r(n)
        ));
    }
    let v = Verdicts {
        conclusion: "lock-free highest; all near the memcpy rate".into(),
        clauses: vec![bandwidth_lf_best(), bandwidth_near_memcpy()],
        notes,
        ..Verdicts::default()
    };
    let extra = serde_json::json!({ "receiver_us_per_block": Claim::ALL.map(|c| (c.name(), o_r(c.name()))).into_iter().collect::<std::collections::BTreeMap<_, _>>() });
    let params = serde_json::json!({ "blocks_per_trial": blocks, "placement": label });
    let (mut rec, svg) = model::finish(exp, p, preempt, &d, trials, v, params, started);
    rec.extra = extra;
    Ok((rec, svg))
}

/// One stress run as the receiver saw it: (implementation, writers, CPU
/// share of the run, CPU µs per message, rings that woke sleeping writers,
/// tickets revoked).
type RecvRow = (String, u64, f64, f64, f64, f64);

/// The stress design: the claims (and iceoryx2 where built in) at each
/// writer count, many-to-one, values as measured.
fn stress_design(trials: u32, writers: &[u64]) -> Design {
    let mut imps: Vec<Imp> = Claim::ALL
        .iter()
        .map(|c| Imp::ours(c.name(), CLAIM))
        .collect();
    imps.extend(ICEORYX2.map(|n| Imp::peer(n, TRANSPORT)));
    let xs = writers.iter().map(|&w| w as f64).collect();
    let mut d = Design::single(
        "writer processes",
        "seconds per run",
        Better::Lower,
        xs,
        imps,
        trials,
    );
    d.panels[0].label = "many-to-one".into();
    d
}

/// One stress trial of `name` with `w` writers: (seconds, censored, the
/// receiver's row where it was not censored).
fn stress_trial(
    name: &str,
    w: u64,
    total: u64,
    cap: Duration,
) -> anyhow::Result<(f64, bool, Option<RecvRow>)> {
    if let Some(claim) = Claim::ALL.into_iter().find(|c| c.name() == name) {
        let (secs, cens, cpu, woke, revoked) = stress_once(claim, w, total, cap)
            .with_context(|| format!("lc98-stress {name} with {w} writers"))?;
        let row = (
            name.to_string(),
            w,
            cpu / secs,
            cpu * 1e6 / total as f64,
            woke as f64,
            revoked as f64,
        );
        return Ok((secs, cens, (!cens).then_some(row)));
    }
    #[cfg(feature = "iceoryx2")]
    if name == super::lc98_iceoryx2::NAME {
        let (secs, cens, cpu) = super::lc98_iceoryx2::stress_once(w, total, cap)
            .with_context(|| format!("lc98-stress {name} with {w} publishers"))?;
        // No space bell and no tickets: NaN, left out of the notes.
        let row = (
            name.to_string(),
            w,
            cpu / secs,
            cpu * 1e6 / total as f64,
            f64::NAN,
            f64::NAN,
        );
        return Ok((secs, cens, (!cens).then_some(row)));
    }
    bail!("lc98-stress: no implementation named {name}")
}

/// "`name` gets faster (or, `faster: false`, slower) with more writers":
/// its time at the last x against the first (Table 2).
fn stress_trend(name: &'static str, faster: bool, paper: &str) -> Clause {
    let statement = if faster {
        format!("{name} gets faster with more writers (time at the most ≤ at the fewest)")
    } else {
        format!("{name} slows down with more writers (time at the most > at the fewest)")
    };
    Clause::new(statement, Some(paper), move |r| {
        let xs = &r.design.panels[0].xs;
        let (lo, hi) = (xs[0], r.last_x(0));
        let at = format!("{} vs {}", r.at(0, hi), fmt_x(lo));
        let (Some(a), Some(b)) = (r.value(name, 0, hi), r.value(name, 0, lo)) else {
            return unjudged(at, name);
        };
        let cens = censored_note(r, &[name], 0, hi).max(censored_note(r, &[name], 0, lo));
        Judged {
            at,
            ours: format!("{a:.3} s vs {b:.3} s{cens}"),
            holds: Some(if faster { a <= b } else { a > b }),
        }
    })
}

/// "The POSIX mutex is the slowest claim with the most writers" (Table 2).
fn stress_posix_worst() -> Clause {
    Clause::new(
        "the POSIX mutex is the slowest claim with the most writers",
        Some("14.10 s with 7 writers vs 3.03–4.37 s (Table 2)"),
        |r| {
            let x = r.last_x(0);
            let at = r.at(0, x);
            let ranked = r.ranked(Role::Ours, Some(CLAIM), 0, x);
            let (Some(posix), Some(&(worst, wv))) = (r.value("posix-mutex", 0, x), ranked.last())
            else {
                return unjudged(at, "posix-mutex or a claim");
            };
            let others = ranked.iter().filter(|(i, _)| i.name != "posix-mutex");
            let slowest_other = others.map(|(_, v)| *v).fold(0.0, f64::max);
            let names: Vec<&str> = ranked.iter().map(|(i, _)| i.name.as_str()).collect();
            Judged {
                at,
                ours: format!(
                    "POSIX mutex {posix:.3} s; the slowest of the others {slowest_other:.3} s (slowest overall: {} {wv:.3} s){}",
                    worst.name,
                    censored_note(r, &names, 0, x)
                ),
                holds: Some(posix >= slowest_other),
            }
        },
    )
}

fn stress_clauses() -> Vec<Clause> {
    vec![
        stress_trend("lock-free", true, "3.19 s with 1 writer, 3.03 s with 7"),
        stress_trend("tas", false, "2.98 s with 1 writer, 4.37 s with 7"),
        stress_trend("tatas", false, "3.01 s with 1 writer, 3.83 s with 7"),
        stress_trend("ticket", false, "2.96 s with 1 writer, 3.50 s with 7"),
        stress_trend("anderson", false, "3.05 s with 1 writer, 3.75 s with 7"),
        stress_posix_worst(),
    ]
}

/// The receiver's rows, per implementation and writer count: trimmed means
/// of (CPU share, CPU µs per message, rings that woke writers, revoked).
fn recv_at(recv: &[RecvRow], n: &str, w: u64) -> (f64, f64, f64, f64) {
    let f = |sel: fn(&RecvRow) -> f64| {
        let v: Vec<f64> = recv
            .iter()
            .filter(|r| r.0 == n && r.1 == w)
            .map(sel)
            .collect();
        trimmed_mean(&v).unwrap_or(f64::NAN)
    };
    (f(|r| r.2), f(|r| r.3), f(|r| r.4), f(|r| r.5))
}

/// Where the time goes: a receiver that is on a CPU only part of the run
/// bounds every claim alike (2 cores shared by writers + 1 processes).
fn stress_receiver_notes(d: &Design, writers: &[u64], recv: &[RecvRow]) -> Vec<String> {
    d.imps
        .iter()
        .map(|i| {
            let row: Vec<String> = writers
                .iter()
                .map(|&w| {
                    let (share, us, woke, revoked) = recv_at(recv, &i.name, w);
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
            format!("{} receiver: {}", i.name, row.join("; "))
        })
        .collect()
}

/// The stress notes: method, receivers, the target, the peer, censoring.
fn stress_notes(
    r: &Results<'_>,
    p: &Params,
    total: u64,
    writers: &[u64],
    recv: &[RecvRow],
    cap: Duration,
) -> Vec<String> {
    let mut notes = vec![format!(
        "{total} one-word messages in all per run, writers unpinned on {} cores (oversubscribed beyond {}); time in seconds",
        p.cores,
        p.cores.saturating_sub(1)
    )];
    notes.extend(stress_receiver_notes(r.design, writers, recv));
    let (lo, hi) = (writers[0] as f64, r.last_x(0));
    let at = |n: &str, x: f64| r.value(n, 0, x).unwrap_or(f64::NAN);
    notes.push(format!(
        "target: lock-free throughput >= 3 x POSIX mutex with {} writers: {:.2} x",
        fmt_x(hi),
        at("posix-mutex", hi) / at("lock-free", hi)
    ));
    #[cfg(feature = "iceoryx2")]
    {
        let n = super::lc98_iceoryx2::NAME;
        notes.push(format!(
            "{n} ({} publisher processes to one subscriber process, a service that never \
             overflows: a publisher retries while the subscriber's {}-sample buffer is full; \
             clock from a start signal after every process connected): lock-free takes {:.2} x \
             its time with {} writers, {:.2} x with {}",
            fmt_x(hi),
            super::lc98_iceoryx2::STRESS_BUFFER,
            at("lock-free", hi) / at(n, hi),
            fmt_x(hi),
            at("lock-free", lo) / at(n, lo),
            fmt_x(lo)
        ));
    }
    #[cfg(not(feature = "iceoryx2"))]
    {
        let _ = lo;
        notes.push(format!(
            "iceoryx2 pub-sub: not run: {}",
            iceoryx2_not_built("lc98-stress")
        ));
    }
    if r.trials.iter().any(|t| t.censored_at.is_some()) {
        notes.push(format!(
            "some runs hit the {} s cap and were extrapolated from the fraction delivered (censored_at in data.csv)",
            cap.as_secs()
        ));
    }
    notes
}

fn stress(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let started = Instant::now();
    let total =
        ((1_000_000.0 * p.scale * if p.quick { 0.1 } else { 1.0 }).round() as u64).max(1000);
    let writers: Vec<u64> = p.threads.as_ref().map_or_else(
        || vec![1, 3, 7],
        |t| t.iter().map(|&x| u64::from(x)).collect(),
    );
    let cap = Duration::from_secs(if p.quick { 5 } else { 120 });
    let d = stress_design(p.trials, &writers);
    let mut recv: Vec<RecvRow> = Vec::new();
    let trials = model::collect(exp.id, &d, &mut |c| {
        let (secs, cens, row) = stress_trial(&c.imp.name, c.x as u64, total, cap)?;
        recv.extend(row);
        Ok(Some(capped_trial(secs, cens, cap, p.cores)))
    })?;
    let points = model::summarize(&d, &trials);
    let r = Results {
        design: &d,
        points: &points,
        trials: &trials,
    };
    let v = Verdicts {
        conclusion: "lock-free gets faster with more writers; locks slow down; POSIX mutex worst"
            .into(),
        clauses: stress_clauses(),
        notes: stress_notes(&r, p, total, &writers, &recv, cap),
        advice: vec![AdviceRule {
            kind: CLAIM,
            panel: 0,
        }],
        targets: false,
    };
    let extra = serde_json::json!({ "receiver": d.imps.iter().map(|i| (i.name.clone(), writers.iter().map(|&w| {
        let (share, us, woke, revoked) = recv_at(&recv, &i.name, w);
        serde_json::json!({ "writers": w, "cpu_share": share, "cpu_us_per_message": us, "sender_wakeups": woke, "revoked": revoked })
    }).collect::<Vec<_>>())).collect::<std::collections::BTreeMap<_, _>>() });
    let params = serde_json::json!({ "messages_per_run": total, "writers": writers, "cap_s": cap.as_secs() });
    let (mut rec, svg) = model::finish(exp, p, preempt, &d, trials, v, params, started);
    rec.extra = extra;
    Ok((rec, svg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::Point;

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

    /// Points of `d` with `vals` (implementation, panel, x, value).
    fn points(d: &Design, vals: &[(&str, usize, f64, f64)]) -> Vec<Point> {
        vals.iter()
            .map(|&(n, pi, x, v)| Point {
                implementation: n.into(),
                x,
                panel: (d.panels.len() > 1).then(|| d.panels[pi].label.clone()),
                value: v,
                normalized: v,
            })
            .collect()
    }

    fn judge(c: &Clause, d: &Design, pts: &[Point]) -> Option<bool> {
        let r = Results {
            design: d,
            points: pts,
            trials: &[],
        };
        c.judge(&r).holds
    }

    fn logp_points(d: &Design, rtt: [f64; 6]) -> Vec<Point> {
        let names = Claim::ALL.map(|c| c.name());
        let v: Vec<(&str, usize, f64, f64)> = (0..2)
            .flat_map(|pi| {
                names
                    .iter()
                    .zip(rtt)
                    .map(move |(n, v)| (*n, pi, MSG_BYTES, v))
            })
            .collect();
        points(d, &v)
    }

    fn rtt_of(name: &str) -> usize {
        Claim::ALL.iter().position(|c| c.name() == name).unwrap()
    }

    #[test]
    fn logp_clauses_hold_on_the_papers_table_and_fail_off_it() {
        let places = [("same-core", 0, 0), ("cross-core", 0, 1)];
        let d = logp_design(1, &places);
        // Table 1's round trips, in Claim::ALL's order.
        let mut paper = [0.0; 6];
        for (n, v) in [
            ("tas", 5.5),
            ("tatas", 5.4),
            ("ticket", 5.5),
            ("anderson", 5.5),
            ("posix-mutex", 6.9),
            ("lock-free", 5.6),
        ] {
            let i = rtt_of(n);
            paper[i] = v;
        }
        let pts = logp_points(&d, paper);
        assert_eq!(judge(&logp_near_equal(1), &d, &pts), Some(true));
        assert_eq!(judge(&logp_posix_worst(1), &d, &pts), Some(true));
        let mut spread = paper;
        spread[rtt_of("ticket")] = 7.5; // > 1.25 x 5.4, and above the POSIX mutex
        let pts = logp_points(&d, spread);
        assert_eq!(judge(&logp_near_equal(1), &d, &pts), Some(false));
        assert_eq!(judge(&logp_posix_worst(1), &d, &pts), Some(false));
        assert_eq!(judge(&logp_near_equal(0), &d, &[]), None);
        let os = |lf: f64| {
            let mut v: Vec<(String, f64)> = [
                ("tas", 1.6),
                ("tatas", 1.6),
                ("ticket", 1.7),
                ("anderson", 1.7),
            ]
            .map(|(n, v)| (n.to_string(), v))
            .to_vec();
            v.push(("lock-free".into(), lf));
            v
        };
        assert_eq!(
            judge(&logp_lf_send_overhead(1, os(1.9)), &d, &pts),
            Some(true)
        );
        assert_eq!(
            judge(&logp_lf_send_overhead(1, os(1.5)), &d, &pts),
            Some(false)
        );
        assert_eq!(
            judge(&logp_lf_send_overhead(1, os(f64::NAN)), &d, &pts),
            None
        );
    }

    #[test]
    fn bandwidth_clauses_judge_lock_free_against_the_best_and_memcpy() {
        let d = bandwidth_design(1, "cross-core");
        let at = |lf: f64, posix: f64| {
            let mut v: Vec<(&str, usize, f64, f64)> = ["tas", "tatas", "ticket", "anderson"]
                .map(|n| (n, 0, 8.0, 160.0))
                .to_vec();
            v.extend([
                ("posix-mutex", 0, 8.0, posix),
                ("lock-free", 0, 8.0, lf),
                ("memcpy", 0, 8.0, 207.0),
            ]);
            points(&d, &v)
        };
        let paper = at(166.0, 158.0);
        assert_eq!(judge(&bandwidth_lf_best(), &d, &paper), Some(true));
        assert_eq!(judge(&bandwidth_near_memcpy(), &d, &paper), Some(true));
        let slow = at(140.0, 90.0);
        assert_eq!(judge(&bandwidth_lf_best(), &d, &slow), Some(false));
        assert_eq!(judge(&bandwidth_near_memcpy(), &d, &slow), Some(false));
        assert_eq!(judge(&bandwidth_near_memcpy(), &d, &[]), None);
    }

    /// Table 2's times (1, 3, 7 writers) in Claim::ALL's names.
    const TABLE2: [(&str, [f64; 3]); 6] = [
        ("tas", [2.98, 3.03, 4.37]),
        ("tatas", [3.01, 3.46, 3.83]),
        ("ticket", [2.96, 3.18, 3.50]),
        ("anderson", [3.05, 3.22, 3.75]),
        ("posix-mutex", [3.54, 10.0, 14.1]),
        ("lock-free", [3.19, 3.08, 3.03]),
    ];

    fn stress_points(d: &Design, table: &[(&str, [f64; 3])]) -> Vec<Point> {
        let v: Vec<(&str, usize, f64, f64)> = table
            .iter()
            .flat_map(|(n, t)| {
                [1.0, 3.0, 7.0]
                    .into_iter()
                    .zip(*t)
                    .map(move |(x, v)| (*n, 0, x, v))
            })
            .collect();
        points(d, &v)
    }

    #[test]
    fn stress_clauses_hold_on_table_2_and_each_fails_reversed() {
        let d = stress_design(1, &[1, 3, 7]);
        let pts = stress_points(&d, &TABLE2);
        for c in stress_clauses() {
            assert_eq!(judge(&c, &d, &pts), Some(true), "{}", c.statement);
        }
        // Every trend reversed (and the POSIX mutex fastest at 7): each fails.
        let reversed: Vec<(&str, [f64; 3])> = TABLE2
            .iter()
            .map(|(n, [a, b, c])| match *n {
                "posix-mutex" => (*n, [*a, *b, 1.0]),
                _ => (*n, [*c, *b, *a]),
            })
            .collect();
        let pts = stress_points(&d, &reversed);
        for c in stress_clauses() {
            assert_eq!(judge(&c, &d, &pts), Some(false), "{}", c.statement);
        }
        assert_eq!(judge(&stress_posix_worst(), &d, &[]), None);
    }

    #[test]
    fn stress_advises_the_best_claim_and_never_a_transport() {
        let mut d = stress_design(1, &[1, 3, 7]);
        d.imps.push(Imp::peer("iox", TRANSPORT));
        let mut t: Vec<(&str, [f64; 3])> = TABLE2.to_vec();
        t.push(("iox", [0.1, 0.1, 0.1]));
        let pts = stress_points(&d, &t);
        let r = Results {
            design: &d,
            points: &pts,
            trials: &[],
        };
        let a = model::advise(
            &AdviceRule {
                kind: CLAIM,
                panel: 0,
            },
            &r,
        )
        .unwrap();
        assert_eq!(a.best, "lock-free");
        assert_eq!(a.kind, "message claim");
        assert!(
            a.at.contains("7") && a.at.contains("many-to-one"),
            "{}",
            a.at
        );
    }
}
