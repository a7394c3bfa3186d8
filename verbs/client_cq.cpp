// The client library's data path from the daemon: CQ rings (poll, notification arm, resize),
// completion channels and the async-event ring (docs/VERBS_DATAPATH.md, "Completions",
// "Completion channels and ibv_req_notify_cq", "Asynchronous events").
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "verbs/client.h"
#include "verbs/client_internal.h"

namespace rrdma::verbs::client {

namespace field = control::field;
using control::MessageType;

// ---------------------------------------------------------------------------------------
// Async events

int Context::try_get_async_event(AsyncEventEntry& out) {
  std::lock_guard lock(event_mutex_);
  if (!event_ring_) return EIO;
  switch (event_ring_->try_pop_value(out)) {
    case PopResult::Popped: return 0;
    case PopResult::Empty: return EAGAIN;
    case PopResult::Broken: return EIO;
  }
  return EIO;
}

// The daemon pushes the entry and then writes the eventfd, so after a read of the eventfd
// every event it counted is in the ring; an event pushed after our read writes it again.
// A counter left over from events we popped without reading costs one extra loop, never a
// lost event.
int Context::get_async_event(AsyncEventEntry& out, int timeout_ms) {
  for (;;) {
    const int error = try_get_async_event(out);
    if (error == 0) settle_event_fd();
    if (error != EAGAIN) return error;
    std::uint64_t count = 0;
    if (const int wait_error = read_event_fd(event_fd_.get(), timeout_ms, count); wait_error != 0) return wait_error;
  }
}

// After taking the last queued event, clear the eventfd's counter so that a poll()ing
// application is not woken for events it already has (a kernel async fd is readable only
// while events are queued). Clear first, look second: an event published before a write we
// cleared is seen here, and we make the fd readable again ourselves; a write that comes
// after the clear makes it readable anyway. Only the daemon's lag between publishing and
// writing can still leave a count behind (docs/VERBS_CLIENT.md, "Known limits").
void Context::settle_event_fd() {
  std::lock_guard lock(event_mutex_);
  if (!event_ring_ || event_ring_->available() != 0) return;
  pollfd readable{event_fd_.get(), POLLIN, 0};
  if (::poll(&readable, 1, 0) != 1) return;
  std::uint64_t count = 0;
  if (::read(event_fd_.get(), &count, sizeof(count)) != static_cast<ssize_t>(sizeof(count))) return;
  if (event_ring_->available() == 0) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t ignored = ::write(event_fd_.get(), &one, sizeof(one));
}

// ---------------------------------------------------------------------------------------
// Completion channels

Result<std::shared_ptr<CompletionChannel>> Context::create_comp_channel() {
  auto fd = make_event_fd();
  if (!fd.ok()) return {fd.error, nullptr};
  return {0, std::make_shared<CompletionChannel>(std::move(fd.value))};
}

void CompletionChannel::attach(CompletionQueue* cq) {
  std::lock_guard lock(list_mutex_);
  attached_.push_back(cq);
}

void CompletionChannel::detach(CompletionQueue* cq) {
  std::lock_guard lock(list_mutex_);
  std::erase(attached_, cq);
}

std::size_t CompletionChannel::attached() const {
  std::lock_guard lock(list_mutex_);
  return attached_.size();
}

// Each eventfd write of the daemon stands for one arm it consumed, so after reading a count
// of N we report at most N CQs; a CQ that fired but whose write we have not read yet waits
// for that write. Reporting it early would leave a write behind that wakes the application
// for nothing and then blocks it in the read (ibv_get_cq_event must not block after
// poll() said the fd was readable).
void CompletionChannel::collect_fired(std::uint64_t budget) {
  // The references taken below are dropped after the lock: if one is the last, the CQ's
  // destructor runs and detaches itself, which needs list_mutex_.
  std::vector<std::shared_ptr<CompletionQueue>> alive;
  std::lock_guard lock(list_mutex_);
  for (CompletionQueue* cq : attached_) {
    if (budget == 0) return;
    // A CQ whose last reference is going away is still listed until its destructor
    // detaches it (which waits for list_mutex_); skip it.
    std::shared_ptr<CompletionQueue> listed = cq->weak_from_this().lock();
    if (!listed) continue;
    alive.push_back(listed);
    if (!listed->take_fired()) continue;
    pending_.push_back(listed);
    --budget;
  }
}

int CompletionChannel::get_cq_event(std::shared_ptr<CompletionQueue>& out, int timeout_ms) {
  std::lock_guard reader(read_mutex_);
  for (;;) {
    std::shared_ptr<CompletionQueue> fired;
    {
      std::lock_guard lock(list_mutex_);
      while (!fired && !pending_.empty()) {
        fired = pending_.front().lock();
        pending_.pop_front();
      }
    }
    if (fired) {
      out = std::move(fired);  // outside the lock: out may have held a CQ's last reference
      return 0;
    }
    std::uint64_t count = 0;
    if (const int error = read_event_fd(fd_.get(), timeout_ms, count); error != 0) return error;
    collect_fired(count);
  }
}

// ---------------------------------------------------------------------------------------
// CQs

CompletionQueue::CompletionQueue(std::shared_ptr<Context> context, std::shared_ptr<CompletionChannel> channel)
    : context_(std::move(context)), channel_(std::move(channel)) {}

CompletionQueue::~CompletionQueue() {
  destroy();
  if (channel_) channel_->detach(this);
}

Result<std::shared_ptr<CompletionQueue>> Context::create_cq(std::uint32_t entries,
                                                           std::shared_ptr<CompletionChannel> channel) {
  const auto capacity = ring_capacity_for(entries);
  if (entries == 0 || !capacity) return {EINVAL, nullptr};
  std::shared_ptr<CompletionQueue> cq(new CompletionQueue(shared_from_this(), std::move(channel)));
  const RingGeometry geometry = cq_ring_geometry(*capacity);
  if (const int error = make_ring("rrdma-cq", geometry, cq->region_); error != 0) return {error, nullptr};
  int notify_fd = -1;
  if (cq->channel_) {
    notify_fd = cq->channel_->fd();
  } else {
    // Nobody reads it; non-blocking so it can never matter that its counter fills.
    cq->private_notify_fd_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!cq->private_notify_fd_.valid()) return {errno, nullptr};
    notify_fd = cq->private_notify_fd_.get();
  }
  control::Message request = new_request(MessageType::CreateCq);
  request.words[field::kCqContext] = handle_;
  request.words[field::kCqEntries] = entries;
  request.words[field::kCqRingBytes] = geometry.region_size();
  const int fds[] = {cq->region_.fd(), notify_fd};
  control::Message reply;
  if (const int error = call(request, fds, reply); error != 0) return {error, nullptr};
  cq->handle_ = handle_word(reply.words[field::kHandle]);
  cq->ring_.emplace(cq->region_.bytes(), geometry);
  if (cq->channel_) cq->channel_->attach(cq.get());
  return {0, std::move(cq)};
}

int CompletionQueue::destroy() {
  if (handle_ == 0 || destroyed_.exchange(true)) return 0;
  const int error = destroy_handle(*context_, MessageType::DestroyCq, handle_);
  if (error != 0 && error != EIO) destroyed_ = false;  // EBUSY: a QP still uses it
  return error;
}

std::uint32_t CompletionQueue::capacity() const {
  std::lock_guard lock(mutex_);
  return ring_ ? ring_->capacity() : 0;
}

int CompletionQueue::poll(std::span<Cqe> out) {
  std::lock_guard lock(mutex_);
  if (!ring_) return -EINVAL;
  int taken = 0;
  for (Cqe& cqe : out) {
    const PopResult result = ring_->try_pop_value(cqe);
    if (result == PopResult::Empty) break;
    if (result == PopResult::Broken) return taken > 0 ? taken : -EIO;
    ++taken;
  }
  return taken;
}

int CompletionQueue::req_notify(bool solicited_only) {
  std::lock_guard lock(mutex_);
  if (!ring_) return EINVAL;
  if (ring_->error() != RingError::None) return EIO;
  arm_kind_ = solicited_only ? kNotifySolicited : kNotifyNext;
  ring_->arm_notification(arm_kind_);
  armed_ = true;
  return 0;
}

bool CompletionQueue::take_fired() {
  std::lock_guard lock(mutex_);
  if (!armed_ || !ring_ || ring_->notification_armed() != kNotifyNone) return false;
  armed_ = false;
  return true;
}

// The CQ's lock is held across the request: the daemon moves the CQEs we have not polled
// into the new ring, so polling the old one meanwhile could take a CQE twice.
int CompletionQueue::resize(std::uint32_t entries) {
  std::lock_guard lock(mutex_);
  if (!ring_) return EINVAL;
  const auto capacity = ring_capacity_for(entries);
  // ibv_resize_cq(3): fewer entries than the CQ holds now is an error.
  if (entries == 0 || !capacity || entries < ring_->available()) return EINVAL;
  const RingGeometry geometry = cq_ring_geometry(*capacity);
  SharedRegion region;
  if (const int error = make_ring("rrdma-cq", geometry, region); error != 0) return error;
  control::Message request = context_->new_request(MessageType::ResizeCq);
  request.words[field::kResizeCq] = handle_;
  request.words[field::kResizeEntries] = entries;
  request.words[field::kResizeRingBytes] = geometry.region_size();
  const int fds[] = {region.fd()};
  control::Message reply;
  if (const int error = context_->call(request, fds, reply); error != 0) return error;
  // An arm the daemon had not consumed yet carries over to the new ring; one it consumed
  // has its eventfd write on the way and take_fired() reports it.
  const bool arm_standing = armed_ && ring_->notification_armed() != kNotifyNone;
  ring_.reset();
  region_ = std::move(region);
  ring_.emplace(region_.bytes(), geometry);
  if (arm_standing) ring_->arm_notification(arm_kind_);
  return ring_->error() == RingError::None ? 0 : EIO;
}

}  // namespace rrdma::verbs::client
