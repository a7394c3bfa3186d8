#include "vnic/roce_stats.h"

#include <cctype>

#include "rocev2/opcode.h"

namespace rrdma::vnic {
namespace {

using Counts = std::map<std::string, std::uint64_t, std::less<>>;

// Counter names are keys a script can use: lower case, words joined by '_'.
std::string key_of(std::string_view text) {
  std::string key;
  for (const char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!key.empty() && key.back() != '_') {
      key += '_';
    }
  }
  while (!key.empty() && key.back() == '_') key.pop_back();
  return key.empty() ? "unnamed" : key;
}

void bump(Counts& counts, std::string_view text) {
  const std::string key = key_of(text);
  ++counts[key];
}

void count_ack(AckCounts& counts, std::uint8_t syndrome) {
  switch (ack_kind(syndrome)) {
    case AckKind::Ack: ++counts.acks; break;
    case AckKind::RnrNak: ++counts.rnr_naks; break;
    case AckKind::Nak:
      ++counts.naks;
      ++counts.naks_by_code[nak_code_name(syndrome)];
      break;
    case AckKind::Reserved: ++counts.naks_by_code["reserved_syndrome"]; break;
  }
}

nlohmann::json to_json(const Counts& counts) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, value] : counts) out[name] = value;
  return out;
}

// The decisions that happened, by name ("out_of_sequence_nak_sent").
nlohmann::json to_json(const DecisionCounts& counts) {
  nlohmann::json out = nlohmann::json::object();
  for (std::size_t i = 0; i < counts.size(); ++i)
    if (counts[i] != 0) out[key_of(rocev2::to_string(static_cast<rocev2::PacketDecision>(i)))] = counts[i];
  return out;
}

// One flat object, so that `stats` prints it like the other layers.
void add_acks(nlohmann::json& out, const char* direction, const AckCounts& counts) {
  const std::string prefix(direction);
  out[prefix + "_acks"] = counts.acks;
  out[prefix + "_rnr_naks"] = counts.rnr_naks;
  out[prefix + "_naks"] = counts.naks;
  for (const char* code : {"psn_sequence_error", "invalid_request", "remote_access_error",
                           "remote_operational_error", "invalid_rd_request"}) {
    const auto it = counts.naks_by_code.find(code);
    out[prefix + "_nak_" + code] = it == counts.naks_by_code.end() ? 0 : it->second;
  }
}

nlohmann::json qp_json(const QpStats& qp) {
  nlohmann::json out = {{"state", qp.state},
                        {"tx_packets", qp.tx.packets},
                        {"tx_bytes", qp.tx.bytes},
                        {"rx_packets", qp.rx.packets},
                        {"rx_bytes", qp.rx.bytes},
                        {"completions", qp.completions},
                        {"completion_errors", qp.completion_errors}};
  add_acks(out, "tx", qp.tx_acks);
  add_acks(out, "rx", qp.rx_acks);
  out["decisions"] = to_json(qp.decisions);
  out["retransmissions"] = to_json(qp.retransmissions);
  out["drops"] = to_json(qp.drops);
  return out;
}

}  // namespace

AckKind ack_kind(std::uint8_t syndrome) {
  switch ((syndrome >> 5) & 0x3) {
    case 0: return AckKind::Ack;
    case 1: return AckKind::RnrNak;
    case 3: return AckKind::Nak;
    default: return AckKind::Reserved;
  }
}

std::string nak_code_name(std::uint8_t syndrome) {
  switch (syndrome & 0x1F) {
    case 0: return "psn_sequence_error";
    case 1: return "invalid_request";
    case 2: return "remote_access_error";
    case 3: return "remote_operational_error";
    case 4: return "invalid_rd_request";
    default: return "reserved_" + std::to_string(syndrome & 0x1F);
  }
}

QpStats* RoceStats::qp(rocev2::Qpn qpn) {
  if (auto it = qps_.find(qpn.value()); it != qps_.end()) return &it->second;
  if (qps_.size() >= kMaxQps) {
    ++qps_not_tracked_;
    return nullptr;
  }
  return &qps_[qpn.value()];
}

void RoceStats::count_packet(bool sent, const rocev2::TransportPacket& packet, rocev2::Qpn local_qp) {
  OpcodeCounts& by_opcode = opcodes_[static_cast<std::uint8_t>(packet.bth.opcode)];
  DirectionCounts& direction = sent ? by_opcode.tx : by_opcode.rx;
  ++direction.packets;
  direction.bytes += packet.payload.size();
  if (packet.aeth) count_ack(sent ? tx_acks_ : rx_acks_, packet.aeth->syndrome);
  QpStats* stats = qp(local_qp);
  if (stats == nullptr) return;
  DirectionCounts& own = sent ? stats->tx : stats->rx;
  ++own.packets;
  own.bytes += packet.payload.size();
  if (packet.aeth) count_ack(sent ? stats->tx_acks : stats->rx_acks, packet.aeth->syndrome);
}

void RoceStats::count_decision(rocev2::Qpn qpn, const rocev2::Bth& bth, rocev2::PacketDecision decision,
                               std::string_view detail) {
  const auto index = static_cast<std::size_t>(decision);
  if (index >= kDecisionKinds) return;
  ++decisions_[index];
  const bool retransmitted = decision == rocev2::PacketDecision::Retransmitted;
  const bool dropped = decision == rocev2::PacketDecision::Dropped;
  if (retransmitted) {
    ++opcodes_[static_cast<std::uint8_t>(bth.opcode)].tx_retransmitted;
    bump(retransmissions_, detail);
  }
  if (dropped) bump(drops_, detail);
  QpStats* stats = qp(qpn);
  if (stats == nullptr) return;
  ++stats->decisions[index];
  if (retransmitted) bump(stats->retransmissions, detail);
  if (dropped) bump(stats->drops, detail);
}

void RoceStats::count_state(rocev2::Qpn qpn, rocev2::QpState to) {
  if (QpStats* stats = qp(qpn)) stats->state = std::string(rocev2::to_string(to));
}

void RoceStats::count_completion(const rocev2::Completion& completion) {
  QpStats* stats = qp(completion.qpn);
  if (stats == nullptr) return;
  ++stats->completions;
  if (completion.status != rocev2::WcStatus::Success) ++stats->completion_errors;
}

void RoceStats::add_to(nlohmann::json& stats) const {
  nlohmann::json opcodes = nlohmann::json::object();
  for (std::size_t i = 0; i < opcodes_.size(); ++i) {
    const OpcodeCounts& c = opcodes_[i];
    if (c.tx.packets == 0 && c.rx.packets == 0) continue;
    const auto info = rocev2::opcode_info(static_cast<rocev2::Opcode>(i));
    opcodes[key_of(info.name)] = {{"opcode", i},
                                  {"tx_packets", c.tx.packets},
                                  {"tx_bytes", c.tx.bytes},
                                  {"tx_retransmitted", c.tx_retransmitted},
                                  {"rx_packets", c.rx.packets},
                                  {"rx_bytes", c.rx.bytes}};
  }
  stats["roce_opcodes"] = std::move(opcodes);
  nlohmann::json acks = nlohmann::json::object();
  add_acks(acks, "tx", tx_acks_);
  add_acks(acks, "rx", rx_acks_);
  stats["roce_acks"] = std::move(acks);
  stats["roce_decisions"] = to_json(decisions_);
  stats["roce_retransmissions"] = to_json(retransmissions_);
  stats["roce_drops"] = to_json(drops_);
  nlohmann::json qps = nlohmann::json::object();
  for (const auto& [qpn, qp] : qps_) qps[std::to_string(qpn)] = qp_json(qp);  // json objects sort their keys
  stats["qps"] = std::move(qps);
  stats["roce"]["qps_not_tracked"] = qps_not_tracked_;
}

}  // namespace rrdma::vnic
