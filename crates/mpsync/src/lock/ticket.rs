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
//! block's depth); the wait is not.
//!
//! Layout: [`Ticket`] keeps both counters in one cache line (004 found that
//! faster); [`TicketSplit`] pads them onto separate lines, for measuring the
//! difference. Both are pointer-free and `#[repr(C)]`: they work when placed in
//! memory shared by several processes (see [`super::ProcessShared`]).
//!
//! Uses `sched` (Ticket-np only): `request/release_no_preempt`,
//! `pause/resume_no_preempt`, `yield_now`. Progress: plain ticket is FIFO and
//! starvation-free; Ticket-np gives up FIFO for preempted waiters.
//!
//! ```
//! use mpsync::{Mutex, lock::{Ticket, TicketNp, TicketSplit}};
//! let a: Mutex<Ticket, u32> = Mutex::new(1);
//! let b: Mutex<TicketNp, u32> = Mutex::new(2);
//! let c: Mutex<TicketSplit, u32> = Mutex::new(3);
//! let outer = b.lock();
//! assert_eq!(*a.lock() + *outer + *c.lock(), 6); // nested under a no-preempt lock
//! ```

use std::marker::PhantomData;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::sched::{self, ContextBlock, Wait, Waiter, stall};
use crate::sync::{AtomicU32, AtomicU64, Ordering, spin_loop};
use crate::util::clock::Patience;

/// Pause per waiter ahead, in `spin_loop` hints (≈ 0.1–0.5 µs on current x86).
const PROPORTIONAL_SPINS: u32 = 32;

/// Signed distance from `a` to `b` on the wrapping ticket circle.
#[inline]
fn ahead(mine: u32, serving: u32) -> i32 {
    mine.wrapping_sub(serving) as i32
}

/// Waits about `n` positions' worth (001 §3.1 proportional backoff). Under loom
/// a single model yield, as [`crate::util::backoff::Backoff::spin`] is: every
/// spin there is a scheduling point, and 32 per position made the models that
/// lock twice too large to finish.
#[inline]
fn proportional_pause(n: u32) {
    #[cfg(loom)]
    {
        let _ = (n, PROPORTIONAL_SPINS);
        spin_loop();
    }
    #[cfg(not(loom))]
    for _ in 0..n.saturating_mul(PROPORTIONAL_SPINS).min(1 << 16) {
        spin_loop();
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
const CLAIMED: u32 = 1;

/// How long a releaser waits for the next ticket's claim before withdrawing the
/// offer (the acquirer polls continuously once it is next, so a running one
/// claims within a microsecond).
pub const TICKET_NP_DEFAULT_PATIENCE: Duration = Duration::from_micros(20);

/// Waiters at most this many positions from the offered number spin (natively);
/// farther ones sleep on their wake slot, and the thread that decides number
/// `t` (claims or withdraws it) wakes the sleeper of `t + 2 * SPINNERS` — one
/// step ahead of its turn (issue 13 §2). Under loom one position.
const SPINNERS: i32 = 1;

/// Wake slots of [`TicketNp`]: a sleeper of number `t` sleeps on slot
/// `(t / 2) % WAKE_SLOTS`. Two sleepers share a slot only when more than this
/// many threads wait; they are then woken together (and the one not due
/// sleeps again).
const WAKE_SLOTS: usize = if cfg!(loom) { 4 } else { 64 };

/// A wake slot: `sequence << 16 | sleepers`. A sleeper adds one to `sleepers`
/// before its last look at `serving` and sleeps while the word is unchanged; a
/// waker zeroes `sleepers` and advances the sequence in one CAS, then wakes
/// every sleeper of the slot.
const SLEEPERS: u32 = 0xFFFF;
const SEQUENCE_ONE: u32 = 1 << 16;

/// How long a waiter that is close to its turn sleeps at most (natively) when
/// its patience ran out with nothing moving ahead of it (the holder presumed
/// preempted). Its wake-up normally comes from the releaser that offers it the
/// lock; the bound covers a releaser that looked at `next` a moment too early
/// to see it arrive (`release` reads it before its offer store, unfenced, to
/// keep the uncontended path free of a fence).
const NEAR_SLEEP: Duration = Duration::from_millis(1);

/// The scheduler-conscious ticket lock (001 §3.1, "Ticket-np").
///
/// Tickets are 31-bit numbers: `next` counts in steps of 2 and `serving` holds
/// `ticket | CLAIMED`, so the offer and its claim are one word and a single CAS
/// decides between the acquirer's claim and the releaser's withdrawal.
///
/// | `serving` | `next`  | state                                     | left by                                                       |
/// |-----------|---------|-------------------------------------------|---------------------------------------------------------------|
/// | `t`       | `== t`  | free: offered to whoever takes `t` next   | the taker's claim (`t → t\|1`); or a claim `t → t\|1` without a number (the uncontended path) |
/// | `t`       | `> t`   | reserved: offered to the taker of `t`     | its claim; or a withdrawal CAS `t → t+2` by the releaser (after its patience) or by the taker of `t+2` (idle lock, see `acquire`) |
/// | `t\|1`    | any     | held (by the taker of `t`, or by a thread that claimed `t` without a number while `next == t`) | its release: the store `t+2`, or `t` if still `next == t` (the only plain stores) |
///
/// \[1\] `serving` grows by every step but one: claim +1, release +1,
/// withdrawal +2; the release of a holder that took no number while nobody
/// took one since stores `t` back (−1: the lock is free again, offered as before).
/// \[2\] Every write but the holder's release store is a CAS from an unclaimed
/// (even) value, so a claimed word changes only by its holder's release.
/// \[3\] So one thread holds at a time: from its claim to its release store.
/// The claim `t → t|1` is attempted by the taker of `t` (numbers are unique:
/// `fetch_add`), or, on the uncontended path, by a thread that found `next ==
/// serving == t` (then nobody is owed `t`; a thread that takes `t` meanwhile
/// finds it claimed and takes a new number, remembering `t` as *abandoned*: if
/// the offer `t` comes back unclaimed, it withdraws it at once). Wrap-around
/// needs 2³⁰ hand-overs while one thread stalls between its read and its CAS.
///
/// # Waiting (issue 13 §2)
///
/// Under the emulated pseudo-scheduler a waiter waits as in the paper:
/// proportional backoff, giving its processor away when the scheduler warns it.
/// Natively it waits through [`sched::Waiter`]: a waiter at most `SPINNERS` (one)
/// positions from the offer spins; farther ones sleep on a wake slot (a futex
/// word in the lock, shared-memory safe), woken one step ahead of their turn by
/// the thread that decides the number ahead; a spinner whose patience runs out
/// with nothing moving (a preempted holder) sleeps too. A releaser whose offer
/// goes to a sleeping waiter wakes it and waits no longer than for any other
/// (its patience): only a running thread can claim, and the lock is never
/// held by a sleeping one. The lock keeps no record
/// of its holder (it is pointer-free, for memory shared between processes), so
/// spinners park on their patience, not on the kernel's answer about the holder.
#[derive(Debug)]
#[repr(C)]
pub struct TicketNp {
    next: AtomicU32,
    serving: AtomicU32,
    /// Offers withdrawn so far (diagnostic).
    withdrawn: AtomicU64,
    patience_ns: u32,
    /// Wake slots (see [`WAKE_SLOTS`]), on their own cache lines: sleepers'
    /// announcements do not disturb the line every acquirer reads.
    slots: CachePadded<[AtomicU32; WAKE_SLOTS]>,
}

/// Guard state of [`TicketNp`]: the no-preempt request, carrying the thread's
/// context block, so that a critical section looks it up once. Not `Send`.
#[derive(Debug)]
#[must_use = "a TicketNp guard is given back to unlock"]
pub struct TicketNpGuard {
    cb: &'static ContextBlock,
    _not_send: PhantomData<*mut ()>,
}

/// The Dekker step between a sleeper (announce on its slot, then read
/// `serving`) and a decider (change `serving`, then read the slot): both are
/// SeqCst operations, which order them in the one total order — nothing more is
/// needed. Loom treats SeqCst accesses as AcqRel (a documented limitation) but
/// models SeqCst fences, so under loom the same order is stated by a fence.
#[inline(always)]
fn dekker_fence() {
    #[cfg(loom)]
    crate::sync::fence(Ordering::SeqCst);
}

impl TicketNp {
    /// An unlocked lock with the default patience (20 µs).
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            next: AtomicU32::new(0),
            serving: AtomicU32::new(0),
            withdrawn: AtomicU64::new(0),
            patience_ns: TICKET_NP_DEFAULT_PATIENCE.as_nanos() as u32,
            slots: CachePadded::new([const { AtomicU32::new(0) }; WAKE_SLOTS]),
        }
    }

    /// An unlocked lock with the default patience (20 µs).
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            next: AtomicU32::new(0),
            serving: AtomicU32::new(0),
            withdrawn: AtomicU64::new(0),
            patience_ns: TICKET_NP_DEFAULT_PATIENCE.as_nanos() as u32,
            slots: CachePadded::new(std::array::from_fn(|_| AtomicU32::new(0))),
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

    /// Offers withdrawn from preempted, sleeping (or slow) acquirers since creation.
    pub fn withdrawn(&self) -> u64 {
        // Relaxed: a statistic.
        self.withdrawn.load(Ordering::Relaxed)
    }

    /// The wake slot of number `t`.
    #[inline]
    fn slot(&self, t: u32) -> &AtomicU32 {
        &self.slots[(t / 2) as usize % WAKE_SLOTS]
    }

    /// Claims the offer on a free lock (nobody took its number) without taking
    /// a number — the uncontended path: one RMW, as the plain ticket lock's
    /// `fetch_add`. Like every decision on a number, wakes the sleeper one
    /// step ahead (normally there is none: nobody waits on a free lock).
    #[inline]
    fn claim_free(&self) -> bool {
        // Relaxed (both): a look; the claim CAS decides and synchronizes.
        let s = self.serving.load(Ordering::Relaxed);
        if s & CLAIMED != 0 || self.next.load(Ordering::Relaxed) != s {
            return false;
        }
        // SeqCst: a decision, before the look at the slot (Dekker with
        // `sleep`); its Acquire orders the critical section after the previous
        // holder's release store (or the withdrawal CAS in its release sequence).
        if self
            .serving
            .compare_exchange(s, s | CLAIMED, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        self.wake_ahead(s);
        true
    }

    /// Takes numbers until one is served: returns with the lock claimed.
    fn acquire(&self, cb: &ContextBlock) {
        let native = !sched::emulated::is_attached(cb);
        // Emulated only: the no-preempt request is paused while we wait.
        let mut paused = false;
        let mut pause_tried = false;
        // A number we took and found claimed by a thread holding no number.
        let mut abandoned: Option<u32> = None;
        'ticket: loop {
            // Relaxed: as in the plain ticket lock; the claim CAS synchronizes.
            let mine = self.next.fetch_add(2, Ordering::Relaxed);
            stall::point(stall::TICKET_NP_TAKEN);
            // The offer we watch when we are next in line, and since when.
            let mut watched: Option<(u32, Patience)> = None;
            let mut waiter = Waiter::new();
            let mut last: Option<u32> = None;
            loop {
                // SeqCst: orders this look after a sleeper's announcement
                // (`sleep`); otherwise Acquire: pairs with the releaser's
                // Release offer.
                let s = self.serving.load(Ordering::SeqCst);
                let d = ahead(mine, s & !CLAIMED) / 2;
                if d < 0 || (d == 0 && s & CLAIMED != 0) {
                    // Our number was withdrawn, or (with `d == 0` claimed)
                    // claimed by a thread that took no number (or wrapped
                    // past): take a new one.
                    if d == 0 {
                        abandoned = Some(mine);
                    }
                    continue 'ticket;
                }
                if d == 0 {
                    if paused {
                        // Unpreemptable before claiming, so a claimed lock is
                        // never held by a preempted thread (the kernel may still
                        // withdraw our processor after the extension bound).
                        cb.resume_no_preempt();
                        paused = false;
                        pause_tried = false;
                    }
                    stall::point(stall::TICKET_NP_CLAIMING);
                    // SeqCst: the decision on `mine` comes before the look at
                    // the slot we wake (`wake_ahead`; Dekker with `sleep`); its
                    // Acquire orders the critical section after the releaser's.
                    if self
                        .serving
                        .compare_exchange(s, s | CLAIMED, Ordering::SeqCst, Ordering::Relaxed)
                        .is_ok()
                    {
                        self.wake_ahead(mine);
                        return;
                    }
                    continue; // withdrawn just now: the next look says so
                }
                if !native && !pause_tried {
                    // While waiting, let the scheduler preempt us (we hold no lock).
                    paused = cb.pause_no_preempt();
                    pause_tried = true;
                }
                if d == 1 && s & CLAIMED == 0 {
                    // We are next, and the number ahead of us is on offer but not
                    // claimed: its taker may be preempted between taking it and
                    // claiming (an idle lock's releaser did not wait for it). If
                    // it stays unclaimed past the patience — at once if it is
                    // the number we abandoned ourselves — withdraw it.
                    let due = if abandoned == Some(s) {
                        true
                    } else {
                        match &mut watched {
                            Some((w, p)) if *w == s => p.exhausted(),
                            _ => {
                                watched = Some((s, Patience::start(u64::from(self.patience_ns))));
                                false
                            }
                        }
                    };
                    if due {
                        self.withdraw(s);
                    }
                    spin_loop();
                    continue;
                }
                if !native {
                    if paused && cb.warned() {
                        // The scheduler wanted our processor while we only wait.
                        sched::yield_now();
                    }
                    proportional_pause(d as u32);
                    continue;
                }
                if last != Some(s) {
                    // The line moved: progress, the patience starts over.
                    last = Some(s);
                    waiter.restart();
                }
                if d > SPINNERS {
                    self.sleep(mine, true);
                    waiter.restart();
                } else if waiter.spin(None) == Wait::Park {
                    // Nothing moved ahead of us for the whole patience: the
                    // holder is presumably preempted. Sleep; the releaser that
                    // offers us the lock wakes us and gives us its patience to
                    // claim (else it withdraws our number: we take a new one).
                    self.sleep(mine, false);
                    waiter.restart();
                }
            }
        }
    }

    /// Sleeps on `mine`'s wake slot while the wait goes on: `far`, while more
    /// than [`SPINNERS`] positions are ahead (woken by whoever decides the
    /// number [`SPINNERS`] ahead of ours); else while our number is not on
    /// offer (for at most [`NEAR_SLEEP`]; the releaser that offers it wakes us).
    fn sleep(&self, mine: u32, far: bool) {
        let w = self.slot(mine);
        // SeqCst: the announcement precedes our look at `serving` in the total
        // order (Dekker with `wake_slot`'s look after a decision).
        let v = w.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
        dekker_fence();
        // SeqCst: see above.
        let s = self.serving.load(Ordering::SeqCst);
        let d = ahead(mine, s & !CLAIMED) / 2;
        let wait_on = if far {
            d > SPINNERS
        } else {
            d > 1 || (d == 1 && s & CLAIMED != 0)
        };
        if wait_on {
            stall::point(stall::WAITER_PARK);
            let timeout = (!far).then_some(NEAR_SLEEP);
            if sched::park_shared(w, v, timeout) == sched::ParkResult::Woken
                // Relaxed: a waker's CAS moved the sequence, and zeroed the
                // count we added; nothing to take back.
                && w.load(Ordering::Relaxed) & !SLEEPERS != v & !SLEEPERS
            {
                return;
            }
        }
        // We do not sleep (any more): take our announcement back, unless a
        // waker already cleared it with the sequence it advanced.
        let mut cur = v;
        // Relaxed (both): the word is only a sleepers' count; nothing is
        // published through it.
        while cur & !SLEEPERS == v & !SLEEPERS && cur & SLEEPERS != 0 {
            match w.compare_exchange(cur, cur - 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(now) => cur = now,
            }
        }
    }

    /// Wakes every sleeper of `t`'s slot, if any announced itself.
    #[inline]
    fn wake_slot(&self, t: u32) {
        let w = self.slot(t);
        // SeqCst: after the decision on `serving` the caller just made (Dekker
        // with `sleep`).
        let mut v = w.load(Ordering::SeqCst);
        while v & SLEEPERS != 0 {
            // Relaxed: the futex wake is the hand-off; the sleepers re-read
            // `serving` (SeqCst) after waking.
            match w.compare_exchange(
                v,
                (v & !SLEEPERS).wrapping_add(SEQUENCE_ONE),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    stall::point(stall::WAITER_WAKE);
                    sched::unpark_shared_all(w);
                    return;
                }
                Err(now) => v = now,
            }
        }
    }

    /// Number `t` was just decided (claimed or withdrawn): wake the sleeper
    /// [`SPINNERS`] positions behind it, one step ahead of its turn.
    #[inline]
    fn wake_ahead(&self, t: u32) {
        dekker_fence();
        self.wake_slot(t.wrapping_add(2 * SPINNERS as u32));
    }

    /// Withdraws the unclaimed offer `t` (which offers `t + 2`); returns
    /// whether this CAS did it. Wakes `t`'s taker if it sleeps (it takes a new
    /// number) and, as the decider of `t`, the sleeper one step ahead.
    fn withdraw(&self, t: u32) -> bool {
        // SeqCst: a decision, before the looks at the slots (Dekker with
        // `sleep`); Release: the claimant of t + 2 reads this CAS (a
        // release-sequence member of the previous offer store anyway).
        if self
            .serving
            .compare_exchange(t, t.wrapping_add(2), Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        stall::point(stall::TICKET_NP_WITHDRAWN);
        // Relaxed: a statistic.
        self.withdrawn.fetch_add(1, Ordering::Relaxed);
        dekker_fence();
        self.wake_slot(t);
        self.wake_ahead(t);
        true
    }

    /// The releaser's side, holding `claimed` (`t|1`): if nobody took `t`
    /// (a holder that took no number, and nobody came since), offer `t` again;
    /// else offer the number after ours and wait briefly for its claim (waking
    /// its taker if it sleeps). With no claim in time, withdraw the offer (the
    /// withdrawal CAS itself offers the number after) and wait again.
    ///
    /// The offer is stored once, over our own claim; from then on the releaser
    /// writes `serving` only by withdrawal CASes from the unclaimed offer it is
    /// waiting on, so it can never overwrite a claim (state table at
    /// [`TicketNp`]). Storing the offer again at every pass did: right after a
    /// withdrawal the withdrawn acquirer may retake exactly the number just
    /// offered and claim it, and the next pass's store erased that claim and
    /// handed the lock on to a second thread (test
    /// `withdrawn_number_retaken_and_claimed_keeps_its_claim`).
    #[inline]
    fn release(&self, claimed: u32) {
        let mine = claimed & !CLAIMED;
        // Relaxed: a look; a taker that comes after it finds the offer itself
        // (it polls `serving`), and the waiter behind it covers a stalled one.
        let n = self.next.load(Ordering::Relaxed);
        if n == mine {
            // We took no number and nobody took `mine`: free it as it was.
            // Release: publishes the critical section to the next claim.
            self.serving.store(mine, Ordering::Release);
            return;
        }
        let t = mine.wrapping_add(2);
        // Release: publishes the critical section to the claimant's Acquire (its
        // claim reads this store, or a withdrawal CAS in its release sequence).
        self.serving.store(t, Ordering::Release);
        if n != t {
            self.hand_over(t);
        }
    }

    /// [`release`](Self::release) after the offer `t` was stored and some
    /// number after ours was taken: wait for `t`'s claim, withdraw as needed.
    #[cold]
    fn hand_over(&self, mut t: u32) {
        // SeqCst: our offer store comes before the looks at the slots below in
        // the total order (Dekker with `sleep`: a taker of `t` that announced
        // it sleeps after we looked would have read our offer and not slept).
        crate::sync::fence(Ordering::SeqCst);
        loop {
            // Nobody holds number t: the lock is free, and whoever takes t claims
            // it (the waiter behind watches that claim, see `acquire`). Relaxed:
            // a hint; an acquirer that took t sees the offer eventually either way.
            if self.next.load(Ordering::Relaxed) == t {
                return;
            }
            // If t's taker sleeps (it ran out of patience behind a preempted
            // holder), wake it: it may claim if it gets its processor back
            // within our patience. It is never waited on beyond that.
            self.wake_slot(t);
            let mut patience = Patience::start(u64::from(self.patience_ns));
            loop {
                // Relaxed: only the CAS below (or the claimant's) decides.
                // Any value but `t` is a later one: claimed, or withdrawn by
                // the waiter behind, which then claims its own.
                if self.serving.load(Ordering::Relaxed) != t {
                    return;
                }
                if patience.exhausted() {
                    break;
                }
                spin_loop();
            }
            // Withdraw t (a preempted, sleeping or slow taker), which offers t + 2.
            if !self.withdraw(t) {
                return; // claimed (or withdrawn by the waiter behind)
            }
            // t + 2 is on offer now (the CAS wrote it): never store it.
            t = t.wrapping_add(2);
        }
    }
}

impl Default for TicketNp {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: mutual exclusion by [1]–[3] at `TicketNp`: a thread holds the lock
// from its claim CAS (serving t → t|1) to its release store (t+2, or t); meanwhile
// no other write can succeed on the claimed word, and no other claim can either.
// The claim's Acquire reads the previous holder's Release store or a
// withdrawal CAS after it (Release; the RMWs extend the store's release
// sequence), so each critical section happens before the next.
unsafe impl lock_api::RawMutex for TicketNp {
    super::loom_const_init!(TicketNp);

    type Guard = TicketNpGuard;

    #[inline]
    fn lock(&self) -> Self::Guard {
        let cb = sched::current();
        sched::request_no_preempt_on(cb);
        if !self.claim_free() {
            self.acquire(cb);
        }
        TicketNpGuard {
            cb,
            _not_send: PhantomData,
        }
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        let cb = sched::current();
        sched::request_no_preempt_on(cb);
        // Only a free lock with nobody holding a number: claim its offer.
        if self.claim_free() {
            return Some(TicketNpGuard {
                cb,
                _not_send: PhantomData,
            });
        }
        // Nothing was held: end the request without the warned thread's yield.
        sched::cancel_no_preempt_on(cb);
        None
    }

    #[inline]
    unsafe fn unlock(&self, guard: Self::Guard) {
        // Relaxed: only the holder reads its own claimed offer.
        let s = self.serving.load(Ordering::Relaxed);
        self.release(s);
        sched::release_no_preempt_on(guard.cb);
    }

    #[inline]
    fn is_locked(&self) -> bool {
        // Free is exactly `serving == next` (table at `TicketNp`): a claim sets
        // bit 0 of `serving` (tickets are even), and a taken number makes
        // `next` pass an unclaimed offer — reserved for its taker, which is
        // what `try_lock` also refuses. Relaxed: a momentary snapshot.
        self.next.load(Ordering::Relaxed) != self.serving.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use lock_api::RawMutex;

    /// A waiter that took a number and stalled before claiming it (a preempted
    /// one) is passed over: the releaser withdraws its offer after the patience
    /// and the live waiter behind it gets the lock (001 §3.1).
    #[test]
    fn releaser_withdraws_a_stalled_number() {
        let l = TicketNp::with_patience(Duration::from_micros(200)).unwrap();
        let g = l.lock_ticketed();
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
        /// `lock` through a number (the contended path even on a free lock),
        /// as the interleavings below need a holder that took ticket 0.
        fn lock_ticketed(&self) -> TicketNpGuard {
            let cb = sched::current();
            sched::request_no_preempt_on(cb);
            self.acquire(cb);
            TicketNpGuard {
                cb,
                _not_send: PhantomData,
            }
        }

        fn unlock_now(&self, g: TicketNpGuard) {
            // SAFETY: test helper; `g` came from this lock on this thread.
            unsafe { lock_api::RawMutex::unlock(self, g) };
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
                let g = l.lock_ticketed(); // ticket 0
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
        let l = TicketNp::with_patience(Duration::from_millis(50)).unwrap();
        std::thread::scope(|s| {
            let l = &l;
            let (a_go, a_go_rx) = channel::<()>();
            let (a_holds, a_holds_rx) = channel::<()>();
            let a = s.spawn(move || {
                let g = l.lock(); // number 0
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

    /// A holder that took a number and has nobody behind it frees the lock:
    /// `serving == next` again, so `try_lock` succeeds and `is_locked` is
    /// false. (Re-offering its own, already-served number instead — the
    /// release of a holder that took none — leaves the lock reserved for
    /// nobody until a waiter behind withdraws it.) And a holder that took no
    /// number leaves `next` as it was.
    #[test]
    fn a_release_with_nobody_waiting_frees_the_lock() {
        let l = TicketNp::new();
        for _ in 0..3 {
            let g = l.lock_ticketed();
            l.unlock_now(g);
            assert!(!l.is_locked(), "free after a ticketed hold");
            let g = l.try_lock().expect("free after a ticketed hold");
            // Relaxed: single-threaded.
            let n = l.next.load(Ordering::Relaxed);
            l.unlock_now(g);
            assert_eq!(l.next.load(Ordering::Relaxed), n, "try_lock took a number");
            assert!(!l.is_locked(), "free after an unticketed hold");
        }
        assert_eq!(l.withdrawn(), 0);
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

    #[test]
    fn patience_is_validated() {
        let e = TicketNp::with_patience(Duration::from_nanos(5)).unwrap_err();
        assert!(e.to_string().contains("100 ns ..= 1 s"), "{e}");
        assert!(TicketNp::with_patience(Duration::from_secs(2)).is_err());
    }
}
