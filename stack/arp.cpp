#include "stack/arp.h"

#include <cassert>

namespace rrdma::stack {
namespace {

constexpr std::uint16_t hardware_ethernet = 1;  // RFC 826 ar$hrd; IANA "Ethernet (10Mb)"
constexpr std::uint16_t protocol_ipv4 = 0x0800;  // RFC 826 ar$pro is an EtherType

}  // namespace

ArpError ArpView::validate(ByteSpan packet) {
  if (packet.size() < packet_length) return ArpError::truncated;
  if (load_be16(packet, 0) != hardware_ethernet || load_be16(packet, 2) != protocol_ipv4 ||
      packet[4] != 6 || packet[5] != 4) {
    return ArpError::unsupported;
  }
  return ArpError::none;
}

std::optional<ArpView> ArpView::check(ByteSpan packet) {
  if (validate(packet) != ArpError::none) return std::nullopt;
  return ArpView(packet.first(packet_length));
}

MacAddress ArpView::sender_mac() const { return load_mac(bytes_, 8); }
MacAddress ArpView::target_mac() const { return load_mac(bytes_, 18); }

ArpPacket ArpPacket::parse(const ArpView& view) {
  return {view.operation(), view.sender_mac(), view.sender_ip(), view.target_mac(),
          view.target_ip()};
}

void ArpPacket::emit(MutableByteSpan out) const {
  assert(out.size() >= length());
  store_be16(out, 0, hardware_ethernet);
  store_be16(out, 2, protocol_ipv4);
  out[4] = 6;
  out[5] = 4;
  store_be16(out, 6, static_cast<std::uint16_t>(operation));
  store_mac(out, 8, sender_mac);
  store_be32(out, 14, sender_ip.value);
  store_mac(out, 18, target_mac);
  store_be32(out, 24, target_ip.value);
}

}  // namespace rrdma::stack
