#include "cli/trace.h"

#include <cstdio>
#include <iostream>

#include "cli/stream.h"

namespace rrdma::cli {
namespace {

constexpr const char* kTraceFooter = R"(Examples:
  rrdma-vnic trace rv0                           # everything, until Ctrl-C
  rrdma-vnic trace rv0 --qp 0x11 --count 20      # one QP's next 20 events
  rrdma-vnic trace rv0 --layer roce --layer qp   # transport headers and decisions only
One line per event (time, rx/tx frame, state change, completion), then one indented line
per layer: eth, arp, ip (and icmp), udp, roce (the BTH and its extension headers), qp
(the engine's decision, the DMA it did), verbs (completions), gsi (what the GSI endpoint,
QP 1, did with a management datagram). A QP filter keeps only what concerns that local QP.
The daemon formats nothing while nobody traces.)";

}  // namespace

void add_trace_command(CLI::App& app, TraceCommand& command) {
  command.app = app.add_subcommand("trace", "Print what the NIC does, layer by layer, as it happens");
  command.app->footer(kTraceFooter);
  command.app->add_option("name", command.vnic, "The vnic's name")->required();
  command.app->add_option("--qp", command.qp, "Only events of this local QP number (e.g. 17 or 0x11)");
  command.app->add_option("--layer", command.layers, "Only lines of this layer (repeatable): eth arp ip udp roce qp verbs gsi cm rdma_cm")
      ->check(CLI::IsMember({"eth", "arp", "ip", "udp", "roce", "qp", "verbs", "gsi", "cm", "rdma_cm"}));
  command.app->add_option("--count", command.count, "Stop after this many events");
}

int run_trace(const TraceCommand& command) {
  nlohmann::json request = {{"cmd", "trace"}};
  if (!command.qp.empty()) {
    std::size_t used = 0;
    unsigned long long qpn = 0;
    try {
      qpn = std::stoull(command.qp, &used, 0);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != command.qp.size() || qpn > 0xFFFFFF) {
      std::cerr << "rrdma-vnic: --qp " << command.qp << " is not a QP number (0 .. 0xffffff)\n";
      return 2;
    }
    request["qp"] = qpn;
  }
  if (!command.layers.empty()) request["layers"] = command.layers;
  std::uint64_t events = 0;
  const auto result = run_stream(
      command.vnic, request,
      [&](const nlohmann::json&) { std::cerr << "rrdma-vnic: tracing " << command.vnic << " (Ctrl-C stops)" << std::endl; },
      [&](std::span<const std::uint8_t> message) {
        if (command.count != 0 && events >= command.count) return StreamStep::Stop;
        std::fwrite(message.data(), 1, message.size(), stdout);
        std::fflush(stdout);
        ++events;
        return command.count != 0 && events >= command.count ? StreamStep::Stop : StreamStep::Continue;
      });
  if (!result.start) {
    std::cerr << "rrdma-vnic: " << result.error << "\n";
    return 1;
  }
  if (!result.error.empty()) {
    std::cerr << "rrdma-vnic: " << result.error << "\n";
    return 1;
  }
  return 0;
}

}  // namespace rrdma::cli
