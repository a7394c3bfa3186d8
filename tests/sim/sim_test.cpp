// Two transport engines over a simulated lossy link (simulation.h says what is checked).
// Every run prints its seed when it fails; RRDMA_SIM_SEED=<seed> RRDMA_SIM_ROUNDS=1 replays
// it exactly. soak.sh runs many more seeds.
#include <catch2/catch.hpp>

#include <algorithm>
#include <iostream>

#include "tests/sim/seeds.h"
#include "tests/sim/simulation.h"

namespace rrdma::sim {
namespace {

// Runs one configuration over the seeds of seeds.h. RRDMA_SIM_OPS overrides the number of
// operations per QP pair and RRDMA_SIM_QPS the number of RC pairs (UC and UD get a quarter
// as many): soak.sh makes long runs with them. RRDMA_SIM_KEEP_GOING=1 runs
// every seed even after a failure, and RRDMA_SIM_VERBOSE=1 prints one line per seed.
template <typename ExtraCheck>
void run_and_check(SimConfig config, std::uint64_t salt, std::uint64_t rounds, ExtraCheck extra) {
  const bool keep_going = std::getenv("RRDMA_SIM_KEEP_GOING") != nullptr;
  const bool verbose = std::getenv("RRDMA_SIM_VERBOSE") != nullptr;
  if (ExtraCheck::kScalable) {
    config.ops_per_pair = static_cast<int>(env_number("RRDMA_SIM_OPS", static_cast<std::uint64_t>(config.ops_per_pair)));
    if (const auto rc = static_cast<int>(env_number("RRDMA_SIM_QPS", 0)); rc > 0) {
      config.rc_pairs = rc;
      config.uc_pairs = config.ud_pairs = std::max(1, rc / 4);
    }
  }
  for (std::uint64_t seed : seeds_to_run(salt, rounds)) {
    config.seed = seed;
    const SimReport report = extra.prepare(config);
    INFO(report.summary() << "\n" << replay_hint(seed));
    if (verbose) std::cout << Catch::getResultCapture().getCurrentTestName() << ": " << report.summary() << "\n";
    const bool ok = report.ok() && extra.check(report);
    if (keep_going) {
      CHECK(ok);
    } else {
      REQUIRE(ok);
    }
  }
}

struct PlainRun {
  static constexpr bool kScalable = true;
  SimReport prepare(const SimConfig& c) const { return run_simulation(c); }
  bool check(const SimReport&) const { return true; }
};

void run_and_check(SimConfig config, std::uint64_t salt, std::uint64_t rounds) {
  run_and_check(config, salt, rounds, PlainRun{});
}

// The link's fault mix at one loss level: loss at that rate, reordering and duplication at
// half of it, corruption (single bit flips the ICRC catches) at a quarter, truncation at a
// twentieth, and delay with jitter.
LinkFaults faults_at(std::uint32_t loss_ppm) {
  LinkFaults f = LinkFaults::uniform(loss_ppm / 2);
  f.loss_ppm = loss_ppm;
  f.corrupt_ppm = loss_ppm / 4;
  f.truncate_ppm = loss_ppm / 20;
  return f;
}

TEST_CASE("sim: all operations over a perfect link", "[sim]") {
  SimConfig c;
  c.faults = faults_at(0);
  run_and_check(c, 1, 3);
}

TEST_CASE("sim: all operations at 1% loss, reorder, duplication, corruption", "[sim]") {
  SimConfig c;
  c.faults = faults_at(10'000);
  run_and_check(c, 2, 3);
}

TEST_CASE("sim: all operations at 10% loss, reorder, duplication, corruption", "[sim]") {
  SimConfig c;
  c.faults = faults_at(100'000);
  // Eight timeouts in a row without progress: about 1e-5 per stall at this level, so a
  // long soak meets it; the error path is then what gets checked.
  c.allow_retry_exceeded = true;
  run_and_check(c, 3, 3);
}

TEST_CASE("sim: all operations at 30% loss, reorder, duplication, corruption", "[sim]") {
  SimConfig c;
  c.faults = faults_at(300'000);
  // Eight timeouts in a row without progress are likely somewhere at this level: an RC QP
  // may end in retry-exceeded, and then its error path is what gets checked.
  c.allow_retry_exceeded = true;
  c.ops_per_pair = 25;
  run_and_check(c, 4, 2);
}

TEST_CASE("sim: held ACKs (released per batch, as in the daemon) at 0% and 10% loss", "[sim]") {
  SimConfig c;
  c.hold_acks = true;
  SECTION("perfect link") {
    c.faults = faults_at(0);
    run_and_check(c, 10, 3);
  }
  SECTION("10% loss, reorder, duplication, corruption") {
    c.faults = faults_at(100'000);
    c.allow_retry_exceeded = true;
    run_and_check(c, 11, 3);
  }
}

// The peer vanishes at a time that depends on the seed.
struct CutRun {
  static constexpr bool kScalable = false;   // the QPs must not run out of work
  SimReport prepare(SimConfig run) const {
    run.cut_after = std::chrono::microseconds(200 + run.seed % 7 * 150);
    return run_simulation(run);
  }
  // Every QP had work outstanding when the peer vanished.
  bool check(const SimReport& r) const { return r.rc_qps_failed == r.rc_flows; }
};

TEST_CASE("sim: a vanished peer ends RC QPs in retry-exceeded, flushed, not hung", "[sim]") {
  SimConfig c;
  c.faults = faults_at(10'000);
  c.rc_pairs = 4;
  c.uc_pairs = 0;
  c.ud_pairs = 0;
  c.ops_per_pair = 5000;   // never runs out of work before the cut
  c.allow_retry_exceeded = true;
  c.ack_timeout = 6;
  c.retry_cnt = 3;
  run_and_check(c, 5, 3, CutRun{});
}

// The receivers stall: after 300 us no receive is ever posted again.
struct StalledReceiverRun {
  static constexpr bool kScalable = false;
  SimReport prepare(const SimConfig& run) const { return run_simulation(run); }
  // Every QP met a SEND with no receive posted, RNR-NAKed until its rnr_retry ran out.
  bool check(const SimReport& r) const { return r.rc_qps_rnr_failed == r.rc_flows; }
};

TEST_CASE("sim: a receiver that stops posting receives ends RC QPs in RNR-retry-exceeded", "[sim]") {
  SimConfig c;
  c.faults = faults_at(10'000);
  c.rc_pairs = 4;
  c.uc_pairs = 0;
  c.ud_pairs = 0;
  c.ops_per_pair = 5000;
  c.rnr_retry = 2;
  // One way only: over a QP pair used both ways, the first QP to give up takes the other
  // direction down by retry-exceeded, not RNR.
  c.both_ways = false;
  c.stop_receives_after = std::chrono::microseconds(300);
  run_and_check(c, 8, 3, StalledReceiverRun{});
}

// Some QP met its bad R_Key (each of the four meets one with high probability).
struct AccessRun {
  static constexpr bool kScalable = true;
  SimReport prepare(const SimConfig& run) const { return run_simulation(run); }
  bool check(const SimReport& r) const { return r.rc_qps_access_failed > 0; }
};

TEST_CASE("sim: a bad R_Key ends its QP with a remote access error, the rest flushed", "[sim]") {
  SimConfig c;
  c.faults = faults_at(10'000);
  c.uc_pairs = 0;
  c.ud_pairs = 0;
  c.ops_per_pair = 60;
  c.bad_rkey_one_in = 25;
  // One way only: a QP that refuses a bad R_Key may go to ERR as responder too, which on a
  // pair used both ways would end the other direction by retry-exceeded.
  c.both_ways = false;
  run_and_check(c, 9, 3, AccessRun{});
}

TEST_CASE("sim: the same seed replays the same run", "[sim][meta]") {
  SimConfig c;
  c.faults = faults_at(100'000);
  c.allow_retry_exceeded = true;
  for (std::uint64_t seed : seeds_to_run(6, 2)) {
    c.seed = seed;
    const SimReport first = run_simulation(c);
    const SimReport again = run_simulation(c);
    INFO(first.summary() << "\n" << again.summary());
    CHECK(first.steps == again.steps);
    CHECK(first.frames == again.frames);
    CHECK(first.frames_dropped_bad == again.frames_dropped_bad);
    CHECK(first.retransmits == again.retransmits);
    CHECK(first.simulated == again.simulated);
    CHECK(first.summary() == again.summary());
    c.seed = seed + 1'000'000'000;
    CHECK(run_simulation(c).summary() != first.summary());
  }
}

// The checks themselves: each deliberate fault in the harness must be caught.
TEST_CASE("sim: the checks catch a flipped DMA write, an unchecked ICRC, a lost completion", "[sim][meta]") {
  SimConfig c;
  c.faults = faults_at(100'000);
  c.allow_retry_exceeded = true;
  for (Sabotage s : {Sabotage::FlipDmaWrite, Sabotage::AcceptBadIcrc, Sabotage::LoseCompletion}) {
    c.sabotage = s;
    for (std::uint64_t seed : seeds_to_run(7, 3)) {
      c.seed = seed;
      INFO("sabotage " << static_cast<int>(s) << ", " << replay_hint(seed));
      CHECK_FALSE(run_simulation(c).ok());
    }
  }
}

}  // namespace
}  // namespace rrdma::sim
