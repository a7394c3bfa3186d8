// Which seeds a simulation test runs: RRDMA_SIM_SEED (decimal or 0x-hex) replays one run,
// RRDMA_SIM_ROUNDS says how many consecutive seeds to run from there (soak.sh raises it).
// Without RRDMA_SIM_SEED the first seed is fixed, so ctest is reproducible too.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace rrdma::sim {

inline std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  return std::strtoull(text, nullptr, 0);
}

// The seeds to run: `default_rounds` unless RRDMA_SIM_ROUNDS says otherwise. Each test
// passes its own `salt` so that two tests do not run the very same streams.
inline std::vector<std::uint64_t> seeds_to_run(std::uint64_t salt, std::uint64_t default_rounds) {
  const bool replay = std::getenv("RRDMA_SIM_SEED") != nullptr;
  const std::uint64_t first = env_number("RRDMA_SIM_SEED", 1000 + salt * 1'000'000);
  const std::uint64_t rounds = env_number("RRDMA_SIM_ROUNDS", replay ? 1 : default_rounds);
  std::vector<std::uint64_t> seeds;
  for (std::uint64_t i = 0; i < rounds; ++i) seeds.push_back(first + i);
  return seeds;
}

inline std::string replay_hint(std::uint64_t seed) {
  return "replay with RRDMA_SIM_SEED=" + std::to_string(seed) + " RRDMA_SIM_ROUNDS=1";
}

}  // namespace rrdma::sim
