#!/usr/bin/env bash
# The admin page in a real browser: installs Debian's Chromium and playwright-core (pinned in
# tests/browser/package-lock.json; it drives the installed Chromium and downloads no browser)
# when missing, then runs tests/browser/admin_page.mjs against `karpenter simulate --admin`.
# Screenshots land in $CARGO_TARGET_DIR/browser (target/browser by default).
# Usage: scripts/browser-test.sh [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
BIN="$TARGET_DIR/release/karpenter"

if [ "${1:-}" != "--no-build" ]; then
  cargo build --release --bin karpenter
fi
[ -x "$BIN" ] || { echo "no $BIN: build it (cargo build --release) or drop --no-build" >&2; exit 1; }

CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$CHROMIUM" ]; then
  echo "== installing chromium (Debian)"
  export DEBIAN_FRONTEND=noninteractive
  apt_get() { if [ "$(id -u)" = 0 ]; then apt-get "$@"; else sudo apt-get "$@"; fi; }
  apt_get install -y -q chromium >/dev/null 2>&1 || { apt_get update -q >/dev/null && apt_get install -y -q chromium >/dev/null; }
fi
command -v node >/dev/null || { echo "the browser test needs Node.js (node, npm) on PATH" >&2; exit 1; }

(cd tests/browser && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
KARPENTER_BIN="$BIN" ARTIFACT_DIR="$TARGET_DIR/browser" CHROMIUM="$CHROMIUM" \
  node tests/browser/admin_page.mjs
