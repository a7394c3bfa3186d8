#include "vnic/ports/roce_port.h"

#include "rocev2/encap.h"
#include "rocev2/icrc.h"
#include "rocev2/types.h"
#include "rocev2/wire.h"

namespace rrdma::vnic {

void RoceEndpoint::deliver(ByteSpan transport, const rocev2::PacketSource& from, Instant now) {
  rocev2::TransportPacket packet;
  if (rocev2::parse_transport(transport, packet) != rocev2::TransportError::none) {
    ++counters_.rx_bad_transport;
    return;
  }
  if (observer_ != nullptr) observer_->on_transport(false, packet, packet.bth.dest_qp, from.ip);
  // QP 0 and 1 are not the engine's (its QPNs start at 17): management datagrams.
  if (rocev2::is_management_qp(packet.bth.dest_qp)) {
    if (gsi_ == nullptr) {
      ++counters_.rx_no_device;
      return;
    }
    gsi_->receive(packet, from, now);
    return;
  }
  if (nic_ == nullptr) {
    ++counters_.rx_no_device;
    return;
  }
  nic_->receive(packet, from, now);
}

// Checked before the medium starts a frame or datagram: a packet the wire format refuses (an
// engine bug) is counted and never sent. Observed before it goes, so that a trace knows the
// QP of what comes out.
std::optional<rocev2::TransportPayload> RoceEndpoint::checked_payload(const rocev2::OutgoingPacket& out) {
  rocev2::TransportPayload payload(out.packet);
  if (payload.error() != rocev2::EmitError::none) {
    ++counters_.tx_emit_errors;
    return std::nullopt;
  }
  if (observer_ != nullptr) observer_->on_transport(true, payload.packet(), out.src_qpn, out.dest);
  return payload;
}

std::vector<std::pair<std::string_view, std::uint64_t>> RoceEndpoint::named_counters() const {
  const RocePortCounters& c = counters_;
  return {{"rx_packets", c.rx_packets},     {"rx_bad_icrc", c.rx_bad_icrc},
          {"rx_bad_transport", c.rx_bad_transport}, {"rx_malformed", c.rx_malformed},
          {"rx_no_device", c.rx_no_device}, {"rx_icrc_id_recovered", c.rx_icrc_id_recovered},
          {"rx_coalesced", c.rx_coalesced},
          {"rx_not_ours", c.rx_not_ours},   {"tx_packets", c.tx_packets},
          {"tx_arp_pending", c.tx_arp_pending}, {"tx_unroutable", c.tx_unroutable},
          {"tx_too_big", c.tx_too_big},     {"tx_emit_errors", c.tx_emit_errors},
          {"tx_queue_drops", c.tx_queue_drops}};
}

RocePort::RocePort(stack::Interface& interface) : interface_(interface) {
  interface_.bind_udp(rocev2::kRoceV2Port, *this);
}

RocePort::~RocePort() { interface_.unbind_udp(rocev2::kRoceV2Port); }

void RocePort::receive_udp(const stack::UdpDatagram& datagram, Instant now) {
  ++counters_.rx_packets;
  // The stack's spans all point into the one received frame; the ICRC needs them as one
  // IPv4 packet (which ends where the UDP datagram ends).
  const std::uint8_t* start = datagram.ip_header.data();
  if (datagram.ip_header.data() + datagram.ip_header.size() != datagram.udp_header.data() ||
      datagram.udp_header.data() + datagram.udp_header.size() != datagram.payload.data()) {
    ++counters_.rx_malformed;
    return;
  }
  const ByteSpan ipv4_packet(start, datagram.ip_header.size() + datagram.udp_header.size() + datagram.payload.size());
  switch (rocev2::verify_icrc(ipv4_packet)) {
    case rocev2::IcrcError::none: break;
    case rocev2::IcrcError::truncated: ++counters_.rx_malformed; return;
    case rocev2::IcrcError::mismatch: ++counters_.rx_bad_icrc; return;
  }
  deliver(datagram.payload, rocev2::PacketSource{datagram.ip.source, datagram.source_port, datagram.ip_header}, now);
}

bool RocePort::transmit(const rocev2::OutgoingPacket& out, std::uint16_t udp_source_port, Instant now) {
  std::optional<rocev2::TransportPayload> payload = checked_payload(out);
  if (!payload) return false;
  stack::UdpSend request;
  request.destination = out.dest;
  request.source_port = udp_source_port;
  request.destination_port = rocev2::kRoceV2Port;
  request.payload_writer = &*payload;
  request.payload_length = payload->length();
  request.trailer_length = rocev2::kIcrcLength;
  request.compute_checksum = false;  // RoCE v2 sends UDP checksum 0: the ICRC covers it
  request.ttl = rocev2::kRoceTtl;
  request.dscp = rocev2::ipv4_tos(out.traffic_class).dscp;
  request.ecn = rocev2::ipv4_tos(out.traffic_class).ecn;
  rocev2::IcrcFinalizer finalizer;
  const stack::SendResult result = interface_.send_udp(request, now, &finalizer);
  switch (result) {
    case stack::SendResult::sent: ++counters_.tx_packets; return true;
    case stack::SendResult::queued:
      ++counters_.tx_packets;
      ++counters_.tx_arp_pending;
      return true;
    case stack::SendResult::unroutable: ++counters_.tx_unroutable; return false;
    case stack::SendResult::too_big: ++counters_.tx_too_big; return false;
  }
  return false;
}

}  // namespace rrdma::vnic
