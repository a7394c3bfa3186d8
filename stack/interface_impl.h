// Private to the stack: the interface's state, shared by the per-protocol source files
// (interface.cpp: Ethernet, routing, transmit; interface_arp.cpp; interface_ipv4.cpp:
// IPv4, ICMP, UDP).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "stack/arp.h"
#include "stack/arp_cache.h"
#include "stack/ethernet.h"
#include "stack/icmp.h"
#include "stack/interface.h"
#include "stack/ipv4.h"
#include "stack/stack_counters.h"
#include "stack/token_bucket.h"

namespace rrdma::stack {

struct Interface::Impl final : ArpCacheClient {
  Impl(InterfaceConfig config, FrameSink& sink);

  // --- counters and observation
  void count(Stat stat, std::uint64_t n = 1) { stats[static_cast<std::size_t>(stat)] += n; }
  std::uint64_t value(Stat stat) const { return stats[static_cast<std::size_t>(stat)]; }
  void drop(Stat stat, ByteSpan frame);

  // --- addressing
  bool on_link(Ipv4Address address) const;
  bool is_broadcast(Ipv4Address address) const;  // limited or our subnet's
  std::optional<Ipv4Address> next_hop(Ipv4Address destination) const;

  // --- Ethernet (interface.cpp)
  void receive_frame(ByteSpan frame, Instant now);
  void transmit(ByteSpan frame);
  // Writes the Ethernet header into the first 14 bytes of `frame` and transmits it.
  void transmit_to(const MacAddress& destination, EtherType type, MutableByteSpan frame);

  // --- ARP (interface_arp.cpp)
  void receive_arp(const EthernetView& frame, Instant now);
  void send_arp(ArpOperation operation, const MacAddress& ethernet_destination,
                const MacAddress& target_mac, Ipv4Address target_ip);
  void announce();
  void send_arp_request(Ipv4Address target, std::optional<MacAddress> known_mac) override;
  void send_pending(Ipv4Address target, const MacAddress& mac, PendingPacket packet) override;
  void arp_resolved(Ipv4Address target, const MacAddress& mac) override;
  void arp_failed(Ipv4Address target, std::size_t dropped_packets) override;

  // --- IPv4, ICMP, UDP (interface_ipv4.cpp)
  // `looped_back`: the frame comes from run_loopback(), the one way our own address may
  // arrive as a source.
  void receive_ipv4(const EthernetView& frame, Instant now, bool looped_back = false);
  void receive_icmp(const EthernetView& frame, const Ipv4View& ip, Instant now);
  void receive_udp(const EthernetView& frame, const Ipv4View& ip, Instant now);
  void answer_echo(const Ipv4View& ip, const IcmpMessage& request, Instant now);
  void send_port_unreachable(const Ipv4View& ip, Instant now);
  // Sends `message` from our address, counting `sent` unless it has no route.
  void send_icmp(Ipv4Address destination, const IcmpMessage& message, std::uint8_t dscp, Stat sent,
                 Instant now);
  // A frame buffer with room for Ethernet and an IPv4 header for `header`, header emitted
  // (identification assigned); the caller writes the payload after it.
  PendingPacket start_ipv4_packet(Ipv4Header& header);
  // Routes and sends (or queues) a frame made by start_ipv4_packet.
  SendResult send_ipv4(Ipv4Address destination, PendingPacket frame, Instant now);
  SendResult send_udp(const UdpSend& request, Instant now, PacketFinalizer* finalizer);
  // The link-layer destination of an IPv4 packet: nullopt if unroutable; a hop without a MAC
  // yet when ARP must resolve it first.
  struct LinkHop {
    Ipv4Address hop;
    std::optional<MacAddress> mac;
  };
  std::optional<LinkHop> link_hop(Ipv4Address destination, Instant now);
  // Fills `frame` (Ethernet header room included) with the IPv4 and UDP headers, the payload
  // and, through the finalizer, the trailer: emit_udp_packet (udp.h) with the request's values.
  void build_udp(const UdpSend& request, const Ipv4Header& header, MutableByteSpan frame,
                 PacketFinalizer* finalizer);
  // A packet to our own address: queued for run_loopback() (Ethernet header written here).
  void loop_back(PendingPacket frame);
  std::size_t run_loopback(Instant now, const LoopbackObserver& observe);

  InterfaceConfig config;
  Ipv4Cidr subnet;
  FrameSink& sink;
  StackObserver* observer = nullptr;
  std::array<std::uint64_t, static_cast<std::size_t>(Stat::count_)> stats{};
  ArpCache arp;
  TokenBucket icmp_errors;
  std::unordered_map<std::uint16_t, UdpHandler*> udp_ports;
  std::uint16_t next_identification = 1;
  std::optional<Instant> last_defense;  // of our address against an ARP conflict
  std::deque<PendingPacket> loopback;   // packets to our own address, not yet delivered
};

}  // namespace rrdma::stack
