#!/usr/bin/env bash
# run-fuzz.sh refuses bad arguments before it builds anything: a target name where SECONDS
# goes (`run-fuzz.sh interfaces` once fuzzed every target with -max_total_time=interfaces),
# seconds that are not a whole number above 0, an unknown target, a bad RRDMA_FUZZ_JOBS; each
# exits 2 with a message saying what was wrong, and leaves no build directory. --help prints
# the usage and exits 0. No clang needed: nothing here reaches the build.
set -uo pipefail

script=$(cd "$(dirname "$0")" && pwd)/run-fuzz.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

# expect STATUS PATTERN ARGS...: run-fuzz.sh ARGS exits STATUS and its output matches PATTERN.
expect() {
  local status=$1 pattern=$2 out got=0
  shift 2
  out=$(RRDMA_FUZZ_BUILD="$work/build" "$script" "$@" 2>&1) || got=$?
  if [ "$got" != "$status" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: run-fuzz.sh $*: exit $got (wanted $status), output:" >&2
    sed 's/^/    /' <<<"$out" >&2
    failures=$((failures + 1))
  fi
  if [ -e "$work/build" ]; then
    echo "FAIL: run-fuzz.sh $*: started a build in $work/build" >&2
    rm -rf "$work/build"
    failures=$((failures + 1))
  fi
}

expect 0 '^usage: tests/fuzz/run-fuzz.sh' --help
expect 0 'RRDMA_FUZZ_JOBS' -h
expect 2 "not 'interfaces' \(a target needs SECONDS first: run-fuzz.sh 60 interfaces\)" interfaces
expect 2 "not 'fuzz_frame' .*run-fuzz.sh 60 frame" fuzz_frame
expect 2 "SECONDS must be a whole number above 0, not '0'" 0
expect 2 "not '-5'" -5
expect 2 "not '1e3'" 1e3
expect 2 "not '10s'" 10s
expect 2 "not '1234567890'" 1234567890
expect 2 "no fuzz target 'nosuch' \(targets: frame admin_json .*interfaces loadavg\)" 10 nosuch
expect 2 "no fuzz target 'nosuch'" 10 fuzz_frame nosuch
expect 2 "no fuzz target ''" 10 ''
RRDMA_FUZZ_SECONDS=soon expect 2 "RRDMA_FUZZ_SECONDS must be a whole number above 0, not 'soon'"
RRDMA_FUZZ_JOBS=0 expect 2 "RRDMA_FUZZ_JOBS must be a whole number above 0, not '0'" 10 frame

if (( failures )); then
  echo "run-fuzz.sh arguments: $failures failures" >&2
  exit 1
fi
echo "run-fuzz.sh arguments: every bad use refused with exit 2 before building, --help exits 0"
