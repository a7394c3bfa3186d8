// libFuzzer target over the CM MAD parser and the CMA header (rocev2/cm/): see
// cm_mad_properties.h for what it asserts. Built and run by tests/fuzz/run-fuzz.sh.
#include <cstdio>
#include <cstdlib>

#include "tests/fuzz/cm_mad_properties.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (const char* failed = rrdma::fuzz::check_cm_mad(rrdma::ByteSpan(data, size))) {
    std::fprintf(stderr, "property failed: %s\n", failed);
    std::abort();
  }
  return 0;
}
