//! `barrier-repartition`: how many episodes the two-level barrier needs to get
//! back to its steady-state episode time after the partition changes (issue
//! 15's target: "within 2 episodes"; paper 001 §3.3 reorganizes within the
//! episode of the change).
//!
//! The program of `wks95-barrier` (work uniform in 240–290 µs between
//! episodes, two threads per processor pinned `id mod P`) under the emulated
//! pseudo-scheduler, which repartitions the processors every 250 ms with the
//! paper's distribution (all processors w.p. ½, else ½, ⅓ or ¼ of them; the
//! paper's 1 s period with `--scale` ≥ 4). The leader of every episode records
//! when it ended and how many processors the partition had then. For every
//! change of the processor count, at episode `e` (the first to end under the
//! new count, the one the change disturbed), the new steady state `S` is the
//! median episode time of the settled episodes `e+5 …` up to the next change
//! (at least 8 of them), and the **recovery** is the least `r ≥ 0` with
//! episode `e+r` within [`TOLERANCE`]× `S`. The target holds if (1) the
//! median over Scalable-SC's changes of episode `e+2`'s time / `S` is within
//! the tolerance (the typical change is over after 2 episodes) and (2) at
//! least [`TARGET_SHARE`] of its changes recover with `r ≤ 2`. The share of
//! settled episodes above the same bound (the noise floor: a loaded machine
//! puts some there without any repartition) is reported beside it, with the
//! share of changes that would miss (2) by chance alone.
//! Central-block, which has no structure to reorganize, runs on the same
//! seeded schedule as a reference. A run lasts 6 s per barrier × `--scale`
//! (`--quick`: 4 s, one trial).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mpsync::sched::emulated::{Emulated, EmulatedConfig};
use mpsync::util::busy::BusyWork;
use mpsync::util::clock::now_ns;
use mpsync::util::rng::SplitMix64;

use super::barrier_oversub::{BarrierImpl, BenchBarrier, barrier_table};
use super::wks95_barrier::{MP, WORK_NS};
use super::{Experiment, Params};
use crate::env::{Preempt, summarize};
use crate::output::{Machine, Point, RunRecord, Status, Trial, Verdict};
use crate::stats::{median, quantile};
use crate::svg::{Series, line_chart};

/// The target, as a statement.
pub const CONCLUSION: &str = "after a repartition the scalable two-level barrier (Scalable-SC) \
is back to its steady-state episode time within 2 episodes";

/// An episode counts as back at the steady state within this factor of it.
pub const TOLERANCE: f64 = 1.25;
/// Recovery within this many episodes after the disturbed one is the target.
pub const TARGET_EPISODES: usize = 2;
/// Share of the changes that must meet it.
pub const TARGET_SHARE: f64 = 0.9;
/// The steady state is taken from episode `e + SETTLE` on …
pub const SETTLE: usize = 5;
/// … and needs at least this many such episodes before the next change.
pub const MIN_SETTLED: usize = 8;
/// Offsets around a change drawn in the figure.
const PROFILE: std::ops::RangeInclusive<i64> = -3..=8;

/// One episode as its leader saw it end.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpisodeEnd {
    /// `now_ns()` when the leader's wait returned.
    pub t_ns: u64,
    /// Processors of the partition then.
    pub processors: u32,
}

/// One change of the processor count and how the barrier took it.
#[derive(Debug, Clone, PartialEq)]
pub struct Recovery {
    /// Index (into the episode times) of the disturbed episode.
    pub episode: usize,
    /// Processor count before → after.
    pub from: u32,
    /// Processor count after.
    pub to: u32,
    /// Median settled episode time under the new count (ns).
    pub steady_ns: f64,
    /// Least `r` with episode `episode + r` within the tolerance; `None` if
    /// none before the settled window.
    pub episodes_to_recover: Option<usize>,
    /// Episode time / steady state at offsets [`PROFILE`] (NaN where absent).
    pub profile: Vec<f64>,
    /// Settled episodes above the tolerance (noise floor numerator).
    pub settled_above: usize,
    /// Settled episodes.
    pub settled: usize,
}

/// Finds every change of the processor count in `ends` and its recovery
/// (episode `i`'s time is `ends[i+1].t_ns - ends[i].t_ns`, under
/// `ends[i+1].processors`). Changes without [`MIN_SETTLED`] settled episodes
/// before the next one are skipped (their steady state is unknown).
pub fn recoveries(ends: &[EpisodeEnd]) -> Vec<Recovery> {
    if ends.len() < 2 {
        return Vec::new();
    }
    let d: Vec<f64> = ends
        .windows(2)
        .map(|w| w[1].t_ns.saturating_sub(w[0].t_ns) as f64)
        .collect();
    let procs: Vec<u32> = ends[1..].iter().map(|e| e.processors).collect();
    let changes: Vec<usize> = (1..d.len()).filter(|&i| procs[i] != procs[i - 1]).collect();
    let mut out = Vec::new();
    for (k, &e) in changes.iter().enumerate() {
        let next = changes.get(k + 1).copied().unwrap_or(d.len());
        let settled = d.get(e + SETTLE..next).unwrap_or(&[]);
        if settled.len() < MIN_SETTLED {
            continue;
        }
        let Some(steady) = median(settled) else {
            continue;
        };
        let bound = TOLERANCE * steady;
        let episodes_to_recover = (e..(e + SETTLE).min(next))
            .position(|i| d[i] <= bound)
            .or_else(|| (settled[0] <= bound).then_some(SETTLE));
        let profile = PROFILE
            .map(|o| {
                let i = e as i64 + o;
                // Only this interval's episodes (and the previous one's tail).
                if i >= 0 && (i as usize) < next {
                    d[i as usize] / steady
                } else {
                    f64::NAN
                }
            })
            .collect();
        out.push(Recovery {
            episode: e,
            from: procs[e - 1],
            to: procs[e],
            steady_ns: steady,
            episodes_to_recover,
            profile,
            settled_above: settled.iter().filter(|&&x| x > bound).count(),
            settled: settled.len(),
        });
    }
    out
}

/// One barrier's run on the emulated scheduler: the episode ends its leaders
/// recorded and the scheduler's statistics.
struct BarrierRun {
    ends: Vec<EpisodeEnd>,
    stats: mpsync::sched::emulated::SchedStats,
}

/// Runs `b` with `n = MP × np` threads for `dur` under a fresh pseudo-scheduler
/// on `np` processors repartitioning every `period`.
fn run_one(
    b: &dyn BenchBarrier,
    np: u32,
    dur: Duration,
    period: Duration,
    quantum: Duration,
    seed: u64,
    cpus: &[usize],
) -> anyhow::Result<BarrierRun> {
    let n = (np * MP) as usize;
    let emu = Emulated::start(
        EmulatedConfig::new(np, 1.0)?
            .quantum(quantum)
            .repartition_every(Some(period))
            .seed(seed),
    )?;
    let busy = BusyWork::global();
    // Room for every episode at the fastest plausible rate (no allocation in
    // the measured loop).
    let cap = (dur.as_nanos() as u64 / (WORK_NS.0 / 2)).max(64) as usize;
    let ends = Mutex::new(Vec::with_capacity(cap));
    let stop = AtomicBool::new(false);
    let go = std::sync::Barrier::new(n);
    let failed = Mutex::new(None::<String>);
    std::thread::scope(|s| {
        for id in 0..n {
            let (ends, stop, go, emu, failed) = (&ends, &stop, &go, &emu, &failed);
            s.spawn(move || {
                let v = id % np as usize;
                let _ = mpsync::sched::native::pin_current_thread(cpus[v]);
                let _att = match emu.attach(v as u32) {
                    Ok(a) => Some(a),
                    Err(e) => {
                        *failed.lock().unwrap_or_else(|p| p.into_inner()) =
                            Some(format!("attach to virtual processor {v}: {e}"));
                        None
                    }
                };
                go.wait();
                if failed.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
                    return;
                }
                let mut rng = SplitMix64::stream(seed, id as u64);
                let start = Instant::now();
                let (mut gen_seen, mut procs) = (u64::MAX, 0u32);
                loop {
                    // Two waits per stop check: the leader of the first sets
                    // `stop` before arriving at the second, so everyone sees
                    // it after the second (see barrier_oversub).
                    for half in 0..2 {
                        let w =
                            WORK_NS.0 + (rng.next_f64() * (WORK_NS.1 - WORK_NS.0) as f64) as u64;
                        busy.run_ns(w);
                        if b.wait(id) {
                            let t_ns = now_ns();
                            let g = mpsync::sched::generation();
                            if g != gen_seen {
                                gen_seen = g;
                                procs = mpsync::sched::partition().processors;
                            }
                            let mut e = ends.lock().unwrap_or_else(|p| p.into_inner());
                            if e.len() < e.capacity() {
                                e.push(EpisodeEnd {
                                    t_ns,
                                    processors: procs,
                                });
                            }
                            if half == 0 && (start.elapsed() >= dur || e.len() == e.capacity()) {
                                stop.store(true, Ordering::SeqCst);
                            }
                        }
                    }
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                }
            });
        }
    });
    if let Some(e) = failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        anyhow::bail!("{e}");
    }
    let stats = emu.stop();
    Ok(BarrierRun {
        ends: ends.into_inner().unwrap_or_else(|p| p.into_inner()),
        stats,
    })
}

/// What one barrier's trials add up to.
#[derive(Debug, Default)]
struct Summary {
    changes: usize,
    within: usize,
    never: usize,
    median_r: Option<usize>,
    max_r: Option<usize>,
    settled_above: usize,
    settled: usize,
    steady_ms: Vec<(u32, f64)>,
    /// Median over the changes of episode `e + TARGET_EPISODES`'s time / `S`.
    median_at_target: Option<f64>,
}

fn summarize_recoveries(rs: &[Recovery]) -> Summary {
    let mut rec: Vec<usize> = rs.iter().filter_map(|r| r.episodes_to_recover).collect();
    rec.sort_unstable();
    let mut steady = Vec::new();
    for to in rs
        .iter()
        .map(|r| r.to)
        .collect::<std::collections::BTreeSet<_>>()
    {
        let v: Vec<f64> = rs
            .iter()
            .filter(|r| r.to == to)
            .map(|r| r.steady_ns / 1e6)
            .collect();
        if let Some(m) = median(&v) {
            steady.push((to, m));
        }
    }
    Summary {
        changes: rs.len(),
        within: rec.iter().filter(|&&r| r <= TARGET_EPISODES).count(),
        never: rs.len() - rec.len(),
        median_r: median(&rec),
        max_r: rec.last().copied(),
        settled_above: rs.iter().map(|r| r.settled_above).sum(),
        settled: rs.iter().map(|r| r.settled).sum(),
        steady_ms: steady,
        median_at_target: median(
            &rs.iter()
                .filter_map(|r| {
                    let j = PROFILE
                        .clone()
                        .position(|o| o == TARGET_EPISODES as i64)
                        .expect("in profile");
                    r.profile.get(j).copied().filter(|x| x.is_finite())
                })
                .collect::<Vec<_>>(),
        ),
    }
}

/// Judges the target on Scalable-SC's recoveries at `processors`; the other
/// barriers' lines are reported beside it.
pub fn verdict(per_barrier: &[(&str, Vec<Recovery>)], processors: u32) -> Verdict {
    let mut details = Vec::new();
    if processors < 4 {
        details.push(format!(
            "caveat: on {processors} processors the partition only moves between {processors} and 1 \
             processor(s), where every layout of the two-level barrier is close to a central one: a \
             build that never reorganizes recovers as fast here (seen on 2 cores); the measure tells \
             layouts apart from 4 processors on"
        ));
    }
    let mut status = Status::PartlyEvaluable;
    for (name, rs) in per_barrier {
        let s = summarize_recoveries(rs);
        let steady: Vec<String> = s
            .steady_ms
            .iter()
            .map(|(p, ms)| format!("{p} processors {ms:.3} ms"))
            .collect();
        let line = format!(
            "{name}: {} of {} processor-count changes back within {TOLERANCE:.2}x of the new steady state \
             within {TARGET_EPISODES} episodes after the disturbed one (median {}, worst {}, {} never \
             before the settled window); noise floor: {} of {} settled episodes ({:.1}%) above the same bound; \
             steady state {}",
            s.within,
            s.changes,
            s.median_r.map_or("-".into(), |r| r.to_string()),
            s.max_r.map_or("-".into(), |r| r.to_string()),
            s.never,
            s.settled_above,
            s.settled,
            100.0 * s.settled_above as f64 / s.settled.max(1) as f64,
            if steady.is_empty() {
                "-".into()
            } else {
                steady.join(", ")
            }
        );
        details.push(line);
        if *name == "Scalable-SC" {
            if s.changes < 3 {
                details.push(format!(
                    "not evaluated: only {} change(s) of the processor count with a known steady state \
                     (run longer: --scale 2, or more processors)",
                    s.changes
                ));
            } else {
                let share = s.within as f64 / s.changes as f64;
                let typical = s.median_at_target.is_some_and(|m| m <= TOLERANCE);
                let strict = share >= TARGET_SHARE;
                let ok = typical && strict;
                details.push(format!(
                    "target (1): the median over the changes of episode e+{TARGET_EPISODES}'s time / the new steady state is {} (needs <= {TOLERANCE:.2}): {}",
                    s.median_at_target.map_or("-".into(), |m| format!("{m:.2}")),
                    if typical { "holds" } else { "does not hold" }
                ));
                details.push(format!(
                    "target (2): Scalable-SC recovers within {TARGET_EPISODES} episodes at {:.0}% of the changes \
                     (needs {:.0}%; with the noise floor above, episodes e+1 and e+2 both land above the bound \
                     by chance alone at about {:.0}% of the changes): {}",
                    100.0 * share,
                    100.0 * TARGET_SHARE,
                    100.0 * (s.settled_above as f64 / s.settled.max(1) as f64).powi(2),
                    if strict { "holds" } else { "does not hold" }
                ));
                status = if ok {
                    Status::Holds
                } else {
                    Status::DoesNotHold
                };
            }
        }
    }
    Verdict {
        clauses: Vec::new(),
        conclusion: CONCLUSION.into(),
        status,
        details,
    }
}

/// The barriers run: the two-level one, then the reference.
pub const NAMES: &[&str] = &["Scalable-SC", "Central-block"];

/// Runs the experiment.
pub fn run(exp: &Experiment, p: &Params, _preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let cpus = mpsync::sched::native::available_cpus()?;
    let np = match p.procs.as_deref() {
        None => p.cores.max(1),
        Some([one]) => *one,
        Some(v) => anyhow::bail!(
            "--procs {v:?}: barrier-repartition runs at one processor count (e.g. --procs 4)"
        ),
    };
    if np < 2 || np as usize > cpus.len() {
        anyhow::bail!(
            "--procs {np}: must be between 2 (a repartition needs processors to take away) and the {} \
             available processors",
            cpus.len()
        );
    }
    let quantum = p.quantum(50.0);
    let period = if p.scale >= 4.0 {
        Duration::from_secs(1)
    } else {
        Duration::from_millis(250)
    };
    anyhow::ensure!(
        quantum <= period,
        "--quantum-ms {}: must be at most the repartition period ({} ms)",
        quantum.as_secs_f64() * 1e3,
        period.as_millis()
    );
    let (dur_s, trials) = if p.quick {
        (4.0, 1)
    } else {
        (6.0 * p.scale, p.trials.max(1))
    };
    let dur = Duration::from_secs_f64(dur_s.clamp(1.0, 600.0));
    let table: Vec<BarrierImpl> = NAMES
        .iter()
        .filter_map(|n| barrier_table().into_iter().find(|i| i.name == *n))
        .collect();
    let pb = crate::progress((trials as usize * table.len()) as u64, exp.id);
    let started = Instant::now();
    let mut per: Vec<(&str, Vec<Recovery>)> = table.iter().map(|i| (i.name, Vec::new())).collect();
    let mut trial_rows = Vec::new();
    let mut sched = Vec::new();
    for t in 0..trials {
        let seed = p.seed.wrapping_add(u64::from(t));
        for k in 0..table.len() {
            let imp = &table[(k + t as usize) % table.len()];
            let name = imp.name;
            let b = (imp.make)((np * MP) as usize);
            let r = run_one(b.as_ref(), np, dur, period, quantum, seed, &cpus)
                .map_err(|e| anyhow::anyhow!("{name} on {np} processors: {e}"))?;
            let rs = recoveries(&r.ends);
            let s = summarize_recoveries(&rs);
            trial_rows.push(Trial {
                implementation: name.into(),
                x: f64::from(np),
                trial: t,
                value: s.within as f64 / s.changes.max(1) as f64,
                preemptions: r.stats.preemptions,
                warnings: r.stats.warnings,
                mp: Some(f64::from(MP)),
                procs: Some(np),
                ..Trial::default()
            });
            sched.push(serde_json::json!({
                "barrier": name,
                "trial": t,
                "episodes": r.ends.len(),
                "repartitions": r.stats.repartitions,
                "scheduler": summarize(&r.stats),
            }));
            per.iter_mut()
                .find(|(n, _)| *n == name)
                .expect("in table")
                .1
                .extend(rs);
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    let verdict = verdict(&per, np);
    // The recovery profile: median episode time / new steady state at each
    // offset from the disturbed episode.
    let mut points = Vec::new();
    let mut series = Vec::new();
    for (name, rs) in &per {
        let mut pts = Vec::new();
        for (j, o) in PROFILE.enumerate() {
            let v: Vec<f64> = rs
                .iter()
                .map(|r| r.profile[j])
                .filter(|x| x.is_finite())
                .collect();
            if let Some(m) = median(&v) {
                pts.push((o as f64, m));
                points.push(Point {
                    panel: None,
                    implementation: (*name).into(),
                    x: o as f64,
                    value: m,
                    normalized: m,
                });
            }
        }
        series.push(Series {
            label: (*name).into(),
            points: pts,
        });
    }
    let svg = line_chart(
        &format!("{} ({np} processors, {})", exp.id, verdict.status.label()),
        "episodes after the change (0 = the disturbed episode)",
        "median episode time / new steady state",
        &series,
    );
    let p90_next: Vec<serde_json::Value> = per
        .iter()
        .map(|(name, rs)| {
            let at = |o: i64| {
                let j = PROFILE.clone().position(|x| x == o).expect("in profile");
                let v: Vec<f64> = rs
                    .iter()
                    .map(|r| r.profile[j])
                    .filter(|x| x.is_finite())
                    .collect();
                quantile(&v, 0.9)
            };
            serde_json::json!({"barrier": name, "p90_ratio_at_0": at(0), "p90_ratio_at_1": at(1), "p90_ratio_at_2": at(2)})
        })
        .collect();
    let rec = RunRecord {
        advice: Vec::new(),
        experiment: exp.id.into(),
        paper: exp.reference.into(),
        title: exp.title.into(),
        preempt: Preempt::Emulated.name().into(),
        started_unix: crate::unix_now(),
        duration_s: started.elapsed().as_secs_f64(),
        machine: Machine::detect(),
        params: serde_json::json!({
            "common": p,
            "processors": np,
            "threads_per_processor": MP,
            "work_ns": [WORK_NS.0, WORK_NS.1],
            "seconds_per_barrier": dur.as_secs_f64(),
            "repartition_every_ms": period.as_millis() as u64,
            "quantum_ms": quantum.as_secs_f64() * 1e3,
            "tolerance": TOLERANCE,
            "settle_from_episode": SETTLE,
            "min_settled": MIN_SETTLED,
        }),
        busy_iters_per_us: BusyWork::global().iters_per_us(),
        unit: "episode time / the new steady state (median over changes)".into(),
        x_label: "episodes after the change of the processor count".into(),
        baseline: "each change's own steady state (median of its settled episodes)".into(),
        trials: trial_rows,
        points,
        extra: serde_json::json!({
            "scheduler": sched,
            "p90": p90_next,
            "recoveries": per.iter().map(|(name, rs)| serde_json::json!({
                "barrier": name,
                "changes": rs.iter().map(|r| serde_json::json!({
                    "episode": r.episode, "from": r.from, "to": r.to,
                    "steady_ms": r.steady_ns / 1e6,
                    "episodes_to_recover": r.episodes_to_recover,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        }),
        verdict,
    };
    Ok((rec, svg))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Episode ends from episode times (ns) and processor counts.
    fn ends(times: &[(u64, u32)]) -> Vec<EpisodeEnd> {
        let mut t = 0;
        let mut v = vec![EpisodeEnd {
            t_ns: 0,
            processors: times[0].1,
        }];
        for &(d, p) in times {
            t += d;
            v.push(EpisodeEnd {
                t_ns: t,
                processors: p,
            });
        }
        v
    }

    #[test]
    fn recovery_counts_episodes_after_the_disturbed_one() {
        // 20 episodes at 2 processors (500), then 1 processor (1000): the
        // disturbed episode 3000, the next 1400, then steady.
        let mut d: Vec<(u64, u32)> = vec![(500, 2); 20];
        d.push((3000, 1));
        d.push((1400, 1));
        d.extend(vec![(1000, 1); 20]);
        let rs = recoveries(&ends(&d));
        assert_eq!(rs.len(), 1, "{rs:?}");
        assert_eq!((rs[0].from, rs[0].to), (2, 1));
        assert_eq!(rs[0].steady_ns, 1000.0);
        assert_eq!(rs[0].episodes_to_recover, Some(2));
        assert_eq!(rs[0].settled_above, 0);
        // The profile starts three episodes before the change, at the old pace.
        assert_eq!(rs[0].profile[0], 0.5);
        assert_eq!(rs[0].profile[3], 3.0);
    }

    #[test]
    fn slow_recovery_and_short_intervals() {
        // Back to 2 processors: six slow episodes, never within the window.
        let mut d: Vec<(u64, u32)> = vec![(1000, 1); 20];
        d.extend(vec![(2000, 2); 6]);
        d.extend(vec![(500, 2); 20]);
        // Then a change with too few settled episodes before the next.
        d.extend(vec![(900, 1); 6]);
        d.extend(vec![(500, 2); 20]);
        let rs = recoveries(&ends(&d));
        assert_eq!(rs.len(), 2, "{rs:?}");
        assert_eq!(rs[0].episodes_to_recover, None);
        // The noise floor counts settled episodes only (from e+5: the sixth
        // slow one is there, the first five are not).
        assert_eq!((rs[0].settled, rs[0].settled_above), (21, 1));
        assert_eq!(rs[1].episodes_to_recover, Some(0));
        let v = verdict(&[("Scalable-SC", rs.clone())], 4);
        assert_eq!(v.status, Status::PartlyEvaluable, "{v:?}");
        let mut three = rs.clone();
        three.push(rs[1].clone());
        three.push(rs[1].clone());
        // 3 of 4 within 2 episodes: 75% < 90%.
        assert_eq!(
            verdict(&[("Scalable-SC", three.clone())], 4).status,
            Status::DoesNotHold
        );
        three.remove(0);
        assert_eq!(verdict(&[("Scalable-SC", three)], 4).status, Status::Holds);
    }

    #[test]
    fn no_changes_no_recoveries() {
        assert!(recoveries(&ends(&[(500, 2); 30])).is_empty());
        assert!(recoveries(&[]).is_empty());
    }

    #[test]
    fn a_late_relapse_fails_the_typical_clause() {
        // Back at e+1 each time (the strict form holds), but episode e+2 is
        // slow again at every change: not back to the steady state.
        let mut d: Vec<(u64, u32)> = vec![(500, 2); 20];
        for p in [1, 2, 1] {
            let s = if p == 1 { 1000 } else { 500 };
            d.push((3 * s, p));
            d.push((s, p));
            d.push((2 * s, p));
            d.extend(vec![(s, p); 20]);
        }
        let rs = recoveries(&ends(&d));
        assert_eq!(rs.len(), 3, "{rs:?}");
        assert!(
            rs.iter().all(|r| r.episodes_to_recover == Some(1)),
            "{rs:?}"
        );
        let v = verdict(&[("Scalable-SC", rs)], 4);
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
        assert!(
            v.details
                .iter()
                .any(|l| l.contains("target (1)") && l.contains("2.00")),
            "{v:?}"
        );
    }
}
