// The control socket: /run/rrdma/NAME.sock, SOCK_SEQPACKET (one message = one JSON
// object, boundaries kept by the kernel), mode 0660. Requests {"cmd":"status"},
// {"cmd":"stats"}, {"cmd":"down"}; replies are JSON objects, errors {"error":"..."}.
// The verbs client library will use the same socket (SO_PEERCRED says who asks;
// SCM_RIGHTS will carry memfds and eventfds).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "vnic/event_loop.h"

namespace rrdma::vnic {

inline constexpr std::size_t kMaxControlMessage = 64 * 1024;

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// The reply to one raw request: parses it as hostile input and calls the handler only
// with a JSON object carrying a string "cmd". Pure, for the tests.
using RequestHandler =
    std::function<nlohmann::json(const nlohmann::json& request, const PeerCredentials& peer)>;
nlohmann::json answer(std::string_view message, const PeerCredentials& peer,
                      const RequestHandler& handler);

class ControlServer {
 public:
  // Binds and listens at `path` (replacing a stale socket file) and watches it on `loop`.
  ControlServer(std::filesystem::path path, EventLoop& loop, RequestHandler handler);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  std::uint64_t requests() const { return requests_; }

 private:
  void accept_clients();
  void serve(int fd);
  void drop(int fd);

  std::filesystem::path path_;
  EventLoop& loop_;
  RequestHandler handler_;
  int listen_fd_ = -1;
  std::map<int, PeerCredentials> clients_;
  std::uint64_t requests_ = 0;
};

// The CLI's side: blocking calls with a deadline (the CLI is not an event loop).
class ControlClient {
 public:
  // nullopt and `error` set when nothing listens at `path`.
  static std::optional<ControlClient> connect(const std::filesystem::path& path, std::string& error);
  ControlClient(ControlClient&& other) noexcept;
  ControlClient& operator=(ControlClient&&) = delete;
  ~ControlClient();

  std::optional<nlohmann::json> request(const nlohmann::json& message,
                                        std::chrono::milliseconds timeout, std::string& error);
  // True once the daemon closed its end (it does so only as its process ends).
  bool wait_closed(std::chrono::milliseconds timeout);

 private:
  explicit ControlClient(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace rrdma::vnic
