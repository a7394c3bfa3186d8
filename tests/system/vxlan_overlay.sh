#!/usr/bin/env bash
# Issue 20, item 7: two "hosts" joined by a VXLAN overlay (docs/OVERLAY.md).
#
# Host A and host B are network namespaces. Each has a bridge, a vnic whose daemon runs in
# that namespace (`rrdma-vnic up --bridge BR --uplink VXLAN`), and an application namespace
# on the bridge through a veth (the programs' TCP side channel). The hosts' only link is an
# underlay veth pair with its own /24 (MTU 9000); on each host a vxlan device (VNI, local,
# remote, dstport 4789, dev = the underlay veth) is a port of the bridge, so vnic A, vnic B
# and both application namespaces share one L2 segment, and everything between the hosts,
# RoCE v2 included, crosses the underlay inside VXLAN.
#
# Cases (each row of the table at the end):
#   mtu       the kernel gives the vxlan device 9000 - 50 = 8950 and refuses 8951; bridge,
#             TAPs and app veths are 8950; ibv_devinfo says active_mtu 4096 on both vnics
#             (8950 - 80 >= 4096)
#   ping      app A -> vnic B across the overlay, also 8950-byte packets with DF set
#   rc        ibv_rc_pingpong -m 4096 -s 65536 between the vnics
#   ud        ibv_ud_pingpong -s 4096
#   write_bw  ib_write_bw -n 200 (64 KiB messages), perftest reports MTU 4096
#   send_lat  ib_send_lat -n 200
#   underlay  for every RoCE case: nftables hooks (netdev egress and ingress) on host A's
#             underlay veth count the VXLAN packets whose inner packet is RoCE v2 (inner UDP
#             port 4791), and those with a full 4096-byte payload; each direction carried at
#             least what the receiving vnic counted (`rrdma-vnic stats`: roce.rx_packets),
#             the veth's own counters are at least as large, and not one outer packet was an
#             IP fragment. A second table prints these numbers per case.
#   1500      the underlay at the default 1500: the vxlan device keeps 8950 until it is set
#             to 1450 (it does not follow its lower device down); vnics at --mtu 1450 have
#             active_mtu 1024; ibv_rc_pingpong -m 1024 crosses with no full-size packet;
#             -m 4096 is refused by the vnic (above the port's active MTU)
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/verbs_lib.sh"
init_test x
require_system
for program in ibv_devinfo ibv_rc_pingpong ibv_ud_pingpong ib_write_bw ib_send_lat; do
  command -v "$program" >/dev/null ||
    skip "no '$program': install Debian's ibverbs-utils and perftest (scripts/deps does)"
done
command -v ss >/dev/null || skip "no 'ss' (iproute2)"
command -v nft >/dev/null || skip "no 'nft' (scripts/deps installs nftables)"
if [[ -n "${RRDMA_BUILD_DIR:-}" && ! -e "$RRDMA_BUILD_DIR/lib/rrdma-ibverbs/libibverbs.so.1" ]]; then
  skip "our libibverbs.so.1 is not built (no $RRDMA_BUILD_DIR/lib/rrdma-ibverbs/libibverbs.so.1)"
fi
probe="rrdma-vxprobe-$$"
register_netns "$probe"
ip netns add "$probe" || fail "cannot create namespace $probe"
if ! ip -n "$probe" link add vxprobe type vxlan id 1 dstport 4789 2>"$TMPD/probe.err"; then
  ip netns del "$probe"
  skip "the kernel cannot make a vxlan device: $(cat "$TMPD/probe.err")"
fi
# The underlay counters hook a device's egress (nftables' netdev family, Linux 5.16+).
ip -n "$probe" link add vxprobe0 type veth peer name vxprobe1
if ! ip netns exec "$probe" nft -f - 2>"$TMPD/probe.err" <<EOF
table netdev probe {
  chain egress {
    type filter hook egress device "vxprobe0" priority 0; policy accept;
    udp dport 4789 @th,416,16 4791 counter
  }
}
EOF
then
  ip netns del "$probe"
  skip "nftables cannot hook a device's egress (netdev family): $(head -n 1 "$TMPD/probe.err")"
fi
ip netns del "$probe"
set_perftest_env

# ---------------------------------------------------------------------------------------
# Names and numbers. Every link lives in one of the four namespaces (deleting them removes
# it); the vnics' names are global (/run/rrdma/NAME.*), hence the prefix everywhere.

HA="${PREFIX}-ha" HB="${PREFIX}-hb"        # the hosts
AA="${PREFIX}-aa" AB="${PREFIX}-ab"        # their application namespaces
BR_A="${PREFIX}ba" BR_B="${PREFIX}bb"      # one bridge per host
VX_A="${PREFIX}xa" VX_B="${PREFIX}xb"      # one vxlan device per host
UL_A="${PREFIX}ua" UL_B="${PREFIX}ub"      # the underlay veth pair
PV_A="${PREFIX}pa" PV_B="${PREFIX}pb"      # app veth, host side (a bridge port)
NV_A="${PREFIX}na" NV_B="${PREFIX}nb"      # app veth, application side
VNIC_A="${PREFIX}va" VNIC_B="${PREFIX}vb"
VNIC_A_IP="$NET.10" VNIC_B_IP="$NET.11" APP_A_IP="$NET.20" APP_B_IP="$NET.30"
# The underlay is private to the two host namespaces: any /24 does.
UNDER="172.31.$(( ID_NUM % 256 ))"
UL_A_IP="$UNDER.1" UL_B_IP="$UNDER.2"
VNI=$(( 1000 + ID_NUM % 100000 ))
VXLAN_PORT=4789
UNDERLAY_MTU=9000
VXLAN_OVERHEAD=50          # outer IPv4 20 + UDP 8 + VXLAN 8 + the inner Ethernet header 14
OVERLAY_MTU=$(( UNDERLAY_MTU - VXLAN_OVERHEAD ))
ROCE_HEADROOM=80           # what the vnic (and rxe) subtract before picking an IB MTU
PORT=$(( 20000 + ID_NUM % 20000 ))
NFT_TABLE="rrdma_${PREFIX}"
# The outer IPv4 length of a VXLAN packet whose RoCE packet carries 4096 payload bytes and
# no extension header (SEND FIRST/MIDDLE, WRITE MIDDLE): outer IPv4 20 + UDP 8 + VXLAN 8 +
# inner Ethernet 14 + inner IPv4 20 + UDP 8 + BTH 12 + 4096 + ICRC 4.
FULL_OUTER=$(( 20 + 8 + 8 + 14 + 20 + 8 + 12 + 4096 + 4 ))

on_host() {  # on_host NS COMMAND...: a command in a host namespace
  local ns=$1
  shift
  ip netns exec "$ns" "$@"
}

# make_host NS BRIDGE: a host namespace with its bridge (no bridge-netfilter, no IPv6).
make_host() {
  local ns=$1 bridge=$2 knob
  register_netns "$ns"
  ip netns add "$ns" || fail "cannot create namespace $ns"
  ip -n "$ns" link set lo up
  on_host "$ns" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6; echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6' 2>/dev/null
  for knob in iptables ip6tables arptables; do
    on_host "$ns" sh -c "[ -e /proc/sys/net/bridge/bridge-nf-call-$knob ] && echo 0 > /proc/sys/net/bridge/bridge-nf-call-$knob" 2>/dev/null
  done
  ip -n "$ns" link add "$bridge" type bridge forward_delay 0 stp_state 0 mcast_snooping 0 ||
    fail "cannot create bridge $bridge in $ns"
  ip -n "$ns" link set "$bridge" up || fail "cannot bring up $bridge in $ns"
}

# make_app HOST_NS BRIDGE APP_NS HOST_VETH APP_VETH ADDRESS/LEN MTU
make_app() {
  local hns=$1 bridge=$2 ns=$3 hveth=$4 pveth=$5 cidr=$6 mtu=$7
  register_netns "$ns"
  ip netns add "$ns" || fail "cannot create namespace $ns"
  on_host "$ns" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6; echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6' 2>/dev/null
  ip -n "$ns" link set lo up
  ip -n "$hns" link add "$hveth" mtu "$mtu" type veth peer name "$pveth" netns "$ns" mtu "$mtu" ||
    fail "cannot create veth $hveth/$pveth"
  ip -n "$hns" link set "$hveth" master "$bridge" up || fail "cannot put $hveth on $bridge"
  ip -n "$ns" addr add "$cidr" dev "$pveth" || fail "cannot address $pveth in $ns"
  ip -n "$ns" link set "$pveth" up || fail "cannot bring up $pveth in $ns"
}

link_mtu() { ip netns exec "$1" cat "/sys/class/net/$2/mtu"; }   # link_mtu NS IFACE

# ---------------------------------------------------------------------------------------
# The scene

log "hosts $HA, $HB; underlay $UL_A_IP <-> $UL_B_IP (MTU $UNDERLAY_MTU); VXLAN VNI $VNI, UDP $VXLAN_PORT; overlay $NET.0/24"
make_host "$HA" "$BR_A"
make_host "$HB" "$BR_B"
ip -n "$HA" link add "$UL_A" mtu "$UNDERLAY_MTU" type veth peer name "$UL_B" netns "$HB" mtu "$UNDERLAY_MTU" ||
  fail "cannot create the underlay veth pair"
{ ip -n "$HA" addr add "$UL_A_IP/24" dev "$UL_A" && ip -n "$HA" link set "$UL_A" up; } ||
  fail "cannot configure $UL_A"
{ ip -n "$HB" addr add "$UL_B_IP/24" dev "$UL_B" && ip -n "$HB" link set "$UL_B" up; } ||
  fail "cannot configure $UL_B"
# No MTU given: the kernel derives it from the lower device (dev).
ip -n "$HA" link add "$VX_A" type vxlan id "$VNI" local "$UL_A_IP" remote "$UL_B_IP" dstport "$VXLAN_PORT" dev "$UL_A" ||
  fail "cannot create $VX_A"
ip -n "$HB" link add "$VX_B" type vxlan id "$VNI" local "$UL_B_IP" remote "$UL_A_IP" dstport "$VXLAN_PORT" dev "$UL_B" ||
  fail "cannot create $VX_B"
make_app "$HA" "$BR_A" "$AA" "$PV_A" "$NV_A" "$APP_A_IP/24" "$OVERLAY_MTU"
make_app "$HB" "$BR_B" "$AB" "$PV_B" "$NV_B" "$APP_B_IP/24" "$OVERLAY_MTU"
wait_until 15 "the underlay to answer ping" ip netns exec "$HA" ping -n -c 1 -W 1 "$UL_B_IP"

# nftables in host A, on the underlay veth itself (netdev family): its egress hook sees
# what leaves for host B, its ingress hook what arrives from it, as on the wire (the inet
# hooks would see packets before fragmentation and after reassembly). The inner packet sits
# at fixed offsets from the outer UDP header (th): VXLAN 8, then the inner Ethernet header
# (type at byte 28), the inner IPv4 header (20 bytes, as the vnic sends it: protocol at
# byte 39) and the inner UDP header (destination port at byte 52).
INNER_ROCE="@th,224,16 0x0800 @th,312,8 17 @th,416,16 4791"
on_host "$HA" nft -f - <<EOF || fail "cannot load the nftables counters in $HA"
table netdev $NFT_TABLE {
  counter vxlan_out {}
  counter vxlan_in {}
  counter roce_out {}
  counter roce_in {}
  counter full_out {}
  counter full_in {}
  counter fragments {}
  chain egress {
    type filter hook egress device "$UL_A" priority 0; policy accept;
    ip frag-off & 0x3fff != 0 counter name fragments
    udp dport $VXLAN_PORT counter name vxlan_out
    udp dport $VXLAN_PORT $INNER_ROCE counter name roce_out
    udp dport $VXLAN_PORT $INNER_ROCE ip length >= $FULL_OUTER counter name full_out
  }
  chain ingress {
    type filter hook ingress device "$UL_A" priority 0; policy accept;
    ip frag-off & 0x3fff != 0 counter name fragments
    udp dport $VXLAN_PORT counter name vxlan_in
    udp dport $VXLAN_PORT $INNER_ROCE counter name roce_in
    udp dport $VXLAN_PORT $INNER_ROCE ip length >= $FULL_OUTER counter name full_in
  }
}
EOF

log "up $VNIC_A ($VNIC_A_IP) in $HA and $VNIC_B ($VNIC_B_IP) in $HB, MTU $OVERLAY_MTU, uplinks $VX_A, $VX_B"
# vnic_up runs `rrdma-vnic up` through lib.sh's host(): HOST_NS names the host namespace
# for that one call, so each daemon lives in its own host.
HOST_NS=$HA vnic_up "$VNIC_A" --ip "$VNIC_A_IP/24" --mac "$(mac_for 1)" --mtu "$OVERLAY_MTU" --bridge "$BR_A" --uplink "$VX_A"
HOST_NS=$HB vnic_up "$VNIC_B" --ip "$VNIC_B_IP/24" --mac "$(mac_for 2)" --mtu "$OVERLAY_MTU" --bridge "$BR_B" --uplink "$VX_B"

# ---------------------------------------------------------------------------------------
# The table and the counters

ROWS=()
KEEP_GOING=1
row() {  # row CASE WHAT RESULT FIGURE
  ROWS+=("$(printf '%-9s %-44s %-5s %s' "$1" "$2" "$3" "${4:-}")")
  log "$(printf '%-9s %-44s %-5s %s' "$1" "$2" "$3" "${4:-}")"
}
UNDER_ROWS=()

why() {  # the line of a program's output that says why it failed (else its last line)
  { grep -iE "fail|error|couldn|unable|invalid|not supported|larger" "$1" || tail -n 1 "$1"; } | tail -n 1 | tr -s ' \t' ' '
}

# snapshot TAG: both vnics' stats, host A's nftables counters (NAME=PACKETS lines) and the
# underlay veth's own packet counters.
snapshot() {
  stats_snapshot "$VNIC_A" "$TMPD/a.$1.json"
  stats_snapshot "$VNIC_B" "$TMPD/b.$1.json"
  on_host "$HA" nft list counters table netdev "$NFT_TABLE" >"$TMPD/nft.$1.raw" ||
    fail "cannot list the nftables counters"
  awk '$1 == "counter" {name = $2} $1 == "packets" {print name "=" $2}' "$TMPD/nft.$1.raw" >"$TMPD/nft.$1"
  {
    echo "veth_tx=$(on_host "$HA" cat "/sys/class/net/$UL_A/statistics/tx_packets")"
    echo "veth_rx=$(on_host "$HA" cat "/sys/class/net/$UL_A/statistics/rx_packets")"
  } >>"$TMPD/nft.$1"
}
# nft_delta FROM TO NAME: sets D
nft_delta() {
  local before after
  before=$(sed -n "s/^$3=//p" "$TMPD/nft.$1")
  after=$(sed -n "s/^$3=//p" "$TMPD/nft.$2")
  [[ "$before" =~ ^[0-9]+$ && "$after" =~ ^[0-9]+$ ]] || fail "no counter $3 ('$before', '$after')"
  D=$(( after - before ))
}
# stats_delta SIDE FROM TO layer.name: sets D
stats_delta() {
  local before after
  before=$("$RRDMA_JSON_GET" "$4" <"$TMPD/$1.$2.json" 2>/dev/null)
  after=$("$RRDMA_JSON_GET" "$4" <"$TMPD/$1.$3.json" 2>/dev/null)
  [[ "$before" =~ ^[0-9]+$ && "$after" =~ ^[0-9]+$ ]] || fail "no counter $4 in $1's stats ('$before', '$after')"
  D=$(( after - before ))
}

# check_underlay CASE FROM TO FULL_A_TO_B FULL_B_TO_A: the underlay carried every RoCE
# packet the vnics received in the interval, in VXLAN; at least FULL_* of them carried a
# full 4096-byte payload; no fragment. Adds a row to UNDER_ROWS.
check_underlay() {
  local name=$1 from=$2 to=$3 full_ab=$4 full_ba=$5 ok=1
  local a_tx a_rx b_tx b_rx roce_out roce_in full_out full_in veth_tx veth_rx frags overflow
  stats_delta a "$from" "$to" roce.tx_packets; a_tx=$D
  stats_delta a "$from" "$to" roce.rx_packets; a_rx=$D
  stats_delta b "$from" "$to" roce.tx_packets; b_tx=$D
  stats_delta b "$from" "$to" roce.rx_packets; b_rx=$D
  nft_delta "$from" "$to" roce_out; roce_out=$D
  nft_delta "$from" "$to" roce_in; roce_in=$D
  nft_delta "$from" "$to" full_out; full_out=$D
  nft_delta "$from" "$to" full_in; full_in=$D
  nft_delta "$from" "$to" fragments; frags=$D
  nft_delta "$from" "$to" veth_tx; veth_tx=$D
  nft_delta "$from" "$to" veth_rx; veth_rx=$D
  stats_delta a "$from" "$to" arp.queue_overflow; overflow=$D
  stats_delta b "$from" "$to" arp.queue_overflow; overflow="$overflow/$D"
  UNDER_ROWS+=("$(printf '%-9s %7s %7s %7s %7s %9s | %9s %9s %8s %8s %8s %8s %5s' "$name" \
    "$a_tx" "$a_rx" "$b_tx" "$b_rx" "$overflow" "$roce_out" "$roce_in" "$full_out" "$full_in" "$veth_tx" "$veth_rx" "$frags")")
  if (( a_rx == 0 || b_rx == 0 )); then
    fail_case "$name: a vnic received no RoCE packet (A $a_rx, B $b_rx)"; ok=0
  fi
  if (( roce_out < b_rx )); then
    fail_case "$name: vnic B received $b_rx RoCE packets, but only $roce_out left host A in VXLAN"; ok=0
  fi
  if (( roce_in < a_rx )); then
    fail_case "$name: vnic A received $a_rx RoCE packets, but only $roce_in reached host A in VXLAN"; ok=0
  fi
  if (( veth_tx < roce_out || veth_rx < roce_in )); then
    fail_case "$name: the underlay veth counted fewer packets (tx $veth_tx, rx $veth_rx) than nftables ($roce_out, $roce_in)"; ok=0
  fi
  if (( full_out < full_ab || full_in < full_ba )); then
    fail_case "$name: full-size RoCE packets in VXLAN: A->B $full_out (expected >= $full_ab), B->A $full_in (expected >= $full_ba)"; ok=0
  fi
  if (( frags != 0 )); then
    fail_case "$name: $frags IP fragments on the underlay"; ok=0
  fi
  (( ok ))
}

# pair CASE FULL_AB FULL_BA FIGURE_AWK PROGRAM ARGS...: the server in app namespace A on
# vnic A, the client in app namespace B on vnic B, connecting to app A over the overlay;
# both must exit 0 within 120 s. Then the underlay check for the interval.
FIGURE=""
pair() {
  local name=$1 full_ab=$2 full_ba=$3 figure_awk=$4 program=$5
  shift 5
  local args="$*" server="$TMPD/$name.server" client="$TMPD/$name.client" server_rc=0 client_rc=0 pid
  PORT=$(( PORT + 1 ))
  snapshot "$name.0"
  # shellcheck disable=SC2086
  ip netns exec "$AA" timeout 120 "$RRDMA_VNIC" exec --dev "$VNIC_A" -- "${PERFTEST_ENV[@]}" \
    "$program" -d "$VNIC_A" $args -p "$PORT" >"$server" 2>&1 &
  pid=$!
  if ! wait_listening "$AA" "$PORT" "$pid"; then
    wait_pid_bounded "$pid" 10 || server_rc=$?
    row "$name" "$program $args" FAIL "server did not listen (exit $server_rc): $(why "$server")"
    fail_case "$name: $program server did not start"
    return 1
  fi
  # shellcheck disable=SC2086
  ip netns exec "$AB" timeout 120 "$RRDMA_VNIC" exec --dev "$VNIC_B" -- "${PERFTEST_ENV[@]}" \
    "$program" -d "$VNIC_B" $args -p "$PORT" "$APP_A_IP" >"$client" 2>&1 || client_rc=$?
  wait_pid_bounded "$pid" 30 || server_rc=$?
  snapshot "$name.1"
  if (( client_rc != 0 || server_rc != 0 )); then
    row "$name" "$program $args" FAIL "client exit $client_rc: $(why "$client") / server exit $server_rc: $(why "$server")"
    fail_case "$name: $program client exit $client_rc, server exit $server_rc"
    sed "s/^/  [server] /" "$server" | tail -n 15
    sed "s/^/  [client] /" "$client" | tail -n 15
    return 1
  fi
  FIGURE=$(awk "$figure_awk" "$client")
  if check_underlay "$name" "$name.0" "$name.1" "$full_ab" "$full_ba"; then
    row "$name" "$program $args" PASS "$FIGURE"
  else
    row "$name" "$program $args" FAIL "$FIGURE; the underlay check failed (above)"
    return 1
  fi
}

PINGPONG_FIGURE='/Mbit\/sec/ {f = $(NF-1) " Mbit/s"} /usec\/iter/ {u = $(NF-1) " us/iter"} END {print f ", " u}'
BW_FIGURE='/^[[:space:]]*[0-9]+[[:space:]]+[0-9]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+/ {f = $1 " B: " $4 " MB/s"} END {print f}'
LAT_FIGURE='/^[[:space:]]*[0-9]+[[:space:]]+[0-9]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+/ {f = $1 " B: " $6 " us avg"} END {print f}'

# devinfo_mtu NS VNIC: sets ACTIVE_MTU from `ibv_devinfo` on VNIC, seen from NS.
devinfo_mtu() {
  ip netns exec "$1" timeout 30 "$RRDMA_VNIC" exec --dev "$2" -- "${PERFTEST_ENV[@]}" ibv_devinfo -d "$2" \
    >"$TMPD/devinfo.$2" 2>&1 || fail_case "ibv_devinfo on $2: $(why "$TMPD/devinfo.$2")"
  ACTIVE_MTU=$(awk '$1 == "active_mtu:" {print $2}' "$TMPD/devinfo.$2")
}

# ---------------------------------------------------------------------------------------
# mtu: the numbers of docs/OVERLAY.md, as the kernel and the vnics see them.

mtu_case() {
  local ok=1 vx_a vx_b br_a br_b refused=0 mtu_a mtu_b
  vx_a=$(link_mtu "$HA" "$VX_A") vx_b=$(link_mtu "$HB" "$VX_B")
  [[ "$vx_a" == "$OVERLAY_MTU" && "$vx_b" == "$OVERLAY_MTU" ]] ||
    { fail_case "vxlan MTUs $vx_a/$vx_b, expected $UNDERLAY_MTU - $VXLAN_OVERHEAD = $OVERLAY_MTU"; ok=0; }
  ip -n "$HA" link set "$VX_A" mtu $(( OVERLAY_MTU + 1 )) 2>/dev/null && refused=1
  if (( refused )); then
    fail_case "the kernel let $VX_A have MTU $(( OVERLAY_MTU + 1 )) over a $UNDERLAY_MTU-byte underlay"; ok=0
    ip -n "$HA" link set "$VX_A" mtu "$OVERLAY_MTU"
  fi
  br_a=$(link_mtu "$HA" "$BR_A") br_b=$(link_mtu "$HB" "$BR_B")
  [[ "$br_a" == "$OVERLAY_MTU" && "$br_b" == "$OVERLAY_MTU" ]] ||
    { fail_case "bridge MTUs $br_a/$br_b, expected $OVERLAY_MTU"; ok=0; }
  [[ "$(link_mtu "$HA" "$VNIC_A")" == "$OVERLAY_MTU" && "$(link_mtu "$HB" "$VNIC_B")" == "$OVERLAY_MTU" ]] ||
    { fail_case "the vnics' TAPs do not have MTU $OVERLAY_MTU"; ok=0; }
  grep -q "master $BR_A " <<<"$(ip -n "$HA" link show "$VX_A")" ||
    { fail_case "$VX_A is not a port of $BR_A after up --uplink"; ok=0; }
  grep -q "master $BR_B " <<<"$(ip -n "$HB" link show "$VX_B")" ||
    { fail_case "$VX_B is not a port of $BR_B after up --uplink"; ok=0; }
  devinfo_mtu "$AA" "$VNIC_A"; mtu_a=$ACTIVE_MTU
  devinfo_mtu "$AB" "$VNIC_B"; mtu_b=$ACTIVE_MTU
  [[ "$mtu_a" == 4096 && "$mtu_b" == 4096 ]] ||
    { fail_case "active_mtu '$mtu_a'/'$mtu_b', expected 4096 ($OVERLAY_MTU - $ROCE_HEADROOM = $(( OVERLAY_MTU - ROCE_HEADROOM )))"; ok=0; }
  local figure="underlay $UNDERLAY_MTU, vxlan $vx_a/$vx_b (+1 refused), bridge $br_a, active_mtu $mtu_a/$mtu_b"
  if (( ok )); then row mtu "kernel vxlan MTU, bridge, ibv_devinfo" PASS "$figure"
  else row mtu "kernel vxlan MTU, bridge, ibv_devinfo" FAIL "$figure"; fi
}

# ping: app A -> vnic B (ARP and ICMP over the overlay), then a full 8950-byte packet, DF set.
ping_case() {
  local big=$(( OVERLAY_MTU - 28 )) rtt
  if ! wait_until_quiet 20 ip netns exec "$AA" ping -n -c 1 -W 1 "$VNIC_B_IP"; then
    row ping "app A -> vnic B $VNIC_B_IP" FAIL "no answer within 20 s"
    fail_case "ping app A -> vnic B: no answer"
    return
  fi
  snapshot ping.0
  ip netns exec "$AA" timeout 30 ping -n -q -c 5 -i 0.2 -W 2 "$VNIC_B_IP" >"$TMPD/ping.small" 2>&1
  ip netns exec "$AA" timeout 30 ping -n -q -c 3 -i 0.2 -W 2 -s "$big" -M do "$VNIC_B_IP" >"$TMPD/ping.big" 2>&1
  snapshot ping.1
  if ! grep -q " 5 received" "$TMPD/ping.small"; then
    row ping "app A -> vnic B, 5 x 64 B" FAIL "$(tr '\n' ' ' <"$TMPD/ping.small")"
    fail_case "ping app A -> vnic B"
    return
  fi
  if ! grep -q " 3 received" "$TMPD/ping.big"; then
    row ping "app A -> vnic B, 3 x $OVERLAY_MTU B, DF" FAIL "$(tr '\n' ' ' <"$TMPD/ping.big")"
    fail_case "ping -s $big -M do app A -> vnic B"
    return
  fi
  stats_delta b ping.0 ping.1 icmp.rx_echo_requests
  local echoes=$D
  nft_delta ping.0 ping.1 vxlan_out
  local vx_out=$D
  if (( echoes != 8 || vx_out < 8 )); then
    row ping "app A -> vnic B" FAIL "vnic B counted $echoes echo requests (8 sent), $vx_out VXLAN packets left host A"
    fail_case "ping: vnic B counted $echoes echo requests, $vx_out VXLAN packets out"
    return
  fi
  rtt=$(sed -n 's|.*= [0-9.]*/\([0-9.]*\)/.*|\1|p' "$TMPD/ping.small")
  row ping "app A -> vnic B: 5 x 64 B, 3 x $OVERLAY_MTU B DF" PASS "rtt avg $rtt ms; B counted $echoes echoes, $vx_out VXLAN out"
}

# wait_until_quiet SECONDS COMMAND...: like wait_until, but returns 1 instead of failing.
wait_until_quiet() {
  local end=$(( SECONDS + $1 ))
  shift
  until "$@" &>/dev/null; do
    (( SECONDS < end )) || return 1
    sleep 0.2
  done
}

mtu_case
ping_case
# The side channel (app A <-> app B) crosses the overlay too.
wait_until 15 "app B reaching app A over the overlay" ip netns exec "$AB" ping -n -c 1 -W 1 "$APP_A_IP"

# Each side of rc_pingpong sends -n messages of 16 full packets; ud_pingpong -n datagrams of
# 4096 bytes each (DETH: 8 bytes more, still at least FULL_OUTER); ib_write_bw's client (B)
# writes -n messages of 16 packets to the server (A).
RC_N=5 UD_N=5 BW_N=200 LAT_N=200
pair rc $(( RC_N * 16 )) $(( RC_N * 16 )) "$PINGPONG_FIGURE" ibv_rc_pingpong -g 0 -m 4096 -s 65536 -n "$RC_N"
pair ud "$UD_N" "$UD_N" "$PINGPONG_FIGURE" ibv_ud_pingpong -g 0 -s 4096 -n "$UD_N"
if pair write_bw 0 $(( BW_N * 16 )) "$BW_FIGURE" ib_write_bw -x 0 -s 65536 -n "$BW_N"; then
  grep -qE "Mtu +: +4096\[B\]" "$TMPD/write_bw.client" ||
    fail_case "ib_write_bw did not use MTU 4096: $(grep -E 'Mtu' "$TMPD/write_bw.client")"
fi
pair send_lat 0 0 "$LAT_FIGURE" ib_send_lat -x 0 -n "$LAT_N"

# ---------------------------------------------------------------------------------------
# 1500: the default underlay. The vxlan device does not follow its lower device's MTU down,
# so it is set to 1450 by hand; the vnics are started again at 1450 (a vnic's MTU is fixed
# at up), and so are the app veths.

log "--- the underlay at MTU 1500"
vnic_down "$VNIC_A"
vnic_down "$VNIC_B"
ip -n "$HA" link set "$UL_A" mtu 1500 && ip -n "$HB" link set "$UL_B" mtu 1500 ||
  fail "cannot set the underlay's MTU to 1500"
stale_a=$(link_mtu "$HA" "$VX_A")
refused="1451 refused"
if ip -n "$HA" link set "$VX_A" mtu 1451 2>/dev/null; then
  refused="1451 ACCEPTED"
  fail_case "$VX_A accepted MTU 1451 over a 1500-byte underlay"
fi
for link in "$HA $VX_A" "$HB $VX_B" "$HA $PV_A" "$HB $PV_B" "$AA $NV_A" "$AB $NV_B"; do
  set -- $link
  ip -n "$1" link set "$2" mtu 1450 || fail "cannot set MTU 1450 on $2"
done
HOST_NS=$HA vnic_up "$VNIC_A" --ip "$VNIC_A_IP/24" --mac "$(mac_for 1)" --mtu 1450 --bridge "$BR_A" --uplink "$VX_A"
HOST_NS=$HB vnic_up "$VNIC_B" --ip "$VNIC_B_IP/24" --mac "$(mac_for 2)" --mtu 1450 --bridge "$BR_B" --uplink "$VX_B"
devinfo_mtu "$AA" "$VNIC_A"; mtu_a=$ACTIVE_MTU
devinfo_mtu "$AB" "$VNIC_B"; mtu_b=$ACTIVE_MTU
figure="vxlan kept $stale_a until set ($refused); bridge $(link_mtu "$HA" "$BR_A"); active_mtu $mtu_a/$mtu_b"
if [[ "$stale_a" == "$OVERLAY_MTU" && "$mtu_a" == 1024 && "$mtu_b" == 1024 ]]; then
  row 1500 "underlay 1500, vxlan 1450, vnics --mtu 1450" PASS "$figure"
else
  row 1500 "underlay 1500, vxlan 1450, vnics --mtu 1450" FAIL "$figure (expected $OVERLAY_MTU, 1024/1024)"
  fail_case "1500: $figure"
fi
wait_until 15 "app B reaching app A over the 1450 overlay" ip netns exec "$AB" ping -n -c 1 -W 1 "$APP_A_IP"
pair rc1024 0 0 "$PINGPONG_FIGURE" ibv_rc_pingpong -g 0 -m 1024 -s 65536 -n "$RC_N"
nft_delta rc1024.0 rc1024.1 full_out; full=$D
nft_delta rc1024.0 rc1024.1 full_in; full=$(( full + D ))
(( full == 0 )) || fail_case "rc1024: $full packets of a 4096-byte payload crossed a 1450-byte overlay"
# -m 4096 is above both ports' active MTU: each side's modify_qp to RTR is refused.
PORT=$(( PORT + 1 ))
ip netns exec "$AA" timeout 60 "$RRDMA_VNIC" exec --dev "$VNIC_A" -- "${PERFTEST_ENV[@]}" \
  ibv_rc_pingpong -d "$VNIC_A" -g 0 -m 4096 -s 65536 -n 1 -p "$PORT" >"$TMPD/rc4096.server" 2>&1 &
pid=$!
server_rc=0 client_rc=0
if wait_listening "$AA" "$PORT" "$pid"; then
  ip netns exec "$AB" timeout 60 "$RRDMA_VNIC" exec --dev "$VNIC_B" -- "${PERFTEST_ENV[@]}" \
    ibv_rc_pingpong -d "$VNIC_B" -g 0 -m 4096 -s 65536 -n 1 -p "$PORT" "$APP_A_IP" >"$TMPD/rc4096.client" 2>&1 ||
    client_rc=$?
fi
wait_pid_bounded "$pid" 30 || server_rc=$?
# The server gets the client's address first, so it is the one whose modify_qp fails; the
# client then reads no answer.
if (( client_rc != 0 && client_rc != 124 && server_rc != 0 && server_rc != 124 )) &&
   grep -q "Failed to modify QP to RTR" "$TMPD/rc4096.server"; then
  row rc4096 "ibv_rc_pingpong -g 0 -m 4096 (1450 overlay)" PASS "refused: server '$(grep -m1 "Failed to modify" "$TMPD/rc4096.server")', exit $server_rc/$client_rc"
else
  row rc4096 "ibv_rc_pingpong -g 0 -m 4096 (1450 overlay)" FAIL "server exit $server_rc: $(why "$TMPD/rc4096.server") / client exit $client_rc: $(why "$TMPD/rc4096.client")"
  fail_case "rc4096 over the 1450 overlay was not refused at RTR"
  sed "s/^/  [server] /" "$TMPD/rc4096.server"
  sed "s/^/  [client] /" "$TMPD/rc4096.client"
fi

echo
log "--- what ran (hosts in namespaces, RoCE v2 in VXLAN VNI $VNI over a veth underlay)"
printf '%-9s %-44s %-5s %s\n' case what result figure
printf '%s\n' "${ROWS[@]}"
echo
log "--- RoCE packets per case: the vnics' counters (rrdma-vnic stats) and host A's underlay (nftables, veth)"
printf '%-9s %7s %7s %7s %7s %9s | %9s %9s %8s %8s %8s %8s %5s\n' case A_tx A_rx B_tx B_rx arp_ovfl \
  roce_A\>B roce_B\>A full_A\>B full_B\>A veth_tx veth_rx frags
printf '%s\n' "${UNDER_ROWS[@]}"
echo
finish_cases
log "all ${#ROWS[@]} cases passed"
