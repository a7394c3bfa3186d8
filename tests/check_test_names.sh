#!/usr/bin/env bash
# Catch2 test names that ctest cannot run by name: a ';' is a list separator to CMake (the
# name is split into pieces that match nothing), a leading '-' is taken for an option by
# Catch2's command line. Such a test would be registered and never run; this refuses them.
set -u -o pipefail
root=${1:?usage: check_test_names.sh TESTS_DIR}
bad=$(grep -rnE --include='*.cpp' 'TEST_CASE\("([^"]*;|-)' "$root")
if [[ -n "$bad" ]]; then
  echo "test names ctest cannot run (no ';', no leading '-'):" >&2
  echo "$bad" >&2
  exit 1
fi
echo "ok: no test name with ';' or a leading '-'"
