#include "cli/stats.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "vnic/lifecycle.h"

namespace rrdma::cli {
namespace {

constexpr const char* kStatsFooter = R"(Examples:
  rrdma-vnic stats rv0                # the counters that are not 0, and how many are
  rrdma-vnic stats rv0 --all          # every counter, zeros too
  rrdma-vnic stats rv0 --json | jq '.roce_opcodes'
  rrdma-vnic stats rv0 --watch        # once a second until Ctrl-C, with rates per second
Layers: ethernet, arp, ipv4, icmp, udp, daemon, roce, engine, verbs, dma, capture, trace, control;
roce_opcodes (packets and payload bytes by BTH opcode, both directions), roce_acks (ACKs,
RNR NAKs, NAKs by syndrome, from the AETH on the wire), roce_decisions,
roce_retransmissions (by reason), roce_drops (by reason), and qps (the same per local QP).
--json prints every counter, zeros too.)";

// The columns of the opcode table (key, heading, width); a row whose columns are all 0 is a
// row of zeros.
struct Column {
  const char* key;
  const char* heading;
  int width;
};
constexpr Column kOpcodeColumns[] = {{"tx_packets", "tx_packets", 10},
                                     {"tx_bytes", "tx_bytes", 12},
                                     {"tx_retransmitted", "tx_retrans", 10},
                                     {"rx_packets", "rx_packets", 10},
                                     {"rx_bytes", "rx_bytes", 12}};

bool is_zero(const nlohmann::json& value) { return value.is_number() && value == 0; }

std::uint64_t number(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
}

// The member `key` of `object` if both exist, for walking the rates beside the stats.
const nlohmann::json* member(const nlohmann::json* object, const std::string& key) {
  if (object == nullptr || !object->is_object()) return nullptr;
  const auto it = object->find(key);
  return it == object->end() ? nullptr : &*it;
}

std::string rate_text(const nlohmann::json* rate) {
  if (rate == nullptr || !rate->is_number()) return {};
  const double per_second = rate->get<double>();
  char text[48];
  std::snprintf(text, sizeof(text), per_second < 10 ? "%.1f/s" : "%.0f/s", per_second);
  return text;
}

// Text lines wrap before this column, so that a layer's line fits a terminal (and the
// demo's indented output).
constexpr std::size_t kLineWidth = 90;

// One object's counters on one line after its label, "name value" two spaces apart, as
// `rdma statistic` prints a port's: wrapped lines start 4 spaces further in than the label.
void print_pairs(std::ostringstream& out, const std::string& label, const std::vector<std::string>& pairs,
                 const std::string& indent) {
  std::string line = indent + label + ":";
  bool has_pair = false;
  for (const auto& pair : pairs) {
    if (has_pair && line.size() + 2 + pair.size() > kLineWidth) {
      out << line << "\n";
      line = indent + "    " + pair;
    } else {
      line += (has_pair ? "  " : " ") + pair;
    }
    has_pair = true;
  }
  out << line << "\n";
}

class TextWriter {
 public:
  explicit TextWriter(const StatsView& view) : view_(view) {}

  // One object's members that are not objects, after the label `name:`; with nothing left
  // to show, the label alone only if `header_alone`.
  void flat(const std::string& name, const nlohmann::json& counters, const nlohmann::json* rates,
            const std::string& indent, bool header_alone) {
    std::vector<std::string> pairs;
    for (const auto& [key, value] : counters.items()) {
      if (value.is_object()) continue;
      if (!view_.all && is_zero(value)) {
        ++result_.zeros_omitted;
        continue;
      }
      std::string pair = key + " " + (value.is_string() ? value.get<std::string>() : value.dump());
      const std::string rate = rate_text(member(rates, key));
      if (!rate.empty()) pair += " (" + rate + ")";
      pairs.push_back(std::move(pair));
    }
    if (pairs.empty() && !header_alone) return;
    print_pairs(out_, name, pairs, indent);
  }

  void opcode_table(const nlohmann::json& opcodes, const nlohmann::json* rates) {
    std::vector<std::string> lines;
    for (const auto& [name, counts] : opcodes.items()) {
      if (!view_.all && row_of_zeros(counts)) {
        result_.zeros_omitted += std::size(kOpcodeColumns);
        continue;
      }
      lines.push_back(opcode_line(name, &counts, member(rates, name)));
    }
    if (lines.empty() && !view_.all) return;
    out_ << "roce_opcodes:\n" << opcode_line("opcode", nullptr, nullptr);
    for (const auto& line : lines) out_ << line;
  }

  void qps(const nlohmann::json& qps, const nlohmann::json* rates) {
    for (const auto& [qpn, qp] : qps.items()) {
      if (!qp.is_object()) continue;
      // A QP the daemon tracks is news even with all its counters at 0.
      flat("qp " + qpn, qp, member(rates, qpn), "", true);
      for (const char* part : {"decisions", "retransmissions", "drops"}) {
        if (qp.contains(part) && qp[part].is_object()) flat(part, qp[part], member(member(rates, qpn), part), "  ", false);
      }
    }
  }

  StatsText finish() {
    if (result_.zeros_omitted > 0) {
      out_ << "(" << result_.zeros_omitted << " counter" << (result_.zeros_omitted == 1 ? "" : "s")
           << " at 0 not shown; --all shows them)\n";
    }
    result_.text = out_.str();
    return std::move(result_);
  }

 private:
  static bool row_of_zeros(const nlohmann::json& counts) {
    for (const auto& column : kOpcodeColumns)
      if (number(counts, column.key) != 0) return false;
    return true;
  }

  // The header when `counts` is null; with rates, packets per second in each direction.
  std::string opcode_line(const std::string& name, const nlohmann::json* counts, const nlohmann::json* rates) const {
    std::string text = "  " + name;
    if (name.size() < 40) text.append(40 - name.size(), ' ');
    for (const auto& column : kOpcodeColumns) {
      char cell[32];
      if (counts == nullptr) {
        std::snprintf(cell, sizeof(cell), " %*s", column.width, column.heading);
      } else {
        std::snprintf(cell, sizeof(cell), " %*llu", column.width,
                      static_cast<unsigned long long>(number(*counts, column.key)));
      }
      text += cell;
    }
    if (view_.rates != nullptr) {
      for (const char* column : {"tx_packets", "rx_packets"}) {
        const std::string rate = counts == nullptr ? std::string(column).substr(0, 2) + "_pkts/s"
                                                   : rate_text(member(rates, column));
        text += std::string(rate.size() < 11 ? 11 - rate.size() : 1, ' ') + rate;
      }
    }
    return text + "\n";
  }

  const StatsView& view_;
  std::ostringstream out_;
  StatsText result_;
};

volatile sig_atomic_t stop_watching = 0;
void on_interrupt(int) { stop_watching = 1; }

void print_reply(const StatsCommand& command, const nlohmann::json& reply, const nlohmann::json* rates) {
  // A terminal gets the screen cleared; a pipe or file gets one document after another.
  if (command.watch && ::isatty(STDOUT_FILENO)) std::cout << "\x1b[H\x1b[2J";
  if (command.json) {
    std::cout << (command.watch ? reply.dump() : reply.dump(2)) << "\n";
  } else {
    std::cout << format_stats_text(reply, {.all = command.all, .rates = rates}).text;
    if (command.watch) std::cout << "\n";
  }
  std::cout.flush();
}

}  // namespace

StatsText format_stats_text(const nlohmann::json& stats, const StatsView& view) {
  TextWriter writer(view);
  for (const auto& [layer, counters] : stats.items()) {
    if (!counters.is_object()) continue;
    const nlohmann::json* rates = member(view.rates, layer);
    if (layer == "roce_opcodes") {
      writer.opcode_table(counters, rates);
    } else if (layer == "qps") {
      writer.qps(counters, rates);
    } else {
      writer.flat(layer, counters, rates, "", view.all);
    }
  }
  return writer.finish();
}

nlohmann::json counter_rates(const nlohmann::json& before, const nlohmann::json& now, double seconds) {
  if (!(seconds > 0)) return nlohmann::json::object();
  if (now.is_object() && before.is_object()) {
    nlohmann::json rates = nlohmann::json::object();
    for (const auto& [key, value] : now.items()) {
      const auto earlier = before.find(key);
      if (earlier == before.end()) continue;
      auto rate = counter_rates(*earlier, value, seconds);
      if (!rate.is_null()) rates[key] = std::move(rate);
    }
    return rates;
  }
  if (now.is_number_unsigned() && before.is_number_unsigned()) {
    const auto then = before.get<std::uint64_t>(), count = now.get<std::uint64_t>();
    if (count >= then) return static_cast<double>(count - then) / seconds;
  } else if (now.is_number() && before.is_number() && now.get<double>() >= before.get<double>()) {
    return (now.get<double>() - before.get<double>()) / seconds;
  }
  return nullptr;
}

void add_stats_command(CLI::App& app, StatsCommand& command) {
  command.app = app.add_subcommand("stats", "Counters by layer, RoCE packets by opcode, ACKs/NAKs, per-QP counters");
  command.app->footer(kStatsFooter);
  command.app->add_option("name", command.vnic, "The vnic's name")->required();
  command.app->add_flag("--all", command.all, "Show the counters at 0 too (by default they are counted, not shown)");
  command.app->add_flag("--json", command.json, "Print the daemon's JSON reply, every counter");
  command.app->add_flag("--watch", command.watch, "Print again once a second until Ctrl-C, with rates per second");
}

int run_stats(const StatsCommand& command) {
  if (command.watch) {
    ::signal(SIGINT, on_interrupt);
    ::signal(SIGTERM, on_interrupt);
  }
  std::optional<nlohmann::json> previous;
  auto previous_time = std::chrono::steady_clock::now();
  do {
    const auto result = vnic::query_vnic(command.vnic, "stats");
    const auto now = std::chrono::steady_clock::now();
    if (!result.reply) {
      std::cerr << "rrdma-vnic: " << result.error << "\n";
      return 1;
    }
    // Rates over the time that really passed between the two replies, not the nominal second.
    std::optional<nlohmann::json> rates;
    if (previous) {
      rates = counter_rates(*previous, *result.reply, std::chrono::duration<double>(now - previous_time).count());
    }
    print_reply(command, *result.reply, rates ? &*rates : nullptr);
    previous = *result.reply;
    previous_time = now;
    for (int tenth = 0; command.watch && tenth < 10 && !stop_watching; ++tenth) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  } while (command.watch && !stop_watching);
  return 0;
}

}  // namespace rrdma::cli
