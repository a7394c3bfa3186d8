// The local operations at the value level (IBA 10.6.7 memory windows, 10.6.8 invalidation):
// BIND_MW and LOCAL_INV run when the requester reaches them in send-queue order, complete in
// order behind the WQEs before them, fail with IBV_WC_MW_BIND_ERR / LOC_QP_OP_ERR and the QP
// in ERR (rxe_req.c); the responder refuses a type 2 window's R_Key on another QP.
#include <catch2/catch.hpp>

#include "tests/sim/engine_harness.h"

namespace rrdma::test {
namespace {

SendWr bind_wr(std::uint64_t id, Rkey window, Rkey next, const MrFacts& mr, std::uint32_t flags = send_flags::kSignaled) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = WrOpcode::BindMw;
  wr.flags = flags;
  wr.bind = {window, next, mr.lkey, mr.base, 256, access::kRemoteWrite};
  return wr;
}

SendWr local_inv_wr(std::uint64_t id, Rkey key) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = WrOpcode::LocalInv;
  wr.flags = send_flags::kSignaled;
  wr.invalidate_rkey = key;
  return wr;
}

}  // namespace

TEST_CASE("a bind behind an unacknowledged WRITE runs at once and completes after the WRITE") {
  Pair p;
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 4096, 0x10000);
  const MrFacts dst = p.b.memory.add(p.b.pd, kAllRemote, 4096, 0x20000);
  SendWr write = send_wr(1, WrOpcode::RdmaWrite, src, 2048);
  write.remote_addr = dst.base;
  write.rkey = dst.rkey;
  REQUIRE(p.a.engine.post_send(p.a.qpn, write, p.now) == VerbResult::Ok);
  REQUIRE(p.a.engine.post_send(p.a.qpn, bind_wr(2, Rkey(0x300100), Rkey(0x300101), src), p.now) == VerbResult::Ok);
  // Executed when the requester reached it, with the QP's PD and number; no packet for it.
  REQUIRE(p.a.memory.binds.size() == 1);
  CHECK(p.a.memory.binds[0].bind.mw_rkey == Rkey(0x300100));
  CHECK(p.a.memory.binds[0].bind.new_rkey == Rkey(0x300101));
  CHECK(p.a.memory.binds[0].bind.length == 256);
  CHECK(p.a.memory.binds[0].qp_pd == p.a.pd);
  CHECK(p.a.memory.binds[0].qpn == p.a.qpn);
  const std::vector<Captured> sent = p.a.host.take_sent();
  CHECK(sent.size() == 2);  // the WRITE's two packets
  CHECK(p.a.host.completions.empty());  // the WRITE is not acknowledged yet
  p.deliver(p.a, p.b, sent);
  p.deliver(p.b, p.a, p.b.host.take_sent());
  const std::vector<Completion> done = p.a.host.take_completions();
  REQUIRE(done.size() == 2);
  CHECK(done[0].wr_id == 1);
  CHECK(done[0].opcode == WcOpcode::RdmaWrite);
  CHECK(done[1].wr_id == 2);
  CHECK(done[1].opcode == WcOpcode::BindMw);
  CHECK(done[1].status == WcStatus::Success);
  CHECK(done[1].byte_len == 0);
}

TEST_CASE("a local operation with nothing before it completes at once, on RC and on UC, unsignaled ones silently") {
  for (const QpType type : {QpType::Rc, QpType::Uc}) {
    Pair p(type);
    const MrFacts mr = p.a.memory.add(p.a.pd, access::kLocalWrite, 4096, 0x10000);
    REQUIRE(p.a.engine.post_send(p.a.qpn, bind_wr(1, Rkey(0x300100), Rkey(0x300101), mr, 0), p.now) == VerbResult::Ok);
    REQUIRE(p.a.engine.post_send(p.a.qpn, local_inv_wr(2, Rkey(0x300101)), p.now) == VerbResult::Ok);
    const std::vector<Completion> done = p.a.host.take_completions();
    REQUIRE(done.size() == 1);
    CHECK(done[0].wr_id == 2);
    CHECK(done[0].opcode == WcOpcode::LocalInv);
    REQUIRE(p.a.memory.local_invalidations.size() == 1);
    CHECK(p.a.memory.local_invalidations[0].first == Rkey(0x300101));
    CHECK(p.a.host.sent.empty());
    CHECK(p.a.state() == QpState::Rts);
  }
}

TEST_CASE("local operations are refused on UD, at post time") {
  Pair p(QpType::Ud);
  const MrFacts mr = p.a.memory.add(p.a.pd, access::kLocalWrite, 4096, 0x10000);
  CHECK(p.a.engine.post_send(p.a.qpn, bind_wr(1, Rkey(1), Rkey(2), mr), p.now) == VerbResult::InvalidArgument);
  CHECK(p.a.engine.post_send(p.a.qpn, local_inv_wr(2, Rkey(1)), p.now) == VerbResult::InvalidArgument);
  CHECK(p.a.memory.binds.empty());
}

TEST_CASE("a refused bind completes with the bind error, the QP goes to ERR and flushes what follows") {
  Pair p;
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 4096, 0x10000);
  p.a.memory.local_ok = false;
  REQUIRE(p.a.engine.post_send(p.a.qpn, bind_wr(1, Rkey(7), Rkey(8), src), p.now) == VerbResult::Ok);
  REQUIRE(p.a.engine.post_send(p.a.qpn, send_wr(2, WrOpcode::Send, src, 16), p.now) == VerbResult::Ok);
  const std::vector<Completion> done = p.a.host.take_completions();
  REQUIRE(done.size() == 2);
  CHECK(done[0].wr_id == 1);
  CHECK(done[0].status == WcStatus::MwBindErr);
  CHECK(done[0].opcode == WcOpcode::BindMw);
  CHECK(done[1].status == WcStatus::WrFlushErr);
  CHECK(p.a.state() == QpState::Err);
  CHECK(p.a.host.sent.empty());
}

TEST_CASE("a refused LOCAL_INV completes with the local QP operation error") {
  Pair p(QpType::Uc);
  p.a.memory.local_ok = false;
  REQUIRE(p.a.engine.post_send(p.a.qpn, local_inv_wr(4, Rkey(0x500001)), p.now) == VerbResult::Ok);
  const std::vector<Completion> done = p.a.host.take_completions();
  REQUIRE(done.size() == 1);
  CHECK(done[0].status == WcStatus::LocQpOpErr);
  CHECK(done[0].opcode == WcOpcode::LocalInv);
  CHECK(p.a.state() == QpState::Err);
}

TEST_CASE("a go-back-N retransmission resends the WRITE around a bind and does not run the bind again") {
  Pair p;
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 4096, 0x10000);
  const MrFacts dst = p.b.memory.add(p.b.pd, kAllRemote, 4096, 0x20000);
  SendWr write = send_wr(1, WrOpcode::RdmaWrite, src, 512);
  write.remote_addr = dst.base;
  write.rkey = dst.rkey;
  REQUIRE(p.a.engine.post_send(p.a.qpn, write, p.now) == VerbResult::Ok);
  REQUIRE(p.a.engine.post_send(p.a.qpn, bind_wr(2, Rkey(0x300100), Rkey(0x300101), src), p.now) == VerbResult::Ok);
  write.wr_id = 3;
  REQUIRE(p.a.engine.post_send(p.a.qpn, write, p.now) == VerbResult::Ok);
  CHECK(p.a.host.take_sent().size() == 2);  // both WRITEs; both lost
  p.now += std::chrono::seconds(1);         // past the local ACK timeout
  p.a.engine.advance(p.now);
  const std::vector<Captured> again = p.a.host.take_sent();
  CHECK(again.size() == 2);
  CHECK(p.a.memory.binds.size() == 1);
  p.deliver(p.a, p.b, again);
  p.deliver(p.b, p.a, p.b.host.take_sent());
  const std::vector<Completion> done = p.a.host.take_completions();
  REQUIRE(done.size() == 3);
  CHECK(done[0].wr_id == 1);
  CHECK(done[1].wr_id == 2);
  CHECK(done[2].wr_id == 3);
}

TEST_CASE("a type 2 window's R_Key works through the QP it is bound to and is an access error on another") {
  Pair p;
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 4096, 0x10000);
  const MrFacts dst = p.b.memory.add(p.b.pd, kAllRemote, 4096, 0x20000);
  SendWr write = send_wr(1, WrOpcode::RdmaWrite, src, 64);
  write.remote_addr = dst.base;
  write.rkey = dst.rkey;
  SECTION("its own QP") {
    p.b.memory.bind_to_qp(dst, p.b.qpn);
    REQUIRE(p.a.engine.post_send(p.a.qpn, write, p.now) == VerbResult::Ok);
    p.deliver(p.a, p.b, p.a.host.take_sent());
    p.deliver(p.b, p.a, p.b.host.take_sent());
    REQUIRE(p.a.host.completions.size() == 1);
    CHECK(p.a.host.completions[0].status == WcStatus::Success);
  }
  SECTION("another QP") {
    p.b.memory.bind_to_qp(dst, Qpn(p.b.qpn.value() + 1));
    REQUIRE(p.a.engine.post_send(p.a.qpn, write, p.now) == VerbResult::Ok);
    p.deliver(p.a, p.b, p.a.host.take_sent());
    CHECK(p.b.observer.count(PacketDecision::AccessErrorNak) == 1);
    p.deliver(p.b, p.a, p.b.host.take_sent());
    REQUIRE(p.a.host.completions.size() == 1);
    CHECK(p.a.host.completions[0].status == WcStatus::RemAccessErr);
    CHECK(p.b.memory.out_of_bounds == 0);
  }
}

}  // namespace rrdma::test
