//! The committed build of the eBPF program, shared by `build.rs` (which uses
//! `bpf/sched_switch.bpf.o` where clang does not build the program) and
//! `tests/bpf_object.rs` (which fails when that object is stale).
//! `testing/bpf_object.py` computes the same source hash in Python, writes the
//! object and its manifest (`--update`) and checks them against a rebuild
//! (`--check`).
//!
//! **The source hash** covers everything the object is built from: every file
//! in `bpf/` whose name ends in `.c`, `.h` or `.flags` (the program, any header
//! it includes — `-nostdinc` keeps clang from reading any outside `bpf/` —
//! and clang's flags), in byte order of their names. It is the SHA-256 of
//!
//! ```text
//! "mpsync-bpf-source-v1\n"
//! then for each file: NAME " " LENGTH-IN-DECIMAL "\n" CONTENTS
//! ```
//!
//! **The manifest** (`bpf/sched_switch.bpf.o.manifest`) is lines of
//! `key = value` (`#` starts a comment line): `source-sha256`, `object-sha256`
//! (of the object's bytes), `clang` (the first line of `clang --version` that
//! built it) and `inputs` (the hashed files' names, space-separated).
//!
//! SHA-256 is written out here (FIPS 180-4) because `build.rs` must check the
//! committed object on a machine that has neither clang nor anything else to
//! hash with, and no crate in the lock file provides it.

use std::path::Path;

/// The program's source, relative to the crate's directory.
pub const SOURCE: &str = "bpf/sched_switch.bpf.c";
/// clang's flags for it (one or more a line; `#` starts a comment line).
pub const FLAGS: &str = "bpf/sched_switch.bpf.flags";
/// The committed object.
pub const OBJECT: &str = "bpf/sched_switch.bpf.o";
/// Its manifest.
pub const MANIFEST: &str = "bpf/sched_switch.bpf.o.manifest";

/// The files the source hash covers: names in `bpf/`, sorted.
pub fn inputs(crate_dir: &Path) -> Result<Vec<String>, String> {
    let dir = crate_dir.join("bpf");
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue; // not UTF-8: not one of ours (the Python side skips it too)
        };
        if [".c", ".h", ".flags"].iter().any(|x| name.ends_with(x)) {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// The source hash of `bpf/` as it is now (hex).
pub fn source_sha256(crate_dir: &Path) -> Result<String, String> {
    let mut stream = b"mpsync-bpf-source-v1\n".to_vec();
    for name in inputs(crate_dir)? {
        let path = crate_dir.join("bpf").join(&name);
        let data = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        stream.extend_from_slice(format!("{name} {}\n", data.len()).as_bytes());
        stream.extend_from_slice(&data);
    }
    Ok(hex(&sha256(&stream)))
}

/// clang's flags from [`FLAGS`], in order.
pub fn flags(crate_dir: &Path) -> Result<Vec<String>, String> {
    let path = crate_dir.join(FLAGS);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .flat_map(str::split_whitespace)
        .map(String::from)
        .collect())
}

/// What [`MANIFEST`] says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The source hash the object was built from.
    pub source_sha256: String,
    /// The hash of the object's bytes.
    pub object_sha256: String,
    /// The clang that built it (`clang --version`, first line).
    pub clang: String,
    /// The files hashed.
    pub inputs: Vec<String>,
}

impl Manifest {
    /// Reads the crate's manifest; says what is missing or malformed.
    pub fn read(crate_dir: &Path) -> Result<Self, String> {
        let path = crate_dir.join(MANIFEST);
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{MANIFEST}: {e}"))?;
        let field = |key: &str| -> Result<String, String> {
            text.lines()
                .filter(|l| !l.trim_start().starts_with('#'))
                .filter_map(|l| l.split_once('='))
                .find(|(k, _)| k.trim() == key)
                .map(|(_, v)| v.trim().to_string())
                .ok_or_else(|| format!("{MANIFEST} has no '{key} = ...' line"))
        };
        let hash = |key: &str| -> Result<String, String> {
            let v = field(key)?;
            if v.len() == 64
                && v.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            {
                Ok(v)
            } else {
                Err(format!(
                    "{MANIFEST}: {key} = {v:?} is not a SHA-256 in lower-case hex"
                ))
            }
        };
        Ok(Self {
            source_sha256: hash("source-sha256")?,
            object_sha256: hash("object-sha256")?,
            clang: field("clang")?,
            inputs: field("inputs")?
                .split_whitespace()
                .map(String::from)
                .collect(),
        })
    }
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The round constants: the first 32 bits of the fractional parts of the cube
/// roots of the first 64 primes (FIPS 180-4 §4.2.2).
const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

/// SHA-256 of `data` (FIPS 180-4 §6.2).
pub fn sha256(data: &[u8]) -> [u8; 32] {
    // §5.3.3: the first 32 bits of the fractional parts of the square roots of
    // the first 8 primes.
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    // §5.1.1: a 1 bit, zeros to 56 mod 64 bytes, the length in bits (64-bit
    // big-endian).
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64).wrapping_mul(8)).to_be_bytes());
    for block in msg.chunks_exact(64) {
        let mut w = [0u32; 64];
        for (t, word) in block.chunks_exact(4).enumerate() {
            w[t] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for t in 16..64 {
            let s0 = w[t - 15].rotate_right(7) ^ w[t - 15].rotate_right(18) ^ (w[t - 15] >> 3);
            let s1 = w[t - 2].rotate_right(17) ^ w[t - 2].rotate_right(19) ^ (w[t - 2] >> 10);
            w[t] = w[t - 16]
                .wrapping_add(s0)
                .wrapping_add(w[t - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for t in 0..64 {
            let big_s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(big_s1)
                .wrapping_add(ch)
                .wrapping_add(K[t])
                .wrapping_add(w[t]);
            let big_s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = big_s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 32];
    for (chunk, x) in out.chunks_exact_mut(4).zip(h) {
        chunk.copy_from_slice(&x.to_be_bytes());
    }
    out
}
