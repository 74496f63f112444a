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

use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::sched;
use crate::sync::{AtomicU32, AtomicU64, Ordering, spin_loop};
use crate::util::clock::Patience;

/// Pause per waiter ahead, in `spin_loop` hints (≈ 0.1–0.5 µs on current x86).
const PROPORTIONAL_SPINS: u32 = 32;

/// Signed distance from `a` to `b` on the wrapping ticket circle.
#[inline]
fn ahead(mine: u32, serving: u32) -> i32 {
    mine.wrapping_sub(serving) as i32
}

/// Waits about `n` positions' worth (001 §3.1 proportional backoff).
#[inline]
fn proportional_pause(n: u32) {
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

/// The scheduler-conscious ticket lock (001 §3.1, "Ticket-np").
///
/// Tickets are 31-bit numbers: `next` counts in steps of 2 and `serving` holds
/// `ticket | CLAIMED`, so the offer and its claim are one word and a single CAS
/// decides between the acquirer's claim and the releaser's withdrawal.
#[derive(Debug)]
#[repr(C)]
pub struct TicketNp {
    next: AtomicU32,
    serving: AtomicU32,
    /// Offers withdrawn so far (diagnostic).
    withdrawn: AtomicU64,
    patience_ns: u32,
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

    /// Offers withdrawn from preempted (or slow) acquirers since creation.
    pub fn withdrawn(&self) -> u64 {
        // Relaxed: a statistic.
        self.withdrawn.load(Ordering::Relaxed)
    }

    /// Takes numbers until one is served: returns with the lock claimed.
    fn acquire(&self, cb: &sched::ContextBlock) {
        'ticket: loop {
            // Relaxed: as in the plain ticket lock; the claim CAS synchronizes.
            let mine = self.next.fetch_add(2, Ordering::Relaxed);
            // While waiting, let the scheduler preempt us (we hold no lock).
            let paused = cb.pause_no_preempt();
            // The offer we watch when we are next in line, and since when.
            let mut watched: Option<(u32, Patience)> = None;
            loop {
                // Acquire: pairs with the releaser's Release offer.
                let s = self.serving.load(Ordering::Acquire);
                let d = ahead(mine, s & !CLAIMED);
                if d < 0 || (d == 0 && s & CLAIMED != 0) {
                    // Our number was withdrawn (or, with `d == 0` claimed, wrapped
                    // past): take a new one.
                    if paused {
                        cb.resume_no_preempt();
                    }
                    continue 'ticket;
                }
                if d == 0 {
                    if paused {
                        // Unpreemptable before claiming, so a claimed lock is
                        // never held by a preempted thread (the kernel may still
                        // withdraw our processor after the extension bound).
                        cb.resume_no_preempt();
                    }
                    // Acquire: orders the critical section after the releaser's.
                    match self.serving.compare_exchange(
                        s,
                        s | CLAIMED,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => return,
                        Err(_) => continue 'ticket, // withdrawn just now
                    }
                }
                if d == 2 && s & CLAIMED == 0 {
                    // We are next, and the number ahead of us is on offer but not
                    // claimed: its taker may be preempted between taking it and
                    // claiming (an idle lock's releaser did not wait for it). If
                    // it stays unclaimed past the patience, withdraw it ourselves.
                    match &mut watched {
                        Some((w, p)) if *w == s => {
                            if p.exhausted()
                                && self
                                    .serving
                                    // Relaxed: passes no data; our claim (next
                                    // round) is the synchronizing operation.
                                    .compare_exchange(s, mine, Ordering::Relaxed, Ordering::Relaxed)
                                    .is_ok()
                            {
                                // Relaxed: a statistic.
                                self.withdrawn.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        _ => watched = Some((s, Patience::start(u64::from(self.patience_ns)))),
                    }
                    spin_loop();
                    continue;
                }
                if paused && cb.warned() {
                    // The scheduler wanted our processor while we only wait.
                    sched::yield_now();
                }
                proportional_pause((d as u32) / 2);
            }
        }
    }

    /// The releaser's side: offer `t`, wait for a claim, withdraw and move on.
    fn hand_over(&self, claimed: u32) {
        let mut t = (claimed & !CLAIMED).wrapping_add(2);
        loop {
            // Release: publishes the critical section to the claimant's Acquire.
            self.serving.store(t, Ordering::Release);
            // Nobody holds number t: the lock is free, and whoever takes t claims
            // it (the waiter behind watches that claim, see `acquire`). Relaxed:
            // a hint; an acquirer that took t sees the offer eventually either way.
            if self.next.load(Ordering::Relaxed) == t {
                return;
            }
            let mut patience = Patience::start(u64::from(self.patience_ns));
            loop {
                // Relaxed: only the CAS below (or the claimant's) decides.
                if self.serving.load(Ordering::Relaxed) != t {
                    return; // claimed
                }
                if patience.exhausted() {
                    break;
                }
                spin_loop();
            }
            // Withdraw t; Release keeps the critical section published for the next.
            match self.serving.compare_exchange(
                t,
                t.wrapping_add(2),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    // Relaxed: a statistic.
                    self.withdrawn.fetch_add(1, Ordering::Relaxed);
                    t = t.wrapping_add(2);
                }
                Err(_) => return, // the claim won the race
            }
        }
    }
}

impl Default for TicketNp {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: a thread holds the lock from its successful claim CAS (serving: t → t|1)
// until it stores the next offer; only the holder stores offers, and a withdrawal
// CAS succeeds only on an unclaimed offer, so two claims of one offer or a claim
// of a withdrawn one are impossible. Acquire claim pairs with the Release offer.
unsafe impl lock_api::RawMutex for TicketNp {
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(not(loom))]
    const INIT: Self = Self::new();
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(loom)]
    const INIT: Self = panic!("under loom, use TicketNp::new()");

    type Guard = super::np::NpToken;

    #[inline]
    fn lock(&self) -> Self::Guard {
        let token = super::np::NpToken::request();
        self.acquire(sched::current());
        token
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        let token = super::np::NpToken::request();
        // Acquire: pairs with the releaser's Release offer.
        let s = self.serving.load(Ordering::Acquire);
        if s & CLAIMED == 0 {
            // Take number s only if it is the one on offer, then claim it.
            // Relaxed: the claim below synchronizes.
            if self
                .next
                .compare_exchange(s, s.wrapping_add(2), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                // Acquire: as in `acquire`. Nobody else can claim or withdraw s:
                // the releaser saw `next == s` and left, or waits for us.
                if self
                    .serving
                    .compare_exchange(s, s | CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return Some(token);
                }
                // Withdrawn in between (the releaser timed out on us): we took a
                // number we will not use; it is already skipped. Not acquired.
            }
        }
        token.release();
        None
    }

    #[inline]
    unsafe fn unlock(&self, guard: Self::Guard) {
        // Relaxed: only the holder reads its own claimed offer.
        let s = self.serving.load(Ordering::Relaxed);
        self.hand_over(s);
        guard.release();
    }

    #[inline]
    fn is_locked(&self) -> bool {
        // Relaxed: a momentary snapshot.
        self.serving.load(Ordering::Relaxed) & CLAIMED != 0
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
        let g = l.lock();
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
        fn unlock_now(&self, g: super::super::np::NpToken) {
            // SAFETY: test helper; `g` came from this lock on this thread.
            unsafe { lock_api::RawMutex::unlock(self, g) };
        }
    }

    #[test]
    fn patience_is_validated() {
        let e = TicketNp::with_patience(Duration::from_nanos(5)).unwrap_err();
        assert!(e.to_string().contains("100 ns ..= 1 s"), "{e}");
        assert!(TicketNp::with_patience(Duration::from_secs(2)).is_err());
    }
}
