// The daemon's memory region table: every ibv_reg_mr of every application process that uses
// this vnic, with the L_Key and R_Key the engine looks regions up by (the engine's MrTable
// port). Keys are an index into the table (O(1) lookup) plus random bits from getrandom(2),
// so that a peer holding one R_Key learns nothing about any other. The table also answers
// the question ProcessDma asks before every transfer: which process, and which of its
// addresses, does this (still standing) registration cover? docs/VERBS_MEMORY.md explains
// the key layout, the access rules and what happens when a process dies.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

#include "rocev2/engine/ports.h"
#include "rocev2/engine/work.h"

namespace rrdma::verbs {

// enum ibv_access_flags of libibverbs (verbs.h), same bit values; the first four are the
// engine's rocev2::access bits.
namespace mr_access {
inline constexpr std::uint32_t kLocalWrite = rocev2::access::kLocalWrite;
inline constexpr std::uint32_t kRemoteWrite = rocev2::access::kRemoteWrite;
inline constexpr std::uint32_t kRemoteRead = rocev2::access::kRemoteRead;
inline constexpr std::uint32_t kRemoteAtomic = rocev2::access::kRemoteAtomic;
inline constexpr std::uint32_t kMwBind = 1u << 4;
inline constexpr std::uint32_t kZeroBased = 1u << 5;
inline constexpr std::uint32_t kOnDemand = 1u << 6;
inline constexpr std::uint32_t kHugetlb = 1u << 7;
inline constexpr std::uint32_t kFlushGlobal = 1u << 8;
inline constexpr std::uint32_t kFlushPersistent = 1u << 9;
inline constexpr std::uint32_t kRelaxedOrdering = 1u << 20;
// Bits 20-29 are "optional": a device that does not implement one ignores it (verbs.h).
inline constexpr std::uint32_t kOptionalRange = 0x3FF0'0000;
}  // namespace mr_access

// Who owns a registration: an application process. `id` is the daemon's number for the
// process's control connection (unique for the daemon's life). `memory` is where DMA goes:
// the /proc/self/mem the process opened and handed over at open_device (the Nic owns it and
// keeps it open while the client has registrations). It reaches the address space that
// opened it and nothing else: not the program an exec puts at the same pid, not a process
// that reuses the pid. No pid is kept, so no pid can be confused.
struct Client {
  std::uint64_t id = 0;
  int memory = -1;
  // The client's /proc/PID/maps, opened by the daemon at open_device (address_layout.h):
  // what ProcessDma asks before each write whether the owner may write there. -1: no layout
  // is known, and writes are not checked (the Nic then refuses regions that grant writes).
  int layout = -1;
};

// One ibv_reg_mr / ibv_reg_mr_iova call.
struct MrRequest {
  std::uint32_t pd = 0;
  std::uint64_t addr = 0;    // first byte, in the client's address space
  std::uint64_t length = 0;  // bytes; 0 is refused
  std::uint32_t access = 0;  // mr_access:: bits
  // The address the region is known by in WQEs and RETHs (ibv_reg_mr_iova). Default: `addr`,
  // or 0 with mr_access::kZeroBased.
  std::optional<std::uint64_t> iova;
  // May a SEND with Invalidate (IETH) from the peer invalidate the R_Key? Never for what
  // ibv_reg_mr creates (rxe refuses to invalidate IB_MR_TYPE_USER regions); for the memory
  // windows and fast-registration regions a later brick adds.
  bool remote_invalidate = false;
};

// One ibv_rereg_mr call: which of the region's properties change (enum ibv_rereg_mr_flags
// bits), and their new values; the fields of a flag not set are ignored.
namespace rereg_flags {
inline constexpr std::uint32_t kChangeTranslation = 1u << 0;
inline constexpr std::uint32_t kChangePd = 1u << 1;
inline constexpr std::uint32_t kChangeAccess = 1u << 2;
inline constexpr std::uint32_t kAll = kChangeTranslation | kChangePd | kChangeAccess;
}  // namespace rereg_flags

struct ReregRequest {
  std::uint32_t flags = 0;
  std::uint32_t pd = 0;
  std::uint64_t addr = 0;    // the new region starts here; its iova becomes addr (rdma-core
  std::uint64_t length = 0;  // passes the address as hca_va), or 0 with ZERO_BASED
  std::uint32_t access = 0;
};

// The keys of a new registration, or the errno that refused it.
struct RegisterResult {
  int error = 0;  // 0, EINVAL, EOPNOTSUPP, ENOMEM (table full), ESRCH (client is gone), EAGAIN
  rocev2::Lkey lkey{};
  rocev2::Rkey rkey{};
  bool ok() const { return error == 0; }
};

// Where a DMA goes: the owning process's memory handle and the address inside it.
struct DmaTarget {
  int memory = -1;             // the client's /proc/self/mem (Client::memory)
  std::uint64_t address = 0;   // in the client's address space
  int layout = -1;             // the client's maps file (Client::layout), -1 if none
};

// A new memory window's handle and R_Key, or the errno that refused it. The handle names the
// window for dealloc_mw for its whole life: its R_Key with the consumer-owned low byte zero
// (IBA 10.6.7: a bind changes only that byte).
struct AllocMwResult {
  int error = 0;  // 0, EINVAL (type not 1 or 2), ENOMEM (table full), ESRCH, EAGAIN
  std::uint32_t handle = 0;
  rocev2::Rkey rkey{};
  bool ok() const { return error == 0; }
};

// A registration as `status` lists it.
struct MrInfo {
  std::uint64_t client_id = 0;
  std::uint64_t addr = 0;      // in the client's address space
  bool valid = true;           // false after a remote invalidation
  rocev2::MrFacts facts;       // facts.base is the iova
};

class MrTable final : public rocev2::MrTable {
 public:
  // Key layout: index (high 16 bits) | tag (low 16 bits, random). Index 0 is never used, so
  // no key below 0x10000 (and in particular the default key 0) ever matches.
  static constexpr unsigned kIndexBits = 16;
  static constexpr unsigned kTagBits = 16;
  static constexpr std::size_t kMaxRegions = (std::size_t{1} << kIndexBits) - 1;

  // 64 random bits per call. The default reads getrandom(2).
  using RandomSource = std::function<std::uint64_t()>;
  static std::uint64_t system_random();

  explicit MrTable(std::size_t capacity = kMaxRegions, RandomSource random = system_random);
  ~MrTable() override;
  MrTable(const MrTable&) = delete;
  MrTable& operator=(const MrTable&) = delete;

  // ESRCH when the client has no memory handle.
  RegisterResult register_mr(const Client& client, const MrRequest& request);
  // ibv_rereg_mr: changes the registration in place and keeps both keys, as rxe does
  // (rxe_rereg_user_mr returns the same MR). 0; EINVAL when `lkey` is not this client's or
  // the result would be a registration register_mr refuses with EINVAL; EOPNOTSUPP for
  // unknown flags or access bits the device lacks. Nothing changes unless it returns 0.
  int reregister(std::uint64_t client_id, rocev2::Lkey lkey, const ReregRequest& request);
  // The PD a registration of this client is in, if `lkey` is one.
  std::optional<std::uint32_t> pd_of(std::uint64_t client_id, rocev2::Lkey lkey) const;
  // ibv_alloc_mw (IBA 10.6.7): a window of type 1 or 2 in `pd`, sharing the regions' key
  // space and capacity. A type 1 window starts valid and unbound (no access until a bind gives
  // it a range), a type 2 window free (IBA o10-37.2.30: it must be free to be bound).
  AllocMwResult alloc_mw(const Client& client, std::uint32_t pd, int type);
  // ibv_dealloc_mw: 0, or EINVAL when `handle` is not a window of this client. A bound window
  // goes too (rxe_dealloc_mw refuses neither type), and its R_Key matches nothing afterwards.
  int dealloc_mw(std::uint64_t client_id, std::uint32_t handle);
  // The PD of a window of this client, if `handle` is one.
  std::optional<std::uint32_t> window_pd(std::uint64_t client_id, std::uint32_t handle) const;
  // A QP is destroyed: the type 2 windows bound through it are invalidated (their key could
  // otherwise reach a later QP with the same number). Returns how many.
  std::size_t forget_qp(rocev2::Qpn qpn);

  // ibv_dereg_mr: 0, or EINVAL when `lkey` is not a registration of this client or memory
  // windows are still bound to it (IBA 10.6.7.2.6; rxe_dereg_mr answers EINVAL too).
  int deregister(std::uint64_t client_id, rocev2::Lkey lkey);
  // Everything the client registered, gone at once (its process exited or disconnected).
  // Returns how many registrations were removed.
  std::size_t drop_client(std::uint64_t client_id);

  std::size_t size() const { return live_; }
  std::size_t capacity() const { return slots_.size() - 1; }
  std::vector<MrInfo> registrations_of(std::uint64_t client_id) const;

  // The engine's port.
  std::optional<rocev2::MrFacts> find_lkey(rocev2::Lkey key) const override;
  std::optional<rocev2::MrFacts> find_rkey(rocev2::Rkey key) const override;
  bool invalidate_rkey(rocev2::Rkey key, std::uint32_t pd) override;
  bool bind_mw(const rocev2::MwBindRequest& request) override;
  bool invalidate_local(rocev2::Rkey key, std::uint32_t pd) override;

  // For ProcessDma, before any system call: `mr` must still name a standing, valid
  // registration with exactly these keys, and [addr, addr + length) (iova addresses) must lie
  // inside it as the table knows it (not as `mr` claims). Then: which process, which address.
  std::optional<DmaTarget> dma_target(const rocev2::MrFacts& mr, std::uint64_t addr,
                                      std::uint64_t length) const;

 private:
  enum class Kind : std::uint8_t { Region, Window };

  // A slot holds a region or a memory window. A window's `iova` is the address it is bound at
  // (in its region's iova space), `length` its length, `access` its rights; `valid` means a
  // remote access may match it (bound, with a length).
  struct Slot {
    bool in_use = false;
    bool valid = false;              // registered and not invalidated
    bool remote_invalidate = false;
    Kind kind = Kind::Region;
    bool was_window = false;         // free slot: its last tenant was a window
    std::uint8_t mw_type = 0;        // window: 1 or 2
    bool zero_based = false;         // window: bound IBV_ACCESS_ZERO_BASED (type 2 only)
    bool bound = false;              // window: type 2 bound (not free); type 1 has a range
    std::uint32_t region = 0;        // window: the slot of the region it is bound to, 0 none
    std::optional<rocev2::Qpn> bound_qp{};  // window, type 2: the QP it was bound through
    std::uint32_t windows = 0;       // region: windows bound to it
    std::uint64_t client_id = 0;
    std::uint32_t pd = 0;
    std::uint32_t access = 0;
    std::uint64_t addr = 0;
    std::uint64_t iova = 0;
    std::uint64_t length = 0;
    // The tags of the current registration, or of the last one while the slot is free.
    std::uint16_t lkey_tag = 0;
    std::uint16_t rkey_tag = 0;
  };

  struct ClientRecord {
    int memory = -1;  // not owned
    int layout = -1;  // not owned
    std::size_t registrations = 0;
  };

  static int check_request(const MrRequest& request);
  static bool bind_allowed(const Slot& window, const Slot* region, const rocev2::MwBindRequest& request);
  Slot* window_for(rocev2::Rkey key);
  void unbind(Slot& window);
  std::optional<DmaTarget> window_target(const Slot& window, std::uint64_t addr, std::uint64_t length) const;
  Slot* own_slot(std::uint64_t client_id, rocev2::Lkey lkey);
  int attach_client(const Client& client);
  void release_client(std::uint64_t client_id);
  std::optional<std::uint32_t> take_free_slot();
  bool draw_tags(Slot& slot, bool window);
  void free_slot(std::uint32_t index);
  const Slot* slot_for(std::uint32_t key) const;
  rocev2::MrFacts facts_of(std::uint32_t index) const;

  RandomSource random_;
  std::vector<Slot> slots_;               // slots_[0] is never used
  std::vector<std::uint32_t> free_;       // free indices, in no particular order
  std::unordered_map<std::uint64_t, ClientRecord> clients_;
  std::size_t live_ = 0;
  std::size_t type2_bound_ = 0;            // type 2 windows bound through some QP
};

}  // namespace rrdma::verbs
