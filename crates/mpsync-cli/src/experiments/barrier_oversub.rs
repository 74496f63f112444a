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
use crate::model::{self, AdviceRule, Better, Clause, Design, Imp, Verdicts};
use crate::output::{RunRecord, Trial};

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

/// The baseline peer.
const STD: &str = "std::sync::Barrier";

/// mpsync's targets at 1×, 2× and 4× the cores, one clause each.
fn clauses(cores: u32) -> Vec<Clause> {
    let mut c = Vec::new();
    for (per_core, std_max, hurdles_max) in
        [(1u32, None, 1.2), (2, Some(0.5), 0.1), (4, Some(0.5), 0.1)]
    {
        let x = f64::from(per_core * cores);
        if let Some(m) = std_max {
            c.push(Clause::best_ours_at_most(
                format!("target: the best mpsync barrier ≤ {m}× {STD} at {per_core}× the cores"),
                None,
                "barrier",
                STD,
                0,
                x,
                m,
            ));
        }
        c.push(Clause::best_ours_at_most(
            format!(
                "target: the best mpsync barrier ≤ {hurdles_max}× hurdles at {per_core}× the cores"
            ),
            None,
            "barrier",
            "hurdles",
            0,
            x,
            hurdles_max,
        ));
    }
    c
}

/// The method and the capped barriers, as notes.
fn notes(
    cores: u32,
    threads: &[u32],
    episodes: u64,
    cap: Duration,
    table: &[BarrierImpl],
    trials: &[Trial],
) -> Vec<String> {
    let mut notes = vec![format!(
        "{cores} cores; {} threads unpinned, one per participant; {episodes} episodes per trial (capped at {:.1} s), 2-4 µs of work between episodes",
        threads
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        cap.as_secs_f64()
    )];
    let censored: Vec<&str> = table
        .iter()
        .filter(|i| {
            trials
                .iter()
                .any(|t| t.implementation == i.name && t.censored_at.is_some())
        })
        .map(|i| i.name)
        .collect();
    if !censored.is_empty() {
        notes.push(format!(
            "hit the time cap (time per episode from the episodes done): {}",
            censored.join(", ")
        ));
    }
    notes
}

/// Runs the experiment.
pub fn run(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let cores = p.cores.max(1);
    let threads: Vec<u32> = p
        .threads
        .clone()
        .unwrap_or_else(|| vec![cores, 2 * cores, 4 * cores]);
    let episodes = (BASE_EPISODES * p.scale).max(20.0) as u64;
    let cap = Duration::from_secs_f64((3.0 * p.scale).clamp(0.5, 30.0));
    let work = (2_000, 4_000);
    let table = barrier_table();
    let imps = table
        .iter()
        .map(|i| {
            if i.peer {
                Imp::peer(i.name, "barrier")
            } else {
                Imp::ours(i.name, "barrier")
            }
        })
        .collect();
    let d = Design::single(
        "threads",
        "ns per episode",
        Better::Lower,
        threads.iter().map(|&n| f64::from(n)).collect(),
        imps,
        p.trials,
    )
    .baseline(STD);
    let started = Instant::now();
    let trials = model::collect(exp.id, &d, &mut |c| {
        let n = c.x as usize;
        let imp = table
            .iter()
            .find(|i| i.name == c.imp.name)
            .ok_or_else(|| anyhow::anyhow!("no barrier named {}", c.imp.name))?;
        let b = (imp.make)(n);
        let r = run_episodes(
            b.as_ref(),
            n,
            episodes,
            cap,
            work,
            p.seed ^ u64::from(c.trial),
        )
        .map_err(|e| anyhow::anyhow!("{} with {n} threads: {e}", imp.name))?;
        Ok(Some(Trial {
            value: r.elapsed.as_nanos() as f64 / r.episodes.max(1) as f64,
            procs: Some(n as u32),
            censored_at: (r.episodes < episodes).then_some(r.episodes as f64 / episodes as f64),
            ..Trial::default()
        }))
    })?;
    let notes = notes(cores, &threads, episodes, cap, &table, &trials);
    let v = Verdicts {
        conclusion: "no paper conclusion: a measurement against mpsync's targets (best mpsync barrier <= 0.5x std::sync::Barrier and <= 0.1x hurdles at 2x and 4x the cores, <= 1.2x hurdles at 1x)".into(),
        clauses: clauses(cores),
        notes,
        targets: true,
        advice: vec![AdviceRule {
            kind: "barrier",
            panel: 0,
        }],
    };
    let params = serde_json::json!({
        "threads": threads,
        "episodes": episodes,
        "cap_s": cap.as_secs_f64(),
        "work_ns": [work.0, work.1],
    });
    Ok(model::finish(
        exp, p, preempt, &d, trials, v, params, started,
    ))
}
