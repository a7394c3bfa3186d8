// The credentials a client process had at connect, and the watch that sees them change
// (verbs/device/process_credentials.h): a process that changes credentials loses its resources.
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "tests/verbs/credential_child.h"
#include "verbs/device/process_credentials.h"

using namespace rrdma::verbs;

TEST_CASE("credentials: the Uid and Gid lines of /proc/PID/status, four ids each") {
  const auto parsed = parse_credentials("Name:\tx\nUid:\t1000\t0\t1000\t1000\nGid:\t100\t100\t100\t7\nGroups:\t\n");
  REQUIRE(parsed);
  CHECK(parsed->uids == std::array<uid_t, 4>{1000, 0, 1000, 1000});
  CHECK(parsed->gids == std::array<gid_t, 4>{100, 100, 100, 7});
  const auto own = parse_credentials("Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n");
  REQUIRE(own);
  CHECK_FALSE(*own == *parsed);
}

TEST_CASE("credentials: anything but two whole lines of four ids is refused") {
  for (const char* text : {"", "Uid:\t1\t2\t3\t4\n", "Gid:\t1\t2\t3\t4\n", "Uid:\t1\t2\t3\nGid:\t1\t2\t3\t4\n",
                           "Uid:\t1\t2\t3\t4\t5\nGid:\t1\t2\t3\t4\n", "Uid:\t1\t2\tx\t4\nGid:\t1\t2\t3\t4\n",
                           "Uid:\t-1\t2\t3\t4\nGid:\t1\t2\t3\t4\n", "Uid:\t99999999999\t2\t3\t4\nGid:\t1\t2\t3\t4\n",
                           "XUid:\t1\t2\t3\t4\nGid:\t1\t2\t3\t4\n", "Uid:\t1\t2\t3\t4\nGid:"}) {
    INFO(text);
    CHECK_FALSE(parse_credentials(text));
  }
  // A label inside another line does not count; the real line later does.
  CHECK(parse_credentials("Name:\tUid:\t9\nUid:\t1\t2\t3\t4\nGid:\t1\t2\t3\t4\n"));
}

TEST_CASE("credentials: a watch sees a process change credentials, not one that only runs or exits") {
  if (::geteuid() != 0) {
    WARN("SKIPPED: changing a child's credentials needs root");
    return;
  }
  test::CredentialChangingChild child;
  CredentialWatch watch(child.pid(), -1);
  REQUIRE(watch.valid());
  CHECK_FALSE(watch.changed());
  CHECK_FALSE(watch.exited());
  child.change_credentials();
  CHECK(watch.changed());
  child.end();
  CHECK_FALSE(watch.changed());
  CHECK(watch.exited());
}

TEST_CASE("credentials: a watch follows the pidfd it is given, not the pid") {
  const int own = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0u));
  REQUIRE(own >= 0);
  // The pid names a process that is gone; the pidfd, the connecting process, lives.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK_FALSE(CredentialWatch(child, own).valid());  // credentials read by pid: none
  CredentialWatch watch(::getpid(), own);
  ::close(own);  // the watch keeps its own duplicate
  REQUIRE(watch.valid());
  CHECK_FALSE(watch.exited());
  CHECK_FALSE(watch.changed());
}

TEST_CASE("credentials: a pid that is gone gives no watch") {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK_FALSE(CredentialWatch(child, -1).valid());
  CHECK_FALSE(CredentialWatch(0, -1).valid());
}
