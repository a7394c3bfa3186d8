#!/usr/bin/env bash
# GSI (QP 1) in the real daemon (docs/GSI.md). MADs sent raw from a namespace
# (rrdma_frame_sender: RoCE v2 frames built through rocev2::build_frame, ICRC right) reach the
# GSI endpoint and the connection manager behind it, which answers each REQ (for a service
# nobody listens on) with a REJ: `stats` layers gsi and cm count each one exactly, the transport
# engine sees none, and `trace --layer gsi` shows the endpoint's line with the MAD decoded. MADs with
# an application's Q_Key and MADs to QP 0 are dropped under their reasons, and the vnic still
# answers ping.
source "$(dirname "$0")/lib.sh"
init_test g
require_system
[[ -x "${RRDMA_FRAME_SENDER:-}" ]] || fail "RRDMA_FRAME_SENDER is not set"
use_private_host

VNIC_MAC=$(mac_for 1)
PEER_IP="$NET.20"  # the namespace's address (peer_scene)
N=10

peer_scene
vnic_up "$VNIC" --ip "$VNIC_IP/24" --mac "$VNIC_MAC" --bridge "$BR"
wait_reachable "$NS" "$VNIC_IP"

send_mads() {  # send_mads KIND COUNT
  ip netns exec "$NS" "$RRDMA_FRAME_SENDER" --ifname "${PREFIX}na" --dst-mac "$VNIC_MAC" \
    --src-ip "$PEER_IP" --dst-ip "$VNIC_IP" --kind "$1" --count "$2" >"$TMPD/sender" 2>&1 ||
    fail "frame sender ($1): $(cat "$TMPD/sender")"
  # The TAP delivers in order: once the echo after the burst is answered, the daemon has
  # handled every frame of it.
  ping_all "$NS" 1 "$VNIC_IP"
}

# batch KIND: sends N frames of KIND between two stats snapshots (before.json, after.json).
batch() {
  stats_snapshot "$VNIC" "$TMPD/before.json"
  send_mads "$1" "$N"
  stats_snapshot "$VNIC" "$TMPD/after.json"
}

log "$N well-formed REQs to QP 1: handed to the CM (never to the engine), each answered by a REJ"
batch gsi_mad
expect_delta "$TMPD/before.json" "$TMPD/after.json" gsi.rx_packets "$N"
expect_delta "$TMPD/before.json" "$TMPD/after.json" gsi.rx_mads "$N"
expect_delta "$TMPD/before.json" "$TMPD/after.json" cm.rx_req "$N"
expect_delta "$TMPD/before.json" "$TMPD/after.json" cm.tx_rej "$N"
expect_delta "$TMPD/before.json" "$TMPD/after.json" gsi.tx_mads "$N"
counter "$TMPD/after.json" roce_opcodes.ud_send_only.rx_packets  # the first RoCE packets of the test
expect_eq "$COUNT" "$N" "roce_opcodes.ud_send_only.rx_packets"
expect_delta "$TMPD/before.json" "$TMPD/after.json" roce.rx_bad_icrc 0
expect_delta "$TMPD/before.json" "$TMPD/after.json" engine.packets_received 0

log "$N MADs with an application's Q_Key, and $N to QP 0: dropped under their reasons"
batch gsi_bad_qkey
expect_delta "$TMPD/before.json" "$TMPD/after.json" gsi.rx_dropped_bad_qkey "$N"
expect_delta "$TMPD/before.json" "$TMPD/after.json" gsi.rx_mads 0
batch smi_mad
expect_delta "$TMPD/before.json" "$TMPD/after.json" gsi.rx_dropped_smi_qp "$N"
expect_delta "$TMPD/before.json" "$TMPD/after.json" gsi.rx_mads 0
expect_delta "$TMPD/before.json" "$TMPD/after.json" engine.packets_received 0

log "trace --layer gsi: the endpoint's line for a MAD, and the reason for a dropped one"
host "$RRDMA_VNIC" trace "$VNIC" --layer gsi --count 2 >"$TMPD/gsi.trace" 2>"$TMPD/gsi.err" &
TRACE_PID=$!
wait_until 10 "the trace to start" grep -q "tracing $VNIC" "$TMPD/gsi.err"
send_mads gsi_mad 1
send_mads gsi_bad_qkey 1
wait_until 20 "the trace to end after 2 events" sh -c "! kill -0 $TRACE_PID 2>/dev/null"
wait "$TRACE_PID" || fail "trace exited $?: $(cat "$TMPD/gsi.err")"
grep -qE '^  gsi   to the GSI endpoint: CM REQ tid 0x[0-9a-f]{16} ' \
  "$TMPD/gsi.trace" || fail "no gsi line for the MAD: $(cat "$TMPD/gsi.trace")"
grep -qE '^  gsi   dropped by the GSI endpoint: bad_qkey$' "$TMPD/gsi.trace" ||
  fail "no gsi line for the dropped MAD: $(cat "$TMPD/gsi.trace")"
grep -qE '^  (eth|ip|udp|roce) ' "$TMPD/gsi.trace" &&
  fail "--layer gsi let other layers through: $(cat "$TMPD/gsi.trace")"

log "the daemon survived it all"
ping_all "$NS" 3 "$VNIC_IP"
