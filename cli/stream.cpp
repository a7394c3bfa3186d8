#include "cli/stream.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "vnic/config.h"
#include "vnic/runtime.h"

namespace rrdma::cli {
namespace {

constexpr int kStartTimeoutMs = 5000;
// Larger than any message the daemon sends (a jumbo frame and its header, a trace event).
constexpr std::size_t kMaxMessage = 64 * 1024;

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

int connect_to(const std::string& vnic, std::string& error) {
  const std::string path = vnic::RuntimePaths::of(vnic).socket.string();
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) {
    error = "socket path too long: " + path;
    return -1;
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    const int failure = errno;
    error = failure == EACCES || failure == EPERM
                ? vnic::socket_denied_message(vnic)
                : "cannot reach vnic " + vnic + ": " + std::strerror(failure) + " (is it up?)";
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

bool send_json(int fd, const nlohmann::json& message) {
  const std::string text = message.dump();
  return ::send(fd, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size());
}

// One message; empty with `closed` set at the end of the connection. A message larger
// than the buffer is reported as an error (MSG_TRUNC gives its real size).
std::optional<std::vector<std::uint8_t>> receive(int fd, bool& closed, std::string& error) {
  std::vector<std::uint8_t> buffer(kMaxMessage);
  const ssize_t got = ::recv(fd, buffer.data(), buffer.size(), MSG_TRUNC | MSG_DONTWAIT);
  if (got == 0) {
    closed = true;
    return std::nullopt;
  }
  if (got < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      error = std::string("recv: ") + std::strerror(errno);
      closed = true;
    }
    return std::nullopt;
  }
  if (static_cast<std::size_t>(got) > buffer.size()) {
    error = "a message of " + std::to_string(got) + " bytes from the daemon (at most " +
            std::to_string(kMaxMessage) + " expected)";
    closed = true;
    return std::nullopt;
  }
  buffer.resize(static_cast<std::size_t>(got));
  return buffer;
}

std::optional<nlohmann::json> as_json(std::span<const std::uint8_t> message) {
  if (message.empty() || message[0] != '{') return std::nullopt;
  auto value = nlohmann::json::parse(message.begin(), message.end(), nullptr, false);
  if (value.is_discarded() || !value.is_object()) return std::nullopt;
  return value;
}

// SIGINT and SIGTERM become readable events on a signalfd (blocked for the process).
int signal_fd() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGPIPE);
  ::sigprocmask(SIG_BLOCK, &signals, nullptr);
  sigdelset(&signals, SIGPIPE);
  return ::signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK);
}

}  // namespace

StreamResult run_stream(const std::string& vnic, const nlohmann::json& request,
                        const std::function<void(const nlohmann::json& start)>& on_start,
                        const std::function<StreamStep(std::span<const std::uint8_t> message)>& on_message) {
  StreamResult result;
  if (!vnic::is_valid_interface_name(vnic)) {
    result.error = "bad name '" + vnic + "'";
    return result;
  }
  const Fd signals(signal_fd());
  const Fd socket(connect_to(vnic, result.error));
  if (socket.get() < 0) return result;
  if (!send_json(socket.get(), request)) {
    result.error = std::string("send: ") + std::strerror(errno);
    return result;
  }
  pollfd first{socket.get(), POLLIN, 0};
  if (::poll(&first, 1, kStartTimeoutMs) <= 0) {
    result.error = "vnic " + vnic + " did not answer";
    return result;
  }
  bool closed = false;
  auto reply = receive(socket.get(), closed, result.error);
  const auto start = reply ? as_json(*reply) : std::nullopt;
  if (!start) {
    if (result.error.empty()) result.error = "vnic " + vnic + " sent no valid reply (is it an older daemon?)";
    return result;
  }
  if (start->contains("error")) {
    result.error = start->value("error", "");
    return result;
  }
  result.start = start;
  on_start(*start);

  bool stop_sent = false;
  auto ask_stop = [&] {
    if (!stop_sent) stop_sent = send_json(socket.get(), {{"cmd", "stop"}}) || true;
  };
  while (!closed) {
    pollfd fds[2] = {{socket.get(), POLLIN, 0}, {signals.get(), POLLIN, 0}};
    if (::poll(fds, signals.get() >= 0 ? 2 : 1, -1) < 0 && errno != EINTR) break;
    if (signals.get() >= 0 && (fds[1].revents & POLLIN) != 0) {
      signalfd_siginfo info{};
      while (::read(signals.get(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
        if (stop_sent) closed = true;  // a second Ctrl-C: do not wait for the summary
        ask_stop();
      }
    }
    while (!closed) {
      auto message = receive(socket.get(), closed, result.error);
      if (!message) break;
      if (auto value = as_json(*message)) {
        if (value->contains("end")) {
          result.summary = std::move(value);
          closed = true;
        }
        continue;
      }
      if (on_message(*message) == StreamStep::Stop) ask_stop();
    }
  }
  result.ok = result.error.empty();
  return result;
}

}  // namespace rrdma::cli
