// The interface at the value level: frames in through receive_frame(), frames out through
// a recording FrameSink, time chosen by the test. Where the Linux kernel answered the
// same frame (tests/data/kernel_arp_icmp.pcapng), our answer is compared with its bytes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "stack/arp.h"
#include "stack/ethernet.h"
#include "stack/icmp.h"
#include "stack/interface.h"
#include "stack/ipv4.h"
#include "stack/udp.h"
#include "tests/capture_file.h"

namespace rrdma::stack {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Bytes = std::vector<std::uint8_t>;

// We play 10.99.0.1 of the kernel capture; the kernel at 10.99.0.2 is the peer.
const MacAddress our_mac{{0x02, 0x00, 0x00, 0x99, 0x00, 0x01}};
const MacAddress peer_mac{{0x02, 0x00, 0x00, 0x99, 0x00, 0x02}};
const MacAddress stranger_mac{{0x02, 0x00, 0x00, 0x99, 0x00, 0x66}};
const Ipv4Address our_ip{0x0a630001};
const Ipv4Address peer_ip{0x0a630002};
const Ipv4Address gateway_ip{0x0a6300fe};
const Ipv4Address remote_ip{0xc0a80101};  // 192.168.1.1, off-link
const Instant t0{};

struct RecordingSink : FrameSink {
  std::vector<Bytes> frames;
  void transmit(ByteSpan frame) override { frames.emplace_back(frame.begin(), frame.end()); }
};

struct RecordingObserver : StackObserver {
  std::vector<std::string> events;
  void arp_resolved(Ipv4Address a, const MacAddress& m) override {
    events.push_back("resolved " + a.to_string() + " " + m.to_string());
  }
  void arp_failed(Ipv4Address a, std::size_t dropped) override {
    events.push_back("failed " + a.to_string() + " " + std::to_string(dropped));
  }
  void arp_conflict(Ipv4Address a, const MacAddress& m) override {
    events.push_back("conflict " + a.to_string() + " " + m.to_string());
  }
  void frame_dropped(std::string_view layer, std::string_view reason, ByteSpan) override {
    events.push_back("drop " + std::string(layer) + " " + std::string(reason));
  }
};

struct RecordingHandler : UdpHandler {
  struct Received {
    Ipv4Header ip;
    Bytes ip_header, udp_header, payload;
    MacAddress source_mac;
    std::uint16_t source_port, destination_port;
    Instant now;
  };
  std::vector<Received> received;
  void receive_udp(const UdpDatagram& d, Instant now) override {
    received.push_back({d.ip, Bytes(d.ip_header.begin(), d.ip_header.end()),
                        Bytes(d.udp_header.begin(), d.udp_header.end()),
                        Bytes(d.payload.begin(), d.payload.end()), d.source_mac, d.source_port,
                        d.destination_port, now});
  }
};

InterfaceConfig our_config() {
  InterfaceConfig config;
  config.mac = our_mac;
  config.address = our_ip;
  config.prefix_len = 24;
  return config;
}

const std::vector<test::Frame>& kernel_frames() {
  static const auto all = test::read_capture(test::data_path("kernel_arp_icmp.pcapng"));
  return all;
}

std::uint64_t counter(const Interface& iface, std::string_view layer, std::string_view name) {
  for (const Counter& c : iface.counters()) {
    if (c.layer == layer && c.name == name) return c.value;
  }
  throw std::invalid_argument("no counter " + std::string(layer) + "/" + std::string(name));
}

bool same_bytes(ByteSpan a, ByteSpan b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }

Bytes arp_frame(ArpOperation op, const MacAddress& eth_dst, const MacAddress& sender_mac,
                Ipv4Address sender_ip, const MacAddress& target_mac, Ipv4Address target_ip) {
  Bytes frame(42);
  EthernetHeader{eth_dst, sender_mac, EtherType::arp}.emit(frame);
  ArpPacket{op, sender_mac, sender_ip, target_mac, target_ip}.emit(MutableByteSpan(frame).subspan(14));
  return frame;
}

// An IPv4 frame from the peer to us around `payload`.
Bytes ip_frame(IpProtocol protocol, ByteSpan payload, Ipv4Address source = peer_ip,
               Ipv4Address destination = our_ip) {
  Bytes frame(34 + payload.size());
  EthernetHeader{our_mac, peer_mac, EtherType::ipv4}.emit(frame);
  Ipv4Header ip;
  ip.source = source;
  ip.destination = destination;
  ip.protocol = protocol;
  ip.payload_length = static_cast<std::uint16_t>(payload.size());
  ip.identification = 0x1234;
  ip.emit(MutableByteSpan(frame).subspan(14));
  std::copy(payload.begin(), payload.end(), frame.begin() + 34);
  return frame;
}

Bytes udp_frame(std::uint16_t destination_port, ByteSpan payload, bool checksum = true,
                Ipv4Address destination = our_ip) {
  Bytes datagram(8 + payload.size());
  UdpHeader{40000, destination_port, static_cast<std::uint16_t>(payload.size())}.emit(datagram);
  std::copy(payload.begin(), payload.end(), datagram.begin() + 8);
  if (checksum) UdpHeader::fill_checksum(datagram, peer_ip, destination);
  return ip_frame(IpProtocol::udp, datagram, peer_ip, destination);
}

// Teaches the interface the peer's MAC the way the kernel did: its ARP request for us.
void learn_peer(Interface& iface, RecordingSink& sink, Instant now) {
  iface.receive_frame(kernel_frames().at(0), now);
  sink.frames.clear();
}

ByteSpan ip_of(const Bytes& frame) { return ByteSpan(frame).subspan(14); }

}  // namespace

TEST_CASE("interface: the kernel's ARP request gets the kernel's reply, byte for byte",
          "[interface][arp]") {
  RecordingSink sink;
  Interface iface(our_config(), sink);
  iface.receive_frame(kernel_frames().at(0), t0);
  REQUIRE(sink.frames.size() == 1);
  CHECK(same_bytes(sink.frames[0], kernel_frames().at(1)));
  CHECK(counter(iface, "arp", "rx_requests") == 1);
  CHECK(counter(iface, "arp", "tx_replies") == 1);
  // The request was addressed to us, so its sender was learnt (RFC 826).
  const auto entries = iface.arp_entries(t0 + seconds(2));
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].address == peer_ip);
  CHECK(entries[0].mac == peer_mac);
  CHECK(entries[0].age == seconds(2));
}

TEST_CASE("interface: ARP for another address is neither answered nor learnt",
          "[interface][arp]") {
  RecordingSink sink;
  Interface iface(our_config(), sink);
  iface.receive_frame(arp_frame(ArpOperation::request, MacAddress::broadcast(), peer_mac, peer_ip,
                                MacAddress{}, Ipv4Address{0x0a630009}),
                      t0);
  CHECK(sink.frames.empty());
  CHECK(iface.arp_entries(t0).empty());
  CHECK(counter(iface, "arp", "rx_requests") == 1);
}

TEST_CASE("interface: announce() sends a gratuitous ARP", "[interface][arp]") {
  RecordingSink sink;
  Interface iface(our_config(), sink);
  iface.announce(t0);
  REQUIRE(sink.frames.size() == 1);
  CHECK(same_bytes(sink.frames[0], arp_frame(ArpOperation::request, MacAddress::broadcast(), our_mac,
                                             our_ip, MacAddress{}, our_ip)));
  CHECK(counter(iface, "arp", "tx_announcements") == 1);
  CHECK(counter(iface, "ethernet", "tx_frames") == 1);
  CHECK(counter(iface, "ethernet", "tx_bytes") == 42);
}

TEST_CASE("interface: another host claiming our address is a conflict", "[interface][arp]") {
  RecordingSink sink;
  RecordingObserver observer;
  Interface iface(our_config(), sink);
  iface.set_observer(&observer);
  // A gratuitous ARP from a stranger for our address.
  iface.receive_frame(arp_frame(ArpOperation::request, MacAddress::broadcast(), stranger_mac,
                                our_ip, MacAddress{}, our_ip),
                      t0);
  CHECK(counter(iface, "arp", "conflicts") == 1);
  CHECK(observer.events == std::vector<std::string>{"conflict 10.99.0.1 02:00:00:99:00:66"});
  CHECK(iface.arp_entries(t0).empty());
  // We defend the address with one announcement (RFC 5227 2.4 (b))...
  const Bytes our_announcement = arp_frame(ArpOperation::request, MacAddress::broadcast(), our_mac,
                                           our_ip, MacAddress{}, our_ip);
  REQUIRE(sink.frames.size() == 1);
  CHECK(sink.frames[0] == our_announcement);
  // ...and not again within the 10 s defend interval.
  const Bytes claim = arp_frame(ArpOperation::reply, MacAddress::broadcast(), stranger_mac, our_ip,
                                MacAddress{}, our_ip);
  iface.receive_frame(claim, t0 + seconds(9));
  CHECK(counter(iface, "arp", "conflicts") == 2);
  CHECK(sink.frames.size() == 1);
  iface.receive_frame(claim, t0 + seconds(10));
  CHECK(sink.frames.size() == 2);
  // Our own announcement coming back (a bridge reflecting it) is not a conflict.
  iface.receive_frame(our_announcement, t0 + seconds(11));
  CHECK(counter(iface, "arp", "conflicts") == 3);
  CHECK(sink.frames.size() == 2);
  CHECK(iface.arp_entries(t0 + seconds(11)).empty());
}

TEST_CASE("interface: an RFC 5227 probe for our address is answered, not learnt",
          "[interface][arp]") {
  RecordingSink sink;
  Interface iface(our_config(), sink);
  iface.receive_frame(arp_frame(ArpOperation::request, MacAddress::broadcast(), stranger_mac,
                                Ipv4Address{0}, MacAddress{}, our_ip),
                      t0);
  REQUIRE(sink.frames.size() == 1);
  const auto reply = ArpView::check(ByteSpan(sink.frames[0]).subspan(14));
  REQUIRE(reply);
  CHECK(reply->operation() == ArpOperation::reply);
  CHECK(reply->target_mac() == stranger_mac);
  CHECK(iface.arp_entries(t0).empty());
}

TEST_CASE("interface: echo request gets the reply the kernel sent", "[interface][icmp]") {
  RecordingSink sink;
  Interface iface(our_config(), sink);
  learn_peer(iface, sink, t0);
  // Frames 2 and 4 are requests (56 and 1400 bytes of data), 3 and 5 the kernel's replies.
  for (std::size_t request : {2u, 4u}) {
    INFO("request frame " << request);
    sink.frames.clear();
    iface.receive_frame(kernel_frames().at(request), t0);
    REQUIRE(sink.frames.size() == 1);
    const Bytes& ours = sink.frames[0];
    const test::Frame& linux_reply = kernel_frames().at(request + 1);
    REQUIRE(ours.size() == linux_reply.size());
    CHECK(std::equal(ours.begin(), ours.begin() + 14, linux_reply.begin()));  // Ethernet
    // The ICMP message, checksum included, is identical.
    CHECK(std::equal(ours.begin() + 34, ours.end(), linux_reply.begin() + 34));
    // The IPv4 header too, but for the identification (and so the checksum).
    const auto ip = Ipv4View::check(ip_of(ours));
    REQUIRE(ip);
    CHECK(ip->header_checksum_valid());
    Ipv4Header expected = Ipv4Header::parse(*Ipv4View::check(ip_of(linux_reply)));
    expected.identification = ip->identification();
    CHECK(Ipv4Header::parse(*ip) == expected);
    const auto icmp = IcmpView::check(ip->payload());
    CHECK(icmp->checksum_valid());
  }
  CHECK(counter(iface, "icmp", "rx_echo_requests") == 2);
  CHECK(counter(iface, "icmp", "tx_echo_replies") == 2);
  CHECK(counter(iface, "ipv4", "tx_packets") == 2);
}

TEST_CASE("interface: an echo from an unknown host waits for ARP, then leaves",
          "[interface][icmp][arp]") {
  RecordingSink sink;
  RecordingObserver observer;
  Interface iface(our_config(), sink);
  iface.set_observer(&observer);
  iface.receive_frame(kernel_frames().at(2), t0);
  REQUIRE(sink.frames.size() == 1);
  CHECK(same_bytes(sink.frames[0], arp_frame(ArpOperation::request, MacAddress::broadcast(), our_mac,
                                             our_ip, MacAddress{}, peer_ip)));
  CHECK(iface.poll(t0) == t0 + seconds(1));
  // The kernel's reply to a request like ours (frame 1 is the same exchange mirrored).
  iface.receive_frame(arp_frame(ArpOperation::reply, our_mac, peer_mac, peer_ip, our_mac, our_ip),
                      t0 + milliseconds(5));
  REQUIRE(sink.frames.size() == 2);
  const auto eth = EthernetView::check(sink.frames[1]);
  CHECK(eth->destination() == peer_mac);
  CHECK(IcmpView::check(Ipv4View::check(eth->payload())->payload())->type() == IcmpType::echo_reply);
  CHECK(observer.events == std::vector<std::string>{"resolved 10.99.0.2 02:00:00:99:00:02"});
  CHECK(counter(iface, "arp", "rx_replies") == 1);
}

TEST_CASE("interface: a 1400-byte echo built here is answered with valid checksums",
          "[interface][icmp]") {
  RecordingSink sink;
  Interface iface(our_config(), sink);
  learn_peer(iface, sink, t0);
  Bytes data(1400);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(i * 7);
  IcmpMessage request{IcmpType::echo_request, 0, 0xbeef, 42, 0, data};
  Bytes icmp(request.length());
  request.emit(icmp);
  iface.receive_frame(ip_frame(IpProtocol::icmp, icmp), t0);
  REQUIRE(sink.frames.size() == 1);
  const auto ip = Ipv4View::check(ip_of(sink.frames[0]));
  REQUIRE(ip);
  CHECK(ip->header_checksum_valid());
  CHECK(ip->total_length() == 20 + 8 + 1400);
  CHECK(ip->destination() == peer_ip);
  const auto reply = IcmpView::check(ip->payload());
  REQUIRE(reply);
  CHECK(reply->checksum_valid());
  CHECK(reply->type() == IcmpType::echo_reply);
  CHECK(reply->identifier() == 0xbeef);
  CHECK(reply->sequence() == 42);
  CHECK(same_bytes(reply->data(), data));
}

TEST_CASE("interface: UDP to a closed port is answered with port unreachable",
          "[interface][udp][icmp]") {
  RecordingSink sink;
  Interface iface(our_config(), sink);
  learn_peer(iface, sink, t0);
  const test::Frame& udp = kernel_frames().at(6);
  iface.receive_frame(udp, t0);
  REQUIRE(sink.frames.size() == 1);
  const auto ip = Ipv4View::check(ip_of(sink.frames[0]));
  REQUIRE(ip);
  CHECK(ip->header_checksum_valid());
  CHECK(ip->protocol() == IpProtocol::icmp);
  CHECK(ip->dscp() == 48);  // as Linux's (frame 7)
  CHECK(ip->destination() == peer_ip);
  const auto icmp = IcmpView::check(ip->payload());
  REQUIRE(icmp);
  CHECK(icmp->checksum_valid());
  CHECK(icmp->type() == IcmpType::destination_unreachable);
  CHECK(icmp->code() == 3);
  // RFC 792: the IP header and the first 8 bytes of data, i.e. the UDP header.
  CHECK(same_bytes(icmp->data(), ByteSpan(udp).subspan(14, 28)));
  CHECK(counter(iface, "udp", "drop_no_port") == 1);
  CHECK(counter(iface, "icmp", "tx_port_unreachable") == 1);
}

TEST_CASE("interface: port unreachable is rate-limited by a token bucket",
          "[interface][udp][icmp]") {
  RecordingSink sink;
  InterfaceConfig config = our_config();
  config.icmp_rate_limit = {3, milliseconds(100)};
  Interface iface(config, sink);
  learn_peer(iface, sink, t0);
  const Bytes probe = udp_frame(9, Bytes{1, 2, 3});
  for (int i = 0; i < 5; ++i) iface.receive_frame(probe, t0);
  CHECK(sink.frames.size() == 3);
  CHECK(counter(iface, "icmp", "port_unreachable_rate_limited") == 2);
  iface.receive_frame(probe, t0 + milliseconds(99));
  CHECK(sink.frames.size() == 3);
  iface.receive_frame(probe, t0 + milliseconds(100));
  CHECK(sink.frames.size() == 4);
  // A long quiet spell refills to the burst, not beyond.
  for (int i = 0; i < 5; ++i) iface.receive_frame(probe, t0 + seconds(60));
  CHECK(sink.frames.size() == 7);
  CHECK(counter(iface, "icmp", "tx_port_unreachable") == 7);
  CHECK(counter(iface, "udp", "drop_no_port") == 12);
}

TEST_CASE("interface: UDP to a broadcast address never draws an ICMP error",
          "[interface][udp]") {
  RecordingSink sink;
  Interface iface(our_config(), sink);
  learn_peer(iface, sink, t0);
  iface.receive_frame(udp_frame(9, Bytes{1}, true, Ipv4Address{0x0a6300ff}), t0);
  iface.receive_frame(udp_frame(9, Bytes{1}, true, Ipv4Address{0xffffffff}), t0);
  CHECK(sink.frames.empty());
  CHECK(counter(iface, "udp", "drop_no_port") == 2);
}

TEST_CASE("interface: a bound port receives the datagram with its raw headers",
          "[interface][udp]") {
  RecordingSink sink;
  RecordingHandler handler;
  Interface iface(our_config(), sink);
  iface.bind_udp(9999, handler);
  const test::Frame& udp = kernel_frames().at(6);
  iface.receive_frame(udp, t0 + seconds(3));
  REQUIRE(handler.received.size() == 1);
  const auto& got = handler.received[0];
  CHECK(same_bytes(got.ip_header, ByteSpan(udp).subspan(14, 20)));
  CHECK(same_bytes(got.udp_header, ByteSpan(udp).subspan(34, 8)));
  CHECK(std::string(got.payload.begin(), got.payload.end()) == "hello, closed port");
  CHECK(got.ip.source == peer_ip);
  CHECK(got.source_mac == peer_mac);
  CHECK(got.source_port == 46072);
  CHECK(got.destination_port == 9999);
  CHECK(got.now == t0 + seconds(3));
  CHECK(sink.frames.empty());

  iface.unbind_udp(9999);
  iface.receive_frame(udp, t0);
  CHECK(handler.received.size() == 1);
  CHECK(counter(iface, "udp", "drop_no_port") == 1);
}

TEST_CASE("interface: a RoCE-shaped frame from rxe reaches port 4791", "[interface][udp]") {
  // rxe's first SEND_FIRST, addressed to 10.77.0.2 / 52:54:00:00:00:02.
  const test::Frame frame = test::read_capture(test::data_path("rxe_rc_pingpong.pcapng")).at(0);
  InterfaceConfig config;
  config.mac = MacAddress{{0x52, 0x54, 0x00, 0x00, 0x00, 0x02}};
  config.address = Ipv4Address{0x0a4d0002};
  RecordingSink sink;
  RecordingHandler handler;
  Interface iface(config, sink);
  iface.bind_udp(4791, handler);
  iface.receive_frame(frame, t0);
  REQUIRE(handler.received.size() == 1);
  CHECK(handler.received[0].source_port == 49441);
  CHECK(handler.received[0].payload.size() == 0x0418 - 8);
  CHECK(same_bytes(handler.received[0].payload, ByteSpan(frame).subspan(42)));
}

struct TrailerWriter : PacketFinalizer {
  std::vector<Bytes> seen;
  void finalize(MutableByteSpan ip_packet) override {
    seen.emplace_back(ip_packet.begin(), ip_packet.end());
    // A stand-in for the ICRC: the low byte of the IP identification, 4 times.
    std::fill(ip_packet.end() - 4, ip_packet.end(), ip_packet[5]);
  }
};

TEST_CASE("interface: send_udp waits for ARP, then sends a finalized RoCE-style packet",
          "[interface][udp][arp]") {
  RecordingSink sink;
  Interface iface(our_config(), sink);
  TrailerWriter trailer;
  const Bytes bth(12, 0xab);
  UdpSend send;
  send.destination = peer_ip;
  send.source_port = 0xc121;
  send.destination_port = 4791;
  send.payload = bth;
  send.trailer_length = 4;
  send.compute_checksum = false;
  CHECK(iface.send_udp(send, t0, &trailer) == SendResult::queued);
  REQUIRE(sink.frames.size() == 1);  // the ARP request
  CHECK(ArpView::check(ByteSpan(sink.frames[0]).subspan(14))->target_ip() == peer_ip);

  // The finalizer saw the packet as it will be sent: header final, trailer space last.
  REQUIRE(trailer.seen.size() == 1);
  const auto seen_ip = Ipv4View::check(trailer.seen[0]);
  REQUIRE(seen_ip);
  CHECK(seen_ip->header_checksum_valid());
  CHECK(seen_ip->total_length() == 20 + 8 + 12 + 4);

  iface.receive_frame(arp_frame(ArpOperation::reply, our_mac, peer_mac, peer_ip, our_mac, our_ip), t0);
  REQUIRE(sink.frames.size() == 2);
  const auto eth = EthernetView::check(sink.frames[1]);
  CHECK(eth->destination() == peer_mac);
  CHECK(eth->source() == our_mac);
  const auto ip = Ipv4View::check(eth->payload());
  REQUIRE(ip);
  CHECK(ip->dont_fragment());
  CHECK(ip->ttl() == 64);
  CHECK(ip->dscp() == 0);
  CHECK(ip->source() == our_ip);
  CHECK(ip->header_checksum_valid());
  const auto udp = UdpView::check(ip->payload());
  REQUIRE(udp);
  CHECK(udp->checksum() == 0);
  CHECK(udp->source_port() == 0xc121);
  CHECK(udp->destination_port() == 4791);
  CHECK(udp->length() == 8 + 12 + 4);
  CHECK(same_bytes(udp->payload().first(12), bth));
  const std::uint8_t id_low = static_cast<std::uint8_t>(ip->identification());
  CHECK(same_bytes(udp->payload().last(4), Bytes(4, id_low)));

  // Known now: the next one goes at once, with the checksum computed over the trailer too.
  send.compute_checksum = true;
  CHECK(iface.send_udp(send, t0, &trailer) == SendResult::sent);
  REQUIRE(sink.frames.size() == 3);
  const auto second = UdpView::check(Ipv4View::check(ip_of(sink.frames[2]))->payload());
  CHECK(second->checksum() != 0);
  CHECK(second->checksum_valid(our_ip, peer_ip));
  CHECK(counter(iface, "udp", "tx_datagrams") == 2);
}

// A sink with transmit memory of its own, as the daemon's transmit slots: frames are built
// in it. The memory starts full of junk, as a slot reused from an earlier, longer frame does.
struct SlotSink : FrameSink {
  Bytes slot = Bytes(2048, 0xEE);
  bool room = true;
  std::vector<Bytes> built_in_place;
  std::vector<Bytes> copied;
  void transmit(ByteSpan frame) override { copied.emplace_back(frame.begin(), frame.end()); }
  MutableByteSpan prepare(std::size_t size) override {
    return room && size <= slot.size() ? MutableByteSpan(slot) : MutableByteSpan{};
  }
  void transmit_prepared(MutableByteSpan frame) override {
    CHECK(frame.data() == slot.data());
    built_in_place.emplace_back(frame.begin(), frame.end());
    std::fill(slot.begin(), slot.end(), 0xEE);
  }
};

// Writes the payload in place, as the RoCE port writes the transport headers and data.
struct PatternWriter : PayloadWriter {
  std::size_t calls = 0;
  std::size_t length_seen = 0;
  void write(MutableByteSpan payload) override {
    ++calls;
    length_seen = payload.size();
    for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::uint8_t>(i * 3);
  }
};

TEST_CASE("interface: send_udp builds in the sink's memory, byte for byte what a copy would be",
          "[interface][udp]") {
  const auto learn_peer = [](Interface& iface) {
    iface.receive_frame(arp_frame(ArpOperation::reply, our_mac, peer_mac, peer_ip, our_mac, our_ip), t0);
  };
  Bytes payload(1000);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::uint8_t>(i * 3);
  UdpSend send;
  send.destination = peer_ip;
  send.source_port = 0xc0de;
  send.destination_port = 4791;
  send.trailer_length = 4;
  send.compute_checksum = false;

  // The reference: bytes copied through transmit(), once the peer's MAC is known.
  RecordingSink plain_sink;
  Interface plain(our_config(), plain_sink);
  learn_peer(plain);
  TrailerWriter plain_trailer;
  send.payload = payload;
  REQUIRE(plain.send_udp(send, t0, &plain_trailer) == SendResult::sent);
  REQUIRE(plain_sink.frames.size() == 1);

  // In place, with the payload written by a PayloadWriter.
  SlotSink slots;
  Interface in_place(our_config(), slots);
  learn_peer(in_place);
  TrailerWriter trailer;
  PatternWriter writer;
  send.payload = {};
  send.payload_writer = &writer;
  send.payload_length = payload.size();
  REQUIRE(in_place.send_udp(send, t0, &trailer) == SendResult::sent);
  CHECK(writer.calls == 1);
  CHECK(writer.length_seen == payload.size());
  REQUIRE(slots.built_in_place.size() == 1);
  CHECK(slots.copied.empty());
  CHECK(slots.built_in_place[0] == plain_sink.frames[0]);
  // The finalizer saw a zero trailer, not the slot's junk.
  REQUIRE(trailer.seen.size() == 1);
  CHECK(same_bytes(ByteSpan(trailer.seen[0]).last(4), Bytes(4, 0)));
  CHECK(counter(in_place, "udp", "tx_datagrams") == 1);
  CHECK(counter(in_place, "ethernet", "tx_frames") == counter(plain, "ethernet", "tx_frames"));

  // No room in the sink: built apart and copied, the same bytes.
  slots.room = false;
  REQUIRE(in_place.send_udp(send, t0, &trailer) == SendResult::sent);
  REQUIRE(slots.copied.size() == 1);
  CHECK(slots.built_in_place.size() == 1);
  const auto copied_ip = Ipv4View::check(ip_of(slots.copied[0]));
  REQUIRE(copied_ip);
  CHECK(copied_ip->header_checksum_valid());
  CHECK(same_bytes(UdpView::check(copied_ip->payload())->payload().first(payload.size()), payload));
}

TEST_CASE("interface: a datagram to a neighbour ARP has not resolved is not built in the sink",
          "[interface][udp][arp]") {
  SlotSink slots;
  Interface iface(our_config(), slots);
  PatternWriter writer;
  UdpSend send;
  send.destination = peer_ip;
  send.source_port = 1;
  send.destination_port = 4791;
  send.payload_writer = &writer;
  send.payload_length = 40;
  REQUIRE(iface.send_udp(send, t0) == SendResult::queued);
  CHECK(writer.calls == 1);             // built once, into the frame the ARP queue keeps
  CHECK(slots.built_in_place.empty());  // the slot is not held while ARP waits
  REQUIRE(slots.copied.size() == 1);    // the ARP request
  iface.receive_frame(arp_frame(ArpOperation::reply, our_mac, peer_mac, peer_ip, our_mac, our_ip), t0);
  REQUIRE(slots.copied.size() == 2);
  const auto udp = UdpView::check(Ipv4View::check(ip_of(slots.copied[1]))->payload());
  REQUIRE(udp);
  CHECK(udp->length() == 8 + 40);
  CHECK(udp->payload()[39] == static_cast<std::uint8_t>(39 * 3));
}

TEST_CASE("interface: routing on-link, via the gateway, or unroutable", "[interface][ipv4]") {
  RecordingSink sink;
  const Bytes payload{1, 2, 3};
  UdpSend send;
  send.destination = remote_ip;
  send.destination_port = 7;
  send.payload = payload;

  SECTION("no gateway: off-link is unroutable") {
    Interface iface(our_config(), sink);
    CHECK(iface.send_udp(send, t0) == SendResult::unroutable);
    CHECK(sink.frames.empty());
    CHECK(counter(iface, "ipv4", "drop_unroutable") == 1);
  }
  SECTION("with a gateway: ARP asks for the gateway") {
    InterfaceConfig config = our_config();
    config.gateway = gateway_ip;
    Interface iface(config, sink);
    CHECK(iface.send_udp(send, t0) == SendResult::queued);
    REQUIRE(sink.frames.size() == 1);
    CHECK(ArpView::check(ByteSpan(sink.frames[0]).subspan(14))->target_ip() == gateway_ip);
  }
  SECTION("too big for the MTU") {
    Interface iface(our_config(), sink);
    const Bytes big(1500 - 28 + 1);
    send.destination = peer_ip;
    send.payload = big;
    CHECK(iface.send_udp(send, t0) == SendResult::too_big);
    CHECK(counter(iface, "ipv4", "tx_too_big") == 1);
  }
}

TEST_CASE("interface: a datagram to our own address comes back on the next run_loopback, never on the wire",
          "[interface][ipv4][loopback]") {
  RecordingSink sink;
  Interface iface(our_config(), sink);
  RecordingHandler handler;
  iface.bind_udp(4791, handler);
  const Bytes payload{9, 8, 7, 6, 5};
  UdpSend send;
  send.destination = our_ip;
  send.source_port = 50000;
  send.destination_port = 4791;
  send.payload = payload;
  send.trailer_length = 4;
  send.compute_checksum = false;
  TrailerWriter trailer;
  CHECK(iface.send_udp(send, t0, &trailer) == SendResult::sent);
  // Not delivered from inside the send, and no ARP for ourselves.
  CHECK(handler.received.empty());
  CHECK(sink.frames.empty());
  CHECK(iface.loopback_pending());

  std::vector<Bytes> seen;
  CHECK(iface.run_loopback(t0 + milliseconds(1), [&](ByteSpan f) { seen.emplace_back(f.begin(), f.end()); }) == 1);
  CHECK_FALSE(iface.loopback_pending());
  REQUIRE(handler.received.size() == 1);
  const auto& got = handler.received[0];
  CHECK(got.ip.source == our_ip);
  CHECK(got.ip.destination == our_ip);
  CHECK(got.source_mac == our_mac);
  CHECK(got.source_port == 50000);
  CHECK(got.destination_port == 4791);
  REQUIRE(trailer.seen.size() == 1);
  const std::uint8_t id = trailer.seen[0][5];  // what TrailerWriter writes 4 times
  CHECK(got.payload == Bytes{9, 8, 7, 6, 5, id, id, id, id});  // the finalizer's trailer too
  CHECK(got.now == t0 + milliseconds(1));
  REQUIRE(seen.size() == 1);
  const auto eth = EthernetView::check(seen[0]);
  CHECK(eth->destination() == our_mac);
  CHECK(eth->source() == our_mac);
  CHECK(sink.frames.empty());
  CHECK(counter(iface, "ipv4", "tx_loopback") == 1);
  CHECK(counter(iface, "ipv4", "rx_loopback") == 1);
  CHECK(counter(iface, "ipv4", "tx_packets") == 1);
  CHECK(counter(iface, "ipv4", "rx_packets") == 1);
  CHECK(counter(iface, "ethernet", "tx_frames") == 0);
  CHECK(counter(iface, "arp", "tx_requests") == 0);
  CHECK(iface.run_loopback(t0) == 0);
}

// A handler that answers every datagram to ourselves: what it sends waits for the next run.
struct EchoToSelf : UdpHandler {
  Interface* iface = nullptr;
  int received = 0;
  void receive_udp(const UdpDatagram& d, Instant now) override {
    ++received;
    UdpSend reply;
    reply.destination = d.ip.source;
    reply.source_port = d.destination_port;
    reply.destination_port = d.source_port;
    reply.payload = d.payload;
    iface->send_udp(reply, now);
  }
};

TEST_CASE("interface: what a looped-back datagram's handler sends to us waits for the next run",
          "[interface][ipv4][loopback]") {
  RecordingSink sink;
  Interface iface(our_config(), sink);
  EchoToSelf echo;
  echo.iface = &iface;
  iface.bind_udp(7, echo);
  const Bytes payload{1};
  UdpSend send;
  send.destination = our_ip;
  send.source_port = 7;
  send.destination_port = 7;
  send.payload = payload;
  REQUIRE(iface.send_udp(send, t0) == SendResult::sent);
  for (int run = 1; run <= 5; ++run) {
    CHECK(iface.run_loopback(t0) == 1);  // one at a time: no unbounded recursion
    CHECK(echo.received == run);
    CHECK(iface.loopback_pending());
  }
}

TEST_CASE("interface: the loopback queue is bounded, and an unbound port answers us with ICMP",
          "[interface][ipv4][loopback]") {
  RecordingSink sink;
  Interface iface(our_config(), sink);
  const Bytes payload{1, 2};
  UdpSend send;
  send.destination = our_ip;
  send.destination_port = 9;  // nobody listens
  send.payload = payload;
  for (std::size_t i = 0; i < kLoopbackQueueLimit + 3; ++i) iface.send_udp(send, t0);
  CHECK(counter(iface, "ipv4", "tx_loopback") == kLoopbackQueueLimit);
  CHECK(counter(iface, "ipv4", "tx_loopback_full") == 3);
  CHECK(iface.run_loopback(t0) == kLoopbackQueueLimit);
  CHECK(counter(iface, "udp", "drop_no_port") == kLoopbackQueueLimit);
  // Port unreachable, rate-limited (burst 10), to ourselves as well; an ICMP error is never
  // answered with another.
  const std::uint64_t unreachable = counter(iface, "icmp", "tx_port_unreachable");
  CHECK(unreachable == IcmpRateLimit{}.burst);
  CHECK(iface.run_loopback(t0) == unreachable);
  CHECK(counter(iface, "icmp", "rx_unreachable") == unreachable);
  CHECK_FALSE(iface.loopback_pending());
  CHECK(sink.frames.empty());
}

TEST_CASE("interface: an echo from off-link is answered through the gateway",
          "[interface][icmp][ipv4]") {
  RecordingSink sink;
  InterfaceConfig config = our_config();
  config.gateway = gateway_ip;
  Interface iface(config, sink);
  const MacAddress gateway_mac{{0x02, 0x00, 0x00, 0x99, 0x00, 0xfe}};
  iface.receive_frame(arp_frame(ArpOperation::request, MacAddress::broadcast(), gateway_mac,
                                gateway_ip, MacAddress{}, our_ip),
                      t0);
  sink.frames.clear();
  IcmpMessage request{IcmpType::echo_request, 0, 7, 1, 0, {}};
  Bytes icmp(request.length());
  request.emit(icmp);
  iface.receive_frame(ip_frame(IpProtocol::icmp, icmp, remote_ip), t0);
  REQUIRE(sink.frames.size() == 1);
  const auto eth = EthernetView::check(sink.frames[0]);
  CHECK(eth->destination() == gateway_mac);
  CHECK(Ipv4View::check(eth->payload())->destination() == remote_ip);
}

TEST_CASE("interface: unanswered ARP fails after three requests and reports upward",
          "[interface][arp]") {
  RecordingSink sink;
  RecordingObserver observer;
  Interface iface(our_config(), sink);
  iface.set_observer(&observer);
  const Bytes payload{1};
  UdpSend send;
  send.destination = peer_ip;
  send.payload = payload;
  iface.send_udp(send, t0);
  iface.send_udp(send, t0);
  std::optional<Instant> next = iface.poll(t0);
  while (next) next = iface.poll(*next);
  CHECK(sink.frames.size() == 3);  // three requests, no datagram
  CHECK(counter(iface, "arp", "tx_requests") == 3);
  CHECK(counter(iface, "arp", "resolve_failed") == 1);
  CHECK(observer.events == std::vector<std::string>{"failed 10.99.0.2 2"});
}

TEST_CASE("interface: Ethernet accepts our MAC and broadcast only", "[interface][ethernet]") {
  RecordingSink sink;
  RecordingObserver observer;
  Interface iface(our_config(), sink);
  iface.set_observer(&observer);
  Bytes frame = kernel_frames().at(2);  // an echo request to us
  store_mac(frame, 0, stranger_mac);
  iface.receive_frame(frame, t0);
  store_mac(frame, 0, MacAddress{{0x01, 0x00, 0x5e, 0x00, 0x00, 0x01}});
  iface.receive_frame(frame, t0);
  Bytes other_type = kernel_frames().at(2);
  store_be16(other_type, 12, 0x86dd);  // IPv6
  iface.receive_frame(other_type, t0);
  iface.receive_frame(Bytes(13, 0xff), t0);
  CHECK(sink.frames.empty());
  CHECK(counter(iface, "ethernet", "drop_not_for_us") == 1);
  CHECK(counter(iface, "ethernet", "drop_multicast") == 1);
  CHECK(counter(iface, "ethernet", "drop_unknown_ethertype") == 1);
  CHECK(counter(iface, "ethernet", "drop_short") == 1);
  CHECK(counter(iface, "ethernet", "rx_frames") == 4);
  CHECK(observer.events == std::vector<std::string>{
                               "drop ethernet drop_not_for_us", "drop ethernet drop_multicast",
                               "drop ethernet drop_unknown_ethertype", "drop ethernet drop_short"});
}

TEST_CASE("interface: counters include every name the CLI and tests rely on", "[interface]") {
  RecordingSink sink;
  Interface iface(our_config(), sink);
  const char* required[][2] = {
      {"ethernet", "rx_frames"}, {"ethernet", "rx_bytes"}, {"ethernet", "tx_frames"},
      {"ethernet", "tx_bytes"}, {"ethernet", "drop_short"}, {"ethernet", "drop_not_for_us"},
      {"ethernet", "drop_multicast"}, {"ethernet", "drop_unknown_ethertype"},
      {"arp", "rx_requests"}, {"arp", "rx_replies"}, {"arp", "tx_requests"},
      {"arp", "tx_replies"}, {"arp", "drop_malformed"}, {"arp", "resolve_failed"},
      {"arp", "conflicts"}, {"arp", "queue_overflow"},
      {"ipv4", "rx_packets"}, {"ipv4", "tx_packets"}, {"ipv4", "drop_truncated"},
      {"ipv4", "drop_bad_version"}, {"ipv4", "drop_bad_ihl"}, {"ipv4", "drop_bad_length"},
      {"ipv4", "drop_bad_checksum"}, {"ipv4", "drop_fragment"}, {"ipv4", "drop_not_for_us"},
      {"ipv4", "drop_unknown_protocol"}, {"ipv4", "drop_unroutable"},
      {"ipv4", "tx_loopback"}, {"ipv4", "rx_loopback"}, {"ipv4", "tx_loopback_full"},
      {"icmp", "rx_echo_requests"}, {"icmp", "tx_echo_replies"}, {"icmp", "tx_port_unreachable"},
      {"icmp", "port_unreachable_rate_limited"}, {"icmp", "drop_malformed"},
      {"icmp", "drop_bad_checksum"},
      {"udp", "rx_datagrams"}, {"udp", "tx_datagrams"}, {"udp", "drop_truncated"},
      {"udp", "drop_bad_length"}, {"udp", "drop_bad_checksum"}, {"udp", "drop_no_port"}};
  for (const auto& [layer, name] : required) {
    INFO(layer << "/" << name);
    CHECK_NOTHROW(counter(iface, layer, name));
  }
}

}  // namespace rrdma::stack
