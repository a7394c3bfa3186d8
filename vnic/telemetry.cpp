#include "vnic/telemetry.h"

#include "vnic/report.h"

namespace rrdma::vnic {

Telemetry::Telemetry(EventLoop& loop, FrameCapture& capture) : tracer_(loop, capture) {}

Telemetry::~Telemetry() = default;

void Telemetry::add_stats(nlohmann::json& stats) const {
  stats_.add_to(stats);
  add_layer(stats, "trace", named(tracer_.counters()));
}

void Telemetry::on_transport(bool sent, const rocev2::TransportPacket& packet, rocev2::Qpn local_qp,
                             stack::Ipv4Address) {
  stats_.count_packet(sent, packet, local_qp);
  tracer_.transport(sent, packet, local_qp);
}

void Telemetry::on_state_change(rocev2::Qpn qpn, rocev2::QpState from, rocev2::QpState to, std::string_view cause) {
  stats_.count_state(qpn, to);
  tracer_.state(qpn, from, to, cause);
}

void Telemetry::on_packet(rocev2::Qpn qpn, const rocev2::Bth& bth, rocev2::PacketDecision decision,
                          std::string_view detail) {
  stats_.count_decision(qpn, bth, decision, detail);
  tracer_.decision(qpn, bth, decision, detail);
}

void Telemetry::on_completion(const rocev2::Completion& cqe) {
  stats_.count_completion(cqe);
  tracer_.completion(cqe);
}

void Telemetry::on_gsi_received(const rocev2::TransportPacket& packet, rocev2::GsiDrop drop) {
  tracer_.gsi(false, packet, drop, true);
}

void Telemetry::on_gsi_sent(const rocev2::TransportPacket& packet, bool accepted) {
  tracer_.gsi(true, packet, rocev2::GsiDrop::none, accepted);
}

void Telemetry::on_cm_transition(rocev2::cm::ConnectionId c, rocev2::cm::CmState from, rocev2::cm::CmState to) {
  if (tracer_.active()) tracer_.note(TraceLayer::Cm, rocev2::cm::describe_transition(c, from, to));
}

void Telemetry::on_cm_id_transition(std::uint32_t id, verbs::CmIdState from, verbs::CmIdState to) {
  if (tracer_.active()) tracer_.note(TraceLayer::RdmaCm, verbs::describe_transition(id, from, to));
}

void Telemetry::arp_resolved(stack::Ipv4Address address, const stack::MacAddress& mac) {
  if (tracer_.active()) tracer_.note(TraceLayer::Arp, "arp resolved " + address.to_string() + " is at " + mac.to_string());
}

void Telemetry::arp_failed(stack::Ipv4Address address, std::size_t dropped_packets) {
  if (tracer_.active()) {
    tracer_.note(TraceLayer::Arp, "arp failed for " + address.to_string() + ": " + std::to_string(dropped_packets) +
                                      " queued packets dropped");
  }
}

void Telemetry::arp_conflict(stack::Ipv4Address ours, const stack::MacAddress& claimant) {
  if (tracer_.active()) {
    tracer_.note(TraceLayer::Arp, "arp conflict: " + claimant.to_string() + " claims our " + ours.to_string());
  }
}

// The trace shows a frame to our own address when it is sent, as it would a frame for the
// TAP (the engine's line and an answer's nesting follow it), and again when it is delivered.
// The capture has it once, as received (daemon.cpp): a pcap of it twice would show every
// packet duplicated.
void Telemetry::frame_looped_back(ByteSpan frame) { tracer_.frame(frame, FrameDirection::Sent); }

void Telemetry::frame_dropped(std::string_view layer, std::string_view reason, ByteSpan) {
  if (!tracer_.active()) return;
  const TraceLayer at = layer == "arp" ? TraceLayer::Arp
                        : layer == "udp" ? TraceLayer::Udp
                        : layer == "ethernet" ? TraceLayer::Eth
                                              : TraceLayer::Ip;
  tracer_.note(at, "drop at " + std::string(layer) + ": " + std::string(reason));
}

}  // namespace rrdma::vnic
