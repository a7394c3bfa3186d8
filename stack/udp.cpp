#include "stack/udp.h"

#include <algorithm>
#include <cassert>

#include "stack/checksum.h"
#include "stack/ipv4.h"

namespace rrdma::stack {
namespace {

std::uint16_t datagram_checksum(ByteSpan datagram, Ipv4Address source,
                                Ipv4Address destination) {
  InternetChecksum sum;
  add_pseudo_header(sum, source, destination, static_cast<std::uint8_t>(IpProtocol::udp),
                    static_cast<std::uint16_t>(datagram.size()));
  sum.add(datagram);
  return sum.finish();
}

}  // namespace

UdpError UdpView::validate(ByteSpan datagram) {
  if (datagram.size() < header_length) return UdpError::truncated;
  const std::size_t length = load_be16(datagram, 4);
  if (length < header_length || length > datagram.size()) return UdpError::bad_length;
  return UdpError::none;
}

std::optional<UdpView> UdpView::check(ByteSpan datagram) {
  if (validate(datagram) != UdpError::none) return std::nullopt;
  return UdpView(datagram.first(load_be16(datagram, 4)));
}

bool UdpView::checksum_valid(Ipv4Address source, Ipv4Address destination) const {
  if (checksum() == 0) return true;
  return datagram_checksum(bytes_, source, destination) == 0;
}

UdpHeader UdpHeader::parse(const UdpView& view) {
  return {view.source_port(), view.destination_port(),
          static_cast<std::uint16_t>(view.payload().size())};
}

void UdpHeader::emit(MutableByteSpan out) const {
  assert(out.size() >= length());
  assert(total_length() <= 0xffff);
  store_be16(out, 0, source_port);
  store_be16(out, 2, destination_port);
  store_be16(out, 4, static_cast<std::uint16_t>(total_length()));
  store_be16(out, 6, 0);
}

void UdpHeader::fill_checksum(MutableByteSpan datagram, Ipv4Address source,
                              Ipv4Address destination) {
  store_be16(datagram, 6, 0);
  const std::uint16_t checksum = datagram_checksum(datagram, source, destination);
  // 0 on the wire means "no checksum", so a computed 0 is sent as its other
  // one's-complement form, all ones (RFC 768).
  store_be16(datagram, 6, checksum == 0 ? 0xffff : checksum);
}

void emit_udp_packet(const Ipv4Header& ip, const UdpHeader& udp, PayloadWriter& payload, std::size_t trailer_length,
                     PacketFinalizer* finalizer, bool compute_checksum, MutableByteSpan ip_packet) {
  assert(ip.payload_length == udp.total_length() && ip_packet.size() == ip.total_length());
  assert(trailer_length <= udp.payload_length);
  ip.emit(ip_packet);
  const MutableByteSpan datagram = ip_packet.subspan(Ipv4Header::length());
  udp.emit(datagram);
  payload.write(datagram.subspan(UdpHeader::length(), udp.payload_length - trailer_length));
  // The trailer starts out zero, as in a fresh frame, whatever the buffer held before.
  std::fill(datagram.end() - static_cast<std::ptrdiff_t>(trailer_length), datagram.end(), std::uint8_t{0});
  if (finalizer) finalizer->finalize(ip_packet);
  if (compute_checksum) UdpHeader::fill_checksum(datagram, ip.source, ip.destination);
}

}  // namespace rrdma::stack
