//! `ms97-quicksort-queue`, `ms97-quicksort-stack`, `ms97-tsp`: the applications
//! of Michael & Scott, JPDC 1998 / PODC 1997 §4.5–4.6 (papers/000, Fig. 5–7),
//! on the same axis, pseudo-scheduler and locks as the microbenchmarks
//! (`experiments::ms97`): MP levels at one processor count, quantum 10 ms,
//! TAS-B ordinary or preemption-safe, time normalized to the preemption-safe
//! single lock (for the TSP: all structures under it) at the same level.
//!
//! **Quicksort** (§4.5): the workers sort 500,000 pseudo-random `u32`s
//! (`× --scale`); the intervals still to sort go through one shared queue (or
//! stack), initially `[0, n)`. A worker takes an interval, partitions it
//! (median-of-three pivot), hands the larger half back to the pool, goes on
//! with the smaller, and insertion-sorts an interval of at most
//! [`CUTOFF`] = 20 elements (a half that small is sorted at once, never pooled:
//! the pool then holds at most n / 21 disjoint intervals). The run ends when a
//! shared counter of elements in their final place (pivots and
//! insertion-sorted elements) reaches n: no interval can then remain, and
//! none is lost before. Every trial's array is checked sorted and a
//! permutation of its input (a multiset fingerprint); a wrong one fails the run.
//!
//! **TSP** (§4.6): branch and bound over a fixed, seeded, symmetric 17-city
//! distance matrix ([`MATRIX_SEED`], distances 1..=100) from city 0. A
//! shared priority queue holds the most promising partial tours (keyed by a
//! lower bound: cost so far plus, for the current and every unvisited city,
//! its cheapest edge), a shared stack the tours yet to be computed (those of
//! [`SPLIT_CITIES`] cities, each finished by a worker's own depth-first
//! search), and two shared counters the tours created and finished (done when
//! they are equal: read finished first, then created). The best tour so far is
//! an atomic minimum (the same in every row). Every trial's answer is checked
//! against a sequential Held–Karp solve of the same matrix.
//!
//! The rows are the structure table's (`experiments::structures`), so the
//! same queue and stack rows as `ms97-queue`/`ms97-stack` appear, behind
//! [`DynDs`]; the one exception is SCQ, bounded, which the quicksort gets with
//! [`SCQ_CAPACITY`] slots (more than the n / 21 intervals it can ever hold)
//! instead of the microbenchmark's 1024.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use mpsync::ds::scq::ScqQueue;
use mpsync::util::rng::SplitMix64;

use super::locks::WorkerBody;
use super::ms97::{
    BASELINE, QUANTUM_MS, collect_mp, degrades, design, fastest_of, mp_levels, observations,
    point_params, procs_of, row_of, trial_of,
};
use super::structures::{DsImpl, DynDs, Kind, SharedDs, of_kind};
use super::wks94::{AMONG_THE_BEST, COLLAPSE, PointEnvs};
use super::{AllocMode, Experiment, Params};
use crate::env::{PointEnv, Preempt};
use crate::model::{self, Better, Cell, Clause, Design, Imp, Results, Verdicts};
use crate::output::{RunRecord, Trial};

/// Items sorted at `--scale 1` (the paper's 500,000).
pub const QS_ITEMS: f64 = 500_000.0;
/// Sorts per trial, one after another (each of its own array and pool): one
/// sort of 500,000 items takes about 20 ms today, two quanta, where the
/// paper's took 1.6–4 s; five make a trial ten quanta long.
pub const SORTS: usize = 5;
/// Sorts per trial under `--quick` (of its 150,000 items).
pub const QUICK_SORTS: usize = 3;
/// Intervals of at most this many elements are insertion-sorted (the paper's 20).
pub const CUTOFF: usize = 20;
/// Slots of the quicksort's SCQ row: more than the n / 21 intervals the pool
/// can hold for n up to 2.75 million.
pub const SCQ_CAPACITY: usize = 1 << 17;
/// Cities of the full TSP (the paper's 17).
pub const CITIES: usize = 17;
/// Solves per trial at `--scale 1` (at least one): one takes tens of ms today.
pub const TSP_SOLVES: f64 = 4.0;
/// Extra factor on the solves under `--quick` (with its `--scale 0.3`: one).
pub const TSP_QUICK_FACTOR: f64 = 0.5;
/// Seed of the fixed distance matrix.
pub const MATRIX_SEED: u64 = 0x4D53_3937;
/// Largest distance (uniform in 1..=`MAX_DIST`).
pub const MAX_DIST: u64 = 100;
/// Cities on a partial tour (with the start) when it goes on the stack of
/// tours to compute instead of back into the priority queue.
pub const SPLIT_CITIES: u32 = 4;
/// The TSP's baseline configuration: every structure under a PS lock.
pub const TSP_BASELINE: &str = "all PS";

/// The quicksort's rows of `kind`: the paper's three, then SCQ / elimination,
/// then the peers.
fn qs_rows(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Queue => &[
            "single lock",
            "single lock (PS)",
            "MS non-blocking",
            "SCQ (bounded)",
            "SegQueue",
            "Mutex<VecDeque>",
        ],
        _ => &[
            "single lock",
            "single lock (PS)",
            "Treiber",
            "elimination (EBR)",
            "crossbeam-epoch Treiber",
            "Mutex<Vec>",
        ],
    }
}

/// The paper's rows of the quicksort of `kind` ("the fastest" is among them).
fn qs_paper_rows(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Queue => &["single lock", "single lock (PS)", "MS non-blocking"],
        _ => &["single lock", "single lock (PS)", "Treiber"],
    }
}

/// The rows named `names`, of `kind`, in that order.
fn rows_named(kind: Kind, names: &[&str]) -> anyhow::Result<Vec<DsImpl>> {
    let all = of_kind(kind);
    names
        .iter()
        .map(|n| {
            all.iter()
                .find(|i| i.name == *n)
                .copied()
                .ok_or_else(|| anyhow::anyhow!("no {kind:?} row named {n}"))
        })
        .collect()
}

/// SCQ with [`SCQ_CAPACITY`] slots (a full one is never reached: see there).
#[derive(Debug)]
pub struct ScqPool(ScqQueue<u64>);
impl SharedDs for ScqPool {
    fn create() -> Self {
        Self(ScqQueue::new(SCQ_CAPACITY).expect("a capacity above 0"))
    }
    fn put(&self, v: u64) {
        let mut v = v;
        while let Err(back) = self.0.try_enqueue(v) {
            v = back;
            std::hint::spin_loop();
        }
    }
    fn take(&self) -> Option<u64> {
        self.0.dequeue()
    }
}

/// A fresh structure of row `imp` for the quicksort.
fn qs_pool(imp: &DsImpl, alloc: AllocMode) -> Box<dyn DynDs> {
    if imp.name == "SCQ (bounded)" {
        Box::new(<ScqPool as SharedDs>::create())
    } else {
        (imp.make)(alloc)
    }
}

// ---------------------------------------------------------------- quicksort

/// The array being sorted. Each interval belongs to the one worker that took
/// it from the pool; the pool's put/take (a lock, or the structure's
/// release/acquire) orders one worker's writes before the next one's reads,
/// and the join orders them before the check. So every access is `Relaxed`.
#[derive(Debug)]
pub struct SortArray(Vec<AtomicU32>);

impl SortArray {
    /// `n` pseudo-random values of `seed`.
    pub fn random(n: usize, seed: u64) -> Self {
        let mut rng = SplitMix64::stream(seed, 0x5157);
        Self(
            (0..n)
                .map(|_| AtomicU32::new(rng.next_u64() as u32))
                .collect(),
        )
    }

    #[inline]
    fn get(&self, i: usize) -> u32 {
        // Relaxed: see the type's note.
        self.0[i].load(Ordering::Relaxed)
    }

    #[inline]
    fn set(&self, i: usize, v: u32) {
        // Relaxed: see the type's note.
        self.0[i].store(v, Ordering::Relaxed);
    }

    #[inline]
    fn swap(&self, i: usize, j: usize) {
        let (a, b) = (self.get(i), self.get(j));
        self.set(i, b);
        self.set(j, a);
    }

    /// Insertion sort of `[lo, hi)`.
    fn insertion_sort(&self, lo: usize, hi: usize) {
        for i in lo + 1..hi {
            let v = self.get(i);
            let mut j = i;
            while j > lo && self.get(j - 1) > v {
                self.set(j, self.get(j - 1));
                j -= 1;
            }
            self.set(j, v);
        }
    }

    /// Partitions `[lo, hi)` (at least 3 elements) around a median-of-three
    /// pivot; returns the pivot's final index `p`: `[lo, p)` ≤ pivot ≤ `(p, hi)`.
    fn partition(&self, lo: usize, hi: usize) -> usize {
        let (mid, last) = (lo + (hi - lo) / 2, hi - 1);
        if self.get(mid) < self.get(lo) {
            self.swap(mid, lo);
        }
        if self.get(last) < self.get(lo) {
            self.swap(last, lo);
        }
        if self.get(last) < self.get(mid) {
            self.swap(last, mid);
        }
        // Now lo ≤ mid ≤ last: the median (mid) is the pivot, kept at last.
        self.swap(mid, last);
        let pivot = self.get(last);
        let mut i = lo;
        for j in lo..last {
            if self.get(j) < pivot {
                self.swap(i, j);
                i += 1;
            }
        }
        self.swap(i, last);
        i
    }

    /// The values, in order.
    pub fn values(&self) -> Vec<u32> {
        (0..self.0.len()).map(|i| self.get(i)).collect()
    }
}

/// An order-free fingerprint of a multiset of values.
pub fn fingerprint(values: impl IntoIterator<Item = u32>) -> u64 {
    values.into_iter().fold(0u64, |acc, v| {
        let mut z = u64::from(v).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        acc.wrapping_add(z ^ (z >> 31))
    })
}

/// Fails unless `out` is sorted and has the fingerprint `want` of the input.
pub fn check_sorted(out: &[u32], want: u64) -> anyhow::Result<()> {
    if let Some(i) = out.windows(2).position(|w| w[0] > w[1]) {
        anyhow::bail!(
            "wrong quicksort output: not sorted at index {i} ({} > {})",
            out[i],
            out[i + 1]
        );
    }
    if fingerprint(out.iter().copied()) != want {
        anyhow::bail!("wrong quicksort output: sorted, but not a permutation of the input");
    }
    Ok(())
}

/// An interval `[lo, hi)` as a pool value.
fn encode_interval(lo: usize, hi: usize) -> u64 {
    ((lo as u64) << 32) | hi as u64
}

fn decode_interval(v: u64) -> (usize, usize) {
    ((v >> 32) as usize, (v & 0xFFFF_FFFF) as usize)
}

/// One quicksort: the array, the elements in their final place, the pool.
pub struct Quicksort {
    /// What is sorted.
    pub array: SortArray,
    /// The input's fingerprint.
    pub want: u64,
    /// Elements in their final place.
    pub placed: AtomicU64,
    /// The shared queue or stack of intervals.
    pub pool: Box<dyn DynDs>,
}

impl Round for Quicksort {
    fn work(&self, w: u32) {
        Quicksort::work(self, w);
    }
    fn check(&self) -> anyhow::Result<()> {
        self.check_against(self.want)
    }
}

impl Quicksort {
    /// A sort of `array` through `pool`.
    pub fn new(array: SortArray, pool: Box<dyn DynDs>) -> Self {
        Self {
            want: fingerprint(array.values()),
            array,
            placed: AtomicU64::new(0),
            pool,
        }
    }

    /// Elements to sort.
    fn len(&self) -> usize {
        self.array.0.len()
    }

    /// Worker `w`'s part: worker 0 first pools `[0, n)`; every worker takes
    /// intervals until all n elements are placed.
    pub fn work(&self, w: u32) {
        let n = self.len() as u64;
        let mut pool = self.pool.dyn_handle();
        if w == 0 {
            pool.put(encode_interval(0, self.len()));
        }
        loop {
            let Some(iv) = pool.take() else {
                // Acquire: pairs with the Release of the last fetch_add, though
                // only the join orders the array for the check.
                if self.placed.load(Ordering::Acquire) >= n {
                    break;
                }
                pool.quiescent();
                std::hint::spin_loop();
                continue;
            };
            let (mut lo, mut hi) = decode_interval(iv);
            let mut placed = 0u64;
            while hi - lo > CUTOFF {
                let p = self.array.partition(lo, hi);
                placed += 1;
                let (left, right) = ((lo, p), (p + 1, hi));
                let (keep, give) = if p - lo < hi - p {
                    (left, right)
                } else {
                    (right, left)
                };
                if give.1 - give.0 > CUTOFF {
                    pool.put(encode_interval(give.0, give.1));
                } else {
                    self.array.insertion_sort(give.0, give.1);
                    placed += (give.1 - give.0) as u64;
                }
                (lo, hi) = keep;
            }
            self.array.insertion_sort(lo, hi);
            placed += (hi - lo) as u64;
            // Release: pairs with the Acquire load above.
            self.placed.fetch_add(placed, Ordering::Release);
            pool.quiescent();
        }
    }

    /// Fails unless the run placed exactly n elements and sorted the array
    /// into a permutation of the input of fingerprint `want`.
    pub fn check_against(&self, want: u64) -> anyhow::Result<()> {
        // Relaxed: read after the workers are joined.
        let placed = self.placed.load(Ordering::Relaxed);
        if placed != self.len() as u64 {
            anyhow::bail!(
                "wrong quicksort run: {placed} elements placed of {}",
                self.len()
            );
        }
        check_sorted(&self.array.values(), want)
    }
}

// ---------------------------------------------------------------------- TSP

/// A symmetric distance matrix.
#[derive(Debug, Clone)]
pub struct Tsp {
    /// Cities.
    pub n: usize,
    d: Vec<u32>,
    /// Each city's cheapest edge.
    minout: Vec<u32>,
}

/// A partial tour as a heap/stack value: bound (bits 42..62), cost (22..42),
/// visited set (5..22), current city (0..5). The bound on top orders the heap.
fn encode_tour(bound: u32, cost: u32, visited: u32, last: usize) -> u64 {
    (u64::from(bound) << 42) | (u64::from(cost) << 22) | (u64::from(visited) << 5) | last as u64
}

fn decode_tour(v: u64) -> (u32, u32, u32, usize) {
    (
        ((v >> 42) & 0xF_FFFF) as u32,
        ((v >> 22) & 0xF_FFFF) as u32,
        ((v >> 5) & 0x1_FFFF) as u32,
        (v & 0x1F) as usize,
    )
}

impl Tsp {
    /// The fixed matrix of `n` cities (2..=17) of [`MATRIX_SEED`].
    pub fn seeded(n: usize) -> Self {
        assert!((2..=CITIES).contains(&n), "2..=17 cities");
        let mut rng = SplitMix64::stream(MATRIX_SEED, n as u64);
        let mut d = vec![0u32; n * n];
        for i in 0..n {
            for j in i + 1..n {
                let v = (rng.next_u64() % MAX_DIST + 1) as u32;
                d[i * n + j] = v;
                d[j * n + i] = v;
            }
        }
        Self::from_matrix(n, d)
    }

    /// From a full `n × n` matrix (row-major).
    pub fn from_matrix(n: usize, d: Vec<u32>) -> Self {
        let minout = (0..n)
            .map(|i| {
                (0..n)
                    .filter(|&j| j != i)
                    .map(|j| d[i * n + j])
                    .min()
                    .unwrap_or(0)
            })
            .collect();
        Self { n, d, minout }
    }

    #[inline]
    fn dist(&self, i: usize, j: usize) -> u32 {
        self.d[i * self.n + j]
    }

    fn all(&self) -> u32 {
        (1u32 << self.n) - 1
    }

    /// Sum of the cheapest edges of the cities not in `visited`.
    fn rest_min(&self, visited: u32) -> u32 {
        (0..self.n)
            .filter(|&j| visited & (1 << j) == 0)
            .map(|j| self.minout[j])
            .sum()
    }

    /// A lower bound on every completion of a tour at `last` having cost
    /// `cost` over `visited`: one edge leaves `last` and each unvisited city.
    fn bound(&self, cost: u32, visited: u32, last: usize) -> u32 {
        if visited == self.all() {
            return cost + self.dist(last, 0);
        }
        cost + self.minout[last] + self.rest_min(visited)
    }

    /// The optimal tour length, by Held–Karp (sequential, exact).
    pub fn held_karp(&self) -> u32 {
        let n = self.n;
        let full = 1usize << n;
        let inf = u32::MAX / 2;
        // dp[set][j]: cheapest path from 0 over `set` (which holds 0 and j) ending at j.
        let mut dp = vec![inf; full * n];
        dp[n] = 0; // set {0}, at 0
        for set in 1..full {
            if set & 1 == 0 {
                continue;
            }
            for j in 0..n {
                let cur = dp[set * n + j];
                if cur >= inf || set & (1 << j) == 0 {
                    continue;
                }
                for k in 1..n {
                    if set & (1 << k) != 0 {
                        continue;
                    }
                    let next = (set | (1 << k)) * n + k;
                    let c = cur + self.dist(j, k);
                    if c < dp[next] {
                        dp[next] = c;
                    }
                }
            }
        }
        (1..n)
            .map(|j| dp[(full - 1) * n + j] + self.dist(j, 0))
            .min()
            .unwrap_or(0)
    }

    /// The nearest-neighbour tour's length from city 0: the first bound.
    pub fn greedy(&self) -> u32 {
        let (mut at, mut visited, mut len) = (0usize, 1u32, 0u32);
        while visited != self.all() {
            let next = (0..self.n)
                .filter(|&j| visited & (1 << j) == 0)
                .min_by_key(|&j| self.dist(at, j))
                .unwrap_or(0);
            len += self.dist(at, next);
            visited |= 1 << next;
            at = next;
        }
        len + self.dist(at, 0)
    }
}

/// A TSP configuration: which rows hold the heap, the stack and the counters.
#[derive(Debug, Clone, Copy)]
pub struct TspConfig {
    /// As printed.
    pub name: &'static str,
    /// The priority queue's row.
    pub heap: &'static str,
    /// The stack's row.
    pub stack: &'static str,
    /// The counters' row.
    pub counter: &'static str,
    /// Whether it is a peer's (std) rather than the paper's.
    pub peer: bool,
}

/// The paper's four configurations, then std's.
pub const TSP_CONFIGS: [TspConfig; 5] = [
    TspConfig {
        name: "all ordinary",
        heap: "single lock",
        stack: "single lock",
        counter: "single lock",
        peer: false,
    },
    TspConfig {
        name: TSP_BASELINE,
        heap: "single lock (PS)",
        stack: "single lock (PS)",
        counter: "single lock (PS)",
        peer: false,
    },
    TspConfig {
        name: "all non-blocking",
        heap: "Herlihy non-blocking",
        stack: "Treiber",
        counter: "CAS loop",
        peer: false,
    },
    TspConfig {
        name: "hybrid",
        heap: "single lock (PS)",
        stack: "Treiber",
        counter: "CAS loop",
        peer: false,
    },
    TspConfig {
        name: "std (Mutex, fetch_add)",
        heap: "Mutex<BinaryHeap>",
        stack: "Mutex<Vec>",
        counter: "AtomicU64::fetch_add",
        peer: true,
    },
];

/// The paper's configurations ("the fastest" is among them).
const TSP_PAPER: &[&str] = &["all ordinary", TSP_BASELINE, "all non-blocking", "hybrid"];

/// One parallel branch and bound.
pub struct TspRun {
    /// The matrix.
    pub tsp: Arc<Tsp>,
    /// Shared priority queue of promising partial tours.
    pub heap: Box<dyn DynDs>,
    /// Shared stack of tours to compute.
    pub stack: Box<dyn DynDs>,
    /// Tours created (pooled).
    pub created: Box<dyn DynDs>,
    /// Tours finished (taken and expanded or computed).
    pub finished: Box<dyn DynDs>,
    /// The best complete tour so far.
    pub best: AtomicU32,
    /// The sequential solve's answer.
    pub optimum: u32,
}

impl Round for TspRun {
    fn work(&self, w: u32) {
        TspRun::work(self, w);
    }
    fn check(&self) -> anyhow::Result<()> {
        self.check_against(self.optimum)
    }
}

impl TspRun {
    /// A run of `config`'s structures over `tsp` (whose answer is
    /// `optimum`), bounded first by the nearest-neighbour tour.
    pub fn new(
        tsp: Arc<Tsp>,
        config: &TspConfig,
        optimum: u32,
        alloc: AllocMode,
    ) -> anyhow::Result<Self> {
        let one = |kind, name| -> anyhow::Result<Box<dyn DynDs>> {
            Ok((rows_named(kind, &[name])?[0].make)(alloc))
        };
        Ok(Self {
            best: AtomicU32::new(tsp.greedy()),
            optimum,
            tsp,
            heap: one(Kind::Heap, config.heap)?,
            stack: one(Kind::Stack, config.stack)?,
            created: one(Kind::Counter, config.counter)?,
            finished: one(Kind::Counter, config.counter)?,
        })
    }

    fn best(&self) -> u32 {
        // Relaxed: a bound; any value it held is a tour's length, and the
        // final one is read after the join.
        self.best.load(Ordering::Relaxed)
    }

    fn offer(&self, len: u32) {
        // Relaxed: as above.
        self.best.fetch_min(len, Ordering::Relaxed);
    }

    /// Worker `w`'s part: worker 0 first pools the root; every worker
    /// computes stacked tours, else expands the heap's most promising one,
    /// until every created tour is finished.
    pub fn work(&self, w: u32) {
        let (mut heap, mut stack) = (self.heap.dyn_handle(), self.stack.dyn_handle());
        let (mut created, mut finished) = (self.created.dyn_handle(), self.finished.dyn_handle());
        let t = &*self.tsp;
        if w == 0 {
            created.put(0);
            heap.put(encode_tour(t.bound(0, 1, 0), 0, 1, 0));
        }
        loop {
            if let Some(v) = stack.take() {
                self.compute(v);
            } else if let Some(v) = heap.take() {
                let (bound, cost, visited, last) = decode_tour(v);
                if bound < self.best() {
                    for j in 1..t.n {
                        if visited & (1 << j) != 0 {
                            continue;
                        }
                        let (c, vis) = (cost + t.dist(last, j), visited | (1 << j));
                        let b = t.bound(c, vis, j);
                        if vis == t.all() {
                            self.offer(b);
                        } else if b < self.best() {
                            created.put(0);
                            let child = encode_tour(b, c, vis, j);
                            if vis.count_ones() >= SPLIT_CITIES {
                                stack.put(child);
                            } else {
                                heap.put(child);
                            }
                        }
                    }
                }
            } else {
                // Finished first, then created: both only grow and
                // finished ≤ created, so equal readings mean that, when
                // finished was read, no tour was pooled or being worked on.
                let f = finished.take().unwrap_or(0);
                let c = created.take().unwrap_or(0);
                if c > 0 && f == c {
                    break;
                }
                heap.quiescent();
                stack.quiescent();
                std::hint::spin_loop();
                continue;
            }
            finished.put(0);
            heap.quiescent();
            stack.quiescent();
        }
    }

    /// Completes a stacked tour by depth-first search.
    fn compute(&self, v: u64) {
        let (bound, cost, visited, last) = decode_tour(v);
        if bound < self.best() {
            let rest = self.tsp.rest_min(visited);
            self.dfs(cost, visited, last, rest);
        }
    }

    fn dfs(&self, cost: u32, visited: u32, last: usize, rest: u32) {
        let t = &*self.tsp;
        if visited == t.all() {
            self.offer(cost + t.dist(last, 0));
            return;
        }
        if cost + t.minout[last] + rest >= self.best() {
            return;
        }
        for j in 1..t.n {
            if visited & (1 << j) == 0 {
                self.dfs(
                    cost + t.dist(last, j),
                    visited | (1 << j),
                    j,
                    rest - t.minout[j],
                );
            }
        }
    }

    /// Fails unless every created tour was finished and the answer is `optimum`.
    pub fn check_against(&self, optimum: u32) -> anyhow::Result<()> {
        let (f, c) = (
            self.finished.dyn_handle().take().unwrap_or(0),
            self.created.dyn_handle().take().unwrap_or(0),
        );
        if f != c {
            anyhow::bail!("wrong TSP run: {f} tours finished of {c} created");
        }
        let got = self.best();
        if got != optimum {
            anyhow::bail!(
                "wrong TSP answer: tour length {got}, the sequential solve says {optimum}"
            );
        }
        Ok(())
    }
}

// ------------------------------------------------------------------ the runs

/// One of a trial's back-to-back rounds (a sort, a solve): every worker
/// runs its part, then its answer is checked.
trait Round: Send + Sync + 'static {
    /// Worker `w`'s part.
    fn work(&self, w: u32);
    /// Fails unless the answer is right.
    fn check(&self) -> anyhow::Result<()>;
}

/// One trial: `rounds` one after another in every worker, in `env`; then
/// every round's answer checked (a wrong one fails the run, naming the cell).
fn measure_rounds<R: Round>(
    env: &PointEnv,
    c: &Cell<'_>,
    procs: u32,
    rounds: Vec<R>,
) -> anyhow::Result<Trial> {
    let rounds = Arc::new(rounds);
    let body: WorkerBody = {
        let rounds = Arc::clone(&rounds);
        Box::new(move |w| rounds.iter().for_each(|r| r.work(w)))
    };
    let o = env.run(&*body)?;
    for (k, r) in rounds.iter().enumerate() {
        r.check()
            .map_err(|e| anyhow::anyhow!("{} at MP {}, round {k}: {e}", c.imp.name, c.x))?;
    }
    Ok(trial_of(&o, c.x, procs))
}

/// Runs one of the three applications (by `exp.id`).
pub fn run(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    match exp.id {
        "ms97-quicksort-queue" => run_quicksort(exp, p, preempt, Kind::Queue),
        "ms97-quicksort-stack" => run_quicksort(exp, p, preempt, Kind::Stack),
        "ms97-tsp" => run_tsp(exp, p, preempt),
        other => anyhow::bail!("{other} is not an ms97 application"),
    }
}

/// The two quicksorts.
fn run_quicksort(
    exp: &Experiment,
    p: &Params,
    preempt: Preempt,
    kind: Kind,
) -> anyhow::Result<(RunRecord, String)> {
    let procs = procs_of(p);
    let mps = mp_levels(p, preempt);
    let quantum = p.quantum(QUANTUM_MS);
    let n = (QS_ITEMS * p.scale).round().max(1.0) as usize;
    if n / (CUTOFF + 1) >= SCQ_CAPACITY || n > u32::MAX as usize {
        anyhow::bail!(
            "--scale {} sorts {n} items, more than the SCQ row's {SCQ_CAPACITY} slots allow (--scale at most 5.5)",
            p.scale
        );
    }
    let sorts_per_trial = if p.quick { QUICK_SORTS } else { SORTS };
    let table = rows_named(kind, qs_rows(kind))?;
    let d = design(kind, &table, mps.clone(), p.trials);
    let mut envs = PointEnvs::new(preempt, quantum, p.seed);
    let started = Instant::now();
    let trials = collect_mp(exp.id, &d, &mps, procs, &mut envs, &mut |c, env| {
        let imp = row_of(&table, c.imp.name.as_str())?;
        let sorts = (0..sorts_per_trial)
            .map(|k| {
                let seed = p.seed ^ (u64::from(c.trial) << 8) ^ k as u64;
                Quicksort::new(SortArray::random(n, seed), qs_pool(imp, p.alloc))
            })
            .collect();
        measure_rounds(env, c, procs, sorts)
    })?;
    let params = point_params(
        procs,
        &mps,
        quantum,
        serde_json::json!({
            "items": n,
            "sorts_per_trial": sorts_per_trial,
            "insertion_sort_at_most": CUTOFF,
            "scq_capacity": SCQ_CAPACITY,
            "answer_check": "every trial: sorted, a permutation of the input (fingerprint), n elements placed",
            "implementations": table.iter().map(|i| i.name).collect::<Vec<_>>(),
        }),
    );
    let (name, fig, ps) = match kind {
        Kind::Queue => ("MS non-blocking", "Fig. 5", "1.6, 2.3, 3.3"),
        _ => ("Treiber", "Fig. 6", "1.5, 2.3, 3.1"),
    };
    let multiprogrammed = preempt != Preempt::None && mps.iter().any(|&m| m > 1.0);
    let clauses = vec![
        degrades(
            "single lock",
            true,
            multiprogrammed,
            if kind == Kind::Queue {
                "performance with ordinary locks degrades under multiprogramming, though not as severely as in the micro-benchmarks (Fig. 5)"
            } else {
                "performance with ordinary locks degrades under multiprogramming, though not as severely as in the micro-benchmarks (Fig. 6)"
            },
        ),
        fastest_of(
            qs_paper_rows(kind),
            if kind == Kind::Queue {
                "quicksort queues"
            } else {
                "quicksort stacks"
            },
            name,
            &format!(
                "simple non-blocking implementations yield superior performance even on dedicated systems ({fig}; the PS lock's own times on 11 processors at MP 1, 2, 3: {ps} s)"
            ),
        ),
    ];
    let conclusion = format!(
        "in quicksort of 500,000 items through a shared {what}, ordinary locks degrade under multiprogramming and the {name} {what} is the fastest at every level ({fig})",
        what = if kind == Kind::Queue {
            "queue"
        } else {
            "stack"
        },
    );
    finish(
        exp,
        p,
        preempt,
        (&d, trials, clauses, conclusion, params),
        envs,
        started,
    )
}

/// The TSP.
fn run_tsp(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let procs = procs_of(p);
    let mps = mp_levels(p, preempt);
    let quantum = p.quantum(QUANTUM_MS);
    let cities = CITIES;
    let quick = if p.quick { TSP_QUICK_FACTOR } else { 1.0 };
    let solves = (TSP_SOLVES * p.scale * quick).round().max(1.0) as usize;
    let tsp = Arc::new(Tsp::seeded(cities));
    let optimum = tsp.held_karp();
    let imps = TSP_CONFIGS
        .iter()
        .map(|c| {
            if c.peer {
                Imp::peer(c.name, "TSP structures")
            } else {
                Imp::ours(c.name, "TSP structures")
            }
        })
        .collect();
    let d = Design::single(
        "multiprogramming level",
        "seconds",
        Better::Lower,
        mps.clone(),
        imps,
        p.trials,
    )
    .baseline(TSP_BASELINE);
    let mut envs = PointEnvs::new(preempt, quantum, p.seed);
    let started = Instant::now();
    let trials = collect_mp(exp.id, &d, &mps, procs, &mut envs, &mut |c, env| {
        let config = TSP_CONFIGS
            .iter()
            .find(|i| i.name == c.imp.name)
            .ok_or_else(|| anyhow::anyhow!("no configuration named {}", c.imp.name))?;
        let runs = (0..solves)
            .map(|_| TspRun::new(Arc::clone(&tsp), config, optimum, p.alloc))
            .collect::<anyhow::Result<Vec<_>>>()?;
        measure_rounds(env, c, procs, runs)
    })?;
    let params = point_params(
        procs,
        &mps,
        quantum,
        serde_json::json!({
            "cities": cities,
            "solves_per_trial": solves,
            "matrix_seed": MATRIX_SEED,
            "max_distance": MAX_DIST,
            "split_cities": SPLIT_CITIES,
            "optimum": optimum,
            "first_bound_nearest_neighbour": tsp.greedy(),
            "answer_check": "every trial: the optimum against a sequential Held-Karp solve, every created tour finished",
            "configurations": TSP_CONFIGS.iter().map(|c| serde_json::json!({
                "name": c.name, "heap": c.heap, "stack": c.stack, "counters": c.counter,
            })).collect::<Vec<_>>(),
        }),
    );
    let multiprogrammed = preempt != Preempt::None && mps.iter().any(|&m| m > 1.0);
    let clauses = vec![
        degrades(
            "all ordinary",
            true,
            multiprogrammed,
            "the implementation based on ordinary locks suffers under multiprogramming (Fig. 7)",
        ),
        fastest_of(
            TSP_PAPER,
            "TSP configurations",
            "hybrid",
            "the hybrid (non-blocking stack and counters, PS heap) yields the best performance (Fig. 7; the all-PS times on 11 processors at MP 1, 2, 3: 14.3, 15.7, 18.5 s)",
        ),
    ];
    let conclusion = format!(
        "in a {cities}-city TSP (shared heap, stack and counters), ordinary locks degrade under multiprogramming and the hybrid (non-blocking stack and counters, PS heap) is the fastest (Fig. 7)"
    );
    finish(
        exp,
        p,
        preempt,
        (&d, trials, clauses, conclusion, params),
        envs,
        started,
    )
}

/// The measured design, its trials, clauses, conclusion and parameters.
type Measured<'a> = (
    &'a Design,
    Vec<Trial>,
    Vec<Clause>,
    String,
    serde_json::Value,
);

/// The verdict and record of either application.
fn finish(
    exp: &Experiment,
    p: &Params,
    preempt: Preempt,
    (d, trials, clauses, conclusion, params): Measured<'_>,
    envs: PointEnvs,
    started: Instant,
) -> anyhow::Result<(RunRecord, String)> {
    let points = model::summarize(d, &trials);
    let r = Results {
        design: d,
        points: &points,
        trials: &trials,
    };
    let baseline = d.baseline_of(0).unwrap_or(BASELINE);
    let mut notes = vec![format!(
        "rule: \"degrades\" = time normalized to {baseline} at the top MP level at least {COLLAPSE}x that at the first; \"the fastest\" = within {AMONG_THE_BEST:.2}x of the fastest of the paper's rows"
    )];
    notes.extend(observations(&r));
    let v = Verdicts {
        conclusion,
        clauses,
        notes,
        ..Verdicts::default()
    };
    let (mut rec, svg) = model::finish(exp, p, preempt, d, trials, v, params, started);
    rec.extra = serde_json::json!({ "scheduler": envs.sched });
    Ok((rec, svg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::structures::ds_table;

    fn sort_with(imp: &DsImpl, n: usize, workers: u32) -> Quicksort {
        let qs = Quicksort::new(SortArray::random(n, 7), qs_pool(imp, AllocMode::Magazines));
        std::thread::scope(|s| {
            for w in 0..workers {
                let qs = &qs;
                s.spawn(move || qs.work(w));
            }
        });
        qs
    }

    /// Every quicksort row sorts, at sizes around the cutoff too, with one
    /// worker and three; and the run ends (does not hang) with n placed.
    #[test]
    fn quicksort_sorts_with_every_row() {
        for kind in [Kind::Queue, Kind::Stack] {
            for imp in rows_named(kind, qs_rows(kind)).unwrap() {
                for (n, workers) in [(1, 2), (20, 3), (21, 1), (22, 3), (5000, 3), (3000, 1)] {
                    let want = fingerprint(SortArray::random(n, 7).values());
                    let qs = sort_with(&imp, n, workers);
                    qs.check_against(want)
                        .unwrap_or_else(|e| panic!("{}: {e}", imp.name));
                }
            }
        }
    }

    #[test]
    fn the_checker_rejects_wrong_output() {
        let want = fingerprint([3, 1, 2]);
        assert!(check_sorted(&[1, 2, 3], want).is_ok());
        assert!(check_sorted(&[1, 3, 2], want).is_err());
        assert!(check_sorted(&[1, 2, 2], want).is_err());
        let imp = rows_named(Kind::Queue, &["single lock (PS)"]).unwrap()[0];
        let qs = sort_with(&imp, 100, 2);
        let want = fingerprint(SortArray::random(100, 7).values());
        assert_eq!(qs.want, want);
        assert!(qs.check().is_ok());
        assert!(qs.check_against(want ^ 1).is_err());
        // Placed too many (counted twice): refused, sorted or not.
        qs.placed.fetch_add(1, Ordering::Relaxed);
        assert!(qs.check().unwrap_err().to_string().contains("placed"));
    }

    #[test]
    fn partition_places_the_pivot() {
        let a = SortArray::random(200, 3);
        let p = a.partition(10, 190);
        let v = a.values();
        assert!(v[10..p].iter().all(|&x| x <= v[p]));
        assert!(v[p + 1..190].iter().all(|&x| x >= v[p]));
    }

    #[test]
    fn held_karp_matches_brute_force_and_tours_encode() {
        // A 4-city square: the perimeter, 4.
        let square = Tsp::from_matrix(4, vec![0, 1, 2, 1, 1, 0, 1, 2, 2, 1, 0, 1, 1, 2, 1, 0]);
        assert_eq!(square.held_karp(), 4);
        let t = Tsp::seeded(7);
        let mut best = u32::MAX;
        let mut perm: Vec<usize> = (1..7).collect();
        permute(&mut perm, 0, &mut |p| {
            let mut len = t.dist(0, p[0]) + t.dist(p[5], 0);
            len += p.windows(2).map(|w| t.dist(w[0], w[1])).sum::<u32>();
            best = best.min(len);
        });
        assert_eq!(t.held_karp(), best);
        assert!(t.greedy() >= best);
        let v = encode_tour(1700, 1600, 0x1_FFFF, 16);
        assert_eq!(decode_tour(v), (1700, 1600, 0x1_FFFF, 16));
        assert!(encode_tour(5, 100, 3, 1) < encode_tour(6, 0, 1, 0));
    }

    fn permute(v: &mut Vec<usize>, k: usize, f: &mut impl FnMut(&[usize])) {
        if k == v.len() {
            f(v);
            return;
        }
        for i in k..v.len() {
            v.swap(k, i);
            permute(v, k + 1, f);
            v.swap(k, i);
        }
    }

    /// Every configuration finds the optimum with 1 and 3 workers, and a
    /// wrong optimum is refused.
    #[test]
    fn tsp_finds_the_optimum_with_every_configuration() {
        let tsp = Arc::new(Tsp::seeded(10));
        let optimum = tsp.held_karp();
        for config in &TSP_CONFIGS {
            for workers in [1, 3] {
                let run =
                    TspRun::new(Arc::clone(&tsp), config, optimum, AllocMode::System).unwrap();
                std::thread::scope(|s| {
                    for w in 0..workers {
                        let run = &run;
                        s.spawn(move || run.work(w));
                    }
                });
                Round::check(&run).unwrap_or_else(|e| panic!("{}: {e}", config.name));
                assert!(run.check_against(optimum + 1).is_err());
            }
        }
        // Every configuration's rows exist in the table.
        let names: Vec<&str> = ds_table().iter().map(|i| i.name).collect();
        assert!(TSP_CONFIGS.iter().all(|c| names.contains(&c.heap)));
    }
}
