#!/usr/bin/env bash
# The learner's examples (examples/README.md) between two vnics on one bridge, each
# application in its own namespace, exactly as the README tells a reader to run them:
#   rc_pingpong      server on vnic A, client on vnic B; 200 round trips of 4 KiB, polling;
#                    then 50 round trips sleeping on a completion channel (--events);
#                    then 1 MiB messages (many packets each)
#   write_read_demo  the client WRITEs into the server's memory and READs it back; the
#                    server prints what its buffer holds, which must be the message
# Both sides must exit 0, and the programs check every payload themselves.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/verbs_lib.sh"
TEST_DEADLINE=${RRDMA_TEST_DEADLINE:-600}
init_test ex
require_system
EXAMPLES_DIR="${RRDMA_BUILD_DIR:?}/examples"
for program in rc_pingpong write_read_demo; do
  [[ -x "$EXAMPLES_DIR/$program" ]] || fail "$EXAMPLES_DIR/$program is not built"
done
verbs_scene
KEEP_GOING=1

# run_example NAME SECONDS PROGRAM ARGS...: server in namespace A on vnic A, client in
# namespace B on vnic B (connecting to A's address); both must exit 0 within SECONDS.
run_example() {
  local name=$1 limit=$2 program=$3 server_rc=0 client_rc=0
  shift 3
  ip netns exec "$NS_A" timeout --kill-after=5 "$limit" "$EXAMPLES_DIR/$program" --dev "$VNIC_A" \
    --port "$PEER_PORT" "$@" >"$TMPD/$name.server" 2>&1 &
  local server_pid=$!
  ip netns exec "$NS_B" timeout --kill-after=5 "$limit" "$EXAMPLES_DIR/$program" --dev "$VNIC_B" \
    --port "$PEER_PORT" "$@" "$NS_A_IP" >"$TMPD/$name.client" 2>&1 || client_rc=$?
  wait_pid_bounded "$server_pid" 30 || server_rc=$?
  sed "s/^/  [server] /" "$TMPD/$name.server"
  sed "s/^/  [client] /" "$TMPD/$name.client"
  (( server_rc == 0 && client_rc == 0 )) ||
    fail_case "$name: server exit $server_rc, client exit $client_rc (124: timed out)"
}

log "rc_pingpong, polling"
run_example pingpong 120 rc_pingpong --iters 200 --size 4096
grep -q "200 iters in" "$TMPD/pingpong.client" || fail_case "rc_pingpong printed no summary"

log "rc_pingpong, sleeping on a completion channel"
run_example pingpong_events 120 rc_pingpong --iters 50 --size 512 --events

log "rc_pingpong, 1 MiB messages"
run_example pingpong_large 240 rc_pingpong --iters 4 --size 1048576

log "write_read_demo"
message="written into namespace A by $ID"
run_example write_read 120 write_read_demo --message "$message"
grep -qF "verified" "$TMPD/write_read.client" || fail_case "write_read_demo: the client did not verify"
grep -qF "my buffer now holds: \"$message\"" "$TMPD/write_read.server" ||
  fail_case "write_read_demo: the server's buffer does not hold the message"

finish_cases
