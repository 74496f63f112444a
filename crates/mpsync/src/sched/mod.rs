//! `sched` — the widened kernel/user interface of papers 001 §3 and 003 §3.
//!
//! Every algorithm in mpsync talks to the scheduler only through this module:
//! it never calls `std::thread::yield_now`, `sleep` or a futex itself, so the
//! emulated backend sees every decision.
//!
//! - a per-thread [`ContextBlock`]: the four-valued [state word](state), the
//!   warning flag, the no-preempt nesting depth, a heartbeat;
//! - [partition information](partition()): processors available, threads per
//!   processor, a generation counter;
//! - [`yield_now`], [`park`], [`unpark_one`], [`unpark_all`]; for words in
//!   memory shared between processes [`park_shared`], [`park_shared_any`]
//!   (asleep on up to 8 words at once) and [`unpark_shared_all`].
//!
//! Two backends share the API. [`emulated`] is the papers' pseudo-scheduler: it
//! time-slices virtual processors between attached threads and simulated "other
//! applications", preempting by signal. [`native`] is the real Linux machine:
//! heartbeats answer "is that thread preempted?", the affinity mask and cgroup
//! quota give the partition. A thread attached to an emulated scheduler uses it;
//! every other thread uses the native backend.
//!
//! ```
//! use mpsync::sched::{self, ThreadState};
//!
//! {
//!     let _np = sched::NoPreempt::new(); // critical section: please don't preempt
//!     assert!(sched::current().no_preempt_requested());
//!     // The request is the owner's own word (a depth count), on every
//!     // backend: the state word is what peers and the scheduler CAS.
//!     assert_eq!(sched::current().state(), ThreadState::Preemptable);
//! }
//! assert!(!sched::current().no_preempt_requested());
//! assert_eq!(sched::current().state(), ThreadState::Preemptable);
//! ```

pub mod context;
#[cfg(all(target_os = "linux", not(loom), not(miri)))]
mod ebpf;
pub mod emulated;
mod futex;
pub mod native;
mod once;
pub mod partition;
mod registry;
pub mod stall;
pub mod state;
pub mod waiter;

use std::marker::PhantomData;
use std::time::Duration;

pub use context::{ContextBlock, SignalVerdict};
pub use futex::ParkResult;
pub use native::cpu_pressure;
pub use partition::{Partition, generation};
pub use registry::{current, current_if_registered};
pub use state::{Actor, ThreadState, TransitionError};
pub use waiter::{Wait, Waiter, WakeToken, wake};

use crate::sync::AtomicU32;

/// Context blocks of all live registered threads (a snapshot).
pub fn live_threads() -> Vec<&'static ContextBlock> {
    registry::live()
}

/// Takes back the context blocks of threads that used `sched` after their
/// own exit destructors had run (in a destructor of a thread-local or a
/// thread-specific key the C library ran last) and have exited since; returns
/// how many. A block is normally given back as its thread exits; such a late
/// registration may outlive the C library's last destructor round, and its
/// block is then taken back once the thread is gone (the kernel saw it exit,
/// or no thread of the process has its tid). The registry does this by itself
/// when it runs out of free blocks; this does it now. The kernel stops
/// answering for such a thread as it exits, whoever gets its tid later.
pub fn reclaim_exited_threads() -> usize {
    #[cfg(not(loom))]
    {
        registry::reclaim_exited()
    }
    #[cfg(loom)]
    {
        0
    }
}

/// Asks not to be preempted until the matching [`release_no_preempt`]. Nests.
///
/// The request is the context block's depth count (see
/// [`ContextBlock::request_no_preempt`]), which the emulated scheduler honours.
/// On the native backend the kernel is not asked: mpsync detects the rseq
/// time-slice extension ([`native::slice_extension`]) but does not drive it
/// yet (see the `native` module doc), so Linux may preempt a requester.
#[inline]
pub fn request_no_preempt() {
    request_no_preempt_on(current());
}

/// [`request_no_preempt`] for a caller that already holds its own context
/// block (a lock guard carries it, so the section costs one lookup, not two).
/// `cb` must be the calling thread's block ([`current`]).
#[inline]
pub(crate) fn request_no_preempt_on(cb: &ContextBlock) {
    debug_assert!(
        std::ptr::eq(cb, current()),
        "another thread's context block"
    );
    cb.request_no_preempt();
    native::on_request_no_preempt(cb);
}

/// Ends a no-preempt section; at the outermost level, yields if the scheduler
/// warned the thread that it had wanted to preempt it.
#[inline]
pub fn release_no_preempt() {
    release_no_preempt_on(current());
}

/// [`release_no_preempt`] on the calling thread's own block `cb`.
#[inline]
pub(crate) fn release_no_preempt_on(cb: &ContextBlock) {
    debug_assert!(
        std::ptr::eq(cb, current()),
        "another thread's context block"
    );
    native::on_release_no_preempt(cb);
    if cb.release_no_preempt() {
        yield_warned();
    }
}

/// The yield a warned thread owes at the end of its request, out of line: the
/// unlock that ends a request stays small enough to be inlined.
#[cold]
#[inline(never)]
fn yield_warned() {
    yield_now();
}

/// Ends a no-preempt request under which nothing was held — a `try_lock` that
/// failed — and, unlike [`release_no_preempt`], never yields: a warning that
/// arrived meanwhile asks the thread to give back the extension of a critical
/// section, and there was none. Preemptable again, the thread is taken by the
/// scheduler at its next look (the emulated backend re-checks a warned thread
/// every 200 µs; the kernel at its next tick). Nests as `release_no_preempt`.
#[inline]
pub fn cancel_no_preempt() {
    cancel_no_preempt_on(current());
}

/// [`cancel_no_preempt`] on the calling thread's own block `cb`.
#[inline]
pub(crate) fn cancel_no_preempt_on(cb: &ContextBlock) {
    debug_assert!(
        std::ptr::eq(cb, current()),
        "another thread's context block"
    );
    native::on_release_no_preempt(cb);
    // The warning is left to the scheduler, which clears it when it stops us.
    let _warned = cb.release_no_preempt();
}

/// RAII form of [`request_no_preempt`]/[`release_no_preempt`]. Not `Send`: the
/// request belongs to the thread that made it.
#[derive(Debug)]
#[must_use = "the no-preempt section ends when this guard is dropped"]
pub struct NoPreempt(PhantomData<*mut ()>);

impl NoPreempt {
    /// Enters a no-preempt section.
    #[inline]
    pub fn new() -> Self {
        request_no_preempt();
        Self(PhantomData)
    }
}

impl Default for NoPreempt {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for NoPreempt {
    #[inline]
    fn drop(&mut self) {
        release_no_preempt();
    }
}

/// Gives up the processor. On an emulated virtual processor this hands it to the
/// other applications for their quanta; natively it is `sched_yield`.
#[inline]
pub fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    match current_if_registered() {
        Some(cb) if emulated::is_attached(cb) => emulated::yield_attached(cb),
        _ => native::yield_now(),
    }
}

/// Whether `cb`'s thread is (believed) off its processor while it still wants
/// to run: the scheduler says so (`Preempted`), or — natively — the kernel does
/// (the eBPF program on `sched_switch`, see [`native::preemption_answers`]), or,
/// where the kernel does not answer, its heartbeat is stale. A thread blocked
/// in the kernel (a futex, I/O) is not preempted.
#[inline]
pub fn is_preempted(cb: &ContextBlock) -> bool {
    cb.state() == ThreadState::Preempted
        || match native::kernel_preempted(cb) {
            Some(p) => p,
            None => native::presumed_preempted(cb),
        }
}

/// Whether `cb`'s thread published a heartbeat that is now stale (older than
/// [`native::heartbeat_threshold`]): presumed preempted, judged without the
/// scheduler's help (He, Scherer & Scott's time-published locks). A thread that
/// never published is not presumed preempted.
#[inline]
pub fn heartbeat_stale(cb: &ContextBlock) -> bool {
    native::presumed_preempted(cb)
}

/// Publishes the calling thread's heartbeat ("I am running").
#[inline]
pub fn heartbeat() {
    current().publish_heartbeat();
}

/// Sleeps while `*word == expected`, at most `timeout`. May return spuriously.
#[inline]
pub fn park(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> ParkResult {
    futex::wait(word, expected, timeout)
}

/// Wakes one thread parked on `word`; returns how many were woken.
#[inline]
pub fn unpark_one(word: &AtomicU32) -> usize {
    futex::wake(word, 1)
}

/// Wakes every thread parked on `word`; returns how many were woken.
#[inline]
pub fn unpark_all(word: &AtomicU32) -> usize {
    futex::wake(word, i32::MAX)
}

/// [`park`] on a word in memory shared with other processes (a `MAP_SHARED`
/// segment): the kernel finds the sleeper by the word's page, so an
/// [`unpark_shared_all`] from any process that maps it wakes it. Slower than
/// [`park`] for words private to this process.
#[inline]
pub fn park_shared(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> ParkResult {
    futex::wait_shared(word, expected, timeout)
}

/// The most words one [`park_shared_any`] sleeps on.
pub const PARK_SHARED_ANY_MAX: usize = futex::WAIT_ANY_MAX;

/// [`park_shared`] on several words at once: sleeps while every `word` still
/// holds its `expected` value — until any of them is woken by
/// [`unpark_shared_all`] (from any process mapping it), a signal, or `timeout`
/// (`None`: no limit). May return spuriously; the caller re-checks. Returns
/// [`ParkResult::Mismatch`] if some word already differs (no sleep). The
/// words may lie in different shared mappings (a client of [`crate::msgq`]
/// waits on its endpoint's doorbell and on its connection's reply bell).
///
/// Linux's `futex_waitv` (5.16+) does it in one sleep, each word keyed by its
/// page as in [`park_shared`], the timeout an absolute `CLOCK_MONOTONIC` time
/// (a wait restarted after a signal handler keeps its deadline). Where the
/// kernel has no `futex_waitv` (it answers ENOSYS, or a seccomp filter EPERM;
/// tried once per process), a fallback checks every word, then
/// [`park_shared`]s on the **first** for at most 1 ms at a time and looks at
/// every word between those sleeps: a change of any word is seen within about
/// a millisecond, a wake of the first at once; the cost is a wake-up per
/// millisecond while it sleeps. Put the word most likely to be rung first. (A
/// wake of another word *without a change of its value* is not seen by the
/// fallback; the futex protocol changes the word before waking anyway.)
///
/// On every backend this is the kernel's sleep (an emulated scheduler's
/// preemption signal interrupts and restarts it, as it does [`park_shared`]);
/// under loom, a model as strict as [`park`]'s: a lost wake-up is a deadlock.
///
/// # Panics
/// If `words` is empty or holds more than [`PARK_SHARED_ANY_MAX`] words: a
/// programming error of the caller (mpsync's own callers pass two), not a
/// condition to handle.
///
/// ```
/// use mpsync::sched::{self, ParkResult};
/// use mpsync::sync::AtomicU32;
/// use std::time::Duration;
///
/// let (doorbell, reply) = (AtomicU32::new(0), AtomicU32::new(7));
/// // `reply` already differs from what we expected: no sleep.
/// let r = sched::park_shared_any(&[(&doorbell, 0), (&reply, 6)], None);
/// assert_eq!(r, ParkResult::Mismatch);
/// let r = sched::park_shared_any(
///     &[(&doorbell, 0), (&reply, 7)],
///     Some(Duration::from_millis(1)),
/// );
/// assert_eq!(r, ParkResult::TimedOut);
/// ```
#[inline]
pub fn park_shared_any(words: &[(&AtomicU32, u32)], timeout: Option<Duration>) -> ParkResult {
    assert!(
        (1..=PARK_SHARED_ANY_MAX).contains(&words.len()),
        "park_shared_any: {} words; it sleeps on 1 to {PARK_SHARED_ANY_MAX}",
        words.len()
    );
    futex::wait_any_shared(words, timeout)
}

/// Wakes every thread, of any process, parked on the shared `word` by
/// [`park_shared`] or [`park_shared_any`]; returns how many were woken.
#[inline]
pub fn unpark_shared_all(word: &AtomicU32) -> usize {
    futex::wake_shared(word, i32::MAX)
}

/// The application's partition now: the emulated scheduler's while one runs,
/// the machine's otherwise.
pub fn partition() -> Partition {
    partition::emulated().unwrap_or_else(native::poll_partition)
}

/// Unit tests' context block that no thread owns and the eBPF program never
/// registered (the kernel does not answer for it: heartbeats and the state
/// word only). Context blocks are never freed (the registry's contract); this
/// one is kept reachable from a static, as the registry keeps its own, so that
/// Miri's leak check accepts it.
#[cfg(all(test, not(loom)))]
pub(crate) fn unregistered_block() -> &'static ContextBlock {
    static KEEP: std::sync::Mutex<Vec<&'static ContextBlock>> = std::sync::Mutex::new(Vec::new());
    let cb: &'static ContextBlock = Box::leak(Box::new(ContextBlock::new()));
    KEEP.lock().unwrap_or_else(|e| e.into_inner()).push(cb);
    assert_eq!(
        native::kernel_preempted(cb),
        None,
        "the kernel answers for a block nobody registered"
    );
    cb
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn nested_no_preempt_clears_only_at_outermost() {
        let cb = current();
        assert_eq!(cb.state(), ThreadState::Preemptable);
        request_no_preempt();
        request_no_preempt();
        assert_eq!(cb.depth(), 2);
        release_no_preempt();
        assert!(cb.no_preempt_requested());
        // Natively a depth count: the state word is not touched.
        assert_eq!(cb.state(), ThreadState::Preemptable);
        release_no_preempt();
        assert!(!cb.no_preempt_requested());
        assert_eq!(cb.state(), ThreadState::Preemptable);
        assert_eq!(cb.depth(), 0);
    }

    #[test]
    fn peer_handoff_then_release() {
        let cb = ContextBlock::new();
        assert!(cb.make_other_unpreemptable());
        assert_eq!(cb.state(), ThreadState::OtherUnpreemptable);
        cb.request_no_preempt();
        assert_eq!(cb.state(), ThreadState::OtherUnpreemptable);
        assert!(!cb.release_no_preempt());
        assert_eq!(cb.state(), ThreadState::Preemptable);
    }

    #[test]
    fn preempted_thread_cannot_be_handed_a_lock() {
        let cb = ContextBlock::new();
        cb.transition(
            ThreadState::Preemptable,
            ThreadState::Preempted,
            Actor::Kernel,
        )
        .unwrap();
        assert!(!cb.make_other_unpreemptable());
        assert!(is_preempted(&cb));
    }

    #[test]
    fn threads_get_distinct_blocks_and_reuse_them() {
        let main_id = current().id();
        let (id, addr) = std::thread::spawn(|| {
            let cb = current();
            (cb.id(), cb as *const ContextBlock as usize)
        })
        .join()
        .unwrap();
        assert_ne!(id, main_id);
        let addr2 = std::thread::spawn(|| current() as *const ContextBlock as usize)
            .join()
            .unwrap();
        // The exited thread's block is free again; some block is reused, never freed.
        assert!(live_threads().iter().all(|b| b.id() != id));
        let _ = (addr, addr2);
    }

    #[test]
    fn park_mismatch_and_timeout() {
        let w = AtomicU32::new(1);
        assert_eq!(park(&w, 0, None), ParkResult::Mismatch);
        assert_eq!(
            park(&w, 1, Some(Duration::from_millis(1))),
            ParkResult::TimedOut
        );
        assert_eq!(unpark_all(&w), 0);
    }
}
