// UC and UD through the engine: no acknowledgements; a UC PSN gap loses the message in
// progress (IBA 9.8.3) and its receive WQE is used by the next one; UD checks the Q_Key,
// puts the GRH area (20 zero bytes + the IPv4 header, as rxe) ahead of the payload and
// reports the source QP. Packets compared with rxe_uc_pingpong and rxe_ud_pingpong.
#include <catch2/catch.hpp>

#include <algorithm>

#include "rocev2/encap.h"
#include "tests/capture_file.h"
#include "tests/sim/engine_harness.h"

namespace rrdma::test {
namespace {

RoceFrame parse_capture_frame(const Frame& f) {
  RoceFrame out;
  REQUIRE(parse_frame(f, out).ok());
  return out;
}

TEST_CASE("UC SEND of 2000 bytes: FIRST and LAST as rxe sends them, completed without an ACK") {
  const std::vector<Frame> rxe = read_capture(data_path("rxe_uc_pingpong.pcapng"));
  Pair p(QpType::Uc);
  const RoceFrame first = parse_capture_frame(rxe[0]);
  QpAttr attr;
  attr.sq_psn = first.packet.bth.psn;
  REQUIRE(p.a.engine.modify_qp(p.a.qpn, attr, qp_attr::kSqPsn, p.now) == VerbResult::Ok);
  attr.rq_psn = first.packet.bth.psn;
  REQUIRE(p.b.engine.modify_qp(p.b.qpn, attr, qp_attr::kRqPsn, p.now) == VerbResult::Ok);

  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 2000, 0x10000);
  const MrFacts dst = p.b.memory.add(p.b.pd, access::kLocalWrite, 4096, 0x20000);
  const std::vector<std::uint8_t> data = pattern(2000, 1);
  std::copy(data.begin(), data.end(), p.a.memory.bytes(src).begin());
  p.b.engine.post_recv(p.b.qpn, recv_wr(1, dst, 4096));
  p.a.engine.post_send(p.a.qpn, send_wr(1, WrOpcode::Send, src, 2000), p.now);
  const std::vector<Captured> out = p.a.host.take_sent();
  REQUIRE(out.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    const RoceFrame theirs = parse_capture_frame(rxe[i]);
    CHECK(out[i].packet.bth == theirs.packet.bth);
    CHECK(frame_length(out[i].view()) == rxe[i].size());
  }
  REQUIRE(p.a.host.completions.size() == 1);  // UC completes once the last packet is out
  CHECK(p.a.host.completions[0].status == WcStatus::Success);
  p.deliver(p.a, p.b, out);
  CHECK(p.b.host.sent.empty());
  REQUIRE(p.b.host.completions.size() == 1);
  CHECK(p.b.host.completions[0].byte_len == 2000);
  CHECK(std::equal(data.begin(), data.end(), p.b.memory.bytes(dst).begin()));
}

TEST_CASE("UC: a PSN gap drops the message in progress and the next message takes its receive WQE") {
  Pair p(QpType::Uc);
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 3000, 0x10000);
  const MrFacts dst = p.b.memory.add(p.b.pd, access::kLocalWrite, 4096, 0x20000);
  p.b.engine.post_recv(p.b.qpn, recv_wr(1, dst, 4096));
  p.b.engine.post_recv(p.b.qpn, recv_wr(2, dst, 4096));
  p.a.engine.post_send(p.a.qpn, send_wr(1, WrOpcode::Send, src, 3000), p.now);
  const std::vector<Captured> broken = p.a.host.take_sent();
  REQUIRE(broken.size() == 3);
  p.deliver(p.a, p.b, {broken[0], broken[2]});  // MIDDLE lost
  CHECK(p.b.host.completions.empty());
  CHECK(p.b.host.sent.empty());
  CHECK(p.b.engine.counters().uc_messages_dropped == 1);
  CHECK(p.b.observer.count(PacketDecision::UcMessageDropped) == 1);

  p.a.engine.post_send(p.a.qpn, send_wr(2, WrOpcode::Send, src, 700), p.now);
  p.deliver(p.a, p.b, p.a.host.take_sent());
  REQUIRE(p.b.host.completions.size() == 1);
  CHECK(p.b.host.completions[0].wr_id == 1);
  CHECK(p.b.host.completions[0].byte_len == 700);
  CHECK(p.b.state() == QpState::Rts);
}

TEST_CASE("UC: a duplicate or late packet (PSN behind the expected one) is dropped") {
  Pair p(QpType::Uc);
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 100, 0x10000);
  const MrFacts dst = p.b.memory.add(p.b.pd, access::kLocalWrite, 4096, 0x20000);
  p.b.engine.post_recv(p.b.qpn, recv_wr(1, dst, 4096));
  p.b.engine.post_recv(p.b.qpn, recv_wr(2, dst, 4096));
  p.a.engine.post_send(p.a.qpn, send_wr(1, WrOpcode::Send, src, 10), p.now);
  p.a.engine.post_send(p.a.qpn, send_wr(2, WrOpcode::Send, src, 20), p.now);
  const std::vector<Captured> out = p.a.host.take_sent();
  REQUIRE(out.size() == 2);
  p.deliver(p.a, p.b, {out[1], out[0], out[1]});  // reordered, then repeated
  REQUIRE(p.b.host.completions.size() == 1);
  CHECK(p.b.host.completions[0].byte_len == 20);  // the first was lost, never delivered late
  CHECK(p.b.engine.counters().duplicate_requests == 2);
}

TEST_CASE("UC: a SEND with no receive WQE is dropped silently") {
  Pair p(QpType::Uc);
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 100, 0x10000);
  p.a.engine.post_send(p.a.qpn, send_wr(1, WrOpcode::Send, src, 100), p.now);
  p.deliver(p.a, p.b, p.a.host.take_sent());
  CHECK(p.b.host.sent.empty());
  CHECK(p.b.host.completions.empty());
  CHECK(p.b.state() == QpState::Rts);
}

TEST_CASE("UC RDMA WRITE with immediate lands and completes a receive WQE") {
  Pair p(QpType::Uc);
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 1500, 0x10000);
  const MrFacts dst = p.b.memory.add(p.b.pd, access::kRemoteWrite, 1500, 0x20000);
  std::fill(p.a.memory.bytes(src).begin(), p.a.memory.bytes(src).end(), 0x5A);
  p.b.engine.post_recv(p.b.qpn, RecvWr{7, {}});
  SendWr wr = send_wr(1, WrOpcode::RdmaWriteWithImm, src, 1500);
  wr.remote_addr = dst.base;
  wr.rkey = dst.rkey;
  wr.imm_data = 99;
  p.a.engine.post_send(p.a.qpn, wr, p.now);
  const std::vector<Captured> out = p.a.host.take_sent();
  REQUIRE(out.size() == 2);
  CHECK(out[0].packet.bth.opcode == Opcode::UcWriteFirst);
  CHECK(out[1].packet.bth.opcode == Opcode::UcWriteLastImm);
  p.deliver(p.a, p.b, out);
  REQUIRE(p.b.host.completions.size() == 1);
  CHECK(p.b.host.completions[0].opcode == WcOpcode::RecvRdmaWithImm);
  CHECK(p.b.host.completions[0].imm_data == 99);
  CHECK(p.b.memory.bytes(dst)[1499] == 0x5A);
}

struct UdPair {
  Pair p{QpType::Ud};
  MrFacts src;
  MrFacts dst;
  UdPair() {
    src = p.a.memory.add(p.a.pd, access::kLocalWrite, 4096, 0x10000);
    dst = p.b.memory.add(p.b.pd, access::kLocalWrite, 4096, 0x20000);
  }
  SendWr wr(std::uint32_t length, Qkey qkey = Qkey(0x11111111)) {
    SendWr w = send_wr(1, WrOpcode::Send, src, length);
    w.ud_dest_ip = p.b.ip;
    w.ud_remote_qpn = p.b.qpn;
    w.ud_remote_qkey = qkey;
    return w;
  }
};

TEST_CASE("UD SEND of 512 bytes: SEND_ONLY with DETH as rxe and GRH area, source QP and IP reported") {
  const std::vector<Frame> rxe = read_capture(data_path("rxe_ud_pingpong.pcapng"));
  const RoceFrame theirs = parse_capture_frame(rxe[0]);
  UdPair u;
  Pair& p = u.p;
  QpAttr attr;
  attr.sq_psn = theirs.packet.bth.psn;
  REQUIRE(p.a.engine.modify_qp(p.a.qpn, attr, qp_attr::kSqPsn, p.now) == VerbResult::Ok);
  const std::vector<std::uint8_t> data = pattern(512, 4);
  std::copy(data.begin(), data.end(), p.a.memory.bytes(u.src).begin());
  p.b.engine.post_recv(p.b.qpn, recv_wr(5, u.dst, 512 + 40));
  p.a.engine.post_send(p.a.qpn, u.wr(512), p.now);
  const std::vector<Captured> out = p.a.host.take_sent();
  REQUIRE(out.size() == 1);
  CHECK(out[0].packet.bth == theirs.packet.bth);
  CHECK(out[0].packet.deth == theirs.packet.deth);
  CHECK(frame_length(out[0].view()) == rxe[0].size());
  CHECK(out[0].dest == p.b.ip);

  // The receiver gets the IPv4 header of the frame it came in (here: rxe's own).
  std::vector<std::uint8_t> ipv4(rxe[0].begin() + 14, rxe[0].begin() + 34);
  p.b.engine.receive(out[0].view(), PacketSource{p.a.ip, 0xC000, ipv4}, p.now);
  REQUIRE(p.b.host.completions.size() == 1);
  const Completion c = p.b.host.completions[0];
  CHECK(c.status == WcStatus::Success);
  CHECK(c.byte_len == 552);
  CHECK(c.flags == wc_flags::kGrh);
  CHECK(c.src_qp == p.a.qpn);
  CHECK(c.src_ip == p.a.ip);
  const std::span<std::uint8_t> buf = p.b.memory.bytes(u.dst);
  CHECK(std::all_of(buf.begin(), buf.begin() + 20, [](std::uint8_t b) { return b == 0; }));
  CHECK(std::equal(ipv4.begin(), ipv4.end(), buf.begin() + 20));
  CHECK(std::equal(data.begin(), data.end(), buf.begin() + 40));
}

TEST_CASE("UD: a wrong Q_Key is dropped and counted and a controlled Q_Key uses the QP's own") {
  UdPair u;
  Pair& p = u.p;
  p.b.engine.post_recv(p.b.qpn, recv_wr(5, u.dst, 4096));
  p.a.engine.post_send(p.a.qpn, u.wr(16, Qkey(0x22222222)), p.now);
  p.deliver(p.a, p.b, p.a.host.take_sent());
  CHECK(p.b.host.completions.empty());
  CHECK(p.b.engine.counters().qkey_mismatch == 1);

  p.a.engine.post_send(p.a.qpn, u.wr(16, Qkey(0x80000000)), p.now);
  const std::vector<Captured> out = p.a.host.take_sent();
  REQUIRE(out.size() == 1);
  CHECK(out[0].packet.deth->qkey == Qkey(0x11111111));
  p.deliver(p.a, p.b, out);
  REQUIRE(p.b.host.completions.size() == 1);
  CHECK(p.b.host.completions[0].status == WcStatus::Success);
}

TEST_CASE("UD: a message above the path MTU fails locally and a short receive buffer fails at the receiver") {
  UdPair u;
  Pair& p = u.p;
  p.a.engine.post_send(p.a.qpn, u.wr(1025), p.now);
  CHECK(p.a.host.sent.empty());
  REQUIRE(p.a.host.completions.size() == 1);
  CHECK(p.a.host.completions[0].status == WcStatus::LocLenErr);
  CHECK(p.a.state() == QpState::Sqe);  // UD: the send queue stops, the receive side goes on
  p.b.engine.post_recv(p.b.qpn, recv_wr(6, u.dst, 4096));
  p.b.engine.post_send(p.b.qpn, [&] {
    SendWr back = send_wr(2, WrOpcode::Send, u.dst, 10);
    back.ud_dest_ip = p.a.ip;
    back.ud_remote_qpn = p.a.qpn;
    back.ud_remote_qkey = Qkey(0x11111111);
    return back;
  }(), p.now);
  p.a.engine.post_recv(p.a.qpn, recv_wr(7, u.src, 4096));
  p.deliver(p.b, p.a, p.b.host.take_sent());
  REQUIRE(p.a.host.completions.size() == 2);
  CHECK(p.a.host.completions[1].wr_id == 7);
  CHECK(p.a.host.completions[1].status == WcStatus::Success);

  UdPair v;
  v.p.b.engine.post_recv(v.p.b.qpn, recv_wr(5, v.dst, 100));  // 40 + 100 does not fit
  v.p.a.engine.post_send(v.p.a.qpn, v.wr(100), v.p.now);
  v.p.deliver(v.p.a, v.p.b, v.p.a.host.take_sent());
  REQUIRE(v.p.b.host.completions.size() == 1);
  CHECK(v.p.b.host.completions[0].status == WcStatus::LocLenErr);
}

// Issue 27: memory a receive WQE's L_Key does not cover is a class A error on every
// transport (rxe: RESPST_ERR_MALFORMED_WQE): the WQE completes in error and the QP goes to
// ERR, flushing the rest. It used to be kept (UC) or passed over (UD) while the QP went on.
TEST_CASE("UC and UD: a receive WQE outside its region completes LocProtErr, the QP goes to ERR, the rest flush") {
  for (const QpType type : {QpType::Uc, QpType::Ud}) {
    INFO("type " << int(type));
    Pair p(type);
    const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 4096, 0x10000);
    const MrFacts dst = p.b.memory.add(p.b.pd, access::kLocalWrite, 4096, 0x20000);
    RecvWr outside = recv_wr(1, dst, 4096);
    outside.sg_list[0].addr += 4096;  // just past the region
    p.b.engine.post_recv(p.b.qpn, outside);
    p.b.engine.post_recv(p.b.qpn, recv_wr(2, dst, 4096));
    SendWr wr = send_wr(1, WrOpcode::Send, src, 100);
    wr.ud_dest_ip = p.b.ip;
    wr.ud_remote_qpn = p.b.qpn;
    wr.ud_remote_qkey = Qkey(0x11111111);
    p.a.engine.post_send(p.a.qpn, wr, p.now);
    p.deliver(p.a, p.b, p.a.host.take_sent());
    const auto& c = p.b.host.completions;
    REQUIRE(c.size() == 2);
    CHECK(c[0].wr_id == 1);
    CHECK(c[0].status == WcStatus::LocProtErr);
    CHECK(c[1].wr_id == 2);
    CHECK(c[1].status == WcStatus::WrFlushErr);
    CHECK(p.b.state() == QpState::Err);
    CHECK(p.b.host.sent.empty());  // nothing told to the requester
  }
}

}  // namespace
}  // namespace rrdma::test
