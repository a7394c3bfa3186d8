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
// No persistent memory stands behind any region: a FLUSH of the persistent placement type
// could not be honoured, so the bit is refused rather than pretended (the kernel's
// ib_check_mr_access answers EOPNOTSUPP for a FLUSH bit whose device capability is not
// offered). ON_DEMAND is accepted: registration never pins nor touches memory, the daemon's
// DMA faults pages in as it goes, so every region is "on demand" already
// (docs/VERBS_MEMORY.md).
constexpr std::uint32_t kUnsupportedAccess = mr_access::kFlushPersistent;
// The kernel's ib_uverbs_reg_mr refuses an IOVA whose offset in its page differs from the
// address's (EINVAL): the device translates whole pages.
constexpr std::uint64_t kPageMask = 4096 - 1;
// Tags that collide are drawn again; a source that keeps colliding is broken, not unlucky
// (the odds of 16 collisions in a row are below 2^-180).
constexpr int kMaxTagDraws = 16;

constexpr std::uint32_t make_key(std::uint32_t index, std::uint16_t tag) {
  return (index << MrTable::kTagBits) | tag;
}

bool overflows(std::uint64_t start, std::uint64_t length) { return start > UINT64_MAX - length; }

// ibv_reg_mr(3): "To create an implicit ODP MR, IBV_ACCESS_ON_DEMAND should be set, addr
// should be 0 and length should be SIZE_MAX": one region over the whole address space.
bool implicit_odp(const MrRequest& request) {
  return (request.access & mr_access::kOnDemand) != 0 && request.addr == 0 && request.length == UINT64_MAX;
}

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
// An implicit ODP region is known by its own addresses (iova 0 = address 0), and HUGETLB
// applies "with IBV_ACCESS_ON_DEMAND in explicit mode only" (ibv_reg_mr(3)).
int MrTable::check_request(const MrRequest& request) {
  const std::uint32_t access = request.access;
  if ((access & ~kKnownAccess) != 0) return EINVAL;
  if ((access & (mr_access::kRemoteWrite | mr_access::kRemoteAtomic)) != 0 &&
      (access & mr_access::kLocalWrite) == 0)
    return EINVAL;
  if ((access & kUnsupportedAccess) != 0) return EOPNOTSUPP;
  if (request.length == 0 || overflows(request.addr, request.length)) return EINVAL;
  if (implicit_odp(request)) {
    if ((access & (mr_access::kHugetlb | mr_access::kZeroBased)) != 0) return EINVAL;
    if (request.iova.value_or(0) != 0) return EINVAL;
  }
  if (request.iova) {
    if ((access & mr_access::kZeroBased) != 0 && *request.iova != 0) return EINVAL;
    if (overflows(*request.iova, request.length)) return EINVAL;
    if ((access & mr_access::kZeroBased) == 0 && (*request.iova & kPageMask) != (request.addr & kPageMask))
      return EINVAL;
  }
  return 0;
}

// A client keeps the memory handle of its first registration: one connection, one address
// space.
int MrTable::attach_client(const Client& client) {
  auto it = clients_.find(client.id);
  if (it != clients_.end()) return it->second.memory == client.memory ? 0 : EINVAL;
  if (client.memory < 0) return ESRCH;
  clients_.emplace(client.id, ClientRecord{client.memory, client.layout, 0});
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
// rule; rxe does the same with 8 random bits, rxe_get_next_key). A window's consumer owns the
// low byte of its R_Key (ibv_inc_rkey, IBA 10.6.7), so where a window was or will be only the
// high byte is the slot's to vary: it must differ from the high bytes the slot had.
bool MrTable::draw_tags(Slot& slot, bool window) {
  const auto high = [](std::uint16_t tag) { return tag >> 8; };
  const bool by_high_byte = window || slot.was_window;
  for (int attempt = 0; attempt < kMaxTagDraws; ++attempt) {
    const std::uint64_t r = random_();
    auto lkey_tag = static_cast<std::uint16_t>(r & kTagMask);
    auto rkey_tag = static_cast<std::uint16_t>((r >> kTagBits) & kTagMask);
    if (window) lkey_tag = rkey_tag;  // a window has no L_Key
    const auto unlike_old = [&](std::uint16_t tag) {
      if (by_high_byte) return high(tag) != high(slot.lkey_tag) && high(tag) != high(slot.rkey_tag);
      return tag != slot.lkey_tag && tag != slot.rkey_tag;
    };
    const bool fresh = (window || lkey_tag != rkey_tag) && unlike_old(lkey_tag) && unlike_old(rkey_tag);
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
  if (!draw_tags(slot, false)) {
    free_.push_back(index);
    release_client(client.id);
    return {EAGAIN};
  }
  slot.kind = Kind::Region;
  slot.windows = 0;
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
  if (slot.kind == Kind::Window) unbind(slot);
  // Keep the tags: the next registration in this slot must not reuse them.
  slot = Slot{.was_window = slot.kind == Kind::Window, .lkey_tag = slot.lkey_tag, .rkey_tag = slot.rkey_tag};
  free_.push_back(index);
  --live_;
  --clients_[client_id].registrations;
  release_client(client_id);
}

MrTable::Slot* MrTable::own_slot(std::uint64_t client_id, Lkey lkey) {
  const Slot* slot = slot_for(lkey.value());
  if (slot == nullptr || slot->kind != Kind::Region || slot->client_id != client_id ||
      make_key(lkey.value() >> kTagBits, slot->lkey_tag) != lkey.value())
    return nullptr;
  return &slots_[lkey.value() >> kTagBits];
}

int MrTable::deregister(std::uint64_t client_id, Lkey lkey) {
  const Slot* slot = own_slot(client_id, lkey);
  if (slot == nullptr || slot->windows > 0) return EINVAL;
  free_slot(lkey.value() >> kTagBits);
  return 0;
}

std::optional<std::uint32_t> MrTable::pd_of(std::uint64_t client_id, Lkey lkey) const {
  const Slot* slot = slot_for(lkey.value());
  if (slot == nullptr || slot->kind != Kind::Region || slot->client_id != client_id ||
      (lkey.value() & kTagMask) != slot->lkey_tag)
    return std::nullopt;
  return slot->pd;
}

// The registration as it would be after the call is checked as a new one would be, so a
// rereg can reach nothing reg_mr refuses. A translation change gives the region its new
// address as iova (ibv_rereg_mr(3) has no iova argument; rdma-core sends addr as hca_va).
int MrTable::reregister(std::uint64_t client_id, Lkey lkey, const ReregRequest& request) {
  Slot* slot = own_slot(client_id, lkey);
  // Windows bound to the region were checked against its PD, access and range: it stays as it
  // is while they stand.
  if (slot == nullptr || slot->windows > 0) return EINVAL;
  // The kernel's ib_uverbs_rereg_mr refuses a call that changes nothing (EINVAL).
  if (request.flags == 0) return EINVAL;
  if ((request.flags & ~rereg_flags::kAll) != 0) return EOPNOTSUPP;
  MrRequest after{.pd = slot->pd, .addr = slot->addr, .length = slot->length, .access = slot->access,
                  .iova = slot->iova};
  if ((request.flags & rereg_flags::kChangePd) != 0) after.pd = request.pd;
  if ((request.flags & rereg_flags::kChangeAccess) != 0) after.access = request.access;
  const bool zero_based = (after.access & mr_access::kZeroBased) != 0;
  if ((request.flags & rereg_flags::kChangeTranslation) != 0) {
    after.addr = request.addr;
    after.length = request.length;
    after.iova = zero_based ? 0 : request.addr;
  }
  if (const int error = check_request(after); error != 0) return error;
  slot->pd = after.pd;
  slot->access = after.access;
  slot->addr = after.addr;
  slot->length = after.length;
  slot->iova = *after.iova;
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
    if (s.in_use && s.kind == Kind::Region && s.client_id == client_id) out.push_back({client_id, s.addr, s.valid, facts_of(i)});
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
  f.lkey = s.kind == Kind::Region ? Lkey(make_key(index, s.lkey_tag)) : Lkey{};
  f.rkey = Rkey(make_key(index, s.rkey_tag));
  if (s.kind == Kind::Window && s.zero_based) f.base = 0;
  f.bound_qp = s.bound_qp;
  return f;
}

std::optional<MrFacts> MrTable::find_lkey(Lkey key) const {
  const Slot* slot = slot_for(key.value());
  if (slot == nullptr || slot->kind != Kind::Region || !slot->valid || (key.value() & kTagMask) != slot->lkey_tag)
    return std::nullopt;
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
  if (slot.kind == Kind::Window) return invalidate_local(key, pd);
  if (slot.pd != pd || !slot.remote_invalidate) return false;
  slot.valid = false;
  return true;
}

std::optional<DmaTarget> MrTable::dma_target(const MrFacts& mr, std::uint64_t addr,
                                             std::uint64_t length) const {
  if (mr.handle == 0 || mr.handle >= slots_.size()) return std::nullopt;
  const auto index = static_cast<std::uint32_t>(mr.handle);
  const Slot& s = slots_[index];
  if (s.kind == Kind::Window) {
    if (!s.valid || mr.rkey.value() != make_key(index, s.rkey_tag)) return std::nullopt;
    return window_target(s, addr, length);
  }
  if (!s.valid || mr.lkey.value() != make_key(index, s.lkey_tag) ||
      mr.rkey.value() != make_key(index, s.rkey_tag))
    return std::nullopt;
  if (addr < s.iova) return std::nullopt;
  const std::uint64_t offset = addr - s.iova;
  if (offset > s.length || length > s.length - offset) return std::nullopt;
  const auto client = clients_.find(s.client_id);
  if (client == clients_.end()) return std::nullopt;
  return DmaTarget{client->second.memory, s.addr + offset, client->second.layout};
}

// ------------------------------------------------------------------ memory windows

namespace {

// The rights a window may be bound with: rxe's RXE_ACCESS_SUPPORTED_MW without the bits that
// mean nothing for a window (MW_BIND, ON_DEMAND, HUGETLB: properties of a region's memory).
constexpr std::uint32_t kWindowAccess = mr_access::kLocalWrite | mr_access::kRemoteWrite |
                                        mr_access::kRemoteRead | mr_access::kRemoteAtomic |
                                        mr_access::kZeroBased;
constexpr std::uint32_t kConsumerKeyMask = 0xFF;  // IBA 10.6.7: the consumer-owned key portion

}  // namespace

AllocMwResult MrTable::alloc_mw(const Client& client, std::uint32_t pd, int type) {
  if (type != 1 && type != 2) return {EINVAL};
  if (free_.empty()) return {ENOMEM};
  if (const int error = attach_client(client); error != 0) return {error};
  const std::uint32_t index = *take_free_slot();
  Slot& slot = slots_[index];
  if (!draw_tags(slot, true)) {
    free_.push_back(index);
    release_client(client.id);
    return {EAGAIN};
  }
  slot.in_use = true;
  slot.kind = Kind::Window;
  slot.mw_type = static_cast<std::uint8_t>(type);
  slot.client_id = client.id;
  slot.pd = pd;
  slot.valid = false;  // type 1: valid but of length 0, which no access matches (rxe_lookup_mw)
  ++clients_[client.id].registrations;
  ++live_;
  const std::uint32_t rkey = make_key(index, slot.rkey_tag);
  return {0, rkey & ~kConsumerKeyMask, Rkey(rkey)};
}

std::optional<std::uint32_t> MrTable::window_pd(std::uint64_t client_id, std::uint32_t handle) const {
  const Slot* slot = slot_for(handle);
  if (slot == nullptr || slot->kind != Kind::Window || slot->client_id != client_id ||
      (handle & kConsumerKeyMask) != 0 ||
      handle != (make_key(handle >> kTagBits, slot->rkey_tag) & ~kConsumerKeyMask))
    return std::nullopt;
  return slot->pd;
}

int MrTable::dealloc_mw(std::uint64_t client_id, std::uint32_t handle) {
  if (!window_pd(client_id, handle)) return EINVAL;
  free_slot(handle >> kTagBits);
  return 0;
}

// The window whose current R_Key is exactly `key` (rxe_bind_mw and rxe_invalidate_mw compare
// the whole key, consumer byte included).
MrTable::Slot* MrTable::window_for(Rkey key) {
  const Slot* slot = slot_for(key.value());
  if (slot == nullptr || slot->kind != Kind::Window || (key.value() & kTagMask) != slot->rkey_tag) return nullptr;
  return &slots_[key.value() >> kTagBits];
}

// Back to no range: type 2 free, type 1 valid but of length 0 (rxe_do_invalidate_mw,
// rxe_do_bind_mw with length 0).
void MrTable::unbind(Slot& window) {
  // drop_client frees a region and its windows in slot order: the region may be gone already.
  Slot& region = slots_[window.region];
  if (window.region != 0 && region.in_use && region.kind == Kind::Region && region.windows > 0) --region.windows;
  if (window.mw_type == 2 && window.bound) --type2_bound_;
  window.region = 0;
  window.bound = false;
  window.valid = false;
  window.bound_qp.reset();
  window.access = 0;
  window.iova = 0;
  window.length = 0;
  window.zero_based = false;
}

// The checks of rxe_check_bind_mw (IBA 10.6.7.2, compliance statements cited), plus one of
// ours: the QP, the window and the region share one PD. rxe asks that of type 2 windows only
// (C10-72) and libibverbs' rxe provider of a type 1 window and its region (EPERM); here PDs
// belong to one process each, so it is also what keeps a bind inside one address space.
bool MrTable::bind_allowed(const Slot& window, const Slot* region, const rocev2::MwBindRequest& request) {
  const rocev2::MwBind& b = request.bind;
  const bool zero_based = (b.access & mr_access::kZeroBased) != 0;
  if ((b.access & ~kWindowAccess) != 0 || request.qp_pd != window.pd) return false;
  if (window.mw_type == 1 && zero_based) return false;                    // o10-36.2.2
  if (window.mw_type == 2 && (window.bound || b.length == 0)) return false;  // o10-37.2.30, .40
  if (b.length == 0) return true;  // type 1: unbind
  if (region == nullptr || region->pd != window.pd) return false;
  if ((region->access & mr_access::kZeroBased) != 0) return false;
  if ((region->access & mr_access::kMwBind) == 0) return false;           // C10-73
  if ((b.access & (mr_access::kRemoteWrite | mr_access::kRemoteAtomic)) != 0 &&
      (region->access & mr_access::kLocalWrite) == 0)
    return false;                                                         // C10-74
  if (zero_based) return b.length <= region->length;                     // C10-75
  return b.addr >= region->iova && !overflows(b.addr, b.length) &&
         b.addr - region->iova <= region->length && b.length <= region->length - (b.addr - region->iova);
}

bool MrTable::bind_mw(const rocev2::MwBindRequest& request) {
  const rocev2::MwBind& b = request.bind;
  Slot* window = window_for(b.mw_rkey);
  if (window == nullptr) return false;
  std::uint32_t region_index = 0;
  const Slot* region = nullptr;
  if (b.length > 0) {
    const Slot* found = slot_for(b.mr_lkey.value());
    if (found != nullptr && found->kind == Kind::Region && found->valid &&
        (b.mr_lkey.value() & kTagMask) == found->lkey_tag) {
      region = found;
      region_index = b.mr_lkey.value() >> kTagBits;
    }
  }
  if (!bind_allowed(*window, region, request)) return false;
  unbind(*window);
  window->rkey_tag = static_cast<std::uint16_t>((window->rkey_tag & ~kConsumerKeyMask) | (b.new_rkey.value() & kConsumerKeyMask));
  window->lkey_tag = window->rkey_tag;
  if (b.length == 0) return true;
  window->region = region_index;
  ++slots_[region_index].windows;
  window->access = b.access;
  window->iova = b.addr;
  window->length = b.length;
  window->zero_based = (b.access & mr_access::kZeroBased) != 0;
  window->valid = true;
  window->bound = true;
  if (window->mw_type == 2) {
    window->bound_qp = request.qpn;
    ++type2_bound_;
  }
  return true;
}

// LOCAL_INV, and SEND with Invalidate of a window: only a bound type 2 window may be
// invalidated (o10-37.2.26 forbids type 1), and only through a QP of its PD. Our regions are
// never invalidated this way: rxe allows it only for fast-registration regions, which we do not
// have (rxe_invalidate_mr refuses IB_MR_TYPE_USER).
bool MrTable::invalidate_local(Rkey key, std::uint32_t pd) {
  Slot* window = window_for(key);
  if (window == nullptr || window->mw_type != 2 || !window->bound || window->pd != pd) return false;
  unbind(*window);
  return true;
}

std::size_t MrTable::forget_qp(rocev2::Qpn qpn) {
  std::size_t forgotten = 0;
  for (std::uint32_t i = 1; i < slots_.size() && type2_bound_ > 0; ++i) {
    Slot& s = slots_[i];
    if (!s.in_use || s.kind != Kind::Window || s.bound_qp != qpn) continue;
    unbind(s);
    ++forgotten;
  }
  return forgotten;
}

// A window's range is checked as the window knows it (IBA 10.6.7: a window grants access to
// its range only), then translated through its region. rxe checks the region's range instead
// (check_rkey: mr_check_range(mw->mr, ...)), so over rxe a window's R_Key reaches all of its
// region: docs/VERBS_MEMORY.md.
std::optional<DmaTarget> MrTable::window_target(const Slot& window, std::uint64_t addr,
                                                std::uint64_t length) const {
  const std::uint64_t base = window.zero_based ? 0 : window.iova;
  if (addr < base) return std::nullopt;
  const std::uint64_t offset = addr - base;
  if (offset > window.length || length > window.length - offset) return std::nullopt;
  const Slot& region = slots_[window.region];
  if (window.region == 0 || !region.in_use || !region.valid) return std::nullopt;
  const std::uint64_t in_region = window.iova - region.iova + offset;
  if (in_region > region.length || length > region.length - in_region) return std::nullopt;
  const auto client = clients_.find(region.client_id);
  if (client == clients_.end()) return std::nullopt;
  return DmaTarget{client->second.memory, region.addr + in_region, client->second.layout};
}

}  // namespace rrdma::verbs
