// The link monitor (vnic/link.h): read_link_notification() over RTM_NEWLINK/RTM_DELLINK
// messages the kernel sent about a TAP (tests/data/rtnl_*.bin, see CAPTURES.md) and over
// hostile variants of them; then LinkMonitor against the kernel itself, in a network
// namespace of the test's own (root only).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <linux/if.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <netlink/msg.h>

#include "vnic/link.h"

using namespace rrdma::vnic;
using Verdict = LinkNotification::Verdict;

namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes captured(const std::string& name) {
  std::ifstream file(std::string(RRDMA_TEST_DATA_DIR) + "/" + name, std::ios::binary);
  REQUIRE(file);
  return Bytes(std::istreambuf_iterator<char>(file), {});
}

// Offsets in the captured messages: nlmsghdr (16) + ifinfomsg (16), then the attributes,
// IFLA_IFNAME first ("rvcap0": 4 + 7 bytes), IFLA_MTU at 76.
constexpr std::size_t kFirstAttribute = 32;
constexpr std::size_t kMtuAttribute = 76;

void put16(Bytes& bytes, std::size_t at, std::uint16_t value) { std::memcpy(&bytes[at], &value, sizeof(value)); }
void put32(Bytes& bytes, std::size_t at, std::uint32_t value) { std::memcpy(&bytes[at], &value, sizeof(value)); }

struct MessageDeleter {
  void operator()(nl_msg* message) const { nlmsg_free(message); }
};

// The message as recvmsgs() hands it to the monitor's callback: framed by the header's
// length (recvmsgs has checked that it fits the datagram), protocol and sender set.
LinkNotification notification_of(const Bytes& bytes, std::uint32_t sender_port = 0) {
  std::unique_ptr<nl_msg, MessageDeleter> message(nlmsg_convert(reinterpret_cast<nlmsghdr*>(const_cast<std::uint8_t*>(bytes.data()))));
  REQUIRE(message);
  nlmsg_set_proto(message.get(), NETLINK_ROUTE);
  sockaddr_nl sender{};
  sender.nl_family = AF_NETLINK;
  sender.nl_pid = sender_port;
  nlmsg_set_src(message.get(), &sender);
  return read_link_notification(message.get());
}

}  // namespace

TEST_CASE("link notification: the kernel's RTM_NEWLINK of a TAP, up and down", "[vnic][link]") {
  const LinkNotification up = notification_of(captured("rtnl_newlink_tap_up.bin"));
  REQUIRE(up.verdict == Verdict::kNewLink);
  CHECK(up.link.ifindex == 2);
  CHECK(up.link.name == "rvcap0");
  CHECK(up.link.kind == "tun");
  CHECK(up.link.up);
  CHECK(up.link.running);

  const LinkNotification down = notification_of(captured("rtnl_newlink_tap_down.bin"));
  REQUIRE(down.verdict == Verdict::kNewLink);
  CHECK(down.link.ifindex == 2);
  CHECK_FALSE(down.link.up);
  CHECK_FALSE(down.link.running);
}

TEST_CASE("link notification: RTM_DELLINK is parsed and ignored", "[vnic][link]") {
  CHECK(notification_of(captured("rtnl_dellink_tap.bin")).verdict == Verdict::kIgnored);
}

TEST_CASE("link notification: only the kernel's messages count", "[vnic][link]") {
  CHECK(notification_of(captured("rtnl_newlink_tap_up.bin"), 4242).verdict == Verdict::kRejected);
}

TEST_CASE("link notification: hostile variants are rejected or read within bounds", "[vnic][link]") {
  Bytes message = captured("rtnl_newlink_tap_up.bin");
  SECTION("another message type") {
    put16(message, 4, RTM_NEWADDR);
    CHECK(notification_of(message).verdict == Verdict::kRejected);
  }
  SECTION("shorter than its ifinfomsg") {
    message.resize(16 + 8);
    put32(message, 0, 16 + 8);
    CHECK(notification_of(message).verdict == Verdict::kRejected);
  }
  SECTION("IFLA_MTU shorter than a u32") {
    put16(message, kMtuAttribute, 4 + 2);
    CHECK(notification_of(message).verdict == Verdict::kRejected);
  }
  SECTION("IFLA_IFNAME without its terminating NUL") {
    message[kFirstAttribute + 4 + 6] = 'x';
    CHECK(notification_of(message).verdict == Verdict::kRejected);
  }
  SECTION("an attribute that runs past the message: it and the rest are left out") {
    put16(message, kMtuAttribute, 0xfff0);
    const LinkNotification notification = notification_of(message);
    REQUIRE(notification.verdict == Verdict::kNewLink);
    CHECK(notification.link.name == "rvcap0");  // IFLA_IFNAME comes before it
    CHECK(notification.link.up);
  }
  SECTION("the first attribute runs past the message: no IFLA_IFNAME, which libnl requires") {
    put16(message, kFirstAttribute, 0xfff0);
    CHECK(notification_of(message).verdict == Verdict::kRejected);
  }
  SECTION("a message of nothing but its header") {
    message.resize(16);
    put32(message, 0, 16);
    CHECK(notification_of(message).verdict == Verdict::kRejected);
  }
}

namespace {

// The calling thread in a network namespace of its own until the end of the scope: a
// loopback interface (ifindex 1, down) nobody else touches.
class PrivateNetworkNamespace {
 public:
  PrivateNetworkNamespace() : original_(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) {
    REQUIRE(original_ >= 0);
    REQUIRE(::unshare(CLONE_NEWNET) == 0);
  }
  ~PrivateNetworkNamespace() {
    ::setns(original_, CLONE_NEWNET);
    ::close(original_);
  }

 private:
  int original_;
};

// Each call makes the kernel send one RTM_NEWLINK about lo.
void change_loopback(unsigned long request_code, const ifreq& change) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  ifreq request = change;
  std::strcpy(request.ifr_name, "lo");
  const int rc = ::ioctl(fd, request_code, &request);
  ::close(fd);
  REQUIRE(rc == 0);
}
void set_loopback(bool up) {
  ifreq change{};
  change.ifr_flags = up ? IFF_UP : 0;
  change_loopback(SIOCSIFFLAGS, change);
}
void set_loopback_mtu(int mtu) {
  ifreq change{};
  change.ifr_mtu = mtu;
  change_loopback(SIOCSIFMTU, change);
}

bool readable(int fd) {
  pollfd entry{fd, POLLIN, 0};
  return ::poll(&entry, 1, 1000) == 1;
}

bool readable_now(int fd) {
  pollfd entry{fd, POLLIN, 0};
  return ::poll(&entry, 1, 0) == 1;
}

bool may_make_namespaces() {
  if (::geteuid() == 0) return true;
  WARN("SKIPPED: a private network namespace needs root");
  return false;
}

int loopback_index(LinkControl& links) {
  const auto loopback = links.find("lo");
  REQUIRE(loopback);
  return loopback->ifindex;
}

// lo, down, in a network namespace of the test's own, and a monitor of it.
struct LoopbackScene {
  PrivateNetworkNamespace namespace_of_test;
  LinkControl queries;
  int ifindex = loopback_index(queries);
  LinkMonitor monitor{queries, ifindex};
};

std::uint64_t counter(const LinkMonitor& monitor, const std::string& name) {
  for (const auto& [counter_name, value] : monitor.counters())
    if (counter_name == name) return value;
  FAIL("no counter " << name);
  return 0;
}

}  // namespace

TEST_CASE("link monitor: the kernel's notifications of one link, read without blocking", "[vnic][link]") {
  if (!may_make_namespaces()) return;
  LoopbackScene scene;
  LinkMonitor& monitor = scene.monitor;
  CHECK(monitor.drain().states.empty());  // nothing yet, and no wait

  set_loopback(true);
  REQUIRE(readable(monitor.fd()));
  auto states = monitor.drain().states;
  REQUIRE_FALSE(states.empty());
  CHECK(states.back().ifindex == scene.ifindex);
  CHECK(states.back().up);
  CHECK(states.back().running);

  set_loopback(false);
  REQUIRE(readable(monitor.fd()));
  states = monitor.drain().states;
  REQUIRE_FALSE(states.empty());
  CHECK_FALSE(states.back().up);
  CHECK_FALSE(states.back().running);
  CHECK(counter(monitor, "link_overruns") == 0);
  CHECK(counter(monitor, "link_messages_rejected") == 0);
}

TEST_CASE("link monitor: after an overrun the link's state is asked of the kernel", "[vnic][link]") {
  if (!may_make_namespaces()) return;
  LoopbackScene scene;
  LinkMonitor& monitor = scene.monitor;
  const int smallest = 1;  // the kernel makes it its minimum, room for a notification or two
  REQUIRE(::setsockopt(monitor.fd(), SOL_SOCKET, SO_RCVBUF, &smallest, sizeof(smallest)) == 0);
  // Notifications that all say "up" fill the buffer; the one that says "down" is dropped.
  set_loopback(true);
  for (int change = 0; change < 32; ++change) set_loopback_mtu(60000 + change);
  set_loopback(false);

  const auto states = monitor.drain().states;
  CHECK(counter(monitor, "link_overruns") >= 1);
  REQUIRE_FALSE(states.empty());
  CHECK(states.size() < 34);  // some were dropped
  CHECK_FALSE(states.back().up);
  CHECK_FALSE(states.back().running);
}

namespace {

// Sends `count` datagrams of `length` zero bytes to the monitor's socket from another
// rtnetlink socket of this process (unicast to a socket needs CAP_NET_ADMIN: root here).
void send_datagrams(const LinkMonitor& monitor, int count, std::size_t length) {
  sockaddr_nl to{};
  socklen_t size = sizeof(to);
  REQUIRE(::getsockname(monitor.fd(), reinterpret_cast<sockaddr*>(&to), &size) == 0);
  const int sender = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  REQUIRE(sender >= 0);
  const std::vector<std::uint8_t> bytes(length, 0);
  for (int i = 0; i < count; ++i) {
    REQUIRE(::sendto(sender, bytes.data(), bytes.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) ==
            static_cast<ssize_t>(length));
  }
  ::close(sender);
}

}  // namespace

TEST_CASE("link monitor: a datagram shorter than a netlink header is read once and dropped", "[vnic][link]") {
  if (!may_make_namespaces()) return;
  LoopbackScene scene;
  send_datagrams(scene.monitor, 1, 3);
  REQUIRE(readable(scene.monitor.fd()));
  const LinkMonitor::Drained drained = scene.monitor.drain();
  CHECK_FALSE(drained.more);
  CHECK(drained.states.empty());
  CHECK_FALSE(readable_now(scene.monitor.fd()));
}

TEST_CASE("link monitor: a flood is read in bounded turns, and the state asked of the kernel", "[vnic][link]") {
  if (!may_make_namespaces()) return;
  LoopbackScene scene;
  send_datagrams(scene.monitor, 300, 16);  // 16 bytes: an nlmsghdr of zeros, no message in it
  set_loopback(true);                      // the real notification, behind the flood
  LinkMonitor::Drained first = scene.monitor.drain();
  CHECK(first.more);
  REQUIRE_FALSE(first.states.empty());  // the state asked of the kernel, though the notification was not reached
  CHECK(first.states.back().up);
  LinkMonitor::Drained second = scene.monitor.drain();
  CHECK_FALSE(second.more);
  REQUIRE_FALSE(second.states.empty());
  CHECK(second.states.back().up);
  CHECK_FALSE(readable_now(scene.monitor.fd()));
}
