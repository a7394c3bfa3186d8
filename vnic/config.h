// The settings of one vnic, as the user gives them to `rrdma-vnic up`, and the pure
// checks and derivations on them (no system calls here, so the tests can pin them down).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "stack/addresses.h"
#include "verbs/device/quotas.h"

namespace rrdma::vnic {

inline constexpr std::uint16_t kMinMtu = 576;   // RFC 791: every host must accept 576 bytes
inline constexpr std::uint16_t kMaxMtu = 9000;  // the usual jumbo frame
inline constexpr std::uint16_t kDefaultMtu = 1500;
// `up --busy-poll-us`: beyond a millisecond a spinning loop only burns the CPU it found idle.
inline constexpr std::uint32_t kMaxBusyPollMicroseconds = 1000;
// `up --dma-wait-ms`: how long the loop waits for one system call on a client's memory before
// it gives up on that client (verbs/device/dma_thread.h); 0 makes the calls on the loop itself.
// The default depends on who may use the NIC. A vnic with `--group` serves other users, one of
// whom must not stall it for the rest with memory that never answers: the bound is on
// (kSharedDmaWaitMilliseconds). Without, only its owner (root, or the user of a --netdev
// device) uses it, who can stall only themselves, and the calls run on the loop: through the
// DMA thread each costs a hand-over, which cost 20-50 % of ib_write_bw 64 KiB and nearly
// tripled ib_write_lat here (docs/PERFORMANCE.md, "The DMA thread").
inline constexpr std::uint32_t kDefaultDmaWaitMilliseconds = 0;
inline constexpr std::uint32_t kSharedDmaWaitMilliseconds = 1000;
inline constexpr std::uint32_t kMaxDmaWaitMilliseconds = 60000;

// The per-process quotas `up` was given (--max-*-per-process); each one left out is derived
// by the daemon from its descriptor limit (verbs::default_quotas), which only the daemon
// knows once it has raised it.
struct QuotaOverrides {
  std::array<std::optional<std::uint64_t>, verbs::kResourceKinds> objects;
  std::optional<std::uint64_t> ring_bytes;

  std::optional<std::uint64_t>& of(verbs::ResourceKind kind) { return objects[static_cast<std::size_t>(kind)]; }
  const std::optional<std::uint64_t>& of(verbs::ResourceKind kind) const {
    return objects[static_cast<std::size_t>(kind)];
  }
  // `defaults` with every override applied.
  verbs::Quotas applied_to(verbs::Quotas defaults) const;
};

// One --max-KIND-per-process option: its kind, its name and the largest value accepted
// (the device-wide cap of that kind: a larger quota could never be used).
struct QuotaOption {
  verbs::ResourceKind kind;
  const char* flag;     // "--max-qps-per-process"
  const char* user_flag;  // "--max-qps-per-user"
  const char* objects;  // "QPs", for messages
  std::uint64_t max;
};
const std::array<QuotaOption, verbs::kResourceKinds>& quota_options();
inline constexpr const char* kRingBytesFlag = "--max-ring-bytes-per-process";
inline constexpr const char* kUserRingBytesFlag = "--max-ring-bytes-per-user";
inline constexpr std::uint64_t kMinRingBytesQuota = std::uint64_t{1} << 20;  // 1 MiB
inline constexpr std::uint64_t kMaxRingBytesQuota = std::uint64_t{1} << 40;  // 1 TiB

// The rdma_cm device's limits (verbs::UcmaConfig, docs/RDMA_CM.md "Limits") `up` may set;
// each left out keeps its default.
enum class CmLimit : std::uint8_t {
  ChannelsPerUid, IdsPerChannel, IdsPerProcess, IdsPerUid, EventsPerChannel, EventsPerUid, PortsPerUid
};
inline constexpr std::size_t kCmLimits = 7;
struct CmLimitOption {
  CmLimit limit;
  const char* flag;  // "--max-cm-ids-per-uid"
  const char* help;
  std::uint64_t max;
};
const std::array<CmLimitOption, kCmLimits>& cm_limit_options();
using CmLimitOverrides = std::array<std::optional<std::uint64_t>, kCmLimits>;

struct VnicConfig {
  std::string name;                 // the TAP interface and the /run/rrdma/NAME.* files
  stack::MacAddress mac;            // the vnic's own MAC (the host behind the TAP)
  stack::MacAddress tap_mac;        // the kernel side of the TAP: only a bridge port
  stack::Ipv4Cidr address;
  std::uint16_t mtu = kDefaultMtu;
  std::optional<std::string> bridge;
  bool create_bridge = false;
  std::optional<std::string> uplink;
  std::optional<stack::Ipv4Address> gateway;
  // Who may use the NIC: the control socket is mode 0660, owner root, group this one (the
  // daemon resolves the name when it starts); without it root's group only.
  std::optional<std::string> group;
  QuotaOverrides quotas;
  QuotaOverrides user_quotas;       // totals of one uid's processes (--max-*-per-user)
  CmLimitOverrides cm_limits;
  // How long the daemon's loop keeps looking for work after the last before sleeping, while
  // some CPU is idle (docs/PERFORMANCE.md, "Latency experiments"); zero: it sleeps at once.
  std::uint32_t busy_poll_us = 0;
  // `up --netdev IF`: RoCE v2 on an existing interface through the kernel's UDP; no TAP, no
  // bridge, no address of our own (mac, tap_mac, address and mtu are then the interface's,
  // read by the daemon). Needs no privilege.
  std::optional<std::string> netdev;
  // --netdev: runs of datagrams in one sendmsg (UDP_SEGMENT) and received whole (UDP_GRO),
  // where the kernel has them; false (`--no-udp-offload`): one datagram per call, sent with
  // UDP checksum 0 as rdma_rxe sends it (docs/WIRE.md, "Runs").
  bool udp_offload = true;
  // How long the loop waits for a system call on a client's memory (docs/VERBS_MEMORY.md,
  // "Memory that never answers"); 0: the calls run on the loop, unbounded.
  std::uint32_t dma_wait_ms = kDefaultDmaWaitMilliseconds;
};

// The arguments as text, before any check.
struct UpArguments {
  std::string name;
  std::string ip;                   // "10.66.0.10/24"
  std::optional<std::string> mac;
  std::uint32_t mtu = kDefaultMtu;  // wider than the field so 70000 is rejected, not wrapped
  std::optional<std::string> bridge;
  bool create_bridge = false;
  std::optional<std::string> uplink;
  std::optional<std::string> gateway;
  std::optional<std::string> group;
  QuotaOverrides quotas;            // range-checked by validate()
  QuotaOverrides user_quotas;       // range-checked by validate()
  CmLimitOverrides cm_limits;       // range-checked by validate()
  std::uint32_t busy_poll_us = 0;
  std::optional<std::string> netdev;
  bool mtu_given = false;           // --mtu was on the command line
  bool no_udp_offload = false;      // --no-udp-offload (--netdev only)
  std::uint32_t dma_wait_ms = kDefaultDmaWaitMilliseconds;
  bool dma_wait_given = false;      // --dma-wait-ms was on the command line
};

// Either a config or the one-line reason the arguments are refused.
struct Validated {
  std::optional<VnicConfig> config;
  std::string error;
};

Validated validate(const UpArguments& args);

// A group name as useradd(8) accepts it: 1..32 of letters, digits, '_', '-', '.', not
// starting with '-'. Whether the group exists is checked by the daemon.
bool is_valid_group_name(std::string_view name);

// An interface name the kernel accepts (1..15 bytes, IFNAMSIZ) and that is also safe as
// a file name under /run/rrdma: letters, digits, '-', '_', '.', not "." or "..".
bool is_valid_interface_name(std::string_view name);

// A stable, locally administered unicast MAC from a name: FNV-1a over the name (and a
// salt, so the TAP's kernel side gets a different address), then IEEE 802 bit 1 of the
// first octet set (locally administered) and bit 0 cleared (unicast).
stack::MacAddress derive_mac(std::string_view name, std::string_view salt = {});

// The kernel-side MAC of the TAP: derived like the vnic's but always different from it.
stack::MacAddress derive_tap_mac(std::string_view name, const stack::MacAddress& vnic_mac);

}  // namespace rrdma::vnic
