#!/usr/bin/env bash
# Reliability campaigns. Loopback only, bounded in time; every process it starts is stopped.
# Prints one figure line per campaign and exits 1 when any lost/leaked/doubled/panicked count
# is not zero.
#
#   scripts/chaos.sh [--short | --full]
#                    [--only kill-sim,kill-moto,faults,s3-faults,failover,watch,fuzz,long-run]
#                    [--seed S]
#                    [--no-build]
#
# --short (the default; the README's test command runs it) takes a few minutes; --full is the
# campaign the figures in the documentation come from (about two hours on two cores).
# --no-build uses the release binary as it is (the test command's `cargo test` just built it;
# `cargo build` would build it again with the features of a plain build).
#
# kill-sim   The built-in scenario runs paced (120x real time, so its hour takes 30 s) with a
#            journal; it is SIGKILLed at a moment drawn uniformly over the run (seeded),
#            resumed with --resume (paced again) and killed again, K times per run, then
#            resumed unpaced to the end. Short: 6 kills; full: 120.
# kill-moto  The same on `simulate --cloud aws` against moto (started here on 127.0.0.1), with
#            the emulator scenario (launches, a spot interruption through SQS, a replacement;
#            in real time, lengthened from 90 s to 120 s). Each run uses its own cluster name
#            in the one moto. Short: 2 kills; full: 24.
#            After each run of either: the last resume exits 0 (it fails when an instance is
#            left without a NodeClaim or an actor failed), no pod is pending, `journal verify`
#            finds every decision the same, no NodeClaim was launch-requested or launched twice
#            in the journal, and (moto) no two instances carry the same NodeClaim tag and none
#            of the run's instances is still running after it ended.
# faults     Random cloud faults (InsufficientInstanceCapacity in CreateFleet's errorSet,
#            RequestLimitExceeded/ThrottlingException, 5xx, dropped connections, answers 2 s
#            late) on every EC2/SSM/SQS call through the fault-injecting proxy in front of moto,
#            while the emulator scenario runs (tests/aws.rs random_cloud_faults_lose_and_leak_
#            nothing): every pod bound, no instance left running, no actor failure. Short: 20 %
#            (the test command runs it as a test); full: 5 %, 20 % and 50 %.
# s3-faults  One `karpenter controller` shipping its journal through the S3 fault proxy in
#            front of moto's S3 (SlowDown, 5xx, dropped connections, late answers, torn
#            uploads, lost answers) and a 15 s outage of the bucket while pods scale up and
#            down: every scale-up settles, the upload lag shows the outage and falls after it,
#            and after a clean stop the stored history equals the local journal record for
#            record and `journal verify` passes on it (tests/controller/history_faults.rs).
#            Short: 20 % (the test command runs it as a test); full: 5 %, 20 % and 50 %.
# failover   Two `karpenter controller` processes with leader election on the test API server,
#            on EC2 (moto), shipping the journal to moto's S3; the leader is stopped at a
#            seeded moment during a scale-up or a drain, in turn SIGKILLed and restarted in
#            place, SIGKILLed and replaced by a new replica with its journal directory
#            deleted, and stopped cleanly and replaced the same way; after each stop the
#            cluster must settle: pods bound, every NodeClaim object with a running instance
#            and every running instance with an object, one live leader; no NodeClaim
#            launched twice; at the end the stored history is unbroken, `journal verify`
#            passes across every seam, and each deleted journal is in it (all of it after a
#            clean stop) (tests/controller/failover.rs). Short: 3 stops; full: 21.
# watch      The controller's steps (pods, a drain under a PDB, more pods) run clean and with
#            API server faults on every request (dropped watches, 410 Gone, answers up to
#            1.5 s late, 409 Conflict on writes, 429/503 with Retry-After, 500, lists reset
#            halfway) and a restart of the API server: the same end state, no pod planned
#            twice, retries and relists counted in the client's metrics
#            (tests/controller/watch_faults.rs). Short: 10 %; full: 5 %, 10 % and 30 %.
# fuzz       Each cargo-fuzz target (fuzz/fuzz_targets: manifest, sqs_message, journal_frame,
#            admin_query)
#            from its seeds for a number of executions; a crash or a hang (10 s) fails it and
#            leaves the input under the target directory. Short: 20,000 runs per target;
#            full: 10,000,000. Built by scripts/fuzz-build.sh (cargo-fuzz, installed when
#            missing).
# long-run   `karpenter bench long-run`: the controller on the simulator with the workload
#            changing every 5 minutes (a daily wave of web replicas, batch jobs, spot
#            interruptions, image releases), printing the journal's size on disk and the
#            process's resident memory; it fails past 200 MB or 150 MB or with a pod pending,
#            and `journal verify` must then reproduce every decision left in the trimmed
#            journal. Short: a simulated day with 6 h retention (so history is cut); full: a
#            week with the defaults (24 h, 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=short
only=kill-sim,kill-moto,faults,s3-faults,failover,watch,fuzz,long-run
seed=1
build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --short) mode=short; shift ;;
    --full) mode=full; shift ;;
    --only) only=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    *) echo "chaos.sh: unknown argument $1 (use --short, --full, --only LIST, --seed S, --no-build)" >&2; exit 2 ;;
  esac
done
wants() { [[ ",$only," == *",$1,"* ]]; }
for campaign in ${only//,/ }; do
  case "$campaign" in
    kill-sim|kill-moto|faults|s3-faults|failover|watch|fuzz|long-run) ;;
    *) echo "chaos.sh: --only: unknown campaign $campaign (kill-sim, kill-moto, faults, s3-faults, failover, watch, fuzz, long-run)" >&2; exit 2 ;;
  esac
done

target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
bin="$target/release/karpenter"
if wants kill-sim || wants kill-moto || wants long-run; then
  if [ "$build" = 1 ] || [ ! -x "$bin" ]; then
    cargo build --release --bin karpenter
  fi
fi

work=$(mktemp -d)
child=""
moto_pid=""
cleanup() {
  if [ -n "$child" ]; then kill -9 "$child" 2>/dev/null || true; fi
  if [ -n "$moto_pid" ]; then kill "$moto_pid" 2>/dev/null || true; wait "$moto_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

RANDOM=$seed
failures=0
# A moment in [100 ms, max ms), uniform.
kill_after_ms() { echo $(( (RANDOM * 32768 + RANDOM) % ($1 - 100) + 100 )); }
sleep_ms() { sleep "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))"; }

# Counts LaunchRequested/NodeClaimLaunched given twice for one NodeClaim in a journal.
doubled_in_journal() {
  "$bin" journal tail "$1" --since 1 2>/dev/null |
    awk '$4 == "LaunchRequested" || $4 == "NodeClaimLaunched" { n[$4 " " $3]++ }
         END { c = 0; for (k in n) if (n[k] > 1) c++; print c }'
}

# What was in flight when a run was killed, from its journal: "launch" when a NodeClaim was
# planned or launched but not registered, "drain" when a node was draining or terminating,
# and "command:<phase>" for each disruption command not ended.
in_flight() {
  "$bin" journal replay "$1" 2>/dev/null |
    awk '$1 == "command" && $2 ~ /^[0-9]+$/ { print "command:" $4 }
         $2 == "Pending" || $2 == "Launched" { launch = 1 }
         $2 == "Draining" || $2 == "Terminating" { drain = 1 }
         END { if (launch) print "launch"; if (drain) print "drain" }'
}

# Keeps a failed run's journal, its output and the kill moments under the target directory
# (chaos-failed/ID-RUN) for `karpenter journal replay/explain`.
keep_failed() {
  local kept="$target/chaos-failed/$1"
  rm -rf "$kept" && mkdir -p "$kept"
  cp -r "$2" "$kept/journal" && cp "$2.log" "$kept/output.log" 2>/dev/null || true
  echo "  kept in $kept" >&2
}

# One kill campaign. Arguments: id, name, kills, kills per run, the run's length in ms, a
# function that prints the command line of run N (without --resume; its third argument is
# `paced` for the runs that are killed, `last` for the one that finishes), and optionally a
# function that prints "<NodeClaims launched twice> <instances left running> <instances>" for
# run N.
kill_campaign() {
  local id=$1 name=$2 kills=$3 per_run=$4 length_ms=$5 command_of=$6 check_cloud=${7:-}
  local done_kills=0 runs=0 failed=0 pending=0 different=0 doubled=0 leaked=0 before=0
  local instances=0
  local -A landed=()
  while [ "$done_kills" -lt "$kills" ]; do
    runs=$((runs + 1))
    local journal="$work/$id-$runs"
    local -a cmd
    read -r -a cmd <<<"$($command_of "$runs" "$journal" paced)"
    for _ in $(seq 1 "$per_run"); do
      [ "$done_kills" -ge "$kills" ] && break
      local -a args=("${cmd[@]}")
      if [ -d "$journal" ]; then args+=(--resume); fi
      "$bin" "${args[@]}" >>"$journal.log" 2>&1 &
      child=$!
      local after
      after=$(kill_after_ms "$length_ms")
      sleep_ms "$after"
      if kill -9 "$child" 2>/dev/null; then
        done_kills=$((done_kills + 1))
        echo "chaos.sh: SIGKILL after $after ms" >>"$journal.log"
      fi
      wait "$child" 2>/dev/null || true
      child=""
      if [ ! -d "$journal" ]; then
        before=$((before + 1))
      else
        local what
        for what in $(in_flight "$journal"); do landed[$what]=$(( ${landed[$what]:-0} + 1 )); done
      fi
    done
    local -a last
    read -r -a last <<<"$($command_of "$runs" "$journal" last)"
    if [ -d "$journal" ]; then last+=(--resume); fi
    local out bad=0
    out=$("$bin" "${last[@]}" 2>&1) || {
      failed=$((failed + 1)); bad=1
      echo "$name run $runs: the last run failed: $(echo "$out" | tail -3)" >&2
    }
    echo "$out" >>"$journal.log"
    if ! grep -q ', 0 pending' <<<"$out"; then
      pending=$((pending + 1)); bad=1
      echo "$name run $runs: pods left pending: $(grep -m1 '^pods:' <<<"$out" || echo 'no pods line')" >&2
    fi
    local verify
    verify=$("$bin" journal verify "$journal" 2>&1 || true)
    if ! grep -q '0 different' <<<"$verify"; then
      different=$((different + 1)); bad=1
      echo "$name run $runs: journal verify: $(echo "$verify" | tail -2)" >&2
    fi
    local twice
    twice=$(doubled_in_journal "$journal")
    if [ -n "$check_cloud" ]; then
      local -a cloud
      read -r -a cloud <<<"$($check_cloud "$runs")"
      twice=$((twice + cloud[0]))
      leaked=$((leaked + cloud[1]))
      if [ "${cloud[1]}" != 0 ]; then bad=1; echo "$name run $runs: ${cloud[1]} instances left running" >&2; fi
      instances=$((instances + cloud[2]))
    fi
    if [ "$twice" != 0 ]; then
      doubled=$((doubled + twice)); bad=1
      echo "$name run $runs: $twice NodeClaims launched twice" >&2
    fi
    if [ "$bad" = 1 ]; then keep_failed "$id-$runs" "$journal"; fi
  done
  echo "$name: $done_kills kills over $runs runs (seed $seed; $before before the journal existed): $failed failed last runs, $pending runs with pods pending, $different runs whose journal verify differed, $doubled NodeClaims launched twice${check_cloud:+, $leaked of $instances instances left running}"
  local during="" key
  for key in $(printf '%s\n' "${!landed[@]}" | sort); do during+="${during:+, }${landed[$key]} $key"; done
  echo "$name: kills that landed with work in flight: ${during:-none}"
  failures=$((failures + failed + pending + different + doubled + leaked))
}

# ---- kill -9 on simulate ----------------------------------------------------------------
sim_command() {
  local pace="--pace 120"
  if [ "$3" = last ]; then pace=""; fi
  echo "--log-level error simulate --quiet $pace --journal $2"
}
if wants kill-sim; then
  if [ "$mode" = full ]; then kills=120; else kills=6; fi
  kill_campaign kill-sim "kill -9 on simulate" "$kills" 2 30000 sim_command
fi

# ---- kill -9 on simulate --cloud aws against moto ----------------------------------------
start_moto() {
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION=true MOTO_ENABLE_AMI_VALIDATION=true \
    python3 scripts/moto_server.py -H 127.0.0.1 -p "$port" >"$work/moto.log" 2>&1 &
  moto_pid=$!
  for _ in $(seq 1 150); do
    if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/moto-api/')" 2>/dev/null; then
      moto_endpoint="http://127.0.0.1:$port"
      return
    fi
    sleep 0.2
  done
  echo "chaos.sh: moto did not start (pip install 'moto[server]'; ./scripts/test.sh does)" >&2
  exit 1
}
moto_command() {
  # The emulator scenario for its own cluster (the node class selects subnets by its name),
  # with 30 s more at the end so that a run resumed late still has the time to boot the nodes
  # its pods need.
  sed -e "s/demo/chaos-$1/g" -e 's/^duration: 90s$/duration: 120s/' \
    deploy/scenarios/emulator.yaml >"$work/emulator-$1.yaml"
  echo "--log-level error simulate $work/emulator-$1.yaml --quiet --cloud aws --aws-endpoint $moto_endpoint --aws-region us-west-2 --cluster-name chaos-$1 --interruption-queue chaos-$1-interruptions --prepare-emulator --journal $2"
}
# Prints "<NodeClaims with more than one instance> <instances still running> <instances>" for
# run N (instances of its cluster, in any state).
moto_instances() {
  python3 - "$moto_endpoint" "chaos-$1" <<'PY'
import collections, sys, boto3
ec2 = boto3.client("ec2", endpoint_url=sys.argv[1], region_name="us-west-2",
                   aws_access_key_id="testing", aws_secret_access_key="testing")
per_claim, running = collections.Counter(), 0
for page in ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": f"tag:kubernetes.io/cluster/{sys.argv[2]}", "Values": ["owned"]}]):
    for r in page["Reservations"]:
        for i in r["Instances"]:
            tags = {t["Key"]: t["Value"] for t in i.get("Tags", [])}
            per_claim[tags.get("karpenter.sh/nodeclaim", "")] += 1
            running += i["State"]["Name"] in ("pending", "running")
print(sum(1 for k, n in per_claim.items() if k and n > 1), running, sum(per_claim.values()))
PY
}
if wants kill-moto; then
  if [ "$mode" = full ]; then kills=24; else kills=2; fi
  start_moto
  kill_campaign kill-moto "kill -9 on simulate --cloud aws (moto)" "$kills" 2 122000 moto_command moto_instances
fi

# ---- random cloud faults ------------------------------------------------------------------
if wants faults; then
  if [ "$mode" = full ]; then rates=0.05,0.2,0.5; else rates=0.2; fi
  out=$(KARPENTER_CHAOS_FAULT_RATES=$rates cargo test --release -p karpenter-rs --test aws \
    random_cloud_faults_lose_and_leak_nothing -- --nocapture 2>&1) || {
    failures=$((failures + 1))
    echo "$out" | grep -E 'panicked|assert' -A3 | head -20 >&2
  }
  grep '^cloud faults at' <<<"$out" || echo "cloud faults: no figures (the test did not run to the end)"
fi

# ---- controller failover and API server faults (tests/controller) --------------------------
# Runs one test of tests/controller with the environment given and prints its figure line.
controller_campaign() {
  local test=$1 figures=$2 out
  shift 2
  out=$(env "$@" cargo test --release -p karpenter-rs --test controller "$test" -- --nocapture 2>&1) || {
    failures=$((failures + 1))
    echo "$out" | grep -E 'panicked|did not settle|assert' -A3 | head -30 >&2
  }
  grep "^$figures" <<<"$out" || echo "$figures: no figures (the test did not run to the end)"
}
if wants s3-faults; then
  if [ "$mode" = full ]; then rates="0.05 0.2 0.5"; else rates=0.2; fi
  for rate in $rates; do
    controller_campaign s3_faults_and_an_outage "s3 faults" \
      KARPENTER_CHAOS_S3_FAULT_RATE="$rate" KARPENTER_CHAOS_SEED="$seed"
  done
fi
if wants failover; then
  if [ "$mode" = full ]; then kills=21; else kills=3; fi
  controller_campaign killing_the_leader "controller failover" \
    KARPENTER_CHAOS_FAILOVER_KILLS=$kills KARPENTER_CHAOS_SEED="$seed"
fi
if wants watch; then
  if [ "$mode" = full ]; then rates="0.05 0.1 0.3"; else rates=0.1; fi
  for rate in $rates; do
    controller_campaign watch_and_write_faults "watch faults" \
      KARPENTER_CHAOS_WATCH_FAULT_RATE="$rate" KARPENTER_CHAOS_SEED="$seed"
  done
fi

# ---- a long run: the journal and memory level off ------------------------------------------
if wants long-run; then
  if [ "$mode" = full ]; then
    long=(--duration 168h)
  else
    long=(--duration 24h --journal-retention 6h)
  fi
  out=$("$bin" bench long-run "${long[@]}" --print-every 24h --journal "$work/long-run" \
    2>"$work/long-run.log") || {
    failures=$((failures + 1))
    echo "$out" >&2
    grep -E 'ERROR|panicked' "$work/long-run.log" | head -5 >&2 || true
  }
  grep '^long-run:' <<<"$out" || echo "long-run: no figures (the run did not finish)"
  if verified=$("$bin" journal verify "$work/long-run" 2>&1 | tail -1); then
    echo "long-run journal verify: $verified"
  else
    failures=$((failures + 1))
    echo "long-run journal verify failed: $verified" >&2
  fi
fi

# ---- coverage-guided fuzzing --------------------------------------------------------------
if wants fuzz; then
  if [ "$mode" = full ]; then runs=10000000; else runs=20000; fi
  # cargo-fuzz (installed when missing) and the instrumented build; up to date when
  # scripts/test.sh built them beside its tests.
  ./scripts/fuzz-build.sh
  fuzz_bin="$target/fuzz/x86_64-unknown-linux-gnu/release"
  line="fuzz:"
  for t in manifest sqs_message journal_frame admin_query; do
    corpus="$target/fuzz-corpus/$t"
    artifacts="$target/fuzz-artifacts/$t/"
    mkdir -p "$corpus" "$artifacts"
    log="$work/fuzz-$t.log"
    start=$(date +%s)
    # Inputs up to 4 KiB: larger manifests add time per run, not paths.
    inputs=("$corpus" "fuzz/seeds/$t")
    if [ -d "fuzz/regressions/$t" ]; then inputs+=("fuzz/regressions/$t"); fi
    if "$fuzz_bin/$t" "${inputs[@]}" -runs="$runs" \
      -max_len=4096 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$artifacts" \
      -print_final_stats=1 >"$log" 2>&1; then
      crashed=0
    else
      crashed=1
      failures=$((failures + 1))
      echo "fuzz $t: $(grep -m1 -E 'panicked|ERROR' "$log" || tail -1 "$log"); input kept in $artifacts" >&2
    fi
    execs=$(awk '/stat::number_of_executed_units/ { print $2 }' "$log")
    line+=" $t ${execs:-0} runs in $(($(date +%s) - start)) s, $crashed crashed;"
  done
  echo "${line%;}"
fi

exit $((failures > 0))
