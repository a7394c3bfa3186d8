#include "verbs/device/mr_table.h"

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <system_error>
#include <utility>

namespace rrdma::verbs {

using rocev2::Lkey;
using rocev2::MrFacts;
using rocev2::Rkey;

namespace {

constexpr std::uint32_t kTagMask = (1u << MrTable::kTagBits) - 1;
constexpr std::uint32_t kKnownAccess = mr_access::kLocalWrite | mr_access::kRemoteWrite |
                                       mr_access::kRemoteRead | mr_access::kRemoteAtomic |
                                       mr_access::kMwBind | mr_access::kZeroBased |
                                       mr_access::kOnDemand | mr_access::kHugetlb |
                                       mr_access::kFlushGlobal | mr_access::kFlushPersistent |
                                       mr_access::kOptionalRange;
// The engine has no on-demand paging contract and no FLUSH (IBA 1.5) operation: a device
// without them refuses these bits rather than pretend (the kernel's ib_check_mr_access
// answers EOPNOTSUPP for ODP on such a device).
constexpr std::uint32_t kUnsupportedAccess =
    mr_access::kOnDemand | mr_access::kFlushGlobal | mr_access::kFlushPersistent;
// Tags that collide are drawn again; a source that keeps colliding is broken, not unlucky
// (the odds of 16 collisions in a row are below 2^-180).
constexpr int kMaxTagDraws = 16;

constexpr std::uint32_t make_key(std::uint32_t index, std::uint16_t tag) {
  return (index << MrTable::kTagBits) | tag;
}

bool overflows(std::uint64_t start, std::uint64_t length) { return start > UINT64_MAX - length; }

}  // namespace

std::uint64_t MrTable::system_random() {
  std::array<std::uint8_t, 8> bytes{};
  std::size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = getrandom(bytes.data() + got, bytes.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    // Without a random source keys would be guessable: refuse to carry on.
    if (n < 0) throw std::system_error(errno, std::generic_category(), "getrandom");
    got += static_cast<std::size_t>(n);
  }
  std::uint64_t value = 0;
  for (const std::uint8_t b : bytes) value = (value << 8) | b;
  return value;
}

MrTable::MrTable(std::size_t capacity, RandomSource random)
    : random_(std::move(random)), slots_(std::min(capacity, kMaxRegions) + 1) {
  free_.reserve(slots_.size() - 1);
  for (std::uint32_t i = 1; i < slots_.size(); ++i) free_.push_back(i);
}

MrTable::~MrTable() = default;

// ibv_reg_mr(3): remote write or remote atomic access requires local write; unknown bits
// outside the optional range are invalid (the kernel's ib_check_mr_access does the same).
int MrTable::check_request(const MrRequest& request) const {
  const std::uint32_t access = request.access;
  if ((access & ~kKnownAccess) != 0) return EINVAL;
  if ((access & (mr_access::kRemoteWrite | mr_access::kRemoteAtomic)) != 0 &&
      (access & mr_access::kLocalWrite) == 0)
    return EINVAL;
  if ((access & kUnsupportedAccess) != 0) return EOPNOTSUPP;
  if (request.length == 0 || overflows(request.addr, request.length)) return EINVAL;
  if (request.iova) {
    if ((access & mr_access::kZeroBased) != 0 && *request.iova != 0) return EINVAL;
    if (overflows(*request.iova, request.length)) return EINVAL;
  }
  return 0;
}

// A client keeps the memory handle of its first registration: one connection, one address
// space.
int MrTable::attach_client(const Client& client) {
  auto it = clients_.find(client.id);
  if (it != clients_.end()) return it->second.memory == client.memory ? 0 : EINVAL;
  if (client.memory < 0) return ESRCH;
  clients_.emplace(client.id, ClientRecord{client.memory, 0});
  return 0;
}

void MrTable::release_client(std::uint64_t client_id) {
  auto it = clients_.find(client_id);
  if (it == clients_.end() || it->second.registrations > 0) return;
  clients_.erase(it);
}

// A uniformly chosen free slot, so that an index says nothing about the indices of other
// registrations (sequential indices would let one R_Key point at its neighbours).
std::optional<std::uint32_t> MrTable::take_free_slot() {
  if (free_.empty()) return std::nullopt;
  const std::uint64_t pick = random_() % free_.size();
  const std::uint32_t index = free_[pick];
  free_[pick] = free_.back();
  free_.pop_back();
  return index;
}

// New tags: L_Key and R_Key differ, and neither equals a key the slot had before, so that a
// key kept after ibv_dereg_mr never matches the slot's next registration (the generation
// rule; rxe does the same with 8 random bits, rxe_get_next_key).
bool MrTable::draw_tags(Slot& slot) {
  for (int attempt = 0; attempt < kMaxTagDraws; ++attempt) {
    const std::uint64_t r = random_();
    const auto lkey_tag = static_cast<std::uint16_t>(r & kTagMask);
    const auto rkey_tag = static_cast<std::uint16_t>((r >> kTagBits) & kTagMask);
    const bool fresh = lkey_tag != rkey_tag && lkey_tag != slot.lkey_tag &&
                       lkey_tag != slot.rkey_tag && rkey_tag != slot.lkey_tag &&
                       rkey_tag != slot.rkey_tag;
    if (!fresh) continue;
    slot.lkey_tag = lkey_tag;
    slot.rkey_tag = rkey_tag;
    return true;
  }
  return false;
}

RegisterResult MrTable::register_mr(const Client& client, const MrRequest& request) {
  if (const int error = check_request(request); error != 0) return {error};
  if (free_.empty()) return {ENOMEM};
  if (const int error = attach_client(client); error != 0) return {error};
  const std::uint32_t index = *take_free_slot();
  Slot& slot = slots_[index];
  if (!draw_tags(slot)) {
    free_.push_back(index);
    release_client(client.id);
    return {EAGAIN};
  }
  const bool zero_based = (request.access & mr_access::kZeroBased) != 0;
  slot.in_use = true;
  slot.valid = true;
  slot.remote_invalidate = request.remote_invalidate;
  slot.client_id = client.id;
  slot.pd = request.pd;
  slot.access = request.access;
  slot.addr = request.addr;
  slot.iova = request.iova.value_or(zero_based ? 0 : request.addr);
  slot.length = request.length;
  ++clients_[client.id].registrations;
  ++live_;
  return {0, Lkey(make_key(index, slot.lkey_tag)), Rkey(make_key(index, slot.rkey_tag))};
}

void MrTable::free_slot(std::uint32_t index) {
  Slot& slot = slots_[index];
  const std::uint64_t client_id = slot.client_id;
  // Keep the tags: the next registration in this slot must not reuse them.
  slot = Slot{.lkey_tag = slot.lkey_tag, .rkey_tag = slot.rkey_tag};
  free_.push_back(index);
  --live_;
  --clients_[client_id].registrations;
  release_client(client_id);
}

int MrTable::deregister(std::uint64_t client_id, Lkey lkey) {
  const Slot* slot = slot_for(lkey.value());
  if (slot == nullptr || slot->client_id != client_id ||
      make_key(lkey.value() >> kTagBits, slot->lkey_tag) != lkey.value())
    return EINVAL;
  free_slot(lkey.value() >> kTagBits);
  return 0;
}

std::size_t MrTable::drop_client(std::uint64_t client_id) {
  std::size_t removed = 0;
  for (std::uint32_t i = 1; i < slots_.size(); ++i) {
    if (!slots_[i].in_use || slots_[i].client_id != client_id) continue;
    free_slot(i);
    ++removed;
  }
  return removed;
}

std::vector<MrInfo> MrTable::registrations_of(std::uint64_t client_id) const {
  std::vector<MrInfo> out;
  for (std::uint32_t i = 1; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.in_use && s.client_id == client_id) out.push_back({client_id, s.addr, s.valid, facts_of(i)});
  }
  return out;
}

// The slot a key's index names, if that slot holds a registration (valid or invalidated).
const MrTable::Slot* MrTable::slot_for(std::uint32_t key) const {
  const std::uint32_t index = key >> kTagBits;
  if (index == 0 || index >= slots_.size() || !slots_[index].in_use) return nullptr;
  return &slots_[index];
}

MrFacts MrTable::facts_of(std::uint32_t index) const {
  const Slot& s = slots_[index];
  MrFacts f;
  f.pd = s.pd;
  f.access = s.access;
  f.base = s.iova;
  f.length = s.length;
  f.handle = index;
  f.lkey = Lkey(make_key(index, s.lkey_tag));
  f.rkey = Rkey(make_key(index, s.rkey_tag));
  return f;
}

std::optional<MrFacts> MrTable::find_lkey(Lkey key) const {
  const Slot* slot = slot_for(key.value());
  if (slot == nullptr || !slot->valid || (key.value() & kTagMask) != slot->lkey_tag) return std::nullopt;
  return facts_of(key.value() >> kTagBits);
}

std::optional<MrFacts> MrTable::find_rkey(Rkey key) const {
  const Slot* slot = slot_for(key.value());
  if (slot == nullptr || !slot->valid || (key.value() & kTagMask) != slot->rkey_tag) return std::nullopt;
  return facts_of(key.value() >> kTagBits);
}

// IBA ch. 10 (SEND with Invalidate): the key must exist, be valid, belong to the QP's PD and
// be of a kind that may be remotely invalidated. Afterwards neither key finds the region;
// the owner still deregisters it.
bool MrTable::invalidate_rkey(Rkey key, std::uint32_t pd) {
  const Slot* found = slot_for(key.value());
  if (found == nullptr || !found->valid || (key.value() & kTagMask) != found->rkey_tag) return false;
  Slot& slot = slots_[key.value() >> kTagBits];
  if (slot.pd != pd || !slot.remote_invalidate) return false;
  slot.valid = false;
  return true;
}

std::optional<DmaTarget> MrTable::dma_target(const MrFacts& mr, std::uint64_t addr,
                                             std::uint64_t length) const {
  if (mr.handle == 0 || mr.handle >= slots_.size()) return std::nullopt;
  const auto index = static_cast<std::uint32_t>(mr.handle);
  const Slot& s = slots_[index];
  if (!s.valid || mr.lkey.value() != make_key(index, s.lkey_tag) ||
      mr.rkey.value() != make_key(index, s.rkey_tag))
    return std::nullopt;
  if (addr < s.iova) return std::nullopt;
  const std::uint64_t offset = addr - s.iova;
  if (offset > s.length || length > s.length - offset) return std::nullopt;
  const auto client = clients_.find(s.client_id);
  if (client == clients_.end()) return std::nullopt;
  return DmaTarget{client->second.memory, s.addr + offset};
}

}  // namespace rrdma::verbs
