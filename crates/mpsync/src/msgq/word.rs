//! The handshake words of packets and bulk blocks: a state, the claimant's
//! process id and a 40-bit sequence number (the ticket of the lap the slot
//! belongs to), packed in one `u64` so that a single CAS changes all three.
//!
//! Packet type word (paper 004 §3's FREE → CLAIMED → READY → FREE):
//!
//! | state     | pid      | seq | who sets it                          | meaning                                   |
//! |-----------|----------|-----|--------------------------------------|-------------------------------------------|
//! | `FREE`    | 0        | `t` | creator (t = index), receiver        | empty; only ticket `t` may claim it       |
//! | `CLAIMED` | claimant | `t` | the sender holding ticket `t`, by CAS| being filled by that process              |
//! | `READY`   | claimant | `t` | that sender, by CAS (Release)        | filled; the receiver may deliver it       |
//!
//! The receiver releases a delivered packet `t` as `FREE(t + Q)` (the next lap),
//! and also *revokes* a ticket: `FREE(t)` whose ticket was handed out but never
//! claimed for a lease (`FREE(t) → FREE(t + Q)`; a live slow sender sees a later
//! sequence and takes a new ticket), or `CLAIMED(pid, t)` whose claimant is dead.
//!
//! Bulk block word (§3's "claimed flag"): `FREE(b)` → `CLAIMED(pid, b)` →
//! `SENT(pid, b)` (data written, packet about to be published) → `FREE(b + B)`.
//!
//! Paper 004's Figure 3 claims `packet[t mod Q]` with CAS(FREE → CLAIMED)
//! regardless of lap, so a slow sender can claim a packet of a *later* lap and
//! its message is delivered before earlier ones of the same sender. Tagging the
//! word with the lap keeps per-sender FIFO order and makes recovery safe: a
//! stale CAS can never succeed on a slot that moved on.

/// Bits of the sequence number.
pub const SEQ_BITS: u32 = 40;
/// Mask of the sequence number.
pub const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;
/// Bits of the claimant's pid (Linux's `PID_MAX_LIMIT` is 2²²).
pub const PID_BITS: u32 = 22;
/// Mask of the pid (after shifting).
pub const PID_MASK: u64 = (1 << PID_BITS) - 1;
const PID_SHIFT: u32 = SEQ_BITS;
const STATE_SHIFT: u32 = SEQ_BITS + PID_BITS;

/// Free (packet or block).
pub const FREE: u64 = 0;
/// Claimed by a sender that is filling it.
pub const CLAIMED: u64 = 1;
/// Packet: filled and ready for delivery.
pub const READY: u64 = 2;
/// Bulk block: data written, its packet is being published.
pub const SENT: u64 = 3;

/// Packs a word.
#[inline]
pub const fn pack(state: u64, pid: u32, seq: u64) -> u64 {
    (state << STATE_SHIFT) | (((pid as u64) & PID_MASK) << PID_SHIFT) | (seq & SEQ_MASK)
}

/// The state of a word.
#[inline]
pub const fn state(w: u64) -> u64 {
    w >> STATE_SHIFT
}

/// The claimant pid of a word.
#[inline]
pub const fn pid(w: u64) -> u32 {
    ((w >> PID_SHIFT) & PID_MASK) as u32
}

/// The sequence number of a word.
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

/// Whether `pid` fits a word (non-zero, below 2²²).
#[inline]
pub const fn pid_fits(pid: u32) -> bool {
    pid != 0 && (pid as u64) <= PID_MASK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_round_trip() {
        let w = pack(READY, 4_194_303, SEQ_MASK);
        assert_eq!(state(w), READY);
        assert_eq!(pid(w), 4_194_303);
        assert_eq!(seq(w), SEQ_MASK);
        assert_eq!(pack(FREE, 0, 5), 5);
    }

    #[test]
    fn diff_wraps() {
        assert_eq!(seq_diff(3, 1), 2);
        assert_eq!(seq_diff(1, 3), -2);
        assert_eq!(seq_diff(0, SEQ_MASK), 1);
        assert_eq!(seq_diff(SEQ_MASK, 0), -1);
    }
}
