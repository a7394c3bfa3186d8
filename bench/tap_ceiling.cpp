// The ceiling any TAP-based NIC has on this machine: raw Ethernet frames written into one
// TAP, switched by a Linux bridge, read from another TAP. No protocol at all, so whatever
// rrdma-vnic achieves is measured against this (bench/run prints both).
//
//   tap_ceiling --tx TAP_A --rx TAP_B --size 1082 --seconds 3 --mode bandwidth
//   tap_ceiling --tx TAP_A --rx TAP_B --size 64 --mode latency --count 2000
//   tap_ceiling --tx TAP_A --rx TAP_B --size 64 --mode echo --frames raw
//
// The TAPs must exist (bench/run creates them with `ip tuntap add ... mode tap` and puts
// them on a bridge). Two kinds of frame (--frames):
//   ipv4  (default) valid IPv4 + UDP headers (UDP checksum 0, as RoCE v2 sends), the frames a
//         RoCE NIC puts on the bridge: on a host with br_netfilter loaded every bridged IPv4
//         frame passes the iptables hooks, and this ceiling pays them as the vnics do;
//   raw   EtherType 0x88B5 (IEEE 802 local experimental), which br_netfilter passes untouched:
//         the bridge alone.
// Latency comes two ways (--mode): `latency` ping-pongs both TAPs from one thread, so no
// process ever sleeps; `echo` answers from a second thread that blocks in poll(2), as a NIC
// daemon does, so every hop pays a wake-up. Prints one JSON object on stdout.
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint16_t kExperimentalEtherType = 0x88B5;
constexpr std::uint16_t kIpv4EtherType = 0x0800;
constexpr std::size_t kIpv4Header = 20;
constexpr std::uint16_t kUdpPort = 4791;  // the RoCE v2 port: the same path through the hooks
constexpr std::size_t kMinFrame = 60;  // Ethernet minimum without FCS

class Tap {
 public:
  explicit Tap(const std::string& name) {
    fd_ = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "open /dev/net/tun");
    ifreq request{};
    request.ifr_flags = static_cast<short>(IFF_TAP | IFF_NO_PI);
    if (name.size() >= IFNAMSIZ) throw std::invalid_argument("TAP name too long: " + name);
    std::memcpy(request.ifr_name, name.c_str(), name.size());
    if (::ioctl(fd_, TUNSETIFF, &request) != 0) {
      throw std::system_error(errno, std::generic_category(), "attach to TAP " + name);
    }
  }
  ~Tap() { ::close(fd_); }
  Tap(const Tap&) = delete;
  Tap& operator=(const Tap&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

constexpr std::uint8_t kMacA = 1;  // the last byte of the MAC each TAP's frames come from
constexpr std::uint8_t kMacB = 2;

void put_mac(std::vector<std::uint8_t>& frame, std::size_t offset, std::uint8_t last_byte) {
  const std::uint8_t mac[6] = {0x02, 0x52, 0x52, 0x00, 0x00, last_byte};
  std::copy(mac, mac + 6, frame.begin() + static_cast<std::ptrdiff_t>(offset));
}

enum class FrameKind { Ipv4, Raw };
FrameKind frame_kind = FrameKind::Ipv4;  // set once from --frames

void put_u16(std::vector<std::uint8_t>& frame, std::size_t offset, std::uint16_t value) {
  frame[offset] = static_cast<std::uint8_t>(value >> 8);
  frame[offset + 1] = static_cast<std::uint8_t>(value & 0xFF);
}

std::uint16_t load_u16(const std::vector<std::uint8_t>& frame, std::size_t offset) {
  return static_cast<std::uint16_t>(frame[offset] << 8 | frame[offset + 1]);
}

// RFC 791 header checksum: the ones' complement of the ones' complement sum of the words.
std::uint16_t ipv4_checksum(const std::uint8_t* header) {
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i < kIpv4Header; i += 2) sum += static_cast<std::uint32_t>(header[i] << 8 | header[i + 1]);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

// 192.0.2.0/24 (TEST-NET-1, RFC 5737): addresses nobody routes.
void put_ipv4_udp(std::vector<std::uint8_t>& frame, std::uint8_t from, std::uint8_t to) {
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
  put_u16(frame, 34, kUdpPort);
  put_u16(frame, 36, kUdpPort);
  put_u16(frame, 38, static_cast<std::uint16_t>(ip_length - kIpv4Header));
}

// Unicast between two MACs the bridge has learnt (teach_bridge): a broadcast would be
// flooded to every other port of the bridge (vnics, veths) and measure them too.
std::vector<std::uint8_t> make_frame(std::size_t size, std::uint8_t from, std::uint8_t to) {
  std::vector<std::uint8_t> frame(std::max(size, kMinFrame), 0);
  put_mac(frame, 0, to);
  put_mac(frame, 6, from);
  if (frame_kind == FrameKind::Raw) {
    put_u16(frame, 12, kExperimentalEtherType);
  } else {
    put_u16(frame, 12, kIpv4EtherType);
    put_ipv4_udp(frame, from, to);
  }
  return frame;
}

// Ours: the right EtherType, and for IPv4 our UDP port (a stray frame of the host is not).
bool is_ours(const std::vector<std::uint8_t>& frame) {
  if (frame_kind == FrameKind::Raw) return load_u16(frame, 12) == kExperimentalEtherType;
  return load_u16(frame, 12) == kIpv4EtherType && frame[23] == 17 && load_u16(frame, 36) == kUdpPort;
}

double cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// One writer thread blasts frames into tx for `seconds`; this thread reads rx and counts
// what arrives (frames the bridge or a full TAP queue dropped are not counted: the ceiling
// is what gets through).
nlohmann::json bandwidth(Tap& tx, Tap& rx, std::size_t size, double seconds) {
  const auto frame = make_frame(size, kMacA, kMacB);
  std::atomic<bool> stop{false};
  std::uint64_t sent = 0;
  const double cpu_start = cpu_seconds();
  std::thread writer([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      if (::write(tx.fd(), frame.data(), frame.size()) == static_cast<ssize_t>(frame.size())) {
        ++sent;
      } else {
        pollfd entry{tx.fd(), POLLOUT, 0};
        ::poll(&entry, 1, 10);
      }
    }
  });
  std::vector<std::uint8_t> buffer(65536);
  std::uint64_t frames = 0;
  std::uint64_t bytes = 0;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    const ssize_t got = ::read(rx.fd(), buffer.data(), buffer.size());
    if (got < 0) {
      pollfd entry{rx.fd(), POLLIN, 0};
      ::poll(&entry, 1, 100);
      continue;
    }
    if (got == static_cast<ssize_t>(frame.size()) && is_ours(buffer)) {
      ++frames;
      bytes += static_cast<std::uint64_t>(got);
    }
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  stop = true;
  writer.join();
  return {{"mode", "bandwidth"},
          {"frame_bytes", frame.size()},
          {"seconds", elapsed},
          {"frames_sent", sent},
          {"frames_received", frames},
          {"frames_per_second", static_cast<double>(frames) / elapsed},
          {"bytes_per_second", static_cast<double>(bytes) / elapsed},
          {"cpu_seconds", cpu_seconds() - cpu_start}};
}

// Reads frames until one of `expected` bytes with our EtherType arrives (anything else, and
// leftovers of an earlier run, are skipped), for at most a second.
bool read_frame(int fd, std::vector<std::uint8_t>& buffer, std::size_t expected) {
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  while (Clock::now() < deadline) {
    const ssize_t got = ::read(fd, buffer.data(), buffer.size());
    if (got == static_cast<ssize_t>(expected) && is_ours(buffer)) return true;
    if (got < 0) {
      pollfd entry{fd, POLLIN, 0};
      ::poll(&entry, 1, 100);
    }
  }
  return false;
}

void drain(int fd) {
  std::vector<std::uint8_t> buffer(65536);
  while (::read(fd, buffer.data(), buffer.size()) > 0) {
  }
}

// One frame from each TAP's MAC, so that the bridge forwards to each by unicast; then
// whatever is queued (those frames, leftovers) is read away.
void teach_bridge(Tap& a, Tap& b) {
  for (auto [tap, mac] : {std::pair{&a, kMacA}, std::pair{&b, kMacB}}) {
    auto frame = make_frame(kMinFrame, mac, 0xFF);
    std::fill_n(frame.begin(), 6, 0xFF);
    if (::write(tap->fd(), frame.data(), frame.size()) < 0) {
      throw std::system_error(errno, std::generic_category(), "write a learning frame");
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  drain(a.fd());
  drain(b.fd());
}

// Ping-pong: a frame A -> B, B answers B -> A, both ends in this thread, one at a time. The
// one-way latency is half the round trip.
nlohmann::json latency(Tap& a, Tap& b, std::size_t size, int count) {
  const auto ping = make_frame(size, kMacA, kMacB);
  const auto pong = make_frame(size, kMacB, kMacA);
  std::vector<std::uint8_t> buffer(65536);
  std::vector<double> rtts;
  rtts.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    const auto start = Clock::now();
    if (::write(a.fd(), ping.data(), ping.size()) != static_cast<ssize_t>(ping.size()) ||
        !read_frame(b.fd(), buffer, ping.size()) ||
        ::write(b.fd(), pong.data(), pong.size()) != static_cast<ssize_t>(pong.size()) ||
        !read_frame(a.fd(), buffer, pong.size())) {
      throw std::runtime_error("a latency frame was lost after " + std::to_string(i) + " round trips");
    }
    rtts.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  std::sort(rtts.begin(), rtts.end());
  const double median = rtts[rtts.size() / 2];
  return {{"mode", "latency"},
          {"frame_bytes", ping.size()},
          {"round_trips", count},
          {"rtt_median_us", median},
          {"rtt_p99_us", rtts[rtts.size() * 99 / 100]},
          {"one_way_median_us", median / 2}};
}

// Ping-pong with a second thread as the far end: it sleeps in poll(2) on B and answers each
// frame; this thread sleeps in poll(2) on A for the answer. Every hop wakes a sleeping
// thread, as every hop through a NIC daemon does: the floor for any process-based NIC.
nlohmann::json echo(Tap& a, Tap& b, std::size_t size, int count) {
  const auto ping = make_frame(size, kMacA, kMacB);
  const auto pong = make_frame(size, kMacB, kMacA);
  std::atomic<bool> stop{false};
  std::thread responder([&] {
    std::vector<std::uint8_t> buffer(65536);
    while (!stop.load()) {
      if (read_frame(b.fd(), buffer, ping.size())) {
        if (::write(b.fd(), pong.data(), pong.size()) < 0) return;
      }
    }
  });
  std::vector<std::uint8_t> buffer(65536);
  std::vector<double> rtts;
  rtts.reserve(static_cast<std::size_t>(count));
  std::string failure;
  for (int i = 0; i < count && failure.empty(); ++i) {
    const auto start = Clock::now();
    if (::write(a.fd(), ping.data(), ping.size()) != static_cast<ssize_t>(ping.size()) ||
        !read_frame(a.fd(), buffer, pong.size())) {
      failure = "an echo frame was lost after " + std::to_string(i) + " round trips";
    }
    rtts.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  stop = true;
  responder.join();
  if (!failure.empty()) throw std::runtime_error(failure);
  std::sort(rtts.begin(), rtts.end());
  const double median = rtts[rtts.size() / 2];
  return {{"mode", "echo"},
          {"frame_bytes", ping.size()},
          {"round_trips", count},
          {"rtt_median_us", median},
          {"rtt_p99_us", rtts[rtts.size() * 99 / 100]},
          {"one_way_median_us", median / 2}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Raw frame throughput and latency between two TAPs on one bridge (the ceiling)."};
  std::string tx_name;
  std::string rx_name;
  std::size_t size = 1082;
  double seconds = 3;
  int count = 2000;
  std::string mode = "bandwidth";
  app.add_option("--tx", tx_name, "TAP to write frames into")->required();
  app.add_option("--rx", rx_name, "TAP to read them from")->required();
  app.add_option("--size", size, "frame bytes (without FCS; at least 60)")->check(CLI::Range(60, 9018));
  app.add_option("--seconds", seconds, "bandwidth run length")->check(CLI::Range(0.1, 600.0));
  app.add_option("--count", count, "latency round trips")->check(CLI::Range(10, 10000000));
  std::string frames = "ipv4";
  app.add_option("--mode", mode, "bandwidth, latency (one thread, no sleep) or echo (a second thread answers)")
      ->check(CLI::IsMember({"bandwidth", "latency", "echo"}));
  app.add_option("--frames", frames, "ipv4 (IPv4 + UDP to port 4791, as RoCE) or raw (EtherType 0x88B5)")
      ->check(CLI::IsMember({"ipv4", "raw"}));
  CLI11_PARSE(app, argc, argv);
  frame_kind = frames == "raw" ? FrameKind::Raw : FrameKind::Ipv4;
  try {
    Tap tx(tx_name);
    Tap rx(rx_name);
    teach_bridge(tx, rx);
    const auto result = mode == "bandwidth" ? bandwidth(tx, rx, size, seconds)
                        : mode == "latency" ? latency(tx, rx, size, count)
                                            : echo(tx, rx, size, count);
    std::printf("%s\n", result.dump().c_str());
    return 0;
  } catch (const std::exception& failure) {
    std::fprintf(stderr, "tap_ceiling: %s\n", failure.what());
    return 1;
  }
}
