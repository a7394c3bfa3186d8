// The two memory ports under the real transport engine: two engines, each with its own
// MrTable and ProcessDma, and the memory of each in its own forked child process. RDMA
// WRITE, READ and FETCH_ADD move bytes between the two children's buffers (checked by the
// children's own dumps); after the target child is killed, a WRITE is dropped unanswered, as
// rxe drops requests for the QPs of a process that died.
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "rocev2/engine/engine.h"
#include "tests/sim/engine_harness.h"
#include "tests/verbs/dma_child.h"
#include "verbs/device/mr_table.h"
#include "verbs/device/process_dma.h"

namespace {

namespace rv = rrdma::rocev2;
using namespace rrdma::verbs;
using rrdma::verbs::test::Child;
using rrdma::verbs::test::expected_dump;
using rrdma::verbs::test::kPage;
using rrdma::verbs::test::pattern;
using rrdma::verbs::test::register_buffer;
using rrdma::verbs::test::word_at;

struct Node {
  explicit Node(std::uint32_t address) : ip(address), dma(table), engine(host, table, dma) {}
  rrdma::stack::Ipv4Address ip;
  MrTable table;
  ProcessDma dma;
  rrdma::test::RecordingHost host;
  rv::Engine engine;
  rv::Qpn qpn{};
};

void connect(Node& self, const Node& peer, rv::Psn sq, rv::Psn rq, rrdma::Instant now) {
  using namespace rv::qp_attr;
  rv::QpAttr at;
  at.state = rv::QpState::Init;
  at.access_flags = mr_access::kLocalWrite | mr_access::kRemoteWrite | mr_access::kRemoteRead |
                    mr_access::kRemoteAtomic;
  REQUIRE(self.engine.modify_qp(self.qpn, at, kState | kAccessFlags, now) == rv::VerbResult::Ok);
  at.state = rv::QpState::Rtr;
  at.path_mtu = 1024;
  at.dest_qpn = peer.qpn;
  at.rq_psn = rq;
  at.dest_ip = peer.ip;
  at.max_dest_rd_atomic = 4;
  REQUIRE(self.engine.modify_qp(self.qpn, at, kState | kPathMtu | kAv | kMinRnrTimer | kDestQpn | kRqPsn |
                                                   kMaxDestRdAtomic, now) == rv::VerbResult::Ok);
  at.state = rv::QpState::Rts;
  at.sq_psn = sq;
  at.max_rd_atomic = 4;
  REQUIRE(self.engine.modify_qp(self.qpn, at, kState | kSqPsn | kTimeout | kRetryCnt | kRnrRetry | kMaxQpRdAtomic,
                                now) == rv::VerbResult::Ok);
}

void deliver(const Node& from, Node& to, const std::vector<rrdma::test::Captured>& packets, rrdma::Instant now) {
  for (const rrdma::test::Captured& c : packets) to.engine.receive(c.view(), rv::PacketSource{from.ip, 0xC000, {}}, now);
}

void exchange(Node& a, Node& b, rrdma::Instant now) {
  for (int round = 0; round < 1000; ++round) {
    const std::vector<rrdma::test::Captured> ab = a.host.take_sent();
    const std::vector<rrdma::test::Captured> ba = b.host.take_sent();
    if (ab.empty() && ba.empty()) return;
    deliver(a, b, ab, now);
    deliver(b, a, ba, now);
  }
  FAIL("the engines never went quiet");
}

rv::SendWr wr(std::uint64_t id, rv::WrOpcode op, const rv::MrFacts& local, std::uint64_t local_offset,
              std::uint32_t length, const rv::MrFacts& remote, std::uint64_t remote_offset) {
  rv::SendWr w;
  w.wr_id = id;
  w.opcode = op;
  w.flags = rv::send_flags::kSignaled;
  w.sg_list = {rv::Sge{local.base + local_offset, length, local.lkey}};
  w.remote_addr = remote.base + remote_offset;
  w.rkey = remote.rkey;
  return w;
}

// Two engines with a connected RC QP each; A's memory is the source child's buffer, B's the
// target child's.
struct TwoProcesses {
  Child source{3};
  Child target{5};
  Node a{0x0A4D0003};
  Node b{0x0A4D0002};
  const rrdma::Instant now{};
  rv::MrFacts mine;
  rv::MrFacts theirs;
  TwoProcesses() {
    rv::QpInit init;
    init.pd = 1;
    a.qpn = *a.engine.create_qp(init);
    b.qpn = *b.engine.create_qp(init);
    connect(a, b, rv::Psn(100), rv::Psn(900), now);
    connect(b, a, rv::Psn(900), rv::Psn(100), now);
    mine = register_buffer(a.table, source, 1);
    theirs = register_buffer(b.table, target, 1);
  }
};

}  // namespace

TEST_CASE_METHOD(TwoProcesses, "the engine over MrTable + ProcessDma: WRITE, READ and FETCH_ADD between two processes") {
  // 3000 bytes: three packets at MTU 1024, all landing in the target's pages 0 and 1.
  REQUIRE(a.engine.post_send(a.qpn, wr(1, rv::WrOpcode::RdmaWrite, mine, 0, 3000, theirs, 100), now) ==
          rv::VerbResult::Ok);
  exchange(a, b, now);
  std::vector<rv::Completion> done = a.host.take_completions();
  REQUIRE(done.size() == 1);
  CHECK(done[0].status == rv::WcStatus::Success);
  std::vector<std::uint8_t> expected = expected_dump(5);
  for (std::size_t i = 0; i < 3000; ++i) expected[100 + i] = pattern(3, i);
  CHECK(target.dump() == expected);

  // READ the target's page 3 into the source's page 1.
  REQUIRE(a.engine.post_send(a.qpn, wr(2, rv::WrOpcode::RdmaRead, mine, kPage, 600, theirs, 3 * kPage + 8), now) ==
          rv::VerbResult::Ok);
  exchange(a, b, now);
  done = a.host.take_completions();
  REQUIRE(done.size() == 1);
  CHECK(done[0].status == rv::WcStatus::Success);
  const std::vector<std::uint8_t> source_now = source.dump();
  for (std::size_t i = 0; i < 600; ++i) CHECK(source_now[kPage + i] == pattern(5, 3 * kPage + 8 + i));

  // FETCH_ADD on the target's word at 0x1800; the original lands in the source at 0x1F00.
  const std::uint64_t before = word_at(target.dump(), 0x1800);
  rv::SendWr add = wr(3, rv::WrOpcode::AtomicFetchAdd, mine, 0x1F00, 8, theirs, 0x1800);
  add.compare_add = 42;
  REQUIRE(a.engine.post_send(a.qpn, add, now) == rv::VerbResult::Ok);
  exchange(a, b, now);
  done = a.host.take_completions();
  REQUIRE(done.size() == 1);
  CHECK(done[0].status == rv::WcStatus::Success);
  CHECK(word_at(target.dump(), 0x1800) == before + 42);
  CHECK(word_at(source.dump(), 0x1F00) == before);
  CHECK(b.dma.counters().transfers >= 5);

  // The target process dies: the responder cannot write and drops the WRITE without an
  // answer, as rxe drops a request for a QP destroyed with its process (its pinned pages
  // take the write until then): no remote operational error reaches the requester, which
  // retries until the host destroys that QP and the CM's DREQ arrives.
  target.kill();
  target.reap();
  REQUIRE(a.engine.post_send(a.qpn, wr(4, rv::WrOpcode::RdmaWrite, mine, 0, 64, theirs, 0), now) ==
          rv::VerbResult::Ok);
  exchange(a, b, now);
  CHECK(a.host.take_completions().empty());
  CHECK(a.engine.counters().naks_received == 0);
  CHECK(b.engine.counters().owner_gone_drops == 1);
  CHECK(b.engine.counters().naks_sent == 0);
  CHECK(b.dma.counters().process_gone == 1);
  CHECK(b.dma.owner_gone(theirs));
  CHECK_FALSE(a.dma.owner_gone(mine));
}

// The read-ahead over several WQEs (docs/TRANSPORT.md, "Read-ahead"): WRITEs queued together
// leave the source process in one process_vm_readv; a hole in a later WQE's buffer fails
// that WQE only, after the earlier one has gone out.
TEST_CASE_METHOD(TwoProcesses, "the engine over ProcessDma: queued WRITEs are gathered in one call, a bad buffer fails only its WQE") {
  // Eight WRITEs of 1000 bytes from the source's pages 0 and 1, to the target's at +50.
  for (std::uint64_t i = 0; i < 8; ++i) {
    REQUIRE(a.engine.queue_send(a.qpn, wr(i, rv::WrOpcode::RdmaWrite, mine, i * 1000, 1000, theirs, i * 1000 + 50)) ==
            rv::VerbResult::Ok);
  }
  CHECK(a.host.sent.empty());
  const std::uint64_t transfers_before = a.dma.counters().transfers;
  a.engine.start_sends(a.qpn, now);
  CHECK(a.host.sent.size() == 8);
  CHECK(a.dma.counters().transfers == transfers_before + 1);
  exchange(a, b, now);
  std::vector<rv::Completion> done = a.host.take_completions();
  REQUIRE(done.size() == 8);
  for (const rv::Completion& c : done) CHECK(c.status == rv::WcStatus::Success);
  std::vector<std::uint8_t> expected = expected_dump(5);
  for (std::size_t i = 0; i < 8000; ++i) expected[50 + i] = pattern(3, i);
  CHECK(target.dump() == expected);

  // WRITE 20 from page 0 and WRITE 21 from page 2, which the source has unmapped: the gather
  // of both fails, WRITE 20 is read alone and sent, WRITE 21 fails when its turn comes.
  REQUIRE(a.engine.queue_send(a.qpn, wr(20, rv::WrOpcode::RdmaWrite, mine, 0, 100, theirs, 0)) == rv::VerbResult::Ok);
  REQUIRE(a.engine.queue_send(a.qpn, wr(21, rv::WrOpcode::RdmaWrite, mine, 2 * kPage, 100, theirs, 0)) ==
          rv::VerbResult::Ok);
  a.engine.start_sends(a.qpn, now);
  REQUIRE(a.host.sent.size() == 1);
  CHECK(a.host.sent[0].payload.size() == 100);
  CHECK(a.host.sent[0].payload[99] == pattern(3, 99));
  done = a.host.take_completions();
  REQUIRE_FALSE(done.empty());
  CHECK(done[0].wr_id == 21);
  CHECK(done[0].status == rv::WcStatus::LocProtErr);
  CHECK(a.dma.counters().partial + a.dma.counters().faults == 2);
}
