# Shared by the verbs_*.sh tests (sourced after lib.sh, not run, not registered).
#
# The scene (verbs_scene): one bridge; two vnics on it, each its own daemon (A: .10,
# B: .11); two namespaces with a veth port on the same bridge (A: .20, B: .30). An
# application in namespace A uses vnic A, one in namespace B uses vnic B; RoCE v2 goes
# vnic A <-> bridge <-> vnic B, and the peers' side channel (QP numbers, keys, steps) is
# ordinary TCP between the namespaces' veths, as with ibv_rc_pingpong.
#
# Needs RRDMA_VERBS_PEER (the rrdma_verbs_peer program; tests/system/CMakeLists.txt sets it).

verbs_scene() {
  [[ -n "${RRDMA_VERBS_PEER:-}" && -x "$RRDMA_VERBS_PEER" ]] || fail "RRDMA_VERBS_PEER is not an executable: '${RRDMA_VERBS_PEER:-}'"
  BR="${PREFIX}b"
  VNIC_A="${PREFIX}va"
  VNIC_B="${PREFIX}vb"
  NS_A="${PREFIX}-a"
  NS_B="${PREFIX}-b"
  VNIC_A_IP="$NET.10"
  VNIC_B_IP="$NET.11"
  NS_A_IP="$NET.20"
  NS_B_IP="$NET.30"
  # The side channel's TCP port: unique per run only to read logs more easily (each
  # namespace has its own port space).
  PEER_PORT=$(( 20000 + ID_NUM % 20000 ))

  make_bridge "$BR"
  make_peer "$NS_A" "$BR" "${PREFIX}ha" "${PREFIX}na" "$NS_A_IP/24"
  make_peer "$NS_B" "$BR" "${PREFIX}hb" "${PREFIX}nb" "$NS_B_IP/24"
  log "up $VNIC_A ($VNIC_A_IP) and $VNIC_B ($VNIC_B_IP) on $BR"
  vnic_up "$VNIC_A" --ip "$VNIC_A_IP/24" --mac "$(mac_for 1)" --bridge "$BR"
  vnic_up "$VNIC_B" --ip "$VNIC_B_IP/24" --mac "$(mac_for 2)" --bridge "$BR"
  # Every path the peers use: each namespace to its vnic (ARP learnt both ways), and the
  # namespaces to each other (the side channel).
  wait_reachable "$NS_A" "$VNIC_A_IP"
  wait_reachable "$NS_B" "$VNIC_B_IP"
  wait_reachable "$NS_A" "$VNIC_B_IP"
  wait_reachable "$NS_B" "$VNIC_A_IP"
  wait_reachable "$NS_B" "$NS_A_IP"
}

# peer_in NETNS ARGS...: the verbs peer program in a namespace.
peer_in() {
  local ns=$1
  shift
  ip netns exec "$ns" "$RRDMA_VERBS_PEER" "$@"
}

# start_server NAME ARGS...: the server side in namespace A on vnic A, in the background;
# its output goes to $TMPD/NAME.server. Sets SERVER_PID.
start_server() {
  local name=$1
  shift
  # Not through peer_in: a function in the background is a subshell, and SERVER_PID must
  # be the program's own pid (ip netns exec execs it) for kill -9 and for `status`.
  ip netns exec "$NS_A" "$RRDMA_VERBS_PEER" --server --dev "$VNIC_A" --port "$PEER_PORT" "$@" \
    >"$TMPD/$name.server" 2>&1 &
  SERVER_PID=$!
}

# run_pair NAME SECONDS ARGS...: the same arguments on both sides (server in A on vnic A,
# client in B on vnic B); both must exit 0 within SECONDS. Each side waits at most a third
# of that for any one completion or message, so that a side that gives up still has time
# to say why before the whole pair is stopped. Each side's lines are logged. Returns
# non-zero (through fail_case) when either side failed.
run_pair() {
  local name=$1 limit=$2 server_rc=0 client_rc=0
  shift 2
  local wait=$(( limit / 3 > 0 ? limit / 3 : 1 ))
  start_server "$name" --timeout "$wait" "$@"
  timeout --kill-after=5 "$limit" \
    ip netns exec "$NS_B" "$RRDMA_VERBS_PEER" --connect "$NS_A_IP" --dev "$VNIC_B" --port "$PEER_PORT" \
    --timeout "$wait" "$@" >"$TMPD/$name.client" 2>&1 || client_rc=$?
  wait_pid_bounded "$SERVER_PID" 30 || server_rc=$?
  sed "s/^/  [server] /" "$TMPD/$name.server"
  sed "s/^/  [client] /" "$TMPD/$name.client"
  (( server_rc == 0 && client_rc == 0 )) ||
    fail_case "$name: server exit $server_rc, client exit $client_rc (124: timed out)"
}

# set_perftest_env: PERFTEST_ENV, the prefix to run Debian's perftest with (after lib.sh's
# init_test). In a sanitizer build our libibverbs.so.1 needs the ASan runtime loaded before
# the program's own libraries: it is preloaded, with leak checks off (perftest's leaks are
# not ours). Empty otherwise.
set_perftest_env() {
  PERFTEST_ENV=()
  local asan_runtime
  asan_runtime=$(ldd "${RRDMA_BUILD_DIR:?}/lib/rrdma-ibverbs/libibverbs.so.1" 2>/dev/null | awk '/libasan/ {print $3}')
  [[ -n "$asan_runtime" ]] &&
    PERFTEST_ENV=(env "LD_PRELOAD=$asan_runtime" "ASAN_OPTIONS=detect_leaks=0:log_path=$TMPD/asan-perftest")
  return 0
}

# wait_pid_bounded PID SECONDS: waits for a background child; kills it when it overruns.
# Returns the child's exit status (124 when it had to be killed).
wait_pid_bounded() {
  local pid=$1 limit=$2 end=$(( SECONDS + $2 ))
  while kill -0 "$pid" 2>/dev/null; do
    if (( SECONDS >= end )); then
      kill -9 "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      return 124
    fi
    sleep 0.2
  done
  wait "$pid"
}

# vnic_status_json NAME FILE: `rrdma-vnic status NAME --json` (fails the test if it does not answer).
vnic_status_json() { status_snapshot "$1" "$2"; }

# verbs_counter_delta_at_least BEFORE AFTER layer.name MIN: a case-level check (fail_case).
verbs_counter_delta_at_least() {
  local before after
  before=$("$RRDMA_JSON_GET" "$3" <"$1" 2>/dev/null)
  after=$("$RRDMA_JSON_GET" "$3" <"$2" 2>/dev/null)
  if ! [[ "$before" =~ ^[0-9]+$ && "$after" =~ ^[0-9]+$ ]]; then
    fail_case "counter $3 missing from stats (before '$before', after '$after')"
    return 1
  fi
  if (( after - before < $4 )); then
    fail_case "counter $3 grew by $(( after - before )), expected at least $4"
    return 1
  fi
  log "  $3 grew by $(( after - before ))"
}

# process_pids NAME: the pids `rrdma-vnic status NAME --json` lists under "processes", one
# a line (empty when none); returns non-zero when status does not answer.
process_pids() {
  host timeout 10 "$RRDMA_VNIC" status "$1" --json >"$TMPD/pids.json" 2>/dev/null || return 1
  "$RRDMA_JSON_GET" processes pid <"$TMPD/pids.json" 2>/dev/null || true
}

# lists_pid NAME PID: status of NAME lists PID among its processes.
lists_pid() { process_pids "$1" | grep -qx "$2"; }
