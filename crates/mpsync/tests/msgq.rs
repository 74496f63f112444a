//! Shared-memory active messages between real processes (paper 004): every
//! claim algorithm's conservation (exactly once, per-sender order, checksummed
//! payloads) with forked writers oversubscribing the cores; request/reply
//! across processes; SIGKILLed senders mid-claim; fuzzed headers and segments.
//!
//! Children are forked and only send (no test-harness state); they `_exit`.
//! `MPSYNC_MSGQ_KILLS=10000` runs the fault-injection test at the size.

mod common;

use mpsync::msgq::{Claim, Endpoint, Error, Options, Peer};
use mpsync::sched::stall::{self, Trap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One test of this file at a time, every test. The process-spawning ones
/// oversubscribe 2 cores already; and a child forked while another test's
/// thread holds a process-wide lock (the stall-point registry a trap is armed
/// under, say) inherits that lock held by a thread that does not exist in the
/// child, and deadlocks on its first stall point: a writer that never sends.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A name unique to this process and test.
fn name(tag: &str) -> String {
    format!("t{}{tag}", std::process::id() % 1_000_000)
}

const DATA: u16 = 3;

fn check(id: u64, seq: u64) -> u64 {
    (id.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ seq.wrapping_mul(0xc2b2_ae3d_27d4_eb4f))
        .rotate_left(17)
}

fn bulk_for(id: u64, seq: u64) -> Vec<u8> {
    let len = ((id * 131 + seq * 17) % 700 + 1) as usize;
    (0..len)
        .map(|i| (i as u64 ^ check(id, seq)) as u8)
        .collect()
}

fn bulk_sum(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// A received message: (writer, seq, payload intact).
type Log = Arc<Mutex<Vec<(u64, u64, bool)>>>;

fn receiver(tag: &str, o: Options) -> (Endpoint, Log) {
    let mut ep = Endpoint::create(&name(tag), o).expect("create endpoint");
    let log: Log = Arc::default();
    let l = log.clone();
    ep.register(DATA, move |_, m| {
        let a = m.args();
        let ok = a.len() == 4
            && a[2] == check(a[0], a[1])
            && match m.bulk() {
                Some(b) => a[3] == bulk_sum(b) && b == bulk_for(a[0], a[1]),
                None => a[3] == 0,
            };
        l.lock().unwrap().push((a[0], a[1], ok));
        Ok(())
    })
    .unwrap();
    (ep, log)
}

/// Forks a writer that sends `n` messages (bulk every `bulk_every`-th) as
/// writer `id`, then exits (status 0 on success, 1 on a send error).
fn fork_writer(target: &str, id: u64, n: u64, bulk_every: u64) -> libc::pid_t {
    fork_writer_trapped(target, id, n, bulk_every, None)
}

/// As [`fork_writer`]; with `trap = Some((point, k))` the writer stops for good
/// the `k+1`-th time it passes `point` (a named window of the send protocol),
/// to be killed there.
fn fork_writer_trapped(
    target: &str,
    id: u64,
    n: u64,
    bulk_every: u64,
    trap: Option<(stall::Point, u64)>,
) -> libc::pid_t {
    let o = Options {
        timeout: Duration::from_secs(60),
        // The tests' writers may connect to a POSIX-mutex endpoint.
        trust_peers: true,
        ..Options::default()
    };
    // SAFETY: the child only maps the segment, sends, and `_exit`s; glibc's
    // fork keeps malloc usable in the child.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: plain prctl; a child never outlives a test that panicked.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        let code = (|| -> Result<(), Error> {
            let peer = Peer::connect(target, &o)?;
            if let Some((p, k)) = trap {
                // Never released: the parent kills us while we are held there.
                std::mem::forget(Trap::at(p).this_thread().skip(k).arm());
            }
            for seq in 0..n {
                let with_bulk = bulk_every > 0 && seq % bulk_every == 0;
                let b = bulk_for(id, seq);
                let sum = if with_bulk { bulk_sum(&b) } else { 0 };
                peer.send(
                    DATA,
                    &[id, seq, check(id, seq), sum],
                    with_bulk.then_some(&b[..]),
                )?;
            }
            Ok(())
        })()
        .map_or_else(
            |e| {
                // The parent's assertion names the exit code; this says why.
                eprintln!("writer {id} (pid {}): {e}", std::process::id());
                1
            },
            |_| 0,
        );
        // SAFETY: leaving the child without the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    pid
}

fn reap(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: waiting for our own child.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid);
    status
}

/// Options for `claim`; the POSIX robust mutex trusts every peer (the
/// tests' peers are their own children).
fn opts(claim: Claim) -> Options {
    Options {
        trust_peers: claim == Claim::PosixRobust,
        ..Options::default()
    }
    .claim(claim)
}

/// Every writer's messages arrived exactly once, in order, intact.
fn verify(log: &[(u64, u64, bool)], expect: &[(u64, u64)]) {
    let mut next = std::collections::HashMap::new();
    for &(id, seq, ok) in log {
        assert!(ok, "corrupt payload from writer {id}, message {seq}");
        let n = next.entry(id).or_insert(0u64);
        assert_eq!(
            seq, *n,
            "writer {id}: got message {seq}, expected {n} (lost, duplicated or reordered)"
        );
        *n += 1;
    }
    for &(id, n) in expect {
        assert_eq!(
            next.get(&id).copied().unwrap_or(0),
            n,
            "writer {id}: messages delivered"
        );
    }
}

fn conservation(claim: Claim, tag: &str) {
    let _s = serial();
    mpsync::util::busy::BusyWork::global();
    let writers = 3u64;
    let per = common::sized(1500, 10);
    let o = Options {
        packets: 16,
        blocks: 4,
        block_bytes: 1024,
        ..opts(claim)
    };
    let (mut ep, log) = receiver(tag, o);
    let pids: Vec<_> = (0..writers)
        .map(|id| fork_writer(ep.name(), id, per, 7))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while (log.lock().unwrap().len() as u64) < writers * per {
        if ep.poll() == 0 {
            mpsync::sched::yield_now();
        }
        assert!(
            Instant::now() < deadline,
            "{claim:?}: receiver stuck at {} messages",
            log.lock().unwrap().len()
        );
    }
    for pid in pids {
        let st = reap(pid);
        assert!(
            libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
            "writer failed: {st:#x}"
        );
    }
    ep.poll();
    let expect: Vec<_> = (0..writers).map(|id| (id, per)).collect();
    verify(&log.lock().unwrap(), &expect);
    let st = ep.stats();
    assert_eq!(
        (st.rejected, st.unknown_handler, st.lost),
        (0, 0, 0),
        "{st:?}"
    );
    assert!(ep.take_problems().is_empty());
}

#[test]
fn conservation_lock_free() {
    conservation(Claim::LockFree, "clf");
}
#[test]
fn conservation_tas() {
    conservation(Claim::Tas, "ctas");
}
#[test]
fn conservation_tatas() {
    conservation(Claim::Tatas, "ctatas");
}
#[test]
fn conservation_ticket() {
    conservation(Claim::Ticket, "ctkt");
}
#[test]
fn conservation_anderson() {
    conservation(Claim::Anderson, "cand");
}
#[test]
fn conservation_posix_robust() {
    conservation(Claim::PosixRobust, "cpsx");
}

/// A server process answers requests; the parent checks every reply.
fn request_reply(claim: Claim, tag: &str) {
    let _s = serial();
    let server = name(&format!("{tag}s"));
    let o = opts(claim);
    let o2 = o.clone();
    let srv = server.clone();
    // SAFETY: as in `fork_writer`; the child runs the server and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: plain prctl; a child never outlives a test that panicked.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        let code = (|| -> Result<i32, Error> {
            let mut ep = Endpoint::create(&srv, o2)?;
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            ep.register(1, |cx, m| {
                let d: Vec<u64> = m.args().iter().map(|a| a * 2).collect();
                cx.reply(&d)
            })?;
            ep.register(2, |cx, m| {
                let mut b = m.bulk().unwrap_or_default().to_vec();
                b.reverse();
                cx.reply_bulk(&[b.len() as u64], &b)
            })?;
            ep.register(3, |cx, _| {
                cx.reply(&[1])?;
                // A second reply is refused with an error value.
                match cx.reply(&[2]) {
                    Err(Error::Handler(_)) => Ok(()),
                    _ => Err(Error::Handler("second reply accepted".into())),
                }
            })?;
            let s = stop.clone();
            ep.register(9, move |_, _| {
                s.store(true, std::sync::atomic::Ordering::Relaxed);
                Ok(())
            })?;
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline {
                if ep.poll() == 0 {
                    mpsync::sched::yield_now();
                }
            }
            Ok(
                if ep.take_problems().is_empty() && stop.load(std::sync::atomic::Ordering::Relaxed)
                {
                    0
                } else {
                    2
                },
            )
        })()
        .unwrap_or(1);
        // SAFETY: leaving the child.
        unsafe { libc::_exit(code) };
    }
    let mut client = Endpoint::create(&name(&format!("{tag}c")), o).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let peer = loop {
        match client.connect(&server) {
            Ok(p) => break p,
            Err(Error::NotFound(_)) | Err(Error::Corrupt(_)) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(e) => panic!("connect: {e}"),
        }
    };
    assert_eq!(peer.claim(), claim);
    for i in 0..common::sized(300, 10) {
        let r = client.request(&peer, 1, &[i, i + 1, 7], None).unwrap();
        assert_eq!(r.args(), [2 * i, 2 * i + 2, 14]);
        if i % 10 == 0 {
            let data: Vec<u8> = (0..(i as usize * 37 % 8192)).map(|x| x as u8).collect();
            let r = client.request(&peer, 2, &[], Some(&data)).unwrap();
            let mut rev = data.clone();
            rev.reverse();
            assert_eq!(r.args(), [data.len() as u64]);
            assert_eq!(r.bulk().unwrap(), &rev[..]);
        }
    }
    assert_eq!(client.request(&peer, 3, &[], None).unwrap().args(), [1]);
    client.send(&peer, 9, &[]).unwrap();
    let st = reap(pid);
    assert!(
        libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
        "server failed: {st:#x}"
    );
    assert_eq!(client.stats().stray_replies, 0);
}

#[test]
fn request_reply_lock_free() {
    request_reply(Claim::LockFree, "rlf");
}
#[test]
fn request_reply_ticket() {
    request_reply(Claim::Ticket, "rtk");
}
#[test]
fn request_reply_posix_robust() {
    request_reply(Claim::PosixRobust, "rpx");
}

/// The doorbell between processes: a server that sleeps as soon as it finds
/// nothing (`spin: Some(0)`) and a client that does the same while waiting
/// for each reply. Every request is answered, and both sides' sleeps were
/// ended by the other's ring (a sender that never rang would leave each sleep
/// to its time limit, and `wakeups` at zero). An idle `wait` returns 0 at its
/// timeout.
#[test]
fn doorbell_wakes_sleeping_receivers() {
    let _s = serial();
    let server = name("dbs");
    let o = Options::default().spin(Some(Duration::ZERO));
    let o2 = o.clone();
    let srv = server.clone();
    let rounds = common::sized(300, 10);
    // SAFETY: as in `fork_writer`; the child runs the server and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: plain prctl; a child never outlives a test that panicked.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        let code = (|| -> Result<i32, Error> {
            let mut ep = Endpoint::create(&srv, o2)?;
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            ep.register(1, |cx, m| cx.reply(&[m.args()[0] + 1]))?;
            let s = stop.clone();
            ep.register(9, move |_, _| {
                s.store(true, std::sync::atomic::Ordering::Relaxed);
                Ok(())
            })?;
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut reported = false;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline {
                ep.wait(Duration::from_secs(1));
                if !reported && ep.stats().delivered >= rounds {
                    reported = true;
                    let st = ep.stats();
                    // Handler 2 of the client takes our counters.
                    let client = ep.connect(&format!("{srv}c"))?;
                    ep.send(&client, 2, &[st.wakeups, st.sleep_timeouts])?;
                }
            }
            Ok(if stop.load(std::sync::atomic::Ordering::Relaxed) {
                0
            } else {
                2
            })
        })()
        .unwrap_or(1);
        // SAFETY: leaving the child.
        unsafe { libc::_exit(code) };
    }
    let mut client = Endpoint::create(&format!("{server}c"), o).unwrap();
    let counters = Arc::new(Mutex::new(None));
    let c2 = counters.clone();
    client
        .register(2, move |_, m| {
            *c2.lock().unwrap() = Some((m.args()[0], m.args()[1]));
            Ok(())
        })
        .unwrap();
    // Nobody sends to us yet: an idle wait sleeps and times out.
    assert_eq!(client.wait(Duration::from_millis(30)), 0);
    assert!(client.stats().sleep_timeouts >= 1, "{:?}", client.stats());
    let deadline = Instant::now() + Duration::from_secs(20);
    let peer = loop {
        match client.connect(&server) {
            Ok(p) => break p,
            Err(Error::NotFound(_)) | Err(Error::Corrupt(_)) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(e) => panic!("connect: {e}"),
        }
    };
    for i in 0..rounds {
        let r = client.request(&peer, 1, &[i], None).unwrap();
        assert_eq!(r.args(), [i + 1]);
        if i % 3 == 0 {
            // Give the server time to fall asleep, so the next request must
            // ring it (back-to-back requests often find it still looking).
            std::thread::sleep(Duration::from_micros(300));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while counters.lock().unwrap().is_none() {
        client.wait(Duration::from_millis(100));
        assert!(Instant::now() < deadline, "the server never reported");
    }
    client.send(&peer, 9, &[]).unwrap();
    let st = reap(pid);
    assert!(
        libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
        "server failed: {st:#x}"
    );
    let (srv_wakeups, srv_timeouts) = counters.lock().unwrap().unwrap();
    let cl = client.stats();
    eprintln!(
        "doorbell: server {srv_wakeups} wake-ups, {srv_timeouts} timed-out sleeps; \
         client {} wake-ups, {} timed-out sleeps, {rounds} round trips",
        cl.wakeups, cl.sleep_timeouts
    );
    assert!(srv_wakeups > 0, "the server was never woken by a ring");
    assert!(cl.wakeups > 0, "the client was never woken by a ring");
}

/// A peer that scribbles on the doorbell word (the line after the header)
/// while the receiver waits: every `wait` still ends by its timeout with no
/// message taken, and a real message afterwards is still delivered.
#[test]
fn scribbled_doorbell_never_hangs_wait() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    let _s = serial();
    let (mut ep, log) = receiver("dbg", Options::default().spin(Some(Duration::ZERO)));
    let (base, len) = ep.raw_segment();
    assert!(len >= 256);
    // SAFETY: the doorbell is the 128-aligned line at offset 128 of the live
    // mapping (which `ep` keeps mapped until the end of the test), and it is
    // only ever accessed atomically.
    let bell = unsafe { &*base.add(128).cast::<AtomicU32>() };
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut rng = mpsync::util::rng::SplitMix64::stream(5, 0);
            while !stop.load(Ordering::Relaxed) {
                let v = match rng.next_u64() % 3 {
                    0 => 0,
                    1 => 1,
                    _ => rng.next_u64() as u32,
                };
                bell.store(v, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(50));
            }
        });
        for _ in 0..common::sized(20, 4) {
            assert_eq!(ep.wait(Duration::from_millis(5)), 0);
        }
        stop.store(true, Ordering::Relaxed);
    });
    let pid = fork_writer(ep.name(), 1, 10, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    while log.lock().unwrap().len() < 10 {
        ep.wait(Duration::from_millis(100));
        assert!(Instant::now() < deadline, "messages never arrived");
    }
    assert_eq!(reap(pid), 0);
    verify(&log.lock().unwrap(), &[(1, 10)]);
}

#[test]
fn names_and_options_are_validated() {
    let _s = serial();
    for bad in ["", "a/b", "..", "seventeen-chars-x", "sp ace"] {
        assert!(matches!(
            Endpoint::create(bad, Options::default()),
            Err(Error::InvalidArgument(_))
        ));
    }
    let o = Options {
        packets: 3,
        ..Options::default()
    };
    let e = Endpoint::create(&name("bado"), o).unwrap_err();
    assert!(e.to_string().contains("power of two"), "{e}");
    assert!(matches!(
        Peer::connect(&name("none"), &Options::default()),
        Err(Error::NotFound(_))
    ));
    // A live owner's name cannot be taken; dropping the owner frees it.
    let a = Endpoint::create(&name("dup"), Options::default()).unwrap();
    assert!(matches!(
        Endpoint::create(&name("dup"), Options::default()),
        Err(Error::Exists(_))
    ));
    drop(a);
    assert!(matches!(
        Peer::connect(&name("dup"), &Options::default()),
        Err(Error::NotFound(_))
    ));
    Endpoint::create(&name("dup"), Options::default()).unwrap();
    let e = Endpoint::create(
        &name("spin"),
        Options::default().spin(Some(Duration::from_secs(2))),
    )
    .unwrap_err();
    assert!(e.to_string().contains("at most 1 s"), "{e}");
}

/// A peer that rewrites the segment's header (every connected process can)
/// neither keeps later connectors out nor sends them into the wrong slots:
/// a connector takes the geometry from the owner, over the rendezvous
/// socket, and never reads the header. Random flips of its bytes, and a
/// consistent forgery (16 slots rewritten as 2, checksum recomputed: the
/// same sealed size), stay in place while 200 connectors each connect and
/// send; every message arrives, in order.
#[test]
fn fuzzed_header_never_stops_connects() {
    let _s = serial();
    let o = Options {
        packets: 16,
        ..Options::default()
    };
    let (mut ep, log) = receiver("fzh", o.clone());
    let (base, _) = ep.raw_segment();
    // SAFETY: the header's six words at the start of our live mapping
    // (8-aligned; `ep` keeps it mapped), only accessed atomically here.
    let words: Vec<&std::sync::atomic::AtomicU64> = (0..6)
        .map(|i| unsafe { &*base.add(8 * i).cast::<std::sync::atomic::AtomicU64>() })
        .collect();
    let fnv = |fields: &[u64]| {
        fields
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
            })
    };
    let mut rng = mpsync::util::rng::SplitMix64::stream(16, 0);
    let n = common::sized(200, 4);
    for i in 0..n {
        use std::sync::atomic::Ordering::Relaxed;
        if i % 2 == 0 {
            let w = words[(rng.next_u64() % 6) as usize];
            w.store(w.load(Relaxed) ^ (rng.next_u64() | 1), Relaxed);
        } else {
            // Magic, version 4 with the Tas claim, 2 packets, the size, a pid.
            let f = [u64::from_le_bytes(*b"MPSYNCMQ"), 4 | (1 << 32), 2, 8192, 1];
            for (w, v) in words.iter().zip(f) {
                w.store(v, Relaxed);
            }
            words[5].store(fnv(&f), Relaxed);
        }
        let t0 = Instant::now();
        let peer = loop {
            match Peer::connect(ep.name(), &o) {
                Ok(p) => break p,
                // The connections of the connectors before, not yet seen
                // closed and freed (the acceptor thread and our polls do it).
                Err(Error::Refused(_)) if t0.elapsed() < Duration::from_secs(10) => {
                    ep.poll();
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("connect {i} after a header rewrite: {e}"),
            }
        };
        assert_eq!(peer.claim(), Claim::LockFree);
        peer.send(DATA, &[7, i, check(7, i), 0], None).unwrap();
        drop(peer);
        let deadline = Instant::now() + Duration::from_secs(10);
        while (log.lock().unwrap().len() as u64) <= i {
            ep.poll();
            assert!(Instant::now() < deadline, "message {i} never arrived");
        }
    }
    verify(&log.lock().unwrap(), &[(7, n)]);
    assert_eq!(ep.stats().rejected, 0, "{:?}", ep.stats());
}

/// A peer that scribbles random bytes over the segment (the bells, the
/// tail, the claim lock and the slots): the receiver's poll always returns,
/// never panics, and reports what it rejected; once the scribbling stops,
/// the SAME queue heals by itself (tail policed, garbage slots cleared) and
/// an honest sender's messages all arrive, exactly once, in order.
fn scribbled_segment_heals(claim: Claim, tag: &str) {
    let _s = serial();
    let o = Options {
        packets: 8,
        blocks: 2,
        block_bytes: 256,
        lease: Duration::from_micros(50),
        timeout: Duration::from_secs(20),
        ..opts(claim)
    };
    let (mut ep, log) = receiver(tag, o.clone());
    let (base, len) = ep.raw_segment();
    let mut rng = mpsync::util::rng::SplitMix64::stream(17, claim as u64);
    for round in 0..2000 {
        for _ in 0..16 {
            let at = 128 + (rng.next_u64() as usize % (len - 128));
            // SAFETY: inside our mapping, past the header; every structure
            // there is only ever accessed atomically (the claims tested here
            // are the ones that defend against peers; not the POSIX mutex).
            unsafe { *base.add(at) = rng.next_u64() as u8 };
        }
        if round % 3 == 0 {
            let t0 = Instant::now();
            ep.poll();
            assert!(t0.elapsed() < Duration::from_secs(5), "poll hung");
        }
    }
    // The scribbling stopped. The same endpoint, a new honest sender.
    let peer = Peer::connect(ep.name(), &o).unwrap();
    std::thread::scope(|s| {
        let sender = s.spawn(|| {
            for seq in 0..20 {
                peer.send(DATA, &[9, seq, check(9, seq), 0], None).unwrap();
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        while log.lock().unwrap().iter().filter(|m| m.0 == 9).count() < 20 {
            ep.poll();
            assert!(
                Instant::now() < deadline,
                "{claim:?}: the scribbled queue never healed: {:?}; problems {:?}",
                ep.stats(),
                ep.take_problems()
            );
        }
        sender.join().unwrap();
    });
    let log = log.lock().unwrap();
    let honest: Vec<_> = log.iter().copied().filter(|m| m.0 == 9).collect();
    verify(&honest, &[(9, 20)]);
}

#[test]
fn scribbled_segment_heals_lock_free() {
    scribbled_segment_heals(Claim::LockFree, "fzlf");
}

#[test]
fn scribbled_segment_heals_tas() {
    scribbled_segment_heals(Claim::Tas, "fztas");
}

#[test]
fn scribbled_segment_heals_ticket() {
    scribbled_segment_heals(Claim::Ticket, "fztkt");
}

#[test]
fn scribbled_segment_heals_anderson() {
    scribbled_segment_heals(Claim::Anderson, "fzand");
}

/// Writers are SIGKILLed at random moments while the queue is kept nearly
/// full (so most kills land between taking a ticket and claiming the packet,
/// or while a packet or bulk block is claimed): the receiver recovers every
/// slot, delivers nothing twice and nothing corrupt, and later traffic flows.
fn sigkill(claim: Claim, tag: &str, default_kills: u64) {
    let _s = serial();
    mpsync::util::busy::BusyWork::global();
    let kills: u64 = std::env::var("MPSYNC_MSGQ_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(common::sized(default_kills, 4));
    let o = Options {
        packets: 8,
        blocks: 2,
        block_bytes: 1024,
        lease: Duration::from_millis(1),
        ..opts(claim)
    };
    let (mut ep, log) = receiver(tag, o);
    let mut rng = mpsync::util::rng::SplitMix64::stream(kills, 1);
    let mut latencies = Vec::new();
    let mut to_death = Vec::new();
    let mut after_death = Vec::new();
    let mut zombie = None;
    for k in 0..kills {
        // Where the writer dies: held between taking a ticket and
        // publishing its slot, between claiming its record and writing it,
        // or anywhere (a plain kill at a random moment).
        let trap = match k % 3 {
            0 => Some(stall::MSGQ_TICKET),
            1 => Some(stall::MSGQ_FILL),
            _ => None,
        }
        .map(|p| (p, 1 + rng.next_u64() % 12));
        let pid = fork_writer_trapped(ep.name(), k, u64::MAX, 3, trap);
        // Wait until the writer is sending, then poll for a random while (in
        // bursts, so the queue is often full).
        let t0 = Instant::now();
        while !log.lock().unwrap().iter().rev().take(16).any(|m| m.0 == k) {
            ep.poll();
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "writer {k} never started"
            );
        }
        let window = Duration::from_micros(500 + rng.next_u64() % 3000);
        let t0 = Instant::now();
        while t0.elapsed() < window {
            ep.poll();
            if rng.next_u64().is_multiple_of(2) {
                std::thread::sleep(Duration::from_micros(rng.next_u64() % 300));
            }
        }
        // SAFETY: killing our own child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        // Every other writer stays a zombie until recovery is done (the
        // liveness check must see through it).
        let reap_now = k % 2 == 0;
        if reap_now {
            reap(pid);
        }
        let killed = Instant::now();
        // When the kernel finished the kill (the pid is gone or a zombie):
        // the recovery latency splits into the kill itself (not ours) and
        // the receiver's detection after it.
        let mut dead_at = None;
        loop {
            ep.poll();
            if dead_at.is_none() && !alive(pid) {
                dead_at = Some(killed.elapsed());
            }
            if ep.backlog() == 0 {
                break;
            }
            assert!(
                killed.elapsed() < Duration::from_secs(10),
                "kill {k}: receiver wedged with backlog {} ({:?})",
                ep.backlog(),
                ep.stats()
            );
            std::hint::spin_loop();
        }
        let total = killed.elapsed();
        latencies.push(total);
        // Recovery after death; zero when the backlog cleared first (the
        // ticket was revoked, or the slot freed, before the kill finished).
        let dead = dead_at.unwrap_or(total);
        after_death.push(total.saturating_sub(dead));
        to_death.push(dead);
        if let Some(z) = zombie.take() {
            reap(z);
        }
        if !reap_now {
            zombie = Some(pid);
        }
    }
    if let Some(z) = zombie {
        reap(z);
    }
    // The queue still works: a last writer's messages (bulk too) all arrive.
    let last = kills;
    let pid = fork_writer(ep.name(), last, 300, 2);
    let deadline = Instant::now() + Duration::from_secs(60);
    while log.lock().unwrap().iter().filter(|m| m.0 == last).count() < 300 {
        ep.poll();
        if Instant::now() >= deadline {
            let mut status = 0;
            // SAFETY: polling our own child without blocking.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            panic!(
                "queue wedged after the kills: {:?}; backlog {}; last writer {}; problems {:?}",
                ep.stats(),
                ep.backlog(),
                if r == pid {
                    format!("exited with status {status:#x}")
                } else {
                    "still running".to_string()
                },
                ep.take_problems()
            );
        }
    }
    assert_eq!(reap(pid), 0);
    // Exactly once, in order, intact: for each killed writer a gap-free prefix.
    let log = log.lock().unwrap();
    let mut counts = std::collections::HashMap::new();
    for &(id, _, _) in log.iter() {
        *counts.entry(id).or_insert(0u64) += 1;
    }
    let expect: Vec<_> = counts.iter().map(|(&id, &n)| (id, n)).collect();
    verify(&log, &expect);
    let st = ep.stats();
    let pct = |v: &mut Vec<Duration>, q: f64| {
        v.sort();
        v[((v.len() as f64 - 1.0) * q) as usize]
    };
    eprintln!(
        "{claim:?}: {kills} kills, {} messages; unpublished tickets revoked {}, connections \
         closed {}; recovery latency p50 {:?} p99 {:?} max {:?}; of which the kernel's kill \
         (SIGKILL until the pid is gone or a zombie) p50 {:?} p99 {:?}, and the receiver after \
         the death p50 {:?} p99 {:?} max {:?}",
        log.len(),
        st.revoked,
        st.peers_closed,
        pct(&mut latencies, 0.5),
        pct(&mut latencies, 0.99),
        pct(&mut latencies, 1.0),
        pct(&mut to_death, 0.5),
        pct(&mut to_death, 0.99),
        pct(&mut after_death, 0.5),
        pct(&mut after_death, 0.99),
        pct(&mut after_death, 1.0),
    );
    assert_eq!(st.rejected, 0, "{st:?}; problems {:?}", ep.take_problems());
    if kills >= 8 && claim == Claim::LockFree {
        assert!(
            st.revoked > 0,
            "no kill left an unpublished ticket in {kills} kills: the test did not test revocation"
        );
    }
    // Every killed writer's connection was noticed and freed.
    let deadline = Instant::now() + Duration::from_secs(10);
    while ep.peers() > 0 {
        ep.poll();
        assert!(
            Instant::now() < deadline,
            "{} connections still open",
            ep.peers()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Whether `pid` exists and is not a zombie (for measuring when the kernel
/// finished a kill; the queue itself never asks).
fn alive(pid: libc::pid_t) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(st) => !matches!(
            st.rsplit(')')
                .next()
                .and_then(|r| r.trim_start().chars().next()),
            Some('Z' | 'X' | 'x')
        ),
        Err(_) => false,
    }
}

#[test]
fn sigkill_mid_claim_lock_free() {
    sigkill(Claim::LockFree, "klf", 60);
}

#[test]
fn sigkill_mid_claim_posix_robust() {
    sigkill(Claim::PosixRobust, "kpx", 40);
}

/// While the receiver is held between seeing a slot READY and copying its
/// record out (`msgq.take`), neither the slot nor the record is free: a
/// sender wanting the slot's next lap waits (here: gives up after a bounded
/// wait) instead of overwriting the message being read. Deterministic (a
/// stall-point trap), in one process.
#[test]
fn slot_stays_taken_until_copied_out() {
    let _s = serial();
    use mpsync::msgq::ring::{
        Blocked, Env, Event, Head, HeapConn, HeapQueue, Kind, Outgoing, SendStats,
    };
    struct E;
    impl Env for E {
        fn now_ns(&self) -> u64 {
            mpsync::util::clock::now_ns()
        }
        fn lease_ns(&self) -> u64 {
            1_000_000
        }
    }
    let q = HeapQueue::new(2).unwrap();
    let c = HeapConn::new(4, 1, 1, 64).unwrap();
    let out = |v: &'static [u64]| Outgoing {
        handler: 1,
        kind: Kind::OneWay,
        token: 0,
        args: v,
        bulk: None,
    };
    let mut st = SendStats::default();
    let mut give_up = |_: &Blocked<'_>| Err(Error::Timeout("full".into()));
    for v in [&[10u64][..], &[11]] {
        q.queue()
            .send(
                &c.sender(0, u64::MAX),
                None,
                &out(v),
                &E,
                &mut give_up,
                &mut st,
            )
            .unwrap();
    }
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (q, c) = (&q, &c);
        let receiver = s.spawn(move || {
            tx.send(mpsync::sched::current().id()).unwrap();
            go_rx.recv().unwrap();
            let mut head = Head::default();
            let mut buf = Vec::new();
            match q
                .queue()
                .poll_one(&mut head, &E, &|_| Some(c.area()), true, &mut buf)
            {
                Event::Message(m) => m.args[0],
                e => panic!("{e:?}"),
            }
        });
        let trap = Trap::at(stall::MSGQ_TAKE).thread(rx.recv().unwrap()).arm();
        go_tx.send(()).unwrap();
        trap.wait_hit(Duration::from_secs(10)).unwrap();
        // The receiver is between seeing READY and copying: the ring is full.
        let mut tries = 0;
        let r = q.queue().send(
            &c.sender(0, u64::MAX),
            None,
            &out(&[12]),
            &E,
            &mut |_| {
                tries += 1;
                if tries > 1000 {
                    Err(Error::Timeout("full".into()))
                } else {
                    Ok(())
                }
            },
            &mut st,
        );
        assert!(
            matches!(r, Err(Error::Timeout(_))),
            "a sender took the slot the receiver is still reading: {r:?}"
        );
        trap.release();
        assert_eq!(
            receiver.join().unwrap(),
            10,
            "the message read is the one sent"
        );
    });
}

/// Writers that find the ring full sleep on its space bell and are woken by
/// the receiver as it frees slots: seven writer processes (plus one killed
/// while it is about to sleep) send through a four-packet ring to a receiver
/// that, with `slow`, pauses whenever the ring is full (so writers certainly
/// block). Every message of the live writers arrives exactly once, in order,
/// intact; the killed one's form a gap-free prefix; nothing wedges; and with
/// `slow` the receiver's rings woke sleeping writers.
fn space_bell(claim: Claim, tag: &str, slow: bool) {
    let _s = serial();
    mpsync::util::busy::BusyWork::global();
    let writers = 7u64;
    let per = common::sized(400, 10);
    let o = Options {
        packets: 4,
        blocks: 2,
        block_bytes: 1024,
        ..opts(claim)
    };
    let (mut ep, log) = receiver(tag, o);
    let mut pids: Vec<_> = (0..writers)
        .map(|id| fork_writer(ep.name(), id, per, 5))
        .collect();
    // Writer 7 stops for good the 3rd time it is about to sleep on the full
    // ring (announced, not yet parked), and is killed there — or wherever it
    // is — once half the traffic has arrived, or as soon as traffic stalls
    // for 200 ms.
    let doomed = fork_writer_trapped(
        ep.name(),
        writers,
        u64::MAX,
        5,
        Some((stall::MSGQ_SPACE_SLEEP, 2)),
    );
    let total = writers * per;
    let mut killed = false;
    let mut pauses = 0;
    let mut progress = (0, Instant::now());
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let live = log.lock().unwrap().iter().filter(|m| m.0 < writers).count() as u64;
        if live >= total {
            break;
        }
        if live != progress.0 {
            progress = (live, Instant::now());
        }
        if !killed && (live >= total / 2 || progress.1.elapsed() > Duration::from_millis(200)) {
            // SAFETY: killing our own child.
            unsafe { libc::kill(doomed, libc::SIGKILL) };
            pids.push(doomed);
            killed = true;
        }
        if ep.poll() == 0 {
            mpsync::sched::yield_now();
        }
        if slow && pauses < 40 && ep.backlog() >= 4 {
            // The ring is full: every writer that wants a slot now spins a
            // little and then sleeps on the space bell.
            pauses += 1;
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(
            Instant::now() < deadline,
            "{claim:?}: receiver stuck at {live} of {total} messages; backlog {}; {:?}",
            ep.backlog(),
            ep.stats()
        );
    }
    for pid in pids {
        let st = reap(pid);
        assert!(
            pid == doomed || (libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0),
            "writer failed: {st:#x}"
        );
    }
    ep.poll();
    let log = log.lock().unwrap();
    let doomed_n = log.iter().filter(|m| m.0 == writers).count() as u64;
    let mut expect: Vec<_> = (0..writers).map(|id| (id, per)).collect();
    expect.push((writers, doomed_n));
    verify(&log, &expect);
    let st = ep.stats();
    eprintln!(
        "{claim:?} (slow receiver: {slow}): {} messages, {pauses} pauses; {st:?}",
        log.len()
    );
    assert_eq!((st.rejected, st.unknown_handler), (0, 0), "{st:?}");
    if slow {
        assert!(
            st.sender_wakeups > 0,
            "{pauses} pauses with the ring full, and no ring of the space bell found a \
             sleeping writer: {st:?}"
        );
    }
}

#[test]
fn space_bell_lock_free() {
    space_bell(Claim::LockFree, "sblf", false);
}

#[test]
fn space_bell_lock_free_slow_receiver() {
    space_bell(Claim::LockFree, "sblfs", true);
}

#[test]
fn space_bell_posix_robust_slow_receiver() {
    space_bell(Claim::PosixRobust, "sbpxs", true);
}

/// A peer that scribbles on the request queue's space bell (the line at
/// offset 256, after the doorbell) while writers block on a full ring and the
/// receiver pauses now and then: rings may be skipped or spurious and sleeps
/// may end early or last their whole 10 ms, but every message still arrives,
/// exactly once, in order, and no writer times out.
#[test]
fn scribbled_space_bell_never_hangs_senders() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    let _s = serial();
    mpsync::util::busy::BusyWork::global();
    let o = Options {
        packets: 4,
        blocks: 2,
        block_bytes: 1024,
        ..Options::default()
    };
    let (mut ep, log) = receiver("sbg", o);
    let (base, len) = ep.raw_segment();
    assert!(len >= 512);
    // SAFETY: the request queue's space bell is the 128-aligned line at
    // offset 256 of the live mapping (which `ep` keeps mapped until the end
    // of the test), and it is only ever accessed atomically.
    let bell = unsafe { &*base.add(256).cast::<AtomicU32>() };
    let writers = 3u64;
    let per = common::sized(300, 10);
    let pids: Vec<_> = (0..writers)
        .map(|id| fork_writer(ep.name(), id, per, 4))
        .collect();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut rng = mpsync::util::rng::SplitMix64::stream(6, 0);
            while !stop.load(Ordering::Relaxed) {
                let v = match rng.next_u64() % 3 {
                    0 => 0,
                    1 => rng.next_u64() as u32 & !1,
                    _ => rng.next_u64() as u32,
                };
                bell.store(v, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(100));
            }
        });
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut polls = 0u64;
        while (log.lock().unwrap().len() as u64) < writers * per {
            polls += 1;
            if ep.poll() == 0 {
                mpsync::sched::yield_now();
            }
            if polls.is_multiple_of(50) {
                // Let the ring fill, so writers sleep on the scribbled bell.
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(
                Instant::now() < deadline,
                "receiver stuck at {} of {} messages: {:?}",
                log.lock().unwrap().len(),
                writers * per,
                ep.stats()
            );
        }
        stop.store(true, Ordering::Relaxed);
    });
    for pid in pids {
        let st = reap(pid);
        assert!(
            libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
            "writer failed: {st:#x}"
        );
    }
    let expect: Vec<_> = (0..writers).map(|id| (id, per)).collect();
    verify(&log.lock().unwrap(), &expect);
    assert_eq!(ep.stats().rejected, 0, "{:?}", ep.stats());
}
