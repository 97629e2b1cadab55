#!/usr/bin/env bash
# Builds the coverage-guided fuzz targets (fuzz/fuzz_targets) for scripts/chaos.sh's fuzz
# campaign, installing cargo-fuzz when missing. The targets land in
# $CARGO_TARGET_DIR/fuzz/x86_64-unknown-linux-gnu/release (target/ by default): a directory of
# their own, so this build can run beside the workspace's (scripts/test.sh starts it at the
# lowest priority beside its build and tests).
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")/fuzz
if ! cargo fuzz --version >/dev/null 2>&1; then
  # Without the workspace's clippy-driver wrapper (.cargo/config.toml): a tool, not our code.
  # In a target directory of its own: in the workspace's (CARGO_TARGET_DIR), the install
  # would wait for the workspace's build to release its lock, and the tests' for the install.
  RUSTC_WORKSPACE_WRAPPER= cargo install cargo-fuzz --locked --version 0.13.2 \
    --target-dir "$target/cargo-fuzz-install"
  rm -rf "$target/cargo-fuzz-install"
fi
# No sanitizer: the code forbids `unsafe`, and the stable toolchain builds it this way.
# Optimized, with overflow checks and debug assertions on: unoptimized, the short campaign's
# 20,000 manifest runs took 248 s, more than the build saves.
cd fuzz
cargo fuzz build -s none --release --debug-assertions --target-dir "$target"
