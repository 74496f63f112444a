//! [`SharedClaimLock`] against a holder that never lets go and against
//! scribbled memory, for every lock msgq uses as a claim lock. Each wait runs
//! on a thread of its own and must answer within [`BOUND`], so a wait that
//! ignores `give_up` fails the test instead of hanging it. Lock-specific cases
//! (Anderson's admission count, TAS-B's backoff words) are in those files.

use super::*;
use lock_api::RawMutex;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Keeps `v` for the rest of the test process (a thread left spinning on it
/// may outlive its test) and returns it. Its address is also kept in a
/// static, so that Miri's leak check finds it reachable: a kept value, not a
/// leak.
pub(super) fn kept<T: 'static>(v: T) -> &'static mut T {
    /// An address kept for the leak check; never read back.
    struct Kept(#[allow(dead_code, reason = "only there to be reachable")] *const ());
    // SAFETY: the pointer is never dereferenced through `Kept`; it only
    // stays reachable from the static below.
    unsafe impl Send for Kept {}
    static KEPT: std::sync::Mutex<Vec<Kept>> = std::sync::Mutex::new(Vec::new());
    let p = Box::into_raw(Box::new(v));
    KEPT.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(Kept(p.cast_const().cast()));
    // SAFETY: `p` came from `Box::into_raw` just above and is never freed;
    // the only other copy of it (in `KEPT`) is never dereferenced.
    unsafe { &mut *p }
}

/// How long any single wait in these tests may take before it counts as hung.
pub(super) const BOUND: Duration = Duration::from_secs(20);

/// Runs `f` on a thread of its own and returns its answer, failing if it has
/// none within [`BOUND`] (the thread is left behind, spinning) or panicked.
pub(super) fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(BOUND) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: no answer in {BOUND:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => match h.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => unreachable!("the thread sends before it ends"),
        },
    }
}

/// `lock_or_give_up` on a thread of its own (within [`BOUND`]) with a
/// `give_up` that answers `true` at its `n`th call: whether it got the lock
/// (then released at once). If not, it asked exactly `n` times: it stops at
/// the first `true`.
pub(super) fn attempt<L: SharedClaimLock + 'static>(l: &'static L, n: u32) -> bool {
    let calls: &'static AtomicU32 = kept(AtomicU32::new(0));
    let got = within(&format!("lock_or_give_up, give_up after {n}"), move || {
        let g = l.lock_or_give_up(&mut || calls.fetch_add(1, SeqCst) + 1 >= n);
        let got = g.is_some();
        if let Some(g) = g {
            // SAFETY: `g` came from `l.lock_or_give_up` just above.
            unsafe { l.unlock(g) };
        }
        got
    });
    if !got {
        assert_eq!(calls.load(SeqCst), n, "asks no more after the first `true`");
    }
    got
}

/// A thread waiting for a lock by `lock_or_give_up` (its `give_up` answers
/// `true` only after half of [`BOUND`]).
pub(super) struct Waiter {
    got: mpsc::Receiver<bool>,
    release: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Waiter {
    /// Starts one; it is waiting (it has asked `give_up`) when this returns.
    pub(super) fn start<L: SharedClaimLock + 'static>(l: &'static L) -> Self {
        let waiting: &'static AtomicBool = kept(AtomicBool::new(false));
        let (got_tx, got) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let deadline = Instant::now() + BOUND / 2;
            let g = l.lock_or_give_up(&mut || {
                waiting.store(true, SeqCst);
                Instant::now() >= deadline
            });
            got_tx.send(g.is_some()).unwrap();
            if let Some(g) = g {
                let _ = release_rx.recv();
                // SAFETY: `g` came from `l.lock_or_give_up` on this thread.
                unsafe { l.unlock(g) };
            }
        });
        while !waiting.load(SeqCst) {
            std::hint::spin_loop();
        }
        Self {
            got,
            release,
            thread,
        }
    }

    /// Whether it got the lock (it then holds it until [`release`](Self::release)).
    pub(super) fn got(&self) -> bool {
        self.got.recv_timeout(BOUND).expect("the waiter answers")
    }

    /// Lets it unlock, and waits until it has.
    pub(super) fn release(self) {
        let _ = self.release.send(());
        self.thread.join().unwrap();
    }
}

/// A `give_up` that must not be called: the lock was free at the first look.
pub(super) fn never_asked() -> bool {
    panic!("give_up asked although the lock was free")
}

/// A lock of its own that lives for the rest of the test process.
pub(super) fn leaked<L: RawMutex + 'static>() -> &'static L {
    kept(L::INIT)
}

/// `lock` + `unlock`, twice; then `lock_or_give_up` at once, `try_lock`, free.
pub(super) fn works<L: SharedClaimLock>(l: &L) {
    for _ in 0..2 {
        let g = l.lock();
        // SAFETY: `g` came from `l.lock()` just above.
        unsafe { l.unlock(g) };
    }
    let g = l.lock_or_give_up(&mut never_asked).expect("a free lock");
    // SAFETY: `g` came from `l.lock_or_give_up` just above.
    unsafe { l.unlock(g) };
    let g = l.try_lock().expect("a free lock");
    // SAFETY: as above, from `try_lock`.
    unsafe { l.unlock(g) };
    assert!(!l.is_locked());
}

/// Another thread takes the lock and ends without releasing it.
fn hold_forever<L: SharedClaimLock + 'static>(l: &'static L) {
    std::thread::spawn(move || {
        let _ = l.lock(); // never unlocked
    })
    .join()
    .unwrap();
}

fn gives_up_while_held<L: SharedClaimLock + 'static>() {
    let l = leaked::<L>();
    hold_forever(l);
    assert!(!attempt(l, 5), "the lock is held forever");
    let t0 = Instant::now();
    let got = within("give_up at a deadline 2 ms away", move || {
        let deadline = Instant::now() + Duration::from_millis(2);
        l.lock_or_give_up(&mut || Instant::now() >= deadline)
            .is_some()
    });
    assert!(!got);
    assert!(t0.elapsed() >= Duration::from_millis(2));
}

fn reset_frees_a_held_lock<L: SharedClaimLock + 'static>() {
    let l = leaked::<L>();
    hold_forever(l);
    // SAFETY: nobody uses the lock's critical section (the holder is gone).
    unsafe { l.reset() };
    within("after the reset", move || works(l));
}

/// Fills `L`'s memory with `pattern(i)` at byte `i`, as a peer may write it.
fn scribbled<L: SharedClaimLock + 'static>(mut pattern: impl FnMut(usize) -> u8) -> &'static L {
    let m: &'static mut MaybeUninit<L> = kept(MaybeUninit::uninit());
    let p = m.as_mut_ptr().cast::<u8>();
    for i in 0..size_of::<L>() {
        // SAFETY: `p + i` is inside `m`, which we own, and nothing reads it yet.
        unsafe { p.add(i).write(pattern(i)) };
    }
    // SAFETY: every byte is initialized. These locks are `#[repr(C)]`
    // atomics and plain integers, valid at any bytes, except the flag of Tas
    // and TAS-B, which then may hold a byte that is not a `bool` — exactly
    // what a peer can leave in shared memory; the `SharedClaimLock` paths
    // read that byte as an `AtomicU8`, and `reset` makes it 0 before the
    // `lock_api` paths run in `works`.
    unsafe { m.assume_init_ref() }
}

/// Seeded garbage, reproducible.
fn random(seed: u64) -> impl FnMut(usize) -> u8 {
    let mut g = crate::util::rng::SplitMix64::new(seed);
    move |_| g.next_u64() as u8
}

fn survives_garbage<L: SharedClaimLock + 'static>() {
    let mut cases: Vec<&'static L> = vec![
        scribbled(|_| 0x00),
        scribbled(|_| 0xFF),
        scribbled(|_| 0x80),
        scribbled(|i| if i % 4 == 3 { 0x7F } else { 0xFF }),
        // The first word (TAS's flag, a ticket counter) nonzero, the rest 0.
        scribbled(|i| u8::from(i == 0)),
        scribbled(|i| if i == 0 { 0xFF } else { 0 }),
    ];
    cases.extend((0..48).map(|seed| scribbled::<L>(random(seed))));
    for (case, l) in cases.into_iter().enumerate() {
        attempt(l, 8);
        within(&format!("garbage case {case}: reset"), move || {
            let _ = l.progress();
            // SAFETY: no thread but this one uses the lock.
            unsafe { l.reset() };
            works(l);
        });
    }
}

fn late_unlock_after_reset_is_repaired_by_a_second_reset<L: SharedClaimLock + 'static>() {
    let l = leaked::<L>();
    // A holder whose lock is reset under it, and who then unlocks.
    let stale = l.lock();
    // SAFETY: the test only counts on the lock working after the second reset.
    unsafe { l.reset() };
    // SAFETY: the late unlock that `reset` documents: no UB, an odd state.
    unsafe { l.unlock(stale) };
    // SAFETY: as above.
    unsafe { l.reset() };
    within("after a second reset", move || works(l));
    // The same with a new holder in between: it unlocks after the late one.
    let stale = l.lock();
    // SAFETY: as above.
    unsafe { l.reset() };
    let fresh = l
        .lock_or_give_up(&mut never_asked)
        .expect("reset frees the lock");
    // SAFETY: the late unlock, then the new holder's own (from `lock_or_give_up`).
    unsafe {
        l.unlock(stale);
        l.unlock(fresh);
    }
    attempt(l, 3); // the odd state: give_up still works
    // SAFETY: as above.
    unsafe { l.reset() };
    within("after a second reset", move || works(l));
}

/// A waiter that began before a reset gets the lock after it (it queues
/// again if its number was passed), and holds it alone.
fn waiter_from_before_a_reset_gets_the_lock<L: SharedClaimLock + 'static>() {
    let l = leaked::<L>();
    let stale = l.lock();
    let w = Waiter::start(l);
    // SAFETY: the test only checks the lock itself; `stale` is never unlocked.
    unsafe { l.reset() };
    std::mem::forget(stale);
    assert!(w.got(), "the waiter from before gets the lock");
    // (`try_lock`: a FIFO waiter that gave up would leave its number behind.)
    assert!(
        l.try_lock().is_none(),
        "nobody else gets the lock while the waiter holds it"
    );
    w.release();
    within("after the waiter's unlock", move || works(l));
}

/// `progress` of a FIFO lock: moves when another thread locks and unlocks,
/// moves at a hand-over from a holder to a waiter (the lock held throughout),
/// and stays put while a waiter spins behind a holder that does not move.
fn progress_moves_at_hand_over<L: SharedClaimLock + 'static>() {
    let l = leaked::<L>();
    let p0 = l.progress();
    std::thread::spawn(move || {
        let g = l.lock();
        // SAFETY: `g` came from `l.lock()` just above.
        unsafe { l.unlock(g) };
    })
    .join()
    .unwrap();
    assert_ne!(l.progress(), p0, "a lock + unlock by another thread");

    let first = l.lock();
    let p_held = l.progress();
    let w = Waiter::start(l);
    for _ in 0..1000 {
        assert_eq!(
            l.progress(),
            p_held,
            "a waiter spinning behind a stuck holder"
        );
        std::hint::spin_loop();
    }
    // SAFETY: `first` came from `l.lock()` on this thread.
    unsafe { l.unlock(first) };
    assert!(w.got(), "the waiter gets the lock");
    let p_handed = l.progress();
    assert_ne!(p_handed, p_held, "a hand-over, though the lock stayed held");
    assert!(l.is_locked());
    for _ in 0..1000 {
        assert_eq!(l.progress(), p_handed, "a holder that does not move");
        std::hint::spin_loop();
    }
    w.release();
}

/// `progress` of a TAS lock: it tells held from free.
fn progress_tells_held_from_free<L: SharedClaimLock + 'static>() {
    let l = leaked::<L>();
    let p_free = l.progress();
    let g = l.lock();
    let p_held = l.progress();
    assert_ne!(p_held, p_free);
    // SAFETY: `g` came from `l.lock()` just above.
    unsafe { l.unlock(g) };
    assert_eq!(l.progress(), p_free);
}

/// A FIFO lock's waiter that gives up leaves its number unserved: once the
/// holder releases, the lock stays held (by nobody) until a reset.
fn fifo_waiter_that_gives_up_wedges_until_reset<L: SharedClaimLock + 'static>() {
    let l = leaked::<L>();
    let g = l.lock();
    assert!(!attempt(l, 3), "a waiter behind a holder");
    // SAFETY: `g` came from `l.lock()` on this thread.
    unsafe { l.unlock(g) };
    assert!(l.is_locked(), "handed to the number left behind");
    assert!(!attempt(l, 3), "a wedged lock");
    // SAFETY: nobody holds the lock.
    unsafe { l.reset() };
    within("after the reset", move || works(l));
}

macro_rules! shared_claim_tests {
    ($($name:ident: $l:ty, fifo: $fifo:tt;)*) => {$(
        mod $name {
            use super::*;
            #[test]
            #[cfg_attr(miri, ignore = "waits on real time")]
            fn gives_up_while_another_thread_holds_it_forever() {
                gives_up_while_held::<$l>()
            }
            #[test]
            fn reset_frees_a_lock_held_forever() {
                reset_frees_a_held_lock::<$l>()
            }
            #[test]
            #[cfg_attr(miri, ignore = "many cases, each on a thread")]
            fn gives_up_and_resets_whatever_its_words_hold() {
                survives_garbage::<$l>()
            }
            #[test]
            fn a_late_unlock_after_a_reset_is_repaired_by_the_next_reset() {
                late_unlock_after_reset_is_repaired_by_a_second_reset::<$l>()
            }
            #[test]
            #[cfg_attr(miri, ignore = "waits on real time")]
            fn a_waiter_from_before_a_reset_gets_the_lock() {
                waiter_from_before_a_reset_gets_the_lock::<$l>()
            }
            shared_claim_tests!(@fifo $fifo $l);
        }
    )*};
    (@fifo true $l:ty) => {
        #[test]
        #[cfg_attr(miri, ignore = "spins on another thread")]
        fn progress_moves_at_every_hand_over_and_only_then() {
            progress_moves_at_hand_over::<$l>()
        }
        #[test]
        fn a_waiter_that_gives_up_leaves_the_lock_held_until_reset() {
            fifo_waiter_that_gives_up_wedges_until_reset::<$l>()
        }
    };
    (@fifo false $l:ty) => {
        #[test]
        fn progress_shows_held_and_free() {
            progress_tells_held_from_free::<$l>()
        }
    };
}

shared_claim_tests! {
    tas: Tas, fifo: false;
    tas_b: TasB, fifo: false;
    ticket: Ticket, fifo: true;
    ticket_split: TicketSplit, fifo: true;
    anderson: AndersonN<16>, fifo: true;
    anderson_2: AndersonN<2>, fifo: true;
}
