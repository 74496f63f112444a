//! Partition information (paper 001 §3, extension 3): processors available to the
//! application, threads per processor, and a generation counter bumped at every
//! change. The emulated backend publishes it when it repartitions; the native
//! backend derives it from the affinity mask and the cgroup CPU quota.

use crate::sync::{AtomicU64, Ordering};

/// A snapshot of the application's partition.
#[derive(Debug, Clone, PartialEq)]
pub struct Partition {
    /// Processors available to the application now.
    pub processors: u32,
    /// Threads scheduled on each available processor (ours and others'), where
    /// known; empty if unknown.
    pub threads_per_processor: Vec<u32>,
    /// Bumped at every change of the partition.
    pub generation: u64,
    /// CPU quota in processors (cgroup `cpu.max`), if one is set.
    pub cpu_quota: Option<f64>,
    /// Which backend produced it: `"emulated"` or `"native"`.
    pub source: &'static str,
}

#[cfg(not(loom))]
static GENERATION: AtomicU64 = AtomicU64::new(0);
#[cfg(loom)]
loom::lazy_static! {
    static ref GENERATION: AtomicU64 = AtomicU64::new(0);
}

/// The current partition generation (cheap: one load).
#[inline]
pub fn generation() -> u64 {
    // Acquire: pairs with the Release in `bump`, so a reader that sees the new
    // generation also sees the partition published before it.
    GENERATION.load(Ordering::Acquire)
}

/// Advances the generation; returns the new value.
pub(crate) fn bump() -> u64 {
    // Release: publishes the partition stored before the bump (see `generation`).
    GENERATION.fetch_add(1, Ordering::Release) + 1
}

/// Most virtual processors a published emulated partition can describe.
pub const MAX_EMULATED_PROCESSORS: usize = 1024;

/// The partition the emulated scheduler published, as a sequence lock.
///
/// The writer is the pseudo-scheduler (or a thread attaching or detaching) while
/// it holds the scheduler's lock, at a moment when attached threads may be stopped
/// anywhere — inside `malloc`, or inside a reader of this very snapshot. So neither
/// side may allocate or take a lock: a writer that waited for a stopped thread
/// would never run again to resume it. The writer stores a few words; a reader
/// copies them and retries if a write overlapped (a preempted reader just retries
/// when it runs again; it never holds the writer up).
///
/// `std` atomics on purpose: only the pseudo-scheduler writes here, and it never
/// runs under loom, whose models see an empty snapshot.
struct EmulatedSnapshot {
    /// Odd while a write is under way; bumped by two per publication.
    seq: std::sync::atomic::AtomicU64,
    /// Whether a pseudo-scheduler is running (the other fields mean something).
    active: std::sync::atomic::AtomicBool,
    processors: std::sync::atomic::AtomicU32,
    generation: std::sync::atomic::AtomicU64,
    threads_per_processor: [std::sync::atomic::AtomicU32; MAX_EMULATED_PROCESSORS],
}

static EMULATED: EmulatedSnapshot = EmulatedSnapshot {
    seq: std::sync::atomic::AtomicU64::new(0),
    active: std::sync::atomic::AtomicBool::new(false),
    processors: std::sync::atomic::AtomicU32::new(0),
    generation: std::sync::atomic::AtomicU64::new(0),
    threads_per_processor: [const { std::sync::atomic::AtomicU32::new(0) };
        MAX_EMULATED_PROCESSORS],
};

/// Runs one write of the snapshot. Writers are serialized by the scheduler's lock.
fn write_snapshot(write: impl FnOnce(&EmulatedSnapshot)) {
    use std::sync::atomic::{Ordering as O, fence};
    let s = &EMULATED;
    // Relaxed: writers are serialized by the caller's lock, which orders this load
    // after the previous writer's stores.
    let seq = s.seq.load(O::Relaxed);
    s.seq.store(seq.wrapping_add(1), O::Relaxed);
    // Release fence: orders the odd `seq` before the field stores below, so a
    // reader that sees any new field also sees `seq` odd (or moved) on its re-check
    // (pairs with the Acquire fence in `emulated`).
    fence(O::Release);
    write(s);
    // Release: publishes the field stores; pairs with the Acquire load of `seq` at
    // the start of `emulated`.
    s.seq.store(seq.wrapping_add(2), O::Release);
}

/// The emulated backend publishes its partition: `processors` available, the
/// threads on each (at most [`MAX_EMULATED_PROCESSORS`] values are kept), and its
/// generation. Neither allocates nor locks.
pub(crate) fn publish_emulated(
    processors: u32,
    threads_per_processor: impl Iterator<Item = u32>,
    generation: u64,
) {
    use std::sync::atomic::Ordering as O;
    write_snapshot(|s| {
        // Relaxed stores: ordered by the seqlock (see `write_snapshot`).
        let mut n = 0;
        for (slot, t) in s.threads_per_processor.iter().zip(threads_per_processor) {
            slot.store(t, O::Relaxed);
            n += 1;
        }
        s.processors.store(processors.min(n as u32), O::Relaxed);
        s.generation.store(generation, O::Relaxed);
        s.active.store(true, O::Relaxed);
    });
}

/// The emulated backend withdraws its partition (the scheduler stopped).
pub(crate) fn withdraw_emulated() {
    // Relaxed: ordered by the seqlock (see `write_snapshot`).
    write_snapshot(|s| s.active.store(false, std::sync::atomic::Ordering::Relaxed));
}

/// The emulated partition, if a pseudo-scheduler is running.
pub(crate) fn emulated() -> Option<Partition> {
    use std::sync::atomic::{Ordering as O, fence};
    let s = &EMULATED;
    let mut tpp = Vec::new();
    loop {
        // Acquire: pairs with the Release store that ends a write, so the fields
        // read below are at least that write's.
        let seq = s.seq.load(O::Acquire);
        if seq % 2 == 1 {
            crate::sync::spin_loop();
            continue;
        }
        // Relaxed loads: validated by the re-check of `seq` below.
        let active = s.active.load(O::Relaxed);
        let processors = s.processors.load(O::Relaxed);
        let generation = s.generation.load(O::Relaxed);
        tpp.clear();
        if active {
            tpp.extend(
                s.threads_per_processor[..processors as usize]
                    .iter()
                    .map(|t| t.load(O::Relaxed)),
            );
        }
        // Acquire fence: orders the field loads before the re-check; pairs with the
        // Release fence in `write_snapshot` (a field of a newer write implies the
        // re-check sees the newer `seq`).
        fence(O::Acquire);
        if s.seq.load(O::Relaxed) != seq {
            continue;
        }
        return active.then_some(Partition {
            processors,
            threads_per_processor: tpp,
            generation,
            cpu_quota: None,
            source: "emulated",
        });
    }
}
