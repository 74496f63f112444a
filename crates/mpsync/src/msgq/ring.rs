//! One destination queue of an endpoint (paper 004 §2, Figure 1) and the
//! private area of one connection to it, on plain memory — no pointers, so the
//! same `#[repr(C)]` structures work in memory that several processes map at
//! different addresses, and on the heap ([`HeapQueue`], [`HeapConn`]) for
//! threads, unit tests and loom models.
//!
//! Two kinds of memory, with two kinds of trust:
//! - the **request ring** ([`QueueRef`]): the slots (one type word each), the
//!   tail, the doorbell, the space bell and the claim lock, mapped by the
//!   receiver and by every connected sender — any of which may write anything;
//! - a **connection area** ([`ConnRef`], [`ReplyRef`]): the records (one
//!   message in flight each), the bulk blocks and the reply ring of ONE
//!   connection, mapped only by the receiver and that connection's process.
//!
//! Protocol words are described in [`super::word`]. In short, per message:
//!
//! 1. the sender claims a record of its connection (`FREE(g) → FILLING(g)`),
//!    and a bulk block if it has bulk data (`FREE(g) → OWNED(g)`), and writes
//!    the payload there;
//! 2. it claims a ticket `t` and publishes in one step — lock-free (Figure 3):
//!    seeing slot `t` `FREE(t)`, a CAS of the tail `t → t + 1`, then the slot CAS
//!    `FREE(t) → READY(sid, rec, t)` (Release); locked (Figure 2): the same
//!    steps inside a process-shared lock. Before the slot CAS the record holds
//!    `ticket = t` and is `SUBMITTED`; after it, `SENT`;
//! 3. the receiver, at `head = t`, loads `READY(sid, rec, t)` (Acquire), finds
//!    connection `sid`'s record `rec` `SUBMITTED`/`SENT` with ticket `t`, copies
//!    the message and its block out, frees the record (a CAS from the exact
//!    word it validated: a seqlock — a record changed under the copy is
//!    rejected) and the block, frees the slot (`FREE(t + Q)`, Release) and only
//!    then runs the handler.
//!
//! Recovery (nothing in the paper; needed because peers are processes that can
//! die or lie): a ticket handed out and never published for a lease is revoked
//! by the receiver (`FREE(t) → FREE(t + Q)`): a slow sender's CAS then fails and
//! it takes a new ticket. Since a slot holds nothing but its word, and a word
//! is valid only if the connection it names holds a matching record, a slot
//! word no honest sender wrote is rejected at once, and a dead sender leaves
//! nothing to recover. The receiver also polices the tail: honest tails lie in
//! `[head − 1, head + Q]` (a sender takes ticket `t` only after seeing slot
//! `t` free, i.e. ticket `t − Q` delivered; a locked claim's holder stores
//! the tail past its ticket after publishing, so the receiver may have taken
//! the message first), so a tail outside that range was written by a peer and
//! is put back to the head. The receiver publishes its head as a hint, and
//! senders publish only within a ring of it (see [`QueueCtl`]).

use super::Error;
use super::word::{
    self, FILLING, FREE, OWNED, READY, SENT, SUBMITTED, gen_of, gen_state, gen_word, next_gen,
};
use crate::sync::{AtomicU32, AtomicU64, Ordering, fence};
use std::time::Duration;

/// Most argument words a message carries (§2: "short messages of up to eight words").
pub const MAX_ARGS: usize = 8;

/// A sender's tight loops (lost tail races, a tail behind its slots) look at
/// their deadline at least this often.
const LOOPS_PER_CHECK: u32 = 64;

/// What a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A message that expects no reply.
    OneWay = 1,
    /// A request; the handler may reply once, through the connection it came by.
    Request = 2,
}

impl Kind {
    fn from_bits(b: u64) -> Option<Self> {
        match b {
            1 => Some(Self::OneWay),
            2 => Some(Self::Request),
            _ => None,
        }
    }
}

/// One slot of the request ring: its type word (see [`super::word`]) alone, on
/// its own 128-byte line pair (no false sharing between neighbouring slots).
#[repr(C, align(128))]
#[derive(Debug)]
pub struct Slot {
    ty: AtomicU64,
}

impl Slot {
    /// A free slot for ticket `index` (the creator's initial lap).
    pub fn new(index: u64) -> Self {
        Self {
            ty: AtomicU64::new(word::free(index)),
        }
    }

    /// The type word (for tests and fault injection).
    pub fn type_word(&self) -> &AtomicU64 {
        &self.ty
    }
}

/// One message in flight, in a connection's private area: written by one of
/// the connection's sender threads, read by the receiver.
///
/// `meta`: handler (16 bits) | nargs (4) << 16 | kind (2) << 20 | has bulk (1) << 22.
/// `bulk`: block index (32 bits) | length << 32; `bulk_gen`: the block's
/// generation while it holds this record's data.
#[repr(C, align(128))]
#[derive(Debug)]
pub struct Record {
    word: AtomicU64,
    ticket: AtomicU64,
    meta: AtomicU64,
    bulk: AtomicU64,
    bulk_gen: AtomicU64,
    token: AtomicU64,
    args: [AtomicU64; MAX_ARGS],
}

impl Record {
    /// A free record.
    pub fn new() -> Self {
        Self {
            word: AtomicU64::new(gen_word(FREE, 0)),
            ticket: AtomicU64::new(0),
            meta: AtomicU64::new(0),
            bulk: AtomicU64::new(0),
            bulk_gen: AtomicU64::new(0),
            token: AtomicU64::new(0),
            args: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// The record word (for tests and fault injection).
    pub fn record_word(&self) -> &AtomicU64 {
        &self.word
    }
}

impl Default for Record {
    fn default() -> Self {
        Self::new()
    }
}

/// The state word of one bulk block, on its own line.
#[repr(C, align(128))]
#[derive(Debug)]
pub struct BlockHdr {
    word: AtomicU64,
}

impl BlockHdr {
    /// A free block.
    pub fn new() -> Self {
        Self {
            word: AtomicU64::new(gen_word(FREE, 0)),
        }
    }

    /// The block word (for tests and fault injection).
    pub fn block_word(&self) -> &AtomicU64 {
        &self.word
    }
}

impl Default for BlockHdr {
    fn default() -> Self {
        Self::new()
    }
}

/// One slot of a connection's reply ring (server → client), with its message
/// inline: `meta` is nargs (4 bits) | has bulk (1) << 4 | bulk length << 32.
#[repr(C, align(128))]
#[derive(Debug)]
pub struct ReplySlot {
    word: AtomicU64,
    meta: AtomicU64,
    token: AtomicU64,
    args: [AtomicU64; MAX_ARGS],
}

impl ReplySlot {
    /// A free reply slot for reply number `index`.
    pub fn new(index: u64) -> Self {
        Self {
            word: AtomicU64::new(word::reply(FREE, index)),
            meta: AtomicU64::new(0),
            token: AtomicU64::new(0),
            args: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// The slot word (for tests and fault injection).
    pub fn slot_word(&self) -> &AtomicU64 {
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

    /// [`sleep`](Self::sleep) on this bell and `other` at once (both
    /// announced): until either is rung, a signal, or `timeout`. Returns
    /// whether either was rung. Leaves both awake.
    pub fn sleep_with(&self, other: &Doorbell, timeout: Option<Duration>) -> bool {
        let _ =
            crate::sched::park_shared_any(&[(&self.word, ASLEEP), (&other.word, ASLEEP)], timeout);
        // Relaxed: as in `sleep`.
        let a = self.word.swap(AWAKE, Ordering::Relaxed) == AWAKE;
        let b = other.word.swap(AWAKE, Ordering::Relaxed) == AWAKE;
        a || b
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

/// Why a send waits, handed to its wait hook — and, when only the receiver can
/// end the wait and the queue has a [`SpaceBell`], a way to sleep until it
/// frees something.
#[derive(Clone, Copy)]
pub struct Blocked<'a> {
    bell: Option<&'a SpaceBell>,
    /// Whether the sender is still blocked (looked at again after announcing).
    still: &'a dyn Fn() -> bool,
}

impl std::fmt::Debug for Blocked<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blocked")
            .field("can_sleep", &self.bell.is_some())
            .finish_non_exhaustive()
    }
}

impl<'a> Blocked<'a> {
    /// A wait that only the sender itself can end (it must keep looking):
    /// never sleeps.
    pub fn busy() -> Blocked<'static> {
        static ALWAYS: fn() -> bool = || true;
        Blocked {
            bell: None,
            still: &ALWAYS,
        }
    }

    /// Whether [`sleep`](Self::sleep) can sleep: the queue has a space bell
    /// and what the sender waits for only the receiver can free.
    pub fn can_sleep(&self) -> bool {
        self.bell.is_some()
    }

    /// Announces on the space bell, looks once more and, if still blocked,
    /// sleeps until the receiver frees slots or records or `timeout` passes
    /// (None: no limit, for models). Returns whether the wait ended (the
    /// second look found it ended, or the bell was rung) as opposed to a
    /// timeout, or no bell.
    pub fn sleep(&self, timeout: Option<Duration>) -> bool {
        let Some(bell) = self.bell else {
            return false;
        };
        let announced = bell.announce();
        // The second look: its Acquire loads pair with the receiver's Release
        // CASes that free slots and records (ordered before its look at the
        // bell by the Dekker fences).
        if !(self.still)() {
            return true;
        }
        crate::sched::stall::point(crate::sched::stall::MSGQ_SPACE_SLEEP);
        bell.sleep(announced, timeout)
    }
}

/// The shared words of the request ring: the tail (§2: "queue tail
/// information, accessed only by senders" — and policed by the receiver) and
/// the receiver's *head hint*, the head as the receiver last published it.
///
/// The head itself lives in the receiver's own memory ([`Head`]); the hint
/// is a copy senders read to know which lap a slot belongs to: a sender
/// publishes at ticket `t` only if `t` lies within a ring of the hint. So a
/// slot word a peer left ahead of the receiver (`FREE(t)` for a lap the ring
/// has not reached) never takes an honest message, which the receiver would
/// then reject on reaching it. The receiver writes the hint after every poll
/// that moved its head (and rewrites one a peer changed); the value never
/// runs ahead of the true head, so a stale hint only makes a sender wait.
#[repr(C)]
#[derive(Debug)]
pub struct QueueCtl {
    tail: Line,
    head: Line,
}

impl QueueCtl {
    /// The tail and the head hint at ticket 0.
    pub fn new() -> Self {
        Self {
            tail: Line(AtomicU64::new(0)),
            head: Line(AtomicU64::new(0)),
        }
    }

    /// The tail (for tests and fault injection).
    pub fn tail_word(&self) -> &AtomicU64 {
        &self.tail.0
    }

    /// The head hint (for tests and fault injection).
    pub fn head_word(&self) -> &AtomicU64 {
        &self.head.0
    }
}

impl Default for QueueCtl {
    fn default() -> Self {
        Self::new()
    }
}

/// What the protocol needs from its surroundings: a clock and the lease after
/// which an unpublished ticket is revoked. Real endpoints use
/// `CLOCK_MONOTONIC`; models inject their own.
pub trait Env {
    /// Monotonic nanoseconds.
    fn now_ns(&self) -> u64;
    /// How long a handed-out ticket may stay unpublished before the receiver
    /// revokes it.
    fn lease_ns(&self) -> u64;
}

/// The lock of a locked claim (Figure 2), in memory a peer may write.
pub trait ClaimLock {
    /// Runs `f` holding the lock, or without it once the lock has been stuck
    /// (no hand-over) for the lock's lease — the claim is safe without the
    /// lock, which only orders senders. Returns whether the lock was broken;
    /// `Err` (a timeout) once `deadline_ns` ([`Env::now_ns`] time) passes.
    fn with_lock(&self, f: &mut dyn FnMut(), deadline_ns: u64) -> Result<bool, Error>;
}

/// A message to send.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    /// The handler index the receiver runs.
    pub handler: u16,
    /// One-way or request.
    pub kind: Kind,
    /// Request/reply matching token (requests).
    pub token: u64,
    /// Up to [`MAX_ARGS`] words.
    pub args: &'a [u64],
    /// Bulk data, up to the connection's block size.
    pub bulk: Option<&'a [u8]>,
}

/// A message copied out of the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incoming {
    /// The slot's ticket.
    pub ticket: u64,
    /// The connection it came through.
    pub sid: u32,
    /// The handler index (not yet checked against the receiver's table).
    pub handler: u16,
    /// One-way or request.
    pub kind: Kind,
    /// Request/reply token.
    pub token: u64,
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
    /// A ticket is handed out at the head, not yet published.
    Pending,
    /// A message, copied out and released; bulk data (if any) in the buffer.
    Message(Incoming),
    /// The head ticket was handed out and not published within the lease; it
    /// was revoked (its slot moved to the next lap) without delivery.
    Revoked {
        /// The ticket skipped.
        ticket: u64,
    },
    /// The head held something no correct sender writes (a slot word of the
    /// wrong lap or state, or naming a record that does not hold it); it was
    /// released without delivery.
    Rejected(String),
    /// The head is published by connection `sid`, which the receiver's table
    /// does not know (yet): nothing was consumed.
    Unknown {
        /// The connection index the slot names.
        sid: u32,
    },
}

/// The receiver's private state for one queue (§2: "queue head information,
/// accessed only by the recipient") — kept in the receiver's own memory, where
/// no peer can corrupt it.
#[derive(Debug, Default, Clone)]
pub struct Head {
    next: u64,
    stuck_word: u64,
    stuck_since: Option<u64>,
    tail_repairs: u64,
}

impl Head {
    /// The ticket the receiver expects next.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// How often the receiver found the tail outside `[head, head + Q]` (a
    /// peer wrote it) and put it back.
    pub fn tail_repairs(&self) -> u64 {
        self.tail_repairs
    }
}

/// Counters of a sender's unusual work, for tests and reports.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SendStats {
    /// Tickets given up because the slot moved on (revoked while we were slow).
    pub retries: u64,
    /// Records (and their blocks) this sender took back because a peer
    /// destroyed the slot that announced them: messages lost to a peer.
    pub lost: u64,
    /// Claim locks found stuck for a lock lease, reset and claimed without.
    pub lock_breaks: u64,
}

/// One connection's private area: its records and bulk blocks.
#[derive(Debug, Clone, Copy)]
pub struct ConnRef<'a> {
    records: &'a [Record],
    blocks: &'a [BlockHdr],
    data: &'a [AtomicU64],
}

impl<'a> ConnRef<'a> {
    /// An area over the given parts: at most [`word::MAX_RECORDS`] records,
    /// at least one block, and `data.len()` a multiple of `blocks.len()`.
    pub fn new(
        records: &'a [Record],
        blocks: &'a [BlockHdr],
        data: &'a [AtomicU64],
    ) -> Result<Self, Error> {
        if records.is_empty() || records.len() > word::MAX_RECORDS {
            return Err(Error::InvalidArgument(format!(
                "connection area: {} records; must be 1..={}",
                records.len(),
                word::MAX_RECORDS
            )));
        }
        if blocks.is_empty() || !data.len().is_multiple_of(blocks.len()) {
            return Err(Error::InvalidArgument(format!(
                "connection area: {} data words do not divide into {} blocks",
                data.len(),
                blocks.len()
            )));
        }
        Ok(Self {
            records,
            blocks,
            data,
        })
    }

    /// Bytes per bulk block.
    pub fn block_bytes(&self) -> usize {
        self.data.len() / self.blocks.len() * 8
    }

    /// Records: the most messages this connection may have in flight.
    pub fn records(&self) -> usize {
        self.records.len()
    }

    fn block_data(&self, j: usize) -> &'a [AtomicU64] {
        let w = self.data.len() / self.blocks.len();
        &self.data[j * w..(j + 1) * w]
    }
}

/// Who sends, through what: the connection index the receiver gave it, its
/// area, where to start looking for a free record or block (process-private
/// hints, any value), and when the send gives up (the [`Env`]'s clock).
#[derive(Debug, Clone, Copy)]
pub struct Sender<'a> {
    /// The connection's index at the receiver.
    pub sid: u32,
    /// The connection's private area.
    pub conn: ConnRef<'a>,
    /// Hint: the record to try first.
    pub hint: &'a AtomicU32,
    /// When the send gives up, in [`Env::now_ns`] time.
    pub deadline_ns: u64,
}

/// A queue: references into wherever its memory lives.
#[derive(Debug, Clone, Copy)]
pub struct QueueRef<'a> {
    ctl: &'a QueueCtl,
    bell: Option<&'a Doorbell>,
    space: Option<&'a SpaceBell>,
    slots: &'a [Slot],
}

/// How one attempt of the locked claim ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LockedStep {
    /// Published at this ticket.
    Got(u64),
    /// The slot of ticket `.0` holds the previous lap (word `.1`): full.
    Full(u64, u64),
    /// Ticket `.0` is a ring or more ahead of the receiver's head hint.
    Ahead(u64),
    /// The tail moved a whole ring without finding its slot: let the
    /// receiver police it and look again.
    Busy,
    /// The record was taken from us (a peer forged a slot naming it).
    Stolen(u64),
}
impl<'a> QueueRef<'a> {
    /// A queue over the given slots (a power of two of them, so ticket mod
    /// length survives the 2⁴⁰ sequence wrap, and at most 2³⁰).
    pub fn new(ctl: &'a QueueCtl, slots: &'a [Slot]) -> Result<Self, Error> {
        if !slots.len().is_power_of_two() || slots.len() > 1 << 30 {
            return Err(Error::InvalidArgument(format!(
                "queue geometry: {} slots; must be a power of two up to 2^30",
                slots.len()
            )));
        }
        Ok(Self {
            ctl,
            bell: None,
            space: None,
            slots,
        })
    }

    /// This queue with the receiver's doorbell: every send rings it after
    /// publishing its message.
    pub fn with_doorbell(mut self, bell: &'a Doorbell) -> Self {
        self.bell = Some(bell);
        self
    }

    /// This queue with its senders' space bell: a send that finds the ring
    /// full (or its connection's records all in flight) may sleep on it
    /// ([`Blocked::sleep`]), and the receiver rings it
    /// ([`wake_senders`](Self::wake_senders)) after freeing slots.
    pub fn with_space_bell(mut self, bell: &'a SpaceBell) -> Self {
        self.space = Some(bell);
        self
    }

    /// The receiver's half of the space bell: call after freeing slots
    /// (delivering, revoking or rejecting messages); wakes the senders that
    /// sleep because the ring was full. A fence and a load, and a system call
    /// only when a sender announced that it sleeps. Returns whether it made one.
    pub fn wake_senders(&self) -> bool {
        self.space.is_some_and(SpaceBell::ring)
    }

    /// The tail as senders left it (a hint: peers may write anything).
    pub fn tail(&self) -> u64 {
        // Relaxed: a diagnostic snapshot.
        self.ctl.tail.0.load(Ordering::Relaxed)
    }

    /// The receiver's half of the head hint (see [`QueueCtl`]): publishes
    /// `head` (the receiver's [`Head::next`]) if the hint says otherwise.
    /// Returns whether it wrote (then senders may be waiting on it: ring the
    /// space bell, [`wake_senders`](Self::wake_senders), which also orders
    /// this store before its look at the bell).
    pub fn publish_head(&self, head: &Head) -> bool {
        // Relaxed (load and store): a hint, read by senders as one; nothing
        // is published through it (the slot words carry the order), and the
        // space bell's SeqCst fence orders the store before the ring.
        if self.ctl.head.0.load(Ordering::Relaxed) == head.next {
            return false;
        }
        self.ctl.head.0.store(head.next, Ordering::Relaxed);
        true
    }

    /// Where ticket `t` stands against the receiver's head hint: `< 0`
    /// behind it (passed), `>= Q` a lap or more ahead (not yet), else within
    /// the ring.
    fn past_head(&self, t: u64) -> i64 {
        // Relaxed: a hint (see `QueueCtl`).
        let h = self.ctl.head.0.load(Ordering::Relaxed);
        word::seq_diff(word::seq(t), word::seq(h))
    }

    /// Slots in the ring.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    fn slot(&self, t: u64) -> &'a Slot {
        &self.slots[(t % self.slots.len() as u64) as usize]
    }

    /// What a waiting sender waits for; with the space bell when `for_receiver`
    /// (only the receiver can end the wait).
    fn blocked<'b>(&'b self, still: &'b dyn Fn() -> bool, for_receiver: bool) -> Blocked<'b> {
        Blocked {
            bell: self.space.filter(|_| for_receiver),
            still,
        }
    }

    /// Sends one message through connection `s` (§3): a record and, with bulk
    /// data, a block of the connection's own area first, then the ticket and
    /// the slot. `wait` is called whenever the sender must wait (ring full,
    /// records all in flight, lock busy) and at least every
    /// 64 turns of a loop that could go on: it polls the
    /// sender's own endpoint (§3.1's deadlock avoidance), backs off or sleeps
    /// ([`Blocked::sleep`]), and returns an error to give up (a timeout). On
    /// any error the record and block are freed again, unless a peer's forged
    /// slot took the record — then the error says the message may have been
    /// delivered. Never delivers a message twice.
    pub fn send(
        &self,
        s: &Sender<'_>,
        lock: Option<&dyn ClaimLock>,
        msg: &Outgoing<'_>,
        env: &dyn Env,
        wait: &mut dyn FnMut(&Blocked<'_>) -> Result<(), Error>,
        stats: &mut SendStats,
    ) -> Result<u64, Error> {
        if s.sid as usize >= word::MAX_SIDS {
            return Err(Error::InvalidArgument(format!(
                "connection index {} does not fit the slot word's {} bits",
                s.sid,
                word::SID_BITS
            )));
        }
        if msg.args.len() > MAX_ARGS {
            return Err(Error::InvalidArgument(format!(
                "{} argument words; a message carries at most {MAX_ARGS} (send more as bulk data)",
                msg.args.len()
            )));
        }
        if let Some(d) = msg.bulk
            && d.len() > s.conn.block_bytes()
        {
            return Err(Error::InvalidArgument(format!(
                "{} bytes of bulk data; this connection's blocks hold at most {}",
                d.len(),
                s.conn.block_bytes()
            )));
        }
        let (k, g) = self.claim_record(s, wait, stats)?;
        let rec = &s.conn.records[k];
        crate::sched::stall::point(crate::sched::stall::MSGQ_FILL);
        let mut meta =
            msg.handler as u64 | ((msg.args.len() as u64) << 16) | ((msg.kind as u64) << 20);
        let mut block = None;
        if let Some(d) = msg.bulk {
            let (j, gj) = match self.claim_block(s, wait, stats) {
                Ok(b) => b,
                Err(e) => {
                    free_record(rec, g);
                    return Err(e);
                }
            };
            // Relaxed stores (data and record): published by the slot's
            // Release CAS below, which the receiver's Acquire load pairs with.
            copy_to_words(d, s.conn.block_data(j));
            meta |= 1 << 22;
            rec.bulk
                .store(j as u64 | ((d.len() as u64) << 32), Ordering::Relaxed);
            rec.bulk_gen.store(gj, Ordering::Relaxed);
            block = Some((j, gj));
        }
        // Relaxed (the whole payload): as the data above.
        rec.meta.store(meta, Ordering::Relaxed);
        rec.token.store(msg.token, Ordering::Relaxed);
        for (slot, a) in rec.args.iter().zip(msg.args) {
            slot.store(*a, Ordering::Relaxed);
        }
        let r = match lock {
            None => self.publish_lockfree(s, k, g, env, wait, stats),
            Some(l) => self.publish_locked(s, k, g, l, env, wait, stats),
        };
        match r {
            Ok(t) => {
                // Relaxed: only marks the record as no longer ours; a failure
                // means the receiver has taken it already. As an RMW it
                // continues the release sequence of the Release store of
                // SUBMITTED(g): a `reclaim_lost` of another thread of this
                // connection that Acquire-loads SENT(g) still sees this
                // message's ticket and bulk fields.
                let _ = rec.word.compare_exchange(
                    gen_word(SUBMITTED, g),
                    gen_word(SENT, g),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                if let Some(bell) = self.bell {
                    bell.ring();
                }
                Ok(t)
            }
            Err(PublishError::Failed(e)) => {
                // Never published, and the record is still ours (FILLING).
                if let Some((j, gj)) = block {
                    free_block(&s.conn.blocks[j], gj);
                }
                free_record(rec, g);
                Err(e)
            }
            Err(PublishError::Stolen(t)) => Err(Error::Corrupt(format!(
                "another process wrote the slot of ticket {t} while this send published it; \
                 the message may or may not have been delivered (not sent again)"
            ))),
        }
    }

    /// A free record of the connection, now `FILLING(g)` and ours: `(index, g)`.
    fn claim_record(
        &self,
        s: &Sender<'_>,
        wait: &mut dyn FnMut(&Blocked<'_>) -> Result<(), Error>,
        stats: &mut SendStats,
    ) -> Result<(usize, u64), Error> {
        let records = s.conn.records;
        let n = records.len();
        loop {
            // Relaxed: a hint only; any value is a valid place to start.
            let start = s.hint.load(Ordering::Relaxed) as usize;
            for i in 0..n {
                let k = (start + i) % n;
                // Relaxed: the CAS below validates it.
                let w = records[k].word.load(Ordering::Relaxed);
                if gen_state(w) == FREE
                    // Acquire: pairs with the receiver's Release CAS that freed
                    // it: its reads of the record's last message happen before
                    // our writes.
                    && records[k]
                        .word
                        .compare_exchange(
                            w,
                            gen_word(FILLING, gen_of(w)),
                            Ordering::Acquire,
                            Ordering::Relaxed,
                        )
                        .is_ok()
                {
                    // Relaxed: a hint.
                    s.hint.store(((k + 1) % n) as u32, Ordering::Relaxed);
                    return Ok((k, gen_of(w)));
                }
            }
            if self.reclaim_lost(s, stats) > 0 {
                continue;
            }
            // Every record is in flight: wait for the receiver to take some.
            // The look after announcing: Acquire, pairing with the
            // receiver's Release CAS that frees a record.
            let still = || {
                records
                    .iter()
                    .all(|r| gen_state(r.word.load(Ordering::Acquire)) != FREE)
            };
            wait(&self.blocked(&still, true))?;
        }
    }

    /// A free block of the connection, now `OWNED(g)` and ours: `(index, g)`.
    fn claim_block(
        &self,
        s: &Sender<'_>,
        wait: &mut dyn FnMut(&Blocked<'_>) -> Result<(), Error>,
        stats: &mut SendStats,
    ) -> Result<(usize, u64), Error> {
        let blocks = s.conn.blocks;
        loop {
            for b in blocks.iter().enumerate() {
                let (j, blk) = b;
                // Relaxed: the CAS below validates it.
                let w = blk.word.load(Ordering::Relaxed);
                if gen_state(w) == FREE
                    // Acquire: pairs with the receiver's Release CAS that freed
                    // the block after copying it out.
                    && blk
                        .word
                        .compare_exchange(
                            w,
                            gen_word(OWNED, gen_of(w)),
                            Ordering::Acquire,
                            Ordering::Relaxed,
                        )
                        .is_ok()
                {
                    return Ok((j, gen_of(w)));
                }
            }
            if self.reclaim_lost(s, stats) > 0 {
                continue;
            }
            // Acquire: as in `claim_record`.
            let still = || {
                blocks
                    .iter()
                    .all(|b| gen_state(b.word.load(Ordering::Acquire)) != FREE)
            };
            wait(&self.blocked(&still, true))?;
        }
    }

    /// Takes back every `SENT` record whose slot no longer announces it and
    /// has moved past its ticket: a peer destroyed that slot, so the receiver
    /// will never consume the record (it frees a record before its slot). The
    /// record's block goes with it. Returns how many; counted as `lost`.
    fn reclaim_lost(&self, s: &Sender<'_>, stats: &mut SendStats) -> usize {
        let mut n = 0;
        for (k, rec) in s.conn.records.iter().enumerate() {
            // Acquire: pairs with the Release store of SUBMITTED in the
            // claim (the CAS to SENT continues its release sequence), by
            // whichever thread of this connection (records are shared by all
            // of them) sent it: the ticket and bulk fields loaded below are
            // that message's. (Relaxed, a stale ticket of the record's
            // previous message could name a slot long moved on, and a live
            // record would be taken back.)
            let w = rec.word.load(Ordering::Acquire);
            if gen_state(w) != SENT {
                continue;
            }
            // Relaxed: ordered after the Acquire load above.
            let t = rec.ticket.load(Ordering::Relaxed);
            // Acquire: pairs with the receiver's Release CAS that freed the
            // slot (after it freed the record: then our CAS below fails).
            let sw = self.slot(t).ty.load(Ordering::Acquire);
            if sw == word::slot(READY, s.sid, k as u32, t) || word::seq_diff(word::seq(sw), t) <= 0
            {
                continue;
            }
            // Relaxed: as the ticket.
            let (meta, bulk, bulk_gen) = (
                rec.meta.load(Ordering::Relaxed),
                rec.bulk.load(Ordering::Relaxed),
                rec.bulk_gen.load(Ordering::Relaxed),
            );
            // Release: as `free_record`.
            if rec
                .word
                .compare_exchange(
                    w,
                    gen_word(FREE, next_gen(gen_of(w))),
                    Ordering::Release,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                if meta & (1 << 22) != 0
                    && let Some(blk) = s.conn.blocks.get((bulk & 0xffff_ffff) as usize)
                {
                    free_block(blk, bulk_gen);
                }
                stats.lost += 1;
                n += 1;
            }
        }
        n
    }

    /// Figure 3's lock-free claim, test-before-ticket: seeing slot `t`
    /// free for this lap, CAS the tail `t → t + 1`, then publish with one CAS
    /// on the slot. Taking a ticket only for a free slot keeps honest tails
    /// within a ring of the head (the receiver polices the rest).
    fn publish_lockfree(
        &self,
        s: &Sender<'_>,
        k: usize,
        g: u64,
        env: &dyn Env,
        wait: &mut dyn FnMut(&Blocked<'_>) -> Result<(), Error>,
        stats: &mut SendStats,
    ) -> Result<u64, PublishError> {
        let rec = &s.conn.records[k];
        let mut turns = 0u32;
        loop {
            turns = turns.wrapping_add(1);
            if turns.is_multiple_of(LOOPS_PER_CHECK) {
                if env.now_ns() >= s.deadline_ns {
                    return Err(PublishError::Failed(timeout()));
                }
                wait(&Blocked::busy()).map_err(PublishError::Failed)?;
            }
            // Relaxed: the tail only hands out tickets; the slot CAS is what
            // synchronizes with the receiver.
            let t = self.ctl.tail.0.load(Ordering::Relaxed);
            let p = self.slot(t);
            let free = word::free(t);
            // Acquire: pairs with the receiver's Release of `FREE(t)`.
            let w = p.ty.load(Ordering::Acquire);
            match self.window(t) {
                Window::Behind(h) => {
                    // A tail a peer moved back: every ticket before the head
                    // is spent. Relaxed: as the load.
                    let _ = self.ctl.tail.0.compare_exchange(
                        t,
                        h,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                    continue;
                }
                Window::Ahead => {
                    // Ticket `t` is a lap ahead of the receiver (the ring is
                    // full, or the slot word is a peer's): wait for the
                    // receiver to move. Acquire: as above.
                    let still =
                        || self.window(t) == Window::Ahead && p.ty.load(Ordering::Acquire) == w;
                    wait(&self.blocked(&still, true)).map_err(PublishError::Failed)?;
                    turns = 0;
                    continue;
                }
                Window::Within => {}
            }
            if w == free {
                // Relaxed: as the load.
                if self
                    .ctl
                    .tail
                    .0
                    .compare_exchange(t, t.wrapping_add(1), Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
                {
                    continue; // another sender took it
                }
                // Relaxed: only we write a FILLING record; published by the
                // Release store of SUBMITTED below.
                rec.ticket.store(t, Ordering::Relaxed);
                // Release: pairs with the receiver's Acquire load of the
                // record word in `take`: one that sees SUBMITTED(g) sees this
                // ticket and the payload written before it. (The slot's
                // Release CAS is not enough: the receiver may reach this
                // record through an older slot naming it, whose message a
                // sender took back, and would then validate a stale ticket.)
                rec.word.store(gen_word(SUBMITTED, g), Ordering::Release);
                crate::sched::stall::point(crate::sched::stall::MSGQ_TICKET);
                // Release: publishes the record (and block) to the receiver's
                // Acquire load of the slot.
                if p.ty
                    .compare_exchange(
                        free,
                        word::slot(READY, s.sid, k as u32, t),
                        Ordering::Release,
                        Ordering::Relaxed,
                    )
                    .is_ok()
                {
                    return Ok(t);
                }
                // Revoked while we were slow (or a peer wrote it): take the
                // record back and try a new ticket.
                stats.retries += 1;
                unsubmit(rec, g, t)?;
                continue;
            }
            if word::seq_diff(word::seq(w), t) < 0 {
                // The slot still holds the previous lap: the ring is full, and
                // only the receiver frees it. Acquire: as above.
                let still = || p.ty.load(Ordering::Acquire) == w;
                wait(&self.blocked(&still, true)).map_err(PublishError::Failed)?;
                turns = 0;
                continue;
            }
            // The slot is ahead of the tail: a peer moved the tail back (or
            // wrote the slot). Skip the ticket; the receiver revokes it.
            // Relaxed: as the load.
            let _ = self.ctl.tail.0.compare_exchange(
                t,
                t.wrapping_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// Figure 2's locked claim: under the lock, publish at the tail if its
    /// slot is free for this lap, else release the lock, wait and retry.
    #[allow(clippy::too_many_arguments)]
    fn publish_locked(
        &self,
        s: &Sender<'_>,
        k: usize,
        g: u64,
        lock: &dyn ClaimLock,
        env: &dyn Env,
        wait: &mut dyn FnMut(&Blocked<'_>) -> Result<(), Error>,
        stats: &mut SendStats,
    ) -> Result<u64, PublishError> {
        loop {
            if env.now_ns() >= s.deadline_ns {
                return Err(PublishError::Failed(timeout()));
            }
            let mut step = LockedStep::Busy;
            let broken = lock
                .with_lock(&mut || step = self.locked_step(s, k, g), s.deadline_ns)
                .map_err(PublishError::Failed)?;
            if broken {
                stats.lock_breaks += 1;
            }
            match step {
                LockedStep::Got(t) => return Ok(t),
                LockedStep::Stolen(t) => return Err(PublishError::Stolen(t)),
                LockedStep::Full(t, w) => {
                    let p = self.slot(t);
                    // Acquire: pairs with the receiver's Release of the slot.
                    let still = || p.ty.load(Ordering::Acquire) == w;
                    wait(&self.blocked(&still, true)).map_err(PublishError::Failed)?;
                }
                LockedStep::Ahead(t) => {
                    // Until the receiver's head hint comes within a ring.
                    let still = || self.window(t) == Window::Ahead;
                    wait(&self.blocked(&still, true)).map_err(PublishError::Failed)?;
                }
                LockedStep::Busy => {
                    stats.retries += 1;
                    wait(&Blocked::busy()).map_err(PublishError::Failed)?;
                }
            }
        }
    }

    /// One turn of the locked claim, inside the lock. Every write is a CAS
    /// from an exact word or a tail store that the next turn checks, so the
    /// claim stays correct with two senders inside (a broken lock).
    fn locked_step(&self, s: &Sender<'_>, k: usize, g: u64) -> LockedStep {
        let rec = &s.conn.records[k];
        for _ in 0..=self.slots.len() {
            // Relaxed: the lock orders the tail between senders (and a broken
            // lock only costs a retry: the slot CAS decides).
            let t = self.ctl.tail.0.load(Ordering::Relaxed);
            let p = self.slot(t);
            let free = word::free(t);
            // Acquire: as in the lock-free claim.
            let w = p.ty.load(Ordering::Acquire);
            match self.window(t) {
                Window::Behind(h) => {
                    // As in the lock-free claim. Relaxed: as above.
                    self.ctl.tail.0.store(h, Ordering::Relaxed);
                    continue;
                }
                // As in the lock-free claim: wait outside the lock.
                Window::Ahead => return LockedStep::Ahead(t),
                Window::Within => {}
            }
            if w == free {
                // Relaxed, then Release: as in the lock-free claim.
                rec.ticket.store(t, Ordering::Relaxed);
                rec.word.store(gen_word(SUBMITTED, g), Ordering::Release);
                crate::sched::stall::point(crate::sched::stall::MSGQ_TICKET);
                // Release: as in the lock-free claim.
                if p.ty
                    .compare_exchange(
                        free,
                        word::slot(READY, s.sid, k as u32, t),
                        Ordering::Release,
                        Ordering::Relaxed,
                    )
                    .is_ok()
                {
                    // Relaxed: the lock orders the tail between senders.
                    self.ctl.tail.0.store(t.wrapping_add(1), Ordering::Relaxed);
                    return LockedStep::Got(t);
                }
                if unsubmit(rec, g, t).is_err() {
                    return LockedStep::Stolen(t);
                }
                continue;
            }
            if word::seq_diff(word::seq(w), t) >= 0 {
                // Published at the tail by a holder that died (or broke the
                // lock) before advancing it, revoked, or a peer's write: move
                // the tail past it. Relaxed: as above.
                self.ctl.tail.0.store(t.wrapping_add(1), Ordering::Relaxed);
                continue;
            }
            return LockedStep::Full(t, w);
        }
        LockedStep::Busy
    }

    /// Frees slot `t` for its next lap, from the exact word `w`.
    fn free_slot(&self, p: &Slot, w: u64, t: u64) -> bool {
        // Release: our reads of the record happen before the next lap's
        // sender's writes (its Acquire loads of the slot and the record).
        p.ty.compare_exchange(
            w,
            word::free(t.wrapping_add(self.slots.len() as u64)),
            Ordering::Release,
            Ordering::Relaxed,
        )
        .is_ok()
    }

    fn advance(&self, head: &mut Head) {
        head.next = head.next.wrapping_add(1);
        head.stuck_since = None;
        // The head hint every quarter ring (every slot in rings of up to
        // four): senders see at least three quarters of the ring free
        // between two polls' ends, where the caller publishes it too.
        if head
            .next
            .is_multiple_of((self.slots.len() as u64 / 4).max(1))
        {
            self.publish_head(head);
        }
    }

    /// One step of the receiver's poll (§3): deliver the message at the head
    /// if it is published, copying its bulk data into `bulk`; revoke a ticket
    /// left unpublished for a lease; reject what no honest sender writes;
    /// police the tail. `conns` resolves a connection index to its area
    /// (`None`: no such connection open); a message naming an unknown one is
    /// rejected if `unknown_is_final`, else left in place as
    /// [`Event::Unknown`] (the caller may learn of new connections and look
    /// again). Never waits.
    pub fn poll_one<'c>(
        &self,
        head: &mut Head,
        env: &dyn Env,
        conns: &dyn Fn(u32) -> Option<ConnRef<'c>>,
        unknown_is_final: bool,
        bulk: &mut Vec<u8>,
    ) -> Event {
        let t = head.next;
        let p = self.slot(t);
        // Acquire: pairs with the sender's Release CAS to READY (its record)
        // and with every other writer of the word.
        let w = p.ty.load(Ordering::Acquire);
        if word::seq(w) == word::seq(t) && word::state(w) == READY {
            crate::sched::stall::point(crate::sched::stall::MSGQ_TAKE);
            let ev = match conns(word::sid(w)) {
                Some(c) => take(&c, w, t, bulk),
                None if !unknown_is_final => return Event::Unknown { sid: word::sid(w) },
                None => Err(format!(
                    "slot {t}: names connection {}, which is not open",
                    word::sid(w)
                )),
            };
            crate::sched::stall::point(crate::sched::stall::MSGQ_RELEASE);
            // A failure means a peer rewrote the slot under us: the message
            // (if any) came from the record, which the validation guards, and
            // the head moves on either way (what the peer left is rejected a
            // lap later).
            let _ = self.free_slot(p, w, t);
            self.advance(head);
            return match ev {
                Ok(m) => Event::Message(m),
                Err(why) => {
                    bulk.clear();
                    Event::Rejected(why)
                }
            };
        }
        if w == word::free(t) {
            // Relaxed: a hint; every repair is a CAS from the exact value seen.
            let tail = self.ctl.tail.0.load(Ordering::Relaxed);
            let ahead = word::seq_diff(word::seq(tail), word::seq(t));
            // One behind is honest with a locked claim: its holder has
            // published ticket `t - 1` (which we may have taken already) and
            // not yet stored the tail past it; senders move a tail behind the
            // head hint up themselves anyway.
            if ahead < -1 || ahead > self.slots.len() as i64 {
                // No honest sender leaves the tail there (see the module
                // doc): put it back to the head.
                // Relaxed: as the load; senders re-read it.
                if self
                    .ctl
                    .tail
                    .0
                    .compare_exchange(tail, t, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                {
                    head.tail_repairs += 1;
                }
                head.stuck_since = None;
                return Event::Empty;
            }
            if ahead <= 0 {
                head.stuck_since = None;
                return Event::Empty;
            }
            // A ticket handed out and not published: how long has it been?
            let now = env.now_ns();
            let age = match head.stuck_since {
                Some(s) if head.stuck_word == w => now.saturating_sub(s),
                _ => {
                    head.stuck_word = w;
                    head.stuck_since = Some(now);
                    0
                }
            };
            if age < env.lease_ns() {
                return Event::Pending;
            }
            // Revoke it: the slow sender's CAS fails and it takes a new one.
            if self.free_slot(p, w, t) {
                self.advance(head);
                return Event::Revoked { ticket: t };
            }
            return Event::Pending;
        }
        // Neither FREE(t) nor READY(…, t): no honest sender writes that at
        // the head (every honest write is a CAS from FREE(t)).
        if self.free_slot(p, w, t) {
            self.advance(head);
            return Event::Rejected(format!(
                "slot {t}: type word {w:#x} is not a valid state for this lap; skipped"
            ));
        }
        Event::Pending
    }
}

/// Where a ticket stands against the receiver's head hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Window {
    /// Before the hint: spent; the tail should be (at least) the hint.
    Behind(u64),
    /// Within a ring of the hint: its slot's word belongs to this lap.
    Within,
    /// A ring or more ahead of the hint.
    Ahead,
}

impl QueueRef<'_> {
    fn window(&self, t: u64) -> Window {
        let d = self.past_head(t);
        if d < 0 {
            // Relaxed: a hint, as in `past_head`.
            Window::Behind(self.ctl.head.0.load(Ordering::Relaxed))
        } else if d >= self.slots.len() as i64 {
            Window::Ahead
        } else {
            Window::Within
        }
    }
}

/// How a publish failed.
enum PublishError {
    /// Not published; the record is still ours.
    Failed(Error),
    /// A peer's write took the record while it was submitted for this ticket.
    Stolen(u64),
}

fn timeout() -> Error {
    Error::Timeout("a send still blocked at its deadline (is the receiver polling?)".into())
}

/// After a failed slot CAS: the record back from `SUBMITTED(g)` to ours
/// (`FILLING(g)`), or `Stolen` if something else took it meanwhile.
fn unsubmit(rec: &Record, g: u64, t: u64) -> Result<(), PublishError> {
    // Relaxed: only we write a record in FILLING; the failure case means the
    // receiver (answering a slot a peer forged) has it.
    rec.word
        .compare_exchange(
            gen_word(SUBMITTED, g),
            gen_word(FILLING, g),
            Ordering::Relaxed,
            Ordering::Relaxed,
        )
        .map(|_| ())
        .map_err(|_| PublishError::Stolen(t))
}

/// Frees our own `FILLING(g)` record (a send that gave up).
fn free_record(rec: &Record, g: u64) {
    // Release: our writes happen before the next claimant's (its Acquire CAS).
    let _ = rec.word.compare_exchange(
        gen_word(FILLING, g),
        gen_word(FREE, next_gen(g)),
        Ordering::Release,
        Ordering::Relaxed,
    );
}

/// Frees an `OWNED(g)` block.
fn free_block(blk: &BlockHdr, g: u64) {
    // Release: the holder's accesses happen before the next claimant's
    // (its Acquire CAS).
    let _ = blk.word.compare_exchange(
        gen_word(OWNED, g),
        gen_word(FREE, next_gen(g)),
        Ordering::Release,
        Ordering::Relaxed,
    );
}

/// Copies out the message that the READY slot word `w` (ticket `t`) names in
/// connection area `c`, validating it (the record holds this ticket, its
/// block is owned for it, every field is in range), and frees the record and
/// the block. The record is a seqlock: it is freed by a CAS from the exact
/// word validated, and a copy that the CAS does not confirm is discarded.
fn take(c: &ConnRef<'_>, w: u64, t: u64, bulk: &mut Vec<u8>) -> Result<Incoming, String> {
    let k = word::rec(w) as usize;
    let Some(rec) = c.records.get(k) else {
        return Err(format!(
            "slot {t}: names record {k}, beyond the connection's {}",
            c.records.len()
        ));
    };
    // Acquire: pairs with the sender's Release store of SUBMITTED (whose
    // release sequence its CAS to SENT continues): the ticket and payload
    // loaded below are at least as new as the generation this word shows.
    // The Acquire load of the slot is not enough: the slot may be older than
    // the record (its message taken back by its sender, the record
    // refilled), and a newer word read with an older ticket would pass the
    // checks and the confirming CAS — delivering a stale copy and consuming
    // the new message. The record's other loads (Relaxed) are ordered after
    // this one.
    let rw = rec.word.load(Ordering::Acquire);
    let g = gen_of(rw);
    if !matches!(gen_state(rw), SUBMITTED | SENT) {
        return Err(format!(
            "slot {t}: its record {k} is not submitted ({rw:#x})"
        ));
    }
    let ticket = rec.ticket.load(Ordering::Relaxed);
    if word::seq(ticket) != word::seq(t) {
        return Err(format!(
            "slot {t}: its record {k} was submitted for ticket {ticket}"
        ));
    }
    let meta = rec.meta.load(Ordering::Relaxed);
    let handler = (meta & 0xffff) as u16;
    let nargs = ((meta >> 16) & 0xf) as usize;
    if nargs > MAX_ARGS {
        return Err(format!(
            "slot {t}: {nargs} argument words (at most {MAX_ARGS})"
        ));
    }
    let Some(kind) = Kind::from_bits((meta >> 20) & 3) else {
        return Err(format!("slot {t}: invalid message kind"));
    };
    let token = rec.token.load(Ordering::Relaxed);
    let mut args = [0u64; MAX_ARGS];
    for (a, s) in args.iter_mut().zip(&rec.args).take(nargs) {
        *a = s.load(Ordering::Relaxed);
    }
    let has_bulk = meta & (1 << 22) != 0;
    bulk.clear();
    let mut block = None;
    if has_bulk {
        let b = rec.bulk.load(Ordering::Relaxed);
        let gj = rec.bulk_gen.load(Ordering::Relaxed);
        let (j, len) = ((b & 0xffff_ffff) as usize, (b >> 32) as usize);
        let Some(blk) = c.blocks.get(j) else {
            return Err(format!("slot {t}: bulk block {j} does not exist"));
        };
        if len > c.block_bytes() {
            return Err(format!(
                "slot {t}: bulk length {len} exceeds the block size {}",
                c.block_bytes()
            ));
        }
        // Relaxed: the sender's OWNED CAS and data stores precede its Release
        // CAS of the slot, which our Acquire load of the slot pairs with.
        let bw = blk.word.load(Ordering::Relaxed);
        if bw != gen_word(OWNED, gj) {
            return Err(format!(
                "slot {t}: bulk block {j} is in state {bw:#x}, not owned by its record"
            ));
        }
        copy_from_words(c.block_data(j), len, bulk);
        block = Some((blk, gj));
    }
    // Confirm the copy: free the record from the very word validated (a
    // sender that marked it SENT meanwhile changes only the state).
    let mut cur = rw;
    loop {
        // Release: our reads of the record happen before the next claimant's
        // writes (its Acquire CAS).
        match rec.word.compare_exchange(
            cur,
            gen_word(FREE, next_gen(g)),
            Ordering::Release,
            Ordering::Relaxed,
        ) {
            Ok(_) => break,
            Err(now) if gen_of(now) == g && matches!(gen_state(now), SUBMITTED | SENT) => cur = now,
            Err(now) => {
                bulk.clear();
                return Err(format!(
                    "slot {t}: its record {k} changed while it was copied out ({now:#x})"
                ));
            }
        }
    }
    if let Some((blk, gj)) = block {
        free_block(blk, gj);
    }
    Ok(Incoming {
        ticket: t,
        sid: word::sid(w),
        handler,
        kind,
        token,
        nargs,
        args,
        has_bulk,
    })
}

/// A connection's reply ring (server → client): one producer, the server's
/// polling thread, whose tail lives in its own memory; one consumer, the
/// client, whose head lives in its own. Slot `i` carries its bulk data in
/// block `i`. Nothing here ever waits: a reply that finds its slot taken
/// fails at once.
#[derive(Debug, Clone, Copy)]
pub struct ReplyRef<'a> {
    slots: &'a [ReplySlot],
    data: &'a [AtomicU64],
    bell: &'a Doorbell,
}

/// A reply copied out of a reply ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyIn {
    /// The token of the request it answers.
    pub token: u64,
    /// The reply's words.
    pub args: Vec<u64>,
    /// The reply's bulk data, if any.
    pub bulk: Option<Vec<u8>>,
}

impl<'a> ReplyRef<'a> {
    /// A reply ring of `slots.len()` slots (a power of two), block `i` of
    /// `data` (divided evenly) belonging to slot `i`, and the client's bell.
    pub fn new(
        slots: &'a [ReplySlot],
        data: &'a [AtomicU64],
        bell: &'a Doorbell,
    ) -> Result<Self, Error> {
        if !slots.len().is_power_of_two() || !data.len().is_multiple_of(slots.len()) {
            return Err(Error::InvalidArgument(format!(
                "reply ring: {} slots (a power of two) and {} data words (a multiple)",
                slots.len(),
                data.len()
            )));
        }
        Ok(Self { slots, data, bell })
    }

    /// Bytes of bulk data a reply may carry.
    pub fn block_bytes(&self) -> usize {
        self.data.len() / self.slots.len() * 8
    }

    /// Slots of the ring.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The client's bell, rung after every reply.
    pub fn bell(&self) -> &'a Doorbell {
        self.bell
    }

    fn at(&self, t: u64) -> (&'a ReplySlot, &'a [AtomicU64]) {
        let i = (t % self.slots.len() as u64) as usize;
        let w = self.data.len() / self.slots.len();
        (&self.slots[i], &self.data[i * w..(i + 1) * w])
    }

    /// The server's half: writes reply number `*tail` (its private counter)
    /// answering `token`, and rings the client's bell; fails at once if the
    /// slot is not free for it (the client does not take its replies, or
    /// wrote the ring).
    pub fn put(
        &self,
        tail: &mut u64,
        token: u64,
        args: &[u64],
        bulk: Option<&[u8]>,
    ) -> Result<(), Error> {
        if args.len() > MAX_ARGS {
            return Err(Error::InvalidArgument(format!(
                "{} reply words; a reply carries at most {MAX_ARGS}",
                args.len()
            )));
        }
        if let Some(d) = bulk
            && d.len() > self.block_bytes()
        {
            return Err(Error::InvalidArgument(format!(
                "{} bytes of reply bulk data; this connection's reply blocks hold at most {}",
                d.len(),
                self.block_bytes()
            )));
        }
        let t = *tail;
        let (s, data) = self.at(t);
        // Acquire: pairs with the client's Release store that freed the slot
        // (its reads of the last reply happen before our writes).
        let w = s.word.load(Ordering::Acquire);
        if w != word::reply(FREE, t) {
            return Err(Error::Timeout(format!(
                "the peer's reply ring is full (reply {t}: slot word {w:#x}): it does not take its \
                 replies; this reply is dropped"
            )));
        }
        let mut meta = args.len() as u64;
        if let Some(d) = bulk {
            // Relaxed: published by the Release store of READY below.
            copy_to_words(d, data);
            meta |= (1 << 4) | ((d.len() as u64) << 32);
        }
        // Relaxed (payload): as above.
        s.meta.store(meta, Ordering::Relaxed);
        s.token.store(token, Ordering::Relaxed);
        for (slot, a) in s.args.iter().zip(args) {
            slot.store(*a, Ordering::Relaxed);
        }
        // Release: publishes the reply to the client's Acquire load. A plain
        // store: we are the only writer of READY (a client that overwrites
        // its own ring only loses its own replies).
        s.word.store(word::reply(READY, t), Ordering::Release);
        *tail = t.wrapping_add(1);
        self.bell.ring();
        Ok(())
    }

    /// Whether the slot of reply number `head` holds anything but its free
    /// word (a reply, or garbage to report): the client's look after
    /// announcing on its bell.
    pub fn peek(&self, head: u64) -> bool {
        // Acquire: pairs with the server's Release store of READY.
        self.at(head).0.word.load(Ordering::Acquire) != word::reply(FREE, head)
    }

    /// The client's half: the reply at `*head` (its private counter), if one
    /// is there (`Some(Err)`: the slot holds something the server never
    /// writes; it stays, and the caller's request times out).
    pub fn take(&self, head: &mut u64) -> Option<Result<ReplyIn, String>> {
        let t = *head;
        let (s, data) = self.at(t);
        // Acquire: pairs with the server's Release store of READY.
        let w = s.word.load(Ordering::Acquire);
        if w == word::reply(FREE, t) {
            return None;
        }
        if w != word::reply(READY, t) {
            return Some(Err(format!(
                "reply {t}: slot word {w:#x} is neither free nor ready for this reply"
            )));
        }
        // Relaxed (payload): ordered after the Acquire load above.
        let meta = s.meta.load(Ordering::Relaxed);
        let nargs = (meta & 0xf) as usize;
        let len = (meta >> 32) as usize;
        let has_bulk = meta & (1 << 4) != 0;
        let token = s.token.load(Ordering::Relaxed);
        let r = if nargs > MAX_ARGS {
            Err(format!("reply {t}: {nargs} words (at most {MAX_ARGS})"))
        } else if has_bulk && len > self.block_bytes() {
            Err(format!(
                "reply {t}: bulk length {len} exceeds the block size {}",
                self.block_bytes()
            ))
        } else {
            let args = s.args[..nargs]
                .iter()
                .map(|a| a.load(Ordering::Relaxed))
                .collect();
            let bulk = has_bulk.then(|| {
                let mut b = Vec::new();
                copy_from_words(data, len, &mut b);
                b
            });
            Ok(ReplyIn { token, args, bulk })
        };
        // Release: our reads happen before the server's next writes to the
        // slot (its Acquire load of FREE).
        s.word.store(
            word::reply(FREE, t.wrapping_add(self.slots.len() as u64)),
            Ordering::Release,
        );
        *head = t.wrapping_add(1);
        Some(r)
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

/// A request ring on the heap, for threads of one process, unit tests and
/// loom models.
#[derive(Debug)]
pub struct HeapQueue {
    ctl: QueueCtl,
    bell: Doorbell,
    space: SpaceBell,
    slots: Vec<Slot>,
}

impl HeapQueue {
    /// `slots` slots (a power of two).
    pub fn new(slots: usize) -> Result<Self, Error> {
        if !slots.is_power_of_two() {
            return Err(Error::InvalidArgument(format!(
                "heap queue: {slots} slots; must be a power of two"
            )));
        }
        Ok(Self {
            ctl: QueueCtl::new(),
            bell: Doorbell::new(),
            space: SpaceBell::new(),
            slots: (0..slots as u64).map(Slot::new).collect(),
        })
    }

    /// The tail word (for models and tests that play a sender dying
    /// halfway through a claim, or a peer writing it).
    pub fn tail_word(&self) -> &AtomicU64 {
        self.ctl.tail_word()
    }

    /// The type word of the slot ticket `t` maps to (as above).
    pub fn slot_word(&self, t: u64) -> &AtomicU64 {
        &self.slots[(t % self.slots.len() as u64) as usize].ty
    }

    /// The receiver's doorbell, which every send through [`queue`](Self::queue) rings.
    pub fn doorbell(&self) -> &Doorbell {
        &self.bell
    }

    /// The senders' space bell.
    pub fn space_bell(&self) -> &SpaceBell {
        &self.space
    }

    /// The queue (with its doorbell and space bell).
    pub fn queue(&self) -> QueueRef<'_> {
        QueueRef {
            ctl: &self.ctl,
            bell: Some(&self.bell),
            space: Some(&self.space),
            slots: &self.slots,
        }
    }
}

/// A connection's private area on the heap (records, bulk blocks, reply
/// ring), for unit tests and loom models.
#[derive(Debug)]
pub struct HeapConn {
    records: Vec<Record>,
    blocks: Vec<BlockHdr>,
    data: Vec<AtomicU64>,
    replies: Vec<ReplySlot>,
    reply_data: Vec<AtomicU64>,
    reply_bell: Doorbell,
    hint: AtomicU32,
}

impl HeapConn {
    /// `records` records, `blocks` blocks and `replies` reply slots (a power
    /// of two), every block `block_bytes` bytes (a non-zero multiple of 8).
    pub fn new(
        records: usize,
        blocks: usize,
        replies: usize,
        block_bytes: usize,
    ) -> Result<Self, Error> {
        if records == 0
            || records > word::MAX_RECORDS
            || blocks == 0
            || !replies.is_power_of_two()
            || block_bytes == 0
            || !block_bytes.is_multiple_of(8)
        {
            return Err(Error::InvalidArgument(format!(
                "heap connection: {records} records, {blocks} blocks, {replies} reply slots of \
                 {block_bytes} bytes; records 1..=1024, blocks >= 1, replies a power of two, \
                 blocks a non-zero multiple of 8 bytes"
            )));
        }
        let words = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
        Ok(Self {
            records: (0..records).map(|_| Record::new()).collect(),
            blocks: (0..blocks).map(|_| BlockHdr::new()).collect(),
            data: words(blocks * block_bytes / 8),
            replies: (0..replies as u64).map(ReplySlot::new).collect(),
            reply_data: words(replies * block_bytes / 8),
            reply_bell: Doorbell::new(),
            hint: AtomicU32::new(0),
        })
    }

    /// The records and blocks.
    pub fn area(&self) -> ConnRef<'_> {
        ConnRef {
            records: &self.records,
            blocks: &self.blocks,
            data: &self.data,
        }
    }

    /// A sender through this connection, known to the receiver as `sid`,
    /// giving up at `deadline_ns`.
    pub fn sender(&self, sid: u32, deadline_ns: u64) -> Sender<'_> {
        Sender {
            sid,
            conn: self.area(),
            hint: &self.hint,
            deadline_ns,
        }
    }

    /// The reply ring.
    pub fn replies(&self) -> ReplyRef<'_> {
        ReplyRef {
            slots: &self.replies,
            data: &self.reply_data,
            bell: &self.reply_bell,
        }
    }

    /// Record `k` (for models and tests).
    pub fn record(&self, k: usize) -> &Record {
        &self.records[k]
    }

    /// Block `j` (for models and tests).
    pub fn block(&self, j: usize) -> &BlockHdr {
        &self.blocks[j]
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! Single-process protocol tests on heap queues (Miri-friendly: no
    //! shared segment, no system calls but the bells'; the clock is injected).
    use super::*;
    use std::cell::Cell;

    struct FakeEnv {
        now: Cell<u64>,
    }

    impl FakeEnv {
        fn new() -> Self {
            Self { now: Cell::new(0) }
        }
        fn advance(&self, ns: u64) {
            self.now.set(self.now.get() + ns);
        }
    }

    impl Env for FakeEnv {
        fn now_ns(&self) -> u64 {
            self.now.get()
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
            args,
            bulk,
        }
    }

    fn no_wait(_: &Blocked<'_>) -> Result<(), Error> {
        Err(Error::Timeout("full".into()))
    }

    struct TasLock(crate::lock::Tas);
    impl ClaimLock for TasLock {
        fn with_lock(&self, f: &mut dyn FnMut(), _deadline_ns: u64) -> Result<bool, Error> {
            use lock_api::RawMutex;
            let g = self.0.lock();
            f();
            // SAFETY: acquired above on this thread.
            unsafe { self.0.unlock(g) };
            Ok(false)
        }
    }

    /// Connection 3 is `c`; every other index is unknown.
    fn poll(
        q: &QueueRef<'_>,
        head: &mut Head,
        env: &FakeEnv,
        c: &HeapConn,
        buf: &mut Vec<u8>,
    ) -> Event {
        q.poll_one(head, env, &|sid| (sid == 3).then(|| c.area()), true, buf)
    }

    fn send(
        q: &QueueRef<'_>,
        c: &HeapConn,
        lock: Option<&dyn ClaimLock>,
        m: &Outgoing<'_>,
        env: &FakeEnv,
    ) -> Result<u64, Error> {
        q.send(
            &c.sender(3, u64::MAX),
            lock,
            m,
            env,
            &mut no_wait,
            &mut SendStats::default(),
        )
    }

    fn round_trip(lock: Option<&dyn ClaimLock>) {
        let hq = HeapQueue::new(4).unwrap();
        let q = hq.queue();
        let c = HeapConn::new(2, 2, 2, 64).unwrap();
        let env = FakeEnv::new();
        let mut head = Head::default();
        let mut buf = Vec::new();
        assert_eq!(poll(&q, &mut head, &env, &c, &mut buf), Event::Empty);
        // Three laps of the ring, with bulk data every other message.
        for i in 0..12u64 {
            let data: Vec<u8> = (0..(i as u8 * 5 % 64)).collect();
            let bulk = (i % 2 == 0).then_some(&data[..]);
            send(&q, &c, lock, &msg(&[i, i * 3], bulk), &env).unwrap();
            match poll(&q, &mut head, &env, &c, &mut buf) {
                Event::Message(m) => {
                    assert_eq!((m.handler, m.nargs, m.sid), (7, 2, 3));
                    assert_eq!(&m.args[..2], &[i, i * 3]);
                    assert_eq!(m.has_bulk, bulk.is_some());
                    if bulk.is_some() {
                        assert_eq!(buf, data);
                    }
                }
                e => panic!("expected a message, got {e:?}"),
            }
        }
        assert_eq!(poll(&q, &mut head, &env, &c, &mut buf), Event::Empty);
        // Every record and block is free again.
        for k in 0..2 {
            assert_eq!(gen_state(c.record(k).word.load(Ordering::Relaxed)), FREE);
            assert_eq!(gen_state(c.block(k).word.load(Ordering::Relaxed)), FREE);
        }
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
        let hq = HeapQueue::new(2).unwrap();
        let q = hq.queue();
        let c = HeapConn::new(4, 1, 1, 64).unwrap();
        let env = FakeEnv::new();
        for i in 0..2 {
            send(&q, &c, None, &msg(&[i], None), &env).unwrap();
        }
        // The third send finds the ring full: it may sleep, but a look after
        // the announcement that finds the slot freed ends the sleep at once.
        let mut head = Head::default();
        let mut buf = Vec::new();
        let mut got = Vec::new();
        let mut slept = 0;
        q.send(
            &c.sender(3, u64::MAX),
            None,
            &msg(&[2], None),
            &env,
            &mut |b| {
                assert!(b.can_sleep(), "a full ring waits for the receiver");
                if let Event::Message(m) = poll(&q, &mut head, &env, &c, &mut buf) {
                    got.push(m.args[0]);
                }
                // Freed above (and no ring): no sleep, whatever the limit.
                assert!(b.sleep(None), "the slot was freed before the sleep");
                slept += 1;
                Ok(())
            },
            &mut SendStats::default(),
        )
        .unwrap();
        assert_eq!(slept, 1);
        while let Event::Message(m) = poll(&q, &mut head, &env, &c, &mut buf) {
            got.push(m.args[0]);
        }
        assert_eq!(got, [0, 1, 2]);
        assert!(q.wake_senders(), "the sender's announcement is still up");
        assert!(!q.wake_senders());
    }

    #[test]
    fn records_in_flight_bound_a_connection_and_come_back() {
        let hq = HeapQueue::new(8).unwrap();
        let q = hq.queue();
        let c = HeapConn::new(2, 1, 1, 64).unwrap();
        let env = FakeEnv::new();
        for i in 0..2 {
            send(&q, &c, None, &msg(&[i], None), &env).unwrap();
        }
        // Two records, both in flight: the third send waits for the receiver
        // although the ring has room; the wait hook drains one message.
        let mut head = Head::default();
        let mut buf = Vec::new();
        let mut got = Vec::new();
        let mut waits = 0;
        q.send(
            &c.sender(3, u64::MAX),
            None,
            &msg(&[2], None),
            &env,
            &mut |b| {
                assert!(b.can_sleep(), "records are freed by the receiver");
                waits += 1;
                if let Event::Message(m) = poll(&q, &mut head, &env, &c, &mut buf) {
                    got.push(m.args[0]);
                }
                Ok(())
            },
            &mut SendStats::default(),
        )
        .unwrap();
        assert_eq!(waits, 1);
        while let Event::Message(m) = poll(&q, &mut head, &env, &c, &mut buf) {
            got.push(m.args[0]);
        }
        assert_eq!(got, [0, 1, 2]);
    }

    #[test]
    fn too_many_args_and_bulk_are_errors() {
        let hq = HeapQueue::new(2).unwrap();
        let q = hq.queue();
        let c = HeapConn::new(1, 1, 1, 64).unwrap();
        let env = FakeEnv::new();
        let nine = [0u64; 9];
        assert!(matches!(
            send(&q, &c, None, &msg(&nine, None), &env),
            Err(Error::InvalidArgument(_))
        ));
        let big = [0u8; 65];
        assert!(matches!(
            send(&q, &c, None, &msg(&[], Some(&big)), &env),
            Err(Error::InvalidArgument(_))
        ));
        assert!(HeapQueue::new(3).is_err());
        assert!(HeapConn::new(0, 1, 1, 64).is_err());
        assert!(HeapConn::new(1, 1, 3, 64).is_err());
    }

    /// A send that gives up (here: the ring is full and its wait hook says
    /// time is up) frees the record and the bulk block it had claimed, so
    /// later bulk sends find blocks (issue 26, defect 14).
    #[test]
    fn a_failed_bulk_send_frees_its_block_and_record() {
        let hq = HeapQueue::new(2).unwrap();
        let q = hq.queue();
        let c = HeapConn::new(4, 1, 1, 64).unwrap();
        let env = FakeEnv::new();
        for i in 0..2 {
            send(&q, &c, None, &msg(&[i], None), &env).unwrap();
        }
        let data = [5u8; 40];
        assert!(matches!(
            send(&q, &c, None, &msg(&[9], Some(&data)), &env),
            Err(Error::Timeout(_))
        ));
        assert_eq!(
            c.block(0).word.load(Ordering::Relaxed),
            gen_word(FREE, 1),
            "the block is free again (a generation later)"
        );
        let owned = (0..4)
            .filter(|&k| gen_state(c.record(k).word.load(Ordering::Relaxed)) != FREE)
            .count();
        assert_eq!(owned, 2, "only the two published messages hold records");
        // The receiver drains; a bulk send goes through on the one block.
        let mut head = Head::default();
        let mut buf = Vec::new();
        while let Event::Message(_) = poll(&q, &mut head, &env, &c, &mut buf) {}
        send(&q, &c, None, &msg(&[9], Some(&data)), &env).unwrap();
        assert!(matches!(
            poll(&q, &mut head, &env, &c, &mut buf),
            Event::Message(_)
        ));
        assert_eq!(buf, data);
    }

    #[test]
    fn unpublished_ticket_is_revoked_after_the_lease() {
        let hq = HeapQueue::new(4).unwrap();
        let q = hq.queue();
        let c = HeapConn::new(2, 1, 1, 64).unwrap();
        let env = FakeEnv::new();
        let mut head = Head::default();
        let mut buf = Vec::new();
        // A sender took ticket 0 and vanished before its slot CAS.
        hq.tail_word().fetch_add(1, Ordering::Relaxed);
        assert_eq!(poll(&q, &mut head, &env, &c, &mut buf), Event::Pending);
        env.advance(999);
        assert_eq!(poll(&q, &mut head, &env, &c, &mut buf), Event::Pending);
        env.advance(1);
        assert_eq!(
            poll(&q, &mut head, &env, &c, &mut buf),
            Event::Revoked { ticket: 0 }
        );
        assert_eq!(hq.slot_word(0).load(Ordering::Relaxed), word::free(4));
        send(&q, &c, None, &msg(&[1], None), &env).unwrap();
        assert!(
            matches!(poll(&q, &mut head, &env, &c, &mut buf), Event::Message(m) if m.args[0] == 1)
        );
    }

    /// A tail a peer moved far ahead or behind is put back to the head by
    /// the receiver, and senders publish again.
    #[test]
    fn the_receiver_polices_the_tail() {
        let hq = HeapQueue::new(4).unwrap();
        let q = hq.queue();
        let c = HeapConn::new(2, 1, 1, 64).unwrap();
        let env = FakeEnv::new();
        let mut head = Head::default();
        let mut buf = Vec::new();
        let bad_tails = [
            u64::MAX - (1 << 38), // far behind (in sequence space)
            1 << 39,              // half the sequence space away: behind
            word::SEQ_MASK,       // one behind
            1000,                 // far ahead
            5,                    // a ring and one ahead
        ];
        for (round, bad) in bad_tails.into_iter().enumerate() {
            let h = head.next();
            hq.tail_word().store(h.wrapping_add(bad), Ordering::Relaxed);
            // A sender that meets a tail behind the head hint moves it up to
            // the hint itself and publishes; one a ring or more ahead gives
            // up at once here (no_wait), the receiver puts the tail back to
            // its head, and the send goes through.
            if send(&q, &c, None, &msg(&[round as u64], None), &env).is_err() {
                let repairs = head.tail_repairs();
                assert_eq!(poll(&q, &mut head, &env, &c, &mut buf), Event::Empty);
                assert_eq!(head.tail_repairs(), repairs + 1, "round {round}");
                send(&q, &c, None, &msg(&[round as u64], None), &env).unwrap();
            }
            let mut got = None;
            for _ in 0..20 {
                env.advance(600);
                match poll(&q, &mut head, &env, &c, &mut buf) {
                    Event::Message(m) => {
                        got = Some(m.args[0]);
                        break;
                    }
                    Event::Rejected(why) => panic!("{why}"),
                    _ => {}
                }
            }
            assert_eq!(got, Some(round as u64), "round {round}");
        }
        assert!(head.tail_repairs() >= 2, "the tails ahead were put back");
    }

    /// A slot word a peer left a lap ahead of the receiver (`FREE(t)` for a
    /// ticket a ring ahead of the head) never takes an honest message: the
    /// sender publishes only within a ring of the receiver's head hint.
    #[test]
    fn a_word_a_lap_ahead_of_the_head_takes_no_message() {
        let hq = HeapQueue::new(4).unwrap();
        let q = hq.queue();
        let c = HeapConn::new(4, 1, 1, 64).unwrap();
        let env = FakeEnv::new();
        let mut head = Head::default();
        let mut buf = Vec::new();
        // Four messages fill tickets 0..3; the receiver takes ticket 0.
        for i in 0..4 {
            send(&q, &c, None, &msg(&[i], None), &env).unwrap();
        }
        assert!(
            matches!(poll(&q, &mut head, &env, &c, &mut buf), Event::Message(m) if m.args[0] == 0)
        );
        assert_eq!(hq.ctl.head_word().load(Ordering::Relaxed), 1);
        // A peer writes FREE(5) (the next lap's word) at slot 1, whose
        // ticket 1 is still in the ring.
        hq.slot_word(1).store(word::free(5), Ordering::Relaxed);
        // Ticket 4 (slot 0) is free and within the ring; ticket 5 is a lap
        // ahead of head 1: the sender waits (gives up, here) rather than
        // believe slot 1.
        send(&q, &c, None, &msg(&[4], None), &env).unwrap();
        assert!(send(&q, &c, None, &msg(&[5], None), &env).is_err());
        assert_ne!(
            word::state(hq.slot_word(1).load(Ordering::Relaxed)),
            READY,
            "a message was published into the slot of a lap the ring is not at"
        );
    }

    /// Slot words a peer forges are rejected, never delivered: a connection
    /// nobody opened, a record not submitted, a record submitted for
    /// another ticket, a lap that is not the head's.
    #[test]
    fn forged_slot_words_are_rejected() {
        let hq = HeapQueue::new(4).unwrap();
        let q = hq.queue();
        let c = HeapConn::new(2, 1, 1, 64).unwrap();
        let env = FakeEnv::new();
        let mut head = Head::default();
        let mut buf = Vec::new();
        let forged = [
            word::slot(READY, 9, 0, 0), // unknown connection
            word::slot(READY, 3, 1, 1), // record 1 is free
            word::slot(READY, 3, 7, 2), // no record 7
            word::slot(READY, 3, 0, 7), // another lap
            word::slot(1, 3, 0, 4),     // a state nobody writes
        ];
        for (i, f) in forged.into_iter().enumerate() {
            let t = head.next();
            hq.slot_word(t).store(f, Ordering::Relaxed);
            hq.tail_word().store(t + 1, Ordering::Relaxed);
            assert!(
                matches!(poll(&q, &mut head, &env, &c, &mut buf), Event::Rejected(_)),
                "forgery {i}"
            );
        }
        // A record submitted for ticket 9, announced at the head (ticket 5);
        // a valid one-way message otherwise: only its ticket is wrong.
        c.record(0).word.store(gen_word(SENT, 0), Ordering::Relaxed);
        c.record(0).ticket.store(9, Ordering::Relaxed);
        c.record(0)
            .meta
            .store(7 | ((Kind::OneWay as u64) << 20), Ordering::Relaxed);
        let t = head.next();
        hq.slot_word(t)
            .store(word::slot(READY, 3, 0, t), Ordering::Relaxed);
        hq.tail_word().store(t + 1, Ordering::Relaxed);
        assert!(matches!(
            poll(&q, &mut head, &env, &c, &mut buf),
            Event::Rejected(_)
        ));
        assert_eq!(
            c.record(0).word.load(Ordering::Relaxed),
            gen_word(SENT, 0),
            "a rejected slot leaves the record alone"
        );
    }

    /// A peer destroys the slot of a published message: the receiver
    /// rejects it; the sender, out of records, takes the record back
    /// (counted as lost) and sends again.
    #[test]
    fn a_record_whose_slot_a_peer_destroyed_is_taken_back() {
        let hq = HeapQueue::new(4).unwrap();
        let q = hq.queue();
        let c = HeapConn::new(1, 1, 1, 64).unwrap();
        let env = FakeEnv::new();
        let mut head = Head::default();
        let mut buf = Vec::new();
        let data = [1u8; 8];
        send(&q, &c, None, &msg(&[1], Some(&data)), &env).unwrap();
        hq.slot_word(0).store(0xdead, Ordering::Relaxed);
        assert!(matches!(
            poll(&q, &mut head, &env, &c, &mut buf),
            Event::Rejected(_)
        ));
        let mut st = SendStats::default();
        q.send(
            &c.sender(3, u64::MAX),
            None,
            &msg(&[2], Some(&data)),
            &env,
            &mut no_wait,
            &mut st,
        )
        .unwrap();
        assert_eq!(st.lost, 1);
        assert!(
            matches!(poll(&q, &mut head, &env, &c, &mut buf), Event::Message(m) if m.args[0] == 2)
        );
    }

    #[test]
    fn an_unknown_connection_is_left_for_the_caller_unless_final() {
        let hq = HeapQueue::new(4).unwrap();
        let q = hq.queue();
        let c = HeapConn::new(1, 1, 1, 64).unwrap();
        let env = FakeEnv::new();
        let mut head = Head::default();
        let mut buf = Vec::new();
        send(&q, &c, None, &msg(&[1], None), &env).unwrap();
        assert_eq!(
            q.poll_one(&mut head, &env, &|_| None, false, &mut buf),
            Event::Unknown { sid: 3 }
        );
        assert_eq!(head.next(), 0, "nothing consumed");
        assert!(matches!(
            poll(&q, &mut head, &env, &c, &mut buf),
            Event::Message(_)
        ));
    }

    #[test]
    #[cfg_attr(miri, ignore = "futex system calls")]
    fn replies_round_trip_and_a_full_ring_fails_at_once() {
        let c = HeapConn::new(1, 1, 2, 64).unwrap();
        let r = c.replies();
        let (mut tail, mut head) = (0u64, 0u64);
        assert_eq!(r.take(&mut head), None);
        r.put(&mut tail, 11, &[1, 2], None).unwrap();
        r.put(&mut tail, 12, &[], Some(&[7u8; 20])).unwrap();
        let e = r.put(&mut tail, 13, &[3], None).unwrap_err();
        assert!(e.to_string().contains("reply ring is full"), "{e}");
        assert_eq!(tail, 2, "a failed reply takes no number");
        let a = r.take(&mut head).unwrap().unwrap();
        assert_eq!((a.token, a.args, a.bulk), (11, vec![1, 2], None));
        let b = r.take(&mut head).unwrap().unwrap();
        assert_eq!((b.token, b.bulk), (12, Some(vec![7u8; 20])));
        assert_eq!(r.take(&mut head), None);
        r.put(&mut tail, 13, &[3], None).unwrap();
        assert_eq!(r.take(&mut head).unwrap().unwrap().token, 13);
        // A slot the server never writes so: reported, left in place.
        c.replies[(head % 2) as usize]
            .word
            .store(0xbad, Ordering::Relaxed);
        assert!(matches!(r.take(&mut head), Some(Err(_))));
        assert!(matches!(r.take(&mut head), Some(Err(_))));
        assert!(r.put(&mut tail, 14, &[9; 9], None).is_err());
    }

    #[test]
    fn garbage_is_rejected_never_delivered_or_panicking() {
        let hq = HeapQueue::new(4).unwrap();
        let q = hq.queue();
        let c = HeapConn::new(2, 2, 1, 64).unwrap();
        let env = FakeEnv::new();
        let mut head = Head::default();
        let mut buf = Vec::new();
        let mut rng = crate::util::rng::SplitMix64::stream(7, 0);
        let mut rejected = 0;
        let iters = if cfg!(miri) { 30 } else { 3000 };
        for _ in 0..iters {
            // A hostile sender scribbles on the head slot, the tail and its
            // own connection's record and block (the receiver validates all).
            let h = head.next();
            let k = (rng.next_u64() % 3) as u32;
            let ty = match rng.next_u64() % 4 {
                0 => rng.next_u64(),
                1 => word::slot(READY, (rng.next_u64() % 5) as u32, k, h),
                2 => word::slot(rng.next_u64() % 4, 3, k, h.wrapping_add(rng.next_u64() % 8)),
                _ => word::slot(READY, 3, k, h),
            };
            hq.slot_word(h).store(ty, Ordering::Relaxed);
            let r = &c.records[(rng.next_u64() % 2) as usize];
            for w in [&r.word, &r.ticket, &r.meta, &r.bulk, &r.bulk_gen] {
                if rng.next_u64().is_multiple_of(2) {
                    w.store(rng.next_u64() % 8, Ordering::Relaxed);
                }
            }
            c.blocks[(rng.next_u64() % 2) as usize].word.store(
                gen_word(rng.next_u64() % 4, rng.next_u64() % 4),
                Ordering::Relaxed,
            );
            hq.tail_word().store(rng.next_u64(), Ordering::Relaxed);
            for _ in 0..4 {
                env.advance(600);
                match poll(&q, &mut head, &env, &c, &mut buf) {
                    Event::Message(m) => {
                        assert!(m.nargs <= MAX_ARGS);
                        assert!(buf.len() <= c.area().block_bytes());
                    }
                    Event::Rejected(_) => rejected += 1,
                    _ => {}
                }
            }
        }
        assert!(rejected > 0, "no garbage was ever rejected");
    }
}
