#!/usr/bin/env bash
# Two processes share one vnic.
#  1. Completions: two application pairs run at once, each process on a shared vnic (two on
#     A, two on B). Every process checks that each completion it polls carries its own
#     wr_id and QP number and that its CQ holds nothing else afterwards, so a completion
#     delivered to the wrong process fails the case that received it.
#  2. Memory: an "owner" on vnic A registers a secret MR for local access only; its remote
#     peer tries to WRITE and READ it with its R_Key (REM_ACCESS_ERR each); an "intruder"
#     on the same vnic A puts the owner's L_Key and address in its own SEND and RECV (the
#     daemon must refuse: LOC_PROT_ERR, or the post is refused). The owner then checks that
#     its secret never changed.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/verbs_lib.sh"
TEST_DEADLINE=${RRDMA_TEST_DEADLINE:-600}
init_test vi
require_system
verbs_scene
KEEP_GOING=1

# start_side NAME NS VNIC PORT ROLE-ARGS...: one peer in the background, output in TMPD/NAME.
start_side() {
  local name=$1 ns=$2 dev=$3 port=$4
  shift 4
  ip netns exec "$ns" "$RRDMA_VERBS_PEER" --dev "$dev" --port "$port" --timeout 120 "$@" >"$TMPD/$name" 2>&1 &
  PIDS+=("$!")
  NAMES+=("$name")
}

# finish_sides: waits for every started peer; each must exit 0.
finish_sides() {
  local i rc
  for i in "${!PIDS[@]}"; do
    rc=0
    wait_pid_bounded "${PIDS[$i]}" 200 || rc=$?
    sed "s/^/  [${NAMES[$i]}] /" "$TMPD/${NAMES[$i]}"
    (( rc == 0 )) || fail_case "${NAMES[$i]} exited $rc"
  done
  PIDS=()
  NAMES=()
}

PIDS=()
NAMES=()
log "two pairs at once, two processes on each vnic"
cases=rc_send,rc_send_imm,rc_write_imm,rc_read,rc_fetch_add,ud_send
sizes=0,1,4097,65536,1M
port2=$(( PEER_PORT + 1 ))
start_side p1.server "$NS_A" "$VNIC_A" "$PEER_PORT" --server --case "$cases" --sizes "$sizes" --seed 1
start_side p2.server "$NS_A" "$VNIC_A" "$port2" --server --case "$cases" --sizes "$sizes" --seed 2
start_side p1.client "$NS_B" "$VNIC_B" "$PEER_PORT" --connect "$NS_A_IP" --case "$cases" --sizes "$sizes" --seed 1
start_side p2.client "$NS_B" "$VNIC_B" "$port2" --connect "$NS_A_IP" --case "$cases" --sizes "$sizes" --seed 2
finish_sides

log "owner and intruder on $VNIC_A"
keys="$TMPD/owner.keys"
start_side owner.server "$NS_A" "$VNIC_A" "$PEER_PORT" --server --isolation owner --keys-file "$keys" --seed 7
start_side owner.client "$NS_B" "$VNIC_B" "$PEER_PORT" --connect "$NS_A_IP" --isolation owner --keys-file "$keys" --seed 7
start_side intruder.server "$NS_A" "$VNIC_A" "$port2" --server --isolation intruder --keys-file "$keys" --seed 7
start_side intruder.client "$NS_B" "$VNIC_B" "$port2" --connect "$NS_A_IP" --isolation intruder --keys-file "$keys" --seed 7
finish_sides
grep -q '^owner_secret_intact 0 ok' "$TMPD/owner.server" || fail_case "the owner did not report its secret intact"
finish_cases
