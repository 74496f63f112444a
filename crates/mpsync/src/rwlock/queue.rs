//! RW-Queued, RW-Smart-Q, RW-Native(-np): fair reader-writer locks built from a
//! FIFO admission lock and a reader count.
//!
//! Paper 001 §3.2 (papers/001_…) after Krieger, Stumm & Unrau (ICPP 1993) and
//! Mellor-Crummey & Scott's fair queue-based reader-writer lock (PPoPP 1991):
//! every thread, reader or writer, enters through one queue, in arrival order.
//! The queue here is an mpsync mutex `M` — the *admission* lock:
//!
//! - a **reader** takes the admission lock, adds itself to the reader count and
//!   lets the admission lock go at once; so readers that arrive together pass
//!   through the queue one after another, each a few instructions behind the
//!   last, and **read together**;
//! - a **writer** takes the admission lock and keeps it until it unlocks: it
//!   **waits for the readers ahead of it** (the count to drain) and **blocks
//!   everyone behind it** (they queue on the admission lock).
//!
//! Fairness to both sides is the admission lock's: FIFO for [`RwQueued`]
//! (MCS) — no reader or writer is overtaken; for [`RwSmartQ`] (Smart-Q, paper
//! 003 Figure 1) FIFO except that the admission is never handed to a preempted
//! waiter: it is skipped (linked out, retried when it runs again) — 001 §3.2's
//! "a process that finds its successor preempted links it out of the queue and
//! sets a flag ... that it needs to retry". RW-Smart-Q's read and write sections
//! are no-preempt (001 §3, extension 1). [`RwNative`]/[`RwNativeNp`] use the
//! futex mutex ([`Native`]): the paper's RW-Native is built on its native mutex
//! in the same way; it is not FIFO.
//!
//! Differences from KSU's doubly-linked queue: the reader count replaces the
//! per-node reader chain, and the admission lock's own queue nodes replace the
//! node locks; the writer, the only thread that can wait for the count, spins on
//! it briefly and then parks on it (`sched::park`), woken by the last reader out.
//!
//! The reader count word:
//!
//! | bits        | who writes                           | meaning                           |
//! |-------------|--------------------------------------|-----------------------------------|
//! | 0..31       | readers (+1 under admission, −1 out) | readers inside                    |
//! | [`PARKED`]  | the writer, by CAS; cleared by it    | the writer is (about to be) parked|
//!
//! Upgradable reads (`lock_api::RawRwLockUpgrade`): an upgradable reader is a
//! writer that has taken the admission lock but not yet drained the readers —
//! the readers already inside go on beside it, writers and other upgradable
//! readers wait, and (the queue being FIFO) so do readers that arrive after
//! it; the upgrade is the writer's drain. So a thread holding an upgradable
//! read must not take a plain read of the same lock (it would wait for itself).
//!
//! Uses `sched`: through the admission lock (Smart-Q's state-word hand-off),
//! `request/release_no_preempt` when `NP`, `park`/`unpark_one`,
//! `pause/resume_no_preempt` around a writer's park.
//!
//! ```
//! use mpsync::{rwlock::{RwLock, RwQueued, RwSmartQ, RwNative}};
//! let a: RwLock<RwQueued, Vec<u32>> = RwLock::new(vec![1]);
//! let b: RwLock<RwSmartQ, u32> = RwLock::new(2);
//! let c: RwLock<RwNative, u32> = RwLock::new(3);
//! a.write().push(2);
//! assert_eq!(a.read().len() as u32 + *b.read() + *c.read(), 7);
//! ```

use std::marker::PhantomData;
use std::time::{Duration, Instant};

use crate::lock::{Native, Queued, SmartQ};
use crate::sched;
use crate::sync::{AtomicBool, AtomicU32, Ordering};
use crate::util::CachePadded;
use lock_api::RawMutex;

/// The writer-parked bit of the reader count word.
pub const PARKED: u32 = 1 << 31;

/// A fair reader-writer lock: admission lock `M` plus a reader count; `NP`
/// marks both kinds of section no-preempt. Use the named locks [`RwQueued`],
/// [`RwSmartQ`], [`RwNative`], [`RwNativeNp`] (newtypes of it).
pub struct RwQueue<M, const NP: bool> {
    admission: M,
    /// Readers inside, and [`PARKED`] (see the module's table).
    readers: CachePadded<AtomicU32>,
    /// A writer is inside (after the drain), for `is_locked_exclusive` only.
    writing: AtomicBool,
}

/// One of the named queued RW locks: a `#[repr(transparent)]` newtype of
/// [`RwQueue<M, NP>`] (so that compile errors and `type_name` say `RwSmartQ`,
/// not `RwQueue<SkipQueue<SmartQPolicy>, true>`), delegating every trait to it.
macro_rules! named_rw_queue {
    ($($(#[$m:meta])* $name:ident = $adm:ty, $np:literal;)*) => {$(
        $(#[$m])*
        #[repr(transparent)]
        pub struct $name(RwQueue<$adm, $np>);

        impl $name {
            /// An unlocked lock.
            #[cfg(not(loom))]
            pub const fn new() -> Self {
                Self(RwQueue::new())
            }

            /// An unlocked lock over the given unlocked admission lock (e.g.
            /// one built with parameters, or under loom where `INIT` is
            /// unavailable).
            #[cfg(not(loom))]
            pub const fn with_admission(admission: $adm) -> Self {
                Self(RwQueue::with_admission(admission))
            }

            /// An unlocked lock over the given unlocked admission lock.
            #[cfg(loom)]
            pub fn with_admission(admission: $adm) -> Self {
                Self(RwQueue::with_admission(admission))
            }

            /// The admission lock (for its statistics, e.g. Smart-Q's skips).
            pub fn admission(&self) -> &$adm {
                self.0.admission()
            }

            /// Readers inside now (a snapshot).
            pub fn readers(&self) -> u32 {
                self.0.readers()
            }

            /// The construction it names.
            pub fn as_rw_queue(&self) -> &RwQueue<$adm, $np> {
                &self.0
            }
        }

        #[cfg(not(loom))]
        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }

        // SAFETY: every method is `RwQueue`'s (the newtype is transparent).
        unsafe impl lock_api::RawRwLock for $name {
            #[allow(clippy::declare_interior_mutable_const)]
            #[cfg(not(loom))]
            const INIT: Self = Self::new();
            #[allow(clippy::declare_interior_mutable_const)]
            #[cfg(loom)]
            const INIT: Self = panic!(concat!("under loom, use ", stringify!($name), "::with_admission()"));

            type SharedGuard = <RwQueue<$adm, $np> as lock_api::RawRwLock>::SharedGuard;
            type ExclusiveGuard = <RwQueue<$adm, $np> as lock_api::RawRwLock>::ExclusiveGuard;

            #[inline]
            fn lock_shared(&self) -> Self::SharedGuard {
                self.0.lock_shared()
            }
            #[inline]
            fn try_lock_shared(&self) -> Option<Self::SharedGuard> {
                self.0.try_lock_shared()
            }
            #[inline]
            unsafe fn unlock_shared(&self, guard: Self::SharedGuard) {
                // SAFETY: the caller's contract, passed on.
                unsafe { self.0.unlock_shared(guard) }
            }
            #[inline]
            fn lock_exclusive(&self) -> Self::ExclusiveGuard {
                self.0.lock_exclusive()
            }
            #[inline]
            fn try_lock_exclusive(&self) -> Option<Self::ExclusiveGuard> {
                self.0.try_lock_exclusive()
            }
            #[inline]
            unsafe fn unlock_exclusive(&self, guard: Self::ExclusiveGuard) {
                // SAFETY: the caller's contract, passed on.
                unsafe { self.0.unlock_exclusive(guard) }
            }
            #[inline]
            fn is_locked(&self) -> bool {
                self.0.is_locked()
            }
            #[inline]
            fn is_locked_exclusive(&self) -> bool {
                self.0.is_locked_exclusive()
            }
        }

        // SAFETY: `RwQueue`'s.
        unsafe impl lock_api::RawRwLockUpgrade for $name {
            type UpgradableGuard = <RwQueue<$adm, $np> as lock_api::RawRwLockUpgrade>::UpgradableGuard;

            #[inline]
            fn lock_upgradable(&self) -> Self::UpgradableGuard {
                self.0.lock_upgradable()
            }
            #[inline]
            fn try_lock_upgradable(&self) -> Option<Self::UpgradableGuard> {
                self.0.try_lock_upgradable()
            }
            #[inline]
            unsafe fn unlock_upgradable(&self, guard: Self::UpgradableGuard) {
                // SAFETY: the caller's contract, passed on.
                unsafe { self.0.unlock_upgradable(guard) }
            }
            #[inline]
            unsafe fn upgrade(&self, guard: Self::UpgradableGuard) -> Self::ExclusiveGuard {
                // SAFETY: the caller's contract, passed on.
                unsafe { self.0.upgrade(guard) }
            }
            #[inline]
            unsafe fn try_upgrade(
                &self,
                guard: Self::UpgradableGuard,
            ) -> Result<Self::ExclusiveGuard, Self::UpgradableGuard> {
                // SAFETY: the caller's contract, passed on.
                unsafe { self.0.try_upgrade(guard) }
            }
        }

        // SAFETY: `RwQueue`'s.
        unsafe impl lock_api::RawRwLockDowngrade for $name {
            #[inline]
            unsafe fn downgrade(&self, guard: Self::ExclusiveGuard) -> Self::SharedGuard {
                // SAFETY: the caller's contract, passed on.
                unsafe { lock_api::RawRwLockDowngrade::downgrade(&self.0, guard) }
            }
        }
    )*};
}

/// `RawRwLockFair` of a named queued RW lock whose admission lock is fair.
macro_rules! named_rw_queue_fair {
    ($($name:ident),*) => {$(
        // SAFETY: `RwQueue`'s.
        unsafe impl lock_api::RawRwLockFair for $name {
            #[inline]
            unsafe fn unlock_shared_fair(&self, guard: Self::SharedGuard) {
                // SAFETY: the caller's contract, passed on.
                unsafe { self.0.unlock_shared_fair(guard) }
            }
            #[inline]
            unsafe fn unlock_exclusive_fair(&self, guard: Self::ExclusiveGuard) {
                // SAFETY: the caller's contract, passed on.
                unsafe { self.0.unlock_exclusive_fair(guard) }
            }
        }
    )*};
}

/// `RawRwLockTimed` of a named queued RW lock whose admission lock is timed.
macro_rules! named_rw_queue_timed {
    ($($name:ident),*) => {$(
        // SAFETY: `RwQueue`'s.
        unsafe impl lock_api::RawRwLockTimed for $name {
            type Duration = Duration;
            type Instant = Instant;

            #[inline]
            fn try_lock_shared_for(&self, timeout: Duration) -> Option<Self::SharedGuard> {
                self.0.try_lock_shared_for(timeout)
            }
            #[inline]
            fn try_lock_shared_until(&self, deadline: Instant) -> Option<Self::SharedGuard> {
                self.0.try_lock_shared_until(deadline)
            }
            #[inline]
            fn try_lock_exclusive_for(&self, timeout: Duration) -> Option<Self::ExclusiveGuard> {
                self.0.try_lock_exclusive_for(timeout)
            }
            #[inline]
            fn try_lock_exclusive_until(&self, deadline: Instant) -> Option<Self::ExclusiveGuard> {
                self.0.try_lock_exclusive_until(deadline)
            }
        }
    )*};
}

named_rw_queue! {
    /// RW-Queued: MCS admission, scheduler-oblivious (paper 001 §4). FIFO;
    /// fair unlocks (`RawRwLockFair`); no timed attempts (an MCS node cannot
    /// withdraw from the queue).
    RwQueued = Queued, false;
    /// RW-Smart-Q: Smart-Q admission (never handed to a preempted waiter),
    /// sections no-preempt (paper 001 §3.2). Fair and timed.
    RwSmartQ = SmartQ, true;
    /// RW-Native: the futex mutex as admission (paper 001 §4). Timed; not
    /// FIFO, so no fair unlock.
    RwNative = Native, false;
    /// RW-Native-np: RW-Native with no-preempt sections (paper 001 §4).
    RwNativeNp = Native, true;
}
named_rw_queue_fair!(RwQueued, RwSmartQ);
named_rw_queue_timed!(RwSmartQ, RwNative, RwNativeNp);

impl<M: RawMutex, const NP: bool> std::fmt::Debug for RwQueue<M, NP> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Relaxed: diagnostic snapshots.
        let r = self.readers.load(Ordering::Relaxed);
        f.debug_struct("RwQueue")
            .field("admission", &std::any::type_name::<M>())
            .field("no_preempt", &NP)
            .field("readers", &(r & !PARKED))
            .field("writer_parked", &(r & PARKED != 0))
            .field("writing", &self.writing.load(Ordering::Relaxed))
            .finish()
    }
}

impl<M: RawMutex, const NP: bool> RwQueue<M, NP> {
    /// An unlocked lock.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self::with_admission(M::INIT)
    }

    /// An unlocked lock over the given unlocked admission lock (e.g. one built
    /// with parameters, or under loom where `INIT` is unavailable).
    #[cfg(not(loom))]
    pub const fn with_admission(admission: M) -> Self {
        Self {
            admission,
            readers: CachePadded::new(AtomicU32::new(0)),
            writing: AtomicBool::new(false),
        }
    }

    /// An unlocked lock over the given unlocked admission lock.
    #[cfg(loom)]
    pub fn with_admission(admission: M) -> Self {
        Self {
            admission,
            readers: CachePadded::new(AtomicU32::new(0)),
            writing: AtomicBool::new(false),
        }
    }

    /// The admission lock (for its statistics, e.g. Smart-Q's skips).
    pub fn admission(&self) -> &M {
        &self.admission
    }

    /// Readers inside now (a snapshot).
    pub fn readers(&self) -> u32 {
        // Relaxed: a snapshot.
        self.readers.load(Ordering::Relaxed) & !PARKED
    }

    /// The writer, holding the admission lock, waits for the readers ahead of it
    /// to leave: spins while the shared waiting policy ([`sched::Waiter`], its
    /// default patience) advises it, then parks on the count, woken by the last
    /// reader out. Readers cannot enter meanwhile (they need the admission
    /// lock), so the count only falls and only this thread sets or clears
    /// [`PARKED`].
    fn wait_readers_drained(&self) {
        let drained = self.wait_readers_drained_until(None);
        debug_assert!(drained);
    }

    /// As [`wait_readers_drained`](Self::wait_readers_drained), giving up at
    /// `deadline` (if any): whether the count drained. A writer that gives up
    /// clears [`PARKED`] before it returns (it is the only thread that sets or
    /// clears it, and it still holds the admission lock), so the next writer
    /// starts from the table's state; a last reader that saw the bit before it
    /// was cleared wakes nobody, or wakes the next writer early (it re-checks).
    fn wait_readers_drained_until(&self, deadline: Option<Instant>) -> bool {
        let mut w = sched::Waiter::new();
        loop {
            // Acquire: pairs with the readers' Release decrement, so their read
            // sections happen before our write section.
            if self.readers.load(Ordering::Acquire) == 0 {
                return true;
            }
            // No single thread to watch (the readers inside are many): the
            // patience decides.
            if w.spin(None) == sched::Wait::Park {
                break;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
        }
        let cb = sched::current();
        // Parked, we hold no processor: let the scheduler preempt us meanwhile
        // (only the outermost request of the owner's own pauses).
        let paused = cb.depth() > 0 && cb.pause_no_preempt();
        let drained = loop {
            // Acquire: as above.
            let v = self.readers.load(Ordering::Acquire);
            if v & !PARKED == 0 {
                if v != 0 {
                    // Relaxed: only we write the bit, and no reader can enter.
                    self.readers.store(0, Ordering::Relaxed);
                }
                break true;
            }
            let left = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => {
                        sched::stall::point(sched::stall::RW_WRITER_DRAIN_GAVE_UP);
                        // Relaxed: only we write the bit; the readers' own
                        // decrements are untouched by the `fetch_and`.
                        self.readers.fetch_and(!PARKED, Ordering::Relaxed);
                        break false;
                    }
                },
            };
            if v & PARKED == 0
                // Acquire: as above (the CAS may read the last reader's decrement).
                && self
                    .readers
                    .compare_exchange(v, v | PARKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            sched::park(&self.readers, v | PARKED, left);
        };
        if paused {
            cb.resume_no_preempt();
        }
        drained
    }
}

#[cfg(not(loom))]
impl<M: RawMutex, const NP: bool> Default for RwQueue<M, NP> {
    fn default() -> Self {
        Self::new()
    }
}

/// Guard state of a read section of [`RwQueue`]: the no-preempt request when
/// `NP`. Not `Send`.
#[derive(Debug)]
pub struct RwQueueReadGuard {
    np: bool,
    _not_send: PhantomData<*mut ()>,
}

/// Guard state of a write section of [`RwQueue`]: the admission lock's guard
/// (held until unlock). Not `Send`.
#[derive(Debug)]
pub struct RwQueueWriteGuard<G> {
    admission: G,
    np: bool,
    _not_send: PhantomData<*mut ()>,
}

fn np_request(np: bool) -> bool {
    if np {
        sched::request_no_preempt();
    }
    np
}

// SAFETY: [1] a reader increments the count only while holding the admission
// lock; [2] a writer holds the admission lock from before its drain wait until it
// unlocks, so no reader enters after the writer saw the count at 0, and no other
// writer runs (mutual exclusion of `M`); [3] the count reaching 0 is observed with
// Acquire, pairing with each reader's Release decrement; a later reader's
// admission (Acquire) follows the writer's admission release (Release).
unsafe impl<M: RawMutex, const NP: bool> lock_api::RawRwLock for RwQueue<M, NP> {
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(not(loom))]
    const INIT: Self = Self::new();
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(loom)]
    const INIT: Self = panic!("under loom, use RwQueue::with_admission()");

    type SharedGuard = RwQueueReadGuard;
    type ExclusiveGuard = RwQueueWriteGuard<M::Guard>;

    fn lock_shared(&self) -> Self::SharedGuard {
        let np = np_request(NP);
        let g = self.admission.lock();
        // Relaxed: ordered for the next writer by the admission lock's release
        // (it reads the count only after acquiring it) — see [1]/[3].
        self.readers.fetch_add(1, Ordering::Relaxed);
        // The window in which a reader has counted itself but still holds the
        // queue (a writer behind it is still blocked on admission).
        sched::stall::point(sched::stall::RW_READER_ADMITTED);
        // SAFETY: `g` came from `self.admission.lock()` on this thread.
        unsafe { self.admission.unlock(g) };
        RwQueueReadGuard {
            np,
            _not_send: PhantomData,
        }
    }

    fn try_lock_shared(&self) -> Option<Self::SharedGuard> {
        let np = np_request(NP);
        match self.admission.try_lock() {
            Some(g) => {
                // Relaxed: as in `lock_shared`.
                self.readers.fetch_add(1, Ordering::Relaxed);
                // SAFETY: as in `lock_shared`.
                unsafe { self.admission.unlock(g) };
                Some(RwQueueReadGuard {
                    np,
                    _not_send: PhantomData,
                })
            }
            None => {
                if np {
                    sched::cancel_no_preempt();
                }
                None
            }
        }
    }

    unsafe fn unlock_shared(&self, guard: Self::SharedGuard) {
        // Release: our read section happens before the writer's Acquire of the
        // count [3].
        let prev = self.readers.fetch_sub(1, Ordering::Release);
        if prev == PARKED | 1 {
            // The last reader out, and the writer parked (or about to): wake it.
            sched::unpark_one(&self.readers);
        }
        if guard.np {
            sched::release_no_preempt();
        }
    }

    fn lock_exclusive(&self) -> Self::ExclusiveGuard {
        let np = np_request(NP);
        let g = self.admission.lock();
        self.wait_readers_drained();
        // Relaxed: diagnostic (`is_locked_exclusive`).
        self.writing.store(true, Ordering::Relaxed);
        RwQueueWriteGuard {
            admission: g,
            np,
            _not_send: PhantomData,
        }
    }

    fn try_lock_exclusive(&self) -> Option<Self::ExclusiveGuard> {
        let np = np_request(NP);
        let g = self.admission.try_lock();
        match g {
            // Acquire: as in `wait_readers_drained`.
            Some(g) if self.readers.load(Ordering::Acquire) == 0 => {
                // Relaxed: diagnostic.
                self.writing.store(true, Ordering::Relaxed);
                Some(RwQueueWriteGuard {
                    admission: g,
                    np,
                    _not_send: PhantomData,
                })
            }
            g => {
                if let Some(g) = g {
                    // SAFETY: `g` came from `self.admission.try_lock()` here.
                    unsafe { self.admission.unlock(g) };
                }
                if np {
                    sched::cancel_no_preempt();
                }
                None
            }
        }
    }

    unsafe fn unlock_exclusive(&self, guard: Self::ExclusiveGuard) {
        // Relaxed: diagnostic.
        self.writing.store(false, Ordering::Relaxed);
        // SAFETY: the caller's contract: the guard came from `lock_exclusive` or
        // `try_lock_exclusive` on this lock, so it holds our admission lock.
        unsafe { self.admission.unlock(guard.admission) };
        if guard.np {
            sched::release_no_preempt();
        }
    }

    fn is_locked(&self) -> bool {
        self.admission.is_locked() || self.readers() != 0
    }

    fn is_locked_exclusive(&self) -> bool {
        // Relaxed: a snapshot.
        self.writing.load(Ordering::Relaxed)
    }
}

// SAFETY: an upgradable reader holds the admission lock, so (as for a writer,
// [2] above) no reader enters and no writer or other upgradable reader runs
// until it unlocks; its upgrade is the writer's drain ([3]: Acquire of the
// count reaching 0), after which it is alone.
unsafe impl<M: RawMutex, const NP: bool> lock_api::RawRwLockUpgrade for RwQueue<M, NP> {
    type UpgradableGuard = RwQueueWriteGuard<M::Guard>;

    fn lock_upgradable(&self) -> Self::UpgradableGuard {
        let np = np_request(NP);
        RwQueueWriteGuard {
            admission: self.admission.lock(),
            np,
            _not_send: PhantomData,
        }
    }

    fn try_lock_upgradable(&self) -> Option<Self::UpgradableGuard> {
        let np = np_request(NP);
        let Some(admission) = self.admission.try_lock() else {
            if np {
                sched::cancel_no_preempt();
            }
            return None;
        };
        Some(RwQueueWriteGuard {
            admission,
            np,
            _not_send: PhantomData,
        })
    }

    unsafe fn unlock_upgradable(&self, guard: Self::UpgradableGuard) {
        // SAFETY: the caller's contract: the guard came from this lock's
        // `lock_upgradable`/`try_lock_upgradable`, so it holds our admission lock.
        unsafe { self.admission.unlock(guard.admission) };
        if guard.np {
            sched::release_no_preempt();
        }
    }

    unsafe fn upgrade(&self, guard: Self::UpgradableGuard) -> Self::ExclusiveGuard {
        self.wait_readers_drained();
        // Relaxed: diagnostic (`is_locked_exclusive`).
        self.writing.store(true, Ordering::Relaxed);
        guard
    }

    unsafe fn try_upgrade(
        &self,
        guard: Self::UpgradableGuard,
    ) -> Result<Self::ExclusiveGuard, Self::UpgradableGuard> {
        // Acquire: as in `wait_readers_drained`.
        if self.readers.load(Ordering::Acquire) == 0 {
            // Relaxed: diagnostic.
            self.writing.store(true, Ordering::Relaxed);
            Ok(guard)
        } else {
            Err(guard)
        }
    }
}

// SAFETY: the writer holds the admission lock, so — as for a reader entering
// ([1]) — it may add itself to the reader count, and no writer can enter
// until it lets the admission lock go; then it is a reader like any other.
unsafe impl<M: RawMutex, const NP: bool> lock_api::RawRwLockDowngrade for RwQueue<M, NP> {
    unsafe fn downgrade(&self, guard: Self::ExclusiveGuard) -> Self::SharedGuard {
        // Relaxed: diagnostic.
        self.writing.store(false, Ordering::Relaxed);
        // Relaxed: as a reader's increment in `lock_shared` ([1]/[3]): the next
        // writer reads the count only after acquiring the admission lock that
        // we release below. No PARKED to keep: we cleared it in our drain.
        self.readers.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract: the guard holds our admission lock.
        unsafe { self.admission.unlock(guard.admission) };
        // The no-preempt request carries over to the read section.
        RwQueueReadGuard {
            np: guard.np,
            _not_send: PhantomData,
        }
    }
}

// SAFETY: the fair unlocks are the plain ones, with the admission lock's fair
// unlock for a writer: a reader holds nothing that orders anyone.
unsafe impl<M: lock_api::RawMutexFair, const NP: bool> lock_api::RawRwLockFair for RwQueue<M, NP> {
    unsafe fn unlock_shared_fair(&self, guard: Self::SharedGuard) {
        // SAFETY: the caller's contract.
        unsafe { lock_api::RawRwLock::unlock_shared(self, guard) }
    }

    unsafe fn unlock_exclusive_fair(&self, guard: Self::ExclusiveGuard) {
        // Relaxed: diagnostic.
        self.writing.store(false, Ordering::Relaxed);
        // SAFETY: as in `unlock_exclusive`.
        unsafe { self.admission.unlock_fair(guard.admission) };
        if guard.np {
            sched::release_no_preempt();
        }
    }
}

// SAFETY: a timed reader or writer takes the admission lock only by its timed
// form (which holds nothing when it gives up) and otherwise does what the
// untimed one does; a writer whose drain times out clears PARKED
// ([`RwQueue::wait_readers_drained_until`]) and lets the admission lock go,
// as `try_lock_exclusive` does when it finds readers.
unsafe impl<M, const NP: bool> lock_api::RawRwLockTimed for RwQueue<M, NP>
where
    M: lock_api::RawMutexTimed<Duration = Duration, Instant = Instant>,
{
    type Duration = Duration;
    type Instant = Instant;

    fn try_lock_shared_for(&self, timeout: Duration) -> Option<Self::SharedGuard> {
        super::try_shared_for_until(self, timeout)
    }

    fn try_lock_shared_until(&self, deadline: Instant) -> Option<Self::SharedGuard> {
        let np = np_request(NP);
        let Some(g) = self.admission.try_lock_until(deadline) else {
            if np {
                sched::cancel_no_preempt();
            }
            return None;
        };
        // Relaxed: as in `lock_shared`.
        self.readers.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `g` came from our admission lock, on this thread.
        unsafe { self.admission.unlock(g) };
        Some(RwQueueReadGuard {
            np,
            _not_send: PhantomData,
        })
    }

    fn try_lock_exclusive_for(&self, timeout: Duration) -> Option<Self::ExclusiveGuard> {
        super::try_exclusive_for_until(self, timeout)
    }

    fn try_lock_exclusive_until(&self, deadline: Instant) -> Option<Self::ExclusiveGuard> {
        let np = np_request(NP);
        let Some(g) = self.admission.try_lock_until(deadline) else {
            if np {
                sched::cancel_no_preempt();
            }
            return None;
        };
        if !self.wait_readers_drained_until(Some(deadline)) {
            // SAFETY: `g` came from our admission lock, on this thread.
            unsafe { self.admission.unlock(g) };
            if np {
                sched::cancel_no_preempt();
            }
            return None;
        }
        // Relaxed: diagnostic (`is_locked_exclusive`).
        self.writing.store(true, Ordering::Relaxed);
        Some(RwQueueWriteGuard {
            admission: g,
            np,
            _not_send: PhantomData,
        })
    }
}
