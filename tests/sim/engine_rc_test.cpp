// The RC transport engine at the value level: segmentation, ACKs, duplicates, PSN gaps,
// RNR, READ and atomic recovery, access errors, retry exhaustion and flushing. Packets
// move between two engines only when the test moves them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>

#include "rocev2/engine/syndrome.h"
#include "tests/sim/engine_harness.h"

namespace rrdma::test {
namespace {

using namespace std::chrono_literals;

struct SendSetup {
  Pair pair;
  MrFacts src;
  MrFacts dst;
  std::vector<std::uint8_t> data;
  SendSetup(std::size_t length) {
    src = pair.a.memory.add(pair.a.pd, access::kLocalWrite, length, 0x10000);
    dst = pair.b.memory.add(pair.b.pd, access::kLocalWrite, 8192, 0x20000);
    data = pattern(length, 3);
    std::copy(data.begin(), data.end(), pair.a.memory.bytes(src).begin());
  }
};

TEST_CASE("RC SEND of 3000 bytes at MTU 1024 is FIRST, MIDDLE, LAST with AckReq on the last") {
  SendSetup s(3000);
  Pair& p = s.pair;
  REQUIRE(p.b.engine.post_recv(p.b.qpn, recv_wr(77, s.dst, 8192)) == VerbResult::Ok);
  REQUIRE(p.a.engine.post_send(p.a.qpn, send_wr(5, WrOpcode::Send, s.src, 3000), p.now) == VerbResult::Ok);

  const std::vector<Captured> out = p.a.host.take_sent();
  REQUIRE(out.size() == 3);
  const Opcode want[] = {Opcode::RcSendFirst, Opcode::RcSendMiddle, Opcode::RcSendLast};
  const std::size_t sizes[] = {1024, 1024, 952};
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(out[i].packet.bth.opcode == want[i]);
    CHECK(out[i].packet.bth.psn == p.a_psn + static_cast<std::uint32_t>(i));
    CHECK(out[i].packet.bth.dest_qp == p.b.qpn);
    CHECK(out[i].packet.bth.ack_req == (i == 2));
    CHECK(out[i].payload.size() == sizes[i]);
    CHECK(out[i].dest == p.b.ip);
    CHECK(out[i].src_qpn == p.a.qpn);
  }

  p.deliver(p.a, p.b, out);
  const std::vector<Captured> acks = p.b.host.take_sent();
  REQUIRE(acks.size() == 1);
  CHECK(acks[0].packet.bth.opcode == Opcode::RcAck);
  CHECK(acks[0].packet.bth.psn == p.a_psn + 2);
  CHECK(acks[0].packet.aeth->syndrome == 0x1F);
  CHECK(acks[0].packet.aeth->msn == Msn(1));
  const std::vector<Completion> rc = p.b.host.take_completions();
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].wr_id == 77);
  CHECK(rc[0].status == WcStatus::Success);
  CHECK(rc[0].opcode == WcOpcode::Recv);
  CHECK(rc[0].byte_len == 3000);
  CHECK_FALSE(rc[0].send_queue);
  CHECK(std::equal(s.data.begin(), s.data.end(), p.b.memory.bytes(s.dst).begin()));

  CHECK(p.a.host.completions.empty());
  p.deliver(p.b, p.a, acks);
  const std::vector<Completion> sc = p.a.host.take_completions();
  REQUIRE(sc.size() == 1);
  CHECK(sc[0].wr_id == 5);
  CHECK(sc[0].status == WcStatus::Success);
  CHECK(sc[0].opcode == WcOpcode::Send);
  CHECK(sc[0].send_queue);
  CHECK_FALSE(p.a.engine.next_deadline().has_value());
  REQUIRE(p.a.observer.completions.size() == 1);  // the observer sees what the host gets
  CHECK(p.a.observer.completions[0].wr_id == 5);
}

TEST_CASE("an unsignaled SEND completes silently and the signaled one after it is reported") {
  SendSetup s(100);
  Pair& p = s.pair;
  p.b.engine.post_recv(p.b.qpn, recv_wr(1, s.dst, 4096));
  p.b.engine.post_recv(p.b.qpn, recv_wr(2, s.dst, 4096));
  p.a.engine.post_send(p.a.qpn, send_wr(10, WrOpcode::Send, s.src, 100, 0), p.now);
  p.a.engine.post_send(p.a.qpn, send_wr(11, WrOpcode::Send, s.src, 100), p.now);
  p.exchange();
  const std::vector<Completion> sc = p.a.host.take_completions();
  REQUIRE(sc.size() == 1);
  CHECK(sc[0].wr_id == 11);
  CHECK(p.b.host.take_completions().size() == 2);
}

TEST_CASE("a duplicate SEND with AckReq is ACKed again and not delivered twice") {
  SendSetup s(3000);
  Pair& p = s.pair;
  p.b.engine.post_recv(p.b.qpn, recv_wr(1, s.dst, 8192));
  p.b.engine.post_recv(p.b.qpn, recv_wr(2, s.dst, 8192));
  p.a.engine.post_send(p.a.qpn, send_wr(5, WrOpcode::Send, s.src, 3000), p.now);
  const std::vector<Captured> out = p.a.host.take_sent();
  p.deliver(p.a, p.b, out);
  p.b.host.take_sent();
  REQUIRE(p.b.host.take_completions().size() == 1);

  p.deliver(p.a, p.b, {out[2]});
  const std::vector<Captured> again = p.b.host.take_sent();
  REQUIRE(again.size() == 1);
  CHECK(again[0].packet.bth.opcode == Opcode::RcAck);
  CHECK(again[0].packet.bth.psn == p.a_psn + 2);  // the last PSN received in order
  CHECK(p.b.host.completions.empty());
  CHECK(p.b.engine.counters().duplicate_requests == 1);
  CHECK(p.b.observer.count(PacketDecision::Duplicate) == 1);

  p.deliver(p.a, p.b, {out[0]});  // no AckReq, and the run was re-ACKed already: no answer
  CHECK(p.b.host.sent.empty());
}

TEST_CASE("the first duplicate of a run is re-ACKed even without AckReq") {
  SendSetup s(3000);
  Pair& p = s.pair;
  p.b.engine.post_recv(p.b.qpn, recv_wr(1, s.dst, 8192));
  p.a.engine.post_send(p.a.qpn, send_wr(5, WrOpcode::Send, s.src, 3000), p.now);
  const std::vector<Captured> out = p.a.host.take_sent();
  p.deliver(p.a, p.b, out);
  p.b.host.take_sent();
  p.deliver(p.a, p.b, {out[0], out[1]});  // a resent burst whose AckReq packet was lost
  const std::vector<Captured> acks = p.b.host.take_sent();
  REQUIRE(acks.size() == 1);
  CHECK(acks[0].packet.bth.psn == p.a_psn + 2);
  p.deliver(p.b, p.a, acks);
  REQUIRE(p.a.host.completions.size() == 1);
  CHECK(p.a.host.completions[0].status == WcStatus::Success);
}

TEST_CASE("a PSN gap is NAKed once, and go-back-N recovers it") {
  SendSetup s(3000);
  Pair& p = s.pair;
  p.b.engine.post_recv(p.b.qpn, recv_wr(1, s.dst, 8192));
  p.a.engine.post_send(p.a.qpn, send_wr(5, WrOpcode::Send, s.src, 3000), p.now);
  const std::vector<Captured> out = p.a.host.take_sent();
  p.deliver(p.a, p.b, {out[1], out[2]});  // FIRST lost

  const std::vector<Captured> naks = p.b.host.take_sent();
  REQUIRE(naks.size() == 1);
  CHECK(naks[0].packet.bth.opcode == Opcode::RcAck);
  CHECK(naks[0].packet.aeth->syndrome == 0x60);
  CHECK(naks[0].packet.bth.psn == p.a_psn);  // the PSN the responder expects
  CHECK(p.b.observer.count(PacketDecision::OutOfSequenceNak) == 1);
  CHECK(p.b.observer.count(PacketDecision::OutOfSequenceDrop) == 1);

  p.deliver(p.b, p.a, naks);
  const std::vector<Captured> resent = p.a.host.take_sent();
  REQUIRE(resent.size() == 3);
  CHECK(resent[0].packet.bth.psn == p.a_psn);
  CHECK(resent[0].packet.bth.opcode == Opcode::RcSendFirst);
  CHECK(p.a.engine.counters().retransmits == 3);
  p.deliver(p.a, p.b, resent);
  p.exchange();
  REQUIRE(p.b.host.completions.size() == 1);
  CHECK(p.b.host.completions[0].byte_len == 3000);
  CHECK(std::equal(s.data.begin(), s.data.end(), p.b.memory.bytes(s.dst).begin()));
  REQUIRE(p.a.host.completions.size() == 1);
  CHECK(p.a.host.completions[0].status == WcStatus::Success);
}

TEST_CASE("no receive WQE: RNR NAK, the requester waits the RNR time, then retries") {
  SendSetup s(500);
  Pair& p = s.pair;
  p.a.engine.post_send(p.a.qpn, send_wr(5, WrOpcode::Send, s.src, 500), p.now);
  p.deliver(p.a, p.b, p.a.host.take_sent());
  const std::vector<Captured> rnr = p.b.host.take_sent();
  REQUIRE(rnr.size() == 1);
  CHECK(rnr[0].packet.aeth->syndrome == (0x20 | 12));  // min_rnr_timer 12: 0.64 ms
  CHECK(rnr[0].packet.bth.psn == p.a_psn);

  p.deliver(p.b, p.a, rnr);
  CHECK(p.a.host.sent.empty());
  REQUIRE(p.a.engine.next_deadline() == p.now + rnr_delay(12));
  p.a.engine.advance(p.now + rnr_delay(12) - 1ns);
  CHECK(p.a.host.sent.empty());

  p.b.engine.post_recv(p.b.qpn, recv_wr(1, s.dst, 4096));
  p.now += rnr_delay(12);
  p.a.engine.advance(p.now);
  const std::vector<Captured> retry = p.a.host.take_sent();
  REQUIRE(retry.size() == 1);
  CHECK(retry[0].packet.bth.psn == p.a_psn);
  p.deliver(p.a, p.b, retry);
  p.exchange();
  REQUIRE(p.a.host.completions.size() == 1);
  CHECK(p.a.host.completions[0].status == WcStatus::Success);
}

TEST_CASE("an RNR NAK on a FIRST: the rest of the burst is dropped silently, the wait holds") {
  SendSetup s(3000);
  Pair& p = s.pair;
  p.a.engine.post_send(p.a.qpn, send_wr(5, WrOpcode::Send, s.src, 3000), p.now);
  p.deliver(p.a, p.b, p.a.host.take_sent());
  const std::vector<Captured> answer = p.b.host.take_sent();
  REQUIRE(answer.size() == 1);  // one RNR NAK, no sequence NAK for MIDDLE and LAST
  CHECK((answer[0].packet.aeth->syndrome & 0xE0) == 0x20);
  CHECK(p.b.observer.count(PacketDecision::OutOfSequenceDrop) == 2);
  p.deliver(p.b, p.a, answer);
  // Even a sequence NAK (as rxe would send for the MIDDLE) does not end the wait.
  Captured seq = answer[0];
  seq.packet.aeth->syndrome = 0x60;
  p.deliver(p.b, p.a, {seq});
  CHECK(p.a.host.sent.empty());
  p.b.engine.post_recv(p.b.qpn, recv_wr(1, s.dst, 4096));
  p.now += rnr_delay(12);
  p.a.engine.advance(p.now);
  CHECK(p.a.host.sent.size() == 3);
  p.exchange();
  REQUIRE(p.a.host.completions.size() == 1);
  CHECK(p.a.host.completions[0].status == WcStatus::Success);
}

TEST_CASE("rnr_retry 0: the first RNR NAK fails the WQE with RNR retry exceeded") {
  QpAttr tweak;
  tweak.rnr_retry = 0;
  Pair p(QpType::Rc, 1024, tweak, qp_attr::kRnrRetry);
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 64, 0x10000);
  p.a.engine.post_send(p.a.qpn, send_wr(5, WrOpcode::Send, src, 64), p.now);
  p.a.engine.post_send(p.a.qpn, send_wr(6, WrOpcode::Send, src, 64), p.now);
  p.exchange();
  const std::vector<Completion> c = p.a.host.take_completions();
  REQUIRE(c.size() == 2);
  CHECK(c[0].wr_id == 5);
  CHECK(c[0].status == WcStatus::RnrRetryExcErr);
  CHECK(c[1].wr_id == 6);
  CHECK(c[1].status == WcStatus::WrFlushErr);
  CHECK(p.a.state() == QpState::Err);
}

TEST_CASE("RDMA READ: a lost response is asked for again and a duplicate READ is executed again") {
  Pair p;
  const MrFacts remote = p.b.memory.add(p.b.pd, access::kLocalWrite | access::kRemoteRead, 3000, 0x50000);
  const MrFacts local = p.a.memory.add(p.a.pd, access::kLocalWrite, 3000, 0x60000);
  const std::vector<std::uint8_t> data = pattern(3000, 9);
  std::copy(data.begin(), data.end(), p.b.memory.bytes(remote).begin());
  SendWr wr = send_wr(8, WrOpcode::RdmaRead, local, 3000);
  wr.remote_addr = remote.base;
  wr.rkey = remote.rkey;
  p.a.engine.post_send(p.a.qpn, wr, p.now);

  const std::vector<Captured> req = p.a.host.take_sent();
  REQUIRE(req.size() == 1);
  CHECK(req[0].packet.bth.opcode == Opcode::RcReadRequest);
  CHECK(req[0].packet.bth.ack_req);
  CHECK(req[0].packet.reth->dma_length == 3000);
  p.deliver(p.a, p.b, req);
  const std::vector<Captured> resp = p.b.host.take_sent();
  REQUIRE(resp.size() == 3);
  CHECK(resp[0].packet.bth.opcode == Opcode::RcReadResponseFirst);
  CHECK(resp[1].packet.bth.opcode == Opcode::RcReadResponseMiddle);
  CHECK(resp[2].packet.bth.opcode == Opcode::RcReadResponseLast);
  CHECK(resp[2].packet.bth.psn == p.a_psn + 2);

  SECTION("the duplicate request gets the same responses again") {
    p.deliver(p.a, p.b, req);
    const std::vector<Captured> again = p.b.host.take_sent();
    REQUIRE(again.size() == 3);
    for (std::size_t i = 0; i < 3; ++i) {
      CHECK(again[i].packet.bth.psn == resp[i].packet.bth.psn);
      CHECK(again[i].payload == resp[i].payload);
    }
    CHECK(p.b.engine.counters().duplicate_requests == 1);
  }

  SECTION("MIDDLE lost: the LAST after the gap re-requests from the missing PSN") {
    p.deliver(p.b, p.a, {resp[0], resp[2]});
    const std::vector<Captured> retry = p.a.host.take_sent();
    REQUIRE(retry.size() == 1);
    CHECK(retry[0].packet.bth.opcode == Opcode::RcReadRequest);
    CHECK(retry[0].packet.bth.psn == p.a_psn + 1);
    CHECK(retry[0].packet.reth->virtual_address == remote.base + 1024);
    CHECK(retry[0].packet.reth->dma_length == 3000 - 1024);
    CHECK(p.a.host.completions.empty());
    p.deliver(p.a, p.b, retry);
    const std::vector<Captured> rest = p.b.host.take_sent();
    REQUIRE(rest.size() == 2);
    CHECK(rest[0].packet.bth.psn == p.a_psn + 1);
    CHECK(rest[0].packet.bth.opcode == Opcode::RcReadResponseFirst);
    // The re-read is a READ of its own: its responses run FIRST..LAST again (IBA 9.7.5.1.4).
    p.deliver(p.b, p.a, rest);
    REQUIRE(p.a.host.completions.size() == 1);
    CHECK(p.a.host.completions[0].status == WcStatus::Success);
    CHECK(p.a.host.completions[0].opcode == WcOpcode::RdmaRead);
    CHECK(std::equal(data.begin(), data.end(), p.a.memory.bytes(local).begin()));
  }
}

TEST_CASE("an atomic is executed once and its duplicate is answered from the replay cache") {
  Pair p;
  const MrFacts remote = p.b.memory.add(p.b.pd, access::kLocalWrite | access::kRemoteAtomic, 64, 0x70000);
  const MrFacts local = p.a.memory.add(p.a.pd, access::kLocalWrite, 8, 0x80000);
  p.b.memory.set_word(remote, remote.base + 8, 1000);
  SendWr wr = send_wr(9, WrOpcode::AtomicFetchAdd, local, 8);
  wr.remote_addr = remote.base + 8;
  wr.rkey = remote.rkey;
  wr.compare_add = 5;
  p.a.engine.post_send(p.a.qpn, wr, p.now);
  const std::vector<Captured> req = p.a.host.take_sent();
  REQUIRE(req.size() == 1);
  CHECK(req[0].packet.bth.opcode == Opcode::RcFetchAdd);
  CHECK(req[0].packet.atomic_eth->swap_add == 5);
  p.deliver(p.a, p.b, req);
  const std::vector<Captured> ack1 = p.b.host.take_sent();
  REQUIRE(ack1.size() == 1);
  CHECK(ack1[0].packet.atomic_ack_eth->original_data == 1000);
  CHECK(p.b.memory.word(remote, remote.base + 8) == 1005);

  p.deliver(p.a, p.b, req);  // the ACK was lost; the requester asked again
  const std::vector<Captured> ack2 = p.b.host.take_sent();
  REQUIRE(ack2.size() == 1);
  CHECK(ack2[0].packet.bth.opcode == Opcode::RcAtomicAck);
  CHECK(ack2[0].packet.atomic_ack_eth->original_data == 1000);
  CHECK(p.b.memory.word(remote, remote.base + 8) == 1005);  // not added twice

  p.deliver(p.b, p.a, ack2);
  REQUIRE(p.a.host.completions.size() == 1);
  CHECK(p.a.host.completions[0].opcode == WcOpcode::FetchAdd);
  CHECK(p.a.memory.word(local, local.base) == 1000);
}

TEST_CASE("COMPARE_SWAP swaps only on equality") {
  Pair p;
  const MrFacts remote = p.b.memory.add(p.b.pd, access::kRemoteAtomic, 8, 0x70000);
  const MrFacts local = p.a.memory.add(p.a.pd, access::kLocalWrite, 8, 0x80000);
  p.b.memory.set_word(remote, remote.base, 42);
  auto cas = [&](std::uint64_t id, std::uint64_t compare, std::uint64_t swap) {
    SendWr wr = send_wr(id, WrOpcode::AtomicCmpSwp, local, 8);
    wr.remote_addr = remote.base;
    wr.rkey = remote.rkey;
    wr.compare_add = compare;
    wr.swap = swap;
    p.a.engine.post_send(p.a.qpn, wr, p.now);
    p.exchange();
  };
  cas(1, 7, 99);
  CHECK(p.b.memory.word(remote, remote.base) == 42);
  CHECK(p.a.memory.word(local, local.base) == 42);
  cas(2, 42, 99);
  CHECK(p.b.memory.word(remote, remote.base) == 99);
  REQUIRE(p.a.host.completions.size() == 2);
  CHECK(p.a.host.completions[1].opcode == WcOpcode::CompSwap);
}

struct ErrorCase {
  const char* name;
  WrOpcode op;
  bool bad_rkey;
  std::uint64_t offset;
  std::uint8_t syndrome;
  WcStatus status;
};

TEST_CASE("access errors are NAKed with the right syndrome and fail the requester's WQE") {
  const ErrorCase cases[] = {
      {"WRITE with an unknown R_Key", WrOpcode::RdmaWrite, true, 0, 0x62, WcStatus::RemAccessErr},
      {"WRITE past the end of the region", WrOpcode::RdmaWrite, false, 60, 0x62, WcStatus::RemAccessErr},
      {"READ of a region without remote read", WrOpcode::RdmaRead, false, 0, 0x62, WcStatus::RemAccessErr},
      {"misaligned FETCH_ADD", WrOpcode::AtomicFetchAdd, false, 4, 0x61, WcStatus::RemInvReqErr},
  };
  for (const ErrorCase& c : cases) {
    DYNAMIC_SECTION(c.name) {
      Pair p;
      const MrFacts remote = p.b.memory.add(p.b.pd, access::kRemoteWrite | access::kRemoteAtomic, 64, 0x90000);
      const MrFacts local = p.a.memory.add(p.a.pd, access::kLocalWrite, 64, 0xA0000);
      SendWr wr = send_wr(3, c.op, local, c.op == WrOpcode::AtomicFetchAdd ? 8 : 16);
      wr.remote_addr = remote.base + c.offset;
      wr.rkey = c.bad_rkey ? Rkey(0xDEAD) : remote.rkey;
      p.a.engine.post_send(p.a.qpn, wr, p.now);
      p.a.engine.post_send(p.a.qpn, send_wr(4, WrOpcode::RdmaWrite, local, 8), p.now);
      p.deliver(p.a, p.b, p.a.host.take_sent());
      const std::vector<Captured> nak = p.b.host.take_sent();
      REQUIRE(nak.size() == 1);
      CHECK(nak[0].packet.bth.opcode == Opcode::RcAck);
      CHECK(nak[0].packet.aeth->syndrome == c.syndrome);
      CHECK(nak[0].packet.bth.psn == p.a_psn);
      CHECK(p.b.state() == QpState::Err);
      CHECK(p.b.memory.out_of_bounds == 0);
      p.deliver(p.b, p.a, nak);
      const std::vector<Completion> done = p.a.host.take_completions();
      REQUIRE(done.size() == 2);
      CHECK(done[0].wr_id == 3);
      CHECK(done[0].status == c.status);
      CHECK(done[1].wr_id == 4);
      CHECK(done[1].status == WcStatus::WrFlushErr);
      CHECK(p.a.state() == QpState::Err);
    }
  }
}

TEST_CASE("a SEND longer than the receive buffer: NAK invalid request, local length error at the responder") {
  SendSetup s(2000);
  Pair& p = s.pair;
  p.b.engine.post_recv(p.b.qpn, recv_wr(1, s.dst, 1500));
  p.b.engine.post_recv(p.b.qpn, recv_wr(2, s.dst, 1500));
  p.a.engine.post_send(p.a.qpn, send_wr(5, WrOpcode::Send, s.src, 2000), p.now);
  p.exchange();
  const std::vector<Completion> rc = p.b.host.take_completions();
  REQUIRE(rc.size() == 2);
  CHECK(rc[0].wr_id == 1);
  CHECK(rc[0].status == WcStatus::LocLenErr);
  CHECK(rc[1].status == WcStatus::WrFlushErr);
  REQUIRE(p.a.host.completions.size() == 1);
  CHECK(p.a.host.completions[0].status == WcStatus::RemInvReqErr);
}

TEST_CASE("a silent peer: retransmit on every timeout, then retry exceeded and flush") {
  QpAttr tweak;
  tweak.retry_cnt = 2;
  Pair p(QpType::Rc, 1024, tweak, qp_attr::kRetryCnt);
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 64, 0x10000);
  p.a.engine.post_send(p.a.qpn, send_wr(1, WrOpcode::Send, src, 64), p.now);
  p.a.engine.post_send(p.a.qpn, send_wr(2, WrOpcode::Send, src, 64), p.now);
  CHECK(p.a.host.take_sent().size() == 2);
  const Duration timeout = *ack_timeout(14);  // 4.096 µs × 2^14 ≈ 67 ms
  for (int attempt = 0; attempt < 2; ++attempt) {
    REQUIRE(p.a.engine.next_deadline() == p.now + timeout);
    p.a.engine.advance(p.now + timeout - 1ns);
    CHECK(p.a.host.sent.empty());
    p.now += timeout;
    p.a.engine.advance(p.now);
    const std::vector<Captured> resent = p.a.host.take_sent();
    REQUIRE(resent.size() == 2);
    CHECK(resent[0].packet.bth.psn == p.a_psn);
    CHECK(p.a.host.completions.empty());
  }
  p.now += timeout;
  p.a.engine.advance(p.now);
  CHECK(p.a.host.sent.empty());
  const std::vector<Completion> c = p.a.host.take_completions();
  REQUIRE(c.size() == 2);
  CHECK(c[0].status == WcStatus::RetryExcErr);
  CHECK(c[1].status == WcStatus::WrFlushErr);
  CHECK(p.a.state() == QpState::Err);
  CHECK_FALSE(p.a.engine.next_deadline().has_value());
  CHECK(p.a.engine.counters().timeouts == 3);
}

TEST_CASE("moving to ERR flushes every send and receive WQE and later posts complete flushed") {
  SendSetup s(100);
  Pair& p = s.pair;
  p.b.engine.post_recv(p.b.qpn, recv_wr(1, s.dst, 100));
  p.b.engine.post_recv(p.b.qpn, recv_wr(2, s.dst, 100));
  SendWr unsignaled = send_wr(3, WrOpcode::Send, s.dst, 100, 0);
  unsignaled.sg_list.clear();
  p.b.engine.post_send(p.b.qpn, unsignaled, p.now);
  QpAttr err;
  err.state = QpState::Err;
  REQUIRE(p.b.engine.modify_qp(p.b.qpn, err, qp_attr::kState, p.now) == VerbResult::Ok);
  std::vector<Completion> c = p.b.host.take_completions();
  REQUIRE(c.size() == 3);
  CHECK(c[0].wr_id == 3);
  CHECK(c[0].send_queue);
  for (const Completion& x : c) CHECK(x.status == WcStatus::WrFlushErr);
  CHECK_FALSE(c[1].send_queue);
  CHECK(c[1].wr_id == 1);
  CHECK(c[2].wr_id == 2);
  REQUIRE_FALSE(p.b.observer.transitions.empty());
  CHECK(p.b.observer.transitions.back() == std::make_pair(QpState::Rts, QpState::Err));
  REQUIRE(p.b.engine.post_recv(p.b.qpn, recv_wr(4, s.dst, 100)) == VerbResult::Ok);
  c = p.b.host.take_completions();
  REQUIRE(c.size() == 1);
  CHECK(c[0].status == WcStatus::WrFlushErr);
  // Packets to a QP in ERR are dropped and counted.
  p.b.host.take_sent();
  p.a.engine.post_send(p.a.qpn, send_wr(9, WrOpcode::Send, s.src, 100), p.now);
  p.deliver(p.a, p.b, p.a.host.take_sent());
  CHECK(p.b.host.sent.empty());
  CHECK(p.b.engine.counters().wrong_state == 1);
}

TEST_CASE("max_rd_atomic bounds outstanding READs and a fenced WQE waits for them") {
  QpAttr tweak;
  tweak.max_rd_atomic = 1;
  Pair p(QpType::Rc, 1024, tweak, qp_attr::kMaxQpRdAtomic);
  const MrFacts remote = p.b.memory.add(p.b.pd, access::kRemoteRead | access::kRemoteWrite, 64, 0x50000);
  const MrFacts local = p.a.memory.add(p.a.pd, access::kLocalWrite, 64, 0x60000);
  auto read = [&](std::uint64_t id) {
    SendWr wr = send_wr(id, WrOpcode::RdmaRead, local, 16);
    wr.remote_addr = remote.base;
    wr.rkey = remote.rkey;
    return wr;
  };
  p.a.engine.post_send(p.a.qpn, read(1), p.now);
  p.a.engine.post_send(p.a.qpn, read(2), p.now);
  CHECK(p.a.host.sent.size() == 1);
  p.exchange();
  CHECK(p.a.host.completions.size() == 2);

  p.a.host.take_completions();
  p.a.engine.post_send(p.a.qpn, read(3), p.now);
  SendWr fenced = send_wr(4, WrOpcode::RdmaWrite, local, 16, send_flags::kSignaled | send_flags::kFence);
  fenced.remote_addr = remote.base;
  fenced.rkey = remote.rkey;
  p.a.engine.post_send(p.a.qpn, fenced, p.now);
  std::vector<Captured> out = p.a.host.take_sent();
  REQUIRE(out.size() == 1);
  CHECK(out[0].packet.bth.opcode == Opcode::RcReadRequest);
  p.deliver(p.a, p.b, out);
  p.deliver(p.b, p.a, p.b.host.take_sent());
  out = p.a.host.take_sent();
  REQUIRE(out.size() == 1);
  CHECK(out[0].packet.bth.opcode == Opcode::RcWriteOnly);
}

TEST_CASE("SEND with immediate, SEND with invalidate and WRITE with immediate complete at the responder") {
  Pair p;
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 64, 0x10000);
  const MrFacts dst = p.b.memory.add(p.b.pd, access::kLocalWrite | access::kRemoteWrite, 64, 0x20000);
  const MrFacts victim = p.b.memory.add(p.b.pd, access::kRemoteRead, 64, 0x30000);
  for (std::uint64_t i = 0; i < 3; ++i) p.b.engine.post_recv(p.b.qpn, recv_wr(i, dst, 64));
  SendWr imm = send_wr(1, WrOpcode::SendWithImm, src, 10);
  imm.imm_data = 0x01020304;
  SendWr inv = send_wr(2, WrOpcode::SendWithInv, src, 10);
  inv.invalidate_rkey = victim.rkey;
  SendWr wimm = send_wr(3, WrOpcode::RdmaWriteWithImm, src, 20);
  wimm.remote_addr = dst.base;
  wimm.rkey = dst.rkey;
  wimm.imm_data = 0xAABBCCDD;
  p.a.engine.post_send(p.a.qpn, imm, p.now);
  p.a.engine.post_send(p.a.qpn, inv, p.now);
  p.a.engine.post_send(p.a.qpn, wimm, p.now);
  const std::vector<Captured> out = p.a.host.sent;
  REQUIRE(out.size() == 3);
  CHECK(out[0].packet.bth.opcode == Opcode::RcSendOnlyImm);
  CHECK(out[1].packet.bth.opcode == Opcode::RcSendOnlyInv);
  CHECK(out[2].packet.bth.opcode == Opcode::RcWriteOnlyImm);
  p.exchange();
  const std::vector<Completion> c = p.b.host.take_completions();
  REQUIRE(c.size() == 3);
  CHECK(c[0].flags == wc_flags::kWithImm);
  CHECK(c[0].imm_data == 0x01020304);
  CHECK(c[1].flags == wc_flags::kWithInv);
  CHECK(c[1].invalidated_rkey == victim.rkey);
  CHECK_FALSE(p.b.memory.find_rkey(victim.rkey).has_value());
  CHECK(c[2].opcode == WcOpcode::RecvRdmaWithImm);
  CHECK(c[2].byte_len == 20);
  CHECK(c[2].imm_data == 0xAABBCCDD);
  CHECK(p.a.host.completions.size() == 3);
}

TEST_CASE("scatter/gather lists on both sides, across MTU boundaries, for SEND and READ") {
  Pair p;
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 3000, 0x10000);
  const MrFacts r1 = p.b.memory.add(p.b.pd, access::kLocalWrite | access::kRemoteRead, 1000, 0x20000);
  const MrFacts r2 = p.b.memory.add(p.b.pd, access::kLocalWrite | access::kRemoteRead, 3000, 0x30000);
  const std::vector<std::uint8_t> data = pattern(3000, 21);
  std::copy(data.begin(), data.end(), p.a.memory.bytes(src).begin());
  // Gather 100 + 1200 + 1000 bytes from three places of one region.
  std::vector<std::uint8_t> message(data.begin(), data.begin() + 100);
  message.insert(message.end(), data.begin() + 500, data.begin() + 1700);
  message.insert(message.end(), data.begin() + 2000, data.end());
  SendWr wr;
  wr.wr_id = 1;
  wr.flags = send_flags::kSignaled;
  wr.sg_list = {Sge{src.base, 100, src.lkey}, Sge{src.base + 500, 1200, src.lkey}, Sge{src.base + 2000, 1000, src.lkey}};
  // Scatter into 1000 bytes of one region and the rest of another.
  p.b.engine.post_recv(p.b.qpn, RecvWr{9, {Sge{r1.base, 1000, r1.lkey}, Sge{r2.base, 2000, r2.lkey}}});
  p.a.engine.post_send(p.a.qpn, wr, p.now);
  CHECK(p.a.host.sent.size() == 3);
  p.exchange();
  REQUIRE(p.b.host.completions.size() == 1);
  CHECK(p.b.host.completions[0].byte_len == 2300);
  std::vector<std::uint8_t> got(p.b.memory.bytes(r1).begin(), p.b.memory.bytes(r1).end());
  got.insert(got.end(), p.b.memory.bytes(r2).begin(), p.b.memory.bytes(r2).begin() + 1300);
  CHECK(got == message);

  // READ 2300 bytes of r2 back into the three pieces of src.
  std::fill(p.a.memory.bytes(src).begin(), p.a.memory.bytes(src).end(), 0);
  SendWr rd = wr;
  rd.wr_id = 2;
  rd.opcode = WrOpcode::RdmaRead;
  rd.remote_addr = r2.base;
  rd.rkey = r2.rkey;
  p.a.engine.post_send(p.a.qpn, rd, p.now);
  p.exchange();
  REQUIRE(p.a.host.completions.size() == 2);
  CHECK(p.a.host.completions[1].status == WcStatus::Success);
  const std::span<std::uint8_t> a = p.a.memory.bytes(src);
  std::vector<std::uint8_t> back(a.begin(), a.begin() + 100);
  back.insert(back.end(), a.begin() + 500, a.begin() + 1700);
  back.insert(back.end(), a.begin() + 2000, a.end());
  std::vector<std::uint8_t> want(p.b.memory.bytes(r2).begin(), p.b.memory.bytes(r2).begin() + 2300);
  CHECK(back == want);
  CHECK(std::all_of(a.begin() + 100, a.begin() + 500, [](std::uint8_t b) { return b == 0; }));
}

TEST_CASE("inline data is copied at post time") {
  Pair p;
  const MrFacts dst = p.b.memory.add(p.b.pd, access::kLocalWrite, 64, 0x20000);
  p.b.engine.post_recv(p.b.qpn, recv_wr(1, dst, 64));
  SendWr wr;
  wr.wr_id = 1;
  wr.opcode = WrOpcode::Send;
  wr.flags = send_flags::kInline | send_flags::kSignaled;
  wr.inline_data = {1, 2, 3, 4, 5};
  p.a.engine.post_send(p.a.qpn, wr, p.now);
  p.exchange();
  CHECK(p.b.memory.bytes(dst)[4] == 5);
  REQUIRE(p.b.host.completions.size() == 1);
  CHECK(p.b.host.completions[0].byte_len == 5);
}

TEST_CASE("a bad L_Key fails the WQE with a local protection error") {
  Pair p;
  SendWr wr;
  wr.wr_id = 1;
  wr.sg_list = {Sge{0x1234, 10, Lkey(0x77)}};
  p.a.engine.post_send(p.a.qpn, wr, p.now);
  CHECK(p.a.host.sent.empty());
  REQUIRE(p.a.host.completions.size() == 1);
  CHECK(p.a.host.completions[0].status == WcStatus::LocProtErr);
  CHECK(p.a.state() == QpState::Err);
}

TEST_CASE("unknown QPNs, opcodes of another transport and CNPs are counted and dropped") {
  Pair p;
  TransportPacket pkt;
  pkt.bth.opcode = Opcode::RcSendOnly;
  pkt.bth.dest_qp = Qpn(0x999);
  p.b.engine.receive(pkt, {}, p.now);
  pkt.bth.dest_qp = p.b.qpn;
  pkt.bth.opcode = Opcode::UcSendOnly;
  p.b.engine.receive(pkt, {}, p.now);
  pkt.bth.opcode = static_cast<Opcode>(0x15);
  p.b.engine.receive(pkt, {}, p.now);
  pkt.bth.opcode = Opcode::Cnp;
  p.b.engine.receive(pkt, {}, p.now);
  pkt.bth.opcode = Opcode::RcWriteOnly;  // no RETH
  p.b.engine.receive(pkt, {}, p.now);
  const EngineCounters& c = p.b.engine.counters();
  CHECK(c.unknown_qpn == 1);
  CHECK(c.bad_opcode == 2);
  CHECK(c.cnp_received == 1);
  CHECK(c.bad_header == 1);
  CHECK(p.b.host.sent.empty());
  CHECK(p.b.state() == QpState::Rts);
}

TEST_CASE("a long WRITE asks for an ACK at least every 64 packets and stays in a 128-PSN window") {
  Pair p(QpType::Rc, 256);
  const std::uint32_t length = 256 * 200;
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, length, 0x100000);
  const MrFacts dst = p.b.memory.add(p.b.pd, access::kRemoteWrite, length, 0x200000);
  SendWr wr = send_wr(1, WrOpcode::RdmaWrite, src, length);
  wr.remote_addr = dst.base;
  wr.rkey = dst.rkey;
  p.a.engine.post_send(p.a.qpn, wr, p.now);
  const std::vector<Captured> first = p.a.host.take_sent();
  REQUIRE(first.size() == 128);
  int ack_reqs = 0;
  for (const Captured& c : first) ack_reqs += c.packet.bth.ack_req;
  CHECK(ack_reqs == 2);
  CHECK(first[63].packet.bth.ack_req);
  p.deliver(p.a, p.b, first);
  p.exchange();
  REQUIRE(p.a.host.completions.size() == 1);
  CHECK(p.a.host.completions[0].status == WcStatus::Success);
}

}  // namespace
}  // namespace rrdma::test
