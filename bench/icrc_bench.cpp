// How fast the ICRC is: compute_icrc() over packets whose transport part (BTH .. pad) is
// 64 B, 1 KiB and 4 KiB, and the bare crc32() over the same sizes; then
// verify_icrc_hidden_id() (the netdev receive check) per call, for a packet sent with IPv4
// ID 0 (one CRC) and one with another ID (the CRC, then the solve). A measurement, not a
// test: the numbers go into docs/WIRE.md. Usage: icrc_bench [seconds per size, default 0.5]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "rocev2/icrc.h"

namespace {

using rrdma::ByteSpan;
using Clock = std::chrono::steady_clock;

template <typename F>
double bytes_per_second(std::size_t bytes_per_call, double seconds, F&& f) {
  std::uint32_t sink = 0;
  std::size_t calls = 0;
  const auto start = Clock::now();
  const auto until = start + std::chrono::duration<double>(seconds);
  auto now = start;
  while (now < until) {
    for (int i = 0; i < 1024; ++i) sink ^= f();
    calls += 1024;
    now = Clock::now();
  }
  if (sink == 0x12345678) std::puts("");  // keeps the calls from being optimised away
  return static_cast<double>(calls * bytes_per_call) / std::chrono::duration<double>(now - start).count();
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// CPU time per call (not wall time: on a loaded machine the difference between two ~100 ns
// paths drowns in time slices lost to other processes).
template <typename F>
double cpu_ns_per_call(double seconds, F&& f) {
  std::uint32_t sink = 0;
  std::size_t calls = 0;
  const double start = thread_cpu_seconds();
  double now = start;
  while (now - start < seconds) {
    for (int i = 0; i < 1024; ++i) sink ^= f();
    calls += 1024;
    now = thread_cpu_seconds();
  }
  if (sink == 0x12345678) std::puts("");
  return (now - start) * 1e9 / static_cast<double>(calls);
}

// A UDP payload (BTH .. ICRC) of `size` bytes sealed for the reconstructed headers with `id`.
std::vector<std::uint8_t> sealed_payload(const rrdma::rocev2::HiddenHeaderFields& f, std::size_t size,
                                         std::uint16_t id) {
  using namespace rrdma::rocev2;
  std::vector<std::uint8_t> packet;
  const auto ip = reconstructed_ipv4_header(f, size, id);
  const auto udp = reconstructed_udp_header(f, size);
  packet.insert(packet.end(), ip->begin(), ip->end());
  packet.insert(packet.end(), udp->begin(), udp->end());
  for (std::size_t i = 0; i < size; ++i) packet.push_back(static_cast<std::uint8_t>(i * 31));
  packet[28] = 0x04;  // SEND ONLY, PadCnt 0
  packet[29] = 0x00;
  if (!seal_icrc(packet)) std::abort();
  return {packet.begin() + 28, packet.end()};
}

void hidden_id_rows(double seconds) {
  using namespace rrdma::rocev2;
  const HiddenHeaderFields f{rrdma::stack::Ipv4Address{0x0A000001}, rrdma::stack::Ipv4Address{0x0A000002}, 0xC121, 4791};
  std::printf("\n%-11s %24s %24s %16s\n", "udp payload", "hidden ID = 0 (CPU ns)", "hidden ID != 0 (CPU ns)",
              "crc32 (CPU ns)");
  for (std::size_t size : {64u, 1024u, 4096u, 9000u}) {
    const auto zero = sealed_payload(f, size, 0), hashed = sealed_payload(f, size, 0x9A3C);
    if (verify_icrc_hidden_id(f, zero).identification != 0 || verify_icrc_hidden_id(f, hashed).identification != 0x9A3C)
      std::abort();
    const double fast = cpu_ns_per_call(seconds, [&] { return verify_icrc_hidden_id(f, zero).identification + 1u; });
    const double slow = cpu_ns_per_call(seconds, [&] { return verify_icrc_hidden_id(f, hashed).identification + 0u; });
    const double crc = cpu_ns_per_call(seconds, [&] { return rrdma::rocev2::crc32(0, zero); });
    std::printf("%-11zu %24.0f %24.0f %16.0f\n", size, fast, slow, crc);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 0.5;
  std::vector<std::uint8_t> ip(20, 0x45), udp(8, 0x12);
  std::printf("%-10s %16s %16s\n", "transport", "compute_icrc", "crc32 only");
  for (std::size_t size : {64u, 1024u, 4096u}) {
    std::vector<std::uint8_t> transport(size);
    for (std::size_t i = 0; i < size; ++i) transport[i] = static_cast<std::uint8_t>(i * 31);
    const double icrc = bytes_per_second(size, seconds, [&] { return *rrdma::rocev2::compute_icrc(ip, udp, transport); });
    const double raw = bytes_per_second(size, seconds, [&] { return rrdma::rocev2::crc32(0, transport); });
    std::printf("%-10zu %11.2f GB/s %11.2f GB/s\n", size, icrc / 1e9, raw / 1e9);
  }
  hidden_id_rows(seconds);
  return 0;
}
