#!/usr/bin/env bash
# The daemon dies by SIGKILL (no chance to clean up). Then `up` of the same name must
# work despite the stale /run/rrdma files, the vnic must answer again, and `down` must
# leave nothing behind.
source "$(dirname "$0")/lib.sh"
init_test k
require_system

peer_scene

vnic_up "$VNIC" --ip "$VNIC_IP/24" --mac "$(mac_for 1)" --bridge "$BR"
wait_reachable "$NS" "$VNIC_IP"
pid=$(cat "$RUN_DIR/$VNIC.pid" 2>/dev/null)
pid_alive "$pid" || fail "no running daemon in $RUN_DIR/$VNIC.pid ('$pid')"

log "kill -9 $pid"
kill -9 "$pid"
wait_until 10 "daemon $pid to die" eval "! pid_alive $pid"
# Whether the TAP outlives its daemon depends on TUNSETPERSIST; the next up must cope
# either way, so only report it.
if link_exists "$VNIC"; then log "  $VNIC outlived its daemon"; else log "  $VNIC went with its daemon"; fi
ip netns exec "$NS" ping -n -c 1 -W 1 "$VNIC_IP" &>/dev/null && fail "$VNIC_IP still answers with its daemon dead"

log "up of the same name again"
vnic_up "$VNIC" --ip "$VNIC_IP/24" --mac "$(mac_for 1)" --bridge "$BR"
new_pid=$(cat "$RUN_DIR/$VNIC.pid" 2>/dev/null)
pid_alive "$new_pid" || fail "no running daemon after the second up ('$new_pid')"
[[ "$new_pid" != "$pid" ]] || fail "the pid file still names the killed daemon"
wait_reachable "$NS" "$VNIC_IP"
stats_snapshot "$VNIC" "$TMPD/s0.json"
ping_all "$NS" 3 "$VNIC_IP"
stats_snapshot "$VNIC" "$TMPD/s1.json"
expect_delta "$TMPD/s0.json" "$TMPD/s1.json" icmp.rx_echo_requests 3

log "down"
vnic_down "$VNIC"
expect_vnic_gone "$VNIC"
wait_until 5 "daemon $new_pid to exit" eval "! pid_alive $new_pid"
link_exists "$BR" || fail "down removed bridge $BR, which the vnic did not create"
