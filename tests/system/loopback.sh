#!/usr/bin/env bash
# Two applications on ONE vnic, connected to each other: RoCE v2 to the vnic's own address
# never reaches the TAP (the stack loops it back, like Linux's loopback device) and every
# layer above sees it as a received packet.
#   1. the verbs peer over the C++ API, server and client both on the vnic: every data
#      case (RC, UC, UD) from 0 B to 1 MiB, payloads verified by the program, then the
#      error cases (wrong R_Key, RNR, ...) with their exact statuses;
#   2. Debian's unmodified ibv_rc_pingpong, ibv_ud_pingpong, ib_write_bw and ib_read_bw,
#      both ends on the vnic through `rrdma-vnic exec`;
#   3. `rrdma-vnic capture` holds each looped-back frame once (tshark decodes them) and its
#      totals add up; `rrdma-vnic trace` shows each when sent and when received;
#   4. the counters: the looped-back packets are counted and none went out on the TAP.
# The side channel of the programs is TCP over 127.0.0.1 in the test's own namespace.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/verbs_lib.sh"
TEST_DEADLINE=${RRDMA_TEST_DEADLINE:-600}
init_test lo
require_system
[[ -n "${RRDMA_VERBS_PEER:-}" && -x "$RRDMA_VERBS_PEER" ]] || fail "RRDMA_VERBS_PEER is not an executable: '${RRDMA_VERBS_PEER:-}'"
for program in ibv_rc_pingpong ibv_ud_pingpong ib_write_bw ib_read_bw; do
  command -v "$program" >/dev/null ||
    skip "no '$program': install Debian's ibverbs-utils and perftest (scripts/deps does)"
done

BR="${PREFIX}b"
VNIC="${PREFIX}v"
# The whole scene in a namespace of its own (lib.sh's host()), so that 127.0.0.1 and the
# side channel's ports are the test's alone.
use_private_host
make_bridge "$BR"
log "up $VNIC ($NET.10) on $BR, in namespace $HOST_NS"
vnic_up "$VNIC" --ip "$NET.10/24" --mac "$(mac_for 1)" --bridge "$BR" --mtu 9000
set_perftest_env
# Background programs are started as plain commands (not through the host() function,
# whose subshell would be what $! names), so that a kill reaches the program.
IN_HOST=(ip netns exec "$HOST_NS")
KEEP_GOING=1
PORT=$(( 20000 + ID_NUM % 20000 ))

stats_snapshot "$VNIC" "$TMPD/before.json"
# pair NAME SECONDS CMD...: CMD as server, then CMD 127.0.0.1 as client, both on the vnic;
# both must exit 0.
pair() {
  local name=$1 limit=$2 server_rc=0 client_rc=0
  shift 2
  "${IN_HOST[@]}" timeout --kill-after=5 "$limit" "$@" >"$TMPD/$name.server" 2>&1 &
  local server_pid=$!
  wait_listening "$HOST_NS" "$PORT" "$server_pid" || fail_case "$name: the server never listened on $PORT"
  "${IN_HOST[@]}" timeout --kill-after=5 "$limit" "$@" 127.0.0.1 >"$TMPD/$name.client" 2>&1 || client_rc=$?
  wait_pid_bounded "$server_pid" 30 || server_rc=$?
  sed "s/^/  [server] /" "$TMPD/$name.server" | tail -n 25
  sed "s/^/  [client] /" "$TMPD/$name.client" | tail -n 25
  (( server_rc == 0 && client_rc == 0 )) ||
    fail_case "$name: server exit $server_rc, client exit $client_rc (124: timed out)"
}

PEER=("$RRDMA_VERBS_PEER" --dev "$VNIC" --port "$PORT" --timeout 60)

log "the verbs peer, every data case, both ends on $VNIC"
"${IN_HOST[@]}" timeout 200 "${PEER[@]}" --server --case all --sizes 0,1,4097,65536,1M --seed 3 >"$TMPD/data.server" 2>&1 &
server_pid=$!
rc=0
"${IN_HOST[@]}" timeout 200 "${PEER[@]}" --connect 127.0.0.1 --case all --sizes 0,1,4097,65536,1M --seed 3 \
  >"$TMPD/data.client" 2>&1 || rc=$?
wait_pid_bounded "$server_pid" 30 || rc=$?
sed "s/^/  [client] /" "$TMPD/data.client"
(( rc == 0 )) || { sed "s/^/  [server] /" "$TMPD/data.server"; fail_case "data cases: exit $rc"; }

log "the verbs peer, the error cases"
"${IN_HOST[@]}" timeout 200 "${PEER[@]}" --server --case errors --seed 4 >"$TMPD/errors.server" 2>&1 &
server_pid=$!
rc=0
"${IN_HOST[@]}" timeout 200 "${PEER[@]}" --connect 127.0.0.1 --case errors --seed 4 >"$TMPD/errors.client" 2>&1 || rc=$?
wait_pid_bounded "$server_pid" 30 || rc=$?
sed "s/^/  [client] /" "$TMPD/errors.client"
(( rc == 0 )) || { sed "s/^/  [server] /" "$TMPD/errors.server"; fail_case "error cases: exit $rc"; }

EXEC=(${PERFTEST_ENV[@]+"${PERFTEST_ENV[@]}"} "$RRDMA_VNIC" exec --dev "$VNIC" --)
log "unmodified programs, both ends on $VNIC"
pair rc_pingpong 60 "${EXEC[@]}" ibv_rc_pingpong -d "$VNIC" -g 0 -p "$PORT" -n 500 -s 4096
grep -q "500 iters in" "$TMPD/rc_pingpong.client" || fail_case "ibv_rc_pingpong printed no summary"
pair ud_pingpong 60 "${EXEC[@]}" ibv_ud_pingpong -d "$VNIC" -g 0 -p "$PORT" -n 500 -s 1024
grep -q "500 iters in" "$TMPD/ud_pingpong.client" || fail_case "ibv_ud_pingpong printed no summary"
pair write_bw 90 "${EXEC[@]}" ib_write_bw -d "$VNIC" -x 0 -p "$PORT" -n 2000 -s 65536
grep -Eq "^ *65536 +2000 " "$TMPD/write_bw.client" || fail_case "ib_write_bw printed no result line"
pair read_bw 90 "${EXEC[@]}" ib_read_bw -d "$VNIC" -x 0 -p "$PORT" -n 2000 -s 65536
grep -Eq "^ *65536 +2000 " "$TMPD/read_bw.client" || fail_case "ib_read_bw printed no result line"

log "capture: a looped-back frame is in the file once, and the totals add up"
FILE="$TMPD/lo.pcap"
"${IN_HOST[@]}" "$RRDMA_VNIC" capture "$VNIC" -w "$FILE" >"$FILE.out" 2>"$FILE.err" &
capture_pid=$!
wait_until 10 "capture to start" grep -q "capturing on $VNIC" "$FILE.err"
TRACE="$TMPD/lo.trace"
"${IN_HOST[@]}" timeout 60 "$RRDMA_VNIC" trace "$VNIC" --layer roce --layer qp --count 40 >"$TRACE" 2>"$TRACE.err" &
trace_pid=$!
wait_until 10 "trace to start" grep -q "tracing $VNIC" "$TRACE.err"
pair captured 60 "${EXEC[@]}" ibv_rc_pingpong -d "$VNIC" -g 0 -p "$PORT" -n 20 -s 100
kill -INT "$capture_pid"
wait_pid_bounded "$capture_pid" 20 || fail_case "capture exited $?: $(cat "$FILE.err")"
log "  $(cat "$FILE.out")"
wait_pid_bounded "$trace_pid" 20 || fail_case "trace exited $?: $(cat "$TRACE.err")"
# The trace shows a looped-back packet when it is sent and when it arrives, the engine's
# line after each, never as a packet held for ARP.
tx=$(grep -c " tx frame " "$TRACE")
rx=$(grep -c " rx frame " "$TRACE")
log "  trace: $tx tx frames, $rx rx frames in its first 40 events"
(( tx >= 1 && rx >= 1 )) || fail_case "the trace shows $tx sent and $rx received frames"
grep -q "waiting for ARP" "$TRACE" && fail_case "the trace took a looped-back packet for one held for ARP"
grep -q "RC SEND_ONLY" "$TRACE" || fail_case "the trace has no RC SEND_ONLY line"
capture_summary "$FILE" frames_written;   written=$VALUE
capture_summary "$FILE" frames_forwarded; forwarded=$VALUE
capture_summary "$FILE" frames_dropped;   dropped=$VALUE
capture_summary "$FILE" nic_received;     received=$VALUE
capture_summary "$FILE" nic_sent;         sent=$VALUE
# 20 round trips: 40 SENDs of one packet each and their 40 ACKs, each captured once.
(( written >= 80 )) || fail_case "the capture holds $written frames, expected at least 80"
(( forwarded + dropped == received + sent )) ||
  fail_case "frames forwarded $forwarded + dropped $dropped != the stack's received $received + sent $sent"
if command -v tshark >/dev/null; then
  roce=$(tshark -r "$FILE" -Y "udp.dstport == 4791 && ip.src == $NET.10 && ip.dst == $NET.10 && infiniband.bth.opcode" \
           -T fields -e frame.number 2>/dev/null | wc -l)
  (( roce >= 80 )) || fail_case "tshark decodes $roce RoCE frames from $NET.10 to itself, expected at least 80"
fi

log "the counters"
stats_snapshot "$VNIC" "$TMPD/after.json"
counter "$TMPD/after.json" ipv4.tx_loopback; looped=$COUNT
counter "$TMPD/after.json" ipv4.tx_loopback_full; full=$COUNT
counter "$TMPD/before.json" daemon.tap_tx_frames; tx_before=$COUNT
counter "$TMPD/after.json" daemon.tap_tx_frames; tx_after=$COUNT
log "ipv4.tx_loopback $looped, ipv4.tx_loopback_full $full, TAP frames sent $tx_before -> $tx_after"
# RC keeps at most 128 PSNs in flight per QP and a READ answers 64 responses a step: the
# 1024-packet queue never fills here.
(( full == 0 )) || fail_case "ipv4.tx_loopback_full is $full: the loopback queue overflowed"
# ib_write_bw alone moved 2000 x 16 packets of 4096 B through the loop.
(( looped >= 32000 )) || fail_case "ipv4.tx_loopback is $looped, expected at least 32000"
# The TAP carried none of it: at most an ARP announcement or answer or two.
(( tx_after - tx_before <= 4 )) || fail_case "the TAP sent $(( tx_after - tx_before )) frames during the test"

finish_cases
