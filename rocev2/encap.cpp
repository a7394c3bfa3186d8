#include "rocev2/encap.h"

#include "rocev2/icrc.h"

namespace rrdma::rocev2 {

namespace {

constexpr std::size_t kIpv4At = stack::EthernetHeader::length();
constexpr std::size_t kMaxIpv4TotalLength = 0xFFFF;

}  // namespace

RoceHeaders roce_headers(stack::MacAddress source_mac, stack::MacAddress destination_mac,
                         stack::Ipv4Address source_ip, stack::Ipv4Address destination_ip,
                         std::uint16_t udp_source_port, std::uint16_t identification,
                         std::uint8_t traffic_class) {
  RoceHeaders h;
  h.ethernet = {.destination = destination_mac, .source = source_mac, .ethertype = stack::EtherType::ipv4};
  h.ipv4.source = source_ip;
  h.ipv4.destination = destination_ip;
  h.ipv4.protocol = stack::IpProtocol::udp;
  h.ipv4.identification = identification;
  h.ipv4.dont_fragment = true;
  h.ipv4.ttl = kRoceTtl;
  const Ipv4Tos tos = ipv4_tos(traffic_class);
  h.ipv4.dscp = tos.dscp;
  h.ipv4.ecn = tos.ecn;
  h.udp.source_port = udp_source_port;
  h.udp.destination_port = kRoceV2Port;
  return h;
}

TransportPayload::TransportPayload(const TransportPacket& packet) : packet_(packet) {
  packet_.bth.pad_count = pad_count_for(packet_.payload.size());
  error_ = check_transport(packet_);
}

void IcrcFinalizer::finalize(MutableByteSpan ip_packet) { seal_icrc(ip_packet); }

std::size_t frame_length(const TransportPacket& p) { return kFrameHeadersLength + transport_length(p); }

EmitError build_frame(const RoceHeaders& h, const TransportPacket& p, MutableByteSpan out) {
  TransportPayload payload(p);
  if (payload.error() != EmitError::none) return payload.error();
  const std::size_t transport = transport_length(payload.packet());
  if (stack::Ipv4Header::length() + stack::UdpHeader::length() + transport > kMaxIpv4TotalLength)
    return EmitError::too_long;
  if (out.size() < kFrameHeadersLength + transport) return EmitError::buffer_too_small;

  stack::UdpHeader udp = h.udp;
  udp.payload_length = static_cast<std::uint16_t>(transport);
  stack::Ipv4Header ipv4 = h.ipv4;
  ipv4.payload_length = static_cast<std::uint16_t>(udp.total_length());
  h.ethernet.emit(out);
  IcrcFinalizer icrc;
  stack::emit_udp_packet(ipv4, udp, payload, kIcrcLength, &icrc, /*compute_checksum=*/false,
                         out.subspan(kIpv4At, ipv4.total_length()));
  return EmitError::none;
}

bool seal_frame(MutableByteSpan frame) { return frame.size() >= kIpv4At && seal_icrc(frame.subspan(kIpv4At)); }

std::string_view to_string(FrameError e) {
  switch (e) {
    case FrameError::none: return "none";
    case FrameError::not_ipv4: return "not IPv4";
    case FrameError::bad_ipv4: return "bad IPv4 header";
    case FrameError::bad_ipv4_checksum: return "bad IPv4 header checksum";
    case FrameError::ipv4_fragment: return "IPv4 fragment";
    case FrameError::not_udp: return "not UDP";
    case FrameError::bad_udp: return "bad UDP header";
    case FrameError::not_roce_port: return "not UDP port 4791";
    case FrameError::bad_transport: return "bad transport header";
    case FrameError::bad_icrc: return "bad ICRC";
  }
  return "?";
}

RoceFrameCheck parse_frame(ByteSpan frame, RoceFrame& out) {
  const auto eth = stack::EthernetView::check(frame);
  if (!eth || eth->ethertype() != stack::EtherType::ipv4) return {FrameError::not_ipv4};
  const auto ip = stack::Ipv4View::check(eth->payload());
  if (!ip) return {FrameError::bad_ipv4};
  if (!ip->header_checksum_valid()) return {FrameError::bad_ipv4_checksum};
  if (ip->is_fragment()) return {FrameError::ipv4_fragment};
  if (ip->protocol() != stack::IpProtocol::udp) return {FrameError::not_udp};
  const auto udp = stack::UdpView::check(ip->payload());
  if (!udp) return {FrameError::bad_udp};
  if (udp->destination_port() != kRoceV2Port) return {FrameError::not_roce_port};

  // The ICRC first, so that a corrupted packet is counted as corrupted rather than as
  // whatever its damaged opcode happens to say.
  const ByteSpan transport = udp->payload();
  if (transport.size() < kBthLength + kIcrcLength) return {FrameError::bad_transport, TransportError::truncated};
  const auto icrc = compute_icrc(ip->header(), udp->header(), transport.first(transport.size() - kIcrcLength));
  out.icrc = load_icrc(transport.last(kIcrcLength));
  if (!icrc || *icrc != out.icrc) return {FrameError::bad_icrc};

  const TransportError te = parse_transport(transport, out.packet);
  if (te != TransportError::none) return {FrameError::bad_transport, te};
  out.headers.ethernet = stack::EthernetHeader::parse(*eth);
  out.headers.ipv4 = stack::Ipv4Header::parse(*ip);
  out.headers.udp = stack::UdpHeader::parse(*udp);
  out.ipv4_header = ip->header();
  return {};
}

}  // namespace rrdma::rocev2
