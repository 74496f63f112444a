//! Retired nodes waiting to be freed, their counters, and the domain's list of
//! nodes handed over by threads that left.

use std::ptr;

use crate::sync::{AtomicPtr, AtomicU64, Ordering};
use crate::util::unwind::{Caught, each};

/// A retired node: its address (what hazard pointers compare with their slots),
/// and the function that frees it with its argument (the node itself, or the
/// boxed closure of [`Guard::retire_with`](super::Guard::retire_with)).
pub(crate) struct Retired {
    pub(crate) ptr: *mut u8,
    arg: *mut u8,
    free: unsafe fn(*mut u8),
}

// SAFETY: `Guard::retire_raw`'s contract makes `free(ptr)` callable from any thread
// (`retire_box` requires `T: Send`), and a retired node is reachable from no other
// thread's new operations, so moving the record between threads is sound.
unsafe impl Send for Retired {}

impl std::fmt::Debug for Retired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Retired").field(&self.ptr).finish()
    }
}

impl Retired {
    #[cfg(all(test, not(loom)))]
    pub(crate) fn new(ptr: *mut u8, free: unsafe fn(*mut u8)) -> Self {
        Self::with(ptr, ptr, free)
    }

    /// A node `ptr` whose reclamation is `free(arg)`.
    pub(crate) fn with(ptr: *mut u8, arg: *mut u8, free: unsafe fn(*mut u8)) -> Self {
        Self { ptr, arg, free }
    }

    /// Frees the node.
    ///
    /// # Safety
    /// The scheme has established that no thread can still reach the node.
    pub(crate) unsafe fn free(self) {
        // SAFETY: the caller's contract, and `retire_raw`'s contract on `free`.
        unsafe { (self.free)(self.arg) }
    }
}

/// Nodes a registration has decided to free, taken out of its state: freeing
/// runs code the registration does not control (values' `Drop`s, deferred
/// closures), which may re-enter the registration (through a thread-local) or
/// panic. So a scheme changes its state first — takes the nodes out, pins,
/// counts the guard — and frees the garbage after, outside
/// [`LocalCell::with`](super::LocalCell): a re-entrant operation then finds the
/// registration consistent (pinned while a guard lives, its retired list whole),
/// and a panic finds nothing half-done.
#[must_use = "garbage must be freed (`free`), or its nodes leak"]
pub(crate) struct Garbage {
    nodes: Vec<Retired>,
    /// The record's counters that count the frees (null while `nodes` is empty
    /// and nothing was added).
    counters: *const Counters,
}

impl Garbage {
    /// Nothing to free.
    #[inline]
    pub(crate) const fn none() -> Self {
        Self {
            nodes: Vec::new(),
            counters: ptr::null(),
        }
    }

    /// Nothing to free yet, with room for `n` nodes ([`push`](Self::push)).
    #[inline]
    pub(crate) fn with_capacity(n: usize) -> Self {
        Self {
            nodes: Vec::with_capacity(n),
            counters: ptr::null(),
        }
    }

    /// Adds `nodes`, whose frees `counters` (the caller's record) will count.
    #[inline]
    pub(crate) fn add(&mut self, nodes: Vec<Retired>, counters: &Counters) {
        if nodes.is_empty() {
            return;
        }
        debug_assert!(self.counters.is_null() || ptr::eq(self.counters, counters));
        self.counters = counters;
        if self.nodes.is_empty() {
            self.nodes = nodes;
        } else {
            self.nodes.extend(nodes);
        }
    }

    /// Adds one node (see [`add`](Self::add)).
    #[inline]
    pub(crate) fn push(&mut self, node: Retired, counters: &Counters) {
        self.counters = counters;
        self.nodes.push(node);
    }

    /// Nodes to free.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Frees every node — also those after one whose free panicked — and counts
    /// them freed; returns the first panic, for the caller to resume once its
    /// own state is consistent (see [`each`]).
    ///
    /// # Safety
    /// As [`Retired::free`], for each node; and the counters given to
    /// [`add`](Self::add) are still alive (the caller's registration holds the
    /// domain, and has not given its record back).
    #[inline]
    pub(crate) unsafe fn free(self) -> Caught {
        if self.nodes.is_empty() {
            return Caught::none();
        }
        // SAFETY: the caller's contract.
        unsafe { self.free_nodes() }
    }

    /// [`free`](Self::free) of a non-empty batch.
    ///
    /// # Safety
    /// As `free`.
    #[inline(never)]
    unsafe fn free_nodes(self) -> Caught {
        let n = self.nodes.len() as u64;
        // SAFETY: each node once (`each` consumes it); the caller's contract.
        let caught = each(self.nodes.into_iter(), |r| unsafe { r.free() });
        // SAFETY: the caller's contract: the record is alive. Counted after
        // the frees: a free run in between (re-entrant) counts its own batch
        // completely first (the counters have one writer, this thread).
        unsafe { &*self.counters }.freed(n);
        caught
    }
}

impl std::fmt::Debug for Garbage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Garbage")
            .field("nodes", &self.nodes.len())
            .finish()
    }
}

/// A thread's reclamation counters. Written only by the record's owner (plain
/// load + store), read by anyone summing statistics.
#[derive(Default)]
pub(crate) struct Counters {
    retired: AtomicU64,
    freed: AtomicU64,
    pending: AtomicU64,
}

impl Counters {
    fn bump(c: &AtomicU64, by: u64, up: bool) {
        // Relaxed (both): statistics with a single writer; readers want a value,
        // not an ordering.
        let v = c.load(Ordering::Relaxed);
        c.store(if up { v + by } else { v - by }, Ordering::Relaxed);
    }

    /// One node retired (now pending).
    pub(crate) fn retired(&self, n: u64) {
        Self::bump(&self.retired, n, true);
        Self::bump(&self.pending, n, true);
    }

    /// `n` pending nodes freed.
    pub(crate) fn freed(&self, n: u64) {
        Self::bump(&self.freed, n, true);
        Self::bump(&self.pending, n, false);
    }

    /// `n` pending nodes handed to the domain (no longer this record's).
    pub(crate) fn handed_over(&self, n: u64) {
        Self::bump(&self.pending, n, false);
    }

    /// `n` nodes adopted from the domain (now this record's).
    pub(crate) fn adopted(&self, n: u64) {
        Self::bump(&self.pending, n, true);
    }

    /// Adds this record's counts to `s`.
    pub(crate) fn add_to(&self, s: &mut super::ReclaimStats) {
        // Relaxed: a statistics snapshot (see `ReclaimStats`).
        s.retired += self.retired.load(Ordering::Relaxed);
        s.freed += self.freed.load(Ordering::Relaxed);
        s.pending += self.pending.load(Ordering::Relaxed);
    }
}

/// A batch of nodes handed over by a thread that left, with the epoch it retired
/// them in (unused by hazard pointers and `Leak`).
pub(crate) struct Batch {
    pub(crate) nodes: Vec<Retired>,
    pub(crate) tag: u64,
    next: *mut Batch,
}

/// Nodes of threads that left, shared by the domain: a lock-free stack of batches
/// (push one, take all — no ABA, since nothing is popped singly), with counters
/// that any thread updates.
pub(crate) struct Orphans {
    head: AtomicPtr<Batch>,
    freed: AtomicU64,
    pending: AtomicU64,
}

impl Orphans {
    pub(crate) fn new() -> Self {
        Self {
            head: AtomicPtr::new(ptr::null_mut()),
            freed: AtomicU64::new(0),
            pending: AtomicU64::new(0),
        }
    }

    /// Hands `nodes` (retired in epoch `tag`) to the domain; `from` loses them.
    pub(crate) fn push(&self, nodes: Vec<Retired>, tag: u64, from: &Counters) {
        if nodes.is_empty() {
            return;
        }
        let n = nodes.len() as u64;
        // Relaxed: statistics; the nodes themselves travel with the CAS below.
        self.pending.fetch_add(n, Ordering::Relaxed);
        from.handed_over(n);
        self.push_batch(Box::new(Batch {
            nodes,
            tag,
            next: ptr::null_mut(),
        }));
    }

    /// Puts back a batch taken by [`take_all`](Self::take_all), counts unchanged.
    pub(crate) fn push_batch(&self, b: Box<Batch>) {
        let b = Box::into_raw(b);
        // Relaxed: only a guess for the CAS.
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: `b` is ours until the CAS publishes it.
            unsafe { (*b).next = head };
            // Release: publishes the batch (and its nodes' retirement) to the
            // Acquire CAS in `take_all`.
            match self
                .head
                .compare_exchange_weak(head, b, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// Whether there is nothing to adopt (a hint).
    pub(crate) fn is_empty(&self) -> bool {
        // Relaxed: a hint; `take_all` does the synchronizing.
        self.head.load(Ordering::Relaxed).is_null()
    }

    /// Takes every batch. (A CAS loop rather than `swap`: see `sync`'s note on
    /// loom's `swap`.)
    // Boxed: a batch not yet expired is pushed back as the same allocation.
    #[allow(clippy::vec_box)]
    pub(crate) fn take_all(&self) -> Vec<Box<Batch>> {
        // Relaxed: only a guess for the CAS, whose success ordering acquires.
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            if head.is_null() {
                return Vec::new();
            }
            // Acquire: pairs with the Release CAS in `push_batch`.
            match self.head.compare_exchange_weak(
                head,
                ptr::null_mut(),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(h) => head = h,
            }
        }
        let mut out = Vec::new();
        while !head.is_null() {
            // SAFETY: the batches were made by `Box::into_raw` in `push_batch` and the
            // successful CAS made this thread their only owner.
            let mut b = unsafe { Box::from_raw(head) };
            head = std::mem::replace(&mut b.next, ptr::null_mut());
            out.push(b);
        }
        out
    }

    /// `n` orphaned nodes were freed.
    pub(crate) fn freed(&self, n: u64) {
        if n > 0 {
            // Relaxed (both): statistics.
            self.freed.fetch_add(n, Ordering::Relaxed);
            self.pending.fetch_sub(n, Ordering::Relaxed);
        }
    }

    /// `n` orphaned nodes were adopted by `to`.
    pub(crate) fn adopted(&self, n: u64, to: &Counters) {
        if n > 0 {
            // Relaxed: statistics.
            self.pending.fetch_sub(n, Ordering::Relaxed);
            to.adopted(n);
        }
    }

    /// Adds the domain's own counts to `s`.
    pub(crate) fn add_to(&self, s: &mut super::ReclaimStats) {
        // Relaxed: a statistics snapshot.
        s.freed += self.freed.load(Ordering::Relaxed);
        s.pending += self.pending.load(Ordering::Relaxed);
    }

    /// Frees every orphan. `&mut self`: called from the domain's `Drop`, when no
    /// thread is registered any more. A node whose free panics does not stop
    /// the others: all are freed, then the first panic goes on.
    pub(crate) fn free_everything(&mut self) {
        let mut n = 0;
        let nodes = self.take_all().into_iter().flat_map(|b| b.nodes);
        let caught = each(nodes, |r| {
            n += 1;
            // SAFETY: the domain is being dropped, so no thread can reach any
            // node; each is freed once (`each` consumes it).
            unsafe { r.free() }
        });
        self.freed(n);
        caught.resume();
    }
}

impl std::fmt::Debug for Orphans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Orphans")
            // Relaxed: a debugging snapshot.
            .field("pending", &self.pending.load(Ordering::Relaxed))
            .finish()
    }
}

impl Drop for Orphans {
    fn drop(&mut self) {
        self.free_everything();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::reclaim::ReclaimStats;

    unsafe fn free_u32(p: *mut u8) {
        // SAFETY: the tests below retire only `Box<u32>` pointers.
        drop(unsafe { Box::from_raw(p.cast::<u32>()) });
    }

    #[test]
    fn orphans_move_counts_and_free_on_drop() {
        let c = Counters::default();
        let o = Orphans::new();
        let nodes: Vec<_> = (0..3u32)
            .map(|i| Retired::new(Box::into_raw(Box::new(i)).cast(), free_u32))
            .collect();
        c.retired(3);
        o.push(nodes, 7, &c);
        let mut s = ReclaimStats::default();
        c.add_to(&mut s);
        o.add_to(&mut s);
        assert_eq!(
            s,
            ReclaimStats {
                retired: 3,
                freed: 0,
                pending: 3
            }
        );
        let mut batches = o.take_all();
        assert_eq!(batches.len(), 1);
        assert_eq!(batches[0].tag, 7);
        assert!(o.is_empty());
        o.push_batch(batches.pop().unwrap());
        assert!(!o.is_empty());
        drop(o); // frees the three boxes (Miri checks for leaks)
    }
}
