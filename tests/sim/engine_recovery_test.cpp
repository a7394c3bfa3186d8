// Recovery before the local ACK timeout (rocev2/engine/rtt.h): once a round trip has been
// measured, a QP whose packets met silence resends after the recovery timeout, spends no
// retry, and leaves the ACK timeout where it was; the estimator itself follows RFC 6298.
#include <catch2/catch.hpp>

#include "rocev2/engine/rtt.h"
#include "rocev2/engine/syndrome.h"
#include "tests/sim/engine_harness.h"

namespace rrdma::test {
namespace {

using rocev2::RttEstimator;
using namespace std::chrono_literals;

struct RecoverySetup {
  Pair pair;
  MrFacts src;
  MrFacts dst;
  RecoverySetup() {
    src = pair.a.memory.add(pair.a.pd, access::kLocalWrite, 4096, 0x10000);
    dst = pair.b.memory.add(pair.b.pd, access::kLocalWrite, 4096, 0x20000);
  }
  void send(std::uint64_t id) {
    REQUIRE(pair.b.engine.post_recv(pair.b.qpn, recv_wr(id, dst, 4096)) == VerbResult::Ok);
    REQUIRE(pair.a.engine.post_send(pair.a.qpn, send_wr(id, WrOpcode::Send, src, 100), pair.now) == VerbResult::Ok);
  }
};

}  // namespace

TEST_CASE("rtt: no recovery timeout before a round trip is measured, then srtt + 4 rttvar, at least the minimum") {
  RttEstimator rtt;
  CHECK_FALSE(rtt.recovery_timeout());
  rtt.sample(10ms);
  CHECK(*rtt.smoothed() == 10ms);
  CHECK(*rtt.recovery_timeout() == 10ms + 4 * 5ms);  // rttvar starts at half the first sample
  rtt.sample(2ms);  // srtt 7/8 x 10 + 1/8 x 2 = 9; rttvar 3/4 x 5 + 1/4 x 8 = 5.75
  CHECK(*rtt.smoothed() == 9ms);
  CHECK(*rtt.recovery_timeout() == 9ms + 4 * 5750us);
  RttEstimator fast;
  fast.sample(100us);
  CHECK(*fast.recovery_timeout() == RttEstimator::kMinRecoveryTimeout);
}

TEST_CASE("rtt: each expired recovery timeout doubles the next, up to a bound, and progress ends the backoff") {
  RttEstimator rtt;
  rtt.sample(1ms);
  const Duration base = *rtt.recovery_timeout();
  rtt.backoff();
  CHECK(*rtt.recovery_timeout() == 2 * base);
  for (std::uint32_t i = 0; i < 2 * RttEstimator::kMaxBackoffs; ++i) rtt.backoff();
  CHECK(*rtt.recovery_timeout() == base * (1u << RttEstimator::kMaxBackoffs));
  rtt.progress();
  CHECK(*rtt.recovery_timeout() == base);
}

TEST_CASE("engine: a lost packet is resent after the recovery timeout, long before the ACK timeout, and spends no retry") {
  RecoverySetup s;
  Pair& p = s.pair;
  // A first SEND and its ACK measure the round trip (no time passes in the simulation: the
  // recovery timeout is its minimum).
  s.send(1);
  p.exchange();
  const Duration ack_timeout = *rocev2::ack_timeout(14);
  REQUIRE(ack_timeout > 10 * RttEstimator::kMinRecoveryTimeout);

  s.send(2);
  const Instant sent_at = p.now;
  REQUIRE(p.a.host.take_sent().size() == 1);  // lost
  REQUIRE(p.a.engine.next_deadline());
  CHECK(*p.a.engine.next_deadline() == sent_at + RttEstimator::kMinRecoveryTimeout);

  // The resend is lost as well (what a NAKed-once responder would otherwise leave to the
  // ACK timeout): the next recovery waits twice as long.
  p.now = *p.a.engine.next_deadline();
  p.a.engine.advance(p.now);
  CHECK(p.a.engine.counters().recovery_resends == 1);
  CHECK(p.a.engine.counters().timeouts == 0);
  REQUIRE(p.a.host.take_sent().size() == 1);
  CHECK(*p.a.engine.next_deadline() == p.now + 2 * RttEstimator::kMinRecoveryTimeout);

  // The third copy arrives: the SEND completes, nothing is left due.
  p.now = *p.a.engine.next_deadline();
  p.a.engine.advance(p.now);
  CHECK(p.a.engine.counters().recovery_resends == 2);
  p.exchange();
  CHECK(p.a.engine.counters().timeouts == 0);
  CHECK_FALSE(p.a.engine.next_deadline());
  CHECK(p.now - sent_at < ack_timeout / 4);
  const auto completions = p.a.host.take_completions();
  REQUIRE_FALSE(completions.empty());
  CHECK(completions.back().wr_id == 2);
  CHECK(completions.back().status == WcStatus::Success);
}

TEST_CASE("engine: recovery resends never move the ACK timeout: a silent peer still fails the QP on time") {
  RecoverySetup s;
  Pair& p = s.pair;
  s.send(1);
  p.exchange();
  p.a.host.take_completions();
  const Duration ack_timeout = *rocev2::ack_timeout(14);

  s.send(2);
  const Instant sent_at = p.now;
  // Every copy is lost. The recoveries come first; the ACK timeout, sent_at + ack_timeout,
  // comes when it would have without them, and it alone counts a timeout.
  std::uint64_t recoveries = 0;
  while (p.a.engine.counters().timeouts == 0) {
    p.a.host.take_sent();
    REQUIRE(p.a.engine.next_deadline());
    p.now = *p.a.engine.next_deadline();
    REQUIRE(p.now <= sent_at + ack_timeout);
    p.a.engine.advance(p.now);
    recoveries = p.a.engine.counters().recovery_resends;
    REQUIRE(recoveries < 100);
  }
  CHECK(p.now == sent_at + ack_timeout);
  CHECK(recoveries >= 3);
}

}  // namespace rrdma::test
