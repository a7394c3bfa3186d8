#include "vnic/control.h"

#include <fcntl.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <utility>
#include <vector>

namespace rrdma::vnic {
namespace {

constexpr int kAcceptsPerTurn = 64;

sockaddr_un address_of(const std::filesystem::path& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string text = path.string();
  if (text.size() >= sizeof(address.sun_path)) {
    throw std::system_error(ENAMETOOLONG, std::generic_category(), "socket path " + text);
  }
  std::memcpy(address.sun_path, text.c_str(), text.size() + 1);
  return address;
}

nlohmann::json error_reply(std::string message) { return {{"error", std::move(message)}}; }

std::chrono::milliseconds remaining(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return left.count() > 0 ? left : std::chrono::milliseconds(0);
}

bool wait_for(int fd, short events, std::chrono::milliseconds timeout) {
  pollfd entry{fd, events, 0};
  const int rc = ::poll(&entry, 1, static_cast<int>(timeout.count()));
  return rc > 0;
}

constexpr std::size_t kLoggedRequestBytes = 80;

bool is_quiet_query(std::string_view message) {
  for (std::string_view quiet : {"{\"cmd\":\"status\"}", "{\"cmd\":\"stats\"}"}) {
    if (message == quiet) return true;
  }
  return false;
}

// Printable ASCII only: a request's bytes must not forge log lines or terminal escapes.
std::string printable(std::string_view bytes) {
  std::string out;
  for (char c : bytes.substr(0, kLoggedRequestBytes)) {
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  return out;
}

PeerCredentials credentials_of(int fd) {
  ucred credentials{};
  socklen_t length = sizeof(credentials);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
    // Unknown peer: treat as the least privileged uid, never as root.
    return {0, static_cast<uid_t>(-1), static_cast<gid_t>(-1)};
  }
  return {credentials.pid, credentials.uid, credentials.gid};
}

// SO_PEERPIDFD (Linux 6.5; Debian 12's headers predate it): a pidfd of the peer as of
// connect(). -1 if the kernel has none.
int peer_pidfd(int fd) {
  constexpr int kSoPeerPidfd = 77;
  int pidfd = -1;
  socklen_t length = sizeof(pidfd);
  if (::getsockopt(fd, SOL_SOCKET, kSoPeerPidfd, &pidfd, &length) != 0) return -1;
  if (::fcntl(pidfd, F_SETFD, FD_CLOEXEC) != 0) {
    ::close(pidfd);
    return -1;
  }
  return pidfd;
}

// Bytes a socket buffer costs beyond its payload (the sk_buff, rounding of its head to a
// kmalloc size, page fragments), generously: it only sizes a send buffer.
constexpr std::size_t kSocketBufferOverhead = 16 * 1024;

void raise_send_buffer(int fd, std::size_t bytes) {
  int current = 0;
  socklen_t length = sizeof(current);
  if (::getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &current, &length) == 0 &&
      static_cast<std::size_t>(current) >= bytes) {
    return;
  }
  const int wanted = static_cast<int>(std::min<std::size_t>(bytes, INT_MAX / 2));
  // The kernel doubles the value it is given; SO_SNDBUF alone is capped at wmem_max.
  if (::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &wanted, sizeof(wanted)) != 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &wanted, sizeof(wanted));
  }
}

int open_reserve() { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); }

// Bytes sent on the connection and not yet read by its peer (SIOCOUTQ).
// Unread reply bytes a connection may hold when it sends its next request: far above what a
// pipelining client's small replies reach, below one large reply held whole.
constexpr std::size_t kMaxUnreadBytesPerConnection = 128 * 1024;

std::size_t unread_bytes(int fd) {
  int queued = 0;
  return ::ioctl(fd, SIOCOUTQ, &queued) == 0 && queued > 0 ? static_cast<std::size_t>(queued) : 0;
}

std::optional<std::string_view> command_of(const nlohmann::json& request) {
  if (!request.is_object()) return std::nullopt;
  const auto cmd = request.find("cmd");
  if (cmd == request.end() || !cmd->is_string()) return std::nullopt;
  return std::string_view(cmd->get_ref<const std::string&>());
}

}  // namespace

nlohmann::json answer(std::string_view message, const PeerCredentials& peer,
                      const RequestHandler& handler) {
  const auto request = nlohmann::json::parse(message, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded()) return error_reply("request is not valid JSON");
  if (!request.is_object()) return error_reply("request must be a JSON object");
  const auto cmd = request.find("cmd");
  if (cmd == request.end() || !cmd->is_string()) return error_reply("request has no string \"cmd\"");
  try {
    nlohmann::json reply = handler(request, peer);
    return reply.is_object() ? reply : error_reply("internal error: reply is not an object");
  } catch (const std::exception& failure) {
    return error_reply(failure.what());
  }
}

ControlServer::ControlServer(std::filesystem::path path, EventLoop& loop, RequestHandler handler,
                             std::optional<VerbsHooks> verbs, std::optional<gid_t> group,
                             ControlServerLimits limits)
    : path_(std::move(path)),
      loop_(loop),
      handler_(std::move(handler)),
      verbs_(std::move(verbs)),
      limits_(limits),
      alive_(std::make_shared<ControlServer*>(this)),
      log_limiter_(limits.log_burst, limits.log_lines_per_second) {
  reserve_fd_ = open_reserve();
  if (reserve_fd_ < 0) throw std::system_error(errno, std::generic_category(), "open /dev/null");
  listen_fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) {
    const int error = errno;
    ::close(reserve_fd_);
    throw std::system_error(error, std::generic_category(), "control socket");
  }
  const sockaddr_un address = address_of(path_);
  ::unlink(path_.c_str());
  if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0 ||
      ::chmod(path_.c_str(), 0660) != 0 || (group && ::chown(path_.c_str(), static_cast<uid_t>(-1), *group) != 0) ||
      ::listen(listen_fd_, 16) != 0) {
    const int error = errno;
    ::close(listen_fd_);
    ::close(reserve_fd_);
    ::unlink(path_.c_str());
    throw std::system_error(error, std::generic_category(), "control socket " + path_.string());
  }
  loop_.watch(listen_fd_, [this](Instant) { accept_clients(); });
  // Accepting that had to rest (no descriptor even for the reserve) resumes here: nothing
  // else would wake the listener while its backlog stays full.
  loop_.add_timer_source([alive = std::weak_ptr<ControlServer*>(alive_)](Instant now) -> std::optional<Instant> {
    const auto self = alive.lock();
    if (!self) return std::nullopt;
    ControlServer& server = **self;
    if (server.accept_retry_at_ && now >= *server.accept_retry_at_) {
      server.accept_retry_at_.reset();
      server.accept_clients();
    }
    return server.accept_retry_at_;
  });
}

ControlServer::~ControlServer() {
  alive_.reset();
  for (const auto& [fd, connection] : clients_) {
    loop_.unwatch(fd);
    ::close(fd);
    if (connection.verbs_client && verbs_) verbs_->disconnected(connection.id);
  }
  loop_.unwatch(listen_fd_);
  ::close(listen_fd_);
  if (reserve_fd_ >= 0) ::close(reserve_fd_);
  ::unlink(path_.c_str());
}

std::vector<std::pair<std::string_view, std::uint64_t>> ControlServer::named_counters() const {
  const ControlServerCounters& c = counters_;
  return {{"admin_requests", c.admin_requests},
          {"verbs_requests", c.verbs_requests},
          {"verbs_bad_frames", c.verbs_bad_frames},
          {"ucma_requests", c.ucma_requests},
          {"ucma_bad_frames", c.ucma_bad_frames},
          {"connections", c.connections},
          {"connections_open", c.connections_open},
          {"refused_per_uid_limit", c.refused_per_uid_limit},
          {"accept_fd_exhausted", c.accept_fd_exhausted},
          {"connections_shed", c.connections_shed},
          {"evicted_for_root", c.evicted_for_root},
          {"accept_errors", c.accept_errors},
          {"accept_paused", c.accept_paused},
          {"commands_refused", c.commands_refused},
          {"replies_chunked", c.replies_chunked},
          {"reply_send_errors", c.reply_send_errors},
          {"dropped_unread_replies", c.dropped_unread_replies},
          {"replies_refused_unread", c.replies_refused_unread},
          {"log_lines_suppressed", c.log_lines_suppressed}};
}

// Drains the backlog until EAGAIN: the listener's multishot poll reports new readiness
// only, so a backlog left full would never be reported again. At most kAcceptsPerTurn per
// turn of the loop, the rest on the next turn (the timer source, at once): refused and shed
// connections cost their sender nothing, and processes that connect and close in a loop
// would otherwise keep this loop, and with it the data path and root's `down`, busy for ever
// (found by review).
void ControlServer::accept_clients() {
  for (int accepted = 0;; ++accepted) {
    if (accepted == kAcceptsPerTurn) {
      accept_retry_at_ = Clock::now();
      return;
    }
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      admit(fd);
      continue;
    }
    const int error = errno;
    if (error == EAGAIN || error == EWOULDBLOCK) return;
    if (error == EINTR || error == ECONNABORTED) continue;  // that client is gone; next
    if (error == EMFILE || error == ENFILE) {
      ++counters_.accept_fd_exhausted;
      const ReserveOutcome outcome = accept_on_reserve();
      if (outcome == ReserveOutcome::kAccepted) continue;
      if (outcome == ReserveOutcome::kDrained) return;
    } else {
      ++counters_.accept_errors;  // ENOMEM, ENOBUFS...: rest rather than spin
    }
    pause_accepting(Clock::now());
    return;
  }
}

// At EMFILE: frees the reserve descriptor to take the oldest waiting connection. Root's is
// kept if a member's connection can be closed in its place (so that root can still run
// `down` while a member holds every descriptor); any other is closed at once.
ControlServer::ReserveOutcome ControlServer::accept_on_reserve() {
  if (reserve_fd_ < 0) reserve_fd_ = open_reserve();
  if (reserve_fd_ < 0) return ReserveOutcome::kRest;
  ::close(std::exchange(reserve_fd_, -1));
  const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  const int accept_error = errno;
  if (fd >= 0) {
    const std::optional<int> victim = credentials_of(fd).uid == 0 ? newest_member_connection() : std::nullopt;
    if (victim) {
      ++counters_.evicted_for_root;
      log_limited("out of descriptors: closed uid " + std::to_string(clients_[*victim].peer.uid) +
                  "'s newest connection to let root in");
      drop(*victim);
      admit(fd);
    } else {
      ++counters_.connections_shed;
      log_limited("out of descriptors: closed a new connection at once");
      ::close(fd);
    }
  }
  reserve_fd_ = open_reserve();
  if (reserve_fd_ < 0) return ReserveOutcome::kRest;
  if (fd >= 0 || accept_error == ECONNABORTED || accept_error == EINTR) return ReserveOutcome::kAccepted;
  if (accept_error == EAGAIN || accept_error == EWOULDBLOCK) return ReserveOutcome::kDrained;
  return ReserveOutcome::kRest;  // ENFILE even with our reserve freed: someone took it
}

std::optional<int> ControlServer::newest_member_connection() const {
  std::optional<int> newest;
  std::uint64_t newest_id = 0;
  for (const auto& [fd, connection] : clients_) {
    if (connection.peer.uid == 0 || connection.verbs_client || connection.id < newest_id) continue;
    newest = fd;
    newest_id = connection.id;
  }
  return newest;
}

void ControlServer::pause_accepting(Instant now) {
  ++counters_.accept_paused;
  accept_retry_at_ = now + limits_.accept_retry;
}

void ControlServer::admit(int fd) {
  PeerCredentials peer = credentials_of(fd);
  std::size_t& held = connections_of_uid_[peer.uid];
  if (peer.uid != 0 && held >= limits_.connections_per_uid) {
    ++counters_.refused_per_uid_limit;
    log_limited("uid " + std::to_string(peer.uid) + " holds " + std::to_string(held) +
                " connections, the most one uid may: refused one more");
    ::close(fd);
    return;
  }
  ++held;
  peer.pidfd = peer_pidfd(fd);
  clients_.emplace(fd, Connection{peer, next_client_id_++, false});
  ++counters_.connections;
  ++counters_.connections_open;
  loop_.watch(fd, [this, fd](Instant) { serve(fd); });
}

// One request per message; the first byte says which protocol (a peek, so that a verbs
// frame is then received whole with its fds by verbs::control::receive_message).
void ControlServer::serve(int fd) {
  for (;;) {
    std::array<std::uint8_t, 4> first{};
    const ssize_t peeked = ::recv(fd, first.data(), first.size(), MSG_PEEK | MSG_DONTWAIT);
    if (peeked < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (peeked <= 0) {
      drop(fd);
      return;
    }
    const ByteSpan start(first.data(), static_cast<std::size_t>(peeked));
    bool more = false;
    if (verbs::ucma::is_ucma_frame(start)) {
      more = serve_ucma(fd);
    } else if (verbs_ && !verbs::control::is_admin_json(start.first(1))) {
      more = serve_verbs(fd);
    } else {
      more = serve_admin(fd);
    }
    if (!more) return;
  }
}

// False when the connection was dropped or handed over.
bool ControlServer::serve_admin(int fd) {
  std::vector<char> buffer(kMaxControlMessage);
  const ssize_t received = ::recv(fd, buffer.data(), buffer.size(), MSG_TRUNC | MSG_DONTWAIT);
  if (received < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
  if (received <= 0) {
    drop(fd);
    return false;
  }
  // A client that does not read must not pile reply on reply (found by the probe of issue 27:
  // a large reply raises the send buffer to hold it whole). Small replies a pipelining client
  // has not read yet are bounded by the socket's own buffer; past a large one's worth of
  // unread bytes the connection goes.
  if (unread_bytes(fd) > kMaxUnreadBytesPerConnection) {
    ++counters_.dropped_unread_replies;
    drop(fd);
    return false;
  }
  ++requests_;
  ++counters_.admin_requests;
  const PeerCredentials peer = clients_[fd].peer;
  const std::string_view message(buffer.data(), std::min<std::size_t>(static_cast<std::size_t>(received), buffer.size()));
  log_request(peer, message);
  if (static_cast<std::size_t>(received) > buffer.size()) {
    return send_reply(fd, error_reply("request larger than " + std::to_string(kMaxControlMessage) + " bytes"));
  }
  const auto request = nlohmann::json::parse(message, nullptr, /*allow_exceptions=*/false);
  if (const auto cmd = command_of(request)) {
    if (auto refusal = refusal_for(*cmd, peer.uid, ::geteuid())) {
      ++counters_.commands_refused;
      return send_reply(fd, error_reply(std::move(*refusal)));
    }
    if (hand_over_stream(fd, request, *cmd)) return false;
  }
  return send_reply(fd, answer(message, peer, handler_));
}

// A reply longer than one message goes as chunks (vnic/control_limits.h), all queued at
// once: the connection's send buffer is raised to hold them (SO_SNDBUFFORCE, as root;
// each chunk is one small socket buffer), so the loop never waits for a slow reader. A
// client that does not read its replies loses its connection when the next one fails.
bool ControlServer::send_reply(int fd, const nlohmann::json& reply) {
  ReplyMessages out = split_reply(reply.dump());
  if (out.messages.empty()) {
    out = split_reply(error_reply("the reply (" + std::to_string(out.total_bytes) + " bytes) exceeds " +
                                  std::to_string(kMaxReplyBytes) + " bytes").dump());
  }
  if (const std::size_t unread = unread_by_uid(clients_[fd].peer.uid);
      out.total_bytes > kSmallReplyBytes && unread + out.total_bytes > limits_.unread_reply_bytes_per_uid) {
    ++counters_.replies_refused_unread;
    out = split_reply(error_reply("this user's connections have " + std::to_string(unread) +
                                  " bytes of replies unread; read them first").dump());
  }
  if (out.messages.size() > 1) {
    ++counters_.replies_chunked;
    raise_send_buffer(fd, out.total_bytes + out.messages.size() * kSocketBufferOverhead);
  }
  for (const std::string& message : out.messages) {
    if (::send(fd, message.data(), message.size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
        static_cast<ssize_t>(message.size())) {
      ++counters_.reply_send_errors;
      drop(fd);
      return false;
    }
  }
  return true;
}

// What every connection of `uid` has not read (each holds one reply at most: serve_admin).
std::size_t ControlServer::unread_by_uid(uid_t uid) const {
  std::size_t total = 0;
  for (const auto& [fd, connection] : clients_) {
    if (connection.peer.uid == uid) total += unread_bytes(fd);
  }
  return total;
}

// Request lines are rate-limited: a group member sending 128k bad requests in 5 s once
// wrote 14.7 MB of log. status and stats, which a monitor may send every second, are not
// logged at all.
void ControlServer::log_request(const PeerCredentials& peer, std::string_view message) {
  if (is_quiet_query(message)) return;
  log_limited("request from pid " + std::to_string(peer.pid) + " uid " + std::to_string(peer.uid) + ": " +
              printable(message));
}

// Every line a peer can cause goes through the one token bucket.
void ControlServer::log_limited(const std::string& line) {
  const LogRateLimiter::Verdict verdict = log_limiter_.admit(Clock::now());
  counters_.log_lines_suppressed = log_limiter_.suppressed_total();
  if (!verdict.log) return;
  if (verdict.suppressed_before > 0) {
    std::fprintf(stderr, "control: %llu lines suppressed (more than %u a second)\n",
                 static_cast<unsigned long long>(verdict.suppressed_before), limits_.log_lines_per_second);
  }
  std::fprintf(stderr, "control: %s\n", line.c_str());
  std::fflush(stderr);
}

bool ControlServer::serve_verbs(int fd) {
  verbs::control::Received received = verbs::control::receive_message(fd);
  if (received.error == verbs::control::IoError::WouldBlock) return false;
  if (received.error != verbs::control::IoError::None || received.message.is_reply()) {
    if (received.error != verbs::control::IoError::PeerClosed) ++counters_.verbs_bad_frames;
    drop(fd);
    return false;
  }
  ++requests_;
  ++counters_.verbs_requests;
  Connection& connection = clients_[fd];
  if (!connection.verbs_client) {
    connection.verbs_client = true;
    verbs_->connected(connection.id, connection.peer);
  }
  const verbs::control::Message reply = verbs_->request(connection.id, received.message, received.fds);
  if (verbs::control::send_message(fd, reply, {}) != verbs::control::IoError::None) {
    drop(fd);
    return false;
  }
  return true;
}

bool ControlServer::serve_ucma(int fd) {
  verbs::ucma::Received received = verbs::ucma::receive_frame(fd);
  if (received.error == verbs::control::IoError::WouldBlock) return false;
  if (received.error != verbs::control::IoError::None || received.frame.reply || !ucma_) {
    if (received.error != verbs::control::IoError::PeerClosed) ++counters_.ucma_bad_frames;
    drop(fd);
    return false;
  }
  ++requests_;
  ++counters_.ucma_requests;
  // The handler leaves in `fds` what goes with the reply (a new channel's application end);
  // our copy closes with `received`.
  const verbs::ucma::Frame reply = ucma_(clients_[fd].peer, received.frame, received.fds);
  const int passed = received.fds.size() == 1 ? received.fds.at(0) : -1;
  if (verbs::ucma::send_frame(fd, reply, passed) != verbs::control::IoError::None) {
    drop(fd);
    return false;
  }
  return true;
}

void ControlServer::add_stream_command(std::string cmd, StreamHandler take) {
  stream_commands_[std::move(cmd)] = std::move(take);
}

// True when the request was a stream command: the connection is no longer ours.
bool ControlServer::hand_over_stream(int fd, const nlohmann::json& request, std::string_view cmd) {
  if (stream_commands_.empty() || clients_[fd].verbs_client) return false;
  const auto stream = stream_commands_.find(cmd);
  if (stream == stream_commands_.end()) return false;
  loop_.unwatch(fd);
  forget(fd);
  stream->second(request, fd);
  return true;
}

bool ControlServer::disconnect(std::uint64_t client_id) {
  const auto it = std::find_if(clients_.begin(), clients_.end(),
                               [&](const auto& entry) { return entry.second.id == client_id; });
  if (it == clients_.end()) return false;
  drop(it->first);
  return true;
}

// The connection leaves the server's books (its fd stays open).
void ControlServer::forget(int fd) {
  const auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  if (auto held = connections_of_uid_.find(it->second.peer.uid); held != connections_of_uid_.end()) {
    if (--held->second == 0) connections_of_uid_.erase(held);
  }
  --counters_.connections_open;
  if (it->second.peer.pidfd >= 0) ::close(it->second.peer.pidfd);
  clients_.erase(it);
}

void ControlServer::drop(int fd) {
  loop_.unwatch(fd);
  ::close(fd);
  const auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  const Connection connection = it->second;
  forget(fd);
  if (connection.verbs_client && verbs_) verbs_->disconnected(connection.id);
}

std::optional<ControlClient> ControlClient::connect(const std::filesystem::path& path,
                                                    std::string& error) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::strerror(errno);
    return std::nullopt;
  }
  const sockaddr_un address = address_of(path);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    error = std::strerror(errno);
    ::close(fd);
    return std::nullopt;
  }
  return ControlClient(fd);
}

ControlClient::ControlClient(ControlClient&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

ControlClient::~ControlClient() {
  if (fd_ >= 0) ::close(fd_);
}

std::optional<nlohmann::json> ControlClient::request(const nlohmann::json& message,
                                                     std::chrono::milliseconds timeout,
                                                     std::string& error) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string text = message.dump();
  if (::send(fd_, text.data(), text.size(), MSG_NOSIGNAL) < 0) {
    error = std::string("send: ") + std::strerror(errno);
    return std::nullopt;
  }
  ReplyAssembler assembler;
  for (;;) {
    if (!wait_for(fd_, POLLIN, remaining(deadline))) {
      error = "no reply within " + std::to_string(timeout.count()) + " ms";
      return std::nullopt;
    }
    // A message's length is peeked first so that it is never truncated, and bounded (a
    // daemon before chunked replies sent any reply as one message).
    char probe = 0;
    const ssize_t length = ::recv(fd_, &probe, 1, MSG_PEEK | MSG_TRUNC);
    if (length > static_cast<ssize_t>(kMaxReplyBytes)) {
      error = "a message of " + std::to_string(length) + " bytes from the daemon";
      return std::nullopt;
    }
    std::vector<char> buffer(static_cast<std::size_t>(std::max<ssize_t>(length, 1)));
    const ssize_t received = ::recv(fd_, buffer.data(), buffer.size(), 0);
    if (received <= 0) {
      error = received == 0 ? "the daemon closed the connection" : std::strerror(errno);
      return std::nullopt;
    }
    switch (assembler.feed(std::string_view(buffer.data(), static_cast<std::size_t>(received)))) {
      case ReplyAssembler::Step::NeedMore: continue;
      case ReplyAssembler::Step::Complete: return assembler.reply();
      case ReplyAssembler::Step::Failed: error = assembler.error(); return std::nullopt;
    }
  }
}

bool ControlClient::wait_closed(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char byte = 0;
  while (wait_for(fd_, POLLIN, remaining(deadline))) {
    const ssize_t received = ::recv(fd_, &byte, 1, 0);
    if (received == 0 || (received < 0 && errno != EINTR && errno != EAGAIN)) return true;
  }
  return false;
}

}  // namespace rrdma::vnic
