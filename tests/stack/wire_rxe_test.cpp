// Ethernet, IPv4 and UDP views and values over the rdma_rxe captures in tests/data/:
// deconstruct (accessors over real bytes), construct (emit a value, compare to real
// bytes), then parse + emit of every frame of every capture.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "stack/ethernet.h"
#include "stack/ipv4.h"
#include "stack/udp.h"
#include "tests/capture_file.h"

namespace rrdma::stack {
namespace {

const std::vector<std::string> rxe_captures = {
    "rxe_rc_pingpong.pcapng", "rxe_uc_pingpong.pcapng", "rxe_ud_pingpong.pcapng",
    "rxe_send_bw.pcapng",     "rxe_write_bw.pcapng",    "rxe_read_bw.pcapng",
    "rxe_atomic_bw.pcapng",   "rxe_cas.pcapng",         "rxe_write_loss.pcapng",
};

const MacAddress host_a{{0x52, 0x54, 0x00, 0x00, 0x00, 0x02}};
const MacAddress host_b{{0x52, 0x54, 0x00, 0x00, 0x00, 0x03}};
const Ipv4Address ip_a{0x0a4d0002};  // 10.77.0.2
const Ipv4Address ip_b{0x0a4d0003};  // 10.77.0.3

// The first frame of rxe_rc_pingpong: B sends a SEND_FIRST to A (see tshark -x).
test::Frame first_rc_frame() { return test::read_capture(test::data_path("rxe_rc_pingpong.pcapng")).at(0); }

}  // namespace

TEST_CASE("Ethernet view deconstructs a captured rxe frame", "[ethernet][capture]") {
  const test::Frame frame = first_rc_frame();
  const auto view = EthernetView::check(frame);
  REQUIRE(view);
  CHECK(view->destination() == host_a);
  CHECK(view->source() == host_b);
  CHECK(view->ethertype() == EtherType::ipv4);
  CHECK(view->payload().size() == frame.size() - 14);
  CHECK(view->payload()[0] == 0x45);
}

TEST_CASE("IPv4 view deconstructs a captured rxe packet", "[ipv4][capture]") {
  const test::Frame frame = first_rc_frame();
  const auto view = Ipv4View::check(ByteSpan(frame).subspan(14));
  REQUIRE(view);
  CHECK(view->version() == 4);
  CHECK(view->header_length() == 20);
  CHECK(view->dscp() == 0);
  CHECK(view->ecn() == 0);
  CHECK(view->total_length() == 0x042c);
  CHECK(view->identification() == 0x5c68);
  CHECK(view->dont_fragment());
  CHECK_FALSE(view->more_fragments());
  CHECK(view->fragment_offset() == 0);
  CHECK(view->ttl() == 64);
  CHECK(view->protocol() == IpProtocol::udp);
  CHECK(view->header_checksum() == 0xc5ba);
  CHECK(view->header_checksum_valid());
  CHECK(view->source() == ip_b);
  CHECK(view->destination() == ip_a);
  CHECK(view->options().empty());
  CHECK(view->payload().size() == 0x042c - 20);
}

TEST_CASE("UDP view deconstructs a captured rxe datagram", "[udp][capture]") {
  const test::Frame frame = first_rc_frame();
  const auto view = UdpView::check(ByteSpan(frame).subspan(34));
  REQUIRE(view);
  CHECK(view->source_port() == 49441);
  CHECK(view->destination_port() == 4791);
  CHECK(view->length() == 0x0418);
  CHECK(view->checksum() == 0);
  CHECK(view->checksum_valid(ip_b, ip_a));
  CHECK(view->payload().size() == 0x0418 - 8);
  CHECK(view->payload()[0] == 0x00);  // BTH opcode: RC SEND_FIRST
}

TEST_CASE("Ethernet, IPv4 and UDP values emit the captured header bytes", "[capture]") {
  const test::Frame frame = first_rc_frame();
  std::vector<std::uint8_t> out(42, 0xee);
  EthernetHeader{host_a, host_b, EtherType::ipv4}.emit(out);
  Ipv4Header ip;
  ip.source = ip_b;
  ip.destination = ip_a;
  ip.protocol = IpProtocol::udp;
  ip.payload_length = 0x042c - 20;
  ip.identification = 0x5c68;
  ip.dont_fragment = true;
  ip.ttl = 64;
  ip.emit(MutableByteSpan(out).subspan(14));
  UdpHeader{49441, 4791, 0x0418 - 8}.emit(MutableByteSpan(out).subspan(34));
  CHECK(std::equal(out.begin(), out.end(), frame.begin()));
}

TEST_CASE("Every rxe frame parses and re-emits to the same header bytes", "[capture]") {
  for (const std::string& name : rxe_captures) {
    INFO(name);
    const auto frames = test::read_capture(test::data_path(name));
    REQUIRE_FALSE(frames.empty());
    for (std::size_t i = 0; i < frames.size(); ++i) {
      INFO("frame " << i);
      const ByteSpan frame = frames[i];
      const auto ethernet = EthernetView::check(frame);
      REQUIRE(ethernet);
      REQUIRE(ethernet->ethertype() == EtherType::ipv4);
      const auto ip = Ipv4View::check(ethernet->payload());
      REQUIRE(ip);
      REQUIRE(ip->header_checksum_valid());
      REQUIRE(ip->protocol() == IpProtocol::udp);
      const auto udp = UdpView::check(ip->payload());
      REQUIRE(udp);
      REQUIRE(udp->destination_port() == 4791);
      REQUIRE(udp->checksum_valid(ip->source(), ip->destination()));

      std::vector<std::uint8_t> out(42);
      EthernetHeader::parse(*ethernet).emit(out);
      Ipv4Header::parse(*ip).emit(MutableByteSpan(out).subspan(14));
      UdpHeader::parse(*udp).emit(MutableByteSpan(out).subspan(34));
      REQUIRE(std::equal(out.begin(), out.end(), frame.begin()));
    }
  }
}

TEST_CASE("UDP checksum: fill then verify, 0 sent as 0xffff", "[udp]") {
  // A datagram over a captured rxe payload, with the checksum computed (rxe sends 0).
  const test::Frame frame = first_rc_frame();
  std::vector<std::uint8_t> datagram(frame.begin() + 34, frame.end());
  UdpHeader::fill_checksum(datagram, ip_b, ip_a);
  const auto view = UdpView::check(datagram);
  REQUIRE(view);
  CHECK(view->checksum() != 0);
  CHECK(view->checksum_valid(ip_b, ip_a));
  CHECK_FALSE(view->checksum_valid(ip_a, Ipv4Address{0x0a4d0004}));
  datagram.back() ^= 0x01;
  CHECK_FALSE(UdpView::check(datagram)->checksum_valid(ip_b, ip_a));

  // Find a 2-byte payload whose computed checksum is 0: it must go out as 0xffff.
  std::vector<std::uint8_t> small(10, 0);
  UdpHeader{1, 2, 2}.emit(small);
  UdpHeader::fill_checksum(small, ip_a, ip_b);
  const std::uint16_t first = load_be16(small, 6);
  // Adding the checksum value as payload makes the sum all ones, so the checksum is 0.
  store_be16(small, 8, first);
  UdpHeader::fill_checksum(small, ip_a, ip_b);
  CHECK(load_be16(small, 6) == 0xffff);
  CHECK(UdpView::check(small)->checksum_valid(ip_a, ip_b));
}

}  // namespace rrdma::stack
