// Pacing (docs/TRANSPORT.md, "Pacing"): requests of every QP type and READ responses go out
// only while the host has transmit room (EngineHost::transmit_room); the rest waits and
// advance() sends it as room returns. ACKs never wait. The RecordingHost models a transmit
// queue of `queue_capacity` packets that take_sent() drains. READ responses are paced by time
// too once their requester asked again for lost ones (ResponsePacer).
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <limits>

#include "rocev2/engine/pacer.h"

#include "tests/sim/engine_harness.h"

namespace rrdma::test {
namespace {

constexpr std::uint32_t kMtu = 1024;

// Drains `s`'s queue into `to` and lets `s` send what now fits, until `s` has nothing more:
// every batch is checked against the capacity. Returns the batches' sizes.
std::vector<std::size_t> drain_paced(Pair& p, Side& s, Side& to, std::size_t capacity) {
  std::vector<std::size_t> batches;
  for (int turn = 0; turn < 10000; ++turn) {
    std::vector<Captured> batch = s.host.take_sent();
    if (batch.empty()) return batches;
    CHECK(batch.size() <= capacity);
    batches.push_back(batch.size());
    p.deliver(s, to, batch);
    p.run_due(s);
  }
  FAIL("the paced sender never finished");
  return batches;
}

// A READ by a of `length` bytes of b's memory (filled with a pattern), posted at p.now.
struct PostedRead {
  MrFacts local;
  std::vector<std::uint8_t> data;
  bool landed(Pair& p) const {
    const std::span<std::uint8_t> bytes = p.a.memory.bytes(local);
    return std::equal(data.begin(), data.end(), bytes.begin(), bytes.end());
  }
};
PostedRead post_read(Pair& p, std::size_t length, std::uint8_t seed) {
  const MrFacts remote = p.b.memory.add(p.b.pd, kAllRemote, length, 0x5000000);
  PostedRead read{p.a.memory.add(p.a.pd, kAllRemote, length, 0x6000000), pattern(length, seed)};
  std::copy(read.data.begin(), read.data.end(), p.b.memory.bytes(remote).begin());
  SendWr wr = send_wr(1, WrOpcode::RdmaRead, read.local, static_cast<std::uint32_t>(length));
  wr.remote_addr = remote.base;
  wr.rkey = remote.rkey;
  REQUIRE(p.a.engine.post_send(p.a.qpn, wr, p.now) == VerbResult::Ok);
  return read;
}

TEST_CASE("pacing: a UC message goes out as room allows and completes after its last packet") {
  constexpr std::size_t kLength = 300 * kMtu;  // 300 packets
  constexpr std::size_t kRoom = 64;
  Pair p(QpType::Uc, kMtu);
  p.a.host.queue_capacity = kRoom;
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, kLength, 0x10000);
  const MrFacts dst = p.b.memory.add(p.b.pd, kAllRemote, kLength, 0x900000);
  const std::vector<std::uint8_t> data = pattern(kLength, 3);
  std::copy(data.begin(), data.end(), p.a.memory.bytes(src).begin());
  SendWr wr = send_wr(1, WrOpcode::RdmaWrite, src, static_cast<std::uint32_t>(kLength));
  wr.remote_addr = dst.base;
  wr.rkey = dst.rkey;
  REQUIRE(p.a.engine.post_send(p.a.qpn, wr, p.now) == VerbResult::Ok);

  REQUIRE(p.a.host.sent.size() == kRoom);  // what fits now, and no more
  CHECK(p.a.host.completions.empty());      // the message is not out yet
  // Nothing is due while the queue is full (the host calls advance() when room returns);
  // once it drains, the rest is due at once.
  CHECK_FALSE(p.a.engine.next_deadline().has_value());
  CHECK(p.a.engine.counters().transmit_room_waits >= 1);

  const std::vector<std::size_t> batches = drain_paced(p, p.a, p.b, kRoom);
  CHECK(batches == std::vector<std::size_t>{64, 64, 64, 64, 44});
  REQUIRE(p.a.host.completions.size() == 1);
  CHECK(p.a.host.completions[0].status == WcStatus::Success);
  CHECK_FALSE(p.a.engine.next_deadline().has_value());
  const std::span<std::uint8_t> landed = p.b.memory.bytes(dst);
  CHECK(std::equal(data.begin(), data.end(), landed.begin()));
}

TEST_CASE("pacing: READ responses go out as room allows, and the READ completes whole") {
  constexpr std::size_t kLength = 150 * kMtu;  // 150 responses: more than a step
  constexpr std::size_t kRoom = 40;
  Pair p(QpType::Rc, kMtu);
  p.b.host.queue_capacity = kRoom;
  const PostedRead read = post_read(p, kLength, 11);
  p.deliver(p.a, p.b, p.a.host.take_sent());
  REQUIRE(p.b.host.sent.size() == kRoom);

  const std::vector<std::size_t> batches = drain_paced(p, p.b, p.a, kRoom);
  CHECK(batches == std::vector<std::size_t>{40, 40, 40, 30});
  p.exchange();
  REQUIRE(p.a.host.completions.size() == 1);
  CHECK(p.a.host.completions[0].status == WcStatus::Success);
  CHECK(read.landed(p));
}

TEST_CASE("pacing: RC requests wait for room, ACKs do not") {
  constexpr std::size_t kLength = 40 * kMtu;
  Pair p(QpType::Rc, kMtu);
  p.a.host.queue_capacity = 8;
  p.b.host.queue_capacity = 0;  // b's queue is full: it may still acknowledge
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, kLength, 0x10000);
  const MrFacts dst = p.b.memory.add(p.b.pd, kAllRemote, kLength, 0x900000);
  SendWr wr = send_wr(1, WrOpcode::RdmaWrite, src, static_cast<std::uint32_t>(kLength));
  wr.remote_addr = dst.base;
  wr.rkey = dst.rkey;
  REQUIRE(p.a.engine.post_send(p.a.qpn, wr, p.now) == VerbResult::Ok);
  REQUIRE(p.a.host.sent.size() == 8);
  const Psn first = p.a.host.sent.front().packet.bth.psn;

  std::uint32_t sent = 0;
  for (int turn = 0; turn < 100 && sent < 40; ++turn) {
    std::vector<Captured> batch = p.a.host.take_sent();
    REQUIRE(batch.size() <= 8);
    for (const Captured& c : batch) CHECK(c.packet.bth.psn == first + sent++);  // none lost, none repeated
    p.deliver(p.a, p.b, batch);
    p.deliver(p.b, p.a, p.b.host.take_sent());
    p.run_due(p.a);
  }
  CHECK(sent == 40);
  p.exchange();
  REQUIRE(p.a.host.completions.size() == 1);
  CHECK(p.a.host.completions[0].status == WcStatus::Success);
  CHECK(p.a.engine.counters().retransmits == 0);
}

TEST_CASE("pacing: a QP destroyed or reset while it waits for room leaves the queue") {
  Pair p(QpType::Uc, kMtu);
  p.a.host.queue_capacity = 4;
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 16 * kMtu, 0x10000);
  const MrFacts dst = p.b.memory.add(p.b.pd, kAllRemote, 16 * kMtu, 0x900000);
  SendWr wr = send_wr(1, WrOpcode::RdmaWrite, src, 16 * kMtu);
  wr.remote_addr = dst.base;
  wr.rkey = dst.rkey;
  REQUIRE(p.a.engine.post_send(p.a.qpn, wr, p.now) == VerbResult::Ok);
  REQUIRE(p.a.host.sent.size() == 4);

  SECTION("reset") {
    QpAttr reset;
    reset.state = QpState::Reset;
    REQUIRE(p.a.engine.modify_qp(p.a.qpn, reset, qp_attr::kState, p.now) == VerbResult::Ok);
  }
  SECTION("destroyed") { REQUIRE(p.a.engine.destroy_qp(p.a.qpn) == VerbResult::Ok); }
  p.a.host.take_sent();
  CHECK_FALSE(p.a.engine.next_deadline().has_value());  // out of the list at once, with room back
  p.a.engine.advance(p.now);  // nothing to resume; a dangling entry would be touched here
  CHECK(p.a.host.sent.empty());
  CHECK_FALSE(p.a.engine.next_deadline().has_value());
}

TEST_CASE("response pacer: unpaced until a re-request, then a token bucket that halves and recovers") {
  ResponsePacer pacer;
  const Instant t{};
  CHECK(pacer.allowance(t) == std::numeric_limits<std::uint32_t>::max());
  CHECK(pacer.next_allowed(t) == t);
  REQUIRE(pacer.on_rerequest(t));
  CHECK(pacer.rate() == kPacerFirstRate);
  CHECK(pacer.allowance(t) == kPacerBurst);  // a burst at most
  pacer.sent(kPacerBurst);
  CHECK(pacer.allowance(t) == 0);
  // One response every 1/200000 s = 5 us.
  CHECK(pacer.next_allowed(t) == t + std::chrono::microseconds(5));
  CHECK(pacer.allowance(t + std::chrono::microseconds(25)) == 5);
  CHECK(pacer.allowance(t + std::chrono::milliseconds(5)) == kPacerBurst);  // never more than a burst
  CHECK_FALSE(pacer.on_rerequest(t + std::chrono::milliseconds(5)));  // one cut per interval
  REQUIRE(pacer.on_rerequest(t + kPacerInterval));
  CHECK(pacer.rate() == kPacerFirstRate / 2);
  // An interval without a re-request raises the rate by an eighth.
  pacer.allowance(t + 2 * kPacerInterval);
  CHECK(pacer.rate() == kPacerFirstRate / 2 + kPacerFirstRate / 16);
  // Cuts stop at the floor.
  Instant later = t + 3 * kPacerInterval;
  for (int i = 0; i < 20; ++i, later += kPacerInterval) pacer.on_rerequest(later);
  CHECK(pacer.rate() == kPacerMinRate);
  // Quiet long enough, it lets go: every 10 ms counts, however long since the last look.
  REQUIRE(pacer.active());
  pacer.allowance(later + std::chrono::seconds(1));
  CHECK_FALSE(pacer.active());
  // A later re-request starts afresh, with a whole burst.
  const Instant again = later + std::chrono::seconds(2);
  REQUIRE(pacer.on_rerequest(again));
  CHECK(pacer.rate() == kPacerFirstRate);
  CHECK(pacer.allowance(again) == kPacerBurst);
}

TEST_CASE("pacing: READ streams short of room take turns") {
  constexpr std::size_t kQps = 3;
  constexpr std::size_t kLength = 256 * kMtu;  // four steps each
  constexpr std::size_t kRoom = 64;            // one step per turn
  Pair p(QpType::Rc, kMtu);
  const MrFacts remote = p.b.memory.add(p.b.pd, kAllRemote, kLength, 0x5000000);
  const MrFacts local = p.a.memory.add(p.a.pd, kAllRemote, kLength, 0x6000000);
  std::vector<Qpn> requesters{p.a.qpn};
  while (requesters.size() < kQps) requesters.push_back(p.add_connected_qps(QpType::Rc, kMtu).first);
  for (const Qpn qpn : requesters) {
    SendWr wr = send_wr(1, WrOpcode::RdmaRead, local, static_cast<std::uint32_t>(kLength));
    wr.remote_addr = remote.base;
    wr.rkey = remote.rkey;
    REQUIRE(p.a.engine.post_send(qpn, wr, p.now) == VerbResult::Ok);
  }
  p.b.host.queue_capacity = kRoom;
  p.deliver(p.a, p.b, p.a.host.take_sent());  // the first READ takes the room at once
  // Each turn one stream steps; over the next kQps turns every one of them does.
  std::set<std::uint32_t> served;
  for (std::size_t turn = 0; turn < kQps; ++turn) {
    p.b.host.take_sent();
    p.b.engine.advance(p.now);
    const std::vector<Captured>& batch = p.b.host.sent;
    REQUIRE(batch.size() == kRoom);
    CHECK(std::all_of(batch.begin(), batch.end(), [&](const Captured& c) { return c.src_qpn == batch.front().src_qpn; }));
    served.insert(batch.front().src_qpn.value());
  }
  CHECK(served.size() == kQps);
}

TEST_CASE("pacing: a READ asked for again after its responses were lost is answered at a paced rate") {
  constexpr std::size_t kLength = 200 * kMtu;
  Pair p(QpType::Rc, kMtu);
  const PostedRead read = post_read(p, kLength, 5);
  p.deliver(p.a, p.b, p.a.host.take_sent());
  p.run_due(p.b);
  CHECK(p.b.host.take_sent().size() == 200);  // unpaced: every response at once, all lost
  CHECK(p.b.engine.counters().read_pace_cuts == 0);

  REQUIRE(p.advance_to_next_deadline());  // a's ACK timeout: the READ again
  p.deliver(p.a, p.b, p.a.host.take_sent());
  CHECK(p.b.engine.counters().read_pace_cuts == 1);
  std::size_t batches = 0;
  for (; batches < 1000 && p.a.host.completions.empty(); ++batches) {
    std::vector<Captured> batch = p.b.host.take_sent();
    CHECK(batch.size() <= kPacerBurst);
    p.deliver(p.b, p.a, batch);
    const std::optional<Instant> due = p.b.engine.next_deadline();
    if (!due) break;
    CHECK(*due > p.now);  // paced: later, not at once
    p.now = *due;
    p.b.engine.advance(p.now);
  }
  p.deliver(p.b, p.a, p.b.host.take_sent());
  CHECK(batches > 200 / kPacerBurst);
  REQUIRE(p.a.host.completions.size() == 1);
  CHECK(p.a.host.completions[0].status == WcStatus::Success);
  CHECK(read.landed(p));
}

}  // namespace
}  // namespace rrdma::test
