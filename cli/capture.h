// `rrdma-vnic capture NAME -w FILE [--count N]`: the frames of a vnic, as its NIC sent and
// received them, into a pcap file (docs/TRACE.md).
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace rrdma::cli {

struct CaptureCommand {
  CLI::App* app = nullptr;
  std::string vnic;
  std::string file;          // "-" for stdout
  std::uint64_t count = 0;   // 0: until Ctrl-C
};

void add_capture_command(CLI::App& app, CaptureCommand& command);
int run_capture(const CaptureCommand& command);

}  // namespace rrdma::cli
