// The client library: how an application process uses a vnic. It speaks the control
// protocol to the vnic's daemon (verbs/contract/control_protocol.h) and shares rings with it
// (verbs/contract/ring.h), following docs/VERBS_DATAPATH.md to the letter. Everything a libibverbs
// call needs is here — lists of work requests with the first refused one reported, polling
// N completions, notification (next / solicited), completion channels, async events,
// resize_cq, SRQ modify/query, query_qp, address handles, inline data, UD — with plain
// C++ types whose layouts map 1:1 onto libibverbs' (Sge is struct ibv_sge, Cqe is struct
// ibv_wc) and the verbs numeric codes. The C++ API (verbs/app/api.h) and the libibverbs shim are
// built on it; docs/VERBS_CLIENT.md explains it.
//
// Errors are errno values, as verbs returns them: a function returns 0 or a positive errno
// (or a Result whose `error` is), never throws for a refused request. (std::bad_alloc may
// still escape.)
//
// Ownership: objects are shared_ptrs, and each holds its parents (a QP its PD, CQs and SRQ;
// everything its Context), so the last reference decides when the daemon is told. destroy()
// asks the daemon now and reports its answer (EBUSY while the object is in use, as verbs
// says); a destructor of an object not destroyed yet asks too, and ignores the answer.
//
// Threads: every call is safe from any thread. Control requests are serialised on the
// Context's connection; each QP's send path, each receive queue, each CQ and each
// channel's event reading has its own mutex (the rings are single-producer
// single-consumer). Lock order: CQ -> Context; channel list -> CQ.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "verbs/contract/abi.h"
#include "verbs/app/api.h"
#include "verbs/contract/control_protocol.h"
#include "verbs/contract/ring.h"

namespace rrdma::verbs::client {

// The value types are shared with the C++ API (verbs/app/api.h): Gid, Sge (= ibv_sge),
// QpCapabilities, QpAttributes (ibv_qp_attr), SrqAttributes, DeviceAttributes,
// PortAttributes and the code enums.
using verbs::DeviceAttributes;
using verbs::Gid;
using verbs::PortAttributes;
using verbs::QpAttributes;
using verbs::QpCapabilities;
using verbs::QpState;
using verbs::QpType;
using verbs::Sge;
using verbs::SrqAttributes;

// The version of this contract the library speaks (open_device's first word).
inline constexpr std::uint64_t kAbiVersion = control::kVersion;
// Entries of a context's async-event ring (docs/VERBS_DATAPATH.md).
inline constexpr std::uint32_t kEventRingEntries = 64;
// How long a control request may wait for its reply before it fails with ETIMEDOUT: a
// daemon that stopped answering must not hang the application.
inline constexpr int kControlTimeoutMs = 30000;

template <typename T>
struct Result {
  int error = 0;  // 0 or a positive errno
  T value{};
  bool ok() const { return error == 0; }
};

// The ring capacity for a requested number of entries: rounded up to a power of two, at
// least 1; nullopt above kMaxRingCapacity. The daemon derives the same from the request.
std::optional<std::uint32_t> ring_capacity_for(std::uint32_t entries);
RingGeometry send_ring_geometry(std::uint32_t capacity);
RingGeometry recv_ring_geometry(std::uint32_t capacity);
RingGeometry cq_ring_geometry(std::uint32_t capacity);
RingGeometry event_ring_geometry();

// An owned file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();

 private:
  int fd_ = -1;
};

// How often the data path (poll, post) looks at the connection to notice that the daemon
// died: a program that only busy-polls its CQ never reads the socket otherwise.
inline constexpr std::int64_t kLivenessCheckIntervalMs = 10;

// What an application waits on for a context's async events or a channel's completions
// (ibv_context.async_fd, ibv_comp_channel.fd): an epoll fd over the eventfd the daemon
// writes and the connection to the daemon, the latter registered for hang-up only. The fd
// is readable when the daemon signals *or* dies, and it is the kernel that notices: a
// program asleep in poll() on its async fd or channel fd learns of the death with no thread
// of ours watching. The eventfd itself is private (and non-blocking): the application's
// O_NONBLOCK is the one it sets on fd().
class EventWait {
 public:
  // The socket is the context's connection; it stays owned by the Context.
  static Result<EventWait> create(int socket_fd);

  int fd() const { return epoll_.get(); }
  int event_fd() const { return event_fd_.get(); }

  enum class Woken { Signalled, DaemonGone };
  // Waits for the daemon's signal (0, `count` = the counter read) or its hang-up (0,
  // DaemonGone); EAGAIN when fd() is non-blocking and neither came; ETIMEDOUT after
  // timeout_ms >= 0. Without a timeout it sleeps as a kernel channel's read(2) does: EINTR
  // after a signal handler installed without SA_RESTART, none after one with it
  // (signal_wait.h); a timed wait goes on through signals.
  int wait(int timeout_ms, Woken& woken, std::uint64_t& count);

 private:
  int sleep(Woken& woken, std::uint64_t& count);
  // Takes the counter if the daemon wrote it, else the hang-up if `daemon_gone`; false if
  // neither.
  bool take(bool daemon_gone, Woken& woken, std::uint64_t& count);

  UniqueFd epoll_;
  UniqueFd event_fd_;
  int socket_fd_ = -1;
};

// ---------------------------------------------------------------------------------------
// Devices

// $RRDMA_RUN_DIR, else /run/rrdma.
std::string run_directory();

struct DeviceEntry {
  std::string name;
  std::string socket_path;
};
// Running vnics: NAME.sock files in the run directory whose socket accepts a connection.
std::vector<DeviceEntry> list_devices();

class ProtectionDomain;
class MemoryRegion;
class CompletionChannel;
class CompletionQueue;
class QueuePair;
class SharedReceiveQueue;
class AddressHandle;
class MemoryWindow;

// ---------------------------------------------------------------------------------------
// Context: one connection to one vnic's daemon (ibv_open_device)

class Context : public std::enable_shared_from_this<Context> {
 public:
  // ENODEV when no vnic `name` is running; EACCES when its socket refuses us.
  static Result<std::shared_ptr<Context>> open(std::string_view name);
  // The same over a connected SOCK_SEQPACKET socket (tests; adopts `socket_fd`).
  static Result<std::shared_ptr<Context>> open_socket(int socket_fd, std::string name);

  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context();

  const std::string& name() const { return name_; }
  std::uint32_t handle() const { return handle_; }
  std::uint64_t node_guid() const { return node_guid_; }

  int query_device(DeviceAttributes& out);
  int query_port(std::uint8_t port, PortAttributes& out);
  int query_gid(std::uint8_t port, int index, Gid& out);

  Result<std::shared_ptr<ProtectionDomain>> alloc_pd();
  Result<std::shared_ptr<CompletionChannel>> create_comp_channel();
  // `channel` may be null: the CQ then signals a private eventfd nobody reads.
  Result<std::shared_ptr<CompletionQueue>> create_cq(std::uint32_t entries,
                                                     std::shared_ptr<CompletionChannel> channel);

  // ibv_context.async_fd: readable when an event may be waiting, and for good once the
  // daemon is gone.
  int async_fd() const { return event_wait_.fd(); }
  // ibv_get_async_event: 0 with the next event; waits on async_fd unless it is
  // non-blocking (then EAGAIN); timeout_ms >= 0 bounds the wait (ETIMEDOUT). Once the
  // daemon is gone: the events it had queued, then IBV_EVENT_DEVICE_FATAL once, then EIO.
  int get_async_event(AsyncEventEntry& out, int timeout_ms = -1);
  // 0 with an event (DEVICE_FATAL once the daemon is known gone), EAGAIN when none is
  // queued; never a system call.
  int try_get_async_event(AsyncEventEntry& out);

  // The daemon is gone (its end of the connection hung up): the device is dead for good,
  // as after IBV_EVENT_DEVICE_FATAL. Posting is EIO, polling gives the outstanding work
  // flushed and then -EIO, waits on the async fd or a channel return.
  bool device_fatal() const { return device_fatal_.load(std::memory_order_acquire); }
  // device_fatal(), after looking at the connection if kLivenessCheckIntervalMs passed
  // since the last look: one coarse clock read otherwise, cheap enough for every empty
  // poll and every post.
  bool check_device_fatal();
  // Called by whoever saw the hang-up (a wait, a control request).
  void note_device_fatal();
  // For a channel of this context: the connection it must watch for hang-up.
  int socket_fd() const { return socket_.get(); }

  // One control request and its reply, serialised with every other request on this
  // connection: 0 with `reply` filled, the daemon's status as errno, or EIO / EPROTO /
  // ETIMEDOUT when the connection broke or the daemon answered nonsense.
  int call(const control::Message& request, std::span<const int> fds, control::Message& reply);
  control::Message new_request(control::MessageType type);

 private:
  Context(UniqueFd socket, std::string name);
  int handshake();
  void settle_event_fd();
  int take_fatal_event(AsyncEventEntry& out);

  std::string name_;
  UniqueFd socket_;
  std::mutex control_mutex_;
  std::uint32_t next_request_id_ = 1;
  bool broken_ = false;  // under control_mutex_
  std::uint32_t handle_ = 0;
  std::uint64_t node_guid_ = 0;

  SharedRegion event_region_;
  std::optional<RingConsumer> event_ring_;
  EventWait event_wait_;
  std::mutex event_mutex_;

  std::atomic<bool> device_fatal_{false};
  bool fatal_event_taken_ = false;  // under event_mutex_
  std::atomic<std::int64_t> last_liveness_check_ms_{0};
};

// Sends a destroy request for `handle`; shared by every object's destroy().
int destroy_handle(Context& context, control::MessageType type, std::uint32_t handle);

// ---------------------------------------------------------------------------------------
// PD, MR, AH

struct AhAttributes {  // ibv_ah_attr's fields for RoCE v2 (a GRH is always there)
  Gid dgid;
  std::uint8_t sgid_index = 0;
  std::uint8_t hop_limit = 64;
  std::uint8_t traffic_class = 0;
  std::uint32_t flow_label = 0;
  std::uint8_t port_num = 1;
};

struct QpInit {  // ibv_qp_init_attr
  QpType type = QpType::Rc;
  std::shared_ptr<CompletionQueue> send_cq;
  std::shared_ptr<CompletionQueue> recv_cq;
  std::shared_ptr<SharedReceiveQueue> srq;  // may be null
  QpCapabilities cap;
  bool sq_sig_all = false;
};

class ProtectionDomain : public std::enable_shared_from_this<ProtectionDomain> {
 public:
  ProtectionDomain(std::shared_ptr<Context> context, std::uint32_t handle)
      : context_(std::move(context)), handle_(handle) {}
  ProtectionDomain(const ProtectionDomain&) = delete;
  ProtectionDomain& operator=(const ProtectionDomain&) = delete;
  ~ProtectionDomain();

  Context& context() const { return *context_; }
  std::uint32_t handle() const { return handle_; }

  // ibv_reg_mr: the memory [address, address + length) of this process. ibv_reg_mr_iova:
  // WQEs and RETHs name its first byte `iova` (default: the address; 0 with ZERO_BASED).
  Result<std::shared_ptr<MemoryRegion>> register_memory(void* address, std::size_t length, std::uint32_t access,
                                                        std::optional<std::uint64_t> iova = std::nullopt);
  // ibv_alloc_mw: `type` is IBV_MW_TYPE_1 or IBV_MW_TYPE_2.
  Result<std::shared_ptr<MemoryWindow>> alloc_mw(std::uint32_t type);
  // ibv_create_qp. `init.cap` comes back as the QP has it (QueuePair::capabilities()).
  Result<std::shared_ptr<QueuePair>> create_qp(const QpInit& init);
  // ibv_create_srq.
  Result<std::shared_ptr<SharedReceiveQueue>> create_srq(std::uint32_t max_wr, std::uint32_t max_sge,
                                                         std::uint32_t limit);
  // ibv_create_ah.
  Result<std::shared_ptr<AddressHandle>> create_ah(const AhAttributes& attributes);

  int destroy();  // ibv_dealloc_pd

 private:
  std::shared_ptr<Context> context_;
  std::uint32_t handle_ = 0;
  std::atomic<bool> destroyed_{false};
};

class MemoryRegion {
 public:
  struct Keys {
    std::uint32_t handle = 0, lkey = 0, rkey = 0;
  };
  MemoryRegion(std::shared_ptr<ProtectionDomain> pd, void* address, std::size_t length, std::uint32_t access,
               std::uint64_t iova, Keys keys)
      : pd_(std::move(pd)), address_(address), length_(length), access_(access), iova_(iova), keys_(keys) {}
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;
  ~MemoryRegion();

  ProtectionDomain& pd() const { return *pd_; }
  void* address() const { return address_; }
  std::size_t length() const { return length_; }
  std::uint32_t access() const { return access_; }
  std::uint32_t handle() const { return keys_.handle; }
  std::uint32_t lkey() const { return keys_.lkey; }
  std::uint32_t rkey() const { return keys_.rkey; }
  std::uint64_t iova() const { return iova_; }

  // ibv_rereg_mr: `flags` are enum ibv_rereg_mr_flags; what a flag does not name keeps its
  // value. On success the region has the daemon's keys (the same ones: it keeps them).
  // Not thread-safe against readers of this region's fields, as ibv_rereg_mr is not.
  int reregister(std::uint32_t flags, std::shared_ptr<ProtectionDomain> pd, void* address, std::size_t length,
                 std::uint32_t access);
  int destroy();  // ibv_dereg_mr

 private:
  std::shared_ptr<ProtectionDomain> pd_;
  void* address_ = nullptr;
  std::size_t length_ = 0;
  std::uint32_t access_ = 0;
  std::uint64_t iova_ = 0;
  Keys keys_;
  std::atomic<bool> destroyed_{false};
};

// A memory window (IBA 10.6.7). Binding it is a work request (SendWr with IBV_WR_BIND_MW, its
// fields as verbs/contract/abi.h maps them); the daemon keeps its current R_Key, this object
// only the one alloc_mw gave.
class MemoryWindow {
 public:
  MemoryWindow(std::shared_ptr<ProtectionDomain> pd, std::uint32_t handle, std::uint32_t type, std::uint32_t rkey)
      : pd_(std::move(pd)), handle_(handle), type_(type), rkey_(rkey) {}
  MemoryWindow(const MemoryWindow&) = delete;
  MemoryWindow& operator=(const MemoryWindow&) = delete;
  ~MemoryWindow();

  ProtectionDomain& pd() const { return *pd_; }
  std::uint32_t handle() const { return handle_; }
  std::uint32_t type() const { return type_; }
  std::uint32_t initial_rkey() const { return rkey_; }
  int destroy();  // ibv_dealloc_mw

 private:
  std::shared_ptr<ProtectionDomain> pd_;
  std::uint32_t handle_ = 0;
  std::uint32_t type_ = 0;
  std::uint32_t rkey_ = 0;
  std::atomic<bool> destroyed_{false};
};

class AddressHandle {
 public:
  AddressHandle(std::shared_ptr<ProtectionDomain> pd, std::uint32_t handle, const AhAttributes& attributes)
      : pd_(std::move(pd)), handle_(handle), attributes_(attributes) {}
  AddressHandle(const AddressHandle&) = delete;
  AddressHandle& operator=(const AddressHandle&) = delete;
  ~AddressHandle();

  std::uint32_t handle() const { return handle_; }
  const AhAttributes& attributes() const { return attributes_; }
  int destroy();  // ibv_destroy_ah

 private:
  std::shared_ptr<ProtectionDomain> pd_;
  std::uint32_t handle_ = 0;
  AhAttributes attributes_;
  std::atomic<bool> destroyed_{false};
};

// ---------------------------------------------------------------------------------------
// What a QP has posted and not yet seen complete

// When the daemon dies, the work it held never completes; verbs promises that every WR
// posted to a QP in error completes, flushed. Only the client is left to do it, so each QP
// keeps a log of its WRs that have not completed, and the CQ's poll retires entries as the
// daemon's CQEs arrive. The daemon completes a QP's sends in posting order (a signaled
// success retires every unsignaled WR before it; an error completes one WR, signaled or not,
// as the engine's flush does) and its receives in posting order.
class WorkLog {
 public:
  // At most `bound` entries per queue can be outstanding (the ring and the daemon's queue
  // behind it); an older entry must have completed and is dropped.
  WorkLog(std::uint32_t qp_num, std::size_t bound) : qp_num_(qp_num), bound_(bound) {}

  std::uint32_t qp_num() const { return qp_num_; }
  void posted_send(std::uint64_t wr_id, std::uint8_t opcode, bool signaled);
  void posted_recv(std::uint64_t wr_id);
  // A CQE of this QP was polled.
  void completed(const Cqe& cqe);
  // Writes one IBV_WC_WR_FLUSH_ERR CQE per outstanding send (or receive) into `out`, oldest
  // first, and forgets them: how many were written.
  std::size_t flush_sends(std::span<Cqe> out);
  std::size_t flush_recvs(std::span<Cqe> out);
  // modify_qp(RESET): every outstanding WQE is gone without a completion.
  void forget_all();

 private:
  struct PostedSend {
    std::uint64_t wr_id;
    std::uint8_t opcode;  // IBV_WR_*
    bool signaled;
  };
  std::uint32_t qp_num_;
  std::size_t bound_;
  std::mutex mutex_;
  std::deque<PostedSend> sends_;
  std::deque<std::uint64_t> recvs_;
};

// ---------------------------------------------------------------------------------------
// Completion channels and CQs

class CompletionChannel : public std::enable_shared_from_this<CompletionChannel> {
 public:
  CompletionChannel(std::shared_ptr<Context> context, EventWait wait)
      : context_(std::move(context)), wait_(std::move(wait)) {}
  CompletionChannel(const CompletionChannel&) = delete;
  CompletionChannel& operator=(const CompletionChannel&) = delete;

  // ibv_comp_channel.fd: readable after the daemon wrote the channel's eventfd (once per
  // consumed arm), and for good once the daemon is gone.
  int fd() const { return wait_.fd(); }
  // The eventfd the daemon writes (each CQ's notify fd).
  int notify_fd() const { return wait_.event_fd(); }
  // ibv_get_cq_event: 0 and the CQ that fired; EAGAIN if fd() is non-blocking and nothing
  // fired; ETIMEDOUT when timeout_ms >= 0 passed; EIO once the daemon is gone (as a kernel
  // channel reads after its device was removed). The caller gets a reference to the CQ.
  int get_cq_event(std::shared_ptr<CompletionQueue>& out, int timeout_ms = -1);
  // CQs created on this channel that are still alive.
  std::size_t attached() const;

 private:
  friend class CompletionQueue;
  friend class Context;
  void attach(CompletionQueue* cq);
  void detach(CompletionQueue* cq);
  // Moves up to `budget` CQs whose arm the daemon consumed into pending_.
  void collect_fired(std::uint64_t budget);

  std::shared_ptr<Context> context_;
  EventWait wait_;
  std::mutex read_mutex_;            // one reader of the eventfd at a time
  mutable std::mutex list_mutex_;    // attached_ and pending_
  std::vector<CompletionQueue*> attached_;
  std::deque<std::weak_ptr<CompletionQueue>> pending_;
};

class CompletionQueue : public std::enable_shared_from_this<CompletionQueue> {
 public:
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;
  ~CompletionQueue();

  std::uint32_t handle() const { return handle_; }
  std::uint32_t capacity() const;  // ibv_cq.cqe
  CompletionChannel* channel() const { return channel_.get(); }
  Context& context() const { return *context_; }

  // ibv_poll_cq: up to out.size() CQEs (each is a struct ibv_wc); the count, or -EIO when
  // the daemon corrupted the ring. Once the daemon is gone: what it had completed, then
  // every outstanding WR of the CQ's QPs as IBV_WC_WR_FLUSH_ERR, then -EIO.
  int poll(std::span<Cqe> out);
  // ibv_req_notify_cq; EIO once the daemon is gone.
  int req_notify(bool solicited_only);

  // A QP sends (or receives) through this CQ: its log is retired by the CQEs polled here and
  // flushed here when the daemon dies.
  enum class Side { Send, Recv };
  void attach_log(std::shared_ptr<WorkLog> log, Side side);
  void detach_log(const WorkLog* log);
  // A QP of this CQ went to RESET: its CQEs not yet polled are dropped, the others kept in
  // order, as hardware providers do (mlx5_cq_clean): new work on the recycled QP must not
  // meet the completions (flushes, errors) of its past. How many were dropped.
  std::uint32_t discard_completions_of(std::uint32_t qp_num);
  // ibv_resize_cq: a new ring of at least `entries` (and room for what is queued); the
  // daemon moves the queued CQEs over before it answers.
  int resize(std::uint32_t entries);
  int destroy();  // ibv_destroy_cq

  // For the layer above (the C++ API's object, the shim's ibv_cq).
  std::atomic<void*> user_context{nullptr};

 private:
  friend class Context;
  friend class CompletionChannel;
  CompletionQueue(std::shared_ptr<Context> context, std::shared_ptr<CompletionChannel> channel);
  // The CQ's arm was set by us and consumed by the daemon: clears our flag, true. Under mutex_.
  bool take_fired();
  // Under mutex_: retire a polled CQE in its QP's log; write flush CQEs for what is left.
  void retire(const Cqe& cqe);
  std::size_t flush_into(std::span<Cqe> out);

  struct AttachedLog {
    std::shared_ptr<WorkLog> log;
    Side side;
  };

  std::shared_ptr<Context> context_;
  std::shared_ptr<CompletionChannel> channel_;
  UniqueFd private_notify_fd_;
  std::uint32_t handle_ = 0;
  mutable std::mutex mutex_;
  SharedRegion region_;
  std::optional<RingConsumer> ring_;
  bool armed_ = false;          // we armed and have not reported the event yet
  std::uint32_t arm_kind_ = kNotifyNone;
  std::vector<AttachedLog> logs_;  // under mutex_
  std::atomic<bool> destroyed_{false};
};

// ---------------------------------------------------------------------------------------
// Posting

// One send work request (ibv_send_wr without the list pointer). imm_data is the value as
// ibv_send_wr holds it (network byte order).
struct SendWr {
  std::uint64_t wr_id = 0;
  std::span<const Sge> sg_list;
  std::uint32_t opcode = 2;  // IBV_WR_SEND
  std::uint32_t send_flags = 0;
  std::uint32_t imm_data = 0;
  std::uint32_t invalidate_rkey = 0;
  std::uint64_t remote_addr = 0;
  std::uint32_t rkey = 0;
  std::uint64_t compare_add = 0;
  std::uint64_t swap = 0;
  const AddressHandle* ah = nullptr;
  std::uint32_t remote_qpn = 0;
  std::uint32_t remote_qkey = 0;
};

struct RecvWr {
  std::uint64_t wr_id = 0;
  std::span<const Sge> sg_list;
};

// What the send path checks a WR against.
struct SendShape {
  rocev2::QpType type = rocev2::QpType::Rc;
  std::uint32_t max_send_sge = 0;
  std::uint32_t max_inline = 0;
  bool sig_all = false;
};
// WR -> WQE, as ibv_post_send(3) checks it: 0 or EINVAL. With IBV_SEND_INLINE the data is
// read from the SGE addresses now (the caller's memory; keys are not needed).
int build_send_wqe(const SendWr& wr, const SendShape& shape, SendWqe& out);
int build_recv_wqe(const RecvWr& wr, std::uint32_t max_recv_sge, RecvWqe& out);

// A producer end of a WQE ring with the eventfd the daemon wants rung.
class WorkRing {
 public:
  WorkRing(SharedRegion region, RingGeometry geometry, int doorbell_fd);
  WorkRing(const WorkRing&) = delete;
  WorkRing& operator=(const WorkRing&) = delete;
  // 0, ENOMEM when full, EIO when the daemon broke the ring.
  int push(ByteSpan entry);
  // Publishes what was pushed and rings the doorbell if the daemon asked.
  void publish();
  int region_fd() const { return region_.fd(); }
  std::uint32_t capacity() const { return geometry_.capacity; }
  std::mutex& mutex() { return mutex_; }

 private:
  SharedRegion region_;
  RingGeometry geometry_;
  RingProducer producer_;
  int doorbell_fd_;
  std::mutex mutex_;
  bool pushed_ = false;
};

// Posts WRs one by one under the ring's lock, and publishes once when it goes out of scope
// (or at finish()): the shape of ibv_post_send over a linked list, which the shim walks
// without copying it. After a refused WR nothing more is pushed: the caller reports that WR
// as *bad_wr.
class SendBatch {
 public:
  // `log` (may be null) records each WR pushed.
  SendBatch(WorkRing& ring, const SendShape& shape, int state_error, WorkLog* log = nullptr);
  SendBatch(const SendBatch&) = delete;
  SendBatch& operator=(const SendBatch&) = delete;
  ~SendBatch() { finish(); }
  int push(const SendWr& wr);
  void finish();

 private:
  WorkRing* ring_;
  std::unique_lock<std::mutex> lock_;
  SendShape shape_;
  int error_;
  WorkLog* log_;
};

class RecvBatch {
 public:
  RecvBatch(WorkRing& ring, std::uint32_t max_recv_sge, int state_error, WorkLog* log = nullptr);
  RecvBatch(const RecvBatch&) = delete;
  RecvBatch& operator=(const RecvBatch&) = delete;
  ~RecvBatch() { finish(); }
  int push(const RecvWr& wr);
  void finish();

 private:
  WorkRing* ring_;
  std::unique_lock<std::mutex> lock_;
  std::uint32_t max_recv_sge_;
  int error_;
  WorkLog* log_;
};

// ---------------------------------------------------------------------------------------
// QP and SRQ

class SharedReceiveQueue {
 public:
  SharedReceiveQueue(std::shared_ptr<ProtectionDomain> pd, std::uint32_t handle, std::unique_ptr<WorkRing> ring,
                     UniqueFd doorbell, std::uint32_t max_sge)
      : pd_(std::move(pd)), handle_(handle), doorbell_(std::move(doorbell)), ring_(std::move(ring)),
        max_sge_(max_sge) {}
  SharedReceiveQueue(const SharedReceiveQueue&) = delete;
  SharedReceiveQueue& operator=(const SharedReceiveQueue&) = delete;
  ~SharedReceiveQueue();

  std::uint32_t handle() const { return handle_; }
  std::uint32_t max_wr() const { return ring_->capacity(); }
  std::uint32_t max_sge() const { return max_sge_; }
  RecvBatch begin_recv();
  // ibv_post_srq_recv: 0 or errno; `posted` = how many went (*bad_wr = wrs[posted]).
  int post_recv(std::span<const RecvWr> wrs, std::size_t& posted);
  int modify(const SrqAttributes& attributes, int mask);  // IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT
  int query(SrqAttributes& out);
  int destroy();

  std::atomic<void*> user_context{nullptr};

 private:
  std::shared_ptr<ProtectionDomain> pd_;
  std::uint32_t handle_ = 0;
  UniqueFd doorbell_;
  std::unique_ptr<WorkRing> ring_;
  std::uint32_t max_sge_ = 0;
  std::atomic<bool> destroyed_{false};
};

class QueuePair {
 public:
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;
  ~QueuePair();

  std::uint32_t handle() const { return handle_; }
  std::uint32_t qp_num() const { return qp_num_; }
  QpType type() const { return init_.type; }
  const QpCapabilities& capabilities() const { return init_.cap; }
  bool sq_sig_all() const { return init_.sq_sig_all; }
  // As of our last modify / query; ERR once the daemon is gone.
  QpState state() const;
  ProtectionDomain& pd() const { return *pd_; }
  CompletionQueue& send_cq() const { return *init_.send_cq; }
  CompletionQueue& recv_cq() const { return *init_.recv_cq; }
  SharedReceiveQueue* srq() const { return init_.srq.get(); }

  int modify(const QpAttributes& attributes, int mask);  // ibv_modify_qp
  int query(int mask, QpAttributes& out);                // ibv_query_qp (cap filled here)

  SendBatch begin_send();
  RecvBatch begin_recv();
  // ibv_post_send / ibv_post_recv: 0 or errno; `posted` = how many went.
  int post_send(std::span<const SendWr> wrs, std::size_t& posted);
  int post_recv(std::span<const RecvWr> wrs, std::size_t& posted);
  int destroy();

  std::atomic<void*> user_context{nullptr};

 private:
  friend class ProtectionDomain;
  QueuePair(std::shared_ptr<ProtectionDomain> pd, QpInit init);
  void attach_logs();
  void detach_logs();

  std::shared_ptr<ProtectionDomain> pd_;
  QpInit init_;
  std::uint32_t handle_ = 0;
  std::uint32_t qp_num_ = 0;
  UniqueFd doorbell_;
  std::unique_ptr<WorkRing> send_ring_;
  std::unique_ptr<WorkRing> recv_ring_;
  std::shared_ptr<WorkLog> log_;
  std::atomic<QpState> state_{QpState::Reset};
  std::atomic<bool> destroyed_{false};
};

// The errno a post gets in `state` (ibv_post_send(3): the QP must be at least RTS to send,
// at least INIT to receive; posting in ERR is allowed: the WRs complete flushed).
int send_state_error(QpState state);
int recv_state_error(QpState state, bool has_srq);

}  // namespace rrdma::verbs::client
