#!/usr/bin/env bash
# The ABI of our drop-in libraries against Debian's (docs/IBVERBS.md, verbs/app/ibverbs/IMPORTS.md):
#  1. every symbol@version that Debian's ibverbs-utils and perftest programs, pyverbs' core
#     and provider modules, librdmacm, UCX's transports and libfabric import from
#     libibverbs.so.1 / libmlx5.so.1 / libefa.so.1 is exported by ours with that version
#     (the programs are BIND_NOW: one missing symbol and they do not start);
#  2. everything ours exports, Debian's libibverbs exports too, with the same version;
#  3. our libibverbs needs no symbol of the system's libibverbs (nothing resolves into it);
#  4. our stand-in libmlx5.so.1 and libefa.so.1 export exactly the symbol@version set of
#     Debian's (ibverbs-providers): every function, every version node, the non-default
#     mlx5dv_init_obj@MLX5_1.0 too, and nothing else (UCX's libuct_ib, libfabric and pyverbs'
#     provider modules import far more than perftest).
# Needs objdump; RRDMA_IBVERBS_DIR is the directory with our three libraries.
set -u -o pipefail

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

command -v objdump >/dev/null || skip "no objdump (binutils)"
ours=${RRDMA_IBVERBS_DIR:?RRDMA_IBVERBS_DIR is not set}
for lib in libibverbs.so.1 libmlx5.so.1 libefa.so.1; do
  [[ -f "$ours/$lib" ]] || fail "no $ours/$lib"
done
debian_ibverbs=$(ls /usr/lib/*/libibverbs.so.1 /lib/*/libibverbs.so.1 2>/dev/null | head -n 1)
debian_lib() { ls /usr/lib/*/"$1" /lib/*/"$1" 2>/dev/null | head -n 1; }

# "VERSION NAME" of each defined dynamic symbol (default versions only: objdump shows a
# hidden, non-default version in parentheses).
exports() {
  objdump -T "$1" | awk '$2 == "g" && $(NF-1) !~ /^\(/ && $(NF-1) != $NF && $4 != "*UND*" {print $(NF-1), $NF}' | sort -u
}
# "VERSION NAME" of each symbol FILE imports with one of the version prefixes given.
imports() {
  local file=$1 pattern=$2
  objdump -T "$file" | awk -v p="$pattern" '$0 ~ /\*UND\*/ && $(NF-1) ~ p {v = $(NF-1); gsub(/[()]/, "", v); print v, $NF}' | sort -u
}

consumers=()
for program in ibv_devices ibv_devinfo ibv_asyncwatch ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong \
               ibv_srq_pingpong ibv_xsrq_pingpong ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw \
               ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat; do
  path=$(command -v "$program") && consumers+=("$path")
done
# UCX's transports (ucx-utils' libuct_ib.so.0...) and libfabric.so.1 (libfabric-bin) too.
for module in /usr/lib/python3/dist-packages/pyverbs/*.so /usr/lib/python3/dist-packages/pyverbs/providers/*/*.so \
              /usr/lib/*/librdmacm.so.1 /usr/lib/*/ucx/libuct_*.so.0 /usr/lib/*/libfabric.so.1; do
  [[ -f "$module" ]] && consumers+=("$module")
done
(( ${#consumers[@]} > 0 )) ||
  skip "none of Debian's verbs programs is installed (ibverbs-utils, perftest: scripts/deps installs them)"

exports "$ours/libibverbs.so.1" >"${TMPDIR:-/tmp}/ours.$$"
exports "$ours/libmlx5.so.1" >>"${TMPDIR:-/tmp}/ours.$$"
exports "$ours/libefa.so.1" >>"${TMPDIR:-/tmp}/ours.$$"
trap 'rm -f "${TMPDIR:-/tmp}/ours.$$" "${TMPDIR:-/tmp}/needed.$$"' EXIT

checked=0
missing=0
for consumer in "${consumers[@]}"; do
  imports "$consumer" '^\(?(IBVERBS|MLX5|EFA)_' >"${TMPDIR:-/tmp}/needed.$$"
  while read -r version name; do
    checked=$(( checked + 1 ))
    if ! grep -qx "$version $name" "${TMPDIR:-/tmp}/ours.$$"; then
      echo "missing: $name@$version (imported by $consumer)" >&2
      missing=$(( missing + 1 ))
    fi
  done <"${TMPDIR:-/tmp}/needed.$$"
done
(( missing == 0 )) || fail "$missing imported symbol(s) not exported by ours"
echo "ok: ${#consumers[@]} programs and modules, $checked imports, all exported with their versions"

if [[ -n "$debian_ibverbs" ]]; then
  extra=$(exports "$ours/libibverbs.so.1" | comm -23 - <(exports "$debian_ibverbs"))
  [[ -z "$extra" ]] || fail "ours exports what Debian's libibverbs does not: $(echo $extra)"
  echo "ok: every export of ours is one of Debian's, same version"
fi

leaks=$(objdump -T "$ours/libibverbs.so.1" | awk '/\*UND\*/ && $(NF-1) ~ /IBVERBS/')
[[ -z "$leaks" ]] || fail "our libibverbs imports from a libibverbs: $leaks"
echo "ok: our libibverbs imports nothing from another libibverbs"

# "TYPE NAME@VERSION" (@@ for a default version) of every defined global symbol, the
# linker's version-node symbols (ABS) included: the whole exported interface.
versioned_exports() {
  readelf -W --dyn-syms "$1" | awk 'NR > 3 && $7 != "UND" && ($5 == "GLOBAL" || $5 == "WEAK") {print $4, $8}' | sort -u
}
command -v readelf >/dev/null || skip "no readelf (binutils)"
for lib in libmlx5.so.1 libefa.so.1; do
  real=$(debian_lib "$lib")
  [[ -n "$real" ]] || fail "no Debian $lib (ibverbs-providers): the stand-in is built from it"
  difference=$(diff <(versioned_exports "$real") <(versioned_exports "$ours/$lib"))
  [[ -z "$difference" ]] ||
    fail "our $lib differs from $real (< Debian's only, > ours only):"$'\n'"$difference"
  echo "ok: our $lib exports exactly Debian's $(versioned_exports "$real" | wc -l) symbols@versions"
done
