//! `wks94-apps` and `wks95-apps`: the lock-based applications of Wisniewski,
//! Kontothanassis & Scott — IPPS 1994 §4 Figure 6 (papers/003: Cholesky from
//! SPLASH and a parallel quicksort, 11-processor SGI and 63-processor KSR 1,
//! MP 2) and PPoPP 1995 §4 Figures 3–4 (papers/001: Cholesky on `bcsstk15`
//! and quicksort of 2 M integers, 63-processor KSR 1, MP 2). Both papers
//! report completion time in seconds; here times are normalized to TAS-B at
//! the same point, as the lock programs are.
//!
//! Each experiment runs both applications, one figure panel each, at every
//! processor of the machine (the first `--procs` otherwise) and MP 2 (or the
//! `--mp` levels): one application thread per processor, the rest of each
//! processor's time going to a dummy of "another application" — the
//! papers' lock methodology, and what `wks94`/`wks95` do — emulated by the
//! pseudo-scheduler (quantum 20 ms for 1994, 50 ms for 1995) or, under
//! `--preempt os`, real competitor processes.
//!
//! **Cholesky.** `bcsstk15` (order 3948, 117,816 stored entries — the lower
//! triangle with the diagonal — as the Harwell–Boeing / Matrix Market
//! description of BCSSTK15, the stiffness matrix of an offshore platform
//! module, gives them) is not on this machine: there is no network and no
//! Debian package ships the Harwell–Boeing collection (`apt-cache search
//! harwell` and `apt-cache search matrix market` find nothing). mpsync
//! generates a matrix of the same order and stored entries from the seed,
//! structured like a stiffness matrix: a 4 × 7 × 47 grid of nodes, 3 degrees
//! of freedom each, every node coupled to its 26 neighbours by a dense 3 × 3
//! block (120,819 entries), 3003 of the off-diagonal entries dropped at random
//! to match 117,816; off-diagonal values uniform in [−1, 1], each diagonal
//! entry 1 more than the row's off-diagonal magnitudes (strictly diagonally
//! dominant, hence SPD). `--scale` scales the grid's long side (47 nodes at
//! 1), so the order and the work scale with it. The symbolic factorization
//! (the pattern of L, by the elimination tree) is done once, sequentially,
//! outside the timed region; the numeric factorization is the fan-out
//! column Cholesky over a task queue: a lock-protected FIFO queue of ready
//! columns, one lock per column and a count per column of the updates it
//! still waits for. A worker takes a ready column `j` from the queue (the
//! same lock acquisition records its previous column done), divides it by
//! the square root of its diagonal, and applies its update to every column
//! `k` below it holding `k`'s lock; the update that brings `k`'s count to
//! zero puts `k` on the queue. Every lock is of the row being measured.
//! Every run's finished columns are checked against a one-thread
//! factorization of the same matrix, and a complete run's factor by the
//! residual `‖L(Lᵀx) − Ax‖∞ / (‖A‖∞‖x‖∞)` on a random `x`.
//!
//! **Quicksort.** 2 M random 32-bit integers (× `--scale`) sorted in place
//! by a shared, lock-protected stack of intervals: a worker pops an interval,
//! partitions it (Hoare, median of three), pushes the right part and goes on
//! with the left; intervals of at most [`SORT_CUTOFF`] are sorted by the
//! worker that has them. Completing an interval and taking the next are one
//! lock acquisition. A complete run's output must equal the input sorted
//! (sorted and the same multiset); a censored run's array must still be a
//! permutation of the input (sum, sum of squares and xor).
//!
//! A wrong answer, or a task lost (nothing queued, nothing in hand, not
//! done) fails the run with an error. A run stops at [`CAP_FACTOR`] × the
//! one-thread time (at least [`CAP_MIN_S`]; `--quick`: [`QUICK_CAP_FACTOR`],
//! at least [`QUICK_CAP_MIN_S`]) and is reported censored, its time
//! extrapolated from the fraction done (columns finished, elements sorted).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mpsync::util::rng::SplitMix64;

use super::locks::{DynLock, LockImpl, select};
use super::wks94::{CAP_FACTOR, CAP_MIN_S, PointEnvs, WKS94, mutex_imps, unmeasured};
use super::wks95::WKS95;
use super::{Experiment, Params};
use crate::env::Preempt;
use crate::model::{self, Better, Cell, Clause, Design, Judged, Panel, Results, Verdicts};
use crate::output::{RunRecord, Trial};
use crate::svg::sig3;

/// The stored entries of `bcsstk15` (lower triangle with the diagonal).
pub const BCSSTK15_ENTRIES: usize = 117_816;
/// The order of `bcsstk15`.
pub const BCSSTK15_ORDER: usize = 3948;
/// The generated mesh: nodes across (x, y), and along at `--scale 1`.
pub const MESH: (usize, usize, usize) = (4, 7, 47);
/// Degrees of freedom per node.
pub const DOF: usize = 3;
/// Integers sorted at `--scale 1` (the 1995 paper's 2 M).
pub const BASE_INTS: f64 = 2_000_000.0;
/// Intervals of at most this many elements are sorted by one worker.
pub const SORT_CUTOFF: usize = 256;
/// `--quick` multiplies the matrix's size by this on top of its `--scale
/// 0.3` (0.45 of bcsstk15's order: 1764), and sorts 0.3 × 2 M integers:
/// runs of a few quanta, both experiments within 20 s on 2 cores.
pub const QUICK_CHOLESKY_WORK: f64 = 1.5;
/// Under `--quick`: the cap factor ...
pub const QUICK_CAP_FACTOR: f64 = 10.0;
/// ... and the least cap (seconds).
pub const QUICK_CAP_MIN_S: f64 = 0.3;
/// Largest accepted residual `‖L(Lᵀx) − Ax‖∞ / (‖A‖∞‖x‖∞)`.
pub const RESIDUAL_BOUND: f64 = 1e-10;
/// Largest accepted `max |L − L_ref| / max |L_ref|` over finished columns.
pub const AGREEMENT_BOUND: f64 = 1e-10;
/// "Disastrous": at least this many times TAS-B-np's time (as `wks94`'s collapse).
pub const COLLAPSE: f64 = super::wks94::COLLAPSE;
/// "Ties": within this factor (the spread of repeated trials on a shared
/// 2-core machine is 10–20%).
pub const TIE: f64 = 1.20;
/// "Wins": the plain ticket lock at least this many times Ticket-np's time.
pub const TICKET_WIN: f64 = 1.5;

/// The scheduler-conscious locks of the 1995 paper.
pub const CONSCIOUS: [&str; 4] = ["Ticket-np", "Smart-Q", "TAS-B-np", "Native-np"];
/// ... and their scheduler-oblivious counterparts.
pub const OBLIVIOUS: [&str; 3] = ["Ticket", "TAS-B", "Native"];

/// The 1994 paper's conclusion on its applications.
pub const CONCLUSION_94: &str = "in Cholesky and quicksort at multiprogramming level 2, naive \
queuing of preemptable processes (Queued, Queued-np) is disastrous, while Smart-Q ties \
TAS-B-np";
/// The 1995 paper's conclusion on its applications.
pub const CONCLUSION_95: &str = "in Cholesky and quicksort at multiprogramming level 2 the \
scheduler-conscious locks win: Ticket-np beats the plain ticket lock, and the best \
scheduler-conscious lock beats every scheduler-oblivious one";

/// The two applications, one panel each.
pub const APPS: [&str; 2] = ["cholesky", "quicksort"];

/// What differs between the two papers' runs of the applications.
#[derive(Debug, Clone, Copy)]
pub struct AppsDesign {
    /// The paper's locks (peers are always added).
    pub names: &'static [&'static str],
    /// The locks a `--quick` run measures (and every peer).
    pub quick_names: &'static [&'static str],
    /// Default quantum, ms.
    pub quantum_ms: f64,
    /// The paper's conclusion.
    pub conclusion: &'static str,
    /// The figure reproduced.
    pub figure: &'static str,
    /// The clauses of one application's panel.
    pub clauses: fn(usize, &'static str, bool) -> Vec<Clause>,
}

/// Paper 003's applications (Fig. 6): `wks94`'s locks.
pub const WKS94_APPS: AppsDesign = AppsDesign {
    names: WKS94.names,
    quick_names: WKS94.quick_names,
    quantum_ms: WKS94.quantum_ms,
    conclusion: CONCLUSION_94,
    figure: "Fig. 6",
    clauses: clauses_94,
};

/// Paper 001's applications (Figs. 3–4): `wks95-mutex`'s locks.
pub const WKS95_APPS: AppsDesign = AppsDesign {
    names: WKS95.names,
    quick_names: WKS95.quick_names,
    quantum_ms: WKS95.quantum_ms,
    conclusion: CONCLUSION_95,
    figure: "Figs. 3–4",
    clauses: clauses_95,
};

/// Runs `f` holding `lock` and returns what it returns.
fn locked<R>(lock: &dyn DynLock, f: impl FnOnce() -> R) -> R {
    let mut f = Some(f);
    let mut r = None;
    lock.with_dyn(&mut || {
        if let Some(f) = f.take() {
            r = Some(f());
        }
    });
    r.expect("the lock ran its critical section")
}

/// Whether `deadline` has passed, setting `stop` when it has.
fn past(deadline: Instant, stop: &AtomicBool) -> bool {
    // Relaxed: a stop request; the join orders everything after it.
    if stop.load(Ordering::Relaxed) {
        return true;
    }
    if Instant::now() > deadline {
        stop.store(true, Ordering::Relaxed);
        return true;
    }
    false
}

// ---------------------------------------------------------------- Cholesky

/// A sparse symmetric matrix: its lower triangle with the diagonal, by
/// columns (CSC), the diagonal first in every column and rows ascending.
#[derive(Debug, Clone)]
pub struct SparseSpd {
    n: usize,
    col_ptr: Vec<usize>,
    rows: Vec<u32>,
    vals: Vec<f64>,
}

impl SparseSpd {
    /// The stiffness-like matrix of a `nx × ny × nz` node grid (3 degrees of
    /// freedom a node, 27-point coupling), thinned at random to
    /// `117816 / 120819` of its entries (bcsstk15's count at 4 × 7 × 47),
    /// strictly diagonally dominant. Reproducible from `seed`.
    pub fn stiffness_like(mesh: (usize, usize, usize), seed: u64) -> Self {
        let (nx, ny, nz) = mesh;
        let nodes = nx * ny * nz;
        let n = nodes * DOF;
        let node = |x: usize, y: usize, z: usize| x + nx * (y + ny * z);
        // Off-diagonal couplings (row > col) per column.
        let mut cols: Vec<Vec<u32>> = vec![Vec::new(); n];
        for z in 0..nz {
            for y in 0..ny {
                for x in 0..nx {
                    let a = node(x, y, z);
                    for dz in 0..=1usize {
                        for dy in -1i64..=1 {
                            for dx in -1i64..=1 {
                                if dz == 0 && (dy < 0 || (dy == 0 && dx <= 0)) {
                                    continue;
                                }
                                let (x2, y2, z2) = (x as i64 + dx, y as i64 + dy, z + dz);
                                if x2 < 0
                                    || y2 < 0
                                    || x2 >= nx as i64
                                    || y2 >= ny as i64
                                    || z2 >= nz
                                {
                                    continue;
                                }
                                let b = node(x2 as usize, y2 as usize, z2);
                                let (lo, hi) = (a.min(b), a.max(b));
                                for i in 0..DOF {
                                    for j in 0..DOF {
                                        cols[lo * DOF + j].push((hi * DOF + i) as u32);
                                    }
                                }
                            }
                        }
                    }
                    // The node's own block, below its diagonal.
                    for j in 0..DOF {
                        for i in j + 1..DOF {
                            cols[a * DOF + j].push((a * DOF + i) as u32);
                        }
                    }
                }
            }
        }
        let off: usize = cols.iter().map(Vec::len).sum();
        // bcsstk15's density: keep 117816 - 3948 of 120819 - 3948 off-diagonal
        // entries at 4 x 7 x 47, the same fraction elsewhere.
        let full_off = 120_819 - BCSSTK15_ORDER;
        let keep_off = BCSSTK15_ENTRIES - BCSSTK15_ORDER;
        let keep = ((off as f64 * keep_off as f64 / full_off as f64).round() as usize).min(off);
        let mut rng = SplitMix64::stream(seed, 0xc401);
        // Choose which to drop: a partial Fisher-Yates over the entries' indices.
        let mut ids: Vec<u32> = (0..off as u32).collect();
        let drop = off - keep;
        for i in 0..drop {
            let k = i + (rng.next_u64() % (off - i) as u64) as usize;
            ids.swap(i, k);
        }
        let mut dropped = vec![false; off];
        for &i in &ids[..drop] {
            dropped[i as usize] = true;
        }
        let mut col_ptr = vec![0usize];
        let mut rows = Vec::with_capacity(keep + n);
        let mut vals = Vec::with_capacity(keep + n);
        let mut rowsum = vec![0.0_f64; n];
        let mut idx = 0;
        for (j, c) in cols.iter_mut().enumerate() {
            c.sort_unstable();
            rows.push(j as u32);
            vals.push(0.0);
            for &i in c.iter() {
                if !dropped[idx] {
                    let v = 2.0 * rng.next_f64() - 1.0;
                    rows.push(i);
                    vals.push(v);
                    rowsum[i as usize] += v.abs();
                    rowsum[j] += v.abs();
                }
                idx += 1;
            }
            col_ptr.push(rows.len());
        }
        for j in 0..n {
            vals[col_ptr[j]] = rowsum[j] + 1.0;
        }
        Self {
            n,
            col_ptr,
            rows,
            vals,
        }
    }

    /// The generated matrix for a scale (bcsstk15's order at 1).
    pub fn for_scale(work: f64, seed: u64) -> Self {
        let nz = ((MESH.2 as f64 * work.max(0.0)).round() as usize).max(2);
        Self::stiffness_like((MESH.0, MESH.1, nz), seed)
    }

    /// The order.
    pub fn order(&self) -> usize {
        self.n
    }

    /// Stored entries (lower triangle with the diagonal).
    pub fn entries(&self) -> usize {
        self.rows.len()
    }

    /// `A x` (both triangles).
    pub fn mul(&self, x: &[f64]) -> Vec<f64> {
        let mut y = vec![0.0; self.n];
        for j in 0..self.n {
            for p in self.col_ptr[j]..self.col_ptr[j + 1] {
                let (i, v) = (self.rows[p] as usize, self.vals[p]);
                y[i] += v * x[j];
                if i != j {
                    y[j] += v * x[i];
                }
            }
        }
        y
    }

    /// `‖A‖∞` (the largest absolute row sum, both triangles).
    pub fn norm_inf(&self) -> f64 {
        let mut s = vec![0.0_f64; self.n];
        for j in 0..self.n {
            for p in self.col_ptr[j]..self.col_ptr[j + 1] {
                let (i, v) = (self.rows[p] as usize, self.vals[p].abs());
                s[i] += v;
                if i != j {
                    s[j] += v;
                }
            }
        }
        s.into_iter().fold(0.0, f64::max)
    }
}

/// The pattern of the Cholesky factor L (by columns, the diagonal first,
/// rows ascending), A's values scattered into it, and the number of column
/// updates each column waits for.
#[derive(Debug, Clone)]
pub struct Symbolic {
    n: usize,
    col_ptr: Vec<usize>,
    rows: Vec<u32>,
    /// A's lower triangle in L's pattern (zeros where L fills in).
    init: Vec<f64>,
    /// Per column `k`: the columns `j < k` with `L[k][j] ≠ 0`.
    deps: Vec<u32>,
}

impl Symbolic {
    /// The elimination-tree symbolic factorization of `a`: column `j`'s
    /// pattern is A's column `j` joined with the patterns of its children
    /// (less the children themselves).
    pub fn of(a: &SparseSpd) -> Self {
        let n = a.n;
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut pats: Vec<Vec<u32>> = Vec::with_capacity(n);
        let mut mark = vec![usize::MAX; n];
        for j in 0..n {
            let mut pat: Vec<u32> = Vec::new();
            mark[j] = j;
            pat.push(j as u32);
            for &i in &a.rows[a.col_ptr[j] + 1..a.col_ptr[j + 1]] {
                if mark[i as usize] != j {
                    mark[i as usize] = j;
                    pat.push(i);
                }
            }
            for &c in &children[j] {
                let pc: &Vec<u32> = &pats[c];
                for &i in &pc[1..] {
                    if mark[i as usize] != j {
                        mark[i as usize] = j;
                        pat.push(i);
                    }
                }
            }
            pat[1..].sort_unstable();
            if let Some(&parent) = pat.get(1) {
                children[parent as usize].push(j);
            }
            pats.push(pat);
        }
        let mut col_ptr = Vec::with_capacity(n + 1);
        col_ptr.push(0);
        let mut rows = Vec::new();
        let mut deps = vec![0u32; n];
        for p in &pats {
            rows.extend_from_slice(p);
            col_ptr.push(rows.len());
            for &k in &p[1..] {
                deps[k as usize] += 1;
            }
        }
        let mut init = vec![0.0; rows.len()];
        for j in 0..n {
            let lr = &rows[col_ptr[j]..col_ptr[j + 1]];
            let mut q = 0;
            for p in a.col_ptr[j]..a.col_ptr[j + 1] {
                while lr[q] != a.rows[p] {
                    q += 1;
                }
                init[col_ptr[j] + q] = a.vals[p];
            }
        }
        Self {
            n,
            col_ptr,
            rows,
            init,
            deps,
        }
    }

    /// Entries of L.
    pub fn entries(&self) -> usize {
        self.rows.len()
    }

    /// Multiply-adds of the numeric factorization.
    pub fn flops(&self) -> u64 {
        (0..self.n)
            .map(|j| {
                let c = (self.col_ptr[j + 1] - self.col_ptr[j]) as u64;
                c * (c - 1) / 2
            })
            .sum()
    }

    fn col(&self, j: usize) -> std::ops::Range<usize> {
        self.col_ptr[j]..self.col_ptr[j + 1]
    }

    /// `L x` for a lower-triangular `l` in this pattern.
    fn l_mul(&self, l: &[f64], x: &[f64]) -> Vec<f64> {
        let mut y = vec![0.0; self.n];
        for (j, &xj) in x.iter().enumerate() {
            for p in self.col(j) {
                y[self.rows[p] as usize] += l[p] * xj;
            }
        }
        y
    }

    /// `Lᵀ x`.
    fn lt_mul(&self, l: &[f64], x: &[f64]) -> Vec<f64> {
        (0..self.n)
            .map(|j| self.col(j).map(|p| l[p] * x[self.rows[p] as usize]).sum())
            .collect()
    }
}

/// One numeric factorization in progress: what its workers share.
pub struct Factor<'a> {
    sym: &'a Symbolic,
    /// L's values (f64 bits). Relaxed loads and stores: column `k` is written
    /// only holding `k`'s lock, and read (divided, then used for updates) only
    /// by the worker that took it from the queue after its last update — the
    /// column lock's release/acquire, then the queue lock's, order them.
    vals: Vec<AtomicU64>,
    /// Updates column `k` still waits for (under `k`'s lock).
    remaining: Vec<AtomicU32>,
    /// Whether column `j` is final (set after its division).
    finished: Vec<AtomicBool>,
    col_locks: Vec<Box<dyn DynLock>>,
    queue_lock: Box<dyn DynLock>,
    /// The FIFO of ready columns: `queue[head..tail]`, under `queue_lock`
    /// (each column enters once, so no wrap-around).
    queue: Vec<AtomicU32>,
    head: AtomicUsize,
    tail: AtomicUsize,
    /// Columns taken and not yet recorded done (under `queue_lock`).
    in_hand: AtomicUsize,
    /// Columns recorded done (stored under `queue_lock`).
    done: AtomicUsize,
    deadline: Instant,
    stop: AtomicBool,
    error: OnceLock<String>,
}

impl<'a> Factor<'a> {
    /// A factorization of `sym` with locks from `make`, stopping at `cap`
    /// after construction.
    pub fn new(sym: &'a Symbolic, make: fn() -> Box<dyn DynLock>, cap: Duration) -> Self {
        let n = sym.n;
        let queue: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
        let mut tail = 0;
        for (k, &d) in sym.deps.iter().enumerate() {
            if d == 0 {
                queue[tail].store(k as u32, Ordering::Relaxed);
                tail += 1;
            }
        }
        Self {
            sym,
            vals: sym
                .init
                .iter()
                .map(|v| AtomicU64::new(v.to_bits()))
                .collect(),
            remaining: sym.deps.iter().map(|&d| AtomicU32::new(d)).collect(),
            finished: (0..n).map(|_| AtomicBool::new(false)).collect(),
            col_locks: (0..n).map(|_| make()).collect(),
            queue_lock: make(),
            queue,
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(tail),
            in_hand: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            deadline: Instant::now() + cap,
            stop: AtomicBool::new(false),
            error: OnceLock::new(),
        }
    }

    fn get(&self, p: usize) -> f64 {
        f64::from_bits(self.vals[p].load(Ordering::Relaxed))
    }

    fn set(&self, p: usize, v: f64) {
        self.vals[p].store(v.to_bits(), Ordering::Relaxed);
    }

    /// Records the previous column done (if any) and takes the next ready
    /// one: one acquisition of the queue lock.
    fn next(&self, finished_one: bool) -> Step {
        locked(&*self.queue_lock, || {
            // Relaxed loads and stores: all under the queue lock.
            let mut in_hand = self.in_hand.load(Ordering::Relaxed);
            if finished_one {
                in_hand -= 1;
                let d = self.done.load(Ordering::Relaxed);
                self.done.store(d + 1, Ordering::Relaxed);
            }
            let (h, t) = (
                self.head.load(Ordering::Relaxed),
                self.tail.load(Ordering::Relaxed),
            );
            let step = if h < t {
                self.head.store(h + 1, Ordering::Relaxed);
                in_hand += 1;
                Step::Task(self.queue[h].load(Ordering::Relaxed) as usize)
            } else if self.done.load(Ordering::Relaxed) == self.sym.n {
                Step::Done
            } else if in_hand == 0 {
                Step::Lost
            } else {
                Step::Empty
            };
            self.in_hand.store(in_hand, Ordering::Relaxed);
            step
        })
    }

    fn push(&self, k: usize) {
        locked(&*self.queue_lock, || {
            let t = self.tail.load(Ordering::Relaxed);
            self.queue[t].store(k as u32, Ordering::Relaxed);
            self.tail.store(t + 1, Ordering::Relaxed);
        });
    }

    /// Divides column `j` by the square root of its diagonal and updates
    /// every column below it.
    fn column(&self, j: usize) {
        let sym = self.sym;
        let cj = sym.col(j);
        let d = self.get(cj.start).sqrt();
        self.set(cj.start, d);
        for p in cj.start + 1..cj.end {
            self.set(p, self.get(p) / d);
        }
        self.finished[j].store(true, Ordering::Relaxed);
        for p in cj.start + 1..cj.end {
            let k = sym.rows[p] as usize;
            let ljk = self.get(p);
            let ck = sym.col(k);
            let ready = locked(&*self.col_locks[k], || {
                // Column j's rows from k on are a subset of column k's: walk both.
                let mut q = ck.start;
                for s in p..cj.end {
                    let i = sym.rows[s];
                    while sym.rows[q] != i {
                        q += 1;
                    }
                    self.set(q, self.get(q) - self.get(s) * ljk);
                }
                let r = self.remaining[k].load(Ordering::Relaxed) - 1;
                self.remaining[k].store(r, Ordering::Relaxed);
                r == 0
            });
            if ready {
                self.push(k);
            }
        }
    }

    /// One worker: takes columns until all are done, the cap passes, or a
    /// column is found lost.
    pub fn worker(&self) {
        let mut had = false;
        loop {
            match self.next(had) {
                Step::Task(j) => {
                    self.column(j);
                    had = true;
                }
                Step::Done => return,
                Step::Lost => {
                    let _ = self.error.set(format!(
                        "a column was lost: the queue is empty, no worker holds one, and {} of {} are done",
                        self.done.load(Ordering::Relaxed),
                        self.sym.n
                    ));
                    self.stop.store(true, Ordering::Relaxed);
                    return;
                }
                Step::Empty => {
                    had = false;
                    // Wait for a column without taking the lock.
                    while self.head.load(Ordering::Relaxed) >= self.tail.load(Ordering::Relaxed)
                        && self.done.load(Ordering::Relaxed) < self.sym.n
                        && !past(self.deadline, &self.stop)
                    {
                        std::hint::spin_loop();
                    }
                }
            }
            if past(self.deadline, &self.stop) {
                return;
            }
        }
    }

    /// The fraction of the columns finished.
    pub fn fraction_done(&self) -> f64 {
        let f = self
            .finished
            .iter()
            .filter(|f| f.load(Ordering::Relaxed))
            .count();
        f as f64 / self.sym.n.max(1) as f64
    }

    /// L's values as they stand, and which columns are final.
    pub fn into_parts(self) -> (Vec<f64>, Vec<bool>, Option<String>) {
        (
            self.vals
                .into_iter()
                .map(|v| f64::from_bits(v.into_inner()))
                .collect(),
            self.finished
                .into_iter()
                .map(AtomicBool::into_inner)
                .collect(),
            self.error.into_inner(),
        )
    }
}

/// What a worker does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Work on this task.
    Task(usize),
    /// Nothing ready now; more will come.
    Empty,
    /// All done.
    Done,
    /// Nothing ready, nothing in hand, not done: a task was lost.
    Lost,
}

/// A Cholesky problem: the matrix, its symbolic factorization and the
/// one-thread reference factor.
#[derive(Debug, Clone)]
pub struct Cholesky {
    /// The matrix.
    pub a: SparseSpd,
    /// Its symbolic factorization.
    pub sym: Symbolic,
    /// The one-thread factor (checked by its residual).
    pub reference: Vec<f64>,
    /// The one-thread factorization's time (s).
    pub seq_s: f64,
    /// The random vector of the residual check, and `A x`.
    x: Vec<f64>,
    ax: Vec<f64>,
    a_norm: f64,
}

impl Cholesky {
    /// Generates the matrix, factors it symbolically and on one thread.
    pub fn new(work: f64, seed: u64, make: fn() -> Box<dyn DynLock>) -> anyhow::Result<Self> {
        let a = SparseSpd::for_scale(work, seed);
        let sym = Symbolic::of(&a);
        let mut rng = SplitMix64::stream(seed, 0x7e57);
        let x: Vec<f64> = (0..a.n).map(|_| 2.0 * rng.next_f64() - 1.0).collect();
        let ax = a.mul(&x);
        let a_norm = a.norm_inf();
        let mut c = Self {
            a,
            sym,
            reference: Vec::new(),
            seq_s: 0.0,
            x,
            ax,
            a_norm,
        };
        let f = Factor::new(&c.sym, make, Duration::from_secs(3600));
        let t = Instant::now();
        f.worker();
        c.seq_s = t.elapsed().as_secs_f64();
        let (l, fin, err) = f.into_parts();
        if let Some(e) = err {
            anyhow::bail!("the one-thread Cholesky factorization failed: {e}");
        }
        anyhow::ensure!(
            fin.iter().all(|&f| f),
            "the one-thread Cholesky factorization did not finish"
        );
        let r = c.residual(&l);
        if r.is_nan() || r > RESIDUAL_BOUND {
            anyhow::bail!(
                "the one-thread Cholesky factor of order {} has residual {r:e} (bound {RESIDUAL_BOUND:e}): the reference is unusable",
                c.a.n
            );
        }
        c.reference = l;
        Ok(c)
    }

    /// `‖L(Lᵀx) − Ax‖∞ / (‖A‖∞‖x‖∞)`; NaN when L has a NaN.
    pub fn residual(&self, l: &[f64]) -> f64 {
        if l.iter().any(|v| !v.is_finite()) {
            return f64::NAN;
        }
        let y = self.sym.lt_mul(l, &self.x);
        let z = self.sym.l_mul(l, &y);
        let r = z
            .iter()
            .zip(&self.ax)
            .fold(0.0_f64, |m, (a, b)| m.max((a - b).abs()));
        let xn = self.x.iter().fold(0.0_f64, |m, v| m.max(v.abs()));
        r / (self.a_norm * xn)
    }

    /// Checks a factor: every finished column against the reference, and a
    /// complete one by its residual. `Ok` gives (agreement, residual if
    /// complete).
    pub fn check(&self, l: &[f64], finished: &[bool]) -> Result<(f64, Option<f64>), String> {
        let scale = self
            .reference
            .iter()
            .fold(0.0_f64, |m, v| m.max(v.abs()))
            .max(f64::MIN_POSITIVE);
        let mut diff = 0.0_f64;
        for (j, _) in finished.iter().enumerate().filter(|(_, f)| **f) {
            for p in self.sym.col(j) {
                let d = (l[p] - self.reference[p]).abs();
                diff = if d.is_nan() { f64::NAN } else { diff.max(d) };
            }
        }
        let diff = diff / scale;
        if diff.is_nan() || diff > AGREEMENT_BOUND {
            return Err(format!(
                "max |L - L_ref| / max |L_ref| over the finished columns = {diff:e} (bound {AGREEMENT_BOUND:e})"
            ));
        }
        if finished.iter().all(|&f| f) {
            let r = self.residual(l);
            if r.is_nan() || r > RESIDUAL_BOUND {
                return Err(format!(
                    "residual |L(L^T x) - Ax| / (|A| |x|) = {r:e} (bound {RESIDUAL_BOUND:e})"
                ));
            }
            return Ok((diff, Some(r)));
        }
        Ok((diff, None))
    }
}

// --------------------------------------------------------------- quicksort

/// Sum, sum of squares and xor of a multiset of integers: equal for
/// permutations of each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Checksum {
    sum: u64,
    squares: u64,
    xor: u32,
}

impl Checksum {
    /// Of `v`.
    pub fn of(v: impl IntoIterator<Item = u32>) -> Self {
        let mut c = Self::default();
        for x in v {
            let w = u64::from(x);
            c.sum = c.sum.wrapping_add(w);
            c.squares = c.squares.wrapping_add(w.wrapping_mul(w));
            c.xor ^= x;
        }
        c
    }
}

/// One parallel sort in progress: what its workers share.
pub struct Sort {
    /// The array. Relaxed loads and stores: an interval belongs to the one
    /// worker that took it (or split it off) — the stack lock's
    /// release/acquire orders a pushed interval's contents before its taker.
    data: Vec<AtomicU32>,
    lock: Box<dyn DynLock>,
    /// The stack of intervals (`lo << 32 | hi`), `stack[..top]`, under `lock`.
    stack: Vec<AtomicU64>,
    top: AtomicUsize,
    /// Intervals taken and not yet recorded done (under `lock`).
    in_hand: AtomicUsize,
    /// Elements in sorted intervals recorded done (stored under `lock`).
    done: AtomicUsize,
    deadline: Instant,
    stop: AtomicBool,
    error: OnceLock<String>,
}

impl Sort {
    /// A sort of `input` with a lock from `make`, stopping at `cap`.
    pub fn new(input: &[u32], make: fn() -> Box<dyn DynLock>, cap: Duration) -> Self {
        let n = input.len();
        let stack: Vec<AtomicU64> = (0..n / (SORT_CUTOFF + 1) + 2)
            .map(|_| AtomicU64::new(0))
            .collect();
        stack[0].store(n as u64, Ordering::Relaxed);
        Self {
            data: input.iter().map(|&v| AtomicU32::new(v)).collect(),
            lock: make(),
            stack,
            top: AtomicUsize::new(1),
            in_hand: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            deadline: Instant::now() + cap,
            stop: AtomicBool::new(false),
            error: OnceLock::new(),
        }
    }

    fn get(&self, i: usize) -> u32 {
        self.data[i].load(Ordering::Relaxed)
    }

    fn set(&self, i: usize, v: u32) {
        self.data[i].store(v, Ordering::Relaxed);
    }

    /// Records `sorted` elements done (after a task) and takes the next
    /// interval: one acquisition of the lock.
    fn next(&self, finished: Option<usize>) -> (Step, (usize, usize)) {
        let n = self.data.len();
        locked(&*self.lock, || {
            // Relaxed loads and stores: all under the lock.
            let mut in_hand = self.in_hand.load(Ordering::Relaxed);
            let mut done = self.done.load(Ordering::Relaxed);
            if let Some(s) = finished {
                in_hand -= 1;
                done += s;
                self.done.store(done, Ordering::Relaxed);
            }
            let t = self.top.load(Ordering::Relaxed);
            let mut iv = (0, 0);
            let step = if t > 0 {
                self.top.store(t - 1, Ordering::Relaxed);
                let w = self.stack[t - 1].load(Ordering::Relaxed);
                iv = ((w >> 32) as usize, (w & 0xffff_ffff) as usize);
                in_hand += 1;
                Step::Task(0)
            } else if done == n {
                Step::Done
            } else if in_hand == 0 {
                Step::Lost
            } else {
                Step::Empty
            };
            self.in_hand.store(in_hand, Ordering::Relaxed);
            (step, iv)
        })
    }

    fn push(&self, lo: usize, hi: usize) {
        locked(&*self.lock, || {
            let t = self.top.load(Ordering::Relaxed);
            self.stack[t].store(((lo as u64) << 32) | hi as u64, Ordering::Relaxed);
            self.top.store(t + 1, Ordering::Relaxed);
        });
    }

    /// Sorts `[lo, hi)` on this worker.
    fn small(&self, lo: usize, hi: usize) {
        let mut v: Vec<u32> = (lo..hi).map(|i| self.get(i)).collect();
        v.sort_unstable();
        for (i, x) in (lo..hi).zip(v) {
            self.set(i, x);
        }
    }

    /// Hoare's partition of `[lo, hi)` (at least 3 long) around the median
    /// of its first, middle and last: returns `m` with every element of
    /// `[lo, m)` ≤ every element of `[m, hi)`, `lo < m < hi`.
    fn partition(&self, lo: usize, hi: usize) -> usize {
        let (a, b, c) = (self.get(lo), self.get(lo + (hi - lo) / 2), self.get(hi - 1));
        let p = a.max(b).min(a.min(b).max(c));
        let (mut i, mut j) = (lo, hi - 1);
        loop {
            while self.get(i) < p {
                i += 1;
            }
            while self.get(j) > p {
                j -= 1;
            }
            if i >= j {
                return j + 1;
            }
            let (x, y) = (self.get(i), self.get(j));
            self.set(i, y);
            self.set(j, x);
            i += 1;
            j -= 1;
        }
    }

    /// Works on `[lo, hi)`: partitions, pushes the right part, goes on with
    /// the left. Returns the elements it sorted, or `None` when the cap passed.
    fn task(&self, lo: usize, hi: usize) -> Option<usize> {
        let mut sorted = 0;
        let mut hi = hi;
        loop {
            if hi - lo <= SORT_CUTOFF {
                self.small(lo, hi);
                return Some(sorted + hi - lo);
            }
            let m = self.partition(lo, hi);
            if hi - m <= SORT_CUTOFF {
                self.small(m, hi);
                sorted += hi - m;
            } else {
                self.push(m, hi);
            }
            hi = m;
            if past(self.deadline, &self.stop) {
                return None;
            }
        }
    }

    /// One worker: takes intervals until all are sorted, the cap passes, or
    /// an interval is found lost.
    pub fn worker(&self) {
        let mut finished = None;
        loop {
            let (step, (lo, hi)) = self.next(finished.take());
            match step {
                Step::Task(_) => match self.task(lo, hi) {
                    Some(s) => finished = Some(s),
                    None => return,
                },
                Step::Done => return,
                Step::Lost => {
                    let _ = self.error.set(format!(
                        "an interval was lost: the stack is empty, no worker holds one, and {} of {} elements are sorted",
                        self.done.load(Ordering::Relaxed),
                        self.data.len()
                    ));
                    self.stop.store(true, Ordering::Relaxed);
                    return;
                }
                Step::Empty => {
                    while self.top.load(Ordering::Relaxed) == 0
                        && self.done.load(Ordering::Relaxed) < self.data.len()
                        && !past(self.deadline, &self.stop)
                    {
                        std::hint::spin_loop();
                    }
                }
            }
            if past(self.deadline, &self.stop) {
                return;
            }
        }
    }

    /// The array as it stands, the fraction sorted, and a lost interval's error.
    pub fn into_parts(self) -> (Vec<u32>, f64, Option<String>) {
        let n = self.data.len().max(1);
        let done = self.done.into_inner();
        (
            self.data.into_iter().map(AtomicU32::into_inner).collect(),
            done as f64 / n as f64,
            self.error.into_inner(),
        )
    }
}

/// A quicksort problem: the input, its checksum and its sorted reference.
#[derive(Debug, Clone)]
pub struct Quicksort {
    /// The integers to sort.
    pub input: Vec<u32>,
    /// The input sorted by `sort_unstable`.
    pub sorted: Vec<u32>,
    /// The input's checksum.
    pub sum: Checksum,
    /// `sort_unstable`'s time on one thread (s).
    pub seq_s: f64,
}

impl Quicksort {
    /// `n` random integers from `seed`.
    pub fn new(n: usize, seed: u64) -> Self {
        let mut rng = SplitMix64::stream(seed, 0x9050);
        let input: Vec<u32> = (0..n).map(|_| rng.next_u64() as u32).collect();
        let mut sorted = input.clone();
        let t = Instant::now();
        sorted.sort_unstable();
        let seq_s = t.elapsed().as_secs_f64();
        Self {
            sum: Checksum::of(input.iter().copied()),
            input,
            sorted,
            seq_s,
        }
    }

    /// Checks an output: a permutation of the input always, and equal to
    /// the input sorted when `complete`.
    pub fn check(&self, out: &[u32], complete: bool) -> Result<(), String> {
        if out.len() != self.input.len() || Checksum::of(out.iter().copied()) != self.sum {
            return Err("the array is no longer a permutation of the input (sum, sum of squares or xor differ)".into());
        }
        if complete {
            if let Some(i) = out.windows(2).position(|w| w[0] > w[1]) {
                return Err(format!(
                    "not sorted: element {i} ({}) > element {} ({})",
                    out[i],
                    i + 1,
                    out[i + 1]
                ));
            }
            if out != self.sorted.as_slice() {
                return Err("sorted, but not the input's multiset".into());
            }
        }
        Ok(())
    }
}

// -------------------------------------------------------------- experiment

/// Both problems of a run.
struct Problems {
    chol: Cholesky,
    sort: Quicksort,
}

/// What one trial measured: (fraction done, the check's note).
fn one_trial(
    probs: &Problems,
    app: usize,
    imp: &LockImpl,
    cap: Duration,
    env: &crate::env::PointEnv,
    worst: &mut [f64; 2],
) -> anyhow::Result<(f64, crate::env::Outcome)> {
    if app == 0 {
        let f = Factor::new(&probs.chol.sym, imp.boxed, cap);
        let o = env.run(&|_| f.worker())?;
        let done = f.fraction_done();
        let (l, fin, err) = f.into_parts();
        if let Some(e) = err {
            anyhow::bail!("cholesky with {}: {e}", imp.name);
        }
        let (d, r) = probs
            .chol
            .check(&l, &fin)
            .map_err(|e| anyhow::anyhow!("cholesky with {}: wrong answer: {e}", imp.name))?;
        worst[0] = worst[0].max(d).max(r.unwrap_or(0.0));
        Ok((done, o))
    } else {
        let s = Sort::new(&probs.sort.input, imp.boxed, cap);
        let o = env.run(&|_| s.worker())?;
        let (out, done, err) = s.into_parts();
        if let Some(e) = err {
            anyhow::bail!("quicksort with {}: {e}", imp.name);
        }
        probs
            .sort
            .check(&out, done >= 1.0)
            .map_err(|e| anyhow::anyhow!("quicksort with {}: wrong answer: {e}", imp.name))?;
        Ok((done, o))
    }
}

/// Runs `wks94-apps` or `wks95-apps`.
pub fn run(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let des = if exp.paper == "wks94" {
        &WKS94_APPS
    } else {
        &WKS95_APPS
    };
    let procs = p
        .procs
        .as_ref()
        .and_then(|v| v.first().copied())
        .unwrap_or(p.cores);
    let mps = p.mp.clone().unwrap_or_else(|| vec![2.0]);
    let quantum = p.quantum(des.quantum_ms);
    let work = p.scale;
    let chol_work = work * if p.quick { QUICK_CHOLESKY_WORK } else { 1.0 };
    let table = select(if p.quick { des.quick_names } else { des.names });
    let tas_b = table
        .iter()
        .find(|i| i.name == "TAS-B")
        .ok_or_else(|| anyhow::anyhow!("{}: no TAS-B row in the lock table", exp.id))?;
    let probs = Problems {
        chol: Cholesky::new(chol_work, p.seed, tas_b.boxed)?,
        sort: Quicksort::new(((BASE_INTS * work).round() as usize).max(1000), p.seed),
    };
    let (cap_factor, cap_min) = if p.quick {
        (QUICK_CAP_FACTOR, QUICK_CAP_MIN_S)
    } else {
        (CAP_FACTOR, CAP_MIN_S)
    };
    let caps = [probs.chol.seq_s, probs.sort.seq_s]
        .map(|s| Duration::from_secs_f64((cap_factor * s).max(cap_min)));
    let mut d = Design::single(
        "multiprogramming level",
        "seconds",
        Better::Lower,
        mps.clone(),
        mutex_imps(&table),
        p.trials,
    )
    .baseline("TAS-B");
    d.panels = APPS.iter().map(|a| Panel::new(*a, mps.clone())).collect();
    let mut envs = PointEnvs::new(preempt, quantum, p.seed);
    let mut censored = Vec::new();
    let mut checked = [0usize; 2];
    let mut worst = [0.0_f64; 2];
    let started = Instant::now();
    let trials = model::collect(exp.id, &d, &mut |c: &Cell<'_>| {
        let imp = table
            .iter()
            .find(|i| i.name == c.imp.name)
            .ok_or_else(|| anyhow::anyhow!("no lock named {}", c.imp.name))?;
        let xi = mps.iter().position(|&m| m == c.x).unwrap_or(0);
        let env = envs.at(c, c.panel * mps.len() + xi, procs, c.x)?;
        let (done, o) = one_trial(&probs, c.panel, imp, caps[c.panel], env, &mut worst)?;
        checked[c.panel] += 1;
        let censored_at = (done < 1.0).then_some(done);
        if censored_at.is_some() {
            censored.push(format!(
                "{} {} at MP {} (trial {}: {:.0}% done in {:.2} s)",
                APPS[c.panel],
                imp.name,
                model::fmt_x(c.x),
                c.trial,
                100.0 * done,
                o.wall.as_secs_f64()
            ));
        }
        Ok(Some(Trial {
            value: o.wall.as_secs_f64() / done.max(1e-9),
            censored_at,
            preemptions: o.preemptions,
            warnings: o.warnings,
            mp: Some(c.x),
            procs: Some(procs),
            finish_spread: Some(o.finish_spread),
            ..Trial::default()
        }))
    })?;
    envs.close();
    let multiprogrammed = preempt != Preempt::None && procs >= 2;
    let top_mp = mps.iter().copied().fold(0.0, f64::max);
    let clauses = if preempt == Preempt::None {
        Vec::new()
    } else {
        (0..APPS.len())
            .flat_map(|k| (des.clauses)(k, des.figure, multiprogrammed && top_mp > 1.0))
            .collect()
    };
    let ch = &probs.chol;
    let mut notes = Vec::new();
    if preempt == Preempt::None {
        notes
            .push("--preempt none: no multiprogramming, so the conclusion is not evaluated".into());
    }
    notes.push(format!(
        "rules: \"disastrous\" = at least {COLLAPSE}x TAS-B-np's time; \"ties\" = within {TIE}x; \"beats\" = a lower time; judged at the most multiprogrammed point of each application"
    ));
    notes.push(format!(
        "matrix: bcsstk15 is not on this machine (no network; no Debian package ships the Harwell-Boeing collection); generated instead: a {}x{}x{} node grid, 3 dof per node, 27-point coupling, thinned to bcsstk15's density: order {} (bcsstk15: {BCSSTK15_ORDER}), {} stored entries (bcsstk15: {BCSSTK15_ENTRIES}); L has {} entries, {} multiply-adds",
        MESH.0,
        MESH.1,
        ch.a.order() / (MESH.0 * MESH.1 * DOF),
        ch.a.order(),
        ch.a.entries(),
        ch.sym.entries(),
        ch.sym.flops()
    ));
    notes.push(format!(
        "answers: cholesky: all {} runs' finished columns matched the one-thread factor and every complete run's residual |L(L^T x) - Ax| / (|A| |x|) was within {RESIDUAL_BOUND:.0e} (worst of both {:.1e}; one-thread factorization {:.1} ms); quicksort: all {} runs of {} integers stayed a permutation of the input and every complete one equalled the input sorted (sort_unstable on one thread {:.1} ms)",
        checked[0],
        worst[0],
        ch.seq_s * 1e3,
        checked[1],
        probs.sort.input.len(),
        probs.sort.seq_s * 1e3
    ));
    if !censored.is_empty() {
        notes.push(format!(
            "censored: {} run(s) hit the time cap ({cap_factor}x the one-thread time, at least {cap_min} s); their times are extrapolated from the fraction done: {}",
            censored.len(),
            censored.join("; ")
        ));
    }
    let points = model::summarize(&d, &trials);
    let r = Results::new(&d, &points, &trials);
    notes.extend(observations(&r));
    let params = serde_json::json!({
        "processors": procs,
        "mp": mps,
        "quantum_ms": quantum.as_secs_f64() * 1e3,
        "cholesky": {
            "generated": true,
            "mesh_nodes": [MESH.0, MESH.1, ch.a.order() / (MESH.0 * MESH.1 * DOF)],
            "dof_per_node": DOF,
            "order": ch.a.order(),
            "stored_entries": ch.a.entries(),
            "factor_entries": ch.sym.entries(),
            "multiply_adds": ch.sym.flops(),
            "one_thread_s": ch.seq_s,
            "time_cap_s": caps[0].as_secs_f64(),
        },
        "quicksort": {
            "integers": probs.sort.input.len(),
            "cutoff": SORT_CUTOFF,
            "sort_unstable_s": probs.sort.seq_s,
            "time_cap_s": caps[1].as_secs_f64(),
        },
        "implementations": table.iter().map(|i| i.name).collect::<Vec<_>>(),
    });
    let v = Verdicts {
        conclusion: des.conclusion.into(),
        clauses,
        notes,
        ..Verdicts::default()
    };
    let (mut rec, svg) = model::finish(exp, p, preempt, &d, trials, v, params, started);
    rec.unit = "seconds per run (lower is better)".into();
    rec.extra = serde_json::json!({ "scheduler_per_point": envs.sched });
    Ok((rec, svg))
}

/// The fastest lock of each application at its last point, and the fastest peer.
fn observations(r: &Results<'_>) -> Vec<String> {
    let mut notes = Vec::new();
    for (k, app) in APPS.iter().enumerate() {
        let x = r.last_x(k);
        if let Some((b, bv)) = r.best_of(&[], k, x) {
            let peer = r
                .ranked(model::Role::Peer, Some("mutex"), k, x)
                .first()
                .map(|(i, v)| format!("; fastest peer {} {}x", i.name, sig3(v / bv)))
                .unwrap_or_default();
            notes.push(format!(
                "observation: {app} at MP {}: fastest {} ({} s){peer}",
                model::fmt_x(x),
                b.name,
                sig3(bv)
            ));
        }
    }
    notes
}

/// "`name` / TAS-B-np ≥ [`COLLAPSE`]" (or ≤ [`TIE`]) in panel `k`.
fn against_np(
    k: usize,
    name: &'static str,
    collapses: bool,
    paper: String,
    eligible: bool,
) -> Clause {
    let word = if collapses {
        format!("is disastrous (≥ {COLLAPSE}× TAS-B-np's time)")
    } else {
        format!("ties TAS-B-np (≤ {TIE}× its time)")
    };
    Clause::new(
        format!("{}: {name} {word}", APPS[k]),
        Some(&paper),
        move |r| {
            let x = r.last_x(k);
            let at = r.at(k, x);
            if !eligible {
                return Judged {
                    at,
                    ours: "needs at least 2 processors at an MP level above 1".into(),
                    holds: Some(false),
                };
            }
            match (r.value(name, k, x), r.value("TAS-B-np", k, x)) {
                (Some(v), Some(np)) => {
                    let q = v / np;
                    Judged {
                        at,
                        ours: format!(
                            "{name} / TAS-B-np = {}{}",
                            sig3(q),
                            model::censored_mark(r, &[name, "TAS-B-np"], k, x)
                        ),
                        holds: Some(if collapses { q >= COLLAPSE } else { q <= TIE }),
                    }
                }
                _ => unmeasured(at, &format!("{name} or TAS-B-np has no value")),
            }
        },
    )
}

/// 003's clauses for application `k`.
pub fn clauses_94(k: usize, figure: &'static str, eligible: bool) -> Vec<Clause> {
    let bad = format!(
        "naive queuing of preemptable processes is disastrous ({figure}, 11-processor SGI and 63-processor KSR 1, MP 2)"
    );
    let tie = format!(
        "Smart-Q ties TAS-B-np and Native-np on the SGI, and beats TAS-B-np in quicksort on the KSR 1 ({figure}, MP 2)"
    );
    vec![
        against_np(k, "Queued", true, bad.clone(), eligible),
        against_np(k, "Queued-np", true, bad, eligible),
        against_np(k, "Smart-Q", false, tie, eligible),
    ]
}

/// 001's clauses for application `k`: Ticket-np beats Ticket by at least
/// [`TICKET_WIN`], and the best scheduler-conscious lock beats the best
/// scheduler-oblivious one.
pub fn clauses_95(k: usize, _figure: &'static str, eligible: bool) -> Vec<Clause> {
    let fig = if k == 0 { "Fig. 3" } else { "Fig. 4" };
    let ticket = Clause::new(
        format!("{}: Ticket / Ticket-np ≥ {TICKET_WIN}", APPS[k]),
        Some(&format!(
            "results similar to the lock program's (more than 10x) for the real applications ({fig}, 63-processor KSR 1, MP 2)"
        )),
        move |r| {
            let x = r.last_x(k);
            let at = r.at(k, x);
            if !eligible {
                return Judged {
                    at,
                    ours: "needs at least 2 processors at an MP level above 1".into(),
                    holds: Some(false),
                };
            }
            match (r.value("Ticket", k, x), r.value("Ticket-np", k, x)) {
                (Some(t), Some(np)) => Judged {
                    at,
                    ours: format!(
                        "Ticket / Ticket-np = {}{}",
                        sig3(t / np),
                        model::censored_mark(r, &["Ticket", "Ticket-np"], k, x)
                    ),
                    holds: Some(t / np >= TICKET_WIN),
                },
                _ => unmeasured(at, "Ticket and Ticket-np were not both measured"),
            }
        },
    );
    let win = Clause::new(
        format!(
            "{}: the fastest scheduler-conscious lock ({}) beats every scheduler-oblivious one ({})",
            APPS[k],
            CONSCIOUS.join(", "),
            OBLIVIOUS.join(", ")
        ),
        Some(&format!(
            "the scheduler-conscious locks win ({fig}, 63-processor KSR 1, MP 2)"
        )),
        move |r| {
            let x = r.last_x(k);
            let at = r.at(k, x);
            if !eligible {
                return Judged {
                    at,
                    ours: "needs at least 2 processors at an MP level above 1".into(),
                    holds: Some(false),
                };
            }
            match (r.best_of(&CONSCIOUS, k, x), r.best_of(&OBLIVIOUS, k, x)) {
                (Some((c, cv)), Some((o, ov))) => Judged {
                    at,
                    ours: format!(
                        "{} {} s vs {} {} s ({}x){}",
                        c.name,
                        sig3(cv),
                        o.name,
                        sig3(ov),
                        sig3(ov / cv),
                        model::censored_mark(r, &[&c.name, &o.name], k, x)
                    ),
                    holds: Some(cv < ov),
                },
                _ => unmeasured(at, "no scheduler-conscious or no scheduler-oblivious lock"),
            }
        },
    );
    vec![ticket, win]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Imp;
    use crate::output::{Point, Status, Verdict};

    fn tas_b() -> fn() -> Box<dyn DynLock> {
        select(&["TAS-B"])
            .into_iter()
            .find(|i| i.name == "TAS-B")
            .expect("row")
            .boxed
    }

    /// Runs `work` on `threads` plain threads.
    fn on_threads(threads: usize, work: &(dyn Fn() + Sync)) {
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(work);
            }
        });
    }

    #[test]
    fn the_generated_matrix_has_bcsstk15s_order_and_entries() {
        let a = SparseSpd::for_scale(1.0, 1);
        assert_eq!((a.order(), a.entries()), (BCSSTK15_ORDER, BCSSTK15_ENTRIES));
        // Diagonal first, rows ascending, strictly diagonally dominant.
        let mut off = vec![0.0_f64; a.n];
        for j in 0..a.n {
            let c = &a.rows[a.col_ptr[j]..a.col_ptr[j + 1]];
            assert_eq!(c[0] as usize, j);
            assert!(c.windows(2).all(|w| w[0] < w[1]), "column {j}");
            for p in a.col_ptr[j] + 1..a.col_ptr[j + 1] {
                off[a.rows[p] as usize] += a.vals[p].abs();
                off[j] += a.vals[p].abs();
            }
        }
        for (j, o) in off.iter().enumerate() {
            assert!(a.vals[a.col_ptr[j]] > *o, "row {j}");
        }
        // A smaller scale shortens the grid's long side.
        assert_eq!(SparseSpd::for_scale(0.3, 1).order(), 4 * 7 * 14 * 3);
    }

    #[test]
    fn the_factor_checker_rejects_a_wrong_factor() {
        let c = Cholesky::new(0.1, 3, tas_b()).expect("reference");
        let all = vec![true; c.a.n];
        let (d, r) = c.check(&c.reference, &all).expect("the reference");
        assert_eq!(d, 0.0);
        assert!(r.is_some_and(|r| r <= RESIDUAL_BOUND));
        let mut bad = c.reference.clone();
        let p = c.sym.col_ptr[c.a.n / 2] + 1;
        bad[p] += 1e-6;
        assert!(c.check(&bad, &all).is_err());
        // Unfinished columns are not compared; finished ones are.
        let mut some = all.clone();
        some[c.a.n / 2] = false;
        assert!(c.check(&bad, &some).expect("partial").1.is_none());
        // A wrong finished column of a partial factor: only the comparison
        // with the reference can tell.
        let mut other = all.clone();
        other[0] = false;
        assert!(c.check(&bad, &other).unwrap_err().contains("L_ref"));
        bad[p] = f64::NAN;
        assert!(c.check(&bad, &all).is_err());
        // The residual alone notices a wrong factor.
        let mut l = c.reference.clone();
        l[p] *= 1.001;
        assert!(c.residual(&l) > RESIDUAL_BOUND);
    }

    #[test]
    #[cfg_attr(miri, ignore = "spawns threads: too slow under Miri")]
    fn the_parallel_factor_matches_the_reference() {
        let c = Cholesky::new(0.15, 5, tas_b()).expect("reference");
        for threads in [2, 3] {
            let f = Factor::new(&c.sym, tas_b(), Duration::from_secs(60));
            on_threads(threads, &|| f.worker());
            assert_eq!(f.fraction_done(), 1.0);
            let (l, fin, err) = f.into_parts();
            assert_eq!(err, None);
            let (_, r) = c.check(&l, &fin).expect("right answer");
            assert!(r.is_some());
        }
    }

    #[test]
    fn a_lost_column_fails_loudly() {
        let c = Cholesky::new(0.05, 5, tas_b()).expect("reference");
        let f = Factor::new(&c.sym, tas_b(), Duration::from_secs(2));
        // Empty the queue before anyone starts: nothing can become ready.
        f.head
            .store(f.tail.load(Ordering::Relaxed), Ordering::Relaxed);
        f.worker();
        let (_, _, err) = f.into_parts();
        assert!(err.is_some_and(|e| e.contains("lost")));
    }

    #[test]
    fn the_sort_checker_rejects_wrong_output() {
        let q = Quicksort::new(5000, 9);
        q.check(&q.sorted, true).expect("sorted");
        q.check(&q.input, false).expect("a permutation");
        assert!(q.check(&q.input, true).unwrap_err().contains("not sorted"));
        let mut bad = q.sorted.clone();
        bad[10] = bad[11];
        assert!(q.check(&bad, true).unwrap_err().contains("permutation"));
        assert!(q.check(&bad, false).is_err());
        assert!(q.check(&q.sorted[1..], false).is_err());
    }

    #[test]
    #[cfg_attr(miri, ignore = "spawns threads: too slow under Miri")]
    fn the_parallel_sort_sorts() {
        let q = Quicksort::new(100_000, 4);
        for threads in [1, 2, 3] {
            let s = Sort::new(&q.input, tas_b(), Duration::from_secs(60));
            on_threads(threads, &|| s.worker());
            let (out, done, err) = s.into_parts();
            assert_eq!((done, err), (1.0, None));
            q.check(&out, true).expect("sorted");
        }
    }

    #[test]
    fn a_capped_sort_is_partial_and_still_a_permutation() {
        let q = Quicksort::new(100_000, 4);
        let s = Sort::new(&q.input, tas_b(), Duration::ZERO);
        s.worker();
        let (out, done, err) = s.into_parts();
        assert!(done < 1.0 && err.is_none(), "{done}");
        q.check(&out, false).expect("a permutation");
    }

    #[test]
    fn a_lost_interval_fails_loudly() {
        let q = Quicksort::new(10_000, 4);
        let s = Sort::new(&q.input, tas_b(), Duration::from_secs(2));
        s.top.store(0, Ordering::Relaxed);
        s.worker();
        let (_, _, err) = s.into_parts();
        assert!(err.is_some_and(|e| e.contains("lost")));
    }

    fn pt(panel: usize, name: &str, v: f64) -> Point {
        Point {
            panel: Some(APPS[panel].into()),
            implementation: name.into(),
            x: 2.0,
            value: v,
            normalized: v,
        }
    }

    fn verdict(des: &AppsDesign, pts: &[Point], eligible: bool) -> Verdict {
        let mut names: Vec<&str> = pts.iter().map(|p| p.implementation.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        let imps = names.iter().map(|n| Imp::ours(*n, "mutex")).collect();
        let mut d = Design::single("MP", "s", Better::Lower, vec![2.0], imps, 1);
        d.panels = APPS.iter().map(|a| Panel::new(*a, vec![2.0])).collect();
        let r = Results::new(&d, pts, &[]);
        let clauses: Vec<Clause> = (0..2)
            .flat_map(|k| (des.clauses)(k, des.figure, eligible))
            .collect();
        Verdict::from_clauses("c", clauses.iter().map(|c| c.judge(&r)).collect(), vec![])
    }

    fn both(f: impl Fn(usize) -> Vec<Point>) -> Vec<Point> {
        (0..2).flat_map(f).collect()
    }

    #[test]
    fn wks94_clauses() {
        let good = both(|k| {
            vec![
                pt(k, "TAS-B-np", 1.0),
                pt(k, "Queued", 3.0),
                pt(k, "Queued-np", 2.0),
                pt(k, "Smart-Q", 1.1),
            ]
        });
        let v = verdict(&WKS94_APPS, &good, true);
        assert_eq!(v.status, Status::Holds, "{v:?}");
        assert_eq!(v.clauses.len(), 6);
        assert_eq!(v.clauses[0].ours, "Queued / TAS-B-np = 3.00");
        assert!(v.clauses[3].at.ends_with("quicksort"), "{v:?}");
        let mut bad = good.clone();
        bad[1].value = 1.2; // cholesky Queued not disastrous
        bad[7].value = 1.5; // quicksort Smart-Q does not tie
        let v = verdict(&WKS94_APPS, &bad, true);
        assert_eq!(v.status, Status::DoesNotHold);
        let failed: Vec<usize> = (0..6)
            .filter(|&i| v.clauses[i].holds == Some(false))
            .collect();
        assert_eq!(failed, [0, 5], "{v:?}");
        let v = verdict(&WKS94_APPS, &good, false);
        assert!(v.clauses.iter().all(|c| c.holds == Some(false)));
        let v = verdict(&WKS94_APPS, &good[..2], true);
        assert_eq!(v.status, Status::PartlyEvaluable, "{v:?}");
    }

    #[test]
    fn wks95_clauses() {
        let good = both(|k| {
            vec![
                pt(k, "Ticket-np", 1.0),
                pt(k, "Ticket", 2.0),
                pt(k, "TAS-B-np", 0.9),
                pt(k, "TAS-B", 1.5),
                pt(k, "Native", 0.95),
            ]
        });
        let v = verdict(&WKS95_APPS, &good, true);
        assert_eq!(v.status, Status::Holds, "{v:?}");
        assert_eq!(v.clauses.len(), 4);
        assert!(
            v.clauses[1]
                .ours
                .starts_with("TAS-B-np 0.900 s vs Native 0.950 s"),
            "{v:?}"
        );
        let mut bad = good.clone();
        bad[4].value = 0.8; // cholesky: Native beats every conscious lock
        bad[6].value = 1.2; // quicksort: Ticket only 1.2x Ticket-np
        let v = verdict(&WKS95_APPS, &bad, true);
        let holds: Vec<Option<bool>> = v.clauses.iter().map(|c| c.holds).collect();
        assert_eq!(holds, [Some(true), Some(false), Some(false), Some(true)]);
    }
}
