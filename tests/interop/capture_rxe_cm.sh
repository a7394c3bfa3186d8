#!/usr/bin/env bash
# Makes tests/data/rxe_cm.pcapng: rxe's own CM traffic (issue 18), for the golden tests of the
# CM codec and the GSI encapsulation (tests/rocev2/cm_capture_test.cpp). Not a ctest: run by
# hand (root, qemu, tshark) when the capture must be made again:
#
#   RRDMA_VNIC=build/cli/rrdma-vnic RRDMA_JSON_GET=build/tests/system/rrdma_json_get \
#   RRDMA_FRAME_SENDER=build/tests/system/rrdma_frame_sender \
#   RRDMA_CAPTURE_CHECK=build/tests/interop/rrdma_capture_check \
#     tests/interop/capture_rxe_cm.sh OUT.pcapng
#
# On one bridge: the rxe VM (GUEST_IP), a namespace with a kernel veth at SILENT_IP (it answers
# ARP, and nothing answers its CM MADs: the kernel has no RDMA) and one with a kernel veth at
# SENDER_IP from which rrdma_frame_sender sends REQs as rdma_cm makes them. (The stored
# capture was made with a vnic at SILENT_IP whose daemon discarded MADs then; now the daemon's
# CM answers, with REJ 8.) In the VM, in this order:
#   1. `rping -s` listens on TCP port 7174 (rdma_cm's wildcard listener);
#   2. the host sends a REQ for TCP port 7999, which nobody listens on: rxe answers REJ 8;
#   3. the host sends a REQ for port 7174: rping accepts, rxe sends a REP (and resends it
#      every 4 s, since no RTU comes);
#   4. `rping -c -a SILENT_IP` for 14 s: REQs every 6.1 s, none answered; killed, rdma_cm
#      destroys the id in REQ_SENT and the kernel sends REJ 4 (timeout);
#   5. `udaddy -s SILENT_IP` for 10 s: SIDR_REQs every 4 s, none answered.
# The capture is RoCE v2 (udp port 4791) only, about 18 frames (the REP is resent until the
# VM ends).
# Prints what the checker and tshark make of it.

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../system/lib.sh
source "$HERE/../system/lib.sh"
# shellcheck source=lib.sh
source "$HERE/lib.sh"

OUT=${1:?usage: capture_rxe_cm.sh OUT.pcapng}
OUT=$(realpath -m "$OUT")
[[ -n "${RRDMA_FRAME_SENDER:-}" && -x "$RRDMA_FRAME_SENDER" ]] || fail "RRDMA_FRAME_SENDER is not set"
require_interop
require_system
# shellcheck disable=SC2034  # read by init_test (system/lib.sh)
TEST_DEADLINE=600
interop_init x

BRIDGE=${PREFIX}b NS=${PREFIX}-p SILENT_NS=${PREFIX}-q
GUEST_IP=$NET.2 SILENT_IP=$NET.10 SENDER_IP=$NET.20
GUEST_MAC=$(mac_for 9)
make_bridge "$BRIDGE"
make_peer "$NS" "$BRIDGE" "${PREFIX}h" "${PREFIX}n" "$SENDER_IP/24"
make_peer "$SILENT_NS" "$BRIDGE" "${PREFIX}i" "${PREFIX}o" "$SILENT_IP/24"
start_capture "$BRIDGE" "$TMPD/all.pcapng"

script="rping -s -C 1 -p 7174 >/tmp/rping-s.out 2>&1 &
while ! rdma resource show cm_id | grep -q LISTEN; do sleep 0.2; done
rdma resource show cm_id
echo 'RRDMA-PEER-MARK listening' >/dev/ttyS2
sleep 8
timeout 14 rping -c -v -C 1 -a $SILENT_IP -p 7174; echo rping-c exit \$?
timeout 10 udaddy -s $SILENT_IP; echo udaddy exit \$?
sleep 1
cat /tmp/rping-s.out
rdma resource show cm_id
dmesg | tail -n 20"
peer start cm --netns "$HOST_NS" --bridge "$BRIDGE" --tap "${PREFIX}s" --ip "$GUEST_IP/24" --mac "$GUEST_MAC" \
  --timeout 300 -- "$script" || fail "VM did not start: $(cat "$TMPD/cm.err")"
await cm listening 240 || fail "rping -s never listened: $(cat "$TMPD/await.err")"
log "rping -s listens in the VM"
send_req() {  # send_req PORT SEED
  ip netns exec "$NS" "$RRDMA_FRAME_SENDER" --ifname "${PREFIX}n" --dst-mac "$GUEST_MAC" --src-ip "$SENDER_IP" \
    --dst-ip "$GUEST_IP" --kind cm_req --cm-port "$1" --cm-sport 40000 --seed "$2" || fail "frame sender: exit $?"
}
# The VM learns the sender's MAC by ARP before it answers.
ip netns exec "$NS" ping -c 1 -W 2 "$GUEST_IP" >/dev/null || log "no ping answer from the VM"
send_req 7999 1
sleep 2
send_req 7174 2
peer wait cm || log "the VM's command: exit $?"
sed 's/^/  vm: /' "$TMPD/cm.out"
stop_capture

cp "$TMPD/all.pcapng" "$OUT"
tshark -r "$OUT" -T fields -e frame.number -e ip.src -e ip.dst -e udp.srcport -e infiniband.mad.attributeid \
  -e infiniband.cm.rej.reason
"$RRDMA_CAPTURE_CHECK" "$OUT" || log "rrdma_capture_check refuses it"
log "capture in $OUT ($(stat -c %s "$OUT") bytes)"
