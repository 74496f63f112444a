#!/usr/bin/env python3
"""The planted-bug catalogue: apply each one-line bug, run the test meant to catch it,
report caught / missed.

Every protocol in mpsync lists its one-line mutations (a CAS turned into a store, an
Acquire weakened to Relaxed, a dropped re-validation, ...) in testing/planted/*.toml,
each with the test that must catch it. A mutation nobody catches is a missing test.

    testing/planted_bugs.py                 # every bug
    testing/planted_bugs.py --only ticket   # bugs whose id contains "ticket"
    testing/planted_bugs.py --list          # the catalogue, nothing run
    testing/planted_bugs.py --baseline      # also run each test on the clean tree

An entry:

    [[bug]]
    id = "ticket-np-restore-offer"          # unique
    file = "crates/mpsync/src/lock/ticket.rs"
    find = "exact text, found exactly once in the file (may span lines)"
    replace = "the mutated text"
    what = "what the bug is, in a line"
    build = "normal"                        # normal | chaos | loom
    test = "-p mpsync --test locks ticket_np"   # arguments to `cargo test`
    release = false                         # optional: build the test in release
    timeout = 300                           # optional, seconds; a timeout counts as caught
    env = { MPSYNC_TORTURE_SCALE = "1" }   # optional, extra environment

Caught means: the mutated tree builds, and the test command fails (or times out).
A mutation that does not compile is reported as INVALID, never as caught. The file is
restored after every run, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import signal
import subprocess
import sys
import time
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
CATALOGUE = ROOT / "testing" / "planted"

BUILDS = {
    "normal": ({}, "target"),
    "chaos": ({"RUSTFLAGS": "--cfg mpsync_chaos"}, "target/chaos"),
    "loom": ({"RUSTFLAGS": "--cfg loom"}, "target/loom"),
}


def load() -> list[dict]:
    bugs = []
    for f in sorted(CATALOGUE.glob("*.toml")):
        with open(f, "rb") as fh:
            for b in tomllib.load(fh).get("bug", []):
                b["_source"] = f.name
                bugs.append(b)
    ids = [b["id"] for b in bugs]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        sys.exit(f"error: duplicate bug ids in {CATALOGUE}: {sorted(dup)}")
    for b in bugs:
        for key in ("id", "file", "find", "replace", "what", "test"):
            if key not in b:
                sys.exit(f"error: bug {b.get('id', '?')} in {b['_source']}: missing '{key}'")
        if b.get("build", "normal") not in BUILDS:
            sys.exit(
                f"error: bug {b['id']}: build '{b['build']}' is not one of {sorted(BUILDS)}"
            )
    return bugs


def cargo(b: dict, no_run: bool) -> list[str]:
    env, target = BUILDS[b.get("build", "normal")]
    cmd = ["cargo", "test", "--target-dir", target]
    if b.get("release"):
        cmd.append("--release")
    args = b["test"].split()
    if no_run and "--doc" in args:
        # Doc tests cannot be built alone (no `--no-run`): build the library
        # they test (its packages: the arguments before `--doc`); a
        # `compile_fail` doc test is the proof a mutation must break.
        return ["cargo", "build", "--target-dir", target] + args[: args.index("--doc")]
    if no_run:
        # Build only; `--no-run` must come before any `--` (test-binary arguments).
        cut = args.index("--") if "--" in args else len(args)
        args = args[:cut] + ["--no-run"] + args[cut:]
    cmd += args
    return cmd


def run(b: dict, no_run: bool, timeout: int) -> tuple[str, float, str]:
    env_extra, _ = BUILDS[b.get("build", "normal")]
    env = dict(os.environ, CARGO_TERM_COLOR="never", **env_extra)
    env.update({k: str(v) for k, v in b.get("env", {}).items()})
    t0 = time.monotonic()
    # A session of its own, so that a timeout kills the test binary cargo ran
    # too (killing cargo alone leaves a hung test orphaned, spinning on a core).
    p = subprocess.Popen(
        cargo(b, no_run),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        stdout, stderr = p.communicate()
        return "timeout", time.monotonic() - t0, ((stdout or "") + (stderr or ""))[-2000:]
    status = "pass" if p.returncode == 0 else "fail"
    return status, time.monotonic() - t0, (stdout + stderr)[-2000:]


def first_failure(out: str) -> str:
    for line in out.splitlines():
        s = line.strip()
        if "panicked at" in s or s.startswith("assertion") or "use after free" in s:
            return s[:110]
    for line in out.splitlines():
        if "FAILED" in line or "error" in line:
            return line.strip()[:110]
    return ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="run bugs whose id contains this text")
    ap.add_argument("--list", action="store_true", help="print the catalogue and exit")
    ap.add_argument(
        "--baseline",
        action="store_true",
        help="first run each bug's test on the clean tree (it must pass)",
    )
    ap.add_argument("--verbose", action="store_true", help="print test output tails")
    a = ap.parse_args()

    bugs = load()
    if a.only:
        bugs = [b for b in bugs if a.only in b["id"]]
        if not bugs:
            sys.exit(f"error: --only {a.only}: no bug id contains it (try --list)")
    if a.list:
        for b in bugs:
            print(f"{b['id']:<36} {b.get('build', 'normal'):<6} {b['what']}")
            print(f"{'':<36} caught by: cargo test {b['test']}")
        print(f"{len(bugs)} planted bugs")
        return 0

    rows = []
    for b in bugs:
        path = ROOT / b["file"]
        original = path.read_text()
        n = original.count(b["find"])
        if n != 1:
            rows.append((b, "INVALID", 0.0, f"'find' text occurs {n} times in {b['file']} (must be 1)"))
            print(f"{b['id']}: INVALID ('find' occurs {n} times)", flush=True)
            continue
        timeout = int(b.get("timeout", 300))
        if a.baseline:
            st, secs, out = run(b, False, timeout)
            if st != "pass":
                rows.append((b, "BASELINE-FAILS", secs, first_failure(out)))
                print(f"{b['id']}: its test fails on the clean tree ({st})", flush=True)
                continue
        try:
            path.write_text(original.replace(b["find"], b["replace"]))
            st, secs, out = run(b, True, 1800)
            if st != "pass":
                verdict, detail = "INVALID", "mutated tree does not build: " + first_failure(out)
            else:
                st, secs, out = run(b, False, timeout)
                verdict = {"pass": "MISSED", "fail": "caught", "timeout": "caught (timeout)"}[st]
                detail = first_failure(out) if st == "fail" else ""
        finally:
            path.write_text(original)
        rows.append((b, verdict, secs, detail))
        print(f"{b['id']}: {verdict} in {secs:.0f} s {detail}", flush=True)
        if a.verbose:
            print(out)

    print()
    print(f"| bug | build | what | caught by | result | s |")
    print(f"|---|---|---|---|---|---|")
    for b, verdict, secs, detail in rows:
        print(
            f"| `{b['id']}` | {b.get('build', 'normal')} | {b['what']} | "
            f"`cargo test {b['test']}` | {verdict} | {secs:.0f} |"
        )
    missed = [r for r in rows if r[1] in ("MISSED", "INVALID", "BASELINE-FAILS")]
    caught = len(rows) - len(missed)
    print(f"\n{caught} of {len(rows)} caught; {len(missed)} missed or invalid")
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())
