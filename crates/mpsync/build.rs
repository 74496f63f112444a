//! Provides the eBPF half of `sched` (bpf/sched_switch.bpf.c) to `sched::ebpf`,
//! as `$OUT_DIR/sched_switch.bpf.o`, one of three ways:
//!
//! 1. **Built from source** with clang for the BPF target, with the flags in
//!    `bpf/sched_switch.bpf.flags`, whenever clang (with its BPF back end) is
//!    there: developers always run the source they edit. Where the committed
//!    object no longer matches that source, a cargo warning says so.
//! 2. **The committed object** `bpf/sched_switch.bpf.o` where clang is not
//!    there or `MPSYNC_CLANG=none`: the same CO-RE program, built by
//!    `testing/bpf_object.py --update`, used only if its manifest
//!    (`bpf/sched_switch.bpf.o.manifest`) says it was built from the source as
//!    it is now (the source hash, see `bpf_object.rs`) and the object's bytes
//!    are the ones the manifest names.
//! 3. **None**: not Linux; or no clang and `MPSYNC_BPF_OBJECT=none`, or a
//!    committed object that is stale or missing. mpsync still builds; the
//!    object is empty and `sched::native::preemption_answers()` says "not built"
//!    and why: the heartbeats answer.
//!
//! `sched::native::ebpf_origin()` says which (`MPSYNC_BPF_ORIGIN`), and
//! `sched::native::ebpf_build()` says it in words (`MPSYNC_BPF_BUILD`): what
//! `mpsync env` prints.
//!
//! `MPSYNC_CLANG` names the compiler (default `clang`; `none` does not use one).
//! `MPSYNC_BPF_OBJECT` is `committed` (the default: the committed object where
//! clang does not build the program) or `none` (no program then: with
//! `MPSYNC_CLANG=none` it builds mpsync as it was built before there was a
//! committed object, to test the heartbeat fallback).
//!
//! Installing clang later does not re-run this script by itself: rebuild after
//! `cargo clean -p mpsync`.
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "bpf_object.rs"]
#[allow(
    dead_code,
    reason = "tests/bpf_object.rs uses what build.rs does not (the manifest's inputs)"
)]
mod bpf_object;

fn main() {
    // The whole directory: a new header is an input too.
    println!("cargo:rerun-if-changed=bpf");
    println!("cargo:rerun-if-env-changed=MPSYNC_CLANG");
    println!("cargo:rerun-if-env-changed=MPSYNC_BPF_OBJECT");
    let dir = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let obj = out.join("sched_switch.bpf.o");
    let use_committed = match std::env::var("MPSYNC_BPF_OBJECT").as_deref() {
        Err(_) | Ok("") | Ok("committed") => true,
        Ok("none") => false,
        Ok(other) => panic!(
            "MPSYNC_BPF_OBJECT={other}: expected 'committed' (the default: use {} where clang does not build the program) or 'none' (no program then)",
            bpf_object::OBJECT
        ),
    };
    let (origin, line) = if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        ("none", "not built: eBPF is Linux-only".to_string())
    } else {
        match build(&dir, &obj) {
            Ok(version) => {
                warn_if_stale(&dir);
                ("source", format!("built from source with {version}"))
            }
            Err(Built::Broken(why)) => {
                // clang is there and refused the source: a build error, as a
                // Rust one would be.
                panic!(
                    "{why} (MPSYNC_CLANG=none builds mpsync with the committed object instead, if it matches the source)"
                )
            }
            Err(Built::Not(why)) if !use_committed => (
                "none",
                format!("not built: {why}, and MPSYNC_BPF_OBJECT=none"),
            ),
            Err(Built::Not(why)) => match committed(&dir, &obj) {
                Ok(from) => (
                    "committed",
                    format!("committed object {from}; not rebuilt here: {why}"),
                ),
                Err(not) => ("none", format!("not built: {why}, and {not}")),
            },
        }
    };
    if origin == "none" {
        // An empty object: the loader reports "not built" with the line's why.
        std::fs::write(&obj, []).expect("cannot write into OUT_DIR");
    }
    println!("cargo:rustc-env=MPSYNC_BPF_ORIGIN={origin}");
    println!("cargo:rustc-env=MPSYNC_BPF_BUILD={line}");
}

/// Why clang did not make the program.
enum Built {
    /// Nothing to build it with (or asked not to): the committed object may
    /// stand in.
    Not(String),
    /// The compiler refused the source.
    Broken(String),
}

fn build(dir: &Path, obj: &Path) -> Result<String, Built> {
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
                "no clang at build time ('{clang}' not found; install clang, or set MPSYNC_CLANG, and rebuild after cargo clean -p mpsync)"
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
    let flags = bpf_object::flags(dir).map_err(Built::Broken)?;
    // From the crate's directory, with the source named relative to it, as
    // testing/bpf_object.py does: the same clang then makes the same bytes.
    let o = Command::new(&clang)
        .current_dir(dir)
        .args(&flags)
        .arg("-c")
        .arg(bpf_object::SOURCE)
        .arg("-o")
        .arg(obj)
        .output()
        .map_err(|e| Built::Not(format!("running {clang} failed: {e}")))?;
    if !o.status.success() {
        return Err(Built::Broken(format!(
            "{clang} failed on {}:\n{}",
            bpf_object::SOURCE,
            String::from_utf8_lossy(&o.stderr)
        )));
    }
    Ok(version)
}

/// Copies the committed object to `obj` if its manifest says it was built from
/// the source as it is now, and its bytes are the ones the manifest names.
/// Ok: where it came from, in words; Err: why it cannot stand in.
fn committed(dir: &Path, obj: &Path) -> Result<String, String> {
    let cannot = |e: String| format!("the committed object cannot be used ({e})");
    let m = bpf_object::Manifest::read(dir).map_err(cannot)?;
    let now = bpf_object::source_sha256(dir).map_err(cannot)?;
    if now != m.source_sha256 {
        return Err(format!(
            "the committed object is stale: built from source sha256 {}, the source's is {} now \
             (testing/bpf_object.py --update rebuilds it where clang is)",
            &m.source_sha256[..16],
            &now[..16]
        ));
    }
    let bytes = std::fs::read(dir.join(bpf_object::OBJECT))
        .map_err(|e| cannot(format!("{}: {e}", bpf_object::OBJECT)))?;
    let sha = bpf_object::hex(&bpf_object::sha256(&bytes));
    if sha != m.object_sha256 {
        return Err(cannot(format!(
            "its sha256 is {}, its manifest says {}",
            &sha[..16],
            &m.object_sha256[..16]
        )));
    }
    std::fs::write(obj, &bytes).expect("cannot write into OUT_DIR");
    Ok(format!(
        "{} (built from source sha256 {} with {})",
        bpf_object::OBJECT,
        &m.source_sha256[..16],
        m.clang
    ))
}

/// Built from source: says so where the committed object is not this source's
/// (tests/bpf_object.rs fails then too).
fn warn_if_stale(dir: &Path) {
    let stale = match (
        bpf_object::Manifest::read(dir),
        bpf_object::source_sha256(dir),
    ) {
        (Ok(m), Ok(now)) if m.source_sha256 == now => return,
        (Ok(m), Ok(now)) => format!(
            "built from source sha256 {}, not {}",
            &m.source_sha256[..16],
            &now[..16]
        ),
        (Err(e), _) | (_, Err(e)) => e,
    };
    println!(
        "cargo:warning={} is not this source's ({stale}): machines without clang get no eBPF program; run testing/bpf_object.py --update",
        bpf_object::OBJECT
    );
}
