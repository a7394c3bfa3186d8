// libFuzzer target over a script of decoded verbs requests to the daemon's Nic (Nic::handle): see
// nic_requests_properties.h for what it asserts. Built and run by tests/fuzz/run-fuzz.sh (clang-14,
// ASan + UBSan).
#include <cstdio>
#include <cstdlib>

#include "tests/fuzz/nic_requests_properties.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (const char* failed = rrdma::fuzz::check_nic_requests(rrdma::ByteSpan(data, size))) {
    std::fprintf(stderr, "property failed: %s\n", failed);
    std::abort();
  }
  return 0;
}
