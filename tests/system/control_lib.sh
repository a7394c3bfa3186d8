# Shared by the control-socket tests (issue 16), sourced after lib.sh. A group made for
# the test (`up --group`), and a uid of no one on this machine to act as a member of it
# or as an outsider, through setpriv (no account is created: the kernel needs only the
# numbers, and the daemon only the group's name).

require_control_tools() {
  local tool
  for tool in setpriv groupadd groupdel getent; do
    command -v "$tool" >/dev/null || skip "no '$tool' command"
  done
  [[ -n "${RRDMA_CONTROL_FLOOD:-}" && -x "$RRDMA_CONTROL_FLOOD" ]] || fail "RRDMA_CONTROL_FLOOD is not set"
}

TEST_GROUP=""
TEST_GID=""
TEST_UID=""
CONTROL_PIDS=()  # helper processes this test started (by pid), stopped on exit

# Chains onto lib.sh's cleanup (the EXIT trap init_test set), keeping the exit status.
control_cleanup() {
  local rc=$? pid
  for pid in "${CONTROL_PIDS[@]}"; do kill "$pid" 2>/dev/null; done
  [[ -n "$TEST_GROUP" ]] && groupdel "$TEST_GROUP" &>/dev/null
  (exit "$rc")
  cleanup
}

# control_init TAG: init_test, with control_cleanup chained in front of lib.sh's cleanup.
control_init() {
  init_test "$1"
  trap control_cleanup EXIT
}

# make_test_group: a group named after the test id, removed on exit; a free uid.
make_test_group() {
  TEST_GROUP="rrdma${ID}"
  groupadd "$TEST_GROUP" || fail "cannot create group $TEST_GROUP"
  TEST_GID=$(getent group "$TEST_GROUP" | cut -d: -f3)
  [[ "$TEST_GID" =~ ^[0-9]+$ ]] || fail "group $TEST_GROUP has no gid"
  TEST_UID=$(( 61000 + ID_NUM % 3000 ))
  while getent passwd "$TEST_UID" >/dev/null; do TEST_UID=$(( TEST_UID + 1 )); done
  # The member must reach the binaries and files it is given (mktemp made TMPD 0700).
  chmod 0755 "$TMPD"
  log "group $TEST_GROUP (gid $TEST_GID), test uid $TEST_UID"

  # Command prefixes (arrays, so that `timeout` can run them): as TEST_UID with TEST_GROUP
  # as a supplementary group, and as the same uid without it.
  AS_MEMBER=(setpriv --reuid="$TEST_UID" --regid="$TEST_UID" --groups="$TEST_GID" --inh-caps=-all --)
  AS_OUTSIDER=(setpriv --reuid="$TEST_UID" --regid="$TEST_UID" --clear-groups --inh-caps=-all --)
}

# expect_refusal WHAT PATTERN COMMAND...: COMMAND fails within 10 s, with one line on
# stderr that contains PATTERN (an extended regex).
expect_refusal() {
  local what=$1 pattern=$2 rc=0
  shift 2
  timeout 10 "$@" >"$TMPD/refusal.out" 2>"$TMPD/refusal.err" </dev/null || rc=$?
  (( rc != 0 )) || fail "$what: exit 0, expected a refusal"
  (( rc != 124 )) || fail "$what: still running after 10 s (not refused)"
  local lines
  lines=$(grep -c '' "$TMPD/refusal.err")
  (( lines == 1 )) || fail "$what: $lines lines on stderr, expected 1: $(head -c 400 "$TMPD/refusal.err" | tr '\n' '|')"
  grep -Eq "$pattern" "$TMPD/refusal.err" || fail "$what: '$(cat "$TMPD/refusal.err")' does not match /$pattern/"
  log "  ok, refused: $(cat "$TMPD/refusal.err")"
}

# control_counter VNIC NAME: sets COUNT to the vnic's stats control.NAME.
control_counter() {
  stats_snapshot "$1" "$TMPD/control-stats.json"
  counter "$TMPD/control-stats.json" "control.$2"
}
