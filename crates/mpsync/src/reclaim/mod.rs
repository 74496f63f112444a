//! Safe memory reclamation for lock-free structures: QSBR, EBR, hazard pointers,
//! behind one trait.
//!
//! Hart, *Practical lock-free memory reclamation* (papers/002_…), chapters 3–5: the
//! reclamation scheme is chosen independently of the algorithm, so every lock-free
//! structure in [`ds`](crate) is generic over a [`Reclaimer`] and the same queue code
//! runs with each scheme:
//!
//! | type                 | paper name        | reader cost per op            | unreclaimed nodes if a thread stalls |
//! |----------------------|-------------------|-------------------------------|--------------------------------------|
//! | [`Qsbr`]             | QSBR (§4.1.1)     | none; app announces quiescence| unbounded                            |
//! | [`Ebr`]              | EBR (Fraser)      | two fences per operation      | unbounded                            |
//! | [`HazardPointers`]   | SMR (Michael)     | a fence per protected pointer | at most N·R (Michael's bound)        |
//! | [`Leak`]             | (baseline)        | none; frees only at the end   | everything                           |
//!
//! A structure uses the scheme through three handles:
//! - the **domain** (`Arc<R>`), shared by all threads and the structure;
//! - a **[`Local`]** per thread, from [`R::register`](Reclaimer::register): joining
//!   the domain. Dropping it leaves: its unreclaimed nodes go to the domain, which
//!   frees them later (nothing leaks); the domain's own `Drop` frees what is left;
//! - a **[`Guard`]** per operation, from [`Local::enter`]: [`protect`](Guard::protect)
//!   loads a pointer from shared memory so that it stays valid until the guard is
//!   dropped or the slot [released](Guard::release), and returns it as a
//!   [`Protected`] pointer that borrows the guard — the borrow checker stops it, and
//!   the references made from it, outliving the guard (or a slot's release while it
//!   lives); [`protect_raw`](Guard::protect_raw) returns the bare pointer for the
//!   rare place a borrow cannot go. Protecting and retiring take `&self`, so a
//!   traversal holds several protected pointers while it retires; and
//!   [`retire_box`](Guard::retire_box)/[`retire_raw`](Guard::retire_raw) hand over a
//!   node that was unlinked, to be freed when no thread can reach it;
//!   [`retire_with`](Guard::retire_with) retires a node with a closure that frees
//!   it (retire with context: a length, other objects), and [`defer`](Guard::defer)
//!   runs a closure after a grace period.
//!
//! Hand over hand: hazard pointers protect a moving window by *relabelling* slots
//! (the slot protecting the current node becomes the predecessor's, and only the
//! next node is protected anew, as `ds::hm_list` does) — never by copying a
//! protected pointer into another slot and clearing the first: a scan that reads
//! the target slot before the copy and the source slot after the clear sees
//! neither, and frees the node. Hazard slots are allocated on demand, so a
//! traversal may use as many as it needs.
//!
//! Several guards of one registration may live at once ([`Local::enter`] takes
//! `&self`): a reference handed out under one guard stays valid while the thread
//! runs other operations under others. EBR counts nested guards and keeps the
//! outermost pin; hazard pointers give each further live guard a block of
//! [`HP_BLOCK_SLOTS`] slots of its own.
//!
//! Every node of every structure embeds the scheme's [`Header`] (zero-sized for
//! the schemes here), so that interval-based schemes (IBR, Hazard Eras) can
//! stamp birth eras ([`Guard::header`]) without touching the structures.
//!
//! A registration kept across operations (a cached one, as
//! [`ds::handle::Auto`](crate::ds::handle::Auto) keeps) calls [`Local::park`] after
//! each: QSBR then goes offline, so an idle thread never holds reclamation up.
//!
//! Between operations a thread calls [`Local::quiescent`]: QSBR needs it (a thread
//! that never announces a quiescent state stops all reclamation); the other
//! schemes ignore it. Every domain counts retired, freed and pending nodes
//! ([`Reclaimer::stats`]), so memory growth is measurable.
//!
//! # What a retired value's `Drop`, or a deferred closure, may do
//!
//! Reclamation runs user code: the `Drop` of what a retired node holds (a
//! [`retire_box`](Guard::retire_box)ed value; a structure's removed values) and
//! the closures of [`retire_with`](Guard::retire_with) and
//! [`defer`](Guard::defer). It runs inside whatever operation of the reclaiming
//! thread frees the node — an [`enter`](Local::enter), a retire, a
//! [`quiescent`](Local::quiescent) state, a scan, a registration's drop — which
//! may be an operation on another structure of the same domain. There, that
//! code may:
//! - **use any structure and any registration**, the one that is reclaiming
//!   included (kept in a thread-local, or cached by
//!   [`Auto`](crate::ds::handle::Auto)): its guards nest inside the running
//!   operation's (EBR keeps the outer pin; hazard pointers give a nested guard
//!   slots of its own), and what it retires joins the registration's lists, to
//!   be freed by a later reclamation;
//! - **panic**: the other nodes of the batch are still freed, the registration
//!   stays consistent (no pin left behind, no node lost or freed twice), and
//!   the first panic comes out of the operation that ran reclamation (out of a
//!   registration's drop once it has left the domain).
//!
//! Neither can make a registration unusable, hold reclamation up or cause
//! undefined behaviour. The code cannot choose its thread or its moment (that
//! is the scheme's), and a `RefCell` of the user's that is borrowed mutably
//! while it runs (a registration being `quiescent`, say) panics if it is
//! borrowed again, as `RefCell`s do.
//!
//! Layering: uses `sync` (atomics), `util` (padding) and, from `sched`, only its
//! named stall points ([`sched::stall`](crate::sched::stall)); nothing here waits
//! or spins — reclamation is only ever deferred.
//!
//! A Treiber stack's `pop`, written once, run with every scheme:
//!
//! ```
//! use mpsync::reclaim::{Ebr, Guard, HazardPointers, Leak, Local, Qsbr, Reclaimer};
//! use mpsync::sync::{Arc, AtomicPtr, Ordering};
//! use std::ptr;
//!
//! struct Node { value: u32, next: *mut Node }
//! // SAFETY: a node is owned by the stack; `next` is only an address.
//! unsafe impl Send for Node {}
//!
//! fn push(head: &AtomicPtr<Node>, value: u32) {
//!     let n = Box::into_raw(Box::new(Node { value, next: ptr::null_mut() }));
//!     let mut cur = head.load(Ordering::Relaxed);
//!     loop {
//!         // SAFETY: `n` is not yet shared.
//!         unsafe { (*n).next = cur };
//!         match head.compare_exchange(cur, n, Ordering::Release, Ordering::Relaxed) {
//!             Ok(_) => return,
//!             Err(h) => cur = h,
//!         }
//!     }
//! }
//!
//! fn pop<R: Reclaimer>(head: &AtomicPtr<Node>, local: &mut R::Local) -> Option<u32> {
//!     let g = local.enter();
//!     loop {
//!         // A `Protected<'_, Node>`: it borrows `g`, so it cannot outlive it.
//!         let top = g.protect(0, head);
//!         // SAFETY: `top` is protected (slot 0) and was validated as the head, and
//!         // a node is retired only after it left the head: not freed.
//!         let Some(node) = (unsafe { top.as_ref() }) else {
//!             return None;
//!         };
//!         let (value, next) = (node.value, node.next);
//!         if head.compare_exchange(top.as_ptr(), next, Ordering::AcqRel, Ordering::Acquire).is_ok() {
//!             // SAFETY: `top` is unlinked, retired once, and was made by `Box`.
//!             unsafe { g.retire_box(top.as_ptr()) };
//!             return Some(value);
//!         }
//!     }
//! }
//!
//! fn run<R: Reclaimer>(domain: Arc<R>) {
//!     let head = AtomicPtr::new(ptr::null_mut());
//!     let mut local = R::register(&domain);
//!     for v in 0..5 {
//!         push(&head, v);
//!     }
//!     let mut got = Vec::new();
//!     while let Some(v) = pop::<R>(&head, &mut local) {
//!         got.push(v);
//!         local.quiescent();
//!     }
//!     assert_eq!(got, [4, 3, 2, 1, 0]);
//!     let s = domain.stats();
//!     assert_eq!((s.retired, s.freed + s.pending), (5, 5));
//! }
//!
//! run(Arc::new(Qsbr::new()));
//! run(Arc::new(Ebr::new()));
//! run(Arc::new(HazardPointers::new(1).unwrap()));
//! run(Arc::new(Leak::new()));
//! ```

mod ebr;
mod epoch;
#[cfg(all(test, not(loom)))]
mod hostile;
mod hp;
mod leak;
mod limbo;
mod qsbr;
mod registry;

pub use ebr::{EBR_DEFAULT_ADVANCE_EVERY, Ebr, EbrGuard, EbrLocal};
pub use hp::{HP_BLOCK_SLOTS, HP_DEFAULT_SLOTS, HP_MAX_SLOTS, HazardPointers, HpGuard, HpLocal};
pub use leak::{Leak, LeakGuard, LeakLocal};
pub use qsbr::{Qsbr, QsbrGuard, QsbrLocal};

use std::marker::PhantomData;

use crate::sync::{Arc, AtomicPtr};

/// Test helper: asserts that the per-node header costs nothing under today's
/// schemes — `$node` (a node type written with the generic scheme `$r`) has
/// the size and alignment of `$bare`, the same fields without the header,
/// for QSBR, EBR, hazard pointers and the leaking baseline.
#[cfg(all(test, not(loom)))]
macro_rules! assert_header_free {
    ($r:ident => $node:ty, $bare:ty) => {{
        fn check<$r: $crate::reclaim::Reclaimer>() {
            assert_eq!(
                ::std::mem::size_of::<$node>(),
                ::std::mem::size_of::<$bare>(),
                "size under {}",
                $r::NAME
            );
            assert_eq!(
                ::std::mem::align_of::<$node>(),
                ::std::mem::align_of::<$bare>(),
                "alignment under {}",
                $r::NAME
            );
        }
        check::<$crate::reclaim::Qsbr>();
        check::<$crate::reclaim::Ebr>();
        check::<$crate::reclaim::HazardPointers>();
        check::<$crate::reclaim::Leak>();
    }};
}
#[cfg(all(test, not(loom)))]
pub(crate) use assert_header_free;

/// A memory-reclamation scheme: the domain that lock-free structures share.
///
/// Implementations are the domain type itself (`Arc<Qsbr>`, `Arc<Ebr>`, …); each
/// thread joins with [`register`](Self::register).
pub trait Reclaimer: Send + Sync + 'static {
    /// The per-thread registration handle. Dropping it leaves the domain. `Send`,
    /// so a handle may be made on one thread and used on another (one at a time).
    type Local: Local<Header = Self::Header> + Send;

    /// What the scheme keeps in every node (a [`Header<Self>`] field of each
    /// structure's nodes): zero-sized (`()`) for QSBR, EBR, hazard pointers and
    /// [`Leak`]; an interval-based scheme (IBR, Hazard Eras) keeps the node's
    /// birth era here, stamped by [`Guard::header`] when the node is made, so it
    /// can be added without touching the structures.
    /// `Default`: the header of a node made before any thread registered (a
    /// queue's first dummy), which must be conservative (IBR: born at era 0).
    type Header: Default + Send + Sync + 'static;

    /// The scheme's short name, as in the paper's figures: `"QSBR"`, `"EBR"`,
    /// `"HP"`, `"Leak"`.
    const NAME: &'static str;

    /// Joins the calling thread to the domain. Call sites write
    /// `R::register(&domain)`, which works with and without loom.
    #[cfg(not(loom))]
    fn register(self: &Arc<Self>) -> Self::Local;

    /// Joins the calling thread to the domain (loom's `Arc` cannot be a `self`
    /// type; call sites write `R::register(&domain)` either way).
    #[cfg(loom)]
    fn register(this: &Arc<Self>) -> Self::Local;

    /// Retired, freed and pending nodes so far (a snapshot; see [`ReclaimStats`]).
    fn stats(&self) -> ReclaimStats;

    /// Whether `local` is a registration in this domain (one pointer compare: a
    /// `Local` keeps its domain alive, so the address cannot be reused while it
    /// exists). A structure that takes an explicit `Local` must check it: a
    /// registration in another domain protects nothing here (its hazards, or its
    /// pin, are where this domain's reclaimers never look).
    fn owns(&self, local: &Self::Local) -> bool;
}

/// A scheme under which a guard protects **every node reachable** from a node it
/// protects, for as long as the guard lives: the epoch schemes (QSBR, EBR) and the
/// leaking baseline, not hazard pointers (which protect only the pointers
/// published in their slots).
///
/// Algorithms that follow pointers without protecting each node — the fast-read
/// list of Hart's thesis (papers/002_… Figure 5.16), which walks past marked
/// nodes — require `R: ProtectsReachable`, so using them with hazard pointers is
/// a compile error, not a use after free:
///
/// ```compile_fail,E0277
/// use mpsync::ds::hash::FastReadHashMap;
/// use mpsync::reclaim::HazardPointers;
/// let m: FastReadHashMap<u64, u64, HazardPointers> = FastReadHashMap::new();
/// ```
///
/// # Safety
/// An implementation promises: a node unlinked (and retired) after a guard was
/// entered (EBR) or after the thread's last quiescent state (QSBR) is not freed
/// while that guard lives, or before the thread's next quiescent state. Chains of
/// unlinked nodes reached from such a node are then safe to follow, because a
/// node is unlinked only after its predecessor's link to it is frozen.
pub unsafe trait ProtectsReachable: Reclaimer {}

// SAFETY: a node retired during a thread's grace period is freed only after that
// thread announces a quiescent state (qsbr.rs), which it never does inside an
// operation.
unsafe impl ProtectsReachable for Qsbr {}
// SAFETY: a node retired while a guard pins the epoch is freed only two epoch
// advances later, and the epoch cannot advance twice past a pinned thread (ebr.rs).
unsafe impl ProtectsReachable for Ebr {}
// SAFETY: the leaking baseline frees nothing before the domain drops.
unsafe impl ProtectsReachable for Leak {}

/// A thread's registration in a domain. `!Sync`: one thread uses it at a time.
/// Dropping it leaves the domain and hands its unreclaimed nodes to the domain.
pub trait Local {
    /// The scheme's per-node header ([`Reclaimer::Header`]).
    type Header;

    /// The handle for one operation.
    type Guard<'a>: Guard<Header = Self::Header>
    where
        Self: 'a;

    /// The header of a node made outside an operation (a push that needs no
    /// guard): as [`Guard::header`]. Structures call it through
    /// [`Header::of_local`].
    fn header(&self) -> Self::Header;

    /// Starts an operation. EBR enters a critical section (pins the epoch) until
    /// the guard drops; QSBR and hazard pointers do nothing here. Hazard pointers
    /// clear the guard's slots when it drops.
    ///
    /// `&self`: a thread may hold **several guards** of one registration at once
    /// (a reference from a map's `get` kept while doing another operation). EBR
    /// counts nested guards and stays pinned until the last one drops; QSBR and
    /// [`Leak`] need nothing; hazard pointers give each live guard its own slots
    /// (the first guard the slots `0, 1, …` on demand, each further one a block
    /// of [`HP_BLOCK_SLOTS`] slots of its own). [`quiescent`](Self::quiescent)
    /// and [`park`](Self::park) take `&mut self`, so no guard lives across them.
    fn enter(&self) -> Self::Guard<'_>;

    /// Announces a quiescent state: this thread holds no reference to any node of
    /// the domain. QSBR's only way to make progress; a no-op for the other schemes.
    fn quiescent(&mut self);

    /// Goes offline: this thread holds no reference to any node of the domain and
    /// may not use it for a long time, so it must not hold reclamation up. QSBR
    /// leaves its grace period (an unpin; the next [`enter`](Self::enter) or
    /// [`quiescent`](Self::quiescent) re-joins at the current epoch, with EBR's
    /// validated pin); a no-op for the other schemes, whose registrations hold
    /// nothing up between operations. What a registration cached across
    /// operations calls after each one ([`Auto`](crate::ds::handle::Auto)).
    fn park(&mut self) {}
}

/// One operation's access to the domain.
pub trait Guard {
    /// The scheme's per-node header ([`Reclaimer::Header`]).
    type Header;

    /// The header of a node this operation makes (an interval-based scheme's
    /// birth era); `()` for today's schemes. Structures call it through
    /// [`Header::new`].
    fn header(&self) -> Self::Header;

    /// Loads `src` and protects the loaded node until the guard drops or `slot` is
    /// released (or protected into again), and returns it as a [`Protected`]
    /// pointer, which borrows the guard: the borrow checker stops it (and any
    /// reference [`Protected::as_ref`] makes from it) outliving the guard, and
    /// stops [`release`](Self::release) of any slot while it lives.
    ///
    /// Takes `&self`, so a traversal holds several protected pointers at once
    /// (hand over hand: a predecessor and the current node) and retires nodes
    /// while holding them.
    ///
    /// Hazard pointers publish the pointer in `slot`, fence, and reload `src` until
    /// it is stable (Michael's set / fence / validate loop); the address is stored
    /// with its low bits (below `T`'s alignment) cleared, so tagged pointers protect
    /// their node. The epoch schemes do a plain `Acquire` load and ignore `slot`.
    ///
    /// The algorithm must still check, as with Michael's hazard pointers, that the
    /// node it reached is still linked where it needs it to be (e.g. that a list
    /// predecessor is unmarked) before following its fields to other nodes: that
    /// check is what [`Protected::as_ref`]'s safety contract asks for.
    ///
    /// # Panics
    /// Hazard pointers allocate `slot` if the thread does not have it yet, and
    /// panic only if it is not below [`HP_MAX_SLOTS`].
    #[inline]
    fn protect<'g, T>(&'g self, slot: usize, src: &AtomicPtr<T>) -> Protected<'g, T> {
        Protected::new(self.protect_raw(slot, src))
    }

    /// [`protect`](Self::protect) returning the bare pointer, whose validity the
    /// borrow checker does not track: for the rare place that must keep a protected
    /// pointer where a borrow of the guard cannot go (a loom model's liveness
    /// check, a structure field). The pointer is protected exactly as by
    /// `protect`; the caller keeps it no longer than the guard, and under hazard
    /// pointers no longer than `slot` holds it.
    fn protect_raw<T>(&self, slot: usize, src: &AtomicPtr<T>) -> *mut T;

    /// Stops protecting the node in `slot` (hazard pointers; no-op otherwise).
    /// `&mut self`: no [`Protected`] pointer of the guard may live across it.
    fn release(&mut self, slot: usize);

    /// Retires `ptr`: `free(ptr)` runs once no thread can reach it (possibly on
    /// another thread, possibly when the domain drops).
    ///
    /// # Safety
    /// `ptr` is unlinked (no new operation can reach it), retired once, and
    /// `free(ptr)` is sound to call from any thread, at any later time.
    unsafe fn retire_raw(&self, ptr: *mut u8, free: unsafe fn(*mut u8)) {
        // SAFETY: the caller's contract, with `arg = ptr`.
        unsafe { self.retire_raw_with(ptr, ptr, free) }
    }

    /// Retires `ptr` with context: `free(arg)` runs once no thread can reach
    /// `ptr`. The primitive under [`retire_raw`](Self::retire_raw),
    /// [`retire_with`](Self::retire_with) and [`defer`](Self::defer) (each scheme
    /// implements this one). `ptr` is only compared (with hazard slots); it may be
    /// null, which no hazard protects.
    ///
    /// # Safety
    /// `ptr` is null, or unlinked and retired once; `free(arg)` is sound to call
    /// once from any thread, at any later time after no thread can reach `ptr`.
    unsafe fn retire_raw_with(&self, ptr: *mut u8, arg: *mut u8, free: unsafe fn(*mut u8));

    /// Retires `ptr` with a closure: `f` runs once no thread can reach `ptr`
    /// (under hazard pointers: once no hazard slot holds it; under the epoch
    /// schemes: after a grace period). The closure carries whatever freeing the
    /// node needs beyond its address — a length, an allocator, other objects to
    /// free with it — which is what an RCU table's retired bucket array needs.
    /// Counted as one retired node in [`Reclaimer::stats`]. `f` may use this
    /// domain, and may panic: see the [module documentation](self).
    ///
    /// ```
    /// use mpsync::reclaim::{Guard, HazardPointers, Local, Reclaimer};
    /// use mpsync::sync::{Arc, AtomicPtr, Ordering};
    ///
    /// let hp = Arc::new(HazardPointers::with_threshold(1, 1).unwrap());
    /// let (mut r, mut w) = (HazardPointers::register(&hp), HazardPointers::register(&hp));
    /// // A bucket array of a length only the table knows.
    /// let len = 8;
    /// let array: *mut [u64] = Box::into_raw(vec![7u64; len].into_boxed_slice());
    /// let shared = AtomicPtr::new(array.cast::<u64>());
    /// let g = r.enter();
    /// let p = g.protect_raw(0, &shared); // raw: indexed past the node below
    /// let old = shared.swap(std::ptr::null_mut(), Ordering::AcqRel); // unlink
    /// let addr = old as usize; // the closure must be `Send`: carry an address
    /// // SAFETY: `old` is unlinked and retired once; the closure frees exactly
    /// // the boxed slice `array` was, with its length.
    /// unsafe {
    ///     w.enter().retire_with(old.cast(), move || {
    ///         let s = std::ptr::slice_from_raw_parts_mut(addr as *mut u64, len);
    ///         drop(Box::from_raw(s));
    ///     })
    /// };
    /// assert_eq!(unsafe { *p.add(len - 1) }, 7, "protected: not freed yet");
    /// drop(g);
    /// w.scan();
    /// assert_eq!(hp.stats().freed, 1);
    /// ```
    ///
    /// # Safety
    /// `ptr` is unlinked (no new operation can reach it) and retired once; running
    /// `f` is sound once no thread can reach `ptr` (a safe closure that only frees
    /// what it owns is always sound; one that frees through raw pointers must only
    /// free what is reachable through `ptr` alone).
    unsafe fn retire_with<F: FnOnce() + Send + 'static>(&self, ptr: *mut u8, f: F) {
        // SAFETY: the caller's contract; `run_boxed::<F>` runs and frees exactly
        // the box made here, once.
        unsafe { self.retire_raw_with(ptr, boxed(f), run_boxed::<F>) }
    }

    /// Defers `f` to a later time: under the epoch schemes (QSBR, EBR) until
    /// every guard alive now has ended (a grace period), so `f` may free what
    /// readers of this domain might still be reading *if it was unlinked before
    /// this call*; under [`Leak`], until the domain drops. **Hazard pointers have
    /// no grace period**: there `f` runs at this thread's next scan of its
    /// retired list, whatever other threads protect — use
    /// [`retire_with`](Self::retire_with) to wait for the readers of one node.
    ///
    /// Safe: `f` is a `'static + Send` safe closure, so running it at any time on
    /// any thread is sound; only the timing is the scheme's. Counted as one
    /// retired node in [`Reclaimer::stats`]. `f` may use this domain, and may
    /// panic: see the [module documentation](self).
    ///
    /// ```
    /// use mpsync::reclaim::{Ebr, Guard, Local, Reclaimer};
    /// use mpsync::sync::Arc;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    ///
    /// let ebr = Arc::new(Ebr::with_advance_every(1).unwrap());
    /// let mut l = Ebr::register(&ebr);
    /// let ran = Arc::new(AtomicBool::new(false));
    /// let r = ran.clone();
    /// l.enter().defer(move || r.store(true, Ordering::Relaxed));
    /// assert!(!ran.load(Ordering::Relaxed), "not before a grace period");
    /// for _ in 0..4 {
    ///     l.try_reclaim();
    /// }
    /// assert!(ran.load(Ordering::Relaxed));
    /// ```
    fn defer<F: FnOnce() + Send + 'static>(&self, f: F) {
        // SAFETY: `ptr` is null (nothing to compare); `run_boxed::<F>` runs a safe
        // `'static + Send` closure, sound at any time on any thread, and frees
        // exactly the box made here, once.
        unsafe { self.retire_raw_with(std::ptr::null_mut(), boxed(f), run_boxed::<F>) }
    }

    /// Retires a node made by `Box::new`; it is dropped once no thread can reach it.
    ///
    /// # Safety
    /// As [`retire_raw`](Self::retire_raw): `ptr` came from `Box::into_raw`, is
    /// unlinked, retired once, and whatever `T` borrows outlives the domain.
    unsafe fn retire_box<T: Send>(&self, ptr: *mut T) {
        /// # Safety
        /// `p` came from `Box::<T>::into_raw` and is freed once.
        unsafe fn free_box<T>(p: *mut u8) {
            // SAFETY: the contract above.
            drop(unsafe { Box::from_raw(p.cast::<T>()) });
        }
        // SAFETY: the caller's contract; `free_box::<T>` frees exactly that box.
        unsafe { self.retire_raw(ptr.cast(), free_box::<T>) }
    }
}

/// `f` on the heap, as the argument of [`run_boxed::<F>`].
fn boxed<F>(f: F) -> *mut u8 {
    Box::into_raw(Box::new(f)).cast()
}

/// Runs and frees the closure [`boxed`] made.
///
/// # Safety
/// `p` came from `boxed::<F>` and is used once.
unsafe fn run_boxed<F: FnOnce()>(p: *mut u8) {
    // SAFETY: the contract: a `Box<F>` made by `boxed`, taken back once.
    let f = unsafe { Box::from_raw(p.cast::<F>()) };
    f();
}

/// A pointer protected by a guard ([`Guard::protect`]): it cannot outlive the
/// guard `'g` it borrows (shared), so neither can the references
/// [`as_ref`](Self::as_ref) makes from it. Like crossbeam-epoch's `Shared<'g, T>`.
/// `Copy`; may carry tag bits below `T`'s alignment (a list's mark bit), which
/// [`as_ref`](Self::as_ref) ignores.
///
/// ```compile_fail,E0597
/// use mpsync::reclaim::{Ebr, Guard, Local, Reclaimer};
/// use mpsync::sync::{Arc, AtomicPtr};
/// let d = Arc::new(Ebr::new());
/// let mut l = Ebr::register(&d);
/// let src = AtomicPtr::new(Box::into_raw(Box::new(1u64)));
/// let p = {
///     let g = l.enter();
///     g.protect(0, &src) // error: `g` does not live long enough
/// };
/// ```
///
/// ```compile_fail,E0502
/// use mpsync::reclaim::{HazardPointers, Guard, Local, Reclaimer};
/// use mpsync::sync::{Arc, AtomicPtr};
/// let d = Arc::new(HazardPointers::new(1).unwrap());
/// let mut l = HazardPointers::register(&d);
/// let src = AtomicPtr::new(Box::into_raw(Box::new(1u64)));
/// let mut g = l.enter();
/// let p = g.protect(0, &src);
/// g.release(0); // error: the slot cannot be released while `p` lives
/// let _ = p.is_null();
/// ```
pub struct Protected<'g, T> {
    ptr: *mut T,
    _guard: PhantomData<&'g T>,
}

impl<'g, T> Protected<'g, T> {
    #[inline(always)]
    fn new(ptr: *mut T) -> Self {
        Self {
            ptr,
            _guard: PhantomData,
        }
    }

    /// The null pointer (a protected pointer that protects nothing).
    #[inline(always)]
    pub fn null() -> Self {
        Self::new(std::ptr::null_mut())
    }

    /// The pointer, tag bits included.
    #[inline(always)]
    pub fn as_ptr(self) -> *mut T {
        self.ptr
    }

    /// Whether the pointer is null, ignoring tag bits.
    #[inline(always)]
    pub fn is_null(self) -> bool {
        self.untagged().ptr.is_null()
    }

    /// The tag: the pointer's low bits below `T`'s alignment.
    #[inline(always)]
    pub fn tag(self) -> usize {
        self.ptr.addr() & Self::MASK
    }

    /// The same pointer with its tag bits cleared.
    #[inline(always)]
    pub fn untagged(self) -> Self {
        Self::new(self.ptr.map_addr(|a| a & !Self::MASK))
    }

    /// Bits below `T`'s alignment.
    const MASK: usize = std::mem::align_of::<T>() - 1;

    /// The node, for as long as the guard lives (`None` if the pointer is null;
    /// tag bits are ignored).
    ///
    /// # Safety
    /// The node was not yet retired when [`protect`](Guard::protect) returned it —
    /// the algorithm's own check, e.g. that `src` is a root that never points to
    /// a retired node, or that a list predecessor was unmarked (see `protect`) —
    /// and, under hazard pointers, the guard has not protected into this pointer's
    /// slot again since (the borrow checker already rules out its release). Under
    /// schemes that protect everything reachable ([`ProtectsReachable`]) the second
    /// condition is void.
    #[inline(always)]
    pub unsafe fn as_ref(self) -> Option<&'g T> {
        // SAFETY: the contract: the node was live when protected and stays
        // protected while the guard `'g` lives.
        unsafe { self.untagged().ptr.as_ref() }
    }

    /// As [`as_ref`](Self::as_ref), for a pointer known to be non-null.
    ///
    /// # Safety
    /// As [`as_ref`](Self::as_ref), and the pointer is not null.
    #[inline(always)]
    pub unsafe fn deref(self) -> &'g T {
        // SAFETY: the contract.
        unsafe { &*self.untagged().ptr }
    }
}

impl<T> Clone for Protected<'_, T> {
    #[inline(always)]
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Protected<'_, T> {}

impl<T> PartialEq for Protected<'_, T> {
    fn eq(&self, other: &Self) -> bool {
        self.ptr == other.ptr
    }
}

impl<T> Eq for Protected<'_, T> {}

impl<T> std::fmt::Debug for Protected<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Protected").field(&self.ptr).finish()
    }
}

impl<T> std::fmt::Pointer for Protected<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Pointer::fmt(&self.ptr, f)
    }
}

/// The per-node header of scheme `R` ([`Reclaimer::Header`]), which every node of
/// every structure in [`ds`](crate::ds) embeds, so that an interval-based scheme
/// (IBR, Hazard Eras) can stamp birth eras without touching the structures.
/// Zero-sized for today's schemes: a node is no larger for it.
///
/// ```
/// use mpsync::reclaim::{Ebr, HazardPointers, Header, Leak, Qsbr};
/// assert_eq!(std::mem::size_of::<Header<Ebr>>(), 0);
/// assert_eq!(std::mem::size_of::<Header<Qsbr>>(), 0);
/// assert_eq!(std::mem::size_of::<Header<HazardPointers>>(), 0);
/// assert_eq!(std::mem::size_of::<Header<Leak>>(), 0);
/// ```
#[repr(transparent)]
pub struct Header<R: Reclaimer>(R::Header);

impl<R: Reclaimer> Header<R> {
    /// The header of a node made under guard `g` ([`Guard::header`]).
    #[inline(always)]
    pub fn new<G: Guard<Header = R::Header>>(g: &G) -> Self {
        Self(g.header())
    }

    /// The header of a node made outside an operation, by `l`'s thread
    /// ([`Local::header`]).
    #[inline(always)]
    pub fn of_local<L: Local<Header = R::Header>>(l: &L) -> Self {
        Self(l.header())
    }

    /// The scheme's header value.
    #[inline(always)]
    pub fn get(&self) -> &R::Header {
        &self.0
    }
}

impl<R: Reclaimer> Default for Header<R> {
    /// The header of a node made before any operation (a structure's first
    /// dummy node): the scheme's conservative `Default`.
    #[inline(always)]
    fn default() -> Self {
        Self(R::Header::default())
    }
}

impl<R: Reclaimer> std::fmt::Debug for Header<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Header<{}>", R::NAME)
    }
}

/// A registration's mutable state, shared by the registration and its live
/// guards ([`Local::enter`] takes `&self`, so one thread may hold several guards,
/// and a guard's `protect`/retire take `&self`, so the [`Protected`] pointers it
/// hands out can borrow it shared). `!Sync`: only the registration's thread
/// reaches it; `Send` where the state is.
///
/// **Re-entry.** User code can reach a registration while one of its
/// operations runs: a retired value's `Drop` or a deferred closure, run by
/// reclamation, may use a registration kept in a thread-local (or cached, as
/// [`Auto`](crate::ds::handle::Auto) keeps one) — `Send + 'static` does not stop
/// that. So no closure given to [`with`](Self::with) runs user code: the
/// schemes change their state inside it and return what is to be freed (a
/// [`Garbage`](limbo::Garbage)), which they free after `with` returns, when the
/// state is consistent again (pinned while a guard lives, the retired list
/// whole). A re-entrant operation then works; a panicking `Drop` finds nothing
/// half-done. Debug builds check that `with` is never re-entered.
struct LocalCell<S> {
    state: std::cell::UnsafeCell<S>,
    /// Debug builds: set while a `with` runs (re-entry panics).
    #[cfg(debug_assertions)]
    busy: std::cell::Cell<bool>,
}

// SAFETY: moving the cell moves the state; it stays `!Sync` (the `UnsafeCell`).
unsafe impl<S: Send> Send for LocalCell<S> {}

impl<S> LocalCell<S> {
    fn new(s: S) -> Self {
        Self {
            state: std::cell::UnsafeCell::new(s),
            #[cfg(debug_assertions)]
            busy: std::cell::Cell::new(false),
        }
    }

    /// The state, through an exclusive borrow of the registration (no guard lives).
    #[inline(always)]
    fn get_mut(&mut self) -> &mut S {
        self.state.get_mut()
    }

    /// Runs `f` on the state. `f` runs no user code (no node is freed, no
    /// closure run in it: see the type's doc) and does not call `with`.
    #[inline(always)]
    fn with<T>(&self, f: impl FnOnce(&mut S) -> T) -> T {
        #[cfg(debug_assertions)]
        let _busy = Busy::enter(&self.busy);
        // SAFETY: the cell is `!Sync`, so only this thread reaches it; `with` is
        // not re-entered (`f` neither calls it nor runs user code, which alone
        // could reach this registration again — the type's doc; debug builds
        // check), and no reference into the state outlives `f`: this `&mut` is
        // the only reference to the state while it lives.
        f(unsafe { &mut *self.state.get() })
    }
}

/// Debug builds: marks a [`LocalCell`] busy for one `with`.
#[cfg(debug_assertions)]
struct Busy<'a>(&'a std::cell::Cell<bool>);

#[cfg(debug_assertions)]
impl<'a> Busy<'a> {
    #[inline(always)]
    fn enter(busy: &'a std::cell::Cell<bool>) -> Self {
        assert!(
            !busy.replace(true),
            "reclaim: a registration's state was re-entered while it was being changed \
             (user code run inside `LocalCell::with`): a bug in mpsync"
        );
        Self(busy)
    }
}

#[cfg(debug_assertions)]
impl Drop for Busy<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.0.set(false);
    }
}

impl<S> std::fmt::Debug for LocalCell<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LocalCell(..)")
    }
}

/// Node counts of a domain.
///
/// `pending` = retired but not yet freed, including nodes handed over by threads
/// that left. A snapshot summed over per-thread counters without stopping anyone:
/// exact (`freed + pending == retired`) whenever no thread is retiring or freeing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReclaimStats {
    /// Nodes retired so far.
    pub retired: u64,
    /// Nodes freed so far.
    pub freed: u64,
    /// Nodes retired and not yet freed.
    pub pending: u64,
}

/// Invalid reclamation parameters supplied by the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReclaimError {
    /// EBR's advance interval was zero.
    ZeroAdvanceInterval,
    /// Hazard slots per thread up front outside `1..=HP_MAX_SLOTS`.
    HazardSlots(usize),
    /// A hazard-pointer scan threshold of zero.
    ZeroScanThreshold,
}

impl std::fmt::Display for ReclaimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ZeroAdvanceInterval => f.write_str(
                "EBR advance interval 0: must be >= 1 critical section between epoch-advance attempts (default 100)",
            ),
            Self::HazardSlots(k) => write!(
                f,
                "hazard pointers per thread {k}: must be in 1..={HP_MAX_SLOTS} (the slots a thread gets up front, more are added on demand; stacks need 1, queues and lists 2; default {HP_DEFAULT_SLOTS})"
            ),
            Self::ZeroScanThreshold => f.write_str(
                "hazard-pointer scan threshold 0: must be >= 1 retired node (default 2H + 100, H = total hazard slots)",
            ),
        }
    }
}

impl std::error::Error for ReclaimError {}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::Ordering;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as StdOrdering};

    /// A closure that counts its runs.
    fn counting(runs: &std::sync::Arc<AtomicUsize>) -> impl FnOnce() + Send + 'static {
        let r = runs.clone();
        move || {
            r.fetch_add(1, StdOrdering::Relaxed);
        }
    }

    /// `defer` under an epoch scheme: nothing runs while `holder` may still read
    /// (its guard alive / no quiescent state), every closure runs once after, and
    /// those still pending when the domain drops run then.
    fn deferred_wait_for_a_grace_period<R: Reclaimer>(d: Arc<R>) {
        let runs = std::sync::Arc::new(AtomicUsize::new(0));
        let mut holder = R::register(&d);
        let mut worker = R::register(&d);
        {
            let _reading = holder.enter();
            for _ in 0..3 {
                worker.enter().defer(counting(&runs));
            }
            for _ in 0..10 {
                drop(worker.enter());
                worker.quiescent();
            }
            assert_eq!(runs.load(StdOrdering::Relaxed), 0, "{}: early", R::NAME);
        }
        holder.quiescent();
        for _ in 0..10 {
            drop(worker.enter());
            worker.quiescent();
            holder.quiescent();
        }
        assert_eq!(runs.load(StdOrdering::Relaxed), 3, "{}", R::NAME);
        worker.enter().defer(counting(&runs));
        drop((holder, worker));
        let s = d.stats();
        assert_eq!((s.retired, s.freed + s.pending), (4, 4), "{}", R::NAME);
        drop(d); // runs the last one (Miri: the boxed closure is not leaked)
        assert_eq!(runs.load(StdOrdering::Relaxed), 4, "{}", R::NAME);
    }

    #[test]
    fn defer_waits_for_a_grace_period_under_qsbr_and_ebr() {
        deferred_wait_for_a_grace_period(Arc::new(Qsbr::new()));
        deferred_wait_for_a_grace_period(Arc::new(Ebr::with_advance_every(1).unwrap()));
    }

    #[test]
    fn leak_runs_deferred_closures_when_the_domain_drops() {
        let runs = std::sync::Arc::new(AtomicUsize::new(0));
        let d = Arc::new(Leak::new());
        let l = Leak::register(&d);
        l.enter().defer(counting(&runs));
        // A zero-sized closure: `Box` allocates nothing, and still runs once.
        l.enter().defer(|| ());
        drop(l);
        assert_eq!(runs.load(StdOrdering::Relaxed), 0);
        assert_eq!(d.stats().pending, 2);
        drop(d);
        assert_eq!(runs.load(StdOrdering::Relaxed), 1);
    }

    #[test]
    fn retire_with_waits_for_the_hazard_on_its_node() {
        let d = Arc::new(HazardPointers::with_threshold(1, 1).unwrap());
        let r = HazardPointers::register(&d);
        let mut w = HazardPointers::register(&d);
        let node = Box::into_raw(Box::new(9u64));
        let src = AtomicPtr::new(node);
        let freed = std::sync::Arc::new(AtomicBool::new(false));
        let g = r.enter();
        assert_eq!(g.protect_raw(0, &src), node);
        src.store(std::ptr::null_mut(), Ordering::Release); // unlink
        /// The node's address, `Send` (keeps its provenance, unlike a `usize`).
        struct Owned(*mut u64);
        // SAFETY: the box it points to is owned by the closure alone.
        unsafe impl Send for Owned {}
        impl Owned {
            fn free(self) {
                // SAFETY: made by `Box::into_raw` above, freed once, here.
                drop(unsafe { Box::from_raw(self.0) });
            }
        }
        let (f, owned) = (freed.clone(), Owned(node));
        // SAFETY: `node` is unlinked and retired once; the closure frees exactly
        // that box, once.
        unsafe {
            w.enter().retire_with(node.cast(), move || {
                owned.free();
                f.store(true, StdOrdering::Relaxed);
            })
        };
        w.scan();
        assert!(!freed.load(StdOrdering::Relaxed), "freed under a hazard");
        // SAFETY: protected by slot 0.
        assert_eq!(unsafe { *node }, 9);
        // `defer` has no node to wait for: hazard pointers run it at the next scan.
        let runs = std::sync::Arc::new(AtomicUsize::new(0));
        w.enter().defer(counting(&runs));
        assert_eq!(runs.load(StdOrdering::Relaxed), 1, "threshold 1: scanned");
        drop(g);
        w.scan();
        assert!(freed.load(StdOrdering::Relaxed));
        let s = d.stats();
        assert_eq!((s.retired, s.freed, s.pending), (2, 2, 0));
    }

    /// A node whose drop is counted.
    struct Tracked(std::sync::Arc<AtomicUsize>);

    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.fetch_add(1, StdOrdering::Relaxed);
        }
    }

    /// Lets `w` reclaim whatever it can: critical sections (EBR advances),
    /// quiescent states (QSBR) and a deferred no-op each (hazard pointers with
    /// threshold 1 scan at every retire).
    fn reclaim_hard<L: Local>(w: &mut L) {
        for _ in 0..10 {
            w.enter().defer(|| ());
            w.quiescent();
        }
    }

    /// Two guards of one registration at once: the first protects node 1 (slot
    /// 0), the second, entered while the first lives, protects nodes 2 and 3 in
    /// its own slots 0 and 1 and drops first (more come and go inside it). While the first guard lives,
    /// node 1, unlinked and retired by another thread, is not freed however much
    /// that thread reclaims — before, between and after the second guard — and
    /// it is freed once the first guard drops too.
    fn two_guards_at_once<R: Reclaimer>(d: Arc<R>) {
        let drops = std::sync::Arc::new(AtomicUsize::new(0));
        let node = |_: u8| Box::into_raw(Box::new(Tracked(drops.clone())));
        let srcs = [node(1), node(2), node(3)].map(AtomicPtr::new);
        let r = R::register(&d);
        let mut w = R::register(&d);
        let g1 = r.enter();
        let p1 = g1.protect(0, &srcs[0]);
        let old = srcs[0].swap(std::ptr::null_mut(), Ordering::AcqRel); // unlink
        // SAFETY: unlinked above, retired once, made by `Box`.
        unsafe { w.enter().retire_box(old) };
        reclaim_hard(&mut w);
        {
            let g2 = r.enter();
            let p2 = g2.protect(0, &srcs[1]);
            let p3 = g2.protect(1, &srcs[2]);
            reclaim_hard(&mut w);
            // More guards, one at a time, with the first two alive: the epoch
            // has moved on since the first guard pinned it (EBR), and must not
            // move on twice more while it lives (a nested guard that re-pinned
            // would let it, by one epoch per guard).
            for _ in 0..4 {
                let g3 = r.enter();
                reclaim_hard(&mut w);
                drop(g3);
                reclaim_hard(&mut w);
            }
            // SAFETY: protected by `g2`'s slots, validated, never retired.
            assert!(unsafe { p2.as_ref().is_some() && p3.as_ref().is_some() });
        }
        reclaim_hard(&mut w);
        assert_eq!(
            drops.load(StdOrdering::Relaxed),
            0,
            "{}: node 1 freed while the first guard protects it",
            R::NAME
        );
        // SAFETY: protected by `g1` (slot 0), validated before the unlink.
        assert!(unsafe { p1.as_ref() }.is_some());
        drop(g1);
        drop(r); // QSBR: the reader's leaving is its last quiescent state
        reclaim_hard(&mut w);
        // The leaking baseline frees only when the domain drops.
        let freed = usize::from(R::NAME != "Leak");
        assert_eq!(
            drops.load(StdOrdering::Relaxed),
            freed,
            "{}: node 1 not freed",
            R::NAME
        );
        drop((w, d));
        assert_eq!(drops.load(StdOrdering::Relaxed), 1, "{}", R::NAME);
        for s in &srcs[1..] {
            // SAFETY: never shared beyond this test; freed once, here.
            drop(unsafe { Box::from_raw(s.load(Ordering::Relaxed)) });
        }
    }

    #[test]
    fn two_guards_at_once_under_every_scheme() {
        two_guards_at_once(Arc::new(Qsbr::new()));
        two_guards_at_once(Arc::new(Ebr::with_advance_every(1).unwrap()));
        two_guards_at_once(Arc::new(HazardPointers::with_threshold(1, 1).unwrap()));
        two_guards_at_once(Arc::new(Leak::new()));
    }

    /// Under hazard pointers each live guard has its own slots: a guard entered
    /// while another lives takes a block of its own (counted in `H`), and gives
    /// it back when it drops, for the next such guard to reuse.
    #[test]
    fn hp_guards_alive_together_use_disjoint_slots() {
        let d = Arc::new(HazardPointers::new(2).unwrap());
        let l = HazardPointers::register(&d);
        assert_eq!(d.total_slots(), 2);
        let g1 = l.enter();
        let g2 = l.enter();
        let g3 = l.enter();
        assert_eq!(d.total_slots(), 2 + 2 * HP_BLOCK_SLOTS, "two bank blocks");
        drop(g2);
        let g4 = l.enter(); // reuses g2's bank
        assert_eq!(d.total_slots(), 2 + 2 * HP_BLOCK_SLOTS);
        drop((g1, g3, g4));
        let _g = l.enter();
        assert_eq!(d.total_slots(), 2 + 2 * HP_BLOCK_SLOTS, "blocks are kept");
    }

    #[test]
    #[should_panic(expected = "such a guard has 4 slots")]
    fn a_second_hp_guard_has_one_block() {
        let d = Arc::new(HazardPointers::new(1).unwrap());
        let l = HazardPointers::register(&d);
        let src = AtomicPtr::new(std::ptr::null_mut::<u64>());
        let _g1 = l.enter();
        let g2 = l.enter();
        g2.protect(HP_BLOCK_SLOTS, &src);
    }

    #[test]
    fn errors_say_what_would_be_right() {
        assert!(
            ReclaimError::HazardSlots(0)
                .to_string()
                .contains("must be in 1..=4096")
        );
        assert!(
            ReclaimError::ZeroAdvanceInterval
                .to_string()
                .contains(">= 1")
        );
        assert!(ReclaimError::ZeroScanThreshold.to_string().contains(">= 1"));
    }
}
