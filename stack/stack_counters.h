// The interface's counters: one enum, one table of (layer, name), one array of values.
// The names are an interface of their own: `rrdma-vnic stats` and the tests use them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace rrdma::stack {

enum class Stat : std::size_t {
  eth_rx_frames, eth_rx_bytes, eth_tx_frames, eth_tx_bytes, eth_drop_short,
  eth_drop_not_for_us, eth_drop_multicast, eth_drop_unknown_ethertype,
  arp_rx_requests, arp_rx_replies, arp_tx_requests, arp_tx_replies, arp_tx_announcements,
  arp_drop_malformed, arp_resolve_failed, arp_conflicts, arp_queue_overflow,
  ip_rx_packets, ip_tx_packets, ip_drop_truncated, ip_drop_bad_version, ip_drop_bad_ihl,
  ip_drop_bad_length, ip_drop_bad_checksum, ip_drop_too_big, ip_drop_bad_source,
  ip_drop_fragment, ip_drop_not_for_us, ip_drop_unknown_protocol, ip_drop_unroutable,
  ip_tx_too_big, ip_tx_loopback, ip_rx_loopback, ip_tx_loopback_full,
  icmp_rx_echo_requests, icmp_rx_echo_replies, icmp_rx_unreachable, icmp_tx_echo_replies,
  icmp_tx_port_unreachable, icmp_port_unreachable_rate_limited, icmp_drop_malformed,
  icmp_drop_bad_checksum, icmp_drop_unknown_type, icmp_drop_broadcast_echo,
  udp_rx_datagrams, udp_tx_datagrams, udp_drop_truncated, udp_drop_bad_length,
  udp_drop_bad_checksum, udp_drop_no_port,
  count_,
};

struct StatName {
  std::string_view layer;
  std::string_view name;
};

inline constexpr std::array<StatName, static_cast<std::size_t>(Stat::count_)> stat_names = {{
    {"ethernet", "rx_frames"}, {"ethernet", "rx_bytes"}, {"ethernet", "tx_frames"},
    {"ethernet", "tx_bytes"}, {"ethernet", "drop_short"}, {"ethernet", "drop_not_for_us"},
    {"ethernet", "drop_multicast"}, {"ethernet", "drop_unknown_ethertype"},
    {"arp", "rx_requests"}, {"arp", "rx_replies"}, {"arp", "tx_requests"},
    {"arp", "tx_replies"}, {"arp", "tx_announcements"}, {"arp", "drop_malformed"},
    {"arp", "resolve_failed"}, {"arp", "conflicts"}, {"arp", "queue_overflow"},
    {"ipv4", "rx_packets"}, {"ipv4", "tx_packets"}, {"ipv4", "drop_truncated"},
    {"ipv4", "drop_bad_version"}, {"ipv4", "drop_bad_ihl"}, {"ipv4", "drop_bad_length"},
    {"ipv4", "drop_bad_checksum"}, {"ipv4", "drop_too_big"}, {"ipv4", "drop_bad_source"},
    {"ipv4", "drop_fragment"}, {"ipv4", "drop_not_for_us"}, {"ipv4", "drop_unknown_protocol"},
    {"ipv4", "drop_unroutable"}, {"ipv4", "tx_too_big"},
    {"ipv4", "tx_loopback"}, {"ipv4", "rx_loopback"}, {"ipv4", "tx_loopback_full"},
    {"icmp", "rx_echo_requests"}, {"icmp", "rx_echo_replies"}, {"icmp", "rx_unreachable"},
    {"icmp", "tx_echo_replies"}, {"icmp", "tx_port_unreachable"},
    {"icmp", "port_unreachable_rate_limited"}, {"icmp", "drop_malformed"},
    {"icmp", "drop_bad_checksum"}, {"icmp", "drop_unknown_type"},
    {"icmp", "drop_broadcast_echo"},
    {"udp", "rx_datagrams"}, {"udp", "tx_datagrams"}, {"udp", "drop_truncated"},
    {"udp", "drop_bad_length"}, {"udp", "drop_bad_checksum"}, {"udp", "drop_no_port"},
}};

constexpr const StatName& stat_name(Stat stat) { return stat_names[static_cast<std::size_t>(stat)]; }

// Every entry filled: a missing name would leave an empty layer.
static_assert([] {
  for (const StatName& n : stat_names) {
    if (n.layer.empty() || n.name.empty()) return false;
  }
  return true;
}());

}  // namespace rrdma::stack
