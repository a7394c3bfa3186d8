// Does io_uring's NAPI busy polling (IORING_REGISTER_NAPI, 6.9+) do anything for a TAP read?
// Registers NAPI busy polling (dynamic tracking, 200 us) on a ring, arms a multishot read on
// a fresh IFF_NAPI TAP, and waits 1 s for a completion that never comes: if the ring had a
// NAPI instance to poll, the wait would spin (CPU time near the wait's length).
#include <fcntl.h>
#include <liburing.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <cstdint>
struct NapiArg { std::uint32_t busy_poll_to; std::uint8_t prefer_busy_poll; std::uint8_t opcode; std::uint8_t pad[2]; std::uint64_t resv; };
constexpr unsigned kRegisterNapi = 27;
double cpu_ms() { rusage u{}; getrusage(RUSAGE_SELF, &u); return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3; }
int main(int argc, char** argv) {
  const bool napi_tap = argc > 1 && std::strcmp(argv[1], "napi") == 0;
  const int tap = open("/dev/net/tun", O_RDWR | O_NONBLOCK);
  ifreq req{};
  req.ifr_flags = IFF_TAP | IFF_NO_PI | (napi_tap ? IFF_NAPI : 0);
  std::strcpy(req.ifr_name, "latnapi0");
  if (ioctl(tap, TUNSETIFF, &req) != 0) { std::perror("TUNSETIFF"); return 1; }
  io_uring ring{};
  io_uring_params params{};
  params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
  io_uring_queue_init_params(8, &ring, &params);
  NapiArg arg{200, 1, 0, {0, 0}, 0};
  const long rc = syscall(__NR_io_uring_register, ring.ring_fd, kRegisterNapi, &arg, 1);
  static char buffer[2048];
  io_uring_prep_read(io_uring_get_sqe(&ring), tap, buffer, sizeof(buffer), 0);
  io_uring_submit(&ring);
  const double before = cpu_ms();
  __kernel_timespec wait{1, 0};
  io_uring_cqe* cqe = nullptr;
  const int waited = io_uring_wait_cqe_timeout(&ring, &cqe, &wait);
  std::printf("{\"iff_napi\": %d, \"register_napi\": %ld, \"wait\": %d, \"cpu_ms_in_1s_wait\": %.2f}\n", napi_tap, rc, waited, cpu_ms() - before);
}
