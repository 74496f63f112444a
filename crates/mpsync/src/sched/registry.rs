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
    use std::sync::{Mutex, OnceLock};

    /// Every block ever made; a block is free when `in_use` is false.
    static BLOCKS: Mutex<Vec<&'static ContextBlock>> = Mutex::new(Vec::new());

    thread_local! {
        /// The calling thread's block. Const-initialized with no destructor, so
        /// reading it is a plain TLS load: safe in the preemption signal handler,
        /// and valid until the thread's very end (after every destructor).
        static CURRENT: Cell<*const ContextBlock> = const { Cell::new(std::ptr::null()) };
        /// Fallback when no POSIX key could be made: returns the block when the
        /// thread's thread-locals are destroyed.
        static OWNER: Owner = const { Owner };
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
    /// (`PTHREAD_DESTRUCTOR_ITERATIONS` rounds): the block still goes back.
    fn exit_key() -> Option<libc::pthread_key_t> {
        static KEY: OnceLock<Option<libc::pthread_key_t>> = OnceLock::new();
        *KEY.get_or_init(|| {
            let mut key: libc::pthread_key_t = 0;
            // SAFETY: `key` is a valid out-pointer; `on_thread_exit` is an
            // `extern "C"` destructor that accepts the values we store (blocks).
            let r = unsafe { libc::pthread_key_create(&mut key, Some(on_thread_exit)) };
            (r == 0).then_some(key)
        })
    }

    /// Key destructor: `p` is the exiting thread's block (the C library has
    /// already cleared the key's value). Safe for any `p`: `release` acts only on
    /// the calling thread's own block.
    extern "C" fn on_thread_exit(p: *mut libc::c_void) {
        release(p as *const ContextBlock);
    }

    struct Owner;

    impl Drop for Owner {
        fn drop(&mut self) {
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
        // The kernel stops answering for this thread (on the thread itself).
        #[cfg(all(target_os = "linux", not(miri)))]
        super::super::ebpf::on_release(cb);
        CURRENT.with(|c| c.set(std::ptr::null()));
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

    /// The calling thread's block, registering it on first use.
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
        let (index, cb) = {
            let mut blocks = BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
            let free = blocks.iter().copied().enumerate().find(|(_, b)| {
                // Relaxed load first: a failing CAS would still take every busy
                // block's cache line away from its owner.
                // Acquire: pairs with the Release store in `release`.
                !b.peer.in_use.load(Ordering::Relaxed)
                    && b.peer
                        .in_use
                        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
            });
            free.unwrap_or_else(|| {
                let b: &'static ContextBlock = Box::leak(Box::new(ContextBlock::new()));
                b.peer.in_use.store(true, Ordering::Relaxed);
                blocks.push(b);
                (blocks.len() - 1, b)
            })
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
            // already tearing down its thread-locals the block stays in use.
            None => {
                let _ = OWNER.try_with(|_| ());
            }
        }
        cb
    }

    /// All blocks currently owned by live threads.
    pub fn live() -> Vec<&'static ContextBlock> {
        let blocks = BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
        blocks
            .iter()
            .copied()
            .filter(|b| b.peer.in_use.load(Ordering::Relaxed))
            .collect()
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

pub use imp::{current, current_if_registered, live};
