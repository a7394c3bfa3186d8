#!/usr/bin/env bash
# kill -9 of a vnic's daemon under a running verbs program (issue 16, part 4). Debian's
# ib_write_bw -D 10 between two vnics: server in namespace A on vnic A, client in
# namespace B on vnic B; once the client is transferring, its own daemon (vnic B) is
# killed.
#  - the client must exit non-zero within 1 s of the kill and print no bandwidth figure:
#    the client library notices the hang-up while the program only busy-polls its CQ,
#    the outstanding WRITEs complete flushed and perftest gives up on the failed
#    completion (docs/VERBS_CLIENT.md, "When the daemon dies");
#  - the server, whose daemon lives, must exit non-zero too. With -D the write server
#    only waits on its TCP connection, which the client's exit closes. With -b the server
#    also writes to the dead vnic: its QP can only learn through the transport that
#    nobody answers, so its WRITE must fail with IBV_WC_RETRY_EXC_ERR once perftest's
#    retry budget is spent (timeout 14: 4.096 us * 2^14 = 67 ms per try, 7 retries: 8 tries,
#    0.54 s), and perftest exits. The time each side took is logged.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/verbs_lib.sh"
TEST_DEADLINE=${RRDMA_TEST_DEADLINE:-400}
init_test dd
KEEP_GOING=1
require_system
command -v ib_write_bw >/dev/null || skip "no ib_write_bw (Debian's perftest; scripts/deps installs it)"
command -v ss >/dev/null || skip "no 'ss' (iproute2)"
set_perftest_env
verbs_scene

CLIENT_LIMIT_MS=1000     # the issue's requirement for the side whose daemon died
RETRY_BUDGET_MS=537      # perftest's QP: timeout 14 (4.096 us * 2^14 = 67.1 ms), retry_cnt 7: 8 tries
SERVER_LIMIT_S=10        # the retry budget with room for a loaded machine

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# exit_within PID LIMIT_MS: waits for a background child, polling every 10 ms. Sets
# EXIT_RC (124 when it had to be killed) and EXIT_MS (how long it took from now).
exit_within() {
  local pid=$1 limit=$2 start
  start=$(now_ms)
  EXIT_RC=0
  while kill -0 "$pid" 2>/dev/null; do
    if (( $(now_ms) - start > limit )); then
      EXIT_MS=$(( $(now_ms) - start ))
      kill -9 "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      EXIT_RC=124
      return
    fi
    sleep 0.01
  done
  EXIT_MS=$(( $(now_ms) - start ))
  wait "$pid" || EXIT_RC=$?
}

# A bandwidth result line: "#bytes #iterations BW peak BW average MsgRate" as numbers.
# perftest separates the last column with tabs.
prints_bandwidth() { grep -Eq '^[[:space:]]*[0-9]+[[:space:]]+[0-9]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+' "$1"; }

# kill_client_daemon NAME PORT ARGS...: the run, the kill, and both sides' exits (sets
# CLIENT_RC, CLIENT_MS, SERVER_RC, SERVER_MS; the outputs are $TMPD/NAME.{client,server}).
kill_client_daemon() {
  local name=$1 port=$2
  shift 2
  ip netns exec "$NS_A" "$RRDMA_VNIC" exec --dev "$VNIC_A" -- "${PERFTEST_ENV[@]}" \
    ib_write_bw -d "$VNIC_A" -x 0 -p "$port" "$@" >"$TMPD/$name.server" 2>&1 &
  local server=$!
  wait_listening "$NS_A" "$port" "$server" || fail "$name: ib_write_bw did not listen: $(cat "$TMPD/$name.server")"
  ip netns exec "$NS_B" "$RRDMA_VNIC" exec --dev "$VNIC_B" -- "${PERFTEST_ENV[@]}" \
    ib_write_bw -d "$VNIC_B" -x 0 -p "$port" "$@" "$NS_A_IP" >"$TMPD/$name.client" 2>&1 &
  local client=$!
  # perftest's output to a file is buffered until it exits: the ACK counter of vnic B (new
  # for each case) says when the WRITEs flow. perftest's -D has 2 s of warm-up before the
  # 10 s it measures.
  wait_until 60 "$name: the client to transfer (vnic B's roce_acks.rx_acks to reach 1000)" \
    counter_at_least "$VNIC_B" roce_acks.rx_acks 1000
  sleep 1
  kill -0 "$client" 2>/dev/null || fail "$name: the client ended before the kill: $(cat "$TMPD/$name.client")"
  local daemon
  daemon=$(cat "$RUN_DIR/$VNIC_B.pid")
  log "$name: kill -9 of $VNIC_B's daemon ($daemon) under the client ($client)"
  local killed
  killed=$(now_ms)
  kill -9 "$daemon"
  exit_within "$client" $(( CLIENT_LIMIT_MS * 10 ))
  CLIENT_RC=$EXIT_RC CLIENT_MS=$EXIT_MS
  exit_within "$server" $(( SERVER_LIMIT_S * 1000 * 3 ))
  SERVER_RC=$EXIT_RC SERVER_MS=$(( $(now_ms) - killed ))
  # The pid file would name a pid that may be reused once the daemon is gone; cleanup
  # must not signal it.
  wait_until 10 "$name: the killed daemon to be gone" eval "! pid_alive $daemon"
  rm -f "$RUN_DIR/$VNIC_B.pid"
  sed "s/^/  [client] /" "$TMPD/$name.client"
  sed "s/^/  [server] /" "$TMPD/$name.server"
  log "$name: client exit $CLIENT_RC after $CLIENT_MS ms, server exit $SERVER_RC after $SERVER_MS ms (from the kill)"
}

# check_client NAME: the side whose daemon died.
check_client() {
  (( CLIENT_RC != 124 )) || fail_case "$1: the client still ran $CLIENT_MS ms after its daemon died"
  (( CLIENT_RC != 0 )) || fail_case "$1: the client exited 0 although its daemon died"
  (( CLIENT_MS <= CLIENT_LIMIT_MS )) || fail_case "$1: the client took $CLIENT_MS ms to exit (limit $CLIENT_LIMIT_MS)"
  ! prints_bandwidth "$TMPD/$1.client" || fail_case "$1: the client printed a bandwidth figure"
}

# restart_vnic_b: up of the same name after the kill (as kill_restart.sh), for the next case.
restart_vnic_b() {
  rm -f "$RUN_DIR/$VNIC_B".*
  host ip link del "$VNIC_B" &>/dev/null
  vnic_up "$VNIC_B" --ip "$VNIC_B_IP/24" --mac "$(mac_for 2)" --bridge "$BR"
  wait_reachable "$NS_B" "$VNIC_B_IP"
  wait_reachable "$NS_A" "$VNIC_B_IP"
}

log "ib_write_bw -D 10: the client's daemon dies mid-run"
kill_client_daemon write_d $(( PEER_PORT )) -D 10
check_client write_d
(( SERVER_RC != 0 && SERVER_RC != 124 )) ||
  fail_case "write_d: the server exited $SERVER_RC (124: still running $SERVER_MS ms after the kill)"
(( SERVER_MS <= SERVER_LIMIT_S * 1000 )) || fail_case "write_d: the server took $SERVER_MS ms to exit"

restart_vnic_b
log "ib_write_bw -b -D 10: both sides write; the client's daemon dies mid-run"
kill_client_daemon write_b $(( PEER_PORT + 1 )) -b -D 10
check_client write_b
(( SERVER_RC != 0 && SERVER_RC != 124 )) ||
  fail_case "write_b: the server exited $SERVER_RC (124: still running $SERVER_MS ms after the kill)"
(( SERVER_MS <= SERVER_LIMIT_S * 1000 )) || fail_case "write_b: the server took $SERVER_MS ms to exit"
# perftest: "Failed status 12" is IBV_WC_RETRY_EXC_ERR. It cannot come before the retry
# budget is spent: 8 ACK timeouts of 67 ms counted from the last ACK before the kill.
grep -q 'Failed status 12:' "$TMPD/write_b.server" ||
  fail_case "write_b: the server's WRITE did not fail with IBV_WC_RETRY_EXC_ERR (status 12)"
(( SERVER_MS >= RETRY_BUDGET_MS * 3 / 4 )) ||
  fail_case "write_b: the server gave up after $SERVER_MS ms, before the retry budget ($RETRY_BUDGET_MS ms)"

finish_cases
