#include "vnic/control.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <utility>
#include <vector>

namespace rrdma::vnic {
namespace {

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

// The verbs requests will be checked against the uid; for now it is only logged, and
// not for the read-only queries a monitor may send every second (the log would grow
// without bound).
void log_request(const PeerCredentials& peer, std::string_view message) {
  for (std::string_view quiet : {"{\"cmd\":\"status\"}", "{\"cmd\":\"stats\"}"}) {
    if (message == quiet) return;
  }
  std::fprintf(stderr, "control: request from pid %d uid %u: %.*s\n", peer.pid, peer.uid,
               static_cast<int>(std::min<std::size_t>(message.size(), 80)), message.data());
  std::fflush(stderr);
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
                             std::optional<VerbsHooks> verbs, std::optional<gid_t> group)
    : path_(std::move(path)), loop_(loop), handler_(std::move(handler)), verbs_(std::move(verbs)) {
  listen_fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::system_error(errno, std::generic_category(), "control socket");
  const sockaddr_un address = address_of(path_);
  ::unlink(path_.c_str());
  if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0 ||
      ::chmod(path_.c_str(), 0660) != 0 || (group && ::chown(path_.c_str(), 0, *group) != 0) ||
      ::listen(listen_fd_, 16) != 0) {
    const int error = errno;
    ::close(listen_fd_);
    ::unlink(path_.c_str());
    throw std::system_error(error, std::generic_category(), "control socket " + path_.string());
  }
  loop_.watch(listen_fd_, [this](Instant) { accept_clients(); });
}

ControlServer::~ControlServer() {
  for (const auto& [fd, connection] : clients_) {
    loop_.unwatch(fd);
    ::close(fd);
    if (connection.verbs_client && verbs_) verbs_->disconnected(connection.id);
  }
  loop_.unwatch(listen_fd_);
  ::close(listen_fd_);
  ::unlink(path_.c_str());
}

void ControlServer::accept_clients() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN: drained; anything else: the client is gone already
    ucred credentials{};
    socklen_t length = sizeof(credentials);
    PeerCredentials peer;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0) {
      peer = {credentials.pid, credentials.uid, credentials.gid};
    }
    clients_.emplace(fd, Connection{peer, next_client_id_++, false});
    ++counters_.connections;
    loop_.watch(fd, [this, fd](Instant) { serve(fd); });
  }
}

// One request per message; the first byte says which protocol (a peek, so that a verbs
// frame is then received whole with its fds by verbs::control::receive_message).
void ControlServer::serve(int fd) {
  for (;;) {
    std::uint8_t first = 0;
    const ssize_t peeked = ::recv(fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
    if (peeked < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (peeked <= 0) {
      drop(fd);
      return;
    }
    const bool verbs_frame = verbs_ && !verbs::control::is_admin_json(ByteSpan(&first, 1));
    if (!(verbs_frame ? serve_verbs(fd) : serve_admin(fd))) return;
  }
}

// False when the connection was dropped.
bool ControlServer::serve_admin(int fd) {
  std::vector<char> buffer(kMaxControlMessage);
  const ssize_t received = ::recv(fd, buffer.data(), buffer.size(), MSG_TRUNC | MSG_DONTWAIT);
  if (received < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
  if (received <= 0) {
    drop(fd);
    return false;
  }
  ++requests_;
  ++counters_.admin_requests;
  const auto peer = clients_[fd].peer;
  log_request(peer, std::string_view(buffer.data(), std::min<std::size_t>(static_cast<std::size_t>(received), buffer.size())));
  if (static_cast<std::size_t>(received) <= buffer.size() &&
      hand_over_stream(fd, std::string_view(buffer.data(), static_cast<std::size_t>(received)))) {
    return false;
  }
  const nlohmann::json reply =
      static_cast<std::size_t>(received) > buffer.size()
          ? error_reply("request larger than " + std::to_string(kMaxControlMessage) + " bytes")
          : answer(std::string_view(buffer.data(), static_cast<std::size_t>(received)), peer, handler_);
  const std::string text = reply.dump();
  if (::send(fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
    drop(fd);  // a client that does not read its replies loses its connection
    return false;
  }
  return true;
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

void ControlServer::add_stream_command(std::string cmd, StreamHandler take) {
  stream_commands_[std::move(cmd)] = std::move(take);
}

// True when the request was a stream command: the connection is no longer ours.
bool ControlServer::hand_over_stream(int fd, std::string_view message) {
  if (stream_commands_.empty() || clients_[fd].verbs_client) return false;
  const auto request = nlohmann::json::parse(message, nullptr, /*allow_exceptions=*/false);
  if (!request.is_object()) return false;
  const auto cmd = request.find("cmd");
  if (cmd == request.end() || !cmd->is_string()) return false;
  const auto stream = stream_commands_.find(cmd->get_ref<const std::string&>());
  if (stream == stream_commands_.end()) return false;
  loop_.unwatch(fd);
  clients_.erase(fd);
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

void ControlServer::drop(int fd) {
  loop_.unwatch(fd);
  ::close(fd);
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  const Connection connection = it->second;
  clients_.erase(it);
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
  if (!wait_for(fd_, POLLIN, remaining(deadline))) {
    error = "no reply within " + std::to_string(timeout.count()) + " ms";
    return std::nullopt;
  }
  // Replies are not bounded like requests (a status lists every neighbour): peek at
  // the message's length first so that it is never truncated.
  char probe = 0;
  const ssize_t length = ::recv(fd_, &probe, 1, MSG_PEEK | MSG_TRUNC);
  std::vector<char> buffer(static_cast<std::size_t>(std::max<ssize_t>(length, 1)));
  const ssize_t received = ::recv(fd_, buffer.data(), buffer.size(), 0);
  if (received <= 0) {
    error = received == 0 ? "the daemon closed the connection" : std::strerror(errno);
    return std::nullopt;
  }
  auto reply = nlohmann::json::parse(std::string_view(buffer.data(), static_cast<std::size_t>(received)),
                                     nullptr, /*allow_exceptions=*/false);
  if (reply.is_discarded() || !reply.is_object()) {
    error = "the daemon's reply is not a JSON object";
    return std::nullopt;
  }
  return reply;
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
