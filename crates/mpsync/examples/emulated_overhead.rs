//! What the pseudo-scheduler costs and how faithfully it keeps its schedule:
//! P virtual processors at MP level m, quantum q, one busy worker per vproc.
//!
//! `cargo run --release -p mpsync --example emulated_overhead [P m q_ms secs]`
//! (defaults: 2 2 10 3).

use std::time::Duration;

use mpsync::sched::emulated::{Emulated, EmulatedConfig, SchedError};
use mpsync::util::busy::BusyWork;
use mpsync::util::clock::now_ns;

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), SchedError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: f64| -> f64 {
        args.get(i).map_or(d, |s| {
            s.parse()
                .unwrap_or_else(|_| panic!("argument {}: {s:?} is not a number", i + 1))
        })
    };
    let (procs, mp, q_ms, secs) = (arg(0, 2.0) as u32, arg(1, 2.0), arg(2, 10.0), arg(3, 3.0));
    let cfg = EmulatedConfig::new(procs, mp)?
        .quantum(Duration::from_secs_f64(q_ms / 1e3))
        .seed(1);
    let emu = Emulated::start(cfg)?;
    let deadline = now_ns() + (secs * 1e9) as u64;
    std::thread::scope(|s| {
        for v in 0..procs {
            let emu = &emu;
            s.spawn(move || {
                let _a = emu.attach(v).expect("attach");
                while now_ns() < deadline {
                    BusyWork::global().run_ns(100_000);
                }
            });
        }
    });
    let st = emu.stop();
    let ratio = |v: &[mpsync::sched::emulated::Sample]| {
        median(
            v.iter()
                .map(|s| s.actual_ns as f64 / s.requested_ns.max(1) as f64)
                .collect(),
        )
    };
    let lat_us = median(
        st.preempt_latency_ns
            .iter()
            .map(|&n| n as f64 / 1e3)
            .collect(),
    );
    println!(
        "P={procs} m={mp} q={q_ms} ms, {secs} s, SCHED_FIFO: {}",
        st.realtime
    );
    println!(
        "scheduler CPU: {:.2}% of one core ({} ns CPU over {} ns wall)",
        100.0 * st.sched_cpu_ns as f64 / st.wall_ns.max(1) as f64,
        st.sched_cpu_ns,
        st.wall_ns
    );
    println!(
        "median actual/requested quantum: {:.3} ({} samples)",
        ratio(&st.quanta),
        st.quanta.len()
    );
    println!(
        "median actual/requested off-time: {:.3} ({} samples)",
        ratio(&st.off_times),
        st.off_times.len()
    );
    println!(
        "median preemption latency (decision -> handler waiting): {lat_us:.1} us ({} samples)",
        st.preempt_latency_ns.len()
    );
    println!(
        "preemptions {}, warnings {}, forced {}, voluntary yields {}",
        st.preemptions, st.warnings, st.forced_preemptions, st.voluntary_yields
    );
    Ok(())
}
