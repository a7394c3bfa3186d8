// Hostile input: truncated frames at every length, lying length fields, bad checksums,
// fragments, and random corruption of real frames. Every frame must end under exactly one
// outcome (a drop reason, or a delivery), never a crash or an out-of-bounds read (the
// sanitizer build checks that).
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "stack/ethernet.h"
#include "stack/icmp.h"
#include "stack/interface.h"
#include "stack/ipv4.h"
#include "stack/udp.h"
#include "tests/capture_file.h"

namespace rrdma::stack {
namespace {

using Bytes = std::vector<std::uint8_t>;

const MacAddress our_mac{{0x02, 0x00, 0x00, 0x99, 0x00, 0x01}};
const MacAddress peer_mac{{0x02, 0x00, 0x00, 0x99, 0x00, 0x02}};
const Ipv4Address our_ip{0x0a630001};
const Ipv4Address peer_ip{0x0a630002};
const Instant t0{};

struct NullSink : FrameSink {
  std::size_t frames = 0;
  void transmit(ByteSpan) override { ++frames; }
};

struct CountingHandler : UdpHandler {
  std::size_t received = 0;
  void receive_udp(const UdpDatagram&, Instant) override { ++received; }
};

// An interface playing 10.99.0.1 of the kernel capture, with port 4791 open.
struct Harness {
  NullSink sink;
  CountingHandler handler;
  Interface iface;
  std::size_t fed = 0;

  Harness() : iface(config(), sink) { iface.bind_udp(4791, handler); }
  static InterfaceConfig config() {
    InterfaceConfig c;
    c.mac = our_mac;
    c.address = our_ip;
    return c;
  }
  void feed(ByteSpan frame) {
    iface.receive_frame(frame, t0);
    ++fed;
  }
  std::uint64_t get(std::string_view layer, std::string_view name) const {
    for (const Counter& c : iface.counters()) {
      if (c.layer == layer && c.name == name) return c.value;
    }
    FAIL("no counter " << layer << "/" << name);
    return 0;
  }
  // Each received frame ends in exactly one of these.
  std::uint64_t outcomes() const {
    std::uint64_t total = handler.received;
    for (const Counter& c : iface.counters()) {
      const bool rx_drop = c.name.starts_with("drop_") && c.name != "drop_unroutable" &&
                           c.name != "drop_broadcast_echo";
      const bool terminal_rx = (c.layer == "arp" && (c.name == "rx_requests" || c.name == "rx_replies")) ||
                               (c.layer == "icmp" && c.name.starts_with("rx_"));
      if (rx_drop || terminal_rx) total += c.value;
    }
    return total;
  }
};

const std::vector<test::Frame>& kernel_frames() {
  static const auto all = test::read_capture(test::data_path("kernel_arp_icmp.pcapng"));
  return all;
}

// A UDP datagram from the peer to us on `port`, as a whole frame, checksummed.
Bytes udp_frame(std::uint16_t port, std::size_t payload_size) {
  Bytes frame(42 + payload_size, 0x5a);
  EthernetHeader{our_mac, peer_mac, EtherType::ipv4}.emit(frame);
  Ipv4Header ip;
  ip.source = peer_ip;
  ip.destination = our_ip;
  ip.payload_length = static_cast<std::uint16_t>(8 + payload_size);
  ip.emit(MutableByteSpan(frame).subspan(14));
  const MutableByteSpan datagram = MutableByteSpan(frame).subspan(34);
  UdpHeader{50000, port, static_cast<std::uint16_t>(payload_size)}.emit(datagram);
  UdpHeader::fill_checksum(datagram, peer_ip, our_ip);
  return frame;
}

// Rewrites the IPv4 header checksum after a test edits the header.
void fix_ip_checksum(Bytes& frame) {
  const std::size_t ihl = std::size_t{frame[14] & 0x0fu} * 4;
  store_be16(frame, 24, 0);
  std::uint32_t sum = 0;
  for (std::size_t i = 14; i + 1 < 14 + ihl && i + 1 < frame.size(); i += 2) sum += load_be16(frame, i);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  store_be16(frame, 24, static_cast<std::uint16_t>(~sum));
}

}  // namespace

TEST_CASE("hostile: every truncation of every kernel frame is dropped for the right reason",
          "[hostile]") {
  for (std::size_t index = 0; index < kernel_frames().size(); ++index) {
    const test::Frame& frame = kernel_frames()[index];
    const bool is_arp = EthernetView::check(frame)->ethertype() == EtherType::arp;
    // Half of the capture is 10.99.0.1's answers, addressed to the peer's MAC.
    const MacAddress destination = EthernetView::check(frame)->destination();
    const bool to_us = destination == our_mac || destination.is_broadcast();
    for (std::size_t length = 0; length < frame.size(); ++length) {
      INFO("frame " << index << " cut to " << length << " bytes");
      Harness h;
      h.feed(ByteSpan(frame).first(length));
      CHECK(h.outcomes() == 1);
      CHECK(h.sink.frames == 0);
      if (length < 14) {
        CHECK(h.get("ethernet", "drop_short") == 1);
      } else if (!to_us) {
        CHECK(h.get("ethernet", "drop_not_for_us") == 1);
      } else if (is_arp) {
        CHECK(h.get("arp", "drop_malformed") == 1);
      } else if (length < 34) {
        CHECK(h.get("ipv4", "drop_truncated") == 1);
      } else {
        // The total length field says more than the frame holds.
        CHECK(h.get("ipv4", "drop_bad_length") == 1);
      }
    }
  }
}

TEST_CASE("hostile: every truncation of an rxe RoCE frame is dropped", "[hostile]") {
  const test::Frame frame = test::read_capture(test::data_path("rxe_ud_pingpong.pcapng")).at(0);
  // Readdress it to us so that a whole frame would be delivered.
  Bytes ours(frame.begin(), frame.end());
  store_mac(ours, 0, our_mac);
  store_be32(ours, 30, our_ip.value);
  fix_ip_checksum(ours);
  {
    Harness whole;
    whole.feed(ours);
    REQUIRE(whole.handler.received == 1);
  }
  for (std::size_t length = 0; length < ours.size(); ++length) {
    INFO("cut to " << length);
    Harness h;
    h.feed(ByteSpan(ours).first(length));
    CHECK(h.outcomes() == 1);
    CHECK(h.handler.received == 0);
  }
}

TEST_CASE("hostile: lying IPv4 header fields", "[hostile][ipv4]") {
  Harness h;
  const Bytes good = udp_frame(4791, 20);
  h.feed(good);
  REQUIRE(h.handler.received == 1);

  Bytes bad = good;
  bad[14] = 0x65;  // version 6
  h.feed(bad);
  CHECK(h.get("ipv4", "drop_bad_version") == 1);

  for (int ihl : {0, 4, 15}) {  // too small; 60 bytes, more than the 48 there are
    bad = good;
    bad[14] = static_cast<std::uint8_t>(0x40 | ihl);
    h.feed(bad);
  }
  CHECK(h.get("ipv4", "drop_bad_ihl") == 3);

  for (std::uint16_t total : std::initializer_list<std::uint16_t>{0, 19, 49, 0xffff}) {  // below the header; beyond the frame
    bad = good;
    store_be16(bad, 16, total);
    fix_ip_checksum(bad);
    h.feed(bad);
  }
  CHECK(h.get("ipv4", "drop_bad_length") == 4);

  bad = good;
  bad[22] ^= 0x01;  // TTL changed, checksum not
  h.feed(bad);
  CHECK(h.get("ipv4", "drop_bad_checksum") == 1);

  bad = good;
  store_be32(bad, 30, 0x0a630009);
  fix_ip_checksum(bad);
  h.feed(bad);
  CHECK(h.get("ipv4", "drop_not_for_us") == 1);

  bad = good;
  store_be32(bad, 26, 0xe0000001);  // multicast source
  fix_ip_checksum(bad);
  h.feed(bad);
  store_be32(bad, 26, 0x0a6300ff);  // our subnet's broadcast as a source
  fix_ip_checksum(bad);
  h.feed(bad);
  store_be32(bad, 26, our_ip.value);  // our own address, from the link: a spoof
  fix_ip_checksum(bad);
  h.feed(bad);
  CHECK(h.get("ipv4", "drop_bad_source") == 3);
  CHECK_FALSE(h.iface.loopback_pending());  // nothing answered to ourselves

  bad = good;
  bad[23] = 6;  // TCP
  fix_ip_checksum(bad);
  h.feed(bad);
  CHECK(h.get("ipv4", "drop_unknown_protocol") == 1);

  CHECK(h.outcomes() == h.fed);
  CHECK(h.handler.received == 1);
  CHECK(h.get("ipv4", "rx_packets") == h.fed);
}

TEST_CASE("hostile: fragments are counted and dropped", "[hostile][ipv4]") {
  Harness h;
  for (std::uint16_t flags_offset : std::initializer_list<std::uint16_t>{0x2000, 0x0001, 0x2010, 0x1fff}) {  // MF; offsets
    Bytes fragment = udp_frame(4791, 20);
    store_be16(fragment, 20, flags_offset);
    fix_ip_checksum(fragment);
    h.feed(fragment);
  }
  CHECK(h.get("ipv4", "drop_fragment") == 4);
  CHECK(h.handler.received == 0);
  // DF alone is not a fragment.
  Bytes whole = udp_frame(4791, 20);
  store_be16(whole, 20, 0x4000);
  fix_ip_checksum(whole);
  h.feed(whole);
  CHECK(h.handler.received == 1);
}

TEST_CASE("hostile: Ethernet padding after the IP packet is ignored", "[hostile][ipv4]") {
  Harness h;
  Bytes padded = udp_frame(4791, 2);  // 44 bytes; pad to the 60-byte minimum with junk
  padded.resize(60, 0xee);
  h.feed(padded);
  CHECK(h.handler.received == 1);
  CHECK(h.outcomes() == 1);
}

TEST_CASE("hostile: lying UDP lengths and bad UDP checksums", "[hostile][udp]") {
  Harness h;
  const Bytes good = udp_frame(4791, 20);
  Bytes bad = good;
  for (std::uint16_t length : std::initializer_list<std::uint16_t>{0, 7, 29, 0xffff}) {  // below the header; beyond IP's payload
    bad = good;
    store_be16(bad, 38, length);
    h.feed(bad);
  }
  CHECK(h.get("udp", "drop_bad_length") == 4);

  // An IP packet with fewer than 8 bytes of UDP.
  bad = Bytes(good.begin(), good.begin() + 34 + 5);
  store_be16(bad, 16, 25);
  fix_ip_checksum(bad);
  h.feed(bad);
  CHECK(h.get("udp", "drop_truncated") == 1);

  bad = good;
  bad.back() ^= 0xff;
  h.feed(bad);
  CHECK(h.get("udp", "drop_bad_checksum") == 1);

  // A shorter UDP length than IP's payload is legal: the rest is ignored (RFC 768).
  bad = good;
  store_be16(bad, 38, 8 + 10);
  store_be16(bad, 40, 0);  // checksum 0: not computed
  h.feed(bad);
  CHECK(h.handler.received == 1);
  CHECK(h.outcomes() == h.fed);
}

TEST_CASE("hostile: malformed ICMP", "[hostile][icmp]") {
  Harness h;
  const test::Frame& echo = kernel_frames().at(2);
  Bytes bad(echo.begin(), echo.end());
  store_be16(bad, 16, 20 + 7);  // 7 bytes of ICMP
  fix_ip_checksum(bad);
  h.feed(bad);
  CHECK(h.get("icmp", "drop_malformed") == 1);

  bad.assign(echo.begin(), echo.end());
  bad.back() ^= 0x01;
  h.feed(bad);
  CHECK(h.get("icmp", "drop_bad_checksum") == 1);

  IcmpMessage timestamp{IcmpType{13}, 0, 1, 1, 0, {}};
  Bytes message(timestamp.length() + 12);
  timestamp.emit(message);
  store_be16(message, 2, 0);
  store_be16(message, 2, static_cast<std::uint16_t>(~[&] {
               std::uint32_t sum = 0;
               for (std::size_t i = 0; i < message.size(); i += 2) sum += load_be16(message, i);
               while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
               return sum;
             }()));
  REQUIRE(IcmpView::check(message)->checksum_valid());
  bad.assign(echo.begin(), echo.begin() + 34);
  bad.insert(bad.end(), message.begin(), message.end());
  store_be16(bad, 16, static_cast<std::uint16_t>(20 + message.size()));
  fix_ip_checksum(bad);
  h.feed(bad);
  CHECK(h.get("icmp", "drop_unknown_type") == 1);
  CHECK(h.sink.frames == 0);
  CHECK(h.outcomes() == h.fed);
}

TEST_CASE("hostile: malformed ARP", "[hostile][arp]") {
  Harness h;
  const test::Frame& request = kernel_frames().at(0);
  Bytes bad(request.begin(), request.end());
  store_be16(bad, 14, 6);  // hardware type IEEE 802
  h.feed(bad);
  bad.assign(request.begin(), request.end());
  bad[18] = 8;  // hardware address length
  h.feed(bad);
  bad.assign(request.begin(), request.end());
  store_be16(bad, 20, 3);  // operation: RARP request
  h.feed(bad);
  bad.assign(request.begin(), request.end());
  bad[22] |= 0x01;  // sender MAC multicast
  h.feed(bad);
  CHECK(h.get("arp", "drop_malformed") == 4);
  CHECK(h.sink.frames == 0);
  CHECK(h.iface.arp_entries(t0).empty());
  CHECK(h.outcomes() == h.fed);
}

TEST_CASE("hostile: random corruption of real frames never escapes the accounting",
          "[hostile]") {
  std::vector<Bytes> seeds;
  for (const test::Frame& f : kernel_frames()) seeds.emplace_back(f.begin(), f.end());
  seeds.push_back(udp_frame(4791, 64));
  seeds.push_back(udp_frame(9, 3));
  Harness h;
  std::mt19937 random(20261122);  // fixed seed: a failure replays
  for (int round = 0; round < 20000; ++round) {
    Bytes frame = seeds[random() % seeds.size()];
    const int flips = 1 + static_cast<int>(random() % 4);
    for (int i = 0; i < flips; ++i) {
      // Mostly in the headers, where the lengths and codes are.
      const std::size_t at = random() % std::min<std::size_t>(frame.size(), 64);
      frame[at] = static_cast<std::uint8_t>(random());
    }
    if (random() % 4 == 0) frame.resize(random() % (frame.size() + 1));
    h.feed(frame);
    h.iface.poll(t0);
  }
  CHECK(h.outcomes() == h.fed);
  CHECK(h.get("ethernet", "rx_frames") == h.fed);
}

}  // namespace rrdma::stack
