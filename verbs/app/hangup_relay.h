// A blocking wait that must end when the daemon dies, with nothing of ours watching: the
// kernel adds 1 to the wait's eventfd when the connection to the daemon hangs up.
//
// It is an aio poll (IOCB_CMD_POLL, Linux 4.18) of the connection for POLLHUP and POLLERR
// only, whose completion the kernel signals on the eventfd (IOCB_FLAG_RESFD). A thread can
// then sleep in read(2) of that one eventfd, woken by the daemon's write or by its death,
// and read(2) is the call the kernel restarts after a signal exactly when the handler has
// SA_RESTART, as it does for a provider's read of a kernel channel (docs/VERBS_CLIENT.md,
// "Signals"). epoll_wait, which can watch both fds, always fails with EINTR instead.
#pragma once

#include <linux/aio_abi.h>

#include <memory>

namespace rrdma::verbs::client {

class HangupRelay {
 public:
  // When `socket_fd` hangs up, the kernel adds 1 to `event_fd` (once). nullptr when the
  // kernel refuses: no aio, its system-wide limit fs.aio-max-nr reached, a seccomp filter.
  static std::unique_ptr<HangupRelay> arm(int socket_fd, int event_fd);
  // Cancels a relay that has not fired; the kernel then lets go of the socket (which the
  // poll holds open) and of the eventfd.
  ~HangupRelay();
  HangupRelay(const HangupRelay&) = delete;
  HangupRelay& operator=(const HangupRelay&) = delete;

 private:
  HangupRelay() = default;
  // The kernel knows a submitted request by this address (io_cancel names it so): the
  // relay lives on the heap and never moves.
  iocb request_{};
  aio_context_t context_ = 0;
};

}  // namespace rrdma::verbs::client
