// libFuzzer target over a /proc/PID/status text (verbs::parse_credentials): see
// credentials_properties.h for what it asserts. Built and run by tests/fuzz/run-fuzz.sh.
#include <cstdio>
#include <cstdlib>

#include "tests/fuzz/credentials_properties.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (const char* failed = rrdma::fuzz::check_credentials(rrdma::ByteSpan(data, size))) {
    std::fprintf(stderr, "property failed: %s\n", failed);
    std::abort();
  }
  return 0;
}
