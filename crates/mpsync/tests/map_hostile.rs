//! The maps' hostile-user suite: keys and values whose `Drop`, `Clone`, `Hash`
//! and `Eq`/`Ord` re-enter the library or panic, for every map over every
//! scheme it supports (`LfHashMap`, `FastReadHashMap`, `CrHashMap` fixed and
//! resizing, `LockedHashMap`; the Harris–Michael list is the lock-free
//! tables' bucket, tested through one-bucket tables).
//!
//! - **re-entry from `Drop`**: every value's drop — run by the map, by
//!   reclamation inside an operation (an EBR critical section's collection, a
//!   hazard-pointer scan, a QSBR quiescent state), by a CR resize freeing the
//!   table it replaced — inserts, reads, counts, walks and resizes the same
//!   map and inserts into another map of the same domain; it must work (no
//!   deadlock, no lost or duplicated entry), through the handle-free `Auto`
//!   API, a registration made for the call, or one kept in a `thread_local!`;
//! - **operations from a `Drop` during a CR resize**: `len`, `resize`, an
//!   insert past the growth threshold;
//! - **panics** in `Drop`, `Clone`, `Hash` and `Eq`: the map stays usable (no
//!   lock left held: every later operation completes) and consistent (every
//!   key present exactly once, each operation either done or not), and
//!   everything is dropped exactly once in the end;
//! - **iteration while re-entering**: the consumer of an iterator, and a
//!   `for_each` callback, update the same map; keys present throughout are
//!   yielded exactly once;
//! - **`Hash`/`Eq`/`Clone` that re-enter a map's locked path** (CR, locked
//!   table): a documented panic, never a deadlock; lockless reads work.
//!
//! Every scenario runs under a watchdog ([`map_support::must_complete`]): a
//! deadlock or livelock fails with a message instead of hanging CI.
#![cfg(not(loom))]

mod map_support;

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

use map_support::{Hooks, Hostile, must_complete, tls_forget, tls_local, tls_local_mut};
use mpsync::ds::cr_hash::{CrHashMap, ResizePolicy};
use mpsync::ds::handle::{Auto, Registered};
use mpsync::ds::hash::{FastReadHashMap, LfHashMap};
use mpsync::ds::locked_hash::LockedHashMap;
use mpsync::ds::map::LocalOf;
use mpsync::lock::TasB;
use mpsync::reclaim::{
    Ebr, Guard, HazardPointers, Leak, Local, ProtectsReachable, Qsbr, Reclaimer,
};
use mpsync::sync::Arc;

type StdArc<T> = std::sync::Arc<T>;

/// How an operation gets its registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    /// The handle-free API (`Auto`): a cached registration, a fresh one when
    /// re-entered.
    Auto,
    /// A registration made for the call and dropped after it.
    Fresh,
    /// One registration per thread kept in a `thread_local!`, the same for
    /// nested calls.
    Tls,
}

/// Where a map runs users' code, and so what that code may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Lock-free (`LfHashMap`, `FastReadHashMap`): no lock anywhere; users'
    /// code may do anything.
    LockFree,
    /// `CrHashMap`: lock-free reads; `Eq` (writers), `Hash`/`Clone` (resize)
    /// under locks, where only the lock-free reads may be used.
    Cr,
    /// `LockedHashMap`: every operation locks; `Hash` aside, users' code runs
    /// under a lock, where no table operation may be used.
    Locked,
}

/// A map under test, as a user drives it.
trait Target: Send + Sync + 'static {
    fn name(&self) -> String;
    fn insert(&self, k: Hostile, v: Hostile) -> bool;
    fn remove(&self, k: &Hostile) -> Option<Hostile>;
    fn get(&self, k: &Hostile) -> Option<Hostile>;
    fn len(&self) -> usize;
    /// Iterates (`iter`), running `f` on each item between steps.
    fn iter_with(&self, f: &mut dyn FnMut(&Hostile, &Hostile));
    /// Calls `f` from inside the map's own traversal (`for_each`; `iter` for
    /// the CR table, which has none).
    fn for_each_with(&self, f: &mut dyn FnMut(&Hostile, &Hostile));
    /// Resizes (CR tables); `false` if the map cannot.
    fn resize(&self, buckets: usize) -> bool;
    /// Lets reclamation run: critical sections, quiescent states, scans.
    fn reclaim(&self);
    /// What may run where (see [`Kind`]).
    fn kind(&self) -> Kind;
    /// Drops this thread's `thread_local!` registration, if any.
    fn forget(&self);
}

/// A lock-free or CR map `M` through `Auto`, used [`Via`] one route.
struct On<M: Registered> {
    m: Auto<M>,
    via: Via,
}

impl<M: Registered> On<M>
where
    LocalOf<M::R>: 'static,
{
    fn op<T>(&self, f: impl FnOnce(&M, &LocalOf<M::R>) -> T) -> T {
        match self.via {
            Via::Auto => self.m.with(|m, l| f(m, l)),
            Via::Fresh => {
                let l = M::R::register(self.m.inner().domain());
                f(self.m.inner(), &l)
            }
            Via::Tls => tls_local(self.m.inner().domain(), |l| f(self.m.inner(), l)),
        }
    }

    fn reclaim_via(&self) {
        fn hard<L: Local>(l: &mut L) {
            for _ in 0..4 {
                l.enter().defer(|| ());
                l.quiescent();
            }
        }
        match self.via {
            Via::Auto => self.m.with(|_, l| hard(l)),
            Via::Fresh => hard(&mut M::R::register(self.m.inner().domain())),
            Via::Tls => tls_local_mut(self.m.inner().domain(), hard),
        }
    }
}

/// The `Target` methods every `On<M>` shares.
macro_rules! on_common {
    ($what:literal) => {
        fn name(&self) -> String {
            format!("{}<{}> via {:?}", $what, R::NAME, self.via)
        }
        fn insert(&self, k: Hostile, v: Hostile) -> bool {
            self.op(|m, l| m.insert(l, k, v))
        }
        fn remove(&self, k: &Hostile) -> Option<Hostile> {
            self.op(|m, l| m.remove(l, k))
        }
        fn get(&self, k: &Hostile) -> Option<Hostile> {
            self.op(|m, l| m.get(l, k))
        }
        fn iter_with(&self, f: &mut dyn FnMut(&Hostile, &Hostile)) {
            self.op(|m, l| m.iter(l).for_each(|(k, v)| f(&k, &v)))
        }
        fn reclaim(&self) {
            self.reclaim_via()
        }
        fn forget(&self) {
            tls_forget(self.m.inner().domain())
        }
    };
}

type Lf<R> = LfHashMap<Hostile, Hostile, R>;
type Fast<R> = FastReadHashMap<Hostile, Hostile, R>;
type Cr<R> = CrHashMap<Hostile, Hostile, TasB, R>;

impl<R: Reclaimer> Target for On<Lf<R>>
where
    R::Local: 'static,
{
    on_common!("LfHashMap");
    fn len(&self) -> usize {
        self.op(|m, l| m.len(l))
    }
    fn for_each_with(&self, f: &mut dyn FnMut(&Hostile, &Hostile)) {
        self.op(|m, l| m.for_each(l, f))
    }
    fn resize(&self, _: usize) -> bool {
        false
    }
    fn kind(&self) -> Kind {
        Kind::LockFree
    }
}

impl<R: ProtectsReachable> Target for On<Fast<R>>
where
    R::Local: 'static,
{
    on_common!("FastReadHashMap");
    fn len(&self) -> usize {
        self.op(|m, l| m.as_lf().len(l))
    }
    fn for_each_with(&self, f: &mut dyn FnMut(&Hostile, &Hostile)) {
        self.op(|m, l| m.as_lf().for_each(l, f))
    }
    fn resize(&self, _: usize) -> bool {
        false
    }
    fn kind(&self) -> Kind {
        Kind::LockFree
    }
}

impl<R: Reclaimer> Target for On<Cr<R>>
where
    R::Local: 'static,
{
    on_common!("CrHashMap");
    fn len(&self) -> usize {
        self.m.inner().len()
    }
    fn for_each_with(&self, f: &mut dyn FnMut(&Hostile, &Hostile)) {
        self.iter_with(f)
    }
    fn resize(&self, buckets: usize) -> bool {
        self.op(|m, l| m.resize(l, buckets)).unwrap();
        true
    }
    fn kind(&self) -> Kind {
        Kind::Cr
    }
}

/// The per-bucket-lock table (no registration).
struct Locked(LockedHashMap<Hostile, Hostile, TasB>);

impl Target for Locked {
    fn name(&self) -> String {
        "LockedHashMap<TasB>".into()
    }
    fn insert(&self, k: Hostile, v: Hostile) -> bool {
        self.0.insert(k, v)
    }
    fn remove(&self, k: &Hostile) -> Option<Hostile> {
        self.0.remove(k)
    }
    fn get(&self, k: &Hostile) -> Option<Hostile> {
        self.0.get(k)
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn iter_with(&self, f: &mut dyn FnMut(&Hostile, &Hostile)) {
        self.0.iter().for_each(|(k, v)| f(&k, &v))
    }
    fn for_each_with(&self, f: &mut dyn FnMut(&Hostile, &Hostile)) {
        self.0.for_each(f)
    }
    fn resize(&self, _: usize) -> bool {
        false
    }
    fn reclaim(&self) {}
    fn kind(&self) -> Kind {
        Kind::Locked
    }
    fn forget(&self) {}
}

/// The front-door map, driven through its own methods: `plain` uses
/// `try_insert`/`get`/`remove`/`iter`; the other route its read-modify-write
/// and guard-bound methods (`get_or_insert_with`, `compute`, `update`,
/// `insert`-replace, `pin().get`, `pin().iter`), so a hostile key or value
/// meets each of them.
struct Front {
    m: mpsync::HashMap<Hostile, Hostile>,
    plain: bool,
}

impl Target for Front {
    fn name(&self) -> String {
        format!("HashMap ({})", if self.plain { "plain" } else { "rmw" })
    }
    fn insert(&self, k: Hostile, v: Hostile) -> bool {
        if self.plain {
            return self.m.try_insert(k, v);
        }
        let mut made = false;
        let mut v = Some(v);
        drop(self.m.get_or_insert_with(k.clone(), || {
            made = true;
            v.take().expect("once")
        }));
        if made {
            // Replace the value by an equal one, and update it: both atomic,
            // both hand back clones.
            let again = Hostile::new(k.k, &self.hooks_of(&k));
            drop(self.m.insert(k.clone(), again));
            drop(self.m.update(&k, |old| old.clone()));
        }
        made
    }
    fn remove(&self, k: &Hostile) -> Option<Hostile> {
        if self.plain {
            return self.m.remove(k);
        }
        self.m.compute(k.clone(), |old| {
            (mpsync::ds::hash_map::Change::Remove, old.cloned())
        })
    }
    fn get(&self, k: &Hostile) -> Option<Hostile> {
        if self.plain {
            return self.m.get(k);
        }
        self.m.pin().get(k).cloned()
    }
    fn len(&self) -> usize {
        self.m.len()
    }
    fn iter_with(&self, f: &mut dyn FnMut(&Hostile, &Hostile)) {
        if self.plain {
            self.m.iter().for_each(|(k, v)| f(&k, &v))
        } else {
            self.m.pin().iter().for_each(|(k, v)| f(k, v))
        }
    }
    fn for_each_with(&self, f: &mut dyn FnMut(&Hostile, &Hostile)) {
        self.m.pin().iter().for_each(|(k, v)| f(k, v))
    }
    fn resize(&self, _: usize) -> bool {
        false
    }
    fn reclaim(&self) {
        for _ in 0..4 {
            drop(self.m.pin());
        }
    }
    fn kind(&self) -> Kind {
        Kind::Cr
    }
    fn forget(&self) {}
}

impl Front {
    /// The value family of a key's scenario (values are made from the key's
    /// `k` with the values' hooks: found through a clone of a present value).
    fn hooks_of(&self, k: &Hostile) -> StdArc<map_support::Hooks> {
        self.m
            .pin()
            .get(k)
            .map(|v| v.hooks())
            .expect("just inserted")
    }
}

fn front(plain: bool) -> Pair {
    let d = ebr();
    let one = |d| Front {
        m: mpsync::HashMap::with_domain(d, Default::default()),
        plain,
    };
    (StdArc::new(one(d.clone())), StdArc::new(one(d)))
}

// ---- the maps, in pairs sharing a domain ------------------------------------------

/// Two maps of one domain (the second for "another map of the same domain").
type Pair = (StdArc<dyn Target>, StdArc<dyn Target>);

fn ebr() -> Arc<Ebr> {
    // Every critical section tries to advance and collects: drops run inside
    // operations as often as possible.
    Arc::new(Ebr::with_advance_every(1).unwrap())
}

fn hp() -> Arc<HazardPointers> {
    // Scans at every retire (4 slots: the CR table's reader needs them).
    Arc::new(HazardPointers::with_threshold(4, 1).unwrap())
}

fn lf<R: Reclaimer>(d: Arc<R>, via: Via) -> Pair
where
    R::Local: 'static,
{
    let one = |d| On {
        m: Auto::wrap(Lf::<R>::with_domain(1, d, Default::default()).unwrap()),
        via,
    };
    (StdArc::new(one(d.clone())), StdArc::new(one(d)))
}

fn fast<R: ProtectsReachable>(d: Arc<R>, via: Via) -> Pair
where
    R::Local: 'static,
{
    let one = |d| On {
        m: Auto::wrap(Fast::<R>::with_domain(1, d, Default::default()).unwrap()),
        via,
    };
    (StdArc::new(one(d.clone())), StdArc::new(one(d)))
}

/// A CR table that resizes itself (one entry per bucket) or a fixed one.
fn cr<R: Reclaimer>(d: Arc<R>, via: Via, resizing: bool) -> Pair
where
    R::Local: 'static,
{
    let one = |d: Arc<R>| {
        let m = if resizing {
            Cr::<R>::with_policy(ResizePolicy::new(1, 1).unwrap(), d, Default::default())
        } else {
            Cr::<R>::with_domain(2, d, Default::default()).unwrap()
        };
        On {
            m: Auto::wrap(m),
            via,
        }
    };
    (StdArc::new(one(d.clone())), StdArc::new(one(d)))
}

fn locked() -> Pair {
    let one = || Locked(LockedHashMap::with_buckets(1).unwrap());
    (StdArc::new(one()), StdArc::new(one()))
}

/// Every map × scheme × route (`Fast`/`Tls` last: the routes that need the
/// registrations of the reclamation schemes to tolerate re-entry most).
fn every_map(vias: &[Via]) -> Vec<Pair> {
    let mut all = vec![locked(), front(true), front(false)];
    for &via in vias {
        all.extend([
            lf(ebr(), via),
            lf(Arc::new(Qsbr::new()), via),
            lf(hp(), via),
            lf(Arc::new(Leak::new()), via),
            fast(ebr(), via),
            fast(Arc::new(Qsbr::new()), via),
            fast(Arc::new(Leak::new()), via),
            cr(ebr(), via, false),
            cr(hp(), via, false),
            cr(ebr(), via, true),
            cr(Arc::new(Qsbr::new()), via, true),
            cr(hp(), via, true),
            cr(Arc::new(Leak::new()), via, true),
        ]);
    }
    all
}

// ---- helpers -----------------------------------------------------------------------

/// Key hooks, value hooks and inert hooks of one scenario.
struct Families {
    keys: StdArc<Hooks>,
    vals: StdArc<Hooks>,
    quiet: StdArc<Hooks>,
}

impl Families {
    fn new() -> Self {
        Families {
            keys: Hooks::new(),
            vals: Hooks::new(),
            quiet: Hooks::new(),
        }
    }
    fn key(&self, k: u64) -> Hostile {
        Hostile::new(k, &self.keys)
    }
    fn val(&self, k: u64) -> Hostile {
        Hostile::new(k, &self.vals)
    }
    /// A lookup key (inert).
    fn probe(&self, k: u64) -> Hostile {
        Hostile::new(k, &self.quiet)
    }
    fn clear(&self) {
        self.keys.clear();
        self.vals.clear();
        self.quiet.clear();
    }
    /// Everything made was dropped exactly once (call after the maps and
    /// their domains are gone).
    fn all_dropped(&self, what: &str) {
        for (f, h) in [
            ("keys", &self.keys),
            ("values", &self.vals),
            ("others", &self.quiet),
        ] {
            assert_eq!(h.live(), 0, "{what}: {f} made minus dropped");
        }
    }
}

/// The keys a map holds, by iteration: each once, each with its own value.
fn contents(t: &dyn Target) -> BTreeSet<u64> {
    let mut keys = Vec::new();
    t.iter_with(&mut |k, v| {
        assert_eq!(
            k.k,
            v.k,
            "{}: key {} holds the value of {}",
            t.name(),
            k.k,
            v.k
        );
        keys.push(k.k)
    });
    let set: BTreeSet<u64> = keys.iter().copied().collect();
    assert_eq!(
        set.len(),
        keys.len(),
        "{}: a key held twice: {keys:?}",
        t.name()
    );
    set
}

/// Retries `f` until it does not panic (the hooks panic once).
fn settled<T>(mut f: impl FnMut() -> T) -> T {
    for _ in 0..8 {
        if let Ok(v) = catch_unwind(AssertUnwindSafe(&mut f)) {
            return v;
        }
    }
    panic!("still panicking after 8 tries")
}

/// Drops the pair (and with it, the last references to the domain), then
/// checks every key and value was dropped exactly once.
fn finish(pair: Pair, fam: &Families, what: &str) {
    fam.clear();
    pair.0.forget();
    pair.1.forget();
    drop(pair);
    fam.all_dropped(what);
}

// ---- re-entry from Drop ---------------------------------------------------------------

/// The scenario: 32 keys in, every other one removed, reads, a refused insert,
/// reclamation and (CR) resizes; every value's drop re-enters this map (insert
/// a fresh key `10_000 + id`, read it, count, iterate, resize) and inserts
/// the same key into the other map of the domain. Then each map holds exactly
/// what the outer operations and the drops put there.
fn drop_reenters(pair: Pair) {
    let (t, other) = (pair.0.clone(), pair.1.clone());
    let what = t.name();
    let fam = StdArc::new(Families::new());
    let log: StdArc<Mutex<Vec<u64>>> = StdArc::default();
    // Keys' drops too (a table may drop a removed key before its value).
    for (hooks, base) in [(&fam.vals, 1_000_000), (&fam.keys, 2_000_000)] {
        let (t, other, fam2, log) = (t.clone(), other.clone(), fam.clone(), log.clone());
        hooks.on_drop.set_budgeted(32, move |id| {
            let k = base + id;
            let v = || Hostile::new(k, &fam2.quiet);
            assert!(
                t.insert(fam2.probe(k), v()),
                "{}: drop hook: fresh key {k} present",
                t.name()
            );
            assert_eq!(t.get(&fam2.probe(k)).map(|v| v.k), Some(k));
            assert!(t.len() >= 1);
            let mut n = 0;
            t.iter_with(&mut |_, _| n += 1);
            assert!(n >= 1);
            t.resize(1 + (id % 5) as usize);
            assert!(other.insert(fam2.probe(k), v()));
            log.lock().unwrap().push(k);
        });
    }
    let fam2 = fam.clone();
    let t2 = t.clone();
    must_complete(&what, move || {
        let (t, fam) = (t2, fam2);
        for i in 0..32 {
            assert!(t.insert(fam.key(i), fam.val(i)), "{i}");
        }
        assert!(!t.insert(fam.key(0), fam.val(0)), "a refused insert");
        for i in (0..32).step_by(2) {
            assert_eq!(t.remove(&fam.probe(i)).map(|v| v.k), Some(i));
        }
        for i in 0..32 {
            assert_eq!(t.get(&fam.probe(i)).is_some(), i % 2 == 1, "key {i}");
        }
        t.reclaim();
        t.resize(7);
        t.resize(2);
        t.reclaim();
    });
    let hooked: BTreeSet<u64> = log.lock().unwrap().iter().copied().collect();
    let mut expected: BTreeSet<u64> = (0..32).filter(|i| i % 2 == 1).collect();
    expected.extend(&hooked);
    fam.keys.clear();
    fam.vals.clear();
    let hooked: BTreeSet<u64> = log.lock().unwrap().iter().copied().collect();
    let mut expected2: BTreeSet<u64> = (0..32).filter(|i| i % 2 == 1).collect();
    expected2.extend(&hooked);
    assert_eq!(expected, expected2, "{what}: hooks ran after the scenario");
    assert_eq!(
        contents(&*t),
        expected,
        "{what}: not what was inserted and not removed"
    );
    assert_eq!(
        contents(&*other),
        hooked,
        "{what}: the other map of the domain"
    );
    assert_eq!(t.len(), expected.len(), "{what}: len");
    drop((t, other));
    finish(pair, &fam, &what);
}

#[test]
fn a_drop_reenters_the_map_through_auto_or_a_fresh_registration() {
    for pair in every_map(&[Via::Auto, Via::Fresh]) {
        drop_reenters(pair);
    }
}

#[test]
fn a_drop_reenters_the_map_through_a_thread_local_registration() {
    for pair in every_map(&[Via::Tls]) {
        drop_reenters(pair);
    }
}

// ---- operations from a Drop during a CR resize -------------------------------------------

/// A resizing or fixed CR table whose values' drop calls `op`; a resize frees
/// the table it replaced (hazard pointers: at once, in its own retire; EBR:
/// in a later critical section, a resize's among them) and so drops values
/// while resizing.
fn cr_drop_during_resize<R: Reclaimer>(
    d: impl Fn() -> Arc<R>,
    op_name: &str,
    op: impl Fn(&Cr<R>, u64) + Send + Sync + Clone + 'static,
) where
    R::Local: 'static,
{
    for resizing in [false, true] {
        let (t, _) = cr(d(), Via::Auto, resizing);
        let m: StdArc<On<Cr<R>>> = {
            // The concrete table, for the operations the trait does not have.
            let on = On {
                m: Auto::wrap(if resizing {
                    Cr::<R>::with_policy(ResizePolicy::new(1, 1).unwrap(), d(), Default::default())
                } else {
                    Cr::<R>::with_domain(1, d(), Default::default()).unwrap()
                }),
                via: Via::Auto,
            };
            drop(t);
            StdArc::new(on)
        };
        let what = format!(
            "{} ({}) whose values' drop calls {op_name}",
            m.name(),
            if resizing { "resizing" } else { "fixed" }
        );
        let fam = StdArc::new(Families::new());
        {
            let (m, op) = (m.clone(), op.clone());
            fam.vals
                .on_drop
                .set_budgeted(24, move |id| op(m.m.inner(), id));
        }
        let (m2, fam2) = (m.clone(), fam.clone());
        must_complete(&what, move || {
            for i in 0..8 {
                assert!(m2.insert(fam2.key(i), fam2.val(i)));
            }
            for n in [4, 1, 16, 2, 3] {
                assert!(m2.resize(n));
                m2.reclaim();
            }
            for i in 0..8 {
                assert_eq!(m2.get(&fam2.probe(i)).map(|v| v.k), Some(i), "key {i}");
            }
        });
        fam.clear();
        drop(m);
        fam.all_dropped(&what);
    }
}

#[test]
fn cr_a_drop_during_a_resize_may_call_len_resize_or_insert() {
    fn len<R: Reclaimer>(m: &Cr<R>, _: u64) {
        assert!(m.len() <= 8);
    }
    fn resize<R: Reclaimer>(m: &Cr<R>, id: u64) {
        let l = R::register(m.domain());
        m.resize(&l, 1 + (id % 3) as usize).unwrap();
    }
    /// Inserts and removes 16 keys: past any threshold of a resizing table
    /// (it grows and shrinks back: resizes started from inside a resize).
    fn churn<R: Reclaimer>(m: &Cr<R>, id: u64) {
        let l = R::register(m.domain());
        let q = Hooks::new();
        for k in 0..16 {
            let k = 1_000_000 + id * 100 + k;
            assert!(m.insert(&l, Hostile::new(k, &q), Hostile::new(k, &q)));
        }
        for k in 0..16 {
            let k = 1_000_000 + id * 100 + k;
            assert!(m.remove(&l, &Hostile::new(k, &q)).is_some());
        }
    }
    cr_drop_during_resize(hp, "len()", len::<HazardPointers>);
    cr_drop_during_resize(ebr, "len()", len::<Ebr>);
    cr_drop_during_resize(hp, "resize()", resize::<HazardPointers>);
    cr_drop_during_resize(ebr, "resize()", resize::<Ebr>);
    cr_drop_during_resize(
        hp,
        "insert/remove past the thresholds",
        churn::<HazardPointers>,
    );
    cr_drop_during_resize(ebr, "insert/remove past the thresholds", churn::<Ebr>);
}

// ---- panics in Drop, Clone, Hash, Eq ----------------------------------------------------

/// Which user method panics.
#[derive(Debug, Clone, Copy)]
enum Panicky {
    KeyHash,
    KeyEq,
    KeyClone,
    KeyDrop,
    ValueClone,
    ValueDrop,
}

impl Panicky {
    fn arm(self, fam: &Families) {
        let msg = "a user's method panics (on purpose)";
        match self {
            Panicky::KeyHash => fam.keys.on_hash.panic_once(msg),
            Panicky::KeyEq => fam.keys.on_eq.panic_once(msg),
            Panicky::KeyClone => fam.keys.on_clone.panic_once(msg),
            Panicky::KeyDrop => fam.keys.on_drop.panic_once(msg),
            Panicky::ValueClone => fam.vals.on_clone.panic_once(msg),
            Panicky::ValueDrop => fam.vals.on_drop.panic_once(msg),
        }
    }
}

/// Runs the operations of the scenario one at a time with `which` armed to
/// panic (once) before each; after each, the map must hold exactly what the
/// operations that completed left (one that panicked either happened or not:
/// asked afterwards), and in the end be usable (every operation completes:
/// no lock left held) with (`census`) everything dropped exactly once.
fn panics_leave_the_map_usable(pair: Pair, which: Panicky, census: bool) {
    let t = pair.0.clone();
    let what = format!("{} with a panicking {which:?}", t.name());
    let fam = StdArc::new(Families::new());
    let (t2, fam2, what2) = (t.clone(), fam.clone(), what.clone());
    must_complete(&what, move || {
        let (t, fam, what) = (t2, fam2, what2);
        let mut model = BTreeSet::new();
        let mut panics = 0;
        for step in 0..60u64 {
            let k = (step * 7) % 12;
            which.arm(&fam);
            let r = catch_unwind(AssertUnwindSafe(|| match step % 6 {
                0 | 1 => Some(t.insert(fam.key(k), fam.val(k)) != model.contains(&k)),
                2 => Some(t.get(&fam.probe(k)).map(|v| v.k) == model.contains(&k).then_some(k)),
                3 => Some(t.remove(&fam.probe(k)).map(|v| v.k) == model.contains(&k).then_some(k)),
                4 => {
                    t.resize(1 + (step % 4) as usize);
                    None
                }
                _ => {
                    t.reclaim();
                    let mut n = 0;
                    t.iter_with(&mut |_, _| n += 1);
                    None
                }
            }));
            fam.clear();
            match r {
                Ok(Some(agrees)) => {
                    assert!(
                        agrees,
                        "{what}: step {step}: the answer disagrees with the map"
                    );
                    match step % 6 {
                        0 | 1 => {
                            model.insert(k);
                        }
                        3 => {
                            model.remove(&k);
                        }
                        _ => {}
                    }
                }
                Ok(None) => {}
                Err(_) => {
                    panics += 1;
                    // Done or not: the map says (and must then agree throughout).
                    if settled(|| t.get(&fam.probe(k)).is_some()) {
                        model.insert(k);
                    } else {
                        model.remove(&k);
                    }
                }
            }
            assert_eq!(
                settled(|| contents(&*t)),
                model,
                "{what}: after step {step}"
            );
        }
        // Usable: every key in and out again, a resize, a count.
        for k in 0..12 {
            if !model.contains(&k) {
                assert!(t.insert(fam.key(k), fam.val(k)), "{what}: key {k}");
            }
        }
        t.resize(5);
        assert_eq!(t.len(), 12, "{what}");
        for k in 0..12 {
            assert_eq!(t.remove(&fam.probe(k)).map(|v| v.k), Some(k), "{what}");
        }
        t.reclaim();
        panics
    });
    drop(t);
    if census {
        finish(pair, &fam, &what);
    } else {
        fam.clear();
        drop(pair);
    }
}

const EVERY_PANIC: [Panicky; 6] = [
    Panicky::KeyHash,
    Panicky::KeyEq,
    Panicky::KeyClone,
    Panicky::KeyDrop,
    Panicky::ValueClone,
    Panicky::ValueDrop,
];

#[test]
fn a_panicking_drop_clone_hash_or_eq_leaves_every_map_usable() {
    for which in EVERY_PANIC {
        for pair in every_map(&[Via::Auto]) {
            // A drop that panics inside the domain's reclamation (a bag of
            // retired nodes being freed) may leak the rest of the bag: the
            // census of those is the next test's.
            let census = pair.0.kind() == Kind::Locked
                || !matches!(which, Panicky::KeyDrop | Panicky::ValueDrop);
            panics_leave_the_map_usable(pair, which, census);
        }
    }
}

#[test]
fn a_panicking_drop_inside_reclamation_leaks_nothing() {
    for which in [Panicky::KeyDrop, Panicky::ValueDrop] {
        for pair in every_map(&[Via::Auto]) {
            panics_leave_the_map_usable(pair, which, true);
        }
    }
}

// ---- iteration while re-entering --------------------------------------------------------

/// Keys 0..24 in; an iteration whose consumer removes the odd keys it is
/// handed and inserts others (the clones it is handed are dropped between
/// items, re-entering through the value hooks), then a `for_each` whose
/// callback inserts: every even key (present throughout) is seen exactly
/// once. `LockedHashMap::for_each` runs its callback under the bucket lock:
/// there the insert is refused with the documented panic, and the table is
/// usable after.
fn iterate_while_reentering(pair: Pair) {
    let t = pair.0.clone();
    let what = t.name();
    let fam = StdArc::new(Families::new());
    {
        let (t, fam2) = (t.clone(), fam.clone());
        fam.vals.on_drop.set_budgeted(32, move |id| {
            let k = 1_000_000 + id;
            assert!(t.insert(fam2.probe(k), Hostile::new(k, &fam2.quiet)));
            t.get(&fam2.probe(3));
        });
    }
    let (t2, fam2, what2) = (t.clone(), fam.clone(), what.clone());
    must_complete(&what, move || {
        let (t, fam, what) = (t2, fam2, what2);
        for k in 0..24 {
            assert!(t.insert(fam.key(k), fam.val(k)));
        }
        let even_once = |seen: &[u64], how: &str| {
            for k in (0..24).step_by(2) {
                let n = seen.iter().filter(|&&s| s == k).count();
                assert_eq!(
                    n, 1,
                    "{what}: {how}: key {k}, present throughout, seen {n} times"
                );
            }
            let set: BTreeSet<u64> = seen.iter().copied().collect();
            assert_eq!(set.len(), seen.len(), "{what}: {how}: a key seen twice");
        };
        let mut seen = Vec::new();
        t.iter_with(&mut |k, _| {
            seen.push(k.k);
            if k.k < 24 && k.k % 2 == 1 {
                assert_eq!(t.remove(&fam.probe(k.k)).map(|v| v.k), Some(k.k));
                assert!(t.insert(fam.key(100 + k.k), fam.val(100 + k.k)));
            }
            assert_eq!(t.get(&fam.probe(0)).map(|v| v.k), Some(0));
        });
        even_once(&seen, "iter");
        let mut seen = Vec::new();
        let r = catch_unwind(AssertUnwindSafe(|| {
            t.for_each_with(&mut |k, _| {
                seen.push(k.k);
                if k.k < 24 && k.k % 2 == 0 {
                    assert!(t.insert(fam.key(200 + k.k), fam.val(200 + k.k)));
                }
            })
        }));
        match (t.kind(), r) {
            (Kind::Locked, Err(p)) => {
                let msg = p.downcast_ref::<String>().cloned().unwrap_or_default();
                assert!(msg.contains("would deadlock"), "{what}: {msg}");
            }
            (Kind::Locked, Ok(())) => panic!("{what}: for_each's callback inserted under the lock"),
            (_, Err(p)) => std::panic::resume_unwind(p),
            (_, Ok(())) => even_once(&seen, "for_each"),
        }
        // Usable after.
        assert!(t.insert(fam.key(999), fam.val(999)));
        assert!(t.len() >= 13);
        assert_eq!(t.remove(&fam.probe(999)).map(|v| v.k), Some(999));
    });
    fam.clear();
    // Every even key still there, with its value; no key twice.
    let keys = contents(&*t);
    assert!(
        (0..24).step_by(2).all(|k| keys.contains(&k)),
        "{what}: {keys:?}"
    );
    drop(t);
    finish(pair, &fam, &what);
}

#[test]
fn iteration_while_reentering_yields_each_key_present_throughout_once() {
    for pair in every_map(&[Via::Auto, Via::Fresh]) {
        iterate_while_reentering(pair);
    }
}

// ---- Hash/Eq/Clone that re-enter a map ---------------------------------------------------

/// Sets the keys' `Hash`, `Eq` and `Clone` hooks to `f` (at most `budget`
/// calls each).
fn on_key_methods(fam: &Families, budget: usize, f: impl Fn(u64) + Send + Sync + 'static) {
    let f = StdArc::new(f);
    for h in [&fam.keys.on_hash, &fam.keys.on_eq, &fam.keys.on_clone] {
        let f = f.clone();
        h.set_budgeted(budget, move |k| f(k));
    }
}

/// Keys' `Hash`, `Eq` and `Clone` that use the same map: where they run with
/// no lock held (lock-free tables; CR readers) anything works; the CR
/// table's lock-free reads work from anywhere; an operation that would take
/// a lock from inside one the map holds panics with the documented message
/// (never a deadlock), and the map is usable after.
fn key_methods_reenter(pair: Pair) {
    let t = pair.0.clone();
    let what = t.name();
    let fam = StdArc::new(Families::new());
    let (t2, fam2, what2) = (t.clone(), fam.clone(), what.clone());
    must_complete(&what, move || {
        let (t, fam, what) = (t2, fam2, what2);
        for k in 0..8 {
            assert!(t.insert(fam.key(k), fam.val(k)));
        }
        // What works from anywhere: reads (lock-free ones only, for tables
        // with locks), and for the lock-free tables, writes too.
        if t.kind() != Kind::Locked {
            let (t3, fam3, kind) = (t.clone(), fam.clone(), t.kind());
            on_key_methods(&fam, 200, move |_| {
                assert_eq!(t3.get(&fam3.probe(7)).map(|v| v.k), Some(7));
                if kind == Kind::LockFree {
                    let k = 5_000;
                    if t3.insert(fam3.probe(k), Hostile::new(k, &fam3.quiet)) {
                        assert!(t3.remove(&fam3.probe(k)).is_some());
                    }
                    t3.len();
                }
            });
            for k in 0..12 {
                let present = k < 8;
                assert_eq!(t.insert(fam.key(k), fam.val(k)), !present, "{what}: {k}");
                assert_eq!(t.get(&fam.probe(k)).map(|v| v.k), Some(k), "{what}");
            }
            t.resize(3);
            let mut n = 0;
            t.iter_with(&mut |_, _| n += 1);
            assert_eq!(n, 12, "{what}");
            for k in 8..12 {
                assert_eq!(t.remove(&fam.probe(k)).map(|v| v.k), Some(k), "{what}");
            }
            fam.clear();
        }
        // What would deadlock: a lock-taking operation from under a lock.
        if t.kind() != Kind::LockFree {
            let (t3, fam3) = (t.clone(), fam.clone());
            // `Eq` only (`Hash` runs before the lock is taken).
            fam.keys.on_eq.set(move |_| {
                t3.insert(fam3.probe(6_000), Hostile::new(6_000, &fam3.quiet));
            });
            // An insert compares the keys of the chain under the bucket lock.
            let r = catch_unwind(AssertUnwindSafe(|| t.insert(fam.key(3), fam.val(3))));
            fam.clear();
            let msg = match r {
                Err(p) => p.downcast_ref::<String>().cloned().unwrap_or_default(),
                Ok(_) => String::new(),
            };
            assert!(
                msg.contains("would deadlock"),
                "{what}: an insert from an `Eq` run under the bucket lock: {msg:?}"
            );
        }
        // Usable and unchanged after.
        assert_eq!(contents(&*t), (0..8).collect(), "{what}");
        assert!(t.insert(fam.key(6_001), fam.val(6_001)));
        assert_eq!(t.remove(&fam.probe(6_001)).map(|v| v.k), Some(6_001));
        t.resize(2);
        assert_eq!(t.len(), 8, "{what}");
    });
    drop(t);
    finish(pair, &fam, &what);
}

#[test]
fn hash_eq_and_clone_may_use_the_map_where_no_lock_is_held_and_panic_where_one_is() {
    for pair in every_map(&[Via::Auto]) {
        key_methods_reenter(pair);
    }
}

// ---- several threads -------------------------------------------------------------------

/// Two threads run the re-entering workload on disjoint keys of one map,
/// while a third resizes (CR) and reclaims: a value's drop runs on whichever
/// thread reclaims it, beside the others' resizes and counts. In the end the
/// map holds exactly what the threads' operations and the drops inserted.
fn threads_reenter(pair: Pair) {
    let t = pair.0.clone();
    let what = t.name();
    let fam = StdArc::new(Families::new());
    let log: StdArc<Mutex<Vec<u64>>> = StdArc::default();
    {
        let (t, fam2, log) = (t.clone(), fam.clone(), log.clone());
        fam.vals.on_drop.set_budgeted(200, move |id| {
            let k = 1_000_000 + id;
            assert!(t.insert(fam2.probe(k), Hostile::new(k, &fam2.quiet)));
            assert!(t.len() >= 1);
            log.lock().unwrap().push(k);
        });
    }
    let rounds = if mpsync::sync::CHAOS { 30 } else { 150 };
    let (t2, fam2) = (t.clone(), fam.clone());
    must_complete(&what, move || {
        std::thread::scope(|s| {
            for th in 0..2u64 {
                let (t, fam) = (&t2, &fam2);
                s.spawn(move || {
                    for i in 0..rounds {
                        let k = th * 1000 + i % 20;
                        if t.insert(fam.key(k), fam.val(k)) {
                            assert_eq!(t.get(&fam.probe(k)).map(|v| v.k), Some(k));
                        } else {
                            assert_eq!(t.remove(&fam.probe(k)).map(|v| v.k), Some(k));
                        }
                    }
                    t.reclaim();
                });
            }
            let t = &t2;
            s.spawn(move || {
                for i in 0..rounds / 10 {
                    t.resize(1 + i as usize % 6);
                    t.reclaim();
                }
            });
        });
    });
    fam.clear();
    // Each thread's keys: present iff inserted an odd number of times.
    let mut expected: BTreeSet<u64> = log.lock().unwrap().iter().copied().collect();
    for th in 0..2u64 {
        for j in 0..20u64 {
            let times = (0..rounds).filter(|i| i % 20 == j).count();
            if times % 2 == 1 {
                expected.insert(th * 1000 + j);
            }
        }
    }
    assert_eq!(contents(&*t), expected, "{what}");
    drop(t);
    finish(pair, &fam, &what);
}

#[test]
fn drops_reenter_from_several_threads() {
    for pair in [
        lf(hp(), Via::Auto),
        lf(ebr(), Via::Auto),
        fast(Arc::new(Qsbr::new()), Via::Auto),
        cr(hp(), Via::Auto, true),
        cr(ebr(), Via::Auto, true),
        cr(Arc::new(Qsbr::new()), Via::Fresh, true),
        locked(),
    ] {
        threads_reenter(pair);
    }
}

/// A CR resize whose fourth value `Clone` panics: the copy made so far, and
/// the key cloned for the value whose clone panicked, are dropped after every
/// lock is released — their drops use the table (`len`) — and the table
/// stays as it was.
#[test]
fn cr_a_resize_whose_clone_panics_drops_its_partial_copy_with_no_lock_held() {
    for pair in [
        cr(Arc::new(Leak::new()), Via::Auto, false),
        cr(hp(), Via::Auto, false),
    ] {
        let t = pair.0.clone();
        let what = t.name();
        let fam = StdArc::new(Families::new());
        let (t2, fam2, what2) = (t.clone(), fam.clone(), what.clone());
        must_complete(&what, move || {
            let (t, fam, what) = (t2, fam2, what2);
            for k in 0..8 {
                assert!(t.insert(fam.key(k), fam.val(k)));
            }
            for hooks in [&fam.keys, &fam.vals] {
                let t = t.clone();
                hooks
                    .on_drop
                    .set_budgeted(64, move |_| assert!(t.len() <= 8));
            }
            map_support::quiet_deliberate_panics();
            let clones = std::sync::atomic::AtomicUsize::new(0);
            fam.vals.on_clone.set(move |_| {
                if clones.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 3 {
                    panic!("the fourth clone panics (on purpose)");
                }
            });
            let r = catch_unwind(AssertUnwindSafe(|| t.resize(5)));
            fam.clear();
            assert!(r.is_err(), "{what}: the clone panicked");
            assert_eq!(
                contents(&*t),
                (0..8).collect(),
                "{what}: the table as it was"
            );
            assert_eq!(t.len(), 8, "{what}");
        });
        drop(t);
        finish(pair, &fam, &what);
    }
}
