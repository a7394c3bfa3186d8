#!/usr/bin/env bash
# Issue 19: UCX between our vnic and Linux's rdma_rxe, on the wire, in both directions.
# Debian's unmodified UCX 1.13 (ucx_perftest, UCP tests) runs on the vnic through
# `rrdma-vnic exec` (our libibverbs.so.1 and the sysfs view UCX discovers devices through) and
# in a peer VM over rxe (run-peer; build-peer brings ucx_perftest and UCX's verbs module).
# ucx_perftest's out-of-band channel is TCP: the vnic's side runs in a namespace with a veth
# on the bridge (as vnic_rxe.sh's programs do), the guest's over its eth0. One VM per
# direction runs the whole sequence of cases (rrdma-serve / rrdma-connect inside the guest):
#   - rxe servers, vnic clients: each case waits for the guest's "ready", runs the client,
#     and collects the server's status from the guest's "done";
#   - vnic servers, rxe clients: each case starts the server on the vnic; the guest's client
#     connects as soon as it listens (rrdma-connect retries a refused connection).
# UCP tests only: UCT-level tests need the same device name on both sides (rxe0 / the vnic's).
# Every case must exit 0 on both sides, and the vnic's RoCE counters (roce.tx_packets,
# roce.rx_packets) must have grown during it. Prints a table with the client's final figures.
# The rxe side sets UCX_UD_VERBS_ETH_DGID_CHECK=n: UCX's UD takes the received packet's
# network type from wc.sl as ConnectX reports it, rxe leaves it 0 (IPv6 in that encoding),
# and UCX then reads an IPv4 packet's destination GID from the wrong bytes and drops every
# packet (docs/INTEROP.md, "UCX"). Our device reports ConnectX's encoding: the vnic's side
# needs nothing.
# tshark captures the bridge: every frame must decode in Wireshark as RRoCE, and our parser
# and ICRC (rrdma_capture_check) must accept every frame of both senders.
# Environment: as vnic_rxe.sh. RRDMA_INTEROP_CASES=REGEX runs only the cases whose
# "direction/name" matches ("rxe-server/tag_bw", "vnic-server/ud_tag_bw").

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../system/lib.sh
source "$HERE/../system/lib.sh"
# shellcheck source=lib.sh
source "$HERE/lib.sh"

# name | UCX_TLS | ucx_perftest arguments (the same on both sides; the harness adds -p and
# the server's address). Few iterations and warm-ups (-w; UCX's default is 10000): the guest
# is a TCG VM. 64 KiB messages take UCX's rendezvous protocol (RDMA READ on rc_verbs).
CASES=(
  "tag_bw|rc_verbs,ud_verbs|-t tag_bw -n 200 -w 10 -s 65536"
  "put_bw|rc_verbs,ud_verbs|-t ucp_put_bw -n 200 -w 10 -s 65536"
  "get|rc_verbs,ud_verbs|-t ucp_get -n 200 -w 10 -s 65536"
  "am_lat|rc_verbs,ud_verbs|-t ucp_am_lat -n 200 -w 10 -s 8"
  "ud_tag_bw|ud_verbs|-t tag_bw -n 100 -w 10 -s 65536"
)
# The guest's programs end after GUEST_LIMIT seconds (busybox timeout), so that a hung case
# does not hold up the rest of the sequence; the host's after CASE_TIMEOUT.
readonly CASE_TIMEOUT=180 GUEST_LIMIT=150

require_interop
require_system
command -v ucx_perftest >/dev/null || skip "no 'ucx_perftest' (scripts/deps installs ucx-utils)"
interop_init x

BRIDGE=${PREFIX}b VNIC=${PREFIX}v NS=${PREFIX}-p
VM_IP=$NET.2 VNIC_IP=$NET.10 NS_IP=$NET.20
VM_MAC=$(mac_for 9)
make_bridge "$BRIDGE"
make_peer "$NS" "$BRIDGE" "${PREFIX}h" "${PREFIX}n" "$NS_IP/24"
vnic_up "$VNIC" --ip "$VNIC_IP/24" --mac "$(mac_for 1)" --bridge "$BRIDGE"

# The UCX environment of each side (UCX_TLS comes from the case). UCX picks the RoCE v2
# IPv4 GID of each device by itself (UCX_IB_GID_INDEX=auto).
VNIC_UCX_ENV="UCX_NET_DEVICES=$VNIC:1"
# RRDMA_INTEROP_RXE_UCX_ENV replaces the rxe side's (experiments: the DGID check on).
RXE_UCX_ENV=${RRDMA_INTEROP_RXE_UCX_ENV:-"UCX_NET_DEVICES=rxe0:1 UCX_UD_VERBS_ETH_DGID_CHECK=n"}

# on_vnic TLS ARGS...: ucx_perftest in the namespace, over our libibverbs, seeing only the vnic.
on_vnic() {
  local tls=$1
  shift
  # shellcheck disable=SC2086
  ip netns exec "$NS" timeout "$CASE_TIMEOUT" env UCX_TLS="$tls" $VNIC_UCX_ENV \
    "$RRDMA_VNIC" exec --dev "$VNIC" -- ucx_perftest "$@"
}
# on_rxe TLS ARGS...: the guest's command line for ucx_perftest.
on_rxe() {
  local tls=$1
  shift
  echo "timeout $GUEST_LIMIT env UCX_TLS=$tls $RXE_UCX_ENV ucx_perftest $*"
}

ROWS=()
# shellcheck disable=SC2034  # read by fail_case (system/lib.sh)
KEEP_GOING=1
row() {  # row DIRECTION CASE TLS RESULT [DETAIL]
  ROWS+=("$(printf '%-24s %-10s %-18s %-5s %s' "$@")")
  log "$(printf '%-24s %-10s %-18s %-5s %s' "$@")"
}

# The line of a program's output that says why it failed (else its last line).
why() {
  { grep -iE "error|fail|couldn|unable|invalid|not supported|timeout" "$1" || tail -n 1 "$1"; } |
    tail -n 1 | tr -s ' \t' ' '
}

# figures OUTPUT: ucx_perftest's result line ("Final: ITERATIONS P50 AVERAGE OVERALL BW_AVG
# BW_OVERALL RATE_AVG RATE_OVERALL"; latency or overhead in us, bandwidth in MB/s) as
# "N iters, X us, Y MB/s, Z msg/s" (the overall figures), or nothing.
figures() {
  awk '$1 == "Final:" && NF == 9 { printf "%d iters, %s us, %s MB/s, %s msg/s", $2, $5, $7, $9; exit }' "$1"
}

# select_cases DIRECTION: NAMES, TLSES, ARGS (parallel arrays) of the selected cases.
select_cases() {
  local entry name rest
  NAMES=() TLSES=() ARGS=()
  for entry in "${CASES[@]}"; do
    name=${entry%%|*} rest=${entry#*|}
    [[ -z "${RRDMA_INTEROP_CASES:-}" || "$1/$name" =~ $RRDMA_INTEROP_CASES ]] || continue
    NAMES+=("$name") TLSES+=("${rest%%|*}") ARGS+=("${rest#*|}")
  done
}

# The vnic's RoCE counters around a case: counters_before, then counters_grew CASE, which
# sets GREW to "tx +N rx +M" and returns non-zero unless both grew.
counters_before() { stats_snapshot "$VNIC" "$TMPD/stats.before"; }
counters_grew() {
  local tx rx
  stats_snapshot "$VNIC" "$TMPD/stats.after"
  counter "$TMPD/stats.before" roce.tx_packets; tx=$COUNT
  counter "$TMPD/stats.after" roce.tx_packets; tx=$(( COUNT - tx ))
  counter "$TMPD/stats.before" roce.rx_packets; rx=$COUNT
  counter "$TMPD/stats.after" roce.rx_packets; rx=$(( COUNT - rx ))
  GREW="tx +$tx rx +$rx"
  (( tx > 0 && rx > 0 ))
}

# judge DIRECTION NAME TLS VNIC_RC RXE_STATUS FIGURES_FILE VNIC_OUTPUT: both sides exited 0,
# the client printed its final figures, the vnic's RoCE counters grew.
judge() {
  local grew=0 result
  counters_grew && grew=1
  result=$(figures "$6")
  if [[ "$4" == 0 && "$5" == 0 && -n "$result" ]] && (( grew )); then
    row "$1" "$2" "$3" PASS "$result; vnic RoCE packets $GREW"
  else
    row "$1" "$2" "$3" FAIL "vnic exit $4: $(why "$7") / rxe: $5 / figures: '$result' / vnic RoCE packets $GREW"
    fail_case "$1 $2"
  fi
}

# guest_output VM NAME FILE: the guest's output of case NAME (between rrdma-serve's or
# rrdma-connect's "=== NAME" lines).
guest_output() {
  tr -d '\r' <"$TMPD/$1/output.log" 2>/dev/null | sed -n "/^=== $2: /,/^=== $2 exit /p" >"$3"
}

# ---------------------------------------------------------------------------------------
# rxe servers, vnic clients

rxe_servers() {  # rxe_servers PORT_BASE
  local port_base=$1 script="ucx_info -v; ucx_info -d -t rc_verbs; " i direction="rxe server, vnic client" vm=ucx-servers
  select_cases rxe-server
  (( ${#NAMES[@]} > 0 )) || return 0
  for i in "${!NAMES[@]}"; do
    script+="rrdma-serve ${NAMES[$i]} $(( port_base + i )) $(on_rxe "${TLSES[$i]}" "${ARGS[$i]}" -p $(( port_base + i ))); "
  done
  peer start "$vm" --netns "$HOST_NS" --bridge "$BRIDGE" --tap "${PREFIX}s" --ip "$VM_IP/24" --mac "$VM_MAC" \
    --timeout 900 -- "$script" || fail "server VM did not start: $(cat "$TMPD/$vm.err")"
  local client_rc server_status out started
  for i in "${!NAMES[@]}"; do
    out=$TMPD/vnic-client.${NAMES[$i]}
    if ! await "$vm" "ready ${NAMES[$i]}" 300; then
      row "$direction" "${NAMES[$i]}" "${TLSES[$i]}" FAIL "the VM's server never got ready: $(cat "$TMPD/await.err")"
      fail_case "$direction ${NAMES[$i]}: no server"
      peer stop "$vm"
      return
    fi
    started=$SECONDS
    counters_before
    client_rc=0
    # shellcheck disable=SC2086
    on_vnic "${TLSES[$i]}" ${ARGS[$i]} -p $(( port_base + i )) "$VM_IP" >"$out" 2>&1 || client_rc=$?
    server_status=timeout
    await "$vm" "done ${NAMES[$i]}" "$CASE_TIMEOUT" && server_status=$MARK_REST
    judge "$direction" "${NAMES[$i]}" "${TLSES[$i]}" "$client_rc" "$server_status" "$out" "$out"
    log "$direction ${NAMES[$i]}: $(( SECONDS - started ))s"
  done
  peer wait "$vm"
}

# ---------------------------------------------------------------------------------------
# vnic servers, rxe clients

rxe_clients() {  # rxe_clients PORT_BASE
  local port_base=$1 script="" i direction="vnic server, rxe client" vm=ucx-clients
  select_cases vnic-server
  (( ${#NAMES[@]} > 0 )) || return 0
  # The guest's client runs again while its TCP connection is refused, for up to 60 s (the
  # vnic's server starts within a second or two of the previous case's end).
  for i in "${!NAMES[@]}"; do
    script+="rrdma-connect ${NAMES[$i]} 60 $(on_rxe "${TLSES[$i]}" "${ARGS[$i]}" -p $(( port_base + i )) "$NS_IP"); "
  done
  peer start "$vm" --netns "$HOST_NS" --bridge "$BRIDGE" --tap "${PREFIX}c" --ip "$VM_IP/24" --mac "$VM_MAC" \
    --timeout 900 -- "$script" || fail "client VM did not start: $(cat "$TMPD/$vm.err")"
  local server_pid server_rc client_status out started
  for i in "${!NAMES[@]}"; do
    out=$TMPD/vnic-server.${NAMES[$i]}
    started=$SECONDS
    counters_before
    # Not through on_vnic: $! must be timeout (ip netns exec execs it), not a subshell.
    # shellcheck disable=SC2086
    ip netns exec "$NS" timeout "$CASE_TIMEOUT" env UCX_TLS="${TLSES[$i]}" $VNIC_UCX_ENV \
      "$RRDMA_VNIC" exec --dev "$VNIC" -- ucx_perftest ${ARGS[$i]} -p $(( port_base + i )) >"$out" 2>&1 &
    server_pid=$!
    BACKGROUND_PIDS+=("$server_pid")
    # The first case also waits for the VM's boot.
    client_status=timeout
    await "$vm" "done ${NAMES[$i]}" 300 && client_status=$MARK_REST
    server_rc=0
    wait "$server_pid" || server_rc=$?
    guest_output "$vm" "${NAMES[$i]}" "$out.client"
    judge "$direction" "${NAMES[$i]}" "${TLSES[$i]}" "$server_rc" "$client_status" "$out.client" "$out"
    log "$direction ${NAMES[$i]}: $(( SECONDS - started ))s"
  done
  peer wait "$vm"
}

# ---------------------------------------------------------------------------------------

# Not --check-udp-ports: UCX gives its RC QPs the flow label 0xFFFFFFFF, and rxe and we both
# take every RC connection's port from its 20 bits (65472) rather than from the QPNs; the
# checker knows flow labels only from CM REQs. (UD frames are on their QPN's port, both sides.)
check_capture() {
  local capture=$TMPD/ucx.pcapng
  log "--- the capture"
  expect_wireshark_clean "$capture"
  expect_capture_checked "$capture" --expect-source "$VM_IP" --expect-source "$VNIC_IP"
  cp "$TMPD/capture_check.out" "$TMPD/capture_check.txt"
}

TEST_STARTED=$SECONDS
start_capture "$BRIDGE" "$TMPD/ucx.pcapng"
rxe_servers 21000
log "rxe servers, vnic clients: done at $(( SECONDS - TEST_STARTED ))s"
rxe_clients 21100
log "vnic servers, rxe clients: done at $(( SECONDS - TEST_STARTED ))s"
stop_capture

log "--- UCX 1.13 (ucx_perftest, client's figures): vnic $VNIC_IP against rxe $VM_IP (both MTU 1500)"
printf '%s\n' "${ROWS[@]}"
for vm in "$TMPD"/ucx-servers "$TMPD"/ucx-clients; do
  [[ -d "$vm" ]] || continue
  cp "$TMPD/$(basename "$vm").out" "$TMPD/rxe-$(basename "$vm").out" 2>/dev/null
  cp "$vm/console.log" "$TMPD/rxe-$(basename "$vm").console" 2>/dev/null
done
gzip -1 -c "$TMPD/ucx.pcapng" >"$TMPD/ucx.pcapng.gz"
save_artifacts ucx_rxe "$TMPD/ucx.pcapng.gz" "$TMPD"/rxe-*.* "$TMPD"/vnic-*
check_capture
save_artifacts ucx_rxe "$TMPD/capture_check.txt"
log "the test took $(( SECONDS - TEST_STARTED ))s after the peer was built"
finish_cases
