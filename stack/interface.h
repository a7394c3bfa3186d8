// The network interface of the vnic: everything between the TAP frames and the UDP
// port table. Pure logic: frames in through receive_frame(), frames out through the
// FrameSink given at construction, time passed in, timers driven by poll().
//
// API contract used by vnic/ (the daemon). The stack may grow, but these members
// keep their meaning.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "stack/addresses.h"
#include "stack/bytes.h"
#include "stack/time.h"

namespace rrdma::stack {

// Where finished Ethernet frames go (the daemon batches them into TAP writes).
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  virtual void transmit(ByteSpan frame) = 0;
};

struct InterfaceConfig {
  MacAddress mac;
  Ipv4Address address;
  std::uint8_t prefix_len = 24;
  std::optional<Ipv4Address> gateway;
  std::uint16_t mtu = 1500;  // IP MTU: the largest IPv4 packet we send or accept
};

// A named counter, grouped by layer, for `rrdma-vnic stats`.
struct Counter {
  std::string_view layer;  // "ethernet", "arp", "ipv4", "icmp", "udp"
  std::string_view name;   // e.g. "rx_packets", "drop_bad_checksum"
  std::uint64_t value;
};

struct ArpEntry {
  Ipv4Address address;
  MacAddress mac;
  Duration age;  // since last confirmed
};

class Interface {
 public:
  Interface(InterfaceConfig config, FrameSink& sink);
  ~Interface();
  Interface(const Interface&) = delete;
  Interface& operator=(const Interface&) = delete;

  // One received Ethernet frame (no FCS). Hostile input: every malformed frame is
  // counted under a drop reason and ignored.
  void receive_frame(ByteSpan frame, Instant now);

  // Runs due timers (ARP retries and aging, rate-limit refill). Returns the next
  // instant poll() wants to be called, if any.
  std::optional<Instant> poll(Instant now);

  // Gratuitous ARP, sent when the vnic comes up.
  void announce(Instant now);

  const InterfaceConfig& config() const;
  std::vector<Counter> counters() const;
  std::vector<ArpEntry> arp_entries(Instant now) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rrdma::stack
