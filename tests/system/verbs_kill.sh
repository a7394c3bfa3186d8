#!/usr/bin/env bash
# kill -9 of an application in the middle of a transfer (rrdma_verbs_peer --hold: RC SENDs
# and WRITEs of 64 KiB in a loop). The killed process had no chance to clean up, so:
#  - its daemon (vnic A) lives on and still answers `status`;
#  - `status` no longer lists the dead process or any of its resources (the daemon tore
#    down its QP, CQ, MRs and PD when the control connection closed);
#  - the peer application (namespace B, vnic B) sees its QP error out in bounded time: its
#    next completion carries an error status (retries exhausted), it does not hang.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/verbs_lib.sh"
TEST_DEADLINE=${RRDMA_TEST_DEADLINE:-400}
init_test vk
require_system
verbs_scene

log "both sides transferring (--hold)"
start_server hold --hold --timeout 120
victim=$SERVER_PID
ip netns exec "$NS_B" "$RRDMA_VERBS_PEER" --connect "$NS_A_IP" --dev "$VNIC_B" --port "$PEER_PORT" \
  --hold --timeout 120 >"$TMPD/hold.client" 2>&1 &
survivor=$!
wait_until 60 "both sides to report 'hold running'" \
  eval "grep -q 'hold running' '$TMPD/hold.server' && grep -q 'hold running' '$TMPD/hold.client'"

status_snapshot "$VNIC_A" "$TMPD/status-before.json"
lists_pid "$VNIC_A" "$victim" ||
  fail "status of $VNIC_A does not list the application $victim (it lists: $(process_pids "$VNIC_A" | tr '\n' ' '))"
"$RRDMA_JSON_GET" processes <"$TMPD/status-before.json" >"$TMPD/processes-before" 2>/dev/null
log "  before: $(tr -d '\n ' <"$TMPD/processes-before" | head -c 300)"
daemon_a=$(cat "$RUN_DIR/$VNIC_A.pid")

log "kill -9 $victim (the server, on $VNIC_A) mid-transfer"
kill -9 "$victim"
wait "$victim" 2>/dev/null

log "the daemon of $VNIC_A lives on and lets go of the dead process's resources"
pid_alive "$daemon_a" || fail "the daemon of $VNIC_A ($daemon_a) died with its application"
wait_until 30 "status of $VNIC_A to forget pid $victim" eval "process_pids '$VNIC_A' >/dev/null && ! lists_pid '$VNIC_A' $victim"
status_snapshot "$VNIC_A" "$TMPD/status-after.json"
[[ -z "$(process_pids "$VNIC_A")" ]] || fail "status of $VNIC_A still lists processes: $(process_pids "$VNIC_A" | tr '\n' ' ')"

log "the peer's QP errors out (bounded: the retry budget, not a hang)"
rc=0
wait_pid_bounded "$survivor" 120 || rc=$?
sed "s/^/  [client] /" "$TMPD/hold.client"
case $rc in
  3) grep -Eq '^hold [0-9]+ error ' "$TMPD/hold.client" || fail "exit 3 without a 'hold N error STATUS' line" ;;
  4) fail "the peer saw no completion at all within its timeout: its QP hung" ;;
  124) fail "the peer did not exit within 120 s" ;;
  *) fail "the peer exited $rc, expected 3 (a failed completion)" ;;
esac
status=$(sed -nE 's/^hold [0-9]+ error (.*)$/\1/p' "$TMPD/hold.client" | head -1)
log "  the peer's completion status: $status"
[[ "$status" != "success" ]] || fail "the peer's last completion was a success"

log "the peer's own resources went with its exit too"
wait_until 30 "status of $VNIC_B to forget pid $survivor" eval "process_pids '$VNIC_B' >/dev/null && ! lists_pid '$VNIC_B' $survivor"
status_snapshot "$VNIC_A" "$TMPD/status-final.json"
stats_snapshot "$VNIC_A" "$TMPD/stats-a.json"
json_value "$TMPD/stats-a.json" dma.process_gone
log "  $VNIC_A: DMA found the process gone $VALUE time(s) before the teardown"
json_value "$TMPD/stats-a.json" verbs.clients_disconnected
expect_ge "$VALUE" 1 "verbs.clients_disconnected of $VNIC_A"
