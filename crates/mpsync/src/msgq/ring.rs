//! One destination queue of an endpoint (paper 004 §2, Figure 1): a packet ring
//! and a bulk-data ring, the claim algorithms of §3 and the receiver's poll, on
//! plain memory — no pointers, so the same `#[repr(C)]` structures work in a
//! segment that several processes map at different addresses, and on the heap
//! ([`HeapQueue`]) for threads, unit tests and loom models.
//!
//! Protocol words are described in [`super::word`]. In short, per message:
//!
//! 1. bulk (if any) first (§3.2's second deadlock): a ticket `b` from
//!    `bulk_tail`, then the block word `FREE(b) → CLAIMED(pid, b)`, then the data;
//! 2. the packet: a ticket `t` from `tail`, then the type word
//!    `FREE(t) → CLAIMED(pid, t)` (lock-free: two CASes, Figure 3; locked: the
//!    same steps inside a process-shared lock, Figure 2);
//! 3. the payload, the block word `CLAIMED → SENT`, and the type word
//!    `CLAIMED → READY` (Release: publishes everything before it);
//! 4. the receiver, at `head = t`, loads `READY(t)` (Acquire), copies the packet
//!    and block out of shared memory, frees the block (`FREE(b + B)`) and the
//!    packet (`FREE(t + Q)`, both Release) and only then runs the handler.
//!
//! Recovery (nothing in the paper; needed because peers are processes that can
//! die): a ticket handed out and never claimed for a lease is revoked by whoever
//! waits behind it; a slot `CLAIMED` by a process that no longer exists is
//! freed. Both are CASes from the exact word observed, so a slow but live
//! claimant that races them either wins (and the slot is its own) or sees a
//! later sequence and starts over with a new ticket — never a duplicate.

use super::Error;
use super::word::{self, CLAIMED, FREE, READY, SENT};
use crate::sync::{AtomicU32, AtomicU64, Ordering, fence};
use std::time::Duration;

/// Most argument words a packet carries (§2: "short messages of up to eight words").
pub const MAX_ARGS: usize = 8;

/// What a message is, as carried in the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A request that expects no reply.
    OneWay = 1,
    /// A request; the handler may reply once, to the endpoint named in `from`.
    Request = 2,
    /// A reply to a request with the same token.
    Reply = 3,
}

impl Kind {
    fn from_bits(b: u64) -> Option<Self> {
        match b {
            1 => Some(Self::OneWay),
            2 => Some(Self::Request),
            3 => Some(Self::Reply),
            _ => None,
        }
    }
}

/// One packet: its type word and payload, on its own 128-byte line pair (no
/// false sharing between neighbouring packets).
#[repr(C, align(128))]
#[derive(Debug)]
pub struct Packet {
    ty: AtomicU64,
    /// handler (16 bits) | nargs (4) << 16 | kind (2) << 20 | has bulk (1) << 22 | bulk len (14) << 32
    meta: AtomicU64,
    /// The bulk ticket, when the message has bulk data.
    bulk: AtomicU64,
    /// Request/reply matching token.
    token: AtomicU64,
    /// The requester's endpoint name (for replies).
    from: [AtomicU64; 2],
    args: [AtomicU64; MAX_ARGS],
}

impl Packet {
    /// A free packet for ticket `index` (the creator's initial lap).
    pub fn new(index: u64) -> Self {
        Self {
            ty: AtomicU64::new(word::pack(FREE, 0, index)),
            meta: AtomicU64::new(0),
            bulk: AtomicU64::new(0),
            token: AtomicU64::new(0),
            from: [AtomicU64::new(0), AtomicU64::new(0)],
            args: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// The type word (for tests and fault injection).
    pub fn type_word(&self) -> &AtomicU64 {
        &self.ty
    }
}

/// The claimed flag of one bulk block, on its own line.
#[repr(C, align(128))]
#[derive(Debug)]
pub struct BlockHdr {
    word: AtomicU64,
}

impl BlockHdr {
    /// A free block for ticket `index`.
    pub fn new(index: u64) -> Self {
        Self {
            word: AtomicU64::new(word::pack(FREE, 0, index)),
        }
    }

    /// The block word (for tests and fault injection).
    pub fn block_word(&self) -> &AtomicU64 {
        &self.word
    }
}

/// A counter on its own line.
#[repr(C, align(128))]
#[derive(Debug)]
pub struct Line(AtomicU64);

/// Doorbell word values.
const AWAKE: u32 = 0;
const ASLEEP: u32 = 1;

/// The receiver's doorbell (nothing in the paper, whose receivers busy-poll):
/// one futex word, on its own line, that an endpoint's receiver parks on after
/// a bounded spin, and that a sender rings after publishing a message — with a
/// system call only when the receiver announced that it sleeps.
///
/// The two sides are a Dekker pair. The receiver stores `ASLEEP`, fences
/// (SeqCst) and then looks at its queues once more; a sender publishes its
/// packet (the Release CAS to READY), fences (SeqCst) and then loads the word.
/// The fences order both store→load pairs, so either the receiver's second
/// look sees the message, or the sender sees `ASLEEP` and wakes it: no lost
/// wake-up. A sender swaps the word back to `AWAKE` first, so of several
/// concurrent senders one makes the system call.
///
/// Peers are untrusted: a peer that writes the word can cost the receiver a
/// spurious wake-up or a sleep until its timeout (the receiver always parks
/// with one), never a hang. The futex is the process-shared kind
/// ([`crate::sched::park_shared`]).
#[repr(C, align(128))]
#[derive(Debug)]
pub struct Doorbell {
    word: AtomicU32,
}

impl Doorbell {
    /// An awake doorbell.
    pub fn new() -> Self {
        Self {
            word: AtomicU32::new(AWAKE),
        }
    }

    /// The sender's half, after a message is published: wakes the receiver
    /// if it announced that it sleeps. Returns whether this call woke it.
    pub fn ring(&self) -> bool {
        // SeqCst fence: pairs with the one in `announce`; orders our READY
        // CAS (before the call) before the load below (see the type's doc).
        fence(Ordering::SeqCst);
        // Relaxed: the fence above orders it; a stale AWAKE is impossible
        // by the Dekker argument.
        if self.word.load(Ordering::Relaxed) == AWAKE {
            return false;
        }
        // Relaxed: the futex call below orders nothing; only one sender of
        // several concurrent ones makes it.
        if self.word.swap(AWAKE, Ordering::Relaxed) == ASLEEP {
            crate::sched::unpark_shared_all(&self.word);
            return true;
        }
        false
    }

    /// The receiver's first half: announces that it is about to sleep. The
    /// receiver must then look at its queues once more, and call
    /// [`sleep`](Self::sleep) only if they are still empty.
    pub fn announce(&self) {
        // Relaxed store, then a SeqCst fence: pairs with the fence in `ring`;
        // orders this store before the receiver's next loads of type words.
        self.word.store(ASLEEP, Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    /// The receiver's second half: sleeps until a sender rings, a signal,
    /// or `timeout` (None: no limit; real endpoints always give one). Returns
    /// whether the bell was rung (as opposed to a timeout). Leaves the bell
    /// awake.
    pub fn sleep(&self, timeout: Option<Duration>) -> bool {
        // Woken, timed out, a signal or a mismatch (already rung): the word
        // says which.
        let _ = crate::sched::park_shared(&self.word, ASLEEP, timeout);
        // Relaxed: a ringing sender swapped AWAKE in; the receiver's next
        // look at its queues is ordered by its own Acquire loads.
        self.word.swap(AWAKE, Ordering::Relaxed) == AWAKE
    }

    /// The receiver found work after [`announce`](Self::announce): takes the
    /// announcement back without sleeping.
    pub fn cancel(&self) {
        // Relaxed: a sender that still sees ASLEEP makes one spurious wake
        // call, nothing more.
        self.word.store(AWAKE, Ordering::Relaxed);
    }

    /// The raw word (for tests that play a misbehaving peer).
    pub fn word(&self) -> &AtomicU32 {
        &self.word
    }
}

impl Default for Doorbell {
    fn default() -> Self {
        Self::new()
    }
}

/// The low bit of a [`SpaceBell`] word: some sender announced that it sleeps.
const SLEEPERS: u32 = 1;

/// The senders' doorbell of one queue (nothing in the paper, whose senders
/// spin while the queue is full): one futex word, on its own line, that a
/// sender finding the ring full parks on, and that the receiver rings after
/// freeing slots — with a system call only when a sender announced that it
/// sleeps.
///
/// The word is an epoch (the upper 31 bits, bumped by every ring that wakes)
/// and a *sleepers* flag (bit 0). The two sides are the same Dekker pair as
/// the receiver's [`Doorbell`]: a sender sets the flag ([`announce`](Self::announce),
/// an RMW and a SeqCst fence) and then looks at the slot it waits for once
/// more; the receiver frees slots (Release CASes on their type words),
/// fences (SeqCst) and then loads the word ([`ring`](Self::ring)). Either the
/// sender's second look sees a freed slot, or the receiver sees the flag,
/// clears it and bumps the epoch, and wakes every sleeper. A sender sleeps
/// only while the word still holds the value its announcement left, so a ring
/// between its announcement and its sleep ends the sleep at once (the futex
/// compares the word): no lost wake-up, however many senders sleep.
///
/// The flag is never taken back: a sender that finds space after announcing,
/// times out, or is killed while asleep leaves it set, which costs the next
/// ring one spurious wake call, nothing more. Peers are untrusted: a peer that
/// writes the word can cost senders spurious wake-ups or a sleep until their
/// timeout (senders always sleep with one), never a hang.
#[repr(C, align(128))]
#[derive(Debug)]
pub struct SpaceBell {
    word: AtomicU32,
}

impl SpaceBell {
    /// A bell with no sleepers.
    pub fn new() -> Self {
        Self {
            word: AtomicU32::new(0),
        }
    }

    /// The receiver's half, after it freed slots: wakes every sender that
    /// announced that it sleeps. Returns whether a sender had announced
    /// (and so a wake call was made).
    pub fn ring(&self) -> bool {
        // SeqCst fence: pairs with the one in `announce`; orders the
        // receiver's Release CASes that freed slots (before the call) before
        // the load below (see the type's doc).
        fence(Ordering::SeqCst);
        // Relaxed: the fence above orders it; a stale clear flag is
        // impossible by the Dekker argument.
        let mut w = self.word.load(Ordering::Relaxed);
        loop {
            if w & SLEEPERS == 0 {
                return false;
            }
            // Relaxed: a sleeper's futex compares the word itself; what it
            // looks at after waking (the slot's type word) is ordered by
            // that slot's own Release/Acquire pair.
            match self.word.compare_exchange_weak(
                w,
                (w & !SLEEPERS).wrapping_add(2),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => w = now,
            }
        }
        crate::sched::unpark_shared_all(&self.word);
        true
    }

    /// A sender's first half: announces that it is about to sleep and
    /// returns the word to sleep on. The sender must then look at the slot
    /// it waits for once more, and call [`sleep`](Self::sleep) only if it is
    /// still taken.
    pub fn announce(&self) -> u32 {
        // Relaxed RMW, then a SeqCst fence: pairs with the fence in `ring`;
        // orders the flag's store before the sender's next load of the slot.
        let w = self.word.fetch_or(SLEEPERS, Ordering::Relaxed) | SLEEPERS;
        fence(Ordering::SeqCst);
        w
    }

    /// A sender's second half: sleeps while the word is still `announced`
    /// (what [`announce`](Self::announce) returned) — until the receiver
    /// rings, a signal, or `timeout` (None: no limit; real senders always
    /// give one). Returns whether the bell was rung (the epoch moved).
    pub fn sleep(&self, announced: u32, timeout: Option<Duration>) -> bool {
        let _ = crate::sched::park_shared(&self.word, announced, timeout);
        // Relaxed: only compares epochs; see `ring`.
        self.word.load(Ordering::Relaxed) & !SLEEPERS != announced & !SLEEPERS
    }

    /// The raw word (for tests that play a misbehaving peer).
    pub fn word(&self) -> &AtomicU32 {
        &self.word
    }
}

impl Default for SpaceBell {
    fn default() -> Self {
        Self::new()
    }
}

/// Why a send waits, handed to its wait hook: the word of the slot it waits
/// for as last seen, and — when only the receiver can free that slot and the
/// queue has a [`SpaceBell`] — a way to sleep until it does.
#[derive(Debug, Clone, Copy)]
pub struct Blocked<'a> {
    word: &'a AtomicU64,
    seen: u64,
    bell: Option<&'a SpaceBell>,
}

impl Blocked<'_> {
    /// Whether [`sleep`](Self::sleep) can sleep: the queue has a space bell
    /// and the slot waits for the receiver (not, say, for a sender's
    /// recovery, which needs the waiter itself to act now and then).
    pub fn can_sleep(&self) -> bool {
        self.bell.is_some()
    }

    /// Announces on the space bell, looks at the slot once more and, if it
    /// is unchanged, sleeps until the receiver frees slots or `timeout`
    /// passes (None: no limit, for models). Returns whether the slot changed
    /// or the bell was rung (as opposed to a timeout, or no bell).
    pub fn sleep(&self, timeout: Option<Duration>) -> bool {
        let Some(bell) = self.bell else {
            return false;
        };
        let announced = bell.announce();
        // Acquire: pairs with the receiver's Release CAS that frees the slot
        // (ordered before its look at the bell by the Dekker fences).
        if self.word.load(Ordering::Acquire) != self.seen {
            return true;
        }
        crate::sched::stall::point(crate::sched::stall::MSGQ_SPACE_SLEEP);
        bell.sleep(announced, timeout)
    }
}

/// The senders' side of a queue: packet and bulk tails (§2: "queue tail
/// information, accessed only by senders").
#[repr(C)]
#[derive(Debug)]
pub struct QueueCtl {
    tail: Line,
    bulk_tail: Line,
}

impl QueueCtl {
    /// Both tails at ticket 0.
    pub fn new() -> Self {
        Self {
            tail: Line(AtomicU64::new(0)),
            bulk_tail: Line(AtomicU64::new(0)),
        }
    }

    /// The packet tail (for tests and fault injection).
    pub fn tail_word(&self) -> &AtomicU64 {
        &self.tail.0
    }
}

impl Default for QueueCtl {
    fn default() -> Self {
        Self::new()
    }
}

/// What the protocol needs from its surroundings: a clock, a liveness check of
/// a claimant process, and the lease after which an unclaimed ticket is
/// revoked. Real endpoints use `CLOCK_MONOTONIC` and `/proc`; models inject
/// their own.
pub trait Env {
    /// Monotonic nanoseconds.
    fn now_ns(&self) -> u64;
    /// Whether process `pid` may still write to the segment.
    fn alive(&self, pid: u32) -> bool;
    /// How long a handed-out ticket may stay unclaimed, and how long a claimed
    /// slot waits before its claimant's liveness is checked (a quarter of it).
    fn lease_ns(&self) -> u64;
}

/// The lock of a locked claim (Figure 2): runs `f` under a lock every sender of
/// the queue shares.
pub trait ClaimLock {
    /// Runs `f` holding the lock.
    fn with_lock(&self, f: &mut dyn FnMut()) -> Result<(), Error>;
}

/// A message to send.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    /// The handler index the receiver runs.
    pub handler: u16,
    /// Request, one-way or reply.
    pub kind: Kind,
    /// Request/reply matching token.
    pub token: u64,
    /// The sender's endpoint name, packed (for replies).
    pub from: [u64; 2],
    /// Up to [`MAX_ARGS`] words.
    pub args: &'a [u64],
    /// Bulk data, up to the queue's block size.
    pub bulk: Option<&'a [u8]>,
}

/// A message copied out of the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incoming {
    /// The packet's ticket.
    pub ticket: u64,
    /// The process that claimed the packet.
    pub sender_pid: u32,
    /// The handler index (not yet checked against the receiver's table).
    pub handler: u16,
    /// Request, one-way or reply.
    pub kind: Kind,
    /// Request/reply token.
    pub token: u64,
    /// The sender's endpoint name, packed.
    pub from: [u64; 2],
    /// Number of valid words in `args`.
    pub nargs: usize,
    /// Argument words.
    pub args: [u64; MAX_ARGS],
    /// Whether bulk data was copied into the caller's buffer.
    pub has_bulk: bool,
}

/// What one step of the receiver found at the head of the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Nothing handed out at the head.
    Empty,
    /// A message is on its way (claimed, or ticket handed out); not yet ready.
    Pending,
    /// A message, copied out and released; bulk data (if any) in the buffer.
    Message(Incoming),
    /// The head slot was claimed by a dead process (or its ticket never
    /// claimed within the lease) and was freed without delivery.
    Recovered {
        /// The ticket skipped.
        ticket: u64,
        /// The dead claimant (0: the ticket was never claimed).
        pid: u32,
    },
    /// The head held something no correct sender writes; it was released
    /// without delivery (after the lease, so a racing writer is not disturbed).
    Rejected(String),
}

/// The receiver's private state for one queue (§2: "queue head information,
/// accessed only by the recipient") — kept in the receiver's own memory, where
/// no peer can corrupt it.
#[derive(Debug, Default, Clone)]
pub struct Head {
    next: u64,
    stuck_word: u64,
    stuck_since: Option<u64>,
    last_check: u64,
}

impl Head {
    /// The ticket the receiver expects next.
    pub fn next(&self) -> u64 {
        self.next
    }
}

/// Counters of recovery work, for tests and reports.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SendStats {
    /// Tickets given up because the slot moved on (revoked while we were slow).
    pub retries: u64,
    /// Bulk blocks this sender freed from dead claimants or revoked.
    pub recovered_blocks: u64,
}

/// A queue: references into wherever its memory lives.
#[derive(Debug, Clone, Copy)]
pub struct QueueRef<'a> {
    ctl: &'a QueueCtl,
    bell: Option<&'a Doorbell>,
    space: Option<&'a SpaceBell>,
    packets: &'a [Packet],
    blocks: &'a [BlockHdr],
    data: &'a [AtomicU64],
}

/// Tracks how long a waiter has seen one word unchanged, and when it last
/// asked whether the word's claimant is alive.
#[derive(Default)]
struct Stuck {
    word: u64,
    since: Option<u64>,
    last_check: u64,
}

impl Stuck {
    /// Nanoseconds `w` has been seen unchanged (0 the first time).
    fn age(&mut self, w: u64, env: &dyn Env) -> u64 {
        let now = env.now_ns();
        match self.since {
            Some(s) if self.word == w => now.saturating_sub(s),
            _ => {
                self.word = w;
                self.since = Some(now);
                self.last_check = now;
                0
            }
        }
    }

    /// Whether it is time for another liveness check (every lease/4).
    fn check_due(&mut self, env: &dyn Env) -> bool {
        let now = env.now_ns();
        let every = env.lease_ns() / 4;
        if now.saturating_sub(self.last_check) >= every {
            self.last_check = now;
            true
        } else {
            false
        }
    }
}

impl<'a> QueueRef<'a> {
    /// A queue over the given parts. `packets.len()` and `blocks.len()` must be
    /// powers of two (so ticket mod length survives the 2⁴⁰ sequence wrap) and
    /// `data.len()` a multiple of `blocks.len()`.
    pub fn new(
        ctl: &'a QueueCtl,
        packets: &'a [Packet],
        blocks: &'a [BlockHdr],
        data: &'a [AtomicU64],
    ) -> Result<Self, Error> {
        if !packets.len().is_power_of_two() || !blocks.len().is_power_of_two() {
            return Err(Error::InvalidArgument(format!(
                "queue geometry: {} packets and {} blocks; both must be powers of two",
                packets.len(),
                blocks.len()
            )));
        }
        if !data.len().is_multiple_of(blocks.len()) {
            return Err(Error::InvalidArgument(format!(
                "queue geometry: {} data words do not divide into {} blocks",
                data.len(),
                blocks.len()
            )));
        }
        Ok(Self {
            ctl,
            bell: None,
            space: None,
            packets,
            blocks,
            data,
        })
    }

    /// This queue with the receiver's doorbell: every send rings it after
    /// publishing its message.
    pub fn with_doorbell(mut self, bell: &'a Doorbell) -> Self {
        self.bell = Some(bell);
        self
    }

    /// This queue with its senders' space bell: a send that finds the ring
    /// full may sleep on it ([`Blocked::sleep`]), and the receiver rings it
    /// ([`wake_senders`](Self::wake_senders)) after freeing slots.
    pub fn with_space_bell(mut self, bell: &'a SpaceBell) -> Self {
        self.space = Some(bell);
        self
    }

    /// The receiver's half of the space bell: call after freeing slots
    /// (delivering, recovering or rejecting messages); wakes the senders
    /// that sleep because the ring was full. A fence and a load, and a
    /// system call only when a sender announced that it sleeps. Returns
    /// whether it made one.
    pub fn wake_senders(&self) -> bool {
        self.space.is_some_and(SpaceBell::ring)
    }

    /// The packet tail as senders left it (a hint: peers may write anything).
    pub fn tail(&self) -> u64 {
        // Relaxed: a diagnostic snapshot.
        self.ctl.tail.0.load(Ordering::Relaxed)
    }

    /// Packets in the ring.
    pub fn packets(&self) -> usize {
        self.packets.len()
    }

    /// Bytes per bulk block.
    pub fn block_bytes(&self) -> usize {
        self.data.len() / self.blocks.len() * 8
    }

    fn packet(&self, t: u64) -> &'a Packet {
        &self.packets[(t % self.packets.len() as u64) as usize]
    }

    fn block(&self, b: u64) -> &'a BlockHdr {
        &self.blocks[(b % self.blocks.len() as u64) as usize]
    }

    fn block_data(&self, b: u64) -> &'a [AtomicU64] {
        let w = self.data.len() / self.blocks.len();
        let i = (b % self.blocks.len() as u64) as usize;
        &self.data[i * w..(i + 1) * w]
    }

    /// Sends one message: bulk block first, then the packet (§3.2). `wait` is
    /// called whenever the sender must wait (queue full, slot busy), with what
    /// it waits for; it polls the sender's own endpoint (§3.1's deadlock
    /// avoidance), backs off or sleeps ([`Blocked::sleep`]), and returns an
    /// error to give up (a timeout).
    pub fn send(
        &self,
        pid: u32,
        lock: Option<&dyn ClaimLock>,
        msg: &Outgoing<'_>,
        env: &dyn Env,
        wait: &mut dyn FnMut(&Blocked<'_>) -> Result<(), Error>,
        stats: &mut SendStats,
    ) -> Result<u64, Error> {
        if !word::pid_fits(pid) {
            return Err(Error::InvalidArgument(format!(
                "sender pid {pid} does not fit the 22-bit claimant field"
            )));
        }
        if msg.args.len() > MAX_ARGS {
            return Err(Error::InvalidArgument(format!(
                "{} argument words; a packet carries at most {MAX_ARGS} (send more as bulk data)",
                msg.args.len()
            )));
        }
        if let Some(d) = msg.bulk
            && d.len() > self.block_bytes()
        {
            return Err(Error::InvalidArgument(format!(
                "{} bytes of bulk data; this queue's blocks hold at most {}",
                d.len(),
                self.block_bytes()
            )));
        }
        let bulk = match msg.bulk {
            Some(d) => {
                let b = match lock {
                    None => self.claim_block_lockfree(pid, env, wait, stats)?,
                    Some(l) => self.claim_block_locked(pid, l, env, wait, stats)?,
                };
                // Relaxed stores: published by the packet's Release CAS to READY.
                copy_to_words(d, self.block_data(b));
                Some((b, d.len()))
            }
            None => None,
        };
        let t = match lock {
            None => self.claim_packet_lockfree(pid, wait, stats)?,
            Some(l) => self.claim_packet_locked(pid, l, wait)?,
        };
        crate::sched::stall::point(crate::sched::stall::MSGQ_FILL);
        let p = self.packet(t);
        let mut meta =
            msg.handler as u64 | ((msg.args.len() as u64) << 16) | ((msg.kind as u64) << 20);
        if let Some((b, len)) = bulk {
            meta |= (1 << 22) | ((len as u64) << 32);
            // Relaxed: published by the Release CAS to READY below.
            p.bulk.store(b, Ordering::Relaxed);
        }
        // Relaxed (all payload stores): published by the Release CAS to READY.
        p.meta.store(meta, Ordering::Relaxed);
        if msg.kind != Kind::OneWay {
            p.token.store(msg.token, Ordering::Relaxed);
            p.from[0].store(msg.from[0], Ordering::Relaxed);
            p.from[1].store(msg.from[1], Ordering::Relaxed);
        }
        for (slot, a) in p.args.iter().zip(msg.args) {
            slot.store(*a, Ordering::Relaxed);
        }
        if let Some((b, _)) = bulk {
            // Release: pairs with a recovering receiver's Acquire load of the
            // block word, which then sees `p.bulk` (written above) too.
            let blk = self.block(b);
            if blk
                .word
                .compare_exchange(
                    word::pack(CLAIMED, pid, b),
                    word::pack(SENT, pid, b),
                    Ordering::Release,
                    Ordering::Relaxed,
                )
                .is_err()
            {
                return Err(Error::Corrupt(format!(
                    "bulk block of ticket {b} was taken from this live sender (pid {pid}); \
                     another process wrote the segment"
                )));
            }
        }
        self.publish(p, pid, t)?;
        if let Some(bell) = self.bell {
            bell.ring();
        }
        Ok(t)
    }

    /// Marks packet `t` READY: the last step of a send.
    fn publish(&self, p: &Packet, pid: u32, t: u64) -> Result<(), Error> {
        crate::sched::stall::point(crate::sched::stall::MSGQ_PUBLISH);
        // Release: publishes the payload and block data to the receiver's
        // Acquire load of the type word.
        p.ty.compare_exchange(
            word::pack(CLAIMED, pid, t),
            word::pack(READY, pid, t),
            Ordering::Release,
            Ordering::Relaxed,
        )
        .map_err(|now| {
            Error::Corrupt(format!(
                "packet of ticket {t} was taken from this live sender (pid {pid}): found {now:#x}"
            ))
        })?;
        Ok(())
    }

    /// Figure 3's lock-free claim: CAS the tail forward, then CAS the packet's
    /// type from `FREE(t)` to `CLAIMED(pid, t)`, polling while it is busy.
    fn claim_packet_lockfree(
        &self,
        pid: u32,
        wait: &mut dyn FnMut(&Blocked<'_>) -> Result<(), Error>,
        stats: &mut SendStats,
    ) -> Result<u64, Error> {
        'ticket: loop {
            // Relaxed: the tail only hands out tickets; the type-word CAS below
            // is what synchronizes with the receiver.
            let mut t = self.ctl.tail.0.load(Ordering::Relaxed);
            loop {
                match self.ctl.tail.0.compare_exchange_weak(
                    t,
                    t.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break,
                    Err(now) => t = now,
                }
            }
            crate::sched::stall::point(crate::sched::stall::MSGQ_TICKET);
            let p = self.packet(t);
            let free = word::pack(FREE, 0, t);
            loop {
                // Acquire: pairs with the receiver's Release of `FREE(t)`, so its
                // reads of the previous lap are done before our writes.
                let w = p.ty.load(Ordering::Acquire);
                if w == free {
                    if p.ty
                        .compare_exchange(
                            free,
                            word::pack(CLAIMED, pid, t),
                            Ordering::Acquire,
                            Ordering::Acquire,
                        )
                        .is_ok()
                    {
                        return Ok(t);
                    }
                    continue;
                }
                if word::seq_diff(word::seq(w), t) >= 0 {
                    // The slot moved past our ticket (revoked while we were
                    // slow, or garbage): start over with a new ticket.
                    stats.retries += 1;
                    continue 'ticket;
                }
                // The previous lap is still in use: the queue is full, and
                // only the receiver frees the slot.
                wait(&self.blocked(&p.ty, w, true))?;
            }
        }
    }

    /// Figure 2's locked claim: under the lock, claim the packet at the tail if
    /// it is free for this lap, else release the lock, poll and retry.
    fn claim_packet_locked(
        &self,
        pid: u32,
        lock: &dyn ClaimLock,
        wait: &mut dyn FnMut(&Blocked<'_>) -> Result<(), Error>,
    ) -> Result<u64, Error> {
        loop {
            let mut got = None;
            let mut full = (0, 0);
            lock.with_lock(&mut || {
                loop {
                    // Relaxed: the lock orders the tail between senders.
                    let t = self.ctl.tail.0.load(Ordering::Relaxed);
                    let p = self.packet(t);
                    let free = word::pack(FREE, 0, t);
                    // Acquire: as in the lock-free claim.
                    let w = p.ty.load(Ordering::Acquire);
                    if w == free
                        && p.ty
                            .compare_exchange(
                                free,
                                word::pack(CLAIMED, pid, t),
                                Ordering::Acquire,
                                Ordering::Acquire,
                            )
                            .is_ok()
                    {
                        // Relaxed: the lock orders the tail between senders.
                        self.ctl.tail.0.store(t.wrapping_add(1), Ordering::Relaxed);
                        got = Some(t);
                        return;
                    }
                    let w = p.ty.load(Ordering::Acquire);
                    if word::seq_diff(word::seq(w), t) >= 0 && w != free {
                        // A holder died between claiming and advancing the tail
                        // (a robust mutex gave us its lock), or the receiver
                        // revoked the ticket: move the tail past it.
                        // Relaxed: the lock orders the tail between senders.
                        self.ctl.tail.0.store(t.wrapping_add(1), Ordering::Relaxed);
                        continue;
                    }
                    full = (t, w);
                    return; // full: the previous lap is still in use
                }
            })?;
            if let Some(t) = got {
                return Ok(t);
            }
            let (t, w) = full;
            wait(&self.blocked(&self.packet(t).ty, w, true))?;
        }
    }

    /// Frees (or revokes) the block word `w` of an earlier lap if its claimant
    /// is dead or its ticket was never claimed within the lease. Returns
    /// whether it did.
    fn try_recover_block(&self, blk: &BlockHdr, w: u64, stuck: &mut Stuck, env: &dyn Env) -> bool {
        let age = stuck.age(w, env);
        let lease = env.lease_ns();
        let recover = match word::state(w) {
            FREE => age >= lease,
            CLAIMED => age >= lease / 4 && stuck.check_due(env) && !env.alive(word::pid(w)),
            // SENT: its packet is published or being recovered by the receiver,
            // which frees the block.
            _ => false,
        };
        if !recover {
            return false;
        }
        let next = word::pack(FREE, 0, word::seq(w).wrapping_add(self.blocks.len() as u64));
        // AcqRel: as the receiver's release of a block (pairs with the next
        // claimant's Acquire).
        blk.word
            .compare_exchange(w, next, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    fn claim_block_lockfree(
        &self,
        pid: u32,
        env: &dyn Env,
        wait: &mut dyn FnMut(&Blocked<'_>) -> Result<(), Error>,
        stats: &mut SendStats,
    ) -> Result<u64, Error> {
        'ticket: loop {
            // Relaxed: hands out tickets only; the block CAS synchronizes.
            let mut b = self.ctl.bulk_tail.0.load(Ordering::Relaxed);
            loop {
                match self.ctl.bulk_tail.0.compare_exchange_weak(
                    b,
                    b.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break,
                    Err(now) => b = now,
                }
            }
            let blk = self.block(b);
            let free = word::pack(FREE, 0, b);
            let mut stuck = Stuck::default();
            loop {
                // Acquire: pairs with the receiver's Release of `FREE(b)`.
                let w = blk.word.load(Ordering::Acquire);
                if w == free {
                    if blk
                        .word
                        .compare_exchange(
                            free,
                            word::pack(CLAIMED, pid, b),
                            Ordering::Acquire,
                            Ordering::Acquire,
                        )
                        .is_ok()
                    {
                        return Ok(b);
                    }
                    continue;
                }
                if word::seq_diff(word::seq(w), b) >= 0 {
                    stats.retries += 1;
                    continue 'ticket;
                }
                if self.try_recover_block(blk, w, &mut stuck, env) {
                    stats.recovered_blocks += 1;
                    continue;
                }
                // Sleep only while the receiver holds the block (SENT): a
                // claimed or revoked one needs this sender's recovery checks.
                wait(&self.blocked(&blk.word, w, word::state(w) == SENT))?;
            }
        }
    }

    fn claim_block_locked(
        &self,
        pid: u32,
        lock: &dyn ClaimLock,
        env: &dyn Env,
        wait: &mut dyn FnMut(&Blocked<'_>) -> Result<(), Error>,
        stats: &mut SendStats,
    ) -> Result<u64, Error> {
        let mut stuck = Stuck::default();
        loop {
            let mut got = Err(0u64);
            lock.with_lock(&mut || {
                loop {
                    // Relaxed: the lock orders the bulk tail between senders.
                    let b = self.ctl.bulk_tail.0.load(Ordering::Relaxed);
                    let blk = self.block(b);
                    let free = word::pack(FREE, 0, b);
                    // Acquire: pairs with the receiver's Release of `FREE(b)`.
                    let w = blk.word.load(Ordering::Acquire);
                    if w == free
                        && blk
                            .word
                            .compare_exchange(
                                free,
                                word::pack(CLAIMED, pid, b),
                                Ordering::Acquire,
                                Ordering::Acquire,
                            )
                            .is_ok()
                    {
                        // Relaxed: the lock orders the bulk tail.
                        self.ctl
                            .bulk_tail
                            .0
                            .store(b.wrapping_add(1), Ordering::Relaxed);
                        got = Ok(b);
                        return;
                    }
                    let w = blk.word.load(Ordering::Acquire);
                    if word::seq_diff(word::seq(w), b) >= 0 && w != free {
                        // Relaxed: the lock orders the bulk tail.
                        self.ctl
                            .bulk_tail
                            .0
                            .store(b.wrapping_add(1), Ordering::Relaxed);
                        continue;
                    }
                    got = Err(w);
                    return;
                }
            })?;
            match got {
                Ok(b) => return Ok(b),
                Err(w) => {
                    let ticket = word::seq(w).wrapping_add(self.blocks.len() as u64);
                    if self.try_recover_block(self.block(ticket), w, &mut stuck, env) {
                        stats.recovered_blocks += 1;
                        continue;
                    }
                }
            }
            // As in the lock-free claim: sleep only while the receiver holds it.
            let seen = got.err().unwrap_or_default();
            let blk = self.block(word::seq(seen));
            wait(&self.blocked(&blk.word, seen, word::state(seen) == SENT))?;
        }
    }

    /// What a waiting sender waits for: `word`, last seen as `seen`; with the
    /// space bell when `for_receiver` (only the receiver can free the slot).
    fn blocked<'b>(&'b self, word: &'b AtomicU64, seen: u64, for_receiver: bool) -> Blocked<'b> {
        Blocked {
            word,
            seen,
            bell: self.space.filter(|_| for_receiver),
        }
    }

    /// Frees the block a recovered packet refers to, if its dead claimant `pid`
    /// still holds it (claimed or sent, same ticket).
    fn release_orphan_block(&self, p: &Packet, pid: u32) {
        // Acquire on the block word below; the bulk ticket itself is validated
        // against it, so a stale value from an earlier lap matches nothing.
        let b = p.bulk.load(Ordering::Relaxed);
        let blk = self.block(b);
        for state in [SENT, CLAIMED] {
            let w = word::pack(state, pid, b);
            let next = word::pack(FREE, 0, b.wrapping_add(self.blocks.len() as u64));
            // AcqRel: pairs with the next claimant's Acquire.
            if blk
                .word
                .compare_exchange(w, next, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }

    fn advance(&self, head: &mut Head) {
        head.next = head.next.wrapping_add(1);
        head.stuck_since = None;
    }

    /// Frees packet `t` for its next lap, from the exact word `w`.
    fn free_packet(&self, p: &Packet, w: u64, t: u64) -> bool {
        let next = word::pack(FREE, 0, t.wrapping_add(self.packets.len() as u64));
        // Release: our reads of the packet happen before the next claimant's
        // writes (its Acquire CAS).
        p.ty.compare_exchange(w, next, Ordering::Release, Ordering::Relaxed)
            .is_ok()
    }

    /// One step of the receiver's poll (§3): deliver the message at the head if
    /// it is ready, copying its bulk data into `bulk`; recover the head slot
    /// from a dead claimant; reject garbage. Never waits.
    pub fn poll_one(&self, head: &mut Head, env: &dyn Env, bulk: &mut Vec<u8>) -> Event {
        let t = head.next;
        let p = self.packet(t);
        // Acquire: pairs with the sender's Release CAS to READY (payload) and
        // with every other writer of the word.
        let w = p.ty.load(Ordering::Acquire);
        let seq_ok = word::seq(w) == word::seq(t);
        if seq_ok && word::state(w) == READY {
            let ev = self.take(p, w, t, bulk);
            self.advance(head);
            return ev;
        }
        if seq_ok && word::state(w) == FREE {
            // Relaxed: a hint; revocation is a CAS from the exact word.
            let tail = self.ctl.tail.0.load(Ordering::Relaxed);
            if word::seq_diff(word::seq(tail), word::seq(t)) <= 0 {
                head.stuck_since = None;
                return Event::Empty;
            }
        }
        // Pending, orphaned or garbage: how long has it looked like this?
        let now = env.now_ns();
        let age = match head.stuck_since {
            Some(s) if head.stuck_word == w => now.saturating_sub(s),
            _ => {
                head.stuck_word = w;
                head.stuck_since = Some(now);
                head.last_check = now;
                0
            }
        };
        let lease = env.lease_ns();
        if seq_ok && word::state(w) == CLAIMED {
            let due = age >= lease / 4 && now.saturating_sub(head.last_check) >= lease / 4;
            if due {
                head.last_check = now;
                let pid = word::pid(w);
                if !env.alive(pid) {
                    self.release_orphan_block(p, pid);
                    if self.free_packet(p, w, t) {
                        self.advance(head);
                        return Event::Recovered { ticket: t, pid };
                    }
                }
            }
            return Event::Pending;
        }
        if age < lease {
            return Event::Pending;
        }
        if seq_ok && word::state(w) == FREE {
            // A ticket handed out and never claimed within the lease: revoke it.
            if self.free_packet(p, w, t) {
                self.advance(head);
                return Event::Recovered { ticket: t, pid: 0 };
            }
            return Event::Pending;
        }
        // No correct sender writes this word at our head (wrong lap or state).
        if self.free_packet(p, w, t) {
            self.advance(head);
            return Event::Rejected(format!(
                "packet {t}: type word {w:#x} is not a valid state for this lap; skipped"
            ));
        }
        Event::Pending
    }

    /// Copies out the READY packet `t` (word `w`) and its bulk block, validates
    /// them, and releases both.
    fn take(&self, p: &Packet, w: u64, t: u64, bulk: &mut Vec<u8>) -> Event {
        crate::sched::stall::point(crate::sched::stall::MSGQ_TAKE);
        // Relaxed (all payload loads): ordered after the Acquire load of READY.
        let meta = p.meta.load(Ordering::Relaxed);
        let handler = (meta & 0xffff) as u16;
        let nargs = ((meta >> 16) & 0xf) as usize;
        let kind = Kind::from_bits((meta >> 20) & 3);
        let (token, from) = if kind.is_some_and(|k| k != Kind::OneWay) {
            (
                p.token.load(Ordering::Relaxed),
                [
                    p.from[0].load(Ordering::Relaxed),
                    p.from[1].load(Ordering::Relaxed),
                ],
            )
        } else {
            (0, [0, 0])
        };
        let mut args = [0u64; MAX_ARGS];
        for (a, s) in args.iter_mut().zip(&p.args).take(nargs.min(MAX_ARGS)) {
            *a = s.load(Ordering::Relaxed);
        }
        let has_bulk = meta & (1 << 22) != 0;
        let len = ((meta >> 32) & 0x3fff) as usize;
        let pid = word::pid(w);
        let mut problem = None;
        bulk.clear();
        if has_bulk {
            let b = p.bulk.load(Ordering::Relaxed);
            let blk = self.block(b);
            let sent = word::pack(SENT, pid, b);
            // Acquire: pairs with the sender's Release store of SENT.
            let bw = blk.word.load(Ordering::Acquire);
            if bw != sent {
                problem = Some(format!(
                    "packet {t}: bulk block of ticket {b} is in state {bw:#x}, not sent by pid {pid}"
                ));
            } else if len > self.block_bytes() {
                problem = Some(format!(
                    "packet {t}: bulk length {len} exceeds the block size {}",
                    self.block_bytes()
                ));
            } else {
                // Relaxed loads: ordered after the Acquire load of READY.
                copy_from_words(self.block_data(b), len, bulk);
                let next = word::pack(FREE, 0, b.wrapping_add(self.blocks.len() as u64));
                // Release: our reads of the block happen before the next
                // claimant's writes (its Acquire CAS).
                let _ = blk
                    .word
                    .compare_exchange(sent, next, Ordering::Release, Ordering::Relaxed);
            }
        }
        if nargs > MAX_ARGS {
            problem = Some(format!(
                "packet {t}: {nargs} argument words (at most {MAX_ARGS})"
            ));
        }
        let kind = match kind {
            Some(k) => k,
            None => {
                problem.get_or_insert_with(|| format!("packet {t}: invalid message kind"));
                Kind::OneWay
            }
        };
        crate::sched::stall::point(crate::sched::stall::MSGQ_RELEASE);
        self.free_packet(p, w, t);
        if let Some(why) = problem {
            bulk.clear();
            return Event::Rejected(why);
        }
        Event::Message(Incoming {
            ticket: t,
            sender_pid: pid,
            handler,
            kind,
            token,
            from,
            nargs,
            args,
            has_bulk,
        })
    }
}

/// Copies `src` into the block words `dst` (little-endian, the last word
/// zero-padded), with Relaxed stores: the caller publishes them with a Release.
///
/// Whole words go through `chunks_exact`, so each is one load and one store —
/// no per-word `memcpy` call for a variable-length tail (which made bulk
/// transfers run at a tenth of the memory copy rate; see `lc98-bandwidth`).
/// The segment is written only through atomics: other processes may read (or,
/// if hostile, write) it concurrently, and a plain `memcpy` would be a data race.
fn copy_to_words(src: &[u8], dst: &[AtomicU64]) {
    let whole = src.chunks_exact(8);
    let tail = whole.remainder();
    let n = src.len() / 8;
    for (chunk, w) in whole.zip(&dst[..n]) {
        let v = u64::from_le_bytes(chunk.try_into().expect("chunks_exact(8)"));
        // Relaxed: see the function's doc.
        w.store(v, Ordering::Relaxed);
    }
    if !tail.is_empty() {
        let mut last = [0u8; 8];
        last[..tail.len()].copy_from_slice(tail);
        // Relaxed: see the function's doc.
        dst[n].store(u64::from_le_bytes(last), Ordering::Relaxed);
    }
}

/// Replaces `out` with the first `len` bytes of the block words `src` (`len`
/// at most `8 * src.len()`), with Relaxed loads: the caller ordered them after
/// an Acquire. Whole words as in [`copy_to_words`].
fn copy_from_words(src: &[AtomicU64], len: usize, out: &mut Vec<u8>) {
    out.clear();
    out.resize(len, 0);
    let n = len / 8;
    let mut whole = out.chunks_exact_mut(8);
    for (chunk, w) in (&mut whole).zip(&src[..n]) {
        // Relaxed: see the function's doc.
        chunk.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
    }
    let tail = whole.into_remainder();
    if !tail.is_empty() {
        // Relaxed: see the function's doc.
        let v = src[n].load(Ordering::Relaxed).to_le_bytes();
        let k = tail.len();
        tail.copy_from_slice(&v[..k]);
    }
}

/// A queue on the heap, for threads of one process, unit tests and loom models.
#[derive(Debug)]
pub struct HeapQueue {
    ctl: QueueCtl,
    bell: Doorbell,
    space: SpaceBell,
    packets: Vec<Packet>,
    blocks: Vec<BlockHdr>,
    data: Vec<AtomicU64>,
}

impl HeapQueue {
    /// `packets` packets and `blocks` blocks of `block_bytes` bytes (a multiple
    /// of 8); counts must be powers of two.
    pub fn new(packets: usize, blocks: usize, block_bytes: usize) -> Result<Self, Error> {
        if !packets.is_power_of_two()
            || !blocks.is_power_of_two()
            || !block_bytes.is_multiple_of(8)
            || block_bytes == 0
        {
            return Err(Error::InvalidArgument(format!(
                "heap queue: {packets} packets, {blocks} blocks of {block_bytes} bytes; counts must \
                 be powers of two and the block size a non-zero multiple of 8"
            )));
        }
        Ok(Self {
            ctl: QueueCtl::new(),
            bell: Doorbell::new(),
            space: SpaceBell::new(),
            packets: (0..packets as u64).map(Packet::new).collect(),
            blocks: (0..blocks as u64).map(BlockHdr::new).collect(),
            data: (0..blocks * block_bytes / 8)
                .map(|_| AtomicU64::new(0))
                .collect(),
        })
    }

    /// The packet tail word (for models and tests that play a sender dying
    /// halfway through a claim).
    pub fn queue_ctl_tail(&self) -> &AtomicU64 {
        self.ctl.tail_word()
    }

    /// The type word of the packet ticket `t` maps to (as above).
    pub fn packet_type_word(&self, t: u64) -> &AtomicU64 {
        &self.packets[(t % self.packets.len() as u64) as usize].ty
    }

    /// The receiver's doorbell, which every send through [`queue`](Self::queue) rings.
    pub fn doorbell(&self) -> &Doorbell {
        &self.bell
    }

    /// The senders' space bell, which a send that finds the ring full may
    /// sleep on and [`QueueRef::wake_senders`] rings.
    pub fn space_bell(&self) -> &SpaceBell {
        &self.space
    }

    /// The queue (with its doorbell and space bell).
    pub fn queue(&self) -> QueueRef<'_> {
        QueueRef {
            ctl: &self.ctl,
            bell: Some(&self.bell),
            space: Some(&self.space),
            packets: &self.packets,
            blocks: &self.blocks,
            data: &self.data,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! Single-process protocol tests on heap queues (Miri-friendly: no
    //! segment, no system calls; the clock and liveness are injected).
    use super::*;
    use std::cell::Cell;
    use std::collections::HashSet;

    struct FakeEnv {
        now: Cell<u64>,
        dead: HashSet<u32>,
    }

    impl FakeEnv {
        fn new() -> Self {
            Self {
                now: Cell::new(0),
                dead: HashSet::new(),
            }
        }
        fn advance(&self, ns: u64) {
            self.now.set(self.now.get() + ns);
        }
    }

    impl Env for FakeEnv {
        fn now_ns(&self) -> u64 {
            self.now.get()
        }
        fn alive(&self, pid: u32) -> bool {
            !self.dead.contains(&pid)
        }
        fn lease_ns(&self) -> u64 {
            1000
        }
    }

    fn msg<'a>(args: &'a [u64], bulk: Option<&'a [u8]>) -> Outgoing<'a> {
        Outgoing {
            handler: 7,
            kind: Kind::OneWay,
            token: 0,
            from: [0, 0],
            args,
            bulk,
        }
    }

    fn no_wait(_: &Blocked<'_>) -> Result<(), Error> {
        Err(Error::Timeout("full".into()))
    }

    struct TasLock(crate::lock::Tas);
    impl ClaimLock for TasLock {
        fn with_lock(&self, f: &mut dyn FnMut()) -> Result<(), Error> {
            use lock_api::RawMutex;
            let g = self.0.lock();
            f();
            // SAFETY: acquired above on this thread.
            unsafe { self.0.unlock(g) };
            Ok(())
        }
    }

    fn round_trip(lock: Option<&dyn ClaimLock>) {
        let hq = HeapQueue::new(4, 2, 64).unwrap();
        let q = hq.queue();
        let env = FakeEnv::new();
        let mut head = Head::default();
        let mut buf = Vec::new();
        let mut st = SendStats::default();
        assert_eq!(q.poll_one(&mut head, &env, &mut buf), Event::Empty);
        // Three laps of the ring, with bulk data every other message.
        for i in 0..12u64 {
            let data: Vec<u8> = (0..(i as u8 * 5 % 64)).collect();
            let bulk = (i % 2 == 0).then_some(&data[..]);
            q.send(
                42,
                lock,
                &msg(&[i, i * 3], bulk),
                &env,
                &mut no_wait,
                &mut st,
            )
            .unwrap();
            match q.poll_one(&mut head, &env, &mut buf) {
                Event::Message(m) => {
                    assert_eq!((m.handler, m.nargs, m.sender_pid), (7, 2, 42));
                    assert_eq!(&m.args[..2], &[i, i * 3]);
                    assert_eq!(m.has_bulk, bulk.is_some());
                    if bulk.is_some() {
                        assert_eq!(buf, data);
                    }
                }
                e => panic!("expected a message, got {e:?}"),
            }
        }
        assert_eq!(st, SendStats::default());
        assert_eq!(q.poll_one(&mut head, &env, &mut buf), Event::Empty);
    }

    #[test]
    fn round_trip_lock_free() {
        round_trip(None);
    }

    #[test]
    fn round_trip_locked() {
        let l = TasLock(<crate::lock::Tas as lock_api::RawMutex>::INIT);
        round_trip(Some(&l));
    }

    #[test]
    fn word_copies_round_trip_every_length() {
        let words: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(u64::MAX)).collect();
        let mut out = vec![9u8; 3];
        for len in 0..=32 {
            let src: Vec<u8> = (0..len as u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
            copy_to_words(&src, &words);
            copy_from_words(&words, len, &mut out);
            assert_eq!(out, src, "length {len}");
            if len % 8 != 0 {
                // The last word is zero-padded, not left with stale bytes.
                let last = words[len / 8].load(Ordering::Relaxed).to_le_bytes();
                assert!(last[len % 8..].iter().all(|&b| b == 0), "length {len}");
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "futex system calls")]
    fn doorbell_wakes_only_announced_sleepers() {
        let b = Doorbell::new();
        assert!(!b.ring(), "nobody announced: no wake call");
        b.announce();
        b.cancel();
        assert!(!b.ring(), "announcement taken back");
        b.announce();
        assert!(
            !b.sleep(Some(Duration::from_millis(1))),
            "not rung: timed out"
        );
        b.announce();
        assert!(b.ring(), "announced: rung");
        assert!(!b.ring(), "one ring per announcement");
        assert!(
            b.sleep(Some(Duration::from_secs(10))),
            "rung before it slept"
        );
        // A ring from another thread ends a sleep with no time limit.
        std::thread::scope(|s| {
            b.announce();
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(5));
                assert!(b.ring());
            });
            assert!(b.sleep(None));
        });
        // A peer scribbling on the word: the sleep ends at once (the word
        // is not ASLEEP), is not taken for a ring, and leaves the bell awake.
        b.word().store(77, Ordering::Relaxed);
        assert!(
            !b.sleep(Some(Duration::from_millis(1))),
            "garbage is no ring"
        );
        assert!(!b.ring(), "the sleep left the bell awake");
    }

    #[test]
    #[cfg_attr(miri, ignore = "futex system calls")]
    fn space_bell_wakes_only_announced_sleepers() {
        let b = SpaceBell::new();
        assert!(!b.ring(), "nobody announced: no wake call");
        let a = b.announce();
        assert_eq!(b.announce(), a, "a second sleeper shares the announcement");
        assert!(
            !b.sleep(a, Some(Duration::from_millis(1))),
            "not rung: timed out"
        );
        assert!(b.ring(), "announced: rung");
        assert!(!b.ring(), "one ring per announcement");
        assert!(
            b.sleep(a, Some(Duration::from_secs(10))),
            "rung between announcement and sleep: no sleep at all"
        );
        // A ring from another thread ends a sleep with no time limit.
        std::thread::scope(|s| {
            let a = b.announce();
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(5));
                assert!(b.ring());
            });
            assert!(b.sleep(a, None));
        });
        // A peer scribbling on the word: a sleep ends at once (the word is
        // not what was announced), and the next ring is at most spurious.
        let a = b.announce();
        b.word().store(77, Ordering::Relaxed);
        assert!(b.sleep(a, Some(Duration::from_secs(10))));
        b.ring();
        assert!(!b.ring(), "the ring cleared the sleepers flag");
    }

    #[test]
    fn full_ring_sleeps_on_the_space_bell_until_freed() {
        let hq = HeapQueue::new(2, 1, 64).unwrap();
        let q = hq.queue();
        let env = FakeEnv::new();
        let mut st = SendStats::default();
        for i in 0..2 {
            q.send(5, None, &msg(&[i], None), &env, &mut no_wait, &mut st)
                .unwrap();
        }
        // The third send finds the ring full: it may sleep, but a look after
        // the announcement that finds the slot freed ends the sleep at once.
        let mut head = Head::default();
        let mut buf = Vec::new();
        let mut got = Vec::new();
        let mut slept = 0;
        q.send(
            5,
            None,
            &msg(&[2], None),
            &env,
            &mut |b| {
                assert!(b.can_sleep(), "a full ring waits for the receiver");
                if let Event::Message(m) = q.poll_one(&mut head, &env, &mut buf) {
                    got.push(m.args[0]);
                }
                // Freed above (and no ring): no sleep, whatever the limit.
                assert!(b.sleep(None), "the slot was freed before the sleep");
                slept += 1;
                Ok(())
            },
            &mut st,
        )
        .unwrap();
        assert_eq!(slept, 1);
        while let Event::Message(m) = q.poll_one(&mut head, &env, &mut buf) {
            got.push(m.args[0]);
        }
        assert_eq!(got, [0, 1, 2]);
        assert!(q.wake_senders(), "the sender's announcement is still up");
        assert!(!q.wake_senders());
    }

    #[test]
    fn full_queue_waits_and_keeps_order() {
        let hq = HeapQueue::new(2, 1, 64).unwrap();
        let q = hq.queue();
        let env = FakeEnv::new();
        let mut st = SendStats::default();
        for i in 0..2 {
            q.send(5, None, &msg(&[i], None), &env, &mut no_wait, &mut st)
                .unwrap();
        }
        // The third send finds the ring full; its wait hook drains one.
        let mut head = Head::default();
        let mut buf = Vec::new();
        let mut got = Vec::new();
        q.send(
            5,
            None,
            &msg(&[2], None),
            &env,
            &mut |_| {
                if let Event::Message(m) = q.poll_one(&mut head, &env, &mut buf) {
                    got.push(m.args[0]);
                }
                Ok(())
            },
            &mut st,
        )
        .unwrap();
        while let Event::Message(m) = q.poll_one(&mut head, &env, &mut buf) {
            got.push(m.args[0]);
        }
        assert_eq!(got, [0, 1, 2]);
    }

    #[test]
    fn too_many_args_and_bulk_are_errors() {
        let hq = HeapQueue::new(2, 1, 64).unwrap();
        let q = hq.queue();
        let env = FakeEnv::new();
        let mut st = SendStats::default();
        let nine = [0u64; 9];
        assert!(matches!(
            q.send(5, None, &msg(&nine, None), &env, &mut no_wait, &mut st),
            Err(Error::InvalidArgument(_))
        ));
        let big = [0u8; 65];
        assert!(matches!(
            q.send(5, None, &msg(&[], Some(&big)), &env, &mut no_wait, &mut st),
            Err(Error::InvalidArgument(_))
        ));
        assert!(HeapQueue::new(3, 1, 64).is_err());
    }

    #[test]
    fn unclaimed_ticket_is_revoked_after_the_lease() {
        let hq = HeapQueue::new(4, 1, 64).unwrap();
        let q = hq.queue();
        let env = FakeEnv::new();
        let mut head = Head::default();
        let mut buf = Vec::new();
        // A sender took ticket 0 and vanished before its type CAS.
        hq.ctl.tail_word().fetch_add(1, Ordering::Relaxed);
        assert_eq!(q.poll_one(&mut head, &env, &mut buf), Event::Pending);
        env.advance(999);
        assert_eq!(q.poll_one(&mut head, &env, &mut buf), Event::Pending);
        env.advance(1);
        assert_eq!(
            q.poll_one(&mut head, &env, &mut buf),
            Event::Recovered { ticket: 0, pid: 0 }
        );
        // A slow sender holding ticket 0 now sees a later lap and retries.
        let p = &hq.packets[0];
        assert_eq!(p.ty.load(Ordering::Relaxed), word::pack(FREE, 0, 4));
        let mut st = SendStats::default();
        q.send(9, None, &msg(&[1], None), &env, &mut no_wait, &mut st)
            .unwrap();
        assert!(
            matches!(q.poll_one(&mut head, &env, &mut buf), Event::Message(m) if m.args[0] == 1)
        );
    }

    #[test]
    fn dead_claimant_is_recovered_live_one_is_not() {
        let hq = HeapQueue::new(4, 2, 64).unwrap();
        let q = hq.queue();
        let mut env = FakeEnv::new();
        let mut head = Head::default();
        let mut buf = Vec::new();
        // pid 77 claimed ticket 0 and a bulk block, then stopped.
        hq.ctl.tail_word().fetch_add(1, Ordering::Relaxed);
        hq.ctl.bulk_tail.0.fetch_add(1, Ordering::Relaxed);
        hq.blocks[0]
            .word
            .store(word::pack(CLAIMED, 77, 0), Ordering::Relaxed);
        hq.packets[0].bulk.store(0, Ordering::Relaxed);
        hq.packets[0]
            .ty
            .store(word::pack(CLAIMED, 77, 0), Ordering::Relaxed);
        for _ in 0..10 {
            env.advance(5000);
            assert_eq!(
                q.poll_one(&mut head, &env, &mut buf),
                Event::Pending,
                "77 is alive"
            );
        }
        env.dead.insert(77);
        env.advance(500);
        assert_eq!(
            q.poll_one(&mut head, &env, &mut buf),
            Event::Recovered { ticket: 0, pid: 77 }
        );
        assert_eq!(
            hq.blocks[0].word.load(Ordering::Relaxed),
            word::pack(FREE, 0, 2),
            "its bulk block is freed with it"
        );
    }

    #[test]
    fn dead_block_claimant_is_recovered_by_the_next_sender() {
        let hq = HeapQueue::new(4, 1, 64).unwrap();
        let q = hq.queue();
        let mut env = FakeEnv::new();
        env.dead.insert(66);
        // pid 66 claimed bulk ticket 0 and died before claiming a packet.
        hq.ctl.bulk_tail.0.fetch_add(1, Ordering::Relaxed);
        hq.blocks[0]
            .word
            .store(word::pack(CLAIMED, 66, 0), Ordering::Relaxed);
        let mut st = SendStats::default();
        let data = [1u8; 10];
        q.send(
            9,
            None,
            &msg(&[], Some(&data)),
            &env,
            &mut |_| {
                env.advance(300);
                Ok(())
            },
            &mut st,
        )
        .unwrap();
        assert_eq!(st.recovered_blocks, 1);
        let mut head = Head::default();
        let mut buf = Vec::new();
        assert!(matches!(
            q.poll_one(&mut head, &env, &mut buf),
            Event::Message(_)
        ));
        assert_eq!(buf, data);
    }

    #[test]
    fn garbage_is_rejected_never_delivered_or_panicking() {
        let hq = HeapQueue::new(4, 2, 64).unwrap();
        let q = hq.queue();
        let env = FakeEnv::new();
        let mut head = Head::default();
        let mut buf = Vec::new();
        let mut rng = crate::util::rng::SplitMix64::stream(7, 0);
        let mut rejected = 0;
        let iters = if cfg!(miri) { 30 } else { 3000 };
        for _ in 0..iters {
            // A hostile peer scribbles on the head packet, its payload and a block.
            let h = head.next();
            let p = &hq.packets[(h % 4) as usize];
            let ty = match rng.next_u64() % 4 {
                0 => rng.next_u64(),
                1 => word::pack(READY, (rng.next_u64() % 100) as u32, h),
                2 => word::pack(rng.next_u64() % 4, 3, h.wrapping_add(rng.next_u64() % 8)),
                _ => word::pack(READY, 3, h),
            };
            p.ty.store(ty, Ordering::Relaxed);
            p.meta.store(rng.next_u64(), Ordering::Relaxed);
            p.bulk.store(rng.next_u64() % 4, Ordering::Relaxed);
            hq.blocks[(rng.next_u64() % 2) as usize]
                .word
                .store(rng.next_u64(), Ordering::Relaxed);
            hq.ctl.tail_word().store(rng.next_u64(), Ordering::Relaxed);
            for _ in 0..4 {
                env.advance(600);
                match q.poll_one(&mut head, &env, &mut buf) {
                    Event::Message(m) => {
                        assert!(m.nargs <= MAX_ARGS);
                        assert!(buf.len() <= q.block_bytes());
                    }
                    Event::Rejected(_) => rejected += 1,
                    _ => {}
                }
            }
        }
        assert!(rejected > 0, "no garbage was ever rejected");
    }
}
