#!/usr/bin/env bash
# Makes tests/data/rxe_sysfs.txt: what a real rdma_rxe device shows in sysfs (issue 19), the
# reference for the formats of `rrdma-vnic exec`'s sysfs view (docs/IBVERBS.md "The sysfs
# view"; tests/cli/sysfs_view_test.cpp and tests/system/sysfs_view.sh read it). Not a ctest:
# run by hand (root, qemu) when the reference must be made again:
#
#   tests/interop/capture_rxe_sysfs.sh tests/data/rxe_sysfs.txt
#
# Boots the rxe peer VM on a bridge of its own and prints, for every file the view mirrors
# (and a few it does not, marked so in the docs), a line "== PATH" and then the file's bytes
# (every file of these ends in a newline), "-> TARGET" for a symbolic link, or
# "!! unreadable" when reading fails (as it does for the types/ndevs of an empty GID).

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../system/lib.sh
source "$HERE/../system/lib.sh"
# shellcheck source=lib.sh
source "$HERE/lib.sh"

OUT=${1:?usage: capture_rxe_sysfs.sh OUT.txt}
OUT=$(realpath -m "$OUT")
[[ $(id -u) == 0 ]] || skip "needs root (bridge, TAP, namespace)"
command -v qemu-system-x86_64 >/dev/null || skip "no qemu-system-x86_64"
# shellcheck disable=SC2034  # read by init_test (system/lib.sh)
TEST_DEADLINE=300
interop_init y

BRIDGE=${PREFIX}b
make_bridge "$BRIDGE"

# Busybox sh in the guest. GIDs 0..3 only: the table has 1024 entries, nearly all empty.
script='echo "# guest kernel $(uname -r), device $RRDMA_DEV on eth0"
d=/sys/class/infiniband/$RRDMA_DEV
show() { for f in "$@"; do
  if [ -L "$f" ]; then echo "== $f"; echo "-> $(readlink "$f")";
  elif [ -d "$f" ]; then echo "== $f/"; ls "$f" | tr "\n" " "; echo;
  elif v=$(cat "$f" 2>/dev/null); then echo "== $f"; cat "$f";
  else echo "== $f"; echo "!! unreadable"; fi; done; }
show /sys/class/infiniband /sys/class/infiniband/$RRDMA_DEV $d
show $d/node_type $d/node_guid $d/sys_image_guid $d/node_desc $d/fw_ver $d/hca_type $d/board_id $d/device $d/parent
show $d/ports $d/ports/1 $d/ports/1/gid_attrs
for f in state phys_state link_layer rate lid sm_lid lid_mask_count sm_sl cap_mask pkeys/0 pkeys/1; do show $d/ports/1/$f; done
for i in 0 1 2 3; do show $d/ports/1/gids/$i $d/ports/1/gid_attrs/types/$i $d/ports/1/gid_attrs/ndevs/$i; done
show /sys/class/infiniband_verbs /sys/class/infiniband_verbs/abi_version
for u in /sys/class/infiniband_verbs/uverbs*; do show $u $u/ibdev $u/abi_version $u/dev $u/device; done
show /sys/class/misc/rdma_cm /sys/class/misc/rdma_cm/abi_version
ip -o link show eth0
ip -o addr show eth0'
peer run sysfs --netns "$HOST_NS" --bridge "$BRIDGE" --tap "${PREFIX}s" --ip "$NET.2/24" --mac "$(mac_for 9)" \
  --timeout 200 -- "$script" || fail "the VM's command failed: $(cat "$TMPD/sysfs.err")"
{
  echo "# /sys/class as an rdma_rxe device shows it (Debian 12's kernel in the rxe peer VM)"
  echo "# made by tests/interop/capture_rxe_sysfs.sh; format in that script"
  cat "$TMPD/sysfs.out"
} >"$OUT"
log "reference in $OUT ($(grep -c '^== ' "$OUT") entries)"
