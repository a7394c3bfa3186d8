#!/usr/bin/env bash
# Soak the transport engine in the deterministic simulation: runs every sim test case over
# fresh ranges of seeds until the time is up, alternating batches of short runs with long
# runs (many more operations over many more QP pairs), then prints a summary and the exact command that
# replays each failing seed.
#
#   tests/sim/soak.sh [SECONDS (default 300)] [BUILD_DIR (default build)]
#   RRDMA_SIM_SEED=N tests/sim/soak.sh ...   # start from seed N instead of a clock-derived one
#
# Exit status: 0 if every run passed, 1 if any failed, 2 if the test binary is missing.
set -u

duration=${1:-300}
build=${2:-build}
here=$(cd "$(dirname "$0")/../.." && pwd)
[[ $build = /* ]] || build="$here/$build"
binary="$build/tests/sim/sim_engine_test"
if [[ ! -x $binary ]]; then
  echo "soak: $binary not found; build the sim_engine_test target first" >&2
  exit 2
fi

start_seed=${RRDMA_SIM_SEED:-$(( $(date +%s) % 100000 * 10000 ))}
short_rounds=200
long_rounds=20
long_ops=300
long_qps=16
log=$(mktemp /tmp/rrdma-soak.XXXXXX)
trap 'rm -f "$log"' EXIT

deadline=$(( $(date +%s) + duration ))
seed=$start_seed
batch=0
while (( $(date +%s) < deadline )); do
  left=$(( deadline - $(date +%s) ))
  if (( batch % 2 == 0 )); then rounds=$short_rounds; ops=""; qps=""; else rounds=$long_rounds; ops=$long_ops; qps=$long_qps; fi
  # Each line the binary prints for a run: "<test name>: seed N: ok|FAILED, ..."; tag it
  # with the batch's RRDMA_SIM_OPS and RRDMA_SIM_QPS so that the replay command is exact.
  env RRDMA_SIM_SEED=$seed RRDMA_SIM_ROUNDS=$rounds RRDMA_SIM_KEEP_GOING=1 RRDMA_SIM_VERBOSE=1 \
    ${ops:+RRDMA_SIM_OPS=$ops} ${qps:+RRDMA_SIM_QPS=$qps} timeout --signal=KILL "$left" "$binary" '[sim]~[meta]' 2>/dev/null |
    grep -E '^sim: .*: seed [0-9]+: ' | sed "s/^/ops=${ops:-default}\/${qps:-default} /" >> "$log"
  seed=$(( seed + rounds ))
  batch=$(( batch + 1 ))
done

awk -v binary="$binary" '
  {
    split(substr($1, 5), knobs, "/"); $1 = ""; sub(/^ /, "")
    name = $0; sub(/: seed [0-9]+: .*/, "", name)
    match($0, /seed [0-9]+/); seed = substr($0, RSTART + 5, RLENGTH - 5)
    runs[name]++
    if ($0 ~ /: FAILED/) {
      failed[name]++
      env = "RRDMA_SIM_SEED=" seed " RRDMA_SIM_ROUNDS=1"
      if (knobs[1] != "default") env = env " RRDMA_SIM_OPS=" knobs[1]
      if (knobs[2] != "default") env = env " RRDMA_SIM_QPS=" knobs[2]
      failures[++nf] = "  " env " " binary " \"" name "\""
    }
    if (match($0, /[0-9]+ RC QPs ended in error/)) rex[name] += substr($0, RSTART, RLENGTH) + 0
    if (match($0, /[0-9]+ frames delivered/)) frames += substr($0, RSTART, RLENGTH) + 0
    if (match($0, /[0-9]+ ops completed/)) ops_done += substr($0, RSTART, RLENGTH) + 0
  }
  END {
    printf "soak summary: %d runs, %d operations completed, %d frames delivered\n", NR, ops_done, frames
    for (n in runs)
      printf "  %-75s %6d runs %4d failed %5d RC QPs ended in a checked error\n", n, runs[n], failed[n] + 0, rex[n] + 0
    if (nf > 0) {
      printf "%d failing runs; replay each with:\n", nf
      for (i = 1; i <= nf && i <= 50; i++) print failures[i]
      exit 1
    }
  }' "$log"
