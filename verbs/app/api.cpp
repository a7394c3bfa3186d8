// rrdma::verbs (verbs/app/api.h) over the client library (verbs/app/client.h): turning errno
// results into exceptions with a sentence, host-order immediates into the network-order
// value verbs carries, and the learner's helpers (to_init/to_rtr/to_rts, endpoints).
#include "verbs/app/api.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>

#include "verbs/app/client.h"

namespace rrdma::verbs {

static_assert(sizeof(WorkCompletion) == sizeof(Cqe) && std::is_trivially_copyable_v<WorkCompletion>);
static_assert(std::is_standard_layout_v<WorkCompletion>);

namespace {

[[noreturn]] void fail(int error, const std::string& what) {
  throw Error(error, what + ": " + std::strerror(error));
}

void check(int error, const std::string& what) {
  if (error != 0) fail(error, what);
}

template <typename T>
T take(client::Result<T> result, const std::string& what) {
  check(result.error, what);
  return std::move(result.value);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Codes

const char* to_string(WcStatus status) {
  return rocev2::name(status).data();  // the names are literals: NUL-terminated
}

const char* to_string(WcOpcode opcode) {
  return rocev2::name(opcode).data();
}

const char* to_string(QpState state) {
  return rocev2::name(state).data();
}

const char* to_string(EventType type) {
  return rocev2::name(type).data();
}

const char* to_string(Opcode opcode) {
  return rocev2::name(opcode).data();
}

int mtu_bytes(Mtu mtu) {
  const auto code = static_cast<std::uint32_t>(mtu);
  return code >= 1 && code <= 5 ? 128 << code : 0;
}

Error::Error(int error_number, const std::string& message)
    : std::runtime_error(message), error_number_(error_number) {}

Error::Error(WcStatus status, const std::string& message)
    : std::runtime_error(message), error_number_(EIO), wc_status_(status) {}

// ---------------------------------------------------------------------------------------
// Values

std::string Gid::to_string() const {
  char text[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET6, bytes.data(), text, sizeof(text));
  return text;
}

std::optional<Gid> Gid::parse(std::string_view text) {
  const std::string copy(text);
  Gid gid;
  if (::inet_pton(AF_INET6, copy.c_str(), gid.bytes.data()) == 1) return gid;
  in_addr v4{};
  if (::inet_pton(AF_INET, copy.c_str(), &v4) == 1) return from_ipv4(ntohl(v4.s_addr));
  return std::nullopt;
}

// RoCE v2 over IPv4: the IPv4-mapped IPv6 address (RFC 4291 section 2.5.5.2).
Gid Gid::from_ipv4(std::uint32_t address_host_order) {
  Gid gid;
  gid.bytes[10] = 0xFF;
  gid.bytes[11] = 0xFF;
  for (int i = 0; i < 4; ++i) gid.bytes[12 + i] = static_cast<std::uint8_t>(address_host_order >> (24 - 8 * i));
  return gid;
}

std::string Endpoint::encode() const {
  return std::to_string(qpn) + " " + std::to_string(psn) + " " + gid.to_string();
}

std::optional<Endpoint> Endpoint::decode(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::uint64_t qpn = 0, psn = 0;
  std::string gid_text;
  if (!(in >> qpn >> psn >> gid_text) || qpn > 0xFFFFFF || psn > 0xFFFFFF) return std::nullopt;
  const auto gid = Gid::parse(gid_text);
  if (!gid) return std::nullopt;
  return Endpoint{static_cast<std::uint32_t>(qpn), static_cast<std::uint32_t>(psn), *gid};
}

std::string RemoteBuffer::encode() const {
  return std::to_string(addr) + " " + std::to_string(rkey) + " " + std::to_string(length);
}

std::optional<RemoteBuffer> RemoteBuffer::decode(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::uint64_t addr = 0, rkey = 0, length = 0;
  if (!(in >> addr >> rkey >> length) || rkey > 0xFFFFFFFF) return std::nullopt;
  return RemoteBuffer{addr, static_cast<std::uint32_t>(rkey), length};
}

SendWorkRequest SendWorkRequest::send(std::uint64_t wr_id, std::span<const Sge> sges) {
  SendWorkRequest wr;
  wr.wr_id = wr_id;
  wr.opcode = Opcode::Send;
  wr.sg_list = sges;
  return wr;
}

SendWorkRequest SendWorkRequest::write(std::uint64_t wr_id, std::span<const Sge> sges, const RemoteBuffer& to,
                                       std::uint64_t offset) {
  SendWorkRequest wr = send(wr_id, sges);
  wr.opcode = Opcode::RdmaWrite;
  wr.remote_addr = to.addr + offset;
  wr.rkey = to.rkey;
  return wr;
}

SendWorkRequest SendWorkRequest::read(std::uint64_t wr_id, std::span<const Sge> sges, const RemoteBuffer& from,
                                      std::uint64_t offset) {
  SendWorkRequest wr = write(wr_id, sges, from, offset);
  wr.opcode = Opcode::RdmaRead;
  return wr;
}

SendWorkRequest SendWorkRequest::compare_and_swap(std::uint64_t wr_id, const Sge& result, const RemoteBuffer& at,
                                                  std::uint64_t compare, std::uint64_t swap_value,
                                                  std::uint64_t offset) {
  SendWorkRequest wr = write(wr_id, std::span<const Sge>(&result, 1), at, offset);
  wr.opcode = Opcode::AtomicCmpSwp;
  wr.compare_add = compare;
  wr.swap = swap_value;
  return wr;
}

SendWorkRequest SendWorkRequest::fetch_and_add(std::uint64_t wr_id, const Sge& result, const RemoteBuffer& at,
                                               std::uint64_t add, std::uint64_t offset) {
  SendWorkRequest wr = write(wr_id, std::span<const Sge>(&result, 1), at, offset);
  wr.opcode = Opcode::AtomicFetchAdd;
  wr.compare_add = add;
  return wr;
}

std::uint32_t WorkCompletion::imm_data() const { return ntohl(imm_or_inv_); }

std::string WorkCompletion::describe() const {
  std::string text = "wr_id " + std::to_string(wr_id_) + ": " + to_string(opcode());
  if (ok()) return text + " completed, " + std::to_string(byte_len_) + " bytes";
  return text + " failed: " + status_string() + " (status " + std::to_string(status_) + ", vendor error " +
         std::to_string(vendor_err_) + ")";
}

std::string AsyncEvent::describe() const {
  return std::string(to_string(type)) + " (element " + std::to_string(element) + ")";
}

// ---------------------------------------------------------------------------------------
// Devices and contexts

DeviceList::DeviceList() {
  for (auto& entry : client::list_devices()) devices_.push_back({std::move(entry.name), std::move(entry.socket_path)});
}

Context::Context(std::shared_ptr<client::Context> impl) : impl_(std::move(impl)) {}
Context::Context(Context&&) noexcept = default;
Context& Context::operator=(Context&&) noexcept = default;
Context::~Context() = default;

Context Context::open(std::string_view device_name) {
  const std::string name(device_name);
  auto opened = client::Context::open(name);
  if (opened.error == ENODEV) {
    throw Error(ENODEV, "open device " + name + ": no vnic of that name runs (see `rrdma-vnic list`, and " +
                            client::run_directory() + ")");
  }
  return Context(take(std::move(opened), "open device " + name));
}

const std::string& Context::device_name() const { return impl_->name(); }

DeviceAttributes Context::query_device() const {
  DeviceAttributes out;
  check(impl_->query_device(out), "query_device");
  return out;
}

PortAttributes Context::query_port(std::uint8_t port) const {
  PortAttributes out;
  check(impl_->query_port(port, out), "query_port " + std::to_string(port));
  return out;
}

Gid Context::query_gid(std::uint8_t port, int index) const {
  Gid out;
  check(impl_->query_gid(port, index, out), "query_gid");
  return out;
}

ProtectionDomain Context::alloc_pd() { return ProtectionDomain(take(impl_->alloc_pd(), "alloc_pd")); }

CompletionChannel Context::create_completion_channel() {
  return CompletionChannel(take(impl_->create_comp_channel(), "create_comp_channel"));
}

CompletionQueue Context::create_cq(std::uint32_t entries, CompletionChannel* channel) {
  std::shared_ptr<client::CompletionChannel> low_channel = channel ? channel->impl_ : nullptr;
  return CompletionQueue(take(impl_->create_cq(entries, std::move(low_channel)),
                              "create_cq of " + std::to_string(entries) + " entries"));
}

namespace {

std::optional<AsyncEvent> event_or_nothing(int error, const AsyncEventEntry& entry, const char* what) {
  if (error == EAGAIN || error == ETIMEDOUT) return std::nullopt;
  check(error, what);
  return AsyncEvent{static_cast<EventType>(entry.event_type), entry.element};
}

}  // namespace

std::optional<AsyncEvent> Context::get_async_event() {
  AsyncEventEntry entry{};
  return event_or_nothing(impl_->get_async_event(entry), entry, "get_async_event");
}

std::optional<AsyncEvent> Context::try_get_async_event() {
  AsyncEventEntry entry{};
  return event_or_nothing(impl_->try_get_async_event(entry), entry, "get_async_event");
}

int Context::async_fd() const { return impl_->async_fd(); }

// ---------------------------------------------------------------------------------------
// PD, MR, AH

ProtectionDomain::ProtectionDomain(std::shared_ptr<client::ProtectionDomain> impl) : impl_(std::move(impl)) {}
ProtectionDomain::ProtectionDomain(ProtectionDomain&&) noexcept = default;
ProtectionDomain& ProtectionDomain::operator=(ProtectionDomain&&) noexcept = default;
ProtectionDomain::~ProtectionDomain() = default;

std::uint64_t ProtectionDomain::handle() const { return impl_->handle(); }

MemoryRegion ProtectionDomain::register_memory(std::span<std::byte> buffer, std::uint32_t access_flags) {
  return MemoryRegion(take(impl_->register_memory(buffer.data(), buffer.size(), access_flags),
                           "reg_mr of " + std::to_string(buffer.size()) + " bytes"));
}

QueuePair ProtectionDomain::create_qp(QpType type, CompletionQueue& cq, const QpCapabilities& caps) {
  return create_qp(type, cq, cq, caps);
}

QueuePair ProtectionDomain::create_qp(QpType type, CompletionQueue& send_cq, CompletionQueue& recv_cq,
                                      const QpCapabilities& caps, SharedReceiveQueue* srq, bool signal_all) {
  client::QpInit init;
  init.type = type;
  init.send_cq = send_cq.impl_;
  init.recv_cq = recv_cq.impl_;
  init.srq = srq ? srq->impl_ : nullptr;
  init.cap = caps;
  init.sq_sig_all = signal_all;
  return QueuePair(take(impl_->create_qp(init), "create_qp"), impl_->context().shared_from_this());
}

SharedReceiveQueue ProtectionDomain::create_srq(std::uint32_t max_wr, std::uint32_t max_sge, std::uint32_t limit) {
  return SharedReceiveQueue(take(impl_->create_srq(max_wr, max_sge, limit), "create_srq"));
}

AddressHandle ProtectionDomain::create_ah(const Gid& destination, std::uint8_t hop_limit, std::uint8_t sgid_index) {
  client::AhAttributes attributes;
  attributes.dgid = destination;
  attributes.hop_limit = hop_limit;
  attributes.sgid_index = sgid_index;
  return AddressHandle(take(impl_->create_ah(attributes), "create_ah to " + destination.to_string()));
}

MemoryRegion::MemoryRegion(std::shared_ptr<client::MemoryRegion> impl) : impl_(std::move(impl)) {}
MemoryRegion::MemoryRegion(MemoryRegion&&) noexcept = default;
MemoryRegion& MemoryRegion::operator=(MemoryRegion&&) noexcept = default;
MemoryRegion::~MemoryRegion() = default;

std::uint32_t MemoryRegion::lkey() const { return impl_->lkey(); }
std::uint32_t MemoryRegion::rkey() const { return impl_->rkey(); }
std::span<std::byte> MemoryRegion::bytes() const {
  return {static_cast<std::byte*>(impl_->address()), impl_->length()};
}
std::uint64_t MemoryRegion::address() const { return reinterpret_cast<std::uintptr_t>(impl_->address()); }
std::uint64_t MemoryRegion::length() const { return impl_->length(); }
std::uint64_t MemoryRegion::handle() const { return impl_->handle(); }

Sge MemoryRegion::sge(std::uint64_t offset, std::uint32_t length_bytes) const {
  if (offset > impl_->length()) throw Error(EINVAL, "MemoryRegion::sge: offset past the end of the MR");
  const std::uint64_t rest = impl_->length() - offset;
  if (length_bytes > rest) throw Error(EINVAL, "MemoryRegion::sge: range past the end of the MR");
  const std::uint64_t length = length_bytes != 0 ? length_bytes : rest;
  if (length > 0xFFFFFFFFu) throw Error(EINVAL, "MemoryRegion::sge: an SGE holds at most 4 GiB - 1");
  return Sge{address() + offset, static_cast<std::uint32_t>(length), lkey()};
}

RemoteBuffer MemoryRegion::remote() const { return RemoteBuffer{address(), rkey(), length()}; }

AddressHandle::AddressHandle(std::shared_ptr<client::AddressHandle> impl) : impl_(std::move(impl)) {}
AddressHandle::AddressHandle(AddressHandle&&) noexcept = default;
AddressHandle& AddressHandle::operator=(AddressHandle&&) noexcept = default;
AddressHandle::~AddressHandle() = default;
std::uint64_t AddressHandle::handle() const { return impl_->handle(); }

// ---------------------------------------------------------------------------------------
// Channels and CQs

CompletionChannel::CompletionChannel(std::shared_ptr<client::CompletionChannel> impl) : impl_(std::move(impl)) {}
CompletionChannel::CompletionChannel(CompletionChannel&&) noexcept = default;
CompletionChannel& CompletionChannel::operator=(CompletionChannel&&) noexcept = default;
CompletionChannel::~CompletionChannel() = default;

int CompletionChannel::fd() const { return impl_->fd(); }

namespace {

// The API object of a low-level CQ that fired (user_context), or nullptr when the
// application already dropped its handle.
CompletionQueue* next_event(client::CompletionChannel& channel, int timeout_ms) {
  for (;;) {
    std::shared_ptr<client::CompletionQueue> fired;
    const int error = channel.get_cq_event(fired, timeout_ms);
    if (error == EAGAIN || error == ETIMEDOUT) return nullptr;
    check(error, "get_cq_event");
    if (auto* owner = static_cast<CompletionQueue*>(fired->user_context.load())) return owner;
  }
}

}  // namespace

CompletionQueue* CompletionChannel::get_event() { return next_event(*impl_, -1); }

CompletionQueue* CompletionChannel::get_event(std::chrono::milliseconds timeout) {
  return next_event(*impl_, static_cast<int>(std::max<std::int64_t>(0, timeout.count())));
}

CompletionQueue::CompletionQueue(std::shared_ptr<client::CompletionQueue> impl) : impl_(std::move(impl)) { attach(); }

CompletionQueue::CompletionQueue(CompletionQueue&& other) noexcept : impl_(std::move(other.impl_)) { attach(); }

CompletionQueue& CompletionQueue::operator=(CompletionQueue&& other) noexcept {
  if (this != &other) {
    if (impl_) impl_->user_context = nullptr;
    impl_ = std::move(other.impl_);
    attach();
  }
  return *this;
}

CompletionQueue::~CompletionQueue() {
  if (impl_) impl_->user_context = nullptr;
}

void CompletionQueue::attach() {
  if (impl_) impl_->user_context = this;
}

std::size_t CompletionQueue::poll(std::span<WorkCompletion> out) {
  // WorkCompletion and Cqe are both struct ibv_wc's bytes; copy through a small batch
  // rather than alias one as the other.
  constexpr std::size_t kBatch = 16;
  Cqe batch[kBatch];
  std::size_t taken = 0;
  while (taken < out.size()) {
    const std::size_t want = std::min(kBatch, out.size() - taken);
    const int got = impl_->poll(std::span<Cqe>(batch, want));
    if (got < 0) fail(-got, "poll_cq");
    std::memcpy(static_cast<void*>(out.data() + taken), batch, static_cast<std::size_t>(got) * sizeof(Cqe));
    taken += static_cast<std::size_t>(got);
    if (static_cast<std::size_t>(got) < want) break;
  }
  return taken;
}

std::optional<WorkCompletion> CompletionQueue::poll_one() {
  WorkCompletion wc;
  if (poll(std::span<WorkCompletion>(&wc, 1)) == 1) return wc;
  return std::nullopt;
}

std::optional<WorkCompletion> CompletionQueue::wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (unsigned spins = 0;; ++spins) {
    if (auto wc = poll_one()) return wc;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    // Spin briefly (a completion is often microseconds away), then stop burning the CPU
    // the daemon needs to produce it.
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    else std::this_thread::yield();
  }
}

WorkCompletion CompletionQueue::wait_ok(std::chrono::milliseconds timeout) {
  auto wc = wait(timeout);
  if (!wc) throw Error(ETIMEDOUT, "no completion within " + std::to_string(timeout.count()) + " ms");
  if (!wc->ok()) throw Error(wc->status(), wc->describe());
  return *wc;
}

void CompletionQueue::req_notify(bool solicited_only) { check(impl_->req_notify(solicited_only), "req_notify_cq"); }

void CompletionQueue::ack_events(unsigned) {
  // Nothing to release: the client library keeps no per-event state (ibv_ack_cq_events
  // exists so that destroy can wait for in-flight events in the kernel's design).
}

void CompletionQueue::resize(std::uint32_t entries) {
  check(impl_->resize(entries), "resize_cq to " + std::to_string(entries));
}

std::uint32_t CompletionQueue::capacity() const { return impl_->capacity(); }
std::uint64_t CompletionQueue::handle() const { return impl_->handle(); }

// ---------------------------------------------------------------------------------------
// SRQ

SharedReceiveQueue::SharedReceiveQueue(std::shared_ptr<client::SharedReceiveQueue> impl) : impl_(std::move(impl)) {}
SharedReceiveQueue::SharedReceiveQueue(SharedReceiveQueue&&) noexcept = default;
SharedReceiveQueue& SharedReceiveQueue::operator=(SharedReceiveQueue&&) noexcept = default;
SharedReceiveQueue::~SharedReceiveQueue() = default;

namespace {

client::RecvWr to_client(const ReceiveWorkRequest& wr) { return client::RecvWr{wr.wr_id, wr.sg_list}; }

template <typename Batch>
void post_receives(Batch batch, std::span<const ReceiveWorkRequest> wrs, const char* what) {
  for (std::size_t i = 0; i < wrs.size(); ++i) {
    if (const int error = batch.push(to_client(wrs[i])); error != 0) {
      fail(error, std::string(what) + " (request " + std::to_string(i) + ", wr_id " + std::to_string(wrs[i].wr_id) +
                      ")");
    }
  }
}

}  // namespace

void SharedReceiveQueue::post_receive(const ReceiveWorkRequest& wr) { post_receive(std::span(&wr, 1)); }

void SharedReceiveQueue::post_receive(std::span<const ReceiveWorkRequest> wrs) {
  post_receives(impl_->begin_recv(), wrs, "post_srq_recv");
}

void SharedReceiveQueue::arm_limit(std::uint32_t limit) {
  SrqAttributes attr;
  attr.srq_limit = limit;
  modify(attr, 2 /* IBV_SRQ_LIMIT */);
}

void SharedReceiveQueue::modify(const SrqAttributes& attr, int mask) { check(impl_->modify(attr, mask), "modify_srq"); }

SrqAttributes SharedReceiveQueue::query() const {
  SrqAttributes out;
  check(impl_->query(out), "query_srq");
  return out;
}

std::uint64_t SharedReceiveQueue::handle() const { return impl_->handle(); }

// ---------------------------------------------------------------------------------------
// QP

namespace {

std::uint32_t random_psn() {
  std::random_device device;
  return device() & 0xFFFFFF;
}

}  // namespace

QueuePair::QueuePair(std::shared_ptr<client::QueuePair> impl, std::shared_ptr<client::Context> context)
    : impl_(std::move(impl)), context_(std::move(context)), first_psn_(random_psn()) {}
QueuePair::QueuePair(QueuePair&&) noexcept = default;
QueuePair& QueuePair::operator=(QueuePair&&) noexcept = default;
QueuePair::~QueuePair() = default;

std::uint32_t QueuePair::qp_num() const { return impl_->qp_num(); }
QpType QueuePair::type() const { return impl_->type(); }
QpState QueuePair::state() const { return impl_->state(); }
QpCapabilities QueuePair::capabilities() const { return impl_->capabilities(); }
std::uint64_t QueuePair::handle() const { return impl_->handle(); }

Endpoint QueuePair::local_endpoint() const {
  Gid gid;
  check(context_->query_gid(1, 0, gid), "query_gid");
  return Endpoint{qp_num(), first_psn_, gid};
}

void QueuePair::modify(const QpAttributes& attr, int mask) {
  const int error = impl_->modify(attr, mask);
  if (error != 0) {
    fail(error, std::string("modify_qp ") + to_string(impl_->state()) + " -> " +
                    ((mask & qp_attr::kState) ? to_string(attr.state) : "(same state)") + " (mask 0x" +
                    [&] {
                      std::ostringstream hex;
                      hex << std::hex << mask;
                      return hex.str();
                    }() +
                    ")");
  }
}

QpAttributes QueuePair::query(int mask) const {
  QpAttributes out;
  check(impl_->query(mask, out), "query_qp");
  return out;
}

void QueuePair::to_init(std::uint32_t remote_access, std::uint32_t qkey) {
  QpAttributes attr;
  attr.state = QpState::Init;
  attr.pkey_index = 0;
  attr.port_num = 1;
  int mask = qp_attr::kState | qp_attr::kPkeyIndex | qp_attr::kPort;
  if (type() == QpType::Ud) {
    attr.qkey = qkey;
    mask |= qp_attr::kQkey;
  } else {
    attr.access_flags = remote_access;
    mask |= qp_attr::kAccessFlags;
  }
  modify(attr, mask);
}

void QueuePair::to_rtr(const Endpoint& peer, std::optional<Mtu> mtu) {
  QpAttributes attr;
  attr.state = QpState::Rtr;
  int mask = qp_attr::kState;
  if (type() != QpType::Ud) {
    PortAttributes port;
    if (!mtu) check(context_->query_port(1, port), "query_port");
    attr.path_mtu = mtu.value_or(port.active_mtu);
    attr.dest_qp_num = peer.qpn;
    attr.rq_psn = peer.psn;
    attr.dgid = peer.gid;
    attr.sgid_index = 0;
    attr.hop_limit = 64;
    mask |= qp_attr::kAv | qp_attr::kPathMtu | qp_attr::kDestQpn | qp_attr::kRqPsn;
  }
  if (type() == QpType::Rc) {
    attr.max_dest_rd_atomic = 16;
    attr.min_rnr_timer = 12;
    mask |= qp_attr::kMaxDestRdAtomic | qp_attr::kMinRnrTimer;
  }
  modify(attr, mask);
}

void QueuePair::to_rts() {
  QpAttributes attr;
  attr.state = QpState::Rts;
  attr.sq_psn = first_psn_;
  int mask = qp_attr::kState | qp_attr::kSqPsn;
  if (type() == QpType::Rc) {
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.max_rd_atomic = 16;
    mask |= qp_attr::kTimeout | qp_attr::kRetryCnt | qp_attr::kRnrRetry | qp_attr::kMaxQpRdAtomic;
  }
  modify(attr, mask);
}

namespace {

client::SendWr to_client(const SendWorkRequest& wr) {
  client::SendWr out;
  out.wr_id = wr.wr_id;
  out.sg_list = wr.sg_list;
  out.opcode = static_cast<std::uint32_t>(wr.opcode);
  out.send_flags = wr.flags;
  out.imm_data = htonl(wr.imm_data);  // verbs carries the immediate in network byte order
  out.invalidate_rkey = wr.invalidate_rkey;
  out.remote_addr = wr.remote_addr;
  out.rkey = wr.rkey;
  out.compare_add = wr.compare_add;
  out.swap = wr.swap;
  out.ah = wr.ah ? &wr.ah->low_level() : nullptr;
  out.remote_qpn = wr.remote_qpn;
  out.remote_qkey = wr.remote_qkey;
  return out;
}

}  // namespace

int QueuePair::try_post_send(std::span<const SendWorkRequest> wrs, std::size_t& posted) {
  client::SendBatch batch = impl_->begin_send();
  posted = 0;
  for (const SendWorkRequest& wr : wrs) {
    if (const int error = batch.push(to_client(wr)); error != 0) return error;
    ++posted;
  }
  return 0;
}

void QueuePair::post_send(const SendWorkRequest& wr) { post_send(std::span(&wr, 1)); }

void QueuePair::post_send(std::span<const SendWorkRequest> wrs) {
  std::size_t posted = 0;
  if (const int error = try_post_send(wrs, posted); error != 0) {
    const SendWorkRequest& bad = wrs[posted];
    std::string why;
    if (error == EINVAL && client::send_state_error(state()) != 0) {
      why = ", the QP is in " + std::string(to_string(state())) + " (sending needs RTS)";
    } else if (error == ENOMEM) {
      why = ", the send queue is full (poll the CQ)";
    } else if (error == EIO && impl_->pd().context().device_fatal()) {
      why = ", the vnic's daemon is gone";
    }
    fail(error, "post_send " + std::string(to_string(bad.opcode)) + " (request " + std::to_string(posted) +
                    ", wr_id " + std::to_string(bad.wr_id) + why + ")");
  }
}

void QueuePair::post_receive(const ReceiveWorkRequest& wr) { post_receive(std::span(&wr, 1)); }

void QueuePair::post_receive(std::span<const ReceiveWorkRequest> wrs) {
  post_receives(impl_->begin_recv(), wrs, "post_recv");
}

}  // namespace rrdma::verbs
