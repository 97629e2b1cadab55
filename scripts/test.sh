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

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --release --workspace --all-targets -- -D warnings
echo "== cargo test"
cargo test --release --workspace
