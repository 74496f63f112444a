//! The queue experiments of Hart, *Practical lock-free memory reclamation*
//! (MSc thesis 2005, papers/002_…, chapter 5): the Michael–Scott queue over each
//! reclamation scheme, in Hart's test loop — threads run for a fixed time; each
//! loop iteration does 100 operations (a random queue; enqueue or dequeue with
//! equal probability), then announces a quiescent state (ignored by every scheme
//! but QSBR); time per operation = run time / all threads' operations; 7 trials,
//! the mean of the median 5. Nodes come from Hart's allocator (two per-thread
//! magazines of 100 nodes over a spinlocked pool, pre-allocated) unless
//! `--alloc system`.
//!
//! - `hart-base` (§5.2.1, Fig. 5.2, queue part): one thread, one non-empty queue,
//!   per scheme and the leaking baseline.
//! - `hart-queues-threads` (§5.2.2, Fig. 5.7/5.9): 100 queues, threads 1..16 on
//!   this machine's cores — CPU contention with every operation allocating or
//!   freeing.
//! - `hart-queues-count` (§5.2.4, Fig. 5.13): two threads, a varying number of queues.
//! - `hart-memory` (the thesis's open question, mpsync's own): one thread stalls
//!   inside an operation while the others run; unreclaimed nodes over time per
//!   scheme, with Michael's bound for hazard pointers beside them. Its measure
//!   is a series (the model's `collect_series`: 40 samples over 2 s × `--scale`,
//!   one run per scheme), its clauses judge the whole series: HP never above
//!   N·R; QSBR and EBR "grow without bound" by a slope test over the second
//!   half of the run ([`still_growing`]) and end past HP's bound. The
//!   stalled-thread harness ([`run_stalled`]) is shared with `hart-memory-hash`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mpsync::ds::alloc::{MagazineAlloc, NodeAlloc, SystemAlloc};
use mpsync::ds::ms_queue::MsQueue;
use mpsync::reclaim::{Ebr, Guard, HazardPointers, Leak, Local, Qsbr, Reclaimer};
use mpsync::sync::Arc;
use mpsync::util::rng::SplitMix64;

use super::wks94::{AMONG_THE_BEST, COLLAPSE};
use super::{AllocMode, Experiment, Params};
use crate::env::Preempt;
use crate::model::{
    self, AdviceRule, Better, Clause, Design, Guide, Imp, Judged, Role, Verdicts, fmt_x,
};
use crate::output::{RunRecord, Trial};
use crate::svg::sig3;

/// Trial length at `--scale 1` (Hart does not give his; long enough for ~10^6 ops).
pub const BASE_DURATION_MS: f64 = 500.0;
/// Operations per quiescent state (Hart: 100).
pub const OPS_PER_LOOP: u64 = 100;
/// Nodes in each queue when a trial starts.
pub const INITIAL_PER_QUEUE: usize = 16;
/// Hazard pointers per thread for the queue (head and its successor).
pub const HP_SLOTS: usize = 2;

/// A reclamation scheme, as a figure names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Quiescent-state-based reclamation.
    Qsbr,
    /// Epoch-based reclamation (Fraser).
    Ebr,
    /// Hazard pointers (Michael's SMR).
    Hp,
    /// Never frees during the run (the baseline).
    Leak,
}

impl Scheme {
    /// As in the figures.
    pub fn name(self) -> &'static str {
        match self {
            Self::Qsbr => "QSBR",
            Self::Ebr => "EBR",
            Self::Hp => "HP",
            Self::Leak => "Leak",
        }
    }
}

/// One run of Hart's test loop.
#[derive(Debug, Clone, Copy)]
pub struct LoopSpec {
    /// Queues the threads pick from at random.
    pub queues: usize,
    /// Worker threads (unpinned: more than the cores means preemption).
    pub threads: u32,
    /// Run time.
    pub duration: Duration,
    /// Seed of the queue and operation choices.
    pub seed: u64,
}

/// One iteration of Hart's loop: [`OPS_PER_LOOP`] operations, each on a
/// random queue, an enqueue or a dequeue with equal probability.
fn hart_ops<R: Reclaimer, A: NodeAlloc>(
    queues: &[MsQueue<u64, R, A>],
    local: &R::Local,
    rng: &mut SplitMix64,
) {
    for _ in 0..OPS_PER_LOOP {
        let r = rng.next_u64();
        let q = &queues[(r >> 1) as usize % queues.len()];
        if r & 1 == 0 {
            q.enqueue(local, r >> 8);
        } else {
            std::hint::black_box(q.dequeue(local));
        }
    }
}

/// Operations all threads completed in `spec.duration`.
fn test_loop<R: Reclaimer, A: NodeAlloc>(domain: Arc<R>, spec: LoopSpec) -> u64 {
    let queues: Vec<MsQueue<u64, R, A>> = (0..spec.queues)
        .map(|_| MsQueue::with_domain(domain.clone()))
        .collect();
    {
        let local = R::register(&domain);
        for q in &queues {
            for k in 0..INITIAL_PER_QUEUE as u64 {
                q.enqueue(&local, k);
            }
        }
    }
    let stop = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..spec.threads {
            let (queues, stop, total, domain) = (&queues, &stop, &total, &domain);
            s.spawn(move || {
                let mut local = R::register(domain);
                let mut rng = SplitMix64::stream(spec.seed, u64::from(t));
                let mut n = 0u64;
                loop {
                    hart_ops(queues, &local, &mut rng);
                    n += OPS_PER_LOOP;
                    local.quiescent();
                    // Relaxed: a stop request; the scope's join orders the total.
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
                // Relaxed: read after the join.
                total.fetch_add(n, Ordering::Relaxed);
            });
        }
        // The harness (not an algorithm) may sleep: it is the timer.
        std::thread::sleep(spec.duration);
        // Relaxed: see above.
        stop.store(true, Ordering::Relaxed);
    });
    total.into_inner()
}

fn with_alloc<R: Reclaimer>(domain: Arc<R>, spec: LoopSpec, alloc: AllocMode) -> u64 {
    match alloc {
        AllocMode::Magazines => test_loop::<R, MagazineAlloc>(domain, spec),
        AllocMode::System => test_loop::<R, SystemAlloc>(domain, spec),
    }
}

/// ns per operation of one trial of `scheme`.
pub fn trial(scheme: Scheme, spec: LoopSpec, alloc: AllocMode) -> anyhow::Result<f64> {
    let ops = match scheme {
        Scheme::Qsbr => with_alloc(Arc::new(Qsbr::new()), spec, alloc),
        Scheme::Ebr => with_alloc(Arc::new(Ebr::new()), spec, alloc),
        Scheme::Hp => with_alloc(Arc::new(HazardPointers::new(HP_SLOTS)?), spec, alloc),
        Scheme::Leak => with_alloc(Arc::new(Leak::new()), spec, alloc),
    };
    Ok(spec.duration.as_nanos() as f64 / ops.max(1) as f64)
}

struct Setup {
    /// (x, queues, threads) per point.
    points: Vec<(f64, usize, u32)>,
    schemes: &'static [Scheme],
    x_label: &'static str,
    conclusion: &'static str,
}

fn setup(id: &str, p: &Params) -> anyhow::Result<Setup> {
    use Scheme::*;
    Ok(match id {
        "hart-base" => Setup {
            points: vec![(1.0, 1, 1)],
            schemes: &[Qsbr, Ebr, Hp, Leak],
            x_label: "threads",
            conclusion: "QSBR is the cheapest scheme, and the schemes' costs are ordered by the fences each operation needs (QSBR < EBR < HP)",
        },
        "hart-queues-threads" => {
            let threads = p.threads.clone().unwrap_or_else(|| {
                if p.quick {
                    vec![1, 2, 4, 8]
                } else {
                    vec![1, 2, 4, 8, 16]
                }
            });
            Setup {
                points: threads.iter().map(|&t| (f64::from(t), 100, t)).collect(),
                schemes: &[Qsbr, Ebr, Hp],
                x_label: "threads",
                conclusion: "with CPU contention and an allocation-heavy workload QSBR and EBR degrade; hazard pointers do not",
            }
        }
        "hart-queues-count" => {
            let counts: &[usize] = if p.quick {
                &[1, 10, 100]
            } else {
                &[1, 2, 5, 10, 20, 50, 100]
            };
            Setup {
                points: counts.iter().map(|&q| (q as f64, q, 2)).collect(),
                schemes: &[Qsbr, Ebr, Hp],
                x_label: "queues",
                conclusion: "QSBR is the best scheme at every number of queues",
            }
        }
        other => anyhow::bail!("{other} is not a hart queue experiment"),
    })
}

/// Runs `hart-base`, `hart-queues-threads` or `hart-queues-count`.
pub fn run(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    if exp.id == "hart-memory" {
        return run_memory(exp, p, preempt);
    }
    let st = setup(exp.id, p)?;
    let duration = Duration::from_secs_f64((BASE_DURATION_MS * p.scale).max(20.0) / 1e3);
    if p.alloc == AllocMode::Magazines {
        let most = st.points.iter().map(|q| q.1).max().unwrap_or(1);
        MagazineAlloc::preallocate(most * INITIAL_PER_QUEUE * 4 + 10_000);
    }
    let imps = st
        .schemes
        .iter()
        .map(|s| match s {
            Scheme::Leak => Imp::reference(s.name()),
            _ => Imp::ours(s.name(), "reclaimer"),
        })
        .collect();
    let d = Design::single(
        st.x_label,
        "ns per operation",
        Better::Lower,
        st.points.iter().map(|q| q.0).collect(),
        imps,
        p.trials,
    );
    let started = Instant::now();
    let trials = model::collect(exp.id, &d, &mut |c| {
        let scheme = *st
            .schemes
            .iter()
            .find(|s| s.name() == c.imp.name)
            .ok_or_else(|| anyhow::anyhow!("no scheme named {}", c.imp.name))?;
        let &(_, queues, threads) = st
            .points
            .iter()
            .find(|q| q.0 == c.x)
            .ok_or_else(|| anyhow::anyhow!("no point at {}", c.x))?;
        let spec = LoopSpec {
            queues,
            threads,
            duration,
            seed: p.seed ^ u64::from(c.trial),
        };
        Ok(Some(Trial {
            value: trial(scheme, spec, p.alloc)?,
            procs: Some(threads),
            ..Trial::default()
        }))
    })?;
    let mut v = verdicts(exp.id, st.conclusion, p.cores);
    v.notes.push(format!("allocator: {}", alloc_name(p.alloc)));
    if exp.id == "hart-queues-threads" {
        v.advice.push(AdviceRule {
            kind: "reclaimer",
            panel: 0,
        });
    }
    let params = serde_json::json!({
        "points_x_queues_threads": st.points,
        "trial_ms": duration.as_secs_f64() * 1e3,
        "ops_per_quiescent_state": OPS_PER_LOOP,
        "initial_nodes_per_queue": INITIAL_PER_QUEUE,
        "hazard_pointers_per_thread": HP_SLOTS,
        "allocator": alloc_name(p.alloc),
    });
    Ok(model::finish(
        exp, p, preempt, &d, trials, v, params, started,
    ))
}

pub(super) fn alloc_name(a: AllocMode) -> &'static str {
    match a {
        AllocMode::Magazines => MagazineAlloc::NAME,
        AllocMode::System => SystemAlloc::NAME,
    }
}

/// Judged when a clause lacks its values.
pub(super) fn unmeasured(at: String) -> Judged {
    Judged {
        at,
        ours: "not measured".into(),
        holds: None,
    }
}

/// "QSBR < EBR < HP" at one thread (Hart Fig. 5.2), and mpsync's target for
/// QSBR over the leaking baseline.
fn base_clauses() -> Vec<Clause> {
    let order = Clause::new(
        "the schemes' costs are ordered QSBR ≤ EBR ≤ HP",
        Some("QSBR < EBR < HP (Fig. 5.2)"),
        |r| {
            let at = r.at(0, 1.0);
            match (
                r.value("QSBR", 0, 1.0),
                r.value("EBR", 0, 1.0),
                r.value("HP", 0, 1.0),
            ) {
                (Some(q), Some(e), Some(h)) => Judged {
                    at,
                    ours: format!("QSBR {} ns, EBR {} ns, HP {} ns", sig3(q), sig3(e), sig3(h)),
                    holds: Some(q <= e && e <= h),
                },
                _ => unmeasured(at),
            }
        },
    );
    let target = Clause::ratio_at_most(
        "target: QSBR ≤ 1.05× the leaking baseline",
        None,
        "QSBR",
        "Leak",
        0,
        1.05,
    );
    vec![order, target]
}

/// Whether `name`'s time per operation at the most threads is at least
/// [`COLLAPSE`]× its time at the core count, as `degrades` says it should be.
pub(super) fn degrades_beyond_cores(
    name: String,
    cores: u32,
    degrades: bool,
) -> impl Fn(&model::Results<'_>) -> Judged {
    move |r| {
        let xs = &r.design.panels[0].xs;
        let knee = xs
            .iter()
            .copied()
            .filter(|&x| x <= f64::from(cores))
            .reduce(f64::max);
        let top = r.last_x(0);
        let at = format!(
            "{} threads against {}",
            fmt_x(top),
            knee.map_or("–".into(), fmt_x)
        );
        let Some(k) = knee.filter(|&k| top > k) else {
            return Judged {
                at,
                ours: format!(
                    "no point beyond the {cores} cores: use --threads with counts above {cores}"
                ),
                holds: None,
            };
        };
        match (r.value(&name, 0, k), r.value(&name, 0, top)) {
            (Some(a), Some(b)) => Judged {
                at,
                ours: format!(
                    "{} ({})",
                    sig3(b / a),
                    if b / a >= COLLAPSE {
                        "degrades"
                    } else {
                        "does not degrade"
                    }
                ),
                holds: Some((b / a >= COLLAPSE) == degrades),
            },
            _ => unmeasured(at),
        }
    }
}

/// One clause per scheme: QSBR and EBR degrade beyond the cores, HP does not.
fn threads_clauses(cores: u32) -> Vec<Clause> {
    ["QSBR", "EBR", "HP"]
        .into_iter()
        .map(|n| {
            let degrades = n != "HP";
            let paper = if degrades { "degrades" } else { "does not degrade" };
            Clause::new(
                format!(
                    "{n} {paper} beyond the cores (degrades: ≥ {COLLAPSE}× the time per operation at the core count)"
                ),
                Some(paper),
                degrades_beyond_cores(n.to_string(), cores, degrades),
            )
        })
        .collect()
}

/// "QSBR is the best at every number of queues" (within [`AMONG_THE_BEST`]).
fn count_clauses() -> Vec<Clause> {
    vec![Clause::new(
        format!("QSBR is the best scheme at every number of queues (within {AMONG_THE_BEST}×)"),
        Some("QSBR best (Fig. 5.3)"),
        |r| {
            let mut each = Vec::new();
            let mut holds = true;
            for &x in &r.design.panels[0].xs {
                let best = r
                    .ranked(Role::Ours, Some("reclaimer"), 0, x)
                    .first()
                    .copied();
                if let (Some(q), Some((b, bv))) = (r.value("QSBR", 0, x), best) {
                    holds &= q / bv <= AMONG_THE_BEST;
                    each.push(format!("{}: {} ({})", fmt_x(x), sig3(q / bv), b.name));
                }
            }
            if each.is_empty() {
                return unmeasured("every number of queues".into());
            }
            Judged {
                at: "every number of queues".into(),
                ours: format!("QSBR / best: {}", each.join(", ")),
                holds: Some(holds),
            }
        },
    )]
}

/// The verdict of a hart queue experiment, clause by clause.
fn verdicts(id: &str, conclusion: &str, cores: u32) -> Verdicts {
    Verdicts {
        conclusion: conclusion.into(),
        clauses: match id {
            "hart-base" => base_clauses(),
            "hart-queues-threads" => threads_clauses(cores),
            "hart-queues-count" => count_clauses(),
            _ => Vec::new(),
        },
        notes: Vec::new(),
        advice: Vec::new(),
        targets: false,
    }
}

// ---- hart-memory (and, with the hash table, hart-memory-hash) ----------------

/// Samples a stalled-thread run takes, evenly spaced over the run.
pub const MEMORY_SAMPLES: usize = 40;

/// A stalled-thread run: how long, its sample times and its worker threads.
#[derive(Debug, Clone)]
pub(super) struct StallSpec {
    /// Sample times, seconds from the start: the design's x values.
    pub xs: Vec<f64>,
    /// Threads running the load beside the stalled one.
    pub workers: u32,
    /// Seed of the load's choices.
    pub seed: u64,
}

impl StallSpec {
    /// 2 s × `--scale` (at least 0.1 s), [`MEMORY_SAMPLES`] samples, one
    /// worker more than the cores.
    pub fn of(p: &Params) -> Self {
        let run = Duration::from_secs_f64((2000.0 * p.scale).max(100.0) / 1e3);
        Self {
            xs: (1..=MEMORY_SAMPLES)
                .map(|i| run.mul_f64(i as f64 / MEMORY_SAMPLES as f64).as_secs_f64())
                .collect(),
            workers: p.cores.max(1) + 1,
            seed: p.seed,
        }
    }
}

/// Pending nodes at each sample time, and Michael's bound where the scheme
/// has one.
pub(super) type Pending = (Vec<u64>, Option<u64>);

/// One stalled-thread run's domain, its bound, and the run's spec.
pub(super) struct Stalled<'a, R> {
    /// The run.
    pub spec: &'a StallSpec,
    /// A fresh domain of the scheme.
    pub domain: Arc<R>,
    /// Michael's bound on its pending nodes, where it has one.
    pub bound: fn(&R) -> Option<u64>,
}

/// The load of a stalled-thread experiment: a structure over the domain
/// `R` with nodes from `A`, driven by [`stalled_run`].
pub(super) trait StalledLoad {
    /// One run over `s.domain`, sampling its pending nodes at `s.spec.xs`.
    fn run<R: Reclaimer, A: NodeAlloc>(&self, s: Stalled<'_, R>) -> anyhow::Result<Pending>;
}

/// The stalled thread: registered, inside an operation (an EBR critical
/// section; both hazard pointers set; for QSBR, no quiescent state) until
/// `stop`.
pub(super) fn stall<R: Reclaimer>(domain: &Arc<R>, stop: &AtomicBool, stalled: &AtomicBool) {
    let local = R::register(domain);
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
}

/// Runs `work(t, stop)` on `spec.workers` threads (each loops until `stop`)
/// while one thread is stalled inside an operation ([`stall`]), and samples
/// `domain`'s pending nodes at each of `spec.xs` (the sampler sleeps until
/// the time, then reads the count); `bound(domain)` from the first sample
/// that has it.
pub(super) fn stalled_run<R: Reclaimer>(
    domain: &Arc<R>,
    spec: &StallSpec,
    bound: fn(&R) -> Option<u64>,
    work: &(dyn Fn(u32, &AtomicBool) + Sync),
) -> Pending {
    let stop = AtomicBool::new(false);
    let stalled = AtomicBool::new(false);
    let mut out = Vec::with_capacity(spec.xs.len());
    let mut b = None;
    std::thread::scope(|s| {
        {
            let (stop, stalled) = (&stop, &stalled);
            s.spawn(move || stall(domain, stop, stalled));
        }
        // Acquire: pairs with the stalled thread's Release.
        while !stalled.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        for t in 0..spec.workers {
            let stop = &stop;
            s.spawn(move || work(t, stop));
        }
        let t0 = Instant::now();
        for &x in &spec.xs {
            // The harness (not an algorithm) may sleep: it is the sampler.
            std::thread::sleep(Duration::from_secs_f64(x).saturating_sub(t0.elapsed()));
            out.push(domain.stats().pending);
            b = b.or_else(|| bound(domain));
        }
        // Release: pairs with the stalled thread's Acquire.
        stop.store(true, Ordering::Release);
    });
    (out, b)
}

/// Michael's bound on hazard pointers' unreclaimed nodes: N·R (records ×
/// scan threshold).
fn hp_bound(d: &HazardPointers) -> Option<u64> {
    Some((d.records() * d.scan_threshold()) as u64)
}

/// One run of `load` over a fresh domain of `scheme`, nodes from `alloc`.
pub(super) fn stalled_series(
    scheme: Scheme,
    alloc: AllocMode,
    spec: &StallSpec,
    load: &impl StalledLoad,
) -> anyhow::Result<Pending> {
    fn with<R: Reclaimer>(
        domain: Arc<R>,
        alloc: AllocMode,
        spec: &StallSpec,
        load: &impl StalledLoad,
        bound: fn(&R) -> Option<u64>,
    ) -> anyhow::Result<Pending> {
        let s = Stalled {
            spec,
            domain,
            bound,
        };
        match alloc {
            AllocMode::Magazines => load.run::<R, MagazineAlloc>(s),
            AllocMode::System => load.run::<R, SystemAlloc>(s),
        }
    }
    match scheme {
        Scheme::Qsbr => with(Arc::new(Qsbr::new()), alloc, spec, load, |_| None),
        Scheme::Ebr => with(Arc::new(Ebr::new()), alloc, spec, load, |_| None),
        Scheme::Hp => with(
            Arc::new(HazardPointers::new(HP_SLOTS)?),
            alloc,
            spec,
            load,
            hp_bound,
        ),
        Scheme::Leak => anyhow::bail!("the leaking baseline frees nothing: no stalled-thread run"),
    }
}

/// `hart-memory`'s load: Hart's test loop over 10 MS queues.
struct QueueLoad;

impl StalledLoad for QueueLoad {
    fn run<R: Reclaimer, A: NodeAlloc>(&self, s: Stalled<'_, R>) -> anyhow::Result<Pending> {
        let queues: Vec<MsQueue<u64, R, A>> = (0..10)
            .map(|_| MsQueue::with_domain(s.domain.clone()))
            .collect();
        let work = |t: u32, stop: &AtomicBool| {
            let mut local = R::register(&s.domain);
            let mut rng = SplitMix64::stream(s.spec.seed, u64::from(t));
            // Relaxed: a stop request.
            while !stop.load(Ordering::Relaxed) {
                hart_ops(&queues, &local, &mut rng);
                local.quiescent();
            }
        };
        Ok(stalled_run(&s.domain, s.spec, s.bound, &work))
    }
}

/// The schemes of a stalled-thread experiment.
const STALLED_SCHEMES: [Scheme; 3] = [Scheme::Qsbr, Scheme::Ebr, Scheme::Hp];

/// Runs a stalled-thread experiment on the model: one run of `load` per
/// scheme (a series: pending nodes at each sample time), HP's bound drawn
/// across the figure, and [`memory_clauses`]. `params` and `notes` are the
/// experiment's own, beside the common ones.
pub(super) fn run_stalled(
    exp: &Experiment,
    p: &Params,
    preempt: Preempt,
    load: &impl StalledLoad,
    mut params: serde_json::Value,
    notes: Vec<String>,
) -> anyhow::Result<(RunRecord, String)> {
    let spec = StallSpec::of(p);
    let imps = STALLED_SCHEMES
        .iter()
        .map(|s| Imp::ours(s.name(), "reclaimer"))
        .collect();
    let mut d = Design::single(
        "seconds",
        "pending nodes (retired, not yet freed)",
        Better::Lower,
        spec.xs.clone(),
        imps,
        1,
    );
    let started = Instant::now();
    let mut hp = None;
    let trials = model::collect_series(exp.id, &d, &mut |c| {
        let scheme = *STALLED_SCHEMES
            .iter()
            .find(|s| s.name() == c.imp.name)
            .ok_or_else(|| anyhow::anyhow!("no scheme named {}", c.imp.name))?;
        let (pending, bound) = stalled_series(scheme, p.alloc, &spec, load)?;
        hp = hp.or(bound);
        let t = |n: u64| Trial {
            value: n as f64,
            procs: Some(spec.workers),
            ..Trial::default()
        };
        Ok(Some(pending.into_iter().map(t).collect()))
    })?;
    d.guides.extend(hp.map(|b| Guide {
        label: "HP bound (N·R)".into(),
        y: b as f64,
    }));
    let mut v = Verdicts {
        conclusion: "with one thread stalled inside an operation, hazard pointers keep unreclaimed nodes under Michael's bound while QSBR and EBR grow without bound".into(),
        clauses: memory_clauses(hp),
        notes: vec![growth_rule()],
        ..Verdicts::default()
    };
    v.notes.extend(notes);
    if let serde_json::Value::Object(m) = &mut params {
        m.extend([
            ("run_s".into(), serde_json::json!(spec.xs.last())),
            ("samples".into(), serde_json::json!(spec.xs.len())),
            ("worker_threads".into(), serde_json::json!(spec.workers)),
            ("stalled_threads".into(), serde_json::json!(1)),
            (
                "hazard_pointers_per_thread".into(),
                serde_json::json!(HP_SLOTS),
            ),
            ("hp_bound_n_times_r".into(), serde_json::json!(hp)),
            ("allocator".into(), serde_json::json!(alloc_name(p.alloc))),
        ]);
    }
    Ok(model::finish(
        exp, p, preempt, &d, trials, v, params, started,
    ))
}

/// `hart-memory`: [`run_stalled`] over 10 MS queues.
fn run_memory(
    exp: &Experiment,
    p: &Params,
    preempt: Preempt,
) -> anyhow::Result<(RunRecord, String)> {
    run_stalled(
        exp,
        p,
        preempt,
        &QueueLoad,
        serde_json::json!({ "queues": 10 }),
        Vec::new(),
    )
}

/// "Still growing" (`hart-memory`, `hart-memory-hash`): the least-squares line
/// through the second half of a scheme's pending-node samples rises across that
/// half by at least this fraction of their mean there...
///
/// With one thread stalled inside an operation, QSBR and EBR free nothing
/// retired after the stall, so their pending count rises by the retire rate for
/// the whole run: retiring steadily from the first sample on, the second half
/// rises by 2/3 of its mean; even a count that started the run at a level twice
/// what the run adds rises by more than a fifth. A bounded scheme's count
/// (hazard pointers' saw-tooth under N·R, a reclaimer that keeps up) has no
/// trend once it has settled; a rise of a tenth is well clear of both.
pub const GROWTH_MIN: f64 = 0.10;

/// ... and by at least this many standard errors of that rise, so noise is not
/// read as growth: pure noise (hazard pointers' count jumps anywhere between 0
/// and N·R from one sample to the next) fits a rise of 4 standard errors by
/// chance less than once in 2,000 runs (Student's t with 18 degrees of freedom:
/// 20 samples in the half), while a stalled QSBR or EBR reader's steady rise
/// is tens of standard errors.
pub const GROWTH_SE: f64 = 4.0;

/// Whether a series of `(seconds, pending)` samples is still growing by the
/// rule of [`GROWTH_MIN`] and [`GROWTH_SE`]; the trend it was judged on.
pub fn still_growing(series: &[(f64, f64)]) -> Option<(bool, crate::stats::Trend)> {
    let tr = crate::stats::second_half_trend(series)?;
    let g = tr.growth();
    Some((g >= GROWTH_MIN && g >= GROWTH_SE * tr.growth_se(), tr))
}

/// The growth rule, as a note.
fn growth_rule() -> String {
    format!(
        "rule: still growing = the least-squares line through the second half of the samples rises across it by >= {:.0}% of their mean and by >= {GROWTH_SE} standard errors",
        100.0 * GROWTH_MIN
    )
}

/// HP stays under its bound (`hp`, Michael's N·R) for the whole run; QSBR
/// and EBR keep growing ([`still_growing`]) and end past HP's bound.
pub(super) fn memory_clauses(hp: Option<u64>) -> Vec<Clause> {
    let mut c = vec![Clause::new(
        "HP keeps its pending nodes under Michael's bound N·R for the whole run",
        None,
        move |r| {
            let at = "every sample".to_string();
            let max = r.series("HP", 0).into_iter().map(|q| q.1).reduce(f64::max);
            match (hp, max) {
                (Some(b), Some(max)) => Judged {
                    at,
                    ours: format!("at most {max:.0} pending; N·R = {b}"),
                    holds: Some(max <= b as f64),
                },
                (None, Some(_)) => Judged {
                    at,
                    ours: "HP's bound was not read".into(),
                    holds: None,
                },
                _ => unmeasured(at),
            }
        },
    )];
    c.extend(["QSBR", "EBR"].map(|n| grows_without_bound(n, hp)));
    c
}

/// "`name` grows without bound": still growing over the second half of the
/// run ([`still_growing`]) and, where HP's bound is known, past it at the end.
fn grows_without_bound(name: &'static str, hp: Option<u64>) -> Clause {
    Clause::new(
        format!(
            "{name} grows without bound (still growing over the second half of the run, and past HP's bound)"
        ),
        None,
        move |r| {
            let Some((growing, tr)) = still_growing(&r.series(name, 0)) else {
                return Judged {
                    at: "the second half of the run".into(),
                    ours: "not measured, or fewer than 7 samples".into(),
                    holds: None,
                };
            };
            let past = hp.is_none_or(|b| tr.last.1 > b as f64);
            Judged {
                at: format!(
                    "the second half of the run ({:.2}-{:.2} s)",
                    tr.first.0, tr.last.0
                ),
                ours: format!(
                    "{:.0} pending at {:.2} s, {:.0} at {:.2} s; over that second half of the run the least-squares line rises by {:.1}% of the mean ({:.0}), standard error {:.1}% ({}{})",
                    tr.first.1,
                    tr.first.0,
                    tr.last.1,
                    tr.last.0,
                    100.0 * tr.growth(),
                    tr.mean,
                    100.0 * tr.growth_se(),
                    if growing {
                        "still growing"
                    } else {
                        "not growing"
                    },
                    match (hp, past) {
                        (None, _) => "",
                        (Some(_), true) => ", past HP's bound",
                        (Some(_), false) => ", not past HP's bound",
                    }
                ),
                holds: Some(growing && past),
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{Point, Status, Verdict};

    fn pt(n: &str, x: f64, v: f64) -> Point {
        Point {
            panel: None,
            implementation: n.into(),
            x,
            value: v,
            normalized: v,
        }
    }

    /// `clauses` judged on `pts` (the design's xs: theirs, in order), with
    /// `notes`: the three schemes and the leaking baseline.
    fn judged(pts: &[Point], clauses: &[Clause], notes: Vec<String>) -> Verdict {
        let mut xs: Vec<f64> = pts.iter().map(|p| p.x).collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        let imps = STALLED_SCHEMES
            .map(|s| Imp::ours(s.name(), "reclaimer"))
            .into_iter()
            .chain([Imp::reference("Leak")])
            .collect();
        let d = Design::single("threads", "ns", Better::Lower, xs, imps, 1);
        let r = model::Results::new(&d, pts, &[]);
        Verdict::from_clauses("c", clauses.iter().map(|c| c.judge(&r)).collect(), notes)
    }

    /// The verdict of experiment `id` on `pts`.
    fn verdict(id: &str, pts: &[Point]) -> Verdict {
        judged(pts, &verdicts(id, "c", 2).clauses, vec![])
    }

    #[test]
    fn base_order_and_overhead() {
        let pts = vec![
            pt("QSBR", 1.0, 10.2),
            pt("EBR", 1.0, 12.0),
            pt("HP", 1.0, 15.0),
            pt("Leak", 1.0, 10.0),
        ];
        let v = verdict("hart-base", &pts);
        assert_eq!(v.status, Status::Holds, "{v:?}");
        assert_eq!(v.clauses[1].ours, "QSBR / Leak = 1.02");
        let pts = vec![
            pt("QSBR", 1.0, 13.0),
            pt("EBR", 1.0, 12.0),
            pt("HP", 1.0, 15.0),
            pt("Leak", 1.0, 10.0),
        ];
        let v = verdict("hart-base", &pts);
        assert_eq!(v.status, Status::DoesNotHold);
        assert_eq!(v.summary(), "0 of 2 clauses hold");
    }

    #[test]
    fn threads_need_a_point_past_the_cores() {
        let pts = vec![pt("QSBR", 1.0, 10.0), pt("QSBR", 2.0, 10.0)];
        let v = verdict("hart-queues-threads", &pts);
        assert_eq!(v.status, Status::PartlyEvaluable, "{v:?}");
        let mut pts = pts;
        pts.extend([
            pt("QSBR", 8.0, 30.0),
            pt("EBR", 2.0, 10.0),
            pt("EBR", 8.0, 25.0),
            pt("HP", 2.0, 12.0),
            pt("HP", 8.0, 13.0),
        ]);
        let v = verdict("hart-queues-threads", &pts);
        assert_eq!(v.status, Status::Holds, "{v:?}");
        assert_eq!(v.summary(), "3 of 3 clauses hold");
    }

    #[test]
    fn queues_count_wants_qsbr_best_everywhere() {
        let pts = vec![
            pt("QSBR", 1.0, 10.0),
            pt("EBR", 1.0, 11.0),
            pt("HP", 1.0, 12.0),
            pt("QSBR", 10.0, 14.0),
            pt("EBR", 10.0, 10.0),
            pt("HP", 10.0, 12.0),
        ];
        let v = verdict("hart-queues-count", &pts);
        assert_eq!(v.status, Status::DoesNotHold, "{v:?}");
        assert!(
            v.clauses[0].ours.contains("10: 1.40 (EBR)"),
            "{}",
            v.clauses[0].ours
        );
    }

    /// The verdict of the stalled-thread clauses on series `pts`, HP's bound `hp`.
    fn memory_verdict(pts: &[Point], hp: Option<u64>) -> Verdict {
        judged(pts, &memory_clauses(hp), vec![growth_rule()])
    }

    #[test]
    fn memory_bound_and_growth() {
        // Linear growth sampled from the start: the last value is about twice the
        // middle one.
        let mut pts = Vec::new();
        for i in 1..=10 {
            let t = f64::from(i);
            pts.push(pt("HP", t, 100.0));
            pts.push(pt("QSBR", t, 1000.0 * t));
            pts.push(pt("EBR", t, 900.0 * t));
        }
        assert_eq!(memory_verdict(&pts, Some(464)).status, Status::Holds);
        assert_eq!(memory_verdict(&pts, Some(50)).status, Status::DoesNotHold);
        let v = memory_verdict(&pts, Some(464));
        assert_eq!(
            v.clauses[1].ours,
            "6000 pending at 6.00 s, 10000 at 10.00 s; over that second half of the run the least-squares line rises by 50.0% of the mean (8000), standard error 0.0% (still growing, past HP's bound)"
        );
        assert_eq!(v.clauses[1].at, "the second half of the run (6.00-10.00 s)");
        assert_eq!(v.clauses[0].ours, "at most 100 pending; N·R = 464");
        // HP not measured: that clause is not judged, the others still are.
        let no_hp: Vec<Point> = pts
            .iter()
            .filter(|p| p.implementation != "HP")
            .cloned()
            .collect();
        let v = memory_verdict(&no_hp, None);
        assert_eq!(v.status, Status::PartlyEvaluable, "{v:?}");
        assert_eq!(v.clauses[0].holds, None);
        // A bounded QSBR (flat after the start) does not grow.
        let flat: Vec<Point> = pts
            .iter()
            .map(|p| match p.implementation.as_str() {
                "QSBR" => pt("QSBR", p.x, 5000.0),
                _ => p.clone(),
            })
            .collect();
        let v = memory_verdict(&flat, Some(464));
        assert_eq!(v.clauses[1].holds, Some(false), "{v:?}");
        assert!(v.clauses[1].ours.contains("(not growing, past HP's bound)"));
        assert!(v.details.iter().any(|d| d.starts_with("rule: ")), "{v:?}");
    }

    /// 40 samples over 2 s, as `hart-memory` takes them.
    fn sampled(f: impl Fn(f64, u64) -> f64) -> Vec<(f64, f64)> {
        let mut rng = mpsync::util::rng::SplitMix64::stream(7, 0);
        (1..=40)
            .map(|i| {
                let t = 2.0 * f64::from(i) / 40.0;
                (t, f(t, rng.next_u64()))
            })
            .collect()
    }

    /// Uniform in [-1, 1) from random bits.
    fn unit(r: u64) -> f64 {
        (r >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }

    #[test]
    fn growth_rule_on_synthetic_series() {
        let growing = |s: &[(f64, f64)]| still_growing(s).unwrap().0;
        // A flat level with ±10% noise: bounded.
        assert!(!growing(&sampled(|_, r| 1e6 * (1.0 + 0.1 * unit(r)))));
        // Hazard pointers' saw-tooth: anywhere between 0 and N·R at each
        // sample. The noise makes the fitted slope swing, the standard error
        // keeps it from counting as growth.
        for seed in 0..50 {
            let mut rng = mpsync::util::rng::SplitMix64::stream(seed, 1);
            let s: Vec<(f64, f64)> = (1..=40)
                .map(|i| {
                    (
                        f64::from(i) / 20.0,
                        464.0 * (0.5 + 0.5 * unit(rng.next_u64())),
                    )
                })
                .collect();
            assert!(!growing(&s), "seed {seed}: {:?}", still_growing(&s));
        }
        // Settling onto a plateau early in the run: bounded.
        assert!(!growing(&sampled(|t, _| 1e6 * (1.0 - (-t / 0.2).exp()))));
        // Linear growth from the start, with noise: growing.
        assert!(growing(&sampled(|t, r| 1.1e6 * t * (1.0 + 0.05 * unit(r)))));
        // The shape a QSBR run showed (1.55 M pending at mid-run, 2.2 M at the
        // end), which the old rule (end > 1.5 x mid-run) called bounded: still
        // rising, if ever more slowly. 2.2 M x sqrt(t / 2 s) has exactly those
        // two values and no bound; its second half rises by 34% of its mean,
        // so it is growing, which is what a stalled QSBR reader implies (it
        // frees nothing retired after the stall).
        let s = sampled(|t, _| 2.2e6 * (t / 2.0).sqrt());
        assert!((s[19].1 - 1.556e6).abs() < 1e3 && (s[39].1 - 2.2e6).abs() < 1.0);
        let (g, tr) = still_growing(&s).unwrap();
        assert!(g && (0.30..0.40).contains(&tr.growth()), "{tr:?}");
        let pts: Vec<Point> = s
            .iter()
            .flat_map(|&(t, y)| [pt("QSBR", t, y), pt("EBR", t, y), pt("HP", t, 300.0)])
            .collect();
        assert_eq!(memory_verdict(&pts, Some(464)).status, Status::Holds);
    }
}
