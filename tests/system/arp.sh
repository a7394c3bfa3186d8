#!/usr/bin/env bash
# ARP as a neighbour sees it (RFC 826, RFC 5227): the vnic announces itself when it comes
# up (a namespace that accepts gratuitous ARP learns it without asking), does not answer
# for addresses that are not its own, and counts and defends against a host that claims
# its address, keeping its own MAC.
source "$(dirname "$0")/lib.sh"
init_test a
require_system
[[ -x "${RRDMA_FRAME_SENDER:-}" ]] || fail "RRDMA_FRAME_SENDER is not set"

VNIC_MAC=$(mac_for 1)
peer_scene
# arp_accept=1: the namespace creates neighbour entries from gratuitous ARP.
ip netns exec "$NS" sh -c "echo 1 > /proc/sys/net/ipv4/conf/all/arp_accept; \
                           echo 1 > /proc/sys/net/ipv4/conf/${PREFIX}na/arp_accept" ||
  fail "cannot set arp_accept in $NS"

log "up: the announcement reaches $NS before it sends anything"
vnic_up "$VNIC" --ip "$VNIC_IP/24" --mac "$VNIC_MAC" --bridge "$BR"
wait_until 10 "$NS to learn $VNIC_IP from the vnic's announcement" \
  eval "ip -n '$NS' neigh show '$VNIC_IP' | grep -q 'lladdr $VNIC_MAC'"

log "a request for an address that is not the vnic's gets no answer"
wait_reachable "$NS" "$VNIC_IP"
stats_snapshot "$VNIC" "$TMPD/s0.json"
ip netns exec "$NS" ping -n -c 1 -W 2 "$NET.99" &>/dev/null && fail "$NET.99 answered; nobody has it"
ping_all "$NS" 1 "$VNIC_IP"
stats_snapshot "$VNIC" "$TMPD/s1.json"
expect_delta "$TMPD/s0.json" "$TMPD/s1.json" arp.rx_requests 1 at_least
expect_delta "$TMPD/s0.json" "$TMPD/s1.json" arp.tx_replies 0
ip -n "$NS" neigh show "$NET.99" | grep -q lladdr && fail "$NS resolved $NET.99 to a MAC"

log "$NS claims the vnic's address 5 times"
stats_snapshot "$VNIC" "$TMPD/s2.json"
ip netns exec "$NS" "$RRDMA_FRAME_SENDER" --ifname "${PREFIX}na" --dst-mac ff:ff:ff:ff:ff:ff \
  --src-ip "$VNIC_IP" --dst-ip "$VNIC_IP" --kind arp_claim --count 5 >"$TMPD/sender" 2>&1 ||
  fail "frame sender: $(cat "$TMPD/sender")"
ping_all "$NS" 1 "$VNIC_IP"
stats_snapshot "$VNIC" "$TMPD/s3.json"
expect_delta "$TMPD/s2.json" "$TMPD/s3.json" arp.conflicts 5
# The defence is an announcement of its own: a broadcast request for its address.
expect_delta "$TMPD/s2.json" "$TMPD/s3.json" arp.tx_requests 1 at_least
status_snapshot "$VNIC" "$TMPD/status.json"
json_value "$TMPD/status.json" mac
expect_eq "$VALUE" "$VNIC_MAC" "the vnic's MAC after the conflict"
"$RRDMA_JSON_GET" neighbours ip mac <"$TMPD/status.json" >"$TMPD/neighbours"
grep -q "^$VNIC_IP " "$TMPD/neighbours" && fail "the vnic learnt its own address from the claim"
ping_all "$NS" 2 "$VNIC_IP"
