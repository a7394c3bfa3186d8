#!/usr/bin/env bash
# `rrdma-vnic capture` (issue 8): two vnics and two namespaces (verbs_lib.sh's scene). A
# capture on vnic A runs while namespace A pings it (after forgetting its MAC, so that ARP
# goes out again) and the examples move RoCE v2 between vnic B and vnic A. Then:
#   - the file holds exactly the frames the daemon forwarded, and those plus the ones it
#     dropped are exactly the frames its stack counted in the window (ethernet rx + tx);
#   - tshark decodes every frame, with no malformed packet and no expert error;
#   - ARP, ICMP (5 requests, 5 replies) and RRoCE frames are all there, every UDP 4791
#     frame decodes as InfiniBand with the vnics' addresses;
#   - --count N writes exactly N frames and exits 0; a second capture at once is refused.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/verbs_lib.sh"
TEST_DEADLINE=${RRDMA_TEST_DEADLINE:-400}
init_test cp
require_system
command -v tshark >/dev/null || skip "no tshark"
EXAMPLES_DIR="${RRDMA_BUILD_DIR:?}/examples"
for program in rc_pingpong write_read_demo; do
  [[ -x "$EXAMPLES_DIR/$program" ]] || fail "$EXAMPLES_DIR/$program is not built"
done
verbs_scene

# start_capture FILE ARGS...: capture on vnic A in the background until it says it runs.
start_capture() {
  local file=$1
  shift
  "$RRDMA_VNIC" capture "$VNIC_A" -w "$file" "$@" >"$file.out" 2>"$file.err" &
  CAPTURE_PID=$!
  wait_until 10 "capture to start" grep -q "capturing on $VNIC_A" "$file.err"
}

# tshark_count FILE FILTER: frames matching a display filter.
tshark_count() {
  tshark -r "$1" -Y "$2" -T fields -e frame.number 2>"$TMPD/tshark.err" | wc -l
}

FILE="$TMPD/a.pcap"
start_capture "$FILE"

log "a second capture on the same vnic is refused"
expect_one_line_error "second capture" "$RRDMA_VNIC" capture "$VNIC_A" -w "$TMPD/second.pcap"
grep -q "already running" "$TMPD/err.err" || fail "second capture: $(cat "$TMPD/err.err")"

log "ARP and ping from $NS_A"
ip -n "$NS_A" neigh flush dev "${PREFIX}na"
ping_all "$NS_A" 5 "$VNIC_A_IP"

log "RoCE v2: write_read_demo and rc_pingpong between $VNIC_B and $VNIC_A"
run_ok() {  # run_ok NAME PROGRAM ARGS...: server on A, client on B, both exit 0
  local name=$1 program=$2 client_rc=0 server_rc=0
  shift 2
  ip netns exec "$NS_A" timeout 60 "$EXAMPLES_DIR/$program" --dev "$VNIC_A" --port "$PEER_PORT" "$@" \
    >"$TMPD/$name.server" 2>&1 &
  local server=$!
  ip netns exec "$NS_B" timeout 60 "$EXAMPLES_DIR/$program" --dev "$VNIC_B" --port "$PEER_PORT" "$@" \
    "$NS_A_IP" >"$TMPD/$name.client" 2>&1 || client_rc=$?
  wait_pid_bounded "$server" 30 || server_rc=$?
  (( client_rc == 0 && server_rc == 0 )) ||
    fail "$name: client exit $client_rc, server exit $server_rc: $(tail -n 3 "$TMPD/$name.client")"
}
run_ok write_read write_read_demo --message "captured $ID"
run_ok pingpong rc_pingpong --iters 20 --size 3000

log "stop the capture with SIGINT"
kill -INT "$CAPTURE_PID"
wait_pid_bounded "$CAPTURE_PID" 20 || fail "capture exited $?: $(cat "$FILE.err")"
log "  $(cat "$FILE.out")"

capture_summary "$FILE" frames_written;   written=$VALUE
capture_summary "$FILE" frames_forwarded; forwarded=$VALUE
capture_summary "$FILE" frames_dropped;   dropped=$VALUE
capture_summary "$FILE" nic_received;     received=$VALUE
capture_summary "$FILE" nic_sent;         sent=$VALUE
expect_eq "$written" "$forwarded" "frames in the file vs frames the daemon forwarded"
expect_eq "$(( forwarded + dropped ))" "$(( received + sent ))" "frames forwarded + dropped vs the stack's rx + tx in the window"
# A few hundred frames against an 8 MiB queue: nothing may be dropped here.
expect_eq "$dropped" 0 "frames dropped"

log "tshark reads every frame"
total=$(tshark_count "$FILE" "frame")
expect_eq "$total" "$written" "frames tshark reads"
expect_eq "$(tshark_count "$FILE" "_ws.malformed || _ws.expert.severity >= error")" 0 \
  "malformed frames or expert errors ($(tshark -r "$FILE" -Y "_ws.malformed || _ws.expert.severity >= error" 2>&1 | head -n 3))"

log "what tshark sees: ARP, ICMP, RRoCE"
expect_ge "$(tshark_count "$FILE" "arp.opcode == 1 && arp.dst.proto_ipv4 == $VNIC_A_IP")" 1 "ARP requests for vnic A"
expect_ge "$(tshark_count "$FILE" "arp.opcode == 2 && arp.src.proto_ipv4 == $VNIC_A_IP")" 1 "ARP replies from vnic A"
expect_eq "$(tshark_count "$FILE" "icmp.type == 8 && ip.dst == $VNIC_A_IP && ip.src == $NS_A_IP")" 5 "echo requests"
expect_eq "$(tshark_count "$FILE" "icmp.type == 0 && ip.src == $VNIC_A_IP && ip.dst == $NS_A_IP")" 5 "echo replies"
roce=$(tshark_count "$FILE" "udp.dstport == 4791")
expect_ge "$roce" 40 "RoCE v2 frames (20 round trips of 3000 bytes and a WRITE/READ)"
expect_eq "$(tshark_count "$FILE" "udp.dstport == 4791 && infiniband.bth.opcode")" "$roce" "RoCE frames with a decoded BTH"
expect_eq "$(tshark_count "$FILE" "udp.dstport == 4791 && !((ip.src == $VNIC_A_IP && ip.dst == $VNIC_B_IP) || (ip.src == $VNIC_B_IP && ip.dst == $VNIC_A_IP))")" 0 \
  "RoCE frames between other addresses"
# Every opcode the examples use shows up by name.
tshark -r "$FILE" -Y "udp.dstport == 4791" -T fields -e infiniband.bth.opcode 2>/dev/null | sort -un >"$TMPD/opcodes"
# 3000 bytes at path MTU 1024: SEND First, Middle, Last; then RDMA WRITE Only, RDMA READ
# Request, RDMA READ Response Only, Acknowledge.
for opcode in 0 1 2 10 12 16 17; do
  grep -qx "$opcode" "$TMPD/opcodes" || fail "no BTH opcode $opcode in the capture (saw: $(tr '\n' ' ' <"$TMPD/opcodes"))"
done

log "--count 4 writes exactly 4 frames and exits by itself"
COUNTED="$TMPD/count.pcap"
start_capture "$COUNTED" --count 4
ping_all "$NS_A" 3 "$VNIC_A_IP"
wait_pid_bounded "$CAPTURE_PID" 20 || fail "capture --count exited $?: $(cat "$COUNTED.err")"
expect_eq "$(tshark_count "$COUNTED" "frame")" 4 "frames in the --count 4 file"

log "the daemon counted the sessions and no lost client"
stats_snapshot "$VNIC_A" "$TMPD/stats.json"
counter "$TMPD/stats.json" capture.sessions; expect_eq "$COUNT" 2 "capture sessions"
counter "$TMPD/stats.json" capture.clients_lost; expect_eq "$COUNT" 0 "capture clients lost"
