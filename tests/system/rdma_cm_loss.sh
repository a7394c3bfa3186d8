#!/usr/bin/env bash
# Issue 18: rdma_cm through the vnics with nftables on the bridge dropping 5% of the RoCE v2
# frames (UDP port 4791, both directions, at random; as verbs_loss.sh). The CM's MADs are
# UD SENDs to QP 1 on that port, so REQ, REP, RTU, DREQ and DREP are lost too, and the CM
# must resend them (REQ every 6144 ms, REP 4096 ms, DREQ 6144/4096 ms: docs/RDMA_CM.md), and
# the data the RC transport (ACK timeout 19 from the CM: ~2.1 s per lost tail packet): hence
# the long limits. rping -C 200, ucmatose -c 5 and ib_send_bw -R must all finish, exit 0;
# nft must have dropped frames and the requesters retransmitted. One loss no program survives,
# on rdma_rxe either: the client's only DREQ, when the client destroys its id at once (the
# retries end with the id); its server, still waiting for DISCONNECTED, is then stopped and
# the row says so (PAIR_LOST_DREQ_OK, rdma_cm_lib.sh's lost_dreq).
#
# The scene lives in a private host namespace (use_private_host), as verbs_loss.sh's: the
# nftables table is then the test's own and goes with the namespace.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/verbs_lib.sh"
source "$(dirname "$0")/rdma_cm_lib.sh"
TEST_DEADLINE=${RRDMA_TEST_DEADLINE:-1500}
init_test cl
cm_install_cleanup
require_system
require_rdmacm rping ucmatose ib_send_bw
command -v nft >/dev/null || skip "no 'nft' command (nftables)"
use_private_host
cm_scene
KEEP_GOING=1
A=$VNIC_A_IP
# A lost REQ costs 6 s before its resend: the client's first REQ may meet no listener, and
# the next try may lose its REQ.
CM_READY_SECONDS=60

LOSS_PERCENT=${RRDMA_LOSS_PERCENT:-5}
drop_roce_on_bridge "$LOSS_PERCENT"

stats_snapshot "$VNIC_A" "$TMPD/a0.json"
stats_snapshot "$VNIC_B" "$TMPD/b0.json"
pair_sides a b

next_port
PAIR_LIMIT=600
PAIR_LOST_DREQ_OK=1
PAIR_REFUSE_CLIENT="data mismatch|cq completion failed|cma event"
cm_pair rping "-C 200 -V, 5% loss" -s -a "$A" -p "$CM_PORT" -C 200 -- -c -a "$A" -p "$CM_PORT" -C 200 -V

next_port
PAIR_LIMIT=400
PAIR_LOST_DREQ_OK=1
PAIR_EXPECT_CLIENT=("^return status 0$")
PAIR_EXPECT_SERVER=("^return status 0$")
cm_pair ucmatose "-c 5, 5% loss" -b "$A" -p "$CM_PORT" -c 5 -- -s "$A" -p "$CM_PORT" -c 5

next_port
PAIR_LIMIT=400
PAIR_LOST_DREQ_OK=1
PAIR_FIGURE=$BW_FIGURE
cm_pair ib_send_bw "-R -s 4096 -n 200, 5% loss" -d "$VNIC_A" -R -s 4096 -n 200 -p "$CM_PORT" \
  -- -d "$VNIC_B" -R -s 4096 -n 200 -p "$CM_PORT" "$A"

stats_snapshot "$VNIC_A" "$TMPD/a1.json"
stats_snapshot "$VNIC_B" "$TMPD/b1.json"
for side in a b; do
  line=""
  for name in packets_sent retransmits timeouts; do
    json_value "$TMPD/${side}1.json" "engine.$name"
    line+=" $name=$VALUE"
  done
  log "vnic ${side^^} engine:$line"
  # The GSI endpoint's counters, and the CM's where the daemon shows them.
  for layer in gsi cm; do
    VALUE=$("$RRDMA_JSON_GET" "$layer" <"$TMPD/${side}1.json" 2>/dev/null) || continue
    log "vnic ${side^^} $layer: $(tr '\n' ' ' <<<"$VALUE" | tr -s ' ')"
  done
done
dropped=$(roce_frames_dropped)
log "nftables dropped ${dropped:-?} RoCE frames (MADs included)"
expect_ge "${dropped:-x}" 1 "frames dropped by the nftables rule"
# Both vnics are requesters here (rping's server READs and WRITEs, its client SENDs): the
# recovery shows in the sum of their retransmissions.
retransmits=0
for side in a b; do
  counter "$TMPD/${side}0.json" engine.retransmits
  before=$COUNT
  counter "$TMPD/${side}1.json" engine.retransmits
  retransmits=$(( retransmits + COUNT - before ))
done
log "the vnics retransmitted $retransmits packets"
(( retransmits >= 1 )) || fail_case "no retransmission by either vnic, with $dropped frames dropped"
print_rows
finish_cases
