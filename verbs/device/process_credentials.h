// The credentials of a client process, as the kernel shows them in /proc/PID/status, and a
// watch that tells when they changed (runs in the daemon). A process that changes
// credentials loses its resources (issue 16, docs/SECURITY.md): whatever right the daemon
// granted at connect was granted to the credentials it saw then.
#pragma once

#include <sys/types.h>

#include <array>
#include <optional>
#include <string_view>

namespace rrdma::verbs {

struct ProcessCredentials {
  std::array<uid_t, 4> uids{};  // real, effective, saved, filesystem
  std::array<gid_t, 4> gids{};
  friend bool operator==(const ProcessCredentials&, const ProcessCredentials&) = default;
};

// The Uid: and Gid: lines of a /proc/PID/status text; nullopt unless both are there whole
// (four decimal ids each). Pure, for the tests and the fuzzer.
std::optional<ProcessCredentials> parse_credentials(std::string_view status);

// One process, named by a pidfd opened at connect so that a later process with the same pid
// is never mistaken for it.
class CredentialWatch {
 public:
  // Reads the process's credentials now; not valid() if it is already gone or unreadable.
  // `pidfd` names the process as it connected (SO_PEERPIDFD; dup'd here); without one (-1)
  // the watch opens its own on `pid`, which a process of a reused pid could answer.
  CredentialWatch(pid_t pid, int pidfd);
  ~CredentialWatch();
  CredentialWatch(CredentialWatch&& other) noexcept;
  CredentialWatch& operator=(CredentialWatch&&) = delete;
  CredentialWatch(const CredentialWatch&) = delete;
  CredentialWatch& operator=(const CredentialWatch&) = delete;

  bool valid() const { return pidfd_ >= 0 && initial_.has_value(); }
  // True when the process still runs with other credentials than at the start. An exited
  // process has not changed: exited() says that.
  bool changed() const;
  // The process that connected is gone, though its connection may live on in a child: the
  // client ends with it (its quota is counted by pid, which a later process may get).
  bool exited() const;
  // Opens /proc/PID/`name` read-only for the process watched (-1 if it is gone): the pid
  // is checked against the pidfd after the open, so the file is never a later process's.
  int open_proc_file(const char* name) const;

 private:
  pid_t pid_ = 0;
  int pidfd_ = -1;
  std::optional<ProcessCredentials> initial_;
};

}  // namespace rrdma::verbs
