//! Reader-writer locks. Every one implements `lock_api::RawRwLock`, so
//! `mpsync::rwlock::RwLock<L, T>` works with read and write guards:
//!
//! | type            | paper name    | readers wait by / writers wait by                 | fair? | source            |
//! |-----------------|---------------|---------------------------------------------------|-------|-------------------|
//! | [`RwTasB`]      | RW-TAS-B      | CAS on one word, backoff, then park / same        | no    | 001 §4            |
//! | [`RwTasBNp`]    | RW-TAS-B-np   | as RW-TAS-B, sections no-preempt                  | no    | 001 §4            |
//! | [`RwQueued`]    | RW-Queued     | MCS admission queue / queue, then reader drain    | FIFO  | 001 §3.2, KSU 1993|
//! | [`RwSmartQ`]    | RW-Smart-Q    | Smart-Q admission (skips preempted) / same        | yes   | 001 §3.2          |
//! | [`RwNative`]    | RW-Native     | futex admission / futex, then parked drain        | no    | 001 §4            |
//! | [`RwNativeNp`]  | RW-Native-np  | as RW-Native, sections no-preempt                 | no    | 001 §4            |
//! | [`RwNp<L>`]     | L-np          | as `L`, sections no-preempt                       | as L  | 001 §3            |
//! | [`Bravo<L>`]    | BRAVO-L       | biased: a slot in a global table / `L`, revoking  | as L  | Dice & Kogan 2019 |
//!
//! What a caller may do to a lock (forgotten guards, `force_unlock_*`, panics
//! in sections, `fork`) is as for the mutual-exclusion locks ("What a caller
//! may do" in [`crate::lock`]), for read, write and upgradable guards alike.
//!
//! ## lock_api's optional traits
//!
//! Every lock here has upgradable reads (`RawRwLockUpgrade`). The others:
//!
//! | lock | `RawRwLockDowngrade` | `RawRwLockTimed` | `RawRwLockFair` |
//! |------|----------------------|------------------|-----------------|
//! | [`RwTasB`], [`RwTasBNp`] | yes: one swap turns the writer into a reader | yes: a waiter that gives up stops backing off | no: nobody is known to wait |
//! | [`RwQueued`] | yes: the writer counts itself in, then lets the admission lock go | no: a queued MCS node cannot withdraw | yes: the admission lock's FIFO hand-over |
//! | [`RwSmartQ`] | yes, as RW-Queued | yes: the admission lock's timed wait; a writer whose drain times out lets it go | yes, as RW-Queued |
//! | [`RwNative`], [`RwNativeNp`] | yes, as RW-Queued | yes, as RW-Smart-Q | no: the futex word names no waiter |
//! | [`RwNp<L>`] | as `L` | as `L` (the request cancelled on a timeout) | as `L` |
//! | [`Bravo<L>`] | as `L` (the writer becomes a slow reader) | as `L`; a writer whose revocation still waits for fast readers at the deadline lets `L` go | as `L` |
//!
//! RW-TAS-B and RW-TAS-B-np also move between upgradable and the other modes
//! (`RawRwLockUpgradeDowngrade`: `RwLockWriteGuard::downgrade_to_upgradable`,
//! `RwLockUpgradableReadGuard::downgrade`), each in one atomic step of the
//! word, so no writer gets in between.
//!
//! ```
//! use mpsync::lock_api::RwLockWriteGuard;
//! use mpsync::rwlock::{RwLock, RwSmartQ};
//! use std::time::Duration;
//! let l: RwLock<RwSmartQ, u32> = RwLock::new(0);
//! let mut w = l.write();
//! *w += 1;
//! let r = RwLockWriteGuard::downgrade(w); // no writer gets in between
//! assert!(l.try_write_for(Duration::from_micros(100)).is_none());
//! assert_eq!(*r, 1);
//! ```
//!
//! A lock without a trait is a compile error that names it (here:
//! "the following trait bounds were not satisfied: `RwQueued: RawRwLockTimed`"):
//!
//! ```compile_fail
//! use mpsync::rwlock::{RwLock, RwQueued};
//! let l: RwLock<RwQueued, u32> = RwLock::new(0);
//! let _ = l.try_read_for(std::time::Duration::ZERO); // an MCS node cannot withdraw
//! ```
//!
//! The queued locks share one construction ([`RwQueue`]): a FIFO admission lock
//! that readers pass through and writers hold, and a reader count that a writer
//! drains. Readers that arrive together read together; a writer waits for the
//! readers ahead of it and blocks everyone behind it.
//!
//! ```
//! use mpsync::{rwlock::{RwLock, RwSmartQ, RwTasBNp}};
//! let cfg: RwLock<RwSmartQ, String> = RwLock::new("a".into());
//! cfg.write().push('b');
//! assert_eq!(&*cfg.read(), "ab");
//! let n: RwLock<RwTasBNp, u64> = RwLock::new(0);
//! *n.write() += 1;
//! assert_eq!(*n.read(), 1);
//! ```

pub mod bravo;
pub mod np;
pub mod queue;
pub mod tas_b;

/// `try_lock_shared_for` of the timed RW locks here: `try_lock_shared_until`
/// the deadline `timeout` from now, or a plain `lock_shared` (no deadline) if
/// that instant cannot be represented — as the mutexes' timed forms.
#[inline]
pub(crate) fn try_shared_for_until<L>(l: &L, timeout: std::time::Duration) -> Option<L::SharedGuard>
where
    L: lock_api::RawRwLockTimed<Instant = std::time::Instant>,
{
    match std::time::Instant::now().checked_add(timeout) {
        Some(d) => l.try_lock_shared_until(d),
        None => Some(l.lock_shared()),
    }
}

/// `try_lock_exclusive_for`, as [`try_shared_for_until`].
#[inline]
pub(crate) fn try_exclusive_for_until<L>(
    l: &L,
    timeout: std::time::Duration,
) -> Option<L::ExclusiveGuard>
where
    L: lock_api::RawRwLockTimed<Instant = std::time::Instant>,
{
    match std::time::Instant::now().checked_add(timeout) {
        Some(d) => l.try_lock_exclusive_until(d),
        None => Some(l.lock_exclusive()),
    }
}

#[cfg(not(loom))]
pub use bravo::GLOBAL_TABLE;
pub use bravo::{Bravo, BravoShared, INHIBIT_MULTIPLIER, TABLE_SLOTS, VisibleReaders};
pub use np::{RwNp, RwNpGuard};
pub use queue::{
    PARKED, RwNative, RwNativeNp, RwQueue, RwQueueReadGuard, RwQueueWriteGuard, RwQueued, RwSmartQ,
};
pub use tas_b::{RwTasB, SLEEPERS, UPGRADABLE, WRITER};

/// A reader-writer lock over any mpsync RW lock `L`: `rwlock::RwLock<RwSmartQ, T>`.
/// (The same type as `lock_api::RwLock<L, T>`; [`crate::rwlock::RwLock<T>`] is this
/// with the recommended lock.)
pub type RwLock<L, T> = lock_api::RwLock<L, T>;
/// A read guard of an [`RwLock`].
pub type RwLockReadGuard<'a, L, T> = lock_api::RwLockReadGuard<'a, L, T>;
/// A write guard of an [`RwLock`].
pub type RwLockWriteGuard<'a, L, T> = lock_api::RwLockWriteGuard<'a, L, T>;
/// An upgradable read guard of an [`RwLock`].
pub type RwLockUpgradableReadGuard<'a, L, T> = lock_api::RwLockUpgradableReadGuard<'a, L, T>;

/// RW-TAS-B with both kinds of section no-preempt (paper 001 §4).
pub type RwTasBNp = RwNp<RwTasB>;

#[cfg(all(test, not(loom)))]
mod tests {
    //! Small enough for Miri: single-thread protocol and a two-thread counter.
    use super::*;
    use crate::rwlock::RwLock;
    use lock_api::RawRwLock;

    fn protocol<L: RawRwLock>() {
        let l = L::INIT;
        assert!(!l.is_locked());
        let r1 = l.lock_shared();
        let r2 = l.try_lock_shared().expect("readers share");
        assert!(l.is_locked());
        assert!(!l.is_locked_exclusive());
        assert!(l.try_lock_exclusive().is_none(), "writer while readers");
        // SAFETY: both came from this lock on this thread.
        unsafe {
            l.unlock_shared(r1);
            l.unlock_shared(r2);
        }
        assert!(!l.is_locked());
        let w = l.lock_exclusive();
        assert!(l.is_locked_exclusive());
        assert!(l.try_lock_shared().is_none(), "reader while writer");
        assert!(l.try_lock_exclusive().is_none(), "two writers");
        // SAFETY: as above.
        unsafe { l.unlock_exclusive(w) };
        let w = l.try_lock_exclusive().expect("free lock");
        // SAFETY: as above.
        unsafe { l.unlock_exclusive(w) };
        assert!(!l.is_locked());
        assert_eq!(crate::sched::current().depth(), 0);
    }

    fn two_threads<L: RawRwLock + Sync>() {
        let m: RwLock<L, (u64, u64)> = RwLock::new((0, 0));
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for i in 0..40 {
                        if i % 3 == 0 {
                            let mut g = m.write();
                            g.0 += 1;
                            g.1 += 1;
                        } else {
                            let g = m.read();
                            assert_eq!(g.0, g.1);
                        }
                    }
                });
            }
        });
        assert_eq!(m.into_inner(), (28, 28));
    }

    macro_rules! rw_tests {
        ($($name:ident: $l:ty),*) => {$(
            mod $name {
                use super::*;
                #[test]
                fn single_thread_protocol() { protocol::<$l>() }
                #[test]
                fn two_thread_counter() { two_threads::<$l>() }
            }
        )*};
    }

    rw_tests!(
        rw_tas_b: RwTasB,
        rw_tas_b_np: RwTasBNp,
        rw_queued: RwQueued,
        rw_smart_q: RwSmartQ,
        rw_native: RwNative,
        rw_native_np: RwNativeNp,
        bravo_rw_tas_b: Bravo<RwTasB>,
        bravo_rw_smart_q: Bravo<RwSmartQ>,
        bravo_rw_native: Bravo<RwNative>
    );

    /// Upgradable reads, one thread: exclusion against writers and other
    /// upgradable readers, try_upgrade refused while a reader is inside, the
    /// upgrade once it left.
    fn upgrade_protocol<L: lock_api::RawRwLockUpgrade>() {
        let l = L::INIT;
        let r = l.lock_shared();
        let u = l.lock_upgradable();
        assert!(l.try_lock_upgradable().is_none(), "two upgradable readers");
        assert!(l.try_lock_exclusive().is_none(), "writer beside upgradable");
        // SAFETY: all guards came from this lock on this thread.
        let Err(u) = (unsafe { l.try_upgrade(u) }) else {
            panic!("upgraded while a reader is inside");
        };
        // SAFETY: as above.
        unsafe { l.unlock_shared(r) };
        // SAFETY: as above.
        let Ok(w) = (unsafe { l.try_upgrade(u) }) else {
            panic!("no upgrade with no reader left");
        };
        assert!(l.is_locked_exclusive());
        assert!(l.try_lock_shared().is_none(), "reader while upgraded");
        // SAFETY: as above.
        unsafe { l.unlock_exclusive(w) };
        assert!(!l.is_locked());
        let u = l.try_lock_upgradable().expect("free lock");
        // SAFETY: as above.
        let w = unsafe { l.upgrade(u) };
        // SAFETY: as above.
        unsafe { l.unlock_exclusive(w) };
        let u = l.lock_upgradable();
        // SAFETY: as above.
        unsafe { l.unlock_upgradable(u) };
        assert!(!l.is_locked());
        assert_eq!(crate::sched::current().depth(), 0);
    }

    /// Two threads increment through upgradable reads (read, upgrade, write)
    /// beside plain reads: no increment is lost.
    fn upgrade_two_threads<L: lock_api::RawRwLockUpgrade + Sync>() {
        let m: RwLock<L, (u64, u64)> = RwLock::new((0, 0));
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for i in 0..30 {
                        if i % 2 == 0 {
                            let u = m.upgradable_read();
                            let seen = u.0;
                            let mut w = lock_api::RwLockUpgradableReadGuard::upgrade(u);
                            assert_eq!(w.0, seen, "a write slipped in during the upgrade");
                            w.0 += 1;
                            w.1 += 1;
                        } else {
                            let g = m.read();
                            assert_eq!(g.0, g.1);
                        }
                    }
                });
            }
        });
        assert_eq!(m.into_inner(), (30, 30));
    }

    macro_rules! upgrade_tests {
        ($($name:ident: $l:ty),*) => {$(
            mod $name {
                use super::*;
                #[test]
                fn upgrade_single_thread() { upgrade_protocol::<$l>() }
                #[test]
                fn upgrade_two_thread_counter() { upgrade_two_threads::<$l>() }
            }
        )*};
    }

    upgrade_tests!(
        up_rw_tas_b: RwTasB,
        up_rw_tas_b_np: RwTasBNp,
        up_rw_queued: RwQueued,
        up_rw_smart_q: RwSmartQ,
        up_rw_native: RwNative,
        up_rw_native_np: RwNativeNp,
        up_bravo_rw_tas_b: Bravo<RwTasB>,
        up_bravo_rw_smart_q: Bravo<RwSmartQ>,
        up_bravo_rw_native: Bravo<RwNative>
    );

    /// BRAVO's upgradable reads with the bias on: the upgradable reader takes
    /// the slow path (fast readers still enter beside it), `try_upgrade` fails
    /// while a fast reader is inside and leaves the bias off, and both upgrades
    /// revoke the bias.
    #[test]
    fn bravo_upgrade_revokes_the_bias() {
        use lock_api::RawRwLockUpgrade;
        let l: Bravo<RwTasB> = Bravo::new(RwTasB::new());
        // SAFETY (all blocks below): every guard came from `l` on this thread.
        unsafe { l.unlock_shared(l.lock_shared()) }; // enables the bias
        assert!(l.is_biased());
        let u = l.lock_upgradable();
        assert_eq!(
            l.fast_readers(),
            0,
            "the upgradable reader took the fast path"
        );
        assert!(
            l.inner().is_locked(),
            "the upgradable reader is not in the lock"
        );
        assert!(l.is_biased(), "taking an upgradable read revoked the bias");
        let r = l.lock_shared();
        assert!(matches!(r, BravoShared::Fast(_)), "{r:?}");
        // SAFETY: `u` is this thread's upgradable guard of `l`.
        let Err(u) = (unsafe { l.try_upgrade(u) }) else {
            panic!("upgraded beside a fast reader");
        };
        assert!(!l.is_biased(), "the failed try left the bias on");
        // SAFETY: `r` is this thread's shared guard of `l`.
        unsafe { l.unlock_shared(r) };
        // SAFETY: `u` came back from the failed try above, still held.
        let Ok(w) = (unsafe { l.try_upgrade(u) }) else {
            panic!("no upgrade with no reader left");
        };
        assert!(!l.is_biased());
        assert_eq!(l.fast_readers(), 0);
        // SAFETY: `w` is this thread's exclusive guard of `l`.
        unsafe { l.unlock_exclusive(w) };
        // The blocking upgrade revokes too. A slow read re-enables the bias
        // once the inhibit period (9x the last revocation, a few µs) is over.
        let start = std::time::Instant::now();
        while !l.is_biased() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(20),
                "no slow read re-enabled the bias in 20 s"
            );
            // SAFETY: the guard was just taken on this thread.
            unsafe { l.unlock_shared(l.lock_shared()) };
        }
        let u = l.lock_upgradable();
        // SAFETY: `u` was just taken on this thread.
        let w = unsafe { l.upgrade(u) };
        assert!(!l.is_biased(), "the upgrade left the bias on");
        assert!(
            l.try_lock_shared().is_none(),
            "a reader beside the upgraded writer"
        );
        // SAFETY: `w` came from the upgrade just above, on this thread.
        unsafe { l.unlock_exclusive(w) };
        assert!(!l.is_locked());
    }

    #[test]
    fn bravo_fast_path_and_revocation() {
        let l: Bravo<RwTasB> = Bravo::new(RwTasB::new());
        assert!(!l.is_biased(), "INIT is unbiased");
        // The first (slow) reader enables the bias; the next reads fast.
        let r1 = l.lock_shared();
        assert!(matches!(r1, BravoShared::Slow(_)));
        assert!(l.is_biased());
        let r2 = l.lock_shared();
        assert!(matches!(r2, BravoShared::Fast(_)), "{r2:?}");
        assert_eq!(l.fast_readers(), 1);
        assert!(l.try_lock_exclusive().is_none(), "writer while readers");
        // SAFETY: both came from this lock on this thread.
        unsafe {
            l.unlock_shared(r1);
            l.unlock_shared(r2);
        }
        // A failed try revoked the bias; a slow reader may re-enable it after
        // the inhibit period. Now the writer revokes (or finds it off).
        let w = l.lock_exclusive();
        assert!(!l.is_biased(), "a writer inside keeps the bias off");
        assert_eq!(l.fast_readers(), 0);
        assert!(l.try_lock_shared().is_none());
        // SAFETY: from this lock on this thread.
        unsafe { l.unlock_exclusive(w) };
        assert!(!l.is_locked());
        assert!(format!("{l:?}").contains("fast_readers: 0"));
    }

    #[test]
    fn bravo_drop_clears_a_forgotten_fast_guard() {
        // Its own table, so that no other test's lock shares the slots.
        static TABLE: VisibleReaders = VisibleReaders::new();
        let l: Box<RwLock<Bravo<RwTasB>, u8>> = Box::new(RwLock::from_raw(
            Bravo::with_table(RwTasB::new(), &TABLE),
            0,
        ));
        drop(l.read()); // enables the bias
        std::mem::forget(l.read());
        // SAFETY: only inspects the raw lock.
        let raw = unsafe { l.raw() };
        assert_eq!(raw.fast_readers(), 1);
        assert_eq!(TABLE.used(), 1);
        drop(l);
        assert_eq!(TABLE.used(), 0, "the dropped lock's slot stays taken");
    }

    /// A forgotten fast read guard's slot must be cleared when the lock is
    /// dropped even after a failed `try_write` turned the bias off: it would
    /// stay taken for good, and — were locks named by their address — a new
    /// lock made at the same address would find the slot naming it, and once
    /// a reader biased it, its writers would wait for that slot forever.
    #[test]
    fn bravo_drop_clears_a_forgotten_fast_guard_after_the_bias_went_off() {
        // Its own table, so that no other test's lock shares the slots.
        static TABLE: VisibleReaders = VisibleReaders::new();
        let new = || RwLock::from_raw(Bravo::with_table(RwTasB::new(), &TABLE), 0u8);
        let mut l: Box<RwLock<Bravo<RwTasB>, u8>> = Box::new(new());
        drop(l.read()); // enables the bias
        std::mem::forget(l.read()); // a fast read, never released
        assert!(l.try_write().is_none(), "a writer beside a reader");
        // SAFETY: only inspects the raw lock.
        let raw = unsafe { l.raw() };
        assert!(!raw.is_biased(), "the failed try_write turns the bias off");
        let addr = raw as *const Bravo<RwTasB> as usize;
        *l = new(); // drops the old lock in place; the new one has its address
        // SAFETY: as above.
        let raw = unsafe { l.raw() };
        assert_eq!(raw as *const Bravo<RwTasB> as usize, addr);
        assert_eq!(
            TABLE.used(),
            0,
            "the dropped lock's forgotten fast reader still holds a slot"
        );
        drop(l.read()); // biases the new lock
        assert!(
            l.try_write().is_some(),
            "a new lock at the address of a dropped one refuses its writer"
        );
    }

    /// A lock moved away (`mem::replace`) after a fast read guard of it was
    /// forgotten: the guard's slot must not hold up a new lock made where the
    /// moved one was (a lock that identified itself by its address did, and
    /// nothing could clear the slot: the moved lock's drop looks for its new
    /// address). The moved lock keeps its forgotten reader, as any lock
    /// whose guard is forgotten stays held.
    #[test]
    fn bravo_a_forgotten_fast_guard_of_a_moved_lock_does_not_hold_up_its_old_place() {
        static TABLE: VisibleReaders = VisibleReaders::new();
        let new = || RwLock::from_raw(Bravo::with_table(RwTasB::new(), &TABLE), 0u8);
        let mut place: Box<RwLock<Bravo<RwTasB>, u8>> = Box::new(new());
        drop(place.read()); // enables the bias
        std::mem::forget(place.read()); // a fast read, never released
        let moved = std::mem::replace(&mut *place, new());
        drop(place.read()); // biases the new lock in the old place
        assert!(
            place.try_write().is_some(),
            "a new lock where a moved one was refuses its writer (the moved lock's forgotten reader)"
        );
        assert!(
            moved.try_write().is_none(),
            "a writer of the moved lock beside its forgotten reader"
        );
        drop(moved);
        drop(place);
        assert!(format!("{TABLE:?}").contains("used: 0"), "{TABLE:?}");
    }

    /// A failed `try_write` (and a failed `try_upgrade`) turns the bias off
    /// while a fast reader is still inside; a writer after it must still
    /// wait for that reader — the bias being off does not mean that no slot
    /// names the lock.
    #[test]
    fn bravo_a_writer_after_a_failed_try_waits_for_the_fast_reader() {
        use lock_api::RawRwLockUpgrade;
        static TABLE: VisibleReaders = VisibleReaders::new();
        for upgrade in [false, true] {
            let l = Bravo::with_table(RwTasB::new(), &TABLE);
            // SAFETY (all blocks): every guard came from `l` on this thread.
            unsafe { l.unlock_shared(l.lock_shared()) }; // enables the bias
            let r = l.lock_shared();
            assert!(matches!(r, BravoShared::Fast(_)), "{r:?}");
            if upgrade {
                let u = l.lock_upgradable();
                // SAFETY: as above.
                let Err(u) = (unsafe { l.try_upgrade(u) }) else {
                    panic!("upgraded beside a fast reader");
                };
                // SAFETY: as above.
                unsafe { l.unlock_upgradable(u) };
            } else {
                assert!(l.try_lock_exclusive().is_none(), "a writer beside a reader");
            }
            assert!(!l.is_biased());
            let w = l.try_lock_exclusive();
            let got = w.is_some();
            if let Some(w) = w {
                // SAFETY: as above.
                unsafe { l.unlock_exclusive(w) };
            }
            // SAFETY: as above.
            unsafe { l.unlock_shared(r) };
            assert!(
                !got,
                "a writer got the lock beside a fast reader, after a failed {}",
                if upgrade { "try_upgrade" } else { "try_write" }
            );
        }
    }

    #[test]
    fn debug_shows_state() {
        let l = RwQueued::new();
        let g = l.lock_shared();
        let s = format!("{l:?}");
        assert!(s.contains("readers: 1"), "{s}");
        // SAFETY: from this lock on this thread.
        unsafe { l.unlock_shared(g) };
    }
}
