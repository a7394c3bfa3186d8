// rrdma_udp_probe: sends UDP datagrams to an address, for the ICMP port-unreachable test.
//
//   rrdma_udp_probe refused IP PORT [TIMEOUT_MS]
//     A connected socket sends one datagram and waits for the error. Exit 0 when the
//     receive fails with ECONNREFUSED (Linux maps an ICMP port unreachable for a connected
//     UDP socket to that, RFC 1122 §4.1.3.3), 1 for anything else.
//   rrdma_udp_probe burst IP PORT N
//     An unconnected socket sends N datagrams back to back. Exit 0 when all were sent.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace {

std::optional<sockaddr_in> parse_endpoint(const char* ip, const char* port) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  long p = std::strtol(port, nullptr, 10);
  if (p < 1 || p > 65535 || inet_pton(AF_INET, ip, &to.sin_addr) != 1) return std::nullopt;
  to.sin_port = htons(static_cast<std::uint16_t>(p));
  return to;
}

const sockaddr* as_sockaddr(const sockaddr_in& a) { return reinterpret_cast<const sockaddr*>(&a); }

int expect_refused(const sockaddr_in& to, int timeout_ms) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0 || connect(fd, as_sockaddr(to), sizeof to) != 0) {
    std::perror("udp socket");
    return 1;
  }
  const char probe[] = "rrdma probe";
  if (send(fd, probe, sizeof probe, 0) < 0) {
    std::perror("send");
    return 1;
  }
  pollfd p{fd, POLLIN, 0};
  int ready = poll(&p, 1, timeout_ms);
  if (ready == 0) {
    std::printf("no answer within %d ms (expected ICMP port unreachable)\n", timeout_ms);
    return 1;
  }
  char reply[64];
  ssize_t n = recv(fd, reply, sizeof reply, MSG_DONTWAIT);
  int err = errno;
  close(fd);
  if (n < 0 && err == ECONNREFUSED) {
    std::printf("ECONNREFUSED\n");
    return 0;
  }
  if (n >= 0) std::printf("got a %zd-byte reply instead of ECONNREFUSED\n", n);
  else std::printf("recv failed with %s instead of ECONNREFUSED\n", std::strerror(err));
  return 1;
}

int burst(const sockaddr_in& to, int count) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) {
    std::perror("udp socket");
    return 1;
  }
  const char probe[] = "rrdma burst";
  for (int i = 0; i < count; ++i) {
    // An unconnected socket ignores the ICMP errors that come back between sends.
    if (sendto(fd, probe, sizeof probe, 0, as_sockaddr(to), sizeof to) < 0) {
      std::perror("sendto");
      return 1;
    }
  }
  close(fd);
  std::printf("sent %d datagrams\n", count);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  auto to = argc > 3 ? parse_endpoint(argv[2], argv[3]) : std::nullopt;
  if (to && mode == "refused" && argc <= 5)
    return expect_refused(*to, argc == 5 ? std::atoi(argv[4]) : 3000);
  if (to && mode == "burst" && argc == 5 && std::atoi(argv[4]) > 0)
    return burst(*to, std::atoi(argv[4]));
  std::fprintf(stderr, "usage: rrdma_udp_probe refused IP PORT [TIMEOUT_MS] | burst IP PORT N\n");
  return 2;
}
