#!/usr/bin/env bash
# Issue 16, problem 1: a member of the vnic's group connects, registers a page, forks, and
# execs a setuid-root program at the registered pid; its child keeps the connection. An RDMA
# WRITE and an RDMA READ at the registered address must not reach the setuid program
# (tests/system/setuid_probe.cpp does both and checks the program's page), and the daemon
# must have evicted the client whose address space went.
source "$(dirname "$0")/lib.sh"
init_test su
require_system
[[ -n "${RRDMA_SETUID_PROBE:-}" && -x "$RRDMA_SETUID_PROBE" ]] || fail "RRDMA_SETUID_PROBE is not set"
[[ -n "${RRDMA_SETUID_TARGET:-}" && -x "$RRDMA_SETUID_TARGET" ]] || fail "RRDMA_SETUID_TARGET is not set"

BR="${PREFIX}b"
VNIC="${PREFIX}v"
# The victim is nobody, in group nogroup, which the vnic's socket admits (up --group).
victim_uid=$(id -u nobody) || skip "no user nobody"
victim_gid=$(getent group nogroup | cut -d: -f3)
[[ -n "$victim_gid" ]] || skip "no group nogroup"

# A setuid-root copy of the program the victim execs, where nobody may run it.
suid_dir=$(mktemp -d /tmp/rrdma-setuid.XXXXXX)
register_dir "$suid_dir"
chmod 755 "$suid_dir"
cp "$RRDMA_SETUID_TARGET" "$suid_dir/target"
chown root:root "$suid_dir/target"
chmod 4755 "$suid_dir/target"
[[ "$(findmnt -no OPTIONS -T "$suid_dir")" != *nosuid* ]] || skip "$suid_dir is on a nosuid mount"

make_bridge "$BR"
vnic_up "$VNIC" --ip "$NET.10/24" --bridge "$BR" --group nogroup

log "setuid probe: victim uid $victim_uid gid $victim_gid, prober root, both on $VNIC (loopback)"
rc=0
timeout 120 "$RRDMA_SETUID_PROBE" --dev "$VNIC" --target "$suid_dir/target" \
  --uid "$victim_uid" --gid "$victim_gid" >"$TMPD/probe.out" 2>"$TMPD/probe.err" || rc=$?
sed 's/^/  /' "$TMPD/probe.out" "$TMPD/probe.err"
(( rc != 2 )) || fail "the probe could not set its scene up"
(( rc == 0 )) || fail "DMA reached the setuid program (probe exit $rc)"
grep -q "RDMA WRITE: completion status" "$TMPD/probe.out" || fail "no WRITE completion reported"
grep -q "RDMA READ: completion status" "$TMPD/probe.out" || fail "no READ completion reported"

stats_snapshot "$VNIC" "$TMPD/stats.json"
json_value "$TMPD/stats.json" verbs.clients_evicted
expect_ge "$VALUE" 1 "verbs.clients_evicted"
json_value "$TMPD/stats.json" dma.process_gone
expect_ge "$VALUE" 1 "dma.process_gone"
vnic_down "$VNIC"
log "PASS"
