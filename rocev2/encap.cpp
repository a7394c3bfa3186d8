#include "rocev2/encap.h"

#include <algorithm>
#include <cassert>

#include "rocev2/icrc.h"

namespace rrdma::rocev2 {

namespace {

constexpr std::size_t kIpv4At = stack::EthernetHeader::length();
constexpr std::size_t kUdpAt = kIpv4At + stack::Ipv4Header::length();
constexpr std::size_t kBthAt = kUdpAt + stack::UdpHeader::length();
constexpr std::size_t kMaxIpv4TotalLength = 0xFFFF;

std::size_t transport_length_for(const TransportPacket& p, std::size_t payload_length) {
  return header_length(p) + payload_length + pad_count_for(payload_length) + kIcrcLength;
}

}  // namespace

RoceHeaders roce_headers(stack::MacAddress source_mac, stack::MacAddress destination_mac,
                         stack::Ipv4Address source_ip, stack::Ipv4Address destination_ip,
                         std::uint16_t udp_source_port, std::uint16_t identification) {
  RoceHeaders h;
  h.ethernet = {.destination = destination_mac, .source = source_mac, .ethertype = stack::EtherType::ipv4};
  h.ipv4.source = source_ip;
  h.ipv4.destination = destination_ip;
  h.ipv4.protocol = stack::IpProtocol::udp;
  h.ipv4.identification = identification;
  h.ipv4.dont_fragment = true;
  h.ipv4.ttl = kRoceTtl;
  h.ipv4.dscp = 0;
  h.ipv4.ecn = 0;
  h.udp.source_port = udp_source_port;
  h.udp.destination_port = kRoceV2Port;
  return h;
}

std::size_t frame_length(const TransportPacket& p, std::size_t payload_length) {
  return kFrameHeadersLength + transport_length_for(p, payload_length);
}

std::size_t frame_payload_offset(const TransportPacket& p) { return kFrameHeadersLength + header_length(p); }

EmitError emit_frame_headers(const RoceHeaders& h, const TransportPacket& p, std::size_t payload_length,
                             MutableByteSpan out) {
  if (header_length(p) == 0) return EmitError::unknown_opcode;
  const std::size_t transport = transport_length_for(p, payload_length);
  if (stack::Ipv4Header::length() + stack::UdpHeader::length() + transport > kMaxIpv4TotalLength)
    return EmitError::too_long;
  if (out.size() < kFrameHeadersLength + transport) return EmitError::buffer_too_small;

  TransportPacket padded = p;
  padded.bth.pad_count = pad_count_for(payload_length);
  const EmitError e = emit_transport_headers(padded, payload_length, out.subspan(kBthAt));
  if (e != EmitError::none) return e;

  stack::UdpHeader udp = h.udp;
  udp.payload_length = static_cast<std::uint16_t>(transport);
  stack::Ipv4Header ipv4 = h.ipv4;
  ipv4.payload_length = static_cast<std::uint16_t>(udp.total_length());
  h.ethernet.emit(out);
  ipv4.emit(out.subspan(kIpv4At));
  udp.emit(out.subspan(kUdpAt));
  return EmitError::none;
}

bool seal_frame(MutableByteSpan frame) {
  const auto bth = BthView::check(ByteSpan(frame).subspan(std::min(kBthAt, frame.size())));
  if (!bth || frame.size() < kBthAt + kBthLength + bth->pad_count() + kIcrcLength) return false;
  const std::size_t icrc_at = frame.size() - kIcrcLength;
  std::fill(frame.begin() + static_cast<std::ptrdiff_t>(icrc_at - bth->pad_count()),
            frame.begin() + static_cast<std::ptrdiff_t>(icrc_at), std::uint8_t{0});
  const ByteSpan f(frame);
  const auto icrc = compute_icrc(f.subspan(kIpv4At, stack::Ipv4Header::length()),
                                 f.subspan(kUdpAt, stack::UdpHeader::length()),
                                 f.subspan(kBthAt, icrc_at - kBthAt));
  const auto bytes = icrc_bytes(*icrc);
  std::copy(bytes.begin(), bytes.end(), frame.begin() + static_cast<std::ptrdiff_t>(icrc_at));
  return true;
}

EmitError build_frame(const RoceHeaders& h, const TransportPacket& p, MutableByteSpan out) {
  const EmitError e = emit_frame_headers(h, p, p.payload.size(), out);
  if (e != EmitError::none) return e;
  std::copy(p.payload.begin(), p.payload.end(), out.begin() + static_cast<std::ptrdiff_t>(frame_payload_offset(p)));
  seal_frame(out.first(frame_length(p)));
  return EmitError::none;
}

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
