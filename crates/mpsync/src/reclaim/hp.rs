//! Hazard pointers: Michael's safe memory reclamation (SMR).
//!
//! Michael, *Hazard pointers: safe memory reclamation for lock-free objects*, IEEE
//! TPDS 2004; Hart, papers/002_… §4.1.2 and Figure 4.4. Each thread owns hazard
//! slots, allocated on demand: a domain made with `K` gives every thread `K` slots
//! up front, and a [`protect`](Guard::protect) into a slot index beyond the
//! thread's slots adds blocks of [`HP_BLOCK_SLOTS`] (up to [`HP_MAX_SLOTS`], a
//! bound against runaway indices only). Blocks are chained to the thread's record
//! and kept with it when the thread leaves, so a thread that reuses the record
//! reuses them. [`protect`](Guard::protect) publishes the pointer it loaded, fences, and
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

use std::cell::Cell;
use std::ptr::{self, NonNull};

use crate::sched::stall;
use crate::sync::{Arc, AtomicPtr, AtomicUsize, Ordering, fence};

use super::limbo::{Counters, Garbage, Orphans, Retired};
use super::registry::{Record, Registry};
use super::{Guard, Local, LocalCell, ReclaimError, ReclaimStats, Reclaimer};

/// Most hazard slots a thread may have: slots are allocated on demand, and this
/// bound only turns a runaway slot index (a bug) into a clear panic instead of an
/// allocation of gigabytes.
pub const HP_MAX_SLOTS: usize = 4096;
/// Hazard slots per thread of [`HazardPointers::default`].
pub const HP_DEFAULT_SLOTS: usize = 3;
/// Hazard slots added at a time when a thread protects into a slot it does not
/// have yet (also the size of the block every record starts with).
pub const HP_BLOCK_SLOTS: usize = 4;

/// A block of hazard slots; a record's blocks form a chain that only grows.
struct SlotBlock {
    slots: [AtomicPtr<u8>; HP_BLOCK_SLOTS],
    /// The next block: null until the record's owner appends one (Release), read
    /// by scanners (Acquire); never changed again while the domain lives.
    next: AtomicPtr<SlotBlock>,
}

impl SlotBlock {
    fn new() -> Self {
        Self {
            slots: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            next: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// The blocks from this one on, following `next` (Acquire: pairs with the
    /// Release store in [`HpLocal::grow`], so a block reached is initialized).
    fn chain(&self) -> impl Iterator<Item = &SlotBlock> {
        std::iter::successors(Some(self), |b| {
            // SAFETY: a block reached from a record lives as long as the record
            // (freed only by `HpRecord::drop`, when the registry drops).
            unsafe { b.next.load(Ordering::Acquire).as_ref() }
        })
    }
}

/// A thread's hazard slots (a chain of blocks) and counters.
struct HpRecord {
    first: SlotBlock,
    /// The blocks of the guards entered while another guard of the owner lives
    /// (block `b - 1` for the guard in bank `b`), a chain of its own that only
    /// grows: null until the owner appends one (Release), read by scanners
    /// (Acquire).
    banks: AtomicPtr<SlotBlock>,
    /// Slots the record's owners asked for (the high-water mark, at least `K`
    /// once owned): what `H` counts. Written by the owner only; Relaxed, a size.
    wanted: AtomicUsize,
    counters: Counters,
}

impl Default for HpRecord {
    fn default() -> Self {
        Self {
            first: SlotBlock::new(),
            banks: AtomicPtr::new(ptr::null_mut()),
            wanted: AtomicUsize::new(0),
            counters: Counters::default(),
        }
    }
}

impl HpRecord {
    /// Every block of slots: the main chain, then the bank chain (Acquire: as in
    /// [`SlotBlock::chain`]).
    fn all_blocks(&self) -> impl Iterator<Item = &SlotBlock> {
        // SAFETY: a bank block lives as long as the record (see `Drop`).
        let banks = unsafe { self.banks.load(Ordering::Acquire).as_ref() };
        self.first
            .chain()
            .chain(banks.into_iter().flat_map(SlotBlock::chain))
    }
}

impl Drop for HpRecord {
    fn drop(&mut self) {
        // `&mut self`: the registry is dropping, nobody reads the chain. Relaxed:
        // exclusive access.
        for head in [&self.first.next, &self.banks] {
            let mut b = head.load(Ordering::Relaxed);
            while !b.is_null() {
                // SAFETY: every block after the first, and every bank block, was
                // made by `Box::into_raw` in `HpState::grow`/`grow_bank`, linked
                // once, and is freed only here.
                let blk = unsafe { Box::from_raw(b) };
                b = blk.next.load(Ordering::Relaxed);
            }
        }
    }
}

/// A hazard-pointer domain: `K` slots per thread up front, more on demand.
///
/// ```
/// use mpsync::reclaim::{Guard, HazardPointers, Local, Reclaimer};
/// use mpsync::sync::{Arc, AtomicPtr, Ordering};
///
/// let hp = Arc::new(HazardPointers::with_threshold(2, 1).unwrap()); // scan at every retire
/// let shared = AtomicPtr::new(Box::into_raw(Box::new(41u64)));
/// let (mut reader, mut writer) = (HazardPointers::register(&hp), HazardPointers::register(&hp));
/// let r = reader.enter();
/// let p = r.protect(0, &shared);
/// let old = shared.swap(std::ptr::null_mut(), Ordering::AcqRel); // unlink
/// // SAFETY: `old` is unlinked, retired once, made by `Box`.
/// unsafe { writer.enter().retire_box(old) };
/// // SAFETY: protected by slot 0 and validated while `shared` still held it.
/// assert_eq!(unsafe { p.as_ref() }, Some(&41)); // still protected: not freed
/// assert_eq!(hp.stats().pending, 1);
/// drop(r);
/// writer.scan();
/// assert_eq!(hp.stats().freed, 1);
/// assert!(HazardPointers::new(0).is_err());
/// ```
#[derive(Debug)]
pub struct HazardPointers {
    k: usize,
    /// Slots asked for beyond `K`, summed over records (Relaxed: a size).
    extra: AtomicUsize,
    /// `None`: `2H + 100`, recomputed as threads join.
    threshold: Option<usize>,
    registry: Registry<HpRecord>,
    orphans: Orphans,
}

impl HazardPointers {
    /// A domain with `k` hazard slots per thread up front (a thread gets more when
    /// it protects into a higher slot) and the default scan threshold
    /// `R = 2H + 100`. Errors unless `1 <= k <= HP_MAX_SLOTS`.
    pub fn new(k: usize) -> Result<Self, ReclaimError> {
        if !(1..=HP_MAX_SLOTS).contains(&k) {
            return Err(ReclaimError::HazardSlots(k));
        }
        Ok(Self {
            k,
            extra: AtomicUsize::new(0),
            threshold: None,
            registry: Registry::new(),
            orphans: Orphans::new(),
        })
    }

    /// A domain with `k` hazard slots per thread that scans when a thread has `r`
    /// retired nodes. Errors unless `1 <= k <= HP_MAX_SLOTS` and `r >= 1`. (An `r` below
    /// `H + 1` is correct but scans without the amortized bound on work.)
    pub fn with_threshold(k: usize, r: usize) -> Result<Self, ReclaimError> {
        if r == 0 {
            return Err(ReclaimError::ZeroScanThreshold);
        }
        let mut d = Self::new(k)?;
        d.threshold = Some(r);
        Ok(d)
    }

    /// Hazard slots every thread gets up front (`K`).
    pub fn slots_per_thread(&self) -> usize {
        self.k
    }

    /// Hazard slots of all threads' records (`H`): `K` per record plus the slots
    /// threads asked for beyond `K`.
    pub fn total_slots(&self) -> usize {
        // Relaxed: a size (see `extra`).
        self.k * self.registry.len() + self.extra.load(Ordering::Relaxed)
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
    /// Zero-sized: hazard pointers keep nothing per node.
    type Header = ();
    const NAME: &'static str = "HP";

    #[cfg(not(loom))]
    fn register(self: &Arc<Self>) -> HpLocal {
        HpLocal {
            state: LocalCell::new(HpState::new(self)),
        }
    }

    #[cfg(loom)]
    fn register(this: &Arc<Self>) -> HpLocal {
        HpLocal {
            state: LocalCell::new(HpState::new(this)),
        }
    }

    #[inline]
    fn owns(&self, local: &HpLocal) -> bool {
        local.state.with(|l| std::ptr::eq(self, &*l.domain))
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
    /// Shared with the live guards.
    state: LocalCell<HpState>,
}

impl HpLocal {
    /// Nodes this thread retired (or adopted) that are not yet freed.
    pub fn pending(&self) -> usize {
        self.state.with(|l| l.pending())
    }

    /// Hazard slots this thread has asked for so far (at least the domain's `K`;
    /// what it counts towards `H`; the blocks of further guards not included).
    pub fn slots(&self) -> usize {
        self.state.with(|l| l.slots())
    }

    /// Michael's `Scan`: adopts nodes of threads that left, then frees every
    /// retired node that no hazard slot holds. Returns the number freed.
    ///
    /// # Panics
    /// If a value's `Drop` (or a deferred closure) panics as it is freed —
    /// after every other node of the batch was freed.
    pub fn scan(&mut self) -> u64 {
        let garbage = self.state.get_mut().scan();
        let n = garbage.len() as u64;
        // SAFETY: unprotected after the scan's fence (`HpState::scan`); the
        // registration holds its record.
        unsafe { garbage.free() }.resume();
        n
    }
}

/// What an [`HpLocal`] and its guards change.
#[derive(Debug)]
struct HpState {
    domain: Arc<HazardPointers>,
    rec: NonNull<Record<HpRecord>>,
    /// The record's blocks after its first, in chain order (a cache of the chain,
    /// so slot `i` is found without walking it).
    blocks: Vec<NonNull<SlotBlock>>,
    /// Slots this record's owners asked for (the record's `wanted`, cached).
    wanted: usize,
    rlist: Vec<Retired>,
    /// The scan's array of hazards, kept to avoid reallocating.
    scratch: Vec<*mut u8>,
    /// Bit `b`: a live guard uses bank `b` (0: the slots `0, 1, …`; `b >= 1`: the
    /// `b - 1`th block of the record's bank chain).
    live: u64,
    /// The record's bank blocks, in chain order (a cache of the chain).
    bank_blocks: Vec<NonNull<SlotBlock>>,
}

// SAFETY: the record (and its blocks) is owned by this handle (its `in_use` flag)
// and lives as long as the domain, which the handle keeps alive; retired nodes are
// `Send`; `scratch` holds addresses only, never dereferenced.
unsafe impl Send for HpState {}

impl HpState {
    fn new(domain: &Arc<HazardPointers>) -> Self {
        let rec = domain.registry.acquire();
        // SAFETY: the record lives as long as the domain; we own it now.
        let data = &unsafe { rec.as_ref() }.data;
        let blocks = data
            .first
            .chain()
            .skip(1)
            .map(NonNull::from)
            .collect::<Vec<_>>();
        // Relaxed: written only by the record's owner, which we now are (the
        // registry's Acquire claim orders the last owner's writes before this).
        let mut wanted = data.wanted.load(Ordering::Relaxed);
        if wanted < domain.k {
            // A new record: its `K` slots are counted by `K · records`.
            wanted = domain.k;
            data.wanted.store(wanted, Ordering::Relaxed);
        }
        // SAFETY: as in `HpRecord::all_blocks`.
        let banks = unsafe { data.banks.load(Ordering::Acquire).as_ref() };
        let bank_blocks = banks
            .into_iter()
            .flat_map(SlotBlock::chain)
            .map(NonNull::from)
            .collect();
        Self {
            rec,
            domain: domain.clone(),
            blocks,
            wanted,
            rlist: Vec::new(),
            scratch: Vec::new(),
            live: 0,
            bank_blocks,
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

    /// Hazard slots this thread has asked for so far (at least the domain's `K`;
    /// what it counts towards `H`).
    pub fn slots(&self) -> usize {
        self.wanted
    }

    /// Slots allocated to this thread's record (a multiple of [`HP_BLOCK_SLOTS`]).
    fn capacity(&self) -> usize {
        HP_BLOCK_SLOTS * (1 + self.blocks.len())
    }

    /// Hazard slot `i`, allocated (and counted towards `H`) if the thread does not
    /// have it yet.
    ///
    /// # Panics
    /// If `i >= HP_MAX_SLOTS`.
    #[inline]
    fn slot(&mut self, i: usize) -> &AtomicPtr<u8> {
        if i >= self.wanted {
            self.want(i);
        }
        if i < HP_BLOCK_SLOTS {
            return &self.record().first.slots[i];
        }
        // SAFETY: `want` grew the chain past `i`; blocks live as long as the
        // record, which lives as long as the domain `self` holds.
        &unsafe { self.blocks[i / HP_BLOCK_SLOTS - 1].as_ref() }.slots[i % HP_BLOCK_SLOTS]
    }

    /// Makes slot `i` this thread's: grows the chain and counts the new slots.
    #[cold]
    fn want(&mut self, i: usize) {
        assert!(
            i < HP_MAX_SLOTS,
            "hazard slot {i} out of range: a thread may have at most {HP_MAX_SLOTS} \
             (slots are allocated on demand; an index this large is likely a bug)"
        );
        while self.capacity() <= i {
            self.grow();
        }
        let more = i + 1 - self.wanted;
        self.wanted = i + 1;
        // Relaxed (both): sizes for the scan threshold; the slots themselves are
        // published by the chain's Release link in `grow`.
        self.record().wanted.store(self.wanted, Ordering::Relaxed);
        self.domain.extra.fetch_add(more, Ordering::Relaxed);
    }

    /// Appends a block of null slots to the record's chain.
    fn grow(&mut self) {
        let new = NonNull::from(Box::leak(Box::new(SlotBlock::new())));
        let last: &SlotBlock = match self.blocks.last() {
            // SAFETY: as in `slot`.
            Some(b) => unsafe { b.as_ref() },
            None => &self.record().first,
        };
        // Release: pairs with the Acquire load in `SlotBlock::chain`, so a scanner
        // that reaches the block sees its slots initialized (null). A hazard
        // published later in it is seen by a scan as any other (the SeqCst fences
        // of `protect` and `scan`: this store precedes the protector's fence).
        last.next.store(new.as_ptr(), Ordering::Release);
        self.blocks.push(new);
    }

    /// Takes the lowest free bank for a new guard, with its block of slots.
    ///
    /// # Panics
    /// With 64 guards of the registration alive.
    fn open_bank(&mut self) -> usize {
        let b = (!self.live).trailing_zeros() as usize;
        assert!(
            b < 64,
            "64 hazard-pointer guards of one registration alive at once: too many \
             (each further guard takes {HP_BLOCK_SLOTS} slots of its own)"
        );
        self.live |= 1 << b;
        while self.bank_blocks.len() < b {
            self.grow_bank();
        }
        b
    }

    /// Gives bank `b` back (its guard dropped, its slots cleared).
    fn close_bank(&mut self, b: usize) {
        self.live &= !(1 << b);
    }

    /// Slot `i` of bank `b >= 1` (a guard entered while another lives).
    ///
    /// # Panics
    /// If `i >= HP_BLOCK_SLOTS`.
    fn bank_slot(&self, b: usize, i: usize) -> &AtomicPtr<u8> {
        assert!(
            i < HP_BLOCK_SLOTS,
            "hazard slot {i} out of range for a guard entered while another guard of \
             the same registration lives: such a guard has {HP_BLOCK_SLOTS} slots"
        );
        // SAFETY: bank blocks live as long as the record, which lives as long as
        // the domain `self` holds; `open_bank` grew the chain past `b - 1`.
        &unsafe { self.bank_blocks[b - 1].as_ref() }.slots[i]
    }

    /// Appends a block of null slots to the record's bank chain, counted
    /// towards `H`.
    fn grow_bank(&mut self) {
        let new = NonNull::from(Box::leak(Box::new(SlotBlock::new())));
        let link = match self.bank_blocks.last() {
            // SAFETY: as in `bank_slot`.
            Some(b) => &unsafe { b.as_ref() }.next,
            None => &self.record().banks,
        };
        // Release: as in `grow` (a scanner that reaches the block sees it null).
        link.store(new.as_ptr(), Ordering::Release);
        self.bank_blocks.push(new);
        // Relaxed: a size for the scan threshold (as in `want`).
        self.domain
            .extra
            .fetch_add(HP_BLOCK_SLOTS, Ordering::Relaxed);
    }

    /// Clears every slot of the record (all blocks).
    fn clear_all(&self) {
        for b in self.record().all_blocks() {
            for s in &b.slots {
                // Release: as in `HpGuard::release`.
                s.store(ptr::null_mut(), Ordering::Release);
            }
        }
    }

    /// Michael's `Scan`: adopts nodes of threads that left, then takes every
    /// retired node that no hazard slot holds out of the list, for the caller
    /// to free once the registration is consistent ([`Garbage`]: a value's
    /// `Drop` may retire through this registration; its node then joins the
    /// list and waits for a scan whose hazards are read after it).
    fn scan(&mut self) -> Garbage {
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
            return Garbage::none();
        }
        // Room for every node at once (most of a scan's list is usually
        // unprotected): one allocation per scan, not a series of growths.
        let mut garbage = Garbage::with_capacity(self.rlist.len());
        // SeqCst fence: pairs with `protect`'s fence (store-load): a hazard
        // published before it is seen below; a protector that fences after it
        // re-reads the source and sees the unlink, so it does not use the node.
        fence(Ordering::SeqCst);
        self.scratch.clear();
        for r in d.registry.iter() {
            for b in r.data.all_blocks() {
                for s in &b.slots {
                    // Acquire: pairs with the Release stores to slots in `protect`,
                    // `release` and the guard's drop, so the accesses made under an
                    // earlier protection happen before the frees below.
                    let p = s.load(Ordering::Acquire);
                    if !p.is_null() {
                        self.scratch.push(p);
                    }
                }
            }
        }
        self.scratch.sort_unstable();
        let mut i = 0;
        while i < self.rlist.len() {
            if self.scratch.binary_search(&self.rlist[i].ptr).is_ok() {
                i += 1;
            } else {
                // Unlinked before it was retired, and no hazard held it after the
                // fence above (see the fence's comment), so no thread reaches it:
                // the caller frees it.
                garbage.push(self.rlist.swap_remove(i), &rec.counters);
            }
        }
        garbage
    }
}

impl Local for HpLocal {
    type Header = ();
    type Guard<'a> = HpGuard<'a>;

    #[inline(always)]
    fn header(&self) {}

    /// Nothing to do until `protect` but take a bank of slots: the first live
    /// guard the slots `0, 1, …` (on demand), each further one a block of
    /// [`HP_BLOCK_SLOTS`] of its own. The guard clears its slots when dropped.
    #[inline]
    fn enter(&self) -> HpGuard<'_> {
        let bank = self.state.with(HpState::open_bank);
        HpGuard {
            local: self,
            bank,
            used: Cell::new(0),
            high: Cell::new(0),
        }
    }

    /// A no-op: hazard pointers need no quiescent states.
    fn quiescent(&mut self) {}
}

impl Drop for HpState {
    /// Leaves: scans once more, hands what is still protected to the domain,
    /// clears the slots, frees the scan's garbage and gives the record back —
    /// also when a value's `Drop` panics there (the panic goes on after).
    fn drop(&mut self) {
        let garbage = self.scan();
        let rest = std::mem::take(&mut self.rlist);
        let d = &*self.domain;
        d.orphans.push(rest, 0, &self.record().counters);
        self.clear_all();
        // SAFETY: unprotected after the scan's fence; the record (its counters)
        // is still ours.
        let caught = unsafe { garbage.free() };
        // SAFETY: `rec` came from this registry; its slots are clear and this handle
        // no longer touches it (its blocks stay with it for the next owner).
        unsafe { d.registry.release(self.rec) };
        caught.resume();
    }
}

/// One operation's hazard slots; dropping it clears the slots it used.
///
/// [`protect`](Guard::protect) takes `&self` (the protected pointers it returns
/// borrow the guard shared, and a traversal holds several) and still allocates
/// slots and notes which it used, in the registration's shared state.
#[derive(Debug)]
pub struct HpGuard<'a> {
    local: &'a HpLocal,
    /// The guard's bank of slots (see [`HpLocal::enter`](Local::enter)).
    bank: usize,
    /// Bit `i` set: slot `i` (< 64) may be non-null.
    used: Cell<u64>,
    /// One past the highest slot >= 64 used (0: none).
    high: Cell<usize>,
}

impl HpGuard<'_> {
    /// Runs `f` on the registration.
    #[inline(always)]
    fn local<T>(&self, f: impl FnOnce(&mut HpState) -> T) -> T {
        self.local.state.with(f)
    }

    /// Notes that slot `i` may be non-null, for the guard's drop.
    #[inline]
    fn mark_used(&self, i: usize) {
        if i < 64 {
            self.used.set(self.used.get() | 1 << i);
        } else {
            self.high.set(self.high.get().max(i + 1));
        }
    }
}

impl Guard for HpGuard<'_> {
    type Header = ();

    #[inline(always)]
    fn header(&self) {}

    /// Slot `slot` is allocated if this thread does not have it yet (see the
    /// module doc; panics only at [`HP_MAX_SLOTS`]).
    #[inline]
    fn protect_raw<T>(&self, slot: usize, src: &AtomicPtr<T>) -> *mut T {
        let mask = std::mem::align_of::<T>() - 1;
        self.local(|l| {
            let hp = if self.bank == 0 {
                if slot >= l.wanted {
                    l.want(slot); // may panic: before the guard notes the slot
                }
                l.slot(slot)
            } else {
                l.bank_slot(self.bank, slot) // may panic, as `want`
            };
            self.mark_used(slot);
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
        })
    }

    fn release(&mut self, slot: usize) {
        assert!(
            slot < HP_MAX_SLOTS,
            "hazard slot {slot} out of range: a thread may have at most {HP_MAX_SLOTS}"
        );
        let bank = self.bank;
        let cleared = self.local(|l| {
            let hp = if bank == 0 && slot < l.capacity() {
                l.slot(slot)
            } else if bank > 0 && slot < HP_BLOCK_SLOTS {
                l.bank_slot(bank, slot)
            } else {
                return false; // never allocated, so never set
            };
            // Release: the accesses made under this protection happen before a
            // scanner that reads the null (its Acquire load in `scan`).
            hp.store(ptr::null_mut(), Ordering::Release);
            true
        });
        if cleared && slot < 64 {
            self.used.set(self.used.get() & !(1 << slot));
        }
    }

    unsafe fn retire_raw_with(&self, ptr: *mut u8, arg: *mut u8, free: unsafe fn(*mut u8)) {
        // SAFETY: the caller's contract.
        unsafe { self.retire(Retired::with(ptr, arg, free)) }
    }
}

impl HpGuard<'_> {
    /// Retires `r`, and scans when the list reaches the threshold. The scan's
    /// garbage is freed after the retire is recorded and the registration's
    /// state released: a value's `Drop` run there may use this registration
    /// (a guard of its own bank, a retire that joins the list), and a panic
    /// leaves through this guard, which clears its slots.
    ///
    /// # Safety
    /// As [`Guard::retire_raw`], for the retired record.
    unsafe fn retire(&self, r: Retired) {
        let full = self.local(|l| {
            l.rlist.push(r);
            l.record().counters.retired(1);
            l.rlist.len() >= l.domain.scan_threshold()
        });
        if full {
            self.scan_and_free();
        }
    }

    /// The scan of a retire that filled the list, and the freeing of its
    /// garbage (see [`retire`](Self::retire)).
    #[cold]
    #[inline(never)]
    fn scan_and_free(&self) {
        let garbage = self.local(|l| l.scan());
        // SAFETY: unprotected after the scan's fence; the registration holds
        // its record.
        unsafe { garbage.free() }.resume();
    }
}

impl Drop for HpGuard<'_> {
    fn drop(&mut self) {
        let (mut used, high, bank) = (self.used.get(), self.high.get(), self.bank);
        self.local(|l| {
            while used != 0 {
                let i = used.trailing_zeros() as usize;
                used &= used - 1;
                let hp = if bank == 0 {
                    l.slot(i)
                } else {
                    l.bank_slot(bank, i)
                };
                // Release: as in `release`.
                hp.store(ptr::null_mut(), Ordering::Release);
            }
            for i in 64..high {
                // Release: as in `release`.
                l.slot(i).store(ptr::null_mut(), Ordering::Release);
            }
            l.close_bank(bank);
        })
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
            HazardPointers::new(HP_MAX_SLOTS + 1).unwrap_err(),
            ReclaimError::HazardSlots(HP_MAX_SLOTS + 1)
        );
        assert!(HazardPointers::new(17).is_ok(), "no fixed K <= 16 any more");
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
        let r = HazardPointers::register(&d);
        let mut w = HazardPointers::register(&d);
        let n = boxed(1);
        // A tagged pointer (low bit set) protects its node.
        let src = AtomicPtr::new(n.map_addr(|a| a | 1));
        let mut g = r.enter();
        let p = g.protect_raw(1, &src);
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
        let w = HazardPointers::register(&d);
        let n = boxed(2);
        let src = AtomicPtr::new(n);
        let g = r.enter();
        g.protect_raw(0, &src);
        // SAFETY: as above.
        unsafe { w.enter().retire_box(n) };
        drop(w); // scans, cannot free, hands over
        assert_eq!(d.stats().pending, 1);
        drop(g);
        assert_eq!(r.scan(), 1, "adopted and freed");
        // A node left pending when the domain drops is freed by it (Miri: no leak).
        let g = r.enter();
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
        let l = HazardPointers::register(&d);
        let src = AtomicPtr::new(ptr::null_mut::<u64>());
        l.enter().protect_raw(HP_MAX_SLOTS, &src);
    }

    #[test]
    fn slots_are_allocated_on_demand_and_protect() {
        // One slot up front; the reader protects 70 nodes at once (blocks of
        // HP_BLOCK_SLOTS are chained on, and slots >= 64 go past the guard's
        // bit mask), the writer retires them all and scans at every retire.
        const N: usize = 70;
        let d = Arc::new(HazardPointers::with_threshold(1, 1).unwrap());
        let r = HazardPointers::register(&d);
        let mut w = HazardPointers::register(&d);
        let nodes: Vec<*mut u64> = (0..N as u64).map(boxed).collect();
        let srcs: Vec<AtomicPtr<u64>> = nodes.iter().map(|&n| AtomicPtr::new(n)).collect();
        let mut g = r.enter();
        for (i, s) in srcs.iter().enumerate() {
            assert_eq!(g.protect_raw(i, s), nodes[i]);
        }
        assert_eq!(
            d.total_slots(),
            1 + 1 + (N - 1),
            "K per record + the extra slots"
        );
        for &n in &nodes {
            // SAFETY: unlinked (we pretend), retired once, made by `Box`.
            unsafe { w.enter().retire_box(n) };
        }
        assert_eq!(w.scan(), 0, "every node is protected, by slots 0..{N}");
        for (i, &n) in nodes.iter().enumerate() {
            // SAFETY: still protected by slot `i`.
            assert_eq!(unsafe { *n }, i as u64);
        }
        g.release(N - 1);
        g.release(N + 100); // never allocated: nothing to clear
        assert_eq!(w.scan(), 1, "the released slot's node");
        drop(g); // clears the rest, including the slots above 64
        assert_eq!(w.scan(), N as u64 - 1);
        assert_eq!(r.slots(), N);
        drop(r);
        // The record, with its blocks, is reused by the next thread: no new slots.
        let r2 = HazardPointers::register(&d);
        assert_eq!(d.records(), 2);
        assert_eq!(r2.slots(), N);
        assert_eq!(d.total_slots(), 1 + 1 + (N - 1));
        // ... and its inherited high slots protect (they are in the scanned chain).
        let n = boxed(7);
        let src = AtomicPtr::new(n);
        let g = r2.enter();
        assert_eq!(g.protect_raw(N - 1, &src), n);
        // SAFETY: as above.
        unsafe { w.enter().retire_box(n) };
        assert_eq!(w.scan(), 0, "protected by an inherited slot");
        drop(g);
        assert_eq!(w.scan(), 1);
        let s = d.stats();
        assert_eq!(
            (s.retired, s.freed, s.pending),
            (N as u64 + 1, N as u64 + 1, 0)
        );
    }
}
