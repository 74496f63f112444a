//! Versions for Herlihy's methodology (Herlihy, TOPLAS 1993; paper 000 §3, §4.2–4.3):
//! a shared pointer names the current *version* of an object; an operation reads the
//! version, builds a private successor (copying only what it changes), and swings
//! the shared pointer to it with one CAS.
//!
//! Used by [`HerlihyStack`](super::stack::HerlihyStack) and
//! [`HerlihySkewHeap`](super::heap::HerlihySkewHeap).
//!
//! # Ownership: who frees what, exactly once
//! Versions form one chain `V0 → V1 → V2 → …` in the order their CASes succeeded.
//! The transition `Vk → Vk+1` makes some nodes of `Vk` unreachable from every later
//! version (the popped stack node; the heap nodes on the merge path, which `Vk+1`
//! replaced by copies). Those nodes are `Dk`, the *dead list* of `Vk`; the winner of
//! the CAS stores `Dk` and the successor pointer in `Vk` and retires `Vk`. A node
//! enters one dead list only (after it leaves the structure no later version
//! contains it, and only one transition removes it), so it is freed once; nodes
//! still in the current version are in no dead list and are freed by the
//! structure's `Drop`.
//!
//! A reader protects only the version it read, then walks that version's nodes.
//! A node of `Vj` may be in `Dk` for any `k ≥ j`, so `Dk` may be freed only when no
//! thread holds any of `V0..=Vk`. Under the epoch schemes that follows from `Vk`
//! alone; hazard pointers protect `Vj` only. So every version carries a count of
//! two references — "not yet released by the reclaimer" and "predecessor not yet
//! freed" — and `Vk` with `Dk` is freed when both are gone, then releases `Vk+1`'s
//! predecessor reference. The chain is freed in order, whatever the scheme; a
//! thread that stalls holding `Vj` holds back everything after it (so under hazard
//! pointers these structures do not keep Michael's bound).
//!
//! | field  | written by                              | read by                         |
//! |--------|-----------------------------------------|---------------------------------|
//! | `root` | the builder, before the publishing CAS  | readers that protected the version |
//! | `dead` | the CAS winner that replaced it         | whoever frees it                |
//! | `succ` | the CAS winner that replaced it         | whoever frees it                |
//! | `refs` | releases (reclaimer callback, predecessor freed, structure drop) | the same |

use std::marker::PhantomData;
use std::ptr;

use crate::reclaim::{Guard, Header, Reclaimer};
use crate::sync::{AtomicPtr, AtomicUsize, Ordering};
use crate::util::unwind::{Caught, each};

/// A node that can be put on a version's dead list, and freed with `Box::from_raw`.
pub(crate) trait DeadNode: Sized {
    /// The dead-list link: written only by the CAS winner after its swing, read
    /// only by the thread that frees the list; no reader of the structure uses it.
    fn dead_next(&self) -> &AtomicPtr<Self>;
}

/// One version of a Herlihy-style object: its root and, once replaced, the nodes
/// the replacement removed.
pub(crate) struct Version<N: DeadNode, R: Reclaimer> {
    /// The scheme's per-node header (zero-sized today): a version is what is
    /// protected and retired. Read by no scheme yet (an interval-based one would
    /// read it when the version is retired).
    #[allow(dead_code)]
    hdr: Header<R>,
    /// The version's root node (stack top, heap root); immutable once published.
    pub(crate) root: *mut N,
    /// `Dk`: the nodes that the transition out of this version removed.
    dead: AtomicPtr<N>,
    /// The version that replaced this one (null while current).
    succ: AtomicPtr<Version<N, R>>,
    /// References: the reclaimer's (or the structure's, while current) and the
    /// predecessor's (until the predecessor is freed).
    refs: AtomicUsize,
    _owns: PhantomData<N>,
}

impl<N: DeadNode, R: Reclaimer> std::fmt::Debug for Version<N, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Version").field("root", &self.root).finish()
    }
}

impl<N: DeadNode, R: Reclaimer> Version<N, R> {
    /// The first version of an object: it has no predecessor.
    pub(crate) fn first(root: *mut N) -> *mut Self {
        Self::alloc(Header::default(), root, 1)
    }

    /// A candidate successor, private to its builder until the CAS publishes it.
    pub(crate) fn candidate(hdr: Header<R>, root: *mut N) -> *mut Self {
        Self::alloc(hdr, root, 2)
    }

    fn alloc(hdr: Header<R>, root: *mut N, refs: usize) -> *mut Self {
        Box::into_raw(Box::new(Self {
            hdr,
            root,
            dead: AtomicPtr::new(ptr::null_mut()),
            succ: AtomicPtr::new(ptr::null_mut()),
            refs: AtomicUsize::new(refs),
            _owns: PhantomData,
        }))
    }

    /// Frees a candidate that lost (was never published).
    ///
    /// # Safety
    /// `v` came from [`candidate`](Self::candidate) and was never shared.
    pub(crate) unsafe fn discard(v: *mut Self) {
        // SAFETY: the caller's contract: a private box.
        drop(unsafe { Box::from_raw(v) });
    }

    /// After the CAS `old → new` succeeded: records `dead` (a list linked through
    /// [`DeadNode::dead_next`], or null) and the successor in `old`, and retires it.
    /// `N: 'static`: the domain frees the nodes later, possibly after the
    /// structure is gone, so they may borrow nothing.
    ///
    /// # Safety
    /// The caller's CAS replaced `old` by `new` in the shared pointer (so it is the
    /// only thread doing this for `old`), `old` is protected by `g`, and `dead` are
    /// exactly the nodes of `old` that `new` no longer contains, linked by the caller.
    pub(crate) unsafe fn retire<G: Guard>(g: &mut G, old: *mut Self, new: *mut Self, dead: *mut N)
    where
        N: Send + 'static,
    {
        // SAFETY: `old` is protected by `g`, so it is not freed.
        let o = unsafe { &*old };
        // Relaxed (both): read only by whoever frees `old`, which the reclaimer
        // orders after this retire, or which acquires them through `refs` [1].
        o.dead.store(dead, Ordering::Relaxed);
        o.succ.store(new, Ordering::Relaxed);
        // SAFETY: `old` is unlinked by our CAS and retired once (only the CAS
        // winner gets here); `release_cb` is sound on any thread at any time: it
        // frees only version and node memory, and the nodes' contents are `Send`.
        unsafe { g.retire_raw(old.cast(), Self::release_cb) };
    }

    /// The reclaimer's callback: nobody can reach the version any more.
    unsafe fn release_cb(p: *mut u8) {
        // SAFETY: only versions of this `N` are retired with this callback.
        unsafe { Self::release(p.cast()) }
    }

    /// Drops one reference of `v`; frees `v` and its dead list when both are gone,
    /// then goes on to release the successor's predecessor reference.
    ///
    /// A node's value may panic in its `Drop`: the rest of the dead list and of
    /// the chain are still freed and released (so one panicking value cannot
    /// stop the structure's reclamation for good), then the first panic goes on.
    ///
    /// # Safety
    /// The caller owns one of `v`'s references and gives it up.
    pub(crate) unsafe fn release(mut v: *mut Self) {
        let mut caught = Caught::none();
        while !v.is_null() {
            // [1] AcqRel, as `Arc`'s drop: the Release publishes this holder's
            // writes (`dead`, `succ` by the retirer); the Acquire of the holder that
            // reaches zero sees every earlier holder's.
            // SAFETY: we own a reference, so `v` is not yet freed.
            if unsafe { (*v).refs.fetch_sub(1, Ordering::AcqRel) } != 1 {
                break;
            }
            // SAFETY: we dropped the last reference: `v` is ours alone.
            let b = unsafe { Box::from_raw(v) };
            // Relaxed (both): ordered by [1].
            let dead = DeadList(b.dead.load(Ordering::Relaxed));
            // The predecessor of `succ` (this version) is freed below.
            v = b.succ.load(Ordering::Relaxed);
            drop(b);
            // SAFETY: each node is on `v`'s dead list only, so this is its single
            // free (the iterator hands each out once, after reading its link); no
            // reader can hold it (every version that contains it is freed).
            caught = caught.or(each(dead, |n| drop(unsafe { Box::from_raw(n) })));
        }
        caught.resume();
    }
}

/// A dead list, node by node: each node's link is read before the node is
/// handed out (to be freed).
struct DeadList<N: DeadNode>(*mut N);

impl<N: DeadNode> Iterator for DeadList<N> {
    type Item = *mut N;

    fn next(&mut self) -> Option<*mut N> {
        let n = self.0;
        if n.is_null() {
            return None;
        }
        // SAFETY: a node of the list, not yet handed out (so not yet freed).
        // Relaxed: written before the retire, ordered by [1] in `release`.
        self.0 = unsafe { (*n).dead_next() }.load(Ordering::Relaxed);
        Some(n)
    }
}

/// Links `nodes` into a dead list (through [`DeadNode::dead_next`]) and returns its head.
///
/// # Safety
/// Every pointer is a live node that only the caller's winning CAS removed.
pub(crate) unsafe fn link_dead<N: DeadNode>(nodes: &[*mut N]) -> *mut N {
    let mut head = ptr::null_mut();
    for &n in nodes {
        // SAFETY: live (the caller's contract); the field is the winner's alone.
        // Relaxed: read only after the version's retire (see `Version::retire`).
        unsafe { (*n).dead_next().store(head, Ordering::Relaxed) };
        head = n;
    }
    head
}
