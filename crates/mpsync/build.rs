//! Builds the eBPF half of `sched` (bpf/sched_switch.bpf.c) with clang for the BPF
//! target, when clang is there. Without clang mpsync still builds: the object is
//! empty and `sched::native::preemption_answers()` says "not built" and why.
//!
//! `MPSYNC_CLANG` names the compiler (default `clang`); `MPSYNC_CLANG=none` skips
//! the eBPF build (as on a machine without clang).
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=bpf/sched_switch.bpf.c");
    println!("cargo:rerun-if-env-changed=MPSYNC_CLANG");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let obj = out.join("sched_switch.bpf.o");
    let status = match build(&obj) {
        Err(Built::Broken(why)) => {
            // clang is there and refused the source: a build error, as a Rust
            // one would be (MPSYNC_CLANG=none builds without the program).
            panic!("{why} (MPSYNC_CLANG=none builds mpsync without the eBPF program)")
        }
        Err(Built::Not(why)) => {
            // An empty object: the loader reports "not built" with `why`.
            std::fs::write(&obj, []).expect("cannot write into OUT_DIR");
            Err(why)
        }
        Ok(v) => Ok(v),
    };
    let line = match status {
        Ok(v) => format!("built with {v}"),
        Err(why) => format!("not built: {why}"),
    };
    println!("cargo:rustc-env=MPSYNC_BPF_BUILD={line}");
}

/// Why there is no program.
enum Built {
    /// Nothing to build it with (or asked not to): mpsync builds without it.
    Not(String),
    /// The compiler refused the source.
    Broken(String),
}

fn build(obj: &std::path::Path) -> Result<String, Built> {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return Err(Built::Not("eBPF is Linux-only".into()));
    }
    let clang = std::env::var("MPSYNC_CLANG").unwrap_or_else(|_| "clang".into());
    if clang.is_empty() || clang == "none" {
        return Err(Built::Not("MPSYNC_CLANG=none at build time".into()));
    }
    let version = match Command::new(&clang).arg("--version").output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .next()
            .unwrap_or("clang")
            .trim()
            .to_string(),
        _ => {
            return Err(Built::Not(format!(
                "no clang at build time ('{clang}' not found; install clang and rebuild, or set MPSYNC_CLANG)"
            )));
        }
    };
    // A clang built without the BPF back end cannot build it either.
    let targets = Command::new(&clang)
        .args(["-print-targets"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    if !targets.contains("bpf") {
        return Err(Built::Not(format!(
            "{version} has no BPF target ('{clang} -print-targets' lists no bpf)"
        )));
    }
    let o = Command::new(&clang)
        // -mcpu=v3: the atomic exchange and compare-and-swap the counts are
        // kept with (Linux 5.12+; older kernels refuse the program, and the
        // heartbeats answer there).
        .args([
            "-target", "bpf", "-mcpu=v3", "-O2", "-g", "-Wall", "-Werror", "-c",
        ])
        .arg("bpf/sched_switch.bpf.c")
        .arg("-o")
        .arg(obj)
        .output()
        .map_err(|e| Built::Not(format!("running {clang} failed: {e}")))?;
    if !o.status.success() {
        return Err(Built::Broken(format!(
            "{clang} failed on bpf/sched_switch.bpf.c:\n{}",
            String::from_utf8_lossy(&o.stderr)
        )));
    }
    Ok(version)
}
