// libFuzzer target over a verbs control frame with a lying fd count (parse, receive_message): see
// control_frame_properties.h for what it asserts. Built and run by tests/fuzz/run-fuzz.sh (clang-14,
// ASan + UBSan).
#include <cstdio>
#include <cstdlib>

#include "tests/fuzz/control_frame_properties.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (const char* failed = rrdma::fuzz::check_control_frame(rrdma::ByteSpan(data, size))) {
    std::fprintf(stderr, "property failed: %s\n", failed);
    std::abort();
  }
  return 0;
}
