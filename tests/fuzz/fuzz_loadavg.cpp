// libFuzzer target over /proc/loadavg text as the event loop's busy-poll check reads it
// (vnic/event_loop.h, runnable_tasks_in_loadavg). The kernel writes that file, but the parser
// still must not read past its input or accept what is not "L L L RUNNABLE/TOTAL ...": a
// number it returns is the decimal digits right after the third space, followed by '/'.
// Built and run by tests/fuzz/run-fuzz.sh.
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "vnic/event_loop.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::optional<unsigned> runnable = rrdma::vnic::runnable_tasks_in_loadavg(text);
  if (!runnable) return 0;
  std::size_t at = 0;
  for (int field = 0; field < 3; ++field) {
    at = text.find(' ', at);
    if (at == std::string_view::npos) {
      std::fprintf(stderr, "property failed: a number from text with fewer than three spaces\n");
      std::abort();
    }
    ++at;
  }
  unsigned expected = 0;
  const auto [rest, error] = std::from_chars(text.data() + at, text.data() + size, expected);
  if (error != std::errc() || rest == text.data() + size || *rest != '/' || expected != *runnable) {
    std::fprintf(stderr, "property failed: the number is not the fourth field's RUNNABLE\n");
    std::abort();
  }
  return 0;
}
