// The MR verbs beyond register / deregister: ibv_rereg_mr and ibv_advise_mr. The daemon
// never pins memory (it reaches this process through the /proc/self/mem it was handed,
// faulting pages in as it goes: docs/VERBS_MEMORY.md), so a region can change place in
// place, and "prefetching" an on-demand region is faulting its pages in here, where the
// daemon's next access will find them.
#include <sys/mman.h>
#include <unistd.h>

#include "verbs/app/ibverbs/shim.h"

namespace rrdma::ibverbs {
namespace {

// ibv_rereg_mr(3): "Old MR is valid, an input error was detected by libibverbs".
int rereg_input_error(int error) {
  errno = error;
  return IBV_REREG_MR_ERR_INPUT;
}

// What rdma-core's libibverbs refuses before the provider is asked (its ibv_rereg_mr):
// unknown flags, a translation change without an address or a length. We also refuse a PD
// change to no PD or to another context's PD, which rdma-core would pass to the kernel.
int check_rereg_input(const ibv_mr& mr, int flags, const ibv_pd* pd, const void* addr, size_t length) {
  if ((flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) != 0) return EINVAL;
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0 && (addr == nullptr || length == 0)) return EINVAL;
  if ((flags & IBV_REREG_MR_CHANGE_PD) != 0 && (pd == nullptr || pd->context != mr.context)) return EINVAL;
  return 0;
}

// The MR of this PD that `sge` names, if its range lies inside the region (addressed by the
// region's IOVA, as every SGE is). ENOENT for an L_Key that is not a region of this PD,
// EINVAL for a region that is not on-demand (ibv_advise_mr(3): "all the lkeys ... must be
// associated with ODP MRs"), EFAULT out of bounds, EPERM to prefetch for writing a region
// without local write access.
int find_advised_region(ibv_pd* pd, const ibv_sge& sge, bool for_write, std::uint64_t& address) {
  ContextState& state = state_of(pd->context);
  std::shared_ptr<client::MemoryRegion> region;
  {
    std::lock_guard lock(state.objects_mutex);
    auto it = state.mrs.find(sge.lkey);
    if (it == state.mrs.end() || it->second->pd != pd) return ENOENT;
    region = box_cast<MrBox>(it->second)->state->mr;
  }
  if ((region->access() & IBV_ACCESS_ON_DEMAND) == 0) return EINVAL;
  if (for_write && (region->access() & IBV_ACCESS_LOCAL_WRITE) == 0) return EPERM;
  const std::uint64_t iova = region->iova();
  if (sge.addr < iova) return EFAULT;
  const std::uint64_t offset = sge.addr - iova;
  if (offset > region->length() || sge.length > region->length() - offset) return EFAULT;
  address = reinterpret_cast<std::uintptr_t>(region->address()) + offset;
  return 0;
}

// Does this kernel know MADV_POPULATE_READ (Linux 5.14)? Asked once, on a page of our own
// stack, so that a later EINVAL means a bad range, not an old kernel.
bool kernel_can_populate() {
  static const bool can = [] {
    const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
    int on_stack = 0;
    const std::uintptr_t start = reinterpret_cast<std::uintptr_t>(&on_stack) & ~(page - 1);
    return ::madvise(reinterpret_cast<void*>(start), page, MADV_POPULATE_READ) == 0 || errno != EINVAL;
  }();
  return can;
}

// Faults [address, address + length) in, readable or writable, without changing a byte
// (MADV_POPULATE_READ / _WRITE). A range with a hole or beyond the address space is EFAULT
// ("parts of it are not part of the process address space"). Without the advice in the
// kernel, the faulting is left to the daemon's first access: prefetch is best-effort
// (ibv_advise_mr(3)).
int populate(std::uint64_t address, std::uint64_t length, bool for_write) {
  if (length == 0) return 0;
  if (address > UINT64_MAX - length) return EFAULT;  // an implicit region's last bytes
  if (!kernel_can_populate()) return 0;
  const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  const std::uint64_t start = address & ~(page - 1);
  const std::uint64_t end = address + length;
  const int advice = for_write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
  return ::madvise(reinterpret_cast<void*>(start), end - start, advice) == 0 ? 0 : EFAULT;
}

}  // namespace

// ibv_advise_mr(3). PREFETCH_NO_FAULT makes present pages "present to the device": every
// page of the process is reachable by the daemon already, so there is nothing to do. With
// or without IBV_ADVISE_MR_FLAG_FLUSH the work is done before we return.
int advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, std::uint32_t flags, ibv_sge* sg_list, std::uint32_t num_sge) {
  if (pd == nullptr || (flags & ~static_cast<std::uint32_t>(IBV_ADVISE_MR_FLAG_FLUSH)) != 0) return EINVAL;
  if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
      advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
    return EOPNOTSUPP;  // "ENOTSUP: the advise operation isn't supported" (the same value)
  if (sg_list == nullptr || num_sge == 0) return EINVAL;
  const bool for_write = advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE;
  std::vector<std::uint64_t> addresses(num_sge);
  for (std::uint32_t i = 0; i < num_sge; ++i) {
    if (const int error = find_advised_region(pd, sg_list[i], for_write, addresses[i]); error != 0) return error;
  }
  if (advice == IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) return 0;
  for (std::uint32_t i = 0; i < num_sge; ++i) {
    if (const int error = populate(addresses[i], sg_list[i].length, for_write); error != 0) return error;
  }
  return 0;
}

}  // namespace rrdma::ibverbs

using namespace rrdma::ibverbs;

extern "C" {

// ibv_rereg_mr(3). Every flag works: CHANGE_PD and CHANGE_ACCESS as on rxe
// (rxe_rereg_user_mr), CHANGE_TRANSLATION too, which rxe refuses (EOPNOTSUPP) because it
// would have to pin the new range; nothing is pinned here. The keys stay what they were, as
// on rxe, and are copied back as rdma-core copies the kernel's answer. A refusal by the
// daemon is IBV_REREG_MR_ERR_CMD with errno set, as rdma-core reports a failed command;
// the MR is then unchanged here, but the man page says it "shouldn't be used".
RRDMA_EXPORT int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  if (mr == nullptr) return rereg_input_error(EINVAL);
  if (const int error = check_rereg_input(*mr, flags, pd, addr, length); error != 0) return rereg_input_error(error);
  auto access_bits = static_cast<unsigned int>(access);
  if ((flags & IBV_REREG_MR_CHANGE_ACCESS) != 0) {
    if (const int error = accepted_access(access_bits); error != 0) {
      errno = error;
      return IBV_REREG_MR_ERR_CMD;
    }
  }
  client::MemoryRegion& region = *box_cast<MrBox>(mr)->state->mr;
  std::shared_ptr<client::ProtectionDomain> new_pd =
      (flags & IBV_REREG_MR_CHANGE_PD) != 0 ? box_cast<PdBox>(pd)->state->pd : nullptr;
  if (const int error = region.reregister(static_cast<std::uint32_t>(flags), std::move(new_pd), addr, length,
                                          access_bits);
      error != 0) {
    errno = error;
    return IBV_REREG_MR_ERR_CMD;
  }
  if ((flags & IBV_REREG_MR_CHANGE_PD) != 0) mr->pd = pd;
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0) {
    mr->addr = addr;
    mr->length = length;
  }
  if (mr->lkey != region.lkey()) {  // ibv_advise_mr finds MRs by L_Key
    ContextState& state = state_of(mr->context);
    std::lock_guard lock(state.objects_mutex);
    state.mrs.erase(mr->lkey);
    state.mrs[region.lkey()] = mr;
  }
  mr->lkey = region.lkey();
  mr->rkey = region.rkey();
  return 0;
}

}  // extern "C"
