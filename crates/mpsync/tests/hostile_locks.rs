//! Hostile users of every lock, reader-writer lock, condition variable and
//! barrier: what a caller can do through the safe API (and the documented
//! unsafe `force_unlock`), at every edge, must never cause UB and never hang
//! a thread that did nothing wrong.
//!
//! Table-driven: a lock joins every test by one line in `mutexes!` (with its
//! attempts: `timed` for a `RawMutexTimed` lock, `untimed` otherwise), a
//! reader-writer lock in `rwlocks!`, a barrier in `barriers!`.
//!
//! - **Storms**: two threads hammer `try_lock` — and, for a timed lock,
//!   `try_lock_for(0)`, `try_lock_until` an instant gone by, 1 µs timeouts —
//!   beside a thread that locks without a timeout, for `MPSYNC_HOSTILE_STORM_MS`
//!   (default 150 ms). Every section checks mutual exclusion; an untimed `lock()`
//!   must complete within [`BOUND`] while the storm runs and after it stops;
//!   afterwards, with nobody holding it, the lock must read free and `try_lock`
//!   must get it. The same for reader-writer locks (`try_read`, `try_write`,
//!   `try_upgradable_read`, `try_upgrade`; none of mpsync's RW locks offers
//!   timed acquisitions, so these are their edges) and for condition variables
//!   (`wait_timeout(0)`, `wait_until` a past instant, beside notifiers).
//! - **Forgotten guards** (`mem::forget`, on a thread that then exits): the
//!   lock stays held (attempts on it fail, none hangs), and dropping it and
//!   making a new lock at the same address gives a lock that works. Forgetting
//!   a guard of a no-preempt lock also leaves its thread's no-preempt request
//!   raised until the thread exits (the next owner of its context block starts
//!   afresh). lock_api's `force_unlock` takes the raw guard of the acquisition
//!   (`raw().lock()`), so it is exactly `unlock`: tested as such; a forgotten
//!   `MutexGuard` cannot be force-unlocked, its raw guard went with it.
//! - **Panics** inside a critical section (and inside a condvar's condition):
//!   the guard unwinds, the lock is released, a waiter gets it, the
//!   panicking thread's no-preempt depth is back to 0 (lock_api has no
//!   poisoning: the data is as the section left it).
//! - **fork** while another thread holds the lock and a third waits for it: the
//!   child, a copy of the forking thread only, uses a fresh lock of the same type
//!   (lock, `try_lock`, the timed attempts, unlock). What it cannot do: take a
//!   lock that was held or waited for at the fork — its holder does not exist
//!   in the child, so `lock()` waits forever (`try_lock` answers `None`, checked)
//!   — nor start threads that use mpsync if another thread may have been
//!   registering with `sched` at the fork (its registry lock would be held by a
//!   thread the child does not have). No trap is armed in this file: a child
//!   forked while a trap registry lock is held would block at its first stall
//!   point (see `sched::stall`).
//! - **Barriers**: a participant that panics instead of arriving leaves the
//!   others waiting — a barrier's contract: the episode needs all `n` — and
//!   nobody is released early; a thread that takes over its id lets the episode
//!   finish, and the barrier keeps working. An id out of range panics before
//!   arriving (it is not counted).
//!
//! Every wait for threads is bounded: a hang fails with a message.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::sync::{Arc, Mutex as StdMutex};
use std::thread;
use std::time::{Duration, Instant};

use lock_api::{
    RawMutex, RawMutexTimed, RawRwLockDowngrade, RawRwLockTimed, RawRwLockUpgrade,
    RwLockUpgradableReadGuard, RwLockWriteGuard,
};
use mpsync::barrier::{
    Barrier, Central, CombiningTree, Dissemination, McsTree, ScalableSc, WaitMode,
};
use mpsync::lock::{
    Anderson, BoundedSteal, Clh, ClhTp, Condvar, McsTp, Native, NativeNp, Np, Queued,
    QueuedHandshaking, QueuedNp, SmartQ, SpinThenPark, Tas, TasB, TasBNp, Ticket, TicketNp,
    TicketSplit,
};
use mpsync::rwlock::{Bravo, RwNative, RwNativeNp, RwNp, RwQueued, RwSmartQ, RwTasB, RwTasBNp};
use mpsync::{lock::Mutex, lock::MutexGuard, rwlock::RwLock, sched};

/// How long a thread that should finish in well under a second may take
/// before the test calls it stuck (generous: the chaos build on a loaded
/// 2-core machine runs many times slower).
const BOUND: Duration = Duration::from_secs(30);

/// How long each storm lasts (`MPSYNC_HOSTILE_STORM_MS`, default 150 ms).
fn storm_time() -> Duration {
    Duration::from_millis(
        std::env::var("MPSYNC_HOSTILE_STORM_MS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(150),
    )
}

/// Runs `f` on a detached thread; `None` if it has not returned within
/// `bound` (the thread is left behind: the test fails anyway). A panic in
/// `f` is passed on.
fn within<R: Send + 'static>(bound: Duration, f: impl FnOnce() -> R + Send + 'static) -> Option<R> {
    let (tx, rx) = channel();
    thread::spawn(move || {
        let r = catch_unwind(AssertUnwindSafe(f));
        let _ = tx.send(r);
    });
    match rx.recv_timeout(bound) {
        Ok(Ok(r)) => Some(r),
        Ok(Err(p)) => resume_unwind(p),
        Err(RecvTimeoutError::Timeout) => None,
        Err(RecvTimeoutError::Disconnected) => unreachable!("the thread always sends"),
    }
}

/// [`within`] [`BOUND`], or a failure that says what did not finish.
#[track_caller]
fn finishes<R: Send + 'static>(what: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    within(BOUND, f).unwrap_or_else(|| panic!("{what}: not finished within {BOUND:?}"))
}

/// The rest of a storm whose `threads` run until `stop`: lets it run for
/// [`storm_time`], then `probe` (an untimed acquisition) must complete within
/// [`BOUND`] while it still runs; then it stops, and its threads must leave
/// within [`BOUND`] (none stuck in the lock).
fn run_storm(
    name: &str,
    stop: &AtomicBool,
    threads: Vec<thread::JoinHandle<()>>,
    probe: impl FnOnce() + Send + 'static,
) {
    thread::sleep(storm_time());
    let during = within(BOUND, probe);
    stop.store(true, SeqCst);
    assert!(
        during.is_some(),
        "{name}: an untimed acquisition did not complete within {BOUND:?} while the storm ran"
    );
    let joined = within(BOUND, move || {
        for t in threads {
            t.join().unwrap();
        }
    });
    assert!(
        joined.is_some(),
        "{name}: the storm's threads did not stop within {BOUND:?} after it ended (one is stuck in the lock)"
    );
}

/// A panic that does not print (`resume_unwind` skips the panic hook): the
/// expected panics of this file stay out of the test output.
fn quiet_panic() -> ! {
    resume_unwind(Box::new("a hostile user's panic"))
}

/// An instant that has passed.
fn past() -> Instant {
    let now = Instant::now();
    now.checked_sub(Duration::from_millis(1)).unwrap_or(now)
}

// --- mutual exclusion ------------------------------------------------------------

/// A lock and what its sections check.
struct Arena<L: RawMutex> {
    m: Mutex<L, u64>,
    inside: AtomicBool,
    stop: AtomicBool,
}

impl<L: RawMutex> Arena<L> {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            m: Mutex::new(0),
            inside: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        })
    }

    /// A critical section: nobody else inside, the count moves.
    fn section(&self, g: &mut MutexGuard<'_, L, u64>) {
        assert!(
            !self.inside.swap(true, SeqCst),
            "two threads inside the lock"
        );
        **g += 1;
        self.inside.store(false, SeqCst);
    }
}

/// One hostile attempt `k` at a lock: a `try_lock`, or a timed attempt with a
/// zero, past or tiny timeout.
type Attempt<L> = for<'a> fn(&'a Mutex<L, u64>, u64) -> Option<MutexGuard<'a, L, u64>>;

/// The attempts of a lock without timed acquisition.
fn untimed_edges<L: RawMutex>(m: &Mutex<L, u64>, _k: u64) -> Option<MutexGuard<'_, L, u64>> {
    m.try_lock()
}

/// The attempts of a timed lock: every edge of `RawMutexTimed`, and
/// `try_lock`. Attempts `k < 1 << 32` give up at once (a zero or past
/// deadline: the storm of the one thread that uses them has nobody who
/// waits even briefly, and so helps the lock along); the others mix in tiny
/// timeouts and `try_lock`.
fn timed_edges<L>(m: &Mutex<L, u64>, k: u64) -> Option<MutexGuard<'_, L, u64>>
where
    L: RawMutexTimed<Duration = Duration, Instant = Instant>,
{
    match (k >> 32 != 0, k % 6) {
        (false, 0 | 2 | 4) => m.try_lock_for(Duration::ZERO),
        (false, 1 | 5) => m.try_lock_until(past()),
        (false, _) => m.try_lock_until(Instant::now()),
        (true, 0) => m.try_lock_for(Duration::ZERO),
        (true, 1) => m.try_lock_until(past()),
        (true, 2) => m.try_lock_for(Duration::from_nanos(1)),
        (true, 3) => m.try_lock_for(Duration::from_micros(1)),
        (true, 4) => m.try_lock_for(Duration::from_micros(20)),
        _ => m.try_lock(),
    }
}

/// Two threads storm the lock with `attempt` beside one untimed locker; an
/// untimed `lock()` must complete while the storm runs and after; then the
/// lock, held by nobody, must read free.
fn storm<L: RawMutex + Send + Sync + 'static>(name: &str, attempt: Attempt<L>) {
    sched::current(); // registered before the threads start
    let a = Arena::<L>::new();
    let mut threads = Vec::new();
    for t in 0..2 {
        let a = a.clone();
        threads.push(thread::spawn(move || {
            // Thread 0 only gives up at once; thread 1 mixes (see the edges).
            let mut k = t << 32;
            while !a.stop.load(SeqCst) {
                k += 1;
                if let Some(mut g) = attempt(&a.m, k) {
                    a.section(&mut g);
                }
            }
        }));
    }
    {
        let a = a.clone();
        threads.push(thread::spawn(move || {
            while !a.stop.load(SeqCst) {
                a.section(&mut a.m.lock());
            }
        }));
    }
    let probe = a.clone();
    run_storm(name, &a.stop, threads, move || {
        probe.section(&mut probe.m.lock())
    });
    assert!(
        !a.m.is_locked(),
        "{name}: the lock reads held after the storm, with nobody holding it"
    );
    assert!(
        a.m.try_lock().is_some(),
        "{name}: try_lock fails after the storm, with nobody holding the lock"
    );
    let after = a.clone();
    finishes(
        &format!("{name}: an untimed lock() after the storm"),
        move || after.section(&mut after.m.lock()),
    );
    assert_eq!(sched::current().depth(), 0);
}

/// Puts `new` where the lock in `place` (held by a forgotten guard) is:
/// drops the old lock in place, or (`moved`) moves it out first — the
/// forgotten guard's borrow is over — and returns it, for the caller to use
/// and drop later.
fn new_lock_in_place<T>(place: &mut T, new: T, moved: bool) -> Option<T> {
    let addr = place as *const T as usize;
    let old = if moved {
        Some(std::mem::replace(place, new))
    } else {
        *place = new;
        None
    };
    assert_eq!(place as *const T as usize, addr);
    old
}

/// A guard forgotten on a thread that then exits: the lock stays held (every
/// attempt fails, none hangs); a new lock is made at its address — the old
/// one dropped there, or moved away (and still held) — and works here and
/// on another thread. Then `force_unlock` with the raw guard of the
/// acquisition.
fn forgotten_guard<L: RawMutex + Send + Sync + 'static>(name: &str, attempt: Attempt<L>) {
    for moved in [false, true] {
        let mut m: Box<Mutex<L, u64>> = Box::new(Mutex::new(0));
        thread::scope(|s| {
            let m = &*m;
            s.spawn(move || std::mem::forget(m.lock()));
        });
        assert!(m.is_locked(), "{name}: a forgotten guard's lock reads free");
        for k in 0..60 {
            assert!(
                attempt(&m, k).is_none(),
                "{name}: attempt {k} got a lock whose guard was forgotten"
            );
        }
        let old = new_lock_in_place(&mut *m, Mutex::new(1), moved);
        assert!(
            !m.is_locked(),
            "{name}: a new lock reads held (moved: {moved})"
        );
        *m.lock() += 1;
        let m: &'static Mutex<L, u64> = Box::leak(m);
        finishes(
            &format!("{name}: lock() of the new lock, from another thread (moved: {moved})"),
            move || *m.lock() += 1,
        );
        assert_eq!(*m.lock(), 3);
        if let Some(old) = old {
            assert!(
                old.try_lock().is_none(),
                "{name}: the moved lock lost its holder"
            );
        }
        if moved {
            force_unlock_round_trip(name, m);
        }
    }
}

/// lock_api's `force_unlock`: the raw guard of the acquisition, kept by hand.
fn force_unlock_round_trip<L: RawMutex + Send + Sync + 'static>(
    name: &str,
    m: &'static Mutex<L, u64>,
) {
    // lock_api's force_unlock: the raw guard of the acquisition, kept by hand.
    // SAFETY: raw access only to lock and release; no guard is alive.
    let g = unsafe { m.raw() }.lock();
    assert!(m.try_lock().is_none());
    // SAFETY: `g` is this acquisition's raw guard, taken on this thread; no
    // MutexGuard refers to it.
    unsafe { m.force_unlock(g) };
    finishes(&format!("{name}: lock() after force_unlock"), move || {
        *m.lock() += 1
    });
    assert!(!m.is_locked());
    assert_eq!(sched::current().depth(), 0);
}

/// A thread takes a lock in `hold` — which calls its argument once it holds
/// it (that lets `wait` start waiting) — and panics inside its section. The
/// guard unwinds: the waiter must get the lock within [`BOUND`], and the
/// panicking thread's no-preempt depth must be 0 again.
fn panic_while_waited_for(
    what: &str,
    hold: impl FnOnce(&dyn Fn()) + Send + 'static,
    wait: impl FnOnce() + Send + 'static,
) {
    let (held, held_rx) = channel::<()>();
    let holder = thread::spawn(move || {
        let r = catch_unwind(AssertUnwindSafe(|| {
            hold(&|| {
                held.send(()).unwrap();
                thread::sleep(Duration::from_millis(5)); // the waiter queues
            });
            unreachable!("`hold` panics")
        }));
        assert!(r.is_err());
        sched::current().depth()
    });
    held_rx.recv_timeout(BOUND).expect("the holder locks");
    finishes(
        &format!("{what}: a waiter behind a section that panicked"),
        wait,
    );
    assert_eq!(
        holder.join().unwrap(),
        0,
        "{what}: the no-preempt depth after the unwind"
    );
}

/// A panic inside a critical section, while another thread waits for the
/// lock (see [`panic_while_waited_for`]). And a panic right after a timed
/// acquisition: the lock is free after.
fn panic_in_section<L: RawMutex + Send + Sync + 'static>(name: &str, attempt: Attempt<L>) {
    let m: &'static Mutex<L, u64> = Box::leak(Box::new(Mutex::new(0)));
    panic_while_waited_for(
        name,
        move |held| {
            let mut g = m.lock();
            *g += 1;
            held();
            quiet_panic()
        },
        move || *m.lock() += 1,
    );
    let r = catch_unwind(AssertUnwindSafe(|| {
        let mut k = 0;
        let mut g = loop {
            k += 1;
            if let Some(g) = attempt(m, k) {
                break g;
            }
        };
        *g += 1;
        quiet_panic()
    }));
    assert!(r.is_err());
    assert!(
        !m.is_locked(),
        "{name}: held after a panic unwound its guard"
    );
    assert_eq!(*m.lock(), 3);
    assert_eq!(sched::current().depth(), 0);
}

/// Serializes this file's forks (a child copies whatever other threads hold).
static FORK: StdMutex<()> = StdMutex::new(());

/// Forks; the child runs `child` (only async-signal-safe-ish work: no
/// printing, no threads) and `_exit`s; its error comes back through a pipe.
/// `Err` with the child's message, or with why it did not finish in time.
fn in_child(child: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid out-array of two ints.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    // SAFETY: the child only runs `child` (no locks but its own fresh ones,
    // no allocation beyond glibc's fork-safe malloc) and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: plain prctl; a child never outlives a test that failed.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        let code = match catch_unwind(AssertUnwindSafe(child)) {
            Ok(Ok(())) => 0,
            Ok(Err(msg)) => {
                // SAFETY: writes the bytes of `msg` to our end of the pipe.
                unsafe { libc::write(fds[1], msg.as_ptr().cast(), msg.len()) };
                1
            }
            Err(_) => 2,
        };
        // SAFETY: leaving the child without the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    // SAFETY: our copy of the write end; closing it lets the read see EOF.
    unsafe { libc::close(fds[1]) };
    let start = Instant::now();
    let mut status = 0;
    let done = loop {
        // SAFETY: waiting for our own child, without blocking.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            break true;
        }
        if start.elapsed() > BOUND {
            // SAFETY: our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            break false;
        }
        thread::sleep(Duration::from_millis(1));
    };
    let mut buf = [0u8; 512];
    // SAFETY: reads into `buf`; the child's end is closed (it exited).
    let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: our read end.
    unsafe { libc::close(fds[0]) };
    let msg = String::from_utf8_lossy(&buf[..n.max(0) as usize]).into_owned();
    if !done {
        return Err(format!(
            "the child had not finished after {BOUND:?} (killed)"
        ));
    }
    match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
        (true, 0) => Ok(()),
        (true, 1) => Err(msg),
        _ => Err(format!("the child panicked or died (status {status:#x})")),
    }
}

/// Forks while one thread holds a lock — `hold` takes it, calls its argument
/// (which returns when the fork is over), and releases it — and another
/// waits for it (`wait`); the child runs `child`. Returns what the waiter
/// returned once it got the lock.
fn fork_beside_holder<R: Send + 'static>(
    name: &str,
    hold: impl FnOnce(&dyn Fn()) + Send + 'static,
    wait: impl FnOnce() -> R + Send + 'static,
    child: impl FnOnce() -> Result<(), String>,
) -> R {
    let _serial = FORK.lock().unwrap_or_else(|e| e.into_inner());
    // Decided once per process (the eBPF program loaded, or not): a fork
    // while it loads is `sched`'s business, not this test's.
    let _ = sched::native::preemption_answers();
    sched::current();
    let (locked, locked_rx) = channel::<()>();
    let (release, release_rx) = channel::<()>();
    let holder = thread::spawn(move || {
        hold(&|| {
            locked.send(()).unwrap();
            let _ = release_rx.recv();
        })
    });
    locked_rx.recv_timeout(BOUND).expect("the holder locks");
    let waiter = thread::spawn(wait);
    thread::sleep(Duration::from_millis(2)); // the waiter waits
    let r = in_child(child);
    release.send(()).unwrap();
    holder.join().unwrap();
    let got = finishes(&format!("{name}: the waiter after the fork"), move || {
        waiter.join().unwrap()
    });
    if let Err(e) = r {
        panic!("{name}: in a child forked while the lock was held and waited for: {e}");
    }
    got
}

/// Every edge attempt of the storms, once: the six given-up-at-once ones,
/// then the six mixed ones (see [`timed_edges`]).
fn every_edge() -> impl Iterator<Item = u64> {
    (0..6).chain((1 << 32)..(1 << 32) + 6)
}

/// Forks while one thread holds a lock and another waits for it; the child
/// uses a fresh lock of the same type — every attempt on it fails while it is
/// held and succeeds while it is free — and `try_lock` on the held one.
fn fork_while_held<L: RawMutex + Send + Sync + 'static>(name: &str, attempt: Attempt<L>) {
    let held: &'static Mutex<L, u64> = Box::leak(Box::new(Mutex::new(0)));
    fork_beside_holder(
        name,
        move |during_the_fork| {
            let mut g = held.lock();
            *g += 1;
            during_the_fork();
        },
        move || *held.lock() += 1,
        move || {
            if held.try_lock().is_some() {
                return Err("try_lock got the lock held at the fork".into());
            }
            let fresh: Mutex<L, u64> = Mutex::new(0);
            for k in every_edge() {
                let mut g = fresh.lock();
                *g += 1;
                if attempt(&fresh, k).is_some() {
                    return Err(format!("attempt {k} got the fresh lock while it was held"));
                }
                drop(g);
                match attempt(&fresh, k) {
                    Some(mut g) => *g += 1,
                    None => return Err(format!("attempt {k} failed on the fresh lock, free")),
                }
            }
            if fresh.is_locked() || *fresh.lock() != 24 {
                return Err("the fresh lock ended held or miscounted".into());
            }
            Ok(())
        },
    );
    assert_eq!(*held.lock(), 2);
}

// --- condition variables ---------------------------------------------------------

/// Zero and past timed waits storm a condvar beside notifiers and an untimed
/// locker; the lock must stay usable, and a waiter afterwards must be woken.
fn condvar_storm<L: RawMutex + Send + Sync + 'static>(name: &str) {
    sched::current();
    let a = Arena::<L>::new();
    let cv: &'static Condvar = Box::leak(Box::new(Condvar::new()));
    let mut threads = Vec::new();
    for t in 0..2 {
        let a = a.clone();
        threads.push(thread::spawn(move || {
            while !a.stop.load(SeqCst) {
                let mut g = a.m.lock();
                let _ = if t == 0 {
                    cv.wait_timeout(&mut g, Duration::ZERO)
                } else {
                    cv.wait_until(&mut g, past())
                };
                a.section(&mut g);
                let _ = cv.wait_timeout_while(&mut g, Duration::ZERO, |_| true);
                a.section(&mut g);
            }
        }));
    }
    {
        let a = a.clone();
        threads.push(thread::spawn(move || {
            let mut k = 0u64;
            while !a.stop.load(SeqCst) {
                k += 1;
                if k.is_multiple_of(2) {
                    cv.notify_one();
                } else {
                    cv.notify_all();
                }
                a.section(&mut a.m.lock());
            }
        }));
    }
    let probe = a.clone();
    let what = format!("{name} (zero and past condvar waits)");
    run_storm(&what, &a.stop, threads, move || {
        probe.section(&mut probe.m.lock())
    });
    assert!(
        !a.m.is_locked(),
        "{name}: the lock reads held after the condvar storm"
    );
    // A real wait still gets its notification.
    let w = a.clone();
    let waiter = thread::spawn(move || {
        let mut g = w.m.lock();
        let r = cv.wait_timeout_while(&mut g, BOUND, |v| *v != u64::MAX);
        !r.timed_out()
    });
    let start = Instant::now();
    while !waiter.is_finished() && start.elapsed() < BOUND {
        *a.m.lock() = u64::MAX;
        cv.notify_all();
        thread::sleep(Duration::from_millis(1));
    }
    assert!(
        waiter.join().unwrap(),
        "{name}: a waiter was not woken after the condvar storm"
    );
    let s = format!("{cv:?}");
    assert!(
        s.contains("waiters: 0"),
        "{name}: waiters left counted: {s}"
    );
}

/// A panic inside a condvar's condition, before and after a wait: the mutex
/// is released by the unwinding guard and the condvar counts nobody waiting.
fn condvar_panic_in_condition<L: RawMutex + Send + Sync + 'static>(name: &str) {
    let m: Mutex<L, u32> = Mutex::new(0);
    let cv = Condvar::new();
    for panic_at in [1, 2] {
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut g = m.lock();
            let mut calls = 0;
            cv.wait_timeout_while(&mut g, Duration::from_millis(1), |_| {
                calls += 1;
                if calls == panic_at {
                    quiet_panic()
                }
                true
            })
        }));
        assert!(r.is_err());
        assert!(
            !m.is_locked(),
            "{name}: held after a panic in a condvar's condition"
        );
        let s = format!("{cv:?}");
        assert!(
            s.contains("waiters: 0"),
            "{name}: {s} after a panic in the condition"
        );
    }
    *m.lock() += 1;
    assert_eq!(sched::current().depth(), 0);
}

macro_rules! mutexes {
    ($($name:ident: $l:ty => $edges:ident;)*) => {$(
        mod $name {
            use super::*;
            const NAME: &str = stringify!($name);
            #[test]
            fn storm_beside_untimed_lockers() { storm::<$l>(NAME, $edges::<$l>) }
            #[test]
            fn forgotten_guard_then_a_new_lock_at_its_address() {
                forgotten_guard::<$l>(NAME, $edges::<$l>)
            }
            #[test]
            fn panic_inside_a_critical_section() { panic_in_section::<$l>(NAME, $edges::<$l>) }
            #[test]
            fn fork_while_held_and_waited_for() { fork_while_held::<$l>(NAME, $edges::<$l>) }
            #[test]
            fn condvar_zero_and_past_waits_storm() { condvar_storm::<$l>(NAME) }
            #[test]
            fn condvar_panic_in_the_condition() { condvar_panic_in_condition::<$l>(NAME) }
        }
    )*};
}

mutexes! {
    tas: Tas => timed_edges;
    tas_b: TasB => timed_edges;
    tas_b_np: TasBNp => timed_edges;
    ticket: Ticket => untimed_edges;
    ticket_split: TicketSplit => untimed_edges;
    ticket_np: TicketNp => timed_edges;
    anderson: Anderson => untimed_edges;
    queued: Queued => untimed_edges;
    queued_np: QueuedNp => untimed_edges;
    smart_q: SmartQ => timed_edges;
    handshaking: QueuedHandshaking => timed_edges;
    mcs_tp: McsTp => timed_edges;
    np_mcs_tp: Np<McsTp> => timed_edges;
    clh: Clh => untimed_edges;
    clh_tp: ClhTp => timed_edges;
    np_clh_tp: Np<ClhTp> => timed_edges;
    spin_then_park: SpinThenPark => timed_edges;
    native: Native => timed_edges;
    native_np: NativeNp => timed_edges;
    bounded_steal: BoundedSteal => timed_edges;
    np_bounded_steal: Np<BoundedSteal> => timed_edges;
}

// --- reader-writer locks ---------------------------------------------------------

/// A reader-writer lock and what its sections check.
struct RwArena<L: RawRwLockUpgrade> {
    l: RwLock<L, u64>,
    readers: AtomicU32,
    writer: AtomicBool,
    upgradable: AtomicBool,
    stop: AtomicBool,
}

impl<L: RawRwLockUpgrade> RwArena<L> {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            l: RwLock::new(0),
            readers: AtomicU32::new(0),
            writer: AtomicBool::new(false),
            upgradable: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        })
    }

    /// A read section, long enough (a few hundred spins) that a writer let
    /// in beside it is seen.
    fn read(&self, v: &u64) {
        self.readers.fetch_add(1, SeqCst);
        for _ in 0..256 {
            assert!(!self.writer.load(SeqCst), "a reader beside a writer");
            std::hint::black_box(*v);
        }
        self.readers.fetch_sub(1, SeqCst);
    }

    fn write(&self, v: &mut u64) {
        assert!(!self.writer.swap(true, SeqCst), "two writers");
        assert_eq!(self.readers.load(SeqCst), 0, "a writer beside a reader");
        assert!(
            !self.upgradable.load(SeqCst),
            "a writer beside an upgradable reader"
        );
        *v += 1;
        self.writer.store(false, SeqCst);
    }

    /// An upgradable section, then (`up`) its upgrade, blocking or tried.
    fn upgradable<'a>(&self, g: RwLockUpgradableReadGuard<'a, L, u64>, up: u64) {
        assert!(
            !self.upgradable.swap(true, SeqCst),
            "two upgradable readers"
        );
        self.read(&g);
        let g = match up % 3 {
            0 => {
                self.upgradable.store(false, SeqCst);
                return;
            }
            1 => match RwLockUpgradableReadGuard::try_upgrade(g) {
                Ok(w) => w,
                Err(_) => {
                    self.upgradable.store(false, SeqCst);
                    return;
                }
            },
            _ => RwLockUpgradableReadGuard::upgrade(g),
        };
        self.upgradable.store(false, SeqCst);
        let mut g = g;
        self.write(&mut g);
    }

    /// One attempt `k` of every non-blocking kind.
    fn attempt(&self, k: u64) {
        match k % 3 {
            0 => {
                if let Some(g) = self.l.try_read() {
                    self.read(&g)
                }
            }
            1 => {
                if let Some(mut g) = self.l.try_write() {
                    self.write(&mut g)
                }
            }
            _ => {
                if let Some(g) = self.l.try_upgradable_read() {
                    self.upgradable(g, k / 3 % 2) // kept, or a try_upgrade
                }
            }
        }
    }

    /// One blocking acquisition `k` of every kind.
    fn blocking(&self, k: u64) {
        match k % 3 {
            0 => self.read(&self.l.read()),
            1 => self.write(&mut self.l.write()),
            _ => self.upgradable(self.l.upgradable_read(), k / 3),
        }
    }
}

/// `try_*` storms beside blocking readers, writers and upgraders; blocking
/// acquisitions of every kind complete during and after; the lock ends free.
fn rw_storm<L: RawRwLockUpgrade + Send + Sync + 'static>(name: &str) {
    sched::current();
    let a = RwArena::<L>::new();
    let mut threads = Vec::new();
    for t in 0..3u64 {
        let a = a.clone();
        threads.push(thread::spawn(move || {
            let mut k = t;
            while !a.stop.load(SeqCst) {
                k += 1;
                if t < 2 { a.attempt(k) } else { a.blocking(k) }
            }
        }));
    }
    let probe = a.clone();
    run_storm(name, &a.stop, threads, move || {
        for k in 0..3 {
            probe.blocking(k) // a read, a write, an upgrade
        }
    });
    assert!(
        !a.l.is_locked(),
        "{name}: reads held after the storm, with nobody holding it"
    );
    assert!(
        a.l.try_write().is_some(),
        "{name}: try_write fails on a free lock"
    );
    let after = a.clone();
    finishes(
        &format!("{name}: blocking acquisitions after the storm"),
        move || {
            for k in 0..6 {
                after.blocking(k)
            }
        },
    );
    assert_eq!(sched::current().depth(), 0);
}

/// Which guard a test forgets.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Read,
    Write,
    Upgradable,
}

/// A guard of each kind forgotten (after a read that may bias the lock, on
/// a thread that then exits): the lock refuses writers (a `try_write`, which
/// may turn a bias off), nothing hangs; a new lock at its address works.
fn rw_forgotten_guard<L: RawRwLockUpgrade + Send + Sync + 'static>(name: &str) {
    for (kind, moved) in [Kind::Read, Kind::Write, Kind::Upgradable]
        .into_iter()
        .flat_map(|k| [(k, false), (k, true)])
    {
        let mut l: Box<RwLock<L, u64>> = Box::new(RwLock::new(0));
        drop(l.read()); // a reader-biased lock turns its bias on here
        thread::scope(|s| {
            let l = &*l;
            s.spawn(move || match kind {
                Kind::Read => std::mem::forget(l.read()),
                Kind::Write => std::mem::forget(l.write()),
                Kind::Upgradable => std::mem::forget(l.upgradable_read()),
            });
        });
        assert!(
            l.is_locked(),
            "{name}: a forgotten {kind:?} guard's lock reads free"
        );
        assert!(
            l.try_write().is_none(),
            "{name}: a writer beside a forgotten {kind:?} guard"
        );
        assert!(
            l.try_upgradable_read().is_none() || !matches!(kind, Kind::Write | Kind::Upgradable),
            "{name}: an upgradable reader beside a forgotten {kind:?} guard"
        );
        let old = new_lock_in_place(&mut *l, RwLock::new(1), moved);
        assert!(
            !l.is_locked(),
            "{name}: a new lock where one with a forgotten {kind:?} guard was reads held (moved: {moved})"
        );
        drop(l.read()); // biases the new lock, if the type does
        let l: &'static RwLock<L, u64> = Box::leak(l);
        finishes(
            &format!(
                "{name}: write() of a new lock where one with a forgotten {kind:?} guard was (moved: {moved})"
            ),
            move || *l.write() += 1,
        );
        assert!(
            l.try_write().is_some(),
            "{name}: try_write on the new lock ({kind:?}, moved: {moved})"
        );
        assert_eq!(*l.read(), 2);
        if let Some(old) = old {
            assert!(
                old.try_write().is_none(),
                "{name}: a writer of the moved lock beside its forgotten {kind:?} guard"
            );
        }
    }
    assert_eq!(sched::current().depth(), 0);
}

/// Panics inside read, write and upgradable sections (and after an
/// upgrade), with a writer waiting: every guard unwinds; the lock is free.
fn rw_panic_in_section<L: RawRwLockUpgrade + Send + Sync + 'static>(name: &str) {
    let l: &'static RwLock<L, u64> = Box::leak(Box::new(RwLock::new(0)));
    for kind in 0..4 {
        panic_while_waited_for(
            &format!("{name} (section {kind})"),
            move |held| match kind {
                0 => {
                    let _g = l.read();
                    held();
                    quiet_panic()
                }
                1 => {
                    let mut g = l.write();
                    *g += 1;
                    held();
                    quiet_panic()
                }
                2 => {
                    let _g = l.upgradable_read();
                    held();
                    quiet_panic()
                }
                _ => {
                    let g = l.upgradable_read();
                    held();
                    let mut g = RwLockUpgradableReadGuard::upgrade(g);
                    *g += 1;
                    quiet_panic()
                }
            },
            move || *l.write() += 1,
        );
        assert!(
            !l.is_locked(),
            "{name}: held after a panic unwound its guard ({kind})"
        );
    }
    assert_eq!(*l.read(), 6);
}

/// Forks while one thread holds the lock for writing and another waits to
/// read; the child uses a fresh lock of the same type.
fn rw_fork_while_held<L: RawRwLockUpgrade + Send + Sync + 'static>(name: &str) {
    let held: &'static RwLock<L, u64> = Box::leak(Box::new(RwLock::new(0)));
    let seen = fork_beside_holder(
        name,
        move |during_the_fork| {
            let mut g = held.write();
            *g += 1;
            during_the_fork();
        },
        move || *held.read(),
        move || {
            if held.try_read().is_some() || held.try_write().is_some() {
                return Err("got the lock held for writing at the fork".into());
            }
            let fresh: RwLock<L, u64> = RwLock::new(0);
            for _ in 0..20 {
                let r1 = fresh.read();
                let r2 = fresh.try_read().ok_or("a second reader refused")?;
                if fresh.try_write().is_some() {
                    return Err("a writer beside readers".into());
                }
                drop((r1, r2));
                let u = fresh.upgradable_read();
                *RwLockUpgradableReadGuard::upgrade(u) += 1;
                *fresh
                    .try_write()
                    .ok_or("try_write on the free fresh lock")? += 1;
            }
            if fresh.is_locked() || *fresh.read() != 40 {
                return Err("the fresh lock ended held or miscounted".into());
            }
            Ok(())
        },
    );
    assert_eq!(seen, 1);
}

macro_rules! rwlocks {
    ($($name:ident: $l:ty;)*) => {$(
        mod $name {
            use super::*;
            const NAME: &str = stringify!($name);
            #[test]
            fn try_storm_beside_blocking_readers_and_writers() { rw_storm::<$l>(NAME) }
            #[test]
            fn forgotten_guards_then_a_new_lock_at_its_address() { rw_forgotten_guard::<$l>(NAME) }
            #[test]
            fn panic_inside_read_write_and_upgradable_sections() { rw_panic_in_section::<$l>(NAME) }
            #[test]
            fn fork_while_held_and_waited_for() { rw_fork_while_held::<$l>(NAME) }
        }
    )*};
}

rwlocks! {
    rw_tas_b: RwTasB;
    rw_tas_b_np: RwTasBNp;
    rw_queued: RwQueued;
    rw_np_queued: RwNp<RwQueued>;
    rw_smart_q: RwSmartQ;
    rw_native: RwNative;
    rw_native_np: RwNativeNp;
    bravo_rw_tas_b: Bravo<RwTasB>;
    bravo_rw_smart_q: Bravo<RwSmartQ>;
    bravo_rw_native: Bravo<RwNative>;
}

/// One timed attempt `k` (a zero, past, 1 ns, 1 µs or 20 µs read or write),
/// or a write downgraded to a read.
fn rw_timed_attempt<L>(a: &RwArena<L>, k: u64)
where
    L: RawRwLockUpgrade
        + RawRwLockDowngrade
        + RawRwLockTimed<Duration = Duration, Instant = Instant>,
{
    let t = match k / 2 % 5 {
        0 => None,
        1 => Some(Duration::from_nanos(1)),
        2 => Some(Duration::from_micros(1)),
        3 => Some(Duration::from_micros(20)),
        _ => Some(Duration::ZERO),
    };
    let r = |t: Option<Duration>| match t {
        Some(t) => a.l.try_read_for(t),
        None => a.l.try_read_until(past()),
    };
    let w = |t: Option<Duration>| match t {
        Some(t) => a.l.try_write_for(t),
        None => a.l.try_write_until(past()),
    };
    match k % 3 {
        0 => {
            if let Some(g) = r(t) {
                a.read(&g)
            }
        }
        1 => {
            if let Some(mut g) = w(t) {
                a.write(&mut g)
            }
        }
        _ => {
            if let Some(mut g) = w(t) {
                a.write(&mut g);
                // A writer let in beside the downgraded guard trips `read`'s
                // or its own checks.
                a.read(&RwLockWriteGuard::downgrade(g));
            }
        }
    }
}

/// Timed-attempt and downgrade storms beside blocking readers, writers and
/// upgraders: zero and past deadlines, tiny timeouts racing unlocks; blocking
/// acquisitions complete during and after; the lock ends free.
fn rw_timed_storm<L>(name: &str)
where
    L: RawRwLockUpgrade
        + RawRwLockDowngrade
        + RawRwLockTimed<Duration = Duration, Instant = Instant>
        + Send
        + Sync
        + 'static,
{
    sched::current();
    let a = RwArena::<L>::new();
    let mut threads = Vec::new();
    for t in 0..3u64 {
        let a = a.clone();
        threads.push(thread::spawn(move || {
            let mut k = t;
            while !a.stop.load(SeqCst) {
                k += 1;
                if t < 2 {
                    rw_timed_attempt(&a, k)
                } else {
                    a.blocking(k)
                }
            }
        }));
    }
    let probe = a.clone();
    run_storm(name, &a.stop, threads, move || {
        for k in 0..3 {
            probe.blocking(k)
        }
    });
    assert!(!a.l.is_locked(), "{name}: reads held after the timed storm");
    assert!(
        a.l.try_write().is_some(),
        "{name}: try_write fails on a free lock after the timed storm"
    );
    assert!(
        a.l.try_read().is_some(),
        "{name}: try_read fails on a free lock after the timed storm"
    );
    assert_eq!(sched::current().depth(), 0);
}

macro_rules! rw_timed_locks {
    ($($name:ident: $l:ty;)*) => {$(
        mod $name {
            use super::*;
            #[test]
            fn timed_and_downgrade_storm_beside_blocking_ones() {
                rw_timed_storm::<$l>(concat!(stringify!($name), " (timed)"))
            }
        }
    )*};
}

rw_timed_locks! {
    rw_timed_tas_b: RwTasB;
    rw_timed_tas_b_np: RwTasBNp;
    rw_timed_smart_q: RwSmartQ;
    rw_timed_native: RwNative;
    rw_timed_native_np: RwNativeNp;
    rw_timed_bravo_tas_b: Bravo<RwTasB>;
    rw_timed_bravo_smart_q: Bravo<RwSmartQ>;
}

// --- barriers --------------------------------------------------------------------

/// Participants of the barrier tests.
const N: usize = 3;

/// Participants 0 and 1 arrive; participant 2's thread panics instead, or
/// calls `wait` with an id out of range (which panics before arriving). The
/// two must not be released (the episode needs all `N`); a thread that takes
/// id 2 over releases them; a second episode with everyone works.
fn barrier_participant_panics(name: &str, make: fn() -> Box<dyn Barrier>) {
    for out_of_range in [false, true] {
        let b: Arc<dyn Barrier> = Arc::from(make());
        let released = Arc::new(AtomicU64::new(0));
        let mut threads = Vec::new();
        for id in 0..2 {
            let (b, released) = (b.clone(), released.clone());
            threads.push(thread::spawn(move || {
                for _ in 0..2 {
                    b.wait(id);
                    released.fetch_add(1, SeqCst);
                }
            }));
        }
        let b2 = b.clone();
        let r = thread::spawn(move || {
            catch_unwind(AssertUnwindSafe(|| {
                if out_of_range {
                    b2.wait(N); // panics: ids are 0..N
                }
                quiet_panic()
            }))
            .is_err()
        })
        .join()
        .unwrap();
        assert!(r, "{name}: the panicking participant did not panic");
        thread::sleep(Duration::from_millis(50));
        assert_eq!(
            released.load(SeqCst),
            0,
            "{name}: participants released without participant 2 (out of range: {out_of_range})"
        );
        // Another thread takes over id 2, for both episodes.
        let b3 = b.clone();
        threads.push(thread::spawn(move || {
            for _ in 0..2 {
                b3.wait(2);
            }
        }));
        finishes(
            &format!("{name}: the episodes once id 2 is taken over"),
            move || {
                for t in threads {
                    t.join().unwrap();
                }
            },
        );
        assert_eq!(released.load(SeqCst), 4);
    }
}

macro_rules! barriers {
    ($($name:ident: $make:expr;)*) => {$(
        #[test]
        fn $name() {
            barrier_participant_panics(stringify!($name), || Box::new($make));
        }
    )*};
}

mod barrier_participant_panics {
    use super::*;
    barriers! {
        central_spin: Central::new(N, WaitMode::Spin).unwrap();
        central_block: Central::new(N, WaitMode::Block).unwrap();
        central_heuristic: Central::new(N, WaitMode::HEURISTIC).unwrap();
        combining_tree_spin: CombiningTree::new(N, WaitMode::Spin).unwrap();
        combining_tree_heuristic: CombiningTree::new(N, WaitMode::HEURISTIC).unwrap();
        dissemination: Dissemination::new(N).unwrap();
        mcs_tree: McsTree::new(N).unwrap();
        scalable_sc: ScalableSc::new(N).unwrap();
    }
}
