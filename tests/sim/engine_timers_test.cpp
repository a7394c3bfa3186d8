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

// kTransmitBudget (2048) packets are shared by the QPs sending: with 64 QPs each holding one
// packet unacknowledged, a long message on one of them goes out 2048 / 64 = 32 packets at a
// time (one of them already in flight); a timeout halves the budget, so the retry goes 16
// at a time; ACKs give it back.
TEST_CASE("engine: many QPs sending share the transmit budget, a timeout halves it") {
  constexpr std::size_t kQps = 64;
  Pair p;
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 200 * 1024, 0x100000);
  const MrFacts dst = p.b.memory.add(p.b.pd, access::kLocalWrite, 200 * 1024, 0x200000);
  std::vector<std::pair<Qpn, Qpn>> qps{{p.a.qpn, p.b.qpn}};
  while (qps.size() < kQps) qps.push_back(p.add_connected_qps(QpType::Rc, 1024));
  for (const auto& [a, b] : qps) {
    REQUIRE(p.b.engine.post_recv(b, recv_wr(1, dst, 1024)) == VerbResult::Ok);
    REQUIRE(p.a.engine.post_send(a, send_wr(1, WrOpcode::Send, src, 1024), p.now) == VerbResult::Ok);
  }
  REQUIRE(p.a.host.take_sent().size() == kQps);
  REQUIRE(p.a.engine.deadlines_set() == kQps);

  const Qpn first = qps.front().first;
  REQUIRE(p.b.engine.post_recv(qps.front().second, recv_wr(2, dst, 200 * 1024)) == VerbResult::Ok);
  REQUIRE(p.a.engine.post_send(first, send_wr(2, WrOpcode::Send, src, 200 * 1024), p.now) == VerbResult::Ok);
  CHECK(p.a.host.take_sent().size() == 2048 / kQps - 1);

  // Nothing is delivered: every QP times out together; the budget is halved once.
  p.now = *p.a.engine.next_deadline();
  p.a.engine.advance(p.now);
  CHECK(p.a.engine.counters().transmit_budget_cuts == 1);
  std::size_t from_first = 0;
  for (const Captured& c : p.a.host.take_sent()) from_first += c.src_qpn == first;
  CHECK(from_first == 1024 / kQps);

  // Everything is delivered and acknowledged: all messages complete.
  p.exchange();
  for (int i = 0; i < 1000 && p.advance_to_next_deadline(); ++i) p.exchange();
  std::size_t completed = 0;
  for (const Completion& c : p.a.host.take_completions()) completed += c.status == WcStatus::Success;
  CHECK(completed == kQps + 1);
}

// A window that shrank below what a QP already has in flight, with no packet in flight
// asking for an ACK (the last AckReq already answered): the QP sends one packet more, with
// AckReq, instead of waiting for its ACK timeout. QP A sends 64 packets (AckReq on the last)
// and 38 more of a second message while 20 QPs send (window 102); then 200 QPs send
// (window 10) and the ACK of the first 64 arrives.
TEST_CASE("engine: a window that shrank below the packets in flight asks for an ACK at once") {
  Pair p;
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 256 * 1024, 0x100000);
  const MrFacts dst = p.b.memory.add(p.b.pd, kAllRemote, 256 * 1024, 0x200000);
  const Qpn a = p.a.qpn, b = p.b.qpn;
  auto add_sending_qps = [&](std::size_t count) {
    QpInit init;
    for (std::size_t i = 0; i < count; ++i) {
      init.pd = p.a.pd;
      p.a.qpn = *p.a.engine.create_qp(init);
      init.pd = p.b.pd;
      p.b.qpn = *p.b.engine.create_qp(init);
      p.connect(p.a, p.b, p.a_psn, p.b_psn, QpType::Rc, 1024, {}, 0);
      p.connect(p.b, p.a, p.b_psn, p.a_psn, QpType::Rc, 1024, {}, 0);
      REQUIRE(p.a.engine.post_send(p.a.qpn, send_wr(1, WrOpcode::RdmaWrite, src, 64), p.now) == VerbResult::Ok);
    }
  };
  add_sending_qps(19);
  SendWr first = send_wr(1, WrOpcode::RdmaWrite, src, 64 * 1024);
  first.remote_addr = dst.base;
  first.rkey = dst.rkey;
  REQUIRE(p.a.engine.post_send(a, first, p.now) == VerbResult::Ok);
  SendWr second = first;
  second.sg_list = {Sge{src.base, 200 * 1024, src.lkey}};
  REQUIRE(p.a.engine.post_send(a, second, p.now) == VerbResult::Ok);
  std::vector<Captured> from_a;
  for (const Captured& c : p.a.host.take_sent())
    if (c.src_qpn == a) from_a.push_back(c);
  REQUIRE(from_a.size() == 102);  // 2048 / 20 QPs sending
  CHECK(from_a[63].packet.bth.ack_req);
  for (std::size_t i = 64; i < from_a.size(); ++i) CHECK_FALSE(from_a[i].packet.bth.ack_req);

  add_sending_qps(180);
  p.a.host.take_sent();
  p.deliver(p.a, p.b, std::vector<Captured>(from_a.begin(), from_a.begin() + 64));
  std::vector<Captured> ack;
  for (const Captured& c : p.b.host.take_sent())
    if (c.src_qpn == b) ack.push_back(c);
  REQUIRE(ack.size() == 1);
  REQUIRE(ack[0].packet.bth.opcode == Opcode::RcAck);
  REQUIRE(ack[0].packet.aeth->syndrome == 0x1F);  // an ACK, not a NAK
  p.deliver(p.b, p.a, ack);
  std::vector<Captured> next;
  for (const Captured& c : p.a.host.take_sent())
    if (c.src_qpn == a) next.push_back(c);
  REQUIRE(next.size() == 1);
  CHECK(next[0].packet.bth.psn == p.a_psn + 102);
  CHECK(next[0].packet.bth.ack_req);
}

}  // namespace
}  // namespace rrdma::test
