//! Attaching threads to virtual processors, detaching them (also when they exit
//! or fork), and a thread's own yield.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::sched::context::{ContextBlock, NO_PROCESSOR};
use crate::sched::registry;
use crate::sched::state::{Actor, ThreadState};
use crate::sync::Ordering;
use crate::util::clock::now_ns;

use super::handler::wait_resumed;
use super::tick::{Attached, state_to_restore};
use super::{Emulated, MAX_ATTACHED, SchedError, Shared, publish, refresh_alone};

impl Emulated {
    /// Attaches the calling thread to virtual processor `vproc`; it is time-sliced
    /// there until the returned guard is dropped.
    pub fn attach(&self, vproc: u32) -> Result<Attachment<'_>, SchedError> {
        let processors = self.shared.cfg.processors;
        if vproc >= processors {
            return Err(SchedError::BadVproc {
                vproc,
                processors,
                reason: "no such virtual processor",
            });
        }
        if self.shared.stopped.load(Ordering::Acquire) {
            return Err(SchedError::Os("the scheduler has stopped".into()));
        }
        let cb = crate::sched::current();
        if is_attached(cb) {
            return Err(SchedError::AlreadyAttached);
        }
        {
            let mut inner = self.shared.lock();
            if inner.threads.len() == MAX_ATTACHED {
                return Err(SchedError::BadVproc {
                    vproc,
                    processors,
                    reason: "the pseudo-scheduler already has its maximum of 4096 attached threads",
                });
            }
            crate::sched::stall::point(crate::sched::stall::SCHED_EMU_ATTACH);
            inner.threads.push(Attached::new(cb, vproc));
            let eff = vproc % inner.available;
            // Relaxed: informational (see ContextBlock::processor).
            cb.owner.vproc.store(vproc, Ordering::Relaxed);
            cb.peer.processor.store(eff, Ordering::Relaxed);
            // A no-preempt section entered before attaching needs nothing
            // more: the request word is what the scheduler reads, on every
            // backend (and it reads it under this lock after we leave it).
            cb.owner.yielded.store(false, Ordering::Relaxed);
            let strong = Arc::into_raw(self.shared.clone()) as *mut ();
            // Release: pairs with the Acquire loads of `emu` (is_attached, the handler).
            cb.owner.emu.store(strong, Ordering::Release);
            // Relaxed: see `Shared::blocking`.
            self.shared
                .attached
                .store(inner.threads.len() as u32, Ordering::Relaxed);
            refresh_alone(&self.shared, &inner);
            publish(&inner);
        }
        self.shared.kick();
        Ok(Attachment {
            _emu: PhantomData,
            _not_send: PhantomData,
        })
    }
}

/// The calling thread's attachment to a virtual processor; detaches on drop.
#[derive(Debug)]
pub struct Attachment<'a> {
    _emu: PhantomData<&'a Emulated>,
    _not_send: PhantomData<*mut ()>,
}

impl Drop for Attachment<'_> {
    fn drop(&mut self) {
        detach(crate::sched::current());
    }
}

/// Whether `cb`'s thread is attached to a pseudo-scheduler.
#[inline]
pub fn is_attached(cb: &ContextBlock) -> bool {
    // Relaxed: only the owning thread changes its own attachment.
    !cb.owner.emu.load(Ordering::Relaxed).is_null()
}

/// The Shared of an attached thread.
pub(super) fn shared_of(cb: &ContextBlock) -> Option<&Shared> {
    // Acquire: pairs with the Release store in `attach`.
    let p = cb.owner.emu.load(Ordering::Acquire) as *const Shared;
    // SAFETY: a non-null `emu` holds a strong count on its Shared, released only by
    // `detach` on this same thread, so the Shared outlives this borrow.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Detaches `cb` (owner thread only). No signal is sent to a thread after it is
/// removed under the lock; one already pending finds it not `Preempted` and returns.
fn detach(cb: &'static ContextBlock) {
    let p = cb.owner.emu.load(Ordering::Acquire) as *const Shared;
    if p.is_null() {
        return;
    }
    // SAFETY: see `shared_of`.
    let shared = unsafe { &*p };
    shared.with_lock_as_user(|inner| {
        inner.threads.retain(|t| !std::ptr::eq(t.cb, cb));
        for v in &mut inner.vprocs {
            if v.running == cb.id() {
                v.running = 0;
            }
        }
        cb.owner.emu.store(std::ptr::null_mut(), Ordering::Release);
        cb.owner.vproc.store(NO_PROCESSOR, Ordering::Relaxed);
        // Relaxed: see `Shared::blocking`.
        shared
            .attached
            .store(inner.threads.len() as u32, Ordering::Relaxed);
        refresh_alone(shared, inner);
        publish(inner);
    });
    shared.kick();
    // SAFETY: `p` came from `Arc::into_raw` in `attach`; this releases that count.
    drop(unsafe { Arc::from_raw(p) });
    // Relaxed: the scheduler no longer writes it (we left its list under its lock,
    // whose release/acquire orders its last write before this one).
    cb.sched.warning.store(false, Ordering::Relaxed);
}

/// Called by the registry when an attached thread exits without detaching.
#[cfg(not(loom))]
pub(crate) fn detach_exiting(cb: &'static ContextBlock) {
    detach(cb);
}

/// `pthread_atfork` child handler: a forked child is a copy of the forking thread
/// alone. No scheduler thread runs there to resume it, and the copied scheduler
/// state may be mid-update (another thread may have held its lock at the fork), so
/// the child's thread is detached without touching the scheduler: its `Shared` is
/// leaked in the child, and `yield_now`, `Attachment::drop` and exit see a thread
/// that is not attached. Async-signal-safe: a const thread-local read, atomics and
/// `gettid`.
pub(super) extern "C" fn detach_in_forked_child() {
    let Some(cb) = registry::current_if_registered() else {
        return;
    };
    // Relaxed (throughout): the child has one thread, this one.
    if cb
        .owner
        .emu
        .swap(std::ptr::null_mut(), Ordering::Relaxed)
        .is_null()
    {
        return;
    }
    cb.owner.vproc.store(NO_PROCESSOR, Ordering::Relaxed);
    cb.peer.processor.store(NO_PROCESSOR, Ordering::Relaxed);
    cb.sched.warning.store(false, Ordering::Relaxed);
    cb.owner.yielded.store(false, Ordering::Relaxed);
    // Preempted just before the fork (the signal is not inherited): nobody will
    // resume the child, so sched's kernel side does, restoring the saved state.
    let _ = cb.transition(ThreadState::Preempted, state_to_restore(cb), Actor::Kernel);
    cb.sched
        .saved_state
        .store(ThreadState::Preemptable as u32, Ordering::Relaxed);
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    cb.peer.tid.store(tid as u32, Ordering::Relaxed);
}

/// Yield of an attached thread: give the virtual processor to the others now.
pub(crate) fn yield_attached(cb: &'static ContextBlock) {
    let Some(shared) = shared_of(cb) else { return };
    // Inside a no-preempt section (not paused) a yield is only a hint: ignore
    // it. (The owner's own word: exact here.)
    if cb.no_preempt_in_force() {
        return;
    }
    // Relaxed: a hint; the worst case is one needless round trip to the scheduler.
    let v = cb.peer.processor.load(Ordering::Relaxed) as usize;
    if shared.stopped.load(Ordering::Acquire)
        || shared
            .alone
            .get(v)
            .is_none_or(|a| a.load(Ordering::Relaxed))
    {
        return;
    }
    match cb.transition(
        ThreadState::Preemptable,
        ThreadState::Preempted,
        Actor::Kernel,
    ) {
        Ok(()) => {
            cb.owner
                .preempt_stopped_ns
                .store(now_ns(), Ordering::Relaxed);
            // Release: the scheduler's Acquire swap sees the yield after the state.
            cb.owner.yielded.store(true, Ordering::Release);
            shared.kick();
            wait_resumed(cb, shared.blocking());
        }
        // The scheduler preempted us first: its signal is on the way; wait as it would.
        Err(_) if cb.state() == ThreadState::Preempted => wait_resumed(cb, shared.blocking()),
        // A peer handed us a lock (`OtherUnpreemptable`): we keep running.
        Err(_) => {}
    }
}
