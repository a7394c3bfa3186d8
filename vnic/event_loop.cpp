#include "vnic/event_loop.h"

#include <fcntl.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace rrdma::vnic {
namespace {

// liburing 2.3 predates IORING_OP_READ_MULTISHOT (Linux 6.7); its number in the kernel's
// enum io_uring_op follows IORING_OP_SENDMSG_ZC.
constexpr std::uint8_t kOpReadMultishot = IORING_OP_SENDMSG_ZC + 1;
constexpr unsigned kBufferGroup = 0;
constexpr unsigned kSingleReadsInFlight = 16;  // the fallback without multishot reads
constexpr unsigned kMaxConsecutiveReadErrors = 64;
constexpr auto kReadPause = std::chrono::milliseconds(100);
constexpr auto kShutdownTxGrace = std::chrono::milliseconds(200);
constexpr auto kShutdownCancelGrace = std::chrono::seconds(1);
// How long one look at the CPUs' load stands for (busy_poll_only_when_idle).
constexpr auto kIdleCheckInterval = std::chrono::milliseconds(4);

// user_data: the kind of request in the top byte, its argument (slot, watch id,
// timer generation) below.
enum class Kind : std::uint8_t { kFrameRead = 1, kWrite, kWatch, kWatchRemove, kTimeout,
                                 kTimeoutUpdate, kCancel, kSignal };
// The 8 bytes an eventfd write adds; static so it outlives every write in flight.
constexpr std::uint64_t kEventfdIncrement = 1;
constexpr std::uint64_t tag(Kind kind, std::uint64_t argument = 0) {
  return (static_cast<std::uint64_t>(kind) << 56) | (argument & ((1ULL << 56) - 1));
}
constexpr Kind kind_of(std::uint64_t user_data) { return static_cast<Kind>(user_data >> 56); }
constexpr std::uint64_t argument_of(std::uint64_t user_data) {
  return user_data & ((1ULL << 56) - 1);
}

std::uint8_t* map_anonymous(std::size_t bytes) {
  void* memory = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "mmap");
  return static_cast<std::uint8_t*>(memory);
}

__kernel_timespec to_timespec(Instant instant) {
  const auto since_epoch = instant.time_since_epoch();
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
  __kernel_timespec spec{};
  spec.tv_sec = seconds.count();
  spec.tv_nsec = std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch - seconds).count();
  return spec;
}

__kernel_timespec to_timespec(Duration duration) {
  return to_timespec(Instant{} + duration);
}

bool kernel_supports(io_uring& ring, int opcode) {
  io_uring_probe* probe = io_uring_get_probe_ring(&ring);
  if (probe == nullptr) return false;
  const bool supported = io_uring_opcode_supported(probe, opcode) != 0;
  io_uring_free_probe(probe);
  return supported;
}

// Tells the CPU this is a spin-wait (cheaper for a hyper-thread sibling, and for a VM's host).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

std::optional<unsigned> runnable_tasks_in_loadavg(std::string_view text) {
  // Fields: three load averages, then "RUNNABLE/TOTAL", then the last pid.
  for (int field = 0; field < 3; ++field) {
    const std::size_t end = text.find(' ');
    if (end == std::string_view::npos || end == 0) return std::nullopt;
    text.remove_prefix(end + 1);
  }
  unsigned runnable = 0;
  const auto [rest, error] = std::from_chars(text.data(), text.data() + text.size(), runnable);
  if (error != std::errc() || rest == text.data() || rest == text.data() + text.size() || *rest != '/') {
    return std::nullopt;
  }
  return runnable;
}

EventLoop::EventLoop(const EventLoopConfig& config)
    : config_(config),
      rx_buffer_size_(config.receive_buffer_size != 0 ? config.receive_buffer_size : config.frame_buffer_size) {
  if (config_.rx_buffers == 0 || (config_.rx_buffers & (config_.rx_buffers - 1)) != 0) {
    throw std::invalid_argument("rx_buffers must be a power of two");
  }
  io_uring_params params{};
  // One thread submits and reaps; deferring task work to io_uring_enter() keeps the
  // kernel from interrupting the loop to post completions it will not look at yet.
  // TASKRUN_FLAG: the kernel raises IORING_SQ_TASKRUN when it has completions to post, so
  // that busy polling can look at memory instead of entering the kernel each time.
  params.flags = config_.defer_taskrun
                     ? IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_TASKRUN_FLAG
                     : 0;
  params.cq_entries = config_.ring_entries * 2;
  params.flags |= IORING_SETUP_CQSIZE;
  int rc = io_uring_queue_init_params(config_.ring_entries, &ring_, &params);
  if (rc == -EINVAL) {
    params = io_uring_params{};
    rc = io_uring_queue_init_params(config_.ring_entries, &ring_, &params);
  }
  if (rc < 0) throw std::system_error(-rc, std::generic_category(), "io_uring_queue_init");

  rx_memory_bytes_ = config_.rx_buffers * rx_buffer_size_;
  rx_memory_ = map_anonymous(rx_memory_bytes_);
  buffer_ring_bytes_ = config_.rx_buffers * sizeof(io_uring_buf);
  buffer_ring_ = reinterpret_cast<io_uring_buf_ring*>(map_anonymous(buffer_ring_bytes_));
  io_uring_buf_ring_init(buffer_ring_);
  io_uring_buf_reg registration{};
  registration.ring_addr = reinterpret_cast<std::uintptr_t>(buffer_ring_);
  registration.ring_entries = config_.rx_buffers;
  registration.bgid = kBufferGroup;
  rc = io_uring_register_buf_ring(&ring_, &registration, 0);
  if (rc < 0) throw std::system_error(-rc, std::generic_category(), "register buffer ring");
  for (unsigned id = 0; id < config_.rx_buffers; ++id) recycle_buffer(id);
  io_uring_buf_ring_advance(buffer_ring_, static_cast<int>(std::exchange(buffers_to_return_, 0)));

  tx_memory_bytes_ = config_.tx_slots * config_.frame_buffer_size;
  tx_memory_ = map_anonymous(tx_memory_bytes_);
  for (std::uint32_t slot = config_.tx_slots; slot-- > 0;) free_tx_slots_.push_back(slot);

  multishot_read_ = config_.multishot_read && kernel_supports(ring_, kOpReadMultishot);
  counters_.multishot_read = multishot_read_ ? 1 : 0;

  if (config_.busy_poll > Duration::zero() && config_.busy_poll_only_when_idle) {
    online_cpus_ = static_cast<unsigned>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
    loadavg_fd_ = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  }
}

EventLoop::~EventLoop() {
  if (loadavg_fd_ >= 0) ::close(loadavg_fd_);
  io_uring_queue_exit(&ring_);
  if (tx_memory_ != nullptr) ::munmap(tx_memory_, tx_memory_bytes_);
  if (rx_memory_ != nullptr) ::munmap(rx_memory_, rx_memory_bytes_);
  if (buffer_ring_ != nullptr) ::munmap(buffer_ring_, buffer_ring_bytes_);
}

io_uring_sqe* EventLoop::next_sqe() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {
    io_uring_submit(&ring_);
    ++counters_.submits;
    sqe = io_uring_get_sqe(&ring_);
  }
  if (sqe == nullptr) throw std::runtime_error("io_uring submission queue stuck full");
  return sqe;
}

// A TAP's writes come from registered buffers (no page pinning per write). Registering pins
// them for good, charged to the user's RLIMIT_MEMLOCK (an ordinary user has 8 MiB on
// Debian, shared by all its rings): refused, the writes go unregistered. A socket's sendmsg
// cannot use them, so a datagram socket never pins them.
void EventLoop::register_transmit_buffers() {
  if (tx_buffers_registered_ || datagram_socket_) return;
  iovec tx_region{tx_memory_, tx_memory_bytes_};
  tx_buffers_registered_ = io_uring_register_buffers(&ring_, &tx_region, 1) == 0;
  counters_.fixed_buffers = tx_buffers_registered_ ? 1 : 0;
}

void EventLoop::attach_frame_device(int fd, FrameHandler on_frame) {
  frame_fd_ = fd;
  register_transmit_buffers();
  on_frame_ = std::move(on_frame);
  // The device in io_uring's registered file table: every read and write then skips the
  // per-operation file lookup and reference count (fget/fput). The plain fd still works
  // if the kernel refuses.
  const int rc = frame_file_fixed_ ? io_uring_register_files_update(&ring_, 0, &fd, 1)
                                   : io_uring_register_files(&ring_, &fd, 1);
  frame_file_fixed_ = rc >= 0;
  counters_.fixed_file = frame_file_fixed_ ? 1 : 0;
  arm_frame_reads();
}

void EventLoop::attach_datagram_socket(int fd, DatagramHandler on_datagram) {
  if (!kernel_supports(ring_, IORING_OP_RECVMSG)) {
    throw std::runtime_error("this kernel's io_uring has no recvmsg (Linux 6.0 or newer is needed)");
  }
  datagram_socket_ = true;
  segmentation_on_ = config_.udp_segmentation;
  multishot_read_ = true;  // multishot recvmsg: Linux 6.0, below every kernel we support
  counters_.multishot_read = 1;
  on_datagram_ = std::move(on_datagram);
  recv_header_ = msghdr{};
  recv_header_.msg_namelen = sizeof(sockaddr_in);
  recv_header_.msg_controllen = sizeof(SlotMessage::control) + CMSG_SPACE(sizeof(int));
  slot_messages_.resize(config_.tx_slots);
  attach_frame_device(fd, nullptr);
}

void EventLoop::target_frame_device(io_uring_sqe* sqe) const {
  if (!frame_file_fixed_) return;
  sqe->fd = 0;  // its index in the registered file table
  sqe->flags |= IOSQE_FIXED_FILE;
}

void EventLoop::arm_frame_reads() {
  const unsigned wanted = multishot_read_ ? 1 : kSingleReadsInFlight;
  while (reads_in_flight_ < wanted) {
    io_uring_sqe* sqe = next_sqe();
    if (datagram_socket_) {
      io_uring_prep_recvmsg_multishot(sqe, frame_fd_, &recv_header_, 0);
    } else if (multishot_read_) {
      // addr and len stay 0: every completion takes a whole buffer from the group.
      io_uring_prep_rw(kOpReadMultishot, sqe, frame_fd_, nullptr, 0, 0);
    } else {
      io_uring_prep_read(sqe, frame_fd_, nullptr,
                         static_cast<unsigned>(rx_buffer_size_), 0);
    }
    target_frame_device(sqe);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = kBufferGroup;
    io_uring_sqe_set_data64(sqe, tag(Kind::kFrameRead));
    ++reads_in_flight_;
    ++inflight_;
  }
}

std::uint8_t* EventLoop::slot_memory(std::uint32_t slot) const {
  return tx_memory_ + static_cast<std::size_t>(slot) * config_.frame_buffer_size;
}

void EventLoop::queue_write(std::uint32_t slot, std::size_t size, const DatagramDestination& destination) {
  if (datagram_socket_) {
    close_open_run();  // datagrams leave in the order given
    queue_sendmsg(slot, size, destination);
    return;
  }
  io_uring_sqe* sqe = next_sqe();
  if (tx_buffers_registered_) {
    io_uring_prep_write_fixed(sqe, frame_fd_, slot_memory(slot), static_cast<unsigned>(size), 0, 0);
  } else {
    io_uring_prep_write(sqe, frame_fd_, slot_memory(slot), static_cast<unsigned>(size), 0);
  }
  target_frame_device(sqe);
  io_uring_sqe_set_data64(sqe, tag(Kind::kWrite, slot));
  ++inflight_;
}

void EventLoop::queue_sendmsg(std::uint32_t slot, std::size_t size, const DatagramDestination& destination) {
  SlotMessage& message = slot_messages_[slot];
  message.vectors.assign(1, iovec{slot_memory(slot), size});
  message.followers.clear();
  send_message(slot, destination, 0);
}

// The control messages give the datagram its source address, TOS and TTL, and a run its
// segment size.
void EventLoop::send_message(std::uint32_t slot, const DatagramDestination& destination, std::size_t segment_size) {
  SlotMessage& message = slot_messages_[slot];
  message.to = destination.to;
  message.header = msghdr{};
  message.header.msg_name = &message.to;
  message.header.msg_namelen = sizeof(message.to);
  message.header.msg_iov = message.vectors.data();
  message.header.msg_iovlen = message.vectors.size();
  message.header.msg_control = message.control;
  message.header.msg_controllen = CMSG_SPACE(sizeof(in_pktinfo)) + 2 * CMSG_SPACE(sizeof(int)) +
                                  (segment_size > 0 ? CMSG_SPACE(sizeof(std::uint16_t)) : 0);
  cmsghdr* cmsg = CMSG_FIRSTHDR(&message.header);
  cmsg->cmsg_level = IPPROTO_IP;
  cmsg->cmsg_type = IP_PKTINFO;
  cmsg->cmsg_len = CMSG_LEN(sizeof(in_pktinfo));
  in_pktinfo info{};
  info.ipi_spec_dst = destination.from;
  std::memcpy(CMSG_DATA(cmsg), &info, sizeof(info));
  const auto put = [&](int level, int type, const void* value, std::size_t length) {
    cmsg = CMSG_NXTHDR(&message.header, cmsg);
    cmsg->cmsg_level = level;
    cmsg->cmsg_type = type;
    cmsg->cmsg_len = CMSG_LEN(length);
    std::memcpy(CMSG_DATA(cmsg), value, length);
  };
  const int tos = destination.tos;
  const int ttl = destination.ttl;
  put(IPPROTO_IP, IP_TOS, &tos, sizeof(tos));
  put(IPPROTO_IP, IP_TTL, &ttl, sizeof(ttl));
  if (segment_size > 0) {
    const auto gso_size = static_cast<std::uint16_t>(segment_size);
    put(SOL_UDP, UDP_SEGMENT, &gso_size, sizeof(gso_size));
  }
  io_uring_sqe* sqe = next_sqe();
  io_uring_prep_sendmsg(sqe, frame_fd_, &message.header, 0);
  target_frame_device(sqe);
  io_uring_sqe_set_data64(sqe, tag(Kind::kWrite, slot));
  ++inflight_;
}

namespace {

bool same_destination(const DatagramDestination& a, const DatagramDestination& b) {
  return a.to.sin_addr.s_addr == b.to.sin_addr.s_addr && a.to.sin_port == b.to.sin_port &&
         a.from.s_addr == b.from.s_addr && a.tos == b.tos && a.ttl == b.ttl;
}

}  // namespace

// A run: one destination, and every datagram of the segment size but the last, which may
// be shorter and then ends the run (UDP_SEGMENT cuts the buffer into segment-size pieces).
bool EventLoop::joins_open_run(std::size_t size, const DatagramDestination& destination) const {
  if (!open_run_ || !same_destination(open_run_->destination, destination)) return false;
  return size <= open_run_->segment_size && open_run_->bytes + size <= kMaxRunBytes &&
         slot_messages_[open_run_->first].vectors.size() < kMaxRunSegments;
}

std::size_t EventLoop::run_position(std::size_t size, const DatagramDestination& destination) const {
  return segmentation_on_ && joins_open_run(size, destination) ? slot_messages_[open_run_->first].vectors.size() : 0;
}

void EventLoop::gather(std::uint32_t slot, std::size_t size, const DatagramDestination& destination) {
  if (joins_open_run(size, destination)) {
    SlotMessage& message = slot_messages_[open_run_->first];
    message.vectors.push_back(iovec{slot_memory(slot), size});
    message.followers.push_back(slot);
    open_run_->bytes += size;
    const bool full = message.vectors.size() == kMaxRunSegments ||
                      open_run_->bytes + open_run_->segment_size > kMaxRunBytes;
    if (size < open_run_->segment_size || full) close_open_run();
    return;
  }
  close_open_run();
  SlotMessage& message = slot_messages_[slot];
  message.vectors.assign(1, iovec{slot_memory(slot), size});
  message.followers.clear();
  open_run_ = OpenRun{slot, size, size, destination};
}

// Queues the gathered datagrams: one sendmsg, with UDP_SEGMENT when there are several.
void EventLoop::close_open_run() {
  if (!open_run_) return;
  const OpenRun run = *std::exchange(open_run_, std::nullopt);
  const std::size_t count = slot_messages_[run.first].vectors.size();
  if (count > 1) {
    ++counters_.tx_segment_runs;
    counters_.tx_segmented_datagrams += count;
  }
  send_message(run.first, run.destination, count > 1 ? run.segment_size : 0);
}

bool EventLoop::transmit(ByteSpan frame) { return queue_or_backlog(frame, DatagramDestination{}); }

bool EventLoop::transmit_to(ByteSpan payload, const DatagramDestination& destination) {
  return queue_or_backlog(payload, destination);
}

bool EventLoop::queue_or_backlog(ByteSpan frame, const DatagramDestination& destination) {
  if (frame.size() > config_.frame_buffer_size) {
    ++counters_.tx_oversize_drops;
    return false;
  }
  if (frame_fd_ < 0) {
    ++counters_.tx_queue_drops;
    return false;
  }
  if (transmit_room() == 0) {
    if (tx_backlog_.size() >= config_.tx_backlog_frames) {
      ++counters_.tx_queue_drops;
      return false;
    }
    tx_backlog_.push_back(Waiting{std::vector<std::uint8_t>(frame.begin(), frame.end()), destination});
    ++counters_.tx_backlogged;
    return true;
  }
  const std::uint32_t slot = free_tx_slots_.back();
  free_tx_slots_.pop_back();
  std::memcpy(slot_memory(slot), frame.data(), frame.size());
  queue_write(slot, frame.size(), destination);
  return true;
}

// Precondition: a slot is free and the frame fits it.
void EventLoop::write_in_free_slot(const Waiting& frame) {
  const std::uint32_t slot = free_tx_slots_.back();
  free_tx_slots_.pop_back();
  std::memcpy(slot_memory(slot), frame.bytes.data(), frame.bytes.size());
  queue_write(slot, frame.bytes.size(), frame.destination);
}

MutableByteSpan EventLoop::prepare_transmit(std::size_t size) {
  if (prepared_slot_) return MutableByteSpan(slot_memory(*prepared_slot_), config_.frame_buffer_size);
  if (frame_fd_ < 0 || transmit_room() == 0 || size > config_.frame_buffer_size) return {};
  prepared_slot_ = free_tx_slots_.back();
  free_tx_slots_.pop_back();
  return MutableByteSpan(slot_memory(*prepared_slot_), config_.frame_buffer_size);
}

void EventLoop::transmit_prepared(std::size_t size) { transmit_prepared_to(size, DatagramDestination{}); }

void EventLoop::transmit_prepared_to(std::size_t size, const DatagramDestination& destination) {
  if (!prepared_slot_) return;
  const std::uint32_t slot = *std::exchange(prepared_slot_, std::nullopt);
  if (size > config_.frame_buffer_size) {
    ++counters_.tx_oversize_drops;
    free_tx_slots_.push_back(slot);
    return;
  }
  if (segmentation_on_) {
    gather(slot, size, destination);
    return;
  }
  queue_write(slot, size, destination);
}

void EventLoop::watch(int fd, ReadyHandler on_ready) {
  const std::uint64_t id = next_watch_id_++;
  watches_.emplace(id, Watch{fd, std::move(on_ready)});
  arm_watch(id, fd);
}

void EventLoop::arm_watch(std::uint64_t id, int fd) {
  io_uring_sqe* sqe = next_sqe();
  io_uring_prep_poll_multishot(sqe, fd, POLLIN);
  io_uring_sqe_set_data64(sqe, tag(Kind::kWatch, id));
  ++inflight_;
}

void EventLoop::unwatch(int fd) {
  for (auto it = watches_.begin(); it != watches_.end(); ++it) {
    if (it->second.fd != fd) continue;
    io_uring_sqe* sqe = next_sqe();
    io_uring_prep_poll_remove(sqe, tag(Kind::kWatch, it->first));
    io_uring_sqe_set_data64(sqe, tag(Kind::kWatchRemove));
    ++inflight_;
    watches_.erase(it);
    // The poll's file reference goes when the removal is processed, which the caller's
    // close() must not wait for: push the removal out now.
    io_uring_submit(&ring_);
    ++counters_.submits;
    return;
  }
}

void EventLoop::add_timer_source(TimerSource source) { timer_sources_.push_back(std::move(source)); }

void EventLoop::signal_eventfd(int fd) {
  if (stopping_) return;
  if (signal_of_fd_.count(fd) != 0) {
    signal_again_.insert(fd);
    return;
  }
  const std::uint64_t id = next_signal_id_++;
  io_uring_sqe* sqe = next_sqe();
  io_uring_prep_write(sqe, fd, &kEventfdIncrement, sizeof(kEventfdIncrement), 0);
  io_uring_sqe_set_data64(sqe, tag(Kind::kSignal, id));
  ++inflight_;
  signals_in_flight_.emplace(id, fd);
  signal_of_fd_.emplace(fd, id);
  io_uring_submit(&ring_);
  ++counters_.submits;
}

void EventLoop::forget_eventfd(int fd) {
  signal_of_fd_.erase(fd);
  signal_again_.erase(fd);
}

void EventLoop::on_signal_done(const io_uring_cqe& cqe) {
  const std::uint64_t id = argument_of(cqe.user_data);
  auto it = signals_in_flight_.find(id);
  if (it == signals_in_flight_.end()) return;
  const int fd = it->second;
  signals_in_flight_.erase(it);
  auto by_fd = signal_of_fd_.find(fd);
  if (by_fd == signal_of_fd_.end() || by_fd->second != id) return;  // forgotten meanwhile
  signal_of_fd_.erase(by_fd);
  if (signal_again_.erase(fd) != 0) signal_eventfd(fd);
}

std::optional<Instant> EventLoop::run_timer_sources(Instant now) {
  std::optional<Instant> earliest;
  for (auto& source : timer_sources_) {
    if (auto next = source(now); next && (!earliest || *next < *earliest)) earliest = next;
  }
  return earliest;
}

// One absolute timeout is armed at a time. A later deadline leaves it alone (an early
// wake-up costs one idle iteration); a sooner one moves it with IORING_TIMEOUT_UPDATE.
void EventLoop::arm_timer(std::optional<Instant> deadline) {
  if (!deadline || (armed_deadline_ && *armed_deadline_ <= *deadline)) return;
  timeout_spec_ = to_timespec(*deadline);
  io_uring_sqe* sqe = next_sqe();
  if (armed_deadline_) {
    io_uring_prep_timeout_update(sqe, &timeout_spec_, tag(Kind::kTimeout), IORING_TIMEOUT_ABS);
    io_uring_sqe_set_data64(sqe, tag(Kind::kTimeoutUpdate));
  } else {
    io_uring_prep_timeout(sqe, &timeout_spec_, 0, IORING_TIMEOUT_ABS);
    io_uring_sqe_set_data64(sqe, tag(Kind::kTimeout));
  }
  ++inflight_;
  armed_deadline_ = deadline;
}

// Frames that waited take the slots freed since, in order, before anything new is sent.
void EventLoop::flush_backlog() {
  while (!tx_backlog_.empty() && !free_tx_slots_.empty()) {
    write_in_free_slot(tx_backlog_.front());
    tx_backlog_.pop_front();
  }
}

void EventLoop::run() {
  while (!stopping_) {
    flush_backlog();
    auto deadline = run_timer_sources(Clock::now());
    if (reads_paused_until_ && (!deadline || *reads_paused_until_ < *deadline)) {
      deadline = reads_paused_until_;
    }
    arm_timer(deadline);
    if (stopping_) break;  // a timer source may have stopped the loop
    wait_for_completions();
    reap_completions(Clock::now());
    ++counters_.loop_iterations;
  }
  shut_down();
}

void EventLoop::wait_for_completions() {
  close_open_run();  // nothing gathered waits past this iteration
  if (last_activity_ && config_.busy_poll > Duration::zero()) {
    const Instant now = Clock::now();
    const Instant until = *last_activity_ + config_.busy_poll;
    if (now < until && busy_poll_allowed(now)) {
      io_uring_submit(&ring_);
      ++counters_.submits;
      ++counters_.busy_polls;
      if (busy_poll_until_ready(until)) {
        ++counters_.busy_poll_hits;
        return;
      }
    }
  }
  const int rc = io_uring_submit_and_wait(&ring_, 1);
  ++counters_.submits;
  if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
    throw std::system_error(-rc, std::generic_category(), "io_uring_submit_and_wait");
  }
}

// Spins until a completion is ready or `until`; true if one is. With DEFER_TASKRUN the
// kernel posts completions only inside io_uring_enter(), and says it has some to post with
// IORING_SQ_TASKRUN; without it they appear in the CQ ring by themselves.
bool EventLoop::busy_poll_until_ready(Instant until) {
  do {
    if (io_uring_cq_ready(&ring_) > 0) return true;
    if ((IO_URING_READ_ONCE(*ring_.sq.kflags) & IORING_SQ_TASKRUN) != 0) {
      io_uring_get_events(&ring_);
      if (io_uring_cq_ready(&ring_) > 0) return true;
    }
    cpu_relax();
  } while (Clock::now() < until);
  return false;
}

bool EventLoop::busy_poll_allowed(Instant now) {
  if (!config_.busy_poll_only_when_idle) return true;
  if (now < busy_poll_checked_until_) return cpu_idle_;
  busy_poll_checked_until_ = now + kIdleCheckInterval;
  char text[128];
  const ssize_t got = loadavg_fd_ >= 0 ? ::pread(loadavg_fd_, text, sizeof(text), 0) : -1;
  const auto runnable = got > 0 ? runnable_tasks_in_loadavg(std::string_view(text, static_cast<std::size_t>(got)))
                                : std::nullopt;
  // This loop is one of the runnable tasks: fewer than there are CPUs leaves one idle.
  cpu_idle_ = runnable && *runnable < online_cpus_;
  return cpu_idle_;
}

void EventLoop::reap_completions(Instant now) {
  unsigned head = 0;
  unsigned seen = 0;
  io_uring_cqe* cqe = nullptr;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    ++seen;
    if ((cqe->flags & IORING_CQE_F_MORE) == 0) --inflight_;
    dispatch(*cqe, now);
  }
  io_uring_cq_advance(&ring_, seen);
  counters_.completions += seen;
  if (buffers_to_return_ > 0 && frames_done_) frames_done_();
  if (buffers_to_return_ > 0) {
    io_uring_buf_ring_advance(buffer_ring_, static_cast<int>(std::exchange(buffers_to_return_, 0)));
  }
  if (reads_paused_until_ && now >= *reads_paused_until_) reads_paused_until_.reset();
  if (!stopping_ && frame_fd_ >= 0 && !reads_paused_until_) arm_frame_reads();
}

void EventLoop::dispatch(const io_uring_cqe& cqe, Instant now) {
  const Kind kind = kind_of(cqe.user_data);
  if (kind == Kind::kFrameRead || kind == Kind::kWatch) last_activity_ = now;
  switch (kind) {
    case Kind::kFrameRead: on_frame_read(cqe, now); break;
    case Kind::kWrite: on_write_done(cqe); break;
    case Kind::kWatch: on_watch_ready(cqe, now); break;
    case Kind::kTimeout: on_timeout(cqe); break;
    case Kind::kTimeoutUpdate:
      // -ENOENT: the timeout fired before the update reached it; its own completion
      // clears armed_deadline_ and the next iteration arms afresh.
      break;
    case Kind::kSignal: on_signal_done(cqe); break;
    case Kind::kWatchRemove:
    case Kind::kCancel: break;
  }
}

void EventLoop::recycle_buffer(unsigned buffer_id) {
  io_uring_buf_ring_add(buffer_ring_, rx_memory_ + static_cast<std::size_t>(buffer_id) * rx_buffer_size_,
                        static_cast<unsigned>(rx_buffer_size_),
                        static_cast<unsigned short>(buffer_id),
                        io_uring_buf_ring_mask(config_.rx_buffers),
                        static_cast<int>(buffers_to_return_++));
}

void EventLoop::on_frame_read(const io_uring_cqe& cqe, Instant now) {
  if ((cqe.flags & IORING_CQE_F_MORE) == 0) {
    --reads_in_flight_;
    if (cqe.res != -ECANCELED && multishot_read_) ++counters_.rx_rearms;
  }
  if (cqe.res == -EINVAL && multishot_read_ && !datagram_socket_ && counters_.tap_rx_frames == 0) {
    // The probe said yes but this file refuses multishot reads: fall back for good.
    multishot_read_ = false;
    counters_.multishot_read = 0;
    return;
  }
  if (cqe.res < 0) {
    if (cqe.res == -ENOBUFS) {
      ++counters_.rx_buffer_exhausted;
    } else if (cqe.res != -ECANCELED) {
      ++counters_.rx_read_errors;
      if (++consecutive_read_errors_ >= kMaxConsecutiveReadErrors) {
        consecutive_read_errors_ = 0;
        reads_paused_until_ = now + kReadPause;
        ++counters_.rx_read_pauses;
      }
    }
    return;
  }
  consecutive_read_errors_ = 0;
  if ((cqe.flags & IORING_CQE_F_BUFFER) == 0) return;
  const unsigned buffer_id = cqe.flags >> IORING_CQE_BUFFER_SHIFT;
  const std::size_t length = std::min<std::size_t>(static_cast<std::size_t>(cqe.res), rx_buffer_size_);
  ++counters_.tap_rx_frames;
  counters_.tap_rx_bytes += length;
  if (datagram_socket_ && buffer_id < config_.rx_buffers) {
    deliver_datagram(rx_memory_ + static_cast<std::size_t>(buffer_id) * rx_buffer_size_, length, now);
  } else if (length == rx_buffer_size_) {
    ++counters_.rx_truncated;
  } else if (on_frame_ && buffer_id < config_.rx_buffers) {
    on_frame_(ByteSpan(rx_memory_ + static_cast<std::size_t>(buffer_id) * rx_buffer_size_, length), now);
  }
  recycle_buffer(buffer_id);
}

// A multishot recvmsg's buffer: io_uring_recvmsg_out, the source address, the control
// messages, the payload. The kernel fills it, but its lengths are still checked.
void EventLoop::deliver_datagram(std::uint8_t* buffer, std::size_t length, Instant now) {
  io_uring_recvmsg_out* out = io_uring_recvmsg_validate(buffer, static_cast<int>(length), &recv_header_);
  if (out == nullptr || (out->flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 || out->namelen < sizeof(sockaddr_in)) {
    ++counters_.rx_truncated;
    return;
  }
  Datagram datagram;
  std::memcpy(&datagram.source, io_uring_recvmsg_name(out), sizeof(sockaddr_in));
  for (cmsghdr* cmsg = io_uring_recvmsg_cmsg_firsthdr(out, &recv_header_); cmsg != nullptr;
       cmsg = io_uring_recvmsg_cmsg_nexthdr(out, &recv_header_, cmsg)) {
    if (cmsg->cmsg_level == SOL_UDP && cmsg->cmsg_type == UDP_GRO && cmsg->cmsg_len >= CMSG_LEN(sizeof(int))) {
      int segment_size = 0;
      std::memcpy(&segment_size, CMSG_DATA(cmsg), sizeof(segment_size));
      datagram.segment_size = segment_size > 0 ? static_cast<std::size_t>(segment_size) : 0;
      continue;
    }
    if (cmsg->cmsg_level != IPPROTO_IP) continue;
    if (cmsg->cmsg_type == IP_PKTINFO && cmsg->cmsg_len >= CMSG_LEN(sizeof(in_pktinfo))) {
      in_pktinfo info{};
      std::memcpy(&info, CMSG_DATA(cmsg), sizeof(info));
      datagram.destination = info.ipi_addr;
      datagram.ifindex = info.ipi_ifindex;
    } else if (cmsg->cmsg_type == IP_TOS && cmsg->cmsg_len >= CMSG_LEN(1)) {
      datagram.tos = *CMSG_DATA(cmsg);
    } else if (cmsg->cmsg_type == IP_TTL && cmsg->cmsg_len >= CMSG_LEN(sizeof(int))) {
      int ttl = 0;
      std::memcpy(&ttl, CMSG_DATA(cmsg), sizeof(ttl));
      datagram.ttl = static_cast<std::uint8_t>(ttl);
    }
  }
  const auto* payload = static_cast<const std::uint8_t*>(io_uring_recvmsg_payload(out, &recv_header_));
  const std::size_t header = static_cast<std::size_t>(payload - buffer);
  if (header + out->payloadlen > length) {
    ++counters_.rx_truncated;
    return;
  }
  datagram.payload = ByteSpan(payload, out->payloadlen);
  if (on_datagram_) on_datagram_(datagram, now);
}

void EventLoop::on_write_done(const io_uring_cqe& cqe) {
  const auto slot = static_cast<std::uint32_t>(argument_of(cqe.user_data));
  free_tx_slots_.push_back(slot);
  std::size_t datagrams = 1;
  if (datagram_socket_) {
    SlotMessage& message = slot_messages_[slot];
    free_tx_slots_.insert(free_tx_slots_.end(), message.followers.begin(), message.followers.end());
    datagrams += message.followers.size();
    // EINVAL or EIO for a run: this path cannot segment (a device without checksum offload
    // before Linux 6.11, an IPsec route). Its datagrams are lost, as any write that fails;
    // later ones go one by one.
    if (cqe.res < 0 && !message.followers.empty() && (cqe.res == -EINVAL || cqe.res == -EIO)) {
      segmentation_on_ = false;
      ++counters_.tx_segmentation_refused;
    }
    message.followers.clear();
  }
  if (cqe.res < 0) {
    counters_.tx_write_errors += datagrams;
    return;
  }
  counters_.tap_tx_frames += datagrams;
  counters_.tap_tx_bytes += static_cast<std::uint64_t>(cqe.res);
}

void EventLoop::on_watch_ready(const io_uring_cqe& cqe, Instant now) {
  const std::uint64_t id = argument_of(cqe.user_data);
  auto it = watches_.find(id);
  if (it == watches_.end()) return;  // unwatched while the event was in flight
  const int fd = it->second.fd;
  ReadyHandler handler = it->second.on_ready;  // the handler may unwatch itself
  if ((cqe.flags & IORING_CQE_F_MORE) == 0 && !stopping_) arm_watch(id, fd);
  if (cqe.res > 0) handler(now);
}

void EventLoop::on_timeout(const io_uring_cqe& cqe) {
  armed_deadline_.reset();
  if (cqe.res == -ETIME) ++counters_.timer_expirations;
}

// Writes still queued reach the wire; then every request is cancelled and reaped, so
// that no in-flight request keeps the TAP's file alive after the daemon closes it (a
// pending read holds a file reference and io_uring_queue_exit() drops it only later,
// from a kernel worker).
void EventLoop::shut_down() {
  stopping_ = true;
  const auto wait_until = [this](auto grace, auto done) {
    const Instant deadline = Clock::now() + grace;
    while (!done() && Clock::now() < deadline) {
      __kernel_timespec wait = to_timespec(Duration(std::chrono::milliseconds(20)));
      io_uring_cqe* cqe = nullptr;
      io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &wait, nullptr);
      reap_completions(Clock::now());
    }
  };
  wait_until(kShutdownTxGrace, [this] {
    close_open_run();
    flush_backlog();
    return tx_backlog_.empty() && free_tx_slots_.size() == config_.tx_slots;
  });
  io_uring_sqe* sqe = next_sqe();
  io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
  io_uring_sqe_set_data64(sqe, tag(Kind::kCancel));
  ++inflight_;
  wait_until(kShutdownCancelGrace, [this] { return inflight_ == 0; });
  // The registered file table holds its own reference to the device, which
  // io_uring_queue_exit() drops only later, from a kernel worker: a --netdev daemon's socket
  // kept UDP 4791 bound after the daemon had gone, and an `up` right after its `down` found
  // the port taken. Unregistered now, the file goes when its owner closes it.
  if (frame_file_fixed_) {
    io_uring_unregister_files(&ring_);
    frame_file_fixed_ = false;
  }
}

}  // namespace rrdma::vnic
