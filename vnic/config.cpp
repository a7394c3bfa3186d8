#include "vnic/config.h"

#include <algorithm>
#include <cctype>

#include <cstdint>

#include "verbs/device/device_caps.h"

namespace rrdma::vnic {
namespace {

constexpr std::size_t kMaxInterfaceNameLength = 15;  // IFNAMSIZ - 1 (linux/if.h)

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

// 0/8 is "this network" (RFC 1122 3.2.1.3), 127/8 loopback, 224/4 multicast and 240/4
// reserved: none of them can be a host's own address.
bool is_host_usable(stack::Ipv4Address a) {
  const std::uint32_t first_octet = a.value >> 24;
  return first_octet != 0 && first_octet != 127 && first_octet < 224;
}

std::uint32_t netmask(std::uint8_t prefix_len) {
  return prefix_len == 0 ? 0 : ~std::uint32_t{0} << (32 - prefix_len);
}

// With /31 (RFC 3021) and /32 every address is a host; otherwise the all-zeros and
// all-ones host parts name the network and its broadcast.
bool is_network_or_broadcast(const stack::Ipv4Cidr& cidr) {
  if (cidr.prefix_len >= 31) return false;
  const std::uint32_t host = cidr.address.value & ~netmask(cidr.prefix_len);
  return host == 0 || host == ~netmask(cidr.prefix_len);
}

std::uint64_t fnv1a(std::string_view a, std::string_view b) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (std::string_view part : {a, std::string_view("\0", 1), b}) {
    for (char c : part) {
      hash ^= static_cast<unsigned char>(c);
      hash *= 0x100000001b3ULL;
    }
  }
  return hash;
}

std::string check_address(const UpArguments& args, const std::optional<stack::Ipv4Cidr>& cidr) {
  if (!cidr) return "bad address '" + args.ip + "': expected A.B.C.D/LEN, e.g. 10.66.0.10/24";
  if (cidr->prefix_len < 1 || cidr->prefix_len > 32) {
    return "bad prefix length in '" + args.ip + "': expected 1..32";
  }
  if (!is_host_usable(cidr->address)) {
    return "address " + cidr->address.to_string() + " cannot be a host address";
  }
  if (is_network_or_broadcast(*cidr)) {
    return "address " + args.ip + " is the network or broadcast address of its subnet";
  }
  return {};
}

std::string check_gateway(const std::string& text, const stack::Ipv4Cidr& cidr,
                          std::optional<stack::Ipv4Address>& gateway) {
  gateway = stack::Ipv4Address::parse(text);
  if (!gateway) return "bad gateway '" + text + "': expected A.B.C.D";
  if (!cidr.contains(*gateway) || !is_host_usable(*gateway)) {
    return "gateway " + text + " is not a host in " + cidr.address.to_string() + "/" +
           std::to_string(cidr.prefix_len);
  }
  if (*gateway == cidr.address) return "gateway " + text + " is the vnic's own address";
  return {};
}

std::string check_mac(const std::string& text, std::optional<stack::MacAddress>& mac) {
  mac = stack::MacAddress::parse(text);
  if (!mac) return "bad MAC '" + text + "': expected six hex octets, e.g. 02:00:00:aa:bb:cc";
  if (mac->is_multicast()) return "MAC " + text + " is a multicast address";
  if (*mac == stack::MacAddress{}) return "MAC " + text + " is all zeros";
  return {};
}

Validated refuse(std::string error) { return {std::nullopt, std::move(error)}; }

std::string check_quotas(const QuotaOverrides& quotas, bool per_user) {
  for (const QuotaOption& option : quota_options()) {
    const auto& value = quotas.of(option.kind);
    if (value && (*value < 1 || *value > option.max)) {
      return std::string("bad ") + (per_user ? option.user_flag : option.flag) + " " + std::to_string(*value) +
             ": expected 1.." + std::to_string(option.max) + " " + option.objects;
    }
  }
  if (quotas.ring_bytes && (*quotas.ring_bytes < kMinRingBytesQuota || *quotas.ring_bytes > kMaxRingBytesQuota)) {
    return std::string("bad ") + (per_user ? kUserRingBytesFlag : kRingBytesFlag) + " " +
           std::to_string(*quotas.ring_bytes) + ": expected " +
           std::to_string(kMinRingBytesQuota) + ".." + std::to_string(kMaxRingBytesQuota) + " bytes (1MiB..1TiB)";
  }
  return {};
}

std::string check_cm_limits(const CmLimitOverrides& limits) {
  for (const CmLimitOption& option : cm_limit_options()) {
    const auto& value = limits[static_cast<std::size_t>(option.limit)];
    if (value && (*value < 1 || *value > option.max)) {
      return std::string("bad ") + option.flag + " " + std::to_string(*value) + ": expected 1.." + std::to_string(option.max);
    }
  }
  return {};
}

}  // namespace

const std::array<CmLimitOption, kCmLimits>& cm_limit_options() {
  static const std::array<CmLimitOption, kCmLimits> options = {{
      {CmLimit::ChannelsPerUid, "--max-cm-channels-per-uid", "Most rdma_cm event channels (opens of the device) one user may hold (default 1024)", 1u << 20},
      {CmLimit::IdsPerChannel, "--max-cm-ids-per-channel", "Most rdma_cm ids on one event channel (default 16384)", 1u << 24},
      {CmLimit::IdsPerProcess, "--max-cm-ids-per-process", "Most rdma_cm ids one process may hold (default 16384)", 1u << 24},
      {CmLimit::IdsPerUid, "--max-cm-ids-per-uid", "Most rdma_cm ids one user's processes may hold together (default 65536)", 1u << 24},
      {CmLimit::EventsPerChannel, "--max-cm-events-per-channel", "Most rdma_cm events queued unread on one channel (default 1024)", 1u << 24},
      {CmLimit::EventsPerUid, "--max-cm-events-per-uid", "Most rdma_cm events queued unread for one user (default 16384)", 1u << 24},
      {CmLimit::PortsPerUid, "--max-cm-ports-per-uid", "Most rdma_cm ports one user's ids may hold bound (default 4096; 28232 are ephemeral)", 65535},
  }};
  return options;
}

const std::array<QuotaOption, verbs::kResourceKinds>& quota_options() {
  using verbs::ResourceKind;
  namespace caps = verbs::caps;
  // Contexts have no device-wide cap of their own; each holds two descriptors, like a CQ.
  static const std::array<QuotaOption, verbs::kResourceKinds> options = {{
      {ResourceKind::Context, "--max-contexts-per-process", "--max-contexts-per-user", "contexts", caps::kMaxCq},
      {ResourceKind::Pd, "--max-pds-per-process", "--max-pds-per-user", "PDs", caps::kMaxPd},
      {ResourceKind::Cq, "--max-cqs-per-process", "--max-cqs-per-user", "CQs", caps::kMaxCq},
      {ResourceKind::Qp, "--max-qps-per-process", "--max-qps-per-user", "QPs", caps::kMaxQp},
      {ResourceKind::Srq, "--max-srqs-per-process", "--max-srqs-per-user", "SRQs", caps::kMaxSrq},
      {ResourceKind::Ah, "--max-ahs-per-process", "--max-ahs-per-user", "AHs", caps::kMaxAh},
      {ResourceKind::Mr, "--max-mrs-per-process", "--max-mrs-per-user", "MRs", caps::kMaxMr},
  }};
  return options;
}

verbs::Quotas QuotaOverrides::applied_to(verbs::Quotas defaults) const {
  for (verbs::ResourceKind kind : verbs::kAllResourceKinds) {
    if (of(kind)) defaults.of(kind) = *of(kind);
  }
  if (ring_bytes) defaults.ring_bytes = *ring_bytes;
  return defaults;
}

bool is_valid_interface_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxInterfaceNameLength) return false;
  if (name == "." || name == "..") return false;
  for (char c : name) {
    if (!is_name_char(c)) return false;
  }
  return true;
}

stack::MacAddress derive_mac(std::string_view name, std::string_view salt) {
  const std::uint64_t hash = fnv1a(name, salt);
  stack::MacAddress mac;
  for (std::size_t i = 0; i < mac.bytes.size(); ++i) {
    mac.bytes[i] = static_cast<std::uint8_t>(hash >> (8 * i));
  }
  mac.bytes[0] = static_cast<std::uint8_t>((mac.bytes[0] & 0xfc) | 0x02);
  return mac;
}

stack::MacAddress derive_tap_mac(std::string_view name, const stack::MacAddress& vnic_mac) {
  stack::MacAddress mac = derive_mac(name, "tap");
  // Two hosts on one bridge must never share a MAC; flipping a low bit keeps the
  // address locally administered and unicast.
  if (mac == vnic_mac) mac.bytes[5] ^= 0x01;
  return mac;
}

namespace {

// What both kinds of device take alike (group, quotas and rdma_cm limits, busy polling, the
// DMA wait): set, or why they are refused.
std::string apply_shared(const UpArguments& args, VnicConfig& config) {
  if (args.group && !is_valid_group_name(*args.group)) return "bad group name '" + *args.group + "'";
  config.group = args.group;
  if (auto error = check_quotas(args.quotas, false); !error.empty()) return error;
  config.quotas = args.quotas;
  if (auto error = check_quotas(args.user_quotas, true); !error.empty()) return error;
  config.user_quotas = args.user_quotas;
  if (auto error = check_cm_limits(args.cm_limits); !error.empty()) return error;
  config.cm_limits = args.cm_limits;
  if (args.busy_poll_us > kMaxBusyPollMicroseconds) {
    return "bad --busy-poll-us " + std::to_string(args.busy_poll_us) + ": expected 0.." +
           std::to_string(kMaxBusyPollMicroseconds);
  }
  config.busy_poll_us = args.busy_poll_us;
  if (args.dma_wait_ms > kMaxDmaWaitMilliseconds) {
    return "bad --dma-wait-ms " + std::to_string(args.dma_wait_ms) + ": expected 0.." +
           std::to_string(kMaxDmaWaitMilliseconds);
  }
  // Not given: bounded when the NIC is shared (kSharedDmaWaitMilliseconds), else on the loop.
  config.dma_wait_ms = args.dma_wait_given ? args.dma_wait_ms
                       : config.group       ? kSharedDmaWaitMilliseconds
                                            : kDefaultDmaWaitMilliseconds;
  return {};
}

// `up --netdev`: the interface gives the address, MAC and MTU; the options that make a TAP
// host of its own have no meaning.
Validated validate_netdev(const UpArguments& args) {
  if (!is_valid_interface_name(*args.netdev)) return refuse("bad interface name '" + *args.netdev + "'");
  const std::pair<bool, const char*> tap_only[] = {
      {!args.ip.empty(), "--ip"},         {args.mac.has_value(), "--mac"},     {args.mtu_given, "--mtu"},
      {args.bridge.has_value(), "--bridge"}, {args.create_bridge, "--create-bridge"},
      {args.uplink.has_value(), "--uplink"}, {args.gateway.has_value(), "--gateway"}};
  for (const auto& [given, flag] : tap_only) {
    if (given) {
      return refuse(std::string(flag) + " cannot go with --netdev: the interface " + *args.netdev +
                    " has its own address, MAC and MTU");
    }
  }
  VnicConfig config;
  if (auto error = apply_shared(args, config); !error.empty()) return refuse(error);
  config.name = args.name;
  config.netdev = args.netdev;
  config.udp_offload = !args.no_udp_offload;
  return {std::move(config), {}};
}

}  // namespace

Validated validate(const UpArguments& args) {
  if (!is_valid_interface_name(args.name)) {
    return refuse("bad name '" + args.name +
                  "': 1 to 15 characters of letters, digits, '-', '_' or '.'");
  }
  if (args.netdev) return validate_netdev(args);
  const auto cidr = stack::Ipv4Cidr::parse(args.ip);
  if (auto error = check_address(args, cidr); !error.empty()) return refuse(error);
  if (args.mtu < kMinMtu || args.mtu > kMaxMtu) {
    return refuse("bad MTU " + std::to_string(args.mtu) + ": expected " + std::to_string(kMinMtu) +
                  ".." + std::to_string(kMaxMtu));
  }
  VnicConfig config;
  config.name = args.name;
  config.address = *cidr;
  config.mtu = static_cast<std::uint16_t>(args.mtu);
  config.mac = derive_mac(args.name);
  if (args.mac) {
    std::optional<stack::MacAddress> mac;
    if (auto error = check_mac(*args.mac, mac); !error.empty()) return refuse(error);
    config.mac = *mac;
  }
  config.tap_mac = derive_tap_mac(args.name, config.mac);
  if (args.gateway) {
    if (auto error = check_gateway(*args.gateway, *cidr, config.gateway); !error.empty()) {
      return refuse(error);
    }
  }
  if (args.create_bridge && !args.bridge) return refuse("--create-bridge needs --bridge BR");
  if (args.uplink && !args.bridge) return refuse("--uplink needs --bridge BR");
  for (const auto* other : {&args.bridge, &args.uplink}) {
    if (*other && !is_valid_interface_name(**other)) {
      return refuse("bad interface name '" + **other + "'");
    }
    if (*other && **other == args.name) return refuse("'" + args.name + "' is used twice");
  }
  if (args.bridge && args.uplink && *args.bridge == *args.uplink) {
    return refuse("the uplink cannot be the bridge itself");
  }
  if (auto error = apply_shared(args, config); !error.empty()) return refuse(error);
  config.bridge = args.bridge;
  config.create_bridge = args.create_bridge;
  config.uplink = args.uplink;
  return {std::move(config), {}};
}

bool is_valid_group_name(std::string_view name) {
  if (name.empty() || name.size() > 32 || name.front() == '-') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' || c == '.';
  });
}

}  // namespace rrdma::vnic
