//! Queued: the MCS list-based queue lock (Mellor-Crummey & Scott 1991), the
//! "Queued" lock of Wisniewski, Kontothanassis & Scott, IPPS 1994 §4.1
//! (papers/003_…). Its -no-preempt form is [`Np<Queued>`](super::Np).
//!
//! Each acquirer swaps its own queue node into the tail and spins on a flag in
//! that node until its predecessor hands the lock over, so waiters spin locally
//! and are served in FIFO order. That order is what makes it fragile under
//! multiprogramming: the lock is handed to the next waiter even if that waiter is
//! preempted, and everybody behind waits for it to run again (003 §3).
//!
//! Queue nodes come from a per-thread cache, so callers never supply one; every
//! acquisition takes its own node (nesting works), and the guard carries it.
//! A releaser whose successor has swapped itself in but not yet linked waits
//! for the link, spinning and then yielding (`wait_for_link` in `lock`).
//! Uses `sched`: `yield_now` (only in that wait). Progress: starvation-free, FIFO.
//!
//! ```
//! use mpsync::lock::{Mutex, Queued};
//! let m: Mutex<Queued, Vec<u32>> = Mutex::new(Vec::new());
//! m.lock().push(3);
//! let outer = m.lock();
//! let other: Mutex<Queued, u8> = Mutex::new(0); // a second lock while holding the first
//! *other.lock() += 1;
//! drop(outer);
//! ```

use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use crate::sched::stall;
use crate::sync::{AtomicBool, AtomicPtr, Ordering, spin_loop};

/// A queue node: one per acquisition in progress.
#[derive(Debug)]
struct QNode {
    /// The successor in the queue, written by it.
    next: AtomicPtr<QNode>,
    /// True while the owner must wait; the predecessor clears it to hand over.
    waiting: AtomicBool,
}

impl QNode {
    fn new() -> Self {
        Self {
            next: AtomicPtr::new(ptr::null_mut()),
            waiting: AtomicBool::new(false),
        }
    }
}

super::node_cache!(QNode, QNode::new());

/// The MCS queue lock.
#[derive(Debug)]
pub struct Queued {
    tail: AtomicPtr<QNode>,
}

/// Guard state of [`Queued`]: the acquisition's queue node. Not `Send`: the node
/// returns to the acquiring thread's cache.
#[derive(Debug)]
pub struct QueuedGuard {
    node: NonNull<QNode>,
    _not_send: PhantomData<*mut ()>,
}

impl Queued {
    /// An unlocked lock.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            tail: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// An unlocked lock.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            tail: AtomicPtr::new(ptr::null_mut()),
        }
    }
}

impl Default for Queued {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: a thread owns the lock from the moment its node becomes the tail with no
// predecessor, or its predecessor clears its `waiting` flag, until it hands over or
// CASes the tail back to null; exactly one node at a time is in that position. The
// Acquire on `waiting`/the tail swap pairs with the Release of the hand-over.
unsafe impl lock_api::RawMutex for Queued {
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(not(loom))]
    const INIT: Self = Self::new();
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(loom)]
    const INIT: Self = panic!("under loom, use Queued::new()");

    type Guard = QueuedGuard;

    fn lock(&self) -> Self::Guard {
        let node = take_node();
        // SAFETY: `node` is ours alone until published by the swap below.
        let me = unsafe { node.as_ref() };
        // Relaxed: both stores are published by the AcqRel swap of the tail.
        me.next.store(ptr::null_mut(), Ordering::Relaxed);
        me.waiting.store(true, Ordering::Relaxed);
        // AcqRel: Release publishes our node's fields to the successor that swaps
        // after us; Acquire orders us after the previous holder's enqueue.
        let pred = self.tail.swap(node.as_ptr(), Ordering::AcqRel);
        if !pred.is_null() {
            // The window a releaser may wait on (`super::wait_for_link`).
            stall::point(stall::QUEUE_LOCK_LINK);
            // SAFETY: a predecessor's node stays valid until it has handed the lock
            // to us, which it cannot do before reading the `next` we write here.
            // Release: publishes our initialized node to the predecessor's Acquire load.
            unsafe { (*pred).next.store(node.as_ptr(), Ordering::Release) };
            // Acquire: pairs with the predecessor's Release hand-over in `unlock`.
            while me.waiting.load(Ordering::Acquire) {
                spin_loop();
            }
        }
        QueuedGuard {
            node,
            _not_send: PhantomData,
        }
    }

    fn try_lock(&self) -> Option<Self::Guard> {
        let node = take_node();
        // SAFETY: as in `lock`.
        let me = unsafe { node.as_ref() };
        me.next.store(ptr::null_mut(), Ordering::Relaxed);
        me.waiting.store(false, Ordering::Relaxed);
        // AcqRel: as the swap in `lock`; only succeeds on an empty queue.
        match self.tail.compare_exchange(
            ptr::null_mut(),
            node.as_ptr(),
            Ordering::AcqRel,
            Ordering::Relaxed,
        ) {
            Ok(_) => Some(QueuedGuard {
                node,
                _not_send: PhantomData,
            }),
            Err(_) => {
                // SAFETY: the CAS failed, so no queue refers to `node`.
                unsafe { return_node(node) };
                None
            }
        }
    }

    unsafe fn unlock(&self, guard: Self::Guard) {
        let node = guard.node;
        // SAFETY: the caller's contract: `guard` came from this lock, so `node` is
        // the holder's node, valid until we return it below.
        let me = unsafe { node.as_ref() };
        // Acquire: pairs with the successor's Release store of `next` in `lock`.
        let mut next = me.next.load(Ordering::Acquire);
        if next.is_null() {
            // No successor yet: try to empty the queue.
            // Release: publishes the critical section to the next acquirer's swap.
            if self
                .tail
                .compare_exchange(
                    node.as_ptr(),
                    ptr::null_mut(),
                    Ordering::Release,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                // SAFETY: the queue is empty: nobody refers to our node.
                unsafe { return_node(node) };
                return;
            }
            // A successor swapped itself in and is about to link: wait for it
            // (spin, then yield: see `wait_for_link` for what bounds this).
            // Acquire: pairs with the successor's Release store of `next`.
            next = super::wait_for_link(|| NonNull::new(me.next.load(Ordering::Acquire))).as_ptr();
        }
        // SAFETY: the successor's node is valid while it waits for this hand-over.
        // Release: publishes the critical section to the successor's Acquire spin.
        unsafe { (*next).waiting.store(false, Ordering::Release) };
        // SAFETY: the successor has linked itself (we read its pointer), so nobody
        // reads our node any more.
        unsafe { return_node(node) };
    }

    fn is_locked(&self) -> bool {
        // Relaxed: a momentary snapshot, documented as possibly stale.
        !self.tail.load(Ordering::Relaxed).is_null()
    }
}
