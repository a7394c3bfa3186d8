#!/usr/bin/env bash
# The installed program works on its own: `cmake --install` into a fresh prefix, then the
# installed rrdma-vnic (finding its libraries through its RPATH; `env` naming the installed
# rdma_cm shim, which preloads cleanly) creates a vnic and its
# bridge, answers ping from a namespace on that bridge, counts the echoes, and `down`
# removes both the vnic and the bridge it created.
source "$(dirname "$0")/lib.sh"
init_test i
require_system
[[ -d "${RRDMA_BUILD_DIR:-}" && -x "${RRDMA_CMAKE:-}" ]] || fail "RRDMA_BUILD_DIR / RRDMA_CMAKE are not set"

PREFIX_DIR="$TMPD/prefix"
log "cmake --install $RRDMA_BUILD_DIR --prefix $PREFIX_DIR"
"$RRDMA_CMAKE" --install "$RRDMA_BUILD_DIR" --prefix "$PREFIX_DIR" >"$TMPD/install.log" 2>&1 ||
  fail "cmake --install: $(tail -5 "$TMPD/install.log")"
RRDMA_VNIC="$PREFIX_DIR/bin/rrdma-vnic"
[[ -x "$RRDMA_VNIC" ]] || fail "no $RRDMA_VNIC after install"
if grep -q "not found" <<<"$(ldd "$RRDMA_VNIC")"; then
  fail "the installed binary misses libraries: $(ldd "$RRDMA_VNIC" | grep 'not found' | tr '\n' ' ')"
fi
# It must not lean on the build tree: every librrdma it loads comes from the prefix.
ldd "$RRDMA_VNIC" | grep librrdma | grep -v "$PREFIX_DIR" &&
  fail "the installed binary loads libraries from outside $PREFIX_DIR"
# `exec`/`env` name the installed rdma_cm shim, which loads from the prefix alone.
SHIM=$(env -u LD_PRELOAD "$RRDMA_VNIC" env | sed -n "s/^export LD_PRELOAD='\(.*\)'$/\1/p")
[[ $SHIM == "$PREFIX_DIR"/*/rrdma-ibverbs/librrdma_ucma.so && -f $SHIM ]] ||
  fail "installed env: LD_PRELOAD='$SHIM' is not the shim under $PREFIX_DIR"
ldd "$SHIM" | grep librrdma | grep -v "$PREFIX_DIR" && fail "the installed shim loads libraries from outside $PREFIX_DIR"
out=$(LD_PRELOAD=$SHIM /bin/true 2>&1) && [[ -z $out ]] || fail "the installed shim does not preload cleanly: $out"

X="${PREFIX}v"
BR="${PREFIX}b"
VNIC_IP="10.66.$(( ID_NUM % 256 )).10"
NS="${PREFIX}-a"
register_link "$BR"   # created by the vnic; removed here too if the test fails midway

log "installed up --name $X --ip $VNIC_IP/24 --bridge $BR --create-bridge"
vnic_up "$X" --ip "$VNIC_IP/24" --bridge "$BR" --create-bridge
link_exists "$BR" || fail "up --create-bridge made no bridge $BR"
make_peer "$NS" "$BR" "${PREFIX}ha" "${PREFIX}na" "${VNIC_IP%.10}.20/24"
wait_reachable "$NS" "$VNIC_IP"

stats_snapshot "$X" "$TMPD/s0.json"
ping_all "$NS" 4 "$VNIC_IP"
stats_snapshot "$X" "$TMPD/s1.json"
expect_delta "$TMPD/s0.json" "$TMPD/s1.json" icmp.rx_echo_requests 4
expect_delta "$TMPD/s0.json" "$TMPD/s1.json" icmp.tx_echo_replies 4
"$RRDMA_VNIC" list >"$TMPD/list" 2>&1 || fail "list: $(cat "$TMPD/list")"
grep -qw "$X" "$TMPD/list" || fail "list does not show $X: $(cat "$TMPD/list")"

log "installed down"
vnic_down "$X"
expect_vnic_gone "$X"
# The port of the namespace is still on the bridge here, as a user's would be.
! link_exists "$BR" ||
  fail "down left the bridge $BR that up created (down said: $(tr '\n' ' ' <"$TMPD/down.out"))"
"$RRDMA_VNIC" list >"$TMPD/list" 2>&1 || fail "list: $(cat "$TMPD/list")"
! grep -qw "$X" "$TMPD/list" || fail "list still shows $X after down"
