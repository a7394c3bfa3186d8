// libFuzzer target over the whole-frame parser, the ICRC checks (with the IPv4 header, and
// without it as the kernel's UDP socket delivers: verify_icrc_hidden_id) and the GSI
// endpoint's check: see frame_properties.h for what it asserts. Built by tests/fuzz/run-fuzz.sh (clang-14,
// ASan + UBSan).
#include <cstdio>
#include <cstdlib>

#include "tests/fuzz/frame_properties.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (const char* failed = rrdma::fuzz::check_frame_and_resealed(rrdma::ByteSpan(data, size))) {
    std::fprintf(stderr, "property failed: %s\n", failed);
    std::abort();
  }
  return 0;
}
