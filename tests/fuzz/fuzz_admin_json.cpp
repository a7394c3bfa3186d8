// libFuzzer target over an admin JSON request on the control socket (answer(), the trace filter): see
// admin_json_properties.h for what it asserts. Built and run by tests/fuzz/run-fuzz.sh (clang-14,
// ASan + UBSan).
#include <cstdio>
#include <cstdlib>

#include "tests/fuzz/admin_json_properties.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (const char* failed = rrdma::fuzz::check_admin_json(rrdma::ByteSpan(data, size))) {
    std::fprintf(stderr, "property failed: %s\n", failed);
    std::abort();
  }
  return 0;
}
