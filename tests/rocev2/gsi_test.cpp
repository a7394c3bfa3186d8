// The GSI endpoint (QP 1) at the value level: the packet it sends for a MAD, byte for byte
// as rxe's GSI QP sends it (docs/GSI.md has the rxe source for each field), its PSN
// sequence, and what it accepts: a UD SEND ONLY with P_Key 0xFFFF, Q_Key 0x80010000 and a
// 256-byte MAD. Every other packet is dropped and counted under its reason. No capture of
// rxe's GSI traffic exists yet (tests/data has none); the values come from rxe's source.
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <vector>

#include "rocev2/encap.h"
#include "rocev2/gsi.h"
#include "rocev2/wire.h"
#include "tests/sample_mad.h"

namespace rrdma::rocev2 {
namespace {

using Bytes = std::vector<std::uint8_t>;

const stack::Ipv4Address kIpA{0x0A4D0003};  // 10.77.0.3 and .2, as in the rxe captures
const stack::Ipv4Address kIpB{0x0A4D0002};
const stack::MacAddress kMacA{{2, 0, 0, 0, 0, 3}};
const stack::MacAddress kMacB{{2, 0, 0, 0, 0, 2}};
const Instant kNow{};

using test::sample_mad;

// The link: keeps each packet with its own copy of the payload; refuses when told to.
struct Sent {
  OutgoingPacket out;
  Bytes payload;
  std::uint16_t udp_source_port;
};
class RecordingLink final : public GsiLink {
 public:
  std::vector<Sent> sent;
  bool refuse = false;
  bool send_gsi(const OutgoingPacket& out, std::uint16_t port, Instant) override {
    if (refuse) return false;
    sent.push_back({out, Bytes(out.packet.payload.begin(), out.packet.payload.end()), port});
    sent.back().out.packet.payload = sent.back().payload;
    return true;
  }
};

struct Received {
  stack::Ipv4Address source;
  std::uint16_t udp_source_port;
  Qpn source_qp;
  Pkey pkey;
  Bytes mad;
  Bytes ipv4_header;
};
class RecordingHandler final : public MadHandler {
 public:
  std::vector<Received> mads;
  std::vector<std::string>* order = nullptr;
  void on_mad(const ReceivedMad& m, Instant) override {
    if (order) order->push_back("handler");
    mads.push_back({m.source, m.udp_source_port, m.source_qp, m.pkey, Bytes(m.mad.begin(), m.mad.end()),
                    Bytes(m.ipv4_header.begin(), m.ipv4_header.end())});
  }
};

class RecordingObserver final : public GsiObserver {
 public:
  std::vector<std::string> events;
  void on_gsi_received(const TransportPacket&, GsiDrop drop) override {
    events.push_back("received " + std::string(to_string(drop)));
  }
  void on_gsi_sent(const TransportPacket& p, bool accepted) override {
    events.push_back("sent psn " + std::to_string(p.bth.psn.value()) + (accepted ? "" : " refused"));
  }
};

TEST_CASE("gsi: a MAD goes out as rxe's QP 1 sends it, UD SEND ONLY to QP 1 byte for byte", "[gsi]") {
  const auto mad = sample_mad();
  const TransportPacket p = gsi_packet(Psn(0x123456), mad);
  Bytes bytes(transport_length(p));
  REQUIRE(emit_transport(p, bytes) == EmitError::none);
  REQUIRE(bytes.size() == 12 + 8 + 256 + 4);  // the UDP payload, ICRC included (not written here)
  // BTH (IBA 9.2): opcode 0x64, SE 0 M 0 PadCnt 0 TVer 0, P_Key 0xFFFF, FECN/BECN/resv 0,
  // DestQP 1, AckReq 1 (rxe's GSI QP is not IB_QPT_UD: rxe_req.c), PSN.
  const Bytes bth{0x64, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x01, 0x80, 0x12, 0x34, 0x56};
  CHECK(Bytes(bytes.begin(), bytes.begin() + 12) == bth);
  // DETH (IBA 9.3.3): Q_Key 0x80010000, reserved 0, source QP 1.
  const Bytes deth{0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01};
  CHECK(Bytes(bytes.begin() + 12, bytes.begin() + 20) == deth);
  CHECK(Bytes(bytes.begin() + 20, bytes.begin() + 276) == Bytes(mad.begin(), mad.end()));
  CHECK(frame_length(p) == 14 + 20 + 8 + 12 + 8 + 256 + 4);  // 322 bytes (UDP 288, IPv4 308), no pad
  CHECK(kGsiUdpSourcePort == 0xC000 + ((1u * 0x61C88647u) >> 18));
  CHECK(kGsiUdpSourcePort == 55410);
}

TEST_CASE("gsi: a whole frame built from the endpoint's packet parses back and is accepted", "[gsi]") {
  RecordingLink link;
  GsiEndpoint a(link);
  const auto mad = sample_mad(0x0010, 9);
  REQUIRE(a.send(kIpB, mad, kNow));
  REQUIRE(link.sent.size() == 1);
  const Sent& s = link.sent[0];
  CHECK(s.out.dest == kIpB);
  CHECK(s.out.src_qpn == kGsiQpn);
  CHECK(s.udp_source_port == kGsiUdpSourcePort);

  Bytes frame(frame_length(s.out.packet));
  REQUIRE(build_frame(roce_headers(kMacA, kMacB, kIpA, kIpB, s.udp_source_port, 0x5c68), s.out.packet, frame) ==
          EmitError::none);
  RoceFrame parsed;
  REQUIRE(parse_frame(frame, parsed).ok());
  CHECK(parsed.headers.udp.source_port == 0xD872);
  CHECK(parsed.headers.udp.destination_port == kRoceV2Port);
  CHECK(parsed.packet.bth.opcode == Opcode::UdSendOnly);
  CHECK(parsed.packet.bth.pkey == Pkey(0xFFFF));
  CHECK(parsed.packet.bth.dest_qp == kGsiQpn);
  CHECK(parsed.packet.bth.ack_req);
  CHECK(!parsed.packet.bth.solicited);
  CHECK(parsed.packet.bth.psn == Psn(0));
  REQUIRE(parsed.packet.deth);
  CHECK(parsed.packet.deth->qkey == kGsiQkey);
  CHECK(parsed.packet.deth->src_qp == kGsiQpn);
  CHECK(check_gsi_packet(parsed.packet) == GsiDrop::none);

  RecordingHandler handler;
  GsiEndpoint b(link);
  b.set_handler(&handler);
  CHECK(b.receive(parsed.packet, PacketSource{kIpA, parsed.headers.udp.source_port, parsed.ipv4_header}, kNow) ==
        GsiDrop::none);
  REQUIRE(handler.mads.size() == 1);
  const Received& r = handler.mads[0];
  CHECK(r.source == kIpA);
  CHECK(r.udp_source_port == 0xD872);
  CHECK(r.source_qp == kGsiQpn);
  CHECK(r.pkey == Pkey(0xFFFF));
  CHECK(r.mad == Bytes(mad.begin(), mad.end()));
  CHECK(r.ipv4_header == Bytes(frame.begin() + 14, frame.begin() + 34));
  CHECK(b.counters().rx_packets == 1);
  CHECK(b.counters().rx_mads == 1);
}

TEST_CASE("gsi: the PSN counts up from 0 by one per packet the link takes", "[gsi]") {
  RecordingLink link;
  RecordingObserver observer;
  GsiEndpoint e(link);
  e.set_observer(&observer);
  const auto mad = sample_mad();
  CHECK(e.next_psn() == Psn(0));
  REQUIRE(e.send(kIpB, mad, kNow));
  REQUIRE(e.send(kIpA, mad, kNow));
  link.refuse = true;  // no route: rxe fails before it takes a PSN
  CHECK_FALSE(e.send(stack::Ipv4Address{0x08080808}, mad, kNow));
  link.refuse = false;
  REQUIRE(e.send(kIpB, mad, kNow));
  REQUIRE(link.sent.size() == 3);
  CHECK(link.sent[0].out.packet.bth.psn == Psn(0));
  CHECK(link.sent[1].out.packet.bth.psn == Psn(1));
  CHECK(link.sent[2].out.packet.bth.psn == Psn(2));
  CHECK(e.next_psn() == Psn(3));
  CHECK(e.counters().tx_mads == 3);
  CHECK(e.counters().tx_not_sent == 1);
  CHECK(observer.events == std::vector<std::string>{"sent psn 0", "sent psn 1", "sent psn 2 refused", "sent psn 2"});
}

// A valid GSI packet as a value, for the drop cases to spoil one field at a time.
struct GoodPacket {
  std::array<std::uint8_t, kMadLength + 8> bytes{};
  TransportPacket packet;
  GoodPacket() {
    packet = gsi_packet(Psn(7), MadSpan(bytes.data(), kMadLength));
    packet.bth.ack_req = false;  // AckReq means nothing on UD: either is accepted
  }
};

TEST_CASE("gsi: every bad field is dropped and counted under its reason, and the handler never sees it", "[gsi]") {
  struct Case {
    const char* what;
    void (*spoil)(GoodPacket&);
    GsiDrop reason;
  };
  const Case cases[] = {
      {"QPN 0 (SMI)", [](GoodPacket& g) { g.packet.bth.dest_qp = kSmiQpn; }, GsiDrop::smi_qp},
      {"QPN 2", [](GoodPacket& g) { g.packet.bth.dest_qp = Qpn(2); }, GsiDrop::not_gsi_qp},
      {"RC SEND ONLY", [](GoodPacket& g) {
         g.packet.bth.opcode = Opcode::RcSendOnly;
         g.packet.deth.reset();
       }, GsiDrop::bad_opcode},
      {"UC SEND ONLY", [](GoodPacket& g) {
         g.packet.bth.opcode = Opcode::UcSendOnly;
         g.packet.deth.reset();
       }, GsiDrop::bad_opcode},
      {"UD SEND ONLY with immediate", [](GoodPacket& g) {
         g.packet.bth.opcode = Opcode::UdSendOnlyImm;
         g.packet.imm = ImmDt{1};
       }, GsiDrop::bad_opcode},
      {"P_Key 0x1234", [](GoodPacket& g) { g.packet.bth.pkey = Pkey(0x1234); }, GsiDrop::bad_pkey},
      {"P_Key 0xFFFE", [](GoodPacket& g) { g.packet.bth.pkey = Pkey(0xFFFE); }, GsiDrop::bad_pkey},
      {"P_Key 0x8000", [](GoodPacket& g) { g.packet.bth.pkey = Pkey(0x8000); }, GsiDrop::bad_pkey},
      {"Q_Key 0x11111111", [](GoodPacket& g) { g.packet.deth->qkey = Qkey(0x11111111); }, GsiDrop::bad_qkey},
      {"Q_Key 0x80000000", [](GoodPacket& g) { g.packet.deth->qkey = Qkey(0x80000000); }, GsiDrop::bad_qkey},
      {"no payload", [](GoodPacket& g) { g.packet.payload = g.packet.payload.first(0); }, GsiDrop::short_mad},
      {"255 bytes", [](GoodPacket& g) { g.packet.payload = g.packet.payload.first(255); }, GsiDrop::short_mad},
      {"257 bytes", [](GoodPacket& g) { g.packet.payload = ByteSpan(g.bytes.data(), 257); }, GsiDrop::long_mad},
      {"264 bytes", [](GoodPacket& g) { g.packet.payload = ByteSpan(g.bytes.data(), 264); }, GsiDrop::long_mad},
  };
  RecordingLink link;
  RecordingHandler handler;
  RecordingObserver observer;
  GsiEndpoint e(link);
  e.set_handler(&handler);
  e.set_observer(&observer);
  std::array<std::uint64_t, kGsiDropReasons> expected{};
  for (const Case& c : cases) {
    INFO(c.what);
    GoodPacket g;
    CHECK(check_gsi_packet(g.packet) == GsiDrop::none);
    c.spoil(g);
    CHECK(check_gsi_packet(g.packet) == c.reason);
    CHECK(e.receive(g.packet, PacketSource{kIpA, 0xD872, {}}, kNow) == c.reason);
    ++expected[static_cast<std::size_t>(c.reason)];
    CHECK(observer.events.back() == "received " + std::string(to_string(c.reason)));
  }
  CHECK(handler.mads.empty());
  CHECK(e.counters().rx_dropped == expected);
  CHECK(e.counters().rx_packets == std::size(cases));
  CHECK(e.counters().rx_mads == 0);
  CHECK(link.sent.empty());
}

TEST_CASE("gsi: accepted as rxe accepts: P_Key 0x7FFF, any AckReq, SE, PSN and source QP", "[gsi]") {
  RecordingLink link;
  RecordingHandler handler;
  GsiEndpoint e(link);
  e.set_handler(&handler);
  GoodPacket g;
  g.packet.bth.pkey = Pkey(0x7FFF);  // pkey_match(0x7FFF, 0xFFFF): the limited member of the default
  g.packet.bth.ack_req = true;
  g.packet.bth.solicited = true;
  g.packet.bth.psn = Psn(0xFFFFFF);
  g.packet.deth->src_qp = Qpn(0x11);
  CHECK(e.receive(g.packet, PacketSource{kIpA, 0xC001, {}}, kNow) == GsiDrop::none);
  REQUIRE(handler.mads.size() == 1);
  CHECK(handler.mads[0].source_qp == Qpn(0x11));
  CHECK(handler.mads[0].pkey == Pkey(0x7FFF));
  CHECK(handler.mads[0].udp_source_port == 0xC001);
}

TEST_CASE("gsi: the observer hears of a MAD before the handler, and without a handler it is counted", "[gsi]") {
  RecordingLink link;
  RecordingObserver observer;
  RecordingHandler handler;
  handler.order = &observer.events;
  GsiEndpoint e(link);
  e.set_observer(&observer);
  GoodPacket g;
  CHECK(e.receive(g.packet, PacketSource{kIpA, 0xD872, {}}, kNow) == GsiDrop::none);
  CHECK(e.counters().rx_no_handler == 1);
  CHECK(e.counters().rx_mads == 0);
  e.set_handler(&handler);
  CHECK(e.receive(g.packet, PacketSource{kIpA, 0xD872, {}}, kNow) == GsiDrop::none);
  CHECK(observer.events == std::vector<std::string>{"received none", "received none", "handler"});
  CHECK(e.counters().rx_mads == 1);

  DiscardingMadHandler stand_in;  // the daemon's handler until the CM exists
  e.set_handler(&stand_in);
  CHECK(e.receive(g.packet, PacketSource{kIpA, 0xD872, {}}, kNow) == GsiDrop::none);
  CHECK(stand_in.discarded() == 1);
  CHECK(e.counters().rx_mads == 2);
}

TEST_CASE("gsi: the MAD header peek reads base version, class, class version, method and attribute", "[gsi]") {
  const auto mad = sample_mad();
  const MadHeaderPeek h = peek_mad_header(mad);
  CHECK(h.base_version == 1);
  CHECK(h.mgmt_class == 0x07);
  CHECK(h.class_version == 2);
  CHECK(h.method == 0x03);
  CHECK(h.attribute_id == 0x0010);
}

TEST_CASE("gsi: QP 0 and 1 are the management QPs, and names of drop reasons are distinct", "[gsi]") {
  CHECK(is_management_qp(Qpn(0)));
  CHECK(is_management_qp(Qpn(1)));
  CHECK_FALSE(is_management_qp(Qpn(2)));
  CHECK_FALSE(is_management_qp(Qpn(17)));
  const GsiCounters counters;
  const auto names = named(counters);
  for (std::size_t i = 0; i < names.size(); ++i)
    for (std::size_t j = i + 1; j < names.size(); ++j) CHECK(names[i].first != names[j].first);
  CHECK(names.size() == 3 + (kGsiDropReasons - 1) + 2);
}

}  // namespace
}  // namespace rrdma::rocev2
