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
//! A thread in `SelfUnpreemptable`/`OtherUnpreemptable` is *warned* instead (the
//! context block's `warning` flag). When it leaves its critical section it yields
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

use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::sync::{AtomicBool, AtomicU32, Ordering, spin_loop};
use crate::util::clock::{now_ns, thread_cpu_ns};
use crate::util::rng::SplitMix64;

use super::context::{ContextBlock, NO_PROCESSOR};
use super::partition;
use super::registry;
use super::state::{Actor, ThreadState};

/// Errors of the emulated backend.
#[derive(Debug, Clone, PartialEq)]
pub enum SchedError {
    /// A user-supplied parameter is out of range: what was wrong, what would be right.
    InvalidConfig(String),
    /// The virtual processor does not exist or cannot take this thread.
    BadVproc {
        /// The requested virtual processor.
        vproc: u32,
        /// Virtual processors of the scheduler.
        processors: u32,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The calling thread is already attached to a pseudo-scheduler.
    AlreadyAttached,
    /// An OS call failed (signal installation, thread creation, ...).
    Os(String),
}

impl fmt::Display for SchedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidConfig(m) => f.write_str(m),
            Self::BadVproc {
                vproc,
                processors,
                reason,
            } => write!(
                f,
                "virtual processor {vproc}: {reason} (this scheduler has processors 0..{processors})"
            ),
            Self::AlreadyAttached => f.write_str(
                "this thread is already attached to a pseudo-scheduler; drop its Attachment first",
            ),
            Self::Os(m) => write!(f, "pseudo-scheduler: {m}"),
        }
    }
}

impl std::error::Error for SchedError {}

/// How a preempted thread waits in the signal handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandlerWait {
    /// Spin: the real processor stays busy, as if another application ran on it
    /// (the papers' method). Right when attached threads ≤ real cores.
    Spin,
    /// Sleep on a futex: the real processor is free. Right when more threads are
    /// attached than there are real cores (several per virtual processor): a
    /// spinning preempted thread would then take real time from a running one.
    Block,
    /// The default: [`Spin`](Self::Spin) while the attached threads fit the cores
    /// available to the process, [`Block`](Self::Block) when there are more
    /// (decided at each preemption, from the number attached then).
    Auto,
}

/// Configuration of a pseudo-scheduler run.
#[derive(Debug, Clone, PartialEq)]
pub struct EmulatedConfig {
    /// Virtual processors (1..=cores available to the process).
    pub processors: u32,
    /// Multiprogramming level m ≥ 1 (fractional allowed).
    pub mp: f64,
    /// Quantum q.
    pub quantum: Duration,
    /// Uniform jitter fraction on quanta (0.1 = ±10%).
    pub jitter: f64,
    /// Seed of the schedule.
    pub seed: u64,
    /// Longest extension granted to an unpreemptable thread before it is preempted anyway.
    pub extension_bound: Duration,
    /// Repartition every this often (paper 001 §4), or never.
    pub repartition_every: Option<Duration>,
    /// Ask for `SCHED_FIFO` for the scheduler thread.
    pub realtime: bool,
    /// How preempted threads wait (default [`HandlerWait::Auto`]).
    pub handler_wait: HandlerWait,
}

fn cores_available() -> u32 {
    super::native::available_cpus().map_or(1, |c| c.len().max(1) as u32)
}

impl EmulatedConfig {
    /// A validated config with defaults: quantum 10 ms, jitter ±10%, seed 1,
    /// extension bound 2 ms, no repartitioning, real-time priority if permitted,
    /// handler that spins while the attached threads fit the cores and sleeps
    /// beyond ([`HandlerWait::Auto`]).
    pub fn new(processors: u32, mp: f64) -> Result<Self, SchedError> {
        let c = Self {
            processors,
            mp,
            quantum: Duration::from_millis(10),
            jitter: 0.1,
            seed: 1,
            extension_bound: Duration::from_millis(2),
            repartition_every: None,
            realtime: true,
            handler_wait: HandlerWait::Auto,
        };
        c.validate()?;
        Ok(c)
    }

    /// Sets the quantum.
    pub fn quantum(mut self, q: Duration) -> Self {
        self.quantum = q;
        self
    }

    /// Sets the seed.
    pub fn seed(mut self, s: u64) -> Self {
        self.seed = s;
        self
    }

    /// Sets the jitter fraction.
    pub fn jitter(mut self, j: f64) -> Self {
        self.jitter = j;
        self
    }

    /// Sets the extension bound.
    pub fn extension_bound(mut self, d: Duration) -> Self {
        self.extension_bound = d;
        self
    }

    /// Sets the repartitioning period.
    pub fn repartition_every(mut self, d: Option<Duration>) -> Self {
        self.repartition_every = d;
        self
    }

    /// Sets whether to ask for real-time priority.
    pub fn realtime(mut self, r: bool) -> Self {
        self.realtime = r;
        self
    }

    /// Sets how preempted threads wait.
    pub fn handler_wait(mut self, w: HandlerWait) -> Self {
        self.handler_wait = w;
        self
    }

    /// Re-checks every field (the builder methods do not; `start` does).
    pub fn validate(&self) -> Result<(), SchedError> {
        let bad = |m: String| Err(SchedError::InvalidConfig(m));
        // A published partition describes at most MAX_EMULATED_PROCESSORS.
        let cores = cores_available().min(partition::MAX_EMULATED_PROCESSORS as u32);
        if self.processors == 0 || self.processors > cores {
            return bad(format!(
                "processors {}: must be between 1 and the {cores} processors available to this process",
                self.processors
            ));
        }
        if !self.mp.is_finite() || self.mp < 1.0 || self.mp > 64.0 {
            return bad(format!(
                "multiprogramming level {}: must be >= 1 and <= 64 (e.g. 1, 1.5, 2, 3)",
                self.mp
            ));
        }
        if self.quantum < Duration::from_micros(100) || self.quantum > Duration::from_secs(10) {
            return bad(format!(
                "quantum {:?}: must be between 100 µs and 10 s (the papers use 10-50 ms)",
                self.quantum
            ));
        }
        if !(0.0..=0.5).contains(&self.jitter) {
            return bad(format!(
                "jitter {}: must be between 0 and 0.5 (e.g. 0.1 for ±10%)",
                self.jitter
            ));
        }
        if self.extension_bound.is_zero() || self.extension_bound > Duration::from_secs(1) {
            return bad(format!(
                "extension bound {:?}: must be > 0 and at most 1 s (Symunix grants well under a quantum; default 2 ms)",
                self.extension_bound
            ));
        }
        if let Some(t) = self.repartition_every.filter(|t| *t < self.quantum) {
            return bad(format!(
                "repartition period {t:?}: must be at least one quantum ({:?}); the papers use 1 s",
                self.quantum
            ));
        }
        Ok(())
    }

    /// Other applications on virtual processor `v` (`m − 1`, fractional part on the
    /// first `round(frac(m)·P)` processors).
    pub fn others_on(&self, v: u32) -> u32 {
        let base = self.mp.floor();
        let frac = self.mp - base;
        let extra = (frac * f64::from(self.processors)).round() as u32;
        (base as u32 - 1) + u32::from(v < extra)
    }
}

/// One planned round on a virtual processor: a function of the seed only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScheduleEvent {
    /// Virtual processor.
    pub vproc: u32,
    /// Round number on this vproc.
    pub seq: u64,
    /// Planned quantum of each of our threads in this round (ns).
    pub run_ns: u64,
    /// Planned off-time, the other applications' quanta together (ns); 0 when
    /// there are none on this vproc.
    pub off_ns: u64,
    /// Simulated other applications on this vproc: `⌈m⌉ − 1` on the first
    /// `round(frac(m)·P)` vprocs, `⌊m⌋ − 1` on the rest (m = 1.5 on 2 vprocs: one
    /// other application on vproc 0, none on vproc 1). See [`EmulatedConfig::others_on`].
    pub others: u32,
}

/// A measured (requested, actual) duration pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// What the schedule planned (ns).
    pub requested_ns: u64,
    /// What happened (ns).
    pub actual_ns: u64,
}

/// What the pseudo-scheduler did and what it cost.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SchedStats {
    /// Wall time the scheduler ran (ns).
    pub wall_ns: u64,
    /// CPU time of the scheduler thread itself (ns).
    pub sched_cpu_ns: u64,
    /// Whether `SCHED_FIFO` was granted.
    pub realtime: bool,
    /// Preemptions by signal (not counting yields).
    pub preemptions: u64,
    /// Times an unpreemptable thread was warned instead of preempted.
    pub warnings: u64,
    /// Preemptions of a thread still unpreemptable at the extension bound.
    pub forced_preemptions: u64,
    /// Times a thread gave its processor away itself.
    pub voluntary_yields: u64,
    /// Repartitions done.
    pub repartitions: u64,
    /// Total extension time granted (ns), deducted from following quanta.
    pub extension_ns: u64,
    /// Quanta of our threads: planned vs actual on-time.
    pub quanta: Vec<Sample>,
    /// Off-times of our threads: planned vs actual.
    pub off_times: Vec<Sample>,
    /// Decision to the thread stopped in the handler (ns).
    pub preempt_latency_ns: Vec<u64>,
}

/// Samples kept at most, per kind (older ones are dropped from the vectors; the
/// counters stay exact).
const MAX_SAMPLES: usize = 100_000;
/// Threads attached at once, at most. Room for them is reserved when the scheduler
/// starts: nothing under the scheduler's lock may allocate (see [`snapshot_stats`]).
pub const MAX_ATTACHED: usize = 4096;
/// How often the scheduler re-checks a warned thread. Only a fallback: a warned
/// thread wakes the scheduler itself when it yields at the end of its section.
const WARN_POLL_NS: u64 = 200_000;
/// The scheduler never wakes sooner than this after a tick: it runs at real-time
/// priority, and a busy loop there would starve the worker sharing its CPU.
const MIN_SLEEP_NS: u64 = 10_000;

/// The signal the pseudo-scheduler preempts with: `SIGRTMIN + 3`.
pub fn preemption_signal() -> i32 {
    libc::SIGRTMIN() + 3
}

/// Per attached thread.
#[derive(Debug)]
struct Attached {
    cb: &'static ContextBlock,
    /// Virtual processor it attached to (it runs on `home % available`).
    home: u32,
    /// Extension to deduct from its next quantum (ns).
    deduct_ns: u64,
    /// When it was warned, if it is being warned now.
    warned_at: Option<u64>,
    /// When it last stopped running (ns), for off-time samples.
    stopped_at: Option<u64>,
    /// Planned off-time that began at `stopped_at`.
    planned_off_ns: u64,
}

/// One virtual processor's place in its round.
#[derive(Debug)]
struct Vproc {
    rng: SplitMix64,
    others: u32,
    round: u64,
    run_ns: u64,
    off_ns: u64,
    /// Slot index in the round: 0..n are our threads, n is the others' turn.
    slot: usize,
    slot_start: u64,
    slot_end: u64,
    /// Whether a round is under way (false while no thread is attached).
    active: bool,
    /// Block id of the thread whose slot is running (0 = others / none).
    running: u64,
}

#[derive(Debug)]
struct Inner {
    threads: Vec<Attached>,
    vprocs: Vec<Vproc>,
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
                .is_none_or(|cb| cb.state().is_unpreemptable()),
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

    fn kick(&self) {
        // Release: pairs with the Acquire load before the scheduler's futex wait, so
        // it sees the state change that prompted the kick.
        self.kick.fetch_add(1, Ordering::Release);
        super::futex::wake(&self.kick, 1);
    }
}

/// A running pseudo-scheduler. Stops (and resumes every thread) on drop.
#[derive(Debug)]
pub struct Emulated {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    final_stats: Option<SchedStats>,
}

static HANDLER: Once = Once::new();
static HANDLER_ERR: Mutex<Option<String>> = Mutex::new(None);

/// Errno is thread-local and the handler may run between a syscall and the read of
/// its errno: save and restore it.
struct ErrnoGuard(i32);

impl ErrnoGuard {
    fn save() -> Self {
        // SAFETY: __errno_location returns the calling thread's errno slot.
        Self(unsafe { *libc::__errno_location() })
    }
}

impl Drop for ErrnoGuard {
    fn drop(&mut self) {
        // SAFETY: as in `save`.
        unsafe { *libc::__errno_location() = self.0 };
    }
}

/// The preemption handler. Async-signal-safe: a const thread-local read, atomics,
/// `clock_gettime` and the futex syscall only.
extern "C" fn on_preempt_signal(_sig: libc::c_int) {
    let _errno = ErrnoGuard::save();
    let Some(cb) = registry::current_if_registered() else {
        return;
    };
    if cb.state() != ThreadState::Preempted {
        return;
    }
    // Relaxed: read by the scheduler for statistics only, after it sees the resume.
    cb.preempt_stopped_ns.store(now_ns(), Ordering::Relaxed);
    wait_resumed(cb, blocking_wait(cb));
}

/// Whether `cb`'s scheduler wants a preempted thread to sleep rather than spin.
fn blocking_wait(cb: &ContextBlock) -> bool {
    shared_of(cb).is_some_and(Shared::blocking)
}

/// Waits while the scheduler keeps `cb` preempted.
fn wait_resumed(cb: &ContextBlock, block: bool) {
    loop {
        // Acquire: pairs with the Release bump in `resume`.
        let seq = cb.resume.load(Ordering::Acquire);
        if cb.state() != ThreadState::Preempted {
            return;
        }
        if block {
            super::futex::wait(&cb.resume, seq, Some(Duration::from_millis(1)));
        } else {
            spin_loop();
        }
    }
}

fn install_handler() -> Result<(), SchedError> {
    HANDLER.call_once(|| {
        // SAFETY: `sa` is zero-initialized then filled; the handler is an `extern "C"`
        // function that only does async-signal-safe work; SA_RESTART makes interrupted
        // syscalls (e.g. a parked futex wait) restart or report EINTR, which every
        // caller of `park` already handles.
        let r = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_preempt_signal as extern "C" fn(libc::c_int) as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(preemption_signal(), &sa, std::ptr::null_mut())
        };
        if r != 0 {
            *HANDLER_ERR.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!(
                "sigaction failed: {}",
                std::io::Error::last_os_error()
            ));
            return;
        }
        // SAFETY: `detach_in_forked_child` is an `extern "C"` function with no
        // arguments that does only async-signal-safe work, as a child handler must.
        let r = unsafe { libc::pthread_atfork(None, None, Some(detach_in_forked_child)) };
        if r != 0 {
            *HANDLER_ERR.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!(
                "pthread_atfork failed: {}",
                std::io::Error::from_raw_os_error(r)
            ));
        }
    });
    match HANDLER_ERR
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
    {
        Some(e) => Err(SchedError::Os(e)),
        None => Ok(()),
    }
}

impl Emulated {
    /// Validates `cfg`, installs the preemption handler (once per process) and
    /// starts the scheduler thread.
    pub fn start(cfg: EmulatedConfig) -> Result<Self, SchedError> {
        cfg.validate()?;
        install_handler()?;
        let p = cfg.processors;
        let vprocs = (0..p)
            .map(|v| Vproc {
                rng: SplitMix64::stream(cfg.seed, u64::from(v)),
                others: cfg.others_on(v),
                round: 0,
                run_ns: 0,
                off_ns: 0,
                slot: 0,
                slot_start: 0,
                slot_end: 0,
                active: false,
                running: 0,
            })
            .collect();
        let now = now_ns();
        let inner = Inner {
            // Reserved now: while an attached thread may be stopped inside `malloc`,
            // the scheduler and whoever holds its lock must not allocate.
            threads: Vec::with_capacity(MAX_ATTACHED),
            vprocs,
            available: p,
            part_rng: SplitMix64::stream(cfg.seed, u64::MAX),
            next_repartition: cfg.repartition_every.map(|d| now + d.as_nanos() as u64),
            stats: SchedStats {
                quanta: Vec::with_capacity(MAX_SAMPLES),
                off_times: Vec::with_capacity(MAX_SAMPLES),
                preempt_latency_ns: Vec::with_capacity(MAX_SAMPLES),
                ..SchedStats::default()
            },
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

    /// Attaches the calling thread to virtual processor `vproc`; it is time-sliced
    /// there until the returned guard is dropped.
    pub fn attach(&self, vproc: u32) -> Result<Attachment<'_>, SchedError> {
        let processors = self.shared.cfg.processors;
        if vproc >= processors {
            return Err(SchedError::BadVproc {
                vproc,
                processors,
                reason: "no such virtual processor",
            });
        }
        if self.shared.stopped.load(Ordering::Acquire) {
            return Err(SchedError::Os("the scheduler has stopped".into()));
        }
        let cb = super::current();
        if is_attached(cb) {
            return Err(SchedError::AlreadyAttached);
        }
        {
            let mut inner = self.shared.lock();
            if inner.threads.len() == MAX_ATTACHED {
                return Err(SchedError::BadVproc {
                    vproc,
                    processors,
                    reason: "the pseudo-scheduler already has its maximum of 4096 attached threads",
                });
            }
            inner.threads.push(Attached {
                cb,
                home: vproc,
                deduct_ns: 0,
                warned_at: None,
                stopped_at: None,
                planned_off_ns: 0,
            });
            let eff = vproc % inner.available;
            // Relaxed: informational (see ContextBlock::processor).
            cb.vproc.store(vproc, Ordering::Relaxed);
            cb.processor.store(eff, Ordering::Relaxed);
            cb.yielded.store(false, Ordering::Relaxed);
            let strong = Arc::into_raw(self.shared.clone()) as *mut ();
            // Release: pairs with the Acquire loads of `emu` (is_attached, the handler).
            cb.emu.store(strong, Ordering::Release);
            // Relaxed: see `Shared::blocking`.
            self.shared
                .attached
                .store(inner.threads.len() as u32, Ordering::Relaxed);
            refresh_alone(&self.shared, &inner);
            publish(&inner);
        }
        self.shared.kick();
        Ok(Attachment {
            _emu: PhantomData,
            _not_send: PhantomData,
        })
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
        // Allocated before taking the lock: see `snapshot_stats`.
        let mut out = Vec::with_capacity(MAX_SAMPLES);
        self.shared
            .with_lock_as_user(|inner| out.extend_from_slice(&inner.log));
        out
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

/// A copy of the statistics, allocated before taking the scheduler's lock: an
/// attached thread may be stopped inside `malloc` holding the allocator's lock, and
/// only the scheduler (which needs our lock) would resume it. The sample vectors
/// never hold more than `MAX_SAMPLES`, so the copies fit without reallocating.
fn snapshot_stats(shared: &Shared) -> SchedStats {
    let mut quanta = Vec::with_capacity(MAX_SAMPLES);
    let mut off_times = Vec::with_capacity(MAX_SAMPLES);
    let mut preempt_latency_ns = Vec::with_capacity(MAX_SAMPLES);
    shared.with_lock_as_user(|inner| {
        quanta.extend_from_slice(&inner.stats.quanta);
        off_times.extend_from_slice(&inner.stats.off_times);
        preempt_latency_ns.extend_from_slice(&inner.stats.preempt_latency_ns);
        SchedStats {
            quanta,
            off_times,
            preempt_latency_ns,
            ..inner.stats
        }
    })
}

impl Drop for Emulated {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The calling thread's attachment to a virtual processor; detaches on drop.
#[derive(Debug)]
pub struct Attachment<'a> {
    _emu: PhantomData<&'a Emulated>,
    _not_send: PhantomData<*mut ()>,
}

impl Drop for Attachment<'_> {
    fn drop(&mut self) {
        detach(super::current());
    }
}

/// Whether `cb`'s thread is attached to a pseudo-scheduler.
#[inline]
pub fn is_attached(cb: &ContextBlock) -> bool {
    // Relaxed: only the owning thread changes its own attachment.
    !cb.emu.load(Ordering::Relaxed).is_null()
}

/// The Shared of an attached thread.
fn shared_of(cb: &ContextBlock) -> Option<&Shared> {
    // Acquire: pairs with the Release store in `attach`.
    let p = cb.emu.load(Ordering::Acquire) as *const Shared;
    // SAFETY: a non-null `emu` holds a strong count on its Shared, released only by
    // `detach` on this same thread, so the Shared outlives this borrow.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Detaches `cb` (owner thread only). No signal is sent to a thread after it is
/// removed under the lock; one already pending finds it not `Preempted` and returns.
fn detach(cb: &'static ContextBlock) {
    let p = cb.emu.load(Ordering::Acquire) as *const Shared;
    if p.is_null() {
        return;
    }
    // SAFETY: see `shared_of`.
    let shared = unsafe { &*p };
    shared.with_lock_as_user(|inner| {
        inner.threads.retain(|t| !std::ptr::eq(t.cb, cb));
        for v in &mut inner.vprocs {
            if v.running == cb.id() {
                v.running = 0;
            }
        }
        cb.emu.store(std::ptr::null_mut(), Ordering::Release);
        cb.vproc.store(NO_PROCESSOR, Ordering::Relaxed);
        // Relaxed: see `Shared::blocking`.
        shared
            .attached
            .store(inner.threads.len() as u32, Ordering::Relaxed);
        refresh_alone(shared, inner);
        publish(inner);
    });
    shared.kick();
    // SAFETY: `p` came from `Arc::into_raw` in `attach`; this releases that count.
    drop(unsafe { Arc::from_raw(p) });
    // Relaxed: the scheduler no longer writes it (we left its list under its lock,
    // whose release/acquire orders its last write before this one).
    cb.warning.store(false, Ordering::Relaxed);
}

/// Called by the registry when an attached thread exits without detaching.
pub(crate) fn detach_exiting(cb: &'static ContextBlock) {
    detach(cb);
}

/// `pthread_atfork` child handler: a forked child is a copy of the forking thread
/// alone. No scheduler thread runs there to resume it, and the copied scheduler
/// state may be mid-update (another thread may have held its lock at the fork), so
/// the child's thread is detached without touching the scheduler: its `Shared` is
/// leaked in the child, and `yield_now`, `Attachment::drop` and exit see a thread
/// that is not attached. Async-signal-safe: a const thread-local read, atomics and
/// `gettid`.
extern "C" fn detach_in_forked_child() {
    let Some(cb) = registry::current_if_registered() else {
        return;
    };
    // Relaxed (throughout): the child has one thread, this one.
    if cb
        .emu
        .swap(std::ptr::null_mut(), Ordering::Relaxed)
        .is_null()
    {
        return;
    }
    cb.vproc.store(NO_PROCESSOR, Ordering::Relaxed);
    cb.processor.store(NO_PROCESSOR, Ordering::Relaxed);
    cb.warning.store(false, Ordering::Relaxed);
    cb.yielded.store(false, Ordering::Relaxed);
    // Preempted just before the fork (the signal is not inherited): nobody will
    // resume the child, so sched's kernel side does, restoring the saved state.
    let to = ThreadState::from_u8(cb.saved_state.load(Ordering::Relaxed) as u8)
        .filter(|s| *s != ThreadState::Preempted)
        .unwrap_or(ThreadState::Preemptable);
    let _ = cb.transition(ThreadState::Preempted, to, Actor::Kernel);
    cb.saved_state
        .store(ThreadState::Preemptable as u32, Ordering::Relaxed);
    // SAFETY: gettid has no preconditions.
    cb.tid
        .store(unsafe { libc::gettid() } as u32, Ordering::Relaxed);
}

/// Yield of an attached thread: give the virtual processor to the others now.
pub(crate) fn yield_attached(cb: &'static ContextBlock) {
    let Some(shared) = shared_of(cb) else { return };
    // Relaxed: a hint; the worst case is one needless round trip to the scheduler.
    let v = cb.processor.load(Ordering::Relaxed) as usize;
    if shared.stopped.load(Ordering::Acquire)
        || shared
            .alone
            .get(v)
            .is_none_or(|a| a.load(Ordering::Relaxed))
    {
        return;
    }
    match cb.transition(
        ThreadState::Preemptable,
        ThreadState::Preempted,
        Actor::Kernel,
    ) {
        Ok(()) => {
            cb.preempt_stopped_ns.store(now_ns(), Ordering::Relaxed);
            // Release: the scheduler's Acquire swap sees the yield after the state.
            cb.yielded.store(true, Ordering::Release);
            shared.kick();
            wait_resumed(cb, shared.blocking());
        }
        // The scheduler preempted us first: its signal is on the way; wait as it would.
        Err(_) if cb.state() == ThreadState::Preempted => wait_resumed(cb, shared.blocking()),
        // Inside a no-preempt section a yield is only a hint: ignore it.
        Err(_) => {}
    }
}

fn refresh_alone(shared: &Shared, inner: &Inner) {
    for (v, a) in shared.alone.iter().enumerate() {
        let v = v as u32;
        let mine = inner
            .threads
            .iter()
            .filter(|t| t.home % inner.available == v)
            .count();
        let alone = v < inner.available && inner.vprocs[v as usize].others == 0 && mine <= 1;
        a.store(alone, Ordering::Relaxed);
    }
}

/// Publishes the partition under a new generation (every change bumps it: attach,
/// detach, repartition). A reader between the bump and the store gets the previous
/// snapshot, whose older `generation` tells it to read again later.
fn publish(inner: &Inner) {
    let k = inner.available;
    let threads_per_processor = (0..k).map(|v| {
        let mine = inner.threads.iter().filter(|t| t.home % k == v).count() as u32;
        mine + inner.vprocs[v as usize].others
    });
    partition::publish_emulated(k, threads_per_processor, partition::bump());
}

fn push_capped<T>(v: &mut Vec<T>, x: T) {
    if v.len() < MAX_SAMPLES {
        v.push(x);
    }
}

/// Takes the processor from `cb` now: preempt it if it is preemptable, warn it if
/// not, force it at the extension bound. Returns whether it has stopped.
fn stop_thread(shared: &Shared, t: &mut Attached, stats: &mut SchedStats, now: u64) -> bool {
    let cb = t.cb;
    // Acquire: pairs with the Release store in `yield_attached`.
    if cb.yielded.swap(false, Ordering::Acquire) {
        stats.voluntary_yields += 1;
        t.warned_at = None;
        cb.warning.store(false, Ordering::Relaxed);
        return true;
    }
    match cb.state() {
        ThreadState::Preempted => true,
        ThreadState::Preemptable => {
            cb.preempt_decided_ns.store(now, Ordering::Relaxed);
            cb.saved_state
                .store(ThreadState::Preemptable as u32, Ordering::Relaxed);
            if cb
                .transition(
                    ThreadState::Preemptable,
                    ThreadState::Preempted,
                    Actor::Kernel,
                )
                .is_err()
            {
                return false; // it changed state; decide again at the next tick
            }
            signal(cb);
            stats.preemptions += 1;
            if let Some(w) = t.warned_at.take() {
                let ext = now.saturating_sub(w);
                t.deduct_ns += ext;
                stats.extension_ns += ext;
            }
            cb.warning.store(false, Ordering::Relaxed);
            true
        }
        s => match t.warned_at {
            None => {
                t.warned_at = Some(now);
                cb.warning.store(true, Ordering::Relaxed);
                stats.warnings += 1;
                false
            }
            Some(w) if now.saturating_sub(w) >= shared.cfg.extension_bound.as_nanos() as u64 => {
                cb.preempt_decided_ns.store(now, Ordering::Relaxed);
                cb.saved_state.store(s as u32, Ordering::Relaxed);
                if cb
                    .transition(s, ThreadState::Preempted, Actor::Kernel)
                    .is_err()
                {
                    return false;
                }
                signal(cb);
                stats.forced_preemptions += 1;
                let ext = now.saturating_sub(w);
                t.deduct_ns += ext;
                stats.extension_ns += ext;
                t.warned_at = None;
                cb.warning.store(false, Ordering::Relaxed);
                true
            }
            Some(_) => false,
        },
    }
}

fn signal(cb: &ContextBlock) {
    let pt = cb.pthread.load(Ordering::Relaxed) as libc::pthread_t;
    // SAFETY: `cb` is attached, so its thread is alive: a thread detaches (under the
    // lock we hold) before it exits, and signals are sent only under that lock.
    unsafe { libc::pthread_kill(pt, preemption_signal()) };
}

/// Gives the processor back to `cb` if we had taken it.
fn resume(shared: &Shared, t: &mut Attached, stats: &mut SchedStats, now: u64) {
    let cb = t.cb;
    if cb.state() != ThreadState::Preempted {
        return;
    }
    let decided = cb.preempt_decided_ns.load(Ordering::Relaxed);
    let stopped = cb.preempt_stopped_ns.load(Ordering::Relaxed);
    if decided != 0 && stopped >= decided {
        push_capped(&mut stats.preempt_latency_ns, stopped - decided);
    }
    cb.preempt_decided_ns.store(0, Ordering::Relaxed);
    let to = ThreadState::from_u8(cb.saved_state.load(Ordering::Relaxed) as u8)
        .filter(|s| *s != ThreadState::Preempted)
        .unwrap_or(ThreadState::Preemptable);
    cb.saved_state
        .store(ThreadState::Preemptable as u32, Ordering::Relaxed);
    if cb
        .transition(ThreadState::Preempted, to, Actor::Kernel)
        .is_ok()
    {
        // Release: pairs with the Acquire load in `wait_resumed`.
        cb.resume.fetch_add(1, Ordering::Release);
        // Under Auto the thread may have chosen to sleep when more were attached.
        if shared.cfg.handler_wait != HandlerWait::Spin {
            super::futex::wake(&cb.resume, 1);
        }
        if let Some(s) = t.stopped_at.take() {
            push_capped(
                &mut stats.off_times,
                Sample {
                    requested_ns: t.planned_off_ns,
                    actual_ns: now.saturating_sub(s),
                },
            );
        }
    }
}

/// One scheduling pass over every virtual processor; returns when to wake next.
fn tick(shared: &Shared, inner: &mut Inner, now: u64) -> u64 {
    let q = shared.cfg.quantum.as_nanos() as u64;
    let mut wake = now + q;
    if let Some(r) = inner.next_repartition {
        if now >= r {
            repartition(shared, inner);
            inner.next_repartition = shared
                .cfg
                .repartition_every
                .map(|d| now + d.as_nanos() as u64);
        }
        wake = wake.min(inner.next_repartition.unwrap_or(u64::MAX));
    }
    let k = inner.available;
    let Inner {
        threads,
        vprocs,
        stats,
        log,
        ..
    } = inner;
    for (v, vp) in vprocs.iter_mut().enumerate() {
        let v = v as u32;
        // This vproc's threads, by position (no Vec: nothing here may allocate).
        let is_mine = |t: &Attached| v < k && t.home % k == v;
        let n = threads.iter().filter(|t| is_mine(t)).count();
        let nth = |threads: &[Attached], j: usize| {
            (0..threads.len())
                .filter(|&i| is_mine(&threads[i]))
                .nth(j)
                .expect("slot below the vproc's thread count")
        };
        if n == 0 {
            vp.active = false;
            vp.running = 0;
            continue;
        }
        if !vp.active {
            start_round(shared, vp, v, log, q);
            vp.active = true;
            vp.slot = 0;
            vp.slot_start = now;
            vp.slot_end = now + vp.run_ns;
        }
        // Advance slots whose time is up (or whose thread yielded).
        loop {
            if vp.slot > n {
                vp.slot = 0;
            }
            let cur = (vp.slot < n).then(|| nth(threads, vp.slot));
            let yielded = cur.is_some_and(|i| threads[i].cb.yielded.load(Ordering::Acquire));
            if now < vp.slot_end && !yielded {
                break;
            }
            // End the current slot: a thread slot ends when its thread has stopped.
            if let Some(i) = cur {
                let next_is_same = n == 1 && vp.others == 0;
                if next_is_same {
                    // Nothing else competes: the thread just keeps running.
                    threads[i].cb.yielded.store(false, Ordering::Relaxed);
                    start_round(shared, vp, v, log, q);
                    vp.slot_start = now;
                    vp.slot_end = now + vp.run_ns;
                    break;
                }
                if !stop_thread(shared, &mut threads[i], stats, now) {
                    wake = wake.min(now + WARN_POLL_NS);
                    break;
                }
                let t = &mut threads[i];
                push_capped(
                    &mut stats.quanta,
                    Sample {
                        requested_ns: vp.run_ns,
                        actual_ns: now.saturating_sub(vp.slot_start),
                    },
                );
                t.stopped_at = Some(now);
                t.planned_off_ns = vp.off_ns + vp.run_ns * (n as u64 - 1);
            }
            // Next slot.
            vp.slot += 1;
            if vp.slot == n && vp.others == 0 {
                vp.slot = 0;
            }
            if vp.slot > n {
                vp.slot = 0;
            }
            if vp.slot == 0 {
                start_round(shared, vp, v, log, q);
            }
            vp.slot_start = now;
            vp.slot_end = if vp.slot < n {
                let i = nth(threads, vp.slot);
                let t = &mut threads[i];
                let run = vp.run_ns.saturating_sub(t.deduct_ns).max(vp.run_ns / 10);
                t.deduct_ns = 0;
                now + run
            } else {
                now + vp.off_ns
            };
        }
        // Reconcile: the slot's thread runs, every other thread of this vproc is off.
        vp.running = 0;
        for (slot, t) in threads.iter_mut().filter(|t| is_mine(t)).enumerate() {
            if slot == vp.slot {
                vp.running = t.cb.id();
                resume(shared, t, stats, now);
            } else if !matches!(t.cb.state(), ThreadState::Preempted)
                && !stop_thread(shared, t, stats, now)
            {
                wake = wake.min(now + WARN_POLL_NS);
            } else if t.stopped_at.is_none() {
                t.stopped_at = Some(now);
                t.planned_off_ns = vp.off_ns;
            }
        }
        // A slot end already past means its thread is finishing a no-preempt
        // section: the warn poll above decides when to look again.
        if vp.slot_end > now {
            wake = wake.min(vp.slot_end);
        }
    }
    wake.max(now + MIN_SLEEP_NS)
}

fn start_round(shared: &Shared, vp: &mut Vproc, v: u32, log: &mut Vec<ScheduleEvent>, q: u64) {
    let j = shared.cfg.jitter;
    vp.run_ns = vp.rng.jitter(q as f64, j) as u64;
    vp.off_ns = (0..vp.others)
        .map(|_| vp.rng.jitter(q as f64, j) as u64)
        .sum();
    push_capped(
        log,
        ScheduleEvent {
            vproc: v,
            seq: vp.round,
            run_ns: vp.run_ns,
            off_ns: vp.off_ns,
            others: vp.others,
        },
    );
    vp.round += 1;
}

/// Paper 001 §4: with probability 1/2 all processors, else 1/2, 1/3 or 1/4 of them.
fn repartition(shared: &Shared, inner: &mut Inner) {
    let p = shared.cfg.processors;
    let r = inner.part_rng.next_f64();
    let k = if r < 0.5 {
        p
    } else {
        let div = [2, 3, 4][((r - 0.5) * 6.0) as usize % 3];
        (p / div).max(1)
    };
    inner.stats.repartitions += 1;
    if k != inner.available {
        inner.available = k;
        for t in &inner.threads {
            t.cb.processor.store(t.home % k, Ordering::Relaxed);
        }
        for vp in &mut inner.vprocs {
            vp.active = false;
        }
    }
    refresh_alone(shared, inner);
    publish(inner);
}

/// Sleeps while `*word == seen`, until the absolute `CLOCK_MONOTONIC` time
/// `deadline_ns` (the scale of [`now_ns`]): `FUTEX_WAIT_BITSET` takes an absolute
/// timeout, so time spent between deciding and sleeping does not shift the wake-up,
/// and a [`Shared::kick`] ends the sleep early.
#[cfg(not(loom))]
fn sleep_until(word: &AtomicU32, seen: u32, deadline_ns: u64) {
    /// Wake on any `FUTEX_WAKE` (the kernel's `FUTEX_BITSET_MATCH_ANY`).
    const MATCH_ANY: u32 = u32::MAX;
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `word` is a live, aligned 32-bit atomic for the duration of the call;
    // FUTEX_WAIT_BITSET only reads it; `ts` is a live timespec; without
    // FUTEX_CLOCK_REALTIME the absolute timeout is on CLOCK_MONOTONIC. Every outcome
    // (woken, EAGAIN: the word moved, ETIMEDOUT, EINTR) just returns to the loop.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT_BITSET | libc::FUTEX_PRIVATE_FLAG,
            seen,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            MATCH_ANY,
        );
    }
}

/// Under loom (which never runs the scheduler thread) a model yield, as `park` is.
#[cfg(loom)]
fn sleep_until(word: &AtomicU32, seen: u32, _deadline_ns: u64) {
    let _ = super::futex::wait(word, seen, None);
}

fn try_realtime() -> bool {
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: `param` is a valid sched_param; pthread_self is the calling thread.
    unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) == 0 }
}

fn scheduler_main(shared: &Shared) {
    let realtime = shared.cfg.realtime && try_realtime();
    let (t0, cpu0) = (now_ns(), thread_cpu_ns());
    shared.lock().stats.realtime = realtime;
    // Acquire: pairs with the Release store in `shutdown`.
    while !shared.stopping.load(Ordering::Acquire) {
        // Acquire: pairs with the Release bump in `Shared::kick`.
        let seen = shared.kick.load(Ordering::Acquire);
        let now = now_ns();
        let wake = {
            let mut inner = shared.lock();
            let w = tick(shared, &mut inner, now);
            inner.stats.wall_ns = now - t0;
            inner.stats.sched_cpu_ns = thread_cpu_ns() - cpu0;
            w
        };
        sleep_until(&shared.kick, seen, wake);
    }
    // Resume everyone and leave.
    let now = now_ns();
    let mut inner = shared.lock();
    shared.stopped.store(true, Ordering::Release);
    let Inner { threads, stats, .. } = &mut *inner;
    for t in threads.iter_mut() {
        t.warned_at = None;
        t.cb.warning.store(false, Ordering::Relaxed);
        t.cb.yielded.store(false, Ordering::Relaxed);
        resume(shared, t, stats, now);
    }
    stats.wall_ns = now - t0;
    stats.sched_cpu_ns = thread_cpu_ns() - cpu0;
    partition::withdraw_emulated();
    partition::bump();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn others_split_fractional_levels() {
        let c = |p, m| EmulatedConfig {
            processors: p,
            mp: m,
            ..EmulatedConfig::new(1, 1.0).unwrap()
        };
        let cfg = c(2, 1.5);
        assert_eq!((cfg.others_on(0), cfg.others_on(1)), (1, 0));
        let cfg = c(2, 3.0);
        assert_eq!((cfg.others_on(0), cfg.others_on(1)), (2, 2));
        let cfg = c(4, 2.25);
        assert_eq!(
            (0..4).map(|v| cfg.others_on(v)).collect::<Vec<_>>(),
            [2, 1, 1, 1]
        );
    }

    #[test]
    fn rejects_bad_configs_with_clear_messages() {
        let e = EmulatedConfig::new(1, 0.5).unwrap_err().to_string();
        assert!(e.contains("must be >= 1"), "{e}");
        let e = EmulatedConfig::new(0, 2.0).unwrap_err().to_string();
        assert!(e.contains("processors 0"), "{e}");
        let e = EmulatedConfig::new(10_000, 2.0).unwrap_err().to_string();
        assert!(e.contains("available"), "{e}");
        let base = EmulatedConfig::new(1, 2.0).unwrap();
        assert!(base.clone().quantum(Duration::ZERO).validate().is_err());
        assert!(base.clone().jitter(0.9).validate().is_err());
        assert!(
            base.clone()
                .extension_bound(Duration::from_secs(2))
                .validate()
                .is_err()
        );
        assert!(
            base.clone()
                .repartition_every(Some(Duration::from_micros(1)))
                .validate()
                .is_err()
        );
        assert!(base.validate().is_ok());
    }
}
