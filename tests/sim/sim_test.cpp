// Two transport engines over a simulated lossy link (simulation.h says what is checked).
// Every run prints its seed when it fails; RRDMA_SIM_SEED=<seed> RRDMA_SIM_ROUNDS=1 replays
// it exactly. soak.sh runs many more seeds.
#include <catch2/catch.hpp>

#include <iostream>

#include "tests/sim/seeds.h"
#include "tests/sim/simulation.h"

namespace rrdma::sim {
namespace {

void run_and_check(SimConfig config, std::uint64_t salt, std::uint64_t rounds) {
  for (std::uint64_t seed : seeds_to_run(salt, rounds)) {
    config.seed = seed;
    const SimReport report = run_simulation(config);
    INFO(report.summary() << "\n" << replay_hint(seed));
    if (std::getenv("RRDMA_SIM_VERBOSE") != nullptr) std::cout << report.summary() << "\n";
    REQUIRE(report.ok());
  }
}

// The link's fault mix at one loss level: reordering, duplication and corruption at the
// same rate as loss, capped at 10 %, and delay with jitter.
LinkFaults faults_at(std::uint32_t loss_ppm) {
  LinkFaults f = LinkFaults::uniform(std::min<std::uint32_t>(loss_ppm, 100'000));
  f.loss_ppm = loss_ppm;
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
  for (std::uint64_t seed : seeds_to_run(5, 3)) {
    c.seed = seed;
    c.cut_after = std::chrono::microseconds(200 + seed % 7 * 150);
    const SimReport report = run_simulation(c);
    INFO(report.summary() << "\n" << replay_hint(seed));
    REQUIRE(report.ok());
    CHECK(report.rc_qps_failed == 4);
  }
}

}  // namespace
}  // namespace rrdma::sim
