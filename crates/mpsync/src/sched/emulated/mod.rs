//! The emulated backend: the papers' pseudo-scheduler (003 §4.1, 001 §4, 000 §4).
//!
//! A scheduler thread owns `P` virtual processors. Each one is time-sliced,
//! round-robin, between the threads of ours attached to it and `m − 1` simulated
//! "other applications" (fractional `m`: the first `round(frac(m)·P)` processors
//! get one more), with quantum `q` and seeded jitter. To take a processor away it
//! CASes the thread's state word `Preemptable → Preempted` and sends it
//! [`preemption_signal`]; the handler waits until the scheduler resumes it, which is
//! the time the processor spends on the other applications.
//!
//! A thread whose no-preempt request is in force (the owner's request word, read
//! here as a hint and re-checked by the handler on the thread itself), or that a
//! peer made `OtherUnpreemptable`, is *warned* instead (the context block's
//! `warning` flag). When it leaves its critical section it yields
//! ([`super::release_no_preempt`]), the extension it took is deducted from its next
//! quantum, and if it stays unpreemptable longer than `extension_bound` it is
//! preempted anyway and its state restored on resume (Symunix's bound: the kernel
//! keeps ultimate control of the processor).
//!
//! Seeded: the planned schedule (quantum lengths, other applications' quanta,
//! repartitioning choices) is a function of the seed alone and is logged
//! ([`Emulated::schedule_log`]); actual timings go in [`SchedStats`].
//!
//! The scheduler thread sleeps between decisions on a futex with a timeout (so a
//! yielding thread can wake it at once) and asks for `SCHED_FIFO` when allowed.
//!
//! ```no_run
//! use mpsync::sched::emulated::{Emulated, EmulatedConfig};
//! use std::time::Duration;
//!
//! let cfg = EmulatedConfig::new(1, 2.0)?.quantum(Duration::from_millis(10)).seed(42);
//! let emu = Emulated::start(cfg)?;
//! std::thread::scope(|s| {
//!     s.spawn(|| {
//!         let _on_vproc_0 = emu.attach(0).unwrap();
//!         // ... work here runs about half of the wall time (MP level 2) ...
//!     });
//! });
//! let stats = emu.stop();
//! println!("{} preemptions, scheduler CPU {} ns", stats.preemptions, stats.sched_cpu_ns);
//! # Ok::<(), mpsync::sched::emulated::SchedError>(())
//! ```
//!
//! One file per concern: [`config`](EmulatedConfig) and errors, statistics,
//! the signal handler, attaching and detaching, and the scheduler thread's `tick`.

mod attach;
mod config;
mod handler;
mod stats;
mod tick;

use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::sched::state::ThreadState;
use crate::sched::{partition, registry};
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use crate::util::clock::now_ns;
use crate::util::rng::SplitMix64;

#[cfg(not(loom))]
pub(crate) use attach::detach_exiting;
pub(crate) use attach::yield_attached;
pub use attach::{Attachment, is_attached};
pub use config::{EmulatedConfig, HandlerWait, SchedError};
pub use handler::preemption_signal;
pub use stats::{Sample, SchedStats, ScheduleEvent};

use attach::shared_of;
use config::cores_available;
use handler::install_handler;
use stats::{MAX_SAMPLES, snapshot_log, snapshot_stats};
use tick::{Attached, Members, Vproc, scheduler_main};

/// Threads attached at once, at most. Room for them is reserved when the scheduler
/// starts: nothing under the scheduler's lock may allocate, since an attached
/// thread may be stopped inside `malloc` holding the allocator's lock.
pub const MAX_ATTACHED: usize = 4096;
/// How often the scheduler re-checks a warned thread. Only a fallback: a warned
/// thread wakes the scheduler itself when it yields at the end of its section.
const WARN_POLL_NS: u64 = 200_000;
/// The scheduler never wakes sooner than this after a tick: it runs at real-time
/// priority, and a busy loop there would starve the worker sharing its CPU.
const MIN_SLEEP_NS: u64 = 10_000;

/// What the scheduler's lock protects.
#[derive(Debug)]
struct Inner {
    /// Attached threads, in attach order (capacity [`MAX_ATTACHED`], reserved).
    threads: Vec<Attached>,
    vprocs: Vec<Vproc>,
    /// Virtual processors in use since the last repartition.
    available: u32,
    part_rng: SplitMix64,
    next_repartition: Option<u64>,
    stats: SchedStats,
    log: Vec<ScheduleEvent>,
}

/// State shared by the scheduler thread, attached threads and the handle.
#[derive(Debug)]
struct Shared {
    cfg: EmulatedConfig,
    inner: Mutex<Inner>,
    /// Futex word the scheduler sleeps on; bumped to wake it.
    kick: AtomicU32,
    stopping: AtomicBool,
    stopped: AtomicBool,
    /// Per vproc: nothing else competes for it (a yield there returns at once).
    alone: Vec<AtomicBool>,
    /// Threads attached now (for [`HandlerWait::Auto`]).
    attached: AtomicU32,
    /// Preemptions the threads' handlers undid ([`SchedStats::preemptions_undone`]).
    undone: AtomicU64,
    /// Cores available to the process when the scheduler started.
    cores: u32,
}

impl Shared {
    /// The scheduler's lock, for the scheduler thread and threads not attached to
    /// this scheduler; attached threads take it with [`Shared::with_lock_as_user`].
    fn lock(&self) -> MutexGuard<'_, Inner> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        self.debug_check_holder();
        inner
    }

    /// The rule that keeps the lock deadlock-free: the scheduler preempts only
    /// while holding it, and a preempted thread waits in the handler for a resume
    /// that needs it. So a thread attached to this scheduler must hold the lock
    /// only while it cannot be stopped: unpreemptable, and not `Preempted` by a
    /// decision taken before it got the lock.
    fn debug_check_holder(&self) {
        debug_assert!(
            registry::current_if_registered()
                .filter(|cb| shared_of(cb).is_some_and(|s| std::ptr::eq(s, self)))
                .is_none_or(|cb| cb.state() != ThreadState::Preempted
                    && (cb.no_preempt_in_force() || cb.state() == ThreadState::OtherUnpreemptable)),
            "a thread attached to this pseudo-scheduler took its lock while it could be preempted"
        );
    }

    /// Runs `f` under the scheduler's lock on a user thread (not the scheduler's).
    ///
    /// A thread attached to a pseudo-scheduler must not be stopped while it holds
    /// the lock (see [`Shared::debug_check_holder`]). So it [1] enters a no-preempt
    /// section first: from then on the scheduler only warns it, and it cannot take
    /// a decision while we hold the lock anyway. [2] A forced preemption (the
    /// extension bound) decided between the request and the lock has made us
    /// `Preempted`, its signal still on the way: we let go of the lock and wait
    /// to be resumed before trying again. [3] Leaving the section, a thread the
    /// scheduler warned meanwhile yields, as any no-preempt section ends — if it
    /// is still attached (`f` may have detached it).
    fn with_lock_as_user<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let Some(cb) = registry::current_if_registered().filter(|cb| is_attached(cb)) else {
            return f(&mut self.lock());
        };
        cb.request_no_preempt(); // [1]
        let r = loop {
            let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            if cb.state() != ThreadState::Preempted {
                self.debug_check_holder();
                break f(&mut inner);
            }
            drop(inner); // [2]
            cb.wait_while_preempted();
        };
        if cb.release_no_preempt() && is_attached(cb) {
            yield_attached(cb); // [3]
        }
        r
    }

    /// Whether a preempted thread should sleep rather than spin now.
    fn blocking(&self) -> bool {
        match self.cfg.handler_wait {
            HandlerWait::Spin => false,
            HandlerWait::Block => true,
            // Relaxed: a policy hint; either answer is safe (a sleeper is always woken).
            HandlerWait::Auto => self.attached.load(Ordering::Relaxed) > self.cores,
        }
    }

    /// Wakes the scheduler thread now.
    fn kick(&self) {
        // Release: pairs with the Acquire load before the scheduler's futex wait, so
        // it sees the state change that prompted the kick.
        self.kick.fetch_add(1, Ordering::Release);
        crate::sched::futex::wake(&self.kick, 1);
    }
}

/// A running pseudo-scheduler. Stops (and resumes every thread) on drop.
#[derive(Debug)]
pub struct Emulated {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    final_stats: Option<SchedStats>,
}

impl Emulated {
    /// Validates `cfg`, installs the preemption handler (once per process) and
    /// starts the scheduler thread.
    pub fn start(cfg: EmulatedConfig) -> Result<Self, SchedError> {
        cfg.validate()?;
        install_handler()?;
        let p = cfg.processors;
        let vprocs = (0..p).map(|v| Vproc::new(&cfg, v)).collect();
        let now = now_ns();
        let inner = Inner {
            // Reserved now: while an attached thread may be stopped inside `malloc`,
            // the scheduler and whoever holds its lock must not allocate.
            threads: Vec::with_capacity(MAX_ATTACHED),
            vprocs,
            available: p,
            part_rng: SplitMix64::stream(cfg.seed, u64::MAX),
            next_repartition: cfg.repartition_every.map(|d| now + d.as_nanos() as u64),
            stats: SchedStats::reserved(),
            log: Vec::with_capacity(MAX_SAMPLES),
        };
        let shared = Arc::new(Shared {
            alone: (0..p)
                .map(|v| AtomicBool::new(cfg.others_on(v) == 0))
                .collect(),
            cfg,
            inner: Mutex::new(inner),
            kick: AtomicU32::new(0),
            stopping: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            attached: AtomicU32::new(0),
            undone: AtomicU64::new(0),
            cores: cores_available(),
        });
        publish(&shared.lock());
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("mpsync-pseudo-scheduler".into())
            .spawn(move || scheduler_main(&sh))
            .map_err(|e| SchedError::Os(format!("cannot start the scheduler thread: {e}")))?;
        Ok(Self {
            shared,
            thread: Some(thread),
            final_stats: None,
        })
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &EmulatedConfig {
        &self.shared.cfg
    }

    /// Statistics so far.
    ///
    /// May be called from an attached thread (it is briefly unpreemptable).
    pub fn stats(&self) -> SchedStats {
        match &self.final_stats {
            Some(s) => s.clone(),
            None => snapshot_stats(&self.shared),
        }
    }

    /// The planned schedule so far (a function of the seed only), round by round.
    ///
    /// May be called from an attached thread (it is briefly unpreemptable).
    pub fn schedule_log(&self) -> Vec<ScheduleEvent> {
        snapshot_log(&self.shared)
    }

    /// Stops the scheduler, resumes every thread, and returns the statistics.
    pub fn stop(mut self) -> SchedStats {
        self.shutdown();
        self.final_stats.take().unwrap_or_default()
    }

    fn shutdown(&mut self) {
        let Some(t) = self.thread.take() else { return };
        // Release: pairs with the Acquire load in the scheduler loop.
        self.shared.stopping.store(true, Ordering::Release);
        self.shared.kick();
        let _ = t.join();
        self.final_stats = Some(snapshot_stats(&self.shared));
    }
}

impl Drop for Emulated {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Recomputes, per virtual processor, whether a thread there competes with
/// nobody (then its yield returns at once).
fn refresh_alone(shared: &Shared, inner: &Inner) {
    for (v, a) in shared.alone.iter().enumerate() {
        let members = Members {
            v: v as u32,
            available: inner.available,
        };
        let alone = members.v < inner.available
            && inner.vprocs[v].others == 0
            && members.count(&inner.threads) <= 1;
        // Relaxed: a hint read by `yield_attached` (see there).
        a.store(alone, Ordering::Relaxed);
    }
}

/// Publishes the partition under a new generation (every change bumps it: attach,
/// detach, repartition). A reader between the bump and the store gets the previous
/// snapshot, whose older `generation` tells it to read again later.
fn publish(inner: &Inner) {
    let k = inner.available;
    let threads_per_processor = (0..k).map(|v| {
        let mine = Members { v, available: k }.count(&inner.threads) as u32;
        mine + inner.vprocs[v as usize].others
    });
    partition::publish_emulated(k, threads_per_processor, partition::bump());
}
