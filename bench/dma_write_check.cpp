// What the daemon's DMA pays per write (docs/VERBS_MEMORY.md, "Writes only where the owner may
// write"): a pwrite(2) on a mem file against the maps check that guards it (PROCMAP_QUERY).
// This process plays the client: its own /proc/self/mem and /proc/self/maps, as the daemon holds
// a client's. Prints one line per measurement: name, iterations, ns per call (best of 5 runs,
// since the machine is shared).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <functional>
#include <vector>

#include "verbs/device/address_layout.h"
#include "verbs/device/dma_thread.h"

namespace {

double best_ns_per_call(int iterations, const std::function<void()>& call) {
  double best = 1e18;
  for (int run = 0; run < 5; ++run) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) call();
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count() / iterations);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 100000;
  const int memory = ::open("/proc/self/mem", O_RDWR | O_CLOEXEC);
  const int maps = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  constexpr std::size_t kRegion = 1 << 20;
  auto* region = static_cast<std::uint8_t*>(::mmap(nullptr, kRegion, PROT_READ | PROT_WRITE,
                                                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
  if (memory < 0 || maps < 0 || region == MAP_FAILED) return 1;
  const auto at = reinterpret_cast<std::uintptr_t>(region);
  std::vector<std::uint8_t> source(65536, 0x5A);
  bool ok = true;
  for (const std::size_t length : {std::size_t{64}, std::size_t{4096}, std::size_t{65536}}) {
    const double ns = best_ns_per_call(iterations, [&] {
      ok = ::pwrite(memory, source.data(), length, static_cast<off_t>(at)) == static_cast<ssize_t>(length) && ok;
    });
    std::printf("pwrite_%zu %d %.0f\n", length, iterations, ns);
  }
  for (const std::size_t length : {std::size_t{4096}, kRegion}) {
    const double ns = best_ns_per_call(iterations, [&] {
      ok = rrdma::verbs::writable_range(maps, at, length) == rrdma::verbs::Writable::Yes && ok;
    });
    std::printf("maps_check_%zu %d %.0f\n", length, iterations, ns);
  }
  // The same writes as the daemon makes them since issue 27 item 6: the bytes copied into a
  // buffer of the call's own, the call run on the DMA thread, the loop waiting for it.
  rrdma::verbs::DmaThread thread(std::chrono::milliseconds{10000});
  for (const std::size_t length : {std::size_t{64}, std::size_t{4096}, std::size_t{65536}}) {
    const double ns = best_ns_per_call(iterations, [&] {
      std::shared_ptr<std::uint8_t[]> bytes(new std::uint8_t[length]);
      std::memcpy(bytes.get(), source.data(), length);
      const auto outcome = thread.run([&, bytes, length] {
        return ::pwrite(memory, bytes.get(), length, static_cast<off_t>(at));
      }, {memory});
      ok = outcome.finished && outcome.result == static_cast<ssize_t>(length) && ok;
    });
    std::printf("thread_pwrite_%zu %d %.0f\n", length, iterations, ns);
  }
  return ok ? 0 : 2;
}
