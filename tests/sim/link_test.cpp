// The simulated link itself: deterministic from its seed, faithful when faults are off,
// and its faults do what they claim.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tests/sim/event_queue.h"
#include "tests/sim/link.h"
#include "tests/sim/random.h"

namespace rrdma::sim {
namespace {

Instant at_us(std::int64_t us) { return Instant{} + std::chrono::microseconds(us); }

// A frame long enough to have a BTH, its first BTH bytes numbering it.
Frame numbered_frame(std::uint32_t n, std::size_t length = 80) {
  Frame f(length, 0xA5);
  f[kBthOffsetInFrame + 0] = static_cast<std::uint8_t>(n >> 16);
  f[kBthOffsetInFrame + 1] = static_cast<std::uint8_t>(n >> 8);
  f[kBthOffsetInFrame + 2] = static_cast<std::uint8_t>(n);
  return f;
}

std::uint32_t number_of(const Frame& f) {
  return (std::uint32_t{f[kBthOffsetInFrame]} << 16) | (std::uint32_t{f[kBthOffsetInFrame + 1]} << 8) |
         f[kBthOffsetInFrame + 2];
}

std::vector<Frame> drain(Link& link) {
  std::vector<Frame> out;
  while (auto due = link.next_delivery()) {
    while (auto f = link.receive(*due)) out.push_back(std::move(*f));
  }
  return out;
}

std::vector<Frame> run(LinkFaults faults, std::uint64_t seed, std::uint32_t count) {
  Link link(faults, Rng(seed));
  for (std::uint32_t i = 0; i < count; ++i) link.send(numbered_frame(i), at_us(i));
  return drain(link);
}

TEST_CASE("Rng: the same seed gives the same stream, ranges hold", "[sim][rng]") {
  Rng a(42), b(42), c(43);
  std::vector<std::uint64_t> sa, sb, sc;
  for (int i = 0; i < 100; ++i) {
    sa.push_back(a.next());
    sb.push_back(b.next());
    sc.push_back(c.next());
  }
  CHECK(sa == sb);
  CHECK(sa != sc);
  // Known first output of xoshiro256** seeded through splitmix64 from 0: pins the algorithm,
  // so that a seed printed on one machine replays on another.
  Rng zero(0);
  std::uint64_t sm = 0;
  std::uint64_t s[4];
  for (auto& w : s) w = Rng::splitmix64(sm);
  const std::uint64_t expected = ((s[1] * 5) << 7 | (s[1] * 5) >> 57) * 9;
  CHECK(zero.next() == expected);

  Rng r(7);
  std::vector<int> hits(10, 0);
  for (int i = 0; i < 100'000; ++i) {
    auto v = r.between(3, 12);
    REQUIRE(v >= 3);
    REQUIRE(v <= 12);
    ++hits[v - 3];
  }
  for (int h : hits) CHECK(h > 9'000);  // each of ten values near 10'000
  CHECK(r.below(1) == 0);
}

TEST_CASE("EventQueue: earliest first, ties in scheduling order", "[sim]") {
  EventQueue<int> q;
  q.schedule(at_us(5), 1);
  q.schedule(at_us(3), 2);
  q.schedule(at_us(5), 3);
  q.schedule(at_us(3), 4);
  CHECK(q.next_due() == at_us(3));
  CHECK_FALSE(q.pop_due(at_us(2)).has_value());
  std::vector<int> order;
  while (auto e = q.pop_due(at_us(10))) order.push_back(*e);
  CHECK(order == std::vector<int>{2, 4, 1, 3});
}

TEST_CASE("Link without faults delivers every frame once, in order, unchanged", "[sim][link]") {
  auto out = run(LinkFaults{}, 1, 1000);
  REQUIRE(out.size() == 1000);
  for (std::uint32_t i = 0; i < out.size(); ++i) CHECK(out[i] == numbered_frame(i));
}

TEST_CASE("Link holds frames for its delay", "[sim][link]") {
  LinkFaults f;
  f.delay = std::chrono::microseconds(10);
  Link link(f, Rng(1));
  link.send(numbered_frame(0), at_us(100));
  CHECK(link.next_delivery() == at_us(110));
  CHECK_FALSE(link.receive(at_us(109)).has_value());
  CHECK(link.receive(at_us(110)).has_value());
}

TEST_CASE("Link faults: same seed, same mangling and rates near the asked ones", "[sim][link]") {
  auto faults = LinkFaults::uniform(100'000);  // 10 %
  auto first = run(faults, 99, 20'000);
  auto again = run(faults, 99, 20'000);
  CHECK(first == again);
  CHECK(first != run(faults, 100, 20'000));

  Link link(faults, Rng(5));
  for (std::uint32_t i = 0; i < 20'000; ++i) link.send(numbered_frame(i), at_us(i));
  drain(link);
  const auto& c = link.counters();
  CHECK(c.sent == 20'000);
  CHECK(c.lost > 1'600);
  CHECK(c.lost < 2'400);
  CHECK(c.duplicated > 1'400);
  CHECK(c.corrupted > 1'400);
  CHECK(c.reordered > 1'400);
  CHECK(c.delivered == c.sent - c.lost + c.duplicated);
}

TEST_CASE("Link corruption flips one bit, never in the ICRC-masked BTH byte", "[sim][link]") {
  LinkFaults f;
  f.corrupt_ppm = 1'000'000;
  Link link(f, Rng(3));
  const Frame original = numbered_frame(0x123456, 64);
  for (int i = 0; i < 2000; ++i) link.send(original, at_us(i));
  auto out = drain(link);
  REQUIRE(out.size() == 2000);
  for (const auto& got : out) {
    REQUIRE(got.size() == original.size());
    int flipped_bits = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const auto diff = static_cast<unsigned>(got[i] ^ original[i]);
      if (diff == 0) continue;
      CHECK(i >= kBthOffsetInFrame);
      CHECK(i != kBthOffsetInFrame + 4);
      flipped_bits += __builtin_popcount(diff);
    }
    CHECK(flipped_bits == 1);
  }
}

TEST_CASE("Link reordering lets later frames overtake and nothing is invented", "[sim][link]") {
  LinkFaults f;
  f.reorder_ppm = 200'000;
  auto out = run(f, 11, 5000);
  REQUIRE(out.size() == 5000);
  std::vector<std::uint32_t> numbers;
  for (const auto& fr : out) numbers.push_back(number_of(fr));
  CHECK_FALSE(std::is_sorted(numbers.begin(), numbers.end()));
  std::sort(numbers.begin(), numbers.end());
  for (std::uint32_t i = 0; i < numbers.size(); ++i) CHECK(numbers[i] == i);
}

TEST_CASE("A cut link drops everything sent from the cut on", "[sim][link]") {
  Link link(LinkFaults{}, Rng(1));
  link.cut(at_us(500));
  for (std::uint32_t i = 0; i < 1000; ++i) link.send(numbered_frame(i), at_us(i));
  auto out = drain(link);
  REQUIRE(out.size() == 500);
  CHECK(number_of(out.back()) == 499);
  CHECK(link.counters().cut == 500);
}

}  // namespace
}  // namespace rrdma::sim
