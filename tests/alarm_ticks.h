// SIGALRM to the calling thread every 2 ms while in scope, with the handler and flags a test
// asks for: what a signal-driven program such as qperf does to a thread blocked in a verbs
// wait (docs/VERBS_CLIENT.md, "Signals"). A tick that comes before the thread is asleep only
// runs the handler; one of the next finds it asleep, however loaded the machine is.
// Free of any test framework, so that the probe programs use it too: the caller checks
// armed() with its own assertion.
#pragma once

#include <signal.h>
#include <time.h>
#include <unistd.h>

namespace rrdma::test {

class AlarmTicks {
 public:
  AlarmTicks(int flags, void (*handler)(int)) {
    struct sigaction action {};
    action.sa_handler = handler;
    action.sa_flags = flags;
    sigemptyset(&action.sa_mask);
    handler_set_ = ::sigaction(SIGALRM, &action, &previous_) == 0;
    sigevent to_me{};
    to_me.sigev_notify = SIGEV_THREAD_ID;
    to_me.sigev_signo = SIGALRM;
    to_me._sigev_un._tid = ::gettid();
    timer_made_ = ::timer_create(CLOCK_MONOTONIC, &to_me, &timer_) == 0;
    const itimerspec every{{0, 2'000'000}, {0, 2'000'000}};
    ticking_ = timer_made_ && ::timer_settime(timer_, 0, &every, nullptr) == 0;
  }
  // A tick the timer sent before it was deleted is delivered as timer_delete returns, to
  // our handler still.
  ~AlarmTicks() {
    if (timer_made_) ::timer_delete(timer_);
    if (handler_set_) ::sigaction(SIGALRM, &previous_, nullptr);
  }
  AlarmTicks(const AlarmTicks&) = delete;
  AlarmTicks& operator=(const AlarmTicks&) = delete;

  // The handler is in place and the timer ticks.
  bool armed() const { return handler_set_ && ticking_; }

 private:
  struct sigaction previous_ {};
  timer_t timer_{};
  bool handler_set_ = false;
  bool timer_made_ = false;
  bool ticking_ = false;
};

}  // namespace rrdma::test
