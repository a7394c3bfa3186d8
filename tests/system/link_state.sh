#!/usr/bin/env bash
# The link monitor: the TAP's state is the RDMA port's. `ip link set VNIC down` makes the
# port DOWN (ibv_devinfo) and gives every context IBV_EVENT_PORT_ERR (ibv_asyncwatch,
# Debian's own, over our libibverbs.so.1); `up` makes it ACTIVE again with
# IBV_EVENT_PORT_ACTIVE. The daemon logs each change once, counts the notifications
# (stats: daemon.link_*), and answers pings again once the TAP is back up.
source "$(dirname "$0")/lib.sh"
init_test l
require_system
for program in ibv_devinfo ibv_asyncwatch stdbuf; do
  command -v "$program" >/dev/null || skip "no '$program' (ibverbs-utils, coreutils)"
done

peer_scene
vnic_up "$VNIC" --ip "$VNIC_IP/24" --bridge "$BR"
wait_reachable "$NS" "$VNIC_IP"

port_state() {  # port_state STATE: ibv_devinfo on the vnic says the port is in STATE
  local out
  out=$(host timeout 10 "$RRDMA_VNIC" exec --dev "$VNIC" -- ibv_devinfo -d "$VNIC" 2>&1)
  grep -Eq "state:[[:space:]]+$1 " <<<"$out"
}
log_says() { grep -Fq "$1" "$RUN_DIR/$VNIC.log"; }

port_state PORT_ACTIVE || fail "the port is not ACTIVE after up"
stats_snapshot "$VNIC" "$TMPD/s0.json"

# Line-buffered, so that its lines are in the file as soon as it prints them.
timeout 60 "$RRDMA_VNIC" exec --dev "$VNIC" -- stdbuf -oL ibv_asyncwatch -d "$VNIC" \
  >"$TMPD/events" 2>&1 &
WATCHER=$!
wait_until 10 "ibv_asyncwatch to open $VNIC" grep -q "async event FD" "$TMPD/events"

log "ip link set $VNIC down"
host ip link set "$VNIC" down || fail "cannot set $VNIC down"
wait_until 10 "the port to go DOWN" port_state PORT_DOWN
wait_until 10 "IBV_EVENT_PORT_ERR" grep -q "IBV_EVENT_PORT_ERR" "$TMPD/events"
log_says "link: TAP $VNIC is down: port DOWN" || fail "no log line for the port going down"

log "ip link set $VNIC up"
host ip link set "$VNIC" up || fail "cannot set $VNIC up"
wait_until 10 "the port to be ACTIVE again" port_state PORT_ACTIVE
wait_until 10 "IBV_EVENT_PORT_ACTIVE" grep -q "IBV_EVENT_PORT_ACTIVE" "$TMPD/events"
log_says "link: TAP $VNIC is up with carrier: port ACTIVE" || fail "no log line for the port coming back"

# Once each, in that order: a notification that changes nothing posts no event.
events=$(grep -o "IBV_EVENT_PORT_[A-Z]*" "$TMPD/events" | tr '\n' ' ')
expect_eq "$events" "IBV_EVENT_PORT_ERR IBV_EVENT_PORT_ACTIVE " "port events"
expect_eq "$(grep -c "link: TAP $VNIC" "$RUN_DIR/$VNIC.log")" 2 "link lines in the log"

stats_snapshot "$VNIC" "$TMPD/s1.json"
expect_delta "$TMPD/s0.json" "$TMPD/s1.json" daemon.link_notifications 2 at_least
expect_delta "$TMPD/s0.json" "$TMPD/s1.json" daemon.link_messages_rejected 0
expect_delta "$TMPD/s0.json" "$TMPD/s1.json" daemon.link_overruns 0

ping_all "$NS" 3 "$VNIC_IP"

kill "$WATCHER" 2>/dev/null
wait "$WATCHER" 2>/dev/null
vnic_down "$VNIC"
expect_vnic_gone "$VNIC"
