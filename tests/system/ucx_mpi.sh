#!/usr/bin/env bash
# Issue 19: Debian's unmodified UCX 1.13 (ucx-utils, libucx0) and Open MPI 4.1 (openmpi-bin)
# over vnics, under `rrdma-vnic exec` (our libibverbs.so.1, the shim's sysfs view and
# /dev/infiniband nodes; docs/IBVERBS.md, "UCX and Open MPI"). The scene is rdma_cm_lib.sh's
# cm_scene: vnic A (.10) and vnic B (.11) on one bridge, namespace A (.20) and B (.30).
#  - ucx_info -d in each namespace lists its own vnic as an IB memory domain with rc_verbs and
#    ud_verbs, and no other IB memory domain;
#  - UCP (ucx_perftest tag_bw, ucp_put_bw, ucp_get, ucp_am_lat): the server in namespace A on
#    vnic A, the client in namespace B on vnic B, ucx_perftest's own TCP exchange over the
#    veths (the client connects to namespace A's address); UCX_TLS=rc_verbs,ud_verbs (rc_verbs
#    alone cannot wire up: UCX needs ud_verbs as its auxiliary transport) and UCX_TLS=ud_verbs;
#  - UCT (put_bw, get, am_lat over rc_verbs; am_lat, am_bw over ud_verbs): both ends on vnic A
#    in namespace A, the daemon looping the RoCE packets back. ucx_perftest's client sends its
#    parameters, the device's name included, to the server, which then opens that device: the
#    two ends of a UCT test must see a device of the same name;
#  - Open MPI (mpi_check.c, every byte and sum checked, pml and osc ucx): both ranks on vnic A;
#    then rank 0 in namespace A on vnic A and rank 1 in namespace B on vnic B, mpirun reaching
#    "host" B through mpi_netns_agent.sh (in place of ssh), its TCP over the veths.
# Each row proves that the NIC carried it: the right vnics' roce.tx_packets / rx_packets grow
# by at least the row's message count; no UCX_TLS names shared memory or tcp. Both sides of
# each pair must exit 0. The table at the end has each row's figure (from ucx_perftest's
# "Final:" line: MB/s for bandwidth tests, usec for latency tests). No timing asserts.
#
# RRDMA_UX_ROWS=REGEX runs only the rows whose "program arguments" match (debugging).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/verbs_lib.sh"
source "$(dirname "$0")/rdma_cm_lib.sh"
TEST_DEADLINE=${RRDMA_TEST_DEADLINE:-540}
init_test ux

# Processes a failed or killed mpirun can leave behind: its ranks and, in namespace B, the
# orted the agent started, none of them a child this shell could wait for. The copies of
# mpi_check and of the agent this test runs live in its own $TMPD (mktemp), and each of
# those processes names one of them on its command line (ranks: the program; orted and
# mpirun: the agent): exactly those are killed, each by its pid.
stop_strays() {
  local proc cmdline
  [[ -n "${TMPD:-}" ]] || return 0
  for proc in /proc/[0-9]*; do
    cmdline=$(tr '\0' ' ' 2>/dev/null <"$proc/cmdline") || continue
    [[ $cmdline == *"$TMPD/"* ]] && kill -9 "${proc#/proc/}" 2>/dev/null
  done
  return 0
}
ux_cleanup() {
  local rc=$?
  stop_strays
  (exit "$rc")
  cm_cleanup
}
trap ux_cleanup EXIT

require_system
for program in ucx_perftest ucx_info stdbuf; do
  command -v "$program" >/dev/null || skip "no '$program': install Debian's ucx-utils (scripts/deps does)"
done
# The MPI rows need mpirun and the test's MPI program (built only when CMake found MPI).
MPI_MISSING=""
command -v mpirun >/dev/null || MPI_MISSING="no mpirun (Debian's openmpi-bin)"
[[ -z "$MPI_MISSING" && ( -z "${RRDMA_MPI_CHECK:-}" || ! -x "${RRDMA_MPI_CHECK:-}" ) ]] &&
  MPI_MISSING="no rrdma_mpi_check (CMake found no MPI: install libopenmpi-dev and configure again)"
cm_scene
KEEP_GOING=1

selected() { [[ -z "${RRDMA_UX_ROWS:-}" || "$1 $2" =~ $RRDMA_UX_ROWS ]]; }

# snap NAME: both vnics' counters, to NAME.a.json and NAME.b.json.
snap() {
  stats_snapshot "$VNIC_A" "$TMPD/$1.a.json"
  stats_snapshot "$VNIC_B" "$TMPD/$1.b.json"
}

# nic_check NAME MIN SIDE:DIR...: each named counter (a:tx is vnic A's roce.tx_packets) must
# have grown by MIN at least from snapshot NAME.before to NAME.after. Sets NIC_NOTE (every
# delta, for the table) and NIC_PROBLEM (empty when all grew enough).
nic_check() {
  local name=$1 min=$2 side dir spec before delta note
  shift 2
  NIC_NOTE="" NIC_PROBLEM=""
  for side in a b; do
    note="${side^^}"
    for dir in tx rx; do
      counter "$TMPD/$name.before.$side.json" "roce.${dir}_packets"
      before=$COUNT
      counter "$TMPD/$name.after.$side.json" "roce.${dir}_packets"
      delta=$(( COUNT - before ))
      note+=" $dir+$delta"
      for spec in "$@"; do
        if [[ $spec == "$side:$dir" ]] && (( delta < min )); then
          NIC_PROBLEM+="vnic ${side^^}'s roce.${dir}_packets grew by $delta, expected at least $min (the row's messages); "
        fi
      done
    done
    NIC_NOTE+="${NIC_NOTE:+, }$note"
  done
}

# The figure of ucx_perftest's "Final:" line: iterations, overhead 50th percentile, average,
# overall (usec), bandwidth average, overall (MB/s), message rate average, overall.
final_figure() {  # final_figure FILE bw|lat
  awk -v kind="$2" '$1 == "Final:" { f = (kind == "bw") ? $7 " MB/s" : $4 " usec" } END { print f }' "$1"
}

# ux_sides a b | a a: where the next ux_pair runs (server side, client side). Sets SERVER_IP,
# the address of the server's namespace, which the client's TCP exchange connects to.
ux_sides() {
  pair_sides "$1" "$2"
  local ip_var="NS_${1^^}_IP"
  SERVER_IP=${!ip_var}
}

UX_LIMIT=180  # seconds for a client; its server gets 60 more
# ux_pair LABEL bw|lat MESSAGES "SIDE:DIR..." "SERVER_ENV" "CLIENT_ENV" ARGS...: ucx_perftest
# ARGS -p PORT as the server, then ucx_perftest ARGS -p PORT SERVER_IP as the client, each
# under `env` with its VAR=VALUE words (no spaces in them). Both must exit 0 and the client
# print its Final line; nic_check MESSAGES SIDE:DIR... must hold. Logs one row.
ux_pair() {
  local label=$1 kind=$2 messages=$3 specs=$4 server_env=$5 client_env=$6
  shift 6
  next_port
  local port=$CM_PORT name="ucx_perftest.$CM_PORT" server_pid server_rc=0 client_rc=- problem=""
  local -a specs_list server_words client_words
  read -ra specs_list <<<"$specs"
  read -ra server_words <<<"$server_env"
  read -ra client_words <<<"$client_env"
  log "run: [$SERVER_NS, $SERVER_DEV] $server_env ucx_perftest $* -p $port  //  [$CLIENT_NS, $CLIENT_DEV] $client_env ucx_perftest $* -p $port $SERVER_IP"
  snap "$name.before"
  cm_start "$name.server" "$SERVER_NS" "$SERVER_DEV" env "${server_words[@]}" ucx_perftest "$@" -p "$port"
  server_pid=$CM_PID
  if wait_listening "$SERVER_NS" "$port" "$server_pid"; then
    cm_run "$name.client" "$UX_LIMIT" "$CLIENT_NS" "$CLIENT_DEV" env "${client_words[@]}" ucx_perftest "$@" -p "$port" "$SERVER_IP"
    client_rc=$CM_RC
    cm_wait "$server_pid" 60
    server_rc=$CM_RC
  else
    problem+="the server did not listen on TCP port $port within 30 s; "
    cm_stop "$server_pid"
    server_rc=$?
  fi
  snap "$name.after"
  [[ $client_rc == 0 || $client_rc == - ]] || problem+="client exit $client_rc$( [[ $client_rc == 124 || $client_rc == 137 ]] && echo " (timed out after ${UX_LIMIT}s)"); "
  (( server_rc == 0 )) || problem+="server exit $server_rc$( (( server_rc == 124 )) && echo " (still running 60 s after the client)"); "
  [[ $client_rc == 0 ]] && ! grep -q '^Final:' "$TMPD/$name.client.out" && problem+="no Final line from the client; "
  nic_check "$name" "$messages" "${specs_list[@]}"
  problem+=$NIC_PROBLEM
  if [[ -z "$problem" ]]; then
    row ucx_perftest "$label" PASS "$(final_figure "$TMPD/$name.client.out" "$kind"); RoCE packets: $NIC_NOTE"
    return 0
  fi
  row ucx_perftest "$label" FAIL "${problem%; }"
  show_output "$name.server" "$server_rc"
  show_output "$name.client" "$client_rc"
  fail_case "ucx_perftest $label: ${problem%; }"
}

# ucx_info_row a|b: `ucx_info -d` in that namespace, under exec --dev of its vnic: one IB
# memory domain, named after the vnic, with rc_verbs and ud_verbs on device VNIC:1.
ucx_info_row() {
  local side=${1^^}
  local ns_var="NS_$side" dev_var="VNIC_$side"
  local ns=${!ns_var} dev=${!dev_var} name="ucx_info.$1" problem="" transports ib_domains
  log "run: [$ns, $dev] ucx_info -d"
  cm_run "$name" 60 "$ns" "$dev" ucx_info -d
  (( CM_RC == 0 )) || problem+="exit $CM_RC; "
  # "# Memory domain: NAME", "#     Component: ib", then "#      Transport: T" and
  # "#         Device: D" pairs until the next memory domain.
  transports=$(awk -v md="$dev" '
    /^# Memory domain:/ { in_md = ($4 == md); next }
    in_md && $2 == "Transport:" { t = $3 }
    in_md && $2 == "Device:" { print t "@" $3 }' "$TMPD/$name.out" | sort | tr '\n' ' ')
  ib_domains=$(grep -cE '^#[[:space:]]+Component: ib$' "$TMPD/$name.out")
  [[ "$transports" == "rc_verbs@$dev:1 ud_verbs@$dev:1 " ]] ||
    problem+="memory domain $dev: transports '${transports% }', expected rc_verbs and ud_verbs on $dev:1; "
  [[ "$ib_domains" == 1 ]] || problem+="$ib_domains IB memory domains, expected 1 (only the exec'd vnic); "
  if [[ -z "$problem" ]]; then
    row ucx_info "-d [$side: $dev]" PASS "memory domain $dev: ${transports% }; the only IB one"
    return 0
  fi
  row ucx_info "-d [$side: $dev]" FAIL "${problem%; }"
  show_output "$name" "$CM_RC"
  fail_case "ucx_info -d on $dev: ${problem%; }"
}

MPI_ENV=()
# mpi_row LABEL "SIDE:DIR..." MPIRUN_ARGS...: mpirun in namespace A under exec --dev vnic A,
# running the test's copy of mpi_check. mpirun must exit 0, rank 0 print PASS and its
# message count, rank 1 its line; nic_check with that count.
mpi_row() {
  local label=$1 specs=$2
  shift 2
  local name="mpirun.$(( ${#ROWS[@]} + 1 ))" problem="" messages
  local -a specs_list
  read -ra specs_list <<<"$specs"
  log "run: [$NS_A, $VNIC_A] mpirun $* $TMPD/mpi_check"
  snap "$name.before"
  cm_run "$name" 240 "$NS_A" "$VNIC_A" env "${MPI_ENV[@]}" mpirun "$@" "$TMPD/mpi_check"
  snap "$name.after"
  (( CM_RC == 0 )) || problem+="mpirun exit $CM_RC$( (( CM_RC == 124 || CM_RC == 137 )) && echo " (timed out after 240 s)"); "
  grep -q '^mpi_check: PASS' "$TMPD/$name.out" || problem+="no 'mpi_check: PASS' from rank 0; "
  grep -q '^mpi_check: rank 1 of 2 ' "$TMPD/$name.out" || problem+="no line from rank 1; "
  grep -qiE 'signal 11|segmentation fault' "$TMPD/$name.out" && problem+="a process died of SIGSEGV; "
  messages=$(sed -nE 's/^mpi_check: rank 0 of 2 on .*: ([0-9]+) messages,.*/\1/p' "$TMPD/$name.out")
  nic_check "$name" "${messages:-1}" "${specs_list[@]}"
  problem+=$NIC_PROBLEM
  if [[ -z "$problem" ]]; then
    row mpirun "$label" PASS "$messages messages each way checked, allreduce checked; RoCE packets: $NIC_NOTE"
    return 0
  fi
  row mpirun "$label" FAIL "${problem%; }"
  show_output "$name" "$CM_RC"
  stop_strays
  fail_case "mpirun $label: ${problem%; }"
}

log "--- ucx_info -d: each namespace's view under exec --dev"
selected ucx_info "-d a" && ucx_info_row a
selected ucx_info "-d b" && ucx_info_row b

log "--- UCP: server [A, vnic A], client [B, vnic B]; tcp and shared memory excluded by UCX_TLS"
ux_sides a b
BW_ARGS=(-s 65536 -n 1000)
LAT_ARGS=(-s 8 -n 1000)
for tls in rc_verbs,ud_verbs ud_verbs; do
  server_env="UCX_TLS=$tls UCX_NET_DEVICES=$VNIC_A:1"
  client_env="UCX_TLS=$tls UCX_NET_DEVICES=$VNIC_B:1"
  # Who sends: tag_bw and put_bw the client (B -> A); get reads the server's memory (A -> B);
  # am_lat is a ping-pong (both ways).
  selected ucx_perftest "-t tag_bw $tls" &&
    ux_pair "-t tag_bw -s 65536 -n 1000, UCX_TLS=$tls" bw 1000 "b:tx a:rx" "$server_env" "$client_env" -t tag_bw "${BW_ARGS[@]}"
  selected ucx_perftest "-t ucp_put_bw $tls" &&
    ux_pair "-t ucp_put_bw -s 65536 -n 1000, UCX_TLS=$tls" bw 1000 "b:tx a:rx" "$server_env" "$client_env" -t ucp_put_bw "${BW_ARGS[@]}"
  selected ucx_perftest "-t ucp_get $tls" &&
    ux_pair "-t ucp_get -s 65536 -n 1000, UCX_TLS=$tls" bw 1000 "a:tx b:rx" "$server_env" "$client_env" -t ucp_get "${BW_ARGS[@]}"
  selected ucx_perftest "-t ucp_am_lat $tls" &&
    ux_pair "-t ucp_am_lat -s 8 -n 1000, UCX_TLS=$tls" lat 1000 "a:tx a:rx b:tx b:rx" "$server_env" "$client_env" -t ucp_am_lat "${LAT_ARGS[@]}"
done

log "--- UCT: both ends [A, vnic A] (one device name on both ends), looped back by the daemon"
ux_sides a a
uct_row() {  # uct_row TL bw|lat ARGS...
  local tl=$1 kind=$2
  shift 2
  selected ucx_perftest "$* -x $tl" || return 0
  ux_pair "$* -x $tl -d A:1" "$kind" 1000 "a:tx a:rx" "" "" -x "$tl" -d "$VNIC_A:1" "$@"
}
uct_row rc_verbs bw -t put_bw -D zcopy -s 65536 -n 1000
uct_row rc_verbs bw -t get -D zcopy -s 65536 -n 1000
uct_row rc_verbs lat -t am_lat -n 1000
uct_row ud_verbs lat -t am_lat -n 1000
uct_row ud_verbs bw -t am_bw -n 1000

log "--- Open MPI: mpi_check over pml ucx and osc ucx (btl openib, vader, tcp, uct excluded)"
if [[ -n "$MPI_MISSING" ]]; then
  log "SKIPPED: the MPI rows: $MPI_MISSING"
  echo "SKIPPED: $TEST_NAME: the MPI rows: $MPI_MISSING" >&2
  row mpirun "(both rows)" SKIPPED "$MPI_MISSING"
else
  cp "$RRDMA_MPI_CHECK" "$TMPD/mpi_check"
  cp "$(dirname "$0")/mpi_netns_agent.sh" "$TMPD/mpi_netns_agent.sh"
  # Open MPI refuses root unless told twice. RRDMA_MPI_HOSTS and RRDMA_VNIC are for the agent.
  MPI_ENV=(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "RRDMA_VNIC=$RRDMA_VNIC"
           "RRDMA_MPI_HOSTS=$NS_A_IP $NS_A $VNIC_A;$NS_B_IP $NS_B $VNIC_B")
  MPI_COMMON=(--mca pml ucx --mca osc ucx --mca btl '^openib,vader,tcp,uct')
  selected mpirun "-np 2 one vnic" &&
    mpi_row "-np 2, both ranks [A, vnic A]" "a:tx a:rx" -np 2 --oversubscribe "${MPI_COMMON[@]}" \
      -x UCX_TLS=rc_verbs,ud_verbs,self -x "UCX_NET_DEVICES=$VNIC_A:1"
  # Rank 1's "host" is namespace B's address: mpirun (not finding it among its own addresses)
  # starts orted there through the agent, which execs it in namespace B under exec --dev vnic
  # B; orted's TCP back to mpirun goes over the veths (oob_tcp_if_include). No
  # UCX_NET_DEVICES: each rank's only IB device is its own vnic.
  # Not on netdev devices: mpirun there runs as the unprivileged user, which cannot enter
  # namespace B (ip netns exec needs CAP_SYS_ADMIN); a real second host would be reached by
  # ssh, which this scene has not.
  if [[ $DEVICE_KIND == netdev ]]; then
    row mpirun "-np 2, rank 0 [A], rank 1 [B]" SKIPPED "netdev: an unprivileged mpirun cannot start orted in another namespace"
  else
  selected mpirun "-np 2 two namespaces" &&
    mpi_row "-np 2, rank 0 [A, vnic A], rank 1 [B, vnic B]" "a:tx a:rx b:tx b:rx" -np 2 \
      -H "$NS_A_IP:1,$NS_B_IP:1" --mca plm_rsh_agent "$TMPD/mpi_netns_agent.sh" \
      --mca oob_tcp_if_include "$NET.0/24" "${MPI_COMMON[@]}" -x UCX_TLS=rc_verbs,ud_verbs,self
  fi
fi

print_rows
finish_cases
