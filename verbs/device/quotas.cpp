#include "verbs/device/quotas.h"

#include <algorithm>

namespace rrdma::verbs {
namespace {

constexpr std::uint64_t kMinReservedDescriptors = 256;
constexpr std::uint64_t kMinRingBytes = std::uint64_t{64} << 20;

// `part` / `parts` of the descriptor share, as a count of objects costing `per_object` each.
std::uint64_t objects_from_share(std::uint64_t share, std::uint64_t parts, std::uint64_t per_object) {
  return share / parts / per_object;
}

}  // namespace

const char* resource_kind_name(ResourceKind kind) {
  switch (kind) {
    case ResourceKind::Context: return "context";
    case ResourceKind::Pd: return "pd";
    case ResourceKind::Cq: return "cq";
    case ResourceKind::Qp: return "qp";
    case ResourceKind::Srq: return "srq";
    case ResourceKind::Ah: return "ah";
    case ResourceKind::Mr: return "mr";
  }
  return "unknown";
}

std::uint64_t QuotaUse::descriptors() const {
  std::uint64_t total = 0;
  for (ResourceKind kind : kAllResourceKinds) total += of(kind) * descriptors_per(kind);
  return total;
}

std::uint64_t reserved_descriptors(std::uint64_t fd_limit) {
  return std::max(kMinReservedDescriptors, fd_limit / 8);
}

Quotas default_quotas(std::uint64_t fd_limit, std::uint64_t memory_bytes, const DeviceLimits& device) {
  const std::uint64_t reserve = reserved_descriptors(fd_limit);
  const std::uint64_t share = fd_limit > reserve ? (fd_limit - reserve) / kProcessShareDivisor : 0;
  auto bounded = [](std::uint64_t from_descriptors, std::uint64_t device_cap) {
    return std::max<std::uint64_t>(1, std::min(from_descriptors, device_cap / kProcessShareDivisor));
  };
  Quotas q;
  q.of(ResourceKind::Qp) = bounded(objects_from_share(share, 2, descriptors_per(ResourceKind::Qp)), device.max_qp);
  q.of(ResourceKind::Cq) = bounded(objects_from_share(share, 4, descriptors_per(ResourceKind::Cq)), device.max_cq);
  q.of(ResourceKind::Srq) =
      bounded(objects_from_share(share, 8, descriptors_per(ResourceKind::Srq)), device.max_srq);
  q.of(ResourceKind::Context) =
      bounded(objects_from_share(share, 8, descriptors_per(ResourceKind::Context)), Quotas::kUnlimited);
  q.of(ResourceKind::Pd) = bounded(device.max_pd, device.max_pd);
  q.of(ResourceKind::Ah) = bounded(device.max_ah, device.max_ah);
  q.of(ResourceKind::Mr) = bounded(device.max_mr, device.max_mr);
  q.ring_bytes = std::max(kMinRingBytes, memory_bytes / 16);
  return q;
}

Quotas default_user_quotas(const Quotas& per_process) {
  const auto times = [](std::uint64_t quota) {
    return quota > Quotas::kUnlimited / kUserShareOfProcesses ? Quotas::kUnlimited : quota * kUserShareOfProcesses;
  };
  Quotas q;
  for (ResourceKind kind : kAllResourceKinds) q.of(kind) = times(per_process.of(kind));
  q.ring_bytes = times(per_process.ring_bytes);
  return q;
}

}  // namespace rrdma::verbs
