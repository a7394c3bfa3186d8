// `rrdma-vnic stats NAME [--json] [--watch]`: the daemon's counters by layer, the RoCE
// counters by opcode and by QP (vnic/roce_stats.h); --watch refreshes once a second.
#pragma once

#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace rrdma::cli {

struct StatsCommand {
  CLI::App* app = nullptr;
  std::string vnic;
  bool json = false;
  bool watch = false;
};

void add_stats_command(CLI::App& app, StatsCommand& command);
int run_stats(const StatsCommand& command);
// The text form (pure, for the tests): flat layers as "name value", then the opcode table
// and one block per QP.
std::string format_stats_text(const nlohmann::json& stats);

}  // namespace rrdma::cli
