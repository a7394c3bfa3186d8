#!/usr/bin/env bash
# Descriptor exhaustion (issue 16): a member of the vnic's group opens connections until
# the daemon runs out of descriptors, and holds them. The daemon once took accept()'s
# EMFILE for "drained", its listener was never woken again, and every later command hung
# for good. Now:
#   1. with the daemon's RLIMIT_NOFILE at 256 (soft and hard: the daemon raises its soft
#      limit to the hard one), root's status and stats answer while the flood is held (a
#      member's newest connection is closed to let root in), the member's own status works
#      once it lets go, and root's down stops the vnic;
#   2. with the normal limit, one uid may hold at most 256 connections: of 300, 44 are
#      closed at once and counted.
# Every command runs under `timeout`: a deaf daemon fails the test, it does not hang it.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/control_lib.sh"
require_system
require_control_tools
command -v prlimit >/dev/null || skip "no 'prlimit' command"
control_init cf
make_test_group

FLOOD_PID=""

# start_flood VNIC COUNT: in the background, as the member; waits for "opened". The
# flooder holds its connections until its stdin (a FIFO this shell keeps open on fd 7)
# ends: release_flood.
start_flood() {
  : >"$TMPD/flood.out"
  rm -f "$TMPD/hold"
  mkfifo -m 0644 "$TMPD/hold"
  exec 7<>"$TMPD/hold"
  "${AS_MEMBER[@]}" "$RRDMA_CONTROL_FLOOD" connections "$RUN_DIR/$1.sock" "$2" \
    <"$TMPD/hold" >"$TMPD/flood.out" 2>"$TMPD/flood.err" 7>&- &
  FLOOD_PID=$!  # setpriv execs the flooder: this is its pid
  CONTROL_PIDS+=("$FLOOD_PID")
  wait_until 30 "the flood to open its connections" grep -q '^opened ' "$TMPD/flood.out"
  log "  flood: $(head -1 "$TMPD/flood.out")"
}
# finish_flood: lets the flooder go and waits (bounded) for it to exit; sets ALIVE.
finish_flood() {
  local rc=0
  exec 7>&-
  wait_until 30 "the flood to end" grep -q '^alive ' "$TMPD/flood.out"
  wait "$FLOOD_PID" || rc=$?
  FLOOD_PID=""
  (( rc == 0 )) || fail "the flooder failed (exit $rc): $(cat "$TMPD/flood.err")"
  ALIVE=$(sed -n 's/^alive //p' "$TMPD/flood.out")
  log "  flood: alive $ALIVE at the end of its hold"
}

# A: descriptor exhaustion. Root's commands must answer while the flood holds.
V="${PREFIX}a"
log "vnic $V with RLIMIT_NOFILE 256"
register_vnic "$V"
timeout 30 prlimit --nofile=256:256 "$RRDMA_VNIC" up --name "$V" --ip "$NET.10/24" --group "$TEST_GROUP" \
  >"$TMPD/up.out" 2>"$TMPD/up.err" || fail "up under prlimit: $(cat "$TMPD/up.err")"
DAEMON_PID=$(cat "$RUN_DIR/$V.pid")
limit=$(awk '/Max open files/ {print $4}' "/proc/$DAEMON_PID/limits")
expect_eq "$limit" 256 "the daemon's RLIMIT_NOFILE"

log "a member floods it with 1000 connections"
start_flood "$V" 1000
log "root's status and stats while the flood holds"
timeout 10 "$RRDMA_VNIC" status "$V" >"$TMPD/status-during.txt" 2>&1 ||
  fail "status during the flood: exit $?: $(cat "$TMPD/status-during.txt")"
control_counter "$V" accept_fd_exhausted
expect_ge "$COUNT" 1 "control.accept_fd_exhausted (the daemon did run out of descriptors)"
counter "$TMPD/control-stats.json" control.evicted_for_root
expect_ge "$COUNT" 1 "control.evicted_for_root"
counter "$TMPD/control-stats.json" control.connections_shed
log "  ok: exhausted, $COUNT connections shed"
finish_flood

log "after the flood: the member's status, then root's down"
timeout 10 "${AS_MEMBER[@]}" "$RRDMA_VNIC" status "$V" >"$TMPD/status-after.txt" 2>&1 ||
  fail "member's status after the flood: $(cat "$TMPD/status-after.txt")"
vnic_down "$V"
expect_vnic_gone "$V"

# B: the per-uid limit, with descriptors to spare.
W="${PREFIX}b"
log "vnic $W: one uid may hold at most 256 connections"
vnic_up "$W" --ip "$NET.11/24" --group "$TEST_GROUP"
start_flood "$W" 300
# Connections still in the backlog when "opened" was printed are judged moments later.
wait_until 20 "44 connections refused" counter_at_least "$W" control.refused_per_uid_limit 44
finish_flood
expect_eq "$ALIVE" 256 "connections the member still held"
control_counter "$W" refused_per_uid_limit
expect_eq "$COUNT" 44 "control.refused_per_uid_limit"
counter "$TMPD/control-stats.json" control.accept_fd_exhausted
expect_eq "$COUNT" 0 "control.accept_fd_exhausted with descriptors to spare"
vnic_down "$W"
expect_vnic_gone "$W"
