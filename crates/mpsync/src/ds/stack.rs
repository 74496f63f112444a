//! Stacks: a single-lock stack and Herlihy's non-blocking stack with unneeded
//! copying removed.
//!
//! Michael & Scott, PODC 1996 (papers/000_…) §4.2; Herlihy, *A Methodology for
//! Implementing Highly Concurrent Data Objects*, TOPLAS 1993.
//!
//! - [`LockedStack<L, T>`]: a `Vec` under any `lock_api::RawMutex`; with a `-np` lock
//!   (`LockedStack<TasBNp, T>`) it is the paper's preemption-safe stack. Blocking.
//! - [`HerlihyStack<T, R>`]: a linked list whose top is held by a *version*; a
//!   shared pointer names the current version. An operation reads the version,
//!   builds its own private successor version (a new top; a push also a new node,
//!   the list below is shared, not copied) and swings the shared pointer with CAS,
//!   backing off (bounded, 000 §4) when it fails. Lock-free (as the system
//!   allocator is: nodes and versions are `Box`es). Memory is reclaimed with
//!   any [`Reclaimer`](crate::reclaim::Reclaimer): an operation protects only the version it read; replaced
//!   versions and popped nodes are freed in version order (see `ds/version.rs` for
//!   the ownership scheme), so nothing a reader can reach is freed under it and
//!   the CAS cannot suffer ABA.
//!
//! Uses `reclaim`, `lock` (through the type parameter), `ds::lf` (the CAS backoff), `sync`.

use std::fmt;

use super::{ConcurrentStack, StackHandle};

/// A LIFO stack: a `Vec` under one lock of type `L`.
///
/// ```
/// use mpsync::ds::stack::LockedStack;
/// use mpsync::lock::TasBNp;
///
/// let s: LockedStack<TasBNp, u32> = LockedStack::new();
/// s.push(1);
/// s.push(2);
/// assert_eq!(s.len(), 2);
/// assert_eq!(s.pop(), Some(2));
/// assert_eq!(s.pop(), Some(1));
/// assert!(s.is_empty());
/// ```
pub struct LockedStack<L: lock_api::RawMutex, T> {
    items: lock_api::Mutex<L, Vec<T>>,
}

impl<L: lock_api::RawMutex, T> LockedStack<L, T> {
    /// An empty stack.
    pub fn new() -> Self {
        Self {
            items: lock_api::Mutex::new(Vec::new()),
        }
    }

    /// Pushes `value` on top.
    pub fn push(&self, value: T) {
        self.items.lock().push(value);
    }

    /// Removes the top value, or `None` if the stack is empty.
    pub fn pop(&self) -> Option<T> {
        self.items.lock().pop()
    }

    /// The number of values (a snapshot).
    pub fn len(&self) -> usize {
        self.items.lock().len()
    }

    /// Whether the stack is empty (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<L: lock_api::RawMutex, T> Default for LockedStack<L, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<L: lock_api::RawMutex, T> fmt::Debug for LockedStack<L, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockedStack")
            .field("len", &self.len())
            .finish()
    }
}

impl<L, T> ConcurrentStack<T> for LockedStack<L, T>
where
    L: lock_api::RawMutex + Send + Sync,
    T: Send,
{
    type Handle<'a>
        = &'a Self
    where
        Self: 'a;

    fn handle(&self) -> &Self {
        self
    }
}

impl<L: lock_api::RawMutex, T> StackHandle<T> for &LockedStack<L, T> {
    fn push(&mut self, value: T) {
        LockedStack::push(self, value)
    }
    fn pop(&mut self) -> Option<T> {
        LockedStack::pop(self)
    }
}

pub use super::herlihy_stack::{HerlihyStack, HerlihyStackHandle};

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::lock::{TasB, TasBNp};
    use crate::reclaim::{Ebr, Local, Reclaimer};
    use crate::reclaim::{HazardPointers, Leak, Qsbr};
    use crate::sync::Arc;
    use crate::util::rng::SplitMix64;

    /// Random push/pop mixes against `Vec`, through the handle trait.
    fn matches_vec<S: ConcurrentStack<u64>>(make: impl Fn() -> S) {
        let ops = if cfg!(miri) { 60 } else { 2_000 };
        for seed in 0..3 {
            let s = make();
            let mut h = s.handle();
            let mut model = Vec::new();
            let mut g = SplitMix64::new(seed);
            for i in 0..ops {
                if !g.next_u64().is_multiple_of(3) {
                    h.push(i);
                    model.push(i);
                } else {
                    assert_eq!(h.pop(), model.pop());
                }
            }
            while let Some(v) = model.pop() {
                assert_eq!(h.pop(), Some(v));
            }
            assert_eq!(h.pop(), None);
        }
    }

    #[test]
    fn locked_stack_is_lifo() {
        matches_vec(LockedStack::<TasB, u64>::new);
        matches_vec(LockedStack::<TasBNp, u64>::new);
    }

    #[test]
    fn herlihy_stack_is_lifo_with_every_reclaimer() {
        matches_vec(HerlihyStack::<u64>::new);
        matches_vec(|| HerlihyStack::<u64, _>::with_domain(Arc::new(Qsbr::new())));
        matches_vec(|| {
            HerlihyStack::<u64, _>::with_domain(Arc::new(HazardPointers::new(1).unwrap()))
        });
        matches_vec(|| HerlihyStack::<u64, _>::with_domain(Arc::new(Leak::new())));
    }

    /// Values move out exactly once: popped ones to the caller, the rest dropped
    /// by the stack's `Drop`; every replaced version is retired once.
    fn drops_once<R: Reclaimer>(domain: Arc<R>) {
        let token = std::sync::Arc::new(());
        {
            let s = HerlihyStack::with_domain(domain.clone());
            let mut local = R::register(&domain);
            for _ in 0..6 {
                s.push(&local, token.clone());
            }
            for _ in 0..2 {
                drop(s.pop(&local).expect("non-empty"));
            }
            assert_eq!(std::sync::Arc::strong_count(&token), 5);
            local.quiescent();
            let st = domain.stats();
            assert_eq!(st.retired, 8, "{}: one version per operation", R::NAME);
            assert_eq!(st.freed + st.pending, st.retired);
        }
        assert_eq!(std::sync::Arc::strong_count(&token), 1, "{}", R::NAME);
    }

    #[test]
    fn values_are_moved_out_once() {
        drops_once(Arc::new(Ebr::new()));
        drops_once(Arc::new(Qsbr::new()));
        drops_once(Arc::new(HazardPointers::new(1).unwrap()));
        drops_once(Arc::new(Leak::new()));
    }

    #[test]
    fn concurrent_push_pop_conserves_values() {
        let (threads, per) = if cfg!(miri) { (2u64, 8u64) } else { (4, 3_000) };
        let s: HerlihyStack<u64> = HerlihyStack::new();
        let mut all: Vec<u64> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    let s = &s;
                    sc.spawn(move || {
                        let mut h = s.handle();
                        let mut got = Vec::new();
                        for i in 0..per {
                            h.push(t * per + i);
                            if i % 2 == 1 {
                                got.extend(h.pop());
                                got.extend(h.pop());
                            }
                        }
                        got
                    })
                })
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let mut h = s.handle();
        all.extend(std::iter::from_fn(|| h.pop()));
        all.sort_unstable();
        assert_eq!(all, (0..threads * per).collect::<Vec<_>>());
    }

    #[test]
    fn debug_says_what_it_is() {
        let s: LockedStack<TasB, u8> = LockedStack::default();
        s.push(3);
        assert_eq!(format!("{s:?}"), "LockedStack { len: 1 }");
        let s: HerlihyStack<u8> = HerlihyStack::default();
        assert_eq!(format!("{s:?}"), "HerlihyStack { reclaimer: \"EBR\", .. }");
        let h = s.handle();
        assert!(
            format!("{h:?}").starts_with("Handle { structure: HerlihyStack { reclaimer: \"EBR\""),
            "{h:?}"
        );
    }
}
