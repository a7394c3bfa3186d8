// Issue 27: a QP recycled through RESET (from the error state or straight from RTS, with the
// same attributes and PSNs) starts afresh. Each transport is caught in the middle of things —
// a message half sent and half received, an RC requester waiting for its ACK with its timer
// armed — then both QPs go to RESET and back to RTS: a new message goes through, nothing of
// the old one comes back (no completion, retransmission or timeout).
#include <catch2/catch.hpp>

#include <chrono>

#include "tests/sim/engine_harness.h"

namespace rrdma::test {
namespace {

constexpr Qkey kQkey{0x11111111};

SendWr send_to(Pair& p, std::uint64_t id, const MrFacts& src, std::uint32_t length) {
  SendWr wr = send_wr(id, WrOpcode::Send, src, length);
  wr.ud_dest_ip = p.b.ip;
  wr.ud_remote_qpn = p.b.qpn;
  wr.ud_remote_qkey = kQkey;
  return wr;
}

void to_state(Side& side, QpState state, Instant now) {
  QpAttr attr;
  attr.state = state;
  REQUIRE(side.engine.modify_qp(side.qpn, attr, qp_attr::kState, now) == VerbResult::Ok);
}

TEST_CASE("engine: a QP recycled through RESET with the same PSNs starts afresh (RC, UC, UD)") {
  // Through ERR (error recovery: the flush empties most of it first), or straight from RTS.
  const bool via_error = GENERATE(true, false);
  for (const QpType type : {QpType::Rc, QpType::Uc, QpType::Ud}) {
    INFO("type " << int(type) << (via_error ? ", through ERR" : ", from RTS"));
    Pair p(type, 1024);
    const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 64 * 1024, 0x10000);
    const MrFacts dst = p.b.memory.add(p.b.pd, access::kLocalWrite, 64 * 1024, 0x20000);
    // UD carries one packet per message; the others a message of eight, three of which arrive.
    const std::uint32_t first = type == QpType::Ud ? 512 : 8 * 1024;
    p.b.engine.post_recv(p.b.qpn, recv_wr(1, dst, 64 * 1024));
    REQUIRE(p.a.engine.post_send(p.a.qpn, send_to(p, 1, src, first), p.now) == VerbResult::Ok);
    std::vector<Captured> sent = p.a.host.take_sent();
    if (type != QpType::Ud) {
      REQUIRE(sent.size() == 8);
      sent.resize(3);
    } else {
      sent.clear();
    }
    p.deliver(p.a, p.b, sent);
    if (type == QpType::Rc) REQUIRE(p.a.engine.deadlines_set() == 1);

    for (Side* side : {&p.a, &p.b}) {
      if (via_error) to_state(*side, QpState::Err, p.now);
      side->host.take_completions();  // the flushes of the error state
      to_state(*side, QpState::Reset, p.now);
      CHECK(side->host.completions.empty());  // RESET removes work without completions
      side->host.take_sent();
    }
    CHECK(p.a.engine.deadlines_set() == 0);
    p.connect(p.a, p.b, p.a_psn, p.b_psn, type, 1024, {}, 0);
    p.connect(p.b, p.a, p.b_psn, p.a_psn, type, 1024, {}, 0);

    const std::uint32_t second = type == QpType::Ud ? 300 : 3000;
    p.b.engine.post_recv(p.b.qpn, recv_wr(2, dst, 64 * 1024));
    REQUIRE(p.a.engine.post_send(p.a.qpn, send_to(p, 2, src, second), p.now) == VerbResult::Ok);
    p.exchange();
    const std::vector<Completion> received = p.b.host.take_completions();
    REQUIRE(received.size() == 1);
    CHECK(received[0].wr_id == 2);
    CHECK(received[0].status == WcStatus::Success);
    CHECK(received[0].byte_len == second + (type == QpType::Ud ? 40 : 0));
    const std::vector<Completion> completed = p.a.host.take_completions();
    REQUIRE(completed.size() == 1);
    CHECK(completed[0].wr_id == 2);
    CHECK(completed[0].status == WcStatus::Success);
    CHECK(p.a.state() == QpState::Rts);
    CHECK(p.b.state() == QpState::Rts);

    // Long after: no timer of the old message fires, nothing is sent again.
    p.now += std::chrono::seconds(10);
    p.exchange();
    CHECK(p.a.host.take_completions().empty());
    CHECK(p.b.host.take_completions().empty());
    CHECK(p.a.engine.counters().timeouts == 0);
    CHECK(p.a.engine.deadlines_set() == 0);
  }
}

}  // namespace
}  // namespace rrdma::test
