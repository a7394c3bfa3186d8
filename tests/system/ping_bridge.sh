#!/usr/bin/env bash
# A bridge, two namespaces with a veth port each, and the vnic on the same bridge, all in
# one /24. Each namespace pings the vnic (small and 1400-byte echoes); the namespace's
# neighbour table learns the vnic's MAC, the vnic learns the namespaces' MACs, and the
# vnic's counters grow by exactly the echoes sent.
source "$(dirname "$0")/lib.sh"
init_test p
require_system

BR="${PREFIX}b"
VNIC="${PREFIX}v"
VNIC_IP="$NET.10"
VNIC_MAC=$(mac_for 1)

make_bridge "$BR"
make_peer "${PREFIX}-a" "$BR" "${PREFIX}ha" "${PREFIX}na" "$NET.20/24"
make_peer "${PREFIX}-b" "$BR" "${PREFIX}hb" "${PREFIX}nb" "$NET.30/24"

log "up $VNIC $VNIC_IP/24 ($VNIC_MAC) on $BR"
vnic_up "$VNIC" --ip "$VNIC_IP/24" --mac "$VNIC_MAC" --bridge "$BR"

status_snapshot "$VNIC" "$TMPD/status0.json"
json_value "$TMPD/status0.json" name;   expect_eq "$VALUE" "$VNIC" "status name"
json_value "$TMPD/status0.json" mac;    expect_eq "$VALUE" "$VNIC_MAC" "status mac"
json_value "$TMPD/status0.json" ip;     expect_eq "${VALUE%/*}" "$VNIC_IP" "status ip"
json_value "$TMPD/status0.json" bridge; expect_eq "$VALUE" "$BR" "status bridge"
json_value "$TMPD/status0.json" mtu;    expect_eq "$VALUE" 1500 "status mtu"
json_value "$TMPD/status0.json" pid
pid_alive "$VALUE" || fail "status pid $VALUE is not a running process"
link_exists "$VNIC" || fail "no link $VNIC"
ip -d link show "$VNIC" | grep -q "master $BR" || fail "$VNIC is not a port of $BR"

for side in a b; do
  ns="${PREFIX}-$side"
  log "$ns pings the vnic"
  wait_reachable "$ns" "$VNIC_IP"
  stats_snapshot "$VNIC" "$TMPD/before-$side.json"
  ping_all "$ns" 3 "$VNIC_IP"
  ping_all "$ns" 2 "$VNIC_IP" -s 1400
  grep -q "1400(1428) bytes" "$TMPD/ping.out" || fail "the 1400-byte ping did not send 1428-byte packets"
  stats_snapshot "$VNIC" "$TMPD/after-$side.json"
  # Nothing but these pings sends IPv4 to the vnic: the counts are exact.
  expect_delta "$TMPD/before-$side.json" "$TMPD/after-$side.json" icmp.rx_echo_requests 5
  expect_delta "$TMPD/before-$side.json" "$TMPD/after-$side.json" icmp.tx_echo_replies 5
  expect_delta "$TMPD/before-$side.json" "$TMPD/after-$side.json" ipv4.rx_packets 5
  expect_delta "$TMPD/before-$side.json" "$TMPD/after-$side.json" ipv4.tx_packets 5
  expect_delta "$TMPD/before-$side.json" "$TMPD/after-$side.json" ethernet.rx_frames 5 at_least
  expect_delta "$TMPD/before-$side.json" "$TMPD/after-$side.json" ethernet.tx_frames 5 at_least

  log "$ns has learnt the vnic's MAC"
  ip -n "$ns" neigh show "$VNIC_IP" >"$TMPD/neigh"
  grep -q "lladdr $VNIC_MAC" "$TMPD/neigh" ||
    fail "ip neigh in $ns: '$(cat "$TMPD/neigh")', expected lladdr $VNIC_MAC"
done

log "the vnic has learnt both namespaces' MACs"
status_snapshot "$VNIC" "$TMPD/status1.json"
json_value "$TMPD/status1.json" neighbours
"$RRDMA_JSON_GET" neighbours ip mac <"$TMPD/status1.json" >"$TMPD/neighbours"
for side in a b; do
  ip_addr="$NET.$([[ $side == a ]] && echo 20 || echo 30)"
  mac=$(peer_mac "${PREFIX}-$side" "${PREFIX}n$side")
  grep -qx "$ip_addr $mac" "$TMPD/neighbours" ||
    fail "status neighbours lack $ip_addr $mac: $(tr '\n' ';' <"$TMPD/neighbours")"
done

log "down"
vnic_down "$VNIC"
expect_vnic_gone "$VNIC"
link_exists "$BR" || fail "down removed bridge $BR, which the vnic did not create"
