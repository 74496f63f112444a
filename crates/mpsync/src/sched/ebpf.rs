//! The kernel's half of the interface on today's Linux: an eBPF program on
//! `tp_btf/sched_switch` (`crates/mpsync/bpf/sched_switch.bpf.c`) keeps, for every
//! registered thread, whether it is on a CPU, preempted (off the CPU but still
//! runnable) or blocked, with counters, in an array map created with
//! `BPF_F_MMAPABLE` that this module maps into the process: reading a thread's
//! state is one load.
//!
//! The program also keeps two counts of the registered threads that wait for a
//! CPU right now, in a header slot of the same map: the *preempted* ones (off a
//! CPU, still runnable; [`preempted_now`], and [`super::native::cpu_pressure`]
//! for the locks) and the *woken* ones (woken from a block and not yet on a CPU,
//! by a second program on `tp_btf/sched_wakeup`; [`woken_now`], and
//! [`super::native::cpu_pressure_counting_wakeups`]). One load each. They are
//! kept apart because each is right for some locks and wrong for others
//! (16-core A/B, 90 ms rounds): with woken threads counted, the skip-queue
//! locks' spinners park whenever a waiter woken one step ahead is still coming
//! up on an idle core (tens of µs: a wake-up latency, not a wait for a busy
//! CPU), and Smart-Q/MCS-TP/Handshaking at 14–17 threads fell back from
//! 0.6–1.15× to 0.1–0.97× parking_lot; without them bounded-steal's woken queue
//! head waits for a spinner's slice (17 threads 0.80→0.28×; on 2 cores, 4
//! pinned threads, 0.08×). So the `Waiter` counts wake-ups only where asked
//! (`Waiter::counting_wakeups`).
//!
//! Each slot's `waits` word says whether, and in which count, its thread is
//! counted: 0, `WAIT_PREEMPTED` or `WAIT_WOKEN`, or `WAIT_FREE` while no
//! thread owns the slot. Every change of it — by the programs and by user
//! space alike — is one atomic exchange or compare-and-swap, and a count moves
//! only with a successful one (+1 with `0 → WAIT_x`, −1 with `WAIT_x → 0` or
//! `→ WAIT_FREE`). So each count *is* the number of slots whose `waits` holds
//! its value, whatever the order in which CPUs run the programs, whatever
//! events the kernel does not show, and however threads exit: the counts
//! cannot drift (a reader may see one count off for the instant between the
//! exchange and the add). No increment lands on a free slot: it starts from 0,
//! and only the owner's claim moves a slot out of `WAIT_FREE`.
//!
//! # Events the kernel does not show
//!
//! A tracepoint is not always called. On this project's VMs nothing is traced
//! while a thread of the machine's own agent is current — not even its switch
//! out, which is the next thread's switch *in*: once a second, when the agent
//! wakes, a thread of ours got its CPU unseen and its slot kept saying
//! `Blocked` (or `Preempted`) for as long as it kept the CPU (6–8 of 100,000
//! looks after a 50 µs sleep; ftrace misses the same switches). A recursion
//! miss would do the same anywhere. So:
//! - the thread's own return from `__schedule` (`tp_btf/sched_exit_tp`, in its
//!   own context, before it runs another instruction of its own) repairs a
//!   switch-in the program missed ([`switch_ins_repaired`] counts them); where
//!   the kernel has no such tracepoint (before Linux 6.17) the slot is set
//!   right at the thread's next switch;
//! - a thread asking about itself is told that it runs ([`state`],
//!   [`preempted`], [`answer_at`]): it does, whatever the record says;
//! - a record of several words is written between two increments of its
//!   sequence number, and [`view`] returns only a record read whole.
//!
//! # Whose slot
//!
//! A slot is its thread's only while the slot's tid *and* process (tgid) are
//! the task's: the program does not track a task of another process that has
//! the same tid (a forked child, a reused pid). A registered thread that exits
//! without giving its slot back (it registered again after its last
//! thread-exit destructor) is forgotten by the program as it exits
//! (`tp_btf/sched_process_exit`); its block is then reclaimed by the registry.
//!
//! A [`key`] — what a lock in memory shared between processes records to name
//! a thread — is the thread's kernel tid, which no other live thread of any
//! process has; [`answer_at`] answers only for the tids of this process's
//! registered threads, so a key written by another process reads "unknown"
//! (`None`), never another thread's state.
//!
//! # Fork
//!
//! A child of `fork` inherits the map but not the threads behind it: there the
//! kernel answers for nobody, and the heartbeats answer. The child never waits
//! for the parent's loader (which it does not have): the `pthread_atfork`
//! handler that marks a child is installed before loading starts, and a child
//! forked in between is recognized by its pid.
//!
//! # The loader: aya
//!
//! `aya` is pure Rust: it parses the object clang made, relocates it against the
//! running kernel's BTF (CO-RE) and loads it through the `bpf` syscall, so building
//! mpsync needs neither libbpf nor libelf. A machine without clang loads the
//! object committed beside the source (`bpf/sched_switch.bpf.o`, checked against
//! the source by its manifest's hash; see `build.rs`): CO-RE, it is relocated
//! for the running kernel just the same. `libbpf-rs` would need
//! libbpf and libelf (and their headers, or a vendored C build) on every machine
//! that builds mpsync, for a program this small.
//!
//! # Slots
//!
//! A thread's slot is its context block's index in the registry (blocks are
//! recycled, never freed), so slots are bounded by the threads alive at once;
//! threads beyond [`MAX_SLOTS`] keep the heartbeat answer. At registration the
//! thread writes its kernel tid into its slot, marks itself running (it is: it is
//! registering) and inserts `tid -> slot` into the program's hash map; at exit it
//! removes the entry and clears the slot.
//!
//! # Memory ordering
//!
//! The map's memory is written by the kernel (the BPF program, one CPU at a time
//! for a given thread: the one whose runqueue switches it) and by the owning
//! thread at registration and release (by the registry for a thread that exited
//! without releasing). Readers use relaxed atomic loads through
//! [`AtomicU32::from_ptr`]/[`AtomicU64::from_ptr`]: each answer is one aligned
//! word, a hint like the heartbeat it replaces; nothing else is published through
//! it. A whole record ([`view`]) is read as a seqlock's reader does: the
//! sequence number (Acquire), the fields (Relaxed), an Acquire fence, the
//! sequence number again; the program's fetching atomic adds around its writes
//! are full barriers. These are `core` atomics, not the `crate::sync` shim: this memory is shared
//! with the kernel, outside anything loom models (the module is compiled out under
//! loom and Miri) or the chaos build should perturb.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering, fence};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

use aya::maps::{HashMap as BpfHashMap, MapData};
use aya::programs::BtfTracePoint;
use aya::{Btf, Ebpf, EbpfLoader};

use super::context::ContextBlock;
use super::native::{EbpfOrigin, KernelState, KernelView};
use super::stall;

/// The program build.rs provided: clang's build of `bpf/sched_switch.bpf.c`, or
/// the committed `bpf/sched_switch.bpf.o` (empty when neither).
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sched_switch.bpf.o"));
/// What build.rs did, in words: "built from source with ...", "committed
/// object ..." or "not built: why".
pub(crate) const BUILD: &str = env!("MPSYNC_BPF_BUILD");
/// Which of the three.
pub(crate) const ORIGIN: EbpfOrigin = match env!("MPSYNC_BPF_ORIGIN").as_bytes() {
    b"source" => EbpfOrigin::Source,
    b"committed" => EbpfOrigin::Committed,
    b"none" => EbpfOrigin::None,
    _ => panic!("build.rs sets MPSYNC_BPF_ORIGIN to source, committed or none"),
};

/// Slots in the map (`MPSYNC_MAX_SLOTS` in the C source). The last one is the
/// loader's self-test slot, the one before it the header with the counts of
/// threads waiting for a CPU (`PRESSURE_SLOT`).
pub const MAX_SLOTS: usize = 4096;
const PROBE_SLOT: usize = MAX_SLOTS - 1;
/// The header slot (`PRESSURE_SLOT` in the C source): its `preemptions` field is
/// the number of registered threads preempted right now, its `blocks` field the
/// number woken and not yet on a CPU, `switches_in` the switch-ins repaired,
/// `off_ns` the registered threads that exited without giving their slot back,
/// `tid` a tid whose next switch-in the program hides (tests). No thread's slot.
const PRESSURE_SLOT: usize = MAX_SLOTS - 2;

/// A slot's `waits`: which header count its thread is in (`WAIT_*` of the C
/// source; 0: none), or free.
const WAIT_PREEMPTED: u32 = 1;
const WAIT_WOKEN: u32 = 2;
const WAIT_FREE: u32 = 3;

/// `STATE_*` of the C source.
const STATE_UNKNOWN: u32 = 0;
const STATE_RUNNING: u32 = 1;
const STATE_PREEMPTED: u32 = 2;
const STATE_BLOCKED: u32 = 3;
/// The owner exited without giving the slot back (the program saw it exit).
const STATE_EXITED: u32 = 4;

/// One slot; `struct slot` of the C source, field for field.
#[repr(C)]
pub(crate) struct Slot {
    tid: u32,
    state: u32,
    cpu: u32,
    waits: u32,
    switches_in: u64,
    preemptions: u64,
    blocks: u64,
    off_ns: u64,
    on_ns: u64,
    seq: u32,
    tgid: u32,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 64);

impl Slot {
    fn u32_at(p: *mut u32) -> &'static AtomicU32 {
        // SAFETY: `p` points into the mapping, which is never unmapped while the
        // process lives (the `Kernel` is leaked in a static), 4-aligned (the
        // mapping is page-aligned, the slot 64 bytes, the field at a multiple of 4),
        // and only ever accessed atomically by user space.
        unsafe { AtomicU32::from_ptr(p) }
    }

    fn u64_at(p: *mut u64) -> &'static AtomicU64 {
        // SAFETY: as in `u32_at`, 8-aligned.
        unsafe { AtomicU64::from_ptr(p) }
    }
}

/// Accessors of a slot's fields (`s` points to a slot of the mapping).
macro_rules! field {
    ($s:expr, $f:ident, u32) => {
        // SAFETY: `$s` is a slot of the live mapping; addr_of_mut! makes no reference.
        Slot::u32_at(unsafe { std::ptr::addr_of_mut!((*$s).$f) })
    };
    ($s:expr, $f:ident, u64) => {
        // SAFETY: as above.
        Slot::u64_at(unsafe { std::ptr::addr_of_mut!((*$s).$f) })
    };
}

/// What is loaded: kept for the life of the process.
struct Kernel {
    /// The program, its link and the maps' descriptors (dropping detaches).
    _ebpf: Mutex<Ebpf>,
    /// `tid -> slot` of the program.
    tids: Mutex<BpfHashMap<MapData, u32, u32>>,
    /// The slots' map (mapped at `base`).
    _slots: MapData,
    /// The mapped slots.
    base: *mut Slot,
    /// Whether the thread's own return from `__schedule` repairs a missed
    /// switch-in (`tp_btf/sched_exit_tp` attached; Linux 6.17+).
    repairs: bool,
    /// This process's id as the kernel sees it (a slot's owner identity).
    tgid: u32,
}

// SAFETY: `base` points to a MAP_SHARED mapping that lives as long as the process
// and is only accessed through atomics; the aya objects are behind mutexes.
unsafe impl Send for Kernel {}
// SAFETY: see `Send`.
unsafe impl Sync for Kernel {}

/// The pid of the process that began loading the program (0: none yet). A
/// process whose pid differs is a child of `fork` forked after that.
static LOAD_PID: AtomicI32 = AtomicI32::new(0);

/// Set in a child of `fork` (by the `pthread_atfork` handler, or by
/// [`forked_slow`]): the map (inherited, shared with the parent) is the parent's,
/// indexed by the parent's registry and tids; the child does not use it, and
/// never waits for the parent's loader.
static FORKED: AtomicBool = AtomicBool::new(false);

/// `pthread_atfork` could not install the child handler: nothing is loaded.
static ATFORK_FAILED: AtomicBool = AtomicBool::new(false);

/// `pthread_atfork` child handler. Only an atomic store: async-signal-safe.
extern "C" fn forked_child() {
    // Relaxed: the child has one thread now; threads it starts later are
    // ordered after this by their spawn.
    FORKED.store(true, Ordering::Relaxed);
}

/// Whether this is a child of `fork` of a process that had begun loading (the
/// handler's mark: one load, for hot paths).
#[inline]
fn forked() -> bool {
    // Relaxed: see `forked_child`.
    FORKED.load(Ordering::Relaxed)
}

/// [`forked`], or a child forked after loading began but before the handler
/// was installed (recognized by its pid, and marked). A `getpid`: not for hot
/// paths.
fn forked_slow() -> bool {
    if forked() {
        return true;
    }
    // Acquire: pairs with the AcqRel CAS in `start_loading` (nothing else is
    // read through it; a value of 0 just means "not begun").
    let p = LOAD_PID.load(Ordering::Acquire);
    // SAFETY: getpid has no preconditions.
    if p != 0 && p != unsafe { libc::getpid() } {
        // Relaxed: see `forked_child`.
        FORKED.store(true, Ordering::Relaxed);
        return true;
    }
    false
}

/// Why a child of `fork` does not get the kernel's answers.
const FORKED_WHY: &str =
    "a child of fork: the eBPF program it inherited answers for its parent's threads only";

/// [`FORKED_WHY`] in a child of `fork` of a process that had begun loading;
/// `None` elsewhere. Never waits.
pub(crate) fn forked_why() -> Option<&'static str> {
    forked_slow().then_some(FORKED_WHY)
}

/// The loaded program, or why there is none (decided once, by the loader).
/// Only the loader and callers that know loading is over call it: it waits
/// while the loader loads.
fn kernel() -> &'static Result<Kernel, String> {
    KERNEL.get_or_init(load)
}

static KERNEL: OnceLock<Result<Kernel, String>> = OnceLock::new();

/// The program if it is loaded already (never waits: for hot paths, and for
/// a child of fork, whose copy of `KERNEL` may be half-made).
#[inline]
fn loaded() -> Option<&'static Kernel> {
    KERNEL.get()?.as_ref().ok()
}

/// Threads that registered while the program was loading, and whether loading
/// is over (their slots then claimed, or the load failed).
struct Pending {
    ready: bool,
    /// (block, its registry index, its owner's kernel tid).
    list: Vec<(&'static ContextBlock, usize, u32)>,
}

static PENDING: Mutex<Pending> = Mutex::new(Pending {
    ready: false,
    list: Vec::new(),
});
static READY: Condvar = Condvar::new();

/// Starts loading the program, once per process, on a thread of its own:
/// loading takes ~50 ms of CPU (parsing the kernel's BTF) and, on a busy
/// machine, seconds of wall time, which no registering thread should wait for.
/// Threads that register meanwhile get their slots when it is done.
///
/// The fork handler is installed first, before the loader starts: a child
/// forked while the program loads is marked, and never waits for a loader it
/// does not have (one forked between the claim of `LOAD_PID` and the handler
/// is recognized by its pid). No `Once`: a child forked while another thread
/// ran one would wait for it forever.
fn start_loading() {
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    // AcqRel: the winner alone goes on; see `forked_slow`.
    if LOAD_PID
        .compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    // A child forked from here to the handler's installation is known by its
    // pid (`forked_slow`).
    stall::point(stall::SCHED_EBPF_START);
    // SAFETY: registers a handler that only stores to a static atomic.
    if unsafe { libc::pthread_atfork(None, None, Some(forked_child)) } != 0 {
        // Relaxed: read by `load`, on the loader, which this thread starts.
        ATFORK_FAILED.store(true, Ordering::Relaxed);
    }
    let spawned = std::thread::Builder::new()
        .name("mpsync-ebpf-load".into())
        .spawn(load_and_publish);
    if spawned.is_err() {
        // No thread to be had: load here.
        load_and_publish();
    }
}

/// The loader's work: load, then hand out the slots of the threads that
/// registered meanwhile and say ready.
fn load_and_publish() {
    stall::point(stall::SCHED_EBPF_LOADING);
    let _ = kernel();
    stall::point(stall::SCHED_EBPF_LOADED);
    finish_loading();
}

/// Claims the slots of the threads that registered while loading (their state
/// is unknown until their next switch: the program sets it), then says ready.
fn finish_loading() {
    let mut p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    let list = std::mem::take(&mut p.list);
    if let Ok(k) = kernel() {
        for (cb, index, tid) in list {
            k.attach(cb, index, tid, STATE_UNKNOWN);
        }
        // Release: pairs with the Acquire load in `header`; the words
        // themselves are the kernel's (nothing of ours is published with them).
        PRESSURE.store(k.slot(PRESSURE_SLOT), Ordering::Release);
    }
    p.ready = true;
    READY.notify_all();
}

/// The header slot with the two counts, once the program is loaded (null
/// before, and for good where it did not load). Published once by
/// `finish_loading`, so that a waiter's look never waits for the load
/// (`kernel()` would).
static PRESSURE: AtomicPtr<Slot> = AtomicPtr::new(std::ptr::null_mut());

/// Why the heartbeats stay in use, or `None` when the kernel answers. Waits
/// for the load (started here if nobody has) — except in a child of `fork`,
/// which answers at once.
pub(crate) fn status() -> Option<&'static str> {
    if let Some(why) = forked_why() {
        return Some(why);
    }
    start_loading();
    let mut p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    while !p.ready {
        p = READY.wait(p).unwrap_or_else(|e| e.into_inner());
    }
    drop(p);
    // The caller is running: if it registered while loading, say so rather than
    // wait for its next switch.
    if let Some(s) = super::current_if_registered().and_then(slot_of) {
        // Relaxed: see the module doc. Only the owner stores here, and only while
        // it runs, so the program's next write (at its switch-out) comes after.
        let _ = field!(s, state, u32).compare_exchange(
            STATE_UNKNOWN,
            STATE_RUNNING,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
    kernel().as_ref().err().map(String::as_str)
}

fn load() -> Result<Kernel, String> {
    if let Some(why) = BUILD.strip_prefix("not built: ") {
        return Err(format!("eBPF not built ({why})"));
    }
    match std::env::var("MPSYNC_EBPF").as_deref() {
        Ok("off") | Ok("0") => return Err("eBPF disabled by MPSYNC_EBPF=off".into()),
        Ok("on") | Ok("1") | Ok("") | Err(_) => {}
        Ok(other) => {
            return Err(format!(
                "eBPF disabled: MPSYNC_EBPF={other} is neither 'on' nor 'off'"
            ));
        }
    }
    // Relaxed: written before this thread was started (see `start_loading`).
    if ATFORK_FAILED.load(Ordering::Relaxed) {
        return Err("eBPF not used: pthread_atfork failed (cannot keep a forked child off the parent's map)".into());
    }
    let denied = |what: &str, e: &dyn std::error::Error| {
        // The whole chain: aya's outer errors name the step, the innermost the
        // errno ("Operation not permitted" when not root).
        let mut s = e.to_string();
        let mut src = e.source();
        while let Some(inner) = src {
            let t = inner.to_string();
            if !s.contains(&t) {
                s = format!("{s}: {t}");
            }
            src = inner.source();
        }
        let hint = if s.contains("Operation not permitted") || s.contains("Permission denied") {
            " (loading eBPF needs root, or CAP_BPF and CAP_PERFMON)"
        } else {
            ""
        };
        format!("eBPF not loaded: {what}: {s}{hint}")
    };
    let tgid = kernel_tgid();
    let mut ebpf = EbpfLoader::new()
        .override_global("mpsync_tgid", &tgid, true)
        .load(OBJECT)
        .map_err(|e| denied("cannot load the object", &e))?;
    let btf = Btf::from_sys_fs()
        .map_err(|e| denied("cannot read the kernel's BTF (/sys/kernel/btf/vmlinux)", &e))?;
    let mut attach = |name: &str, tracepoint: &str| -> Result<(), String> {
        let prog: &mut BtfTracePoint = ebpf
            .program_mut(name)
            .ok_or_else(|| format!("eBPF not loaded: the object has no program {name}"))?
            .try_into()
            .map_err(|e| denied(&format!("{name} is not a tp_btf program"), &e))?;
        prog.load(tracepoint, &btf)
            .map_err(|e| denied(&format!("the kernel refused the {tracepoint} program"), &e))?;
        prog.attach()
            .map_err(|e| denied(&format!("cannot attach to tp_btf/{tracepoint}"), &e))?;
        Ok(())
    };
    for (name, tracepoint) in [
        ("mpsync_sched_switch", "sched_switch"),
        ("mpsync_sched_wakeup", "sched_wakeup"),
        ("mpsync_task_exit", "sched_process_exit"),
    ] {
        attach(name, tracepoint)?;
    }
    // Linux 6.17+: without it a missed switch-in is set right at the thread's
    // next switch (module doc).
    let repairs = attach("mpsync_sched_exit", "sched_exit_tp").is_ok();
    let slots = ebpf
        .take_map("slots")
        .ok_or("eBPF not loaded: the object has no map 'slots'")?;
    let aya::maps::Map::Array(slots) = slots else {
        return Err("eBPF not loaded: map 'slots' is not an array".into());
    };
    let len = MAX_SLOTS * std::mem::size_of::<Slot>();
    // SAFETY: mapping a BPF_F_MMAPABLE array map's descriptor, shared, at offset 0
    // for exactly the size of its values (page-aligned: 4096 * 64 bytes). The
    // mapping outlives the descriptor (the kernel keeps the map while mapped).
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            slots.fd().as_fd_raw(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(format!(
            "eBPF not loaded: cannot map the slots (BPF_F_MMAPABLE): {}",
            std::io::Error::last_os_error()
        ));
    }
    let tids = ebpf
        .take_map("tids")
        .ok_or("eBPF not loaded: the object has no map 'tids'")?;
    let tids: BpfHashMap<MapData, u32, u32> =
        BpfHashMap::try_from(tids).map_err(|e| denied("map 'tids' is not a u32 hash", &e))?;
    let k = Kernel {
        _ebpf: Mutex::new(ebpf),
        tids: Mutex::new(tids),
        _slots: slots,
        base: base.cast(),
        repairs,
        tgid,
    };
    k.self_test()?;
    Ok(k)
}

/// `MapFd` has `AsFd`; a raw descriptor for `mmap`.
trait RawOfMapFd {
    fn as_fd_raw(&self) -> libc::c_int;
}

impl RawOfMapFd for aya::maps::MapFd {
    fn as_fd_raw(&self) -> libc::c_int {
        use std::os::fd::AsFd;
        self.as_fd().as_raw_fd()
    }
}

/// Whether this process is in a nested PID namespace (then the kernel's ids
/// are the first entries of `NSpid`/`NStgid`).
fn nested() -> bool {
    static NESTED: OnceLock<bool> = OnceLock::new();
    *NESTED.get_or_init(|| nsids("/proc/self/status", "NSpid:").is_some_and(|v| v.len() > 1))
}

/// The calling thread's tid as the kernel's BPF programs see it (`task->pid`, in
/// the initial PID namespace). Inside a nested PID namespace `gettid` differs; the
/// first `NSpid` entry of `/proc/thread-self/status` is the outermost visible.
fn kernel_tid() -> u32 {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    if nested()
        && let Some(v) = nsids("/proc/thread-self/status", "NSpid:")
    {
        return v[0];
    }
    tid
}

/// The process's id as the kernel's BPF programs see it (`task->tgid`), as
/// [`kernel_tid`].
fn kernel_tgid() -> u32 {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    if nested()
        && let Some(v) = nsids("/proc/self/status", "NStgid:")
    {
        return v[0];
    }
    pid
}

fn nsids(path: &str, key: &str) -> Option<Vec<u32>> {
    let s = std::fs::read_to_string(path).ok()?;
    let line = s.lines().find_map(|l| l.strip_prefix(key))?;
    let v: Vec<u32> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    (!v.is_empty()).then_some(v)
}

/// Opens a write of the record `s` (its `seq` odd), runs `f` (Relaxed stores),
/// closes it (even). The seqlock writer of crossbeam's `AtomicCell`: the
/// Acquire increment and the Release fence keep `f`'s stores after the odd
/// value, the Release increment keeps them before the even one; pairs with
/// the reader in [`read_record`].
fn write_record(s: *mut Slot, f: impl FnOnce()) {
    let seq = field!(s, seq, u32);
    seq.fetch_add(1, Ordering::Acquire);
    fence(Ordering::Release);
    f();
    seq.fetch_add(1, Ordering::Release);
}

/// Reads the record `s` through `f` (Relaxed loads) whole: a read the
/// program's (or user space's) write overlapped is retried; `None` when none
/// was whole after many tries (a writer never holds a record for long: the
/// program runs with interrupts off).
fn read_record<T>(s: *mut Slot, f: impl Fn() -> T) -> Option<T> {
    let seq = field!(s, seq, u32);
    for _ in 0..10_000 {
        // Acquire: pairs with the writer's Release increment.
        let a = seq.load(Ordering::Acquire);
        if a & 1 == 0 {
            let v = f();
            // Acquire: pairs with the writer's Release fence, so a read of
            // any of its stores makes the re-read below see its odd value.
            fence(Ordering::Acquire);
            if seq.load(Ordering::Relaxed) == a {
                return Some(v);
            }
        }
        std::hint::spin_loop();
    }
    None
}

/// Where the kernel tids of this process's registered threads are found:
/// `(tid << 32) | (slot + 1)`, at `tid % BY_TID_LEN` or one of the next
/// `BY_TID_PROBES` entries, 0 when free. Written by each thread for itself (at
/// its claim and release) and by the loader for the threads that registered
/// while it loaded, with CAS; read by [`answer_at`].
const BY_TID_LEN: usize = 8192;
const BY_TID_PROBES: usize = 8;
static BY_TID: [AtomicU64; BY_TID_LEN] = [const { AtomicU64::new(0) }; BY_TID_LEN];

fn by_tid_entry(tid: u32, slot: usize) -> u64 {
    (u64::from(tid) << 32) | (slot as u64 + 1)
}

fn by_tid_probes(tid: u32) -> impl Iterator<Item = &'static AtomicU64> {
    (0..BY_TID_PROBES).map(move |k| &BY_TID[(tid as usize + k) % BY_TID_LEN])
}

/// Records that `tid` has slot `slot`; `false` when its probe entries are all
/// taken (that thread then has no key: a lock falls back to its patience).
fn by_tid_insert(tid: u32, slot: usize) -> bool {
    let e = by_tid_entry(tid, slot);
    // Relaxed: a hint; the slot it names is checked against the tid on use.
    by_tid_probes(tid).any(|a| {
        a.compare_exchange(0, e, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    })
}

fn by_tid_remove(tid: u32, slot: usize) {
    let e = by_tid_entry(tid, slot);
    // Relaxed: see `by_tid_insert`.
    let _ = by_tid_probes(tid).any(|a| {
        a.compare_exchange(e, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    });
}

/// The slot of this process's registered thread `tid`, if any.
#[inline]
fn by_tid_find(tid: u32) -> Option<usize> {
    // Relaxed: see `by_tid_insert`.
    by_tid_probes(tid).find_map(|a| {
        let v = a.load(Ordering::Relaxed);
        (v != 0 && (v >> 32) as u32 == tid).then(|| (v as u32 - 1) as usize)
    })
}

impl Kernel {
    fn slot(&self, i: usize) -> *mut Slot {
        debug_assert!(i < MAX_SLOTS);
        // SAFETY: `i < MAX_SLOTS`: inside the mapping.
        unsafe { self.base.add(i) }
    }

    fn index_of(&self, s: *mut Slot) -> usize {
        (s as usize - self.base as usize) / std::mem::size_of::<Slot>()
    }

    /// Moves slot `s`'s `waits` to `to`, taking it out of the count it was in
    /// (module doc: every change of `waits` is one atomic step, and a count
    /// moves only with a successful one).
    fn set_waits(&self, s: *mut Slot, to: u32) {
        let waits = field!(s, waits, u32);
        let h = self.slot(PRESSURE_SLOT);
        // Relaxed: the counts are hints (module doc); the CAS makes the step
        // and its count change one transition.
        let mut w = waits.load(Ordering::Relaxed);
        while w != to {
            match waits.compare_exchange(w, to, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    match w {
                        WAIT_PREEMPTED => {
                            field!(h, preemptions, u64).fetch_sub(1, Ordering::Relaxed);
                        }
                        WAIT_WOKEN => {
                            field!(h, blocks, u64).fetch_sub(1, Ordering::Relaxed);
                        }
                        _ => {}
                    }
                    return;
                }
                Err(now) => w = now,
            }
        }
    }

    /// Gives slot `i` to the calling thread: resets it, then tells the program.
    fn claim(&self, i: usize, tid: u32, initial: u32) -> Result<(), String> {
        let s = self.slot(i);
        // Relaxed (all): see the module doc; the program starts writing the slot
        // only after the insert below (a syscall, which orders these stores).
        write_record(s, || {
            field!(s, switches_in, u64).store(0, Ordering::Relaxed);
            field!(s, preemptions, u64).store(0, Ordering::Relaxed);
            field!(s, blocks, u64).store(0, Ordering::Relaxed);
            field!(s, off_ns, u64).store(0, Ordering::Relaxed);
            field!(s, on_ns, u64).store(0, Ordering::Relaxed);
            field!(s, state, u32).store(initial, Ordering::Relaxed);
            field!(s, tgid, u32).store(self.tgid, Ordering::Relaxed);
            field!(s, tid, u32).store(tid, Ordering::Relaxed);
        });
        // Out of WAIT_FREE (a slot given back), counted from here on.
        self.set_waits(s, 0);
        let mut tids = self.tids.lock().unwrap_or_else(|e| e.into_inner());
        tids.insert(tid, i as u32, 0).map_err(|e| {
            write_record(s, || {
                field!(s, tid, u32).store(0, Ordering::Relaxed);
                field!(s, state, u32).store(STATE_UNKNOWN, Ordering::Relaxed);
            });
            self.set_waits(s, WAIT_FREE);
            format!("cannot register tid {tid} with the eBPF program: {e}")
        })
    }

    /// Takes slot `i` back from thread `tid`: on that thread as it exits, or
    /// (`owner_gone`) for a thread that has exited, whose `tid -> slot` entry
    /// the program removed at its exit — or that another registered thread of
    /// this process has since been given (removed only if it still names `i`).
    fn unclaim(&self, i: usize, tid: u32, owner_gone: bool) {
        let s = self.slot(i);
        {
            let mut tids = self.tids.lock().unwrap_or_else(|e| e.into_inner());
            // An entry that is already gone is fine (a failed claim, an exit
            // the program saw).
            if !owner_gone || tids.get(&tid, 0).is_ok_and(|v| v as usize == i) {
                let _ = tids.remove(&tid);
            }
        }
        by_tid_remove(tid, i);
        // The program no longer finds the slot (its tid is gone): nothing but
        // a program already under way writes the slot now (module doc).
        // Relaxed: see the module doc.
        write_record(s, || {
            field!(s, tid, u32).store(0, Ordering::Relaxed);
            field!(s, state, u32).store(STATE_UNKNOWN, Ordering::Relaxed);
        });
        // Uncounted if counted, and free: no count is taken on it again until
        // its next claim.
        self.set_waits(s, WAIT_FREE);
    }

    /// Checks that the program sees this thread switch: sleeps 200 µs in a futex
    /// (a switch out and back in) and looks for the switch-in in its probe slot. Catches a kernel tid that is not the
    /// one the program sees (an unusual PID namespace) before anyone relies on it.
    fn self_test(&self) -> Result<(), String> {
        let tid = kernel_tid();
        self.claim(PROBE_SLOT, tid, STATE_RUNNING)
            .map_err(|e| format!("eBPF not used: self-test: {e}"))?;
        let s = self.slot(PROBE_SLOT);
        let word = crate::sync::AtomicU32::new(0);
        let mut ok = false;
        for _ in 0..5 {
            let _ = super::futex::wait(&word, 0, Some(Duration::from_micros(200)));
            // Relaxed: see the module doc.
            // Only that the program found the thread: what it makes of each
            // switch is for the tests (tests/ebpf.rs) to judge.
            if field!(s, switches_in, u64).load(Ordering::Relaxed) > 0 {
                ok = true;
                break;
            }
        }
        self.unclaim(PROBE_SLOT, tid, false);
        if ok {
            Ok(())
        } else {
            Err(format!(
                "eBPF not used: self-test: the program never saw thread {tid} sleep and wake (a PID namespace hiding kernel tids?)"
            ))
        }
    }

    /// Gives slot `index` to `cb`'s owner (kernel tid `tid`).
    fn attach(&self, cb: &ContextBlock, index: usize, tid: u32, initial: u32) {
        if self.claim(index, tid, initial).is_ok() {
            // A thread whose tid finds no room has no key (`key`).
            let _ = by_tid_insert(tid, index);
            cb.peer.ktid.store(tid, Ordering::Relaxed);
            // Release: pairs with the Acquire load in `slot_of`; a reader that
            // sees the pointer sees the reset slot.
            cb.peer
                .kslot
                .store(self.slot(index).cast(), Ordering::Release);
        }
    }
}

/// Registration hook: `cb` (registry slot `index`) now belongs to the calling
/// thread. Starts loading the program at the first call.
pub(crate) fn on_register(cb: &'static ContextBlock, index: usize) {
    if index >= PRESSURE_SLOT || forked_slow() {
        return; // beyond the map, or a child of fork: the heartbeat answers
    }
    start_loading();
    let tid = kernel_tid();
    let mut p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    if !p.ready {
        p.list.push((cb, index, tid));
        return;
    }
    drop(p);
    if let Some(k) = loaded() {
        k.attach(cb, index, tid, STATE_RUNNING);
    }
}

/// Release hook: the owner of `cb` is exiting (called on that thread), or —
/// `owner_gone` — has exited without releasing (called by the registry, which
/// takes the block back).
pub(crate) fn on_release(cb: &ContextBlock, owner_gone: bool) {
    if forked_slow() {
        // The parent's loader, list and map are not this process's: touch none.
        cb.peer.kslot.store(std::ptr::null_mut(), Ordering::Relaxed);
        return;
    }
    {
        // Still loading: the block leaves the list (after `ready`, the loader has
        // attached it, and `kslot` says so).
        let mut p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        if !p.ready {
            p.list.retain(|(b, _, _)| !std::ptr::eq(*b, cb));
            return;
        }
    }
    let p = cb.peer.kslot.swap(std::ptr::null_mut(), Ordering::AcqRel);
    if p.is_null() {
        return;
    }
    if let Some(k) = loaded() {
        let i = k.index_of(p.cast());
        k.unclaim(i, cb.peer.ktid.load(Ordering::Relaxed), owner_gone);
    }
}

/// Whether the program saw `cb`'s owner exit without giving its slot back
/// (its block can be taken back: the thread is gone, the kernel says so).
pub(crate) fn owner_exited(cb: &ContextBlock) -> bool {
    slot_of(cb).is_some_and(|s| {
        // Relaxed: the program's mark of an exit it saw; nothing else is read
        // through it.
        field!(s, state, u32).load(Ordering::Relaxed) == STATE_EXITED
    })
}

#[inline]
fn slot_of(cb: &ContextBlock) -> Option<*mut Slot> {
    // Acquire: pairs with the Release store in `attach`.
    let p = cb.peer.kslot.load(Ordering::Acquire);
    (!p.is_null() && !forked()).then_some(p.cast())
}

/// Whether `cb` is the calling thread's block: a thread asking about itself
/// runs, whatever the record says (module doc). A thread-local load.
#[inline]
fn is_self(cb: &ContextBlock) -> bool {
    super::current_if_registered().is_some_and(|me| std::ptr::eq(me, cb))
}

/// The kernel's answer for `cb`'s thread: one load (and `Running` for the
/// caller's own thread).
#[inline]
pub(crate) fn state(cb: &ContextBlock) -> Option<KernelState> {
    let s = slot_of(cb)?;
    if is_self(cb) {
        return Some(KernelState::Running);
    }
    // Relaxed: a hint (see the module doc).
    decode(field!(s, state, u32).load(Ordering::Relaxed))
}

/// The name of `cb`'s thread that [`answer_at`] reads back: its kernel tid (a
/// lock in memory shared between processes may hold it; see the module doc).
/// `None` when the kernel does not answer for `cb`, or when the answers are
/// switched off.
#[inline]
pub(crate) fn key(cb: &ContextBlock) -> Option<u32> {
    if !answering() {
        return None;
    }
    let s = slot_of(cb)?;
    let k = loaded()?;
    // Relaxed: written by the owner (or the loader) before `kslot`'s Release.
    let tid = cb.peer.ktid.load(Ordering::Relaxed);
    (by_tid_find(tid) == Some(k.index_of(s))).then_some(tid)
}

/// The kernel's answer for the thread whose [`key`] is `key`; `None` if it does
/// not know: a key of no registered thread of this process (another
/// process's, a thread's that has exited), or when the answers are off.
#[inline]
pub(crate) fn answer_at(key: u32) -> Option<KernelState> {
    if !answering() || forked() {
        return None;
    }
    let k = loaded()?;
    let i = by_tid_find(key)?;
    if i >= PRESSURE_SLOT {
        return None;
    }
    let s = k.slot(i);
    // Relaxed: a hint (see the module doc). The slot must still be the key's.
    if field!(s, tid, u32).load(Ordering::Relaxed) != key {
        return None;
    }
    if super::current_if_registered()
        .is_some_and(|me| me.peer.ktid.load(Ordering::Relaxed) == key && slot_of(me) == Some(s))
    {
        return Some(KernelState::Running);
    }
    decode(field!(s, state, u32).load(Ordering::Relaxed))
}

/// Whether [`preempted`] gives the kernel's answers (see
/// [`super::native::set_kernel_answers`]). A `core` atomic like the map's words:
/// a process-wide configuration switch read on the hot path, not a protocol
/// word, so neither loom (which compiles this module out) nor the chaos build
/// has anything to model in it.
static ANSWERING: AtomicBool = AtomicBool::new(true);

/// Turns the lock-facing answers on or off (the map keeps being maintained).
pub(crate) fn set_answering(on: bool) {
    // Relaxed: a configuration switch; nothing is published with it, and a
    // waiter that reads the old value for a while gets a hint that is still true.
    ANSWERING.store(on, Ordering::Relaxed);
}

/// Whether the lock-facing answers are on.
#[inline]
pub(crate) fn answering() -> bool {
    // Relaxed: see `set_answering`.
    ANSWERING.load(Ordering::Relaxed)
}

/// Whether the kernel says `cb`'s thread is preempted; `None` if it does not
/// know, or when the answers are switched off ([`set_answering`]). `false`
/// for the caller's own thread.
#[inline]
pub(crate) fn preempted(cb: &ContextBlock) -> Option<bool> {
    if !answering() {
        return None;
    }
    let s = slot_of(cb)?;
    if is_self(cb) {
        return Some(false);
    }
    // Relaxed: a hint (see the module doc).
    match field!(s, state, u32).load(Ordering::Relaxed) {
        STATE_RUNNING => Some(false),
        STATE_PREEMPTED => Some(true),
        STATE_BLOCKED => Some(false),
        _ => None,
    }
}

fn decode(st: u32) -> Option<KernelState> {
    match st {
        STATE_RUNNING => Some(KernelState::Running),
        STATE_PREEMPTED => Some(KernelState::Preempted),
        STATE_BLOCKED => Some(KernelState::Blocked),
        _ => None,
    }
}

/// The header slot, when the kernel answers: `None` when the program is not
/// loaded (yet), in a child of `fork`, or when the answers are switched off
/// ([`set_answering`]).
#[inline]
fn header() -> Option<*mut Slot> {
    if !answering() {
        return None;
    }
    // Acquire: pairs with the Release store in `finish_loading`.
    let p = PRESSURE.load(Ordering::Acquire);
    if p.is_null() || forked() {
        return None;
    }
    Some(p)
}

/// One of the header's counts. Relaxed: a hint, like the states (module doc).
/// The kernel adds +1/-1 to a u64, so a count one off for an instant (module
/// doc) could read as a wrapped negative; it is read as signed and clamped.
#[inline]
fn count(word: &AtomicU64) -> u64 {
    (word.load(Ordering::Relaxed) as i64).max(0) as u64
}

/// How many registered threads are preempted right now (off a CPU, still
/// runnable), by the kernel's count (module doc); `None` when the kernel does
/// not answer ([`header`]). One load.
#[inline]
pub(crate) fn preempted_now() -> Option<u64> {
    let h = header()?;
    Some(count(field!(h, preemptions, u64)))
}

/// How many registered threads were woken from a block and are not yet on a
/// CPU, by the kernel's count (module doc); `None` as [`preempted_now`]. One
/// load.
#[inline]
pub(crate) fn woken_now() -> Option<u64> {
    let h = header()?;
    Some(count(field!(h, blocks, u64)))
}

/// How many switch-ins of registered threads the program missed and their
/// own return from `__schedule` repaired (module doc); `None` where the kernel
/// lacks that tracepoint, or does not answer.
pub(crate) fn switch_ins_repaired() -> Option<u64> {
    if !loaded()?.repairs {
        return None;
    }
    let h = header()?;
    // Relaxed: a statistic.
    Some(field!(h, switches_in, u64).load(Ordering::Relaxed))
}

/// Asks the program to hide the next switch-in of `cb`'s thread, as a kernel
/// that does not trace some context does — and, with `from_the_repair_too`,
/// to skip its repair as well, as a kernel without `sched_exit_tp` would
/// (tests); `false` when the kernel does not answer for it.
pub(crate) fn hide_next_switch_in(cb: &ContextBlock, from_the_repair_too: bool) -> bool {
    let (Some(_), Some(h)) = (slot_of(cb), header()) else {
        return false;
    };
    // Relaxed: read by the program at a later switch; knobs, nothing published
    // (the flag before the tid: the program reads the flag once it took the tid).
    field!(h, waits, u32).store(u32::from(from_the_repair_too), Ordering::Relaxed);
    field!(h, tid, u32).store(cb.peer.ktid.load(Ordering::Relaxed), Ordering::Relaxed);
    true
}

/// Everything the kernel keeps about `cb`'s thread: the program's record as
/// it stands, read whole (a diagnostic, without the rule that a thread asking
/// about itself runs).
pub(crate) fn view(cb: &ContextBlock) -> Option<KernelView> {
    let s = slot_of(cb)?;
    // Relaxed (all): inside the seqlock read (see `read_record`).
    let (st, v) = read_record(s, || {
        let waits = field!(s, waits, u32).load(Ordering::Relaxed);
        (
            field!(s, state, u32).load(Ordering::Relaxed),
            KernelView {
                state: KernelState::Running,
                cpu: field!(s, cpu, u32).load(Ordering::Relaxed),
                switches_in: field!(s, switches_in, u64).load(Ordering::Relaxed),
                preemptions: field!(s, preemptions, u64).load(Ordering::Relaxed),
                blocks: field!(s, blocks, u64).load(Ordering::Relaxed),
                off_ns: field!(s, off_ns, u64).load(Ordering::Relaxed),
                on_ns: field!(s, on_ns, u64).load(Ordering::Relaxed),
                waits_for_cpu: waits == WAIT_PREEMPTED || waits == WAIT_WOKEN,
                woken: waits == WAIT_WOKEN,
            },
        )
    })?;
    Some(KernelView {
        state: decode(st)?,
        ..v
    })
}
