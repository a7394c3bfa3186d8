#include "bench/tap_frames.h"

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <stdexcept>
#include <system_error>
#include <thread>

namespace rrdma::bench {

FrameKind frame_kind = FrameKind::Ipv4;

namespace {

constexpr std::uint16_t kExperimentalEtherType = 0x88B5;
constexpr std::uint16_t kIpv4EtherType = 0x0800;
constexpr std::size_t kIpv4Header = 20;
// struct virtio_net_hdr (flags, gso_type, hdr_len, gso_size, csum_start, csum_offset):
// linux/virtio_net.h does not compile as C++ (a member there is named `class`).
constexpr std::size_t kVirtioNetHeader = 10;

std::string read_sysfs(const std::string& path) {
  std::ifstream file(path);
  std::string text;
  if (!(file >> text)) throw std::runtime_error("cannot read " + path);
  return text;
}

short feature_flags(const TapFeatures& features) {
  int flags = 0;
  if (features.napi || features.napi_frags) flags |= IFF_NAPI;
  if (features.napi_frags) flags |= IFF_NAPI_FRAGS;
  if (features.vnet_hdr) flags |= IFF_VNET_HDR;
  return static_cast<short>(flags);
}

void put_mac(std::vector<std::uint8_t>& frame, std::size_t offset, std::uint8_t last_byte) {
  const std::uint8_t mac[6] = {0x02, 0x52, 0x52, 0x00, 0x00, last_byte};
  std::copy(mac, mac + 6, frame.begin() + static_cast<std::ptrdiff_t>(offset));
}

void put_u16(std::vector<std::uint8_t>& frame, std::size_t offset, std::uint16_t value) {
  frame[offset] = static_cast<std::uint8_t>(value >> 8);
  frame[offset + 1] = static_cast<std::uint8_t>(value & 0xFF);
}

std::uint16_t load_u16(const std::uint8_t* frame, std::size_t offset) {
  return static_cast<std::uint16_t>(frame[offset] << 8 | frame[offset + 1]);
}

// RFC 791 header checksum: the ones' complement of the ones' complement sum of the words.
std::uint16_t ipv4_checksum(const std::uint8_t* header) {
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i < kIpv4Header; i += 2) sum += static_cast<std::uint32_t>(header[i] << 8 | header[i + 1]);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

// 192.0.2.0/24 (TEST-NET-1, RFC 5737): addresses nobody routes. UDP checksum 0, as RoCE v2
// sends.
void put_ipv4_udp(std::vector<std::uint8_t>& frame, std::uint8_t from, std::uint8_t to, std::uint16_t source_port,
                  std::uint16_t dest_port) {
  std::uint8_t* ip = frame.data() + 14;
  const std::size_t ip_length = frame.size() - 14;
  ip[0] = 0x45;  // version 4, 5 words
  put_u16(frame, 16, static_cast<std::uint16_t>(ip_length));
  ip[6] = 0x40;  // DF
  ip[8] = 64;    // TTL
  ip[9] = 17;    // UDP
  const std::uint8_t source[4] = {192, 0, 2, from};
  const std::uint8_t dest[4] = {192, 0, 2, to};
  std::copy(source, source + 4, ip + 12);
  std::copy(dest, dest + 4, ip + 16);
  put_u16(frame, 24, ipv4_checksum(ip));
  put_u16(frame, 34, source_port);
  put_u16(frame, 36, dest_port);
  put_u16(frame, 38, static_cast<std::uint16_t>(ip_length - kIpv4Header));
}

// A TAP of one queue takes one attach at a time, and the previous run's queue stays
// attached until the kernel has torn down that process's io_uring (asynchronously, after
// exit: the ring holds the file): EBUSY for a moment, so wait for it.
bool attach(int fd, ifreq& request) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (::ioctl(fd, TUNSETIFF, &request) != 0) {
    if (errno != EBUSY || std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// A TAP's carrier comes up when a queue is attached, and the bridge port starts forwarding
// when the kernel's linkwatch gets to that event, up to a second later. Until then the bridge
// drops what the TAP sends (the learning frames too) and keeps sending its MAC where it last
// saw it: a TAP of an earlier run.
void wait_until_forwarding(const std::string& name) {
  constexpr const char* kForwarding = "3";  // BR_STATE_FORWARDING
  const std::string state = "/sys/class/net/" + name + "/brport/state";
  if (::access(state.c_str(), R_OK) != 0) return;  // not a bridge port
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (read_sysfs(state) != kForwarding) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("the bridge port " + name + " does not forward (STP's forward delay?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

bool tap_is_multi_queue(const std::string& name) {
  const unsigned long flags = std::stoul(read_sysfs("/sys/class/net/" + name + "/tun_flags"), nullptr, 16);
  return (flags & IFF_MULTI_QUEUE) != 0;
}

std::uint64_t link_counter(const std::string& name, const std::string& counter) {
  return std::stoull(read_sysfs("/sys/class/net/" + name + "/statistics/" + counter));
}

Tap::Tap(const std::string& name, const TapFeatures& features) : name_(name) {
  if (name.size() >= IFNAMSIZ) throw std::invalid_argument("TAP name too long: " + name);
  // Non-blocking: io_uring then arms a poll for an empty queue instead of parking a worker.
  fd_ = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "open /dev/net/tun");
  ifreq request{};
  request.ifr_flags = static_cast<short>(IFF_TAP | IFF_NO_PI | feature_flags(features));
  if (tap_is_multi_queue(name)) request.ifr_flags = static_cast<short>(request.ifr_flags | IFF_MULTI_QUEUE);
  std::copy(name.begin(), name.end(), request.ifr_name);
  if (!attach(fd_, request)) {
    const int error = errno;
    ::close(fd_);
    throw std::system_error(error, std::generic_category(), "attach to TAP " + name);
  }
  if (features.vnet_hdr) header_bytes_ = kVirtioNetHeader;
}

Tap::~Tap() { ::close(fd_); }

bool Tap::write_frame(const std::vector<std::uint8_t>& frame) const {
  std::uint8_t header[kVirtioNetHeader] = {};  // no checksum or segmentation asked for
  iovec parts[2] = {{header, header_bytes_}, {const_cast<std::uint8_t*>(frame.data()), frame.size()}};
  const ssize_t wanted = static_cast<ssize_t>(header_bytes_ + frame.size());
  return ::writev(fd_, header_bytes_ > 0 ? parts : parts + 1, header_bytes_ > 0 ? 2 : 1) == wanted;
}

std::vector<std::uint8_t> make_frame(std::size_t size, std::uint8_t from, std::uint8_t to, std::uint16_t source_port,
                                     std::uint16_t dest_port) {
  std::vector<std::uint8_t> frame(std::max(size, kMinFrame), 0);
  put_mac(frame, 0, to);
  put_mac(frame, 6, from);
  if (frame_kind == FrameKind::Raw) {
    put_u16(frame, 12, kExperimentalEtherType);
  } else {
    put_u16(frame, 12, kIpv4EtherType);
    put_ipv4_udp(frame, from, to, source_port, dest_port);
  }
  return frame;
}

bool is_ours(const std::uint8_t* frame, std::size_t size) {
  if (size < kMinFrame) return false;
  if (frame_kind == FrameKind::Raw) return load_u16(frame, 12) == kExperimentalEtherType;
  return load_u16(frame, 12) == kIpv4EtherType && frame[23] == 17 && load_u16(frame, 36) == kRocePort;
}

void drain(int fd) {
  std::vector<std::uint8_t> buffer(65536);
  while (::read(fd, buffer.data(), buffer.size()) > 0) {
  }
}

void teach_bridge(const Tap& a, const Tap& b) {
  wait_until_forwarding(a.name());
  wait_until_forwarding(b.name());
  for (auto [tap, mac] : {std::pair{&a, kMacA}, std::pair{&b, kMacB}}) {
    auto frame = make_frame(kMinFrame, mac, 0xFF);
    std::fill_n(frame.begin(), 6, 0xFF);
    if (!tap->write_frame(frame)) throw std::system_error(errno, std::generic_category(), "write a learning frame");
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  drain(a.fd());
  drain(b.fd());
}

double cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

}  // namespace rrdma::bench
