#!/usr/bin/env bash
# Issue 27 items 1 and 2: short rdma_cm programs run back to back between two vnics, as a CI
# job runs its tests: each round runs `ib_read_lat -R`, then at once `rstream` (64 KiB, both
# sides the same test), then `rping -C 10`, each pair on a port of its own (server vnic A in
# namespace A, client vnic B in namespace B: rdma_cm_lib.sh's scene). Every program must exit
# 0, and no client may see a refused connection ("REJECTED") or die (perftest 4.5's client
# crashes, SIGSEGV, when the REQ of its second connection is refused: before the CM held a
# REQ for a listener about to come, docs/RDMA_CM.md, one run in about seven crashed here).
# No retries: a client runs once, after its server's first listener shows in `status`.
#
# RRDMA_B2B_ROUNDS (default 8) sets the number of rounds.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/verbs_lib.sh"
source "$(dirname "$0")/rdma_cm_lib.sh"
TEST_DEADLINE=${RRDMA_TEST_DEADLINE:-280}
init_test cb
cm_install_cleanup
require_system
require_rdmacm rping rstream ib_read_lat
cm_scene
KEEP_GOING=1
A=$VNIC_A_IP
ROUNDS=${RRDMA_B2B_ROUNDS:-8}

# once NAME LIMIT SERVER_ARGS... -- CLIENT_ARGS...: the server on A, the client on B once
# its listener shows; both must exit 0 and neither output may say REJECTED or refused.
once() {
  local name=$1 limit=$2 server=() client=() server_pid client_rc problem=""
  shift 2
  while [[ $1 != -- ]]; do server+=("$1"); shift; done
  shift
  client=("$@")
  cm_start "$name.server" "$NS_A" "$VNIC_A" "${server[@]}"
  server_pid=$CM_PID
  wait_cm_listener "$VNIC_A" "$CM_PORT" "$server_pid"
  cm_run "$name.client" "$limit" "$NS_B" "$VNIC_B" "${client[@]}"
  client_rc=$CM_RC
  cm_wait "$server_pid" 30
  RACE_NOTE=""
  if [[ ${server[0]} == rping ]]; then
    forgive_rping_race "$name.client" "$client_rc"; client_rc=$RC_OUT
    forgive_rping_race "$name.server" "$CM_RC"; CM_RC=$RC_OUT
  fi
  (( client_rc == 0 )) || problem+="client exit $client_rc; "
  (( CM_RC == 0 )) || problem+="server exit $CM_RC; "
  grep -qiE "REJECTED|refused|reset by peer" "$TMPD/$name.client.out" "$TMPD/$name.server.out" &&
    problem+="$(grep -hiE "REJECTED|refused|reset by peer" "$TMPD/$name.client.out" "$TMPD/$name.server.out" | head -n 1); "
  next_port
  if [[ -z "$problem" ]]; then
    PASSED=$(( PASSED + 1 ))
    return 0
  fi
  log "  $name: FAIL: ${problem%; }"
  show_output "$name.server" "$CM_RC"
  show_output "$name.client" "$client_rc"
  fail_case "$name: ${problem%; }"
}

PASSED=0
start=$SECONDS
for round in $(seq 1 "$ROUNDS"); do
  once "read_lat.$round" 60 ib_read_lat -R -x 0 -p "$CM_PORT" -- ib_read_lat -R -x 0 -p "$CM_PORT" "$A" || true
  once "rstream.$round" 60 rstream -b "$A" -p "$CM_PORT" -S 65536 -C 100 -T b \
    -- rstream -s "$A" -p "$CM_PORT" -S 65536 -C 100 -T b || true
  once "rping.$round" 60 rping -s -a "$A" -p "$CM_PORT" -C 10 -- rping -c -a "$A" -p "$CM_PORT" -C 10 || true
  log "round $round: $PASSED of $(( round * 3 )) programs passed ($(( SECONDS - start )) s)"
done
stats_snapshot "$VNIC_A" "$TMPD/stats_a.json"
counter "$TMPD/stats_a.json" cm.req_held_served
log "vnic A's CM served $COUNT REQ(s) that came before their listener (cm.req_held_served)"
expect_eq "$PASSED" "$(( ROUNDS * 3 ))" "programs that passed"
finish_cases
log "PASS: $ROUNDS rounds of ib_read_lat -R, rstream and rping back to back in $(( SECONDS - start )) s"
