#!/usr/bin/env bash
# Issue 6: our vnic against Linux's rdma_rxe, on the wire, in both directions. Debian's
# unmodified ibverbs-utils and perftest run on the vnic through our libibverbs.so.1
# (`rrdma-vnic exec`) and in a peer VM over rxe (run-peer). One VM per direction runs the
# whole sequence of cases (rrdma-serve / rrdma-connect inside the guest):
#   - VM servers, vnic clients: each case waits for the guest's "ready", runs the client,
#     and collects the server's status from the guest's "done";
#   - vnic servers, VM clients: each case starts the server on the vnic, the guest's
#     client connects as soon as it listens (rrdma-connect retries a refused connection),
#     and the guest's "done" gives the client's status.
# Every case must exit 0 on both sides. tshark captures the bridge throughout: every frame
# must decode in Wireshark as RRoCE with no malformed packet or expert information, and our
# own parser and ICRC (rrdma_capture_check) must accept every frame of both senders.
# Prints a table (direction, case, result). Capture and outputs go to the artifacts.
# Environment: as system tests (RRDMA_VNIC, RRDMA_JSON_GET) plus tests/interop/lib.sh's.
# RRDMA_INTEROP_CASES=REGEX runs only the cases whose name matches (debugging).

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../system/lib.sh
source "$HERE/../system/lib.sh"
# shellcheck source=lib.sh
source "$HERE/lib.sh"

# name | program and arguments, on both sides (the harness adds device, GID, port, server)
CASES=(
  "rc_s1|ibv_rc_pingpong -n 50 -s 1"
  "rc_s1000|ibv_rc_pingpong -n 50 -s 1000"
  "rc_s3000|ibv_rc_pingpong -n 50 -s 3000"
  "rc_s65536|ibv_rc_pingpong -n 20 -s 65536"
  "rc_chk|ibv_rc_pingpong -n 50 -s 4096 -c"
  "uc|ibv_uc_pingpong -n 50 -s 2000"
  "ud|ibv_ud_pingpong -n 50 -s 512"
  # perftest sets max_rd_atomic from the peer's max_qp_rd_atom: rxe offers 128, our device
  # 16, so both sides ask for 16 outstanding READs/atomics (docs/INTEROP.md).
  "write_bw|ib_write_bw -n 200"
  "read_bw|ib_read_bw -n 200 -o 16"
  "send_bw|ib_send_bw -n 200"
  "fetch_add|ib_atomic_bw -n 200 -o 16 -A FETCH_AND_ADD"
  "cmp_swap|ib_atomic_bw -n 200 -o 16 -A CMP_AND_SWAP"
  "write_lat|ib_write_lat -n 200"
)
readonly FIRST_PORT=19000 CASE_TIMEOUT=120

require_interop
require_system
for program in ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_write_lat; do
  command -v "$program" >/dev/null || skip "no '$program' (scripts/deps installs ibverbs-utils and perftest)"
done
interop_init r

BRIDGE=${PREFIX}b VNIC=${PREFIX}v NS=${PREFIX}-p
VM_IP=$NET.2 VNIC_IP=$NET.10 NS_IP=$NET.20
make_bridge "$BRIDGE"
# The programs' TCP side channel needs a kernel address: a namespace with a veth on the
# bridge; their RDMA goes through the vnic.
make_peer "$NS" "$BRIDGE" "${PREFIX}h" "${PREFIX}n" "$NS_IP/24"
vnic_up "$VNIC" --ip "$VNIC_IP/24" --mac "$(mac_for 1)" --bridge "$BRIDGE"
start_capture "$BRIDGE" "$TMPD/vnic_rxe.pcapng"

selected() { [[ -z "${RRDMA_INTEROP_CASES:-}" || "$1" =~ $RRDMA_INTEROP_CASES ]]; }

# gid_flag PROGRAM: ibv_*_pingpong take the GID index with -g, perftest with -x.
gid_flag() { [[ "$1" == ibv_* ]] && echo -g || echo -x; }

# on_vnic PROGRAM ARGS...: in the namespace, over our libibverbs, seeing only the vnic.
on_vnic() {
  ip netns exec "$NS" timeout "$CASE_TIMEOUT" "$RRDMA_VNIC" exec --dev "$VNIC" -- "$@"
}

ROWS=()
KEEP_GOING=1
row() {  # row DIRECTION CASE RESULT [DETAIL]
  ROWS+=("$(printf '%-22s %-10s %-5s %s' "$1" "$2" "$3" "${4:-}")")
  log "$(printf '%-22s %-10s %-5s %s' "$1" "$2" "$3" "${4:-}")"
}

# The line of a program's output that says why it failed (else its last line).
why() {
  { grep -iE "fail|error|couldn|unable|invalid|not supported" "$1" || tail -n 1 "$1"; } | tail -n 1 | tr -s ' \t' ' '
}

# ---------------------------------------------------------------------------------------
# VM servers, vnic clients

vm_servers() {
  local direction="rxe server, vnic client" script="" port=$FIRST_PORT entry name args gid
  local -a names=() ports=()
  for entry in "${CASES[@]}"; do
    name=${entry%%|*} args=${entry#*|}
    selected "$name" || continue
    port=$(( port + 1 ))
    gid=$(gid_flag "$args")
    script+="rrdma-serve $name $port $args $gid \$RRDMA_GID_INDEX -p $port; "
    names+=("$name") ports+=("$port")
  done
  (( ${#names[@]} > 0 )) || return 0
  peer start servers --netns "$HOST_NS" --bridge "$BRIDGE" --tap "${PREFIX}s" --ip "$VM_IP/24" \
    --timeout 600 -- "$script" || fail "server VM did not start: $(cat "$TMPD/servers.err")"
  local i client_rc server_status out stuck=0
  for i in "${!names[@]}"; do
    name=${names[$i]} port=${ports[$i]}
    args=$(case_args "$name")
    out=$TMPD/vnic-client.$name
    if ! await servers "ready $name" 200; then
      row "$direction" "$name" FAIL "the VM's server never got ready: $(cat "$TMPD/await.err")"
      fail_case "$direction $name: no server"
      break
    fi
    client_rc=0
    # shellcheck disable=SC2086
    on_vnic $args -d "$VNIC" "$(gid_flag "$args")" 0 -p "$port" "$VM_IP" >"$out" 2>&1 || client_rc=$?
    server_status=timeout
    await servers "done $name" "$CASE_TIMEOUT" && server_status=$MARK_REST
    if [[ "$client_rc" == 0 && "$server_status" == 0 ]]; then
      row "$direction" "$name" PASS
    else
      row "$direction" "$name" FAIL "vnic client exit $client_rc: $(why "$out") / rxe server: $server_status"
      fail_case "$direction $name"
      # A server still waiting for its client holds up every later case of the sequence.
      [[ "$server_status" == timeout ]] && { stuck=1; break; }
    fi
  done
  if (( stuck )); then peer stop servers; else peer wait servers; fi
  cp "$TMPD/servers.out" "$TMPD/rxe-servers.out" 2>/dev/null
}

case_args() {  # case_args NAME: the program and arguments of case NAME
  local entry
  for entry in "${CASES[@]}"; do
    [[ "${entry%%|*}" == "$1" ]] && { echo "${entry#*|}"; return; }
  done
}

# ---------------------------------------------------------------------------------------
# vnic servers, VM clients

vm_clients() {
  local direction="vnic server, rxe client" script="" port=$(( FIRST_PORT + 100 )) entry name args gid
  local -a names=() ports=()
  for entry in "${CASES[@]}"; do
    name=${entry%%|*} args=${entry#*|}
    selected "$name" || continue
    port=$(( port + 1 ))
    gid=$(gid_flag "$args")
    # The guest's client retries a refused connection for up to 60 s (the vnic's server
    # starts within a second or two of the previous case's end).
    script+="rrdma-connect $name 60 $args $gid \$RRDMA_GID_INDEX -p $port $NS_IP; "
    names+=("$name") ports+=("$port")
  done
  (( ${#names[@]} > 0 )) || return 0
  peer start clients --netns "$HOST_NS" --bridge "$BRIDGE" --tap "${PREFIX}c" --ip "$VM_IP/24" \
    --timeout 600 -- "$script" || fail "client VM did not start: $(cat "$TMPD/clients.err")"
  local i server_pid server_rc client_status out
  for i in "${!names[@]}"; do
    name=${names[$i]} port=${ports[$i]}
    args=$(case_args "$name")
    out=$TMPD/vnic-server.$name
    # shellcheck disable=SC2086
    on_vnic $args -d "$VNIC" "$(gid_flag "$args")" 0 -p "$port" >"$out" 2>&1 &
    server_pid=$!
    BACKGROUND_PIDS+=("$server_pid")
    # The guest's client connects as soon as the server listens (it may be done before we
    # could even see the listening socket). The first case also waits for the VM's boot.
    client_status=timeout
    await clients "done $name" 300 && client_status=$MARK_REST
    server_rc=0
    wait "$server_pid" || server_rc=$?
    if [[ "$server_rc" == 0 && "$client_status" == 0 ]]; then
      row "$direction" "$name" PASS
    else
      row "$direction" "$name" FAIL "vnic server exit $server_rc: $(why "$out") / rxe client: $client_status"
      fail_case "$direction $name"
    fi
  done
  peer wait clients
  cp "$TMPD/clients.out" "$TMPD/rxe-clients.out" 2>/dev/null
}

# ---------------------------------------------------------------------------------------

started=$SECONDS
vm_servers
log "rxe servers done in $(( SECONDS - started ))s"
started=$SECONDS
vm_clients
log "rxe clients done in $(( SECONDS - started ))s"
stop_capture

log "--- vnic $VNIC_IP against rxe $VM_IP"
printf '%s\n' "${ROWS[@]}"
for vm in servers clients; do
  cp "$TMPD/$vm/console.log" "$TMPD/rxe-$vm.console" 2>/dev/null
  cp "$TMPD/$vm/control.log" "$TMPD/rxe-$vm.control" 2>/dev/null
done
save_artifacts vnic_rxe "$TMPD/vnic_rxe.pcapng" "$TMPD"/rxe-*.* "$TMPD"/vnic-*.*
expect_wireshark_clean "$TMPD/vnic_rxe.pcapng"
expect_capture_checked "$TMPD/vnic_rxe.pcapng" --expect-source "$VNIC_IP" --expect-source "$VM_IP"
finish_cases
