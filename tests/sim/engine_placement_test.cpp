// IBA 1.5 Annex A19 (Memory Placement Extensions) at the value level: ATOMIC_WRITE and FLUSH
// as rxe sends and answers them. The request's headers, the empty RDMA READ response that
// answers it, the completion, a duplicate answered without being executed again, a lost
// answer recovered by the timeout, max_rd_atomic, and the refusals with rxe's NAK codes.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <random>

#include "tests/sim/engine_harness.h"

namespace rrdma::test {
namespace {

using namespace std::chrono_literals;

constexpr std::uint32_t kFlushQp = kAllRemote | access::kFlushGlobal | access::kFlushPersistent;

QpAttr qp_access(std::uint32_t flags) {
  QpAttr a;
  a.access_flags = flags;
  return a;
}

// A pair whose QPs grant every remote right, FLUSH of both placement types included.
struct Placement {
  Pair p{QpType::Rc, 1024, qp_access(kFlushQp), qp_attr::kAccessFlags};
  MrFacts target;
  Placement(std::uint32_t target_access = access::kRemoteWrite | access::kFlushGlobal) {
    target = p.b.memory.add(p.b.pd, target_access, 64, 0x70000);
  }
};

SendWr atomic_write_wr(std::uint64_t id, const MrFacts& remote, std::uint64_t offset, std::uint64_t value) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = WrOpcode::AtomicWrite;
  wr.flags = send_flags::kSignaled;
  wr.remote_addr = remote.base + offset;
  wr.rkey = remote.rkey;
  wr.compare_add = value;
  return wr;
}

SendWr flush_wr(std::uint64_t id, const MrFacts& remote, std::uint64_t offset, std::uint32_t length, std::uint8_t type,
                std::uint8_t level) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = WrOpcode::Flush;
  wr.flags = send_flags::kSignaled;
  wr.remote_addr = remote.base + offset;
  wr.rkey = remote.rkey;
  wr.flush_length = length;
  wr.flush_type = type;
  wr.flush_level = level;
  return wr;
}

void check_empty_read_response(const Captured& c, Psn psn, Msn msn) {
  CHECK(c.packet.bth.opcode == Opcode::RcReadResponseOnly);
  CHECK(c.packet.bth.psn == psn);
  REQUIRE(c.packet.aeth.has_value());
  CHECK(c.packet.aeth->syndrome == 0x1F);  // ACK, credits unlimited, as rxe answers
  CHECK(c.packet.aeth->msn == msn);
  CHECK(c.payload.empty());
}

TEST_CASE("ATOMIC_WRITE: a RETH of length 8 and the 8 bytes, answered by an empty READ response") {
  Placement s;
  const std::uint64_t value = 0x1122334455667788ull;
  s.p.a.engine.post_send(s.p.a.qpn, atomic_write_wr(7, s.target, 16, value), s.p.now);
  const std::vector<Captured> req = s.p.a.host.take_sent();
  REQUIRE(req.size() == 1);
  const TransportPacket& r = req[0].packet;
  CHECK(r.bth.opcode == Opcode::RcAtomicWrite);
  CHECK(r.bth.ack_req);
  CHECK(r.bth.psn == s.p.a_psn);
  REQUIRE(r.reth.has_value());
  CHECK(r.reth->virtual_address == s.target.base + 16);
  CHECK(r.reth->rkey == s.target.rkey);
  CHECK(r.reth->dma_length == 8);
  CHECK_FALSE(r.atomic_eth.has_value());
  std::uint64_t carried = 0;
  REQUIRE(req[0].payload.size() == 8);
  std::memcpy(&carried, req[0].payload.data(), 8);
  CHECK(carried == value);  // the bytes as they lay in the poster's memory

  s.p.deliver(s.p.a, s.p.b, req);
  CHECK(s.p.b.memory.word(s.target, s.target.base + 16) == value);
  const std::vector<Captured> resp = s.p.b.host.take_sent();
  REQUIRE(resp.size() == 1);
  check_empty_read_response(resp[0], s.p.a_psn, Msn(1));

  s.p.deliver(s.p.b, s.p.a, resp);
  const std::vector<Completion> done = s.p.a.host.take_completions();
  REQUIRE(done.size() == 1);
  CHECK(done[0].wr_id == 7);
  CHECK(done[0].status == WcStatus::Success);
  CHECK(done[0].opcode == WcOpcode::AtomicWrite);
  CHECK(done[0].byte_len == 8);
}

TEST_CASE("a duplicate ATOMIC_WRITE is answered again and not executed again") {
  Placement s;
  s.p.a.engine.post_send(s.p.a.qpn, atomic_write_wr(1, s.target, 0, 111), s.p.now);
  const std::vector<Captured> req = s.p.a.host.take_sent();
  s.p.deliver(s.p.a, s.p.b, req);
  REQUIRE(s.p.b.host.take_sent().size() == 1);  // the answer is lost
  // The owner stores a new value; a second execution of the old request would undo it.
  s.p.b.memory.set_word(s.target, s.target.base, 222);
  s.p.deliver(s.p.a, s.p.b, req);
  CHECK(s.p.b.memory.word(s.target, s.target.base) == 222);
  const std::vector<Captured> again = s.p.b.host.take_sent();
  REQUIRE(again.size() == 1);
  check_empty_read_response(again[0], s.p.a_psn, Msn(1));
  CHECK(s.p.b.observer.count(PacketDecision::Duplicate) == 1);
  s.p.deliver(s.p.b, s.p.a, again);
  const std::vector<Completion> done = s.p.a.host.take_completions();
  REQUIRE(done.size() == 1);
  CHECK(done[0].opcode == WcOpcode::AtomicWrite);
}

TEST_CASE("a lost ATOMIC_WRITE answer: the timeout resends the request, the memory is written once") {
  Placement s;
  s.p.a.engine.post_send(s.p.a.qpn, atomic_write_wr(1, s.target, 8, 5), s.p.now);
  s.p.deliver(s.p.a, s.p.b, s.p.a.host.take_sent());
  REQUIRE(s.p.b.host.take_sent().size() == 1);  // lost
  s.p.b.memory.set_word(s.target, s.target.base + 8, 6);
  s.p.now += 1s;  // past the local ACK timeout (4.096 us * 2^14)
  s.p.exchange();
  CHECK(s.p.a.engine.counters().retransmits == 1);
  CHECK(s.p.b.memory.word(s.target, s.target.base + 8) == 6);
  const std::vector<Completion> done = s.p.a.host.take_completions();
  REQUIRE(done.size() == 1);
  CHECK(done[0].status == WcStatus::Success);
}

TEST_CASE("FLUSH: a FETH (placement type, selectivity level) before the RETH, no payload") {
  Placement s;
  const MrFacts src = s.p.a.memory.add(s.p.a.pd, access::kLocalWrite, 32, 0x10000);
  const std::vector<std::uint8_t> data = pattern(32, 9);
  std::copy(data.begin(), data.end(), s.p.a.memory.bytes(src).begin());
  SendWr write = send_wr(1, WrOpcode::RdmaWrite, src, 32, 0);  // unsignaled
  write.remote_addr = s.target.base;
  write.rkey = s.target.rkey;
  s.p.a.engine.post_send(s.p.a.qpn, write, s.p.now);
  s.p.a.engine.post_send(s.p.a.qpn, flush_wr(2, s.target, 0, 32, flush::kGlobal, flush::kLevelRange), s.p.now);
  const std::vector<Captured> req = s.p.a.host.take_sent();
  REQUIRE(req.size() == 2);
  const TransportPacket& f = req[1].packet;
  CHECK(f.bth.opcode == Opcode::RcFlush);
  CHECK(f.bth.ack_req);
  CHECK(f.bth.psn == s.p.a_psn + 1);
  REQUIRE(f.feth.has_value());
  CHECK(f.feth->bits == 0x01);  // placement type global (bits 3:0), level range (bits 5:4)
  REQUIRE(f.reth.has_value());
  CHECK(f.reth->virtual_address == s.target.base);
  CHECK(f.reth->dma_length == 32);
  CHECK(req[1].payload.empty());

  s.p.deliver(s.p.a, s.p.b, req);
  const std::vector<std::uint8_t> landed(s.p.b.memory.bytes(s.target).begin(), s.p.b.memory.bytes(s.target).begin() + 32);
  CHECK(landed == data);
  const std::vector<Captured> resp = s.p.b.host.take_sent();
  REQUIRE(resp.size() == 2);  // the WRITE's ACK (it asked, AckReq), then the FLUSH's answer
  CHECK(resp[0].packet.bth.opcode == Opcode::RcAck);
  check_empty_read_response(resp[1], s.p.a_psn + 1, Msn(2));

  s.p.deliver(s.p.b, s.p.a, resp);
  const std::vector<Completion> done = s.p.a.host.take_completions();
  REQUIRE(done.size() == 1);
  CHECK(done[0].wr_id == 2);
  CHECK(done[0].opcode == WcOpcode::Flush);
  CHECK(done[0].byte_len == 32);  // rxe reports the FLUSH's length
}

TEST_CASE("FLUSH of the whole region needs no address or length, its duplicate is answered again") {
  Placement s;
  s.p.a.engine.post_send(s.p.a.qpn, flush_wr(4, s.target, 0x1000000, 0, flush::kGlobal, flush::kLevelMr), s.p.now);
  const std::vector<Captured> req = s.p.a.host.take_sent();
  REQUIRE(req.size() == 1);
  CHECK(req[0].packet.feth->bits == 0x11);
  s.p.deliver(s.p.a, s.p.b, req);
  REQUIRE(s.p.b.host.take_sent().size() == 1);  // lost
  s.p.deliver(s.p.a, s.p.b, req);
  const std::vector<Captured> again = s.p.b.host.take_sent();
  REQUIRE(again.size() == 1);
  check_empty_read_response(again[0], s.p.a_psn, Msn(1));
  s.p.deliver(s.p.b, s.p.a, again);
  const std::vector<Completion> done = s.p.a.host.take_completions();
  REQUIRE(done.size() == 1);
  CHECK(done[0].status == WcStatus::Success);
  CHECK(done[0].opcode == WcOpcode::Flush);
}

TEST_CASE("FLUSH and ATOMIC_WRITE count against max_rd_atomic") {
  QpAttr tweak = qp_access(kFlushQp);
  tweak.max_rd_atomic = 1;
  Pair p{QpType::Rc, 1024, tweak, qp_attr::kAccessFlags | qp_attr::kMaxQpRdAtomic};
  const MrFacts target = p.b.memory.add(p.b.pd, access::kRemoteWrite | access::kFlushGlobal, 64, 0x70000);
  p.a.engine.post_send(p.a.qpn, atomic_write_wr(1, target, 0, 1), p.now);
  p.a.engine.post_send(p.a.qpn, flush_wr(2, target, 0, 8, flush::kGlobal, flush::kLevelRange), p.now);
  const std::vector<Captured> first = p.a.host.take_sent();
  CHECK(first.size() == 1);  // the FLUSH waits for the ATOMIC_WRITE's answer
  p.a.engine.post_send(p.a.qpn, atomic_write_wr(3, target, 0, 2), p.now);
  CHECK(p.a.host.sent.empty());
  p.deliver(p.a, p.b, first);
  p.exchange();
  const std::vector<Completion> done = p.a.host.take_completions();
  REQUIRE(done.size() == 3);
  CHECK(done[0].opcode == WcOpcode::AtomicWrite);
  CHECK(done[1].opcode == WcOpcode::Flush);
  CHECK(done[2].opcode == WcOpcode::AtomicWrite);
  CHECK(p.b.memory.word(target, target.base) == 2);
}

struct Refusal {
  const char* name;
  std::uint32_t qp_access;      // the responder QP's access flags
  std::uint32_t mr_access;      // the target region's
  bool atomic_write;            // else FLUSH
  std::uint64_t offset;
  std::uint8_t type;
  std::uint8_t level;
  std::uint8_t syndrome;
  WcStatus status;
};

// rxe's answers (rxe_resp.c): a right the QP does not grant is an unsupported opcode (NAK
// invalid request), an R_Key without the right or outside the region a remote access error,
// a misaligned ATOMIC_WRITE RESPST_ERR_MISALIGNED_ATOMIC (NAK invalid request).
TEST_CASE("FLUSH and ATOMIC_WRITE refusals: rxe's NAK codes and completion statuses") {
  const std::uint32_t mr_all = access::kRemoteWrite | access::kFlushGlobal;
  const Refusal cases[] = {
      {"FLUSH to a region without FLUSH_GLOBAL", kFlushQp, access::kRemoteWrite, false, 0, flush::kGlobal,
       flush::kLevelRange, 0x62, WcStatus::RemAccessErr},
      {"FLUSH persistent to a region with FLUSH_GLOBAL only", kFlushQp, mr_all, false, 0, flush::kPersistent,
       flush::kLevelRange, 0x62, WcStatus::RemAccessErr},
      {"FLUSH past the end of the region", kFlushQp, mr_all, false, 40, flush::kGlobal, flush::kLevelRange, 0x62,
       WcStatus::RemAccessErr},
      {"FLUSH to a QP without FLUSH_GLOBAL access", kAllRemote, mr_all, false, 0, flush::kGlobal, flush::kLevelRange,
       0x61, WcStatus::RemInvReqErr},
      {"FLUSH of no placement type", kFlushQp, mr_all, false, 0, 0, flush::kLevelRange, 0x61, WcStatus::RemInvReqErr},
      {"FLUSH of an undefined selectivity level", kFlushQp, mr_all, false, 0, flush::kGlobal, 2, 0x61,
       WcStatus::RemInvReqErr},
      {"misaligned ATOMIC_WRITE", kFlushQp, mr_all, true, 4, 0, 0, 0x61, WcStatus::RemInvReqErr},
      {"ATOMIC_WRITE to a region without remote write", kFlushQp, access::kFlushGlobal, true, 0, 0, 0, 0x62,
       WcStatus::RemAccessErr},
      {"ATOMIC_WRITE to a QP without remote write", access::kRemoteRead, mr_all, true, 0, 0, 0, 0x61,
       WcStatus::RemInvReqErr},
  };
  for (const Refusal& c : cases) {
    DYNAMIC_SECTION(c.name) {
      Pair p;
      QpAttr at = qp_access(c.qp_access);
      REQUIRE(p.b.engine.modify_qp(p.b.qpn, at, qp_attr::kAccessFlags, p.now) == VerbResult::Ok);
      const MrFacts target = p.b.memory.add(p.b.pd, c.mr_access, 48, 0x90000);
      p.b.memory.set_word(target, target.base, 77);
      const SendWr wr = c.atomic_write ? atomic_write_wr(3, target, c.offset, 99)
                                       : flush_wr(3, target, c.offset, 16, c.type, c.level);
      p.a.engine.post_send(p.a.qpn, wr, p.now);
      p.deliver(p.a, p.b, p.a.host.take_sent());
      const std::vector<Captured> nak = p.b.host.take_sent();
      REQUIRE(nak.size() == 1);
      CHECK(nak[0].packet.bth.opcode == Opcode::RcAck);
      CHECK(nak[0].packet.aeth->syndrome == c.syndrome);
      CHECK(nak[0].packet.bth.psn == p.a_psn);
      CHECK(p.b.state() == QpState::Err);
      CHECK(p.b.memory.word(target, target.base) == 77);
      CHECK(p.b.memory.out_of_bounds == 0);
      p.deliver(p.b, p.a, nak);
      const std::vector<Completion> done = p.a.host.take_completions();
      REQUIRE(done.size() == 1);
      CHECK(done[0].status == c.status);
    }
  }
}

TEST_CASE("an answer with data where an empty READ response belongs fails the WQE") {
  Placement s;
  s.p.a.engine.post_send(s.p.a.qpn, atomic_write_wr(1, s.target, 0, 1), s.p.now);
  s.p.deliver(s.p.a, s.p.b, s.p.a.host.take_sent());
  std::vector<Captured> resp = s.p.b.host.take_sent();
  REQUIRE(resp.size() == 1);
  resp[0].payload = {1, 2, 3, 4};
  s.p.deliver(s.p.b, s.p.a, resp);
  const std::vector<Completion> done = s.p.a.host.take_completions();
  REQUIRE(done.size() == 1);
  CHECK(done[0].status == WcStatus::BadRespErr);
}

// A link that drops, duplicates and swaps neighbours, seeded (as engine_loss_test.cpp's).
std::vector<Captured> lossy(std::mt19937_64& rng, double loss, std::vector<Captured> in) {
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<Captured> out;
  for (Captured& c : in) {
    if (u(rng) < loss) continue;
    if (u(rng) < loss / 2) out.push_back(c);
    out.push_back(std::move(c));
  }
  for (std::size_t i = 1; i < out.size(); ++i)
    if (u(rng) < loss) std::swap(out[i - 1], out[i]);
  return out;
}

// WRITEs, ATOMIC_WRITEs and FLUSHes over the lossy link: every WQE completes, in order, and
// every ATOMIC_WRITE is executed exactly once however often it or its answer is lost or
// duplicated; the word holds the last one's value.
void lossy_run(std::uint64_t seed, double loss) {
  QpAttr tweak = qp_access(kFlushQp);
  tweak.timeout = 8;  // ~1 ms
  Pair p{QpType::Rc, 1024, tweak, qp_attr::kAccessFlags | qp_attr::kTimeout};
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 4096, 0x10000);
  const MrFacts dst = p.b.memory.add(p.b.pd, access::kLocalWrite | access::kRemoteWrite | access::kFlushGlobal, 8192,
                                     0x90000);
  std::mt19937_64 pick(seed * 17 + 3);
  std::mt19937_64 link(seed);
  int atomic_writes = 0;
  std::uint64_t last_value = 0;
  constexpr std::uint64_t kWqes = 30;
  for (std::uint64_t id = 0; id < kWqes; ++id) {
    SendWr wr;
    switch (pick() % 3) {
      case 0:
        wr = send_wr(id, WrOpcode::RdmaWrite, src, 1 + static_cast<std::uint32_t>(pick() % 4096));
        wr.remote_addr = dst.base;
        wr.rkey = dst.rkey;
        break;
      case 1:
        last_value = pick();
        wr = atomic_write_wr(id, dst, 4096, last_value);
        ++atomic_writes;
        break;
      default: wr = flush_wr(id, dst, 0, 8192, flush::kGlobal, flush::kLevelRange); break;
    }
    wr.wr_id = id;
    REQUIRE(p.a.engine.post_send(p.a.qpn, wr, p.now) == VerbResult::Ok);
  }
  for (int steps = 0; p.a.host.completions.size() < kWqes && steps < 200000; ++steps) {
    std::vector<Captured> ab = lossy(link, loss, p.a.host.take_sent());
    std::vector<Captured> ba = lossy(link, loss, p.b.host.take_sent());
    if (ab.empty() && ba.empty()) {
      if (!p.advance_to_next_deadline()) break;
      continue;
    }
    p.deliver(p.a, p.b, ab);
    p.deliver(p.b, p.a, ba);
  }
  INFO("seed " << seed << " loss " << loss);
  REQUIRE(p.a.host.completions.size() == kWqes);
  for (std::uint64_t i = 0; i < kWqes; ++i) {
    CHECK(p.a.host.completions[i].wr_id == i);
    CHECK(p.a.host.completions[i].status == WcStatus::Success);
  }
  CHECK(p.b.memory.atomic_writes == atomic_writes);
  if (atomic_writes > 0) CHECK(p.b.memory.word(dst, dst.base + 4096) == last_value);
  CHECK(p.b.memory.out_of_bounds == 0);
  CHECK(p.b.state() == QpState::Rts);
}

TEST_CASE("ATOMIC_WRITE and FLUSH over a lossy, duplicating, reordering link: each executed once") {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    lossy_run(seed, 0.0);
    lossy_run(seed, 0.1);
  }
}

}  // namespace
}  // namespace rrdma::test
