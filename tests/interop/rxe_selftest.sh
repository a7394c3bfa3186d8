#!/usr/bin/env bash
# The rdma_rxe peer is real: two peer VMs (Debian's kernel with rdma_rxe, under qemu) on a
# fresh bridge run ibv_rc_pingpong against each other, server in one, client in the other,
# both with `ibv_devinfo -v` first. Passes when both exit 0, each device is an active RoCE
# port, and tshark's capture on the bridge holds RoCE v2 from both that Wireshark decodes
# without a malformed packet or an expert note and that our own parser and ICRC accept,
# each frame with the UDP source port our encap would choose for the connection.
# The capture, the outputs and the checker's summary go to $RRDMA_INTEROP_ARTIFACTS.
# Environment: RRDMA_CAPTURE_CHECK, RRDMA_INTEROP_ARTIFACTS (tests/interop/CMakeLists.txt),
# RRDMA_INTEROP_CACHE (build-peer's cache, optional).

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../system/lib.sh
source "$HERE/../system/lib.sh"
readonly RUN_PEER=$HERE/run-peer BUILD_PEER=$HERE/build-peer
readonly ITERATIONS=20 SIZE=3000 PORT=18515

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
# What this test starts beyond lib.sh's links and namespaces: VMs and the capture.

VM_DIRS=()
BACKGROUND_PIDS=()
TSHARK_PID=""

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

start_capture() {  # start_capture FILE: RoCE v2 only, on the bridge in $HOST_NS
  # Not through host(): a function in the background is a subshell, and $! would name it,
  # not tshark (ip netns exec execs tshark, so here $! is tshark).
  ip netns exec "$HOST_NS" tshark -i "$BRIDGE" -f "udp port 4791" -w "$1" >"$TMPD/tshark.out" 2>"$TMPD/tshark.err" &
  TSHARK_PID=$!
  wait_until 30 "tshark to capture on $BRIDGE" grep -q "Capturing on" "$TMPD/tshark.err"
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

# peer ACTION NAME ARGS...: run-peer for the VM NAME, its files in $TMPD/NAME. In the
# background and waited for, so that the deadline's SIGTERM reaches our trap at once.
peer() {
  local action=$1 name=$2 rc=0
  shift 2
  "$RUN_PEER" "$action" --dir "$TMPD/$name" "$@" >"$TMPD/$name.out" 2>"$TMPD/$name.err" &
  local pid=$!
  BACKGROUND_PIDS+=("$pid")
  wait "$pid" || rc=$?
  return "$rc"
}

# ---------------------------------------------------------------------------------------
# Checks

expect_device() {  # expect_device NAME: ibv_devinfo -v shows an active RoCE port
  local out=$TMPD/$1.out
  grep -q "hca_id:[[:space:]]*rxe0" "$out" || fail "$1: ibv_devinfo shows no rxe0: $(head -c 600 "$out")"
  grep -q "state:[[:space:]]*PORT_ACTIVE" "$out" || fail "$1: port not active"
  grep -q "link_layer:[[:space:]]*Ethernet" "$out" || fail "$1: link layer is not Ethernet"
  grep -q "GID\[ *[0-9]*\]:[[:space:]]*::ffff:$2, RoCE v2" "$out" || fail "$1: no RoCE v2 GID for $2"
}

expect_pingpong() {  # expect_pingpong NAME: the full run completed
  grep -q "^$ITERATIONS iters in" "$TMPD/$1.out" ||
    fail "$1: no '$ITERATIONS iters' line: $(tail -c 600 "$TMPD/$1.out")"
}

local_qpn() {  # local_qpn NAME: sets QPN from "  local address:  LID 0x0000, QPN 0x000011, ..."
  QPN=$(sed -n 's/^ *local address: .*QPN \(0x[0-9a-fA-F]*\),.*/\1/p' "$TMPD/$1.out")
  [[ "$QPN" =~ ^0x[0-9a-fA-F]+$ ]] || fail "$1: no QPN in its local address line"
}

# Wireshark decodes every UDP/4791 frame as RRoCE (an InfiniBand BTH), finds nothing
# malformed and raises no expert information.
expect_wireshark_clean() {
  local capture=$1 udp bth flagged
  udp=$(tshark -r "$capture" -Y "udp.dstport == 4791" 2>/dev/null | wc -l)
  bth=$(tshark -r "$capture" -Y "infiniband.bth" 2>/dev/null | wc -l)
  flagged=$(tshark -r "$capture" -Y "_ws.malformed || _ws.expert" 2>/dev/null | wc -l)
  expect_ge "$udp" 1 "RoCE frames captured"
  expect_eq "$bth" "$udp" "frames Wireshark decodes as RRoCE, of $udp"
  expect_eq "$flagged" 0 "frames Wireshark marks malformed or with expert info"
}

save_artifacts() {
  local dest=${RRDMA_INTEROP_ARTIFACTS:-}/rxe_selftest
  [[ -n "${RRDMA_INTEROP_ARTIFACTS:-}" ]] || return 0
  mkdir -p "$dest" || return 0
  cp "$TMPD/rxe_rc_pingpong.pcapng" "$TMPD/server.out" "$TMPD/client.out" "$TMPD/capture_check.out" "$dest/" 2>/dev/null
  log "artifacts in $dest"
}

# ---------------------------------------------------------------------------------------

require_interop
init_test x
trap interop_cleanup EXIT

started=$SECONDS
"$BUILD_PEER" >"$TMPD/build.out" 2>"$TMPD/build.err" || fail "build-peer: $(cat "$TMPD/build.err")"
log "peer built or cached in $(( SECONDS - started ))s: $(head -n1 "$TMPD/build.out")"

use_private_host
BRIDGE=${PREFIX}b
make_bridge "$BRIDGE"
SERVER_IP=$NET.2 CLIENT_IP=$NET.3
start_capture "$TMPD/rxe_rc_pingpong.pcapng"

pingpong="ibv_rc_pingpong -g \$RRDMA_GID_INDEX -n $ITERATIONS -s $SIZE"
# The server first burns a QPN (a client with nobody to talk to creates its QP, then fails
# to connect), so the two ends' QPNs differ: only then does the capture tell rxe's UDP
# source port rule (a function of both QPNs) apart from rules of one QPN.
burn_qpn="ibv_rc_pingpong -g \$RRDMA_GID_INDEX 127.0.0.1 >/dev/null 2>&1"
VM_DIRS+=("$TMPD/server" "$TMPD/client")
started=$SECONDS
peer start server --netns "$HOST_NS" --bridge "$BRIDGE" --tap "${PREFIX}s" --ip "$SERVER_IP/24" \
  --timeout 400 --ready-port "$PORT" --ready-timeout 200 -- "$burn_qpn; ibv_devinfo -v && $pingpong" ||
  fail "server VM did not get ready: $(cat "$TMPD/server.err")"
log "server VM ready in $(( SECONDS - started ))s"
peer run client --netns "$HOST_NS" --bridge "$BRIDGE" --tap "${PREFIX}c" --ip "$CLIENT_IP/24" \
  --timeout 300 -- "ibv_devinfo -v && $pingpong $SERVER_IP" ||
  fail "client: exit $?: $(tail -c 800 "$TMPD/client.out") $(cat "$TMPD/client.err")"
peer wait server || fail "server: exit $?: $(tail -c 800 "$TMPD/server.out") $(cat "$TMPD/server.err")"
log "both pingpongs done $(( SECONDS - started ))s after the server's boot began"
stop_capture

expect_device server "$SERVER_IP"
expect_device client "$CLIENT_IP"
expect_pingpong server
expect_pingpong client
expect_wireshark_clean "$TMPD/rxe_rc_pingpong.pcapng"
local_qpn server
SERVER_QPN=$QPN
local_qpn client
CLIENT_QPN=$QPN
log "QPNs: server $SERVER_QPN, client $CLIENT_QPN"
[[ "$SERVER_QPN" != "$CLIENT_QPN" ]] || log "note: equal QPNs, the UDP source port check is weaker"
"$RRDMA_CAPTURE_CHECK" "$TMPD/rxe_rc_pingpong.pcapng" --expect-source "$SERVER_IP" --expect-source "$CLIENT_IP" \
  --qp-pair "$SERVER_QPN" "$CLIENT_QPN" >"$TMPD/capture_check.out" 2>&1 ||
  fail "our checker refuses the capture: $(cat "$TMPD/capture_check.out")"
cat "$TMPD/capture_check.out"
save_artifacts
