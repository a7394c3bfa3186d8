// IPv4 options are parsed past, never emitted; UDP trailing bytes and Ethernet padding
// are not payload. Built from a captured rxe packet with an option inserted.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "stack/checksum.h"
#include "stack/ipv4.h"
#include "stack/udp.h"
#include "tests/capture_file.h"

namespace rrdma::stack {

TEST_CASE("IPv4 with options: the view skips them, the value drops them", "[ipv4]") {
  const test::Frame frame = test::read_capture(test::data_path("rxe_ud_pingpong.pcapng")).at(0);
  const ByteSpan original = ByteSpan(frame).subspan(14);
  const auto plain = Ipv4View::check(original);
  REQUIRE(plain);

  // Insert 4 bytes of options (Router Alert, RFC 2113: 94 04 00 00) after the 20 bytes.
  std::vector<std::uint8_t> packet(original.begin(), original.begin() + 20);
  const std::uint8_t router_alert[] = {0x94, 0x04, 0x00, 0x00};
  packet.insert(packet.end(), std::begin(router_alert), std::end(router_alert));
  packet.insert(packet.end(), plain->payload().begin(), plain->payload().end());
  packet.push_back(0xee);  // one byte of junk after the packet (Ethernet padding)
  packet[0] = 0x46;
  store_be16(packet, 2, static_cast<std::uint16_t>(plain->total_length() + 4));
  store_be16(packet, 10, 0);
  store_be16(packet, 10, internet_checksum(ByteSpan(packet).first(24)));

  const auto view = Ipv4View::check(packet);
  REQUIRE(view);
  CHECK(view->header_length() == 24);
  CHECK(view->header_checksum_valid());
  CHECK(std::equal(view->options().begin(), view->options().end(), std::begin(router_alert)));
  CHECK(view->payload().size() == plain->payload().size());
  CHECK(std::equal(view->payload().begin(), view->payload().end(), plain->payload().begin()));
  CHECK(view->bytes().size() == packet.size() - 1);  // padding cut off

  // Parsed and emitted, it is the option-less header of the original packet.
  const Ipv4Header header = Ipv4Header::parse(*view);
  CHECK(header == Ipv4Header::parse(*plain));
  std::vector<std::uint8_t> out(Ipv4Header::length());
  header.emit(out);
  CHECK(std::equal(out.begin(), out.end(), original.begin()));

  const auto udp = UdpView::check(view->payload());
  REQUIRE(udp);
  CHECK(udp->destination_port() == 4791);
}

TEST_CASE("IPv4 and UDP validation name the first broken rule", "[ipv4][udp]") {
  std::vector<std::uint8_t> packet(28, 0);
  CHECK(Ipv4View::validate(ByteSpan(packet).first(19)) == Ipv4Error::truncated);
  packet[0] = 0x55;
  CHECK(Ipv4View::validate(packet) == Ipv4Error::bad_version);
  packet[0] = 0x48;  // 32-byte header in 28 bytes
  CHECK(Ipv4View::validate(packet) == Ipv4Error::bad_ihl);
  packet[0] = 0x45;
  store_be16(packet, 2, 29);
  CHECK(Ipv4View::validate(packet) == Ipv4Error::bad_length);
  store_be16(packet, 2, 28);
  CHECK(Ipv4View::validate(packet) == Ipv4Error::none);

  std::vector<std::uint8_t> datagram(8, 0);
  CHECK(UdpView::validate(ByteSpan(datagram).first(7)) == UdpError::truncated);
  store_be16(datagram, 4, 9);
  CHECK(UdpView::validate(datagram) == UdpError::bad_length);
  store_be16(datagram, 4, 8);
  CHECK(UdpView::validate(datagram) == UdpError::none);
  CHECK(UdpView::check(datagram)->payload().empty());
}

}  // namespace rrdma::stack
