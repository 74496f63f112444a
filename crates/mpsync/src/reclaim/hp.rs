//! Hazard pointers: Michael's safe memory reclamation (SMR).
//!
//! Michael, *Hazard pointers: safe memory reclamation for lock-free objects*, IEEE
//! TPDS 2004; Hart, papers/002_… §4.1.2 and Figure 4.4. Each thread owns `K` hazard
//! slots. [`protect`](Guard::protect) publishes the pointer it loaded, fences, and
//! re-reads the source until it is unchanged: from then on the node cannot be freed.
//! Retired nodes go to a private list; when it reaches `R` nodes (by default
//! `R = 2H + 100`, `H` = hazard slots of all threads) the thread scans: it copies
//! every non-null hazard into an array, sorts it, and frees each retired node that
//! a binary search does not find.
//!
//! Progress: everything is wait-free except `protect`, which is lock-free (it
//! retries only when the source changed). **Bounded memory**, even when threads
//! stall forever in the middle of an operation: a thread's list holds at most `R`
//! nodes (after a scan at most `H` survive, those protected), so at most `N·R`
//! retired nodes are unfreed with `N` threads retiring (Michael §3.2), plus the
//! at most `H` per thread handed over by threads that left, which the next scan
//! adopts. Uses `sched`: nothing.

use std::ptr::{self, NonNull};

use crate::sched::stall;
use crate::sync::{Arc, AtomicPtr, Ordering, fence};

use super::limbo::{Counters, Orphans, Retired};
use super::registry::{Record, Registry};
use super::{Guard, Local, ReclaimError, ReclaimStats, Reclaimer};

/// Most hazard slots a thread may have.
pub const HP_MAX_SLOTS: usize = 16;
/// Hazard slots per thread of [`HazardPointers::default`].
pub const HP_DEFAULT_SLOTS: usize = 3;

/// A thread's hazard slots and counters.
struct HpRecord {
    slots: [AtomicPtr<u8>; HP_MAX_SLOTS],
    counters: Counters,
}

impl Default for HpRecord {
    fn default() -> Self {
        Self {
            slots: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            counters: Counters::default(),
        }
    }
}

/// A hazard-pointer domain: `K` slots per thread.
///
/// ```
/// use mpsync::reclaim::{Guard, HazardPointers, Local, Reclaimer};
/// use mpsync::sync::{Arc, AtomicPtr, Ordering};
///
/// let hp = Arc::new(HazardPointers::with_threshold(2, 1).unwrap()); // scan at every retire
/// let shared = AtomicPtr::new(Box::into_raw(Box::new(41u64)));
/// let (mut reader, mut writer) = (HazardPointers::register(&hp), HazardPointers::register(&hp));
/// let mut r = reader.enter();
/// let p = r.protect(0, &shared);
/// let old = shared.swap(std::ptr::null_mut(), Ordering::AcqRel); // unlink
/// // SAFETY: `old` is unlinked, retired once, made by `Box`.
/// unsafe { writer.enter().retire_box(old) };
/// assert_eq!(unsafe { *p }, 41); // still protected: not freed
/// assert_eq!(hp.stats().pending, 1);
/// drop(r);
/// writer.scan();
/// assert_eq!(hp.stats().freed, 1);
/// assert!(HazardPointers::new(0).is_err());
/// ```
#[derive(Debug)]
pub struct HazardPointers {
    k: usize,
    /// `None`: `2H + 100`, recomputed as threads join.
    threshold: Option<usize>,
    registry: Registry<HpRecord>,
    orphans: Orphans,
}

impl HazardPointers {
    /// A domain with `k` hazard slots per thread and the default scan threshold
    /// `R = 2H + 100`. Errors unless `1 <= k <= 16`.
    pub fn new(k: usize) -> Result<Self, ReclaimError> {
        if !(1..=HP_MAX_SLOTS).contains(&k) {
            return Err(ReclaimError::HazardSlots(k));
        }
        Ok(Self {
            k,
            threshold: None,
            registry: Registry::new(),
            orphans: Orphans::new(),
        })
    }

    /// A domain with `k` hazard slots per thread that scans when a thread has `r`
    /// retired nodes. Errors unless `1 <= k <= 16` and `r >= 1`. (An `r` below
    /// `H + 1` is correct but scans without the amortized bound on work.)
    pub fn with_threshold(k: usize, r: usize) -> Result<Self, ReclaimError> {
        if r == 0 {
            return Err(ReclaimError::ZeroScanThreshold);
        }
        let mut d = Self::new(k)?;
        d.threshold = Some(r);
        Ok(d)
    }

    /// Hazard slots per thread (`K`).
    pub fn slots_per_thread(&self) -> usize {
        self.k
    }

    /// Hazard slots of all threads' records (`H = K · records`).
    pub fn total_slots(&self) -> usize {
        self.k * self.registry.len()
    }

    /// Threads' records (joined now or earlier; records are reused).
    pub fn records(&self) -> usize {
        self.registry.len()
    }

    /// Retired nodes at which a thread scans (`R`): the fixed threshold, or
    /// `2H + 100` for the threads registered so far.
    pub fn scan_threshold(&self) -> usize {
        self.threshold
            .unwrap_or_else(|| 2 * self.total_slots() + 100)
    }
}

impl Default for HazardPointers {
    /// [`HP_DEFAULT_SLOTS`] slots per thread, `R = 2H + 100`.
    fn default() -> Self {
        Self::new(HP_DEFAULT_SLOTS).expect("default slots are in range")
    }
}

impl Reclaimer for HazardPointers {
    type Local = HpLocal;
    const NAME: &'static str = "HP";

    #[cfg(not(loom))]
    fn register(self: &Arc<Self>) -> HpLocal {
        HpLocal::new(self)
    }

    #[cfg(loom)]
    fn register(this: &Arc<Self>) -> HpLocal {
        HpLocal::new(this)
    }

    #[inline]
    fn owns(&self, local: &HpLocal) -> bool {
        std::ptr::eq(self, &*local.domain)
    }

    fn stats(&self) -> ReclaimStats {
        let mut s = ReclaimStats::default();
        for r in self.registry.iter() {
            r.data.counters.add_to(&mut s);
        }
        self.orphans.add_to(&mut s);
        s
    }
}

/// A thread's registration in a [`HazardPointers`] domain: its slots and its list
/// of retired nodes. Dropping it scans once more, then hands what is still
/// protected to the domain.
#[derive(Debug)]
pub struct HpLocal {
    domain: Arc<HazardPointers>,
    rec: NonNull<Record<HpRecord>>,
    rlist: Vec<Retired>,
    /// The scan's array of hazards, kept to avoid reallocating.
    scratch: Vec<*mut u8>,
}

// SAFETY: the record is owned by this handle (its `in_use` flag) and lives as long
// as the domain, which the handle keeps alive; retired nodes are `Send`; `scratch`
// holds addresses only, never dereferenced.
unsafe impl Send for HpLocal {}

impl HpLocal {
    fn new(domain: &Arc<HazardPointers>) -> Self {
        Self {
            rec: domain.registry.acquire(),
            domain: domain.clone(),
            rlist: Vec::new(),
            scratch: Vec::new(),
        }
    }

    fn record(&self) -> &HpRecord {
        // SAFETY: the record lives as long as the domain, which `self` holds.
        &unsafe { self.rec.as_ref() }.data
    }

    /// Nodes this thread retired (or adopted) that are not yet freed.
    pub fn pending(&self) -> usize {
        self.rlist.len()
    }

    /// Michael's `Scan`: adopts nodes of threads that left, then frees every
    /// retired node that no hazard slot holds. Returns the number freed.
    pub fn scan(&mut self) -> u64 {
        let d = &*self.domain;
        // SAFETY: as in `record` (a field borrow, disjoint from `rlist`/`scratch`).
        let rec = &unsafe { self.rec.as_ref() }.data;
        if !d.orphans.is_empty() {
            for b in d.orphans.take_all() {
                d.orphans.adopted(b.nodes.len() as u64, &rec.counters);
                self.rlist.extend(b.nodes);
            }
        }
        if self.rlist.is_empty() {
            return 0;
        }
        // SeqCst fence: pairs with `protect`'s fence (store-load): a hazard
        // published before it is seen below; a protector that fences after it
        // re-reads the source and sees the unlink, so it does not use the node.
        fence(Ordering::SeqCst);
        self.scratch.clear();
        for r in d.registry.iter() {
            for s in &r.data.slots[..d.k] {
                // Acquire: pairs with the Release stores to slots in `protect`,
                // `release` and the guard's drop, so the accesses made under an
                // earlier protection happen before the frees below.
                let p = s.load(Ordering::Acquire);
                if !p.is_null() {
                    self.scratch.push(p);
                }
            }
        }
        self.scratch.sort_unstable();
        let mut freed = 0;
        let mut i = 0;
        while i < self.rlist.len() {
            if self.scratch.binary_search(&self.rlist[i].ptr).is_ok() {
                i += 1;
            } else {
                let r = self.rlist.swap_remove(i);
                // SAFETY: unlinked before it was retired, and no hazard held it after
                // the fence above (see the fence's comment), so no thread reaches it.
                unsafe { r.free() };
                freed += 1;
            }
        }
        rec.counters.freed(freed);
        freed
    }
}

impl Local for HpLocal {
    type Guard<'a> = HpGuard<'a>;

    /// Nothing to do until `protect`; the guard clears its slots when dropped.
    #[inline]
    fn enter(&mut self) -> HpGuard<'_> {
        HpGuard {
            local: self,
            used: 0,
        }
    }

    /// A no-op: hazard pointers need no quiescent states.
    fn quiescent(&mut self) {}
}

impl Drop for HpLocal {
    fn drop(&mut self) {
        self.scan();
        let rest = std::mem::take(&mut self.rlist);
        let d = &*self.domain;
        d.orphans.push(rest, 0, &self.record().counters);
        for s in &self.record().slots[..d.k] {
            // Release: as in `release`.
            s.store(ptr::null_mut(), Ordering::Release);
        }
        // SAFETY: `rec` came from this registry; its slots are clear and this handle
        // no longer touches it.
        unsafe { d.registry.release(self.rec) };
    }
}

/// One operation's hazard slots; dropping it clears the slots it used.
#[derive(Debug)]
pub struct HpGuard<'a> {
    local: &'a mut HpLocal,
    /// Bit `i` set: slot `i` may be non-null.
    used: u32,
}

impl Guard for HpGuard<'_> {
    fn protect<T>(&mut self, slot: usize, src: &AtomicPtr<T>) -> *mut T {
        let k = self.local.domain.k;
        assert!(
            slot < k,
            "hazard slot {slot} out of range: this domain has {k} slots per thread"
        );
        let mask = std::mem::align_of::<T>() - 1;
        let hp = &self.local.record().slots[slot];
        self.used |= 1 << slot;
        // Relaxed: only a candidate; it is validated below after the hazard is set.
        let mut p = src.load(Ordering::Relaxed);
        loop {
            stall::point(stall::HP_PROTECT_LOADED);
            // Release: accesses made under this slot's previous protection happen
            // before a scanner that reads this value (its Acquire load in `scan`).
            hp.store(p.cast::<u8>().map_addr(|a| a & !mask), Ordering::Release);
            // SeqCst fence: pairs with the fence in `scan` (see there).
            fence(Ordering::SeqCst);
            stall::point(stall::HP_PROTECT_PUBLISHED);
            // Acquire: pairs with the Release store/CAS that published the node.
            let q = src.load(Ordering::Acquire);
            if q == p {
                return p;
            }
            p = q;
        }
    }

    fn release(&mut self, slot: usize) {
        let k = self.local.domain.k;
        assert!(
            slot < k,
            "hazard slot {slot} out of range: this domain has {k} slots per thread"
        );
        // Release: the accesses made under this protection happen before a scanner
        // that reads the null (its Acquire load in `scan`).
        self.local.record().slots[slot].store(ptr::null_mut(), Ordering::Release);
        self.used &= !(1 << slot);
    }

    unsafe fn retire_raw(&mut self, ptr: *mut u8, free: unsafe fn(*mut u8)) {
        let l = &mut *self.local;
        l.rlist.push(Retired::new(ptr, free));
        l.record().counters.retired(1);
        if l.rlist.len() >= l.domain.scan_threshold() {
            l.scan();
        }
    }
}

impl Drop for HpGuard<'_> {
    fn drop(&mut self) {
        let mut used = self.used;
        while used != 0 {
            let i = used.trailing_zeros() as usize;
            used &= used - 1;
            // Release: as in `release`.
            self.local.record().slots[i].store(ptr::null_mut(), Ordering::Release);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn boxed(v: u64) -> *mut u64 {
        Box::into_raw(Box::new(v))
    }

    #[test]
    fn parameters_are_checked() {
        assert_eq!(
            HazardPointers::new(0).unwrap_err(),
            ReclaimError::HazardSlots(0)
        );
        assert_eq!(
            HazardPointers::new(17).unwrap_err(),
            ReclaimError::HazardSlots(17)
        );
        assert!(HazardPointers::new(16).is_ok());
        assert_eq!(
            HazardPointers::with_threshold(2, 0).unwrap_err(),
            ReclaimError::ZeroScanThreshold
        );
        let d = HazardPointers::default();
        assert_eq!(d.slots_per_thread(), HP_DEFAULT_SLOTS);
        assert_eq!(d.scan_threshold(), 100, "no thread yet: H = 0");
    }

    #[test]
    fn threshold_follows_registered_threads() {
        let d = Arc::new(HazardPointers::new(2).unwrap());
        let a = HazardPointers::register(&d);
        let b = HazardPointers::register(&d);
        assert_eq!(d.total_slots(), 4);
        assert_eq!(d.scan_threshold(), 2 * 4 + 100);
        drop((a, b));
    }

    #[test]
    fn protected_nodes_survive_scans_and_tagged_pointers_protect() {
        let d = Arc::new(HazardPointers::with_threshold(2, 1).unwrap());
        let mut r = HazardPointers::register(&d);
        let mut w = HazardPointers::register(&d);
        let n = boxed(1);
        // A tagged pointer (low bit set) protects its node.
        let src = AtomicPtr::new(n.map_addr(|a| a | 1));
        let mut g = r.enter();
        let p = g.protect(1, &src);
        assert_eq!(p.map_addr(|a| a & !1), n);
        // SAFETY: `n` is unlinked (we pretend `src` no longer leads to it), retired once.
        unsafe { w.enter().retire_box(n) };
        assert_eq!(w.scan(), 0, "protected");
        assert_eq!(w.pending(), 1);
        // SAFETY: still protected.
        assert_eq!(unsafe { *n }, 1);
        g.release(1);
        assert_eq!(w.scan(), 1);
        drop(g);
        let s = d.stats();
        assert_eq!((s.retired, s.freed, s.pending), (1, 1, 0));
    }

    #[test]
    fn leaving_hands_protected_nodes_over_and_the_next_scan_adopts_them() {
        let d = Arc::new(HazardPointers::new(1).unwrap());
        let mut r = HazardPointers::register(&d);
        let mut w = HazardPointers::register(&d);
        let n = boxed(2);
        let src = AtomicPtr::new(n);
        let mut g = r.enter();
        g.protect(0, &src);
        // SAFETY: as above.
        unsafe { w.enter().retire_box(n) };
        drop(w); // scans, cannot free, hands over
        assert_eq!(d.stats().pending, 1);
        drop(g);
        assert_eq!(r.scan(), 1, "adopted and freed");
        // A node left pending when the domain drops is freed by it (Miri: no leak).
        let mut g = r.enter();
        // SAFETY: as above.
        unsafe { g.retire_box(boxed(3)) };
        drop(g);
        drop(r);
        assert_eq!(d.stats().retired, 2);
        drop(d);
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn slot_out_of_range_panics() {
        let d = Arc::new(HazardPointers::new(1).unwrap());
        let mut l = HazardPointers::register(&d);
        let src = AtomicPtr::new(ptr::null_mut::<u64>());
        l.enter().protect(1, &src);
    }
}
