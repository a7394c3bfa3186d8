// The client library's part, played by a test against a Nic in the same process: rings it
// creates and formats, fds it passes (dup'd, as SCM_RIGHTS would), WQEs it posts and CQEs it
// polls, and a fake of the daemon's loop (FdWatcher). Used by tests/verbs/nic_test.cpp and
// tests/vnic/roce_port_test.cpp.
#pragma once

#include <poll.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include <cstring>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "verbs/device/device_caps.h"
#include "verbs/device/nic.h"

namespace rrdma::verbs::test {

using control::Message;
using control::MessageType;
namespace field = control::field;

const Instant kNow{};

class FakeWatcher final : public FdWatcher {
 public:
  std::map<int, Handler> watched;
  std::vector<int> signalled;
  void watch(int fd, Handler on_ready) override { watched[fd] = std::move(on_ready); }
  void unwatch(int fd) override { watched.erase(fd); }
  void signal(int fd) override {
    signalled.push_back(fd);
    const std::uint64_t one = 1;
    REQUIRE(::write(fd, &one, sizeof(one)) == sizeof(one));
  }
  void forget(int) override {}
  // Runs the handler of every readable watched fd, as the loop would; true if any ran.
  bool run_ready() {
    std::vector<int> ready;
    for (const auto& [fd, handler] : watched) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 0) == 1) ready.push_back(fd);
    }
    for (int fd : ready)
      if (auto it = watched.find(fd); it != watched.end()) it->second(kNow);
    return !ready.empty();
  }
};

// The client side of one ring: a sealed memfd, formatted, and our end of it.
struct ClientRing {
  SharedRegion region;
  RingGeometry geometry;
  static ClientRing make(std::uint32_t capacity, std::uint32_t entry_size) {
    ClientRing ring{SharedRegion::create("nic-test", RingGeometry{capacity, entry_size}.region_size()),
                    RingGeometry{capacity, entry_size}};
    REQUIRE(format_ring(ring.region.bytes(), ring.geometry) == RingError::None);
    return ring;
  }
  std::uint64_t bytes() const { return geometry.region_size(); }
};

// What the client library hands over at open_device: the process's own memory.
inline int self_memory_for_test() {
  const int fd = ::open("/proc/self/mem", O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  return fd;
}

inline int eventfd_for_test() {
  const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  REQUIRE(fd >= 0);
  return fd;
}

// One client of a Nic: sends it requests as the client library would, with dup'd fds.
struct TestClient {
  // `pid`: another than ours makes the client another process for the quotas (its MRs
  // are then unreachable: DMA goes to that pid). `pidfd`: what SO_PEERPIDFD would give; -1
  // lets the Nic open one.
  explicit TestClient(Nic& device, std::uint64_t id = 1, pid_t pid = ::getpid(), int pidfd = -1)
      : nic(device), client(id) {
    REQUIRE(nic.client_connected({client, pid, ::getuid(), pidfd}) == 0);
  }
  ~TestClient() {
    for (int fd : owned_fds) ::close(fd);
  }
  TestClient(const TestClient&) = delete;
  TestClient& operator=(const TestClient&) = delete;

  Message call(MessageType type, std::vector<std::uint64_t> words, std::vector<int> fds = {}) {
    Message request = control::make_request(type, ++request_id);
    for (std::size_t i = 0; i < words.size(); ++i) request.words.at(i) = words[i];
    control::ReceivedFds passed;
    for (int fd : fds) passed.add(::dup(fd));
    Message reply = nic.handle(client, request, passed, kNow);
    REQUIRE(reply.wire_type == control::reply_type(type));
    REQUIRE(reply.request_id == request_id);
    return reply;
  }
  std::uint64_t ok(MessageType type, std::vector<std::uint64_t> words, std::vector<int> fds = {}) {
    const Message reply = call(type, std::move(words), std::move(fds));
    REQUIRE(reply.words[0] == 0);
    return reply.words.size() > 1 ? reply.words[1] : 0;
  }
  int keep(int fd) {
    owned_fds.push_back(fd);
    return fd;
  }

  Nic& nic;
  std::uint64_t client;
  std::uint32_t request_id = 0;
  std::vector<int> owned_fds;
};

// A client's QP with its rings, CQ and doorbell.
struct TestQp {
  ClientRing sq = ClientRing::make(16, sizeof(SendWqe));
  ClientRing rq = ClientRing::make(16, sizeof(RecvWqe));
  ClientRing cq = ClientRing::make(16, sizeof(Cqe));
  int doorbell = -1;
  int cq_notify = -1;
  std::uint64_t cq_handle = 0;
  std::uint64_t handle = 0;
  std::uint32_t qpn = 0;
  std::unique_ptr<RingProducer> sq_producer;
  std::unique_ptr<RingProducer> rq_producer;
  std::unique_ptr<RingConsumer> cq_consumer;

  void post_send(const SendWqe& wqe) {
    REQUIRE(sq_producer->try_push_value(wqe) == PushResult::Pushed);
    if (sq_producer->publish()) {
      const std::uint64_t one = 1;
      REQUIRE(::write(doorbell, &one, sizeof(one)) == sizeof(one));
    }
  }
  void post_recv(const RecvWqe& wqe) {
    REQUIRE(rq_producer->try_push_value(wqe) == PushResult::Pushed);
    rq_producer->publish();
  }
  std::vector<Cqe> poll() {
    std::vector<Cqe> out;
    Cqe cqe{};
    while (cq_consumer->try_pop_value(cqe) == PopResult::Popped) out.push_back(cqe);
    return out;
  }
};

struct Device {
  std::uint64_t context = 0;
  std::uint64_t pd = 0;
  ClientRing events = ClientRing::make(64, sizeof(AsyncEventEntry));
  int event_fd = -1;
};

inline Device open_device(TestClient& side) {
  Device d;
  d.event_fd = side.keep(eventfd_for_test());
  const int memory = side.keep(self_memory_for_test());
  d.context = side.ok(MessageType::OpenDevice, {control::kVersion, d.events.bytes()},
                      {d.events.region.fd(), d.event_fd, memory});
  d.pd = side.ok(MessageType::AllocPd, {d.context});
  return d;
}

struct Registration {
  std::uint32_t lkey = 0;
  std::uint32_t rkey = 0;
};

inline Registration reg_mr(TestClient& side, const Device& d, std::vector<std::uint8_t>& buffer, std::uint32_t access) {
  const Message reply = side.call(MessageType::RegMr,
                                  {d.pd, reinterpret_cast<std::uintptr_t>(buffer.data()), buffer.size(), access,
                                   reinterpret_cast<std::uintptr_t>(buffer.data())});
  REQUIRE(reply.words[0] == 0);
  return {static_cast<std::uint32_t>(reply.words[field::kMrLkey]), static_cast<std::uint32_t>(reply.words[field::kMrRkey])};
}

// A QP with its own CQ (both queues complete into it); `srq` 0 for none.
inline std::unique_ptr<TestQp> create_qp(TestClient& side, const Device& d, ibv_qp_type type = IBV_QPT_RC,
                                         std::uint64_t max_sge = 4, std::uint64_t max_inline = 64,
                                         std::uint32_t cq_entries = 16, std::uint64_t srq = 0) {
  auto qp = std::make_unique<TestQp>();
  qp->cq = ClientRing::make(cq_entries, sizeof(Cqe));
  qp->cq_notify = side.keep(eventfd_for_test());
  qp->cq_handle =
      side.ok(MessageType::CreateCq, {d.context, cq_entries, qp->cq.bytes()}, {qp->cq.region.fd(), qp->cq_notify});
  qp->doorbell = side.keep(eventfd_for_test());
  const Message reply = side.call(MessageType::CreateQp,
                                  {d.pd, static_cast<std::uint64_t>(type), qp->cq_handle, qp->cq_handle, srq, 16, 16, max_sge,
                                   max_sge, max_inline, qp->sq.bytes(), qp->rq.bytes()},
                                  {qp->sq.region.fd(), qp->rq.region.fd(), qp->doorbell});
  REQUIRE(reply.words[0] == 0);
  qp->handle = reply.words[field::kQpHandle];
  qp->qpn = static_cast<std::uint32_t>(reply.words[field::kQpNum]);
  qp->sq_producer = std::make_unique<RingProducer>(qp->sq.region.bytes(), qp->sq.geometry);
  qp->rq_producer = std::make_unique<RingProducer>(qp->rq.region.bytes(), qp->rq.geometry);
  qp->cq_consumer = std::make_unique<RingConsumer>(qp->cq.region.bytes(), qp->cq.geometry);
  return qp;
}

inline std::vector<std::uint64_t> modify_words(std::uint64_t qp, int mask) {
  std::vector<std::uint64_t> w(field::kModifyQpWords, 0);
  w[field::kModQp] = qp;
  w[field::kModAttrMask] = static_cast<std::uint64_t>(mask);
  return w;
}

inline std::uint64_t modify(TestClient& side, std::vector<std::uint64_t> words) {
  return side.call(MessageType::ModifyQp, std::move(words)).words[0];
}

inline std::uint64_t qp_state(TestClient& side, const TestQp& qp) {
  const Message reply = side.call(MessageType::QueryQp, {qp.handle, IBV_QP_STATE});
  REQUIRE(reply.words[0] == 0);
  return reply.words[field::kModState];
}

// The words of a GID for `ip` (an IPv4-mapped GID) as the control messages carry them.
inline std::pair<std::uint64_t, std::uint64_t> gid_words(std::uint32_t ip) {
  const ibv_gid gid = caps::gid_from_ipv4(stack::Ipv4Address{ip});
  std::uint64_t high = 0, low = 0;
  for (int i = 0; i < 8; ++i) {
    high = (high << 8) | gid.raw[i];
    low = (low << 8) | gid.raw[8 + i];
  }
  return {high, low};
}

// RESET -> INIT -> RTR -> RTS towards the peer at `peer_ip`, QP number `peer_qpn`, on a path
// of GRH traffic class `traffic_class`.
inline void connect(TestClient& side, const TestQp& qp, std::uint32_t peer_ip, std::uint32_t peer_qpn,
                    std::uint8_t traffic_class = 0) {
  auto init = modify_words(qp.handle, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  init[field::kModState] = IBV_QPS_INIT;
  init[field::kModPortNum] = 1;
  init[field::kModAccessFlags] = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  REQUIRE(modify(side, init) == 0);
  auto rtr = modify_words(qp.handle, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  rtr[field::kModState] = IBV_QPS_RTR;
  rtr[field::kModPathMtu] = IBV_MTU_1024;
  rtr[field::kModDestQpNum] = peer_qpn;
  rtr[field::kModRqPsn] = 100;
  rtr[field::kModMaxDestRdAtomic] = 4;
  rtr[field::kModMinRnrTimer] = 12;
  std::tie(rtr[field::kModDgidHigh], rtr[field::kModDgidLow]) = gid_words(peer_ip);
  rtr[field::kModHopLimit] = 64;
  rtr[field::kModTrafficClass] = traffic_class;
  REQUIRE(modify(side, rtr) == 0);
  auto rts = modify_words(qp.handle, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                         IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  rts[field::kModState] = IBV_QPS_RTS;
  rts[field::kModTimeout] = 14;
  rts[field::kModRetryCnt] = 7;
  rts[field::kModRnrRetry] = 7;
  rts[field::kModSqPsn] = 100;
  rts[field::kModMaxRdAtomic] = 4;
  REQUIRE(modify(side, rts) == 0);
  REQUIRE(qp_state(side, qp) == IBV_QPS_RTS);
}

inline SendWqe wqe_for(std::uint64_t wr_id, rocev2::WrOpcode opcode, const std::vector<std::uint8_t>& local,
                std::uint32_t length, std::uint32_t lkey) {
  SendWqe wqe{};
  wqe.wr_id = wr_id;
  wqe.opcode = static_cast<std::uint8_t>(opcode);
  wqe.send_flags = IBV_SEND_SIGNALED;
  wqe.num_sge = 1;
  wqe.sge[0] = {reinterpret_cast<std::uintptr_t>(local.data()), length, lkey};
  return wqe;
}

// The two addresses of the back-to-back tests.
inline constexpr std::uint32_t kTestIpA = 0x0A420001;
inline constexpr std::uint32_t kTestIpB = 0x0A420002;

// Two nodes (anything built from (IPv4 address, last MAC byte) with a TestClient `user`),
// a device and an RC QP on each, connected to each other: where most data-path tests start.
template <typename Node>
struct ConnectedPair {
  Node a{kTestIpA, 1};
  Node b{kTestIpB, 2};
  Device da = open_device(a.user);
  Device db = open_device(b.user);
  std::unique_ptr<TestQp> qa = create_qp(a.user, da);
  std::unique_ptr<TestQp> qb = create_qp(b.user, db);
  ConnectedPair() {
    connect(a.user, *qa, kTestIpB, qb->qpn);
    connect(b.user, *qb, kTestIpA, qa->qpn);
  }
};

}  // namespace rrdma::verbs::test
