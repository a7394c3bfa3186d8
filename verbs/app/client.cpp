// The client library's device and control side: finding vnics, the connection with its
// request/reply matching, open_device with the async-event ring, and the objects that are
// only a handle in the daemon (PD, MR, AH). Rings and posting: client_post.cpp; CQs,
// channels and events: client_cq.cpp.
#include "verbs/app/client.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <system_error>

#include "verbs/app/client_internal.h"
#include "verbs/app/signal_wait.h"

namespace rrdma::verbs::client {

namespace field = control::field;
using control::MessageType;

// ---------------------------------------------------------------------------------------
// Small pieces

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

int UniqueFd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

Result<EventWait> EventWait::create(int socket_fd) {
  EventWait made;
  made.socket_fd_ = socket_fd;
  made.event_fd_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!made.event_fd_.valid()) return {errno, {}};
  made.epoll_ = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
  if (!made.epoll_.valid()) return {errno, {}};
  epoll_event signal{};
  signal.events = EPOLLIN;
  signal.data.fd = made.event_fd_.get();
  if (::epoll_ctl(made.epoll_.get(), EPOLL_CTL_ADD, made.event_fd_.get(), &signal) != 0) return {errno, {}};
  // No EPOLLIN: the replies to control requests must not wake the application. EPOLLHUP
  // and EPOLLERR are always reported.
  epoll_event hangup{};
  hangup.events = 0;
  hangup.data.fd = socket_fd;
  if (::epoll_ctl(made.epoll_.get(), EPOLL_CTL_ADD, socket_fd, &hangup) != 0) return {errno, {}};
  return {0, std::move(made)};
}

int EventWait::wait(int timeout_ms, Woken& woken, std::uint64_t& count) {
  // The application makes its fd non-blocking on fd(), the epoll fd: that is what decides.
  const int flags = ::fcntl(epoll_.get(), F_GETFL);
  const bool non_blocking = flags >= 0 && (flags & O_NONBLOCK) != 0;
  if (!non_blocking && timeout_ms < 0) return sleep(woken, count);
  const int timeout = non_blocking ? 0 : timeout_ms;
  for (;;) {
    epoll_event ready[2];
    const int n = ::epoll_wait(epoll_.get(), ready, 2, timeout);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return non_blocking ? EAGAIN : ETIMEDOUT;
    bool gone = false;
    for (int i = 0; i < n; ++i) gone = gone || ready[i].data.fd == socket_fd_;
    if (take(gone, woken, count)) return 0;
    // Another reader took the count first: wait again.
  }
}

// As a kernel provider's read(2) of the channel: a signal handler without SA_RESTART ends
// the sleep with EINTR, one with SA_RESTART does not (signal_wait.h).
int EventWait::sleep(Woken& woken, std::uint64_t& count) {
  for (;;) {
    std::array<pollfd, 2> fds{{{event_fd_.get(), POLLIN, 0}, {socket_fd_, 0, 0}}};
    if (const int error = sleep_as_read(fds); error != 0) return error;
    if (take(fds[1].revents != 0, woken, count)) return 0;
  }
}

// A signal the daemon sent before it died still counts: its events come first.
bool EventWait::take(bool daemon_gone, Woken& woken, std::uint64_t& count) {
  if (::read(event_fd_.get(), &count, sizeof(count)) == static_cast<ssize_t>(sizeof(count))) {
    woken = Woken::Signalled;
    return true;
  }
  if (!daemon_gone) return false;
  count = 0;
  woken = Woken::DaemonGone;
  return true;
}

std::optional<std::uint32_t> ring_capacity_for(std::uint32_t entries) {
  if (entries > kMaxRingCapacity) return std::nullopt;
  return std::bit_ceil(std::max<std::uint32_t>(entries, 1));
}

RingGeometry send_ring_geometry(std::uint32_t capacity) { return {capacity, sizeof(SendWqe)}; }
RingGeometry recv_ring_geometry(std::uint32_t capacity) { return {capacity, sizeof(RecvWqe)}; }
RingGeometry cq_ring_geometry(std::uint32_t capacity) { return {capacity, sizeof(Cqe)}; }
RingGeometry event_ring_geometry() { return {kEventRingEntries, sizeof(AsyncEventEntry)}; }

int make_ring(const char* name, RingGeometry geometry, SharedRegion& out) {
  if (!geometry.valid()) return EINVAL;
  try {
    out = SharedRegion::create(name, geometry.region_size());
  } catch (const std::system_error& error) {
    return error.code().value() != 0 ? error.code().value() : ENOMEM;
  }
  return format_ring(out.bytes(), geometry) == RingError::None ? 0 : EINVAL;
}

int status_errno(std::uint64_t status) {
  // A status is a positive errno; anything else is a daemon speaking nonsense.
  if (status > 4095) return EPROTO;
  return static_cast<int>(status);
}

std::uint32_t handle_word(std::uint64_t word) { return static_cast<std::uint32_t>(word); }

void put_gid(control::Message& message, std::size_t high, std::size_t low, const Gid& gid) {
  message.words[high] = load_be64(ByteSpan(gid.bytes.data(), gid.bytes.size()), 0);
  message.words[low] = load_be64(ByteSpan(gid.bytes.data(), gid.bytes.size()), 8);
}

Gid take_gid(const control::Message& message, std::size_t high, std::size_t low) {
  Gid gid;
  MutableByteSpan bytes(gid.bytes.data(), gid.bytes.size());
  store_be64(bytes, 0, message.words[high]);
  store_be64(bytes, 8, message.words[low]);
  return gid;
}

// ---------------------------------------------------------------------------------------
// Devices

std::string run_directory() {
  if (const char* dir = std::getenv("RRDMA_RUN_DIR"); dir != nullptr && *dir != '\0') return dir;
  return "/run/rrdma";
}

namespace {

constexpr std::string_view kSocketSuffix = ".sock";

// 0 and a connected socket, or ENODEV (nothing listens there) / EACCES.
int connect_to(const std::string& path, UniqueFd& out) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) return ENODEV;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  UniqueFd socket(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!socket.valid()) return errno;
  if (::connect(socket.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return errno == EACCES || errno == EPERM ? EACCES : ENODEV;
  }
  out = std::move(socket);
  return 0;
}

bool valid_device_name(std::string_view name) {
  return !name.empty() && name.size() < 64 && name.find('/') == std::string_view::npos && name != "." &&
         name != "..";
}

}  // namespace

std::vector<DeviceEntry> list_devices() {
  std::vector<DeviceEntry> devices;
  const std::string dir = run_directory();
  DIR* listing = ::opendir(dir.c_str());
  if (listing == nullptr) return devices;
  while (const dirent* entry = ::readdir(listing)) {
    const std::string_view file(entry->d_name);
    if (file.size() <= kSocketSuffix.size() || !file.ends_with(kSocketSuffix)) continue;
    DeviceEntry device{std::string(file.substr(0, file.size() - kSocketSuffix.size())), dir + "/" + std::string(file)};
    UniqueFd probe;
    // A socket file whose daemon died stays behind until the next `up` or `down`: skip it.
    if (connect_to(device.socket_path, probe) == 0) devices.push_back(std::move(device));
  }
  ::closedir(listing);
  std::sort(devices.begin(), devices.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return devices;
}

// ---------------------------------------------------------------------------------------
// Context

Context::Context(UniqueFd socket, std::string name) : name_(std::move(name)), socket_(std::move(socket)) {}

Context::~Context() = default;

Result<std::shared_ptr<Context>> Context::open(std::string_view name) {
  if (!valid_device_name(name)) return {ENODEV, nullptr};
  UniqueFd socket;
  const std::string path = run_directory() + "/" + std::string(name) + std::string(kSocketSuffix);
  if (const int error = connect_to(path, socket); error != 0) return {error, nullptr};
  return open_socket(socket.release(), std::string(name));
}

Result<std::shared_ptr<Context>> Context::open_socket(int socket_fd, std::string name) {
  std::shared_ptr<Context> context(new Context(UniqueFd(socket_fd), std::move(name)));
  if (const int error = context->handshake(); error != 0) return {error, nullptr};
  return {0, std::move(context)};
}

// open_device: the context's event ring and eventfd travel with it (VERBS_DATAPATH.md).
int Context::handshake() {
  const RingGeometry geometry = event_ring_geometry();
  if (const int error = make_ring("rrdma-events", geometry, event_region_); error != 0) return error;
  auto event_wait = EventWait::create(socket_.get());
  if (!event_wait.ok()) return event_wait.error;
  event_wait_ = std::move(event_wait.value);

  // The daemon reaches our memory only through this handle (docs/SECURITY.md). It is bound to
  // this address space: after an exec, or once the process is gone, it reaches nothing.
  const UniqueFd memory(::open("/proc/self/mem", O_RDWR | O_CLOEXEC));
  if (!memory.valid()) return errno;

  control::Message request = new_request(MessageType::OpenDevice);
  request.words[field::kAbiVersion] = kAbiVersion;
  request.words[field::kEventRingBytes] = geometry.region_size();
  const int fds[] = {event_region_.fd(), event_wait_.event_fd(), memory.get()};
  control::Message reply;
  if (const int error = call(request, fds, reply); error != 0) return error;
  handle_ = handle_word(reply.words[field::kContextHandle]);
  node_guid_ = reply.words[field::kNodeGuid];
  event_ring_.emplace(event_region_.bytes(), geometry);
  return event_ring_->error() == RingError::None ? 0 : EIO;
}

control::Message Context::new_request(MessageType type) { return control::make_request(type, 0); }

namespace {

// The daemon's end of the connection is closed: it died, or closed us. A peer that is only
// slow is not hung up.
bool hung_up(int socket_fd) {
  pollfd connection{socket_fd, 0, 0};
  return ::poll(&connection, 1, 0) == 1 && (connection.revents & (POLLHUP | POLLERR)) != 0;
}

std::int64_t coarse_now_ms() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1'000'000;
}

int io_errno(control::IoError error) {
  switch (error) {
    case control::IoError::None: return 0;
    case control::IoError::WouldBlock: return EAGAIN;
    case control::IoError::PeerClosed: return EIO;
    case control::IoError::System: return EIO;
    default: return EPROTO;
  }
}

}  // namespace

int Context::call(const control::Message& request, std::span<const int> fds, control::Message& reply) {
  std::lock_guard lock(control_mutex_);
  // After a lost or mismatched reply the stream cannot be trusted to pair requests with
  // replies again; the daemon tears everything down when we close anyway.
  if (broken_) return EIO;
  control::Message sent = request;
  sent.request_id = next_request_id_++;
  if (const auto error = control::send_message(socket_.get(), sent, fds); error != control::IoError::None) {
    broken_ = true;
    if (hung_up(socket_.get())) note_device_fatal();
    return io_errno(error);
  }
  pollfd waiting{socket_.get(), POLLIN, 0};
  int ready = 0;
  do {
    ready = ::poll(&waiting, 1, kControlTimeoutMs);
  } while (ready < 0 && errno == EINTR);
  if (ready <= 0) {
    broken_ = true;
    return ready == 0 ? ETIMEDOUT : EIO;
  }
  control::Received received = control::receive_message(socket_.get());
  if (received.error != control::IoError::None) {
    broken_ = true;
    if (received.error == control::IoError::PeerClosed || hung_up(socket_.get())) note_device_fatal();
    return io_errno(received.error);
  }
  control::Message& answer = received.message;
  if (!answer.is_reply() || answer.type() != sent.type() || answer.request_id != sent.request_id ||
      answer.words.empty()) {
    broken_ = true;
    return EPROTO;
  }
  const int status = status_errno(answer.words[0]);
  if (status == EPROTO) broken_ = true;
  reply = std::move(answer);
  return status;
}

// The flag is what the data path reads; the async fd and every channel fd are already
// readable, because the kernel reports the hang-up through their epoll sets.
void Context::note_device_fatal() { device_fatal_.store(true, std::memory_order_release); }

bool Context::check_device_fatal() {
  if (device_fatal()) return true;
  const std::int64_t now = coarse_now_ms();
  std::int64_t last = last_liveness_check_ms_.load(std::memory_order_relaxed);
  if (now - last < kLivenessCheckIntervalMs) return false;
  // One thread looks per interval; the others go on.
  if (!last_liveness_check_ms_.compare_exchange_strong(last, now, std::memory_order_relaxed)) return false;
  if (hung_up(socket_.get())) note_device_fatal();
  return device_fatal();
}

int destroy_handle(Context& context, MessageType type, std::uint32_t handle) {
  control::Message request = context.new_request(type);
  request.words[field::kDestroyHandle] = handle;
  control::Message reply;
  return context.call(request, {}, reply);
}

int Context::query_device(DeviceAttributes& out) {
  control::Message request = new_request(MessageType::QueryDevice);
  request.words[field::kQueryDeviceContext] = handle_;
  control::Message reply;
  if (const int error = call(request, {}, reply); error != 0) return error;
  const auto word = [&](std::size_t i) { return static_cast<std::uint32_t>(reply.words[i]); };
  out = {};
  out.node_guid = node_guid_;
  out.max_mr_size = reply.words[field::kMaxMrSize];
  out.page_size_cap = reply.words[field::kPageSizeCap];
  out.max_qp = word(field::kMaxQp);
  out.max_qp_wr = word(field::kMaxQpWr);
  out.device_cap_flags = word(field::kDeviceCapFlags);
  out.max_sge = word(field::kMaxSge);
  out.max_cq = word(field::kMaxCq);
  out.max_cqe = word(field::kMaxCqe);
  out.max_mr = word(field::kMaxMr);
  out.max_pd = word(field::kMaxPd);
  out.max_qp_rd_atom = word(field::kMaxQpRdAtom);
  out.max_qp_init_rd_atom = word(field::kMaxQpInitRdAtom);
  out.atomic_cap = word(field::kAtomicCap);
  out.max_srq = word(field::kMaxSrq);
  out.max_srq_wr = word(field::kMaxSrqWr);
  out.max_srq_sge = word(field::kMaxSrqSge);
  out.max_ah = word(field::kMaxAh);
  out.max_mw = word(field::kMaxMw);
  return 0;
}

int Context::query_port(std::uint8_t port, PortAttributes& out) {
  control::Message request = new_request(MessageType::QueryPort);
  request.words[field::kQueryPortContext] = handle_;
  request.words[field::kPortNum] = port;
  control::Message reply;
  if (const int error = call(request, {}, reply); error != 0) return error;
  const auto mtu = [&](std::size_t i) -> std::optional<verbs::Mtu> {
    const std::uint64_t value = reply.words[i];
    if (value < 1 || value > 5) return std::nullopt;
    return static_cast<verbs::Mtu>(value);
  };
  const auto max_mtu = mtu(field::kMaxMtu);
  const auto active_mtu = mtu(field::kActiveMtu);
  if (!max_mtu || !active_mtu) return EPROTO;
  out = {};
  out.state = static_cast<std::uint32_t>(reply.words[field::kState]);
  out.max_mtu = *max_mtu;
  out.active_mtu = *active_mtu;
  out.gid_tbl_len = static_cast<std::uint32_t>(reply.words[field::kGidTblLen]);
  out.pkey_tbl_len = static_cast<std::uint32_t>(reply.words[field::kPkeyTblLen]);
  out.link_layer = static_cast<std::uint32_t>(reply.words[field::kLinkLayer]);
  return 0;
}

int Context::query_gid(std::uint8_t port, int index, Gid& out) {
  if (index < 0) return EINVAL;
  control::Message request = new_request(MessageType::QueryGid);
  request.words[field::kQueryGidContext] = handle_;
  request.words[field::kGidPort] = port;
  request.words[field::kGidIndex] = static_cast<std::uint64_t>(index);
  control::Message reply;
  if (const int error = call(request, {}, reply); error != 0) return error;
  out = take_gid(reply, field::kGidHigh, field::kGidLow);
  return 0;
}

Result<std::shared_ptr<ProtectionDomain>> Context::alloc_pd() {
  control::Message request = new_request(MessageType::AllocPd);
  request.words[field::kAllocPdContext] = handle_;
  control::Message reply;
  if (const int error = call(request, {}, reply); error != 0) return {error, nullptr};
  return {0, std::make_shared<ProtectionDomain>(shared_from_this(), handle_word(reply.words[field::kHandle]))};
}

// ---------------------------------------------------------------------------------------
// PD, MR, AH

ProtectionDomain::~ProtectionDomain() { destroy(); }

int ProtectionDomain::destroy() {
  if (destroyed_.exchange(true)) return 0;
  const int error = destroy_handle(*context_, MessageType::DeallocPd, handle_);
  if (error != 0 && error != EIO) destroyed_ = false;  // EBUSY: still there, still ours
  return error;
}

Result<std::shared_ptr<MemoryRegion>> ProtectionDomain::register_memory(void* address, std::size_t length,
                                                                        std::uint32_t access,
                                                                        std::optional<std::uint64_t> iova) {
  constexpr std::uint32_t kZeroBased = 1u << 5;  // IBV_ACCESS_ZERO_BASED
  const std::uint64_t base = iova.value_or((access & kZeroBased) != 0 ? 0 : reinterpret_cast<std::uintptr_t>(address));
  control::Message request = context_->new_request(MessageType::RegMr);
  request.words[field::kMrPd] = handle_;
  request.words[field::kMrAddress] = reinterpret_cast<std::uintptr_t>(address);
  request.words[field::kMrLength] = length;
  request.words[field::kMrAccess] = access;
  request.words[field::kMrIova] = base;
  control::Message reply;
  if (const int error = context_->call(request, {}, reply); error != 0) return {error, nullptr};
  const MemoryRegion::Keys keys{handle_word(reply.words[field::kMrHandle]),
                                static_cast<std::uint32_t>(reply.words[field::kMrLkey]),
                                static_cast<std::uint32_t>(reply.words[field::kMrRkey])};
  return {0, std::make_shared<MemoryRegion>(shared_from_this(), address, length, access, base, keys)};
}

Result<std::shared_ptr<AddressHandle>> ProtectionDomain::create_ah(const AhAttributes& attributes) {
  control::Message request = context_->new_request(MessageType::CreateAh);
  request.words[field::kAhPd] = handle_;
  put_gid(request, field::kAhDgidHigh, field::kAhDgidLow, attributes.dgid);
  request.words[field::kAhSgidIndex] = attributes.sgid_index;
  request.words[field::kAhHopLimit] = attributes.hop_limit;
  request.words[field::kAhTrafficClass] = attributes.traffic_class;
  request.words[field::kAhFlowLabel] = attributes.flow_label;
  request.words[field::kAhPortNum] = attributes.port_num;
  control::Message reply;
  if (const int error = context_->call(request, {}, reply); error != 0) return {error, nullptr};
  return {0, std::make_shared<AddressHandle>(shared_from_this(), handle_word(reply.words[field::kHandle]), attributes)};
}

Result<std::shared_ptr<MemoryWindow>> ProtectionDomain::alloc_mw(std::uint32_t type) {
  control::Message request = context_->new_request(MessageType::AllocMw);
  request.words[field::kMwPd] = handle_;
  request.words[field::kMwType] = type;
  control::Message reply;
  if (const int error = context_->call(request, {}, reply); error != 0) return {error, nullptr};
  return {0, std::make_shared<MemoryWindow>(shared_from_this(), handle_word(reply.words[field::kMwHandle]), type,
                                            static_cast<std::uint32_t>(reply.words[field::kMwRkey]))};
}

MemoryWindow::~MemoryWindow() { destroy(); }

int MemoryWindow::destroy() {
  if (destroyed_.exchange(true)) return 0;
  const int error = destroy_handle(pd_->context(), MessageType::DeallocMw, handle_);
  if (error != 0 && error != EIO) destroyed_ = false;
  return error;
}

MemoryRegion::~MemoryRegion() { destroy(); }

int MemoryRegion::reregister(std::uint32_t flags, std::shared_ptr<ProtectionDomain> pd, void* address,
                             std::size_t length, std::uint32_t access) {
  constexpr std::uint32_t kChangeTranslation = 1u << 0, kChangePd = 1u << 1, kChangeAccess = 1u << 2;
  constexpr std::uint32_t kZeroBased = 1u << 5;  // IBV_ACCESS_ZERO_BASED
  if ((flags & kChangePd) != 0 && (pd == nullptr || &pd->context() != &pd_->context())) return EINVAL;
  control::Message request = pd_->context().new_request(MessageType::ReregMr);
  request.words[field::kReregMr] = keys_.handle;
  request.words[field::kReregFlags] = flags;
  request.words[field::kReregPd] = (flags & kChangePd) != 0 ? pd->handle() : 0;
  request.words[field::kReregAddress] = reinterpret_cast<std::uintptr_t>(address);
  request.words[field::kReregLength] = length;
  request.words[field::kReregAccess] = access;
  control::Message reply;
  if (const int error = pd_->context().call(request, {}, reply); error != 0) return error;
  if ((flags & kChangePd) != 0) pd_ = std::move(pd);
  if ((flags & kChangeAccess) != 0) access_ = access;
  if ((flags & kChangeTranslation) != 0) {
    address_ = address;
    length_ = length;
    iova_ = (access_ & kZeroBased) != 0 ? 0 : reinterpret_cast<std::uintptr_t>(address);
  }
  keys_.lkey = static_cast<std::uint32_t>(reply.words[field::kReregLkey]);
  keys_.rkey = static_cast<std::uint32_t>(reply.words[field::kReregRkey]);
  return 0;
}

int MemoryRegion::destroy() {
  if (destroyed_.exchange(true)) return 0;
  const int error = destroy_handle(pd_->context(), MessageType::DeregMr, keys_.handle);
  if (error != 0 && error != EIO) destroyed_ = false;
  return error;
}

AddressHandle::~AddressHandle() { destroy(); }

int AddressHandle::destroy() {
  if (destroyed_.exchange(true)) return 0;
  const int error = destroy_handle(pd_->context(), MessageType::DestroyAh, handle_);
  if (error != 0 && error != EIO) destroyed_ = false;
  return error;
}

}  // namespace rrdma::verbs::client
