//! Retired nodes waiting to be freed, their counters, and the domain's list of
//! nodes handed over by threads that left.

use std::ptr;

use crate::sync::{AtomicPtr, AtomicU64, Ordering};

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

/// Frees every node in `nodes`, returning how many.
///
/// # Safety
/// As [`Retired::free`], for each node.
pub(crate) unsafe fn free_all(nodes: Vec<Retired>) -> u64 {
    let n = nodes.len() as u64;
    for r in nodes {
        // SAFETY: the caller's contract.
        unsafe { r.free() };
    }
    n
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
    /// thread is registered any more.
    pub(crate) fn free_everything(&mut self) {
        for b in self.take_all() {
            // SAFETY: the domain is being dropped, so no thread can reach any node.
            let n = unsafe { free_all(b.nodes) };
            self.freed(n);
        }
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
