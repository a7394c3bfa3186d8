// Two engines over a hand-made lossy link (seeded: loss, duplication, reordering within a
// burst), with a mix of SEND, WRITE, READ and FETCH_ADD on RC: every WQE must complete
// successfully, in order, with the right bytes, and every atomic must count once. Time
// only moves when both sides are idle, to the next deadline the engines ask for.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "tests/sim/engine_harness.h"

namespace rrdma::test {
namespace {

struct Lossy {
  std::mt19937_64 rng;
  double loss;
  double duplicate;
  std::vector<Captured> pass(std::vector<Captured> in) {
    std::vector<Captured> out;
    std::uniform_real_distribution<double> u(0, 1);
    for (Captured& c : in) {
      if (u(rng) < loss) continue;
      if (u(rng) < duplicate) out.push_back(c);
      out.push_back(std::move(c));
    }
    // Reorder a little: swap neighbours now and then.
    for (std::size_t i = 1; i < out.size(); ++i)
      if (u(rng) < loss) std::swap(out[i - 1], out[i]);
    return out;
  }
};

bool posted_write(const std::vector<WrOpcode>& ops) {
  return std::find(ops.begin(), ops.end(), WrOpcode::RdmaWrite) != ops.end();
}
bool posted_read(const std::vector<WrOpcode>& ops) {
  return std::find(ops.begin(), ops.end(), WrOpcode::RdmaRead) != ops.end();
}

// Returns A's retransmission count.
std::uint64_t run(std::uint64_t seed, double loss) {
  QpAttr tweak;
  tweak.timeout = 8;  // ~1 ms
  tweak.min_rnr_timer = 1;
  Pair p(QpType::Rc, 1024, tweak, qp_attr::kTimeout | qp_attr::kMinRnrTimer);
  Lossy link{std::mt19937_64(seed), loss, loss / 2};
  constexpr std::size_t kSize = 64 * 1024;
  const MrFacts a_mem = p.a.memory.add(p.a.pd, kAllRemote, kSize, 0x100000);
  const MrFacts b_mem = p.b.memory.add(p.b.pd, kAllRemote, kSize, 0x900000);
  const std::vector<std::uint8_t> a_data = pattern(kSize, 11);
  const std::vector<std::uint8_t> b_data = pattern(kSize, 57);
  std::copy(a_data.begin(), a_data.end(), p.a.memory.bytes(a_mem).begin());
  std::copy(b_data.begin(), b_data.end(), p.b.memory.bytes(b_mem).begin());
  p.b.memory.set_word(b_mem, b_mem.base + kSize - 8, 0);

  // A writes its first 16 KiB to B, sends the next 16 KiB, reads B's third 16 KiB into its
  // own third, and adds 1 to B's last word, repeatedly.
  std::mt19937_64 pick(seed * 31 + 7);
  int sends = 0;
  int adds = 0;
  std::vector<WrOpcode> posted;
  for (std::uint64_t id = 0; id < 40; ++id) {
    const WrOpcode op = std::array{WrOpcode::RdmaWrite, WrOpcode::Send, WrOpcode::RdmaRead,
                                   WrOpcode::AtomicFetchAdd}[pick() % 4];
    const std::uint32_t len = 1 + static_cast<std::uint32_t>(pick() % 16384);
    SendWr wr;
    wr.wr_id = id;
    wr.opcode = op;
    wr.flags = send_flags::kSignaled;
    wr.rkey = b_mem.rkey;
    switch (op) {
      case WrOpcode::RdmaWrite:
        wr.sg_list = {Sge{a_mem.base, len, a_mem.lkey}};
        wr.remote_addr = b_mem.base;
        break;
      case WrOpcode::Send:
        wr.sg_list = {Sge{a_mem.base + 16384, len, a_mem.lkey}};
        // Receive WQEs for the SENDs land in B's second 16 KiB.
        p.b.engine.post_recv(p.b.qpn, RecvWr{id, {Sge{b_mem.base + 16384, 16384, b_mem.lkey}}});
        ++sends;
        break;
      case WrOpcode::RdmaRead:
        wr.sg_list = {Sge{a_mem.base + 32768, len, a_mem.lkey}};
        wr.remote_addr = b_mem.base + 32768;
        break;
      default:
        wr.sg_list = {Sge{a_mem.base + kSize - 16, 8, a_mem.lkey}};
        wr.remote_addr = b_mem.base + kSize - 8;
        wr.compare_add = 1;
        ++adds;
        break;
    }
    posted.push_back(op);
    REQUIRE(p.a.engine.post_send(p.a.qpn, wr, p.now) == VerbResult::Ok);
  }
  int steps = 0;
  while (p.a.host.completions.size() < posted.size() && steps++ < 200000) {
    std::vector<Captured> ab = link.pass(p.a.host.take_sent());
    std::vector<Captured> ba = link.pass(p.b.host.take_sent());
    if (ab.empty() && ba.empty()) {
      if (!p.advance_to_next_deadline()) break;
      continue;
    }
    p.deliver(p.a, p.b, ab);
    p.deliver(p.b, p.a, ba);
  }
  INFO("seed " << seed << " loss " << loss);
  REQUIRE(p.a.host.completions.size() == posted.size());
  for (std::size_t i = 0; i < posted.size(); ++i) {
    INFO("WQE " << i);
    CHECK(p.a.host.completions[i].wr_id == i);
    CHECK(p.a.host.completions[i].status == WcStatus::Success);
  }
  CHECK(p.b.memory.word(b_mem, b_mem.base + kSize - 8) == static_cast<std::uint64_t>(adds));
  REQUIRE(p.b.host.completions.size() == static_cast<std::size_t>(sends));
  for (const Completion& c : p.b.host.completions) CHECK(c.status == WcStatus::Success);
  // Whatever was written, sent or read came from the right place.
  const std::span<std::uint8_t> b_bytes = p.b.memory.bytes(b_mem);
  const std::span<std::uint8_t> a_bytes = p.a.memory.bytes(a_mem);
  CHECK(std::equal(b_bytes.begin(), b_bytes.begin() + 4, a_data.begin()) == (posted_write(posted)));
  CHECK(std::equal(a_bytes.begin() + 32768, a_bytes.begin() + 32772, b_data.begin() + 32768) == posted_read(posted));
  CHECK(p.a.state() == QpState::Rts);
  CHECK(p.b.state() == QpState::Rts);
  CHECK(p.a.memory.out_of_bounds == 0);
  CHECK(p.b.memory.out_of_bounds == 0);
  return p.a.engine.counters().retransmits + p.b.engine.counters().duplicate_requests;
}

TEST_CASE("RC over a lossy, duplicating, reordering link completes everything exactly once") {
  std::uint64_t lossless = 0;
  std::uint64_t lossy = 0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    lossless += run(seed, 0.0);
    lossy += run(seed, 0.05);
    lossy += run(seed, 0.2);
  }
  CHECK(lossless == 0);  // no loss, no retransmission, no duplicate
  CHECK(lossy > 100);    // the lossy runs really went through recovery
}

// UC resynchronises on a FIRST/ONLY ahead of the expected PSN (IBA 9.8.3) and drops those
// behind it, so duplicates and late packets never deliver a message twice or out of order.
TEST_CASE("UC over a lossy, duplicating, reordering link: what completes is whole, right, in order, once") {
  std::size_t completed = 0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    Pair p(QpType::Uc);
    Lossy link{std::mt19937_64(seed), 0.03, 0.03};
    constexpr std::size_t kSlice = 16384;
    constexpr std::size_t kMessages = 40;
    const MrFacts src = p.a.memory.add(p.a.pd, access::kLocalWrite, kSlice, 0x100000);
    const MrFacts dst = p.b.memory.add(p.b.pd, access::kLocalWrite, kSlice * kMessages, 0x900000);
    for (std::uint64_t i = 0; i < kMessages; ++i)
      p.b.engine.post_recv(p.b.qpn, RecvWr{i, {Sge{dst.base + i * kSlice, kSlice, dst.lkey}}});
    std::mt19937_64 pick(seed);
    std::vector<std::uint32_t> lengths;
    for (std::uint64_t i = 0; i < kMessages; ++i) {
      // Distinct lengths, so that a completion tells which message it holds.
      const std::uint32_t len = static_cast<std::uint32_t>(1 + i + 41 * (pick() % 390));
      lengths.push_back(len);
      const std::vector<std::uint8_t> bytes = pattern(len, static_cast<std::uint8_t>(len));
      std::copy(bytes.begin(), bytes.end(), p.a.memory.bytes(src).begin());
      p.a.engine.post_send(p.a.qpn, send_wr(i, WrOpcode::Send, src, len), p.now);
      p.deliver(p.a, p.b, link.pass(p.a.host.take_sent()));
    }
    CHECK(p.a.host.completions.size() == kMessages);
    CHECK(p.b.host.sent.empty());
    std::size_t next_possible = 0;  // messages arrive in posting order, each at most once
    for (const Completion& c : p.b.host.completions) {
      REQUIRE(c.status == WcStatus::Success);
      const auto at = std::find(lengths.begin() + static_cast<std::ptrdiff_t>(next_possible), lengths.end(), c.byte_len);
      REQUIRE(at != lengths.end());
      next_possible = static_cast<std::size_t>(at - lengths.begin()) + 1;
      const std::vector<std::uint8_t> want = pattern(c.byte_len, static_cast<std::uint8_t>(c.byte_len));
      const std::uint8_t* got = p.b.memory.bytes(dst).data() + c.wr_id * kSlice;
      CHECK(std::equal(want.begin(), want.end(), got));
    }
    completed += p.b.host.completions.size();
  }
  CHECK(completed < 20 * 40);  // messages were lost...
  CHECK(completed > 20 * 40 / 4);  // ...but a lost packet costs one message, not the rest
}

}  // namespace
}  // namespace rrdma::test
