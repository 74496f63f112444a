//! Barriers. All share one trait, [`Barrier`]: `wait(id)` blocks participant `id`
//! until all `n` participants of this episode have arrived, and says whether this
//! thread is the episode's leader (exactly one per episode, as
//! `std::sync::BarrierWaitResult::is_leader`).
//!
//! | type                | paper name                | arrival / departure                               | waits by                 | source |
//! |---------------------|---------------------------|---------------------------------------------------|--------------------------|--------|
//! | [`Central`]         | Central (-block)          | one counter / one episode word                    | spin, block, spin-then-block | 001 §4, K&W 1993 |
//! | [`CombiningTree`]   | Arrival-tree, Heuristic-tree | fan-in-4 tree of counters / one episode word   | spin; spin-then-block    | 001 §4, Fig. 7 |
//! | [`Dissemination`]   | dissemination             | ⌈log₂ n⌉ rounds of pairwise flags                 | spin, then yield         | Hensgen et al.; MCS 1991 |
//! | [`McsTree`]         | MCS tree                  | 4-ary arrival tree / binary wake-up tree          | spin, then yield         | MCS 1991 §3.3 |
//! | [`ScalableSc`]      | Scalable-SC               | per-processor counter, tree across processors; reorganized when the partition changes | block inside a processor, scheduler-conscious spin across | 001 §3.3 |
//!
//! Participants are numbered `0..n`; each id must be used by one thread at a
//! time (a thread keeps its id across episodes). An id out of range panics with
//! a message naming the range (a programming error, like an index), before
//! arriving: it is not counted.
//!
//! A participant that never arrives — its thread panicked, or stopped —
//! leaves the others of its episode waiting: the episode needs all `n` (as
//! `std::sync::Barrier`; there is no poisoning). Nothing is released early and
//! nothing is left unsound: another thread may take over the missing id and
//! arrive, and the episode, and the barrier, go on (`tests/hostile_locks.rs`).
//!
//! ```
//! use mpsync::barrier::{Barrier, Central, WaitMode, ScalableSc};
//! let b = ScalableSc::new(4).unwrap();
//! let leaders = std::sync::atomic::AtomicU32::new(0);
//! std::thread::scope(|s| {
//!     for id in 0..4 {
//!         let (b, leaders) = (&b, &leaders);
//!         s.spawn(move || {
//!             for _ in 0..10 {
//!                 if b.wait(id).is_leader() {
//!                     leaders.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
//!                 }
//!             }
//!         });
//!     }
//! });
//! assert_eq!(leaders.into_inner(), 10);
//! assert!(Central::new(0, WaitMode::Block).is_err());
//! ```
//!
//! The waiting loops of this module live in two helpers here (`Release::wait`
//! for the episode word, `wait_flag` for per-thread flags, which spins through
//! the shared waiting policy, `sched::Waiter`, and then sleeps on the thread's
//! wake word).

pub mod central;
pub mod dissemination;
pub mod mcs;
pub mod scalable;
pub mod simple;
pub mod tree;

use std::time::Duration;

pub use central::Central;
pub use dissemination::Dissemination;
pub use mcs::McsTree;
pub use scalable::ScalableSc;
pub use simple::SimpleBarrier;
pub use tree::CombiningTree;

use crate::sched;
use crate::sync::{AtomicU32, Ordering, fence, spin_loop};
use crate::util::CachePadded;
use crate::util::clock::now_ns;

/// Whether this thread was the leader of its barrier episode (exactly one
/// participant per episode is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarrierWaitResult(bool);

impl BarrierWaitResult {
    /// Whether this thread is the episode's leader.
    pub fn is_leader(&self) -> bool {
        self.0
    }
}

/// Invalid barrier parameters supplied by the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BarrierError {
    /// What was wrong and what would be right.
    InvalidParameter(String),
}

impl std::fmt::Display for BarrierError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InvalidParameter(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for BarrierError {}

/// Most participants a barrier takes (counters and ids are 32-bit).
pub const MAX_PARTICIPANTS: usize = 1 << 20;

pub(crate) fn check_participants(name: &str, n: usize) -> Result<u32, BarrierError> {
    if n == 0 || n > MAX_PARTICIPANTS {
        return Err(BarrierError::InvalidParameter(format!(
            "{name}: {n} participants: must be between 1 and {MAX_PARTICIPANTS} (e.g. one per thread)"
        )));
    }
    Ok(n as u32)
}

#[track_caller]
pub(crate) fn check_id(name: &str, id: usize, n: u32) {
    assert!(
        id < n as usize,
        "{name}: participant id {id} out of range: ids are 0..{n}"
    );
}

/// A barrier: `n` participants, numbered `0..n`.
pub trait Barrier: Send + Sync + std::fmt::Debug {
    /// The barrier's name in the papers.
    fn name(&self) -> &'static str;

    /// The number of participants.
    fn participants(&self) -> usize;

    /// Participant `id` arrives; returns once all participants of this episode
    /// have arrived. Everything any participant did before arriving happens
    /// before everything every participant does after returning.
    ///
    /// # Panics
    /// If `id >= participants()`.
    fn wait(&self, id: usize) -> BarrierWaitResult;
}

/// How a thread waits for an episode's release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitMode {
    /// Spin until released (until the OS preempts the thread).
    Spin,
    /// Park at once (`sched::park`), woken by the releaser.
    Block,
    /// Spin for the given time, then park.
    SpinThenBlock(Duration),
}

impl WaitMode {
    /// Spin-then-block with the default spin (20 µs: about two context
    /// switches, the competitive choice of Karlin et al.).
    pub const HEURISTIC: Self = Self::SpinThenBlock(Duration::from_micros(20));

    fn spin_ns(self) -> u64 {
        match self {
            Self::Spin => u64::MAX,
            Self::Block => 0,
            Self::SpinThenBlock(d) => d.as_nanos().min(u64::MAX as u128) as u64,
        }
    }
}

/// Spins between clock reads in the waiting helpers.
const SPINS_PER_CLOCK: u32 = if cfg!(loom) { 1 } else { 64 };

/// The departure side shared by the centralized and combining barriers: an
/// episode word that the leader advances and everyone else waits to see move,
/// and a count of parked waiters so that the leader calls the kernel only when
/// someone sleeps.
#[derive(Debug)]
pub(crate) struct Release {
    episode: CachePadded<AtomicU32>,
    sleepers: CachePadded<AtomicU32>,
}

impl Release {
    pub(crate) fn new() -> Self {
        Self {
            episode: CachePadded::new(AtomicU32::new(0)),
            sleepers: CachePadded::new(AtomicU32::new(0)),
        }
    }

    /// The current episode. Read before arriving: it cannot move until this
    /// thread has arrived.
    #[inline]
    pub(crate) fn current(&self) -> u32 {
        // Acquire: pairs with the releaser's SeqCst (release) increment, so what
        // the previous episode's participants did is visible.
        self.episode.load(Ordering::Acquire)
    }

    /// The leader ends episode `seen`.
    #[inline]
    pub(crate) fn release(&self) {
        // A Dekker pair with a waiter's sleepers increment and its re-check of
        // the episode, through a SeqCst fence on each side: either we see it
        // counted, or it sees the new episode. (SeqCst accesses alone would do in
        // C++'s model, but loom models them as AcqRel and then finds a lost
        // wake-up; SeqCst fences it models exactly.) The increment is also the
        // Release that publishes every arrival (chained to us through the AcqRel
        // arrival counters).
        self.episode.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) != 0 {
            sched::unpark_all(&self.episode);
        }
    }

    /// Waits until episode `seen` has been released, as `mode` says. The one
    /// waiting loop for the episode word.
    pub(crate) fn wait(&self, seen: u32, mode: WaitMode) {
        self.wait_with(seen, mode, || false);
    }

    /// As [`wait`](Self::wait); `block_now` is asked between spins whether to
    /// stop spinning and park at once (the scheduler-conscious decision).
    pub(crate) fn wait_with(&self, seen: u32, mode: WaitMode, mut block_now: impl FnMut() -> bool) {
        let budget = mode.spin_ns();
        if budget > 0 {
            let start = now_ns();
            'spin: loop {
                for _ in 0..SPINS_PER_CLOCK {
                    // Acquire: pairs with `release`.
                    if self.episode.load(Ordering::Acquire) != seen {
                        return;
                    }
                    spin_loop();
                }
                // (Under loom, no clock: one round of checks, so that every
                // execution of a model is a function of its schedule alone.)
                if cfg!(loom)
                    || block_now()
                    || (budget != u64::MAX && now_ns().saturating_sub(start) >= budget)
                {
                    break 'spin;
                }
            }
        }
        #[cfg(not(loom))]
        if sched::emulated::is_attached(sched::current()) {
            // On an emulated virtual processor, blocking is giving the processor
            // to the next thread on it: the pseudo-scheduler does not see a
            // futex sleep, and would leave the processor idle for the slot.
            // Acquire: pairs with `release`.
            while self.episode.load(Ordering::Acquire) == seen {
                sched::yield_now();
            }
            return;
        }
        loop {
            // SeqCst, and the fence: see `release`.
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            let moved = self.episode.load(Ordering::SeqCst) != seen;
            if !moved {
                sched::park(&self.episode, seen, None);
            }
            // Relaxed: only a hint for the releaser, who re-checks by futex.
            self.sleepers.fetch_sub(1, Ordering::Relaxed);
            // Acquire: pairs with `release`.
            if moved || self.episode.load(Ordering::Acquire) != seen {
                return;
            }
        }
    }
}

/// How long a per-thread flag waiter spins before it sleeps (the patience of
/// its [`sched::Waiter`]).
const FLAG_SPIN_NS: u64 = 20_000;

/// A participant's announcement that it sleeps on a per-thread flag
/// (dissemination, MCS tree): its context block, or null. Whoever makes a flag
/// of this participant reach its target calls [`Sleeper::signalled`] after
/// that store or increment.
///
/// The announcement and the flag are a Dekker pair, through a SeqCst fence on
/// each side:
///
/// ```text
/// waiter (wait_flag)                       signaller
/// t = Waiter::token()                      flag += 1 / flag := k   (Release)
/// sleeper := my block (Release) [S1]       fence(SeqCst)           [G2]
/// fence(SeqCst)                 [S2]       if sleeper (Acquire):   [G3]
/// if done(): sleeper := null; return           sched::wake(sleeper)
/// Waiter::sleep(t)   // returns at once if woken since t
/// ```
///
/// Either the signaller sees the announcement and wakes the sleeper, or the
/// waiter's re-check sees the flag. A wake that comes late (the waiter saw the
/// flag and went on) only bumps its wake word: a later sleep of that thread
/// returns spuriously and re-checks. (Loom: `dissemination_two_episodes`,
/// `mcs_tree_two_episodes` in `tests/loom_rwlock_barrier.rs`, where every
/// wait sleeps.)
#[derive(Debug)]
pub(crate) struct Sleeper(crate::sync::AtomicPtr<sched::ContextBlock>);

impl Sleeper {
    pub(crate) fn new() -> Self {
        Self(crate::sync::AtomicPtr::new(std::ptr::null_mut()))
    }

    /// Whether the participant has announced that it sleeps (a snapshot).
    #[cfg(test)]
    pub(crate) fn is_announced(&self) -> bool {
        // Relaxed: a snapshot for tests.
        !self.0.load(Ordering::Relaxed).is_null()
    }

    /// The signaller's side: call after the store or increment that may end
    /// this participant's wait.
    #[inline]
    pub(crate) fn signalled(&self) {
        // [G2] SeqCst fence: pairs with [S2].
        fence(Ordering::SeqCst);
        // [G3] Acquire: ordered after the flag by the fences; Acquire pairs
        // with the Release of [S1], so the block's creation (its wake word)
        // happens before our wake.
        let cb = self.0.load(Ordering::Acquire);
        // SAFETY: null or the block of a live thread (`sched::current()`);
        // context blocks are never freed.
        if let Some(cb) = unsafe { cb.as_ref() } {
            sched::wake(cb);
        }
    }
}

/// Per-thread flag waiting (dissemination, MCS tree): spins through the shared
/// waiting policy ([`sched::Waiter`], patience [`FLAG_SPIN_NS`]) until
/// `done()`, then sleeps on the thread's wake word, announced in `me` (see
/// [`Sleeper`]) — a partner that is preempted can only arrive when it runs
/// again. On an emulated virtual processor it yields instead (the
/// pseudo-scheduler does not see a sleep; see [`Release::wait_with`]).
pub(crate) fn wait_flag(me: &Sleeper, mut done: impl FnMut() -> bool) {
    let mut w = sched::Waiter::with_patience_ns(FLAG_SPIN_NS);
    loop {
        if done() {
            return;
        }
        if w.spin(None) == sched::Wait::Park {
            break;
        }
    }
    #[cfg(not(loom))]
    if sched::emulated::is_attached(sched::current()) {
        while !done() {
            sched::yield_now();
        }
        return;
    }
    let cb = sched::current() as *const sched::ContextBlock as *mut sched::ContextBlock;
    loop {
        let t = sched::Waiter::token();
        // [S1] Release: publishes our context block (created lazily by this
        // thread) to the signaller's Acquire [G3]; ordered before the
        // re-check by the fence.
        me.0.store(cb, Ordering::Release);
        // [S2] SeqCst fence: pairs with [G2].
        fence(Ordering::SeqCst);
        let over = done();
        if !over {
            let _ = sched::Waiter::sleep(t, None);
        }
        // Relaxed: a signaller that still reads the block only wakes us
        // spuriously (see `Sleeper`).
        me.0.store(std::ptr::null_mut(), Ordering::Relaxed);
        if over || done() {
            return;
        }
    }
}

/// Whether counter `v` has reached `target` (wrapping 32-bit counters that
/// never run more than 2^31 ahead).
#[inline]
pub(crate) fn reached(v: u32, target: u32) -> bool {
    (v.wrapping_sub(target) as i32) >= 0
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! Small enough for Miri: every barrier, a few threads, a few episodes.
    use super::*;
    use std::sync::atomic::AtomicU64;

    pub(super) fn episodes<B: Barrier>(b: &B, episodes: u64) {
        let n = b.participants();
        let arrived = AtomicU64::new(0);
        let leaders = AtomicU64::new(0);
        std::thread::scope(|s| {
            for id in 0..n {
                let (b, arrived, leaders) = (b, &arrived, &leaders);
                s.spawn(move || {
                    for k in 0..episodes {
                        arrived.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let r = b.wait(id);
                        // Nobody leaves episode k before all n arrived.
                        let a = arrived.load(std::sync::atomic::Ordering::Relaxed);
                        assert!(
                            a >= (k + 1) * n as u64,
                            "left episode {k} with {a} arrivals"
                        );
                        if r.is_leader() {
                            leaders.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        b.wait(id);
                    }
                });
            }
        });
        assert_eq!(leaders.into_inner(), episodes);
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads the affinity mask and cgroup files")]
    fn scalable_sc_small() {
        for n in [1, 2, 3, 5] {
            episodes(&ScalableSc::new(n).unwrap(), 20);
        }
    }

    #[test]
    fn every_barrier_small() {
        let e = if cfg!(miri) { 3 } else { 20 };
        for n in [1, 2, 3] {
            episodes(&Central::new(n, WaitMode::Spin).unwrap(), e);
            episodes(&Central::new(n, WaitMode::Block).unwrap(), e);
            episodes(&Central::new(n, WaitMode::HEURISTIC).unwrap(), e);
            episodes(&CombiningTree::new(n, WaitMode::Spin).unwrap(), e);
            episodes(&CombiningTree::new(n, WaitMode::HEURISTIC).unwrap(), e);
            episodes(&Dissemination::new(n).unwrap(), e);
            episodes(&McsTree::new(n).unwrap(), e);
        }
    }

    /// Participant 0 waits for a partner that comes late: it must announce
    /// itself and sleep (not spin or yield), and the partner's signal must
    /// wake it.
    fn late_partner_wakes_sleeper<B: Barrier>(b: &B, announced: impl Fn(&B) -> bool) {
        std::thread::scope(|s| {
            let h = s.spawn(|| b.wait(0).is_leader());
            let start = std::time::Instant::now();
            while !announced(b) {
                assert!(
                    start.elapsed() < std::time::Duration::from_secs(20),
                    "participant 0 never announced a sleep"
                );
                std::thread::yield_now(); // the test's own polling, not a barrier's
            }
            // The only signal that can end its wait comes from us now.
            assert!(!h.is_finished());
            let _ = b.wait(1);
            assert!(h.join().unwrap(), "participant 0 leads");
        });
        assert!(
            !announced(b),
            "the announcement is withdrawn after the wake"
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "real time: waits out the 20 µs spin patience")]
    fn dissemination_late_partner_wakes_sleeper() {
        let b = Dissemination::new(2).unwrap();
        late_partner_wakes_sleeper(&b, |b| b.announced(0));
        episodes(&b, 20); // and the barrier goes on
    }

    #[test]
    #[cfg_attr(miri, ignore = "real time: waits out the 20 µs spin patience")]
    fn mcs_tree_late_child_wakes_sleeping_root() {
        let b = McsTree::new(2).unwrap();
        late_partner_wakes_sleeper(&b, |b| b.announced(0));
        episodes(&b, 20);
    }

    #[test]
    fn bad_parameters_are_errors() {
        let e = Central::new(0, WaitMode::Spin).unwrap_err();
        assert!(e.to_string().contains("must be between 1 and"), "{e}");
        assert!(CombiningTree::new(MAX_PARTICIPANTS + 1, WaitMode::Spin).is_err());
        assert!(Dissemination::new(0).is_err());
        assert!(McsTree::new(0).is_err());
        assert!(ScalableSc::new(0).is_err());
        assert!(Central::new(1, WaitMode::Spin).unwrap().wait(0).is_leader());
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn id_out_of_range_panics() {
        Central::new(2, WaitMode::Spin).unwrap().wait(2);
    }

    #[test]
    fn reached_wraps() {
        assert!(reached(5, 5));
        assert!(reached(6, 5));
        assert!(!reached(4, 5));
        assert!(reached(1, u32::MAX));
        assert!(!reached(u32::MAX, 1));
    }
}
