#!/bin/bash
# Builds the libFuzzer targets with clang-14 (libFuzzer, ASan, UBSan; the libraries are
# instrumented too) in their own build directory and runs each for a bounded time:
#   fuzz_frame          the whole-frame parser, the ICRC (also without the IPv4 header) and the
#                       GSI check (seeds: every frame of the rxe captures in tests/data, a MAD
#                       to QP 1, and the ConnectX CNP of CAPTURES.md)
#   fuzz_admin_json     the control socket's admin JSON requests (answer(), the trace filter)
#   fuzz_control_frame  the control socket's verbs frames with lying fd counts
#   fuzz_nic_requests   scripts of verbs requests to the daemon's Nic (Nic::handle)
#   fuzz_credentials    a client's /proc/PID/status (parse_credentials)
#   fuzz_cm_mad         the CM's MADs and rdma_cm's CMA header (seeds: one MAD per CM message
#                       as Linux sends it, from tests/rocev2/cm_samples.h)
#   fuzz_ucma           scripts of ucma commands (and MADs between two CMs) to the daemon's
#                       rdma_cm device (UcmaService::handle), and the ucma frame codec
#   fuzz_interfaces     RRDMA_INTERFACES, the program's own environment, as the shim's
#                       getifaddrs parses it (verbs/app/ucma/interfaces.h)
#   fuzz_loadavg        /proc/loadavg as the event loop's busy-poll check reads it
#                       (vnic/event_loop.h, runnable_tasks_in_loadavg)
# Each also starts from what regressions/<target>/ holds. Any crash, sanitizer report,
# failed property, leak, timeout (10 s per input) or out-of-memory (2 GiB) fails the run; the
# input that did it is kept under BUILD/fuzz/artifacts/<target>/ and the script prints how to
# replay it and how to keep it as a regression (ctest then replays it in every build).
#
# usage: tests/fuzz/run-fuzz.sh [SECONDS [TARGET...]]
#   SECONDS   per target, a whole number above 0 (default $RRDMA_FUZZ_SECONDS, else 60);
#             to name targets, give SECONDS first: run-fuzz.sh 60 interfaces
#   TARGET    frame, admin_json, ... as above (fuzz_frame works too); default: all of them
#   RRDMA_FUZZ_BUILD=dir    build directory (default build-fuzz at the top)
#   RRDMA_FUZZ_JOBS=n       targets run at once (default 1)
#   RRDMA_WERROR=ON         a warning fails the build (-Werror, and scripts/check-warnings
#                           on its logs); scripts/test sets it
# Bad arguments: a message, and exit 2 before anything is built. --help: this text.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; }
bad_use() {
  echo "run-fuzz: $1" >&2
  echo "usage: tests/fuzz/run-fuzz.sh [SECONDS [TARGET...]]   (--help says more)" >&2
  exit 2
}
# A whole number above 0 of at most 9 digits: libFuzzer reads -max_total_time as an int.
is_count() { [[ $1 =~ ^0*[1-9][0-9]{0,8}$ ]]; }
# The targets, as tests/fuzz/CMakeLists.txt lists them (RRDMA_FUZZ_TARGETS), without fuzz_.
known_targets() {
  sed -n 's/^set(RRDMA_FUZZ_TARGETS \(.*\))$/\1/p' "$here/CMakeLists.txt" | tr ' ' '\n' | sed -n 's/^fuzz_//p'
}

case ${1:-} in -h | --help) usage; exit 0 ;; esac
mapfile -t all_targets < <(known_targets)
(( ${#all_targets[@]} )) || { echo "run-fuzz: no RRDMA_FUZZ_TARGETS in $here/CMakeLists.txt" >&2; exit 1; }
if (( $# )); then
  seconds=$1
  shift
  if ! is_count "$seconds"; then
    hint=""
    [[ " ${all_targets[*]} " == *" ${seconds#fuzz_} "* ]] && hint=" (a target needs SECONDS first: run-fuzz.sh 60 ${seconds#fuzz_})"
    bad_use "SECONDS must be a whole number above 0, not '$seconds'$hint"
  fi
else
  seconds=${RRDMA_FUZZ_SECONDS:-60}
  is_count "$seconds" || bad_use "RRDMA_FUZZ_SECONDS must be a whole number above 0, not '$seconds'"
fi
build=${RRDMA_FUZZ_BUILD:-$root/build-fuzz}
jobs=${RRDMA_FUZZ_JOBS:-1}
is_count "$jobs" || bad_use "RRDMA_FUZZ_JOBS must be a whole number above 0, not '$jobs'"
targets=()
for name in "$@"; do
  name=${name#fuzz_}
  [[ " ${all_targets[*]} " == *" $name "* ]] || bad_use "no fuzz target '$name' (targets: ${all_targets[*]})"
  targets+=("$name")
done
(( ${#targets[@]} )) || targets=("${all_targets[@]}")

started=$(date +%s)
# RRDMA_WERROR=ON (scripts/test sets it): a warning fails the build, as in the other trees.
werror=${RRDMA_WERROR:-OFF}
mkdir -p "$build"
CC=clang-14 CXX=clang++-14 cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DRRDMA_SANITIZE=ON -DBUILD_SHARED_LIBS=OFF -DRRDMA_WERROR="$werror" \
  -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log" >&2; exit 1; }
cmake --build "$build" --target fuzz_targets -j "${RRDMA_JOBS:-2}" 2>&1 | tee "$build/build.log"
[[ $werror != ON ]] || "$root/scripts/check-warnings" "$build/configure.log" "$build/build.log"
built=$(date +%s)

work=$build/fuzz
mkdir -p "$work"
rm -rf "$work/seeds" && mkdir -p "$work/seeds/frame"
"$build/tests/fuzz/fuzz_extract_frames" "$work/seeds/frame" "$root"/tests/data/rxe_*.pcapng
# The ConnectX-4 Lx CNP (tests/data/CAPTURES.md): a frame no rxe sent.
printf '%b' '\xe4\x1d\x2d\xab\x2b\xc2\x7c\xfe\x90\x64\x3b\x32\x08\x00\x45\xc2\x00\x3c\x71\x8c\x40\x00\x40\x11\x91\x61\x0a\x00\x11\x01\x0a\x00\x12\x01\x00\x00\x12\xb7\x00\x28\x00\x00\x81\x00\xff\xff\x40\x00\x01\x18\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x82\xfd\x00\x2a' \
  >"$work/seeds/frame/connectx_cnp.bin"
"$build/tests/fuzz/fuzz_control_seeds" "$work/seeds"
# A real /proc/PID/status, as the daemon reads it.
mkdir -p "$work/seeds/credentials" && cat /proc/self/status >"$work/seeds/credentials/status.txt"
mkdir -p "$work/seeds/interfaces" && printf 'rv0=10.66.0.10/24;rv_1.b-2=192.168.7.1/32' >"$work/seeds/interfaces/two.txt"
mkdir -p "$work/seeds/loadavg" && cat /proc/loadavg >"$work/seeds/loadavg/now.txt"
"$build/tests/fuzz/fuzz_cm_seeds" "$work/seeds"
# The rdma_cm scripts start from the two kept in regressions/ucma (an rping and a udaddy exchange).
mkdir -p "$work/seeds/ucma"

# Options per target: inputs as long as the parser can be sent (the control socket takes
# requests up to 64 KiB; a verbs frame is at most 272 bytes, longer ones are refused whole).
# The Nic target runs few inputs a second: it starts at full-length scripts (-len_control=0;
# 60 s from the seeds reached 6.6 k features so, 5.9 k in 120 s growing lengths slowly).
options_for() {
  case $1 in
    admin_json) echo "-max_len=65536 -dict=$here/admin_json.dict" ;;
    control_frame) echo "-max_len=512" ;;
    nic_requests) echo "-max_len=2048 -len_control=0" ;;
    cm_mad) echo "-max_len=512" ;;
    ucma) echo "-max_len=4096" ;;
    *) echo "" ;;
  esac
}

run_target() {
  local target=$1 corpus=$work/corpus/$1 artifacts=$work/artifacts/$1 log=$work/$1.log status=0
  mkdir -p "$corpus" "$artifacts" "$here/regressions/$target"
  # shellcheck disable=SC2046
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$build/tests/fuzz/fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" $(options_for "$target") \
    "$corpus" "$work/seeds/$target" "$here/regressions/$target" >"$log" 2>&1 || status=$?
  echo "$status" >"$work/$target.status"
}

rm -rf "$work"/artifacts "$work"/*.status
running=0
for target in "${targets[@]}"; do
  [ -x "$build/tests/fuzz/fuzz_$target" ] || { echo "run-fuzz: no target fuzz_$target" >&2; exit 2; }
  run_target "$target" &
  if (( ++running >= jobs )); then wait -n || true; running=$((running - 1)); fi
done
wait

failed=0
for target in "${targets[@]}"; do
  status=$(cat "$work/$target.status")
  stats=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$work/$target.log" | tail -1 |
          sed 's/^#\([0-9]*\)[[:space:]]*DONE[[:space:]]*/\1 runs, /' || true)
  if [ "$status" = 0 ]; then
    echo "fuzz_$target: ${seconds}s, nothing found (${stats:-no stats})"
    continue
  fi
  failed=1
  echo "fuzz_$target: FAILED (exit status $status):"
  grep -E 'property failed|ERROR: |runtime error|SUMMARY|Test unit written' "$work/$target.log" | head -n 8 | sed 's/^/    /' || true
  echo "  the end of $work/$target.log:"
  tail -n 40 "$work/$target.log" | sed 's/^/    /'
  for f in "$work/artifacts/$target"/*; do
    [ -e "$f" ] || continue
    echo "  kept input: $f"
    echo "    replay:              $build/tests/fuzz/fuzz_$target $f"
    echo "    keep as regression:  cp $f $here/regressions/$target/"
  done
done
finished=$(date +%s)
echo "run-fuzz: build $((built - started)) s, fuzzing $((finished - built)) s (${#targets[@]} targets x ${seconds} s, $jobs at a time)"
exit "$failed"
