// What the vnic reports to query_device / query_port / query_gid: the capabilities we can
// honour, each with where its number comes from, the port's MTU rule and the GID table.
// Pure values: the daemon fills ibv_device_attr / ibv_port_attr from these.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <optional>

#include "stack/addresses.h"
#include "verbs/contract/abi.h"
#include "verbs/device/mr_table.h"
#include "verbs/contract/ring.h"

namespace rrdma::verbs::caps {

// Work-queue depth: one ring per SQ/RQ/CQ, and a ring holds at most kMaxRingCapacity
// entries (verbs/contract/ring.h).
inline constexpr std::uint32_t kMaxQpWr = kMaxRingCapacity;
inline constexpr std::uint32_t kMaxCqe = kMaxRingCapacity;
inline constexpr std::uint32_t kMaxSrqWr = kMaxRingCapacity;
// Scatter/gather entries: the fixed SGE array of a WQE (verbs/contract/abi.h).
inline constexpr std::uint32_t kMaxSgePerWr = kMaxSge;
inline constexpr std::uint32_t kMaxSrqSge = kMaxSge;
inline constexpr std::uint32_t kMaxInline = kMaxInlineData;
// MRs: the MR table's 16-bit index, index 0 unused (verbs/device/mr_table.h).
inline constexpr std::uint32_t kMaxMr = static_cast<std::uint32_t>(MrTable::kMaxRegions);
// Memory windows take their slots from the same table: regions and windows together.
inline constexpr std::uint32_t kMaxMw = kMaxMr;
// One MR's length: a message is at most 2^31 bytes (abi.h); an MR may be larger than a
// message, but process_vm_readv/writev move at most SSIZE_MAX per call and we keep MRs to
// what a 64-bit address space plausibly maps: 2^40 bytes (1 TiB).
inline constexpr std::uint64_t kMaxMrSize = std::uint64_t{1} << 40;
// Our own choices, not forced by a format: each QP costs three rings of shared memory and a
// doorbell eventfd, so a daemon caps QPs, CQs and SRQs at 2^14 each (fd limits bite first:
// the default RLIMIT_NOFILE is 1024 per process, each resource's memfd + eventfd count).
inline constexpr std::uint32_t kMaxQp = 1u << 14;
inline constexpr std::uint32_t kMaxCq = 1u << 14;
inline constexpr std::uint32_t kMaxSrq = 1u << 14;
inline constexpr std::uint32_t kMaxPd = 1u << 14;
inline constexpr std::uint32_t kMaxAh = 1u << 14;
// READ/atomic depth: 128 each, what rxe offers. It matters beyond our own QPs: perftest sets
// its max_rd_atomic from the PEER's max_qp_rd_atom, so a device offering less than rxe cannot
// take perftest's READ and atomic tests against rxe (its modify to RTS would be refused).
// The responder keeps one replay slot per outstanding READ/atomic (rocev2::
// kMaxResponderResources); the requester tracks them in its send queue.
// max_qp_init_rd_atom bounds attr.max_rd_atomic (ours as requester), max_qp_rd_atom bounds
// attr.max_dest_rd_atomic (ours as responder).
inline constexpr std::uint8_t kMaxQpRdAtom = rocev2::kMaxResponderResources;
inline constexpr std::uint8_t kMaxQpInitRdAtom = 128;
// Atomics run in the daemon, one at a time per vnic, so they are atomic with respect to
// every QP of this device (IBV_ATOMIC_HCA), not to the CPUs of the application.
inline constexpr ibv_atomic_cap kAtomicCap = IBV_ATOMIC_HCA;
inline constexpr std::uint64_t kMaxMsgSize = kMaxMessageSize;

// One port, number 1 (IBA ports are numbered from 1), one P_Key (index 0: the default
// full-membership 0xFFFF; RoCE has no subnet manager to program more).
inline constexpr std::uint8_t kPortNum = 1;
inline constexpr std::uint16_t kPkeyTableLen = 1;
inline constexpr std::uint16_t kDefaultPkey = 0xFFFF;
inline constexpr int kGidTableLen = 1;
inline constexpr ibv_mtu kMaxMtu = IBV_MTU_4096;

// RoCE v2 headroom between the netdev MTU and the IB path MTU: IPv4 20 + UDP 8 + BTH 12 +
// the largest extension headers (RETH 16 or AtomicETH 28, with ImmDt 4) + ICRC 4 rounds up
// to 80, the figure rxe subtracts before rounding down to an IB MTU.
inline constexpr int kRoceHeadroom = 80;

// The node GUID: the MAC's EUI-64 (universal/local bit flipped, ff:fe in the middle), as rxe
// derives it, as a number (its big-endian bytes are the GUID).
std::uint64_t node_guid(const stack::MacAddress& mac);

// Bytes of an IB MTU enum value (IBV_MTU_256..4096), nullopt outside it.
std::optional<int> mtu_bytes(int mtu);
// The largest IB MTU that fits netdev_mtu - 80; nullopt below 256 + 80 = 336.
std::optional<ibv_mtu> active_mtu_for_netdev(int netdev_mtu);

ibv_device_attr device_attributes();
// query_port for a link that is up or down, at the given netdev MTU. Precondition: the MTU
// passed active_mtu_for_netdev (the daemon refuses to start otherwise).
ibv_port_attr port_attributes(bool link_up, int netdev_mtu);

// GIDs: RoCE v2 over IPv4 uses the IPv4-mapped IPv6 address ::ffff:a.b.c.d (IBA Annex
// A17, RoCE v2; RFC 4291 section 2.5.5.2 for the mapped form).
ibv_gid gid_from_ipv4(stack::Ipv4Address address);
// The IPv4 address of a mapped GID; nullopt for any other GID (IPv6 RoCE is not built).
std::optional<stack::Ipv4Address> ipv4_from_gid(const ibv_gid& gid);
bool is_ipv4_mapped(const ibv_gid& gid);

// The GID table: index 0 is the vnic's address. nullopt for any other index.
struct GidEntry {
  ibv_gid gid;
  ibv_gid_type type;  // IBV_GID_TYPE_ROCE_V2
};
std::optional<GidEntry> gid_entry(int index, stack::Ipv4Address vnic_address);

}  // namespace rrdma::verbs::caps
