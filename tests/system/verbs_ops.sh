#!/usr/bin/env bash
# Every verbs operation between two vnics (two daemons) on one bridge, the applications in
# two namespaces, over the C++ API: RC SEND/RECV, SEND with immediate, WRITE, WRITE with
# immediate, READ, COMPARE_SWAP, FETCH_ADD, UC SEND, UC WRITE, UD SEND; sizes 0 B .. 8 MiB
# (UD up to the path MTU) gathered from and scattered into 3 SGEs over distinct MRs; every
# payload checked byte for byte against a seeded pattern, and the guard bytes around every
# buffer checked untouched (rrdma_verbs_peer does the checking; see its --list).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/verbs_lib.sh"
TEST_DEADLINE=${RRDMA_TEST_DEADLINE:-840}
init_test vo
require_system
verbs_scene
KEEP_GOING=1

# One pair of processes per case keeps a failure's output next to its case.
for case_name in rc_send rc_send_imm rc_write rc_write_imm rc_read rc_compare_swap rc_fetch_add \
                 uc_send uc_write ud_send; do
  log "case $case_name"
  run_pair "$case_name" 240 --case "$case_name" --seed "$ID_NUM"
done

log "the largest SGE lists: 16 SGEs a side (max_sge)"
run_pair sge16 240 --case rc_send,rc_write,rc_read,ud_send --sizes 17,4097,1M --sges 16 --seed "$ID_NUM"

log "control: the two sides disagree on the seed, so the checks must refuse the payload"
start_server control --timeout 60 --case rc_send,rc_write --sizes 4097 --seed 1
control_rc=0
timeout --kill-after=5 120 ip netns exec "$NS_B" "$RRDMA_VERBS_PEER" --connect "$NS_A_IP" --dev "$VNIC_B" \
  --port "$PEER_PORT" --timeout 60 --case rc_send,rc_write --sizes 4097 --seed 2 >"$TMPD/control.client" 2>&1 || true
wait_pid_bounded "$SERVER_PID" 30 || control_rc=$?
sed "s/^/  [server] /" "$TMPD/control.server"
(( control_rc == 1 )) || fail_case "control: the server exited $control_rc, expected 1"
for case_name in rc_send rc_write; do
  grep -q "^$case_name 4097 FAIL payload differs at .*offset 0" "$TMPD/control.server" ||
    fail_case "control: $case_name was not refused for its payload"
done

log "pacing: the 8 MiB UC messages waited for transmit room, and no frame was dropped for want of it"
waits=0
for side in A B; do
  vnic_var=VNIC_$side
  stats_snapshot "${!vnic_var}" "$TMPD/stats-$side.json"
  counter "$TMPD/stats-$side.json" daemon.tx_queue_drops
  (( COUNT == 0 )) || fail_case "vnic $side dropped $COUNT frames: its transmit queue overflowed"
  counter "$TMPD/stats-$side.json" engine.transmit_room_waits
  waits=$(( waits + COUNT ))
done
(( waits > 0 )) || fail_case "no requester ever waited for transmit room: a UC message of 8192 packets went out unpaced"
log "requesters waited for room $waits times"

log "the daemons are still there and answer"
status_snapshot "$VNIC_A" "$TMPD/status-a.json"
status_snapshot "$VNIC_B" "$TMPD/status-b.json"
finish_cases
