#!/usr/bin/env bash
# Issue 28, items 5 and 6: a `--netdev` device (RoCE v2 through the kernel's UDP socket)
# against Linux's rdma_rxe, both ways, and its wire checked frame by frame.
# The scene, in a private host namespace: a bridge; the rxe VM on a TAP; a namespace with one
# veth on the bridge and one address, where `rrdma-vnic up --netdev` makes the RDMA device on
# that veth and everything of ours (daemon, programs) runs as an ordinary uid with no
# capabilities, as in system.netdev (a uid of its own, below). The programs' TCP side
# channels and rdma_cm reach that one address.
# Cases, each in both directions (rxe servers then rxe clients, in one boot of the VM per
# phase): rping -V, ucmatose, ib_write_bw, ib_read_bw (TCP side channel, no -R), ib_send_bw -R.
# Phases: plain, and loss (the bridge drops 5% of the RoCE frames, except the CM's MADs to
# QP 1: a lost DREQ hangs rdma_cm servers on rxe as anywhere, system.rdma_cm_loss covers the
# CM under loss between vnics).
# Checks: every case exits 0 on both sides; tshark on the veth captures each phase, and
#   - rrdma_netdev_wire_check: every RoCE frame's ICRC verifies over the full IPv4 packet and
#     from the UDP payload alone (the hidden ID solved is the header's); ours have IPv4 ID 0,
#     DF, UDP checksum 0, source port 4791; rxe's have IDs of their own;
#   - Wireshark decodes them all with nothing malformed in the RoCE layers, and
#     rrdma_capture_check (our parser) takes every frame;
#   - rxe's hw_counters (read in the guest before and after each phase; 6.1 has no ICRC
#     counter, and rcvd_pkts counts only frames that passed its header and ICRC checks):
#     rcvd_pkts grew by exactly the frames of ours that reached it (those captured on our
#     veth less those the bridge dropped; under loss up to 10 fewer, for QPs already gone),
#     sent_pkts by rxe's frames captured plus those dropped; in the plain phase rcvd_seq_err
#     and out_of_seq_request did not grow;
#   - our roce.rx_bad_icrc stays 0 and roce.rx_icrc_id_recovered grows (rxe's IDs solved).
# Environment: as the other interop tests, plus RRDMA_NETDEV_WIRE_CHECK.
# RRDMA_INTEROP_CASES=REGEX runs only the cases whose "phase/direction/name" matches.

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../system/lib.sh
source "$HERE/../system/lib.sh"
# shellcheck source=lib.sh
source "$HERE/lib.sh"

# name | kind | server | client. kind: cm (rdma_cm, no TCP), tcp (perftest's TCP side channel).
# @ADDR@ the server's address, @PORT@ the case's port, @DEV@ the side's device, @GID@ its GID
# index (the guest's $RRDMA_GID_INDEX; 0 on ours, the interface's one address).
CASES=(
  "rping|cm|rping -s -V -a @ADDR@ -p @PORT@ -C 20 -S 4000|rping -c -V -a @ADDR@ -p @PORT@ -C 20 -S 4000"
  "ucmatose|cm|ucmatose -b @ADDR@ -p @PORT@ -c 5|ucmatose -s @ADDR@ -p @PORT@ -c 5"
  "write_bw|tcp|ib_write_bw -d @DEV@ -x @GID@ -p @PORT@ -n 200 -s 8192|ib_write_bw -d @DEV@ -x @GID@ -p @PORT@ -n 200 -s 8192 @ADDR@"
  "read_bw|tcp|ib_read_bw -d @DEV@ -x @GID@ -p @PORT@ -n 200 -s 8192|ib_read_bw -d @DEV@ -x @GID@ -p @PORT@ -n 200 -s 8192 @ADDR@"
  "send_bw_R|cm|ib_send_bw -R -d @DEV@ -p @PORT@ -n 200 -s 8192|ib_send_bw -R -d @DEV@ -p @PORT@ -n 200 -s 8192 @ADDR@"
)
readonly CASE_TIMEOUT=180 GUEST_LIMIT=170 CONNECT_LIMIT=90 LOSS_PERCENT=5

require_interop
require_system
command -v setpriv >/dev/null || skip "no setpriv (util-linux)"
command -v nft >/dev/null || skip "no 'nft' (scripts/deps installs nftables)"
command -v ethtool >/dev/null || skip "no 'ethtool' (scripts/deps installs it)"
for program in rping ucmatose ib_write_bw ib_read_bw ib_send_bw; do
  command -v "$program" >/dev/null || skip "no '$program' (scripts/deps installs rdmacm-utils and perftest)"
done
[[ -n "${RRDMA_NETDEV_WIRE_CHECK:-}" && -x "$RRDMA_NETDEV_WIRE_CHECK" ]] || fail "RRDMA_NETDEV_WIRE_CHECK is not set"
interop_init nx

BRIDGE=${PREFIX}b NS=${PREFIX}-p VETH=${PREFIX}n DEV=rr0
VM_IP=$NET.2 ND_IP=$NET.20
VM_MAC=$(mac_for 9)
make_bridge "$BRIDGE"
make_peer "$NS" "$BRIDGE" "${PREFIX}h" "$VETH" "$ND_IP/24"
# Runs of datagrams (UDP_SEGMENT) are cut up in software before the veth, so that the capture
# on it sees each datagram with the IPv4 ID the kernel gave it, as rxe receives them (the VM's
# tap segments anyway: Debian 12's QEMU offers no UDP segmentation offload).
ip netns exec "$NS" ethtool -K "$VETH" tx-udp-segmentation off >/dev/null || fail "ethtool -K $VETH"

# Our side: an ordinary user of this run's own (no passwd entry needed), its state directory,
# the daemon and programs as that user. Not 65534: the kernel charges io_uring's registered
# buffers to the user's RLIMIT_MEMLOCK (8 MiB), across namespaces, and the --netdev daemons
# of other tests running at the same time as nobody used it up ("register transmit buffers:
# Cannot allocate memory").
USER_ID=$(( 70000 + ID_NUM % 20000 ))
RUN=$TMPD/run
mkdir -p "$RUN" && chown "$USER_ID:$USER_ID" "$RUN" && chmod 0700 "$RUN"
chmod 0711 "$TMPD"
AS=(ip netns exec "$NS" setpriv --reuid "$USER_ID" --regid "$USER_ID" --clear-groups --inh-caps=-all
    --bounding-set=-all env HOME=/ RRDMA_RUN_DIR="$RUN")
"${AS[@]}" timeout 30 "$RRDMA_VNIC" up --name "$DEV" --netdev "$VETH" >"$TMPD/up.out" 2>"$TMPD/up.err" ||
  fail "up --netdev $VETH as uid $USER_ID: $(cat "$TMPD/up.err")"
register_pid "$(cat "$RUN/$DEV.pid")"
on_nd() { "${AS[@]}" timeout "$CASE_TIMEOUT" "$RRDMA_VNIC" exec --dev "$DEV" -- "$@"; }

# expand TEMPLATE ADDR PORT DEV GID
expand() {
  local t=$1
  t=${t//@ADDR@/$2}
  t=${t//@PORT@/$3}
  t=${t//@DEV@/$4}
  echo "${t//@GID@/$5}"
}

ROWS=()
# shellcheck disable=SC2034  # read by fail_case (system/lib.sh): a failed case is reported, the next one runs
KEEP_GOING=1
row() {  # row DIRECTION CASE RESULT [DETAIL]
  ROWS+=("$(printf '%-34s %-10s %-5s %s' "$1" "$2" "$3" "${4:-}")")
  log "$(printf '%-34s %-10s %-5s %s' "$1" "$2" "$3" "${4:-}")"
}
why() {
  { grep -iE "fail|error|couldn|unable|invalid|not supported|REJECTED|UNREACHABLE" "$1" || tail -n 1 "$1"; } |
    tail -n 1 | tr -s ' \t' ' '
}

# select_cases PHASE DIRECTION: NAMES, KINDS, SERVERS, CLIENTS of the selected cases.
select_cases() {
  local entry name rest
  NAMES=() KINDS=() SERVERS=() CLIENTS=()
  for entry in "${CASES[@]}"; do
    IFS='|' read -r name kind server client <<<"$entry"
    [[ -z "${RRDMA_INTEROP_CASES:-}" || "$1/$2/$name" =~ $RRDMA_INTEROP_CASES ]] || continue
    NAMES+=("$name") KINDS+=("$kind") SERVERS+=("$server") CLIENTS+=("$client")
  done
}

# drop_data_req CLIENT SERVER PORT / undrop_data_req: the bridge drops, once, the first CM REQ
# CLIENT sends to PORT after SERVER has answered it with a REP: perftest -R's data
# connection, which follows the control connection's REP at once and would otherwise reach
# the server before it listens again (REJ 8, and perftest 4.5's retry crashes: always with the
# slow guest as the server, rdma_cm_rxe.sh; with ours as the server under loss, when the control
# connection's exchange waited for a retransmission). The client's CM sends it again after its
# response timeout. REQs refused before the server listened (the guest's client runs again)
# come before any REP and pass. undrop_data_req adds what was dropped to REQS_DROPPED[CLIENT].
drop_data_req() {
  host nft -f - <<NFT || fail "cannot load the nftables rule that drops perftest's data REQ once"
table bridge rrdma_req_once {
  set answered { type ipv4_addr; flags dynamic; }
  set dropped { type ipv4_addr; flags dynamic; }
  chain forward {
    type filter hook forward priority 0; policy accept;
    ether type ip ip saddr $2 ip daddr $1 udp dport 4791 @th,232,8 0x07 @th,352,16 0x0013 add @answered { ip daddr }
    ether type ip ip saddr $1 udp dport 4791 @th,232,8 0x07 @th,352,16 0x0010 @th,528,16 $3 jump req
  }
  chain req {
    ip saddr @dropped accept
    ip saddr @answered add @dropped { ip saddr } counter drop
  }
}
NFT
  REQ_SOURCE=$1
}
declare -A REQS_DROPPED=()
undrop_data_req() {
  local dropped
  dropped=$(host nft list table bridge rrdma_req_once | sed -nE 's/.*counter packets ([0-9]+).*/\1/p')
  REQS_DROPPED[$REQ_SOURCE]=$(( ${REQS_DROPPED[$REQ_SOURCE]:-0} + ${dropped:-0} ))
  host nft delete table bridge rrdma_req_once
}

# The loss: 5% of the RoCE frames the bridge forwards, both ways, except those to QP 1 (the
# BTH's destination QP: bits 104-127 from the UDP header). One rule per direction, each with
# its counter, so that rxe's counters can be held against the capture on our veth.
start_loss() {
  host nft -f - <<NFT || fail "cannot add the nftables loss rules"
table bridge rrdma_loss {
  chain forward {
    type filter hook forward priority 0; policy accept;
    ether type ip ip saddr $ND_IP udp dport 4791 @th,104,24 != 1 numgen random mod 100 < $LOSS_PERCENT counter drop
    ether type ip ip saddr != $ND_IP udp dport 4791 @th,104,24 != 1 numgen random mod 100 < $LOSS_PERCENT counter drop
  }
}
NFT
}
stop_loss() {  # sets OURS_LOST and THEIRS_LOST: the frames each rule dropped
  local -a counts
  mapfile -t counts < <(host nft list table bridge rrdma_loss | sed -nE 's/.*counter packets ([0-9]+).*/\1/p')
  OURS_LOST=${counts[0]:-} THEIRS_LOST=${counts[1]:-}
  host nft delete table bridge rrdma_loss
}
OURS_LOST=0 THEIRS_LOST=0

# The guest's line that prints rxe's port counters as the control mark "counters TAG k=v...".
# shellcheck disable=SC2016  # expanded in the guest
counters_line() {
  echo 'c=""; for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do c="$c ${f##*/}=$(cat $f)"; done;'" echo \"RRDMA-PEER-MARK counters $1\$c\" >/dev/ttyS2; echo \"rxe counters $1:\$c\"; "
}

# guest_script PHASE: counters, the rxe servers' cases (tags s-NAME), the rxe clients' cases
# (c-NAME), counters. The tags differ: run-peer await finds a mark's first line.
guest_script() {
  local phase=$1 script i port
  script=$(counters_line start)
  select_cases "$phase" rxe-server
  for i in "${!NAMES[@]}"; do
    port=$(( PORT_BASE + i ))
    script+="rrdma-$( [[ ${KINDS[$i]} == cm ]] && echo cm- )serve s-${NAMES[$i]} $port timeout $GUEST_LIMIT "
    # shellcheck disable=SC2016  # the guest's variables
    script+="$(expand "${SERVERS[$i]}" '$RRDMA_IP' "$port" '$RRDMA_DEV' '$RRDMA_GID_INDEX'); "
  done
  select_cases "$phase" nd-server
  for i in "${!NAMES[@]}"; do
    port=$(( PORT_BASE + 50 + i ))
    script+="rrdma-$( [[ ${KINDS[$i]} == cm ]] && echo cm- )connect c-${NAMES[$i]} $CONNECT_LIMIT timeout $GUEST_LIMIT "
    # shellcheck disable=SC2016  # the guest's variables
    script+="$(expand "${CLIENTS[$i]}" "$ND_IP" "$port" '$RRDMA_DEV' '$RRDMA_GID_INDEX'); "
  done
  # rxe's kernel messages (the console is "quiet": warnings do not reach it).
  echo "$script$(counters_line end) dmesg | grep -iE 'rxe|icrc' | sed 's/^/rxe dmesg: /'"
}

# rxe servers, our clients. Returns non-zero when a server is stuck (the VM must be stopped).
rxe_servers() {
  local phase=$1 vm=$2 i port out client_rc server_status direction="$1: rxe server, netdev client"
  select_cases "$phase" rxe-server
  for i in "${!NAMES[@]}"; do
    port=$(( PORT_BASE + i )) out=$TMPD/nd-client.$phase.${NAMES[$i]}
    if ! await "$vm" "ready s-${NAMES[$i]}" 300; then
      row "$direction" "${NAMES[$i]}" FAIL "the VM's server never got ready"
      fail_case "$direction ${NAMES[$i]}"
      return 1
    fi
    [[ ${NAMES[$i]} == send_bw_R ]] && drop_data_req "$ND_IP" "$VM_IP" "$port"
    client_rc=0
    # shellcheck disable=SC2046
    on_nd $(expand "${CLIENTS[$i]}" "$VM_IP" "$port" "$DEV" 0) >"$out" 2>&1 || client_rc=$?
    [[ ${NAMES[$i]} == send_bw_R ]] && undrop_data_req
    server_status=timeout
    await "$vm" "done s-${NAMES[$i]}" "$CASE_TIMEOUT" && server_status=$MARK_REST
    if [[ "$client_rc" == 0 && "$server_status" == 0 ]]; then
      row "$direction" "${NAMES[$i]}" PASS
    else
      row "$direction" "${NAMES[$i]}" FAIL "netdev client exit $client_rc: $(why "$out") / rxe server: $server_status"
      fail_case "$direction ${NAMES[$i]}"
      [[ "$server_status" == timeout ]] && return 1
    fi
  done
  return 0
}

# wait_nd_listener PORT: until `status --json` lists an rdma_cm listener on PORT (10 s at most;
# the guest's client runs again while it is refused anyway).
wait_nd_listener() {
  local end=$(( SECONDS + 10 ))
  while (( SECONDS < end )); do
    "${AS[@]}" "$RRDMA_VNIC" status --json "$DEV" 2>/dev/null | grep -qE "\"local\": *\"[^\"]*:$1\"" && return 0
    sleep 0.2
  done
}

# Our servers, rxe clients.
rxe_clients() {
  local phase=$1 vm=$2 i port out server_pid server_rc client_status started client_done timing
  local direction="$1: netdev server, rxe client"
  select_cases "$phase" nd-server
  for i in "${!NAMES[@]}"; do
    port=$(( PORT_BASE + 50 + i )) out=$TMPD/nd-server.$phase.${NAMES[$i]}
    [[ ${NAMES[$i]} == send_bw_R ]] && drop_data_req "$VM_IP" "$ND_IP" "$port"
    # shellcheck disable=SC2046
    "${AS[@]}" timeout "$CASE_TIMEOUT" "$RRDMA_VNIC" exec --dev "$DEV" -- \
      $(expand "${SERVERS[$i]}" "$ND_IP" "$port" "$DEV" 0) >"$out" 2>&1 &
    server_pid=$!
    BACKGROUND_PIDS+=("$server_pid")
    started=$SECONDS
    [[ ${KINDS[$i]} == cm ]] && wait_nd_listener "$port"
    client_status=timeout
    await "$vm" "done c-${NAMES[$i]}" 300 && client_status=$MARK_REST
    client_done=$SECONDS
    server_rc=0
    wait "$server_pid" || server_rc=$?
    timing="client done after $(( client_done - started ))s, server $(( SECONDS - client_done ))s later"
    [[ ${NAMES[$i]} == send_bw_R ]] && undrop_data_req
    if [[ "$server_rc" == 0 && "$client_status" == 0 ]]; then
      row "$direction" "${NAMES[$i]}" PASS "$timing"
    else
      row "$direction" "${NAMES[$i]}" FAIL "netdev server exit $server_rc: $(why "$out") / rxe client: $client_status ($timing)"
      fail_case "$direction ${NAMES[$i]}"
    fi
  done
}

# parse_counters ARRAY_NAME TEXT: ARRAY[name]=value from the mark's "name=value ...".
declare -A BEFORE=() AFTER=()
parse_counters() {
  local -n into=$1
  local pair
  # shellcheck disable=SC2034  # into is a nameref: the caller's array
  for pair in $2; do into[${pair%%=*}]=${pair#*=}; done
}

# The checks of a phase are cases: one that fails is reported, the next still runs.
soft_eq() { [[ "$1" == "$2" ]] || fail_case "$3: expected '$2', got '$1'"; }
soft_ge() { if ! [[ "$1" =~ ^[0-9]+$ ]] || (( $1 < $2 )); then fail_case "$3: expected at least $2, got '$1'"; fi; }
soft_le() { if ! [[ "$1" =~ ^[0-9]+$ ]] || (( $1 > $2 )); then fail_case "$3: expected at most $2, got '$1'"; fi; }

# selected PHASE: some case of PHASE is selected (RRDMA_INTEROP_CASES).
selected() {
  local direction
  for direction in rxe-server nd-server; do
    select_cases "$1" "$direction"
    (( ${#NAMES[@]} == 0 )) || return 0
  done
  return 1
}

# phase NAME PORT_BASE: one VM, both directions, captured on the veth.
phase() {
  local name=$1 vm=$1 started=$SECONDS stuck=0 k
  PORT_BASE=$2
  selected "$name" || return 0
  ip netns exec "$NS" tshark -i "$VETH" -f "udp port 4791" -w "$TMPD/$name.pcapng" \
    >"$TMPD/tshark.out" 2>"$TMPD/tshark.err" &
  TSHARK_PID=$!
  wait_until 30 "tshark to capture on $VETH" grep -q "Capturing on" "$TMPD/tshark.err"
  "${AS[@]}" "$RRDMA_VNIC" stats --json "$DEV" >"$TMPD/$name.stats0.json"
  peer start "$vm" --netns "$HOST_NS" --bridge "$BRIDGE" --tap "${PREFIX}t" --ip "$VM_IP/24" --mac "$VM_MAC" \
    --timeout 900 -- "$(guest_script "$name")" || fail "the $name VM did not start: $(cat "$TMPD/$vm.err")"
  BEFORE=() AFTER=() REQS_DROPPED=()
  await "$vm" "counters start" 300 && parse_counters BEFORE "$MARK_REST"
  rxe_servers "$name" "$vm" || stuck=1
  (( stuck )) || rxe_clients "$name" "$vm"
  (( stuck )) || { await "$vm" "counters end" 60 && parse_counters AFTER "$MARK_REST"; }
  if (( stuck )); then peer stop "$vm"; else peer wait "$vm"; fi
  stop_capture
  "${AS[@]}" "$RRDMA_VNIC" stats --json "$DEV" >"$TMPD/$name.stats1.json"
  local deltas=""
  for k in $(printf '%s\n' "${!AFTER[@]}" | sort); do
    [[ $k == lifespan ]] && continue
    deltas+=" $k=$(( AFTER[$k] - ${BEFORE[$k]:-0} ))"
  done
  log "phase $name done in $(( SECONDS - started ))s; rxe hw_counters grew by:${deltas:- (not read)}"
  echo "$deltas" >"$TMPD/$name.rxe_counters"
}

# rxe_delta NAME: how much rxe's counter NAME grew in the last phase.
rxe_delta() { echo $(( ${AFTER[$1]:-0} - ${BEFORE[$1]:-0} )); }
our_delta() {  # our_delta PHASE layer.name
  local before after
  counter "$TMPD/$1.stats0.json" "$2"; before=$COUNT
  counter "$TMPD/$1.stats1.json" "$2"; after=$COUNT
  echo $(( after - before ))
}

# check_phase PHASE: the capture and the counters.
check_phase() {
  local name=$1 capture=$TMPD/$1.pcapng ours theirs
  selected "$name" || return 0
  log "--- phase $name: the wire"
  "$RRDMA_NETDEV_WIRE_CHECK" "$capture" --ours "$ND_IP" --peer "$VM_IP" >"$TMPD/wire_check.$name" 2>&1 ||
    fail_case "$name: rrdma_netdev_wire_check refuses frames: $(grep -vE ': ok$' "$TMPD/wire_check.$name" | head -n 8)"
  grep -E "^(source|roce frames|no RoCE|every frame)" "$TMPD/wire_check.$name"
  expect_wireshark_clean "$capture"
  "$RRDMA_CAPTURE_CHECK" "$capture" --expect-source "$VM_IP" --expect-source "$ND_IP" >"$TMPD/capture_check.$name" 2>&1 ||
    fail_case "$name: rrdma_capture_check refuses frames: $(head -c 2000 "$TMPD/capture_check.$name")"
  ours=$(sed -nE "s/^source $ND_IP \(ours\) frames ([0-9]+) .*/\1/p" "$TMPD/wire_check.$name")
  theirs=$(sed -nE "s/^source $VM_IP \(peer\) frames ([0-9]+) .*/\1/p" "$TMPD/wire_check.$name")
  soft_eq "$(our_delta "$name" roce.rx_bad_icrc)" 0 "$name: our roce.rx_bad_icrc"
  soft_ge "$(our_delta "$name" roce.rx_icrc_id_recovered)" 1 "$name: rxe frames whose hidden ID we solved"
  [[ ${#AFTER[@]} -gt 0 ]] || { fail_case "$name: rxe's counters were not read"; return; }
  # rxe counts rcvd_pkts only for frames that passed its header and ICRC checks (rxe_rcv; 6.1
  # has no ICRC counter and logs nothing for a bad one): every frame of ours that reached it
  # must be counted. The capture is on our veth: our frames before the bridge's drops, rxe's
  # after.
  local ours_reached=$(( ours - OURS_LOST - ${REQS_DROPPED[$ND_IP]:-0} ))
  local theirs_sent=$(( theirs + THEIRS_LOST + ${REQS_DROPPED[$VM_IP]:-0} ))
  log "rxe received $(rxe_delta rcvd_pkts) packets of the $ours_reached that reached it ($ours sent, $OURS_LOST lost, ${REQS_DROPPED[$ND_IP]:-0} CM REQ dropped on purpose); it sent $(rxe_delta sent_pkts) ($theirs captured, $THEIRS_LOST lost, ${REQS_DROPPED[$VM_IP]:-0} REQ dropped)"
  [[ -z "${RRDMA_INTEROP_CASES:-}" ]] || return 0
  soft_eq "$(rxe_delta sent_pkts)" "$theirs_sent" "$name: rxe's sent_pkts against its frames on our veth and those the bridge dropped"
  if [[ $name == plain ]]; then
    soft_eq "$(rxe_delta rcvd_pkts)" "$ours_reached" "plain: rxe's rcvd_pkts (frames that passed its header and ICRC checks) against our frames that reached it"
  else
    # Under loss a frame may also meet a QP rxe has already destroyed or moved to the error
    # state (a retransmission after the end), which hdr_check drops before the ICRC: at most.
    soft_le "$(rxe_delta rcvd_pkts)" "$ours_reached" "$name: rxe's rcvd_pkts against our frames that reached it"
    soft_ge "$(rxe_delta rcvd_pkts)" $(( ours_reached - 10 )) "$name: rxe's rcvd_pkts against our frames that reached it, less at most 10 for dead QPs"
  fi
  [[ $name == plain ]] || return 0
  soft_eq "$(rxe_delta rcvd_seq_err)" 0 "plain: rxe's rcvd_seq_err (sequence error NAKs from us)"
  soft_eq "$(rxe_delta out_of_seq_request)" 0 "plain: rxe's out_of_seq_request (gaps in our PSNs)"
}

phase plain 21000
check_phase plain
start_loss
phase loss 21200
stop_loss
log "nftables dropped ${OURS_LOST:-?} of our RoCE frames and ${THEIRS_LOST:-?} of rxe's (no MADs)"
if [[ -z "${RRDMA_INTEROP_CASES:-}" ]]; then
  expect_ge "${OURS_LOST:-x}" 1 "our frames dropped in the loss phase"
  expect_ge "${THEIRS_LOST:-x}" 1 "rxe's frames dropped in the loss phase"
fi
check_phase loss

log "--- netdev $ND_IP (uid $USER_ID) against rxe $VM_IP"
printf '%s\n' "${ROWS[@]}"
for vm in plain loss; do
  cp "$TMPD/$vm.out" "$TMPD/rxe-$vm.out" 2>/dev/null
  cp "$TMPD/$vm/console.log" "$TMPD/rxe-$vm.console" 2>/dev/null
  gzip -1 -c "$TMPD/$vm.pcapng" >"$TMPD/$vm.pcapng.gz" 2>/dev/null
done
save_artifacts netdev_rxe "$TMPD"/*.pcapng.gz "$TMPD"/rxe-* "$TMPD"/nd-* "$TMPD"/wire_check.* "$TMPD"/capture_check.* \
  "$TMPD"/*.rxe_counters
finish_cases
