#!/usr/bin/env python3
"""Builds the workspace's tests once and runs the test binaries side by side.

    python3 scripts/run_tests.py [--build-only] [--jobs N] [--timeout S] [-- ARGS FOR EACH TEST BINARY]

`cargo test` runs one test binary after another, and most of ours spend their time waiting on
servers (moto, the test API server, real timers): the suite kept two cores three quarters idle
for ten minutes. This builds what `cargo test --release --workspace --all-targets` builds (the
workspace's crates through clippy-driver, set in .cargo/config.toml), fails on any compiler or
clippy warning in the workspace's own code as `cargo clippy -- -D warnings` did, runs every
test binary (benches are built and linted, not run) with up to N at a time, each in its
package's directory as cargo runs it, prints each binary's whole output when it ends, then runs
the doc tests. A binary running longer than --timeout is killed and counts as failed.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

CARGO = os.environ.get("CARGO", "cargo")
BUILD = [CARGO, "test", "--release", "--workspace", "--all-targets", "--no-run", "--message-format=json"]


def build():
    """The test binaries as (package dir, label, executable)."""
    proc = subprocess.Popen(BUILD, stdout=subprocess.PIPE, text=True)
    binaries, seen = [], set()
    for line in proc.stdout:
        try:
            message = json.loads(line)
        except ValueError:
            print(line, end="", file=sys.stderr)
            continue
        reason = message.get("reason")
        if reason == "compiler-message":
            diagnostic = message["message"]
            rendered = diagnostic.get("rendered") or diagnostic.get("message", "")
            # The same diagnostic comes once per target that compiles the file (lib, lib test).
            if rendered not in seen and diagnostic.get("level") in ("warning", "error"):
                seen.add(rendered)
                sys.stderr.write(rendered)
        elif reason == "compiler-artifact" and message.get("executable") and message["profile"]["test"]:
            target = message["target"]
            if "bench" in target["kind"]:
                continue
            source = os.path.relpath(target["src_path"])
            label = source if target["kind"] == ["test"] else f"{source} (unit tests)"
            binaries.append((os.path.dirname(message["manifest_path"]), label, message["executable"]))
    if proc.wait() != 0:
        sys.exit("run_tests: the build failed")
    if seen:
        sys.exit(f"run_tests: {len(seen)} warning(s) in the workspace's code (clippy and rustc, denied as -D warnings)")
    return binaries


def run_one(binary, args, timeout, results, lock):
    package_dir, label, executable = binary
    env = dict(os.environ, CARGO_MANIFEST_DIR=package_dir)
    start = time.monotonic()
    proc = subprocess.Popen(
        [executable, *args],
        cwd=package_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    with lock:
        results["running"][label] = proc
    try:
        output, _ = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        output += f"\nrun_tests: killed after {timeout} s\n".encode()
        code = -1
    elapsed = time.monotonic() - start
    with lock:
        del results["running"][label]
        results["done"].append((elapsed, label, code))
        sys.stdout.write(f"\n==== {label} ({os.path.relpath(executable)}): {elapsed:.1f} s, {'ok' if code == 0 else f'FAILED ({code})'}\n")
        sys.stdout.write(output.decode(errors="replace"))
        sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=6, help="test binaries run at once (default 6)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds one binary may run (default 1800)")
    parser.add_argument("--build-only", action="store_true", help="build and lint, run nothing")
    parser.add_argument("args", nargs="*", help="passed to every test binary (after --)")
    options = parser.parse_args()
    if options.jobs < 1:
        sys.exit("run_tests: --jobs must be at least 1")

    binaries = build()
    if options.build_only:
        return
    results = {"running": {}, "done": []}
    lock = threading.Lock()

    def stop(*_):
        with lock:
            for proc in results["running"].values():
                os.killpg(proc.pid, signal.SIGKILL)
        sys.exit("run_tests: stopped; the test binaries still running were killed")

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    pending, threads = list(binaries), []
    start = last_word = time.monotonic()
    while pending or threads:
        threads = [t for t in threads if t.is_alive()]
        while pending and len(threads) < options.jobs:
            args = (pending.pop(0), options.args, options.timeout, results, lock)
            thread = threading.Thread(target=run_one, args=args, daemon=True)
            thread.start()
            threads.append(thread)
        if time.monotonic() - last_word >= 60:
            last_word = time.monotonic()
            with lock:
                running = ", ".join(results["running"])
            print(f"run_tests: {time.monotonic() - start:.0f} s, running: {running}", flush=True)
        time.sleep(0.05)

    failed = [label for _, label, code in results["done"] if code != 0]
    print(f"\nrun_tests: {len(binaries)} test binaries in {time.monotonic() - start:.0f} s, {options.jobs} at a time; the longest:")
    for elapsed, label, code in sorted(results["done"], reverse=True)[:5]:
        print(f"  {elapsed:6.1f} s  {label}")
    if failed:
        sys.exit("run_tests: failed: " + ", ".join(failed))

    doc = subprocess.run([CARGO, "test", "--release", "--workspace", "--doc", "--", *options.args])
    if doc.returncode != 0:
        sys.exit("run_tests: the doc tests failed")


if __name__ == "__main__":
    main()
