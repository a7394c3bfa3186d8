// The daemon's DMA runs its system calls on client memory (pread/pwrite on a client's
// /proc/self/mem, the maps check before a write) on a thread of its own, and the event loop
// waits for each at most a bound (issue 27, item 6). A client's memory can make such a call
// wait without end: a page of a file on a FUSE mount the client serves and never answers, a
// userfaultfd region it never resolves. Before, that call ran on the loop and stopped the
// vnic for every client; now the loop stops waiting at the bound, the call is abandoned to its
// thread (a new thread takes the next calls), and the memory is reported stalled.
//
// A call runs on bytes it owns (a copy of what it writes, a buffer it reads into) and on
// descriptors that stay open while it may still use them (close_when_idle): an abandoned call
// that resumes later never touches memory or descriptors the daemon has reused since.
// docs/VERBS_MEMORY.md ("Memory that never answers") has the design and its cost.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace rrdma::verbs {

class DmaThread {
 public:
  // What a call returned (and errno after it), or that it did not return within the bound.
  struct Outcome {
    bool finished = false;
    ssize_t result = -1;
    int error = 0;
  };
  // `fds` are the descriptors the call uses: they are not closed while an abandoned call holds
  // them (close_when_idle).
  using Call = std::function<ssize_t()>;

  explicit DmaThread(std::chrono::milliseconds bound);
  ~DmaThread();
  DmaThread(const DmaThread&) = delete;
  DmaThread& operator=(const DmaThread&) = delete;

  Outcome run(Call call, std::vector<int> fds);
  // Closes `fd` now, or when the last abandoned call that uses it has returned.
  void close_when_idle(int fd);
  std::chrono::milliseconds bound() const { return bound_; }
  std::uint64_t calls() const { return calls_; }
  std::uint64_t abandoned() const { return abandoned_; }

 private:
  struct Worker;
  struct Held;
  std::chrono::milliseconds bound_;
  std::shared_ptr<Worker> worker_;
  std::shared_ptr<Held> held_;
  std::uint64_t calls_ = 0;
  std::uint64_t abandoned_ = 0;
};

}  // namespace rrdma::verbs
