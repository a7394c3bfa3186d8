# shellcheck shell=bash
# Shared by the rdma_cm_*.sh tests (issue 18; sourced after lib.sh, not run, not registered):
# Debian's unmodified librdmacm programs (rdmacm-utils, perftest -R) through `rrdma-vnic exec`.
#
# The scene (cm_scene, device_scene.sh): two devices, A .10 and B .11, each its own daemon,
# and two namespaces, the two "hosts" the programs run in. A program in namespace A uses
# device A, one in namespace B device B (`exec --dev`). Unlike the verbs programs there is
# no TCP side channel: everything, addresses included, goes through the CM of the devices'
# daemons, so the addresses the programs are given are the devices' (.10, .11). With
# RRDMA_DEVICE_KIND=tap (the default) these are TAP vnics on a bridge, and the namespaces
# have addresses of their own (.20, .30); with netdev, `up --netdev` devices on the
# namespaces' own veths, whose one address serves TCP and RDMA, the daemons and the programs
# run as uid 65534 without capabilities.
#
# A CM listener opens no socket, so there is nothing like `ss -l` to wait for: a client whose
# REQ finds no listener yet (REJECTED 8, or SIDR status 1 for UD) is tried again, a second
# apart, while its server still runs (cm_client). Every program runs under `timeout` or is
# killed by pid (cm_stop); its output goes to $TMPD/NAME.out, line-buffered (stdbuf -oL, which
# keeps the LD_PRELOAD `exec` sets and adds its own), so a killed program's lines are kept.

CM_READY_SECONDS=${RRDMA_CM_READY_SECONDS:-30}
# A client's lines that say its (first) REQ found no listener yet. rping: "cma event
# RDMA_CM_EVENT_REJECTED, error 8"; ucmatose, cmtime: "event: RDMA_CM_EVENT_REJECTED, error: 8";
# perftest -R: "Unexpected CM event bl blka 8", from the first of its two connections (its
# control channel), which prints only the event's number (8 is REJECTED): seen when its server
# printed its banner before it listened. Not perftest's "Event: RDMA_CM_EVENT_REJECTED; error:
# 8.": that is its second connection (the test's QPs), made after the first one succeeded, to
# a server then in the middle of its protocol, which a new client would only confuse (its
# REQ meets the server's second listener: both hang). The synchronous API (rdma_client,
# rdma_xclient, rsockets): ECONNREFUSED; udaddy (SIDR): "RDMA_CM_EVENT_UNREACHABLE, error: 1".
CM_REFUSED='REJECTED, error:? 8([^0-9]|$)|Unexpected CM event bl blka 8$|Connection refused|UNREACHABLE, error: 1$'

# require_rdmacm PROGRAM...: skips unless each program is installed.
require_rdmacm() {
  local program
  for program in "$@" stdbuf; do
    command -v "$program" >/dev/null ||
      skip "no '$program': install Debian's rdmacm-utils and perftest (scripts/deps does)"
  done
}

source "$(dirname "${BASH_SOURCE[0]}")/device_scene.sh"

# cm_scene [MTU]: the two devices and the namespaces of device_scene.sh (either kind, by
# RRDMA_DEVICE_KIND). Sets BR (tap), VNIC_A/B, NS_A/B, VNIC_A_IP, VNIC_B_IP, NS_A_IP,
# NS_B_IP, NOBODY_IP (on the subnet, answered by nobody), AS_USER and CM_PORT (a first port;
# each pair takes the next one, so a failed pair's listener cannot confuse the next).
cm_scene() {
  CM_PORT=$(( 20000 + ID_NUM % 20000 ))
  device_scene "$@"
}

next_port() { CM_PORT=$(( CM_PORT + 1 )); }

# cm_start NAME NS VNIC PROGRAM ARGS...: PROGRAM in the background in namespace NS, seeing only
# VNIC; its output in $TMPD/NAME.out. Sets CM_PID to the program's own pid (ip netns exec,
# rrdma-vnic exec and stdbuf all exec), so that cm_stop and kill -9 reach the program itself.
# Not a function to start with `&`: $! would then be a subshell's.
cm_start() {
  local name=$1 ns=$2 dev=$3
  shift 3
  ip netns exec "$ns" "${AS_USER[@]}" "$RRDMA_VNIC" exec --dev "$dev" -- stdbuf -oL -eL "$@" >"$TMPD/$name.out" 2>&1 &
  CM_PID=$!
  CM_STARTED+=("$CM_PID")
}

# cm_run NAME LIMIT NS VNIC PROGRAM ARGS...: PROGRAM in the foreground, killed after LIMIT
# seconds (exit 124, or 137 when it ignored SIGTERM). Sets CM_RC; output in $TMPD/NAME.out.
cm_run() {
  local name=$1 limit=$2 ns=$3 dev=$4
  shift 4
  CM_RC=0
  timeout --kill-after=5 "$limit" \
    ip netns exec "$ns" "${AS_USER[@]}" "$RRDMA_VNIC" exec --dev "$dev" -- stdbuf -oL -eL "$@" >"$TMPD/$name.out" 2>&1 || CM_RC=$?
}

# cm_client NAME LIMIT SERVER_PID NS VNIC PROGRAM ARGS...: cm_run, again (a second apart, for
# at most CM_READY_SECONDS) while the client's output says its REQ found no listener and the
# server (SERVER_PID, or "" for none) still runs. Sets CM_RC and CM_TRIES.
cm_client() {
  local name=$1 limit=$2 server_pid=$3
  shift 3
  local end=$(( SECONDS + CM_READY_SECONDS ))
  CM_TRIES=0
  while :; do
    CM_TRIES=$(( CM_TRIES + 1 ))
    cm_run "$name" "$limit" "$@"
    grep -qE "$CM_REFUSED" "$TMPD/$name.out" || return 0
    [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null || return 0
    (( SECONDS < end )) || return 0
    cp "$TMPD/$name.out" "$TMPD/$name.refused"
    sleep 1
  done
}

now_ms() { date +%s%3N; }

# wait_cm_listener VNIC PORT PID: until `rrdma-vnic status VNIC` lists a listener on PORT
# ("rdma_cm listeners:" lines "  TCP 10.1.2.10:7174  backlog free 3"), for at most 15 s, or
# until PID exits. Never fails: it only saves the client's retries (cm_client) the wait.
wait_cm_listener() {
  local end=$(( SECONDS + 15 ))
  while (( SECONDS < end )) && kill -0 "$3" 2>/dev/null; do
    grep -qE ":$2  backlog" <<<"$(host timeout 10 "$RRDMA_VNIC" status "$1" 2>/dev/null)" && return 0
    sleep 0.2
  done
  return 0
}

CM_STARTED=()
# cm_stop PID: ends a program cm_start started: SIGTERM, then SIGKILL after 5 s. Returns its
# exit status (143 or 137 when it had to be stopped).
cm_stop() {
  local pid=$1
  kill -0 "$pid" 2>/dev/null && kill -TERM "$pid" 2>/dev/null
  wait_pid_bounded "$pid" 5
}

# cm_wait PID SECONDS: waits for a program cm_start started; kills it (-9) when it overruns
# (wait_pid_bounded: 124). Sets CM_RC.
cm_wait() {
  CM_RC=0
  wait_pid_bounded "$1" "$2" || CM_RC=$?
}

# Every program this test started and that still runs is killed (by its pid) before lib.sh's
# cleanup takes the vnics down. Installed as the EXIT trap in place of lib.sh's `cleanup`,
# which it then calls.
cm_cleanup() {
  local rc=$? pid
  for pid in "${CM_STARTED[@]}"; do
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
  done
  (exit "$rc")
  cleanup
}
cm_install_cleanup() { trap cm_cleanup EXIT; }

# The line of a program's output that says why it failed (else its last line).
why() {
  { grep -iE "fail|error|couldn|unable|invalid|not supported|refused|unreachable|mismatch" "$1" || tail -n 1 "$1"; } |
    tail -n 1 | tr -s ' \t' ' '
}

# show_output NAME: a program's whole output (its last 60 lines), indented, on stderr.
# RRDMA_CM_LOG_DIR=DIR also keeps the failed programs' outputs there (with a refused first
# try's, NAME.refused).
show_output() {
  local file="$TMPD/$1.out"
  if [[ -n "${RRDMA_CM_LOG_DIR:-}" ]]; then
    mkdir -p "$RRDMA_CM_LOG_DIR" && cp "$TMPD/$1".* "$RRDMA_CM_LOG_DIR/" 2>/dev/null
  fi
  echo "  --- $1 (exit ${2:-?}), last lines of its output:" >&2
  if [[ -s "$file" ]]; then tail -n 60 "$file" | sed 's/^/  | /' >&2; else echo "  | (nothing)" >&2; fi
}

# rping_teardown_race FILE: FILE (an rping's output) ends with its event thread's
# "rdma_get_cm_event: Bad file descriptor" right after its "DISCONNECT EVENT...": rping's own
# race at exit. Its main thread destroys the id (which waits until the thread has acked the
# DISCONNECTED event) and closes the channel; the event thread, back from the ack, calls
# rdma_get_cm_event on the closed descriptor and exits 255 (`exit(ret)`), before main's
# `return 0` when it wins the race. A kernel's write() on a closed descriptor is EBADF as
# well; the window is wider here only because destroying an id is a round trip to the daemon,
# and a loaded 2-core machine preempts the thread inside it. Seen once in ~100 rping runs.
rping_teardown_race() {
  [[ "$(tail -n 2 "$1")" == *"DISCONNECT EVENT..."$'\n'"rdma_get_cm_event: Bad file descriptor" ]]
}
# forgive_rping_race NAME RC: sets RC_OUT to RC, or to 0 (and adds to RACE_NOTE) when NAME's
# output is an rping's that lost only rping_teardown_race.
RACE_NOTE=""
forgive_rping_race() {
  RC_OUT=$2
  if [[ "$2" == 255 ]] && rping_teardown_race "$TMPD/$1.out"; then
    RACE_NOTE+=", $1: rping's exit race (EBADF after DISCONNECTED) forgiven"
    log "  $1: exit 255 from rping's own teardown race (rdma_get_cm_event on its closed channel), counted as 0"
    RC_OUT=0
  fi
}

ROWS=()
# row PROGRAM ARGS RESULT FIGURE: one line of the table printed at the end, logged now.
row() {
  local line
  line=$(printf '%-13s %-46s %-8s %s' "$1" "$2" "$3" "$4")
  ROWS+=("$line")
  log "$line"
}
print_rows() {
  echo
  printf '%-13s %-46s %-8s %s\n' program arguments result figure
  printf '%s\n' "${ROWS[@]}"
  echo
}

# The figures: perftest's last result line (bw: BW average MB/s, column 4; lat: t_avg usec,
# column 6), as tests/ibverbs/unmodified_programs.sh reads them.
BW_FIGURE='/^[[:space:]]*[0-9]+[[:space:]]+[0-9]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+/ {f = $1 " B: " $4 " MB/s"} END {print f}'
LAT_FIGURE='/^[[:space:]]*[0-9]+[[:space:]]+[0-9]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+/ {f = $1 " B: " $6 " us avg"} END {print f}'

# Where a pair runs. The server side defaults to namespace A on vnic A, the client side to
# namespace B on vnic B; the loopback cases set both to A.
SERVER_NS=""; SERVER_DEV=""; CLIENT_NS=""; CLIENT_DEV=""
pair_sides() {  # pair_sides a b | a a
  local s=${1^^} c=${2^^}
  local ns_var="NS_$s" dev_var="VNIC_$s"
  SERVER_NS=${!ns_var}; SERVER_DEV=${!dev_var}
  ns_var="NS_$c"; dev_var="VNIC_$c"
  CLIENT_NS=${!ns_var}; CLIENT_DEV=${!dev_var}
}

# Options of the next cm_pair (each reset by it):
PAIR_LIMIT=180         # seconds for the client; the server gets 60 more to finish after it
PAIR_SERVER_STAYS=0    # 1: the server never exits by itself (cmtime, udpong): it must still run
                       #    when the client is done, and is then stopped
PAIR_EXPECT_CLIENT=()  # grep -E patterns the client's output must contain
PAIR_EXPECT_SERVER=()  # the same for the server
PAIR_REFUSE_CLIENT=""  # a grep -E pattern the client's output must not contain
PAIR_FIGURE=""         # an awk program that prints the figure from the client's output
PAIR_DECLINE=""        # a grep -E pattern: a clean failure matching it is DECLINED, not FAIL
PAIR_CLIENT_PROGRAM="" # the client's program when it is not the server's (rdma_server/rdma_client)
PAIR_PORT=""           # the port the server listens on, when it is not CM_PORT (udaddy's 7174)
PAIR_LOST_DREQ_OK=0    # 1 (lossy links): a server still waiting for DISCONNECTED because the
                       #    client's one DREQ was lost is stopped, not failed (see lost_dreq)
reset_pair_options() {
  PAIR_LIMIT=180; PAIR_SERVER_STAYS=0; PAIR_EXPECT_CLIENT=(); PAIR_EXPECT_SERVER=()
  PAIR_REFUSE_CLIENT=""; PAIR_FIGURE=""; PAIR_DECLINE=""; PAIR_CLIENT_PROGRAM=""; PAIR_PORT=""
  PAIR_LOST_DREQ_OK=0
}

# dreq_counts: sets DREQ_SENT (the client vnic's cm.tx_dreq) and DREQ_SEEN (the server vnic's
# cm.rx_dreq).
dreq_counts() {
  stats_snapshot "$CLIENT_DEV" "$TMPD/dreq.client.json"
  stats_snapshot "$SERVER_DEV" "$TMPD/dreq.server.json"
  counter "$TMPD/dreq.client.json" cm.tx_dreq
  DREQ_SENT=$COUNT
  counter "$TMPD/dreq.server.json" cm.rx_dreq
  DREQ_SEEN=$COUNT
}

# lost_dreq SENT0 SEEN0: the client's vnic sent a DREQ since the counts SENT0/SEEN0 were taken
# and the server's vnic received none. A client that destroys its id right after
# rdma_disconnect (rping does) ends its DREQ's retries, as the kernel's cm_destroy_id does in
# DREQ_SENT; when that one DREQ is dropped, the server waits for DISCONNECTED for ever, on
# rdma_rxe as here. Only a lossy link's test accepts it (PAIR_LOST_DREQ_OK).
lost_dreq() {
  dreq_counts
  (( DREQ_SENT > $1 && DREQ_SEEN == $2 ))
}

# cm_pair PROGRAM LABEL SERVER_ARGS -- CLIENT_ARGS: PROGRAM SERVER_ARGS in the background on
# the server side, then PROGRAM (or PAIR_CLIENT_PROGRAM) CLIENT_ARGS on the client side
# (cm_client); both must exit 0 (a PAIR_SERVER_STAYS server must still be running), each
# output must hold its PAIR_EXPECT_* patterns. Logs one row: PASS with the figure and time, DECLINED, or FAIL with both outputs.
# Returns non-zero through fail_case on failure.
cm_pair() {
  local program=$1 label=$2
  shift 2
  local server_args=() client_args=()
  while (( $# )) && [[ $1 != -- ]]; do server_args+=("$1"); shift; done
  [[ ${1:-} == -- ]] && shift
  client_args=("$@")
  local name="${program##*/}.$CM_PORT" server_rc=0 client_rc pattern problem="" start server_pid
  local client_program=${PAIR_CLIENT_PROGRAM:-$program}
  [[ -n "$SERVER_NS" ]] || pair_sides a b
  log "run: [$SERVER_DEV] $program ${server_args[*]}  //  [$CLIENT_DEV] $client_program ${client_args[*]}"
  local dreq_sent0=0 dreq_seen0=0
  if (( PAIR_LOST_DREQ_OK )); then dreq_counts; dreq_sent0=$DREQ_SENT; dreq_seen0=$DREQ_SEEN; fi
  start=$(now_ms)
  cm_start "$name.server" "$SERVER_NS" "$SERVER_DEV" "$program" "${server_args[@]}"
  server_pid=$CM_PID
  wait_cm_listener "$SERVER_DEV" "${PAIR_PORT:-$CM_PORT}" "$server_pid"
  cm_client "$name.client" "$PAIR_LIMIT" "$server_pid" "$CLIENT_NS" "$CLIENT_DEV" "$client_program" "${client_args[@]}"
  client_rc=$CM_RC
  local elapsed
  elapsed=$(awk -v ms="$(( $(now_ms) - start ))" 'BEGIN {printf "%.1f", ms / 1000}')
  # A feature the vnic does not offer (XRC): a client that fails cleanly and says so is
  # recorded as declined, with the program's own words; its server, which never saw a
  # REQ, is stopped. A hang or any other failure is a failure.
  if [[ -n "$PAIR_DECLINE" ]] && (( client_rc != 0 && client_rc != 124 && client_rc != 137 )) &&
     grep -qE -- "$PAIR_DECLINE" "$TMPD/$name.client.out"; then
    kill -0 "$server_pid" 2>/dev/null && cm_stop "$server_pid"
    row "$program" "$label" DECLINED "$(grep -hE -- "$PAIR_DECLINE" "$TMPD/$name.client.out" | head -n 1)"
    reset_pair_options
    return 0
  fi
  # Debian's perftest 4.5-0.17 -R: when its second connection (the test's QPs) is refused
  # because the server has not listened again yet (a race of perftest's own, likelier on a
  # loaded machine), its retry reuses the ids it has just destroyed and dies of SIGSEGV in
  # rdma_resolve_addr (fixed upstream: perftest 3d9d8d0, "Fix crashes and logical flaws in
  # RDMA CM connection retry"). Between two vnics this no longer happens (issue 27: the CM
  # holds a REQ up to 1 s for a listener about to come; rdma_cm_back_to_back has no retry):
  # what follows is a safety net. Not the vnic's doing: the pair runs again, at most five
  # times (a CI run on the loaded 2-core machine lost ib_send_lat -R's race three times in a
  # row, 2026-11-27; each lost attempt costs well under a second). Its server, then
  # mid-protocol, is stopped at once.
  if (( client_rc != 0 )) && grep -q "^Event: RDMA_CM_EVENT_REJECTED; error: 8\.$" "$TMPD/$name.client.out" &&
     (( ${CM_PERFTEST_RERUNS:-0} < 5 )); then
    log "  perftest's second connection was refused (its server had not listened again yet) and its retry died (exit $client_rc, perftest's bug): the pair again"
    cp "$TMPD/$name.client.out" "$TMPD/$name.client.rerun$(( ${CM_PERFTEST_RERUNS:-0} + 1 ))"
    kill -0 "$server_pid" 2>/dev/null && cm_stop "$server_pid"
    CM_PERFTEST_RERUNS=$(( ${CM_PERFTEST_RERUNS:-0} + 1 ))
    local rc=0
    cm_pair "$program" "$label" "${server_args[@]}" -- "${client_args[@]}" || rc=$?
    CM_PERFTEST_RERUNS=0
    return "$rc"
  fi
  RACE_NOTE=""
  if [[ $client_program == rping ]]; then forgive_rping_race "$name.client" "$client_rc"; client_rc=$RC_OUT; fi
  if (( PAIR_SERVER_STAYS )); then
    if kill -0 "$server_pid" 2>/dev/null; then
      cm_stop "$server_pid" || true
    else
      wait "$server_pid" 2>/dev/null || server_rc=$?
      problem+="the server exited (status $server_rc) before it was stopped; "
    fi
  else
    cm_wait "$server_pid" 60
    server_rc=$CM_RC
    if (( server_rc == 124 && client_rc == 0 && PAIR_LOST_DREQ_OK )) && lost_dreq "$dreq_sent0" "$dreq_seen0"; then
      log "  the client's DREQ was lost (its vnic sent $(( DREQ_SENT - dreq_sent0 )), the server's received none) and the client destroyed its id: the server, waiting for DISCONNECTED, was stopped"
      RACE_NOTE+=", the client's one DREQ lost: server stopped"
      server_rc=0
    fi
    if [[ $program == rping ]]; then forgive_rping_race "$name.server" "$server_rc"; server_rc=$RC_OUT; fi
  fi
  (( client_rc == 0 )) || problem+="client exit $client_rc$( (( client_rc == 124 || client_rc == 137 )) && echo " (timed out after ${PAIR_LIMIT}s)"); "
  (( PAIR_SERVER_STAYS || server_rc == 0 )) || problem+="server exit $server_rc$( (( server_rc == 124 )) && echo " (still running 60 s after the client)"); "
  for pattern in "${PAIR_EXPECT_CLIENT[@]}"; do
    grep -qE -- "$pattern" "$TMPD/$name.client.out" || problem+="client output lacks /$pattern/; "
  done
  for pattern in "${PAIR_EXPECT_SERVER[@]}"; do
    grep -qE -- "$pattern" "$TMPD/$name.server.out" || problem+="server output lacks /$pattern/; "
  done
  if [[ -n "$PAIR_REFUSE_CLIENT" ]] && grep -qE -- "$PAIR_REFUSE_CLIENT" "$TMPD/$name.client.out"; then
    problem+="client output has /$PAIR_REFUSE_CLIENT/: $(grep -E -- "$PAIR_REFUSE_CLIENT" "$TMPD/$name.client.out" | head -n 1); "
  fi
  local tries=""
  (( CM_TRIES > 1 )) && tries=", client tried $CM_TRIES times (no listener yet)"
  (( ${CM_PERFTEST_RERUNS:-0} > 0 )) && tries+=", pair run $(( CM_PERFTEST_RERUNS + 1 )) times (perftest's retry bug)"
  if [[ -z "$problem" ]]; then
    local figure=""
    [[ -n "$PAIR_FIGURE" ]] && figure=$(awk "$PAIR_FIGURE" "$TMPD/$name.client.out")
    row "$program" "$label" PASS "${figure:+$figure, }${elapsed}s$tries$RACE_NOTE"
    reset_pair_options
    return 0
  fi
  row "$program" "$label" FAIL "${problem%; }"
  show_output "$name.server" "$server_rc"
  show_output "$name.client" "$client_rc"
  [[ -e "$TMPD/$name.client.refused" && $CM_TRIES -gt 1 ]] && echo "  (the client was refused $(( CM_TRIES - 1 )) time(s) before)" >&2
  reset_pair_options
  fail_case "$program $label: ${problem%; }"
}

# The connection setup rate from cmtime's table ("connect : total ms  max ms  min us  us/conn"),
# for CONNECTIONS connections.
cmtime_rate() {  # cmtime_rate FILE CONNECTIONS
  awk -v n="$2" '$1 == "connect" && $2 == ":" && $3 > 0 {printf "%d connections in %.0f ms: %.1f connections/s", n, $3, n * 1000 / $3}' "$1"
}
