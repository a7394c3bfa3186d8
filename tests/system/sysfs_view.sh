#!/usr/bin/env bash
# `rrdma-vnic exec`'s sysfs view (issue 19, docs/IBVERBS.md "The sysfs view"):
#  1. with --dev: each file of /sys/class/infiniband/V and infiniband_verbs/uverbs0 holds what
#     the daemon reports through our libibverbs (ibv_devinfo -v under the same exec), in the
#     byte shape of a real rxe device's (tests/data/rxe_sysfs.txt); the host's class
#     directories are still there and live; the view is read-only;
#  2. without --dev: every running vnic, uverbs0..N in name order;
#  3. the host's mounts under /sys are the same before and after, and no infiniband class
#     appeared on the host;
#  4. exit statuses: the program's, 127 and 126;
#  5. a non-root member of the vnic's group: the view (through a user namespace), the same
#     uid/gid/groups as the kernel and the daemon see them (/proc/PID/status from the host,
#     the daemon's status), and the NIC works;
#  6. --no-sysfs-view, and `env`'s line on stderr;
#  7. the shim's part of the view: /dev/infiniband/uverbs0 a character device 231:192 that
#     may be read and written (UCX's test) but has no driver (ENXIO), no uverbs1; the vnic's
#     address among getifaddrs' (hostname -I), and not without the view.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/control_lib.sh"
require_system
require_control_tools
for program in ibv_devinfo ibv_rc_pingpong setpriv; do
  command -v "$program" >/dev/null || skip "no '$program' command (scripts/deps installs it)"
done
REFERENCE=$(dirname "$0")/../data/rxe_sysfs.txt
[[ -f "$REFERENCE" ]] || fail "no $REFERENCE"
control_init sf
KEEP_GOING=1
make_test_group

# Mount points under /sys of the host's mount namespace (ids and options too): other tests
# running beside this one mount namespaces under /run, never under /sys.
sys_mounts() { awk '$5 ~ /^\/sys(\/|$)/' /proc/self/mountinfo; }
sys_mounts >"$TMPD/mounts.before"
host_had_infiniband=no
[[ -e /sys/class/infiniband ]] && host_had_infiniband=yes

VA="${PREFIX}a" VB="${PREFIX}b" VA_IP="$NET.10"
vnic_up "$VA" --ip "$VA_IP/24" --group "$TEST_GROUP"
vnic_up "$VB" --ip "$NET.11/24"
DEV=/sys/class/infiniband/$VA

# reference_of PATH: the rxe reference's bytes for rxe0's PATH (relative to its device dir).
reference_of() {
  awk -v want="== /sys/class/infiniband/rxe0/$1" '/^== /{on=($0==want); next} on' "$REFERENCE"
}
# shape TEXT: hex digits as 'h', so that values differ and formats may not.
shape() { sed 's/[0-9a-f]/h/g' <<<"$1"; }

log "1. exec --dev $VA: the files, against the daemon's values and rxe's formats"
files="node_type node_guid sys_image_guid parent ports/1/state ports/1/phys_state ports/1/link_layer ports/1/rate
  ports/1/lid ports/1/sm_lid ports/1/lid_mask_count ports/1/sm_sl ports/1/cap_mask ports/1/pkeys/0 ports/1/gids/0
  ports/1/gid_attrs/types/0 ports/1/gid_attrs/ndevs/0"
# One exec prints every file as "PATH=CONTENT", then what else the program sees.
script='for f in '$(echo $files)'; do printf "%s=%s\n" "$f" "$(cat '$DEV'/$f)"; done
echo "uverbs=$(ls /sys/class/infiniband_verbs)"
echo "ibdev=$(cat /sys/class/infiniband_verbs/uverbs0/ibdev)"
echo "devices=$(ls /sys/class/infiniband)"
echo "net_lo=$(readlink -f /sys/class/net/lo)"
echo "net_has_lo=$(test -e /sys/class/net/lo/address && echo yes)"
touch '$DEV'/x 2>/dev/null && echo "writable=yes" || echo "writable=no"'
vnic exec --dev "$VA" -- sh -c "$script" >"$TMPD/view.txt" 2>"$TMPD/view.err" || fail "exec: $(cat "$TMPD/view.err")"
[[ -s "$TMPD/view.err" ]] && fail_case "exec as root printed on stderr: $(cat "$TMPD/view.err")"
sed 's/^/  /' "$TMPD/view.txt"
vnic exec --dev "$VA" -- ibv_devinfo -v >"$TMPD/devinfo.txt" 2>&1 || fail "ibv_devinfo: $(cat "$TMPD/devinfo.txt")"
got() { sed -n "s|^$1=||p" "$TMPD/view.txt"; }
devinfo() { awk -v k="$1:" '$1==k {sub(/^[^:]*:[ \t]*/, ""); print; exit}' "$TMPD/devinfo.txt"; }

# The daemon's values, as our libibverbs reports them.
expect_file() {  # expect_file FILE WANT
  [[ "$(got "$1")" == "$2" ]] || fail_case "$1: '$(got "$1")', want '$2'"
}
expect_file node_guid "$(devinfo node_guid)"
expect_file sys_image_guid "$(devinfo sys_image_guid)"
[[ $(devinfo state) == "PORT_ACTIVE (4)" ]] || fail_case "ibv_devinfo state: $(devinfo state)"
expect_file ports/1/state "4: ACTIVE"
[[ $(devinfo phys_state) == "LINK_UP (5)" ]] || fail_case "ibv_devinfo phys_state: $(devinfo phys_state)"
expect_file ports/1/phys_state "5: LinkUp"
expect_file ports/1/link_layer "$(devinfo link_layer)"
[[ $(devinfo active_width) == "1X (1)" && $(devinfo active_speed) == "2.5 Gbps (1)" ]] ||
  fail_case "ibv_devinfo width/speed: $(devinfo active_width) $(devinfo active_speed)"
expect_file ports/1/rate "2.5 Gb/sec (1X SDR)"
grep -q "GID\[  0\]:.*::ffff:$NET.10, RoCE v2" "$TMPD/devinfo.txt" || fail_case "ibv_devinfo has no GID 0 ::ffff:$NET.10"
IFS=. read -r o1 o2 o3 o4 <<<"$NET.10"
expect_file ports/1/gids/0 "$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$o1" "$o2" "$o3" "$o4")"
expect_file ports/1/gid_attrs/types/0 "RoCE v2"
expect_file ports/1/gid_attrs/ndevs/0 "$VA"
expect_file parent "$VA"
expect_file uverbs uverbs0
expect_file ibdev "$VA"
expect_file devices "$VA"
expect_file net_lo /sys/devices/virtual/net/lo
expect_file net_has_lo yes
expect_file writable no
# rxe's formats: every file but the netdev names has the shape of rxe0's.
for f in $files; do
  [[ $f == parent || $f == ports/1/gid_attrs/ndevs/0 ]] && continue
  want=$(reference_of "$f")
  [[ $f == ports/1/gids/0 ]] && want=$(reference_of ports/1/gids/1)  # rxe's IPv4 GID is its index 1
  [[ -n "$want" ]] || { fail_case "$f is not in the rxe reference"; continue; }
  [[ "$(shape "$(got "$f")")" == "$(shape "$want")" ]] || fail_case "$f: '$(got "$f")' is not shaped as rxe's '$want'"
done
log "  checked $(wc -w <<<"$files") files"

log "2. exec without --dev: every running vnic, uverbs numbers in name order"
vnic exec -- sh -c 'for u in /sys/class/infiniband_verbs/uverbs*; do echo "${u##*/} $(cat $u/ibdev)"; done' \
  >"$TMPD/all.txt" 2>&1 || fail_case "exec without --dev: $(cat "$TMPD/all.txt")"
sed 's/^/  /' "$TMPD/all.txt"
# Other tests' vnics may run too: ours must be there, numbered 0..N-1 with names ascending.
grep -qx "uverbs[0-9]* $VA" "$TMPD/all.txt" || fail_case "no uverbs entry for $VA"
grep -qx "uverbs[0-9]* $VB" "$TMPD/all.txt" || fail_case "no uverbs entry for $VB"
sort -V "$TMPD/all.txt" | awk '{ if ($1 != "uverbs" NR-1) bad=1; if (NR>1 && $2 <= prev) bad=1; prev=$2 } END { exit bad }' ||
  fail_case "uverbs numbers are not 0..N-1 in name order"

log "3. the host's mounts under /sys are unchanged"
sys_mounts >"$TMPD/mounts.after"
diff "$TMPD/mounts.before" "$TMPD/mounts.after" >"$TMPD/mounts.diff" || fail_case "host mounts changed: $(cat "$TMPD/mounts.diff")"
now_infiniband=no
[[ -e /sys/class/infiniband ]] && now_infiniband=yes
expect_eq "$now_infiniband" "$host_had_infiniband" "the host's /sys/class/infiniband"
log "  ok: $(wc -l <"$TMPD/mounts.after") mounts under /sys, the same"

log "4. exit statuses"
rc=0; vnic exec --dev "$VA" -- sh -c 'exit 7' || rc=$?
expect_eq "$rc" 7 "the program's own status"
rc=0; vnic exec --dev "$VA" -- "no-such-program-$ID" 2>/dev/null || rc=$?
expect_eq "$rc" 127 "a program that is not found"
printf '#!/bin/sh\n' >"$TMPD/not-executable"
chmod 0644 "$TMPD/not-executable"
rc=0; vnic exec --dev "$VA" -- "$TMPD/not-executable" 2>/dev/null || rc=$?
expect_eq "$rc" 126 "a program that cannot be run"

log "5. a member of the vnic's group (not root)"
member_script='cat '$DEV'/ports/1/gid_attrs/types/0; id -u; exec ibv_rc_pingpong -d '$VA' -g 0 -p '$(( 20000 + ID_NUM % 20000 ))
timeout 60 "${AS_MEMBER[@]}" "$RRDMA_VNIC" exec --dev "$VA" -- sh -c "$member_script" \
  >"$TMPD/member.out" 2>"$TMPD/member.err" &
member=$!
CONTROL_PIDS+=("$member")
member_listed() { "$RRDMA_VNIC" status "$VA" --json | grep -q "\"uid\": $TEST_UID"; }
wait_until 30 "the daemon to list a client of uid $TEST_UID (the member's ibv_rc_pingpong)" member_listed
sed 's/^/  /' "$TMPD/member.out" "$TMPD/member.err"
[[ $(sed -n 1p "$TMPD/member.out") == "RoCE v2" ]] || fail_case "the member sees no GID type"
expect_eq "$(sed -n 2p "$TMPD/member.out")" "$TEST_UID" "the member's uid inside"
grep -q "runs without the vnics" "$TMPD/member.err" && fail_case "the member ran without the view"
# timeout's child: setpriv, rrdma-vnic and sh each exec'd the next, so it is the pingpong
# the daemon serves; its credentials as the host's /proc shows them.
pingpong=$(pgrep -P "$member" -x ibv_rc_pingpong) || fail "no ibv_rc_pingpong under $member"
status=$(cat "/proc/$pingpong/status")
grep -qP "^Uid:\t$TEST_UID\t$TEST_UID\t$TEST_UID\t$TEST_UID$" <<<"$status" || fail_case "host sees other uids: $(grep ^Uid <<<"$status")"
grep -qP "^Gid:\t$TEST_UID\t$TEST_UID\t$TEST_UID\t$TEST_UID$" <<<"$status" || fail_case "host sees other gids: $(grep ^Gid <<<"$status")"
grep -qP "^Groups:\t$TEST_GID $" <<<"$status" || fail_case "host sees other groups: $(grep ^Groups <<<"$status")"
grep -q "\"pid\": $pingpong" <("$RRDMA_VNIC" status "$VA" --json) || fail_case "the daemon lists no client of pid $pingpong"
kill "$pingpong"
wait "$member" 2>/dev/null
log "  ok: uid $TEST_UID, groups $TEST_GID, as the daemon and /proc see them"

log "6. --no-sysfs-view; env says what its shells miss"
vnic exec --dev "$VA" --no-sysfs-view -- sh -c "test -e $DEV && echo seen || echo unseen" >"$TMPD/noview.txt" 2>&1
expect_eq "$(cat "$TMPD/noview.txt")" unseen "--no-sysfs-view"
vnic env --dev "$VA" >"$TMPD/env.out" 2>"$TMPD/env.err" || fail_case "env failed"
expect_eq "$(wc -l <"$TMPD/env.err")" 1 "env's lines on stderr"
grep -q "do not see the vnics in /sys/class.*rrdma-vnic exec" "$TMPD/env.err" || fail_case "env's stderr: $(cat "$TMPD/env.err")"

log "7. the uverbs node and the vnic's interface (the shim)"
node_script='stat -c "%F %t:%T %a" /dev/infiniband/uverbs0; test -r /dev/infiniband/uverbs0 -a -w /dev/infiniband/uverbs0 && echo rw
cat /dev/infiniband/uverbs0 2>&1 | sed "s/.*: //"; test -e /dev/infiniband/uverbs1 || echo "no uverbs1"; hostname -I'
vnic exec --dev "$VA" -- sh -c "$node_script" >"$TMPD/node.txt" 2>&1 || fail_case "exec: $(cat "$TMPD/node.txt")"
sed 's/^/  /' "$TMPD/node.txt"
expect_eq "$(sed -n 1p "$TMPD/node.txt")" "character special file e7:c0 666" "stat of uverbs0"
expect_eq "$(sed -n 2p "$TMPD/node.txt")" rw "access(R_OK|W_OK) of uverbs0"
expect_eq "$(sed -n 3p "$TMPD/node.txt")" "No such device or address" "opening uverbs0"
expect_eq "$(sed -n 4p "$TMPD/node.txt")" "no uverbs1" "uverbs1"
grep -qw "$VA_IP" <(sed -n 5p "$TMPD/node.txt") || fail_case "hostname -I does not list $VA_IP"
vnic exec --dev "$VA" --no-sysfs-view -- sh -c 'test -e /dev/infiniband/uverbs0 && echo node; hostname -I' \
  >"$TMPD/node-noview.txt" 2>&1
grep -q "^node$" "$TMPD/node-noview.txt" && fail_case "a uverbs node without the view"
grep -qw "$VA_IP" "$TMPD/node-noview.txt" && fail_case "the vnic's address listed without the view"

finish_cases
log PASS
