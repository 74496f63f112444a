//! Hands each thread a [`ContextBlock`] on first use and takes it back when the
//! thread exits. Blocks are leaked once and recycled, so `&'static` is sound.

use std::cell::Cell;

use crate::sync::{AtomicU64, Ordering};

use super::context::{ContextBlock, NO_PROCESSOR};

#[cfg(not(loom))]
mod imp {
    use super::*;
    use std::sync::Mutex;

    /// Every block ever made; a block is free when `in_use` is false.
    static BLOCKS: Mutex<Vec<&'static ContextBlock>> = Mutex::new(Vec::new());

    thread_local! {
        /// The calling thread's block. Const-initialized with no destructor, so
        /// reading it is a plain TLS load: safe in the preemption signal handler.
        static CURRENT: Cell<*const ContextBlock> = const { Cell::new(std::ptr::null()) };
        /// Returns the block to the registry when the thread exits.
        static OWNER: Owner = const { Owner };
    }

    struct Owner;

    impl Drop for Owner {
        fn drop(&mut self) {
            let p = CURRENT.with(|c| c.replace(std::ptr::null()));
            if p.is_null() {
                return;
            }
            // SAFETY: registry blocks are leaked and never freed.
            let cb: &'static ContextBlock = unsafe { &*p };
            super::super::emulated::detach_exiting(cb);
            cb.tid.store(0, Ordering::Relaxed);
            cb.pthread.store(0, Ordering::Relaxed);
            cb.processor.store(NO_PROCESSOR, Ordering::Relaxed);
            cb.heartbeat.store(0, Ordering::Relaxed);
            // Release: the block's reset fields are visible to the next owner, whose
            // Acquire CAS on `in_use` in `register` pairs with this store.
            cb.in_use.store(false, Ordering::Release);
        }
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
        let cb = {
            let mut blocks = BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
            let free = blocks.iter().copied().find(|b| {
                // Acquire: pairs with the Release store in `Owner::drop`.
                b.in_use
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            });
            free.unwrap_or_else(|| {
                let b: &'static ContextBlock = Box::leak(Box::new(ContextBlock::new()));
                b.in_use.store(true, Ordering::Relaxed);
                blocks.push(b);
                b
            })
        };
        cb.id
            .store(NEXT_ID.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        // SAFETY: gettid and pthread_self have no preconditions.
        let (tid, pt) = unsafe { (libc::gettid(), libc::pthread_self()) };
        cb.tid.store(tid as u32, Ordering::Relaxed);
        #[allow(clippy::unnecessary_cast)] // pthread_t is u64 only on 64-bit Linux
        cb.pthread.store(pt as u64, Ordering::Relaxed);
        CURRENT.with(|c| c.set(cb));
        // Touch OWNER so its destructor runs at thread exit. If the thread is already
        // tearing down its TLS the block simply stays in use (bounded leak).
        let _ = OWNER.try_with(|_| ());
        cb
    }

    /// All blocks currently owned by live threads.
    pub fn live() -> Vec<&'static ContextBlock> {
        let blocks = BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
        blocks
            .iter()
            .copied()
            .filter(|b| b.in_use.load(Ordering::Relaxed))
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
                b.id.store(NEXT_ID.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
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
