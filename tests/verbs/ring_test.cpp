// The SPSC ring: ordering and wrap-around, full and empty, the doorbell protocol, hostile
// indices written by the peer, and a real two-process run over a memfd and an eventfd.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

#include "verbs/contract/ring.h"

using namespace rrdma;
using namespace rrdma::verbs;

namespace {

// A ring region on the heap, exactly as large as the geometry needs, so that ASan reports
// any access past its end (a mapping would not).
struct HeapRegion {
  explicit HeapRegion(RingGeometry g) : size(g.region_size()) {
    data = static_cast<std::uint8_t*>(::operator new(size, std::align_val_t{kCacheLine}));
    REQUIRE(format_ring(bytes(), g) == RingError::None);
  }
  ~HeapRegion() { ::operator delete(data, std::align_val_t{kCacheLine}); }
  MutableByteSpan bytes() const { return {data, size}; }
  RingHeader& header() const { return *std::launder(reinterpret_cast<RingHeader*>(data)); }
  std::size_t size;
  std::uint8_t* data;
};

struct Entry {
  std::uint64_t seq;
  std::uint64_t check;  // derived from seq, to catch torn or misplaced entries
};
std::uint64_t check_of(std::uint64_t seq) { return seq * 0x9E3779B97F4A7C15ull ^ 0xA5A5A5A5u; }

void set_shared(std::uint32_t& word, std::uint32_t v) {
  std::atomic_ref<std::uint32_t>(word).store(v, std::memory_order_release);
}

}  // namespace

TEST_CASE("ring geometry: powers of two, aligned entry sizes, bounded") {
  CHECK(RingGeometry{1, 8}.valid());
  CHECK(RingGeometry{kMaxRingCapacity, kMaxRingEntrySize}.valid());
  CHECK_FALSE(RingGeometry{0, 64}.valid());
  CHECK_FALSE(RingGeometry{48, 64}.valid());
  CHECK_FALSE(RingGeometry{kMaxRingCapacity * 2, 64}.valid());
  CHECK_FALSE(RingGeometry{16, 12}.valid());
  CHECK_FALSE(RingGeometry{16, 0}.valid());
  CHECK_FALSE(RingGeometry{16, kMaxRingEntrySize + 8}.valid());
  CHECK(RingGeometry{16, 64}.region_size() == 256 + 16 * 64);
}

TEST_CASE("ring: entries come out in order across many wrap-arounds") {
  const RingGeometry g{8, sizeof(Entry)};
  HeapRegion region(g);
  RingProducer producer(region.bytes(), g);
  RingConsumer consumer(region.bytes(), g);
  REQUIRE(producer.error() == RingError::None);
  REQUIRE(consumer.error() == RingError::None);

  std::uint64_t next_in = 0;
  std::uint64_t next_out = 0;
  // Uneven batch sizes so that wrap-around falls at every slot boundary.
  for (int round = 0; round < 1000; ++round) {
    const int batch = 1 + round % 8;
    for (int i = 0; i < batch; ++i) {
      REQUIRE(producer.try_push_value(Entry{next_in, check_of(next_in)}) == PushResult::Pushed);
      ++next_in;
    }
    producer.publish();
    Entry e{};
    while (consumer.try_pop_value(e) == PopResult::Popped) {
      REQUIRE(e.seq == next_out);
      REQUIRE(e.check == check_of(next_out));
      ++next_out;
    }
  }
  CHECK(next_out == next_in);
  CHECK(next_in > 4000);
  CHECK(consumer.error() == RingError::None);
}

TEST_CASE("ring: indices may start anywhere and slots stay in the region across the 2^32 wrap") {
  const RingGeometry g{8, sizeof(Entry)};
  HeapRegion region(g);
  // A re-attached ring (or a hostile creator) may start with any index values.
  set_shared(region.header().producer_index, 0xFFFF'FFFC);
  set_shared(region.header().consumer_index, 0xFFFF'FFFC);
  RingProducer producer(region.bytes(), g);
  RingConsumer consumer(region.bytes(), g);
  REQUIRE(producer.error() == RingError::None);
  REQUIRE(consumer.error() == RingError::None);
  Entry e{};
  for (std::uint64_t seq = 0; seq < 100; ++seq) {
    REQUIRE(producer.try_push_value(Entry{seq, check_of(seq)}) == PushResult::Pushed);
    producer.publish();
    REQUIRE(consumer.try_pop_value(e) == PopResult::Popped);
    REQUIRE(e.seq == seq);
    REQUIRE(e.check == check_of(seq));
  }
  CHECK(region.header().consumer_index == 0xFFFF'FFFCu + 100u);
}

TEST_CASE("ring: full and empty, unpublished entries are invisible") {
  const RingGeometry g{4, 16};
  HeapRegion region(g);
  RingProducer producer(region.bytes(), g);
  RingConsumer consumer(region.bytes(), g);
  Entry e{};
  CHECK(consumer.try_pop_value(e) == PopResult::Empty);
  for (std::uint64_t i = 0; i < 4; ++i) REQUIRE(producer.try_push_value(Entry{i, check_of(i)}) == PushResult::Pushed);
  CHECK(producer.try_push_value(Entry{4, 0}) == PushResult::Full);
  CHECK(consumer.available() == 0);
  CHECK(consumer.try_pop_value(e) == PopResult::Empty);
  producer.publish();
  CHECK(consumer.available() == 4);
  REQUIRE(consumer.try_pop_value(e) == PopResult::Popped);
  CHECK(e.seq == 0);
  // One slot freed: exactly one more fits.
  CHECK(producer.try_push_value(Entry{4, check_of(4)}) == PushResult::Pushed);
  CHECK(producer.try_push_value(Entry{5, 0}) == PushResult::Full);
  producer.publish();
  for (std::uint64_t i = 1; i <= 4; ++i) {
    REQUIRE(consumer.try_pop_value(e) == PopResult::Popped);
    CHECK(e.seq == i);
  }
  CHECK(consumer.try_pop_value(e) == PopResult::Empty);
}

// Issue 27: a QP recycled through RESET loses its completions still in the CQ ring; the
// other QPs' stay, in order, and the freed slots are the producer's again.
TEST_CASE("ring: remove_if drops the chosen published entries, keeps the rest in order, frees the slots") {
  const RingGeometry g{8, 16};
  HeapRegion region(g);
  RingProducer producer(region.bytes(), g);
  RingConsumer consumer(region.bytes(), g);
  Entry e{};
  // Start past a wrap of the slots, so that moved entries cross the ring's end.
  for (std::uint64_t i = 0; i < 6; ++i) REQUIRE(producer.try_push_value(Entry{i, check_of(i)}) == PushResult::Pushed);
  producer.publish();
  for (int i = 0; i < 6; ++i) REQUIRE(consumer.try_pop_value(e) == PopResult::Popped);
  for (std::uint64_t i = 10; i < 18; ++i) REQUIRE(producer.try_push_value(Entry{i, check_of(i)}) == PushResult::Pushed);
  producer.publish();
  CHECK(producer.try_push_value(Entry{99, 0}) == PushResult::Full);
  const auto odd = [](ByteSpan bytes) {
    Entry entry{};
    std::memcpy(&entry, bytes.data(), sizeof entry);
    return entry.seq % 2 == 1;
  };
  CHECK(consumer.remove_if(odd) == 4);
  CHECK(consumer.available() == 4);
  // Four slots are free again; what was kept comes out first, in order, then the new ones.
  for (std::uint64_t i = 20; i < 24; ++i) REQUIRE(producer.try_push_value(Entry{i, check_of(i)}) == PushResult::Pushed);
  CHECK(producer.try_push_value(Entry{99, 0}) == PushResult::Full);
  producer.publish();
  for (std::uint64_t want : {10, 12, 14, 16, 20, 21, 22, 23}) {
    REQUIRE(consumer.try_pop_value(e) == PopResult::Popped);
    CHECK(e.seq == want);
    CHECK(e.check == check_of(want));
  }
  CHECK(consumer.try_pop_value(e) == PopResult::Empty);
  // Nothing to drop, an empty ring: nothing moves.
  CHECK(consumer.remove_if(odd) == 0);
  REQUIRE(producer.try_push_value(Entry{30, check_of(30)}) == PushResult::Pushed);  // unpublished: untouched
  CHECK(consumer.remove_if([](ByteSpan) { return true; }) == 0);
  producer.publish();
  REQUIRE(consumer.try_pop_value(e) == PopResult::Popped);
  CHECK(e.seq == 30);
}

TEST_CASE("ring: a short entry is zero-padded, an oversized one refused") {
  const RingGeometry g{2, 16};
  HeapRegion region(g);
  RingProducer producer(region.bytes(), g);
  RingConsumer consumer(region.bytes(), g);
  const std::uint8_t first[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  const std::uint8_t second[3] = {0xAA, 0xBB, 0xCC};
  const std::uint8_t too_big[17] = {};
  REQUIRE(producer.try_push(first) == PushResult::Pushed);
  REQUIRE(producer.try_push(second) == PushResult::Pushed);
  CHECK_THROWS_AS(producer.try_push(too_big), std::length_error);
  producer.publish();
  std::uint8_t out[16];
  REQUIRE(consumer.try_pop(out) == PopResult::Popped);
  CHECK(std::memcmp(out, first, 16) == 0);
  // Slot 0 again: the stale bytes of `first` must not leak past the 3 new ones.
  REQUIRE(producer.try_push(second) == PushResult::Pushed);
  producer.publish();
  REQUIRE(consumer.try_pop(out) == PopResult::Popped);
  REQUIRE(consumer.try_pop(out) == PopResult::Popped);
  const std::uint8_t expected[16] = {0xAA, 0xBB, 0xCC};
  CHECK(std::memcmp(out, expected, 16) == 0);
}

TEST_CASE("ring: the producer signals exactly when the consumer asked") {
  const RingGeometry g{8, 16};
  HeapRegion region(g);
  RingProducer producer(region.bytes(), g);
  RingConsumer consumer(region.bytes(), g);
  Entry e{};

  // Nobody asked: no doorbell.
  producer.try_push_value(Entry{0, 0});
  CHECK_FALSE(producer.publish());
  // The consumer asks while an entry is waiting: it must not sleep, and withdraws the ask.
  CHECK_FALSE(consumer.request_doorbell());
  CHECK(region.header().consumer_wants_doorbell == 0);
  REQUIRE(consumer.try_pop_value(e) == PopResult::Popped);

  // Empty ring: the consumer may sleep; the next publish rings, once.
  REQUIRE(consumer.request_doorbell());
  CHECK(region.header().consumer_wants_doorbell == 1);
  CHECK_FALSE(producer.publish());  // nothing new published: nothing to wake for
  producer.try_push_value(Entry{1, 0});
  CHECK(producer.publish());
  CHECK(region.header().consumer_wants_doorbell == 0);
  producer.try_push_value(Entry{2, 0});
  CHECK_FALSE(producer.publish());
  REQUIRE(consumer.try_pop_value(e) == PopResult::Popped);
  REQUIRE(consumer.try_pop_value(e) == PopResult::Popped);
  CHECK(e.seq == 2);
}

TEST_CASE("doorbell: an eventfd that counts rings, adopted only if it is one") {
  Doorbell bell = Doorbell::create();
  REQUIRE(bell.valid());
  CHECK_FALSE(bell.drain());
  CHECK_FALSE(bell.wait(0));
  bell.ring();
  bell.ring();
  CHECK(bell.wait(0));
  CHECK_FALSE(bell.drain());

  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  close(pipe_fds[1]);
  CHECK_FALSE(Doorbell::adopt(pipe_fds[0]).valid());  // closes it
  Doorbell adopted = Doorbell::adopt(dup(bell.fd()));
  REQUIRE(adopted.valid());
  adopted.ring();
  CHECK(bell.drain());
}

TEST_CASE("ring: attach refuses a header or region that does not match the agreed geometry") {
  const RingGeometry g{8, 32};
  HeapRegion region(g);
  CHECK(RingConsumer(region.bytes(), RingGeometry{16, 32}).error() == RingError::BadRegion);
  CHECK(RingConsumer(region.bytes(), RingGeometry{4, 32}).error() == RingError::HeaderMismatch);
  CHECK(RingConsumer(region.bytes(), RingGeometry{8, 24}).error() == RingError::HeaderMismatch);
  CHECK(RingConsumer(region.bytes(), RingGeometry{6, 32}).error() == RingError::BadGeometry);
  CHECK(RingConsumer(region.bytes().subspan(64), g).error() == RingError::BadRegion);
  region.header().magic = 0;
  CHECK(RingConsumer(region.bytes(), g).error() == RingError::HeaderMismatch);
}

TEST_CASE("ring: hostile producer indices are fatal errors, never out-of-bounds reads") {
  const RingGeometry g{8, 16};
  HeapRegion region(g);
  RingConsumer consumer(region.bytes(), g);
  Entry e{};

  SECTION("more than capacity ahead") {
    set_shared(region.header().producer_index, 9);
    CHECK(consumer.try_pop_value(e) == PopResult::Broken);
    CHECK(consumer.error() == RingError::ProducerOverrun);
  }
  SECTION("far ahead, wrapping") {
    set_shared(region.header().producer_index, 0xFFFF'FFF0);
    CHECK(consumer.available() == 0);
    CHECK(consumer.error() == RingError::ProducerOverrun);
  }
  SECTION("moved back below what it published") {
    set_shared(region.header().producer_index, 5);
    REQUIRE(consumer.try_pop_value(e) == PopResult::Popped);
    set_shared(region.header().producer_index, 3);
    CHECK(consumer.try_pop_value(e) == PopResult::Popped);  // 5 had been seen: still ours
    CHECK(consumer.request_doorbell() == false);
    CHECK(consumer.error() == RingError::ProducerRewound);
  }
  SECTION("exactly capacity ahead is legal; every slot read stays in the region") {
    set_shared(region.header().producer_index, 8);
    int popped = 0;
    while (consumer.try_pop_value(e) == PopResult::Popped) ++popped;
    CHECK(popped == 8);
    CHECK(consumer.error() == RingError::None);
  }
  SECTION("the header's geometry rewritten after attach is ignored") {
    region.header().capacity = 0x8000'0000;
    region.header().entry_size = 0xFFFF'FFF8;
    set_shared(region.header().producer_index, 0x7FFF'FFFF);  // would be in range for that capacity
    CHECK(consumer.try_pop_value(e) == PopResult::Broken);
    CHECK(consumer.error() == RingError::ProducerOverrun);
  }
  // The error is sticky.
  if (consumer.error() != RingError::None) {
    set_shared(region.header().producer_index, 0);
    CHECK(consumer.try_pop_value(e) == PopResult::Broken);
    CHECK_FALSE(consumer.request_doorbell());
  }
}

TEST_CASE("ring: hostile consumer indices are fatal errors for the producer") {
  const RingGeometry g{8, 16};
  HeapRegion region(g);
  RingProducer producer(region.bytes(), g);
  for (std::uint64_t i = 0; i < 8; ++i) REQUIRE(producer.try_push_value(Entry{i, 0}) == PushResult::Pushed);
  producer.publish();

  SECTION("consumed what was never published") {
    set_shared(region.header().consumer_index, 9);
    CHECK(producer.try_push_value(Entry{}) == PushResult::Broken);
    CHECK(producer.error() == RingError::ConsumerOverrun);
  }
  SECTION("moved back") {
    set_shared(region.header().consumer_index, 4);
    REQUIRE(producer.try_push_value(Entry{}) == PushResult::Pushed);
    set_shared(region.header().consumer_index, 2);
    for (int i = 0; i < 3; ++i) producer.try_push_value(Entry{});
    CHECK(producer.try_push_value(Entry{}) == PushResult::Broken);
    CHECK(producer.error() == RingError::ConsumerRewound);
  }
  SECTION("a garbage doorbell flag only costs a spurious ring") {
    set_shared(region.header().consumer_wants_doorbell, 0xDEAD'BEEF);
    set_shared(region.header().consumer_index, 8);
    REQUIRE(producer.try_push_value(Entry{}) == PushResult::Pushed);
    CHECK(producer.publish());
    CHECK(producer.error() == RingError::None);
  }
  CHECK_FALSE(producer.publish());
}

TEST_CASE("shared region: a sealed memfd, adopted only if sealed and of the agreed size") {
  SharedRegion region = SharedRegion::create("rrdma-test", 1000);
  REQUIRE(region.valid());
  CHECK(region.size() % 4096 == 0);
  region.bytes()[0] = 0x5A;
  // The seals hold: the peer cannot shrink the memfd under our mapping.
  CHECK(ftruncate(region.fd(), 0) != 0);

  SharedRegion::AdoptError error{};
  SharedRegion same = SharedRegion::adopt(dup(region.fd()), 1000, error);
  REQUIRE(error == SharedRegion::AdoptError::None);
  CHECK(same.bytes()[0] == 0x5A);
  same.bytes()[1] = 0x33;
  CHECK(region.bytes()[1] == 0x33);

  SharedRegion wrong = SharedRegion::adopt(dup(region.fd()), 3 * 4096, error);
  CHECK_FALSE(wrong.valid());
  CHECK(error == SharedRegion::AdoptError::WrongSize);

  const int unsealed = memfd_create("rrdma-unsealed", MFD_CLOEXEC);
  REQUIRE(unsealed >= 0);
  REQUIRE(ftruncate(unsealed, 4096) == 0);
  CHECK_FALSE(SharedRegion::adopt(unsealed, 4096, error).valid());
  CHECK(error == SharedRegion::AdoptError::NotSealed);
}

namespace {

void send_fd(int socket, int fd) {
  char token = 'f';
  iovec iov{&token, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  if (sendmsg(socket, &msg, 0) != 1) _exit(90);
}

int receive_fd(int socket) {
  char token = 0;
  iovec iov{&token, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  if (recvmsg(socket, &msg, MSG_CMSG_CLOEXEC) != 1) return -1;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c == nullptr || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int))) return -1;
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return fd;
}

constexpr RingGeometry kTwoProcessGeometry{64, sizeof(Entry)};
constexpr std::uint64_t kTwoProcessEntries = 200'000;

// The application's side: create and format the ring, hand its memfd over, receive the
// daemon's doorbell, post every entry, ring only when asked. Exit codes say what failed.
[[noreturn]] void run_producer_child(int socket) {
  SharedRegion region = SharedRegion::create("rrdma-sq", kTwoProcessGeometry.region_size());
  if (format_ring(region.bytes(), kTwoProcessGeometry) != RingError::None) _exit(91);
  send_fd(socket, region.fd());
  Doorbell bell = Doorbell::adopt(receive_fd(socket));
  if (!bell.valid()) _exit(92);
  char go = 0;
  if (read(socket, &go, 1) != 1) _exit(93);  // the parent is asleep on the doorbell now
  RingProducer producer(region.bytes(), kTwoProcessGeometry);
  std::uint64_t rings = 0;
  for (std::uint64_t seq = 0; seq < kTwoProcessEntries;) {
    const PushResult r = producer.try_push_value(Entry{seq, check_of(seq)});
    if (r == PushResult::Broken) _exit(94);
    if (r == PushResult::Pushed) ++seq;
    if (r == PushResult::Full || seq % 7 == 0 || seq == kTwoProcessEntries) {
      if (producer.publish()) {
        bell.ring();
        ++rings;
      }
      // The parent asked before we started, so the very first publish must have rung.
      if (rings == 0) _exit(95);
      if (r == PushResult::Full) sched_yield();
    }
  }
  _exit(0);
}

}  // namespace

TEST_CASE("ring: two processes over a memfd and an eventfd doorbell") {
  int sockets[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sockets) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(sockets[0]);
    run_producer_child(sockets[1]);
  }
  close(sockets[1]);
  // Whatever happens below, the child does not outlive the test nor become a zombie.
  struct Reaper {
    pid_t pid;
    int status = -1;
    bool reaped = false;
    int wait() {
      if (!reaped && waitpid(pid, &status, 0) == pid) reaped = true;
      return status;
    }
    ~Reaper() {
      if (!reaped) {
        kill(pid, SIGKILL);
        wait();
      }
    }
  } reaper{child};

  SharedRegion::AdoptError error{};
  SharedRegion region = SharedRegion::adopt(receive_fd(sockets[0]), kTwoProcessGeometry.region_size(), error);
  REQUIRE(error == SharedRegion::AdoptError::None);
  RingConsumer consumer(region.bytes(), kTwoProcessGeometry);
  REQUIRE(consumer.error() == RingError::None);
  Doorbell bell = Doorbell::create();
  send_fd(sockets[0], bell.fd());
  REQUIRE(consumer.request_doorbell());
  REQUIRE(write(sockets[0], "g", 1) == 1);

  std::uint64_t next = 0;
  int idle_waits = 0;  // a bound, not a timing assertion: 10 s without any entry is a hang
  while (next < kTwoProcessEntries && idle_waits < 100) {
    Entry e{};
    const PopResult r = consumer.try_pop_value(e);
    REQUIRE(r != PopResult::Broken);
    if (r == PopResult::Popped) {
      REQUIRE(e.seq == next);
      REQUIRE(e.check == check_of(next));
      ++next;
      idle_waits = 0;
      continue;
    }
    if (consumer.request_doorbell()) {
      if (!bell.wait(100)) ++idle_waits;
    }
  }
  CHECK(next == kTwoProcessEntries);
  const int status = reaper.wait();
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  close(sockets[0]);
}

TEST_CASE("ring: a completion arm fires once, after entries already waiting, and filters unsolicited") {
  const RingGeometry g{8, sizeof(Entry)};
  HeapRegion region(g);
  RingProducer producer(region.bytes(), g);
  RingConsumer consumer(region.bytes(), g);

  // Not armed: no signal.
  REQUIRE(producer.try_push_value(Entry{0, check_of(0)}) == PushResult::Pushed);
  CHECK_FALSE(producer.publish_completions(true));

  // Armed for the next completion while one is already waiting: the arm stands (verbs only
  // signal completions added after the arm), fires on the next publish and only once.
  consumer.arm_notification(kNotifyNext);
  CHECK(consumer.notification_armed() == kNotifyNext);
  REQUIRE(producer.try_push_value(Entry{1, check_of(1)}) == PushResult::Pushed);
  CHECK(producer.publish_completions(false));
  CHECK(consumer.notification_armed() == kNotifyNone);
  REQUIRE(producer.try_push_value(Entry{2, check_of(2)}) == PushResult::Pushed);
  CHECK_FALSE(producer.publish_completions(true));

  // Solicited only: an unsolicited batch leaves the arm in place; a solicited one fires.
  consumer.arm_notification(kNotifySolicited);
  REQUIRE(producer.try_push_value(Entry{3, check_of(3)}) == PushResult::Pushed);
  CHECK_FALSE(producer.publish_completions(false));
  CHECK(consumer.notification_armed() == kNotifySolicited);
  REQUIRE(producer.try_push_value(Entry{4, check_of(4)}) == PushResult::Pushed);
  CHECK(producer.publish_completions(true));
  CHECK(consumer.notification_armed() == kNotifyNone);

  // A publish with nothing new never signals, armed or not.
  consumer.arm_notification(kNotifyNext);
  CHECK_FALSE(producer.publish_completions(true));
  CHECK(consumer.notification_armed() == kNotifyNext);

  // Every entry still comes out in order.
  Entry e{};
  for (std::uint64_t i = 0; i < 5; ++i) {
    REQUIRE(consumer.try_pop_value(e) == PopResult::Popped);
    CHECK(e.seq == i);
  }
}

// The application reads its completion-channel and async eventfds itself and decides whether
// they block (ibv_get_cq_event(3)); the daemon shares the open file description, so adopting
// them must leave O_NONBLOCK alone. A doorbell the daemon reads is made non-blocking.
TEST_CASE("adopt_keeping_mode leaves the shared eventfd blocking but adopt sets O_NONBLOCK", "[ring]") {
  const int application_fd = eventfd(0, EFD_CLOEXEC);  // blocking, as the client makes it
  REQUIRE(application_fd >= 0);
  Doorbell kept = Doorbell::adopt_keeping_mode(dup(application_fd));
  REQUIRE(kept.valid());
  CHECK((fcntl(application_fd, F_GETFL) & O_NONBLOCK) == 0);
  Doorbell doorbell = Doorbell::adopt(dup(application_fd));
  REQUIRE(doorbell.valid());
  CHECK((fcntl(application_fd, F_GETFL) & O_NONBLOCK) != 0);
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  CHECK_FALSE(Doorbell::adopt_keeping_mode(pipe_fds[0]).valid());  // not an eventfd: closed
  close(pipe_fds[1]);
  close(application_fd);
}
