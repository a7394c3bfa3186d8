// The state a running vnic keeps under /run/rrdma, and how a later command tells a
// running vnic from one that died without cleaning up (SIGKILL, a crash, a reboot of
// the daemon's mount namespace...).
//
//   NAME.pid    the daemon's pid; the daemon holds an OFD write lock on it for its whole
//               life, so "the lock is held" means "the daemon is alive", pid reuse or not
//   NAME.sock   the control socket (SOCK_SEQPACKET, mode 0660)
//   NAME.state  JSON: what the daemon changed outside itself (a bridge it created, an
//               uplink it enslaved), so a later up/down can undo it after a SIGKILL
//   NAME.log    the daemon's stderr when it runs detached
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rrdma::vnic {

// Where a user's vnics keep their state, the same for every subcommand: $RRDMA_RUN_DIR when
// set; else /run/rrdma for root, $XDG_RUNTIME_DIR/rrdma (when that is the user's own
// directory) or /tmp/rrdma-UID for anyone else.
std::filesystem::path runtime_dir();
// The directories a name is looked up in, in order: runtime_dir(), and for an ordinary user
// (without $RRDMA_RUN_DIR) also root's /run/rrdma, whose vnics `up --group` may open to them.
inline constexpr const char* kRootRuntimeDir = "/run/rrdma";
std::vector<std::filesystem::path> runtime_dirs();
// Creates it if missing (0700 for a non-root user), whose it must be and whom alone it lets write (throws).
void ensure_runtime_dir(const std::filesystem::path& dir);

struct RuntimePaths {
  std::filesystem::path pid_file, socket, state_file, log_file;
  static RuntimePaths of(const std::string& name);
};

// What a command can observe about a name, gathered by observe() below.
struct Observation {
  bool lock_held = false;        // someone holds the pid file's lock
  bool any_file_present = false; // pid, socket or state file exists
  bool socket_answers = false;   // a connect() to NAME.sock succeeded
  bool socket_denied = false;    // connect() failed with EACCES: we may not use it
  std::optional<pid_t> recorded_pid;
};

enum class Liveness {
  kAbsent,    // no trace of the name
  kRunning,   // locked and answering
  kStarting,  // locked but not answering yet (or wedged)
  kStale,     // files left behind by a daemon that is gone
};

// Pure: the verdict from the observations. The lock decides life; the socket only
// decides whether a live daemon is ready; files without a lock are stale.
Liveness assess(const Observation& observation);

Observation observe(const std::string& name);

// What to tell a user whose connect() to NAME.sock failed with EACCES (or EPERM), and how
// to get access.
std::string socket_denied_message(const std::string& name);

// The pid file, locked for the life of the daemon (OFD lock: released by the kernel
// when the process dies, however it dies).
class PidFileLock {
 public:
  // Locks NAME.pid, or returns nullopt when another process holds the lock.
  static std::optional<PidFileLock> acquire(const std::filesystem::path& path);
  PidFileLock(PidFileLock&& other) noexcept;
  PidFileLock& operator=(PidFileLock&&) = delete;
  ~PidFileLock();
  void write_pid(pid_t pid);
  // Unlinks the file while still holding the lock, so no one can lock a dead inode.
  void remove();

 private:
  PidFileLock(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::filesystem::path path_;
};

// This process's network namespace, as "device:inode" of /proc/self/ns/net (the identity the
// kernel gives it); empty if unreadable. Two `up --netdev eth0` in two namespaces are two
// interfaces that share a name.
std::string network_namespace_id();

std::optional<pid_t> read_pid_file(const std::filesystem::path& path);
std::optional<nlohmann::json> read_state_file(const std::filesystem::path& path);
void write_state_file(const std::filesystem::path& path, const nlohmann::json& state);

}  // namespace rrdma::vnic
