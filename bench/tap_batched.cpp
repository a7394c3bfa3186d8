#include "bench/tap_batched.h"

#include <liburing.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

namespace rrdma::bench {
namespace {

using Clock = std::chrono::steady_clock;

// liburing 2.3 predates IORING_OP_READ_MULTISHOT (Linux 6.7); its number in the kernel's
// enum io_uring_op follows IORING_OP_SENDMSG_ZC (as vnic/event_loop.cpp).
constexpr std::uint8_t kOpReadMultishot = IORING_OP_SENDMSG_ZC + 1;
constexpr unsigned kBufferGroup = 0;
constexpr unsigned kTxFileIndex = 0;  // indices in the registered file table
constexpr unsigned kRxFileIndex = 1;
constexpr unsigned kTxBufferIndex = 0;  // indices in the registered buffer table
constexpr unsigned kRxBufferIndex = 1;
constexpr auto kWarmUp = std::chrono::milliseconds(300);
// A multi-queue TAP forgets a flow's queue 3 s after the flow was last written into it.
constexpr auto kTeachEvery = std::chrono::milliseconds(500);

enum class Kind : std::uint64_t { Write = 1, Read = 2 };
constexpr std::uint64_t tag(Kind kind, std::uint64_t index) { return static_cast<std::uint64_t>(kind) << 56 | index; }
constexpr Kind kind_of(std::uint64_t user_data) { return static_cast<Kind>(user_data >> 56); }
constexpr std::uint64_t index_of(std::uint64_t user_data) { return user_data & ((1ULL << 56) - 1); }

unsigned power_of_two_at_least(unsigned n) {
  unsigned value = 1;
  while (value < n) value <<= 1;
  return value;
}

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

struct Mapping {
  explicit Mapping(std::size_t size) : bytes(size) {
    void* memory = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "mmap");
    data = static_cast<std::uint8_t*>(memory);
  }
  ~Mapping() { ::munmap(data, bytes); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  std::uint8_t* data = nullptr;
  std::size_t bytes = 0;
};

// Written by one lane's thread, read by the main thread between snapshots.
struct LaneCounters {
  std::atomic<std::uint64_t> written{0};
  std::atomic<std::uint64_t> write_errors{0};
  std::atomic<std::uint64_t> received{0};
  std::atomic<std::uint64_t> received_other{0};  // frames not ours or of another size
  std::atomic<std::uint64_t> read_errors{0};
  std::atomic<std::uint64_t> enters{0};
  std::atomic<int> first_error{0};
};

// One thread's io_uring and what it drives: a queue of the sending TAP, a queue of the
// receiving TAP, or both.
class Lane {
 public:
  Lane(const BatchedConfig& config, const Tap* tx, const Tap* rx, std::uint16_t flow_port);
  ~Lane() { io_uring_queue_exit(&ring_); }
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;
  void run(const std::atomic<bool>& stop);
  const LaneCounters& counters() const { return counters_; }

 private:
  void set_up_ring();
  void register_files();
  void register_buffers();
  void set_up_provided_buffers();
  io_uring_sqe* next_sqe();
  void target(io_uring_sqe* sqe, const Tap& tap, unsigned file_index) const;
  void queue_write(unsigned slot);
  void arm_read(unsigned buffer);
  void recycle(unsigned buffer);
  void prime();
  void reap(bool stopping);
  void on_write(const io_uring_cqe& cqe, bool stopping);
  void on_read(const io_uring_cqe& cqe, bool stopping);
  void note_error(int error);
  void teach_flow();

  const BatchedConfig& config_;
  const Tap* tx_;
  const Tap* rx_;
  std::vector<std::uint8_t> frame_;          // what every write carries
  std::vector<std::uint8_t> reverse_frame_;  // the same flow the other way (teach_flow)
  std::size_t wire_bytes_;                   // frame_ plus the virtio_net_hdr, if any
  std::size_t tx_stride_;
  std::size_t rx_stride_;
  unsigned rx_buffers_;
  std::unique_ptr<Mapping> tx_memory_;
  std::unique_ptr<Mapping> rx_memory_;
  std::unique_ptr<Mapping> buffer_ring_memory_;
  io_uring_buf_ring* buffer_ring_ = nullptr;
  unsigned buffers_to_return_ = 0;
  io_uring ring_{};
  LaneCounters counters_;
};

Lane::Lane(const BatchedConfig& config, const Tap* tx, const Tap* rx, std::uint16_t flow_port)
    : config_(config), tx_(tx), rx_(rx) {
  frame_ = make_frame(config.frame_size, kMacA, kMacB, flow_port);
  reverse_frame_ = make_frame(kMinFrame, kMacB, kMacA, kRocePort, flow_port);
  const std::size_t header = (tx_ ? tx_ : rx_)->header_bytes();
  wire_bytes_ = header + frame_.size();
  tx_stride_ = round_up(wire_bytes_, 64);
  // One byte more than the frame we expect: a larger stray frame shows as the wrong size.
  rx_stride_ = round_up(wire_bytes_ + 1, 64);
  rx_buffers_ = power_of_two_at_least(config.reads);
  set_up_ring();
  register_files();
  register_buffers();
}

void Lane::set_up_ring() {
  const unsigned entries = power_of_two_at_least(config_.depth + config_.reads + 8);
  io_uring_params params{};
  // One thread submits and reaps; completions' task work runs when it waits, in a batch.
  // The ring is made here and used by the lane's thread: disabled until run() enables it,
  // which makes that thread its single issuer.
  params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_CQSIZE |
                 IORING_SETUP_R_DISABLED;
  params.cq_entries = std::max(4096U, entries * 4);  // a multishot read posts many per wait
  const int rc = io_uring_queue_init_params(entries, &ring_, &params);
  if (rc < 0) throw std::system_error(-rc, std::generic_category(), "io_uring_queue_init");
}

void Lane::register_files() {
  if (!config_.fixed_files) return;
  // -1: an empty slot of the table, for the side this lane does not drive.
  const int fds[2] = {tx_ ? tx_->fd() : -1, rx_ ? rx_->fd() : -1};
  const int rc = io_uring_register_files(&ring_, fds, 2);
  if (rc < 0) throw std::system_error(-rc, std::generic_category(), "io_uring_register_files");
}

void Lane::register_buffers() {
  std::vector<iovec> regions;
  if (tx_) {
    tx_memory_ = std::make_unique<Mapping>(tx_stride_ * config_.depth);
    // Every slot holds the frame after a zeroed virtio_net_hdr (when the TAP wants one).
    for (unsigned slot = 0; slot < config_.depth; ++slot) {
      std::copy(frame_.begin(), frame_.end(), tx_memory_->data + slot * tx_stride_ + (wire_bytes_ - frame_.size()));
    }
    regions.push_back({tx_memory_->data, tx_memory_->bytes});
  }
  if (rx_) {
    rx_memory_ = std::make_unique<Mapping>(rx_stride_ * rx_buffers_);
    if (regions.empty()) regions.push_back({rx_memory_->data, rx_memory_->bytes});  // keeps kRxBufferIndex 1
    regions.push_back({rx_memory_->data, rx_memory_->bytes});
    if (config_.rx == RxBuffers::Provided || config_.rx == RxBuffers::Multishot) set_up_provided_buffers();
  }
  const bool wanted = (tx_ && config_.fixed_tx) || (rx_ && config_.rx == RxBuffers::Fixed);
  if (!wanted) return;
  const int rc = io_uring_register_buffers(&ring_, regions.data(), static_cast<unsigned>(regions.size()));
  if (rc < 0) throw std::system_error(-rc, std::generic_category(), "io_uring_register_buffers");
}

void Lane::set_up_provided_buffers() {
  buffer_ring_memory_ = std::make_unique<Mapping>(rx_buffers_ * sizeof(io_uring_buf));
  buffer_ring_ = reinterpret_cast<io_uring_buf_ring*>(buffer_ring_memory_->data);
  io_uring_buf_ring_init(buffer_ring_);
  io_uring_buf_reg registration{};
  registration.ring_addr = reinterpret_cast<std::uintptr_t>(buffer_ring_);
  registration.ring_entries = rx_buffers_;
  registration.bgid = kBufferGroup;
  const int rc = io_uring_register_buf_ring(&ring_, &registration, 0);
  if (rc < 0) throw std::system_error(-rc, std::generic_category(), "io_uring_register_buf_ring");
  for (unsigned buffer = 0; buffer < rx_buffers_; ++buffer) recycle(buffer);
  io_uring_buf_ring_advance(buffer_ring_, static_cast<int>(std::exchange(buffers_to_return_, 0)));
}

io_uring_sqe* Lane::next_sqe() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {
    io_uring_submit(&ring_);
    counters_.enters.fetch_add(1, std::memory_order_relaxed);
    sqe = io_uring_get_sqe(&ring_);
  }
  if (sqe == nullptr) throw std::runtime_error("io_uring submission queue stuck full");
  return sqe;
}

void Lane::target(io_uring_sqe* sqe, const Tap& tap, unsigned file_index) const {
  if (!config_.fixed_files) {
    sqe->fd = tap.fd();
    return;
  }
  sqe->fd = static_cast<int>(file_index);
  sqe->flags |= IOSQE_FIXED_FILE;
}

void Lane::queue_write(unsigned slot) {
  io_uring_sqe* sqe = next_sqe();
  std::uint8_t* data = tx_memory_->data + slot * tx_stride_;
  const auto length = static_cast<unsigned>(wire_bytes_);
  if (config_.fixed_tx) {
    io_uring_prep_write_fixed(sqe, -1, data, length, 0, kTxBufferIndex);
  } else {
    io_uring_prep_write(sqe, -1, data, length, 0);
  }
  target(sqe, *tx_, kTxFileIndex);
  io_uring_sqe_set_data64(sqe, tag(Kind::Write, slot));
}

// `buffer` is ours for Plain and Fixed reads; Provided and Multishot reads take one from
// the provided-buffer ring when a frame arrives.
void Lane::arm_read(unsigned buffer) {
  io_uring_sqe* sqe = next_sqe();
  std::uint8_t* data = rx_memory_->data + buffer * rx_stride_;
  const auto length = static_cast<unsigned>(rx_stride_);
  switch (config_.rx) {
    case RxBuffers::Plain: io_uring_prep_read(sqe, -1, data, length, 0); break;
    case RxBuffers::Fixed: io_uring_prep_read_fixed(sqe, -1, data, length, 0, kRxBufferIndex); break;
    case RxBuffers::Provided: io_uring_prep_read(sqe, -1, nullptr, length, 0); break;
    case RxBuffers::Multishot: io_uring_prep_rw(kOpReadMultishot, sqe, -1, nullptr, 0, 0); break;
  }
  if (config_.rx == RxBuffers::Provided || config_.rx == RxBuffers::Multishot) {
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = kBufferGroup;
  }
  target(sqe, *rx_, kRxFileIndex);
  io_uring_sqe_set_data64(sqe, tag(Kind::Read, buffer));
}

void Lane::recycle(unsigned buffer) {
  io_uring_buf_ring_add(buffer_ring_, rx_memory_->data + buffer * rx_stride_, static_cast<unsigned>(rx_stride_),
                        static_cast<unsigned short>(buffer), io_uring_buf_ring_mask(rx_buffers_),
                        static_cast<int>(buffers_to_return_++));
}

void Lane::prime() {
  if (rx_) {
    const unsigned reads = config_.rx == RxBuffers::Multishot ? 1 : config_.reads;
    for (unsigned i = 0; i < reads; ++i) arm_read(i);
  }
  if (tx_) {
    for (unsigned slot = 0; slot < config_.depth; ++slot) queue_write(slot);
  }
}

void Lane::note_error(int error) {
  int none = 0;
  counters_.first_error.compare_exchange_strong(none, error, std::memory_order_relaxed);
}

void Lane::on_write(const io_uring_cqe& cqe, bool stopping) {
  if (cqe.res == static_cast<int>(wire_bytes_)) {
    counters_.written.fetch_add(1, std::memory_order_relaxed);
  } else {
    counters_.write_errors.fetch_add(1, std::memory_order_relaxed);
    if (cqe.res < 0) note_error(-cqe.res);
  }
  if (!stopping) queue_write(static_cast<unsigned>(index_of(cqe.user_data)));
}

void Lane::on_read(const io_uring_cqe& cqe, bool stopping) {
  const bool provided = config_.rx == RxBuffers::Provided || config_.rx == RxBuffers::Multishot;
  unsigned buffer = static_cast<unsigned>(index_of(cqe.user_data));
  if (provided && (cqe.flags & IORING_CQE_F_BUFFER) != 0) buffer = cqe.flags >> IORING_CQE_BUFFER_SHIFT;
  if (cqe.res < 0) {
    if (cqe.res != -ECANCELED && cqe.res != -ENOBUFS) note_error(-cqe.res);
    counters_.read_errors.fetch_add(1, std::memory_order_relaxed);
  } else {
    const std::size_t header = rx_->header_bytes();
    const std::uint8_t* frame = rx_memory_->data + buffer * rx_stride_ + header;
    const auto size = static_cast<std::size_t>(cqe.res);
    const bool counted = size == wire_bytes_ && is_ours(frame, size - header);
    (counted ? counters_.received : counters_.received_other).fetch_add(1, std::memory_order_relaxed);
  }
  if (provided && (cqe.flags & IORING_CQE_F_BUFFER) != 0) recycle(buffer);
  const bool still_armed = (cqe.flags & IORING_CQE_F_MORE) != 0;
  if (!stopping && !still_armed) arm_read(buffer);
}

void Lane::reap(bool stopping) {
  unsigned head = 0;
  unsigned seen = 0;
  io_uring_cqe* cqe = nullptr;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    ++seen;
    if (kind_of(cqe->user_data) == Kind::Write) {
      on_write(*cqe, stopping);
    } else {
      on_read(*cqe, stopping);
    }
  }
  io_uring_cq_advance(&ring_, seen);
  if (buffers_to_return_ > 0) {
    io_uring_buf_ring_advance(buffer_ring_, static_cast<int>(std::exchange(buffers_to_return_, 0)));
  }
}

// A multi-queue TAP sends a flow to the queue that last wrote a frame of that flow (its
// flow table; the hash is symmetric), else to the flow's hash modulo the queues. A frame of
// this lane's flow, the other way, written into this lane's receiving queue keeps the flow
// here. It goes to the sending TAP, where nobody reads it.
void Lane::teach_flow() {
  if (rx_ == nullptr || config_.queues < 2) return;
  if (!rx_->write_frame(reverse_frame_)) note_error(errno);
}

void Lane::run(const std::atomic<bool>& stop) {
  // liburing 2.3 declares io_uring_enable_rings but does not export it.
  if (::syscall(__NR_io_uring_register, ring_.ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0) != 0) {
    throw std::system_error(errno, std::generic_category(), "IORING_REGISTER_ENABLE_RINGS");
  }
  teach_flow();
  prime();
  auto next_teach = Clock::now() + kTeachEvery;
  while (!stop.load(std::memory_order_relaxed)) {
    __kernel_timespec wait{0, 100'000'000};
    io_uring_cqe* first = nullptr;
    const int rc = io_uring_submit_and_wait_timeout(&ring_, &first, 1, &wait, nullptr);
    counters_.enters.fetch_add(1, std::memory_order_relaxed);
    if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      throw std::system_error(-rc, std::generic_category(), "io_uring_submit_and_wait_timeout");
    }
    reap(false);
    if (Clock::now() >= next_teach) {
      teach_flow();
      next_teach += kTeachEvery;
    }
  }
  reap(true);
}

// --- the run as a whole ---------------------------------------------------------------

struct Snapshot {
  Clock::time_point time;
  double cpu = 0;
  std::uint64_t written = 0, write_errors = 0, received = 0, received_other = 0, read_errors = 0, enters = 0;
  std::uint64_t tx_tap_rx_dropped = 0, rx_tap_tx_dropped = 0;
  std::vector<std::uint64_t> received_per_lane;
};

Snapshot take_snapshot(const std::vector<std::unique_ptr<Lane>>& lanes, const BatchedConfig& config) {
  Snapshot s;
  s.time = Clock::now();
  s.cpu = cpu_seconds();
  for (const auto& lane : lanes) {
    const auto& c = lane->counters();
    s.written += c.written.load();
    s.write_errors += c.write_errors.load();
    s.received += c.received.load();
    s.received_other += c.received_other.load();
    s.read_errors += c.read_errors.load();
    s.enters += c.enters.load();
    s.received_per_lane.push_back(c.received.load());
  }
  s.tx_tap_rx_dropped = link_counter(config.tx_name, "rx_dropped");
  s.rx_tap_tx_dropped = link_counter(config.rx_name, "tx_dropped");
  return s;
}

std::string kernel_release() {
  utsname names{};
  ::uname(&names);
  return names.release;
}

const char* rx_name(RxBuffers rx) {
  switch (rx) {
    case RxBuffers::Plain: return "plain";
    case RxBuffers::Fixed: return "fixed";
    case RxBuffers::Provided: return "provided";
    case RxBuffers::Multishot: return "multishot";
  }
  return "?";
}

nlohmann::json describe(const BatchedConfig& config) {
  return {{"mode", "batched"},
          {"frame_bytes", std::max(config.frame_size, kMinFrame)},
          {"kernel", kernel_release()},
          {"multishot_read_supported", kernel_has_multishot_read()},
          {"queues", config.queues},
          {"threads", config.queues * (config.split ? 2 : 1)},
          {"split", config.split},
          {"depth", config.depth},
          {"reads", config.reads},
          {"rx_buffers", rx_name(config.rx)},
          {"tx_buffers", config.fixed_tx ? "fixed" : "plain"},
          {"fixed_files", config.fixed_files},
          {"napi", config.features.napi || config.features.napi_frags},
          {"napi_frags", config.features.napi_frags},
          {"vnet_hdr", config.features.vnet_hdr}};
}

nlohmann::json figures(const Snapshot& a, const Snapshot& b, std::size_t frame_bytes) {
  const double seconds = std::chrono::duration<double>(b.time - a.time).count();
  const std::uint64_t frames = b.received - a.received;
  const double bytes = static_cast<double>(frames) * static_cast<double>(frame_bytes);
  const double cpu = b.cpu - a.cpu;
  const std::uint64_t written = b.written - a.written;
  std::vector<std::uint64_t> per_lane;
  for (std::size_t i = 0; i < b.received_per_lane.size(); ++i) {
    per_lane.push_back(b.received_per_lane[i] - a.received_per_lane[i]);
  }
  const auto per = [](double numerator, double denominator) {
    return denominator > 0 ? nlohmann::json(numerator / denominator) : nlohmann::json(nullptr);
  };
  // frames_lost is what was written and not read back within the window: the TAPs' drops,
  // give or take the frames still queued at either end (up to the receiving queue's length).
  return {{"seconds", seconds},
          {"frames_sent", written},
          {"frames_received", frames},
          {"frames_lost", written > frames ? written - frames : 0},
          {"frames_per_second", static_cast<double>(frames) / seconds},
          {"bytes_per_second", bytes / seconds},
          {"received_per_lane", per_lane},
          {"received_other", b.received_other - a.received_other},
          {"write_errors", b.write_errors - a.write_errors},
          {"read_errors", b.read_errors - a.read_errors},
          {"tx_tap_rx_dropped", b.tx_tap_rx_dropped - a.tx_tap_rx_dropped},
          {"rx_tap_tx_dropped", b.rx_tap_tx_dropped - a.rx_tap_tx_dropped},
          {"io_uring_enters", b.enters - a.enters},
          {"frames_sent_per_enter", per(static_cast<double>(written), static_cast<double>(b.enters - a.enters))},
          {"cpu_seconds", cpu},
          {"cpu_seconds_per_gb", per(cpu, bytes / 1e9)},
          {"cpu_seconds_per_million_frames", per(cpu, static_cast<double>(frames) / 1e6)}};
}

void check(const BatchedConfig& config) {
  if (config.queues > 1 && !(tap_is_multi_queue(config.tx_name) && tap_is_multi_queue(config.rx_name))) {
    throw std::invalid_argument("--queues > 1 needs TAPs made with `ip tuntap add ... multi_queue`");
  }
  if (config.rx == RxBuffers::Multishot && !kernel_has_multishot_read()) {
    throw std::invalid_argument("this kernel (" + kernel_release() +
                                ") has no IORING_OP_READ_MULTISHOT (Linux 6.7 added it)");
  }
  if (config.depth == 0 || config.reads == 0) throw std::invalid_argument("--depth and --reads must be positive");
}

int first_error(const std::vector<std::unique_ptr<Lane>>& lanes) {
  for (const auto& lane : lanes) {
    if (const int error = lane->counters().first_error.load(); error != 0) return error;
  }
  return 0;
}

struct TapQueues {
  std::vector<std::unique_ptr<Tap>> tx;
  std::vector<std::unique_ptr<Tap>> rx;
};

// Each Tap of a multi-queue TAP is one more queue.
TapQueues attach_queues(const BatchedConfig& config) {
  TapQueues queues;
  for (unsigned q = 0; q < config.queues; ++q) {
    queues.tx.push_back(std::make_unique<Tap>(config.tx_name, config.features));
    queues.rx.push_back(std::make_unique<Tap>(config.rx_name, config.features));
  }
  teach_bridge(*queues.tx[0], *queues.rx[0]);
  for (const auto& queue : queues.rx) drain(queue->fd());
  return queues;
}

std::vector<std::unique_ptr<Lane>> make_lanes(const BatchedConfig& config, const TapQueues& queues) {
  std::vector<std::unique_ptr<Lane>> lanes;
  for (unsigned q = 0; q < config.queues; ++q) {
    // A flow (UDP source port) per queue, as RoCE spreads QPs over source ports.
    const auto flow_port = static_cast<std::uint16_t>(49152 + q);
    const Tap* tx = queues.tx[q].get();
    const Tap* rx = queues.rx[q].get();
    if (config.split) {
      lanes.push_back(std::make_unique<Lane>(config, tx, nullptr, flow_port));
      lanes.push_back(std::make_unique<Lane>(config, nullptr, rx, flow_port));
    } else {
      lanes.push_back(std::make_unique<Lane>(config, tx, rx, flow_port));
    }
  }
  return lanes;
}

// A thread per lane; the figures are taken between two snapshots after a warm-up, so that
// neither the start nor the stop of the threads is in them.
std::pair<Snapshot, Snapshot> run_lanes(const std::vector<std::unique_ptr<Lane>>& lanes, const BatchedConfig& config) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> failures(lanes.size());
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        lanes[i]->run(stop);
      } catch (...) {
        failures[i] = std::current_exception();
      }
    });
  }
  std::this_thread::sleep_for(kWarmUp);
  Snapshot start = take_snapshot(lanes, config);
  std::this_thread::sleep_for(std::chrono::duration<double>(config.seconds));
  Snapshot end = take_snapshot(lanes, config);
  stop = true;
  for (auto& thread : threads) thread.join();
  for (const auto& failure : failures) {
    if (failure) std::rethrow_exception(failure);
  }
  return {std::move(start), std::move(end)};
}

}  // namespace

bool kernel_has_multishot_read() {
  io_uring ring{};
  if (io_uring_queue_init(2, &ring, 0) < 0) return false;
  io_uring_probe* probe = io_uring_get_probe_ring(&ring);
  const bool supported = probe != nullptr && io_uring_opcode_supported(probe, kOpReadMultishot) != 0;
  if (probe != nullptr) io_uring_free_probe(probe);
  io_uring_queue_exit(&ring);
  return supported;
}

nlohmann::json batched_bandwidth(const BatchedConfig& config) {
  check(config);
  const TapQueues queues = attach_queues(config);
  const auto lanes = make_lanes(config, queues);
  const auto [start, end] = run_lanes(lanes, config);
  auto result = describe(config);
  result.update(figures(start, end, std::max(config.frame_size, kMinFrame)));
  if (const int error = first_error(lanes); error != 0) result["first_error"] = std::strerror(error);
  return result;
}

}  // namespace rrdma::bench
