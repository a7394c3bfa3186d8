// The responder answers a READ a step at a time (ReadStream, docs/TRANSPORT.md "Pacing READ
// responses"): requests behind it wait, in order; a duplicate of it restarts it; memory
// deregistered meanwhile is not read; an error state stops it.
#include <catch2/catch.hpp>

#include <algorithm>

#include "tests/sim/engine_harness.h"

namespace rrdma::test {
namespace {

constexpr std::size_t kKiB = 1024;
constexpr std::uint32_t kMtu = 1024;
constexpr std::uint32_t kStep = 64;  // kReadResponsesPerStep

bool is_read_response(const Captured& c) {
  const Opcode op = c.packet.bth.opcode;
  return op == Opcode::RcReadResponseFirst || op == Opcode::RcReadResponseMiddle ||
         op == Opcode::RcReadResponseLast || op == Opcode::RcReadResponseOnly;
}

// [first, last) are `count` packets with the PSNs from `from` on, in order.
template <typename It>
bool psns_in_order(It first, It last, Psn from, std::uint32_t count) {
  if (std::distance(first, last) != static_cast<std::ptrdiff_t>(count)) return false;
  for (std::uint32_t k = 0; first != last; ++first, ++k)
    if (first->packet.bth.psn != from + k) return false;
  return true;
}

struct ReadScene {
  Pair p{QpType::Rc, kMtu};
  MrFacts remote;
  MrFacts local;
  std::vector<std::uint8_t> data;

  explicit ReadScene(std::size_t length) {
    remote = p.b.memory.add(p.b.pd, kAllRemote, length, 0x5000000);
    local = p.a.memory.add(p.a.pd, kAllRemote, length, 0x6000000);
    data = pattern(length, 29);
    std::copy(data.begin(), data.end(), p.b.memory.bytes(remote).begin());
  }
  std::vector<std::uint8_t> landed() {
    const std::span<std::uint8_t> bytes = p.a.memory.bytes(local);
    return {bytes.begin(), bytes.end()};
  }
  void post_read(std::uint64_t id, std::size_t length) {
    SendWr wr = send_wr(id, WrOpcode::RdmaRead, local, static_cast<std::uint32_t>(length));
    wr.remote_addr = remote.base;
    wr.rkey = remote.rkey;
    REQUIRE(p.a.engine.post_send(p.a.qpn, wr, p.now) == VerbResult::Ok);
  }
  // Posts a READ of `length` (more than one step), delivers the request and returns the
  // responder's first step.
  std::vector<Captured> first_step_of_read(std::size_t length) {
    post_read(1, length);
    p.deliver(p.a, p.b, p.a.host.take_sent());
    std::vector<Captured> step = p.b.host.take_sent();
    REQUIRE(step.size() == kStep);
    return step;
  }
};

TEST_CASE("READ stream: a READ goes out a step at a time, and a WRITE behind it waits for its last response") {
  constexpr std::size_t kRead = 96 * kKiB;  // 96 responses: two steps
  ReadScene s(kRead);
  s.post_read(1, kRead);
  // A WRITE over the READ's last KiB, posted after it: the READ must return the old bytes.
  const MrFacts source = s.p.a.memory.add(s.p.a.pd, kAllRemote, kKiB, 0x7000000);
  std::fill(s.p.a.memory.bytes(source).begin(), s.p.a.memory.bytes(source).end(), std::uint8_t{0xEE});
  SendWr write = send_wr(2, WrOpcode::RdmaWrite, source, kKiB);
  write.remote_addr = s.remote.base + kRead - kKiB;
  write.rkey = s.remote.rkey;
  REQUIRE(s.p.a.engine.post_send(s.p.a.qpn, write, s.p.now) == VerbResult::Ok);

  s.p.deliver(s.p.a, s.p.b, s.p.a.host.take_sent());
  REQUIRE(s.p.b.host.sent.size() == kStep);
  CHECK(std::all_of(s.p.b.host.sent.begin(), s.p.b.host.sent.end(), is_read_response));
  CHECK(s.p.b.engine.next_deadline() == s.p.now);  // more to send: due now
  CHECK(s.p.b.memory.bytes(s.remote)[kRead - 1] == s.data[kRead - 1]);  // the WRITE waits

  s.p.run_due(s.p.b);
  const std::vector<Captured> sent = s.p.b.host.take_sent();
  REQUIRE(sent.size() == 96 + 1);
  for (std::size_t k = 0; k < 96; ++k) {
    CHECK(is_read_response(sent[k]));
    CHECK(sent[k].packet.bth.psn == s.p.a_psn + static_cast<std::uint32_t>(k));
  }
  CHECK(sent[96].packet.bth.opcode == Opcode::RcAck);  // the WRITE's, after the READ's last
  CHECK(sent[96].packet.bth.psn == s.p.a_psn + 96u);
  CHECK(s.p.b.memory.bytes(s.remote)[kRead - 1] == 0xEE);
  CHECK_FALSE(s.p.b.engine.next_deadline().has_value());

  s.p.deliver(s.p.b, s.p.a, sent);
  s.p.exchange();
  REQUIRE(s.p.a.host.completions.size() == 2);
  CHECK(s.p.a.host.completions[0].status == WcStatus::Success);
  CHECK(s.p.a.host.completions[1].status == WcStatus::Success);
  CHECK(s.landed() == s.data);
}

TEST_CASE("READ stream: an ACK held for the batch does not pass the READ being answered") {
  constexpr std::size_t kRead = 96 * kKiB;
  ReadScene s(kRead);
  s.p.b.engine.hold_acks(true);  // as the daemon does: ACKs go at the end of each batch
  const MrFacts source = s.p.a.memory.add(s.p.a.pd, kAllRemote, kKiB, 0x7000000);
  SendWr write = send_wr(1, WrOpcode::RdmaWrite, source, kKiB);
  write.remote_addr = s.remote.base;
  write.rkey = s.remote.rkey;
  REQUIRE(s.p.a.engine.post_send(s.p.a.qpn, write, s.p.now) == VerbResult::Ok);
  s.post_read(2, kRead);
  s.p.deliver(s.p.a, s.p.b, s.p.a.host.take_sent());
  s.p.b.engine.release_acks();  // the end of the batch
  s.p.run_due(s.p.b);
  const std::vector<Captured> sent = s.p.b.host.take_sent();
  // An ACK for "everything so far" would name the READ's last PSN before its responses were
  // all out, and the requester would take the READ for lost. The READ's responses cover it.
  CHECK(sent.size() == 96);
  CHECK(std::all_of(sent.begin(), sent.end(), is_read_response));
  s.p.deliver(s.p.b, s.p.a, sent);
  s.p.exchange();
  REQUIRE(s.p.a.host.completions.size() == 2);
  CHECK(s.p.a.host.completions[1].status == WcStatus::Success);
  CHECK(s.p.a.engine.counters().retransmits == 0);
}

TEST_CASE("READ stream: a duplicate of the READ being answered restarts it instead of adding its rest again") {
  constexpr std::size_t kRead = 192 * kKiB;  // 192 responses: three steps
  ReadScene s(kRead);
  std::vector<Captured> first_step = s.first_step_of_read(kRead);
  first_step.erase(first_step.begin() + 10);  // response 10 lost
  s.p.deliver(s.p.b, s.p.a, first_step);
  // The requester saw the gap at 11 and asks again from 10 (IBA ch. 9).
  const std::vector<Captured> again = s.p.a.host.take_sent();
  REQUIRE(again.size() == 1);
  REQUIRE(again[0].packet.bth.opcode == Opcode::RcReadRequest);
  REQUIRE(again[0].packet.bth.psn == s.p.a_psn + 10u);

  s.p.deliver(s.p.a, s.p.b, again);
  s.p.run_paced(s.p.b);  // a READ asked for again is answered at a pace (rocev2/engine/pacer.h)
  CHECK(s.p.b.engine.counters().read_streams_restarted == 1);
  CHECK(s.p.b.engine.counters().read_pace_cuts == 1);
  // From 10 to the end once: not the first stream's remaining 128 as well.
  const std::vector<Captured> rest = s.p.b.host.take_sent();
  REQUIRE(rest.size() == 192 - 10);
  for (std::size_t i = 0; i < rest.size(); ++i) CHECK(rest[i].packet.bth.psn == s.p.a_psn + static_cast<std::uint32_t>(10 + i));
  CHECK(rest.front().packet.bth.opcode == Opcode::RcReadResponseFirst);
  CHECK(rest.back().packet.bth.opcode == Opcode::RcReadResponseLast);

  s.p.deliver(s.p.b, s.p.a, rest);
  s.p.exchange();
  REQUIRE(s.p.a.host.completions.size() == 1);
  CHECK(s.p.a.host.completions[0].status == WcStatus::Success);
  CHECK(s.landed() == s.data);
}

// The requester asks again from its oldest gap: a re-request for an older READ that waits
// behind the stream comes before the re-request for the stream's own READ, and must be
// answered first; answering the newer READ first would be thrown away and cost a timeout.
TEST_CASE("READ stream: a request for the rest of the READ being answered waits behind older requests") {
  constexpr std::size_t kOld = 16 * kKiB;   // PSNs +0..+15
  constexpr std::size_t kNew = 192 * kKiB;  // PSNs +16..+207: three steps
  Pair p(QpType::Rc, kMtu);
  const MrFacts old_remote = p.b.memory.add(p.b.pd, kAllRemote, kOld, 0x5000000);
  const MrFacts new_remote = p.b.memory.add(p.b.pd, kAllRemote, kNew, 0x5800000);
  const MrFacts old_local = p.a.memory.add(p.a.pd, kAllRemote, kOld, 0x6000000);
  const MrFacts new_local = p.a.memory.add(p.a.pd, kAllRemote, kNew, 0x6800000);
  const std::vector<std::uint8_t> old_data = pattern(kOld, 3);
  const std::vector<std::uint8_t> new_data = pattern(kNew, 5);
  std::copy(old_data.begin(), old_data.end(), p.b.memory.bytes(old_remote).begin());
  std::copy(new_data.begin(), new_data.end(), p.b.memory.bytes(new_remote).begin());
  SendWr old_read = send_wr(1, WrOpcode::RdmaRead, old_local, kOld);
  old_read.remote_addr = old_remote.base;
  old_read.rkey = old_remote.rkey;
  SendWr new_read = send_wr(2, WrOpcode::RdmaRead, new_local, kNew);
  new_read.remote_addr = new_remote.base;
  new_read.rkey = new_remote.rkey;
  REQUIRE(p.a.engine.post_send(p.a.qpn, old_read, p.now) == VerbResult::Ok);
  REQUIRE(p.a.engine.post_send(p.a.qpn, new_read, p.now) == VerbResult::Ok);
  p.deliver(p.a, p.b, p.a.host.take_sent());
  std::vector<Captured> first = p.b.host.take_sent();
  REQUIRE(first.size() == 16 + kStep);  // the old READ whole, the new one's first step
  first.erase(first.begin() + 5);       // the old READ's response +5 is lost
  p.deliver(p.b, p.a, first);
  const std::vector<Captured> again = p.a.host.take_sent();
  REQUIRE(again.size() == 2);  // from the gap: the old READ from +5, the new one whole
  CHECK(again[0].packet.bth.psn == p.a_psn + 5u);
  CHECK(again[1].packet.bth.psn == p.a_psn + 16u);

  p.deliver(p.a, p.b, again);
  p.run_paced(p.b);
  const std::vector<Captured> answer = p.b.host.take_sent();
  // The old READ's rest comes before the new READ is answered again from its start.
  const auto old_rest = std::find_if(answer.begin(), answer.end(),
                                     [&](const Captured& c) { return c.packet.bth.psn == p.a_psn + 5u; });
  const auto new_again = std::find_if(old_rest, answer.end(),
                                      [&](const Captured& c) { return c.packet.bth.psn == p.a_psn + 16u; });
  REQUIRE(old_rest != answer.end());
  REQUIRE(new_again != answer.end());
  CHECK(psns_in_order(old_rest, new_again, p.a_psn + 5u, 11));
  CHECK(p.b.engine.counters().read_streams_restarted == 0);

  p.deliver(p.b, p.a, answer);
  p.exchange();
  REQUIRE(p.a.host.completions.size() == 2);
  CHECK(p.a.host.completions[0].status == WcStatus::Success);
  CHECK(p.a.host.completions[1].status == WcStatus::Success);
  CHECK(p.a.engine.counters().timeouts == 0);
  const std::span<std::uint8_t> old_landed = p.a.memory.bytes(old_local);
  const std::span<std::uint8_t> new_landed = p.a.memory.bytes(new_local);
  CHECK(std::equal(old_landed.begin(), old_landed.end(), old_data.begin(), old_data.end()));
  CHECK(std::equal(new_landed.begin(), new_landed.end(), new_data.begin(), new_data.end()));
}

TEST_CASE("READ stream: memory deregistered while its READ is answered is not read again, and the READ is NAKed") {
  constexpr std::size_t kRead = 192 * kKiB;
  ReadScene s(kRead);
  std::vector<Captured> sent = s.first_step_of_read(kRead);
  const std::size_t reads_before = s.p.b.memory.reads.size();
  REQUIRE(s.p.b.memory.invalidate_rkey(s.remote.rkey, s.p.b.pd));

  s.p.run_due(s.p.b);
  CHECK(s.p.b.memory.reads.size() == reads_before);
  const std::vector<Captured> nak = s.p.b.host.take_sent();
  REQUIRE(nak.size() == 1);
  CHECK(nak[0].packet.bth.opcode == Opcode::RcAck);
  CHECK(nak[0].packet.aeth->syndrome == 0x62);  // NAK, remote access error (IBA ch. 9 AETH)
  CHECK(s.p.b.state() == QpState::Err);

  sent.push_back(nak[0]);
  s.p.deliver(s.p.b, s.p.a, sent);
  REQUIRE(s.p.a.host.completions.size() == 1);
  CHECK(s.p.a.host.completions[0].status == WcStatus::RemAccessErr);
}

TEST_CASE("READ stream: moving the QP to ERR stops the READ being answered") {
  constexpr std::size_t kRead = 192 * kKiB;
  ReadScene s(kRead);
  s.first_step_of_read(kRead);
  QpAttr err;
  err.state = QpState::Err;
  REQUIRE(s.p.b.engine.modify_qp(s.p.b.qpn, err, qp_attr::kState, s.p.now) == VerbResult::Ok);
  CHECK_FALSE(s.p.b.engine.next_deadline().has_value());
  s.p.b.engine.advance(s.p.now);
  CHECK(s.p.b.host.sent.empty());
}

TEST_CASE("READ stream: a path MTU changed by modify_qp meanwhile leaves the READ's packets as they began") {
  constexpr std::size_t kRead = 192 * kKiB;
  ReadScene s(kRead);
  std::vector<Captured> sent = s.first_step_of_read(kRead);
  QpAttr bigger;
  bigger.path_mtu = 4096;
  REQUIRE(s.p.b.engine.modify_qp(s.p.b.qpn, bigger, qp_attr::kPathMtu, s.p.now) == VerbResult::Ok);
  s.p.run_due(s.p.b);
  const std::vector<Captured> rest = s.p.b.host.take_sent();
  REQUIRE(rest.size() == 192 - kStep);
  CHECK(std::all_of(rest.begin(), rest.end(), [](const Captured& c) { return c.payload.size() == kMtu; }));
  sent.insert(sent.end(), rest.begin(), rest.end());
  s.p.deliver(s.p.b, s.p.a, sent);
  REQUIRE(s.p.a.host.completions.size() == 1);
  CHECK(s.p.a.host.completions[0].status == WcStatus::Success);
  CHECK(s.landed() == s.data);
}

TEST_CASE("READ stream: each step reads only what it sends, so every byte is read once") {
  constexpr std::size_t kRead = 64 * kKiB;  // 256 responses at path MTU 256: four steps
  Pair p(QpType::Rc, 256);
  const MrFacts remote = p.b.memory.add(p.b.pd, kAllRemote, kRead, 0x5000000);
  const MrFacts local = p.a.memory.add(p.a.pd, kAllRemote, kRead, 0x6000000);
  SendWr wr = send_wr(1, WrOpcode::RdmaRead, local, kRead);
  wr.remote_addr = remote.base;
  wr.rkey = remote.rkey;
  REQUIRE(p.a.engine.post_send(p.a.qpn, wr, p.now) == VerbResult::Ok);
  p.exchange();
  REQUIRE(p.a.host.completions.size() == 1);
  CHECK(p.a.host.completions[0].status == WcStatus::Success);
  std::size_t bytes_read = 0;
  for (const auto& r : p.b.memory.reads) bytes_read += r.size;
  CHECK(p.b.memory.reads.size() == 4);
  CHECK(bytes_read == kRead);
}

// A peer may send more behind a READ than our requester's 128-PSN window ever would.
TEST_CASE("READ stream: the queue behind a READ is bounded, and what does not fit is dropped and counted") {
  constexpr std::size_t kRead = 96 * kKiB;
  constexpr std::uint32_t kWrites = 300;
  ReadScene s(kRead);
  s.first_step_of_read(kRead);
  const std::vector<std::uint8_t> eight(8, 0x5A);
  for (std::uint32_t i = 0; i < kWrites; ++i) {
    TransportPacket w;
    w.bth.opcode = Opcode::RcWriteOnly;
    w.bth.dest_qp = s.p.b.qpn;
    w.bth.psn = s.p.a_psn + (96 + i);
    w.reth = Reth{s.remote.base + 8 * i, s.remote.rkey, 8};
    w.payload = eight;
    s.p.b.engine.receive(w, PacketSource{s.p.a.ip, 0xC000, {}}, s.p.now);
  }
  CHECK(s.p.b.engine.counters().requests_dropped_behind_read == kWrites - 256);
  CHECK(s.p.b.host.sent.empty());

  s.p.run_due(s.p.b);
  const std::vector<Captured> sent = s.p.b.host.take_sent();
  const auto acks = std::count_if(sent.begin(), sent.end(), [](const Captured& c) { return c.packet.bth.opcode == Opcode::RcAck; });
  CHECK(std::count_if(sent.begin(), sent.end(), is_read_response) == 32);
  CHECK(acks == 256 / 64);  // one per kPacketsPerAck WRITEs taken
  CHECK(sent.back().packet.bth.psn == s.p.a_psn + (96 + 255));
  CHECK(s.p.b.memory.bytes(s.remote)[8 * 255] == 0x5A);
  CHECK(s.p.b.memory.bytes(s.remote)[8 * 256] == s.data[8 * 256]);  // dropped: never written
}

}  // namespace
}  // namespace rrdma::test
