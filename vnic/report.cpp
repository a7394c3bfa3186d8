#include "vnic/report.h"

#include "verbs/device/qp_rules.h"
#include "vnic/runtime.h"

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

// "qps" for ResourceKind::Qp: the key of a kind in status and stats.
std::string kind_key(verbs::ResourceKind kind) { return std::string(verbs::resource_kind_name(kind)) + "s"; }

nlohmann::json quotas_json(const verbs::Quotas& quotas) {
  nlohmann::json out = nlohmann::json::object();
  for (verbs::ResourceKind kind : verbs::kAllResourceKinds) out[kind_key(kind)] = quotas.of(kind);
  out["ring_bytes"] = quotas.ring_bytes;
  return out;
}

nlohmann::json quota_use_json(const std::vector<verbs::QuotaUse>& uses) {
  nlohmann::json out = nlohmann::json::array();
  for (const verbs::QuotaUse& use : uses) {
    nlohmann::json entry = {{"pid", use.pid}, {"uid", use.uid}, {"connections", use.connections}};
    for (verbs::ResourceKind kind : verbs::kAllResourceKinds) entry[kind_key(kind)] = use.of(kind);
    entry["ring_bytes"] = use.ring_bytes;
    entry["descriptors"] = use.descriptors();
    out.push_back(std::move(entry));
  }
  return out;
}

// "12/729 QPs", in the order of the quotas object.
void format_quota_use(std::ostringstream& out, const nlohmann::json& use, const nlohmann::json& quotas) {
  out << "  pid " << use.value("pid", 0) << " (uid " << use.value("uid", 0) << ", " << use.value("connections", 0)
      << " connections, " << use.value("descriptors", 0) << " descriptors):";
  const char* separator = " ";
  for (const auto& [key, limit] : quotas.items()) {
    out << separator << use.value(key, 0) << "/" << limit.dump() << " " << key;
    separator = ", ";
  }
  out << "\n";
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
          {"netdev", text_or_null(config.netdev)},
          {"netns", network_namespace_id()},
          {"gateway", text_or_null(gateway)},
          {"pid", report.pid},
          {"uptime_s", whole_seconds(report.uptime)},
          {"neighbours", std::move(neighbours)},
          {"processes", processes_json(report.processes)},
          {"descriptors",
           {{"limit", report.descriptors.limit},
            {"hard_limit", report.descriptors.hard_limit},
            {"reserved", report.descriptors.reserved},
            {"open", report.descriptors.open}}},
          {"quotas", quotas_json(report.quotas)},
          {"quota_use", quota_use_json(report.quota_use)},
          {"quotas_per_user", quotas_json(report.user_quotas)}};
}

NamedCounters named(const rocev2::EngineCounters& c) {
  return {{"packets_received", c.packets_received}, {"packets_sent", c.packets_sent},
          {"unknown_qpn", c.unknown_qpn},           {"bad_opcode", c.bad_opcode},
          {"bad_header", c.bad_header},             {"wrong_state", c.wrong_state},
          {"cnp_received", c.cnp_received},         {"duplicate_requests", c.duplicate_requests},
          {"out_of_sequence", c.out_of_sequence},   {"naks_sent", c.naks_sent},
          {"rnr_naks_sent", c.rnr_naks_sent},       {"naks_received", c.naks_received},
          {"writes_not_placed", c.writes_not_placed},
          {"owner_gone_drops", c.owner_gone_drops},
          {"rnr_naks_received", c.rnr_naks_received}, {"retransmits", c.retransmits},
          {"timeouts", c.timeouts},                 {"ghost_responses", c.ghost_responses},
          {"qkey_mismatch", c.qkey_mismatch},       {"uc_messages_dropped", c.uc_messages_dropped},
          {"read_streams_restarted", c.read_streams_restarted},
          {"requests_dropped_behind_read", c.requests_dropped_behind_read},
          {"transmit_budget_cuts", c.transmit_budget_cuts},
          {"transmit_room_waits", c.transmit_room_waits},
          {"read_pace_cuts", c.read_pace_cuts}};
}

NamedCounters named(const verbs::NicCounters& c) {
  return {{"requests", c.requests},
          {"requests_refused", c.requests_refused},
          {"clients_connected", c.clients_connected},
          {"clients_disconnected", c.clients_disconnected},
          {"clients_evicted", c.clients_evicted},
          {"lost_writes_of_gone_owners", c.lost_writes_of_gone_owners},
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
          {"queued_writes_lost", c.queued_writes_lost}, {"reads_shared", c.reads_shared},
          {"not_writable", c.not_writable}};
}

std::vector<std::pair<std::string, std::uint64_t>> named(const verbs::QuotaRefusals& refusals) {
  std::vector<std::pair<std::string, std::uint64_t>> out;
  for (verbs::ResourceKind kind : verbs::kAllResourceKinds) out.emplace_back("refused_" + kind_key(kind), refusals.of(kind));
  out.emplace_back("refused_ring_bytes", refusals.ring_bytes);
  return out;
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
          {"tx_backlogged", c.tx_backlogged},
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
          {"fixed_file", c.fixed_file},
          {"fixed_buffers", c.fixed_buffers},
          {"busy_polls", c.busy_polls},
          {"busy_poll_hits", c.busy_poll_hits},
          {"tx_segment_runs", c.tx_segment_runs},
          {"tx_segmented_datagrams", c.tx_segmented_datagrams},
          {"tx_segmentation_refused", c.tx_segmentation_refused}};
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

namespace {

// The rdma_cm device: listeners, then every other id (its state, its peer, its CM connection).
void format_rdma_cm(std::ostringstream& out, const nlohmann::json& cm) {
  const auto listeners = cm.value("listeners", nlohmann::json::array());
  out << "rdma_cm listeners:" << (listeners.empty() ? " none" : "") << "\n";
  for (const auto& l : listeners) {
    out << "  " << l.value("port_space", "?") << " " << l.value("local", "?") << "  backlog free "
        << l.value("backlog_free", 0) << "\n";
  }
  const auto ids = cm.value("ids", nlohmann::json::array());
  out << "rdma_cm ids:" << (ids.empty() ? " none" : "") << "\n";
  for (const auto& id : ids) {
    out << "  " << id.value("port_space", "?") << " " << id.value("local", "?") << " -> " << id.value("peer", "-")
        << "  " << id.value("state", "?");
    if (id.contains("cm_state")) out << "  CM " << id.value("cm_state", "?") << "  QP " << id.value("qpn", 0);
    out << "\n";
  }
  const auto limits = cm.value("limits", nlohmann::json::object());
  if (!limits.empty()) {
    out << "rdma_cm limits:";
    const char* separator = " ";
    for (const auto& [key, limit] : limits.items()) {
      out << separator << key << " " << limit.dump();
      separator = ", ";
    }
    out << "\n";
  }
}

}  // namespace

std::string format_status(const nlohmann::json& status) {
  std::ostringstream out;
  out << "name:     " << status.value("name", "?") << "\n"
      << "mac:      " << status.value("mac", "?") << "\n"
      << "ip:       " << status.value("ip", "?") << "\n"
      << "mtu:      " << status.value("mtu", 0) << "\n"
      << (status.value("netdev", nlohmann::json()).is_string()
              ? "netdev:   " + status["netdev"].get<std::string>() + " (RoCE v2 through the kernel's UDP)"
              : "bridge:   " + text_or_dash(status.value("bridge", nlohmann::json())))
      << "\n"
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
  format_rdma_cm(out, status.value("rdma_cm", nlohmann::json::object()));
  const auto descriptors = status.value("descriptors", nlohmann::json::object());
  out << "descriptors: " << descriptors.value("open", 0) << " open, limit " << descriptors.value("limit", 0)
      << " (hard " << descriptors.value("hard_limit", 0) << "), " << descriptors.value("reserved", 0)
      << " kept from every process's quota\n";
  const auto quotas = status.value("quotas", nlohmann::json::object());
  out << "quotas per process:";
  const char* separator = " ";
  for (const auto& [key, limit] : quotas.items()) {
    out << separator << limit.dump() << " " << key;
    separator = ", ";
  }
  out << "\n";
  out << "quotas per user:";
  separator = " ";
  const auto user_quotas = status.value("quotas_per_user", nlohmann::json::object());
  for (const auto& [key, limit] : user_quotas.items()) {
    out << separator << limit.dump() << " " << key;
    separator = ", ";
  }
  out << "\n";
  const auto uses = status.value("quota_use", nlohmann::json::array());
  out << "use per process:" << (uses.empty() ? " none" : "") << "\n";
  for (const auto& use : uses) format_quota_use(out, use, quotas);
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
      << status.value("ip", "?") << "  mtu " << status.value("mtu", 0)
      << (status.value("netdev", nlohmann::json()).is_string() ? "  netdev " + status["netdev"].get<std::string>()
                                                                : "  bridge " + text_or_dash(status.value("bridge", nlohmann::json())))
      << "  pid "
      << status.value("pid", 0);
  return out.str();
}

}  // namespace rrdma::vnic
