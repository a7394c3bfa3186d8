#!/usr/bin/env bash
# `rrdma-vnic stats` as a person reads it (issue 34), on a vnic that a namespace pinged:
#   default: no counter at 0 is printed; the last line says how many were left out (N);
#            N lies between the zeros of a --json reply taken before and one taken after
#            (counters only grow);
#   --all:   every counter of every layer the --json reply has, by the same names, zeros too;
#   --json:  keeps the zeros (at least N of them);
#   --watch: from its second print on, a rate beside each total; the echo requests a ping
#            sends while it watches show as a rate above 0.
source "$(dirname "$0")/lib.sh"
init_test st
require_system

peer_scene
vnic_up "$VNIC" --ip "$VNIC_IP/24" --bridge "$BR"
wait_reachable "$NS" "$VNIC_IP"
ping_all "$NS" 3 "$VNIC_IP"

# pairs FILE: "layer name value" for each counter of a flat layer in the text of `stats`
# ("layer: name value  name value ...", wrapped lines 4 spaces in; the opcode table's rows
# and a QP's parts are 2 spaces in, and no RoCE ran here).
pairs() {
  awk '/^[^ ]/ {layer = $1; sub(/:$/, "", layer); first = 2}
       /^    [^ ]/ {first = 1}
       /^  [^ ]/ {next}
       {for (i = first; i < NF; i += 2) print layer, $i, $(i + 1)}' "$1"
}

# zeros_in FILE: sets ZEROS, the counters at 0 in a --json reply, over the layers of
# $LAYERS (no RoCE ran: no opcode rows and no QPs, every layer is flat).
zeros_in() {
  local layer
  ZEROS=0
  for layer in $LAYERS; do
    ZEROS=$(( ZEROS + $("$RRDMA_JSON_GET" "$layer" <"$1" | awk '$2 == "0"' | wc -l) ))
  done
}

log "the default, between two --json replies; --all"
stats_snapshot "$VNIC" "$TMPD/before.json"
vnic stats "$VNIC" >"$TMPD/default.txt" || fail "stats $VNIC"
stats_snapshot "$VNIC" "$TMPD/after.json"
vnic stats "$VNIC" --all >"$TMPD/all.txt" || fail "stats $VNIC --all"
# The flat layers (the opcode table has its heading even when empty).
LAYERS=$(sed -nE 's/^([a-z0-9_]+):.*/\1/p' "$TMPD/all.txt" | grep -vx roce_opcodes)
[[ -n "$LAYERS" ]] || fail "no layer in --all: $(head -c 400 "$TMPD/all.txt")"

shown_zeros=$(pairs "$TMPD/default.txt" | awk '$3 == "0"')
[[ -z "$shown_zeros" ]] || fail "the default shows counters at 0: $shown_zeros"
pairs "$TMPD/default.txt" | grep -qE '^icmp rx_echo_requests [1-9][0-9]*$' ||
  fail "no icmp echo requests in: $(cat "$TMPD/default.txt")"
omitted=$(sed -nE 's/^\(([0-9]+) counters? at 0 not shown; --all shows them\)$/\1/p' "$TMPD/default.txt")
[[ -n "$omitted" && $(tail -n 1 "$TMPD/default.txt") == "("*")" ]] ||
  fail "the default does not end with the count of zeros: $(tail -n 2 "$TMPD/default.txt")"
zeros_in "$TMPD/before.json"; before=$ZEROS
zeros_in "$TMPD/after.json"; after=$ZEROS
log "  $omitted counters at 0 left out; the --json replies around it had $before and $after"
expect_ge "$omitted" 1 "zeros left out"
expect_le "$omitted" "$before" "zeros left out vs the reply before"
expect_ge "$omitted" "$after" "zeros left out vs the reply after"

log "--all and --json name the same counters in every layer, zeros included"
for layer in $LAYERS; do
  "$RRDMA_JSON_GET" "$layer" <"$TMPD/after.json" | awk '{print $1}' | sort >"$TMPD/json.keys"
  pairs "$TMPD/all.txt" | awk -v layer="$layer" '$1 == layer {print $2}' | sort >"$TMPD/all.keys"
  cmp -s "$TMPD/json.keys" "$TMPD/all.keys" ||
    fail "layer $layer: --json and --all differ: $(diff "$TMPD/json.keys" "$TMPD/all.keys" | head -n 6 | tr '\n' ' ')"
done
expect_ge "$after" 1 "counters at 0 in --json"
grep -q "not shown" "$TMPD/all.txt" && fail "--all says it left counters out"

log "--watch: rates beside the totals"
# Not through vnic(): $! is then the CLI itself, which the test ends by pid.
"$RRDMA_VNIC" stats "$VNIC" --watch >"$TMPD/watch.txt" 2>&1 &
watch_pid=$!
wait_until 30 "the first print of --watch" grep -q "not shown" "$TMPD/watch.txt"
ping_all "$NS" 5 "$VNIC_IP"
wait_until 30 "a rate of echo requests above 0" \
  grep -qE '^icmp: .*rx_echo_requests [0-9]+ \(([1-9][0-9.]*|0\.[1-9])/s\)' "$TMPD/watch.txt"
kill "$watch_pid" 2>/dev/null
wait "$watch_pid" 2>/dev/null
[[ $(grep -m 1 '^icmp: ' "$TMPD/watch.txt") =~ rx_echo_requests\ [0-9]+($|\ \ ) ]] ||
  fail "the first print of --watch has rates already: $(grep -m 1 '^icmp: ' "$TMPD/watch.txt")"
log "ok"
