// Not a test: a fixed workload to count the Nic's instructions with callgrind, hidden from
// ctest (the tag starts with '.'). Two Nics back to back run as the daemon runs them
// (frame_memory set: held ACKs, completions published once per batch by end_of_frames):
// doorbells of 4 RDMA WRITEs and 4 SENDs of 64 bytes, signaled, each carried to its
// completion (the SENDs' receive completions too).
//
//   valgrind --tool=callgrind --callgrind-out-file=nic.cg build/tests/verbs/verbs_tests '[.bench]'
//   callgrind_annotate --inclusive=yes nic.cg | grep 'Nic::'
#include <array>
#include <deque>
#include <numeric>
#include <vector>

#include <catch2/catch.hpp>

#include "rocev2/wire.h"
#include "tests/verbs/nic_client.h"

namespace rrdma::verbs {
namespace {

using namespace rrdma::verbs::test;

class QueuePort final : public PacketPort {
 public:
  std::deque<std::vector<std::uint8_t>> sent;
  void send(const rocev2::OutgoingPacket& out, std::uint16_t, Instant) override {
    rocev2::TransportPacket packet = out.packet;
    packet.bth.pad_count = rocev2::pad_count_for(packet.payload.size());
    std::vector<std::uint8_t> bytes(rocev2::transport_length(packet));
    REQUIRE(rocev2::emit_transport(packet, MutableByteSpan(bytes.data(), bytes.size())) == rocev2::EmitError::none);
    sent.push_back(std::move(bytes));
  }
};

std::array<std::uint8_t, 4096> frame_memory{};

struct BatchSide {
  BatchSide(std::uint32_t ip, std::uint8_t last_mac_byte)
      : nic(NicConfig{stack::Ipv4Address{ip}, stack::MacAddress{{2, 0, 0, 0, 0, last_mac_byte}}, 1500, true,
                      frame_memory, {}},
            port, watcher) {}
  ~BatchSide() { ::close(pidfd); }
  QueuePort port;
  FakeWatcher watcher;
  Nic nic;
  // Valgrind 3.19 knows no pidfd_open: an eventfd nobody writes stands in for the client's
  // pidfd (never readable, so the process never looks gone).
  int pidfd = eventfd_for_test();
  TestClient user{nic, 1, ::getpid(), pidfd};
};

// Every packet `from` sent, received by `to` as one batch of frames.
bool deliver(BatchSide& from, BatchSide& to, std::uint32_t from_ip) {
  if (from.port.sent.empty()) return false;
  const std::uint8_t ip_header[20] = {0x45};
  while (!from.port.sent.empty()) {
    const std::vector<std::uint8_t> bytes = std::move(from.port.sent.front());
    from.port.sent.pop_front();
    rocev2::TransportPacket parsed;
    REQUIRE(rocev2::parse_transport(ByteSpan(bytes.data(), bytes.size()), parsed) == rocev2::TransportError::none);
    to.nic.receive(parsed, {stack::Ipv4Address{from_ip}, 0, ip_header}, kNow);
  }
  to.nic.end_of_frames();
  return true;
}

TEST_CASE("nic bench: doorbells of 4 WRITEs and 4 SENDs, batched frames", "[.bench]") {
  ConnectedPair<BatchSide> p;
  std::vector<std::uint8_t> source(64), target(64);
  std::iota(source.begin(), source.end(), std::uint8_t{1});
  const Registration src = reg_mr(p.a.user, p.da, source, IBV_ACCESS_LOCAL_WRITE);
  const Registration dst = reg_mr(p.b.user, p.db, target, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  constexpr int kDoorbells = 2000;
  constexpr int kPerDoorbell = 8;
  std::uint64_t completed = 0, received = 0;
  for (int round = 0; round < kDoorbells; ++round) {
    for (int i = 0; i < kPerDoorbell / 2; ++i) {
      RecvWqe recv{};
      recv.wr_id = round;
      recv.num_sge = 1;
      recv.sge[0] = {reinterpret_cast<std::uintptr_t>(target.data()), 64, dst.lkey};
      p.qb->post_recv(recv);
    }
    for (int i = 0; i < kPerDoorbell; ++i) {
      const bool write = i % 2 == 0;
      SendWqe wqe = wqe_for(round * kPerDoorbell + i, write ? rocev2::WrOpcode::RdmaWrite : rocev2::WrOpcode::Send,
                            source, 64, src.lkey);
      wqe.remote_addr = reinterpret_cast<std::uintptr_t>(target.data());
      wqe.rkey = dst.rkey;
      p.qa->post_send(wqe);
    }
    for (bool moved = true; moved;) {
      moved = p.a.watcher.run_ready();
      moved = deliver(p.a, p.b, kTestIpA) || moved;
      moved = deliver(p.b, p.a, kTestIpB) || moved;
    }
    completed += p.qa->poll().size();
    received += p.qb->poll().size();
  }
  CHECK(completed == kDoorbells * kPerDoorbell);
  CHECK(received == kDoorbells * kPerDoorbell / 2);
  WARN("packets sent: A " << p.a.nic.engine_counters().packets_sent << ", B "
                          << p.b.nic.engine_counters().packets_sent);
}

}  // namespace
}  // namespace rrdma::verbs
