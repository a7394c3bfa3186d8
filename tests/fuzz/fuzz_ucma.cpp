// libFuzzer target over the daemon's rdma_cm device (ucma frames and the scripts of commands a
// hostile local process can send): see ucma_properties.h. Built and run by tests/fuzz/run-fuzz.sh.
#include <cstdio>
#include <cstdlib>

#include "tests/fuzz/ucma_properties.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (const char* failed = rrdma::fuzz::check_ucma(rrdma::ByteSpan(data, size))) {
    std::fprintf(stderr, "property failed: %s\n", failed);
    std::abort();
  }
  return 0;
}
