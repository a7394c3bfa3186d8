#!/usr/bin/env bash
# Issue 19: libfabric (Debian 12's 1.17, libfabric-bin) over vnics, under `rrdma-vnic exec`
# (docs/IBVERBS.md, "UCX and libfabric"):
#  1. `fi_info -p verbs` lists the vnic as a verbs device three ways: FI_EP_MSG over rdma_cm
#     (domain V: needs the shim's interface for the vnic's address), FI_EP_DGRAM (domain
#     V-dgram) and FI_EP_RDM (verbs;ofi_rxd); `fi_info -l` lists the verbs provider;
#  2. `fi_pingpong -p verbs` between two vnics, server in namespace A on vnic A, client in
#     namespace B on vnic B (its TCP control connection over the namespaces' veths), with -c
#     (every byte of every message checked): its default endpoint (dgram) and -e rdm; each
#     row exits 0 on both sides and the RoCE counters of both vnics grew by at least the
#     messages sent.
# fi_pingpong -e msg is not a row on TAP vnics: kernel TCP cannot share a vnic's address
# (docs/IBVERBS.md). With RRDMA_DEVICE_KIND=netdev (device_scene.sh) it is, with
# `-p "verbs;ofi_rxm" -e rdm`: both are DECLINED there, the verbs provider binding the MSG
# server's passive endpoint to "localhost" (docs/TESTING.md, "Two kinds of device").
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/verbs_lib.sh"
source "$(dirname "$0")/rdma_cm_lib.sh"
TEST_DEADLINE=${RRDMA_TEST_DEADLINE:-400}
init_test lf
cm_install_cleanup
require_system
for program in fi_info fi_pingpong stdbuf; do
  command -v "$program" >/dev/null || skip "no '$program': install Debian's libfabric-bin (scripts/deps does)"
done
cm_scene
KEEP_GOING=1

log "1. fi_info -l and -p verbs on $VNIC_A"
cm_run fi_info_l 60 "$NS_A" "$VNIC_A" fi_info -l
grep -qx "verbs:" "$TMPD/fi_info_l.out" || fail_case "fi_info -l lists no verbs provider: $(why "$TMPD/fi_info_l.out")"
cm_run fi_info 60 "$NS_A" "$VNIC_A" fi_info -p verbs
sed 's/^/  /' "$TMPD/fi_info.out" | grep -E "provider|domain|type|protocol"
# One "provider/domain/type/protocol" record per line, to match each as a whole.
records=$(awk '/provider:/ {if (r) print r; r=$2} /domain:|type:|protocol:/ {r = r " " $2} END {if (r) print r}' "$TMPD/fi_info.out")
for want in "verbs $VNIC_A FI_EP_MSG FI_PROTO_RDMA_CM_IB_RC" "verbs $VNIC_A-dgram FI_EP_DGRAM FI_PROTO_IB_UD" \
            "verbs;ofi_rxd $VNIC_A-dgram FI_EP_RDM FI_PROTO_RXD"; do
  grep -qxF "$want" <<<"$records" || fail_case "fi_info -p verbs lacks '$want' (records: $(tr '\n' '|' <<<"$records"))"
done

log "2. fi_pingpong -p verbs, $VNIC_A (namespace $NS_A) and $VNIC_B (namespace $NS_B)"
ITERATIONS=200
# pingpong_row NAME PROVIDER ARGS...: one pair of `fi_pingpong -p PROVIDER ARGS`; the
# server's control port is the next CM_PORT.
pingpong_row() {
  local name=$1 provider=$2 rc_server rc_client figure
  shift 2
  next_port
  stats_snapshot "$VNIC_A" "$TMPD/$name.a.before"
  stats_snapshot "$VNIC_B" "$TMPD/$name.b.before"
  cm_start "$name.server" "$NS_A" "$VNIC_A" timeout 120 fi_pingpong -p "$provider" "$@" -I "$ITERATIONS" -c -B "$CM_PORT"
  local server=$CM_PID
  # The control connection is TCP: the client may try before the server listens.
  wait_until 30 "fi_pingpong's server to listen on $CM_PORT" \
    eval "grep -q ':$(printf %04X "$CM_PORT") ' <(ip netns exec '$NS_A' cat /proc/net/tcp)"
  cm_run "$name.client" 120 "$NS_B" "$VNIC_B" fi_pingpong -p "$provider" "$@" -I "$ITERATIONS" -c -P "$CM_PORT" "$NS_A_IP"
  rc_client=$CM_RC
  cm_wait "$server" 60
  rc_server=$CM_RC
  stats_snapshot "$VNIC_A" "$TMPD/$name.a.after"
  stats_snapshot "$VNIC_B" "$TMPD/$name.b.after"
  figure=$(awk '$1 ~ /^[0-9]+[kmg]?$/ && $3 ~ /^=/ {f = $1 ": " $6 " MB/s, " $7 " us/xfer"} END {print f}' "$TMPD/$name.client.out")
  # The verbs provider of libfabric 1.17 gives a passive endpoint that has no address
  # (fi_pingpong's MSG server: no node, no service) the node "localhost", and rdma_bind_addr
  # of 127.0.0.1 fails as a kernel's does (no RDMA device has that GID): fi_getinfo -61. The
  # program's limit, not the device's; recorded with its words (docs/TESTING.md).
  if (( rc_server == 61 )) && grep -q "^fi_getinfo(): .*ret=-61 " "$TMPD/$name.server.out"; then
    row fi_pingpong "-p $provider $*" DECLINED "$(grep -m1 "^fi_getinfo()" "$TMPD/$name.server.out")"
    return
  fi
  if (( rc_server != 0 || rc_client != 0 )); then
    show_output "$name.server" "$rc_server"
    show_output "$name.client" "$rc_client"
    row fi_pingpong "-p $provider $*" FAIL "server $rc_server, client $rc_client: $(why "$TMPD/$name.client.out")"
    fail_case "fi_pingpong -p $provider $*: server exit $rc_server, client exit $rc_client"
    return
  fi
  # Every size sends ITERATIONS messages each way: each vnic received at least that many.
  expect_delta "$TMPD/$name.a.before" "$TMPD/$name.a.after" engine.packets_received "$ITERATIONS" at_least
  expect_delta "$TMPD/$name.b.before" "$TMPD/$name.b.after" engine.packets_received "$ITERATIONS" at_least
  row fi_pingpong "-p $provider $*" PASS "$figure"
}
pingpong_row dgram verbs
pingpong_row rdm verbs -e rdm
if [[ $DEVICE_KIND == netdev ]]; then
  # One address for TCP and RDMA: the client dials the server's one address, TCP for the
  # control connection and rdma_cm for the fabric's (MSG, and RDM through ofi_rxm over MSG).
  pingpong_row msg verbs -e msg
  pingpong_row rdm_rxm "verbs;ofi_rxm" -e rdm
fi

print_rows
finish_cases
log PASS
