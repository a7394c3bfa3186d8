# shellcheck shell=bash
# Shared by the interop tests (sourced after tests/system/lib.sh, not run): the peer VMs,
# the capture on the bridge, the checks every capture passes, the artifacts.
# Environment: RRDMA_CAPTURE_CHECK, RRDMA_INTEROP_ARTIFACTS (tests/interop/CMakeLists.txt),
# RRDMA_INTEROP_CACHE (build-peer's cache, optional).

INTEROP_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly RUN_PEER=$INTEROP_DIR/run-peer BUILD_PEER=$INTEROP_DIR/build-peer

require_interop() {
  [[ $(id -u) == 0 ]] || skip "needs root (bridge, TAP, namespace)"
  [[ -c /dev/net/tun ]] || skip "no /dev/net/tun"
  local tool
  for tool in qemu-system-x86_64 tshark python3 apt-get ip; do
    command -v "$tool" >/dev/null || skip "no '$tool' command (scripts/deps installs it)"
  done
  [[ -n "${RRDMA_CAPTURE_CHECK:-}" && -x "$RRDMA_CAPTURE_CHECK" ]] || fail "RRDMA_CAPTURE_CHECK is not set"
}

# ---------------------------------------------------------------------------------------
# What a test starts beyond system/lib.sh's links and namespaces: VMs, background
# processes, the capture. interop_init installs a cleanup that stops them, then runs
# system/lib.sh's.

VM_DIRS=()
BACKGROUND_PIDS=()
TSHARK_PID=""

interop_init() {  # interop_init TAG: init_test TAG, the private host namespace, the peer built
  init_test "$1"
  trap interop_cleanup EXIT
  local started=$SECONDS
  "$BUILD_PEER" >"$TMPD/build.out" 2>"$TMPD/build.err" || fail "build-peer: $(cat "$TMPD/build.err")"
  log "peer built or cached in $(( SECONDS - started ))s: $(head -n1 "$TMPD/build.out")"
  # A namespace of our own: its bridge does not pass frames through br_netfilter.
  use_private_host
}

interop_cleanup() {
  local rc=$? dir pid
  for dir in "${VM_DIRS[@]}"; do
    "$RUN_PEER" stop --dir "$dir" &>/dev/null
  done
  for pid in "${BACKGROUND_PIDS[@]}"; do
    kill "$pid" 2>/dev/null
  done
  stop_capture
  (exit "$rc")
  cleanup
}

start_capture() {  # start_capture BRIDGE FILE: RoCE v2 only, on the bridge in $HOST_NS
  # Not through host(): a function in the background is a subshell, and $! would name it,
  # not tshark (ip netns exec execs tshark, so here $! is tshark).
  ip netns exec "$HOST_NS" tshark -i "$1" -f "udp port 4791" -w "$2" >"$TMPD/tshark.out" 2>"$TMPD/tshark.err" &
  TSHARK_PID=$!
  wait_until 30 "tshark to capture on $1" grep -q "Capturing on" "$TMPD/tshark.err"
}

stop_capture() {
  [[ -n "$TSHARK_PID" ]] || return 0
  # tshark stops dumpcap and closes the file cleanly on SIGTERM (SIGINT is ignored by
  # commands a script starts in the background).
  kill -TERM "$TSHARK_PID" 2>/dev/null
  for _ in {1..50}; do kill -0 "$TSHARK_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$TSHARK_PID" 2>/dev/null
  wait "$TSHARK_PID" 2>/dev/null
  TSHARK_PID=""
}

# peer ACTION NAME ARGS...: run-peer for the VM NAME, its files in $TMPD/NAME, its output in
# $TMPD/NAME.out (.err). In the background and waited for, so that the deadline's SIGTERM
# reaches our trap at once.
peer() {
  local action=$1 name=$2 rc=0
  shift 2
  [[ " ${VM_DIRS[*]} " == *" $TMPD/$name "* ]] || VM_DIRS+=("$TMPD/$name")
  "$RUN_PEER" "$action" --dir "$TMPD/$name" "$@" >"$TMPD/$name.out" 2>"$TMPD/$name.err" &
  local pid=$!
  BACKGROUND_PIDS+=("$pid")
  wait "$pid" || rc=$?
  return "$rc"
}

# await NAME TEXT [SECONDS]: waits for the guest's "RRDMA-PEER-MARK TEXT ..." and sets
# MARK_REST to the rest of that line. Returns non-zero if it does not come.
await() {
  local rc=0
  "$RUN_PEER" await --dir "$TMPD/$1" --mark "$2" --timeout "${3:-120}" >"$TMPD/await.out" 2>"$TMPD/await.err" &
  local pid=$!
  BACKGROUND_PIDS+=("$pid")
  wait "$pid" || rc=$?
  MARK_REST=$(cat "$TMPD/await.out")
  return "$rc"
}

# ---------------------------------------------------------------------------------------
# Checks every capture passes

# Wireshark decodes every UDP/4791 frame as RRoCE (an InfiniBand BTH), and finds nothing
# malformed and raises no expert information in the layers up to the InfiniBand headers.
# Beyond them Wireshark guesses what the payload is (RPC-over-RDMA, SMB Direct, a "raw"
# Ethertype when the two bytes after the first two are zero...) and reports its wrong
# guesses about the pingpongs' arbitrary bytes as malformed: those frames are counted and
# logged, not held against the packets. The heuristic payload dissectors are switched off
# to keep them few.
expect_wireshark_clean() {
  local capture=$1 udp bth flagged ours
  local -a quiet=()
  local protocol
  for protocol in $(tshark -G heuristic-decodes 2>/dev/null | awk '$1 == "infiniband.payload" {print $2}'); do
    quiet+=(--disable-protocol "$protocol")
  done
  udp=$(tshark "${quiet[@]}" -r "$capture" -Y "udp.dstport == 4791" 2>/dev/null | wc -l)
  bth=$(tshark "${quiet[@]}" -r "$capture" -Y "infiniband.bth" 2>/dev/null | wc -l)
  tshark "${quiet[@]}" -r "$capture" -Y "_ws.malformed || _ws.expert" -T fields -e frame.number -e frame.protocols \
    >"$TMPD/wireshark_flagged" 2>/dev/null
  flagged=$(wc -l <"$TMPD/wireshark_flagged")
  # The dissection stopped in a RoCE layer: nothing after "infiniband" but plain data.
  ours=$(grep -cE $':(eth|ip|udp|infiniband)(:data)?$' "$TMPD/wireshark_flagged")
  expect_ge "$udp" 1 "RoCE frames captured"
  expect_eq "$bth" "$udp" "frames Wireshark decodes as RRoCE, of $udp"
  (( flagged == ours )) ||
    log "Wireshark's payload guesses flag $(( flagged - ours )) frames (e.g. $(grep -vE ':(eth|ip|udp|infiniband)(:data)?$' "$TMPD/wireshark_flagged" | head -n 1 | tr '\t' ' '))"
  expect_eq "$ours" 0 "frames Wireshark marks malformed or with expert info in the RoCE layers (frame, protocols: $(head -n 3 "$TMPD/wireshark_flagged" | tr '\t\n' ' ;'))"
}

# expect_capture_checked CAPTURE CHECKER_ARGS...: our parser and ICRC accept every frame.
expect_capture_checked() {
  local capture=$1
  shift
  "$RRDMA_CAPTURE_CHECK" "$capture" "$@" >"$TMPD/capture_check.out" 2>&1 ||
    fail "our checker refuses the capture: $(head -c 3000 "$TMPD/capture_check.out")"
  cat "$TMPD/capture_check.out"
}

# save_artifacts TEST FILES...: copies FILES to $RRDMA_INTEROP_ARTIFACTS/TEST/, which the
# first call of a run empties (what an earlier run left would mislead).
ARTIFACTS_EMPTIED=0
save_artifacts() {
  local test=$1
  shift
  [[ -n "${RRDMA_INTEROP_ARTIFACTS:-}" ]] || return 0
  local dest=$RRDMA_INTEROP_ARTIFACTS/$test
  if (( ! ARTIFACTS_EMPTIED )); then
    rm -rf -- "$dest"
    ARTIFACTS_EMPTIED=1
  fi
  mkdir -p "$dest" || return 0
  cp "$@" "$dest/" 2>/dev/null
  log "artifacts in $dest"
}
