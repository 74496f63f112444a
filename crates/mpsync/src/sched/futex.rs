//! `park`/`unpark` on a 32-bit word: the Linux futex, the only place in mpsync
//! that calls it. Under loom, a strict model of it (see `wait`'s loom version).

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

/// As [`wait_shared`].
#[cfg(loom)]
pub(crate) fn wake_shared(word: &AtomicU32, n: i32) -> usize {
    wake(word, n)
}
