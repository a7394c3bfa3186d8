#!/usr/bin/env bash
# Issue 19: memory windows between our vnic and Linux's rdma_rxe, on the wire, both ways.
# tests/interop/mw_peer.c runs on the vnic (`rrdma-vnic exec`, in a namespace with a veth on
# the bridge for its TCP control connection) and in one peer VM over rxe (run-peer --add puts
# the program in the guest). The owner binds windows and judges, the user reads, writes and
# invalidates through them (see mw_peer.c for the cases):
#   - rxe owns, the vnic uses: our requester's WRITE, READ and SEND with Invalidate against
#     rxe's windows (the guest's rrdma-serve says "ready", then the vnic's user connects);
#   - the vnic owns, rxe uses: our responder's windows against rxe's requests (the guest's
#     rrdma-connect retries until the vnic's owner listens).
# Both programs must exit 0 with every case PASS. The vnic's RoCE counters must grow in each
# direction. tshark captures the bridge: every frame decodes as RRoCE in Wireshark and passes
# our parser and ICRC.
# With rxe as the owner, mw_peer runs with --rxe: it allows rxe's three known deviations and
# prints an "rxe: ..." line for each it meets, which this test logs: rxe checks an access
# through a type 2 window against its region's range, not the window's (docs/VERBS_MEMORY.md),
# reports a SEND with Invalidate's receive with the kernel's flag bit, and acknowledges a SEND
# with Invalidate of a type 1 window, failing the receive instead (docs/INTEROP.md,
# "Memory windows against rxe").

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../system/lib.sh
source "$HERE/../system/lib.sh"
# shellcheck source=lib.sh
source "$HERE/lib.sh"

readonly CASE_TIMEOUT=240 GUEST_LIMIT=200

require_interop
require_system
[[ -n "${RRDMA_MW_PEER:-}" && -x "$RRDMA_MW_PEER" ]] || fail "RRDMA_MW_PEER is not set (tests/interop/CMakeLists.txt)"
interop_init mw

BRIDGE=${PREFIX}b VNIC=${PREFIX}v NS=${PREFIX}-p
VM_IP=$NET.2 VNIC_IP=$NET.10 NS_IP=$NET.20
readonly OWNER_PORT=22100 USER_PORT=22101
make_bridge "$BRIDGE"
make_peer "$NS" "$BRIDGE" "${PREFIX}h" "${PREFIX}n" "$NS_IP/24"
vnic_up "$VNIC" --ip "$VNIC_IP/24" --mac "$(mac_for 1)" --bridge "$BRIDGE"

# on_vnic ARGS...: mw_peer in the namespace, over our libibverbs, on the vnic.
on_vnic() {
  ip netns exec "$NS" timeout "$CASE_TIMEOUT" "$RRDMA_VNIC" exec --dev "$VNIC" -- "$RRDMA_MW_PEER" "$@"
}

# The guest: rxe owns first (the vnic's user connects to it), then rxe uses the vnic's
# windows. \$RRDMA_GID_INDEX is the guest's (peer-init).
GUEST_OWNER="timeout $GUEST_LIMIT mw_peer owner --rxe --gid-index \$RRDMA_GID_INDEX $OWNER_PORT"
GUEST_USER="timeout $GUEST_LIMIT mw_peer user --gid-index \$RRDMA_GID_INDEX $NS_IP $USER_PORT"
SCRIPT="rrdma-serve owner $OWNER_PORT $GUEST_OWNER; rrdma-connect user 90 $GUEST_USER"

counters_grew() {  # counters_grew BEFORE AFTER: GREW="tx +N rx +M"; true if both grew
  local tx rx
  counter "$1" roce.tx_packets; tx=$COUNT
  counter "$2" roce.tx_packets; tx=$(( COUNT - tx ))
  counter "$1" roce.rx_packets; rx=$COUNT
  counter "$2" roce.rx_packets; rx=$(( COUNT - rx ))
  GREW="tx +$tx rx +$rx"
  (( tx > 0 && rx > 0 ))
}

# guest_output NAME FILE: the guest's output of case NAME.
guest_output() {
  tr -d '\r' <"$TMPD/mw/output.log" 2>/dev/null | sed -n "/^=== $1: /,/^=== $1 exit /p" >"$2"
}

# judge DIRECTION VNIC_RC GUEST_STATUS OWNER_OUTPUT: both exited 0, the owner passed all eight
# cases, the vnic's counters grew.
ROWS=()
KEEP_GOING=1
judge() {
  local passed
  passed=$(grep -c '^PASS ' "$4")
  stats_snapshot "$VNIC" "$TMPD/stats.after"
  if [[ "$2" == 0 && "$3" == 0 ]] && (( passed == 8 )) && counters_grew "$TMPD/stats.before" "$TMPD/stats.after"; then
    ROWS+=("$(printf '%-22s PASS  %s cases; vnic RoCE packets %s' "$1" "$passed" "$GREW")")
  else
    counters_grew "$TMPD/stats.before" "$TMPD/stats.after"
    ROWS+=("$(printf '%-22s FAIL  vnic exit %s, rxe %s, %s cases passed, %s' "$1" "$2" "$3" "$passed" \
      "$(grep -m1 '^FAIL' "$TMPD"/*.out "$TMPD"/guest.* 2>/dev/null | head -n 1)")")
    fail_case "$1"
  fi
  log "${ROWS[-1]}"
}

TEST_STARTED=$SECONDS
start_capture "$BRIDGE" "$TMPD/mw.pcapng"
peer start mw --netns "$HOST_NS" --bridge "$BRIDGE" --tap "${PREFIX}s" --ip "$VM_IP/24" --mac "$(mac_for 9)" \
  --add "$RRDMA_MW_PEER" --timeout 900 -- "$SCRIPT" || fail "VM did not start: $(cat "$TMPD/mw.err")"

# rxe owns, the vnic uses.
await mw "ready owner" 300 || fail "the VM's owner never got ready: $(cat "$TMPD/await.err")"
stats_snapshot "$VNIC" "$TMPD/stats.before"
user_rc=0
on_vnic user "$VM_IP" "$OWNER_PORT" >"$TMPD/vnic-user.out" 2>&1 || user_rc=$?
owner_status=timeout
await mw "done owner" "$CASE_TIMEOUT" && owner_status=$MARK_REST
guest_output owner "$TMPD/guest.owner"
judge "rxe owns, vnic uses" "$user_rc" "$owner_status" "$TMPD/guest.owner"
grep '^rxe: ' "$TMPD/guest.owner" | while read -r line; do log "the rxe owner says: $line"; done

# The vnic owns, rxe uses.
stats_snapshot "$VNIC" "$TMPD/stats.before"
owner_rc=0
on_vnic owner "$USER_PORT" >"$TMPD/vnic-owner.out" 2>&1 || owner_rc=$?
user_status=timeout
await mw "done user" "$CASE_TIMEOUT" && user_status=$MARK_REST
guest_output user "$TMPD/guest.user"
judge "vnic owns, rxe uses" "$owner_rc" "$user_status" "$TMPD/vnic-owner.out"
peer wait mw
stop_capture

log "--- memory windows: vnic $VNIC_IP against rxe $VM_IP"
printf '%s\n' "${ROWS[@]}"
cp "$TMPD/mw/console.log" "$TMPD/rxe.console" 2>/dev/null
gzip -1 -c "$TMPD/mw.pcapng" >"$TMPD/mw.pcapng.gz"
save_artifacts mw_rxe "$TMPD/mw.pcapng.gz" "$TMPD"/vnic-*.out "$TMPD"/guest.* "$TMPD/rxe.console"
log "--- the capture"
expect_wireshark_clean "$TMPD/mw.pcapng"
expect_capture_checked "$TMPD/mw.pcapng" --expect-source "$VM_IP" --expect-source "$VNIC_IP"
log "the test took $(( SECONDS - TEST_STARTED ))s after the peer was built"
finish_cases
