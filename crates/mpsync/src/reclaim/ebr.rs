//! EBR: Fraser's epoch-based reclamation, three epochs, a critical section per
//! operation.
//!
//! Fraser, *Practical lock-freedom* (2004); Hart, papers/002_… §4.1.1 and Figure 4.6.
//! [`Local::enter`] pins the thread at the global epoch (a store and a fence) and
//! the guard's drop unpins it (a store). Every `advance_every`-th critical section
//! (100 by default) the thread tries to advance the global epoch and frees its limbo
//! lists that are three epochs old. The epoch machinery is shared with QSBR
//! (`epoch.rs`, where the orderings are argued).
//!
//! Progress: retiring and protecting never wait. Reclamation is blocking: **a thread
//! that stalls inside a critical section (preempted, or stopped for good) stops the
//! epoch, and pending nodes grow without bound** until it leaves the critical
//! section (Hart Figure 4.7). Threads outside critical sections never obstruct it.
//! Uses `sched`: nothing.

use crate::sync::{Arc, AtomicPtr, Ordering};

use super::epoch::{EpochDomain, EpochThread};
use super::limbo::Retired;
use super::{Guard, Local, LocalCell, ReclaimError, ReclaimStats, Reclaimer};

/// Critical sections between epoch-advance attempts by default.
pub const EBR_DEFAULT_ADVANCE_EVERY: u32 = 100;

/// An epoch-based reclamation domain.
///
/// ```
/// use mpsync::reclaim::{Ebr, Guard, Local, Reclaimer};
/// use mpsync::sync::Arc;
///
/// let ebr = Arc::new(Ebr::with_advance_every(1).unwrap());
/// let mut local = Ebr::register(&ebr);
/// {
///     let mut g = local.enter(); // critical section
///     // SAFETY: a node nobody else can reach.
///     unsafe { g.retire_box(Box::into_raw(Box::new(5u64))) };
/// }
/// for _ in 0..4 {
///     drop(local.enter()); // each critical section advances the epoch here
/// }
/// assert_eq!(ebr.stats().freed, 1);
/// assert!(Ebr::with_advance_every(0).is_err());
/// ```
#[derive(Debug)]
pub struct Ebr {
    core: EpochDomain,
    advance_every: u32,
}

impl Ebr {
    /// A domain that tries to advance the epoch every
    /// [`EBR_DEFAULT_ADVANCE_EVERY`] critical sections per thread.
    pub fn new() -> Self {
        Self {
            core: EpochDomain::new(),
            advance_every: EBR_DEFAULT_ADVANCE_EVERY,
        }
    }

    /// A domain that tries to advance the epoch every `n` critical sections per
    /// thread. Errors if `n` is zero.
    pub fn with_advance_every(n: u32) -> Result<Self, ReclaimError> {
        if n == 0 {
            return Err(ReclaimError::ZeroAdvanceInterval);
        }
        Ok(Self {
            core: EpochDomain::new(),
            advance_every: n,
        })
    }

    /// Critical sections per thread between epoch-advance attempts.
    pub fn advance_every(&self) -> u32 {
        self.advance_every
    }

    /// Threads' records (joined now or earlier; records are reused).
    pub fn records(&self) -> usize {
        self.core.records()
    }

    /// The global epoch now (a snapshot, for tests and diagnostics).
    pub fn epoch(&self) -> u64 {
        self.core.epoch()
    }
}

impl Default for Ebr {
    fn default() -> Self {
        Self::new()
    }
}

impl Reclaimer for Ebr {
    type Local = EbrLocal;
    /// Zero-sized: EBR keep nothing per node.
    type Header = ();
    const NAME: &'static str = "EBR";

    #[cfg(not(loom))]
    fn register(self: &Arc<Self>) -> EbrLocal {
        EbrLocal::new(self)
    }

    #[cfg(loom)]
    fn register(this: &Arc<Self>) -> EbrLocal {
        EbrLocal::new(this)
    }

    #[inline]
    fn owns(&self, local: &EbrLocal) -> bool {
        std::ptr::eq(self, &*local.domain)
    }

    fn stats(&self) -> ReclaimStats {
        self.core.stats()
    }
}

/// A thread's registration in an [`Ebr`] domain. Dropping it leaves the domain.
#[derive(Debug)]
pub struct EbrLocal {
    domain: Arc<Ebr>,
    state: LocalCell<EbrState>,
}

/// What an [`EbrLocal`] and its guards change.
#[derive(Debug)]
struct EbrState {
    thread: EpochThread,
    /// Critical sections until the next advance attempt.
    countdown: u32,
    /// Live guards: the thread is pinned while this is non-zero.
    depth: usize,
}

impl EbrLocal {
    fn new(domain: &Arc<Ebr>) -> Self {
        Self {
            state: LocalCell::new(EbrState {
                thread: EpochThread::join(&domain.core),
                countdown: domain.advance_every,
                depth: 0,
            }),
            domain: domain.clone(),
        }
    }

    /// Tries to advance the global epoch and frees what has become safe (this
    /// thread's limbo lists and nodes of threads that left). Returns the number
    /// of nodes freed. Call it outside any critical section.
    ///
    /// # Panics
    /// If a value's `Drop` (or a deferred closure) panics as it is freed —
    /// after every other node of the batch was freed.
    pub fn try_reclaim(&mut self) -> u64 {
        let thread = &mut self.state.get_mut().thread;
        let _ = thread.collect(&self.domain.core);
        let garbage = thread.take_garbage();
        let n = garbage.len() as u64;
        // SAFETY: expired (`collect`); the registration holds its record.
        unsafe { garbage.free() }.resume();
        n
    }

    /// Nodes this thread retired that are not yet freed.
    pub fn pending(&self) -> usize {
        self.state.with(|s| s.thread.pending())
    }

    /// Frees the expired nodes `enter` or a retire took out of the state
    /// (outside [`LocalCell::with`]: their drops may re-enter this
    /// registration, or panic).
    #[cold]
    #[inline(never)]
    fn free_expired(&self) {
        let garbage = self.state.with(|s| s.thread.take_garbage());
        // SAFETY: expired (`pin`, `collect`, `retire`); the registration holds
        // its record.
        unsafe { garbage.free() }.resume();
    }
}

impl Local for EbrLocal {
    type Header = ();
    type Guard<'a> = EbrGuard<'a>;

    #[inline(always)]
    fn header(&self) {}

    /// Pins the epoch, unless a guard of this registration already holds it
    /// pinned (nested guards share the outermost pin: re-pinning at a newer
    /// epoch would let the nodes the outer guard reads be freed).
    ///
    /// The outermost guard frees what has expired, after the pin is counted
    /// and the guard made: a value's `Drop` run there may use this
    /// registration (its guards nest in this one's pin), and if it panics the
    /// panic leaves `enter` through the guard's drop, which unpins.
    fn enter(&self) -> EbrGuard<'_> {
        let core = &self.domain.core;
        let advance_every = self.domain.advance_every;
        let expired = self.state.with(|s| {
            s.depth += 1;
            if s.depth > 1 {
                return false;
            }
            let mut expired = s.thread.pin(core);
            s.countdown -= 1;
            if s.countdown == 0 {
                s.countdown = advance_every;
                expired |= s.thread.collect(core);
            }
            expired
        });
        let guard = EbrGuard { local: self };
        if expired {
            self.free_expired();
        }
        guard
    }

    /// A no-op: EBR detects grace periods itself.
    fn quiescent(&mut self) {}
}

impl Drop for EbrLocal {
    fn drop(&mut self) {
        self.state.get_mut().thread.leave(&self.domain.core);
    }
}

/// An EBR critical section; dropping the last live guard of a registration
/// unpins the thread.
#[derive(Debug)]
pub struct EbrGuard<'a> {
    local: &'a EbrLocal,
}

impl Guard for EbrGuard<'_> {
    type Header = ();

    #[inline(always)]
    fn header(&self) {}

    #[inline]
    fn protect_raw<T>(&self, _slot: usize, src: &AtomicPtr<T>) -> *mut T {
        // Acquire: pairs with the Release store/CAS that published the node. The
        // pin (a SeqCst fence) already keeps the node alive for the whole guard.
        src.load(Ordering::Acquire)
    }

    #[inline]
    fn release(&mut self, _slot: usize) {}

    /// Retires into the bag of the pinned epoch; frees the bag that reuse
    /// finds expired after the retire is recorded (a panic there leaves
    /// through this guard, which unpins as it drops).
    unsafe fn retire_raw_with(&self, ptr: *mut u8, arg: *mut u8, free: unsafe fn(*mut u8)) {
        let expired = self
            .local
            .state
            .with(|s| s.thread.retire(Retired::with(ptr, arg, free)));
        if expired {
            self.local.free_expired();
        }
    }
}

impl Drop for EbrGuard<'_> {
    fn drop(&mut self) {
        self.local.state.with(|s| {
            s.depth -= 1;
            if s.depth == 0 {
                s.thread.unpin();
            }
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    static DROPS: AtomicUsize = AtomicUsize::new(0);
    struct Counted;
    impl Drop for Counted {
        fn drop(&mut self) {
            DROPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn retire_one(l: &mut EbrLocal) {
        let g = l.enter();
        // SAFETY: a fresh box nobody else can reach.
        unsafe { g.retire_box(Box::into_raw(Box::new(Counted))) };
    }

    #[test]
    fn frees_after_three_advances_and_not_while_another_is_pinned() {
        let d = Arc::new(Ebr::with_advance_every(1).unwrap());
        let mut a = Ebr::register(&d);
        let b = Ebr::register(&d);
        let before = DROPS.load(std::sync::atomic::Ordering::Relaxed);
        let held = b.enter(); // b is pinned at the current epoch
        retire_one(&mut a);
        for _ in 0..10 {
            a.try_reclaim();
        }
        let s = d.stats();
        assert_eq!(
            (s.retired, s.freed, s.pending),
            (1, 0, 1),
            "b pins the epoch"
        );
        drop(held);
        for _ in 0..3 {
            a.try_reclaim();
        }
        assert_eq!(d.stats().freed, 1);
        assert_eq!(a.pending(), 0);
        assert!(DROPS.load(std::sync::atomic::Ordering::Relaxed) > before);
        drop((a, b));
    }

    #[test]
    fn leaving_hands_nodes_to_the_domain_which_frees_them() {
        let d = Arc::new(Ebr::new());
        let mut a = Ebr::register(&d);
        retire_one(&mut a);
        retire_one(&mut a);
        drop(a);
        assert_eq!(d.stats().pending, 2);
        let mut b = Ebr::register(&d);
        assert_eq!(d.records(), 1, "the record is reused");
        for _ in 0..4 {
            b.try_reclaim();
        }
        let s = d.stats();
        assert_eq!((s.retired, s.freed, s.pending), (2, 2, 0));
        drop(b);
        // Nodes still pending when the domain drops are freed by it (Miri: no leak).
        let mut c = Ebr::register(&d);
        retire_one(&mut c);
        drop(c);
        drop(d);
    }

    #[test]
    fn zero_interval_is_an_error() {
        assert_eq!(
            Ebr::with_advance_every(0).unwrap_err(),
            ReclaimError::ZeroAdvanceInterval
        );
        assert_eq!(Ebr::default().advance_every(), EBR_DEFAULT_ADVANCE_EVERY);
    }
}
