#!/usr/bin/env bash
# Reliability campaigns. Loopback only, bounded in time; every process it starts is stopped.
#
#   scripts/chaos.sh [--kills N] [--per-run K] [--seed S]
#
# Campaign "kill -9 on simulate": the built-in scenario runs paced (120× real time, so its
# hour takes 30 s) with a journal; it is SIGKILLed at a moment drawn uniformly over the run
# (seeded), resumed with --resume (paced again) and killed again, K times per run, then
# resumed unpaced to the end. After each run: the last resume exits 0 (no instance left
# without a NodeClaim, no actor failed), no pod is pending, `journal verify` finds every
# decision the same, and no NodeClaim was launch-requested or launched twice. Prints one
# figure line; exits 1 when any count is not zero.
set -euo pipefail
cd "$(dirname "$0")/.."

kills=6
per_run=2
seed=1
while [ $# -gt 0 ]; do
  case "$1" in
    --kills) kills=$2; shift 2 ;;
    --per-run) per_run=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    *) echo "chaos.sh: unknown argument $1 (use --kills N, --per-run K, --seed S)" >&2; exit 2 ;;
  esac
done

target=${CARGO_TARGET_DIR:-target}
bin="$target/release/karpenter"
if [ ! -x "$bin" ]; then
  cargo build --release --bin karpenter
fi

work=$(mktemp -d)
child=""
cleanup() {
  if [ -n "$child" ]; then kill -9 "$child" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

RANDOM=$seed
# The scenario's hour at 120× is 30 s: kill between 0.1 s and 30 s in.
kill_after_ms() { echo $(( (RANDOM * 32768 + RANDOM) % 29900 + 100 )); }

done_kills=0 runs=0 failed_resumes=0 pending=0 different=0 doubled=0 before_journal=0
while [ "$done_kills" -lt "$kills" ]; do
  runs=$((runs + 1))
  journal="$work/run-$runs"
  for _ in $(seq 1 "$per_run"); do
    [ "$done_kills" -ge "$kills" ] && break
    args=(--log-level error simulate --quiet --pace 120 --journal "$journal")
    if [ -d "$journal" ]; then args+=(--resume); fi
    "$bin" "${args[@]}" >/dev/null 2>&1 &
    child=$!
    ms=$(kill_after_ms)
    sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
    if kill -9 "$child" 2>/dev/null; then
      done_kills=$((done_kills + 1))
    fi
    wait "$child" 2>/dev/null || true
    child=""
    if [ ! -d "$journal" ]; then before_journal=$((before_journal + 1)); fi
  done
  if [ -d "$journal" ]; then
    out=$("$bin" --log-level error simulate --quiet --resume --journal "$journal" 2>&1) || {
      failed_resumes=$((failed_resumes + 1))
      echo "run $runs: resume failed: $(echo "$out" | tail -3)" >&2
    }
  else
    out=$("$bin" --log-level error simulate --quiet --journal "$journal" 2>&1) || {
      failed_resumes=$((failed_resumes + 1))
      echo "run $runs: fresh run failed: $(echo "$out" | tail -3)" >&2
    }
  fi
  if ! grep -q ', 0 pending' <<<"$out"; then
    pending=$((pending + 1))
    echo "run $runs: pods left pending: $(grep -m1 '^pods:' <<<"$out" || echo 'no pods line')" >&2
  fi
  verify=$("$bin" journal verify "$journal" 2>&1 || true)
  if ! grep -q '0 different' <<<"$verify"; then
    different=$((different + 1))
    echo "run $runs: journal verify: $(echo "$verify" | tail -2)" >&2
  fi
  tail_text=$("$bin" journal tail "$journal" --since 1 2>/dev/null || true)
  twice=$(awk '$4 == "LaunchRequested" || $4 == "NodeClaimLaunched" { n[$4 " " $3]++ }
               END { c = 0; for (k in n) if (n[k] > 1) c++; print c }' <<<"$tail_text")
  if [ "$twice" != 0 ]; then
    doubled=$((doubled + twice))
    echo "run $runs: $twice NodeClaims launch-requested or launched twice" >&2
  fi
done

echo "kill -9 on simulate: $done_kills kills over $runs runs (seed $seed; $before_journal before the journal existed): $failed_resumes failed resumes (a leaked instance or a failed actor), $pending runs with pods pending, $different runs whose journal verify differed, $doubled NodeClaims launched twice"
[ $((failed_resumes + pending + different + doubled)) -eq 0 ]
