// The MR table: keys (unique, random in their tag, an index that says nothing about other
// registrations, a generation rule on slot reuse), libibverbs' access-flag rules, bounds and
// overflow refusals, remote invalidation, per-client teardown, and the re-check ProcessDma
// relies on (dma_target).
#include <sys/wait.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cerrno>
#include <functional>
#include <cstdint>
#include <deque>
#include <set>
#include <vector>

#include "verbs/device/mr_table.h"

namespace {

using rrdma::rocev2::Lkey;
using rrdma::rocev2::MrFacts;
using rrdma::rocev2::Rkey;
using namespace rrdma::verbs;

// The access bits are libibverbs' own (Debian 12's verbs.h predates the FLUSH bits 8 and 9).
static_assert(mr_access::kLocalWrite == static_cast<std::uint32_t>(IBV_ACCESS_LOCAL_WRITE));
static_assert(mr_access::kRemoteWrite == static_cast<std::uint32_t>(IBV_ACCESS_REMOTE_WRITE));
static_assert(mr_access::kRemoteRead == static_cast<std::uint32_t>(IBV_ACCESS_REMOTE_READ));
static_assert(mr_access::kRemoteAtomic == static_cast<std::uint32_t>(IBV_ACCESS_REMOTE_ATOMIC));
static_assert(mr_access::kMwBind == static_cast<std::uint32_t>(IBV_ACCESS_MW_BIND));
static_assert(mr_access::kZeroBased == static_cast<std::uint32_t>(IBV_ACCESS_ZERO_BASED));
static_assert(mr_access::kOnDemand == static_cast<std::uint32_t>(IBV_ACCESS_ON_DEMAND));
static_assert(mr_access::kHugetlb == static_cast<std::uint32_t>(IBV_ACCESS_HUGETLB));
static_assert(mr_access::kRelaxedOrdering == static_cast<std::uint32_t>(IBV_ACCESS_RELAXED_ORDERING));
static_assert(mr_access::kOptionalRange == static_cast<std::uint32_t>(IBV_ACCESS_OPTIONAL_RANGE));

constexpr std::uint32_t kAllRemote = mr_access::kLocalWrite | mr_access::kRemoteWrite |
                                     mr_access::kRemoteRead | mr_access::kRemoteAtomic;

// The table never reads or writes through a client's memory handle (ProcessDma does): any
// number stands for one here.
constexpr int kMemory = 100;
Client self(std::uint64_t id = 1) { return Client{id, kMemory}; }

MrRequest request(std::uint64_t addr, std::uint64_t length, std::uint32_t access = kAllRemote,
                  std::uint32_t pd = 7) {
  MrRequest r;
  r.pd = pd;
  r.addr = addr;
  r.length = length;
  r.access = access;
  return r;
}

std::uint32_t index_of(std::uint32_t key) { return key >> MrTable::kTagBits; }
std::uint32_t tag_of(std::uint32_t key) { return key & ((1u << MrTable::kTagBits) - 1); }

// A random source that plays back a script, then repeats its last value.
struct ScriptedRandom {
  std::deque<std::uint64_t> script;
  std::uint64_t last = 0;
  int calls = 0;
  std::uint64_t operator()() {
    ++calls;
    if (!script.empty()) {
      last = script.front();
      script.pop_front();
    }
    return last;
  }
};

std::uint64_t tags(std::uint16_t lkey_tag, std::uint16_t rkey_tag) {
  return (std::uint64_t{rkey_tag} << 16) | lkey_tag;
}

}  // namespace

TEST_CASE("10000 registrations: every key unique, no R_Key equals an L_Key, each finds its own region") {
  MrTable table;
  std::set<std::uint32_t> lkeys;
  std::set<std::uint32_t> rkeys;
  std::vector<RegisterResult> results;
  for (std::uint64_t i = 0; i < 10000; ++i) {
    const RegisterResult r = table.register_mr(self(), request(0x10000 + i * 64, 64));
    REQUIRE(r.ok());
    results.push_back(r);
    lkeys.insert(r.lkey.value());
    rkeys.insert(r.rkey.value());
  }
  CHECK(table.size() == 10000);
  CHECK(lkeys.size() == 10000);
  CHECK(rkeys.size() == 10000);
  for (const std::uint32_t rkey : rkeys) CHECK(lkeys.count(rkey) == 0);

  for (std::size_t i = 0; i < results.size(); i += 97) {
    const std::optional<MrFacts> by_lkey = table.find_lkey(results[i].lkey);
    const std::optional<MrFacts> by_rkey = table.find_rkey(results[i].rkey);
    REQUIRE(by_lkey);
    REQUIRE(by_rkey);
    CHECK(by_lkey->base == 0x10000 + i * 64);
    CHECK(by_lkey->length == 64);
    CHECK(by_lkey->pd == 7);
    CHECK(by_lkey->access == kAllRemote);
    CHECK(by_rkey->handle == by_lkey->handle);
    CHECK(by_rkey->lkey == results[i].lkey);
    // An L_Key is no R_Key and the other way round.
    CHECK_FALSE(table.find_rkey(Rkey(results[i].lkey.value())));
    CHECK_FALSE(table.find_lkey(Lkey(results[i].rkey.value())));
  }
}

TEST_CASE("key structure: indices are not handed out in order, tags spread over all 16 bits") {
  MrTable table;
  std::vector<std::uint32_t> indices;
  std::set<std::uint32_t> rkey_tags;
  std::array<int, MrTable::kTagBits> bit_set{};
  constexpr int kCount = 10000;
  for (int i = 0; i < kCount; ++i) {
    const RegisterResult r = table.register_mr(self(), request(0x1000, 4096));
    REQUIRE(r.ok());
    indices.push_back(index_of(r.rkey.value()));
    rkey_tags.insert(tag_of(r.rkey.value()));
    for (unsigned b = 0; b < MrTable::kTagBits; ++b)
      if ((r.rkey.value() >> b) & 1u) ++bit_set[b];
  }
  // Sequential slots would make neighbouring keys predictable from one another.
  int ascending_neighbours = 0;
  for (std::size_t i = 1; i < indices.size(); ++i)
    if (indices[i] == indices[i - 1] + 1) ++ascending_neighbours;
  CHECK(ascending_neighbours < 100);  // uniform choice: about 10000 / 65535 expected
  // 10000 uniform 16-bit tags give about 9280 distinct values.
  CHECK(rkey_tags.size() > 8500);
  for (unsigned b = 0; b < MrTable::kTagBits; ++b) {
    INFO("tag bit " << b);
    CHECK(bit_set[b] > kCount * 45 / 100);
    CHECK(bit_set[b] < kCount * 55 / 100);
  }
  // Index 0 is never used: no key below 0x10000 (the default key 0 included) is valid.
  for (const std::uint32_t index : indices) CHECK(index != 0);
  CHECK_FALSE(table.find_rkey(Rkey(0)));
  CHECK_FALSE(table.find_lkey(Lkey(0)));
}

TEST_CASE("a deregistered key finds nothing, even after its slot is registered again") {
  // One slot: every registration reuses it.
  MrTable table(1);
  RegisterResult previous = table.register_mr(self(), request(0x1000, 100));
  REQUIRE(previous.ok());
  for (int round = 0; round < 2000; ++round) {
    REQUIRE(table.deregister(1, previous.lkey) == 0);
    CHECK_FALSE(table.find_lkey(previous.lkey));
    CHECK_FALSE(table.find_rkey(previous.rkey));
    const RegisterResult next = table.register_mr(self(), request(0x2000, 200));
    REQUIRE(next.ok());
    REQUIRE(index_of(next.rkey.value()) == index_of(previous.rkey.value()));
    CHECK(next.lkey != previous.lkey);
    CHECK(next.rkey != previous.rkey);
    CHECK(next.lkey.value() != previous.rkey.value());
    CHECK(next.rkey.value() != previous.lkey.value());
    CHECK_FALSE(table.find_lkey(previous.lkey));
    CHECK_FALSE(table.find_rkey(previous.rkey));
    const std::optional<MrFacts> now = table.find_rkey(next.rkey);
    REQUIRE(now);
    CHECK(now->base == 0x2000);
    previous = next;
  }
}

TEST_CASE("tags that repeat the slot's previous keys, or each other, are drawn again") {
  ScriptedRandom script;
  script.script = {
      0,                   // slot pick (one slot: any value)
      tags(0x1111, 0x2222),  // first registration
      0,                   // slot pick
      tags(0x1111, 0x3333),  // refused: the L_Key tag repeats
      tags(0x4444, 0x2222),  // refused: the R_Key tag repeats
      tags(0x2222, 0x5555),  // refused: the new L_Key would equal the old R_Key
      tags(0x6666, 0x6666),  // refused: L_Key == R_Key
      tags(0x7777, 0x8888),  // accepted
  };
  MrTable table(1, std::ref(script));
  const RegisterResult first = table.register_mr(self(), request(0x1000, 8));
  REQUIRE(first.ok());
  CHECK(tag_of(first.lkey.value()) == 0x1111);
  CHECK(tag_of(first.rkey.value()) == 0x2222);
  REQUIRE(table.deregister(1, first.lkey) == 0);
  const RegisterResult second = table.register_mr(self(), request(0x1000, 8));
  REQUIRE(second.ok());
  CHECK(tag_of(second.lkey.value()) == 0x7777);
  CHECK(tag_of(second.rkey.value()) == 0x8888);
  CHECK(script.calls == 8);
}

TEST_CASE("a random source that never yields fresh tags makes registration fail, not hang") {
  ScriptedRandom stuck;
  stuck.script = {0, tags(0x1234, 0x1234)};  // then repeats L_Key == R_Key forever
  MrTable table(4, std::ref(stuck));
  const RegisterResult r = table.register_mr(self(), request(0x1000, 8));
  CHECK(r.error == EAGAIN);
  CHECK(table.size() == 0);
  CHECK(table.registrations_of(1).empty());
  // The slot went back to the free list: a good source then fills all four.
  stuck.script = {0, tags(1, 2), 0, tags(3, 4), 0, tags(5, 6), 0, tags(7, 8)};
  for (int i = 0; i < 4; ++i) CHECK(table.register_mr(self(), request(0x1000, 8)).ok());
  CHECK(table.size() == 4);
}

TEST_CASE("access flags follow ibv_reg_mr(3)") {
  MrTable table;
  const auto error_of = [&](std::uint32_t access) {
    return table.register_mr(self(), request(0x1000, 4096, access)).error;
  };
  // Remote write and remote atomic need local write.
  CHECK(error_of(mr_access::kRemoteWrite) == EINVAL);
  CHECK(error_of(mr_access::kRemoteAtomic) == EINVAL);
  CHECK(error_of(mr_access::kRemoteWrite | mr_access::kRemoteRead) == EINVAL);
  CHECK(error_of(mr_access::kLocalWrite | mr_access::kRemoteWrite) == 0);
  CHECK(error_of(mr_access::kLocalWrite | mr_access::kRemoteAtomic) == 0);
  // Remote read alone, or nothing at all (local read only), is fine.
  CHECK(error_of(mr_access::kRemoteRead) == 0);
  CHECK(error_of(0) == 0);
  CHECK(error_of(kAllRemote | mr_access::kMwBind | mr_access::kHugetlb) == 0);
  // Optional bits (20-29) are ignored by a device that lacks them.
  CHECK(error_of(mr_access::kRelaxedOrdering) == 0);
  CHECK(error_of(1u << 29) == 0);
  // Bits nobody defined.
  CHECK(error_of(1u << 10) == EINVAL);
  CHECK(error_of(1u << 19) == EINVAL);
  CHECK(error_of(1u << 30) == EINVAL);
  CHECK(error_of(1u << 31) == EINVAL);
  // On-demand paging: every region of ours is (nothing is pinned).
  CHECK(error_of(mr_access::kOnDemand) == 0);
  CHECK(error_of(kAllRemote | mr_access::kOnDemand | mr_access::kHugetlb) == 0);
  // Defined, but not something this device does.
  // No persistent memory behind any region: FLUSH of the persistent type cannot be honoured
  // (FLUSH_GLOBAL can, IBA 1.5 A19).
  CHECK(error_of(mr_access::kLocalWrite | mr_access::kFlushPersistent) == EOPNOTSUPP);
  CHECK(error_of(mr_access::kLocalWrite | mr_access::kRemoteWrite | mr_access::kFlushGlobal) == 0);
  // The invalid combination is reported before the unsupported one.
  CHECK(error_of(mr_access::kRemoteWrite | mr_access::kFlushGlobal) == EINVAL);
  CHECK(error_of(mr_access::kRemoteWrite | mr_access::kOnDemand) == EINVAL);

  // What was accepted is what the engine sees.
  const RegisterResult r = table.register_mr(self(), request(0x1000, 4096, mr_access::kRemoteRead));
  REQUIRE(r.ok());
  CHECK(table.find_rkey(r.rkey)->access == mr_access::kRemoteRead);
}

TEST_CASE("zero length and ranges that wrap around the address space are refused") {
  MrTable table;
  CHECK(table.register_mr(self(), request(0x1000, 0)).error == EINVAL);
  CHECK(table.register_mr(self(), request(UINT64_MAX - 9, 10)).error == EINVAL);
  CHECK(table.register_mr(self(), request(UINT64_MAX, 1)).error == EINVAL);
  CHECK(table.register_mr(self(), request(1, UINT64_MAX)).error == EINVAL);
  CHECK(table.register_mr(self(), request(UINT64_MAX - 9, 9)).ok());

  MrRequest wrapping_iova = request(0x1000, 0x100);
  wrapping_iova.iova = UINT64_MAX - 0x10;
  CHECK(table.register_mr(self(), wrapping_iova).error == EINVAL);
  CHECK(table.size() == 1);
}

TEST_CASE("iova: default is the address, 0 with ZERO_BASED, or chosen (ibv_reg_mr_iova)") {
  MrTable table;
  const RegisterResult plain = table.register_mr(self(), request(0x7000'1000, 0x100));
  CHECK(table.find_rkey(plain.rkey)->base == 0x7000'1000);

  const RegisterResult zero = table.register_mr(
      self(), request(0x7000'1000, 0x100, kAllRemote | mr_access::kZeroBased));
  REQUIRE(zero.ok());
  CHECK(table.find_rkey(zero.rkey)->base == 0);

  MrRequest chosen = request(0x7000'1000, 0x100);
  chosen.iova = 0xABC0'0000;
  const RegisterResult with_iova = table.register_mr(self(), chosen);
  REQUIRE(with_iova.ok());
  CHECK(table.find_rkey(with_iova.rkey)->base == 0xABC0'0000);

  MrRequest conflicting = request(0x7000'1000, 0x100, kAllRemote | mr_access::kZeroBased);
  conflicting.iova = 0x40;
  CHECK(table.register_mr(self(), conflicting).error == EINVAL);
}

TEST_CASE("iova: the IOVA keeps the address's offset in its page, and lookups translate it") {
  MrTable table;
  MrRequest shifted = request(0x7000'1234, 0x2000);
  shifted.iova = 0x10'0000'0234;
  const RegisterResult r = table.register_mr(self(), shifted);
  REQUIRE(r.ok());
  const MrFacts facts = *table.find_lkey(r.lkey);
  CHECK(facts.base == 0x10'0000'0234);
  CHECK(facts.length == 0x2000);
  // RETH va / SGE addr are IOVAs; the process address is addr + (va - iova).
  CHECK(table.dma_target(facts, 0x10'0000'0234, 8)->address == 0x7000'1234);
  CHECK(table.dma_target(facts, 0x10'0000'1234, 0x1000)->address == 0x7000'2234);
  CHECK_FALSE(table.dma_target(facts, 0x7000'1234, 8));   // the address is not an IOVA here
  CHECK_FALSE(table.dma_target(facts, 0x10'0000'0233, 1));  // one byte before
  CHECK_FALSE(table.dma_target(facts, 0x10'0000'2234, 1));  // one byte past

  // The kernel's ib_uverbs_reg_mr: EINVAL when the IOVA's page offset differs.
  MrRequest misaligned = request(0x7000'1234, 0x100);
  misaligned.iova = 0x10'0000'0000;
  CHECK(table.register_mr(self(), misaligned).error == EINVAL);
  // An IOVA range that wraps is refused even when the address range does not.
  MrRequest wraps = request(0x7000'0000, 0x2000);
  wraps.iova = UINT64_MAX - 0xFFF;
  CHECK(table.register_mr(self(), wraps).error == EINVAL);
}

TEST_CASE("on-demand paging: explicit and implicit regions (ibv_reg_mr(3))") {
  MrTable table;
  constexpr std::uint32_t kOdp = kAllRemote | mr_access::kOnDemand;
  const RegisterResult implicit = table.register_mr(self(), request(0, UINT64_MAX, kOdp));
  REQUIRE(implicit.ok());
  const MrFacts facts = *table.find_rkey(implicit.rkey);
  CHECK(facts.base == 0);
  CHECK(facts.length == UINT64_MAX);
  // Any address of the process is its own IOVA.
  CHECK(table.dma_target(facts, 0x7fff'1234'5678, 4096)->address == 0x7fff'1234'5678);
  CHECK(table.dma_target(facts, UINT64_MAX - 8, 8));
  CHECK_FALSE(table.dma_target(facts, UINT64_MAX - 8, 9));

  // "HUGETLB ... applicable with IBV_ACCESS_ON_DEMAND in explicit mode only".
  CHECK(table.register_mr(self(), request(0, UINT64_MAX, kOdp | mr_access::kHugetlb)).error == EINVAL);
  CHECK(table.register_mr(self(), request(0, UINT64_MAX, kOdp | mr_access::kZeroBased)).error == EINVAL);
  MrRequest implicit_iova = request(0, UINT64_MAX, kOdp);
  implicit_iova.iova = 0x1000;
  CHECK(table.register_mr(self(), implicit_iova).error == EINVAL);
  CHECK(table.register_mr(self(), request(0, UINT64_MAX, kOdp | mr_access::kFlushPersistent)).error == EOPNOTSUPP);
  // Explicit ODP is an ordinary region.
  CHECK(table.register_mr(self(), request(0x1000, 4096, kOdp | mr_access::kHugetlb)).ok());
}

TEST_CASE("reregister: PD, access and translation change in place, keys stay") {
  MrTable table;
  const RegisterResult r = table.register_mr(self(1), request(0x7000'0000, 0x1000, kAllRemote, 7));
  REQUIRE(r.ok());
  ReregRequest change_pd{rereg_flags::kChangePd, 8, 0, 0, 0};
  CHECK(table.reregister(1, r.lkey, change_pd) == 0);
  CHECK(table.find_lkey(r.lkey)->pd == 8);
  CHECK(table.pd_of(1, r.lkey) == 8u);

  ReregRequest change_access{rereg_flags::kChangeAccess, 0, 0, 0, mr_access::kRemoteRead};
  CHECK(table.reregister(1, r.lkey, change_access) == 0);
  CHECK(table.find_rkey(r.rkey)->access == mr_access::kRemoteRead);

  ReregRequest move{rereg_flags::kChangeTranslation, 0, 0x9000'0000, 0x3000, 0};
  CHECK(table.reregister(1, r.lkey, move) == 0);
  const MrFacts facts = *table.find_rkey(r.rkey);
  CHECK(facts.lkey == r.lkey);
  CHECK(facts.base == 0x9000'0000);
  CHECK(facts.length == 0x3000);
  CHECK(table.dma_target(facts, 0x9000'2000, 0x1000)->address == 0x9000'2000);
  CHECK_FALSE(table.dma_target(facts, 0x7000'0000, 8));

  // Refusals leave the region as it was.
  CHECK(table.reregister(2, r.lkey, change_pd) == EINVAL);            // not the owner
  CHECK(table.reregister(1, Lkey(r.rkey.value()), change_pd) == EINVAL);  // an R_Key
  CHECK(table.reregister(1, r.lkey, {0, 0, 0, 0, 0}) == EINVAL);       // no flag
  CHECK(table.reregister(1, r.lkey, {1u << 3, 0, 0, 0, 0}) == EOPNOTSUPP);
  CHECK(table.reregister(1, r.lkey, {rereg_flags::kChangeAccess, 0, 0, 0, mr_access::kRemoteWrite}) == EINVAL);
  CHECK(table.reregister(1, r.lkey, {rereg_flags::kChangeAccess, 0, 0, 0, mr_access::kFlushPersistent}) == EOPNOTSUPP);
  CHECK(table.reregister(1, r.lkey, {rereg_flags::kChangeTranslation, 0, UINT64_MAX - 10, 0x100, 0}) == EINVAL);
  CHECK(table.reregister(1, r.lkey, {rereg_flags::kChangeTranslation, 0, 0x1000, 0, 0}) == EINVAL);
  // ZERO_BASED without a translation change would leave a non-zero IOVA.
  CHECK(table.reregister(1, r.lkey, {rereg_flags::kChangeAccess, 0, 0, 0, mr_access::kZeroBased}) == EINVAL);
  const MrFacts after = *table.find_rkey(r.rkey);
  CHECK(after.base == 0x9000'0000);
  CHECK(after.length == 0x3000);
  CHECK(after.access == mr_access::kRemoteRead);
  CHECK(after.pd == 8);

  // To an implicit ODP region and back.
  const ReregRequest implicit{rereg_flags::kChangeTranslation | rereg_flags::kChangeAccess, 0, 0, UINT64_MAX,
                              kAllRemote | mr_access::kOnDemand};
  CHECK(table.reregister(1, r.lkey, implicit) == 0);
  CHECK(table.dma_target(*table.find_lkey(r.lkey), 0x5555'0000, 8)->address == 0x5555'0000);
}

TEST_CASE("deregister: only the owner, only a live key, only once") {
  MrTable table;
  const RegisterResult mine = table.register_mr(self(1), request(0x1000, 64));
  const RegisterResult theirs = table.register_mr(self(2), request(0x2000, 64));
  REQUIRE(mine.ok());
  REQUIRE(theirs.ok());
  CHECK(table.deregister(1, theirs.lkey) == EINVAL);
  CHECK(table.find_rkey(theirs.rkey));
  // An R_Key is not what names a registration for dereg.
  CHECK(table.deregister(1, Lkey(mine.rkey.value())) == EINVAL);
  CHECK(table.deregister(1, Lkey(0)) == EINVAL);
  CHECK(table.deregister(1, Lkey(0xFFFF'FFFF)) == EINVAL);
  CHECK(table.deregister(1, mine.lkey) == 0);
  CHECK(table.deregister(1, mine.lkey) == EINVAL);
  CHECK(table.size() == 1);
}

TEST_CASE("drop_client removes everything one client had and nothing of another's") {
  MrTable table;
  std::vector<RegisterResult> first;
  std::vector<RegisterResult> second;
  for (int i = 0; i < 5; ++i) {
    first.push_back(table.register_mr(self(10), request(0x1000, 64)));
    second.push_back(table.register_mr(self(11), request(0x1000, 64)));
  }
  CHECK(table.registrations_of(10).size() == 5);
  CHECK(table.drop_client(10) == 5);
  CHECK(table.size() == 5);
  CHECK(table.registrations_of(10).empty());
  for (const RegisterResult& r : first) {
    CHECK_FALSE(table.find_lkey(r.lkey));
    CHECK_FALSE(table.find_rkey(r.rkey));
  }
  for (const RegisterResult& r : second) CHECK(table.find_rkey(r.rkey));
  CHECK(table.registrations_of(11).size() == 5);
  CHECK(table.drop_client(10) == 0);
  CHECK(table.drop_client(11) == 5);
  CHECK(table.size() == 0);
}

TEST_CASE("a client is its id and one memory handle: none, or another one later, is refused") {
  MrTable table;
  CHECK(table.register_mr(Client{5, -1}, request(0x1000, 64)).error == ESRCH);

  REQUIRE(table.register_mr(self(6), request(0x1000, 64)).ok());
  CHECK(table.register_mr(Client{6, kMemory + 1}, request(0x1000, 64)).error == EINVAL);
  CHECK(table.size() == 1);
  // Once its registrations are gone the client may come back with any handle.
  REQUIRE(table.drop_client(6) == 1);
  CHECK(table.register_mr(Client{6, kMemory + 1}, request(0x1000, 64)).ok());
}

TEST_CASE("a full table answers ENOMEM and takes registrations again once one is freed") {
  MrTable table(3);
  std::vector<RegisterResult> regs;
  for (int i = 0; i < 3; ++i) regs.push_back(table.register_mr(self(), request(0x1000, 64)));
  CHECK(table.register_mr(self(), request(0x1000, 64)).error == ENOMEM);
  REQUIRE(table.deregister(1, regs[1].lkey) == 0);
  CHECK(table.register_mr(self(), request(0x1000, 64)).ok());
}

TEST_CASE("remote invalidation: only regions that allow it, only from their PD") {
  MrTable table;
  const RegisterResult plain = table.register_mr(self(), request(0x1000, 64));
  MrRequest window = request(0x2000, 64);
  window.remote_invalidate = true;
  const RegisterResult invalidatable = table.register_mr(self(), window);
  REQUIRE(plain.ok());
  REQUIRE(invalidatable.ok());

  // ibv_reg_mr regions are never remotely invalidated.
  CHECK_FALSE(table.invalidate_rkey(plain.rkey, 7));
  CHECK(table.find_rkey(plain.rkey));
  CHECK_FALSE(table.invalidate_rkey(invalidatable.rkey, 8));
  CHECK_FALSE(table.invalidate_rkey(Rkey(invalidatable.lkey.value()), 7));
  CHECK(table.find_rkey(invalidatable.rkey));

  CHECK(table.invalidate_rkey(invalidatable.rkey, 7));
  CHECK_FALSE(table.find_rkey(invalidatable.rkey));
  CHECK_FALSE(table.find_lkey(invalidatable.lkey));
  CHECK_FALSE(table.invalidate_rkey(invalidatable.rkey, 7));
  const std::vector<MrInfo> listed = table.registrations_of(1);
  REQUIRE(listed.size() == 2);
  CHECK(std::count_if(listed.begin(), listed.end(), [](const MrInfo& m) { return !m.valid; }) == 1);
  // Still the owner's to deregister.
  CHECK(table.deregister(1, invalidatable.lkey) == 0);
}

TEST_CASE("dma_target checks the range against the table, not against the facts it is given") {
  MrTable table;
  MrRequest zero_based = request(0x5000'0000, 0x1000, kAllRemote | mr_access::kZeroBased);
  const RegisterResult r = table.register_mr(self(3), zero_based);
  REQUIRE(r.ok());
  const MrFacts facts = *table.find_rkey(r.rkey);

  const std::optional<DmaTarget> inside = table.dma_target(facts, 0x10, 8);
  REQUIRE(inside);
  CHECK(inside->memory == kMemory);
  CHECK(inside->address == 0x5000'0010);
  CHECK(table.dma_target(facts, 0xFF8, 8));
  CHECK(table.dma_target(facts, 0x1000, 0));
  CHECK_FALSE(table.dma_target(facts, 0xFF8, 9));
  CHECK_FALSE(table.dma_target(facts, 0x1000, 1));
  CHECK_FALSE(table.dma_target(facts, UINT64_MAX, 2));

  MrFacts enlarged = facts;
  enlarged.length = 0x10'0000;
  CHECK_FALSE(table.dma_target(enlarged, 0x2000, 8));
  MrFacts wrong_key = facts;
  wrong_key.rkey = Rkey(facts.rkey.value() ^ 1u);
  CHECK_FALSE(table.dma_target(wrong_key, 0x10, 8));
  MrFacts wrong_slot = facts;
  wrong_slot.handle = facts.handle == 1 ? 2 : 1;
  CHECK_FALSE(table.dma_target(wrong_slot, 0x10, 8));
  MrFacts no_slot = facts;
  no_slot.handle = 0;
  CHECK_FALSE(table.dma_target(no_slot, 0x10, 8));

  REQUIRE(table.deregister(3, r.lkey) == 0);
  CHECK_FALSE(table.dma_target(facts, 0x10, 8));
}
