#!/usr/bin/env bash
# `rrdma-vnic env` and `exec` from the build tree (no vnic, no root): LD_PRELOAD names the
# rdma_cm shim, a file beside our libibverbs.so.1, appended after what was there and never
# twice; and a program run by `exec` starts with the shim loaded and writes as usual.
# Usage: exec_env.sh RRDMA_VNIC
set -uo pipefail
vnic=$1
fail() { echo "FAIL: $*"; exit 1; }

# The value of one `export NAME='...'` line of `env`'s output.
exported() {  # $1 = output, $2 = name
  local line
  line=$(grep "^export $2=" <<<"$1") || return 1
  (eval "$line"; printf '%s' "${!2}")
}

out=$(env -u LD_PRELOAD "$vnic" env 2>&1) || fail "env: $out"
shim=$(exported "$out" LD_PRELOAD) || fail "no LD_PRELOAD line in: $out"
[[ $shim == /*/rrdma-ibverbs/librrdma_ucma.so && -f $shim ]] || fail "LD_PRELOAD='$shim' is not the built shim"
library_path=$(exported "$out" LD_LIBRARY_PATH) || fail "no LD_LIBRARY_PATH line in: $out"
[[ ${library_path%%:*} == "$(dirname "$shim")" ]] ||
  fail "the shim ($shim) is not beside our libibverbs.so.1 (LD_LIBRARY_PATH=$library_path)"
echo "ok: env exports LD_PRELOAD=$shim"

other=/nonexistent/libother.so   # the loader warns about it and goes on
got=$(exported "$(LD_PRELOAD=$other "$vnic" env 2>/dev/null)" LD_PRELOAD)
[[ $got == "$other:$shim" ]] || fail "an existing LD_PRELOAD: got '$got', want '$other:$shim'"
got=$(exported "$(LD_PRELOAD="$other $shim" "$vnic" env 2>/dev/null)" LD_PRELOAD)
[[ $got == "$other $shim" ]] || fail "the shim already there: got '$got', want it once"
echo "ok: appended after an existing LD_PRELOAD, never twice"

got=$(env -u LD_PRELOAD "$vnic" exec -- /bin/sh -c 'printf "%s" "$LD_PRELOAD"; grep -c librrdma_ucma /proc/$$/maps >/dev/null && printf " loaded"')
[[ $got == "$shim loaded" ]] || fail "exec: the program saw '$got', want '$shim loaded'"
echo "ok: exec runs the program with the shim loaded"
