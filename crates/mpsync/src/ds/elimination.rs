//! An elimination-backoff stack: Treiber's stack whose failed CASes try to meet
//! an opposite operation instead of backing off.
//!
//! Hendler, Shavit & Yerushalmi, *A Scalable Lock-free Stack Algorithm*, SPAA
//! 2004, §2 (the elimination array, collision slots and the adaptive range).
//! A push or pop first tries the [`TreiberStack`] once; when its CAS fails
//! (another thread changed the top) it goes to the elimination array: a pusher
//! *offers* its unpublished node in a free slot and waits, bounded, for a popper
//! to take it; a popper that finds an offer takes it. Both then return without
//! touching the stack — a push and a pop that cancel out are linearized together
//! at the popper's CAS on the slot. Otherwise they retry the stack.
//!
//! **Asymmetric, so nobody waits for a preempted thread.** Only pushers wait,
//! and what a waiting pusher holds is a value anyone can take: a pusher
//! preempted while its offer is out still completes (a popper takes the node
//! and both operations are done). A popper never waits in a slot. The windows in
//! which a slot is unusable are two stores long (a pusher between claiming a
//! slot and offering; a popper between taking the offer and freeing the slot);
//! a thread preempted there costs the others that one slot, and they fall back
//! on the stack. Progress: lock-free, as the Treiber stack underneath.
//!
//! **The adaptive range.** Threads pick slots among the first `range` (HSY's
//! per-thread range, here one shared hint): an offer that times out narrows it
//! (too few partners to spread over that many slots), a slot found busy widens
//! it. The pusher's wait is a [`Waiter::bounded_ns`] episode of `sched`
//! ([`ELIMINATION_WAIT`]; under loom it gives up at the first spin).
//!
//! **Memory.** Nodes are the Treiber stack's, reclaimed through its reclaimer
//! `R`; an offered node was never published, so the popper who takes it frees
//! it at once. A slot is a state word (a tag and a sequence number, so a pusher
//! never mistakes a later offer in its slot for its own) and a node pointer;
//! slots live in the stack, none is allocated per operation. Values are never
//! dropped by the domain, so `T` may borrow.
//!
//! Uses `sched`: the pusher's bounded wait ([`Waiter`]) and named stall points.
//!
//! ```
//! use mpsync::ds::elimination::EliminationStack;
//! use mpsync::ds::handle::Auto;
//!
//! let s: Auto<EliminationStack<u32>> = Auto::default();
//! std::thread::scope(|sc| {
//!     for t in 0..4 {
//!         let s = &s;
//!         sc.spawn(move || {
//!             for i in 0..100 {
//!                 s.push(t * 100 + i);
//!                 s.pop();
//!             }
//!             s.push(t);
//!         });
//!     }
//! });
//! assert_eq!(s.len(), 4);
//! let mut left: Vec<u32> = std::iter::from_fn(|| s.pop()).collect();
//! left.sort();
//! assert!(s.is_empty() && left.len() == 4);
//! ```

use std::fmt;

use crossbeam_utils::CachePadded;

use super::alloc::{NodeAlloc, SystemAlloc};
use super::handle::{Handle, Registered};
use super::lf::check_local;
use super::treiber::{Node, TreiberStack};
use super::{ConcurrentStack, StackHandle};
use crate::reclaim::{Ebr, ProtectsReachable, Reclaimer};
use crate::sched::Wait;
use crate::sched::Waiter;
use crate::sched::stall;
use crate::sync::{Arc, AtomicPtr, AtomicUsize, Ordering};

/// Collision slots in the elimination array.
pub const SLOTS: usize = 8;

/// How long a pusher waits in a slot for a popper, at most.
pub const ELIMINATION_WAIT: std::time::Duration = std::time::Duration::from_micros(2);

/// A slot's state word: `seq << 2 | tag`.
///
/// | tag       | who sets it                         | meaning                                  |
/// |-----------|-------------------------------------|------------------------------------------|
/// | `EMPTY`   | a popper (seq + 1), a withdrawing pusher (seq + 1) | free: a pusher may claim it  |
/// | `CLAIMED` | a pusher, by CAS from `EMPTY`       | the pusher is writing its node pointer   |
/// | `OFFER`   | the pusher                          | `node` holds an offer a popper may take  |
/// | `TAKEN`   | a popper, by CAS from `OFFER`       | the popper is reading `node`             |
///
/// The sequence number changes at every return to `EMPTY`, so a pusher's
/// `OFFER` word names its own offer only (no ABA on a reused slot).
const EMPTY: usize = 0;
const CLAIMED: usize = 1;
const OFFER: usize = 2;
const TAKEN: usize = 3;
const TAG: usize = 3;

/// The `EMPTY` word after `w` (the next sequence number).
#[inline]
fn next_empty(w: usize) -> usize {
    (w & !TAG).wrapping_add(TAG + 1)
}

/// One collision slot.
struct Slot<T, R: Reclaimer> {
    state: AtomicUsize,
    /// The offered node; written only by the pusher holding the slot
    /// (`CLAIMED`), read only by the popper holding it (`TAKEN`).
    node: AtomicPtr<Node<T, R>>,
}

/// The elimination-backoff stack over reclaimer `R` and node allocator `A` (see
/// the [module documentation](self)).
pub struct EliminationStack<T, R: Reclaimer = Ebr, A: NodeAlloc = SystemAlloc> {
    stack: TreiberStack<T, R, A>,
    slots: Box<[CachePadded<Slot<T, R>>]>,
    /// How many slots threads spread over (1..=SLOTS); a hint, so Relaxed.
    range: CachePadded<AtomicUsize>,
}

// SAFETY: as `TreiberStack`'s: values move between threads whole (`T: Send`),
// nodes are reached through atomics only, and `&Self` gives out no `&T`.
unsafe impl<T: Send, R: Reclaimer, A: NodeAlloc> Send for EliminationStack<T, R, A> {}
// SAFETY: as above.
unsafe impl<T: Send, R: Reclaimer, A: NodeAlloc> Sync for EliminationStack<T, R, A> {}

impl<T, R: Reclaimer + Default, A: NodeAlloc> EliminationStack<T, R, A> {
    /// An empty stack with a domain of its own (`R::default()`).
    pub fn new() -> Self {
        Self::with_domain(Arc::new(R::default()))
    }
}

impl<T, R: Reclaimer + Default, A: NodeAlloc> Default for EliminationStack<T, R, A> {
    fn default() -> Self {
        Self::new()
    }
}

/// Spreads threads over the slots: a Fibonacci hash of something that differs
/// between threads and operations (a node's address, the top's).
#[inline]
fn pick(seed: usize, range: usize) -> usize {
    let h = (seed as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    (h as usize) % range.max(1)
}

impl<T, R: Reclaimer, A: NodeAlloc> EliminationStack<T, R, A> {
    /// An empty stack whose retired nodes go to `domain` (hazard pointers: at
    /// least 1 slot per thread). `T` may borrow, as the Treiber stack's.
    pub fn with_domain(domain: Arc<R>) -> Self {
        Self {
            stack: TreiberStack::with_domain(domain),
            slots: (0..SLOTS)
                .map(|_| {
                    CachePadded::new(Slot {
                        state: AtomicUsize::new(EMPTY),
                        node: AtomicPtr::new(std::ptr::null_mut()),
                    })
                })
                .collect(),
            range: CachePadded::new(AtomicUsize::new(1)),
        }
    }

    /// The reclamation domain (register threads with `R::register(s.domain())`).
    pub fn domain(&self) -> &Arc<R> {
        self.stack.domain()
    }

    fn range(&self) -> usize {
        // Relaxed: a hint (see the field).
        self.range.load(Ordering::Relaxed)
    }

    fn widen(&self, r: usize) {
        if r < SLOTS {
            // Relaxed: a hint; a lost update only delays the adaptation.
            self.range.store(r + 1, Ordering::Relaxed);
        }
    }

    fn narrow(&self, r: usize) {
        if r > 1 {
            // Relaxed: as in `widen`.
            self.range.store(r - 1, Ordering::Relaxed);
        }
    }

    /// Offers `node` in a slot and waits (bounded) for a popper: `true` if one
    /// took it (the node is the popper's now), `false` if nobody did (it is
    /// still ours).
    fn offer(&self, node: *mut Node<T, R>) -> bool {
        let r = self.range();
        let slot = &self.slots[pick(node as usize ^ self.stack.top_hint(), r)];
        // Relaxed: the claiming CAS below checks it.
        let w = slot.state.load(Ordering::Relaxed);
        if w & TAG != EMPTY {
            self.widen(r);
            return false;
        }
        let claimed = (w & !TAG) | CLAIMED;
        // Acquire: pairs with the Release store of `EMPTY` by the slot's last
        // popper (after its read of `node`) or withdrawing pusher, so our write
        // of `node` below comes after theirs. Failure Relaxed: we leave.
        if slot
            .state
            .compare_exchange(w, claimed, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.widen(r);
            return false;
        }
        // Relaxed: published by the Release store of `OFFER`.
        slot.node.store(node, Ordering::Relaxed);
        let offered = (w & !TAG) | OFFER;
        // Release: publishes `node` and the node's value to the popper's Acquire
        // CAS that takes the offer.
        slot.state.store(offered, Ordering::Release);
        stall::point(stall::ELIMINATION_OFFERED);
        let mut wait = Waiter::bounded_ns(ELIMINATION_WAIT.as_nanos() as u64);
        loop {
            // Relaxed: we read nothing the popper wrote; only whether it came.
            if slot.state.load(Ordering::Relaxed) != offered {
                return true;
            }
            if wait.spin(None) == Wait::Park {
                break;
            }
        }
        // Withdraw. Relaxed: the node was ours all along if this succeeds
        // (nobody else wrote to it); if it fails, a popper took it.
        match slot.state.compare_exchange(
            offered,
            next_empty(w),
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => {
                self.narrow(r);
                false
            }
            Err(_) => true,
        }
    }

    /// Looks for an offer in the slots a pusher would pick; takes the first.
    fn take_offer(&self) -> Option<T> {
        let r = self.range();
        let start = pick(self.stack.top_hint() ^ (r << 7), r);
        for k in 0..r.min(2) {
            let slot = &self.slots[(start + k) % r];
            // Relaxed: the taking CAS below is what we act on.
            let w = slot.state.load(Ordering::Relaxed);
            if w & TAG != OFFER {
                continue;
            }
            // Acquire: pairs with the pusher's Release store of `OFFER`: its
            // `node` and the node's value are visible. Failure Relaxed: next slot.
            if slot
                .state
                .compare_exchange(w, (w & !TAG) | TAKEN, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            // Relaxed: ordered by the Acquire CAS above.
            let node = slot.node.load(Ordering::Relaxed);
            stall::point(stall::ELIMINATION_TAKEN);
            // Release: our read of `node` happens before the next pusher's
            // write of it (its Acquire claiming CAS).
            slot.state.store(next_empty(w), Ordering::Release);
            // SAFETY: our CAS from `OFFER` made the offered node ours: the
            // pusher handed it over (it returns without touching it, see
            // `offer`) and it was never published on the stack.
            return Some(unsafe { TreiberStack::<T, R, A>::take_unpublished(node) });
        }
        None
    }

    /// The elimination array alone, for tests and models of the slot protocol
    /// (a push that never touches the stack): offers `value` once; `Err(value)`
    /// if no pop took it in time.
    #[doc(hidden)]
    pub fn exchange_push(&self, local: &R::Local, value: T) -> Result<(), T> {
        check_local(&**self.domain(), local, "EliminationStack::exchange_push");
        let node = TreiberStack::<T, R, A>::new_node(local, value);
        if self.offer(node) {
            Ok(())
        } else {
            // SAFETY: not taken: the node is still ours, never published.
            Err(unsafe { TreiberStack::<T, R, A>::take_unpublished(node) })
        }
    }

    /// The elimination array alone (see [`exchange_push`](Self::exchange_push)):
    /// a value offered by a push, if one is out now.
    #[doc(hidden)]
    pub fn exchange_pop(&self) -> Option<T> {
        self.take_offer()
    }

    /// Pushes `value`. `local` is the calling thread's registration in
    /// [`domain`](Self::domain).
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn push(&self, local: &R::Local, value: T) {
        check_local(&**self.domain(), local, "EliminationStack::push");
        // SAFETY: `offer` returns `true` only when a popper took the node
        // (through `take_offer`, which takes its value and frees it).
        unsafe { self.stack.push_with(local, value, |node| self.offer(node)) }
    }

    /// Pops the top value, or returns `None` if the stack is empty. `local` is
    /// the calling thread's registration in [`domain`](Self::domain).
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn pop(&self, local: &R::Local) -> Option<T> {
        check_local(&**self.domain(), local, "EliminationStack::pop");
        self.stack.pop_with(local, || {
            // Elimination is the backoff: look for a pusher to meet, bounded,
            // then the stack again.
            let mut wait = Waiter::bounded_ns(ELIMINATION_WAIT.as_nanos() as u64);
            loop {
                if let Some(v) = self.take_offer() {
                    return Some(v);
                }
                if wait.spin(None) == Wait::Park {
                    return None;
                }
            }
        })
    }

    /// Whether the stack is empty at the moment of the call (values offered by
    /// pushes still in progress are not in it yet).
    pub fn is_empty(&self) -> bool {
        self.stack.is_empty()
    }

    /// The number of values on the stack: a walk, O(n); exact when no thread
    /// changes the stack meanwhile.
    ///
    /// # Panics
    /// If `local` is registered with another domain.
    pub fn len(&self, local: &R::Local) -> usize
    where
        R: ProtectsReachable,
    {
        self.stack.len(local)
    }

    /// The calling thread's handle.
    pub fn handle(&self) -> EliminationStackHandle<'_, T, R, A> {
        Handle::new(self)
    }
}

impl<T, R: Reclaimer, A: NodeAlloc> Drop for EliminationStack<T, R, A> {
    /// The Treiber stack drops the values still on it. No slot holds an offer:
    /// an offer lives only inside a push, which borrows the stack.
    fn drop(&mut self) {
        for s in self.slots.iter() {
            // Relaxed: `&mut self`, no other thread.
            let tag = s.state.load(Ordering::Relaxed) & TAG;
            debug_assert_eq!(tag, EMPTY, "an offer outlived its push");
        }
    }
}

impl<T, R: Reclaimer, A: NodeAlloc> fmt::Debug for EliminationStack<T, R, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EliminationStack")
            .field("reclaimer", &R::NAME)
            .field("alloc", &A::NAME)
            .field("slots", &SLOTS)
            .field("range", &self.range())
            .finish_non_exhaustive()
    }
}

/// One thread's access to an [`EliminationStack`] (the generic [`Handle`]).
pub type EliminationStackHandle<'a, T, R = Ebr, A = SystemAlloc> =
    Handle<'a, EliminationStack<T, R, A>>;

impl<T, R: Reclaimer, A: NodeAlloc> Registered for EliminationStack<T, R, A> {
    type R = R;
    fn domain(&self) -> &Arc<R> {
        self.stack.domain()
    }
}

impl<T, R: Reclaimer, A: NodeAlloc> StackHandle<T> for Handle<'_, EliminationStack<T, R, A>> {
    fn push(&mut self, value: T) {
        self.op(|s, l| s.push(l, value));
    }

    fn pop(&mut self) -> Option<T> {
        self.op(|s, l| s.pop(l))
    }

    fn quiescent(&mut self) {
        self.quiescent_now();
    }
}

impl<T: Send, R: Reclaimer, A: NodeAlloc> ConcurrentStack<T> for EliminationStack<T, R, A> {
    type Handle<'a>
        = EliminationStackHandle<'a, T, R, A>
    where
        Self: 'a;

    fn handle(&self) -> Self::Handle<'_> {
        EliminationStack::handle(self)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::reclaim::{HazardPointers, Qsbr};

    #[test]
    fn lifo_alone() {
        let s: EliminationStack<u32, Qsbr> = EliminationStack::new();
        let mut h = s.handle();
        assert_eq!(h.pop(), None);
        for i in 0..5 {
            h.push(i);
        }
        assert_eq!(h.op(|s, l| s.len(l)), 5);
        assert_eq!(
            (0..5).map(|_| h.pop().unwrap()).collect::<Vec<_>>(),
            [4, 3, 2, 1, 0]
        );
        assert!(s.is_empty());
    }

    #[test]
    fn an_offer_is_taken_or_withdrawn() {
        let s: EliminationStack<String, HazardPointers> = EliminationStack::new();
        let local = HazardPointers::register(s.domain());
        // Nobody takes it: withdrawn, still ours.
        let mut offered = None;
        // SAFETY: the hook gives the node away only if `offer` says so.
        unsafe {
            s.stack.push_with(&local, "a".to_string(), |n| {
                offered = Some(s.offer(n));
                offered == Some(true)
            })
        };
        // `push_with` runs the hook only after a failed CAS: none here.
        assert_eq!(offered, None);
        assert_eq!(s.pop(&local).as_deref(), Some("a"));
        assert_eq!(s.take_offer(), None, "no offer out");
    }

    /// The slot protocol alone, hammered: 3 threads offer, 3 take, on one
    /// slot (the range stays 1 unless widened); every value offered is taken
    /// once or given back, none twice.
    #[test]
    fn offers_are_taken_once() {
        let s: EliminationStack<u64, Ebr> = EliminationStack::new();
        let per = if cfg!(miri) { 50 } else { 20_000 };
        let done = std::sync::atomic::AtomicUsize::new(0);
        let (mut taken, mut back): (Vec<u64>, Vec<u64>) = (Vec::new(), Vec::new());
        std::thread::scope(|sc| {
            let pushers: Vec<_> = (0..3u64)
                .map(|t| {
                    let (s, done) = (&s, &done);
                    sc.spawn(move || {
                        let l = Ebr::register(s.domain());
                        let mut back = Vec::new();
                        for i in 0..per {
                            if let Err(v) = s.exchange_push(&l, t << 32 | i) {
                                back.push(v);
                            }
                        }
                        done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        back
                    })
                })
                .collect();
            let poppers: Vec<_> = (0..3)
                .map(|_| {
                    let (s, done) = (&s, &done);
                    sc.spawn(move || {
                        let mut got = Vec::new();
                        while done.load(std::sync::atomic::Ordering::SeqCst) < 3 {
                            got.extend(s.exchange_pop());
                        }
                        got
                    })
                })
                .collect();
            for h in pushers {
                back.extend(h.join().unwrap());
            }
            for h in poppers {
                taken.extend(h.join().unwrap());
            }
        });
        assert!(!taken.is_empty(), "no offer was ever taken");
        let mut all: Vec<u64> = taken.iter().chain(&back).copied().collect();
        all.sort_unstable();
        let want: Vec<u64> = (0..3u64)
            .flat_map(|t| (0..per).map(move |i| t << 32 | i))
            .collect();
        assert_eq!(all.len(), want.len(), "values taken twice or lost");
        assert!(all == want, "values taken twice, lost or invented");
    }

    #[test]
    fn the_sequence_number_moves_on() {
        assert_eq!(next_empty(OFFER), 4);
        assert_eq!(next_empty(4 | TAKEN), 8);
        assert_eq!(next_empty(usize::MAX) & TAG, EMPTY);
    }

    #[test]
    fn debug_says_what_it_is() {
        let s: EliminationStack<u8> = EliminationStack::default();
        assert_eq!(
            format!("{s:?}"),
            "EliminationStack { reclaimer: \"EBR\", alloc: \"system\", slots: 8, range: 1, .. }"
        );
    }
}
