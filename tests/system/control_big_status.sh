#!/usr/bin/env bash
# `status` of a vnic with 5,000 QPs (issue 16: it failed with "daemon closed the
# connection" above about 3,000-4,500 QPs, when the reply outgrew one socket message).
# Ten processes hold 500 RC QPs each (ten, so that a per-process QP quota does not stand
# in the way); `status --json` must list exactly the 5,000 QP numbers the processes
# created, `status` must print 5,000 QP lines, and the reply must have gone in chunks.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/control_lib.sh"
require_system
[[ -n "${RRDMA_MANY_QPS:-}" && -x "$RRDMA_MANY_QPS" ]] || fail "RRDMA_MANY_QPS is not set"
control_init cb

readonly PROCESSES=10 QPS_EACH=500
readonly TOTAL=$(( PROCESSES * QPS_EACH ))

V="${PREFIX}v"
# One user holds all 5,000: the per-user totals (issue 27 item 7; twice the per-process quota by
# default) are raised to let it.
vnic_up "$V" --ip "$NET.10/24" --max-qps-per-user 6000 --max-cqs-per-user 6000 --max-ring-bytes-per-user 1099511627776

# Each holder reads stdin until its end: a FIFO this shell keeps open on fd 7.
mkfifo "$TMPD/hold"
exec 7<>"$TMPD/hold"
log "$PROCESSES processes create $QPS_EACH QPs each"
for i in $(seq 1 "$PROCESSES"); do
  "$RRDMA_MANY_QPS" --dev "$V" --qps "$QPS_EACH" --ready "$TMPD/qps.$i" <"$TMPD/hold" 2>"$TMPD/qps.$i.err" 7>&- &
  CONTROL_PIDS+=($!)
done
all_ready() {
  local i
  for i in $(seq 1 "$PROCESSES"); do [[ -f "$TMPD/qps.$i" ]] || return 1; done
}
end=$(( SECONDS + 150 ))
until all_ready; do
  for pid in "${CONTROL_PIDS[@]}"; do
    kill -0 "$pid" 2>/dev/null || { all_ready || fail "a QP holder died: $(cat "$TMPD"/qps.*.err)"; }
  done
  (( SECONDS < end )) || fail "the QP holders were not ready within 150 s"
  sleep 0.5
done
sort -n "$TMPD"/qps.[0-9]* >"$TMPD/created"
expect_eq "$(wc -l <"$TMPD/created")" "$TOTAL" "QPs created"

log "status --json"
timeout 30 "$RRDMA_VNIC" status "$V" --json >"$TMPD/status.json" 2>"$TMPD/status.err" ||
  fail "status --json with $TOTAL QPs: $(cat "$TMPD/status.err")"
log "  $(stat -c %s "$TMPD/status.json") bytes"
grep -o '"qpn": *[0-9]*' "$TMPD/status.json" | grep -o '[0-9]*$' | sort -n >"$TMPD/listed"
cmp -s "$TMPD/created" "$TMPD/listed" ||
  fail "status --json lists $(wc -l <"$TMPD/listed") QPs, not the $TOTAL created: $(diff "$TMPD/created" "$TMPD/listed" | head -5 | tr '\n' ' ')"

log "status"
timeout 30 "$RRDMA_VNIC" status "$V" >"$TMPD/status.txt" 2>"$TMPD/status.err" ||
  fail "status with $TOTAL QPs: $(cat "$TMPD/status.err")"
expect_eq "$(grep -c '^    QP ' "$TMPD/status.txt")" "$TOTAL" "QP lines in status"

control_counter "$V" replies_chunked
expect_ge "$COUNT" 2 "control.replies_chunked"
counter "$TMPD/control-stats.json" control.reply_send_errors
expect_eq "$COUNT" 0 "control.reply_send_errors"

log "the holders let go"
exec 7>&-
for pid in "${CONTROL_PIDS[@]}"; do
  wait "$pid" || fail "a QP holder exited with an error: $(cat "$TMPD"/qps.*.err)"
done
CONTROL_PIDS=()
vnic_down "$V"
expect_vnic_gone "$V"
