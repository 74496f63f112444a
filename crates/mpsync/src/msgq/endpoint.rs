//! Endpoints, peers and handlers: the active-message API over [`super::ring`],
//! the segments of [`super::segment`] and the rendezvous of
//! [`super::rendezvous`].

use super::memfd::SharedMap;
use super::rendezvous::{self, ConnHandler, Connection, Credentials, Listener, Offer};
use super::ring::{
    Blocked, Doorbell, Event, Head, Incoming, Kind, MAX_ARGS, Outgoing, SendStats, Sender,
};
use super::segment::{
    ConnArea, ConnGeometry, Geometry, MAX_MAP, REPLY_SLOTS, Segment, validate_name,
};
use super::word;
use super::{Claim, Error, Options};
use crate::util::backoff::Backoff;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Handler indices are below this.
pub const MAX_HANDLERS: usize = 1024;
/// Most problems kept for [`Endpoint::take_problems`].
const MAX_PROBLEMS: usize = 64;
/// Longest single sleep on the doorbell when nothing is in flight: a sender
/// that dies between publishing and ringing delays its message by at most this.
const SLEEP_CAP: Duration = Duration::from_millis(20);

/// Longest single sleep of a sender on a full ring's space bell: a safety net
/// against a receiver that dies (or a peer that scribbles on the bell) — the
/// sender looks again at least this often, and checks its timeout.
const SPACE_SLEEP_CAP: Duration = Duration::from_millis(10);

/// Wait steps a sender spins (backing off) on a full ring before it sleeps on
/// the space bell: about 25 µs of backoff, the time a busy receiver takes to
/// free a few dozen slots.
const SPINS_BEFORE_SLEEP: u32 = 6;

/// The receiver rings the space bell after every this many freed slots
/// within one poll, as well as when the poll ends.
const WAKE_EVERY: usize = 32;

/// One in this many waits spins for the full [`Options::spin`](Options#structfield.spin) whatever the
/// adaptive budget says, to find out whether spinning pays again.
const PROBE_EVERY: u32 = 16;

/// The hello a receiver sends a connecting process: "MQv4", the layout
/// version, the connection's index, the claim's code and the slots of the
/// request ring (little-endian `u32`s). The geometry travels here, from the
/// owner's own memory, not in the segment's header: every connected peer can
/// write the header, and a connector that believed it could be kept out, or
/// sent into the wrong slots, long after that peer is gone.
const HELLO_MAGIC: u32 = u32::from_le_bytes(*b"MQv4");
/// Bytes of the hello.
const HELLO_LEN: usize = 20;

/// How long a connect waits for the endpoint's answer: at most this, and at
/// least [`CONNECT_MIN`] whatever the caller's timeout (a zero send timeout
/// must not make every connect fail).
const CONNECT_WAIT: Duration = Duration::from_secs(5);
/// See [`CONNECT_WAIT`].
const CONNECT_MIN: Duration = Duration::from_millis(200);

/// Where a waiting receiver is: polling (since when, for how long at most),
/// and how often it found nothing.
#[derive(Debug, Default)]
struct Idle {
    polls: u32,
    since: Option<Instant>,
    budget: Duration,
}

/// A message as a handler sees it.
#[derive(Debug)]
pub struct Message<'a> {
    handler: u16,
    sender: Credentials,
    args: &'a [u64],
    bulk: Option<&'a [u8]>,
    is_request: bool,
}

impl Message<'_> {
    /// The handler index it was sent to.
    pub fn handler(&self) -> u16 {
        self.handler
    }
    /// The argument words.
    pub fn args(&self) -> &[u64] {
        self.args
    }
    /// The bulk data, if any.
    pub fn bulk(&self) -> Option<&[u8]> {
        self.bulk
    }
    /// The process that opened the connection this message came through, as
    /// the kernel names it (`SO_PEERCRED` when it connected) — never a word
    /// of the message. A forked child sending through a connection its
    /// parent opened is named by the parent's pid.
    pub fn sender(&self) -> Credentials {
        self.sender
    }
    /// The pid of [`sender`](Self::sender).
    pub fn sender_pid(&self) -> u32 {
        self.sender.pid
    }
    /// Whether the sender waits for a reply.
    pub fn is_request(&self) -> bool {
        self.is_request
    }
}

/// A reply received by [`Endpoint::request`] or [`Peer::request`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    args: Vec<u64>,
    bulk: Option<Vec<u8>>,
}

impl Reply {
    /// The reply's argument words.
    pub fn args(&self) -> &[u64] {
        &self.args
    }
    /// The reply's bulk data, if any.
    pub fn bulk(&self) -> Option<&[u8]> {
        self.bulk.as_deref()
    }
}

/// Counters of an endpoint.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Messages whose handler ran (requests and one-way), and replies taken.
    pub delivered: u64,
    /// Tickets revoked because they stayed unpublished for a lease.
    pub revoked: u64,
    /// Slots rejected by validation (written by no honest sender).
    pub rejected: u64,
    /// Messages naming no registered handler.
    pub unknown_handler: u64,
    /// Replies nobody waited for (late, or for another token).
    pub stray_replies: u64,
    /// Replies dropped: the requester's reply ring was full or its
    /// connection closed.
    pub replies_dropped: u64,
    /// Tickets this endpoint's sends gave up and took again.
    pub send_retries: u64,
    /// Messages this endpoint sent that a peer destroyed in the ring (their
    /// records taken back).
    pub lost: u64,
    /// Claim locks this endpoint's sends found stuck for a lock lease and broke.
    pub lock_breaks: u64,
    /// Times the receiver found the tail where no honest sender leaves it
    /// and put it back.
    pub tail_repairs: u64,
    /// Sleeps on the doorbell that a sender ended by ringing.
    pub wakeups: u64,
    /// Sleeps on the doorbell that ended by their time limit.
    pub sleep_timeouts: u64,
    /// Rings of this endpoint's space bell that found senders asleep on a
    /// full queue (and woke them).
    pub sender_wakeups: u64,
    /// Connections accepted.
    pub peers_opened: u64,
    /// Connections that ended (their process closed them or exited).
    pub peers_closed: u64,
    /// Connections refused (the endpoint had `max_peers` already, or their
    /// area could not be made).
    pub peers_refused: u64,
}

/// Counters of a [`Peer`]'s sends (of every thread that sends through it).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PeerStats {
    /// Messages sent (one-way and requests).
    pub sent: u64,
    /// Tickets given up because the slot moved on (revoked while a sender
    /// was slow) and taken again.
    pub send_retries: u64,
    /// Messages a peer destroyed in the ring after they were sent (their
    /// records taken back).
    pub lost: u64,
    /// Claim locks found stuck for a lock lease and broken.
    pub lock_breaks: u64,
    /// Replies nobody waited for (late, or for another token).
    pub stray_replies: u64,
}

/// [`PeerStats`] as a `Peer` keeps them (several threads send at once).
#[derive(Debug, Default)]
struct PeerCounters {
    sent: AtomicU64,
    send_retries: AtomicU64,
    lost: AtomicU64,
    lock_breaks: AtomicU64,
    stray_replies: AtomicU64,
}

/// The client's state of a connection's reply ring.
#[derive(Debug, Default)]
struct ReplyState {
    head: u64,
    next_token: u64,
}

/// A connection to an endpoint, for sending (and, through
/// [`Peer::request`] or [`Endpoint::request`], for requests and their replies).
/// Dropping it closes the connection: the endpoint frees what it kept for it.
pub struct Peer {
    name: String,
    /// Kept open for as long as the peer lives: the endpoint's acceptor sees
    /// it close when this process is gone.
    conn: Connection,
    seg: Segment,
    area: ConnArea,
    sid: u32,
    env: RealEnv,
    timeout: Duration,
    /// Where this process looks for a free record first (the `sync` shim's
    /// atomic, as `ring::Sender` takes it: perturbed in the chaos build).
    hint: crate::sync::AtomicU32,
    reply: Mutex<ReplyState>,
    counters: PeerCounters,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("name", &self.name)
            .field("claim", &self.seg.geometry().claim)
            .field("connection", &self.sid)
            .field("server", &self.conn.server())
            .finish_non_exhaustive()
    }
}

/// `Env` of real endpoints: `CLOCK_MONOTONIC` and the configured lease.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RealEnv {
    lease_ns: u64,
}

impl super::ring::Env for RealEnv {
    fn now_ns(&self) -> u64 {
        crate::util::clock::now_ns()
    }
    fn lease_ns(&self) -> u64 {
        self.lease_ns
    }
}

type Handler = dyn FnMut(&mut Ctx<'_>, &Message<'_>) -> Result<(), Error> + Send;

/// One accepted connection, as the receiver keeps it.
#[derive(Debug)]
struct ServerConn {
    area: ConnArea,
    cred: Credentials,
    /// The next reply number (the reply ring's tail, in our memory).
    reply_tail: u64,
    /// Set when the connection closed: the ticket the head must pass before
    /// nothing in the ring can name it any more.
    closing_at: Option<u64>,
}

/// What the acceptor thread tells the polling thread.
#[derive(Debug)]
enum ConnEvent {
    Opened {
        sid: u32,
        cred: Credentials,
        area: ConnArea,
    },
    Closed {
        sid: u32,
    },
}

/// Shared between an endpoint's polling thread and its acceptor thread.
#[derive(Debug)]
struct ConnShared {
    events: Mutex<Vec<ConnEvent>>,
    /// Set (Release) after an event is pushed; the poller swaps it (Acquire).
    dirty: AtomicBool,
    /// Connection indices nobody uses.
    free: Mutex<Vec<u32>>,
    /// Connections refused so far: a count, not an event, so that a peer
    /// that keeps connecting to a full endpoint whose owner does not poll
    /// costs no memory.
    refused: AtomicU64,
}

impl ConnShared {
    fn push(&self, ev: ConnEvent) {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(ev);
        // Release: the event (and the area it carries) before the flag; pairs
        // with the poller's Acquire swap.
        self.dirty.store(true, Ordering::Release);
    }
}

/// The acceptor thread's half of an endpoint: sets up each connection.
struct Acceptor {
    shared: Arc<ConnShared>,
    name: String,
    seg_fd: OwnedFd,
    /// The segment's geometry, as its creator chose it (sent in every hello).
    seg_geom: Geometry,
    /// Every connection's geometry but its index.
    geom: ConnGeometry,
    max_peers: u32,
}

impl ConnHandler for Acceptor {
    fn opened(&mut self, _cred: Credentials) -> Result<Offer, String> {
        let refuse = |shared: &ConnShared, why: String| {
            // Relaxed: a statistic, read by the poller.
            shared.refused.fetch_add(1, Ordering::Relaxed);
            Err(why)
        };
        let Some(sid) = self
            .shared
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
        else {
            return refuse(
                &self.shared,
                format!(
                    "endpoint {:?} is full: it serves {} connections (Options::max_peers)",
                    self.name, self.max_peers
                ),
            );
        };
        let give_back = |shared: &ConnShared| {
            shared
                .free
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(sid)
        };
        let area = match ConnArea::create(&self.name, ConnGeometry { sid, ..self.geom }) {
            Ok(a) => a,
            Err(e) => {
                give_back(&self.shared);
                return refuse(&self.shared, format!("endpoint {:?}: {e}", self.name));
            }
        };
        let fds = match (self.seg_fd.try_clone(), area.map().try_clone_fd()) {
            (Ok(a), Ok(b)) => vec![a, b],
            (Err(e), _) => {
                give_back(&self.shared);
                return refuse(&self.shared, format!("dup of the segment: {e}"));
            }
            (_, Err(e)) => {
                give_back(&self.shared);
                return refuse(&self.shared, format!("dup of the connection area: {e}"));
            }
        };
        let mut hello = Vec::with_capacity(HELLO_LEN);
        hello.extend_from_slice(&HELLO_MAGIC.to_le_bytes());
        hello.extend_from_slice(&super::segment::VERSION.to_le_bytes());
        hello.extend_from_slice(&sid.to_le_bytes());
        hello.extend_from_slice(&self.seg_geom.claim.code().to_le_bytes());
        hello.extend_from_slice(&self.seg_geom.packets.to_le_bytes());
        // Before the hello leaves: the poller must know the connection by the
        // time its first message can arrive.
        self.shared.push(ConnEvent::Opened {
            sid,
            cred: _cred,
            area,
        });
        Ok(Offer {
            hello,
            fds,
            key: sid as u64,
        })
    }

    fn closed(&mut self, key: u64) {
        self.shared.push(ConnEvent::Closed { sid: key as u32 });
    }
}

/// Everything of an endpoint but its handlers (so a running handler can use it).
struct Core {
    /// First, so that it is dropped first: stops the acceptor thread before
    /// the rest goes.
    _listener: Listener,
    shared: Arc<ConnShared>,
    seg: Segment,
    conns: Vec<Option<ServerConn>>,
    /// How many of `conns` are closing (waiting to be retired).
    closing: usize,
    name: String,
    env: RealEnv,
    options: Options,
    /// The adaptive spin budget (at most `spin`): halved by every spin that
    /// ended in sleep, back to `spin` by one that found a message.
    spin_now: Duration,
    waits: u32,
    head: Head,
    in_handler: bool,
    stats: Stats,
    problems: Vec<Error>,
    dropped_problems: u64,
    bulk_buf: Vec<u8>,
}

/// An active-message endpoint: owns a named segment with a request queue,
/// accepts connections to it (a thread of its own does), runs handlers when
/// polled, and sends to [`Peer`]s. Dropping it stops accepting, closes every
/// connection's area and frees the name.
///
/// Not `Sync`: one thread polls an endpoint (the queue has one receiver).
pub struct Endpoint {
    core: Core,
    handlers: Vec<Option<Box<Handler>>>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("name", &self.core.name)
            .field("claim", &self.core.seg.geometry().claim)
            .field(
                "handlers",
                &self.handlers.iter().filter(|h| h.is_some()).count(),
            )
            .field("peers", &self.peers())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// What a running handler may do: reply (once, to a request).
pub struct Ctx<'a> {
    core: &'a mut Core,
    reply_to: Option<(u32, u64)>,
    replied: bool,
}

impl std::fmt::Debug for Ctx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("endpoint", &self.core.name)
            .field("replied", &self.replied)
            .finish_non_exhaustive()
    }
}

impl Ctx<'_> {
    /// Replies to the request being handled with up to eight words, through
    /// the connection the request came by. Never waits: if the requester's
    /// reply ring is full (it does not take its replies) the reply is
    /// dropped with an error.
    pub fn reply(&mut self, args: &[u64]) -> Result<(), Error> {
        self.reply_inner(args, None)
    }

    /// Replies with words and bulk data.
    pub fn reply_bulk(&mut self, args: &[u64], data: &[u8]) -> Result<(), Error> {
        self.reply_inner(args, Some(data))
    }

    fn reply_inner(&mut self, args: &[u64], bulk: Option<&[u8]>) -> Result<(), Error> {
        let Some((sid, token)) = self.reply_to else {
            return Err(Error::Handler(
                "reply to a one-way message: only requests (Endpoint::request, Peer::request) \
                 take a reply"
                    .into(),
            ));
        };
        if self.replied {
            return Err(Error::Handler("a handler may reply only once".into()));
        }
        self.replied = true;
        self.core.send_reply(sid, token, args, bulk)
    }
}

impl Core {
    fn problem(&mut self, e: Error) {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(e);
        } else {
            self.dropped_problems += 1;
        }
    }

    /// Applies what the acceptor thread reported (new and ended connections).
    fn sync_conns(&mut self) {
        // Relaxed: a look, to keep the common case a load of a line the
        // acceptor rarely writes (the swap below is the one that counts).
        // Acquire (the swap): pairs with the acceptor's Release store after
        // pushing.
        if !self.shared.dirty.load(Ordering::Relaxed)
            || !self.shared.dirty.swap(false, Ordering::Acquire)
        {
            return;
        }
        let events = std::mem::take(
            &mut *self
                .shared
                .events
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for ev in events {
            match ev {
                ConnEvent::Opened { sid, cred, area } => {
                    self.stats.peers_opened += 1;
                    if let Some(slot) = self.conns.get_mut(sid as usize) {
                        *slot = Some(ServerConn {
                            area,
                            cred,
                            reply_tail: 0,
                            closing_at: None,
                        });
                    }
                }
                ConnEvent::Closed { sid } => {
                    self.stats.peers_closed += 1;
                    // Nothing handed out after now can name it: its process is
                    // gone. Tickets up to the tail may still; an honest tail
                    // is at most a ring ahead of the head.
                    let q = self.seg.queue();
                    let head = self.head.next();
                    let ahead = word::seq_diff(word::seq(q.tail()), word::seq(head))
                        .clamp(0, q.slots() as i64);
                    if let Some(Some(c)) = self.conns.get_mut(sid as usize)
                        && c.closing_at.is_none()
                    {
                        c.closing_at = Some(head.wrapping_add(ahead as u64));
                        self.closing += 1;
                    }
                }
            }
        }
    }

    /// Unmaps the closed connections that nothing in the ring can name any
    /// more, and gives their indices back.
    fn retire_closed(&mut self) {
        if self.closing == 0 {
            return;
        }
        let head = self.head.next();
        for (sid, slot) in self.conns.iter_mut().enumerate() {
            if let Some(c) = slot
                && let Some(at) = c.closing_at
                && word::seq_diff(word::seq(head), word::seq(at)) >= 0
            {
                *slot = None;
                self.closing -= 1;
                self.shared
                    .free
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(sid as u32);
            }
        }
    }

    /// One step of the receiver at the head.
    fn poll_once(&mut self, unknown_is_final: bool) -> Event {
        let Core {
            seg,
            conns,
            head,
            env,
            bulk_buf,
            stats,
            ..
        } = self;
        let resolve = |sid: u32| {
            conns
                .get(sid as usize)
                .and_then(Option::as_ref)
                .map(|c| c.area.area())
        };
        let repairs = head.tail_repairs();
        let ev = seg
            .queue()
            .poll_one(head, env, &resolve, unknown_is_final, bulk_buf);
        stats.tail_repairs += head.tail_repairs() - repairs;
        ev
    }

    fn send_reply(
        &mut self,
        sid: u32,
        token: u64,
        args: &[u64],
        bulk: Option<&[u8]>,
    ) -> Result<(), Error> {
        let r = match self.conns.get_mut(sid as usize) {
            Some(Some(c)) if c.closing_at.is_none() => {
                c.area.replies().put(&mut c.reply_tail, token, args, bulk)
            }
            _ => Err(Error::Handler(format!(
                "the requester's connection {sid} has closed; reply dropped"
            ))),
        };
        if r.is_err() {
            self.stats.replies_dropped += 1;
        }
        r
    }

    fn add_send_stats(&mut self, st: &SendStats) {
        self.stats.send_retries += st.retries;
        self.stats.lost += st.lost;
        self.stats.lock_breaks += st.lock_breaks;
    }
}

/// One wait step: back off (yielding the processor after a while) and check
/// the deadline.
fn wait_step(backoff: &mut Backoff, deadline: Instant, what: &str) -> Result<(), Error> {
    backoff.spin();
    if backoff.current_iters() >= Backoff::new(100, 20_000).current_iters() * 64 {
        crate::sched::yield_now();
    }
    if Instant::now() >= deadline {
        return Err(Error::Timeout(format!(
            "{what}: still blocked at the timeout (is the receiver polling?)"
        )));
    }
    Ok(())
}

/// One wait step of a sender that polls nothing ([`Peer::send`]): spin (back
/// off) for a few steps, then, if only the receiver can end the wait, sleep
/// on the queue's space bell until the receiver frees slots (at most
/// [`SPACE_SLEEP_CAP`] at a time); otherwise as [`wait_step`].
fn sleep_or_step(
    b: &Blocked<'_>,
    spins: &mut u32,
    backoff: &mut Backoff,
    deadline: Instant,
    what: &str,
) -> Result<(), Error> {
    if !b.can_sleep() || *spins < SPINS_BEFORE_SLEEP {
        *spins += 1;
        return wait_step(backoff, deadline, what);
    }
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return wait_step(backoff, deadline, what);
    }
    if b.sleep(Some(left.min(SPACE_SLEEP_CAP))) {
        // Woken (or the slot moved): the next wait, if any, spins again first.
        *spins = 0;
        *backoff = Backoff::new(100, 20_000);
    } else if Instant::now() >= deadline {
        return Err(Error::Timeout(format!(
            "{what}: still blocked at the timeout (is the receiver polling?)"
        )));
    }
    Ok(())
}

fn deadline_ns(timeout: Duration) -> u64 {
    crate::util::clock::now_ns().saturating_add(timeout.as_nanos().min(u64::MAX as u128) as u64)
}

impl Endpoint {
    /// Creates the endpoint `name`: its segment (a sealed memfd) and its
    /// name, an abstract Unix socket that processes of the same user connect
    /// to ([`Endpoint::connect`], [`Peer::connect`]). Fails with
    /// [`Error::Exists`] while another process holds the name; a name frees
    /// itself when its owner exits, however it exits.
    pub fn create(name: &str, options: Options) -> Result<Self, Error> {
        validate_name(name)?;
        options.validate()?;
        let seg = Segment::create(name, &options)?;
        let shared = Arc::new(ConnShared {
            events: Mutex::new(Vec::new()),
            dirty: AtomicBool::new(false),
            free: Mutex::new((0..options.max_peers).rev().collect()),
            refused: AtomicU64::new(0),
        });
        let acceptor = Acceptor {
            shared: shared.clone(),
            name: name.to_string(),
            seg_fd: seg.map().try_clone_fd()?,
            max_peers: options.max_peers,
            seg_geom: seg.geometry(),
            geom: ConnGeometry {
                sid: 0,
                records: options.in_flight,
                blocks: options.blocks,
                block_bytes: options.block_bytes,
                replies: REPLY_SLOTS,
            },
        };
        let listener = Listener::bind(name, Box::new(acceptor))?;
        Ok(Self {
            core: Core {
                _listener: listener,
                shared,
                seg,
                conns: (0..options.max_peers).map(|_| None).collect(),
                closing: 0,
                name: name.to_string(),
                env: RealEnv {
                    lease_ns: options.lease.as_nanos() as u64,
                },
                spin_now: options.spin.unwrap_or_default(),
                options,
                waits: 0,
                head: Head::default(),
                in_handler: false,
                stats: Stats::default(),
                problems: Vec::new(),
                dropped_problems: 0,
                bulk_buf: Vec::new(),
            },
            handlers: Vec::new(),
        })
    }

    /// The endpoint's name.
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// The claim algorithm senders use on this endpoint.
    pub fn claim(&self) -> Claim {
        self.core.seg.geometry().claim
    }

    /// Connections open now (as of the last poll).
    pub fn peers(&self) -> usize {
        self.core
            .conns
            .iter()
            .filter(|c| c.as_ref().is_some_and(|c| c.closing_at.is_none()))
            .count()
    }

    /// Registers `f` as handler `index`: it runs, inside [`poll`](Self::poll),
    /// for every message sent to that index. Errors if the index is taken or
    /// not below 1024.
    pub fn register<F>(&mut self, index: u16, f: F) -> Result<(), Error>
    where
        F: FnMut(&mut Ctx<'_>, &Message<'_>) -> Result<(), Error> + Send + 'static,
    {
        let i = index as usize;
        if i >= MAX_HANDLERS {
            return Err(Error::InvalidArgument(format!(
                "handler index {index}: must be below {MAX_HANDLERS}"
            )));
        }
        if self.handlers.len() <= i {
            self.handlers.resize_with(i + 1, || None);
        }
        if self.handlers[i].is_some() {
            return Err(Error::InvalidArgument(format!(
                "handler index {index} is already registered; unregister it first"
            )));
        }
        self.handlers[i] = Some(Box::new(f));
        Ok(())
    }

    /// Removes handler `index`; whether there was one.
    pub fn unregister(&mut self, index: u16) -> bool {
        self.handlers
            .get_mut(index as usize)
            .and_then(Option::take)
            .is_some()
    }

    /// Connects to the endpoint `name` (with this endpoint's options).
    pub fn connect(&self, name: &str) -> Result<Peer, Error> {
        Peer::connect(name, &self.core.options)
    }

    /// Runs the handlers of the messages that have arrived, at most one
    /// ring's worth (`packets`) per call, so that a peer that keeps the queue
    /// full cannot keep the caller here. Never blocks. Returns the number of
    /// messages taken. Slots that fail validation and messages that name no
    /// handler are counted in [`stats`](Self::stats) and kept in
    /// [`take_problems`](Self::take_problems).
    pub fn poll(&mut self) -> usize {
        self.core.sync_conns();
        let budget = self.core.seg.geometry().packets as usize;
        let mut n = 0;
        let mut freed = 0;
        for _ in 0..budget {
            let mut ev = self.core.poll_once(false);
            if let Event::Unknown { .. } = ev {
                // A connection accepted since the last look, perhaps.
                self.core.sync_conns();
                ev = self.core.poll_once(true);
            }
            if !matches!(ev, Event::Empty | Event::Pending) {
                freed += 1;
                if freed % WAKE_EVERY == 0 {
                    let q = self.core.seg.queue();
                    q.publish_head(&self.core.head);
                    if q.wake_senders() {
                        self.core.stats.sender_wakeups += 1;
                    }
                }
            }
            match ev {
                Event::Message(m) => {
                    n += 1;
                    self.dispatch(&m);
                }
                Event::Revoked { .. } => self.core.stats.revoked += 1,
                Event::Rejected(why) => {
                    self.core.stats.rejected += 1;
                    self.core.problem(Error::Corrupt(why));
                }
                Event::Empty | Event::Pending | Event::Unknown { .. } => break,
            }
        }
        // Slots were freed since the last ring, or the head hint changed
        // (senders may wait for either): wake senders sleeping on the full
        // ring. The hint first: the ring's fence orders it before the look
        // at the bell.
        let q = self.core.seg.queue();
        let hinted = q.publish_head(&self.core.head);
        if (hinted || freed % WAKE_EVERY != 0) && q.wake_senders() {
            self.core.stats.sender_wakeups += 1;
        }
        self.core.retire_closed();
        n
    }

    fn dispatch(&mut self, m: &Incoming) {
        let sender = match self.core.conns.get(m.sid as usize) {
            Some(Some(c)) => c.cred,
            _ => return, // validated by the poll: it resolved this connection
        };
        let Some(Some(h)) = self.handlers.get_mut(m.handler as usize) else {
            self.core.stats.unknown_handler += 1;
            self.core.problem(Error::Handler(format!(
                "message for handler {} from pid {}: no such handler registered",
                m.handler, sender.pid
            )));
            return;
        };
        self.core.stats.delivered += 1;
        let bulk = std::mem::take(&mut self.core.bulk_buf);
        let msg = Message {
            handler: m.handler,
            sender,
            args: &m.args[..m.nargs],
            bulk: m.has_bulk.then_some(&bulk[..]),
            is_request: m.kind == Kind::Request,
        };
        self.core.in_handler = true;
        let mut cx = Ctx {
            core: &mut self.core,
            reply_to: (m.kind == Kind::Request).then_some((m.sid, m.token)),
            replied: false,
        };
        let r = h(&mut cx, &msg);
        self.core.in_handler = false;
        self.core.bulk_buf = bulk;
        if let Err(e) = r {
            self.core.problem(e);
        }
    }

    /// Sends a one-way message to handler `handler` of `peer`, polling this
    /// endpoint while waiting for space (§3.1's deadlock avoidance).
    pub fn send(&mut self, peer: &Peer, handler: u16, args: &[u64]) -> Result<(), Error> {
        self.send_msg(peer, handler, Kind::OneWay, 0, args, None)
    }

    /// Sends a one-way message with bulk data.
    pub fn send_bulk(
        &mut self,
        peer: &Peer,
        handler: u16,
        args: &[u64],
        data: &[u8],
    ) -> Result<(), Error> {
        self.send_msg(peer, handler, Kind::OneWay, 0, args, Some(data))
    }

    fn send_msg(
        &mut self,
        peer: &Peer,
        handler: u16,
        kind: Kind,
        token: u64,
        args: &[u64],
        bulk: Option<&[u8]>,
    ) -> Result<(), Error> {
        let msg = Outgoing {
            handler,
            kind,
            token,
            args,
            bulk,
        };
        let timeout = self.core.options.timeout;
        let deadline = Instant::now() + timeout;
        let mut backoff = Backoff::new(100, 20_000);
        let mut st = SendStats::default();
        let r = peer.send_with(&msg, timeout, &mut st, &mut |_| {
            // Poll this endpoint while waiting (§3.1): no sleeping on the
            // peer's space bell, which nobody rings for our own queue.
            self.poll();
            wait_step(&mut backoff, deadline, "a send waiting for queue space")
        });
        self.core.add_send_stats(&st);
        r.map(|_| ())
    }

    /// Sends a request to handler `handler` of `peer` (with optional bulk
    /// data) and polls this endpoint — running its handlers — until the reply
    /// arrives or the timeout passes. While idle it sleeps until either this
    /// endpoint's doorbell or the reply is rung.
    pub fn request(
        &mut self,
        peer: &Peer,
        handler: u16,
        args: &[u64],
        bulk: Option<&[u8]>,
    ) -> Result<Reply, Error> {
        if self.core.in_handler {
            return Err(Error::Handler(
                "request from inside a handler: handlers may only reply".into(),
            ));
        }
        let mut rs = peer.reply_state()?;
        let token = rs.next_token;
        rs.next_token = rs.next_token.wrapping_add(1);
        // Relaxed: a counter; one request at a time per Peer (`rs`), so the
        // difference is this request's.
        let strays = peer.counters.stray_replies.load(Ordering::Relaxed);
        let r = self.request_inner(peer, &mut rs, handler, token, args, bulk);
        self.core.stats.stray_replies +=
            peer.counters.stray_replies.load(Ordering::Relaxed) - strays;
        if r.is_ok() {
            self.core.stats.delivered += 1;
        }
        r
    }

    fn request_inner(
        &mut self,
        peer: &Peer,
        rs: &mut ReplyState,
        handler: u16,
        token: u64,
        args: &[u64],
        bulk: Option<&[u8]>,
    ) -> Result<Reply, Error> {
        self.send_msg(peer, handler, Kind::Request, token, args, bulk)?;
        let deadline = Instant::now() + self.core.options.timeout;
        let timeout = self.core.options.timeout;
        let timed_out =
            || Error::Timeout(format!("no reply from {:?} within {timeout:?}", peer.name));
        let mut idle = Idle::default();
        loop {
            if let Some(r) = peer.take_reply(rs, token) {
                return r;
            }
            // Here, not only when idle: a peer that keeps this endpoint's
            // queue from ever running dry must not keep the request past its
            // deadline.
            if Instant::now() >= deadline {
                return Err(timed_out());
            }
            if self.poll() > 0 {
                self.got_work(&mut idle);
                continue;
            }
            let bell = peer.area.replies().bell();
            let r = self.idle(
                &mut idle,
                deadline,
                Some((bell, &|| peer.reply_waiting(rs))),
            );
            if r.is_err() {
                return Err(timed_out());
            }
        }
    }

    /// Waits up to `timeout` for messages, running their handlers as
    /// [`poll`](Self::poll) does; returns how many were taken (0: none came).
    ///
    /// It polls for up to [`Options::spin`](Options#structfield.spin), then sleeps on the endpoint's
    /// doorbell until a sender rings it (every send to this endpoint does,
    /// with a system call only when the receiver sleeps). The spin adapts:
    /// each spin that ends in sleep halves the next one (down to none — the
    /// sender may need this very processor), each that finds a message
    /// restores the full spin, and one wait in 16 probes with the full spin.
    /// With `spin: None` it busy-polls until a message comes or the timeout
    /// passes.
    ///
    /// ```no_run
    /// use mpsync::msgq::{Endpoint, Options};
    /// use std::time::Duration;
    ///
    /// let mut server = Endpoint::create("echo", Options::default())?;
    /// server.register(1, |cx, m| cx.reply(m.args()))?;
    /// loop {
    ///     server.wait(Duration::from_secs(1)); // sleeps while nobody sends
    /// }
    /// # Ok::<(), mpsync::msgq::Error>(())
    /// ```
    pub fn wait(&mut self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        let mut idle = Idle::default();
        loop {
            let n = self.poll();
            if n > 0 {
                self.got_work(&mut idle);
                return n;
            }
            if self.idle(&mut idle, deadline, None).is_err() {
                return 0;
            }
        }
    }

    /// One idle step of a waiting receiver whose last poll found nothing:
    /// spin while within the spin budget, else sleep on the doorbell (and on
    /// `also`'s bell, a reply bell, until its `still` says a reply is there).
    /// `Err` once `deadline` has passed.
    fn idle(
        &mut self,
        st: &mut Idle,
        deadline: Instant,
        also: Option<(&Doorbell, &dyn Fn() -> bool)>,
    ) -> Result<(), ()> {
        st.polls = st.polls.wrapping_add(1);
        let Some(spin) = self.core.options.spin else {
            // Busy polling (the paper's receivers).
            if st.polls.is_multiple_of(256) {
                if Instant::now() >= deadline {
                    return Err(());
                }
                crate::sched::yield_now();
            } else {
                crate::sync::spin_loop();
            }
            return Ok(());
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(());
        }
        let since = match st.since {
            Some(s) => s,
            None => {
                // A new wait: spin for the adaptive budget, or probe with
                // the full spin now and then.
                self.core.waits = self.core.waits.wrapping_add(1);
                st.budget = if self.core.waits.is_multiple_of(PROBE_EVERY) {
                    spin
                } else {
                    self.core.spin_now
                };
                st.since = Some(now);
                now
            }
        };
        if now.duration_since(since) < st.budget {
            // A pure spin, no yield: the budget is short, and a yield would
            // hand the processor to whatever else is runnable (not
            // necessarily the sender), hiding whether spinning pays.
            crate::sync::spin_loop();
            return Ok(());
        }
        // Spinning did not pay this time (the sender may be waiting for
        // this very processor): spin half as long next time.
        self.core.spin_now /= 2;
        if self.core.spin_now < Duration::from_micros(1) {
            self.core.spin_now = Duration::ZERO;
        }
        // Sleep: announce, look once more (the Dekker pair with `ring`), park.
        let bell = self.core.seg.doorbell();
        bell.announce();
        if let Some((b, _)) = also {
            b.announce();
        }
        if self.poll() > 0 || also.is_some_and(|(_, ready)| ready()) {
            self.core.seg.doorbell().cancel();
            if let Some((b, _)) = also {
                b.cancel();
            }
            *st = Idle::default();
            return Ok(());
        }
        // Something handed out but not published: its sender may have died,
        // so wake in time to revoke the ticket (a lease).
        let cap = if self.in_flight() {
            self.core.options.lease.max(Duration::from_micros(1))
        } else {
            SLEEP_CAP
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let rung = match also {
            None => self.core.seg.doorbell().sleep(Some(left.min(cap))),
            Some((b, _)) => self.core.seg.doorbell().sleep_with(b, Some(left.min(cap))),
        };
        if rung {
            self.core.stats.wakeups += 1;
        } else {
            self.core.stats.sleep_timeouts += 1;
        }
        *st = Idle::default();
        Ok(())
    }

    /// A poll found messages: if it was during a wait's spin, spinning pays
    /// (the sender runs elsewhere), so the budget goes back to the full spin.
    fn got_work(&mut self, st: &mut Idle) {
        if st.since.is_some()
            && let Some(spin) = self.core.options.spin
        {
            self.core.spin_now = spin;
        }
        *st = Idle::default();
    }

    /// Whether tickets are handed out beyond the head.
    fn in_flight(&self) -> bool {
        self.backlog() > 0
    }

    /// Request-queue tickets handed out to senders and not yet delivered or
    /// revoked (0 when nothing is in flight; at most a ring).
    pub fn backlog(&self) -> u64 {
        let q = self.core.seg.queue();
        word::seq_diff(word::seq(q.tail()), word::seq(self.core.head.next()))
            .clamp(0, q.slots() as i64) as u64
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        Stats {
            // Relaxed: a statistic, counted by the acceptor thread.
            peers_refused: self.core.shared.refused.load(Ordering::Relaxed),
            ..self.core.stats
        }
    }

    /// The problems met while polling (rejected slots, unknown handlers,
    /// handler errors), oldest first, at most 64 kept; clears them.
    pub fn take_problems(&mut self) -> Vec<Error> {
        self.core.dropped_problems = 0;
        std::mem::take(&mut self.core.problems)
    }

    /// The raw mapping of this endpoint's segment (address, length), for
    /// fault-injection tests that play a misbehaving peer.
    #[doc(hidden)]
    pub fn raw_segment(&self) -> (*mut u8, usize) {
        self.core.seg.raw()
    }
}

impl Peer {
    /// Connects to the endpoint `name`: asks its owner (over the endpoint's
    /// socket, checking with the kernel that it runs as this user) for the
    /// segment and a connection area of its own, and maps both after checking
    /// that neither can change size. It waits for the owner's answer for the
    /// options' timeout, but at least 0.2 s and at most 5 s. Keep the `Peer`
    /// for as long as you send: each connection costs the endpoint one of its
    /// `max_peers`.
    pub fn connect(name: &str, options: &Options) -> Result<Self, Error> {
        validate_name(name)?;
        options.validate()?;
        let (conn, hello, fds) =
            rendezvous::connect(name, options.timeout.clamp(CONNECT_MIN, CONNECT_WAIT))?;
        let bad = |why: &str| Error::Corrupt(format!("endpoint {name:?} answered {why}"));
        if hello.len() != HELLO_LEN
            || hello[..4] != HELLO_MAGIC.to_le_bytes()
            || hello[4..8] != super::segment::VERSION.to_le_bytes()
        {
            return Err(bad(
                "with a hello this library does not read (another version?)",
            ));
        }
        let word = |i: usize| u32::from_le_bytes(hello[i..i + 4].try_into().expect("4 bytes"));
        let sid = word(8);
        let geom = Geometry {
            claim: Claim::from_code(word(12))
                .ok_or_else(|| bad("with an unknown claim algorithm"))?,
            packets: word(16),
        };
        let mut fds = fds.into_iter();
        let (Some(seg_fd), Some(area_fd), None) = (fds.next(), fds.next(), fds.next()) else {
            return Err(bad("without its two shared-memory objects"));
        };
        let seg = Segment::open(
            name,
            SharedMap::from_received(seg_fd, 4096, MAX_MAP)?,
            geom,
            options,
        )?;
        let area = ConnArea::open(name, SharedMap::from_received(area_fd, 4096, MAX_MAP)?, sid)?;
        Ok(Self {
            name: name.to_string(),
            conn,
            seg,
            area,
            sid,
            env: RealEnv {
                lease_ns: options.lease.as_nanos() as u64,
            },
            timeout: options.timeout,
            hint: crate::sync::AtomicU32::new(0),
            reply: Mutex::new(ReplyState::default()),
            counters: PeerCounters::default(),
        })
    }

    /// Counters of the sends through this `Peer` so far (from every thread,
    /// and from endpoints that sent through it).
    pub fn stats(&self) -> PeerStats {
        // Relaxed: counters, read as a snapshot.
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PeerStats {
            sent: get(&self.counters.sent),
            send_retries: get(&self.counters.send_retries),
            lost: get(&self.counters.lost),
            lock_breaks: get(&self.counters.lock_breaks),
            stray_replies: get(&self.counters.stray_replies),
        }
    }

    /// The peer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The claim algorithm of the peer's queue.
    pub fn claim(&self) -> Claim {
        self.seg.geometry().claim
    }

    /// Who serves the endpoint, as the kernel says (`SO_PEERCRED`).
    pub fn server(&self) -> Credentials {
        self.conn.server()
    }

    /// Whether the endpoint's owner has closed this connection (it exited,
    /// or dropped its endpoint): sends and requests through this `Peer`
    /// can then only time out.
    pub fn server_gone(&self) -> bool {
        self.conn.server_gone()
    }

    /// Bytes of bulk data a message (or reply) may carry.
    pub fn block_bytes(&self) -> usize {
        self.area.area().block_bytes()
    }

    fn send_with(
        &self,
        msg: &Outgoing<'_>,
        timeout: Duration,
        st: &mut SendStats,
        wait: &mut dyn FnMut(&Blocked<'_>) -> Result<(), Error>,
    ) -> Result<u64, Error> {
        let sender = Sender {
            sid: self.sid,
            conn: self.area.area(),
            hint: &self.hint,
            deadline_ns: deadline_ns(timeout),
        };
        let lock = self.seg.lock();
        let r = self.seg.queue().send(
            &sender,
            lock.as_ref().map(|l| l as _),
            msg,
            &self.env,
            wait,
            st,
        );
        // Relaxed: counters.
        let add = |c: &AtomicU64, n: u64| {
            if n > 0 {
                c.fetch_add(n, Ordering::Relaxed);
            }
        };
        add(&self.counters.sent, r.is_ok() as u64);
        add(&self.counters.send_retries, st.retries);
        add(&self.counters.lost, st.lost);
        add(&self.counters.lock_breaks, st.lock_breaks);
        r
    }

    /// Sends a one-way message without polling while waiting (for processes
    /// that only send; a receiver that never polls makes this time out).
    /// While the queue is full it spins a little, then sleeps on the queue's
    /// space bell until the receiver frees slots (at most 10 ms at a time).
    /// Safe to call from several threads at once.
    pub fn send(&self, handler: u16, args: &[u64], bulk: Option<&[u8]>) -> Result<(), Error> {
        self.send_kind(handler, Kind::OneWay, 0, args, bulk)
    }

    fn send_kind(
        &self,
        handler: u16,
        kind: Kind,
        token: u64,
        args: &[u64],
        bulk: Option<&[u8]>,
    ) -> Result<(), Error> {
        if args.len() > MAX_ARGS {
            return Err(Error::InvalidArgument(format!(
                "{} argument words; a message carries at most {MAX_ARGS}",
                args.len()
            )));
        }
        let msg = Outgoing {
            handler,
            kind,
            token,
            args,
            bulk,
        };
        let deadline = Instant::now() + self.timeout;
        let mut backoff = Backoff::new(100, 20_000);
        let mut spins = 0u32;
        let mut st = SendStats::default();
        self.send_with(&msg, self.timeout, &mut st, &mut |b| {
            sleep_or_step(
                b,
                &mut spins,
                &mut backoff,
                deadline,
                "a send waiting for queue space",
            )
        })
        .map(|_| ())
    }

    /// Sends a request and waits (spinning briefly, then sleeping on the
    /// connection's reply bell) for its reply — for processes without an
    /// endpoint of their own. One request at a time per `Peer`.
    pub fn request(&self, handler: u16, args: &[u64], bulk: Option<&[u8]>) -> Result<Reply, Error> {
        let mut rs = self.reply_state()?;
        let token = rs.next_token;
        rs.next_token = rs.next_token.wrapping_add(1);
        self.send_kind(handler, Kind::Request, token, args, bulk)?;
        let deadline = Instant::now() + self.timeout;
        let spin_until = Instant::now() + Duration::from_micros(20);
        loop {
            if let Some(r) = self.take_reply(&mut rs, token) {
                return r;
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout(format!(
                    "no reply from {:?} within {:?}",
                    self.name, self.timeout
                )));
            }
            if now < spin_until {
                crate::sync::spin_loop();
                continue;
            }
            let bell = self.area.replies().bell();
            bell.announce();
            if self.reply_waiting(&rs) {
                bell.cancel();
                continue;
            }
            bell.sleep(Some((deadline - now).min(SLEEP_CAP)));
        }
    }

    fn reply_state(&self) -> Result<std::sync::MutexGuard<'_, ReplyState>, Error> {
        match self.reply.try_lock() {
            Ok(g) => Ok(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => Err(Error::InvalidArgument(format!(
                "another request to {:?} is in flight on this Peer; connect one Peer per \
                 requesting thread",
                self.name
            ))),
        }
    }

    /// Whether the reply ring holds something at the client's head.
    fn reply_waiting(&self, rs: &ReplyState) -> bool {
        self.area.replies().peek(rs.head)
    }

    /// The reply with `token`, if it arrived (stale replies before it are
    /// counted and dropped). Looks at most one ring's worth of replies per
    /// call: an endpoint that refills the ring as fast as this takes from it
    /// must not keep the caller here past its deadline.
    fn take_reply(&self, rs: &mut ReplyState, token: u64) -> Option<Result<Reply, Error>> {
        let replies = self.area.replies();
        for _ in 0..replies.slots() {
            match replies.take(&mut rs.head)? {
                Ok(r) if r.token == token => {
                    return Some(Ok(Reply {
                        args: r.args,
                        bulk: r.bulk,
                    }));
                }
                // Relaxed: a counter.
                Ok(_) => {
                    self.counters.stray_replies.fetch_add(1, Ordering::Relaxed);
                }
                Err(why) => {
                    return Some(Err(Error::Corrupt(format!(
                        "endpoint {:?}: {why}",
                        self.name
                    ))));
                }
            }
        }
        None
    }

    /// The raw mappings (address, length) of the endpoint's segment and of
    /// this connection's area, for fault-injection tests that play a
    /// misbehaving peer.
    #[doc(hidden)]
    pub fn raw_mappings(&self) -> [(*mut u8, usize); 2] {
        [self.seg.raw(), self.area.raw()]
    }

    /// The index the endpoint gave this connection (for fault-injection tests).
    #[doc(hidden)]
    pub fn connection_index(&self) -> u32 {
        self.sid
    }
}
