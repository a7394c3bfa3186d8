#include "verbs/device/dma_thread.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace rrdma::verbs {

// Descriptors that abandoned calls still use, and those closed meanwhile: shared by every
// worker, so that the last call to return closes what the daemon let go of.
struct DmaThread::Held {
  std::mutex mutex;
  std::vector<int> in_use;    // one entry per abandoned call per descriptor
  std::vector<int> to_close;  // released by the daemon while in use

  void release(const std::vector<int>& fds) {
    const std::lock_guard lock(mutex);
    for (const int fd : fds) {
      const auto it = std::find(in_use.begin(), in_use.end(), fd);
      if (it != in_use.end()) in_use.erase(it);
      if (std::find(in_use.begin(), in_use.end(), fd) != in_use.end()) continue;
      const auto closing = std::find(to_close.begin(), to_close.end(), fd);
      if (closing == to_close.end()) continue;
      to_close.erase(closing);
      ::close(fd);
    }
  }
};

// One thread and one call at a time. Abandoned, it finishes its call, gives back the
// descriptors, and ends; nothing it touches belongs to the daemon any more.
struct DmaThread::Worker {
  std::mutex mutex;
  std::condition_variable wake;
  std::condition_variable done_signal;
  Call call;
  std::vector<int> fds;
  bool pending = false;
  bool done = false;
  bool abandoned = false;
  bool quit = false;
  Outcome outcome;

  static void serve(std::shared_ptr<Worker> self, std::shared_ptr<Held> held) {
    std::unique_lock lock(self->mutex);
    for (;;) {
      self->wake.wait(lock, [&] { return self->pending || self->quit; });
      if (self->quit) return;
      if (self->abandoned) break;  // given up on before it started: never run it
      Call call = std::move(self->call);
      lock.unlock();
      errno = 0;
      const ssize_t result = call();
      const int error = errno;
      lock.lock();
      self->pending = false;
      if (self->abandoned) {
        const std::vector<int> fds = std::move(self->fds);
        lock.unlock();
        held->release(fds);
        return;
      }
      self->outcome = {true, result, error};
      self->done = true;
      self->done_signal.notify_one();
    }
    const std::vector<int> fds = std::move(self->fds);
    lock.unlock();
    held->release(fds);
  }
};

DmaThread::DmaThread(std::chrono::milliseconds bound) : bound_(bound), held_(std::make_shared<Held>()) {}

DmaThread::~DmaThread() {
  if (!worker_) return;
  const std::lock_guard lock(worker_->mutex);
  worker_->quit = true;
  worker_->wake.notify_one();
}

DmaThread::Outcome DmaThread::run(Call call, std::vector<int> fds) {
  ++calls_;
  if (!worker_) {
    worker_ = std::make_shared<Worker>();
    std::thread(Worker::serve, worker_, held_).detach();
  }
  std::unique_lock lock(worker_->mutex);
  worker_->call = std::move(call);
  worker_->fds = std::move(fds);
  worker_->pending = true;
  worker_->done = false;
  worker_->wake.notify_one();
  if (worker_->done_signal.wait_for(lock, bound_, [&] { return worker_->done; })) return worker_->outcome;
  // The call goes on without us: its descriptors stay open until it returns.
  worker_->abandoned = true;
  {
    const std::lock_guard held(held_->mutex);
    held_->in_use.insert(held_->in_use.end(), worker_->fds.begin(), worker_->fds.end());
  }
  lock.unlock();
  worker_.reset();
  ++abandoned_;
  return {};
}

void DmaThread::close_when_idle(int fd) {
  if (fd < 0) return;
  const std::lock_guard lock(held_->mutex);
  if (std::find(held_->in_use.begin(), held_->in_use.end(), fd) != held_->in_use.end()) {
    held_->to_close.push_back(fd);
    return;
  }
  ::close(fd);
}

}  // namespace rrdma::verbs
