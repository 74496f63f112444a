//! Shared-memory active messages between processes (Lumetta & Culler, IPPS/SPDP
//! 1998; `papers/004_…`).
//!
//! An [`Endpoint`] owns a named shared-memory segment holding two destination
//! queues — requests and replies — each a ring of packets (a handler index and
//! up to eight words, one packet per cache-line pair) and a ring of bulk blocks
//! (up to 8 KB each). Other processes [`connect`](Endpoint::connect) to it by
//! name and send it messages; the owner [`poll`](Endpoint::poll)s, which runs
//! the registered handler of every arrived message. A handler may reply once;
//! [`Endpoint::request`] sends a request and polls until its reply arrives.
//!
//! How senders claim a slot in the receiver's queue is chosen per endpoint
//! ([`Claim`]): under one of mpsync's process-shared spin locks (TAS, TATAS,
//! Ticket, Anderson), under a POSIX process-shared *robust* mutex, or with the
//! paper's lock-free claim (CAS on the tail, then CAS on the packet's type word;
//! bulk block first).
//!
//! Beyond the paper, peers are untrusted: everything read from the segment is
//! validated (the header's magic, version, geometry and checksum when opening;
//! every packet's lap, state, argument count, kind, bulk ticket and length when
//! delivering), so a peer that scribbles on the segment can make its messages
//! fail, never crash or hang the receiver. A sender killed between claiming a
//! slot and publishing it does not wedge the queue: the receiver frees a slot
//! whose claimant process no longer exists, and revokes a ticket left unclaimed
//! for a lease ([`Options::lease`]) — see [`ring`] and [`word`] for the protocol.
//! What a dead process cannot be recovered from: being killed *inside* a spin
//! lock's critical section (a few instructions) leaves that lock held forever —
//! only [`Claim::PosixRobust`] and [`Claim::LockFree`] survive that.
//!
//! ```no_run
//! use mpsync::msgq::{Endpoint, Options};
//!
//! // Process A (the server):
//! let mut server = Endpoint::create("calc", Options::default())?;
//! server.register(1, |cx, msg| cx.reply(&[msg.args()[0] * 2]))?;
//! loop {
//!     server.wait(std::time::Duration::from_secs(1)); // poll; sleep while idle
//! #   break;
//! }
//! // Process B (a client):
//! let mut client = Endpoint::create("client-1", Options::default())?;
//! let calc = client.connect("calc")?;
//! let reply = client.request(&calc, 1, &[21], None)?;
//! assert_eq!(reply.args(), [42]);
//! # Ok::<(), mpsync::msgq::Error>(())
//! ```
//!
//! Everything lives in a `shm_open` object `/dev/shm/mpsync.<name>` created
//! with mode 0600 (so only the same user can connect) and unlinked when the
//! owning [`Endpoint`] is dropped. All processes must share a pid namespace
//! (liveness of a claimant is checked by pid).
//!
//! # Waiting: busy polling or the doorbell
//!
//! The paper's receivers busy-poll, which is fastest when sender and receiver
//! each have a core and a loss when they share one: the poller holds the core
//! the sender needs. So each segment has a *doorbell* ([`ring::Doorbell`]), a
//! process-shared futex word that a waiting receiver ([`Endpoint::wait`],
//! [`Endpoint::request`]) sleeps on after a bounded spin ([`Options::spin`](Options#structfield.spin),
//! default up to 20 µs), parked through [`crate::sched::park_shared`]. Every
//! send rings it after publishing its message — a fence and a load, and a
//! system call only when the receiver announced that it sleeps (a Dekker pair,
//! loom-modelled in `tests/loom_msgq.rs`). The spin adapts: a spin that ends
//! in sleep halves the next one (down to none), one that finds a message
//! restores it, and one wait in 16 probes with the full spin; so cross-core
//! pairs keep busy-polling latency and same-core pairs go straight to sleep.
//! `spin: None` busy-polls as the paper does. A sleep is capped (20 ms, or a
//! quarter lease while a ticket is in flight) so that recovery from a sender
//! that died between publishing and ringing still happens.
//!
//! Senders wait too: for space, when the ring is full. Each queue has a
//! second bell, its *space bell* ([`ring::SpaceBell`], segment layout
//! version 3), that a [`Peer::send`] finding the ring full sleeps on after a
//! few backoff steps, and that the receiver rings after freeing slots
//! ([`Endpoint::poll`] does, every 32 freed slots and when it ends) — a fence
//! and a load, and a system call only when a sender announced that it sleeps.
//! The same Dekker pair (announce, look at the slot again, park on the
//! announced value; free, fence, look at the bell), loom-modelled with
//! senders that sleep more than once and two sleepers at a time. A sender
//! sleeps at most 10 ms at a time (a safety net against a receiver that died
//! or a peer that scribbles on the bell) and only while it waits for the
//! receiver (a slot whose previous lap is not yet delivered, a bulk block
//! not yet copied out); waits that need the sender's own recovery checks
//! keep spinning. An [`Endpoint`] that sends keeps polling its own queues
//! while it waits (§3.1's deadlock avoidance), so it does not sleep on a
//! peer's bell.
//!
//! # What was measured (issue 16, 2-core shared machine; ratios within a run)
//!
//! - Bulk throughput (`mpsync run lc98-bandwidth --trials 3`, cross-core,
//!   8 KB blocks): the copies into and out of the segment went through a
//!   `memcpy` call per 8-byte word (a variable-length `copy_from_slice` of
//!   each `chunks(8)` piece; `perf` put a third of all samples in
//!   `__memmove_avx512_unaligned_erms`). Word-wise copies of `chunks_exact(8)`
//!   took the rate from 849–1897 MB/s to 3950–6850 MB/s on the machine when
//!   it was quiet (load ≈ 2; memcpy of 8 KB blocks in one process 11–14 GB/s
//!   in the same runs). With the machine loaded (load ≈ 15, other builds
//!   running) both versions measured 700–3400 MB/s, and at load ≈ 24 the new
//!   one 68–1330 MB/s (the 201–368 MB/s first reported for this experiment
//!   are in that range): then the scheduler, not the copy, sets the rate —
//!   client and server each get a sliver of their core, and a full ring
//!   waits for the descheduled side. `lc98-bandwidth` now also reports the
//!   server's time per block inside its delivering polls (about 1 µs for the
//!   lock-free claim in that loaded run, i.e. ~8 GB/s if it were the only
//!   cost). There is still one handshake per 8 KB block
//!   (the paper's design) and two copies (sender → segment → receiver's
//!   buffer): the receiver copies out because a peer may rewrite the segment
//!   at any time, and a handler given a slice of shared memory would race it.
//! - Round trips with the doorbell (`mpsync run lc98-logp --trials 3`,
//!   load ≈ 14): same-core, the busy-polling lock-free claim 62.0 µs, with
//!   the doorbell 26.5 µs, a Unix-domain socket 35.5 µs (doorbell 0.75× the
//!   socket; `--quick` at load ≈ 16: 19.7 vs 28.3 µs, 0.70×); cross-core,
//!   busy 4.64 µs, doorbell 3.30 µs, socket 198 µs (`--quick`: 1.37, 1.40,
//!   212 µs). Checking the bell costs each send a fence and a load: lock-free
//!   o_s cross-core 0.26 µs before, 0.28 µs after (`--quick`, two
//!   interleaved runs of each binary).
//! - Recovery after a SIGKILL mid-claim (`tests/msgq.rs`, `sigkill_mid_claim`):
//!   the latency from the kill until the backlog is clear splits into the
//!   kernel finishing the kill (the killed process must be scheduled to die;
//!   until then it is alive and may still write) and the receiver's own
//!   detection after the death. With `MPSYNC_MSGQ_KILLS=2000 cargo test
//!   --release -p mpsync --test msgq sigkill_mid_claim -- --nocapture
//!   --test-threads=1` on the loaded machine (load ≈ 15): lock-free claim
//!   p50 30 µs, p99 18.6 ms in all, of which the kernel's kill p99 18.6 ms
//!   and the receiver's part p99 1.0 ms; POSIX mutex p99 20.1 ms, kernel
//!   20.1 ms, receiver 0.25 ms. So the 10 ms p99 target is missed by the
//!   kernel's time to kill a process on a busy machine, which is not ours to
//!   shorten (a process with SIGKILL pending may still run a few user
//!   instructions, so its slot cannot be taken before it is gone). The
//!   receiver's part is at most one [`Options::lease`] (default 1 ms: an
//!   unclaimed ticket is revoked a lease after it is first seen stuck; a dead
//!   claimant is found by a liveness check every quarter lease); a shorter
//!   lease shortens it, at the price of live but preempted senders retrying
//!   with new tickets more often.
//! - Many-to-one (`mpsync run lc98-stress --quick --scale 3 --threads 1,7
//!   --trials 5`, 300,000 one-word messages, load ≈ 6): with 7 writers the
//!   lock-free claim took 0.121 s and the POSIX robust mutex 0.186 s, a ratio
//!   of 1.54× against the 3× target (ten other runs under heavier load, load ≈
//!   7–12: 0.73–1.34×; two more at load 3–7: 1.74× and 1.04×). The receiver was on a CPU only 13–19% of each 7-writer
//!   run, for every claim, spending 0.08–0.15 µs of CPU per message, while with
//!   1 writer it was on a CPU ~80–90% of the run: 8 processes share 2 cores,
//!   and no writer ever sleeps (one waiting for space spins, yielding now and
//!   then), so the receiver's share of the CPU, not the claim, sets the rate
//!   (whether the ring was full how often was not measured). Linux's process-shared mutex is a user-space CAS with futex
//!   sleeps under contention, not the Solaris 2.5 mutex the paper measured 4.6×
//!   slower. Letting lock-free senders test for space before taking a ticket
//!   was tried (A/B, interleaved, 7 runs each) and changed nothing beyond the
//!   noise.
//! - Many-to-one with senders that sleep on the space bell (same command,
//!   binaries before and after back to back, three pairs in alternating
//!   order, the machine heavily loaded by other helpers' builds, load ≈
//!   9–14, so the receiver was on a CPU only 4–18% of every run, 1 writer or
//!   7): with 7 writers the lock-free claim took 0.579, 0.491 and 0.606 s
//!   before, 0.415, 0.395 and 0.407 s after; the POSIX robust mutex 0.602,
//!   0.573 and 0.727 s before, 0.478, 0.374 and 0.372 s after — a ratio of
//!   1.04×, 1.17× and 1.20× before, 1.15×, 0.95× and 0.91× after (and
//!   0.80× in a fourth run after, load ≈ 15): about 1×, a factor of 3 short
//!   of the 3× target. Both claims got faster, and the spin locks most (ticket at 7 writers 1.50 and 3.21 s before, 0.31 and
//!   0.35 s after; Anderson once 104 s, extrapolated from a capped run,
//!   before, 0.33 s after): a locked claim's senders sleep on the space bell
//!   just as lock-free ones do (the receiver's rings found sleeping writers
//!   about 1,000 times per 300,000-message run with every locked claim, but
//!   only 13–126 times with the lock-free claim; why its writers sleep so
//!   rarely was not measured). Revoked tickets do not explain
//!   the lock-free claim's rate: none at 7 writers in that fourth run (a
//!   ticket held by a sleeping lock-free writer and not claimed within a
//!   lease would stall the receiver for that lease; `lc98-stress` now
//!   reports them). So the space bell removes the spinning writers' cost from every
//!   claim alike, and the ratio between claims stays near 1: on Linux the
//!   POSIX mutex is a user-space CAS with futex sleeps, not the Solaris 2.5
//!   mutex the paper measured 4–5× slower, and what sets the rate on this
//!   machine is the receiver's share of the CPU, which the other helpers'
//!   load, not the writers, kept at 4–18%.
//! - iceoryx2 as a peer in `lc98-logp` and `lc98-stress`: iceoryx2 0.10.0
//!   (84 crates including bindgen, clang-sys and cc) builds here, but a
//!   release build of a bare crate depending on it took 12 min 56 s on the two
//!   shared cores (load ≈ 14) — far over the 3 minutes of extra CI compile
//!   this project allows — so it is an optional dependency of the harness,
//!   behind its cargo feature `iceoryx2`, not in the default build nor in CI:
//!   `cargo run --release -p mpsync-cli --features iceoryx2 -- run lc98-logp`.
//!   The peer is two publish-subscribe services (ping, pong) carrying the
//!   same 64-byte message in loaned samples, busy polling like the msgq
//!   runs. Measured 2026-11-26 on the 2 cores shared with other builds (no
//!   quiet-machine figures), four `lc98-logp` runs (trimmed means of 5, 7, 7
//!   and 7 trials), lock-free RTT against iceoryx2's: cross-core 12.0/29.4 µs
//!   = 0.41× (load 15–19), 4.70/4.06 µs = 1.16× (load 10–13), 3.25/3.54 µs =
//!   0.92× (load 7–13), 2.11/2.99 µs = 0.70× (load 5–7; trials 1.5–4.0
//!   against 2.1–3.7 µs); same-core 0.70×, 0.68×, 0.72×, 0.76× (e.g. 31.5
//!   against 41.4 µs). So the target (≤ 1.0× iceoryx2's) held in 3 of 4 runs
//!   cross-core, the miss within the noise of that load (fastest trials 2.21
//!   against 2.32 µs), and in every run same-core.

pub mod ring;
pub mod word;

#[cfg(not(loom))]
mod endpoint;
#[cfg(not(loom))]
pub(crate) mod memfd;
#[cfg(not(loom))]
pub(crate) mod rendezvous;
#[cfg(not(loom))]
mod segment;

#[cfg(not(loom))]
pub use endpoint::{Ctx, Endpoint, Message, Peer, Reply, Stats};
#[cfg(not(loom))]
pub use rendezvous::Credentials;
#[cfg(not(loom))]
pub use segment::validate_name;

use std::time::Duration;

/// How senders claim a slot in a receiver's queue (paper 004 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Claim {
    /// §3.2: CAS on the tail, then CAS on the packet's type word.
    LockFree,
    /// Test-and-set spin lock ([`crate::lock::Tas`]).
    Tas,
    /// Test-and-test-and-set with backoff ([`crate::lock::TasB`]).
    Tatas,
    /// Ticket lock, both counters on one line ([`crate::lock::Ticket`]).
    Ticket,
    /// Anderson's array lock with 16 slots ([`crate::lock::AndersonN`]): at
    /// most 16 senders may wait for one queue at once.
    Anderson,
    /// A POSIX process-shared robust mutex (`pthread_mutex_t`): a holder's
    /// death is reported to the next locker, which repairs the tail.
    PosixRobust,
}

impl Claim {
    /// All six, in the paper's table order.
    pub const ALL: [Claim; 6] = [
        Claim::Tas,
        Claim::Tatas,
        Claim::Ticket,
        Claim::Anderson,
        Claim::PosixRobust,
        Claim::LockFree,
    ];

    /// The short name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Claim::LockFree => "lock-free",
            Claim::Tas => "tas",
            Claim::Tatas => "tatas",
            Claim::Ticket => "ticket",
            Claim::Anderson => "anderson",
            Claim::PosixRobust => "posix-mutex",
        }
    }

    /// Parses [`name`](Self::name).
    pub fn parse(s: &str) -> Result<Self, Error> {
        Self::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "unknown claim algorithm {s:?}; expected one of {}",
                    Self::ALL.map(|c| c.name()).join(", ")
                ))
            })
    }

    pub(crate) fn code(self) -> u32 {
        match self {
            Claim::LockFree => 0,
            Claim::Tas => 1,
            Claim::Tatas => 2,
            Claim::Ticket => 3,
            Claim::Anderson => 4,
            Claim::PosixRobust => 5,
        }
    }

    pub(crate) fn from_code(c: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.code() == c)
    }
}

/// An endpoint's geometry and behaviour.
#[derive(Debug, Clone)]
pub struct Options {
    /// Claim algorithm for both queues.
    pub claim: Claim,
    /// Slots of the request ring (a power of two, 2..=65536; default 256).
    pub packets: u32,
    /// Bulk blocks per connection, in the connection's own area (1..=1024;
    /// default 16): the bulk messages one connection may have in flight.
    pub blocks: u32,
    /// Bytes per bulk block (a multiple of 128, 128..=8192; default 8192),
    /// for requests and replies.
    pub block_bytes: u32,
    /// Records per connection (1..=1024; default 64): the messages one
    /// connection may have in flight (published, not yet delivered).
    pub in_flight: u32,
    /// Connections the endpoint serves at once (1..=4096; default 64);
    /// further connects are refused until one closes. Each costs a
    /// connection area (records, blocks and the reply ring: about
    /// `in_flight × 128 + (blocks + 4) × block_bytes` bytes, 168 KiB by
    /// default, touched pages only).
    pub max_peers: u32,
    /// How long a ticket may stay handed out but unpublished before the
    /// receiver revokes it (default 1 ms); a claim lock that shows no
    /// hand-over for 100 leases (at least 100 ms) is broken.
    pub lease: Duration,
    /// How long `send` waits for space and `request` for its reply (default 10 s).
    pub timeout: Duration,
    /// How long a waiting receiver ([`Endpoint::wait`], [`Endpoint::request`])
    /// keeps polling before it sleeps on its doorbell, to be woken by the next
    /// sender (default 20 µs; at most 1 s). `None`: it never sleeps, and
    /// busy-polls as the paper's receivers do (yielding the processor now and
    /// then) — the lowest latency when sender and receiver have cores of
    /// their own, and a loss when they share one.
    pub spin: Option<Duration>,
    /// Whether every process that may connect is trusted not to write the
    /// shared memory maliciously (default false). Required for
    /// [`Claim::PosixRobust`], on both sides: glibc keeps the robust list's
    /// pointers inside the shared mutex and follows them on unlock, so a
    /// peer that writes them makes the unlocker write anywhere in its own
    /// memory. The other claims defend against hostile peers and ignore it.
    pub trust_peers: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            claim: Claim::LockFree,
            packets: 256,
            blocks: 16,
            block_bytes: 8192,
            in_flight: 64,
            max_peers: 64,
            lease: Duration::from_millis(1),
            timeout: Duration::from_secs(10),
            spin: Some(Duration::from_micros(20)),
            trust_peers: false,
        }
    }
}

impl Options {
    /// These options with claim algorithm `c`.
    pub fn claim(mut self, c: Claim) -> Self {
        self.claim = c;
        self
    }

    /// These options with [`trust_peers`](Options#structfield.trust_peers)
    /// set to `yes` (needed for [`Claim::PosixRobust`]).
    pub fn trust_peers(mut self, yes: bool) -> Self {
        self.trust_peers = yes;
        self
    }

    /// These options with spin-then-sleep waiting (`Some(spin)`) or busy
    /// polling (`None`); see the `spin` field.
    pub fn spin(mut self, spin: Option<Duration>) -> Self {
        self.spin = spin;
        self
    }

    /// Checks the geometry; says what was wrong and what would be right.
    pub fn validate(&self) -> Result<(), Error> {
        if !self.packets.is_power_of_two() || !(2..=65536).contains(&self.packets) {
            return Err(Error::InvalidArgument(format!(
                "packets = {}: must be a power of two in 2..=65536 (e.g. 256)",
                self.packets
            )));
        }
        if !(1..=1024).contains(&self.blocks) {
            return Err(Error::InvalidArgument(format!(
                "blocks = {}: must be in 1..=1024 (e.g. 16)",
                self.blocks
            )));
        }
        if !(1..=1024).contains(&self.in_flight) {
            return Err(Error::InvalidArgument(format!(
                "in_flight = {}: must be in 1..=1024 (e.g. 64)",
                self.in_flight
            )));
        }
        if !(1..=4096).contains(&self.max_peers) {
            return Err(Error::InvalidArgument(format!(
                "max_peers = {}: must be in 1..=4096 (e.g. 64)",
                self.max_peers
            )));
        }
        if self.claim == Claim::PosixRobust && !self.trust_peers {
            return Err(Error::InvalidArgument(
                "claim = PosixRobust trusts every peer (glibc follows list pointers kept inside                  the shared mutex); set trust_peers = true only if every process that may                  connect is trusted, or choose another claim (e.g. LockFree)"
                    .into(),
            ));
        }
        if !self.block_bytes.is_multiple_of(128) || !(128..=8192).contains(&self.block_bytes) {
            return Err(Error::InvalidArgument(format!(
                "block_bytes = {}: must be a multiple of 128 in 128..=8192 (e.g. 8192)",
                self.block_bytes
            )));
        }
        if self.lease < Duration::from_micros(4) || self.lease > Duration::from_secs(60) {
            return Err(Error::InvalidArgument(format!(
                "lease = {:?}: must be between 4 µs and 60 s (e.g. 1 ms)",
                self.lease
            )));
        }
        if let Some(s) = self.spin
            && s > Duration::from_secs(1)
        {
            return Err(Error::InvalidArgument(format!(
                "spin = {s:?}: must be at most 1 s (e.g. 20 µs), or None to busy-poll"
            )));
        }
        Ok(())
    }
}

/// What went wrong, as a value.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A parameter supplied by the caller: what was wrong and what would be right.
    InvalidArgument(String),
    /// An endpoint of that name exists and its owner is alive.
    Exists(String),
    /// No endpoint of that name.
    NotFound(String),
    /// A system call failed.
    Os(String, std::io::Error),
    /// The segment failed validation (bad magic, version, geometry or checksum),
    /// or a peer overwrote a slot this process owned.
    Corrupt(String),
    /// Waited longer than [`Options::timeout`].
    Timeout(String),
    /// The message names no registered handler, or a handler broke a rule.
    Handler(String),
    /// The claim lock refused (a robust mutex not recoverable).
    Lock(String),
    /// A connection or a shared object was refused: the other side is another
    /// user, is full, speaks another version, or said no (its reason); or a
    /// received descriptor is not a sealed shared-memory object.
    Refused(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::InvalidArgument(m)
            | Error::Exists(m)
            | Error::NotFound(m)
            | Error::Corrupt(m)
            | Error::Timeout(m)
            | Error::Handler(m)
            | Error::Lock(m)
            | Error::Refused(m) => f.write_str(m),
            Error::Os(what, e) => write!(f, "{what}: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Os(_, e) => Some(e),
            _ => None,
        }
    }
}
