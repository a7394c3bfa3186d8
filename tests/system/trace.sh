#!/usr/bin/env bash
# `rrdma-vnic trace` (issue 8): traces on both vnics while Debian's ib_write_bw (-n 5 -s
# 2048, path MTU 1024: each message is RDMA WRITE FIRST + LAST) runs twice from vnic B to
# vnic A, then once more with nftables dropping RoCE frames towards A. The lines must say:
#   A: each received frame layer by layer (eth with both MACs, ip with both addresses, udp
#      to 4791, the BTH by name with its RETH), the engine's decision (accepted), the DMA
#      it did at the RETH's address (and 1024 bytes further for the LAST), the ACK it sent
#      nested under the packet that asked for it, QP state transitions with their cause,
#      and with loss the out-of-sequence NAKs;
#   B: the ARP request and resolution of A's address, the completion of each WRITE, and
#      with loss its retransmissions with their reason (nested under the NAK that caused them).
# Also: --layer keeps only those layers, --count N stops after N events, --qp keeps one
# QP, and with nobody tracing the daemon formats nothing (trace.events_formatted).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/verbs_lib.sh"
TEST_DEADLINE=${RRDMA_TEST_DEADLINE:-500}
init_test tr
require_system
command -v ib_write_bw >/dev/null || skip "no ib_write_bw (Debian's perftest; scripts/deps installs it)"
command -v nft >/dev/null || skip "no 'nft' command (nftables)"
command -v ss >/dev/null || skip "no 'ss' (iproute2)"
set_perftest_env
use_private_host
verbs_scene
A_MAC=$(mac_for 1)
B_MAC=$(mac_for 2)

# start_trace NAME VNIC ARGS...: a trace in the background, once it says it runs.
TRACE_PIDS=()
start_trace() {
  local name=$1 dev=$2
  shift 2
  "$RRDMA_VNIC" trace "$dev" "$@" >"$TMPD/$name.trace" 2>"$TMPD/$name.err" &
  TRACE_PIDS+=($!)
  eval "PID_$name=$!"
  wait_until 10 "trace $name to start" grep -q "tracing $dev" "$TMPD/$name.err"
}
stop_trace() {  # stop_trace NAME
  local var="PID_$1"
  kill -INT "${!var}" 2>/dev/null
  wait_pid_bounded "${!var}" 20 || fail "trace $1 exited $?: $(cat "$TMPD/$1.err")"
}

PORT=$(( PEER_PORT + 100 ))
write_bw() {  # write_bw NAME: ib_write_bw -n 5 -s 2048, server on A, client on B
  local name=$1 server_rc=0 client_rc=0
  PORT=$(( PORT + 1 ))
  ip netns exec "$NS_A" timeout 120 "$RRDMA_VNIC" exec --dev "$VNIC_A" -- "${PERFTEST_ENV[@]}" \
    ib_write_bw -d "$VNIC_A" -n 5 -s 2048 -p "$PORT" >"$TMPD/$name.server" 2>&1 &
  local server=$!
  wait_until 30 "ib_write_bw to listen" ip netns exec "$NS_A" sh -c "ss -ltn 'sport = :$PORT' | grep -q LISTEN"
  ip netns exec "$NS_B" timeout 120 "$RRDMA_VNIC" exec --dev "$VNIC_B" -- "${PERFTEST_ENV[@]}" \
    ib_write_bw -d "$VNIC_B" -n 5 -s 2048 -p "$PORT" "$NS_A_IP" >"$TMPD/$name.client" 2>&1 || client_rc=$?
  wait_pid_bounded "$server" 30 || server_rc=$?
  (( client_rc == 0 && server_rc == 0 )) ||
    fail "$name: client exit $client_rc, server exit $server_rc: $(tail -n 3 "$TMPD/$name.client")"
  A_QPN=$(( $(sed -nE 's/.*local address:.*QPN (0x[0-9a-fA-F]+).*/\1/p' "$TMPD/$name.server" | head -n 1) ))
}
expect_line() {  # expect_line FILE ERE WHAT
  grep -qE -- "$2" "$TMPD/$1.trace" || fail "$3: no line of the $1 trace matches '$2' ($(head -c 1500 "$TMPD/$1.trace"))"
}

log "traces: all of A, all of B, A's roce+qp layers, A's first 3 events"
start_trace a "$VNIC_A"
start_trace b "$VNIC_B"
start_trace layers "$VNIC_A" --layer roce --layer qp
start_trace three "$VNIC_A" --count 3

log "ib_write_bw twice (the first run resolves ARP)"
write_bw first
write_bw second
# shellcheck disable=SC2154  # PID_three: set by start_trace through eval
wait_pid_bounded "$PID_three" 20 || fail "trace --count 3 exited $?: $(cat "$TMPD/three.err")"

log "a 3-second ib_write_bw: a trace with --qp of its server's QP, one of a QP that does not exist"
start_trace noqp "$VNIC_A" --qp 0xfffff0
PORT=$(( PORT + 1 ))
ip netns exec "$NS_A" timeout 120 "$RRDMA_VNIC" exec --dev "$VNIC_A" -- "${PERFTEST_ENV[@]}" \
  stdbuf -oL ib_write_bw -d "$VNIC_A" -D 3 -s 2048 -p "$PORT" >"$TMPD/timed.server" 2>&1 &
timed_server=$!  # stdbuf: perftest prints its QPN at once, not when it exits
wait_until 30 "ib_write_bw to listen" ip netns exec "$NS_A" sh -c "ss -ltn 'sport = :$PORT' | grep -q LISTEN"
ip netns exec "$NS_B" timeout 120 "$RRDMA_VNIC" exec --dev "$VNIC_B" -- "${PERFTEST_ENV[@]}" \
  ib_write_bw -d "$VNIC_B" -D 3 -s 2048 -p "$PORT" "$NS_A_IP" >"$TMPD/timed.client" 2>&1 &
timed_client=$!
wait_until 30 "the server's QPN" grep -q "local address:" "$TMPD/timed.server"
A_QPN=$(( $(sed -nE 's/.*local address:.*QPN (0x[0-9a-fA-F]+).*/\1/p' "$TMPD/timed.server" | head -n 1) ))
start_trace qp "$VNIC_A" --qp "$A_QPN"
wait_pid_bounded "$timed_client" 60 || fail "timed client exited $?: $(tail -n 3 "$TMPD/timed.client")"
wait_pid_bounded "$timed_server" 30 || fail "timed server exited $?: $(tail -n 3 "$TMPD/timed.server")"
for name in a b layers qp noqp; do stop_trace "$name"; done

log "A: a received WRITE, layer by layer"
D='[0-9a-f]'
expect_line a "^[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6} rx frame 1098 bytes$" "frame line"
expect_line a "^  eth   $B_MAC > $A_MAC 0x0800 IPv4$" "Ethernet line"
expect_line a "^  ip    $VNIC_B_IP > $VNIC_A_IP ttl 64 id 0x$D{4} len 1084 " "IPv4 line"
expect_line a "^  udp   [0-9]+ > 4791 len 1064 \(RoCE v2\)$" "UDP line"
expect_line a "^  roce  RC RDMA_WRITE_FIRST qp 0x$D{6} psn [0-9]+ reth\{va 0x$D+ rkey 0x$D+ len 2048\} payload 1024$" "BTH+RETH line"
expect_line a "^  roce  RC RDMA_WRITE_LAST qp 0x$D{6} psn [0-9]+ A payload 1024$" "LAST with the A bit"
expect_line a "^  qp    0x$D{6} accepted \(RC RDMA_WRITE_FIRST\) psn [0-9]+$" "decision line"
accepted=$(grep -cE "^  qp    0x$D{6} accepted \(RC RDMA_WRITE_FIRST\)" "$TMPD/a.trace")
expect_ge "$accepted" 10 "WRITE FIRST packets A accepted (2 runs of 5 messages, then a timed run)"
# The DMA goes where the RETH said, and the LAST 1024 bytes further.
checked=0
want=""
while IFS= read -r line; do
  if [[ $line =~ ^"  roce  RC RDMA_WRITE_FIRST".*" va 0x"([0-9a-f]+) ]]; then
    va=${BASH_REMATCH[1]}
    want=first
  elif [[ $line =~ ^"  dma   write 1024 bytes at 0x"([0-9a-f]+) ]]; then
    at=${BASH_REMATCH[1]}
    if [[ $want == first ]]; then
      expect_eq "$at" "$va" "the DMA address of a WRITE FIRST vs its RETH"
      want=last
    elif [[ $want == last ]]; then
      expect_eq "$(( 16#$at ))" "$(( 16#$va + 1024 ))" "the DMA address of a WRITE LAST (0x$at) vs its FIRST's 0x$va"
      want=""
    fi
    checked=$(( checked + 1 ))
  fi
done <"$TMPD/a.trace"
expect_ge "$checked" 20 "DMA lines checked"
log "A: the ACK nested under the LAST that asked for it"
grep -A12 -E "^  roce  RC RDMA_WRITE_LAST" "$TMPD/a.trace" >"$TMPD/nested"
grep -qE "^  tx frame 62 bytes$" "$TMPD/nested" || fail "no nested tx frame after a LAST: $(head -c 800 "$TMPD/nested")"
grep -qE "^    eth   $A_MAC > $B_MAC 0x0800 IPv4$" "$TMPD/nested" || fail "nested ACK: no eth line"
grep -qE "^    roce  RC ACKNOWLEDGE qp 0x$D{6} psn [0-9]+ aeth\{syndrome 0x$D{2} msn [0-9]+\} = ACK$" "$TMPD/nested" ||
  fail "nested ACK: no roce line"
grep -qE "^    qp    0x$D{6} sent \(ACK\) psn [0-9]+$" "$TMPD/nested" || fail "nested ACK: no decision line"
expect_line a "^[0-9:.]+ qp 0x$D{6} state RESET -> INIT \(modify_qp\)$" "QP state transition"
expect_line a "^[0-9:.]+ qp 0x$D{6} state INIT -> RTR \(modify_qp\)$" "QP state transition"

log "B: ARP, completions"
expect_line b "^  arp   who has $VNIC_A_IP\? tell $VNIC_B_IP$" "ARP request"
expect_line b "^  arp   $VNIC_A_IP is at $A_MAC$" "ARP reply"
expect_line b "^[0-9:.]+ arp resolved $VNIC_A_IP is at $A_MAC$" "ARP resolution"
expect_line b "^  verbs cqe send qp 0x$D{6} RDMA_WRITE success len 2048 wr_id 0x$D+$" "completion"
expect_line b "^  qp    0x$D{6} ACK received \(ACK\) psn [0-9]+$" "ACK decision"

log "filters: --layer roce --layer qp, --count 3, --qp"
grep -qE "^  (eth|ip|udp|arp|verbs) " "$TMPD/layers.trace" && fail "--layer roce,qp let other layers through"
grep -qE "^  roce  " "$TMPD/layers.trace" || fail "--layer roce shows no roce line"
grep -qE "^  qp    " "$TMPD/layers.trace" || fail "--layer qp shows no qp line"
expect_eq "$(grep -cE '^[0-9]' "$TMPD/three.trace")" 3 "events in the --count 3 trace"
expect_eq "$(grep -cE "qp 0x$D{6}" "$TMPD/qp.trace")" "$(grep -cE "qp 0x$(printf '%06x' "$A_QPN")|^  roce  .* qp 0x$D{6}" "$TMPD/qp.trace")" "lines of other QPs in the --qp trace"
expect_line qp "accepted \(RC RDMA_WRITE_FIRST\)" "the --qp trace"
expect_eq "$(grep -c . "$TMPD/noqp.trace")" 0 "lines in the trace of a QP that does not exist"

log "nobody tracing: the daemon formats nothing"
stats_snapshot "$VNIC_A" "$TMPD/s0.json"
write_bw quiet
stats_snapshot "$VNIC_A" "$TMPD/s1.json"
expect_delta "$TMPD/s0.json" "$TMPD/s1.json" trace.events_formatted 0
expect_delta "$TMPD/s0.json" "$TMPD/s1.json" roce.rx_packets 10 at_least

log "loss: nftables drops every 8th RoCE frame towards A; the traces show NAKs and retransmissions"
host nft -f - <<NFT || fail "cannot load the nftables rule"
table bridge rrdma_trace {
  chain forward {
    type filter hook forward priority 0; policy accept;
    ether type ip ip daddr $VNIC_A_IP udp dport 4791 numgen inc mod 8 == 3 counter drop
  }
}
NFT
start_trace lossa "$VNIC_A"
start_trace lossb "$VNIC_B"
write_bw lossy
stop_trace lossa
stop_trace lossb
expect_line lossa "^  qp    0x$D{6} out of sequence, NAK sent \(PSN beyond the expected one\) psn [0-9]+$" "out-of-sequence decision"
expect_line lossa "^    roce  RC ACKNOWLEDGE .* = NAK psn_sequence_error$" "the NAK on the wire"
expect_line lossb "^ +qp    0x$D{6} retransmitted \((NAK PSN sequence error|local ACK timeout)\) psn [0-9]+$" "retransmission with its reason"
expect_line lossb "^  roce  RC ACKNOWLEDGE .* = NAK psn_sequence_error$" "the NAK B received"
