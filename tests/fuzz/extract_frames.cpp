// Writes every frame of the given pcap/pcapng files to DIR/<file>-<n>.bin, and a MAD to QP 1
// to DIR/gsi_mad.bin (no capture has GSI traffic yet): the seed corpus of the frame fuzzer
// (tests/fuzz/run-fuzz.sh).
#include <cstdio>
#include <fstream>
#include <string>

#include "tests/capture_file.h"
#include "tests/fuzz/frame_properties.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s DIR CAPTURE...\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  {
    const std::vector<std::uint8_t> gsi = rrdma::fuzz::gsi_seed_frame();
    std::ofstream out(dir + "/gsi_mad.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(gsi.data()), static_cast<std::streamsize>(gsi.size()));
  }
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
