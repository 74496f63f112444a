//! ScalableSc: the scalable scheduler-conscious two-level barrier of paper 001
//! §3.3 — a centralized barrier among the threads of one processor, a
//! combining tree across processors, reorganized when the partition changes.
//!
//! Wisniewski, Kontothanassis & Scott, PPoPP 1995 §3.3 (papers/001_…; Axelrod's
//! and Markatos et al.'s two-level scheme). A `Layout` puts each participant
//! in the group of the processor it is scheduled on — the emulated scheduler's
//! assignment (`ContextBlock::processor`), natively participant `id mod P`
//! for the `P` processors of the affinity mask (capped by the cgroup quota),
//! since Linux moves threads freely. Within a group, every arrival but the last
//! **blocks** at once (its peers need its processor); the last is the group's
//! **representative** and climbs a fan-in-4 tree of the groups. A representative
//! that is not last at a tree node waits **scheduler-consciously**: it spins
//! while every participant still to arrive is running, and blocks as soon as
//! one is preempted (`sched::is_preempted`, the rule of 001's reference \[10\]) or after 50 µs.
//!
//! Reorganization (the paper's "representative election" and "barrier
//! reorganization" phases): the barrier shadows `sched::generation()`. The
//! last arriver at the root — the leader, while everyone else waits — compares
//! the two; if they differ it builds a new layout from `sched::partition()`
//! (which also re-reads the native affinity mask, at most every 10 ms) and
//! publishes it before releasing the episode. So the structure changes only at
//! a departure point, and at most one episode runs on outdated information.
//! Old layouts are kept until the barrier is dropped (a reorganization is rare:
//! the papers repartition once a second).
//!
//! Uses `sched`: `generation`, `partition`, `current`, `is_preempted`,
//! `park`/`unpark_all`.
//!
//! ```
//! use mpsync::barrier::{Barrier, ScalableSc};
//! let b = ScalableSc::new(2).unwrap();
//! std::thread::scope(|s| {
//!     s.spawn(|| b.wait(0));
//!     b.wait(1);
//! });
//! assert!(b.reorganizations() <= 1);
//! ```

use std::ptr;
use std::time::Duration;

use super::tree::{Arrival, Tree};
use super::{
    Barrier, BarrierError, BarrierWaitResult, Release, WaitMode, check_id, check_participants,
};
use crate::sched::{self, ContextBlock, stall};
use crate::sync::{AtomicPtr, AtomicU32, AtomicU64, Ordering, StdMutex};
use crate::util::CachePadded;
use crate::util::clock::now_ns;

/// How long a representative spins before blocking when nobody it waits for
/// looks preempted.
const REP_SPIN: Duration = Duration::from_micros(50);
/// The leader re-reads the native partition at most this often.
const POLL_NS: u64 = 10_000_000;

/// One participant's public slot.
#[derive(Debug)]
struct Slot {
    /// Its thread's context block (set at each arrival; blocks live forever).
    cb: AtomicPtr<ContextBlock>,
    /// The episode it last arrived in, plus one (0: never).
    arrived: AtomicU32,
}

/// Who is in which group, and the tree over the groups, for one partition
/// generation.
#[derive(Debug)]
struct Layout {
    generation: u64,
    processors: u32,
    group_of: Vec<u32>,
    tree: Tree,
}

impl Layout {
    /// Groups participants by `processor_of(id)` (any `u32`; compacted).
    fn new(
        generation: u64,
        processors: u32,
        processor_of: impl Fn(usize) -> u32,
        n: usize,
    ) -> Self {
        let mut procs: Vec<u32> = (0..n).map(&processor_of).collect();
        let mut distinct = procs.clone();
        distinct.sort_unstable();
        distinct.dedup();
        for p in &mut procs {
            *p = distinct.binary_search(p).expect("present") as u32;
        }
        let mut sizes = vec![0u32; distinct.len()];
        for &g in &procs {
            sizes[g as usize] += 1;
        }
        Self {
            generation,
            processors,
            group_of: procs,
            tree: Tree::new(&sizes),
        }
    }
}

/// The scalable scheduler-conscious two-level barrier.
pub struct ScalableSc {
    n: u32,
    slots: Vec<CachePadded<Slot>>,
    layout: AtomicPtr<Layout>,
    /// Layouts replaced by a reorganization, freed on drop. Boxed: a
    /// participant may still hold a reference to one, so it must not move.
    #[allow(clippy::vec_box)]
    retired: StdMutex<Vec<Box<Layout>>>,
    release: Release,
    /// Leader-only: when the native partition was last polled.
    last_poll_ns: AtomicU64,
    reorganizations: AtomicU64,
}

impl std::fmt::Debug for ScalableSc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let l = self.layout();
        f.debug_struct("ScalableSc")
            .field("participants", &self.n)
            .field("generation", &l.generation)
            .field("processors", &l.processors)
            .field("tree_nodes", &l.tree.nodes())
            .field("reorganizations", &self.reorganizations())
            .finish()
    }
}

impl ScalableSc {
    /// A barrier for `n` participants, first laid out for the current partition
    /// with participants spread round-robin over its processors.
    pub fn new(n: usize) -> Result<Self, BarrierError> {
        let n = check_participants("Scalable-SC barrier", n)?;
        let p = processors_now();
        let layout = Layout::new(sched::generation(), p, |id| id as u32 % p, n as usize);
        Ok(Self {
            n,
            slots: (0..n)
                .map(|_| {
                    CachePadded::new(Slot {
                        cb: AtomicPtr::new(ptr::null_mut()),
                        arrived: AtomicU32::new(0),
                    })
                })
                .collect(),
            layout: AtomicPtr::new(Box::into_raw(Box::new(layout))),
            retired: StdMutex::new(Vec::new()),
            release: Release::new(),
            last_poll_ns: AtomicU64::new(now_ns()),
            reorganizations: AtomicU64::new(0),
        })
    }

    /// Times the barrier reorganized itself after a partition change.
    pub fn reorganizations(&self) -> u64 {
        // Relaxed: a statistic.
        self.reorganizations.load(Ordering::Relaxed)
    }

    /// Processor groups in the current layout.
    pub fn groups(&self) -> usize {
        let l = self.layout();
        l.group_of
            .iter()
            .copied()
            .max()
            .map_or(0, |g| g as usize + 1)
    }

    fn layout(&self) -> &Layout {
        // Acquire: pairs with the Release store in `reorganize`, so the layout's
        // fields are visible.
        let p = self.layout.load(Ordering::Acquire);
        // SAFETY: `layout` always points to a live boxed Layout: a replaced one
        // moves to `retired`, and both are freed only in `drop` (`&mut self`).
        unsafe { &*p }
    }

    /// Leader only, while every other participant waits: adopt the current
    /// partition if its generation moved.
    fn maybe_reorganize(&self, current: &Layout) {
        let now = now_ns();
        // Relaxed (both): leader-only bookkeeping; the next leader is ordered
        // after us by the episode release.
        // (Never under loom: the clock would make a model's executions differ.)
        if !cfg!(loom) && now.saturating_sub(self.last_poll_ns.load(Ordering::Relaxed)) >= POLL_NS {
            self.last_poll_ns.store(now, Ordering::Relaxed);
            let _ = sched::partition(); // natively: re-reads the mask, bumps the generation
        }
        if sched::generation() == current.generation {
            return;
        }
        let part = sched::partition();
        let mut p = part.processors.max(1);
        if let Some(q) = part.cpu_quota {
            p = p.min((q.ceil() as u32).max(1));
        }
        let layout = Layout::new(
            part.generation,
            p,
            |id| {
                // Relaxed: every participant stored its block before arriving,
                // and its arrival reached us through the AcqRel tree counters.
                let cb = self.slots[id].cb.load(Ordering::Relaxed);
                // SAFETY: null or a `&'static ContextBlock`.
                let proc_ = unsafe { cb.as_ref() }.and_then(|cb| cb.processor());
                match proc_ {
                    Some(v) if part.source == "emulated" && v < p => v,
                    _ => id as u32 % p,
                }
            },
            self.n as usize,
        );
        let old = self
            .layout
            // Release: publishes the new layout to the Acquire in `layout`
            // (everyone reads it only after the episode's release anyway).
            .swap(Box::into_raw(Box::new(layout)), Ordering::AcqRel);
        // SAFETY: `old` came from `Box::into_raw`; it stays alive in `retired`.
        let old = unsafe { Box::from_raw(old) };
        self.retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(old);
        // Relaxed: a statistic.
        self.reorganizations.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether a participant that has not arrived in episode `seen` looks
    /// preempted (then a representative stops spinning).
    fn someone_late_is_preempted(&self, seen: u32) -> bool {
        let want = seen.wrapping_add(1);
        self.slots.iter().any(|s| {
            // Relaxed (both): hints for a spin-or-block decision.
            s.arrived.load(Ordering::Relaxed) != want && {
                let cb = s.cb.load(Ordering::Relaxed);
                // SAFETY: null or a `&'static ContextBlock`.
                unsafe { cb.as_ref() }.is_some_and(sched::is_preempted)
            }
        })
    }
}

/// Processors of the current partition (at least 1).
fn processors_now() -> u32 {
    #[cfg(loom)]
    {
        1
    }
    #[cfg(not(loom))]
    {
        sched::partition().processors.max(1)
    }
}

impl Drop for ScalableSc {
    fn drop(&mut self) {
        let p = self.layout.load(Ordering::Relaxed);
        // SAFETY: `&mut self`: nobody else refers to the layout; it came from
        // `Box::into_raw`. Retired layouts drop with the vector.
        drop(unsafe { Box::from_raw(p) });
    }
}

impl Barrier for ScalableSc {
    fn name(&self) -> &'static str {
        "Scalable-SC"
    }

    fn participants(&self) -> usize {
        self.n as usize
    }

    fn wait(&self, id: usize) -> BarrierWaitResult {
        check_id("Scalable-SC barrier", id, self.n);
        let seen = self.release.current();
        let slot = &self.slots[id];
        let cb = sched::current();
        // Relaxed (both): read by the leader after our arrival reached it
        // through the AcqRel counters, and as hints by spinning representatives.
        slot.cb.store(
            cb as *const ContextBlock as *mut ContextBlock,
            Ordering::Relaxed,
        );
        slot.arrived.store(seen.wrapping_add(1), Ordering::Relaxed);
        let layout = self.layout();
        let group = layout.group_of[id] as usize;
        match layout.tree.arrive(group) {
            Arrival::AtLeaf => {
                // A peer on our processor will be the representative: give it
                // the processor.
                self.release.wait(seen, WaitMode::Block);
                BarrierWaitResult(false)
            }
            Arrival::Climbed => {
                self.release
                    .wait_with(seen, WaitMode::SpinThenBlock(REP_SPIN), || {
                        self.someone_late_is_preempted(seen)
                    });
                BarrierWaitResult(false)
            }
            Arrival::Last => {
                stall::point(stall::BARRIER_LAST_ARRIVED);
                self.maybe_reorganize(layout);
                self.release.release();
                BarrierWaitResult(true)
            }
        }
    }
}
