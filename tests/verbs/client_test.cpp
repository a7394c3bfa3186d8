// The client library without a daemon: WR -> WQE conversion (inline, UD, checks), posting
// lists that stop at the first refused WR, polling a CQ ring the test produces into,
// notification and completion channels, the async-event ring, resize, and the errors of a
// missing device or a misbehaving daemon. A FakeDaemon thread answers the control frames
// over a socketpair and adopts the rings like the real one, so the test can act as the
// NIC on the other side of each ring.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/alarm_ticks.h"
#include "verbs/app/api.h"
#include "verbs/app/client.h"

using namespace rrdma;
using namespace rrdma::verbs;
namespace field = rrdma::verbs::control::field;
using control::MessageType;

namespace {

// ---------------------------------------------------------------------------------------
// A daemon stand-in: answers each request, adopts the fds as the real daemon does.

struct AdoptedRing {
  SharedRegion region;
  RingGeometry geometry;
};

class FakeDaemon {
 public:
  FakeDaemon() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) == 0);
    client_fd_ = fds[0];
    daemon_fd_ = fds[1];
    thread_ = std::thread([this] { run(); });
  }
  // A daemon that listens on `socket_path` (NAME.sock in a run directory) and serves the
  // first connection, so Context::open(NAME) finds it like a vnic.
  explicit FakeDaemon(const std::string& socket_path) {
    listener_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    REQUIRE(socket_path.size() < sizeof(address.sun_path));
    std::strcpy(address.sun_path, socket_path.c_str());
    REQUIRE(::bind(listener_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0);
    REQUIRE(::listen(listener_, 1) == 0);
    thread_ = std::thread([this] {
      const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      daemon_fd_ = fd;
      run();
    });
  }
  ~FakeDaemon() {
    if (listener_ >= 0) ::shutdown(listener_, SHUT_RDWR);
    if (daemon_fd_ >= 0) ::shutdown(daemon_fd_, SHUT_RDWR);
    thread_.join();
    if (daemon_fd_ >= 0) ::close(daemon_fd_);
    if (listener_ >= 0) ::close(listener_);
    for (int fd : owned_fds_) ::close(fd);
  }

  // The client end; Context::open_socket adopts it.
  int take_client_fd() { return std::exchange(client_fd_, -1); }

  std::shared_ptr<client::Context> open() {
    auto opened = client::Context::open_socket(take_client_fd(), "fake0");
    REQUIRE(opened.error == 0);
    return opened.value;
  }

  void force_status(MessageType type, std::uint64_t status) {
    std::lock_guard lock(mutex_);
    forced_[type] = status;
  }
  void answer_with_wrong_id() {
    std::lock_guard lock(mutex_);
    wrong_id_ = true;
  }
  void close_on_next_request() {
    std::lock_guard lock(mutex_);
    close_next_ = true;
  }
  // What the client sees when the daemon is killed: its end of the connection hangs up.
  void die() { ::shutdown(daemon_fd_.load(), SHUT_RDWR); }

  // Adopted objects, by the handle the fake gave them.
  AdoptedRing& ring(std::uint32_t handle, int which = 0) {
    std::lock_guard lock(mutex_);
    return rings_.at({handle, which});
  }
  int fd_of(std::uint32_t handle, int which = 0) {
    std::lock_guard lock(mutex_);
    return fds_.at({handle, which});
  }
  AdoptedRing& event_ring() { return ring(kContextHandle); }
  int event_fd() { return fd_of(kContextHandle); }
  control::Message last(MessageType type) {
    std::lock_guard lock(mutex_);
    return last_.at(type);
  }

  static constexpr std::uint32_t kContextHandle = 1;

 private:
  void run() {
    for (;;) {
      control::Received received = control::receive_message(daemon_fd_.load());
      if (received.error != control::IoError::None) return;
      std::lock_guard lock(mutex_);
      if (close_next_) {
        ::shutdown(daemon_fd_.load(), SHUT_RDWR);
        return;
      }
      control::Message reply = handle(received.message, received.fds);
      if (wrong_id_) reply.request_id += 1;
      control::send_message(daemon_fd_.load(), reply, {});
    }
  }

  void adopt(std::uint32_t handle, int which, int fd, RingGeometry geometry) {
    SharedRegion::AdoptError error = SharedRegion::AdoptError::None;
    SharedRegion region = SharedRegion::adopt(fd, geometry.region_size(), error);
    rings_[{handle, which}] = AdoptedRing{std::move(region), geometry};
  }
  void keep_fd(std::uint32_t handle, int which, int fd) {
    fds_[{handle, which}] = fd;
    owned_fds_.push_back(fd);
  }

  control::Message handle(const control::Message& request, control::ReceivedFds& fds) {
    const MessageType type = request.type();
    last_[type] = request;
    control::Message reply = control::make_reply(type, request.request_id, 0);
    if (auto forced = forced_.find(type); forced != forced_.end()) {
      reply.words[0] = forced->second;
      return reply;
    }
    const std::uint32_t handle = type == MessageType::OpenDevice ? kContextHandle : ++next_handle_;
    const auto& w = request.words;
    const auto capacity = [](std::uint64_t entries) {
      return *client::ring_capacity_for(static_cast<std::uint32_t>(entries));
    };
    switch (type) {
      case MessageType::OpenDevice:
        adopt(handle, 0, fds.release(0), client::event_ring_geometry());
        keep_fd(handle, 0, fds.release(1));
        reply.words[field::kContextHandle] = handle;
        reply.words[field::kNodeGuid] = 0x0200'5eff'fe00'0001;
        break;
      case MessageType::CreateCq:
        adopt(handle, 0, fds.release(0), client::cq_ring_geometry(capacity(w[field::kCqEntries])));
        keep_fd(handle, 0, fds.release(1));
        reply.words[field::kHandle] = handle;
        break;
      case MessageType::ResizeCq:
        adopt(static_cast<std::uint32_t>(w[field::kResizeCq]), 0, fds.release(0),
              client::cq_ring_geometry(capacity(w[field::kResizeEntries])));
        break;
      case MessageType::CreateQp:
        adopt(handle, 0, fds.release(0), client::send_ring_geometry(capacity(w[field::kQpMaxSendWr])));
        adopt(handle, 1, fds.release(1), client::recv_ring_geometry(capacity(w[field::kQpMaxRecvWr])));
        keep_fd(handle, 0, fds.release(2));
        reply.words[field::kQpHandle] = handle;
        reply.words[field::kQpNum] = 0x100 + handle;
        break;
      case MessageType::CreateSrq:
        adopt(handle, 0, fds.release(0), client::recv_ring_geometry(capacity(w[field::kSrqMaxWr])));
        keep_fd(handle, 0, fds.release(1));
        reply.words[field::kHandle] = handle;
        break;
      case MessageType::RegMr:
        reply.words[field::kMrHandle] = handle;
        reply.words[field::kMrLkey] = 0x1000 + handle;
        reply.words[field::kMrRkey] = 0x2000 + handle;
        break;
      case MessageType::QueryGid:
        reply.words[field::kGidHigh] = 0;
        reply.words[field::kGidLow] = 0x0000'ffff'0a01'0203;  // ::ffff:10.1.2.3
        break;
      case MessageType::QueryPort:
        reply.words[field::kState] = 4;
        reply.words[field::kMaxMtu] = 5;
        reply.words[field::kActiveMtu] = 3;
        reply.words[field::kGidTblLen] = 1;
        reply.words[field::kPkeyTblLen] = 1;
        reply.words[field::kLinkLayer] = 2;
        break;
      case MessageType::QueryQp:
        reply.words[field::kModState] = 3;
        reply.words[field::kModPathMtu] = 3;
        reply.words[field::kModDestQpNum] = 0x42;
        break;
      default:
        if (reply.words.size() > field::kHandle) reply.words[field::kHandle] = handle;
        break;
    }
    return reply;
  }

  int client_fd_ = -1;
  std::atomic<int> daemon_fd_{-1};
  int listener_ = -1;
  std::thread thread_;
  std::mutex mutex_;
  std::map<std::pair<std::uint32_t, int>, AdoptedRing> rings_;
  std::map<std::pair<std::uint32_t, int>, int> fds_;
  std::vector<int> owned_fds_;
  std::map<MessageType, std::uint64_t> forced_;
  std::map<MessageType, control::Message> last_;
  std::uint32_t next_handle_ = 1;
  bool wrong_id_ = false;
  bool close_next_ = false;
};

std::uint64_t eventfd_count(int fd) {
  // The fake's copies of eventfds are blocking; only read what is there.
  pollfd waiting{fd, POLLIN, 0};
  if (::poll(&waiting, 1, 0) != 1) return 0;
  std::uint64_t value = 0;
  REQUIRE(::read(fd, &value, sizeof(value)) == sizeof(value));
  return value;
}

void ring_eventfd(int fd) {
  const std::uint64_t one = 1;
  REQUIRE(::write(fd, &one, sizeof(one)) == sizeof(one));
}

Cqe make_cqe(std::uint64_t wr_id, std::uint32_t qp_num) {
  Cqe cqe{};
  cqe.wr_id = wr_id;
  cqe.qp_num = qp_num;
  cqe.byte_len = static_cast<std::uint32_t>(wr_id * 10);
  cqe.opcode = 128;  // IBV_WC_RECV
  return cqe;
}

template <typename T>
T pop_entry(RingConsumer& ring) {
  T out{};
  REQUIRE(ring.try_pop_value(out) == PopResult::Popped);
  return out;
}

// A QP in RTS (the fake accepts every modify) with one CQ, a PD and an MR of `buffer`.
struct QpScene {
  FakeDaemon daemon;
  std::shared_ptr<client::Context> context = daemon.open();
  std::shared_ptr<client::ProtectionDomain> pd = context->alloc_pd().value;
  std::shared_ptr<client::CompletionQueue> cq = context->create_cq(8, nullptr).value;
  std::shared_ptr<client::QueuePair> qp;

  explicit QpScene(QpCapabilities cap = {4, 4, 2, 2, 0}, QpType type = QpType::Rc) {
    client::QpInit init;
    init.type = type;
    init.send_cq = init.recv_cq = cq;
    init.cap = cap;
    auto created = pd->create_qp(init);
    REQUIRE(created.error == 0);
    qp = created.value;
  }
  void to_rts() {
    QpAttributes attr;
    attr.state = QpState::Rts;
    REQUIRE(qp->modify(attr, qp_attr::kState) == 0);
  }
  RingConsumer sq() {
    AdoptedRing& ring = daemon.ring(qp->handle(), 0);
    return RingConsumer(ring.region.bytes(), ring.geometry);
  }
  RingConsumer rq() {
    AdoptedRing& ring = daemon.ring(qp->handle(), 1);
    return RingConsumer(ring.region.bytes(), ring.geometry);
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------
// WR -> WQE

TEST_CASE("client: a SEND WR becomes a WQE with its SGEs, flags and immediate", "[client]") {
  const Sge sges[] = {{0x1000, 10, 7}, {0x2000, 20, 8}};
  client::SendWr wr;
  wr.wr_id = 99;
  wr.sg_list = sges;
  wr.opcode = static_cast<std::uint32_t>(Opcode::SendWithImm);
  wr.send_flags = send_flags::kSolicited;
  wr.imm_data = htonl(0xCAFE);
  SendWqe wqe;
  REQUIRE(client::build_send_wqe(wr, {rocev2::QpType::Rc, 2, 0, false}, wqe) == 0);
  CHECK(wqe.wr_id == 99);
  CHECK(wqe.opcode == 3);
  CHECK(wqe.send_flags == send_flags::kSolicited);
  CHECK(wqe.imm_data == htonl(0xCAFE));
  REQUIRE(wqe.num_sge == 2);
  CHECK(wqe.sge[0].addr == 0x1000);
  CHECK(wqe.sge[0].length == 10);
  CHECK(wqe.sge[0].lkey == 7);
  CHECK(wqe.sge[1].addr == 0x2000);
  CHECK(wqe.sge[1].lkey == 8);
  CHECK(wqe.inline_length == 0);
}

TEST_CASE("client: sq_sig_all makes every WQE signaled", "[client]") {
  client::SendWr wr;
  SendWqe wqe;
  REQUIRE(client::build_send_wqe(wr, {rocev2::QpType::Rc, 1, 0, true}, wqe) == 0);
  CHECK(wqe.send_flags == send_flags::kSignaled);
}

TEST_CASE("client: RDMA and atomic fields reach the WQE", "[client]") {
  std::uint64_t result = 0;
  const Sge sge{reinterpret_cast<std::uintptr_t>(&result), 8, 3};
  client::SendWr wr;
  wr.sg_list = std::span(&sge, 1);
  wr.opcode = static_cast<std::uint32_t>(Opcode::AtomicCmpSwp);
  wr.remote_addr = 0x7000'0008;
  wr.rkey = 0x55;
  wr.compare_add = 1;
  wr.swap = 2;
  SendWqe wqe;
  REQUIRE(client::build_send_wqe(wr, {rocev2::QpType::Rc, 1, 0, false}, wqe) == 0);
  CHECK(wqe.remote_addr == 0x7000'0008);
  CHECK(wqe.rkey == 0x55);
  CHECK(wqe.compare_add == 1);
  CHECK(wqe.swap == 2);

  wr.remote_addr = 0x7000'0004;  // an atomic needs an 8-byte aligned address
  CHECK(client::build_send_wqe(wr, {rocev2::QpType::Rc, 1, 0, false}, wqe) == EINVAL);
}

TEST_CASE("client: inline data is copied at post time and the SGEs dropped", "[client]") {
  char first[] = "hello ";
  char second[] = "world";
  const Sge sges[] = {{reinterpret_cast<std::uintptr_t>(first), 6, 0}, {reinterpret_cast<std::uintptr_t>(second), 5, 0}};
  client::SendWr wr;
  wr.sg_list = sges;
  wr.send_flags = send_flags::kInline;
  SendWqe wqe;
  REQUIRE(client::build_send_wqe(wr, {rocev2::QpType::Rc, 2, kMaxInlineData, false}, wqe) == 0);
  std::memset(first, 'x', 6);  // the application may reuse its buffer at once
  CHECK(wqe.num_sge == 0);
  REQUIRE(wqe.inline_length == 11);
  CHECK(std::string(reinterpret_cast<const char*>(wqe.inline_data), 11) == "hello world");
}

TEST_CASE("client: refused WRs are EINVAL at post time", "[client]") {
  std::vector<char> big(kMaxInlineData + 1);
  const Sge big_sge{reinterpret_cast<std::uintptr_t>(big.data()), static_cast<std::uint32_t>(big.size()), 0};
  const Sge three[] = {{0x1000, 1, 1}, {0x2000, 1, 1}, {0x3000, 1, 1}};
  const client::SendShape rc{rocev2::QpType::Rc, 2, kMaxInlineData, false};
  SendWqe wqe;
  client::SendWr wr;

  SECTION("more SGEs than the QP's max_send_sge") {
    wr.sg_list = three;
    CHECK(client::build_send_wqe(wr, rc, wqe) == EINVAL);
  }
  SECTION("inline longer than max_inline_data") {
    wr.sg_list = std::span(&big_sge, 1);
    wr.send_flags = send_flags::kInline;
    CHECK(client::build_send_wqe(wr, rc, wqe) == EINVAL);
  }
  SECTION("inline on a READ") {
    wr.opcode = static_cast<std::uint32_t>(Opcode::RdmaRead);
    wr.send_flags = send_flags::kInline;
    CHECK(client::build_send_wqe(wr, rc, wqe) == EINVAL);
  }
  SECTION("TSO, which we do not implement, and a number that is no opcode") {
    wr.opcode = 10;
    CHECK(client::build_send_wqe(wr, rc, wqe) == EINVAL);
    wr.opcode = 0x102;  // would be SEND (2) if truncated to a byte
    CHECK(client::build_send_wqe(wr, rc, wqe) == EINVAL);
  }
  SECTION("RDMA WRITE on UD, and a UD SEND without an address handle") {
    wr.opcode = static_cast<std::uint32_t>(Opcode::RdmaWrite);
    CHECK(client::build_send_wqe(wr, {rocev2::QpType::Ud, 1, 0, false}, wqe) == EINVAL);
    wr.opcode = static_cast<std::uint32_t>(Opcode::Send);
    CHECK(client::build_send_wqe(wr, {rocev2::QpType::Ud, 1, 0, false}, wqe) == EINVAL);
  }
  SECTION("READ on UC") {
    wr.opcode = static_cast<std::uint32_t>(Opcode::RdmaRead);
    CHECK(client::build_send_wqe(wr, {rocev2::QpType::Uc, 1, 0, false}, wqe) == EINVAL);
  }
  SECTION("an unknown send flag") {
    wr.send_flags = 1u << 7;
    CHECK(client::build_send_wqe(wr, rc, wqe) == EINVAL);
  }
}

TEST_CASE("client: a receive WR becomes a RecvWqe, too many SGEs is EINVAL", "[client]") {
  const Sge sges[] = {{0x1000, 10, 7}, {0x2000, 20, 8}};
  RecvWqe wqe;
  REQUIRE(client::build_recv_wqe({5, sges}, 2, wqe) == 0);
  CHECK(wqe.wr_id == 5);
  CHECK(wqe.num_sge == 2);
  CHECK(wqe.sge[1].length == 20);
  CHECK(wqe.reserved == 0);
  CHECK(client::build_recv_wqe({5, sges}, 1, wqe) == EINVAL);
}

TEST_CASE("client: ring capacities are powers of two, at least one", "[client]") {
  CHECK(client::ring_capacity_for(0) == 1u);
  CHECK(client::ring_capacity_for(1) == 1u);
  CHECK(client::ring_capacity_for(5) == 8u);
  CHECK(client::ring_capacity_for(kMaxRingCapacity) == kMaxRingCapacity);
  CHECK_FALSE(client::ring_capacity_for(kMaxRingCapacity + 1).has_value());
}

TEST_CASE("client: which QP states accept posts", "[client]") {
  CHECK(client::send_state_error(QpState::Init) == EINVAL);
  CHECK(client::send_state_error(QpState::Rtr) == EINVAL);
  CHECK(client::send_state_error(QpState::Rts) == 0);
  CHECK(client::send_state_error(QpState::Err) == 0);
  CHECK(client::recv_state_error(QpState::Reset, false) == EINVAL);
  CHECK(client::recv_state_error(QpState::Init, false) == 0);
  CHECK(client::recv_state_error(QpState::Rts, true) == EINVAL);
}

// ---------------------------------------------------------------------------------------
// Against the fake daemon

TEST_CASE("client: open_device passes the event ring and eventfd and reads the reply", "[client]") {
  FakeDaemon daemon;
  auto context = daemon.open();
  CHECK(context->handle() == FakeDaemon::kContextHandle);
  CHECK(context->node_guid() == 0x0200'5eff'fe00'0001);
  const control::Message open = daemon.last(MessageType::OpenDevice);
  CHECK(open.words[field::kAbiVersion] == client::kAbiVersion);
  CHECK(open.words[field::kEventRingBytes] == client::event_ring_geometry().region_size());
  CHECK(daemon.event_ring().region.valid());
  Gid gid;
  REQUIRE(context->query_gid(1, 0, gid) == 0);
  CHECK(gid.to_string() == "::ffff:10.1.2.3");
  PortAttributes port;
  REQUIRE(context->query_port(1, port) == 0);
  CHECK(port.active_mtu == Mtu::Mtu1024);
  CHECK(port.active());
}

TEST_CASE("client: a post list stops at the first WR that does not fit (bad_wr)", "[client]") {
  QpScene scene;
  const Sge sge{0x1000, 4, 1};
  std::vector<client::SendWr> wrs(6);
  for (std::size_t i = 0; i < wrs.size(); ++i) {
    wrs[i].wr_id = 100 + i;
    wrs[i].sg_list = std::span(&sge, 1);
  }
  std::size_t posted = 99;
  SECTION("before RTS nothing is posted") {
    CHECK(scene.qp->post_send(wrs, posted) == EINVAL);
    CHECK(posted == 0);
    RingConsumer sq = scene.sq();
    CHECK(sq.available() == 0);
  }
  SECTION("in RTS the ring takes 4, the fifth is ENOMEM") {
    scene.to_rts();
    CHECK(scene.qp->capabilities().max_send_wr == 4);
    CHECK(scene.qp->post_send(wrs, posted) == ENOMEM);
    CHECK(posted == 4);
    RingConsumer sq = scene.sq();
    REQUIRE(sq.available() == 4);
    for (std::uint64_t i = 0; i < 4; ++i) {
      const SendWqe wqe = pop_entry<SendWqe>(sq);
      CHECK(wqe.wr_id == 100 + i);
      CHECK(wqe.sge[0].lkey == 1);
    }
    // The daemon made room: the rest of the list goes in.
    CHECK(scene.qp->post_send(std::span(wrs).subspan(4), posted) == 0);
    CHECK(posted == 2);
    CHECK(pop_entry<SendWqe>(sq).wr_id == 104);
  }
  SECTION("a bad WR in the middle: the ones before it are posted and published") {
    scene.to_rts();
    wrs[2].opcode = 10;  // TSO
    CHECK(scene.qp->post_send(wrs, posted) == EINVAL);
    CHECK(posted == 2);
    RingConsumer sq = scene.sq();
    CHECK(sq.available() == 2);
  }
}

TEST_CASE("client: a UD send carries the AH's handle, the remote QPN and Q_Key", "[client]") {
  QpScene scene({4, 4, 1, 1, 0}, QpType::Ud);
  scene.to_rts();
  client::AhAttributes ah_attributes;
  ah_attributes.dgid = *Gid::parse("::ffff:10.1.2.4");
  ah_attributes.hop_limit = 9;
  auto ah = scene.pd->create_ah(ah_attributes);
  REQUIRE(ah.error == 0);
  const control::Message create = scene.daemon.last(MessageType::CreateAh);
  CHECK(create.words[field::kAhDgidLow] == 0x0000'ffff'0a01'0204);
  CHECK(create.words[field::kAhHopLimit] == 9);
  client::SendWr wr;
  wr.ah = ah.value.get();
  wr.remote_qpn = 0x77;
  wr.remote_qkey = 0x11111111;
  std::size_t posted = 0;
  REQUIRE(scene.qp->post_send(std::span(&wr, 1), posted) == 0);
  RingConsumer sq = scene.sq();
  const SendWqe wqe = pop_entry<SendWqe>(sq);
  CHECK(wqe.ah_handle == ah.value->handle());
  CHECK(wqe.remote_qpn == 0x77);
  CHECK(wqe.remote_qkey == 0x11111111);
}

TEST_CASE("client: threads posting to one QP each get every WR in exactly once", "[client]") {
  QpScene scene({64, 4, 1, 1, 0});
  scene.to_rts();
  constexpr int kThreads = 4;
  constexpr std::uint64_t kPerThread = 300;
  std::vector<std::thread> posters;
  for (int t = 0; t < kThreads; ++t) {
    posters.emplace_back([&scene, t] {
      for (std::uint64_t i = 0; i < kPerThread; ++i) {
        client::SendWr wr;
        wr.wr_id = (std::uint64_t(t) << 32) | i;
        std::size_t posted = 0;
        // A full ring is ENOMEM: the "daemon" (this test's main thread) makes room.
        while (scene.qp->post_send(std::span(&wr, 1), posted) == ENOMEM) std::this_thread::yield();
      }
    });
  }
  RingConsumer sq = scene.sq();
  std::vector<std::uint64_t> next(kThreads, 0);
  std::uint64_t taken = 0;
  while (taken < kThreads * kPerThread) {
    SendWqe wqe;
    if (sq.try_pop_value(wqe) != PopResult::Popped) {
      std::this_thread::yield();
      continue;
    }
    const auto thread = static_cast<std::size_t>(wqe.wr_id >> 32);
    REQUIRE(thread < kThreads);
    // Each thread's WRs arrive in its own order, none lost or doubled.
    REQUIRE((wqe.wr_id & 0xFFFFFFFF) == next[thread]);
    ++next[thread];
    ++taken;
  }
  for (auto& poster : posters) poster.join();
  CHECK(sq.available() == 0);
}

TEST_CASE("client: concurrent control requests each get their own reply", "[client]") {
  FakeDaemon daemon;
  auto context = daemon.open();
  std::vector<std::thread> threads;
  std::vector<std::uint32_t> handles(8, 0);
  for (std::size_t t = 0; t < handles.size(); ++t) {
    threads.emplace_back([&, t] {
      auto pd = context->alloc_pd();
      if (pd.ok()) {
        handles[t] = pd.value->handle();
        pd.value->destroy();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  std::sort(handles.begin(), handles.end());
  CHECK(handles.front() != 0);
  CHECK(std::adjacent_find(handles.begin(), handles.end()) == handles.end());
}

TEST_CASE("client: the doorbell rings only when the daemon asked for it", "[client]") {
  QpScene scene;
  scene.to_rts();
  const int doorbell = scene.daemon.fd_of(scene.qp->handle());
  RingConsumer sq = scene.sq();
  client::SendWr wr;
  std::size_t posted = 0;
  REQUIRE(scene.qp->post_send(std::span(&wr, 1), posted) == 0);
  CHECK(eventfd_count(doorbell) == 0);
  (void)pop_entry<SendWqe>(sq);
  REQUIRE(sq.request_doorbell());  // empty: the daemon goes to sleep
  const std::vector<client::SendWr> two(2);
  REQUIRE(scene.qp->post_send(two, posted) == 0);
  CHECK(eventfd_count(doorbell) == 1);  // one ring for the whole list
}

TEST_CASE("client: receives go to the RQ ring, and an SRQ QP refuses them", "[client]") {
  QpScene scene;
  const Sge sge{0x1000, 64, 9};
  const client::RecvWr wr{7, std::span(&sge, 1)};
  std::size_t posted = 0;
  CHECK(scene.qp->post_recv(std::span(&wr, 1), posted) == EINVAL);  // RESET
  QpAttributes attr;
  attr.state = QpState::Init;
  REQUIRE(scene.qp->modify(attr, qp_attr::kState) == 0);
  REQUIRE(scene.qp->post_recv(std::span(&wr, 1), posted) == 0);
  RingConsumer rq = scene.rq();
  const RecvWqe wqe = pop_entry<RecvWqe>(rq);
  CHECK(wqe.wr_id == 7);
  CHECK(wqe.sge[0].lkey == 9);

  auto srq = scene.pd->create_srq(4, 1, 0);
  REQUIRE(srq.error == 0);
  client::QpInit init;
  init.send_cq = init.recv_cq = scene.cq;
  init.srq = srq.value;
  auto with_srq = scene.pd->create_qp(init);
  REQUIRE(with_srq.error == 0);
  CHECK(with_srq.value->capabilities().max_recv_wr == 0);
  CHECK(scene.daemon.last(MessageType::CreateQp).words[field::kQpSrq] == srq.value->handle());
  REQUIRE(with_srq.value->modify(attr, qp_attr::kState) == 0);
  CHECK(with_srq.value->post_recv(std::span(&wr, 1), posted) == EINVAL);
  REQUIRE(srq.value->post_recv(std::span(&wr, 1), posted) == 0);
  AdoptedRing& srq_ring = scene.daemon.ring(srq.value->handle());
  RingConsumer srq_consumer(srq_ring.region.bytes(), srq_ring.geometry);
  CHECK(pop_entry<RecvWqe>(srq_consumer).wr_id == 7);
}

TEST_CASE("client: poll takes up to N CQEs from the ring, in order", "[client]") {
  FakeDaemon daemon;
  auto context = daemon.open();
  auto cq = context->create_cq(4, nullptr).value;
  REQUIRE(cq);
  CHECK(cq->capacity() == 4);
  AdoptedRing& ring = daemon.ring(cq->handle());
  RingProducer producer(ring.region.bytes(), ring.geometry);
  for (std::uint64_t i = 1; i <= 3; ++i) REQUIRE(producer.try_push_value(make_cqe(i, 0x11)) == PushResult::Pushed);
  Cqe out[2];
  CHECK(cq->poll(out) == 0);  // pushed, not published
  producer.publish();
  REQUIRE(cq->poll(out) == 2);
  CHECK(out[0].wr_id == 1);
  CHECK(out[1].wr_id == 2);
  CHECK(out[1].byte_len == 20);
  REQUIRE(cq->poll(out) == 1);
  CHECK(out[0].wr_id == 3);
  CHECK(out[0].qp_num == 0x11);
  CHECK(cq->poll(out) == 0);
}

TEST_CASE("client: a CQ ring the daemon corrupted is -EIO", "[client]") {
  FakeDaemon daemon;
  auto context = daemon.open();
  auto cq = context->create_cq(4, nullptr).value;
  AdoptedRing& ring = daemon.ring(cq->handle());
  auto* header = reinterpret_cast<RingHeader*>(ring.region.bytes().data());
  header->producer_index = 1000;  // more than the capacity ahead of the consumer
  Cqe out[1];
  CHECK(cq->poll(out) == -EIO);
}

TEST_CASE("client: req_notify, the daemon's signal and get_cq_event", "[client]") {
  FakeDaemon daemon;
  auto context = daemon.open();
  auto channel = context->create_comp_channel().value;
  auto cq = context->create_cq(4, channel).value;
  CHECK(channel->attached() == 1);
  // The CQ's notify fd is the channel's eventfd (VERBS_DATAPATH.md).
  const int notify = daemon.fd_of(cq->handle());
  AdoptedRing& ring = daemon.ring(cq->handle());
  RingProducer producer(ring.region.bytes(), ring.geometry);
  std::shared_ptr<client::CompletionQueue> fired;

  SECTION("not armed: no signal, no event") {
    REQUIRE(producer.try_push_value(make_cqe(1, 0)) == PushResult::Pushed);
    CHECK_FALSE(producer.publish_completions(true));
    CHECK(channel->get_cq_event(fired, 0) == ETIMEDOUT);
  }
  SECTION("armed for the next completion") {
    REQUIRE(cq->req_notify(false) == 0);
    REQUIRE(producer.try_push_value(make_cqe(1, 0)) == PushResult::Pushed);
    REQUIRE(producer.publish_completions(false));
    ring_eventfd(notify);
    REQUIRE(channel->get_cq_event(fired, 0) == 0);
    CHECK(fired == cq);
    // One event per arm.
    CHECK(channel->get_cq_event(fired, 0) == ETIMEDOUT);
  }
  SECTION("armed for solicited completions only") {
    REQUIRE(cq->req_notify(true) == 0);
    REQUIRE(producer.try_push_value(make_cqe(1, 0)) == PushResult::Pushed);
    CHECK_FALSE(producer.publish_completions(false));
    REQUIRE(producer.try_push_value(make_cqe(2, 0)) == PushResult::Pushed);
    REQUIRE(producer.publish_completions(true));
    ring_eventfd(notify);
    REQUIRE(channel->get_cq_event(fired, 0) == 0);
    CHECK(fired == cq);
  }
  SECTION("a non-blocking channel fd gives EAGAIN") {
    REQUIRE(::fcntl(channel->fd(), F_SETFL, O_NONBLOCK) == 0);
    CHECK(channel->get_cq_event(fired) == EAGAIN);
  }
}

TEST_CASE("client: two CQs on one channel are reported one per call, each after its signal", "[client]") {
  FakeDaemon daemon;
  auto context = daemon.open();
  auto channel = context->create_comp_channel().value;
  auto a = context->create_cq(4, channel).value;
  auto b = context->create_cq(4, channel).value;
  const int notify = daemon.fd_of(a->handle());
  AdoptedRing& ring_a = daemon.ring(a->handle());
  AdoptedRing& ring_b = daemon.ring(b->handle());
  RingProducer producer_a(ring_a.region.bytes(), ring_a.geometry);
  RingProducer producer_b(ring_b.region.bytes(), ring_b.geometry);
  REQUIRE(a->req_notify(false) == 0);
  REQUIRE(b->req_notify(false) == 0);
  REQUIRE(producer_a.try_push_value(make_cqe(1, 0)) == PushResult::Pushed);
  REQUIRE(producer_b.try_push_value(make_cqe(2, 0)) == PushResult::Pushed);
  REQUIRE(producer_a.publish_completions(false));
  REQUIRE(producer_b.publish_completions(false));
  std::shared_ptr<client::CompletionQueue> fired;

  SECTION("both signals arrived: two events, then none") {
    ring_eventfd(notify);
    ring_eventfd(notify);
    REQUIRE(channel->get_cq_event(fired, 0) == 0);
    const auto first = fired;
    REQUIRE(channel->get_cq_event(fired, 0) == 0);
    CHECK(first != fired);
    CHECK(((first == a && fired == b) || (first == b && fired == a)));
    CHECK(channel->get_cq_event(fired, 0) == ETIMEDOUT);
  }
  SECTION("the second signal is late: its CQ waits for it") {
    ring_eventfd(notify);
    REQUIRE(channel->get_cq_event(fired, 0) == 0);
    // B fired too, but reporting it before its write is read would leave that write to
    // wake the application for nothing.
    CHECK(channel->get_cq_event(fired, 0) == ETIMEDOUT);
    ring_eventfd(notify);
    REQUIRE(channel->get_cq_event(fired, 0) == 0);
    CHECK(channel->get_cq_event(fired, 0) == ETIMEDOUT);
  }
}

TEST_CASE("client: a destroyed CQ leaves its channel", "[client]") {
  FakeDaemon daemon;
  auto context = daemon.open();
  auto channel = context->create_comp_channel().value;
  auto cq = context->create_cq(4, channel).value;
  REQUIRE(channel->attached() == 1);
  REQUIRE(cq->destroy() == 0);
  CHECK(daemon.last(MessageType::DestroyCq).words[field::kDestroyHandle] == cq->handle());
  cq.reset();
  CHECK(channel->attached() == 0);
}

TEST_CASE("client: get_cq_event may drop the last reference to the CQ its out-parameter held", "[client]") {
  FakeDaemon daemon;
  auto context = daemon.open();
  auto channel = context->create_comp_channel().value;
  auto held = context->create_cq(4, channel).value;
  auto armed = context->create_cq(4, channel).value;
  AdoptedRing& ring = daemon.ring(armed->handle());
  RingProducer producer(ring.region.bytes(), ring.geometry);
  REQUIRE(armed->req_notify(false) == 0);
  REQUIRE(producer.try_push_value(make_cqe(1, 0)) == PushResult::Pushed);
  REQUIRE(producer.publish_completions(false));
  ring_eventfd(daemon.fd_of(armed->handle()));
  // `out` owns the other CQ alone: replacing it destroys that CQ, which leaves the channel.
  std::shared_ptr<client::CompletionQueue> out = std::move(held);
  REQUIRE(channel->get_cq_event(out, 0) == 0);
  CHECK(out == armed);
  CHECK(channel->attached() == 1);
}

TEST_CASE("client: resize switches to the new ring the daemon adopted", "[client]") {
  FakeDaemon daemon;
  auto context = daemon.open();
  auto cq = context->create_cq(2, nullptr).value;
  REQUIRE(cq->req_notify(false) == 0);
  REQUIRE(cq->resize(100) == 0);
  CHECK(cq->capacity() == 128);
  CHECK(daemon.last(MessageType::ResizeCq).words[field::kResizeRingBytes] ==
        client::cq_ring_geometry(128).region_size());
  AdoptedRing& ring = daemon.ring(cq->handle());
  RingProducer producer(ring.region.bytes(), ring.geometry);
  // The standing arm moved with the CQ.
  REQUIRE(producer.try_push_value(make_cqe(5, 0)) == PushResult::Pushed);
  CHECK(producer.publish_completions(false));
  Cqe out[1];
  REQUIRE(cq->poll(out) == 1);
  CHECK(out[0].wr_id == 5);
  CHECK(cq->resize(0) == EINVAL);
}

TEST_CASE("client: async events come from the event ring", "[client]") {
  FakeDaemon daemon;
  auto context = daemon.open();
  AsyncEventEntry event{};
  CHECK(context->try_get_async_event(event) == EAGAIN);
  CHECK(context->get_async_event(event, 0) == ETIMEDOUT);
  AdoptedRing& ring = daemon.event_ring();
  RingProducer producer(ring.region.bytes(), ring.geometry);
  REQUIRE(producer.try_push_value(AsyncEventEntry{1, 0, 77}) == PushResult::Pushed);
  REQUIRE(producer.try_push_value(AsyncEventEntry{15, 0, 78}) == PushResult::Pushed);
  producer.publish();
  ring_eventfd(daemon.event_fd());
  const auto async_fd_readable = [&] {
    pollfd readable{context->async_fd(), POLLIN, 0};
    return ::poll(&readable, 1, 0) == 1;
  };
  REQUIRE(context->get_async_event(event) == 0);
  CHECK(event.event_type == 1);
  CHECK(event.element == 77);
  CHECK(async_fd_readable());  // one more event is queued
  REQUIRE(context->get_async_event(event, 0) == 0);
  CHECK(event.event_type == 15);
  CHECK(event.element == 78);
  // Nothing queued: a poll()ing application must not be woken for what it already took.
  CHECK_FALSE(async_fd_readable());
  REQUIRE(::fcntl(context->async_fd(), F_SETFL, O_NONBLOCK) == 0);
  CHECK(context->get_async_event(event) == EAGAIN);
}

// ---------------------------------------------------------------------------------------
// Signals during a blocking wait (docs/VERBS_CLIENT.md, "Signals"): a kernel provider sleeps
// in read(2) of the channel or async fd, which a handler installed without SA_RESTART ends
// with EINTR and the kernel restarts under SA_RESTART (qperf's SIGALRM is the former).

namespace {

std::atomic<int> g_alarm_ticks{0};
void count_alarm(int) { g_alarm_ticks.fetch_add(1, std::memory_order_relaxed); }

// SIGALRM every 2 ms, counted by count_alarm unless a test gives another handler.
class AlarmTicks : public rrdma::test::AlarmTicks {
 public:
  explicit AlarmTicks(int flags, void (*handler)(int) = count_alarm) : rrdma::test::AlarmTicks(flags, handler) {
    REQUIRE(armed());
  }
};

// Runs `act` on its own thread once `ready()` holds, or after `limit` at the latest; joined
// at the end of the scope.
class Later {
 public:
  Later(std::function<bool()> ready, std::chrono::seconds limit, std::function<void()> act)
      : thread_([this, ready = std::move(ready), limit, act = std::move(act)] {
          const auto deadline = std::chrono::steady_clock::now() + limit;
          while (!cancelled_ && !ready() && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          if (!cancelled_) act();
        }) {}
  ~Later() {
    cancelled_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> cancelled_{false};
  std::thread thread_;
};

// A channel with one armed CQ; complete() is the daemon's completion and signal.
struct ChannelScene {
  FakeDaemon daemon;
  std::shared_ptr<client::Context> context = daemon.open();
  std::shared_ptr<client::CompletionChannel> channel = context->create_comp_channel().value;
  std::shared_ptr<client::CompletionQueue> cq = context->create_cq(4, channel).value;

  ChannelScene() { REQUIRE(cq->req_notify(false) == 0); }
  void complete() {
    AdoptedRing& ring = daemon.ring(cq->handle());
    RingProducer producer(ring.region.bytes(), ring.geometry);
    REQUIRE(producer.try_push_value(make_cqe(1, 0)) == PushResult::Pushed);
    REQUIRE(producer.publish_completions(false));
    ring_eventfd(daemon.fd_of(cq->handle()));
  }
  void raise_event() {
    RingProducer events(daemon.event_ring().region.bytes(), daemon.event_ring().geometry);
    REQUIRE(events.try_push_value(AsyncEventEntry{static_cast<std::uint32_t>(EventType::CommEst), 0, 7}) ==
            PushResult::Pushed);
    events.publish();
    ring_eventfd(daemon.event_fd());
  }
};

}  // namespace

TEST_CASE("client: a signal handled without SA_RESTART ends a blocking wait with EINTR", "[client]") {
  ChannelScene scene;
  std::shared_ptr<client::CompletionQueue> fired;
  AsyncEventEntry event{};
  const auto never = [] { return false; };
  // Were the wait to go on through the signals, the daemon's signal ends it after a while
  // (and the check fails) instead of the test hanging.
  SECTION("get_cq_event") {
    Later rescue(never, std::chrono::seconds(20), [&] { scene.complete(); });
    AlarmTicks ticks(0);
    CHECK(scene.channel->get_cq_event(fired) == EINTR);
  }
  SECTION("get_async_event") {
    Later rescue(never, std::chrono::seconds(20), [&] { scene.raise_event(); });
    AlarmTicks ticks(0);
    CHECK(scene.context->get_async_event(event) == EINTR);
  }
}

TEST_CASE("client: under SA_RESTART a blocking wait sleeps through signals until its event", "[client]") {
  ChannelScene scene;
  std::shared_ptr<client::CompletionQueue> fired;
  AsyncEventEntry event{};
  g_alarm_ticks = 0;
  // The daemon signals after 25 ticks of 2 ms have reached the sleeping thread.
  const auto ticked = [] { return g_alarm_ticks.load() >= 25; };
  SECTION("get_cq_event") {
    Later daemon_signal(ticked, std::chrono::seconds(20), [&] { scene.complete(); });
    AlarmTicks ticks(SA_RESTART);
    CHECK(scene.channel->get_cq_event(fired) == 0);
    CHECK(fired == scene.cq);
  }
  SECTION("get_async_event") {
    Later daemon_signal(ticked, std::chrono::seconds(20), [&] { scene.raise_event(); });
    AlarmTicks ticks(SA_RESTART);
    REQUIRE(scene.context->get_async_event(event) == 0);
    CHECK(event.event_type == static_cast<std::uint32_t>(EventType::CommEst));
  }
  CHECK(g_alarm_ticks.load() >= 25);
}

TEST_CASE("client: a signal the thread blocks or ignores does not end a blocking wait", "[client]") {
  ChannelScene scene;
  std::shared_ptr<client::CompletionQueue> fired;
  // Nothing to count: the daemon signals after 200 ms of ticks.
  const auto start = std::chrono::steady_clock::now();
  const auto later = [start] { return std::chrono::steady_clock::now() - start > std::chrono::milliseconds(200); };
  Later daemon_signal(later, std::chrono::seconds(20), [&] { scene.complete(); });
  rusage before{};
  REQUIRE(::getrusage(RUSAGE_THREAD, &before) == 0);
  const long cpu_at_start = (before.ru_utime.tv_sec + before.ru_stime.tv_sec) * 1000 +
                            (before.ru_utime.tv_usec + before.ru_stime.tv_usec) / 1000;
  SECTION("blocked: it stays pending, its handler not run") {
    g_alarm_ticks = 0;
    sigset_t alarm;
    sigemptyset(&alarm);
    sigaddset(&alarm, SIGALRM);
    REQUIRE(::pthread_sigmask(SIG_BLOCK, &alarm, nullptr) == 0);
    {
      AlarmTicks ticks(0);
      CHECK(scene.channel->get_cq_event(fired) == 0);
      sigset_t pending;
      REQUIRE(::sigpending(&pending) == 0);
      CHECK(sigismember(&pending, SIGALRM) == 1);
    }  // deleting the timer drops its pending signal
    CHECK(g_alarm_ticks.load() == 0);
    ::signal(SIGALRM, SIG_IGN);  // drops it, should it still be pending
    REQUIRE(::pthread_sigmask(SIG_UNBLOCK, &alarm, nullptr) == 0);
    ::signal(SIGALRM, SIG_DFL);
  }
  SECTION("ignored") {
    AlarmTicks ticks(0, SIG_IGN);
    CHECK(scene.channel->get_cq_event(fired) == 0);
  }
  CHECK(fired == scene.cq);
  // Asleep, not spinning on the pending or ignored signal: 200 ms of waiting cost the thread
  // well under 50 ms of CPU (a load only slows a spin down, never makes sleep cost more).
  rusage used{};
  REQUIRE(::getrusage(RUSAGE_THREAD, &used) == 0);
  const auto cpu_ms = [](const timeval& t) { return t.tv_sec * 1000 + t.tv_usec / 1000; };
  CHECK(cpu_ms(used.ru_utime) + cpu_ms(used.ru_stime) - cpu_at_start < 50);
}

// ---------------------------------------------------------------------------------------
// The daemon dies (docs/VERBS_CLIENT.md, "When the daemon dies")

namespace {

bool readable_within(int fd, int timeout_ms) {
  pollfd waiting{fd, POLLIN, 0};
  return ::poll(&waiting, 1, timeout_ms) == 1;
}

Cqe send_cqe(std::uint64_t wr_id, std::uint32_t qp_num) {
  Cqe cqe{};
  cqe.wr_id = wr_id;
  cqe.qp_num = qp_num;
  cqe.opcode = static_cast<std::uint32_t>(WcOpcode::Send);
  return cqe;
}

// Polls as a busy-polling program does until something comes (or the poll fails), for at
// most `limit`; the CQEs polled and the last poll's result.
int poll_until_something(client::CompletionQueue& cq, std::vector<Cqe>& got, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  Cqe batch[8];
  for (;;) {
    const int n = cq.poll(batch);
    if (n > 0) got.insert(got.end(), batch, batch + n);
    if (n != 0 || std::chrono::steady_clock::now() >= deadline) return n;
  }
}

}  // namespace

TEST_CASE("client: when the daemon dies, waits wake, outstanding work is flushed, posts fail", "[client]") {
  FakeDaemon daemon;
  auto context = daemon.open();
  auto pd = context->alloc_pd().value;
  auto channel = context->create_comp_channel().value;
  auto cq = context->create_cq(16, channel).value;
  client::QpInit init;
  init.send_cq = init.recv_cq = cq;
  init.cap = {4, 4, 1, 1, 0};
  auto qp = pd->create_qp(init).value;
  REQUIRE(qp);
  QpAttributes rts;
  rts.state = QpState::Rts;
  REQUIRE(qp->modify(rts, qp_attr::kState) == 0);

  // Receives 10 and 11; sends 1 (unsignaled), 2 (signaled), 3 (unsignaled).
  const client::RecvWr recvs[] = {{10, {}}, {11, {}}};
  std::size_t posted = 0;
  REQUIRE(qp->post_recv(recvs, posted) == 0);
  client::SendWr sends[3];
  for (std::uint64_t i = 0; i < 3; ++i) sends[i].wr_id = i + 1;
  sends[1].send_flags = rocev2::send_flags::kSignaled;
  REQUIRE(qp->post_send(sends, posted) == 0);

  // The daemon completed send 2 (and so 1) and queued an event before it died.
  AdoptedRing& cq_ring = daemon.ring(cq->handle());
  RingProducer completions(cq_ring.region.bytes(), cq_ring.geometry);
  REQUIRE(completions.try_push_value(send_cqe(2, qp->qp_num())) == PushResult::Pushed);
  completions.publish();
  RingProducer events(daemon.event_ring().region.bytes(), daemon.event_ring().geometry);
  REQUIRE(events.try_push_value(AsyncEventEntry{static_cast<std::uint32_t>(EventType::CommEst), 0, 7}) ==
          PushResult::Pushed);
  events.publish();
  ring_eventfd(daemon.event_fd());
  AsyncEventEntry event{};
  REQUIRE(context->get_async_event(event, 0) == 0);  // the queued one, taken before the death
  CHECK(event.event_type == static_cast<std::uint32_t>(EventType::CommEst));

  REQUIRE(cq->req_notify(false) == 0);
  CHECK_FALSE(readable_within(context->async_fd(), 0));
  CHECK_FALSE(readable_within(channel->fd(), 0));
  // A program asleep on its channel and another on its async events.
  auto cq_event = std::async(std::launch::async, [&] {
    std::shared_ptr<client::CompletionQueue> fired;
    return channel->get_cq_event(fired);
  });
  auto async_event = std::async(std::launch::async, [&] {
    AsyncEventEntry entry{};
    const int error = context->get_async_event(entry);
    return error == 0 ? static_cast<int>(entry.event_type) : -error;
  });
  CHECK(cq_event.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout);

  daemon.die();
  REQUIRE(cq_event.wait_for(std::chrono::seconds(1)) == std::future_status::ready);
  CHECK(cq_event.get() == EIO);
  REQUIRE(async_event.wait_for(std::chrono::seconds(1)) == std::future_status::ready);
  CHECK(async_event.get() == static_cast<int>(EventType::DeviceFatal));
  CHECK(context->get_async_event(event, 0) == EIO);  // once, then the device is gone
  // The fds stay readable, as a kernel async fd and channel are after their device went.
  CHECK(readable_within(context->async_fd(), 0));
  CHECK(readable_within(channel->fd(), 0));
  CHECK(context->device_fatal());
  CHECK(qp->state() == QpState::Err);

  // What the daemon completed (send 2, and so 1) comes first; then send 3 and both
  // receives, flushed.
  std::vector<Cqe> polled;
  REQUIRE(poll_until_something(*cq, polled, std::chrono::seconds(1)) == 4);
  std::vector<std::uint64_t> ids;
  for (const Cqe& cqe : polled) {
    CHECK(cqe.qp_num == qp->qp_num());
    ids.push_back(cqe.wr_id);
  }
  CHECK(ids == std::vector<std::uint64_t>{2, 3, 10, 11});
  CHECK(polled[0].status == static_cast<std::uint32_t>(WcStatus::Success));
  for (std::size_t i = 1; i < polled.size(); ++i) {
    CHECK(polled[i].status == static_cast<std::uint32_t>(WcStatus::WrFlushErr));
  }
  CHECK(polled[1].opcode == static_cast<std::uint32_t>(WcOpcode::Send));
  CHECK(polled[2].opcode == static_cast<std::uint32_t>(WcOpcode::Recv));
  Cqe more[4];
  CHECK(cq->poll(more) == -EIO);
  CHECK(qp->post_send(sends, posted) == EIO);
  CHECK(posted == 0);
  CHECK(qp->post_recv(recvs, posted) == EIO);
  CHECK(cq->req_notify(false) == EIO);
  CHECK(context->alloc_pd().error == EIO);
}

TEST_CASE("client: every thread asleep in get_async_event wakes when the daemon dies", "[client]") {
  FakeDaemon daemon;
  auto context = daemon.open();
  const auto sleeper = [&] {
    AsyncEventEntry entry{};
    int error = 0;
    do error = context->get_async_event(entry);  // DEVICE_FATAL once, then EIO
    while (error == 0);
    return error;
  };
  // Should a sleeper not wake, this wakes both after the checks below have failed, so
  // that the test ends.
  Later rescue([] { return false; }, std::chrono::seconds(25), [&] {
    ring_eventfd(daemon.event_fd());
    ring_eventfd(daemon.event_fd());
  });
  auto first = std::async(std::launch::async, sleeper);
  auto second = std::async(std::launch::async, sleeper);
  CHECK(first.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout);
  daemon.die();
  CHECK(first.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  CHECK(second.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  CHECK(first.get() == EIO);
  CHECK(second.get() == EIO);
}

TEST_CASE("client: a program that only busy-polls notices the daemon's death within the check interval", "[client]") {
  QpScene scene;
  QpScene alive;  // another vnic's daemon, still running
  scene.to_rts();
  alive.to_rts();
  client::SendWr write;
  write.wr_id = 42;
  write.opcode = static_cast<std::uint32_t>(rocev2::WrOpcode::RdmaWrite);
  write.send_flags = rocev2::send_flags::kSignaled;
  std::size_t posted = 0;
  REQUIRE(scene.qp->post_send(std::span(&write, 1), posted) == 0);
  REQUIRE(alive.qp->post_send(std::span(&write, 1), posted) == 0);

  scene.daemon.die();
  const auto start = std::chrono::steady_clock::now();
  std::vector<Cqe> got;
  REQUIRE(poll_until_something(*scene.cq, got, std::chrono::seconds(1)) == 1);
  const auto noticed = std::chrono::steady_clock::now() - start;
  // The coarse clock ticks every few ms; the interval is 10 ms.
  CHECK(noticed < std::chrono::milliseconds(100));
  CHECK(got[0].wr_id == 42);
  CHECK(got[0].status == static_cast<std::uint32_t>(WcStatus::WrFlushErr));
  CHECK(got[0].opcode == static_cast<std::uint32_t>(WcOpcode::RdmaWrite));
  Cqe more[1];
  CHECK(scene.cq->poll(more) == -EIO);
  // The async fd became readable although nobody waited on it.
  CHECK(readable_within(scene.context->async_fd(), 0));
  AsyncEventEntry event{};
  REQUIRE(scene.context->try_get_async_event(event) == 0);
  CHECK(event.event_type == static_cast<std::uint32_t>(EventType::DeviceFatal));

  // The other vnic is untouched: its WR is still outstanding, not flushed.
  got.clear();
  CHECK(poll_until_something(*alive.cq, got, std::chrono::milliseconds(50)) == 0);
  CHECK(alive.qp->post_send(std::span(&write, 1), posted) == 0);
  CHECK_FALSE(alive.context->device_fatal());
}

TEST_CASE("client: the work log retires unsignaled sends with the next signaled one, and errors one by one", "[client]") {
  client::WorkLog log(0x101, 8);
  log.posted_send(1, 0, false);
  log.posted_send(2, 0, true);
  log.posted_send(3, 0, false);
  log.posted_send(4, 0, true);
  log.posted_send(5, 0, false);
  log.completed(send_cqe(2, 0x101));  // 1 and 2
  Cqe failed = send_cqe(3, 0x101);
  failed.status = static_cast<std::uint32_t>(WcStatus::RetryExcErr);
  log.completed(failed);  // 3 only, although it was unsignaled
  Cqe out[8];
  REQUIRE(log.flush_sends(out) == 2);
  CHECK(out[0].wr_id == 4);
  CHECK(out[1].wr_id == 5);
  CHECK(log.flush_sends(out) == 0);
  // An error for a WR behind unsignaled ones that succeeded retires them too: after the
  // daemon's death only what never completed is flushed.
  log.posted_send(6, 0, false);
  log.posted_send(7, 0, false);
  log.posted_send(8, 0, true);
  Cqe error_behind = send_cqe(7, 0x101);
  error_behind.status = static_cast<std::uint32_t>(WcStatus::RemAccessErr);
  log.completed(error_behind);  // 6 and 7
  REQUIRE(log.flush_sends(out) == 1);
  CHECK(out[0].wr_id == 8);
  // The bound: the oldest entry must have completed and goes.
  client::WorkLog small(0x102, 2);
  for (std::uint64_t id = 1; id <= 3; ++id) small.posted_recv(id);
  REQUIRE(small.flush_recvs(out) == 2);
  CHECK(out[0].wr_id == 2);
}

TEST_CASE("client: the daemon's status is the verb's errno", "[client]") {
  FakeDaemon daemon;
  auto context = daemon.open();
  auto pd = context->alloc_pd().value;
  daemon.force_status(MessageType::DeallocPd, EBUSY);
  CHECK(pd->destroy() == EBUSY);
  daemon.force_status(MessageType::RegMr, EINVAL);
  char buffer[16];
  CHECK(pd->register_memory(buffer, sizeof(buffer), 1).error == EINVAL);
  daemon.force_status(MessageType::DeallocPd, 0);
  CHECK(pd->destroy() == 0);
}

TEST_CASE("client: a reply to another request or a closed daemon breaks the connection", "[client]") {
  FakeDaemon daemon;
  auto context = daemon.open();
  SECTION("wrong request id") {
    daemon.answer_with_wrong_id();
    CHECK(context->alloc_pd().error == EPROTO);
    CHECK(context->alloc_pd().error == EIO);
  }
  SECTION("daemon gone") {
    daemon.close_on_next_request();
    CHECK(context->alloc_pd().error == EIO);
  }
  SECTION("a status no errno has") {
    daemon.force_status(MessageType::AllocPd, 1u << 20);
    CHECK(context->alloc_pd().error == EPROTO);
  }
}

TEST_CASE("client: MR, QP and query replies carry the daemon's numbers", "[client]") {
  QpScene scene;
  char buffer[64];
  auto mr = scene.pd->register_memory(buffer, sizeof(buffer), 7).value;
  REQUIRE(mr);
  CHECK(mr->lkey() == 0x1000 + mr->handle());
  CHECK(mr->rkey() == 0x2000 + mr->handle());
  const control::Message reg = scene.daemon.last(MessageType::RegMr);
  CHECK(reg.words[field::kMrAddress] == reinterpret_cast<std::uintptr_t>(buffer));
  CHECK(reg.words[field::kMrLength] == sizeof(buffer));
  CHECK(reg.words[field::kMrAccess] == 7);
  CHECK(scene.qp->qp_num() == 0x100 + scene.qp->handle());
  QpAttributes attr;
  REQUIRE(scene.qp->query(~0, attr) == 0);
  CHECK(attr.state == QpState::Rts);
  CHECK(attr.dest_qp_num == 0x42);
  CHECK(attr.cap.max_send_wr == 4);
  CHECK(scene.qp->state() == QpState::Rts);

  QpAttributes rtr;
  rtr.state = QpState::Rtr;
  rtr.dgid = *Gid::parse("::ffff:10.9.8.7");
  rtr.dest_qp_num = 0x1234;
  REQUIRE(scene.qp->modify(rtr, qp_attr::kState | qp_attr::kAv | qp_attr::kDestQpn) == 0);
  const control::Message modify = scene.daemon.last(MessageType::ModifyQp);
  CHECK(modify.words[field::kModAttrMask] == static_cast<std::uint64_t>(qp_attr::kState | qp_attr::kAv | qp_attr::kDestQpn));
  CHECK(modify.words[field::kModState] == 2);
  CHECK(modify.words[field::kModDestQpNum] == 0x1234);
  CHECK(modify.words[field::kModDgidLow] == 0x0000'ffff'0a09'0807);
}

// Issue 27: hardware providers clean a QP's CQEs out of its CQs when it goes to RESET
// (mlx5_cq_clean): the flushes and errors of its past must not answer the recycled QP's new
// work (pyverbs' test_mr_rereg_pd polls a stale IBV_WC_WR_FLUSH_ERR otherwise). The other
// QPs' CQEs stay, in order.
TEST_CASE("client: modify_qp(RESET) drops the QP's unpolled CQEs and keeps the others'", "[client]") {
  QpScene scene;
  scene.to_rts();
  const std::uint32_t mine = scene.qp->qp_num(), other = mine + 1;
  AdoptedRing& ring = scene.daemon.ring(scene.cq->handle());
  RingProducer completions(ring.region.bytes(), ring.geometry);
  for (auto [wr_id, qp_num] : {std::pair{1u, mine}, {2u, other}, {3u, mine}, {4u, other}, {5u, mine}}) {
    Cqe cqe = make_cqe(wr_id, qp_num);
    cqe.status = static_cast<std::uint32_t>(rocev2::WcStatus::WrFlushErr);
    REQUIRE(completions.try_push_value(cqe) == PushResult::Pushed);
  }
  completions.publish();
  QpAttributes reset;
  reset.state = QpState::Reset;
  REQUIRE(scene.qp->modify(reset, qp_attr::kState) == 0);
  Cqe out[8];
  REQUIRE(scene.cq->poll(out) == 2);
  CHECK(out[0].wr_id == 2);
  CHECK(out[1].wr_id == 4);
  // Another state leaves the CQ alone.
  REQUIRE(completions.try_push_value(make_cqe(6, mine)) == PushResult::Pushed);
  completions.publish();
  QpAttributes init;
  init.state = QpState::Init;
  REQUIRE(scene.qp->modify(init, qp_attr::kState) == 0);
  REQUIRE(scene.cq->poll(out) == 1);
  CHECK(out[0].wr_id == 6);
}

TEST_CASE("client: a missing device is ENODEV, a listening socket is a device", "[client]") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("rrdma-client-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  ::setenv("RRDMA_RUN_DIR", dir.c_str(), 1);
  CHECK(client::run_directory() == dir.string());
  CHECK(client::list_devices().empty());
  CHECK(client::Context::open("vnx0").error == ENODEV);
  CHECK(client::Context::open("../etc/passwd").error == ENODEV);
  CHECK(client::Context::open("").error == ENODEV);
  try {
    (void)verbs::Context::open("vnx0");
    FAIL("no exception");
  } catch (const verbs::Error& error) {
    CHECK(error.error_number() == ENODEV);
    CHECK(std::string(error.what()).find("vnx0") != std::string::npos);
  }

  // A stale socket file (nobody listening) is not a device; a listening one is.
  const std::string stale = (dir / "old0.sock").string();
  const std::string live = (dir / "vn0.sock").string();
  const auto bind_to = [](const std::string& path) {
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strcpy(address.sun_path, path.c_str());
    REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0);
    return fd;
  };
  const int stale_fd = bind_to(stale);
  const int live_fd = bind_to(live);
  REQUIRE(::listen(live_fd, 4) == 0);
  const auto devices = client::list_devices();
  REQUIRE(devices.size() == 1);
  CHECK(devices[0].name == "vn0");
  CHECK(devices[0].socket_path == live);
  ::close(stale_fd);
  ::close(live_fd);
  ::unsetenv("RRDMA_RUN_DIR");
  std::filesystem::remove_all(dir);
}

// ---------------------------------------------------------------------------------------
// The C++ API's values

TEST_CASE("api: a WorkCompletion is the bytes of a CQE", "[api]") {
  Cqe cqe{};
  cqe.wr_id = 9;
  cqe.status = 10;
  cqe.opcode = 129;
  cqe.byte_len = 4096;
  cqe.imm_data = htonl(0x01020304);
  cqe.wc_flags = wc_flags::kWithImm;
  cqe.src_qp = 0x77;
  WorkCompletion wc;
  std::memcpy(static_cast<void*>(&wc), &cqe, sizeof(cqe));
  CHECK(wc.wr_id() == 9);
  CHECK(wc.status() == WcStatus::RemAccessErr);
  CHECK_FALSE(wc.ok());
  CHECK(std::string(wc.status_string()) == "remote access error");
  CHECK(wc.opcode() == WcOpcode::RecvRdmaWithImm);
  CHECK(wc.byte_len() == 4096);
  CHECK(wc.has_imm());
  CHECK(wc.imm_data() == 0x01020304);
  CHECK(wc.src_qp() == 0x77);
  CHECK(wc.describe().find("remote access error") != std::string::npos);
}

TEST_CASE("api: endpoints and remote buffers travel as text and refuse junk", "[api]") {
  const Endpoint endpoint{0x123, 0xABCDEF, Gid::from_ipv4(0x0A000102)};
  CHECK(endpoint.gid.to_string() == "::ffff:10.0.1.2");
  const auto back = Endpoint::decode(endpoint.encode());
  REQUIRE(back);
  CHECK(back->qpn == 0x123);
  CHECK(back->psn == 0xABCDEF);
  CHECK(back->gid == endpoint.gid);
  CHECK_FALSE(Endpoint::decode("1 2"));
  CHECK_FALSE(Endpoint::decode("16777216 0 ::1"));  // a QPN has 24 bits
  CHECK_FALSE(Endpoint::decode("1 2 not-a-gid"));
  CHECK(Gid::parse("10.0.1.2") == endpoint.gid);

  const RemoteBuffer buffer{0x7fff0000, 0x1234, 4096};
  const auto buffer_back = RemoteBuffer::decode(buffer.encode());
  REQUIRE(buffer_back);
  CHECK(buffer_back->addr == 0x7fff0000);
  CHECK(buffer_back->rkey == 0x1234);
  CHECK(buffer_back->length == 4096);
  CHECK_FALSE(RemoteBuffer::decode("1 99999999999 3"));
}

TEST_CASE("api: request helpers fill the fields verbs needs", "[api]") {
  const Sge sge{0x1000, 8, 1};
  const RemoteBuffer peer{0x9000, 0x44, 64};
  const auto write = SendWorkRequest::write(1, std::span(&sge, 1), peer, 16);
  CHECK(write.opcode == Opcode::RdmaWrite);
  CHECK(write.remote_addr == 0x9010);
  CHECK(write.rkey == 0x44);
  CHECK(write.flags == send_flags::kSignaled);
  const auto cas = SendWorkRequest::compare_and_swap(2, sge, peer, 5, 6, 8);
  CHECK(cas.opcode == Opcode::AtomicCmpSwp);
  CHECK(cas.compare_add == 5);
  CHECK(cas.swap == 6);
  CHECK(cas.remote_addr == 0x9008);
  const auto add = SendWorkRequest::fetch_and_add(3, sge, peer, 7);
  CHECK(add.opcode == Opcode::AtomicFetchAdd);
  CHECK(add.compare_add == 7);
  CHECK(mtu_bytes(Mtu::Mtu4096) == 4096);
  CHECK(mtu_bytes(Mtu::Mtu256) == 256);
}

TEST_CASE("api: handles over a fake vnic: errors say what failed, events find a moved CompletionQueue", "[api]") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("rrdma-api-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  ::setenv("RRDMA_RUN_DIR", dir.c_str(), 1);
  {
    FakeDaemon daemon((dir / "fake0.sock").string());
    verbs::Context context = verbs::Context::open("fake0");
    CHECK(context.device_name() == "fake0");
    CHECK(context.query_gid().to_string() == "::ffff:10.1.2.3");
    ProtectionDomain pd = context.alloc_pd();
    CompletionChannel channel = context.create_completion_channel();
    CompletionQueue created = context.create_cq(8, &channel);
    CompletionQueue cq = std::move(created);  // the channel must now find `cq`
    QueuePair qp = pd.create_qp(QpType::Rc, cq);
    CHECK(qp.state() == QpState::Reset);

    try {
      qp.post_send(SendWorkRequest::send(3, {}));
      FAIL("post_send in RESET did not throw");
    } catch (const verbs::Error& error) {
      CHECK(error.error_number() == EINVAL);
      CHECK(std::string(error.what()).find("wr_id 3") != std::string::npos);
      CHECK(std::string(error.what()).find("RESET") != std::string::npos);
    }
    daemon.force_status(MessageType::ModifyQp, EINVAL);
    CHECK_THROWS_WITH(qp.to_init(), Catch::Contains("modify_qp RESET -> INIT"));

    std::vector<std::byte> buffer(64);
    MemoryRegion mr = pd.register_memory(std::span(buffer));
    CHECK(mr.sge(16).length == 48);
    CHECK(mr.sge(16).addr == mr.address() + 16);
    CHECK_THROWS_AS(mr.sge(60, 8), verbs::Error);
    CHECK(mr.remote().rkey == mr.rkey());

    AdoptedRing& ring = daemon.ring(static_cast<std::uint32_t>(cq.handle()));
    RingProducer producer(ring.region.bytes(), ring.geometry);
    cq.req_notify();
    REQUIRE(producer.try_push_value(make_cqe(11, qp.qp_num())) == PushResult::Pushed);
    REQUIRE(producer.publish_completions(false));
    ring_eventfd(daemon.fd_of(static_cast<std::uint32_t>(cq.handle())));
    CHECK(channel.get_event(std::chrono::milliseconds(0)) == &cq);
    const auto wc = cq.poll_one();
    REQUIRE(wc);
    CHECK(wc->wr_id() == 11);
    CHECK(wc->qp_num() == qp.qp_num());
    CHECK_FALSE(cq.wait(std::chrono::milliseconds(0)));
    CHECK(channel.get_event(std::chrono::milliseconds(0)) == nullptr);

    Cqe failed = make_cqe(12, qp.qp_num());
    failed.status = static_cast<std::uint32_t>(WcStatus::RetryExcErr);
    REQUIRE(producer.try_push_value(failed) == PushResult::Pushed);
    producer.publish();
    try {
      (void)cq.wait_ok(std::chrono::seconds(10));
      FAIL("a failed completion did not throw");
    } catch (const verbs::Error& error) {
      CHECK(error.wc_status() == WcStatus::RetryExcErr);
      CHECK(std::string(error.what()).find("transport retry counter exceeded") != std::string::npos);
    }
  }
  ::unsetenv("RRDMA_RUN_DIR");
  std::filesystem::remove_all(dir);
}

TEST_CASE("api: when the vnic's daemon dies: DEVICE_FATAL, flushed work, posts and polls throw", "[api]") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("rrdma-api-fatal-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  ::setenv("RRDMA_RUN_DIR", dir.c_str(), 1);
  {
    FakeDaemon daemon((dir / "fake0.sock").string());
    verbs::Context context = verbs::Context::open("fake0");
    ProtectionDomain pd = context.alloc_pd();
    CompletionQueue cq = context.create_cq(8);
    QueuePair qp = pd.create_qp(QpType::Rc, cq);
    std::vector<std::byte> buffer(64);
    MemoryRegion mr = pd.register_memory(std::span(buffer));
    daemon.force_status(MessageType::ModifyQp, 0);
    QpAttributes rts;
    rts.state = QpState::Rts;
    qp.modify(rts, qp_attr::kState);
    const Sge sge = mr.sge();
    qp.post_receive(ReceiveWorkRequest{5, std::span(&sge, 1)});
    qp.post_send(SendWorkRequest::send(6, std::span(&sge, 1)));

    daemon.die();
    const auto event = context.get_async_event();  // blocks until the death is seen
    REQUIRE(event);
    CHECK(event->type == EventType::DeviceFatal);
    std::vector<WorkCompletion> flushed;
    while (flushed.size() < 2) {
      const auto wc = cq.wait(std::chrono::seconds(1));
      REQUIRE(wc);
      flushed.push_back(*wc);
    }
    CHECK(flushed[0].wr_id() == 6);
    CHECK(flushed[1].wr_id() == 5);
    for (const WorkCompletion& wc : flushed) CHECK(wc.status() == WcStatus::WrFlushErr);
    CHECK_THROWS_WITH(cq.poll_one(), Catch::Contains("poll_cq"));
    try {
      qp.post_send(SendWorkRequest::send(7, std::span(&sge, 1)));
      FAIL("post_send after the daemon died did not throw");
    } catch (const verbs::Error& error) {
      CHECK(error.error_number() == EIO);
      CHECK(std::string(error.what()).find("daemon is gone") != std::string::npos);
    }
    CHECK(qp.state() == QpState::Err);
  }
  ::unsetenv("RRDMA_RUN_DIR");
  std::filesystem::remove_all(dir);
}
