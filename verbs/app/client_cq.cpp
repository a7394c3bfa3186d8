// The client library's data path from the daemon: CQ rings (poll, notification arm, resize),
// completion channels and the async-event ring (docs/VERBS_DATAPATH.md, "Completions",
// "Completion channels and ibv_req_notify_cq", "Asynchronous events").
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "verbs/app/client.h"
#include "verbs/app/client_internal.h"

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
    case PopResult::Empty: return take_fatal_event(out);
    case PopResult::Broken: return EIO;
  }
  return EIO;
}

// When the daemon is gone, the events it queued come first, then one
// IBV_EVENT_DEVICE_FATAL (element: port 0, as the kernel reports it), then EIO: what a
// kernel async fd reads after its device was removed. Under event_mutex_.
int Context::take_fatal_event(AsyncEventEntry& out) {
  if (!device_fatal()) return EAGAIN;
  if (fatal_event_taken_) return EIO;
  fatal_event_taken_ = true;
  out = AsyncEventEntry{static_cast<std::uint32_t>(verbs::EventType::DeviceFatal), 0, 0};
  return 0;
}

// The daemon pushes the entry and then writes the eventfd, so after a read of the eventfd
// every event it counted is in the ring; an event pushed after our read writes it again.
// A counter left over from events we popped without reading costs one extra loop, never a
// lost event. The wait also ends when the daemon hangs up.
int Context::get_async_event(AsyncEventEntry& out, int timeout_ms) {
  for (;;) {
    const int error = try_get_async_event(out);
    if (error == 0) settle_event_fd();
    if (error != EAGAIN) return error;
    std::uint64_t count = 0;
    EventWait::Woken woken{};
    if (const int wait_error = event_wait_.wait(timeout_ms, woken, count); wait_error != 0) return wait_error;
    if (woken == EventWait::Woken::DaemonGone) note_device_fatal();
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
  std::uint64_t count = 0;  // the eventfd is non-blocking: nothing to read is EAGAIN
  if (::read(event_wait_.event_fd(), &count, sizeof(count)) != static_cast<ssize_t>(sizeof(count))) return;
  if (event_ring_->available() == 0) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t ignored = ::write(event_wait_.event_fd(), &one, sizeof(one));
}

// ---------------------------------------------------------------------------------------
// Completion channels

Result<std::shared_ptr<CompletionChannel>> Context::create_comp_channel() {
  auto wait = EventWait::create(socket_.get());
  if (!wait.ok()) return {wait.error, nullptr};
  return {0, std::make_shared<CompletionChannel>(shared_from_this(), std::move(wait.value))};
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
    // No CQ will fire again: the application polls its CQs, which flush what was posted.
    if (context_->device_fatal()) return EIO;
    std::uint64_t count = 0;
    EventWait::Woken woken{};
    if (const int error = wait_.wait(timeout_ms, woken, count); error != 0) return error;
    if (woken == EventWait::Woken::DaemonGone) context_->note_device_fatal();
    collect_fired(count);
  }
}

// ---------------------------------------------------------------------------------------
// Work logs

namespace {

using verbs::WcOpcode;

std::uint32_t wc_code(WcOpcode opcode) { return static_cast<std::uint32_t>(opcode); }

bool is_receive_completion(const Cqe& cqe) { return rocev2::is_receive(static_cast<WcOpcode>(cqe.opcode)); }

// What a WR_FLUSH_ERR completion carries (ibv_poll_cq(3): wr_id, status, qp_num are valid
// for a failed completion; the opcode is filled as the daemon fills it).
Cqe flushed(std::uint64_t wr_id, std::uint32_t opcode, std::uint32_t qp_num) {
  Cqe cqe{};
  cqe.wr_id = wr_id;
  cqe.status = static_cast<std::uint32_t>(rocev2::WcStatus::WrFlushErr);
  cqe.opcode = opcode;
  cqe.qp_num = qp_num;
  return cqe;
}

// IBV_WR_* -> IBV_WC_* for a send (verbs.h).
std::uint32_t send_wc_opcode(std::uint8_t wr_opcode) {
  return wc_code(rocev2::wr_opcode_info(static_cast<rocev2::WrOpcode>(wr_opcode)).completion);
}
}  // namespace

void WorkLog::posted_send(std::uint64_t wr_id, std::uint8_t opcode, bool signaled) {
  std::lock_guard lock(mutex_);
  sends_.push_back({wr_id, opcode, signaled});
  if (sends_.size() > bound_) sends_.pop_front();
}

void WorkLog::posted_recv(std::uint64_t wr_id) {
  std::lock_guard lock(mutex_);
  recvs_.push_back(wr_id);
  if (recvs_.size() > bound_) recvs_.pop_front();
}

void WorkLog::completed(const Cqe& cqe) {
  std::lock_guard lock(mutex_);
  if (is_receive_completion(cqe)) {
    if (!recvs_.empty()) recvs_.pop_front();
    return;
  }
  if (cqe.status != 0) {
    // An error is reported for its own WR, signaled or not; the unsignaled WRs before it
    // completed (found by review: they were flushed again after a daemon's death).
    const auto failed = std::find_if(sends_.begin(), sends_.end(), [&](const auto& wr) { return wr.wr_id == cqe.wr_id; });
    sends_.erase(sends_.begin(), failed == sends_.end() ? sends_.begin() + (sends_.empty() ? 0 : 1) : failed + 1);
    return;
  }
  // A successful CQE is the first signaled WR; the unsignaled ones before it completed too.
  while (!sends_.empty()) {
    const bool signaled = sends_.front().signaled;
    sends_.pop_front();
    if (signaled) return;
  }
}

std::size_t WorkLog::flush_sends(std::span<Cqe> out) {
  std::lock_guard lock(mutex_);
  std::size_t written = 0;
  while (written < out.size() && !sends_.empty()) {
    out[written++] = flushed(sends_.front().wr_id, send_wc_opcode(sends_.front().opcode), qp_num_);
    sends_.pop_front();
  }
  return written;
}

std::size_t WorkLog::flush_recvs(std::span<Cqe> out) {
  std::lock_guard lock(mutex_);
  std::size_t written = 0;
  while (written < out.size() && !recvs_.empty()) {
    out[written++] = flushed(recvs_.front(), wc_code(WcOpcode::Recv), qp_num_);
    recvs_.pop_front();
  }
  return written;
}

void WorkLog::forget_all() {
  std::lock_guard lock(mutex_);
  sends_.clear();
  recvs_.clear();
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
    notify_fd = cq->channel_->notify_fd();
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
  std::size_t taken = 0;
  for (Cqe& cqe : out) {
    const PopResult result = ring_->try_pop_value(cqe);
    if (result == PopResult::Empty) break;
    if (result == PopResult::Broken) return taken > 0 ? static_cast<int>(taken) : -EIO;
    retire(cqe);
    ++taken;
  }
  if (taken == out.size()) return static_cast<int>(taken);
  // Only a poll that found the ring drained looks at the connection (at a bounded rate): a
  // daemon that still delivers is alive enough.
  const bool fatal = taken > 0 ? context_->device_fatal() : context_->check_device_fatal();
  if (!fatal) return static_cast<int>(taken);
  taken += flush_into(out.subspan(taken));
  // ibv_poll_cq(3): negative on failure. Once everything outstanding was flushed a poll
  // fails, so that a program waiting for a completion that cannot come stops waiting.
  return taken > 0 ? static_cast<int>(taken) : -EIO;
}

void CompletionQueue::attach_log(std::shared_ptr<WorkLog> log, Side side) {
  std::lock_guard lock(mutex_);
  logs_.push_back({std::move(log), side});
}

void CompletionQueue::detach_log(const WorkLog* log) {
  std::lock_guard lock(mutex_);
  std::erase_if(logs_, [&](const AttachedLog& attached) { return attached.log.get() == log; });
}

std::uint32_t CompletionQueue::discard_completions_of(std::uint32_t qp_num) {
  std::lock_guard lock(mutex_);
  if (!ring_) return 0;
  return ring_->remove_if([qp_num](ByteSpan entry) {
    Cqe cqe{};
    std::memcpy(&cqe, entry.data(), std::min(entry.size(), sizeof cqe));
    return cqe.qp_num == qp_num;
  });
}

void CompletionQueue::retire(const Cqe& cqe) {
  const Side side = is_receive_completion(cqe) ? Side::Recv : Side::Send;
  for (const AttachedLog& attached : logs_) {
    if (attached.side == side && attached.log->qp_num() == cqe.qp_num) {
      attached.log->completed(cqe);
      return;
    }
  }
}

std::size_t CompletionQueue::flush_into(std::span<Cqe> out) {
  std::size_t written = 0;
  for (const AttachedLog& attached : logs_) {
    const std::span<Cqe> room = out.subspan(written);
    written += attached.side == Side::Send ? attached.log->flush_sends(room) : attached.log->flush_recvs(room);
  }
  return written;
}

int CompletionQueue::req_notify(bool solicited_only) {
  std::lock_guard lock(mutex_);
  if (!ring_) return EINVAL;
  if (context_->check_device_fatal()) return EIO;
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
