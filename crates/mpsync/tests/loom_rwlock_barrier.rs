//! Loom models of the reader-writer locks' hand-offs and of every barrier.
//!
//! RW locks: the queued lock's reader chain admission (two readers and a writer
//! in every order), a writer behind readers, every thread acting twice (a reader
//! that comes back as a writer, a writer that comes back as a reader), RW-Smart-Q
//! with a "kernel" preempting a waiter so that the admission hand-off races the
//! preemption, and RW-TAS-B. Loom's `UnsafeCell` flags any access not ordered
//! by the lock, so a missing Acquire/Release shows up as well as a double grant.
//!
//! BRAVO (`Bravo<RwTasB>`, bias on): a reader reading twice against a writer
//! that writes and then reads — the reader-publish / writer-revoke Dekker pair
//! (its SeqCst fences) and the slow reader re-enabling the bias. Upgradable
//! reads (RW-TAS-B, RW-Queued, BRAVO over RW-TAS-B with a fast reader): an
//! upgrader reads, upgrades and writes beside a thread that reads and then writes.
//! Downgrades (RW-TAS-B, RW-Queued): a writer that downgrades and reads beside a
//! writer that then reads.
//!
//! Barriers: two participants, two episodes each; in every episode each writes
//! its own cell before the wait and reads the other's after it (then waits once
//! more, so the next write cannot race the read). Loom flags a read not ordered
//! after the write — a wait that returned early, or a release without Release.
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p mpsync --release --target-dir target/loom --test loom_rwlock_barrier -- --test-threads=1`
#![cfg(loom)]

use lock_api::{RawRwLock, RawRwLockUpgrade};
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;
use mpsync::barrier::{
    Barrier, Central, CombiningTree, Dissemination, McsTree, ScalableSc, WaitMode,
};
use mpsync::lock::{Native, Queued, SmartQ};
use mpsync::rwlock::{Bravo, RwQueue, RwQueued, RwSmartQ, RwTasB, VisibleReaders};
use mpsync::sched::{self, Actor, ThreadState};

fn queued() -> RwQueued {
    RwQueued::with_admission(Queued::new())
}

fn smart_q() -> RwSmartQ {
    RwSmartQ::with_admission(SmartQ::new())
}

/// What a model thread does, in order: `true` = write, `false` = read.
fn rw_model<L: RawRwLock + Send + Sync + 'static>(
    make: fn() -> L,
    plans: &'static [&'static [bool]],
    preemptions: usize,
) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    // Three threads spinning in a queue lock (each spin is a model yield) take
    // more than loom's default 1,000 branches in one execution.
    b.max_branches = 20_000;
    b.check(move || {
        let shared = Arc::new((make(), UnsafeCell::new(0u32)));
        let writes: u32 = plans
            .iter()
            .map(|p| p.iter().filter(|w| **w).count() as u32)
            .sum();
        let ts: Vec<_> = plans
            .iter()
            .map(|plan| {
                let s = shared.clone();
                thread::spawn(move || {
                    for &write in *plan {
                        if write {
                            let g = s.0.lock_exclusive();
                            // SAFETY: the write lock is held.
                            s.1.with_mut(|p| unsafe { *p += 1 });
                            // SAFETY: from this lock on this thread.
                            unsafe { s.0.unlock_exclusive(g) };
                        } else {
                            let g = s.0.lock_shared();
                            // SAFETY: the read lock is held.
                            let _ = s.1.with(|p| unsafe { *p });
                            // SAFETY: from this lock on this thread.
                            unsafe { s.0.unlock_shared(g) };
                        }
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        // SAFETY: all threads joined.
        assert_eq!(shared.1.with(|p| unsafe { *p }), writes);
    });
}

/// Two readers and a writer, each once: readers admitted one after another
/// share; the writer drains whichever got in before it. (Preemption bound 1:
/// at 2, three threads spinning in the MCS queue exceed 20,000 branches in one
/// execution.)
#[test]
fn rw_queued_reader_chain_admission() {
    rw_model(queued, &[&[false], &[false], &[true]], 1);
}

/// A reader that comes back as a writer, and a writer that comes back as a
/// reader (the writer behind a reader, then a reader behind a writer).
#[test]
fn rw_queued_twice() {
    rw_model(queued, &[&[false, true], &[true, false]], 3);
}

/// RW-Native (futex admission; the writer parks on the reader count).
#[test]
fn rw_native_twice() {
    rw_model(
        || RwQueue::<Native, false>::with_admission(Native::new()),
        &[&[false, true], &[true, false]],
        3,
    );
}

#[test]
fn rw_tas_b_twice() {
    rw_model(RwTasB::new, &[&[false, true], &[true, false]], 3);
}

/// BRAVO over RW-TAS-B with the bias already on: a reader that reads twice
/// (each read may take the fast path: publish in the table, fence, re-check
/// the bias) and a writer that writes (revoke: clear the bias, fence, wait
/// for the table) and then reads (slow path, re-enabling the bias). The
/// reader-publish / writer-revoke Dekker pair: loom's `UnsafeCell` flags a
/// fast read overlapping the write.
fn bravo_tas_b() -> Bravo<RwTasB> {
    // A table per model execution (leaked: a lock needs a `'static` one).
    let l = Bravo::with_table(RwTasB::new(), Box::leak(Box::new(VisibleReaders::new())));
    // A first (slow-path) read turns the bias on.
    let g = l.lock_shared();
    // SAFETY: from this lock on this thread.
    unsafe { l.unlock_shared(g) };
    assert!(l.is_biased());
    l
}

#[test]
fn bravo_reader_publish_vs_writer_revoke() {
    rw_model(bravo_tas_b, &[&[false, false], &[true, false]], 2);
}

/// BRAVO, one read against one write, deeper (preemption bound 3): a reader
/// that published, then finds the bias revoked and withdraws, while the
/// revoking writer parks for its slot — the withdrawal must wake it as an
/// unlock does (a hang seen in rwlock-oversub before it did).
#[test]
fn bravo_withdrawal_vs_parked_revoker() {
    rw_model(bravo_tas_b, &[&[false], &[true]], 3);
}

/// BRAVO: a writer's `try_lock_exclusive` that gives up beside a fast reader
/// leaves the bias off while the reader is still inside; the same writer's
/// blocking `lock_exclusive` after it must still wait for that reader (the
/// bias being off does not say that no slot names the lock). Loom's
/// `UnsafeCell` flags a write beside the fast read.
#[test]
fn bravo_writer_after_a_failed_try_vs_fast_reader() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.max_branches = 20_000;
    b.check(|| {
        let s = Arc::new((bravo_tas_b(), UnsafeCell::new(0u32)));
        let r = s.clone();
        let reader = thread::spawn(move || {
            let g = r.0.lock_shared();
            // SAFETY: the read lock is held.
            let _ = r.1.with(|p| unsafe { *p });
            // SAFETY: from this lock on this thread.
            unsafe { r.0.unlock_shared(g) };
        });
        let mut writes = 1;
        if let Some(w) = s.0.try_lock_exclusive() {
            // SAFETY: the write lock is held.
            s.1.with_mut(|p| unsafe { *p += 1 });
            // SAFETY: from this lock on this thread.
            unsafe { s.0.unlock_exclusive(w) };
            writes += 1;
        }
        let w = s.0.lock_exclusive();
        // SAFETY: the write lock is held.
        s.1.with_mut(|p| unsafe { *p += 1 });
        // SAFETY: from this lock on this thread.
        unsafe { s.0.unlock_exclusive(w) };
        reader.join().unwrap();
        // SAFETY: all threads joined.
        assert_eq!(s.1.with(|p| unsafe { *p }), writes);
    });
}

/// Upgradable reads: thread 1 takes an upgradable read, reads, upgrades and
/// writes (what it read must still be there); thread 2 reads, then writes.
/// Loom's `UnsafeCell` flags a write not ordered after a read, or a read
/// beside the upgraded write.
fn upgrade_model<L: RawRwLockUpgrade + Send + Sync + 'static>(make: fn() -> L, preemptions: usize) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.max_branches = 20_000;
    b.check(move || {
        let shared = Arc::new((make(), UnsafeCell::new(0u32)));
        let s1 = shared.clone();
        let t1 = thread::spawn(move || {
            let u = s1.0.lock_upgradable();
            // SAFETY: the upgradable read lock is held.
            let seen = s1.1.with(|p| unsafe { *p });
            // SAFETY: `u` came from this lock on this thread.
            let w = unsafe { s1.0.upgrade(u) };
            // SAFETY: the write lock is held.
            s1.1.with_mut(|p| unsafe {
                assert_eq!(*p, seen, "a write slipped in during the upgrade");
                *p += 1;
            });
            // SAFETY: from this lock on this thread.
            unsafe { s1.0.unlock_exclusive(w) };
        });
        let s2 = shared.clone();
        let t2 = thread::spawn(move || {
            let g = s2.0.lock_shared();
            // SAFETY: the read lock is held.
            let _ = s2.1.with(|p| unsafe { *p });
            // SAFETY: from this lock on this thread.
            unsafe { s2.0.unlock_shared(g) };
            let w = s2.0.lock_exclusive();
            // SAFETY: the write lock is held.
            s2.1.with_mut(|p| unsafe { *p += 1 });
            // SAFETY: from this lock on this thread.
            unsafe { s2.0.unlock_exclusive(w) };
        });
        t1.join().unwrap();
        t2.join().unwrap();
        // SAFETY: all threads joined.
        assert_eq!(shared.1.with(|p| unsafe { *p }), 2);
    });
}

#[test]
fn rw_tas_b_upgrade() {
    upgrade_model(RwTasB::new, 3);
}

#[test]
fn rw_queued_upgrade() {
    upgrade_model(queued, 2);
}

/// BRAVO over RW-TAS-B with the bias on: thread 2's read takes the fast path
/// (publish, fence, re-check) while thread 1's upgrade revokes the bias (after
/// RW-TAS-B's upgrade) and writes; thread 2's slow-path write after it. Loom's
/// `UnsafeCell` flags the fast read overlapping the upgraded write.
#[test]
fn bravo_upgrade_vs_fast_reader() {
    upgrade_model(bravo_tas_b, 2);
}

/// RW-Smart-Q with a "kernel" that preempts thread 1 (and resumes it) at any
/// point: the Smart-Q admission hand-off's CAS to OtherUnpreemptable races the
/// kernel's CAS to Preempted; a skipped waiter retries, and every section is
/// still exclusive where it must be and counted once. Bound 2 (bound 3 took
/// ~250 s, half of CI's loom step; `LOOM_MAX_PREEMPTIONS=3` runs it deeper).
#[test]
fn rw_smart_q_handoff_vs_preemption() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(
        std::env::var("LOOM_MAX_PREEMPTIONS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(2),
    );
    b.check(|| {
        let shared = Arc::new((smart_q(), UnsafeCell::new(0u32)));
        let (tx, rx) = loom::sync::mpsc::channel();
        let ts: Vec<_> = (0..2)
            .map(|i| {
                let s = shared.clone();
                let tx = tx.clone();
                thread::spawn(move || {
                    if i == 1 {
                        tx.send(sched::current() as *const _ as usize).unwrap();
                        let g = s.0.lock_shared();
                        // SAFETY: the read lock is held.
                        let _ = s.1.with(|p| unsafe { *p });
                        // SAFETY: from this lock on this thread.
                        unsafe { s.0.unlock_shared(g) };
                    }
                    let g = s.0.lock_exclusive();
                    // SAFETY: the write lock is held.
                    s.1.with_mut(|p| unsafe { *p += 1 });
                    // SAFETY: from this lock on this thread.
                    unsafe { s.0.unlock_exclusive(g) };
                })
            })
            .collect();
        // SAFETY: context blocks are never freed (registry contract).
        let cb: &'static sched::ContextBlock =
            unsafe { &*(rx.recv().unwrap() as *const sched::ContextBlock) };
        if cb
            .transition(
                ThreadState::Preemptable,
                ThreadState::Preempted,
                Actor::Kernel,
            )
            .is_ok()
        {
            cb.transition(
                ThreadState::Preempted,
                ThreadState::Preemptable,
                Actor::Kernel,
            )
            .unwrap();
        }
        for t in ts {
            t.join().unwrap();
        }
        // SAFETY: all threads joined.
        assert_eq!(shared.1.with(|p| unsafe { *p }), 2);
    });
}

/// Two participants, two episodes each (see the module doc).
fn barrier_model<B: Barrier + 'static>(make: fn() -> B, preemptions: usize) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.check(move || {
        let shared = Arc::new((make(), [UnsafeCell::new(0u32), UnsafeCell::new(0u32)]));
        let leaders = Arc::new(loom::sync::atomic::AtomicU32::new(0));
        let ts: Vec<_> = (0..2)
            .map(|id| {
                let s = shared.clone();
                let leaders = leaders.clone();
                thread::spawn(move || {
                    for k in 1..=2u32 {
                        // SAFETY: only participant `id` writes its cell, and the
                        // other reads it only between our two waits.
                        s.1[id].with_mut(|p| unsafe { *p = k });
                        if s.0.wait(id).is_leader() {
                            leaders.fetch_add(1, loom::sync::atomic::Ordering::Relaxed);
                        }
                        // SAFETY: as above: the barrier orders the write before us.
                        let seen = s.1[1 - id].with(|p| unsafe { *p });
                        assert_eq!(seen, k, "left episode {k} before the other arrived");
                        s.0.wait(id);
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        assert!(leaders.load(loom::sync::atomic::Ordering::Relaxed) == 2);
    });
}

#[test]
fn central_spin_two_episodes() {
    barrier_model(|| Central::new(2, WaitMode::Spin).unwrap(), 2);
}

#[test]
fn central_block_two_episodes() {
    barrier_model(|| Central::new(2, WaitMode::Block).unwrap(), 2);
}

#[test]
fn combining_tree_two_episodes() {
    barrier_model(|| CombiningTree::new(2, WaitMode::HEURISTIC).unwrap(), 2);
}

#[test]
fn dissemination_two_episodes() {
    barrier_model(|| Dissemination::new(2).unwrap(), 2);
}

#[test]
fn mcs_tree_two_episodes() {
    barrier_model(|| McsTree::new(2).unwrap(), 2);
}

#[test]
fn scalable_sc_two_episodes() {
    barrier_model(|| ScalableSc::new(2).unwrap(), 2);
}

/// A writer that downgrades to a read (and reads what it wrote) beside a
/// writer that then reads: the downgrade must keep the other writer out
/// until the downgraded read ends (loom's `UnsafeCell` flags the overlap), and
/// publish the write to the readers it lets in.
fn downgrade_model<L>(make: fn() -> L, preemptions: usize)
where
    L: lock_api::RawRwLockDowngrade + Send + Sync + 'static,
{
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.max_branches = 20_000;
    b.check(move || {
        let s = Arc::new((make(), UnsafeCell::new(0u32)));
        let s2 = s.clone();
        let t = thread::spawn(move || {
            let g = s2.0.lock_exclusive();
            // SAFETY: the write lock is held.
            s2.1.with_mut(|p| unsafe { *p += 1 });
            // SAFETY: from this lock on this thread.
            let g = unsafe { s2.0.downgrade(g) };
            // SAFETY: the (downgraded) read lock is held.
            let v = s2.1.with(|p| unsafe { *p });
            assert!(v >= 1, "the downgraded reader lost its own write");
            // SAFETY: from this lock on this thread.
            unsafe { s2.0.unlock_shared(g) };
        });
        let g = s.0.lock_exclusive();
        // SAFETY: the write lock is held.
        s.1.with_mut(|p| unsafe { *p += 1 });
        // SAFETY: from this lock on this thread.
        unsafe { s.0.unlock_exclusive(g) };
        let g = s.0.lock_shared();
        // SAFETY: the read lock is held.
        let _ = s.1.with(|p| unsafe { *p });
        // SAFETY: from this lock on this thread.
        unsafe { s.0.unlock_shared(g) };
        t.join().unwrap();
        // SAFETY: joined.
        assert_eq!(s.1.with(|p| unsafe { *p }), 2);
    });
}

#[test]
fn rw_tas_b_downgrade() {
    downgrade_model(RwTasB::new, 3);
}

#[test]
fn rw_queued_downgrade() {
    downgrade_model(queued, 2);
}
