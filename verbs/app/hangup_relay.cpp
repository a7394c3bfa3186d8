// The hang-up relay (hangup_relay.h): aio polls on the process's aio contexts. glibc has no
// wrappers for the kernel's aio calls (libaio's are a separate library); they are syscalls.
#include "verbs/app/hangup_relay.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>
#include <mutex>
#include <vector>

namespace rrdma::verbs::client {
namespace {

// Relays one aio context holds at once. io_setup counts what it is asked for against
// fs.aio-max-nr (65536 by default, for the whole system), so contexts are small and added
// as a process needs them: one serves a context and 63 completion channels.
constexpr unsigned kRelaysPerContext = 64;
constexpr std::size_t kMaxContexts = 16;

// The process's aio contexts. They live as long as the process: destroying one waits for an
// RCU grace period (measured: 35-48 ms), which closing a channel must not cost.
struct AioContexts {
  std::mutex mutex;
  pid_t owner = 0;  // aio contexts belong to an address space: a forked child has none
  std::vector<aio_context_t> contexts;
};

AioContexts& aio_contexts() {
  static auto* contexts = new AioContexts;  // never destroyed: relays may outlive statics
  return *contexts;
}

// Takes the completions of fired and cancelled relays off the context's ring: until then
// each holds a slot, and a full ring refuses new requests.
void reap(aio_context_t context) {
  io_event done[kRelaysPerContext];
  timespec now{};
  while (::syscall(SYS_io_getevents, context, 0, kRelaysPerContext, done, &now) == kRelaysPerContext) {
  }
}

bool submit(aio_context_t context, iocb& request) {
  iocb* batch[] = {&request};
  return ::syscall(SYS_io_submit, context, 1, batch) == 1;
}

}  // namespace

std::unique_ptr<HangupRelay> HangupRelay::arm(int socket_fd, int event_fd) {
  std::unique_ptr<HangupRelay> relay(new HangupRelay);
  iocb& request = relay->request_;
  request.aio_lio_opcode = IOCB_CMD_POLL;
  request.aio_fildes = static_cast<std::uint32_t>(socket_fd);
  request.aio_buf = 0;  // no events asked for: POLLHUP and POLLERR are always reported
  request.aio_flags = IOCB_FLAG_RESFD;
  request.aio_resfd = static_cast<std::uint32_t>(event_fd);

  AioContexts& all = aio_contexts();
  std::lock_guard lock(all.mutex);
  if (all.owner != ::getpid()) {
    all.owner = ::getpid();
    all.contexts.clear();
  }
  for (aio_context_t context : all.contexts) {
    reap(context);
    if (submit(context, request)) {
      relay->context_ = context;
      return relay;
    }
  }
  aio_context_t context = 0;
  if (all.contexts.size() == kMaxContexts || ::syscall(SYS_io_setup, kRelaysPerContext, &context) != 0) return nullptr;
  all.contexts.push_back(context);
  if (!submit(context, request)) return nullptr;
  relay->context_ = context;
  return relay;
}

// EINPROGRESS: the kernel completes the request in a moment, adding 1 to the eventfd (which
// nobody reads any more) and dropping its hold on the socket. EINVAL: it had fired, or this
// is a forked child's copy of its parent's relay.
HangupRelay::~HangupRelay() {
  io_event result{};
  [[maybe_unused]] const long ignored = ::syscall(SYS_io_cancel, context_, &request_, &result);
}

}  // namespace rrdma::verbs::client
