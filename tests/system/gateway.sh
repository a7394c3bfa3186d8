#!/usr/bin/env bash
# --gateway: a host outside the vnic's /24 reaches it through a router namespace. With
# --gateway the vnic sends its replies to the router's MAC (learnt by ARP); without one
# the replies have no route and are counted as ipv4.drop_unroutable.
#
#   far (FAR.20/24) --veth-- router (FAR.1/24, NET.1/24) --veth-- bridge -- vnic (NET.10/24)
source "$(dirname "$0")/lib.sh"
init_test g
require_system

BR="${PREFIX}b"
VNIC="${PREFIX}v"
VNIC_IP="$NET.10"
ROUTER="${PREFIX}-r"
FAR="${PREFIX}-f"
# The far subnet comes from 10.228.0.0 - 10.254.255.0, above every test's own /24.
FAR_NET="10.$(( 228 + ID_NUM % 27 )).$(( (ID_NUM / 27) % 256 ))"

make_bridge "$BR"
make_peer "$ROUTER" "$BR" "${PREFIX}hr" "${PREFIX}nr" "$NET.1/24"
ip netns exec "$ROUTER" sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward' || fail "cannot enable forwarding"
register_netns "$FAR"
ip netns add "$FAR" || fail "cannot create namespace $FAR"
ip -n "$ROUTER" link add "${PREFIX}rf" type veth peer name "${PREFIX}fr" netns "$FAR" ||
  fail "cannot create the router-far veth"
ip -n "$ROUTER" addr add "$FAR_NET.1/24" dev "${PREFIX}rf" || fail "cannot address the router"
ip -n "$ROUTER" link set "${PREFIX}rf" up
ip -n "$FAR" link set lo up
ip -n "$FAR" addr add "$FAR_NET.20/24" dev "${PREFIX}fr" || fail "cannot address $FAR"
ip -n "$FAR" link set "${PREFIX}fr" up
ip -n "$FAR" route add default via "$FAR_NET.1" || fail "cannot route far through the router"

log "with --gateway $NET.1: $FAR_NET.20 reaches the vnic through the router"
vnic_up "$VNIC" --ip "$VNIC_IP/24" --gateway "$NET.1" --bridge "$BR"
status_snapshot "$VNIC" "$TMPD/status.json"
json_value "$TMPD/status.json" gateway
expect_eq "$VALUE" "$NET.1" "status gateway"
wait_reachable "$FAR" "$VNIC_IP"
stats_snapshot "$VNIC" "$TMPD/s0.json"
ping_all "$FAR" 3 "$VNIC_IP"
stats_snapshot "$VNIC" "$TMPD/s1.json"
expect_delta "$TMPD/s0.json" "$TMPD/s1.json" icmp.tx_echo_replies 3
status_snapshot "$VNIC" "$TMPD/status.json"
"$RRDMA_JSON_GET" neighbours ip mac <"$TMPD/status.json" >"$TMPD/neighbours"
router_mac=$(peer_mac "$ROUTER" "${PREFIX}nr")
grep -qx "$NET.1 $router_mac" "$TMPD/neighbours" ||
  fail "the vnic did not learn the gateway $NET.1 $router_mac: $(tr '\n' ';' <"$TMPD/neighbours")"
grep -q "^$FAR_NET.20 " "$TMPD/neighbours" && fail "the vnic holds an ARP entry for the off-link $FAR_NET.20"
vnic_down "$VNIC"

log "without a gateway: the replies to $FAR_NET.20 are unroutable"
vnic_up "$VNIC" --ip "$VNIC_IP/24" --bridge "$BR"
# The router learns the new daemon's MAC from its gratuitous ARP or by asking again.
ip -n "$ROUTER" neigh flush dev "${PREFIX}nr"
wait_reachable "$ROUTER" "$VNIC_IP"
stats_snapshot "$VNIC" "$TMPD/s2.json"
ip netns exec "$FAR" ping -n -q -c 3 -i 0.2 -W 1 "$VNIC_IP" >"$TMPD/ping.out" 2>&1 &&
  fail "$FAR_NET.20 got replies from a vnic without a gateway: $(tr '\n' ' ' <"$TMPD/ping.out")"
ping_all "$ROUTER" 1 "$VNIC_IP"   # in order after the three: they have been handled
stats_snapshot "$VNIC" "$TMPD/s3.json"
expect_delta "$TMPD/s2.json" "$TMPD/s3.json" icmp.rx_echo_requests 4
expect_delta "$TMPD/s2.json" "$TMPD/s3.json" icmp.tx_echo_replies 1
expect_delta "$TMPD/s2.json" "$TMPD/s3.json" ipv4.drop_unroutable 3
vnic_down "$VNIC"
expect_vnic_gone "$VNIC"
