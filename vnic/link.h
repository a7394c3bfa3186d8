// Links over rtnetlink with libnl-route-3, in the daemon and in the CLI: configuration
// (the TAP's MAC, MTU, master and up flag; bridges created and deleted; uplinks enslaved
// and released; no `ip` command), and, in the daemon only, the kernel's notifications
// about the TAP (LinkMonitor), read on the event loop.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "stack/addresses.h"

struct nl_msg;
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
  bool up = false;       // IFF_UP: administratively up
  bool running = false;  // IFF_RUNNING: up and with carrier (operationally up)
  std::uint32_t mtu = 0;
  std::optional<stack::MacAddress> mac;  // none for a link without a 6-byte address
};

struct NetlinkSocketDeleter {
  void operator()(nl_sock* socket) const;
};
using NetlinkSocket = std::unique_ptr<nl_sock, NetlinkSocketDeleter>;

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

// One NETLINK_ROUTE socket. Every call is a synchronous request/ack: set-up and tear-down
// work, and the one question LinkMonitor asks after an overrun (the kernel answers an
// rtnetlink request inside the sendmsg call, so the reply is queued before it is read).
class LinkControl {
 public:
  LinkControl();
  ~LinkControl();
  LinkControl(const LinkControl&) = delete;
  LinkControl& operator=(const LinkControl&) = delete;

  std::optional<LinkInfo> find(const std::string& name);
  std::optional<LinkInfo> find(int ifindex);
  // The link's IPv4 addresses, primary ones first, as the kernel lists them.
  std::vector<stack::Ipv4Cidr> ipv4_addresses(int ifindex);
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
  NetlinkSocket socket_;
};

// What one netlink message says about a link. Netlink input is hostile until libnl's
// parser has checked it (every attribute's length against the route/link policy); only
// the kernel's own messages count (a process with CAP_NET_ADMIN can send to our socket).
struct LinkNotification {
  enum class Verdict {
    kNewLink,   // RTM_NEWLINK from the kernel, parsed: `link` is its state
    kIgnored,   // a well-formed message of another kind (RTM_DELLINK)
    kRejected,  // not from the kernel, of a type route/link does not know, or malformed
  };
  Verdict verdict = Verdict::kRejected;
  LinkInfo link;  // only the fields the message carried
};
LinkNotification read_link_notification(nl_msg* message);

// The kernel's notifications (RTNLGRP_LINK) about one link, read without ever blocking:
// the event loop watches fd() and calls drain() when it is readable.
class LinkMonitor {
 public:
  // Subscribes to the link notifications of the network namespace. `queries` answers the
  // one question the notifications cannot: the link's state after the kernel dropped some
  // of them (the socket's receive buffer overran).
  LinkMonitor(LinkControl& queries, int ifindex);
  ~LinkMonitor();
  LinkMonitor(const LinkMonitor&) = delete;
  LinkMonitor& operator=(const LinkMonitor&) = delete;

  int fd() const;
  // Reads until the socket is empty, or at most 256 datagrams (a flood cannot hold the
  // loop). `states`: what the kernel announced for the link, oldest first, changes or not
  // (RTM_NEWLINK also reports statistics and other fields); after an overrun, or when
  // datagrams are left, the state asked of the kernel comes last. `more`: datagrams are
  // left; the loop's readiness is edge-triggered, so the caller must come back on its own.
  struct Drained {
    std::vector<LinkInfo> states;
    bool more = false;
  };
  Drained drain();

  // link_notifications (RTM_NEWLINK of this link), link_messages_rejected, link_overruns.
  std::vector<std::pair<std::string, std::uint64_t>> counters() const;

 private:
  static int on_message(nl_msg* message, void* monitor);
  void take(nl_msg* message);
  void ask_state();

  LinkControl& queries_;
  int ifindex_;
  NetlinkSocket socket_;
  std::vector<LinkInfo> announced_;  // filled by take() during drain()
  std::uint64_t notifications_ = 0;
  std::uint64_t rejected_ = 0;
  std::uint64_t overruns_ = 0;
};

// The kernel's IPv4 address notifications (RTNLGRP_IPV4_IFADDR) of the network namespace,
// only as a reason to ask again (LinkControl::ipv4_addresses): their content is never
// parsed, so a forged one can make the daemon ask, and nothing more. `up --netdev`.
class AddressWatch {
 public:
  AddressWatch();
  ~AddressWatch();
  AddressWatch(const AddressWatch&) = delete;
  AddressWatch& operator=(const AddressWatch&) = delete;
  int fd() const;
  // Reads what is queued, at most 256 datagrams; true if any arrived (or the socket overran).
  // `more`: datagrams are left (come back: the loop's readiness is edge-triggered).
  bool drain(bool& more);

 private:
  NetlinkSocket socket_;
};

}  // namespace rrdma::vnic
