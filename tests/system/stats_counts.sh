#!/usr/bin/env bash
# `rrdma-vnic stats` counts what was sent (issue 8): Debian's ib_write_bw -n 100 -s 8192
# between two vnics at path MTU 1024 (vnic MTU 1500), client on vnic B, server on vnic A.
# Each message is 8 packets: RDMA WRITE FIRST, 6 MIDDLE, LAST, and the last asks for an ACK.
#   clean run:   B sends exactly 100 FIRST, 600 MIDDLE, 100 LAST (beyond retransmissions,
#                which it counts per opcode) with 1024 payload bytes each; A receives what B
#                sent; A's ACKs are B's ACKs; without retransmissions between 1 and 100 of
#                them (an AckReq on each LAST, but the daemon answers a batch of received
#                frames with one ACK per QP: docs/TRANSPORT.md, "Held ACKs").
#   lossy run:   nftables on the bridge drops one RoCE frame in 40 towards A, at random
#                (a fixed period can line up with go-back-N: when B resends a whole
#                128-PSN window, every 40th frame can be the resent packet at the gap
#                again, each time, until B's retries run out). B's first
#                transmissions are still exactly 800; A receives B's packets minus the
#                frames nftables dropped; A sends PSN-sequence NAKs and B receives exactly
#                those; B retransmits.
# The per-QP counters of B's QP (its QPN from perftest's output) equal the vnic totals.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/verbs_lib.sh"
TEST_DEADLINE=${RRDMA_TEST_DEADLINE:-500}
init_test sc
require_system
command -v ib_write_bw >/dev/null || skip "no ib_write_bw (Debian's perftest; scripts/deps installs it)"
command -v nft >/dev/null || skip "no 'nft' command (nftables)"
command -v ss >/dev/null || skip "no 'ss' (iproute2)"
set_perftest_env
use_private_host
verbs_scene

ITERS=100
SIZE=8192
MTU=1024
PER_MESSAGE=$(( SIZE / MTU ))

# write_bw NAME: ib_write_bw, server on vnic A, client on vnic B; both must exit 0.
write_bw() {
  local name=$1 port=$(( PEER_PORT + ${2:-0} )) server_rc=0 client_rc=0
  ip netns exec "$NS_A" timeout 120 "$RRDMA_VNIC" exec --dev "$VNIC_A" -- "${PERFTEST_ENV[@]}" \
    ib_write_bw -d "$VNIC_A" -n "$ITERS" -s "$SIZE" -p "$port" >"$TMPD/$name.server" 2>&1 &
  local server=$!
  wait_until 30 "ib_write_bw to listen" ip netns exec "$NS_A" sh -c "ss -ltn 'sport = :$port' | grep -q LISTEN"
  ip netns exec "$NS_B" timeout 120 "$RRDMA_VNIC" exec --dev "$VNIC_B" -- "${PERFTEST_ENV[@]}" \
    ib_write_bw -d "$VNIC_B" -n "$ITERS" -s "$SIZE" -p "$port" "$NS_A_IP" >"$TMPD/$name.client" 2>&1 || client_rc=$?
  wait_pid_bounded "$server" 30 || server_rc=$?
  (( client_rc == 0 && server_rc == 0 )) ||
    fail "$name: client exit $client_rc, server exit $server_rc: $(tail -n 3 "$TMPD/$name.client")"
  grep -qE "Mtu +: +${MTU}\\[B\\]" "$TMPD/$name.client" || fail "$name: perftest did not use MTU $MTU: $(cat "$TMPD/$name.client")"
  # "local address: LID 0000 QPN 0x0011 PSN ..."
  B_QPN=$(( $(sed -nE 's/.*local address:.*QPN (0x[0-9a-fA-F]+).*/\1/p' "$TMPD/$name.client" | head -n 1) ))
  (( B_QPN > 0 )) || fail "$name: no QPN in perftest's output"
}

snapshot() {  # snapshot TAG: both vnics' stats
  stats_snapshot "$VNIC_A" "$TMPD/a.$1.json"
  stats_snapshot "$VNIC_B" "$TMPD/b.$1.json"
}
# delta SIDE FROM TO PATH: sets D (0 when the counter did not exist yet)
delta() {
  local before=0 after=0
  before=$("$RRDMA_JSON_GET" "$4" <"$TMPD/$1.$2.json" 2>/dev/null) || before=0
  after=$("$RRDMA_JSON_GET" "$4" <"$TMPD/$1.$3.json" 2>/dev/null) || after=0
  D=$(( after - before ))
}
OPS=(rc_rdma_write_first rc_rdma_write_middle rc_rdma_write_last)
EXPECTED=("$ITERS" $(( ITERS * (PER_MESSAGE - 2) )) "$ITERS")

check_run() {  # check_run FROM TO DROPPED
  local from=$1 to=$2 dropped=$3 i op tx retrans rx sent_total=0 received_total=0 retrans_total=0
  for i in "${!OPS[@]}"; do
    op=${OPS[$i]}
    delta b "$from" "$to" "roce_opcodes.$op.tx_packets"; tx=$D
    delta b "$from" "$to" "roce_opcodes.$op.tx_retransmitted"; retrans=$D
    delta a "$from" "$to" "roce_opcodes.$op.rx_packets"; rx=$D
    log "  $op: B sent $tx ($retrans retransmitted), A received $rx"
    expect_eq "$(( tx - retrans ))" "${EXPECTED[$i]}" "B's first transmissions of $op"
    delta b "$from" "$to" "roce_opcodes.$op.tx_bytes"
    expect_eq "$D" "$(( tx * MTU ))" "B's payload bytes of $op"
    sent_total=$(( sent_total + tx )); received_total=$(( received_total + rx )); retrans_total=$(( retrans_total + retrans ))
  done
  # A packet handed to the stack while ARP resolves waits in a short queue; what overflows
  # it is lost (and counted) like a dropped frame.
  delta b "$from" "$to" arp.queue_overflow; local overflow=$D
  expect_eq "$received_total" "$(( sent_total - dropped - overflow ))" \
    "WRITE packets A received (B's minus $dropped dropped on the bridge and $overflow in B's ARP queue)"
  delta a "$from" "$to" roce_acks.tx_acks; local a_acks=$D
  delta b "$from" "$to" roce_acks.rx_acks; local b_acks=$D
  expect_eq "$b_acks" "$a_acks" "ACKs B received vs ACKs A sent"
  delta a "$from" "$to" roce_acks.tx_nak_psn_sequence_error; A_NAKS=$D
  delta b "$from" "$to" roce_acks.rx_nak_psn_sequence_error
  expect_eq "$D" "$A_NAKS" "PSN-sequence NAKs B received vs A sent"
  delta b "$from" "$to" "qps.$B_QPN.tx_packets"
  expect_eq "$D" "$sent_total" "B's QP $B_QPN tx_packets vs the vnic's WRITE packets"
  delta b "$from" "$to" "qps.$B_QPN.rx_acks"
  expect_eq "$D" "$b_acks" "B's QP $B_QPN rx_acks"
  RETRANSMITTED=$retrans_total
  log "  ACKs $a_acks, NAKs $A_NAKS, retransmitted $retrans_total"
}

# vnic B learns vnic A's MAC first: packets sent while ARP resolves may overflow its queue.
ITERS=5 write_bw warm_up 2
log "clean run: ib_write_bw -n $ITERS -s $SIZE"
snapshot 0
write_bw clean 0
snapshot 1
check_run 0 1 0
if (( RETRANSMITTED == 0 )); then
  delta a 0 1 roce_acks.tx_acks; acks=$D
  expect_ge "$acks" 1 "ACKs A sent: at least one"
  expect_le "$acks" "$ITERS" "ACKs A sent: at most one per message (AckReq on each LAST)"
  delta a 0 1 roce_opcodes.rc_acknowledge.tx_packets
  expect_eq "$D" "$acks" "Acknowledge packets A sent"
else
  log "  (retransmissions on a loaded machine: the ACK count is checked only against B's)"
fi

log "lossy run: nftables drops one RoCE frame in 40 towards $VNIC_A_IP, at random"
host nft -f - <<NFT || fail "cannot load the nftables rule"
table bridge rrdma_stats {
  chain forward {
    type filter hook forward priority 0; policy accept;
    ether type ip ip daddr $VNIC_A_IP udp dport 4791 numgen random mod 40 == 0 counter drop
  }
}
NFT
snapshot 2
write_bw lossy 1
snapshot 3
dropped=$(host nft list table bridge rrdma_stats | sed -nE 's/.*counter packets ([0-9]+).*/\1/p')
log "  nftables dropped ${dropped:-?} frames"
expect_ge "${dropped:-x}" 1 "frames nftables dropped"
check_run 2 3 "$dropped"
expect_ge "$RETRANSMITTED" 1 "packets B retransmitted"
expect_ge "$A_NAKS" 1 "PSN-sequence NAKs A sent"
delta a 2 3 roce_decisions.out_of_sequence_nak_sent
expect_eq "$D" "$A_NAKS" "A's out-of-sequence decisions vs its NAKs on the wire"

log "the text form shows the opcode table and the QP"
vnic stats "$VNIC_B" >"$TMPD/b.txt" || fail "stats $VNIC_B"
grep -qE "^  rc_rdma_write_middle +[0-9]+" "$TMPD/b.txt" || fail "no opcode row in: $(head -c 600 "$TMPD/b.txt")"
grep -q "^qp $B_QPN:" "$TMPD/b.txt" || fail "no block for QP $B_QPN"
