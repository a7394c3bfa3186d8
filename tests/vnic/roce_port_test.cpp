// The RoCE v2 glue over the real stack: two vnics' Interfaces wired frame to frame (ARP,
// IPv4, UDP, ICRC all real), each with its RocePort and Nic, and a test client on each.
// What only this level shows: the PadCnt and ICRC of odd-sized packets, the UDP source port
// of a connected QP, that a corrupted frame is counted and dropped, and that packets for QP 0
// and 1 go to the GSI endpoint (rocev2/gsi.h) and never to the Nic, while the endpoint's MADs
// leave through the same frame path.
#include <catch2/catch.hpp>

#include <array>
#include <deque>
#include <optional>
#include <numeric>

#include "rocev2/encap.h"
#include "rocev2/gsi.h"
#include "stack/interface.h"
#include "tests/sample_mad.h"
#include "tests/verbs/nic_client.h"
#include "vnic/ports/roce_port.h"

namespace rrdma::vnic {
namespace {

using namespace rrdma::verbs::test;
using verbs::Nic;
using verbs::RecvWqe;
using verbs::SendWqe;

class QueueSink final : public stack::FrameSink {
 public:
  std::deque<std::vector<std::uint8_t>> frames;
  void transmit(ByteSpan frame) override { frames.emplace_back(frame.begin(), frame.end()); }
};

constexpr std::uint32_t kIpA = kTestIpA;
constexpr std::uint32_t kIpB = kTestIpB;

stack::InterfaceConfig interface_config(std::uint32_t ip, std::uint8_t mac_byte) {
  stack::InterfaceConfig config;
  config.mac = stack::MacAddress{{2, 0, 0, 0, 0, mac_byte}};
  config.address = stack::Ipv4Address{ip};
  config.prefix_len = 24;
  config.mtu = 1500;
  return config;
}

// What a GSI handler (the CM, later) is given, kept beyond the call.
struct ReceivedMad {
  stack::Ipv4Address source;
  std::uint16_t udp_source_port;
  rocev2::Qpn source_qp;
  std::vector<std::uint8_t> mad;
};

// Keeps every MAD; when `answer` is set, sends it back to the sender through `endpoint` from
// inside the call, as the CM will answer a REQ.
class RecordingMadHandler final : public rocev2::MadHandler {
 public:
  std::vector<ReceivedMad> mads;
  rocev2::GsiEndpoint* endpoint = nullptr;
  std::optional<std::array<std::uint8_t, rocev2::kMadLength>> answer;
  void on_mad(const rocev2::ReceivedMad& m, Instant now) override {
    mads.push_back({m.source, m.udp_source_port, m.source_qp, {m.mad.begin(), m.mad.end()}});
    if (answer && endpoint) endpoint->send(m.source, *answer, now);
  }
};

struct Vnic {
  Vnic(std::uint32_t ip, std::uint8_t mac_byte)
      : interface(interface_config(ip, mac_byte), sink),
        port(interface),
        nic(verbs::NicConfig{stack::Ipv4Address{ip}, stack::MacAddress{{2, 0, 0, 0, 0, mac_byte}}, 1500, true, {}, {}}, port,
            watcher) {
    port.attach(&nic);
    gsi.set_handler(&mads);
    mads.endpoint = &gsi;
    port.attach_gsi(&gsi);
  }
  ~Vnic() {
    port.attach(nullptr);
    port.attach_gsi(nullptr);
  }
  QueueSink sink;
  stack::Interface interface;
  RocePort port;
  FakeWatcher watcher;
  Nic nic;
  TestClient user{nic};
  RecordingMadHandler mads;
  rocev2::GsiEndpoint gsi{port};
};

// Carries frames both ways (through `tamper` first) until nothing moves.
template <typename Tamper>
void exchange(Vnic& a, Vnic& b, Tamper tamper) {
  for (int round = 0; round < 2000; ++round) {
    bool moved = a.watcher.run_ready();
    moved = b.watcher.run_ready() || moved;
    for (auto [from, to] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
      while (!from->sink.frames.empty()) {
        std::vector<std::uint8_t> frame = std::move(from->sink.frames.front());
        from->sink.frames.pop_front();
        tamper(frame);
        to->interface.receive_frame(ByteSpan(frame.data(), frame.size()), kNow);
        moved = true;
      }
    }
    if (!moved) return;
  }
  FAIL("the two vnics never went quiet");
}

void exchange(Vnic& a, Vnic& b) {
  exchange(a, b, [](std::vector<std::uint8_t>&) {});
}

using Scene = ConnectedPair<Vnic>;

// A's `source` and B's `target` (as long, zeroed), registered for RDMA WRITEs from the one
// into the other.
struct WriteBuffers {
  WriteBuffers(Scene& s, std::vector<std::uint8_t> bytes)
      : source(std::move(bytes)),
        target(source.size(), 0),
        src(reg_mr(s.a.user, s.da, source, IBV_ACCESS_LOCAL_WRITE)),
        dst(reg_mr(s.b.user, s.db, target, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)) {}
  // Posts a WRITE of the first `length` bytes of `source` to the start of `target` on A's QP;
  // exchange() carries it.
  void post(Scene& s, std::uint64_t wr_id, std::uint32_t length) {
    SendWqe wqe = wqe_for(wr_id, rocev2::WrOpcode::RdmaWrite, source, length, src.lkey);
    wqe.remote_addr = reinterpret_cast<std::uintptr_t>(target.data());
    wqe.rkey = dst.rkey;
    s.qa->post_send(wqe);
  }
  std::vector<std::uint8_t> source, target;
  Registration src, dst;
};

std::vector<std::uint8_t> counting_bytes(std::size_t size, std::uint8_t first) {
  std::vector<std::uint8_t> bytes(size);
  std::iota(bytes.begin(), bytes.end(), first);
  return bytes;
}

TEST_CASE("roce port: WRITEs of odd sizes cross the real stack with their pad and ICRC") {
  Scene s;
  WriteBuffers w(s, counting_bytes(5000, 3));
  std::uint64_t wr_id = 0;
  for (std::uint32_t length : {1u, 3u, 4095u, 4097u}) {
    std::fill(w.target.begin(), w.target.end(), 0);
    w.post(s, ++wr_id, length);
    exchange(s.a, s.b);
    INFO("length " << length);
    CHECK(std::equal(w.source.begin(), w.source.begin() + length, w.target.begin()));
    CHECK(w.target[length] == 0);
    const auto cqes = s.qa->poll();
    REQUIRE(cqes.size() == 1);
    CHECK(cqes[0].status == IBV_WC_SUCCESS);
  }
  CHECK(s.b.port.counters().rx_bad_icrc == 0);
  CHECK(s.b.port.counters().rx_bad_transport == 0);
  CHECK(s.a.port.counters().tx_emit_errors == 0);
}

TEST_CASE("roce port: frames carry RoCE v2 headers, the ICRC checks and the source port is the QP pair's") {
  Scene s;
  WriteBuffers w(s, std::vector<std::uint8_t>(64));
  w.post(s, 1, 13);
  int roce_frames = 0;
  exchange(s.a, s.b, [&](std::vector<std::uint8_t>& frame) {
    rocev2::RoceFrame parsed;
    if (!rocev2::parse_frame(ByteSpan(frame.data(), frame.size()), parsed).ok()) return;  // ARP
    ++roce_frames;
    const bool from_a = parsed.headers.ipv4.source == stack::Ipv4Address{kIpA};
    const rocev2::Qpn local(from_a ? s.qa->qpn : s.qb->qpn);
    const rocev2::Qpn remote(from_a ? s.qb->qpn : s.qa->qpn);
    CHECK(parsed.headers.udp.source_port == rocev2::udp_source_port_connected(local, remote));
    CHECK(parsed.headers.udp.destination_port == rocev2::kRoceV2Port);
  });
  CHECK(roce_frames == 2);  // the WRITE and its ACK
  CHECK(s.qa->poll().size() == 1);
}

// One frame path (rocev2/encap.h): the tests' frames, built by build_frame, are the daemon's
// frames. Each frame the port sends, rebuilt from its parsed header values and packet, comes
// out byte for byte the same: WRITEs with every pad count, their ACKs.
TEST_CASE("roce port: each frame it sends is the frame build_frame builds from the same values") {
  Scene s;
  WriteBuffers w(s, counting_bytes(5000, 5));
  int compared = 0;
  const auto rebuild_and_compare = [&](std::vector<std::uint8_t>& frame) {
    rocev2::RoceFrame parsed;
    if (!rocev2::parse_frame(ByteSpan(frame.data(), frame.size()), parsed).ok()) return;  // ARP
    std::vector<std::uint8_t> rebuilt(rocev2::frame_length(parsed.packet), 0xEE);
    REQUIRE(rocev2::build_frame(parsed.headers, parsed.packet, rebuilt) == rocev2::EmitError::none);
    CHECK(rebuilt == frame);
    ++compared;
  };
  std::uint64_t wr_id = 0;
  for (std::uint32_t length : {1u, 2u, 3u, 4u, 4097u}) {
    w.post(s, ++wr_id, length);
    exchange(s.a, s.b, rebuild_and_compare);
  }
  CHECK(compared >= 5 * 2);  // each WRITE and its ACK at least
  CHECK(s.qa->poll().size() == 5);
}

// The IPv4 TOS of each RoCE frame and whether vnic A sent it, in the order they crossed.
struct SentTos {
  bool from_a;
  std::uint8_t tos;
  rocev2::Opcode opcode;
};
std::vector<SentTos> exchange_recording_tos(Vnic& a, Vnic& b) {
  std::vector<SentTos> seen;
  exchange(a, b, [&](std::vector<std::uint8_t>& frame) {
    rocev2::RoceFrame parsed;
    if (!rocev2::parse_frame(ByteSpan(frame.data(), frame.size()), parsed).ok()) return;  // ARP
    seen.push_back({parsed.headers.ipv4.source == stack::Ipv4Address{kIpA}, frame[15], parsed.packet.bth.opcode});
  });
  return seen;
}

// As rxe does (the QP's address vector in prepare4): the GRH traffic class of a QP's path,
// given by modify_qp, is the IPv4 TOS of everything the QP sends, its ACKs and READ responses
// included, each side its own.
TEST_CASE("roce port: a QP's frames carry its path's traffic class as the IPv4 TOS, ACKs and READ responses too") {
  Vnic a(kIpA, 1), b(kIpB, 2);
  const Device da = open_device(a.user), db = open_device(b.user);
  const auto qa = create_qp(a.user, da), qb = create_qp(b.user, db);
  connect(a.user, *qa, kIpB, qb->qpn, 0x6a);  // UCX's default: DSCP 26, ECT(0)
  connect(b.user, *qb, kIpA, qa->qpn, 0xb8);  // DSCP 46 (EF), ECN 0
  std::vector<std::uint8_t> local = counting_bytes(3000, 1), remote(3000, 0);
  const Registration lr = reg_mr(a.user, da, local, IBV_ACCESS_LOCAL_WRITE);
  const Registration rr = reg_mr(b.user, db, remote, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  SendWqe write = wqe_for(1, rocev2::WrOpcode::RdmaWrite, local, 2500, lr.lkey);
  write.remote_addr = reinterpret_cast<std::uintptr_t>(remote.data());
  write.rkey = rr.rkey;
  qa->post_send(write);
  SendWqe read = wqe_for(2, rocev2::WrOpcode::RdmaRead, local, 2500, lr.lkey);
  read.remote_addr = reinterpret_cast<std::uintptr_t>(remote.data());
  read.rkey = rr.rkey;
  qa->post_send(read);
  const std::vector<SentTos> seen = exchange_recording_tos(a, b);
  REQUIRE(qa->poll().size() == 2);
  int from_a = 0, read_responses = 0;
  for (const SentTos& f : seen) {
    CHECK(f.tos == (f.from_a ? 0x6a : 0xb8));
    from_a += f.from_a;
    read_responses += rocev2::opcode_info(f.opcode).name.find("READ_RESPONSE") != std::string_view::npos;
  }
  CHECK(from_a == 3 + 1);         // the WRITE's three packets, the READ request
  CHECK(read_responses == 3);     // and B answered with its class: three READ responses
  CHECK(seen.size() > 4 + 3);     // an ACK of B's among them
}

// UD has no path: each SEND goes where its work request's AH says, with that AH's class.
TEST_CASE("roce port: a UD SEND carries its AH's traffic class as the IPv4 TOS") {
  Vnic a(kIpA, 1), b(kIpB, 2);
  const Device da = open_device(a.user), db = open_device(b.user);
  const auto qa = create_qp(a.user, da, IBV_QPT_UD), qb = create_qp(b.user, db, IBV_QPT_UD);
  constexpr std::uint64_t kQkey = 0x1111;
  for (auto [side, qp] : {std::pair{&a.user, qa.get()}, std::pair{&b.user, qb.get()}}) {
    auto init = modify_words(qp->handle, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
    init[field::kModState] = IBV_QPS_INIT;
    init[field::kModPortNum] = 1;
    init[field::kModQkey] = kQkey;
    REQUIRE(modify(*side, init) == 0);
    auto rtr = modify_words(qp->handle, IBV_QP_STATE);
    rtr[field::kModState] = IBV_QPS_RTR;
    REQUIRE(modify(*side, rtr) == 0);
    auto rts = modify_words(qp->handle, IBV_QP_STATE | IBV_QP_SQ_PSN);
    rts[field::kModState] = IBV_QPS_RTS;
    REQUIRE(modify(*side, rts) == 0);
  }
  const auto ah_to_b = [&](std::uint8_t traffic_class) {
    std::vector<std::uint64_t> w(field::kCreateAhWords, 0);
    w[field::kAhPd] = da.pd;
    std::tie(w[field::kAhDgidHigh], w[field::kAhDgidLow]) = gid_words(kIpB);
    w[field::kAhHopLimit] = 64;
    w[field::kAhTrafficClass] = traffic_class;
    w[field::kAhPortNum] = 1;
    return a.user.ok(MessageType::CreateAh, w);
  };
  std::vector<std::uint8_t> message = counting_bytes(16, 3), landing(2 * (40 + 16), 0);
  const Registration mr_a = reg_mr(a.user, da, message, IBV_ACCESS_LOCAL_WRITE);
  const Registration mr_b = reg_mr(b.user, db, landing, IBV_ACCESS_LOCAL_WRITE);
  std::uint64_t wr_id = 0;
  for (const std::uint8_t traffic_class : std::initializer_list<std::uint8_t>{0x2e, 0x00}) {
    RecvWqe recv{};
    recv.wr_id = ++wr_id;
    recv.num_sge = 1;
    recv.sge[0] = {reinterpret_cast<std::uintptr_t>(landing.data()) + (wr_id - 1) * (40 + 16), 40 + 16, mr_b.lkey};
    qb->post_recv(recv);
    SendWqe send = wqe_for(wr_id, rocev2::WrOpcode::Send, message, 16, mr_a.lkey);
    send.ah_handle = static_cast<std::uint32_t>(ah_to_b(traffic_class));
    send.remote_qpn = qb->qpn;
    send.remote_qkey = kQkey;
    qa->post_send(send);
    const std::vector<SentTos> seen = exchange_recording_tos(a, b);
    REQUIRE(seen.size() == 1);
    CHECK(seen[0].tos == traffic_class);
    const auto received = qb->poll();
    REQUIRE(received.size() == 1);
    CHECK(received[0].status == IBV_WC_SUCCESS);
  }
}

TEST_CASE("roce port: a corrupted frame is counted as a bad ICRC and dropped and the retry gets through") {
  Scene s;
  WriteBuffers w(s, std::vector<std::uint8_t>(64, 0xAB));
  w.post(s, 1, 32);
  bool corrupted = false;
  exchange(s.a, s.b, [&](std::vector<std::uint8_t>& frame) {
    rocev2::RoceFrame parsed;
    if (corrupted || !rocev2::parse_frame(ByteSpan(frame.data(), frame.size()), parsed).ok()) return;
    frame[frame.size() - 10] ^= 0x01;  // a payload byte: only the ICRC can tell
    corrupted = true;
  });
  CHECK(s.b.port.counters().rx_bad_icrc == 1);
  CHECK(w.target[0] == 0);
  CHECK(s.qa->poll().empty());
  // The requester's retransmission timer brings it through (the Nic's other deadline, its
  // once-a-second look at its clients' address spaces, may come first).
  for (int step = 0; step < 4 && w.target[0] != 0xAB; ++step) {
    const auto deadline = s.a.nic.next_deadline();
    REQUIRE(deadline);
    s.a.nic.advance(*deadline);
    exchange(s.a, s.b);
  }
  CHECK(w.target[0] == 0xAB);
  const auto cqes = s.qa->poll();
  REQUIRE(cqes.size() == 1);
  CHECK(cqes[0].status == IBV_WC_SUCCESS);
}

// The MACs Vnic(kIpA, 1) and Vnic(kIpB, 2) get.
const stack::MacAddress kMacA{{2, 0, 0, 0, 0, 1}};
const stack::MacAddress kMacB{{2, 0, 0, 0, 0, 2}};

using test::sample_mad;

bool is_roce(const std::vector<std::uint8_t>& frame) {
  rocev2::RoceFrame parsed;
  return rocev2::parse_frame(ByteSpan(frame.data(), frame.size()), parsed).ok();
}

TEST_CASE("roce port: a MAD from QP 1 goes out after ARP as rxe's UD SEND ONLY to QP 1 and reaches the peer's handler, not its Nic") {
  Vnic a(kIpA, 1), b(kIpB, 2);
  const auto mad = sample_mad(0x0010, 7);
  REQUIRE(a.gsi.send(stack::Ipv4Address{kIpB}, mad, kNow));  // waits for ARP
  CHECK(a.port.counters().tx_arp_pending == 1);
  std::vector<std::vector<std::uint8_t>> roce;
  exchange(a, b, [&](std::vector<std::uint8_t>& frame) {
    if (is_roce(frame)) roce.push_back(frame);
  });
  REQUIRE(roce.size() == 1);
  const std::vector<std::uint8_t>& frame = roce[0];
  REQUIRE(frame.size() == 322);  // Ethernet 14, IPv4 20, UDP 8, BTH 12, DETH 8, MAD 256, ICRC 4

  // The wire bytes themselves, at their offsets (IBA 9.2 BTH, 9.3.3 DETH):
  const auto bytes_at = [&](std::size_t at, std::size_t n) {
    return std::vector<std::uint8_t>(frame.begin() + static_cast<std::ptrdiff_t>(at),
                                     frame.begin() + static_cast<std::ptrdiff_t>(at + n));
  };
  CHECK(bytes_at(34, 4) == std::vector<std::uint8_t>{0xD8, 0x72, 0x12, 0xB7});  // UDP 55410 > 4791
  CHECK(bytes_at(40, 2) == std::vector<std::uint8_t>{0x00, 0x00});              // UDP checksum 0
  CHECK(bytes_at(42, 12) == std::vector<std::uint8_t>{0x64, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x01,
                                                      0x80, 0x00, 0x00, 0x00});  // UD SEND ONLY, QP 1, A, PSN 0
  CHECK(bytes_at(54, 8) == std::vector<std::uint8_t>{0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01});
  CHECK(bytes_at(62, 256) == std::vector<std::uint8_t>(mad.begin(), mad.end()));

  // And the whole frame, rebuilt from values written here (not taken from the endpoint), with
  // the stack's IPv4 identification: byte for byte, ICRC included.
  rocev2::RoceFrame parsed;
  REQUIRE(rocev2::parse_frame(ByteSpan(frame.data(), frame.size()), parsed).ok());
  rocev2::TransportPacket expected;
  expected.bth.opcode = rocev2::Opcode::UdSendOnly;
  expected.bth.pkey = rocev2::Pkey(0xFFFF);
  expected.bth.dest_qp = rocev2::Qpn(1);
  expected.bth.ack_req = true;
  expected.bth.psn = rocev2::Psn(0);
  expected.deth = rocev2::Deth{rocev2::Qkey(0x80010000), rocev2::Qpn(1)};
  expected.payload = mad;
  std::vector<std::uint8_t> rebuilt(frame.size());
  const auto headers = rocev2::roce_headers(kMacA, kMacB, stack::Ipv4Address{kIpA}, stack::Ipv4Address{kIpB}, 55410,
                                            parsed.headers.ipv4.identification);
  REQUIRE(rocev2::build_frame(headers, expected, rebuilt) == rocev2::EmitError::none);
  CHECK(rebuilt == frame);

  REQUIRE(b.mads.mads.size() == 1);
  CHECK(b.mads.mads[0].source == stack::Ipv4Address{kIpA});
  CHECK(b.mads.mads[0].udp_source_port == 55410);
  CHECK(b.mads.mads[0].source_qp == rocev2::Qpn(1));
  CHECK(b.mads.mads[0].mad == std::vector<std::uint8_t>(mad.begin(), mad.end()));
  CHECK(b.gsi.counters().rx_mads == 1);
  CHECK(b.port.counters().rx_bad_icrc == 0);
  CHECK(b.nic.engine_counters().packets_received == 0);
  CHECK(a.gsi.counters().tx_mads == 1);
  CHECK(a.gsi.next_psn() == rocev2::Psn(1));
}

TEST_CASE("roce port: a handler answers from inside the call, and each side's QP 1 counts its own PSNs") {
  Vnic a(kIpA, 1), b(kIpB, 2);
  b.mads.answer = sample_mad(0x0013, 100);  // a REP for the REQ
  REQUIRE(a.gsi.send(stack::Ipv4Address{kIpB}, sample_mad(0x0010, 1), kNow));
  exchange(a, b);
  REQUIRE(a.gsi.send(stack::Ipv4Address{kIpB}, sample_mad(0x0010, 2), kNow));
  std::vector<std::pair<std::uint32_t, std::uint32_t>> psns;  // (source IPv4, PSN)
  exchange(a, b, [&](std::vector<std::uint8_t>& frame) {
    rocev2::RoceFrame parsed;
    if (rocev2::parse_frame(ByteSpan(frame.data(), frame.size()), parsed).ok())
      psns.emplace_back(parsed.headers.ipv4.source.value, parsed.packet.bth.psn.value());
  });
  CHECK(psns == std::vector<std::pair<std::uint32_t, std::uint32_t>>{{kIpA, 1}, {kIpB, 1}});
  REQUIRE(a.mads.mads.size() == 2);
  CHECK(a.mads.mads[1].source == stack::Ipv4Address{kIpB});
  CHECK(a.mads.mads[1].mad[17] == 0x13);
  CHECK(b.mads.mads.size() == 2);
  CHECK(a.gsi.next_psn() == rocev2::Psn(2));
  CHECK(b.gsi.next_psn() == rocev2::Psn(2));
}

TEST_CASE("roce port: packets for QP 0, bad GSI packets and a bad ICRC are counted and dropped before the Nic") {
  Vnic b(kIpB, 2);
  const auto mad = sample_mad(0x0010, 0);
  const auto headers =
      rocev2::roce_headers(kMacA, kMacB, stack::Ipv4Address{kIpA}, stack::Ipv4Address{kIpB}, 55410, 1);
  const auto deliver = [&](const rocev2::TransportPacket& packet, bool corrupt = false) {
    std::vector<std::uint8_t> frame(rocev2::frame_length(packet));
    REQUIRE(rocev2::build_frame(headers, packet, frame) == rocev2::EmitError::none);
    if (corrupt) frame[100] ^= 0x01;
    b.interface.receive_frame(ByteSpan(frame.data(), frame.size()), kNow);
  };
  const rocev2::TransportPacket good = rocev2::gsi_packet(rocev2::Psn(0), mad);
  rocev2::TransportPacket p = good;
  p.bth.dest_qp = rocev2::kSmiQpn;
  deliver(p);
  p = good;
  p.deth->qkey = rocev2::Qkey(0x11111111);
  deliver(p);
  p = good;
  p.bth.pkey = rocev2::Pkey(0x1234);
  deliver(p);
  p = good;
  p.bth.opcode = rocev2::Opcode::RcSendOnly;
  p.deth.reset();
  deliver(p);
  p = good;
  p.payload = p.payload.first(200);
  deliver(p);
  deliver(good, true);
  const rocev2::GsiCounters& c = b.gsi.counters();
  CHECK(c.rx_packets == 5);
  CHECK(c.dropped(rocev2::GsiDrop::smi_qp) == 1);
  CHECK(c.dropped(rocev2::GsiDrop::bad_qkey) == 1);
  CHECK(c.dropped(rocev2::GsiDrop::bad_pkey) == 1);
  CHECK(c.dropped(rocev2::GsiDrop::bad_opcode) == 1);
  CHECK(c.dropped(rocev2::GsiDrop::short_mad) == 1);
  CHECK(b.port.counters().rx_bad_icrc == 1);
  CHECK(b.mads.mads.empty());
  CHECK(b.nic.engine_counters().packets_received == 0);
  CHECK(b.nic.engine_counters().unknown_qpn == 0);
  deliver(good);
  CHECK(b.mads.mads.size() == 1);
}

}  // namespace
}  // namespace rrdma::vnic
