//! Ticket locks: the plain ticket lock with proportional backoff and the
//! scheduler-conscious Ticket-np of Wisniewski, Kontothanassis & Scott, PPoPP 1995
//! §3.1 (papers/001_…); the two-counter layout question of Lumetta & Culler 1998
//! §3.1 (papers/004_…).
//!
//! An acquirer takes a number (`fetch_add` on `next`) and waits until `serving`
//! shows it, pausing between reads for a time proportional to how many are ahead
//! (001 §3.1). The releaser advances `serving`. Service is FIFO — which is what
//! makes the plain lock fragile under multiprogramming: the lock is handed to the
//! next number even if its holder is preempted, and every later number waits.
//!
//! [`TicketNp`] repairs that with a handshake (001 §3.1): the releaser *offers* the
//! lock to the next number and waits briefly for the acquirer to *claim* it; with
//! no claim in time it withdraws the offer (one CAS decides the race) and offers
//! the following number. A withdrawn acquirer, when it runs again, takes a new
//! number. The critical section is no-preempt (nesting through the context
//! block's depth); the wait is not. On an idle lock Ticket-np takes no number
//! at all: it claims the offer in place (one CAS to lock, one store and one
//! load to unlock: the plain lock's cost), and its release offers the same
//! number again.
//!
//! Layout: [`Ticket`] keeps both counters in one cache line (004 found that
//! faster); [`TicketSplit`] pads them onto separate lines, for measuring the
//! difference. Both are pointer-free and `#[repr(C)]`: they work when placed in
//! memory shared by several processes (see [`super::ProcessShared`]).
//!
//! Natively the kernel says which takers are off their CPUs (the eBPF answers
//! of `sched::native`, looked up through a per-number record of who took it),
//! so their offers are withdrawn at once instead of after the patience; and
//! waiters behind a hand-over that stands still park instead of spinning
//! against the thread everyone waits for (see [`TicketNp`]).
//!
//! Uses `sched` (Ticket-np only): `request/release_no_preempt`,
//! `pause/resume_no_preempt`, `yield_now`, `park`/`unpark_all`,
//! `native::kernel_key`/`kernel_state_at`. Progress: plain ticket is FIFO and
//! starvation-free; Ticket-np gives up FIFO for preempted (and parked) waiters.
//!
//! ```
//! use mpsync::{lock::{Mutex, Ticket, TicketNp, TicketSplit}};
//! let a: Mutex<Ticket, u32> = Mutex::new(1);
//! let b: Mutex<TicketNp, u32> = Mutex::new(2);
//! let c: Mutex<TicketSplit, u32> = Mutex::new(3);
//! let outer = b.lock();
//! assert_eq!(*a.lock() + *outer + *c.lock(), 6); // nested under a no-preempt lock
//! ```

use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use crate::sched::{self, stall};
use crate::sync::{AtomicU32, AtomicU64, Ordering, spin_loop};
use crate::util::clock::Patience;

/// Pause per waiter ahead, in `spin_loop` hints (≈ 0.1–0.5 µs on current x86).
const PROPORTIONAL_SPINS: u32 = 32;

/// Signed distance from `a` to `b` on the wrapping ticket circle (the plain
/// ticket locks: a `lock` taker never leaves its number, so at most one number
/// per thread is ever outstanding and the distance never nears 2³¹; the
/// numbers `lock_or_give_up` takers leave are passed over by the `reset` that
/// unsticks the lock they wedge).
#[inline]
fn ahead(mine: u32, serving: u32) -> i32 {
    mine.wrapping_sub(serving) as i32
}

/// A [`TicketNp`] number (64-bit: see "Numbers" there).
type Number = u64;

/// Signed distance from `serving` to `mine` on Ticket-np's number circle.
#[inline]
fn ahead_np(mine: Number, serving: Number) -> i64 {
    mine.wrapping_sub(serving) as i64
}

/// Waits about `n` positions' worth (001 §3.1 proportional backoff). Under loom
/// a single model yield, as [`crate::util::backoff::Backoff::spin`] is: every
/// spin there is a scheduling point, and 32 per position made the models that
/// lock twice too large to finish.
#[inline]
fn proportional_pause(n: u32) {
    for _ in 0..pause_spins(n) {
        spin_loop();
    }
}

/// The spins of [`proportional_pause`] for `n` positions (capped at 2¹⁶); one
/// under loom.
#[inline]
fn pause_spins(n: u32) -> u32 {
    if cfg!(loom) {
        1
    } else {
        n.saturating_mul(PROPORTIONAL_SPINS).min(1 << 16)
    }
}

macro_rules! plain_ticket {
    ($(#[$doc:meta])* $name:ident, $field:ty, $wrap:expr, $get:ident) => {
        $(#[$doc])*
        #[derive(Debug)]
        #[repr(C)]
        pub struct $name {
            next: $field,
            serving: $field,
        }

        impl $name {
            /// An unlocked lock.
            #[cfg(not(loom))]
            pub const fn new() -> Self {
                Self {
                    next: $wrap(AtomicU32::new(0)),
                    serving: $wrap(AtomicU32::new(0)),
                }
            }

            /// An unlocked lock.
            #[cfg(loom)]
            pub fn new() -> Self {
                Self {
                    next: $wrap(AtomicU32::new(0)),
                    serving: $wrap(AtomicU32::new(0)),
                }
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        // SAFETY: tickets are unique (fetch_add), and the holder of ticket t is the
        // only thread that sees `serving == t` and it alone advances `serving`. The
        // Acquire load of `serving` pairs with the Release store in `unlock`.
        unsafe impl lock_api::RawMutex for $name {
            #[allow(clippy::declare_interior_mutable_const)]
            #[cfg(not(loom))]
            const INIT: Self = Self::new();
            #[allow(clippy::declare_interior_mutable_const)]
            #[cfg(loom)]
            const INIT: Self = panic!("under loom, use Ticket::new()");

            type Guard = lock_api::GuardSend;

            #[inline]
            fn lock(&self) -> Self::Guard {
                // Relaxed: the ticket only orders us among acquirers; the hand-over
                // is synchronized through `serving`.
                let mine = $get(&self.next).fetch_add(1, Ordering::Relaxed);
                loop {
                    // Acquire: pairs with the Release increment in `unlock`.
                    let s = $get(&self.serving).load(Ordering::Acquire);
                    let d = ahead(mine, s);
                    if d == 0 {
                        return lock_api::GuardSend::new();
                    }
                    proportional_pause(d as u32);
                }
            }

            #[inline]
            fn try_lock(&self) -> Option<Self::Guard> {
                // Acquire: pairs with the Release in `unlock`.
                let s = $get(&self.serving).load(Ordering::Acquire);
                // Only take a number if it would be served at once. Acquire on
                // success: orders the critical section after the previous holder's.
                $get(&self.next)
                    .compare_exchange(s, s.wrapping_add(1), Ordering::Acquire, Ordering::Relaxed)
                    .ok()
                    .map(|_| lock_api::GuardSend::new())
            }

            #[inline]
            unsafe fn unlock(&self, _guard: Self::Guard) {
                // Only the holder writes `serving` (Relaxed read of our own value).
                let s = $get(&self.serving).load(Ordering::Relaxed);
                // Release: publishes the critical section to the next ticket's Acquire.
                $get(&self.serving).store(s.wrapping_add(1), Ordering::Release);
            }

            #[inline]
            fn is_locked(&self) -> bool {
                // Relaxed: a momentary snapshot, documented as possibly stale.
                $get(&self.next).load(Ordering::Relaxed) != $get(&self.serving).load(Ordering::Relaxed)
            }
        }

        // SAFETY: `lock_or_give_up` enters only as `lock` does: its own number
        // (fetch_add) seen in `serving` by the Acquire load. A number it leaves
        // (given up, or passed) is never taken again before the counter wraps.
        unsafe impl super::SharedClaimLock for $name {
            /// As `lock`: a number, then proportional pauses (each in pieces
            /// of [`GIVE_UP_SPINS`](super::GIVE_UP_SPINS) spins with a call of
            /// `give_up` between). A number that `serving` has passed (a
            /// `reset`, or a peer, moved it beyond) is given up for a new one.
            fn lock_or_give_up(
                &self,
                give_up: &mut dyn FnMut() -> bool,
            ) -> Option<lock_api::GuardSend> {
                let mut g = super::GiveUp::new(give_up);
                loop {
                    // Relaxed: as in `lock`.
                    let mine = $get(&self.next).fetch_add(1, Ordering::Relaxed);
                    loop {
                        // Acquire: as in `lock`, pairs with the Release store
                        // in `unlock` (or `reset`).
                        let s = $get(&self.serving).load(Ordering::Acquire);
                        let d = ahead(mine, s);
                        if d == 0 {
                            return Some(lock_api::GuardSend::new());
                        }
                        if d < 0 {
                            break; // passed: a new number
                        }
                        if g.spin(pause_spins(d as u32)) {
                            return None;
                        }
                    }
                    if g.spin(1) {
                        return None;
                    }
                }
            }

            /// `serving`: every release advances it; numbers taken do not.
            fn progress(&self) -> u64 {
                // Relaxed: a sample the caller compares with later ones;
                // nothing is read through it.
                $get(&self.serving).load(Ordering::Relaxed).into()
            }

            /// `serving = next`: the next number taken is served at once; the
            /// numbers taken before are passed (their `lock_or_give_up`
            /// takers take new ones; a `lock` taker waits until the counter
            /// wraps).
            unsafe fn reset(&self) {
                // Relaxed: the count of numbers taken, nothing read through
                // it; a number taken after this load is `n` or later and is
                // served in turn.
                let n = $get(&self.next).load(Ordering::Relaxed);
                // Release: as `unlock`'s store; the taker of number `n` enters
                // by its Acquire load of it.
                $get(&self.serving).store(n, Ordering::Release);
            }
        }
    };
}

#[inline(always)]
fn same(a: &AtomicU32) -> &AtomicU32 {
    a
}

#[inline(always)]
fn padded(a: &CachePadded<AtomicU32>) -> &AtomicU32 {
    a
}

#[cfg(not(loom))]
const fn pad(a: AtomicU32) -> CachePadded<AtomicU32> {
    CachePadded::new(a)
}
#[cfg(loom)]
fn pad(a: AtomicU32) -> CachePadded<AtomicU32> {
    CachePadded::new(a)
}
#[cfg(not(loom))]
const fn id(a: AtomicU32) -> AtomicU32 {
    a
}
#[cfg(loom)]
fn id(a: AtomicU32) -> AtomicU32 {
    a
}

plain_ticket!(
    /// Ticket lock with proportional backoff, both counters in one cache line
    /// (the layout papers/004 §3.1 found faster). FIFO.
    Ticket,
    AtomicU32,
    id,
    same
);

plain_ticket!(
    /// Ticket lock with proportional backoff, each counter on its own cache line
    /// (the layout to compare against [`Ticket`]). FIFO.
    TicketSplit,
    CachePadded<AtomicU32>,
    pad,
    padded
);

/// `serving` word of [`TicketNp`]: the offered ticket in the high 31 bits, bit 0
/// set once its acquirer has claimed it.
const CLAIMED: Number = 1;

/// How long a releaser waits for the next ticket's claim before withdrawing the
/// offer (the acquirer polls continuously once it is next, so a running one
/// claims within a microsecond).
pub const TICKET_NP_DEFAULT_PATIENCE: Duration = Duration::from_micros(20);

/// Taker slots of [`TicketNp`]: number `t` is recorded in slot `(t / 2) % TAKERS`.
/// More waiting numbers than slots only make some takers unknown (patience).
const TAKERS: usize = 8;

/// Most numbers outstanding (taken, not yet withdrawn or served) that a
/// timed taker joins: it takes a number only while fewer are, so the numbers
/// that timed takers can leave behind fit in the taker slots, each keeping
/// its departed mark until its number is withdrawn (see "Timed acquisition"
/// at [`TicketNp`]).
const TIMED_BACKLOG: Number = TAKERS as Number;

/// Longest nap of a timed taker that waits outside a full backlog (nobody
/// wakes it: it holds no number).
const OUTSIDE_NAP: Duration = Duration::from_micros(100);

/// Low half of a taker slot whose taker gave up (a timed waiter whose deadline
/// passed): its number is withdrawn at once when it comes up. Kernel keys are
/// small indices, so `key + 1` never reaches it.
const DEPARTED: u32 = u32::MAX;

/// The part of number `t` a taker slot carries (its low 32 bits): a slot
/// holds a hint, and a number 2³² numbers away that finds a stale entry of
/// the same slot only costs a withdrawal, which is always safe.
#[inline]
fn slot_tag(t: Number) -> u64 {
    t & u64::from(u32::MAX)
}

/// Bell bit: a waiter may be parked on this bell (the rest counts rings).
const SLEEPY: u32 = 1;

/// A waiter that has seen `serving` stand still this long parks (the holder
/// or the releaser is off its CPU, or the section is long): far above a
/// hand-over that runs (≈ 1 µs), far below a scheduler slice (1–4 ms).
const PARK_AFTER_NS: u64 = 50_000;

/// Longest park: a ring from another process (the lock in shared memory; the
/// futex is private) or one missed by a racing announcement costs at most this.
const PARK_TIMEOUT: Duration = Duration::from_micros(500);

/// The scheduler-conscious ticket lock (001 §3.1, "Ticket-np").
///
/// Tickets are 63-bit numbers: `next` counts in steps of 2 and `serving` holds
/// `ticket | CLAIMED`, so the offer and its claim are one word and a single CAS
/// decides between the acquirer's claim and the releaser's withdrawal.
/// Distances between numbers are read on the wrapping circle (`wrapping_sub`
/// as a signed 64-bit value): they stay far below 2⁶² — numbers ahead of
/// `serving` are bounded (below), and a number behind it by 2⁶² would need
/// that many acquisitions while its taker was away — so counters that wrap
/// (a test starts them just below 2³² and 2⁶⁴) never change an answer.
///
/// | `serving` | `next`  | state                                     | left by                                                       |
/// |-----------|---------|-------------------------------------------|---------------------------------------------------------------|
/// | `t`       | `== t`  | free: offered to whoever takes `t` next   | the taker's claim (`t → t\|1`); or an *idle claim* `t → t\|1` by a thread that takes no number |
/// | `t`       | `> t`   | reserved: offered to the taker of `t`     | its claim; or a withdrawal CAS `t → t+2` by the releaser or by any waiter behind it (after the patience, or at once for a taker that left or is off its CPU: see `acquire`) |
/// | `t\|1`    | `>= t`  | held: by the taker of `t`, or by an idle claimer (then `next` was `t` at its claim) | its release: the store `t+2` by a taker, `t` by an idle claimer (the only plain stores) |
///
/// \[1\] The ticket in `serving` (`serving & !CLAIMED`) never decreases, and
/// never passes `next`: a claim sets bit 0, a taker's release adds 1 (past
/// its own number), an idle claimer's release clears bit 0 (it took no
/// number, so the same one is on offer again), a withdrawal adds 2 (past a
/// number that was taken).
/// \[2\] Every write but the holder's release store is a CAS from an unclaimed
/// (even) value, so a claimed word changes only by its holder's release. So
/// one thread holds at a time: from its CAS that made the word odd to its
/// release store.
/// \[3\] Which thread may claim (fairness, not safety): the taker of `t`
/// (numbers are unique: `fetch_add`), or — only while `next` showed that
/// nobody took `t` — an idle claimer. The uncontended lock is the idle claim:
/// one CAS to lock, one store to unlock, as the plain ticket lock. A taker that
/// took `t` in the race with an idle claim finds `t` claimed: it marks its
/// slot departed (so whoever watches the offer of `t` later withdraws it at
/// once) and takes a new number.
///
/// Who took which number (a hint, never part of the protocol above): a waiter
/// records its thread's kernel key ([`sched::native::kernel_key`], an index,
/// not a pointer, so the lock stays usable across processes) in a small slot
/// array indexed by number, `(t mod 2³² << 32) | (key + 1)`. The releaser, and the
/// waiter behind an idle lock's unclaimed offer, withdraw the offer at once
/// when the kernel says its taker is off its CPU (preempted or blocked); they
/// wait out the patience only for a taker that runs or that nobody knows (no
/// eBPF, not recorded yet, slot taken over by a later number).
///
/// Waiters park (a hint too): one that sees the holder off its CPU by the
/// kernel's answer, or — unless the kernel says the holder runs (a long
/// section) — `serving` stand still for 50 µs, parks on its number's
/// bell, and a releaser that finds waiters behind its offer rings every bell
/// with a sleeper. The park is timed (500 µs): a ring is not guaranteed to
/// reach a sleeper (an idle lock's releaser does not ring, a ring from another
/// process cannot wake a private futex), and a parked taker is off its CPU, so
/// its number is withdrawn when it comes up and it takes a new one on waking.
///
/// Timed acquisition (`lock_api::RawMutexTimed`): a taker whose deadline
/// passes marks its slot departed and leaves its number. Whoever finds a
/// departed number on offer withdraws it at once: its releaser, the taker
/// behind it — and, where the releaser found the lock idle (its look at
/// `next` can miss a number taken just then; no fence orders the two, to
/// keep the uncontended unlock a store and a load), the next `lock` or
/// `try_lock`, which withdraws a departed offer with nobody behind it before
/// its idle claim (`is_locked` counts that lock free). A departing taker that
/// sees its own number on offer on the way out claims it and returns the
/// lock, past its deadline. See `depart`.
///
/// Left numbers must not pile up, or a storm of short timed attempts buries a
/// free lock under numbers whose marks were overwritten (each then costs a
/// whole patience). So a timed attempt whose deadline has already passed
/// (`try_lock_for(Duration::ZERO)`, `try_lock_until` an instant gone by) is
/// only a `try_lock`: it takes no number; and a timed taker takes a number
/// only while fewer than 8 (the taker slots) are outstanding — otherwise it
/// waits outside the queue, helping to withdraw departed offers at its head,
/// until the queue shortens or its deadline passes. Every number a timed
/// taker leaves therefore keeps its departed mark until it is withdrawn (a
/// later number in the same slot is taken only by an untimed taker, which
/// costs that number one patience at most), the numbers outstanding are at
/// most 8 plus two per thread, and a lock nobody holds, behind which only
/// departed numbers wait, reads free. The price: a timed attempt against a
/// queue of 8 or more waiters has no place in line until it shortens, and can
/// time out while untimed waiters go first.
#[derive(Debug)]
#[repr(C)]
pub struct TicketNp {
    next: AtomicU64,
    serving: AtomicU64,
    /// Offers withdrawn so far (diagnostic).
    withdrawn: AtomicU64,
    patience_ns: u32,
    /// Whether to ask the kernel about takers (tests switch it off to force
    /// the patience).
    ask_kernel: bool,
    /// Takers' kernel keys by number (see above).
    takers: [AtomicU64; TAKERS],
    /// Where waiters park, by number (`SLEEPY` | ring count); see `park`.
    bells: [AtomicU32; TAKERS],
}

/// Guard state of [`TicketNp`]: the no-preempt request, and the number its
/// release puts on offer — the one after the holder's own, or, after an idle
/// claim (no number taken), the claimed one again. Not `Send`: the request
/// belongs to its thread.
#[derive(Debug)]
#[must_use = "release it through the lock's unlock"]
pub struct TicketNpGuard {
    token: super::np::NpToken,
    offer: Number,
}

impl TicketNpGuard {
    #[inline]
    fn new(token: super::np::NpToken, offer: Number) -> Self {
        Self { token, offer }
    }
}

impl TicketNp {
    /// An unlocked lock with the default patience (20 µs).
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            next: AtomicU64::new(0),
            serving: AtomicU64::new(0),
            withdrawn: AtomicU64::new(0),
            patience_ns: TICKET_NP_DEFAULT_PATIENCE.as_nanos() as u32,
            ask_kernel: true,
            takers: [const { AtomicU64::new(0) }; TAKERS],
            bells: [const { AtomicU32::new(0) }; TAKERS],
        }
    }

    /// An unlocked lock with the default patience (20 µs).
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            next: AtomicU64::new(0),
            serving: AtomicU64::new(0),
            withdrawn: AtomicU64::new(0),
            patience_ns: TICKET_NP_DEFAULT_PATIENCE.as_nanos() as u32,
            ask_kernel: true,
            takers: std::array::from_fn(|_| AtomicU64::new(0)),
            bells: std::array::from_fn(|_| AtomicU32::new(0)),
        }
    }

    /// An unlocked lock whose releaser waits `patience` for a claim before it
    /// withdraws an offer. Errors unless 100 ns ≤ `patience` ≤ 1 s.
    pub fn with_patience(patience: Duration) -> Result<Self, super::LockError> {
        let ns = patience.as_nanos();
        if !(100..=1_000_000_000).contains(&ns) {
            return Err(super::LockError::InvalidParameter(format!(
                "Ticket-np patience {patience:?} is out of range: use 100 ns ..= 1 s (default 20 µs)"
            )));
        }
        let mut l = Self::new();
        l.patience_ns = ns as u32;
        Ok(l)
    }

    /// The timed acquisition (`lock_api::RawMutexTimed`, in `fair_timed`):
    /// `try_lock`, then — unless the deadline has passed already: a taker
    /// that would give up at its first look must not take a number — the
    /// waiting path until `deadline`.
    #[inline]
    pub(super) fn try_lock_until_impl(&self, deadline: Instant) -> Option<TicketNpGuard> {
        use lock_api::RawMutex;
        if let Some(g) = self.try_lock() {
            return Some(g);
        }
        if Instant::now() >= deadline {
            stall::point(stall::TIMED_GAVE_UP);
            return None;
        }
        self.timed_slow(deadline)
    }

    /// Loom models only: a timed attempt whose deadline passes between its
    /// take and its first wait (a model cannot use real time to make it
    /// so): after a failed `try_lock` it takes a number and gives up at its
    /// first look, leaving the number departed (or claiming it on the way
    /// out).
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn try_lock_leaving_at_first_wait(&self) -> Option<TicketNpGuard> {
        use lock_api::RawMutex;
        if let Some(g) = self.try_lock() {
            return Some(g);
        }
        self.timed_slow(Instant::now())
    }

    /// The waiting path of a timed acquisition: takes a number (within the
    /// backlog bound) and waits for it until `deadline`.
    #[cold]
    fn timed_slow(&self, deadline: Instant) -> Option<TicketNpGuard> {
        let token = super::np::NpToken::request();
        match self.acquire(token.cb(), Some(deadline)) {
            Some(mine) => Some(TicketNpGuard::new(token, mine.wrapping_add(2))),
            None => {
                // Nothing was held: end the request without the warned thread's yield.
                token.cancel();
                None
            }
        }
    }

    /// The idle claim (\[3\] at [`TicketNp`]): claims the number on offer
    /// without taking it, if `next` shows that nobody took it, and returns it
    /// (the release offers it again).
    #[inline]
    fn claim_idle(&self) -> Option<Number> {
        // Relaxed: a look; the CAS decides. A stale `next` only lets us claim a
        // number that was taken just now, whose taker then finds it claimed and
        // takes another (`acquire`).
        let n = self.next.load(Ordering::Relaxed);
        // Acquire: orders the critical section after the previous holder's
        // Release store (or a withdrawal CAS in its release sequence).
        self.serving
            .compare_exchange(n, n | CLAIMED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then_some(n)
    }

    /// `lock` past a failed idle claim: take a number and wait for it.
    #[cold]
    #[inline(never)]
    fn lock_slow(&self, token: super::np::NpToken) -> TicketNpGuard {
        let Some(mine) = self.acquire(token.cb(), None) else {
            unreachable!("an untimed acquire returns only with its number claimed")
        };
        TicketNpGuard::new(token, mine.wrapping_add(2))
    }

    /// Withdraws the offers of departed takers, starting from `s` (a value of
    /// `serving` the caller read), and returns the last value seen: claimed,
    /// or an offer to a taker that did not depart (or to nobody yet). Anyone
    /// may do this, as the releaser and the taker behind do (a departed taker
    /// never claims), and a lock whose releaser saw nobody behind it ("Timed
    /// acquisition" at [`TicketNp`]) needs it: there, departed numbers can
    /// stand in a row before the first live one.
    #[cold]
    fn withdraw_departed(&self, mut s: Number) -> Number {
        // A departed number was taken (only its taker marks it), so `next` is
        // past it and the withdrawal keeps \[1\].
        while s & CLAIMED == 0 && self.departed(s) {
            s = match self.withdraw(s) {
                Ok(()) => s.wrapping_add(2),
                Err(v) => v,
            };
        }
        s
    }

    /// Withdraws the unclaimed offer `s`: the CAS `s → s + 2`, which offers
    /// the number after it in the same step. `Err` with the value found when
    /// `serving` was no longer `s` (claimed, or withdrawn by someone else).
    #[inline]
    fn withdraw(&self, s: Number) -> Result<(), Number> {
        // Release: the claimant of s + 2 reads this CAS (a release-sequence
        // member of the offer store before it anyway; explicit, for the reader).
        self.serving.compare_exchange(
            s,
            s.wrapping_add(2),
            Ordering::Release,
            Ordering::Relaxed,
        )?;
        // Relaxed: a statistic.
        self.withdrawn.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Offers withdrawn from preempted (or slow) acquirers since creation.
    pub fn withdrawn(&self) -> u64 {
        // Relaxed: a statistic.
        self.withdrawn.load(Ordering::Relaxed)
    }

    #[inline]
    fn taker_slot(&self, t: Number) -> &AtomicU64 {
        &self.takers[(t as usize / 2) % TAKERS]
    }

    /// Records that the calling thread (block `cb`) took number `t`, where the
    /// kernel answers for it.
    #[inline]
    fn record_taker(&self, t: Number, cb: &sched::ContextBlock) {
        if !self.ask_kernel {
            return;
        }
        if let Some(k) = sched::native::kernel_key(cb) {
            // Relaxed: a hint that publishes nothing; readers check the number
            // it carries, and a missing or overwritten entry costs a patience.
            self.taker_slot(t)
                .store((slot_tag(t) << 32) | (u64::from(k) + 1), Ordering::Relaxed);
        }
    }

    /// Whether the kernel says the taker of number `t` is off its CPU
    /// (preempted, or blocked): waiting for its claim would then only hold up
    /// every number behind it. `false` when nobody knows.
    /// A taker that gave up (timed, see `depart`) counts as off its CPU.
    #[inline]
    fn taker_off_cpu(&self, t: Number) -> bool {
        if self.departed(t) {
            return true;
        }
        matches!(
            self.taker_state(t),
            Some(sched::native::KernelState::Preempted | sched::native::KernelState::Blocked)
        )
    }

    /// Whether the taker of number `t` gave up on it: a timed taker past its
    /// deadline, or one that found `t` claimed by an idle claim.
    #[inline]
    fn departed(&self, t: Number) -> bool {
        // Relaxed: see `record_taker` (a missed mark costs a patience).
        let v = self.taker_slot(t).load(Ordering::Relaxed);
        v >> 32 == slot_tag(t) && v as u32 == DEPARTED
    }

    /// Marks number `t` given up by its taker, the caller: whoever watches its
    /// offer withdraws it at once.
    #[inline]
    fn mark_departed(&self, t: Number) {
        // Relaxed: see `record_taker` (a missed mark costs a patience).
        self.taker_slot(t)
            .store((slot_tag(t) << 32) | u64::from(DEPARTED), Ordering::Relaxed);
    }

    /// The kernel's state of the taker of number `t`; `None` when nobody knows.
    #[inline]
    fn taker_state(&self, t: Number) -> Option<sched::native::KernelState> {
        // Relaxed: see `record_taker`.
        let v = self.taker_slot(t).load(Ordering::Relaxed);
        if v >> 32 != slot_tag(t) || v as u32 == 0 || v as u32 == DEPARTED {
            return None;
        }
        sched::native::kernel_state_at(v as u32 - 1)
    }

    /// Whether to stop waiting for the claim of offer `t` and withdraw it: its
    /// taker is off its CPU, or `patience` ran out.
    #[inline]
    fn give_up_on(&self, t: Number, patience: &mut Patience) -> bool {
        self.taker_off_cpu(t) || patience.exhausted()
    }

    /// Parks the waiter holding number `mine`, which saw `serving == s` and
    /// decided that spinning only takes a CPU from the thread everyone waits
    /// for, until a releaser rings ([`ring`](Self::ring)), `serving` moved
    /// meanwhile, or [`PARK_TIMEOUT`]. May return spuriously; the caller
    /// re-reads `serving`. Parking never changes the protocol above: a parked
    /// taker is off its CPU, so its offer is withdrawn at once, and it takes a
    /// new number when it runs again.
    #[cold]
    fn park(&self, mine: Number, s: Number, deadline: Option<Instant>) {
        let bell = &self.bells[(mine as usize / 2) % TAKERS];
        // SeqCst (announcement and re-check): a Dekker pair with the ringer's
        // write of `serving` and its SeqCst fence and look at the bell: either
        // the ringer sees SLEEPY, or we see its new `serving` and do not sleep.
        let b = bell.fetch_or(SLEEPY, Ordering::SeqCst) | SLEEPY;
        if self.serving.load(Ordering::SeqCst) != s {
            return;
        }
        // A timed waiter sleeps at most to its deadline.
        let t = deadline.map_or(PARK_TIMEOUT, |d| {
            PARK_TIMEOUT.min(d.saturating_duration_since(Instant::now()))
        });
        let _ = sched::park(bell, b, Some(t));
    }

    /// Wakes every parked waiter, after `serving` moved (an offer, a
    /// withdrawal). On the contended path only: a waiter parks only behind a
    /// number that another thread took, so an offer nobody took yet (the
    /// lock went idle) has no sleeper to wake but stale ones, which the
    /// timeout bounds.
    #[cold]
    fn ring(&self) {
        // SeqCst: see `park`.
        crate::sync::fence(Ordering::SeqCst);
        for bell in &self.bells {
            // Relaxed: the fence above orders it after our write of `serving`.
            let v = bell.load(Ordering::Relaxed);
            if v & SLEEPY != 0
                // Relaxed: the sleeper re-reads `serving` itself. A new count
                // without SLEEPY: a sleeper's futex expects the value it set.
                && bell
                    .compare_exchange(v, v.wrapping_add(1), Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                sched::unpark_all(bell);
            }
        }
    }

    /// Takes numbers until one is served: returns the number claimed. With a
    /// `deadline`, a waiter that sees it pass gives up
    /// ([`depart`](Self::depart)) and returns `None` holding nothing — or its
    /// number if that was on offer then and its claim won.
    ///
    /// A timed taker takes its number through [`take_timed`](Self::take_timed)
    /// (the backlog bound); its caller has checked the deadline before the
    /// first take, and a taker whose number was withdrawn or lost to an idle
    /// claim checks it again before taking another.
    #[inline]
    fn acquire(&self, cb: &sched::ContextBlock, deadline: Option<Instant>) -> Option<Number> {
        let mut first = true;
        'ticket: loop {
            let mine = match deadline {
                // Relaxed: as in the plain ticket lock; the claim CAS synchronizes.
                None => self.next.fetch_add(2, Ordering::Relaxed),
                Some(d) => {
                    if !first && Instant::now() >= d {
                        return None;
                    }
                    first = false;
                    self.take_timed(cb, d)?
                }
            };
            stall::point(stall::TICKET_NP_TAKEN);
            // Whether we let the scheduler preempt us while we wait (we hold no
            // lock): decided at the first wait, so a number served at once (the
            // uncontended lock) is claimed without pausing and resuming.
            let mut paused: Option<bool> = None;
            // The offer we watch when we are next in line, and since when.
            let mut watched: Option<(Number, Patience)> = None;
            // The value of `serving` last seen to change, and since when.
            let mut still: Option<(Number, Patience)> = None;
            loop {
                // Acquire: pairs with the releaser's Release offer.
                let s = self.serving.load(Ordering::Acquire);
                let d = ahead_np(mine, s & !CLAIMED);
                if d < 0 || (d == 0 && s & CLAIMED != 0) {
                    // Our number was withdrawn, or, with `d == 0`, claimed by an
                    // idle claim that raced our taking it (or wrapped past): take
                    // a new one. A claimed number comes back on offer at its
                    // idle claimer's release: mark it given up, so that whoever
                    // watches that offer withdraws it at once.
                    if d == 0 {
                        self.mark_departed(mine);
                    }
                    if paused == Some(true) {
                        cb.resume_no_preempt();
                    }
                    continue 'ticket;
                }
                if d == 0 {
                    if paused == Some(true) {
                        // Unpreemptable before claiming, so a claimed lock is
                        // never held by a preempted thread (the kernel may still
                        // withdraw our processor after the extension bound).
                        cb.resume_no_preempt();
                    }
                    stall::point(stall::TICKET_NP_CLAIMING);
                    // Acquire: orders the critical section after the releaser's.
                    match self.serving.compare_exchange(
                        s,
                        s | CLAIMED,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => return Some(mine),
                        Err(v) => {
                            // Withdrawn just now (gone for good), or claimed by
                            // an idle claim whose look at `next` came before
                            // our take: then it comes back on offer at that
                            // claimer's release, so mark it given up, as above.
                            if v == mine | CLAIMED {
                                self.mark_departed(mine);
                            }
                            continue 'ticket;
                        }
                    }
                }
                // We wait: say who took `mine` (the releaser then learns whether
                // we run), and let the scheduler preempt us.
                let paused = *paused.get_or_insert_with(|| {
                    self.record_taker(mine, cb);
                    cb.pause_no_preempt()
                });
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    if paused {
                        cb.resume_no_preempt();
                    }
                    return self.depart(mine).then_some(mine);
                }
                if s & CLAIMED == 0 {
                    // A number ahead of us is on offer but not claimed: its taker
                    // may be preempted between taking it and claiming, or have
                    // given up (departed) — and nobody else may be watching: an
                    // idle lock's releaser did not wait for it (its look at
                    // `next` can miss the take), and a releaser stops watching
                    // once anyone withdraws. So every waiter watches: if the
                    // offer stays unclaimed past the patience, or its taker left
                    // or is off its CPU (the kernel says), withdraw it.
                    let p = match &mut watched {
                        Some((w, p)) if *w == s => p,
                        _ => {
                            &mut watched
                                .insert((s, Patience::start(u64::from(self.patience_ns))))
                                .1
                        }
                    };
                    if self.give_up_on(s, p) {
                        // Lost to a claim or another withdrawal: re-read either way.
                        let _ = self.withdraw(s);
                        continue;
                    }
                    if d == 2 {
                        // We are next: stay on the CPU to claim at once.
                        spin_loop();
                        continue;
                    }
                }
                // The holder is off its CPU (the kernel says so), or — where
                // the kernel does not say that it runs (a long section) —
                // nothing has moved for PARK_AFTER_NS: spinning then only takes
                // a CPU from the thread everyone waits for. Park until a
                // releaser rings.
                let stuck = match &mut still {
                    Some((w, p)) if *w == s => p.exhausted(),
                    _ => {
                        still = Some((s, Patience::start(PARK_AFTER_NS)));
                        false
                    }
                };
                let holder = if s & CLAIMED != 0 {
                    self.taker_state(s & !CLAIMED)
                } else {
                    None
                };
                let park = match holder {
                    Some(sched::native::KernelState::Running) => false,
                    Some(_) => true,
                    None => stuck,
                };
                if park {
                    self.park(mine, s, deadline);
                    still = None;
                    continue;
                }
                if paused && cb.warned() {
                    // The scheduler wanted our processor while we only wait.
                    sched::yield_now();
                }
                proportional_pause(u32::try_from(d / 2).unwrap_or(u32::MAX));
            }
        }
    }

    /// A timed taker's number: taken only while fewer than [`TIMED_BACKLOG`]
    /// numbers are outstanding (by a CAS on `next`, so the bound is exact at
    /// the take). Otherwise the taker waits outside — it holds no number, so
    /// nobody waits for it — helping to withdraw departed offers at the head,
    /// until the backlog shrinks (`None` once `deadline` has passed). The
    /// wait is preemptable: the no-preempt request is paused meanwhile.
    #[inline]
    fn take_timed(&self, cb: &sched::ContextBlock, deadline: Instant) -> Option<Number> {
        // (the episode, whether the request was paused), once we wait.
        let mut outside: Option<(sched::Waiter, bool)> = None;
        let got = loop {
            // Relaxed (both): a look that bounds the backlog; the CAS decides
            // the number. `serving` first: its number never passes `next`
            // (\[1\] at [`TicketNp`]), so the distance read is never less
            // than the one at the CAS (a stale `serving` only overestimates).
            let s = self.serving.load(Ordering::Relaxed);
            let n = self.next.load(Ordering::Relaxed);
            if n.wrapping_sub(s & !CLAIMED) < 2 * TIMED_BACKLOG {
                // Relaxed: as the untimed `fetch_add`.
                match self.next.compare_exchange(
                    n,
                    n.wrapping_add(2),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break Some(n),
                    Err(_) => continue,
                }
            }
            self.wait_outside(cb, s, deadline, &mut outside)?;
        };
        if let Some((_, true)) = outside {
            cb.resume_no_preempt();
        }
        got
    }

    /// One wait of a timed taker outside a full backlog (see
    /// [`take_timed`](Self::take_timed)), which saw `serving == s`: withdraws
    /// departed offers at the head, or spins and naps through the shared
    /// waiting policy. `None` (the request resumed) once `deadline` passed.
    #[cold]
    fn wait_outside(
        &self,
        cb: &sched::ContextBlock,
        s: Number,
        deadline: Instant,
        outside: &mut Option<(sched::Waiter, bool)>,
    ) -> Option<()> {
        if self.withdraw_departed(s) != s {
            return Some(()); // the head moved: look again
        }
        let now = Instant::now();
        if now >= deadline {
            if let Some((_, true)) = outside.take() {
                cb.resume_no_preempt();
            }
            return None;
        }
        let (w, _) = outside.get_or_insert_with(|| (sched::Waiter::new(), cb.pause_no_preempt()));
        if w.spin(None) == sched::Wait::Park {
            // Nobody wakes this nap (we are in no queue): it times out.
            let t = sched::Waiter::token();
            let _ = sched::Waiter::sleep(t, Some(OUTSIDE_NAP.min(deadline - now)));
            w.restart();
        }
        Some(())
    }

    /// A timed waiter holding number `mine` gives up. Nobody hands the lock
    /// over (a taker holds it only by its own claim), so leaving is enough —
    /// but the offer of `mine` must not be stranded: we mark the number
    /// departed, and whoever finds it on offer withdraws it at once (its
    /// releaser; the taker behind; where the releaser saw nobody behind, the
    /// next `lock` or `try_lock`: see "Timed acquisition" at [`TicketNp`]).
    /// An offer that is already there we claim ourselves on the way out (a
    /// late win: the caller gets the lock past its deadline). Returns whether
    /// we claimed.
    #[cold]
    fn depart(&self, mine: Number) -> bool {
        stall::point(stall::TIMED_GAVE_UP);
        self.mark_departed(mine);
        // Relaxed: the claim CAS below synchronizes.
        let s = self.serving.load(Ordering::Relaxed);
        // Acquire: as the claim in `acquire`. Fails if the offer was withdrawn
        // meanwhile (its withdrawer then answers for the next number).
        if s != mine {
            return false;
        }
        stall::point(stall::TICKET_NP_DEPART_CLAIMING);
        self.serving
            .compare_exchange(mine, mine | CLAIMED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// The releaser's side: offer number `t` (the one after ours; after an
    /// idle claim, the claimed one again), wait briefly for its claim; with no
    /// claim in time, withdraw the offer — the withdrawal CAS itself offers the
    /// number after — and wait again.
    ///
    /// The offer is stored once, over our own claim; from then on the releaser
    /// writes `serving` only by withdrawal CASes from the unclaimed offer it is
    /// waiting on, so it can never overwrite a claim (state table at
    /// [`TicketNp`]). Storing the offer again at every pass did: right after a
    /// withdrawal the withdrawn acquirer may retake exactly the number just
    /// offered and claim it, and the next pass's store erased that claim and
    /// handed the lock on to a second thread (test
    /// `withdrawn_number_retaken_and_claimed_keeps_its_claim`).
    #[inline(always)]
    fn offer(&self, t: Number) {
        // Release: publishes the critical section to the claimant's Acquire (its
        // claim reads this store, or a withdrawal CAS in its release sequence).
        self.serving.store(t, Ordering::Release);
        // Nobody took number t: the lock is free, and whoever takes t (or
        // claims it idle) has it. Relaxed, and not ordered after our store (no
        // fence: the uncontended unlock stays a store and a load). A number
        // taken just now that this look misses is claimed by its taker, which
        // sees the offer eventually; one whose taker gives up is withdrawn by
        // the next acquirer ("Timed acquisition" at [`TicketNp`]).
        if self.next.load(Ordering::Relaxed) != t {
            self.offer_taken(t);
        }
    }

    /// The rest of [`offer`](Self::offer): number `t`, on offer, was taken.
    #[cold]
    #[inline(never)]
    fn offer_taken(&self, mut t: Number) {
        loop {
            // Waiters are behind t: wake those that parked (the offer, or the
            // withdrawal that made it, moved `serving`).
            self.ring();
            stall::point(stall::TICKET_NP_OFFER_WATCH);
            let mut patience = Patience::start(u64::from(self.patience_ns));
            loop {
                // Relaxed: only the CAS below (or the claimant's) decides. Any
                // value but `t` is `t` claimed, or a later offer (withdrawn by
                // the waiter behind, which then claims its own): either way the
                // lock is someone else's to hand on. (An idle claim of `t` and
                // its release between two of our looks leave `t` on offer
                // again, with its idle claimer waiting for the same claim: one
                // withdrawal CAS wins, and the other returns.)
                if self.serving.load(Ordering::Relaxed) != t {
                    return;
                }
                // The kernel says t's taker is off its CPU (withdraw at once), or
                // the patience for a running or unknown taker is spent.
                if self.give_up_on(t, &mut patience) {
                    break;
                }
                spin_loop();
            }
            // Withdraw t, which offers t + 2 in the same step.
            match self.withdraw(t) {
                Ok(()) => {
                    stall::point(stall::TICKET_NP_WITHDRAWN);
                    // t + 2 is on offer now (the CAS wrote it): never store it.
                    t = t.wrapping_add(2);
                }
                Err(_) => return, // claimed (or withdrawn by a waiter)
            }
            // As in `offer`: nobody took the number now on offer.
            if self.next.load(Ordering::Relaxed) == t {
                return;
            }
        }
    }
}

impl Default for TicketNp {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: mutual exclusion by [2] at `TicketNp`: a thread holds the lock from
// its claim CAS (serving t → t|1, of its own number or an idle claim) to its
// release store (t+2, or t after an idle claim); meanwhile no other write can
// succeed on the claimed word, and no other claim can either.
// The claim's Acquire reads the previous holder's Release offer store or a
// withdrawal CAS after it (Release; the RMWs extend the store's release
// sequence), so each critical section happens before the next.
unsafe impl lock_api::RawMutex for TicketNp {
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(not(loom))]
    const INIT: Self = Self::new();
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(loom)]
    const INIT: Self = panic!("under loom, use TicketNp::new()");

    type Guard = TicketNpGuard;

    #[inline]
    fn lock(&self) -> Self::Guard {
        let token = super::np::NpToken::request();
        if let Some(t) = self.claim_idle() {
            // Claimed in place: the release offers the same number again.
            return TicketNpGuard::new(token, t);
        }
        self.lock_slow(token)
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        let token = super::np::NpToken::request();
        // Only the idle claim: a number on offer to someone else's taken number,
        // or claimed, is not ours; offers to departed takers are withdrawn first.
        if let Some(t) = self.claim_idle().or_else(|| {
            // Relaxed: a look; the claim synchronizes.
            let s = self.serving.load(Ordering::Relaxed);
            (self.withdraw_departed(s) != s)
                .then(|| self.claim_idle())
                .flatten()
        }) {
            return Some(TicketNpGuard::new(token, t));
        }
        // Nothing was held: end the request without the warned thread's yield.
        token.cancel();
        None
    }

    #[inline(always)]
    unsafe fn unlock(&self, guard: Self::Guard) {
        self.offer(guard.offer);
        guard.token.release();
    }

    #[inline]
    fn is_locked(&self) -> bool {
        // Free is `serving == next` (table at `TicketNp`): a claim sets bit 0 of
        // `serving` (tickets are even), and a taken number makes `next` pass an
        // unclaimed offer — reserved for its taker, which is what `try_lock`
        // also refuses — unless every number from the offer to `next` was
        // given up by its taker (departed), which `try_lock` withdraws before
        // its idle claim. Relaxed: a momentary snapshot.
        let n = self.next.load(Ordering::Relaxed);
        let mut s = self.serving.load(Ordering::Relaxed);
        // Departed marks live in TAKERS slots; timed takers leave at most
        // TIMED_BACKLOG numbers (a longer row would not be seen).
        for _ in 0..=TIMED_BACKLOG {
            if s == n {
                return false;
            }
            if s & CLAIMED != 0 || !self.departed(s) {
                return true;
            }
            s = s.wrapping_add(2);
        }
        true
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use lock_api::RawMutex;

    /// Spawns a timed taker on `s`: it reports its `sched` thread id (for a
    /// trap), waits for the go, then runs `take`. Returns its handle, its id
    /// and the go.
    fn spawn_timed_taker<'s, R: Send + 's>(
        s: &'s std::thread::Scope<'s, '_>,
        take: impl FnOnce() -> R + Send + 's,
    ) -> (
        std::thread::ScopedJoinHandle<'s, R>,
        u64,
        std::sync::mpsc::Sender<()>,
    ) {
        let (id, id_rx) = std::sync::mpsc::channel();
        let (go, go_rx) = std::sync::mpsc::channel::<()>();
        let h = s.spawn(move || {
            id.send(sched::current().id()).unwrap();
            let _ = go_rx.recv();
            take()
        });
        (h, id_rx.recv().unwrap(), go)
    }

    /// A waiter that took a number and stalled before claiming it (a preempted
    /// one) is passed over: the releaser withdraws its offer after the patience
    /// and the live waiter behind it gets the lock (001 §3.1).
    #[test]
    fn releaser_withdraws_a_stalled_number() {
        let l = TicketNp::with_patience(Duration::from_micros(200)).unwrap();
        let g = l.lock_numbered();
        // The stalled waiter: takes the next number and never claims it.
        l.next.fetch_add(2, Ordering::Relaxed);
        std::thread::scope(|s| {
            let live = s.spawn(|| {
                let g = l.lock();
                l.unlock_now(g);
            });
            // Let the live waiter queue behind the stalled number.
            while l.next.load(Ordering::Relaxed) != 6 {
                std::hint::spin_loop();
            }
            // SAFETY: `g` came from `l.lock()` on this thread.
            unsafe { l.unlock(g) };
            live.join().unwrap();
        });
        // The stalled number at least; the live waiter's too if it was slower
        // than the patience (under Miri it is): it then took a new number.
        assert!(l.withdrawn() >= 1);
        assert!(!l.is_locked());
        // The lock keeps working; the stalled number is gone for good.
        let g = l.try_lock().expect("free");
        // SAFETY: as above.
        unsafe { l.unlock(g) };
    }

    /// If the lock is free when a number is taken and its taker stalls before
    /// claiming, the waiter behind it withdraws the offer itself.
    #[test]
    fn next_waiter_withdraws_an_idle_offer() {
        let l = TicketNp::with_patience(Duration::from_micros(200)).unwrap();
        l.next.fetch_add(2, Ordering::Relaxed); // took number 0, stalls unclaimed
        let g = l.lock();
        assert_eq!(l.withdrawn(), 1);
        // SAFETY: as above.
        unsafe { l.unlock(g) };
    }

    impl TicketNp {
        /// `lock` by taking a number even when the lock is idle (no idle
        /// claim), for the tests that follow numbers through a hand-over.
        fn lock_numbered(&self) -> TicketNpGuard {
            self.lock_slow(super::super::np::NpToken::request())
        }

        fn unlock_now(&self, g: TicketNpGuard) {
            // SAFETY: test helper; `g` came from this lock on this thread.
            unsafe { lock_api::RawMutex::unlock(self, g) };
        }

        /// A lock whose releaser waits 1 s for a claim and never asks the
        /// kernel: only a departed mark withdraws an offer at once.
        fn patient() -> Self {
            let mut l = Self::with_patience(Duration::from_secs(1)).unwrap();
            l.ask_kernel = false;
            l
        }

        /// An unlocked lock whose next number is `t` (tests of the wrap).
        fn starting_at(t: Number) -> Self {
            let l = Self::patient();
            // Relaxed: not shared yet.
            l.next.store(t, Ordering::Relaxed);
            l.serving.store(t, Ordering::Relaxed);
            l
        }
    }

    /// The issue's interleaving, forced with stall points: A holds; B takes
    /// number 2 and stalls before watching for it; A's patience runs out and it
    /// withdraws 2 (offering 4) — A is stopped right there; B runs, sees its
    /// number withdrawn, takes 4 and claims it; then A goes on. A must not touch
    /// the lock any more (it used to re-store the offer 4 over B's claim and then
    /// hand the lock on), so a third thread cannot get in while B holds it.
    #[test]
    #[cfg_attr(miri, ignore)] // traps park on futexes with timeouts
    fn withdrawn_number_retaken_and_claimed_keeps_its_claim() {
        use crate::sched::stall::Trap;
        use std::sync::atomic::AtomicBool as StdBool;
        use std::sync::mpsc::channel;
        const T: Duration = Duration::from_secs(10);
        let l = TicketNp::new(); // the default patience: the traps make the stall
        let inside = StdBool::new(false);
        std::thread::scope(|s| {
            let (l, inside) = (&l, &inside);
            let (a_id, a_id_rx) = channel();
            let (a_go, a_go_rx) = channel::<()>();
            let a = s.spawn(move || {
                let g = l.lock_numbered(); // ticket 0
                a_id.send(sched::current().id()).unwrap();
                let _ = a_go_rx.recv();
                l.unlock_now(g); // stops at TICKET_NP_WITHDRAWN
            });
            let a_id = a_id_rx.recv().unwrap();
            let (b_id, b_id_rx) = channel();
            let (b_go, b_go_rx) = channel::<()>();
            let (b_held, b_held_rx) = channel::<()>();
            let (b_leave, b_leave_rx) = channel::<()>();
            let b = s.spawn(move || {
                b_id.send(sched::current().id()).unwrap();
                let _ = b_go_rx.recv();
                let g = l.lock(); // number 2 (withdrawn), then 4
                assert!(!inside.swap(true, Ordering::SeqCst), "two threads inside");
                b_held.send(()).unwrap();
                if b_leave_rx.recv().is_ok() {
                    inside.store(false, Ordering::SeqCst);
                    l.unlock_now(g);
                } else {
                    // The test failed (its sender is gone): the lock's state is
                    // not to be trusted, so B leaves without releasing (a
                    // releaser starting from an erased claim may never return).
                    drop(g);
                }
            });
            let b_id = b_id_rx.recv().unwrap();
            let taken = Trap::at(stall::TICKET_NP_TAKEN).thread(b_id).arm();
            let withdrawn = Trap::at(stall::TICKET_NP_WITHDRAWN).thread(a_id).arm();
            b_go.send(()).unwrap();
            taken.wait_hit(T).unwrap(); // B took number 2
            a_go.send(()).unwrap();
            withdrawn.wait_hit(T).unwrap(); // A withdrew 2 and offered 4
            // Relaxed: the trap's hand-off (Release/Acquire) ordered A's CAS before.
            assert_eq!(l.serving.load(Ordering::Relaxed), 4);
            taken.release();
            b_held_rx
                .recv_timeout(T)
                .expect("B retakes 4 and claims it");
            withdrawn.release();
            a.join().unwrap();
            // B holds the lock: nobody else may get it.
            let c = l.try_lock();
            let c_got_it = c.is_some();
            if let Some(g) = c {
                l.unlock_now(g);
            }
            assert!(!c_got_it, "C's try_lock succeeded while B holds the lock");
            assert!(l.is_locked(), "is_locked() is false while B holds the lock");
            b_leave.send(()).unwrap();
            b.join().unwrap();
        });
        assert!(!l.is_locked());
        let g = l.try_lock().expect("free once B released");
        l.unlock_now(g);
    }

    /// A waiter that saw its number offered and stalls before claiming it has the
    /// offer withdrawn by its releaser's patience, and the next number taken and
    /// claimed by C. When B goes on, its claim must fail (the claim is a CAS from
    /// the offer it saw): B takes a new number and waits for C. A claim that
    /// overwrote the word instead (a swap or a store) let B in beside C.
    #[test]
    #[cfg_attr(miri, ignore)] // traps park on futexes with timeouts
    fn an_offer_withdrawn_before_its_claim_cannot_be_claimed() {
        use crate::sched::stall::Trap;
        use std::sync::mpsc::{RecvTimeoutError, channel};
        const T: Duration = Duration::from_secs(10);
        // A patience long enough for B to see its offer before A withdraws it
        // (at 20 µs A sometimes withdrew first, and B stopped claiming 4 instead).
        let mut l = TicketNp::with_patience(Duration::from_millis(50)).unwrap();
        // And no kernel answers: B, which waits for its offer, may be preempted
        // right when A offers it on a loaded machine, and A would pass it over
        // at once (the scenario needs B to see its offer).
        l.ask_kernel = false;
        std::thread::scope(|s| {
            let l = &l;
            let (a_go, a_go_rx) = channel::<()>();
            let (a_holds, a_holds_rx) = channel::<()>();
            let a = s.spawn(move || {
                let g = l.lock_numbered(); // number 0
                a_holds.send(()).unwrap();
                let _ = a_go_rx.recv();
                l.unlock_now(g); // offers 2, waits its patience, withdraws 2 -> 4
            });
            a_holds_rx.recv_timeout(T).unwrap();
            let (b_id, b_id_rx) = channel();
            let (b_go, b_go_rx) = channel::<()>();
            let (b_held, b_held_rx) = channel::<()>();
            let (b_leave, b_leave_rx) = channel::<()>();
            let b = s.spawn(move || {
                b_id.send(sched::current().id()).unwrap();
                let _ = b_go_rx.recv();
                let g = l.lock(); // number 2 (withdrawn before its claim), then 6
                b_held.send(()).unwrap();
                if b_leave_rx.recv().is_ok() {
                    l.unlock_now(g);
                } else {
                    // The test failed: the lock's state is not to be trusted.
                    drop(g);
                }
            });
            let b_id = b_id_rx.recv().unwrap();
            let claiming = Trap::at(stall::TICKET_NP_CLAIMING).thread(b_id).arm();
            b_go.send(()).unwrap();
            // B takes number 2 and watches; A offers it; B is stopped before claiming.
            while l.next.load(Ordering::Relaxed) != 4 {
                std::hint::spin_loop();
            }
            a_go.send(()).unwrap();
            claiming.wait_hit(T).unwrap();
            // Relaxed: the trap's hand-off (Release/Acquire) ordered B's load before.
            assert_eq!(l.next.load(Ordering::Relaxed), 4, "B stopped claiming 2");
            a.join().unwrap(); // A withdrew 2 (nobody claimed it) and left
            // Relaxed: A's join ordered its withdrawal before this load.
            assert_eq!(l.serving.load(Ordering::Relaxed), 4, "offer 4, unclaimed");
            let c = l.try_lock().expect("C takes the offered 4");
            claiming.release();
            let b_got_in = match b_held_rx.recv_timeout(Duration::from_millis(200)) {
                Ok(()) => true,
                Err(RecvTimeoutError::Timeout) => false,
                Err(e) => panic!("B died: {e}"),
            };
            assert!(
                !b_got_in,
                "B claimed an offer withdrawn before its claim while C holds the lock"
            );
            l.unlock_now(c); // hands over to B's new number 6
            b_held_rx.recv_timeout(T).expect("B gets the lock after C");
            b_leave.send(()).unwrap();
            b.join().unwrap();
        });
        assert!(!l.is_locked());
    }

    /// A number taken but not yet claimed holds an offer that reserves the lock:
    /// `try_lock` fails and `is_locked` says so.
    #[test]
    fn an_unclaimed_offer_reserves_the_lock() {
        let l = TicketNp::new();
        l.next.fetch_add(2, Ordering::Relaxed); // took number 0, not yet claimed
        assert!(l.try_lock().is_none());
        assert!(
            l.is_locked(),
            "an offer reserved for a taken number is locked"
        );
    }

    /// The kernel's answer about who took a number: a taker blocked in the
    /// kernel is given up on at once (no patience), a running taker and an
    /// unrecorded number are not, and a slot's entry answers only for its own
    /// number. Without kernel answers, nobody is given up on before the patience.
    #[test]
    #[cfg_attr(miri, ignore)] // the kernel's answers (eBPF) and real threads
    fn a_taker_the_kernel_reports_off_cpu_is_given_up_on_at_once() {
        use std::sync::mpsc::channel;
        use std::time::Instant;
        // Loads the eBPF program (where permitted) before the taker registers.
        let answers = sched::native::preemption_answers();
        let l = TicketNp::new();
        let g = l.lock_numbered(); // number 0, claimed
        let mut never = Patience::start(u64::MAX);
        // This thread runs: as the recorded taker of 4 it is not given up on.
        l.record_taker(4, sched::current());
        assert!(!l.give_up_on(4, &mut never), "a running taker given up on");
        std::thread::scope(|s| {
            let l = &l;
            // Made inside the scope: if an assertion below fails, `leave` is
            // dropped before the scope joins, and the taker stops waiting.
            let (took, took_rx) = channel();
            let (leave, leave_rx) = channel::<()>();
            let h = s.spawn(move || {
                let cb = sched::current();
                // Relaxed: as `acquire`. Number 2, never claimed.
                let t = l.next.fetch_add(2, Ordering::Relaxed);
                l.record_taker(t, cb);
                took.send((t, sched::native::kernel_key(cb))).unwrap();
                let _ = leave_rx.recv(); // blocked in the kernel (a futex)
            });
            let (t, key) = took_rx.recv().unwrap();
            assert_eq!(t, 2);
            match key {
                Some(key) => {
                    let start = Instant::now();
                    while !l.give_up_on(t, &mut never) {
                        let seen = sched::native::kernel_state_at(key);
                        assert!(
                            start.elapsed() < Duration::from_secs(20),
                            "the taker waits in a futex, yet is not given up on; the kernel says {seen:?}"
                        );
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    // The same slot, another number: the entry does not answer.
                    let alias = t.wrapping_add(2 * TAKERS as Number);
                    assert!(
                        !l.give_up_on(alias, &mut never),
                        "an entry answered for {alias}"
                    );
                    assert!(
                        !l.give_up_on(6, &mut never),
                        "an unrecorded number given up on"
                    );
                }
                None => {
                    eprintln!(
                        "no kernel answers here ({:?}): checking the fallback only",
                        answers
                    );
                    assert!(
                        !l.give_up_on(t, &mut never),
                        "given up on without an answer"
                    );
                }
            }
            leave.send(()).unwrap();
            h.join().unwrap();
        });
        // SAFETY: `g` came from `l.lock()` on this thread.
        unsafe { l.unlock(g) }; // number 2 is withdrawn (its taker has left)
        assert!(l.withdrawn() >= 1);
        assert!(!l.is_locked());
    }

    /// A waiter behind a critical section that outlasts `PARK_AFTER_NS` parks
    /// on its number's bell (SLEEPY set), and the release rings the bell (a new
    /// count) before the waiter takes the lock.
    #[test]
    #[cfg_attr(miri, ignore)] // real time: the park patience runs on the clock
    fn a_waiter_behind_a_long_section_parks_and_the_release_rings() {
        use std::time::Instant;
        const T: Duration = Duration::from_secs(20);
        let l = TicketNp::new();
        let g = l.lock_numbered(); // number 0
        // The waiter takes number 2: its bell.
        let bell = &l.bells[1];
        std::thread::scope(|s| {
            let l = &l;
            let w = s.spawn(move || {
                let g = l.lock();
                l.unlock_now(g);
            });
            let start = Instant::now();
            // Relaxed: polling a flag; the waiter's announcement is SeqCst.
            while bell.load(Ordering::Relaxed) & SLEEPY == 0 && start.elapsed() < T {
                std::thread::sleep(Duration::from_millis(1));
            }
            let (seen, next) = (bell.load(Ordering::Relaxed), l.next.load(Ordering::Relaxed));
            // SAFETY: `g` came from `l.lock()` on this thread. Released before
            // the verdict, so that a failure does not leave the waiter stuck.
            unsafe { l.unlock(g) };
            w.join().unwrap();
            assert!(
                seen & SLEEPY != 0,
                "the waiter never parked behind a held lock in {T:?} (bell {seen}, next {next})"
            );
        });
        let v = bell.load(Ordering::Relaxed);
        assert!(
            v >> 1 >= 1,
            "the release did not ring the parked waiter's bell ({v})"
        );
        assert!(!l.is_locked());
    }

    /// The offer arrives exactly as a timed taker gives up: the taker is
    /// stopped at `timed_lock.gave_up` (its deadline already passed while it
    /// waited behind the holder); the holder releases and offers its number,
    /// and is stopped at `ticket_np.offer_watch` before it watches for the
    /// claim (so it can neither see the departed mark nor withdraw: a 1 s
    /// patience and no kernel answers besides). The taker goes on: it marks
    /// its number departed, sees it on offer, and claims it. It must return
    /// the guard (the lock is its), run its section alone, and leave the
    /// lock free; the releaser, let go after, finds the claim and returns. A
    /// departing taker that dropped a won claim leaves the lock held by
    /// nobody, which the final `try_lock` reports. (Without the releaser's
    /// stop, the releaser that sees the departed mark first withdraws the
    /// number, and the taker returns `None`: also correct, and the race the
    /// earlier form of this test left to chance.)
    #[test]
    #[cfg_attr(miri, ignore)] // traps park on futexes with timeouts
    fn a_timed_taker_that_sees_its_offer_on_the_way_out_claims_it() {
        use crate::sched::stall::Trap;
        use lock_api::RawMutexTimed;
        use std::sync::atomic::AtomicBool as StdBool;
        use std::sync::mpsc::channel;
        const T: Duration = Duration::from_secs(20);
        let mut l = TicketNp::with_patience(Duration::from_secs(1)).unwrap();
        l.ask_kernel = false;
        let inside = StdBool::new(false);
        let (got, on_offer) = std::thread::scope(|s| {
            let (l, inside) = (&l, &inside);
            let (holder_id, holder_id_rx) = channel();
            let (held, held_rx) = channel::<()>();
            let (release, release_rx) = channel::<()>();
            // The holder: number 0; its unlock offers 2.
            let holder = s.spawn(move || {
                holder_id.send(sched::current().id()).unwrap();
                let g = l.lock_numbered();
                held.send(()).unwrap();
                let _ = release_rx.recv();
                l.unlock_now(g);
            });
            let watch = Trap::at(stall::TICKET_NP_OFFER_WATCH)
                .thread(holder_id_rx.recv().unwrap())
                .arm();
            held_rx.recv_timeout(T).unwrap();
            let (w, w_id, w_go) = spawn_timed_taker(s, move || {
                // Number 2; the deadline passes while 0 is held.
                // (50 ms: a deadline past already at the call takes no number.)
                let g = l.try_lock_for(Duration::from_millis(50))?;
                assert!(!inside.swap(true, Ordering::SeqCst), "two threads inside");
                inside.store(false, Ordering::SeqCst);
                l.unlock_now(g);
                Some(())
            });
            let gave_up = Trap::at(stall::TIMED_GAVE_UP).thread(w_id).arm();
            w_go.send(()).unwrap();
            gave_up.wait_hit(T).unwrap();
            // The holder releases: 2 is on offer, and the holder stops.
            release.send(()).unwrap();
            watch.wait_hit(T).unwrap();
            // Relaxed: the releaser is stopped; its offer is all that moved.
            let on_offer = l.serving.load(Ordering::Relaxed);
            gave_up.release();
            let got = w.join().unwrap().is_some();
            watch.release();
            holder.join().unwrap();
            (got, on_offer)
        });
        assert_eq!(
            on_offer, 2,
            "the releaser stopped with {on_offer} in `serving`, not its offer of 2"
        );
        let free = l.try_lock();
        let was_free = free.is_some();
        if let Some(g) = free {
            l.unlock_now(g);
        }
        assert!(
            was_free,
            "the lock stayed held after the timed taker returned {}",
            if got { "the guard" } else { "None" }
        );
        assert!(
            got,
            "the timed taker saw its number on offer on its way out, with the releaser stopped, and did not claim it"
        );
    }

    /// The other side of that race: the timed taker has seen its number on
    /// offer on its way out and is stopped before claiming it
    /// (`ticket_np.depart_claiming`); the releaser, seeing the number taken
    /// and its taker departed, withdraws it at once, and the lock is free.
    /// When the taker goes on, its claim must fail (a CAS from the offer it
    /// saw): it returns `None` and the lock stays free. A claim that
    /// overwrote the word (a swap) would leave the lock held by nobody.
    #[test]
    #[cfg_attr(miri, ignore)] // traps park on futexes with timeouts
    fn a_timed_taker_whose_offer_is_withdrawn_on_its_way_out_holds_nothing() {
        use crate::sched::stall::Trap;
        use lock_api::RawMutexTimed;
        use std::sync::mpsc::channel;
        const T: Duration = Duration::from_secs(20);
        // The case under test needs the taker's last look to see 2 on offer
        // before the releaser withdraws it; on a loaded machine the releaser
        // may see the departed mark and withdraw first (the taker then returns
        // at its look, holding nothing: checked too). Rounds until the case
        // under test happened.
        let mut raced = 0u32;
        for _round in 0..20 {
            // A patience far beyond the test: only the departed mark withdraws.
            let mut l = TicketNp::with_patience(Duration::from_secs(1)).unwrap();
            l.ask_kernel = false;
            std::thread::scope(|s| {
                let l = &l;
                let (held, held_rx) = channel::<()>();
                let (release, release_rx) = channel::<()>();
                let holder = s.spawn(move || {
                    let g = l.lock_numbered(); // number 0
                    held.send(()).unwrap();
                    let _ = release_rx.recv();
                    l.unlock_now(g); // offers 2, withdraws it (departed), returns
                });
                held_rx.recv_timeout(T).unwrap();
                let (w, w_id, w_go) = spawn_timed_taker(s, move || {
                    l.try_lock_for(Duration::from_millis(50))
                        .map(|g| l.unlock_now(g))
                });
                let gave_up = Trap::at(stall::TIMED_GAVE_UP).thread(w_id).arm();
                let claiming = Trap::at(stall::TICKET_NP_DEPART_CLAIMING)
                    .thread(w_id)
                    .arm();
                w_go.send(()).unwrap();
                gave_up.wait_hit(T).unwrap(); // number 2 taken, deadline passed
                release.send(()).unwrap();
                // Relaxed: polling; 2 on offer, the releaser waits for its claim.
                let start = std::time::Instant::now();
                while l.serving.load(Ordering::Relaxed) == CLAIMED && start.elapsed() < T {
                    std::hint::spin_loop();
                }
                gave_up.release();
                // The taker stops before its claim (it saw 2 on offer), or it
                // returns (the releaser withdrew 2 before its look).
                let mut hit = false;
                while start.elapsed() < T && !w.is_finished() {
                    if claiming.wait_hit(Duration::from_millis(5)).is_ok() {
                        hit = true;
                        break;
                    }
                }
                assert!(hit || w.is_finished(), "the taker neither claimed nor left");
                holder.join().unwrap(); // the releaser withdrew 2 (departed)
                // Relaxed: the join ordered the withdrawal before.
                assert_eq!(l.serving.load(Ordering::Relaxed), 4, "2 withdrawn, 4 free");
                claiming.release();
                let got = w.join().unwrap();
                assert!(got.is_none(), "the taker claimed a withdrawn offer");
                raced += u32::from(hit);
            });
            assert!(!l.is_locked(), "the lock stayed held after the taker left");
            let g = l.try_lock().expect("free");
            l.unlock_now(g);
            assert_eq!(l.withdrawn(), 1);
            if raced > 0 {
                break;
            }
        }
        assert!(
            raced > 0,
            "in 20 rounds the releaser always withdrew before the taker's look"
        );
    }

    /// The uncontended lock is the idle claim: it takes no number, and its
    /// release puts the same number back on offer, so the lock is left as it
    /// was found (`serving == next`) and the next idle claim works again. A
    /// taken number's release offers the number after it.
    #[test]
    fn an_idle_claim_takes_no_number_and_its_release_reoffers_it() {
        let l = TicketNp::new();
        for _ in 0..3 {
            let g = l.lock();
            // Relaxed: single-threaded.
            assert_eq!(l.next.load(Ordering::Relaxed), 0, "no number taken");
            assert_eq!(l.serving.load(Ordering::Relaxed), CLAIMED, "0 claimed");
            assert!(l.is_locked());
            assert!(l.try_lock().is_none(), "try_lock got a held lock");
            l.unlock_now(g);
            assert_eq!(l.serving.load(Ordering::Relaxed), 0, "0 on offer again");
            assert!(!l.is_locked());
        }
        let g = l.try_lock().expect("free");
        assert_eq!(l.next.load(Ordering::Relaxed), 0, "try_lock took no number");
        l.unlock_now(g);
        let g = l.lock_numbered();
        assert_eq!(l.next.load(Ordering::Relaxed), 2, "number 0 taken");
        l.unlock_now(g);
        assert_eq!(
            l.serving.load(Ordering::Relaxed),
            2,
            "the next number on offer"
        );
        assert_eq!(
            l.withdrawn(),
            0,
            "the release waited for a claim of its own number"
        );
        assert!(!l.is_locked());
        let g = l.lock();
        assert_eq!(l.serving.load(Ordering::Relaxed), 2 | CLAIMED);
        l.unlock_now(g);
    }

    /// A thread that arrives while the lock is held by an idle claim takes the
    /// claimed number itself (nobody had taken it), finds it claimed, marks it
    /// departed and takes the next. The idle claimer's release puts the
    /// claimed number back on offer, sees it taken, and — by the departed
    /// mark, with a patience of 1 s and no kernel answers — withdraws it at
    /// once, which offers the waiter's number. The waiter must never get in
    /// while the lock is held: a taker that claimed its number although it
    /// was claimed (a CAS from the claimed value) would.
    #[test]
    #[cfg_attr(miri, ignore)] // real time: the hand-over is timed
    fn a_taker_of_an_idly_claimed_number_moves_on_and_is_let_in_at_once() {
        use std::sync::mpsc::{RecvTimeoutError, channel};
        use std::time::Instant;
        const T: Duration = Duration::from_secs(20);
        let mut l = TicketNp::with_patience(Duration::from_secs(1)).unwrap();
        l.ask_kernel = false;
        let g = l.lock(); // idle claim of 0
        std::thread::scope(|s| {
            let l = &l;
            let (held, held_rx) = channel::<()>();
            let w = s.spawn(move || {
                let g = l.lock(); // takes 0 (claimed), then 2
                held.send(()).unwrap();
                l.unlock_now(g);
            });
            let start = Instant::now();
            // Relaxed: polling for the waiter's second number.
            while l.next.load(Ordering::Relaxed) != 4 && start.elapsed() < T {
                std::hint::spin_loop();
            }
            assert_eq!(
                l.next.load(Ordering::Relaxed),
                4,
                "the waiter took 0, then 2"
            );
            match held_rx.recv_timeout(Duration::from_millis(100)) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(()) => panic!("the waiter got in while the idle claim held the lock"),
                Err(e) => panic!("the waiter died: {e}"),
            }
            let start = Instant::now();
            l.unlock_now(g);
            let took = start.elapsed();
            held_rx.recv_timeout(T).expect("the waiter gets the lock");
            w.join().unwrap();
            assert!(
                took < Duration::from_millis(500),
                "the release waited {took:?} for the claim of a number whose taker had moved on"
            );
        });
        assert_eq!(l.withdrawn(), 1, "number 0 withdrawn");
        assert!(!l.is_locked());
    }

    /// A departed taker's number on offer with nobody behind it (the releaser
    /// looked at `next` before the take: no fence orders the two) does not
    /// keep the lock: `is_locked` counts it free, and `try_lock` withdraws it
    /// and claims the lock — through a row of departed numbers too.
    #[test]
    fn offers_of_departed_takers_do_not_keep_the_lock() {
        let l = TicketNp::new();
        for _ in 0..3 {
            // Relaxed: single-threaded. A taker takes the number on offer …
            let t = l.next.fetch_add(2, Ordering::Relaxed);
            // … and gives up on it (a timed taker past its deadline).
            l.mark_departed(t);
        }
        assert!(!l.is_locked(), "three departed numbers keep the lock");
        let g = l.try_lock().expect("try_lock withdraws departed offers");
        assert_eq!(l.withdrawn(), 3);
        assert_eq!(l.serving.load(Ordering::Relaxed), 6 | CLAIMED);
        l.unlock_now(g);
        assert!(!l.is_locked());
        // One live taker among them keeps it reserved.
        let t = l.next.fetch_add(2, Ordering::Relaxed);
        l.mark_departed(t);
        l.next.fetch_add(2, Ordering::Relaxed); // a live taker, not yet claiming
        assert!(l.is_locked());
        assert!(l.try_lock().is_none(), "try_lock took a live taker's offer");
    }

    /// A timed attempt whose deadline has already passed (`try_lock_for(0)`,
    /// `try_lock_until` an instant gone by) on a held lock gives up without
    /// taking a number: a number it took would be left to the others to
    /// withdraw, one per attempt, and a storm of such attempts buries the
    /// lock under numbers nobody will claim.
    #[test]
    fn a_zero_or_past_timeout_takes_no_number() {
        use lock_api::RawMutexTimed;
        let l = TicketNp::new();
        let past = Instant::now();
        for numbered in [false, true] {
            let g = if numbered {
                l.lock_numbered()
            } else {
                l.lock()
            };
            // Relaxed: single-threaded.
            let before = l.next.load(Ordering::Relaxed);
            for _ in 0..if cfg!(miri) { 10 } else { 1000 } {
                assert!(l.try_lock_for(Duration::ZERO).is_none(), "got a held lock");
                assert!(l.try_lock_until(past).is_none(), "got a held lock");
            }
            let after = l.next.load(Ordering::Relaxed);
            assert_eq!(
                after.wrapping_sub(before) / 2,
                0,
                "attempts with a zero or past timeout took {} numbers on a held lock",
                after.wrapping_sub(before) / 2
            );
            l.unlock_now(g);
            assert!(!l.is_locked());
            let g = l.try_lock().expect("free");
            l.unlock_now(g);
        }
        assert_eq!(l.withdrawn(), 0, "nothing to withdraw");
    }

    /// Timed attempts that each take a number and give up on it (a short
    /// timeout behind a holder) must not pile numbers up: however many there
    /// are, the numbers outstanding stay within the bound at which every
    /// departed mark is still readable, so the release withdraws them at once
    /// and the lock is free again.
    #[test]
    #[cfg_attr(miri, ignore)] // real time: 2,000 timeouts
    fn timed_attempts_behind_a_holder_leave_a_bounded_backlog() {
        use lock_api::RawMutexTimed;
        let l = TicketNp::patient();
        let g = l.lock();
        for _ in 0..2000 {
            assert!(l.try_lock_for(Duration::from_micros(1)).is_none());
        }
        // Relaxed: single-threaded.
        let out = l
            .next
            .load(Ordering::Relaxed)
            .wrapping_sub(l.serving.load(Ordering::Relaxed) & !CLAIMED)
            / 2;
        assert!(
            out <= TAKERS as _,
            "2000 timed attempts behind a holder left {out} numbers outstanding (at most {TAKERS} keep their departed marks)"
        );
        let start = Instant::now();
        l.unlock_now(g);
        let took = start.elapsed();
        assert!(!l.is_locked(), "free after the release");
        let g = l.try_lock().expect("free");
        l.unlock_now(g);
        assert!(
            took < Duration::from_millis(500),
            "the release took {took:?} to withdraw the departed numbers (a patience of 1 s each unmarked)"
        );
    }

    /// A taker that sees its number on offer and loses the claim CAS to an
    /// idle claim (whose look at `next` came before the take) gives the
    /// number up and takes another; the claimed number comes back on offer
    /// at the idle claimer's release, so the taker must mark it departed, or
    /// the releaser waits a whole patience for a claim that never comes. The
    /// taker is stopped at `ticket_np.claiming` (it saw 0 on offer); the test
    /// makes the idle claim of 0 (the CAS `claim_idle` makes) meanwhile.
    #[test]
    #[cfg_attr(miri, ignore)] // traps park on futexes with timeouts
    fn a_claim_lost_to_an_idle_claim_marks_the_number_departed() {
        use crate::sched::stall::Trap;
        use std::sync::mpsc::channel;
        const T: Duration = Duration::from_secs(20);
        let l = TicketNp::patient();
        std::thread::scope(|s| {
            let l = &l;
            let (held, held_rx) = channel::<()>();
            let (w, w_id, w_go) = spawn_timed_taker(s, move || {
                let g = l.lock_numbered(); // 0 (lost to the idle claim), then 2
                held.send(()).unwrap();
                l.unlock_now(g);
            });
            let claiming = Trap::at(stall::TICKET_NP_CLAIMING).thread(w_id).arm();
            w_go.send(()).unwrap();
            claiming.wait_hit(T).unwrap(); // number 0 taken, seen on offer
            // The idle claim of 0 by a thread that looked at `next` before the
            // take. Acquire: as `claim_idle`.
            l.serving
                .compare_exchange(0, CLAIMED as _, Ordering::Acquire, Ordering::Relaxed)
                .expect("0 on offer, unclaimed");
            claiming.release();
            let start = Instant::now();
            // Relaxed: polling for the taker's second number.
            while l.next.load(Ordering::Relaxed) != 4 && start.elapsed() < T {
                std::hint::spin_loop();
            }
            assert_eq!(
                l.next.load(Ordering::Relaxed),
                4,
                "the taker took 0, then 2"
            );
            let marked = l.departed(0);
            // The idle claimer's release: 0 on offer again.
            let start = Instant::now();
            l.offer(0);
            let took = start.elapsed();
            held_rx.recv_timeout(T).expect("the taker gets the lock");
            w.join().unwrap();
            assert!(
                marked,
                "the taker whose claim of 0 lost to an idle claim took 2 without marking 0 departed"
            );
            assert!(
                took < Duration::from_millis(500),
                "the idle claimer's release waited {took:?} for a claim of 0 that never comes"
            );
        });
        assert!(!l.is_locked());
    }

    /// A backlog of 2^30 numbers (what ~160 s of abandoned timed attempts
    /// took when numbers were 32-bit and timed takers unbounded; unreachable
    /// now) must not turn a timed attempt into a livelock: it must return by
    /// its deadline. With 32-bit numbers the distance to `serving` read
    /// negative there ("withdrawn"), and the attempt took number after number
    /// without ever looking at its deadline; now the attempt refuses to join
    /// such a backlog, and the distance is 64-bit.
    #[test]
    #[cfg_attr(miri, ignore)] // real time
    fn a_timed_attempt_facing_a_huge_backlog_returns_by_its_deadline() {
        use lock_api::RawMutexTimed;
        use std::sync::mpsc::{RecvTimeoutError, channel};
        const T: Duration = Duration::from_secs(10);
        let l: &'static TicketNp = Box::leak(Box::new(TicketNp::new()));
        // Relaxed: before the attempt's thread starts.
        l.next.store(((1u64 << 31) + 2) as _, Ordering::Relaxed);
        let (done, done_rx) = channel();
        std::thread::spawn(move || {
            let start = Instant::now();
            let got = l
                .try_lock_for(Duration::from_millis(10))
                .map(|g| l.unlock_now(g));
            let _ = done.send((got.is_some(), start.elapsed()));
        });
        match done_rx.recv_timeout(T) {
            Ok((got, took)) => assert!(
                !got && took < Duration::from_secs(5),
                "try_lock_for(10 ms) returned {} after {took:?} behind 2^30 numbers nobody claims",
                if got { "the lock" } else { "None" }
            ),
            Err(RecvTimeoutError::Timeout) => panic!(
                "try_lock_for(10 ms) behind 2^30 outstanding numbers had not returned after {T:?} (next {})",
                l.next.load(Ordering::Relaxed)
            ),
            Err(e) => panic!("the attempt died: {e}"),
        }
    }

    /// A taker whose number was passed while it was away must see it
    /// withdrawn however far `serving` went — here exactly 2³² numbers' worth
    /// of tickets, where a 32-bit distance reads 0 ("mine, on offer") and the
    /// taker would claim the offer of the number's current taker. The taker
    /// is stopped at `ticket_np.taken` with number 0; meanwhile `serving`
    /// moves to 2³² (offered to a taker that is stopped too: nobody claims it).
    /// It must take a new number, withdraw the stalled offer after the
    /// patience, and claim its own.
    #[test]
    #[cfg_attr(miri, ignore)] // traps park on futexes with timeouts
    fn a_taker_passed_by_2_pow_32_tickets_takes_a_new_number() {
        use crate::sched::stall::Trap;
        const T: Duration = Duration::from_secs(20);
        let mut l = TicketNp::with_patience(Duration::from_millis(1)).unwrap();
        l.ask_kernel = false;
        let far: Number = 1 << 32;
        std::thread::scope(|s| {
            let l = &l;
            let (w, w_id, w_go) = spawn_timed_taker(s, move || {
                let g = l.lock_numbered(); // 0, passed; then far + 2
                // Relaxed: our own claim.
                let held = l.serving.load(Ordering::Relaxed);
                if held == (far + 2) | CLAIMED {
                    l.unlock_now(g);
                } else {
                    // The wrong number: its release would offer a number
                    // far behind `serving` (the test fails on `held`).
                    drop(g);
                }
                held
            });
            let taken = Trap::at(stall::TICKET_NP_TAKEN).thread(w_id).arm();
            w_go.send(()).unwrap();
            taken.wait_hit(T).unwrap(); // number 0 taken
            // Relaxed: the taker is stopped. 2^32 tickets later: `far` on
            // offer, taken by someone who does not claim it.
            l.serving.store(far, Ordering::Relaxed);
            l.next.store(far + 2, Ordering::Relaxed);
            taken.release();
            let held = w.join().unwrap();
            assert_eq!(
                held,
                (far + 2) | CLAIMED,
                "the taker of 0, passed by 2^32 tickets, held {held:#x}: the offer of {far:#x} is another taker's"
            );
        });
        assert_eq!(l.withdrawn(), 1, "the stalled offer of {far:#x} withdrawn");
    }

    /// Numbers wrap: across 2³² (the taker slots carry the low 32 bits of a
    /// number) and across 2⁶⁴ (the counters themselves), the hand-over, the
    /// idle claim, timed takers that leave numbers behind a holder, and
    /// `is_locked`/`try_lock` work as anywhere else; two threads, one of
    /// them timed, keep mutual exclusion across the wrap.
    #[test]
    #[cfg_attr(miri, ignore)] // real time: timeouts
    fn numbers_wrap() {
        use lock_api::RawMutexTimed;
        use std::sync::atomic::AtomicBool as StdBool;
        for start in [(1u64 << 32) - 8, 0u64.wrapping_sub(8)] {
            let l = TicketNp::starting_at(start);
            for _ in 0..6 {
                let g = l.lock_numbered();
                assert!(l.is_locked());
                assert!(l.try_lock_for(Duration::from_micros(1)).is_none());
                l.unlock_now(g); // withdraws the departed number at once
                assert!(!l.is_locked(), "held after a release near {start:#x}");
                let g = l.try_lock().expect("free");
                l.unlock_now(g);
            }
            // Relaxed: single-threaded so far.
            let n = l.next.load(Ordering::Relaxed);
            assert!(
                slot_tag(n) < slot_tag(start),
                "{n:#x}: the numbers did not cross a multiple of 2^32 from {start:#x}"
            );
            let inside = StdBool::new(false);
            std::thread::scope(|s| {
                for timed in [false, true] {
                    let (l, inside) = (&l, &inside);
                    s.spawn(move || {
                        for _ in 0..200 {
                            let g = if timed {
                                match l.try_lock_for(Duration::from_micros(50)) {
                                    Some(g) => g,
                                    None => continue,
                                }
                            } else {
                                l.lock_numbered()
                            };
                            assert!(!inside.swap(true, Ordering::SeqCst), "two inside");
                            inside.store(false, Ordering::SeqCst);
                            l.unlock_now(g);
                        }
                    });
                }
            });
            assert!(!l.is_locked(), "held after the threads left");
        }
    }

    #[test]
    fn patience_is_validated() {
        let e = TicketNp::with_patience(Duration::from_nanos(5)).unwrap_err();
        assert!(e.to_string().contains("100 ns ..= 1 s"), "{e}");
        assert!(TicketNp::with_patience(Duration::from_secs(2)).is_err());
    }
}
