//! The Harris–Michael lock-free ordered list: the bucket of
//! [`LfHashMap`](super::hash::LfHashMap) and [`FastReadHashMap`](super::hash::FastReadHashMap).
//!
//! Harris, DISC 2001, and Michael, SPAA 2002 (*High performance dynamic lock-free
//! hash tables and list-based sets*); Hart, papers/002_… §3.2, Figures 3.5–3.8
//! (the list), Figure 4.5 (with hazard pointers) and Figure 5.16 (fast reads).
//! Nodes are sorted by key. A node is removed in two steps: **mark** (set bit 0 of
//! its own `next` with a CAS: it is logically deleted and its `next` is frozen),
//! then **unlink** (CAS its predecessor's `next` from it to its successor). Any
//! traversal that meets a marked node helps unlink it, and the thread whose unlink
//! CAS succeeds retires the node — exactly one does, because while a node is linked
//! exactly one unmarked `next` points to it.
//!
//! | `next` of node `n`      | who sets it                           | meaning                     |
//! |-------------------------|---------------------------------------|-----------------------------|
//! | `p` (bit 0 clear)       | insert (CAS), unlink of `p`'s old succ| `n` is in the list          |
//! | `p | 1` (bit 0 set)     | remove, by CAS from `p`               | `n` is deleted; frozen      |
//!
//! Under hazard pointers a traversal protects a window of two nodes, hand over
//! hand: slot `a` holds the predecessor, slot `b` the current node; advancing
//! swaps the roles of the two slots, so the node that was current stays protected
//! without a new publish–validate round, and only the new current node is
//! protected (Michael's `hp0`/`hp1` swap). A traversal restarts from the head when
//! it finds its predecessor marked: under hazard pointers a marked node's successor
//! may already be freed. The fast-read search (`get_fast`) does not restart and
//! does not help: it walks past marked nodes, which is safe only where the scheme
//! protects everything reachable ([`ProtectsReachable`]).
//!
//! Progress: lock-free, every traversal (searches and the walk of `for_each`
//! alike: a node left marked by a stopped remover is unlinked by whoever meets
//! it); `get_fast`: wait-free apart from the list's length. Uses `sched`: only
//! the stall points [`stall::HM_MARKED`] and [`stall::HM_FIND_STEPPED`].

use std::marker::PhantomData;
use std::ptr;

use super::alloc::NodeAlloc;
use super::lf::{CasBackoff, Liveness};
use super::map::{drop_pair_and_free, free_chains};
use crate::reclaim::{Guard, Header, Local, Protected, ProtectsReachable, Reclaimer};
use crate::sched::stall;
use crate::sync::{AtomicPtr, Ordering};

/// A list node. `#[repr(C)]` with the [`Liveness`] first (the loom test allocator
/// relies on it).
#[repr(C)]
pub(crate) struct Node<K, V, R: Reclaimer> {
    live: Liveness,
    /// The scheme's per-node header (zero-sized today).
    hdr: Header<R>,
    /// The successor, bit 0 = this node is deleted (see the module's table).
    next: AtomicPtr<Node<K, V, R>>,
    key: K,
    value: V,
}

/// The guard type of scheme `R`.
type GuardOf<'l, R> = <<R as Reclaimer>::Local as Local>::Guard<'l>;

/// A bucket: the head of a list.
pub(crate) type Head<K, V, R> = crate::sync::AtomicPtr<Node<K, V, R>>;

/// Bit 0 of a `next`: the node holding it is deleted.
const MARK: usize = 1;

#[inline(always)]
fn marked<T>(p: *mut T) -> bool {
    p.addr() & MARK != 0
}

#[inline(always)]
fn with_mark<T>(p: *mut T) -> *mut T {
    p.map_addr(|a| a | MARK)
}

#[inline(always)]
fn unmarked<T>(p: *mut T) -> *mut T {
    p.map_addr(|a| a & !MARK)
}

/// Drops a node's key and value and gives its memory back to `A` (panic-safely:
/// see [`drop_pair_and_free`]).
///
/// # Safety
/// `p` came from `A::alloc::<Node<K, V, R>>`, no thread can reach it any more, and it
/// is freed once.
unsafe fn free_node<K, V, R: Reclaimer, A: NodeAlloc>(p: *mut u8) {
    let n = p.cast::<Node<K, V, R>>();
    // SAFETY: the contract: a live node nobody else reaches; its key and value
    // are moved out and dropped once, its memory freed once, by `A`, which
    // made it.
    unsafe {
        drop_pair_and_free(&raw const (*n).key, &raw const (*n).value, || {
            A::free::<Node<K, V, R>>(p)
        })
    }
}

/// A node `insert` made and has not linked yet: freed (with its key and value)
/// if the insert unwinds — a key's `Ord` that panics in the search that retries
/// the link.
struct Unlinked<K, V, R: Reclaimer, A: NodeAlloc>(*mut Node<K, V, R>, PhantomData<A>);

impl<K, V, R: Reclaimer, A: NodeAlloc> Drop for Unlinked<K, V, R, A> {
    fn drop(&mut self) {
        // SAFETY: never shared (the guard is forgotten once the node is linked
        // or taken apart), made by `A::alloc`, freed once, here.
        unsafe { free_node::<K, V, R, A>(self.0.cast()) }
    }
}

/// Where a search stopped: `prev` is the link (a list head or a node's `next`) that
/// pointed, unmarked, to `cur`; `cur` is the first node with a key `>= key` (or
/// null), and `node` the same node as a reference. Both nodes are protected by the
/// guard `'g` the search ran under (slots `0` and `1`), until its next search.
struct Pos<'g, K, V, R: Reclaimer> {
    prev: &'g AtomicPtr<Node<K, V, R>>,
    cur: Protected<'g, Node<K, V, R>>,
    /// `cur`, if it is the node with the key searched for.
    node: Option<&'g Node<K, V, R>>,
}

/// Michael's `Find` (SPAA 2002, Figure 4): the position of `key` in the list at
/// `head`, unlinking (and retiring) the marked nodes on the way. Uses hazard slots
/// `0` and `1` of `g`.
fn find<'g, K: Ord + Send, V: Send, R: Reclaimer, A: NodeAlloc>(
    head: &'g AtomicPtr<Node<K, V, R>>,
    key: &K,
    g: &'g GuardOf<'_, R>,
) -> Pos<'g, K, V, R> {
    let mut pos = walk::<K, V, R, A>(head, g, |c| c.key >= *key);
    pos.node = pos.node.filter(|c| c.key == *key);
    pos
}

/// Michael's traversal, which `find` and `for_each` share: walks the list at
/// `head` in key order, **helps unlink** (and retires) every marked node it
/// meets, and calls `stop` on each unmarked one; returns the position of the
/// first node `stop` accepts (`node`: that node), or the end (`node: None`).
/// When its window breaks (the node it stands on was deleted under it, or a
/// helping CAS lost) it restarts from the head, and calls `stop` on nodes it has
/// seen before (`for_each` skips them by key).
///
/// Lock-free: a restart follows another thread's successful CAS (a mark, an
/// unlink, an insert), and a node a stopped remover left marked is unlinked by
/// the walk itself, not waited for. Uses hazard slots `0` and `1` of `g`.
fn walk<'g, K: Ord + Send, V: Send, R: Reclaimer, A: NodeAlloc>(
    head: &'g AtomicPtr<Node<K, V, R>>,
    g: &'g GuardOf<'_, R>,
    mut stop: impl FnMut(&'g Node<K, V, R>) -> bool,
) -> Pos<'g, K, V, R> {
    'retry: loop {
        // [1] `prev` is the head (owned by the caller's structure, which outlives
        // the guard) or the `next` field of the node protected by slot `s_prev`.
        let mut prev: &'g AtomicPtr<Node<K, V, R>> = head;
        // The slot protecting `cur` and the one protecting the node holding `prev`.
        let (mut s_cur, mut s_prev) = (0usize, 1usize);
        let mut cur = g.protect(s_cur, prev);
        // The node holding `prev` (`None`: `prev` is the head), for loom's liveness
        // check only: it must still be protected (by `s_prev`) after `protect`
        // re-read its link.
        let mut prev_node: Option<&'g Node<K, V, R>> = None;
        loop {
            if let Some(p) = prev_node {
                p.live.check();
            }
            if cur.tag() & MARK != 0 {
                // The node holding `prev` was deleted under us: its successor may
                // be unlinked and freed (hazard pointers); start again.
                continue 'retry;
            }
            // SAFETY: [2] `cur` is protected by slot `s_cur` (not protected into
            // again until we step past it), and `protect` validated that `prev`
            // still pointed to it, unmarked: the node holding `prev` was not
            // deleted then, so `cur` was linked and not yet retired.
            let Some(c) = (unsafe { cur.as_ref() }) else {
                return Pos {
                    prev,
                    cur,
                    node: None,
                };
            };
            c.live.check();
            // Acquire: pairs with the Release CAS that linked the successor, so its
            // key and value are visible once we step onto it.
            // (Michael re-reads `prev` here, against ABA on reused nodes; `protect`
            // already validated `prev → cur` with `cur` protected, and a node that is
            // unmarked when we read its `next` below was unmarked then too, so the
            // window `prev → cur` was in the list at that validation.)
            let next = c.next.load(Ordering::Acquire);
            if !marked(next) {
                if stop(c) {
                    return Pos {
                        prev,
                        cur,
                        node: Some(c),
                    };
                }
                prev = &c.next;
                prev_node = Some(c);
                // Hand over hand: the slot that protects `cur` now protects the node
                // holding `prev`; the old predecessor's slot is free for the next node.
                std::mem::swap(&mut s_cur, &mut s_prev);
                stall::point(stall::HM_FIND_STEPPED);
            } else {
                // `cur` is deleted: help unlink it. AcqRel: Release publishes nothing
                // new (the successor was published by its own link) but keeps the
                // link chain a release sequence for readers; Acquire orders our later
                // reads of the successor. Failure Relaxed: we restart.
                match prev.compare_exchange(
                    cur.as_ptr(),
                    unmarked(next),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                ) {
                    // SAFETY: our CAS unlinked `cur` (it was marked, so no insert can
                    // link after it, and it was linked only from `prev`); only the
                    // winner of that CAS retires it; `free_node` frees what
                    // `A::alloc` made, from any thread.
                    Ok(_) => unsafe { g.retire_raw(cur.as_ptr().cast(), free_node::<K, V, R, A>) },
                    Err(_) => continue 'retry,
                }
            }
            cur = g.protect(s_cur, prev);
        }
    }
}

/// Inserts `(key, value)` unless `key` is present; returns the pair back if it was.
pub(crate) fn insert<K: Ord + Send, V: Send, R: Reclaimer, A: NodeAlloc>(
    head: &AtomicPtr<Node<K, V, R>>,
    key: K,
    value: V,
    g: &GuardOf<'_, R>,
) -> Result<(), (K, V)> {
    let pos = find::<K, V, R, A>(head, &key, g);
    if pos.node.is_some() {
        return Err((key, value));
    }
    // The pair moves into a node only once an insert will be tried.
    let node = A::alloc(Node {
        live: Liveness::new(),
        hdr: Header::new(g),
        next: AtomicPtr::new(ptr::null_mut()),
        key,
        value,
    })
    .as_ptr();
    insert_node::<K, V, R, A>(head, node, pos, g, &mut CasBackoff::new())
}

/// Links `node` at `pos` (from a search for its key), searching again until it is
/// linked or its key is found present.
fn insert_node<'g, K: Ord + Send, V: Send, R: Reclaimer, A: NodeAlloc>(
    head: &'g AtomicPtr<Node<K, V, R>>,
    node: *mut Node<K, V, R>,
    mut pos: Pos<'g, K, V, R>,
    g: &'g GuardOf<'_, R>,
    backoff: &mut CasBackoff,
) -> Result<(), (K, V)> {
    let unlinked = Unlinked::<K, V, R, A>(node, PhantomData);
    loop {
        if try_link(node, &pos) {
            std::mem::forget(unlinked);
            return Ok(());
        }
        backoff.spin();
        // SAFETY: `node` is ours, not yet shared.
        pos = find::<K, V, R, A>(head, unsafe { &(*node).key }, g);
        if pos.node.is_some() {
            std::mem::forget(unlinked);
            // SAFETY: `node` was never shared; its key and value move back out once
            // and its memory is freed once.
            let kv = unsafe { (ptr::read(&(*node).key), ptr::read(&(*node).value)) };
            // SAFETY: made by `A::alloc`, contents moved out, freed once.
            unsafe { A::free::<Node<K, V, R>>(node.cast()) };
            return Err(kv);
        }
    }
}

/// One attempt to link the unshared `node` between `pos.prev` and `pos.cur`.
fn try_link<K, V, R: Reclaimer>(node: *mut Node<K, V, R>, pos: &Pos<'_, K, V, R>) -> bool {
    // SAFETY: `node` is ours, not yet shared. Relaxed: published by the CAS below.
    unsafe { &*node }
        .next
        .store(pos.cur.as_ptr(), Ordering::Relaxed);
    // Release: publishes the node's key, value and `next` to every Acquire load of
    // this link (traversals, `protect`). Failure Relaxed: the caller searches again.
    pos.prev
        .compare_exchange(pos.cur.as_ptr(), node, Ordering::Release, Ordering::Relaxed)
        .is_ok()
}

/// Removes `key`; returns a clone of its value if it was present (the value itself
/// is dropped when the node is freed: concurrent readers may still be cloning it).
pub(crate) fn remove<K: Ord + Send, V: Send + Clone, R: Reclaimer, A: NodeAlloc>(
    head: &AtomicPtr<Node<K, V, R>>,
    key: &K,
    g: &GuardOf<'_, R>,
) -> Option<V> {
    let mut backoff = CasBackoff::new();
    loop {
        let pos = find::<K, V, R, A>(head, key, g);
        // Protected by the guard (see `find`, [2]).
        let c = pos.node?;
        c.live.check();
        // Acquire: as in `find`.
        let next = c.next.load(Ordering::Acquire);
        if marked(next) {
            // Another remover got there first; the next search helps unlink it and
            // decides (it will not find the key, or a newer node for it).
            continue;
        }
        // Mark: the linearization point of a successful remove. AcqRel: Acquire
        // orders the value read below after the node's publication (already
        // ordered by `find`'s loads; kept for the marking winner's own view);
        // Release makes the mark a release for helpers. Failure Relaxed: retry.
        if c.next
            .compare_exchange(next, with_mark(next), Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            backoff.spin();
            continue;
        }
        stall::point(stall::HM_MARKED);
        c.live.check();
        let v = c.value.clone();
        // Unlink. AcqRel/Relaxed as the helping CAS in `find`.
        if pos
            .prev
            .compare_exchange(pos.cur.as_ptr(), next, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            // SAFETY: unlinked by our CAS (see `find`); only the CAS winner retires.
            unsafe { g.retire_raw(pos.cur.as_ptr().cast(), free_node::<K, V, R, A>) };
        } else {
            // Somebody changed `prev`: a search unlinks our marked node for us.
            let _ = find::<K, V, R, A>(head, key, g);
        }
        return Some(v);
    }
}

/// `f` of `key`'s value, if present: Michael's search (helps unlink marked nodes).
pub(crate) fn get_with<K: Ord + Send, V: Send, R: Reclaimer, A: NodeAlloc, T>(
    head: &AtomicPtr<Node<K, V, R>>,
    key: &K,
    g: &GuardOf<'_, R>,
    f: impl FnOnce(&V) -> T,
) -> Option<T> {
    get::<K, V, R, A>(head, key, g).map(f)
}

/// `key`'s value, if present, borrowed for as long as the guard lives (Michael's
/// search; the node stays protected by slot `0` or `1` until the guard's next
/// search of this list).
pub(crate) fn get<'g, K: Ord + Send, V: Send, R: Reclaimer, A: NodeAlloc>(
    head: &'g AtomicPtr<Node<K, V, R>>,
    key: &K,
    g: &'g GuardOf<'_, R>,
) -> Option<&'g V> {
    let c = find::<K, V, R, A>(head, key, g).node?;
    c.live.check();
    Some(&c.value)
}

/// Whether `key` is present (Michael's search, as [`get_with`]).
pub(crate) fn contains<K: Ord + Send, V: Send, R: Reclaimer, A: NodeAlloc>(
    head: &AtomicPtr<Node<K, V, R>>,
    key: &K,
    g: &GuardOf<'_, R>,
) -> bool {
    find::<K, V, R, A>(head, key, g).node.is_some()
}

/// Hart's fast read (Figure 5.16): walks the list ignoring marks — no validation,
/// no helping, no restarts — and returns `key`'s node if it is unmarked. Only for
/// schemes that protect everything reachable (the bound), under a live guard `g`
/// of that scheme; the node is valid while `g` lives.
fn search_fast<'g, K: Ord, V, R: ProtectsReachable>(
    head: &AtomicPtr<Node<K, V, R>>,
    key: &K,
    _g: &'g GuardOf<'_, R>,
) -> Option<&'g Node<K, V, R>> {
    // Acquire (here and below): pairs with the Release link of each node.
    let mut cur = unmarked(head.load(Ordering::Acquire));
    while !cur.is_null() {
        // SAFETY: `cur` was reached, under the guard, from the head through links
        // of nodes that were linked, or unlinked after the guard began (a node is
        // unlinked only after its own link is frozen by its mark, so its successor
        // is unlinked after it). The scheme frees no node retired after the guard
        // began before the guard ends (`R: ProtectsReachable`), so `cur` is valid
        // for `'g`.
        let c: &'g Node<K, V, R> = unsafe { &*cur };
        c.live.check();
        let next = c.next.load(Ordering::Acquire);
        if c.key >= *key {
            // Linearized at the load of `next`: unmarked means `c` was in the list
            // then (Heller et al.'s lazy-list `contains` argument).
            return (c.key == *key && !marked(next)).then_some(c);
        }
        cur = unmarked(next);
    }
    None
}

/// `f` of `key`'s value by a fast read ([`search_fast`]).
pub(crate) fn get_fast_with<K: Ord, V, R: ProtectsReachable, T>(
    head: &AtomicPtr<Node<K, V, R>>,
    key: &K,
    g: &GuardOf<'_, R>,
    f: impl FnOnce(&V) -> T,
) -> Option<T> {
    search_fast::<K, V, R>(head, key, g).map(|n| {
        n.live.check();
        f(&n.value)
    })
}

/// Whether `key` is present, by a fast read ([`search_fast`]).
pub(crate) fn contains_fast<K: Ord, V, R: ProtectsReachable>(
    head: &AtomicPtr<Node<K, V, R>>,
    key: &K,
    g: &GuardOf<'_, R>,
) -> bool {
    search_fast::<K, V, R>(head, key, g).is_some()
}

/// Frees every node of the lists at `heads` (a table's buckets), marked or
/// not (the structure is being dropped: no thread can reach it); a panicking
/// drop of one does not stop the others ([`free_chains`]).
///
/// # Safety
/// No other thread uses the lists, now or later; nodes still linked are freed
/// here, retired ones by their domain.
pub(crate) unsafe fn free_all<K, V, R: Reclaimer, A: NodeAlloc>(heads: &[Head<K, V, R>]) {
    // Relaxed (all): exclusive access (the contract).
    let heads = heads.iter().map(|h| unmarked(h.load(Ordering::Relaxed)));
    // SAFETY: every node reachable from a head is linked (an unlinked node is
    // no longer reachable), so never retired; owned by the list, visited and
    // freed once; its `next` is read before it is freed.
    unsafe {
        free_chains(
            heads,
            |p| unmarked((*p).next.load(Ordering::Relaxed)),
            |p, n| (*p).next.store(n, Ordering::Relaxed),
            free_node::<K, V, R, A>,
        )
    }
}

/// Visits the unmarked pairs in key order, each key at most once (Michael's
/// traversal, [`walk`]: it helps unlink the marked nodes it meets, so a remover
/// stopped between its mark and its unlink does not hold it up; entries
/// inserted or removed meanwhile may or may not be seen). When the protected
/// window breaks, the walk restarts from the head and skips the keys up to the
/// last one reported.
pub(crate) fn for_each<K: Ord + Send + Clone, V: Send, R: Reclaimer, A: NodeAlloc>(
    head: &AtomicPtr<Node<K, V, R>>,
    g: &GuardOf<'_, R>,
    f: &mut dyn FnMut(&K, &V),
) {
    let mut last: Option<K> = None;
    walk::<K, V, R, A>(head, g, |c| {
        if last.as_ref().is_none_or(|l| c.key > *l) {
            f(&c.key, &c.value);
            last = Some(c.key.clone());
        }
        false
    });
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The per-node header is free for today's schemes: a node is exactly as
    /// large (and as aligned) as the same fields without it.
    #[test]
    fn the_node_header_adds_nothing() {
        #[repr(C)]
        struct Bare {
            live: Liveness,
            next: AtomicPtr<u8>,
            key: u64,
            value: [u8; 5],
        }
        crate::reclaim::assert_header_free!(R => Node<u64, [u8; 5], R>, Bare);
    }
}
