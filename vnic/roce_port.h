// The RoCE v2 glue between the stack and the verbs device: UDP port 4791 of the vnic's
// Interface. Received datagrams are checked as RoCE v2 packets (ICRC over the IPv4 and UDP
// headers as received, IBA Annex A17.3.3; then the transport headers) and handed to the Nic
// with where they came from. A packet the engine sends is checked, then written once into
// the frame the stack builds (send_udp with rocev2::TransportPayload as the payload and
// rocev2::IcrcFinalizer for the ICRC, once the IPv4 header is final): the one frame path of
// rocev2/encap.h, which tests build their frames with too. Packets for QP 0 and 1 go to the
// GSI endpoint (rocev2/gsi.h) instead of the Nic, and the endpoint's MADs leave through the
// same path. Hostile input: every packet that fails a check is counted under its reason and
// dropped.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "rocev2/gsi.h"
#include "rocev2/packet.h"
#include "stack/interface.h"
#include "verbs/device/nic.h"

namespace rrdma::vnic {

struct RocePortCounters {
  std::uint64_t rx_packets = 0;
  std::uint64_t rx_bad_icrc = 0;
  std::uint64_t rx_bad_transport = 0;   // parse_transport refused the headers
  std::uint64_t rx_malformed = 0;       // ICRC does not fit, or headers not contiguous
  std::uint64_t rx_no_device = 0;       // no Nic (or, for QP 0 and 1, GSI endpoint) attached yet
  std::uint64_t tx_packets = 0;         // handed to the stack (sent or waiting for ARP)
  std::uint64_t tx_arp_pending = 0;     // of which queued until ARP resolves
  std::uint64_t tx_unroutable = 0;
  std::uint64_t tx_too_big = 0;         // larger than the IP MTU: the path MTU is too large
  std::uint64_t tx_emit_errors = 0;
};

// Sees every RoCE v2 packet that passed the checks (received) or is about to be handed to
// the stack (sent; an unroutable or too big one is then counted under tx_unroutable /
// tx_too_big): `rrdma-vnic stats` and `trace` (vnic/telemetry.h). `local_qp` is the vnic's QP the
// packet belongs to: the destination of a received one, the source of a sent one.
class TransportObserver {
 public:
  virtual ~TransportObserver() = default;
  virtual void on_transport(bool sent, const rocev2::TransportPacket& packet, rocev2::Qpn local_qp,
                            stack::Ipv4Address peer) = 0;
};

class RocePort final : public stack::UdpHandler, public verbs::PacketPort, public rocev2::GsiLink {
 public:
  // Binds UDP 4791 on `interface` until destroyed.
  explicit RocePort(stack::Interface& interface);
  ~RocePort() override;
  RocePort(const RocePort&) = delete;
  RocePort& operator=(const RocePort&) = delete;

  // Where verified packets go. The Nic needs this port to exist first, hence a setter;
  // nullptr detaches (packets are then counted and dropped).
  void attach(verbs::Nic* nic) { nic_ = nic; }
  // Where packets for QP 0 and 1 go (they never reach the Nic); nullptr detaches.
  void attach_gsi(rocev2::GsiEndpoint* gsi) { gsi_ = gsi; }
  // nullptr for none; must outlive the port or be reset first.
  void set_observer(TransportObserver* observer) { observer_ = observer; }

  void receive_udp(const stack::UdpDatagram& datagram, Instant now) override;
  void send(const rocev2::OutgoingPacket& packet, std::uint16_t udp_source_port, Instant now) override;
  std::size_t transmit_room() const override { return interface_.transmit_room(); }
  bool send_gsi(const rocev2::OutgoingPacket& packet, std::uint16_t udp_source_port, Instant now) override;

  const RocePortCounters& counters() const { return counters_; }
  std::vector<std::pair<std::string_view, std::uint64_t>> named_counters() const;

 private:
  // True if the stack took the packet (sent, or waiting for ARP).
  bool transmit(const rocev2::OutgoingPacket& packet, std::uint16_t udp_source_port, Instant now);

  stack::Interface& interface_;
  verbs::Nic* nic_ = nullptr;
  rocev2::GsiEndpoint* gsi_ = nullptr;
  TransportObserver* observer_ = nullptr;
  RocePortCounters counters_;
};

}  // namespace rrdma::vnic
