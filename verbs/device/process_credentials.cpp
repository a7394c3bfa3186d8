#include "verbs/device/process_credentials.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <charconv>
#include <string>
#include <utility>

namespace rrdma::verbs {
namespace {

// Four decimal ids after `label`, separated by tabs or spaces, up to the end of the line.
template <typename Id>
bool parse_ids(std::string_view status, std::string_view label, std::array<Id, 4>& out) {
  std::size_t at = status.find(label);
  while (at != std::string_view::npos && at != 0 && status[at - 1] != '\n') at = status.find(label, at + 1);
  if (at == std::string_view::npos) return false;
  std::string_view line = status.substr(at + label.size());
  line = line.substr(0, line.find('\n'));
  for (Id& id : out) {
    const std::size_t start = line.find_first_not_of(" \t");
    if (start == std::string_view::npos) return false;
    line.remove_prefix(start);
    const auto [end, error] = std::from_chars(line.data(), line.data() + line.size(), id);
    if (error != std::errc{} || end == line.data()) return false;
    line.remove_prefix(static_cast<std::size_t>(end - line.data()));
  }
  return line.find_first_not_of(" \t") == std::string_view::npos;
}

std::optional<ProcessCredentials> read_credentials(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/status";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text(4096, '\0');
  std::size_t length = 0;
  for (;;) {
    if (length == text.size()) text.resize(text.size() * 2);
    const ssize_t n = ::read(fd, text.data() + length, text.size() - length);
    if (n <= 0) break;
    length += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return parse_credentials(std::string_view(text.data(), length));
}

// Debian 12's glibc 2.36 declares pidfd_open in <sys/pidfd.h> without extern "C": call the
// system call itself.
int open_pidfd(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0u)); }

bool has_exited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

}  // namespace

std::optional<ProcessCredentials> parse_credentials(std::string_view status) {
  ProcessCredentials credentials;
  if (!parse_ids(status, "Uid:", credentials.uids) || !parse_ids(status, "Gid:", credentials.gids)) return std::nullopt;
  return credentials;
}

CredentialWatch::CredentialWatch(pid_t pid, int pidfd) : pid_(pid) {
  if (pid <= 0) return;
  pidfd_ = pidfd >= 0 ? ::fcntl(pidfd, F_DUPFD_CLOEXEC, 0) : open_pidfd(pid);
  if (pidfd_ < 0) return;
  initial_ = read_credentials(pid);
  // Read after the pidfd was opened, and the process was still there after the read: the
  // credentials are that process's, not those of a later one with its pid.
  if (has_exited(pidfd_)) initial_.reset();
}

CredentialWatch::~CredentialWatch() {
  if (pidfd_ >= 0) ::close(pidfd_);
}

CredentialWatch::CredentialWatch(CredentialWatch&& other) noexcept
    : pid_(other.pid_), pidfd_(std::exchange(other.pidfd_, -1)), initial_(std::move(other.initial_)) {}

bool CredentialWatch::exited() const { return pidfd_ >= 0 && has_exited(pidfd_); }

int CredentialWatch::open_proc_file(const char* name) const {
  if (pidfd_ < 0 || has_exited(pidfd_)) return -1;
  const std::string path = "/proc/" + std::to_string(pid_) + "/" + name;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0 && has_exited(pidfd_)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool CredentialWatch::changed() const {
  if (!valid() || has_exited(pidfd_)) return false;
  const std::optional<ProcessCredentials> now = read_credentials(pid_);
  if (!now || has_exited(pidfd_)) return false;
  return *now != *initial_;
}

}  // namespace rrdma::verbs
