#!/usr/bin/env bash
# The process boundary inside verbs/ (docs/ARCHITECTURE.md, "The house"), checked on what
# was built and on the sources:
#  1. the libraries an application loads (the drop-in libibverbs.so.1, the stand-in
#     providers, the client library, the contract, the rdma_cm shim) need none of the
#     daemon's libraries: not the device, the engine, the stack, the vnic, ISA-L, liburing
#     or libnl; and define none of the daemon's code either (compiled in rather than linked:
#     nm shows it). The shim (librrdma_ucma.so), preloaded into every program `exec` runs,
#     needs nothing at all but the contract and the C/C++ runtime;
#  2. application-side and contract sources include only application-side and contract
#     headers, and the header-only verbs vocabulary of rocev2/ and stack/ listed below;
#     the contract includes nothing of the application side, and the device nothing of it
#     either.
# Before checking, it shows that each check can fail: the daemon's own device library must
# fail check 1 (both halves), our libibverbs.so.1 the shim's narrower list, and planted
# includes of the engine must fail check 2.
#
# Usage: check.sh SOURCE_DIR LIBRARY...
set -uo pipefail

source_dir=$1
shift
libraries=("$@")

# Header-only vocabulary both sides may name (each includes only others of this list).
allowed_shared=(rocev2/verbs_codes.h rocev2/opcode.h rocev2/types.h stack/bytes.h)
forbidden_needed='librrdma_verbs_device|librrdma_rocev2|librrdma_stack|librrdma_vnic|libisal|liburing|libnl'
# All the shim may need: the contract, the C and C++ runtime, the loader.
shim_allowed_needed='librrdma_verbs_contract\.so|libc\.so\.6|libstdc\+\+\.so\.6|libm\.so\.6|libgcc_s\.so\.1|ld-linux[-a-z0-9_.]*\.so\.[0-9]+'
# Demangled names of the daemon's code; the header-only vocabulary is constexpr and defines
# nothing of these.
forbidden_defined='rrdma::(stack::|vnic::|rocev2::(Engine|MrTable|Dma|compute_icrc|parse_transport|write_transport)|verbs::(Nic|MrTable|ProcessDma|Resource|Quota))'

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The NEEDED entries of a library, one per line; fails if readelf cannot read it.
needed_of() {
  local out
  out=$(readelf -d "$1" 2>&1) || { echo "readelf failed on $1: $out" >&2; return 1; }
  grep -o 'Shared library: \[[^]]*\]' <<<"$out" | sed 's/.*\[\(.*\)\]/\1/'
}

# check 1 for one library: prints the offending entries, returns 1 if there are any.
check_needed() {
  local needed
  needed=$(needed_of "$1") || return 2
  # Every shared library we build needs libc: an empty list means readelf read nothing.
  grep -qx 'libc.so.6' <<<"$needed" || { echo "no libc.so.6 among NEEDED of $1: not read?"; return 2; }
  local bad defined
  bad=$(grep -E "^($forbidden_needed)" <<<"$needed")
  defined=$(nm -DC --defined-only "$1" 2>/dev/null | grep -E "$forbidden_defined" | head -3)
  [[ -z $bad && -z $defined ]] && return 0
  [[ -n $bad ]] && echo "$1 needs: $(tr '\n' ' ' <<<"$bad")"
  [[ -n $defined ]] && echo "$1 defines daemon code: $(tr '\n' ' ' <<<"$defined")"
  return 1
}

# check 1 for the shim: prints what it needs beyond its list, returns 1 if anything.
check_shim_needed() {
  local needed bad
  needed=$(needed_of "$1") || return 2
  grep -qx 'libc.so.6' <<<"$needed" || { echo "no libc.so.6 among NEEDED of $1: not read?"; return 2; }
  bad=$(grep -Ev "^($shim_allowed_needed)$" <<<"$needed")
  [[ -z $bad ]] && return 0
  echo "$1 needs more than the contract and the C/C++ runtime: $(tr '\n' ' ' <<<"$bad")"
  return 1
}

is_allowed_include() {  # $1 = the including file's area (app|contract|vocabulary), $2 = the header
  local header=$2
  for h in "${allowed_shared[@]}"; do [[ $header == "$h" ]] && return 0; done
  [[ $header == verbs/contract/* ]] && return 0
  [[ $1 == app && $header == verbs/app/* ]] && return 0
  return 1
}

# check 2 over the files given: prints each include that crosses the boundary.
check_includes() {  # $1 = area, then files
  local area=$1 status=0
  shift
  for file in "$@"; do
    while IFS= read -r header; do
      is_allowed_include "$area" "$header" || { echo "$file includes \"$header\""; status=1; }
    done < <(project_includes "$file")
  done
  return $status
}

# The project's headers a file includes, in quotes or angle brackets (a path that starts
# with one of our top-level folders).
project_includes() {
  sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]\([^">]*\)[">].*/\1/p' "$1" |
    grep -E '^(stack|rocev2|verbs|vnic|cli)/' || true
}

sources_of() { find "$source_dir/$1" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.c' \) | sort; }

TMPDIR_CHECK=$(mktemp -d)
trap 'rm -rf "$TMPDIR_CHECK"' EXIT

# --- the checks can fail -------------------------------------------------------------
device_library=""
shim_library=""
dropin_library=""
for lib in "${libraries[@]}"; do
  [[ $lib == *librrdma_verbs_device* ]] && device_library=$lib
  [[ $(basename "$lib") == librrdma_ucma.so ]] && shim_library=$lib
  [[ $(basename "$lib") == libibverbs.so* ]] && dropin_library=$lib
done
app_libraries=()
for lib in "${libraries[@]}"; do [[ $lib != "$device_library" ]] && app_libraries+=("$lib"); done
if [[ -z $device_library ]]; then
  fail "the device library was not given: the self-check of check 1 cannot run"
else
  check_needed "$device_library" >"$TMPDIR_CHECK/device.out"
  status=$?
  [[ $status == 1 ]] || fail "check 1 did not refuse the daemon's device library (status $status): it cannot fail"
  grep -q "needs:" "$TMPDIR_CHECK/device.out" || fail "check 1's NEEDED half did not refuse the device library"
  grep -q "defines daemon code:" "$TMPDIR_CHECK/device.out" || fail "check 1's symbol half did not refuse the device library"
fi
if [[ -z $shim_library || -z $dropin_library ]]; then
  fail "the shim (librrdma_ucma.so) or our libibverbs.so.1 was not given"
else
  check_shim_needed "$dropin_library" >/dev/null
  [[ $? == 1 ]] || fail "the shim's NEEDED list accepts our libibverbs.so.1 (which needs the client library): it cannot fail"
fi
planted=$TMPDIR_CHECK/planted.cpp
printf '#include "verbs/app/client.h"\n#include "rocev2/engine/engine.h"\n' >"$planted"
check_includes app "$planted" >/dev/null && fail "check 2 accepts a quoted include of the engine: it cannot fail"
printf '#include <verbs/device/nic.h>\n' >"$planted"
check_includes app "$planted" >/dev/null && fail "check 2 accepts an angle-bracket include of the device: it cannot fail"

# --- check 1 ---------------------------------------------------------------------------
[[ ${#app_libraries[@]} -ge 5 ]] || fail "expected at least 5 application-side libraries, got ${#app_libraries[@]}"
for lib in "${app_libraries[@]}"; do
  if out=$(check_needed "$lib"); then
    echo "ok: $(basename "$lib") needs none of the daemon's libraries and defines none of its code"
  else
    fail "$out"
  fi
done
if [[ -n $shim_library ]]; then
  if out=$(check_shim_needed "$shim_library"); then
    echo "ok: librrdma_ucma.so needs only the contract and the C/C++ runtime: $(needed_of "$shim_library" | tr '\n' ' ')"
  else
    fail "$out"
  fi
fi

# --- check 2 ---------------------------------------------------------------------------
mapfile -t app_sources < <(sources_of verbs/app)
mapfile -t contract_sources < <(sources_of verbs/contract)
mapfile -t device_sources < <(sources_of verbs/device)
vocabulary=()
for h in "${allowed_shared[@]}"; do vocabulary+=("$source_dir/$h"); done
[[ ${#app_sources[@]} -gt 0 && ${#contract_sources[@]} -gt 0 ]] || fail "no sources found under $source_dir/verbs"
out=$(check_includes app "${app_sources[@]}") || fail "application side: $out"
out=$(check_includes contract "${contract_sources[@]}") || fail "contract: $out"
# The vocabulary may include only itself (nothing of the contract either).
for file in "${vocabulary[@]}"; do
  while IFS= read -r header; do
    ok=1
    for h in "${allowed_shared[@]}"; do [[ $header == "$h" ]] && ok=0; done
    [[ $ok == 0 ]] || fail "$file (shared vocabulary) includes \"$header\""
  done < <(project_includes "$file")
done
if grep -n '#include "verbs/app/' "${device_sources[@]}"; then fail "the device includes the application side"; fi
echo "checked ${#app_sources[@]} application-side, ${#contract_sources[@]} contract and ${#device_sources[@]} device sources"

if [[ $failures -gt 0 ]]; then
  echo "$failures layering failure(s)"
  exit 1
fi
echo "layering holds"
