// A shared receive queue stands in for the RQs of several QPs (ReceiveQueue interface):
// messages to either QP take receive WQEs from it in order; an error on one QP flushes
// that QP's send queue but leaves the SRQ's WQEs to the others, and raises LAST_WQE_REACHED.
#include <catch2/catch.hpp>

#include "tests/sim/engine_harness.h"

namespace rrdma::test {
namespace {

TEST_CASE("two RC QPs share one SRQ and an error on one leaves the SRQ to the other") {
  Pair p;
  FifoReceiveQueue srq(8);
  // Two more QPs on each side; B's take their receives from the SRQ.
  Qpn a_qp[2];
  Qpn b_qp[2];
  for (int i = 0; i < 2; ++i) {
    QpInit init;
    init.pd = p.a.pd;
    a_qp[i] = *p.a.engine.create_qp(init);
    init.pd = p.b.pd;
    init.srq = &srq;
    b_qp[i] = *p.b.engine.create_qp(init);
    p.a.qpn = a_qp[i];
    p.b.qpn = b_qp[i];
    p.connect(p.a, p.b, p.a_psn, p.b_psn, QpType::Rc, 1024, {}, 0);
    p.connect(p.b, p.a, p.b_psn, p.a_psn, QpType::Rc, 1024, {}, 0);
  }
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 64, 0x10000);
  const MrFacts dst = p.b.memory.add(p.b.pd, access::kLocalWrite, 64 * 8, 0x20000);
  CHECK(p.b.engine.post_recv(b_qp[0], recv_wr(1, dst, 64)) == VerbResult::InvalidArgument);
  for (std::uint64_t i = 0; i < 4; ++i)
    REQUIRE(srq.push(RecvWr{100 + i, {Sge{dst.base + 64 * i, 64, dst.lkey}}}));

  p.a.engine.post_send(a_qp[1], send_wr(1, WrOpcode::Send, src, 10), p.now);
  p.a.engine.post_send(a_qp[0], send_wr(2, WrOpcode::Send, src, 20), p.now);
  p.exchange();
  REQUIRE(p.b.host.completions.size() == 2);
  CHECK(p.b.host.completions[0].qpn == b_qp[1]);
  CHECK(p.b.host.completions[0].wr_id == 100);
  CHECK(p.b.host.completions[1].qpn == b_qp[0]);
  CHECK(p.b.host.completions[1].wr_id == 101);
  CHECK(srq.size() == 2);

  QpAttr err;
  err.state = QpState::Err;
  REQUIRE(p.b.engine.modify_qp(b_qp[0], err, qp_attr::kState, p.now) == VerbResult::Ok);
  CHECK(srq.size() == 2);  // not flushed: the SRQ is not the QP's
  REQUIRE_FALSE(p.b.host.events.empty());
  CHECK(p.b.host.events.back().type == EventType::QpLastWqeReached);
  CHECK(p.b.host.events.back().qpn == b_qp[0]);

  p.b.host.completions.clear();
  p.a.engine.post_send(a_qp[1], send_wr(3, WrOpcode::Send, src, 30), p.now);
  p.exchange();
  REQUIRE(p.b.host.completions.size() == 1);
  CHECK(p.b.host.completions[0].wr_id == 102);
  CHECK(p.b.host.completions[0].byte_len == 30);
}


TEST_CASE("a host-supplied RQ is used instead of the engine's own, and flushed on error and emptied on reset") {
  Pair p;
  FifoReceiveQueue rq(8);
  QpInit init;
  init.pd = p.a.pd;
  const Qpn a_qp = *p.a.engine.create_qp(init);
  init.pd = p.b.pd;
  init.rq = &rq;
  const Qpn b_qp = *p.b.engine.create_qp(init);
  p.a.qpn = a_qp;
  p.b.qpn = b_qp;
  p.connect(p.a, p.b, p.a_psn, p.b_psn, QpType::Rc, 1024, {}, 0);
  p.connect(p.b, p.a, p.b_psn, p.a_psn, QpType::Rc, 1024, {}, 0);
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 64, 0x10000);
  const MrFacts dst = p.b.memory.add(p.b.pd, access::kLocalWrite, 64 * 8, 0x20000);
  for (std::uint64_t i = 0; i < 4; ++i)
    REQUIRE(rq.push(RecvWr{200 + i, {Sge{dst.base + 64 * i, 64, dst.lkey}}}));

  p.a.engine.post_send(a_qp, send_wr(1, WrOpcode::Send, src, 10), p.now);
  p.exchange();
  REQUIRE(p.b.host.completions.size() == 1);
  CHECK(p.b.host.completions[0].wr_id == 200);
  CHECK(rq.size() == 3);

  p.b.host.completions.clear();
  QpAttr err;
  err.state = QpState::Err;
  REQUIRE(p.b.engine.modify_qp(b_qp, err, qp_attr::kState, p.now) == VerbResult::Ok);
  CHECK(rq.size() == 0);  // flushed, unlike an SRQ: this queue is the QP's own
  REQUIRE(p.b.host.completions.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(p.b.host.completions[i].wr_id == 201 + i);
    CHECK(p.b.host.completions[i].status == WcStatus::WrFlushErr);
  }

  QpAttr reset;
  reset.state = QpState::Reset;
  REQUIRE(rq.push(RecvWr{300, {}}));
  REQUIRE(p.b.engine.modify_qp(b_qp, reset, qp_attr::kState, p.now) == VerbResult::Ok);
  CHECK(rq.size() == 0);
}

}  // namespace
}  // namespace rrdma::test
