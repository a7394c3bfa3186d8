#include "vnic/runtime.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>

namespace rrdma::vnic {
namespace {

struct flock whole_file_lock(short type) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = 0;
  lock.l_len = 0;
  return lock;
}

bool lock_is_held(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct flock query = whole_file_lock(F_RDLCK);
  const bool held = ::fcntl(fd, F_OFD_GETLK, &query) == 0 && query.l_type != F_UNLCK;
  ::close(fd);
  return held;
}

struct SocketProbe {
  bool answers = false;
  bool denied = false;
};

SocketProbe probe_socket(const std::filesystem::path& path) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return {};
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string text = path.string();
  if (text.size() >= sizeof(addr.sun_path)) {
    ::close(fd);
    return {};
  }
  std::memcpy(addr.sun_path, text.c_str(), text.size() + 1);
  // EAGAIN means a full accept backlog: a live but busy listener.
  // EACCES: the socket's mode or group keeps us out (a live daemon, all the same).
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int error = rc == 0 ? 0 : errno;
  ::close(fd);
  return {rc == 0 || error == EAGAIN, error == EACCES || error == EPERM};
}

bool same_inode(int fd, const std::filesystem::path& path) {
  struct stat by_fd {}, by_path {};
  if (::fstat(fd, &by_fd) != 0 || ::stat(path.c_str(), &by_path) != 0) return false;
  return by_fd.st_dev == by_path.st_dev && by_fd.st_ino == by_path.st_ino;
}

}  // namespace

std::filesystem::path runtime_dir() {
  if (const char* dir = std::getenv("RRDMA_RUN_DIR"); dir != nullptr && *dir != '\0') return dir;
  const uid_t uid = ::geteuid();
  if (uid == 0) return kRootRuntimeDir;
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg == '/') {
    struct stat status{};
    if (::stat(xdg, &status) == 0 && S_ISDIR(status.st_mode) && status.st_uid == uid) {
      return std::filesystem::path(xdg) / "rrdma";
    }
  }
  return "/tmp/rrdma-" + std::to_string(uid);
}

// /run/rrdma as before (root's); anyone else's is made 0700 and must be theirs, writable by them alone: in
// /tmp another user could have made it first, to read or replace the sockets in it.
void ensure_runtime_dir(const std::filesystem::path& dir) {
  if (::geteuid() == 0) {
    std::filesystem::create_directories(dir);
    return;
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    throw std::system_error(errno, std::generic_category(), "create " + dir.string());
  }
  struct stat status{};
  if (::lstat(dir.c_str(), &status) != 0) throw std::system_error(errno, std::generic_category(), "stat " + dir.string());
  if (!S_ISDIR(status.st_mode) || status.st_uid != ::geteuid() || (status.st_mode & 0022) != 0) {
    throw std::runtime_error(dir.string() + " is not a directory of this user that only this user may write (made 0700): remove it, or set RRDMA_RUN_DIR");
  }
}

std::vector<std::filesystem::path> runtime_dirs() {
  std::vector<std::filesystem::path> dirs{runtime_dir()};
  if (dirs.front() != kRootRuntimeDir && std::getenv("RRDMA_RUN_DIR") == nullptr) dirs.emplace_back(kRootRuntimeDir);
  return dirs;
}

// A name found in the user's own directory is there; else one of root's (`up --group`
// lets members use it); else the user's own, where `up` makes it.
RuntimePaths RuntimePaths::of(const std::string& name) {
  std::filesystem::path dir = runtime_dir();
  std::error_code ec;
  for (const auto& candidate : runtime_dirs()) {
    if (std::filesystem::exists(candidate / (name + ".pid"), ec) || std::filesystem::exists(candidate / (name + ".sock"), ec)) {
      dir = candidate;
      break;
    }
  }
  return {dir / (name + ".pid"), dir / (name + ".sock"), dir / (name + ".state"),
          dir / (name + ".log")};
}

Liveness assess(const Observation& observation) {
  if (observation.lock_held) {
    return observation.socket_answers ? Liveness::kRunning : Liveness::kStarting;
  }
  return observation.any_file_present ? Liveness::kStale : Liveness::kAbsent;
}

Observation observe(const std::string& name) {
  const auto paths = RuntimePaths::of(name);
  Observation observation;
  std::error_code ec;
  for (const auto& path : {paths.pid_file, paths.socket, paths.state_file}) {
    observation.any_file_present |= std::filesystem::exists(path, ec);
  }
  observation.lock_held = lock_is_held(paths.pid_file);
  const SocketProbe probe = probe_socket(paths.socket);
  observation.socket_answers = probe.answers;
  observation.socket_denied = probe.denied;
  observation.recorded_pid = read_pid_file(paths.pid_file);
  return observation;
}

std::string socket_denied_message(const std::string& name) {
  return "permission denied on " + RuntimePaths::of(name).socket.string() +
         ": the vnic lets only root and the members of its group in (root starts it with "
         "`rrdma-vnic up --group GROUP ...`; add yourself to GROUP, or run this as root)";
}

std::optional<PidFileLock> PidFileLock::acquire(const std::filesystem::path& path) {
  ensure_runtime_dir(path.parent_path());
  // Another command may unlink the file between our open() and our lock; then we hold
  // a lock on a dead inode and must start over on the new file.
  for (;;) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "open " + path.string());
    struct flock lock = whole_file_lock(F_WRLCK);
    if (::fcntl(fd, F_OFD_SETLK, &lock) != 0) {
      const int error = errno;
      ::close(fd);
      if (error == EAGAIN || error == EACCES) return std::nullopt;
      throw std::system_error(error, std::generic_category(), "lock " + path.string());
    }
    if (same_inode(fd, path)) return PidFileLock(fd, path);
    ::close(fd);
  }
}

PidFileLock::PidFileLock(PidFileLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

PidFileLock::~PidFileLock() {
  if (fd_ >= 0) ::close(fd_);
}

void PidFileLock::write_pid(pid_t pid) {
  const std::string text = std::to_string(pid) + "\n";
  if (::ftruncate(fd_, 0) != 0 ||
      ::pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    throw std::system_error(errno, std::generic_category(), "write " + path_.string());
  }
}

void PidFileLock::remove() {
  if (fd_ >= 0 && same_inode(fd_, path_)) ::unlink(path_.c_str());
}

std::optional<pid_t> read_pid_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  long pid = 0;
  if (!(in >> pid) || pid <= 0) return std::nullopt;
  return static_cast<pid_t>(pid);
}

std::optional<nlohmann::json> read_state_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  auto state = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (state.is_discarded() || !state.is_object()) return std::nullopt;
  return state;
}

void write_state_file(const std::filesystem::path& path, const nlohmann::json& state) {
  const auto temporary = path.string() + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << state.dump() << "\n";
    if (!out) throw std::runtime_error("cannot write " + temporary);
  }
  std::filesystem::rename(temporary, path);
}

std::string network_namespace_id() {
  struct stat namespace_file{};
  if (::stat("/proc/self/ns/net", &namespace_file) != 0) return {};
  return std::to_string(namespace_file.st_dev) + ":" + std::to_string(namespace_file.st_ino);
}

}  // namespace rrdma::vnic
