#include "cli/stats.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <thread>

#include "vnic/lifecycle.h"

namespace rrdma::cli {
namespace {

constexpr const char* kStatsFooter = R"(Examples:
  rrdma-vnic stats rv0
  rrdma-vnic stats rv0 --json | jq '.roce_opcodes'
  rrdma-vnic stats rv0 --watch        # once a second until Ctrl-C
Layers: ethernet, arp, ipv4, icmp, udp, daemon, roce, engine, verbs, dma, capture, trace, control;
roce_opcodes (packets and payload bytes by BTH opcode, both directions), roce_acks (ACKs,
RNR NAKs, NAKs by syndrome, from the AETH on the wire), roce_decisions,
roce_retransmissions (by reason), roce_drops (by reason), and qps (the same per local QP).)";

std::uint64_t number(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
}

void flat(std::ostringstream& out, const std::string& name, const nlohmann::json& counters, const char* indent) {
  out << indent << name << ":\n";
  for (const auto& [key, value] : counters.items()) {
    if (value.is_object()) continue;
    out << indent << "  " << key << " " << (value.is_string() ? value.get<std::string>() : value.dump()) << "\n";
  }
}

void opcode_table(std::ostringstream& out, const nlohmann::json& opcodes) {
  out << "roce_opcodes:\n";
  char line[256];
  std::snprintf(line, sizeof(line), "  %-40s %10s %12s %10s %12s %10s\n", "opcode", "tx_packets", "tx_bytes",
                "tx_retrans", "rx_packets", "rx_bytes");
  out << line;
  for (const auto& [name, c] : opcodes.items()) {
    std::snprintf(line, sizeof(line), "  %-40s %10llu %12llu %10llu %10llu %12llu\n", name.c_str(),
                  static_cast<unsigned long long>(number(c, "tx_packets")),
                  static_cast<unsigned long long>(number(c, "tx_bytes")),
                  static_cast<unsigned long long>(number(c, "tx_retransmitted")),
                  static_cast<unsigned long long>(number(c, "rx_packets")),
                  static_cast<unsigned long long>(number(c, "rx_bytes")));
    out << line;
  }
}

volatile sig_atomic_t stop_watching = 0;
void on_interrupt(int) { stop_watching = 1; }

}  // namespace

std::string format_stats_text(const nlohmann::json& stats) {
  std::ostringstream out;
  for (const auto& [layer, counters] : stats.items()) {
    if (!counters.is_object()) continue;
    if (layer == "roce_opcodes") {
      opcode_table(out, counters);
    } else if (layer == "qps") {
      for (const auto& [qpn, qp] : counters.items()) {
        flat(out, "qp " + qpn, qp, "");
        for (const char* part : {"decisions", "retransmissions", "drops"}) {
          if (qp.contains(part) && qp[part].is_object() && !qp[part].empty()) flat(out, part, qp[part], "  ");
        }
      }
    } else {
      flat(out, layer, counters, "");
    }
  }
  return out.str();
}

void add_stats_command(CLI::App& app, StatsCommand& command) {
  command.app = app.add_subcommand("stats", "Counters by layer, RoCE packets by opcode, ACKs/NAKs, per-QP counters");
  command.app->footer(kStatsFooter);
  command.app->add_option("name", command.vnic, "The vnic's name")->required();
  command.app->add_flag("--json", command.json, "Print the daemon's JSON reply");
  command.app->add_flag("--watch", command.watch, "Print again once a second until Ctrl-C");
}

int run_stats(const StatsCommand& command) {
  if (command.watch) {
    ::signal(SIGINT, on_interrupt);
    ::signal(SIGTERM, on_interrupt);
  }
  do {
    const auto result = vnic::query_vnic(command.vnic, "stats");
    if (!result.reply) {
      std::cerr << "rrdma-vnic: " << result.error << "\n";
      return 1;
    }
    // A terminal gets the screen cleared; a pipe or file gets one document after another.
    if (command.watch && ::isatty(STDOUT_FILENO)) std::cout << "\x1b[H\x1b[2J";
    if (command.json) {
      std::cout << (command.watch ? result.reply->dump() : result.reply->dump(2)) << "\n";
    } else {
      std::cout << format_stats_text(*result.reply);
      if (command.watch) std::cout << "\n";
    }
    std::cout.flush();
    for (int tenth = 0; command.watch && tenth < 10 && !stop_watching; ++tenth) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  } while (command.watch && !stop_watching);
  return 0;
}

}  // namespace rrdma::cli
