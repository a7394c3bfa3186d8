// Registered memory for the simulation: plain byte buffers behind the engine's MrTable and
// Dma interfaces. Each region gets a virtual base address of its own (so that an address
// from one region is never valid in another), an L_Key, an R_Key and access flags.
//
// The Dma side checks bounds again even though the engine promised to: an access the
// engine should have refused is recorded as a violation, which the tests assert is zero.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "rocev2/engine/ports.h"

namespace rrdma::sim {

class SimMemory final : public rocev2::MrTable, public rocev2::Dma {
 public:
  // `address_space` separates the virtual addresses of the two nodes' memories.
  explicit SimMemory(std::uint64_t address_space, std::uint32_t key_salt);

  rocev2::MrFacts register_region(std::uint32_t pd, std::uint32_t access, std::uint64_t length,
                                  bool remote_invalidate = false);
  // The bytes of a registered region, for the test to fill and inspect.
  std::span<std::uint8_t> bytes(const rocev2::MrFacts& mr);
  std::span<std::uint8_t> bytes(const rocev2::MrFacts& mr, std::uint64_t addr, std::uint64_t length);
  bool is_valid(rocev2::Rkey key) const;

  // MrTable
  std::optional<rocev2::MrFacts> find_lkey(rocev2::Lkey key) const override;
  std::optional<rocev2::MrFacts> find_rkey(rocev2::Rkey key) const override;
  bool invalidate_rkey(rocev2::Rkey key, std::uint32_t pd) override;

  // Dma
  bool read(const rocev2::MrFacts& mr, std::uint64_t addr, std::span<std::uint8_t> out) override;
  bool write(const rocev2::MrFacts& mr, std::uint64_t addr, std::span<const std::uint8_t> in) override;
  std::optional<std::uint64_t> compare_swap(const rocev2::MrFacts& mr, std::uint64_t addr,
                                            std::uint64_t compare, std::uint64_t swap) override;
  std::optional<std::uint64_t> fetch_add(const rocev2::MrFacts& mr, std::uint64_t addr,
                                         std::uint64_t add) override;

  // Accesses the engine let through that fall outside their region (must stay empty).
  const std::vector<std::string>& violations() const { return violations_; }
  std::uint64_t load_word(const rocev2::MrFacts& mr, std::uint64_t addr);
  // Sabotage for the tests of the checks: the n-th write (from 1) lands with one bit flipped.
  void flip_bit_of_write(std::uint64_t n) { flip_write_ = n; }

 private:
  struct Region {
    rocev2::MrFacts facts;
    std::vector<std::uint8_t> bytes;
    bool valid = true;
    bool remote_invalidate = false;
  };
  Region* region_of(const rocev2::MrFacts& mr);
  std::uint8_t* reach(const rocev2::MrFacts& mr, std::uint64_t addr, std::uint64_t length, const char* what);

  std::uint64_t next_base_;
  std::uint32_t key_salt_;
  std::vector<Region> regions_;
  std::vector<std::string> violations_;
  std::uint64_t writes_ = 0;
  std::uint64_t flip_write_ = 0;
};

}  // namespace rrdma::sim
