# Shared by the system tests (sourced, not run). Gives each test:
#  - unique short names and a subnet of its own (init_test),
#  - a cleanup trap on EXIT/INT/TERM that removes every vnic, namespace, bridge and veth
#    the test made, on success and on failure alike (the register_* functions),
#  - assertions (fail, expect_eq, expect_ge, expect_one_line_error, expect_vnic_gone),
#  - bounded waits (wait_until) and the vnic's counters (stats_snapshot, expect_delta),
#  - sanitizer reports of the detached daemon collected into the test's verdict.
# Environment (set by tests/system/CMakeLists.txt): RRDMA_VNIC, RRDMA_FRAME_SENDER,
# RRDMA_UDP_PROBE, RRDMA_JSON_GET, RRDMA_BUILD_DIR, RRDMA_CMAKE.

# pipefail: `producer | grep -q X` can fail although X was found. grep -q exits at the first
# match, the producer's next write then dies of SIGPIPE, and the pipeline reports 141 (CI
# saw `ldd ... | grep -q` fail this way). Match a producer's whole output instead:
# grep -q X <<<"$(producer)".
set -u -o pipefail

readonly SKIP_CODE=77
readonly RUN_DIR=/run/rrdma
# Below the ctest TIMEOUT in CMakeLists.txt, so that cleanup always runs.
TEST_DEADLINE=${RRDMA_TEST_DEADLINE:-180}
WATCHDOG_PID=""
TEST_NAME=$(basename "${0%.sh}")

log() { echo "[$TEST_NAME] $*"; }
fail() {
  echo "FAIL [$TEST_NAME]: $*" >&2
  exit 1
}
skip() {
  echo "SKIPPED: $TEST_NAME: $*"
  echo "SKIPPED: $TEST_NAME: $*" >&2
  exit "$SKIP_CODE"
}

# A test that checks a catalogue of independent cases sets KEEP_GOING=1: a failed case is
# reported and the next one runs; finish_cases then fails the test if any case failed.
KEEP_GOING=0
FAILED_CASES=()
fail_case() {
  if (( KEEP_GOING )); then
    echo "FAIL [$TEST_NAME]: $*" >&2
    FAILED_CASES+=("$*")
    return 1
  fi
  fail "$@"
}
finish_cases() {
  (( ${#FAILED_CASES[@]} == 0 )) || fail "${#FAILED_CASES[@]} case(s) failed (listed above)"
}

# expect_eq ACTUAL EXPECTED WHAT
expect_eq() {
  [[ "$1" == "$2" ]] || fail "$3: expected '$2', got '$1'"
}
# expect_ge ACTUAL MINIMUM WHAT (integers)
expect_ge() {
  [[ "$1" =~ ^[0-9]+$ ]] || fail "$3: '$1' is not a number"
  (( $1 >= $2 )) || fail "$3: expected at least $2, got $1"
}
# expect_le ACTUAL MAXIMUM WHAT (integers)
expect_le() {
  [[ "$1" =~ ^[0-9]+$ ]] || fail "$3: '$1' is not a number"
  (( $1 <= $2 )) || fail "$3: expected at most $2, got $1"
}

# ---------------------------------------------------------------------------------------
# Preconditions. Each missing one makes the test skip, loudly.

require_system() {
  [[ $(id -u) == 0 ]] || skip "needs root (network namespaces, bridges, TAP)"
  [[ -c /dev/net/tun ]] || skip "no /dev/net/tun"
  local tool
  for tool in ip ping timeout; do
    command -v "$tool" >/dev/null || skip "no '$tool' command"
  done
  local probe="rrdma-probe-$$"
  ip netns add "$probe" 2>/dev/null || skip "cannot create a network namespace (ip netns add)"
  ip netns del "$probe"
  [[ -n "${RRDMA_VNIC:-}" && -x "$RRDMA_VNIC" ]] || fail "RRDMA_VNIC is not an executable: '${RRDMA_VNIC:-}'"
  [[ -n "${RRDMA_JSON_GET:-}" && -x "$RRDMA_JSON_GET" ]] || fail "RRDMA_JSON_GET is not set"
}

# ---------------------------------------------------------------------------------------
# Unique names. Interface names are at most 15 characters (IFNAMSIZ - 1).

# init_test TAG: TAG is one or two letters naming the test inside interface names.
init_test() {
  local tag=$1
  ID_NUM=$(( (($$ << 15) ^ RANDOM ^ (RANDOM << 7)) % 1048576 ))
  ID=$(printf '%05x' "$ID_NUM")
  PREFIX="r${tag}${ID}"          # e.g. rp1a2b3: 3 to 4 + 5 characters, room for suffixes
  # A /24 of our own in 10.100.0.0 - 10.227.255.0, so parallel tests never share one.
  NET="10.$(( 100 + ID_NUM % 128 )).$(( (ID_NUM / 128) % 256 ))"
  log "id $ID, subnet $NET.0/24"
  trap cleanup EXIT
  TMPD=$(mktemp -d "/tmp/rrdma-system.XXXXXX")
  register_dir "$TMPD"
  # In a sanitizer build the daemon has no terminal once it detaches: its reports go to
  # files here, and cleanup fails the test if there are any.
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}log_path=$TMPD/asan"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}log_path=$TMPD/ubsan"
  trap 'exit 130' INT
  trap 'log "terminated (signal or the ${TEST_DEADLINE}s deadline)"; exit 143' TERM
  # ctest kills a test that overruns its TIMEOUT with SIGKILL, which no trap survives;
  # so each test stops itself first, with SIGTERM, and cleans up.
  ( exec >/dev/null 2>&1; sleep "$TEST_DEADLINE"; kill -TERM $$ ) &
  WATCHDOG_PID=$!
}

# A locally administered unicast MAC derived from the id (02:52:44 = "RD").
mac_for() { printf '02:52:44:%02x:%02x:%02x' "$(( ID_NUM >> 12 & 255 ))" "$(( ID_NUM >> 4 & 255 ))" "$(( (ID_NUM & 15) << 4 | $1 ))"; }

# ---------------------------------------------------------------------------------------
# The "host" namespace the vnic, its TAP and the bridge live in. Empty: the real host.
# A test can move the whole scene into a private namespace (use_private_host).

HOST_NS=""
host() {
  if [[ -n "$HOST_NS" ]]; then ip netns exec "$HOST_NS" "$@"; else "$@"; fi
}
vnic() { host "$RRDMA_VNIC" "$@"; }

CLEAN_VNICS=()
CLEAN_LINKS=()
CLEAN_NETNS=()
CLEAN_DIRS=()
CLEAN_PIDS=()
CLEAN_LOGS=()

register_pid() { CLEAN_PIDS+=("$1"); }  # a process this test started, ended by its pid
register_vnic() { CLEAN_VNICS+=("$1"); }
register_link() { CLEAN_LINKS+=("$1"); }
register_netns() { CLEAN_NETNS+=("$1"); }
register_dir() { CLEAN_DIRS+=("$1"); }
register_log() { CLEAN_LOGS+=("$1"); }  # a daemon's log outside /run/rrdma, shown on failure

# Runs on every exit. Order matters: the vnics first (their daemons hold the TAPs), then
# the links, then the namespaces (deleting one also deletes the veth ends inside it).
cleanup() {
  local rc=$? name pid
  trap - EXIT INT TERM
  if [[ -n "$WATCHDOG_PID" ]]; then
    # The watchdog first (were its sleep first to end, it would go on to signal us).
    local sleeper
    sleeper=$(pgrep -P "$WATCHDOG_PID" 2>/dev/null)
    kill "$WATCHDOG_PID" 2>/dev/null
    [[ -n "$sleeper" ]] && kill $sleeper 2>/dev/null
  fi
  for name in "${CLEAN_LOGS[@]}"; do
    (( rc == 0 )) || [[ ! -s "$name" ]] || { echo "--- $name (last lines):" >&2; tail -n 20 "$name" >&2; }
  done
  for pid in "${CLEAN_PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in {1..50}; do pid_alive "$pid" || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null
  done
  for name in "${CLEAN_VNICS[@]}"; do
    if [[ -e "$RUN_DIR/$name.pid" ]] || host ip link show "$name" &>/dev/null; then
      pid=$(cat "$RUN_DIR/$name.pid" 2>/dev/null)
      host timeout 15 "$RRDMA_VNIC" down "$name" &>/dev/null
      # Give the daemon time to exit (and a sanitizer time to write its report); if it
      # does not, stop it: the pid file names the daemon this test started.
      if [[ "$pid" =~ ^[0-9]+$ ]]; then
        for _ in {1..50}; do pid_alive "$pid" || break; sleep 0.2; done
        kill -9 "$pid" 2>/dev/null
      fi
      host ip link del "$name" &>/dev/null
    fi
    # A failed test shows what the daemon logged before its files go.
    if (( rc != 0 )) && [[ -s "$RUN_DIR/$name.log" ]]; then
      echo "--- $RUN_DIR/$name.log (last lines):" >&2
      tail -n 20 "$RUN_DIR/$name.log" >&2
    fi
    rm -f "$RUN_DIR/$name".*
  done
  for name in "${CLEAN_LINKS[@]}"; do
    host ip link del "$name" &>/dev/null
  done
  for name in "${CLEAN_NETNS[@]}"; do
    ip netns del "$name" &>/dev/null
  done
  if [[ -n "$HOST_NS" ]]; then
    ip netns del "$HOST_NS" &>/dev/null
  fi
  local report
  for report in "${TMPD:-/nonexistent}"/asan.* "${TMPD:-/nonexistent}"/ubsan.*; do
    [[ -e "$report" ]] || continue
    echo "FAIL [$TEST_NAME]: sanitizer report $(basename "$report"):" >&2
    head -c 6000 "$report" >&2
    rc=1
  done
  for name in "${CLEAN_DIRS[@]}"; do
    rm -rf -- "$name"
  done
  if (( rc == 0 )); then log "PASS"; elif (( rc != SKIP_CODE )); then log "failed (exit $rc), cleaned up"; fi
  exit "$rc"
}

# ---------------------------------------------------------------------------------------
# Building the scene.

disable_ipv6() {  # disable_ipv6 IFACE [NETNS]: keeps router solicitations and MLD off the wire
  local path="/proc/sys/net/ipv6/conf/$1/disable_ipv6"
  if [[ -n "${2:-}" ]]; then
    ip netns exec "$2" sh -c "[ -e $path ] && echo 1 > $path" 2>/dev/null
  else
    host sh -c "[ -e $path ] && echo 1 > $path" 2>/dev/null
  fi
  return 0
}

# use_private_host: moves the scene into a fresh namespace, where the bridge does not pass
# frames through br_netfilter. With bridge-nf-call-iptables=1 (the default once
# br_netfilter is loaded, e.g. by Docker) the bridge validates IPv4 headers itself and
# drops the malformed ones before they reach the vnic.
use_private_host() {
  HOST_NS="rrdma-${PREFIX}-host"
  ip netns add "$HOST_NS" || fail "cannot create namespace $HOST_NS"
  ip netns exec "$HOST_NS" ip link set lo up
  local knob
  for knob in iptables ip6tables arptables; do
    local path="/proc/sys/net/bridge/bridge-nf-call-$knob"
    ip netns exec "$HOST_NS" sh -c "[ -e $path ] && echo 0 > $path" 2>/dev/null
  done
  return 0
}

# drop_roce_on_bridge PERCENT: nftables drops PERCENT % of the UDP 4791 frames (RoCE, the
# CM's MADs included) that $BR forwards, at random (numgen: tc netem does not exist here);
# roce_frames_dropped prints how many it has dropped so far. In the host's namespace: the
# test's private one when it called use_private_host, where the table goes with it.
drop_roce_on_bridge() {
  log "nftables: drop $1% of UDP 4791 frames forwarded by $BR"
  host nft -f - <<NFT || fail "cannot load the nftables rule"
table bridge rrdma_loss {
  chain forward {
    type filter hook forward priority 0; policy accept;
    ether type ip udp dport 4791 numgen random mod 100 < $1 counter drop
  }
}
NFT
}

roce_frames_dropped() {
  host nft list table bridge rrdma_loss | sed -nE 's/.*counter packets ([0-9]+).*/\1/p'
}

# make_bridge NAME
make_bridge() {
  register_link "$1"
  # STP off and no forward delay: ports forward at once. No multicast snooping: the
  # bridge floods multicast to every port, the vnic included, as the tests expect.
  host ip link add "$1" type bridge forward_delay 0 stp_state 0 mcast_snooping 0 ||
    fail "cannot create bridge $1"
  disable_ipv6 "$1"
  host ip link set "$1" up || fail "cannot bring up bridge $1"
}

# make_peer NETNS BRIDGE HOST_VETH PEER_VETH ADDRESS/LEN: a namespace with one veth,
# whose other end is a port of BRIDGE.
make_peer() {
  local ns=$1 bridge=$2 hveth=$3 pveth=$4 cidr=$5
  register_netns "$ns"
  ip netns add "$ns" || fail "cannot create namespace $ns"
  ip netns exec "$ns" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6; echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6' 2>/dev/null
  register_link "$hveth"
  host ip link add "$hveth" type veth peer name "$pveth" netns "$ns" ||
    fail "cannot create veth $hveth/$pveth"
  disable_ipv6 "$hveth"
  host ip link set "$hveth" master "$bridge" up || fail "cannot put $hveth on $bridge"
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "$cidr" dev "$pveth" || fail "cannot address $pveth in $ns"
  ip -n "$ns" link set "$pveth" up || fail "cannot bring up $pveth in $ns"
}

# peer_scene: where most one-vnic tests start: bridge $BR and namespace $NS, whose one veth
# has $NET.20/24 on it; VNIC and VNIC_IP ($NET.10) name the vnic, which each test brings up
# itself with the options it is about.
peer_scene() {
  BR="${PREFIX}b"
  VNIC="${PREFIX}v"
  VNIC_IP="$NET.10"
  NS="${PREFIX}-a"
  make_bridge "$BR"
  make_peer "$NS" "$BR" "${PREFIX}ha" "${PREFIX}na" "$NET.20/24"
}

peer_mac() {  # peer_mac NETNS IFACE
  ip -n "$1" -br link show "$2" | awk '{print $3}'
}

# vnic_up NAME ARGS...: `rrdma-vnic up` that must succeed within 30 s. Output goes to files,
# not pipes: a daemon that kept an inherited pipe open would hang a $(...) forever.
vnic_up() {
  local name=$1 rc=0
  shift
  register_vnic "$name"
  host timeout 30 "$RRDMA_VNIC" up --name "$name" "$@" >"$TMPD/up.out" 2>"$TMPD/up.err" || rc=$?
  (( rc == 0 )) || fail "rrdma-vnic up --name $name $*: exit $rc: $(cat "$TMPD/up.err")"
  host ip link show "$name" &>/dev/null || fail "up returned 0 but there is no interface $name"
}

# vnic_down NAME: `rrdma-vnic down` that must succeed, and stop the daemon.
vnic_down() {
  local rc=0 pid
  pid=$(cat "$RUN_DIR/$1.pid" 2>/dev/null)
  host timeout 30 "$RRDMA_VNIC" down "$1" >"$TMPD/down.out" 2>"$TMPD/down.err" || rc=$?
  (( rc == 0 )) || fail "rrdma-vnic down $1: exit $rc: $(cat "$TMPD/down.err")"
  if [[ "$pid" =~ ^[0-9]+$ ]]; then
    wait_until 10 "daemon $pid of $1 to exit after down" eval "! pid_alive $pid"
  fi
}

link_exists() { host ip link show "$1" &>/dev/null; }

# The daemon is gone once /proc has no live process for it (a zombie counts as gone: in
# a container nobody may reap it).
pid_alive() {
  [[ "$1" =~ ^[0-9]+$ && -r "/proc/$1/stat" ]] || return 1
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n "$state" && "$state" != Z && "$state" != X ]]
}

# run_files NAME: the files under /run/rrdma that belong to NAME (pid, sock, state, log...).
run_files() {
  compgen -G "$RUN_DIR/$1.*" || true
}

# expect_vnic_gone NAME: no interface and no files under /run/rrdma.
expect_vnic_gone() {
  ! link_exists "$1" || fail "interface $1 is still there"
  local left
  left=$(run_files "$1")
  [[ -z "$left" ]] || fail "files left behind: $(echo $left)"
}

# wait_until SECONDS DESCRIPTION COMMAND...: polls COMMAND every 0.2 s.
wait_until() {
  local limit=$1 what=$2
  shift 2
  local end=$(( SECONDS + limit ))
  until "$@" &>/dev/null; do
    (( SECONDS < end )) || fail "timed out after ${limit}s waiting for: $what"
    sleep 0.2
  done
}

# expect_one_line_error DESCRIPTION COMMAND...: the command must fail (not time out) and
# say why in exactly one line on stderr.
expect_one_line_error() {
  local what=$1 rc=0
  shift
  timeout 30 "$@" >"$TMPD/err.out" 2>"$TMPD/err.err" || rc=$?
  (( rc != 0 )) || { fail_case "$what: exit 0, expected an error"; return; }
  (( rc != 124 )) || { fail_case "$what: timed out"; return; }
  [[ -s "$TMPD/err.err" ]] || { fail_case "$what: exit $rc but nothing on stderr"; return; }
  local lines
  lines=$(wc -l <"$TMPD/err.err")
  # A last line without a newline still counts as one line.
  [[ $(tail -c1 "$TMPD/err.err" | od -An -c | tr -d ' ') == '\n' ]] || lines=$(( lines + 1 ))
  if (( lines != 1 )); then
    fail_case "$what: $lines lines on stderr, expected 1: $(head -c 300 "$TMPD/err.err" | tr '\n' '|')"
    return
  fi
  log "  ok, exit $rc: $(cat "$TMPD/err.err")"
}

# ---------------------------------------------------------------------------------------
# Traffic.

# ping_all NETNS COUNT ADDRESS [PING ARGS...]: every echo must be answered.
ping_all() {
  local ns=$1 count=$2 address=$3
  shift 3
  ip netns exec "$ns" timeout 30 ping -n -q -c "$count" -i 0.2 -W 2 "$@" "$address" \
    >"$TMPD/ping.out" 2>&1
  grep -q " $count received" "$TMPD/ping.out" ||
    fail "ping -c $count $* $address from $ns: $(tr '\n' ' ' <"$TMPD/ping.out")"
}

# wait_reachable NETNS ADDRESS: the first ping may race the link coming up and ARP.
wait_reachable() {
  wait_until 15 "$2 answering ping from $1" ip netns exec "$1" ping -n -c 1 -W 1 "$2"
}

# ---------------------------------------------------------------------------------------
# The vnic's status and counters (`--json`), read with rrdma_json_get.

status_snapshot() {  # status_snapshot NAME FILE
  host timeout 10 "$RRDMA_VNIC" status "$1" --json >"$2" 2>"$TMPD/status.err" ||
    fail "rrdma-vnic status $1 --json: $(cat "$TMPD/status.err")"
}
stats_snapshot() {  # stats_snapshot NAME FILE
  host timeout 10 "$RRDMA_VNIC" stats "$1" --json >"$2" 2>"$TMPD/stats.err" ||
    fail "rrdma-vnic stats $1 --json: $(cat "$TMPD/stats.err")"
}

# json_value FILE PATH: sets VALUE (not a $(...) helper, so that fail ends the test).
json_value() {
  VALUE=$("$RRDMA_JSON_GET" "$2" <"$1" 2>"$TMPD/json.err") ||
    fail "$(cat "$TMPD/json.err") ($1: $(head -c 400 "$1"))"
}

# capture_summary FILE KEY: a field of `rrdma-vnic capture -w FILE`'s last line (KEY=VALUE
# ..., written to FILE.out; its stderr in FILE.err): sets VALUE.
capture_summary() {
  VALUE=$(tr ' ' '\n' <"$1.out" | sed -n "s/^$2=//p")
  [[ "$VALUE" =~ ^[0-9]+$ ]] || fail "capture summary has no $2: $(cat "$1.out" "$1.err")"
}

# wait_listening NS PORT PID: the server is ready once it listens on TCP PORT in namespace NS
# (Debian's verbs programs do not retry a refused connection). Returns 1 if it died first,
# or after 30 s.
wait_listening() {
  local end=$(( SECONDS + 30 ))
  until grep -q LISTEN <<<"$(ip netns exec "$1" ss -ltn "sport = :$2")"; do
    kill -0 "$3" 2>/dev/null || return 1
    (( SECONDS < end )) || return 1
    sleep 0.1
  done
}

counter() {  # counter FILE layer.name: sets COUNT
  json_value "$1" "$2"
  [[ "$VALUE" =~ ^[0-9]+$ ]] || fail "$2 is not a counter: '$VALUE'"
  COUNT=$VALUE
}

# counter_at_least NAME layer.name MIN: a condition for wait_until (never fails the test).
counter_at_least() {
  local n
  n=$(host timeout 10 "$RRDMA_VNIC" stats "$1" --json 2>/dev/null | "$RRDMA_JSON_GET" "$2" 2>/dev/null) ||
    return 1
  [[ "$n" =~ ^[0-9]+$ ]] && (( n >= $3 ))
}

# Sum of every drop_* counter of the given layers: sets COUNT.
drop_sum() {
  local file=$1 layer total=0
  shift
  for layer in "$@"; do
    json_value "$file" "$layer"
    total=$(( total + $(awk '$1 ~ /^drop_/ {s += $2} END {print s + 0}' <<<"$VALUE") ))
  done
  COUNT=$total
}

# expect_delta BEFORE AFTER layer.name EXPECTED [exact|at_least]
expect_delta() {
  local before after
  counter "$1" "$3"
  before=$COUNT
  counter "$2" "$3"
  after=$COUNT
  if [[ "${5:-exact}" == exact ]]; then
    expect_eq "$(( after - before ))" "$4" "$3 grew by"
  else
    expect_ge "$(( after - before ))" "$4" "$3 grew by"
  fi
}

# ---------------------------------------------------------------------------------------
