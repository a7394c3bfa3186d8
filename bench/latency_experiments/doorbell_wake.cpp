// Doorbell wake-up: a client process rings a sleeping io_uring loop (DEFER_TASKRUN) either
// with an eventfd write the loop watches with a multishot poll (what rrdma-vnic does) or
// with FUTEX_WAKE on a shared word the loop waits on with IORING_OP_FUTEX_WAIT (one-shot,
// re-armed after each wake). The loop answers through shared memory the client spins on.
// Prints the round trip's median and 99th percentile in microseconds.
#include <liburing.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {
constexpr std::uint8_t kOpFutexWait = IORING_OP_SENDMSG_ZC + 3;  // 6.7: READ_MULTISHOT, WAITID, FUTEX_WAIT
constexpr std::uint32_t kFutex2SizeU32 = 0x02;
struct Shared {
  alignas(64) std::atomic<std::uint32_t> futex_word;
  alignas(64) std::atomic<std::uint64_t> request;
  alignas(64) std::atomic<std::uint64_t> answer;
  alignas(64) std::atomic<bool> stop;
};

void arm_futex(io_uring& ring, Shared* shared) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  io_uring_prep_rw(kOpFutexWait, sqe, static_cast<int>(kFutex2SizeU32), &shared->futex_word, 0, 0);
  sqe->addr2 = 0;                          // sleep while the word is 0
  sqe->addr3 = FUTEX_BITSET_MATCH_ANY;     // the mask
  io_uring_sqe_set_data64(sqe, 2);
}

void serve(bool futex, int efd, Shared* shared) {
  io_uring ring{};
  io_uring_params params{};
  params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
  if (io_uring_queue_init_params(64, &ring, &params) < 0) { std::perror("io_uring"); _exit(1); }
  if (futex) {
    arm_futex(ring, shared);
  } else {
    io_uring_prep_poll_multishot(io_uring_get_sqe(&ring), efd, POLLIN);
  }
  while (!shared->stop.load()) {
    __kernel_timespec wait{0, 100'000'000};
    io_uring_cqe* cqe = nullptr;
    io_uring_submit_and_wait_timeout(&ring, &cqe, 1, &wait, nullptr);
    unsigned head = 0, seen = 0;
    bool rearm = false;
    io_uring_for_each_cqe(&ring, head, cqe) {
      ++seen;
      if (cqe->res < 0 && cqe->res != -EAGAIN && cqe->res != -ETIME) {
        std::fprintf(stderr, "completion %d\n", cqe->res); _exit(1);
      }
      if (cqe->user_data == 2) rearm = true;
    }
    io_uring_cq_advance(&ring, seen);
    if (futex) {
      shared->futex_word.store(0);
    } else {
      std::uint64_t value;
      [[maybe_unused]] ssize_t got = read(efd, &value, sizeof(value));
    }
    shared->answer.store(shared->request.load());
    if (rearm) arm_futex(ring, shared);
  }
  _exit(0);
}
}  // namespace

int main(int argc, char** argv) {
  const bool futex = argc > 1 && std::strcmp(argv[1], "futex") == 0;
  const int count = argc > 2 ? std::atoi(argv[2]) : 20000;
  auto* shared = static_cast<Shared*>(mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                                           MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  new (shared) Shared{};
  const int efd = eventfd(0, EFD_NONBLOCK);
  const pid_t server = fork();
  if (server == 0) serve(futex, efd, shared);
  usleep(100'000);
  std::vector<double> trips;
  for (int i = 1; i <= count; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    shared->request.store(i);
    if (futex) {
      shared->futex_word.store(1);
      syscall(SYS_futex, &shared->futex_word, FUTEX_WAKE, 1, nullptr, nullptr, 0);
    } else {
      const std::uint64_t one = 1;
      [[maybe_unused]] ssize_t put = write(efd, &one, sizeof(one));
    }
    while (shared->answer.load() != static_cast<std::uint64_t>(i)) {
      __builtin_ia32_pause();
    }
    trips.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    usleep(50);  // let the loop go back to sleep, as between ib_write_lat's messages
  }
  shared->stop.store(true);
  shared->futex_word.store(1);
  syscall(SYS_futex, &shared->futex_word, FUTEX_WAKE, 1, nullptr, nullptr, 0);
  int status = 0;
  rusage usage{};
  wait4(server, &status, 0, &usage);
  const double server_cpu_s = usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  std::sort(trips.begin(), trips.end());
  std::printf("{\"mode\": \"%s\", \"count\": %d, \"median_us\": %.2f, \"p99_us\": %.2f, \"server_cpu_us_per_trip\": %.2f, \"server_voluntary_switches\": %ld}\n", futex ? "futex" : "eventfd",
              count, trips[trips.size() / 2], trips[trips.size() * 99 / 100], server_cpu_s * 1e6 / count, usage.ru_nvcsw);
}
