//! Torture for the hash tables (`LfHashMap` over every scheme, `FastReadHashMap`
//! over QSBR and EBR, `LockedHashMap`):
//!
//! - **conservation** under real oversubscription (8 threads on the machine's
//!   cores) and under the emulated pseudo-scheduler at MP 3: every value inserted
//!   is removed at most once, a value read or removed was inserted under that key,
//!   and at the end the table holds exactly the values inserted and not removed;
//! - **linearizability** of thousands of short recorded histories of
//!   insert/remove/get, checked per key (linearizability is local: a map history
//!   is linearizable iff each key's sub-history is);
//! - deterministic **stall-point** tests of the window hazard pointers depend on
//!   (LF and CR tables): a search stopped on a node that is then deleted, with its
//!   successor deleted and freed, must not step onto the freed successor; and a
//!   node marked but not yet unlinked is absent to every search.
//!
//! Longer runs: `MPSYNC_TORTURE_SCALE=10 cargo test --release --test map`.
#![cfg(not(loom))]

mod common;

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex, RwLock};
use std::time::{Duration, Instant};

use common::sized;
use mpsync::ds::alloc::NodeAlloc;
use mpsync::ds::cr_hash::{CrHashMap, CrHashMapHandle, ResizePolicy};
use mpsync::ds::hash::{FastReadHashMap, LfHashMap};
use mpsync::ds::locked_hash::LockedHashMap;
use mpsync::ds::map::{ConcurrentMap, MapHandle};
use mpsync::lock::TasB;
use mpsync::reclaim::{Ebr, HazardPointers, Leak, Qsbr, Reclaimer};
use mpsync::sched::emulated::{Emulated, EmulatedConfig};
use mpsync::sched::stall::{self, Trap};
use mpsync::sync::Arc;
use mpsync::util::rng::SplitMix64 as Rng;

/// Serializes the tests that start a pseudo-scheduler (one signal handler per process).
static EMU: Mutex<()> = Mutex::new(());

fn scale() -> u64 {
    std::env::var("MPSYNC_TORTURE_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The key a value was inserted under: values carry it in their low byte.
fn key_of(v: u64) -> u64 {
    v & 0xff
}

/// Per-thread record of a torture run.
#[derive(Default)]
struct Log {
    inserted: Vec<u64>,
    removed: Vec<u64>,
}

/// `threads` threads run random insert/remove/get on keys `0..keys` until
/// `stop(i)` (i = the thread's operation count); then conservation is checked.
/// `wrap(t, body)` runs a thread's body (to attach it to a pseudo-scheduler).
fn conservation<M: ConcurrentMap<u64, u64>>(
    m: &M,
    threads: usize,
    keys: u64,
    stop: impl Fn(u64) -> bool + Sync,
    wrap: impl Fn(usize, &mut dyn FnMut()) + Sync,
) -> u64 {
    let logs: Mutex<Vec<Log>> = Mutex::new(Vec::new());
    let ops = AtomicU64::new(0);
    let start = Barrier::new(threads);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (logs, ops, start, stop, wrap) = (&logs, &ops, &start, &stop, &wrap);
            s.spawn(move || {
                wrap(t, &mut || {
                    let mut h = m.handle();
                    let mut rng = Rng::new(0x5eed + t as u64);
                    let mut log = Log::default();
                    start.wait();
                    let mut i = 0u64;
                    while !stop(i) {
                        let k = rng.next_u64() % keys;
                        match rng.next_u64() % 4 {
                            0 | 1 => {
                                let v = (i << 16) | ((t as u64) << 8) | k;
                                if h.insert(k, v) {
                                    log.inserted.push(v);
                                }
                            }
                            2 => {
                                if let Some(v) = h.remove(&k) {
                                    assert_eq!(key_of(v), k, "removed a value of another key");
                                    log.removed.push(v);
                                }
                            }
                            _ => {
                                if let Some(v) = h.get(&k) {
                                    assert_eq!(key_of(v), k, "read a value of another key");
                                }
                            }
                        }
                        i += 1;
                    }
                    ops.fetch_add(i, Ordering::Relaxed);
                    logs.lock().unwrap().push(log);
                })
            });
        }
    });
    let logs = logs.into_inner().unwrap();
    let inserted: HashSet<u64> = logs
        .iter()
        .flat_map(|l| l.inserted.iter().copied())
        .collect();
    let mut removed = HashSet::new();
    for v in logs.iter().flat_map(|l| l.removed.iter().copied()) {
        assert!(removed.insert(v), "value {v:#x} removed twice");
        assert!(
            inserted.contains(&v),
            "value {v:#x} removed but never inserted"
        );
    }
    let mut h = m.handle();
    let mut left = HashSet::new();
    for k in 0..keys {
        if let Some(v) = h.get(&k) {
            assert_eq!(key_of(v), k);
            left.insert(v);
        }
    }
    let expected: HashSet<u64> = inserted.difference(&removed).copied().collect();
    assert_eq!(
        left, expected,
        "the table does not hold exactly the values inserted and not removed"
    );
    ops.load(Ordering::Relaxed)
}

fn oversubscribed<M: ConcurrentMap<u64, u64>>(m: M) {
    let per = sized(20_000, 25) * scale();
    let n = conservation(&m, 8, 24, |i| i >= per, |_, f| f());
    assert_eq!(n, 8 * per);
}

fn emulated_mp3<M: ConcurrentMap<u64, u64>>(m: M) {
    let _serial = EMU.lock().unwrap_or_else(|e| e.into_inner());
    let procs = cores().min(4) as u32;
    let cfg = EmulatedConfig::new(procs, 3.0)
        .expect("valid config")
        .quantum(Duration::from_millis(2))
        .extension_bound(Duration::from_micros(500))
        .seed(14);
    let emu = Emulated::start(cfg).expect("pseudo-scheduler starts");
    let end = Instant::now() + Duration::from_millis(150 * scale());
    let n = conservation(
        &m,
        procs as usize,
        24,
        |i| i % 64 == 0 && Instant::now() >= end,
        |t, f| {
            let _att = emu.attach(t as u32).expect("attach");
            f();
        },
    );
    assert!(n > 0);
    let stats = emu.stop();
    assert!(
        stats.preemptions + stats.warnings > 5,
        "the scheduler barely intervened: {stats:?}"
    );
}

// ---- linearizability, per key ------------------------------------------------

/// One operation on one key, with what it returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum MapOp {
    Insert(u64, bool),
    Remove(Option<u64>),
    Get(Option<u64>),
    /// Insert-replace of this value, returning the one replaced.
    Replace(u64, Option<u64>),
    /// An update (`+ UPDATE_STEP`) returning the new value, `None` if absent.
    Update(Option<u64>),
    /// `update_or_insert` of this value (`+ UPDATE_STEP` if present).
    Upsert(u64),
}

/// What the front-door tests' updates add to a value (above every value a
/// test inserts, so no update makes a value another operation inserted).
const UPDATE_STEP: u64 = 1 << 40;

#[derive(Debug, Clone, Copy)]
struct Ev {
    key: u64,
    invoke: u64,
    response: u64,
    op: MapOp,
}

/// The sequential specification of one key: its value or absence.
fn apply(state: Option<u64>, op: MapOp) -> Option<Option<u64>> {
    match op {
        MapOp::Insert(v, ok) => match (state, ok) {
            (None, true) => Some(Some(v)),
            (Some(_), false) => Some(state),
            _ => None,
        },
        MapOp::Remove(r) => (r == state).then_some(None),
        MapOp::Get(r) => (r == state).then_some(state),
        MapOp::Replace(v, r) => (r == state).then_some(Some(v)),
        MapOp::Update(r) => {
            let new = state.map(|s| s + UPDATE_STEP);
            (r == new).then_some(new)
        }
        MapOp::Upsert(v) => Some(Some(state.map_or(v, |s| s + UPDATE_STEP))),
    }
}

fn search(h: &[Ev], done: u64, state: Option<u64>, seen: &mut HashSet<(u64, Option<u64>)>) -> bool {
    if done.count_ones() as usize == h.len() {
        return true;
    }
    if !seen.insert((done, state)) {
        return false;
    }
    let pending = || (0..h.len()).filter(|&i| done & (1 << i) == 0);
    let first_response = pending().map(|i| h[i].response).min().expect("pending");
    pending().any(|i| {
        h[i].invoke <= first_response
            && apply(state, h[i].op).is_some_and(|s| search(h, done | (1 << i), s, seen))
    })
}

/// `Ok` if every key's sub-history is linearizable from "absent".
fn check_map(history: &[Ev]) -> Result<(), String> {
    let mut by_key: HashMap<u64, Vec<Ev>> = HashMap::new();
    for e in history {
        by_key.entry(e.key).or_default().push(*e);
    }
    for (k, h) in by_key {
        assert!(h.len() <= 64);
        if !search(&h, 0, None, &mut HashSet::new()) {
            let mut h = h;
            h.sort_by_key(|e| e.invoke);
            return Err(format!("key {k}: not linearizable: {h:#?}"));
        }
    }
    Ok(())
}

static CLOCK: AtomicU64 = AtomicU64::new(0);

fn tick() -> u64 {
    // SeqCst: stamps totally ordered with the operations they bracket.
    CLOCK.fetch_add(1, Ordering::SeqCst)
}

fn record<H: MapHandle<u64, u64>>(h: &mut H, key: u64, what: u64, v: u64, out: &mut Vec<Ev>) {
    timed(key, out, || match what {
        0 => MapOp::Insert(v, h.insert(key, v)),
        1 => MapOp::Remove(h.remove(&key)),
        _ => MapOp::Get(h.get(&key)),
    });
}

/// Runs `op` on `key` between two clock ticks and records it.
fn timed(key: u64, out: &mut Vec<Ev>, op: impl FnOnce() -> MapOp) {
    let invoke = tick();
    let op = op();
    let response = tick();
    out.push(Ev {
        key,
        invoke,
        response,
        op,
    });
}

/// `rounds` histories: 3 threads released together on a fresh table, each doing
/// 4 random operations on keys 0..3; every history is checked.
fn linearizable<M: ConcurrentMap<u64, u64>>(make: impl Fn() -> M) {
    histories(make, |m, rng, round, t, out| {
        let mut h = m.handle();
        for i in 0..4 {
            let v = (round << 16) | ((t as u64) << 8) | i;
            record(&mut h, rng.next_u64() % 3, rng.next_u64() % 3, v, out);
        }
    });
}

/// As [`linearizable`], for the front-door map and its read-modify-write
/// operations: insert-replace, try_insert, update, update_or_insert, remove,
/// get, on keys 0..3 (updates add `UPDATE_STEP`, so no two values collide).
fn linearizable_front(make: impl Fn() -> mpsync::HashMap<u64, u64>) {
    histories(make, |m, rng, round, t, out| {
        for i in 0..4 {
            let v = (round << 16) | ((t as u64) << 8) | i;
            let key = rng.next_u64() % 3;
            let what = rng.next_u64() % 6;
            timed(key, out, || match what {
                0 => MapOp::Replace(v, m.insert(key, v)),
                1 => MapOp::Insert(v, m.try_insert(key, v)),
                2 => MapOp::Update(m.update(&key, |x| x + UPDATE_STEP)),
                3 => {
                    m.update_or_insert(key, v, |x| x + UPDATE_STEP);
                    MapOp::Upsert(v)
                }
                4 => MapOp::Remove(m.remove(&key)),
                _ => MapOp::Get(m.get(&key)),
            });
        }
    });
}

/// `rounds` histories: 3 threads released together on a fresh table made by
/// `make`, each running `run` (the table, its rng, the round, its index, where
/// to record) once per round; every history is checked.
fn histories<M: Send + Sync>(
    make: impl Fn() -> M,
    run: impl Fn(&M, &mut Rng, u64, usize, &mut Vec<Ev>) + Sync,
) {
    let rounds = (sized(5_000, 10) * scale()) as usize;
    let threads = 3;
    let slot: RwLock<Option<std::sync::Arc<M>>> = RwLock::new(None);
    let start = Barrier::new(threads + 1);
    let end = Barrier::new(threads + 1);
    let events: Mutex<Vec<Ev>> = Mutex::new(Vec::new());
    let quit = AtomicBool::new(false);
    let r: Result<(), String> = std::thread::scope(|s| {
        for t in 0..threads {
            let (slot, start, end, events, quit, run) = (&slot, &start, &end, &events, &quit, &run);
            s.spawn(move || {
                let mut rng = Rng::new(77 + t as u64);
                for round in 0u64.. {
                    start.wait();
                    // Relaxed: the barrier orders it.
                    if quit.load(Ordering::Relaxed) {
                        return;
                    }
                    let m = slot.read().unwrap().clone().expect("set");
                    let mut out = Vec::with_capacity(4);
                    run(&m, &mut rng, round, t, &mut out);
                    drop(m);
                    events.lock().unwrap().extend(out);
                    end.wait();
                }
            });
        }
        let mut result = Ok(());
        for _ in 0..rounds {
            *slot.write().unwrap() = Some(std::sync::Arc::new(make()));
            start.wait();
            end.wait();
            slot.write().unwrap().take();
            let h = std::mem::take(&mut *events.lock().unwrap());
            if let Err(e) = check_map(&h) {
                result = Err(e);
                break;
            }
        }
        // Relaxed: the barrier orders it.
        quit.store(true, Ordering::Relaxed);
        start.wait();
        result
    });
    r.unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn the_map_checker_catches_a_lost_insert() {
    let ev = |invoke, response, op| Ev {
        key: 1,
        invoke,
        response,
        op,
    };
    // Insert succeeded, then a later get saw nothing: not linearizable.
    let bad = [ev(0, 1, MapOp::Insert(5, true)), ev(2, 3, MapOp::Get(None))];
    assert!(check_map(&bad).is_err());
    // Overlapping: either order.
    let ok = [ev(0, 3, MapOp::Insert(5, true)), ev(1, 2, MapOp::Get(None))];
    assert!(check_map(&ok).is_ok());
    // Two successful inserts with no remove between: impossible.
    let dup = [
        ev(0, 1, MapOp::Insert(5, true)),
        ev(2, 3, MapOp::Insert(6, true)),
    ];
    assert!(check_map(&dup).is_err());
    // Two replaces that both say they replaced the first value: one lost.
    let lost = [
        ev(0, 1, MapOp::Replace(5, None)),
        ev(2, 5, MapOp::Replace(6, Some(5))),
        ev(3, 4, MapOp::Replace(7, Some(5))),
    ];
    assert!(check_map(&lost).is_err());
    let fine = [
        ev(0, 1, MapOp::Replace(5, None)),
        ev(2, 5, MapOp::Replace(6, Some(7))),
        ev(3, 4, MapOp::Replace(7, Some(5))),
        ev(6, 7, MapOp::Update(Some(6 + UPDATE_STEP))),
    ];
    assert!(check_map(&fine).is_ok());
}

fn hp() -> Arc<HazardPointers> {
    // Scan often, so a node freed too early is freed during the run.
    Arc::new(HazardPointers::with_threshold(2, 4).unwrap())
}

/// As [`hp`], with the third slot the CR table protects its bucket array in.
fn hp3() -> Arc<HazardPointers> {
    Arc::new(HazardPointers::with_threshold(3, 4).unwrap())
}

fn cr<R: Reclaimer>(d: Arc<R>, buckets: usize) -> CrHashMap<u64, u64, TasB, R> {
    CrHashMap::with_domain(buckets, d, RandomState::new()).unwrap()
}

/// A CR table whose threads, besides their operations, resize it to a random
/// bucket count (1..=8) every 16 operations, and which also resizes itself
/// (grows past 1 entry per bucket): resizes race readers, writers and each
/// other all through the conservation and linearizability tests.
struct Resizing<R: Reclaimer>(CrHashMap<u64, u64, TasB, R>);

fn resizing<R: Reclaimer>(d: Arc<R>) -> Resizing<R> {
    let policy = ResizePolicy::new(1, 1).unwrap();
    Resizing(CrHashMap::with_policy(policy, d, RandomState::new()))
}

struct ResizingHandle<'a, R: Reclaimer> {
    m: &'a CrHashMap<u64, u64, TasB, R>,
    h: CrHashMapHandle<'a, u64, u64, TasB, R>,
    ops: u64,
    rng: Rng,
}

impl<R: Reclaimer> ConcurrentMap<u64, u64> for Resizing<R> {
    type Handle<'a> = ResizingHandle<'a, R>;
    fn handle(&self) -> ResizingHandle<'_, R> {
        static SEED: AtomicU64 = AtomicU64::new(1);
        ResizingHandle {
            m: &self.0,
            h: self.0.handle(),
            ops: 0,
            rng: Rng::new(SEED.fetch_add(1, Ordering::Relaxed)),
        }
    }
}

impl<R: Reclaimer> ResizingHandle<'_, R> {
    fn step(&mut self) {
        self.ops += 1;
        if self.ops.is_multiple_of(16) {
            let n = 1 + (self.rng.next_u64() % 8) as usize;
            self.m.resize(self.h.local(), n).unwrap();
        }
    }
}

impl<R: Reclaimer> MapHandle<u64, u64> for ResizingHandle<'_, R> {
    fn insert(&mut self, key: u64, value: u64) -> bool {
        self.step();
        self.h.insert(key, value)
    }
    fn get(&mut self, key: &u64) -> Option<u64> {
        self.step();
        self.h.get(key)
    }
    fn remove(&mut self, key: &u64) -> Option<u64> {
        self.step();
        self.h.remove(key)
    }
    fn contains_key(&mut self, key: &u64) -> bool {
        self.step();
        self.h.contains_key(key)
    }
    fn quiescent(&mut self) {
        self.h.quiescent()
    }
}

fn lf<R: Reclaimer>(d: Arc<R>, buckets: usize) -> LfHashMap<u64, u64, R> {
    LfHashMap::with_domain(buckets, d, RandomState::new()).unwrap()
}

fn fast<R: mpsync::reclaim::ProtectsReachable>(
    d: Arc<R>,
    b: usize,
) -> FastReadHashMap<u64, u64, R> {
    FastReadHashMap::with_domain(b, d, RandomState::new()).unwrap()
}

macro_rules! map_tests {
    ($($name:ident: $make:expr;)*) => {$(
        mod $name {
            use super::*;
            #[test]
            fn oversubscribed_8_threads() { oversubscribed($make) }
            #[test]
            fn emulated_mp_3() { emulated_mp3($make) }
            #[test]
            fn linearizable() { super::linearizable(|| $make) }
        }
    )*};
}

map_tests! {
    lf_ebr: lf(Arc::new(Ebr::with_advance_every(1).unwrap()), 1);
    lf_qsbr: lf(Arc::new(Qsbr::new()), 1);
    lf_hp: lf(hp(), 1);
    lf_hp_buckets: lf(hp(), 4);
    lf_leak: lf(Arc::new(Leak::new()), 1);
    fast_ebr: fast(Arc::new(Ebr::with_advance_every(1).unwrap()), 1);
    fast_qsbr: fast(Arc::new(Qsbr::new()), 1);
    locked_tasb: LockedHashMap::<u64, u64, TasB>::with_buckets(2).unwrap();
    cr_hp: cr(hp3(), 1);
    cr_ebr: cr(Arc::new(Ebr::with_advance_every(1).unwrap()), 2);
    cr_qsbr: cr(Arc::new(Qsbr::new()), 1);
    cr_resize_hp: resizing(hp3());
    cr_resize_ebr: resizing(Arc::new(Ebr::with_advance_every(1).unwrap()));
    cr_resize_qsbr: resizing(Arc::new(Qsbr::new()));
    front: mpsync::HashMap::<u64, u64>::new();
}

// ---- the front door's read-modify-write updates ------------------------------

#[test]
fn front_insert_replace_update_are_linearizable() {
    linearizable_front(mpsync::HashMap::new);
}

/// Threads add to a few counters with `update_or_insert` and `update`, and
/// swap tokens through `insert`-replace, on a map small enough to resize
/// meanwhile: no increment is lost (the counters sum to the increments), and
/// every token is handed back by exactly one replace or is still in the map.
#[test]
fn front_updates_and_replaces_conserve() {
    let threads = 2 * cores().max(2);
    let n = sized(20_000, 200) * scale();
    let counters: mpsync::HashMap<u64, u64> = mpsync::HashMap::new();
    let tokens: mpsync::HashMap<u64, u64> = mpsync::HashMap::new();
    for k in 0..8 {
        tokens.insert(1000 + k, u64::MAX - k); // pre-seeded tokens
    }
    let returned: Vec<Vec<u64>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads as u64)
            .map(|t| {
                let (counters, tokens) = (&counters, &tokens);
                s.spawn(move || {
                    let mut rng = Rng::new(t + 1);
                    let mut back = Vec::new();
                    for i in 0..n {
                        let k = rng.next_u64() % 4;
                        if i % 2 == 0 {
                            counters.update_or_insert(k, 1, |c| c + 1);
                        } else if counters.update(&k, |c| c + 1).is_none() {
                            counters.update_or_insert(k, 1, |c| c + 1);
                        }
                        let token = (t << 32) | i;
                        // Churn other keys too, so the map resizes under the updates.
                        let churn = 100 + rng.next_u64() % 64;
                        counters.insert(churn, 0);
                        counters.remove(&churn);
                        back.extend(tokens.insert(1000 + rng.next_u64() % 8, token));
                    }
                    back
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let total: u64 = (0..4).filter_map(|k| counters.get(&k)).sum();
    assert_eq!(total, threads as u64 * n, "an increment was lost");
    let mut seen: Vec<u64> = returned.into_iter().flatten().collect();
    seen.extend(tokens.iter().map(|(_, v)| v));
    let expected = threads as u64 * n + 8;
    assert_eq!(seen.len() as u64, expected, "a token lost or duplicated");
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len() as u64, expected, "a token handed back twice");
}

// ---- the hazard-pointer window ------------------------------------------------

/// A key that knows when it was dropped: comparing a dropped key fails the test
/// (a search read a node after it was freed).
#[derive(Debug)]
struct Key {
    k: u64,
    alive: AtomicBool,
}

impl Key {
    fn new(k: u64) -> Self {
        Key {
            k,
            alive: AtomicBool::new(true),
        }
    }
    fn check(&self) {
        assert!(
            self.alive.load(Ordering::SeqCst),
            "a search compared the key of a freed node ({})",
            self.k
        );
    }
}
impl Clone for Key {
    fn clone(&self) -> Self {
        self.check();
        Key::new(self.k)
    }
}
impl Drop for Key {
    fn drop(&mut self) {
        self.alive.store(false, Ordering::SeqCst);
    }
}
impl PartialEq for Key {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o).is_eq()
    }
}
impl Eq for Key {}
impl PartialOrd for Key {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Key {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.check();
        o.check();
        self.k.cmp(&o.k)
    }
}
impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.k.hash(h)
    }
}

/// Nodes whose memory is never given back but zeroed when "freed": a freed node
/// reads as an unmarked node with no successor and a dropped key, so a search
/// that steps onto it compares that key and `Key::check` fails (instead of
/// undefined behaviour).
struct Poisoning;
impl NodeAlloc for Poisoning {
    const NAME: &'static str = "poisoning";
    fn alloc<T>(value: T) -> NonNull<T> {
        NonNull::from(Box::leak(Box::new(value)))
    }
    unsafe fn free<T>(p: *mut u8) {
        // SAFETY: `p` is a node of `size_of::<T>()` bytes whose contents were
        // dropped; its memory stays allocated (leaked) for the rest of the process.
        unsafe { std::ptr::write_bytes(p, 0, std::mem::size_of::<T>()) };
    }
}

/// Thread A searches for key 4 in the list 1, 2, 3, 4 and stops right after
/// stepping onto node 2 (protected as its predecessor). B removes 2 (retired, but
/// A protects it) and then 3 (retired and freed at once: nobody protects it).
/// A's next step reads node 2's frozen link to 3: it must restart from the head,
/// not step onto the freed node 3 ("a read past a marked node under HP").
#[test]
fn hp_search_never_steps_past_a_deleted_predecessor() {
    let hp = Arc::new(HazardPointers::with_threshold(2, 1).unwrap());
    let m: LfHashMap<Key, u64, HazardPointers, Poisoning> =
        LfHashMap::with_domain(1, hp.clone(), RandomState::new()).unwrap();
    {
        let l = HazardPointers::register(&hp);
        for k in 1..=4 {
            assert!(m.insert(&l, Key::new(k), k));
        }
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let (m, hp) = (&m, &hp);
        let a = s.spawn(move || {
            let l = HazardPointers::register(hp);
            tx.send(mpsync::sched::current().id()).unwrap();
            go_rx.recv().unwrap();
            m.get(&l, &Key::new(4))
        });
        let id = rx.recv().unwrap();
        // Skip the step onto node 1; stop on node 2.
        let trap = Trap::at(stall::HM_FIND_STEPPED).thread(id).skip(1).arm();
        go_tx.send(()).unwrap();
        trap.wait_hit(Duration::from_secs(10))
            .expect("A stops on node 2");
        let mut l = HazardPointers::register(hp);
        assert_eq!(m.remove(&l, &Key::new(2)), Some(2));
        assert_eq!(m.remove(&l, &Key::new(3)), Some(3));
        // B's own guard protected node 3 while it retired it; scan again now.
        l.scan();
        assert!(hp.stats().freed >= 1, "node 3 was freed: {:?}", hp.stats());
        trap.release();
        assert_eq!(a.join().expect("A read no freed node"), Some(4));
    });
}

/// A remover stopped between marking a node and unlinking it: the node is
/// removed (the remove's linearization point has passed), so every later read
/// must miss it — Michael's search (which helps unlink it) and the fast read
/// (which walks past it and must look at its mark).
fn a_marked_node_is_absent<M: ConcurrentMap<u64, u64>>(m: M) {
    {
        let mut h = m.handle();
        for k in 1..=3 {
            assert!(h.insert(k, k));
        }
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let m = &m;
        let b = s.spawn(move || {
            let mut h = m.handle();
            tx.send(mpsync::sched::current().id()).unwrap();
            go_rx.recv().unwrap();
            h.remove(&2)
        });
        let trap = Trap::at(stall::HM_MARKED).thread(rx.recv().unwrap()).arm();
        go_tx.send(()).unwrap();
        trap.wait_hit(Duration::from_secs(10))
            .expect("B stops after marking");
        let mut h = m.handle();
        assert_eq!(h.get(&2), None, "a marked node was read as present");
        assert!(!h.contains_key(&2));
        assert_eq!(h.get(&3), Some(3));
        trap.release();
        assert_eq!(b.join().unwrap(), Some(2));
    });
}

#[test]
fn a_marked_node_is_absent_to_every_search() {
    a_marked_node_is_absent(lf(hp(), 1));
    a_marked_node_is_absent(lf(Arc::new(Ebr::new()), 1));
    a_marked_node_is_absent(fast(Arc::new(Ebr::new()), 1));
    a_marked_node_is_absent(fast(Arc::new(Qsbr::new()), 1));
}

/// The CR table's reader, as `hp_search_never_steps_past_a_deleted_predecessor`:
/// chain 1, 2, 3, 4 (inserted at the head in reverse); the reader stops on node 2;
/// the writer removes 2 and then 3 (freed); the reader must restart, not step
/// onto node 3.
#[test]
fn cr_reader_never_steps_past_a_removed_node() {
    let hp = Arc::new(HazardPointers::with_threshold(3, 1).unwrap());
    let m: CrHashMap<Key, u64, TasB, HazardPointers, Poisoning> =
        CrHashMap::with_domain(1, hp.clone(), RandomState::new()).unwrap();
    {
        let l = HazardPointers::register(&hp);
        for k in (1..=4).rev() {
            assert!(m.insert(&l, Key::new(k), k));
        }
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let (m, hp) = (&m, &hp);
        let a = s.spawn(move || {
            let l = HazardPointers::register(hp);
            tx.send(mpsync::sched::current().id()).unwrap();
            go_rx.recv().unwrap();
            m.get(&l, &Key::new(4))
        });
        let trap = Trap::at(stall::CR_READ_STEPPED)
            .thread(rx.recv().unwrap())
            .skip(1)
            .arm();
        go_tx.send(()).unwrap();
        trap.wait_hit(Duration::from_secs(10))
            .expect("the reader stops on node 2");
        let mut l = HazardPointers::register(hp);
        assert_eq!(m.remove(&l, &Key::new(2)), Some(2));
        assert_eq!(m.remove(&l, &Key::new(3)), Some(3));
        l.scan();
        assert!(hp.stats().freed >= 1, "node 3 was freed: {:?}", hp.stats());
        trap.release();
        assert_eq!(a.join().expect("the reader read no freed node"), Some(4));
    });
}

/// A reader stopped inside the old table while a resize replaces it: chain 1,
/// 2, 3, 4 in one bucket; the reader, looking for 4, stops on node 2; the
/// writer resizes to 4 buckets (the old table is retired, and with a scan at
/// every retire it would be freed at once if the reader did not protect it),
/// then removes 3 and 4 from the new table. The reader must finish its walk in
/// the old table, reading no freed node, and report 4 present (linearized at
/// the resize); the old table is freed once it is done.
#[test]
fn cr_reader_in_a_resized_table_reads_no_freed_node() {
    let hp = Arc::new(HazardPointers::with_threshold(3, 1).unwrap());
    let m: CrHashMap<Key, u64, TasB, HazardPointers, Poisoning> =
        CrHashMap::with_domain(1, hp.clone(), RandomState::new()).unwrap();
    {
        let l = HazardPointers::register(&hp);
        for k in (1..=4).rev() {
            assert!(m.insert(&l, Key::new(k), k));
        }
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let (m, hp) = (&m, &hp);
        let a = s.spawn(move || {
            let l = HazardPointers::register(hp);
            tx.send(mpsync::sched::current().id()).unwrap();
            go_rx.recv().unwrap();
            m.get(&l, &Key::new(4))
        });
        let trap = Trap::at(stall::CR_READ_STEPPED)
            .thread(rx.recv().unwrap())
            .skip(1)
            .arm();
        go_tx.send(()).unwrap();
        trap.wait_hit(Duration::from_secs(10))
            .expect("the reader stops on node 2");
        let mut l = HazardPointers::register(hp);
        m.resize(&l, 4).unwrap();
        assert_eq!(m.buckets(), 4);
        assert_eq!(m.remove(&l, &Key::new(3)), Some(3));
        assert_eq!(m.remove(&l, &Key::new(4)), Some(4));
        l.scan();
        let before = hp.stats().freed;
        trap.release();
        assert_eq!(
            a.join().expect("the reader read no freed node"),
            Some(4),
            "the reader in the old table lost key 4"
        );
        l.scan();
        assert!(
            hp.stats().freed > before,
            "the old table is freed once the reader left it: {:?}",
            hp.stats()
        );
        assert_eq!(m.get(&l, &Key::new(4)), None);
        assert_eq!(m.get(&l, &Key::new(1)), Some(1));
    });
    assert_eq!(m.len(), 2);
}

/// A table made by `new` grows as keys arrive and shrinks as they leave, and
/// keeps every key through the resizes.
#[test]
fn cr_grows_and_shrinks_by_itself() {
    let m: CrHashMap<u64, u64, TasB, HazardPointers> = CrHashMap::new();
    let mut h = m.handle();
    let start = m.buckets();
    let n = sized(5_000, 10);
    for k in 0..n {
        assert!(h.insert(k, k + 1));
    }
    let grown = m.buckets();
    assert!(grown >= n as usize / 2, "{grown} buckets for {n} keys");
    for k in 0..n {
        assert_eq!(h.get(&k), Some(k + 1), "key {k} lost by a resize");
    }
    for k in 0..n {
        assert_eq!(h.remove(&k), Some(k + 1));
    }
    assert_eq!(m.buckets(), start, "shrank back to the minimum");
    assert!(m.is_empty());
    assert!(format!("{m:?}").contains("max_load: 2"));
}

// ---- iteration under concurrent updates ----------------------------------------

/// The value a key is always inserted with (so a yielded value can be checked).
fn val(k: u64) -> u64 {
    k * 3 + 1
}

/// Keys `0..STABLE` are present for the whole test; keys `STABLE..STABLE+CHURN`
/// are inserted and removed by two writers (which also call `extra` every 16
/// operations: a resize, for the CR table) while a third thread iterates again
/// and again. Every iteration must yield each stable key exactly once, no key
/// twice, no key outside the universe, and each key with its value.
fn iter_is_weakly_consistent<M: ConcurrentMap<u64, u64>>(
    m: &M,
    iter: impl Fn(&M) -> Vec<(u64, u64)> + Sync,
    extra: impl Fn(&M, u64) + Sync,
) {
    const STABLE: u64 = 64;
    const CHURN: u64 = 64;
    {
        let mut h = m.handle();
        for k in 0..STABLE {
            assert!(h.insert(k, val(k)));
        }
    }
    let rounds = sized(50, 5);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for w in 0..2u64 {
            let (m, stop, extra) = (m, &stop, &extra);
            s.spawn(move || {
                let mut h = m.handle();
                let mut rng = Rng::new(w + 7);
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let k = STABLE + rng.next_u64() % CHURN;
                    if rng.next_u64().is_multiple_of(2) {
                        let _ = h.insert(k, val(k));
                    } else {
                        h.remove(&k);
                    }
                    i += 1;
                    if i.is_multiple_of(16) {
                        h.quiescent();
                        extra(m, rng.next_u64());
                    }
                }
            });
        }
        let (m, stop, iter) = (m, &stop, &iter);
        s.spawn(move || {
            // Stops the writers also when a check below fails (a panic).
            struct Stop<'a>(&'a AtomicBool);
            impl Drop for Stop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::Relaxed);
                }
            }
            let _stop = Stop(stop);
            for round in 0..rounds {
                let got = iter(m);
                let mut seen = HashSet::new();
                for &(k, v) in &got {
                    assert!(seen.insert(k), "round {round}: key {k} yielded twice");
                    assert!(
                        k < STABLE + CHURN,
                        "round {round}: key {k} was never inserted"
                    );
                    assert_eq!(v, val(k), "round {round}: key {k} with a wrong value");
                }
                for k in 0..STABLE {
                    assert!(
                        seen.contains(&k),
                        "round {round}: key {k}, present throughout, was not yielded ({} yielded)",
                        got.len()
                    );
                }
            }
        });
    });
}

fn cr_iter<R: Reclaimer>(d: Arc<R>) {
    let policy = ResizePolicy::new(1, 1).unwrap();
    let m: CrHashMap<u64, u64, TasB, R> = CrHashMap::with_policy(policy, d, RandomState::new());
    iter_is_weakly_consistent(
        &m,
        |m| {
            let l = R::register(m.domain());
            // A slow consumer, so resizes land in the middle of iterations.
            m.iter(&l)
                .inspect(|&(k, _)| {
                    if k % 32 == 0 {
                        std::thread::yield_now();
                    }
                })
                .collect()
        },
        |m, r| {
            let l = R::register(m.domain());
            m.resize(&l, 1 + (r % 64) as usize).unwrap();
        },
    );
}

#[test]
fn cr_iter_is_weakly_consistent_under_updates_and_resizes() {
    cr_iter(hp3());
    cr_iter(Arc::new(Ebr::with_advance_every(1).unwrap()));
    cr_iter(Arc::new(Qsbr::new()));
}

fn lf_iter<R: Reclaimer>(d: Arc<R>) {
    let m = lf(d, 4);
    iter_is_weakly_consistent(
        &m,
        |m| {
            let l = R::register(m.domain());
            m.iter(&l).collect()
        },
        |_, _| {},
    );
}

#[test]
fn lf_and_locked_iter_are_weakly_consistent_under_updates() {
    lf_iter(hp());
    lf_iter(Arc::new(Ebr::with_advance_every(1).unwrap()));
    let f = fast(Arc::new(Qsbr::new()), 4);
    iter_is_weakly_consistent(
        &f,
        |m| {
            let l = Qsbr::register(m.domain());
            m.iter(&l).collect()
        },
        |_, _| {},
    );
    let l = LockedHashMap::<u64, u64, TasB>::with_buckets(4).unwrap();
    iter_is_weakly_consistent(&l, |m| m.iter().collect(), |_, _| {});
}

/// The CR iterator stopped on node 2 of the chain 1, 2, 3, 4 (hazard pointers);
/// node 2 is then removed, so its pass must restart: it must yield 1, 3, 4,
/// each once, not the first keys again.
#[test]
fn cr_iter_restart_yields_no_key_twice() {
    let hp = Arc::new(HazardPointers::with_threshold(3, 1).unwrap());
    let m: CrHashMap<u64, u64, TasB, HazardPointers> =
        CrHashMap::with_domain(1, hp.clone(), RandomState::new()).unwrap();
    {
        let l = HazardPointers::register(&hp);
        for k in (1..=4).rev() {
            assert!(m.insert(&l, k, k));
        }
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let (m, hp) = (&m, &hp);
        let a = s.spawn(move || {
            let l = HazardPointers::register(hp);
            tx.send(mpsync::sched::current().id()).unwrap();
            go_rx.recv().unwrap();
            m.iter(&l).map(|(k, _)| k).collect::<Vec<_>>()
        });
        let trap = Trap::at(stall::CR_READ_STEPPED)
            .thread(rx.recv().unwrap())
            .skip(1)
            .arm();
        go_tx.send(()).unwrap();
        trap.wait_hit(Duration::from_secs(10))
            .expect("the iterator stops on node 2");
        let l = HazardPointers::register(hp);
        assert_eq!(m.remove(&l, &2), Some(2));
        trap.release();
        assert_eq!(a.join().unwrap(), [1, 3, 4]);
    });
}

// ---- one registration, several guards (issue 14) --------------------------------

/// Keys present for the whole iteration in [`iter_while_updating`].
const HELD: u64 = 24;

/// With ONE registration: builds the keys `0..HELD` (present throughout) and
/// `HELD..2*HELD` (removed during the iteration), opens an iterator (`iter`),
/// and between every two items it yields inserts a batch of fresh keys, removes
/// the previous batch and one of the keys `HELD..`, and reads a held key back
/// (`get`). The batches grow and shrink a self-resizing CR table, so tables are
/// retired while the iterator still walks one. Then: every held key was yielded
/// exactly once with its value, no key twice, no key that was never inserted
/// before the iteration ended. Keys are [`Key`]s in [`Poisoning`] nodes: an
/// iterator that reads a freed node clones a dropped key and fails.
fn iter_while_updating<I: Iterator<Item = (Key, u64)>>(
    what: &str,
    iter: impl FnOnce() -> I,
    insert: impl Fn(u64) -> bool,
    remove: impl Fn(u64) -> Option<u64>,
    get: impl Fn(u64) -> Option<u64>,
    buckets: impl Fn() -> usize,
) -> usize {
    for k in 0..2 * HELD {
        assert!(insert(k), "{what}: key {k} inserted twice");
    }
    let mut it = iter();
    let mut seen = HashSet::new();
    let mut next_fresh = 1000u64;
    let mut batch: Vec<u64> = Vec::new();
    let mut steps = 0u64;
    let mut resizes = 0;
    let mut last = buckets();
    loop {
        let now = buckets();
        resizes += usize::from(now != last);
        last = now;
        // Updates through the same registration while the iterator (and, for
        // the CR table, its guard) lives.
        for k in batch.drain(..) {
            assert_eq!(remove(k), Some(val(k)), "{what}: fresh key {k} lost");
        }
        // Every other step a big batch: a self-resizing CR table grows past
        // it, and shrinks back when it is removed.
        let n = if steps.is_multiple_of(2) { 100 } else { 1 };
        for _ in 0..n {
            assert!(insert(next_fresh), "{what}: fresh key {next_fresh} present");
            batch.push(next_fresh);
            next_fresh += 1;
        }
        if steps < HELD {
            let k = HELD + steps;
            assert_eq!(remove(k), Some(val(k)), "{what}: key {k} lost");
        }
        let h = steps % HELD;
        assert_eq!(get(h), Some(val(h)), "{what}: held key {h} not found");
        steps += 1;
        let Some((k, v)) = it.next() else { break };
        assert!(seen.insert(k.k), "{what}: key {} yielded twice", k.k);
        assert!(
            k.k < 2 * HELD || (1000..next_fresh).contains(&k.k),
            "{what}: key {} was never inserted",
            k.k
        );
        assert_eq!(v, val(k.k), "{what}: key {} with a wrong value", k.k);
    }
    drop(it);
    for k in 0..HELD {
        assert!(
            seen.contains(&k),
            "{what}: key {k}, present throughout, was not yielded ({} yielded after {steps} steps)",
            seen.len()
        );
    }
    resizes
}

fn lf_iter_with_one_local<R: Reclaimer>(d: Arc<R>) {
    let m: LfHashMap<Key, u64, R, Poisoning> =
        LfHashMap::with_domain(4, d.clone(), RandomState::new()).unwrap();
    let l = R::register(&d);
    let what = format!("LfHashMap over {}", R::NAME);
    iter_while_updating(
        &what,
        || m.iter(&l),
        |k| m.insert(&l, Key::new(k), val(k)),
        |k| m.remove(&l, &Key::new(k)),
        |k| m.get(&l, &Key::new(k)),
        || 0,
    );
}

fn fast_iter_with_one_local<R: mpsync::reclaim::ProtectsReachable>(d: Arc<R>) {
    let m: FastReadHashMap<Key, u64, R, Poisoning> =
        FastReadHashMap::with_domain(4, d.clone(), RandomState::new()).unwrap();
    let l = R::register(&d);
    let what = format!("FastReadHashMap over {}", R::NAME);
    iter_while_updating(
        &what,
        || m.iter(&l),
        |k| m.insert(&l, Key::new(k), val(k)),
        |k| m.remove(&l, &Key::new(k)),
        |k| m.get(&l, &Key::new(k)),
        || 0,
    );
}

fn cr_iter_with_one_local<R: Reclaimer>(d: Arc<R>) {
    // Grows past 1 entry per bucket, shrinks under a quarter: the batches
    // resize it again and again under the iterator.
    let policy = ResizePolicy::new(1, 1).unwrap();
    let m: CrHashMap<Key, u64, TasB, R, Poisoning> =
        CrHashMap::with_policy(policy, d.clone(), RandomState::new());
    let l = R::register(&d);
    let what = format!("CrHashMap over {}", R::NAME);
    let resizes = iter_while_updating(
        &what,
        || m.iter(&l),
        |k| m.insert(&l, Key::new(k), val(k)),
        |k| m.remove(&l, &Key::new(k)),
        |k| m.get(&l, &Key::new(k)),
        || m.buckets(),
    );
    assert!(
        resizes >= 2,
        "{what}: the table resized {resizes} times under the iterator"
    );
}

/// An iterator over a table stays valid while the same registration inserts,
/// removes and reads (several guards per registration): every table type,
/// every scheme it supports.
#[test]
fn iter_lives_across_updates_through_the_same_registration() {
    // Hazard pointers that scan at every retire: a node or table the
    // iterator's own bank stops protecting is freed at once.
    let hp = || Arc::new(HazardPointers::with_threshold(3, 1).unwrap());
    let ebr = || Arc::new(Ebr::with_advance_every(1).unwrap());
    lf_iter_with_one_local(hp());
    lf_iter_with_one_local(ebr());
    lf_iter_with_one_local(Arc::new(Qsbr::new()));
    lf_iter_with_one_local(Arc::new(Leak::new()));
    fast_iter_with_one_local(ebr());
    fast_iter_with_one_local(Arc::new(Qsbr::new()));
    fast_iter_with_one_local(Arc::new(Leak::new()));
    cr_iter_with_one_local(hp());
    cr_iter_with_one_local(ebr());
    cr_iter_with_one_local(Arc::new(Qsbr::new()));
    cr_iter_with_one_local(Arc::new(Leak::new()));
}
