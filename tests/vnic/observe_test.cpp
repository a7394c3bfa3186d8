// The pure parts of `rrdma-vnic capture`, `stats` and `trace`: the capture record framing
// (hostile input on the CLI's side), AETH syndromes, the RoCE counters, the trace filter
// a client sends (hostile input on the daemon's side), rendering, and frame decoding; the
// GSI endpoint's trace lines through the daemon's Telemetry, over a socketpair.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <string>
#include <vector>

#include "rocev2/cm/mad.h"
#include "rocev2/encap.h"
#include "rocev2/gsi.h"
#include "tests/sample_mad.h"
#include "vnic/capture.h"
#include "vnic/event_loop.h"
#include "vnic/roce_stats.h"
#include "vnic/telemetry.h"
#include "vnic/trace.h"

using namespace rrdma;
using namespace rrdma::vnic;

namespace {

std::vector<std::uint8_t> record(FrameDirection direction, std::uint64_t ns, std::vector<std::uint8_t> frame) {
  auto bytes = encode_capture_header(direction, ns, frame.size());
  bytes.insert(bytes.end(), frame.begin(), frame.end());
  return bytes;
}

rocev2::TransportPacket packet(rocev2::Opcode opcode, std::uint32_t dest_qp, std::span<const std::uint8_t> payload) {
  rocev2::TransportPacket p;
  p.bth.opcode = opcode;
  p.bth.dest_qp = rocev2::Qpn{dest_qp};
  p.payload = payload;
  return p;
}

}  // namespace

TEST_CASE("capture records round-trip and refuse what does not add up") {
  const auto bytes = record(FrameDirection::Sent, 1234567890123ull, {1, 2, 3, 4, 5});
  const auto parsed = parse_capture_record(ByteSpan(bytes));
  REQUIRE(parsed);
  CHECK(parsed->direction == FrameDirection::Sent);
  CHECK(parsed->realtime_ns == 1234567890123ull);
  REQUIRE(parsed->frame.size() == 5);
  CHECK(parsed->frame[4] == 5);

  CHECK_FALSE(parse_capture_record(ByteSpan(bytes).first(kCaptureRecordHeader - 1)));
  auto wrong = bytes;
  wrong[0] = '{';
  CHECK_FALSE(parse_capture_record(ByteSpan(wrong)));
  wrong = bytes;
  wrong[1] = 3;  // no such direction
  CHECK_FALSE(parse_capture_record(ByteSpan(wrong)));
  wrong = bytes;
  wrong.push_back(0);  // one byte more than the header says
  CHECK_FALSE(parse_capture_record(ByteSpan(wrong)));
  const std::vector<std::uint8_t> huge(kCaptureMaxFrame + 1, 0);
  const auto too_big = record(FrameDirection::Received, 0, huge);
  CHECK_FALSE(parse_capture_record(ByteSpan(too_big)));
}

TEST_CASE("capture totals: frames looped back to our own address count as received") {
  const std::vector<stack::Counter> counters = {
      {"ethernet", "rx_frames", 7}, {"ethernet", "tx_frames", 5}, {"ipv4", "rx_loopback", 11},
      {"ipv4", "tx_loopback", 12}, {"ipv4", "rx_packets", 100}, {"udp", "rx_frames", 1000}};
  const FrameTotals totals = frame_totals(counters);
  CHECK(totals.received == 7 + 11);
  CHECK(totals.sent == 5);
}

TEST_CASE("AETH syndromes: ACK, RNR NAK, NAK codes (IBA 9.7.5.1)") {
  CHECK(ack_kind(0x1F) == AckKind::Ack);
  CHECK(ack_kind(0x20 | 12) == AckKind::RnrNak);
  CHECK(ack_kind(0x60) == AckKind::Nak);
  CHECK(ack_kind(0x40) == AckKind::Reserved);
  CHECK(nak_code_name(0x60) == "psn_sequence_error");
  CHECK(nak_code_name(0x61) == "invalid_request");
  CHECK(nak_code_name(0x62) == "remote_access_error");
  CHECK(nak_code_name(0x63) == "remote_operational_error");
  CHECK(nak_code_name(0x64) == "invalid_rd_request");
  CHECK(nak_code_name(0x67) == "reserved_7");
}

TEST_CASE("RoCE counters by opcode, ACK kind, decision and QP") {
  RoceStats stats;
  const std::array<std::uint8_t, 1024> payload{};
  for (int i = 0; i < 3; ++i) {
    stats.count_packet(true, packet(rocev2::Opcode::RcWriteMiddle, 0x22, payload), rocev2::Qpn{0x11});
  }
  auto nak = packet(rocev2::Opcode::RcAck, 0x11, {});
  nak.aeth = rocev2::Aeth{0x60, rocev2::Msn{1}};
  stats.count_packet(false, nak, rocev2::Qpn{0x11});
  auto ack = nak;
  ack.aeth->syndrome = 0x1F;
  stats.count_packet(false, ack, rocev2::Qpn{0x11});
  rocev2::Bth bth;
  bth.opcode = rocev2::Opcode::RcWriteMiddle;
  stats.count_decision(rocev2::Qpn{0x11}, bth, rocev2::PacketDecision::Retransmitted, "NAK PSN sequence error");
  stats.count_decision(rocev2::Qpn{0x11}, bth, rocev2::PacketDecision::Dropped, "Q_Key mismatch");

  nlohmann::json out;
  stats.add_to(out);
  const auto& middle = out["roce_opcodes"]["rc_rdma_write_middle"];
  CHECK(middle["tx_packets"] == 3);
  CHECK(middle["tx_bytes"] == 3 * 1024);
  CHECK(middle["tx_retransmitted"] == 1);
  CHECK(middle["rx_packets"] == 0);
  CHECK(out["roce_acks"]["rx_acks"] == 1);
  CHECK(out["roce_acks"]["rx_naks"] == 1);
  CHECK(out["roce_acks"]["rx_nak_psn_sequence_error"] == 1);
  CHECK(out["roce_acks"]["tx_acks"] == 0);
  CHECK(out["roce_retransmissions"]["nak_psn_sequence_error"] == 1);
  CHECK(out["roce_drops"]["q_key_mismatch"] == 1);
  CHECK(out["roce_decisions"]["retransmitted"] == 1);
  const auto& qp = out["qps"]["17"];
  CHECK(qp["tx_packets"] == 3);
  CHECK(qp["rx_packets"] == 2);
  CHECK(qp["rx_nak_psn_sequence_error"] == 1);
  CHECK(qp["retransmissions"]["nak_psn_sequence_error"] == 1);
}

// Decisions are counted in an array indexed by the enum and named only for `stats`: every
// one of them, the last (UC message dropped) included, must come out under its own name.
TEST_CASE("RoCE counters: every engine decision is counted and named") {
  RoceStats stats;
  rocev2::Bth bth;
  const auto last = static_cast<int>(rocev2::PacketDecision::UcMessageDropped);
  for (int d = 0; d <= last; ++d)
    stats.count_decision(rocev2::Qpn{0x11}, bth, static_cast<rocev2::PacketDecision>(d), "why");
  nlohmann::json out;
  stats.add_to(out);
  CHECK(out["roce_decisions"].size() == static_cast<std::size_t>(last + 1));
  CHECK(out["qps"]["17"]["decisions"].size() == static_cast<std::size_t>(last + 1));
  CHECK(out["roce_decisions"]["uc_message_dropped"] == 1);
  CHECK(out["roce_decisions"]["out_of_sequence_nak_sent"] == 1);
}

TEST_CASE("trace filters from a client are checked") {
  std::string error;
  auto filter = parse_trace_filter({{"cmd", "trace"}}, error);
  REQUIRE(filter);
  CHECK(filter->layers == kAllTraceLayers);
  CHECK_FALSE(filter->qpn);
  filter = parse_trace_filter({{"cmd", "trace"}, {"qp", 17}, {"layers", nlohmann::json::array({"roce", "qp"})}}, error);
  REQUIRE(filter);
  CHECK(filter->qpn == 17u);
  CHECK(filter->layers == ((1u << 4) | (1u << 5)));
  CHECK_FALSE(parse_trace_filter({{"qp", "17"}}, error));
  CHECK_FALSE(parse_trace_filter({{"qp", 0x1000000}}, error));
  CHECK_FALSE(parse_trace_filter({{"qp", -1}}, error));
  CHECK_FALSE(parse_trace_filter({{"layers", nlohmann::json::array({"tcp"})}}, error));
  CHECK(error.find("unknown layer") != std::string::npos);
  CHECK_FALSE(parse_trace_filter({{"layers", nlohmann::json::array()}}, error));
  CHECK_FALSE(parse_trace_filter({{"layers", "roce"}}, error));
}

TEST_CASE("rendering keeps the first line with whatever passes the filter") {
  TraceEvent event;
  event.lines = {{TraceLayer::Eth, "12:00:00.000000 rx frame 60 bytes"},
                 {TraceLayer::Eth, "  eth   a > b"},
                 {TraceLayer::Roce, "  roce  RC SEND_ONLY"},
                 {TraceLayer::Qp, "  qp    accepted"}};
  event.qpn = 0x11;
  CHECK(render(event, {}) == "12:00:00.000000 rx frame 60 bytes\n  eth   a > b\n  roce  RC SEND_ONLY\n  qp    accepted\n");
  TraceFilter roce_only;
  roce_only.layers = 1u << 4;
  CHECK(render(event, roce_only) == "12:00:00.000000 rx frame 60 bytes\n  roce  RC SEND_ONLY\n");
  TraceFilter verbs_only;
  verbs_only.layers = 1u << 6;
  CHECK(render(event, verbs_only).empty());
  TraceFilter other_qp;
  other_qp.qpn = 0x12;
  CHECK(render(event, other_qp).empty());
  event.qpn.reset();
  TraceFilter same_qp;
  same_qp.qpn = 0x11;
  CHECK(render(event, same_qp).empty());  // not a QP's event
}

TEST_CASE("frames are described layer by layer, and hostile ones stop where they break") {
  // An ARP request, 10.0.0.2 asks for 10.0.0.1 (RFC 826), padded to 60 bytes.
  std::vector<std::uint8_t> arp = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 2, 0x08, 0x06,
                                   0, 1, 0x08, 0, 6, 4, 0, 1, 0x02, 0, 0, 0, 0, 2, 10, 0, 0, 2,
                                   0, 0, 0, 0, 0, 0, 10, 0, 0, 1};
  arp.resize(60, 0);
  auto event = describe_frame(ByteSpan(arp), FrameDirection::Received, "T", std::nullopt);
  REQUIRE(event.lines.size() == 3);
  CHECK(event.lines[0].text == "T rx frame 60 bytes");
  CHECK(event.lines[1].text == "  eth   02:00:00:00:00:02 > ff:ff:ff:ff:ff:ff 0x0806 ARP");
  CHECK(event.lines[2].text == "  arp   who has 10.0.0.1? tell 10.0.0.2");
  CHECK(event.lines[2].layer == TraceLayer::Arp);
  CHECK_FALSE(event.qpn);

  const std::vector<std::uint8_t> runt = {1, 2, 3};
  event = describe_frame(ByteSpan(runt), FrameDirection::Sent, "T", std::nullopt);
  REQUIRE(event.lines.size() == 2);
  CHECK(event.lines[0].text == "T tx frame 3 bytes");
  CHECK(event.lines[1].text == "  eth   shorter than an Ethernet header");

  // IPv4 to UDP 4791 whose payload is no transport packet.
  std::vector<std::uint8_t> udp = {0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00,
                                   0x45, 0, 0, 32, 0, 7, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 2, 10, 0, 0, 1,
                                   0xc0, 0x00, 0x12, 0xb7, 0, 12, 0, 0, 0xde, 0xad, 0xbe, 0xef};
  event = describe_frame(ByteSpan(udp), FrameDirection::Received, "T", std::nullopt);
  REQUIRE(event.lines.size() >= 3);
  CHECK(event.lines[2].text.rfind("  ip    10.0.0.2 > 10.0.0.1 ttl 64 id 0x0007 len 32", 0) == 0);
  bool saw_udp = false, refused = false;
  for (const auto& line : event.lines) {
    saw_udp = saw_udp || line.text == "  udp   49152 > 4791 len 12 (RoCE v2)";
    refused = refused || line.text.rfind("  roce  not a transport packet", 0) == 0;
  }
  CHECK(saw_udp);
  CHECK(refused);
}

namespace {

// The daemon's observers (Telemetry: the RoCE port's, the GSI endpoint's, the stack's) with
// a trace session on one end of a socketpair; the test reads the other end.
struct TraceScene {
  TraceScene() {
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) == 0);
    telemetry.start_trace(fds[0], {{"cmd", "trace"}});
    CHECK(next().find("tracing") != std::string::npos);
  }
  ~TraceScene() { ::close(fds[1]); }
  // The next message, or "" if none is waiting.
  std::string next() {
    char buffer[8192];
    const ssize_t got = ::recv(fds[1], buffer, sizeof(buffer), MSG_DONTWAIT);
    return got > 0 ? std::string(buffer, static_cast<std::size_t>(got)) : std::string();
  }
  // What the open event holds: another event (an ARP note) makes the tracer send it.
  std::string finish_event() {
    telemetry.arp_failed(stack::Ipv4Address{1}, 0);
    std::string event = next();
    next();  // the note itself
    return event;
  }
  EventLoop loop{EventLoopConfig{}};
  FrameCapture capture{loop, [] { return FrameTotals{}; }};
  Telemetry telemetry{loop, capture};
  int fds[2] = {-1, -1};
};

std::vector<std::uint8_t> gsi_frame(const rocev2::TransportPacket& packet) {
  std::vector<std::uint8_t> frame(rocev2::frame_length(packet));
  const stack::MacAddress from{{2, 0, 0, 0, 0, 1}}, to{{2, 0, 0, 0, 0, 2}};
  const auto headers = rocev2::roce_headers(from, to, stack::Ipv4Address{0x0A000001}, stack::Ipv4Address{0x0A000002},
                                            rocev2::kGsiUdpSourcePort, 1);
  REQUIRE(rocev2::build_frame(headers, packet, frame) == rocev2::EmitError::none);
  return frame;
}

}  // namespace

TEST_CASE("trace: a MAD for QP 1 has a gsi line with the CM message decoded, a dropped one its reason") {
  TraceScene scene;
  const auto mad = test::sample_mad(0x0010);
  const rocev2::TransportPacket packet = rocev2::gsi_packet(rocev2::Psn(5), mad);
  const std::vector<std::uint8_t> frame = gsi_frame(packet);

  // Received: the frame's layers, then what the endpoint did.
  scene.capture.on_frame(ByteSpan(frame), FrameDirection::Received);
  scene.telemetry.on_transport(false, packet, rocev2::kGsiQpn, stack::Ipv4Address{0x0A000001});
  scene.telemetry.on_gsi_received(packet, rocev2::GsiDrop::none);
  std::string text = scene.finish_event();
  INFO(text);
  CHECK(text.find("rx frame 322 bytes") != std::string::npos);
  CHECK(text.find("  roce  UD SEND_ONLY qp 0x000001 psn 5") != std::string::npos);
  // The sample's counting bytes happen to make a REQ the codec takes: the line is its decoding.
  const auto message = rocev2::cm::parse_cm_mad(ByteSpan(mad.data(), mad.size()));
  REQUIRE(message);
  const std::string header = rocev2::cm::describe(*message);
  CHECK(header.starts_with("CM REQ tid 0x08090a0b0c0d0e0f "));
  CHECK(text.find("\n  gsi   to the GSI endpoint: " + header + "\n") != std::string::npos);

  // A MAD of another class (or a CM MAD that does not parse): its header fields.
  const auto other = test::sample_mad(0x0001);
  rocev2::TransportPacket other_packet = rocev2::gsi_packet(rocev2::Psn(6), other);
  std::array<std::uint8_t, rocev2::kMadLength> not_cm = other;
  not_cm[1] = 0x81;
  other_packet.payload = ByteSpan(not_cm.data(), not_cm.size());
  const std::vector<std::uint8_t> other_frame = gsi_frame(other_packet);
  scene.capture.on_frame(ByteSpan(other_frame), FrameDirection::Received);
  scene.telemetry.on_gsi_received(other_packet, rocev2::GsiDrop::none);
  text = scene.finish_event();
  CHECK(text.find("\n  gsi   to the GSI endpoint: MAD base 1 class 0x81 version 2 method 0x03 attribute 0x0001\n") !=
        std::string::npos);

  // Dropped: the reason instead of the header.
  rocev2::TransportPacket spoilt = packet;
  spoilt.deth->qkey = rocev2::Qkey(0x11111111);
  const std::vector<std::uint8_t> spoilt_frame = gsi_frame(spoilt);
  scene.capture.on_frame(ByteSpan(spoilt_frame), FrameDirection::Received);
  scene.telemetry.on_gsi_received(spoilt, rocev2::GsiDrop::bad_qkey);
  text = scene.finish_event();
  CHECK(text.find("\n  gsi   dropped by the GSI endpoint: bad_qkey\n") != std::string::npos);

  // Sent: the RoCE port saw the packet, the frame left, then the endpoint's line.
  scene.telemetry.on_transport(true, packet, rocev2::kGsiQpn, stack::Ipv4Address{0x0A000002});
  scene.capture.on_frame(ByteSpan(frame), FrameDirection::Sent);
  scene.telemetry.on_gsi_sent(packet, true);
  text = scene.finish_event();
  CHECK(text.find("tx frame 322 bytes") != std::string::npos);
  CHECK(text.find("\n  gsi   sent by the GSI endpoint: " + header + "\n") != std::string::npos);

  // Sent while ARP resolves: no frame yet, so an event of its own that says so.
  scene.telemetry.on_transport(true, packet, rocev2::kGsiQpn, stack::Ipv4Address{0x0A000002});
  scene.telemetry.on_gsi_sent(packet, true);
  text = scene.next();
  CHECK(text.find("sent by the GSI endpoint: " + header + ", waiting for ARP") != std::string::npos);
}

TEST_CASE("trace: the gsi, cm and rdma_cm layers are ones a client may ask for") {
  const std::pair<const char*, TraceLayer> layers[] = {
      {"gsi", TraceLayer::Gsi}, {"cm", TraceLayer::Cm}, {"rdma_cm", TraceLayer::RdmaCm}};
  for (const auto& [name, layer] : layers) {
    INFO(name);
    std::string error;
    const auto filter = parse_trace_filter({{"cmd", "trace"}, {"layers", nlohmann::json::array({name})}}, error);
    REQUIRE(filter);
    CHECK(filter->layers == (1u << static_cast<unsigned>(layer)));
    CHECK(trace_layer_from(name) == layer);
    CHECK(to_string(layer) == name);
  }
}

TEST_CASE("trace: an rdma_cm id's state change is an rdma_cm line") {
  TraceScene scene;
  scene.telemetry.on_cm_id_transition(7, verbs::CmIdState::AddrQuery, verbs::CmIdState::AddrResolved);
  const std::string text = scene.next();
  INFO(text);
  CHECK(text.find(" rdma_cm id 7: ADDR_QUERY -> ADDR_RESOLVED") != std::string::npos);

  // `--layer rdma_cm` keeps it, `--layer cm` (the CM's connections) does not.
  TraceEvent event;
  event.lines.push_back({TraceLayer::RdmaCm, "12:00:00.000000 rdma_cm id 7: ADDR_QUERY -> ADDR_RESOLVED"});
  TraceFilter rdma_cm_only, cm_only;
  rdma_cm_only.layers = 1u << static_cast<unsigned>(TraceLayer::RdmaCm);
  cm_only.layers = 1u << static_cast<unsigned>(TraceLayer::Cm);
  CHECK_FALSE(render(event, rdma_cm_only).empty());
  CHECK(render(event, cm_only).empty());
}
