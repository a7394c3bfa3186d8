// Runs in the daemon: the rdma_cm device served to librdmacm (ucma_service.h).
#include "verbs/device/ucma_service.h"

#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <endian.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "rocev2/verbs_codes.h"
#include "verbs/device/device_caps.h"

namespace rrdma::verbs {
namespace {

namespace cm = rocev2::cm;
using rocev2::QpState;

// RDMA_UDP_QKEY: the Q_Key rdma_cm gives UD ids of the UDP and IB port spaces.
constexpr std::uint32_t kUdpQkey = 0x01234567;
constexpr std::uint8_t kHopLimit = 64;  // the IPv4 route's, as the kernel puts it in the path
constexpr std::uint32_t kMaxBacklog = 1024;
// Linux's ip_local_port_range, from which cma_alloc_any_port picks.
constexpr std::uint16_t kEphemeralLow = 32768, kEphemeralHigh = 60999;
constexpr std::uint16_t kFirstUnprivilegedPort = 1024;  // PROT_SOCK
// How often an address resolution looks at the ARP cache again.
constexpr Duration kResolvePoll = std::chrono::milliseconds(5);
constexpr int kIbEventCommEst = 8;  // IB_EVENT_COMM_EST
// Ids of closed channels destroyed per turn of the daemon's loop: each may send a DREQ or REJ;
// a process that leaves a million ids must not hold everyone else's commands and packets.
constexpr std::size_t kTeardownBatch = 256;

template <typename Key>
void decrement(std::map<Key, std::size_t>& tally, const Key& key) {
  const auto it = tally.find(key);
  if (it == tally.end()) return;
  if (--it->second == 0) tally.erase(it);
}


template <typename T>
std::optional<T> read_struct(ByteSpan body) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (body.size() < sizeof(T)) return std::nullopt;
  T value;
  std::memcpy(&value, body.data(), sizeof(T));
  return value;
}

// CONNECT and ACCEPT as the kernel takes them: a body that ends after `reserved` (a
// librdmacm from before ECE) is the structure with a zero ECE.
template <typename T>
std::optional<T> read_struct_without_ece(ByteSpan body) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (body.size() < offsetof(T, ece)) return std::nullopt;
  T value{};
  std::memcpy(&value, body.data(), std::min(body.size(), sizeof(T)));
  return value;
}

template <typename T>
std::vector<std::uint8_t> bytes_of(const T& value) {
  std::vector<std::uint8_t> out(sizeof(T));
  std::memcpy(out.data(), &value, sizeof(T));
  return out;
}

// An address from a sockaddr: nullopt ip is INADDR_ANY (or ::). IPv6 addresses other than
// :: and ::ffff:a.b.c.d are not ours: a vnic has one IPv4 address.
struct SocketAddress {
  std::optional<stack::Ipv4Address> ip;
  std::uint16_t port = 0;
  bool ipv6 = false;
};

std::optional<SocketAddress> parse_socket_address(const void* raw, std::size_t size, int& error) {
  sa_family_t family = 0;
  if (size < sizeof(family)) {
    error = EINVAL;
    return std::nullopt;
  }
  std::memcpy(&family, raw, sizeof(family));
  if (family == AF_INET && size >= sizeof(sockaddr_in)) {
    sockaddr_in in{};
    std::memcpy(&in, raw, sizeof(in));
    const std::uint32_t host = ntohl(in.sin_addr.s_addr);
    SocketAddress a{.ip = std::nullopt, .port = ntohs(in.sin_port)};
    if (host != 0) a.ip = stack::Ipv4Address{host};
    return a;
  }
  if (family == AF_INET6 && size >= sizeof(sockaddr_in6)) {
    sockaddr_in6 in6{};
    std::memcpy(&in6, raw, sizeof(in6));
    SocketAddress a{.ip = std::nullopt, .port = ntohs(in6.sin6_port), .ipv6 = true};
    std::array<std::uint8_t, 16> raw6{};
    std::memcpy(raw6.data(), &in6.sin6_addr, raw6.size());
    constexpr std::array<std::uint8_t, 12> kV4MappedPrefix{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
    if (std::all_of(raw6.begin(), raw6.end(), [](std::uint8_t b) { return b == 0; })) return a;
    if (std::equal(kV4MappedPrefix.begin(), kV4MappedPrefix.end(), raw6.begin())) {
      std::uint32_t v4 = 0;
      std::memcpy(&v4, raw6.data() + 12, 4);
      a.ip = stack::Ipv4Address{ntohl(v4)};
      return a;
    }
    error = EADDRNOTAVAIL;
    return std::nullopt;
  }
  error = family == AF_INET || family == AF_INET6 ? EINVAL : EAFNOSUPPORT;
  return std::nullopt;
}

void write_socket_address(sockaddr_in6& out, std::optional<stack::Ipv4Address> ip, std::uint16_t port, bool ipv6) {
  std::memset(&out, 0, sizeof(out));
  if (ipv6 && !ip) {
    out.sin6_family = AF_INET6;
    out.sin6_port = htons(port);
    return;
  }
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(port);
  in.sin_addr.s_addr = htonl(ip ? ip->value : 0);
  std::memcpy(&out, &in, sizeof(in));
}

// rdma_ip2gid for IPv4: ::ffff:a.b.c.d.
void write_gid(std::uint8_t (&gid)[16], stack::Ipv4Address ip) {
  std::memset(gid, 0, 16);
  gid[10] = 0xFF;
  gid[11] = 0xFF;
  for (int i = 0; i < 4; ++i) gid[12 + i] = static_cast<std::uint8_t>(ip.value >> (24 - 8 * i));
}

// cma_get_roce_udp_flow_label for IPv4 ids.
std::uint32_t roce_flow_label(std::uint16_t source_port, std::uint16_t destination_port) {
  return (std::uint32_t{source_port} * 31 + destination_port) & 0xFFFFF;
}

cm::PathMtu path_mtu_for(int netdev_mtu) {
  const auto mtu = caps::active_mtu_for_netdev(netdev_mtu);
  return static_cast<cm::PathMtu>(mtu ? static_cast<int>(*mtu) : static_cast<int>(cm::PathMtu::Mtu1024));
}

int errno_of(cm::CmResult r) {
  switch (r) {
    case cm::CmResult::ok: return 0;
    case cm::CmResult::address_in_use: return EADDRINUSE;
    case cm::CmResult::not_listening: return EINVAL;
    case cm::CmResult::no_such_connection: return EINVAL;
    case cm::CmResult::invalid_state: return EINVAL;
    case cm::CmResult::private_data_too_long: return EINVAL;
    case cm::CmResult::no_comm_id: return ENOMEM;
  }
  return EINVAL;
}

}  // namespace

std::vector<std::pair<std::string, std::uint64_t>> named(const UcmaCounters& c) {
  return {{"commands", c.commands},
          {"command_errors", c.command_errors},
          {"channels_opened", c.channels_opened},
          {"channels_closed", c.channels_closed},
          {"ids_created", c.ids_created},
          {"ids_destroyed", c.ids_destroyed},
          {"events_queued", c.events_queued},
          {"events_delivered", c.events_delivered},
          {"events_purged", c.events_purged},
          {"connect_requests_dropped_backlog", c.connect_requests_dropped_backlog},
          {"connect_requests_rejected_address", c.connect_requests_rejected_address},
          {"address_resolutions", c.address_resolutions},
          {"address_errors", c.address_errors},
          {"foreign_channel_refused", c.foreign_channel_refused},
          {"channels_refused", c.channels_refused},
          {"ids_refused", c.ids_refused},
          {"events_dropped", c.events_dropped},
          {"events_refused", c.events_refused},
          {"ports_refused", c.ports_refused},
          {"ids_torn_down_later", c.ids_torn_down_later},
          {"id_transitions_refused", c.id_transitions_refused}};
}

nlohmann::json limits_json(const UcmaConfig& c) {
  return {{"max_channels_per_uid", c.max_channels_per_uid}, {"max_ids_per_channel", c.max_ids_per_channel},
          {"max_ids_per_process", c.max_ids_per_process},   {"max_ids_per_uid", c.max_ids_per_uid},
          {"max_events_per_channel", c.max_events_per_channel}, {"max_events_per_uid", c.max_events_per_uid},
          {"max_ports_per_uid", c.max_ports_per_uid}};
}

UcmaService::UcmaService(const UcmaConfig& config, cm::CmMadSink& mads, AddressResolver& resolver, FdWatcher& watcher)
    : config_(config),
      resolver_(resolver),
      watcher_(watcher),
      cm_(config.cm, mads, *this),
      path_mtu_(path_mtu_for(config.netdev_mtu)),
      random_(std::random_device{}()) {}

UcmaService::~UcmaService() {
  for (auto& [token, channel] : channels_) {
    watcher_.unwatch(channel.fd);
    ::close(channel.fd);
  }
}

// ---------------------------------------------------------------------------------------
// Frames and channels

ucma::Frame UcmaService::handle(uid_t uid, pid_t pid, const ucma::Frame& request, control::ReceivedFds& fds,
                                Instant now) {
  now_ = now;
  if (request.kind == ucma::Kind::CreateChannel) return create_channel(uid, pid, request, fds);
  ucma::Frame reply{.kind = request.kind, .reply = true, .request_id = request.request_id, .command = request.command,
                    .channel = request.channel, .body = {}};
  ++counters_.commands;
  const auto it = channels_.find(request.channel);
  Reply result{EBADF, {}};
  if (it != channels_.end() && it->second.uid != uid && uid != 0) {
    ++counters_.foreign_channel_refused;
    result.first = EACCES;
  } else if (it != channels_.end()) {
    result = dispatch(it->second, request, now);
  }
  if (result.first != 0 && !(request.command == RDMA_USER_CM_CMD_GET_EVENT && result.first == EAGAIN)) {
    ++counters_.command_errors;
  }
  reply.status = static_cast<std::uint32_t>(result.first);
  reply.body = std::move(result.second);
  return reply;
}

ucma::Frame UcmaService::create_channel(uid_t uid, pid_t pid, const ucma::Frame& request, control::ReceivedFds& fds) {
  ucma::Frame reply{.kind = ucma::Kind::CreateChannel, .reply = true, .request_id = request.request_id, .body = {}};
  fds.close_all();  // a request carries none (the frame parser refuses any)
  if (users_[uid].channels >= config_.max_channels_per_uid) {
    ++counters_.channels_refused;
    reply.status = EMFILE;
    return reply;
  }
  // The daemon makes the pair: its end is then a socket it can poll, and the application's
  // end exists only in processes, so EOF comes when the last of them closes it or exits.
  int ends[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends) != 0) {
    reply.status = static_cast<std::uint32_t>(errno);
    return reply;
  }
  const int fd = ends[0];
  fds.add(ends[1]);  // sent with the reply, then closed by the caller
  // Unguessable (getrandom), though the uid check is what guards another user's channel.
  std::uint64_t token = 0;
  while (token == 0 || channels_.contains(token)) {
    if (::getrandom(&token, sizeof(token), 0) != static_cast<ssize_t>(sizeof(token))) token = random_();
  }
  channels_.emplace(token, Channel{.token = token, .fd = fd, .uid = uid, .pid = pid, .events = {}, .markers = 0, .ids = {}});
  ++users_[uid].channels;
  ++counters_.channels_opened;
  // The shim never writes on its end (a write on an untracked duplicate of the descriptor
  // would): what arrives is discarded, and EOF means every application copy is closed.
  watcher_.watch(fd, [this, token](Instant) {
    const auto it = channels_.find(token);
    if (it == channels_.end()) return;
    std::array<char, 512> discard{};
    // Bounded: a process writing on its end from many threads must not hold the loop; the
    // watch fires again for what is left.
    for (int reads = 0; reads < 64; ++reads) {
      const ssize_t n = ::recv(it->second.fd, discard.data(), discard.size(), MSG_DONTWAIT);
      if (n > 0 || (n < 0 && errno == EINTR)) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      close_channel(token);
      return;
    }
  });
  reply.channel = token;
  return reply;
}

// ucma_close: every id of the channel is destroyed, as if DESTROY_ID had been written; here
// later, kTeardownBatch ids a turn (advance), so that the close costs what it holds and other
// clients wait for none of it. Meanwhile the ids are nobody's: no command can name them (the
// channel is gone), an event for them is dropped and a request to a listener among them is
// not answered (its peer retries); they still count against their owner's limits.
void UcmaService::close_channel(std::uint64_t token) {
  const auto it = channels_.find(token);
  if (it == channels_.end()) return;
  Channel& c = it->second;
  erase_events(c, c.events.size());
  doomed_.insert(doomed_.end(), c.ids.begin(), c.ids.end());
  counters_.ids_torn_down_later += c.ids.size();
  watcher_.unwatch(c.fd);
  ::close(c.fd);
  if (const auto user = users_.find(c.uid); user != users_.end() && user->second.channels > 0) --user->second.channels;
  channels_.erase(it);
  ++counters_.channels_closed;
}

void UcmaService::tear_down_some(Instant now) {
  for (std::size_t n = 0; n < kTeardownBatch && !doomed_.empty(); ++n) {
    const std::uint32_t number = doomed_.front();
    doomed_.pop_front();
    if (const auto id = ids_.find(number); id != ids_.end()) destroy(id->second, now);
  }
}

bool UcmaService::room_for_event(const Channel& c) const {
  if (c.events.size() >= config_.max_events_per_channel) return false;
  const auto user = users_.find(c.uid);
  return user == users_.end() || user->second.events < config_.max_events_per_uid;
}

// False when the event was dropped (no such channel, or no room in it).
bool UcmaService::queue_event(std::uint32_t counted_id, QueuedEvent event) {
  const auto owner = ids_.find(counted_id);
  if (owner == ids_.end()) return false;
  const auto channel = channels_.find(owner->second.channel);
  if (channel == channels_.end()) return false;
  if (!room_for_event(channel->second)) {
    ++counters_.events_dropped;
    return false;
  }
  event.counted_id = counted_id;
  channel->second.events.push_back(event);
  ++users_[channel->second.uid].events;
  ++counters_.events_queued;
  top_up_markers(channel->second);
  return true;
}

void UcmaService::erase_events(Channel& c, std::size_t count) {
  const auto user = users_.find(c.uid);
  if (user != users_.end()) user->second.events -= std::min(user->second.events, count);
}

// One marker per queued event, at most kMaxMarkers outstanding: the descriptor is readable
// exactly while events wait. A full socket buffer leaves the marker owed for the next call.
void UcmaService::top_up_markers(Channel& c) {
  while (c.markers < std::min(c.events.size(), ucma::kMaxMarkers)) {
    const char marker = 0;
    if (::send(c.fd, &marker, 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1) return;
    ++c.markers;
  }
}

// ---------------------------------------------------------------------------------------
// Commands

UcmaService::Reply UcmaService::dispatch(Channel& ch, const ucma::Frame& request, Instant now) {
  const ByteSpan body(request.body.data(), request.body.size());
  switch (request.command) {
    case RDMA_USER_CM_CMD_CREATE_ID: return create_id(ch, body);
    case RDMA_USER_CM_CMD_DESTROY_ID: return destroy_id(ch, body, now);
    case RDMA_USER_CM_CMD_BIND_IP: return bind_ip(ch, body);
    case RDMA_USER_CM_CMD_BIND: return bind_any_family(ch, body);
    case RDMA_USER_CM_CMD_RESOLVE_IP: return resolve_ip(ch, body, now);
    case RDMA_USER_CM_CMD_RESOLVE_ROUTE: return resolve_route(ch, body);
    case RDMA_USER_CM_CMD_QUERY_ROUTE: return query_route(ch, body);
    case RDMA_USER_CM_CMD_CONNECT: return connect(ch, body, now);
    case RDMA_USER_CM_CMD_LISTEN: return listen(ch, body);
    case RDMA_USER_CM_CMD_ACCEPT: return accept(ch, body, now);
    case RDMA_USER_CM_CMD_REJECT: return reject(ch, body, now);
    case RDMA_USER_CM_CMD_DISCONNECT: return disconnect(ch, body, now);
    case RDMA_USER_CM_CMD_INIT_QP_ATTR: return init_qp_attr(ch, body);
    case RDMA_USER_CM_CMD_GET_EVENT: return get_event(ch);
    case RDMA_USER_CM_CMD_SET_OPTION: return set_option(ch, body);
    case RDMA_USER_CM_CMD_NOTIFY: return notify(ch, body, now);
    case RDMA_USER_CM_CMD_MIGRATE_ID: return migrate_id(ch, request, ch.uid);
    // AF_IB addressing (QUERY, RESOLVE_ADDR) is refused at BIND, so librdmacm never asks
    // for it; multicast is not done (docs/RDMA_CM.md). GET_OPTION has no handler in Linux.
    default: return {ENOSYS, {}};
  }
}

CmId* UcmaService::id_on(Channel& ch, std::uint32_t number) {
  const auto it = ids_.find(number);
  return it != ids_.end() && it->second.channel == ch.token ? &it->second : nullptr;
}

// An id more on `ch`: within the channel's, its creator's and its user's limits?
bool UcmaService::room_for_id(const Channel& ch) {
  const auto process = ids_of_process_.find(ch.pid);
  const auto user = users_.find(ch.uid);
  const bool room = ch.ids.size() < config_.max_ids_per_channel &&
                    (process == ids_of_process_.end() || process->second < config_.max_ids_per_process) &&
                    (user == users_.end() || user->second.ids < config_.max_ids_per_uid);
  if (!room) ++counters_.ids_refused;
  return room;
}

CmId& UcmaService::new_id(Channel& ch, cm::PortSpace ps, bool ud) {
  while (next_id_ == 0 || ids_.contains(next_id_)) ++next_id_;
  CmId& id = ids_[next_id_];
  id.id = next_id_++;
  id.channel = ch.token;
  id.ps = ps;
  id.ud = ud;
  id.seq_num = static_cast<std::uint32_t>(random_()) & 0xFFFFFF;
  if (ud) id.qkey = kUdpQkey;
  id.owner_uid = ch.uid;
  id.owner_pid = ch.pid;
  ch.ids.insert(id.id);
  ++users_[ch.uid].ids;
  ++ids_of_process_[ch.pid];
  ++counters_.ids_created;
  return id;
}

UcmaService::Reply UcmaService::create_id(Channel& ch, ByteSpan body) {
  const auto cmd = read_struct<rdma_ucm_create_id>(body);
  if (!cmd) return {EINVAL, {}};
  bool ud = false;
  switch (cmd->ps) {  // ucma_get_qp_type
    case RDMA_PS_TCP: ud = false; break;
    case RDMA_PS_UDP:
    case RDMA_PS_IPOIB: ud = true; break;
    case RDMA_PS_IB: ud = cmd->qp_type == IBV_QPT_UD; break;
    default: return {EINVAL, {}};
  }
  if (!room_for_id(ch)) return {ENOMEM, {}};
  CmId& id = new_id(ch, static_cast<cm::PortSpace>(cmd->ps), ud);
  id.uid = cmd->uid;
  return {0, bytes_of(rdma_ucm_create_id_resp{.id = id.id})};
}

UcmaService::Reply UcmaService::destroy_id(Channel& ch, ByteSpan body, Instant now) {
  const auto cmd = read_struct<rdma_ucm_destroy_id>(body);
  if (!cmd) return {EINVAL, {}};
  CmId* id = id_on(ch, cmd->id);
  if (id == nullptr) return {EINVAL, {}};
  return {0, bytes_of(rdma_ucm_destroy_id_resp{.events_reported = destroy(*id, now)})};
}

// The id's queued events go (a listener's unfetched requests take their new ids with them),
// its connection is let go of as cm_destroy_id does (REJ, DREQ or DREP), its port freed.
std::uint32_t UcmaService::destroy(CmId& id, Instant now) {
  const std::uint32_t number = id.id;
  const bool listening = id.state() == CmIdState::Listen;
  ids_machine_.move(id, CmIdState::Destroying);
  purge_events(number);
  if (id.connection) {
    id_of_connection_.erase(id.connection->value());
    cm_.destroy(*id.connection, now);
  }
  if (listening) cm_.unlisten(service_id(id, id.src.port));
  unbind(id);
  const std::uint32_t reported = id.events_reported;
  if (const auto ch = channels_.find(id.channel); ch != channels_.end()) ch->second.ids.erase(number);
  if (const auto user = users_.find(id.owner_uid); user != users_.end() && user->second.ids > 0) --user->second.ids;
  decrement(ids_of_process_, id.owner_pid);
  resolving_.erase(number);
  ids_.erase(number);
  ++counters_.ids_destroyed;
  return reported;
}

// The events naming the id are on its channel, and a child's CONNECT_REQUEST on its
// listener's (MIGRATE_ID moves only the events the id counts): only those are looked at.
std::uint32_t UcmaService::purge_events(std::uint32_t number) {
  std::vector<std::uint64_t> where;
  if (const auto it = ids_.find(number); it != ids_.end()) {
    where.push_back(it->second.channel);
    if (it->second.listener) {
      const auto listener = ids_.find(*it->second.listener);
      if (listener != ids_.end() && listener->second.channel != it->second.channel) where.push_back(listener->second.channel);
    }
  }
  std::uint32_t purged = 0;
  std::vector<std::uint32_t> orphans;
  for (std::uint64_t token : where) {
    const auto channel = channels_.find(token);
    if (channel == channels_.end()) continue;
    const std::size_t erased = std::erase_if(channel->second.events, [&](const QueuedEvent& e) {
      if (e.counted_id != number && e.id != number) return false;
      if (e.resp.event == ucma::kConnectRequest && e.id != number) orphans.push_back(e.id);
      return true;
    });
    erase_events(channel->second, erased);
    purged += static_cast<std::uint32_t>(erased);
  }
  counters_.events_purged += purged;
  for (std::uint32_t orphan : orphans) {
    if (const auto it = ids_.find(orphan); it != ids_.end()) destroy(it->second, now_);
  }
  return purged;
}

// cma_check_port: ids share a port only if both asked for REUSEADDR (not honoured once one
// listens); otherwise EADDRNOTAVAIL when either is bound to INADDR_ANY, EADDRINUSE when both
// are bound to the vnic's address (there is no other). 0: free.
int UcmaService::port_conflict(const CmId& id, bool any_address, std::uint16_t port, bool listening) const {
  const auto it = ports_.find({static_cast<std::uint16_t>(id.ps), port});
  if (it == ports_.end()) return 0;
  for (std::uint32_t other_number : it->second) {
    if (other_number == id.id) continue;
    const CmId& other = ids_.at(other_number);
    if (!listening && other.state() != CmIdState::Listen && id.reuseaddr && other.reuseaddr) continue;
    return any_address || !other.on_device ? EADDRNOTAVAIL : EADDRINUSE;
  }
  return 0;
}

std::optional<std::uint16_t> UcmaService::ephemeral_port(const CmId& id) {
  const std::uint32_t range = kEphemeralHigh - kEphemeralLow + 1;
  const std::uint32_t start = static_cast<std::uint32_t>(random_() % range);
  for (std::uint32_t i = 0; i < range; ++i) {
    const auto port = static_cast<std::uint16_t>(kEphemeralLow + (start + i) % range);
    if (!ports_.contains({static_cast<std::uint16_t>(id.ps), port})) return port;
  }
  return std::nullopt;
}

int UcmaService::bind(CmId& id, uid_t uid, std::optional<stack::Ipv4Address> address, std::uint16_t port,
                      bool ipv6_family) {
  if (id.bound) return EINVAL;
  if (address && *address != config_.address) return EADDRNOTAVAIL;
  if (const auto user = users_.find(id.owner_uid); user != users_.end() && user->second.ports >= config_.max_ports_per_uid) {
    ++counters_.ports_refused;  // as if every port were taken: what cma_alloc_port says then
    return EADDRNOTAVAIL;
  }
  if (port == 0) {
    const auto chosen = ephemeral_port(id);
    if (!chosen) return EADDRNOTAVAIL;
    port = *chosen;
  } else if (port < kFirstUnprivilegedPort && uid != 0) {
    return EACCES;  // cma_use_port: below 1024 only with CAP_NET_BIND_SERVICE (root here)
  } else if (const int conflict = port_conflict(id, !address.has_value(), port, false)) {
    return conflict;
  }
  id.bound = true;
  id.on_device = address.has_value();
  id.ipv6_family = ipv6_family;
  id.src = Endpoint{address.value_or(stack::Ipv4Address{}), port};
  ports_[{static_cast<std::uint16_t>(id.ps), port}].push_back(id.id);
  ++users_[id.owner_uid].ports;
  if (id.state() == CmIdState::Idle) ids_machine_.move(id, CmIdState::AddrBound);
  return 0;
}

void UcmaService::unbind(CmId& id) {
  if (!id.bound) return;
  const auto key = std::make_pair(static_cast<std::uint16_t>(id.ps), id.src.port);
  if (auto it = ports_.find(key); it != ports_.end()) {
    std::erase(it->second, id.id);
    if (it->second.empty()) ports_.erase(it);
  }
  if (const auto user = users_.find(id.owner_uid); user != users_.end() && user->second.ports > 0) --user->second.ports;
  id.bound = false;
}

std::uint64_t UcmaService::service_id(const CmId& id, std::uint16_t port) const {
  return cm::ip_service_id(id.ps, port);
}

UcmaService::Reply UcmaService::bind_ip(Channel& ch, ByteSpan body) {
  const auto cmd = read_struct<rdma_ucm_bind_ip>(body);
  if (!cmd) return {EINVAL, {}};
  CmId* id = id_on(ch, cmd->id);
  if (id == nullptr) return {EINVAL, {}};
  if (id->state() != CmIdState::Idle) return {EINVAL, {}};
  int error = 0;
  const auto address = parse_socket_address(&cmd->addr, sizeof(cmd->addr), error);
  if (!address) return {error, {}};
  return {bind(*id, ch.uid, address->ip, address->port, address->ipv6), {}};
}

// BIND takes any family: AF_IB is refused, which tells librdmacm (its probe at start-up) to
// use the IP commands for the rest of the process.
UcmaService::Reply UcmaService::bind_any_family(Channel& ch, ByteSpan body) {
  const auto cmd = read_struct<rdma_ucm_bind>(body);
  if (!cmd) return {EINVAL, {}};
  CmId* id = id_on(ch, cmd->id);
  if (id == nullptr) return {EINVAL, {}};
  if (id->state() != CmIdState::Idle) return {EINVAL, {}};
  int error = 0;
  const auto address =
      parse_socket_address(&cmd->addr, std::min<std::size_t>(cmd->addr_size, sizeof(cmd->addr)), error);
  if (!address) return {error, {}};
  return {bind(*id, ch.uid, address->ip, address->port, address->ipv6), {}};
}

UcmaService::Reply UcmaService::resolve_ip(Channel& ch, ByteSpan body, Instant now) {
  const auto cmd = read_struct<rdma_ucm_resolve_ip>(body);
  if (!cmd) return {EINVAL, {}};
  CmId* id = id_on(ch, cmd->id);
  if (id == nullptr) return {EINVAL, {}};
  int error = 0;
  const auto destination = parse_socket_address(&cmd->dst_addr, sizeof(cmd->dst_addr), error);
  if (!destination) return {error, {}};
  if (!destination->ip) return {EADDRNOTAVAIL, {}};
  if (id->state() == CmIdState::Idle) {
    const auto source = parse_socket_address(&cmd->src_addr, sizeof(cmd->src_addr), error);
    const bool has_source = source.has_value();
    if (const int e = bind(*id, ch.uid, has_source ? source->ip : std::nullopt, has_source ? source->port : 0,
                           destination->ipv6)) {
      return {e, {}};
    }
  }
  if (id->state() != CmIdState::AddrBound) return {EINVAL, {}};
  if (!room_for_event(ch)) {  // ADDR_RESOLVED or ADDR_ERROR would not fit: a loop of them once
    ++counters_.events_refused;  // queued a million for one id that never read them
    return {ENOMEM, {}};
  }
  // The vnic is the only device: an id bound to INADDR_ANY takes its address now.
  id->on_device = true;
  id->src.ip = config_.address;
  id->dst = Endpoint{*destination->ip, destination->port};
  ids_machine_.move(*id, CmIdState::AddrQuery);
  id->resolve_deadline = now + std::chrono::milliseconds(std::max<std::uint32_t>(cmd->timeout_ms, 1));
  resolving_.insert(id->id);
  ++counters_.address_resolutions;
  check_resolution(*id, now);
  return {0, {}};
}

// ADDR_RESOLVED once the next hop answers ARP; ADDR_ERROR when the timeout passes first
// (-ETIMEDOUT) or there is no route (-ENETUNREACH), as addr_handler reports them.
void UcmaService::check_resolution(CmId& id, Instant now) {
  const AddressResolver::Reach reach = resolver_.reach(id.dst.ip, now);
  if (reach == AddressResolver::Reach::resolving && now < *id.resolve_deadline) return;
  id.resolve_deadline.reset();
  resolving_.erase(id.id);
  if (reach == AddressResolver::Reach::reachable) {
    ids_machine_.move(id, CmIdState::AddrResolved);
    queue_event(id.id, QueuedEvent{.id = id.id, .resp = event_for(id, ucma::kAddrResolved, 0)});
    return;
  }
  ++counters_.address_errors;
  ids_machine_.move(id, CmIdState::AddrBound);
  const int status = reach == AddressResolver::Reach::unroutable ? -ENETUNREACH : -ETIMEDOUT;
  queue_event(id.id, QueuedEvent{.id = id.id, .resp = event_for(id, ucma::kAddrError, status)});
}

// RoCE routes are immediate (cma_resolve_iboe_route): the path is the address pair.
UcmaService::Reply UcmaService::resolve_route(Channel& ch, ByteSpan body) {
  const auto cmd = read_struct<rdma_ucm_resolve_route>(body);
  if (!cmd) return {EINVAL, {}};
  CmId* id = id_on(ch, cmd->id);
  if (id == nullptr || id->state() != CmIdState::AddrResolved) return {EINVAL, {}};
  if (!room_for_event(ch)) {
    ++counters_.events_refused;
    return {ENOMEM, {}};
  }
  ids_machine_.move(*id, CmIdState::RouteResolved);
  id->flow_label = roce_flow_label(id->src.port, id->dst.port);
  queue_event(id->id, QueuedEvent{.id = id->id, .resp = event_for(*id, ucma::kRouteResolved, 0)});
  return {0, {}};
}

UcmaService::Reply UcmaService::query_route(Channel& ch, ByteSpan body) {
  const auto cmd = read_struct<rdma_ucm_query>(body);
  if (!cmd) return {EINVAL, {}};
  CmId* id = id_on(ch, cmd->id);
  if (id == nullptr) return {EINVAL, {}};
  rdma_ucm_query_route_resp resp{};
  const bool peer = has_peer(id->state());
  write_socket_address(resp.src_addr, id->on_device ? std::optional(id->src.ip) : std::nullopt, id->src.port,
                       id->ipv6_family);
  if (peer) write_socket_address(resp.dst_addr, id->dst.ip, id->dst.port, false);
  if (id->on_device) {
    resp.node_guid = htobe64(config_.node_guid);  // the GUID's bytes, as ibv_get_device_guid gives them
    resp.port_num = 1;
    resp.ibdev_index = 0xFFFFFFFF;  // librdmacm then matches the device by its GUID alone
    ib_user_path_rec& path = resp.ib_route[0];
    write_gid(reinterpret_cast<std::uint8_t(&)[16]>(path.sgid), id->src.ip);
    if (peer) write_gid(reinterpret_cast<std::uint8_t(&)[16]>(path.dgid), id->dst.ip);
    path.pkey = htons(0xFFFF);
    if (has_route(id->state())) {  // cma_resolve_iboe_route's path record
      resp.num_paths = 1;
      path.flow_label = htonl(id->flow_label);
      path.hop_limit = kHopLimit;
      path.traffic_class = id->tos;
      path.reversible = 1;
      path.numb_path = 1;
      path.mtu_selector = 2;  // exactly
      path.mtu = static_cast<std::uint8_t>(path_mtu_);
      path.rate_selector = 2;
      path.packet_life_time_selector = 2;
      path.packet_life_time = cm::kPacketLifetime;
    }
  }
  return {0, bytes_of(resp)};
}

UcmaService::Reply UcmaService::listen(Channel& ch, ByteSpan body) {
  const auto cmd = read_struct<rdma_ucm_listen>(body);
  if (!cmd) return {EINVAL, {}};
  CmId* id = id_on(ch, cmd->id);
  if (id == nullptr) return {EINVAL, {}};
  if (id->state() == CmIdState::Listen) {  // rdma_listen again: a new backlog
    id->backlog = cmd->backlog == 0 || cmd->backlog > kMaxBacklog ? kMaxBacklog : cmd->backlog;
    return {0, {}};
  }
  if (id->state() == CmIdState::Idle) {
    if (const int e = bind(*id, ch.uid, std::nullopt, 0, false)) return {e, {}};
  }
  if (id->state() != CmIdState::AddrBound) return {EINVAL, {}};
  if (const int conflict = port_conflict(*id, !id->on_device, id->src.port, true)) return {conflict, {}};
  // Listening before the CM is told: a REQ it held for this port (kNoListenerHold) comes
  // back as a CONNECT_REQUEST during cm_.listen and must find this listener.
  ids_machine_.move(*id, CmIdState::Listen);
  id->backlog = static_cast<std::int32_t>(cmd->backlog) <= 0 || cmd->backlog > kMaxBacklog ? kMaxBacklog : cmd->backlog;
  if (const auto r = cm_.listen(service_id(*id, id->src.port), now_); r != cm::CmResult::ok) {
    ids_machine_.move(*id, CmIdState::AddrBound);
    return {errno_of(r), {}};
  }
  return {0, {}};
}

UcmaService::Reply UcmaService::connect(Channel& ch, ByteSpan body, Instant now) {
  const auto cmd = read_struct_without_ece<rdma_ucm_connect>(body);
  if (!cmd) return {EINVAL, {}};
  CmId* id = id_on(ch, cmd->id);
  if (id == nullptr || id->state() != CmIdState::RouteResolved || !cmd->conn_param.valid) return {EINVAL, {}};
  const rdma_ucm_conn_param& p = cmd->conn_param;
  const std::size_t user_room = id->ud ? cm::kSidrReqUserDataLength : cm::kReqUserDataLength;
  if (p.private_data_len > user_room) return {EINVAL, {}};
  std::array<std::uint8_t, cm::kSidrReqUserDataLength + cm::kCmaHeaderLength> private_data{};
  const std::size_t field = (id->ud ? cm::kSidrReqUserDataLength : cm::kReqUserDataLength) + cm::kCmaHeaderLength;
  const cm::CmaHeader header = cm::cma_header_ipv4(id->src.ip, id->src.port, id->dst.ip);
  if (cm::emit_cma_private_data(header, ByteSpan(p.private_data, p.private_data_len),
                                MutableByteSpan(private_data.data(), field)) != cm::CmaError::none) {
    return {EINVAL, {}};
  }
  cm::ConnectionId connection{};
  cm::CmResult r;
  if (id->ud) {
    r = cm_.sidr_request({.destination = id->dst.ip,
                          .service_id = service_id(*id, id->dst.port),
                          .private_data = ByteSpan(private_data.data(), field)},
                         now, connection);
  } else {
    id->qp_num = p.qp_num & 0xFFFFFF;
    r = cm_.connect({.destination = id->dst.ip,
                     .service_id = service_id(*id, id->dst.port),
                     .local_qpn = rocev2::Qpn{id->qp_num},
                     .starting_psn = rocev2::Psn{id->seq_num},
                     .responder_resources = p.responder_resources,
                     .initiator_depth = p.initiator_depth,
                     .retry_count = static_cast<std::uint8_t>(std::min<int>(p.retry_count, 7)),
                     .rnr_retry_count = static_cast<std::uint8_t>(std::min<int>(p.rnr_retry_count, 7)),
                     .path_mtu = path_mtu_,
                     .flow_label = id->flow_label,
                     .private_data = ByteSpan(private_data.data(), field)},
                    now, connection);
  }
  if (r != cm::CmResult::ok) return {errno_of(r), {}};
  id->connection = connection;
  id->active = true;
  id_of_connection_[connection.value()] = id->id;
  ids_machine_.move(*id, CmIdState::Connect);
  return {0, {}};
}

UcmaService::Reply UcmaService::accept(Channel& ch, ByteSpan body, Instant now) {
  const auto cmd = read_struct_without_ece<rdma_ucm_accept>(body);
  if (!cmd) return {EINVAL, {}};
  CmId* id = id_on(ch, cmd->id);
  if (id == nullptr || id->state() != CmIdState::Connect || !id->connection) return {EINVAL, {}};
  const rdma_ucm_conn_param& p = cmd->conn_param;
  if (p.valid) id->uid = cmd->uid;
  cm::CmResult r;
  if (id->ud) {
    if (!p.valid || p.private_data_len > cm::SidrRep::kPrivateDataLength) return {EINVAL, {}};
    id->qp_num = p.qp_num & 0xFFFFFF;
    r = cm_.sidr_reply(*id->connection,
                       {.status = cm::SidrStatus::Valid,
                        .qpn = rocev2::Qpn{id->qp_num},
                        .qkey = rocev2::Qkey{id->qkey},
                        .private_data = ByteSpan(p.private_data, p.private_data_len)},
                       now);
  } else if (!id->active) {
    if (!p.valid || p.private_data_len > cm::Rep::kPrivateDataLength) return {EINVAL, {}};
    id->qp_num = p.qp_num & 0xFFFFFF;
    r = cm_.accept(*id->connection,
                   {.local_qpn = rocev2::Qpn{id->qp_num},
                    .starting_psn = rocev2::Psn{id->seq_num},
                    .responder_resources = p.responder_resources,
                    .initiator_depth = p.initiator_depth,
                    .rnr_retry_count = p.rnr_retry_count,
                    .private_data = ByteSpan(p.private_data, p.private_data_len)},
                   now);
  } else {  // the active side after CONNECT_RESPONSE: the RTU (cma_rep_recv)
    r = cm_.accept(*id->connection, {}, now);
  }
  return {errno_of(r), {}};
}

UcmaService::Reply UcmaService::reject(Channel& ch, ByteSpan body, Instant now) {
  const auto cmd = read_struct<rdma_ucm_reject>(body);
  if (!cmd) return {EINVAL, {}};
  CmId* id = id_on(ch, cmd->id);
  if (id == nullptr || !id->connection) return {EINVAL, {}};
  // ucma_reject: 0 means consumer defined (28); only that and 35 (ECE) are the user's to give.
  if (cmd->reason != 0 && cmd->reason != 28 && cmd->reason != 35) return {EINVAL, {}};
  const ByteSpan data(cmd->private_data, std::min<std::size_t>(cmd->private_data_len, sizeof(cmd->private_data)));
  cm::CmResult r;
  if (id->ud) {
    r = cm_.sidr_reply(*id->connection, {.status = cm::SidrStatus::Rejected, .private_data = data}, now);
  } else {
    r = cm_.reject(*id->connection, data, now);
  }
  return {errno_of(r), {}};
}

UcmaService::Reply UcmaService::disconnect(Channel& ch, ByteSpan body, Instant now) {
  const auto cmd = read_struct<rdma_ucm_disconnect>(body);
  if (!cmd) return {EINVAL, {}};
  CmId* id = id_on(ch, cmd->id);
  if (id == nullptr || !id->connection) return {EINVAL, {}};
  // rdma_disconnect: a DREQ, or the DREP after one came; in any other state (a second call,
  // after REJECTED or in timewait, a UD id) there is nothing to send and it still succeeds.
  if (!id->ud) cm_.disconnect(*id->connection, {}, now);
  return {0, {}};
}

UcmaService::Reply UcmaService::init_qp_attr(Channel& ch, ByteSpan body) {
  const auto cmd = read_struct<rdma_ucm_init_qp_attr>(body);
  if (!cmd) return {EINVAL, {}};
  CmId* id = id_on(ch, cmd->id);
  if (id == nullptr || !id->on_device || cmd->qp_state > static_cast<std::uint32_t>(QpState::Rts)) return {EINVAL, {}};
  const auto state = static_cast<QpState>(cmd->qp_state);
  ib_uverbs_qp_attr attr{};
  attr.qp_state = cmd->qp_state;
  attr.port_num = 1;
  if (!id->connection || id->ud) {  // cma_ib_init_qp_attr
    attr.qp_attr_mask = rocev2::qp_attr::kState | rocev2::qp_attr::kPkeyIndex | rocev2::qp_attr::kPort;
    if (id->ud) {
      attr.qkey = id->qkey;
      attr.qp_attr_mask |= rocev2::qp_attr::kQkey;
    } else {
      attr.qp_access_flags = 0;
      attr.qp_attr_mask |= rocev2::qp_attr::kAccessFlags;
    }
  } else {  // ib_cm_init_qp_attr
    const auto a = cm_.qp_attributes(*id->connection, state);
    if (!a) return {EINVAL, {}};
    namespace qa = rocev2::qp_attr;
    switch (state) {
      case QpState::Init:
        attr.qp_attr_mask = qa::kState | qa::kAccessFlags | qa::kPkeyIndex | qa::kPort;
        attr.qp_access_flags = a->access;
        break;
      case QpState::Rtr:
        attr.qp_attr_mask = qa::kState | qa::kAv | qa::kPathMtu | qa::kDestQpn | qa::kRqPsn |
                            qa::kMaxDestRdAtomic | qa::kMinRnrTimer;
        attr.path_mtu = static_cast<std::uint32_t>(a->path_mtu);
        attr.dest_qp_num = a->dest_qpn.value();
        attr.max_dest_rd_atomic = a->max_dest_rd_atomic;
        attr.min_rnr_timer = a->min_rnr_timer;
        fill_ah_attr(attr.ah_attr, *id);
        break;
      case QpState::Rts:
        attr.qp_attr_mask = qa::kState | qa::kSqPsn | qa::kTimeout | qa::kRetryCnt | qa::kRnrRetry | qa::kMaxQpRdAtomic;
        attr.sq_psn = a->sq_psn.value();
        attr.timeout = id->ack_timeout.value_or(a->timeout);
        attr.retry_cnt = a->retry_count;
        attr.rnr_retry = a->rnr_retry_count;
        attr.max_rd_atomic = a->max_rd_atomic;
        break;
      default:
        return {EINVAL, {}};
    }
  }
  if (state == QpState::Rtr) attr.rq_psn = id->seq_num;  // rdma_init_qp_attr: always the id's own
  return {0, bytes_of(attr)};
}

void UcmaService::fill_ah_attr(ib_uverbs_ah_attr& out, const CmId& id) const {
  out = {};
  write_gid(out.grh.dgid, id.dst.ip);
  out.grh.flow_label = id.flow_label;
  out.grh.sgid_index = 0;
  out.grh.hop_limit = kHopLimit;
  out.grh.traffic_class = id.tos;
  out.is_global = 1;
  out.port_num = 1;
}

UcmaService::Reply UcmaService::get_event(Channel& ch) {
  if (ch.markers > 0) --ch.markers;
  if (ch.events.empty()) {
    top_up_markers(ch);
    return {EAGAIN, {}};
  }
  QueuedEvent event = ch.events.front();
  ch.events.pop_front();
  erase_events(ch, 1);
  if (const auto owner = ids_.find(event.counted_id); owner != ids_.end()) {
    ++owner->second.events_reported;
    if (event.resp.event == ucma::kConnectRequest) ++owner->second.backlog;
  }
  ++counters_.events_delivered;
  top_up_markers(ch);
  return {0, bytes_of(event.resp)};
}

UcmaService::Reply UcmaService::set_option(Channel& ch, ByteSpan body) {
  const auto cmd = read_struct<rdma_ucm_set_option>(body);
  if (!cmd) return {EINVAL, {}};
  CmId* id = id_on(ch, cmd->id);
  if (id == nullptr) return {EINVAL, {}};
  const ByteSpan value = body.subspan(sizeof(rdma_ucm_set_option));
  if (value.size() != cmd->optlen) return {EINVAL, {}};
  const auto int_value = [&]() -> std::optional<int> {
    if (value.size() != sizeof(int)) return std::nullopt;
    int v = 0;
    std::memcpy(&v, value.data(), sizeof(v));
    return v;
  };
  if (cmd->level == RDMA_OPTION_ID) {
    switch (cmd->optname) {
      case RDMA_OPTION_ID_TOS:
        if (value.size() != 1) return {EINVAL, {}};
        id->tos = value[0];
        return {0, {}};
      case RDMA_OPTION_ID_REUSEADDR:
        if (!int_value()) return {EINVAL, {}};
        if (id->state() != CmIdState::Idle) return {EINVAL, {}};
        id->reuseaddr = *int_value() != 0;
        return {0, {}};
      case RDMA_OPTION_ID_AFONLY:
        return int_value() ? Reply{0, {}} : Reply{EINVAL, {}};
      case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (value.size() != 1) return {EINVAL, {}};
        id->ack_timeout = value[0];
        return {0, {}};
      default:
        return {ENOSYS, {}};
    }
  }
  return {ENOSYS, {}};  // RDMA_OPTION_IB_PATH: paths come from the route here, not from ibacm
}

UcmaService::Reply UcmaService::notify(Channel& ch, ByteSpan body, Instant now) {
  const auto cmd = read_struct<rdma_ucm_notify>(body);
  if (!cmd) return {EINVAL, {}};
  CmId* id = id_on(ch, cmd->id);
  if (id == nullptr || !id->connection) return {EINVAL, {}};
  if (static_cast<int>(cmd->event) != kIbEventCommEst) return {0, {}};
  return {errno_of(cm_.notify_communication_established(*id->connection, now)), {}};
}

// The id moves to the channel the command was written on, with its queued events.
UcmaService::Reply UcmaService::migrate_id(Channel& ch, const ucma::Frame& request, uid_t uid) {
  const auto cmd = read_struct<rdma_ucm_migrate_id>(ByteSpan(request.body.data(), request.body.size()));
  if (!cmd) return {EINVAL, {}};
  const auto source = channels_.find(request.aux_channel);
  if (source == channels_.end()) return {EBADF, {}};
  if (source->second.uid != uid && uid != 0) return {EACCES, {}};
  const auto it = ids_.find(cmd->id);
  if (it == ids_.end() || it->second.channel != source->first) return {EINVAL, {}};
  CmId& id = it->second;
  if (source->first != ch.token && ch.ids.size() >= config_.max_ids_per_channel) return {ENOMEM, {}};
  if (source->first != ch.token) {
    std::deque<QueuedEvent>& from = source->second.events;
    std::size_t moved = 0;
    for (auto e = from.begin(); e != from.end();) {
      if (e->counted_id == id.id) {
        ch.events.push_back(*e);
        e = from.erase(e);
        ++moved;
      } else {
        ++e;
      }
    }
    erase_events(source->second, moved);
    users_[ch.uid].events += moved;
    id.channel = ch.token;
    source->second.ids.erase(id.id);
    ch.ids.insert(id.id);
    top_up_markers(ch);
  }
  return {0, bytes_of(rdma_ucm_migrate_resp{.events_reported = id.events_reported})};
}

// ---------------------------------------------------------------------------------------
// Events from the connection manager

CmId* UcmaService::id_of_connection(cm::ConnectionId c) {
  const auto it = id_of_connection_.find(c.value());
  if (it == id_of_connection_.end()) return nullptr;
  const auto id = ids_.find(it->second);
  return id != ids_.end() ? &id->second : nullptr;
}

rdma_ucm_event_resp UcmaService::event_for(const CmId& id, std::uint32_t type, std::int32_t status) const {
  rdma_ucm_event_resp resp{};
  resp.uid = id.uid;
  resp.id = id.id;
  resp.event = type;
  resp.status = static_cast<std::uint32_t>(status);
  return resp;
}

// ucma_copy_conn_event. The CM reports the peer's responder resources and initiator depth;
// rdma_cm reports them from our side (cm_format_req_event swaps them).
void UcmaService::fill_conn_param(rdma_ucm_conn_param& out, const cm::CmEvent& e, std::size_t skip) const {
  const std::size_t length = e.private_data.size() > skip ? e.private_data.size() - skip : 0;
  const std::size_t copied = std::min(length, sizeof(out.private_data));
  if (copied > 0) std::memcpy(out.private_data, e.private_data.data() + skip, copied);
  out.private_data_len = static_cast<std::uint8_t>(copied);
  out.responder_resources = e.initiator_depth;
  out.initiator_depth = e.responder_resources;
  out.retry_count = e.retry_count;
  out.rnr_retry_count = e.rnr_retry_count;
  out.qp_num = e.peer_qpn.value();
}

void UcmaService::on_cm_event(const cm::CmEvent& e) {
  using T = cm::CmEventType;
  if (e.type == T::ConnectRequest || e.type == T::SidrRequest) return on_connect_request(e);
  CmId* id = id_of_connection(e.connection);
  if (id == nullptr || id->uid == 0) return;  // not (yet) the application's: ucma_event_handler
  QueuedEvent q{.id = id->id};
  switch (e.type) {
    case T::ConnectResponse:
      q.resp = event_for(*id, ucma::kConnectResponse, 0);
      fill_conn_param(q.resp.param.conn, e, 0);
      break;
    case T::Established:
      if (id->active) return;  // librdmacm reports ESTABLISHED itself once it sent the RTU
      q.resp = event_for(*id, ucma::kEstablished, 0);
      break;
    case T::Rejected:
      q.resp = event_for(*id, ucma::kRejected, static_cast<std::int32_t>(e.reason));
      fill_conn_param(q.resp.param.conn, e, 0);
      break;
    case T::Unreachable:
      q.resp = event_for(*id, ucma::kUnreachable, e.status);
      break;
    case T::Disconnected:
      if (id->state() != CmIdState::Connect) return;  // one DISCONNECTED per connection
      ids_machine_.move(*id, CmIdState::Disconnect);
      q.resp = event_for(*id, ucma::kDisconnected, e.status);
      break;
    case T::TimewaitExit:
      if (id->state() != CmIdState::Disconnect) return;  // cma_ib_handler: only after a disconnect
      q.resp = event_for(*id, ucma::kTimewaitExit, 0);
      break;
    case T::SidrResponse:
      if (e.sidr_status != cm::SidrStatus::Valid) {
        q.resp = event_for(*id, ucma::kUnreachable, static_cast<std::int32_t>(e.sidr_status));
        break;
      }
      q.resp = event_for(*id, ucma::kEstablished, 0);
      q.resp.param.ud.qp_num = e.peer_qpn.value();
      q.resp.param.ud.qkey = e.qkey.value();
      fill_ah_attr(q.resp.param.ud.ah_attr, *id);
      {
        const std::size_t n = std::min(e.private_data.size(), sizeof(q.resp.param.ud.private_data));
        if (n > 0) std::memcpy(q.resp.param.ud.private_data, e.private_data.data(), n);
        q.resp.param.ud.private_data_len = static_cast<std::uint8_t>(n);
      }
      break;
    default:
      return;
  }
  queue_event(id->id, q);
}

// cma_ib_req_handler + ucma_connect_event_handler: a new id on the listener's channel, told
// with the listener's uid; no room in the backlog drops the request without a REJ.
void UcmaService::on_connect_request(const cm::CmEvent& e) {
  const auto parsed = cm::parse_ip_service_id(e.service_id);
  const auto header = cm::parse_cma_header(e.private_data);
  CmId* listener = nullptr;
  if (parsed) {
    if (const auto port = ports_.find({static_cast<std::uint16_t>(parsed->port_space), parsed->port}); port != ports_.end()) {
      for (std::uint32_t number : port->second) {
        if (ids_.at(number).state() == CmIdState::Listen) listener = &ids_.at(number);
      }
    }
  }
  const auto destination = header ? cm::cma_destination_ipv4(*header) : std::nullopt;
  const auto source = header ? cm::cma_source_ipv4(*header) : std::nullopt;
  // The header must name our address (a listener on INADDR_ANY listens on the vnic's one),
  // and the request's kind the listener's QP type (cma_ib_check_req_qp_type; the IB port
  // space takes both).
  const bool wrong_address = !destination || !source || *destination != config_.address;
  const bool sidr = e.type == cm::CmEventType::SidrRequest;
  const bool wrong_type = listener != nullptr && listener->ps != cm::PortSpace::Ib && sidr != listener->ud;
  // REJ 28 (SIDR_REP status 2): cma_ib_req_handler fails and ib_cm destroys the cm_id it made
  // for the REQ, whose cm_destroy_id sends that answer. Destroyed, not only rejected: no id
  // holds the connection, and a rejected one would stay in the CM for ever.
  if (listener == nullptr || wrong_address || wrong_type) {
    ++counters_.connect_requests_rejected_address;
    cm_.destroy(e.connection, now_);
    return;
  }
  const auto channel = channels_.find(listener->channel);
  if (listener->backlog == 0 || channel == channels_.end() || !room_for_event(channel->second) ||
      !room_for_id(channel->second)) {
    ++counters_.connect_requests_dropped_backlog;
    cm_.abandon(e.connection, now_);
    return;
  }
  --listener->backlog;
  CmId& child = new_id(channel->second, listener->ps, sidr);
  ids_machine_.move(child, CmIdState::Connect);
  child.on_device = true;
  child.bound = false;  // shares the listener's port without holding it
  child.src = Endpoint{*destination, parsed->port};
  child.dst = Endpoint{*source, header->source_port};
  child.connection = e.connection;
  child.listener = listener->id;
  child.flow_label = roce_flow_label(child.dst.port, child.src.port);
  id_of_connection_[e.connection.value()] = child.id;
  QueuedEvent q{.id = child.id};
  q.resp = event_for(*listener, ucma::kConnectRequest, 0);
  q.resp.id = child.id;
  if (child.ud) {
    const std::size_t n = std::min(cm::cma_user_data(e.private_data).size(), sizeof(q.resp.param.ud.private_data));
    std::memcpy(q.resp.param.ud.private_data, cm::cma_user_data(e.private_data).data(), n);
    q.resp.param.ud.private_data_len = static_cast<std::uint8_t>(n);
  } else {
    fill_conn_param(q.resp.param.conn, e, cm::kCmaHeaderLength);
  }
  queue_event(listener->id, q);
}

// ---------------------------------------------------------------------------------------
// Time and listing

// Only the ids resolving an address are looked at, never every id.
std::optional<Instant> UcmaService::next_deadline() const {
  if (!doomed_.empty()) return now_;  // the next batch of a teardown: on the loop's next turn
  std::optional<Instant> next = cm_.next_deadline();
  for (std::uint32_t number : resolving_) {
    const auto it = ids_.find(number);
    if (it == ids_.end() || !it->second.resolve_deadline) continue;
    const Instant poll = std::min(*it->second.resolve_deadline, now_ + kResolvePoll);
    if (!next || poll < *next) next = poll;
  }
  return next;
}

void UcmaService::advance(Instant now) {
  now_ = now;
  tear_down_some(now);
  cm_.advance(now);
  const std::vector<std::uint32_t> resolving(resolving_.begin(), resolving_.end());
  for (std::uint32_t number : resolving) {
    if (const auto it = ids_.find(number); it != ids_.end() && it->second.resolve_deadline) check_resolution(it->second, now);
  }
}

nlohmann::json UcmaService::listing() const {
  nlohmann::json listeners = nlohmann::json::array();
  nlohmann::json connections = nlohmann::json::array();
  for (const auto& [number, id] : ids_) {
    const std::string local = (id.on_device ? id.src.ip.to_string() : std::string("0.0.0.0")) + ":" + std::to_string(id.src.port);
    if (id.state() == CmIdState::Listen) {
      listeners.push_back({{"id", number}, {"port_space", std::string(cm::port_space_name(id.ps))}, {"local", local},
                           {"backlog_free", id.backlog}});
      continue;
    }
    nlohmann::json entry{{"id", number}, {"state", std::string(to_string(id.state()))},
                         {"port_space", std::string(cm::port_space_name(id.ps))}, {"local", local}};
    if (has_peer(id.state())) {
      entry["peer"] = id.dst.ip.to_string() + ":" + std::to_string(id.dst.port);
    }
    if (id.connection) {
      entry["comm_id"] = id.connection->value();
      if (const auto s = cm_.state(*id.connection)) entry["cm_state"] = std::string(cm::to_string(*s));
      entry["qpn"] = id.qp_num;
    }
    connections.push_back(std::move(entry));
  }
  return {{"listeners", listeners}, {"ids", connections}, {"cm_connections", cm_.connection_count()}};
}

void UcmaService::set_address_and_mtu(stack::Ipv4Address address, int netdev_mtu) {
  config_.address = address;
  config_.netdev_mtu = netdev_mtu;
  path_mtu_ = path_mtu_for(netdev_mtu);
  cm_.set_local_address(address);
}

}  // namespace rrdma::verbs
