//! Loom models of the shared-memory message queue's protocol (paper 004 §3,
//! `mpsync::msgq::ring`) on heap queues and heap connection areas: payloads
//! written into a connection's private record (and bulk block) before the
//! claim, the claim publishing with one CAS, the receiver validating and
//! freeing the record (a seqlock CAS) before the slot; senders of one
//! connection sharing its records; the receiver revoking an unpublished
//! ticket racing the slow sender's CAS; a sender taking back a record whose
//! slot a peer destroyed, racing the receiver's copy-out; the locked claim
//! with its lock broken (two senders inside); the receiver's doorbell, the
//! senders' space bell (ring full, records all in flight); a connection's
//! reply ring and its bell; and `Doorbell::sleep_with` on two bells.
//!
//! Threads act twice (two messages, two replies, two sleeps), so a slot's,
//! record's or block's second generation is exercised. Payloads are checked by
//! value: a receiver that could read a payload not ordered after its writes (a
//! Relaxed publish, a record freed before it is copied) sees loom's stale or
//! overwritten value and fails the check. Sleeps have no time limit and
//! sched's futex model is strict: a lost wake-up is a deadlock loom reports.
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p mpsync --release --target-dir target/loom --test loom_msgq -- --test-threads=1`
#![cfg(loom)]

use loom::thread;
use mpsync::msgq::Error;
use mpsync::msgq::ring::{
    Blocked, ClaimLock, Env, Event, Head, HeapConn, HeapQueue, Kind, Outgoing, SendStats,
};
use mpsync::msgq::word::{self, FREE, READY};
use mpsync::sync::{Arc, Ordering};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};

fn builder(preemptions: usize) -> Model {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    Model(b)
}

/// A loom builder that reports how many executions it explored (on stderr:
/// `--nocapture` shows it), so that a model shrunk by accident shows.
struct Model(loom::model::Builder);

impl Model {
    fn branches(mut self, n: usize) -> Self {
        self.0.max_branches = n;
        self
    }

    fn check(self, f: impl Fn() + Sync + Send + 'static) {
        let n = std::sync::Arc::new(AtomicUsize::new(0));
        let m = n.clone();
        self.0.check(move || {
            m.fetch_add(1, StdOrdering::Relaxed);
            f()
        });
        eprintln!("{} executions", n.load(StdOrdering::Relaxed));
    }
}

/// A lease no model reaches: tickets are never revoked.
const NEVER: u64 = u64::MAX;

/// Time advances by 100 ns per reading (the receiver reads it only while a
/// ticket is pending at its head), so a lease of 300 lets it revoke a ticket
/// after a few polls that found it unpublished.
struct ModelEnv {
    now: Cell<u64>,
    lease: u64,
}

impl ModelEnv {
    fn new(lease: u64) -> Self {
        Self {
            now: Cell::new(0),
            lease,
        }
    }
}

impl Env for ModelEnv {
    fn now_ns(&self) -> u64 {
        self.now.set(self.now.get() + 100);
        self.now.get()
    }
    fn lease_ns(&self) -> u64 {
        self.lease
    }
}

fn bulk_of(v: u64) -> [u8; 8] {
    [v as u8; 8]
}

/// How a sender waits when it must.
#[derive(Clone, Copy)]
enum Wait {
    /// Yields and looks again.
    Yield,
    /// Sleeps on the space bell (no time limit) when only the receiver can
    /// end the wait; yields otherwise.
    Sleep,
}

/// Sends message `v` through connection `sid`, whose area is `c`: its value
/// as its one argument and as its token (both checked), with bulk data
/// `[v; 8]` if `bulk`. Returns the sender's counters.
fn send(
    q: &HeapQueue,
    c: &HeapConn,
    sid: u32,
    lock: Option<&dyn ClaimLock>,
    v: u64,
    bulk: bool,
    wait: Wait,
) -> SendStats {
    let env = ModelEnv::new(NEVER);
    let mut st = SendStats::default();
    let (data, args) = (bulk_of(v), [v]);
    let msg = Outgoing {
        handler: 1,
        kind: Kind::OneWay,
        token: v,
        args: &args,
        bulk: bulk.then_some(&data[..]),
    };
    q.queue()
        .send(
            &c.sender(sid, u64::MAX),
            lock,
            &msg,
            &env,
            &mut |b: &Blocked<'_>| {
                match wait {
                    Wait::Sleep if b.can_sleep() => {
                        b.sleep(None);
                    }
                    _ => thread::yield_now(),
                }
                Ok::<(), Error>(())
            },
            &mut st,
        )
        .expect("send");
    st
}

/// A delivered message: (connection, value, bulk data).
type Got = (u32, u64, Option<Vec<u8>>);

/// The receiver's side: its head, clock and buffer, and the connections it
/// knows (`(sid, area)`).
struct Receiver<'a> {
    q: &'a HeapQueue,
    conns: Vec<(u32, &'a HeapConn)>,
    head: Head,
    env: ModelEnv,
    buf: Vec<u8>,
    rejected: usize,
    revoked: usize,
}

impl<'a> Receiver<'a> {
    fn new(q: &'a HeapQueue, conns: &[(u32, &'a HeapConn)], lease: u64) -> Self {
        Self {
            q,
            conns: conns.to_vec(),
            head: Head::default(),
            env: ModelEnv::new(lease),
            buf: Vec::new(),
            rejected: 0,
            revoked: 0,
        }
    }

    /// One poll; a message is checked (handler, one argument equal to its
    /// token, bulk data `[v; 8]` when it has any) and returned. Rejected
    /// slots panic unless `tolerate_rejects` (a model with a peer that
    /// writes the ring).
    fn poll(&mut self, tolerate_rejects: bool) -> Option<Got> {
        let conns = &self.conns;
        let ev = self.q.queue().poll_one(
            &mut self.head,
            &self.env,
            &|sid| conns.iter().find(|c| c.0 == sid).map(|c| c.1.area()),
            true,
            &mut self.buf,
        );
        match ev {
            Event::Message(m) => {
                assert_eq!((m.handler, m.kind, m.nargs), (1, Kind::OneWay, 1));
                let v = m.args[0];
                assert_eq!(m.token, v, "token and argument of one message");
                let bulk = m.has_bulk.then(|| {
                    assert_eq!(self.buf, bulk_of(v), "bulk data of message {v}");
                    self.buf.clone()
                });
                Some((m.sid, v, bulk))
            }
            Event::Rejected(_) if tolerate_rejects => {
                self.rejected += 1;
                None
            }
            Event::Rejected(why) => panic!("an honest message was rejected: {why}"),
            Event::Revoked { .. } => {
                self.revoked += 1;
                None
            }
            Event::Empty | Event::Pending => None,
            Event::Unknown { sid } => panic!("unknown connection {sid}"),
        }
    }

    /// Polls (yielding between empty polls) until `n` messages arrived.
    fn take(&mut self, n: usize) -> Vec<Got> {
        let mut got = Vec::new();
        while got.len() < n {
            match self.poll(false) {
                Some(m) => got.push(m),
                None => thread::yield_now(),
            }
        }
        got
    }

    /// As [`take`](Self::take), ringing the space bell after every message
    /// (a slot and a record were freed) and sleeping on the doorbell (no
    /// time limit) while the ring is empty: announce, look once more, park.
    fn take_sleeping(&mut self, n: usize) -> Vec<Got> {
        let mut got = Vec::new();
        while got.len() < n {
            if let Some(m) = self.poll(false) {
                got.push(m);
                self.q.queue().wake_senders();
                continue;
            }
            self.q.doorbell().announce();
            if let Some(m) = self.poll(false) {
                self.q.doorbell().cancel();
                got.push(m);
                self.q.queue().wake_senders();
                continue;
            }
            self.q.doorbell().sleep(None);
        }
        got
    }
}

/// The values connection `sid` delivered, in order.
fn of(got: &[Got], sid: u32) -> Vec<u64> {
    got.iter().filter(|m| m.0 == sid).map(|m| m.1).collect()
}

/// Every record and block of `c` is free.
fn all_free(c: &HeapConn, records: usize, blocks: usize) {
    for k in 0..records {
        let w = c.record(k).record_word().load(Ordering::Relaxed);
        assert_eq!(word::gen_state(w), FREE, "record {k}: {w:#x}");
    }
    for j in 0..blocks {
        let w = c.block(j).block_word().load(Ordering::Relaxed);
        assert_eq!(word::gen_state(w), FREE, "block {j}: {w:#x}");
    }
}

/// (a) Two connections on a two-slot ring. Connection 1 (one record, one
/// block) sends two bulk messages, so its record and its block are each
/// reused a generation later; connection 2 sends one short message; a slot
/// is used on its second lap. Claims race each other and the receiver's
/// frees. Exactly once, per-sender order, payload and bulk data intact;
/// nothing retried, lost or repaired (no lease expires); every record and
/// block free at the end. `Wait::Yield`: senders and the receiver spin
/// (yielding), so the receiver looks at any moment; `Wait::Sleep`: they
/// sleep on the bells, which leaves room for one more preemption.
fn two_connections_bulk(wait: Wait, preemptions: usize) {
    builder(preemptions).branches(20_000).check(move || {
        let q = Arc::new(HeapQueue::new(2).unwrap());
        let c1 = Arc::new(HeapConn::new(1, 1, 1, 8).unwrap());
        let c2 = Arc::new(HeapConn::new(1, 1, 1, 8).unwrap());
        let s1 = {
            let (q, c) = (q.clone(), c1.clone());
            thread::spawn(move || {
                let a = send(&q, &c, 1, None, 10, true, wait);
                let b = send(&q, &c, 1, None, 11, true, wait);
                (a, b)
            })
        };
        let s2 = {
            let (q, c) = (q.clone(), c2.clone());
            thread::spawn(move || send(&q, &c, 2, None, 20, false, wait))
        };
        let mut r = Receiver::new(&q, &[(1, &c1), (2, &c2)], NEVER);
        let got = match wait {
            Wait::Yield => r.take(3),
            Wait::Sleep => r.take_sleeping(3),
        };
        let (a, b) = s1.join().unwrap();
        let c = s2.join().unwrap();
        assert_eq!(of(&got, 1), [10, 11], "connection 1: order, exactly once");
        assert_eq!(of(&got, 2), [20], "connection 2: exactly once");
        assert!(got.iter().all(|m| m.2.is_some() == (m.0 == 1)), "bulk");
        for st in [a, b, c] {
            assert_eq!(st, SendStats::default(), "no retry, loss or lock break");
        }
        assert_eq!(r.head.tail_repairs(), 0);
        assert!(r.poll(false).is_none(), "nothing more");
        all_free(&c1, 1, 1);
        all_free(&c2, 1, 1);
    });
}

#[test]
fn loom_msgq_two_connections_bulk() {
    two_connections_bulk(Wait::Yield, 1);
}

#[test]
fn loom_msgq_two_connections_bulk_sleeping() {
    two_connections_bulk(Wait::Sleep, 2);
}

/// (b) Two threads of ONE connection share its `records` records (and its
/// hint), each sending two messages through a two-slot ring: they race for
/// the records (with one record, every message waits for the previous
/// one's to be freed, and a thread out of records looks for lost ones among
/// the other thread's). Threads that must wait sleep on the space bell, and
/// the receiver on its doorbell (spinning threads would multiply the
/// executions). Exactly once, per-thread order, nothing retried or lost,
/// every record free at the end.
fn one_connection_two_threads(records: usize) {
    builder(1).check(move || {
        let q = Arc::new(HeapQueue::new(2).unwrap());
        let c = Arc::new(HeapConn::new(records, 1, 1, 8).unwrap());
        let senders: Vec<_> = (1..=2u64)
            .map(|i| {
                let (q, c) = (q.clone(), c.clone());
                thread::spawn(move || {
                    let a = send(&q, &c, 5, None, i * 10, false, Wait::Sleep);
                    let b = send(&q, &c, 5, None, i * 10 + 1, false, Wait::Sleep);
                    (a, b)
                })
            })
            .collect();
        let mut r = Receiver::new(&q, &[(5, &c)], NEVER);
        let got = r.take_sleeping(4);
        for s in senders {
            let (a, b) = s.join().unwrap();
            assert_eq!(a, SendStats::default(), "nothing retried or lost");
            assert_eq!(b, SendStats::default(), "nothing retried or lost");
        }
        let vals = of(&got, 5);
        for i in 1..=2u64 {
            let mine: Vec<u64> = vals.iter().copied().filter(|v| v / 10 == i).collect();
            assert_eq!(
                mine,
                [i * 10, i * 10 + 1],
                "thread {i}: order, exactly once"
            );
        }
        assert!(r.poll(false).is_none(), "nothing more");
        all_free(&c, records, 1);
    });
}

#[test]
fn loom_msgq_one_connection_two_threads_one_record() {
    one_connection_two_threads(1);
}

#[test]
fn loom_msgq_one_connection_two_threads_two_records() {
    one_connection_two_threads(2);
}

/// Executions of [`loom_msgq_revoke_races_publish`] in which the receiver
/// revoked the sender's ticket.
static REVOKED: AtomicUsize = AtomicUsize::new(0);

/// (c) A sender takes a ticket and races the receiver, which revokes it
/// when it stays unpublished for a lease (three polls here): either the
/// sender's slot CAS wins, or it fails, the sender takes its record back and
/// publishes with a new ticket. The sender sends twice (after a revocation
/// the second message uses the revoked slot's next lap). Never delivered
/// twice, never lost, in order; both records free at the end; and some
/// execution did revoke (the model reaches the race).
#[test]
fn loom_msgq_revoke_races_publish() {
    REVOKED.store(0, StdOrdering::Relaxed);
    builder(3).check(|| {
        let q = Arc::new(HeapQueue::new(2).unwrap());
        let c = Arc::new(HeapConn::new(2, 1, 1, 8).unwrap());
        let s = {
            let (q, c) = (q.clone(), c.clone());
            thread::spawn(move || {
                let a = send(&q, &c, 1, None, 7, false, Wait::Yield);
                let b = send(&q, &c, 1, None, 8, false, Wait::Yield);
                a.retries + b.retries
            })
        };
        let mut r = Receiver::new(&q, &[(1, &c)], 300);
        let mut got = Vec::new();
        let mut polls = 0;
        while got.len() < 2 {
            match r.poll(false) {
                Some(m) => got.push(m.1),
                // Poll a few times before yielding: time advances with each
                // poll that finds a ticket pending, so a sender preempted
                // between its tail CAS and its slot CAS gets revoked here
                // (a yield would hand the processor to the sender instead).
                None if polls % 8 != 7 => {}
                None => thread::yield_now(),
            }
            polls += 1;
            assert!(polls < 1000, "a message never arrived: got {got:?}");
        }
        let retries = s.join().unwrap();
        assert_eq!(got, [7, 8], "order, exactly once");
        assert_eq!(retries as usize, r.revoked, "one retry per revoked ticket");
        if r.revoked > 0 {
            REVOKED.fetch_add(1, StdOrdering::Relaxed);
        }
        for _ in 0..3 {
            assert!(r.poll(false).is_none(), "not twice");
        }
        all_free(&c, 2, 1);
    });
    assert!(
        REVOKED.load(StdOrdering::Relaxed) > 0,
        "no execution revoked a ticket: the model misses the race"
    );
}

/// Executions of [`loom_msgq_copy_out_races_reclaim`] in which the sender
/// took its record back, and in which the receiver delivered message 1.
static RECLAIMED: AtomicUsize = AtomicUsize::new(0);
static DELIVERED: AtomicUsize = AtomicUsize::new(0);

/// (d) Message 1 (bulk data; the connection's only record and block) is
/// published, and then its slot is destroyed — here by the sending thread
/// itself, playing a peer of the same connection: a FREE word of a later lap
/// — racing the receiver, which may already be copying the record out. The
/// sender, out of records for message 2, takes back the SENT record whose
/// slot no longer announces it (counted as lost), racing the receiver's
/// seqlock CAS on the record. Exactly one of them consumes the record:
/// message 1 is delivered once or lost once, never both, never neither;
/// message 2 exactly once; record and block free at the end. Some
/// executions go each way.
#[test]
fn loom_msgq_copy_out_races_reclaim() {
    RECLAIMED.store(0, StdOrdering::Relaxed);
    DELIVERED.store(0, StdOrdering::Relaxed);
    builder(3).check(|| {
        let q = Arc::new(HeapQueue::new(2).unwrap());
        let c = Arc::new(HeapConn::new(1, 1, 1, 8).unwrap());
        let s = {
            let (q, c) = (q.clone(), c.clone());
            thread::spawn(move || {
                let a = send(&q, &c, 1, None, 1, true, Wait::Yield);
                // The peer's write (unless the receiver freed the slot first).
                let _ = q.slot_word(0).compare_exchange(
                    word::slot(READY, 1, 0, 0),
                    word::free(2),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                let b = send(&q, &c, 1, None, 2, false, Wait::Yield);
                a.lost + b.lost
            })
        };
        let mut r = Receiver::new(&q, &[(1, &c)], NEVER);
        let mut got = Vec::new();
        while !got.iter().any(|m: &Got| m.1 == 2) {
            match r.poll(true) {
                Some(m) => got.push(m),
                None => thread::yield_now(),
            }
        }
        let lost = s.join().unwrap();
        let ones = got.iter().filter(|m| m.1 == 1).count();
        assert_eq!(
            ones as u64 + lost,
            1,
            "message 1 delivered {ones} times and lost {lost} times"
        );
        assert_eq!(of(&got, 1).last(), Some(&2), "message 2, last");
        assert_eq!(got.iter().filter(|m| m.1 == 2).count(), 1);
        // The receiver rejected what it could not deliver: the destroyed
        // slot, or a copy its sender's reclaim overtook.
        assert_eq!(r.rejected as u64, lost, "a rejection per lost message");
        for _ in 0..2 {
            assert!(r.poll(true).is_none(), "nothing more");
        }
        all_free(&c, 1, 1);
        if lost > 0 {
            RECLAIMED.fetch_add(1, StdOrdering::Relaxed);
        } else {
            DELIVERED.fetch_add(1, StdOrdering::Relaxed);
        }
    });
    assert!(RECLAIMED.load(StdOrdering::Relaxed) > 0, "never reclaimed");
    assert!(DELIVERED.load(StdOrdering::Relaxed) > 0, "never delivered");
}

/// A claim lock that is always found broken: every sender runs the locked
/// claim at once, as after a lock lease expired.
struct Broken;

impl ClaimLock for Broken {
    fn with_lock(&self, f: &mut dyn FnMut(), _deadline_ns: u64) -> Result<bool, Error> {
        f();
        Ok(true)
    }
}

/// Two connections (two records each) send two messages each through a
/// two-slot ring, sleeping on the space bell when they must — lock-free, or
/// through the locked claim with its lock always found broken; the receiver
/// sleeps on its doorbell while the ring is empty. Exactly once, per-sender
/// order, every record free at the end.
fn two_senders(broken_lock: bool) {
    builder(1).branches(20_000).check(move || {
        let q = Arc::new(HeapQueue::new(2).unwrap());
        let conns: Vec<_> = (0..2)
            .map(|_| Arc::new(HeapConn::new(2, 1, 1, 8).unwrap()))
            .collect();
        let senders: Vec<_> = (1..=2u32)
            .map(|sid| {
                let (q, c) = (q.clone(), conns[sid as usize - 1].clone());
                thread::spawn(move || {
                    let lock: Option<&dyn ClaimLock> = broken_lock.then_some(&Broken);
                    for i in 0..2 {
                        let v = sid as u64 * 10 + i;
                        send(&q, &c, sid, lock, v, false, Wait::Sleep);
                    }
                })
            })
            .collect();
        let mut r = Receiver::new(&q, &[(1, &conns[0]), (2, &conns[1])], NEVER);
        let got = r.take_sleeping(4);
        for s in senders {
            s.join().unwrap();
        }
        for sid in 1..=2u32 {
            let v = sid as u64 * 10;
            assert_eq!(of(&got, sid), [v, v + 1], "connection {sid}");
            all_free(&conns[sid as usize - 1], 2, 1);
        }
    });
}

/// The locked claim (Figure 2) with two senders inside at once (the lock
/// broken): still exactly once and in per-sender order (every step is a
/// CAS from an exact word; a tail store lost to the other sender is
/// repaired by the next step).
#[test]
fn loom_msgq_locked_claim_broken_lock() {
    two_senders(true);
}

/// One connection with `records` records sends messages `0..n` through a
/// ring of `slots` slots, waiting as `wait` says; the receiver takes them,
/// ringing the space bell after each and sleeping on its doorbell while the
/// ring is empty. Exactly once, in order; every record free at the end.
fn one_sender(preemptions: usize, slots: usize, records: usize, n: u64, wait: Wait) {
    builder(preemptions).check(move || {
        let q = Arc::new(HeapQueue::new(slots).unwrap());
        let c = Arc::new(HeapConn::new(records, 1, 1, 8).unwrap());
        let s = {
            let (q, c) = (q.clone(), c.clone());
            thread::spawn(move || {
                for v in 0..n {
                    send(&q, &c, 1, None, v, false, wait);
                }
            })
        };
        let mut r = Receiver::new(&q, &[(1, &c)], NEVER);
        let got = r.take_sleeping(n as usize);
        s.join().unwrap();
        assert_eq!(of(&got, 1), (0..n).collect::<Vec<_>>(), "in order, once");
        all_free(&c, records, 1);
    });
}

/// (e) The receiver's doorbell: a sender publishes two messages and rings
/// after each; the receiver polls, announces that it sleeps, looks once
/// more and parks with no time limit. A lost wake-up (the receiver asleep
/// while a published message waits) leaves every thread blocked: a
/// deadlock.
#[test]
fn loom_msgq_doorbell_no_lost_wakeup() {
    one_sender(3, 2, 2, 2, Wait::Yield);
}

/// (e) The senders' space bell, the ring full: one sender sends four
/// messages through a two-slot ring (three records: the ring, not the
/// records, runs out), so it finds the ring full and sleeps (no time limit)
/// on the space bell, more than once; the receiver rings it after every
/// message it takes, and sleeps on its doorbell while the ring is empty.
/// A lost wake-up on either bell is a deadlock. Exactly once, in order.
#[test]
fn loom_msgq_space_bell_ring_full() {
    one_sender(3, 2, 3, 4, Wait::Sleep);
}

/// (e) The space bell, the records all in flight: one sender with one
/// record sends three messages through a four-slot ring, so every message
/// after the first waits for the receiver to free the record, asleep on the
/// space bell. A lost wake-up is a deadlock. Exactly once, in order, the
/// record free at the end.
#[test]
fn loom_msgq_space_bell_records_in_flight() {
    one_sender(3, 4, 1, 3, Wait::Sleep);
}

/// (e) Two senders (two connections), two messages each, through a two-slot
/// ring: both may sleep on the space bell at once (one flag for all
/// sleepers; a ring wakes every one), while the receiver frees slots and
/// rings. No lost wake-up, exactly once, per-sender order.
#[test]
fn loom_msgq_space_bell_two_sleepers() {
    two_senders(false);
}

/// Executions of [`loom_msgq_reply_ring`] in which a reply found the ring full.
static FULL: AtomicUsize = AtomicUsize::new(0);

/// (f) A connection's reply ring (two slots): the server puts three replies
/// (the second with bulk data), each ringing the client's reply bell; a put
/// that finds its slot still holding an untaken reply fails at once (no
/// wait, no number taken) and the server tries again later. The client
/// takes replies, and while none is there announces on the bell, looks once
/// more (`peek`) and sleeps with no time limit. No lost wake-up (a deadlock),
/// replies in order with their payloads; some execution found the ring full.
#[test]
fn loom_msgq_reply_ring() {
    FULL.store(0, StdOrdering::Relaxed);
    builder(3).check(|| {
        let c = Arc::new(HeapConn::new(1, 1, 2, 8).unwrap());
        let server = {
            let c = c.clone();
            thread::spawn(move || {
                let r = c.replies();
                let mut tail = 0u64;
                for i in 0..3u64 {
                    let data = bulk_of(i);
                    loop {
                        let before = tail;
                        match r.put(&mut tail, 100 + i, &[i], (i == 1).then_some(&data[..])) {
                            Ok(()) => break,
                            Err(e) => {
                                assert!(e.to_string().contains("reply ring is full"), "{e}");
                                assert_eq!(tail, before, "a failed reply takes no number");
                                FULL.fetch_add(1, StdOrdering::Relaxed);
                                thread::yield_now();
                            }
                        }
                    }
                }
            })
        };
        let r = c.replies();
        let mut head = 0u64;
        let mut got = Vec::new();
        while got.len() < 3 {
            if let Some(rep) = r.take(&mut head) {
                got.push(rep.expect("a reply the server wrote"));
                continue;
            }
            r.bell().announce();
            if r.peek(head) {
                r.bell().cancel();
                continue;
            }
            // Woken by a ring (or by a late wake call of an earlier ring, a
            // spurious wake-up: the loop looks again).
            r.bell().sleep(None);
        }
        server.join().unwrap();
        for (i, rep) in got.iter().enumerate() {
            let i = i as u64;
            assert_eq!((rep.token, &rep.args[..]), (100 + i, &[i][..]), "reply {i}");
            assert_eq!(rep.bulk, (i == 1).then(|| bulk_of(i).to_vec()), "reply {i}");
        }
        assert!(r.take(&mut head).is_none(), "nothing more");
    });
    assert!(
        FULL.load(StdOrdering::Relaxed) > 0,
        "no reply ever found the ring full"
    );
}

/// (g) `Doorbell::sleep_with`: a client waits for a request to arrive in its
/// own queue (a sender rings its doorbell) AND a reply to arrive in its
/// connection's reply ring (the server rings the reply bell), sleeping on
/// both bells at once with no time limit (`sched::park_shared_any`). Either
/// ring wakes it, and a woken sleep says it was rung; it sleeps up to twice.
/// A sleep deaf to one of the bells is a deadlock.
#[test]
fn loom_msgq_sleep_with_two_bells() {
    builder(3).check(|| {
        let q = Arc::new(HeapQueue::new(2).unwrap());
        let c = Arc::new(HeapConn::new(1, 1, 1, 8).unwrap());
        let s = {
            let (q, c) = (q.clone(), c.clone());
            thread::spawn(move || {
                send(&q, &c, 1, None, 3, false, Wait::Yield);
            })
        };
        let server = {
            let c = c.clone();
            thread::spawn(move || {
                c.replies().put(&mut 0, 42, &[4], None).expect("put");
            })
        };
        let mut r = Receiver::new(&q, &[(1, &c)], NEVER);
        let replies = c.replies();
        let bell = q.doorbell();
        let (mut msg, mut reply, mut rhead) = (None, None, 0u64);
        // Looks at both; returns whether something new arrived.
        let mut look = |msg: &mut Option<Got>, reply: &mut Option<_>| {
            let before = (msg.is_some(), reply.is_some());
            if msg.is_none() {
                *msg = r.poll(false);
            }
            if reply.is_none() {
                *reply = replies.take(&mut rhead);
            }
            (msg.is_some(), reply.is_some()) != before
        };
        while msg.is_none() || reply.is_none() {
            if look(&mut msg, &mut reply) {
                continue;
            }
            bell.announce();
            replies.bell().announce();
            if look(&mut msg, &mut reply) {
                bell.cancel();
                replies.bell().cancel();
                continue;
            }
            // Woken by a ring of either bell (or spuriously, by a late wake
            // call of an earlier ring: the loop looks again).
            bell.sleep_with(replies.bell(), None);
        }
        s.join().unwrap();
        server.join().unwrap();
        assert_eq!(msg.map(|m| m.1), Some(3));
        let rep = reply.unwrap().unwrap();
        assert_eq!((rep.token, rep.args), (42, vec![4]));
    });
}
