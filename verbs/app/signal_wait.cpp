// sleep_as_read (signal_wait.h).
#include "verbs/app/signal_wait.h"

#include <pthread.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

namespace rrdma::verbs::client {
namespace {

// The calling thread's signalfd: its readiness is judged for the thread that polls it, and
// its mask follows that thread's own signal mask, so each thread has one.
struct ThreadSignalFd {
  int fd = -1;
  sigset_t watched{};
  ~ThreadSignalFd() {
    if (fd >= 0) ::close(fd);
  }
};
thread_local ThreadSignalFd t_signal_fd;

// The signals `application_mask` lets through. Not SIGKILL and SIGSTOP (never blocked, never
// caught), nor glibc's own below SIGRTMIN (cancellation, set*id): pthread_sigmask never
// blocks those, and their handlers have SA_RESTART.
sigset_t let_through(const sigset_t& application_mask) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig = 1; sig <= SIGRTMAX; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP || (sig >= 32 && sig < SIGRTMIN)) continue;
    if (sigismember(&application_mask, sig) == 0) sigaddset(&set, sig);
  }
  return set;
}

// The thread's signalfd watching `watched`, or -1 (descriptors exhausted).
int signal_fd_for(const sigset_t& watched) {
  ThreadSignalFd& mine = t_signal_fd;
  if (mine.fd >= 0 && std::memcmp(&mine.watched, &watched, sizeof(watched)) == 0) return mine.fd;
  int fd = ::signalfd(mine.fd, &watched, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0 && mine.fd >= 0) {
    // The number no longer names our signalfd (the application closed it): forget it.
    mine.fd = -1;
    fd = ::signalfd(-1, &watched, SFD_NONBLOCK | SFD_CLOEXEC);
  }
  if (fd < 0) return -1;
  mine.fd = fd;
  mine.watched = watched;
  return fd;
}

// Whether delivering `pending` ends a read(2) with EINTR. The kernel takes pending signals
// lowest number first, and the first that runs a handler decides: without SA_RESTART the
// read fails, with it the read is restarted. Ignored signals are dropped; a default action
// ends the process or stops it (a stopped read resumes when continued).
bool interrupts_read(const sigset_t& pending) {
  for (int sig = 1; sig <= SIGRTMAX; ++sig) {
    if (sigismember(&pending, sig) != 1) continue;
    struct sigaction action {};
    if (::sigaction(sig, nullptr, &action) != 0) continue;
    if (action.sa_handler == SIG_IGN || action.sa_handler == SIG_DFL) continue;  // sa_sigaction shares it
    return (action.sa_flags & SA_RESTART) == 0;
  }
  return false;
}

// Restores the thread's own mask on every way out: a pending signal is delivered then.
class BlockedSignals {
 public:
  BlockedSignals() {
    sigset_t all;
    sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, &application_mask_);
  }
  ~BlockedSignals() { ::pthread_sigmask(SIG_SETMASK, &application_mask_, nullptr); }
  BlockedSignals(const BlockedSignals&) = delete;
  BlockedSignals& operator=(const BlockedSignals&) = delete;

  const sigset_t& application_mask() const { return application_mask_; }
  // Lets the pending signals through (their handlers run now), then blocks again.
  void deliver() {
    sigset_t all;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &application_mask_, nullptr);
    ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
  }

 private:
  sigset_t application_mask_{};
};

// Without a signalfd: ppoll, which goes on through every signal (the old behaviour).
int sleep_through_signals(std::span<pollfd> fds) {
  for (;;) {
    const int n = ::ppoll(fds.data(), fds.size(), nullptr, nullptr);
    if (n > 0) return 0;
    if (n < 0 && errno != EINTR) return errno;
  }
}

}  // namespace

int sleep_as_read(std::span<pollfd> fds) {
  if (fds.size() > kMaxSleepFds) return EINVAL;
  BlockedSignals blocked;
  const sigset_t watched = let_through(blocked.application_mask());
  const int signal_fd = signal_fd_for(watched);
  if (signal_fd < 0) return sleep_through_signals(fds);
  std::array<pollfd, kMaxSleepFds + 1> set{};
  std::copy(fds.begin(), fds.end(), set.begin());
  pollfd& signals = set[fds.size()];
  signals = {signal_fd, POLLIN, 0};
  for (;;) {
    // EINTR here is only from glibc's own signals, whose handlers have SA_RESTART.
    const int n = ::ppoll(set.data(), fds.size() + 1, nullptr, nullptr);
    if (n < 0 && errno != EINTR) return errno;
    if (n <= 0) continue;
    if ((signals.revents & POLLIN) == 0) break;
    sigset_t pending;
    sigpending(&pending);
    sigset_t deliverable;
    sigandset(&deliverable, &pending, &watched);
    const bool interrupted = interrupts_read(deliverable);
    blocked.deliver();
    if (interrupted) return EINTR;
    signals.revents = 0;
  }
  std::copy(set.begin(), set.begin() + static_cast<std::ptrdiff_t>(fds.size()), fds.begin());
  return 0;
}

}  // namespace rrdma::verbs::client
