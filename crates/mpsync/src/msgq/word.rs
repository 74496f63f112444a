//! The protocol words of the queues, each packed in one `u64` so that a single
//! CAS changes every field at once.
//!
//! **Slot word** (a packet of the shared request ring, paper 004 §3): a state,
//! the connection it came through (`sid`, the index the receiver gave that
//! connection when it accepted it), the sender's record in that connection's
//! private area (`rec`), and a 40-bit sequence number — the ticket of the lap the
//! slot belongs to.
//!
//! | state   | sid, rec | seq | who sets it                                   | meaning                                  |
//! |---------|----------|-----|-----------------------------------------------|------------------------------------------|
//! | `FREE`  | 0, 0     | `t` | creator (t = index), receiver                 | empty; only ticket `t` may publish in it |
//! | `READY` | sid, rec | `t` | the sender holding ticket `t`, one CAS (Release) | record `rec` of connection `sid` holds the message |
//!
//! Paper 004 claims a packet (`FREE → CLAIMED`), fills it, then marks it ready.
//! Here the payload is written *before* the claim, into the sender's record in
//! the connection area that only the sender and the receiver map, so claiming
//! is publishing: there is no `CLAIMED` state, hence no claimant whose death or
//! lie the receiver would have to judge. The receiver releases a delivered slot
//! `t` as `FREE(t + Q)` (the next lap) and *revokes* a ticket handed out and
//! never published within a lease (`FREE(t) → FREE(t + Q)`): the slow sender's
//! CAS then fails and it takes a new ticket. Tagging the word with the lap keeps
//! per-sender FIFO order and makes every transition a CAS from an exact word: a
//! stale CAS can never succeed on a slot that moved on.
//!
//! **Record word** (connection area, one per message in flight): `FREE(g)` →
//! `FILLING(g)` (a sender thread owns it) → `SUBMITTED(g)` (ticket set, slot CAS
//! about to happen) → `SENT(g)` (published) → `FREE(g + 1)` (the receiver, after
//! copying it out). See [`super::ring`].
//!
//! **Block word** (connection area, one per bulk block): `FREE(g)` → `OWNED(g)`
//! (a sender thread filled it for one of its records) → `FREE(g + 1)`.
//!
//! **Reply word** (connection area, the reply ring): `FREE(t)` → `READY(t)`
//! (the server, its only writer) → `FREE(t + QR)` (the client, its only reader).

/// Bits of the sequence number.
pub const SEQ_BITS: u32 = 40;
/// Mask of the sequence number.
pub const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;
/// Bits of the record index in a slot word.
pub const REC_BITS: u32 = 10;
/// Bits of the connection index in a slot word.
pub const SID_BITS: u32 = 12;
/// Most records per connection (`2^REC_BITS`).
pub const MAX_RECORDS: usize = 1 << REC_BITS;
/// Most connections per endpoint (`2^SID_BITS`).
pub const MAX_SIDS: usize = 1 << SID_BITS;
const REC_SHIFT: u32 = SEQ_BITS;
const SID_SHIFT: u32 = SEQ_BITS + REC_BITS;
const STATE_SHIFT: u32 = SEQ_BITS + REC_BITS + SID_BITS;

/// Free (slot, record, block, reply slot).
pub const FREE: u64 = 0;
/// Slot or reply slot: holds a message.
pub const READY: u64 = 2;

/// Record: a sender thread owns it and writes its payload.
pub const FILLING: u64 = 1;
/// Record: its ticket is set and its slot is being published.
pub const SUBMITTED: u64 = 2;
/// Record: its slot is published; the receiver owns it now.
pub const SENT: u64 = 3;
/// Block: filled for a record.
pub const OWNED: u64 = 1;

/// Packs a slot word.
#[inline]
pub const fn slot(state: u64, sid: u32, rec: u32, seq: u64) -> u64 {
    (state << STATE_SHIFT)
        | (((sid as u64) & ((1 << SID_BITS) - 1)) << SID_SHIFT)
        | (((rec as u64) & ((1 << REC_BITS) - 1)) << REC_SHIFT)
        | (seq & SEQ_MASK)
}

/// A free slot for ticket `seq`.
#[inline]
pub const fn free(seq: u64) -> u64 {
    slot(FREE, 0, 0, seq)
}

/// The state of a slot word.
#[inline]
pub const fn state(w: u64) -> u64 {
    w >> STATE_SHIFT
}

/// The connection index of a slot word.
#[inline]
pub const fn sid(w: u64) -> u32 {
    ((w >> SID_SHIFT) & ((1 << SID_BITS) - 1)) as u32
}

/// The record index of a slot word.
#[inline]
pub const fn rec(w: u64) -> u32 {
    ((w >> REC_SHIFT) & ((1 << REC_BITS) - 1)) as u32
}

/// The sequence number of a slot or reply word.
#[inline]
pub const fn seq(w: u64) -> u64 {
    w & SEQ_MASK
}

/// `a - b` in sequence space (wrapping at 2⁴⁰), as a signed distance.
#[inline]
pub const fn seq_diff(a: u64, b: u64) -> i64 {
    let d = a.wrapping_sub(b) & SEQ_MASK;
    if d >= 1 << (SEQ_BITS - 1) {
        d as i64 - (1i64 << SEQ_BITS)
    } else {
        d as i64
    }
}

/// Packs a record or block word: a state (2 bits) and a generation.
#[inline]
pub const fn gen_word(state: u64, generation: u64) -> u64 {
    (state << 62) | (generation & ((1 << 62) - 1))
}

/// The state of a record or block word.
#[inline]
pub const fn gen_state(w: u64) -> u64 {
    w >> 62
}

/// The generation of a record or block word.
#[inline]
pub const fn gen_of(w: u64) -> u64 {
    w & ((1 << 62) - 1)
}

/// The next generation (wrapping within 62 bits).
#[inline]
pub const fn next_gen(g: u64) -> u64 {
    g.wrapping_add(1) & ((1 << 62) - 1)
}

/// A reply slot word: `READY` or `FREE` and a sequence number.
#[inline]
pub const fn reply(state: u64, seq: u64) -> u64 {
    slot(state, 0, 0, seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_round_trip() {
        let w = slot(
            READY,
            (MAX_SIDS - 1) as u32,
            (MAX_RECORDS - 1) as u32,
            SEQ_MASK,
        );
        assert_eq!(state(w), READY);
        assert_eq!(sid(w), (MAX_SIDS - 1) as u32);
        assert_eq!(rec(w), (MAX_RECORDS - 1) as u32);
        assert_eq!(seq(w), SEQ_MASK);
        assert_eq!(free(5), 5);
        // Out-of-range fields are masked, never spill into their neighbours.
        let w = slot(READY, u32::MAX, u32::MAX, 7);
        assert_eq!((state(w), seq(w)), (READY, 7));
    }

    #[test]
    fn gen_words() {
        let w = gen_word(SENT, (1 << 62) - 1);
        assert_eq!(gen_state(w), SENT);
        assert_eq!(gen_of(w), (1 << 62) - 1);
        assert_eq!(next_gen(gen_of(w)), 0);
    }

    #[test]
    fn diff_wraps() {
        assert_eq!(seq_diff(3, 1), 2);
        assert_eq!(seq_diff(1, 3), -2);
        assert_eq!(seq_diff(0, SEQ_MASK), 1);
        assert_eq!(seq_diff(SEQ_MASK, 0), -1);
    }
}
