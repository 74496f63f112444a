//! Torture tests of the reclamation schemes with more threads than cores.
//!
//! Nodes carry a magic word. The free function used here *poisons* a node instead
//! of deallocating it (the memory goes to a graveyard freed at the end of the
//! test), so a reader that reaches a node the scheme already "freed" sees the
//! poison deterministically instead of undefined behaviour. Counting poisonings
//! also checks that every retired node is freed exactly once: by the scheme while
//! it runs, by leaving threads' hand-over, or by the domain's drop.

mod common;

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use common::sized;
use common::stepper::Stepper;
use mpsync::reclaim::{
    Ebr, EbrLocal, Guard, HazardPointers, HpLocal, Leak, Local, Qsbr, QsbrLocal, ReclaimStats,
    Reclaimer,
};
use mpsync::sched::stall::{self, Trap};
use mpsync::sync::{Arc, AtomicPtr};

const MAGIC: u64 = 0x5afe_c0de_5afe_c0de;
const POISON: u64 = 0xdead_dead_dead_dead;

/// Where a test's poisoned nodes go; leaked so nodes can point at it.
#[derive(Default)]
struct Sink {
    poisoned: AtomicU64,
    graveyard: Mutex<Vec<usize>>,
}

impl Sink {
    fn new() -> &'static Sink {
        Box::leak(Box::default())
    }

    /// Deallocates every poisoned node (call once no thread can touch them).
    fn bury(&self) {
        for a in self.graveyard.lock().unwrap().drain(..) {
            // SAFETY: every address came from `Box::into_raw` in `Node::new` and is
            // in the graveyard once (poison asserts single free).
            drop(unsafe { Box::from_raw(a as *mut Node) });
        }
    }
}

struct Node {
    magic: AtomicU64,
    sink: &'static Sink,
}

impl Node {
    fn new(sink: &'static Sink) -> *mut Node {
        Box::into_raw(Box::new(Node {
            magic: AtomicU64::new(MAGIC),
            sink,
        }))
    }
}

/// The scheme's free function: poison and keep the memory.
unsafe fn poison(p: *mut u8) {
    // SAFETY: only `Node`s are retired with this function, and their memory is
    // kept until `Sink::bury`.
    let n = unsafe { &*p.cast::<Node>() };
    let was = n.magic.swap(POISON, Ordering::Relaxed);
    assert_eq!(was, MAGIC, "node freed twice");
    n.sink.poisoned.fetch_add(1, Ordering::Relaxed);
    n.sink.graveyard.lock().unwrap().push(p as usize);
}

/// Reads a node's magic; the node must not have been freed.
fn check(p: *mut Node) {
    // SAFETY: the caller protects `p`, so its memory is valid (and never
    // deallocated before `bury` in these tests anyway).
    let m = unsafe { (*p).magic.load(Ordering::Relaxed) };
    assert_eq!(
        m, MAGIC,
        "use after free: the scheme freed a protected node"
    );
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

const SLOTS: usize = 8;

fn new_slots(sink: &'static Sink) -> Arc<Vec<AtomicPtr<Node>>> {
    Arc::new(
        (0..SLOTS)
            .map(|_| AtomicPtr::new(Node::new(sink)))
            .collect(),
    )
}

/// Replaces a random slot's node, retiring the old one (every third time with
/// `retire_with` and a closure). Returns whether it did. With `spread > 1` the
/// two hazard slots are two distinct random ones below `spread` (hazard pointers
/// allocate them on demand), else slots 1 and 0.
fn replace_one<R: Reclaimer>(
    local: &mut R::Local,
    slots: &[AtomicPtr<Node>],
    rng: &mut Rng,
    sink: &'static Sink,
    spread: usize,
) -> bool {
    let g = local.enter();
    let a = (rng.next() % SLOTS as u64) as usize;
    let b = (rng.next() % SLOTS as u64) as usize;
    let (h0, h1) = if spread > 1 {
        let h0 = (rng.next() % spread as u64) as usize;
        let h1 = (h0 + 1 + (rng.next() % (spread as u64 - 1)) as usize) % spread;
        (h0, h1)
    } else {
        (0, 1)
    };
    // A second protected node that someone else may retire meanwhile.
    let other = g.protect_raw(h1, &slots[b]);
    check(other);
    let p = g.protect_raw(h0, &slots[a]);
    check(p);
    let new = Node::new(sink);
    let ok = slots[a]
        .compare_exchange(p, new, Ordering::AcqRel, Ordering::Acquire)
        .is_ok();
    if ok {
        if rng.next().is_multiple_of(3) {
            let addr = p as usize;
            // SAFETY: as below; the closure poisons exactly `p`, once.
            unsafe { g.retire_with(p.cast(), move || poison(addr as *mut u8)) };
        } else {
            // SAFETY: `p` is unlinked by our CAS and retired once; `poison` is
            // sound from any thread.
            unsafe { g.retire_raw(p.cast(), poison) };
        }
        check(p); // still protected by this guard
    } else {
        // SAFETY: `new` was never shared.
        drop(unsafe { Box::from_raw(new) });
    }
    check(other);
    ok
}

/// Frees the nodes still linked (never retired).
fn free_linked(slots: &[AtomicPtr<Node>]) {
    for s in slots {
        // SAFETY: all threads are done; linked nodes are live boxes.
        drop(unsafe { Box::from_raw(s.load(Ordering::Relaxed)) });
    }
}

/// `threads` threads replace nodes at random, re-registering every `rejoin` ops;
/// checks no use after free, the counters, and that everything is freed once.
fn stress<R: Reclaimer>(domain: R, threads: u64, ops: u64, rejoin: u64) {
    // The chaos build perturbs every atomic operation: far fewer operations (and
    // as many re-registrations per run) find its interleavings.
    stress_sized(domain, threads, sized(ops, 6), sized(rejoin, 6));
}

/// [`stress`] at exactly this size, in every build.
fn stress_sized<R: Reclaimer>(domain: R, threads: u64, ops: u64, rejoin: u64) {
    stress_spread(domain, threads, ops, rejoin, 0);
}

/// [`stress_sized`], protecting into hazard slots below `spread` (see
/// [`replace_one`]).
fn stress_spread<R: Reclaimer>(domain: R, threads: u64, ops: u64, rejoin: u64, spread: usize) {
    let sink = Sink::new();
    let domain = Arc::new(domain);
    let slots = new_slots(sink);
    let retired = Arc::new(AtomicU64::new(0));
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let (domain, slots, retired) = (domain.clone(), slots.clone(), retired.clone());
            thread::spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((t + 1) * 0x2545_f491));
                let mut local = R::register(&domain);
                let mut mine = 0;
                for i in 1..=ops {
                    if replace_one::<R>(&mut local, &slots, &mut rng, sink, spread) {
                        mine += 1;
                    }
                    local.quiescent();
                    if i % rejoin == 0 {
                        drop(local); // leave mid-run: pending nodes go to the domain
                        local = R::register(&domain);
                    }
                }
                retired.fetch_add(mine, Ordering::Relaxed);
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let retired = retired.load(Ordering::Relaxed);
    let s = domain.stats();
    assert_eq!(s.retired, retired, "{}: every retire counted", R::NAME);
    assert_eq!(s.freed + s.pending, s.retired, "{}: {s:?}", R::NAME);
    assert_eq!(
        sink.poisoned.load(Ordering::Relaxed),
        s.freed,
        "{}: `freed` counts the frees",
        R::NAME
    );
    if R::NAME != "Leak" {
        assert!(s.freed > 0, "{}: reclaimed nothing: {s:?}", R::NAME);
    }
    drop(domain); // the last handle: frees everything still pending
    assert_eq!(
        sink.poisoned.load(Ordering::Relaxed),
        retired,
        "{}: each retired node freed exactly once",
        R::NAME
    );
    free_linked(&slots);
    sink.bury();
}

const THREADS: u64 = 6; // this machine has 2 cores
const OPS: u64 = 60_000;

#[test]
fn qsbr_stress() {
    stress(Qsbr::new(), THREADS, OPS, 3_000);
}

#[test]
fn ebr_stress() {
    stress_sized(Ebr::new(), THREADS, OPS, 3_000);
}

#[test]
fn ebr_stress_advancing_every_critical_section() {
    stress(Ebr::with_advance_every(1).unwrap(), THREADS, OPS / 2, 1_000);
}

#[test]
fn hp_stress() {
    stress(HazardPointers::new(2).unwrap(), THREADS, OPS, 3_000);
}

#[test]
fn hp_stress_scanning_at_every_retire() {
    stress(
        HazardPointers::with_threshold(2, 1).unwrap(),
        THREADS,
        OPS / 4,
        1_000,
    );
}

/// Hazard slots allocated on demand while others scan: every thread protects
/// into random slots below 40 (one up front), so records grow their chains of
/// slot blocks mid-run, and re-registering threads inherit grown records.
#[test]
fn hp_stress_with_slots_on_demand() {
    stress_spread(
        HazardPointers::with_threshold(1, 1).unwrap(),
        THREADS,
        sized(OPS / 4, 6),
        sized(1_000, 6),
        40,
    );
}

#[test]
fn leak_stress() {
    stress(Leak::new(), THREADS, OPS / 2, 3_000);
}

/// Retired boxes are dropped exactly once, by the scheme or by the domain's drop.
fn boxes_dropped_once<R: Reclaimer>(domain: R) {
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    let drops = Arc::new(AtomicUsize::new(0));
    let domain = Arc::new(domain);
    let hs: Vec<_> = (0..4)
        .map(|_| {
            let (domain, drops) = (domain.clone(), drops.clone());
            thread::spawn(move || {
                let mut local = R::register(&domain);
                for _ in 0..1_000 {
                    let b = Box::into_raw(Box::new(Counted(drops.clone())));
                    // SAFETY: never shared, retired once.
                    unsafe { local.enter().retire_box(b) };
                    local.quiescent();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let s = domain.stats();
    assert_eq!(s.retired, 4_000);
    assert_eq!(drops.load(Ordering::Relaxed) as u64, s.freed);
    drop(domain);
    assert_eq!(drops.load(Ordering::Relaxed), 4_000, "{}", R::NAME);
}

#[test]
fn retired_boxes_are_dropped_exactly_once() {
    boxes_dropped_once(Qsbr::new());
    boxes_dropped_once(Ebr::new());
    boxes_dropped_once(HazardPointers::default());
    boxes_dropped_once(Leak::new());
}

const WORKERS: u64 = 3;
const RETIRES_PER_WORKER: u64 = 3_000;

/// One thread stops for good in the middle of an operation (`stall` sets it up
/// and holds its guard) while `WORKERS` threads retire nodes. Returns the largest
/// `pending` seen, the stats when the workers finished, and the stats after the
/// stalled thread resumed, left, and a fresh thread reclaimed a few times.
fn stalled<R: Reclaimer>(domain: R) -> (u64, ReclaimStats, ReclaimStats) {
    let sink = Sink::new();
    let domain = Arc::new(domain);
    let slots = new_slots(sink);
    // Register everyone first, so the domain's size (and HP's R) is final.
    let mut locals: Vec<_> = (0..=WORKERS).map(|_| R::register(&domain)).collect();
    let stall_local = locals.remove(0);
    let (stalled_tx, stalled_rx) = mpsc::channel();
    let (resume_tx, resume_rx) = mpsc::channel::<()>();
    let staller = {
        let slots = slots.clone();
        thread::spawn(move || {
            let mut local = stall_local;
            let g = local.enter();
            let a = g.protect_raw(0, &slots[0]);
            let b = g.protect_raw(1, &slots[1]);
            stalled_tx.send(()).unwrap();
            resume_rx.recv().unwrap(); // "preempted forever" until the test says
            check(a);
            check(b);
            drop(g);
            local.quiescent();
        })
    };
    stalled_rx.recv().unwrap();
    let max_pending = Arc::new(AtomicU64::new(0));
    let hs: Vec<_> = locals
        .into_iter()
        .enumerate()
        .map(|(t, mut local)| {
            let (domain, slots, max_pending) = (domain.clone(), slots.clone(), max_pending.clone());
            thread::spawn(move || {
                let mut rng = Rng(0xabcd_ef01 ^ ((t as u64 + 1) * 0x1234_5678_9abc));
                let mut n = 0;
                while n < RETIRES_PER_WORKER {
                    if replace_one::<R>(&mut local, &slots, &mut rng, sink, 0) {
                        n += 1;
                        let p = domain.stats().pending;
                        max_pending.fetch_max(p, Ordering::Relaxed);
                    }
                    local.quiescent();
                }
                local // keep it registered until the staller resumes
            })
        })
        .collect();
    let locals: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let during = domain.stats();
    resume_tx.send(()).unwrap();
    staller.join().unwrap();
    drop(locals);
    let mut fresh = R::register(&domain);
    for _ in 0..4 {
        // Each scheme's way to reclaim now: a critical section (EBR, every 100),
        // a quiescent state (QSBR), a scan when leaving (HP).
        for _ in 0..100 {
            drop(fresh.enter());
            fresh.quiescent();
        }
    }
    drop(fresh);
    let after = domain.stats();
    drop(domain);
    assert_eq!(sink.poisoned.load(Ordering::Relaxed), after.retired);
    free_linked(&slots);
    sink.bury();
    (max_pending.load(Ordering::Relaxed), during, after)
}

#[test]
fn hp_bound_holds_while_a_thread_stalls_holding_hazards() {
    let hp = HazardPointers::new(2).unwrap();
    // Michael (TPDS 2004, §3.2): with N threads and R = H + Ω(H), at most N·R
    // retired nodes are unfreed at any time. Here N = 1 + WORKERS, H = K·N.
    let n = 1 + WORKERS;
    let h = 2 * n;
    let r = 2 * h + 100;
    let bound = n * r;
    let (max_pending, during, after) = stalled(hp);
    assert_eq!(during.retired, WORKERS * RETIRES_PER_WORKER);
    assert!(
        during.retired > 4 * bound,
        "the test must retire far more than the bound"
    );
    assert!(
        max_pending <= bound,
        "HP exceeded Michael's bound: {max_pending} > N·R = {bound}"
    );
    assert!(during.freed > 0);
    assert_eq!(after.freed, after.retired, "all freed once the thread left");
}

#[test]
fn hp_threshold_matches_michael() {
    let hp = Arc::new(HazardPointers::new(2).unwrap());
    let locals: Vec<_> = (0..4).map(|_| HazardPointers::register(&hp)).collect();
    assert_eq!(hp.scan_threshold(), 2 * (2 * 4) + 100);
    drop(locals);
}

fn assert_grows(name: &str, during: ReclaimStats, after: ReclaimStats) {
    // Deterministic: the stalled thread is pinned at epoch e, so the global epoch
    // stays <= e + 1 and every node retired meanwhile (tag >= e) needs e + 3.
    assert_eq!(during.retired, WORKERS * RETIRES_PER_WORKER);
    assert_eq!(during.freed, 0, "{name}: nothing can be freed: {during:?}");
    assert_eq!(
        during.pending, during.retired,
        "{name}: grows with every retire"
    );
    let hp_bound = (1 + WORKERS) * (2 * 2 * (1 + WORKERS) + 100);
    assert!(
        during.pending > 4 * hp_bound,
        "{name}: far beyond what HP would keep"
    );
    assert_eq!(
        after.freed, after.retired,
        "{name}: all freed once it resumed"
    );
}

#[test]
fn qsbr_grows_without_bound_while_a_thread_never_announces() {
    let (_, during, after) = stalled(Qsbr::new());
    assert_grows("QSBR", during, after);
}

#[test]
fn ebr_grows_without_bound_while_a_thread_stalls_in_a_critical_section() {
    let (_, during, after) = stalled(Ebr::new());
    assert_grows("EBR", during, after);
}

/// Unlinks the node in `slot` (putting a fresh one there) and retires it.
fn unlink_and_retire<G: Guard>(g: &mut G, slot: &AtomicPtr<Node>, sink: &'static Sink) {
    let x = g.protect_raw(0, slot);
    let new = Node::new(sink);
    slot.compare_exchange(x, new, Ordering::AcqRel, Ordering::Acquire)
        .expect("only this thread writes the slot");
    // SAFETY: unlinked by our CAS, retired once; `poison` is sound from any thread.
    unsafe { g.retire_raw(x.cast(), poison) };
}

const STOPPED_IN_TIME: Duration = Duration::from_secs(10);

/// The interleaving, deterministically: T1 reads the global epoch G = 0 and
/// is preempted before publishing its pin; the epoch advances 0 → 1 → 2 meanwhile
/// (T1 is invisible to advancers); T4 pins at 2 and reads node X; T1 goes on, pins,
/// unlinks X and retires it, unpins; G advances 2 → 3 (T4 at 2 does not block
/// that); T1's next critical section frees what it thinks expired. With a stale
/// pin (at 0, bag tagged 0) X is freed under T4.
#[test]
fn ebr_pin_that_read_a_stale_epoch_frees_nothing_early() {
    let sink = Sink::new();
    // Advances only where this test asks for them (every 100 critical sections).
    let d = Arc::new(Ebr::new());
    let slot = Arc::new(AtomicPtr::new(Node::new(sink)));
    let mut t1 = Stepper::spawn({
        let d = d.clone();
        move || Ebr::register(&d)
    });
    let trap = Trap::at(stall::EPOCH_PIN).thread(t1.id()).arm();
    t1.start({
        let slot = slot.clone();
        move |l: &mut EbrLocal| unlink_and_retire(&mut l.enter(), &slot, sink)
    });
    trap.wait_hit(STOPPED_IN_TIME).unwrap();
    let mut other = Ebr::register(&d);
    other.try_reclaim();
    other.try_reclaim();
    assert_eq!(
        d.epoch(),
        2,
        "T1, stopped before its pin, blocks no advance"
    );
    let t4 = Ebr::register(&d);
    let g4 = t4.enter();
    let x = g4.protect_raw(0, &slot);
    check(x);
    trap.release();
    t1.wait();
    other.try_reclaim();
    assert_eq!(d.epoch(), 3, "T4, pinned at 2, does not block 2 -> 3");
    t1.run(|l| drop(l.enter()));
    check(x);
    drop(g4);
    drop((t1, t4, other));
    drop(d);
    free_linked(std::slice::from_ref(&*slot));
    sink.bury();
}

/// QSBR's `register` has the same window: the new thread reads G = 0, stops before
/// pinning, G advances twice, and the node it retires is tagged with the stale
/// epoch — in its own bag (`leave == false`: freed at its next quiescent state) or
/// in the batch it hands to the domain when it leaves (`leave == true`: freed by
/// another thread's quiescent state).
fn qsbr_register_stale_window(leave: bool) {
    let sink = Sink::new();
    let d = Arc::new(Qsbr::new());
    let slot = Arc::new(AtomicPtr::new(Node::new(sink)));
    let mut other = Qsbr::register(&d);
    // A node of its own pending, so that its quiescent states try to advance.
    // SAFETY: a fresh box nobody else can reach.
    unsafe { other.enter().retire_box(Box::into_raw(Box::new(0u64))) };
    let mut t1 = Stepper::spawn(|| None::<QsbrLocal>);
    let trap = Trap::at(stall::EPOCH_PIN).thread(t1.id()).arm();
    t1.start({
        let (d, slot) = (d.clone(), slot.clone());
        move |l: &mut Option<QsbrLocal>| {
            let mut local = Qsbr::register(&d);
            unlink_and_retire(&mut local.enter(), &slot, sink);
            if !leave {
                local.quiescent();
                *l = Some(local);
            } // else: leaves, handing X over to the domain
        }
    });
    trap.wait_hit(STOPPED_IN_TIME).unwrap();
    other.quiescent();
    other.quiescent();
    assert_eq!(
        d.epoch(),
        2,
        "T1, stopped before its pin, blocks no advance"
    );
    let mut t4 = Qsbr::register(&d);
    let x = t4.enter().protect_raw(0, &slot);
    check(x);
    trap.release();
    t1.wait();
    other.quiescent();
    assert_eq!(d.epoch(), 3, "T4, online at 2, does not block 2 -> 3");
    if !leave {
        t1.run(|l| l.as_mut().unwrap().quiescent());
    }
    check(x);
    t4.quiescent();
    drop((t1, t4, other));
    drop(d);
    free_linked(std::slice::from_ref(&*slot));
    sink.bury();
}

#[test]
fn qsbr_register_that_read_a_stale_epoch_frees_nothing_early() {
    qsbr_register_stale_window(false);
}

#[test]
fn qsbr_batch_handed_over_after_a_stale_register_is_not_freed_early() {
    qsbr_register_stale_window(true);
}

/// A protector stops with its candidate loaded and the hazard not yet published
/// (`HP_PROTECT_LOADED`); meanwhile the node is unlinked and retired, and a scan
/// (at every retire) frees it. `protect` must re-read the source after publishing
/// the hazard and return the node now linked, never the freed one.
#[test]
fn hp_protect_revalidates_after_publishing_the_hazard() {
    let sink = Sink::new();
    let d = Arc::new(HazardPointers::with_threshold(1, 1).unwrap());
    let slot = Arc::new(AtomicPtr::new(Node::new(sink)));
    let mut t1 = Stepper::spawn({
        let d = d.clone();
        move || HazardPointers::register(&d)
    });
    let trap = Trap::at(stall::HP_PROTECT_LOADED).thread(t1.id()).arm();
    let (tx, rx) = mpsc::channel();
    t1.start({
        let slot = slot.clone();
        move |l: &mut HpLocal| {
            let g = l.enter();
            let p = g.protect_raw(0, &slot);
            // SAFETY: protected (or, if `protect` is broken, poisoned but never
            // deallocated before `bury`).
            tx.send(unsafe { (*p).magic.load(Ordering::Relaxed) })
                .unwrap();
        }
    });
    trap.wait_hit(STOPPED_IN_TIME).unwrap();
    let w = HazardPointers::register(&d);
    // Twice: the first retire's scan still sees `w`'s own hazard on the node.
    unlink_and_retire(&mut w.enter(), &slot, sink);
    unlink_and_retire(&mut w.enter(), &slot, sink);
    assert!(d.stats().freed >= 1, "the first node was freed meanwhile");
    trap.release();
    t1.wait();
    assert_eq!(
        rx.recv().unwrap(),
        MAGIC,
        "use after free: the scheme freed a protected node"
    );
    drop((t1, w));
    drop(d);
    free_linked(std::slice::from_ref(&*slot));
    sink.bury();
}
