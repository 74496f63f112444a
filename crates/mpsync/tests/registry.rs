//! The context-block registry hands every thread a clean block and takes it back
//! when the thread exits, whatever the thread did: forgot a no-preempt guard, or
//! used `sched` again from a thread-local destructor after its block was returned.
//!
//! A test binary of its own: the tests count the process's live blocks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};

use mpsync::lock::TasBNp;
use mpsync::sched::{self, ThreadState};

/// The tests count live blocks: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Registers `n` threads at once (so they take `n` distinct blocks, free ones
/// first) and returns each one's (state, depth, warned) as it found its block.
fn fresh_blocks(n: usize) -> Vec<(ThreadState, u32, bool)> {
    let go = Barrier::new(n);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|_| {
                let go = &go;
                s.spawn(move || {
                    let cb = sched::current();
                    let seen = (cb.state(), cb.depth(), cb.warned());
                    // Hold the block until every thread has one.
                    go.wait();
                    seen
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// lock_api makes forgetting a guard safe: the lock stays held, but the thread's
/// no-preempt request (depth 1) must not outlive the thread
/// and make the next owner of its block unpreemptable forever.
#[test]
fn a_forgotten_np_guard_does_not_outlive_its_thread() {
    let _s = serial();
    for _ in 0..4 {
        std::thread::spawn(|| {
            let m = Box::leak(Box::new(mpsync::lock::Mutex::<TasBNp, ()>::new(())));
            std::mem::forget(m.lock());
            assert!(sched::current().depth() >= 1);
        })
        .join()
        .unwrap();
    }
    // More threads at once than blocks were ever made here: every free block,
    // the four returned above included, goes to one of them.
    for (i, &(state, depth, warned)) in fresh_blocks(64).iter().enumerate() {
        assert_eq!(
            (state, depth, warned),
            (ThreadState::Preemptable, 0, false),
            "thread {i} got a block carrying its previous owner's state"
        );
    }
}

thread_local! {
    /// Uses `sched` from its destructor, like a lock's node cache or a reclaimer's
    /// registration would.
    static LATE_USER: LateUser = const { LateUser };
}

struct LateUser;

/// Blocks a late destructor found not `Preemptable` at depth 0 (a panic there
/// would abort the process, so it counts instead).
static DIRTY_LATE: AtomicUsize = AtomicUsize::new(0);

/// What a late destructor does: check its block, then use it.
fn late_use() {
    let cb = sched::current();
    if (cb.state(), cb.depth()) != (ThreadState::Preemptable, 0) {
        DIRTY_LATE.fetch_add(1, Ordering::Relaxed);
    }
    let _np = sched::NoPreempt::new();
}

impl Drop for LateUser {
    fn drop(&mut self) {
        late_use();
    }
}

/// A thread-local destructor that runs after the registry's own (thread-local
/// destructors run in reverse order of registration) still finds a block, and the
/// block goes back to the registry when the thread is gone: exiting threads must
/// not leave one block in use each.
#[test]
fn sched_from_a_late_thread_local_destructor_does_not_leak_blocks() {
    let _s = serial();
    let run = || {
        std::thread::spawn(|| {
            // Registered first, so destroyed after the registry's destructor.
            LATE_USER.with(|_| ());
            let _ = sched::current();
        })
        .join()
        .unwrap()
    };
    assert_exits_return_blocks(run);
}

/// The same from a POSIX thread-specific-data destructor, which glibc runs after
/// every thread-local destructor.
#[test]
fn sched_from_a_pthread_key_destructor_does_not_leak_blocks() {
    let _s = serial();
    unsafe extern "C" fn late(_: *mut libc::c_void) {
        late_use();
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is a valid out-pointer; `late` is a valid destructor.
    assert_eq!(unsafe { libc::pthread_key_create(&mut key, Some(late)) }, 0);
    let run = move || {
        std::thread::spawn(move || {
            let _ = sched::current();
            // SAFETY: `key` was created above; any non-null value runs `late`.
            unsafe { libc::pthread_setspecific(key, std::ptr::dangling::<libc::c_void>()) };
        })
        .join()
        .unwrap()
    };
    assert_exits_return_blocks(run);
}

/// Runs `run` (one thread that uses `sched` late in its exit) once to warm up,
/// then 100 times: the blocks in use must not grow, and no late user may have
/// been handed a dirty block.
fn assert_exits_return_blocks(run: impl Fn()) {
    run();
    let before = sched::live_threads().len();
    for _ in 0..100 {
        run();
    }
    let after = sched::live_threads().len();
    assert_eq!(
        DIRTY_LATE.load(Ordering::Relaxed),
        0,
        "a late destructor got a dirty block"
    );
    assert!(
        after <= before + 2,
        "100 exited threads left {} blocks in use ({before} before, {after} after)",
        after.saturating_sub(before)
    );
}
