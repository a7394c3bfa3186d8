// The examples' side channel: before two RDMA queue pairs can talk, each side must learn
// the other's QP number, first packet sequence number and GID (and, for one-sided
// operations, an address and an R_Key). RDMA itself cannot carry this yet — the QPs are not
// connected — so, like ibv_rc_pingpong, we use an ordinary TCP connection over the kernel's
// own network. Lines of text, one message per line.
#pragma once

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace examples {

class SideChannel {
 public:
  // The server waits for one client on `port`; the client connects to `server`:`port`
  // (retrying for a few seconds, so it may start first).
  static SideChannel serve(std::uint16_t port) {
    const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int yes = 1;
    ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || ::listen(listener, 1) != 0) {
      ::close(listener);
      throw std::runtime_error("side channel: cannot listen on port " + std::to_string(port));
    }
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    ::close(listener);
    if (fd < 0) throw std::runtime_error("side channel: accept failed");
    return SideChannel(fd);
  }

  static SideChannel connect(const std::string& server, std::uint16_t port) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(server.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) {
      throw std::runtime_error("side channel: cannot resolve " + server);
    }
    for (int attempt = 0; attempt < 100; ++attempt) {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
        ::freeaddrinfo(found);
        return SideChannel(fd);
      }
      ::close(fd);
      ::usleep(100 * 1000);
    }
    ::freeaddrinfo(found);
    throw std::runtime_error("side channel: cannot connect to " + server + ":" + std::to_string(port));
  }

  SideChannel(SideChannel&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  SideChannel(const SideChannel&) = delete;
  SideChannel& operator=(const SideChannel&) = delete;
  ~SideChannel() {
    if (fd_ >= 0) ::close(fd_);
  }

  void send_line(const std::string& line) {
    const std::string text = line + "\n";
    std::size_t sent = 0;
    while (sent < text.size()) {
      const ssize_t n = ::send(fd_, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("side channel: the peer went away");
      sent += static_cast<std::size_t>(n);
    }
  }

  std::string receive_line() {
    std::string line;
    char c = 0;
    while (true) {
      const ssize_t n = ::recv(fd_, &c, 1, 0);
      if (n <= 0) throw std::runtime_error("side channel: the peer went away");
      if (c == '\n') return line;
      if (line.size() > 4096) throw std::runtime_error("side channel: line too long");
      line += c;
    }
  }

 private:
  explicit SideChannel(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace examples
