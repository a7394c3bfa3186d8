#!/usr/bin/env bash
# Every error of the CLI is one line on stderr and a non-zero exit, and leaves nothing
# behind: no interface, no bridge, no /run/rrdma file, no daemon. A running vnic is not
# disturbed by a failed `up` that names it.
source "$(dirname "$0")/lib.sh"
init_test e
require_system
KEEP_GOING=1   # every error case is independent: report all that fail, not the first

BR="${PREFIX}b"
VNIC="${PREFIX}v"
make_bridge "$BR"
# Every name a command below might wrongly accept, so that cleanup removes it then too.
long_name="${PREFIX}0123456789abcdef"   # longer than the 15 characters of IFNAMSIZ
for name in "${PREFIX}m" "${PREFIX}a" "${PREFIX}n" "${PREFIX}u" "${long_name:0:15}" "../${PREFIX}s"; do
  register_vnic "$name"
done
register_link "${PREFIX}x"

# expect_nothing_of NAME [BRIDGE]: the failed command left no trace.
# A case that wrongly left something is reported, and its leftovers removed so that the
# next case starts clean.
expect_nothing_of() {
  local left=()
  link_exists "$1" && left+=("interface $1")
  left+=($(run_files "$1"))
  [[ -n "${2:-}" ]] && link_exists "$2" && left+=("bridge $2")
  (( ${#left[@]} == 0 )) && return 0
  fail_case "the failed command left: ${left[*]}"
  timeout 15 "$RRDMA_VNIC" down "$1" &>/dev/null
  ip link del "$1" &>/dev/null
  rm -f "$RUN_DIR/$1".*
  [[ -n "${2:-}" ]] && ip link del "$2" &>/dev/null
  return 0
}

log "a second up with a name in use"
vnic_up "$VNIC" --ip "$NET.10/24" --bridge "$BR"
pid=$(cat "$RUN_DIR/$VNIC.pid")
expect_one_line_error "second up of $VNIC" \
  "$RRDMA_VNIC" up --name "$VNIC" --ip "$NET.11/24" --bridge "$BR"
expect_eq "$(cat "$RUN_DIR/$VNIC.pid" 2>/dev/null)" "$pid" "pid of the running $VNIC after the failed up"
pid_alive "$pid" || fail "the failed up stopped the running daemon"
status_snapshot "$VNIC" "$TMPD/status.json"
json_value "$TMPD/status.json" ip
expect_eq "${VALUE%/*}" "$NET.10" "address of the running $VNIC after the failed up"

log "a refused up leaves an existing interface of that name alone (issue 16)"
# A veth pair someone else made, and the bridge of this test, each named as the vnic.
register_link "${PREFIX}t0"
register_link "${PREFIX}t1"
ip link add "${PREFIX}t0" type veth peer name "${PREFIX}t1" || fail "ip link add veth"
veth_index=$(cat "/sys/class/net/${PREFIX}t0/ifindex")
expect_one_line_error "up named as an existing veth" \
  "$RRDMA_VNIC" up --name "${PREFIX}t0" --ip "$NET.14/24" --bridge "$BR"
link_exists "${PREFIX}t0" || fail_case "the refused up deleted the veth ${PREFIX}t0"
link_exists "${PREFIX}t1" || fail_case "the refused up deleted the veth's peer ${PREFIX}t1"
expect_eq "$(cat "/sys/class/net/${PREFIX}t0/ifindex" 2>/dev/null)" "$veth_index" "ifindex of ${PREFIX}t0 after the refused up"
[[ -z "$(run_files "${PREFIX}t0")" ]] || fail_case "the refused up left $(run_files "${PREFIX}t0")"
expect_one_line_error "up named as the bridge it joins" \
  "$RRDMA_VNIC" up --name "$BR" --ip "$NET.14/24" --bridge "$BR"
link_exists "$BR" || fail "the refused up deleted the bridge $BR"
ip link del "${PREFIX}t0" 2>/dev/null

log "a bridge that does not exist, without --create-bridge"
name="${PREFIX}m"
expect_one_line_error "up on a missing bridge" \
  "$RRDMA_VNIC" up --name "$name" --ip "$NET.12/24" --bridge "${PREFIX}x"
expect_nothing_of "$name" "${PREFIX}x"

log "malformed addresses"
name="${PREFIX}a"
for bad in "$NET.300/24" "$NET.12/33" "$NET/24" "abc/24" "$NET.12/" "$NET.12/24/8" \
           "$NET.12/-1" "$NET.12 /24" "" "$NET.12/24x"; do
  expect_one_line_error "up --ip '$bad'" "$RRDMA_VNIC" up --name "$name" --ip "$bad" --bridge "$BR"
  expect_nothing_of "$name"
done

log "malformed MAC, MTU, gateway and names"
expect_one_line_error "up --mac zz" \
  "$RRDMA_VNIC" up --name "$name" --ip "$NET.12/24" --mac "zz:00:00:00:00:01" --bridge "$BR"
expect_nothing_of "$name"
for mtu in 0 99999 abc; do
  expect_one_line_error "up --mtu $mtu" \
    "$RRDMA_VNIC" up --name "$name" --ip "$NET.12/24" --mtu "$mtu" --bridge "$BR"
  expect_nothing_of "$name"
done
expect_one_line_error "up --gateway 1.2.3" \
  "$RRDMA_VNIC" up --name "$name" --ip "$NET.12/24" --gateway 1.2.3 --bridge "$BR"
expect_nothing_of "$name"
expect_one_line_error "up with a ${#long_name}-character name" \
  "$RRDMA_VNIC" up --name "$long_name" --ip "$NET.12/24" --bridge "$BR"
expect_nothing_of "${long_name:0:15}"
[[ -z "$(run_files "$long_name")" ]] || fail "a rejected name left $(run_files "$long_name")"
# A name with a slash would reach outside /run/rrdma if it were used as a path.
expect_one_line_error "up with a name containing '/'" \
  "$RRDMA_VNIC" up --name "../${PREFIX}s" --ip "$NET.12/24" --bridge "$BR"
[[ -z "$(compgen -G "/run/${PREFIX}s.*")" ]] || fail "a name with '/' wrote outside $RUN_DIR"

for bad_name in . ..; do
  expect_one_line_error "up --name '$bad_name'" \
    "$RRDMA_VNIC" up --name "$bad_name" --ip "$NET.12/24" --bridge "$BR"
done

log "command lines the parser rejects"
expect_one_line_error "up without --ip" "$RRDMA_VNIC" up --name "$name" --bridge "$BR"
expect_nothing_of "$name"
expect_one_line_error "up with an unknown option" \
  "$RRDMA_VNIC" up --name "$name" --ip "$NET.12/24" --bridge "$BR" --no-such-option
expect_nothing_of "$name"
expect_one_line_error "an unknown subcommand" "$RRDMA_VNIC" no-such-command
expect_one_line_error "down without a name" "$RRDMA_VNIC" down

log "without CAP_NET_ADMIN"
name="${PREFIX}n"
if command -v setpriv >/dev/null; then
  expect_one_line_error "up without CAP_NET_ADMIN (setpriv)" \
    setpriv --inh-caps=-all --bounding-set=-net_admin -- \
    "$RRDMA_VNIC" up --name "$name" --ip "$NET.13/24" --bridge "$BR"
elif command -v capsh >/dev/null; then
  expect_one_line_error "up without CAP_NET_ADMIN (capsh)" \
    capsh --drop=cap_net_admin -- -c "exec '$RRDMA_VNIC' up --name '$name' --ip '$NET.13/24' --bridge '$BR'"
else
  skip "neither setpriv nor capsh to drop CAP_NET_ADMIN"
fi
expect_nothing_of "$name"
ip -d link show "$BR" >/dev/null || fail "bridge $BR vanished"

log "commands on a name that is not up"
for command in down status stats; do
  expect_one_line_error "$command of an unknown name" "$RRDMA_VNIC" "$command" "${PREFIX}u"
done
expect_nothing_of "${PREFIX}u"

log "the first vnic is still fine, and goes down cleanly"
status_snapshot "$VNIC" "$TMPD/status.json"
vnic_down "$VNIC"
expect_vnic_gone "$VNIC"
expect_one_line_error "second down of $VNIC" "$RRDMA_VNIC" down "$VNIC"
leftovers=$(ls "$RUN_DIR" 2>/dev/null | grep "^${PREFIX}" || true)
[[ -z "$leftovers" ]] || fail "files left in $RUN_DIR: $leftovers"
finish_cases
