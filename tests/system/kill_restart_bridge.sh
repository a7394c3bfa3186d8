#!/usr/bin/env bash
# Issue 27 item 15: a vnic that created its bridge (--create-bridge) dies by SIGKILL while
# a namespace's veth is a port of that bridge. `up` of the same name with --create-bridge
# must keep the bridge and its other ports (it removed the bridge and made a new one with
# the vnic alone, cutting the namespace off), and the namespace must reach the vnic again.
source "$(dirname "$0")/lib.sh"
init_test kb
require_system

BR="${PREFIX}b"
VNIC="${PREFIX}v"
VNIC_IP="$NET.10"
NS="${PREFIX}-a"
HVETH="${PREFIX}ha"
register_link "$BR"  # created by the vnic; removed by cleanup should the test fail

vnic_up "$VNIC" --ip "$VNIC_IP/24" --mac "$(mac_for 1)" --bridge "$BR" --create-bridge
make_peer "$NS" "$BR" "$HVETH" "${PREFIX}na" "$NET.20/24"
wait_reachable "$NS" "$VNIC_IP"
bridge_index=$(cat "/sys/class/net/$BR/ifindex")
pid=$(cat "$RUN_DIR/$VNIC.pid" 2>/dev/null)
pid_alive "$pid" || fail "no running daemon in $RUN_DIR/$VNIC.pid ('$pid')"

log "kill -9 $pid, then up --create-bridge again"
kill -9 "$pid"
wait_until 10 "daemon $pid to die" eval "! pid_alive $pid"
wait_until 30 "the killed daemon's TAP to go (the kernel closes its fd after the death)" eval "! link_exists $VNIC"
vnic_up "$VNIC" --ip "$VNIC_IP/24" --mac "$(mac_for 1)" --bridge "$BR" --create-bridge
log "  up said: $(tr '\n' ' ' < "$TMPD/up.err") $(tr '\n' ' ' < "$TMPD/up.out")"
[[ "$(cat "/sys/class/net/$BR/ifindex" 2>/dev/null)" == "$bridge_index" ]] ||
  fail "up removed bridge $BR and made another"
[[ "$(basename "$(readlink "/sys/class/net/$HVETH/master")")" == "$BR" ]] ||
  fail "$HVETH is no longer a port of $BR"
wait_reachable "$NS" "$VNIC_IP"
ping_all "$NS" 3 "$VNIC_IP"

log "down: the vnic adopted the bridge, so it goes as --create-bridge promises"
vnic_down "$VNIC"
expect_vnic_gone "$VNIC"
link_exists "$BR" && fail "down left bridge $BR, which the vnic (of that name) created"
log "ok"
