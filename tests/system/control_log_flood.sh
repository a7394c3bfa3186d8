#!/usr/bin/env bash
# A flood of bad requests must not grow the daemon's log without bound (issue 16: 128k bad
# requests in 5 s once wrote 14.7 MB). 100,000 bad requests (invalid JSON, unknown
# commands, a number as "cmd", no "cmd") are each answered with an error, the log grows by
# less than 64 KiB (the limit: 20 lines at once, then 5 a second, about 150 bytes a line),
# says how many lines it held back, and `stats` counts them.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/control_lib.sh"
require_system
[[ -n "${RRDMA_CONTROL_FLOOD:-}" && -x "$RRDMA_CONTROL_FLOOD" ]] || fail "RRDMA_CONTROL_FLOOD is not set"
control_init cl

readonly REQUESTS=100000
readonly LOG_BOUND=65536

V="${PREFIX}v"
vnic_up "$V" --ip "$NET.10/24"
LOG="$RUN_DIR/$V.log"
[[ -f "$LOG" ]] || fail "no daemon log at $LOG"
before=$(stat -c %s "$LOG")

log "$REQUESTS bad requests"
timeout 120 "$RRDMA_CONTROL_FLOOD" requests "$RUN_DIR/$V.sock" "$REQUESTS" >"$TMPD/flood.out" 2>"$TMPD/flood.err" ||
  fail "the flood: $(cat "$TMPD/flood.out" "$TMPD/flood.err")"
log "  $(cat "$TMPD/flood.out")"
expect_eq "$(cat "$TMPD/flood.out")" "sent $REQUESTS replies $REQUESTS errors $REQUESTS" "the flood's outcome"

after=$(stat -c %s "$LOG")
growth=$(( after - before ))
log "the log grew by $growth bytes"
expect_le "$growth" "$LOG_BOUND" "bytes the flood added to the daemon's log"
lines=$(grep -c '^control: request from' "$LOG")
expect_ge "$lines" 20 "request lines logged (the first burst at least)"
grep -q 'lines suppressed' "$LOG" || fail "the log never says how many lines it held back"

control_counter "$V" log_lines_suppressed
expect_ge "$COUNT" $(( REQUESTS - lines )) "control.log_lines_suppressed"
counter "$TMPD/control-stats.json" control.admin_requests
expect_ge "$COUNT" "$REQUESTS" "control.admin_requests"
vnic_down "$V"
expect_vnic_gone "$V"
