// The engine's packets against Linux rxe's, packet by packet: for an RC SEND of 3000 bytes
// (rxe_rc_pingpong), an RDMA WRITE of 10000 bytes (rxe_write_bw) and an RDMA READ of 10000
// bytes (rxe_read_bw), all at path MTU 1024, the engine must send the same opcodes, frame
// lengths and header fields as rxe did. The engine numbers its first QP 17 as rxe does, and
// the tests start the PSNs where the captures start, so whole BTHs compare equal.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "rocev2/encap.h"
#include "tests/capture_file.h"
#include "tests/sim/engine_harness.h"

namespace rrdma::test {
namespace {

struct CapturedRoce {
  Frame bytes;
  RoceFrame frame;
};

// Every frame of a capture, parsed and ICRC-verified by the wire layer.
std::vector<CapturedRoce> load(const std::string& name) {
  std::vector<CapturedRoce> out;
  for (Frame& f : read_capture(data_path(name))) out.push_back({std::move(f), {}});
  for (CapturedRoce& c : out) REQUIRE(parse_frame(c.bytes, c.frame).ok());
  return out;
}

// What must agree between an engine packet and an rxe packet: everything in the headers
// but the addresses and keys chosen by the programs, and the frame length.
void check_same(const Captured& ours, const CapturedRoce& theirs) {
  const TransportPacket p = ours.view();
  const TransportPacket& t = theirs.frame.packet;
  INFO("rxe " << opcode_info(t.bth.opcode).name << " PSN " << t.bth.psn.value());
  CHECK(p.bth == t.bth);
  CHECK(frame_length(p) == theirs.bytes.size());
  CHECK(p.payload.size() == t.payload.size());
  CHECK(p.aeth == t.aeth);
  CHECK(p.reth.has_value() == t.reth.has_value());
  if (p.reth && t.reth) CHECK(p.reth->dma_length == t.reth->dma_length);
  CHECK(p.atomic_eth.has_value() == t.atomic_eth.has_value());
  CHECK(p.atomic_ack_eth.has_value() == t.atomic_ack_eth.has_value());
  CHECK(p.imm.has_value() == t.imm.has_value());
  CHECK(p.ieth.has_value() == t.ieth.has_value());
  CHECK(p.deth.has_value() == t.deth.has_value());
}

// What `from` sent since the last look: exactly `count` packets, the same as rxe's frames
// rxe[first] .. rxe[first + count - 1].
std::vector<Captured> take_matching(Side& from, std::size_t count, const std::vector<CapturedRoce>& rxe,
                                    std::size_t first) {
  std::vector<Captured> sent = from.host.take_sent();
  REQUIRE(sent.size() == count);
  for (std::size_t i = 0; i < count; ++i) check_same(sent[i], rxe[first + i]);
  return sent;
}

// A pair whose PSNs start where the capture's do (client a = 10.77.0.3, server b = 10.77.0.2).
void restart_psns(Pair& p, Psn client, Psn server) {
  QpAttr attr;
  attr.sq_psn = client;
  REQUIRE(p.a.engine.modify_qp(p.a.qpn, attr, qp_attr::kSqPsn, p.now) == VerbResult::Ok);
  attr.rq_psn = client;
  REQUIRE(p.b.engine.modify_qp(p.b.qpn, attr, qp_attr::kRqPsn, p.now) == VerbResult::Ok);
  attr.sq_psn = server;
  REQUIRE(p.b.engine.modify_qp(p.b.qpn, attr, qp_attr::kSqPsn, p.now) == VerbResult::Ok);
  attr.rq_psn = server;
  REQUIRE(p.a.engine.modify_qp(p.a.qpn, attr, qp_attr::kRqPsn, p.now) == VerbResult::Ok);
}

TEST_CASE("RC SEND of 3000 bytes matches rxe_rc_pingpong") {
  const std::vector<CapturedRoce> rxe = load("rxe_rc_pingpong.pcapng");
  Pair p;
  REQUIRE(p.a.qpn == Qpn(0x11));
  restart_psns(p, rxe[0].frame.packet.bth.psn, rxe[4].frame.packet.bth.psn);
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 3000, 0x10000);
  const MrFacts dst = p.b.memory.add(p.b.pd, access::kLocalWrite, 4096, 0x20000);
  p.b.engine.post_recv(p.b.qpn, recv_wr(1, dst, 4096));
  p.a.engine.post_send(p.a.qpn, send_wr(1, WrOpcode::Send, src, 3000), p.now);
  p.deliver(p.a, p.b, take_matching(p.a, 3, rxe, 0));
  take_matching(p.b, 1, rxe, 3);
}

TEST_CASE("RDMA WRITE of 10000 bytes matches rxe_write_bw") {
  const std::vector<CapturedRoce> rxe = load("rxe_write_bw.pcapng");
  Pair p;
  restart_psns(p, rxe[0].frame.packet.bth.psn, Psn(0));
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 10000, 0x10000);
  const MrFacts dst = p.b.memory.add(p.b.pd, access::kRemoteWrite, 10000, 0x20000);
  SendWr wr = send_wr(1, WrOpcode::RdmaWrite, src, 10000);
  wr.remote_addr = dst.base;
  wr.rkey = dst.rkey;
  p.a.engine.post_send(p.a.qpn, wr, p.now);
  p.deliver(p.a, p.b, take_matching(p.a, 10, rxe, 0));
  // rxe's ACK of the first WRITE is frame 51: PSN of its LAST, MSN 1.
  take_matching(p.b, 1, rxe, 50);
}

TEST_CASE("RDMA READ of 10000 bytes matches rxe_read_bw") {
  const std::vector<CapturedRoce> rxe = load("rxe_read_bw.pcapng");
  Pair p;
  restart_psns(p, rxe[0].frame.packet.bth.psn, Psn(0));
  const MrFacts src = p.b.memory.add(p.b.pd, access::kRemoteRead, 10000, 0x10000);
  const MrFacts dst = p.a.memory.add(p.a.pd, access::kLocalWrite, 10000, 0x20000);
  SendWr wr = send_wr(1, WrOpcode::RdmaRead, dst, 10000);
  wr.remote_addr = src.base;
  wr.rkey = src.rkey;
  p.a.engine.post_send(p.a.qpn, wr, p.now);
  p.deliver(p.a, p.b, take_matching(p.a, 1, rxe, 0));
  // Frames 6..15: FIRST (AETH, MSN 1), 8 × MIDDLE, LAST (AETH, MSN 1).
  p.deliver(p.b, p.a, take_matching(p.b, 10, rxe, 5));
  REQUIRE(p.a.host.completions.size() == 1);
  CHECK(p.a.host.completions[0].status == WcStatus::Success);
  CHECK(p.a.host.completions[0].byte_len == 10000);
}

TEST_CASE("FETCH_ADD matches rxe_atomic_bw") {
  const std::vector<CapturedRoce> rxe = load("rxe_atomic_bw.pcapng");
  Pair p;
  restart_psns(p, rxe[0].frame.packet.bth.psn, Psn(0));
  const MrFacts remote = p.b.memory.add(p.b.pd, access::kRemoteAtomic, 64, 0x10000);
  const MrFacts local = p.a.memory.add(p.a.pd, access::kLocalWrite, 8, 0x20000);
  SendWr wr = send_wr(1, WrOpcode::AtomicFetchAdd, local, 8);
  wr.remote_addr = remote.base;
  wr.rkey = remote.rkey;
  wr.compare_add = rxe[0].frame.packet.atomic_eth->swap_add;
  p.a.engine.post_send(p.a.qpn, wr, p.now);
  const std::vector<Captured> request = take_matching(p.a, 1, rxe, 0);
  CHECK(request[0].packet.atomic_eth->compare == rxe[0].frame.packet.atomic_eth->compare);
  p.deliver(p.a, p.b, request);
  take_matching(p.b, 1, rxe, 5);  // frame 6: ATOMIC_ACKNOWLEDGE of the first FETCH_ADD, MSN 1
}

}  // namespace
}  // namespace rrdma::test
