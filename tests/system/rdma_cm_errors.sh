#!/usr/bin/env bash
# Issue 18: the rdma_cm failures Debian's unmodified programs must see, each promptly and
# bounded, between two vnics (rdma_cm_lib.sh's scene; server side vnic A, client side vnic B):
#   no_listener     a REQ to a port nobody listens on: REJECTED 8 (rping, rdma_client: ECONNREFUSED)
#   addr_error      rdma_resolve_addr to an address nobody has on the subnet: ADDR_ERROR after
#                   rping's 2000 ms, not a hang
#   addr_in_use     a second `rping -s` on the same address and port: EADDRINUSE; the first still serves
#   client_killed   kill -9 of a connected rping client: the server sees DISCONNECTED and exits,
#                   vnic B's status forgets the client, the port serves a new pair (not `rping
#                   -s -P`: rping 44's persistent mode hands every child's events to the
#                   listener's state, which its accept loop then misreads, on a kernel too)
#   server_killed   kill -9 of a listening server (cmtime's, which served a client first): a new REQ
#                   gets REJECTED 8 at once, and a new server binds the same port
#   mid_handshake   the server stopped (SIGSTOP) with the client's REQ delivered to it, then killed:
#                   the client gets REJECTED (the daemon rejects for the dead process) within
#                   seconds, not the REQ's 16 retries (~98 s)
# Each case logs what it ran, how long it took, and one result line; a failure shows the
# programs' outputs.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/verbs_lib.sh"
source "$(dirname "$0")/rdma_cm_lib.sh"
TEST_DEADLINE=${RRDMA_TEST_DEADLINE:-600}
init_test ce
cm_install_cleanup
require_system
require_rdmacm rping cmtime rdma_client
cm_scene
KEEP_GOING=1
A=$VNIC_A_IP

# ms_since START_MS: milliseconds since.
ms_since() { echo $(( $(now_ms) - $1 )); }

# expect_fails_with NAME LIMIT_S PATTERN: the program just run by cm_run must have failed (not
# timed out) with a line matching PATTERN, within LIMIT_S seconds (ELAPSED_MS). Logs the row.
expect_fails_with() {
  local name=$1 limit_s=$2 pattern=$3 label=$4 program=$5
  local line
  line=$(grep -E -- "$pattern" "$TMPD/$name.out" | head -n 1)
  if (( CM_RC == 0 )); then
    row "$program" "$label" FAIL "exit 0, expected a failure"
  elif (( CM_RC == 124 || CM_RC == 137 )); then
    row "$program" "$label" FAIL "no answer: killed after the test's ${CM_LIMIT}s"
  elif [[ -z "$line" ]]; then
    row "$program" "$label" FAIL "exit $CM_RC without /$pattern/: $(why "$TMPD/$name.out")"
  elif (( ELAPSED_MS > limit_s * 1000 )); then
    row "$program" "$label" FAIL "'$line' after ${ELAPSED_MS} ms, expected within ${limit_s} s"
  else
    row "$program" "$label" PASS "exit $CM_RC after $ELAPSED_MS ms: $line"
    return 0
  fi
  show_output "$name" "$CM_RC"
  fail_case "$program $label"
}

# timed_run NAME LIMIT NS VNIC PROGRAM ARGS...: cm_run, timed (ELAPSED_MS).
timed_run() {
  local start
  start=$(now_ms)
  CM_LIMIT=$2
  cm_run "$@"
  ELAPSED_MS=$(ms_since "$start")
  log "  ran [$4] $5 ${*:6}: exit $CM_RC after $ELAPSED_MS ms"
}

# wait_for_line FILE PATTERN SECONDS PID: until FILE has a line matching PATTERN; returns 1 if
# PID exits first or the time runs out.
wait_for_line() {
  local end=$(( SECONDS + $3 ))
  until grep -qE -- "$2" "$1" 2>/dev/null; do
    kill -0 "$4" 2>/dev/null || return 1
    (( SECONDS < end )) || return 1
    sleep 0.2
  done
}

log "--- no_listener: a REQ for a port nobody listens on"
next_port
timed_run no_listener.rping 30 "$NS_B" "$VNIC_B" rping -c -a "$A" -p "$CM_PORT" -C 1
expect_fails_with no_listener.rping 10 "RDMA_CM_EVENT_REJECTED, error 8$" "no listener: REJECTED 8" rping
timed_run no_listener.rdma_client 30 "$NS_B" "$VNIC_B" rdma_client -s "$A" -p "$CM_PORT"
expect_fails_with no_listener.rdma_client 10 "rdma_connect: Connection refused" "no listener: ECONNREFUSED" rdma_client

log "--- addr_error: resolving $NOBODY_IP, which nobody on the subnet has (rping resolves with 2000 ms)"
timed_run addr_error.rping 60 "$NS_B" "$VNIC_B" rping -c -a "$NOBODY_IP" -p "$CM_PORT" -C 1
if expect_fails_with addr_error.rping 12 "RDMA_CM_EVENT_ADDR_ERROR" "$NOBODY_IP: ADDR_ERROR" rping &&
   (( ELAPSED_MS < 1500 )); then
  log "  note: ADDR_ERROR came after $ELAPSED_MS ms, before rping's 2000 ms timeout"
fi

log "--- addr_in_use: a second rping -s on the same address and port"
next_port
# -d: the first server says "rdma_bind_addr successful" once it holds the port.
cm_start addr_in_use.first "$NS_A" "$VNIC_A" rping -s -d -a "$A" -p "$CM_PORT"
first=$CM_PID
if ! wait_for_line "$TMPD/addr_in_use.first.out" "rdma_bind_addr successful" 30 "$first"; then
  cm_wait "$first" 1
  row rping "addr in use: first server binds" FAIL "no 'rdma_bind_addr successful' (exit $CM_RC; 124: still running after 30 s)"
  show_output addr_in_use.first "$CM_RC"
  fail_case "rping -s: the first server did not bind"
else
  timed_run addr_in_use.second 30 "$NS_A" "$VNIC_A" rping -s -a "$A" -p "$CM_PORT"
  expect_fails_with addr_in_use.second 10 "rdma_bind_addr: Address already in use" "second -s, same port: EADDRINUSE" rping
  # The first server is not disturbed: it serves a client and exits 0.
  cm_client addr_in_use.client 120 "$first" "$NS_B" "$VNIC_B" rping -c -a "$A" -p "$CM_PORT" -C 10 -V
  forgive_rping_race addr_in_use.client "$CM_RC"
  client_rc=$RC_OUT
  cm_wait "$first" 60
  forgive_rping_race addr_in_use.first "$CM_RC"
  CM_RC=$RC_OUT
  if (( client_rc == 0 && CM_RC == 0 )); then
    row rping "addr in use: the first server serves" PASS "client and server exit 0"
  else
    row rping "addr in use: the first server serves" FAIL "client exit $client_rc, server exit $CM_RC"
    show_output addr_in_use.first "$CM_RC"
    show_output addr_in_use.client "$client_rc"
    fail_case "rping: the first server after EADDRINUSE"
  fi
fi
kill -9 "$first" 2>/dev/null

log "--- client_killed: kill -9 of a connected rping client"
next_port
killed_port=$CM_PORT
cm_start client_killed.server "$NS_A" "$VNIC_A" rping -s -a "$A" -p "$CM_PORT"
server=$CM_PID
connected=0
client_rc=""
end=$(( SECONDS + CM_READY_SECONDS ))
while (( SECONDS < end )); do
  # -v: one line per ping, so the test sees the connection carry data before the kill.
  cm_start client_killed.client "$NS_B" "$VNIC_B" rping -c -v -a "$A" -p "$CM_PORT" -S 64
  client=$CM_PID
  if wait_for_line "$TMPD/client_killed.client.out" "^ping data: rdma-ping-5: " 60 "$client"; then
    connected=1
    break
  fi
  cm_wait "$client" 5
  client_rc=$CM_RC
  grep -qE "$CM_REFUSED" "$TMPD/client_killed.client.out" && kill -0 "$server" 2>/dev/null || break
  sleep 1
done
if (( ! connected )); then
  cm_wait "$server" 1
  row rping "client killed: connect" FAIL "the client never pinged 6 times (client exit $client_rc, server exit $CM_RC; 124: still running)"
  show_output client_killed.server "$CM_RC"
  show_output client_killed.client "$client_rc"
  fail_case "rping: no connection to kill"
else
  log "  the client (pid $client) pinged $(grep -c '^ping data:' "$TMPD/client_killed.client.out") times; kill -9"
  kill_ms=$(now_ms)
  kill -9 "$client"
  wait "$client" 2>/dev/null
  cm_wait "$server" 60
  server_ms=$(ms_since "$kill_ms")
  if (( CM_RC == 124 )); then
    row rping "client killed: server" FAIL "the server still ran 60 s after the kill"
    show_output client_killed.server 124
    fail_case "rping -s after its client's kill -9: no exit"
  elif ! grep -q "server DISCONNECT EVENT" "$TMPD/client_killed.server.out"; then
    row rping "client killed: server" FAIL "exit $CM_RC after $server_ms ms without DISCONNECTED: $(why "$TMPD/client_killed.server.out")"
    show_output client_killed.server "$CM_RC"
    fail_case "rping -s after its client's kill -9: no DISCONNECT EVENT"
  else
    row rping "client killed: server" PASS "DISCONNECT EVENT, exit $CM_RC, $server_ms ms after the kill"
  fi
  gone=0
  for _ in {1..75}; do
    lists_pid "$VNIC_B" "$client" || { gone=1; break; }
    sleep 0.2
  done
  if (( gone )); then
    row rrdma-vnic "client killed: status $VNIC_B" PASS "pid $client no longer listed"
  else
    row rrdma-vnic "client killed: status $VNIC_B" FAIL "still lists pid $client 15 s after kill -9"
    fail_case "status of $VNIC_B still lists the killed client"
  fi
  # The port is free again: a new server binds it and serves a new client.
  PAIR_EXPECT_SERVER=("server DISCONNECT EVENT")
  cm_pair rping "client killed: same port again -C 10" -s -a "$A" -p "$killed_port" -C 10 \
    -- -c -a "$A" -p "$killed_port" -C 10 -V
fi

log "--- server_killed: kill -9 of a listening server (cmtime's, which never exits by itself)"
next_port
cm_start server_killed.server "$NS_A" "$VNIC_A" cmtime -b "$A" -p "$CM_PORT"
server=$CM_PID
cm_client server_killed.client 120 "$server" "$NS_B" "$VNIC_B" cmtime -s "$A" -p "$CM_PORT" -c 2
if (( CM_RC != 0 )) || grep -qE "event: |ERROR" "$TMPD/server_killed.client.out" || ! kill -0 "$server" 2>/dev/null; then
  client_rc=$CM_RC
  cm_wait "$server" 1
  row cmtime "server killed: first client" FAIL "client exit $client_rc: $(why "$TMPD/server_killed.client.out")"
  show_output server_killed.server "$CM_RC"
  show_output server_killed.client "$client_rc"
  fail_case "cmtime: the listener did not serve its first client"
else
  row cmtime "server killed: first client -c 2" PASS "the server listens"
  kill -9 "$server"
  wait "$server" 2>/dev/null
  timed_run server_killed.rping 30 "$NS_B" "$VNIC_B" rping -c -a "$A" -p "$CM_PORT" -C 1
  expect_fails_with server_killed.rping 10 "RDMA_CM_EVENT_REJECTED, error 8$" "server killed: REJECTED 8" rping
  cm_pair rping "server killed: same port again -C 10" -s -a "$A" -p "$CM_PORT" -C 10 \
    -- -c -a "$A" -p "$CM_PORT" -C 10 -V
fi

log "--- mid_handshake: the server stopped with the REQ delivered to it, then killed"
next_port
cm_start mid.server "$NS_A" "$VNIC_A" rping -s -d -a "$A" -p "$CM_PORT"
server=$CM_PID
if ! wait_for_line "$TMPD/mid.server.out" "^rdma_listen$" 30 "$server"; then
  cm_wait "$server" 1
  row rping "mid-handshake: server listens" FAIL "no 'rdma_listen' line (exit $CM_RC; 124: still running after 30 s)"
  show_output mid.server "$CM_RC"
  fail_case "rping -s did not bind"
else
  # rping prints "rdma_listen" just before the call; a second later it waits for its
  # CONNECT_REQUEST, which it will never take: it is stopped.
  sleep 1
  kill -STOP "$server"
  stats_snapshot "$VNIC_A" "$TMPD/mid.a0.json"
  counter "$TMPD/mid.a0.json" gsi.rx_mads
  mads_before=$COUNT
  cm_start mid.client "$NS_B" "$VNIC_B" rping -c -a "$A" -p "$CM_PORT" -C 10
  client=$CM_PID
  delivered=0
  for _ in {1..150}; do
    counter_at_least "$VNIC_A" gsi.rx_mads $(( mads_before + 1 )) && { delivered=1; break; }
    kill -0 "$client" 2>/dev/null || break
    sleep 0.2
  done
  if (( ! delivered )) || ! kill -0 "$client" 2>/dev/null; then
    row rping "mid-handshake: REQ reaches the stopped server's vnic" FAIL "delivered=$delivered, client running: $(kill -0 "$client" 2>/dev/null && echo yes || echo no)"
    show_output mid.client
    fail_case "rping: the REQ did not reach vnic A, or the client gave up"
    kill -9 "$server" "$client" 2>/dev/null
  else
    # Time for the daemon to queue CONNECT_REQUEST on the stopped server's channel.
    sleep 2
    log "  the REQ reached $VNIC_A (gsi.rx_mads > $mads_before); kill -9 of the stopped server $server"
    kill_ms=$(now_ms)
    kill -9 "$server"
    wait "$server" 2>/dev/null
    cm_wait "$client" 30
    ELAPSED_MS=$(ms_since "$kill_ms")
    CM_LIMIT=30
    expect_fails_with mid.client 10 "RDMA_CM_EVENT_REJECTED, error [0-9]+$" "mid-handshake: server killed: REJECTED" rping
  fi
fi

print_rows
finish_cases
