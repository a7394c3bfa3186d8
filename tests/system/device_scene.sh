# shellcheck shell=bash
# Shared by the tests that run Debian's programs between two RDMA devices (sourced after
# lib.sh, not run, not registered): the two-device scene, of either kind of device.
#
# RRDMA_DEVICE_KIND picks the kind (tests/system/CMakeLists.txt registers a `.netdev` variant
# of each test that makes sense for both; docs/TESTING.md has the table):
#   tap (the default): one bridge; two vnics on it, each its own daemon (A .10, B .11); two
#     namespaces with a veth on the bridge (A .20, B .30) where the programs run, as root. A
#     vnic's address is its daemon's, not a kernel address of the namespace.
#   netdev (issue 28): two namespaces joined by one veth pair, each end with one address
#     (A .10, B .11); on each end `rrdma-vnic up --netdev` run as uid 65534 with no
#     capabilities and no groups; the programs run as that user too (AS_USER). TCP and RDMA
#     share each namespace's one address: NS_A_IP is VNIC_A_IP, NS_B_IP is VNIC_B_IP.
#
# device_scene [MTU] sets VNIC_A/B (the device names), NS_A/B, VNIC_A_IP, VNIC_B_IP, NS_A_IP,
# NS_B_IP, NOBODY_IP (on the subnet, answered by nobody) and AS_USER: the words to put
# between `ip netns exec NS` and a program so that it runs as the devices' owner (empty for
# tap: root). MTU: the vnics' (tap) or the veths' (netdev, whose devices follow it).
# Root's own `rrdma-vnic status/stats` reach the netdev daemons through the exported
# RRDMA_RUN_DIR (root passes the directory's 0700 and the socket's 0660).

DEVICE_KIND=${RRDMA_DEVICE_KIND:-tap}
case "$DEVICE_KIND" in
  tap | netdev) ;;
  *) fail "RRDMA_DEVICE_KIND is '$DEVICE_KIND': expected tap or netdev" ;;
esac
[[ $DEVICE_KIND == tap ]] || TEST_NAME+=".$DEVICE_KIND"
DEVICE_USER=65534
AS_USER=()

device_scene() {
  VNIC_A="${PREFIX}va"
  VNIC_B="${PREFIX}vb"
  NS_A="${PREFIX}-a"
  NS_B="${PREFIX}-b"
  VNIC_A_IP="$NET.10"
  VNIC_B_IP="$NET.11"
  NOBODY_IP="$NET.99"
  if [[ $DEVICE_KIND == netdev ]]; then netdev_scene "$@"; else tap_scene "$@"; fi
  wait_reachable "$NS_A" "$VNIC_B_IP"
  wait_reachable "$NS_B" "$VNIC_A_IP"
  wait_reachable "$NS_B" "$NS_A_IP"
}

tap_scene() {
  local mtu=${1:-}
  BR="${PREFIX}b"
  NS_A_IP="$NET.20"
  NS_B_IP="$NET.30"
  make_bridge "$BR"
  make_peer "$NS_A" "$BR" "${PREFIX}ha" "${PREFIX}na" "$NS_A_IP/24"
  make_peer "$NS_B" "$BR" "${PREFIX}hb" "${PREFIX}nb" "$NS_B_IP/24"
  log "up $VNIC_A ($VNIC_A_IP) and $VNIC_B ($VNIC_B_IP) on $BR${mtu:+, MTU $mtu}"
  vnic_up "$VNIC_A" --ip "$VNIC_A_IP/24" --mac "$(mac_for 1)" --bridge "$BR" ${mtu:+--mtu "$mtu"}
  vnic_up "$VNIC_B" --ip "$VNIC_B_IP/24" --mac "$(mac_for 2)" --bridge "$BR" ${mtu:+--mtu "$mtu"}
  wait_reachable "$NS_A" "$VNIC_A_IP"
  wait_reachable "$NS_B" "$VNIC_B_IP"
}

netdev_scene() {
  local mtu=${1:-} side ns iface address
  command -v setpriv >/dev/null || skip "no setpriv (util-linux)"
  NS_A_IP=$VNIC_A_IP
  NS_B_IP=$VNIC_B_IP
  register_netns "$NS_A"
  register_netns "$NS_B"
  ip netns add "$NS_A" || fail "cannot create namespace $NS_A"
  ip netns add "$NS_B" || fail "cannot create namespace $NS_B"
  ip link add "${PREFIX}na" netns "$NS_A" type veth peer name "${PREFIX}nb" netns "$NS_B" ||
    fail "cannot create the veth pair ${PREFIX}na/${PREFIX}nb"
  for side in "$NS_A ${PREFIX}na $VNIC_A_IP" "$NS_B ${PREFIX}nb $VNIC_B_IP"; do
    read -r ns iface address <<<"$side"
    ip netns exec "$ns" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6' 2>/dev/null
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$address/24" dev "$iface" || fail "cannot address $iface in $ns"
    [[ -z "$mtu" ]] || ip -n "$ns" link set "$iface" mtu "$mtu" || fail "cannot set $iface's MTU to $mtu"
    ip -n "$ns" link set "$iface" up || fail "cannot bring up $iface in $ns"
  done
  # The user's own state directory (0700, as $XDG_RUNTIME_DIR/rrdma would be) and a home;
  # $TMPD (root's, 0700) becomes passable, not listable, so the user reaches its own files.
  DEVICE_RUN_DIR="$TMPD/run"
  mkdir -p "$DEVICE_RUN_DIR" "$TMPD/home"
  chown "$DEVICE_USER:$DEVICE_USER" "$DEVICE_RUN_DIR" "$TMPD/home"
  chmod 0700 "$DEVICE_RUN_DIR"
  chmod 0711 "$TMPD"
  export RRDMA_RUN_DIR=$DEVICE_RUN_DIR
  AS_USER=(setpriv --reuid "$DEVICE_USER" --regid "$DEVICE_USER" --clear-groups --inh-caps=-all --bounding-set=-all
           env HOME="$TMPD/home" RRDMA_RUN_DIR="$DEVICE_RUN_DIR")
  log "up --netdev $VNIC_A (${PREFIX}na, $VNIC_A_IP) and $VNIC_B (${PREFIX}nb, $VNIC_B_IP) as uid $DEVICE_USER${mtu:+, MTU $mtu}"
  netdev_up "$NS_A" "$VNIC_A" "${PREFIX}na"
  netdev_up "$NS_B" "$VNIC_B" "${PREFIX}nb"
}

# netdev_up NS NAME IFACE: `up --netdev` as the user, which must succeed; the daemon is
# stopped by its pid at cleanup and its log shown when the test fails.
netdev_up() {
  local ns=$1 name=$2 iface=$3 rc=0 pid
  ip netns exec "$ns" "${AS_USER[@]}" timeout 30 "$RRDMA_VNIC" up --name "$name" --netdev "$iface" \
    >"$TMPD/up.out" 2>"$TMPD/up.err" || rc=$?
  (( rc == 0 )) || fail "up --name $name --netdev $iface as uid $DEVICE_USER: exit $rc: $(cat "$TMPD/up.err")"
  pid=$(cat "$DEVICE_RUN_DIR/$name.pid" 2>/dev/null)
  [[ "$pid" =~ ^[0-9]+$ ]] || fail "up --netdev $name returned 0 but wrote no pid file"
  register_pid "$pid"
  register_log "$DEVICE_RUN_DIR/$name.log"
  [[ "$(stat -c %u "/proc/$pid")" == "$DEVICE_USER" ]] || fail "$name's daemon is not uid $DEVICE_USER"
}
