#include "vnic/daemon.h"

#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <system_error>

#include "rocev2/gsi.h"
#include "stack/interface.h"
#include "verbs/device/device_caps.h"
#include "verbs/device/nic.h"
#include "verbs/device/ucma_service.h"
#include "vnic/capture.h"
#include "vnic/control.h"
#include "vnic/event_loop.h"
#include "vnic/external_changes.h"
#include "vnic/link.h"
#include "vnic/ports/netdev_port.h"
#include "vnic/report.h"
#include "vnic/ports/roce_port.h"
#include "vnic/tap.h"
#include "vnic/telemetry.h"

namespace rrdma::vnic {
namespace {

constexpr std::size_t kEthernetOverhead = 14 + 4;  // header and one 802.1Q tag; no FCS on a TAP
// Frames the kernel queues for the daemon on its TAP (the TAP's txqueuelen; tun's default
// is 500), and the loop's receive buffers. A peer's READ response or UC message arrives as
// a burst of thousands of frames written into the bridge back to back; with the defaults
// the kernel dropped most of an 8 MiB burst before the daemon could read it.
constexpr std::uint32_t kTapQueueLength = 16384;
constexpr unsigned kReceiveBuffers = 1024;
// Transmit slots (frames written to the TAP in one io_uring_enter), and how many of them the
// RoCE engine's paced traffic leaves to everything else (TapSink).
constexpr unsigned kTransmitSlots = 512;
// --netdev with UDP_GRO: each receive buffer holds a run of up to 64 KiB.
constexpr unsigned kReceiveBuffersForRuns = 128;
constexpr std::size_t kUnpacedReserve = 64;

// At least one byte more than the largest frame, so a full buffer means truncation.
std::size_t frame_buffer_size(std::uint16_t mtu) {
  const std::size_t frame = mtu + kEthernetOverhead + 1;
  return (frame + 1023) / 1024 * 1024;
}

// Frames leave through the loop's transmit slots; when every slot is in flight they wait in
// the loop's backlog, in order. The RoCE engine paces itself by transmit_room() and never
// fills the slots: it stops a requester or a READ's responses when the room runs out and
// resumes them as writes complete (docs/TRANSPORT.md, "Pacing"). kUnpacedReserve slots are
// kept out of that room for what cannot wait for it: ACKs, CM and ARP traffic, ICMP.
class TapSink : public stack::FrameSink {
 public:
  void attach(EventLoop& loop) { loop_ = &loop; }
  void show_frames_to(FrameCapture& capture) { capture_ = &capture; }
  void transmit(ByteSpan frame) override {
    if (loop_ == nullptr) return;
    capture_->on_frame(frame, FrameDirection::Sent);
    loop_->transmit(frame);
  }
  // In a transmit slot when one is free: the stack builds the frame where the TAP write
  // reads it from.
  MutableByteSpan prepare(std::size_t size) override {
    return loop_ == nullptr ? MutableByteSpan{} : loop_->prepare_transmit(size);
  }
  void transmit_prepared(MutableByteSpan frame) override {
    capture_->on_frame(frame, FrameDirection::Sent);
    loop_->transmit_prepared(frame.size());
  }
  std::size_t transmit_room() const override {
    const std::size_t room = loop_ == nullptr ? 0 : loop_->transmit_room();
    return room > kUnpacedReserve ? room - kUnpacedReserve : 0;
  }

 private:
  EventLoop* loop_ = nullptr;
  FrameCapture* capture_ = nullptr;  // set with loop_
};

// The verbs device's view of the loop: doorbell watches and eventfd writes.
class LoopWatcher final : public verbs::FdWatcher {
 public:
  void attach(EventLoop& loop) { loop_ = &loop; }
  void watch(int fd, Handler on_ready) override { loop_->watch(fd, std::move(on_ready)); }
  void unwatch(int fd) override { loop_->unwatch(fd); }
  void signal(int fd) override { loop_->signal_eventfd(fd); }
  void forget(int fd) override { loop_->forget_eventfd(fd); }

 private:
  EventLoop* loop_ = nullptr;
};

// The connection manager's MADs leave from QP 1 (rocev2/gsi.h); a MAD to our own address
// goes through the stack's loopback queue, so the manager is never re-entered from here.
class GsiMadSink final : public rocev2::cm::CmMadSink {
 public:
  void attach(rocev2::GsiEndpoint& gsi) { gsi_ = &gsi; }
  void send_cm_mad(stack::Ipv4Address destination, rocev2::MadSpan mad, Instant now) override {
    if (gsi_ != nullptr) gsi_->send(destination, mad, now);
  }

 private:
  rocev2::GsiEndpoint* gsi_ = nullptr;
};

// rdma_resolve_addr's question to the vnic's stack (ARP for the next hop).
class StackResolver final : public verbs::AddressResolver {
 public:
  void attach(stack::Interface& interface) { interface_ = &interface; }
  Reach reach(stack::Ipv4Address destination, Instant now) override {
    switch (interface_->reach(destination, now)) {
      case stack::Reach::reachable: return Reach::reachable;
      case stack::Reach::resolving: return Reach::resolving;
      case stack::Reach::unroutable: return Reach::unroutable;
    }
    return Reach::unroutable;
  }

 private:
  stack::Interface* interface_ = nullptr;
};

// rdma_resolve_addr's question to the kernel (`up --netdev`): the route the kernel's own UDP
// would take (a connect() of a datagram socket asks the routing table, sends nothing); the
// destination is reachable from the port when that route leaves from one of its addresses.
// The kernel resolves the neighbour when the first datagram goes, as for any UDP socket.
class KernelResolver final : public verbs::AddressResolver {
 public:
  void attach(const NetdevPort& port) { port_ = &port; }
  Reach reach(stack::Ipv4Address destination, Instant) override {
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Reach::unroutable;
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(rocev2::kRoceV2Port);
    to.sin_addr.s_addr = htonl(destination.value);
    sockaddr_in from{};
    socklen_t length = sizeof(from);
    const bool routed = ::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) == 0 &&
                        ::getsockname(fd, reinterpret_cast<sockaddr*>(&from), &length) == 0;
    ::close(fd);
    if (!routed) return Reach::unroutable;
    const stack::Ipv4Address source{ntohl(from.sin_addr.s_addr)};
    const auto& ours = port_->addresses();
    return std::find(ours.begin(), ours.end(), source) != ours.end() ? Reach::reachable : Reach::unroutable;
  }

 private:
  const NetdevPort* port_ = nullptr;
};

// A datagram as `capture` and `trace` show it: an Ethernet header (no MACs: the kernel
// chose them) before the IPv4 packet the kernel sent or received.
std::vector<std::uint8_t> frame_of(const KernelUdpHeaders& headers, ByteSpan payload) {
  std::vector<std::uint8_t> frame(14, 0);
  frame[12] = 0x08;  // IPv4
  frame.insert(frame.end(), headers.ipv4.begin(), headers.ipv4.end());
  frame.insert(frame.end(), headers.udp.begin(), headers.udp.end());
  frame.insert(frame.end(), payload.begin(), payload.end());
  return frame;
}

// A netdev's MTU as the device's: at least the 576 every host takes, at most what IPv4 can carry.
std::uint16_t ip_mtu_of(const LinkInfo& link) {
  return static_cast<std::uint16_t>(std::clamp<std::uint32_t>(link.mtu, kMinMtu, 65535));
}

// The gid of `up --group`, resolved when the daemon starts.
std::optional<gid_t> resolve_group(const std::optional<std::string>& name) {
  if (!name) return std::nullopt;
  std::vector<char> buffer(16384);
  group entry{};
  group* found = nullptr;
  if (::getgrnam_r(name->c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr) {
    throw std::runtime_error("no group named " + *name);
  }
  return found->gr_gid;
}

// Every verbs object holds fds in the daemon (a QP: two ring memfds and a doorbell), so the
// default soft limit of 1024 would cap a vnic at a few hundred QPs: take the hard limit.
// Returns the limits in force afterwards (the per-process quotas are derived from them).
DescriptorReport raise_fd_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return {};
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = raised.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return {.limit = limit.rlim_cur, .hard_limit = limit.rlim_max, .reserved = verbs::reserved_descriptors(limit.rlim_cur)};
}

std::uint64_t open_descriptors() {
  std::error_code ec;
  std::uint64_t count = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    ++count;
  }
  return count > 0 ? count - 1 : 0;  // the directory iterator's own descriptor
}

std::uint64_t physical_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size) : 0;
}

// The rdma_cm limits `up` set, over the defaults of verbs::UcmaConfig.
void apply_cm_limits(const CmLimitOverrides& limits, verbs::UcmaConfig& config) {
  const auto set = [&](CmLimit limit, std::size_t& field) {
    if (const auto& value = limits[static_cast<std::size_t>(limit)]) field = static_cast<std::size_t>(*value);
  };
  set(CmLimit::ChannelsPerUid, config.max_channels_per_uid);
  set(CmLimit::IdsPerChannel, config.max_ids_per_channel);
  set(CmLimit::IdsPerProcess, config.max_ids_per_process);
  set(CmLimit::IdsPerUid, config.max_ids_per_uid);
  set(CmLimit::EventsPerChannel, config.max_events_per_channel);
  set(CmLimit::EventsPerUid, config.max_events_per_uid);
  set(CmLimit::PortsPerUid, config.max_ports_per_uid);
}

}  // namespace

void log_line(const std::string& line) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &local);
  std::fprintf(stderr, "%s rrdma-vnic[%d]: %s\n", stamp, static_cast<int>(::getpid()), line.c_str());
  std::fflush(stderr);
}

class Daemon::Impl {
 public:
  Impl(const VnicConfig& config, PidFileLock lock, std::vector<std::string>& notes);
  ~Impl() { tear_down(); }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  void run();
  void keep_log() { keep_log_ = true; }

 private:
  void adopt(const ExternalChanges& kept);
  void attach_bridge_and_uplink();
  void attach_bridge(const std::string& bridge_name);
  void attach_uplink(const std::string& uplink_name);
  void create_tap();
  void open_netdev();
  void start_loop();
  void start_tap_loop(const EventLoopConfig& loop_config);
  void start_netdev_loop(EventLoopConfig loop_config);
  void watch_addresses();
  void follow_netdev(Instant now);
  void start_nic(std::vector<std::string>& notes);
  void start_rdma_cm();
  void add_nic_timer_sources();
  verbs::Quotas choose_quotas(std::vector<std::string>& notes);
  void watch_link();
  void watch_link_monitor();
  void set_port_state(const LinkInfo& link, Instant now);
  void start_control();
  void watch_signals();
  void record_changes();
  nlohmann::json handle(const nlohmann::json& request, const PeerCredentials& peer);
  nlohmann::json status(Instant now);
  nlohmann::json stats();
  void tear_down();
  void release_links(std::vector<std::string>& notes);

  VnicConfig config_;
  RuntimePaths paths_;
  Instant started_ = Clock::now();
  PidFileLock lock_;
  bool keep_log_ = false;
  bool torn_down_ = false;
  LinkControl links_;
  ExternalChanges changes_;
  int bridge_ifindex_ = 0;
  std::optional<TapDevice> tap_;
  std::optional<EventLoop> loop_;
  std::optional<FrameCapture> capture_;  // `rrdma-vnic capture` (vnic/capture.h)
  TapSink sink_;
  std::optional<stack::Interface> interface_;
  LoopWatcher watcher_;
  std::optional<RocePort> roce_;
  // `up --netdev`: the interface's ifindex, the UDP port on it and the watch on its
  // addresses; instead of the TAP, the stack and roce_.
  int netdev_ifindex_ = 0;
  std::optional<NetdevPort> netdev_port_;
  std::optional<AddressWatch> address_watch_;
  KernelResolver kernel_resolver_;
  RoceEndpoint* endpoint_ = nullptr;  // roce_ or netdev_port_
  std::optional<verbs::Nic> nic_;
  // QP 1: management datagrams, on the RoCE port beside the Nic; the MADs it accepts go to
  // the connection manager that the rdma_cm device (ucma_) owns.
  std::optional<rocev2::GsiEndpoint> gsi_;
  GsiMadSink cm_mads_;
  StackResolver resolver_;
  std::optional<verbs::UcmaService> ucma_;
  DescriptorReport descriptors_;  // what raise_fd_limit() got
  std::optional<Telemetry> telemetry_;  // `rrdma-vnic stats` (RoCE part) and `trace`
  // The ifindex of the TAP this daemon made, 0 until TUNSETIFF succeeded. Only that
  // interface is ours to delete: a refused `up` whose name belongs to someone's veth,
  // bridge or uplink must leave it alone, and so must a tear-down racing a new interface
  // that took the name.
  int tap_ifindex_ = 0;
  std::optional<LinkMonitor> link_monitor_;
  bool port_active_ = true;  // what the verbs device was last told (it starts active)
  int signal_fd_ = -1;
  std::optional<ControlServer> control_;
};

Daemon::Impl::Impl(const VnicConfig& config, PidFileLock lock, std::vector<std::string>& notes)
    : config_(config), paths_(RuntimePaths::of(config.name)), lock_(std::move(lock)) {
  try {
    adopt(clean_stale(config_.name, notes, /*for_up=*/true));
    if (!config_.netdev && links_.find(config_.name)) {
      throw std::runtime_error("an interface named " + config_.name + " already exists");
    }
    if (config_.netdev) {
      open_netdev();
    } else {
      attach_bridge_and_uplink();
      create_tap();
    }
    start_loop();
    start_nic(notes);
    watch_link();
    watch_signals();
    start_control();
    lock_.write_pid(::getpid());
  } catch (...) {
    tear_down();
    throw;
  }
}

void Daemon::Impl::record_changes() { write_state_file(paths_.state_file, changes_.to_json(::getpid())); }

// The bridge (and uplink) a dead daemon of this name created and clean_stale kept for its
// other ports become this daemon's, if it uses them too: its `down` undoes them as the dead
// one's would have. One it does not use stays, nobody's (a note says so).
void Daemon::Impl::adopt(const ExternalChanges& kept) {
  if (kept.created_bridge && kept.created_bridge == config_.bridge) {
    changes_.created_bridge = kept.created_bridge;
    if (kept.enslaved_uplink && kept.enslaved_uplink == config_.uplink) changes_.enslaved_uplink = kept.enslaved_uplink;
    record_changes();
  } else if (kept.created_bridge) {
    log_line("bridge " + *kept.created_bridge + " is left in place; no vnic will remove it");
  }
}

void Daemon::Impl::attach_bridge_and_uplink() {
  if (!config_.bridge) return;
  attach_bridge(*config_.bridge);
  if (config_.uplink) attach_uplink(*config_.uplink);
}

// Found, or created with --create-bridge (and recorded), and up.
void Daemon::Impl::attach_bridge(const std::string& bridge_name) {
  auto bridge = links_.find(bridge_name);
  if (!bridge && !config_.create_bridge) {
    throw std::runtime_error("bridge " + bridge_name + " does not exist (add --create-bridge to create it)");
  }
  if (!bridge) {
    // Recorded before the kernel call, so a crash in between still leaves a trace.
    changes_.created_bridge = bridge_name;
    record_changes();
    links_.create_bridge(bridge_name);
    bridge = links_.find(bridge_name);
    if (!bridge) throw std::runtime_error("bridge " + bridge_name + " vanished after creation");
  } else if (bridge->kind != "bridge") {
    throw std::runtime_error(bridge_name + " exists but is not a bridge (it is a " +
                             (bridge->kind.empty() ? std::string("plain device") : bridge->kind) + ")");
  } else if (!bridge->up) {
    links_.change(bridge_name, LinkChange::up());
  }
  bridge_ifindex_ = bridge->ifindex;
}

// Enslaved to the bridge and brought up, unless it already is a port of it.
void Daemon::Impl::attach_uplink(const std::string& uplink_name) {
  const auto uplink = links_.find(uplink_name);
  if (!uplink) throw std::runtime_error("uplink " + uplink_name + " does not exist");
  if (uplink->master == bridge_ifindex_) return;
  if (uplink->master != 0) {
    throw std::runtime_error("uplink " + uplink->name + " is already a port of another bridge");
  }
  changes_.enslaved_uplink = uplink->name;
  record_changes();
  links_.change(uplink->name, LinkChange::master_of(bridge_ifindex_, true));
}

void Daemon::Impl::create_tap() {
  try {
    tap_.emplace(TapDevice::create(config_.name));
  } catch (const std::system_error& failure) {
    if (failure.code().value() == EBUSY || failure.code().value() == EEXIST) {
      throw std::runtime_error("an interface named " + config_.name + " already exists");
    }
    throw;
  }
  const auto tap = links_.find(config_.name);
  if (!tap) throw std::runtime_error("TAP " + config_.name + " vanished after creation");
  tap_ifindex_ = tap->ifindex;
  // The kernel side is only a bridge port: no address of any family (done while the
  // link is down, before IPv6 autoconfiguration can add a link-local address).
  if (!LinkControl::disable_ipv6(config_.name)) log_line("IPv6 not disabled on " + config_.name);
  LinkChange change = LinkChange::up();
  change.mtu = config_.mtu;
  change.mac = config_.tap_mac;
  change.tx_queue_length = kTapQueueLength;
  if (bridge_ifindex_ != 0) change.master = bridge_ifindex_;
  links_.change(config_.name, change);
}

// The interface gives the device its GIDs (its IPv4 addresses), node GUID (from its MAC, or
// the name when it has none) and MTU.
void Daemon::Impl::open_netdev() {
  const auto link = links_.find(*config_.netdev);
  if (!link) throw std::runtime_error("no interface named " + *config_.netdev);
  netdev_ifindex_ = link->ifindex;
  const auto addresses = links_.ipv4_addresses(netdev_ifindex_);
  if (addresses.empty()) {
    throw std::runtime_error(*config_.netdev + " has no IPv4 address: RoCE v2 needs one as its GID (ip address add ... dev " +
                             *config_.netdev + ")");
  }
  config_.address = addresses.front();
  config_.mac = link->mac.value_or(derive_mac(config_.name));
  config_.mtu = ip_mtu_of(*link);
}

void Daemon::Impl::start_loop() {
  EventLoopConfig loop_config;
  loop_config.frame_buffer_size = frame_buffer_size(config_.mtu);
  loop_config.rx_buffers = kReceiveBuffers;
  loop_config.tx_slots = kTransmitSlots;
  // The completion queue (twice this) holds a turn's writes and reads without overflowing
  // into the kernel's backlog list.
  loop_config.ring_entries = kTransmitSlots + kReceiveBuffers / 2;
  loop_config.busy_poll = std::chrono::microseconds(config_.busy_poll_us);
  if (config_.netdev) {
    start_netdev_loop(loop_config);
  } else {
    start_tap_loop(loop_config);
  }
}

void Daemon::Impl::start_tap_loop(const EventLoopConfig& loop_config) {
  loop_.emplace(loop_config);
  capture_.emplace(*loop_, [this] { return frame_totals(interface_->counters()); });
  sink_.show_frames_to(*capture_);
  sink_.attach(*loop_);
  stack::InterfaceConfig stack_config;
  stack_config.mac = config_.mac;
  stack_config.address = config_.address.address;
  stack_config.prefix_len = config_.address.prefix_len;
  stack_config.gateway = config_.gateway;
  stack_config.mtu = config_.mtu;
  interface_.emplace(stack_config, sink_);
  loop_->attach_frame_device(tap_->fd(), [this](ByteSpan frame, Instant now) {
    capture_->on_frame(frame, FrameDirection::Received);
    interface_->receive_frame(frame, now);
  });
  loop_->add_timer_source([this](Instant now) { return interface_->poll(now); });
  roce_.emplace(*interface_);
  endpoint_ = &*roce_;
}

// A receive buffer holds the recvmsg header, the source address and the control messages
// before the datagram.
void Daemon::Impl::start_netdev_loop(EventLoopConfig loop_config) {
  constexpr std::size_t kRecvmsgOverhead = 256;
  loop_config.frame_buffer_size = frame_buffer_size(config_.mtu) + kRecvmsgOverhead;
  const RoceSocket socket = open_roce_socket(*config_.netdev, config_.udp_offload);
  loop_config.udp_segmentation = socket.udp_segmentation;
  if (socket.udp_gro) {
    // A run received whole is up to 64 KiB: fewer, larger receive buffers (8 MiB in all,
    // as 1024 of a 9000-byte MTU's).
    loop_config.receive_buffer_size = EventLoop::kMaxRunBytes + 28 + kRecvmsgOverhead;
    loop_config.rx_buffers = kReceiveBuffersForRuns;
  }
  try {
    loop_.emplace(loop_config);
  } catch (...) {
    ::close(socket.fd);
    throw;
  }
  capture_.emplace(*loop_, [this] {
    return FrameTotals{loop_->counters().tap_rx_frames, loop_->counters().tap_tx_frames};
  });
  netdev_port_.emplace(*loop_, socket, kUnpacedReserve);
  netdev_port_->set_addresses({config_.address.address});
  netdev_port_->set_mtu(config_.mtu);
  netdev_port_->set_packet_tap([this](const KernelUdpHeaders& headers, ByteSpan payload, bool sent) {
    if (!capture_->watching()) return;
    const std::vector<std::uint8_t> frame = frame_of(headers, payload);
    capture_->on_frame(frame, sent ? FrameDirection::Sent : FrameDirection::Received);
  });
  loop_->attach_datagram_socket(netdev_port_->fd(), [this](const Datagram& datagram, Instant now) {
    netdev_port_->receive(datagram, now);
  });
  endpoint_ = &*netdev_port_;
  kernel_resolver_.attach(*netdev_port_);
}

// The verbs device on UDP 4791. Its timers (retransmission, RNR waits) and the work it
// defers run as a timer source of the loop (add_nic_timer_sources).
void Daemon::Impl::start_nic(std::vector<std::string>& notes) {
  descriptors_ = raise_fd_limit();
  watcher_.attach(*loop_);
  verbs::NicConfig nic_config;
  nic_config.address = config_.address.address;
  nic_config.mac = config_.mac;
  nic_config.netdev_mtu = config_.mtu;
  nic_config.frame_memory = loop_->receive_memory();
  nic_config.quotas = choose_quotas(notes);
  nic_config.user_quotas = config_.user_quotas.applied_to(verbs::default_user_quotas(nic_config.quotas));
  nic_config.descriptor_budget = descriptors_.usable();
  nic_config.dma_wait_bound = std::chrono::milliseconds(config_.dma_wait_ms);
  nic_.emplace(nic_config, *endpoint_, watcher_);
  loop_->on_frames_done([this] {
    if (nic_) nic_->end_of_frames();
  });
  endpoint_->attach(&*nic_);
  gsi_.emplace(*endpoint_);
  endpoint_->attach_gsi(&*gsi_);
  telemetry_.emplace(*loop_, *capture_);
  start_rdma_cm();
  endpoint_->set_observer(&*telemetry_);
  nic_->set_engine_observer(&*telemetry_);
  gsi_->set_observer(&*telemetry_);
  if (interface_) interface_->set_observer(&*telemetry_);
  add_nic_timer_sources();
}

// The rdma_cm device (docs/RDMA_CM.md): its connection manager on QP 1, its timers (CM
// resends, timewait, address resolution) as a timer source, its commands through the control
// socket (start_control).
void Daemon::Impl::start_rdma_cm() {
  std::random_device random;
  verbs::UcmaConfig config;
  config.address = config_.address.address;
  config.node_guid = verbs::caps::node_guid(config_.mac);
  config.netdev_mtu = config_.mtu;
  config.cm.local_ca_guid = config.node_guid;
  config.cm.local_address = config_.address.address;
  config.cm.tid_high = random();
  config.cm.first_comm_id = random();
  apply_cm_limits(config_.cm_limits, config);
  cm_mads_.attach(*gsi_);
  verbs::AddressResolver* resolver = &kernel_resolver_;
  if (interface_) {
    resolver_.attach(*interface_);
    resolver = &resolver_;
  }
  ucma_.emplace(config, cm_mads_, *resolver, watcher_);
  ucma_->cm().set_observer(&*telemetry_);
  ucma_->set_observer(&*telemetry_);
  gsi_->set_handler(&ucma_->cm());
  loop_->add_timer_source([this](Instant now) {
    ucma_->advance(now);
    return ucma_->next_deadline();
  });
}

void Daemon::Impl::add_nic_timer_sources() {
  loop_->add_timer_source([this](Instant now) {
    nic_->advance(now);
    return nic_->next_deadline();
  });
  if (!interface_) return;  // --netdev: the kernel loops packets to our own address back
  // Packets to our own address (QPs of this vnic connected to each other) come back here,
  // the last timer source, so that what the others sent this turn is delivered this turn.
  // They are a batch of received frames like any other: end_of_frames() after it. Having
  // delivered some, it asks for one more turn at once: the sources before it (the Nic's
  // timers and deferred work) saw the state before the delivery.
  loop_->add_timer_source([this](Instant now) -> std::optional<Instant> {
    const std::size_t delivered = interface_->run_loopback(
        now, [this](ByteSpan frame) { capture_->on_frame(frame, FrameDirection::Received); });
    if (delivered > 0) nic_->end_of_frames();
    if (delivered > 0 || interface_->loopback_pending()) return now;
    return std::nullopt;
  });
}

// What `up` set, the rest derived from the descriptor limit the daemon got. A quota the
// limit cannot honour is kept (the operator asked for it) but noted (`up` prints the notes
// and the log keeps them): such a process would meet the daemon's EMFILE before its quota.
verbs::Quotas Daemon::Impl::choose_quotas(std::vector<std::string>& notes) {
  const verbs::DeviceLimits device{.max_qp = verbs::caps::kMaxQp,
                                   .max_cq = verbs::caps::kMaxCq,
                                   .max_srq = verbs::caps::kMaxSrq,
                                   .max_pd = verbs::caps::kMaxPd,
                                   .max_ah = verbs::caps::kMaxAh,
                                   .max_mr = verbs::caps::kMaxMr};
  const verbs::Quotas quotas =
      config_.quotas.applied_to(verbs::default_quotas(descriptors_.limit, physical_memory(), device));
  const std::uint64_t usable = descriptors_.usable();
  std::string summary;
  for (verbs::ResourceKind kind : verbs::kAllResourceKinds) {
    summary += " " + std::to_string(quotas.of(kind)) + " " + verbs::resource_kind_name(kind) + "s,";
    const std::uint64_t needed = quotas.of(kind) * verbs::descriptors_per(kind);
    if (needed > usable) {
      notes.push_back("quota of " + std::to_string(quotas.of(kind)) + " " + verbs::resource_kind_name(kind) +
                      "s per process needs " + std::to_string(needed) + " descriptors; the daemon has " +
                      std::to_string(usable) + " besides its reserve (RLIMIT_NOFILE " +
                      std::to_string(descriptors_.limit) + ")");
    }
  }
  log_line("descriptor limit " + std::to_string(descriptors_.limit) + " (hard " + std::to_string(descriptors_.hard_limit) +
           "); quotas per process:" + summary + " " + std::to_string(quotas.ring_bytes) + " ring bytes");
  return quotas;
}

// The TAP's state becomes the port's (IBV_EVENT_PORT_ACTIVE / PORT_ERR, query_port): the
// kernel's notifications about the TAP's ifindex (LinkMonitor, vnic/link.h), read in the
// loop. Active means administratively up with carrier (IFF_UP and IFF_RUNNING).
// Subscribed first, then asked once: a change made in between arrives as a notification.
void Daemon::Impl::watch_link() {
  const int ifindex = config_.netdev ? netdev_ifindex_ : tap_ifindex_;
  link_monitor_.emplace(links_, ifindex);
  watch_link_monitor();
  if (const auto link = links_.find(ifindex)) set_port_state(*link, Clock::now());
  if (config_.netdev) watch_addresses();
}

// `up --netdev`: the GIDs follow the interface's addresses (IBV_EVENT_GID_CHANGE), the port
// its MTU; an interface that is deleted takes the device with it, as rxe's does.
void Daemon::Impl::watch_addresses() {
  if (!address_watch_) address_watch_.emplace();
  loop_->watch(address_watch_->fd(), [this](Instant now) {
    bool more = false;
    if (address_watch_->drain(more)) follow_netdev(now);
    if (more) {
      loop_->unwatch(address_watch_->fd());
      watch_addresses();
    }
  });
}

void Daemon::Impl::follow_netdev(Instant now) {
  const auto link = links_.find(netdev_ifindex_);
  if (!link) {
    log_line("link: " + *config_.netdev + " was deleted: port DOWN; stopping");
    nic_->set_link(false, now);
    loop_->stop();
    return;
  }
  const std::vector<stack::Ipv4Cidr> cidrs = links_.ipv4_addresses(netdev_ifindex_);
  std::vector<stack::Ipv4Address> addresses;
  for (const stack::Ipv4Cidr& cidr : cidrs) addresses.push_back(cidr.address);
  if (addresses != netdev_port_->addresses()) {
    std::string listed;
    for (const auto& address : addresses) listed += " " + address.to_string();
    log_line("link: " + *config_.netdev + " addresses:" + (listed.empty() ? " none" : listed));
    netdev_port_->set_addresses(addresses);
  }
  if (!cidrs.empty()) config_.address = cidrs.front();  // GID 0, and its prefix for `status`
  config_.mtu = ip_mtu_of(*link);
  netdev_port_->set_mtu(config_.mtu);
  nic_->set_address_and_mtu(config_.address.address, config_.mtu, now);
  ucma_->set_address_and_mtu(config_.address.address, config_.mtu);
  set_port_state(*link, now);
}

// The loop's readiness is edge-triggered (a multishot poll): when drain() leaves datagrams
// queued, watching the fd anew makes the loop look again at once, on its next turn.
void Daemon::Impl::watch_link_monitor() {
  loop_->watch(link_monitor_->fd(), [this](Instant now) {
    LinkMonitor::Drained drained = link_monitor_->drain();
    for (const LinkInfo& link : drained.states) set_port_state(link, now);
    if (config_.netdev && !drained.states.empty()) follow_netdev(now);
    if (drained.more) {
      loop_->unwatch(link_monitor_->fd());
      watch_link_monitor();
    }
  });
}

// Active means administratively up with carrier, and (--netdev) an IPv4 address for GID 0.
void Daemon::Impl::set_port_state(const LinkInfo& link, Instant now) {
  const bool addressed = !netdev_port_ || !netdev_port_->addresses().empty();
  const bool active = link.up && link.running && addressed;
  if (active != port_active_) {
    const char* why = active      ? "is up with carrier"
                      : !link.up  ? "is down"
                      : !link.running ? "has no carrier"
                                      : "has no IPv4 address";
    log_line(std::string("link: ") + (config_.netdev ? *config_.netdev : "TAP " + config_.name) + " " + why +
             ": port " + (active ? "ACTIVE" : "DOWN"));
  }
  port_active_ = active;
  nic_->set_link(active, now);
}

void Daemon::Impl::start_control() {
  VerbsHooks hooks;
  hooks.connected = [this](std::uint64_t client, const PeerCredentials& peer) {
    nic_->client_connected({client, peer.pid, peer.uid, peer.pidfd});
  };
  hooks.disconnected = [this](std::uint64_t client) { nic_->client_disconnected(client, Clock::now()); };
  hooks.request = [this](std::uint64_t client, const verbs::control::Message& request,
                         verbs::control::ReceivedFds& fds) {
    return nic_->handle(client, request, fds, Clock::now());
  };
  control_.emplace(
      paths_.socket, *loop_,
      [this](const nlohmann::json& request, const PeerCredentials& peer) { return handle(request, peer); },
      std::move(hooks), resolve_group(config_.group));
  nic_->set_client_evictor([this](std::uint64_t client) {
    log_line("client " + std::to_string(client) + ": its address space is gone (exec or exit); closing its connection");
    control_->disconnect(client);
  });
  control_->set_ucma_handler([this](const PeerCredentials& peer, const verbs::ucma::Frame& request,
                                    verbs::control::ReceivedFds& fds) {
    return ucma_->handle(peer.uid, peer.pid, request, fds, Clock::now());
  });
  control_->add_stream_command("capture", [this](const nlohmann::json& request, int fd) { capture_->start(fd, request); });
  control_->add_stream_command("trace", [this](const nlohmann::json& request, int fd) { telemetry_->start_trace(fd, request); });
}

void Daemon::Impl::watch_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  for (int signal : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&signals, signal);
  ::sigprocmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  signal_fd_ = ::signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signal_fd_ < 0) throw std::system_error(errno, std::generic_category(), "signalfd");
  loop_->watch(signal_fd_, [this](Instant) {
    signalfd_siginfo info{};
    while (::read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
      log_line(std::string("stopping on ") + ::strsignal(static_cast<int>(info.ssi_signo)));
      loop_->stop();
    }
  });
}

nlohmann::json Daemon::Impl::handle(const nlohmann::json& request, const PeerCredentials& peer) {
  const auto cmd = request["cmd"].get<std::string>();
  if (cmd == "status") return status(Clock::now());
  if (cmd == "stats") return stats();
  if (cmd == "down") {
    log_line("stopping: down requested by uid " + std::to_string(peer.uid));
    loop_->stop();
    return {{"ok", true}, {"name", config_.name}};
  }
  return {{"error", "unknown command '" + cmd + "'"}};
}

nlohmann::json Daemon::Impl::status(Instant now) {
  DescriptorReport descriptors = descriptors_;
  descriptors.open = open_descriptors();
  nlohmann::json status = status_json(StatusReport{config_, ::getpid(), now - started_,
                                                   interface_ ? interface_->arp_entries(now) : std::vector<stack::ArpEntry>{},
                                                   nic_->listing(), descriptors, nic_->quotas(), nic_->quota_use(),
                                                   nic_->user_quotas()});
  if (netdev_port_) {
    status["gids"] = nlohmann::json::array();
    for (const auto& address : netdev_port_->addresses()) status["gids"].push_back(address.to_string());
    status["port_active"] = port_active_;
  }
  status["rdma_cm"] = ucma_->listing();
  status["rdma_cm"]["limits"] = verbs::limits_json(ucma_->config());
  return status;
}

nlohmann::json Daemon::Impl::stats() {
  nlohmann::json stats = stats_json(interface_ ? interface_->counters() : std::vector<stack::Counter>{}, loop_->counters());
  for (const auto& [name, value] : link_monitor_->counters()) stats["daemon"][name] = value;
  add_layer(stats, "roce", endpoint_->named_counters());
  add_layer(stats, "engine", named(nic_->engine_counters()));
  add_layer(stats, "gsi", rocev2::named(gsi_->counters()));
  for (const auto& [name, value] : rocev2::cm::named(ucma_->cm().counters())) stats["cm"][name] = value;
  for (const auto& [name, value] : verbs::named(ucma_->counters())) stats["rdma_cm"][name] = value;
  add_layer(stats, "verbs", named(nic_->counters()));
  add_layer(stats, "dma", named(nic_->dma_counters()));
  for (const auto& [name, value] : named(nic_->quota_refusals())) stats["quotas"][name] = value;
  add_layer(stats, "capture", named(capture_->counters()));
  add_layer(stats, "control", control_->named_counters());
  telemetry_->add_stats(stats);
  return stats;
}

void Daemon::Impl::run() {
  log_line("up: " + config_.name + " mac " + config_.mac.to_string() + " ip " +
           config_.address.address.to_string() + "/" + std::to_string(config_.address.prefix_len) +
           " mtu " + std::to_string(config_.mtu) +
           (loop_->counters().multishot_read ? " (multishot reads)" : " (single-shot reads)"));
  if (interface_) interface_->announce(Clock::now());
  loop_->run();
}

// Reverse order of set-up. The loop goes before the TAP: its cancelled requests must
// drop their references to the TAP's file, or closing our fd would not remove the
// interface.
void Daemon::Impl::tear_down() {
  if (std::exchange(torn_down_, true)) return;
  std::vector<std::string> notes;
  try {
    control_.reset();  // disconnects every verbs client: the Nic tears their resources down
    if (signal_fd_ >= 0) ::close(std::exchange(signal_fd_, -1));
    if (link_monitor_) {
      if (loop_) loop_->unwatch(link_monitor_->fd());
      link_monitor_.reset();
    }
    if (address_watch_) {
      if (loop_) loop_->unwatch(address_watch_->fd());
      address_watch_.reset();
    }
    nic_.reset();
    if (gsi_) gsi_->set_handler(nullptr);
    ucma_.reset();
    if (endpoint_) endpoint_->attach_gsi(nullptr);
    gsi_.reset();
    roce_.reset();
    interface_.reset();
    telemetry_.reset();
    capture_.reset();
    loop_.reset();
    netdev_port_.reset();  // after the loop: its cancelled requests held the socket
    tap_.reset();
    release_links(notes);
  } catch (const std::exception& failure) {
    notes.push_back(std::string("tear-down: ") + failure.what());
  }
  for (const auto& note : notes) log_line(note);
  std::error_code ec;
  std::filesystem::remove(paths_.socket, ec);
  std::filesystem::remove(paths_.state_file, ec);
  if (!keep_log_) std::filesystem::remove(paths_.log_file, ec);
  lock_.remove();
}

// The TAP, should it have outlived its fd (only the one this daemon made), then the uplink
// and the bridge as NAME.state records them.
void Daemon::Impl::release_links(std::vector<std::string>& notes) {
  if (const auto tap = links_.find(config_.name); tap && tap_ifindex_ != 0 && tap->ifindex == tap_ifindex_) {
    notes.push_back("TAP " + config_.name + " outlived its fd; deleting it");
    links_.remove(config_.name);
  }
  undo(links_, changes_, notes);
}

Daemon::Daemon(const VnicConfig& config, PidFileLock lock, std::vector<std::string>& notes)
    : impl_(std::make_unique<Impl>(config, std::move(lock), notes)) {}

Daemon::~Daemon() = default;

void Daemon::run() { impl_->run(); }

void Daemon::keep_log() { impl_->keep_log(); }

}  // namespace rrdma::vnic
