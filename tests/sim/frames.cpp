#include "tests/sim/frames.h"

#include <algorithm>

#include "rocev2/encap.h"
#include "rocev2/opcode.h"
#include "rocev2/wire.h"

namespace rrdma::sim {

namespace {
// The IPv4 header's own length (IHL), for the UD GRH area; parse_frame checked it.
ByteSpan ipv4_header_of(ByteSpan frame) {
  const auto ip = frame.subspan(stack::EthernetHeader::length());
  return ip.first(std::size_t{ip[0] & 0x0Fu} * 4);
}
}  // namespace

Frame encode_frame(const rocev2::OutgoingPacket& out, const Endpoint& from, const Endpoint& to) {
  const auto& p = out.packet;
  const bool datagram = rocev2::opcode_info(p.bth.opcode).flags.has(rocev2::OpcodeFlags::kUd);
  const std::uint16_t port = datagram ? rocev2::udp_source_port_datagram(out.src_qpn)
                                      : rocev2::udp_source_port_connected(out.src_qpn, p.bth.dest_qp);
  const auto headers = rocev2::roce_headers(from.mac, to.mac, from.ip, out.dest, port);
  Frame frame(rocev2::frame_length(p));
  const auto error = rocev2::build_frame(headers, p, frame);
  // The engine must only ask for packets the wire layer can emit; an empty frame is dropped
  // by the receiver and shows up in its counters.
  if (error != rocev2::EmitError::none) frame.clear();
  return frame;
}

std::optional<DecodedFrame> decode_frame(const Frame& frame) {
  rocev2::RoceFrame parsed;
  if (!rocev2::parse_frame(frame, parsed).ok()) return std::nullopt;
  DecodedFrame d;
  d.packet = parsed.packet;
  d.source.ip = parsed.headers.ipv4.source;
  d.source.udp_source_port = parsed.headers.udp.source_port;
  d.source.ipv4_header = ipv4_header_of(frame);
  return d;
}

std::optional<DecodedFrame> decode_frame_unchecked(const Frame& frame) {
  constexpr std::size_t kIpv4Offset = stack::EthernetHeader::length();
  constexpr std::size_t kIpv4Length = 20;
  if (frame.size() < kBthOffsetInFrame + rocev2::kIcrcLength) return std::nullopt;
  DecodedFrame d;
  if (rocev2::parse_transport(ByteSpan(frame).subspan(kBthOffsetInFrame), d.packet) != rocev2::TransportError::none)
    return std::nullopt;
  d.source.ip = stack::Ipv4Address{load_be32(frame, kIpv4Offset + 12)};
  d.source.ipv4_header = ByteSpan(frame).subspan(kIpv4Offset, kIpv4Length);
  return d;
}

}  // namespace rrdma::sim
