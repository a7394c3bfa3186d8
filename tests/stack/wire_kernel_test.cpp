// ARP and ICMP views and values over frames the Linux kernel itself sent, captured on a
// veth pair (tests/data/kernel_arp_icmp.pcapng, see CAPTURES.md). Frames, in order:
// 0 ARP request, 1 ARP reply, 2/3 echo request/reply (56 bytes), 4/5 echo request/reply
// (1400 bytes), 6 UDP to closed port 9999, 7 ICMP port unreachable, 8 gratuitous ARP
// (RFC 5227 announcement) after the answering host changed its MAC.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "stack/arp.h"
#include "stack/ethernet.h"
#include "stack/icmp.h"
#include "stack/ipv4.h"
#include "stack/udp.h"
#include "tests/capture_file.h"

namespace rrdma::stack {
namespace {

const MacAddress mac_a{{0x02, 0x00, 0x00, 0x99, 0x00, 0x01}};
const MacAddress mac_b{{0x02, 0x00, 0x00, 0x99, 0x00, 0x02}};
const Ipv4Address ip_a{0x0a630001};  // 10.99.0.1, the host that answers
const Ipv4Address ip_b{0x0a630002};  // 10.99.0.2, the host that asks

const std::vector<test::Frame>& frames() {
  static const auto all = test::read_capture(test::data_path("kernel_arp_icmp.pcapng"));
  return all;
}

ByteSpan frame(std::size_t i) { return frames().at(i); }
ByteSpan ip_packet(std::size_t i) { return frame(i).subspan(EthernetView::header_length); }
ByteSpan icmp_message(std::size_t i) { return Ipv4View::check(ip_packet(i))->payload(); }

bool same_bytes(ByteSpan a, ByteSpan b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }

}  // namespace

TEST_CASE("the kernel capture holds the expected frames", "[capture]") {
  REQUIRE(frames().size() == 9);
  CHECK(EthernetView::check(frame(0))->ethertype() == EtherType::arp);
  CHECK(EthernetView::check(frame(0))->destination().is_broadcast());
  CHECK(EthernetView::check(frame(2))->ethertype() == EtherType::ipv4);
}

TEST_CASE("ARP request from the kernel: deconstruct, parse, emit", "[arp][capture]") {
  const auto view = ArpView::check(EthernetView::check(frame(0))->payload());
  REQUIRE(view);
  CHECK(view->hardware_type() == 1);
  CHECK(view->protocol_type() == 0x0800);
  CHECK(view->hardware_length() == 6);
  CHECK(view->protocol_length() == 4);
  CHECK(view->operation() == ArpOperation::request);
  CHECK(view->sender_mac() == mac_b);
  CHECK(view->sender_ip() == ip_b);
  CHECK(view->target_mac() == MacAddress{});
  CHECK(view->target_ip() == ip_a);

  const ArpPacket packet = ArpPacket::parse(*view);
  CHECK(packet == ArpPacket{ArpOperation::request, mac_b, ip_b, MacAddress{}, ip_a});
  std::vector<std::uint8_t> out(ArpPacket::length());
  packet.emit(out);
  CHECK(same_bytes(out, view->bytes()));
}

TEST_CASE("ARP reply from the kernel: construct the same bytes", "[arp][capture]") {
  std::vector<std::uint8_t> out(EthernetHeader::length() + ArpPacket::length());
  EthernetHeader{mac_b, mac_a, EtherType::arp}.emit(out);
  ArpPacket{ArpOperation::reply, mac_a, ip_a, mac_b, ip_b}.emit(MutableByteSpan(out).subspan(14));
  CHECK(same_bytes(out, frame(1)));
  CHECK(ArpPacket::parse(*ArpView::check(ByteSpan(out).subspan(14))).operation == ArpOperation::reply);
}

TEST_CASE("gratuitous ARP from the kernel: an announcement is a request for our own address",
          "[arp][capture]") {
  const MacAddress new_mac{{0x02, 0x00, 0x00, 0x99, 0x00, 0x11}};
  std::vector<std::uint8_t> out(EthernetHeader::length() + ArpPacket::length());
  EthernetHeader{MacAddress::broadcast(), new_mac, EtherType::arp}.emit(out);
  ArpPacket{ArpOperation::request, new_mac, ip_a, MacAddress{}, ip_a}.emit(
      MutableByteSpan(out).subspan(14));
  CHECK(same_bytes(out, frame(8)));
}

TEST_CASE("ICMP echo request from the kernel: deconstruct", "[icmp][capture]") {
  const auto view = IcmpView::check(icmp_message(2));
  REQUIRE(view);
  CHECK(view->type() == IcmpType::echo_request);
  CHECK(view->code() == 0);
  CHECK(view->checksum() == 0xdcd4);
  CHECK(view->checksum_valid());
  CHECK(view->identifier() == 0x234c);
  CHECK(view->sequence() == 1);
  CHECK(view->data().size() == 56);
  CHECK(view->data()[55] == 0x37);  // ping's pattern: byte i of the tail is i
}

TEST_CASE("ICMP echo reply: the kernel's bytes from a value built over the request",
          "[icmp][capture]") {
  const auto request = IcmpMessage::parse(*IcmpView::check(icmp_message(2)));
  REQUIRE(request);
  IcmpMessage reply = *request;
  reply.type = IcmpType::echo_reply;
  std::vector<std::uint8_t> out(reply.length());
  reply.emit(out);
  CHECK(same_bytes(out, icmp_message(3)));

  // The kernel's reply IPv4 header: DF clear, its own identification, TTL 64.
  const auto reply_ip = Ipv4View::check(ip_packet(3));
  REQUIRE(reply_ip);
  Ipv4Header header = Ipv4Header::parse(*reply_ip);
  CHECK_FALSE(header.dont_fragment);
  std::vector<std::uint8_t> ip_out(Ipv4Header::length());
  header.emit(ip_out);
  CHECK(same_bytes(ip_out, reply_ip->header()));
}

TEST_CASE("ICMP echo with a 1400-byte payload: parse and emit", "[icmp][capture]") {
  for (std::size_t i : {4u, 5u}) {
    const auto view = IcmpView::check(icmp_message(i));
    REQUIRE(view);
    CHECK(view->checksum_valid());
    CHECK(view->data().size() == 1400);
    const auto message = IcmpMessage::parse(*view);
    REQUIRE(message);
    std::vector<std::uint8_t> out(message->length());
    message->emit(out);
    CHECK(same_bytes(out, view->bytes()));
  }
}

TEST_CASE("ICMP port unreachable from the kernel: deconstruct and construct",
          "[icmp][capture]") {
  const auto ip = Ipv4View::check(ip_packet(7));
  REQUIRE(ip);
  CHECK(ip->dscp() == 48);  // Linux sends ICMP errors as CS6 (TOS 0xc0)
  CHECK(ip->header_checksum_valid());
  const auto view = IcmpView::check(ip->payload());
  REQUIRE(view);
  CHECK(view->type() == IcmpType::destination_unreachable);
  CHECK(view->code() == static_cast<std::uint8_t>(UnreachableCode::port));
  CHECK(view->checksum_valid());
  // The quoted datagram is the UDP packet of frame 6, whole (Linux quotes up to 576 bytes).
  CHECK(same_bytes(view->data(), ip_packet(6)));
  const auto quoted_ip = Ipv4View::check(view->data());
  REQUIRE(quoted_ip);
  const auto quoted_udp = UdpView::check(quoted_ip->payload());
  REQUIRE(quoted_udp);
  CHECK(quoted_udp->destination_port() == 9999);

  IcmpMessage message;
  message.type = IcmpType::destination_unreachable;
  message.code = static_cast<std::uint8_t>(UnreachableCode::port);
  message.data = ip_packet(6);
  std::vector<std::uint8_t> out(message.length());
  message.emit(out);
  CHECK(same_bytes(out, view->bytes()));
}

TEST_CASE("UDP to a closed port from the kernel: checksum computed and verified",
          "[udp][capture]") {
  const auto ip = Ipv4View::check(ip_packet(6));
  REQUIRE(ip);
  const auto udp = UdpView::check(ip->payload());
  REQUIRE(udp);
  CHECK(udp->checksum() == 0x84af);
  CHECK(udp->checksum_valid(ip_b, ip_a));
  std::vector<std::uint8_t> copy(udp->bytes().begin(), udp->bytes().end());
  UdpHeader::parse(*udp).emit(copy);
  UdpHeader::fill_checksum(copy, ip_b, ip_a);
  CHECK(same_bytes(copy, udp->bytes()));
}

}  // namespace rrdma::stack
