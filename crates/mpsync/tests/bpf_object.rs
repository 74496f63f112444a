//! The committed eBPF object (`bpf/sched_switch.bpf.o`, what machines without
//! clang load) is the source's: its manifest's source hash is the hash of
//! `bpf/` as it is now, and its bytes are the ones the manifest names. A change
//! to the program, a header or clang's flags without `testing/bpf_object.py
//! --update` fails here, so `cargo test` catches a stale object; the script's
//! `--check` (in `.ci/run`) also rebuilds it with clang and compares.
//!
//! The hash is computed with `bpf_object.rs`, the code build.rs uses to decide
//! whether the committed object may stand in; the manifest was written by the
//! Python script, so these tests also hold the two definitions of the hash to
//! each other.

#[path = "../bpf_object.rs"]
mod bpf_object;

use std::path::{Path, PathBuf};

use mpsync::sched::native;

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn manifest() -> bpf_object::Manifest {
    bpf_object::Manifest::read(crate_dir()).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn sha256_known_answers() {
    let hex = |m: &[u8]| bpf_object::hex(&bpf_object::sha256(m));
    // FIPS 180-4's examples (NIST's SHA256.pdf, SHA256ShortMsg).
    assert_eq!(
        hex(b""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(
        hex(b"abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(
        hex(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
    );
    assert_eq!(
        hex(b"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"),
        "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"
    );
    assert_eq!(
        hex(&vec![b'a'; 1_000_000]),
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
    );
    // Around the padding's block boundaries (bytes i mod 251; Python's hashlib).
    for (n, want) in [
        (
            55,
            "463eb28e72f82e0a96c0a4cc53690c571281131f672aa229e0d45ae59b598b59",
        ),
        (
            56,
            "da2ae4d6b36748f2a318f23e7ab1dfdf45acdc9d049bd80e59de82a60895f562",
        ),
        (
            63,
            "29af2686fd53374a36b0846694cc342177e428d1647515f078784d69cdb9e488",
        ),
        (
            64,
            "fdeab9acf3710362bd2658cdc9a29e8f9c757fcf9811603a8c447cd1d9151108",
        ),
        (
            65,
            "4bfd2c8b6f1eec7a2afeb48b934ee4b2694182027e6d0fc075074f2fabb31781",
        ),
        (
            1000,
            "4e4c294b331f7a2099a379bec34b9f9fc03dc46ab465d998f4d683da53487e6d",
        ),
    ] {
        let m: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        assert_eq!(hex(&m), want, "{n} bytes");
    }
}

#[test]
fn the_committed_object_is_built_from_the_source_as_it_is() {
    let m = manifest();
    let now = bpf_object::source_sha256(crate_dir()).unwrap();
    assert_eq!(
        m.source_sha256,
        now,
        "{} is stale: its manifest says it was built from source sha256 {}, but {:?} hash to {} now; \
         run testing/bpf_object.py --update (needs clang) and commit the object with the source",
        bpf_object::OBJECT,
        m.source_sha256,
        bpf_object::inputs(crate_dir()).unwrap(),
        now
    );
    assert_eq!(
        m.inputs,
        bpf_object::inputs(crate_dir()).unwrap(),
        "the manifest's inputs"
    );
}

#[test]
fn the_committed_object_is_the_one_its_manifest_names() {
    let m = manifest();
    let bytes = std::fs::read(crate_dir().join(bpf_object::OBJECT)).unwrap();
    assert_eq!(
        bpf_object::hex(&bpf_object::sha256(&bytes)),
        m.object_sha256,
        "{} is not the object {} names (replaced without testing/bpf_object.py --update?)",
        bpf_object::OBJECT,
        bpf_object::MANIFEST
    );
    // A BPF ELF object: 64-bit, little-endian, e_machine EM_BPF (247).
    assert_eq!(&bytes[..6], b"\x7fELF\x02\x01");
    assert_eq!(u16::from_le_bytes([bytes[18], bytes[19]]), 247);
}

/// Where the library took its program from agrees with what it says, and a
/// committed object is reported with the manifest's hash and clang.
#[test]
fn the_build_reports_where_its_program_came_from() {
    let build = native::ebpf_build();
    println!("eBPF program: {build} ({:?})", native::ebpf_origin());
    // `.ci/run` builds without clang and says what it expects the build to
    // have taken: the committed object, or (MPSYNC_BPF_OBJECT=none) nothing.
    if let Ok(want) = std::env::var("MPSYNC_EXPECT_BPF_ORIGIN") {
        let got = match native::ebpf_origin() {
            native::EbpfOrigin::Source => "source",
            native::EbpfOrigin::Committed => "committed",
            native::EbpfOrigin::None => "none",
        };
        assert_eq!(
            got, want,
            "MPSYNC_EXPECT_BPF_ORIGIN={want}, but the build took {got}: {build}"
        );
    }
    match native::ebpf_origin() {
        native::EbpfOrigin::Source => {
            assert!(build.starts_with("built from source with "), "{build}")
        }
        native::EbpfOrigin::Committed => {
            let m = manifest();
            let want = format!(
                "committed object {} (built from source sha256 {} with {}); not rebuilt here: ",
                bpf_object::OBJECT,
                &m.source_sha256[..16],
                m.clang
            );
            assert!(
                build.starts_with(&want),
                "{build}\n  expected it to start with {want}"
            );
        }
        native::EbpfOrigin::None => assert!(build.starts_with("not built: "), "{build}"),
    }
}

/// A scratch copy of `bpf/` (the hashed files and a stray one), for the tests
/// of what the hash covers.
fn scratch_copy(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mpsync-bpf-object-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("bpf")).unwrap();
    for name in bpf_object::inputs(crate_dir()).unwrap() {
        std::fs::copy(
            crate_dir().join("bpf").join(&name),
            dir.join("bpf").join(&name),
        )
        .unwrap();
    }
    dir
}

#[test]
fn the_source_hash_covers_the_program_its_headers_and_the_flags() {
    let dir = scratch_copy("covers");
    let hash = || bpf_object::source_sha256(&dir).unwrap();
    let base = hash();
    assert_eq!(
        base,
        bpf_object::source_sha256(crate_dir()).unwrap(),
        "a copy of bpf/ hashes as bpf/ does"
    );
    // A file that is not an input changes nothing.
    std::fs::write(dir.join("bpf/NOTES.txt"), "not an input").unwrap();
    assert_eq!(hash(), base);
    // A comment in the program does (its line numbers are in the object's BTF).
    let src = dir.join(bpf_object::SOURCE);
    let text = std::fs::read_to_string(&src).unwrap();
    std::fs::write(&src, format!("{text}// one more line\n")).unwrap();
    let edited = hash();
    assert_ne!(edited, base);
    std::fs::write(&src, &text).unwrap();
    assert_eq!(hash(), base);
    // So does a new header, and a flag.
    std::fs::write(dir.join("bpf/extra.h"), "#define X 1\n").unwrap();
    assert_ne!(hash(), base);
    std::fs::remove_file(dir.join("bpf/extra.h")).unwrap();
    let flags = dir.join(bpf_object::FLAGS);
    let f = std::fs::read_to_string(&flags).unwrap();
    std::fs::write(&flags, f.replace("-O2", "-O1")).unwrap();
    assert_ne!(hash(), base);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The flags the committed object's properties rest on: BTF and its CO-RE
/// relocations come with `-g`; `-nostdinc` keeps every input in `bpf/`;
/// `-fdebug-compilation-dir=.` keeps the checkout's path out of the bytes (so
/// `testing/bpf_object.py --check` can compare them).
#[test]
fn the_flags_keep_the_object_co_re_and_reproducible() {
    let flags = bpf_object::flags(crate_dir()).unwrap();
    for f in [
        "-target",
        "bpf",
        "-g",
        "-nostdinc",
        "-fdebug-compilation-dir=.",
    ] {
        assert!(
            flags.iter().any(|g| g == f),
            "{} lacks {f}: {flags:?}",
            bpf_object::FLAGS
        );
    }
    let object = std::fs::read(crate_dir().join(bpf_object::OBJECT)).unwrap();
    let path = crate_dir().to_string_lossy().into_owned();
    assert!(
        !object.windows(path.len()).any(|w| w == path.as_bytes()),
        "{} names the checkout's path {path}",
        bpf_object::OBJECT
    );
}
