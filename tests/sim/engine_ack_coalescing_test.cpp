// ACK coalescing (Engine::hold_acks, docs/TRANSPORT.md "ACK coalescing"): while ACKs are
// held, the responder owes each QP one ACK, the latest, sent at release_acks(); a packet
// that acknowledges the same PSNs (READ response, NAK, atomic ACK) replaces it; nothing is
// sent for a QP that is gone or in error; and every WQE still completes.
#include <catch2/catch.hpp>

#include "rocev2/engine/syndrome.h"
#include "tests/sim/engine_harness.h"

namespace rrdma::test {
namespace {

// A connected RC pair with a 64 KiB source on A and a remote-accessible sink on B.
struct Setup {
  Pair pair;
  MrFacts src;
  MrFacts dst;
  explicit Setup(std::uint32_t mtu = 1024) : pair(QpType::Rc, mtu) {
    src = pair.a.memory.add(pair.a.pd, access::kLocalWrite, 1 << 20, 0x1000000);
    dst = pair.b.memory.add(pair.b.pd, kAllRemote, 1 << 20, 0x8000000);
    const std::vector<std::uint8_t> data = pattern(1 << 20, 3);
    std::copy(data.begin(), data.end(), pair.a.memory.bytes(src).begin());
  }
  void post_write(std::uint64_t id, std::uint32_t length, std::uint64_t offset = 0) {
    SendWr wr = send_wr(id, WrOpcode::RdmaWrite, src, length);
    wr.sg_list[0].addr += offset;
    wr.remote_addr = dst.base + offset;
    wr.rkey = dst.rkey;
    REQUIRE(pair.a.engine.post_send(pair.a.qpn, wr, pair.now) == VerbResult::Ok);
  }
  // B holds ACKs and has received one WRITE with AckReq: it owes one ACK.
  void one_write_held() {
    pair.b.engine.hold_acks(true);
    post_write(1, 1000);
    pair.deliver(pair.a, pair.b, pair.a.host.take_sent());
  }
  void post_read(std::uint64_t id, std::uint32_t length) {
    SendWr wr = send_wr(id, WrOpcode::RdmaRead, src, length);
    wr.remote_addr = dst.base;
    wr.rkey = dst.rkey;
    REQUIRE(pair.a.engine.post_send(pair.a.qpn, wr, pair.now) == VerbResult::Ok);
  }
};

int count_opcode(const std::vector<Captured>& sent, Opcode op) {
  int n = 0;
  for (const Captured& c : sent) n += c.packet.bth.opcode == op;
  return n;
}

bool all_succeeded(const std::vector<Completion>& cs) {
  for (const Completion& c : cs)
    if (c.status != WcStatus::Success) return false;
  return true;
}

TEST_CASE("held ACKs: five WRITEs with AckReq in one batch are answered by one ACK, at release") {
  Setup s;
  Pair& p = s.pair;
  p.b.engine.hold_acks(true);
  for (std::uint64_t i = 0; i < 5; ++i) s.post_write(i, 1000, i * 1000);
  const std::vector<Captured> writes = p.a.host.take_sent();
  REQUIRE(writes.size() == 5);
  for (const Captured& w : writes) CHECK(w.packet.bth.ack_req);
  p.deliver(p.a, p.b, writes);
  CHECK(p.b.host.sent.empty());

  p.b.engine.release_acks();
  const std::vector<Captured> acks = p.b.host.take_sent();
  REQUIRE(acks.size() == 1);
  CHECK(acks[0].packet.bth.opcode == Opcode::RcAck);
  CHECK(acks[0].packet.bth.psn == p.a_psn + 4);
  CHECK(acks[0].packet.aeth->syndrome == ack_syndrome());
  CHECK(acks[0].packet.aeth->msn == Msn(5));
  p.b.engine.release_acks();
  CHECK(p.b.host.sent.empty());  // owed once, sent once

  p.deliver(p.b, p.a, acks);
  const std::vector<Completion> done = p.a.host.take_completions();
  CHECK(done.size() == 5);
  CHECK(all_succeeded(done));
}

TEST_CASE("a released ACK covers a message that ended after the held PSN without AckReq") {
  Setup s;
  Pair& p = s.pair;
  p.b.engine.hold_acks(true);
  s.post_write(1, 1000);
  s.post_write(2, 1000, 1000);
  std::vector<Captured> writes = p.a.host.take_sent();
  REQUIRE(writes.size() == 2);
  writes[1].packet.bth.ack_req = false;  // another requester's choice: legal, if unusual
  p.deliver(p.a, p.b, writes);
  p.b.engine.release_acks();
  const std::vector<Captured> acks = p.b.host.take_sent();
  REQUIRE(acks.size() == 1);
  CHECK(acks[0].packet.bth.psn == p.a_psn + 1);
  CHECK(acks[0].packet.aeth->msn == Msn(2));
  p.deliver(p.b, p.a, acks);
  CHECK(p.a.host.completions.size() == 2);
}

TEST_CASE("without holding, the responder answers every AckReq at once") {
  Setup s;
  Pair& p = s.pair;
  for (std::uint64_t i = 0; i < 5; ++i) s.post_write(i, 1000, i * 1000);
  p.deliver(p.a, p.b, p.a.host.take_sent());
  CHECK(count_opcode(p.b.host.sent, Opcode::RcAck) == 5);
  p.b.engine.release_acks();
  CHECK(p.b.host.sent.size() == 5);
}

TEST_CASE("a packet that acknowledges the held PSN replaces the held ACK") {
  Setup s;
  Pair& p = s.pair;
  p.b.engine.hold_acks(true);

  SECTION("a READ response after a WRITE") {
    s.post_write(1, 1000);
    s.post_read(2, 2000);
    p.deliver(p.a, p.b, p.a.host.take_sent());
    p.b.engine.release_acks();
    const std::vector<Captured> out = p.b.host.take_sent();
    CHECK(count_opcode(out, Opcode::RcAck) == 0);
    CHECK(count_opcode(out, Opcode::RcReadResponseFirst) == 1);
    CHECK(count_opcode(out, Opcode::RcReadResponseLast) == 1);
    p.deliver(p.b, p.a, out);
    const std::vector<Completion> done = p.a.host.take_completions();
    CHECK(done.size() == 2);
    CHECK(all_succeeded(done));
  }

  SECTION("a sequence NAK after a WRITE (its PSN - 1 is the WRITE's)") {
    for (std::uint64_t i = 0; i < 3; ++i) s.post_write(i, 1000, i * 1000);
    const std::vector<Captured> writes = p.a.host.take_sent();
    p.deliver(p.a, p.b, {writes[0], writes[2]});
    p.b.engine.release_acks();
    const std::vector<Captured> out = p.b.host.take_sent();
    REQUIRE(out.size() == 1);
    CHECK(out[0].packet.aeth->syndrome == nak_syndrome(NakCode::PsnSequenceError));
    CHECK(out[0].packet.bth.psn == p.a_psn + 1);
    p.deliver(p.b, p.a, out);
    CHECK(p.a.host.completions.size() == 1);  // the first WRITE, acknowledged by the NAK
  }
}

TEST_CASE("a duplicate READ's responses do not cover a newer held ACK") {
  Setup s;
  Pair& p = s.pair;
  p.b.engine.hold_acks(true);
  s.post_read(1, 1000);
  s.post_write(2, 1000, 4096);
  const std::vector<Captured> reqs = p.a.host.take_sent();
  REQUIRE(reqs.size() == 2);
  p.deliver(p.a, p.b, reqs);
  p.b.host.take_sent();                 // the READ's response
  p.deliver(p.a, p.b, {reqs[0]});       // the READ again, as after a lost response
  CHECK(count_opcode(p.b.host.take_sent(), Opcode::RcReadResponseOnly) == 1);
  p.b.engine.release_acks();
  const std::vector<Captured> acks = p.b.host.take_sent();
  REQUIRE(acks.size() == 1);
  CHECK(acks[0].packet.bth.opcode == Opcode::RcAck);
  CHECK(acks[0].packet.bth.psn == p.a_psn + 1);
}

TEST_CASE("no held ACK goes out for a QP that is in ERR, reset or destroyed at release") {
  Setup s;
  Pair& p = s.pair;
  s.one_write_held();
  QpAttr attr;
  SECTION("ERR") {
    attr.state = QpState::Err;
    REQUIRE(p.b.engine.modify_qp(p.b.qpn, attr, qp_attr::kState, p.now) == VerbResult::Ok);
  }
  SECTION("RESET") {
    attr.state = QpState::Reset;
    REQUIRE(p.b.engine.modify_qp(p.b.qpn, attr, qp_attr::kState, p.now) == VerbResult::Ok);
  }
  SECTION("destroyed") { REQUIRE(p.b.engine.destroy_qp(p.b.qpn) == VerbResult::Ok); }
  p.b.engine.release_acks();
  CHECK(count_opcode(p.b.host.sent, Opcode::RcAck) == 0);
}

TEST_CASE("turning holding off sends what is held") {
  Setup s;
  Pair& p = s.pair;
  s.one_write_held();
  CHECK(p.b.host.sent.empty());
  p.b.engine.hold_acks(false);
  CHECK(count_opcode(p.b.host.take_sent(), Opcode::RcAck) == 1);
  s.post_write(2, 1000, 1000);
  p.deliver(p.a, p.b, p.a.host.take_sent());
  CHECK(count_opcode(p.b.host.sent, Opcode::RcAck) == 1);  // answered at once again
}

// Both engines hold, and release after each batch they receive, as the daemon does: 1 MiB
// in 16 WRITEs of 64 KiB at MTU 4096 completes, with fewer ACKs than AckReq packets.
TEST_CASE("held ACKs released per batch: a window of WRITEs completes with fewer ACKs") {
  Setup s(4096);
  Pair& p = s.pair;
  p.a.engine.hold_acks(true);
  p.b.engine.hold_acks(true);
  for (std::uint64_t i = 0; i < 16; ++i) s.post_write(i, 64 * 1024, i * 64 * 1024);
  int ack_requests = 0;
  int acks = 0;
  for (int round = 0; round < 1000; ++round) {
    std::vector<Captured> ab = p.a.host.take_sent();
    std::vector<Captured> ba = p.b.host.take_sent();
    if (ab.empty() && ba.empty()) break;
    for (const Captured& c : ab) ack_requests += c.packet.bth.ack_req;
    acks += count_opcode(ba, Opcode::RcAck);
    p.deliver(p.a, p.b, ab);
    p.b.engine.release_acks();
    p.deliver(p.b, p.a, ba);
    p.a.engine.release_acks();
  }
  const std::vector<Completion> done = p.a.host.take_completions();
  CHECK(done.size() == 16);
  CHECK(all_succeeded(done));
  CHECK(acks > 0);
  CHECK(acks < ack_requests);
  CHECK(std::equal(p.a.memory.bytes(s.src).begin(), p.a.memory.bytes(s.src).end(),
                   p.b.memory.bytes(s.dst).begin()));
  CHECK(p.a.engine.counters().retransmits == 0);
}

}  // namespace
}  // namespace rrdma::test
