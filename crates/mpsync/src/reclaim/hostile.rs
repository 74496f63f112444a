//! Hostile-user unit tests of the reclamation schemes (small and single-threaded,
//! so Miri runs them): what a retired value's `Drop` or a deferred closure may do
//! when reclamation runs it — re-enter the registration that is freeing it
//! (reached through a thread-local, as a cached registration is), enter and
//! retire through it, or panic.
//!
//! The invariants: a guard protects what it protects whatever runs inside the
//! operation that entered it; a panic leaves no pin behind and no retired node
//! lost or freed twice (the rest of a batch is freed later); the domain's counts
//! stay exact.

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as StdOrdering};

use super::*;
use crate::sync::Ordering;

/// A closure a value's `Drop` runs once ([`OnDrop`]).
type Hook = Option<Box<dyn FnOnce()>>;

thread_local! {
    /// Closures that values' `Drop`s run ([`OnDrop`]), by index.
    static HOOKS: RefCell<Vec<Hook>> = const { RefCell::new(Vec::new()) };
}

/// A `Send + 'static` value whose `Drop` runs a closure kept in a thread-local —
/// which may hold anything of the thread's, its registrations included: how a
/// user's `Drop` reaches a registration that `Send` alone would keep from it.
struct OnDrop(usize);

impl Drop for OnDrop {
    fn drop(&mut self) {
        let f = HOOKS.with(|h| h.borrow_mut()[self.0].take());
        if let Some(f) = f {
            f();
        }
    }
}

/// A value whose drop runs `f` on this thread.
fn on_drop(f: impl FnOnce() + 'static) -> OnDrop {
    HOOKS.with(|h| {
        let mut h = h.borrow_mut();
        h.push(Some(Box::new(f)));
        OnDrop(h.len() - 1)
    })
}

/// A value whose drop is recorded; a second drop fails the test.
struct Flag(std::sync::Arc<AtomicBool>);

impl Drop for Flag {
    fn drop(&mut self) {
        assert!(
            !self.0.swap(true, StdOrdering::Relaxed),
            "a retired value was dropped twice"
        );
    }
}

/// A boxed [`Flag`] and the flag.
fn flagged() -> (*mut Flag, std::sync::Arc<AtomicBool>) {
    let f = std::sync::Arc::new(AtomicBool::new(false));
    (Box::into_raw(Box::new(Flag(f.clone()))), f)
}

/// Retires a fresh box holding `v` through `l`.
fn retire_value<L: Local, T: Send>(l: &L, v: T) {
    // SAFETY: a fresh box nobody else can reach, retired once.
    unsafe { l.enter().retire_box(Box::into_raw(Box::new(v))) };
}

/// A value whose `Drop` panics.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("a hostile Drop panics");
    }
}

/// EBR: a value freed when a registration pins (its old bag expired) has a
/// `Drop` that enters a guard of that same registration (reached through a
/// thread-local) and drops it. The outer guard must stay pinned: a node it
/// reads, unlinked and retired by another registration afterwards, must
/// survive however far that registration advances the epoch.
#[test]
fn ebr_a_guard_entered_from_a_drop_keeps_the_outer_pin() {
    let d = Arc::new(Ebr::with_advance_every(1).unwrap());
    let a = Rc::new(Ebr::register(&d));
    let w = Ebr::register(&d);
    let ran = Rc::new(AtomicBool::new(false));
    let (a2, ran2) = (a.clone(), ran.clone());
    retire_value(
        &*a,
        on_drop(move || {
            drop(a2.enter());
            ran2.store(true, StdOrdering::Relaxed);
        }),
    );
    for _ in 0..4 {
        drop(w.enter()); // `a` is unpinned: the epoch moves on, its bag expires
    }
    let (y, y_freed) = flagged();
    let src = AtomicPtr::new(y);
    let g = a.enter(); // pins, frees the expired bag: the hook enters a nested guard
    assert!(ran.load(StdOrdering::Relaxed), "the hook's value was freed");
    let p = g.protect_raw(0, &src);
    src.store(std::ptr::null_mut(), Ordering::Release); // unlink
    // SAFETY: unlinked, retired once, made by `Box`.
    unsafe { w.enter().retire_box(p) };
    for _ in 0..6 {
        drop(w.enter());
    }
    assert!(
        !y_freed.load(StdOrdering::Relaxed),
        "EBR: a node read under a live guard was freed: a guard entered and dropped by a \
         value's Drop, run while the outer guard pinned, unpinned the thread"
    );
    drop(g);
    for _ in 0..6 {
        drop(w.enter());
    }
    assert!(y_freed.load(StdOrdering::Relaxed), "freed once unprotected");
    let s = d.stats();
    assert_eq!((s.retired, s.freed, s.pending), (2, 2, 0));
}

/// Hazard pointers: a scan frees a value whose `Drop` — while a reader protects
/// node Y, published after the scan read the hazards — removes Y through the
/// scanning registration (a nested guard: unlink, retire). Y must not be freed
/// by the scan that is running: its hazards are older than the reader's.
#[test]
fn hp_a_node_retired_from_a_drop_during_a_scan_is_not_freed_under_its_reader() {
    // Scan when 3 nodes are retired: the third retire scans, the first node's
    // free moves the hook's value to the front and frees it, the nested retire
    // brings the list back to 2 (no nested scan).
    let d = Arc::new(HazardPointers::with_threshold(1, 3).unwrap());
    let a = Rc::new(HazardPointers::register(&d));
    let r = HazardPointers::register(&d);
    let (y, y_freed) = flagged();
    let src = Rc::new(AtomicPtr::new(y));
    let gr = r.enter();
    /// The reader's guard, for the hook (it outlives the hook's run).
    struct ReaderGuard(*const HpGuard<'static>);
    let reader = ReaderGuard(std::ptr::from_ref(&gr).cast());
    let (a2, src2) = (a.clone(), src.clone());
    let hook = on_drop(move || {
        // SAFETY: `gr` lives on the test's frame until after the scan that runs
        // this hook; its registration's state is not borrowed here (another
        // registration is scanning).
        let gr = unsafe { &*reader.0 };
        assert_eq!(gr.protect_raw(0, &*src2), y, "the reader protects Y");
        let g = a2.enter();
        let p = src2.swap(std::ptr::null_mut(), Ordering::AcqRel); // unlink Y
        // SAFETY: unlinked, retired once, made by `Box`.
        unsafe { g.retire_box(p) };
    });
    let (n1, n1_freed) = flagged();
    let ga = a.enter();
    // SAFETY: fresh boxes nobody else can reach, retired once.
    unsafe {
        ga.retire_box(n1);
        ga.retire_box(Box::into_raw(Box::new(7u64)));
        ga.retire_box(Box::into_raw(Box::new(hook))); // the third: scans
    }
    assert!(n1_freed.load(StdOrdering::Relaxed), "the scan ran");
    assert!(
        !y_freed.load(StdOrdering::Relaxed),
        "HP: a node protected by a reader was freed: a value's Drop retired it through the \
         scanning registration, and the running scan freed it with hazards read before the \
         reader protected it"
    );
    drop(ga);
    drop(gr);
    let mut a = Rc::into_inner(a).expect("the hook ran and dropped its clone");
    a.scan();
    assert!(y_freed.load(StdOrdering::Relaxed));
    drop((a, r));
    let s = d.stats();
    assert_eq!(s.freed + s.pending, s.retired);
}

/// Counts of [`reentrant_drops_are_freed_once`].
#[derive(Default)]
struct Counts {
    made: AtomicUsize,
    dropped: AtomicUsize,
    reentered: AtomicUsize,
}

/// A value that, when dropped, re-enters `l` if it can (the registration still
/// exists and is not borrowed mutably): a nested guard that retires `n - 1`
/// more such values and defers a closure that drops one more.
fn reentrant_value<L: Local + 'static>(
    l: &std::rc::Weak<RefCell<L>>,
    c: &std::sync::Arc<Counts>,
    n: usize,
) -> OnDrop {
    c.made.fetch_add(1, StdOrdering::Relaxed);
    let (l, c) = (l.clone(), c.clone());
    on_drop(move || {
        c.dropped.fetch_add(1, StdOrdering::Relaxed);
        let Some(rc) = l.upgrade() else { return };
        let Ok(reg) = rc.try_borrow() else { return };
        c.reentered.fetch_add(1, StdOrdering::Relaxed);
        let g = reg.enter();
        for _ in 1..n {
            let v = reentrant_value(&l, &c, n - 1);
            // SAFETY: a fresh box, retired once.
            unsafe { g.retire_box(Box::into_raw(Box::new(v))) };
        }
        // A deferred closure that re-enters too: it drops such a value when
        // it runs.
        c.made.fetch_add(1, StdOrdering::Relaxed);
        let (c2, inner) = (c.clone(), (n > 1).then(|| reentrant_value(&l, &c, n - 1)));
        g.defer(move || {
            c2.dropped.fetch_add(1, StdOrdering::Relaxed);
            drop(inner);
        });
    })
}

/// Every scheme that frees while registrations exist: values whose `Drop`
/// re-enters the freeing registration — a nested guard that retires more such
/// values and defers closures — wherever reclamation runs them (`enter`, a
/// retire, a quiescent state, a scan). Each value is dropped exactly once, and
/// all are freed in the end.
fn reentrant_drops_are_freed_once<R: Reclaimer>(d: Arc<R>) {
    let c = std::sync::Arc::new(Counts::default());
    let l = Rc::new(RefCell::new(R::register(&d)));
    let weak = Rc::downgrade(&l);
    for _ in 0..4 {
        retire_value(&*l.borrow(), reentrant_value(&weak, &c, 3));
    }
    let mut w = R::register(&d);
    for _ in 0..30 {
        // Reclamation through every door: a quiescent state (hooks cannot
        // re-enter: the registration is borrowed mutably), then — after
        // another registration moved the epoch on — `enter` after a park and
        // a retire, where they do.
        {
            let mut reg = l.borrow_mut();
            reg.quiescent();
            reg.park();
        }
        w.enter().defer(|| ());
        w.quiescent();
        drop(l.borrow().enter());
        retire_value(&*l.borrow(), 0u8);
        let s = d.stats();
        assert_eq!(s.freed + s.pending, s.retired, "{}: {s:?}", R::NAME);
    }
    assert!(
        c.reentered.load(StdOrdering::Relaxed) > 0,
        "{}: no hook re-entered",
        R::NAME
    );
    drop((l, w));
    drop(d);
    assert_eq!(
        c.dropped.load(StdOrdering::Relaxed),
        c.made.load(StdOrdering::Relaxed),
        "{}: values made vs dropped",
        R::NAME
    );
}

#[test]
fn reentrant_drops_are_freed_once_under_every_scheme() {
    reentrant_drops_are_freed_once(Arc::new(Qsbr::new()));
    reentrant_drops_are_freed_once(Arc::new(Ebr::with_advance_every(1).unwrap()));
    reentrant_drops_are_freed_once(Arc::new(HazardPointers::with_threshold(1, 1).unwrap()));
}

/// EBR: a value freed when a registration pins panics in its `Drop`. The panic
/// leaves the operation, and the registration must not stay pinned: another
/// registration then advances the epoch and frees what it retires.
#[test]
fn ebr_a_panicking_drop_in_enter_leaves_no_pin() {
    let d = Arc::new(Ebr::with_advance_every(1).unwrap());
    let a = Ebr::register(&d);
    let w = Ebr::register(&d);
    retire_value(&a, Bomb);
    for _ in 0..4 {
        drop(w.enter());
    }
    let panicked = catch_unwind(AssertUnwindSafe(|| drop(a.enter()))).is_err();
    assert!(panicked, "the bomb went off in enter");
    let e = d.epoch();
    let (n, freed) = flagged();
    // SAFETY: a fresh box, retired once.
    unsafe { w.enter().retire_box(n) };
    for _ in 0..6 {
        drop(w.enter());
    }
    assert!(
        d.epoch() >= e + 3 && freed.load(StdOrdering::Relaxed),
        "EBR: a Drop that panicked in `enter` left the registration pinned: the epoch \
         went from {e} to {} and a node retired after it was not freed",
        d.epoch()
    );
    // The registration is usable after the panic.
    drop(a.enter());
    drop((a, w));
    let s = d.stats();
    assert_eq!((s.retired, s.freed + s.pending), (2, 2));
    assert_eq!(s.pending, 0, "the bomb counts as freed");
}

/// Every scheme: one value of a batch panics in its `Drop` while reclamation
/// frees the batch. The panic leaves the operation that ran reclamation; the
/// other values of the batch are not lost — freed by a later reclamation (or
/// the domain's drop) — and none twice; the counts stay exact; the
/// registration keeps working.
fn a_panicking_drop_loses_nothing<R: Reclaimer>(d: Arc<R>) {
    let mut l = R::register(&d);
    // One batch: retired under one guard (one epoch; below the scan threshold).
    let g = l.enter();
    let flags: Vec<_> = (0..6)
        .map(|i| {
            let (n, f) = flagged();
            // SAFETY: fresh boxes, retired once.
            unsafe {
                if i == 2 {
                    g.retire_box(Box::into_raw(Box::new(Bomb)));
                }
                g.retire_box(n);
            }
            f
        })
        .collect();
    drop(g);
    let mut panics = 0;
    for _ in 0..20 {
        let r = catch_unwind(AssertUnwindSafe(|| {
            drop(l.enter());
            retire_value(&l, 0u8);
            l.quiescent();
        }));
        panics += usize::from(r.is_err());
    }
    if R::NAME != "Leak" {
        assert_eq!(panics, 1, "{}: the bomb went off once", R::NAME);
        let s = d.stats();
        assert_eq!(s.freed + s.pending, s.retired, "{}: {s:?}", R::NAME);
        for (i, f) in flags.iter().enumerate() {
            assert!(
                f.load(StdOrdering::Relaxed),
                "{}: value {i} of the batch the panic interrupted was never freed",
                R::NAME
            );
        }
    }
    drop(l);
    let s = d.stats();
    assert_eq!(s.freed + s.pending, s.retired, "{}: {s:?}", R::NAME);
    let r = catch_unwind(AssertUnwindSafe(|| drop(d)));
    if R::NAME == "Leak" {
        assert!(r.is_err(), "Leak: the bomb goes off when the domain drops");
    }
    for (i, f) in flags.iter().enumerate() {
        assert!(
            f.load(StdOrdering::Relaxed),
            "{}: value {i} never freed",
            R::NAME
        );
    }
}

#[test]
fn a_panicking_drop_loses_nothing_under_every_scheme() {
    a_panicking_drop_loses_nothing(Arc::new(Qsbr::new()));
    a_panicking_drop_loses_nothing(Arc::new(Ebr::with_advance_every(1).unwrap()));
    a_panicking_drop_loses_nothing(Arc::new(HazardPointers::with_threshold(1, 8).unwrap()));
    a_panicking_drop_loses_nothing(Arc::new(Leak::new()));
}

/// A value that panics when a registration leaves (its drop frees what has
/// expired) stops none of the leaving: the record is given back — the next
/// registration reuses it — and the domain still counts every node.
fn a_panicking_drop_as_a_registration_leaves<R: Reclaimer>(
    d: Arc<R>,
    records: impl Fn(&R) -> usize,
) {
    let mut a = R::register(&d);
    let mut w = R::register(&d);
    retire_value(&a, Bomb);
    a.park();
    for _ in 0..6 {
        w.enter().defer(|| ());
        w.quiescent();
        drop(w.enter());
    }
    let n = records(&d);
    assert!(
        catch_unwind(AssertUnwindSafe(|| drop(a))).is_err(),
        "{}: the bomb went off as the registration left",
        R::NAME
    );
    let again = R::register(&d);
    assert_eq!(
        records(&d),
        n,
        "{}: the record of a registration whose leaving met a panicking Drop was not given back",
        R::NAME
    );
    drop((again, w));
    let s = d.stats();
    assert_eq!(s.freed + s.pending, s.retired, "{}: {s:?}", R::NAME);
}

#[test]
fn a_panicking_drop_as_a_registration_leaves_gives_the_record_back() {
    a_panicking_drop_as_a_registration_leaves(Arc::new(Qsbr::new()), Qsbr::records);
    a_panicking_drop_as_a_registration_leaves(
        Arc::new(Ebr::with_advance_every(1).unwrap()),
        Ebr::records,
    );
    a_panicking_drop_as_a_registration_leaves(
        Arc::new(HazardPointers::with_threshold(1, 100).unwrap()),
        HazardPointers::records,
    );
}
