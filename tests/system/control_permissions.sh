#!/usr/bin/env bash
# Who may do what on a vnic started with `up --group GROUP` (issue 16): root everything; a
# member of GROUP may use the NIC and read status and stats, but `down`, `capture` and
# `trace` are refused with "only root may ..." (the daemon decides with SO_PEERCRED, so a
# hand-written client gets the same answer); a user outside GROUP is told "permission
# denied" and how to get access, not "starting or not answering".
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/control_lib.sh"
require_system
require_control_tools
control_init cp
make_test_group

V="${PREFIX}v"
vnic_up "$V" --ip "$NET.10/24" --group "$TEST_GROUP"
SOCK="$RUN_DIR/$V.sock"

log "a member reads status and stats"
timeout 10 "${AS_MEMBER[@]}" "$RRDMA_VNIC" status "$V" >"$TMPD/member-status.txt" 2>&1 ||
  fail "status as a member: $(cat "$TMPD/member-status.txt")"
grep -q "$NET.10" "$TMPD/member-status.txt" || fail "member's status lacks the address: $(cat "$TMPD/member-status.txt")"
timeout 10 "${AS_MEMBER[@]}" "$RRDMA_VNIC" stats "$V" --json >"$TMPD/member-stats.json" 2>"$TMPD/member-stats.err" ||
  fail "stats as a member: $(cat "$TMPD/member-stats.err")"
json_value "$TMPD/member-stats.json" daemon.loop_iterations
log "  ok"

log "a member may not stop, capture or trace the vnic"
mkdir -m 0777 "$TMPD/member"
expect_refusal "down as a member" "only root may stop a vnic" "${AS_MEMBER[@]}" "$RRDMA_VNIC" down "$V"
expect_refusal "capture as a member" "only root may capture" \
  "${AS_MEMBER[@]}" "$RRDMA_VNIC" capture "$V" -w "$TMPD/member/x.pcap"
expect_refusal "trace as a member" "only root may trace" "${AS_MEMBER[@]}" "$RRDMA_VNIC" trace "$V"
timeout 10 "$RRDMA_VNIC" status "$V" >/dev/null 2>&1 || fail "the vnic is gone after a member's down"
control_counter "$V" commands_refused
expect_eq "$COUNT" 3 "control.commands_refused after three refused commands"

log "an outsider is told the socket is not theirs, and how to get access"
expect_refusal "status as an outsider" "permission denied.*up --group" "${AS_OUTSIDER[@]}" "$RRDMA_VNIC" status "$V"
expect_refusal "down as an outsider" "permission denied.*up --group" "${AS_OUTSIDER[@]}" "$RRDMA_VNIC" down "$V"
expect_refusal "capture as an outsider" "permission denied.*up --group" \
  "${AS_OUTSIDER[@]}" "$RRDMA_VNIC" capture "$V" -w "$TMPD/member/y.pcap"

log "root may do everything: a short trace, then down"
timeout 5 "$RRDMA_VNIC" trace "$V" >"$TMPD/root-trace.out" 2>"$TMPD/root-trace.err"
rc=$?
(( rc == 124 || rc == 0 )) || fail "trace as root: exit $rc: $(cat "$TMPD/root-trace.err")"
! grep -q "only root" "$TMPD/root-trace.err" || fail "root's trace was refused"
vnic_down "$V"
expect_vnic_gone "$V"
