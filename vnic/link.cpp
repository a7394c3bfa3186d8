#include "vnic/link.h"

#include <linux/if.h>

#include <fstream>

#include <netlink/errno.h>
#include <netlink/netlink.h>
#include <netlink/route/link.h>
#include <netlink/route/link/bridge.h>

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
  info.name = rtnl_link_get_name(link);
  if (const char* kind = rtnl_link_get_type(link)) info.kind = kind;
  info.master = rtnl_link_get_master(link);
  info.up = (rtnl_link_get_flags(link) & IFF_UP) != 0;
  return info;
}

}  // namespace

NetlinkError::NetlinkError(const std::string& what, int nl_error)
    : std::runtime_error(what + ": " + nl_geterror(nl_error)), code_(nl_error < 0 ? -nl_error : nl_error) {}

void LinkControl::SocketDeleter::operator()(nl_sock* socket) const { nl_socket_free(socket); }

LinkControl::LinkControl() : socket_(nl_socket_alloc()) {
  if (!socket_) throw NetlinkError("nl_socket_alloc", -NLE_NOMEM);
  check(nl_connect(socket_.get(), NETLINK_ROUTE), "connect to rtnetlink");
}

LinkControl::~LinkControl() = default;

std::optional<LinkInfo> LinkControl::find(const std::string& name) {
  rtnl_link* raw = nullptr;
  const int rc = rtnl_link_get_kernel(socket_.get(), 0, name.c_str(), &raw);
  if (rc == -NLE_OBJ_NOTFOUND || rc == -NLE_NODEV) return std::nullopt;
  check(rc, "look up link " + name);
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

}  // namespace rrdma::vnic
