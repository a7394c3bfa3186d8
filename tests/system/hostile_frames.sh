#!/usr/bin/env bash
# Malformed frames from a namespace, sent raw with AF_PACKET (rrdma_frame_sender): for
# each kind, the drop counter that names the fault grows by the number sent (exactly,
# where no other traffic can reach that counter), nothing is delivered, and the vnic
# still answers ping.
#
# The scene lives in a private namespace: with br_netfilter loaded and
# bridge-nf-call-iptables=1 (as on Docker hosts), the bridge itself validates IPv4
# headers and would drop most of these frames before the vnic sees them.
source "$(dirname "$0")/lib.sh"
init_test h
require_system
[[ -x "${RRDMA_FRAME_SENDER:-}" ]] || fail "RRDMA_FRAME_SENDER is not set"
use_private_host

VNIC_MAC=$(mac_for 1)
PEER_IP="$NET.20"  # the namespace's address (peer_scene)
UNUSED_IP="$NET.99"
N=25

peer_scene
vnic_up "$VNIC" --ip "$VNIC_IP/24" --mac "$VNIC_MAC" --bridge "$BR"
wait_reachable "$NS" "$VNIC_IP"

# kind | counter that must grow | exact or at_least. Ethernet-level multicast and unknown
# ethertypes also come from the kernel side of the TAP (IPv6 MLD, router solicitations),
# so those two are lower bounds.
CASES=(
  "not_for_us_mac        ethernet.drop_not_for_us        exact"
  "multicast             ethernet.drop_multicast         at_least"
  "unknown_ethertype     ethernet.drop_unknown_ethertype at_least"
  "arp_truncated         arp.drop_malformed              exact"
  "ipv4_truncated        ipv4.drop_truncated             exact"
  "ipv4_bad_version      ipv4.drop_bad_version           exact"
  "ipv4_bad_ihl          ipv4.drop_bad_ihl               exact"
  "ipv4_bad_length       ipv4.drop_bad_length            exact"
  "ipv4_bad_checksum     ipv4.drop_bad_checksum          exact"
  "ipv4_fragment_first   ipv4.drop_fragment              exact"
  "ipv4_fragment_later   ipv4.drop_fragment              exact"
  "ipv4_not_for_us       ipv4.drop_not_for_us            exact"
  "ipv4_unknown_protocol ipv4.drop_unknown_protocol      exact"
  "icmp_truncated        icmp.drop_malformed             exact"
  "icmp_bad_checksum     icmp.drop_bad_checksum          exact"
  "udp_truncated         udp.drop_truncated              exact"
  "udp_bad_length        udp.drop_bad_length             exact"
  "udp_bad_checksum      udp.drop_bad_checksum           exact"
  "garbage_ipv4          drops:ipv4,icmp,udp             exact"
  "garbage               drops:ethernet,arp,ipv4,icmp,udp at_least"
)

# counter_or_sum FILE SPEC: sets COUNT to one counter, or to a sum of drop counters.
counter_or_sum() {
  if [[ "$2" == drops:* ]]; then
    local layers
    IFS=, read -r -a layers <<<"${2#drops:}"
    drop_sum "$1" "${layers[@]}"
  else
    counter "$1" "$2"
  fi
}

send_frames() {  # send_frames KIND: sets SENT_OK=0 when the kernel refuses the kind
  local kind=$1 dst_ip=$VNIC_IP rc=0
  [[ "$kind" == ipv4_not_for_us ]] && dst_ip=$UNUSED_IP
  ip netns exec "$NS" "$RRDMA_FRAME_SENDER" --ifname "${PREFIX}na" --dst-mac "$VNIC_MAC" \
    --src-ip "$PEER_IP" --dst-ip "$dst_ip" --kind "$kind" --count "$N" --seed "$ID_NUM" \
    >"$TMPD/sender" 2>&1 || rc=$?
  (( rc == 0 || rc == 3 )) || fail "frame sender ($kind): $(cat "$TMPD/sender")"
  SENT_OK=$(( rc == 0 ))
}

check_kind() {  # check_kind KIND SPEC MODE
  local kind=$1 spec=$2 mode=$3 before after
  stats_snapshot "$VNIC" "$TMPD/before.json"
  counter_or_sum "$TMPD/before.json" "$spec"
  before=$COUNT
  send_frames "$kind"
  if (( ! SENT_OK )); then
    log "  $kind: the kernel will not send it ($(cat "$TMPD/sender")); left to the unit tests"
    return
  fi
  # The TAP delivers in order, so once the echo after the burst is answered, every frame
  # of the burst has been through the stack. The wait covers a slow reader as well.
  ping_all "$NS" 1 "$VNIC_IP"
  stats_snapshot "$VNIC" "$TMPD/after.json"
  counter_or_sum "$TMPD/after.json" "$spec"
  after=$COUNT
  if [[ $mode == exact ]]; then
    expect_eq "$(( after - before ))" "$N" "$kind: $spec grew by"
  else
    expect_ge "$(( after - before ))" "$N" "$kind: $spec grew by"
  fi
  # Dropped means dropped: nothing reached the UDP port table, no ICMP error was
  # provoked, and only the one echo of the ping was answered.
  expect_delta "$TMPD/before.json" "$TMPD/after.json" udp.drop_no_port 0
  expect_delta "$TMPD/before.json" "$TMPD/after.json" icmp.tx_port_unreachable 0
  expect_delta "$TMPD/before.json" "$TMPD/after.json" icmp.rx_echo_requests 1
  expect_delta "$TMPD/before.json" "$TMPD/after.json" icmp.tx_echo_replies 1
  log "  $kind x$N: $spec +$(( after - before )), still answering ping"
}

log "each kind of hostile frame, $N times, to $VNIC"
for case in "${CASES[@]}"; do
  read -r kind spec mode <<<"$case"
  check_kind "$kind" "$spec" "$mode"
done

log "a frame shorter than an Ethernet header"
send_frames eth_short
if (( SENT_OK )); then
  ping_all "$NS" 1 "$VNIC_IP"
  stats_snapshot "$VNIC" "$TMPD/short.json"
  counter "$TMPD/short.json" ethernet.drop_short
  expect_ge "$COUNT" "$N" "ethernet.drop_short"
else
  log "  the kernel refuses to send frames shorter than 14 bytes: left to the unit tests"
fi

log "the daemon survived it all"
status_snapshot "$VNIC" "$TMPD/status.json"
ping_all "$NS" 3 "$VNIC_IP"
