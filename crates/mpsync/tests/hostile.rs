//! Hostile users of the non-blocking structures (queues, stacks, Herlihy's heap),
//! the reclamation schemes under them and the handle-free `Auto` API: values
//! whose `Drop` — run by reclamation inside some other operation — re-enters the
//! same structure, another structure of the same domain, or the very
//! registration that is reclaiming (kept in a thread-local); values whose
//! `Drop`, `Clone` or `Ord` panics.
//!
//! What must hold, whatever the values do: every value made is dropped exactly
//! once (nothing leaked, nothing twice); the structures keep their contents
//! (conservation) and stay usable; a panic leaves no registration pinned, so
//! reclamation goes on after it; no operation hangs. The mechanism (a guard
//! entered from a `Drop`, a retire from a `Drop` during a scan) is unit-tested,
//! Miri-sized, in `reclaim::hostile` and `ds::hostile`.

mod common;

use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Once};

use common::sized;
use mpsync::ds::handle::Auto;
use mpsync::ds::heap::{HerlihySkewHeap, LockedSkewHeap};
use mpsync::ds::lscq::LscqQueue;
use mpsync::ds::ms_queue::MsQueue;
use mpsync::ds::plj_queue::PljQueue;
use mpsync::ds::queue::TwoLockQueue;
use mpsync::ds::stack::HerlihyStack;
use mpsync::ds::treiber::TreiberStack;
use mpsync::lock::TasB;
use mpsync::reclaim::{Ebr, HazardPointers, Leak, Local, Qsbr, Reclaimer};

thread_local! {
    /// What a value's `Drop` does on this thread besides counting (re-entry).
    static HOOK: RefCell<Option<Box<dyn FnMut()>>> = RefCell::new(None);
    /// A small generator for the fault dice.
    static DICE: Cell<u64> = const { Cell::new(0x9e37_79b9_7f4a_7c15) };
}

/// Sets this thread's hook (cleared by [`clear_hook`]; the hook holds the
/// structures it re-enters).
fn set_hook(f: impl FnMut() + 'static) {
    HOOK.with(|h| *h.borrow_mut() = Some(Box::new(f)));
}

fn clear_hook() {
    HOOK.with(|h| h.borrow_mut().take());
}

/// Runs this thread's hook, if any and not already running (values dropped by
/// the hook's own operations do not run it again).
fn run_hook() {
    let Ok(Some(mut f)) = HOOK.try_with(|h| h.borrow_mut().take()) else {
        return;
    };
    f();
    let _ = HOOK.try_with(|h| {
        let mut h = h.borrow_mut();
        if h.is_none() {
            *h = Some(f);
        }
    });
}

/// Keeps the planted panics' messages out of the output.
fn quiet_hostile_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let hostile = info
                .payload()
                .downcast_ref::<&str>()
                .is_some_and(|m| m.starts_with("hostile"));
            if !hostile {
                prev(info);
            }
        }));
    });
}

/// The lives of a test's values, and its fault dice.
#[derive(Default)]
struct Life {
    made: AtomicU64,
    dropped: AtomicU64,
    /// Panic in one of `faults` calls of `Drop`, `Clone` and `Ord` (0: never).
    faults: AtomicU32,
}

impl Life {
    fn new() -> Arc<Life> {
        quiet_hostile_panics();
        Arc::default()
    }

    /// Panics now and then (see `faults`).
    fn dice(&self, what: &'static str) {
        let n = self.faults.load(Ordering::Relaxed);
        if n == 0 {
            return;
        }
        let r = DICE.with(|d| {
            let mut x = d.get();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            d.set(x);
            x
        });
        if r.is_multiple_of(u64::from(n)) {
            std::panic::panic_any(what);
        }
    }

    fn check_all_dropped(&self, what: &str) {
        let (made, dropped) = (
            self.made.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed),
        );
        assert_eq!(
            dropped, made,
            "{what}: {made} values made, {dropped} dropped (each must be dropped exactly once)"
        );
    }
}

/// A value: counts its lives, runs the thread's hook when dropped, and panics
/// in `Drop`, `Clone` or `Ord` when the dice say so (or, armed, in `Drop`).
struct Val {
    key: u64,
    armed: bool,
    life: Arc<Life>,
}

impl Val {
    fn new(key: u64, life: &Arc<Life>) -> Val {
        life.made.fetch_add(1, Ordering::Relaxed);
        Val {
            key,
            armed: false,
            life: life.clone(),
        }
    }

    /// A value whose `Drop` panics (its clones do not).
    fn armed(key: u64, life: &Arc<Life>) -> Val {
        let mut v = Val::new(key, life);
        v.armed = true;
        v
    }
}

impl Clone for Val {
    fn clone(&self) -> Val {
        self.life.dice("hostile Clone");
        Val::new(self.key, &self.life)
    }
}

impl Drop for Val {
    fn drop(&mut self) {
        self.life.dropped.fetch_add(1, Ordering::Relaxed);
        run_hook();
        if std::thread::panicking() {
            return; // a second panic would abort
        }
        if self.armed {
            std::panic::panic_any("hostile Drop (armed)");
        }
        self.life.dice("hostile Drop");
    }
}

impl PartialEq for Val {
    fn eq(&self, o: &Val) -> bool {
        self.key == o.key
    }
}

impl Eq for Val {}

impl PartialOrd for Val {
    fn partial_cmp(&self, o: &Val) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Val {
    fn cmp(&self, o: &Val) -> std::cmp::Ordering {
        self.life.dice("hostile Ord");
        self.key.cmp(&o.key)
    }
}

fn quietly<T>(f: impl FnOnce() -> T) -> Option<T> {
    catch_unwind(AssertUnwindSafe(f)).ok()
}

/// Domains that reclaim early (EBR: an advance attempt per critical section;
/// hazard pointers: a scan at every 4th retire), so hooks run often.
trait Eager: Reclaimer + Sized {
    fn eager() -> Self;
}

impl Eager for Qsbr {
    fn eager() -> Self {
        Qsbr::new()
    }
}

impl Eager for Ebr {
    fn eager() -> Self {
        Ebr::with_advance_every(1).unwrap()
    }
}

impl Eager for HazardPointers {
    fn eager() -> Self {
        HazardPointers::with_threshold(2, 4).unwrap()
    }
}

impl Eager for Leak {
    fn eager() -> Self {
        Leak::new()
    }
}

/// A thread whose operation is cut short by a value's `Drop` panicking inside
/// reclamation, through `Auto` (the panic leaves `enter` on EBR), and which
/// then exits, its registration cached: reclamation must go on — 20,000
/// removals by another thread afterwards free their nodes.
fn a_panicking_drop_does_not_stop_reclamation<R: Reclaimer + Default>() {
    let life = Life::new();
    let h: Auto<HerlihySkewHeap<Val, R>> = Auto::wrap(HerlihySkewHeap::with_domain(
        mpsync::sync::Arc::new(R::default()),
    ));
    // This thread's slot in `Auto`'s caches first (any `Auto` will do): a
    // thread that first uses one after another thread exited takes over the
    // exited thread's slot, and with it its cached registration.
    let other: Auto<TreiberStack<u64, R>> = Auto::wrap(TreiberStack::with_domain(
        mpsync::sync::Arc::new(R::default()),
    ));
    other.push(1);
    let panicked = std::thread::scope(|s| {
        s.spawn(|| {
            h.insert(Val::armed(0, &life));
            // The armed value's node is replaced by the first delete_min; its
            // version is freed by one of the next operations' reclamation.
            (1..=20_000).any(|i| {
                quietly(|| {
                    h.insert(Val::new(i, &life));
                    h.delete_min();
                })
                .is_none()
            })
        })
        .join()
        .unwrap()
    });
    assert!(panicked, "{}: the armed Drop went off", R::NAME);
    let before = h.inner().domain().stats();
    let removals = sized(20_000, 10);
    for i in 0..removals {
        h.insert(Val::new(i, &life));
        assert!(h.delete_min().is_some());
    }
    let after = h.inner().domain().stats();
    assert!(
        after.freed >= before.freed + removals / 2,
        "{}: {removals} removals after a Drop panicked in another thread's operation freed \
         {} nodes: the panicking thread's cached registration holds reclamation up \
         ({before:?} then {after:?})",
        R::NAME,
        after.freed - before.freed
    );
    drop(h);
    life.check_all_dropped(R::NAME);
}

#[test]
fn auto_a_panicking_drop_does_not_stop_reclamation() {
    a_panicking_drop_does_not_stop_reclamation::<Ebr>();
    a_panicking_drop_does_not_stop_reclamation::<Qsbr>();
    a_panicking_drop_does_not_stop_reclamation::<HazardPointers>();
}

/// A heap and a queue of one domain, as a thread reaches them.
trait Pair {
    fn insert(&self, v: Val);
    fn delete_min(&self) -> Option<Val>;
    fn enqueue(&self, k: u64);
    fn dequeue(&self) -> Option<u64>;
}

/// Through `Auto` (cached registrations).
struct ViaAuto<R: Reclaimer> {
    heap: Auto<HerlihySkewHeap<Val, R>>,
    queue: Auto<MsQueue<u64, R>>,
}

impl<R: Reclaimer> Pair for ViaAuto<R> {
    fn insert(&self, v: Val) {
        self.heap.insert(v);
    }
    fn delete_min(&self) -> Option<Val> {
        self.heap.delete_min()
    }
    fn enqueue(&self, k: u64) {
        self.queue.enqueue(k);
    }
    fn dequeue(&self) -> Option<u64> {
        self.queue.dequeue()
    }
}

/// The two structures, for [`ViaLocal`].
struct Structs<R: Reclaimer> {
    heap: HerlihySkewHeap<Val, R>,
    queue: MsQueue<u64, R>,
}

/// With one registration.
struct ViaLocal<'a, R: Reclaimer> {
    s: &'a Structs<R>,
    l: &'a R::Local,
}

impl<R: Reclaimer> Pair for ViaLocal<'_, R> {
    fn insert(&self, v: Val) {
        self.s.heap.insert(self.l, v);
    }
    fn delete_min(&self) -> Option<Val> {
        self.s.heap.delete_min(self.l)
    }
    fn enqueue(&self, k: u64) {
        self.s.queue.enqueue(self.l, k);
    }
    fn dequeue(&self) -> Option<u64> {
        self.s.queue.dequeue(self.l)
    }
}

/// What a re-entry test counts.
struct Tally {
    life: Arc<Life>,
    enqueued: AtomicU64,
    dequeued: AtomicU64,
}

impl Tally {
    fn new() -> Arc<Tally> {
        Arc::new(Tally {
            life: Life::new(),
            enqueued: AtomicU64::new(0),
            dequeued: AtomicU64::new(0),
        })
    }

    /// One round: a value into and out of the heap, a key into and out of the
    /// queue.
    fn round(&self, p: &impl Pair, k: u64) {
        p.insert(Val::new(k, &self.life));
        p.enqueue(k);
        self.enqueued.fetch_add(1, Ordering::Relaxed);
        drop(p.delete_min());
        if p.dequeue().is_some() {
            self.dequeued.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// After the threads' `rounds` rounds: drains both structures through `p`
    /// and checks conservation (the hooks made more rounds) and heap order.
    fn drain(&self, p: &impl Pair, rounds: u64, what: &str) {
        let mut rest = 0;
        while p.dequeue().is_some() {
            rest += 1;
        }
        let (enq, deq) = (
            self.enqueued.load(Ordering::Relaxed),
            self.dequeued.load(Ordering::Relaxed),
        );
        assert_eq!(enq, deq + rest, "{what}: queue conservation");
        assert!(enq > rounds, "{what}: the hooks ran");
        let mut prev = 0;
        while let Some(v) = p.delete_min() {
            assert!(v.key >= prev, "{what}: heap order");
            prev = v.key;
        }
    }
}

/// The keys of a thread's hook rounds, at most `ops` of them: each hook's
/// operations retire values whose drops run the hook again (a chain reaction
/// without a budget).
struct Budget {
    next: u64,
    left: u64,
}

impl Budget {
    fn new(thread: u64, ops: u64) -> Budget {
        Budget {
            next: 1_000_000 * (thread + 1),
            left: ops,
        }
    }

    fn take(&mut self) -> Option<u64> {
        self.left = self.left.checked_sub(1)?;
        self.next += 1;
        Some(self.next)
    }
}

/// Three threads work on a heap and a queue that share a domain, through
/// `Auto`; every value's `Drop` (run by reclamation, inside their operations,
/// or by the threads themselves) inserts into and removes from the same heap
/// and enqueues and dequeues on the queue — through `Auto` too, so from inside
/// an operation whose cached registration is in use. Conservation on both,
/// every value dropped once, reclamation goes on.
fn drops_reenter_through_auto<R: Eager>() {
    const THREADS: u64 = 3;
    let ops = sized(3_000, 10);
    let tally = Tally::new();
    let d = mpsync::sync::Arc::new(R::eager());
    let pair = Arc::new(ViaAuto {
        heap: Auto::wrap(HerlihySkewHeap::with_domain(d.clone())),
        queue: Auto::wrap(MsQueue::with_domain(d.clone())),
    });
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (pair, tally) = (&pair, &tally);
            s.spawn(move || {
                let (p2, t2, mut keys) = (pair.clone(), tally.clone(), Budget::new(t, ops));
                set_hook(move || {
                    if let Some(k) = keys.take() {
                        t2.round(&*p2, k);
                    }
                });
                for i in 0..ops {
                    tally.round(&**pair, i);
                }
                clear_hook();
            });
        }
    });
    tally.drain(&*pair, THREADS * ops, R::NAME);
    let st = d.stats();
    assert_eq!(st.freed + st.pending, st.retired, "{}: {st:?}", R::NAME);
    if R::NAME != "Leak" {
        assert!(st.freed > 0, "{}: nothing reclaimed: {st:?}", R::NAME);
    }
    drop((pair, d));
    tally.life.check_all_dropped(R::NAME);
}

#[test]
fn drops_reenter_through_auto_every_scheme() {
    drops_reenter_through_auto::<Qsbr>();
    drops_reenter_through_auto::<Ebr>();
    drops_reenter_through_auto::<HazardPointers>();
    drops_reenter_through_auto::<Leak>();
}

/// Each thread keeps its registration in a thread-local (`Rc<RefCell<_>>`)
/// and uses it for every operation on a heap and a queue of one domain; the
/// values' `Drop`s — run by that registration's own reclamation (a pin, a
/// scan, a retire that reuses a bag) inside those operations — use the same
/// registration for more operations on both structures whenever it is not
/// borrowed mutably (a quiescent state). Conservation, every value dropped
/// once.
fn drops_reenter_the_reclaiming_registration<R: Eager>() {
    const THREADS: u64 = 2;
    let ops = sized(3_000, 10);
    let tally = Tally::new();
    let d = mpsync::sync::Arc::new(R::eager());
    let s = Arc::new(Structs {
        heap: HerlihySkewHeap::with_domain(d.clone()),
        queue: MsQueue::with_domain(d.clone()),
    });
    std::thread::scope(|sc| {
        for t in 0..THREADS {
            let (s, tally, d) = (&s, &tally, &d);
            sc.spawn(move || {
                let reg = Rc::new(RefCell::new(R::register(d)));
                let weak = Rc::downgrade(&reg);
                let (s2, t2, mut keys) = (s.clone(), tally.clone(), Budget::new(t, ops));
                set_hook(move || {
                    let Some(reg) = weak.upgrade() else { return };
                    let Ok(l) = reg.try_borrow() else { return };
                    if let Some(k) = keys.take() {
                        t2.round(&ViaLocal { s: &*s2, l: &l }, k);
                    }
                });
                for i in 0..ops {
                    tally.round(
                        &ViaLocal {
                            s: &**s,
                            l: &reg.borrow(),
                        },
                        i,
                    );
                    if i % 8 == 0 {
                        let mut l = reg.borrow_mut();
                        l.quiescent();
                        l.park(); // QSBR: the next operation re-joins, and frees there
                    }
                }
                clear_hook();
                drop(reg);
            });
        }
    });
    let l = R::register(&d);
    tally.drain(&ViaLocal { s: &*s, l: &l }, THREADS * ops, R::NAME);
    drop(l);
    let st = d.stats();
    assert_eq!(st.freed + st.pending, st.retired, "{}: {st:?}", R::NAME);
    drop((s, d));
    tally.life.check_all_dropped(R::NAME);
}

#[test]
fn drops_reenter_the_reclaiming_registration_every_scheme() {
    drops_reenter_the_reclaiming_registration::<Qsbr>();
    drops_reenter_the_reclaiming_registration::<Ebr>();
    drops_reenter_the_reclaiming_registration::<HazardPointers>();
    drops_reenter_the_reclaiming_registration::<Leak>();
}

/// Two threads insert into and remove from Herlihy's heap (through `Auto`)
/// while one in 40 calls of the values' `Drop`, `Clone` and `Ord` panics:
/// each operation either completes or panics and leaves the heap as it was;
/// afterwards (no more faults) the heap drains in order, every value made is
/// dropped once, and reclamation went on through the panics.
fn panics_in_drop_clone_and_ord<R: Eager>() {
    let ops = sized(4_000, 10);
    let life = Life::new();
    let d = mpsync::sync::Arc::new(R::eager());
    let heap = Auto::wrap(HerlihySkewHeap::<Val, R>::with_domain(d.clone()));
    life.faults.store(40, Ordering::Relaxed);
    let panics = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (heap, life, panics) = (&heap, &life, &panics);
            s.spawn(move || {
                for i in 0..ops {
                    let k = (i * 7 + t * 3) % 1_000;
                    if quietly(|| heap.insert(Val::new(k, life))).is_none() {
                        panics.fetch_add(1, Ordering::Relaxed);
                    }
                    if quietly(|| drop(heap.delete_min())).is_none() {
                        panics.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    life.faults.store(0, Ordering::Relaxed);
    assert!(
        panics.load(Ordering::Relaxed) > 0,
        "{}: no fault fired",
        R::NAME
    );
    let mid = d.stats();
    for i in 0..sized(2_000, 10) {
        heap.insert(Val::new(i, &life));
        drop(heap.delete_min());
    }
    let mut prev = 0;
    while let Some(v) = heap.delete_min() {
        assert!(v.key >= prev, "{}: heap order after panics", R::NAME);
        prev = v.key;
    }
    let st = d.stats();
    assert_eq!(st.freed + st.pending, st.retired, "{}: {st:?}", R::NAME);
    if R::NAME != "Leak" {
        assert!(
            st.freed > mid.freed,
            "{}: reclamation stopped after the panics: {mid:?} then {st:?}",
            R::NAME
        );
    }
    drop(heap);
    drop(d);
    life.check_all_dropped(R::NAME);
}

#[test]
fn panics_in_drop_clone_and_ord_every_scheme() {
    panics_in_drop_clone_and_ord::<Qsbr>();
    panics_in_drop_clone_and_ord::<Ebr>();
    panics_in_drop_clone_and_ord::<HazardPointers>();
    panics_in_drop_clone_and_ord::<Leak>();
}

/// Values left in a queue, stack or heap when it drops, one in five panicking
/// in its `Drop`: every one is dropped, the first panic comes out of the drop.
/// (The `Vec`-based structures drop as `Vec` does: a second panic aborts.)
/// (Inserted largest first, so the heap copies no node: all 20 are in it.)
#[test]
fn a_structure_drops_every_value_left_when_some_panic() {
    fn check<S>(what: &str, make: impl FnOnce() -> S, fill: impl Fn(&S, Val)) {
        let life = Life::new();
        let s = make();
        for i in (0..20).rev() {
            fill(
                &s,
                if i % 5 == 2 {
                    Val::armed(i, &life)
                } else {
                    Val::new(i, &life)
                },
            );
        }
        assert!(
            catch_unwind(AssertUnwindSafe(|| drop(s))).is_err(),
            "{what}: the panic comes out"
        );
        life.check_all_dropped(what);
    }
    let d = mpsync::sync::Arc::new(Ebr::new());
    let l = Ebr::register(&d);
    check(
        "MsQueue",
        || MsQueue::<Val>::with_domain(d.clone()),
        |q, v| q.enqueue(&l, v),
    );
    check(
        "PljQueue",
        || PljQueue::<Val>::with_domain(d.clone()),
        |q, v| q.enqueue(&l, v),
    );
    check(
        "LscqQueue (5 segments)",
        || LscqQueue::<Val>::with_domain_and_segment_capacity(d.clone(), 4).unwrap(),
        |q, v| q.enqueue(&l, v),
    );
    check(
        "TreiberStack",
        || TreiberStack::<Val>::with_domain(d.clone()),
        |s, v| s.push(&l, v),
    );
    check(
        "HerlihyStack",
        || HerlihyStack::<Val>::with_domain(d.clone()),
        |s, v| s.push(&l, v),
    );
    check(
        "HerlihySkewHeap",
        || HerlihySkewHeap::<Val>::with_domain(d.clone()),
        |h, v| h.insert(&l, v),
    );
    check("TwoLockQueue", TwoLockQueue::<TasB, Val>::new, |q, v| {
        q.enqueue(v)
    });
    check(
        "LockedSkewHeap",
        LockedSkewHeap::<TasB, Val>::new,
        |h, v| h.insert(v),
    );
}
