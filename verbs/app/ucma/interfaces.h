// Runs in the application process (the shim, librrdma_ucma.so).
//
// The vnics as network interfaces. A vnic's IPv4 address belongs to its daemon, not to any
// interface of the kernel, so getifaddrs(3) does not list it; with rdma_rxe the RDMA device's
// address is its netdev's, and software finds RDMA devices by walking the interfaces:
// libfabric's verbs provider offers FI_EP_MSG endpoints (the ones that connect through
// rdma_cm) only for addresses getifaddrs lists and rdma_bind_addr maps to a device. So
// `rrdma-vnic exec`, with the sysfs view, names each vnic's address in RRDMA_INTERFACES
// ("NAME=A.B.C.D/LEN", ';' between vnics), and the shim's getifaddrs appends one AF_INET
// entry per vnic, under the vnic's name (the netdev the view's gid_attrs/ndevs/0 names),
// UP and RUNNING. The kernel still has no such address: a socket bound to it fails with
// EADDRNOTAVAIL, as it should (the RoCE side of that address is the daemon's). docs/IBVERBS.md,
// "The vnics as interfaces".
#pragma once

#include <net/if.h>

#include <cstdint>
#include <string_view>
#include <vector>

struct ifaddrs;

namespace rrdma::ucma_shim {

inline constexpr char kInterfacesVariable[] = "RRDMA_INTERFACES";

struct VnicInterface {
  char name[IF_NAMESIZE] = {};
  std::uint32_t address = 0;  // host order
  unsigned prefix_len = 0;    // 0..32
};

// The entries of `text` (RRDMA_INTERFACES' value). Hostile input (the program's own
// environment): an entry that is not exactly NAME=A.B.C.D/LEN, with NAME 1..15 characters of
// [A-Za-z0-9_.-] and LEN 1..32, is left out; at most kMaxInterfaces entries are taken.
inline constexpr std::size_t kMaxInterfaces = 64;
std::vector<VnicInterface> parse_interfaces(std::string_view text);

// One block of malloc'd memory holding `vnics` as a chain of ifaddrs entries, each marked
// (is_vnic_entry) so that freeifaddrs can tell it from the C library's; nullptr when
// `vnics` is empty or memory is short.
ifaddrs* make_entries(const std::vector<VnicInterface>& vnics);
bool is_vnic_entry(const ifaddrs* entry);

}  // namespace rrdma::ucma_shim
