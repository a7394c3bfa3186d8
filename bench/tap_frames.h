// What both ceilings of bench/tap_ceiling share: a TAP queue opened with the features asked
// for, the frames written through the bridge, and the process's CPU time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rrdma::bench {

// The TAP features the batched ceiling tries (linux/if_tun.h); all off is a plain TAP.
struct TapFeatures {
  bool napi = false;        // IFF_NAPI: writes go through a NAPI context (GRO) of their own
  bool napi_frags = false;  // IFF_NAPI_FRAGS (needs napi): the skb from napi_get_frags
  bool vnet_hdr = false;    // IFF_VNET_HDR: a virtio_net_hdr before every frame, both ways
};

// One queue of an existing TAP (bench/run makes them with `ip tuntap add`). A TAP made
// with `multi_queue` must be attached with IFF_MULTI_QUEUE and each attach adds a queue;
// the flag is read from the TAP's sysfs tun_flags so the caller need not know.
class Tap {
 public:
  Tap(const std::string& name, const TapFeatures& features = {});
  ~Tap();
  Tap(const Tap&) = delete;
  Tap& operator=(const Tap&) = delete;
  int fd() const { return fd_; }
  const std::string& name() const { return name_; }
  // The bytes before each frame in every read and write (0, or 10 with IFF_VNET_HDR).
  std::size_t header_bytes() const { return header_bytes_; }
  // One frame with the header this queue expects (zeroed: no offload asked for).
  bool write_frame(const std::vector<std::uint8_t>& frame) const;

 private:
  int fd_ = -1;
  std::string name_;
  std::size_t header_bytes_ = 0;
};

bool tap_is_multi_queue(const std::string& name);
// A counter of /sys/class/net/NAME/statistics (rx_dropped, tx_dropped, ...).
std::uint64_t link_counter(const std::string& name, const std::string& counter);

enum class FrameKind { Ipv4, Raw };
extern FrameKind frame_kind;  // set once from --frames

constexpr std::uint8_t kMacA = 1;  // the last byte of the MAC each TAP's frames come from
constexpr std::uint8_t kMacB = 2;
constexpr std::uint16_t kRocePort = 4791;  // the RoCE v2 port: the same path through the hooks
constexpr std::size_t kMinFrame = 60;      // Ethernet minimum without FCS

// Unicast between two MACs the bridge has learnt (teach_bridge): a broadcast would be
// flooded to every other port of the bridge (vnics, veths) and measure them too. The UDP
// source port tells flows apart, as RoCE's does between QPs.
std::vector<std::uint8_t> make_frame(std::size_t size, std::uint8_t from, std::uint8_t to,
                                     std::uint16_t source_port = kRocePort, std::uint16_t dest_port = kRocePort);
// Ours: the right EtherType, and for IPv4 our UDP port (a stray frame of the host is not).
bool is_ours(const std::uint8_t* frame, std::size_t size);

// One frame from each TAP's MAC, so that the bridge forwards to each by unicast; then
// whatever is queued (those frames, leftovers) is read away.
void teach_bridge(const Tap& a, const Tap& b);
void drain(int fd);

// User + system time of the whole process (all its threads).
double cpu_seconds();

}  // namespace rrdma::bench
