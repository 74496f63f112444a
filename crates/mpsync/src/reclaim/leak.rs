//! `Leak`: never reclaims while the domain lives — the measurement baseline.
//!
//! Hart, papers/002_… chapter 5 measures each scheme's overhead against running
//! without reclamation. `Leak` keeps retired nodes in a per-thread list (one
//! vector push per retire, no shared writes) and frees them only when the domain
//! drops, so a run's cost excludes reclamation but its memory is given back and
//! tools such as Miri see no leak. Never use it outside measurements: memory grows
//! with every retire. Uses `sched`: nothing.

use std::ptr::NonNull;

use crate::sync::{Arc, AtomicPtr, Ordering};

use super::limbo::{Counters, Orphans, Retired};
use super::registry::{Record, Registry};
use super::{Guard, Local, LocalCell, ReclaimStats, Reclaimer};

/// A domain that frees retired nodes only when it is dropped.
///
/// ```
/// use mpsync::reclaim::{Guard, Leak, Local, Reclaimer};
/// use mpsync::sync::Arc;
///
/// let leak = Arc::new(Leak::new());
/// let mut local = Leak::register(&leak);
/// // SAFETY: a node nobody else can reach.
/// unsafe { local.enter().retire_box(Box::into_raw(Box::new(1u8))) };
/// local.quiescent();
/// assert_eq!(leak.stats().pending, 1);
/// drop((local, leak)); // freed here
/// ```
#[derive(Debug)]
pub struct Leak {
    registry: Registry<Counters>,
    orphans: Orphans,
}

impl Leak {
    /// An empty domain.
    pub fn new() -> Self {
        Self {
            registry: Registry::new(),
            orphans: Orphans::new(),
        }
    }
}

impl Default for Leak {
    fn default() -> Self {
        Self::new()
    }
}

impl Reclaimer for Leak {
    type Local = LeakLocal;
    /// Zero-sized: the leaking baseline keeps nothing per node.
    type Header = ();
    const NAME: &'static str = "Leak";

    #[cfg(not(loom))]
    fn register(self: &Arc<Self>) -> LeakLocal {
        LeakLocal::new(self)
    }

    #[cfg(loom)]
    fn register(this: &Arc<Self>) -> LeakLocal {
        LeakLocal::new(this)
    }

    #[inline]
    fn owns(&self, local: &LeakLocal) -> bool {
        std::ptr::eq(self, &*local.domain)
    }

    fn stats(&self) -> ReclaimStats {
        let mut s = ReclaimStats::default();
        for r in self.registry.iter() {
            r.data.add_to(&mut s);
        }
        self.orphans.add_to(&mut s);
        s
    }
}

/// A thread's registration in a [`Leak`] domain; dropping it hands its retired
/// nodes to the domain.
#[derive(Debug)]
pub struct LeakLocal {
    domain: Arc<Leak>,
    rec: NonNull<Record<Counters>>,
    /// Shared with the live guards, which retire into it.
    retired: LocalCell<Vec<Retired>>,
}

// SAFETY: the record is owned by this handle and lives as long as the domain,
// which the handle keeps alive; retired nodes are `Send`.
unsafe impl Send for LeakLocal {}

impl LeakLocal {
    fn new(domain: &Arc<Leak>) -> Self {
        Self {
            rec: domain.registry.acquire(),
            domain: domain.clone(),
            retired: LocalCell::new(Vec::new()),
        }
    }

    fn counters(&self) -> &Counters {
        // SAFETY: the record lives as long as the domain, which `self` holds.
        &unsafe { self.rec.as_ref() }.data
    }
}

impl Local for LeakLocal {
    type Header = ();
    type Guard<'a> = LeakGuard<'a>;

    #[inline(always)]
    fn header(&self) {}

    #[inline]
    fn enter(&self) -> LeakGuard<'_> {
        LeakGuard { local: self }
    }

    /// A no-op.
    fn quiescent(&mut self) {}
}

impl Drop for LeakLocal {
    fn drop(&mut self) {
        let nodes = std::mem::take(self.retired.get_mut());
        self.domain.orphans.push(nodes, 0, self.counters());
        // SAFETY: `rec` came from this registry and is no longer used.
        unsafe { self.domain.registry.release(self.rec) };
    }
}

/// A [`Leak`] operation: loads are plain, retires are kept.
#[derive(Debug)]
pub struct LeakGuard<'a> {
    local: &'a LeakLocal,
}

impl Guard for LeakGuard<'_> {
    type Header = ();

    #[inline(always)]
    fn header(&self) {}

    #[inline]
    fn protect_raw<T>(&self, _slot: usize, src: &AtomicPtr<T>) -> *mut T {
        // Acquire: pairs with the Release store/CAS that published the node; nodes
        // are never freed while the domain lives.
        src.load(Ordering::Acquire)
    }

    #[inline]
    fn release(&mut self, _slot: usize) {}

    unsafe fn retire_raw_with(&self, ptr: *mut u8, arg: *mut u8, free: unsafe fn(*mut u8)) {
        self.local
            .retired
            .with(|r| r.push(Retired::with(ptr, arg, free)));
        self.local.counters().retired(1);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn keeps_everything_until_the_domain_drops() {
        let d = Arc::new(Leak::new());
        let mut a = Leak::register(&d);
        for i in 0..3u32 {
            // SAFETY: fresh boxes nobody else can reach.
            unsafe { a.enter().retire_box(Box::into_raw(Box::new(i))) };
            a.quiescent();
        }
        drop(a);
        let s = d.stats();
        assert_eq!((s.retired, s.freed, s.pending), (3, 0, 3));
        assert_eq!(Leak::NAME, "Leak");
        drop(d); // Miri checks the three boxes are freed
    }
}
