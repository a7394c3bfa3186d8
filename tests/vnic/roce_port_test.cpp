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

TEST_CASE("roce port: WRITEs of odd sizes cross the real stack with their pad and ICRC") {
  Scene s;
  std::vector<std::uint8_t> source(5000), target(5000, 0);
  std::iota(source.begin(), source.end(), std::uint8_t{3});
  const Registration src = reg_mr(s.a.user, s.da, source, IBV_ACCESS_LOCAL_WRITE);
  const Registration dst = reg_mr(s.b.user, s.db, target, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  std::uint64_t wr_id = 0;
  for (std::uint32_t length : {1u, 3u, 4095u, 4097u}) {
    std::fill(target.begin(), target.end(), 0);
    SendWqe wqe = wqe_for(++wr_id, rocev2::WrOpcode::RdmaWrite, source, length, src.lkey);
    wqe.remote_addr = reinterpret_cast<std::uintptr_t>(target.data());
    wqe.rkey = dst.rkey;
    s.qa->post_send(wqe);
    exchange(s.a, s.b);
    INFO("length " << length);
    CHECK(std::equal(source.begin(), source.begin() + length, target.begin()));
    CHECK(target[length] == 0);
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
  std::vector<std::uint8_t> source(64), target(64);
  const Registration src = reg_mr(s.a.user, s.da, source, IBV_ACCESS_LOCAL_WRITE);
  const Registration dst = reg_mr(s.b.user, s.db, target, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  SendWqe wqe = wqe_for(1, rocev2::WrOpcode::RdmaWrite, source, 13, src.lkey);
  wqe.remote_addr = reinterpret_cast<std::uintptr_t>(target.data());
  wqe.rkey = dst.rkey;
  s.qa->post_send(wqe);
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

TEST_CASE("roce port: a corrupted frame is counted as a bad ICRC and dropped and the retry gets through") {
  Scene s;
  std::vector<std::uint8_t> source(64, 0xAB), target(64, 0);
  const Registration src = reg_mr(s.a.user, s.da, source, IBV_ACCESS_LOCAL_WRITE);
  const Registration dst = reg_mr(s.b.user, s.db, target, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  SendWqe wqe = wqe_for(1, rocev2::WrOpcode::RdmaWrite, source, 32, src.lkey);
  wqe.remote_addr = reinterpret_cast<std::uintptr_t>(target.data());
  wqe.rkey = dst.rkey;
  s.qa->post_send(wqe);
  bool corrupted = false;
  exchange(s.a, s.b, [&](std::vector<std::uint8_t>& frame) {
    rocev2::RoceFrame parsed;
    if (corrupted || !rocev2::parse_frame(ByteSpan(frame.data(), frame.size()), parsed).ok()) return;
    frame[frame.size() - 10] ^= 0x01;  // a payload byte: only the ICRC can tell
    corrupted = true;
  });
  CHECK(s.b.port.counters().rx_bad_icrc == 1);
  CHECK(target[0] == 0);
  CHECK(s.qa->poll().empty());
  // The requester's retransmission timer brings it through (the Nic's other deadline, its
  // once-a-second look at its clients' address spaces, may come first).
  for (int step = 0; step < 4 && target[0] != 0xAB; ++step) {
    const auto deadline = s.a.nic.next_deadline();
    REQUIRE(deadline);
    s.a.nic.advance(*deadline);
    exchange(s.a, s.b);
  }
  CHECK(target[0] == 0xAB);
  const auto cqes = s.qa->poll();
  REQUIRE(cqes.size() == 1);
  CHECK(cqes[0].status == IBV_WC_SUCCESS);
}

}  // namespace
}  // namespace rrdma::vnic
