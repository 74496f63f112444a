//! `mpsync` — runs the experiments of the papers behind mpsync on this machine,
//! beside the crates people use today, and reports whether each conclusion holds.

mod advise;
mod cli_checks;
mod convoy;
mod env;
mod envinfo;
mod experiments;
mod hart_guide;
mod model;
mod osmp;
mod output;
mod peers;
mod previous;
mod report;
mod scale;
mod stats;
mod svg;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, anyhow, bail};
use clap::{Args, Parser, Subcommand};

use cli_checks::Flag;
use env::Preempt;
use experiments::{Experiment, PAPERS, Params, catalog};
use previous::Previous;

/// Synchronization for multiprogrammed machines: reproduce the papers'
/// experiments on this machine and see which 1990s conclusions still hold.
///
/// Every run writes `OUT/<experiment>@<preempt>/{data.csv, run.json, figure.svg}`
/// and regenerates `OUT/report.html`. A re-run keeps the earlier results: it
/// moves them to `OUT/previous/<UTC time>/` first.
#[derive(Debug, Parser)]
#[command(
    name = "mpsync",
    version,
    after_help = "Start with: mpsync repro all --quick\n\nlc98-logp and lc98-stress add iceoryx2 publish-subscribe as a peer in a binary built with\n`--features iceoryx2` (see `mpsync run --help`)."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// List the implemented experiments (id, paper, what it measures).
    List,
    /// Run one experiment by id (see `mpsync list`).
    ///
    /// A flag the experiment does not read is refused (e.g. `--mp` for
    /// lock-latency, which has no MP levels); where it reads only the first
    /// value of a list (`--procs` of wks94-mplevel) a warning says so.
    ///
    /// lc98-logp and lc98-stress measure iceoryx2 publish-subscribe as a
    /// peer only in a binary built with the cargo feature `iceoryx2` (not in
    /// the default build: ~13 min to compile on 2 cores):
    /// `cargo run --release -p mpsync-cli --features iceoryx2 -- run lc98-logp`.
    /// Without it their verdicts say "iceoryx2 not built".
    Run {
        /// Experiment id, e.g. wks94-mplevel.
        id: String,
        #[command(flatten)]
        common: Common,
    },
    /// Run every implemented experiment of a paper: wks94 (003), wks95 (001),
    /// ms97 (000), hart (002), lc98 (004), or `all` (also mpsync's own).
    ///
    /// `repro scale` is the one-call scale check: lock-oversub,
    /// rwlock-oversub, map-oversub and ds-oversub at 1x, 2x and 4x this
    /// machine's cores (--threads derived from the core count), with the
    /// --quick preset's trials and trial lengths (within 8 minutes on 2 or 16
    /// cores; --trials/--scale lengthen it), then one compact table (also
    /// OUT/scale.txt): per experiment and configuration, mpsync's best over
    /// the best peer at each multiple of the cores.
    ///
    /// A flag is refused only if none of these experiments reads it; when
    /// some do, one line names them and the others run without it (e.g.
    /// `repro all --mp 1,2`: the experiments without MP levels ignore `--mp`).
    Repro {
        /// Paper key or number, `all`, or `scale` (the scale check).
        paper: String,
        #[command(flatten)]
        common: Common,
    },
    /// Print what this machine's `sched` can use: where "is that thread
    /// preempted?" is answered from (the kernel through eBPF, or heartbeats and
    /// why), whether the kernel has the rseq time-slice extension (detected
    /// only: mpsync does not request it yet), the cgroup CPU quota, cores and
    /// affinity. The same is recorded in every run.json (`machine.sched`).
    /// Set MPSYNC_EBPF=off to see (and run with) the heartbeat fallback.
    Env {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Also measure the cost of `sched::is_preempted` (eBPF vs heartbeat,
        /// interleaved rounds) and the eBPF detection latency (a victim and a
        /// CPU-bound competitor pinned to one CPU, observed from another; ~8 s).
        #[arg(long)]
        measure: bool,
    },
    /// Say what to use on this machine: for each kind of structure (mutex,
    /// RW lock, map, queue, stack, priority queue, reclaimer, barrier,
    /// message claim) the implementation the results under OUT recommend, its
    /// margin over the runner-up and over the best of the other side (peers
    /// when mpsync's won, mpsync's when a peer won), where it was judged and
    /// the run it comes from; the experiments it lacks are named. The
    /// report's summary says the same.
    Advise {
        /// Results directory.
        #[arg(long, default_value = "results")]
        out: PathBuf,
    },
    /// Regenerate OUT/report.html from every result under OUT.
    Report {
        /// Results directory: the `--out` of earlier runs (it must exist and
        /// hold results).
        #[arg(long, default_value = "results")]
        out: PathBuf,
    },
    /// (internal) A CPU-bound competitor process for `--preempt os`.
    #[command(name = "__compete", hide = true)]
    Compete {
        /// CPU to pin to.
        #[arg(long)]
        cpu: usize,
    },
}

/// The common knobs of every experiment (shared/EXPERIMENTS.md).
#[derive(Debug, Args)]
struct Common {
    /// Where preemption comes from: none (dedicated machine), emulated (the
    /// papers' pseudo-scheduler, preemption by signal), os (real Linux preemption
    /// by CPU-bound competitor processes). Default: the experiment's own.
    #[arg(long, value_enum)]
    preempt: Option<Preempt>,
    /// Multiprogramming levels, comma-separated, each >= 1 (e.g. 1,1.5,2,3).
    #[arg(long, allow_hyphen_values = true)]
    mp: Option<String>,
    /// Processor counts, comma-separated, each between 1 and the available processors.
    #[arg(long, allow_hyphen_values = true)]
    procs: Option<String>,
    /// Thread counts, comma-separated, each 1..=1024; may exceed the
    /// processors (that is the point): the *-oversub experiments and the hart
    /// experiments that vary threads (hart-queues-threads,
    /// hart-readonly-threads, hart-hash-threads, hart-severity). Defaults:
    /// lock-oversub 1,2,4,8; ds-oversub 1,2,4 and 3 and 4 per core (--quick:
    /// 2 and 3 per core). lc98-stress: writer processes (1,3,7); lc98-apps:
    /// processes per run, 2..=16 (2 per core).
    #[arg(long, allow_hyphen_values = true)]
    threads: Option<String>,
    /// Node allocator of the lock-free structures (hart-*, ms97-queue,
    /// ms97-stack, map-oversub, ds-oversub):
    /// magazines (Hart's per-thread freelists of 100 nodes over a locked global
    /// pool, the default) or system (the Rust global allocator).
    #[arg(long, value_enum)]
    alloc: Option<experiments::AllocMode>,
    /// Scheduling quantum in milliseconds (default: the paper's; 20 ms for wks94).
    #[arg(long, allow_negative_numbers = true)]
    quantum_ms: Option<f64>,
    /// Trials per point; the figure shows the mean of the middle n-2 (7 → the median 5).
    #[arg(long)]
    trials: Option<u32>,
    /// Multiplies every operation count (0.01 is a smoke run that still exercises everything).
    #[arg(long, allow_negative_numbers = true)]
    scale: Option<f64>,
    /// Seed of schedules and workload jitter: the same seed replays the same
    /// schedule [default: 1].
    #[arg(long)]
    seed: Option<u64>,
    /// Results directory. A run writes OUT/<experiment>@<preempt>/; results
    /// already there (an earlier run of the same experiment) are moved to
    /// OUT/previous/<UTC time>/ first, not overwritten.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Smoke preset: 3 trials, --scale 0.3, and the MP-level experiments
    /// (wks94-mplevel, wks95-mutex, wks95-rwlock, ms97-*) at MP levels 1,2
    /// only; each experiment also shortens its own runs (explicit flags win).
    #[arg(long)]
    quick: bool,
    /// MP-level lock programs (wks94-mplevel, wks94-procs, wks95-mutex,
    /// wks95-rwlock): shorten the non-critical section so the lock is as busy
    /// as on the paper's machine (utilisation P × CS / (CS + NCS) as on 003's
    /// 11-processor SGI or 001's 63-processor KSR 1); results go to
    /// OUT/<experiment>@<preempt>+matched/, beside the plain run's.
    #[arg(long)]
    match_contention: bool,
}

fn parse_list<T: std::str::FromStr>(flag: &str, s: &str, example: &str) -> anyhow::Result<Vec<T>> {
    let v: Result<Vec<T>, _> = s.split(',').map(|x| x.trim().parse::<T>()).collect();
    match v {
        Ok(v) if !v.is_empty() => Ok(v),
        _ => bail!(
            "--{flag} {s}: expected a comma-separated list of numbers (e.g. --{flag} {example})"
        ),
    }
}

impl Common {
    /// The flags given on the command line (not filled in by a default or `--quick`).
    fn given(&self) -> Vec<Flag> {
        let given = [
            (Flag::Preempt, self.preempt.is_some()),
            (Flag::Mp, self.mp.is_some()),
            (Flag::Procs, self.procs.is_some()),
            (Flag::Threads, self.threads.is_some()),
            (Flag::Alloc, self.alloc.is_some()),
            (Flag::QuantumMs, self.quantum_ms.is_some()),
            (Flag::Trials, self.trials.is_some()),
            (Flag::Scale, self.scale.is_some()),
            (Flag::Seed, self.seed.is_some()),
            (Flag::MatchContention, self.match_contention),
        ];
        given.iter().filter(|g| g.1).map(|g| g.0).collect()
    }

    fn resolve(&self) -> anyhow::Result<Params> {
        let cores = mpsync::sched::native::available_cpus().map_or(1, |c| c.len()) as u32;
        let mp = match &self.mp {
            Some(s) => {
                let v: Vec<f64> = parse_list("mp", s, "1,2,3")?;
                if let Some(bad) = v.iter().find(|m| !m.is_finite() || **m < 1.0 || **m > 64.0) {
                    bail!(
                        "--mp {bad}: multiprogramming level must be >= 1 and <= 64 (e.g. --mp 1,2,3)"
                    );
                }
                Some(v)
            }
            None => None,
        };
        let procs = match &self.procs {
            Some(s) => {
                let v: Vec<u32> = parse_list("procs", s, "1,2")?;
                if let Some(bad) = v.iter().find(|p| **p == 0 || **p > cores) {
                    bail!(
                        "--procs {bad}: this machine has {cores} available processor{} (e.g. --procs {})",
                        if cores == 1 { "" } else { "s" },
                        (1..=cores)
                            .map(|c| c.to_string())
                            .collect::<Vec<_>>()
                            .join(",")
                    );
                }
                Some(v)
            }
            None => None,
        };
        let threads = match &self.threads {
            Some(s) => {
                let v: Vec<u32> = parse_list("threads", s, "1,2,4,8")?;
                if let Some(bad) = v.iter().find(|t| **t == 0 || **t > 1024) {
                    bail!(
                        "--threads {bad}: each thread count must be between 1 and 1024 (e.g. --threads 1,2,4,8)"
                    );
                }
                Some(v)
            }
            None => None,
        };
        if let Some(q) = self
            .quantum_ms
            .filter(|q| !(q.is_finite() && (0.1..=10_000.0).contains(q)))
        {
            bail!("--quantum-ms {q}: must be between 0.1 and 10000 (the papers use 10-50)");
        }
        let trials = self.trials.unwrap_or(if self.quick { 3 } else { 7 });
        if trials == 0 {
            bail!(
                "--trials 0: need at least 1 trial (default 7: the mean of the median 5 is reported)"
            );
        }
        let scale = self.scale.unwrap_or(if self.quick { 0.3 } else { 1.0 });
        if !(scale.is_finite() && scale > 0.0 && scale <= 1000.0) {
            bail!("--scale {scale}: must be > 0 and <= 1000 (e.g. --scale 0.01 for a smoke run)");
        }
        Ok(Params {
            preempt: self.preempt,
            mp,
            procs,
            threads,
            quantum_ms: self.quantum_ms,
            trials,
            scale,
            seed: self.seed.unwrap_or(1),
            out: self.out.clone(),
            quick: self.quick,
            cores,
            alloc: self.alloc.unwrap_or_default(),
            match_contention: self.match_contention,
        })
    }
}

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub(crate) fn progress(total: u64, what: &str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new(total);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{msg:>16} [{bar:40}] {pos}/{len} trials, {elapsed} (about {eta} left)",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(what.to_string());
    pb
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn run_one(
    exp: &Experiment,
    params: &Params,
    preempt: Preempt,
    previous: &mut Previous,
) -> anyhow::Result<()> {
    static ANSWERS: std::sync::Once = std::sync::Once::new();
    ANSWERS.call_once(|| {
        eprintln!(
            "sched: preemption answers from {} (see 'mpsync env')",
            envinfo::SchedEnv::detect().answers_line()
        );
    });
    eprintln!("running {} (--preempt {}) ...", exp.id, preempt.name());
    // Calibrate busy work before anything is timed: the locks' and lock-free
    // structures' backoff use the nominal rate until something has measured it.
    let _ = mpsync::util::busy::BusyWork::global();
    let (mut rec, svg) =
        (exp.run)(exp, params, preempt).with_context(|| format!("{} failed", exp.id))?;
    // A contention-matched run is kept beside the plain one.
    if params.match_contention && exp.knobs.contains(&experiments::Knob::MatchContention) {
        rec.preempt = format!("{}{}", preempt.name(), output::MATCHED);
    }
    let dir = output::run_dir(&params.out, exp.id, &rec.preempt);
    previous.make_room(&dir)?;
    output::write_run(&dir, &rec, &svg)?;
    let summary = rec.verdict.summary();
    println!(
        "{} [{}] verdict: {}{} — {}",
        exp.id,
        rec.preempt,
        rec.verdict.status.label(),
        if summary.is_empty() {
            String::new()
        } else {
            format!(" ({summary})")
        },
        rec.verdict.conclusion
    );
    for d in &rec.verdict.details {
        println!("    {d}");
    }
    println!("    results: {} ({:.1} s)", dir.display(), rec.duration_s);
    Ok(())
}

fn find(id: &str) -> anyhow::Result<Experiment> {
    catalog()
        .into_iter()
        .find(|e| e.id == id)
        .ok_or_else(|| anyhow!("unknown experiment '{id}' (see 'mpsync list')"))
}

fn main_inner(cli: Cli) -> anyhow::Result<()> {
    match cli.cmd {
        Cmd::List => cmd_list(),
        Cmd::Run { id, common } => cmd_run(&id, &common),
        Cmd::Repro { paper, common } => cmd_repro(&paper, &common),
        Cmd::Advise { out } => advise::main(&out),
        Cmd::Report { out } => cmd_report(&out),
        Cmd::Env { json, measure } => envinfo::main(json, measure),
        Cmd::Compete { cpu } => osmp::competitor_main(cpu),
    }
}

/// `mpsync list`: the catalog, in aligned columns.
fn cmd_list() -> anyhow::Result<()> {
    let cat = catalog();
    let id_w = cat.iter().map(|e| e.id.chars().count()).max().unwrap_or(0);
    let paper_w = cat
        .iter()
        .map(|e| e.paper.chars().count())
        .max()
        .unwrap_or(0);
    let mut stdout = std::io::stdout().lock();
    for e in &cat {
        let line = writeln!(
            stdout,
            "{:<id_w$}  {:<paper_w$}  {}",
            e.id, e.paper, e.title
        );
        match line {
            Ok(()) => {}
            // `mpsync list | head`: the reader has all it wanted.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(e).context("cannot write the list"),
        }
    }
    Ok(())
}

/// `mpsync run <id>`.
fn cmd_run(id: &str, common: &Common) -> anyhow::Result<()> {
    let exp = find(id)?;
    let params = common.resolve()?;
    for w in cli_checks::check_run(&exp, &common.given(), &params).map_err(|e| anyhow!(e))? {
        eprintln!("{w}");
    }
    let preempt = if exp.uses_preempt {
        params.preempt.unwrap_or(exp.default_preempt)
    } else {
        exp.default_preempt
    };
    run_one(
        &exp,
        &params,
        preempt,
        &mut Previous::new(&params.out, unix_now()),
    )?;
    println!("report: {}", report::write_report(&params.out)?.display());
    Ok(())
}

/// `mpsync repro <paper>`: every experiment of a paper (or all), then what
/// to use and the report.
fn cmd_repro(paper: &str, common: &Common) -> anyhow::Result<()> {
    if paper == "scale" {
        return cmd_scale(common);
    }
    let params = common.resolve()?;
    let key = PAPERS
        .iter()
        .find(|(k, nums, _)| *k == paper || nums.contains(&paper))
        .map(|(k, _, _)| *k);
    let all = paper == "all";
    if !all && key.is_none() {
        bail!(
            "unknown paper '{paper}': use one of {} or all",
            PAPERS.iter().map(|p| p.0).collect::<Vec<_>>().join(", ")
        );
    }
    let exps: Vec<Experiment> = catalog()
        .into_iter()
        .filter(|e| all || Some(e.paper) == key)
        .collect();
    if exps.is_empty() {
        let implemented: Vec<&str> = catalog().iter().map(|e| e.id).collect();
        bail!(
            "no experiment of paper '{paper}' is implemented yet (implemented: {})",
            implemented.join(", ")
        );
    }
    for n in
        cli_checks::check_repro(paper, &exps, &common.given(), &params).map_err(|e| anyhow!(e))?
    {
        eprintln!("{n}");
    }
    let mut previous = Previous::new(&params.out, unix_now());
    for exp in &exps {
        // Lock experiments run under both kinds of preemption unless one is given.
        let modes = match (exp.uses_preempt, params.preempt) {
            (true, Some(p)) => vec![p],
            (true, None) => vec![exp.default_preempt, Preempt::Os],
            (false, _) => vec![exp.default_preempt],
        };
        for m in modes {
            run_one(exp, &params, m, &mut previous)?;
        }
    }
    let runs = output::read_runs(&params.out)?;
    println!("{}", advise::text(&advise::rows(&runs)));
    println!("{}", hart_guide::text(&hart_guide::rows(&runs)));
    println!("report: {}", report::write_report(&params.out)?.display());
    Ok(())
}

/// `mpsync repro scale`: the oversubscription experiments at 1x, 2x and 4x
/// the cores, then their compact table.
fn cmd_scale(common: &Common) -> anyhow::Result<()> {
    let mut params = common.resolve()?;
    let mut plan = scale::Plan::new(params.cores, common.trials, common.scale);
    if let Some(t) = &params.threads {
        plan.threads.clone_from(t);
    }
    params.threads = Some(plan.threads.clone());
    (params.trials, params.scale, params.quick) = (plan.trials, plan.scale, true);
    let exps: Vec<Experiment> = scale::EXPERIMENTS
        .iter()
        .map(|id| find(id))
        .collect::<anyhow::Result<_>>()?;
    for n in
        cli_checks::check_repro("scale", &exps, &common.given(), &params).map_err(|e| anyhow!(e))?
    {
        eprintln!("{n}");
    }
    eprintln!(
        "repro scale: threads {:?} on {} cores, about {:.0} s by its estimate (budget {:.0} s)",
        plan.threads,
        params.cores,
        plan.estimate_s(),
        scale::BUDGET_S
    );
    let started = std::time::Instant::now();
    let mut previous = Previous::new(&params.out, unix_now());
    for exp in &exps {
        run_one(exp, &params, exp.default_preempt, &mut previous)?;
    }
    let runs: Vec<output::RunRecord> = output::read_runs(&params.out)?
        .into_iter()
        .map(|r| r.1)
        .filter(|r| scale::EXPERIMENTS.contains(&r.experiment.as_str()))
        .collect();
    let table = scale::table(&runs, params.cores, &plan, started.elapsed().as_secs_f64());
    print!("{table}");
    let path = params.out.join("scale.txt");
    std::fs::write(&path, &table).with_context(|| format!("cannot write {}", path.display()))?;
    println!("table: {}", path.display());
    println!("report: {}", report::write_report(&params.out)?.display());
    Ok(())
}

/// `mpsync report`: regenerates the report of an existing results folder.
fn cmd_report(out: &std::path::Path) -> anyhow::Result<()> {
    if !out.is_dir() {
        bail!(
            "report --out {}: no such folder (give the --out of an earlier run; the default is results)",
            out.display()
        );
    }
    let has_runs = std::fs::read_dir(out)
        .with_context(|| format!("cannot read {}", out.display()))?
        .flatten()
        .any(|e| e.path().join("run.json").is_file());
    if !has_runs {
        bail!(
            "report --out {}: no results in it (no <experiment>@<preempt>/run.json; run e.g. 'mpsync repro all --quick --out {}' first)",
            out.display(),
            out.display()
        );
    }
    println!("report: {}", report::write_report(out)?.display());
    Ok(())
}

fn main() -> ExitCode {
    // clap's own handling: a parse error in full (what was wrong, the possible
    // values or a "did you mean", the usage line) on stderr with exit code 2,
    // the help for a missing subcommand likewise, `--help` and `--version` on
    // stdout with 0.
    let cli = Cli::parse();
    match main_inner(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", format!("{e:#}").replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The resolved parameters of `mpsync run wks94-mplevel ARGS...`.
    fn resolve(args: &[&str]) -> anyhow::Result<Params> {
        let mut all = vec!["mpsync", "run", "wks94-mplevel"];
        all.extend_from_slice(args);
        match Cli::try_parse_from(all)?.cmd {
            Cmd::Run { common, .. } => common.resolve(),
            other => panic!("parsed as {other:?}"),
        }
    }

    fn err(args: &[&str]) -> String {
        format!("{:#}", resolve(args).expect_err("accepted"))
    }

    #[test]
    fn mp_levels_parse_as_a_comma_separated_list() {
        let p = resolve(&["--mp", "1, 1.5,2,3"]).unwrap();
        assert_eq!(p.mp, Some(vec![1.0, 1.5, 2.0, 3.0]));
        assert_eq!(resolve(&[]).unwrap().mp, None, "the experiment's default");
        assert_eq!(
            err(&["--mp", "0.5"]),
            "--mp 0.5: multiprogramming level must be >= 1 and <= 64 (e.g. --mp 1,2,3)"
        );
        assert!(err(&["--mp", "1,x"]).contains("comma-separated list"));
        assert!(err(&["--mp", ""]).contains("comma-separated list"));
        assert!(err(&["--mp", "NaN"]).contains("must be >= 1"));
        assert!(err(&["--mp", "65"]).contains("<= 64"));
    }

    #[test]
    fn processors_are_bounded_by_the_machine() {
        let cores = mpsync::sched::native::available_cpus().unwrap().len();
        let p = resolve(&["--procs", "1"]).unwrap();
        assert_eq!(p.procs, Some(vec![1]));
        assert_eq!(p.cores as usize, cores);
        let too_many = (cores + 1).to_string();
        let e = err(&["--procs", &too_many]);
        assert!(
            e.starts_with(&format!(
                "--procs {too_many}: this machine has {cores} available"
            )),
            "{e}"
        );
        assert!(err(&["--procs", "0"]).contains("available"));
    }

    #[test]
    fn quick_is_a_preset_that_explicit_flags_override() {
        let p = resolve(&[]).unwrap();
        assert_eq!((p.trials, p.scale, p.quick), (7, 1.0, false));
        let q = resolve(&["--quick"]).unwrap();
        assert_eq!((q.trials, q.scale, q.quick), (3, 0.3, true));
        let r = resolve(&["--quick", "--trials", "5", "--scale", "0.01"]).unwrap();
        assert_eq!((r.trials, r.scale), (5, 0.01));
    }

    #[test]
    fn nonsense_counts_are_rejected() {
        assert!(err(&["--trials", "0"]).starts_with("--trials 0:"));
        assert!(err(&["--scale", "0"]).starts_with("--scale 0:"));
        assert!(err(&["--scale", "-1"]).starts_with("--scale -1:"));
        assert!(err(&["--quantum-ms", "0"]).starts_with("--quantum-ms 0:"));
        assert!(err(&["--quantum-ms", "-3"]).starts_with("--quantum-ms -3:"));
        assert!(err(&["--procs", "-1"]).contains("comma-separated list"));
        assert_eq!(
            resolve(&["--quantum-ms", "5"]).unwrap().quantum(20.0),
            std::time::Duration::from_millis(5)
        );
    }
}
