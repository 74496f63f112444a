//! `mpsync env`: what this machine's `sched` can use — where "is that thread
//! preempted?" is answered from (the eBPF program, or heartbeats and why),
//! whether the kernel has the rseq time-slice extension (detected only: mpsync
//! does not request it yet), the cgroup CPU quota, cores and affinity — and,
//! with `--measure`, what the answer costs and how fast a preemption is seen.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mpsync::sched::{self, ContextBlock, ThreadState, native};
use mpsync::util::clock::now_ns;
use serde::{Deserialize, Serialize};

/// The rseq time-slice extension's availability as a person reads it (the
/// machine line of `mpsync env`, run.json and the report).
pub fn slice_extension_text(s: &native::SliceExtension) -> String {
    match s {
        native::SliceExtension::Available => {
            "available (detected only: mpsync does not request it yet)".into()
        }
        native::SliceExtension::Unavailable(why) => format!("not available: {why}"),
    }
}

/// What `sched` can use on this machine (also recorded in every run.json).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct SchedEnv {
    /// `ebpf` or `heartbeat`.
    pub preemption_answers: String,
    /// Why not eBPF (when heartbeats answer).
    pub ebpf_off_reason: Option<String>,
    /// How this build got its eBPF program, in words ("built from source with
    /// ...", "committed object ...", "not built: ...").
    pub ebpf_build: String,
    /// Where the program came from: `source` (clang, with this build),
    /// `committed` (the object committed beside the source) or `none`.
    #[serde(default)]
    pub ebpf_origin: String,
    /// rseq time-slice extension availability.
    pub slice_extension: String,
    /// cgroup CPU quota in processors, if limited.
    pub cpu_quota: Option<f64>,
    /// CPUs in the affinity mask.
    pub affinity: Vec<usize>,
    /// Linux release.
    pub kernel: String,
    /// Heartbeat staleness threshold (µs) of the fallback.
    pub heartbeat_threshold_us: f64,
}

impl SchedEnv {
    /// Detects (loads the eBPF program where permitted, once per process).
    pub fn detect() -> Self {
        let (answers, why) = match native::preemption_answers() {
            native::PreemptionAnswers::Ebpf => ("ebpf", None),
            native::PreemptionAnswers::Heartbeat(w) => ("heartbeat", Some(w.clone())),
        };
        Self {
            preemption_answers: answers.into(),
            ebpf_off_reason: why,
            ebpf_build: native::ebpf_build().into(),
            ebpf_origin: match native::ebpf_origin() {
                native::EbpfOrigin::Source => "source",
                native::EbpfOrigin::Committed => "committed",
                native::EbpfOrigin::None => "none",
            }
            .into(),
            slice_extension: slice_extension_text(native::slice_extension()),
            cpu_quota: native::cgroup_cpu_quota(),
            affinity: native::available_cpus().unwrap_or_default(),
            kernel: native::kernel_release(),
            heartbeat_threshold_us: native::heartbeat_threshold().as_secs_f64() * 1e6,
        }
    }

    /// One line for logs: where preemption answers come from.
    pub fn answers_line(&self) -> String {
        match &self.ebpf_off_reason {
            None => format!(
                "kernel (eBPF on tp_btf/sched_switch; program {})",
                self.ebpf_build
            ),
            Some(w) => format!("heartbeats (eBPF off: {w})"),
        }
    }

    /// The human-readable table of `mpsync env`.
    pub fn print(&self) {
        println!("preemption answers : {}", self.answers_line());
        println!("eBPF program       : {}", self.ebpf_build);
        println!("rseq slice ext.    : {}", self.slice_extension);
        println!(
            "cgroup CPU quota   : {}",
            self.cpu_quota.map_or_else(
                || "none (unlimited)".into(),
                |q| format!("{q:.2} processors")
            )
        );
        println!(
            "cores (affinity)   : {} {:?}",
            self.affinity.len(),
            self.affinity
        );
        println!("kernel             : Linux {}", self.kernel);
        println!(
            "heartbeat fallback : stale after {:.0} µs",
            self.heartbeat_threshold_us
        );
    }
}

/// Median of `v` (sorted in place); 0 for none.
fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// ns per call of `f` over `n` calls.
fn time_per_call(n: u64, f: &dyn Fn() -> bool) -> f64 {
    let t0 = Instant::now();
    let mut hits = 0u64;
    for _ in 0..n {
        hits += std::hint::black_box(f()) as u64;
    }
    std::hint::black_box(hits);
    t0.elapsed().as_nanos() as f64 / n as f64
}

/// `sched::is_preempted` with the kernel's answer vs the heartbeat fallback's code
/// (`state() == Preempted || heartbeat stale`) on the same block, interleaved
/// rounds in this process. Returns (eBPF ns, heartbeat ns), medians.
pub fn measure_is_preempted(rounds: usize, calls: u64) -> (Option<f64>, f64) {
    let cb: &'static ContextBlock = sched::current();
    cb.publish_heartbeat();
    let kernel = native::kernel_state(cb).is_some();
    let heartbeat =
        |cb: &ContextBlock| cb.state() == ThreadState::Preempted || sched::heartbeat_stale(cb);
    let (mut e, mut h) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        if kernel {
            e.push(time_per_call(calls, &|| {
                sched::is_preempted(std::hint::black_box(cb))
            }));
        }
        h.push(time_per_call(calls, &|| {
            heartbeat(std::hint::black_box(cb))
        }));
    }
    (kernel.then(|| median(&mut e)), median(&mut h))
}

/// Detection latency: a victim and a CPU-bound competitor pinned to one CPU, an
/// observer on another polling the victim's kernel state; each sample is the time
/// from the victim last seen on its CPU (its last "I am running" store, or the
/// kernel's switch-in if later) to the observer seeing
/// `Preempted`, kept only when the observer itself was neither switched out nor
/// stalled (> 20 µs between polls). Returns the samples (ns) — (victim's last
/// run → seen, the kernel's switch-out time → seen) — or why none.
pub fn measure_detection(duration: Duration) -> Result<Vec<(u64, u64)>, String> {
    if native::kernel_state(sched::current()).is_none() {
        return Err("the kernel does not answer here (heartbeats)".into());
    }
    let cpus = native::available_cpus().map_err(|e| e.to_string())?;
    if cpus.len() < 2 {
        return Err(format!("needs 2 CPUs, have {cpus:?}"));
    }
    let (contended, observer) = (cpus[0], cpus[1]);
    let stop = AtomicBool::new(false);
    let last_run = AtomicU64::new(0);
    let (tx, rx) = std::sync::mpsc::channel::<&'static ContextBlock>();
    std::thread::scope(|s| -> Result<Vec<(u64, u64)>, String> {
        s.spawn(|| {
            let _ = native::pin_current_thread(contended);
            let _ = tx.send(sched::current());
            while !stop.load(Ordering::Relaxed) {
                last_run.store(now_ns(), Ordering::Relaxed);
            }
        });
        s.spawn(|| {
            let _ = native::pin_current_thread(contended);
            let mut x = 0u64;
            while !stop.load(Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        });
        let result = (|| {
            let victim = rx.recv().map_err(|e| e.to_string())?;
            native::pin_current_thread(observer).map_err(|e| e.to_string())?;
            let me = sched::current();
            let off = |v: Option<native::KernelView>| v.map_or(0, |v| v.preemptions + v.blocks);
            let mut samples = Vec::new();
            let mut prev = native::kernel_state(victim);
            let (mut prev_poll, mut mine) = (now_ns(), off(native::kernel_view(me)));
            let end = Instant::now() + duration;
            while Instant::now() < end {
                let st = native::kernel_state(victim);
                let t = now_ns();
                if st != prev {
                    let m = off(native::kernel_view(me));
                    if st == Some(native::KernelState::Preempted)
                        && m == mine
                        && t - prev_poll < 20_000
                    {
                        // Last seen on its CPU: its own last store, or the
                        // kernel's switch-in if later (switched in and out again
                        // before it ran user code).
                        let v = native::kernel_view(victim);
                        let on = last_run
                            .load(Ordering::Relaxed)
                            .max(v.map_or(0, |v| v.on_ns));
                        let off_ns = v.map_or(0, |v| v.off_ns);
                        samples.push((t.saturating_sub(on), t.saturating_sub(off_ns)));
                    }
                    prev = st;
                    mine = m;
                }
                prev_poll = t;
            }
            Ok(samples)
        })();
        stop.store(true, Ordering::Relaxed);
        result
    })
}

/// `mpsync env [--json] [--measure]`.
pub fn main(json: bool, measure: bool) -> anyhow::Result<()> {
    let env = SchedEnv::detect();
    let mut out = serde_json::to_value(&env)?;
    if json {
        if measure {
            out["measurements"] = measurements_json();
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    env.print();
    if measure {
        let m = measurements_json();
        println!("{}", m["summary"].as_str().unwrap_or(""));
    }
    Ok(())
}

fn measurements_json() -> serde_json::Value {
    let (rounds, calls) = (9, 2_000_000);
    let (ebpf, hb) = measure_is_preempted(rounds, calls);
    let mut summary = format!(
        "is_preempted cost (median of {rounds} interleaved rounds of {calls} calls): heartbeat fallback {hb:.2} ns/call"
    );
    if let Some(e) = ebpf {
        summary += &format!(", eBPF {e:.2} ns/call ({:.2}x the heartbeat)", e / hb);
    }
    let det = measure_detection(Duration::from_secs(5));
    let det_json = match &det {
        Ok(pairs) if !pairs.is_empty() => {
            let mut v: Vec<u64> = pairs.iter().map(|p| p.0).collect();
            let mut k: Vec<u64> = pairs.iter().map(|p| p.1).collect();
            v.sort_unstable();
            k.sort_unstable();
            let q = |v: &[u64], p: f64| v[((v.len() - 1) as f64 * p).round() as usize] as f64 / 1e3;
            let within = v.iter().filter(|&&x| x <= 100_000).count();
            summary += &format!(
                "\ndetection latency (victim last seen on its CPU -> observer sees Preempted, {} undisturbed samples in 5 s): p50 {:.1} µs, p90 {:.1} µs, p99 {:.1} µs, max {:.1} µs; {within}/{} within 100 µs\n  of which the kernel's switch-out (off_ns, in the program) -> seen: p50 {:.2} µs, p90 {:.2} µs, max {:.2} µs",
                v.len(),
                q(&v, 0.5),
                q(&v, 0.9),
                q(&v, 0.99),
                q(&v, 1.0),
                v.len(),
                q(&k, 0.5),
                q(&k, 0.9),
                q(&k, 1.0),
            );
            serde_json::json!({"samples": v.len(), "p50_us": q(&v, 0.5), "p90_us": q(&v, 0.9), "p99_us": q(&v, 0.99), "max_us": q(&v, 1.0), "within_100us": within,
                "switch_to_seen_p50_us": q(&k, 0.5), "switch_to_seen_p90_us": q(&k, 0.9), "switch_to_seen_max_us": q(&k, 1.0)})
        }
        Ok(_) => {
            summary += "\ndetection latency: no undisturbed sample in 5 s";
            serde_json::json!({"samples": 0})
        }
        Err(why) => {
            summary += &format!("\ndetection latency: not measured ({why})");
            serde_json::json!({"not_measured": why})
        }
    };
    serde_json::json!({
        "is_preempted_ns": {"ebpf": ebpf, "heartbeat": hb, "rounds": rounds, "calls_per_round": calls},
        "detection": det_json,
        "summary": summary,
    })
}
