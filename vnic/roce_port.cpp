#include "vnic/roce_port.h"

#include <array>

#include "rocev2/encap.h"
#include "rocev2/icrc.h"
#include "rocev2/opcode.h"
#include "rocev2/types.h"
#include "rocev2/wire.h"

namespace rrdma::vnic {
namespace {

// The longest header chain of any opcode: BTH 12 + AtomicETH 28 (the others are shorter).
constexpr std::size_t kMaxTransportHeaders = 64;

// Writes the ICRC as the last 4 bytes of the finished IPv4 packet: only now are the
// IPv4 header's identification, length and checksum final, and the ICRC covers the IPv4
// and UDP headers (with the variant fields masked, rocev2/icrc.h).
class IcrcFinalizer final : public stack::PacketFinalizer {
 public:
  void finalize(MutableByteSpan ip_packet) override {
    if (ip_packet.empty()) return;
    const std::size_t ihl = static_cast<std::size_t>(ip_packet[0] & 0x0F) * 4;
    const std::size_t headers = ihl + rocev2::IcrcCalculator::kUdpHeaderLength;
    if (ip_packet.size() < headers + rocev2::kIcrcLength) return;
    const ByteSpan all(ip_packet.data(), ip_packet.size());
    const auto icrc = rocev2::compute_icrc(all.subspan(0, ihl), all.subspan(ihl, rocev2::IcrcCalculator::kUdpHeaderLength),
                                           all.subspan(headers, ip_packet.size() - headers - rocev2::kIcrcLength));
    if (!icrc) return;
    const auto bytes = rocev2::icrc_bytes(*icrc);
    std::copy(bytes.begin(), bytes.end(), ip_packet.end() - rocev2::kIcrcLength);
  }
};

// The transport headers and the payload, written where the stack builds the frame.
class TransportWriter final : public stack::PayloadWriter {
 public:
  explicit TransportWriter(const rocev2::TransportPacket& packet) : packet_(packet) {}
  void write(MutableByteSpan payload) override { error_ = rocev2::emit_transport(packet_, payload); }
  rocev2::EmitError error() const { return error_; }

 private:
  const rocev2::TransportPacket& packet_;
  rocev2::EmitError error_ = rocev2::EmitError::none;
};

}  // namespace

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
  rocev2::TransportPacket packet;
  if (rocev2::parse_transport(datagram.payload, packet) != rocev2::TransportError::none) {
    ++counters_.rx_bad_transport;
    return;
  }
  if (observer_ != nullptr) observer_->on_transport(false, packet, packet.bth.dest_qp, datagram.ip.source);
  if (nic_ == nullptr) {
    ++counters_.rx_no_device;
    return;
  }
  nic_->receive(packet, rocev2::PacketSource{datagram.ip.source, datagram.source_port, datagram.ip_header}, now);
}

void RocePort::send(const rocev2::OutgoingPacket& out, std::uint16_t udp_source_port, Instant now) {
  // The engine leaves the BTH's pad count to the wire layer (as encap.h's
  // emit_frame_headers sets it); emit_transport refuses a pad count that does not match.
  rocev2::TransportPacket packet = out.packet;
  packet.bth.pad_count = rocev2::pad_count_for(packet.payload.size());
  // The headers are checked before the stack builds anything: a packet the wire format
  // refuses (an engine bug) is counted and never sent.
  std::array<std::uint8_t, kMaxTransportHeaders> headers{};
  if (rocev2::header_length(packet) > headers.size() ||
      rocev2::emit_transport_headers(packet, MutableByteSpan(headers)) != rocev2::EmitError::none) {
    ++counters_.tx_emit_errors;
    return;
  }
  const std::size_t length = rocev2::transport_length(packet);
  TransportWriter writer(packet);
  stack::UdpSend request;
  request.destination = out.dest;
  request.source_port = udp_source_port;
  request.destination_port = rocev2::kRoceV2Port;
  request.payload_writer = &writer;
  request.payload_length = length - rocev2::kIcrcLength;
  request.trailer_length = rocev2::kIcrcLength;
  request.compute_checksum = false;  // RoCE v2 sends UDP checksum 0: the ICRC covers it
  request.ttl = rocev2::kRoceTtl;
  IcrcFinalizer finalizer;
  // Before the stack sends it: a trace then knows the QP of the frame that comes out.
  if (observer_ != nullptr) observer_->on_transport(true, packet, out.src_qpn, out.dest);
  const stack::SendResult result = interface_.send_udp(request, now, &finalizer);
  // The headers passed the check above, so the writer cannot fail; counted all the same.
  if (writer.error() != rocev2::EmitError::none) ++counters_.tx_emit_errors;
  switch (result) {
    case stack::SendResult::sent: ++counters_.tx_packets; break;
    case stack::SendResult::queued:
      ++counters_.tx_packets;
      ++counters_.tx_arp_pending;
      break;
    case stack::SendResult::unroutable: ++counters_.tx_unroutable; break;
    case stack::SendResult::too_big: ++counters_.tx_too_big; break;
  }
}

std::vector<std::pair<std::string_view, std::uint64_t>> RocePort::named_counters() const {
  const RocePortCounters& c = counters_;
  return {{"rx_packets", c.rx_packets},     {"rx_bad_icrc", c.rx_bad_icrc},
          {"rx_bad_transport", c.rx_bad_transport}, {"rx_malformed", c.rx_malformed},
          {"rx_no_device", c.rx_no_device}, {"tx_packets", c.tx_packets},
          {"tx_arp_pending", c.tx_arp_pending}, {"tx_unroutable", c.tx_unroutable},
          {"tx_too_big", c.tx_too_big},     {"tx_emit_errors", c.tx_emit_errors}};
}

}  // namespace rrdma::vnic
