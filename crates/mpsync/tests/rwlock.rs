//! Reader-writer lock torture and properties, for every lock of `mpsync::rwlock`:
//!
//! - **exclusion**: no writer ever overlaps a reader or another writer (a
//!   non-atomic pair written by writers and read by readers, flags checked
//!   inside every section; violations counted, not panicked on inside a lock),
//!   8 threads on the machine's cores and under the emulated pseudo-scheduler;
//! - **readers really overlap**: four readers must all be inside at once (fails
//!   if reads are serialized);
//! - **no starvation** (the fair locks): a writer among continuous readers, and a
//!   reader among continuous writers, each finish a fixed number of sections
//!   before a deadline;
//! - **FIFO across kinds** (the queued locks): a writer waits for the reader
//!   ahead of it and blocks the reader behind it;
//! - **BRAVO** (`Bravo<L>` over three base locks): the suites above, and writer
//!   exclusion with *biased* readers — 8 threads, one section in 64 a write, so
//!   the bias is re-enabled between writes and writers revoke it while fast-path
//!   readers are inside (the test fails unless both fast reads and revocations
//!   happened); and the same with upgradable readers that upgrade and write
//!   (the upgrade revokes the bias as a writer does).
//!
//! Longer runs: `MPSYNC_TORTURE_SCALE=10 cargo test --release --test rwlock`.

mod common;

use std::cell::UnsafeCell;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lock_api::{RawMutex, RawRwLock, RawRwLockUpgrade};
use mpsync::rwlock::{
    Bravo, BravoShared, RwNative, RwNativeNp, RwQueued, RwSmartQ, RwTasB, RwTasBNp,
};
use mpsync::sched::emulated::{Emulated, EmulatedConfig};
use mpsync::sched::{self};
use mpsync::util::busy::BusyWork;

/// Serializes the tests that start a pseudo-scheduler (one signal handler per process).
static EMU: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn scale() -> u64 {
    std::env::var("MPSYNC_TORTURE_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The protected state: deliberately not atomic.
struct Shared<L> {
    lock: L,
    pair: UnsafeCell<(u64, u64)>,
    readers_in: AtomicU32,
    writer_in: AtomicBool,
    /// Sections that saw a forbidden overlap or a torn pair.
    violations: AtomicU64,
    reads: AtomicU64,
}

// SAFETY: `pair` is written only under the write lock, read under the read lock
// (the property under test).
unsafe impl<L: Sync> Sync for Shared<L> {}

impl<L: RawRwLock> Shared<L> {
    fn new() -> Self {
        Self {
            lock: L::INIT,
            pair: UnsafeCell::new((0, 0)),
            readers_in: AtomicU32::new(0),
            writer_in: AtomicBool::new(false),
            violations: AtomicU64::new(0),
            reads: AtomicU64::new(0),
        }
    }

    fn read(&self, work_iters: u64) {
        let g = self.lock.lock_shared();
        self.readers_in.fetch_add(1, Ordering::SeqCst);
        let mut bad = self.writer_in.load(Ordering::SeqCst);
        // SAFETY: we hold the read lock.
        let (a, b) = unsafe { *self.pair.get() };
        BusyWork::global().run_iters(work_iters);
        bad |= a != b || self.writer_in.load(Ordering::SeqCst);
        if bad {
            self.violations.fetch_add(1, Ordering::Relaxed);
        }
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.readers_in.fetch_sub(1, Ordering::SeqCst);
        // SAFETY: `g` came from `lock_shared` on this thread.
        unsafe { self.lock.unlock_shared(g) };
    }

    fn write(&self, work_iters: u64) {
        let g = self.lock.lock_exclusive();
        let mut bad = self.writer_in.swap(true, Ordering::SeqCst);
        bad |= self.readers_in.load(Ordering::SeqCst) != 0;
        // SAFETY: we hold the write lock.
        let p = unsafe { &mut *self.pair.get() };
        p.0 += 1;
        BusyWork::global().run_iters(work_iters);
        p.1 += 1;
        bad |= self.readers_in.load(Ordering::SeqCst) != 0;
        if bad {
            self.violations.fetch_add(1, Ordering::Relaxed);
        }
        self.writer_in.store(false, Ordering::SeqCst);
        // SAFETY: `g` came from `lock_exclusive` on this thread.
        unsafe { self.lock.unlock_exclusive(g) };
    }

    fn violated(&self) -> bool {
        self.violations.load(Ordering::Relaxed) != 0
    }

    fn check(&self, writes: u64) {
        let v = self.violations.load(Ordering::Relaxed);
        assert_eq!(v, 0, "{v} sections overlapped a writer");
        // SAFETY: all threads joined.
        let p = unsafe { *self.pair.get() };
        assert_eq!(p, (writes, writes), "lost or torn writes");
    }
}

/// 8 threads on the machine's cores, one section in four a write.
fn oversubscribed<L: RawRwLock + Sync>(iters: u64) {
    let iters = common::sized(iters * scale(), 8);
    let threads = 8u64;
    let s = Shared::<L>::new();
    let go = Barrier::new(threads as usize);
    let writes = AtomicU64::new(0);
    std::thread::scope(|sc| {
        for t in 0..threads {
            let (s, go, writes) = (&s, &go, &writes);
            sc.spawn(move || {
                go.wait();
                for i in 0..iters {
                    if s.violated() {
                        break;
                    }
                    if (i + t).is_multiple_of(4) {
                        s.write(50 + i % 300);
                        writes.fetch_add(1, Ordering::Relaxed);
                    } else {
                        s.read(1 + i % 50);
                    }
                }
                assert_eq!(sched::current().depth(), 0);
            });
        }
    });
    s.check(writes.load(Ordering::Relaxed));
}

/// Under the emulated pseudo-scheduler at MP 3 with a short quantum: workers are
/// preempted (or warned) inside and outside their sections.
fn emulated_mp3<L: RawRwLock + Sync>() {
    let _serial = EMU.lock().unwrap_or_else(|e| e.into_inner());
    let procs = cores().min(4) as u32;
    let cfg = EmulatedConfig::new(procs, 3.0)
        .expect("valid config")
        .quantum(Duration::from_millis(2))
        .extension_bound(Duration::from_micros(500))
        .seed(11);
    let emu = Emulated::start(cfg).expect("pseudo-scheduler starts");
    let run = Duration::from_millis(300 * scale());
    let s = Shared::<L>::new();
    let writes = AtomicU64::new(0);
    let go = Barrier::new(procs as usize);
    std::thread::scope(|sc| {
        for v in 0..procs {
            let (s, go, emu, writes) = (&s, &go, &emu, &writes);
            sc.spawn(move || {
                let _att = emu.attach(v).expect("attach");
                go.wait();
                let end = Instant::now() + run;
                let mut i = 0u64;
                while Instant::now() < end && !s.violated() {
                    if (i + v as u64).is_multiple_of(3) {
                        s.write(BusyWork::global().iters_for_ns(2_000));
                        writes.fetch_add(1, Ordering::Relaxed);
                    } else {
                        s.read(BusyWork::global().iters_for_ns(3_000));
                    }
                    BusyWork::global().run_ns(4_000);
                    i += 1;
                }
            });
        }
    });
    let stats = emu.stop();
    s.check(writes.load(Ordering::Relaxed));
    assert!(
        stats.preemptions + stats.warnings > 10,
        "the scheduler barely intervened: {stats:?}"
    );
}

/// Four readers must all be inside at once: each waits inside its read section
/// (yielding) until all four are there, or 20 s pass. A lock that serializes
/// readers never gets there.
fn readers_overlap<L: RawRwLock + Sync>() {
    const N: u32 = 4;
    let lock = L::INIT;
    let inside = AtomicU32::new(0);
    let most = AtomicU32::new(0);
    let deadline = Instant::now() + Duration::from_secs(20);
    std::thread::scope(|sc| {
        for _ in 0..N {
            let (lock, inside, most) = (&lock, &inside, &most);
            sc.spawn(move || {
                let g = lock.lock_shared();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                while inside.load(Ordering::SeqCst) < N && Instant::now() < deadline {
                    std::thread::yield_now();
                }
                most.fetch_max(inside.load(Ordering::SeqCst), Ordering::SeqCst);
                // Stay until everyone has seen the others (or time is up).
                while most.load(Ordering::SeqCst) < N && Instant::now() < deadline {
                    std::thread::yield_now();
                }
                // SAFETY: from `lock_shared` on this thread.
                unsafe { lock.unlock_shared(g) };
            });
        }
    });
    assert_eq!(
        most.into_inner(),
        N,
        "readers were serialized: at most that many inside at once"
    );
}

/// `writers` threads write continuously and `readers` threads read
/// continuously (sections of ~20 µs, back to back); the first thread of the
/// `victim` kind must finish `target` sections before a 20 s deadline.
fn not_starved<L: RawRwLock + Sync>(victim_is_writer: bool) {
    let target = common::sized(30, 3);
    let s = Shared::<L>::new();
    let stop = AtomicBool::new(false);
    let victim_done = AtomicU64::new(0);
    let writes = AtomicU64::new(0);
    let deadline = Instant::now() + Duration::from_secs(20);
    let work = BusyWork::global().iters_for_ns(20_000);
    std::thread::scope(|sc| {
        // The crowd: three threads of the other kind, overlapping their sections.
        for _ in 0..3 {
            let (s, stop, writes) = (&s, &stop, &writes);
            sc.spawn(move || {
                while !stop.load(Ordering::Relaxed) && !s.violated() {
                    if victim_is_writer {
                        s.read(work);
                    } else {
                        s.write(work);
                        writes.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        let (s, stop, victim_done, writes) = (&s, &stop, &victim_done, &writes);
        sc.spawn(move || {
            while victim_done.load(Ordering::Relaxed) < target && Instant::now() < deadline {
                if victim_is_writer {
                    s.write(work / 4);
                    writes.fetch_add(1, Ordering::Relaxed);
                } else {
                    s.read(work / 4);
                }
                victim_done.fetch_add(1, Ordering::Relaxed);
            }
            stop.store(true, Ordering::Relaxed);
        });
    });
    s.check(writes.load(Ordering::Relaxed));
    let done = victim_done.into_inner();
    assert!(
        done >= target,
        "the {} starved: {done} of {target} sections in 20 s",
        if victim_is_writer { "writer" } else { "reader" }
    );
}

/// A reader R1 holds the lock; a writer W queues; a reader R2 arrives after W.
/// W must wait for R1 (the reader ahead) and R2 must wait for W (behind it):
/// the order of entry is W, then R2, and neither enters while R1 reads.
fn fifo_writer_between_readers<L: RawRwLock + Sync>(writer_queued: impl Fn(&L) -> bool + Sync) {
    let lock = L::INIT;
    let order = std::sync::Mutex::new(Vec::new());
    let w_started = AtomicBool::new(false);
    let r1 = lock.lock_shared();
    std::thread::scope(|sc| {
        let (lock, order, w_started) = (&lock, &order, &w_started);
        sc.spawn(move || {
            w_started.store(true, Ordering::SeqCst);
            let g = lock.lock_exclusive();
            order.lock().unwrap().push("W");
            // SAFETY: from `lock_exclusive` on this thread.
            unsafe { lock.unlock_exclusive(g) };
        });
        // Wait (deadline 20 s) until W is in the queue.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !(w_started.load(Ordering::SeqCst) && writer_queued(lock)) {
            assert!(Instant::now() < deadline, "the writer never queued");
            std::thread::yield_now();
        }
        sc.spawn(move || {
            let g = lock.lock_shared();
            order.lock().unwrap().push("R2");
            // SAFETY: from `lock_shared` on this thread.
            unsafe { lock.unlock_shared(g) };
        });
        // Give both a chance to (wrongly) enter while R1 still reads.
        for _ in 0..50 {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            order.lock().unwrap().is_empty(),
            "entered while the first reader still read: {:?}",
            order.lock().unwrap()
        );
        // SAFETY: from `lock_shared` on this thread.
        unsafe { lock.unlock_shared(r1) };
    });
    assert_eq!(*order.lock().unwrap(), ["W", "R2"], "not FIFO across kinds");
}

macro_rules! rw_suite {
    ($($name:ident: $l:ty, $iters:expr;)*) => {$(
        mod $name {
            use super::*;
            #[test]
            fn oversubscribed_exclusion() { oversubscribed::<$l>($iters) }
            #[test]
            fn emulated_exclusion() { emulated_mp3::<$l>() }
            #[test]
            fn readers_really_overlap() { readers_overlap::<$l>() }
        }
    )*};
}

rw_suite! {
    rw_tas_b: RwTasB, 20000;
    rw_tas_b_np: RwTasBNp, 20000;
    rw_queued: RwQueued, 300;
    rw_smart_q: RwSmartQ, 1000;
    rw_native: RwNative, 2000;
    rw_native_np: RwNativeNp, 2000;
    bravo_rw_tas_b: Bravo<RwTasB>, 20000;
    bravo_rw_smart_q: Bravo<RwSmartQ>, 1000;
    bravo_rw_native: Bravo<RwNative>, 2000;
}

macro_rules! fair_suite {
    ($($name:ident: $l:ty;)*) => {$(
        mod $name {
            use super::*;
            #[test]
            fn writer_not_starved_by_readers() { not_starved::<$l>(true) }
            #[test]
            fn reader_not_starved_by_writers() { not_starved::<$l>(false) }
            #[test]
            fn writer_waits_for_reader_ahead_and_blocks_reader_behind() {
                fifo_writer_between_readers::<$l>(|l| l.admission().is_locked())
            }
        }
    )*};
}

fair_suite! {
    fair_queued: RwQueued;
    fair_smart_q: RwSmartQ;
    fair_native: RwNative;
    fair_native_np: RwNativeNp;
}

impl<L: RawRwLock> Shared<Bravo<L>> {
    /// As [`Shared::read`] (a section of `ns`), returning whether the read
    /// took BRAVO's fast path.
    fn read_biased(&self, ns: u64) -> bool {
        let g = self.lock.lock_shared();
        let fast = matches!(g, BravoShared::Fast(_));
        self.readers_in.fetch_add(1, Ordering::SeqCst);
        let mut bad = self.writer_in.load(Ordering::SeqCst);
        // SAFETY: we hold the read lock.
        let (a, b) = unsafe { *self.pair.get() };
        BusyWork::global().run_ns(ns);
        bad |= a != b || self.writer_in.load(Ordering::SeqCst);
        if bad {
            self.violations.fetch_add(1, Ordering::Relaxed);
        }
        self.readers_in.fetch_sub(1, Ordering::SeqCst);
        // SAFETY: `g` came from `lock_shared` on this thread.
        unsafe { self.lock.unlock_shared(g) };
        fast
    }
}

impl<L: RawRwLockUpgrade> Shared<Bravo<L>> {
    /// An upgradable read of `ns` that then upgrades and writes: no writer and
    /// no other upgradable reader beside the read part (`upgrader_in`), no
    /// reader (fast or slow) and no writer beside the write part, and nothing
    /// written between the read and the write.
    fn upgrade_write(&self, upgrader_in: &AtomicBool, ns: u64) {
        let u = self.lock.lock_upgradable();
        let mut bad = upgrader_in.swap(true, Ordering::SeqCst);
        bad |= self.writer_in.load(Ordering::SeqCst);
        // SAFETY: we hold the upgradable read lock.
        let seen = unsafe { *self.pair.get() };
        BusyWork::global().run_ns(ns);
        bad |= seen.0 != seen.1 || self.writer_in.load(Ordering::SeqCst);
        // SAFETY: `u` came from `lock_upgradable` on this thread.
        let w = unsafe { self.lock.upgrade(u) };
        bad |= self.writer_in.swap(true, Ordering::SeqCst);
        bad |= self.readers_in.load(Ordering::SeqCst) != 0;
        // SAFETY: we hold the write lock.
        let p = unsafe { &mut *self.pair.get() };
        bad |= *p != seen;
        p.0 += 1;
        BusyWork::global().run_ns(ns);
        p.1 += 1;
        bad |= self.readers_in.load(Ordering::SeqCst) != 0;
        if bad {
            self.violations.fetch_add(1, Ordering::Relaxed);
        }
        self.writer_in.store(false, Ordering::SeqCst);
        upgrader_in.store(false, Ordering::SeqCst);
        // SAFETY: `w` came from `upgrade` on this thread.
        unsafe { self.lock.unlock_exclusive(w) };
    }
}

/// BRAVO with upgradable reads beside biased readers and writers: 8 threads;
/// of 64 sections, two upgradable reads that upgrade and write (2 µs each
/// part), the rest reads (1–3 µs), but one in 1024 a write (5 µs) — rare, so
/// that the bias is on at most upgrades and it is the upgrades that revoke it. Run for a fixed time and
/// on until fast-path reads and upgrades have happened (at most 20 s, as
/// [`bravo_biased_exclusion`]); no section may overlap a writer, no upgradable
/// read another one or a writer, no write may slip into an upgrade.
fn bravo_upgrade_exclusion<L: RawRwLockUpgrade + Sync>() {
    let threads = 8u64;
    let run = Duration::from_millis(common::sized(400, 1) * scale());
    let cap = Duration::from_secs(20).max(run);
    let wanted = fast_reads_wanted();
    let s = Shared::<Bravo<L>>::new();
    let go = Barrier::new(threads as usize);
    let upgrader_in = AtomicBool::new(false);
    let (writes, upgrades, fast) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|sc| {
        for t in 0..threads {
            let (s, go, upgrader_in) = (&s, &go, &upgrader_in);
            let (writes, upgrades, fast) = (&writes, &upgrades, &fast);
            sc.spawn(move || {
                go.wait();
                let start = Instant::now();
                let mut i = t * 8;
                while !s.violated() {
                    let elapsed = start.elapsed();
                    if elapsed >= cap
                        || (elapsed >= run
                            && fast.load(Ordering::Relaxed) >= wanted
                            && upgrades.load(Ordering::Relaxed) > 0
                            && writes.load(Ordering::Relaxed) > 0)
                    {
                        break;
                    }
                    match i % 64 {
                        0 if i % 1024 == 0 => {
                            s.write(BusyWork::global().iters_for_ns(5_000));
                            writes.fetch_add(1, Ordering::Relaxed);
                        }
                        21 | 42 => {
                            s.upgrade_write(upgrader_in, 2_000);
                            upgrades.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {
                            if s.read_biased(1_000 + (i % 3) * 1_000) {
                                fast.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    i += 1;
                }
                assert_eq!(sched::current().depth(), 0);
            });
        }
    });
    let (w, u, f) = (
        writes.into_inner(),
        upgrades.into_inner(),
        fast.into_inner(),
    );
    s.check(w + u);
    assert!(w > 0 && u > 0, "{w} writes, {u} upgrades");
    assert!(
        f > 0,
        "no read took the fast path in {} s ({w} writes, {u} upgrades)",
        cap.as_secs()
    );
    assert!(
        !s.lock.is_locked(),
        "left locked: {:?}",
        s.lock.fast_readers()
    );
}

/// Fast-path reads [`bravo_biased_exclusion`] waits for beyond its minimum
/// time (fewer in the chaos build, where every section is far slower).
fn fast_reads_wanted() -> u64 {
    common::sized(100, 20)
}

/// BRAVO with biased readers: 8 threads, one section in 64 a write (5 µs;
/// reads 1–3 µs, so the inhibit period ends and readers re-bias between
/// writes), run for at least a fixed time and on until fast-path reads have
/// happened (at most 20 s: the inhibit period is 9× a revocation, and on a
/// slow or loaded machine a revocation that waits for a preempted fast reader
/// can keep the bias off for a long stretch — CI once saw 214 writes and no
/// fast read in 400 ms); fast-path reads must have happened, and writes, and
/// no section may overlap a writer.
fn bravo_biased_exclusion<L: RawRwLock + Sync>() {
    let threads = 8u64;
    let run = Duration::from_millis(common::sized(400, 1) * scale());
    let cap = Duration::from_secs(20).max(run);
    let wanted = fast_reads_wanted();
    let s = Shared::<Bravo<L>>::new();
    let go = Barrier::new(threads as usize);
    let (writes, fast) = (AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|sc| {
        for t in 0..threads {
            let (s, go, writes, fast) = (&s, &go, &writes, &fast);
            sc.spawn(move || {
                go.wait();
                let start = Instant::now();
                let mut i = t;
                while !s.violated() {
                    let elapsed = start.elapsed();
                    if elapsed >= cap
                        || (elapsed >= run
                            && fast.load(Ordering::Relaxed) >= wanted
                            && writes.load(Ordering::Relaxed) > 0)
                    {
                        break;
                    }
                    if i.is_multiple_of(64) {
                        s.write(BusyWork::global().iters_for_ns(5_000));
                        writes.fetch_add(1, Ordering::Relaxed);
                    } else if s.read_biased(1_000 + (i % 3) * 1_000) {
                        fast.fetch_add(1, Ordering::Relaxed);
                    }
                    i += 1;
                }
                assert_eq!(sched::current().depth(), 0);
            });
        }
    });
    s.check(writes.load(Ordering::Relaxed));
    let (w, f) = (writes.into_inner(), fast.into_inner());
    assert!(w > 0, "no writes happened");
    assert!(
        f > 0,
        "no read took the fast path in {} s ({w} writes)",
        cap.as_secs()
    );
    assert!(
        !s.lock.is_locked(),
        "left locked: {:?}",
        s.lock.fast_readers()
    );
}

/// BRAVO: a reader stopped right after it saw the bias on (stall point
/// `bravo.reader.bias_seen`, before it publishes its slot) while a writer
/// revokes the bias and enters. Released, the reader must re-check the bias
/// and wait for the writer, not read during the write.
fn bravo_reader_stalled_before_publishing<L: RawRwLock + Sync>() {
    use mpsync::sched::stall::{self, Trap};
    let lock = Bravo::<L>::INIT;
    // A first (slow) read turns the bias on.
    let g = lock.lock_shared();
    // SAFETY: from `lock_shared` on this thread.
    unsafe { lock.unlock_shared(g) };
    assert!(lock.is_biased());
    let entered = AtomicBool::new(false);
    let bad = std::thread::scope(|sc| {
        let (id_tx, id_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (lock, entered) = (&lock, &entered);
        let victim = sc.spawn(move || {
            id_tx.send(sched::current().id()).unwrap();
            go_rx.recv().unwrap();
            let g = lock.lock_shared(); // stops at BRAVO_BIAS_SEEN
            entered.store(true, Ordering::SeqCst);
            // SAFETY: from `lock_shared` on this thread.
            unsafe { lock.unlock_shared(g) };
        });
        let trap = Trap::at(stall::BRAVO_BIAS_SEEN)
            .thread(id_rx.recv().unwrap())
            .arm();
        go_tx.send(()).unwrap();
        trap.wait_hit(Duration::from_secs(20))
            .expect("the reader reached the stall point");
        let w = lock.lock_exclusive(); // revokes: the reader has not published
        trap.release();
        // Give the released reader time to (wrongly) get in during the write.
        let until = Instant::now() + Duration::from_millis(300);
        while !entered.load(Ordering::SeqCst) && Instant::now() < until {
            std::thread::yield_now();
        }
        let bad = entered.load(Ordering::SeqCst);
        // SAFETY: from `lock_exclusive` on this thread.
        unsafe { lock.unlock_exclusive(w) };
        victim.join().unwrap();
        bad
    });
    assert!(
        !bad,
        "a reader that saw the bias before a revocation read during the write"
    );
    assert!(entered.into_inner(), "the reader never got in");
    assert!(!lock.is_locked());
}

/// BRAVO: a writer must wait for a reader inside on the fast path (the slot
/// it published), however long that reader stays.
fn bravo_writer_waits_for_fast_reader<L: RawRwLock + Sync>() {
    let lock = Bravo::<L>::INIT;
    // A first (slow) read turns the bias on; the second reads fast.
    let g = lock.lock_shared();
    // SAFETY: from `lock_shared` on this thread.
    unsafe { lock.unlock_shared(g) };
    let r = lock.lock_shared();
    assert!(matches!(r, BravoShared::Fast(_)), "{r:?}");
    let wrote = AtomicBool::new(false);
    std::thread::scope(|sc| {
        let (lock, wrote) = (&lock, &wrote);
        sc.spawn(move || {
            let w = lock.lock_exclusive();
            wrote.store(true, Ordering::SeqCst);
            // SAFETY: from `lock_exclusive` on this thread.
            unsafe { lock.unlock_exclusive(w) };
        });
        // The writer has time to (wrongly) get in while we read.
        let until = Instant::now() + Duration::from_millis(300);
        while !wrote.load(Ordering::SeqCst) && Instant::now() < until {
            std::thread::yield_now();
        }
        let early = wrote.load(Ordering::SeqCst);
        // SAFETY: from `lock_shared` on this thread.
        unsafe { lock.unlock_shared(r) };
        assert!(!early, "a writer got in beside a fast-path reader");
    });
    assert!(wrote.into_inner(), "the writer never got in");
    assert!(!lock.is_biased(), "the writer revoked the bias");
}

macro_rules! bravo_suite {
    ($($name:ident: $l:ty;)*) => {$(
        mod $name {
            use super::*;
            #[test]
            fn biased_readers_exclude_writers() { bravo_biased_exclusion::<$l>() }
            #[test]
            fn writer_not_starved_by_biased_readers() { not_starved::<Bravo<$l>>(true) }
            #[test]
            fn writer_waits_for_fast_reader() { bravo_writer_waits_for_fast_reader::<$l>() }
            #[test]
            fn reader_stalled_before_publishing_waits_for_writer() {
                bravo_reader_stalled_before_publishing::<$l>()
            }
            #[test]
            fn upgraders_exclude_writers_beside_biased_readers() {
                bravo_upgrade_exclusion::<$l>()
            }
        }
    )*};
}

bravo_suite! {
    bravo_tas_b: RwTasB;
    bravo_smart_q: RwSmartQ;
    bravo_native: RwNative;
}
