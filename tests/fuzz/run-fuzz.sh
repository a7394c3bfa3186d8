#!/bin/bash
# Builds tests/fuzz/fuzz_frame with clang-14 (libFuzzer, ASan, UBSan) in its own build
# directory and runs it for a bounded time with every frame of the rxe captures (and the
# ConnectX CNP of CAPTURES.md) as seed corpus. Inputs that crash it are copied to
# tests/fuzz/regressions/, which ctest replays in every build (rocev2_wire_tests).
#
#   tests/fuzz/run-fuzz.sh [SECONDS]      default 60
#   RRDMA_FUZZ_BUILD=dir                  build directory (default build-fuzz at the top)
set -euo pipefail

seconds=${1:-60}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${RRDMA_FUZZ_BUILD:-$root/build-fuzz}

CC=clang-14 CXX=clang++-14 cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DRRDMA_SANITIZE=ON -DBUILD_SHARED_LIBS=OFF \
  -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link >/dev/null
cmake --build "$build" --target fuzz_frame fuzz_extract_frames -j2

seeds=$build/fuzz/seeds
corpus=$build/fuzz/corpus
artifacts=$build/fuzz/artifacts
mkdir -p "$seeds" "$corpus" "$artifacts"
"$build/tests/fuzz/fuzz_extract_frames" "$seeds" "$root"/tests/data/rxe_*.pcapng
# The ConnectX-4 Lx CNP (tests/data/CAPTURES.md): a frame no rxe sent.
printf '%b' '\xe4\x1d\x2d\xab\x2b\xc2\x7c\xfe\x90\x64\x3b\x32\x08\x00\x45\xc2\x00\x3c\x71\x8c\x40\x00\x40\x11\x91\x61\x0a\x00\x11\x01\x0a\x00\x12\x01\x00\x00\x12\xb7\x00\x28\x00\x00\x81\x00\xff\xff\x40\x00\x01\x18\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x82\xfd\x00\x2a' \
  >"$seeds/connectx_cnp.bin"

status=0
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  "$build/tests/fuzz/fuzz_frame" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$artifacts/" "$corpus" "$seeds" || status=$?

found=0
for f in "$artifacts"/crash-* "$artifacts"/leak-* "$artifacts"/timeout-* "$artifacts"/oom-*; do
  [ -e "$f" ] || continue
  cp "$f" "$here/regressions/"
  echo "kept $(basename "$f") in tests/fuzz/regressions/"
  found=1
done
[ "$found" = 0 ] && echo "fuzz_frame: nothing found in ${seconds}s (exit status $status)"
exit "$status"
