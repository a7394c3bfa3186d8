// The control socket: /run/rrdma/NAME.sock, SOCK_SEQPACKET (one message = one request,
// boundaries kept by the kernel), mode 0660, group root or `up --group`. Two kinds of
// request share it, told apart by the first byte (verbs::control::is_admin_json):
//   - admin JSON: {"cmd":"status"}, {"cmd":"stats"}, {"cmd":"down"}; replies are JSON
//     objects, errors {"error":"..."};
//   - verbs frames (first byte 0x89, verbs/contract/control_protocol.h) from the client library,
//     with memfds and eventfds as SCM_RIGHTS. Each connection is one verbs client (SO_PEERCRED
//     says who); a frame that does not parse ends the connection, and so does closing it:
//     the VerbsHooks tear its resources down.
// Who may send what is decided with SO_PEERCRED (vnic/control_limits.h): root anything, a
// member of the group verbs frames, status and stats. A reply too large for one message
// is sent in chunks that ControlClient reassembles.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "verbs/contract/control_protocol.h"
#include "verbs/contract/ucma_protocol.h"
#include "vnic/control_limits.h"
#include "vnic/event_loop.h"

namespace rrdma::vnic {

inline constexpr std::size_t kMaxControlMessage = 64 * 1024;

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  // SO_PEERPIDFD: the process that connected, as it was at connect() (a pid may be reused
  // by then; this cannot). -1 where the kernel has none (before Linux 6.5). Owned by the
  // server for the connection's life; VerbsHooks::connected may dup it.
  int pidfd = -1;
};

// The reply to one raw request: parses it as hostile input and calls the handler only
// with a JSON object carrying a string "cmd". Pure, for the tests.
using RequestHandler =
    std::function<nlohmann::json(const nlohmann::json& request, const PeerCredentials& peer)>;
nlohmann::json answer(std::string_view message, const PeerCredentials& peer,
                      const RequestHandler& handler);

// What the daemon does with verbs frames. `client` is a per-connection id, never reused.
struct VerbsHooks {
  // The first verbs frame of a connection arrived (before `request` is called for it).
  std::function<void(std::uint64_t client, const PeerCredentials& peer)> connected;
  // A connection that had sent verbs frames closed (or was dropped).
  std::function<void(std::uint64_t client)> disconnected;
  std::function<verbs::control::Message(std::uint64_t client, const verbs::control::Message& request,
                                        verbs::control::ReceivedFds& fds)>
      request;
};

struct ControlServerCounters {
  std::uint64_t admin_requests = 0;
  std::uint64_t verbs_requests = 0;
  std::uint64_t verbs_bad_frames = 0;   // connection dropped
  std::uint64_t ucma_requests = 0;
  std::uint64_t ucma_bad_frames = 0;    // connection dropped
  std::uint64_t connections = 0;        // accepted and kept
  std::uint64_t connections_open = 0;   // now (a gauge)
  std::uint64_t refused_per_uid_limit = 0;  // closed at once: its uid held the maximum
  std::uint64_t accept_fd_exhausted = 0;    // accept() failed with EMFILE or ENFILE
  std::uint64_t connections_shed = 0;       // accepted on the reserve descriptor and closed
  std::uint64_t evicted_for_root = 0;       // a member's newest connection closed to admit root
  std::uint64_t accept_errors = 0;          // any other accept() failure
  std::uint64_t accept_paused = 0;          // accepting rests until the retry timer
  std::uint64_t commands_refused = 0;       // admin commands the peer may not run
  std::uint64_t replies_chunked = 0;
  std::uint64_t reply_send_errors = 0;      // connection dropped
  std::uint64_t dropped_unread_replies = 0;  // asked again without reading its reply: dropped
  std::uint64_t replies_refused_unread = 0;  // an error instead: the uid's unread replies at the limit
  std::uint64_t log_lines_suppressed = 0;
};

struct ControlServerLimits {
  // Connections one non-root uid may hold at once (root: no limit). Each holds a
  // descriptor of the daemon; a verbs client needs one, a CLI command one at a time.
  std::size_t connections_per_uid = 256;
  // Request lines in the daemon's log: a burst, then so many a second.
  unsigned log_burst = 20;
  unsigned log_lines_per_second = 5;
  // How long accepting rests when even the reserve descriptor could not be had again.
  Duration accept_retry = std::chrono::milliseconds(100);
  // Reply bytes one uid's connections together may leave unread in the daemon's socket
  // buffers (raised to hold a chunked reply whole): past it a large reply is an error
  // instead. One connection holds one unread reply at most (asking again drops it).
  std::size_t unread_reply_bytes_per_uid = 64 * 1024 * 1024;
};

// Replies this small are always sent (errors, `down`): the bound is for large ones.
inline constexpr std::size_t kSmallReplyBytes = 4096;

class ControlServer {
 public:
  // Binds and listens at `path` (replacing a stale socket file) and watches it on `loop`.
  // The socket is mode 0660; with `group` its group is that gid (its members may connect).
  ControlServer(std::filesystem::path path, EventLoop& loop, RequestHandler handler,
                std::optional<VerbsHooks> verbs = std::nullopt, std::optional<gid_t> group = std::nullopt,
                ControlServerLimits limits = {});
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  std::uint64_t requests() const { return requests_; }
  const ControlServerCounters& counters() const { return counters_; }
  std::vector<std::pair<std::string_view, std::uint64_t>> named_counters() const;

  // An admin request {"cmd": cmd, ...} that turns its connection into a stream (capture,
  // trace): the server stops watching the connection and hands its fd to `take`, which
  // owns it from then on (replies, watches, closes it).
  using StreamHandler = std::function<void(const nlohmann::json& request, int fd)>;
  void add_stream_command(std::string cmd, StreamHandler take);

  // ucma frames (first bytes 0x89 'R' 'C' 'M', verbs/contract/ucma_protocol.h) from the
  // rdma_cm shim: each gets the handler's reply, with the one descriptor the handler leaves in
  // `fds` (a new channel's end), if any. Without a handler they end the connection.
  using UcmaHandler = std::function<verbs::ucma::Frame(const PeerCredentials& peer, const verbs::ucma::Frame& request,
                                                       verbs::control::ReceivedFds& fds)>;
  void set_ucma_handler(UcmaHandler handler) { ucma_ = std::move(handler); }

  // Closes the connection of verbs client `client_id` (the daemon evicts it), as if its peer
  // had closed it: VerbsHooks::disconnected runs. False if no such connection.
  bool disconnect(std::uint64_t client_id);

 private:
  struct Connection {
    PeerCredentials peer;
    std::uint64_t id = 0;
    bool verbs_client = false;
  };

  enum class ReserveOutcome { kAccepted, kDrained, kRest };
  void accept_clients();
  ReserveOutcome accept_on_reserve();
  void admit(int fd);
  std::optional<int> newest_member_connection() const;
  void pause_accepting(Instant now);
  void serve(int fd);
  bool serve_admin(int fd);
  bool serve_verbs(int fd);
  bool serve_ucma(int fd);
  bool hand_over_stream(int fd, const nlohmann::json& request, std::string_view cmd);
  bool send_reply(int fd, const nlohmann::json& reply);
  std::size_t unread_by_uid(uid_t uid) const;
  void log_request(const PeerCredentials& peer, std::string_view message);
  void log_limited(const std::string& line);
  void forget(int fd);
  void drop(int fd);

  std::filesystem::path path_;
  EventLoop& loop_;
  RequestHandler handler_;
  std::optional<VerbsHooks> verbs_;
  UcmaHandler ucma_;
  ControlServerLimits limits_;
  int listen_fd_ = -1;
  // /dev/null, held so that at EMFILE one descriptor can be freed to accept (and close)
  // a waiting connection: a listener whose backlog is never drained is never woken again.
  int reserve_fd_ = -1;
  std::optional<Instant> accept_retry_at_;
  // The retry timer source outlives the server in the loop; it checks this first.
  std::shared_ptr<ControlServer*> alive_;
  LogRateLimiter log_limiter_;
  std::map<int, Connection> clients_;
  std::map<uid_t, std::size_t> connections_of_uid_;
  std::map<std::string, StreamHandler, std::less<>> stream_commands_;
  std::uint64_t next_client_id_ = 1;
  std::uint64_t requests_ = 0;
  ControlServerCounters counters_;
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
