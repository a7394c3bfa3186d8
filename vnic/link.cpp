#include "vnic/link.h"

#include <arpa/inet.h>
#include <linux/if.h>
#include <linux/if_addr.h>
#include <linux/rtnetlink.h>

#include <cstring>
#include <fstream>

#include <netlink/errno.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/object.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/cache.h>
#include <netlink/route/link/bridge.h>
#include <netlink/socket.h>

namespace rrdma::vnic {
namespace {

struct LinkDeleter {
  void operator()(rtnl_link* link) const { rtnl_link_put(link); }
};
struct AddressDeleter {
  void operator()(nl_addr* address) const { nl_addr_put(address); }
};
struct CacheDeleter {
  void operator()(nl_cache* cache) const { nl_cache_free(cache); }
};
using LinkPtr = std::unique_ptr<rtnl_link, LinkDeleter>;
using AddressPtr = std::unique_ptr<nl_addr, AddressDeleter>;
using CachePtr = std::unique_ptr<nl_cache, CacheDeleter>;

void check(int rc, const std::string& what) {
  if (rc < 0) throw NetlinkError(what, rc);
}

LinkPtr allocate_link() {
  LinkPtr link(rtnl_link_alloc());
  if (!link) throw NetlinkError("rtnl_link_alloc", -NLE_NOMEM);
  return link;
}

LinkInfo describe(rtnl_link* link) {
  LinkInfo info;
  info.ifindex = rtnl_link_get_ifindex(link);
  // NULL for an object without IFLA_IFNAME (libnl's parser refuses such messages).
  if (const char* name = rtnl_link_get_name(link)) info.name = name;
  if (const char* kind = rtnl_link_get_type(link)) info.kind = kind;
  info.master = rtnl_link_get_master(link);
  info.up = (rtnl_link_get_flags(link) & IFF_UP) != 0;
  info.running = (rtnl_link_get_flags(link) & IFF_RUNNING) != 0;
  info.mtu = rtnl_link_get_mtu(link);
  if (nl_addr* address = rtnl_link_get_addr(link); address != nullptr && nl_addr_get_len(address) == 6) {
    stack::MacAddress mac;
    std::memcpy(mac.bytes.data(), nl_addr_get_binary_addr(address), 6);
    info.mac = mac;
  }
  return info;
}

NetlinkSocket connect_route_socket() {
  NetlinkSocket socket(nl_socket_alloc());
  if (!socket) throw NetlinkError("nl_socket_alloc", -NLE_NOMEM);
  check(nl_connect(socket.get(), NETLINK_ROUTE), "connect to rtnetlink");
  return socket;
}

// The monitor's receive buffer. nl_connect() sets 32 KiB, less than the kernel's default
// (212992 bytes): 28 RTM_NEWLINK notifications of a TAP, which a host starting a few
// containers at once sends in a moment. Capped by net.core.rmem_max.
constexpr int kMonitorReceiveBuffer = 1 << 20;
// Datagrams one drain() reads at most, so that a flood cannot hold the loop; whatever is
// left is read on the next turn (drain() says so).
constexpr int kMonitorDatagramsPerDrain = 256;
// The largest datagram read. libnl peeks at each datagram to size its buffer by default,
// and returns without consuming a datagram whose peek read 0 bytes (review; a process
// cannot send one today: netlink answers a zero-length send with ENODATA). Without peeking,
// each read takes exactly one datagram off the queue, whatever it holds; link notifications
// are a few hundred bytes, a longer datagram is refused as truncated.
constexpr std::size_t kMonitorDatagramBytes = 64 * 1024;

}  // namespace

NetlinkError::NetlinkError(const std::string& what, int nl_error)
    : std::runtime_error(what + ": " + nl_geterror(nl_error)), code_(nl_error < 0 ? -nl_error : nl_error) {}

void NetlinkSocketDeleter::operator()(nl_sock* socket) const { nl_socket_free(socket); }

LinkControl::LinkControl() : socket_(connect_route_socket()) {}

LinkControl::~LinkControl() = default;

std::optional<LinkInfo> LinkControl::find(const std::string& name) {
  rtnl_link* raw = nullptr;
  const int rc = rtnl_link_get_kernel(socket_.get(), 0, name.c_str(), &raw);
  if (rc == -NLE_OBJ_NOTFOUND || rc == -NLE_NODEV) return std::nullopt;
  check(rc, "look up link " + name);
  LinkPtr link(raw);
  return describe(link.get());
}

std::optional<LinkInfo> LinkControl::find(int ifindex) {
  rtnl_link* raw = nullptr;
  const int rc = rtnl_link_get_kernel(socket_.get(), ifindex, nullptr, &raw);
  if (rc == -NLE_OBJ_NOTFOUND || rc == -NLE_NODEV) return std::nullopt;
  check(rc, "look up link " + std::to_string(ifindex));
  LinkPtr link(raw);
  return describe(link.get());
}

std::vector<std::string> LinkControl::ports_of(int bridge_ifindex) {
  nl_cache* raw = nullptr;
  check(rtnl_link_alloc_cache(socket_.get(), AF_UNSPEC, &raw), "list links");
  CachePtr cache(raw);
  std::vector<std::string> ports;
  for (nl_object* object = nl_cache_get_first(cache.get()); object != nullptr;
       object = nl_cache_get_next(object)) {
    // nl_cache holds rtnl_link objects; libnl's API hands them out as nl_object.
    auto* link = reinterpret_cast<rtnl_link*>(object);
    if (rtnl_link_get_master(link) == bridge_ifindex) ports.emplace_back(rtnl_link_get_name(link));
  }
  return ports;
}

void LinkControl::create_bridge(const std::string& name) {
  LinkPtr bridge(rtnl_link_bridge_alloc());
  if (!bridge) throw NetlinkError("rtnl_link_bridge_alloc", -NLE_NOMEM);
  rtnl_link_set_name(bridge.get(), name.c_str());
  rtnl_link_set_flags(bridge.get(), IFF_UP);
  check(rtnl_link_add(socket_.get(), bridge.get(), NLM_F_CREATE | NLM_F_EXCL),
        "create bridge " + name);
}

void LinkControl::remove(const std::string& name) {
  LinkPtr link = allocate_link();
  rtnl_link_set_name(link.get(), name.c_str());
  check(rtnl_link_delete(socket_.get(), link.get()), "delete link " + name);
}

void LinkControl::change(const std::string& name, const LinkChange& change) {
  rtnl_link* raw = nullptr;
  check(rtnl_link_get_kernel(socket_.get(), 0, name.c_str(), &raw), "look up link " + name);
  LinkPtr current(raw);
  LinkPtr wanted = allocate_link();
  if (change.mtu) rtnl_link_set_mtu(wanted.get(), *change.mtu);
  if (change.mac) {
    AddressPtr address(nl_addr_build(AF_LLC, change.mac->bytes.data(), change.mac->bytes.size()));
    if (!address) throw NetlinkError("nl_addr_build", -NLE_NOMEM);
    rtnl_link_set_addr(wanted.get(), address.get());
  }
  if (change.master) rtnl_link_set_master(wanted.get(), *change.master);
  if (change.tx_queue_length) rtnl_link_set_txqlen(wanted.get(), *change.tx_queue_length);
  if (change.set_up) rtnl_link_set_flags(wanted.get(), IFF_UP);
  check(rtnl_link_change(socket_.get(), current.get(), wanted.get(), 0), "configure link " + name);
}

bool LinkControl::disable_ipv6(const std::string& name) {
  std::ofstream knob("/proc/sys/net/ipv6/conf/" + name + "/disable_ipv6");
  knob << "1\n";
  knob.flush();
  return static_cast<bool>(knob);
}

namespace {

// nl_msg_parse() hands the parsed object to a callback; this one keeps a link's state.
// Called by libnl, a C library: nothing may be thrown through it (describe() allocates).
void keep_link(nl_object* object, void* out) {
  if (std::strcmp(nl_object_get_type(object), "route/link") != 0) return;
  // The object is an rtnl_link (its type says so); libnl's API hands it out as nl_object.
  auto* link = reinterpret_cast<rtnl_link*>(object);
  try {
    *static_cast<std::optional<LinkInfo>*>(out) = describe(link);
  } catch (...) {  // bad_alloc: the message counts as unparsed
    static_cast<std::optional<LinkInfo>*>(out)->reset();
  }
}

}  // namespace

LinkNotification read_link_notification(nl_msg* message) {
  using Verdict = LinkNotification::Verdict;
  const sockaddr_nl* sender = nlmsg_get_src(message);
  if (sender == nullptr || sender->nl_pid != 0) return {};
  const int type = nlmsg_hdr(message)->nlmsg_type;
  if (type != RTM_NEWLINK && type != RTM_DELLINK) return {};
  // route/link's parser: the header's length, then nlmsg_parse() against its policy.
  std::optional<LinkInfo> link;
  if (nl_msg_parse(message, keep_link, &link) < 0 || !link) return {};
  if (type != RTM_NEWLINK) return {Verdict::kIgnored, {}};
  return {Verdict::kNewLink, std::move(*link)};
}

LinkMonitor::LinkMonitor(LinkControl& queries, int ifindex)
    : queries_(queries), ifindex_(ifindex), socket_(nl_socket_alloc()) {
  if (!socket_) throw NetlinkError("nl_socket_alloc", -NLE_NOMEM);
  // Notifications carry sequence number 0; libnl's default check expects its own.
  nl_socket_disable_seq_check(socket_.get());
  check(nl_socket_modify_cb(socket_.get(), NL_CB_VALID, NL_CB_CUSTOM, on_message, this), "link monitor callback");
  check(nl_connect(socket_.get(), NETLINK_ROUTE), "connect to rtnetlink");
  check(nl_socket_set_buffer_size(socket_.get(), kMonitorReceiveBuffer, 0), "link monitor buffer");
  check(nl_socket_set_nonblocking(socket_.get()), "link monitor non-blocking");
  nl_socket_disable_msg_peek(socket_.get());
  check(nl_socket_set_msg_buf_size(socket_.get(), kMonitorDatagramBytes), "link monitor read size");
  check(nl_socket_add_membership(socket_.get(), RTNLGRP_LINK), "subscribe to link notifications");
}

LinkMonitor::~LinkMonitor() = default;

int LinkMonitor::fd() const { return nl_socket_get_fd(socket_.get()); }

LinkMonitor::Drained LinkMonitor::drain() {
  announced_.clear();
  bool overran = false;
  bool emptied = false;
  for (int datagrams = 0; datagrams < kMonitorDatagramsPerDrain; ++datagrams) {
    // One datagram a call, each of its messages through on_message().
    const int rc = nl_recvmsgs_default(socket_.get());
    if (rc == -NLE_AGAIN) {
      emptied = true;
      break;
    }
    if (rc == 0) continue;
    if (rc == -NLE_NOMEM) {  // ENOBUFS: the kernel dropped notifications
      ++overruns_;
      overran = true;
    } else {
      ++rejected_;  // a datagram libnl refused as a whole (truncated, a forged NLMSG_ERROR)
    }
  }
  // Notifications may have been dropped, or may still wait behind a flood: the kernel's
  // answer to a question is the state now.
  if (overran || !emptied) ask_state();
  return {std::move(announced_), !emptied};
}

std::vector<std::pair<std::string, std::uint64_t>> LinkMonitor::counters() const {
  return {{"link_notifications", notifications_}, {"link_messages_rejected", rejected_}, {"link_overruns", overruns_}};
}

// Called by libnl, a C library: nothing may be thrown through it.
int LinkMonitor::on_message(nl_msg* message, void* monitor) {
  try {
    static_cast<LinkMonitor*>(monitor)->take(message);
  } catch (...) {  // bad_alloc: the rest of the datagram is dropped, the next drain() goes on
    return NL_STOP;
  }
  return NL_OK;
}

void LinkMonitor::take(nl_msg* message) {
  const LinkNotification notification = read_link_notification(message);
  switch (notification.verdict) {
    case LinkNotification::Verdict::kNewLink:
      if (notification.link.ifindex != ifindex_) return;
      ++notifications_;
      announced_.push_back(notification.link);
      return;
    case LinkNotification::Verdict::kIgnored: return;
    case LinkNotification::Verdict::kRejected: ++rejected_; return;
  }
}

void LinkMonitor::ask_state() {
  try {
    if (auto link = queries_.find(ifindex_)) announced_.push_back(std::move(*link));
  } catch (const NetlinkError&) {
    // The next notification tells.
  }
}

std::vector<stack::Ipv4Cidr> LinkControl::ipv4_addresses(int ifindex) {
  nl_cache* cache = nullptr;
  check(rtnl_addr_alloc_cache(socket_.get(), &cache), "list addresses");
  std::vector<stack::Ipv4Cidr> primary, secondary;
  for (nl_object* object = nl_cache_get_first(cache); object != nullptr; object = nl_cache_get_next(object)) {
    auto* address = reinterpret_cast<rtnl_addr*>(object);
    nl_addr* local = rtnl_addr_get_local(address);
    if (rtnl_addr_get_ifindex(address) != ifindex || rtnl_addr_get_family(address) != AF_INET || local == nullptr ||
        nl_addr_get_len(local) != 4) {
      continue;
    }
    std::uint32_t network_order = 0;
    std::memcpy(&network_order, nl_addr_get_binary_addr(local), 4);
    const stack::Ipv4Cidr cidr{stack::Ipv4Address{ntohl(network_order)}, static_cast<std::uint8_t>(rtnl_addr_get_prefixlen(address))};
    ((rtnl_addr_get_flags(address) & IFA_F_SECONDARY) != 0 ? secondary : primary).push_back(cidr);
  }
  nl_cache_free(cache);
  primary.insert(primary.end(), secondary.begin(), secondary.end());
  return primary;
}

namespace {
int ignore_message(nl_msg*, void*) { return NL_OK; }
}  // namespace

AddressWatch::AddressWatch() : socket_(nl_socket_alloc()) {
  if (!socket_) throw NetlinkError("nl_socket_alloc", -NLE_NOMEM);
  nl_socket_disable_seq_check(socket_.get());
  check(nl_socket_modify_cb(socket_.get(), NL_CB_VALID, NL_CB_CUSTOM, ignore_message, nullptr), "address watch callback");
  check(nl_connect(socket_.get(), NETLINK_ROUTE), "connect to rtnetlink");
  check(nl_socket_set_nonblocking(socket_.get()), "address watch non-blocking");
  check(nl_socket_add_membership(socket_.get(), RTNLGRP_IPV4_IFADDR), "subscribe to address notifications");
}

AddressWatch::~AddressWatch() = default;

int AddressWatch::fd() const { return nl_socket_get_fd(socket_.get()); }

bool AddressWatch::drain(bool& more) {
  bool any = false;
  more = false;
  for (int datagrams = 0; datagrams < kMonitorDatagramsPerDrain; ++datagrams) {
    const int rc = nl_recvmsgs_default(socket_.get());
    if (rc == -NLE_AGAIN) return any;
    any = true;  // a message, an error, or an overrun (-NLE_NOMEM): ask again either way
  }
  more = true;
  return any;
}

}  // namespace rrdma::vnic
