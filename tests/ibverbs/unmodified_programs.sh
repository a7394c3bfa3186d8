#!/usr/bin/env bash
# Issue 5: Debian's own, unmodified verbs programs (ibverbs-utils, perftest) over our
# libibverbs.so.1, between two vnics, through `rrdma-vnic exec`. The scene: one bridge, two
# vnics on it (A .10, B .11, MTU 9000 so the path MTU is 4096), two namespaces with a veth
# on the bridge (A .20, B .30) where the programs run; RoCE v2 goes vnic A <-> vnic B, the
# programs' own side channel is TCP between the namespaces. Prints a table: program,
# arguments, result, figure (the program's own bandwidth or latency line).
#
# RRDMA_IBVERBS_ROWS=REGEX runs only the rows whose "program arguments" match (debugging).
# The rdma_cm programs (rping, ucmatose, perftest -R...) are in tests/system/rdma_cm_*.sh
# (docs/TESTING.md says why).
source "$(dirname "$0")/../system/lib.sh"
TEST_DEADLINE=${RRDMA_TEST_DEADLINE:-1700}
init_test i
require_system

PROGRAMS=(ibv_devices ibv_devinfo ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong ibv_srq_pingpong
          ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_write_lat ib_read_lat ib_send_lat)
for program in "${PROGRAMS[@]}"; do
  command -v "$program" >/dev/null ||
    skip "no '$program': install Debian's ibverbs-utils and perftest (scripts/deps does)"
done
command -v ss >/dev/null || skip "no 'ss' (iproute2)"

# The scene of either kind (RRDMA_DEVICE_KIND, tests/system/device_scene.sh). On netdev
# devices the programs run as uid 65534 without capabilities and their side channel goes to
# the one address that also carries RDMA; the veths' MTU 9000 gives the devices theirs.
source "$(dirname "$0")/../system/device_scene.sh"
device_scene 9000

# The line of a program's output that says why it failed (else its last line).
why() {
  { grep -iE "fail|error|couldn|unable|invalid|not supported" "$1" || tail -n 1 "$1"; } | tail -n 1 | tr -s ' \t' ' '
}

# RRDMA_IBVERBS_LOG_DIR=DIR keeps the outputs of failed rows there (debugging).
keep_logs() {
  [[ -n "${RRDMA_IBVERBS_LOG_DIR:-}" ]] || return 0
  mkdir -p "$RRDMA_IBVERBS_LOG_DIR" && cp "$@" "$RRDMA_IBVERBS_LOG_DIR/" 2>/dev/null
  return 0
}

# on_vnic NS VNIC PROGRAM ARGS...: PROGRAM in namespace NS, seeing only VNIC, bounded.
on_vnic() {
  local ns=$1 dev=$2
  shift 2
  ip netns exec "$ns" "${AS_USER[@]}" timeout "${ROW_TIMEOUT:-120}" "$RRDMA_VNIC" exec --dev "$dev" -- "$@"
}

ROWS=()
KEEP_GOING=1
PORT=$(( 20000 + ID_NUM % 20000 ))

# row PROGRAM ARGS RESULT FIGURE
row() {
  ROWS+=("$(printf '%-17s %-36s %-6s %s' "$1" "$2" "$3" "$4")")
  log "$(printf '%-17s %-36s %-6s %s' "$1" "$2" "$3" "$4")"
}

selected() { [[ -z "${RRDMA_IBVERBS_ROWS:-}" || "$1 $2" =~ $RRDMA_IBVERBS_ROWS ]]; }

# On netdev devices, a representative part of the pairs (CI's time; docs/TESTING.md): each
# pingpong at its default size and at 4096 B, rc_pingpong's -e and -c; each perftest program
# once, ib_write_bw also over all sizes (-a) and with 4 QPs (-q 4), each atomic once. Every
# local row (open and query, pyverbs, wr_api_check, mr_check with ODP, mw_check) runs.
NETDEV_PAIRS='^ibv_(rc|uc|ud|srq)_pingpong -g 0 (|-s 4096|-e|-c)$|^ib_(write|read|send)_(bw|lat) -x 0$|^ib_write_bw -x 0 (-a -n 50|-q 4)$|^ib_atomic_bw -x 0 -A [A-Z_]+$'
in_kind_subset() { [[ $DEVICE_KIND == tap || "$1 $2" =~ $NETDEV_PAIRS ]]; }

# local_row PROGRAM ARGS CHECK...: one program on vnic A; CHECK is a grep -E pattern
# each of which the output must contain.
local_row() {
  local program=$1 args=$2 out="$TMPD/out.${program##*/}" rc=0 pattern
  shift 2
  selected "$program" "$args" || return 0
  if [[ $args =~ ^-c\ ([A-Z0-9_]+_SCRIPT)(\ (.*))?$ ]]; then
    # -c NAME_SCRIPT [ARG...]: the Python program in variable NAME_SCRIPT, with its arguments.
    # shellcheck disable=SC2086
    on_vnic "$NS_A" "$VNIC_A" "$program" -c "${!BASH_REMATCH[1]}" ${BASH_REMATCH[3]} >"$out" 2>&1 || rc=$?
  else
    # shellcheck disable=SC2086
    on_vnic "$NS_A" "$VNIC_A" "$program" $args >"$out" 2>&1 || rc=$?
  fi
  if (( rc != 0 )); then
    row "$program" "$args" FAIL "exit $rc: $(why "$out")"
    keep_logs "$out"
    fail_case "$program $args: exit $rc"
    return
  fi
  for pattern in "$@"; do
    if ! grep -qE -- "$pattern" "$out"; then
      row "$program" "$args" FAIL "no line matches '$pattern'"
      fail_case "$program $args: output lacks '$pattern' (in $out)"
      return
    fi
  done
  row "$program" "$args" PASS "$(grep -cE . "$out") lines"
}

# pair_row PROGRAM ARGS FIGURE_AWK: the server on vnic A (namespace A), the client on vnic
# B (namespace B) connecting to namespace A; both must exit 0. FIGURE_AWK picks the figure
# from the client's output.
pair_row() {
  local program=$1 args=$2 figure_awk=$3 port_flag=${4:--p}
  selected "$program" "$args" && in_kind_subset "$program" "$args" || return 0
  PORT=$(( PORT + 1 ))
  local server="$TMPD/server.out" client="$TMPD/client.out" server_rc=0 client_rc=0 pid
  # shellcheck disable=SC2086
  on_vnic "$NS_A" "$VNIC_A" "$program" -d "$VNIC_A" $args "$port_flag" "$PORT" >"$server" 2>&1 &
  pid=$!
  if ! wait_listening "$NS_A" "$PORT" "$pid"; then
    wait "$pid" || server_rc=$?
    row "$program" "$args" FAIL "server did not listen (exit $server_rc): $(why "$server")"
    fail_case "$program $args: server did not start"
    return
  fi
  # shellcheck disable=SC2086
  on_vnic "$NS_B" "$VNIC_B" "$program" -d "$VNIC_B" $args "$port_flag" "$PORT" "$NS_A_IP" >"$client" 2>&1 ||
    client_rc=$?
  wait "$pid" || server_rc=$?
  if (( client_rc != 0 || server_rc != 0 )); then
    row "$program" "$args" FAIL "client exit $client_rc: $(why "$client") / server exit $server_rc: $(why "$server")"
    fail_case "$program $args: client exit $client_rc, server exit $server_rc"
    cp "$client" "$TMPD/$program.$PORT.client"
    cp "$server" "$TMPD/$program.$PORT.server"
    keep_logs "$TMPD/$program.$PORT.client" "$TMPD/$program.$PORT.server"
    return
  fi
  row "$program" "$args" PASS "$(awk "$figure_awk" "$client")"
}

# The figures: pingpong's "N bytes in S seconds = X Mbit/sec"; perftest's last result line
# (bw: BW average MB/s column 4; lat: t_avg usec column 6).
PINGPONG_FIGURE='/Mbit\/sec/ {f = $(NF-1) " Mbit/s"} /usec\/iter/ {u = $(NF-1) " us/iter"} END {print f ", " u}'
BW_FIGURE='/^[[:space:]]*[0-9]+[[:space:]]+[0-9]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+/ {f = $1 " B: " $4 " MB/s"} END {print f}'
LAT_FIGURE='/^[[:space:]]*[0-9]+[[:space:]]+[0-9]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+/ {f = $1 " B: " $6 " us avg"} END {print f}'

log "--- rrdma-vnic exec / env"
if selected rrdma-vnic exec; then
  if expect_one_line_error "exec --dev of a vnic that does not exist" "$RRDMA_VNIC" exec --dev "${PREFIX}zz" -- true; then
    row rrdma-vnic "exec --dev (no such vnic)" PASS "one line: $(cat "$TMPD/err.err")"
  else
    row rrdma-vnic "exec --dev (no such vnic)" FAIL "see above"
  fi
  rc=0
  "$RRDMA_VNIC" exec --dev "$VNIC_A" -- "${PREFIX}-no-such-program" 2>"$TMPD/exec.err" || rc=$?
  if [[ $rc == 127 ]] && grep -q "command not found" "$TMPD/exec.err"; then
    row rrdma-vnic "exec -- (missing program)" PASS "exit 127"
  else
    row rrdma-vnic "exec -- (missing program)" FAIL "exit $rc: $(cat "$TMPD/exec.err")"
    fail_case "exec of a missing program: exit $rc, expected 127"
  fi
  "$RRDMA_VNIC" env --dev "$VNIC_A" >"$TMPD/env.out" || fail_case "env --dev $VNIC_A failed"
  if grep -q "^export LD_LIBRARY_PATH='[^:']*/rrdma-ibverbs" "$TMPD/env.out" &&
     grep -q "^export RRDMA_DEVICES='$VNIC_A'$" "$TMPD/env.out" &&
     (eval "$(cat "$TMPD/env.out")"; grep -q "rrdma-ibverbs/libibverbs.so.1" <<<"$(ldd "$(command -v ibv_devices)")"); then
    row rrdma-vnic "env --dev $VNIC_A" PASS "ibv_devices resolves our libibverbs.so.1"
  else
    row rrdma-vnic "env --dev $VNIC_A" FAIL "$(tr '\n' ' ' <"$TMPD/env.out")"
    fail_case "env does not point at our libibverbs"
  fi
fi

log "--- open and query"
local_row ibv_devices "" "$VNIC_A"
local_row ibv_devinfo "-v" "hca_id:[[:space:]]+$VNIC_A" "transport:[[:space:]]+InfiniBand" \
  "link_layer:[[:space:]]+Ethernet" "active_mtu:[[:space:]]+4096" "state:[[:space:]]+PORT_ACTIVE" \
  "GID\[ *0\]:.*::ffff:$VNIC_A_IP, RoCE v2"

# pyverbs (python3-pyverbs), rdma-core's Python binding, over the same library.
PYVERBS_SCRIPT="import pyverbs.device as d, pyverbs.enums as e
from pyverbs.pd import PD
from pyverbs.mr import MR
from pyverbs.cq import CQ
names = [x.name.decode() for x in d.get_device_list()]
ctx = d.Context(name=names[0])
pd = PD(ctx); mr = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE); cq = CQ(ctx, 16)
print('devices', names, 'max_qp', ctx.query_device().max_qp, 'port_state', ctx.query_port(1).state)
print('gid', ctx.query_gid(1, 0), 'type', ctx.query_gid_ex(1, 0).gid_type, 'lkey', hex(mr.lkey))"
if [[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c 'import pyverbs' 2>/dev/null; then
  local_row /usr/bin/python3 "-c PYVERBS_SCRIPT" "devices \\['$VNIC_A'\\] max_qp [0-9]+ port_state 4" "gid .*ffff:.* type 2 lkey 0x"
else
  row pyverbs "" SKIP "python3-pyverbs is not installed"
fi

# pyverbs' provider modules (mlx5, efa) link libmlx5.so.1 / libefa.so.1: each must import
# with our stand-ins and our libibverbs (docs/IBVERBS.md, "Symbol versions"); a library of
# those three names mapped from anywhere else is a failure. Then the providers' entry points
# on a vnic, which is neither: mlx5dv_is_supported(3) says false, mlx5dv_open_device and
# efadv_query_device fail with EOPNOTSUPP.
PROVIDER_IMPORT_SCRIPT="import importlib, os, sys
module = importlib.import_module('pyverbs.providers.' + sys.argv[1])
print('imported', module.__name__, 'from', os.path.dirname(module.__file__))
libs = {line.split()[-1] for line in open('/proc/self/maps') if line.split()[-1].startswith('/')}
ours = sorted(os.path.basename(l) for l in libs if os.path.basename(l) in ('libibverbs.so.1', 'libmlx5.so.1', 'libefa.so.1') and l.split('/')[-2] == 'rrdma-ibverbs')
foreign = sorted(l for l in libs if os.path.basename(l).split('.so')[0] in ('libibverbs', 'libmlx5', 'libefa') and l.split('/')[-2] != 'rrdma-ibverbs')
print('ours:', ' '.join(ours))
sys.exit('foreign: ' + ' '.join(foreign) if foreign else 0)"
PROVIDER_CALLS_SCRIPT="import errno, sys
import pyverbs.device as d
from pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError
name = d.get_device_list()[0].name.decode()
try:
    if sys.argv[1] == 'mlx5':
        from pyverbs.providers.mlx5.mlx5dv import Mlx5Context, Mlx5DVContextAttr
        Mlx5Context(Mlx5DVContextAttr(), name=name)
    else:
        from pyverbs.providers.efa.efadv import EfaContext
        EfaContext(name=name).query_efa_device()
    sys.exit('the ' + sys.argv[1] + ' provider call succeeded on a vnic')
except PyverbsRDMAError as error:
    # errno.errorcode names 95 ENOTSUP, EOPNOTSUPP's twin on Linux: compare instead.
    print(sys.argv[1], type(error).__name__, 'EOPNOTSUPP' if error.error_code == errno.EOPNOTSUPP else error.error_code, error)
except PyverbsError as error:
    print(sys.argv[1], type(error).__name__, error)"
if [[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c 'import pyverbs' 2>/dev/null; then
  for module_file in /usr/lib/python3/dist-packages/pyverbs/providers/*/*.so; do
    provider=$(basename "$(dirname "$module_file")")
    module="$provider.$(basename "$module_file" | cut -d. -f1)"
    # Each of our libraries the module links must be the one mapped.
    mapped=()
    for lib in $(readelf -d "$module_file" | grep -oE 'lib(ibverbs|mlx5|efa)\.so\.1'); do
      mapped+=("^ours:.* ${lib//./\\.}( |\$)")
    done
    local_row /usr/bin/python3 "-c PROVIDER_IMPORT_SCRIPT $module" \
      "^imported pyverbs\\.providers\\.$module from" "${mapped[@]}"
  done
  local_row /usr/bin/python3 "-c PROVIDER_CALLS_SCRIPT mlx5" "^mlx5 PyverbsUserError This is not an MLX5 device"
  local_row /usr/bin/python3 "-c PROVIDER_CALLS_SCRIPT efa" "^efa PyverbsRDMAError EOPNOTSUPP "
fi

# own_program_row NAME PROGRAM: a program of ours, an ordinary verbs program linked against the
# system's libibverbs, with a QP on each vnic in one process (so run without --dev: it sees
# both); PROGRAM is its path from CMake (empty when there was no system libibverbs to link).
own_program_row() {
  local name=$1 program=$2 rc=0
  selected "$name" "$VNIC_A $VNIC_B" || return 0
  if [[ -z "$program" || ! -x "$program" ]]; then
    row "$name" "" SKIP "not built (no system libibverbs to link it)"
    return 0
  fi
  ip netns exec "$NS_A" "${AS_USER[@]}" timeout 120 "$RRDMA_VNIC" exec -- "$program" "$VNIC_A" "$VNIC_B" \
    >"$TMPD/$name.out" 2>&1 || rc=$?
  if (( rc == 0 )); then
    row "$name" "$VNIC_A $VNIC_B" PASS "$(why "$TMPD/$name.out")"
  else
    row "$name" "$VNIC_A $VNIC_B" FAIL "exit $rc: $(why "$TMPD/$name.out")"
    fail_case "$name: exit $rc"
  fi
}
# The extended verbs no Debian tool reaches on a vnic (ibv_create_cq_ex, ibv_create_qp_ex,
# ibv_wr_*, ATOMIC_WRITE and FLUSH).
own_program_row wr_api_check "${RRDMA_WR_API_CHECK:-}"
# IOVA regions, ibv_rereg_mr, on-demand paging (untouched, sparse 16 GiB, implicit) and
# ibv_create_qp_ex's forms (tests/ibverbs/mr_check.cpp).
own_program_row mr_check "${RRDMA_MR_CHECK:-}"

# Memory windows of type 1 and 2: binds, WRITE and READ through a window's R_Key, local and
# remote invalidation, the refusals (tests/ibverbs/mw_check.cpp).
own_program_row mw_check "${RRDMA_MW_CHECK:-}"

# Issue 27: RC, UC and UD QPs failed by a re-registered MR, recycled through RESET, work
# again; qp_access_flags with MR-only bits are accepted (tests/ibverbs/qp_recycle_check.cpp).
own_program_row qp_recycle_check "${RRDMA_QP_RECYCLE_CHECK:-}"

log "--- the pingpongs"
for program in ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong ibv_srq_pingpong; do
  for size in "" "-s 1" "-s 4096" "-s 65536"; do
    # UD carries one packet per message: 65536 bytes exceed any MTU (ibv_ud_pingpong
    # refuses it itself: "Requested size larger than port MTU").
    [[ $program == ibv_ud_pingpong && $size == "-s 65536" ]] && continue
    pair_row "$program" "-g 0 $size" "$PINGPONG_FIGURE"
  done
done
pair_row ibv_rc_pingpong "-g 0 -e" "$PINGPONG_FIGURE"
pair_row ibv_rc_pingpong "-g 0 -c" "$PINGPONG_FIGURE"

log "--- perftest"
# -a runs every size from 2 B to 8 MiB; -n bounds the iterations per size so the whole
# sweep fits the test's time on a loaded machine.
for program in ib_write_bw ib_read_bw ib_send_bw; do
  for args in "-x 0" "-x 0 -a -n 50" "-x 0 -b" "-x 0 -q 4"; do
    pair_row "$program" "$args" "$BW_FIGURE"
  done
done
# An atomic is one 8-byte word: perftest refuses -a for them ("Message size cannot be changed
# for Atomic tests").
for atomic in FETCH_AND_ADD CMP_AND_SWAP; do
  for args in "-x 0 -A $atomic" "-x 0 -A $atomic -b" "-x 0 -A $atomic -q 4"; do
    pair_row ib_atomic_bw "$args" "$BW_FIGURE"
  done
done
for program in ib_write_lat ib_read_lat ib_send_lat; do
  for args in "-x 0" "-x 0 -a -n 50"; do
    pair_row "$program" "$args" "$LAT_FIGURE"
  done
done

echo
printf '%-17s %-36s %-6s %s\n' program arguments result figure
printf '%s\n' "${ROWS[@]}"
echo
finish_cases
log "all ${#ROWS[@]} rows passed"
