//! The experiment catalog (shared/EXPERIMENTS.md ids) and what every experiment
//! gets to run with.

pub mod barrier_oversub;
pub mod barrier_repartition;
pub mod ds_oversub;
pub mod hart;
pub mod hart_hash;
pub mod hart_primitives;
pub mod latency;
pub mod lc98;
pub mod lc98_apps;
#[cfg(feature = "iceoryx2")]
pub mod lc98_iceoryx2;
pub mod locks;
pub mod ms97;
pub mod ms97_apps;
pub mod oversub;
pub mod real_programs;
pub mod rwlock_oversub;
pub mod sched_overhead;
pub mod structures;
pub mod wks94;
pub mod wks94_convoy;
pub mod wks95;
pub mod wks95_barrier;
pub mod wks95_gauss;
pub mod wks95_rwlock;
pub mod wks_apps;

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::env::Preempt;
use crate::output::RunRecord;

/// Resolved common parameters (EXPERIMENTS.md "common knobs").
#[derive(Debug, Clone, Serialize)]
pub struct Params {
    /// Where preemption comes from; `None` = the experiment's default.
    pub preempt: Option<Preempt>,
    /// MP levels; `None` = the experiment's default.
    pub mp: Option<Vec<f64>>,
    /// Processor counts; `None` = the experiment's default.
    pub procs: Option<Vec<u32>>,
    /// Thread counts (lock-oversub); `None` = the experiment's default.
    pub threads: Option<Vec<u32>>,
    /// Quantum; `None` = the experiment's default.
    pub quantum_ms: Option<f64>,
    /// Trials per point.
    pub trials: u32,
    /// Multiplies operation counts.
    pub scale: f64,
    /// Seed of schedules and workload jitter.
    pub seed: u64,
    /// Results directory.
    pub out: PathBuf,
    /// Smoke preset.
    pub quick: bool,
    /// Processors available to the process.
    pub cores: u32,
    /// Node allocator of the lock-free structures (hart-*, ms97-*, ds-oversub).
    pub alloc: AllocMode,
    /// `--match-contention`: shorten the MP-level lock programs' non-critical
    /// section so the lock is as busy as on the paper's machine.
    pub match_contention: bool,
}

/// Node allocator of the lock-free structures (`--alloc`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AllocMode {
    /// Hart's per-thread magazines of 100 nodes over a spinlocked global pool.
    #[default]
    Magazines,
    /// The Rust global allocator.
    System,
}

/// Parameters of a unit test: every knob at its default, 2 cores.
#[cfg(test)]
pub(crate) fn test_params() -> Params {
    Params {
        preempt: None,
        mp: None,
        procs: None,
        threads: None,
        quantum_ms: None,
        trials: 1,
        scale: 1.0,
        seed: 1,
        out: PathBuf::new(),
        quick: false,
        cores: 2,
        alloc: AllocMode::Magazines,
        match_contention: false,
    }
}

impl Params {
    /// The quantum to use, given the experiment's default.
    pub fn quantum(&self, default_ms: f64) -> Duration {
        Duration::from_secs_f64(self.quantum_ms.unwrap_or(default_ms) / 1e3)
    }

    /// The first processor count of `--procs`, else every core.
    pub fn first_procs(&self) -> u32 {
        self.procs
            .as_ref()
            .and_then(|v| v.first().copied())
            .unwrap_or(self.cores)
    }
}

/// A common knob (a flag of `run` and `repro`) as an experiment reads it.
/// `--preempt` is [`Experiment::uses_preempt`]; `--quick` and `--out` apply to
/// every experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Knob {
    /// `--mp`, every level.
    Mp,
    /// `--mp`, only its first level.
    MpFirst,
    /// `--procs`, every count.
    Procs,
    /// `--procs`, only its first count.
    ProcsFirst,
    /// `--threads`.
    Threads,
    /// `--quantum-ms`.
    QuantumMs,
    /// `--alloc`.
    Alloc,
    /// `--trials`.
    Trials,
    /// `--scale`.
    Scale,
    /// `--seed`.
    Seed,
    /// `--match-contention`.
    MatchContention,
}

/// A runnable experiment.
#[derive(Debug, Clone, Copy)]
pub struct Experiment {
    /// Stable id (EXPERIMENTS.md).
    pub id: &'static str,
    /// Paper key for `repro` (`wks94`, `mpsync`, ...).
    pub paper: &'static str,
    /// Paper reference.
    pub reference: &'static str,
    /// One line.
    pub title: &'static str,
    /// Preemption mode when none is given.
    pub default_preempt: Preempt,
    /// Whether `--preempt` changes anything.
    pub uses_preempt: bool,
    /// The common knobs besides `--preempt` that its run reads (a flag it does
    /// not read is refused: `cli_checks`).
    pub knobs: &'static [Knob],
    /// Runs it; returns the record and the figure.
    pub run: fn(&Experiment, &Params, Preempt) -> anyhow::Result<(RunRecord, String)>,
}

/// Every implemented experiment, as data: its id, paper, the knobs it reads
/// and its run function.
pub const CATALOG: &[Experiment] = {
    use Knob as K;
    &[
        Experiment {
            id: "wks94-mplevel",
            paper: "wks94",
            reference: "Wisniewski, Kontothanassis & Scott, IPPS 1994, §4.2 Fig. 2-3 (papers/003)",
            title: "synthetic lock program (CS ~15 µs, non-CS ~210 µs), fixed processors, varying multiprogramming level",
            default_preempt: Preempt::Emulated,
            uses_preempt: true,
            knobs: &[
                K::Mp,
                K::ProcsFirst,
                K::QuantumMs,
                K::Trials,
                K::Scale,
                K::Seed,
                K::MatchContention,
            ],
            run: wks94::run,
        },
        Experiment {
            id: "wks94-procs",
            paper: "wks94",
            reference: "Wisniewski, Kontothanassis & Scott, IPPS 1994, §4.3 Fig. 5 (papers/003)",
            title: "synthetic lock program at multiprogramming level 2, varying processors",
            default_preempt: Preempt::Emulated,
            uses_preempt: true,
            knobs: &[
                K::MpFirst,
                K::Procs,
                K::QuantumMs,
                K::Trials,
                K::Scale,
                K::Seed,
                K::MatchContention,
            ],
            run: wks94::run,
        },
        Experiment {
            id: "wks94-convoy",
            paper: "wks94",
            reference: "Wisniewski, Kontothanassis & Scott, IPPS 1994, §4.2-4.3 Fig. 2-5 (papers/003); mpsync's model",
            title: "where the convoy went: a discrete-event model of the synthetic lock program beside its measurement here (TAS-B, TAS-B-np, Queued, Smart-Q; NCS 210 µs and contention-matched), and its predictions at 11, 16 and 63 processors (synchronized and independent scheduler phases)",
            default_preempt: Preempt::Emulated,
            uses_preempt: false,
            knobs: &[
                K::Mp,
                K::ProcsFirst,
                K::QuantumMs,
                K::Trials,
                K::Scale,
                K::Seed,
            ],
            run: wks94_convoy::run,
        },
        Experiment {
            id: "wks94-apps",
            paper: "wks94",
            reference: "Wisniewski, Kontothanassis & Scott, IPPS 1994, §4 Fig. 6 (papers/003)",
            title: "Cholesky (a generated stiffness-like matrix of bcsstk15's order 3948 and 117,816 entries x --scale, over a lock-protected queue of ready columns and per-column locks; factor checked) and quicksort (2 M integers x --scale over a lock-protected stack of intervals; output checked) at MP 2, quantum 20 ms: TAS-B(-np), Queued(-np), Queued-Handshaking, Smart-Q, Native(-np), wks94-mplevel's other rows and peers; --quick: order 1764, 600 K integers",
            default_preempt: Preempt::Emulated,
            uses_preempt: true,
            knobs: &[
                K::Mp,
                K::ProcsFirst,
                K::QuantumMs,
                K::Trials,
                K::Scale,
                K::Seed,
            ],
            run: wks_apps::run,
        },
        Experiment {
            id: "wks95-mutex",
            paper: "wks95",
            reference: "Wisniewski, Kontothanassis & Scott, PPoPP 1995, §4 Fig. 1-2 (papers/001)",
            title: "lock program (5000 iterations, CS:non-CS inversely proportional to processors, quantum 50 ms): varying MP level, or processors when --procs lists several",
            default_preempt: Preempt::Emulated,
            uses_preempt: true,
            knobs: &[
                K::Mp,
                K::Procs,
                K::QuantumMs,
                K::Trials,
                K::Scale,
                K::Seed,
                K::MatchContention,
            ],
            run: wks95::run,
        },
        Experiment {
            id: "wks95-rwlock",
            paper: "wks95",
            reference: "Wisniewski, Kontothanassis & Scott, PPoPP 1995, §3.2, §4 Fig. 5-6 (papers/001)",
            title: "reader-writer lock program (5000 iterations, 30 µs sections, 80% reads, 120 µs x processors outside, quantum 50 ms): RW-Smart-Q, RW-Queued, RW-TAS-B(-np), RW-Native(-np) and peers, varying MP level (Fig. 5), or processors when --procs lists several (Fig. 6)",
            default_preempt: Preempt::Emulated,
            uses_preempt: true,
            knobs: &[
                K::Mp,
                K::Procs,
                K::QuantumMs,
                K::Trials,
                K::Scale,
                K::Seed,
                K::MatchContention,
            ],
            run: wks95_rwlock::run,
        },
        Experiment {
            id: "wks95-barrier",
            paper: "wks95",
            reference: "Wisniewski, Kontothanassis & Scott, PPoPP 1995, §3.3, §4 Fig. 7 (papers/001)",
            title: "barrier program (work 240-290 µs between episodes, 4000 episodes, MP 2 from the application's own threads, emulated repartitioning once a second): Arrival-tree, Heuristic-tree, Central-block, Scalable-SC and peers, varying processors",
            default_preempt: Preempt::Emulated,
            uses_preempt: true,
            knobs: &[K::Procs, K::QuantumMs, K::Trials, K::Scale, K::Seed],
            run: wks95_barrier::run,
        },
        Experiment {
            id: "wks95-gauss",
            paper: "wks95",
            reference: "Wisniewski, Kontothanassis & Scott, PPoPP 1995, §4 Fig. 8 (papers/001)",
            title: "Gaussian elimination (640x640 x cbrt(--scale), one barrier episode per pivot column, answer checked against a sequential solve) at MP 2 from the application's own threads, emulated repartitioning once a second: Arrival-tree, Heuristic-tree, Central-block, Scalable-SC and peers, at all processors (or --procs)",
            default_preempt: Preempt::Emulated,
            uses_preempt: true,
            knobs: &[K::Procs, K::QuantumMs, K::Trials, K::Scale, K::Seed],
            run: wks95_gauss::run,
        },
        Experiment {
            id: "wks95-apps",
            paper: "wks95",
            reference: "Wisniewski, Kontothanassis & Scott, PPoPP 1995, §4 Figs. 3-4 (papers/001)",
            title: "Cholesky (a generated stiffness-like matrix of bcsstk15's order 3948 and 117,816 entries x --scale, over a lock-protected queue of ready columns and per-column locks; factor checked) and quicksort (2 M integers x --scale over a lock-protected stack of intervals; output checked) at MP 2, quantum 50 ms: Ticket(-np), Smart-Q, TAS-B(-np), Native(-np) and peers; --quick: order 1764, 600 K integers",
            default_preempt: Preempt::Emulated,
            uses_preempt: true,
            knobs: &[
                K::Mp,
                K::ProcsFirst,
                K::QuantumMs,
                K::Trials,
                K::Scale,
                K::Seed,
            ],
            run: wks_apps::run,
        },
        Experiment {
            id: "ms97-queue",
            paper: "ms97",
            reference: "Michael & Scott, JPDC 1998 (PODC 1997) §4.1 Fig. 1 (papers/000)",
            title: "enqueue/dequeue pairs on an initially empty queue: single lock (ordinary, PS), two locks (ordinary, PS), MS and PLJ non-blocking, and peers; 6 µs work after each op, MP levels",
            default_preempt: Preempt::Emulated,
            uses_preempt: true,
            knobs: &[
                K::Mp,
                K::ProcsFirst,
                K::QuantumMs,
                K::Alloc,
                K::Trials,
                K::Scale,
                K::Seed,
            ],
            run: ms97::run,
        },
        Experiment {
            id: "ms97-stack",
            paper: "ms97",
            reference: "Michael & Scott, JPDC 1998 (PODC 1997) §4.2 Fig. 2 (papers/000)",
            title: "push/pop pairs on an initially empty stack: single lock (ordinary, PS), Treiber, Herlihy-optimized, and peers; 6 µs work after each op, MP levels",
            default_preempt: Preempt::Emulated,
            uses_preempt: true,
            knobs: &[
                K::Mp,
                K::ProcsFirst,
                K::QuantumMs,
                K::Alloc,
                K::Trials,
                K::Scale,
                K::Seed,
            ],
            run: ms97::run,
        },
        Experiment {
            id: "ms97-heap",
            paper: "ms97",
            reference: "Michael & Scott, JPDC 1998 (PODC 1997) §4.3 Fig. 3 (papers/000)",
            title: "insert/delete_min pairs on an initially empty skew heap: single lock (ordinary, PS), Herlihy non-blocking, and Mutex<BinaryHeap>; 6 µs work after each op, MP levels",
            default_preempt: Preempt::Emulated,
            uses_preempt: true,
            knobs: &[
                K::Mp,
                K::ProcsFirst,
                K::QuantumMs,
                K::Trials,
                K::Scale,
                K::Seed,
            ],
            run: ms97::run,
        },
        Experiment {
            id: "ms97-counter",
            paper: "ms97",
            reference: "Michael & Scott, JPDC 1998 (PODC 1997) §4.4 Fig. 4 (papers/000)",
            title: "increments of a shared counter: single lock (ordinary, PS), CAS loop, fetch_add; 6 µs work after each, MP levels",
            default_preempt: Preempt::Emulated,
            uses_preempt: true,
            knobs: &[
                K::Mp,
                K::ProcsFirst,
                K::QuantumMs,
                K::Trials,
                K::Scale,
                K::Seed,
            ],
            run: ms97::run,
        },
        Experiment {
            id: "ms97-quicksort-queue",
            paper: "ms97",
            reference: "Michael & Scott, JPDC 1998 (PODC 1997) §4.5 Fig. 5 (papers/000)",
            title: "parallel quicksort, 5 sorts a trial (--quick: 3) of 500,000 pseudo-random items (x --scale) each, intervals handed out through a shared queue, insertion sort at 20 or fewer, output checked sorted every trial: single lock (ordinary, PS), MS non-blocking, SCQ, and peers; MP levels",
            default_preempt: Preempt::Emulated,
            uses_preempt: true,
            knobs: &[
                K::Mp,
                K::ProcsFirst,
                K::QuantumMs,
                K::Alloc,
                K::Trials,
                K::Scale,
                K::Seed,
            ],
            run: ms97_apps::run,
        },
        Experiment {
            id: "ms97-quicksort-stack",
            paper: "ms97",
            reference: "Michael & Scott, JPDC 1998 (PODC 1997) §4.5 Fig. 6 (papers/000)",
            title: "parallel quicksort, 5 sorts a trial (--quick: 3) of 500,000 pseudo-random items (x --scale) each, intervals handed out through a shared stack, insertion sort at 20 or fewer, output checked sorted every trial: single lock (ordinary, PS), Treiber, elimination, and peers; MP levels",
            default_preempt: Preempt::Emulated,
            uses_preempt: true,
            knobs: &[
                K::Mp,
                K::ProcsFirst,
                K::QuantumMs,
                K::Alloc,
                K::Trials,
                K::Scale,
                K::Seed,
            ],
            run: ms97_apps::run,
        },
        Experiment {
            id: "ms97-tsp",
            paper: "ms97",
            reference: "Michael & Scott, JPDC 1998 (PODC 1997) §4.6 Fig. 7 (papers/000)",
            title: "branch-and-bound TSP of a fixed seeded 17-city matrix over a shared priority queue, stack and counters, 4 x --scale solves a trial (--quick: 1), each checked against Held-Karp: all ordinary, all PS, all non-blocking, hybrid (non-blocking stack and counters, PS heap), std; MP levels",
            default_preempt: Preempt::Emulated,
            uses_preempt: true,
            knobs: &[
                K::Mp,
                K::ProcsFirst,
                K::QuantumMs,
                K::Alloc,
                K::Trials,
                K::Scale,
                K::Seed,
            ],
            run: ms97_apps::run,
        },
        Experiment {
            id: "hart-base",
            paper: "hart",
            reference: "Hart, MSc thesis 2005, §5.2.1 Fig. 5.2 (queue part) (papers/002)",
            title: "one thread, one non-empty MS queue, enqueue/dequeue: the per-operation cost of QSBR, EBR and HP beside the leaking baseline",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Alloc, K::Trials, K::Scale, K::Seed],
            run: hart::run,
        },
        Experiment {
            id: "hart-primitives",
            paper: "hart",
            reference: "Hart, MSc thesis 2005, §5.1.3 Table 5.1 (papers/002)",
            title: "the machine's costs of a full fence, a write fence, a CAS and a spin lock's lock+unlock (Table 5.1), one pinned thread",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Trials, K::Scale, K::Seed],
            run: hart_primitives::run,
        },
        Experiment {
            id: "hart-queues-threads",
            paper: "hart",
            reference: "Hart, MSc thesis 2005, §5.2.2 Fig. 5.7/5.9 (papers/002)",
            title: "100 MS queues, threads 1..16 on the machine's cores (CPU contention; every operation allocates or frees a node), per scheme",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Threads, K::Alloc, K::Trials, K::Scale, K::Seed],
            run: hart::run,
        },
        Experiment {
            id: "hart-queues-count",
            paper: "hart",
            reference: "Hart, MSc thesis 2005, §5.2.4 Fig. 5.13 (papers/002)",
            title: "2 threads over a varying number of MS queues, per scheme",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Alloc, K::Trials, K::Scale, K::Seed],
            run: hart::run,
        },
        Experiment {
            id: "hart-memory",
            paper: "hart",
            reference: "the open question of Hart 2005 §6 (papers/002)",
            title: "one thread stalled inside an MS-queue operation while the others run: pending (retired, unfreed) nodes over time per scheme, with HP's bound",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Alloc, K::Scale, K::Seed],
            run: hart::run,
        },
        Experiment {
            id: "hart-base-hash",
            paper: "hart",
            reference: "Hart 2005 §5.2 Fig. 5.2, hash part of hart-base (papers/002)",
            title: "one thread, hash table of 32 buckets at load factor 1, read-only and write-only, the lock-free and the CR table over QSBR, EBR and HP",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Alloc, K::Trials, K::Scale, K::Seed],
            run: hart_hash::run,
        },
        Experiment {
            id: "hart-readonly-threads",
            paper: "hart",
            reference: "Hart 2005 §5.2 Fig. 5.3 (papers/002)",
            title: "read-only hash table (32 buckets, load factor 1), threads 1..N unpinned (--threads): per-bucket spinlock table vs the lock-free table over each scheme",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Threads, K::Alloc, K::Trials, K::Scale, K::Seed],
            run: hart_hash::run,
        },
        Experiment {
            id: "hart-loadfactor",
            paper: "hart",
            reference: "Hart 2005 §5.2.1, the lock-free table's lines of Fig. 5.4-5.5 (not their lock-based table, nor Fig. 5.6's concurrently-readable one) (papers/002)",
            title: "one thread, load factor 1..20, read-only and write-only, the lock-free table over each scheme",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Alloc, K::Trials, K::Scale, K::Seed],
            run: hart_hash::run,
        },
        Experiment {
            id: "hart-hash-threads",
            paper: "hart",
            reference: "Hart 2005 §5.2.2 Fig. 5.8 (papers/002)",
            title: "write-only hash table (32 buckets, load factor 1), threads 1..N unpinned (--threads), the lock-free table over each scheme",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Threads, K::Alloc, K::Trials, K::Scale, K::Seed],
            run: hart_hash::run,
        },
        Experiment {
            id: "hart-update-fraction",
            paper: "hart",
            reference: "Hart 2005 §5.2.4-5.2.5, the QSBR lines of Fig. 5.14-5.15 (not their EBR and HP lines) and Fig. 5.17 (papers/002)",
            title: "two threads, load factor 5, update fraction 0..1: the lock-free table (plain and fast-read) and the CR table, all over QSBR, vs the per-bucket spinlock table",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Alloc, K::Trials, K::Scale, K::Seed],
            run: hart_hash::run,
        },
        Experiment {
            id: "hart-fastread",
            paper: "hart",
            reference: "Hart 2005 §5.2.5 Fig. 5.18-5.19 (papers/002)",
            title: "two threads, read-only and write-only, load factor 1..20: the lock-free table's plain and fast-read searches over QSBR and EBR, and the CR table",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Alloc, K::Trials, K::Scale, K::Seed],
            run: hart_hash::run,
        },
        Experiment {
            id: "hart-severity",
            paper: "hart",
            reference: "Hart 2005 §5.2.3 Fig. 5.10-5.12 (papers/002)",
            title: "write-only hash table: many threads with the load factor varying, and load factor 10 and 20 with the threads varying (--threads): crossovers between HP and QSBR/EBR",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Threads, K::Alloc, K::Trials, K::Scale, K::Seed],
            run: hart_hash::run,
        },
        Experiment {
            id: "hart-memory-hash",
            paper: "hart",
            reference: "the open question of Hart 2005 §6 (papers/002), with the hash table",
            title: "one thread stalled inside a lock-free hash-table operation while the others run a write-only load: pending nodes over time per scheme, with HP's bound",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Alloc, K::Scale, K::Seed],
            run: hart_hash::run,
        },
        Experiment {
            id: "map-oversub",
            paper: "mpsync",
            reference: "mpsync's own (the issue's targets for the hash tables)",
            title: "read-heavy map mix (98% gets) at 1x, 2x and 4x the cores, unpinned: every mpsync table and papaya, dashmap, scc, RwLock/Mutex<HashMap>; throughput and p99.9 get latency (--threads sets the counts)",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Threads, K::Alloc, K::Trials, K::Scale, K::Seed],
            run: hart_hash::run,
        },
        Experiment {
            id: "lock-oversub",
            paper: "mpsync",
            reference: "mpsync's own (the case Linux users hit every day)",
            title: "throughput of every lock and peer with 1..8 unpinned threads on the machine's cores (real Linux preemption beyond the core count; --threads sets the counts; --preempt does not apply)",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Threads, K::Trials, K::Scale],
            run: oversub::run,
        },
        Experiment {
            id: "rwlock-oversub",
            paper: "mpsync",
            reference: "mpsync's own (issue 15's targets for the reader-writer locks)",
            title: "throughput of every reader-writer lock and peer at 95% and 50% reads (the BRAVO forms, their base locks and the peers also at 99% and 99.9%) with unpinned threads at 1/2, 1, 2 and 4 per core, and the writers' share of acquisitions against their fair share (--threads sets the counts; --preempt does not apply)",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Threads, K::Trials, K::Scale, K::Seed],
            run: rwlock_oversub::run,
        },
        Experiment {
            id: "barrier-oversub",
            paper: "mpsync",
            reference: "mpsync's own (issue 15's targets for the barriers)",
            title: "episode time of every barrier and peer (std::sync::Barrier, hurdles) with one unpinned thread per participant at 1, 2 and 4 per core (--threads sets the counts; --preempt does not apply)",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Threads, K::Trials, K::Scale, K::Seed],
            run: barrier_oversub::run,
        },
        Experiment {
            id: "barrier-repartition",
            paper: "mpsync",
            reference: "mpsync's own (issue 15's target for the two-level barrier, paper 001 §3.3); the period sweep: paper 001 §4",
            title: "episodes the two-level barrier needs to get back to its steady-state episode time after the emulated scheduler changes the processor count (wks95-barrier's program, MP 2, repartitioning every 250 ms), beside Central-block; then the repartition-period sweep of paper 001 §4 (50 ms to 4 s: excellent at 500 ms, degraded when extremely frequent)",
            default_preempt: Preempt::Emulated,
            uses_preempt: false,
            knobs: &[K::Procs, K::QuantumMs, K::Trials, K::Scale, K::Seed],
            run: barrier_repartition::run,
        },
        Experiment {
            id: "ds-oversub",
            paper: "mpsync",
            reference: "mpsync's own (the issue's speed targets for the structures)",
            title: "throughput of every queue, stack, heap and counter and their peers with unpinned threads, no work between operations (--threads sets the counts; --preempt does not apply)",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Threads, K::Alloc, K::Trials, K::Scale],
            run: ds_oversub::run,
        },
        Experiment {
            id: "real-programs",
            paper: "mpsync",
            reference: "mpsync's own (issue 28's targets for the pthread interposer)",
            title: "unmodified programs (sysbench mutex and threads, stress-ng --mutex, RocksDB db_bench readrandom and readwhilewriting) through libmpsync_pthread.so with bounded-steal, tas-b-np, smart-q, mcs-tp, against glibc alone, at 1x, 2x and 4x the cores (--threads sets the counts; missing programs are installed where root with apt-get, else noted)",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Threads, K::Trials, K::Scale],
            run: real_programs::run,
        },
        Experiment {
            id: "lock-latency",
            paper: "mpsync",
            reference: "mpsync's own",
            title: "uncontended lock+unlock time of every lock and peer, beside a bare swap/store floor",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Trials, K::Scale, K::Seed],
            run: latency::run,
        },
        Experiment {
            id: "sched-overhead",
            paper: "mpsync",
            reference: "mpsync's own (the method of papers 000, 001, 003)",
            title: "the pseudo-scheduler's own CPU use, requested vs actual quanta and off-times, preemption latency",
            default_preempt: Preempt::Emulated,
            uses_preempt: false,
            knobs: &[K::MpFirst, K::ProcsFirst, K::QuantumMs, K::Seed],
            run: sched_overhead::run,
        },
        Experiment {
            id: "lc98-logp",
            paper: "lc98",
            reference: "Lumetta & Culler, IPPS/SPDP 1998, §4.1 Table 1 (papers/004)",
            title: "one client and one server process: L, o_s, o_r, g and the 64-byte round trip per claim algorithm, beside a Unix-domain socket and a pipe (and iceoryx2 publish-subscribe in a build with `--features iceoryx2`), same-core and cross-core",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Trials, K::Scale],
            run: lc98::run,
        },
        Experiment {
            id: "lc98-bandwidth",
            paper: "lc98",
            reference: "Lumetta & Culler, IPPS/SPDP 1998, §4.1 (papers/004)",
            title: "8 KB bulk transfers between two processes, MB/s per claim algorithm, beside an in-process memcpy rate",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Trials, K::Scale],
            run: lc98::run,
        },
        Experiment {
            id: "lc98-stress",
            paper: "lc98",
            reference: "Lumetta & Culler, IPPS/SPDP 1998, §4.2 Table 2 (papers/004)",
            title: "1, 3 and 7 writer processes send 1,000,000 one-word messages in all (x --scale; --quick a tenth) to one receiver, per claim algorithm (--threads sets the writer counts; iceoryx2 publishers to one subscriber too in a build with `--features iceoryx2`)",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Threads, K::Trials, K::Scale],
            run: lc98::run,
        },
        Experiment {
            id: "lc98-apps",
            paper: "lc98",
            reference: "Lumetta & Culler, IPPS/SPDP 1998, §4.3 Table 4 (papers/004)",
            title: "sample sort, connected components (comm- and comp-bound) and 3-D FFT in bulk-synchronous style, one process per rank (--threads sets the process counts; default 2 per core), per claim algorithm, outputs checked",
            default_preempt: Preempt::None,
            uses_preempt: false,
            knobs: &[K::Threads, K::Trials, K::Scale, K::Seed],
            run: lc98_apps::run,
        },
    ]
};

/// Every implemented experiment ([`CATALOG`]).
pub fn catalog() -> Vec<Experiment> {
    CATALOG.to_vec()
}

/// Papers `repro` knows, and which of their experiments exist.
pub const PAPERS: &[(&str, &[&str], &str)] = &[
    (
        "wks94",
        &["003"],
        "Wisniewski, Kontothanassis & Scott 1994 (Smart-Q)",
    ),
    (
        "wks95",
        &["001"],
        "Wisniewski, Kontothanassis & Scott 1995 (scheduler-conscious)",
    ),
    ("ms97", &["000"], "Michael & Scott 1997"),
    ("hart", &["002"], "Hart 2005"),
    ("lc98", &["004"], "Lumetta & Culler 1998"),
];
