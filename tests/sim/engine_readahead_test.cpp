// The read-ahead (docs/TRANSPORT.md, "Read-ahead"): payloads leave registered memory in
// windows of up to kReadAheadBytes, one gather per window instead of one Dma read per
// packet, never further than the engine sends in that call, and never kept from one
// engine call to the next. PlainMemory records every Dma::read the engine makes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>

#include "rocev2/engine/engine_impl.h"
#include "tests/sim/engine_harness.h"

namespace rrdma::test {
namespace {

using Read = PlainMemory::Read;
constexpr std::size_t kKiB = 1024;

std::size_t bytes_read(const std::vector<Read>& reads) {
  return std::accumulate(reads.begin(), reads.end(), std::size_t{0},
                         [](std::size_t n, const Read& r) { return n + r.size; });
}

std::size_t payload_bytes(const std::vector<Captured>& sent) {
  return std::accumulate(sent.begin(), sent.end(), std::size_t{0},
                         [](std::size_t n, const Captured& c) { return n + c.payload.size(); });
}

// True if the reads cover [base, base + length) in order, each byte once.
bool contiguous(const std::vector<Read>& reads, std::uint64_t base, std::size_t length) {
  std::uint64_t at = base;
  for (const Read& r : reads) {
    if (r.addr != at) return false;
    at += r.size;
  }
  return at == base + length;
}

bool window_sized(const std::vector<Read>& reads) {
  return std::all_of(reads.begin(), reads.end(), [](const Read& r) { return r.size <= kReadAheadBytes; });
}

std::vector<std::uint8_t> region_bytes(PlainMemory& m, const MrFacts& mr, std::size_t from, std::size_t n) {
  const std::span<std::uint8_t> b = m.bytes(mr).subspan(from, n);
  return {b.begin(), b.end()};
}

// A connected pair at `mtu` with a source region on A and a sink region on B.
struct WriteSetup {
  Pair pair;
  MrFacts src;
  MrFacts dst;
  std::vector<std::uint8_t> data;
  WriteSetup(QpType type, std::uint32_t mtu, std::size_t length) : pair(type, mtu) {
    src = pair.a.memory.add(pair.a.pd, access::kLocalWrite, length, 0x1000000);
    dst = pair.b.memory.add(pair.b.pd, kAllRemote, length, 0x8000000);
    data = pattern(length, 5);
    std::copy(data.begin(), data.end(), pair.a.memory.bytes(src).begin());
  }
  SendWr write(std::uint64_t id, std::uint32_t length, std::uint64_t remote_offset = 0) const {
    SendWr wr = send_wr(id, WrOpcode::RdmaWrite, src, length);
    wr.remote_addr = dst.base + remote_offset;
    wr.rkey = dst.rkey;
    return wr;
  }
};

TEST_CASE("read-ahead: a 64 KiB RC WRITE at MTU 4096 reads its source in one Dma call, not 16") {
  WriteSetup s(QpType::Rc, 4096, 64 * kKiB);
  Pair& p = s.pair;
  REQUIRE(p.a.engine.post_send(p.a.qpn, s.write(1, 64 * kKiB), p.now) == VerbResult::Ok);
  CHECK(p.a.host.sent.size() == 16);
  CHECK(p.a.memory.reads == std::vector<Read>{{s.src.base, 64 * kKiB}});
  p.exchange();
  REQUIRE(p.a.host.completions.size() == 1);
  CHECK(p.a.host.completions[0].status == WcStatus::Success);
  CHECK(region_bytes(p.b.memory, s.dst, 0, 64 * kKiB) == s.data);
  CHECK(p.a.memory.reads.size() == 1);
}

TEST_CASE("read-ahead: a 1 MiB RC WRITE reads in 64 KiB windows, never past the unacknowledged-PSN window") {
  constexpr std::size_t kLength = 1024 * kKiB;
  WriteSetup s(QpType::Rc, 4096, kLength);
  Pair& p = s.pair;
  // Three packets first, so that the 128-PSN window ends 13 packets into a 64 KiB window
  // of the big WRITE: the read-ahead must stop there too, not at the 64 KiB boundary.
  p.a.engine.post_send(p.a.qpn, s.write(1, 3 * 4096), p.now);
  p.a.engine.post_send(p.a.qpn, s.write(2, kLength), p.now);
  const std::vector<Captured> first_burst = p.a.host.sent;
  CHECK(first_burst.size() == 128);
  // What was read is exactly what was sent: the small WRITE, 7 full windows and 13 packets.
  CHECK(bytes_read(p.a.memory.reads) == payload_bytes(first_burst));
  REQUIRE(p.a.memory.reads.size() == 1 + 8);
  CHECK(p.a.memory.reads.back() == Read{s.src.base + 7 * 64 * kKiB, 13 * 4096});
  p.a.memory.reads.clear();
  p.exchange();
  const std::vector<Completion> c = p.a.host.take_completions();
  REQUIRE(c.size() == 2);
  CHECK(c[1].status == WcStatus::Success);
  CHECK(region_bytes(p.b.memory, s.dst, 0, kLength) == s.data);
  // The rest of the big WRITE, read once, in order, in windows of at most 64 KiB.
  const std::uint64_t rest = s.src.base + 125 * 4096;
  CHECK(contiguous(p.a.memory.reads, rest, kLength - 125 * 4096));
  CHECK(window_sized(p.a.memory.reads));
}

TEST_CASE("read-ahead: a 1 MiB UC WRITE at MTU 4096 takes 16 reads of 64 KiB") {
  constexpr std::size_t kLength = 1024 * kKiB;
  WriteSetup s(QpType::Uc, 4096, kLength);
  Pair& p = s.pair;
  p.a.engine.post_send(p.a.qpn, s.write(1, kLength), p.now);
  CHECK(p.a.host.sent.size() == 256);
  REQUIRE(p.a.memory.reads.size() == 16);
  CHECK(contiguous(p.a.memory.reads, s.src.base, kLength));
  CHECK(std::all_of(p.a.memory.reads.begin(), p.a.memory.reads.end(),
                    [](const Read& r) { return r.size == 64 * kKiB; }));
  p.exchange();
  CHECK(region_bytes(p.b.memory, s.dst, 0, kLength) == s.data);
}

TEST_CASE("read-ahead: a window crossing SGE boundaries is one gather, and the bytes arrive exactly") {
  Pair p(QpType::Rc, 1024);
  const MrFacts big = p.a.memory.add(p.a.pd, access::kLocalWrite, 100000, 0x1000000);
  const MrFacts tiny = p.a.memory.add(p.a.pd, access::kLocalWrite, 16, 0x3000000);
  std::vector<std::uint8_t> big_data = pattern(100000, 21);
  std::copy(big_data.begin(), big_data.end(), p.a.memory.bytes(big).begin());
  p.a.memory.bytes(tiny)[5] = 0xA5;
  const MrFacts dst = p.b.memory.add(p.b.pd, kAllRemote, 80000, 0x8000000);
  // 5000 + 1 + 70000 = 75001 bytes, 74 packets: the first window holds all of the first
  // two SGEs and 60535 bytes of the third; the second window the rest.
  SendWr wr;
  wr.wr_id = 1;
  wr.opcode = WrOpcode::RdmaWrite;
  wr.flags = send_flags::kSignaled;
  wr.sg_list = {Sge{big.base + 3, 5000, big.lkey}, Sge{tiny.base + 5, 1, tiny.lkey},
                Sge{big.base + 8000, 70000, big.lkey}};
  wr.remote_addr = dst.base;
  wr.rkey = dst.rkey;
  p.a.engine.post_send(p.a.qpn, wr, p.now);
  CHECK(p.a.host.sent.size() == 74);
  CHECK(p.a.memory.reads == std::vector<Read>{{big.base + 3, 5000},
                                              {tiny.base + 5, 1},
                                              {big.base + 8000, 60535},
                                              {big.base + 8000 + 60535, 9465}});
  p.exchange();
  REQUIRE(p.a.host.completions.size() == 1);
  CHECK(p.a.host.completions[0].status == WcStatus::Success);
  std::vector<std::uint8_t> expected(big_data.begin() + 3, big_data.begin() + 5003);
  expected.push_back(0xA5);
  expected.insert(expected.end(), big_data.begin() + 8000, big_data.begin() + 78000);
  CHECK(region_bytes(p.b.memory, dst, 0, 75001) == expected);
}

TEST_CASE("read-ahead: a retransmission reads memory again, so a buffer changed before the completion sends its new bytes") {
  WriteSetup s(QpType::Rc, 4096, 64 * kKiB);
  Pair& p = s.pair;
  p.a.engine.post_send(p.a.qpn, s.write(1, 64 * kKiB), p.now);
  std::vector<Captured> burst = p.a.host.take_sent();
  REQUIRE(burst.size() == 16);
  burst.erase(burst.begin() + 5);  // packet 5 is lost
  // man ibv_post_send: a WR's buffers may be reused only after its completion. An
  // application that rewrites them earlier gets whatever the NIC reads when: a NIC
  // re-reads host memory for a retransmission (it keeps no copy of sent payloads), so
  // the packets resent after the loss carry the new bytes and those delivered before it
  // the old ones. Bytes kept from the first send would be a copy no NIC has.
  const std::vector<std::uint8_t> rewritten = pattern(64 * kKiB, 99);
  std::copy(rewritten.begin(), rewritten.end(), p.a.memory.bytes(s.src).begin());
  p.a.memory.reads.clear();
  p.deliver(p.a, p.b, burst);  // packet 6 draws a sequence NAK for PSN 5
  p.deliver(p.b, p.a, p.b.host.take_sent());
  CHECK(p.a.observer.count(PacketDecision::Retransmitted) == 11);
  // Packets 5..15 again, read in one window from memory, not from the first send.
  CHECK(p.a.memory.reads == std::vector<Read>{{s.src.base + 5 * 4096, 11 * 4096}});
  p.exchange();
  REQUIRE(p.a.host.completions.size() == 1);
  CHECK(p.a.host.completions[0].status == WcStatus::Success);
  std::vector<std::uint8_t> expected = rewritten;
  std::copy(s.data.begin(), s.data.begin() + 5 * 4096, expected.begin());
  CHECK(region_bytes(p.b.memory, s.dst, 0, 64 * kKiB) == expected);
}

TEST_CASE("read-ahead: a timeout retransmission of the same window reads memory again") {
  WriteSetup s(QpType::Rc, 4096, 64 * kKiB);
  Pair& p = s.pair;
  p.a.engine.post_send(p.a.qpn, s.write(1, 64 * kKiB), p.now);
  p.a.host.take_sent();  // all lost
  const std::vector<std::uint8_t> rewritten = pattern(64 * kKiB, 77);
  std::copy(rewritten.begin(), rewritten.end(), p.a.memory.bytes(s.src).begin());
  p.now = *p.a.engine.next_deadline();
  p.a.engine.advance(p.now);
  CHECK(p.a.host.sent.size() == 16);
  // Same WQE, same offsets as the first window: only the end of the first call forgot it.
  CHECK(p.a.memory.reads == std::vector<Read>{{s.src.base, 64 * kKiB}, {s.src.base, 64 * kKiB}});
  p.exchange();
  CHECK(region_bytes(p.b.memory, s.dst, 0, 64 * kKiB) == rewritten);
}

TEST_CASE("read-ahead: a buffer rewritten between two WQEs is read again for the second") {
  WriteSetup s(QpType::Rc, 4096, 128 * kKiB);
  Pair& p = s.pair;
  p.a.engine.post_send(p.a.qpn, s.write(1, 64 * kKiB), p.now);
  p.exchange();
  const std::vector<std::uint8_t> rewritten = pattern(64 * kKiB, 42);
  std::copy(rewritten.begin(), rewritten.end(), p.a.memory.bytes(s.src).begin());
  p.a.engine.post_send(p.a.qpn, s.write(2, 64 * kKiB, 64 * kKiB), p.now);
  p.exchange();
  CHECK(p.a.host.completions.size() == 2);
  CHECK(p.a.memory.reads.size() == 2);
  CHECK(region_bytes(p.b.memory, s.dst, 0, 64 * kKiB) ==
        std::vector<std::uint8_t>(s.data.begin(), s.data.begin() + 64 * kKiB));
  CHECK(region_bytes(p.b.memory, s.dst, 64 * kKiB, 64 * kKiB) == rewritten);
}

TEST_CASE("read-ahead: a SEND in windows lands whole in the receive buffer, inline data still needs no Dma") {
  WriteSetup s(QpType::Rc, 1024, 100 * kKiB);
  Pair& p = s.pair;
  p.b.engine.post_recv(p.b.qpn, recv_wr(7, s.dst, 100 * kKiB));
  p.a.engine.post_send(p.a.qpn, send_wr(1, WrOpcode::Send, s.src, 100 * kKiB), p.now);
  CHECK(p.a.memory.reads == std::vector<Read>{{s.src.base, 64 * kKiB}, {s.src.base + 64 * kKiB, 36 * kKiB}});
  p.exchange();
  CHECK(region_bytes(p.b.memory, s.dst, 0, 100 * kKiB) == s.data);

  p.a.memory.reads.clear();
  SendWr inl = send_wr(2, WrOpcode::Send, s.src, 0, send_flags::kSignaled | send_flags::kInline);
  inl.sg_list.clear();
  inl.inline_data = pattern(200, 8);
  p.b.engine.post_recv(p.b.qpn, recv_wr(8, s.dst, 4096));
  p.a.engine.post_send(p.a.qpn, inl, p.now);
  p.exchange();
  CHECK(p.a.memory.reads.empty());
  CHECK(region_bytes(p.b.memory, s.dst, 0, 200) == inl.inline_data);
}

TEST_CASE("read-ahead: READ responses of 64 KiB read the responder's memory once, 1 MiB in 16 windows") {
  constexpr std::size_t kLength = 1024 * kKiB;
  Pair p(QpType::Rc, 4096);
  const MrFacts remote = p.b.memory.add(p.b.pd, access::kLocalWrite | access::kRemoteRead, kLength, 0x5000000);
  const MrFacts local = p.a.memory.add(p.a.pd, access::kLocalWrite, kLength, 0x6000000);
  const std::vector<std::uint8_t> data = pattern(kLength, 13);
  std::copy(data.begin(), data.end(), p.b.memory.bytes(remote).begin());
  const std::size_t length = GENERATE(64 * kKiB, 1024 * kKiB);
  SendWr wr = send_wr(1, WrOpcode::RdmaRead, local, static_cast<std::uint32_t>(length));
  wr.remote_addr = remote.base;
  wr.rkey = remote.rkey;
  p.a.engine.post_send(p.a.qpn, wr, p.now);
  p.deliver(p.a, p.b, p.a.host.take_sent());
  p.run_due(p.b);  // a READ of more than one step (ReadStream) goes on in advance()
  CHECK(p.b.host.sent.size() == length / 4096);
  CHECK(p.b.memory.reads.size() == length / (64 * kKiB));
  CHECK(contiguous(p.b.memory.reads, remote.base, length));
  CHECK(std::all_of(p.b.memory.reads.begin(), p.b.memory.reads.end(),
                    [](const Read& r) { return r.size == 64 * kKiB; }));
  p.exchange();
  REQUIRE(p.a.host.completions.size() == 1);
  CHECK(p.a.host.completions[0].status == WcStatus::Success);
  CHECK(region_bytes(p.a.memory, local, 0, length) ==
        std::vector<std::uint8_t>(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(length)));
}

TEST_CASE("read-ahead: a duplicate READ reads the responder's memory again") {
  Pair p(QpType::Rc, 4096);
  const MrFacts remote = p.b.memory.add(p.b.pd, access::kLocalWrite | access::kRemoteRead, 64 * kKiB, 0x5000000);
  const MrFacts local = p.a.memory.add(p.a.pd, access::kLocalWrite, 64 * kKiB, 0x6000000);
  std::vector<std::uint8_t> data = pattern(64 * kKiB, 13);
  std::copy(data.begin(), data.end(), p.b.memory.bytes(remote).begin());
  SendWr wr = send_wr(1, WrOpcode::RdmaRead, local, 64 * kKiB);
  wr.remote_addr = remote.base;
  wr.rkey = remote.rkey;
  p.a.engine.post_send(p.a.qpn, wr, p.now);
  const std::vector<Captured> request = p.a.host.take_sent();
  p.deliver(p.a, p.b, request);
  p.b.host.take_sent();  // every response lost
  data = pattern(64 * kKiB, 31);
  std::copy(data.begin(), data.end(), p.b.memory.bytes(remote).begin());
  p.deliver(p.a, p.b, request);  // the same request again: executed again (IBA ch. 9)
  CHECK(p.b.observer.count(PacketDecision::Duplicate) == 1);
  CHECK(p.b.memory.reads == std::vector<Read>{{remote.base, 64 * kKiB}, {remote.base, 64 * kKiB}});
  p.exchange();
  REQUIRE(p.a.host.completions.size() == 1);
  CHECK(region_bytes(p.a.memory, local, 0, 64 * kKiB) == data);
}

TEST_CASE("read-ahead: unreadable memory fails the WQE as a failed gather always did") {
  SECTION("at the first window: LocProtErr, nothing sent, the RC QP in ERR") {
    WriteSetup s(QpType::Rc, 4096, 64 * kKiB);
    Pair& p = s.pair;
    p.a.memory.reads_fail = true;
    p.a.engine.post_send(p.a.qpn, s.write(1, 64 * kKiB), p.now);
    p.a.engine.post_send(p.a.qpn, s.write(2, 64 * kKiB), p.now);
    CHECK(p.a.host.sent.empty());
    const std::vector<Completion> c = p.a.host.take_completions();
    REQUIRE(c.size() == 2);
    CHECK(c[0].wr_id == 1);
    CHECK(c[0].status == WcStatus::LocProtErr);
    CHECK(c[1].status == WcStatus::WrFlushErr);
    CHECK(p.a.state() == QpState::Err);
  }
  SECTION("in a later window of a message partly sent: LocProtErr, the RC QP in ERR") {
    WriteSetup s(QpType::Rc, 4096, 1024 * kKiB);
    Pair& p = s.pair;
    p.a.engine.post_send(p.a.qpn, s.write(1, 1024 * kKiB), p.now);
    CHECK(p.a.host.sent.size() == 128);
    p.a.memory.reads_fail = true;
    p.exchange();  // the ACKs open the window: the next window cannot be read
    const std::vector<Completion> c = p.a.host.take_completions();
    REQUIRE(c.size() == 1);
    CHECK(c[0].status == WcStatus::LocProtErr);
    CHECK(p.a.state() == QpState::Err);
  }
  SECTION("UC: LocProtErr and the QP in ERR, as for RC") {
    WriteSetup s(QpType::Uc, 4096, 64 * kKiB);
    Pair& p = s.pair;
    p.a.memory.reads_fail = true;
    p.a.engine.post_send(p.a.qpn, s.write(1, 64 * kKiB), p.now);
    const std::vector<Completion> c = p.a.host.take_completions();
    REQUIRE(c.size() == 1);
    CHECK(c[0].status == WcStatus::LocProtErr);
    CHECK(p.a.state() == QpState::Err);
  }
  SECTION("a READ whose source is unreadable: NAK remote operational error, RemOpErr") {
    Pair p(QpType::Rc, 4096);
    const MrFacts remote = p.b.memory.add(p.b.pd, access::kLocalWrite | access::kRemoteRead, 64 * kKiB, 0x5000000);
    const MrFacts local = p.a.memory.add(p.a.pd, access::kLocalWrite, 64 * kKiB, 0x6000000);
    p.b.memory.reads_fail = true;
    SendWr wr = send_wr(1, WrOpcode::RdmaRead, local, 64 * kKiB);
    wr.remote_addr = remote.base;
    wr.rkey = remote.rkey;
    p.a.engine.post_send(p.a.qpn, wr, p.now);
    p.deliver(p.a, p.b, p.a.host.take_sent());
    const std::vector<Captured> answer = p.b.host.sent;
    REQUIRE(answer.size() == 1);
    CHECK(answer[0].packet.bth.opcode == Opcode::RcAck);
    CHECK(p.b.observer.count(PacketDecision::OperationalErrorNak) == 1);
    p.exchange();
    REQUIRE(p.a.host.completions.size() == 1);
    CHECK(p.a.host.completions[0].status == WcStatus::RemOpErr);
  }
}


// The read-ahead over several WQEs: WQEs queued together (Engine::queue_send, as the daemon
// does with a doorbell's worth) and started at once are read with one gather, as far as
// the pump will send them.

// `count` WRITEs of `length` bytes, each from and to its own slice of the regions.
void queue_writes(WriteSetup& s, std::size_t count, std::uint32_t length) {
  for (std::size_t i = 0; i < count; ++i) {
    SendWr wr = s.write(i + 1, length, i * length);
    wr.sg_list[0].addr += i * length;
    REQUIRE(s.pair.a.engine.queue_send(s.pair.a.qpn, wr) == VerbResult::Ok);
  }
}

TEST_CASE("read-ahead over WQEs: sixteen queued 4 KiB WRITEs leave memory in one gather") {
  const QpType type = GENERATE(QpType::Rc, QpType::Uc);
  WriteSetup s(type, 4096, 64 * kKiB);
  Pair& p = s.pair;
  queue_writes(s, 16, 4096);
  CHECK(p.a.host.sent.empty());
  p.a.engine.start_sends(p.a.qpn, p.now);
  CHECK(p.a.host.sent.size() == 16);
  CHECK(p.a.memory.gathers == std::vector<std::size_t>{16});
  CHECK(contiguous(p.a.memory.reads, s.src.base, 64 * kKiB));
  p.exchange();
  const std::vector<Completion> c = p.a.host.take_completions();
  REQUIRE(c.size() == 16);
  CHECK(std::all_of(c.begin(), c.end(), [](const Completion& x) { return x.status == WcStatus::Success; }));
  CHECK(region_bytes(p.b.memory, s.dst, 0, 64 * kKiB) == s.data);
}

TEST_CASE("read-ahead over WQEs: never more than 64 KiB at once, never past the unacknowledged-PSN window") {
  // 200 WRITEs of 3000 bytes, three packets each at MTU 1024. The 128-PSN window admits 42
  // whole WQEs and two packets of the 43rd; 64 KiB holds 21 whole WQEs.
  WriteSetup s(QpType::Rc, 1024, 200 * 3000);
  Pair& p = s.pair;
  queue_writes(s, 200, 3000);
  p.a.engine.start_sends(p.a.qpn, p.now);
  const std::vector<Captured> first_burst = p.a.host.sent;
  CHECK(first_burst.size() == 128);
  CHECK(p.a.memory.gathers == std::vector<std::size_t>{21, 21, 1});
  CHECK(bytes_read(p.a.memory.reads) == payload_bytes(first_burst));
  CHECK(bytes_read(p.a.memory.reads) == 42 * 3000 + 2048);
  p.exchange();
  const std::vector<Completion> c = p.a.host.take_completions();
  REQUIRE(c.size() == 200);
  CHECK(std::all_of(c.begin(), c.end(), [](const Completion& x) { return x.status == WcStatus::Success; }));
  CHECK(region_bytes(p.b.memory, s.dst, 0, 200 * 3000) == s.data);
}

TEST_CASE("read-ahead over WQEs: the gather stops at a WQE with no payload to read") {
  WriteSetup s(QpType::Rc, 4096, 64 * kKiB);
  Pair& p = s.pair;
  const MrFacts remote = p.b.memory.add(p.b.pd, access::kLocalWrite | access::kRemoteRead, 4096, 0x5000000);
  SendWr middle;
  SECTION("an inline WRITE") {
    middle = send_wr(2, WrOpcode::RdmaWrite, s.src, 0, send_flags::kSignaled | send_flags::kInline);
    middle.sg_list.clear();
    middle.inline_data = pattern(100, 3);
    middle.remote_addr = s.dst.base + 8192;
    middle.rkey = s.dst.rkey;
  }
  SECTION("a READ") {
    middle = send_wr(2, WrOpcode::RdmaRead, s.src, 100);
    middle.sg_list[0].addr += 8192;
    middle.remote_addr = remote.base;
    middle.rkey = remote.rkey;
  }
  SendWr first = s.write(1, 4096);
  SendWr last = s.write(3, 4096, 4096);
  last.sg_list[0].addr += 4096;
  REQUIRE(p.a.engine.queue_send(p.a.qpn, first) == VerbResult::Ok);
  REQUIRE(p.a.engine.queue_send(p.a.qpn, middle) == VerbResult::Ok);
  REQUIRE(p.a.engine.queue_send(p.a.qpn, last) == VerbResult::Ok);
  p.a.engine.start_sends(p.a.qpn, p.now);
  CHECK(p.a.host.sent.size() == 3);
  CHECK(p.a.memory.gathers == std::vector<std::size_t>{1, 1});
  p.exchange();
  const std::vector<Completion> c = p.a.host.take_completions();
  REQUIRE(c.size() == 3);
  CHECK(std::all_of(c.begin(), c.end(), [](const Completion& x) { return x.status == WcStatus::Success; }));
  CHECK(region_bytes(p.b.memory, s.dst, 0, 8192) ==
        std::vector<std::uint8_t>(s.data.begin(), s.data.begin() + 8192));
}

TEST_CASE("read-ahead over WQEs: a later WQE's unreadable buffer fails that WQE only, the earlier one goes out") {
  WriteSetup s(QpType::Rc, 4096, 64 * kKiB);
  Pair& p = s.pair;
  const MrFacts gone = p.a.memory.add(p.a.pd, access::kLocalWrite, 4096, 0x3000000);
  p.a.memory.make_unreadable(gone);
  SendWr bad = send_wr(2, WrOpcode::RdmaWrite, gone, 4096);
  bad.remote_addr = s.dst.base;
  bad.rkey = s.dst.rkey;
  REQUIRE(p.a.engine.queue_send(p.a.qpn, s.write(1, 4096)) == VerbResult::Ok);
  REQUIRE(p.a.engine.queue_send(p.a.qpn, bad) == VerbResult::Ok);
  REQUIRE(p.a.engine.queue_send(p.a.qpn, s.write(3, 4096)) == VerbResult::Ok);
  p.a.engine.start_sends(p.a.qpn, p.now);
  // The gather of all three fails; the first WQE's own window is read alone and sent.
  CHECK(p.a.memory.gathers.front() == 3);
  REQUIRE(p.a.host.sent.size() == 1);
  CHECK(p.a.host.sent[0].payload == std::vector<std::uint8_t>(s.data.begin(), s.data.begin() + 4096));
  const std::vector<Completion> c = p.a.host.take_completions();
  REQUIRE_FALSE(c.empty());
  CHECK(c[0].wr_id == 2);
  CHECK(c[0].status == WcStatus::LocProtErr);
  CHECK(p.a.state() == QpState::Err);
}

TEST_CASE("read-ahead over WQEs: eight queued UD SENDs leave memory in one gather") {
  Pair p(QpType::Ud);
  const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, 8 * 256, 0x10000);
  const MrFacts dst = p.b.memory.add(p.b.pd, access::kLocalWrite, 8 * 296, 0x20000);
  const std::vector<std::uint8_t> data = pattern(8 * 256, 6);
  std::copy(data.begin(), data.end(), p.a.memory.bytes(src).begin());
  for (std::uint32_t i = 0; i < 8; ++i) {
    RecvWr r = recv_wr(100 + i, dst, 296);
    r.sg_list[0].addr += i * 296;
    REQUIRE(p.b.engine.post_recv(p.b.qpn, r) == VerbResult::Ok);
    SendWr w = send_wr(i, WrOpcode::Send, src, 256);
    w.sg_list[0].addr += i * 256;
    w.ud_dest_ip = p.b.ip;
    w.ud_remote_qpn = p.b.qpn;
    w.ud_remote_qkey = Qkey(0x11111111);
    REQUIRE(p.a.engine.queue_send(p.a.qpn, w) == VerbResult::Ok);
  }
  p.a.engine.start_sends(p.a.qpn, p.now);
  CHECK(p.a.memory.gathers == std::vector<std::size_t>{8});
  p.exchange();
  REQUIRE(p.b.host.completions.size() == 8);
  for (std::uint32_t i = 0; i < 8; ++i) {
    CHECK(p.b.host.completions[i].status == WcStatus::Success);
    // Each receive buffer: 40 bytes of GRH area, then the message.
    const std::span<std::uint8_t> got = p.b.memory.bytes(dst).subspan(i * 296 + 40, 256);
    CHECK(std::equal(got.begin(), got.end(), data.begin() + i * 256));
  }
}

}  // namespace
}  // namespace rrdma::test
