#!/usr/bin/env python3
"""The committed eBPF object (crates/mpsync/bpf/sched_switch.bpf.o): check it, or rebuild it.

Machines without clang build mpsync with this object instead of building the program
from bpf/sched_switch.bpf.c (crates/mpsync/build.rs). Its manifest,
sched_switch.bpf.o.manifest, records the source hash it was built from (every .c, .h
and .flags file in bpf/: the program, its headers, clang's flags; the definition is in
crates/mpsync/bpf_object.rs, and the two must agree), the hash of its bytes and the
clang that built it.

    testing/bpf_object.py --check    # fails if the object is not the source's
    testing/bpf_object.py --update   # rebuilds object and manifest (needs clang)

--check fails when
  - the source hash differs from the manifest's (the source, a header or the flags
    changed since the object was built: the object is stale);
  - the object's bytes are not the ones the manifest names;
  - the object is not a CO-RE BPF object (no BTF, no CO-RE relocations, no tp_btf
    programs), which would not load on another kernel, or its programs and maps are
    not the ones the source declares with SEC() (checked without clang too);
  - clang is here (MPSYNC_CLANG, default clang) and its build of the source differs
    from the object: byte for byte when it is the clang the manifest names (the flags
    make the build reproducible: it does not depend on where the checkout is);
    with another clang, whose bytes may differ, in what the loader sees: the programs
    (sections and functions), the maps, the global variables, the license, and which
    programs carry CO-RE relocations.
Without clang only the hashes and the object's own structure are checked (said so).

Exit status: 0 all checks passed, 1 a check failed, 2 could not run (no clang for
--update, a missing file).
"""

import argparse
import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

CRATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "mpsync")
CRATE = os.path.normpath(CRATE)
SOURCE = "bpf/sched_switch.bpf.c"
FLAGS = "bpf/sched_switch.bpf.flags"
OBJECT = "bpf/sched_switch.bpf.o"
MANIFEST = "bpf/sched_switch.bpf.o.manifest"


class Unrunnable(Exception):
    """Something needed is not there (exit status 2)."""


# ---- the source hash (as crates/mpsync/bpf_object.rs) ----

def inputs():
    """The hashed files: names in bpf/ ending in .c, .h or .flags, sorted."""
    names = []
    for name in os.listdir(os.path.join(CRATE, "bpf")):
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            continue  # not UTF-8: not one of ours (bpf_object.rs skips it too)
        if name.endswith((".c", ".h", ".flags")):
            names.append(name)
    return sorted(names)


def source_sha256():
    h = hashlib.sha256(b"mpsync-bpf-source-v1\n")
    for name in inputs():
        with open(os.path.join(CRATE, "bpf", name), "rb") as f:
            data = f.read()
        h.update(f"{name} {len(data)}\n".encode())
        h.update(data)
    return h.hexdigest()


def flags():
    with open(os.path.join(CRATE, FLAGS)) as f:
        return [w for line in f if line.strip() and not line.strip().startswith("#")
                for w in line.split()]


def read_manifest():
    path = os.path.join(CRATE, MANIFEST)
    if not os.path.exists(path):
        raise Unrunnable(f"{MANIFEST} is missing (testing/bpf_object.py --update writes it)")
    fields = {}
    with open(path) as f:
        for line in f:
            if line.lstrip().startswith("#") or "=" not in line:
                continue
            k, v = line.split("=", 1)
            fields[k.strip()] = v.strip()
    for k in ("source-sha256", "object-sha256", "clang", "inputs"):
        if k not in fields:
            raise Unrunnable(f"{MANIFEST} has no '{k} = ...' line")
    return fields


def write_manifest(source, obj, clang):
    text = (
        "# The committed build of sched_switch.bpf.c (sched_switch.bpf.o), used by\n"
        "# crates/mpsync/build.rs where clang does not build the program. Written by\n"
        "# testing/bpf_object.py --update; checked by testing/bpf_object.py --check and\n"
        "# crates/mpsync/tests/bpf_object.rs. source-sha256 covers the inputs (see\n"
        "# crates/mpsync/bpf_object.rs), object-sha256 the object's bytes.\n"
        f"source-sha256 = {source}\n"
        f"object-sha256 = {obj}\n"
        f"clang = {clang}\n"
        f"inputs = {' '.join(inputs())}\n"
    )
    tmp = os.path.join(CRATE, MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(CRATE, MANIFEST))


# ---- clang ----

def find_clang():
    """(command, first line of --version), or (None, why not)."""
    clang = os.environ.get("MPSYNC_CLANG", "clang")
    if clang in ("", "none"):
        return None, "MPSYNC_CLANG=none"
    try:
        v = subprocess.run([clang, "--version"], capture_output=True, text=True)
    except OSError:
        return None, f"no clang ('{clang}' not found)"
    if v.returncode != 0:
        return None, f"'{clang} --version' failed"
    version = (v.stdout.splitlines() or ["clang"])[0].strip()
    t = subprocess.run([clang, "-print-targets"], capture_output=True, text=True)
    if "bpf" not in t.stdout:
        return None, f"{version} has no BPF target"
    return clang, version


def build(clang, out):
    """Builds the source as build.rs does (same directory, same relative name)."""
    cmd = [clang, *flags(), "-c", SOURCE, "-o", out]
    r = subprocess.run(cmd, cwd=CRATE, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed (in {CRATE}):\n{r.stderr}")
    with open(out, "rb") as f:
        return f.read()


# ---- what the loader sees in an object ----

SHF_EXECINSTR = 0x4
SHT_SYMTAB = 2
STT_OBJECT, STT_FUNC = 1, 2
EM_BPF = 247


def cstr(data, off):
    return data[off:data.index(b"\0", off)].decode()


def elf_summary(data):
    """The object's interface: programs, maps, globals, license, CO-RE relocations.
    Raises ValueError for anything but a little-endian 64-bit BPF ELF object."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian 64-bit ELF file")
    (machine,) = struct.unpack_from("<H", data, 18)
    if machine != EM_BPF:
        raise ValueError(f"ELF machine {machine}, not BPF ({EM_BPF})")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    secs = []
    for i in range(shnum):
        name, typ, flags_, _addr, off, size, link, _info, _align, entsize = \
            struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
        secs.append({"name": name, "type": typ, "flags": flags_, "off": off,
                     "size": size, "link": link, "entsize": entsize})
    strtab = secs[shstrndx]["off"]
    for s in secs:
        s["name"] = cstr(data, strtab + s["name"])
    by_name = {s["name"]: s for s in secs}

    programs, maps, globals_ = {}, [], []
    for s in secs:
        if s["flags"] & SHF_EXECINSTR and s["size"] > 0:
            programs[s["name"]] = []
    symtab = next((s for s in secs if s["type"] == SHT_SYMTAB), None)
    if symtab is None:
        raise ValueError("no symbol table")
    symstr = secs[symtab["link"]]["off"]
    for i in range(symtab["size"] // 24):
        st_name, st_info, _other, shndx, _value, size = \
            struct.unpack_from("<IBBHQQ", data, symtab["off"] + i * 24)
        if not st_name or shndx == 0 or shndx >= len(secs):
            continue
        sym, sec = cstr(data, symstr + st_name), secs[shndx]["name"]
        kind = st_info & 0xF
        if kind == STT_FUNC and sec in programs:
            programs[sec].append(sym)
        elif sec == ".maps":
            maps.append(sym)
        elif kind == STT_OBJECT and sec in (".rodata", ".data", ".bss"):
            globals_.append((sym, sec, size))

    lic = by_name.get("license")
    license_ = data[lic["off"]:lic["off"] + lic["size"]].rstrip(b"\0").decode() if lic else None

    btf, ext = by_name.get(".BTF"), by_name.get(".BTF.ext")
    core = {}
    if btf and ext:
        # .BTF: magic, version, flags, hdr_len, type_off, type_len, str_off, str_len.
        _m, _v, _f, bhdr, _to, _tl, str_off, _sl = struct.unpack_from("<HBBIIIII", data, btf["off"])
        strings = btf["off"] + bhdr + str_off
        # .BTF.ext: magic, version, flags, hdr_len, func_info off/len, line_info
        # off/len, and (hdr_len >= 32) core_relo off/len, offsets after the header.
        magic, _v, _f, ehdr = struct.unpack_from("<HBBI", data, ext["off"])
        if magic != 0xEB9F:
            raise ValueError(".BTF.ext has a bad magic number")
        if ehdr >= 32:
            relo_off, relo_len = struct.unpack_from("<II", data, ext["off"] + 24)
            p = ext["off"] + ehdr + relo_off
            end = p + relo_len
            if relo_len:
                (rec,) = struct.unpack_from("<I", data, p)
                p += 4
                while p < end:
                    sec_off, n = struct.unpack_from("<II", data, p)
                    core[cstr(data, strings + sec_off)] = n
                    p += 8 + n * rec
    return {
        "programs": {k: sorted(v) for k, v in sorted(programs.items())},
        "maps": sorted(maps),
        "globals": sorted(globals_),
        "license": license_,
        "btf": btf is not None,
        "core": core,
    }


def declared():
    """The programs (section -> function) and maps the source declares with SEC()."""
    with open(os.path.join(CRATE, SOURCE)) as f:
        text = f.read()
    programs = {}
    for sec, fn in re.findall(r'SEC\("([^"]+)"\)\s*int\s+(\w+)\s*\(', text):
        programs.setdefault(sec, []).append(fn)
    maps = re.findall(r'\}\s*(\w+)\s+SEC\("\.maps"\)', text)
    return {k: sorted(v) for k, v in sorted(programs.items())}, sorted(maps)


def interface(summary):
    """What must be the same in another clang's build (not the relocation counts)."""
    return {k: (sorted(v) if k == "core" else v) for k, v in summary.items()}


def co_re_problems(summary):
    """Why the object would not load as CO-RE on any kernel with BTF (empty: fine)."""
    why = []
    if not summary["btf"]:
        why.append("no .BTF section (built without -g?)")
    if not summary["core"]:
        why.append("no CO-RE relocations in .BTF.ext (task_struct read without preserve_access_index?)")
    tp = [p for p in summary["programs"] if p.startswith("tp_btf/")]
    if not tp:
        why.append("no tp_btf/ program")
    if not summary["license"]:
        why.append("no license section")
    return why


def describe(summary):
    progs = ", ".join(f"{k} ({' '.join(v)})" for k, v in summary["programs"].items())
    relos, n = sum(summary["core"].values()), len(summary["core"])
    return (f"programs: {progs}; maps: {' '.join(summary['maps'])}; "
            f"{relos} CO-RE relocations in {n} program{'' if n == 1 else 's'}; "
            f"license {summary['license']!r}")


# ---- the two commands ----

def sha(data):
    return hashlib.sha256(data).hexdigest()


def check():
    m = read_manifest()
    path = os.path.join(CRATE, OBJECT)
    if not os.path.exists(path):
        raise Unrunnable(f"{OBJECT} is missing (testing/bpf_object.py --update writes it)")
    with open(path, "rb") as f:
        committed = f.read()
    failed = []

    def fail(why):
        print(f"FAIL: {why}")
        failed.append(why)

    now = source_sha256()
    if now != m["source-sha256"]:
        fail(f"{OBJECT} is stale: built from source sha256 {m['source-sha256']}, "
             f"the source ({' '.join(inputs())}) hashes to {now} now; "
             "run testing/bpf_object.py --update")
    else:
        print(f"ok: source sha256 {now} ({' '.join(inputs())}) is the manifest's")
    if inputs() != m["inputs"].split():
        fail(f"the manifest names inputs {m['inputs']!r}, bpf/ has {' '.join(inputs())!r}")
    if sha(committed) != m["object-sha256"]:
        fail(f"{OBJECT} hashes to {sha(committed)}, its manifest says {m['object-sha256']}")
    else:
        print(f"ok: {OBJECT} is the object the manifest names (sha256 {m['object-sha256']})")
    try:
        summary = elf_summary(committed)
    except (ValueError, struct.error) as e:
        fail(f"{OBJECT} is not a BPF object: {e}")
        summary = None
    if summary is not None:
        problems = co_re_problems(summary)
        if problems:
            fail(f"{OBJECT} is not a CO-RE program: {'; '.join(problems)}")
        else:
            print(f"ok: {OBJECT} is CO-RE: {describe(summary)}")
        programs, maps = declared()
        if (programs, maps) != (summary["programs"], summary["maps"]):
            fail(f"{OBJECT} has programs {summary['programs']} and maps {summary['maps']}; "
                 f"{SOURCE} declares {programs} and {maps}")
        else:
            print(f"ok: {OBJECT} has the programs and maps {SOURCE} declares")

    clang, version = find_clang()
    if clang is None:
        print(f"not rebuilt: {version} (the hashes and the object's structure were checked)")
    elif now != m["source-sha256"]:
        print("not rebuilt: the object is stale already")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            fresh = build(clang, os.path.join(tmp, "sched_switch.bpf.o"))
        if version == m["clang"]:
            if fresh != committed:
                fail(f"{version}, the clang the manifest names, builds the source to different "
                     f"bytes (sha256 {sha(fresh)}): the object was not built from this source "
                     "with these flags; run testing/bpf_object.py --update")
            else:
                print(f"ok: {version} rebuilds the source to the same bytes")
        elif summary is not None:
            theirs = elf_summary(fresh)
            if interface(theirs) != interface(summary):
                fail(f"{version} builds a different program from the source than the object "
                     f"({m['clang']}):\n  object:  {describe(summary)}\n  rebuilt: {describe(theirs)}")
            else:
                bytes_ = "are the same" if fresh == committed else "differ, as another clang's may"
                print(f"ok: {version} (the object's is {m['clang']}) builds the same programs, maps, "
                      f"globals, license and CO-RE-relocated programs; its bytes {bytes_}")
    if failed:
        print(f"bpf_object: {len(failed)} check(s) FAILED")
        return 1
    print("bpf_object: the committed object is the source's")
    return 0


def update():
    clang, version = find_clang()
    if clang is None:
        raise Unrunnable(f"--update needs clang with the BPF target: {version} "
                         "(install clang, or set MPSYNC_CLANG)")
    source = source_sha256()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "sched_switch.bpf.o")
        data = build(clang, out)
        summary = elf_summary(data)
        problems = co_re_problems(summary)
        if declared() != (summary["programs"], summary["maps"]):
            problems.append(f"its programs and maps are not the ones {SOURCE} declares "
                            "(the SEC() patterns of testing/bpf_object.py no longer read it?)")
        if problems:
            sys.exit(f"error: the build is not a CO-RE program: {'; '.join(problems)}")
        shutil.copyfile(out, os.path.join(CRATE, OBJECT + ".tmp"))
    os.replace(os.path.join(CRATE, OBJECT + ".tmp"), os.path.join(CRATE, OBJECT))
    write_manifest(source, sha(data), version)
    print(f"wrote {OBJECT} ({len(data)} bytes, sha256 {sha(data)}) and {MANIFEST}")
    print(f"  built from source sha256 {source} with {version}")
    print(f"  {describe(summary)}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", action="store_true", help="fail if the object is not the source's")
    g.add_argument("--update", action="store_true", help="rebuild object and manifest (needs clang)")
    args = ap.parse_args()
    try:
        return check() if args.check else update()
    except Unrunnable as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
