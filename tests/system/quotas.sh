#!/usr/bin/env bash
# Per-process quotas (issue 16, "Fairness"): one process cannot take the daemon's
# descriptors from the others.
#   1. `status` states the daemon's descriptor limit and the default quotas, which leave
#      three quarters of the descriptors (after a reserve) to other processes.
#   2. A hog creates RC QPs, asking for more than the daemon has descriptors for: it is
#      refused with ENOMEM exactly at its QP quota (never EIO), `status` shows its use at
#      the quota and `stats` counts the refusal.
#   3. Meanwhile a second process on the same vnic opens it, allocates a PD, creates a CQ
#      and two QPs and moves 4 KiB with an RDMA WRITE (looped back inside the vnic).
#   4. Killing the hog gives everything back (its entry leaves `status`).
#   5. `up --max-qps-per-process 5000` lets one process hold 5000 QPs (the 5,000-QP test's
#      setting) and refuses the 5001st with ENOMEM, when the daemon's descriptor limit
#      has room for 3 x 5000.
source "$(dirname "$0")/lib.sh"
TEST_DEADLINE=${RRDMA_TEST_DEADLINE:-500}
init_test q
require_system
[[ -n "${RRDMA_QUOTA_HOG:-}" && -x "$RRDMA_QUOTA_HOG" ]] || fail "RRDMA_QUOTA_HOG is not an executable: '${RRDMA_QUOTA_HOG:-}'"
KEEP_GOING=1
HOG_PID=""
# The hog holds its QPs until killed: stop it (by its pid) before lib.sh's cleanup, on
# failure too. `(exit $rc)` hands cleanup the test's exit status.
trap 'rc=$?; stop_hog; (exit $rc); cleanup' EXIT

BR="${PREFIX}b"
VNIC="${PREFIX}v"
VNIC_BIG="${PREFIX}w"
make_bridge "$BR"
log "up $VNIC ($NET.10) on $BR with the default quotas"
vnic_up "$VNIC" --ip "$NET.10/24" --mac "$(mac_for 1)" --bridge "$BR"

# json_number FILE PATH: sets NUMBER, or fails the case and sets it to 0.
json_number() {
  NUMBER=$("$RRDMA_JSON_GET" "$2" <"$1" 2>/dev/null)
  [[ "$NUMBER" =~ ^[0-9]+$ ]] && return 0
  NUMBER=0
  fail_case "$2 is not in $(basename "$1") (or not a number)"
}

# start_hog VNIC LIMIT NAME: the hog in the background, its own descriptor limit raised
# where the kernel lets us (CAP_SYS_RESOURCE), so that the daemon's side runs out first.
# Sets HOG_PID; output in $TMPD/NAME.out.
start_hog() {
  local want=$(( $2 * 3 + 1000 )) hard
  hard=$(ulimit -Hn)
  rm -f "$TMPD/$3.ready"
  # exec: $! is then the hog itself, which the test kills by that pid.
  ( if (( want > hard )); then ulimit -Hn "$want" 2>/dev/null || want=$hard; fi
    ulimit -Sn "$want" && exec "$RRDMA_QUOTA_HOG" --dev "$1" hog --limit "$2" --ready "$TMPD/$3.ready"
  ) >"$TMPD/$3.out" 2>&1 &
  HOG_PID=$!
}

# wait_hog NAME: until the hog has stopped creating (its ready file), or died.
wait_hog() {
  local end=$(( SECONDS + 240 ))
  until [[ -e "$TMPD/$1.ready" ]]; do
    pid_alive "$HOG_PID" || { fail_case "the hog died: $(tail -n 5 "$TMPD/$1.out" | tr '\n' '|')"; return 1; }
    (( SECONDS < end )) || { fail_case "the hog did not finish creating QPs in 240 s"; return 1; }
    sleep 0.5
  done
  sed "s/^/  [$1] /" "$TMPD/$1.out"
}

stop_hog() {
  [[ -n "$HOG_PID" ]] || return 0
  kill -9 "$HOG_PID" 2>/dev/null
  wait "$HOG_PID" 2>/dev/null
  HOG_PID=""
  return 0
}

# hog_line NAME KEY: the value after "KEY " in the hog's output: sets LINE.
hog_line() { LINE=$(sed -n "s/^$2 //p" "$TMPD/$1.out"); }

# --- 1. what the daemon got and the defaults it derived
status_snapshot "$VNIC" "$TMPD/status0.json"
json_number "$TMPD/status0.json" descriptors.limit; LIMIT=$NUMBER
json_number "$TMPD/status0.json" descriptors.reserved; RESERVED=$NUMBER
json_number "$TMPD/status0.json" quotas.qps; QP_QUOTA=$NUMBER
json_number "$TMPD/status0.json" quotas.cqs; CQ_QUOTA=$NUMBER
[[ "$LIMIT" == "$(ulimit -Hn)" ]] ||
  fail_case "status: descriptor limit $LIMIT, expected the hard limit the daemon inherited, $(ulimit -Hn)"
log "descriptor limit $LIMIT, reserve $RESERVED, quota $QP_QUOTA QPs and $CQ_QUOTA CQs per process"
(( QP_QUOTA >= 1 && QP_QUOTA * 3 <= (LIMIT - RESERVED) / 4 )) ||
  fail_case "default QP quota $QP_QUOTA does not keep 3 x QPs within a quarter of $LIMIT - $RESERVED descriptors"
log "$(host "$RRDMA_VNIC" status "$VNIC" | grep -E '^(descriptors|quotas)')"

# --- 2. a hog asks for more QPs than the daemon has descriptors for (the daemon inherits
# our hard limit and raises its soft limit to it; counted from that, not from `status`, so
# that a daemon without quotas is put to the same test)
HOG_WANTS=$(( $(ulimit -Hn) / 3 + 100 ))
log "hog: up to $HOG_WANTS RC QPs on $VNIC"
start_hog "$VNIC" "$HOG_WANTS" hog
if wait_hog hog; then
  hog_line hog created
  [[ "$LINE" == "$QP_QUOTA" ]] || fail_case "the hog got $LINE QPs, the quota is $QP_QUOTA"
  hog_line hog refused
  [[ "$LINE" == "12 ENOMEM" ]] || fail_case "the hog's refusal: '$LINE', expected '12 ENOMEM'"

  # --- 3. another process on the same vnic still works
  log "victim: PD, CQ, two QPs and a 4 KiB RDMA WRITE on $VNIC while the hog holds its QPs"
  rc=0
  timeout 60 "$RRDMA_QUOTA_HOG" --dev "$VNIC" victim >"$TMPD/victim.out" 2>&1 || rc=$?
  sed 's/^/  [victim] /' "$TMPD/victim.out"
  (( rc == 0 )) && grep -qx "victim ok" "$TMPD/victim.out" || fail_case "the second process failed (exit $rc)"

  status_snapshot "$VNIC" "$TMPD/status1.json"
  HOG_USE=$("$RRDMA_JSON_GET" quota_use pid qps <"$TMPD/status1.json" 2>/dev/null | awk -v p="$HOG_PID" '$1 == p {print $2}')
  [[ "$HOG_USE" == "$QP_QUOTA" ]] || fail_case "status: the hog (pid $HOG_PID) uses '$HOG_USE' QPs, expected $QP_QUOTA"
  stats_snapshot "$VNIC" "$TMPD/stats1.json"
  json_number "$TMPD/stats1.json" quotas.refused_qps
  (( NUMBER >= 1 )) || fail_case "stats: quotas.refused_qps is $NUMBER, expected at least 1"
  log "status: the hog holds $HOG_USE QPs; stats: quotas.refused_qps $NUMBER"
fi

# --- 4. the hog's death gives its QPs back
stop_hog
wait_until 20 "the hog's QPs released" \
  eval "! host \"$RRDMA_VNIC\" status \"$VNIC\" --json | \"$RRDMA_JSON_GET\" quota_use pid | grep -qx $HOG_PID"

# --- 5. a raised quota allows more
NEEDED=$(( 5000 * 3 + 5 * 2 + 512 ))  # 5000 QPs, their CQ and context, the daemon's own
if (( LIMIT - RESERVED >= NEEDED )); then
  log "up $VNIC_BIG with --max-qps-per-process 5000"
  vnic_up "$VNIC_BIG" --ip "$NET.11/24" --mac "$(mac_for 2)" --bridge "$BR" --max-qps-per-process 5000
  status_snapshot "$VNIC_BIG" "$TMPD/status2.json"
  json_number "$TMPD/status2.json" quotas.qps
  [[ "$NUMBER" == 5000 ]] || fail_case "status: quotas.qps is $NUMBER after --max-qps-per-process 5000"
  start_hog "$VNIC_BIG" 5001 big
  if wait_hog big; then
    hog_line big created
    [[ "$LINE" == 5000 ]] || fail_case "with --max-qps-per-process 5000 the hog got $LINE QPs"
    hog_line big refused
    [[ "$LINE" == "12 ENOMEM" ]] || fail_case "the 5001st QP: '$LINE', expected '12 ENOMEM'"
  fi
  stop_hog
else
  # Not a failure of the quotas: no quota can give what the daemon's RLIMIT_NOFILE lacks.
  log "NOT CHECKED: 5000 QPs need $NEEDED descriptors; this daemon's limit is $LIMIT (reserve $RESERVED)"
fi

finish_cases
