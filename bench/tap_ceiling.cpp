// The ceiling any TAP-based NIC has on this machine: raw Ethernet frames written into one
// TAP, switched by a Linux bridge, read from another TAP. No protocol at all, so whatever
// rrdma-vnic achieves is measured against this (bench/run prints both).
//
//   tap_ceiling --tx TAP_A --rx TAP_B --size 1082 --seconds 3 --mode batched --queues 2
//   tap_ceiling --tx TAP_A --rx TAP_B --size 1082 --seconds 3 --mode bandwidth
//   tap_ceiling --tx TAP_A --rx TAP_B --size 64 --mode latency --count 2000
//   tap_ceiling --tx TAP_A --rx TAP_B --size 64 --mode echo --frames raw
//
// The TAPs must exist (bench/run creates them with `ip tuntap add ... mode tap [multi_queue]`
// and puts them on a bridge). Bandwidth comes two ways (--mode):
//   batched    the most any program gets through the TAPs: io_uring, many writes per
//              io_uring_enter, many reads in flight, registered files and buffers, the TAP
//              features asked for, a thread per TAP queue (bench/tap_batched.h);
//   bandwidth  one write(2) per frame from one thread, one read(2) per frame in another:
//              the old ceiling, "one call per frame".
// Two kinds of frame (--frames):
//   ipv4  (default) valid IPv4 + UDP headers (UDP checksum 0, as RoCE v2 sends), the frames a
//         RoCE NIC puts on the bridge: on a host with br_netfilter loaded every bridged IPv4
//         frame passes the iptables hooks, and this ceiling pays them as the vnics do;
//   raw   EtherType 0x88B5 (IEEE 802 local experimental), which br_netfilter passes untouched:
//         the bridge alone.
// Latency comes two ways (--mode): `latency` ping-pongs both TAPs from one thread, so no
// process ever sleeps; `echo` answers from a second thread that blocks in poll(2), as a NIC
// daemon does, so every hop pays a wake-up. Prints one JSON object on stdout.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/tap_batched.h"
#include "bench/tap_frames.h"

namespace rrdma::bench {
namespace {

using Clock = std::chrono::steady_clock;

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
    if (got == static_cast<ssize_t>(frame.size()) && is_ours(buffer.data(), static_cast<std::size_t>(got))) {
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
    if (got == static_cast<ssize_t>(expected) && is_ours(buffer.data(), static_cast<std::size_t>(got))) return true;
    if (got < 0) {
      pollfd entry{fd, POLLIN, 0};
      ::poll(&entry, 1, 100);
    }
  }
  return false;
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

// --features napi,napi_frags,vnet_hdr (any of them, comma separated).
TapFeatures parse_features(const std::string& list) {
  TapFeatures features;
  std::stringstream items(list);
  for (std::string item; std::getline(items, item, ',');) {
    if (item == "napi") {
      features.napi = true;
    } else if (item == "napi_frags") {
      features.napi_frags = true;
    } else if (item == "vnet_hdr") {
      features.vnet_hdr = true;
    } else if (!item.empty()) {
      throw std::invalid_argument("unknown TAP feature '" + item + "' (napi, napi_frags, vnet_hdr)");
    }
  }
  return features;
}

RxBuffers parse_rx(const std::string& name) {
  if (name == "plain") return RxBuffers::Plain;
  if (name == "fixed") return RxBuffers::Fixed;
  if (name == "provided") return RxBuffers::Provided;
  return RxBuffers::Multishot;
}

nlohmann::json run_mode(const std::string& mode, BatchedConfig& batched, int count) {
  if (mode == "batched") return batched_bandwidth(batched);
  Tap tx(batched.tx_name);
  Tap rx(batched.rx_name);
  teach_bridge(tx, rx);
  if (mode == "bandwidth") return bandwidth(tx, rx, batched.frame_size, batched.seconds);
  if (mode == "latency") return latency(tx, rx, batched.frame_size, count);
  return echo(tx, rx, batched.frame_size, count);
}

}  // namespace rrdma::bench

int main(int argc, char** argv) {
  using namespace rrdma::bench;
  CLI::App app{"Raw frame throughput and latency between two TAPs on one bridge (the ceiling)."};
  BatchedConfig batched;
  int count = 2000;
  std::string mode = "bandwidth";
  std::string frames = "ipv4";
  std::string rx = "fixed";
  std::string features;
  bool plain_files = false;
  bool plain_tx = false;
  app.add_option("--tx", batched.tx_name, "TAP to write frames into")->required();
  app.add_option("--rx", batched.rx_name, "TAP to read them from")->required();
  app.add_option("--size", batched.frame_size, "frame bytes (without FCS; at least 60)")->check(CLI::Range(60, 9018));
  app.add_option("--seconds", batched.seconds, "bandwidth run length")->check(CLI::Range(0.1, 600.0));
  app.add_option("--count", count, "latency round trips")->check(CLI::Range(10, 10000000));
  app.add_option("--mode", mode,
                 "batched (io_uring, the ceiling), bandwidth (one call per frame), latency (one thread, no "
                 "sleep) or echo (a second thread answers)")
      ->check(CLI::IsMember({"batched", "bandwidth", "latency", "echo"}));
  app.add_option("--frames", frames, "ipv4 (IPv4 + UDP to port 4791, as RoCE) or raw (EtherType 0x88B5)")
      ->check(CLI::IsMember({"ipv4", "raw"}));
  app.add_option("--depth", batched.depth, "batched: writes per io_uring_enter per queue")->check(CLI::Range(1, 4096));
  app.add_option("--reads", batched.reads, "batched: reads in flight per queue (buffers for multishot)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--queues", batched.queues, "batched: TAP queues per side (multi_queue TAPs for more than 1)")
      ->check(CLI::Range(1, 16));
  app.add_flag("--split", batched.split, "batched: a writer and a reader thread per queue (default: one for both)");
  app.add_option("--rx-buffers", rx, "batched: plain, fixed (READ_FIXED), provided (buffer ring) or multishot")
      ->check(CLI::IsMember({"plain", "fixed", "provided", "multishot"}));
  app.add_flag("--plain-tx", plain_tx, "batched: IORING_OP_WRITE instead of WRITE_FIXED");
  app.add_flag("--plain-files", plain_files, "batched: no registered file table");
  app.add_option("--features", features, "batched: TAP features, comma separated: napi, napi_frags, vnet_hdr");
  CLI11_PARSE(app, argc, argv);
  frame_kind = frames == "raw" ? FrameKind::Raw : FrameKind::Ipv4;
  try {
    batched.rx = parse_rx(rx);
    batched.fixed_tx = !plain_tx;
    batched.fixed_files = !plain_files;
    batched.features = parse_features(features);
    const auto result = run_mode(mode, batched, count);
    std::printf("%s\n", result.dump().c_str());
    return 0;
  } catch (const std::exception& failure) {
    std::fprintf(stderr, "tap_ceiling: %s\n", failure.what());
    return 1;
  }
}
