#include "stack/ipv4.h"

#include <cassert>

#include "stack/checksum.h"

namespace rrdma::stack {

Ipv4Error Ipv4View::validate(ByteSpan packet) {
  if (packet.size() < min_header_length) return Ipv4Error::truncated;
  if ((packet[0] >> 4) != 4) return Ipv4Error::bad_version;
  const std::size_t header_length = std::size_t{packet[0] & 0x0fu} * 4;
  if (header_length < min_header_length || header_length > packet.size()) {
    return Ipv4Error::bad_ihl;
  }
  // The buffer may be longer than the packet (Ethernet pads to 60 bytes), never shorter.
  const std::size_t total_length = load_be16(packet, 2);
  if (total_length < header_length || total_length > packet.size()) {
    return Ipv4Error::bad_length;
  }
  return Ipv4Error::none;
}

std::optional<Ipv4View> Ipv4View::check(ByteSpan packet) {
  if (validate(packet) != Ipv4Error::none) return std::nullopt;
  return Ipv4View(packet.first(load_be16(packet, 2)));
}

bool Ipv4View::header_checksum_valid() const {
  // Summing the header with its checksum gives all ones, whose complement is 0 (RFC 1071).
  return internet_checksum(header()) == 0;
}

Ipv4Header Ipv4Header::parse(const Ipv4View& view) {
  Ipv4Header header;
  header.source = view.source();
  header.destination = view.destination();
  header.protocol = view.protocol();
  header.payload_length = static_cast<std::uint16_t>(view.payload().size());
  header.identification = view.identification();
  header.dont_fragment = view.dont_fragment();
  header.more_fragments = view.more_fragments();
  header.fragment_offset = view.fragment_offset();
  header.ttl = view.ttl();
  header.dscp = view.dscp();
  header.ecn = view.ecn();
  return header;
}

void Ipv4Header::emit(MutableByteSpan out) const {
  assert(out.size() >= length());
  assert(total_length() <= 0xffff);
  out[0] = 0x45;  // version 4, IHL 5: we never emit options
  out[1] = static_cast<std::uint8_t>((dscp << 2) | (ecn & 0x03));
  store_be16(out, 2, static_cast<std::uint16_t>(total_length()));
  store_be16(out, 4, identification);
  const std::uint16_t flags = static_cast<std::uint16_t>((dont_fragment ? 0x4000 : 0) |
                                                         (more_fragments ? 0x2000 : 0));
  store_be16(out, 6, static_cast<std::uint16_t>(flags | (fragment_offset & 0x1fff)));
  out[8] = ttl;
  out[9] = static_cast<std::uint8_t>(protocol);
  store_be16(out, 10, 0);
  store_be32(out, 12, source.value);
  store_be32(out, 16, destination.value);
  store_be16(out, 10, internet_checksum(out.first(length())));
}

}  // namespace rrdma::stack
