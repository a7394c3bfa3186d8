// The engine's timers (rocev2/engine/timers.h): only QPs with something due are ever
// visited. Idle QPs set no deadline; a deadline is set by a send, moved by a retransmission,
// cleared by the ACK, and leaves the queue with its QP, whether destroyed or reset.
#include <catch2/catch.hpp>

#include "rocev2/engine/syndrome.h"
#include "tests/sim/engine_harness.h"

namespace rrdma::test {
namespace {

constexpr std::size_t kIdleQps = 1024;

struct TimerSetup {
  Pair pair;
  MrFacts src;
  MrFacts dst;
  TimerSetup() {
    src = pair.a.memory.add(pair.a.pd, access::kLocalWrite, 4096, 0x10000);
    dst = pair.b.memory.add(pair.b.pd, access::kLocalWrite, 4096, 0x20000);
    QpInit init;
    init.pd = pair.a.pd;
    for (std::size_t i = 0; i < kIdleQps; ++i) REQUIRE(pair.a.engine.create_qp(init));
  }
  void send(std::uint64_t id) {
    REQUIRE(pair.b.engine.post_recv(pair.b.qpn, recv_wr(id, dst, 4096)) == VerbResult::Ok);
    REQUIRE(pair.a.engine.post_send(pair.a.qpn, send_wr(id, WrOpcode::Send, src, 100), pair.now) == VerbResult::Ok);
  }
};

TEST_CASE("engine timers: 1024 idle QPs set no deadline, a send sets one, its ACK clears it") {
  TimerSetup s;
  Pair& p = s.pair;
  CHECK(p.a.engine.deadlines_set() == 0);
  CHECK_FALSE(p.a.engine.next_deadline());

  s.send(1);
  CHECK(p.a.engine.deadlines_set() == 1);
  const Duration timeout = *ack_timeout(14);
  REQUIRE(p.a.engine.next_deadline());
  CHECK(*p.a.engine.next_deadline() == p.now + timeout);

  // The SEND is lost: at the deadline it goes again and the deadline moves on.
  p.a.host.take_sent();
  p.now = *p.a.engine.next_deadline();
  p.a.engine.advance(p.now);
  CHECK(p.a.engine.counters().timeouts == 1);
  CHECK(p.a.engine.deadlines_set() == 1);
  CHECK(*p.a.engine.next_deadline() == p.now + timeout);

  p.exchange();
  CHECK(p.a.engine.deadlines_set() == 0);
  CHECK_FALSE(p.a.engine.next_deadline());
}

TEST_CASE("engine timers: a QP destroyed or reset with a deadline set leaves the queue") {
  TimerSetup s;
  Pair& p = s.pair;
  s.send(1);
  REQUIRE(p.a.engine.deadlines_set() == 1);
  QpAttr to_reset;
  to_reset.state = QpState::Reset;
  REQUIRE(p.a.engine.modify_qp(p.a.qpn, to_reset, qp_attr::kState, p.now) == VerbResult::Ok);
  CHECK(p.a.engine.deadlines_set() == 0);
  CHECK_FALSE(p.a.engine.next_deadline());

  // A new connection on a fresh pair of QPs; then the sender is destroyed mid-send.
  TimerSetup t;
  t.send(2);
  REQUIRE(t.pair.a.engine.deadlines_set() == 1);
  REQUIRE(t.pair.a.engine.destroy_qp(t.pair.a.qpn) == VerbResult::Ok);
  CHECK(t.pair.a.engine.deadlines_set() == 0);
  CHECK_FALSE(t.pair.a.engine.next_deadline());
  t.pair.now += std::chrono::seconds(10);
  t.pair.a.engine.advance(t.pair.now);  // nothing left to run, nothing touched
  CHECK(t.pair.a.engine.counters().timeouts == 0);
}

TEST_CASE("engine timers: a READ answered in steps keeps its responder due until the last step") {
  Pair p;
  const std::uint32_t length = 256 * 1024;  // 256 responses at MTU 1024: four steps of 64
  const MrFacts remote = p.b.memory.add(p.b.pd, kAllRemote, length, 0x40000);
  const MrFacts local = p.a.memory.add(p.a.pd, access::kLocalWrite, length, 0x50000);
  SendWr read = send_wr(9, WrOpcode::RdmaRead, local, length);
  read.remote_addr = remote.base;
  read.rkey = remote.rkey;
  REQUIRE(p.a.engine.post_send(p.a.qpn, read, p.now) == VerbResult::Ok);
  p.deliver(p.a, p.b, p.a.host.take_sent());
  REQUIRE(p.b.engine.next_deadline());
  CHECK(*p.b.engine.next_deadline() == p.now);  // the rest of the READ is due at once
  CHECK(p.b.engine.deadlines_set() == 0);       // a stream is not a timer
  p.run_due(p.b);
  CHECK_FALSE(p.b.engine.next_deadline());
  CHECK(p.b.host.take_sent().size() == length / 1024);
}

}  // namespace
}  // namespace rrdma::test
