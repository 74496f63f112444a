//! Pieces shared by the non-blocking structures ([`MsQueue`](super::ms_queue::MsQueue),
//! [`PljQueue`](super::plj_queue::PljQueue), [`TreiberStack`](super::treiber::TreiberStack)).
//!
//! - [`CasBackoff`]: the bounded exponential backoff that every non-blocking
//!   algorithm of paper 000 runs after a failed CAS ("all non-blocking
//!   implementations also use bounded exponential backoff … not to exceed 30 µs",
//!   Michael & Scott 1997 §4, papers/000_…), built lazily so an uncontended
//!   operation pays nothing for it.
//! - [`AutoQuiescent`]: Hart's test loop (papers/002_… §5.1) announces a quiescent
//!   state every [`QUIESCENT_EVERY`] operations; the structures' handles do the
//!   same, so QSBR makes progress without the caller's help.
//! - [`ValueCell`] and [`Liveness`]: a node's payload slot (a loom-tracked cell
//!   under loom) and, under loom only, a "this node was freed" flag, so the loom models catch a node used
//!   after its reclaimer freed it (zero-sized otherwise).
//!
//! Uses `util` (backoff) and `reclaim` (the `Local` trait); nothing from `sched`:
//! the algorithms never wait for another thread, they only retry.

use std::mem::MaybeUninit;

use super::alloc::NodeAlloc;
use crate::reclaim::{Local, Reclaimer};
use crate::util::backoff::{Backoff, DEFAULT_CAP_NS, DEFAULT_MIN_NS};
use crate::util::busy::BusyWork;
use crate::util::unwind::{Caught, each};

/// Panics unless `local` is a registration in `domain`, the structure's own.
/// Every operation that takes an explicit `Local` calls it first: a registration
/// in another domain would protect nothing (a use after free from safe code).
/// `op` names the operation, for the message.
#[inline(always)]
#[track_caller]
pub(crate) fn check_local<R: Reclaimer>(domain: &R, local: &R::Local, op: &'static str) {
    if !domain.owns(local) {
        foreign_local(op);
    }
}

#[cold]
#[inline(never)]
#[track_caller]
fn foreign_local(op: &'static str) -> ! {
    panic!(
        "{op}: `local` is registered with another reclamation domain than this structure's; \
         register it with `R::register(x.domain())` (or use `x.handle()`)"
    )
}

/// Frees the nodes of a chain that a structure owns as it is dropped, first to
/// last: `next` reads a node's successor (before the node is freed), `free`
/// frees the node and drops the value it still holds, if any. A value whose
/// `Drop` panics stops none of the others: every node is freed, and the first
/// panic is returned, for the caller to resume when it is done (later ones are
/// dropped).
///
/// # Safety
/// Every node reachable from `first` through `next` is live and owned by the
/// caller, and `free` may be called once on each.
pub(crate) unsafe fn free_chain<N>(
    first: *mut N,
    next: impl Fn(*mut N) -> *mut N,
    free: impl FnMut(*mut N),
) -> Caught {
    let mut p = first;
    let nodes = std::iter::from_fn(move || {
        if p.is_null() {
            return None;
        }
        let n = p;
        p = next(n);
        Some(n)
    });
    each(nodes, free)
}

/// The `Drop` of a linked structure whose nodes come from `A`: frees the nodes
/// from `first` on ([`free_chain`]), giving each back to `A` before dropping
/// the value `value` takes out of it (`None` for a dummy), which may panic:
/// every node is freed, then the first panic goes on.
///
/// # Safety
/// As [`free_chain`]; every node was made by `A::alloc::<N>`, and `value` may
/// be called once on each.
pub(crate) unsafe fn drop_list<N, T, A: NodeAlloc>(
    first: *mut N,
    next: impl Fn(*mut N) -> *mut N,
    mut value: impl FnMut(*mut N) -> Option<T>,
) {
    // SAFETY: the caller's contract.
    unsafe {
        free_chain(first, next, |n| {
            let v = value(n);
            A::free::<N>(n.cast());
            drop(v);
        })
    }
    .resume();
}

/// Operations between two automatic quiescent states (Hart: 100).
pub const QUIESCENT_EVERY: u32 = 100;

/// Bounded exponential backoff after a failed CAS: 100 ns doubling to 30 µs of
/// calibrated busy work (paper 000 §4). Created empty; the first
/// [`spin`](Self::spin) sets it up, so the common, uncontended path costs nothing.
#[derive(Debug, Default)]
pub struct CasBackoff(Option<Backoff>);

impl CasBackoff {
    /// No backoff yet.
    #[inline]
    pub const fn new() -> Self {
        Self(None)
    }

    /// Waits for the current interval (doubling up to the cap for next time).
    #[cold]
    pub fn spin(&mut self) {
        self.0
            .get_or_insert_with(|| {
                // Never the calibration itself (~40 ms) on a failed CAS: the
                // nominal rate until something (the harness, at start-up) measured.
                let w = BusyWork::global_or_nominal();
                Backoff::from_iters(
                    w.iters_for_ns(DEFAULT_MIN_NS),
                    w.iters_for_ns(DEFAULT_CAP_NS),
                )
            })
            .spin();
    }
}

/// Counts a handle's operations and announces a quiescent state every
/// [`QUIESCENT_EVERY`] of them (Hart's test loop).
///
/// ```
/// use mpsync::ds::lf::{AutoQuiescent, QUIESCENT_EVERY};
/// use mpsync::reclaim::{Qsbr, Reclaimer};
/// use mpsync::sync::Arc;
///
/// let d = Arc::new(Qsbr::new());
/// let mut local = Qsbr::register(&d);
/// let mut q = AutoQuiescent::new();
/// let announced = (0..2 * QUIESCENT_EVERY).filter(|_| q.tick(&mut local)).count();
/// assert_eq!(announced, 2);
/// ```
#[derive(Debug, Default, Clone)]
pub struct AutoQuiescent {
    ops: u32,
}

impl AutoQuiescent {
    /// No operations counted yet.
    pub const fn new() -> Self {
        Self { ops: 0 }
    }

    /// Counts one operation; every [`QUIESCENT_EVERY`]-th calls
    /// `local.quiescent()` and returns `true`. Call it only between operations
    /// (no guard alive, no node reference kept).
    #[inline]
    pub fn tick<L: Local>(&mut self, local: &mut L) -> bool {
        self.ops += 1;
        if self.ops >= QUIESCENT_EVERY {
            self.ops = 0;
            local.quiescent();
            true
        } else {
            false
        }
    }

    /// An explicit quiescent state: announces it and restarts the count.
    pub fn now<L: Local>(&mut self, local: &mut L) {
        self.ops = 0;
        local.quiescent();
    }
}

#[cfg(not(loom))]
type Inner<T> = std::cell::UnsafeCell<MaybeUninit<T>>;
#[cfg(loom)]
type Inner<T> = loom::cell::UnsafeCell<MaybeUninit<T>>;

/// A node's payload: written once before the node is published, moved out once
/// by the thread whose CAS removed it (or dropped by the structure's `Drop`).
/// Under loom it is a tracked cell, so a read not ordered after the write is
/// reported as a data race.
pub struct ValueCell<T>(Inner<T>);

impl<T> std::fmt::Debug for ValueCell<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ValueCell(..)")
    }
}

impl<T> ValueCell<T> {
    /// A cell holding `v`.
    pub fn new(v: T) -> Self {
        Self(Inner::new(MaybeUninit::new(v)))
    }

    /// A cell holding nothing (a dummy node).
    pub fn empty() -> Self {
        Self(Inner::new(MaybeUninit::uninit()))
    }

    /// Puts `v` in an empty cell (a ring queue's cell, reused).
    ///
    /// # Safety
    /// The cell is empty (made by [`empty`](Self::empty), or its value was
    /// taken), the caller owns it exclusively, and the last take happens
    /// before this call.
    pub unsafe fn write(&self, v: T) {
        #[cfg(not(loom))]
        // SAFETY: the contract: empty (nothing overwritten), ours alone.
        unsafe {
            (*self.0.get()).write(v);
        }
        #[cfg(loom)]
        // SAFETY: as above; loom checks the ordering.
        self.0.with_mut(|p| unsafe {
            (*p).write(v);
        });
    }

    /// Moves the value out.
    ///
    /// # Safety
    /// The cell holds a value (made by [`new`](Self::new)), which is taken once:
    /// the caller owns it exclusively from now on, and the cell's write happens
    /// before this call.
    pub unsafe fn take(&self) -> T {
        #[cfg(not(loom))]
        // SAFETY: the contract: initialized, taken once, write ordered before.
        return unsafe { (*self.0.get()).assume_init_read() };
        #[cfg(loom)]
        // SAFETY: as above; loom checks the ordering.
        return self.0.with(|p| unsafe { (*p).assume_init_read() });
    }
}

/// Under loom, a node's liveness flag: [`check`](Self::check) at every
/// dereference of a shared node, `kill` when a test allocator "frees"
/// it. Zero-sized and free otherwise.
///
/// The flag is a loom atomic, not a tracked cell, on purpose: loom switches
/// threads only at atomic operations, so plain accesses between a CAS and the next
/// atomic look indivisible to it, and a free that lands in exactly that window
/// (e.g. between a dequeuer's CAS and its read of the value) would never be
/// explored. A `SeqCst` load in `check` is a switch point, so the model does put
/// another thread's free there, and the load then sees it.
///
/// Nodes of the mpsync structures are `#[repr(C)]` with the `Liveness` first, so a
/// test allocator may call `kill` on any node address it is asked to free.
pub struct Liveness {
    #[cfg(loom)]
    freed: crate::sync::AtomicBool,
}

impl std::fmt::Debug for Liveness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Liveness")
    }
}

impl Default for Liveness {
    fn default() -> Self {
        Self::new()
    }
}

impl Liveness {
    /// A live node.
    #[inline]
    pub fn new() -> Self {
        Self {
            #[cfg(loom)]
            freed: crate::sync::AtomicBool::new(false),
        }
    }

    /// Under loom: asserts the node was not freed (a switch point; see the type's
    /// doc). A no-op otherwise.
    #[inline(always)]
    pub fn check(&self) {
        // SeqCst: a test-only flag; the strongest ordering keeps the check from
        // missing a free that the model ordered before it.
        #[cfg(loom)]
        assert!(
            !self.freed.load(crate::sync::Ordering::SeqCst),
            "a node was used after it was freed"
        );
    }

    /// Marks the node at `p` freed.
    ///
    /// # Safety
    /// `p` is the address of a live mpsync node (whose first field is a
    /// `Liveness`), and its memory stays allocated until the model ends.
    #[cfg(loom)]
    pub unsafe fn kill(p: *mut u8) {
        // SAFETY: the contract: `p` starts with a `Liveness`.
        let l = unsafe { &*p.cast::<Liveness>() };
        // SeqCst: as in `check`.
        l.freed.store(true, crate::sync::Ordering::SeqCst);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::reclaim::{Qsbr, Reclaimer};
    use crate::sync::Arc;

    #[test]
    fn auto_quiescent_every_hundred() {
        let d = Arc::new(Qsbr::new());
        let mut local = Qsbr::register(&d);
        let mut q = AutoQuiescent::new();
        let hits: Vec<u32> = (1..=250u32).filter(|_| q.tick(&mut local)).collect();
        assert_eq!(hits.len(), 2);
        q.now(&mut local);
        assert!(!q.tick(&mut local));
    }

    #[test]
    fn value_cell_moves_out_once() {
        let c = ValueCell::new(String::from("v"));
        // SAFETY: holds a value, taken once, on this thread.
        assert_eq!(unsafe { c.take() }, "v");
        let _empty = ValueCell::<String>::empty(); // dropping an empty cell drops nothing
        Liveness::new().check();
    }

    #[test]
    fn backoff_spins() {
        let mut b = CasBackoff::new();
        b.spin();
        b.spin();
        assert!(format!("{b:?}").contains("CasBackoff"));
    }
}
