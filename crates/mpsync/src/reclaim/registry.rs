//! The per-thread records of a reclamation domain: a lock-free, push-only list.
//!
//! A thread that joins a domain claims a free record (CAS on its `in_use` flag) or,
//! if none is free, pushes a new one at the head. A thread that leaves clears the
//! flag, and the next thread to join reuses the record. Records are never unlinked
//! or freed while the domain lives, so a scanner may walk the list at any time
//! without protection of its own; the registry's `Drop` frees them all.

use std::ptr::{self, NonNull};

use crate::sync::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use crate::util::CachePadded;

/// One thread's slot in a domain. `data` is owned by the thread holding `in_use`
/// for its writes, and read by any scanner.
pub(crate) struct Record<T> {
    pub(crate) data: CachePadded<T>,
    in_use: AtomicBool,
    /// Set once before the record is published, never changed.
    next: *mut Record<T>,
}

/// A push-only list of records; see the module doc.
pub(crate) struct Registry<T> {
    head: AtomicPtr<Record<T>>,
    len: AtomicUsize,
}

// SAFETY: the registry hands out `&Record<T>` to several threads, which read `data`
// concurrently (so `T: Sync`) and free it from whichever thread drops the registry
// (so `T: Send`); the raw pointers are owned by the list and only freed in `Drop`.
unsafe impl<T: Send + Sync> Send for Registry<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for Registry<T> {}

impl<T: Default> Registry<T> {
    pub(crate) fn new() -> Self {
        Self {
            head: AtomicPtr::new(ptr::null_mut()),
            len: AtomicUsize::new(0),
        }
    }

    /// Claims a free record, or adds a new one. The caller owns it until
    /// [`release`](Self::release).
    pub(crate) fn acquire(&self) -> NonNull<Record<T>> {
        for r in self.iter() {
            // Relaxed test first: only a hint that avoids a useless CAS.
            // Acquire on the CAS pairs with the Release store in `release`: the last
            // owner's writes to `data` are visible to the new owner.
            if !r.in_use.load(Ordering::Relaxed)
                && r.in_use
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return NonNull::from(r);
            }
        }
        let rec = Box::into_raw(Box::new(Record {
            data: CachePadded::new(T::default()),
            in_use: AtomicBool::new(true),
            next: ptr::null_mut(),
        }));
        // Relaxed: the count only sizes scan thresholds; a stale value is harmless.
        self.len.fetch_add(1, Ordering::Relaxed);
        // Relaxed: the value is only a guess for the CAS below, which re-checks it.
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: `rec` is ours alone until the CAS below publishes it.
            unsafe { (*rec).next = head };
            // Release: publishes the record's initialized fields to `iter`'s Acquire
            // load of `head`.
            match self
                .head
                .compare_exchange(head, rec, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(h) => head = h,
            }
        }
        // SAFETY: just allocated, never null.
        unsafe { NonNull::new_unchecked(rec) }
    }
}

impl<T> Registry<T> {
    /// Gives a record back. Its `data` must already be in the state a new owner
    /// expects (no hazards, not pinned).
    ///
    /// # Safety
    /// `rec` came from `acquire` on this registry and the caller stops using it.
    pub(crate) unsafe fn release(&self, rec: NonNull<Record<T>>) {
        // SAFETY: records live until the registry drops; the caller's contract.
        let r = unsafe { rec.as_ref() };
        // Release: the leaving owner's writes to `data` are visible to the next
        // owner, whose Acquire CAS in `acquire` pairs with this store.
        r.in_use.store(false, Ordering::Release);
    }

    /// Every record ever added, in use or not (a snapshot of the list).
    pub(crate) fn iter(&self) -> Iter<'_, T> {
        Iter {
            // Acquire: pairs with the Release CAS in `acquire`, so every record
            // reached (and its `next`) is fully initialized.
            cur: self.head.load(Ordering::Acquire),
            _registry: self,
        }
    }

    /// How many records exist (in use or not).
    pub(crate) fn len(&self) -> usize {
        // Relaxed: a size hint (see `acquire`).
        self.len.load(Ordering::Relaxed)
    }
}

impl<T> Drop for Registry<T> {
    fn drop(&mut self) {
        // `&mut self`: no thread holds a record any more (every owner holds the
        // domain). Relaxed: exclusive access; nothing to synchronize with.
        let mut cur = self.head.load(Ordering::Relaxed);
        while !cur.is_null() {
            // SAFETY: every record was made by `Box::into_raw` in `acquire` and is
            // freed only here, once.
            let b = unsafe { Box::from_raw(cur) };
            cur = b.next;
        }
    }
}

impl<T> std::fmt::Debug for Registry<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("records", &self.len())
            .finish()
    }
}

/// Iterator over a registry's records.
pub(crate) struct Iter<'a, T> {
    cur: *mut Record<T>,
    _registry: &'a Registry<T>,
}

impl<'a, T> Iterator for Iter<'a, T> {
    type Item = &'a Record<T>;

    fn next(&mut self) -> Option<&'a Record<T>> {
        if self.cur.is_null() {
            return None;
        }
        // SAFETY: records reached from `head` are initialized (Acquire in `iter`,
        // `next` set before publication) and live as long as the registry.
        let r = unsafe { &*self.cur };
        self.cur = r.next;
        Some(r)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::AtomicU64;

    #[test]
    fn records_are_reused_after_release() {
        let reg: Registry<AtomicU64> = Registry::new();
        let a = reg.acquire();
        let b = reg.acquire();
        assert_ne!(a, b);
        assert_eq!(reg.len(), 2);
        // SAFETY: `a` came from `reg` and is no longer used.
        unsafe { reg.release(a) };
        let c = reg.acquire();
        assert_eq!(
            a, c,
            "a released record is claimed before a new one is made"
        );
        assert_eq!(reg.len(), 2);
        assert_eq!(reg.iter().count(), 2);
        // SAFETY: as above.
        unsafe {
            reg.release(b);
            reg.release(c);
        }
    }

    #[test]
    fn concurrent_acquire_gives_distinct_records() {
        let reg: Registry<AtomicU64> = Registry::new();
        let ptrs: Vec<usize> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3)
                .map(|_| s.spawn(|| reg.acquire().as_ptr() as usize))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut sorted = ptrs.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 3);
        assert_eq!(reg.iter().count(), 3);
    }
}
