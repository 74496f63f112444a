//! `park`/`unpark` on a 32-bit word: the Linux futex, the only place in mpsync
//! that calls it — `futex(2)` for one word, `futex_waitv(2)` for a sleep on
//! several ([`wait_any_shared`]). Under loom, a strict model of both (see
//! `wait`'s loom version).

use std::time::Duration;

use crate::sync::AtomicU32;

/// How a [`park`](super::park) ended. Either way the caller re-checks its condition:
/// wake-ups may be spurious.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParkResult {
    /// Woken by `unpark`, a signal, or spuriously.
    Woken,
    /// The word did not hold the expected value; did not sleep.
    Mismatch,
    /// The timeout passed.
    TimedOut,
}

#[cfg(not(loom))]
pub(crate) fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> ParkResult {
    wait_op(word, expected, timeout, libc::FUTEX_PRIVATE_FLAG)
}

/// [`wait`] on a word in memory shared between processes (no
/// `FUTEX_PRIVATE_FLAG`: the kernel keys the waiter by the physical page, so
/// a waker in another process that maps the same page finds it).
#[cfg(not(loom))]
pub(crate) fn wait_shared(
    word: &AtomicU32,
    expected: u32,
    timeout: Option<Duration>,
) -> ParkResult {
    wait_op(word, expected, timeout, 0)
}

#[cfg(not(loom))]
fn wait_op(
    word: &AtomicU32,
    expected: u32,
    timeout: Option<Duration>,
    private: libc::c_int,
) -> ParkResult {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned 32-bit atomic for the duration of the call;
    // FUTEX_WAIT only reads it; `ts_ptr` is null or points to a live timespec.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | private,
            expected,
            ts_ptr,
        )
    };
    if r == 0 {
        return ParkResult::Woken;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) => ParkResult::Mismatch,
        Some(libc::ETIMEDOUT) => ParkResult::TimedOut,
        _ => ParkResult::Woken, // EINTR: a signal (e.g. the pseudo-scheduler's)
    }
}

/// The most words [`wait_any_shared`] sleeps on (the kernel takes up to 128;
/// mpsync's callers need two, and a fixed array keeps the call allocation-free,
/// so that it works in a child of `fork` too).
pub(crate) const WAIT_ANY_MAX: usize = 8;

/// Whether some word no longer holds its expected value.
fn any_differs(words: &[(&AtomicU32, u32)]) -> bool {
    use crate::sync::Ordering;
    // Acquire: as the kernel's compare, which the waker's store precedes (the
    // futex hash-bucket lock orders them); the caller re-checks its own
    // condition after any return anyway.
    words.iter().any(|(w, e)| w.load(Ordering::Acquire) != *e)
}

/// One waiter of `futex_waitv(2)`: `struct futex_waitv` of `linux/futex.h`
/// (libc's has a private padding field and cannot be built by value).
#[cfg(not(loom))]
#[repr(C)]
#[derive(Clone, Copy)]
struct FutexWaitv {
    /// The value the word must hold for the caller to sleep.
    val: u64,
    /// The word's address.
    uaddr: u64,
    /// `FUTEX2_*` flags of this word.
    flags: u32,
    /// Must be 0.
    __reserved: u32,
}

/// `struct __kernel_timespec`: 64-bit seconds on every target (libc's
/// `timespec` has a 32-bit `time_t` on some 32-bit ones).
#[cfg(not(loom))]
#[repr(C)]
struct KernelTimespec {
    tv_sec: i64,
    tv_nsec: i64,
}

/// The flags of every word in a `futex_waitv`: a 32-bit word, and not
/// `FUTEX2_PRIVATE`: the words live in `MAP_SHARED` memory, so the kernel must
/// key each waiter by the word's page, or a wake from another process that
/// maps it (keyed that way) would not find it.
#[cfg(not(loom))]
const WAITV_FLAGS: u32 = libc::FUTEX2_SIZE_U32 as u32;

/// Set once `futex_waitv` answered ENOSYS (a kernel before 5.16) or EPERM (a
/// seccomp filter that does not know it): from then on every call takes the
/// fallback without trying the system call again.
#[cfg(not(loom))]
static WAITV_ABSENT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[cfg(all(test, not(loom)))]
thread_local! {
    /// Tests' switch: this thread (and a child it forks) takes the fallback.
    static FORCE_FALLBACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Makes the calling thread's [`wait_any_shared`] take the fallback (`true`)
/// or the system call where the kernel has it (`false`), so that tests
/// exercise both on any kernel.
#[cfg(all(test, not(loom)))]
pub(crate) fn force_fallback(on: bool) {
    FORCE_FALLBACK.with(|f| f.set(on));
}

/// Whether `futex_waitv` is known to be missing (or a test forced the
/// fallback). Under Miri, always: it interprets `futex(2)`, not `futex_waitv`.
#[cfg(not(loom))]
fn waitv_absent() -> bool {
    if cfg!(miri) {
        return true;
    }
    #[cfg(test)]
    if FORCE_FALLBACK.with(|f| f.get()) {
        return true;
    }
    // Relaxed: a hint; a thread that misses the store tries the system call
    // once more and gets ENOSYS again.
    WAITV_ABSENT.load(std::sync::atomic::Ordering::Relaxed)
}

/// Sleeps while every word of `words` holds its expected value, until one of
/// them is woken (by [`wake_shared`] from any process that maps it), a signal,
/// or `timeout`. 1 to [`WAIT_ANY_MAX`] words (the caller checked). See
/// [`crate::sched::park_shared_any`] for the contract.
#[cfg(not(loom))]
pub(crate) fn wait_any_shared(
    words: &[(&AtomicU32, u32)],
    timeout: Option<Duration>,
) -> ParkResult {
    debug_assert!((1..=WAIT_ANY_MAX).contains(&words.len()));
    if !waitv_absent()
        && let Some(r) = waitv(words, timeout)
    {
        return r;
    }
    wait_any_fallback(words, timeout)
}

/// `timeout` from now as an absolute `CLOCK_MONOTONIC` time (what
/// `futex_waitv` takes: a wait restarted after a signal handler — the emulated
/// scheduler's handlers are `SA_RESTART` — keeps its deadline). `None` when
/// it is beyond what the clock can represent: no limit.
#[cfg(not(loom))]
fn monotonic_deadline(timeout: Duration) -> Option<KernelTimespec> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a live, writable timespec; CLOCK_MONOTONIC always exists.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    debug_assert_eq!(r, 0, "clock_gettime(CLOCK_MONOTONIC)");
    let now = Duration::new(now.tv_sec as u64, now.tv_nsec as u32);
    let at = now.checked_add(timeout)?;
    Some(KernelTimespec {
        tv_sec: i64::try_from(at.as_secs()).ok()?,
        tv_nsec: i64::from(at.subsec_nanos()),
    })
}

/// [`wait_any_shared`] by `futex_waitv(2)`; `None` where the kernel has no
/// such call (then remembered in [`WAITV_ABSENT`]).
#[cfg(not(loom))]
fn waitv(words: &[(&AtomicU32, u32)], timeout: Option<Duration>) -> Option<ParkResult> {
    let mut v = [FutexWaitv {
        val: 0,
        uaddr: 0,
        flags: 0,
        __reserved: 0,
    }; WAIT_ANY_MAX];
    for (slot, (word, expected)) in v.iter_mut().zip(words) {
        *slot = FutexWaitv {
            val: u64::from(*expected),
            uaddr: word.as_ptr() as usize as u64,
            flags: WAITV_FLAGS,
            __reserved: 0,
        };
    }
    let ts = timeout.and_then(monotonic_deadline);
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const KernelTimespec);
    // SAFETY: `v[..words.len()]` are initialised waiters whose `uaddr` are
    // live, aligned 32-bit atomics borrowed for the duration of the call
    // (futex_waitv only reads them); `ts_ptr` is null or points to a live
    // `__kernel_timespec`; the flags argument must be 0.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex_waitv,
            v.as_ptr(),
            words.len() as libc::c_uint,
            0 as libc::c_uint,
            ts_ptr,
            libc::CLOCK_MONOTONIC,
        )
    };
    if r >= 0 {
        return Some(ParkResult::Woken); // `r` is the index of the word woken
    }
    let errno = std::io::Error::last_os_error().raw_os_error();
    Some(match errno {
        Some(libc::EAGAIN) => ParkResult::Mismatch, // a word differed: no sleep
        Some(libc::ETIMEDOUT) => ParkResult::TimedOut,
        Some(libc::ENOSYS | libc::EPERM) => {
            // Relaxed: see `waitv_absent`.
            WAITV_ABSENT.store(true, std::sync::atomic::Ordering::Relaxed);
            return None;
        }
        e => {
            // EINTR: a signal. Nothing else is expected of valid arguments.
            debug_assert_eq!(e, Some(libc::EINTR), "futex_waitv");
            ParkResult::Woken
        }
    })
}

/// How long the fallback sleeps on the first word before it looks at the
/// others again.
#[cfg(not(loom))]
const FALLBACK_POLL: Duration = Duration::from_millis(1);

/// [`wait_any_shared`] without `futex_waitv`: checks every word (any differs:
/// `Mismatch`), then sleeps on the first by [`wait_shared`] for at most
/// [`FALLBACK_POLL`] at a time, looking at every word between sleeps, until
/// the first is woken, some word changed (`Woken`), or the timeout passed.
#[cfg(not(loom))]
fn wait_any_fallback(words: &[(&AtomicU32, u32)], timeout: Option<Duration>) -> ParkResult {
    if any_differs(words) {
        return ParkResult::Mismatch;
    }
    let deadline = timeout.and_then(|d| std::time::Instant::now().checked_add(d));
    let (first, expected) = words[0];
    loop {
        let slice = match deadline {
            None => FALLBACK_POLL,
            Some(at) => {
                let left = at.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    return ParkResult::TimedOut;
                }
                left.min(FALLBACK_POLL)
            }
        };
        match wait_shared(first, expected, Some(slice)) {
            ParkResult::TimedOut => {}
            // Woken, a signal, or the first word changed since the check.
            ParkResult::Woken | ParkResult::Mismatch => return ParkResult::Woken,
        }
        if any_differs(words) {
            return ParkResult::Woken;
        }
    }
}

#[cfg(not(loom))]
pub(crate) fn wake(word: &AtomicU32, n: i32) -> usize {
    wake_op(word, n, libc::FUTEX_PRIVATE_FLAG)
}

/// [`wake`] for a word in memory shared between processes (see [`wait_shared`]).
#[cfg(not(loom))]
pub(crate) fn wake_shared(word: &AtomicU32, n: i32) -> usize {
    wake_op(word, n, 0)
}

#[cfg(not(loom))]
fn wake_op(word: &AtomicU32, n: i32, private: libc::c_int) -> usize {
    // SAFETY: `word` is a live, aligned 32-bit atomic; FUTEX_WAKE does not access
    // memory, it only wakes waiters queued on this address.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | private,
            n,
        )
    };
    r.max(0) as usize
}

/// Under loom the futex is modelled strictly: a thread that waits without a
/// timeout blocks (a loom `park`) until a `wake` on the same word picks it, so
/// a lost wake-up is a deadlock loom reports. The check of the word and the
/// queueing happen under one model lock, as the kernel does them under its
/// hash-bucket lock. A wait with a timeout stays a model yield that times out
/// (real time is not part of the model).
#[cfg(loom)]
mod model {
    use loom::sync::{Arc, Mutex};
    use loom::thread::Thread;

    /// (word address, thread, the waiter's identity). A waiter is woken when
    /// its entry leaves the queue; it checks that under the model lock, which
    /// (unlike a flag read after loom's `unpark`) orders the check after the wake.
    pub(super) type Queue = Vec<(usize, Thread, Arc<()>)>;

    loom::lazy_static! {
        pub(super) static ref WAITERS: Mutex<Queue> = Mutex::new(Vec::new());
    }
}

#[cfg(loom)]
pub(crate) fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> ParkResult {
    use crate::sync::Ordering;
    use loom::sync::Arc;
    if timeout.is_some() {
        if word.load(Ordering::Acquire) != expected {
            return ParkResult::Mismatch;
        }
        loom::thread::yield_now();
        return ParkResult::TimedOut;
    }
    let me = Arc::new(());
    {
        let mut q = model::WAITERS.lock().unwrap();
        if word.load(Ordering::Acquire) != expected {
            return ParkResult::Mismatch;
        }
        q.push((
            word as *const AtomicU32 as usize,
            loom::thread::current(),
            me.clone(),
        ));
    }
    loop {
        loom::thread::park();
        let q = model::WAITERS.lock().unwrap();
        if !q.iter().any(|e| Arc::ptr_eq(&e.2, &me)) {
            return ParkResult::Woken;
        }
    }
}

#[cfg(loom)]
pub(crate) fn wake(word: &AtomicU32, n: i32) -> usize {
    let addr = word as *const AtomicU32 as usize;
    let mut q = model::WAITERS.lock().unwrap();
    let mut woken = 0usize;
    let mut i = 0;
    while i < q.len() && (woken as i64) < i64::from(n) {
        if q[i].0 == addr {
            let (_, t, _) = q.remove(i);
            t.unpark();
            woken += 1;
        } else {
            i += 1;
        }
    }
    woken
}

/// Under loom every thread is in one process: a shared futex is the same model.
#[cfg(loom)]
pub(crate) fn wait_shared(
    word: &AtomicU32,
    expected: u32,
    timeout: Option<Duration>,
) -> ParkResult {
    wait(word, expected, timeout)
}

/// The model of `futex_waitv`, as strict as `wait`'s: without a timeout the
/// waiter checks every word and queues one entry per word under the model
/// lock, then blocks until a `wake` of any of its words takes one of them
/// (and, as the kernel does on its way out, takes its other entries back
/// itself); a wake-up nobody sends is a deadlock loom reports. A wake of one
/// of its other words in between still counts that entry as woken, as in the
/// kernel. With a timeout: a model yield that times out.
#[cfg(loom)]
pub(crate) fn wait_any_shared(
    words: &[(&AtomicU32, u32)],
    timeout: Option<Duration>,
) -> ParkResult {
    use loom::sync::Arc;
    debug_assert!((1..=WAIT_ANY_MAX).contains(&words.len()));
    if timeout.is_some() {
        if any_differs(words) {
            return ParkResult::Mismatch;
        }
        loom::thread::yield_now();
        return ParkResult::TimedOut;
    }
    let me = Arc::new(());
    {
        let mut q = model::WAITERS.lock().unwrap();
        if any_differs(words) {
            return ParkResult::Mismatch;
        }
        for (word, _) in words {
            q.push((
                *word as *const AtomicU32 as usize,
                loom::thread::current(),
                me.clone(),
            ));
        }
    }
    loop {
        loom::thread::park();
        let mut q = model::WAITERS.lock().unwrap();
        let queued = q.iter().filter(|e| Arc::ptr_eq(&e.2, &me)).count();
        if queued < words.len() {
            q.retain(|e| !Arc::ptr_eq(&e.2, &me));
            return ParkResult::Woken;
        }
    }
}

/// As [`wait_shared`].
#[cfg(loom)]
pub(crate) fn wake_shared(word: &AtomicU32, n: i32) -> usize {
    wake(word, n)
}

/// `park_shared_any` on both of its paths: `futex_waitv` (where the kernel
/// has it) and the fallback (forced by [`force_fallback`]). A waker acts only
/// once it has seen the sleeper inside the kernel's sleep (its
/// `/proc/…/syscall`), so that a wake-up the sleeper cannot see is a failure,
/// not a lucky `Mismatch`.
#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sched::{PARK_SHARED_ANY_MAX, park_shared_any, unpark_shared_all};
    use crate::sync::Ordering;
    use std::time::Instant;

    /// A sleeper's timeout where a wake is expected: past it, the wake was lost.
    const LONG: Duration = Duration::from_secs(10);
    /// How soon after its wake a sleeper must have returned.
    const BOUND: Duration = Duration::from_secs(2);

    /// The system call the sleeper is expected to sleep in.
    fn sleep_syscall(fallback: bool) -> libc::c_long {
        if fallback || WAITV_ABSENT.load(std::sync::atomic::Ordering::Relaxed) {
            libc::SYS_futex
        } else {
            libc::SYS_futex_waitv
        }
    }

    /// Waits (at most 5 s) until the task whose `/proc` directory is `task`
    /// is blocked in the system call `park_shared_any` sleeps in. Returns
    /// whether it was seen there (false where `/proc/…/syscall` cannot be
    /// read: then after it was seen sleeping at all, and 20 ms more).
    fn wait_until_asleep(task: &str, fallback: bool) -> bool {
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            match std::fs::read_to_string(format!("{task}/syscall")) {
                Ok(s) => {
                    let nr = s.split_whitespace().next().and_then(|n| n.parse().ok());
                    if nr == Some(sleep_syscall(fallback)) {
                        return true;
                    }
                }
                Err(_) => {
                    let stat = std::fs::read_to_string(format!("{task}/stat")).unwrap_or_default();
                    let state = stat
                        .rsplit(')')
                        .next()
                        .and_then(|r| r.split_whitespace().next());
                    if state == Some("S") {
                        std::thread::sleep(Duration::from_millis(20));
                        return false;
                    }
                }
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        false
    }

    fn gettid() -> libc::pid_t {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::gettid() }
    }

    /// A thread sleeps on two words; another rings word `ring` (0 or 1)
    /// once it sees the sleeper asleep. The sleeper must return `Woken`
    /// within [`BOUND`] of the wake.
    fn woken_by(ring: usize, fallback: bool, timeout: Option<Duration>) {
        let words = [AtomicU32::new(0), AtomicU32::new(0)];
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            let sleeper = s.spawn(|| {
                force_fallback(fallback);
                tx.send(gettid()).unwrap();
                let r = park_shared_any(&[(&words[0], 0), (&words[1], 0)], timeout);
                (r, Instant::now())
            });
            let tid = rx.recv().unwrap();
            let asleep = wait_until_asleep(&format!("/proc/self/task/{tid}"), fallback);
            words[ring].store(1, Ordering::Release);
            let rung = Instant::now();
            unpark_shared_all(&words[ring]);
            let (r, back) = sleeper.join().unwrap();
            let took = back.saturating_duration_since(rung);
            if asleep {
                assert_eq!(
                    r,
                    ParkResult::Woken,
                    "ring word {ring}, fallback {fallback}"
                );
            } else {
                assert_ne!(
                    r,
                    ParkResult::TimedOut,
                    "ring word {ring}, fallback {fallback}"
                );
            }
            assert!(took < BOUND, "returned {took:?} after word {ring} was rung");
        });
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads /proc for the sleeper's system call")]
    fn any_woken_by_the_first_word() {
        woken_by(0, false, None);
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads /proc for the sleeper's system call")]
    fn any_woken_by_the_second_word() {
        woken_by(1, false, Some(LONG));
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads /proc for the sleeper's system call")]
    fn any_fallback_woken_by_the_first_word() {
        woken_by(0, true, None);
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads /proc for the sleeper's system call")]
    fn any_fallback_woken_by_the_second_word() {
        woken_by(1, true, Some(LONG));
    }

    fn mismatch(fallback: bool) {
        force_fallback(fallback);
        let (a, b) = (AtomicU32::new(0), AtomicU32::new(2));
        for timeout in [None, Some(LONG)] {
            let t0 = Instant::now();
            assert_eq!(
                park_shared_any(&[(&a, 0), (&b, 1)], timeout),
                ParkResult::Mismatch,
                "second word differs, fallback {fallback}"
            );
            assert_eq!(
                park_shared_any(&[(&b, 1), (&a, 0)], timeout),
                ParkResult::Mismatch,
                "first word differs, fallback {fallback}"
            );
            assert!(t0.elapsed() < BOUND, "slept on a mismatch");
        }
        force_fallback(false);
    }

    #[test]
    fn any_mismatch_at_entry() {
        mismatch(false);
    }

    #[test]
    fn any_fallback_mismatch_at_entry() {
        mismatch(true);
    }

    fn times_out(fallback: bool) {
        force_fallback(fallback);
        let (a, b) = (AtomicU32::new(0), AtomicU32::new(0));
        let timeout = Duration::from_millis(20);
        let t0 = Instant::now();
        let r = park_shared_any(&[(&a, 0), (&b, 0)], Some(timeout));
        let took = t0.elapsed();
        force_fallback(false);
        assert_eq!(r, ParkResult::TimedOut, "fallback {fallback}");
        assert!(
            took >= timeout && took < BOUND,
            "a {timeout:?} timeout returned after {took:?} (fallback {fallback})"
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "real time: the timeout runs on the monotonic clock")]
    fn any_times_out() {
        times_out(false);
    }

    #[test]
    #[cfg_attr(miri, ignore = "real time: the timeout runs on the monotonic clock")]
    fn any_fallback_times_out() {
        times_out(true);
    }

    #[test]
    fn any_deadline_beyond_the_clock_is_no_limit() {
        assert!(monotonic_deadline(Duration::MAX).is_none());
        let d = monotonic_deadline(Duration::from_secs(1)).unwrap();
        assert!(d.tv_sec >= 1 && (0..1_000_000_000).contains(&d.tv_nsec));
    }

    #[test]
    #[should_panic(expected = "park_shared_any: 9 words; it sleeps on 1 to 8")]
    fn any_more_than_eight_words_panics() {
        let w: Vec<AtomicU32> = (0..PARK_SHARED_ANY_MAX + 1)
            .map(|_| AtomicU32::new(0))
            .collect();
        let words: Vec<(&AtomicU32, u32)> = w.iter().map(|w| (w, 1)).collect();
        park_shared_any(&words, None);
    }

    #[test]
    #[should_panic(expected = "park_shared_any: 0 words")]
    fn any_no_words_panics() {
        park_shared_any(&[], None);
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads /proc for the sleeper's system call")]
    fn any_eight_words_woken_by_the_last() {
        let w: Vec<AtomicU32> = (0..PARK_SHARED_ANY_MAX)
            .map(|_| AtomicU32::new(0))
            .collect();
        let words: Vec<(&AtomicU32, u32)> = w.iter().map(|w| (w, 0)).collect();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            let sleeper = s.spawn(|| {
                tx.send(gettid()).unwrap();
                park_shared_any(&words, Some(LONG))
            });
            let tid = rx.recv().unwrap();
            let asleep = wait_until_asleep(&format!("/proc/self/task/{tid}"), false);
            w[PARK_SHARED_ANY_MAX - 1].store(1, Ordering::Release);
            unpark_shared_all(&w[PARK_SHARED_ANY_MAX - 1]);
            let r = sleeper.join().unwrap();
            if asleep {
                assert_eq!(r, ParkResult::Woken);
            } else {
                assert_ne!(r, ParkResult::TimedOut);
            }
        });
    }

    /// A fresh anonymous `MAP_SHARED` page holding one word (0).
    fn shared_word() -> &'static AtomicU32 {
        // SAFETY: a fresh anonymous shared mapping; checked for failure below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap failed");
        // SAFETY: the page is zero-filled, page-aligned, and never unmapped
        // (a page per test run), so a 'static AtomicU32 on it stays valid.
        unsafe { &*p.cast::<AtomicU32>() }
    }

    /// A forked child sleeps on two words in two different shared mappings;
    /// the parent rings the second once it sees the child asleep. The child
    /// must exit 0 (woken, the word changed) within [`BOUND`] of the wake.
    fn across_fork(fallback: bool) {
        let (a, b) = (shared_word(), shared_word());
        force_fallback(fallback);
        // SAFETY: the child only sleeps (system calls, atomics, the clock; no
        // allocation, no lock another thread of ours may hold) and `_exit`s.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let end = Instant::now() + LONG;
            let code = loop {
                let left = end.saturating_duration_since(Instant::now());
                match park_shared_any(&[(a, 0), (b, 0)], Some(left)) {
                    ParkResult::TimedOut => break 3,
                    _ if b.load(Ordering::Acquire) == 1 => break 0,
                    _ => {}
                }
            };
            // SAFETY: leaves the child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        force_fallback(false);
        wait_until_asleep(&format!("/proc/{pid}"), fallback);
        b.store(1, Ordering::Release);
        let rung = Instant::now();
        unpark_shared_all(b);
        let mut status = 0;
        let exited = loop {
            // SAFETY: polls our own child.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                break true;
            }
            if rung.elapsed() > LONG + BOUND {
                // SAFETY: ends and reaps our own child, which hung.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                break false;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let took = rung.elapsed();
        assert!(exited, "the child never returned (fallback {fallback})");
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child was not woken by the other process's wake (status {status:#x}, fallback {fallback})"
        );
        assert!(took < BOUND, "the child returned {took:?} after the wake");
    }

    #[test]
    #[cfg_attr(miri, ignore = "fork and MAP_SHARED mappings")]
    fn any_woken_across_fork() {
        across_fork(false);
    }

    #[test]
    #[cfg_attr(miri, ignore = "fork and MAP_SHARED mappings")]
    fn any_fallback_woken_across_fork() {
        across_fork(true);
    }
}
