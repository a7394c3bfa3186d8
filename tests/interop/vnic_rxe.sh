#!/usr/bin/env bash
# Issue 6: our vnic against Linux's rdma_rxe, on the wire, in both directions. Debian's
# unmodified ibverbs-utils and perftest run on the vnic through our libibverbs.so.1
# (`rrdma-vnic exec`) and in a peer VM over rxe (run-peer). One VM per direction and phase
# runs the whole sequence of cases (rrdma-serve / rrdma-connect inside the guest):
#   - VM servers, vnic clients: each case waits for the guest's "ready", runs the client,
#     and collects the server's status from the guest's "done";
#   - vnic servers, VM clients: each case starts the server on the vnic; the guest's
#     client connects as soon as it listens (rrdma-connect retries a refused connection),
#     and the guest's "done" gives the client's status.
# Phases: plain (every program; the vnic on a 1500-byte link must use 1024-byte packets,
# as rxe does), loss (nftables drops 5% of the RoCE frames the bridge forwards: go-back-N
# against go-back-N), jumbo (a second vnic on a 9000-byte link against rxe on 1500: still
# 1024), jumbo4096 (that vnic against rxe on 9000 too: 4096). Every case must exit 0 on
# both sides. tshark captures the bridge, one file per phase: every frame must decode in Wireshark as RRoCE with nothing malformed in the RoCE layers, and
# our own parser and ICRC (rrdma_capture_check) must accept every frame of all senders,
# each with the UDP source port our encap would choose.
# Prints a table (phase and direction, case, result). Capture and outputs go to the
# artifacts.
# Environment: as system tests (RRDMA_VNIC, RRDMA_JSON_GET) plus tests/interop/lib.sh's.
# RRDMA_INTEROP_CASES=REGEX runs only the cases whose "phase/name" matches (debugging).

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../system/lib.sh
source "$HERE/../system/lib.sh"
# shellcheck source=lib.sh
source "$HERE/lib.sh"

# name | program and arguments, on both sides (the harness adds device, GID, port, server).
# The perftest messages are 8 KiB, eight full packets each: the capture of the whole test
# stays in the tens of MB. perftest sets max_rd_atomic from the peer's max_qp_rd_atom (128 on
# rxe and on our device): every case runs with it unmodified. ib_read_bw used to ask for 16
# READs only: 128 answered back to back once overran the TCG guest in CI and rxe ran out of
# retries; a READ asked for again now paces that QP's responses (docs/INTEROP.md).
PLAIN_CASES=(
  "rc_s1|ibv_rc_pingpong -n 50 -s 1"
  "rc_s1000|ibv_rc_pingpong -n 50 -s 1000"
  "rc_s3000|ibv_rc_pingpong -n 50 -s 3000"
  "rc_s65536|ibv_rc_pingpong -n 20 -s 65536"
  "rc_chk|ibv_rc_pingpong -n 50 -s 4096 -c"
  "rc_events|ibv_rc_pingpong -n 50 -s 1000 -e"
  "srq|ibv_srq_pingpong -n 50 -s 1000"
  "uc|ibv_uc_pingpong -n 50 -s 2000"
  "ud|ibv_ud_pingpong -n 50 -s 512"
  "write_bw|ib_write_bw -n 200 -s 8192"
  "read_bw|ib_read_bw -n 200 -s 8192"
  "send_bw|ib_send_bw -n 200 -s 8192"
  "fetch_add|ib_atomic_bw -n 200 -A FETCH_AND_ADD"
  "cmp_swap|ib_atomic_bw -n 200 -A CMP_AND_SWAP"
  "write_lat|ib_write_lat -n 200"
  "read_lat|ib_read_lat -n 200"
  "send_lat|ib_send_lat -n 200"
  "atomic_lat|ib_atomic_lat -n 200"
)
LOSS_CASES=(
  "write_bw|ib_write_bw -n 200 -s 8192"
  "read_bw|ib_read_bw -n 200 -s 8192"
)
JUMBO_CASES=(
  "write_bw|ib_write_bw -n 200 -s 8192"
  "rc_s8000|ibv_rc_pingpong -n 20 -s 8000"
)
# ibv_rc_pingpong's path MTU is its -m (default 1024), perftest's the smaller active MTU.
JUMBO4096_CASES=(
  "write_bw|ib_write_bw -n 100 -s 65536"
  "read_bw|ib_read_bw -n 100 -s 65536"
  "rc_s20000|ibv_rc_pingpong -n 20 -s 20000 -m 4096"
)
readonly CASE_TIMEOUT=180 LOSS_PERCENT=5

require_interop
require_system
for program in ibv_devinfo ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong ibv_srq_pingpong ib_write_bw ib_read_bw \
  ib_send_bw ib_atomic_bw ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat; do
  command -v "$program" >/dev/null || skip "no '$program' (scripts/deps installs ibverbs-utils and perftest)"
done
command -v nft >/dev/null || skip "no 'nft' (scripts/deps installs nftables)"
interop_init r

BRIDGE=${PREFIX}b VNIC=${PREFIX}v JUMBO_VNIC=${PREFIX}j NS=${PREFIX}-p
VM_IP=$NET.2 VNIC_IP=$NET.10 JUMBO_IP=$NET.11 NS_IP=$NET.20
# Every VM of the test has the same MAC: they run one after another with the same address,
# and a vnic's ARP cache must not send the next VM's frames to the previous one.
VM_MAC=$(mac_for 9)
make_bridge "$BRIDGE"
# The programs' TCP side channel needs a kernel address: a namespace with a veth on the
# bridge; their RDMA goes through the vnics.
make_peer "$NS" "$BRIDGE" "${PREFIX}h" "${PREFIX}n" "$NS_IP/24"
vnic_up "$VNIC" --ip "$VNIC_IP/24" --mac "$(mac_for 1)" --bridge "$BRIDGE"
# The MTU of the VMs' eth0 and TAP; empty: 1500.
VM_MTU=""

# gid_flag PROGRAM: ibv_*_pingpong take the GID index with -g, perftest with -x.
gid_flag() { [[ "$1" == ibv_* ]] && echo -g || echo -x; }

# on_vnic DEV PROGRAM ARGS...: in the namespace, over our libibverbs, seeing only DEV.
on_vnic() {
  local dev=$1
  shift
  ip netns exec "$NS" timeout "$CASE_TIMEOUT" "$RRDMA_VNIC" exec --dev "$dev" -- "$@"
}

ROWS=()
KEEP_GOING=1
row() {  # row DIRECTION CASE RESULT [DETAIL]
  ROWS+=("$(printf '%-32s %-10s %-5s %s' "$1" "$2" "$3" "${4:-}")")
  log "$(printf '%-32s %-10s %-5s %s' "$1" "$2" "$3" "${4:-}")"
}

# The line of a program's output that says why it failed (else its last line).
why() {
  { grep -iE "fail|error|couldn|unable|invalid|not supported" "$1" || tail -n 1 "$1"; } | tail -n 1 | tr -s ' \t' ' '
}

# select_cases PHASE CASE...: sets NAMES and ARGS (parallel arrays) to the selected cases,
# and records in RAN_PHASES that PHASE ran some.
RAN_PHASES=" "
select_cases() {
  local phase=$1 entry
  shift
  NAMES=() ARGS=()
  for entry in "$@"; do
    [[ -z "${RRDMA_INTEROP_CASES:-}" || "$phase/${entry%%|*}" =~ $RRDMA_INTEROP_CASES ]] || continue
    NAMES+=("${entry%%|*}") ARGS+=("${entry#*|}")
  done
  (( ${#NAMES[@]} == 0 )) || RAN_PHASES+="$phase "
}
ran() { [[ "$RAN_PHASES" == *" $1 "* ]]; }

# ---------------------------------------------------------------------------------------
# VM servers, vnic clients

# vm_servers PHASE DEV PORT_BASE CASE...
vm_servers() {
  local phase=$1 dev=$2 port_base=$3 script="ibv_devinfo -v; " i
  shift 3
  local direction="$phase: rxe server, vnic client" vm=$phase-servers
  select_cases "$phase" "$@"
  (( ${#NAMES[@]} > 0 )) || return 0
  for i in "${!NAMES[@]}"; do
    script+="rrdma-serve ${NAMES[$i]} $(( port_base + i )) ${ARGS[$i]} $(gid_flag "${ARGS[$i]}") \$RRDMA_GID_INDEX -p $(( port_base + i )); "
  done
  peer start "$vm" --netns "$HOST_NS" --bridge "$BRIDGE" --tap "${PREFIX}s" --ip "$VM_IP/24" --mac "$VM_MAC" \
    ${VM_MTU:+--mtu "$VM_MTU"} --timeout 600 -- "$script" || fail "server VM did not start: $(cat "$TMPD/$vm.err")"
  local client_rc server_status out stuck=0
  for i in "${!NAMES[@]}"; do
    out=$TMPD/vnic-client.$phase.${NAMES[$i]}
    if ! await "$vm" "ready ${NAMES[$i]}" 200; then
      row "$direction" "${NAMES[$i]}" FAIL "the VM's server never got ready: $(cat "$TMPD/await.err")"
      fail_case "$direction ${NAMES[$i]}: no server"
      stuck=1
      break
    fi
    client_rc=0
    # shellcheck disable=SC2086
    on_vnic "$dev" ${ARGS[$i]} -d "$dev" "$(gid_flag "${ARGS[$i]}")" 0 -p "$(( port_base + i ))" "$VM_IP" \
      >"$out" 2>&1 || client_rc=$?
    server_status=timeout
    await "$vm" "done ${NAMES[$i]}" "$CASE_TIMEOUT" && server_status=$MARK_REST
    if [[ "$client_rc" == 0 && "$server_status" == 0 ]]; then
      row "$direction" "${NAMES[$i]}" PASS
    else
      row "$direction" "${NAMES[$i]}" FAIL "vnic client exit $client_rc: $(why "$out") / rxe server: $server_status"
      fail_case "$direction ${NAMES[$i]}"
      # A server still waiting for its client holds up every later case of the sequence.
      [[ "$server_status" == timeout ]] && { stuck=1; break; }
    fi
  done
  if (( stuck )); then peer stop "$vm"; else peer wait "$vm"; fi
}

# ---------------------------------------------------------------------------------------
# vnic servers, VM clients

# vm_clients PHASE DEV PORT_BASE CASE...
vm_clients() {
  local phase=$1 dev=$2 port_base=$3 script="" i
  shift 3
  local direction="$phase: vnic server, rxe client" vm=$phase-clients
  select_cases "$phase" "$@"
  (( ${#NAMES[@]} > 0 )) || return 0
  # The guest's client retries a refused connection for up to 60 s (the vnic's server
  # starts within a second or two of the previous case's end).
  for i in "${!NAMES[@]}"; do
    script+="rrdma-connect ${NAMES[$i]} 60 ${ARGS[$i]} $(gid_flag "${ARGS[$i]}") \$RRDMA_GID_INDEX -p $(( port_base + i )) $NS_IP; "
  done
  peer start "$vm" --netns "$HOST_NS" --bridge "$BRIDGE" --tap "${PREFIX}c" --ip "$VM_IP/24" --mac "$VM_MAC" \
    ${VM_MTU:+--mtu "$VM_MTU"} --timeout 600 -- "$script" || fail "client VM did not start: $(cat "$TMPD/$vm.err")"
  local server_pid server_rc client_status out
  for i in "${!NAMES[@]}"; do
    out=$TMPD/vnic-server.$phase.${NAMES[$i]}
    # Not through on_vnic: a function in the background is a subshell, and $! would name
    # it; here $! is timeout (ip netns exec execs it), which passes a SIGTERM on.
    # shellcheck disable=SC2086
    ip netns exec "$NS" timeout "$CASE_TIMEOUT" "$RRDMA_VNIC" exec --dev "$dev" -- \
      ${ARGS[$i]} -d "$dev" "$(gid_flag "${ARGS[$i]}")" 0 -p "$(( port_base + i ))" >"$out" 2>&1 &
    server_pid=$!
    BACKGROUND_PIDS+=("$server_pid")
    # The guest's client connects as soon as the server listens (it may be done before we
    # could even see the listening socket). The first case also waits for the VM's boot.
    client_status=timeout
    await "$vm" "done ${NAMES[$i]}" 300 && client_status=$MARK_REST
    server_rc=0
    wait "$server_pid" || server_rc=$?
    if [[ "$server_rc" == 0 && "$client_status" == 0 ]]; then
      row "$direction" "${NAMES[$i]}" PASS
    else
      row "$direction" "${NAMES[$i]}" FAIL "vnic server exit $server_rc: $(why "$out") / rxe client: $client_status"
      fail_case "$direction ${NAMES[$i]}"
    fi
  done
  peer wait "$vm"
}

# ---------------------------------------------------------------------------------------
# Phases

phase() {  # phase NAME DEV PORT_BASE CASE...: both directions, captured in $TMPD/NAME.pcapng
  local started=$SECONDS
  start_capture "$BRIDGE" "$TMPD/$1.pcapng"
  vm_servers "$@"
  vm_clients "$1" "$2" $(( $3 + 50 )) "${@:4}"
  stop_capture
  log "phase $1 done in $(( SECONDS - started ))s"
  log_engine_counters "$2"
}

# How the vnic's transport fared so far (cumulative): READs asked for again, and how often
# that slowed the responses (docs/TRANSPORT.md, "Pacing READ responses by time").
log_engine_counters() {
  local counters="" name value
  host timeout 10 "$RRDMA_VNIC" stats "$1" --json >"$TMPD/engine-stats.json" 2>/dev/null || return 0
  for name in duplicate_requests read_streams_restarted read_pace_cuts retransmits timeouts transmit_room_waits; do
    value=$("$RRDMA_JSON_GET" "engine.$name" <"$TMPD/engine-stats.json" 2>/dev/null) || value="?"
    counters+=" $name=$value"
  done
  log "$1's engine so far:$counters"
}

# check_capture PHASE VNIC_IP PAYLOAD: the phase's capture passes Wireshark and our checker
# (--check-udp-ports: both ends of every connection chose the port our encap computes for
# the QP pair, and every UD sender its QPN's port: rxe and we hash alike); both senders
# sent full packets of PAYLOAD bytes (every phase has messages of many packets), no more.
check_capture() {
  local capture=$TMPD/$1.pcapng source max
  ran "$1" || return 0
  log "--- capture of phase $1"
  expect_wireshark_clean "$capture"
  expect_capture_checked "$capture" --check-udp-ports --expect-source "$VM_IP" --expect-source "$2"
  cp "$TMPD/capture_check.out" "$TMPD/capture_check.$1"
  # A selection of cases may have no message longer than a packet.
  [[ -z "${RRDMA_INTEROP_CASES:-}" ]] || return 0
  for source in "$VM_IP" "$2"; do
    max=$(sed -n "s/^source $source .* max_payload \([0-9]*\) .*/\1/p" "$TMPD/capture_check.out")
    expect_eq "$max" "$3" "phase $1: the largest payload $source sent"
  done
}

# expect_active_mtu FILE WHO: `ibv_devinfo -v` in FILE shows an active MTU of 1024.
expect_active_mtu() {
  grep -qE "active_mtu:[[:space:]]+1024 " "$1" ||
    fail_case "$2: active_mtu is not 1024: $(grep -E 'active_mtu' "$1" | tr -s ' \t' ' ')"
}

start_loss() {
  host nft -f - <<EOF || fail "cannot add the nftables loss rule"
table bridge rrdma_${PREFIX} {
  chain forward {
    type filter hook forward priority 0; policy accept;
    meta l4proto udp udp dport 4791 numgen random mod 100 < $LOSS_PERCENT counter drop
  }
}
EOF
}

stop_loss() {  # sets DROPPED to the number of RoCE frames the rule dropped
  DROPPED=$(host nft list table bridge "rrdma_$PREFIX" | sed -n 's/.*counter packets \([0-9]*\) .*/\1/p')
  host nft delete table bridge "rrdma_$PREFIX"
}

on_vnic "$VNIC" ibv_devinfo -v >"$TMPD/vnic-devinfo" 2>&1 || fail "ibv_devinfo on $VNIC: $(why "$TMPD/vnic-devinfo")"
expect_active_mtu "$TMPD/vnic-devinfo" "vnic on a 1500-byte link"
phase plain "$VNIC" 19000 "${PLAIN_CASES[@]}"
[[ -s "$TMPD/plain-servers.out" ]] && expect_active_mtu "$TMPD/plain-servers.out" "rxe on a 1500-byte link"

start_loss
phase loss "$VNIC" 19200 "${LOSS_CASES[@]}"
stop_loss
log "nftables dropped $DROPPED RoCE frames"
if ran loss && ! [[ "$DROPPED" =~ ^[1-9][0-9]*$ ]]; then
  fail_case "the loss phase dropped no frame ('$DROPPED')"
fi

# The bridge drops frames larger than the egress port's MTU, and the VM's TAP has 1500:
# the jumbo vnic gets through only if both ends really use 1024-byte packets.
vnic_up "$JUMBO_VNIC" --ip "$JUMBO_IP/24" --mac "$(mac_for 2)" --bridge "$BRIDGE" --mtu 9000
phase jumbo "$JUMBO_VNIC" 19400 "${JUMBO_CASES[@]}"
VM_MTU=9000
phase jumbo4096 "$JUMBO_VNIC" 19600 "${JUMBO4096_CASES[@]}"

log "--- vnics $VNIC_IP (MTU 1500) and $JUMBO_IP (MTU 9000) against rxe $VM_IP (MTU 1500, then 9000)"
printf '%s\n' "${ROWS[@]}"
for vm in "$TMPD"/*-servers "$TMPD"/*-clients; do
  [[ -d "$vm" ]] || continue
  cp "$TMPD/$(basename "$vm").out" "$TMPD/rxe-$(basename "$vm").out" 2>/dev/null
  cp "$vm/console.log" "$TMPD/rxe-$(basename "$vm").console" 2>/dev/null
done
# Compressed: megabytes of mostly repeated payload bytes (tshark reads .pcapng.gz).
for capture in "$TMPD"/*.pcapng; do
  gzip -1 -c "$capture" >"$capture.gz"
done
save_artifacts vnic_rxe "$TMPD"/*.pcapng.gz "$TMPD"/rxe-*.* "$TMPD"/vnic-*
check_capture plain "$VNIC_IP" 1024
check_capture loss "$VNIC_IP" 1024
check_capture jumbo "$JUMBO_IP" 1024
check_capture jumbo4096 "$JUMBO_IP" 4096
save_artifacts vnic_rxe "$TMPD"/capture_check.*
finish_cases
