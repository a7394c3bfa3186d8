#!/usr/bin/env bash
# The verbs error paths between two vnics, each checking the exact completion status and
# that nothing was written (rrdma_verbs_peer --case errors; --list says what each does):
#   wrong_rkey             WRITE with a wrong R_Key -> REM_ACCESS_ERR at the requester
#   read_past_end          READ 32 bytes past the MR's end -> REM_ACCESS_ERR, nothing placed
#   write_no_remote_write  WRITE to an MR without REMOTE_WRITE -> REM_ACCESS_ERR
#   recv_too_small         64-byte SEND into a 16-byte RECV -> LOC_LEN_ERR at the receiver
#   rnr_then_success       SEND before the RECV is posted -> RNR NAKs, then success
#   rnr_retry_exceeded     rnr_retry 1 and no RECV -> RNR_RETRY_EXC_ERR
# The vnics' counters must show the NAKs these cases provoke.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/verbs_lib.sh"
TEST_DEADLINE=${RRDMA_TEST_DEADLINE:-600}
init_test ve
require_system
verbs_scene
KEEP_GOING=1

stats_snapshot "$VNIC_A" "$TMPD/a0.json"
stats_snapshot "$VNIC_B" "$TMPD/b0.json"
for case_name in wrong_rkey read_past_end write_no_remote_write recv_too_small rnr_then_success rnr_retry_exceeded; do
  log "case $case_name"
  run_pair "$case_name" 120 --case "$case_name" --seed "$ID_NUM"
done
stats_snapshot "$VNIC_A" "$TMPD/a1.json"
stats_snapshot "$VNIC_B" "$TMPD/b1.json"

log "the counters saw the NAKs"
# A (the responder side) sent NAKs for the three access errors and the length error, and
# RNR NAKs for both RNR cases; B (the requester side) received them.
verbs_counter_delta_at_least "$TMPD/a0.json" "$TMPD/a1.json" engine.naks_sent 4
verbs_counter_delta_at_least "$TMPD/a0.json" "$TMPD/a1.json" engine.rnr_naks_sent 2
verbs_counter_delta_at_least "$TMPD/b0.json" "$TMPD/b1.json" engine.naks_received 4
verbs_counter_delta_at_least "$TMPD/b0.json" "$TMPD/b1.json" engine.rnr_naks_received 2
finish_cases
