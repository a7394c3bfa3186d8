// `rrdma-vnic stats`: the RoCE v2 counters in the spirit of `rdma statistic` and
// `ethtool -S` — packets and bytes by opcode in each direction, ACKs, NAKs by syndrome,
// RNR NAKs (all read from the AETH as it went on or came off the wire), and the engine's
// decisions (retransmissions by reason, duplicates, out-of-sequence, drops by reason),
// both for the whole vnic and per local QP.
//
// Fed by RocePort (every verified or emitted transport packet) and by the engine's observer
// (decisions, state changes, completions). Counting is a few array updates and one hash
// lookup per packet, always on: stats must be there when the trouble already happened.
// Names are made only when `stats` asks (add_to); the detail strings of retransmissions and
// drops, which are rare, are keyed as they come.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "rocev2/engine/ports.h"
#include "rocev2/packet.h"

namespace rrdma::vnic {

// What an AETH syndrome says (IBA 9.7.5.1, table "AETH syndrome"): bits 6-5 the kind
// (00 ACK, 01 RNR NAK, 11 NAK), bits 4-0 the credit count, RNR timer or NAK code.
enum class AckKind : std::uint8_t { Ack, RnrNak, Nak, Reserved };
AckKind ack_kind(std::uint8_t syndrome);
// "psn_sequence_error", "invalid_request", "remote_access_error",
// "remote_operational_error", "invalid_rd_request", or "reserved_N".
std::string nak_code_name(std::uint8_t syndrome);

struct DirectionCounts {
  std::uint64_t packets = 0;
  std::uint64_t bytes = 0;  // payload bytes (no headers, pad or ICRC)
};

struct AckCounts {
  std::uint64_t acks = 0;        // ACK syndrome (on an Acknowledge, READ response or atomic ACK)
  std::uint64_t rnr_naks = 0;
  std::uint64_t naks = 0;        // all NAK codes
  std::map<std::string, std::uint64_t> naks_by_code;
};

// Packets by engine decision, indexed by rocev2::PacketDecision.
// UcMessageDropped is the last of them (rocev2/engine/ports.h): keep it so when adding one
// (tests/vnic/observe_test.cpp counts every one and fails on a decision left out).
inline constexpr std::size_t kDecisionKinds = static_cast<std::size_t>(rocev2::PacketDecision::UcMessageDropped) + 1;
using DecisionCounts = std::array<std::uint64_t, kDecisionKinds>;

struct QpStats {
  DirectionCounts tx;
  DirectionCounts rx;
  AckCounts tx_acks;
  AckCounts rx_acks;
  DecisionCounts decisions{};                                          // engine decision -> packets
  std::map<std::string, std::uint64_t, std::less<>> retransmissions;  // reason -> packets
  std::map<std::string, std::uint64_t, std::less<>> drops;            // reason -> packets
  std::uint64_t completions = 0;
  std::uint64_t completion_errors = 0;
  std::string state;  // the last state the engine reported
};

class RoceStats {
 public:
  // Every verified received packet (`sent` false) and every emitted one; `local_qp` is the
  // QP of this vnic it belongs to.
  void count_packet(bool sent, const rocev2::TransportPacket& packet, rocev2::Qpn local_qp);
  void count_decision(rocev2::Qpn qpn, const rocev2::Bth& bth, rocev2::PacketDecision decision,
                      std::string_view detail);
  void count_state(rocev2::Qpn qpn, rocev2::QpState to);
  void count_completion(const rocev2::Completion& completion);

  // Adds "roce_opcodes", "roce_acks", "roce_decisions", "roce_drops" and "qps" to `stats`.
  void add_to(nlohmann::json& stats) const;

  // More QPs than this have been seen: the rest are counted only in the totals.
  static constexpr std::size_t kMaxQps = 4096;
  std::uint64_t qps_not_tracked() const { return qps_not_tracked_; }

 private:
  struct OpcodeCounts {
    DirectionCounts tx, rx;
    std::uint64_t tx_retransmitted = 0;
  };
  QpStats* qp(rocev2::Qpn qpn);

  std::array<OpcodeCounts, 256> opcodes_{};
  AckCounts tx_acks_, rx_acks_;
  DecisionCounts decisions_{};
  std::map<std::string, std::uint64_t, std::less<>> retransmissions_;
  std::map<std::string, std::uint64_t, std::less<>> drops_;
  std::unordered_map<std::uint32_t, QpStats> qps_;  // node-based: qp()'s pointers stay valid
  std::uint64_t qps_not_tracked_ = 0;
};

}  // namespace rrdma::vnic
