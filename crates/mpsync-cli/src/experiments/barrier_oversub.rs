//! `barrier-oversub`: episode time of every mpsync barrier and its peers
//! (`std::sync::Barrier`, the `hurdles` crate) with one unpinned thread per
//! participant at 1×, 2× and 4× the cores — beyond the core count Linux
//! preempts participants for real, and a barrier that spins on a preempted
//! peer burns the time that peer needs. Between episodes each thread does
//! 2–4 µs of busy work. A trial runs a fixed number of episodes, capped at
//! 3 s × `--scale` (a spinning barrier may crawl): value = wall time per
//! episode, the episodes it managed counted (a capped trial is marked
//! censored with the fraction done).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mpsync::barrier::{
    Barrier, Central, CombiningTree, Dissemination, McsTree, ScalableSc, WaitMode,
};
use mpsync::util::busy::BusyWork;
use mpsync::util::rng::SplitMix64;

use super::{Experiment, Params};
use crate::env::Preempt;
use crate::output::{Machine, Point, RunRecord, Status, Trial, Verdict};
use crate::stats::trimmed_mean;
use crate::svg::{Series, line_chart};

/// Episodes per trial at `--scale 1`.
pub const BASE_EPISODES: f64 = 4000.0;

/// A barrier the harness can drive: one participant's handle per thread.
pub trait BenchBarrier: Send + Sync {
    /// Participant `id` waits; whether it is the episode's leader.
    fn wait(&self, id: usize) -> bool;
}

/// Any mpsync barrier.
pub struct Ours<B>(pub B);
impl<B: Barrier> BenchBarrier for Ours<B> {
    fn wait(&self, id: usize) -> bool {
        self.0.wait(id).is_leader()
    }
}

/// `std::sync::Barrier`.
pub struct StdBarrier(pub std::sync::Barrier);
impl BenchBarrier for StdBarrier {
    fn wait(&self, _id: usize) -> bool {
        self.0.wait().is_leader()
    }
}

/// The `hurdles` crate (a handle per thread, `wait(&mut self)`).
pub struct Hurdles(pub Vec<std::sync::Mutex<hurdles::Barrier>>);
impl BenchBarrier for Hurdles {
    fn wait(&self, id: usize) -> bool {
        // Uncontended: each participant locks only its own handle.
        let mut h = self.0[id].lock().unwrap_or_else(|e| e.into_inner());
        h.wait().is_leader()
    }
}

/// One row of the barrier table.
#[derive(Debug, Clone, Copy)]
pub struct BarrierImpl {
    /// The paper's (or the crate's) name.
    pub name: &'static str,
    /// A crate people use today.
    pub peer: bool,
    /// Builds one for `n` participants.
    pub make: fn(usize) -> Box<dyn BenchBarrier>,
}

/// Every barrier and peer.
pub fn barrier_table() -> Vec<BarrierImpl> {
    fn ours<B: Barrier + 'static>(b: B) -> Box<dyn BenchBarrier> {
        Box::new(Ours(b))
    }
    vec![
        BarrierImpl {
            name: "Scalable-SC",
            peer: false,
            make: |n| ours(ScalableSc::new(n).expect("n >= 1")),
        },
        BarrierImpl {
            name: "Central-block",
            peer: false,
            make: |n| ours(Central::new(n, WaitMode::Block).expect("n >= 1")),
        },
        BarrierImpl {
            name: "Central-spin-block",
            peer: false,
            make: |n| ours(Central::new(n, WaitMode::HEURISTIC).expect("n >= 1")),
        },
        BarrierImpl {
            name: "Heuristic-tree",
            peer: false,
            make: |n| ours(CombiningTree::new(n, WaitMode::HEURISTIC).expect("n >= 1")),
        },
        BarrierImpl {
            name: "Arrival-tree",
            peer: false,
            make: |n| ours(CombiningTree::new(n, WaitMode::Spin).expect("n >= 1")),
        },
        BarrierImpl {
            name: "Dissemination",
            peer: false,
            make: |n| ours(Dissemination::new(n).expect("n >= 1")),
        },
        BarrierImpl {
            name: "MCS-tree",
            peer: false,
            make: |n| ours(McsTree::new(n).expect("n >= 1")),
        },
        BarrierImpl {
            name: "std::sync::Barrier",
            peer: true,
            make: |n| Box::new(StdBarrier(std::sync::Barrier::new(n))),
        },
        BarrierImpl {
            name: "hurdles",
            peer: true,
            make: |n| {
                let first = hurdles::Barrier::new(n);
                let mut v: Vec<_> = (1..n)
                    .map(|_| std::sync::Mutex::new(first.clone()))
                    .collect();
                v.push(std::sync::Mutex::new(first));
                Box::new(Hurdles(v))
            },
        },
    ]
}

/// What one trial measured.
#[derive(Debug, Clone, Copy)]
pub struct EpisodeRun {
    /// Episodes completed.
    pub episodes: u64,
    /// Wall time.
    pub elapsed: Duration,
}

/// Runs `episodes` episodes (two waits per iteration, the leader of the first
/// deciding whether to go on) with `n` threads, at most `cap` long. Work
/// between episodes: uniform in `work_ns`. Checks that no wait returned before
/// everyone arrived.
pub fn run_episodes(
    b: &dyn BenchBarrier,
    n: usize,
    episodes: u64,
    cap: Duration,
    work_ns: (u64, u64),
    seed: u64,
) -> anyhow::Result<EpisodeRun> {
    run_episodes_with(b, n, episodes, cap, work_ns, seed, &|_| ())
}

/// As [`run_episodes`]; each thread first calls `setup(id)` and keeps what it
/// returns (a pinning, an attachment to the pseudo-scheduler) while it runs.
pub fn run_episodes_with<G>(
    b: &dyn BenchBarrier,
    n: usize,
    episodes: u64,
    cap: Duration,
    work_ns: (u64, u64),
    seed: u64,
    setup: &(dyn Fn(usize) -> G + Sync),
) -> anyhow::Result<EpisodeRun> {
    let busy = BusyWork::global();
    let arrivals = AtomicU64::new(0);
    let early = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let go = std::sync::Barrier::new(n);
    let t0 = std::sync::OnceLock::new();
    let end = std::sync::OnceLock::new();
    std::thread::scope(|s| {
        for id in 0..n {
            let (arrivals, early, done, stop, go, t0, end) =
                (&arrivals, &early, &done, &stop, &go, &t0, &end);
            s.spawn(move || {
                let mut rng = SplitMix64::stream(seed, id as u64);
                let _kept = setup(id);
                go.wait();
                let start = *t0.get_or_init(Instant::now);
                let mut waits = 0u64;
                loop {
                    for half in 0..2 {
                        let w =
                            work_ns.0 + (rng.next_f64() * (work_ns.1 - work_ns.0) as f64) as u64;
                        busy.run_ns(w);
                        // Relaxed counters: checked against the barrier's own
                        // ordering (SeqCst would add a fence the barrier provides).
                        arrivals.fetch_add(1, Ordering::SeqCst);
                        let leader = b.wait(id);
                        waits += 1;
                        if arrivals.load(Ordering::SeqCst) < waits * n as u64 {
                            early.fetch_add(1, Ordering::Relaxed);
                        }
                        if leader {
                            let d = done.fetch_add(1, Ordering::SeqCst) + 1;
                            if half == 0 && (d + 1 >= episodes || start.elapsed() >= cap) {
                                stop.store(true, Ordering::SeqCst);
                            }
                        }
                    }
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                }
                end.get_or_init(Instant::now);
            });
        }
    });
    let early = early.into_inner();
    anyhow::ensure!(early == 0, "{early} waits returned before everyone arrived");
    let (t0, end) = (t0.get().copied(), end.get().copied());
    let elapsed = match (t0, end) {
        (Some(a), Some(b)) => b.duration_since(a),
        _ => Duration::ZERO,
    };
    Ok(EpisodeRun {
        episodes: done.into_inner(),
        elapsed,
    })
}

/// Runs the experiment.
pub fn run(exp: &Experiment, p: &Params, _preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let cores = p.cores.max(1);
    let threads: Vec<u32> = p
        .threads
        .clone()
        .unwrap_or_else(|| vec![cores, 2 * cores, 4 * cores]);
    let episodes = (BASE_EPISODES * p.scale).max(20.0) as u64;
    let cap = Duration::from_secs_f64((3.0 * p.scale).clamp(0.5, 30.0));
    let work = (2_000, 4_000);
    let table = barrier_table();
    let pb = crate::progress(
        (threads.len() * p.trials as usize * table.len()) as u64,
        exp.id,
    );
    let started = Instant::now();
    let mut trials = Vec::new();
    for &n in &threads {
        for t in 0..p.trials {
            for k in 0..table.len() {
                let imp = &table[(k + t as usize) % table.len()];
                let b = (imp.make)(n as usize);
                let r = run_episodes(
                    b.as_ref(),
                    n as usize,
                    episodes,
                    cap,
                    work,
                    p.seed ^ u64::from(t),
                )
                .map_err(|e| anyhow::anyhow!("{} with {n} threads: {e}", imp.name))?;
                let per = r.elapsed.as_nanos() as f64 / r.episodes.max(1) as f64;
                trials.push(Trial {
                    implementation: imp.name.into(),
                    x: f64::from(n),
                    trial: t,
                    value: per,
                    procs: Some(n),
                    censored_at: (r.episodes < episodes)
                        .then_some(r.episodes as f64 / episodes as f64),
                    ..Trial::default()
                });
                pb.inc(1);
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
    let mut points = Vec::new();
    for &n in &threads {
        let x = f64::from(n);
        let base = mean_of("std::sync::Barrier", x)
            .filter(|b| *b > 0.0)
            .unwrap_or(1.0);
        for imp in &table {
            if let Some(v) = mean_of(imp.name, x) {
                points.push(Point {
                    panel: None,
                    implementation: imp.name.into(),
                    x,
                    value: v,
                    normalized: v / base,
                });
            }
        }
    }
    let value = |name: &str, x: f64| {
        points
            .iter()
            .find(|q| q.implementation == name && q.x == x)
            .map(|q| q.value)
    };
    let mut details = vec![format!(
        "{cores} cores; {} threads unpinned, one per participant; {episodes} episodes per trial (capped at {:.1} s), 2-4 µs of work between episodes",
        threads
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        cap.as_secs_f64()
    )];
    let censored: Vec<String> = table
        .iter()
        .filter(|i| {
            trials
                .iter()
                .any(|t| t.implementation == i.name && t.censored_at.is_some())
        })
        .map(|i| i.name.to_string())
        .collect();
    if !censored.is_empty() {
        details.push(format!(
            "hit the time cap (time per episode from the episodes done): {}",
            censored.join(", ")
        ));
    }
    for (per_core, std_max, hurdles_max) in
        [(1u32, None, 1.2), (2, Some(0.5), 0.1), (4, Some(0.5), 0.1)]
    {
        let x = f64::from(per_core * cores);
        let best = table
            .iter()
            .filter(|i| !i.peer)
            .filter_map(|i| value(i.name, x).map(|v| (i.name, v)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        let (Some((bname, bv)), Some(sv), Some(hv)) =
            (best, value("std::sync::Barrier", x), value("hurdles", x))
        else {
            continue;
        };
        let (rs, rh) = (bv / sv, bv / hv);
        let std_part = match std_max {
            Some(m) => format!(
                " / std::sync::Barrier = {rs:.2} (target <= {m}: {})",
                if rs <= m { "met" } else { "missed" }
            ),
            None => format!(" / std::sync::Barrier = {rs:.2}"),
        };
        details.push(format!(
            "{per_core}x the cores ({x} threads): best mpsync barrier {bname} {:.1} µs/episode;{std_part}; / hurdles = {rh:.3} (target <= {hurdles_max}: {})",
            bv / 1e3,
            if rh <= hurdles_max { "met" } else { "missed" }
        ));
    }
    let series: Vec<Series> = table
        .iter()
        .map(|i| Series {
            label: i.name.into(),
            points: points
                .iter()
                .filter(|q| q.implementation == i.name)
                .map(|q| (q.x, q.normalized))
                .collect(),
        })
        .collect();
    let svg = line_chart(
        "barrier-oversub: episode time, unpinned threads on this machine's cores",
        "threads",
        "time per episode normalized to std::sync::Barrier (lower is better)",
        &series,
    );
    let rec = RunRecord {
        advice: Vec::new(),
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
            "episodes": episodes,
            "cap_s": cap.as_secs_f64(),
            "work_ns": [work.0, work.1],
            "implementations": table.iter().map(|i| i.name).collect::<Vec<_>>(),
        }),
        busy_iters_per_us: BusyWork::global().iters_per_us(),
        unit: "ns per episode (lower is better)".into(),
        x_label: "threads".into(),
        baseline: "std::sync::Barrier at the same thread count".into(),
        trials,
        points,
        extra: serde_json::Value::Null,
        verdict: Verdict {
            clauses: Vec::new(),
            conclusion: "no paper conclusion: a measurement against mpsync's targets (best mpsync barrier <= 0.5x std::sync::Barrier and <= 0.1x hurdles at 2x and 4x the cores, <= 1.2x hurdles at 1x)".into(),
            status: Status::Measurement,
            details,
        },
    };
    Ok((rec, svg))
}
