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
# shellcheck source=lib.sh
source "$HERE/lib.sh"
readonly ITERATIONS=20 SIZE=3000 PORT=18515

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

# ---------------------------------------------------------------------------------------

require_interop
interop_init x
BRIDGE=${PREFIX}b
make_bridge "$BRIDGE"
SERVER_IP=$NET.2 CLIENT_IP=$NET.3
start_capture "$BRIDGE" "$TMPD/rxe_rc_pingpong.pcapng"

pingpong="ibv_rc_pingpong -g \$RRDMA_GID_INDEX -n $ITERATIONS -s $SIZE"
# The server first burns a QPN (a client with nobody to talk to creates its QP, then fails
# to connect), so the two ends' QPNs differ: only then does the capture tell rxe's UDP
# source port rule (a function of both QPNs) apart from rules of one QPN.
burn_qpn="ibv_rc_pingpong -g \$RRDMA_GID_INDEX 127.0.0.1 >/dev/null 2>&1"
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
expect_capture_checked "$TMPD/rxe_rc_pingpong.pcapng" --expect-source "$SERVER_IP" --expect-source "$CLIENT_IP" \
  --qp-pair "$SERVER_QPN" "$CLIENT_QPN" --check-udp-ports
save_artifacts rxe_selftest "$TMPD/rxe_rc_pingpong.pcapng" "$TMPD/server.out" "$TMPD/client.out" \
  "$TMPD/capture_check.out"
