//! Shared-memory active messages between processes (Lumetta & Culler, IPPS/SPDP
//! 1998; `papers/004_…`).
//!
//! An [`Endpoint`] owns a request queue in shared memory: a ring of slots that
//! senders claim (the paper's claim algorithms, [`Claim`]) and the owner
//! [`poll`](Endpoint::poll)s, running the registered handler of every message.
//! Other processes of the same user [`connect`](Peer::connect) to it by name
//! and send it messages of a handler index and up to eight words, with up to
//! 8 KB of bulk data. A handler may reply once; [`Endpoint::request`] (or
//! [`Peer::request`], for a process without an endpoint of its own) sends a
//! request and waits for its reply.
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
//! # Peers are untrusted: what msgq defends against, and what it cannot
//!
//! Every process that may connect (any process of the endpoint's user) can
//! write every byte of every shared mapping it holds, at any moment, fork, be
//! killed, or connect and do nothing. Against that:
//!
//! - **Nothing crashes, nothing hangs.** No receiver or sender ever faults
//!   (the shared objects are sealed memfds whose size cannot change: no
//!   SIGBUS), panics or runs into undefined behaviour, whatever the bytes; no
//!   call blocks past its deadline ([`Options::timeout`]): every wait, claim
//!   loop and claim lock is bounded, [`Endpoint::poll`] never blocks and takes
//!   at most one ring's worth per call, and a reply never waits.
//! - **Queues heal.** Once a hostile peer stops writing (or dies), no word it
//!   left behind wedges a queue: the receiver puts back a tail that no honest
//!   sender leaves (honest tails lie within a ring of the head) and its head
//!   hint (the head it publishes for senders), clears slot words no honest
//!   sender writes, and revokes tickets left unpublished for a lease;
//!   senders publish only within a ring of the receiver's head hint, so a
//!   word left for a lap the ring has not reached takes no message; a claim
//!   lock that shows no hand-over for a lock lease (100 leases, at least
//!   100 ms) is reset and the claim made without it. Every honest message
//!   sent after the receiver's first poll that follows the peer's end is
//!   delivered exactly once, in per-sender order, to the handler it names
//!   (a message sent while the peer still wrote may be lost or delayed).
//! - **Identity comes from the kernel, not from the segment.** An endpoint's
//!   name is an abstract Unix socket, bound exclusively (a second creator gets
//!   [`Error::Exists`]) and gone when its owner exits. A connecting process is
//!   named by `SO_PEERCRED` ([`Message::sender`]), processes of other users are
//!   refused (and a client refuses a server of another user), and each
//!   connection gets its own memory area, shared by the endpoint and that
//!   process only. A message's content lives there — written by its sender
//!   *before* it claims a slot, so claiming is publishing and there is no
//!   half-claimed slot whose owner the receiver would have to judge alive or
//!   dead — and a slot only names it; a slot that names a record which does
//!   not hold it is rejected. Replies travel on the requester's connection
//!   only, so no request can point them elsewhere.
//! - **Memory stays bounded**: at most [`Options::max_peers`] connections
//!   (further connects are refused until one closes), each freed when its
//!   process closes it or exits.
//!
//! What it cannot prevent:
//! - the connection areas are private only against processes that cannot
//!   open this process's `/proc/<pid>/fd`: a process of the same user can
//!   (the kernel asks for the rights that `ptrace` needs to read), unless
//!   this process is not dumpable (`PR_SET_DUMPABLE` 0) or the peer is
//!   confined (another pid namespace, a seccomp or Landlock sandbox). Such a
//!   peer can read and write every connection's records, as a peer can the
//!   ring;
//! - a peer can always drop or delay its own messages, flood the queue (it
//!   competes for the same slots), or connect and hold a connection;
//! - while a peer writes the shared ring it can destroy or delay messages in
//!   transit (their slot words), and while it writes the claim lock it can
//!   slow senders to one lock lease per send; it cannot read or change their
//!   content, which is in the senders' own areas;
//! - [`Claim::PosixRobust`] trusts every peer and is refused unless
//!   [`Options::trust_peers`](Options#structfield.trust_peers) is set: glibc keeps its robust list's pointers
//!   inside the shared mutex and follows them on unlock, so a peer that writes
//!   them makes the unlocker write anywhere in its own memory.
//!
//! # The protocol
//!
//! Per message (see [`ring`] for the details and [`word`] for the words'
//! state tables): the sender claims a *record* in its connection's area and,
//! with bulk data, a *block* there; writes the message; takes a ticket `t`
//! and publishes with one CAS of slot `t` from `FREE(t)` to
//! `READY(connection, record, t)` — lock-free (paper Figure 3: having seen the
//! slot free, a CAS of the tail, then the slot's) or under a process-shared
//! claim lock (Figure 2: TAS, TATAS, Ticket, Anderson, or the POSIX robust
//! mutex). The receiver, at its head, checks that the record names that
//! ticket, copies it out, frees record, block and slot, and runs the handler.
//! A sender killed before publishing leaves a ticket the receiver revokes
//! after [`Options::lease`]; one killed after publishing has delivered.
//!
//! # Waiting: busy polling or the doorbell
//!
//! The paper's receivers busy-poll, which is fastest when sender and receiver
//! each have a core and a loss when they share one: the poller holds the core
//! the sender needs. So each endpoint has a *doorbell* ([`ring::Doorbell`]), a
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
//! lease while a ticket is in flight) so that revocation still happens.
//! A requester waits on its own doorbell and on its connection's *reply bell*
//! at once ([`crate::sched::park_shared_any`]), so a request to it and the
//! reply it waits for both wake it.
//!
//! Senders wait too: for space, when the ring is full or their connection's
//! records are all in flight. The endpoint has a *space bell*
//! ([`ring::SpaceBell`]) that a [`Peer::send`] sleeps on after a few backoff
//! steps, and that the receiver rings after freeing slots ([`Endpoint::poll`]
//! does, every 32 freed slots and when it ends) — a fence and a load, and a
//! system call only when a sender announced that it sleeps. A sender sleeps
//! at most 10 ms at a time (a safety net against a receiver that died or a
//! peer that scribbles on the bell). An [`Endpoint`] that sends keeps polling
//! its own queue while it waits (§3.1's deadlock avoidance), so it does not
//! sleep on a peer's bell.
//!
//! # What the defences cost (measured)
//!
//! Measured on 2 shared cores (2026-12-01, release builds, this design against
//! the shared-memory design before it, the two binaries run alternately):
//!
//! - Round trips (`mpsync repro lc98-logp --quick --trials 5`, 3 alternating
//!   runs): across cores 0.8× the old time (lock-free claim 1.07–1.13 µs
//!   against 1.26–1.48 µs; doorbell 1.10–1.14 against 1.30–1.53); on one
//!   core about equal with the doorbell (4.7–5.5 against 4.8–6.9 µs) and
//!   ~1.1× with busy polling (26.9–29.8 against 23.9–31.5 µs).
//! - Throughput (`mpsync repro lc98-stress --quick --scale 3 --trials 3
//!   --threads 1,7`, 3 alternating runs): one lock-free writer ~1.25× the old
//!   time (0.136–0.162 s against 0.116–0.120 s — the private record is a
//!   second cache line per message), seven ~1.05×; POSIX-robust claims about
//!   equal; TAS and TATAS claims ~2× the old time at seven writers
//!   (0.16–0.26 s against 0.09–0.12 s; no lock was broken in those runs, the
//!   cause is not yet known). Ticket and Anderson claims collapse under
//!   oversubscription in both designs, as FIFO spin locks do.

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
pub use endpoint::{Ctx, Endpoint, Message, Peer, PeerStats, Reply, Stats};
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
