// The daemon's one event loop, on one io_uring (liburing 2.3, kernel >= 6.7 for
// multishot reads; older kernels fall back to a batch of single reads).
//
// What lives in the ring:
//   - the frame device, one of two kinds:
//     * a TAP (`up --bridge`): multishot IORING_OP_READ_MULTISHOT with IOSQE_BUFFER_SELECT
//       from a provided-buffer ring, one frame per completion;
//     * a UDP socket (`up --netdev`, kernel >= 6.0): multishot IORING_OP_RECVMSG from the
//       same ring, one datagram per completion with its source address and the
//       IP_PKTINFO / IP_TOS / IP_TTL control messages;
//   - transmits from a registered pool of slots, all queued in the one io_uring_enter()
//     of the next iteration: IORING_OP_WRITE_FIXED to a TAP (exactly one frame per write),
//     IORING_OP_SENDMSG to the socket (one datagram per message, to its own destination);
//   - watched fds (signalfd, control socket, later doorbell eventfds): multishot
//     IORING_OP_POLL_ADD; handlers drain their fd with non-blocking calls;
//   - one IORING_OP_TIMEOUT (absolute, CLOCK_MONOTONIC = steady_clock) at the earliest
//     deadline any timer source asked for, updated in place when a sooner one appears.
// Nothing in the loop blocks except io_uring_enter() waiting for the next completion.
#pragma once

#include <liburing.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "stack/bytes.h"
#include "stack/time.h"

namespace rrdma::vnic {

struct EventLoopConfig {
  unsigned ring_entries = 256;       // SQ size; the CQ is twice that
  unsigned rx_buffers = 128;         // provided-buffer ring entries (a power of two)
  // Bytes per receive buffer and per transmit slot. Must exceed the largest frame: a tun
  // read silently truncates a frame to the buffer, so a read that fills its buffer is
  // taken as truncated and dropped.
  std::size_t frame_buffer_size = 2048;
  // Bytes per receive buffer when they differ from the transmit slots' (0: the same): a
  // datagram socket with UDP_GRO receives up to 64 KiB in one datagram.
  std::size_t receive_buffer_size = 0;
  unsigned tx_slots = 256;           // transmit buffers in flight at once
  // Frames that found every slot in flight wait in this order, copied, for a free slot;
  // beyond this many they are dropped. Senders that pace themselves by transmit_room() (the
  // RoCE engine) never get here; ACKs and other answers may, in bursts as large as the
  // batch of frames that asked for them.
  std::size_t tx_backlog_frames = 4096;
  bool multishot_read = true;        // false forces the single-read fallback (tests)
  // Datagram socket only: consecutive datagrams to one destination, all of one size but the
  // last, leave as one sendmsg with UDP_SEGMENT (a run, at most kMaxRunSegments), which the
  // kernel cuts back into the datagrams as late as the path allows (GSO). Needs a socket
  // that sends UDP checksums (the kernel refuses UDP_SEGMENT with SO_NO_CHECK).
  bool udp_segmentation = false;
  // IORING_SETUP_DEFER_TASKRUN: completions are posted only when the loop enters the kernel
  // to collect them, never by interrupting it. False is the set-up the loop falls back to on
  // a kernel that refuses it (tests cover that path with it); turned off on purpose it was
  // no faster (docs/PERFORMANCE.md, "Latency experiments").
  bool defer_taskrun = true;
  // Busy polling: after the last completion of a frame or a watched fd, keep looking for the
  // next one for this long before sleeping in the kernel; zero sleeps at once.
  Duration busy_poll{};
  // Spin only while some CPU has nothing to run (the kernel's count of runnable tasks, read
  // at most every few ms, below the number of CPUs): a spinning loop then takes no CPU time
  // another task wanted.
  bool busy_poll_only_when_idle = true;
};

// The loop's own counters, reported as the "daemon" layer of `rrdma-vnic stats`.
struct LoopCounters {
  std::uint64_t tap_rx_frames = 0;
  std::uint64_t tap_rx_bytes = 0;
  std::uint64_t tap_tx_frames = 0;
  std::uint64_t tap_tx_bytes = 0;
  std::uint64_t tx_queue_drops = 0;     // transmit() found every slot in flight and the backlog full
  std::uint64_t tx_backlogged = 0;      // frames that waited in the backlog for a slot
  std::uint64_t tx_oversize_drops = 0;  // a frame larger than a slot
  std::uint64_t tx_write_errors = 0;
  std::uint64_t rx_read_errors = 0;
  std::uint64_t rx_truncated = 0;         // a frame filled its whole buffer: cut short, dropped
  std::uint64_t rx_read_pauses = 0;       // reads rested after a run of errors
  std::uint64_t rx_buffer_exhausted = 0;  // the kernel ran out of provided buffers
  std::uint64_t rx_rearms = 0;            // the multishot read ended and was re-armed
  std::uint64_t loop_iterations = 0;
  std::uint64_t completions = 0;
  std::uint64_t submits = 0;
  std::uint64_t timer_expirations = 0;
  std::uint64_t multishot_read = 0;       // 1 when the kernel supports it
  std::uint64_t fixed_file = 0;           // 1 when the frame device is a registered file
  std::uint64_t fixed_buffers = 0;        // 1 when the TAP's writes come from registered buffers
  std::uint64_t busy_polls = 0;           // waits that spun before sleeping
  std::uint64_t busy_poll_hits = 0;       // ... and found a completion without sleeping
  std::uint64_t tx_segment_runs = 0;      // sendmsgs that carried a run of datagrams (UDP_SEGMENT)
  std::uint64_t tx_segmented_datagrams = 0;  // the datagrams those runs carried
  std::uint64_t tx_segmentation_refused = 0;  // runs the kernel refused: segmentation is off since
};

// The number of runnable tasks in the text of /proc/loadavg ("0.52 0.58 0.59 3/1213 12345":
// the 3), or nothing if the text is not of that form.
std::optional<unsigned> runnable_tasks_in_loadavg(std::string_view text);

// One datagram the socket device received (attach_datagram_socket).
struct Datagram {
  ByteSpan payload;
  sockaddr_in source{};     // the sender's address and port
  in_addr destination{};    // IP_PKTINFO: the address it was sent to
  int ifindex = 0;          // IP_PKTINFO: the interface it arrived on
  std::uint8_t tos = 0;     // IP_RECVTOS
  std::uint8_t ttl = 0;     // IP_RECVTTL
  // UDP_GRO: the payload is several datagrams of this size, sent back to back by one sender
  // to one destination, the last maybe shorter; 0: one datagram.
  std::size_t segment_size = 0;
};

// Where one datagram goes, and the IPv4 fields a sender may choose per datagram.
struct DatagramDestination {
  sockaddr_in to{};
  in_addr from{};           // IP_PKTINFO's source address (INADDR_ANY: the kernel picks)
  std::uint8_t tos = 0;
  std::uint8_t ttl = 64;
};

class EventLoop {
 public:
  using FrameHandler = std::function<void(ByteSpan frame, Instant now)>;
  using DatagramHandler = std::function<void(const Datagram& datagram, Instant now)>;
  using ReadyHandler = std::function<void(Instant now)>;
  // Runs whatever is due at `now`; returns the next instant it wants to run, if any.
  using TimerSource = std::function<std::optional<Instant>(Instant now)>;

  explicit EventLoop(const EventLoopConfig& config);
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // The fd frames come from and go to. The handler's span stays valid until the end of the
  // batch of completions it came in: the buffer goes back to the kernel only after
  // `frames_done` has run.
  void attach_frame_device(int fd, FrameHandler on_frame);
  // A UDP socket instead (IP_PKTINFO, IP_RECVTOS and IP_RECVTTL set by the caller): each
  // datagram to the handler, with the same lifetime rule. A datagram cut short (larger than
  // a buffer can hold) is counted under rx_truncated and dropped. Throws on a kernel
  // without multishot recvmsg (Linux 6.0).
  void attach_datagram_socket(int fd, DatagramHandler on_datagram);
  // Runs after every batch of completions that delivered frames, before their buffers are
  // handed back to the kernel (the verbs device writes payloads out in one go there).
  void on_frames_done(std::function<void()> frames_done) { frames_done_ = std::move(frames_done); }
  // The memory every received frame lies in.
  ByteSpan receive_memory() const { return ByteSpan(rx_memory_, rx_memory_bytes_); }
  // Copies the frame into a transmit slot and queues its write, or, when every slot is in
  // flight, into the backlog; false (and counted) when the backlog is full too or the frame
  // does not fit a slot. Frames leave in the order given.
  bool transmit(ByteSpan frame);
  // Building in place: a free transmit slot's memory (empty if none is free, frames wait
  // in the backlog, or `size` does not fit a slot), then transmit_prepared() queues its
  // write. No copy; one at a time.
  MutableByteSpan prepare_transmit(std::size_t size);
  void transmit_prepared(std::size_t size);
  // The datagram socket's forms of transmit() and transmit_prepared(): the same slots,
  // backlog and order, each datagram to its own destination.
  bool transmit_to(ByteSpan payload, const DatagramDestination& destination);
  void transmit_prepared_to(std::size_t size, const DatagramDestination& destination);
  // With udp_segmentation: the place a datagram of `size` bytes to `destination` would take
  // in the run being gathered if transmit_prepared_to() came next, 0 when it would start a
  // run. The kernel gives a run's segments the IPv4 IDs of the run's own ID upward, one
  // each (inet_gso_segment); an unconnected socket with DF sends ID 0, so the datagram's ID
  // on the wire is this place. (Always 0 without udp_segmentation.)
  std::size_t run_position(std::size_t size, const DatagramDestination& destination) const;
  static constexpr std::size_t kMaxRunSegments = 64;  // the kernel's UDP_MAX_SEGMENTS (6.1)
  static constexpr std::size_t kMaxRunBytes = 65507;  // one UDP datagram's payload over IPv4
  // Transmit slots not in flight.
  std::size_t free_transmit_slots() const { return free_tx_slots_.size(); }
  // Frames transmit() puts in a slot at once: the free slots while nothing waits in the
  // backlog, else none (a frame now would wait behind the backlog).
  std::size_t transmit_room() const { return tx_backlog_.empty() ? free_tx_slots_.size() : 0; }

  // Calls `on_ready` whenever `fd` becomes readable (edge-like: drain it to EAGAIN).
  void watch(int fd, ReadyHandler on_ready);
  void unwatch(int fd);

  void add_timer_source(TimerSource source);

  // Adds 1 to the eventfd `fd` with an io_uring write, so that the loop never blocks on it
  // even when another process shares the fd, cleared O_NONBLOCK and let the counter fill
  // (the verbs completion channels, docs/VERBS_DATAPATH.md). At most one write per fd is
  // in flight; a signal asked for meanwhile is sent when it completes (the pending write may
  // already have been read by then, and the reader have gone back to sleep waiting for
  // this one). Submitted at once, so the fd number is resolved before its owner can close it.
  void signal_eventfd(int fd);
  // The fd is about to be closed: a write still pending no longer stops new ones to a new
  // fd of the same number.
  void forget_eventfd(int fd);

  // Runs until stop(); then flushes queued transmits and cancels everything in flight,
  // so that no request still holds a reference to any watched fd or the TAP.
  void run();
  void stop() { stopping_ = true; }

  const LoopCounters& counters() const { return counters_; }

 private:
  struct Watch {
    int fd;
    ReadyHandler on_ready;
  };
  // A frame or datagram that found every slot in flight, copied.
  struct Waiting {
    std::vector<std::uint8_t> bytes;
    DatagramDestination destination;  // datagram socket only
  };
  // The kernel reads a sendmsg's header, address and control messages when it runs the
  // request, so each slot has its own.
  struct SlotMessage {
    msghdr header{};
    std::vector<iovec> vectors;           // one per datagram of its run (one alone)
    std::vector<std::uint32_t> followers;  // the run's other slots, freed with this one
    sockaddr_in to{};
    alignas(cmsghdr) std::uint8_t control[CMSG_SPACE(sizeof(in_pktinfo)) + 2 * CMSG_SPACE(sizeof(int)) +
                                          CMSG_SPACE(sizeof(std::uint16_t))]{};
  };
  // The datagrams gathered for one sendmsg, not yet queued: the first one's slot carries the
  // message.
  struct OpenRun {
    std::uint32_t first = 0;
    std::size_t segment_size = 0;
    std::size_t bytes = 0;
    DatagramDestination destination;
  };

  io_uring_sqe* next_sqe();
  std::uint8_t* slot_memory(std::uint32_t slot) const;
  void flush_backlog();
  void write_in_free_slot(const Waiting& frame);
  void queue_write(std::uint32_t slot, std::size_t size, const DatagramDestination& destination);
  void queue_sendmsg(std::uint32_t slot, std::size_t size, const DatagramDestination& destination);
  bool joins_open_run(std::size_t size, const DatagramDestination& destination) const;
  void gather(std::uint32_t slot, std::size_t size, const DatagramDestination& destination);
  void close_open_run();
  void send_message(std::uint32_t slot, const DatagramDestination& destination, std::size_t segment_size);
  bool queue_or_backlog(ByteSpan bytes, const DatagramDestination& destination);
  void deliver_datagram(std::uint8_t* buffer, std::size_t length, Instant now);
  void arm_frame_reads();
  void register_transmit_buffers();
  void target_frame_device(io_uring_sqe* sqe) const;
  void arm_watch(std::uint64_t id, int fd);
  void arm_timer(std::optional<Instant> deadline);
  std::optional<Instant> run_timer_sources(Instant now);
  void dispatch(const io_uring_cqe& cqe, Instant now);
  void on_frame_read(const io_uring_cqe& cqe, Instant now);
  void on_write_done(const io_uring_cqe& cqe);
  void on_watch_ready(const io_uring_cqe& cqe, Instant now);
  void on_timeout(const io_uring_cqe& cqe);
  void on_signal_done(const io_uring_cqe& cqe);
  void recycle_buffer(unsigned buffer_id);
  void reap_completions(Instant now);
  void wait_for_completions();
  bool busy_poll_allowed(Instant now);
  bool busy_poll_until_ready(Instant until);
  void shut_down();

  EventLoopConfig config_;
  std::size_t rx_buffer_size_;
  io_uring ring_{};
  bool stopping_ = false;
  LoopCounters counters_;
  unsigned inflight_ = 0;

  // Receive: a provided-buffer ring shared with the kernel.
  int frame_fd_ = -1;
  FrameHandler on_frame_;
  std::function<void()> frames_done_;
  bool multishot_read_ = false;
  bool frame_file_fixed_ = false;  // frame_fd_ is index 0 of the registered files
  unsigned reads_in_flight_ = 0;
  unsigned consecutive_read_errors_ = 0;
  // After a run of read errors the reads rest until this instant instead of spinning.
  std::optional<Instant> reads_paused_until_;
  io_uring_buf_ring* buffer_ring_ = nullptr;
  std::size_t buffer_ring_bytes_ = 0;
  std::uint8_t* rx_memory_ = nullptr;
  std::size_t rx_memory_bytes_ = 0;
  unsigned buffers_to_return_ = 0;

  // Transmit: slots of a registered buffer, free ones on a stack.
  std::uint8_t* tx_memory_ = nullptr;
  std::size_t tx_memory_bytes_ = 0;
  std::vector<std::uint32_t> free_tx_slots_;
  bool tx_buffers_registered_ = false;
  std::deque<Waiting> tx_backlog_;  // frames waiting for a slot, oldest first
  // The datagram socket device: the multishot recvmsg's header (only its name and control
  // lengths are read) and one message per transmit slot.
  bool datagram_socket_ = false;
  DatagramHandler on_datagram_;
  msghdr recv_header_{};
  std::vector<SlotMessage> slot_messages_;
  std::optional<std::uint32_t> prepared_slot_;  // handed out by prepare_transmit()
  std::optional<OpenRun> open_run_;             // udp_segmentation: datagrams being gathered
  bool segmentation_on_ = false;

  std::map<std::uint64_t, Watch> watches_;  // keyed by a never-reused id
  std::uint64_t next_watch_id_ = 1;

  std::map<std::uint64_t, int> signals_in_flight_;  // never-reused id -> eventfd
  std::map<int, std::uint64_t> signal_of_fd_;
  std::set<int> signal_again_;  // fds asked to be signalled while their write was in flight
  std::uint64_t next_signal_id_ = 1;

  // Busy polling: when a frame or a watched fd last completed, and whether a CPU was idle
  // when last looked at (until busy_poll_checked_until_).
  std::optional<Instant> last_activity_;
  bool cpu_idle_ = false;
  Instant busy_poll_checked_until_{};
  unsigned online_cpus_ = 1;
  int loadavg_fd_ = -1;

  std::vector<TimerSource> timer_sources_;
  std::optional<Instant> armed_deadline_;
  __kernel_timespec timeout_spec_{};  // the kernel reads it at submit time
};

}  // namespace rrdma::vnic
