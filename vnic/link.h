// Link configuration over rtnetlink with libnl-route-3: the TAP's MAC, MTU, master and
// up flag; bridges created and deleted; uplinks enslaved and released. No `ip` command.
#pragma once

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "stack/addresses.h"

struct nl_sock;

namespace rrdma::vnic {

class NetlinkError : public std::runtime_error {
 public:
  NetlinkError(const std::string& what, int nl_error);
  int code() const { return code_; }

 private:
  int code_;
};

struct LinkInfo {
  int ifindex = 0;
  std::string name;
  std::string kind;  // IFLA_INFO_KIND: "bridge", "tun", "veth", "" for plain devices
  int master = 0;    // ifindex of the bridge it is a port of, 0 if none
  bool up = false;
};

// What to change on a link; unset fields are left alone.
struct LinkChange {
  std::optional<std::uint32_t> mtu;
  std::optional<stack::MacAddress> mac;
  std::optional<int> master;  // 0 releases the link from its bridge
  std::optional<std::uint32_t> tx_queue_length;  // frames the kernel queues on the link
  bool set_up = false;

  static LinkChange up() {
    LinkChange change;
    change.set_up = true;
    return change;
  }
  static LinkChange master_of(int bridge_ifindex, bool and_up) {
    LinkChange change;
    change.master = bridge_ifindex;
    change.set_up = and_up;
    return change;
  }
};

// One NETLINK_ROUTE socket. Every call is a synchronous request/ack: this is set-up and
// tear-down work, never on the event loop's path.
class LinkControl {
 public:
  LinkControl();
  ~LinkControl();
  LinkControl(const LinkControl&) = delete;
  LinkControl& operator=(const LinkControl&) = delete;

  std::optional<LinkInfo> find(const std::string& name);
  // The names of the links whose master is `bridge_ifindex`.
  std::vector<std::string> ports_of(int bridge_ifindex);
  void create_bridge(const std::string& name);
  void remove(const std::string& name);
  void change(const std::string& name, const LinkChange& change);
  // Keeps the kernel from giving the link any IPv6 address (link-local included) and
  // from sending router solicitations or MLD reports through it: writes
  // /proc/sys/net/ipv6/conf/NAME/disable_ipv6. False when the kernel has no IPv6.
  static bool disable_ipv6(const std::string& name);

 private:
  struct SocketDeleter {
    void operator()(nl_sock* socket) const;
  };
  std::unique_ptr<nl_sock, SocketDeleter> socket_;
};

}  // namespace rrdma::vnic
