#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

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
