// The event loop over a SOCK_SEQPACKET socketpair standing in for the TAP: like a TAP,
// it keeps frame boundaries, one frame per read and per write.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "vnic/event_loop.h"

using namespace rrdma;
using namespace rrdma::vnic;

namespace {

using Frame = std::vector<std::uint8_t>;

struct FramePair {
  int loop_end = -1;  // the "TAP" the loop owns
  int wire_end = -1;  // the test's side: the kernel behind the TAP
  FramePair() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0, fds) == 0);
    loop_end = fds[0];
    wire_end = fds[1];
  }
  ~FramePair() {
    ::close(loop_end);
    ::close(wire_end);
  }
  void send(const Frame& frame) const {
    REQUIRE(::send(wire_end, frame.data(), frame.size(), 0) == static_cast<ssize_t>(frame.size()));
  }
  std::vector<Frame> drain() const {
    std::vector<Frame> frames;
    std::array<std::uint8_t, 4096> buffer{};
    for (ssize_t n; (n = ::recv(wire_end, buffer.data(), buffer.size(), MSG_DONTWAIT)) > 0;) {
      frames.emplace_back(buffer.begin(), buffer.begin() + n);
    }
    return frames;
  }
};

Frame numbered_frame(std::uint8_t number, std::size_t length) {
  Frame frame(length);
  for (std::size_t i = 0; i < length; ++i) frame[i] = static_cast<std::uint8_t>(number + i);
  return frame;
}

}  // namespace

TEST_CASE("frames written to the device reach the handler whole and in order", "[vnic][loop]") {
  FramePair pair;
  EventLoopConfig config;
  config.rx_buffers = 2;  // fewer buffers than frames: the read must survive running dry
  SECTION("multishot read, where the kernel has it") { config.multishot_read = true; }
  SECTION("single-shot reads, the fallback") { config.multishot_read = false; }
  EventLoop loop(config);
  if (!config.multishot_read) CHECK(loop.counters().multishot_read == 0);
  const std::vector<Frame> sent{numbered_frame(1, 60), numbered_frame(2, 1514), numbered_frame(3, 42),
                                numbered_frame(4, 100), numbered_frame(5, 64)};
  for (const auto& frame : sent) pair.send(frame);
  std::vector<Frame> received;
  loop.attach_frame_device(pair.loop_end, [&](ByteSpan frame, Instant) {
    received.emplace_back(frame.begin(), frame.end());
    if (received.size() == sent.size()) loop.stop();
  });
  loop.run();
  CHECK(received == sent);
  CHECK(loop.counters().fixed_file == 1);  // registered files: every kernel since 5.1
  CHECK(loop.counters().fixed_buffers == 1);  // root's RLIMIT_MEMLOCK has room for them
  CHECK(loop.counters().tap_rx_frames == 5);
  CHECK(loop.counters().tap_rx_bytes == 60 + 1514 + 42 + 100 + 64);
  if (loop.counters().multishot_read == 1) CHECK(loop.counters().rx_buffer_exhausted >= 1);
}

TEST_CASE("a frame that fills its whole buffer is counted as truncated, not delivered", "[vnic][loop]") {
  FramePair pair;
  EventLoopConfig config;
  config.frame_buffer_size = 1024;
  EventLoop loop(config);
  pair.send(numbered_frame(1, 3000));  // the read cuts it to 1024 bytes
  pair.send(numbered_frame(2, 1023));  // the largest frame that fits with room to spare
  std::vector<Frame> received;
  loop.attach_frame_device(pair.loop_end, [&](ByteSpan frame, Instant) {
    received.emplace_back(frame.begin(), frame.end());
    loop.stop();
  });
  loop.run();
  CHECK(received == std::vector<Frame>{numbered_frame(2, 1023)});
  CHECK(loop.counters().rx_truncated == 1);
  CHECK(loop.counters().tap_rx_frames == 2);
}

TEST_CASE("transmitted frames leave as one write each, in order", "[vnic][loop]") {
  FramePair pair;
  EventLoop loop(EventLoopConfig{});
  loop.attach_frame_device(pair.loop_end, [](ByteSpan, Instant) {});
  const std::vector<Frame> frames{numbered_frame(10, 42), numbered_frame(20, 1500), numbered_frame(30, 60)};
  for (const auto& frame : frames) CHECK(loop.transmit(frame));
  loop.add_timer_source([&](Instant now) -> std::optional<Instant> {
    if (loop.counters().tap_tx_frames == frames.size()) loop.stop();
    return now + std::chrono::milliseconds(1);
  });
  loop.run();
  CHECK(pair.drain() == frames);
  CHECK(loop.counters().tap_tx_bytes == 42 + 1500 + 60);
  CHECK(loop.counters().tx_queue_drops == 0);
}

TEST_CASE("frames finding every slot busy wait in order, in a bounded backlog that counts its drops", "[vnic][loop]") {
  FramePair pair;
  EventLoopConfig config;
  config.tx_slots = 2;
  config.tx_backlog_frames = 1;
  config.frame_buffer_size = 2048;
  EventLoop loop(config);
  loop.attach_frame_device(pair.loop_end, [](ByteSpan, Instant) {});
  CHECK(loop.transmit_room() == 2);
  CHECK(loop.transmit(numbered_frame(1, 60)));
  CHECK(loop.transmit(numbered_frame(2, 60)));
  CHECK(loop.transmit_room() == 0);
  CHECK(loop.transmit(numbered_frame(3, 60)));  // waits in the backlog
  CHECK(loop.counters().tx_backlogged == 1);
  CHECK(loop.prepare_transmit(60).empty());     // nothing may pass the frame that waits
  CHECK_FALSE(loop.transmit(numbered_frame(4, 60)));  // the backlog is full
  CHECK(loop.counters().tx_queue_drops == 1);
  CHECK_FALSE(loop.transmit(numbered_frame(5, 2049)));
  CHECK(loop.counters().tx_oversize_drops == 1);
  // Once the first two writes complete, the waiting frame takes a slot, after them.
  loop.add_timer_source([&](Instant now) -> std::optional<Instant> {
    if (loop.counters().tap_tx_frames == 3) loop.stop();
    return now + std::chrono::milliseconds(1);
  });
  loop.run();
  CHECK(pair.drain() == std::vector<Frame>{numbered_frame(1, 60), numbered_frame(2, 60), numbered_frame(3, 60)});
  CHECK(loop.transmit_room() == 2);
}

TEST_CASE("a frame built in a transmit slot leaves as written, and takes the slot until then", "[vnic][loop]") {
  FramePair pair;
  EventLoopConfig config;
  config.tx_slots = 2;
  config.frame_buffer_size = 2048;
  EventLoop loop(config);
  loop.attach_frame_device(pair.loop_end, [](ByteSpan, Instant) {});
  CHECK(loop.prepare_transmit(2049).empty());  // does not fit a slot
  const Frame built = numbered_frame(40, 300);
  MutableByteSpan slot = loop.prepare_transmit(built.size());
  REQUIRE(slot.size() >= built.size());
  CHECK(loop.free_transmit_slots() == 1);
  std::copy(built.begin(), built.end(), slot.begin());
  loop.transmit_prepared(built.size());
  CHECK(loop.transmit(numbered_frame(50, 60)));  // the second slot
  CHECK(loop.prepare_transmit(60).empty());      // none left until a write completes
  loop.add_timer_source([&](Instant now) -> std::optional<Instant> {
    if (loop.counters().tap_tx_frames == 2) loop.stop();
    return now + std::chrono::milliseconds(1);
  });
  loop.run();
  CHECK(pair.drain() == std::vector<Frame>{built, numbered_frame(50, 60)});
  CHECK(loop.free_transmit_slots() == 2);
}

TEST_CASE("a timer source runs again once its deadline has passed", "[vnic][loop]") {
  EventLoop loop(EventLoopConfig{});
  std::optional<Instant> asked_for;
  Instant called_at{};
  int calls = 0;
  loop.add_timer_source([&](Instant now) -> std::optional<Instant> {
    ++calls;
    if (asked_for && now >= *asked_for) {
      called_at = now;
      loop.stop();
      return std::nullopt;
    }
    asked_for = now + std::chrono::milliseconds(2);
    return asked_for;
  });
  loop.run();  // nothing else in the ring: only the timeout can wake the loop
  REQUIRE(asked_for);
  CHECK(called_at >= *asked_for);
  CHECK(loop.counters().timer_expirations >= 1);
}

TEST_CASE("watched fds call their handler and unwatched ones do not", "[vnic][loop]") {
  EventLoop loop(EventLoopConfig{});
  const int quiet = ::eventfd(0, EFD_NONBLOCK);
  const int loud = ::eventfd(0, EFD_NONBLOCK);
  bool quiet_called = false;
  std::uint64_t loud_value = 0;
  loop.watch(quiet, [&](Instant) { quiet_called = true; });
  loop.unwatch(quiet);
  loop.watch(loud, [&](Instant) {
    REQUIRE(::read(loud, &loud_value, sizeof(loud_value)) == sizeof(loud_value));
    loop.stop();
  });
  const std::uint64_t one = 1, seven = 7;
  REQUIRE(::write(quiet, &one, sizeof(one)) == sizeof(one));
  REQUIRE(::write(loud, &seven, sizeof(seven)) == sizeof(seven));
  loop.run();
  CHECK(loud_value == 7);
  CHECK_FALSE(quiet_called);
  ::close(quiet);
  ::close(loud);
}

// Two signals of one eventfd: the second is asked for while the first write's completion has
// not been reaped, though the write itself may have happened and been read already (a
// completion channel: the application read it, re-armed, and the daemon consumed the new
// arm). Both must reach the counter, or the reader sleeps forever.
TEST_CASE("a signal asked for while the previous write is in flight is not lost", "[vnic][loop]") {
  EventLoop loop(EventLoopConfig{});
  const int fd = ::eventfd(0, EFD_NONBLOCK);
  REQUIRE(fd >= 0);
  std::uint64_t total = 0;
  std::optional<Instant> give_up;
  loop.add_timer_source([&](Instant now) -> std::optional<Instant> {
    if (!give_up) {
      give_up = now + std::chrono::seconds(10);  // only a bound on the wait, never asserted
      loop.signal_eventfd(fd);
      std::uint64_t value = 0;
      // The first write may already be in the counter: read it, as the application would.
      if (::read(fd, &value, sizeof(value)) == sizeof(value)) total += value;
      loop.signal_eventfd(fd);
    } else {
      std::uint64_t value = 0;
      if (::read(fd, &value, sizeof(value)) == sizeof(value)) total += value;
    }
    if (total >= 2 || now >= *give_up) {
      loop.stop();
      return std::nullopt;
    }
    return now + std::chrono::milliseconds(1);
  });
  loop.run();
  CHECK(total == 2);
  ::close(fd);
}

// Each frame is sent (by a timer source, which runs just before the loop waits) once the
// previous one has arrived, so every wait but the first follows a frame and has the next one
// coming. The window is long enough (10 s) that every spin ends by finding the completion,
// never by running out, whatever the machine's load.
TEST_CASE("a busy-polling loop finds the next completion without sleeping", "[vnic][loop]") {
  FramePair pair;
  EventLoopConfig config;
  config.busy_poll = std::chrono::seconds(10);
  config.busy_poll_only_when_idle = false;
  SECTION("completions deferred to the loop's own kernel entries") { config.defer_taskrun = true; }
  SECTION("completions posted by the kernel at any time") { config.defer_taskrun = false; }
  EventLoop loop(config);
  constexpr std::uint8_t kFrames = 20;
  std::uint8_t sent = 0;
  std::uint8_t received = 0;
  loop.attach_frame_device(pair.loop_end, [&](ByteSpan frame, Instant) {
    CHECK(Frame(frame.begin(), frame.end()) == numbered_frame(received, 60));
    if (++received == kFrames) loop.stop();
  });
  loop.add_timer_source([&](Instant now) -> std::optional<Instant> {
    if (sent == received && sent < kFrames) pair.send(numbered_frame(sent++, 60));
    return now + std::chrono::hours(1);
  });
  loop.run();
  CHECK(received == kFrames);
  CHECK(loop.counters().busy_polls >= kFrames - 1);
  CHECK(loop.counters().busy_poll_hits == loop.counters().busy_polls);
}

// Whether a CPU is idle depends on the machine's load at the time: only that the loop works
// either way is checked.
TEST_CASE("a loop that busy-polls only while a CPU is idle still delivers every frame", "[vnic][loop]") {
  FramePair pair;
  EventLoopConfig config;
  config.busy_poll = std::chrono::microseconds(50);
  config.busy_poll_only_when_idle = true;
  EventLoop loop(config);
  std::uint8_t received = 0;
  loop.attach_frame_device(pair.loop_end, [&](ByteSpan, Instant) {
    if (++received == 5) {
      loop.stop();
    } else {
      pair.send(numbered_frame(received, 60));
    }
  });
  pair.send(numbered_frame(0, 60));
  loop.run();
  CHECK(received == 5);
  CHECK(loop.counters().busy_poll_hits <= loop.counters().busy_polls);
}

TEST_CASE("the runnable task count is read from /proc/loadavg's fourth field", "[vnic][loop]") {
  CHECK(runnable_tasks_in_loadavg("0.52 0.58 0.59 3/1213 12345\n") == 3u);
  CHECK(runnable_tasks_in_loadavg("10.00 9.50 8.25 17/40000 1") == 17u);
  CHECK_FALSE(runnable_tasks_in_loadavg(""));
  CHECK_FALSE(runnable_tasks_in_loadavg("0.52 0.58 0.59"));
  CHECK_FALSE(runnable_tasks_in_loadavg("0.52 0.58 0.59 /1213 1"));
  CHECK_FALSE(runnable_tasks_in_loadavg("0.52 0.58 0.59 3"));        // no "/TOTAL"
  CHECK_FALSE(runnable_tasks_in_loadavg("0.52 0.58 0.59 x3/1213 1"));
  CHECK_FALSE(runnable_tasks_in_loadavg("0.52  0.58 0.59 3/1213 1"));  // an empty field
  CHECK_FALSE(runnable_tasks_in_loadavg("0.5 0.5 0.5 99999999999/1 1"));  // overflows
}

// The datagram socket device of `up --netdev`: two UDP sockets on loopback, one the loop's.
namespace {

struct UdpPair {
  int loop_end = -1;
  int peer = -1;
  sockaddr_in loop_address{};
  sockaddr_in peer_address{};
  UdpPair() {
    loop_end = bound_socket(loop_address);
    peer = bound_socket(peer_address);
    const int on = 1;
    for (int option : {IP_PKTINFO, IP_RECVTOS, IP_RECVTTL}) {
      REQUIRE(::setsockopt(loop_end, IPPROTO_IP, option, &on, sizeof(on)) == 0);
    }
  }
  ~UdpPair() {
    ::close(loop_end);
    ::close(peer);
  }
  static int bound_socket(sockaddr_in& address) {
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    REQUIRE(fd >= 0);
    address = sockaddr_in{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
    socklen_t length = sizeof(address);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    return fd;
  }
  void send_to_loop(const Frame& datagram, int tos) const {
    REQUIRE(::setsockopt(peer, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)) == 0);
    REQUIRE(::sendto(peer, datagram.data(), datagram.size(), 0, reinterpret_cast<const sockaddr*>(&loop_address),
                     sizeof(loop_address)) == static_cast<ssize_t>(datagram.size()));
  }
};

}  // namespace

TEST_CASE("a datagram socket's datagrams reach the handler with their source, destination and TOS",
          "[vnic][loop][netdev]") {
  UdpPair pair;
  EventLoopConfig config;
  config.rx_buffers = 2;
  config.frame_buffer_size = 2048;
  EventLoop loop(config);
  const std::vector<Frame> sent{numbered_frame(1, 60), numbered_frame(2, 1400), numbered_frame(3, 16)};
  for (const auto& datagram : sent) pair.send_to_loop(datagram, 0x68);
  std::vector<Frame> received;
  std::vector<Datagram> meta;
  loop.attach_datagram_socket(pair.loop_end, [&](const Datagram& datagram, Instant) {
    received.emplace_back(datagram.payload.begin(), datagram.payload.end());
    meta.push_back(datagram);
    if (received.size() == sent.size()) loop.stop();
  });
  loop.run();
  CHECK(received == sent);
  CHECK(loop.counters().fixed_buffers == 0);  // a socket's sendmsg cannot use them: none pinned
  for (const Datagram& datagram : meta) {
    CHECK(datagram.source.sin_port == pair.peer_address.sin_port);
    CHECK(datagram.source.sin_addr.s_addr == htonl(INADDR_LOOPBACK));
    CHECK(datagram.destination.s_addr == htonl(INADDR_LOOPBACK));
    CHECK(datagram.tos == 0x68);
    CHECK(datagram.ttl > 0);
  }
}

TEST_CASE("a datagram larger than a receive buffer is counted as truncated, not delivered", "[vnic][loop][netdev]") {
  UdpPair pair;
  EventLoopConfig config;
  config.rx_buffers = 2;
  config.frame_buffer_size = 1024;  // header, address and control messages take part of it
  EventLoop loop(config);
  pair.send_to_loop(numbered_frame(1, 1000), 0);
  pair.send_to_loop(numbered_frame(2, 100), 0);
  std::vector<Frame> received;
  loop.attach_datagram_socket(pair.loop_end, [&](const Datagram& datagram, Instant) {
    received.emplace_back(datagram.payload.begin(), datagram.payload.end());
    loop.stop();
  });
  loop.run();
  REQUIRE(received.size() == 1);
  CHECK(received[0] == numbered_frame(2, 100));
  CHECK(loop.counters().rx_truncated == 1);
}

TEST_CASE("datagrams sent through the slots and the backlog reach their own destinations in order",
          "[vnic][loop][netdev]") {
  UdpPair pair;
  EventLoopConfig config;
  config.tx_slots = 2;
  EventLoop loop(config);
  loop.attach_datagram_socket(pair.loop_end, [](const Datagram&, Instant) {});
  DatagramDestination destination;
  destination.to = pair.peer_address;
  destination.from.s_addr = htonl(INADDR_LOOPBACK);
  destination.tos = 0x02;
  std::vector<Frame> sent;
  for (std::uint8_t i = 1; i <= 5; ++i) {  // two in slots, three wait in the backlog
    sent.push_back(numbered_frame(i, 50 + i));
    CHECK(loop.transmit_to(sent.back(), destination));
  }
  const MutableByteSpan none = loop.prepare_transmit(10);
  CHECK(none.empty());  // the backlog is not empty: nothing jumps the queue
  CHECK(loop.counters().tx_backlogged == 3);
  loop.add_timer_source([&](Instant) -> std::optional<Instant> {
    if (loop.counters().tap_tx_frames == sent.size()) loop.stop();
    return Clock::now() + std::chrono::milliseconds(1);
  });
  loop.run();
  std::vector<Frame> arrived;
  std::array<std::uint8_t, 2048> buffer{};
  for (ssize_t n; (n = ::recv(pair.peer, buffer.data(), buffer.size(), MSG_DONTWAIT)) > 0;) {
    arrived.emplace_back(buffer.begin(), buffer.begin() + n);
  }
  CHECK(arrived == sent);
}

// Issue 28 item 7: a run of datagrams to one destination leaves in one sendmsg (UDP_SEGMENT),
// and a receiver without UDP_GRO still gets the datagrams one by one, whole and in order.
TEST_CASE("datagrams of one size to one destination leave as one run, and arrive as they were sent",
          "[vnic][loop][netdev]") {
  UdpPair pair;
  EventLoopConfig config;
  config.tx_slots = 16;
  config.udp_segmentation = true;
  EventLoop loop(config);
  loop.attach_datagram_socket(pair.loop_end, [](const Datagram&, Instant) {});
  DatagramDestination destination;
  destination.to = pair.peer_address;
  destination.from.s_addr = htonl(INADDR_LOOPBACK);
  DatagramDestination other = destination;
  other.tos = 0x02;  // another TOS is another run
  std::vector<Frame> sent;
  std::vector<std::size_t> places;
  const auto send = [&](std::uint8_t number, std::size_t size, const DatagramDestination& to) {
    places.push_back(loop.run_position(size, to));
    const MutableByteSpan slot = loop.prepare_transmit(size);
    REQUIRE(slot.size() >= size);
    sent.push_back(numbered_frame(number, size));
    std::copy(sent.back().begin(), sent.back().end(), slot.begin());
    loop.transmit_prepared_to(size, to);
  };
  for (std::uint8_t i = 1; i <= 5; ++i) send(i, 300, destination);
  send(6, 120, destination);  // shorter: the run's last
  send(7, 300, destination);  // a new run
  send(8, 300, other);
  send(9, 300, other);
  CHECK(places == std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 0, 0, 1});
  loop.add_timer_source([&](Instant) -> std::optional<Instant> {
    if (loop.counters().tap_tx_frames == sent.size()) loop.stop();
    return Clock::now() + std::chrono::milliseconds(1);
  });
  loop.run();
  CHECK(loop.counters().tx_segment_runs == 2);          // 1..6 and 8..9; 7 went alone
  CHECK(loop.counters().tx_segmented_datagrams == 8);
  CHECK(loop.counters().tx_write_errors == 0);
  std::vector<Frame> arrived;
  std::array<std::uint8_t, 2048> buffer{};
  for (ssize_t n; (n = ::recv(pair.peer, buffer.data(), buffer.size(), MSG_DONTWAIT)) > 0;) {
    arrived.emplace_back(buffer.begin(), buffer.begin() + n);
  }
  CHECK(arrived == sent);
}

TEST_CASE("a run received whole (UDP_GRO) reaches the handler with its segment size", "[vnic][loop][netdev]") {
  UdpPair pair;
  const int on = 1;
  REQUIRE(::setsockopt(pair.loop_end, SOL_UDP, UDP_GRO, &on, sizeof(on)) == 0);
  EventLoopConfig config;
  config.rx_buffers = 2;
  config.receive_buffer_size = 4096;
  EventLoop loop(config);
  // The peer sends five datagrams of 200 bytes and one of 50 in one sendmsg.
  Frame run;
  for (std::uint8_t i = 1; i <= 6; ++i) {
    const Frame part = numbered_frame(i, i == 6 ? 50 : 200);
    run.insert(run.end(), part.begin(), part.end());
  }
  iovec vector{run.data(), run.size()};
  alignas(cmsghdr) std::uint8_t control[CMSG_SPACE(sizeof(std::uint16_t))]{};
  msghdr message{};
  message.msg_name = &pair.loop_address;
  message.msg_namelen = sizeof(pair.loop_address);
  message.msg_iov = &vector;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  cmsghdr* cmsg = CMSG_FIRSTHDR(&message);
  cmsg->cmsg_level = SOL_UDP;
  cmsg->cmsg_type = UDP_SEGMENT;
  cmsg->cmsg_len = CMSG_LEN(sizeof(std::uint16_t));
  const std::uint16_t segment = 200;
  std::memcpy(CMSG_DATA(cmsg), &segment, sizeof(segment));
  REQUIRE(::sendmsg(pair.peer, &message, 0) == static_cast<ssize_t>(run.size()));
  std::vector<Datagram> received;
  std::vector<Frame> payloads;
  loop.attach_datagram_socket(pair.loop_end, [&](const Datagram& datagram, Instant) {
    received.push_back(datagram);
    payloads.emplace_back(datagram.payload.begin(), datagram.payload.end());
    loop.stop();
  });
  loop.run();
  REQUIRE(received.size() == 1);
  CHECK(received[0].segment_size == 200);
  CHECK(payloads[0] == run);
}

// The kilobytes of this process's pinned memory (VmPin: io_uring's registered buffers count
// there, for root too).
std::size_t pinned_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmPin:", 0) == 0) return std::stoul(line.substr(6));
  }
  FAIL("no VmPin line in /proc/self/status");
  return 0;
}

TEST_CASE("a datagram socket's transmit slots pin no memory, a frame device's are registered",
          "[vnic][loop][netdev]") {
  // A netdev daemon's pool at MTU 9000: 512 slots of 10.25 KiB, 5.1 MiB. Pinned, it counted
  // against the user's RLIMIT_MEMLOCK (8 MiB for all of one user's processes): an ordinary
  // user's second daemon at that MTU failed in `up`.
  EventLoopConfig config;
  config.tx_slots = 512;
  config.frame_buffer_size = 10496;
  const std::size_t pool_kib = config.tx_slots * config.frame_buffer_size / 1024;
  {
    const std::size_t before = pinned_kib();
    UdpPair pair;
    EventLoop loop(config);
    loop.attach_datagram_socket(pair.loop_end, [](const Datagram&, Instant) {});
    CHECK(pinned_kib() - before < pool_kib / 16);
  }
  {
    const std::size_t before = pinned_kib();
    FramePair pair;
    EventLoop loop(config);
    loop.attach_frame_device(pair.loop_end, [](ByteSpan, Instant) {});
    // At least half: a ring an earlier case closed may unpin its (smaller) pool meanwhile,
    // io_uring's teardown being asynchronous.
    CHECK(pinned_kib() - before >= pool_kib / 2);
  }
}
