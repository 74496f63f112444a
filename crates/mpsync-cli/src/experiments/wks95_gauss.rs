//! `wks95-gauss`: the Gaussian-elimination application of Wisniewski,
//! Kontothanassis & Scott, PPoPP 1995 §4 (papers/001, Figure 8): a dense
//! `N × N` system (640 × 640 in the paper; here `N = 640 × ∛(--scale)`,
//! `--quick` halving the work on top of its scale) solved by forward
//! elimination without pivoting — rows dealt out cyclically to the threads,
//! one barrier episode per pivot column (N − 1 episodes) — then back
//! substitution by the thread that leads the last episode. The matrix is
//! random in [−1, 1] with `N` on the diagonal (strictly diagonally dominant,
//! so no pivoting is needed), and every completed run's answer is checked
//! against a sequential solve of the same system (the same arithmetic in the
//! same order, so the two agree to rounding) and by its residual: a barrier
//! that lets a thread read a pivot row before it is final gives NaN or a wrong
//! answer, and the experiment fails with an error instead of reporting a time.
//!
//! Multiprogramming level 2 from the application's own threads (two per
//! processor), as in `wks95-barrier`: emulated, the pseudo-scheduler
//! time-slices them (quantum 50 ms) and repartitions the processors once a
//! second; `--preempt os`, the same threads pinned two per CPU and Linux
//! time-slices them; `none`, one thread per processor. Default processors:
//! all of them (the paper's Figure 8 is one processor count, 64); `--procs`
//! varies them. A run stops at 25× its ideal time (at least 2 s; `--quick`:
//! 5×, at least 0.5 s) and is reported censored, its time extrapolated from
//! the fraction of episodes done.
//! Times are normalized to Central-block at the same processor count.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mpsync::util::rng::SplitMix64;

use super::barrier_oversub::BenchBarrier;
use super::wks95_barrier::{MP, check_procs, paper_table, run_barrier_table, verdicts};
use super::{Experiment, Params};
use crate::env::Preempt;
use crate::model;
use crate::output::RunRecord;

/// The paper's conclusion, as a statement.
pub const CONCLUSION: &str = "Gaussian elimination at multiprogramming level 2 confirms the \
barrier program: the scheduler-conscious two-level barrier (Scalable-SC) is fastest, then \
Central-block, then Heuristic-tree; the always-spinning Arrival-tree is slowest";

/// Matrix order at `--scale 1` (the paper's 640 × 640).
pub const BASE_N: f64 = 640.0;
/// The smallest order a run uses, whatever the scale.
pub const MIN_N: usize = 16;
/// `--quick` multiplies the work (∝ N³) by this on top of its `--scale`.
pub const QUICK_WORK: f64 = 0.5;
/// Largest accepted relative residual `‖Ax − b‖∞ / (‖A‖∞‖x‖∞ + ‖b‖∞)`.
pub const RESIDUAL_BOUND: f64 = 1e-10;
/// Largest accepted `‖x − x_seq‖∞ / max(1, ‖x_seq‖∞)`.
pub const AGREEMENT_BOUND: f64 = 1e-12;

/// A dense linear system `A x = b`, stored as the augmented `N × (N + 1)`
/// matrix `[A | b]`, row-major.
#[derive(Debug, Clone)]
pub struct System {
    n: usize,
    ab: Vec<f64>,
}

impl System {
    /// A random strictly diagonally dominant system of order `n` (entries
    /// uniform in [−1, 1], `n` on the diagonal, `b` uniform in [−n, n]),
    /// reproducible from `seed`.
    pub fn random(n: usize, seed: u64) -> Self {
        let mut rng = SplitMix64::stream(seed, 0x6a55);
        let w = n + 1;
        let mut ab = vec![0.0; n * w];
        for i in 0..n {
            for j in 0..w {
                let u = 2.0 * rng.next_f64() - 1.0;
                ab[i * w + j] = if i == j {
                    n as f64
                } else if j == n {
                    u * n as f64
                } else {
                    u
                };
            }
        }
        Self { n, ab }
    }

    /// Row `i` of `[A | b]` (`N + 1` entries).
    pub fn row(&self, i: usize) -> &[f64] {
        let w = self.n + 1;
        &self.ab[i * w..(i + 1) * w]
    }

    /// Relative residual `‖Ax − b‖∞ / (‖A‖∞‖x‖∞ + ‖b‖∞)` of a solution.
    pub fn residual(&self, x: &[f64]) -> f64 {
        let n = self.n;
        let xmax = x.iter().fold(0.0_f64, |m, v| m.max(v.abs()));
        let (mut rmax, mut amax, mut bmax) = (0.0_f64, 0.0_f64, 0.0_f64);
        for i in 0..n {
            let r = self.row(i);
            let ax: f64 = r[..n].iter().zip(x).map(|(a, v)| a * v).sum();
            rmax = rmax.max((ax - r[n]).abs());
            amax = amax.max(r[..n].iter().map(|a| a.abs()).sum());
            bmax = bmax.max(r[n].abs());
        }
        let d = amax * xmax + bmax;
        // NaN anywhere makes the residual NaN, which no bound accepts.
        if x.iter().any(|v| !v.is_finite()) {
            return f64::NAN;
        }
        if d == 0.0 { rmax } else { rmax / d }
    }
}

/// One elimination step on `row` with pivot row `pivot` and pivot column `k`:
/// `row −= (row[k] / pivot[k]) · pivot`, leaving `row[k] = 0`. The parallel and
/// the sequential solve both use this, so they do the same arithmetic.
fn eliminate(row: &mut [f64], pivot: &[f64], k: usize) {
    let f = row[k] / pivot[k];
    row[k] = 0.0;
    for (r, p) in row[k + 1..].iter_mut().zip(&pivot[k + 1..]) {
        *r -= f * p;
    }
}

/// Back substitution on the upper-triangular rows `u(i)` of `[U | c]`.
fn back_substitute(n: usize, mut u: impl FnMut(usize) -> Vec<f64>) -> Vec<f64> {
    let mut x = vec![0.0; n];
    for i in (0..n).rev() {
        let r = u(i);
        let s: f64 = r[i + 1..n]
            .iter()
            .zip(&x[i + 1..])
            .map(|(a, v)| a * v)
            .sum();
        x[i] = (r[n] - s) / r[i];
    }
    x
}

/// Solves the system on one thread (the reference answer), in the same order
/// of operations as the parallel solve.
pub fn solve_sequential(sys: &System) -> Vec<f64> {
    let n = sys.n;
    let mut rows: Vec<Vec<f64>> = (0..n).map(|i| sys.row(i).to_vec()).collect();
    for k in 0..n.saturating_sub(1) {
        let (done, rest) = rows.split_at_mut(k + 1);
        let pivot = &done[k];
        for row in rest.iter_mut() {
            eliminate(row, pivot, k);
        }
    }
    back_substitute(n, |i| rows[i].clone())
}

/// What one parallel solve measured.
#[derive(Debug, Clone)]
pub struct GaussRun {
    /// Barrier episodes completed (of `N − 1`).
    pub episodes: u64,
    /// Barrier episodes planned (`N − 1`).
    pub planned: u64,
    /// Wall time from the common start until the last thread finished.
    pub elapsed: Duration,
    /// The solution, when the run was not cut off by its cap.
    pub x: Option<Vec<f64>>,
}

/// What the threads of one parallel solve share.
struct Solve<'a> {
    sys: &'a System,
    b: &'a dyn BenchBarrier,
    threads: usize,
    cap: Duration,
    /// The pivot rows, NaN until published.
    pivots: Vec<AtomicU64>,
    /// Episode after which everyone stops (0: not cut off). Set once, by the
    /// leader of episode `e` that finds the cap passed, to `e + 2`: it stores
    /// it before it arrives at episode `e + 1`, so every thread sees it after
    /// episode `e + 1` and all leave after the same episode `e + 2`.
    stop_after: AtomicU64,
    go: std::sync::Barrier,
    t0: OnceLock<Instant>,
    x_out: OnceLock<Vec<f64>>,
}

impl Solve<'_> {
    fn w(&self) -> usize {
        self.sys.n + 1
    }

    // Relaxed stores and loads of the pivot table: each row is written once, by
    // its owner, before that owner arrives at the barrier ending the step that
    // finalized it, and read only after that barrier by the others — the
    // barrier's own release/acquire (or the start barrier `go`) orders them.
    fn publish(&self, i: usize, row: &[f64]) {
        let w = self.w();
        for (slot, v) in self.pivots[i * w..(i + 1) * w].iter().zip(row) {
            slot.store(v.to_bits(), Ordering::Relaxed);
        }
    }

    fn read(&self, i: usize, buf: &mut [f64]) {
        let w = self.w();
        for (v, slot) in buf.iter_mut().zip(&self.pivots[i * w..(i + 1) * w]) {
            *v = f64::from_bits(slot.load(Ordering::Relaxed));
        }
    }

    /// Thread `id`'s part: episodes done and when it finished.
    fn thread<G>(&self, id: usize, setup: &(dyn Fn(usize) -> G + Sync)) -> (u64, Instant) {
        let (n, w) = (self.sys.n, self.w());
        let planned = n.saturating_sub(1) as u64;
        let mut mine: Vec<(usize, Vec<f64>)> = (id..n)
            .step_by(self.threads)
            .map(|i| (i, self.sys.row(i).to_vec()))
            .collect();
        if id == 0 && n > 0 {
            self.publish(0, &mine[0].1);
        }
        let _kept = setup(id);
        self.go.wait();
        let deadline = *self.t0.get_or_init(Instant::now) + self.cap;
        let mut pivot = vec![0.0; w];
        let mut done = 0u64;
        for k in 0..n.saturating_sub(1) {
            self.read(k, &mut pivot);
            // Rows are in increasing order: skip those at or above k.
            for (i, row) in mine.iter_mut().filter(|(i, _)| *i > k) {
                eliminate(row, &pivot, k);
                if *i == k + 1 {
                    self.publish(*i, row);
                }
            }
            let leader = self.b.wait(id);
            done = k as u64 + 1;
            if leader && self.stop_after.load(Ordering::SeqCst) == 0 && Instant::now() > deadline {
                self.stop_after.store(done + 2, Ordering::SeqCst);
            }
            let s = self.stop_after.load(Ordering::SeqCst);
            if s != 0 && done >= s && done < planned {
                return (done, Instant::now());
            }
            if leader && done == planned {
                let mut buf = vec![0.0; w];
                let x = back_substitute(n, |i| {
                    self.read(i, &mut buf);
                    buf.clone()
                });
                let _ = self.x_out.set(x);
            }
        }
        if n == 1 && id == 0 {
            let r = self.sys.row(0);
            let _ = self.x_out.set(vec![r[1] / r[0]]);
        }
        (done, Instant::now())
    }
}

/// Solves `sys` with `threads` threads synchronized by `b` (one episode per
/// pivot column), at most `cap` long; each thread first calls `setup(id)` and
/// keeps what it returns (a pinning, an attachment to the pseudo-scheduler).
///
/// Row `i` belongs to thread `i % threads`, kept in that thread's own memory.
/// Each row, once final (after step `i − 1`), is published to a shared table
/// of pivot rows that starts as NaN: in step `k` every thread reads pivot row
/// `k`, eliminates column `k` from its rows below it, the owner of row `k + 1`
/// publishes it, and all wait at the barrier.
pub fn run_gauss_with<G>(
    b: &dyn BenchBarrier,
    threads: usize,
    sys: &System,
    cap: Duration,
    setup: &(dyn Fn(usize) -> G + Sync),
) -> anyhow::Result<GaussRun> {
    if threads == 0 {
        anyhow::bail!("wks95-gauss: 0 threads: a solve needs at least 1 thread");
    }
    let n = sys.n;
    let planned = n.saturating_sub(1) as u64;
    let solve = Solve {
        sys,
        b,
        threads,
        cap,
        pivots: (0..n * (n + 1))
            .map(|_| AtomicU64::new(f64::NAN.to_bits()))
            .collect(),
        stop_after: AtomicU64::new(0),
        go: std::sync::Barrier::new(threads),
        t0: OnceLock::new(),
        x_out: OnceLock::new(),
    };
    let mut finished = Vec::with_capacity(threads);
    let mut completed = planned;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|id| {
                let solve = &solve;
                s.spawn(move || solve.thread(id, setup))
            })
            .collect();
        for h in handles {
            match h.join() {
                Ok((done, at)) => {
                    completed = completed.min(done);
                    finished.push(at);
                }
                Err(_) => completed = 0,
            }
        }
    });
    let start = solve
        .t0
        .get()
        .copied()
        .ok_or_else(|| anyhow::anyhow!("wks95-gauss: no thread started"))?;
    let end = finished.iter().copied().max().unwrap_or(start);
    let x = solve.x_out.into_inner();
    if completed == planned && x.is_none() {
        anyhow::bail!(
            "wks95-gauss: all {planned} episodes completed but no thread led the last one (the barrier elected no leader)"
        );
    }
    Ok(GaussRun {
        episodes: completed,
        planned,
        elapsed: end.saturating_duration_since(start),
        x: if completed == planned { x } else { None },
    })
}

/// Checks a parallel answer against the sequential one and the residual
/// bound; `Err` says by how much it was wrong.
pub fn check_answer(sys: &System, x: &[f64], reference: &[f64]) -> Result<(f64, f64), String> {
    let scale = reference.iter().fold(1.0_f64, |m, v| m.max(v.abs()));
    let diff = x
        .iter()
        .zip(reference)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0_f64, |m, d| if d.is_nan() { f64::NAN } else { m.max(d) })
        / scale;
    let res = sys.residual(x);
    if x.len() != reference.len() || diff.is_nan() || diff > AGREEMENT_BOUND {
        return Err(format!(
            "max |x - x_seq| / max(1, |x_seq|) = {diff:e} (bound {AGREEMENT_BOUND:e}), residual {res:e}"
        ));
    }
    if res.is_nan() || res > RESIDUAL_BOUND {
        return Err(format!(
            "relative residual {res:e} (bound {RESIDUAL_BOUND:e})"
        ));
    }
    Ok((diff, res))
}

/// The matrix order for a scale (work ∝ N³).
pub fn order_for(scale: f64, quick: bool) -> usize {
    let work = scale * if quick { QUICK_WORK } else { 1.0 };
    ((BASE_N * work.max(0.0).cbrt()).round() as usize).max(MIN_N)
}

/// The sequential reference: its answer and time, or why it is unusable.
fn reference(sys: &System, order: usize) -> anyhow::Result<(Vec<f64>, f64)> {
    let t = Instant::now();
    let x = solve_sequential(sys);
    let seq_s = t.elapsed().as_secs_f64();
    let res = sys.residual(&x);
    if res.is_nan() || res > RESIDUAL_BOUND {
        anyhow::bail!(
            "wks95-gauss: the sequential solve of order {order} has residual {res:e} (bound {RESIDUAL_BOUND:e}); the reference is unusable"
        );
    }
    Ok((x, seq_s))
}

/// Runs the experiment.
pub fn run(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let procs: Vec<u32> = p.procs.clone().unwrap_or_else(|| vec![p.cores]);
    check_procs(&procs)?;
    let quantum = p.quantum(50.0);
    let order = order_for(p.scale, p.quick);
    let per_proc = if preempt == Preempt::None { 1 } else { MP };
    let table = paper_table();
    let sys = System::random(order, p.seed);
    let (reference, seq_s) = reference(&sys, order)?;
    let started = Instant::now();
    let mut worst = (0.0_f64, 0.0_f64);
    let tr = run_barrier_table(
        exp,
        p,
        preempt,
        &procs,
        &table,
        // Ideal: the sequential work shared by the processors.
        &|np| seq_s / f64::from(np),
        &mut |b, n, _np, _t, setup, cap| {
            let r = run_gauss_with(b, n, &sys, cap, setup)?;
            if let Some(x) = &r.x {
                let (d, res) = check_answer(&sys, x, &reference).map_err(|e| {
                    anyhow::anyhow!(
                        "wrong answer ({e}): the barrier let a thread go on before a pivot row was final"
                    )
                })?;
                worst = (worst.0.max(d), worst.1.max(res));
            }
            Ok((r.episodes as f64 / r.planned.max(1) as f64, r.elapsed))
        },
    )?;
    let checked = tr.trials.iter().filter(|t| t.censored_at.is_none()).count();
    let mut v = verdicts(CONCLUSION, "Fig. 8", preempt, &tr.censored);
    v.notes.push(format!(
        "answers: all {checked} completed runs matched the sequential solve of the {order}x{order} system (worst max |x - x_seq| / max(1, |x_seq|) = {:.1e}, worst relative residual {:.1e}; bounds {AGREEMENT_BOUND:.0e} and {RESIDUAL_BOUND:.0e}; sequential solve {:.1} ms)",
        worst.0,
        worst.1,
        seq_s * 1e3
    ));
    let params = serde_json::json!({
        "processors": procs,
        "threads_per_processor": per_proc,
        "order": order,
        "episodes": order.saturating_sub(1),
        "quantum_ms": quantum.as_secs_f64() * 1e3,
        "repartition_every_s": if preempt == Preempt::Emulated { Some(1.0) } else { None },
        "implementations": table.iter().map(|i| i.name).collect::<Vec<_>>(),
        "sequential_solve_s": seq_s,
    });
    // One processor count (the paper's Figure 8) is drawn as bars.
    let (mut rec, svg) = model::finish(exp, p, preempt, &tr.design, tr.trials, v, params, started);
    rec.unit = "seconds per solve (lower is better)".into();
    rec.extra = serde_json::json!({ "scheduler": tr.sched });
    Ok((rec, svg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::Status;

    #[test]
    fn sequential_solve_has_a_small_residual() {
        for n in [1, 2, 17, 64] {
            let sys = System::random(n, 7);
            let x = solve_sequential(&sys);
            let r = sys.residual(&x);
            assert!(r <= RESIDUAL_BOUND, "order {n}: residual {r:e}");
        }
        // And the residual notices a wrong answer.
        let sys = System::random(20, 7);
        let mut x = solve_sequential(&sys);
        x[3] += 1e-3;
        assert!(sys.residual(&x) > RESIDUAL_BOUND);
        x[3] = f64::NAN;
        assert!(sys.residual(&x).is_nan());
    }

    fn central(n: usize) -> Box<dyn BenchBarrier> {
        let t = crate::experiments::barrier_oversub::barrier_table();
        let c = t.iter().find(|i| i.name == "Central-block").expect("row");
        (c.make)(n)
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "spawns threads and solves a 48x48 system: too slow under Miri"
    )]
    fn parallel_solve_matches_sequential() {
        let sys = System::random(48, 11);
        let reference = solve_sequential(&sys);
        for threads in [1, 3, 4] {
            let b = central(threads);
            let r = run_gauss_with(b.as_ref(), threads, &sys, Duration::from_secs(60), &|_| ())
                .expect("solve");
            assert_eq!((r.episodes, r.planned), (47, 47));
            let x = r.x.expect("completed");
            check_answer(&sys, &x, &reference).expect("right answer");
        }
    }

    /// A "barrier" that does not wait: threads race ahead and read pivot rows
    /// before they are published, so the answer must be rejected. Thread 1
    /// dawdles in its first "wait" (after publishing row 1), so thread 0 reads
    /// row 3 — still NaN — in step 3.
    struct NoBarrier(std::sync::atomic::AtomicBool);
    impl BenchBarrier for NoBarrier {
        fn wait(&self, id: usize) -> bool {
            if id == 1 && !self.0.swap(true, Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
            }
            id == 0
        }
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "spawns threads and solves a 64x64 system: too slow under Miri"
    )]
    fn a_barrier_that_does_not_wait_is_caught() {
        let sys = System::random(64, 5);
        let reference = solve_sequential(&sys);
        let b = NoBarrier(std::sync::atomic::AtomicBool::new(false));
        let r = run_gauss_with(&b, 2, &sys, Duration::from_secs(60), &|_| ()).expect("run");
        let x = r.x.expect("completed");
        let e = check_answer(&sys, &x, &reference).expect_err("a wrong answer");
        assert!(e.contains("x_seq"), "{e}");
    }

    #[test]
    #[cfg_attr(miri, ignore = "spawns threads: too slow under Miri")]
    fn a_capped_run_stops_everyone_after_the_same_episode() {
        let sys = System::random(400, 3);
        let b = central(3);
        let r = run_gauss_with(b.as_ref(), 3, &sys, Duration::ZERO, &|_| ()).expect("run");
        // The cap has passed at the first episode: all stop after episode 3.
        assert_eq!(r.episodes, 3);
        assert!(r.x.is_none());
    }

    #[test]
    fn order_scales_with_the_cube_root_of_the_work() {
        assert_eq!(order_for(1.0, false), 640);
        assert_eq!(order_for(0.125, false), 320);
        assert_eq!(order_for(0.25, true), 320);
        assert_eq!(order_for(0.0, false), MIN_N);
    }

    #[test]
    fn verdict_is_clause_by_clause() {
        use crate::experiments::wks95_barrier::tests::{pt, verdict};
        let good = vec![
            pt("Scalable-SC", 2.0, 1.0),
            pt("Central-block", 2.0, 1.2),
            pt("Heuristic-tree", 2.0, 2.0),
            pt("Arrival-tree", 2.0, 9.0),
        ];
        let v = verdict(&good, &[2], Preempt::Emulated);
        assert_eq!(v.status, Status::Holds, "{v:?}");
        let mut bad = good.clone();
        bad[2].value = 1.1; // Heuristic-tree beats Central-block: clause (2) fails
        let v = verdict(&bad, &[2], Preempt::Os);
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
        assert_eq!(v.clauses[1].holds, Some(false));
        assert_eq!(
            verdict(&good, &[2], Preempt::None).status,
            Status::Measurement
        );
        assert_eq!(
            verdict(&good[..3], &[2], Preempt::Os).status,
            Status::PartlyEvaluable
        );
        assert!(
            verdicts(CONCLUSION, "Fig. 8", Preempt::Os, &[]).clauses[0]
                .paper
                .as_deref()
                .is_some_and(|p| p.contains("Fig. 8"))
        );
    }
}
