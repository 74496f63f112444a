//! Loom models of the shared-memory message queue's protocol (paper 004 §3,
//! `mpsync::msgq::ring`) on a heap queue: the lock-free two-CAS claim racing
//! other senders and the receiver's release (senders act twice, so a packet's
//! second lap is exercised), the bulk-before-packet order with one block, the
//! receiver's revocation of an unclaimed ticket racing the slow claimant's CAS,
//! recovery of a packet claimed by a process that dies, and the two doorbells:
//! the receiver's (sleeping while the ring is empty) and the senders' space
//! bell (sleeping while it is full).
//!
//! Payloads are checked by value: a receiver that could read a payload not
//! ordered after its writes (a Relaxed publish, a release before the payload is
//! written) sees loom's stale value and fails the check.
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p mpsync --release --target-dir target/loom --test loom_msgq -- --test-threads=1`
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use mpsync::msgq::ring::{Env, Event, Head, HeapQueue, Kind, Outgoing, SendStats};
use mpsync::msgq::word;
use mpsync::sync::Arc;
use std::cell::Cell;

fn builder() -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b
}

/// Time advances by a quarter lease per reading, so a stuck slot is acted on
/// after a few polls; liveness comes from the model's `dead` flag.
struct ModelEnv {
    now: Cell<u64>,
    dead: Option<Arc<AtomicBool>>,
}

impl ModelEnv {
    fn new(dead: Option<Arc<AtomicBool>>) -> Self {
        Self {
            now: Cell::new(0),
            dead,
        }
    }
}

impl Env for ModelEnv {
    fn now_ns(&self) -> u64 {
        self.now.set(self.now.get() + 100);
        self.now.get()
    }
    fn alive(&self, pid: u32) -> bool {
        match (&self.dead, pid) {
            (Some(d), 99) => !d.load(Ordering::SeqCst),
            _ => true,
        }
    }
    fn lease_ns(&self) -> u64 {
        400
    }
}

fn out<'a>(args: &'a [u64], bulk: Option<&'a [u8]>) -> Outgoing<'a> {
    Outgoing {
        handler: 1,
        kind: Kind::OneWay,
        token: 0,
        from: [0, 0],
        args,
        bulk,
    }
}

fn send(q: &HeapQueue, pid: u32, args: &[u64], bulk: Option<&[u8]>) -> SendStats {
    let env = ModelEnv::new(None);
    let mut st = SendStats::default();
    q.queue()
        .send(
            pid,
            None,
            &out(args, bulk),
            &env,
            &mut |_| {
                thread::yield_now();
                Ok(())
            },
            &mut st,
        )
        .expect("send");
    st
}

/// Polls until `n` messages arrived; returns (pid, arg0, bulk) in delivery order.
fn receive(q: &HeapQueue, env: &ModelEnv, n: usize) -> Vec<(u32, u64, Vec<u8>)> {
    let mut head = Head::default();
    let mut buf = Vec::new();
    let mut got = Vec::new();
    while got.len() < n {
        match q.queue().poll_one(&mut head, env, &mut buf) {
            Event::Message(m) => got.push((m.sender_pid, m.args[0], buf.clone())),
            Event::Rejected(why) => panic!("rejected: {why}"),
            _ => thread::yield_now(),
        }
    }
    got
}

/// Two senders on a two-packet ring with one bulk block: sender 1 sends a
/// bulk message then a short one, sender 2 a bulk message — so the bulk block
/// is contended (claimed before the packet, §3.2) and one packet is used on
/// its second lap. Claims race each other and the receiver's releases.
/// Exactly once, per-sender order, payloads and bulk data intact.
#[test]
fn loom_msgq_two_senders_bulk_first() {
    // Three threads each spinning while they wait: one preemption and a
    // larger branch budget keep the model to seconds.
    let mut b = builder();
    b.preemption_bound = Some(1);
    b.max_branches = 20_000;
    b.check(|| {
        let q = Arc::new(HeapQueue::new(2, 1, 8).unwrap());
        let senders: Vec<_> = (1..=2u32)
            .map(|pid| {
                let q = q.clone();
                thread::spawn(move || {
                    for i in 0..(3 - pid as u64) {
                        let v = pid as u64 * 10 + i;
                        let b = [v as u8; 3];
                        send(&q, pid, &[v], (i == 0).then_some(&b[..]));
                    }
                })
            })
            .collect();
        let got = receive(&q, &ModelEnv::new(None), 3);
        for s in senders {
            s.join().unwrap();
        }
        for pid in 1..=2u32 {
            let mine: Vec<_> = got.iter().filter(|m| m.0 == pid).collect();
            let vals: Vec<u64> = mine.iter().map(|m| m.1).collect();
            let want: Vec<u64> = (0..(3 - pid as u64)).map(|i| pid as u64 * 10 + i).collect();
            assert_eq!(vals, want, "order/exactly once");
            assert_eq!(mine[0].2, vec![(pid * 10) as u8; 3], "bulk data");
        }
    });
}

/// A sender takes a ticket and races the receiver, which revokes the ticket
/// if it stays unclaimed for a lease: either the claim CAS wins or the sender
/// sees a later lap and takes a new ticket; the message arrives exactly once.
#[test]
fn loom_msgq_revoke_races_claim() {
    builder().check(|| {
        let q = Arc::new(HeapQueue::new(2, 1, 8).unwrap());
        let s = {
            let q = q.clone();
            thread::spawn(move || send(&q, 1, &[7], None))
        };
        let env = ModelEnv::new(None);
        let mut head = Head::default();
        let mut buf = Vec::new();
        let mut got = 0;
        let mut polls = 0;
        while got == 0 {
            match q.queue().poll_one(&mut head, &env, &mut buf) {
                Event::Message(m) => {
                    assert_eq!(m.args[0], 7);
                    got += 1;
                }
                Event::Rejected(why) => panic!("rejected: {why}"),
                // Spin a few polls before yielding: time advances with each
                // poll, so a sender preempted between its tail CAS and its
                // type CAS gets its ticket revoked here (a yield would hand
                // the processor to the sender instead).
                _ if polls % 8 != 7 => {}
                _ => thread::yield_now(),
            }
            polls += 1;
            assert!(polls < 1000, "the message never arrived");
        }
        s.join().unwrap();
        // Nothing more arrives: not twice.
        for _ in 0..3 {
            assert!(!matches!(
                q.queue().poll_one(&mut head, &env, &mut buf),
                Event::Message(_)
            ));
        }
    });
}

/// Process 99 takes a ticket and claims its packet, scribbles on it and dies;
/// a live sender sends one message. The receiver frees 99's packet (only once
/// it is dead: while alive it waits) and delivers the live message once.
#[test]
fn loom_msgq_dead_claimant_recovered() {
    builder().check(|| {
        let q = Arc::new(HeapQueue::new(2, 1, 8).unwrap());
        let dead = Arc::new(AtomicBool::new(false));
        let dier = {
            let (q, dead) = (q.clone(), dead.clone());
            thread::spawn(move || {
                // What a sender killed after its type CAS leaves behind.
                let t = q.queue_ctl_tail().fetch_add(1, Ordering::Relaxed);
                let p = q.packet_type_word(t);
                let _ = p.compare_exchange(
                    word::pack(word::FREE, 0, t),
                    word::pack(word::CLAIMED, 99, t),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                );
                dead.store(true, Ordering::SeqCst);
            })
        };
        let live = {
            let q = q.clone();
            thread::spawn(move || send(&q, 1, &[5], None))
        };
        let got = receive(&q, &ModelEnv::new(Some(dead.clone())), 1);
        assert_eq!(got[0].0, 1);
        assert_eq!(got[0].1, 5);
        dier.join().unwrap();
        live.join().unwrap();
    });
}

/// The receiver's doorbell: a sender publishes two messages and rings after
/// each; the receiver polls, announces that it sleeps, looks once more and
/// parks with no time limit (the strict futex model blocks it until a wake).
/// A lost wake-up — the receiver asleep while a published message waits —
/// leaves every thread blocked, which loom reports as a deadlock.
#[test]
fn loom_msgq_doorbell_no_lost_wakeup() {
    builder().check(|| {
        let q = Arc::new(HeapQueue::new(2, 1, 8).unwrap());
        let sender = {
            let q = q.clone();
            thread::spawn(move || {
                send(&q, 1, &[5], None);
                send(&q, 1, &[6], None);
            })
        };
        let env = ModelEnv::new(None);
        let mut head = Head::default();
        let mut buf = Vec::new();
        let mut got = Vec::new();
        let mut take = |got: &mut Vec<u64>| match q.queue().poll_one(&mut head, &env, &mut buf) {
            Event::Message(m) => {
                got.push(m.args[0]);
                true
            }
            Event::Rejected(why) => panic!("rejected: {why}"),
            _ => false,
        };
        while got.len() < 2 {
            if take(&mut got) {
                continue;
            }
            q.doorbell().announce();
            if take(&mut got) {
                q.doorbell().cancel();
                continue;
            }
            q.doorbell().sleep(None);
        }
        assert_eq!(got, [5, 6]);
        sender.join().unwrap();
    });
}

/// Sends one message; when the ring is full and only the receiver can free
/// the slot, sleeps on the queue's space bell with no time limit (announce,
/// look once more, park: [`mpsync::msgq::ring::Blocked::sleep`]) — the strict
/// futex model blocks it until the receiver rings.
fn send_sleeping(q: &HeapQueue, pid: u32, v: u64) {
    let env = ModelEnv::new(None);
    let mut st = SendStats::default();
    q.queue()
        .send(
            pid,
            None,
            &out(&[v], None),
            &env,
            &mut |b| {
                if b.can_sleep() {
                    b.sleep(None);
                } else {
                    thread::yield_now();
                }
                Ok(())
            },
            &mut st,
        )
        .expect("send");
}

/// Receives `n` messages, ringing the space bell after every one it frees,
/// and sleeping on its own doorbell (no time limit) while the ring is empty.
/// Returns (pid, arg0) in delivery order.
fn receive_sleeping(q: &HeapQueue, n: usize) -> Vec<(u32, u64)> {
    let env = ModelEnv::new(None);
    let mut head = Head::default();
    let mut buf = Vec::new();
    let mut got = Vec::new();
    let mut take = |got: &mut Vec<(u32, u64)>| {
        let ev = q.queue().poll_one(&mut head, &env, &mut buf);
        match ev {
            Event::Message(m) => {
                got.push((m.sender_pid, m.args[0]));
                // A slot was freed: wake senders sleeping on the full ring.
                q.queue().wake_senders();
                true
            }
            Event::Rejected(why) => panic!("rejected: {why}"),
            _ => false,
        }
    };
    while got.len() < n {
        if take(&mut got) {
            continue;
        }
        q.doorbell().announce();
        if take(&mut got) {
            q.doorbell().cancel();
            continue;
        }
        q.doorbell().sleep(None);
    }
    got
}

/// The senders' space bell: one sender sends four messages through a
/// two-packet ring, so it finds the ring full and sleeps (no time limit)
/// on the space bell, more than once; the receiver takes messages and rings
/// the space bell after each, and sleeps on its own doorbell while the ring
/// is empty. A lost wake-up on either bell leaves both threads blocked,
/// which loom reports as a deadlock. Exactly once, in order.
#[test]
fn loom_msgq_space_bell_no_lost_wakeup() {
    builder().check(|| {
        let q = Arc::new(HeapQueue::new(2, 1, 8).unwrap());
        let sender = {
            let q = q.clone();
            thread::spawn(move || {
                for v in 0..4 {
                    send_sleeping(&q, 1, v);
                }
            })
        };
        let got = receive_sleeping(&q, 4);
        assert_eq!(got, [(1, 0), (1, 1), (1, 2), (1, 3)]);
        sender.join().unwrap();
    });
}

/// Two senders, two messages each, through a two-packet ring: both may sleep
/// on the space bell at once (one flag for all sleepers; a ring wakes every
/// one), while the receiver frees slots and rings. No lost wake-up (loom
/// reports one as a deadlock), exactly once, per-sender order.
#[test]
fn loom_msgq_space_bell_two_sleepers() {
    let mut b = builder();
    b.preemption_bound = Some(1);
    b.check(|| {
        let q = Arc::new(HeapQueue::new(2, 1, 8).unwrap());
        let senders: Vec<_> = (1..=2u32)
            .map(|pid| {
                let q = q.clone();
                thread::spawn(move || {
                    for i in 0..2 {
                        send_sleeping(&q, pid, pid as u64 * 10 + i);
                    }
                })
            })
            .collect();
        let got = receive_sleeping(&q, 4);
        for s in senders {
            s.join().unwrap();
        }
        for pid in 1..=2u32 {
            let vals: Vec<u64> = got.iter().filter(|m| m.0 == pid).map(|m| m.1).collect();
            assert_eq!(
                vals,
                [pid as u64 * 10, pid as u64 * 10 + 1],
                "order/exactly once"
            );
        }
    });
}
