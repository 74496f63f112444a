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
//! (`Waiter::counting_wakeups`). Each slot's `waits` word says whether, and in
//! which count, its thread is counted: 0, `WAIT_PREEMPTED` or `WAIT_WOKEN`
//! (never both: a thread is woken only from blocked, preempted only while it
//! runs, and its switch-in clears either); each count is the number of slots
//! with that value, changed with atomic adds (different threads' transitions
//! run on different CPUs at once). Set when a thread starts waiting for a CPU;
//! cleared at its switch-in, at a blocking switch-out after a switch-in the
//! program did not see, and by `Kernel::unclaim` (each with the matching
//! decrement). They cannot drift: a thread claims its slot (`waits` 0) and
//! gives it back only while it runs — between a switch-in and the next
//! switch-out or wake-up — so user space's writes to a slot never race the
//! program's, and a thread's own transitions are serialized by the runqueue
//! that holds it.
//!
//! # The loader: aya
//!
//! `aya` is pure Rust: it parses the object clang made, relocates it against the
//! running kernel's BTF (CO-RE) and loads it through the `bpf` syscall, so building
//! mpsync needs neither libbpf nor libelf, and a machine without clang still
//! builds everything (the program is then "not built"). `libbpf-rs` would need
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
//! removes the entry and clears the slot. A child of `fork` inherits the map but
//! not the threads behind it: there the kernel answers for nobody (heartbeats).
//!
//! # Memory ordering
//!
//! The map's memory is written by the kernel (the BPF program, one CPU at a time
//! for a given thread: the one whose runqueue switches it) and by the owning
//! thread at registration and release. Readers use relaxed atomic loads through
//! [`AtomicU32::from_ptr`]/[`AtomicU64::from_ptr`]: each answer is one aligned
//! word, a hint like the heartbeat it replaces; nothing else is published through
//! it. These are `core` atomics, not the `crate::sync` shim: this memory is shared
//! with the kernel, outside anything loom models (the module is compiled out under
//! loom and Miri) or the chaos build should perturb.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, Once, OnceLock};
use std::time::Duration;

use aya::maps::{HashMap as BpfHashMap, MapData};
use aya::programs::BtfTracePoint;
use aya::{Btf, Ebpf};

use super::context::ContextBlock;
use super::native::{KernelState, KernelView};

/// The object clang made from `bpf/sched_switch.bpf.c` (empty when not built).
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sched_switch.bpf.o"));
/// What build.rs did: "built with ..." or "not built: why".
pub(crate) const BUILD: &str = env!("MPSYNC_BPF_BUILD");

/// Slots in the map (`MPSYNC_MAX_SLOTS` in the C source). The last one is the
/// loader's self-test slot, the one before it the header with the counts of
/// threads waiting for a CPU (`PRESSURE_SLOT`).
pub const MAX_SLOTS: usize = 4096;
const PROBE_SLOT: usize = MAX_SLOTS - 1;
/// The header slot (`PRESSURE_SLOT` in the C source): its `preemptions` field is
/// the number of registered threads preempted right now, its `blocks` field the
/// number woken and not yet on a CPU. No thread's slot.
const PRESSURE_SLOT: usize = MAX_SLOTS - 2;

/// A slot's `waits`: which header count its thread is in (`WAIT_*` of the C
/// source; 0: none).
const WAIT_PREEMPTED: u32 = 1;
const WAIT_WOKEN: u32 = 2;

/// `STATE_*` of the C source.
const STATE_UNKNOWN: u32 = 0;
const STATE_RUNNING: u32 = 1;
const STATE_PREEMPTED: u32 = 2;
const STATE_BLOCKED: u32 = 3;

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
    _pad2: u64,
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
}

// SAFETY: `base` points to a MAP_SHARED mapping that lives as long as the process
// and is only accessed through atomics; the aya objects are behind mutexes.
unsafe impl Send for Kernel {}
// SAFETY: see `Send`.
unsafe impl Sync for Kernel {}

/// Set in a child of `fork`: the map (inherited, shared with the parent) is the
/// parent's, indexed by the parent's registry and tids; the child does not use it.
static FORKED: AtomicBool = AtomicBool::new(false);

/// `pthread_atfork` child handler. Only an atomic store: async-signal-safe.
extern "C" fn forked_child() {
    // Relaxed: the child has one thread now; threads it starts later are
    // ordered after this by their spawn.
    FORKED.store(true, Ordering::Relaxed);
}

/// The loaded program, or why there is none (decided once, at first use).
fn kernel() -> &'static Result<Kernel, String> {
    KERNEL.get_or_init(load)
}

static KERNEL: OnceLock<Result<Kernel, String>> = OnceLock::new();

/// The program if it is loaded already (never starts loading: for hot paths).
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

/// Starts loading the program, once, on a thread of its own: loading takes
/// ~50 ms of CPU (parsing the kernel's BTF) and, on a busy machine, seconds of
/// wall time, which no registering thread should wait for. Threads that register
/// meanwhile get their slots when it is done.
fn start_loading() {
    static STARTED: Once = Once::new();
    STARTED.call_once(|| {
        let spawned = std::thread::Builder::new()
            .name("mpsync-ebpf-load".into())
            .spawn(|| {
                let _ = kernel();
                finish_loading();
            });
        if spawned.is_err() {
            // No thread to be had: load here.
            let _ = kernel();
            finish_loading();
        }
    });
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
static PRESSURE: std::sync::atomic::AtomicPtr<Slot> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// Why the heartbeats stay in use, or `None` when the kernel answers. Waits
/// for the load (started here if nobody has).
pub(crate) fn status() -> Option<&'static str> {
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
    let mut ebpf = Ebpf::load(OBJECT).map_err(|e| denied("cannot load the object", &e))?;
    let btf = Btf::from_sys_fs()
        .map_err(|e| denied("cannot read the kernel's BTF (/sys/kernel/btf/vmlinux)", &e))?;
    for (name, tracepoint) in [
        ("mpsync_sched_switch", "sched_switch"),
        ("mpsync_sched_wakeup", "sched_wakeup"),
    ] {
        let prog: &mut BtfTracePoint = ebpf
            .program_mut(name)
            .ok_or_else(|| format!("eBPF not loaded: the object has no program {name}"))?
            .try_into()
            .map_err(|e| denied(&format!("{name} is not a tp_btf program"), &e))?;
        prog.load(tracepoint, &btf)
            .map_err(|e| denied(&format!("the kernel refused the {tracepoint} program"), &e))?;
        prog.attach()
            .map_err(|e| denied(&format!("cannot attach to tp_btf/{tracepoint}"), &e))?;
    }
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
    };
    k.self_test()?;
    // SAFETY: registers a handler that only stores to a static atomic.
    if unsafe { libc::pthread_atfork(None, None, Some(forked_child)) } != 0 {
        return Err("eBPF not used: pthread_atfork failed (cannot keep a forked child off the parent's map)".into());
    }
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

/// The calling thread's tid as the kernel's BPF programs see it (`task->pid`, in
/// the initial PID namespace). Inside a nested PID namespace `gettid` differs; the
/// first `NSpid` entry of `/proc/thread-self/status` is the outermost visible.
fn kernel_tid() -> u32 {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    static NESTED: OnceLock<bool> = OnceLock::new();
    let nested = *NESTED.get_or_init(|| nspids("/proc/self/status").is_some_and(|v| v.len() > 1));
    if nested && let Some(v) = nspids("/proc/thread-self/status") {
        return v[0];
    }
    tid
}

fn nspids(path: &str) -> Option<Vec<u32>> {
    let s = std::fs::read_to_string(path).ok()?;
    let line = s.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    let v: Vec<u32> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    (!v.is_empty()).then_some(v)
}

impl Kernel {
    fn slot(&self, i: usize) -> *mut Slot {
        debug_assert!(i < MAX_SLOTS);
        // SAFETY: `i < MAX_SLOTS`: inside the mapping.
        unsafe { self.base.add(i) }
    }

    /// Gives slot `i` to the calling thread: resets it, then tells the program.
    fn claim(&self, i: usize, tid: u32, initial: u32) -> Result<(), String> {
        let s = self.slot(i);
        // Relaxed (all): see the module doc; the program starts writing the slot
        // only after the insert below (a syscall, which orders these stores).
        field!(s, switches_in, u64).store(0, Ordering::Relaxed);
        field!(s, preemptions, u64).store(0, Ordering::Relaxed);
        field!(s, blocks, u64).store(0, Ordering::Relaxed);
        field!(s, off_ns, u64).store(0, Ordering::Relaxed);
        field!(s, on_ns, u64).store(0, Ordering::Relaxed);
        field!(s, state, u32).store(initial, Ordering::Relaxed);
        // 0 already (given back uncounted, or never used): kept as it is, so
        // that the count stays the number of slots with it set.
        debug_assert_eq!(field!(s, waits, u32).load(Ordering::Relaxed), 0);
        field!(s, tid, u32).store(tid, Ordering::Relaxed);
        let mut tids = self.tids.lock().unwrap_or_else(|e| e.into_inner());
        tids.insert(tid, i as u32, 0).map_err(|e| {
            field!(s, tid, u32).store(0, Ordering::Relaxed);
            field!(s, state, u32).store(STATE_UNKNOWN, Ordering::Relaxed);
            format!("cannot register tid {tid} with the eBPF program: {e}")
        })
    }

    /// Takes slot `i` back from thread `tid`.
    fn unclaim(&self, i: usize, tid: u32) {
        let s = self.slot(i);
        let mut tids = self.tids.lock().unwrap_or_else(|e| e.into_inner());
        // An entry that is already gone is fine (a failed claim).
        let _ = tids.remove(&tid);
        drop(tids);
        // Relaxed: see the module doc.
        field!(s, tid, u32).store(0, Ordering::Relaxed);
        // The program no longer finds the slot (its tid is gone), and this
        // thread runs: nothing else writes the slot now. Still counted only
        // after a switch-in the program did not see: uncount it (module doc).
        // Relaxed: a hint; the count's own adds are atomic.
        field!(s, state, u32).store(STATE_UNKNOWN, Ordering::Relaxed);
        match field!(s, waits, u32).swap(0, Ordering::Relaxed) {
            WAIT_PREEMPTED => {
                field!(self.slot(PRESSURE_SLOT), preemptions, u64).fetch_sub(1, Ordering::Relaxed);
            }
            WAIT_WOKEN => {
                field!(self.slot(PRESSURE_SLOT), blocks, u64).fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
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
        self.unclaim(PROBE_SLOT, tid);
        if ok {
            Ok(())
        } else {
            Err(format!(
                "eBPF not used: self-test: the program never saw thread {tid} sleep and wake (a PID namespace hiding kernel tids?)"
            ))
        }
    }
}

/// Registration hook: `cb` (registry slot `index`) now belongs to the calling
/// thread. Starts loading the program at the first call.
pub(crate) fn on_register(cb: &'static ContextBlock, index: usize) {
    // Relaxed: see `forked_child`.
    if index >= PRESSURE_SLOT || FORKED.load(Ordering::Relaxed) {
        return; // beyond the map: this thread keeps the heartbeat answer
    }
    start_loading();
    let tid = kernel_tid();
    let mut p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    if !p.ready {
        p.list.push((cb, index, tid));
        return;
    }
    drop(p);
    if let Ok(k) = kernel() {
        k.attach(cb, index, tid, STATE_RUNNING);
    }
}

impl Kernel {
    /// Gives slot `index` to `cb`'s owner (kernel tid `tid`).
    fn attach(&self, cb: &ContextBlock, index: usize, tid: u32, initial: u32) {
        if self.claim(index, tid, initial).is_ok() {
            cb.peer.ktid.store(tid, Ordering::Relaxed);
            // Release: pairs with the Acquire load in `slot_of`; a reader that
            // sees the pointer sees the reset slot.
            cb.peer
                .kslot
                .store(self.slot(index).cast(), Ordering::Release);
        }
    }
}

/// Release hook: the owner of `cb` is exiting (called on that thread).
pub(crate) fn on_release(cb: &ContextBlock) {
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
    // Relaxed: see `forked_child`.
    if p.is_null() || FORKED.load(Ordering::Relaxed) {
        return;
    }
    if let Ok(k) = kernel() {
        // SAFETY: `p` was made by `k.slot(i)`: inside the same mapping as `k.base`.
        let i = unsafe { p.cast::<Slot>().offset_from(k.base) } as usize;
        k.unclaim(i, cb.peer.ktid.load(Ordering::Relaxed));
    }
}

#[inline]
fn slot_of(cb: &ContextBlock) -> Option<*mut Slot> {
    // Acquire: pairs with the Release store in `on_register`.
    let p = cb.peer.kslot.load(Ordering::Acquire);
    // Relaxed: see `forked_child`.
    (!p.is_null() && !FORKED.load(Ordering::Relaxed)).then_some(p.cast())
}

/// The kernel's answer for `cb`'s thread: one load.
#[inline]
pub(crate) fn state(cb: &ContextBlock) -> Option<KernelState> {
    let s = slot_of(cb)?;
    // Relaxed: a hint (see the module doc).
    decode(field!(s, state, u32).load(Ordering::Relaxed))
}

/// The index of `cb`'s slot in the mapped array: a pointer-free name for the
/// thread that [`answer_at`] reads back (a lock in memory shared between
/// processes may hold it). `None` when the kernel does not answer for `cb`, or
/// when the answers are switched off.
#[inline]
pub(crate) fn key(cb: &ContextBlock) -> Option<u32> {
    if !answering() {
        return None;
    }
    let s = slot_of(cb)?;
    let k = loaded()?;
    // Both point into the one mapping (`slot_of` only returns its slots).
    Some(((s as usize - k.base as usize) / std::mem::size_of::<Slot>()) as u32)
}

/// The kernel's answer for the thread whose [`key`] is `key`; `None` if it does
/// not know (or the key is out of range). A key from another process names a
/// slot of this process's map: a wrong hint, never an invalid read.
#[inline]
pub(crate) fn answer_at(key: u32) -> Option<KernelState> {
    let i = key as usize;
    // Relaxed: see `forked_child`.
    if !answering() || i >= PROBE_SLOT || FORKED.load(Ordering::Relaxed) {
        return None;
    }
    let k = loaded()?;
    // Relaxed: a hint (see the module doc).
    decode(field!(k.slot(i), state, u32).load(Ordering::Relaxed))
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
/// know, or when the answers are switched off ([`set_answering`]).
#[inline]
pub(crate) fn preempted(cb: &ContextBlock) -> Option<bool> {
    if !answering() {
        return None;
    }
    let s = slot_of(cb)?;
    // Relaxed: a hint (see the module doc).
    match field!(s, state, u32).load(Ordering::Relaxed) {
        STATE_UNKNOWN => None,
        st => Some(st == STATE_PREEMPTED),
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
    // Relaxed: see `forked_child`.
    if p.is_null() || FORKED.load(Ordering::Relaxed) {
        return None;
    }
    Some(p)
}

/// One of the header's counts. Relaxed: a hint, like the states (module doc).
/// The kernel adds +1/-1 to a u64, so a transiently negative count (never
/// expected: see the module doc) would wrap; it is read as signed and clamped.
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

/// Everything the kernel keeps about `cb`'s thread.
pub(crate) fn view(cb: &ContextBlock) -> Option<KernelView> {
    let s = slot_of(cb)?;
    // Relaxed (all): a snapshot of hints; fields may be from neighbouring switches.
    let waits = field!(s, waits, u32).load(Ordering::Relaxed);
    Some(KernelView {
        state: decode(field!(s, state, u32).load(Ordering::Relaxed))?,
        cpu: field!(s, cpu, u32).load(Ordering::Relaxed),
        switches_in: field!(s, switches_in, u64).load(Ordering::Relaxed),
        preemptions: field!(s, preemptions, u64).load(Ordering::Relaxed),
        blocks: field!(s, blocks, u64).load(Ordering::Relaxed),
        off_ns: field!(s, off_ns, u64).load(Ordering::Relaxed),
        on_ns: field!(s, on_ns, u64).load(Ordering::Relaxed),
        waits_for_cpu: waits != 0,
        woken: waits == WAIT_WOKEN,
    })
}
