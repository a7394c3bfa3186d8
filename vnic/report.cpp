#include "vnic/report.h"

#include <chrono>
#include <sstream>

namespace rrdma::vnic {
namespace {

constexpr const char* kStackLayers[] = {"ethernet", "arp", "ipv4", "icmp", "udp"};

std::int64_t whole_seconds(Duration duration) {
  return std::chrono::duration_cast<std::chrono::seconds>(duration).count();
}

nlohmann::json text_or_null(const std::optional<std::string>& text) {
  return text ? nlohmann::json(*text) : nlohmann::json(nullptr);
}

std::string text_or_dash(const nlohmann::json& value) {
  return value.is_string() ? value.get<std::string>() : std::string("-");
}

}  // namespace

nlohmann::json status_json(const StatusReport& report) {
  const VnicConfig& config = report.config;
  nlohmann::json neighbours = nlohmann::json::array();
  for (const auto& entry : report.neighbours) {
    neighbours.push_back({{"ip", entry.address.to_string()},
                          {"mac", entry.mac.to_string()},
                          {"age_s", whole_seconds(entry.age)}});
  }
  std::optional<std::string> gateway;
  if (config.gateway) gateway = config.gateway->to_string();
  return {{"name", config.name},
          {"mac", config.mac.to_string()},
          {"ip", config.address.address.to_string() + "/" + std::to_string(config.address.prefix_len)},
          {"mtu", config.mtu},
          {"bridge", text_or_null(config.bridge)},
          {"gateway", text_or_null(gateway)},
          {"pid", report.pid},
          {"uptime_s", whole_seconds(report.uptime)},
          {"neighbours", std::move(neighbours)}};
}

std::vector<std::pair<std::string, std::uint64_t>> named(const LoopCounters& c) {
  return {{"tap_rx_frames", c.tap_rx_frames},
          {"tap_rx_bytes", c.tap_rx_bytes},
          {"tap_tx_frames", c.tap_tx_frames},
          {"tap_tx_bytes", c.tap_tx_bytes},
          {"tx_queue_drops", c.tx_queue_drops},
          {"tx_oversize_drops", c.tx_oversize_drops},
          {"tx_write_errors", c.tx_write_errors},
          {"rx_read_errors", c.rx_read_errors},
          {"rx_truncated", c.rx_truncated},
          {"rx_read_pauses", c.rx_read_pauses},
          {"rx_buffer_exhausted", c.rx_buffer_exhausted},
          {"rx_rearms", c.rx_rearms},
          {"loop_iterations", c.loop_iterations},
          {"completions", c.completions},
          {"submits", c.submits},
          {"timer_expirations", c.timer_expirations},
          {"multishot_read", c.multishot_read}};
}

nlohmann::json stats_json(const std::vector<stack::Counter>& stack_counters,
                          const LoopCounters& loop_counters) {
  nlohmann::json stats = nlohmann::json::object();
  for (const char* layer : kStackLayers) stats[layer] = nlohmann::json::object();
  for (const auto& counter : stack_counters) {
    stats[std::string(counter.layer)][std::string(counter.name)] = counter.value;
  }
  nlohmann::json daemon = nlohmann::json::object();
  for (const auto& [name, value] : named(loop_counters)) daemon[name] = value;
  stats["daemon"] = std::move(daemon);
  return stats;
}

std::string format_status(const nlohmann::json& status) {
  std::ostringstream out;
  out << "name:     " << status.value("name", "?") << "\n"
      << "mac:      " << status.value("mac", "?") << "\n"
      << "ip:       " << status.value("ip", "?") << "\n"
      << "mtu:      " << status.value("mtu", 0) << "\n"
      << "bridge:   " << text_or_dash(status.value("bridge", nlohmann::json())) << "\n"
      << "gateway:  " << text_or_dash(status.value("gateway", nlohmann::json())) << "\n"
      << "pid:      " << status.value("pid", 0) << "\n"
      << "uptime:   " << status.value("uptime_s", 0) << " s\n"
      << "neighbours:";
  const auto neighbours = status.value("neighbours", nlohmann::json::array());
  if (neighbours.empty()) out << " none";
  out << "\n";
  for (const auto& entry : neighbours) {
    out << "  " << entry.value("ip", "?") << "  " << entry.value("mac", "?") << "  age "
        << entry.value("age_s", 0) << " s\n";
  }
  return out.str();
}

std::string format_stats(const nlohmann::json& stats) {
  std::ostringstream out;
  for (const auto& [layer, counters] : stats.items()) {
    out << layer << ":\n";
    if (!counters.is_object()) continue;
    for (const auto& [name, value] : counters.items()) out << "  " << name << " " << value.dump() << "\n";
  }
  return out.str();
}

std::string format_list_line(const nlohmann::json& status) {
  std::ostringstream out;
  out << status.value("name", "?") << "  " << status.value("mac", "?") << "  "
      << status.value("ip", "?") << "  mtu " << status.value("mtu", 0) << "  bridge "
      << text_or_dash(status.value("bridge", nlohmann::json())) << "  pid "
      << status.value("pid", 0);
  return out.str();
}

}  // namespace rrdma::vnic
