// Runs in the application process (the rdma_cm shim, librrdma_ucma.so).
#include "verbs/app/ucma/daemon_link.h"

#include <dirent.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>

#include "verbs/app/ucma/fd_table.h"
#include "verbs/app/ucma/real_libc.h"

namespace rrdma::ucma_shim {
namespace {

namespace ucma = verbs::ucma;
namespace control = verbs::control;

constexpr std::string_view kSocketSuffix = ".sock";

// Where the daemons' sockets are: the same rule as the verbs client (verbs/app/client.cpp).
std::string run_directory() {
  if (const char* dir = std::getenv("RRDMA_RUN_DIR"); dir != nullptr && *dir != '\0') return dir;
  return "/run/rrdma";
}

bool valid_device_name(std::string_view name) {
  return !name.empty() && name.size() < 64 && name.find('/') == std::string_view::npos && name != "." &&
         name != "..";
}

// RRDMA_DEVICES as our libibverbs reads it (verbs/app/ibverbs/devices.cpp): names separated
// by commas, empty ones skipped, each once, in the order given.
std::vector<std::string> listed_devices(std::string_view list) {
  std::vector<std::string> names;
  while (!list.empty()) {
    const auto comma = list.find(',');
    const std::string name(list.substr(0, comma));
    if (valid_device_name(name) && std::find(names.begin(), names.end(), name) == names.end())
      names.push_back(name);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return names;
}

// Every <name>.sock in the run directory, in name order (the verbs client's list_devices).
std::vector<std::string> socket_names(const std::string& dir) {
  std::vector<std::string> names;
  DIR* listing = ::opendir(dir.c_str());
  if (listing == nullptr) return names;
  while (const dirent* entry = ::readdir(listing)) {
    const std::string_view file(entry->d_name);
    if (file.size() <= kSocketSuffix.size() || !file.ends_with(kSocketSuffix)) continue;
    names.emplace_back(file.substr(0, file.size() - kSocketSuffix.size()));
  }
  ::closedir(listing);
  std::sort(names.begin(), names.end());
  return names;
}

// A connected socket, or -1 (nothing listens there: a socket file a dead daemon left).
int connect_to(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) return -1;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  const int fd = real::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    real::close(fd);
    return -1;
  }
  return fd;
}

// The first vnic, in the order libibverbs would show them, whose daemon answers.
int connect_to_vnic() {
  const std::string dir = run_directory();
  const char* wanted = std::getenv("RRDMA_DEVICES");
  const std::vector<std::string> names =
      wanted != nullptr && *wanted != '\0' ? listed_devices(wanted) : socket_names(dir);
  for (const auto& name : names) {
    if (const int fd = connect_to(dir + "/" + name + std::string(kSocketSuffix)); fd >= 0) return fd;
  }
  return -1;
}

struct Connection {
  int fd = -1;
  pid_t owner = 0;  // the process that connected it
  dev_t device = 0;  // its identity: the application may close our descriptor and reuse the number
  ino_t inode = 0;
  std::uint32_t last_request = 0;
};

constinit std::mutex g_mutex;
constinit Connection g_connection;

bool still_ours(const Connection& connection) {
  struct stat st {};
  return real::fstat(connection.fd, &st) == 0 && st.st_dev == connection.device && st.st_ino == connection.inode;
}

// Forgets the connection; closes it only if the number still names it (in a forked child,
// the copy it inherited).
void drop_connection() {
  if (g_connection.fd >= 0 && still_ours(g_connection)) real::close(g_connection.fd);
  g_connection.fd = -1;
}

int ensure_connected() {
  if (g_connection.fd >= 0 && g_connection.owner == ::getpid() && still_ours(g_connection)) return 0;
  drop_connection();
  const int fd = connect_to_vnic();
  if (fd < 0) return ENODEV;
  struct stat st {};
  if (real::fstat(fd, &st) != 0) {
    real::close(fd);
    return ENODEV;
  }
  g_connection = Connection{fd, ::getpid(), st.st_dev, st.st_ino, g_connection.last_request};
  return 0;
}

// What a failed send or receive means for the application: the daemon is gone (ENODEV), or
// it said something that is not an answer (EIO).
int link_error(control::IoError error) {
  return error == control::IoError::PeerClosed || error == control::IoError::System ? ENODEV : EIO;
}

control::IoError send_retrying(const ucma::Frame& request) {
  for (;;) {
    const control::IoError error = ucma::send_frame(g_connection.fd, request);
    if (error != control::IoError::System || errno != EINTR) return error;
  }
}

// The reply is awaited through signals: the daemon already runs the command, and an
// unread reply would answer the next one.
ucma::Received receive_retrying() {
  for (;;) {
    ucma::Received received = ucma::receive_frame(g_connection.fd);
    if (received.error != control::IoError::System || errno != EINTR) return received;
  }
}

bool answers(const ucma::Frame& reply, const ucma::Frame& request) {
  return reply.reply && reply.kind == request.kind && reply.request_id == request.request_id;
}

int status_errno(std::uint32_t status) { return status < 4096 ? static_cast<int>(status) : EIO; }

DaemonReply exchange(ucma::Frame& request) {
  request.request_id = ++g_connection.last_request;
  if (const control::IoError sent = send_retrying(request); sent != control::IoError::None) {
    drop_connection();
    return {link_error(sent), 0, -1, {}};
  }
  ucma::Received received = receive_retrying();
  if (received.error != control::IoError::None || !answers(received.frame, request)) {
    drop_connection();
    return {received.error != control::IoError::None ? link_error(received.error) : EIO, 0, -1, {}};
  }
  const int fd = received.fds.size() == 1 ? received.fds.release(0) : -1;
  return {status_errno(received.frame.status), received.frame.channel, fd, std::move(received.frame.body)};
}

void lock_for_fork() {
  g_mutex.lock();
  lock_table_for_fork();
}
void unlock_after_fork() {
  unlock_table_after_fork();
  g_mutex.unlock();
}

}  // namespace

DaemonReply call_daemon(ucma::Frame request) {
  std::lock_guard lock(g_mutex);
  if (const int error = ensure_connected(); error != 0) return {error, 0, -1, {}};
  return exchange(request);
}

void install_fork_handlers() { ::pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork); }

}  // namespace rrdma::ucma_shim
