#!/usr/bin/env bash
# verbs/app/ibverbs/standins/generate.py against a small library of our own (no root):
#  - from a library and a header it can read, it writes a source and version script whose
#    library exports exactly the original's symbols@versions, a compatibility version too;
#  - it stops with an error, writing nothing, for each thing it cannot classify: an export the
#    header does not declare, a return type without a rule (a struct by value), a data
#    symbol, a conventions line that is malformed, names no export or does not fit.
# Needs RRDMA_PYTHON, RRDMA_CXX, RRDMA_GENERATOR (tests/ibverbs/CMakeLists.txt) and readelf.
set -u -o pipefail

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v readelf >/dev/null || skip "no readelf (binutils)"
python=${RRDMA_PYTHON:?} cxx=${RRDMA_CXX:?} generator=${RRDMA_GENERATOR:?}

work=$(mktemp -d "${TMPDIR:-/tmp}/rrdma-standin-gen.XXXXXX") || fail "mktemp"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/include/infiniband"

# A provider-like library: two nodes, a pointer, an int, a bool, a void, and an int with a
# second, older version (as mlx5dv_init_obj).
cat >"$work/include/infiniband/fakedv.h" <<'HEADER'
#include <stdbool.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {  /* as rdma-core's headers */
#endif
struct fakedv_thing;
struct fakedv_thing *fakedv_create(int flags);
int fakedv_query(struct fakedv_thing *thing, uint32_t inlen);
bool fakedv_is_supported(void *device);
void fakedv_free(struct fakedv_thing *thing);
int fakedv_init(void *obj, uint64_t type);
static inline int fakedv_inline(void) { return fakedv_query(0, 0); }
#ifdef __cplusplus
}
#endif
HEADER
cat >"$work/fake.c" <<'SOURCE'
#include <infiniband/fakedv.h>
struct fakedv_thing *fakedv_create(int flags) { (void)flags; return 0; }
int fakedv_query(struct fakedv_thing *thing, uint32_t inlen) { (void)thing; return (int)inlen; }
bool fakedv_is_supported(void *device) { return device != 0; }
void fakedv_free(struct fakedv_thing *thing) { (void)thing; }
int fakedv_init_old(void *obj, uint64_t type) { (void)obj; return (int)type; }
int fakedv_init_new(void *obj, uint64_t type) { (void)obj; return (int)type + 1; }
__asm__(".symver fakedv_init_old, fakedv_init@FAKE_1.0");
__asm__(".symver fakedv_init_new, fakedv_init@@FAKE_1.1");
SOURCE
cat >"$work/fake.map" <<'MAP'
FAKE_1.0 { global: fakedv_create; fakedv_init; local: *; };
FAKE_1.1 { global: fakedv_query; fakedv_is_supported; fakedv_free; fakedv_init; } FAKE_1.0;
MAP
build_fake() {  # build_fake EXTRA_C: the library, with EXTRA_C appended to its source
  { cat "$work/fake.c"; echo "$1"; } >"$work/fake_now.c"
  "$cxx" -x c -shared -fPIC -I"$work/include" -o "$work/libfake.so.1" "$work/fake_now.c" \
    -Wl,--version-script="$work/fake.map" -Wl,-soname,libfake.so.1 2>"$work/cc.err" ||
    fail "cannot build the test library: $(cat "$work/cc.err")"
}
: >"$work/conventions.txt"
generate() {  # generate CONVENTIONS: generate.py's exit status; its stderr in $work/gen.err
  rm -f "$work/out.cpp" "$work/out.map"
  CPATH="$work/include" "$python" "$generator" --library "$work/libfake.so.1" \
    --header infiniband/fakedv.h --prefix fakedv_ --conventions "$1" --cxx "$cxx" \
    --source "$work/out.cpp" --map "$work/out.map" 2>"$work/gen.err"
}
versioned_exports() {
  readelf -W --dyn-syms "$1" | awk 'NR > 3 && $7 != "UND" && ($5 == "GLOBAL" || $5 == "WEAK") {print $4, $8}' | sort -u
}

build_fake ""
generate "$work/conventions.txt" || fail "generate.py failed on a readable library: $(cat "$work/gen.err")"
"$cxx" -std=c++17 -shared -fPIC -fvisibility=hidden -I"$work/include" -o "$work/libstandin.so.1" \
  "$work/out.cpp" -Wl,--version-script="$work/out.map" 2>"$work/cc.err" ||
  fail "the generated source does not build: $(cat "$work/cc.err")"
difference=$(diff <(versioned_exports "$work/libfake.so.1") <(versioned_exports "$work/libstandin.so.1"))
[[ -z "$difference" ]] || fail "the stand-in's exports differ (< original, > stand-in):"$'\n'"$difference"
echo "ok: the stand-in exports the original's $(versioned_exports "$work/libfake.so.1" | wc -l) symbols@versions"

# refused CASE PATTERN [CONVENTIONS]: generate.py must fail, say PATTERN, write nothing.
refused() {
  local case=$1 pattern=$2 conventions=${3:-$work/conventions.txt}
  if generate "$conventions"; then fail "$case: generate.py succeeded"; fi
  grep -qE "$pattern" "$work/gen.err" || fail "$case: no '$pattern' in: $(cat "$work/gen.err")"
  [[ ! -e "$work/out.cpp" && ! -e "$work/out.map" ]] || fail "$case: generate.py wrote output anyway"
  echo "ok: refused, $case: $(cat "$work/gen.err")"
}

sed -i 's/local: \*/fakedv_undeclared; local: */' "$work/fake.map"
build_fake 'int fakedv_undeclared(void) { return 0; }'
refused "an export the header does not declare" "declares no fakedv_undeclared"

sed -i 's/fakedv_undeclared; //' "$work/fake.map"
echo 'struct fakedv_pair { int a, b; }; struct fakedv_pair fakedv_pair(void);' >"$work/include/infiniband/pair.h"
sed -i 's|^#include <stdint.h>|&\n#include <infiniband/pair.h>|' "$work/include/infiniband/fakedv.h"
sed -i 's/local: \*/fakedv_pair; local: */' "$work/fake.map"
build_fake 'struct fakedv_pair fakedv_pair(void) { struct fakedv_pair p = {1, 2}; return p; }'
refused "a struct returned by value" "fakedv_pair returns 'struct fakedv_pair': no rule"

sed -i 's/fakedv_pair; local/fakedv_data; local/' "$work/fake.map"
build_fake 'int fakedv_data = 1;'
refused "a data symbol" "fakedv_data@@FAKE_1.0 is not a function \(OBJECT\)"

sed -i 's/fakedv_data; //' "$work/fake.map"
build_fake ""
echo "fakedv_query" >"$work/bad.txt"
refused "a conventions line without a convention" "bad.txt:1: expected" "$work/bad.txt"
echo "fakedv_gone errno_value" >"$work/bad.txt"
refused "a conventions line naming no export" "names fakedv_gone, which" "$work/bad.txt"
echo "fakedv_create minus_one_errno" >"$work/bad.txt"
refused "a convention that does not fit the return type" "fakedv_create returns .*minus_one_errno does not fit" "$work/bad.txt"
echo "ok: every refusal"
