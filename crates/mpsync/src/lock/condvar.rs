//! The condition variable [`Condvar`] (its doc has the protocol).

use std::time::{Duration, Instant};

use lock_api::{MutexGuard, RawMutex};

use crate::sched::{self, ParkResult};
use crate::sync::{AtomicU32, Ordering, fence};

/// Whether a timed wait ended because its time ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitTimeoutResult(bool);

impl WaitTimeoutResult {
    /// `true` if the wait ended because the timeout passed (the condition of a
    /// `wait_timeout_while` still held then).
    #[inline]
    pub fn timed_out(self) -> bool {
        self.0
    }
}

/// A condition variable for [`mpsync::Mutex`](crate::Mutex) and for
/// [`lock::Mutex<L, T>`](crate::lock::Mutex) with any lock `L`.
///
/// The condvar is a *sequence word* that every notification bumps, and a count
/// of waiters so that a notification nobody waits for costs no system call:
///
/// ```text
/// waiter (holds the mutex)                    notifier
/// waiters += 1; fence(SeqCst)                 seq += 1; fence(SeqCst)
/// s = seq                                     if waiters > 0:
/// unlock the mutex                                sched::unpark_one/all(&seq)
/// sched::park(&seq, s)  // not if seq != s
/// lock the mutex; waiters -= 1
/// ```
///
/// **No lost wake-ups.** `s` is read while the waiter still holds the mutex, so
/// any notification that comes after the waiter released the mutex (the only
/// ones `wait` promises to see) bumps `seq` after that read: the futex's own
/// compare, atomic with its queueing in the kernel, then either refuses to sleep
/// or is woken by the notifier's `unpark`. The notifier skips the `unpark` only
/// if it saw no waiter; by the two SeqCst fences the waiter's read of `seq` then
/// saw the bump, so it does not sleep. A wait that began before a notification
/// was made and had not yet released the mutex is not woken by it: notifications
/// are not stored, exactly as for `std::sync::Condvar`.
///
/// **Spurious wake-ups happen**, so wait in a loop on the condition (or use
/// [`wait_while`](Condvar::wait_while)): a `notify_one` also ends the wait of
/// every thread that has read `seq` but not yet parked, the scheduler's signals
/// interrupt a park (the emulated scheduler preempts by signal), and after
/// 2³² notifications `seq` wraps.
///
/// **Waking.** `notify_all` wakes every waiter and they take the mutex one after
/// another — there is no requeueing onto the mutex. A requeue
/// (`FUTEX_CMP_REQUEUE`, as glibc and parking_lot do) moves sleepers from the
/// condvar's futex word onto *the mutex's* futex word, to be woken one at a
/// time by its unlocks; it needs a mutex whose waiters all sleep on one futex
/// word that its unlock wakes. Of mpsync's locks only [`Native`](super::Native)
/// and [`SpinThenPark`](super::SpinThenPark) are built so (and the notifier
/// would first have to mark their word contended, or an unlock would not
/// wake the moved sleepers): the queue locks park each waiter on its own wake
/// word and hand the lock over in queue order (a requeued thread would have no
/// place in the queue), BoundedSteal's sleepers are queue nodes too, and
/// TAS/ticket/Anderson waiters spin. And the condvar is not tied to one mutex
/// (it never learns the mutex's word). What
/// the herd costs, measured with `cargo run --release -p mpsync --example
/// condvar_herd` (8 waiters on `Mutex<Native>`, 1 µs critical sections, 2
/// cores under a load average of 12 from other builds — noisy): per round,
/// `notify_all` 34–35 µs and 9 context switches (one wake per waiter: most
/// woken waiters get the mutex in Native's spin instead of sleeping again),
/// against 43–55 µs and 10–13 switches for a chain of `notify_one`s that wakes
/// one waiter at a time, the best a requeue could do. With 4 waiters: 19–30 µs
/// and 5 switches against 31–33 µs and 7–8. So on this machine the herd costs
/// no extra sleeps, and a requeueing `notify_all` (which still wakes each
/// waiter once, from the mutex's unlock) has nothing to save; it is not
/// implemented.
///
/// Waiting releases the mutex through `L`'s own unlock, so with an -np lock
/// the no-preempt request ends before the thread sleeps, and is made again
/// when it re-locks.
///
/// A zero or past timeout (`wait_timeout(Duration::ZERO)`, `wait_until` an
/// instant gone by) releases the mutex, locks it again and returns at once,
/// timed out. The condition of
/// [`wait_while`](Condvar::wait_while) and
/// [`wait_timeout_while`](Condvar::wait_timeout_while) runs with the mutex
/// held: it may panic (the caller's guard unwinds and releases the mutex; the
/// condvar counts no waiter left), notify, or take other locks; taking the
/// same mutex again deadlocks, as for any mutex that is not reentrant.
///
/// A condvar is not tied to one mutex: waiting on it with different mutexes is
/// allowed (and a notification then wakes waiters of all of them). Uses
/// `sched`: [`park`](crate::sched::park), [`unpark_one`](crate::sched::unpark_one),
/// [`unpark_all`](crate::sched::unpark_all).
///
/// ```
/// use mpsync::{Condvar, Mutex};
/// use std::time::Duration;
///
/// let queue = Mutex::new(Vec::new());
/// let ready = Condvar::new();
/// std::thread::scope(|s| {
///     s.spawn(|| {
///         for i in 0..3 {
///             queue.lock().push(i);
///             ready.notify_one();
///         }
///     });
///     let mut got = 0;
///     while got < 3 {
///         let mut q = queue.lock();
///         ready.wait_while(&mut q, |q| q.is_empty());
///         got += q.drain(..).count();
///     }
/// });
/// let mut q = queue.lock();
/// let r = ready.wait_timeout(&mut q, Duration::from_millis(1));
/// assert!(r.timed_out());
/// ```
#[derive(Debug)]
pub struct Condvar {
    /// Bumped by every notification; the futex waiters sleep on.
    seq: AtomicU32,
    /// Threads between announcing a wait and having re-locked the mutex.
    waiters: AtomicU32,
}

impl Default for Condvar {
    fn default() -> Self {
        Self::new()
    }
}

super::loom_const_new! {
    impl[] Condvar {
        /// A condition variable nobody waits on.
        new => Self {
            seq: AtomicU32::new(0),
            waiters: AtomicU32::new(0),
        }
    }
}

impl Condvar {
    /// Releases the mutex behind `guard`, sleeps until a notification (or
    /// spuriously), and re-locks the mutex before returning.
    #[inline]
    pub fn wait<L: RawMutex, T: ?Sized>(&self, guard: &mut MutexGuard<'_, L, T>) {
        self.wait_inner(guard, None);
    }

    /// Waits while `condition` holds: checks it first (under the mutex), and
    /// again after every wake-up, spurious ones included.
    pub fn wait_while<L, T, F>(&self, guard: &mut MutexGuard<'_, L, T>, mut condition: F)
    where
        L: RawMutex,
        T: ?Sized,
        F: FnMut(&mut T) -> bool,
    {
        while condition(&mut **guard) {
            self.wait(guard);
        }
    }

    /// As [`wait`](Self::wait), for at most `timeout`. The result says whether
    /// the time ran out; a wake-up before it may still be spurious.
    pub fn wait_timeout<L: RawMutex, T: ?Sized>(
        &self,
        guard: &mut MutexGuard<'_, L, T>,
        timeout: Duration,
    ) -> WaitTimeoutResult {
        match Instant::now().checked_add(timeout) {
            Some(d) => self.wait_until(guard, d),
            None => {
                // No instant that far away: no deadline.
                self.wait(guard);
                WaitTimeoutResult(false)
            }
        }
    }

    /// parking_lot's name for [`wait_timeout`](Self::wait_timeout): as
    /// [`wait`](Self::wait), for at most `timeout`.
    ///
    /// ```
    /// let m = mpsync::Mutex::new(false);
    /// let cv = mpsync::Condvar::new();
    /// let mut ready = m.lock();
    /// assert!(cv.wait_for(&mut ready, std::time::Duration::ZERO).timed_out());
    /// ```
    #[inline]
    pub fn wait_for<L: RawMutex, T: ?Sized>(
        &self,
        guard: &mut MutexGuard<'_, L, T>,
        timeout: Duration,
    ) -> WaitTimeoutResult {
        self.wait_timeout(guard, timeout)
    }

    /// parking_lot's name and argument order for
    /// [`wait_timeout_while`](Self::wait_timeout_while): waits while
    /// `condition` holds, for at most `timeout`.
    #[inline]
    pub fn wait_while_for<L, T, F>(
        &self,
        guard: &mut MutexGuard<'_, L, T>,
        condition: F,
        timeout: Duration,
    ) -> WaitTimeoutResult
    where
        L: RawMutex,
        T: ?Sized,
        F: FnMut(&mut T) -> bool,
    {
        self.wait_timeout_while(guard, timeout, condition)
    }

    /// As [`wait`](Self::wait), until `deadline` at the latest.
    pub fn wait_until<L: RawMutex, T: ?Sized>(
        &self,
        guard: &mut MutexGuard<'_, L, T>,
        deadline: Instant,
    ) -> WaitTimeoutResult {
        WaitTimeoutResult(self.wait_inner(guard, Some(deadline)))
    }

    /// Waits while `condition` holds, for at most `timeout`; timed out if the
    /// condition still held when the time ran out.
    pub fn wait_timeout_while<L, T, F>(
        &self,
        guard: &mut MutexGuard<'_, L, T>,
        timeout: Duration,
        mut condition: F,
    ) -> WaitTimeoutResult
    where
        L: RawMutex,
        T: ?Sized,
        F: FnMut(&mut T) -> bool,
    {
        let Some(deadline) = Instant::now().checked_add(timeout) else {
            self.wait_while(guard, condition);
            return WaitTimeoutResult(false);
        };
        loop {
            if !condition(&mut **guard) {
                return WaitTimeoutResult(false);
            }
            if Instant::now() >= deadline {
                return WaitTimeoutResult(true);
            }
            self.wait_inner(guard, Some(deadline));
        }
    }

    /// Wakes one waiting thread (maybe more: see the module doc on spurious
    /// wake-ups). Costs no system call when nobody waits.
    #[inline]
    pub fn notify_one(&self) {
        if self.bump_and_see_waiters() {
            sched::unpark_one(&self.seq);
        }
    }

    /// Wakes every waiting thread.
    #[inline]
    pub fn notify_all(&self) {
        if self.bump_and_see_waiters() {
            sched::unpark_all(&self.seq);
        }
    }

    /// Bumps the sequence; whether anyone may be waiting.
    #[inline]
    fn bump_and_see_waiters(&self) -> bool {
        // Relaxed: what the notifier wrote is published by the mutex, not by
        // `seq`; the kernel's futex compare reads `seq` itself.
        self.seq.fetch_add(1, Ordering::Relaxed);
        // SeqCst fence: pairs with the waiter's fence in `wait_inner` (Dekker:
        // either we see its count, or it sees our bump).
        fence(Ordering::SeqCst);
        // Relaxed: ordered after the bump by the fence above.
        self.waiters.load(Ordering::Relaxed) != 0
    }

    /// The wait; whether it timed out.
    fn wait_inner<L: RawMutex, T: ?Sized>(
        &self,
        guard: &mut MutexGuard<'_, L, T>,
        deadline: Option<Instant>,
    ) -> bool {
        // Relaxed: ordered before the read of `seq` by the fence.
        self.waiters.fetch_add(1, Ordering::Relaxed);
        // SeqCst fence: pairs with the notifier's fence in `bump_and_see_waiters`.
        fence(Ordering::SeqCst);
        // Relaxed: the fence orders it; read while we still hold the mutex.
        let seq = self.seq.load(Ordering::Relaxed);
        let r = MutexGuard::unlocked(guard, || {
            sched::stall::point(sched::stall::CONDVAR_WAIT);
            let timeout = match deadline {
                None => None,
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return ParkResult::TimedOut;
                    }
                    Some(d - now)
                }
            };
            sched::park(&self.seq, seq, timeout)
        });
        // Relaxed: a notifier that still sees us counted only makes a system
        // call that wakes nobody.
        self.waiters.fetch_sub(1, Ordering::Relaxed);
        r == ParkResult::TimedOut
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! Single-thread behaviour (Miri-friendly where no real time is involved);
    //! the threaded tests are in `tests/lockapi.rs`.
    use super::*;
    use crate::lock::Mutex;
    use crate::lock::{Native, TasBNp};

    #[test]
    fn notify_without_waiters_is_free_and_not_stored() {
        let c = Condvar::new();
        c.notify_one();
        c.notify_all();
        assert_eq!(c.seq.load(Ordering::Relaxed), 2);
        assert_eq!(c.waiters.load(Ordering::Relaxed), 0);
    }

    #[test]
    #[cfg_attr(miri, ignore = "real time: the timeout runs on the monotonic clock")]
    fn timeout_relocks_and_reports() {
        let m: Mutex<TasBNp, u32> = Mutex::new(5);
        let c = Condvar::new();
        let mut g = m.lock();
        let start = Instant::now();
        assert!(c.wait_timeout(&mut g, Duration::from_millis(2)).timed_out());
        assert!(start.elapsed() >= Duration::from_millis(2));
        assert!(m.is_locked());
        *g += 1;
        let r = c.wait_timeout_while(&mut g, Duration::from_millis(1), |v| *v < 10);
        assert!(r.timed_out());
        let r = c.wait_timeout_while(&mut g, Duration::from_secs(60), |v| *v < 6);
        assert!(!r.timed_out(), "condition already false: no wait");
        drop(g);
        assert_eq!(c.waiters.load(Ordering::Relaxed), 0);
        assert_eq!(crate::sched::current().depth(), 0);
    }

    #[test]
    #[cfg_attr(miri, ignore = "real time: the timeout runs on the monotonic clock")]
    fn a_past_deadline_returns_at_once() {
        let m: Mutex<Native, ()> = Mutex::new(());
        let c = Condvar::default();
        let mut g = m.lock();
        assert!(c.wait_until(&mut g, Instant::now()).timed_out());
    }
}
