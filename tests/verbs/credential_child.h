// A forked child that changes its credentials when asked (setresuid to nobody): the client
// process of the credential tests (process_credentials_test.cpp, nic_test.cpp). Needs root;
// killed and reaped on destruction.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

namespace rrdma::verbs::test {

class CredentialChangingChild {
 public:
  CredentialChangingChild() {
    REQUIRE(::pipe(go_) == 0);
    REQUIRE(::pipe(done_) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::alarm(60);  // never outlive a stuck test
      char byte = 0;
      if (::read(go_[0], &byte, 1) != 1 || ::setresuid(65534, 65534, 65534) != 0 || ::write(done_[1], "d", 1) != 1)
        ::_exit(2);
      ::pause();
      ::_exit(0);
    }
  }
  ~CredentialChangingChild() {
    end();
    for (int fd : {go_[0], go_[1], done_[0], done_[1]}) ::close(fd);
  }
  CredentialChangingChild(const CredentialChangingChild&) = delete;
  CredentialChangingChild& operator=(const CredentialChangingChild&) = delete;

  pid_t pid() const { return pid_; }
  // Returns once the child runs as nobody.
  void change_credentials() {
    char byte = 0;
    REQUIRE(::write(go_[1], "g", 1) == 1);
    REQUIRE(::read(done_[0], &byte, 1) == 1);
  }
  void end() {
    if (reaped_) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
  }

 private:
  pid_t pid_ = -1;
  int go_[2] = {-1, -1};
  int done_[2] = {-1, -1};
  bool reaped_ = false;
};

}  // namespace rrdma::verbs::test
