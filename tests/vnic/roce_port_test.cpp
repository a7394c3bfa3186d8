// The RoCE v2 glue over the real stack: two vnics' Interfaces wired frame to frame (ARP,
// IPv4, UDP, ICRC all real), each with its RocePort and Nic, and a test client on each.
// What only this level shows: the PadCnt and ICRC of odd-sized packets, the UDP source port
// of a connected QP, and that a corrupted frame is counted and dropped.
#include <catch2/catch.hpp>

#include <deque>
#include <numeric>

#include "rocev2/encap.h"
#include "stack/interface.h"
#include "tests/verbs/nic_client.h"
#include "vnic/roce_port.h"

namespace rrdma::vnic {
namespace {

using namespace rrdma::verbs::test;
using verbs::Nic;
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

struct Vnic {
  Vnic(std::uint32_t ip, std::uint8_t mac_byte)
      : interface(interface_config(ip, mac_byte), sink),
        port(interface),
        nic(verbs::NicConfig{stack::Ipv4Address{ip}, stack::MacAddress{{2, 0, 0, 0, 0, mac_byte}}, 1500, true, {}, {}}, port,
            watcher) {
    port.attach(&nic);
  }
  ~Vnic() { port.attach(nullptr); }
  QueueSink sink;
  stack::Interface interface;
  RocePort port;
  FakeWatcher watcher;
  Nic nic;
  TestClient user{nic};
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

}  // namespace
}  // namespace rrdma::vnic
