// What ucma_probe's two sources share: the check that ends the probe, and the event numbers
// (enum rdma_cm_event_type lives in rdma_cma.h, which cannot be included beside the uapi's
// rdma_user_cm.h: both define the port spaces).
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ucma_probe {

inline constexpr std::uint32_t kEstablished = 9;   // RDMA_CM_EVENT_ESTABLISHED
inline constexpr std::uint32_t kDisconnected = 10;  // RDMA_CM_EVENT_DISCONNECTED

inline void check(bool ok, const char* what, int line) {
  if (ok) return;
  const int error = errno;
  std::fprintf(stderr, "ucma_probe: line %d: failed: %s (errno %d: %s)\n", line, what, error, std::strerror(error));
  std::exit(1);
}

int run_librdmacm();

}  // namespace ucma_probe

#define CHECK(condition) ::ucma_probe::check((condition), #condition, __LINE__)
