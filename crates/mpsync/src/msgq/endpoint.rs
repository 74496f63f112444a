//! Endpoints, peers and handlers: the active-message API over [`super::ring`].

use super::ring::{Blocked, Event, Head, Incoming, Kind, MAX_ARGS, Outgoing, SendStats};
use super::segment::{RealEnv, Segment, pack_name, unpack_name};
use super::{Claim, Error, Options};
use crate::util::backoff::Backoff;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Queue indices inside a segment.
const REQUESTS: usize = 0;
const REPLIES: usize = 1;
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

/// The receiver rings a queue's space bell after every this many freed slots
/// within one poll, as well as when the poll ends.
const WAKE_EVERY: usize = 32;

/// One in this many waits spins for the full [`Options::spin`](Options#structfield.spin) whatever the
/// adaptive budget says, to find out whether spinning pays again.
const PROBE_EVERY: u32 = 16;

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
    sender_pid: u32,
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
    /// The process that sent it (as it claimed the packet).
    pub fn sender_pid(&self) -> u32 {
        self.sender_pid
    }
    /// Whether the sender waits for a reply.
    pub fn is_request(&self) -> bool {
        self.is_request
    }
}

/// A reply received by [`Endpoint::request`].
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
    /// Slots freed because their claimant process died before publishing.
    pub recovered: u64,
    /// Tickets revoked because they stayed unclaimed for a lease.
    pub revoked: u64,
    /// Packets rejected by validation.
    pub rejected: u64,
    /// Messages naming no registered handler.
    pub unknown_handler: u64,
    /// Replies nobody waited for (late, or a bad token).
    pub stray_replies: u64,
    /// Tickets this endpoint's sends gave up and took again.
    pub send_retries: u64,
    /// Bulk blocks this endpoint's sends recovered.
    pub recovered_blocks: u64,
    /// Sleeps on the doorbell that a sender ended by ringing.
    pub wakeups: u64,
    /// Sleeps on the doorbell that ended by their time limit.
    pub sleep_timeouts: u64,
    /// Rings of this endpoint's space bells that found senders asleep on a
    /// full queue (and woke them).
    pub sender_wakeups: u64,
}

/// A connection to another endpoint (its segment mapped here), for sending.
/// Dropping it unmaps the segment; the endpoint itself lives on.
#[derive(Debug)]
pub struct Peer {
    seg: Segment,
    name: String,
    env: RealEnv,
    timeout: Duration,
}

type Handler = dyn FnMut(&mut Ctx<'_>, &Message<'_>) -> Result<(), Error> + Send;

/// Everything of an endpoint but its handlers (so a running handler can use it).
struct Core {
    seg: Segment,
    name: String,
    from: [u64; 2],
    pid: u32,
    env: RealEnv,
    timeout: Duration,
    spin: Option<Duration>,
    /// The adaptive spin budget (at most `spin`): halved by every spin that
    /// ended in sleep, back to `spin` by one that found a message.
    spin_now: Duration,
    waits: u32,
    lease: Duration,
    heads: [Head; 2],
    /// Reply targets opened so far, by packed name.
    peers: HashMap<[u64; 2], Peer>,
    next_token: u64,
    /// The outstanding request's token and, once arrived, its reply.
    waiting: Option<(u64, Option<Reply>)>,
    stats: Stats,
    problems: Vec<Error>,
    dropped_problems: u64,
    bulk_buf: Vec<u8>,
}

/// An active-message endpoint: owns a named segment with a request and a reply
/// queue, runs handlers when polled, and sends to [`Peer`]s. Dropping it
/// unlinks the name and unmaps the segment.
///
/// Not `Sync`: one thread polls an endpoint (the queues have one receiver).
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
            .field("stats", &self.core.stats)
            .finish_non_exhaustive()
    }
}

/// What a running handler may do: reply (once, to a request).
pub struct Ctx<'a> {
    core: &'a mut Core,
    reply_to: Option<([u64; 2], u64)>,
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
    /// Replies to the request being handled with up to eight words.
    pub fn reply(&mut self, args: &[u64]) -> Result<(), Error> {
        self.reply_inner(args, None)
    }

    /// Replies with words and bulk data.
    pub fn reply_bulk(&mut self, args: &[u64], data: &[u8]) -> Result<(), Error> {
        self.reply_inner(args, Some(data))
    }

    fn reply_inner(&mut self, args: &[u64], bulk: Option<&[u8]>) -> Result<(), Error> {
        let Some((to, token)) = self.reply_to else {
            return Err(Error::Handler(
                "reply to a one-way message: only requests (Endpoint::request) take a reply".into(),
            ));
        };
        if self.replied {
            return Err(Error::Handler("a handler may reply only once".into()));
        }
        self.replied = true;
        self.core.send_reply(to, token, args, bulk)
    }
}

impl Core {
    fn wait_ctx(&self) -> (Instant, Backoff) {
        (Instant::now() + self.timeout, Backoff::new(100, 20_000))
    }

    fn problem(&mut self, e: Error) {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(e);
        } else {
            self.dropped_problems += 1;
        }
    }

    /// Takes whatever sits in the reply queue (no user handlers involved).
    fn poll_replies(&mut self) -> usize {
        let mut n = 0;
        let mut freed = 0;
        loop {
            let q = self.seg.queue(REPLIES);
            let ev = q.poll_one(&mut self.heads[REPLIES], &self.env, &mut self.bulk_buf);
            if !matches!(ev, Event::Empty | Event::Pending) {
                freed += 1;
                if freed % WAKE_EVERY == 0 && q.wake_senders() {
                    self.stats.sender_wakeups += 1;
                }
            }
            match ev {
                Event::Empty | Event::Pending => {
                    // Slots were freed since the last ring: wake senders
                    // sleeping on the full ring.
                    if freed % WAKE_EVERY != 0 && q.wake_senders() {
                        self.stats.sender_wakeups += 1;
                    }
                    return n;
                }
                Event::Message(m) => {
                    n += 1;
                    self.take_reply(&m);
                }
                other => self.count_other(other),
            }
        }
    }

    fn count_other(&mut self, ev: Event) {
        match ev {
            Event::Recovered { pid: 0, .. } => self.stats.revoked += 1,
            Event::Recovered { .. } => self.stats.recovered += 1,
            Event::Rejected(why) => {
                self.stats.rejected += 1;
                self.problem(Error::Corrupt(why));
            }
            _ => {}
        }
    }

    fn take_reply(&mut self, m: &Incoming) {
        match &mut self.waiting {
            Some((tok, slot @ None)) if m.kind == Kind::Reply && *tok == m.token => {
                self.stats.delivered += 1;
                *slot = Some(Reply {
                    args: m.args[..m.nargs].to_vec(),
                    bulk: m.has_bulk.then(|| self.bulk_buf.clone()),
                });
            }
            _ => self.stats.stray_replies += 1,
        }
    }

    fn peer_for(&mut self, to: [u64; 2]) -> Result<&Peer, Error> {
        if !self.peers.contains_key(&to) {
            let name = unpack_name(to)?;
            let p = Peer::open(&name, self.env, self.timeout)?;
            self.peers.insert(to, p);
        }
        Ok(&self.peers[&to])
    }

    fn send_reply(
        &mut self,
        to: [u64; 2],
        token: u64,
        args: &[u64],
        bulk: Option<&[u8]>,
    ) -> Result<(), Error> {
        self.peer_for(to)?;
        let peer = self.peers.remove(&to).expect("just opened");
        let msg = Outgoing {
            handler: 0,
            kind: Kind::Reply,
            token,
            from: self.from,
            args,
            bulk,
        };
        let (deadline, mut backoff) = self.wait_ctx();
        let mut st = SendStats::default();
        let lock = peer.seg.lock(REPLIES);
        let (pid, env) = (self.pid, self.env);
        let r = peer.seg.queue(REPLIES).send(
            pid,
            lock.as_ref().map(|l| l as _),
            &msg,
            &env,
            &mut |_| {
                // Only replies may be taken here: we are inside a handler,
                // and must keep taking them (§3.1): no sleeping.
                self.poll_replies();
                wait_step(&mut backoff, deadline, "a reply waiting for queue space")
            },
            &mut st,
        );
        self.stats.send_retries += st.retries;
        self.stats.recovered_blocks += st.recovered_blocks;
        if r.is_ok() {
            self.peers.insert(to, peer);
        }
        r.map(|_| ())
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
/// off) for a few steps, then, if only the receiver can free what it waits
/// for, sleep on the queue's space bell until the receiver frees slots (at
/// most [`SPACE_SLEEP_CAP`] at a time); otherwise as [`wait_step`].
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

impl Endpoint {
    /// Creates the endpoint `name` (a segment `/dev/shm/mpsync.<name>`, mode
    /// 0600). A leftover segment of that name whose owner died is replaced.
    pub fn create(name: &str, options: Options) -> Result<Self, Error> {
        let pid = std::process::id();
        if !super::word::pid_fits(pid) {
            return Err(Error::InvalidArgument(format!(
                "this process's pid {pid} exceeds 2^22 (Linux's PID_MAX_LIMIT); cannot claim slots"
            )));
        }
        let seg = Segment::create(name, &options)?;
        Ok(Self {
            core: Core {
                seg,
                name: name.to_string(),
                from: pack_name(name),
                pid,
                env: RealEnv {
                    lease_ns: options.lease.as_nanos() as u64,
                },
                timeout: options.timeout,
                spin: options.spin,
                spin_now: options.spin.unwrap_or_default(),
                waits: 0,
                lease: options.lease,
                heads: [Head::default(), Head::default()],
                peers: HashMap::new(),
                next_token: 1,
                waiting: None,
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

    /// Maps the endpoint `name` for sending.
    pub fn connect(&self, name: &str) -> Result<Peer, Error> {
        Peer::open(name, self.core.env, self.core.timeout)
    }

    /// Runs the handlers of every message that has arrived (requests and
    /// one-way messages; replies are kept for [`request`](Self::request)).
    /// Never blocks. Returns the number of messages taken. Messages that fail
    /// validation or name no handler are counted in [`stats`](Self::stats) and
    /// kept in [`take_problems`](Self::take_problems).
    pub fn poll(&mut self) -> usize {
        let mut n = self.core.poll_replies();
        let mut freed = 0;
        loop {
            let q = self.core.seg.queue(REQUESTS);
            let ev = q.poll_one(
                &mut self.core.heads[REQUESTS],
                &self.core.env,
                &mut self.core.bulk_buf,
            );
            if !matches!(ev, Event::Empty | Event::Pending) {
                freed += 1;
                if freed % WAKE_EVERY == 0 && q.wake_senders() {
                    self.core.stats.sender_wakeups += 1;
                }
            }
            match ev {
                Event::Empty | Event::Pending => {
                    // Slots were freed since the last ring: wake senders
                    // sleeping on the full ring.
                    if freed % WAKE_EVERY != 0 && q.wake_senders() {
                        self.core.stats.sender_wakeups += 1;
                    }
                    return n;
                }
                Event::Message(m) => {
                    n += 1;
                    self.dispatch(&m);
                }
                other => self.core.count_other(other),
            }
        }
    }

    fn dispatch(&mut self, m: &Incoming) {
        if m.kind == Kind::Reply {
            // A reply in the request queue: no correct peer sends that.
            self.core.stats.rejected += 1;
            self.core.problem(Error::Corrupt(format!(
                "packet {}: a reply in the request queue",
                m.ticket
            )));
            return;
        }
        let Some(Some(h)) = self.handlers.get_mut(m.handler as usize) else {
            self.core.stats.unknown_handler += 1;
            self.core.problem(Error::Handler(format!(
                "message for handler {} from pid {}: no such handler registered",
                m.handler, m.sender_pid
            )));
            return;
        };
        self.core.stats.delivered += 1;
        let bulk = std::mem::take(&mut self.core.bulk_buf);
        let msg = Message {
            handler: m.handler,
            sender_pid: m.sender_pid,
            args: &m.args[..m.nargs],
            bulk: m.has_bulk.then_some(&bulk[..]),
            is_request: m.kind == Kind::Request,
        };
        let mut cx = Ctx {
            core: &mut self.core,
            reply_to: (m.kind == Kind::Request).then_some((m.from, m.token)),
            replied: false,
        };
        let r = h(&mut cx, &msg);
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

    /// Sends a one-way message with bulk data (claimed before the packet, §3.2).
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
            from: self.core.from,
            args,
            bulk,
        };
        let (deadline, mut backoff) = self.core.wait_ctx();
        let mut st = SendStats::default();
        let lock = peer.seg.lock(REQUESTS);
        let pid = self.core.pid;
        let env = peer.env;
        let r = peer.seg.queue(REQUESTS).send(
            pid,
            lock.as_ref().map(|l| l as _),
            &msg,
            &env,
            &mut |_| {
                // Poll this endpoint while waiting (§3.1): no sleeping on the
                // peer's space bell, which nobody rings for our own queues.
                self.poll();
                wait_step(&mut backoff, deadline, "a send waiting for queue space")
            },
            &mut st,
        );
        self.core.stats.send_retries += st.retries;
        self.core.stats.recovered_blocks += st.recovered_blocks;
        r.map(|_| ())
    }

    /// Sends a request to handler `handler` of `peer` (with optional bulk
    /// data) and polls this endpoint — running its handlers — until the reply
    /// arrives or the timeout passes.
    pub fn request(
        &mut self,
        peer: &Peer,
        handler: u16,
        args: &[u64],
        bulk: Option<&[u8]>,
    ) -> Result<Reply, Error> {
        if self.core.waiting.is_some() {
            return Err(Error::Handler(
                "request from inside a handler: handlers may only reply".into(),
            ));
        }
        let token = self.core.next_token;
        self.core.next_token += 1;
        self.core.waiting = Some((token, None));
        let r = self.request_inner(peer, handler, token, args, bulk);
        self.core.waiting = None;
        r
    }

    fn request_inner(
        &mut self,
        peer: &Peer,
        handler: u16,
        token: u64,
        args: &[u64],
        bulk: Option<&[u8]>,
    ) -> Result<Reply, Error> {
        self.send_msg(peer, handler, Kind::Request, token, args, bulk)?;
        let deadline = Instant::now() + self.core.timeout;
        let mut idle = Idle::default();
        loop {
            if let Some((_, Some(_))) = &self.core.waiting {
                let (_, r) = self.core.waiting.take().expect("checked");
                return Ok(r.expect("checked"));
            }
            if self.poll() == 0 {
                if let Err(()) = self.idle(&mut idle, deadline) {
                    return Err(Error::Timeout(format!(
                        "no reply from {:?} within {:?}",
                        peer.name, self.core.timeout
                    )));
                }
            } else {
                self.got_work(&mut idle);
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
            if self.idle(&mut idle, deadline).is_err() {
                return 0;
            }
        }
    }

    /// One idle step of a waiting receiver whose last poll found nothing:
    /// spin while within the spin budget, else sleep on the doorbell. `Err` once `deadline` has passed.
    fn idle(&mut self, st: &mut Idle, deadline: Instant) -> Result<(), ()> {
        st.polls = st.polls.wrapping_add(1);
        let Some(spin) = self.core.spin else {
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
        if self.poll() > 0 {
            self.core.seg.doorbell().cancel();
            *st = Idle::default();
            return Ok(());
        }
        // Something handed out but not published: its sender may have died,
        // so wake in time to recover the slot (a quarter lease, as the
        // liveness checks).
        let in_flight = self.in_flight();
        let cap = if in_flight {
            (self.core.lease / 4).max(Duration::from_micros(1))
        } else {
            SLEEP_CAP
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if self.core.seg.doorbell().sleep(Some(left.min(cap))) {
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
            && let Some(spin) = self.core.spin
        {
            self.core.spin_now = spin;
        }
        *st = Idle::default();
    }

    /// Whether either queue has tickets handed out beyond its head.
    fn in_flight(&self) -> bool {
        [REQUESTS, REPLIES].iter().any(|&i| {
            let tail = self.core.seg.queue(i).tail();
            super::word::seq_diff(tail, self.core.heads[i].next()) > 0
        })
    }

    /// Request-queue tickets handed out to senders and not yet delivered,
    /// recovered or revoked (0 when nothing is in flight).
    pub fn backlog(&self) -> u64 {
        let tail = self.core.seg.queue(REQUESTS).tail();
        super::word::seq_diff(tail, self.core.heads[REQUESTS].next()).max(0) as u64
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        self.core.stats
    }

    /// The problems met while polling (rejected packets, unknown handlers,
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
    fn open(name: &str, env: RealEnv, timeout: Duration) -> Result<Self, Error> {
        let seg = Segment::open(name)?;
        Ok(Self {
            seg,
            name: name.to_string(),
            env,
            timeout,
        })
    }

    /// Maps the endpoint `name` for sending without an endpoint of one's own
    /// (one-way messages only; the wait for space does not poll anything).
    pub fn connect(name: &str, options: &Options) -> Result<Self, Error> {
        Self::open(
            name,
            RealEnv {
                lease_ns: options.lease.as_nanos() as u64,
            },
            options.timeout,
        )
    }

    /// The peer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The claim algorithm of the peer's queues.
    pub fn claim(&self) -> Claim {
        self.seg.geometry().claim
    }

    /// Sends a one-way message without polling while waiting (for processes
    /// that only send; a receiver that never polls makes this time out).
    /// While the queue is full it spins a little, then sleeps on the queue's
    /// space bell until the receiver frees slots (at most 10 ms at a time).
    /// Safe to call from several threads at once.
    pub fn send(&self, handler: u16, args: &[u64], bulk: Option<&[u8]>) -> Result<(), Error> {
        let pid = std::process::id();
        let msg = Outgoing {
            handler,
            kind: Kind::OneWay,
            token: 0,
            from: [0, 0],
            args,
            bulk,
        };
        if args.len() > MAX_ARGS {
            return Err(Error::InvalidArgument(format!(
                "{} argument words; a packet carries at most {MAX_ARGS}",
                args.len()
            )));
        }
        let deadline = Instant::now() + self.timeout;
        let mut backoff = Backoff::new(100, 20_000);
        let mut spins = 0u32;
        let mut st = SendStats::default();
        let lock = self.seg.lock(REQUESTS);
        self.seg
            .queue(REQUESTS)
            .send(
                pid,
                lock.as_ref().map(|l| l as _),
                &msg,
                &self.env,
                &mut |b| {
                    sleep_or_step(
                        b,
                        &mut spins,
                        &mut backoff,
                        deadline,
                        "a send waiting for queue space",
                    )
                },
                &mut st,
            )
            .map(|_| ())
    }
}
