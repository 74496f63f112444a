//! The native backend: the real Linux machine.
//!
//! - **Is that thread preempted?** The kernel's answer where the process may load
//!   eBPF (root, or `CAP_BPF` + `CAP_PERFMON`): a program on `tp_btf/sched_switch`
//!   keeps each registered thread's state — running, preempted (off the CPU, still
//!   runnable) or blocked — in a memory-mapped array, so the answer is one load,
//!   current within microseconds of the switch ([`preemption_answers`] says
//!   whether it is in use and why not; [`kernel_state`], [`kernel_view`]).
//!   Otherwise, and for threads the kernel does not answer for, time-published
//!   heartbeats (He, Scherer & Scott, "Preemption Adaptivity in Time-Published
//!   Queue-Based Spin Locks", HiPC 2005): a waiting thread publishes `now` in its
//!   context block as it spins; a heartbeat older than [`heartbeat_threshold`]
//!   means "presumed preempted". `MPSYNC_EBPF=off` forces the heartbeats.
//! - **Partition**: the affinity mask (`sched_getaffinity`) and the cgroup CPU quota
//!   (`cpu.max`), polled at most every 10 ms, with mpsync's own generation counter
//!   bumped whenever either changes.
//! - **No-preempt requests**: Linux 7.0 added a time-slice extension to rseq
//!   (`prctl(PR_RSEQ_SLICE_EXTENSION)`, a request bit in the rseq area, the
//!   `rseq_slice_yield` syscall). [`slice_extension`] detects it at run time. On
//!   kernels without it (this project's machines run 6.18) requests are recorded in
//!   the context block only. mpsync does not yet drive the kernel extension even
//!   where it is detected: its ABI could not be exercised on any machine here, and
//!   an unverified write into glibc's rseq area is not a risk worth taking.
//!
//! ```
//! use mpsync::sched::native;
//! let cpus = native::available_cpus().unwrap();
//! assert!(!cpus.is_empty());
//! println!("quota: {:?}, slice extension: {:?}", native::cgroup_cpu_quota(), native::slice_extension());
//! // Where "is that thread preempted?" is answered from on this machine:
//! match native::preemption_answers() {
//!     native::PreemptionAnswers::Ebpf => {
//!         // The kernel knows the calling thread is on a CPU right now.
//!         let me = mpsync::sched::current();
//!         assert_eq!(native::kernel_state(me), Some(native::KernelState::Running));
//!     }
//!     native::PreemptionAnswers::Heartbeat(why) => println!("heartbeats: {why}"),
//! }
//! ```

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::sync::{AtomicU64, Ordering};
use crate::util::clock::now_ns;

use super::context::ContextBlock;
use super::partition::{self, Partition};

/// `prctl` option of the rseq time-slice extension (Linux 7.0 uapi).
const PR_RSEQ_SLICE_EXTENSION: libc::c_int = 79;
/// Its "get" sub-command.
const PR_RSEQ_SLICE_EXTENSION_GET: libc::c_ulong = 1;

/// Whether the kernel offers the rseq time-slice extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SliceExtension {
    /// The kernel has it (mpsync records it; see the module doc).
    Available,
    /// It does not; why.
    Unavailable(String),
}

/// Detected once per process.
pub fn slice_extension() -> &'static SliceExtension {
    static S: OnceLock<SliceExtension> = OnceLock::new();
    S.get_or_init(|| {
        // SAFETY: prctl with an unknown option only returns EINVAL; GET writes nothing.
        let r = unsafe { libc::prctl(PR_RSEQ_SLICE_EXTENSION, PR_RSEQ_SLICE_EXTENSION_GET, 0, 0, 0) };
        if r >= 0 {
            SliceExtension::Available
        } else {
            let err = std::io::Error::last_os_error();
            SliceExtension::Unavailable(format!(
                "kernel {} lacks the rseq time-slice extension (PR_RSEQ_SLICE_EXTENSION: {err}); it needs Linux 7.0+",
                kernel_release()
            ))
        }
    })
}

/// `uname -r`.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Where [`super::is_preempted`]'s native answers come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreemptionAnswers {
    /// The kernel: the eBPF program on `tp_btf/sched_switch` is loaded and
    /// attached, and every registered thread (up to 4094 alive at once) has a slot.
    Ebpf,
    /// Heartbeats; why the kernel does not answer (not built, not permitted,
    /// disabled by `MPSYNC_EBPF=off`, not Linux, ...).
    Heartbeat(String),
}

impl PreemptionAnswers {
    /// One line for people: "eBPF (...)" or "heartbeats: why".
    pub fn describe(&self) -> String {
        match self {
            Self::Ebpf => format!("eBPF on tp_btf/sched_switch (program {})", ebpf_build()),
            Self::Heartbeat(why) => format!("heartbeats: {why}"),
        }
    }
}

/// Where preemption answers come from in this process. The first call (or the
/// first thread to register with `sched`) loads the eBPF program where the
/// process is permitted to; the outcome is decided once. In a child of `fork`
/// of a process that loaded it (or was loading it) the answer is the
/// heartbeats, at once: the child never waits for its parent's loader.
pub fn preemption_answers() -> &'static PreemptionAnswers {
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    if let Some(why) = super::ebpf::forked_why() {
        static CHILD: std::sync::atomic::AtomicPtr<PreemptionAnswers> =
            std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
        return decided_once(&CHILD, || PreemptionAnswers::Heartbeat(why.into()));
    }
    static A: std::sync::atomic::AtomicPtr<PreemptionAnswers> =
        std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
    decided_once(&A, || {
        #[cfg(all(target_os = "linux", not(loom), not(miri)))]
        {
            // Registering loads the program (or records why not).
            let _ = super::current();
            match super::ebpf::status() {
                None => PreemptionAnswers::Ebpf,
                Some(why) => PreemptionAnswers::Heartbeat(why.to_string()),
            }
        }
        #[cfg(not(all(target_os = "linux", not(loom), not(miri))))]
        {
            PreemptionAnswers::Heartbeat(ebpf_build().trim_start_matches("not built: ").into())
        }
    })
}

/// The value in `cell`, decided by `f` at the first call. Not a `OnceLock`: a
/// child of `fork` forked while another thread ran `f` would wait for that
/// thread forever; here two threads may both run `f` (each decides the same),
/// and the first to publish wins (the other's value is leaked: a few bytes,
/// once).
fn decided_once(
    cell: &'static std::sync::atomic::AtomicPtr<PreemptionAnswers>,
    f: impl FnOnce() -> PreemptionAnswers,
) -> &'static PreemptionAnswers {
    use std::sync::atomic::Ordering as StdOrdering;
    // Acquire: pairs with the Release CAS below (the value is initialized).
    let p = cell.load(StdOrdering::Acquire);
    if !p.is_null() {
        // SAFETY: published below from a leaked Box, never freed.
        return unsafe { &*p };
    }
    let mine = Box::into_raw(Box::new(f()));
    // Release/Acquire: publishes ours, or reads the winner's.
    match cell.compare_exchange(
        std::ptr::null_mut(),
        mine,
        StdOrdering::AcqRel,
        StdOrdering::Acquire,
    ) {
        // SAFETY: `mine` is leaked from here on, never freed.
        Ok(_) => unsafe { &*mine },
        Err(won) => {
            // SAFETY: `mine` was never shared; `won` is leaked, never freed.
            drop(unsafe { Box::from_raw(mine) });
            unsafe { &*won }
        }
    }
}

/// Where this build's eBPF program came from ([`ebpf_origin`]), decided when
/// mpsync was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EbpfOrigin {
    /// Built from `bpf/sched_switch.bpf.c` by clang, with mpsync.
    Source,
    /// The object committed beside the source (`bpf/sched_switch.bpf.o`), built
    /// from the same source (its manifest's source hash is the source's), where
    /// no clang built it: the same CO-RE program.
    Committed,
    /// No program: not Linux, or neither clang nor a committed object that
    /// matches the source (or `MPSYNC_BPF_OBJECT=none`); [`ebpf_build`] says why.
    None,
}

/// Where this build's eBPF program came from: clang, the committed object, or
/// nowhere. [`ebpf_build`] says the same in words, with the versions and why.
pub fn ebpf_origin() -> EbpfOrigin {
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    {
        super::ebpf::ORIGIN
    }
    #[cfg(not(all(target_os = "linux", not(loom), not(miri))))]
    {
        EbpfOrigin::None
    }
}

/// How this build of mpsync got its eBPF program, in one line: "built from
/// source with CLANG VERSION", "committed object bpf/sched_switch.bpf.o (built
/// from source sha256 HASH with CLANG VERSION); not rebuilt here: WHY" or "not
/// built: WHY" (no clang at build time and no committed object that matches the
/// source, not Linux, ...). See [`ebpf_origin`].
pub fn ebpf_build() -> &'static str {
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    {
        super::ebpf::BUILD
    }
    #[cfg(all(not(target_os = "linux"), not(loom), not(miri)))]
    {
        "not built: eBPF is Linux-only"
    }
    #[cfg(loom)]
    {
        "not built: not under loom (the kernel is not part of a model)"
    }
    #[cfg(all(miri, not(loom)))]
    {
        "not built: not under Miri (no bpf syscall)"
    }
}

/// What the kernel says a thread is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelState {
    /// On a CPU.
    Running,
    /// Off the CPU but runnable: preempted (a tick, a wake-up of another thread),
    /// or it yielded.
    Preempted,
    /// Off the CPU waiting: a futex, a sleep, I/O.
    Blocked,
}

/// Everything the eBPF program keeps about one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelView {
    /// Its state now.
    pub state: KernelState,
    /// The CPU it last ran on.
    pub cpu: u32,
    /// Times it got a CPU since it registered.
    pub switches_in: u64,
    /// Times it lost the CPU while still runnable.
    pub preemptions: u64,
    /// Times it left the CPU to wait.
    pub blocks: u64,
    /// When it last left a CPU (`CLOCK_MONOTONIC` ns, as [`now_ns`]); 0 if never.
    pub off_ns: u64,
    /// When it last got one; 0 if never.
    pub on_ns: u64,
    /// Whether it waits for a CPU: preempted (then it counts in
    /// [`threads_preempted_now`]), or woken from a block and not yet switched
    /// in (then `woken` too, and it counts in [`threads_woken_now`]).
    pub waits_for_cpu: bool,
    /// Whether it was woken from a block and is not yet switched in (it counts
    /// in [`threads_woken_now`], not in [`threads_preempted_now`]).
    pub woken: bool,
}

/// The kernel's state of `cb`'s thread (one load), or `None` when the kernel does
/// not answer for it (eBPF not in use, a free block, beyond the map's slots).
/// The calling thread's own block reads `Running`: it runs, whatever a switch
/// the kernel did not show the program left in the record.
#[inline]
pub fn kernel_state(cb: &ContextBlock) -> Option<KernelState> {
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    {
        super::ebpf::state(cb)
    }
    #[cfg(not(all(target_os = "linux", not(loom), not(miri))))]
    {
        let _ = cb;
        None
    }
}

/// A pointer-free name of `cb`'s thread for [`kernel_state_at`]: a lock that
/// records who waits (Ticket-np's takers) stores it, even in memory shared
/// between processes. It is the thread's kernel tid, which no other live
/// thread of any process has. `None` when the kernel does not answer for `cb`
/// (or the answers are switched off).
#[inline]
pub fn kernel_key(cb: &ContextBlock) -> Option<u32> {
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    {
        super::ebpf::key(cb)
    }
    #[cfg(not(all(target_os = "linux", not(loom), not(miri))))]
    {
        let _ = cb;
        None
    }
}

/// The kernel's state of the thread named `key` ([`kernel_key`]), or `None`
/// when it does not answer. A process answers only for its own registered
/// threads: a key written by another process (a lock in shared memory), or of
/// a thread that has exited since, reads `None` — "unknown", on which a lock
/// falls back to its patience — never the state of some other thread. (A tid
/// the kernel gave again to a new registered thread of this process names that
/// thread: a stale key's hint, as the kernel reuses tids only after many
/// others.) A thread asking with its own key is told `Running`.
#[inline]
pub fn kernel_state_at(key: u32) -> Option<KernelState> {
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    {
        super::ebpf::answer_at(key)
    }
    #[cfg(not(all(target_os = "linux", not(loom), not(miri))))]
    {
        let _ = key;
        None
    }
}

/// Switches the kernel's preemption answers to the locks on (the default) or
/// off, process-wide, at run time; returns the previous setting. Off,
/// [`kernel_preempted`] answers `None` and every lock falls back to heartbeats,
/// exactly as on a machine where the eBPF program could not load — while the
/// program keeps running, so the two can be compared in one process (the
/// `lock-oversub` experiment's "eBPF off" lines). [`kernel_state`] and
/// [`kernel_view`] keep answering (they are diagnostics, not lock inputs).
/// A no-op returning `false` where the module is compiled out (loom, Miri,
/// non-Linux). `MPSYNC_EBPF=off` instead keeps the program from loading at all.
///
/// ```
/// let was = mpsync::sched::native::set_kernel_answers(false);
/// // ... measure with heartbeats only ...
/// mpsync::sched::native::set_kernel_answers(was);
/// ```
pub fn set_kernel_answers(on: bool) -> bool {
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    {
        let was = super::ebpf::answering();
        super::ebpf::set_answering(on);
        was
    }
    #[cfg(not(all(target_os = "linux", not(loom), not(miri))))]
    {
        let _ = on;
        false
    }
}

/// Whether the kernel says `cb`'s thread is preempted; `None` when it does not
/// answer for it, or when [`set_kernel_answers`] switched the answers off (then
/// [`presumed_preempted`] is the fallback).
#[inline]
pub fn kernel_preempted(cb: &ContextBlock) -> Option<bool> {
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    {
        super::ebpf::preempted(cb)
    }
    #[cfg(not(all(target_os = "linux", not(loom), not(miri))))]
    {
        let _ = cb;
        None
    }
}

/// How many threads registered with `sched` are preempted right now (off a
/// CPU while still runnable), by the eBPF program's count (one load); `None`
/// when the kernel does not answer (eBPF not in use, or switched off by
/// [`set_kernel_answers`]). A thread blocked in the kernel (a futex, a sleep,
/// I/O) does not count, nor one woken from a block and not yet on a CPU (that
/// is [`threads_woken_now`]). Why the count cannot drift: the module doc of
/// `sched::ebpf` (a thread registers and unregisters only while it runs).
pub fn threads_preempted_now() -> Option<u64> {
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    {
        super::ebpf::preempted_now()
    }
    #[cfg(not(all(target_os = "linux", not(loom), not(miri))))]
    {
        None
    }
}

/// How many threads registered with `sched` were woken from a block (a futex,
/// a sleep) and are not yet on a CPU, by the eBPF program's second count (one
/// load); `None` as [`threads_preempted_now`]. Such a thread waits for a CPU:
/// on an idle core only for the wake-up latency (tens of µs), on a busy one
/// for the running thread's slice.
///
/// ```
/// use mpsync::sched::native;
/// if let (Some(p), Some(w)) = (native::threads_preempted_now(), native::threads_woken_now()) {
///     println!("{p} preempted, {w} woken and not yet running");
/// }
/// ```
pub fn threads_woken_now() -> Option<u64> {
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    {
        super::ebpf::woken_now()
    }
    #[cfg(not(all(target_os = "linux", not(loom), not(miri))))]
    {
        None
    }
}

/// CPU pressure on this process's registered threads: `Some(true)` when some
/// registered thread is preempted right now, `Some(false)` when none is,
/// `None` when the kernel does not answer (then only the heartbeats know, and
/// only about the threads that publish them). Threads woken and not yet on a
/// CPU do not count (see [`cpu_pressure_counting_wakeups`]). The default
/// [`Waiter`](super::Waiter)'s rule for patience rests on it (FlexGuard,
/// SOSP 2025: busy-wait while no thread that could hold the lock is preempted).
///
/// ```
/// use mpsync::sched::native;
/// match native::cpu_pressure() {
///     Some(p) => println!("kernel's answer: some thread is preempted: {p}"),
///     None => println!("unknown: {}", native::preemption_answers().describe()),
/// }
/// ```
#[inline]
pub fn cpu_pressure() -> Option<bool> {
    threads_preempted_now().map(|n| n > 0)
}

/// CPU pressure counting wake-ups: `Some(true)` when some registered thread is
/// preempted *or* woken from a block and not yet on a CPU, `Some(false)` when
/// none is, `None` when the kernel does not answer. The rule of a
/// [`Waiter::counting_wakeups`](super::Waiter::counting_wakeups) (bounded-steal's
/// waits: a spinner must yield its slice to a woken queue head waiting for it).
///
/// ```
/// use mpsync::sched::native;
/// match native::cpu_pressure_counting_wakeups() {
///     Some(p) => println!("some thread is preempted or woken, not running: {p}"),
///     None => println!("unknown: {}", native::preemption_answers().describe()),
/// }
/// ```
#[inline]
pub fn cpu_pressure_counting_wakeups() -> Option<bool> {
    pressure_given(true, threads_preempted_now(), threads_woken_now)
}

/// The pressure from the two counts (`None`: the kernel does not answer); the
/// woken count is read only when it matters.
#[inline]
pub(crate) fn pressure_given(
    counting_wakeups: bool,
    preempted: Option<u64>,
    woken: impl FnOnce() -> Option<u64>,
) -> Option<bool> {
    match preempted? {
        0 if counting_wakeups => woken().map(|w| w > 0),
        n => Some(n > 0),
    }
}

/// The kernel's counters and times for `cb`'s thread: the eBPF program's
/// record as it stands, read whole (never half of one switch and half of
/// another). A diagnostic: unlike [`kernel_state`], the calling thread's own
/// record is shown as it is.
pub fn kernel_view(cb: &ContextBlock) -> Option<KernelView> {
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    {
        super::ebpf::view(cb)
    }
    #[cfg(not(all(target_os = "linux", not(loom), not(miri))))]
    {
        let _ = cb;
        None
    }
}

/// How many switch-ins of registered threads the kernel did not show the
/// eBPF program and the thread's own return from the scheduler repaired (a
/// kernel may trace nothing while some task is current, e.g. a VM's own agent;
/// see the module doc of `sched::ebpf`); `None` where the kernel has no
/// `sched_exit_tp` tracepoint (before Linux 6.17: such a switch-in is set
/// right at the thread's next switch), or does not answer.
pub fn switch_ins_repaired() -> Option<u64> {
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    {
        super::ebpf::switch_ins_repaired()
    }
    #[cfg(not(all(target_os = "linux", not(loom), not(miri))))]
    {
        None
    }
}

/// Fault injection for tests: asks the eBPF program to ignore the next
/// switch-in of `cb`'s thread, as a kernel that does not trace some context
/// does, so that the repair ([`switch_ins_repaired`]) and the answers that
/// rest on it can be checked on any machine; with `from_the_repair_too`, the
/// repair skips it as well, as on a kernel without `sched_exit_tp` (the
/// thread's record is then set right only at its next switch, and only its
/// own questions are answered right meanwhile). Returns `false` when the
/// kernel does not answer for `cb`. Only one switch-in is hidden at a time
/// (process-wide); a later call replaces an earlier one not yet used.
pub fn hide_next_switch_in(cb: &ContextBlock, from_the_repair_too: bool) -> bool {
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    {
        super::ebpf::hide_next_switch_in(cb, from_the_repair_too)
    }
    #[cfg(not(all(target_os = "linux", not(loom), not(miri))))]
    {
        let _ = (cb, from_the_repair_too);
        false
    }
}

/// Native hook of `request_no_preempt` (outermost level): the kernel extension is
/// not driven (see the module doc), so the context block's state is the request.
#[inline]
pub(crate) fn on_request_no_preempt(_cb: &ContextBlock) {}

/// Native hook of `release_no_preempt`.
#[inline]
pub(crate) fn on_release_no_preempt(_cb: &ContextBlock) {}

/// Default staleness threshold: 100 µs. A spinning waiter publishes every few
/// hundred nanoseconds, so a live one is never that stale; Linux preempts for at
/// least a scheduler tick (1–4 ms), so a preempted one soon is.
pub const DEFAULT_HEARTBEAT_THRESHOLD: Duration = Duration::from_micros(100);

#[cfg(not(loom))]
static THRESHOLD_NS: AtomicU64 = AtomicU64::new(DEFAULT_HEARTBEAT_THRESHOLD.as_nanos() as u64);
#[cfg(loom)]
loom::lazy_static! {
    static ref THRESHOLD_NS: AtomicU64 = AtomicU64::new(DEFAULT_HEARTBEAT_THRESHOLD.as_nanos() as u64);
}

/// A heartbeat older than this means "presumed preempted".
pub fn heartbeat_threshold() -> Duration {
    // Relaxed: a tuning knob; no data depends on it.
    Duration::from_nanos(THRESHOLD_NS.load(Ordering::Relaxed))
}

/// Sets the staleness threshold (clamped to 1 µs .. 1 s).
pub fn set_heartbeat_threshold(d: Duration) {
    let ns = d.as_nanos().clamp(1_000, 1_000_000_000) as u64;
    // Relaxed: see `heartbeat_threshold`.
    THRESHOLD_NS.store(ns, Ordering::Relaxed);
}

/// Whether `cb`'s thread has published a heartbeat that is now stale.
#[inline]
pub fn presumed_preempted(cb: &ContextBlock) -> bool {
    // Under loom, real time is not part of the model (and would make executions
    // non-deterministic): nobody is presumed preempted; the state word is modelled.
    #[cfg(loom)]
    {
        let _ = cb;
        false
    }
    #[cfg(not(loom))]
    {
        presumed_preempted_at(cb)
    }
}

#[cfg(not(loom))]
#[inline]
fn presumed_preempted_at(cb: &ContextBlock) -> bool {
    let hb = cb.heartbeat_ns();
    // Relaxed: see `heartbeat_threshold`.
    hb != 0 && now_ns().saturating_sub(hb) > THRESHOLD_NS.load(Ordering::Relaxed)
}

/// `sched_yield`.
#[inline]
pub(crate) fn yield_now() {
    // SAFETY: sched_yield has no preconditions.
    unsafe { libc::sched_yield() };
}

/// CPUs in the process's affinity mask (the main thread's: pinning a worker with
/// [`pin_current_thread`] narrows only that worker's mask).
pub fn available_cpus() -> std::io::Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the kernel fills at most
    // `size_of::<cpu_set_t>()` bytes.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(
            libc::getpid(),
            std::mem::size_of::<libc::cpu_set_t>(),
            &mut set,
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        set
    };
    // SAFETY: CPU_ISSET only reads the set, for indices below CPU_SETSIZE.
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Pins the calling thread to one CPU of its affinity mask.
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    let cpus = available_cpus()?;
    if !cpus.contains(&cpu) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("cpu {cpu} is not available to this process (available: {cpus:?})"),
        ));
    }
    // SAFETY: as in `available_cpus`; `cpu` < CPU_SETSIZE since it came from the mask.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // Relaxed: informational (see ContextBlock::processor).
    super::current()
        .peer
        .processor
        .store(cpu as u32, Ordering::Relaxed);
    Ok(())
}

/// Parses a cgroup v2 `cpu.max` line ("max 100000" or "50000 100000") into a
/// quota in processors.
pub fn parse_cpu_max(s: &str) -> Option<f64> {
    let mut it = s.split_whitespace();
    let (quota, period) = (it.next()?, it.next()?);
    if quota == "max" {
        return None;
    }
    let (q, p): (f64, f64) = (quota.parse().ok()?, period.parse().ok()?);
    (q > 0.0 && p > 0.0).then_some(q / p)
}

/// cgroup v2 `cpu.max` quota of this process's cgroup and its ancestors (the
/// tightest), in processors; `None` if unlimited or unreadable.
pub fn cgroup_cpu_quota() -> Option<f64> {
    let cg = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = cg
        .lines()
        .find_map(|l| l.strip_prefix("0::"))?
        .trim()
        .to_string();
    let mut dir = std::path::PathBuf::from("/sys/fs/cgroup").join(path.trim_start_matches('/'));
    let mut best: Option<f64> = None;
    loop {
        if let Some(q) = std::fs::read_to_string(dir.join("cpu.max"))
            .ok()
            .as_deref()
            .and_then(parse_cpu_max)
        {
            best = Some(best.map_or(q, |b: f64| b.min(q)));
        }
        if dir == std::path::Path::new("/sys/fs/cgroup") || !dir.pop() {
            break;
        }
    }
    best
}

/// What the last poll saw: (processors, quota).
static LAST: Mutex<Option<(u64, u32, Option<f64>)>> = Mutex::new(None);
/// Re-read the machine at most this often.
const POLL_NS: u64 = 10_000_000;

/// Whether a partition change warrants a new generation.
pub fn partition_changed(old: (u32, Option<f64>), new: (u32, Option<f64>)) -> bool {
    old != new
}

/// The machine's partition (polled at most every 10 ms; bumps the generation when
/// the affinity mask or the quota changed). `threads_per_processor` counts the
/// live registered threads by their last known processor.
pub fn poll_partition() -> Partition {
    let now = now_ns();
    let (processors, quota) = {
        let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
        match *last {
            Some((t, p, q)) if now.saturating_sub(t) < POLL_NS => (p, q),
            prev => {
                let p = available_cpus().map_or(1, |c| c.len().max(1) as u32);
                let q = cgroup_cpu_quota();
                if prev.is_some_and(|(_, op, oq)| partition_changed((op, oq), (p, q))) {
                    partition::bump();
                }
                *last = Some((now, p, q));
                (p, q)
            }
        }
    };
    let cpus = available_cpus().unwrap_or_default();
    let mut threads_per_processor = vec![0u32; cpus.len()];
    for cb in super::live_threads() {
        if let Some(i) = cb
            .processor()
            .and_then(|p| cpus.iter().position(|&c| c == p as usize))
        {
            threads_per_processor[i] += 1;
        }
    }
    Partition {
        processors,
        threads_per_processor,
        generation: partition::generation(),
        cpu_quota: quota,
        source: "native",
    }
}
