//! Hands each thread a [`ContextBlock`] on first use and takes it back when the
//! thread exits. Blocks are leaked once and recycled, so `&'static` is sound.
//!
//! A returned block is reset ([`ContextBlock::reset_for_new_owner`]): whatever
//! its previous owner left — a forgotten no-preempt guard's depth and state, a
//! warning — the next owner starts `Preemptable` at depth 0. The block goes back
//! after the thread's last destructor (a POSIX key's, see `exit_key`), so code in
//! thread-local destructors can still use `sched` without leaking a block.

use std::cell::Cell;

use crate::sync::{AtomicU64, Ordering};

use super::context::ContextBlock;

#[cfg(not(loom))]
mod imp {
    use super::*;
    use crate::sched::context::NO_PROCESSOR;
    use std::cell::RefCell;
    use std::sync::atomic::{AtomicU64 as StdAtomicU64, Ordering as StdOrdering};
    use std::sync::{Mutex, MutexGuard};

    /// Every block ever made, and the late ones.
    struct Blocks {
        /// A block is free when its `in_use` is false.
        all: Vec<&'static ContextBlock>,
        /// Blocks taken by a thread after its exit destructor had run (a
        /// destructor of another key, or of a thread-local, used `sched`):
        /// the C library may run no more destructor rounds, so the thread may
        /// exit still holding its block. Taken back once the thread is gone
        /// (`take_gone`).
        late: Vec<&'static ContextBlock>,
    }

    static BLOCKS: Mutex<Blocks> = Mutex::new(Blocks {
        all: Vec::new(),
        late: Vec::new(),
    });

    thread_local! {
        /// The calling thread's block. Const-initialized with no destructor, so
        /// reading it is a plain TLS load: safe in the preemption signal handler,
        /// and valid until the thread's very end (after every destructor).
        static CURRENT: Cell<*const ContextBlock> = const { Cell::new(std::ptr::null()) };
        /// Set when this thread's exit destructor (the key's, or `OWNER`'s)
        /// has run: a registration after it is late (see `Blocks::late`).
        /// No destructor: readable until the thread's very end.
        static EXITING: Cell<bool> = const { Cell::new(false) };
        /// Fallback when no POSIX key could be made: returns the block when the
        /// thread's thread-locals are destroyed.
        static OWNER: Owner = const { Owner };
        /// The registry's lock, held by the forking thread across `fork`
        /// (see `install_fork_handlers`).
        static HELD: RefCell<Option<MutexGuard<'static, Blocks>>> = const { RefCell::new(None) };
    }

    /// The POSIX thread-specific-data key whose destructor gives a thread's block
    /// back when the thread exits (`None` if the process has run out of keys).
    ///
    /// Why a key and not a thread-local destructor: glibc runs key destructors
    /// after every thread-local destructor, so `sched` keeps working, on the same
    /// block, for code that runs in thread-local destructors (a lock's node cache,
    /// a reclaimer's registration). And a key destructor that makes a thread
    /// register again (another key's destructor using `sched` after ours ran) sets
    /// the key again, which makes the C library run our destructor once more
    /// (`PTHREAD_DESTRUCTOR_ITERATIONS` rounds): the block still goes back — or,
    /// after the last round, is taken back by `take_gone` once the thread is
    /// gone.
    ///
    /// Made with a CAS, not a `OnceLock`: a child of `fork` forked while
    /// another thread made it must not wait for that thread.
    fn exit_key() -> Option<libc::pthread_key_t> {
        /// 0: not made yet; `u64::MAX`: none could be made; else key + 1.
        static KEY: StdAtomicU64 = StdAtomicU64::new(0);
        // Acquire: pairs with the Release CAS below (the key is made).
        match KEY.load(StdOrdering::Acquire) {
            0 => {}
            u64::MAX => return None,
            k => return Some((k - 1) as libc::pthread_key_t),
        }
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: `key` is a valid out-pointer; `on_thread_exit` is an
        // `extern "C"` destructor that accepts the values we store (blocks).
        let made = unsafe { libc::pthread_key_create(&mut key, Some(on_thread_exit)) } == 0;
        let mine = if made { key as u64 + 1 } else { u64::MAX };
        // Release: see the Acquire load above.
        match KEY.compare_exchange(0, mine, StdOrdering::Release, StdOrdering::Acquire) {
            Ok(_) => made.then_some(key),
            Err(won) => {
                if made {
                    // Another thread's key won; ours was never used.
                    // SAFETY: `key` was made above and never given a value.
                    unsafe { libc::pthread_key_delete(key) };
                }
                (won != u64::MAX).then(|| (won - 1) as libc::pthread_key_t)
            }
        }
    }

    /// Holds the registry's lock across `fork`, so that a child never finds it
    /// held by a thread it does not have (its first registration would wait
    /// forever). Installed at the first registration; a child forked while
    /// another thread installed them installs them again (`ForkSafeOnce`);
    /// the handlers tolerate running twice.
    fn install_fork_handlers() {
        static INSTALLED: crate::sched::once::ForkSafeOnce =
            crate::sched::once::ForkSafeOnce::new();
        INSTALLED.call(|| {
            // SAFETY: the three handlers are `extern "C"` functions without
            // arguments; the child handler only unlocks a lock its own thread
            // holds (futex word stores, async-signal-safe).
            unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork), Some(after_fork)) };
        });
    }

    /// `pthread_atfork` prepare handler: takes the registry's lock (waiting for a
    /// registration under way to finish).
    extern "C" fn before_fork() {
        let _ = HELD.try_with(|h| {
            let mut h = h.borrow_mut();
            if h.is_none() {
                *h = Some(BLOCKS.lock().unwrap_or_else(|e| e.into_inner()));
            }
        });
    }

    /// `pthread_atfork` parent and child handler: lets go of it.
    extern "C" fn after_fork() {
        let _ = HELD.try_with(|h| drop(h.borrow_mut().take()));
    }

    /// Key destructor: `p` is the exiting thread's block (the C library has
    /// already cleared the key's value). Safe for any `p`: `release` acts only on
    /// the calling thread's own block.
    extern "C" fn on_thread_exit(p: *mut libc::c_void) {
        EXITING.with(|e| e.set(true));
        release(p as *const ContextBlock);
    }

    struct Owner;

    impl Drop for Owner {
        fn drop(&mut self) {
            EXITING.with(|e| e.set(true));
            release(CURRENT.with(|c| c.get()));
        }
    }

    /// Gives the calling (exiting) thread's block `p` back to the registry.
    fn release(p: *const ContextBlock) {
        if p.is_null() || CURRENT.with(|c| c.get()) != p {
            return;
        }
        // SAFETY: registry blocks are leaked and never freed.
        let cb: &'static ContextBlock = unsafe { &*p };
        // While `CURRENT` still names the block: detaching may take a no-preempt
        // section on it.
        super::super::emulated::detach_exiting(cb);
        CURRENT.with(|c| c.set(std::ptr::null()));
        give_back(cb, false);
    }

    /// Makes `cb` free: the kernel stops answering for it, its fields are
    /// reset, and it is marked free. On its owner as it exits, or
    /// (`owner_gone`) for an owner that has exited holding it.
    fn give_back(cb: &'static ContextBlock, owner_gone: bool) {
        // The kernel stops answering for this thread.
        #[cfg(all(target_os = "linux", not(miri)))]
        super::super::ebpf::on_release(cb, owner_gone);
        #[cfg(not(all(target_os = "linux", not(miri))))]
        let _ = owner_gone;
        cb.reset_for_new_owner();
        // Relaxed (these four): informational for peers; the next owner gets them
        // through the Release store of `in_use` below.
        cb.peer.tid.store(0, Ordering::Relaxed);
        cb.peer.pthread.store(0, Ordering::Relaxed);
        cb.peer.processor.store(NO_PROCESSOR, Ordering::Relaxed);
        cb.peer.heartbeat.store(0, Ordering::Relaxed);
        // Release: the block's reset fields are visible to the next owner, whose
        // Acquire CAS on `in_use` in `register` pairs with this store.
        cb.peer.in_use.store(false, Ordering::Release);
    }

    /// Whether the thread that took the late block `cb` is gone: the kernel
    /// saw it exit (the eBPF program), or no thread of this process has its
    /// tid any more (`tgkill` with signal 0; a tid reused by a new thread of
    /// ours keeps the block a while longer, never frees it early).
    fn owner_gone(cb: &ContextBlock) -> bool {
        #[cfg(all(target_os = "linux", not(miri)))]
        if super::super::ebpf::owner_exited(cb) {
            return true;
        }
        // Relaxed: written by the owner at its registration, which the
        // registry's lock ordered before this read.
        let tid = cb.peer.tid.load(Ordering::Relaxed);
        // SAFETY: signal 0 only checks that the thread exists.
        tid != 0
            && unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid as libc::c_int, 0) }
                != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    }

    /// Takes the late blocks whose threads are gone out of the late list (with
    /// the registry's lock held); the caller gives them back after letting go
    /// of the lock ([`give_back_gone`]: detaching from an emulated scheduler
    /// takes that scheduler's lock, which must not be taken under ours). Each
    /// late block's thread may still run (in a destructor round the C library
    /// still runs), so each is checked, never assumed gone.
    fn take_gone(blocks: &mut Blocks) -> Vec<&'static ContextBlock> {
        let mut gone = Vec::new();
        blocks.late.retain(|&cb| {
            // Relaxed: a block the owner gave back itself (another round ran)
            // is no longer late; only `give_back` clears `in_use`.
            if !cb.peer.in_use.load(Ordering::Relaxed) {
                return false;
            }
            if owner_gone(cb) {
                gone.push(cb);
                return false;
            }
            true
        });
        gone
    }

    /// Gives back the blocks [`take_gone`] took (without the registry's lock).
    fn give_back_gone(gone: Vec<&'static ContextBlock>) -> usize {
        let n = gone.len();
        for cb in gone {
            super::super::emulated::detach_exiting(cb);
            give_back(cb, true);
        }
        n
    }

    /// The calling thread's block, registering it on first use.
    ///
    /// Callable from anywhere on the thread, also from a destructor that runs
    /// as it exits: a thread-local's `Drop` uses the thread's own block (it
    /// goes back after every thread-local destructor); a thread-specific-data
    /// destructor that runs after `sched`'s own (in a later round of the C
    /// library's) registers the thread again, and that block is taken back
    /// once the thread is gone ([`reclaim_exited_threads`](crate::sched::reclaim_exited_threads)).
    /// A child of `fork` may call it at any moment, whatever its parent's
    /// threads were doing at the fork: the registry's lock is held across
    /// `fork`, and nothing here waits for another process's initialisation.
    #[inline]
    pub fn current() -> &'static ContextBlock {
        let p = CURRENT.with(|c| c.get());
        if !p.is_null() {
            // SAFETY: registry blocks are leaked and never freed.
            return unsafe { &*p };
        }
        register()
    }

    /// The calling thread's block if it has one, without registering. Reads only a
    /// const thread-local, so it is async-signal-safe.
    #[inline]
    pub fn current_if_registered() -> Option<&'static ContextBlock> {
        let p = CURRENT.try_with(|c| c.get()).ok()?;
        // SAFETY: registry blocks are leaked and never freed.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    #[cold]
    fn register() -> &'static ContextBlock {
        let key = exit_key();
        install_fork_handlers();
        let late = EXITING.with(|e| e.get());
        let (index, cb) = loop {
            let mut blocks = BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
            super::super::stall::point(super::super::stall::SCHED_REGISTER_LOCKED);
            let take_free = |all: &[&'static ContextBlock]| {
                all.iter().copied().enumerate().find(|(_, b)| {
                    // Relaxed load first: a failing CAS would still take every busy
                    // block's cache line away from its owner.
                    // Acquire: pairs with the Release store in `give_back`.
                    !b.peer.in_use.load(Ordering::Relaxed)
                        && b.peer
                            .in_use
                            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                            .is_ok()
                })
            };
            let free = take_free(&blocks.all);
            if free.is_none() && !blocks.late.is_empty() {
                // Out of free blocks: take back those of late threads gone
                // since, then look again.
                let gone = take_gone(&mut blocks);
                if !gone.is_empty() {
                    drop(blocks);
                    give_back_gone(gone);
                    continue;
                }
            }
            let (index, cb) = free.unwrap_or_else(|| {
                let b: &'static ContextBlock = Box::leak(Box::new(ContextBlock::new()));
                b.peer.in_use.store(true, Ordering::Relaxed);
                blocks.all.push(b);
                (blocks.all.len() - 1, b)
            });
            if late {
                blocks.late.push(cb);
            }
            break (index, cb);
        };
        // A stale peer (a lock releaser still holding the previous owner's block)
        // may have made the free block `OtherUnpreemptable`: start clean.
        cb.reset_for_new_owner();
        cb.peer
            .id
            .store(NEXT_ID.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        // SAFETY: gettid and pthread_self have no preconditions.
        let (tid, pt) = unsafe { (libc::gettid(), libc::pthread_self()) };
        cb.peer.tid.store(tid as u32, Ordering::Relaxed);
        #[allow(clippy::unnecessary_cast)] // pthread_t is u64 only on 64-bit Linux
        cb.peer.pthread.store(pt as u64, Ordering::Relaxed);
        CURRENT.with(|c| c.set(cb));
        // The kernel's answers for this thread (loads the eBPF program at the
        // process's first registration, where permitted). The block's index is
        // its slot: stable, since blocks are recycled and never freed.
        #[cfg(all(target_os = "linux", not(miri)))]
        super::super::ebpf::on_register(cb, index);
        #[cfg(not(all(target_os = "linux", not(miri))))]
        let _ = index;
        match key {
            // SAFETY: `key` is a live key; the value is the block, which
            // `on_thread_exit` expects. Fails only for lack of memory (ENOMEM):
            // the block then stays in use (bounded by the threads that hit it).
            Some(key) => unsafe {
                libc::pthread_setspecific(key, cb as *const ContextBlock as *const libc::c_void);
            },
            // Touch OWNER so its destructor runs at thread exit. If the thread is
            // already tearing down its thread-locals the block is late (above).
            None => {
                let _ = OWNER.try_with(|_| ());
            }
        }
        cb
    }

    /// All blocks currently owned by live threads (and late blocks whose
    /// threads have not yet been found gone).
    pub fn live() -> Vec<&'static ContextBlock> {
        let blocks = BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
        blocks
            .all
            .iter()
            .copied()
            .filter(|b| b.peer.in_use.load(Ordering::Relaxed))
            .collect()
    }

    /// Takes back the blocks of threads that registered after their exit
    /// destructor and have exited since; returns how many.
    pub fn reclaim_exited() -> usize {
        let gone = take_gone(&mut BLOCKS.lock().unwrap_or_else(|e| e.into_inner()));
        give_back_gone(gone)
    }
}

#[cfg(loom)]
mod imp {
    use super::*;

    loom::thread_local! {
        static CURRENT: Cell<*const ContextBlock> = Cell::new(std::ptr::null());
    }

    /// Under loom each model thread gets a leaked block of its own.
    pub fn current() -> &'static ContextBlock {
        CURRENT.with(|c| {
            if c.get().is_null() {
                let b: &'static ContextBlock = Box::leak(Box::new(ContextBlock::new()));
                b.peer
                    .id
                    .store(NEXT_ID.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
                c.set(b);
            }
            // SAFETY: leaked above, never freed.
            unsafe { &*c.get() }
        })
    }

    /// See the non-loom version.
    pub fn current_if_registered() -> Option<&'static ContextBlock> {
        let p = CURRENT.with(|c| c.get());
        // SAFETY: leaked in `current`, never freed.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// Not tracked under loom.
    pub fn live() -> Vec<&'static ContextBlock> {
        Vec::new()
    }
}

#[cfg(not(loom))]
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
#[cfg(loom)]
loom::lazy_static! {
    static ref NEXT_ID: AtomicU64 = AtomicU64::new(1);
}

#[cfg(not(loom))]
pub use imp::reclaim_exited;
pub use imp::{current, current_if_registered, live};
