//! One waiting policy for every lock that waits: spin with PAUSE while the
//! thread being waited for runs, park through the scheduler when it does not.
//!
//! A [`Waiter`] is crossbeam's `Backoff` grown up for multiprogrammed machines.
//! Each [`spin`](Waiter::spin) is one PAUSE; every [`CHECK_EVERY`] of them it
//! asks `sched` about the *watched* thread (the lock holder, or the
//! predecessor in a queue) and looks at the clock. It answers [`Wait::Park`]
//! when the watched thread is preempted ([`super::is_preempted`]: the emulated
//! scheduler's state word, natively the kernel's answer where `sched::native`
//! has one and heartbeats otherwise) — spinning then only delays the thread
//! everyone waits for — or when the episode has outlasted its patience (the
//! watched thread is slow or preempted without anyone knowing) *and* parking can
//! help, by the rule below.
//!
//! # When patience advises parking (FlexGuard's rule)
//!
//! Busy-wait while no thread is preempted; block otherwise (FlexGuard, SOSP
//! 2025). Natively, where the kernel answers (the eBPF program's count of
//! registered threads preempted right now, [`super::native::cpu_pressure`]), a
//! [`spin`](Waiter::spin) that watches a thread advises parking on patience
//! alone only when
//!
//! - some registered thread is preempted (the spinner's processor may be what
//!   it waits for) — or, for a [`counting_wakeups`](Waiter::counting_wakeups)
//!   episode, also when some registered thread was woken and is not yet on a
//!   CPU ([`super::native::cpu_pressure_counting_wakeups`]), or
//! - the watched thread is not on a CPU by the kernel's answer (it blocked: it
//!   will not end the wait soon), or the kernel does not answer for it.
//!
//! Otherwise everybody who could end the wait runs and nobody waits for the
//! spinner's processor: parking would only make the hand-over wait for a
//! wake-up (tens of µs on an idle core, where a hand-over takes < 1 µs), so it
//! keeps spinning. A watched thread that *is* preempted still means park, at
//! once.
//!
//! Which count is the lock's choice. By default woken threads do not count: a
//! waiter woken one step ahead (a skip queue's) is mostly coming up on an idle
//! core (a wake-up latency, not a wait for a busy CPU), and counting it made
//! the other spinners park again (16 cores, Smart-Q/MCS-TP/Handshaking at 14–17
//! threads: 0.6–1.15× parking_lot fell to 0.1–0.97×). A lock whose woken queue
//! head may wait for a spinner's slice (bounded-steal) counts them: without,
//! it fell from 0.80 to 0.28× parking_lot at 17 threads on 16 cores. Unchanged, i.e. today's patience: without the kernel's answer (eBPF
//! off or not permitted: heartbeats), under the emulated scheduler (its
//! preemptions are not the kernel's: the spinner or the watched thread is
//! attached), for `spin(None)` (nothing watched: a wait for an event, e.g. a
//! barrier's, that may take long while everyone runs), and for a
//! [`bounded`](Waiter::bounded_ns) episode, whose `Park` means "change course"
//! (queue, skip a waiter) rather than sleep.
//!
//! Parking goes through the scheduler too. A waiter whose flag lives in memory
//! it frees once it has seen the flag (a queue node) must not be woken through
//! that memory: its waker might still be about to call `unpark` on it. So each
//! thread has a *wake word* in its context block, which is never freed:
//!
//! ```text
//! waiter                                   waker
//! t = Waiter::token()                      (makes the condition true, e.g. swap)
//! announce "I will sleep" (CAS)            sees the announcement
//! re-check the condition                   sched::wake(waiter's block)  // bump, unpark
//! Waiter::sleep(t)  // returns at once if the word moved since t
//! ```
//!
//! The token taken *before* the announcement makes the wake-up impossible to
//! lose: a wake that comes after the token moves the word, so the sleep does
//! not start, or the futex wakes it. (Loom models of the protocol:
//! `tests/loom_locks.rs`, `bounded_steal_*`.)
//!
//! ```
//! use mpsync::sched::{self, Wait, Waiter};
//! use std::sync::atomic::{AtomicBool, Ordering};
//!
//! let flag = AtomicBool::new(true);
//! let mut w = Waiter::new();
//! while !flag.load(Ordering::Acquire) {
//!     if w.spin(None) == Wait::Park {
//!         let t = Waiter::token();
//!         // ... announce, re-check, then:
//!         Waiter::sleep(t, None);
//!         w.restart();
//!     }
//! }
//! ```

use std::time::Duration;

use crate::sync::{Ordering, spin_loop};
use crate::util::clock::Patience;

use super::context::ContextBlock;
use super::futex::{self, ParkResult};
use super::native::KernelState;

/// Spins between two looks at the watched thread and the clock: a look costs a
/// clock read and a load of a line another thread writes, ≈ 20–40 ns; a PAUSE
/// 10–140 ns. Under loom every spin looks (each spin is a model step there).
pub const CHECK_EVERY: u32 = if cfg!(loom) { 1 } else { 16 };

/// Default patience of a waiting episode: far above a critical section that
/// runs (a few µs), far below a scheduler quantum (1–4 ms natively, 10–50 ms
/// emulated).
pub const DEFAULT_PATIENCE: Duration = Duration::from_micros(50);

/// What a waiter should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Keep spinning: the watched thread runs and the patience is not spent.
    Spin,
    /// Park: the watched thread is preempted, or the patience is spent.
    Park,
}

/// A thread's wake word at one moment; see the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakeToken(u32);

/// A waiting episode (see the module doc).
#[derive(Debug, Clone)]
pub struct Waiter {
    spins: u32,
    patience_ns: u64,
    patience: Patience,
    /// Patience advises `Park` whatever the pressure ([`Waiter::bounded_ns`]).
    bounded: bool,
    /// Threads woken and not yet on a CPU count as pressure
    /// ([`Waiter::counting_wakeups`]).
    counting_wakeups: bool,
}

impl Default for Waiter {
    fn default() -> Self {
        Self::new()
    }
}

impl Waiter {
    /// An episode with the [`DEFAULT_PATIENCE`].
    #[inline]
    pub fn new() -> Self {
        Self::with_patience_ns(DEFAULT_PATIENCE.as_nanos() as u64)
    }

    /// An episode that advises parking after `ns` nanoseconds without progress.
    #[inline]
    pub fn with_patience_ns(ns: u64) -> Self {
        Self {
            spins: 0,
            patience_ns: ns,
            patience: Patience::start(ns),
            bounded: false,
            counting_wakeups: false,
        }
    }

    /// An episode whose patience of `ns` nanoseconds advises `Park` whatever
    /// the CPU pressure (module doc): for a wait whose `Park` means "give up
    /// this way of waiting" — stop spinning for a steal and queue, skip a
    /// candidate — which must stay bounded even while everyone runs.
    #[inline]
    pub fn bounded_ns(ns: u64) -> Self {
        Self {
            bounded: true,
            ..Self::with_patience_ns(ns)
        }
    }

    /// The same episode, with threads woken from a block and not yet on a CPU
    /// counted as CPU pressure too (module doc: for a lock whose woken waiter
    /// may wait for a spinner's slice, as bounded-steal's queue head).
    ///
    /// ```
    /// use mpsync::sched::Waiter;
    /// let w = Waiter::new().counting_wakeups();
    /// assert!(w.counts_wakeups());
    /// assert!(!Waiter::new().counts_wakeups());
    /// ```
    #[inline]
    #[must_use]
    pub fn counting_wakeups(self) -> Self {
        Self {
            counting_wakeups: true,
            ..self
        }
    }

    /// Whether threads woken and not yet on a CPU count as pressure
    /// ([`Waiter::counting_wakeups`]).
    #[inline]
    pub fn counts_wakeups(&self) -> bool {
        self.counting_wakeups
    }

    /// Progress was seen (the holder changed, the thread woke up): the
    /// patience starts over.
    #[inline]
    pub fn restart(&mut self) {
        self.spins = 0;
        self.patience = Patience::start(self.patience_ns);
    }

    /// One PAUSE; every [`CHECK_EVERY`] spins, whether to park: `watched`
    /// (the thread that will end the wait) is preempted, or the patience is
    /// spent and parking can help (module doc: natively, with the kernel's
    /// answer, not while nobody waits for a CPU and `watched` runs).
    ///
    /// Under loom it advises parking at once: loom runs every other runnable
    /// thread at a spin (a model yield), so a spinner would always find the
    /// wait over and the models would never explore the sleeping protocols.
    #[inline]
    pub fn spin(&mut self, watched: Option<&ContextBlock>) -> Wait {
        if cfg!(loom) {
            let _ = watched;
            spin_loop();
            return Wait::Park;
        }
        spin_loop();
        self.spins = self.spins.wrapping_add(1);
        if !self.spins.is_multiple_of(CHECK_EVERY) {
            return Wait::Spin;
        }
        if watched.is_some_and(super::is_preempted)
            || (self.patience.exhausted() && self.patience_parks(watched))
        {
            Wait::Park
        } else {
            Wait::Spin
        }
    }

    /// With the patience spent, whether that advises parking (module doc).
    #[inline]
    fn patience_parks(&self, watched: Option<&ContextBlock>) -> bool {
        let Some(w) = watched else {
            return true;
        };
        patience_parks_given(
            self.bounded,
            // The woken count is read only when it matters (nobody preempted).
            || {
                super::native::pressure_given(
                    self.counting_wakeups,
                    super::native::threads_preempted_now(),
                    super::native::threads_woken_now,
                )
            },
            || {
                super::emulated::is_attached(w)
                    || super::current_if_registered().is_some_and(super::emulated::is_attached)
            },
            || super::native::kernel_state(w),
        )
    }

    /// The calling thread's wake word now; take it *before* announcing that
    /// the thread is about to sleep.
    #[inline]
    pub fn token() -> WakeToken {
        // Acquire: pairs with the Release bump of `wake`, so what the waker
        // wrote before waking is visible once the token shows the bump.
        WakeToken(super::current().peer.wake.load(Ordering::Acquire))
    }

    /// Sleeps until some [`wake`] of this thread after `token` was taken (at
    /// once if one already happened), or `timeout`. May return spuriously:
    /// callers re-check their condition.
    #[inline]
    pub fn sleep(token: WakeToken, timeout: Option<Duration>) -> ParkResult {
        futex::wait(&super::current().peer.wake, token.0, timeout)
    }
}

/// The rule for a spent patience while watching a thread (module doc), given
/// what is known: whether the episode is [`bounded`](Waiter::bounded_ns), the
/// kernel's CPU pressure as this episode counts it (`None`: it does not
/// answer), whether the emulated
/// scheduler is involved, and the watched thread's state by the kernel. The
/// last three are asked only when needed.
#[inline]
fn patience_parks_given(
    bounded: bool,
    pressure: impl FnOnce() -> Option<bool>,
    emulated: impl FnOnce() -> bool,
    watched_state: impl FnOnce() -> Option<KernelState>,
) -> bool {
    if bounded {
        return true;
    }
    match pressure() {
        // Unknown (heartbeats: today's patience), or some thread waits for a CPU.
        None | Some(true) => true,
        // Nobody waits for a CPU: park only if the emulated scheduler's
        // preemptions (not the kernel's) are involved, or if the watched thread
        // is not on a CPU (blocked, or not answered for).
        Some(false) => emulated() || watched_state() != Some(KernelState::Running),
    }
}

/// Wakes `cb`'s thread if it sleeps in [`Waiter::sleep`], and makes its next
/// sleep with an older token return at once.
#[inline]
pub fn wake(cb: &ContextBlock) {
    // Release: pairs with the Acquire load of `Waiter::token`.
    cb.peer.wake.fetch_add(1, Ordering::Release);
    futex::wake(&cb.peer.wake, 1);
}

/// The word `wake` bumps (tests).
#[cfg(test)]
pub(crate) fn wake_word(cb: &ContextBlock) -> &crate::sync::AtomicU32 {
    &cb.peer.wake
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_wake_before_the_sleep_is_not_lost() {
        let t = Waiter::token();
        wake(super::super::current());
        // A lost wake would sleep the whole second and time out.
        assert_eq!(
            Waiter::sleep(t, Some(Duration::from_secs(1))),
            ParkResult::Mismatch
        );
        assert_ne!(
            wake_word(super::super::current()).load(Ordering::Relaxed),
            t.0
        );
    }

    #[test]
    fn sleep_without_wake_times_out() {
        let t = Waiter::token();
        assert_eq!(
            Waiter::sleep(t, Some(Duration::from_millis(1))),
            ParkResult::TimedOut
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "real time: the patience runs on the monotonic clock")]
    fn patience_runs_out_then_restarts() {
        let mut w = Waiter::with_patience_ns(1_000);
        let start = std::time::Instant::now();
        while w.spin(None) == Wait::Spin {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "never advised parking"
            );
        }
        w.restart();
        // Right after a restart, the first look does not advise parking.
        let mut w = Waiter::with_patience_ns(10_000_000_000);
        for _ in 0..CHECK_EVERY {
            assert_eq!(w.spin(None), Wait::Spin);
        }
    }

    #[test]
    fn patience_parks_only_under_pressure_when_the_kernel_answers() {
        use KernelState::*;
        let never = || -> bool { panic!("asked whether emulated when it does not matter") };
        let no_state =
            || -> Option<KernelState> { panic!("asked the state when it does not matter") };
        let no_pressure =
            || -> Option<bool> { panic!("asked the pressure when it does not matter") };
        // Unknown pressure (heartbeats) or pressure: today's patience.
        assert!(patience_parks_given(false, || None, never, no_state));
        assert!(patience_parks_given(false, || Some(true), never, no_state));
        // A bounded episode parks whatever the pressure.
        assert!(patience_parks_given(true, no_pressure, never, no_state));
        // No pressure, the watched thread runs, native: keep spinning.
        assert!(!patience_parks_given(
            false,
            || Some(false),
            || false,
            || Some(Running)
        ));
        // ... unless it is blocked or not answered for, or emulation is involved.
        assert!(patience_parks_given(
            false,
            || Some(false),
            || false,
            || Some(Blocked)
        ));
        assert!(patience_parks_given(
            false,
            || Some(false),
            || false,
            || None
        ));
        assert!(patience_parks_given(
            false,
            || Some(false),
            || true,
            || Some(Running)
        ));
    }

    #[test]
    fn woken_threads_are_pressure_only_for_an_episode_counting_wakeups() {
        use crate::sched::native::pressure_given;
        let unread = || -> Option<u64> { panic!("read the woken count when it does not matter") };
        // The kernel does not answer: unknown either way.
        assert_eq!(pressure_given(false, None, unread), None);
        assert_eq!(pressure_given(true, None, unread), None);
        // A preempted thread is pressure for both.
        assert_eq!(pressure_given(false, Some(2), unread), Some(true));
        assert_eq!(pressure_given(true, Some(1), unread), Some(true));
        // Nobody preempted, a woken thread waits for its CPU: pressure only
        // when counting wake-ups (bounded-steal), not by default (skip queues).
        assert_eq!(pressure_given(false, Some(0), unread), Some(false));
        assert_eq!(pressure_given(true, Some(0), || Some(1)), Some(true));
        assert_eq!(pressure_given(true, Some(0), || Some(0)), Some(false));
        // The episode's choice: off by default, kept by the other builders.
        assert!(!Waiter::new().counts_wakeups());
        assert!(!Waiter::bounded_ns(1_000).counts_wakeups());
        assert!(Waiter::new().counting_wakeups().counts_wakeups());
        assert!(
            Waiter::bounded_ns(1_000)
                .counting_wakeups()
                .counts_wakeups()
        );
        let mut w = Waiter::with_patience_ns(1_000).counting_wakeups();
        w.restart();
        assert!(w.counts_wakeups(), "a restart keeps the choice");
    }

    #[test]
    #[cfg_attr(miri, ignore = "real time: the patience runs on the monotonic clock")]
    fn a_bounded_episode_parks_on_patience_while_watching_a_running_thread() {
        // Whatever the kernel says about pressure (none here, or unknown), a
        // bounded episode's patience advises parking.
        let me = super::super::current();
        let mut w = Waiter::bounded_ns(1_000);
        let start = std::time::Instant::now();
        while w.spin(Some(me)) == Wait::Spin {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "a bounded waiter never advised parking (pressure: {:?})",
                crate::sched::native::cpu_pressure()
            );
        }
    }

    #[test]
    fn a_preempted_watched_thread_means_park() {
        use crate::sched::{Actor, ThreadState};
        let cb = ContextBlock::new();
        cb.transition(
            ThreadState::Preemptable,
            ThreadState::Preempted,
            Actor::Kernel,
        )
        .unwrap();
        let mut w = Waiter::with_patience_ns(10_000_000_000);
        let advice: Vec<Wait> = (0..CHECK_EVERY).map(|_| w.spin(Some(&cb))).collect();
        assert_eq!(advice.last(), Some(&Wait::Park), "{advice:?}");
        assert!(advice[..advice.len() - 1].iter().all(|a| *a == Wait::Spin));
    }
}
