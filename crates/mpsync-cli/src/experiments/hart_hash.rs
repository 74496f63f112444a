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
//! - `hart-loadfactor` (§5.2.1, the lock-free table's lines of Fig. 5.4–5.5):
//!   one thread, load factor 1..20, read-only and write-only, LF × the three
//!   schemes (not the figures' lock-based table, nor Fig. 5.6's CR table).
//! - `hart-hash-threads` (§5.2.2, Fig. 5.8): write-only, threads 1..N.
//! - `hart-update-fraction` (§5.2.4–5.2.5, the QSBR lines of Fig. 5.14–5.15 and
//!   Fig. 5.17): two threads, load factor 5, update fraction 0..1, LF (plain and
//!   fast-read) vs CR, all over QSBR, vs the per-bucket lock (not the EBR and HP
//!   lines of Fig. 5.14–5.15).
//! - `hart-fastread` (§5.2.5, Fig. 5.16, 5.18–5.19): two threads, read-only, load factor
//!   1..20, read-only and write-only (Fig. 5.18–5.19), LF vs LF fast-read vs CR.
//! - `map-oversub` (mpsync's own): every mpsync table and the peers (papaya,
//!   dashmap, scc, `RwLock<HashMap>`, `Mutex<HashMap>`) on a read-heavy mix (98%
//!   gets) at 1×, 2× and 4× the cores, unpinned; throughput and the p99.9 of the
//!   `get` latency (every 8th get timed).
//!
//! - `hart-severity` (§5.2.3, Fig. 5.10–5.12): write-only; many threads with
//!   the load factor varying, and load factor 10 and 20 with the threads varying:
//!   where hazard pointers and QSBR/EBR cross over (a measurement).
//!
//! - `hart-memory-hash` (as `hart-memory`, with the lock-free table): one thread
//!   stopped inside an operation for the whole run while the others run a
//!   write-only load; unreclaimed nodes over time per scheme, HP's bound beside.
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

use super::hart::{BASE_DURATION_MS, OPS_PER_LOOP, Scheme};
use super::wks94::{AMONG_THE_BEST, COLLAPSE};
use super::{AllocMode, Experiment, Params};
use crate::env::Preempt;
use crate::output::{Machine, Point, RunRecord, Status, Trial, Verdict};
use crate::stats::{quantile, trimmed_mean};
use crate::svg::{Series, line_chart};

/// `hart-severity`'s series: many threads, load factor varies.
const SEV_LOAD: &str = " (many threads, vary load)";
/// `hart-severity`'s series: load factor 10, threads vary.
const SEV_T10: &str = " (load 10, vary threads)";
/// `hart-severity`'s series: load factor 20, threads vary.
const SEV_T20: &str = " (load 20, vary threads)";

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
            Self::Lf(_) | Self::Fast(_) | Self::Cr(_) | Self::Spin | Self::BucketNp
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
            h.insert(k, k);
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
                                h.insert(k, k);
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
        Impl::Papaya => test_loop(&Papaya(papaya::HashMap::with_capacity(cap)), spec),
        Impl::DashMap => test_loop(&Dash(dashmap::DashMap::with_capacity(cap)), spec),
        Impl::Scc => test_loop(&Scc(scc::HashMap::with_capacity(cap)), spec),
        Impl::RwLockStd => test_loop(&RwStd(RwLock::new(HashMap::with_capacity(cap))), spec),
        Impl::MutexStd => test_loop(&MutexStd(Mutex::new(HashMap::with_capacity(cap))), spec),
    })
}

/// A point of an experiment: x, threads, load factor, update fraction, and a
/// suffix for the implementation names (read-only / write-only series).
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct Pt {
    x: f64,
    threads: u32,
    load: u64,
    update: f64,
    series: &'static str,
}

struct Setup {
    points: Vec<Pt>,
    impls: Vec<Impl>,
    x_label: &'static str,
    conclusion: &'static str,
    buckets: usize,
    latency: bool,
}

fn setup(id: &str, p: &Params) -> anyhow::Result<Setup> {
    use Scheme::{Ebr as E, Hp as H, Qsbr as Q};
    let lf3 = vec![Impl::Lf(Q), Impl::Lf(E), Impl::Lf(H)];
    let threads = |quick: &[u32], full: &[u32]| -> Vec<u32> {
        p.threads.clone().unwrap_or_else(|| {
            if p.quick {
                quick.to_vec()
            } else {
                full.to_vec()
            }
        })
    };
    let ro_wo = |x: f64, threads: u32, load: u64| {
        [
            Pt {
                x,
                threads,
                load,
                update: 0.0,
                series: " read-only",
            },
            Pt {
                x,
                threads,
                load,
                update: 1.0,
                series: " write-only",
            },
        ]
    };
    let c = p.cores.max(1);
    Ok(match id {
        "hart-base-hash" => Setup {
            points: vec![
                Pt {
                    x: 0.0,
                    threads: 1,
                    load: 1,
                    update: 0.0,
                    series: "",
                },
                Pt {
                    x: 1.0,
                    threads: 1,
                    load: 1,
                    update: 1.0,
                    series: "",
                },
            ],
            impls: vec![
                Impl::Lf(Q),
                Impl::Lf(E),
                Impl::Lf(H),
                Impl::Cr(Q),
                Impl::Cr(E),
                Impl::Cr(H),
            ],
            x_label: "update fraction (0 = read-only, 1 = write-only)",
            conclusion: "QSBR is the cheapest scheme, and the schemes' costs are ordered by the fences each operation needs (QSBR < EBR < HP), read-only and write-only, for the LF and the CR table",
            buckets: BUCKETS,
            latency: false,
        },
        "hart-readonly-threads" => Setup {
            points: threads(&[1, 2, 4], &[1, 2, 4, 8, 16])
                .into_iter()
                .map(|t| Pt {
                    x: f64::from(t),
                    threads: t,
                    load: 1,
                    update: 0.0,
                    series: "",
                })
                .collect(),
            impls: [vec![Impl::Spin], lf3].concat(),
            x_label: "threads",
            conclusion: "the spinlock table scales worst; the three schemes scale alike",
            buckets: BUCKETS,
            latency: false,
        },
        "hart-loadfactor" => {
            let loads: &[u64] = if p.quick { &[1, 10] } else { &[1, 5, 10, 20] };
            Setup {
                points: loads.iter().flat_map(|&l| ro_wo(l as f64, 1, l)).collect(),
                impls: lf3,
                x_label: "load factor",
                conclusion: "hazard pointers' cost grows with the traversal length (load factor); QSBR's and EBR's stay flat",
                buckets: BUCKETS,
                latency: false,
            }
        }
        "hart-hash-threads" => Setup {
            points: threads(&[1, 2, 4], &[1, 2, 4, 8, 16])
                .into_iter()
                .map(|t| Pt {
                    x: f64::from(t),
                    threads: t,
                    load: 1,
                    update: 1.0,
                    series: "",
                })
                .collect(),
            impls: lf3,
            x_label: "threads",
            conclusion: "write-only hash table: with CPU contention QSBR and EBR degrade (milder than the queues); hazard pointers do not",
            buckets: BUCKETS,
            latency: false,
        },
        "hart-update-fraction" => {
            let fr: &[f64] = if p.quick {
                &[0.0, 0.05, 0.5, 1.0]
            } else {
                &[0.0, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0]
            };
            Setup {
                points: fr
                    .iter()
                    .map(|&u| Pt {
                        x: u,
                        threads: 2,
                        load: 5,
                        update: u,
                        series: "",
                    })
                    .collect(),
                impls: vec![Impl::Lf(Q), Impl::Fast(Q), Impl::Cr(Q), Impl::Spin],
                x_label: "update fraction",
                conclusion: "LF+QSBR beats CR above an update fraction of about 0.1 and beats the per-bucket lock table everywhere",
                buckets: BUCKETS,
                latency: false,
            }
        }
        "hart-fastread" => {
            let loads: &[u64] = if p.quick { &[1, 20] } else { &[1, 5, 10, 20] };
            Setup {
                points: loads.iter().flat_map(|&l| ro_wo(l as f64, 2, l)).collect(),
                impls: vec![
                    Impl::Lf(Q),
                    Impl::Fast(Q),
                    Impl::Lf(E),
                    Impl::Fast(E),
                    Impl::Cr(Q),
                ],
                x_label: "load factor",
                conclusion: "fast reads keep LF competitive with CR at high load factors",
                buckets: BUCKETS,
                latency: false,
            }
        }
        "hart-severity" => {
            // Fig. 5.10: 16 threads (8 per CPU on Hart's 2), load factor varies;
            // Fig. 5.11-5.12: load factor 10 and 20, threads vary. Write-only.
            let (many, loads, ts): (u32, &[u64], Vec<u32>) = if p.quick {
                (8, &[1, 20], threads(&[2, 8], &[]))
            } else {
                (16, &[1, 5, 10, 20, 50], threads(&[], &[1, 2, 4, 8, 16, 32]))
            };
            let mut points: Vec<Pt> = loads
                .iter()
                .map(|&l| Pt {
                    x: l as f64,
                    threads: many,
                    load: l,
                    update: 1.0,
                    series: SEV_LOAD,
                })
                .collect();
            for (l, series) in [(10, SEV_T10), (20, SEV_T20)] {
                points.extend(ts.iter().map(|&t| Pt {
                    x: f64::from(t),
                    threads: t,
                    load: l,
                    update: 1.0,
                    series,
                }));
            }
            Setup {
                points,
                impls: lf3,
                x_label: "load factor (vary-load series) or threads (load factor 10 / 20 series)",
                conclusion: "a moderate load factor makes hazard pointers slower than QSBR/EBR, while only heavy CPU contention with a write-only load makes QSBR/EBR slower than hazard pointers (crossover points)",
                buckets: BUCKETS,
                latency: false,
            }
        }
        "map-oversub" => {
            let ts = threads(&[c, 2 * c, 4 * c], &[c, 2 * c, 4 * c]);
            Setup {
                points: ts
                    .into_iter()
                    .map(|t| Pt {
                        x: f64::from(t),
                        threads: t,
                        load: 1,
                        update: 0.02,
                        series: "",
                    })
                    .collect(),
                impls: vec![
                    Impl::Lf(Q),
                    Impl::Lf(E),
                    Impl::Lf(H),
                    Impl::Fast(Q),
                    Impl::Fast(E),
                    Impl::Cr(Q),
                    Impl::Cr(E),
                    Impl::BucketNp,
                    Impl::Papaya,
                    Impl::DashMap,
                    Impl::Scc,
                    Impl::RwLockStd,
                    Impl::MutexStd,
                ],
                x_label: "threads (unpinned)",
                conclusion: "read-heavy (98% gets): at 2x and 4x the cores the best mpsync table >= 1.0x papaya's and >= 1.5x dashmap's throughput, at 1x >= 0.8x papaya's; p99.9 get latency at 4x the cores <= 0.5x dashmap's",
                // Load factor 1 over 2^16 keys: a table the size of a real cache.
                buckets: 1 << 16,
                latency: true,
            }
        }
        other => anyhow::bail!("{other} is not a hash-table experiment"),
    })
}

/// Runs one of the experiments above.
pub fn run(exp: &Experiment, p: &Params, _preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    if exp.id == "hart-memory-hash" {
        return run_memory(exp, p);
    }
    let st = setup(exp.id, p)?;
    let duration = Duration::from_secs_f64((BASE_DURATION_MS * p.scale).max(20.0) / 1e3);
    if p.alloc == AllocMode::Magazines {
        let most = st.points.iter().map(|q| q.load).max().unwrap_or(1) as usize;
        MagazineAlloc::preallocate(most * st.buckets * 4 + 10_000);
    }
    let pb = crate::progress(
        (st.points.len() * p.trials as usize * st.impls.len()) as u64,
        exp.id,
    );
    let started = Instant::now();
    let mut trials = Vec::new();
    // p99.9 get latency per (implementation, x), over all trials' samples.
    let mut tails: Vec<(String, f64, f64)> = Vec::new();
    for pt in &st.points {
        let mut lat: HashMap<String, Vec<u64>> = HashMap::new();
        for t in 0..p.trials {
            for k in 0..st.impls.len() {
                // Interleaved, rotating the order each trial.
                let imp = st.impls[(k + t as usize) % st.impls.len()];
                let spec = LoopSpec {
                    threads: pt.threads,
                    buckets: st.buckets,
                    entries: pt.load * st.buckets as u64,
                    update: pt.update,
                    duration,
                    seed: p.seed ^ u64::from(t),
                    latency: st.latency,
                    alloc: p.alloc,
                };
                let out = trial(imp, spec)?;
                let name = format!("{}{}", imp.name(), pt.series);
                trials.push(Trial {
                    implementation: name.clone(),
                    x: pt.x,
                    trial: t,
                    value: duration.as_nanos() as f64 / out.ops.max(1) as f64,
                    procs: Some(pt.threads),
                    ..Trial::default()
                });
                lat.entry(name).or_default().extend(out.get_ns);
                pb.inc(1);
            }
        }
        for (name, mut v) in lat {
            v.sort_unstable();
            if let Some(q) = quantile(&v, 0.999) {
                tails.push((name, pt.x, q as f64));
            }
        }
    }
    pb.finish_and_clear();
    let mut names: Vec<String> = Vec::new();
    for t in &trials {
        if !names.contains(&t.implementation) {
            names.push(t.implementation.clone());
        }
    }
    let mut xs: Vec<f64> = Vec::new();
    for pt in &st.points {
        if !xs.contains(&pt.x) {
            xs.push(pt.x);
        }
    }
    let mut points = Vec::new();
    for &x in &xs {
        for n in &names {
            let v: Vec<f64> = trials
                .iter()
                .filter(|t| t.implementation == *n && t.x == x)
                .map(|t| t.value)
                .collect();
            if let Some(m) = trimmed_mean(&v) {
                points.push(Point {
                    implementation: n.clone(),
                    x,
                    value: m,
                    normalized: m,
                });
            }
        }
    }
    // Normalize: to papaya at the same x in map-oversub; to HP's series otherwise.
    let base_of = |n: &str| -> String {
        if exp.id == "map-oversub" {
            "papaya".into()
        } else if exp.id == "hart-update-fraction" || exp.id == "hart-fastread" {
            Impl::Lf(Scheme::Qsbr).name()
        } else {
            n.replace("QSBR", "HP")
                .replace("EBR", "HP")
                .replace("TAS-B", "HP")
                .replace("hash bucket-lock HP", "hash LF HP")
        }
    };
    for i in 0..points.len() {
        let (x, b) = (points[i].x, base_of(&points[i].implementation));
        if let Some(v) = points
            .iter()
            .find(|q| q.x == x && q.implementation == b)
            .map(|q| q.value)
            .filter(|v| *v > 0.0)
        {
            points[i].normalized = points[i].value / v;
        }
    }
    let verdict = verdict(exp.id, st.conclusion, &points, &tails, p.cores, &st.impls);
    let series = Point::series(&names, &points, |q| q.value);
    let svg = line_chart(
        &format!("{} ({})", exp.id, verdict.status.label()),
        st.x_label,
        "ns per operation, all threads (lower is better)",
        &series,
    );
    let rec = RunRecord {
        experiment: exp.id.into(),
        paper: exp.reference.into(),
        title: exp.title.into(),
        preempt: "none".into(),
        started_unix: crate::unix_now(),
        duration_s: started.elapsed().as_secs_f64(),
        machine: Machine::detect(),
        params: serde_json::json!({
            "common": p,
            "points": st.points,
            "trial_ms": duration.as_secs_f64() * 1e3,
            "ops_per_quiescent_state": OPS_PER_LOOP,
            "buckets": st.buckets,
            "hazard_pointers_per_thread": 2,
            "allocator": match p.alloc {
                AllocMode::Magazines => MagazineAlloc::NAME,
                AllocMode::System => SystemAlloc::NAME,
            },
            "get_latency_sampled_every": if st.latency { LATENCY_EVERY } else { 0 },
            "implementations": names,
        }),
        busy_iters_per_us: mpsync::util::busy::BusyWork::global().iters_per_us(),
        unit: "ns per operation (lower is better)".into(),
        x_label: st.x_label.into(),
        baseline: if exp.id == "map-oversub" {
            "normalized = divided by papaya at the same x".into()
        } else {
            "normalized = divided by the HP series (LF QSBR in update-fraction/fastread) at the same x".into()
        },
        trials,
        points,
        extra: serde_json::json!({
            "get_p999_ns": tails
                .iter()
                .map(|(n, x, q)| serde_json::json!({"implementation": n, "x": x, "p999_ns": q}))
                .collect::<Vec<_>>(),
        }),
        verdict,
    };
    Ok((rec, svg))
}

/// Evaluates an experiment's conclusion, clause by clause.
fn verdict(
    id: &str,
    conclusion: &str,
    points: &[Point],
    tails: &[(String, f64, f64)],
    cores: u32,
    impls: &[Impl],
) -> Verdict {
    let at = |n: &str, x: f64| {
        points
            .iter()
            .find(|q| q.implementation == n && q.x == x)
            .map(|q| q.value)
    };
    let mut xs: Vec<f64> = Vec::new();
    for q in points {
        if !xs.contains(&q.x) {
            xs.push(q.x);
        }
    }
    let (first, last) = (
        xs.iter().copied().fold(f64::MAX, f64::min),
        xs.iter().copied().fold(f64::MIN, f64::max),
    );
    let lf = |s: Scheme| Impl::Lf(s).name();
    let mut details = Vec::new();
    let mut holds = true;
    let mut evaluated = false;
    match id {
        "hart-base-hash" => {
            for table in ["LF", "CR"] {
                for (x, what) in [(0.0, "read-only"), (1.0, "write-only")] {
                    let n = |s: &str| format!("hash {table} {s}");
                    if let (Some(q), Some(e), Some(h)) =
                        (at(&n("QSBR"), x), at(&n("EBR"), x), at(&n("HP"), x))
                    {
                        evaluated = true;
                        let ok = q <= e * AMONG_THE_BEST && e <= h * AMONG_THE_BEST;
                        holds &= ok;
                        details.push(format!(
                            "{table} {what}: ns/op QSBR {q:.1}, EBR {e:.1}, HP {h:.1} ({}; within {AMONG_THE_BEST}x counts as ordered)",
                            if ok { "ordered as the paper says" } else { "not in the paper's order" }
                        ));
                    }
                }
            }
        }
        "hart-readonly-threads" | "hart-hash-threads" => {
            let growth = |n: &str| Some(at(n, last)? / at(n, first)?);
            if id == "hart-readonly-threads" {
                let spin = growth(&Impl::Spin.name());
                let worst_lf = [Scheme::Qsbr, Scheme::Ebr, Scheme::Hp]
                    .iter()
                    .filter_map(|&s| growth(&lf(s)))
                    .fold(f64::MIN, f64::max);
                if let Some(sg) = spin.filter(|_| worst_lf > f64::MIN && last > first) {
                    evaluated = true;
                    let ok = sg >= worst_lf;
                    holds &= ok;
                    details.push(format!(
                        "ns/op at {last} threads / at {first}: spinlock {sg:.2}, worst LF {worst_lf:.2} ({})",
                        if ok { "the spinlock scales worst" } else { "an LF table scales worse than the spinlock" }
                    ));
                }
                let gs: Vec<f64> = [Scheme::Qsbr, Scheme::Ebr, Scheme::Hp]
                    .iter()
                    .filter_map(|&s| growth(&lf(s)))
                    .collect();
                if gs.len() == 3 {
                    let (lo, hi) = (
                        gs.iter().copied().fold(f64::MAX, f64::min),
                        gs.iter().copied().fold(f64::MIN, f64::max),
                    );
                    let ok = hi / lo <= COLLAPSE;
                    holds &= ok;
                    details.push(format!(
                        "LF scaling (ns/op at {last} / at {first}) QSBR {:.2}, EBR {:.2}, HP {:.2}: spread {:.2} ({}; alike = within {COLLAPSE}x)",
                        gs[0], gs[1], gs[2], hi / lo,
                        if ok { "alike" } else { "not alike" }
                    ));
                }
            } else {
                let knee = xs
                    .iter()
                    .copied()
                    .filter(|&x| x <= f64::from(cores))
                    .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| a.max(x))));
                match knee.filter(|&k| last > k) {
                    None => details.push(format!(
                        "no point beyond the {cores} cores: use --threads with counts above {cores}"
                    )),
                    Some(k) => {
                        evaluated = true;
                        for s in [Scheme::Qsbr, Scheme::Ebr, Scheme::Hp] {
                            if let (Some(a), Some(b)) = (at(&lf(s), k), at(&lf(s), last)) {
                                let r = b / a;
                                let degrades = r >= COLLAPSE;
                                let ok = if s == Scheme::Hp { !degrades } else { degrades };
                                holds &= ok;
                                details.push(format!(
                                    "{}: ns/op at {last} threads / at {k} = {r:.2} ({})",
                                    s.name(),
                                    if degrades {
                                        "degrades"
                                    } else {
                                        "does not degrade"
                                    }
                                ));
                            }
                        }
                        details.push(format!("rule: \"degrades\" = at least {COLLAPSE}x the time per operation at the core count"));
                    }
                }
            }
        }
        "hart-loadfactor" => {
            for series in [" read-only", " write-only"] {
                let g = |s: Scheme| {
                    let n = format!("{}{series}", lf(s));
                    Some(at(&n, last)? / at(&n, first)?)
                };
                if let (Some(q), Some(e), Some(h)) =
                    (g(Scheme::Qsbr), g(Scheme::Ebr), g(Scheme::Hp))
                {
                    evaluated = true;
                    let ok = h > q && h > e;
                    holds &= ok;
                    details.push(format!(
                        "{}: ns/op at load factor {last} / at {first}: QSBR {q:.2}, EBR {e:.2}, HP {h:.2} ({})",
                        series.trim(),
                        if ok { "HP grows most" } else { "HP does not grow most" }
                    ));
                }
            }
            details.push("\"flat\" is read as: grows less than HP's (every search walks load-factor/2 nodes whatever the scheme)".into());
        }
        "hart-update-fraction" => {
            let (l, s) = (lf(Scheme::Qsbr), Impl::Spin.name());
            for &x in &xs {
                if let (Some(a), Some(b)) = (at(&l, x), at(&s, x)) {
                    evaluated = true;
                    let ok = a <= b;
                    holds &= ok;
                    details.push(format!(
                        "update fraction {x}: LF QSBR {a:.1} ns/op vs bucket-lock {b:.1} ({})",
                        if ok {
                            "LF beats the lock"
                        } else {
                            "the lock beats LF"
                        }
                    ));
                }
            }
            let c = Impl::Cr(Scheme::Qsbr).name();
            for &x in xs.iter().filter(|&&x| x > 0.1) {
                if let (Some(a), Some(b)) = (at(&l, x), at(&c, x)) {
                    evaluated = true;
                    let ok = a <= b;
                    holds &= ok;
                    details.push(format!(
                        "update fraction {x} (> 0.1): LF QSBR {a:.1} ns/op vs CR QSBR {b:.1} ({})",
                        if ok { "LF beats CR" } else { "CR beats LF" }
                    ));
                }
            }
        }
        "hart-fastread" => {
            for series in [" read-only", " write-only"] {
                let top = |n: String| at(&format!("{n}{series}"), last);
                // Write-only runs no gets: the two LF tables' updates are the same
                // code, so only the comparison with CR means anything there.
                let reads: &[Scheme] = if series == " read-only" {
                    &[Scheme::Qsbr, Scheme::Ebr]
                } else {
                    &[]
                };
                for &s in reads {
                    if let (Some(a), Some(b)) = (top(lf(s)), top(Impl::Fast(s).name())) {
                        evaluated = true;
                        details.push(format!(
                            "{}{series}: at load factor {last}, fast-read / plain = {:.2} ({})",
                            s.name(),
                            b / a,
                            if b <= a {
                                "fast reads are faster"
                            } else {
                                "fast reads are not faster"
                            }
                        ));
                    }
                }
                if let (Some(f), Some(cv)) = (
                    top(Impl::Fast(Scheme::Qsbr).name()),
                    top(Impl::Cr(Scheme::Qsbr).name()),
                ) {
                    evaluated = true;
                    let ok = f <= cv * AMONG_THE_BEST;
                    holds &= ok;
                    details.push(format!(
                        "{}: at load factor {last}, LF-fast QSBR {f:.1} ns/op vs CR QSBR {cv:.1} ({}; competitive = within {AMONG_THE_BEST}x)",
                        series.trim(),
                        if ok { "competitive" } else { "not competitive" }
                    ));
                }
            }
        }
        "hart-severity" => {
            // The first x of each series at which `a` is faster than `b`.
            let cross = |series: &str, a: Scheme, b: Scheme| -> String {
                let n = |s: Scheme| format!("{}{series}", lf(s));
                let mut sx: Vec<f64> = points
                    .iter()
                    .filter(|q| q.implementation == n(a))
                    .map(|q| q.x)
                    .collect();
                sx.sort_by(f64::total_cmp);
                sx.iter()
                    .find(|&&x| matches!((at(&n(a), x), at(&n(b), x)), (Some(va), Some(vb)) if va < vb))
                    .map_or_else(|| "never".to_string(), |x| format!("from {x}"))
            };
            evaluated = true;
            for (series, what) in [
                (SEV_LOAD, "load factor"),
                (SEV_T10, "threads at load factor 10"),
                (SEV_T20, "threads at load factor 20"),
            ] {
                details.push(format!(
                    "{}: QSBR faster than HP {} ({what}); EBR faster than HP {}; HP faster than QSBR {}; HP faster than EBR {}",
                    series.trim().trim_matches(|c| c == '(' || c == ')'),
                    cross(series, Scheme::Qsbr, Scheme::Hp),
                    cross(series, Scheme::Ebr, Scheme::Hp),
                    cross(series, Scheme::Hp, Scheme::Qsbr),
                    cross(series, Scheme::Hp, Scheme::Ebr),
                ));
            }
            details.push("a measurement: Hart's crossovers (QSBR beats HP from load factor 10 at 16 threads; HP beats QSBR only past 20 threads at load factor 10) are machine-dependent, so no clause is judged".into());
        }
        "map-oversub" => {
            let best = |x: f64| {
                impls
                    .iter()
                    .filter(|i| i.is_mpsync())
                    .filter_map(|i| Some((i.name(), at(&i.name(), x)?)))
                    .min_by(|a, b| a.1.total_cmp(&b.1))
            };
            let c = f64::from(cores.max(1));
            for (mult, papaya_min, dash_min) in [
                (1.0, 0.8, None),
                (2.0, 1.0, Some(1.5)),
                (4.0, 1.0, Some(1.5)),
            ] {
                let x = c * mult;
                let (Some((bn, bv)), Some(pv), Some(dv)) =
                    (best(x), at("papaya", x), at("dashmap", x))
                else {
                    continue;
                };
                evaluated = true;
                // Throughput ratio = inverse of the ns/op ratio.
                let (rp, rd) = (pv / bv, dv / bv);
                let ok_p = rp >= papaya_min;
                let ok_d = dash_min.is_none_or(|m| rd >= m);
                holds &= ok_p && ok_d;
                details.push(format!(
                    "{mult}x the cores ({x} threads): best mpsync table {bn}: {rp:.2}x papaya's throughput (target >= {papaya_min}: {}), {rd:.2}x dashmap's{}",
                    if ok_p { "met" } else { "missed" },
                    dash_min.map_or(String::new(), |m| format!(" (target >= {m}: {})", if ok_d { "met" } else { "missed" }))
                ));
            }
            let x4 = c * 4.0;
            let tail = |n: &str| tails.iter().find(|t| t.0 == n && t.1 == x4).map(|t| t.2);
            let best_tail = impls
                .iter()
                .filter(|i| i.is_mpsync())
                .filter_map(|i| Some((i.name(), tail(&i.name())?)))
                .min_by(|a, b| a.1.total_cmp(&b.1));
            if let (Some((n, t)), Some(d)) = (best_tail, tail("dashmap")) {
                evaluated = true;
                let ok = t <= 0.5 * d;
                holds &= ok;
                details.push(format!(
                    "p99.9 get latency at 4x the cores: {n} {t:.0} ns, dashmap {d:.0} ns, ratio {:.2} (target <= 0.5: {})",
                    t / d,
                    if ok { "met" } else { "missed" }
                ));
            }
        }
        _ => {}
    }
    Verdict {
        conclusion: conclusion.into(),
        status: if id == "hart-severity" {
            Status::Measurement
        } else if !holds {
            Status::DoesNotHold
        } else if evaluated {
            Status::Holds
        } else {
            Status::PartlyEvaluable
        },
        details,
    }
}

// ---- hart-memory-hash ------------------------------------------------------------

/// (seconds, pending nodes) samples, and HP's bound where the scheme has one.
type MemorySamples = (Vec<(f64, u64)>, Option<u64>);

/// Samples of one `hart-memory-hash` run: (seconds since start, pending nodes),
/// and Michael's bound where the scheme has one. One thread registers, enters an
/// operation (a guard: an EBR pin; two hazards; no quiescent state for QSBR) and
/// stays there until the end, while `workers` threads run a write-only load on a
/// lock-free table of 32 buckets at load factor 1.
fn memory_run<R: Reclaimer, A: NodeAlloc>(
    domain: Arc<R>,
    workers: u32,
    duration: Duration,
    samples: usize,
    seed: u64,
    bound: impl Fn(&R) -> Option<u64>,
) -> anyhow::Result<MemorySamples> {
    use mpsync::reclaim::{Guard, Local};
    let m: LfHashMap<u64, u64, R, A> =
        LfHashMap::with_domain(BUCKETS, domain.clone(), Default::default())?;
    let range = 2 * BUCKETS as u64;
    {
        let mut h = m.handle();
        for k in (0..range).step_by(2) {
            h.insert(k, k);
        }
    }
    let stop = AtomicBool::new(false);
    let stalled = AtomicBool::new(false);
    let mut out = Vec::new();
    let mut b = None;
    std::thread::scope(|s| {
        {
            let (m, stop, stalled) = (&m, &stop, &stalled);
            s.spawn(move || {
                let local = R::register(m.domain());
                // Whatever the table's head bucket holds, protected in both slots
                // (the hazards a search leaves behind when it stops).
                let dummy = mpsync::sync::AtomicPtr::new(Box::into_raw(Box::new(0u64)));
                {
                    let g = local.enter();
                    g.protect_raw(0, &dummy);
                    g.protect_raw(1, &dummy);
                    // Release: the sampler starts once we are in place.
                    stalled.store(true, Ordering::Release);
                    // Acquire: pairs with the sampler's Release stop store.
                    while !stop.load(Ordering::Acquire) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                // SAFETY: our own box, never shared beyond this thread's guard.
                drop(unsafe { Box::from_raw(dummy.load(Ordering::Relaxed)) });
            });
        }
        // Acquire: pairs with the stalled thread's Release.
        while !stalled.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        for t in 0..workers {
            let (m, stop) = (&m, &stop);
            s.spawn(move || {
                let mut h = m.handle();
                let mut rng = SplitMix64::stream(seed, u64::from(t));
                // Relaxed: a stop request.
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..OPS_PER_LOOP {
                        let r = rng.next_u64();
                        let k = (r >> 1) % range;
                        if r & 1 == 0 {
                            h.insert(k, k);
                        } else {
                            std::hint::black_box(h.remove(&k));
                        }
                    }
                    h.quiescent();
                }
            });
        }
        let t0 = Instant::now();
        for i in 1..=samples {
            let due = duration.mul_f64(i as f64 / samples as f64);
            std::thread::sleep(due.saturating_sub(t0.elapsed()));
            out.push((t0.elapsed().as_secs_f64(), domain.stats().pending));
            b = b.or_else(|| bound(&domain));
        }
        // Release: pairs with the stalled thread's Acquire.
        stop.store(true, Ordering::Release);
    });
    Ok((out, b))
}

fn run_memory(exp: &Experiment, p: &Params) -> anyhow::Result<(RunRecord, String)> {
    let duration = Duration::from_secs_f64((2000.0 * p.scale).max(100.0) / 1e3);
    let samples = 40;
    let workers = p.cores.max(1) + 1;
    let started = Instant::now();
    let mut trials = Vec::new();
    let mut hp_bound = None;
    for scheme in [Scheme::Qsbr, Scheme::Ebr, Scheme::Hp] {
        macro_rules! go {
            ($d:expr, $bound:expr) => {
                match p.alloc {
                    AllocMode::Magazines => memory_run::<_, MagazineAlloc>(
                        $d, workers, duration, samples, p.seed, $bound,
                    )?,
                    AllocMode::System => memory_run::<_, SystemAlloc>(
                        $d, workers, duration, samples, p.seed, $bound,
                    )?,
                }
            };
        }
        let (series, b) = match scheme {
            Scheme::Qsbr => go!(Arc::new(Qsbr::new()), |_: &Qsbr| None),
            Scheme::Ebr => go!(Arc::new(Ebr::new()), |_: &Ebr| None),
            _ => go!(
                Arc::new(HazardPointers::new(2)?),
                |d: &HazardPointers| Some((d.records() * d.scan_threshold()) as u64)
            ),
        };
        if scheme == Scheme::Hp {
            hp_bound = b;
        }
        for (t, pending) in series {
            trials.push(Trial {
                implementation: scheme.name().into(),
                x: t,
                trial: 0,
                value: pending as f64,
                procs: Some(workers),
                ..Trial::default()
            });
        }
    }
    let points: Vec<Point> = trials
        .iter()
        .map(|t| Point {
            implementation: t.implementation.clone(),
            x: t.x,
            value: t.value,
            normalized: t.value,
        })
        .collect();
    let mut verdict = super::hart::memory_verdict(&points, hp_bound);
    verdict.details.push(
        "the peers (papaya, dashmap, scc) do not report unreclaimed memory, so their growth is not shown".into(),
    );
    let mut series: Vec<Series> = ["QSBR", "EBR", "HP"]
        .iter()
        .map(|n| Series {
            label: (*n).into(),
            points: points
                .iter()
                .filter(|q| q.implementation == *n)
                .map(|q| (q.x, q.value))
                .collect(),
        })
        .collect();
    if let Some(b) = hp_bound {
        series.push(Series {
            label: "HP bound (N·R)".into(),
            points: vec![(0.0, b as f64), (duration.as_secs_f64(), b as f64)],
        });
    }
    let svg = line_chart(
        &format!(
            "hart-memory-hash: one thread stalled inside a table operation ({})",
            verdict.status.label()
        ),
        "seconds",
        "retired nodes not yet freed",
        &series,
    );
    let rec = RunRecord {
        experiment: exp.id.into(),
        paper: exp.reference.into(),
        title: exp.title.into(),
        preempt: "none".into(),
        started_unix: crate::unix_now(),
        duration_s: started.elapsed().as_secs_f64(),
        machine: Machine::detect(),
        params: serde_json::json!({
            "common": p,
            "run_s": duration.as_secs_f64(),
            "samples": samples,
            "worker_threads": workers,
            "stalled_threads": 1,
            "buckets": BUCKETS,
            "load_factor": 1,
            "workload": "write-only",
            "hazard_pointers_per_thread": 2,
            "hp_bound_n_times_r": hp_bound,
        }),
        busy_iters_per_us: mpsync::util::busy::BusyWork::global().iters_per_us(),
        unit: "pending nodes (retired, not yet freed)".into(),
        x_label: "seconds".into(),
        baseline: "none (absolute counts)".into(),
        trials,
        points,
        extra: serde_json::Value::Null,
        verdict,
    };
    Ok((rec, svg))
}
