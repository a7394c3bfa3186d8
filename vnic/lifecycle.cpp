#include "vnic/lifecycle.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <system_error>
#include <thread>

#include "vnic/control.h"
#include "vnic/daemon.h"
#include "vnic/external_changes.h"
#include "vnic/link.h"
#include "vnic/runtime.h"

namespace rrdma::vnic {
namespace {

using namespace std::chrono_literals;

constexpr auto kStartTimeout = 5000ms;     // until a new daemon must answer
constexpr auto kSetupTimeout = 10000ms;    // until its set-up must have reported
constexpr auto kRequestTimeout = 5000ms;
constexpr auto kStopTimeout = 10000ms;

// The detached child reports its start-up over a pipe, one line each:
// "NOTE text", then "OK" or "ERR text".
class StartupReport {
 public:
  explicit StartupReport(int fd) : fd_(fd) {}
  ~StartupReport() { close(); }
  void note(const std::string& text) { send("NOTE " + text); }
  // The notes, then "OK"; the report is over.
  void ready(const std::vector<std::string>& notes) {
    for (const auto& text : notes) note(text);
    send("OK");
    close();
  }
  void error(const std::string& text) { send("ERR " + text); }
  void close() {
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  }

 private:
  void send(std::string line) {
    std::replace(line.begin(), line.end(), '\n', ' ');
    line += '\n';
    if (fd_ >= 0 && ::write(fd_, line.data(), line.size()) < 0) close();
  }
  int fd_;
};

void redirect_stdio(const char* path, int flags) {
  const int fd = ::open(path, flags | O_CLOEXEC, 0640);
  if (fd < 0) return;
  if ((flags & O_ACCMODE) == O_RDONLY) {
    ::dup2(fd, STDIN_FILENO);
  } else {
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
  }
  ::close(fd);
}

std::string already_running(const std::string& name, const Observation& observation) {
  return "a vnic named " + name + " is already running" +
         (observation.recorded_pid ? " (pid " + std::to_string(*observation.recorded_pid) + ")" : std::string());
}

// The child after fork(): a session of its own, no controlling terminal, stdio on
// /dev/null until stderr becomes NAME.log.
void detach(StartupReport& report) {
  ::setsid();
  if (::chdir("/") != 0) report.note("cannot chdir to /");
  redirect_stdio("/dev/null", O_RDONLY);
  redirect_stdio("/dev/null", O_WRONLY);
}

// Runs a daemon that has reported its start-up; the exit code. A fatal error keeps the log.
int serve(Daemon& daemon) {
  try {
    daemon.run();
    return 0;
  } catch (const std::exception& failure) {
    log_line(std::string("fatal: ") + failure.what());
    daemon.keep_log();
    return 1;
  }
}

// The detached child's whole life, from fork() to _exit(): it becomes the daemon and never
// returns to the CLI's code.
[[noreturn]] void run_detached(const VnicConfig& config, int report_fd) {
  StartupReport report(report_fd);
  detach(report);
  const auto paths = RuntimePaths::of(config.name);
  int code = 1;
  try {
    auto lock = PidFileLock::acquire(paths.pid_file);
    if (!lock) throw std::runtime_error(already_running(config.name, observe(config.name)));
    redirect_stdio(paths.log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC);
    std::vector<std::string> notes;
    Daemon daemon(config, std::move(*lock), notes);
    for (const auto& note : notes) log_line(note);
    report.ready(notes);
    code = serve(daemon);
  } catch (const std::exception& failure) {
    report.error(failure.what());
  }
  std::fflush(nullptr);
  ::_exit(code);
}

Outcome run_foreground(const VnicConfig& config) {
  Outcome outcome;
  const auto paths = RuntimePaths::of(config.name);
  try {
    auto lock = PidFileLock::acquire(paths.pid_file);
    if (!lock) return {false, already_running(config.name, observe(config.name)), {}};
    Daemon daemon(config, std::move(*lock), outcome.notes);
    for (const auto& note : outcome.notes) log_line(note);
    outcome.notes.clear();
    daemon.run();
    outcome.ok = true;
    outcome.message = config.name + " is down";
  } catch (const std::exception& failure) {
    outcome.message = failure.what();
  }
  return outcome;
}

bool readable_before(int fd, std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  pollfd entry{fd, POLLIN, 0};
  return left.count() > 0 && ::poll(&entry, 1, static_cast<int>(left.count())) > 0;
}

// One line of the start-up report into `outcome`; true when it ends the report.
bool take_report_line(const std::string& line, Outcome& outcome) {
  if (line.rfind("NOTE ", 0) == 0) outcome.notes.push_back(line.substr(5));
  if (line == "OK") outcome.ok = true;
  if (line.rfind("ERR ", 0) != 0) return outcome.ok;
  outcome.message = line.substr(4);
  return true;
}

// Reads the child's start-up report until "OK", "ERR" or the end of the pipe.
Outcome read_startup_report(int fd, pid_t child) {
  Outcome outcome;
  std::string pending;
  const auto deadline = std::chrono::steady_clock::now() + kSetupTimeout;
  while (readable_before(fd, deadline)) {
    char buffer[512];
    const ssize_t got = ::read(fd, buffer, sizeof(buffer));
    if (got <= 0) {
      outcome.message = "the daemon exited during set-up";
      return outcome;
    }
    pending.append(buffer, static_cast<std::size_t>(got));
    for (std::size_t end; (end = pending.find('\n')) != std::string::npos; pending.erase(0, end + 1)) {
      if (take_report_line(pending.substr(0, end), outcome)) return outcome;
    }
  }
  outcome.message = "the daemon did not finish its set-up in time (pid " + std::to_string(child) + ")";
  return outcome;
}

Outcome wait_until_answering(const VnicConfig& config) {
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  std::string error;
  do {
    if (auto client = ControlClient::connect(RuntimePaths::of(config.name).socket, error)) {
      if (auto reply = client->request({{"cmd", "status"}}, kRequestTimeout, error)) {
        return {true,
                config.name + " is up: " + reply->value("mac", "") + " " + reply->value("ip", "") +
                    " (pid " + std::to_string(reply->value("pid", 0)) + ")",
                {}};
      }
    }
    std::this_thread::sleep_for(20ms);
  } while (std::chrono::steady_clock::now() < deadline);
  return {false, "the daemon does not answer on its control socket: " + error, {}};
}

Outcome start_detached(const VnicConfig& config) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return {false, std::string("pipe: ") + std::strerror(errno), {}};
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child < 0) return {false, std::string("fork: ") + std::strerror(errno), {}};
  if (child == 0) {
    ::close(fds[0]);
    run_detached(config, fds[1]);
  }
  ::close(fds[1]);
  Outcome outcome = read_startup_report(fds[0], child);
  ::close(fds[0]);
  if (!outcome.ok) {
    ::waitpid(child, nullptr, 0);
    return outcome;
  }
  Outcome answered = wait_until_answering(config);
  answered.notes = std::move(outcome.notes);
  return answered;
}

bool wait_until_unlocked(const std::string& name, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (observe(name).lock_held) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

Outcome clean_stale_by_command(const std::string& name) {
  auto lock = PidFileLock::acquire(RuntimePaths::of(name).pid_file);
  if (!lock) return {false, "vnic " + name + " is starting; try again", {}};
  Outcome outcome{true, name + " was not running", {}};
  try {
    clean_stale(name, outcome.notes);
  } catch (const std::exception& failure) {
    return {false, std::string("cleaning up ") + name + ": " + failure.what(), {}};
  }
  std::error_code ec;
  std::filesystem::remove(RuntimePaths::of(name).log_file, ec);
  lock->remove();
  return outcome;
}

std::string not_running(const std::string& name, const Observation& observation) {
  if (observation.socket_denied) return socket_denied_message(name);
  switch (assess(observation)) {
    case Liveness::kAbsent: return "no vnic named " + name;
    case Liveness::kStarting: return "vnic " + name + " is starting or not answering";
    case Liveness::kStale:
      return "vnic " + name + " is not running (its daemon died; `rrdma-vnic down " + name +
             "` removes what it left)";
    case Liveness::kRunning: break;
  }
  return {};
}

// Ports of the bridge `up` created, other than the vnic's own TAP.
std::vector<std::string> other_ports_of(const std::optional<std::string>& bridge_name, const std::string& tap) {
  std::vector<std::string> others;
  if (!bridge_name) return others;
  try {
    LinkControl links;
    if (auto bridge = links.find(*bridge_name)) {
      for (std::string& port : links.ports_of(bridge->ifindex))
        if (port != tap) others.push_back(std::move(port));
    }
  } catch (const std::exception&) {
  }
  return others;
}

// Asks a running daemon to stop and waits until it has exited: nullopt, or why not.
std::optional<std::string> ask_to_stop(const std::string& name) {
  std::string error;
  auto client = ControlClient::connect(RuntimePaths::of(name).socket, error);
  if (!client) return "cannot reach vnic " + name + ": " + error;
  auto reply = client->request({{"cmd", "down"}}, kRequestTimeout, error);
  if (!reply) return "vnic " + name + " did not answer: " + error;
  if (reply->contains("error")) return reply->value("error", "");
  client->wait_closed(kStopTimeout);
  if (!wait_until_unlocked(name, kStopTimeout)) {
    return "vnic " + name + " did not stop within " + std::to_string(kStopTimeout.count()) + " ms";
  }
  return std::nullopt;
}

// Every name with a socket or pid file under the runtime directory, sorted.
std::set<std::string> names_in_runtime_dir() {
  std::set<std::string> names;
  for (const auto& dir : runtime_dirs()) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      const auto extension = entry.path().extension();
      if (extension == ".sock" || extension == ".pid") names.insert(entry.path().stem().string());
    }
  }
  return names;
}

}  // namespace

std::optional<std::string> missing_net_admin() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
  if (::syscall(SYS_capget, &header, data) != 0) {
    return std::string("cannot read this process's capabilities: ") + std::strerror(errno);
  }
  if ((data[CAP_TO_INDEX(CAP_NET_ADMIN)].effective & CAP_TO_MASK(CAP_NET_ADMIN)) != 0) return std::nullopt;
  return std::string(
      "this needs CAP_NET_ADMIN (to create the TAP and configure links): run it as root, "
      "or grant the capability, e.g. setcap cap_net_admin+ep $(command -v rrdma-vnic)");
}

// The running vnic of this user that already serves `netdev` in this network namespace, if
// any (a second daemon on it would fail to bind UDP 4791 with a less helpful message). An
// interface of the same name in another namespace is another interface.
std::optional<std::string> vnic_serving(const std::string& netdev) {
  const std::string here = network_namespace_id();
  for (const auto& name : names_in_runtime_dir()) {
    if (assess(observe(name)) != Liveness::kRunning) continue;
    const QueryResult result = query_vnic(name, "status");
    if (!result.reply || result.reply->value("netdev", nlohmann::json()) != netdev) continue;
    if (result.reply->value("netns", std::string()) == here) return name;
  }
  return std::nullopt;
}

Outcome start_vnic(const VnicConfig& config, bool foreground) {
  if (config.netdev) {
    if (auto first = vnic_serving(*config.netdev)) {
      return {false, *config.netdev + " already has an RDMA device: " + *first + " (rrdma-vnic down " + *first + ")", {}};
    }
  } else if (auto missing = missing_net_admin()) {
    return {false, *missing, {}};
  }
  const Observation observation = observe(config.name);
  const Liveness liveness = assess(observation);
  if (liveness == Liveness::kRunning || liveness == Liveness::kStarting) {
    return {false, already_running(config.name, observation), {}};
  }
  return foreground ? run_foreground(config) : start_detached(config);
}

Outcome stop_vnic(const std::string& name) {
  if (!is_valid_interface_name(name)) return {false, "bad name '" + name + "'", {}};
  const Observation observation = observe(name);
  const Liveness liveness = assess(observation);
  if (liveness == Liveness::kStale) return clean_stale_by_command(name);
  if (liveness != Liveness::kRunning) return {false, not_running(name, observation), {}};
  const auto state = read_state_file(RuntimePaths::of(name).state_file);
  const ExternalChanges changes = state ? ExternalChanges::from_json(*state) : ExternalChanges{};
  // The daemon detaches these when it deletes its bridge; its log goes with a clean stop,
  // so the note is made here.
  const std::vector<std::string> detached = other_ports_of(changes.created_bridge, name);
  if (auto error = ask_to_stop(name)) return {false, std::move(*error), {}};
  Outcome outcome{true, name + " is down", {}};
  if (!detached.empty()) {
    std::string ports;
    for (const std::string& port : detached) ports += " " + port;
    outcome.notes.push_back("removed bridge " + *changes.created_bridge + "; detached its other ports:" + ports);
  }
  return outcome;
}

QueryResult query_vnic(const std::string& name, const std::string& cmd) {
  if (!is_valid_interface_name(name)) return {std::nullopt, "bad name '" + name + "'"};
  const Observation observation = observe(name);
  if (assess(observation) != Liveness::kRunning) return {std::nullopt, not_running(name, observation)};
  std::string error;
  auto client = ControlClient::connect(RuntimePaths::of(name).socket, error);
  if (!client) return {std::nullopt, "cannot reach vnic " + name + ": " + error};
  auto reply = client->request({{"cmd", cmd}}, kRequestTimeout, error);
  if (!reply) return {std::nullopt, "vnic " + name + " did not answer: " + error};
  if (reply->contains("error")) return {std::nullopt, reply->value("error", "")};
  return {std::move(reply), {}};
}

Listing list_vnics() {
  Listing listing;
  for (const auto& name : names_in_runtime_dir()) {
    const Observation observation = observe(name);
    switch (assess(observation)) {
      case Liveness::kRunning: {
        auto result = query_vnic(name, "status");
        if (result.reply) {
          listing.running.push_back(std::move(*result.reply));
        } else {
          listing.notes.push_back(name + ": " + result.error);
        }
        break;
      }
      case Liveness::kStarting:
        listing.notes.push_back(observation.socket_denied ? socket_denied_message(name)
                                                          : name + ": starting or not answering");
        break;
      case Liveness::kStale: listing.notes.push_back(not_running(name, observation)); break;
      case Liveness::kAbsent: break;
    }
  }
  return listing;
}

}  // namespace rrdma::vnic
