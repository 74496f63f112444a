//! `lock-oversub`: throughput and fairness of every lock and peer when threads
//! outnumber cores on real Linux (the case people hit every day in containers
//! and on busy servers). Each thread loops {lock; critical section; unlock;
//! non-critical section} for a fixed time; value = acquisitions per second,
//! reported as a ratio to `parking_lot::Mutex` at the same point of the same run.
//!
//! The table of issue 13, one *configuration* per line:
//!
//! | configuration | critical / non-critical | threads |
//! |---|---|---|
//! | `cs0.2-ncs2 unpinned` | 0.2 µs / 2 µs | 1, 2, 4, 8 (`--threads`) |
//! | `cs1-ncs1 unpinned`   | 1 µs / 1 µs   | the same |
//! | `cs0.2-ncs2 pinned`   | 0.2 µs / 2 µs, thread i on CPU i mod cores | the same |
//! | `cs1-ncs1 pinned`     | 1 µs / 1 µs, pinned as above | the same |
//! | `cs1-ncs1 pinned+burst` | as above, plus a `SCHED_FIFO` thread on the first CPU burning [`BURST_MS`] of every [`BURST_PERIOD_MS`] (where real-time priority is not permitted, an ordinary thread at the lowest nice value allowed, which the kernel's wake-up preemption still puts on the CPU at each burst; the verdict says which ran) | 2× the cores (`--quick`) or 2× and 4× (4, or 4 and 8, on 2 cores) |
//!
//! Every point is the **median of `--trials` rounds** (at least 3), the rounds
//! interleaved across the locks (each round runs every lock once, in an order
//! rotated per round), because a single run of parking_lot alone swings by ±30%
//! on a 2-core machine. Fairness is min / max of the per-thread acquisition
//! counts (1 = every thread got the lock equally often). Each run checks mutual
//! exclusion in-run: a counter updated non-atomically inside the critical
//! section must equal the number of acquisitions, or the experiment fails.
//!
//! Where the kernel answers `sched`'s preemption questions through eBPF, the
//! papers' scheduler-conscious locks and mpsync's own run twice at 4 and more
//! threads: as themselves and as `<lock> (eBPF off)`, with the kernel's answers
//! switched off for that run only ([`mpsync::sched::native::set_kernel_answers`]),
//! so they fall back to heartbeats exactly as on a machine without eBPF — both
//! lines in the same interleaved rounds.
//!
//! Every round also runs the loop with no lock at all ([`CEILING`]: the
//! critical section's work done by every thread at once, nothing shared): the
//! most any lock could reach at that point. Where the lock is seldom
//! contended (CS 0.2 µs / NCS 2 µs), the baseline runs close to the ceiling,
//! and no lock's ratio can rise above the ceiling's but by noise.
//!
//! `MPSYNC_OVERSUB_LOCKS=bounded-steal,Ticket-np` ([`LOCKS_ENV`]) restricts a
//! run to the named locks plus the baseline: an A/B of a few locks in seconds
//! instead of the whole table's minutes.
//!
//! The figure has a panel per configuration (the best locks of each); the
//! report's tables, `data.csv` and `run.json` hold every lock of every
//! configuration, and the verdict judges the targets clause by
//! clause. It recommends the mutex of `mpsync advise` from the most
//! oversubscribed point of `cs1-ncs1 unpinned`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mpsync::util::busy::BusyWork;

use super::locks::{LockImpl, Origin, ThroughputSpec, ceiling_throughput, mutex_table};
use super::{Experiment, Params};
use crate::env::Preempt;
use crate::model::{
    self, AdviceRule, Better, Clause, Design, Imp, Judged, Panel, Results, Verdicts,
};
use crate::output::RunRecord;
use crate::svg::sig3;

/// Round length at `--scale 1` (never under 20 ms).
pub const BASE_DURATION_MS: f64 = 300.0;
/// Round length under `--quick` unless `--scale` is given: 23 locks × 17
/// points × 3 rounds × 25 ms ≈ 30 s in all, so `repro all --quick` keeps its
/// 10 minutes (90 ms rounds, `--scale 0.3`, took 164 s on a loaded 2-core machine).
pub const QUICK_DURATION_MS: f64 = 25.0;
/// The burst adversary runs this long ...
pub const BURST_MS: f64 = 2.0;
/// ... of every this long.
pub const BURST_PERIOD_MS: f64 = 10.0;
/// The peer every ratio is taken against.
pub const BASELINE: &str = "parking_lot::Mutex";
/// The line of the loop run with no lock at all ([`ceiling_throughput`]): the
/// most any lock could reach at that point.
pub const CEILING: &str = "no lock (ceiling)";
/// mpsync's own lock that combines the waiting policy (issue 13's target: at
/// least 1.0× the baseline, fairness at least 0.8, at every point).
pub const OWN: &str = "bounded-steal";
/// The papers' scheduler-conscious locks (targets at every point with 4 or
/// more threads — the 4 and 8 threads on 2 cores —, fairness at least
/// 0.5: at least [`SC_TARGET_EBPF`]× the baseline with the kernel's answers,
/// [`SC_TARGET_HEARTBEAT`]× with heartbeats only).
pub const SCHEDULER_CONSCIOUS: &[&str] = &[
    "Smart-Q",
    "MCS-TP",
    "Queued-Handshaking",
    "Ticket-np",
    "CLH-TP",
];

/// Target ratio of the scheduler-conscious locks with eBPF answers.
pub const SC_TARGET_EBPF: f64 = 0.8;
/// Target ratio of the scheduler-conscious locks with heartbeats only.
pub const SC_TARGET_HEARTBEAT: f64 = 0.5;
/// Suffix of the lines run with the kernel's answers switched off.
pub const EBPF_OFF: &str = " (eBPF off)";
/// The eBPF-off lines run from this many threads (where the targets apply).
pub const EBPF_OFF_FROM_THREADS: u32 = 4;

/// One run of a round: a lock, with or without the kernel's answers, or the
/// loop with no lock (`imp` none: the [`CEILING`]).
#[derive(Clone, Copy)]
struct Entry<'a> {
    imp: Option<&'a LockImpl>,
    ebpf_off: bool,
}

impl Entry<'_> {
    /// The lock's name; [`CEILING`] for the run without a lock.
    fn lock(&self) -> &'static str {
        self.imp.map_or(CEILING, |i| i.name)
    }

    fn name(&self) -> String {
        if self.ebpf_off {
            format!("{}{EBPF_OFF}", self.lock())
        } else {
            self.lock().to_string()
        }
    }

    /// One fixed-duration run: per-thread acquisitions (iterations for the
    /// ceiling).
    fn run(&self, spec: &ThroughputSpec) -> anyhow::Result<Vec<u64>> {
        match self.imp {
            Some(imp) => {
                let _off = AnswersOff::new(self.ebpf_off);
                (imp.throughput)(spec)
            }
            None => ceiling_throughput(spec),
        }
    }
}

/// Switches the kernel's answers off for one run and back on when dropped.
struct AnswersOff(bool);

impl AnswersOff {
    fn new(off: bool) -> Self {
        AnswersOff(off && mpsync::sched::native::set_kernel_answers(false))
    }
}

impl Drop for AnswersOff {
    fn drop(&mut self) {
        if self.0 {
            mpsync::sched::native::set_kernel_answers(true);
        }
    }
}

/// The runs of one round at `n` threads: every lock, the ceiling, and the
/// eBPF-off lines.
fn entries(table: &[LockImpl], n: u32, kernel_answers: bool) -> Vec<Entry<'_>> {
    let mut v: Vec<Entry<'_>> = table
        .iter()
        .map(|imp| Entry {
            imp: Some(imp),
            ebpf_off: false,
        })
        .collect();
    v.push(Entry {
        imp: None,
        ebpf_off: false,
    });
    if kernel_answers && n >= EBPF_OFF_FROM_THREADS {
        v.extend(
            table
                .iter()
                .filter(|i| SCHEDULER_CONSCIOUS.contains(&i.name) || i.name == OWN)
                .map(|imp| Entry {
                    imp: Some(imp),
                    ebpf_off: true,
                }),
        );
    }
    v
}

/// One line of the table.
#[derive(Debug, Clone)]
struct Config {
    label: &'static str,
    cs_ns: u64,
    ncs_ns: u64,
    pinned: bool,
    burst: bool,
    threads: Vec<u32>,
}

/// A thread pinned to `cpu` that burns [`BURST_MS`] of every
/// [`BURST_PERIOD_MS`] until dropped: `SCHED_FIFO` priority 1 where real-time
/// priority is permitted (it then takes the CPU the moment it wakes), else an
/// ordinary thread at the highest nice level it may set — it sleeps most of the
/// time, so the kernel's wake-up preemption (EEVDF lag, CFS vruntime) still
/// gives it the CPU at each wake-up, less deterministically.
struct Burst {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
    /// The scheduling policy it got, for the verdict and `run.json`.
    policy: String,
}

/// Gives the calling thread `SCHED_FIFO` 1, or else the lowest nice value it
/// is allowed; returns the policy it got.
fn burst_policy() -> String {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: plain syscall on the calling thread with a valid param.
    let r = unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) };
    if r == 0 {
        return "SCHED_FIFO 1".into();
    }
    let why = std::io::Error::from_raw_os_error(r);
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::id_t;
    for nice in [-20, -10, -5, 0] {
        // SAFETY: setpriority on our own thread id; no memory is passed.
        if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) } == 0 {
            return format!("SCHED_OTHER nice {nice} (SCHED_FIFO not permitted: {why})");
        }
    }
    format!("SCHED_OTHER (SCHED_FIFO not permitted: {why}; nice unchanged)")
}

impl Burst {
    /// Starts the adversary, or says why it cannot run here (it cannot be
    /// pinned).
    fn start(cpu: usize) -> Result<Self, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel::<Result<String, String>>();
        let s = stop.clone();
        let handle = std::thread::Builder::new()
            .name("burst-adversary".into())
            .spawn(move || {
                if let Err(e) = mpsync::sched::native::pin_current_thread(cpu) {
                    let _ = tx.send(Err(format!("pinning to CPU {cpu}: {e}")));
                    return;
                }
                let _ = tx.send(Ok(burst_policy()));
                let burn = Duration::from_secs_f64(BURST_MS / 1e3);
                let rest = Duration::from_secs_f64((BURST_PERIOD_MS - BURST_MS) / 1e3);
                // Relaxed: a stop request; the join orders the rest.
                while !s.load(Ordering::Relaxed) {
                    let t0 = Instant::now();
                    while t0.elapsed() < burn {
                        std::hint::spin_loop();
                    }
                    // The harness's adversary, not a lock algorithm: it sleeps.
                    std::thread::sleep(rest);
                }
            })
            .map_err(|e| format!("spawning the adversary: {e}"))?;
        let mut b = Self {
            stop,
            handle: Some(handle),
            policy: String::new(),
        };
        match rx.recv() {
            Ok(Ok(policy)) => {
                b.policy = policy;
                Ok(b)
            }
            Ok(Err(e)) => {
                b.finish();
                Err(e)
            }
            Err(_) => {
                b.finish();
                Err("the adversary thread exited before starting".into())
            }
        }
    }

    fn finish(&mut self) {
        // Relaxed: see the loop.
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Burst {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The burst configuration's thread counts: 2× the cores (`--quick`), or 2×
/// and 4× — so that on any machine it is oversubscribed, and `repro scale`'s
/// 2× and 4× columns have it.
fn burst_threads(cores: u32, quick: bool) -> Vec<u32> {
    let c = cores.max(1);
    if quick {
        vec![2 * c]
    } else {
        vec![2 * c, 4 * c]
    }
}

fn configs(threads: &[u32], quick: bool, cores: u32) -> Vec<Config> {
    let burst_threads = burst_threads(cores, quick);
    let c = |label, cs_ns, ncs_ns, pinned, burst, threads: &[u32]| Config {
        label,
        cs_ns,
        ncs_ns,
        pinned,
        burst,
        threads: threads.to_vec(),
    };
    vec![
        c("cs0.2-ncs2 unpinned", 200, 2000, false, false, threads),
        c("cs1-ncs1 unpinned", 1000, 1000, false, false, threads),
        c("cs0.2-ncs2 pinned", 200, 2000, true, false, threads),
        c("cs1-ncs1 pinned", 1000, 1000, true, false, threads),
        c(
            "cs1-ncs1 pinned+burst",
            1000,
            1000,
            true,
            true,
            &burst_threads,
        ),
    ]
}

/// Environment variable restricting the locks run (comma-separated names as in
/// `mpsync list`'s table; the baseline always runs): for A/B runs of a few
/// locks against the baseline without the whole table's minutes.
pub const LOCKS_ENV: &str = "MPSYNC_OVERSUB_LOCKS";

/// A target's verdict when none of its locks ran at a point it covers (a run
/// restricted by [`LOCKS_ENV`], or no thread count of 2+ / 4+).
const NOT_RUN: &str =
    "not evaluated: none of its locks ran at a point it covers (MPSYNC_OVERSUB_LOCKS, --threads)";

/// The table, restricted by [`LOCKS_ENV`] where it is set.
fn restrict(table: Vec<LockImpl>) -> anyhow::Result<Vec<LockImpl>> {
    restrict_to(table, std::env::var(LOCKS_ENV).ok())
}

/// [`restrict`] given the variable's value (`None`: unset): the whole table,
/// or the named locks and the baseline.
fn restrict_to(table: Vec<LockImpl>, want: Option<String>) -> anyhow::Result<Vec<LockImpl>> {
    let Some(want) = want else {
        return Ok(table);
    };
    let want: Vec<&str> = want
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .collect();
    if let Some(bad) = want.iter().find(|w| !table.iter().any(|i| i.name == **w)) {
        let names: Vec<&str> = table.iter().map(|i| i.name).collect();
        anyhow::bail!(
            "{LOCKS_ENV}: no lock named {bad:?}; use comma-separated names from: {}",
            names.join(", ")
        );
    }
    Ok(table
        .into_iter()
        .filter(|i| i.name == BASELINE || want.contains(&i.name))
        .collect())
}

/// The design: one panel per configuration, every lock (and the ceiling,
/// and the eBPF-off lines) at each of its thread counts.
fn design(table: &[LockImpl], configs: &[Config], rounds: u32, kernel_answers: bool) -> Design {
    let imps = entries(table, u32::MAX, kernel_answers)
        .iter()
        .map(|e| match e.imp {
            Some(i) if !e.ebpf_off && i.origin == Origin::Peer => Imp::peer(e.name(), "mutex"),
            Some(_) if !e.ebpf_off => Imp::ours(e.name(), "mutex"),
            _ => Imp::reference(e.name()),
        })
        .collect();
    let mut d = Design::single(
        "threads",
        "acquisitions per second",
        Better::Higher,
        Vec::new(),
        imps,
        rounds,
    )
    .baseline(BASELINE)
    .median();
    d.panels = configs
        .iter()
        .map(|c| Panel::new(c.label, c.threads.iter().map(|&n| f64::from(n)).collect()))
        .collect();
    d
}

/// "`lock` ≥ `bar`× the baseline with fairness ≥ `fair` at every point with
/// `from`+ threads", judged over every configuration that ran.
fn every_point(lock: String, from: u32, bar: f64, fair: f64) -> impl Fn(&Results<'_>) -> Judged {
    move |r| {
        let (mut checked, mut missed) = (0, Vec::new());
        for (pi, pn) in r.design.panels.iter().enumerate() {
            for &x in pn.xs.iter().filter(|&&x| x >= f64::from(from)) {
                let Some(g) = r.goodness(&lock, BASELINE, pi, x) else {
                    continue;
                };
                let f = r
                    .median_of(&lock, pi, x, |t| t.fairness_min_max)
                    .unwrap_or(0.0);
                checked += 1;
                if g < bar || f < fair {
                    missed.push(format!(
                        "{} {x} thr {} (fair {})",
                        pn.label,
                        sig3(g),
                        sig3(f)
                    ));
                }
            }
        }
        let at = format!("every point with {from}+ threads");
        if checked == 0 {
            return Judged {
                at,
                ours: NOT_RUN.into(),
                holds: None,
            };
        }
        let shown = missed.len().min(4);
        let more = match missed.len() - shown {
            0 => String::new(),
            m => format!("; {m} more in the table"),
        };
        Judged {
            at,
            ours: if missed.is_empty() {
                format!("met at all {checked} points")
            } else {
                format!(
                    "missed at {} of {checked}: {}{more}",
                    missed.len(),
                    missed[..shown].join("; ")
                )
            },
            holds: Some(missed.is_empty()),
        }
    }
}

/// The targets of issue 13, one clause per lock and kind of answers.
fn clauses(table: &[LockImpl], kernel_answers: bool, why_not: &str) -> Vec<Clause> {
    let mut c = Vec::new();
    if table.iter().any(|i| i.name == OWN) {
        c.push(Clause::new(
            format!("target: {OWN} ≥ 1.0× {BASELINE}, fairness ≥ 0.8"),
            None,
            every_point(OWN.into(), 2, 1.0, 0.8),
        ));
    }
    for lock in SCHEDULER_CONSCIOUS
        .iter()
        .filter(|l| table.iter().any(|i| i.name == **l))
    {
        let on = format!(
            "target: {lock} ≥ {SC_TARGET_EBPF}× {BASELINE}, fairness ≥ 0.5, with the kernel's answers"
        );
        let off = format!(
            "target: {lock} ≥ {SC_TARGET_HEARTBEAT}× {BASELINE}, fairness ≥ 0.5, with heartbeats only"
        );
        if kernel_answers {
            c.push(Clause::new(
                on,
                None,
                every_point((*lock).into(), 4, SC_TARGET_EBPF, 0.5),
            ));
            c.push(Clause::new(
                off,
                None,
                every_point(format!("{lock}{EBPF_OFF}"), 4, SC_TARGET_HEARTBEAT, 0.5),
            ));
        } else {
            let why = why_not.to_string();
            c.push(Clause::new(on, None, move |_| Judged {
                at: "every point with 4+ threads".into(),
                ours: format!("not judged: the kernel does not answer here ({why})"),
                holds: None,
            }));
            c.push(Clause::new(
                off,
                None,
                every_point((*lock).into(), 4, SC_TARGET_HEARTBEAT, 0.5),
            ));
        }
    }
    c
}

/// The burst adversary of the configuration being measured, started when
/// its first cell comes and stopped when another configuration's does.
struct Adversary {
    panel: Option<usize>,
    burst: Option<Burst>,
    failed: Vec<usize>,
}

impl Adversary {
    /// Whether configuration `panel` can run (its adversary, if it has one,
    /// is running); notes how the adversary ran, or why not, once.
    fn enter(&mut self, panel: usize, cfg: &Config, cpu: usize, notes: &mut Vec<String>) -> bool {
        if self.failed.contains(&panel) {
            return false;
        }
        if self.panel == Some(panel) {
            return true;
        }
        self.burst = None;
        self.panel = Some(panel);
        if !cfg.burst {
            return true;
        }
        match Burst::start(cpu) {
            Ok(b) => {
                let line = format!(
                    "{}: the adversary on CPU {cpu} runs as {}",
                    cfg.label, b.policy
                );
                if !notes.contains(&line) {
                    notes.push(line);
                }
                self.burst = Some(b);
                true
            }
            Err(why) => {
                notes.push(format!("{}: skipped: {why}", cfg.label));
                self.failed.push(panel);
                false
            }
        }
    }
}

/// The method, as notes under the clauses.
fn method_notes(
    cores: usize,
    rounds: u32,
    duration: Duration,
    kernel_answers: bool,
    answers: &str,
) -> Vec<String> {
    let mut notes = vec![
        format!(
            "{cores} cores; every point is the median of {rounds} rounds of {:.0} ms interleaved across the locks; ratio = acquisitions/s / {BASELINE} in the same round set; fair = min/max per-thread acquisitions",
            duration.as_secs_f64() * 1e3
        ),
        format!(
            "preemption answers: {answers}{}",
            if kernel_answers {
                format!(
                    "; lines \"<lock>{EBPF_OFF}\" at {EBPF_OFF_FROM_THREADS}+ threads run with the kernel's answers switched off (heartbeats)"
                )
            } else {
                String::new()
            }
        ),
        format!(
            "{CEILING}: the same loop with no lock at all, in the same rounds (every thread runs the critical section's work at once, nothing shared): no lock can run the loop faster, so a lock's ratio above the ceiling's is noise"
        ),
    ];
    if duration < Duration::from_secs(1) {
        notes.push(format!(
            "rounds of {:.0} ms are shorter than the issue's 1 s: where threads outnumber cores, a thread's share of the CPU over so short a round depends on the OS's time slices (a few ms each), so \"fair\" here measures the kernel as much as the lock — judge fairness on 1 s rounds (`--scale {:.2}`)",
            duration.as_secs_f64() * 1e3,
            1000.0 / BASE_DURATION_MS
        ));
    }
    notes
}

/// What run.json records of the sweep besides the common parameters.
fn params_json(
    threads: &[u32],
    rounds: u32,
    duration: Duration,
    configs: &[Config],
    burst_policy_got: Option<String>,
    cpu: Option<&usize>,
) -> serde_json::Value {
    serde_json::json!({
        "threads": threads,
        "rounds": rounds,
        "round_ms": duration.as_secs_f64() * 1e3,
        "configurations": configs.iter().map(|c| serde_json::json!({
            "label": c.label, "critical_section_ns": c.cs_ns, "non_critical_ns": c.ncs_ns,
            "pinned": c.pinned, "burst_adversary": c.burst, "threads": c.threads,
        })).collect::<Vec<_>>(),
        "burst": {"burn_ms": BURST_MS, "period_ms": BURST_PERIOD_MS, "policy": burst_policy_got, "cpu": cpu},
    })
}

/// A trial's length: [`QUICK_DURATION_MS`] for `--quick` (at its scale),
/// [`BASE_DURATION_MS`] × `--scale` otherwise, at least 20 ms.
fn trial_duration(p: &Params) -> Duration {
    let ms = if p.quick && p.scale == 0.3 {
        QUICK_DURATION_MS
    } else {
        BASE_DURATION_MS * p.scale
    };
    Duration::from_secs_f64(ms.max(20.0) / 1e3)
}

/// Runs the experiment.
pub fn run(exp: &Experiment, p: &Params, preempt: Preempt) -> anyhow::Result<(RunRecord, String)> {
    let threads: Vec<u32> = p.threads.clone().unwrap_or_else(|| vec![1, 2, 4, 8]);
    let duration = trial_duration(p);
    let rounds = p.trials.max(3);
    let busy = BusyWork::global();
    let cpus = mpsync::sched::native::available_cpus()?;
    let table: Vec<LockImpl> = restrict(mutex_table())?;
    let configs = configs(&threads, p.quick, cpus.len() as u32);
    let answers = mpsync::sched::native::preemption_answers();
    let kernel_answers = matches!(answers, mpsync::sched::native::PreemptionAnswers::Ebpf);
    let d = design(&table, &configs, rounds, kernel_answers);
    let all = entries(&table, u32::MAX, kernel_answers);
    let started = Instant::now();
    let mut notes = method_notes(
        cpus.len(),
        rounds,
        duration,
        kernel_answers,
        &answers.describe(),
    );
    let mut adversary = Adversary {
        panel: None,
        burst: None,
        failed: Vec::new(),
    };
    let trials = model::collect(exp.id, &d, &mut |c| {
        let cfg = &configs[c.panel];
        let n = c.x as u32;
        let entry = all
            .iter()
            .find(|e| e.name() == c.imp.name)
            .ok_or_else(|| anyhow::anyhow!("no lock named {}", c.imp.name))?;
        if (entry.ebpf_off && n < EBPF_OFF_FROM_THREADS)
            || !adversary.enter(c.panel, cfg, cpus[0], &mut notes)
        {
            return Ok(None);
        }
        let spec = ThroughputSpec {
            threads: n,
            duration,
            cs_iters: busy.iters_for_ns(cfg.cs_ns),
            ncs_iters: busy.iters_for_ns(cfg.ncs_ns),
            pin: if cfg.pinned { cpus.clone() } else { Vec::new() },
        };
        let counts = entry.run(&spec).map_err(|e| {
            anyhow::anyhow!("{} with {n} threads ({}): {e}", entry.name(), cfg.label)
        })?;
        Ok(Some(model::counts_trial(&counts, duration, n)))
    })?;
    let burst_policy_got = adversary.burst.as_ref().map(|b| b.policy.clone());
    drop(adversary);
    let unpinned = configs
        .iter()
        .position(|c| c.label == "cs1-ncs1 unpinned")
        .unwrap_or(0);
    let v = Verdicts {
        conclusion: "no paper conclusion: throughput and fairness under real oversubscription, as ratios to parking_lot (issue 13's table and targets)".into(),
        clauses: clauses(&table, kernel_answers, &answers.describe()),
        notes,
        targets: true,
        advice: vec![AdviceRule {
            kind: "mutex",
            panel: unpinned,
        }],
    };
    let params = params_json(
        &threads,
        rounds,
        duration,
        &configs,
        burst_policy_got,
        cpus.first(),
    );
    Ok(model::finish(
        exp, p, preempt, &d, trials, v, params, started,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_locks_variable_restricts_to_the_named_locks_and_the_baseline() {
        let all = crate::experiments::locks::mutex_table();
        let names = |t: Vec<LockImpl>| t.into_iter().map(|i| i.name).collect::<Vec<_>>();
        let every = names(all.clone());
        assert_eq!(names(restrict_to(all.clone(), None).unwrap()), every);
        let named = names(restrict_to(all.clone(), Some("CLH-TP, Smart-Q".into())).unwrap());
        assert_eq!(named.len(), 3, "{named:?}");
        assert!(named.contains(&"CLH-TP") && named.contains(&"Smart-Q"));
        assert!(named.contains(&BASELINE) && !named.contains(&"Ticket-np"));
        let err = restrict_to(all, Some("CLH-TP, CLH-TP-nap".into())).unwrap_err();
        assert!(err.to_string().contains("CLH-TP-nap"), "{err}");
    }

    /// Every round runs the ceiling once (never as an eBPF-off line), and the
    /// ceiling's run loops on every thread.
    #[test]
    fn every_round_runs_the_ceiling_once() {
        let table = restrict_to(
            crate::experiments::locks::mutex_table(),
            Some("bounded-steal".into()),
        )
        .unwrap();
        for (n, answers) in [(2, true), (8, true), (8, false)] {
            let e = entries(&table, n, answers);
            let ceilings: Vec<String> = e
                .iter()
                .filter(|e| e.imp.is_none())
                .map(Entry::name)
                .collect();
            assert_eq!(ceilings, [CEILING], "{n} threads, answers {answers}");
        }
        let spec = ThroughputSpec {
            threads: 3,
            duration: Duration::from_millis(30),
            cs_iters: 10,
            ncs_iters: 10,
            pin: Vec::new(),
        };
        let counts = Entry {
            imp: None,
            ebpf_off: false,
        }
        .run(&spec)
        .unwrap();
        assert_eq!(counts.len(), 3);
        assert!(counts.iter().all(|&c| c > 0), "{counts:?}");
    }

    #[test]
    fn the_table_has_both_workloads_both_placements_and_the_adversary() {
        let c = configs(&[1, 2, 4, 8], true, 2);
        assert_eq!(c.len(), 5);
        assert!(
            c.iter()
                .any(|c| c.cs_ns == 200 && c.ncs_ns == 2000 && !c.pinned)
        );
        assert!(
            c.iter()
                .any(|c| c.cs_ns == 1000 && c.ncs_ns == 1000 && c.pinned)
        );
        let burst: Vec<&Config> = c.iter().filter(|c| c.burst).collect();
        assert_eq!(burst.len(), 1);
        assert_eq!(burst[0].threads, [4]);
        assert_eq!(configs(&[2], false, 2)[4].threads, [4, 8]);
        // It follows the cores: 2x (and 4x) on 16 of them.
        assert_eq!(configs(&[16], true, 16)[4].threads, [32]);
        assert_eq!(configs(&[16], false, 16)[4].threads, [32, 64]);
    }

    #[test]
    fn a_burst_adversary_starts_and_stops_or_says_why_not() {
        let cpu = mpsync::sched::native::available_cpus().unwrap()[0];
        match Burst::start(cpu) {
            Ok(mut b) => {
                // Real-time where permitted, else an ordinary thread — and it
                // says which and why.
                assert!(
                    b.policy == "SCHED_FIFO 1"
                        || (b.policy.starts_with("SCHED_OTHER")
                            && b.policy.contains("not permitted")),
                    "{}",
                    b.policy
                );
                b.finish();
            }
            Err(why) => assert!(why.contains("pinning"), "{why}"),
        }
    }
}
