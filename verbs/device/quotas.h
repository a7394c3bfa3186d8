// Per-process quotas on the verbs objects a vnic's daemon holds for its applications, and
// the shared ring memory it maps for them. Every QP costs the daemon three descriptors (two
// ring memfds and a doorbell eventfd), every context, CQ and SRQ two; descriptors, MR slots
// and mapped memory are the daemon's, shared by every process on the vnic. Without a bound
// per process one program could take them all and make everyone else's verbs fail
// (docs/VERBS_RESOURCES.md, "Quotas"). Pure values: the registry counts, the daemon decides
// the numbers.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace rrdma::verbs {

enum class ResourceKind : std::uint8_t { Context, Pd, Cq, Qp, Srq, Ah, Mr };
inline constexpr std::size_t kResourceKinds = 7;
inline constexpr std::array<ResourceKind, kResourceKinds> kAllResourceKinds = {
    ResourceKind::Context, ResourceKind::Pd, ResourceKind::Cq, ResourceKind::Qp,
    ResourceKind::Srq,     ResourceKind::Ah, ResourceKind::Mr};
const char* resource_kind_name(ResourceKind kind);

// Descriptors the daemon keeps open for one object of each kind: a context's event ring and
// event eventfd, and for a connection's first context its memory handle and the pidfd of its
// credential watch (counted for every context: an upper bound); a CQ's ring and notify
// eventfd, a QP's SQ and RQ rings and doorbell, an SRQ's ring and doorbell. PDs, AHs and MRs
// hold none.
constexpr std::uint64_t descriptors_per(ResourceKind kind) {
  switch (kind) {
    case ResourceKind::Qp: return 3;
    case ResourceKind::Context: return 4;
    case ResourceKind::Cq:
    case ResourceKind::Srq: return 2;
    case ResourceKind::Pd:
    case ResourceKind::Ah:
    case ResourceKind::Mr: return 0;
  }
  return 0;
}

// How much one process may hold at once: objects of each kind, and bytes of ring memory
// (the sizes of the shared regions the daemon maps for it).
struct Quotas {
  static constexpr std::uint64_t kUnlimited = std::numeric_limits<std::uint64_t>::max();
  std::array<std::uint64_t, kResourceKinds> objects = {kUnlimited, kUnlimited, kUnlimited, kUnlimited,
                                                       kUnlimited, kUnlimited, kUnlimited};
  std::uint64_t ring_bytes = kUnlimited;

  std::uint64_t& of(ResourceKind kind) { return objects[static_cast<std::size_t>(kind)]; }
  std::uint64_t of(ResourceKind kind) const { return objects[static_cast<std::size_t>(kind)]; }
  bool operator==(const Quotas&) const = default;
};

// What one process holds now. A process is a pid (SO_PEERCRED at connect); all its control
// connections count together, so opening more connections does not buy more.
struct QuotaUse {
  pid_t pid = 0;
  uid_t uid = 0;
  std::uint64_t connections = 0;
  std::array<std::uint64_t, kResourceKinds> objects{};
  std::uint64_t ring_bytes = 0;

  std::uint64_t& of(ResourceKind kind) { return objects[static_cast<std::size_t>(kind)]; }
  std::uint64_t of(ResourceKind kind) const { return objects[static_cast<std::size_t>(kind)]; }
  std::uint64_t descriptors() const;
};

// Creations refused because a quota was reached, by what was exhausted.
struct QuotaRefusals {
  std::array<std::uint64_t, kResourceKinds> objects{};
  std::uint64_t ring_bytes = 0;

  std::uint64_t& of(ResourceKind kind) { return objects[static_cast<std::size_t>(kind)]; }
  std::uint64_t of(ResourceKind kind) const { return objects[static_cast<std::size_t>(kind)]; }
};

// The daemon-wide caps each per-process default must stay within a fraction of.
struct DeviceLimits {
  std::uint64_t max_qp = 0;
  std::uint64_t max_cq = 0;
  std::uint64_t max_srq = 0;
  std::uint64_t max_pd = 0;
  std::uint64_t max_ah = 0;
  std::uint64_t max_mr = 0;
};

// One process may take at most this fraction of what the daemon has.
inline constexpr std::uint64_t kProcessShareDivisor = 4;
// One user's processes together may take this many processes' quotas: half of what the
// daemon has, so that no user can leave the others nothing (one process each was all
// that bounded a user before: four of them took everything).
inline constexpr std::uint64_t kUserShareOfProcesses = 2;

// Descriptors the daemon keeps out of every process's share: its own (the TAP, io_uring,
// signalfd, netlink, log, listening socket), and room to accept control connections so
// that root's `status` and `down` still get in when every process is at its quota.
std::uint64_t reserved_descriptors(std::uint64_t fd_limit);

// The defaults: a process gets a quarter of the descriptors left after the reserve, split
// between QPs (half), CQs (a quarter), SRQs and contexts (an eighth each), so that even a
// process at every quota at once holds no more than that quarter; and a quarter of each
// device-wide cap for the kinds that hold no descriptor. Ring bytes: 1/16 of the machine's
// memory (the daemon's mapping of a shared page counts in its RSS), at least 64 MiB.
// Every object quota is at least 1.
Quotas default_quotas(std::uint64_t fd_limit, std::uint64_t memory_bytes, const DeviceLimits& device);

// The per-user totals by default: kUserShareOfProcesses times each per-process quota.
Quotas default_user_quotas(const Quotas& per_process);

}  // namespace rrdma::verbs
