#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

#include "tests/vnic/temp_run_dir.h"
#include "vnic/runtime.h"

using namespace rrdma::vnic;

TEST_CASE("assess: the lock decides life, the socket readiness, files staleness", "[vnic][runtime]") {
  Observation o;
  CHECK(assess(o) == Liveness::kAbsent);
  o.any_file_present = true;
  CHECK(assess(o) == Liveness::kStale);
  o.socket_answers = true;  // someone else's listener on a reused path does not make it live
  CHECK(assess(o) == Liveness::kStale);
  o.lock_held = true;
  CHECK(assess(o) == Liveness::kRunning);
  o.socket_answers = false;
  CHECK(assess(o) == Liveness::kStarting);
  o.any_file_present = false;
  CHECK(assess(o) == Liveness::kStarting);
}

TEST_CASE("runtime paths live under $RRDMA_RUN_DIR", "[vnic][runtime]") {
  test::TempRunDir dir;
  const auto paths = RuntimePaths::of("rv0");
  CHECK(paths.pid_file == dir.path() / "rv0.pid");
  CHECK(paths.socket == dir.path() / "rv0.sock");
  CHECK(paths.state_file == dir.path() / "rv0.state");
  CHECK(paths.log_file == dir.path() / "rv0.log");
}

TEST_CASE("a held pid file lock means running and a released one leaves stale files", "[vnic][runtime]") {
  test::TempRunDir dir;
  const auto paths = RuntimePaths::of("rv0");
  CHECK(assess(observe("rv0")) == Liveness::kAbsent);
  {
    auto lock = PidFileLock::acquire(paths.pid_file);
    REQUIRE(lock);
    lock->write_pid(12345);
    CHECK(read_pid_file(paths.pid_file) == 12345);
    // A second lock attempt, even from this process, is refused (OFD locks belong to
    // the open file, not the process).
    CHECK_FALSE(PidFileLock::acquire(paths.pid_file));
    const auto observation = observe("rv0");
    CHECK(observation.lock_held);
    CHECK(observation.recorded_pid == 12345);
    CHECK(assess(observation) == Liveness::kStarting);  // no socket yet
  }
  // The lock went with its fd, as it goes with a SIGKILLed daemon; the file stays.
  const auto after = observe("rv0");
  CHECK_FALSE(after.lock_held);
  CHECK(assess(after) == Liveness::kStale);
  CHECK(after.recorded_pid == 12345);
  auto lock = PidFileLock::acquire(paths.pid_file);
  REQUIRE(lock);
  lock->remove();
  CHECK_FALSE(std::filesystem::exists(paths.pid_file));
}

TEST_CASE("a socket file nobody listens on does not answer", "[vnic][runtime]") {
  test::TempRunDir dir;
  const auto paths = RuntimePaths::of("rv0");
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
  REQUIRE(fd >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strcpy(address.sun_path, paths.socket.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0);
  REQUIRE(::listen(fd, 1) == 0);
  CHECK(observe("rv0").socket_answers);
  ::close(fd);  // the daemon died: the file remains, connect() is refused
  const auto observation = observe("rv0");
  CHECK(observation.any_file_present);
  CHECK_FALSE(observation.socket_answers);
  CHECK(assess(observation) == Liveness::kStale);
}

TEST_CASE("pid and state files: garbage reads as absent", "[vnic][runtime]") {
  test::TempRunDir dir;
  const auto paths = RuntimePaths::of("rv0");
  std::ofstream(paths.pid_file) << "not a pid\n";
  CHECK_FALSE(read_pid_file(paths.pid_file));
  std::ofstream(paths.pid_file) << "-5\n";
  CHECK_FALSE(read_pid_file(paths.pid_file));
  std::ofstream(paths.state_file) << "{\"created_bridge\": ";
  CHECK_FALSE(read_state_file(paths.state_file));
  write_state_file(paths.state_file, {{"created_bridge", "br9"}});
  const auto state = read_state_file(paths.state_file);
  REQUIRE(state);
  CHECK((*state)["created_bridge"] == "br9");
}

namespace {

// What `body` returns when run in a child process as uid/gid 65534 (root only; empty
// otherwise): runtime_dir() and ensure_runtime_dir() read the effective uid.
std::optional<std::string> as_nobody(const std::function<std::string()>& body) {
  if (::geteuid() != 0) return std::nullopt;
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(fds[0]);
    std::string out = "setresuid failed";
    if (::setresgid(65534, 65534, 65534) == 0 && ::setresuid(65534, 65534, 65534) == 0) {
      try {
        out = body();
      } catch (const std::exception& failure) {
        out = std::string("threw: ") + failure.what();
      }
    }
    (void)!::write(fds[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string result;
  char buffer[512];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof(buffer))) > 0;) result.append(buffer, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  return result;
}

}  // namespace

TEST_CASE("an ordinary user's runtime directory: XDG_RUNTIME_DIR/rrdma if theirs, else /tmp/rrdma-UID",
          "[vnic][runtime][netdev]") {
  if (::geteuid() != 0) {
    WARN("SKIPPED: needs root to become uid 65534 in a child");
    return;
  }
  const std::string xdg = "/tmp/rrdma-xdg-test-" + std::to_string(::getpid());
  REQUIRE(::mkdir(xdg.c_str(), 0700) == 0);
  REQUIRE(::chown(xdg.c_str(), 65534, 65534) == 0);
  const auto dir_with = [](const char* xdg_value) {
    return as_nobody([xdg_value] {
      ::unsetenv("RRDMA_RUN_DIR");
      if (xdg_value != nullptr) ::setenv("XDG_RUNTIME_DIR", xdg_value, 1); else ::unsetenv("XDG_RUNTIME_DIR");
      return runtime_dir().string();
    });
  };
  CHECK(dir_with(xdg.c_str()) == xdg + "/rrdma");
  CHECK(dir_with(nullptr) == "/tmp/rrdma-65534");
  CHECK(dir_with("/root") == "/tmp/rrdma-65534");  // not the user's: ignored
  CHECK(dir_with("relative") == "/tmp/rrdma-65534");
  // Made 0700 when missing; refused when another user made it, or others may write it.
  CHECK(as_nobody([&] {
          ensure_runtime_dir(xdg + "/rrdma");
          struct stat status{};
          ::stat((xdg + "/rrdma").c_str(), &status);
          return std::to_string(status.st_mode & 0777);
        }) == std::to_string(0700));
  const std::string foreign = xdg + "-root";
  REQUIRE(::mkdir(foreign.c_str(), 0755) == 0);
  CHECK(as_nobody([&] {
          ensure_runtime_dir(foreign);
          return std::string("accepted");
        })->find("is not a directory of this user") != std::string::npos);
  std::filesystem::remove_all(xdg);
  std::filesystem::remove_all(foreign);
}

TEST_CASE("root's runtime directory stays /run/rrdma", "[vnic][runtime]") {
  if (::geteuid() != 0) {
    WARN("SKIPPED: root only");
    return;
  }
  const char* saved = std::getenv("RRDMA_RUN_DIR");
  const std::string keep = saved != nullptr ? saved : "";
  ::unsetenv("RRDMA_RUN_DIR");
  CHECK(runtime_dir() == "/run/rrdma");
  if (saved != nullptr) ::setenv("RRDMA_RUN_DIR", keep.c_str(), 1);
}
