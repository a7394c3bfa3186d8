// rrdma_control_flood: a hostile client of a vnic's control socket, for the system tests.
//
//   rrdma_control_flood connections SOCKET COUNT
//     opens up to COUNT connections (non-blocking connects, retried while the backlog is
//     full, for at most 10 s), prints "opened N", holds them until stdin reaches its end
//     (the test decides when, no timing assumed), then prints "alive M" (those the daemon
//     has not closed) and exits, closing them all.
//   rrdma_control_flood requests SOCKET COUNT
//     sends COUNT bad admin requests (each starts with '{', which makes it admin JSON
//     rather than a verbs frame: invalid JSON, unknown commands, a number as "cmd", no
//     "cmd") on one connection, 32 in flight, reads every reply; prints
//     "sent N replies M errors E" (E: replies carrying "error").
// Exit 0 when it could do what it was asked to try (the test judges the numbers), 2 on
// bad arguments, 1 when the socket cannot be reached at all.
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool parse_count(const char* text, long& out) {
  char* end = nullptr;
  errno = 0;
  out = std::strtol(text, &end, 10);
  return errno == 0 && end != text && *end == '\0' && out >= 0 && out <= 10'000'000;
}

sockaddr_un address_of(const char* path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path, sizeof(address.sun_path) - 1);
  return address;
}

// Our own descriptor limit must not be what stops the flood.
void raise_own_fd_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// -1 when the deadline passed (backlog full all along) or on a hard error (`hard` set).
int connect_once(const sockaddr_un& address, Clock::time_point deadline, bool& hard) {
  while (Clock::now() < deadline) {
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      hard = true;
      return -1;
    }
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) return fd;
    const int error = errno;
    ::close(fd);
    if (error != EAGAIN) {
      std::fprintf(stderr, "connect: %s\n", std::strerror(error));
      hard = true;
      return -1;
    }
    std::this_thread::sleep_for(1ms);
  }
  return -1;
}

bool closed_by_peer(int fd) {
  pollfd entry{fd, POLLIN, 0};
  if (::poll(&entry, 1, 0) <= 0) return false;
  if ((entry.revents & (POLLHUP | POLLERR)) != 0) return true;
  char byte;
  return ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

void wait_for_end_of_stdin() {
  char buffer[64];
  while (::read(STDIN_FILENO, buffer, sizeof(buffer)) > 0) {
  }
}

int flood_connections(const char* path, long count) {
  raise_own_fd_limit();
  const sockaddr_un address = address_of(path);
  const auto deadline = Clock::now() + 10s;
  std::vector<int> fds;
  bool hard = false;
  while (static_cast<long>(fds.size()) < count) {
    const int fd = connect_once(address, deadline, hard);
    if (fd < 0) break;
    fds.push_back(fd);
  }
  if (hard && fds.empty()) return 1;
  std::printf("opened %zu\n", fds.size());
  std::fflush(stdout);
  wait_for_end_of_stdin();
  std::size_t alive = 0;
  for (int fd : fds) alive += closed_by_peer(fd) ? 0 : 1;
  std::printf("alive %zu\n", alive);
  std::fflush(stdout);
  for (int fd : fds) ::close(fd);
  return 0;
}

std::string bad_request(long i) {
  switch (i % 4) {
    case 0: return "{this is not json " + std::to_string(i);
    case 1: return "{\"cmd\":\"no-such-command-" + std::to_string(i) + "\"}";
    case 2: return "{\"cmd\":" + std::to_string(i) + "}";
    default: return "{\"command\":\"status\",\"n\":" + std::to_string(i) + "}";
  }
}

int flood_requests(const char* path, long count) {
  const sockaddr_un address = address_of(path);
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    std::fprintf(stderr, "connect %s: %s\n", path, std::strerror(errno));
    return 1;
  }
  constexpr long kInFlight = 32;
  long sent = 0, replies = 0, errors = 0;
  std::vector<char> buffer(65536);
  while (replies < count) {
    while (sent < count && sent - replies < kInFlight) {
      const std::string request = bad_request(sent);
      if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) < 0) {
        std::fprintf(stderr, "send: %s\n", std::strerror(errno));
        break;
      }
      ++sent;
    }
    pollfd entry{fd, POLLIN, 0};
    if (::poll(&entry, 1, 5000) <= 0) break;  // the daemon stopped answering
    const ssize_t n = ::recv(fd, buffer.data(), buffer.size(), 0);
    if (n <= 0) break;
    ++replies;
    if (std::string_view(buffer.data(), static_cast<std::size_t>(n)).find("\"error\"") != std::string_view::npos) {
      ++errors;
    }
  }
  std::printf("sent %ld replies %ld errors %ld\n", sent, replies, errors);
  ::close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  long count = 0;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "connections" && argc == 4 && parse_count(argv[3], count)) {
    return flood_connections(argv[2], count);
  }
  if (mode == "requests" && argc == 4 && parse_count(argv[3], count)) {
    return flood_requests(argv[2], count);
  }
  std::fprintf(stderr, "usage: %s connections SOCKET COUNT | requests SOCKET COUNT\n", argv[0]);
  return 2;
}
