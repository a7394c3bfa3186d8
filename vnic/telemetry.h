// What the daemon shows of itself beyond the stack's counters: the RoCE statistics
// (vnic/roce_stats.h, always counted) and the live trace (vnic/trace.h, only while someone
// watches). One observer object for the places events come from: the RocePort
// (TransportObserver), the engine through the Nic (EngineObserver), the GSI endpoint
// (GsiObserver), the CM (CmObserver), the rdma_cm ids (CmIdObserver) and the stack
// (StackObserver); frames come through FrameCapture's hook.
// The GSI endpoint counts for itself (rocev2::GsiCounters): only its trace lines pass here.
#pragma once

#include <nlohmann/json.hpp>

#include "rocev2/engine/ports.h"
#include "rocev2/cm/cm.h"
#include "rocev2/gsi.h"
#include "stack/interface.h"
#include "verbs/device/cm_id.h"
#include "vnic/capture.h"
#include "vnic/event_loop.h"
#include "vnic/ports/roce_port.h"
#include "vnic/roce_stats.h"
#include "vnic/trace.h"

namespace rrdma::vnic {

class Telemetry final : public rocev2::EngineObserver,
                        public rocev2::GsiObserver,
                        public rocev2::cm::CmObserver,
                        public verbs::CmIdObserver,
                        public TransportObserver,
                        public stack::StackObserver {
 public:
  // Frames reach the tracer through `capture`'s hook, which must outlive this.
  Telemetry(EventLoop& loop, FrameCapture& capture);
  ~Telemetry() override;
  Telemetry(const Telemetry&) = delete;
  Telemetry& operator=(const Telemetry&) = delete;

  // `rrdma-vnic trace`: takes the connection `fd` (ControlServer::add_stream_command).
  void start_trace(int fd, const nlohmann::json& request) { tracer_.start(fd, request); }
  // Adds the RoCE counters and the trace's own to a `stats` reply.
  void add_stats(nlohmann::json& stats) const;

  // TransportObserver
  void on_transport(bool sent, const rocev2::TransportPacket& packet, rocev2::Qpn local_qp,
                    stack::Ipv4Address peer) override;
  // rocev2::EngineObserver
  void on_state_change(rocev2::Qpn qpn, rocev2::QpState from, rocev2::QpState to, std::string_view cause) override;
  void on_packet(rocev2::Qpn qpn, const rocev2::Bth& bth, rocev2::PacketDecision decision,
                 std::string_view detail) override;
  void on_completion(const rocev2::Completion& cqe) override;
  // rocev2::GsiObserver
  void on_gsi_received(const rocev2::TransportPacket& packet, rocev2::GsiDrop drop) override;
  void on_gsi_sent(const rocev2::TransportPacket& packet, bool accepted) override;
  // rocev2::cm::CmObserver: each state change of a connection, a `cm` trace line
  void on_cm_transition(rocev2::cm::ConnectionId c, rocev2::cm::CmState from, rocev2::cm::CmState to) override;
  // verbs::CmIdObserver: each state change of an rdma_cm id, an `rdma_cm` trace line
  void on_cm_id_transition(std::uint32_t id, verbs::CmIdState from, verbs::CmIdState to) override;
  // stack::StackObserver
  void arp_resolved(stack::Ipv4Address address, const stack::MacAddress& mac) override;
  void arp_failed(stack::Ipv4Address address, std::size_t dropped_packets) override;
  void arp_conflict(stack::Ipv4Address ours, const stack::MacAddress& claimant) override;
  void frame_dropped(std::string_view layer, std::string_view reason, ByteSpan frame) override;
  void frame_looped_back(ByteSpan frame) override;

 private:
  RoceStats stats_;
  Tracer tracer_;
};

}  // namespace rrdma::vnic
