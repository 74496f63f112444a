//! Real-OS multiprogramming (`--preempt os`): CPU-bound competitor *processes*
//! pinned beside our workers, so that Linux itself preempts them — the situation
//! the papers could only emulate.
//!
//! Competitors are always cleaned up: killed and reaped on drop (also on an error
//! path), killed by the kernel if the harness dies (`PR_SET_PDEATHSIG`), and killed
//! by a SIGINT/SIGTERM handler on Ctrl-C.

use std::io;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};

/// Pids of live competitors, readable from the signal handler (atomics only).
static PIDS: [AtomicI32; 512] = [const { AtomicI32::new(0) }; 512];

/// How many competitors go on each CPU for multiprogramming level `mp`: m−1 on
/// every CPU, plus one more on the first `round(frac(m)·P)` CPUs (as the emulated
/// scheduler splits fractional levels).
pub fn plan_for_mp(cpus: &[usize], mp: f64) -> Vec<(usize, u32)> {
    let base = mp.floor().max(1.0) as u32 - 1;
    let extra = ((mp - mp.floor()) * cpus.len() as f64).round() as usize;
    cpus.iter()
        .enumerate()
        .map(|(i, &c)| (c, base + u32::from(i < extra)))
        .collect()
}

/// CPU-bound competitor processes; killed and reaped on drop.
#[derive(Debug)]
pub struct Competitors {
    children: Vec<Child>,
}

extern "C" fn kill_competitors_and_exit(sig: libc::c_int) {
    for slot in &PIDS {
        // Relaxed: a best-effort sweep from a signal handler.
        let pid = slot.load(Ordering::Relaxed);
        if pid > 0 {
            // SAFETY: kill is async-signal-safe; `pid` is a child we started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    // SAFETY: signal and raise are async-signal-safe; re-raising with the default
    // action ends the process the way the user asked.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

fn install_cleanup_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: the handler only touches atomics and calls async-signal-safe
            // functions.
            unsafe {
                libc::signal(
                    sig,
                    kill_competitors_and_exit as extern "C" fn(libc::c_int) as usize,
                )
            };
        }
    });
}

fn register(pid: i32) -> bool {
    PIDS.iter().any(|s| {
        s.compare_exchange(0, pid, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    })
}

fn unregister(pid: i32) {
    for s in &PIDS {
        let _ = s.compare_exchange(pid, 0, Ordering::Relaxed, Ordering::Relaxed);
    }
}

impl Competitors {
    /// Starts `count` competitors pinned to `cpu` for each `(cpu, count)`, running
    /// this executable's hidden `__compete --cpu N` subcommand.
    pub fn spawn(plan: &[(usize, u32)]) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("cannot find the mpsync executable")?;
        Self::spawn_with(
            &exe,
            |cpu| vec!["__compete".into(), "--cpu".into(), cpu.to_string()],
            plan,
        )
    }

    /// As [`spawn`](Self::spawn), with any program (tests use a shell busy loop).
    pub fn spawn_with(
        program: &Path,
        args_for_cpu: impl Fn(usize) -> Vec<String>,
        plan: &[(usize, u32)],
    ) -> anyhow::Result<Self> {
        install_cleanup_handler();
        let mut me = Self {
            children: Vec::new(),
        };
        for &(cpu, n) in plan {
            for _ in 0..n {
                let mut cmd = Command::new(program);
                cmd.args(args_for_cpu(cpu))
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                // SAFETY: between fork and exec the closure only calls prctl, which is
                // async-signal-safe, and allocates nothing.
                unsafe {
                    use std::os::unix::process::CommandExt;
                    cmd.pre_exec(|| {
                        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                            return Err(io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
                let child = cmd
                    .spawn()
                    .with_context(|| format!("cannot start competitor {}", program.display()))?;
                if !register(child.id() as i32) {
                    me.children.push(child);
                    bail!("too many competitor processes (at most {})", PIDS.len());
                }
                me.children.push(child);
            }
        }
        // They must be running, not dead on arrival.
        std::thread::sleep(Duration::from_millis(20));
        for c in &mut me.children {
            if let Some(status) = c.try_wait()? {
                bail!("a competitor process exited at once ({status}); is the executable intact?");
            }
        }
        Ok(me)
    }

    /// Pids of the competitors.
    #[cfg(test)]
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }
}

impl Drop for Competitors {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
            unregister(c.id() as i32);
        }
    }
}

/// Body of the hidden `mpsync __compete --cpu N` subcommand: pin to the CPU, then
/// compute until killed (or until the parent dies).
pub fn competitor_main(cpu: usize) -> ! {
    if let Err(e) = mpsync::sched::native::pin_current_thread(cpu) {
        eprintln!("error: competitor cannot pin to cpu {cpu}: {e}");
        std::process::exit(2);
    }
    let mut x = 0u64;
    loop {
        for i in 0..1_000_000u64 {
            x = std::hint::black_box(x.wrapping_add(i));
        }
        // SAFETY: getppid has no preconditions. Parent gone (reparented to init):
        // PDEATHSIG should have killed us; leave anyway.
        if unsafe { libc::getppid() } == 1 {
            std::process::exit(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_split_fractional_levels() {
        assert_eq!(plan_for_mp(&[0, 1], 1.0), [(0, 0), (1, 0)]);
        assert_eq!(plan_for_mp(&[0, 1], 1.5), [(0, 1), (1, 0)]);
        assert_eq!(plan_for_mp(&[0, 1], 3.0), [(0, 2), (1, 2)]);
        assert_eq!(
            plan_for_mp(&[4, 5, 6, 7], 2.25),
            [(4, 2), (5, 1), (6, 1), (7, 1)]
        );
    }

    fn alive(pid: u32) -> bool {
        // SAFETY: signal 0 only checks for existence.
        unsafe { libc::kill(pid as i32, 0) == 0 }
    }

    fn utime(pid: u32) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let after = stat.rsplit(')').next().unwrap_or("");
        after
            .split_whitespace()
            .nth(11)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    #[test]
    fn competitors_run_and_are_reaped_on_drop() {
        let c = Competitors::spawn_with(
            Path::new("/bin/sh"),
            |_| vec!["-c".into(), "while :; do :; done".into()],
            &[(0, 2)],
        )
        .unwrap();
        let pids = c.pids();
        assert_eq!(pids.len(), 2);
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            pids.iter().all(|&p| alive(p) && utime(p) > 0),
            "competitors are not computing"
        );
        drop(c);
        assert!(
            pids.iter().all(|&p| !alive(p)),
            "competitors outlived their handle"
        );
    }

    #[test]
    fn a_dead_on_arrival_competitor_is_an_error() {
        let e =
            Competitors::spawn_with(Path::new("/bin/false"), |_| vec![], &[(0, 1)]).unwrap_err();
        assert!(e.to_string().contains("exited at once"), "{e}");
    }
}
