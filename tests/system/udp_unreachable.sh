#!/usr/bin/env bash
# A UDP datagram to a port nobody listens on is answered with ICMP port unreachable
# (RFC 1122 §4.1.3.1, RFC 792), which a connected socket on the sender sees as
# ECONNREFUSED. A burst is answered or rate limited (RFC 1812 §4.3.2.8), never lost
# from the counters.
source "$(dirname "$0")/lib.sh"
init_test u
require_system
[[ -x "${RRDMA_UDP_PROBE:-}" ]] || fail "RRDMA_UDP_PROBE is not set"

CLOSED_PORT=9
BURST=40

# ns_icmp_counter NETNS FIELD: sets COUNT to the namespace kernel's Icmp FIELD counter
# from /proc/net/snmp (e.g. InDestUnreachs: ICMP destination unreachables it accepted).
ns_icmp_counter() {
  COUNT=$(ip netns exec "$1" awk -v field="$2" '
    $1 == "Icmp:" && !header { for (i = 2; i <= NF; i++) column[$i] = i; header = 1; next }
    $1 == "Icmp:" && header { print $column[field]; exit }' /proc/net/snmp)
  [[ "$COUNT" =~ ^[0-9]+$ ]] || fail "no Icmp $2 in /proc/net/snmp of $1"
}

peer_scene
vnic_up "$VNIC" --ip "$VNIC_IP/24" --bridge "$BR"
wait_reachable "$NS" "$VNIC_IP"

log "one datagram to port $CLOSED_PORT: the sender sees ECONNREFUSED"
stats_snapshot "$VNIC" "$TMPD/s0.json"
ip netns exec "$NS" "$RRDMA_UDP_PROBE" refused "$VNIC_IP" "$CLOSED_PORT" 3000 >"$TMPD/probe" ||
  fail "connected UDP socket: $(cat "$TMPD/probe")"
stats_snapshot "$VNIC" "$TMPD/s1.json"
expect_delta "$TMPD/s0.json" "$TMPD/s1.json" udp.drop_no_port 1
expect_delta "$TMPD/s0.json" "$TMPD/s1.json" icmp.tx_port_unreachable 1

log "a burst of $BURST: each one is answered or counted as rate limited"
ns_icmp_counter "$NS" InDestUnreachs; unreachables0=$COUNT
ns_icmp_counter "$NS" InCsumErrors; csum_errors0=$COUNT
ip netns exec "$NS" "$RRDMA_UDP_PROBE" burst "$VNIC_IP" "$CLOSED_PORT" "$BURST" >"$TMPD/probe" ||
  fail "burst: $(cat "$TMPD/probe")"
# The datagrams are processed after sendto returns: wait until all are counted.
counter "$TMPD/s1.json" udp.drop_no_port
wait_until 10 "udp.drop_no_port to count the burst" \
  counter_at_least "$VNIC" udp.drop_no_port "$(( COUNT + BURST ))"
ping_all "$NS" 1 "$VNIC_IP"
stats_snapshot "$VNIC" "$TMPD/s2.json"
expect_delta "$TMPD/s1.json" "$TMPD/s2.json" udp.drop_no_port "$BURST"
counter "$TMPD/s1.json" icmp.tx_port_unreachable; sent0=$COUNT
counter "$TMPD/s2.json" icmp.tx_port_unreachable; sent1=$COUNT
counter "$TMPD/s1.json" icmp.port_unreachable_rate_limited; limited0=$COUNT
counter "$TMPD/s2.json" icmp.port_unreachable_rate_limited; limited1=$COUNT
expect_eq "$(( sent1 - sent0 + limited1 - limited0 ))" "$BURST" \
  "port unreachables sent + rate limited for a burst of $BURST"
expect_ge "$(( sent1 - sent0 ))" 1 "port unreachables sent during the burst"
log "  $(( sent1 - sent0 )) sent, $(( limited1 - limited0 )) rate limited"
# The sender's kernel accepted every one the vnic sent: checksums and quoted headers good.
ns_icmp_counter "$NS" InDestUnreachs
expect_eq "$(( COUNT - unreachables0 ))" "$(( sent1 - sent0 ))" "ICMP unreachables accepted by $NS"
ns_icmp_counter "$NS" InCsumErrors
expect_eq "$(( COUNT - csum_errors0 ))" 0 "ICMP checksum errors seen by $NS"

log "the vnic still answers ping"
ping_all "$NS" 2 "$VNIC_IP"
