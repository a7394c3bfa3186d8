// SIGALRM to the calling thread every 2 ms while in scope, with the handler and flags a test
// asks for: what a signal-driven program such as qperf does to a thread blocked in a verbs
// wait (docs/VERBS_CLIENT.md, "Signals"). A tick that comes before the thread is asleep only
// runs the handler; one of the next finds it asleep, however loaded the machine is.
#pragma once

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <catch2/catch.hpp>

namespace rrdma::test {

class AlarmTicks {
 public:
  AlarmTicks(int flags, void (*handler)(int)) {
    struct sigaction action {};
    action.sa_handler = handler;
    action.sa_flags = flags;
    sigemptyset(&action.sa_mask);
    REQUIRE(::sigaction(SIGALRM, &action, &previous_) == 0);
    sigevent to_me{};
    to_me.sigev_notify = SIGEV_THREAD_ID;
    to_me.sigev_signo = SIGALRM;
    to_me._sigev_un._tid = ::gettid();
    REQUIRE(::timer_create(CLOCK_MONOTONIC, &to_me, &timer_) == 0);
    const itimerspec every{{0, 2'000'000}, {0, 2'000'000}};
    REQUIRE(::timer_settime(timer_, 0, &every, nullptr) == 0);
  }
  // A tick the timer sent before it was deleted is delivered as timer_delete returns, to
  // our handler still.
  ~AlarmTicks() {
    ::timer_delete(timer_);
    ::sigaction(SIGALRM, &previous_, nullptr);
  }
  AlarmTicks(const AlarmTicks&) = delete;
  AlarmTicks& operator=(const AlarmTicks&) = delete;

 private:
  struct sigaction previous_ {};
  timer_t timer_{};
};

}  // namespace rrdma::test
