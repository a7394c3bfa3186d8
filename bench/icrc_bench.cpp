// How fast the ICRC is: compute_icrc() over packets whose transport part (BTH .. pad) is
// 64 B, 1 KiB and 4 KiB, and the bare crc32() over the same sizes. A measurement, not a
// test: the numbers go into docs/WIRE.md. Usage: icrc_bench [seconds per size, default 0.5]
#include <chrono>
#include <cstdio>
#include <cstdlib>
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
  return 0;
}
