// `rrdma-vnic stats NAME [--all] [--json] [--watch]`: the daemon's counters by layer, the
// RoCE counters by opcode and by QP (vnic/roce_stats.h). The text shows the counters that
// are not 0 and says how many zeros it left out (--all shows them); --json prints the
// daemon's reply whole; --watch refreshes once a second, with each counter's rate beside it.
#pragma once

#include <cstddef>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace rrdma::cli {

struct StatsCommand {
  CLI::App* app = nullptr;
  std::string vnic;
  bool all = false;
  bool json = false;
  bool watch = false;
};

void add_stats_command(CLI::App& app, StatsCommand& command);
int run_stats(const StatsCommand& command);

struct StatsView {
  bool all = false;  // the zeros too
  // Per second, in the shape of the stats (counter_rates); null: no rates (the first
  // refresh of --watch, or no --watch).
  const nlohmann::json* rates = nullptr;
};

struct StatsText {
  std::string text;
  std::size_t zeros_omitted = 0;  // counters at 0 that the text leaves out (0 with `all`)
};

// The text form (pure, for the tests), in the order of the reply's keys: a flat layer as
// one line "layer: name value  name value ..." (wrapped before column 90), the opcode table,
// one line per QP with a line per nested part; then a line saying how many zeros were left
// out. A layer, opcode row or nested part with nothing left to show is left out whole.
StatsText format_stats_text(const nlohmann::json& stats, const StatsView& view = {});

// The growth per second of every number in `now` that `before` has at the same place, over
// `seconds` (> 0); the same shape, numbers only. A counter that went down (the daemon
// restarted) or is new gets no rate.
nlohmann::json counter_rates(const nlohmann::json& before, const nlohmann::json& now, double seconds);

}  // namespace rrdma::cli
