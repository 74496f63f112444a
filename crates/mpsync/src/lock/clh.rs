//! CLH: the implicit-queue lock of Craig (1993) and Magnusson, Landin &
//! Hagersten (1994), the base of He, Scherer & Scott's CLH-TP.
//!
//! An acquirer swaps its node into the tail and spins on its *predecessor's*
//! node until that says "released". Unlike MCS there is no `next` link: the
//! releaser writes only its own node, so release is a single store — but the
//! releaser's node then belongs to the successor, who recycles it, and the
//! acquirer takes ownership of the predecessor's node in exchange.
//!
//! Here an empty queue is a null tail (so the lock is `const`-constructible and
//! owns no node while free): a releaser with no successor swings the tail back to
//! null and keeps its node. Nodes come from a per-thread cache; the guard carries
//! the acquisition's node and, once acquired, owns the predecessor's.
//!
//! Uses `sched`: nothing. Progress: FIFO, starvation-free.
//!
//! ```
//! use mpsync::lock::{Mutex, Clh};
//! let m: Mutex<Clh, Vec<u8>> = Mutex::new(vec![]);
//! m.lock().push(1);
//! let g = m.lock();
//! let other: Mutex<Clh, u8> = Mutex::new(0);
//! *other.lock() += 1; // nested acquisitions each take their own node
//! drop(g);
//! ```

use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use crate::sync::{AtomicBool, AtomicPtr, Ordering, spin_loop};

/// A CLH node: `locked` while its owner holds or waits for the lock.
#[derive(Debug)]
struct ClhNode {
    locked: AtomicBool,
}

super::node_cache!(
    ClhNode,
    ClhNode {
        locked: AtomicBool::new(false)
    }
);

/// The CLH queue lock.
#[derive(Debug)]
pub struct Clh {
    tail: AtomicPtr<ClhNode>,
}

/// Guard state of [`Clh`]: the acquisition's node. Not `Send`.
#[derive(Debug)]
pub struct ClhGuard {
    node: NonNull<ClhNode>,
    _not_send: PhantomData<*mut ()>,
}

super::loom_const_new! {
    impl[] Clh {
        /// An unlocked lock.
        new => Self {
            tail: AtomicPtr::new(ptr::null_mut()),
        }
    }
}

impl Default for Clh {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: the holder is the thread whose node follows a released node (or an
// empty queue) in swap order; each node has one successor, which alone waits on
// it. The Acquire load of the predecessor's flag pairs with its Release clear.
unsafe impl lock_api::RawMutex for Clh {
    super::loom_const_init!(Clh);

    type Guard = ClhGuard;

    fn lock(&self) -> Self::Guard {
        let node = take_node();
        // SAFETY: ours until published by the swap.
        // Relaxed: published by the AcqRel swap below.
        unsafe { node.as_ref() }
            .locked
            .store(true, Ordering::Relaxed);
        // AcqRel: Release publishes our flag to the successor; Acquire orders us
        // after the predecessor's enqueue.
        let pred = self.tail.swap(node.as_ptr(), Ordering::AcqRel);
        if let Some(pred) = NonNull::new(pred) {
            // SAFETY: a predecessor's node is not reused before its successor (us)
            // takes it over below.
            let p = unsafe { pred.as_ref() };
            // Acquire: pairs with the predecessor's Release clear in `unlock`.
            while p.locked.load(Ordering::Acquire) {
                spin_loop();
            }
            // SAFETY: the predecessor released and handed its node to us; nobody
            // else refers to it.
            unsafe { return_node(pred) };
        }
        ClhGuard {
            node,
            _not_send: PhantomData,
        }
    }

    fn try_lock(&self) -> Option<Self::Guard> {
        let node = take_node();
        // SAFETY/Relaxed: as in `lock`.
        unsafe { node.as_ref() }
            .locked
            .store(true, Ordering::Relaxed);
        // AcqRel: as the swap in `lock`; only on an empty queue.
        match self.tail.compare_exchange(
            ptr::null_mut(),
            node.as_ptr(),
            Ordering::AcqRel,
            Ordering::Relaxed,
        ) {
            Ok(_) => Some(ClhGuard {
                node,
                _not_send: PhantomData,
            }),
            Err(_) => {
                // SAFETY: never published.
                unsafe { return_node(node) };
                None
            }
        }
    }

    unsafe fn unlock(&self, guard: Self::Guard) {
        let node = guard.node;
        // No successor: empty the queue and keep our node.
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
            // SAFETY: the queue is empty; nobody refers to our node.
            unsafe { return_node(node) };
            return;
        }
        // A successor waits on our node and will take it over.
        // SAFETY: the node stays valid until the successor has seen this store.
        // Release: publishes the critical section to the successor's Acquire.
        unsafe { node.as_ref() }
            .locked
            .store(false, Ordering::Release);
    }

    fn is_locked(&self) -> bool {
        // Relaxed: a momentary snapshot.
        !self.tail.load(Ordering::Relaxed).is_null()
    }
}
