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
use crate::model::{
    self, AdviceRule, Better, Clause, Design, Imp, Judged, Panel, Results, Role, Verdicts, fmt_x,
};
use crate::output::{RunRecord, Trial};
use crate::stats::trimmed_mean;
use crate::svg::sig3;

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

impl<R: mpsync::lock_api::RawRwLock + Send + Sync + 'static> BenchRw
    for mpsync::rwlock::RwLock<R, ()>
{
    fn create() -> Self {
        mpsync::rwlock::RwLock::new(())
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
        row!("RW-Smart-Q", false, mpsync::rwlock::RwLock<RwSmartQ, ()>),
        row!("RW-Queued", false, mpsync::rwlock::RwLock<RwQueued, ()>),
        row!("RW-TAS-B-np", false, mpsync::rwlock::RwLock<RwTasBNp, ()>),
        row!("RW-TAS-B", false, mpsync::rwlock::RwLock<RwTasB, ()>),
        row!("RW-Native-np", false, mpsync::rwlock::RwLock<RwNativeNp, ()>),
        row!("RW-Native", false, mpsync::rwlock::RwLock<RwNative, ()>),
        row!("BRAVO-RW-TAS-B", "RW-TAS-B", bravo mpsync::rwlock::RwLock<Bravo<RwTasB>, ()>),
        row!("BRAVO-RW-Smart-Q", "RW-Smart-Q", bravo mpsync::rwlock::RwLock<Bravo<RwSmartQ>, ()>),
        row!("BRAVO-RW-Native", "RW-Native", bravo mpsync::rwlock::RwLock<Bravo<RwNative>, ()>),
        row!(BASELINE, true, ParkingLotRw),
        row!("std::sync::RwLock", true, StdRw),
        row!("crossbeam ShardedLock", true, Sharded),
    ]
}

/// A read fraction as a percentage: "95%", "99.9%".
fn pct(r: f64) -> String {
    format!("{}%", (r * 1000.0).round() / 10.0)
}

/// The panel of read fraction `r`.
fn mix_label(r: f64) -> String {
    format!("{} reads", pct(r))
}

/// The read mixes, in the order of the figure's panels (95% first: the
/// targets and the advice are judged there).
pub const MIXES: [f64; 4] = [0.95, 0.5, 0.99, 0.999];

/// The thread counts: `--threads`, or ½, 1, 2 and 4 per core.
fn threads_of(p: &Params) -> Vec<u32> {
    let cores = p.cores.max(1);
    p.threads.clone().unwrap_or_else(|| {
        let mut v = vec![(cores / 2).max(1), cores, 2 * cores, 4 * cores];
        v.dedup();
        v
    })
}

/// The mixes that run and the thread counts of each: `--quick` runs the
/// read-mostly mixes at the largest thread count only, and 99.9% of them
/// only, to stay within its 20 s.
fn mixes_of(p: &Params, threads: &[u32]) -> Vec<(f64, Vec<u32>)> {
    MIXES
        .iter()
        .map(|&r| {
            let ts = match (p.quick, r) {
                (_, 0.95 | 0.5) | (false, _) => threads.to_vec(),
                (true, 0.999) => threads.last().copied().into_iter().collect(),
                (true, _) => Vec::new(),
            };
            (r, ts)
        })
        .filter(|(_, ts)| !ts.is_empty())
        .collect()
}

/// The design: a panel per read mix, normalized to parking_lot there.
fn design(mixes: &[(f64, Vec<u32>)], table: &[RwImpl], trials: u32) -> Design {
    let imps = table
        .iter()
        .map(|i| match i.peer {
            true => Imp::peer(i.name, "rwlock"),
            false => Imp::ours(i.name, "rwlock"),
        })
        .collect();
    let mut d = Design::single(
        "threads",
        "read+write sections per second",
        Better::Higher,
        Vec::new(),
        imps,
        trials,
    )
    .baseline(BASELINE);
    d.panels = mixes
        .iter()
        .map(|(r, ts)| Panel::new(mix_label(*r), ts.iter().map(|&n| f64::from(n)).collect()))
        .collect();
    d
}

/// Writer shares: (panel, implementation, threads, share) per trial.
type Shares = Vec<(usize, String, f64, f64)>;

/// The trimmed mean of `name`'s writer shares at (`panel`, `x`).
fn share_of(shares: &[(usize, String, f64, f64)], panel: usize, name: &str, x: f64) -> Option<f64> {
    let v: Vec<f64> = shares
        .iter()
        .filter(|s| s.0 == panel && s.1 == name && s.2 == x)
        .map(|s| s.3)
        .collect();
    trimmed_mean(&v)
}

/// Runs the experiment.
pub fn run(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let threads = threads_of(p);
    let mixes = mixes_of(p, &threads);
    // --quick: 0.4 × its scale (36 ms trials), to stay within its 20 s.
    let quick = if p.quick { 0.4 } else { 1.0 };
    let duration = Duration::from_secs_f64((BASE_DURATION_MS * p.scale * quick).max(20.0) / 1e3);
    let busy = BusyWork::global();
    let table = rw_table();
    let d = design(&mixes, &table, p.trials);
    let started = Instant::now();
    let mut shares: Shares = Vec::new();
    let trials = model::collect(exp.id, &d, &mut |c| {
        let r = mixes[c.panel].0;
        let Some(imp) = table.iter().find(|i| i.name == c.imp.name) else {
            return Ok(None);
        };
        if !runs_at(&table, imp, r) {
            return Ok(None);
        }
        let n = c.x as u32;
        let spec = RwSpec {
            threads: n,
            duration,
            read_fraction: r,
            cs_iters: busy.iters_for_ns(100),
            ncs_iters: busy.iters_for_ns(200),
            seed: p.seed ^ u64::from(c.trial),
        };
        let counts =
            (imp.run)(&spec).map_err(|e| anyhow::anyhow!("{} with {n} threads: {e}", imp.name))?;
        let total: u64 = counts.per_thread.iter().sum();
        if total > 0 {
            let share = (counts.writes as f64 / total as f64) / (1.0 - r);
            shares.push((c.panel, imp.name.to_string(), c.x, share));
        }
        Ok(Some(Trial {
            value: total as f64 / duration.as_secs_f64(),
            procs: Some(n),
            ..Trial::default()
        }))
    })?;
    let points = model::summarize(&d, &trials);
    let r = Results {
        design: &d,
        points: &points,
        trials: &trials,
    };
    let mut v = verdicts(p.cores, shares.clone());
    v.notes.push(method_note(p.cores, &threads, duration));
    v.notes.extend(bravo_notes(&r, &table));
    v.notes.extend(share_notes(&r, &table, &shares));
    let params = serde_json::json!({
        "threads": threads,
        "read_fractions": mixes.iter().map(|m| m.0).collect::<Vec<_>>(),
        "trial_ms": duration.as_secs_f64() * 1e3,
        "section_ns": 100, "outside_ns": 200,
        "implementations": table.iter().map(|i| i.name).collect::<Vec<_>>(),
    });
    let (mut rec, svg) = model::finish(exp, p, preempt, &d, trials, v, params, started);
    rec.extra = serde_json::json!({
        "writer_share": shares.iter().map(|s| serde_json::json!({
            "panel": d.panels[s.0].label, "implementation": s.1, "threads": s.2, "share": s.3,
        })).collect::<Vec<_>>(),
    });
    Ok((rec, svg))
}

fn method_note(cores: u32, threads: &[u32], duration: Duration) -> String {
    format!(
        "{cores} cores; threads {} unpinned (above {cores}: real Linux preemption); sections ~100 ns, ~200 ns outside; {} ms trials",
        threads
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        duration.as_millis()
    )
}

/// Each BRAVO form against its base lock and the std peer, per read mix.
fn bravo_notes(r: &Results<'_>, table: &[RwImpl]) -> Vec<String> {
    let mut notes = Vec::new();
    for imp in table {
        let Some(base) = imp.biased_from else {
            continue;
        };
        for (pi, pn) in r.design.panels.iter().enumerate() {
            if !BRAVO_MIXES.iter().any(|&m| mix_label(m) == pn.label) {
                continue;
            }
            let ratios: Vec<String> = pn
                .xs
                .iter()
                .filter_map(|&x| {
                    let (b, v, s) = (
                        r.value(base, pi, x)?,
                        r.value(imp.name, pi, x)?,
                        r.value("std::sync::RwLock", pi, x)?,
                    );
                    Some(format!(
                        "{} threads {:.2} ({:.2} of std)",
                        fmt_x(x),
                        v / b,
                        v / s
                    ))
                })
                .collect();
            notes.push(format!(
                "{}, {} / {base}: {}",
                pn.label,
                imp.name,
                ratios.join(", ")
            ));
        }
    }
    notes
}

/// The writer share of every lock at the most threads, per read mix.
fn share_notes(
    r: &Results<'_>,
    table: &[RwImpl],
    shares: &[(usize, String, f64, f64)],
) -> Vec<String> {
    (0..r.design.panels.len())
        .map(|pi| {
            let x = r.last_x(pi);
            let s: Vec<String> = table
                .iter()
                .filter_map(|i| {
                    share_of(shares, pi, i.name, x).map(|v| format!("{} {v:.2}", i.name))
                })
                .collect();
            format!(
                "writer share of acquisitions / fair share at {} threads, {}: {}",
                fmt_x(x),
                r.design.panels[pi].label,
                s.join(", ")
            )
        })
        .collect()
}

/// mpsync's targets at 95% reads (panel 0), as clauses.
fn verdicts(cores: u32, shares: Shares) -> Verdicts {
    let c = f64::from(cores.max(1));
    let mut clauses = Vec::new();
    for (mult, peer, min) in [
        (1.0, BASELINE, 0.9),
        (2.0, BASELINE, 1.0),
        (2.0, "std::sync::RwLock", 1.0),
        (4.0, BASELINE, 1.0),
        (4.0, "std::sync::RwLock", 1.0),
    ] {
        clauses.push(Clause::best_ours_at_least(
            format!(
                "target: the best mpsync RW lock ≥ {min}× {peer}'s throughput at {mult}× the cores"
            ),
            None,
            "rwlock",
            peer,
            0,
            c * mult,
            min,
        ));
    }
    let shares = std::sync::Arc::new(shares);
    for mult in [2.0, 4.0] {
        clauses.push(share_clause(c * mult, mult, shares.clone()));
    }
    Verdicts {
        conclusion: "no paper conclusion: a measurement against mpsync's targets (at 95% reads the best mpsync RW lock >= parking_lot and std at 2x and 4x the cores with writers within 2x of their fair share, >= 0.9x parking_lot at 1x)".into(),
        clauses,
        notes: Vec::new(),
        advice: vec![AdviceRule {
            kind: "rwlock",
            panel: 0,
        }],
        targets: true,
    }
}

/// "the best mpsync RW lock's writers get within 2× of their fair share"
/// at `x` threads, 95% reads.
fn share_clause(x: f64, mult: f64, shares: std::sync::Arc<Shares>) -> Clause {
    Clause::new(
        format!(
            "target: the best mpsync RW lock's writers get 0.5–2× their fair share at {mult}× the cores"
        ),
        None,
        move |r| {
            let at = r.at(0, x);
            let best = r.ranked(Role::Ours, Some("rwlock"), 0, x).first().copied();
            match best.and_then(|(i, _)| Some((i, share_of(&shares, 0, &i.name, x)?))) {
                Some((i, s)) => Judged {
                    at,
                    ours: format!("{}: writer share {} of fair", i.name, sig3(s)),
                    holds: Some((0.5..=2.0).contains(&s)),
                },
                None => Judged {
                    at,
                    ours: "not measured".into(),
                    holds: None,
                },
            }
        },
    )
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
        assert_eq!(mix_label(0.999), "99.9% reads");
        assert_eq!(mix_label(0.95), "95% reads");
    }

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
            alloc: super::super::AllocMode::Magazines,
            match_contention: false,
        }
    }

    /// The verdict (`--quick`, 2 cores) on synthetic 95% points (name, x,
    /// sections/s) and writer shares (name, x, share).
    fn verdict(pts: &[(&str, f64, f64)], shares: &[(&str, f64, f64)]) -> crate::output::Verdict {
        let p = params();
        let mixes = mixes_of(&p, &threads_of(&p));
        let d = design(&mixes, &rw_table(), 1);
        let points: Vec<crate::output::Point> = pts
            .iter()
            .map(|(n, x, v)| crate::output::Point {
                panel: Some(d.panels[0].label.clone()),
                implementation: n.to_string(),
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
        let shares = shares
            .iter()
            .map(|(n, x, s)| (0, n.to_string(), *x, *s))
            .collect();
        let v = verdicts(2, shares);
        crate::output::Verdict::from_clauses(
            "c",
            v.clauses.iter().map(|c| c.judge(&r)).collect(),
            vec![],
        )
    }

    #[test]
    fn quick_panels_and_the_design() {
        let p = params();
        let mixes = mixes_of(&p, &threads_of(&p));
        let labels: Vec<String> = design(&mixes, &rw_table(), 1)
            .panels
            .iter()
            .map(|p| p.label.clone())
            .collect();
        assert_eq!(labels, ["95% reads", "50% reads", "99.9% reads"]);
        assert_eq!(mixes[0].1, [1, 2, 4, 8]);
        assert_eq!(mixes[2].1, [8]);
    }

    #[test]
    fn targets_are_clauses_that_can_miss() {
        let mut pts = Vec::new();
        for x in [2.0, 4.0, 8.0] {
            pts.extend([
                ("RW-Smart-Q", x, 120.0),
                ("RW-TAS-B", x, 50.0),
                (BASELINE, x, 100.0),
                ("std::sync::RwLock", x, 90.0),
            ]);
        }
        let shares = [("RW-Smart-Q", 4.0, 1.0), ("RW-Smart-Q", 8.0, 1.5)];
        let v = verdict(&pts, &shares);
        assert_eq!(v.summary(), "7 of 7 clauses hold", "{v:?}");
        assert!(
            v.clauses[0].ours.starts_with("RW-Smart-Q is 1.20×"),
            "{}",
            v.clauses[0].ours
        );
        // Writers starved at 4x the cores.
        let v = verdict(&pts, &[("RW-Smart-Q", 4.0, 1.0), ("RW-Smart-Q", 8.0, 0.2)]);
        assert_eq!(v.clauses[6].holds, Some(false), "{v:?}");
        // 0.85x parking_lot at 1x misses 0.9; at 2x slower than both peers.
        pts[0].2 = 85.0;
        pts[4].2 = 85.0;
        let v = verdict(&pts, &shares);
        let held: Vec<_> = v.clauses[..3].iter().map(|c| c.holds).collect();
        assert_eq!(held, [Some(false); 3], "{v:?}");
        // Without shares, the share clauses are not judged.
        let v = verdict(&pts, &[]);
        assert_eq!(v.clauses[5].holds, None);
    }
}
