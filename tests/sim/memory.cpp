#include "tests/sim/memory.h"

#include <cstring>

namespace rrdma::sim {

using rocev2::MrFacts;

namespace {
constexpr std::uint64_t kRegionAlignment = 0x1'0000;
}

SimMemory::SimMemory(std::uint64_t address_space, std::uint32_t key_salt)
    : next_base_(address_space), key_salt_(key_salt) {}

MrFacts SimMemory::register_region(std::uint32_t pd, std::uint32_t access, std::uint64_t length,
                                   bool remote_invalidate) {
  Region r;
  const auto index = static_cast<std::uint32_t>(regions_.size());
  r.facts.pd = pd;
  r.facts.access = access;
  r.facts.base = next_base_;
  r.facts.length = length;
  r.facts.handle = index;
  // Keys as verbs providers make them: an index and a varying low byte, L_Key != R_Key.
  r.facts.lkey = rocev2::Lkey((index + 1) << 8 | (key_salt_ & 0x7F));
  r.facts.rkey = rocev2::Rkey((index + 1) << 8 | (key_salt_ & 0x7F) | 0x80);
  r.bytes.assign(length, 0);
  r.remote_invalidate = remote_invalidate;
  next_base_ += (length + kRegionAlignment) / kRegionAlignment * kRegionAlignment + kRegionAlignment;
  regions_.push_back(std::move(r));
  return regions_.back().facts;
}

std::span<std::uint8_t> SimMemory::bytes(const MrFacts& mr) { return regions_.at(mr.handle).bytes; }

std::span<std::uint8_t> SimMemory::bytes(const MrFacts& mr, std::uint64_t addr, std::uint64_t length) {
  return bytes(mr).subspan(addr - mr.base, length);
}

bool SimMemory::is_valid(rocev2::Rkey key) const { return find_rkey(key).has_value(); }

std::optional<MrFacts> SimMemory::find_lkey(rocev2::Lkey key) const {
  for (const auto& r : regions_)
    if (r.facts.lkey == key) return r.facts;
  return std::nullopt;
}

std::optional<MrFacts> SimMemory::find_rkey(rocev2::Rkey key) const {
  for (const auto& r : regions_)
    if (r.valid && r.facts.rkey == key) return r.facts;
  return std::nullopt;
}

bool SimMemory::invalidate_rkey(rocev2::Rkey key, std::uint32_t pd) {
  for (auto& r : regions_) {
    if (!r.valid || r.facts.rkey != key) continue;
    if (r.facts.pd != pd || !r.remote_invalidate) return false;
    r.valid = false;
    return true;
  }
  return false;
}

SimMemory::Region* SimMemory::region_of(const MrFacts& mr) {
  if (mr.handle >= regions_.size()) return nullptr;
  return &regions_[mr.handle];
}

std::uint8_t* SimMemory::reach(const MrFacts& mr, std::uint64_t addr, std::uint64_t length, const char* what) {
  Region* r = region_of(mr);
  const bool inside = r != nullptr && addr >= r->facts.base && length <= r->facts.length &&
                      addr - r->facts.base <= r->facts.length - length;
  if (!inside) {
    violations_.push_back(std::string(what) + " outside its region at 0x" + std::to_string(addr) +
                          " length " + std::to_string(length));
    return nullptr;
  }
  return r->bytes.data() + (addr - r->facts.base);
}

bool SimMemory::read(const MrFacts& mr, std::uint64_t addr, std::span<std::uint8_t> out) {
  const std::uint8_t* p = reach(mr, addr, out.size(), "read");
  if (p == nullptr) return false;
  if (!out.empty()) std::memcpy(out.data(), p, out.size());
  return true;
}

bool SimMemory::write(const MrFacts& mr, std::uint64_t addr, std::span<const std::uint8_t> in) {
  std::uint8_t* p = reach(mr, addr, in.size(), "write");
  if (p == nullptr) return false;
  if (!in.empty()) std::memcpy(p, in.data(), in.size());
  if (++writes_ == flip_write_ && !in.empty()) p[in.size() / 2] ^= 0x10;
  return true;
}

// Atomics work on host-order 8-byte words, as a CPU's own atomics on that memory would.
std::optional<std::uint64_t> SimMemory::compare_swap(const MrFacts& mr, std::uint64_t addr,
                                                     std::uint64_t compare, std::uint64_t swap) {
  if (addr % 8 != 0) violations_.push_back("unaligned compare-swap");
  std::uint8_t* p = reach(mr, addr, 8, "compare-swap");
  if (p == nullptr) return std::nullopt;
  std::uint64_t original;
  std::memcpy(&original, p, 8);
  if (original == compare) std::memcpy(p, &swap, 8);
  return original;
}

std::optional<std::uint64_t> SimMemory::fetch_add(const MrFacts& mr, std::uint64_t addr, std::uint64_t add) {
  if (addr % 8 != 0) violations_.push_back("unaligned fetch-add");
  std::uint8_t* p = reach(mr, addr, 8, "fetch-add");
  if (p == nullptr) return std::nullopt;
  std::uint64_t original;
  std::memcpy(&original, p, 8);
  const std::uint64_t sum = original + add;
  std::memcpy(p, &sum, 8);
  return original;
}

std::uint64_t SimMemory::load_word(const MrFacts& mr, std::uint64_t addr) {
  std::uint64_t v = 0;
  std::memcpy(&v, bytes(mr, addr, 8).data(), 8);
  return v;
}

}  // namespace rrdma::sim
