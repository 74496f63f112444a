//! Peer structures the harness measures mpsync's against: Treiber stacks over the
//! reclamation crates people use today (`crossbeam-epoch`, `seize`, `haphazard`).
//! These are the textbook Treiber stack written against each crate's documented
//! API, as a user of that crate would write it; they hold `u64` (all the
//! experiments need). The queues need no wrapper: `crossbeam-queue`'s `SegQueue`
//! and `concurrent-queue`'s unbounded queue are used as they come.

use std::cell::RefCell;
use std::mem::ManuallyDrop;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

/// A Treiber stack over `crossbeam-epoch`.
#[derive(Debug, Default)]
pub struct EpochTreiber {
    head: crossbeam_epoch::Atomic<EpochNode>,
}

#[derive(Debug)]
struct EpochNode {
    value: ManuallyDrop<u64>,
    next: crossbeam_epoch::Atomic<EpochNode>,
}

impl EpochTreiber {
    /// Pushes `v`.
    pub fn push(&self, v: u64) {
        use crossbeam_epoch::Owned;
        let mut node = Owned::new(EpochNode {
            value: ManuallyDrop::new(v),
            next: crossbeam_epoch::Atomic::null(),
        });
        let guard = crossbeam_epoch::pin();
        loop {
            // Relaxed: the CAS below (Release) publishes the node; the old head is
            // only stored into our node, not dereferenced.
            let head = self.head.load(Ordering::Relaxed, &guard);
            node.next.store(head, Ordering::Relaxed);
            // Release: publishes the node's fields to the popper's Acquire load.
            match self.head.compare_exchange(
                head,
                node,
                Ordering::Release,
                Ordering::Relaxed,
                &guard,
            ) {
                Ok(_) => return,
                Err(e) => node = e.new,
            }
        }
    }

    /// Pops the top value.
    pub fn pop(&self) -> Option<u64> {
        let guard = crossbeam_epoch::pin();
        loop {
            // Acquire: pairs with the pusher's Release CAS.
            let head = self.head.load(Ordering::Acquire, &guard);
            // SAFETY: loaded under `guard`; nodes are destroyed only through
            // `defer_destroy`, after every guard pinned now is gone.
            let node = unsafe { head.as_ref() }?;
            // Relaxed: the node's fields were published by the Acquire above.
            let next = node.next.load(Ordering::Relaxed, &guard);
            if self
                .head
                .compare_exchange(head, next, Ordering::Relaxed, Ordering::Relaxed, &guard)
                .is_ok()
            {
                let v = *node.value;
                // SAFETY: unlinked by our CAS: no new reference can be made, and
                // it is destroyed once the current pins are gone.
                unsafe { guard.defer_destroy(head) };
                return Some(v);
            }
        }
    }
}

impl Drop for EpochTreiber {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no other thread can access the stack.
        let guard = unsafe { crossbeam_epoch::unprotected() };
        let mut cur = self.head.load(Ordering::Relaxed, guard);
        while !cur.is_null() {
            // SAFETY: exclusively ours (see above); each node freed once.
            let owned = unsafe { cur.into_owned() };
            cur = owned.next.load(Ordering::Relaxed, guard);
        }
    }
}

/// A Treiber stack over `seize` (Hyaline reference-counted batches).
#[derive(Debug)]
pub struct SeizeTreiber {
    head: AtomicPtr<SeizeNode>,
    collector: seize::Collector,
}

#[derive(Debug)]
struct SeizeNode {
    value: u64,
    next: *mut SeizeNode,
}

impl Default for SeizeTreiber {
    fn default() -> Self {
        Self {
            head: AtomicPtr::new(ptr::null_mut()),
            collector: seize::Collector::new(),
        }
    }
}

impl SeizeTreiber {
    /// Pushes `v`.
    pub fn push(&self, v: u64) {
        use seize::Guard;
        let node = Box::into_raw(Box::new(SeizeNode {
            value: v,
            next: ptr::null_mut(),
        }));
        let guard = self.collector.enter();
        loop {
            // Relaxed: the head is only stored into our node, not dereferenced.
            let head = guard.protect(&self.head, Ordering::Relaxed);
            // SAFETY: `node` is ours until the CAS publishes it.
            unsafe { (*node).next = head };
            // Release: publishes the node's fields to the popper's Acquire protect.
            if self
                .head
                .compare_exchange(head, node, Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }

    /// Pops the top value.
    pub fn pop(&self) -> Option<u64> {
        use seize::Guard;
        let guard = self.collector.enter();
        loop {
            // Acquire: pairs with the pusher's Release CAS.
            let head = guard.protect(&self.head, Ordering::Acquire);
            if head.is_null() {
                return None;
            }
            // SAFETY: protected by `guard`: not reclaimed while it is active.
            let (value, next) = unsafe { ((*head).value, (*head).next) };
            if self
                .head
                .compare_exchange(head, next, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                // SAFETY: unlinked by our CAS, retired once, allocated by Box.
                unsafe { self.collector.retire(head, seize::reclaim::boxed) };
                return Some(value);
            }
        }
    }
}

impl Drop for SeizeTreiber {
    fn drop(&mut self) {
        let mut cur = *self.head.get_mut();
        while !cur.is_null() {
            // SAFETY: `&mut self`: the remaining nodes are exclusively ours and
            // were never retired; each is freed once.
            let node = unsafe { Box::from_raw(cur) };
            cur = node.next;
        }
    }
}

/// A Treiber stack over `haphazard` (hazard pointers, global domain).
#[derive(Debug)]
pub struct HaphazardTreiber {
    head: haphazard::AtomicPtr<HazNode>,
}

#[derive(Debug)]
struct HazNode {
    value: u64,
    next: *mut HazNode,
}

// SAFETY: `next` is written only before the node is published and read-only
// after; the node's value is a plain u64.
unsafe impl Send for HazNode {}
// SAFETY: as above.
unsafe impl Sync for HazNode {}

thread_local! {
    /// One hazard pointer per thread, reused across operations (as haphazard's
    /// docs recommend: acquiring one is the slow part).
    static HP: RefCell<haphazard::HazardPointer<'static>> =
        RefCell::new(haphazard::HazardPointer::new());
}

impl Default for HaphazardTreiber {
    fn default() -> Self {
        // SAFETY: a null pointer is a valid (empty) head.
        Self {
            head: unsafe { haphazard::AtomicPtr::new(ptr::null_mut()) },
        }
    }
}

impl HaphazardTreiber {
    /// Pushes `v`.
    pub fn push(&self, v: u64) {
        let node = Box::into_raw(Box::new(HazNode {
            value: v,
            next: ptr::null_mut(),
        }));
        loop {
            let head = self.head.load_ptr();
            // SAFETY: `node` is ours until the CAS publishes it.
            unsafe { (*node).next = head };
            // SAFETY: `node` came from Box::into_raw (the pointer type `P` is Box).
            if unsafe { self.head.compare_exchange_ptr(head, node) }.is_ok() {
                return;
            }
        }
    }

    /// Pops the top value.
    pub fn pop(&self) -> Option<u64> {
        HP.with(|hp| {
            let mut hp = hp.borrow_mut();
            loop {
                let top = self.head.safe_load(&mut *hp)?;
                let top_ptr = top as *const HazNode as *mut HazNode;
                let (value, next) = (top.value, top.next);
                // SAFETY: `next` is null or came from Box::into_raw in `push`.
                if let Ok(Some(old)) = unsafe { self.head.compare_exchange_ptr(top_ptr, next) } {
                    hp.reset_protection();
                    // SAFETY: unlinked by our CAS; retired exactly once.
                    unsafe { old.retire() };
                    return Some(value);
                }
            }
        })
    }
}

impl Drop for HaphazardTreiber {
    fn drop(&mut self) {
        let mut cur = self.head.load_ptr();
        while !cur.is_null() {
            // SAFETY: `&mut self`: the remaining nodes are exclusively ours and
            // were never retired; each is freed once.
            let node = unsafe { Box::from_raw(cur) };
            cur = node.next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lifo_and_conservation<S: Default + Sync>(push: fn(&S, u64), pop: fn(&S) -> Option<u64>) {
        let s = S::default();
        push(&s, 1);
        push(&s, 2);
        assert_eq!((pop(&s), pop(&s), pop(&s)), (Some(2), Some(1), None));
        let sum = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|sc| {
            for t in 0..4u64 {
                let (s, sum) = (&s, &sum);
                sc.spawn(move || {
                    for i in 0..2_000 {
                        push(s, t * 10_000 + i);
                        if let Some(v) = pop(s) {
                            sum.fetch_add(v, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        while let Some(v) = pop(&s) {
            sum.fetch_add(v, Ordering::Relaxed);
        }
        let want: u64 = (0..4u64)
            .map(|t| (0..2_000).map(|i| t * 10_000 + i).sum::<u64>())
            .sum();
        assert_eq!(sum.into_inner(), want);
        push(&s, 7); // left for Drop to free
    }

    #[test]
    fn epoch_treiber() {
        lifo_and_conservation::<EpochTreiber>(EpochTreiber::push, EpochTreiber::pop);
    }

    #[test]
    fn seize_treiber() {
        lifo_and_conservation::<SeizeTreiber>(SeizeTreiber::push, SeizeTreiber::pop);
    }

    #[test]
    fn haphazard_treiber() {
        lifo_and_conservation::<HaphazardTreiber>(HaphazardTreiber::push, HaphazardTreiber::pop);
    }
}
