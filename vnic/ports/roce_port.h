// The RoCE v2 glue between a medium and the verbs device. RoceEndpoint is what every kind of
// port shares; RocePort is UDP port 4791 of a TAP vnic's own Interface (the UDP socket of
// `up --netdev` is vnic/ports/netdev_port.h). Received datagrams are checked as RoCE v2 packets (ICRC over the IPv4 and UDP
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
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "rocev2/encap.h"
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
  std::uint64_t rx_icrc_id_recovered = 0;  // --netdev: the ICRC held for an IPv4 ID other than 0
  std::uint64_t rx_coalesced = 0;  // --netdev: datagrams the kernel handed over several at once (UDP_GRO)
  std::uint64_t rx_not_ours = 0;        // --netdev: sent to an address that is not a GID
  std::uint64_t tx_packets = 0;         // handed to the stack (sent or waiting for ARP)
  std::uint64_t tx_arp_pending = 0;     // of which queued until ARP resolves
  std::uint64_t tx_unroutable = 0;
  std::uint64_t tx_too_big = 0;         // larger than the IP MTU: the path MTU is too large
  std::uint64_t tx_emit_errors = 0;
  std::uint64_t tx_queue_drops = 0;     // --netdev: every transmit slot and the backlog full
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

// What both kinds of RoCE port share: where verified packets go (the Nic, the GSI endpoint
// for QP 0 and 1, the observer) and the counters. A port implementation checks what it
// received as far as its medium lets it (the ICRC), then calls deliver(); it sends through
// transmit(). The engine, the verbs device and the CM see only verbs::PacketPort and
// rocev2::GsiLink, never which kind of port they run on.
class RoceEndpoint : public verbs::PacketPort, public rocev2::GsiLink {
 public:
  RoceEndpoint() = default;
  RoceEndpoint(const RoceEndpoint&) = delete;
  RoceEndpoint& operator=(const RoceEndpoint&) = delete;

  // Where verified packets go. The Nic needs this port to exist first, hence a setter;
  // nullptr detaches (packets are then counted and dropped).
  void attach(verbs::Nic* nic) { nic_ = nic; }
  // Where packets for QP 0 and 1 go (they never reach the Nic); nullptr detaches.
  void attach_gsi(rocev2::GsiEndpoint* gsi) { gsi_ = gsi; }
  // nullptr for none; must outlive the port or be reset first.
  void set_observer(TransportObserver* observer) { observer_ = observer; }

  void send(const rocev2::OutgoingPacket& packet, std::uint16_t udp_source_port, Instant now) override {
    transmit(packet, udp_source_port, now);
  }
  bool send_gsi(const rocev2::OutgoingPacket& packet, std::uint16_t udp_source_port, Instant now) override {
    return transmit(packet, udp_source_port, now);
  }

  const RocePortCounters& counters() const { return counters_; }
  std::vector<std::pair<std::string_view, std::uint64_t>> named_counters() const;

 protected:
  // `transport` (BTH to ICRC) passed its ICRC check: parsed, observed, handed on.
  void deliver(ByteSpan transport, const rocev2::PacketSource& from, Instant now);
  // True if the medium took the packet (sent, or waiting for ARP).
  virtual bool transmit(const rocev2::OutgoingPacket& packet, std::uint16_t udp_source_port, Instant now) = 0;
  // Counted and observed before it goes; nullopt (and counted) if the wire format refuses it.
  std::optional<rocev2::TransportPayload> checked_payload(const rocev2::OutgoingPacket& packet);

  RocePortCounters counters_;

 private:
  verbs::Nic* nic_ = nullptr;
  rocev2::GsiEndpoint* gsi_ = nullptr;
  TransportObserver* observer_ = nullptr;
};

// UDP 4791 of the vnic's own stack (a TAP vnic, `up --bridge`).
class RocePort final : public RoceEndpoint, public stack::UdpHandler {
 public:
  // Binds UDP 4791 on `interface` until destroyed.
  explicit RocePort(stack::Interface& interface);
  ~RocePort() override;

  void receive_udp(const stack::UdpDatagram& datagram, Instant now) override;
  std::size_t transmit_room() const override { return interface_.transmit_room(); }

 private:
  bool transmit(const rocev2::OutgoingPacket& packet, std::uint16_t udp_source_port, Instant now) override;

  stack::Interface& interface_;
};

}  // namespace rrdma::vnic
