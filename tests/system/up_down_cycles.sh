#!/usr/bin/env bash
# 20 rounds of up and down. Odd rounds put the vnic on a bridge the test made (down must
# leave that bridge alone); even rounds let the vnic create its bridge (down must remove
# it). After every round: no interface, no bridge it made, no /run/rrdma files, no daemon.
source "$(dirname "$0")/lib.sh"
init_test c
require_system

ROUNDS=20
OWN_BR="${PREFIX}b"
VNIC="${PREFIX}v"
make_bridge "$OWN_BR"

for (( round = 1; round <= ROUNDS; round++ )); do
  if (( round % 2 )); then
    br=$OWN_BR
    vnic_up "$VNIC" --ip "$NET.10/24" --bridge "$br"
  else
    br="${PREFIX}c"
    register_link "$br"
    vnic_up "$VNIC" --ip "$NET.10/24" --bridge "$br" --create-bridge
  fi
  link_exists "$br" || fail "round $round: no bridge $br"
  ip -d link show "$VNIC" | grep -q "master $br" || fail "round $round: $VNIC is not on $br"
  [[ -e "$RUN_DIR/$VNIC.pid" ]] || fail "round $round: no $RUN_DIR/$VNIC.pid while up"
  pid=$(cat "$RUN_DIR/$VNIC.pid")
  pid_alive "$pid" || fail "round $round: the pid file names $pid, which is not running"
  vnic_down "$VNIC"
  expect_vnic_gone "$VNIC"
  wait_until 5 "round $round: daemon $pid to exit" eval "! pid_alive $pid"
  if [[ $br == "$OWN_BR" ]]; then
    link_exists "$br" || fail "round $round: down removed $br, which the vnic did not create"
  else
    ! link_exists "$br" || fail "round $round: down left bridge $br that up created"
  fi
  (( round % 5 )) || log "$round rounds clean"
done

leftovers=$(ip -o link show | awk -F': ' '{print $2}' | grep "^${PREFIX}" | grep -vx "$OWN_BR" || true)
[[ -z "$leftovers" ]] || fail "interfaces left behind: $leftovers"
ls "$RUN_DIR" 2>/dev/null | grep "^${PREFIX}" && fail "files left in $RUN_DIR"
exit 0
