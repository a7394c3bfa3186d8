// rrdma::verbs — a C++ API over a vnic for people writing new RDMA code.
//
// The same objects as libibverbs (ibv_*), with C++ ownership: every handle is an RAII
// object that releases its resource in its destructor, buffers are std::span, a failing
// verb throws rrdma::verbs::Error (with the errno verbs would return and a sentence saying
// what went wrong), and what a caller expects to fail — polling, a completion's status — is
// a value. Numeric codes (QP types and states, opcodes, completion statuses, access flags)
// are the libibverbs ones, so a reader of `man ibv_post_send` finds the same names.
//
// A child handle keeps the connection to the device alive, so destruction order is free;
// but the daemon still applies verbs' rules (a PD with MRs or QPs cannot go, a CQ used by
// a QP cannot go): destroy QPs before their CQs and PD, as in C. A destructor never throws;
// a refused destroy (EBUSY) leaves the resource until the Context goes.
//
// Thread safety: as libibverbs. Different threads may use different objects, and the same
// QP/CQ/SRQ concurrently (the library serialises each queue). Moving a handle while another
// thread uses it is a data race, as with any C++ object.
//
// Under it is the client library (verbs/app/client.h); docs/VERBS_CLIENT.md explains both.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "rocev2/verbs_codes.h"

namespace rrdma::verbs {

namespace client {
class Context;
class ProtectionDomain;
class MemoryRegion;
class CompletionChannel;
class CompletionQueue;
class QueuePair;
class SharedReceiveQueue;
class AddressHandle;
}  // namespace client

// ---------------------------------------------------------------------------------------
// Codes (the libibverbs numbers)

// The verbs vocabulary is the one every layer shares (rocev2/verbs_codes.h, libibverbs'
// numbers); the API names it in its own namespace.
using rocev2::QpType;
using rocev2::QpState;
using Opcode = rocev2::WrOpcode;
using rocev2::WcStatus;
using rocev2::WcOpcode;
using rocev2::EventType;
namespace access = rocev2::access;
namespace send_flags = rocev2::send_flags;
namespace wc_flags = rocev2::wc_flags;
namespace qp_attr = rocev2::qp_attr;

enum class Mtu : std::uint32_t {  // IBV_MTU_*: the path MTU of RC/UC, the message limit of UD
  Mtu256 = 1, Mtu512 = 2, Mtu1024 = 3, Mtu2048 = 4, Mtu4096 = 5
};

const char* to_string(WcStatus status);  // the text ibv_wc_status_str() gives
const char* to_string(WcOpcode opcode);
const char* to_string(QpState state);
const char* to_string(EventType type);   // the text ibv_event_type_str() gives
const char* to_string(Opcode opcode);
int mtu_bytes(Mtu mtu);                  // 256 .. 4096

// ---------------------------------------------------------------------------------------
// Errors

// A verb failed. error_number() is the errno the libibverbs call would return (EINVAL,
// ENOMEM, EBUSY, ENODEV, ...); what() says which call and why. A completion that failed is
// not an exception (see WorkCompletion) unless a helper that expects success sees it, and
// then wc_status() says which.
class Error : public std::runtime_error {
 public:
  Error(int error_number, const std::string& message);
  Error(WcStatus status, const std::string& message);
  int error_number() const { return error_number_; }
  std::optional<WcStatus> wc_status() const { return wc_status_; }

 private:
  int error_number_ = 0;
  std::optional<WcStatus> wc_status_;
};

// ---------------------------------------------------------------------------------------
// Plain values

// A GID: 16 bytes, network order. Ours is the IPv4-mapped IPv6 address of the vnic
// (::ffff:a.b.c.d), as RoCE v2 over IPv4 uses.
struct Gid {
  std::array<std::uint8_t, 16> bytes{};

  std::string to_string() const;                  // "::ffff:10.1.2.3"
  static std::optional<Gid> parse(std::string_view text);  // any IPv6 or IPv4 text form
  static Gid from_ipv4(std::uint32_t address_host_order);
  bool operator==(const Gid&) const = default;
};

// One scatter/gather entry: `length` bytes at `addr` inside the MR with key `lkey`. Same
// layout as struct ibv_sge.
struct Sge {
  std::uint64_t addr = 0;
  std::uint32_t length = 0;
  std::uint32_t lkey = 0;
};

// What two sides of an RC/UC connection tell each other before connecting (over any
// channel: ibv_rc_pingpong uses TCP): the QP number, the first PSN, the GID.
struct Endpoint {
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;  // 24 bits
  Gid gid;

  // A single line "qpn psn gid" and back, for sending over a socket.
  std::string encode() const;
  static std::optional<Endpoint> decode(std::string_view text);
};

// What a peer needs to WRITE to or READ from one of our MRs.
struct RemoteBuffer {
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0;
  std::uint64_t length = 0;

  std::string encode() const;  // "addr rkey length"
  static std::optional<RemoteBuffer> decode(std::string_view text);
};

struct DeviceAttributes {  // the ibv_device_attr fields the daemon reports
  std::uint64_t node_guid = 0;
  std::uint64_t max_mr_size = 0;
  std::uint64_t page_size_cap = 0;
  std::uint32_t max_qp = 0, max_qp_wr = 0, device_cap_flags = 0, max_sge = 0;
  std::uint32_t max_cq = 0, max_cqe = 0, max_mr = 0, max_pd = 0;
  std::uint32_t max_qp_rd_atom = 0, max_qp_init_rd_atom = 0, atomic_cap = 0;
  std::uint32_t max_srq = 0, max_srq_wr = 0, max_srq_sge = 0, max_ah = 0;
  std::uint32_t max_mw = 0;
};

struct PortAttributes {  // the ibv_port_attr fields the daemon reports
  std::uint32_t state = 0;  // IBV_PORT_* (4 = ACTIVE)
  Mtu max_mtu = Mtu::Mtu1024;
  Mtu active_mtu = Mtu::Mtu1024;
  std::uint32_t gid_tbl_len = 0;
  std::uint32_t pkey_tbl_len = 0;
  std::uint32_t link_layer = 0;  // IBV_LINK_LAYER_ETHERNET = 2
  bool active() const { return state == 4; }
};

// Sizes of a QP's queues (ibv_qp_cap). create_qp may round them up; QueuePair::capabilities()
// gives what it got.
struct QpCapabilities {
  std::uint32_t max_send_wr = 64;
  std::uint32_t max_recv_wr = 64;
  std::uint32_t max_send_sge = 1;
  std::uint32_t max_recv_sge = 1;
  std::uint32_t max_inline_data = 0;
};

// ibv_qp_attr: the fields modify() sets and query() returns, chosen by a qp_attr:: mask.
struct QpAttributes {
  QpState state = QpState::Reset;
  QpState cur_state = QpState::Reset;
  Mtu path_mtu = Mtu::Mtu1024;
  std::uint32_t qkey = 0;
  std::uint32_t rq_psn = 0;
  std::uint32_t sq_psn = 0;
  std::uint32_t dest_qp_num = 0;
  std::uint32_t access_flags = 0;  // access::
  std::uint16_t pkey_index = 0;
  std::uint8_t port_num = 1;
  std::uint8_t max_rd_atomic = 1;
  std::uint8_t max_dest_rd_atomic = 1;
  std::uint8_t min_rnr_timer = 12;
  std::uint8_t timeout = 14;
  std::uint8_t retry_cnt = 7;
  std::uint8_t rnr_retry = 7;
  // The address vector (qp_attr::kAv): the peer's GID and how to reach it.
  Gid dgid;
  std::uint8_t sgid_index = 0;
  std::uint8_t hop_limit = 64;
  std::uint8_t traffic_class = 0;
  std::uint32_t flow_label = 0;
  QpCapabilities cap;  // query() only
};

struct SrqAttributes {  // ibv_srq_attr
  std::uint32_t max_wr = 0;
  std::uint32_t max_sge = 0;
  std::uint32_t srq_limit = 0;
};

class AddressHandle;

// One send work request (ibv_send_wr). Build one with the helpers below or set the fields.
// By default a request is signaled: it produces a completion.
struct SendWorkRequest {
  std::uint64_t wr_id = 0;
  Opcode opcode = Opcode::Send;
  std::span<const Sge> sg_list;
  std::uint32_t flags = send_flags::kSignaled;  // send_flags::
  std::uint32_t imm_data = 0;          // *_WITH_IMM: host byte order here, the peer's
                                       // WorkCompletion::imm_data() gives it back as is
  std::uint32_t invalidate_rkey = 0;   // SEND_WITH_INV
  std::uint64_t remote_addr = 0;       // RDMA and atomics: the peer's address
  std::uint32_t rkey = 0;              // ... inside its MR with this R_Key
  std::uint64_t compare_add = 0;       // CMP_AND_SWP: compare; FETCH_AND_ADD: the addend
  std::uint64_t swap = 0;              // CMP_AND_SWP: the new value
  const AddressHandle* ah = nullptr;   // UD: where to
  std::uint32_t remote_qpn = 0;        // UD: to which QP
  std::uint32_t remote_qkey = 0;       // UD: with which Q_Key

  static SendWorkRequest send(std::uint64_t wr_id, std::span<const Sge> sges);
  static SendWorkRequest write(std::uint64_t wr_id, std::span<const Sge> sges, const RemoteBuffer& to,
                               std::uint64_t offset = 0);
  static SendWorkRequest read(std::uint64_t wr_id, std::span<const Sge> sges, const RemoteBuffer& from,
                              std::uint64_t offset = 0);
  // The 8-byte result (the old remote value) lands in `result`'s one SGE.
  static SendWorkRequest compare_and_swap(std::uint64_t wr_id, const Sge& result, const RemoteBuffer& at,
                                          std::uint64_t compare, std::uint64_t swap,
                                          std::uint64_t offset = 0);
  static SendWorkRequest fetch_and_add(std::uint64_t wr_id, const Sge& result, const RemoteBuffer& at,
                                       std::uint64_t add, std::uint64_t offset = 0);
};

// One receive work request (ibv_recv_wr).
struct ReceiveWorkRequest {
  std::uint64_t wr_id = 0;
  std::span<const Sge> sg_list;
};

// One completion. Its bytes are exactly a struct ibv_wc, so poll() fills an array of them
// straight from the completion ring.
class WorkCompletion {
 public:
  std::uint64_t wr_id() const { return wr_id_; }
  WcStatus status() const { return static_cast<WcStatus>(status_); }
  bool ok() const { return status_ == 0; }
  const char* status_string() const { return to_string(status()); }
  WcOpcode opcode() const { return static_cast<WcOpcode>(opcode_); }
  std::uint32_t vendor_err() const { return vendor_err_; }
  std::uint32_t byte_len() const { return byte_len_; }
  std::uint32_t qp_num() const { return qp_num_; }
  std::uint32_t src_qp() const { return src_qp_; }  // UD receives: the sender's QP
  std::uint32_t flags() const { return wc_flags_; }  // wc_flags::
  bool has_imm() const { return (wc_flags_ & wc_flags::kWithImm) != 0; }
  // The immediate value in host byte order (the sender's SendWorkRequest::imm_data).
  std::uint32_t imm_data() const;
  // With wc_flags::kWithInv: the R_Key the sender invalidated.
  std::uint32_t invalidated_rkey() const { return imm_or_inv_; }
  // "wr_id 7: RDMA_READ failed: remote access error" and so on.
  std::string describe() const;

 private:
  std::uint64_t wr_id_ = 0;
  std::uint32_t status_ = 0;
  std::uint32_t opcode_ = 0;
  std::uint32_t vendor_err_ = 0;
  std::uint32_t byte_len_ = 0;
  std::uint32_t imm_or_inv_ = 0;  // network byte order, as ibv_wc
  std::uint32_t qp_num_ = 0;
  std::uint32_t src_qp_ = 0;
  std::uint32_t wc_flags_ = 0;
  std::uint16_t pkey_index_ = 0;
  std::uint16_t slid_ = 0;
  std::uint8_t sl_ = 0;
  std::uint8_t dlid_path_bits_ = 0;
};

struct AsyncEvent {
  EventType type = EventType::QpFatal;
  // The daemon's handle of the QP, CQ or SRQ the event is about (compare with their
  // handle()), or the port number for port events.
  std::uint64_t element = 0;
  std::string describe() const;
};

// ---------------------------------------------------------------------------------------
// Handles

class Context;
class ProtectionDomain;
class MemoryRegion;
class CompletionChannel;
class CompletionQueue;
class QueuePair;
class SharedReceiveQueue;

// The devices: one per running vnic (a control socket in $RRDMA_RUN_DIR, else /run/rrdma).
class DeviceList {
 public:
  struct Device {
    std::string name;         // the vnic's name: pass it to Context::open
    std::string socket_path;
  };
  DeviceList();  // scans now
  std::size_t size() const { return devices_.size(); }
  bool empty() const { return devices_.empty(); }
  const Device& operator[](std::size_t i) const { return devices_.at(i); }
  auto begin() const { return devices_.begin(); }
  auto end() const { return devices_.end(); }

 private:
  std::vector<Device> devices_;
};

// An opened device (ibv_context): one connection to the vnic's daemon.
class Context {
 public:
  // Throws Error(ENODEV) when no vnic of that name runs.
  static Context open(std::string_view device_name);

  Context(Context&&) noexcept;
  Context& operator=(Context&&) noexcept;
  ~Context();

  const std::string& device_name() const;
  DeviceAttributes query_device() const;
  PortAttributes query_port(std::uint8_t port = 1) const;
  Gid query_gid(std::uint8_t port = 1, int index = 0) const;

  ProtectionDomain alloc_pd();
  CompletionChannel create_completion_channel();
  // At least `entries` completions fit; with a channel, req_notify() signals there.
  CompletionQueue create_cq(std::uint32_t entries, CompletionChannel* channel = nullptr);

  // The next asynchronous event; waits for one unless the async fd was made non-blocking,
  // then returns nullopt when none is pending. A signal handler without SA_RESTART ends
  // the wait with an Error (EINTR), as with get_event().
  std::optional<AsyncEvent> get_async_event();
  std::optional<AsyncEvent> try_get_async_event();  // never waits
  int async_fd() const;  // readable when an event may be pending (poll/epoll it)

  client::Context& low_level() const { return *impl_; }

 private:
  explicit Context(std::shared_ptr<client::Context> impl);
  std::shared_ptr<client::Context> impl_;
};

class ProtectionDomain {
 public:
  ProtectionDomain(ProtectionDomain&&) noexcept;
  ProtectionDomain& operator=(ProtectionDomain&&) noexcept;
  ~ProtectionDomain();

  // The memory stays the application's; the NIC reaches it while the MR lives. `access` is
  // access:: bits (remote write or atomic also need local write, as verbs says).
  MemoryRegion register_memory(std::span<std::byte> buffer, std::uint32_t access = access::kLocalWrite);
  template <typename T>
  MemoryRegion register_memory(std::span<T> buffer, std::uint32_t access = access::kLocalWrite);

  // A QP whose send and receive completions go to `cq`.
  QueuePair create_qp(QpType type, CompletionQueue& cq, const QpCapabilities& caps = {});
  QueuePair create_qp(QpType type, CompletionQueue& send_cq, CompletionQueue& recv_cq,
                      const QpCapabilities& caps = {}, SharedReceiveQueue* srq = nullptr,
                      bool signal_all = false);
  SharedReceiveQueue create_srq(std::uint32_t max_wr, std::uint32_t max_sge = 1, std::uint32_t limit = 0);
  AddressHandle create_ah(const Gid& destination, std::uint8_t hop_limit = 64, std::uint8_t sgid_index = 0);

  std::uint64_t handle() const;
  client::ProtectionDomain& low_level() const { return *impl_; }

 private:
  friend class Context;
  explicit ProtectionDomain(std::shared_ptr<client::ProtectionDomain> impl);
  std::shared_ptr<client::ProtectionDomain> impl_;
};

class MemoryRegion {
 public:
  MemoryRegion(MemoryRegion&&) noexcept;
  MemoryRegion& operator=(MemoryRegion&&) noexcept;
  ~MemoryRegion();

  std::uint32_t lkey() const;
  std::uint32_t rkey() const;
  std::span<std::byte> bytes() const;
  std::uint64_t address() const;
  std::uint64_t length() const;
  // An SGE over [offset, offset + length) of this MR (length 0 = to the end).
  Sge sge(std::uint64_t offset = 0, std::uint32_t length = 0) const;
  // What a peer needs to reach this MR (address, rkey, length).
  RemoteBuffer remote() const;
  std::uint64_t handle() const;

 private:
  friend class ProtectionDomain;
  explicit MemoryRegion(std::shared_ptr<client::MemoryRegion> impl);
  std::shared_ptr<client::MemoryRegion> impl_;
};

// A file descriptor that becomes readable when a CQ armed with req_notify() gets a
// completion (ibv_comp_channel).
class CompletionChannel {
 public:
  CompletionChannel(CompletionChannel&&) noexcept;
  CompletionChannel& operator=(CompletionChannel&&) noexcept;
  ~CompletionChannel();

  int fd() const;
  // Waits for the next notification (unless fd() was made non-blocking: then nullptr when
  // none is pending) and returns the CQ it is for (ibv_get_cq_event). Re-arm that CQ with
  // req_notify() and poll it. A signal handler installed without SA_RESTART ends the wait
  // with an Error (EINTR), as it ends ibv_get_cq_event; one with SA_RESTART does not.
  CompletionQueue* get_event();
  // As get_event(), waiting at most `timeout` (nullptr when it expires).
  CompletionQueue* get_event(std::chrono::milliseconds timeout);

  client::CompletionChannel& low_level() const { return *impl_; }

 private:
  friend class Context;
  explicit CompletionChannel(std::shared_ptr<client::CompletionChannel> impl);
  std::shared_ptr<client::CompletionChannel> impl_;
};

class CompletionQueue {
 public:
  CompletionQueue(CompletionQueue&&) noexcept;
  CompletionQueue& operator=(CompletionQueue&&) noexcept;
  ~CompletionQueue();

  // Takes up to out.size() completions; returns how many (ibv_poll_cq). No system call.
  std::size_t poll(std::span<WorkCompletion> out);
  std::optional<WorkCompletion> poll_one();
  // Polls until one completion arrives or `timeout` passes (nullopt). Spins, then yields:
  // for examples and tests, not for a latency benchmark.
  std::optional<WorkCompletion> wait(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // As wait(), but a missing or failed completion throws Error (with wc_status()).
  WorkCompletion wait_ok(std::chrono::milliseconds timeout = std::chrono::seconds(10));

  // Ask for one notification on the CQ's channel at the next completion (or the next
  // solicited / error one). Completions already queued do not count: poll after arming.
  void req_notify(bool solicited_only = false);
  // ibv_ack_cq_events: counted, for symmetry with C.
  void ack_events(unsigned count = 1);
  // Grows or shrinks (not below what is queued) keeping queued completions (ibv_resize_cq).
  void resize(std::uint32_t entries);
  std::uint32_t capacity() const;  // ibv_cq.cqe
  std::uint64_t handle() const;
  client::CompletionQueue& low_level() const { return *impl_; }

 private:
  friend class Context;
  friend class ProtectionDomain;
  explicit CompletionQueue(std::shared_ptr<client::CompletionQueue> impl);
  void attach();
  std::shared_ptr<client::CompletionQueue> impl_;
};

class AddressHandle {
 public:
  AddressHandle(AddressHandle&&) noexcept;
  AddressHandle& operator=(AddressHandle&&) noexcept;
  ~AddressHandle();
  std::uint64_t handle() const;
  client::AddressHandle& low_level() const { return *impl_; }

 private:
  friend class ProtectionDomain;
  explicit AddressHandle(std::shared_ptr<client::AddressHandle> impl);
  std::shared_ptr<client::AddressHandle> impl_;
};

class SharedReceiveQueue {
 public:
  SharedReceiveQueue(SharedReceiveQueue&&) noexcept;
  SharedReceiveQueue& operator=(SharedReceiveQueue&&) noexcept;
  ~SharedReceiveQueue();

  void post_receive(const ReceiveWorkRequest& wr);
  void post_receive(std::span<const ReceiveWorkRequest> wrs);
  // Arms the limit event (IBV_EVENT_SRQ_LIMIT_REACHED when fewer than `limit` WRs remain).
  void arm_limit(std::uint32_t limit);
  void modify(const SrqAttributes& attr, int mask);  // IBV_SRQ_MAX_WR = 1, IBV_SRQ_LIMIT = 2
  SrqAttributes query() const;
  std::uint64_t handle() const;
  client::SharedReceiveQueue& low_level() const { return *impl_; }

 private:
  friend class ProtectionDomain;
  explicit SharedReceiveQueue(std::shared_ptr<client::SharedReceiveQueue> impl);
  std::shared_ptr<client::SharedReceiveQueue> impl_;
};

class QueuePair {
 public:
  QueuePair(QueuePair&&) noexcept;
  QueuePair& operator=(QueuePair&&) noexcept;
  ~QueuePair();

  std::uint32_t qp_num() const;
  QpType type() const;
  QpState state() const;  // as of our last modify (the daemon may since have moved it to ERR)
  QpCapabilities capabilities() const;
  std::uint64_t handle() const;

  // (qp_num, a random first PSN, the port's GID 0): send it to the peer.
  Endpoint local_endpoint() const;

  // The usual walk RESET -> INIT -> RTR -> RTS with sensible defaults:
  // INIT: port 1, P_Key index 0, the responder grants `remote_access` (RC/UC), Q_Key for UD.
  void to_init(std::uint32_t remote_access = access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic,
               std::uint32_t qkey = 0x11111111);
  // RTR: connect to `peer` (RC/UC) at `mtu` (default: the port's active MTU); RC accepts
  // up to 16 outstanding READs/atomics and asks for RNR waits of 12 (0.64 ms). UD ignores peer.
  void to_rtr(const Endpoint& peer, std::optional<Mtu> mtu = std::nullopt);
  // RTS: our first PSN from local_endpoint(); RC: timeout 14 (~67 ms), 7 retries, RNR
  // retry forever (7), up to 16 outstanding READs/atomics.
  void to_rts();
  // Everything by hand (ibv_modify_qp), mask of qp_attr:: bits.
  void modify(const QpAttributes& attr, int mask);
  QpAttributes query(int mask = ~0) const;

  // Posting (ibv_post_send / ibv_post_recv). Throws Error on a refused request; with a
  // list, the requests before it were posted and Error's message says which index failed.
  void post_send(const SendWorkRequest& wr);
  void post_send(std::span<const SendWorkRequest> wrs);
  void post_receive(const ReceiveWorkRequest& wr);
  void post_receive(std::span<const ReceiveWorkRequest> wrs);
  // As post_send, without throwing: 0 or the errno, `posted` = how many went.
  int try_post_send(std::span<const SendWorkRequest> wrs, std::size_t& posted);

  client::QueuePair& low_level() const { return *impl_; }

 private:
  friend class ProtectionDomain;
  QueuePair(std::shared_ptr<client::QueuePair> impl, std::shared_ptr<client::Context> context);
  std::shared_ptr<client::QueuePair> impl_;
  std::shared_ptr<client::Context> context_;
  std::uint32_t first_psn_ = 0;
};

template <typename T>
MemoryRegion ProtectionDomain::register_memory(std::span<T> buffer, std::uint32_t access) {
  return register_memory(std::as_writable_bytes(buffer), access);
}

}  // namespace rrdma::verbs
