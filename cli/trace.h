// `rrdma-vnic trace NAME [--qp N] [--layer L]... [--count N]`: the daemon's live account
// of every layer (vnic/trace.h), printed as it comes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace rrdma::cli {

struct TraceCommand {
  CLI::App* app = nullptr;
  std::string vnic;
  std::string qp;                   // a number, decimal or 0x hex
  std::vector<std::string> layers;  // eth arp ip udp roce qp verbs
  std::uint64_t count = 0;          // events; 0: until Ctrl-C
};

void add_trace_command(CLI::App& app, TraceCommand& command);
int run_trace(const TraceCommand& command);

}  // namespace rrdma::cli
