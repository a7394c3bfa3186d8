// The network interface of the vnic: everything between the TAP frames and the UDP
// port table. Pure logic: frames in through receive_frame(), frames out through the
// FrameSink given at construction, time passed in, timers driven by poll().
//
// API contract used by vnic/ (the daemon). The stack may grow, but these members
// keep their meaning.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "stack/addresses.h"
#include "stack/arp_timers.h"
#include "stack/bytes.h"
#include "stack/ipv4.h"
#include "stack/time.h"
#include "stack/udp.h"

namespace rrdma::stack {

// Where finished Ethernet frames go (the daemon batches them into TAP writes).
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  virtual void transmit(ByteSpan frame) = 0;
  // Building in place, for a sink with transmit memory of its own (the daemon's registered
  // transmit slots): `size` bytes to build one frame in, then sent with transmit_prepared().
  // Empty when the sink has no room (or no such memory); the frame is then built elsewhere
  // and given to transmit(). One frame at a time: prepare, fill, transmit_prepared.
  virtual MutableByteSpan prepare(std::size_t /*size*/) { return {}; }
  virtual void transmit_prepared(MutableByteSpan /*frame*/) {}
  // Frames the sink takes now without holding them back; for senders that pace themselves
  // (the RoCE engine). A sink that never fills has no limit.
  virtual std::size_t transmit_room() const { return static_cast<std::size_t>(-1); }
};

// ICMP errors are rate-limited by a token bucket (RFC 1812 4.3.2.8; RFC 1122 3.2.2
// asks hosts to limit them too): `burst` tokens, one more every `refill_interval`.
// Linux allows one per second per destination with a burst of 6; we keep one bucket.
struct IcmpRateLimit {
  std::uint32_t burst = 10;
  Duration refill_interval = std::chrono::milliseconds(100);
};

struct InterfaceConfig {
  MacAddress mac;
  Ipv4Address address;
  std::uint8_t prefix_len = 24;
  std::optional<Ipv4Address> gateway;
  std::uint16_t mtu = 1500;  // IP MTU: the largest IPv4 packet we send or accept
  ArpTimers arp;
  IcmpRateLimit icmp_rate_limit;
};

// One received UDP datagram, valid only during the call. The raw header spans are the
// bytes as received (RoCE v2's ICRC covers them, IBA Annex A17).
struct UdpDatagram {
  const Ipv4Header& ip;       // parsed (options dropped)
  ByteSpan ip_header;         // raw IPv4 header, options included
  ByteSpan udp_header;        // raw 8-byte UDP header
  MacAddress source_mac;
  std::uint16_t source_port;
  std::uint16_t destination_port;
  ByteSpan payload;           // up to the UDP length (Ethernet padding excluded)
};

class UdpHandler {
 public:
  virtual ~UdpHandler() = default;
  virtual void receive_udp(const UdpDatagram& datagram, Instant now) = 0;
};

// A UDP datagram for send_udp(): the payload as bytes, or `payload_length` bytes a
// PayloadWriter writes in place. `trailer_length` bytes follow the payload; the
// PacketFinalizer writes them once the IPv4 and UDP headers are final (emit_udp_packet in
// stack/udp.h lays the packet out).
struct UdpSend {
  Ipv4Address destination;
  std::uint16_t source_port = 0;
  std::uint16_t destination_port = 0;
  ByteSpan payload;
  PayloadWriter* payload_writer = nullptr;  // when set, writes payload_length bytes
  std::size_t payload_length = 0;
  std::size_t trailer_length = 0;
  bool compute_checksum = true;  // false sends checksum 0, as RoCE v2 does
  bool dont_fragment = true;
  std::uint8_t ttl = 64;
  std::uint8_t dscp = 0;
  std::uint8_t ecn = 0;
};

// Whether packets to a destination can leave now (Interface::reach).
enum class Reach {
  reachable,   // the next hop's MAC is known, or the destination is our own address
  resolving,   // ARP is asking for the next hop (started by the call if need be)
  unroutable,  // off-link destination and no gateway
};

enum class SendResult {
  sent,        // handed to the FrameSink
  queued,      // waiting for ARP to resolve the next hop
  unroutable,  // off-link destination and no gateway
  too_big,     // larger than the MTU (we never fragment)
};

// Events a learner may want to watch (`rrdma-vnic trace`). Every method is a no-op by
// default; with no observer set, each event costs one pointer test.
class StackObserver {
 public:
  virtual ~StackObserver() = default;
  virtual void arp_resolved(Ipv4Address, const MacAddress&) {}
  virtual void arp_failed(Ipv4Address, std::size_t /*dropped_packets*/) {}
  // Another host claims our address (RFC 5227 section 2.4).
  virtual void arp_conflict(Ipv4Address /*ours*/, const MacAddress& /*claimant*/) {}
  // A received frame was dropped; `layer` and `reason` are the counter's names.
  virtual void frame_dropped(std::string_view /*layer*/, std::string_view /*reason*/,
                             ByteSpan /*frame*/) {}
  // A frame to our own address was queued for run_loopback() instead of being sent: what
  // a frame sink would have seen (the frame as it will be delivered, valid during the call).
  virtual void frame_looped_back(ByteSpan /*frame*/) {}
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

// Sees each packet to our own address as it is delivered (`rrdma-vnic capture`).
using LoopbackObserver = std::function<void(ByteSpan frame)>;

// At most this many packets to our own address wait for run_loopback(); more are dropped
// (ipv4.tx_loopback_full), as a full transmit queue would drop them.
inline constexpr std::size_t kLoopbackQueueLimit = 1024;
// Of those, transmit_room() leaves this many to senders that do not pace themselves (ACKs,
// atomic responses, CM MADs between QPs of one vnic), as the daemon does with its slots.
inline constexpr std::size_t kLoopbackUnpacedReserve = 64;

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

  // UDP port dispatch. A later bind of the same port replaces the handler; the handler
  // must outlive its binding. Datagrams to an unbound port are answered with ICMP port
  // unreachable (RFC 1122 3.2.2.1, rate-limited).
  void bind_udp(std::uint16_t port, UdpHandler& handler);
  void unbind_udp(std::uint16_t port);

  // Builds an IPv4/UDP packet from us to `request.destination` and sends it, or queues it
  // until ARP resolves the next hop. `finalizer` (may be null) writes the trailer.
  SendResult send_udp(const UdpSend& request, Instant now, PacketFinalizer* finalizer = nullptr);

  // Whether `destination` is reachable now, starting ARP for its next hop if it is not:
  // rdma_resolve_addr asks this until it is reachable or its timeout passes.
  Reach reach(Ipv4Address destination, Instant now);

  // Packets to our own address (a RoCE QP connected to another QP of the same vnic) never
  // reach the frame sink: like Linux's loopback device, send_udp() queues them and this
  // delivers them as received frames, the ones queued before the call; what their handling
  // sends to us waits for the next call. Never from inside a send: the sender may be in the
  // middle of handling a received packet. Returns how many were delivered.
  std::size_t run_loopback(Instant now, const LoopbackObserver& observe = {});
  bool loopback_pending() const;

  // Packets send_udp() can take now without holding any back: the sink's room, and no more
  // than the loopback queue still holds short of kLoopbackUnpacedReserve (a sender that paces
  // itself by this loses nothing to either). Packets waiting for ARP are not counted: they
  // are few and bounded.
  std::size_t transmit_room() const;

  // nullptr for none. The observer must outlive the interface or be reset first.
  void set_observer(StackObserver* observer);

  const InterfaceConfig& config() const;
  std::vector<Counter> counters() const;
  std::vector<ArpEntry> arp_entries(Instant now) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rrdma::stack
