#include "vnic/report.h"

#include "verbs/qp_rules.h"

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

const char* qp_type_name(rocev2::QpType type) {
  switch (type) {
    case rocev2::QpType::Rc: return "RC";
    case rocev2::QpType::Uc: return "UC";
    case rocev2::QpType::Ud: return "UD";
  }
  return "?";
}

nlohmann::json processes_json(const std::vector<verbs::ClientListing>& listings) {
  nlohmann::json processes = nlohmann::json::array();
  for (const auto& l : listings) {
    nlohmann::json qps = nlohmann::json::array();
    for (const auto& qp : l.qps) {
      qps.push_back({{"handle", qp.handle},
                     {"qpn", qp.qpn.value()},
                     {"type", qp_type_name(qp.type)},
                     {"state", verbs::state_name(qp.state)}});
    }
    processes.push_back({{"pid", l.client.pid},
                         {"uid", l.client.uid},
                         {"client", l.client.id},
                         {"contexts", l.contexts.size()},
                         {"pds", l.pds.size()},
                         {"mrs", l.mrs},
                         {"cqs", l.cqs.size()},
                         {"srqs", l.srqs.size()},
                         {"ahs", l.ahs.size()},
                         {"qps", std::move(qps)}});
  }
  return processes;
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
          {"neighbours", std::move(neighbours)},
          {"processes", processes_json(report.processes)}};
}

NamedCounters named(const rocev2::EngineCounters& c) {
  return {{"packets_received", c.packets_received}, {"packets_sent", c.packets_sent},
          {"unknown_qpn", c.unknown_qpn},           {"bad_opcode", c.bad_opcode},
          {"bad_header", c.bad_header},             {"wrong_state", c.wrong_state},
          {"cnp_received", c.cnp_received},         {"duplicate_requests", c.duplicate_requests},
          {"out_of_sequence", c.out_of_sequence},   {"naks_sent", c.naks_sent},
          {"rnr_naks_sent", c.rnr_naks_sent},       {"naks_received", c.naks_received},
          {"rnr_naks_received", c.rnr_naks_received}, {"retransmits", c.retransmits},
          {"timeouts", c.timeouts},                 {"ghost_responses", c.ghost_responses},
          {"qkey_mismatch", c.qkey_mismatch},       {"uc_messages_dropped", c.uc_messages_dropped},
          {"read_streams_restarted", c.read_streams_restarted},
          {"requests_dropped_behind_read", c.requests_dropped_behind_read}};
}

NamedCounters named(const verbs::NicCounters& c) {
  return {{"requests", c.requests},
          {"requests_refused", c.requests_refused},
          {"clients_connected", c.clients_connected},
          {"clients_disconnected", c.clients_disconnected},
          {"clients_evicted", c.clients_evicted},
          {"sends_of_lost_clients", c.sends_of_lost_clients},
          {"doorbells", c.doorbells},
          {"send_wqes", c.send_wqes},
          {"bad_send_wqes", c.bad_send_wqes},
          {"bad_recv_wqes", c.bad_recv_wqes},
          {"broken_rings", c.broken_rings},
          {"completions", c.completions},
          {"completions_dropped", c.completions_dropped},
          {"cq_overruns", c.cq_overruns},
          {"cq_notifications", c.cq_notifications},
          {"async_events", c.async_events},
          {"async_events_dropped", c.async_events_dropped},
          {"srq_limit_events", c.srq_limit_events}};
}

NamedCounters named(const verbs::DmaCounters& c) {
  return {{"transfers", c.transfers}, {"refused", c.refused},     {"process_gone", c.process_gone},
          {"faults", c.faults},       {"partial", c.partial},     {"other_errors", c.other_errors},
          {"writes_queued", c.writes_queued}, {"combined_calls", c.combined_calls},
          {"queued_writes_lost", c.queued_writes_lost}, {"reads_shared", c.reads_shared}};
}

void add_layer(nlohmann::json& stats, std::string_view layer, const NamedCounters& counters) {
  nlohmann::json values = nlohmann::json::object();
  for (const auto& [name, value] : counters) values[std::string(name)] = value;
  stats[std::string(layer)] = std::move(values);
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
          {"multishot_read", c.multishot_read},
          {"fixed_file", c.fixed_file}};
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
  const auto processes = status.value("processes", nlohmann::json::array());
  out << "processes:" << (processes.empty() ? " none" : "") << "\n";
  for (const auto& p : processes) {
    out << "  pid " << p.value("pid", 0) << " (uid " << p.value("uid", 0) << "): " << p.value("contexts", 0)
        << " contexts, " << p.value("pds", 0) << " PDs, " << p.value("mrs", 0) << " MRs, " << p.value("cqs", 0)
        << " CQs, " << p.value("srqs", 0) << " SRQs, " << p.value("ahs", 0) << " AHs, "
        << p.value("qps", nlohmann::json::array()).size() << " QPs\n";
    for (const auto& qp : p.value("qps", nlohmann::json::array())) {
      out << "    QP " << qp.value("qpn", 0) << "  " << qp.value("type", "?") << "  " << qp.value("state", "?")
          << "\n";
    }
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
