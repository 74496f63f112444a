//! QSBR: quiescent-state-based reclamation; the application announces quiescent
//! states.
//!
//! McKenney & Slingwine's RCU grace periods as used by Hart, papers/002_… §4.1.1
//! and Figure 4.5. A registered thread is always "online": it may hold references
//! at any point except where it calls [`Local::quiescent`]. Each quiescent state
//! re-pins the thread at the current global epoch (a store and a fence); a thread
//! with nodes pending then tries to advance the epoch and frees its limbo lists
//! that are three epochs old (the epoch machinery is shared with EBR, `epoch.rs`).
//! Operations themselves cost nothing: [`Local::enter`] and
//! [`protect`](Guard::protect) are plain loads.
//!
//! Progress: retiring and protecting never wait. Reclamation is blocking: **a
//! registered thread that does not announce quiescent states (preempted, busy, or
//! stopped for good) stops every thread's reclamation, and pending nodes grow
//! without bound** (Hart Figure 4.7). A thread that will be idle for long should
//! drop its [`QsbrLocal`] (leave) and register again later.
//! Uses `sched`: nothing.

use crate::sync::{Arc, AtomicPtr, Ordering};

use super::epoch::{EpochDomain, EpochThread};
use super::limbo::Retired;
use super::{Guard, Local, LocalCell, ReclaimStats, Reclaimer};

/// A quiescent-state-based reclamation domain.
///
/// ```
/// use mpsync::reclaim::{Guard, Local, Qsbr, Reclaimer};
/// use mpsync::sync::Arc;
///
/// let qsbr = Arc::new(Qsbr::new());
/// let mut local = Qsbr::register(&qsbr);
/// // SAFETY: a node nobody else can reach.
/// unsafe { local.enter().retire_box(Box::into_raw(Box::new(5u64))) };
/// for _ in 0..3 {
///     local.quiescent(); // each advances the epoch here (one thread)
/// }
/// assert_eq!(qsbr.stats().freed, 1);
/// ```
#[derive(Debug)]
pub struct Qsbr {
    core: EpochDomain,
}

impl Qsbr {
    /// An empty domain.
    pub fn new() -> Self {
        Self {
            core: EpochDomain::new(),
        }
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

impl Default for Qsbr {
    fn default() -> Self {
        Self::new()
    }
}

impl Reclaimer for Qsbr {
    type Local = QsbrLocal;
    /// Zero-sized: QSBR keep nothing per node.
    type Header = ();
    const NAME: &'static str = "QSBR";

    #[cfg(not(loom))]
    fn register(self: &Arc<Self>) -> QsbrLocal {
        QsbrLocal::new(self)
    }

    #[cfg(loom)]
    fn register(this: &Arc<Self>) -> QsbrLocal {
        QsbrLocal::new(this)
    }

    #[inline]
    fn owns(&self, local: &QsbrLocal) -> bool {
        std::ptr::eq(self, &*local.domain)
    }

    fn stats(&self) -> ReclaimStats {
        self.core.stats()
    }
}

/// A thread's registration in a [`Qsbr`] domain: online from registration until
/// dropped (leaving).
#[derive(Debug)]
pub struct QsbrLocal {
    domain: Arc<Qsbr>,
    /// The epoch record, shared with the live guards (which retire into it).
    thread: LocalCell<EpochThread>,
}

impl QsbrLocal {
    fn new(domain: &Arc<Qsbr>) -> Self {
        let mut thread = EpochThread::join(&domain.core);
        // Online from now on: pinned until leaving, re-pinned at each quiescent state.
        let expired = thread.pin(&domain.core);
        debug_assert!(!expired, "a thread joins with empty bags");
        Self {
            domain: domain.clone(),
            thread: LocalCell::new(thread),
        }
    }

    /// Nodes this thread retired that are not yet freed.
    pub fn pending(&self) -> usize {
        self.thread.with(|t| t.pending())
    }

    /// Frees the expired nodes a re-join or a retire took out of the state
    /// (outside [`LocalCell::with`]: their drops may re-enter this
    /// registration, or panic).
    #[cold]
    #[inline(never)]
    fn free_expired(&self) {
        let garbage = self.thread.with(|t| t.take_garbage());
        // SAFETY: expired (`pin`, `retire`); the registration holds its record.
        unsafe { garbage.free() }.resume();
    }
}

impl Local for QsbrLocal {
    type Header = ();
    type Guard<'a> = QsbrGuard<'a>;

    #[inline(always)]
    fn header(&self) {}

    /// Nothing to do while the thread is online; after [`park`](Local::park),
    /// re-joins at the current epoch first (a validated pin). Several guards
    /// need nothing more: the thread stays online until `quiescent` or `park`,
    /// which take `&mut self` and so wait for every guard to drop.
    ///
    /// Re-joining frees what expired meanwhile, once the thread is online
    /// again and the guard made: a value's `Drop` run there may use this
    /// registration, and a panic leaves through the guard.
    #[inline]
    fn enter(&self) -> QsbrGuard<'_> {
        let core = &self.domain.core;
        let expired = self.thread.with(|t| !t.is_pinned() && t.pin(core));
        let guard = QsbrGuard { local: self };
        if expired {
            self.free_expired();
        }
        guard
    }

    /// Announces a quiescent state: re-pins at the current epoch, and, if this
    /// thread has nodes pending or threads that left did, tries to advance the
    /// epoch and frees what expired.
    ///
    /// # Panics
    /// If a value's `Drop` (or a deferred closure) panics as it is freed —
    /// after every other node of the batch was freed; the thread is online
    /// (re-pinned) as after any quiescent state.
    fn quiescent(&mut self) {
        let core = &self.domain.core;
        let t = self.thread.get_mut();
        let _ = t.pin(core);
        if t.pending() > 0 || core.has_orphans() {
            let _ = t.collect(core);
        }
        let garbage = t.take_garbage();
        // SAFETY: expired (`pin`, `collect`); the registration holds its record.
        unsafe { garbage.free() }.resume();
    }

    /// Offline until the next `enter` or `quiescent`: an unpin, so the epoch can
    /// advance past this thread while it does nothing.
    fn park(&mut self) {
        self.thread.get_mut().unpin();
    }
}

impl Drop for QsbrLocal {
    fn drop(&mut self) {
        self.thread.get_mut().leave(&self.domain.core);
    }
}

/// A QSBR operation: no state of its own (the thread is online throughout).
#[derive(Debug)]
pub struct QsbrGuard<'a> {
    local: &'a QsbrLocal,
}

impl Guard for QsbrGuard<'_> {
    type Header = ();

    #[inline(always)]
    fn header(&self) {}

    #[inline]
    fn protect_raw<T>(&self, _slot: usize, src: &AtomicPtr<T>) -> *mut T {
        // Acquire: pairs with the Release store/CAS that published the node. The
        // node stays allocated until this thread's next quiescent state.
        src.load(Ordering::Acquire)
    }

    #[inline]
    fn release(&mut self, _slot: usize) {}

    /// Retires into the bag of the thread's epoch; frees the bag that reuse
    /// finds expired after the retire is recorded.
    unsafe fn retire_raw_with(&self, ptr: *mut u8, arg: *mut u8, free: unsafe fn(*mut u8)) {
        let expired = self
            .local
            .thread
            .with(|t| t.retire(Retired::with(ptr, arg, free)));
        if expired {
            self.local.free_expired();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn retire_one(l: &mut QsbrLocal) {
        // SAFETY: a fresh box nobody else can reach.
        unsafe { l.enter().retire_box(Box::into_raw(Box::new([7u8; 16]))) };
    }

    #[test]
    fn a_silent_thread_blocks_reclamation_until_it_announces() {
        let d = Arc::new(Qsbr::new());
        let mut a = Qsbr::register(&d);
        let mut b = Qsbr::register(&d);
        for _ in 0..5 {
            retire_one(&mut a);
            a.quiescent();
        }
        let s = d.stats();
        assert_eq!(
            (s.retired, s.freed, s.pending),
            (5, 0, 5),
            "b never announced"
        );
        b.quiescent();
        for _ in 0..3 {
            a.quiescent();
            b.quiescent();
        }
        let s = d.stats();
        assert_eq!((s.retired, s.freed, s.pending), (5, 5, 0));
        assert_eq!(a.pending(), 0);
    }

    #[test]
    fn leaving_unblocks_and_hands_over() {
        let d = Arc::new(Qsbr::new());
        let mut a = Qsbr::register(&d);
        let b = Qsbr::register(&d);
        retire_one(&mut a);
        a.quiescent();
        drop(b); // the silent thread leaves
        retire_one(&mut a);
        drop(a); // leaves with nodes pending: the domain takes them
        assert_eq!(d.stats().retired, 2);
        let mut c = Qsbr::register(&d);
        retire_one(&mut c);
        for _ in 0..4 {
            c.quiescent();
        }
        let s = d.stats();
        assert_eq!((s.retired, s.freed, s.pending), (3, 3, 0));
        assert_eq!(d.records(), 2);
    }
}
