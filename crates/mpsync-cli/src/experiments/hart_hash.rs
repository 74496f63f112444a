//! The hash-table experiments of Hart's thesis (papers/002_…, chapter 5) and
//! mpsync's own `map-oversub`.
//!
//! Hart's test loop, as for the queues (`hart.rs`): threads run for a fixed
//! time; each loop iteration does 100 operations on random keys, then announces a
//! quiescent state (the tables' handles do it every 100 operations); time per
//! operation = run time / all threads' operations; 7 trials, the mean of the
//! median 5. Nodes of the lock-free and CR tables come from Hart's magazines
//! unless `--alloc system`. The table has 32 buckets and `load factor · 32` entries, keys drawn
//! from twice that range: an update is an insert or a remove with equal
//! probability, so each succeeds about half the time and the load factor stays put.
//!
//! - `hart-base-hash` (§5.2, Fig. 5.2, hash part of `hart-base`): one thread,
//!   load factor 1, read-only (x = 0) and write-only (x = 1), LF and CR × QSBR/EBR/HP.
//! - `hart-readonly-threads` (§5.2, Fig. 5.3): read-only, threads 1..N, the
//!   per-bucket spinlock table against LF × the three schemes.
//! - `hart-loadfactor` (§5.2.1, Fig. 5.4–5.6): one thread, load factor 1..20,
//!   read-only and write-only, the LF and the CR tables × the three schemes
//!   and the per-bucket lock table; the clauses judge the LF lines.
//! - `hart-hash-threads` (§5.2.2, Fig. 5.8): write-only, threads 1..N.
//! - `hart-update-fraction` (§5.2.4–5.2.5, Fig. 5.14–5.15 and 5.17): two
//!   threads, load factor 5, update fraction 0..1, the LF and CR tables over
//!   QSBR, EBR and HP, the fast-read LF over QSBR, and the per-bucket lock; the
//!   clauses judge the QSBR lines (the paper's conclusions are stated for them).
//! - `hart-fastread` (§5.2.5, Fig. 5.16, 5.18–5.19): two threads, read-only, load factor
//!   1..20, read-only and write-only (Fig. 5.18–5.19), LF vs LF fast-read vs CR.
//! - `map-oversub` (mpsync's own): every mpsync table and the peers (papaya,
//!   dashmap, scc, `RwLock<HashMap>`, `Mutex<HashMap>`) on a read-heavy mix (98%
//!   gets) at 1×, 2× and 4× the cores, unpinned; throughput and the p99.9 of the
//!   `get` latency (every 8th get timed). `mpsync::HashMap (default)` is the
//!   library's default map — the `hash CR EBR` table behind the handle-free API
//!   (a cached registration per thread), resizing, under a spin-then-park lock —
//!   so the two rows are the front door's cost on the hot path.
//!
//! - `hart-severity` (§5.2.3, Fig. 5.10–5.12): write-only; many threads with
//!   the load factor varying, and load factor 10 and 20 with the threads varying:
//!   where hazard pointers and QSBR/EBR cross over (a measurement).
//!
//! - `hart-memory-hash` (as `hart-memory`, with the lock-free table): one thread
//!   stopped inside an operation for the whole run while the others run a
//!   write-only load; unreclaimed nodes over time per scheme, HP's bound beside
//!   (`hart::run_stalled`: a series measure, the same clauses).
//!
//! The CR table is Hart's concurrently-readable table (`ds::cr_hash`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use mpsync::ds::alloc::{MagazineAlloc, NodeAlloc, SystemAlloc};
use mpsync::ds::cr_hash::CrHashMap;
use mpsync::ds::hash::{FastReadHashMap, LfHashMap};
use mpsync::ds::locked_hash::LockedHashMap;
use mpsync::ds::map::{ConcurrentMap, MapHandle};
use mpsync::lock::{TasB, TasBNp};
use mpsync::reclaim::{Ebr, HazardPointers, Qsbr, Reclaimer};
use mpsync::sync::Arc;
use mpsync::util::rng::SplitMix64;

use super::hart::{
    BASE_DURATION_MS, OPS_PER_LOOP, Pending, Scheme, Stalled, StalledLoad, alloc_name,
    degrades_beyond_cores, run_stalled, stalled_run, unmeasured,
};
use super::wks94::{AMONG_THE_BEST, COLLAPSE};
use super::{AllocMode, Experiment, Params};
use crate::env::Preempt;
use crate::model::{
    self, AdviceRule, Better, Clause, Design, Imp, Judged, Panel, Results, Role, Verdicts, fmt_x,
};
use crate::output::{RunRecord, Trial};
use crate::stats::quantile;
use crate::svg::sig3;

/// `hart-severity`'s panel: many threads, load factor varies.
const SEV_LOAD: &str = "many threads, load factor varies";
/// `hart-severity`'s panel: load factor 10, threads vary.
const SEV_T10: &str = "load factor 10, threads vary";
/// `hart-severity`'s panel: load factor 20, threads vary.
const SEV_T20: &str = "load factor 20, threads vary";

/// Hart's bucket count.
pub const BUCKETS: usize = 32;
/// One `get` in this many is timed in `map-oversub`.
pub const LATENCY_EVERY: u64 = 8;

/// A table (or peer) in these experiments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Impl {
    /// Hart's lock-free table over a scheme.
    Lf(Scheme),
    /// Its fast-read variant (QSBR or EBR).
    Fast(Scheme),
    /// Hart's concurrently-readable table (per-bucket TAS-B writer locks) over a scheme.
    Cr(Scheme),
    /// The per-bucket-lock table with a test-and-test-and-set spin lock (Hart's "spinlock").
    Spin,
    /// The per-bucket-lock table with the preemption-safe TAS-B-np lock.
    BucketNp,
    /// `mpsync::HashMap`, the library's default: the CR table over EBR with a
    /// spin-then-park lock, resizing, handle-free (a cached registration per
    /// thread) — what a user gets without choosing.
    Default,
    /// `papaya::HashMap`.
    Papaya,
    /// `dashmap::DashMap`.
    DashMap,
    /// `scc::HashMap`.
    Scc,
    /// `RwLock<std::collections::HashMap>`.
    RwLockStd,
    /// `Mutex<std::collections::HashMap>`.
    MutexStd,
}

impl Impl {
    /// As in the figures and CSVs (each name says it is a hash table).
    pub fn name(self) -> String {
        match self {
            Self::Lf(s) => format!("hash LF {}", s.name()),
            Self::Fast(s) => format!("hash LF-fast {}", s.name()),
            Self::Cr(s) => format!("hash CR {}", s.name()),
            Self::Spin => "hash bucket-lock TAS-B".into(),
            Self::BucketNp => "hash bucket-lock TAS-B-np".into(),
            Self::Default => "mpsync::HashMap (default)".into(),
            Self::Papaya => "papaya".into(),
            Self::DashMap => "dashmap".into(),
            Self::Scc => "scc::HashMap".into(),
            Self::RwLockStd => "RwLock<HashMap>".into(),
            Self::MutexStd => "Mutex<HashMap>".into(),
        }
    }

    fn is_mpsync(self) -> bool {
        matches!(
            self,
            Self::Lf(_) | Self::Fast(_) | Self::Cr(_) | Self::Spin | Self::BucketNp | Self::Default
        )
    }
}

/// One run of the test loop.
#[derive(Debug, Clone, Copy)]
pub struct LoopSpec {
    /// Worker threads (unpinned).
    pub threads: u32,
    /// Buckets of the mpsync tables.
    pub buckets: usize,
    /// Entries at the start (= load factor × buckets); keys are drawn from `0..2·entries`.
    pub entries: u64,
    /// Fraction of operations that are updates (half inserts, half removes).
    pub update: f64,
    /// Run time.
    pub duration: Duration,
    /// Seed.
    pub seed: u64,
    /// Time every `LATENCY_EVERY`-th get.
    pub latency: bool,
    /// Node allocator of the mpsync lock-free and CR tables.
    pub alloc: AllocMode,
}

/// What one trial measured.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Operations by all threads.
    pub ops: u64,
    /// Timed gets, ns.
    pub get_ns: Vec<u64>,
}

fn test_loop<M: ConcurrentMap<u64, u64>>(m: &M, spec: LoopSpec) -> Outcome {
    let range = (2 * spec.entries).max(1);
    {
        // Every other key: `entries` entries, spread over the range.
        let mut h = m.handle();
        for k in (0..range).step_by(2) {
            let _ = h.insert(k, k);
        }
    }
    let upd = (spec.update * (1u64 << 32) as f64) as u64;
    let stop = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let lat: Mutex<Vec<u64>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..spec.threads {
            let (stop, total, lat) = (&stop, &total, &lat);
            s.spawn(move || {
                let mut h = m.handle();
                let mut rng = SplitMix64::stream(spec.seed, u64::from(t));
                let mut n = 0u64;
                let mut gets = 0u64;
                let mut mine = Vec::new();
                loop {
                    for _ in 0..OPS_PER_LOOP {
                        let r = rng.next_u64();
                        let k = (r >> 33) % range;
                        if (r & 0xffff_ffff) < upd {
                            if r & (1 << 32) == 0 {
                                let _ = h.insert(k, k);
                            } else {
                                std::hint::black_box(h.remove(&k));
                            }
                        } else if spec.latency && gets.is_multiple_of(LATENCY_EVERY) {
                            gets += 1;
                            let t0 = Instant::now();
                            std::hint::black_box(h.get(&k));
                            mine.push(t0.elapsed().as_nanos() as u64);
                        } else {
                            gets += 1;
                            std::hint::black_box(h.get(&k));
                        }
                    }
                    n += OPS_PER_LOOP;
                    h.quiescent();
                    // Relaxed: a stop request; the scope's join orders the totals.
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
                // Relaxed: read after the join.
                total.fetch_add(n, Ordering::Relaxed);
                if !mine.is_empty() {
                    lat.lock().unwrap().extend(mine);
                }
            });
        }
        // The harness (not an algorithm) may sleep: it is the timer.
        std::thread::sleep(spec.duration);
        // Relaxed: see above.
        stop.store(true, Ordering::Relaxed);
    });
    Outcome {
        ops: total.into_inner(),
        get_ns: lat.into_inner().unwrap(),
    }
}

// ---- peers, behind the same interface ------------------------------------------

/// `papaya::HashMap` (a guard pinned per operation).
pub struct Papaya(papaya::HashMap<u64, u64>);
/// `dashmap::DashMap`.
pub struct Dash(dashmap::DashMap<u64, u64>);
/// `scc::HashMap`.
pub struct Scc(scc::HashMap<u64, u64>);
/// `RwLock<HashMap>`.
pub struct RwStd(RwLock<HashMap<u64, u64>>);
/// `Mutex<HashMap>`.
pub struct MutexStd(Mutex<HashMap<u64, u64>>);

macro_rules! peer {
    ($t:ty, $s:ident, insert($k:ident, $v:ident) $ins:expr, get($gk:ident) $get:expr, remove($rk:ident) $rem:expr) => {
        impl ConcurrentMap<u64, u64> for $t {
            type Handle<'a> = &'a $t;
            fn handle(&self) -> &Self {
                self
            }
        }
        impl MapHandle<u64, u64> for &$t {
            fn insert(&mut self, $k: u64, $v: u64) -> bool {
                let $s = &**self;
                $ins
            }
            fn get(&mut self, $gk: &u64) -> Option<u64> {
                let $s = &**self;
                $get
            }
            fn remove(&mut self, $rk: &u64) -> Option<u64> {
                let $s = &**self;
                $rem
            }
            fn contains_key(&mut self, k: &u64) -> bool {
                self.get(k).is_some()
            }
        }
    };
}

peer!(Papaya, s,
    insert(k, v) s.0.pin().try_insert(k, v).is_ok(),
    get(k) s.0.pin().get(k).copied(),
    remove(k) s.0.pin().remove(k).copied());
peer!(Dash, s,
    insert(k, v) {
        match s.0.entry(k) {
            dashmap::Entry::Occupied(_) => false,
            dashmap::Entry::Vacant(e) => {
                e.insert(v);
                true
            }
        }
    },
    get(k) s.0.get(k).map(|r| *r),
    remove(k) s.0.remove(k).map(|(_, v)| v));
peer!(Scc, s,
    insert(k, v) s.0.insert_sync(k, v).is_ok(),
    get(k) s.0.read_sync(k, |_, v| *v),
    remove(k) s.0.remove_sync(k).map(|(_, v)| v));
peer!(RwStd, s,
    insert(k, v) {
        let mut g = s.0.write().unwrap();
        if let std::collections::hash_map::Entry::Vacant(e) = g.entry(k) { e.insert(v); true } else { false }
    },
    get(k) s.0.read().unwrap().get(k).copied(),
    remove(k) s.0.write().unwrap().remove(k));
peer!(MutexStd, s,
    insert(k, v) {
        let mut g = s.0.lock().unwrap();
        if let std::collections::hash_map::Entry::Vacant(e) = g.entry(k) { e.insert(v); true } else { false }
    },
    get(k) s.0.lock().unwrap().get(k).copied(),
    remove(k) s.0.lock().unwrap().remove(k));

fn lf<R: Reclaimer, A: NodeAlloc>(d: Arc<R>, spec: LoopSpec) -> anyhow::Result<Outcome> {
    let m: LfHashMap<u64, u64, R, A> = LfHashMap::with_domain(spec.buckets, d, Default::default())?;
    Ok(test_loop(&m, spec))
}

fn fast<R: mpsync::reclaim::ProtectsReachable, A: NodeAlloc>(
    d: Arc<R>,
    spec: LoopSpec,
) -> anyhow::Result<Outcome> {
    let m: FastReadHashMap<u64, u64, R, A> =
        FastReadHashMap::with_domain(spec.buckets, d, Default::default())?;
    Ok(test_loop(&m, spec))
}

fn cr<R: Reclaimer, A: NodeAlloc>(d: Arc<R>, spec: LoopSpec) -> anyhow::Result<Outcome> {
    let m: CrHashMap<u64, u64, TasB, R, A> =
        CrHashMap::with_domain(spec.buckets, d, Default::default())?;
    Ok(test_loop(&m, spec))
}

/// Calls `$f::<R, A>(domain, spec)` with the allocator `spec.alloc` names.
macro_rules! with_alloc {
    ($f:ident, $d:expr, $spec:expr) => {
        match $spec.alloc {
            AllocMode::Magazines => $f::<_, MagazineAlloc>($d, $spec)?,
            AllocMode::System => $f::<_, SystemAlloc>($d, $spec)?,
        }
    };
}

/// One trial of `imp`.
pub fn trial(imp: Impl, spec: LoopSpec) -> anyhow::Result<Outcome> {
    let cap = (2 * spec.entries) as usize;
    Ok(match imp {
        Impl::Lf(Scheme::Qsbr) => with_alloc!(lf, Arc::new(Qsbr::new()), spec),
        Impl::Lf(Scheme::Ebr) => with_alloc!(lf, Arc::new(Ebr::new()), spec),
        Impl::Lf(Scheme::Hp) => with_alloc!(lf, Arc::new(HazardPointers::new(2)?), spec),
        Impl::Lf(Scheme::Leak) => with_alloc!(lf, Arc::new(mpsync::reclaim::Leak::new()), spec),
        Impl::Fast(Scheme::Qsbr) => with_alloc!(fast, Arc::new(Qsbr::new()), spec),
        Impl::Fast(Scheme::Ebr) => with_alloc!(fast, Arc::new(Ebr::new()), spec),
        Impl::Fast(s) => anyhow::bail!(
            "the fast-read table needs a scheme that protects everything reachable (QSBR or EBR), not {}",
            s.name()
        ),
        Impl::Cr(Scheme::Qsbr) => with_alloc!(cr, Arc::new(Qsbr::new()), spec),
        Impl::Cr(Scheme::Ebr) => with_alloc!(cr, Arc::new(Ebr::new()), spec),
        Impl::Cr(Scheme::Hp) => with_alloc!(cr, Arc::new(HazardPointers::new(3)?), spec), // the CR table protects its bucket array in a third slot
        Impl::Cr(Scheme::Leak) => with_alloc!(cr, Arc::new(mpsync::reclaim::Leak::new()), spec),
        Impl::Spin => test_loop(
            &LockedHashMap::<u64, u64, TasB>::with_buckets(spec.buckets)?,
            spec,
        ),
        Impl::BucketNp => test_loop(
            &LockedHashMap::<u64, u64, TasBNp>::with_buckets(spec.buckets)?,
            spec,
        ),
        Impl::Default => test_loop(&mpsync::HashMap::<u64, u64>::with_capacity(cap), spec),
        Impl::Papaya => test_loop(&Papaya(papaya::HashMap::with_capacity(cap)), spec),
        Impl::DashMap => test_loop(&Dash(dashmap::DashMap::with_capacity(cap)), spec),
        Impl::Scc => test_loop(&Scc(scc::HashMap::with_capacity(cap)), spec),
        Impl::RwLockStd => test_loop(&RwStd(RwLock::new(HashMap::with_capacity(cap))), spec),
        Impl::MutexStd => test_loop(&MutexStd(Mutex::new(HashMap::with_capacity(cap))), spec),
    })
}

/// A point of an experiment: x, threads, load factor and update fraction.
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct Pt {
    x: f64,
    threads: u32,
    load: u64,
    update: f64,
}

/// A configuration (a panel of the figure) and its points.
#[derive(Debug, Clone, serde::Serialize)]
struct Config {
    label: &'static str,
    points: Vec<Pt>,
}

impl Config {
    fn new(label: &'static str, points: Vec<Pt>) -> Self {
        Self { label, points }
    }
}

struct Setup {
    configs: Vec<Config>,
    impls: Vec<Impl>,
    /// Every point is normalized to it.
    baseline: Impl,
    x_label: &'static str,
    conclusion: &'static str,
    buckets: usize,
    latency: bool,
}

impl Setup {
    fn new(
        configs: Vec<Config>,
        impls: Vec<Impl>,
        baseline: Impl,
        x_label: &'static str,
        conclusion: &'static str,
    ) -> Self {
        Self {
            configs,
            impls,
            baseline,
            x_label,
            conclusion,
            buckets: BUCKETS,
            latency: false,
        }
    }
}

/// `--threads`, or the default for `--quick` or a full run.
fn threads_of(p: &Params, quick: &[u32], full: &[u32]) -> Vec<u32> {
    p.threads.clone().unwrap_or_else(|| {
        if p.quick {
            quick.to_vec()
        } else {
            full.to_vec()
        }
    })
}

/// Points with the thread count as x.
fn by_threads(ts: &[u32], load: u64, update: f64) -> Vec<Pt> {
    ts.iter()
        .map(|&t| Pt {
            x: f64::from(t),
            threads: t,
            load,
            update,
        })
        .collect()
}

/// Points with the load factor as x.
fn by_load(loads: &[u64], threads: u32, update: f64) -> Vec<Pt> {
    loads
        .iter()
        .map(|&l| Pt {
            x: l as f64,
            threads,
            load: l,
            update,
        })
        .collect()
}

/// A read-only and a write-only configuration, the load factor varying.
fn ro_wo(loads: &[u64], threads: u32) -> Vec<Config> {
    vec![
        Config::new("read-only", by_load(loads, threads, 0.0)),
        Config::new("write-only", by_load(loads, threads, 1.0)),
    ]
}

fn setup(id: &str, p: &Params) -> anyhow::Result<Setup> {
    use Scheme::{Ebr as E, Hp as H, Qsbr as Q};
    let lf3 = vec![Impl::Lf(Q), Impl::Lf(E), Impl::Lf(H)];
    let ts = threads_of(p, &[1, 2, 4], &[1, 2, 4, 8, 16]);
    Ok(match id {
        "hart-base-hash" => {
            let pt = |u: f64| Pt {
                x: u,
                threads: 1,
                load: 1,
                update: u,
            };
            Setup::new(
                vec![Config::new("", vec![pt(0.0), pt(1.0)])],
                [lf3, vec![Impl::Cr(Q), Impl::Cr(E), Impl::Cr(H)]].concat(),
                Impl::Lf(H),
                "update fraction (0 = read-only, 1 = write-only)",
                "QSBR is the cheapest scheme, and the schemes' costs are ordered by the fences each operation needs (QSBR < EBR < HP), read-only and write-only, for the LF and the CR table",
            )
        }
        "hart-readonly-threads" => Setup::new(
            vec![Config::new("", by_threads(&ts, 1, 0.0))],
            [vec![Impl::Spin], lf3].concat(),
            Impl::Lf(H),
            "threads",
            "the spinlock table scales worst; the three schemes scale alike",
        ),
        "hart-loadfactor" => Setup::new(
            ro_wo(if p.quick { &[1, 10] } else { &[1, 5, 10, 20] }, 1),
            // Fig. 5.4–5.6 also draw the concurrently-readable and the
            // per-bucket lock tables.
            [lf3, vec![Impl::Cr(Q), Impl::Cr(E), Impl::Cr(H), Impl::Spin]].concat(),
            Impl::Lf(H),
            "load factor",
            "hazard pointers' cost grows with the traversal length (load factor); QSBR's and EBR's stay flat",
        ),
        "hart-hash-threads" => Setup::new(
            vec![Config::new("", by_threads(&ts, 1, 1.0))],
            lf3,
            Impl::Lf(H),
            "threads",
            "write-only hash table: with CPU contention QSBR and EBR degrade (milder than the queues); hazard pointers do not",
        ),
        "hart-update-fraction" => update_setup(p),
        "hart-fastread" => Setup::new(
            ro_wo(if p.quick { &[1, 20] } else { &[1, 5, 10, 20] }, 2),
            vec![
                Impl::Lf(Q),
                Impl::Fast(Q),
                Impl::Lf(E),
                Impl::Fast(E),
                Impl::Cr(Q),
            ],
            Impl::Lf(Q),
            "load factor",
            "fast reads keep LF competitive with CR at high load factors",
        ),
        "hart-severity" => severity_setup(p),
        "map-oversub" => map_setup(p),
        other => anyhow::bail!("{other} is not a hash-table experiment"),
    })
}

fn update_setup(p: &Params) -> Setup {
    let fr: &[f64] = if p.quick {
        &[0.0, 0.05, 0.5, 1.0]
    } else {
        &[0.0, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0]
    };
    let points = fr
        .iter()
        .map(|&u| Pt {
            x: u,
            threads: 2,
            load: 5,
            update: u,
        })
        .collect();
    use Scheme::{Ebr as E, Hp as H, Qsbr as Q};
    Setup::new(
        vec![Config::new("", points)],
        // Fig. 5.14–5.15: the LF and CR tables over all three schemes.
        vec![
            Impl::Lf(Q),
            Impl::Lf(E),
            Impl::Lf(H),
            Impl::Fast(Q),
            Impl::Cr(Q),
            Impl::Cr(E),
            Impl::Cr(H),
            Impl::Spin,
        ],
        Impl::Lf(Q),
        "update fraction",
        "LF+QSBR beats CR above an update fraction of about 0.1 and beats the per-bucket lock table everywhere",
    )
}

/// Fig. 5.10: 16 threads (8 per CPU on Hart's 2), load factor varies;
/// Fig. 5.11-5.12: load factor 10 and 20, threads vary. Write-only.
fn severity_setup(p: &Params) -> Setup {
    use Scheme::{Ebr as E, Hp as H, Qsbr as Q};
    let (many, loads, ts): (u32, &[u64], Vec<u32>) = if p.quick {
        (8, &[1, 20], threads_of(p, &[2, 8], &[]))
    } else {
        (
            16,
            &[1, 5, 10, 20, 50],
            threads_of(p, &[], &[1, 2, 4, 8, 16, 32]),
        )
    };
    Setup::new(
        vec![
            Config::new(SEV_LOAD, by_load(loads, many, 1.0)),
            Config::new(SEV_T10, by_threads(&ts, 10, 1.0)),
            Config::new(SEV_T20, by_threads(&ts, 20, 1.0)),
        ],
        vec![Impl::Lf(Q), Impl::Lf(E), Impl::Lf(H)],
        Impl::Lf(H),
        "load factor (vary-load panel) or threads (load factor 10 / 20 panels)",
        "a moderate load factor makes hazard pointers slower than QSBR/EBR, while only heavy CPU contention with a write-only load makes QSBR/EBR slower than hazard pointers (crossover points)",
    )
}

fn map_setup(p: &Params) -> Setup {
    use Scheme::{Ebr as E, Hp as H, Qsbr as Q};
    let c = p.cores.max(1);
    let ts = threads_of(p, &[c, 2 * c, 4 * c], &[c, 2 * c, 4 * c]);
    let mut st = Setup::new(
        vec![Config::new("2% updates", by_threads(&ts, 1, 0.02))],
        vec![
            Impl::Lf(Q),
            Impl::Lf(E),
            Impl::Lf(H),
            Impl::Fast(Q),
            Impl::Fast(E),
            Impl::Cr(Q),
            Impl::Cr(E),
            Impl::BucketNp,
            Impl::Default,
            Impl::Papaya,
            Impl::DashMap,
            Impl::Scc,
            Impl::RwLockStd,
            Impl::MutexStd,
        ],
        Impl::Papaya,
        "threads (unpinned)",
        "read-heavy (98% gets): at 2x and 4x the cores the best mpsync table >= 1.0x papaya's and >= 1.5x dashmap's throughput, at 1x >= 0.8x papaya's; p99.9 get latency at 4x the cores <= 0.5x dashmap's",
    );
    // Load factor 1 over 2^16 keys: a table the size of a real cache.
    st.buckets = 1 << 16;
    st.latency = true;
    st
}

/// The design: a panel per configuration; mpsync's tables are maps of ours,
/// the crates' maps peers.
fn design(st: &Setup, trials: u32) -> Design {
    let imps = st
        .impls
        .iter()
        .map(|i| {
            if i.is_mpsync() {
                Imp::ours(i.name(), "map")
            } else {
                Imp::peer(i.name(), "map")
            }
        })
        .collect();
    let mut d = Design::single(
        st.x_label,
        "ns per operation, all threads",
        Better::Lower,
        Vec::new(),
        imps,
        trials,
    )
    .baseline(st.baseline.name());
    d.panels = st
        .configs
        .iter()
        .map(|c| Panel::new(c.label, c.points.iter().map(|q| q.x).collect()))
        .collect();
    d
}

/// p99.9 get latency per (implementation, x), ns.
type Tails = Vec<(String, f64, f64)>;

/// Runs one of the experiments above.
pub fn run(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    if exp.id == "hart-memory-hash" {
        return run_memory(exp, p, preempt);
    }
    let st = setup(exp.id, p)?;
    let duration = Duration::from_secs_f64((BASE_DURATION_MS * p.scale).max(20.0) / 1e3);
    if p.alloc == AllocMode::Magazines {
        let most = st
            .configs
            .iter()
            .flat_map(|c| &c.points)
            .map(|q| q.load)
            .max();
        MagazineAlloc::preallocate(most.unwrap_or(1) as usize * st.buckets * 4 + 10_000);
    }
    let d = design(&st, p.trials);
    let started = Instant::now();
    // Timed gets per (implementation, x), over all trials.
    let mut lat: HashMap<(String, u64), Vec<u64>> = HashMap::new();
    let trials = model::collect(exp.id, &d, &mut |c| {
        let Some(imp) = st.impls.iter().copied().find(|i| i.name() == c.imp.name) else {
            return Ok(None);
        };
        let Some(pt) = st.configs[c.panel].points.iter().find(|q| q.x == c.x) else {
            return Ok(None);
        };
        let spec = LoopSpec {
            threads: pt.threads,
            buckets: st.buckets,
            entries: pt.load * st.buckets as u64,
            update: pt.update,
            duration,
            seed: p.seed ^ u64::from(c.trial),
            latency: st.latency,
            alloc: p.alloc,
        };
        let out = trial(imp, spec)?;
        if st.latency {
            let key = (c.imp.name.clone(), c.x.to_bits());
            lat.entry(key).or_default().extend(out.get_ns);
        }
        Ok(Some(Trial {
            value: duration.as_nanos() as f64 / out.ops.max(1) as f64,
            procs: Some(pt.threads),
            ..Trial::default()
        }))
    })?;
    let tails = p999(lat);
    let points = model::summarize(&d, &trials);
    let r = Results {
        design: &d,
        points: &points,
        trials: &trials,
    };
    let mut v = verdicts(exp.id, &st, &r, p.cores, tails.clone());
    v.notes.push(format!(
        "allocator of the LF and CR tables: {}; {} ms trials, a quiescent state every {OPS_PER_LOOP} operations",
        alloc_name(p.alloc),
        duration.as_millis()
    ));
    let params = params_of(&st, duration, p.alloc);
    let (mut rec, svg) = model::finish(exp, p, preempt, &d, trials, v, params, started);
    if st.latency {
        rec.extra = serde_json::json!({
            "get_p999_ns": tails
                .iter()
                .map(|(n, x, q)| serde_json::json!({"implementation": n, "x": x, "p999_ns": q}))
                .collect::<Vec<_>>(),
        });
    }
    Ok((rec, svg))
}

/// The p99.9 of each (implementation, x)'s timed gets.
fn p999(lat: HashMap<(String, u64), Vec<u64>>) -> Tails {
    lat.into_iter()
        .filter_map(|((n, x), mut v)| {
            v.sort_unstable();
            Some((n, f64::from_bits(x), quantile(&v, 0.999)? as f64))
        })
        .collect()
}

/// The run's parameters, as `run.json` records them.
fn params_of(st: &Setup, duration: Duration, alloc: AllocMode) -> serde_json::Value {
    serde_json::json!({
        "configurations": st.configs,
        "trial_ms": duration.as_secs_f64() * 1e3,
        "ops_per_quiescent_state": OPS_PER_LOOP,
        "buckets": st.buckets,
        "hazard_pointers_per_thread": 2,
        "allocator": alloc_name(alloc),
        "get_latency_sampled_every": if st.latency { LATENCY_EVERY } else { 0 },
    })
}

// ---- verdicts, clause by clause ---------------------------------------------------

fn lf_name(s: Scheme) -> String {
    Impl::Lf(s).name()
}

/// `name`'s time at the last x of `panel` over its time at the first.
fn growth(r: &Results<'_>, name: &str, panel: usize) -> Option<f64> {
    let xs = &r.design.panels[panel].xs;
    let (first, last) = (*xs.first()?, *xs.last()?);
    (last > first).then_some(())?;
    Some(r.value(name, panel, last)? / r.value(name, panel, first)?)
}

/// The verdicts of experiment `id`: its clauses, the notes that need the
/// results, and the advice.
fn verdicts(id: &str, st: &Setup, r: &Results<'_>, cores: u32, tails: Tails) -> Verdicts {
    let mut v = Verdicts {
        conclusion: st.conclusion.into(),
        ..Verdicts::default()
    };
    match id {
        "hart-base-hash" => v.clauses = base_clauses(),
        "hart-readonly-threads" => v.clauses = readonly_clauses(),
        "hart-loadfactor" => {
            v.clauses = loadfactor_clauses();
            v.notes.push("\"flat\" is read as: grows less than HP's (every search walks load-factor/2 nodes whatever the scheme)".into());
        }
        "hart-hash-threads" => {
            v.clauses = threads_clauses(cores);
            v.notes.push(format!(
                "rule: \"degrades\" = at least {COLLAPSE}x the time per operation at the core count"
            ));
        }
        "hart-update-fraction" => v.clauses = update_clauses(),
        "hart-fastread" => {
            v.clauses = fastread_clauses();
            v.notes.extend(fastread_notes(r));
        }
        "hart-severity" => {
            v.clauses = severity_clauses();
            v.targets = true;
            v.notes.push("a measurement: Hart's crossovers come from his 2-CPU machine and are machine-dependent, so the clauses set ours beside his and the verdict is not judged on them".into());
        }
        "map-oversub" => {
            v.clauses = map_clauses(cores, tails);
            v.targets = true;
            v.advice.push(AdviceRule {
                kind: "map",
                panel: 0,
            });
        }
        _ => {}
    }
    v
}

/// Fig. 5.2: QSBR ≤ EBR ≤ HP per table and workload; the CR table's
/// write-only updates hold the bucket lock and need no hazard pointers, so HP
/// costs there what QSBR does (the paper's exception).
fn base_clauses() -> Vec<Clause> {
    let mut v = Vec::new();
    for table in ["LF", "CR"] {
        for (x, what) in [(0.0, "read-only"), (1.0, "write-only")] {
            let exception = table == "CR" && x == 1.0;
            let (statement, paper) = if exception {
                (
                    format!(
                        "{table} {what}: QSBR ≤ EBR, and HP costs no more than QSBR (within {AMONG_THE_BEST}×)"
                    ),
                    "QSBR < EBR; SMR's overhead negligible, no hazard pointers needed (Fig. 5.2)",
                )
            } else {
                (
                    format!(
                        "{table} {what}: the schemes' costs are ordered QSBR ≤ EBR ≤ HP (within {AMONG_THE_BEST}×)"
                    ),
                    "QSBR < EBR < HP (Fig. 5.2)",
                )
            };
            v.push(Clause::new(statement, Some(paper), move |r| {
                let at = format!("{what}, 1 thread, load factor 1");
                let n = |s: &str| format!("hash {table} {s}");
                let (Some(q), Some(e), Some(h)) = (
                    r.value(&n("QSBR"), 0, x),
                    r.value(&n("EBR"), 0, x),
                    r.value(&n("HP"), 0, x),
                ) else {
                    return unmeasured(at);
                };
                let ok = q <= e * AMONG_THE_BEST
                    && if exception {
                        h <= q * AMONG_THE_BEST
                    } else {
                        e <= h * AMONG_THE_BEST
                    };
                Judged {
                    at,
                    ours: format!("QSBR {} ns, EBR {} ns, HP {} ns", sig3(q), sig3(e), sig3(h)),
                    holds: Some(ok),
                }
            }));
        }
    }
    v
}

/// Fig. 5.3: the spinlock table scales worst; the schemes alike.
fn readonly_clauses() -> Vec<Clause> {
    let schemes = [Scheme::Qsbr, Scheme::Ebr, Scheme::Hp];
    let span = |r: &Results<'_>| {
        let xs = &r.design.panels[0].xs;
        format!(
            "{} threads against {}",
            xs.last().map_or("–".into(), |x| fmt_x(*x)),
            xs.first().map_or("–".into(), |x| fmt_x(*x))
        )
    };
    let worst = Clause::new(
        "the spinlock table scales worst (its time per operation grows most with the threads)",
        Some("spinlocks scale poorly (Fig. 5.3)"),
        move |r| {
            let gs: Vec<f64> = schemes
                .iter()
                .filter_map(|&s| growth(r, &lf_name(s), 0))
                .collect();
            match (
                growth(r, &Impl::Spin.name(), 0),
                gs.iter().copied().reduce(f64::max),
            ) {
                (Some(sg), Some(w)) => Judged {
                    at: span(r),
                    ours: format!("growth: spinlock {}, worst LF {}", sig3(sg), sig3(w)),
                    holds: Some(sg >= w),
                },
                _ => unmeasured(span(r)),
            }
        },
    );
    let alike = Clause::new(
        format!("the three schemes scale alike (their growths within {COLLAPSE}×)"),
        Some("all schemes scale equally well (Fig. 5.3)"),
        move |r| {
            let gs: Vec<f64> = schemes
                .iter()
                .filter_map(|&s| growth(r, &lf_name(s), 0))
                .collect();
            if gs.len() < 3 {
                return unmeasured(span(r));
            }
            let (lo, hi) = (
                gs.iter().copied().fold(f64::MAX, f64::min),
                gs.iter().copied().fold(f64::MIN, f64::max),
            );
            Judged {
                at: span(r),
                ours: format!(
                    "growth: QSBR {}, EBR {}, HP {}: spread {}",
                    sig3(gs[0]),
                    sig3(gs[1]),
                    sig3(gs[2]),
                    sig3(hi / lo)
                ),
                holds: Some(hi / lo <= COLLAPSE),
            }
        },
    );
    vec![worst, alike]
}

/// Fig. 5.4–5.5: HP's time grows most with the load factor.
fn loadfactor_clauses() -> Vec<Clause> {
    [(0, "read-only", "Fig. 5.4"), (1, "write-only", "Fig. 5.5")]
        .into_iter()
        .map(|(panel, what, fig)| {
            Clause::new(
                format!("{what}: HP's time per operation grows most with the load factor"),
                Some(&format!(
                    "SMR's per-node fences ruin it; QSBR and EBR scale well ({fig})"
                )),
                move |r| {
                    let xs = &r.design.panels[panel].xs;
                    let at = format!(
                        "load factor {} against {}, {what}",
                        xs.last().map_or("–".into(), |x| fmt_x(*x)),
                        xs.first().map_or("–".into(), |x| fmt_x(*x))
                    );
                    let g = |s: Scheme| growth(r, &lf_name(s), panel);
                    match (g(Scheme::Qsbr), g(Scheme::Ebr), g(Scheme::Hp)) {
                        (Some(q), Some(e), Some(h)) => Judged {
                            at,
                            ours: format!(
                                "growth: QSBR {}, EBR {}, HP {}",
                                sig3(q),
                                sig3(e),
                                sig3(h)
                            ),
                            holds: Some(h > q && h > e),
                        },
                        _ => unmeasured(at),
                    }
                },
            )
        })
        .collect()
}

/// Fig. 5.8: QSBR and EBR degrade beyond the cores, HP does not.
fn threads_clauses(cores: u32) -> Vec<Clause> {
    [Scheme::Qsbr, Scheme::Ebr, Scheme::Hp]
        .into_iter()
        .map(|s| {
            let degrades = s != Scheme::Hp;
            let says = if degrades { "degrades" } else { "does not degrade" };
            Clause::new(
                format!("{} {says} beyond the cores (degrades: ≥ {COLLAPSE}× the time per operation at the core count)", s.name()),
                Some(&format!("{says} (Fig. 5.8; milder than the queues')")),
                degrades_beyond_cores(lf_name(s), cores, degrades),
            )
        })
        .collect()
}

/// "`a` takes no longer than `b`" at every x of panel 0 above `above`.
fn faster_above(statement: String, paper: &str, a: String, b: String, above: f64) -> Clause {
    Clause::new(statement, Some(paper), move |r| {
        let at = if above == f64::NEG_INFINITY {
            "every update fraction".to_string()
        } else {
            format!("every update fraction above {above}")
        };
        let got: Vec<(f64, f64)> = r.design.panels[0]
            .xs
            .iter()
            .filter(|&&x| x > above)
            .filter_map(|&x| Some((x, r.value(&a, 0, x)? / r.value(&b, 0, x)?)))
            .collect();
        if got.is_empty() {
            return unmeasured(at);
        }
        let each: Vec<String> = got
            .iter()
            .map(|(x, q)| format!("{x}: {}", sig3(*q)))
            .collect();
        Judged {
            at,
            ours: format!("{a} / {b} (time): {}", each.join(", ")),
            holds: Some(got.iter().all(|(_, q)| *q <= 1.0)),
        }
    })
}

/// Fig. 5.14–5.15, §5.2.5: LF+QSBR beats the lock table everywhere and CR
/// above an update fraction of 0.1.
fn update_clauses() -> Vec<Clause> {
    let (l, c, s) = (
        lf_name(Scheme::Qsbr),
        Impl::Cr(Scheme::Qsbr).name(),
        Impl::Spin.name(),
    );
    vec![
        faster_above(
            "LF QSBR beats the per-bucket lock table (time ≤ 1×)".into(),
            "LF outperforms per-bucket spinlocking for any update fraction (§5.2.5)",
            l.clone(),
            s,
            f64::NEG_INFINITY,
        ),
        faster_above(
            "LF QSBR beats CR QSBR (time ≤ 1×)".into(),
            "LF+QSBR beats CR above 0.1 (Fig. 5.15)",
            l,
            c,
            0.1,
        ),
    ]
}

/// Fig. 5.18–5.19: the fast-read LF stays competitive with CR.
fn fastread_clauses() -> Vec<Clause> {
    let (f, c) = (
        Impl::Fast(Scheme::Qsbr).name(),
        Impl::Cr(Scheme::Qsbr).name(),
    );
    [(0, "read-only", "Fig. 5.18"), (1, "write-only", "Fig. 5.19")]
        .into_iter()
        .map(|(panel, what, fig)| {
            Clause::ratio_at_most(
                format!("{what}: LF-fast QSBR is competitive with CR QSBR at the highest load factor (time within {AMONG_THE_BEST}×)"),
                Some(&format!("the fast-read LF remains competitive with CR even at very high load factors ({fig})")),
                &f,
                &c,
                panel,
                AMONG_THE_BEST,
            )
        })
        .collect()
}

/// What the fast reads buy over the plain ones, read-only (write-only runs
/// no gets: the two LF tables' updates are the same code).
fn fastread_notes(r: &Results<'_>) -> Vec<String> {
    let x = r.last_x(0);
    [Scheme::Qsbr, Scheme::Ebr]
        .iter()
        .filter_map(|&s| {
            let q = r.value(&Impl::Fast(s).name(), 0, x)? / r.value(&lf_name(s), 0, x)?;
            Some(format!(
                "{} read-only: at load factor {}, fast-read / plain time = {} ({})",
                s.name(),
                fmt_x(x),
                sig3(q),
                if q <= 1.0 {
                    "fast reads are faster"
                } else {
                    "fast reads are not faster"
                }
            ))
        })
        .collect()
}

/// "`a` is faster than `b` exactly where x > `above`" (never, for `None`),
/// at every x of `panel`: one of Hart's crossovers.
fn crossover(panel: usize, (a, b): (Scheme, Scheme), above: Option<f64>, paper: &str) -> Clause {
    let (na, nb) = (a.name(), b.name());
    let axis = if panel == 0 {
        "the load factor"
    } else {
        "the threads"
    };
    let statement = match above {
        Some(t) => format!(
            "{na} is faster than {nb} exactly where {axis} > {}",
            fmt_x(t)
        ),
        None => format!("{na} is never faster than {nb}"),
    };
    Clause::new(statement, Some(paper), move |r| {
        let at = format!("every point, {}", r.design.panels[panel].label);
        let got: Vec<(f64, bool)> = r.design.panels[panel]
            .xs
            .iter()
            .filter_map(|&x| {
                Some((
                    x,
                    r.value(&lf_name(a), panel, x)? < r.value(&lf_name(b), panel, x)?,
                ))
            })
            .collect();
        if got.is_empty() {
            return unmeasured(at);
        }
        let faster: Vec<String> = got.iter().filter(|g| g.1).map(|g| fmt_x(g.0)).collect();
        Judged {
            at,
            ours: match faster.is_empty() {
                true => format!("{na} faster than {nb} nowhere"),
                false => format!("{na} faster than {nb} at {}", faster.join(", ")),
            },
            holds: Some(got.iter().all(|&(x, f)| f == above.is_some_and(|t| x > t))),
        }
    })
}

/// Fig. 5.10–5.12: where hazard pointers and QSBR/EBR cross over.
fn severity_clauses() -> Vec<Clause> {
    use Scheme::{Ebr as E, Hp as H, Qsbr as Q};
    vec![
        crossover(
            0,
            (Q, H),
            Some(10.0),
            "QSBR beats SMR when the load factor exceeds 10, at 16 threads (Fig. 5.10)",
        ),
        crossover(
            0,
            (E, H),
            Some(50.0),
            "EBR beats SMR when the load factor exceeds 50, at 16 threads (Fig. 5.10)",
        ),
        crossover(
            1,
            (H, E),
            Some(4.0),
            "SMR beats EBR with more than 4 threads (Fig. 5.11)",
        ),
        crossover(
            1,
            (H, Q),
            Some(20.0),
            "SMR beats QSBR with more than 20 threads; competitive at 10–20 (Fig. 5.11)",
        ),
        crossover(
            2,
            (H, E),
            Some(10.0),
            "SMR beats EBR with more than 10 threads (Fig. 5.12)",
        ),
        crossover(
            2,
            (H, Q),
            None,
            "SMR beats QSBR at no thread count tested (Fig. 5.12)",
        ),
    ]
}

/// mpsync's targets for its maps against papaya and dashmap.
fn map_clauses(cores: u32, tails: Tails) -> Vec<Clause> {
    let c = f64::from(cores.max(1));
    let mut v = Vec::new();
    for (mult, peer, min) in [
        (1.0, "papaya", 0.8),
        (2.0, "papaya", 1.0),
        (2.0, "dashmap", 1.5),
        (4.0, "papaya", 1.0),
        (4.0, "dashmap", 1.5),
    ] {
        v.push(Clause::best_ours_at_least(
            format!(
                "target: the best mpsync table ≥ {min}× {peer}'s throughput at {mult}× the cores"
            ),
            None,
            "map",
            peer,
            0,
            c * mult,
            min,
        ));
    }
    v.push(Clause::new(
        "target: the best mpsync table's p99.9 get latency ≤ 0.5× dashmap's at 4× the cores",
        None,
        move |r| {
            let x = c * 4.0;
            let tail = |n: &str| tails.iter().find(|t| t.0 == n && t.1 == x).map(|t| t.2);
            let best = r
                .design
                .imps
                .iter()
                .filter(|i| i.role == Role::Ours)
                .filter_map(|i| Some((i.name.as_str(), tail(&i.name)?)))
                .min_by(|a, b| a.1.total_cmp(&b.1));
            let at = r.at(0, x);
            match (best, tail("dashmap")) {
                (Some((n, t)), Some(d)) => Judged {
                    at,
                    ours: format!(
                        "{n} {} ns, dashmap {} ns: {}×",
                        sig3(t),
                        sig3(d),
                        sig3(t / d)
                    ),
                    holds: Some(t <= 0.5 * d),
                },
                _ => unmeasured(at),
            }
        },
    ));
    v
}

// ---- hart-memory-hash ------------------------------------------------------------

/// `hart-memory-hash`'s load: a write-only load on a lock-free table of 32
/// buckets at load factor 1 (keys from twice that range).
struct TableLoad;

impl StalledLoad for TableLoad {
    fn run<R: Reclaimer, A: NodeAlloc>(&self, s: Stalled<'_, R>) -> anyhow::Result<Pending> {
        let m: LfHashMap<u64, u64, R, A> =
            LfHashMap::with_domain(BUCKETS, s.domain.clone(), Default::default())?;
        let range = 2 * BUCKETS as u64;
        {
            let mut h = m.handle();
            for k in (0..range).step_by(2) {
                let _ = h.insert(k, k);
            }
        }
        let work = |t: u32, stop: &AtomicBool| {
            let mut h = m.handle();
            let mut rng = SplitMix64::stream(s.spec.seed, u64::from(t));
            // Relaxed: a stop request.
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..OPS_PER_LOOP {
                    let r = rng.next_u64();
                    let k = (r >> 1) % range;
                    if r & 1 == 0 {
                        let _ = h.insert(k, k);
                    } else {
                        std::hint::black_box(h.remove(&k));
                    }
                }
                h.quiescent();
            }
        };
        Ok(stalled_run(m.domain(), s.spec, s.bound, &work))
    }
}

/// `hart-memory-hash`: `hart-memory`'s stalled-thread run (one thread
/// inside an operation for the whole run) over the lock-free table.
fn run_memory(
    exp: &Experiment,
    p: &Params,
    preempt: Preempt,
) -> anyhow::Result<(RunRecord, String)> {
    let params = serde_json::json!({
        "buckets": BUCKETS,
        "load_factor": 1,
        "workload": "write-only",
    });
    let notes = vec![
        "the peers (papaya, dashmap, scc) do not report unreclaimed memory, so their growth is not shown".into(),
    ];
    run_stalled(exp, p, preempt, &TableLoad, params, notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{Point, Status, Verdict};

    fn params() -> Params {
        Params {
            preempt: None,
            mp: None,
            procs: None,
            threads: None,
            quantum_ms: None,
            trials: 1,
            scale: 1.0,
            seed: 1,
            out: std::path::PathBuf::new(),
            quick: true,
            cores: 2,
            alloc: AllocMode::Magazines,
            match_contention: false,
        }
    }

    /// The verdict of `id` (`--quick`, 2 cores) on synthetic points
    /// (panel, implementation, x, ns per operation), and with `tails`.
    fn verdict_with(id: &str, pts: &[(usize, String, f64, f64)], tails: Tails) -> Verdict {
        let st = setup(id, &params()).unwrap();
        let d = design(&st, 1);
        let points: Vec<Point> = pts
            .iter()
            .map(|(pi, n, x, v)| Point {
                panel: (d.panels.len() > 1).then(|| d.panels[*pi].label.clone()),
                implementation: n.clone(),
                x: *x,
                value: *v,
                normalized: *v,
            })
            .collect();
        let r = Results {
            design: &d,
            points: &points,
            trials: &[],
        };
        let v = verdicts(id, &st, &r, 2, tails);
        let status = |c: Vec<_>| Verdict::from_clauses("c", c, vec![]);
        status(v.clauses.iter().map(|c| c.judge(&r)).collect())
    }

    fn verdict(id: &str, pts: &[(usize, String, f64, f64)]) -> Verdict {
        verdict_with(id, pts, Vec::new())
    }

    fn pt(panel: usize, imp: Impl, x: f64, v: f64) -> (usize, String, f64, f64) {
        (panel, imp.name(), x, v)
    }

    use Scheme::{Ebr as E, Hp as H, Qsbr as Q};

    #[test]
    fn base_hash_orders_the_schemes_with_the_cr_write_only_exception() {
        let mut pts = Vec::new();
        for x in [0.0, 1.0] {
            pts.extend([
                pt(0, Impl::Lf(Q), x, 10.0),
                pt(0, Impl::Lf(E), x, 12.0),
                pt(0, Impl::Lf(H), x, 15.0),
            ]);
            pts.extend([pt(0, Impl::Cr(Q), x, 10.0), pt(0, Impl::Cr(E), x, 12.0)]);
        }
        pts.push(pt(0, Impl::Cr(H), 0.0, 15.0));
        pts.push(pt(0, Impl::Cr(H), 1.0, 10.5));
        let v = verdict("hart-base-hash", &pts);
        assert_eq!(v.status, Status::Holds, "{v:?}");
        assert_eq!(v.summary(), "4 of 4 clauses hold");
        // QSBR dearer than EBR on the LF table, read-only: that clause fails.
        pts[0].3 = 20.0;
        let v = verdict("hart-base-hash", &pts);
        assert_eq!(v.clauses[0].holds, Some(false), "{v:?}");
        assert_eq!(v.summary(), "3 of 4 clauses hold");
    }

    #[test]
    fn readonly_threads_want_the_spinlock_worst_and_the_schemes_alike() {
        let mut pts = vec![pt(0, Impl::Spin, 1.0, 10.0), pt(0, Impl::Spin, 4.0, 40.0)];
        for s in [Q, E, H] {
            pts.extend([pt(0, Impl::Lf(s), 1.0, 10.0), pt(0, Impl::Lf(s), 4.0, 11.0)]);
        }
        assert_eq!(verdict("hart-readonly-threads", &pts).status, Status::Holds);
        // HP grows 3x, QSBR 1.1x: not alike; and HP grows most but < spin.
        pts[7].3 = 30.0;
        let v = verdict("hart-readonly-threads", &pts);
        assert_eq!(v.clauses[1].holds, Some(false), "{v:?}");
        pts[1].3 = 12.0;
        let v = verdict("hart-readonly-threads", &pts);
        assert_eq!(v.clauses[0].holds, Some(false), "{v:?}");
    }

    #[test]
    fn loadfactor_wants_hp_to_grow_most_per_workload() {
        let mut pts = Vec::new();
        for panel in [0, 1] {
            for (s, g) in [(Q, 2.0), (E, 2.5), (H, 6.0)] {
                pts.extend([
                    pt(panel, Impl::Lf(s), 1.0, 10.0),
                    pt(panel, Impl::Lf(s), 10.0, 10.0 * g),
                ]);
            }
        }
        assert_eq!(verdict("hart-loadfactor", &pts).status, Status::Holds);
        // Write-only: QSBR grows more than HP.
        pts[7].3 = 100.0;
        let v = verdict("hart-loadfactor", &pts);
        assert_eq!(
            (v.clauses[0].holds, v.clauses[1].holds),
            (Some(true), Some(false))
        );
    }

    #[test]
    fn hash_threads_want_qsbr_and_ebr_to_degrade_and_hp_not() {
        let mut pts = Vec::new();
        for (s, top) in [(Q, 30.0), (E, 25.0), (H, 12.0)] {
            pts.extend([pt(0, Impl::Lf(s), 2.0, 10.0), pt(0, Impl::Lf(s), 4.0, top)]);
        }
        let v = verdict("hart-hash-threads", &pts);
        assert_eq!(v.summary(), "3 of 3 clauses hold", "{v:?}");
        pts[5].3 = 40.0;
        let v = verdict("hart-hash-threads", &pts);
        assert_eq!(v.clauses[2].holds, Some(false), "{v:?}");
        // Without a point past the cores, nothing is judged.
        let v = verdict("hart-hash-threads", &pts[..0]);
        assert_eq!(v.status, Status::PartlyEvaluable);
    }

    #[test]
    fn update_fraction_wants_lf_below_the_lock_everywhere_and_cr_above_a_tenth() {
        let mut pts = Vec::new();
        for (x, cr) in [(0.0, 9.0), (0.05, 9.5), (0.5, 20.0), (1.0, 30.0)] {
            pts.extend([
                pt(0, Impl::Lf(Q), x, 10.0),
                pt(0, Impl::Spin, x, 15.0),
                pt(0, Impl::Cr(Q), x, cr),
            ]);
        }
        // CR wins at 0 and 0.05: below 0.1, so still holds.
        assert_eq!(verdict("hart-update-fraction", &pts).status, Status::Holds);
        pts[8].3 = 9.0;
        let v = verdict("hart-update-fraction", &pts);
        assert_eq!(
            (v.clauses[0].holds, v.clauses[1].holds),
            (Some(true), Some(false))
        );
        pts[1].3 = 9.0;
        assert_eq!(
            verdict("hart-update-fraction", &pts).clauses[0].holds,
            Some(false)
        );
    }

    #[test]
    fn fastread_wants_the_fast_table_within_a_tenth_of_cr() {
        let mut pts = Vec::new();
        for panel in [0, 1] {
            pts.extend([
                pt(panel, Impl::Fast(Q), 20.0, 10.5),
                pt(panel, Impl::Cr(Q), 20.0, 10.0),
            ]);
        }
        assert_eq!(verdict("hart-fastread", &pts).status, Status::Holds);
        pts[2].3 = 12.0;
        let v = verdict("hart-fastread", &pts);
        assert_eq!(
            (v.clauses[0].holds, v.clauses[1].holds),
            (Some(true), Some(false))
        );
    }

    #[test]
    fn severity_compares_each_crossover_with_harts() {
        let mut pts = Vec::new();
        // Vary load (x 1, 20): QSBR beats HP at 20 only; EBR never (Hart: above 50).
        for (x, q, e, h) in [(1.0, 12.0, 13.0, 10.0), (20.0, 20.0, 40.0, 30.0)] {
            pts.extend([
                pt(0, Impl::Lf(Q), x, q),
                pt(0, Impl::Lf(E), x, e),
                pt(0, Impl::Lf(H), x, h),
            ]);
        }
        // Load 10 (threads 2, 8): HP beats EBR at 8 only, never QSBR; load 20:
        // HP beats neither (Hart: EBR above 10 threads, QSBR never).
        for (panel, e8) in [(1, 9.0), (2, 6.0)] {
            for (x, q, e, h) in [(2.0, 5.0, 6.0, 7.0), (8.0, 5.0, e8, 7.0)] {
                pts.extend([
                    pt(panel, Impl::Lf(Q), x, q),
                    pt(panel, Impl::Lf(E), x, e),
                    pt(panel, Impl::Lf(H), x, h),
                ]);
            }
        }
        let v = verdict("hart-severity", &pts);
        let held: Vec<_> = v.clauses.iter().map(|c| c.holds).collect();
        assert_eq!(held, [Some(true); 6], "{v:?}");
        // HP beats QSBR at 8 threads, load factor 20: Hart says never.
        pts.last_mut().unwrap().3 = 4.0;
        let v = verdict("hart-severity", &pts);
        assert_eq!(v.clauses[5].holds, Some(false), "{v:?}");
        assert!(v.clauses[5].ours.contains("at 8"), "{}", v.clauses[5].ours);
    }

    #[test]
    fn map_oversub_targets_throughput_and_tail_latency() {
        let mut pts = Vec::new();
        for x in [2.0, 4.0, 8.0] {
            pts.extend([
                pt(0, Impl::Fast(Q), x, 10.0),
                pt(0, Impl::Lf(H), x, 30.0),
                pt(0, Impl::Papaya, x, 11.0),
                pt(0, Impl::DashMap, x, 20.0),
            ]);
        }
        let tails = |ours: f64| {
            vec![
                (Impl::Fast(Q).name(), 8.0, ours),
                ("dashmap".to_string(), 8.0, 1000.0),
            ]
        };
        let v = verdict_with("map-oversub", &pts, tails(400.0));
        assert_eq!(v.summary(), "6 of 6 clauses hold", "{v:?}");
        assert!(
            v.clauses[0]
                .ours
                .starts_with("hash LF-fast QSBR is 1.10× papaya"),
            "{}",
            v.clauses[0].ours
        );
        let v = verdict_with("map-oversub", &pts, tails(600.0));
        assert_eq!(v.clauses[5].holds, Some(false), "{v:?}");
        // dashmap only 1.4x slower at 4 threads: the 1.5x target is missed.
        pts[7].3 = 14.0;
        let v = verdict_with("map-oversub", &pts, tails(400.0));
        assert_eq!(v.clauses[2].holds, Some(false), "{v:?}");
    }

    #[test]
    fn map_oversub_advises_a_map_from_ours_and_the_peers() {
        let st = setup("map-oversub", &params()).unwrap();
        let d = design(&st, 1);
        let ours = d.imps.iter().filter(|i| i.role == Role::Ours).count();
        let peers: Vec<&str> = d
            .imps
            .iter()
            .filter(|i| i.role == Role::Peer)
            .map(|i| i.name.as_str())
            .collect();
        assert_eq!(
            ours, 9,
            "the eight explicit-handle tables and mpsync::HashMap (default)"
        );
        assert_eq!(
            peers,
            [
                "papaya",
                "dashmap",
                "scc::HashMap",
                "RwLock<HashMap>",
                "Mutex<HashMap>"
            ]
        );
        assert!(d.imps.iter().all(|i| i.kind == Some("map")));
        assert_eq!(d.panels[0].xs, [2.0, 4.0, 8.0]);
    }
}
