// Writes every frame of the given pcap/pcapng files to DIR/<file>-<n>.bin: the seed
// corpus of the fuzzer (tests/fuzz/run-fuzz.sh).
#include <cstdio>
#include <fstream>
#include <string>

#include "tests/capture_file.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s DIR CAPTURE...\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string base = argv[i];
    base = base.substr(base.find_last_of('/') + 1);
    std::size_t n = 0;
    for (const auto& frame : rrdma::test::read_capture(argv[i])) {
      std::ofstream out(dir + "/" + base + "-" + std::to_string(n++) + ".bin", std::ios::binary);
      out.write(reinterpret_cast<const char*>(frame.data()), static_cast<std::streamsize>(frame.size()));
    }
  }
  return 0;
}
