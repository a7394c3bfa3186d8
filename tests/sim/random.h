// The simulation's only source of randomness: a small PRNG whose output is the same on
// every platform and standard library, so that a seed replays a run exactly. The
// standard distributions (std::uniform_int_distribution...) are deliberately not used:
// their algorithms are left to each library implementation.
#pragma once

#include <cstdint>
#include <span>

namespace rrdma::sim {

// xoshiro256** (Blackman & Vigna, 2018), its state filled from the seed by splitmix64
// as its authors recommend, so that nearby seeds give unrelated streams.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) {
    for (auto& word : state_) word = splitmix64(seed);
  }

  std::uint64_t next() {
    const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, n) for n > 0, without modulo bias: Lemire's multiply-and-reject.
  std::uint64_t below(std::uint64_t n) {
    if (n <= 1) return 0;
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
    auto low = static_cast<std::uint64_t>(m);
    if (low < n) {
      const std::uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next()) * n;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }

  // Uniform in [lo, hi], both included.
  std::uint64_t between(std::uint64_t lo, std::uint64_t hi) { return lo + below(hi - lo + 1); }

  // True with probability per_million / 10^6.
  bool chance(std::uint32_t per_million) { return below(1'000'000) < per_million; }

  void fill(std::span<std::uint8_t> out) {
    for (auto& b : out) b = static_cast<std::uint8_t>(next() >> 56);
  }

  // Derives an independent stream, so that adding draws to one part of the simulation
  // (say, the workload) does not shift the random choices of another (the link).
  Rng fork() { return Rng(next()); }

  static std::uint64_t splitmix64(std::uint64_t& x) {
    std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t state_[4]{};
};

}  // namespace rrdma::sim
