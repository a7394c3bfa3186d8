#!/usr/bin/env bash
# --mtu: a vnic with MTU 9000 on a jumbo bridge answers an 8972-byte echo (a full
# 9000-byte IPv4 packet, DF set, so nothing fragments), reports MTU 9000, and its TAP
# has MTU 9000. One byte more does not fit the namespace's own MTU, so ping refuses it.
source "$(dirname "$0")/lib.sh"
init_test j
require_system

peer_scene
host ip link set "${PREFIX}ha" mtu 9000 || fail "cannot set MTU 9000 on ${PREFIX}ha"
ip -n "$NS" link set "${PREFIX}na" mtu 9000 || fail "cannot set MTU 9000 in $NS"

vnic_up "$VNIC" --ip "$VNIC_IP/24" --mtu 9000 --bridge "$BR"
status_snapshot "$VNIC" "$TMPD/status.json"
json_value "$TMPD/status.json" mtu
expect_eq "$VALUE" 9000 "status mtu"
expect_eq "$(cat "/sys/class/net/$VNIC/mtu")" 9000 "MTU of the TAP $VNIC"
expect_eq "$(cat "/sys/class/net/$BR/mtu")" 9000 "MTU of the bridge"

wait_reachable "$NS" "$VNIC_IP"
stats_snapshot "$VNIC" "$TMPD/s0.json"
ping_all "$NS" 2 "$VNIC_IP" -s 8972 -M do
grep -q "8972(9000) bytes" "$TMPD/ping.out" || fail "ping did not send 9000-byte packets"
stats_snapshot "$VNIC" "$TMPD/s1.json"
expect_delta "$TMPD/s0.json" "$TMPD/s1.json" icmp.rx_echo_requests 2
expect_delta "$TMPD/s0.json" "$TMPD/s1.json" icmp.tx_echo_replies 2
expect_delta "$TMPD/s0.json" "$TMPD/s1.json" ethernet.rx_bytes $(( 2 * (14 + 9000) )) at_least

vnic_down "$VNIC"
expect_vnic_gone "$VNIC"
