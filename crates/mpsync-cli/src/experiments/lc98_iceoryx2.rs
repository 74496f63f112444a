//! The `iceoryx2` publish-subscribe peer of `lc98-logp` and `lc98-stress`
//! (cargo feature `iceoryx2`: `cargo run --release -p mpsync-cli --features
//! iceoryx2 -- run lc98-logp`). Not in the default build: iceoryx2's release
//! build alone takes ~13 minutes on this project's 2-core machines.
//!
//! - Round trip (`lc98-logp`): two publish-subscribe services, `ping` (client →
//!   server) and `pong` (server → client), each carrying a 64-byte `[u64; 8]`
//!   written into a loaned sample (iceoryx2's zero-copy API). Client and
//!   server are separate processes pinned exactly as the msgq runs' (same-core
//!   or cross-core), and wait as the msgq ones do: busy polling, yielding the
//!   CPU every 256 empty polls (client) and 64 (server).
//! - Many-to-one (`lc98-stress`): `w` publisher processes send `total`
//!   one-word samples in all to one subscriber process; the service does not
//!   overflow (a full subscriber buffer makes the publisher retry, never drop),
//!   and the subscriber checks that every sample arrived once and in order per
//!   publisher.
//!
//! Every iceoryx2 participant is a forked child that creates its own node
//! after the fork: the harness never initializes iceoryx2 itself (iceoryx2
//! caches process-wide state, e.g. a unique process id, that a child forked
//! later would inherit). A run keeps its iceoryx2 state under a private root
//! directory and file-name prefix (`/tmp/mpsiox<pid>x<n>_*` and
//! `/dev/shm/mpsiox<pid>x<n>_*`), removed when the run ends; what a harness
//! that died left behind is swept by the next run.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use iceoryx2::port::update_connections::UpdateConnections;
use iceoryx2::prelude::*;

use super::lc98::{fork_child, kill_child, stress_sum, thread_cpu_s, wait_child, writer_share};

/// The peer's name in data.csv, the figures and the verdicts.
pub(super) const NAME: &str = "iceoryx2 pub-sub";

/// The round trip's message: 64 bytes.
type Msg = [u64; 8];

/// The ping that stops the echo server.
const STOP: u64 = u64::MAX;

/// What every file and directory of ours starts with.
const TAG: &str = "mpsiox";

static SEQ: AtomicU64 = AtomicU64::new(0);

/// One run's iceoryx2 state: a private root directory and file-name prefix,
/// both removed on drop.
struct Scope {
    prefix: String,
}

impl Scope {
    fn new() -> Self {
        sweep_stale();
        Self {
            prefix: format!(
                "{TAG}{}x{}_",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        remove_matching(|name| name.starts_with(&self.prefix));
    }
}

/// The iceoryx2 configuration of the run whose prefix is `prefix`.
fn config(prefix: &str) -> anyhow::Result<Config> {
    let mut c = Config::default();
    let root = format!("/tmp/{prefix}root/");
    c.global
        .set_root_path(&ix(Path::new(root.as_bytes()), "iceoryx2 root path")?);
    c.global.prefix = ix(FileName::new(prefix.as_bytes()), "iceoryx2 file prefix")?;
    Ok(c)
}

/// Removes the entries of /tmp and /dev/shm whose names `sel` picks.
fn remove_matching(sel: impl Fn(&str) -> bool) {
    for dir in ["/tmp", "/dev/shm"] {
        let Ok(rd) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if !sel(name) {
                continue;
            }
            let p = e.path();
            // Best effort: an entry another process removed meanwhile is fine.
            let _ = if e.file_type().is_ok_and(|t| t.is_dir()) {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
        }
    }
}

/// Removes what runs of harness processes that no longer exist left behind.
fn sweep_stale() {
    remove_matching(|name| {
        let Some(pid) = name
            .strip_prefix(TAG)
            .and_then(|r| r.split('x').next())
            .and_then(|p| p.parse::<libc::pid_t>().ok())
        else {
            return false;
        };
        // SAFETY: signal 0 only checks whether the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        gone && pid != std::process::id() as libc::pid_t
    });
}

/// Whether anything of the run `prefix` is left in /tmp or /dev/shm (tests).
#[cfg(test)]
fn leftovers(prefix: &str) -> Vec<String> {
    let mut v = Vec::new();
    for dir in ["/tmp", "/dev/shm"] {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if n.starts_with(prefix) {
                    v.push(format!("{dir}/{n}"));
                }
            }
        }
    }
    v
}

/// iceoryx2's errors as anyhow's (they are `Debug`; not all are `Send + Sync`).
fn ix<T, E: std::fmt::Debug>(r: Result<T, E>, what: &str) -> anyhow::Result<T> {
    r.map_err(|e| anyhow!("{what}: {e:?}"))
}

fn node(prefix: &str) -> anyhow::Result<Node<ipc::Service>> {
    let cfg = config(prefix)?;
    ix(
        NodeBuilder::new()
            .config(&cfg)
            .signal_handling_mode(SignalHandlingMode::Disabled)
            .create::<ipc::Service>(),
        "iceoryx2 node",
    )
}

fn service_name(s: &str) -> anyhow::Result<ServiceName> {
    ix(ServiceName::new(s), "iceoryx2 service name")
}

/// A pipe; both ends close on drop.
struct Pipe {
    r: File,
    w: File,
}

impl Pipe {
    fn new() -> anyhow::Result<Self> {
        let mut fds = [0i32; 2];
        // SAFETY: a fresh pipe; its descriptors are owned by the Files below.
        unsafe {
            if libc::pipe(fds.as_mut_ptr()) != 0 {
                bail!("pipe: {}", std::io::Error::last_os_error());
            }
            Ok(Self {
                r: File::from_raw_fd(fds[0]),
                w: File::from_raw_fd(fds[1]),
            })
        }
    }
}

/// Writes all of `b` to `fd` (in a child: no Rust `File` is dropped there).
fn put(fd: i32, b: &[u8]) -> anyhow::Result<()> {
    // SAFETY: writing our own buffer to a descriptor inherited from the harness.
    let n = unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) };
    if n != b.len() as isize {
        bail!("write to the harness: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Reads one byte from `fd` (blocking; the harness guards with its timeouts).
fn take(fd: i32) -> anyhow::Result<()> {
    let mut b = [0u8; 1];
    // SAFETY: reading one byte into our buffer from an inherited descriptor.
    if unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) } != 1 {
        bail!("read from the harness: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Fills `buf` from `f` within `timeout`; `what` names it in errors.
fn read_within(f: &mut File, buf: &mut [u8], timeout: Duration, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("{what}: nothing after {} s", timeout.as_secs());
        }
        let mut pfd = libc::pollfd {
            fd: f.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd we own.
        let r = unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(60_000) as i32) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            bail!("{what}: poll: {e}");
        }
        if r == 0 {
            continue;
        }
        match f.read(&mut buf[got..]) {
            Ok(0) => bail!("{what}: the child exited before it reported"),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => bail!("{what}: {e}"),
        }
    }
    Ok(())
}

/// A child's body: its error is printed, its exit status says it failed.
fn child(what: &str, f: impl FnOnce() -> anyhow::Result<()>) -> i32 {
    match f() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{what}: {e:#}");
            1
        }
    }
}

/// Kills every child in `pids` (on an error path).
fn kill_all(pids: &[libc::pid_t]) {
    for &p in pids {
        kill_child(p);
    }
}

// ---------------------------------------------------------------------------
// lc98-logp: the 64-byte round trip

/// The echo server: answers every ping with a pong carrying the same bytes
/// until it gets `STOP` (or 600 s pass).
fn echo_server(prefix: &str) -> anyhow::Result<()> {
    let node = node(prefix)?;
    let ping = ix(
        node.service_builder(&service_name("lc98/ping")?)
            .publish_subscribe::<Msg>()
            .open_or_create(),
        "iceoryx2 ping service",
    )?;
    let pong = ix(
        node.service_builder(&service_name("lc98/pong")?)
            .publish_subscribe::<Msg>()
            .open_or_create(),
        "iceoryx2 pong service",
    )?;
    let sub = ix(ping.subscriber_builder().create(), "ping subscriber")?;
    let publ = ix(pong.publisher_builder().create(), "pong publisher")?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut idle = 0u32;
    loop {
        match ix(sub.receive(), "receive a ping")? {
            Some(s) => {
                let m: Msg = *s;
                drop(s);
                if m[0] == STOP {
                    return Ok(());
                }
                let out = ix(publ.loan_uninit(), "loan a pong")?;
                ix(out.write_payload(m).send(), "send a pong")?;
                idle = 0;
            }
            None => {
                idle = idle.wrapping_add(1);
                if idle.is_multiple_of(64) {
                    if Instant::now() > deadline {
                        bail!("no STOP within 600 s");
                    }
                    mpsync::sched::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

/// Busy-polls `sub` for the next sample, yielding every 256 empty polls;
/// `None` once `deadline` has passed.
fn next_pong(
    sub: &iceoryx2::port::subscriber::Subscriber<ipc::Service, Msg, ()>,
    deadline: Instant,
) -> anyhow::Result<Option<Msg>> {
    let mut polls = 0u32;
    loop {
        if let Some(s) = ix(sub.receive(), "receive a pong")? {
            return Ok(Some(*s));
        }
        polls = polls.wrapping_add(1);
        if polls.is_multiple_of(256) {
            if Instant::now() > deadline {
                return Ok(None);
            }
            mpsync::sched::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// The client: connects, warms up, times `rounds` round trips, stops the
/// server, and writes the µs per round trip (an `f64`) to `report`.
fn echo_client(prefix: &str, rounds: u64, report: i32) -> anyhow::Result<()> {
    let node = node(prefix)?;
    let ping = ix(
        node.service_builder(&service_name("lc98/ping")?)
            .publish_subscribe::<Msg>()
            .open_or_create(),
        "iceoryx2 ping service",
    )?;
    let pong = ix(
        node.service_builder(&service_name("lc98/pong")?)
            .publish_subscribe::<Msg>()
            .open_or_create(),
        "iceoryx2 pong service",
    )?;
    // The pong subscriber first: it exists before the server can answer.
    let sub = ix(pong.subscriber_builder().create(), "pong subscriber")?;
    let publ = ix(ping.publisher_builder().create(), "ping publisher")?;
    let send = |m: Msg| -> anyhow::Result<usize> {
        let out = ix(publ.loan_uninit(), "loan a ping")?;
        ix(out.write_payload(m).send(), "send a ping")
    };
    // Handshake: ping until a pong with the same sequence number comes back
    // (a ping sent before the server subscribed reaches nobody).
    let connect_by = Instant::now() + Duration::from_secs(20);
    let mut seq = 0u64;
    'connect: loop {
        if Instant::now() > connect_by {
            bail!("no pong from the server within 20 s ({seq} pings sent)");
        }
        seq += 1;
        if send([seq; 8])? == 0 {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let wait = Instant::now() + Duration::from_millis(100);
        while let Some(m) = next_pong(&sub, wait)? {
            if m == [seq; 8] {
                break 'connect;
            }
        }
    }
    // Every message is distinct and every pong checked: a lost, duplicated
    // or corrupted sample fails the run.
    let round = |i: u64| -> anyhow::Result<()> {
        let m: Msg = std::array::from_fn(|k| (seq + i) * 8 + k as u64);
        send(m)?;
        match next_pong(&sub, Instant::now() + Duration::from_secs(20))? {
            Some(r) if r == m => Ok(()),
            Some(r) => bail!("pong {r:?} for ping {m:?}"),
            None => bail!("no pong within 20 s"),
        }
    };
    for i in 1..=200 {
        round(i)?;
    }
    let t = Instant::now();
    for i in 201..=200 + rounds {
        round(i)?;
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / rounds as f64;
    send([STOP; 8])?;
    put(report, &us.to_le_bytes())
}

/// µs per 64-byte round trip between an iceoryx2 client pinned to
/// `client_cpu` and an echo server pinned to `server_cpu` (separate
/// processes), over `rounds` round trips after 200 of warm-up.
pub(super) fn round_trip(client_cpu: usize, server_cpu: usize, rounds: u64) -> anyhow::Result<f64> {
    let scope = Scope::new();
    let mut report = Pipe::new()?;
    let wfd = report.w.as_raw_fd();
    let prefix = scope.prefix.clone();
    let srv = fork_child(Some(server_cpu), move || {
        child("iceoryx2 echo server", || echo_server(&prefix))
    })?;
    let prefix = scope.prefix.clone();
    let cli = match fork_child(Some(client_cpu), move || {
        child("iceoryx2 client", || echo_client(&prefix, rounds, wfd))
    }) {
        Ok(p) => p,
        Err(e) => {
            kill_all(&[srv]);
            return Err(e);
        }
    };
    drop(report.w);
    let mut b = [0u8; 8];
    // Generous: 20 s to connect, and a same-core round trip on a loaded
    // machine can take a scheduling quantum.
    let limit = Duration::from_secs(60 + rounds / 20);
    match read_within(&mut report.r, &mut b, limit, "iceoryx2 round trip") {
        Ok(()) => {
            wait_child(cli).context("iceoryx2 client")?;
            wait_child(srv).context("iceoryx2 echo server")?;
            Ok(f64::from_le_bytes(b))
        }
        Err(e) => {
            kill_all(&[cli, srv]);
            Err(e)
        }
    }
}

// ---------------------------------------------------------------------------
// lc98-stress: many publishers, one subscriber

/// The subscriber's buffer: as many samples as a msgq packet ring holds.
pub(super) const STRESS_BUFFER: usize = 256;

fn stress_service(
    node: &Node<ipc::Service>,
    writers: usize,
    create: bool,
) -> anyhow::Result<
    iceoryx2::service::port_factory::publish_subscribe::PortFactory<ipc::Service, u64, ()>,
> {
    let b = node
        .service_builder(&service_name("lc98/stress")?)
        .publish_subscribe::<u64>()
        .max_publishers(writers)
        .max_subscribers(1)
        .max_nodes(writers + 1)
        .subscriber_max_buffer_size(STRESS_BUFFER)
        .history_size(0)
        .enable_safe_overflow(false);
    if create {
        ix(b.create(), "create the iceoryx2 stress service")
    } else {
        ix(b.open(), "open the iceoryx2 stress service")
    }
}

/// What the subscriber reports: seconds, censored (0/1), CPU seconds,
/// samples received, their sum, samples out of order.
const REPORT_WORDS: usize = 6;

fn stress_subscriber(
    prefix: &str,
    writers: u64,
    total: u64,
    cap: Duration,
    ready: i32,
    go: i32,
    report: i32,
) -> anyhow::Result<()> {
    let node = node(prefix)?;
    let svc = stress_service(&node, writers as usize, true)?;
    let sub = ix(
        svc.subscriber_builder().buffer_size(STRESS_BUFFER).create(),
        "stress subscriber",
    )?;
    put(ready, &[1])?;
    // Every publisher exists now: connect to each before any sends (a
    // publisher that finds the buffer full and no connected subscriber drops
    // the sample rather than wait).
    take(go)?;
    ix(sub.update_connections(), "connect to the publishers")?;
    put(ready, &[1])?;
    take(go)?;
    let start = Instant::now();
    let cpu0 = thread_cpu_s();
    let mut next = vec![0u64; writers as usize];
    let (mut count, mut sum, mut disorder) = (0u64, 0u64, 0u64);
    let mut idle = 0u32;
    let mut censored = false;
    while count < total {
        match ix(sub.receive(), "receive")? {
            Some(s) => {
                let v = *s;
                drop(s);
                count += 1;
                sum = sum.wrapping_add(v);
                let (w, i) = ((v / 1_000_000_000) as usize, v % 1_000_000_000);
                match next.get_mut(w) {
                    Some(n) if *n == i => *n += 1,
                    _ => disorder += 1,
                }
            }
            None => {
                idle = idle.wrapping_add(1);
                if idle.is_multiple_of(64) {
                    mpsync::sched::yield_now();
                    if start.elapsed() > cap {
                        censored = true;
                        break;
                    }
                }
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = thread_cpu_s() - cpu0;
    let words: [u64; REPORT_WORDS] = [
        secs.to_bits(),
        u64::from(censored),
        cpu.to_bits(),
        count,
        sum,
        disorder,
    ];
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    put(report, &bytes)
}

fn stress_publisher(
    prefix: &str,
    w: u64,
    n: u64,
    writers: u64,
    fds: (i32, i32, i32),
) -> anyhow::Result<()> {
    let (ready, go, done) = fds;
    let node = node(prefix)?;
    let svc = stress_service(&node, writers as usize, false)?;
    let publ = ix(
        svc.publisher_builder()
            .backpressure_strategy(BackpressureStrategy::RetryUntilDelivered)
            .create(),
        "stress publisher",
    )?;
    ix(publ.update_connections(), "connect to the subscriber")?;
    put(ready, &[1])?;
    take(go)?;
    for i in 0..n {
        let s = ix(publ.loan_uninit(), "loan")?;
        if ix(s.write_payload(w * 1_000_000_000 + i).send(), "send")? == 0 {
            bail!("sample {i} of publisher {w} reached no subscriber");
        }
    }
    // Stay (and keep the publisher's samples mapped) until the subscriber has
    // taken everything.
    take(done)
}

/// One ready byte from `ready` (a child's signal), within a minute.
fn one_ready(ready: &mut File, what: &str) -> anyhow::Result<()> {
    read_within(ready, &mut [0u8; 1], Duration::from_secs(60), what)
}

/// The stress subscriber's report, read from `report` (within `cap` and a
/// minute): (seconds, censored, CPU seconds), the seconds extrapolated
/// to all `total` samples when censored. Fails on a sample out of order or
/// from no publisher, and, when not censored, unless every one of the
/// `writers`' samples arrived once.
fn subscriber_report(
    report: &mut File,
    writers: u64,
    total: u64,
    cap: Duration,
) -> anyhow::Result<(f64, bool, f64)> {
    let mut rep = [0u8; 8 * REPORT_WORDS];
    read_within(
        report,
        &mut rep,
        cap + Duration::from_secs(60),
        "iceoryx2 subscriber report",
    )?;
    let w: Vec<u64> = rep
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let (secs, censored, cpu, count, sum, disorder) = (
        f64::from_bits(w[0]),
        w[1] != 0,
        f64::from_bits(w[2]),
        w[3],
        w[4],
        w[5],
    );
    if disorder != 0 {
        bail!("iceoryx2 stress: {disorder} samples out of order or from no publisher");
    }
    if censored {
        return Ok((secs * total as f64 / count.max(1) as f64, true, cpu));
    }
    let want = stress_sum(writers, total);
    if count != total || sum != want {
        bail!(
            "iceoryx2 stress: conservation failed ({count} of {total} samples, sum {sum}, want {want})"
        );
    }
    Ok((secs, false, cpu))
}

/// One `lc98-stress` run over iceoryx2: `writers` publisher processes send
/// `total` one-word samples in all to one subscriber process. Returns
/// (seconds, censored: it hit `cap` and was extrapolated, the subscriber's
/// CPU seconds), as `lc98::stress_once` does. The clock runs from the start
/// signal, once every process has connected.
pub(super) fn stress_once(
    writers: u64,
    total: u64,
    cap: Duration,
) -> anyhow::Result<(f64, bool, f64)> {
    if writers == 0 || writers >= 1_000 {
        bail!("iceoryx2 stress: {writers} writers (1..1000)");
    }
    let scope = Scope::new();
    let Pipe {
        r: mut ready_r,
        w: ready_wf,
    } = Pipe::new()?;
    // The subscriber's signals come through a pipe of its own, the
    // publishers' through `go`.
    let (sgo, go) = (Pipe::new()?, Pipe::new()?);
    let (done, mut report) = (Pipe::new()?, Pipe::new()?);
    let fd = |f: &File| f.as_raw_fd();
    let (ready_w, sgo_r, go_r) = (fd(&ready_wf), fd(&sgo.r), fd(&go.r));
    let (done_r, report_w) = (fd(&done.r), fd(&report.w));
    let mut pids = Vec::new();
    let prefix = scope.prefix.clone();
    pids.push(fork_child(None, move || {
        child("iceoryx2 stress subscriber", || {
            stress_subscriber(&prefix, writers, total, cap, ready_w, sgo_r, report_w)
        })
    })?);
    // Only the subscriber holds the report's write end: its exit is EOF there.
    drop(report.w);
    let r = (|| -> anyhow::Result<(f64, bool, f64)> {
        one_ready(&mut ready_r, "iceoryx2 subscriber ready")?;
        for w in 0..writers {
            let n = writer_share(w, writers, total);
            let prefix = scope.prefix.clone();
            pids.push(fork_child(None, move || {
                child("iceoryx2 stress publisher", || {
                    stress_publisher(&prefix, w, n, writers, (ready_w, go_r, done_r))
                })
            })?);
        }
        // Only the children hold the ready pipe's write end now.
        drop(ready_wf);
        for _ in 0..writers {
            one_ready(&mut ready_r, "iceoryx2 publishers ready")?;
        }
        put(sgo.w.as_raw_fd(), &[1])?;
        one_ready(&mut ready_r, "iceoryx2 subscriber connected")?;
        put(sgo.w.as_raw_fd(), &[1])?;
        put(go.w.as_raw_fd(), &vec![1u8; writers as usize])?;
        let (secs, censored, cpu) = subscriber_report(&mut report.r, writers, total, cap)?;
        if censored {
            return Ok((secs, true, cpu));
        }
        put(done.w.as_raw_fd(), &vec![1u8; writers as usize])?;
        for &p in &pids {
            wait_child(p)?;
        }
        Ok((secs, false, cpu))
    })();
    match r {
        Ok((secs, true, cpu)) => {
            // Censored: the publishers may still be retrying.
            kill_all(&pids);
            Ok((secs, true, cpu))
        }
        Ok(v) => Ok(v),
        Err(e) => {
            kill_all(&pids);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus() -> (usize, usize) {
        let c = mpsync::sched::native::available_cpus().expect("CPUs");
        (c[0], *c.get(1).unwrap_or(&c[0]))
    }

    /// One iceoryx2 run at a time in this test binary: each test checks that
    /// its runs left nothing of this process's behind.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn ours() -> Vec<String> {
        leftovers(&format!("{TAG}{}x", std::process::id()))
    }

    #[test]
    fn round_trip_same_and_cross_core_and_cleans_up() {
        let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
        let (a, b) = cpus();
        for (c, s) in [(a, a), (a, b)] {
            let us = round_trip(c, s, 300).expect("iceoryx2 round trip");
            assert!(us.is_finite() && us > 0.0, "round trip {us} µs");
            let left = ours();
            assert!(left.is_empty(), "iceoryx2 state left behind: {left:?}");
        }
    }

    #[test]
    fn stress_conserves_with_one_and_several_publishers() {
        let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
        for w in [1, 3] {
            let (secs, censored, _) =
                stress_once(w, 3_000, Duration::from_secs(120)).expect("iceoryx2 stress");
            assert!(
                !censored,
                "{w} publishers: 3,000 samples not through in 120 s"
            );
            assert!(secs > 0.0);
            let left = ours();
            assert!(left.is_empty(), "iceoryx2 state left behind: {left:?}");
        }
    }

    #[test]
    fn stale_state_of_dead_harnesses_is_swept() {
        // A pid that cannot be a live process (above pid_max's ceiling).
        let stale = format!("/dev/shm/{TAG}4194399x0_probe");
        std::fs::write(&stale, b"x").expect("write a stale file");
        sweep_stale();
        assert!(
            !std::path::Path::new(&stale).exists(),
            "{stale} survived the sweep"
        );
    }
}
