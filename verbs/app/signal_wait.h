// A sleep in poll(2) that a signal ends exactly as it ends a read(2).
//
// A kernel provider sleeps in read(2) of the channel or async fd; after a signal handler
// installed without SA_RESTART the read fails with EINTR, after one with SA_RESTART the
// kernel restarts it. poll, ppoll and epoll_wait fail with EINTR either way, so a library
// that must watch two fds (the eventfd and the daemon's connection) cannot learn the flag
// from them. Here the thread blocks every signal while it sleeps and watches, beside the
// fds, a signalfd of the signals its own mask lets through: a signal then makes that
// signalfd readable instead of interrupting. Before letting it through, the disposition of
// the signal the kernel would deliver first is read; the handler then runs, and the sleep
// either ends with EINTR or goes on (docs/VERBS_CLIENT.md, "Signals").
#pragma once

#include <poll.h>

#include <span>

namespace rrdma::verbs::client {

// Sleeps until one of `fds` is ready (its revents set, 0 returned), with no timeout.
// EINTR when a signal handler installed without SA_RESTART ran meanwhile; a handler with
// SA_RESTART runs and the sleep goes on. At most kMaxSleepFds fds (EINVAL otherwise).
inline constexpr std::size_t kMaxSleepFds = 3;
int sleep_as_read(std::span<pollfd> fds);

}  // namespace rrdma::verbs::client
