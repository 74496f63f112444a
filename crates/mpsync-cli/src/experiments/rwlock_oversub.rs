//! `rwlock-oversub`: throughput of every mpsync reader-writer lock and its peers
//! (`parking_lot::RwLock`, `std::sync::RwLock`, `crossbeam_utils::sync::ShardedLock`)
//! with unpinned threads at ½, 1, 2 and 4 per core — beyond the core count Linux
//! preempts readers, writers and queued waiters for real. Two mixes: 95% and 50%
//! reads. Each thread loops {read or write section of ~100 ns; ~200 ns outside};
//! value = sections per second. Fairness is measured, not assumed: the
//! **writer share** — the fraction of sections that were writes, divided by the
//! fraction the threads asked for (1.0 = writers got exactly their fair share).
//! At 95% reads every thread draws each section's kind, so a slow writer also
//! slows its own reads and the share stays near 1 by construction; at 50%
//! reads (two threads or more) the roles are fixed — even threads read, odd
//! threads write — so a lock that starves writers shows it there.
//!
//! The BRAVO-biased forms (`Bravo<L>`, Dice & Kogan 2019) of RW-TAS-B,
//! RW-Smart-Q and RW-Native run at the read-mostly mixes a reader bias is for:
//! 95% (beside every lock), 99% and 99.9% (beside their base locks and the
//! peers only; `--quick`: 99.9% only, at the largest thread count); the verdict
//! gives each one's ratio to its base lock and to `std::sync::RwLock` at each.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mpsync::rwlock::{Bravo, RwNative, RwNativeNp, RwQueued, RwSmartQ, RwTasB, RwTasBNp};
use mpsync::util::busy::BusyWork;
use mpsync::util::rng::SplitMix64;

use super::{Experiment, Params};
use crate::env::Preempt;
use crate::output::{Machine, Point, RunRecord, Status, Trial, Verdict};
use crate::stats::trimmed_mean;
use crate::svg::{Series, line_chart};

/// Trial length at `--scale 1`.
pub const BASE_DURATION_MS: f64 = 300.0;
/// The reference peer.
pub const BASELINE: &str = "parking_lot::RwLock";

/// A reader-writer lock the harness can drive.
pub trait BenchRw: Send + Sync + 'static {
    /// An unlocked lock.
    fn create() -> Self;
    /// Runs `f` holding the lock shared.
    fn read(&self, f: impl FnOnce());
    /// Runs `f` holding the lock exclusively.
    fn write(&self, f: impl FnOnce());
}

impl<R: mpsync::lock_api::RawRwLock + Send + Sync + 'static> BenchRw for mpsync::RwLock<R, ()> {
    fn create() -> Self {
        mpsync::RwLock::new(())
    }
    #[inline]
    fn read(&self, f: impl FnOnce()) {
        let _g = self.read();
        f();
    }
    #[inline]
    fn write(&self, f: impl FnOnce()) {
        let _g = self.write();
        f();
    }
}

/// `parking_lot::RwLock`.
pub struct ParkingLotRw(parking_lot::RwLock<()>);
impl BenchRw for ParkingLotRw {
    fn create() -> Self {
        Self(parking_lot::RwLock::new(()))
    }
    fn read(&self, f: impl FnOnce()) {
        let _g = self.0.read();
        f();
    }
    fn write(&self, f: impl FnOnce()) {
        let _g = self.0.write();
        f();
    }
}

/// `std::sync::RwLock`.
pub struct StdRw(std::sync::RwLock<()>);
impl BenchRw for StdRw {
    fn create() -> Self {
        Self(std::sync::RwLock::new(()))
    }
    fn read(&self, f: impl FnOnce()) {
        let _g = self.0.read().unwrap_or_else(|e| e.into_inner());
        f();
    }
    fn write(&self, f: impl FnOnce()) {
        let _g = self.0.write().unwrap_or_else(|e| e.into_inner());
        f();
    }
}

/// `crossbeam_utils::sync::ShardedLock`.
pub struct Sharded(crossbeam_utils::sync::ShardedLock<()>);
impl BenchRw for Sharded {
    fn create() -> Self {
        Self(crossbeam_utils::sync::ShardedLock::new(()))
    }
    fn read(&self, f: impl FnOnce()) {
        let _g = self.0.read().unwrap_or_else(|e| e.into_inner());
        f();
    }
    fn write(&self, f: impl FnOnce()) {
        let _g = self.0.write().unwrap_or_else(|e| e.into_inner());
        f();
    }
}

/// One fixed-duration run.
#[derive(Debug, Clone, Copy)]
pub struct RwSpec {
    /// Threads (unpinned).
    pub threads: u32,
    /// How long they run.
    pub duration: Duration,
    /// Probability that a section is a read.
    pub read_fraction: f64,
    /// Section work, busy-work iterations.
    pub cs_iters: u64,
    /// Work outside, busy-work iterations.
    pub ncs_iters: u64,
    /// Seed of each thread's read/write draws.
    pub seed: u64,
}

/// What one run did: sections per thread, and writes in all.
#[derive(Debug, Clone)]
pub struct RwCounts {
    /// Sections done by each thread.
    pub per_thread: Vec<u64>,
    /// Write sections in all.
    pub writes: u64,
}

/// Runs `spec` on a fresh `L`; checks that writes were exclusive.
pub fn run_rw<L: BenchRw>(spec: &RwSpec) -> anyhow::Result<RwCounts> {
    struct Guarded(UnsafeCell<u64>);
    // SAFETY: written only under the write lock (what the check verifies).
    unsafe impl Sync for Guarded {}
    let lock = L::create();
    let guarded = Guarded(UnsafeCell::new(0));
    let writes = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let start = std::sync::Barrier::new(spec.threads as usize + 1);
    let w = BusyWork::global();
    let per_thread = std::thread::scope(|s| {
        let hs: Vec<_> = (0..spec.threads)
            .map(|t| {
                let (lock, guarded, writes, stop, start) =
                    (&lock, &guarded, &writes, &stop, &start);
                s.spawn(move || {
                    let mut rng = SplitMix64::stream(spec.seed, u64::from(t));
                    start.wait();
                    let (mut n, mut mine) = (0u64, 0u64);
                    // Relaxed: a stop request; the join orders everything after.
                    while !stop.load(Ordering::Relaxed) {
                        // At a 50% mix with several threads, fixed roles (odd
                        // threads write): a lock that prefers readers then shows
                        // it in the writer share. Otherwise each section draws.
                        let read = if spec.read_fraction == 0.5 && spec.threads >= 2 {
                            t % 2 == 0
                        } else {
                            rng.next_f64() < spec.read_fraction
                        };
                        if read {
                            lock.read(|| {
                                // SAFETY: a read under the read lock.
                                std::hint::black_box(unsafe { *guarded.0.get() });
                                w.run_iters(spec.cs_iters);
                            });
                        } else {
                            lock.write(|| {
                                // SAFETY: the write lock is held.
                                let v = unsafe { *guarded.0.get() };
                                w.run_iters(spec.cs_iters);
                                // SAFETY: as above.
                                unsafe { *guarded.0.get() = v + 1 };
                            });
                            mine += 1;
                        }
                        n += 1;
                        w.run_iters(spec.ncs_iters);
                    }
                    // Relaxed: summed after the join.
                    writes.fetch_add(mine, Ordering::Relaxed);
                    n
                })
            })
            .collect();
        start.wait();
        // The harness (not a lock algorithm) may sleep: it is the timer.
        std::thread::sleep(spec.duration);
        stop.store(true, Ordering::Relaxed);
        hs.into_iter()
            .map(|h| h.join().map_err(|_| anyhow::anyhow!("a worker panicked")))
            .collect::<anyhow::Result<Vec<u64>>>()
    })?;
    let writes = writes.into_inner();
    let seen = guarded.0.into_inner();
    anyhow::ensure!(
        seen == writes,
        "writers overlapped: {writes} write sections but the guarded counter says {seen}"
    );
    Ok(RwCounts { per_thread, writes })
}

/// One row: a name, whether it is a peer, and its runner.
#[derive(Debug, Clone, Copy)]
pub struct RwImpl {
    /// The paper's (or the crate's) name.
    pub name: &'static str,
    /// A crate people use today (not mpsync's).
    pub peer: bool,
    /// Runs one fixed-duration trial.
    pub run: fn(&RwSpec) -> anyhow::Result<RwCounts>,
    /// For a BRAVO-biased lock, its base lock's name (it runs at [`BRAVO_MIXES`] only).
    pub biased_from: Option<&'static str>,
}

/// The BRAVO rows' read mixes: 95% beside every lock, and the read-mostly
/// mixes a reader bias is for, where only the BRAVO forms, their base locks
/// and the peers run.
pub const BRAVO_MIXES: [f64; 3] = [0.95, 0.99, 0.999];

/// Whether `imp` runs at read fraction `r` (see [`BRAVO_MIXES`]).
pub fn runs_at(table: &[RwImpl], imp: &RwImpl, r: f64) -> bool {
    if r == 0.95 || r == 0.5 {
        return imp.biased_from.is_none() || r == 0.95;
    }
    BRAVO_MIXES.contains(&r)
        && (imp.peer
            || imp.biased_from.is_some()
            || table.iter().any(|b| b.biased_from == Some(imp.name)))
}

/// Every reader-writer lock and peer.
pub fn rw_table() -> Vec<RwImpl> {
    macro_rules! row {
        ($name:expr, $peer:expr, $t:ty) => {
            RwImpl {
                name: $name,
                peer: $peer,
                run: run_rw::<$t>,
                biased_from: None,
            }
        };
        ($name:expr, $base:expr, bravo $t:ty) => {
            RwImpl {
                name: $name,
                peer: false,
                run: run_rw::<$t>,
                biased_from: Some($base),
            }
        };
    }
    vec![
        row!("RW-Smart-Q", false, mpsync::RwLock<RwSmartQ, ()>),
        row!("RW-Queued", false, mpsync::RwLock<RwQueued, ()>),
        row!("RW-TAS-B-np", false, mpsync::RwLock<RwTasBNp, ()>),
        row!("RW-TAS-B", false, mpsync::RwLock<RwTasB, ()>),
        row!("RW-Native-np", false, mpsync::RwLock<RwNativeNp, ()>),
        row!("RW-Native", false, mpsync::RwLock<RwNative, ()>),
        row!("BRAVO-RW-TAS-B", "RW-TAS-B", bravo mpsync::RwLock<Bravo<RwTasB>, ()>),
        row!("BRAVO-RW-Smart-Q", "RW-Smart-Q", bravo mpsync::RwLock<Bravo<RwSmartQ>, ()>),
        row!("BRAVO-RW-Native", "RW-Native", bravo mpsync::RwLock<Bravo<RwNative>, ()>),
        row!(BASELINE, true, ParkingLotRw),
        row!("std::sync::RwLock", true, StdRw),
        row!("crossbeam ShardedLock", true, Sharded),
    ]
}

/// A read fraction as a percentage: "95%", "99.9%".
fn pct(r: f64) -> String {
    format!("{}%", (r * 1000.0).round() / 10.0)
}

/// The name of `imp` at read fraction `r` (a series per mix).
fn series_name(imp: &str, r: f64) -> String {
    format!("{imp} ({} reads)", pct(r))
}

/// Runs the experiment.
pub fn run(exp: &Experiment, p: &Params, _preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let cores = p.cores.max(1);
    let threads: Vec<u32> = p.threads.clone().unwrap_or_else(|| {
        let mut v = vec![(cores / 2).max(1), cores, 2 * cores, 4 * cores];
        v.dedup();
        v
    });
    let mixes = [0.95, 0.5, 0.99, 0.999];
    // --quick: 0.4 × its scale (36 ms trials), to stay within its 20 s.
    let quick = if p.quick { 0.4 } else { 1.0 };
    let duration = Duration::from_secs_f64((BASE_DURATION_MS * p.scale * quick).max(20.0) / 1e3);
    let busy = BusyWork::global();
    let table = rw_table();
    // --quick runs the read-mostly mixes at the largest thread count only, and
    // 99.9% of them only, to stay within its 20 s.
    let threads_at = |r: f64| -> Vec<u32> {
        match (p.quick, r) {
            (_, 0.95 | 0.5) | (false, _) => threads.clone(),
            (true, 0.999) => threads.last().copied().into_iter().collect(),
            (true, _) => Vec::new(),
        }
    };
    let rows_at = |r: f64| table.iter().filter(|i| runs_at(&table, i, r)).count();
    let pb = crate::progress(
        mixes
            .iter()
            .map(|&r| threads_at(r).len() * p.trials as usize * rows_at(r))
            .sum::<usize>() as u64,
        exp.id,
    );
    let started = Instant::now();
    let mut trials = Vec::new();
    // (series, x) -> writer share per trial
    let mut shares: Vec<(String, f64, f64)> = Vec::new();
    for &r in &mixes {
        for n in threads_at(r) {
            for t in 0..p.trials {
                // Interleaved: each trial visits the implementations in a rotated order.
                for k in 0..table.len() {
                    let imp = &table[(k + t as usize) % table.len()];
                    if !runs_at(&table, imp, r) {
                        continue;
                    }
                    let spec = RwSpec {
                        threads: n,
                        duration,
                        read_fraction: r,
                        cs_iters: busy.iters_for_ns(100),
                        ncs_iters: busy.iters_for_ns(200),
                        seed: p.seed ^ u64::from(t),
                    };
                    let c = (imp.run)(&spec)
                        .map_err(|e| anyhow::anyhow!("{} with {n} threads: {e}", imp.name))?;
                    let total: u64 = c.per_thread.iter().sum();
                    let name = series_name(imp.name, r);
                    if total > 0 {
                        let share = (c.writes as f64 / total as f64) / (1.0 - r);
                        shares.push((name.clone(), f64::from(n), share));
                    }
                    trials.push(Trial {
                        implementation: name,
                        x: f64::from(n),
                        trial: t,
                        value: total as f64 / duration.as_secs_f64(),
                        procs: Some(n),
                        ..Trial::default()
                    });
                    pb.inc(1);
                }
            }
        }
    }
    pb.finish_and_clear();
    let mean_of = |name: &str, x: f64| {
        let v: Vec<f64> = trials
            .iter()
            .filter(|t| t.implementation == name && t.x == x)
            .map(|t| t.value)
            .collect();
        trimmed_mean(&v)
    };
    let share_of = |name: &str, x: f64| {
        let v: Vec<f64> = shares
            .iter()
            .filter(|s| s.0 == name && s.1 == x)
            .map(|s| s.2)
            .collect();
        trimmed_mean(&v)
    };
    let mut points = Vec::new();
    let mut details = vec![format!(
        "{cores} cores; threads {} unpinned (above {cores}: real Linux preemption); sections ~100 ns, ~200 ns outside; {} ms trials",
        threads
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        duration.as_millis()
    )];
    for &r in &mixes {
        for &n in &threads {
            let x = f64::from(n);
            let base = mean_of(&series_name(BASELINE, r), x)
                .filter(|b| *b > 0.0)
                .unwrap_or(1.0);
            for imp in &table {
                let name = series_name(imp.name, r);
                if let Some(v) = mean_of(&name, x) {
                    points.push(Point {
                        panel: None,
                        implementation: name,
                        x,
                        value: v,
                        normalized: v / base,
                    });
                }
            }
        }
    }
    let value = |name: &str, x: f64| {
        points
            .iter()
            .find(|q| q.implementation == name && q.x == x)
            .map(|q| q.value)
    };
    // The targets, at 95% reads.
    let r = 0.95;
    for (per_core, floor) in [(1u32, 0.9), (2, 1.0), (4, 1.0)] {
        let x = f64::from(per_core * cores);
        let best = table
            .iter()
            .filter(|i| !i.peer)
            .filter_map(|i| value(&series_name(i.name, r), x).map(|v| (i.name, v)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        let (Some((bname, bv)), Some(pl), Some(sv)) = (
            best,
            value(&series_name(BASELINE, r), x),
            value(&series_name("std::sync::RwLock", r), x),
        ) else {
            continue;
        };
        let (rp, rs) = (bv / pl, bv / sv);
        let ok_p = rp >= floor;
        let ok_s = per_core == 1 || rs >= 1.0;
        let share = share_of(&series_name(bname, r), x);
        let ok_share = per_core == 1 || share.is_some_and(|s| (0.5..=2.0).contains(&s));
        details.push(format!(
            "95% reads, {per_core}x the cores ({x} threads): best mpsync RW lock {bname}: / parking_lot = {rp:.2} (target >= {floor}: {}), / std = {rs:.2}{}, writer share {} of fair{}",
            if ok_p { "met" } else { "missed" },
            if per_core == 1 { String::new() } else { format!(" (target >= 1.0: {})", if ok_s { "met" } else { "missed" }) },
            share.map_or("-".into(), |s| format!("{s:.2}")),
            if per_core == 1 { String::new() } else { format!(" (target within 2x: {})", if ok_share { "met" } else { "missed" }) },
        ));
    }
    // Each BRAVO form against its base lock and the std peer, per read mix.
    for imp in table.iter() {
        let Some(base) = imp.biased_from else {
            continue;
        };
        for mix in BRAVO_MIXES {
            let ratios: Vec<String> = threads
                .iter()
                .filter_map(|&n| {
                    let x = f64::from(n);
                    let (b, v, s) = (
                        value(&series_name(base, mix), x)?,
                        value(&series_name(imp.name, mix), x)?,
                        value(&series_name("std::sync::RwLock", mix), x)?,
                    );
                    Some(format!("{n} threads {:.2} ({:.2} of std)", v / b, v / s))
                })
                .collect();
            details.push(format!(
                "{} reads, {} / {base}: {}",
                pct(mix),
                imp.name,
                ratios.join(", ")
            ));
        }
    }
    for &rr in &mixes {
        if let Some(&last) = threads.last() {
            let x = f64::from(last);
            let s: Vec<String> = table
                .iter()
                .filter_map(|i| {
                    share_of(&series_name(i.name, rr), x).map(|v| format!("{} {v:.2}", i.name))
                })
                .collect();
            details.push(format!(
                "writer share of acquisitions / fair share at {last} threads, {} reads: {}",
                pct(rr),
                s.join(", ")
            ));
        }
    }
    let series: Vec<Series> = table
        .iter()
        .flat_map(|i| mixes.iter().map(move |&r| series_name(i.name, r)))
        .map(|n| Series {
            points: points
                .iter()
                .filter(|q| q.implementation == n)
                .map(|q| (q.x, q.normalized))
                .collect(),
            label: n,
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    let svg = line_chart(
        "rwlock-oversub: throughput, unpinned threads on this machine's cores",
        "threads",
        "sections/s normalized to parking_lot::RwLock at the same mix (higher is better)",
        &series,
    );
    let advice = crate::model::advice_from_points(
        "rwlock",
        crate::model::Better::Higher,
        "threads",
        "95% reads",
        table
            .iter()
            .map(|i| {
                let name = series_name(i.name, 0.95);
                if i.peer {
                    crate::model::Imp::peer(name, "rwlock")
                } else {
                    crate::model::Imp::ours(name, "rwlock")
                }
            })
            .collect(),
        &points,
    );
    let rec = RunRecord {
        advice: advice.into_iter().collect(),
        experiment: exp.id.into(),
        paper: exp.reference.into(),
        title: exp.title.into(),
        preempt: "none".into(),
        started_unix: crate::unix_now(),
        duration_s: started.elapsed().as_secs_f64(),
        machine: Machine::detect(),
        params: serde_json::json!({
            "common": p,
            "threads": threads,
            "read_fractions": mixes,
            "trial_ms": duration.as_secs_f64() * 1e3,
            "section_ns": 100, "outside_ns": 200,
            "implementations": table.iter().map(|i| i.name).collect::<Vec<_>>(),
        }),
        busy_iters_per_us: busy.iters_per_us(),
        unit: "read+write sections per second (higher is better)".into(),
        x_label: "threads".into(),
        baseline: "parking_lot::RwLock at the same thread count and mix".into(),
        trials,
        points,
        extra: serde_json::json!({
            "writer_share": shares.iter().map(|s| serde_json::json!({"implementation": s.0, "threads": s.1, "share": s.2})).collect::<Vec<_>>(),
        }),
        verdict: Verdict {
            clauses: Vec::new(),
            conclusion: "no paper conclusion: a measurement against mpsync's targets (at 95% reads the best mpsync RW lock >= parking_lot and std at 2x and 4x the cores with writers within 2x of their fair share, >= 0.9x parking_lot at 1x)".into(),
            status: Status::Measurement,
            details,
        },
    };
    Ok((rec, svg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_rows_run_at_which_mix() {
        let t = rw_table();
        let at = |r: f64| -> Vec<&str> {
            t.iter()
                .filter(|i| runs_at(&t, i, r))
                .map(|i| i.name)
                .collect()
        };
        // 95%: everything; 50%: everything but the BRAVO forms.
        assert_eq!(at(0.95).len(), t.len());
        assert!(at(0.5).iter().all(|n| !n.starts_with("BRAVO")));
        assert_eq!(at(0.5).len(), t.len() - 3);
        // 99% and 99.9%: the BRAVO forms, their bases and the peers.
        for r in [0.99, 0.999] {
            let v = at(r);
            for n in [
                "BRAVO-RW-TAS-B",
                "RW-TAS-B",
                "BRAVO-RW-Smart-Q",
                "RW-Smart-Q",
                "BRAVO-RW-Native",
                "RW-Native",
                BASELINE,
                "std::sync::RwLock",
                "crossbeam ShardedLock",
            ] {
                assert!(v.contains(&n), "{n} missing at {r}: {v:?}");
            }
            assert!(
                !v.contains(&"RW-Queued") && !v.contains(&"RW-TAS-B-np"),
                "{v:?}"
            );
        }
        assert!(at(0.7).is_empty());
        assert_eq!(series_name("x", 0.999), "x (99.9% reads)");
        assert_eq!(series_name("x", 0.95), "x (95% reads)");
    }
}
