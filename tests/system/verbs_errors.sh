#!/usr/bin/env bash
# The verbs error paths between two vnics, each checking the exact completion status and
# that nothing was written (rrdma_verbs_peer --case errors; --list says what each does):
#   wrong_rkey             WRITE with a wrong R_Key -> REM_ACCESS_ERR at the requester
#   read_past_end          READ 32 bytes past the MR's end -> REM_ACCESS_ERR, nothing placed
#   write_no_remote_write  WRITE to an MR without REMOTE_WRITE -> REM_ACCESS_ERR
#   recv_too_small         64-byte SEND into a 16-byte RECV -> LOC_LEN_ERR at the receiver
#   rnr_then_success       SEND before the RECV is posted -> RNR NAKs, then success
#   rnr_retry_exceeded     rnr_retry 1 and no RECV -> RNR_RETRY_EXC_ERR
# The vnics' counters must show the NAKs each case provokes.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/verbs_lib.sh"
TEST_DEADLINE=${RRDMA_TEST_DEADLINE:-600}
init_test ve
require_system
verbs_scene
KEEP_GOING=1

# Each case, and the NAKs it must have provoked: the responder (vnic A) sent them, the
# requester (vnic B) received them (IBA 9.7.5: NAK codes; 9.7.5.2.8: RNR NAK).
declare -A nak_counter=(
  [wrong_rkey]=naks [read_past_end]=naks [write_no_remote_write]=naks [recv_too_small]=naks
  [rnr_then_success]=rnr_naks [rnr_retry_exceeded]=rnr_naks
)
# rnr_retry 1: the first RNR NAK and the one after the single retry.
declare -A nak_minimum=([rnr_retry_exceeded]=2)
for case_name in wrong_rkey read_past_end write_no_remote_write recv_too_small rnr_then_success rnr_retry_exceeded; do
  log "case $case_name"
  stats_snapshot "$VNIC_A" "$TMPD/a0.json"
  stats_snapshot "$VNIC_B" "$TMPD/b0.json"
  run_pair "$case_name" 120 --case "$case_name" --seed "$ID_NUM"
  stats_snapshot "$VNIC_A" "$TMPD/a1.json"
  stats_snapshot "$VNIC_B" "$TMPD/b1.json"
  counter_name=${nak_counter[$case_name]}
  verbs_counter_delta_at_least "$TMPD/a0.json" "$TMPD/a1.json" "engine.${counter_name}_sent" "${nak_minimum[$case_name]:-1}"
  verbs_counter_delta_at_least "$TMPD/b0.json" "$TMPD/b1.json" "engine.${counter_name}_received" "${nak_minimum[$case_name]:-1}"
done
finish_cases
