// Our libibverbs.so.1 as a program sees it, without a vnic: this test links the library and
// calls the verbs.h API (its inline functions included) against a fake daemon listening on
// $RRDMA_RUN_DIR/fake0.sock, which answers control frames and adopts the rings, so the test
// can play the NIC: read the WQEs ibv_post_send / ibv_wr_* wrote, produce the CQEs
// ibv_poll_cq / ibv_start_poll read. Also the helpers that touch no device.
#include <catch2/catch.hpp>

#include <infiniband/verbs.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/alarm_ticks.h"
#include "verbs/app/client.h"

using namespace rrdma;
using namespace rrdma::verbs;
namespace field = rrdma::verbs::control::field;
using control::MessageType;

namespace {

// A fresh $RRDMA_RUN_DIR with a daemon stand-in listening as vnic "fake0".
class FakeVnic {
 public:
  FakeVnic() {
    std::string pattern = (std::filesystem::temp_directory_path() / "rrdma-ibverbs-test-XXXXXX").string();
    dir_ = ::mkdtemp(pattern.data());
    ::setenv("RRDMA_RUN_DIR", dir_.c_str(), 1);
    ::unsetenv("RRDMA_DEVICES");
    listener_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    REQUIRE(listener_ >= 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    const std::string path = (dir_ / "fake0.sock").string();
    std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(listener_, 8) == 0);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~FakeVnic() {
    ::shutdown(listener_, SHUT_RDWR);
    acceptor_.join();
    {
      std::lock_guard lock(mutex_);
      for (int fd : connections_) ::shutdown(fd, SHUT_RDWR);
    }
    for (auto& thread : servers_) thread.join();
    ::close(listener_);
    for (int fd : connections_) ::close(fd);
    for (int fd : owned_fds_) ::close(fd);
    ::unsetenv("RRDMA_RUN_DIR");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // The ring the fake adopted for an object (which: 0 = SQ or CQ, 1 = RQ).
  RingGeometry geometry(std::uint32_t handle, int which = 0) {
    std::lock_guard lock(mutex_);
    return geometries_.at({handle, which});
  }
  MutableByteSpan region(std::uint32_t handle, int which = 0) {
    std::lock_guard lock(mutex_);
    return regions_.at({handle, which}).bytes();
  }

  static constexpr std::uint64_t kNodeGuid = 0x0252'44ff'fe01'0203;  // from MAC 00:52:44:01:02:03

  // The last request of a type the fake received.
  control::Message last(MessageType type) {
    std::lock_guard lock(mutex_);
    return last_.at(type);
  }
  // Queues an asynchronous event in the last opened context's event ring, as the daemon does.
  void push_event(ibv_event_type type, std::uint64_t element) {
    std::uint32_t context = 0;
    {
      std::lock_guard lock(mutex_);
      context = context_handle_;
    }
    RingProducer producer(region(context), geometry(context));
    REQUIRE(producer.try_push_value(AsyncEventEntry{static_cast<std::uint32_t>(type), 0, element}) ==
            PushResult::Pushed);
    producer.publish();
  }
  // The daemon dies: every connection hangs up.
  void hang_up() {
    std::lock_guard lock(mutex_);
    for (int fd : connections_) ::shutdown(fd, SHUT_RDWR);
  }
  // The next request of this type is answered with this status.
  void refuse_next(MessageType type, int error) {
    std::lock_guard lock(mutex_);
    refusals_[type] = error;
  }

 private:
  void accept_loop() {
    for (;;) {
      const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      std::lock_guard lock(mutex_);
      connections_.push_back(fd);
      servers_.emplace_back([this, fd] { serve(fd); });
    }
  }

  void serve(int fd) {
    for (;;) {
      control::Received received = control::receive_message(fd);
      if (received.error != control::IoError::None) return;
      std::lock_guard lock(mutex_);
      control::send_message(fd, answer(received.message, received.fds), {});
    }
  }

  void adopt(std::uint32_t handle, int which, int fd, RingGeometry geometry) {
    SharedRegion::AdoptError error = SharedRegion::AdoptError::None;
    regions_[{handle, which}] = SharedRegion::adopt(fd, geometry.region_size(), error);
    geometries_[{handle, which}] = geometry;
  }

  control::Message answer(const control::Message& request, control::ReceivedFds& fds) {
    const MessageType type = request.type();
    last_[type] = request;
    control::Message reply = control::make_reply(type, request.request_id, 0);
    if (auto refusal = refusals_.find(type); refusal != refusals_.end()) {
      reply.words[0] = static_cast<std::uint64_t>(refusal->second);
      refusals_.erase(refusal);
      return reply;
    }
    const std::uint32_t handle = ++next_handle_;
    const auto& w = request.words;
    const auto capacity = [](std::uint64_t entries) {
      return *client::ring_capacity_for(static_cast<std::uint32_t>(entries));
    };
    switch (type) {
      case MessageType::OpenDevice:
        context_handle_ = handle;
        adopt(handle, 0, fds.release(0), client::event_ring_geometry());
        owned_fds_.push_back(fds.release(1));
        reply.words[field::kContextHandle] = handle;
        reply.words[field::kNodeGuid] = kNodeGuid;
        break;
      case MessageType::QueryDevice:
        reply.words[field::kMaxQp] = 64;
        reply.words[field::kMaxQpWr] = 1024;
        reply.words[field::kMaxSge] = 16;
        reply.words[field::kMaxCqe] = 4096;
        reply.words[field::kAtomicCap] = IBV_ATOMIC_HCA;
        reply.words[field::kMaxMw] = 77;
        break;
      case MessageType::QueryPort:
        reply.words[field::kState] = IBV_PORT_ACTIVE;
        reply.words[field::kMaxMtu] = IBV_MTU_4096;
        reply.words[field::kActiveMtu] = IBV_MTU_1024;
        reply.words[field::kGidTblLen] = 1;
        reply.words[field::kPkeyTblLen] = 1;
        reply.words[field::kLinkLayer] = IBV_LINK_LAYER_ETHERNET;
        break;
      case MessageType::QueryGid:
        if (w[field::kGidIndex] != 0) {
          reply.words[0] = EINVAL;
          break;
        }
        reply.words[field::kGidHigh] = 0;
        reply.words[field::kGidLow] = 0x0000'ffff'0a01'0203;  // ::ffff:10.1.2.3
        break;
      case MessageType::CreateCq:
        adopt(handle, 0, fds.release(0), client::cq_ring_geometry(capacity(w[field::kCqEntries])));
        owned_fds_.push_back(fds.release(1));
        reply.words[field::kHandle] = handle;
        break;
      case MessageType::CreateQp:
        adopt(handle, 0, fds.release(0), client::send_ring_geometry(capacity(w[field::kQpMaxSendWr])));
        adopt(handle, 1, fds.release(1), client::recv_ring_geometry(capacity(w[field::kQpMaxRecvWr])));
        owned_fds_.push_back(fds.release(2));
        reply.words[field::kQpHandle] = handle;
        reply.words[field::kQpNum] = 0x100 + handle;
        break;
      case MessageType::RegMr:
        reply.words[field::kMrHandle] = handle;
        reply.words[field::kMrLkey] = 0x1000 + handle;
        reply.words[field::kMrRkey] = 0x2000 + handle;
        break;
      case MessageType::ReregMr:  // new keys, to see that the library takes the daemon's
        reply.words[field::kReregLkey] = 0x3000 + w[field::kReregMr];
        reply.words[field::kReregRkey] = 0x4000 + w[field::kReregMr];
        break;
      case MessageType::ModifyQp:
        break;
      case MessageType::AllocMw:
        reply.words[field::kMwHandle] = handle << 8;
        reply.words[field::kMwRkey] = (handle << 8) | 0x40;
        break;
      default:
        if (reply.words.size() > field::kHandle) reply.words[field::kHandle] = handle;
        break;
    }
    return reply;
  }

  std::filesystem::path dir_;
  int listener_ = -1;
  std::thread acceptor_;
  std::mutex mutex_;
  std::vector<int> connections_;
  std::vector<std::thread> servers_;
  std::vector<int> owned_fds_;
  std::map<std::pair<std::uint32_t, int>, SharedRegion> regions_;
  std::map<std::pair<std::uint32_t, int>, RingGeometry> geometries_;
  std::uint32_t next_handle_ = 0;
  std::uint32_t context_handle_ = 0;
  std::map<MessageType, control::Message> last_;
  std::map<MessageType, int> refusals_;
};

// The device list, the first device opened.
struct Opened {
  ibv_device** list = nullptr;
  ibv_context* context = nullptr;
  Opened() {
    int count = 0;
    list = ibv_get_device_list(&count);
    REQUIRE(list != nullptr);
    REQUIRE(count == 1);
    context = ibv_open_device(list[0]);
    REQUIRE(context != nullptr);
  }
  ~Opened() {
    ibv_close_device(context);
    ibv_free_device_list(list);
  }
};

// The fake's producer end of a CQ ring, to play the NIC.
void produce_cqe(FakeVnic& vnic, std::uint32_t cq_handle, const Cqe& cqe) {
  RingProducer producer(vnic.region(cq_handle), vnic.geometry(cq_handle));
  REQUIRE(producer.try_push_value(cqe) == PushResult::Pushed);
  producer.publish_completions(false);
}

SendWqe consume_send_wqe(FakeVnic& vnic, std::uint32_t qp_handle, RingConsumer& consumer) {
  (void)vnic;
  (void)qp_handle;
  SendWqe wqe{};
  REQUIRE(consumer.try_pop_value(wqe) == PopResult::Popped);
  return wqe;
}

}  // namespace

TEST_CASE("ibverbs: the *_str helpers give rdma-core's texts", "[ibverbs]") {
  CHECK(std::string(ibv_wc_status_str(IBV_WC_SUCCESS)) == "success");
  CHECK(std::string(ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR)) == "transport retry counter exceeded");
  CHECK(std::string(ibv_wc_status_str(static_cast<ibv_wc_status>(30))) == "unknown");
  CHECK(std::string(ibv_node_type_str(IBV_NODE_CA)) == "InfiniBand channel adapter");
  CHECK(std::string(ibv_node_type_str(IBV_NODE_UNKNOWN)) == "unknown");
  CHECK(std::string(ibv_port_state_str(IBV_PORT_ACTIVE)) == "PORT_ACTIVE");
  CHECK(std::string(ibv_port_state_str(static_cast<ibv_port_state>(7))) == "invalid state");
  CHECK(std::string(ibv_event_type_str(IBV_EVENT_SRQ_LIMIT_REACHED)) == "SRQ limit reached");
  CHECK(std::string(ibv_event_type_str(static_cast<ibv_event_type>(31))) == "unknown");
}

TEST_CASE("ibverbs: rate conversions follow verbs.h's table", "[ibverbs]") {
  CHECK(ibv_rate_to_mult(IBV_RATE_10_GBPS) == 4);
  CHECK(ibv_rate_to_mult(IBV_RATE_25_GBPS) == -1);  // not a multiple of 2.5 Gb/s
  CHECK(mult_to_ibv_rate(16) == IBV_RATE_40_GBPS);
  CHECK(mult_to_ibv_rate(3) == IBV_RATE_MAX);
  CHECK(ibv_rate_to_mbps(IBV_RATE_100_GBPS) == 103125);
  CHECK(mbps_to_ibv_rate(2500) == IBV_RATE_2_5_GBPS);
}

TEST_CASE("ibverbs: fork needs no preparation", "[ibverbs]") {
  CHECK(ibv_fork_init() == 0);
  CHECK(ibv_is_fork_initialized() == IBV_FORK_UNNEEDED);
}

TEST_CASE("ibverbs: no running vnic is an empty device list", "[ibverbs]") {
  std::string pattern = (std::filesystem::temp_directory_path() / "rrdma-ibverbs-empty-XXXXXX").string();
  const std::string dir = ::mkdtemp(pattern.data());
  ::setenv("RRDMA_RUN_DIR", dir.c_str(), 1);
  int count = -1;
  ibv_device** list = ibv_get_device_list(&count);
  REQUIRE(list != nullptr);
  CHECK(count == 0);
  CHECK(list[0] == nullptr);
  ibv_free_device_list(list);
  ::unsetenv("RRDMA_RUN_DIR");
  std::filesystem::remove_all(dir);
}

TEST_CASE("ibverbs: a vnic is a RoCE CA device and RRDMA_DEVICES filters", "[ibverbs]") {
  FakeVnic vnic;
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  REQUIRE(count == 1);
  CHECK(std::string(ibv_get_device_name(list[0])) == "fake0");
  CHECK(list[0]->node_type == IBV_NODE_CA);
  CHECK(list[0]->transport_type == IBV_TRANSPORT_IB);
  CHECK(ibv_get_device_index(list[0]) >= 0);
  // The GUID in network byte order, as ibv_devices prints it with be64toh().
  CHECK(be64toh(ibv_get_device_guid(list[0])) == FakeVnic::kNodeGuid);
  // rdma-core's paths (the sysfs view of `rrdma-vnic exec` holds them; this test has none,
  // so the uverbs number is the device's own index).
  CHECK(std::string(list[0]->ibdev_path) == "/sys/class/infiniband/fake0");
  CHECK(std::string(list[0]->dev_path).starts_with("/sys/class/infiniband_verbs/uverbs"));
  CHECK(std::string(list[0]->dev_path).ends_with(list[0]->dev_name));
  ibv_free_device_list(list);

  ::setenv("RRDMA_DEVICES", "other,another", 1);
  list = ibv_get_device_list(&count);
  CHECK(count == 0);
  ibv_free_device_list(list);
  ::setenv("RRDMA_DEVICES", "other,fake0", 1);
  list = ibv_get_device_list(&count);
  CHECK(count == 1);
  ibv_free_device_list(list);
  ::unsetenv("RRDMA_DEVICES");
}

TEST_CASE("ibverbs: the context is extended and its queries go through verbs_context", "[ibverbs]") {
  FakeVnic vnic;
  Opened opened;
  ibv_context* context = opened.context;
  verbs_context* vctx = verbs_get_ctx(context);
  REQUIRE(vctx != nullptr);
  CHECK(vctx->sz == sizeof(verbs_context));
  CHECK(verbs_get_ctx_op(context, query_port) != nullptr);
  CHECK(verbs_get_ctx_op(context, create_qp_ex) != nullptr);
  CHECK(verbs_get_ctx_op(context, open_xrcd) == nullptr);
  CHECK(context->ops.post_send != nullptr);
  CHECK(context->ops.poll_cq != nullptr);
  CHECK(context->async_fd >= 0);

  ibv_port_attr port;  // verbs.h's inline ___ibv_query_port -> vctx->query_port
  REQUIRE(ibv_query_port(context, 1, &port) == 0);
  CHECK(port.state == IBV_PORT_ACTIVE);
  CHECK(port.active_mtu == IBV_MTU_1024);
  CHECK(port.link_layer == IBV_LINK_LAYER_ETHERNET);
  CHECK(port.gid_tbl_len == 1);

  ibv_device_attr_ex attr_ex;
  REQUIRE(ibv_query_device_ex(context, nullptr, &attr_ex) == 0);
  CHECK(attr_ex.orig_attr.max_qp_wr == 1024);
  CHECK(attr_ex.orig_attr.atomic_cap == IBV_ATOMIC_HCA);
  CHECK(be64toh(attr_ex.orig_attr.node_guid) == FakeVnic::kNodeGuid);
  CHECK(attr_ex.orig_attr.phys_port_cnt == 1);

  ibv_gid gid;
  REQUIRE(ibv_query_gid(context, 1, 0, &gid) == 0);
  const std::uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3};
  CHECK(std::memcmp(gid.raw, mapped, 16) == 0);
  CHECK(ibv_query_gid(context, 1, 1, &gid) == -1);

  ibv_gid_entry entry;
  REQUIRE(ibv_query_gid_ex(context, 1, 0, &entry, 0) == 0);
  CHECK(entry.gid_type == IBV_GID_TYPE_ROCE_V2);
  ibv_gid_entry table[4];
  CHECK(ibv_query_gid_table(context, table, 4, 0) == 1);

  __be16 pkey = 0;
  CHECK(ibv_query_pkey(context, 1, 0, &pkey) == 0);
  CHECK(be16toh(pkey) == 0xFFFF);
  CHECK(ibv_get_pkey_index(context, 1, htobe16(0xFFFF)) == 0);
  CHECK(ibv_get_pkey_index(context, 1, htobe16(0x8001)) == -1);
}

TEST_CASE("ibverbs: ibv_post_send lands in the SQ ring and bad_wr names the refused WR", "[ibverbs]") {
  FakeVnic vnic;
  Opened opened;
  ibv_pd* pd = ibv_alloc_pd(opened.context);
  REQUIRE(pd != nullptr);
  std::vector<std::uint8_t> buffer(4096);
  ibv_mr* mr = ibv_reg_mr(pd, buffer.data(), buffer.size(), IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(mr != nullptr);
  CHECK(mr->lkey == 0x1000 + mr->handle);
  ibv_cq* cq = ibv_create_cq(opened.context, 16, nullptr, nullptr, 0);
  REQUIRE(cq != nullptr);
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {8, 8, 2, 2, 0};
  ibv_qp* qp = ibv_create_qp(pd, &init);
  REQUIRE(qp != nullptr);
  CHECK(qp->qp_num == 0x100 + qp->handle);
  CHECK(init.cap.max_send_wr >= 8);

  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  REQUIRE(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS) == 0);
  attr.qp_state = IBV_QPS_RTR;
  attr.ah_attr.is_global = 0;  // RoCE needs a GRH
  CHECK(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV) == EINVAL);
  attr.qp_state = IBV_QPS_RTS;
  REQUIRE(ibv_modify_qp(qp, &attr, IBV_QP_STATE) == 0);  // the fake accepts anything
  CHECK(qp->state == IBV_QPS_RTS);

  ibv_sge sge{reinterpret_cast<std::uintptr_t>(buffer.data()), 100, mr->lkey};
  ibv_send_wr second{};
  second.wr_id = 8;
  second.opcode = IBV_WR_RDMA_WRITE;
  second.sg_list = &sge;
  second.num_sge = 3;  // more than max_send_sge
  ibv_send_wr first{};
  first.wr_id = 7;
  first.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  first.send_flags = IBV_SEND_SIGNALED;
  first.imm_data = htobe32(0xabcd);
  first.sg_list = &sge;
  first.num_sge = 1;
  first.wr.rdma.remote_addr = 0x1234'5678;
  first.wr.rdma.rkey = 0x99;
  first.next = &second;
  ibv_send_wr* bad = nullptr;
  CHECK(ibv_post_send(qp, &first, &bad) == EINVAL);  // verbs.h's inline -> ops.post_send
  CHECK(bad == &second);

  RingConsumer sq(vnic.region(qp->handle), vnic.geometry(qp->handle));
  const SendWqe wqe = consume_send_wqe(vnic, qp->handle, sq);
  CHECK(wqe.wr_id == 7);
  CHECK(wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM);
  CHECK(wqe.imm_data == htobe32(0xabcd));
  CHECK(wqe.remote_addr == 0x1234'5678);
  CHECK(wqe.rkey == 0x99);
  CHECK(wqe.num_sge == 1);
  CHECK(wqe.sge[0].lkey == mr->lkey);
  SendWqe none{};
  CHECK(sq.try_pop_value(none) == PopResult::Empty);

  SECTION("the ibv_wr_* API builds the same WQEs") {
    ibv_qp_ex* qpx = ibv_qp_to_qp_ex(qp);
    REQUIRE(qpx != nullptr);
    ibv_wr_start(qpx);
    qpx->wr_id = 21;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_atomic_fetch_add(qpx, 0x77, 0x8000, 5);
    ibv_wr_set_sge(qpx, mr->lkey, reinterpret_cast<std::uintptr_t>(buffer.data()), 8);
    qpx->wr_id = 22;
    ibv_wr_send(qpx);
    const char text[] = "inline!";
    ibv_wr_set_inline_data(qpx, const_cast<char*>(text), sizeof text);
    REQUIRE(ibv_wr_complete(qpx) == 0);
    const SendWqe atomic = consume_send_wqe(vnic, qp->handle, sq);
    CHECK(atomic.wr_id == 21);
    CHECK(atomic.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD);
    CHECK(atomic.compare_add == 5);
    CHECK(atomic.rkey == 0x77);
    CHECK(atomic.sge[0].length == 8);
    const SendWqe send = consume_send_wqe(vnic, qp->handle, sq);
    CHECK(send.wr_id == 22);
    CHECK((send.send_flags & IBV_SEND_INLINE) != 0);
    CHECK(send.inline_length == sizeof text);
    CHECK(std::memcmp(send.inline_data, text, sizeof text) == 0);

    ibv_wr_start(qpx);
    ibv_wr_send_tso(qpx, nullptr, 0, 0);  // not supported: the whole batch is refused
    CHECK(ibv_wr_complete(qpx) == EOPNOTSUPP);
    CHECK(sq.try_pop_value(none) == PopResult::Empty);
  }

  SECTION("ibv_poll_cq and the extended poll read the CQ ring") {
    Cqe cqe{};
    cqe.wr_id = 42;
    cqe.status = IBV_WC_SUCCESS;
    cqe.opcode = IBV_WC_RECV;
    cqe.byte_len = 100;
    cqe.qp_num = qp->qp_num;
    produce_cqe(vnic, cq->handle, cqe);
    cqe.wr_id = 43;
    cqe.status = IBV_WC_REM_ACCESS_ERR;
    produce_cqe(vnic, cq->handle, cqe);
    ibv_wc wc[4];
    REQUIRE(ibv_poll_cq(cq, 1, wc) == 1);  // verbs.h's inline -> ops.poll_cq
    CHECK(wc[0].wr_id == 42);
    CHECK(wc[0].byte_len == 100);
    CHECK(wc[0].qp_num == qp->qp_num);
    ibv_cq_ex* cqx = reinterpret_cast<ibv_cq_ex*>(cq);  // every CQ is an ibv_cq_ex
    REQUIRE(ibv_start_poll(cqx, nullptr) == 0);
    CHECK(cqx->wr_id == 43);
    CHECK(cqx->status == IBV_WC_REM_ACCESS_ERR);
    CHECK(ibv_wc_read_opcode(cqx) == IBV_WC_RECV);
    CHECK(ibv_next_poll(cqx) == ENOENT);
    ibv_end_poll(cqx);
    CHECK(ibv_poll_cq(cq, 4, wc) == 0);
  }

  CHECK(ibv_destroy_qp(qp) == 0);
  CHECK(ibv_destroy_cq(cq) == 0);
  CHECK(ibv_dereg_mr(mr) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);
}

// The kernel drops the queued events of an object as it is destroyed; so do we: an event the
// daemon queued just before the destroy never reaches the program with a NULL element (UCX
// 1.13 dereferences element.qp of a QP event).
TEST_CASE("ibverbs: an async event of a destroyed QP or CQ is dropped", "[ibverbs]") {
  FakeVnic vnic;
  Opened opened;
  ibv_pd* pd = ibv_alloc_pd(opened.context);
  REQUIRE(pd != nullptr);
  ibv_cq* cq = ibv_create_cq(opened.context, 16, nullptr, nullptr, 0);
  ibv_cq* gone_cq = ibv_create_cq(opened.context, 16, nullptr, nullptr, 0);
  REQUIRE(cq != nullptr);
  REQUIRE(gone_cq != nullptr);
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {8, 8, 1, 1, 0};
  ibv_qp* live = ibv_create_qp(pd, &init);
  ibv_qp* gone = ibv_create_qp(pd, &init);
  REQUIRE(live != nullptr);
  REQUIRE(gone != nullptr);
  const std::uint32_t gone_handle = gone->handle;
  const std::uint32_t gone_cq_handle = gone_cq->handle;

  vnic.push_event(IBV_EVENT_QP_LAST_WQE_REACHED, gone_handle);
  vnic.push_event(IBV_EVENT_CQ_ERR, gone_cq_handle);
  vnic.push_event(IBV_EVENT_COMM_EST, live->handle);
  REQUIRE(ibv_destroy_qp(gone) == 0);
  REQUIRE(ibv_destroy_cq(gone_cq) == 0);

  ibv_async_event event{};
  REQUIRE(ibv_get_async_event(opened.context, &event) == 0);
  CHECK(event.event_type == IBV_EVENT_COMM_EST);
  CHECK(event.element.qp == live);
  ibv_ack_async_event(&event);

  // Non-blocking, with only a stale event queued: nothing to read.
  vnic.push_event(IBV_EVENT_QP_FATAL, gone_handle);
  const int flags = ::fcntl(opened.context->async_fd, F_GETFL);
  REQUIRE(::fcntl(opened.context->async_fd, F_SETFL, flags | O_NONBLOCK) == 0);
  errno = 0;
  CHECK(ibv_get_async_event(opened.context, &event) == -1);
  CHECK(errno == EAGAIN);

  CHECK(ibv_destroy_qp(live) == 0);
  CHECK(ibv_destroy_cq(cq) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);
}

namespace {

void ignore_alarm(int) {}

// SIGALRM without SA_RESTART, sent to the calling thread every 2 ms while in scope.
class AlarmTicks : public rrdma::test::AlarmTicks {
 public:
  AlarmTicks() : rrdma::test::AlarmTicks(0, ignore_alarm) { REQUIRE(armed()); }
};

}  // namespace

// As a kernel provider's read(2) of the channel or async fd (docs/VERBS_CLIENT.md, "Signals"):
// qperf's SIGALRM, installed without SA_RESTART, must end the wait.
TEST_CASE("ibverbs: a signal handled without SA_RESTART ends ibv_get_cq_event and ibv_get_async_event with EINTR", "[ibverbs]") {
  FakeVnic vnic;
  Opened opened;
  ibv_comp_channel* channel = ibv_create_comp_channel(opened.context);
  REQUIRE(channel != nullptr);
  ibv_cq* cq = ibv_create_cq(opened.context, 4, nullptr, channel, 0);
  REQUIRE(cq != nullptr);
  REQUIRE(ibv_req_notify_cq(cq, 0) == 0);
  // Should a wait go on through the signals, the daemon's death ends it (and the checks
  // fail) instead of the test hanging.
  std::atomic<bool> done{false};
  std::thread rescue([&] {
    for (int i = 0; i < 2000 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!done) vnic.hang_up();
  });
  {
    AlarmTicks ticks;
    ibv_cq* fired = nullptr;
    void* cq_context = nullptr;
    errno = 0;
    CHECK(ibv_get_cq_event(channel, &fired, &cq_context) == -1);
    CHECK(errno == EINTR);
    ibv_async_event event{};
    errno = 0;
    CHECK(ibv_get_async_event(opened.context, &event) == -1);
    CHECK(errno == EINTR);
  }
  done = true;
  rescue.join();
  CHECK(ibv_destroy_cq(cq) == 0);
  CHECK(ibv_destroy_comp_channel(channel) == 0);
}

TEST_CASE("ibverbs: what a vnic cannot do fails with EOPNOTSUPP", "[ibverbs]") {
  FakeVnic vnic;
  Opened opened;
  ibv_pd* pd = ibv_alloc_pd(opened.context);
  REQUIRE(pd != nullptr);
  std::vector<std::uint8_t> buffer(64);

  errno = 0;  // rxe refuses HUGETLB too (RXE_ACCESS_SUPPORTED_MR)
  CHECK(ibv_reg_mr(pd, buffer.data(), buffer.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_HUGETLB) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  ibv_mr* relaxed = ibv_reg_mr(pd, buffer.data(), buffer.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
  CHECK(relaxed != nullptr);  // an optional hint, ignored
  if (relaxed != nullptr) CHECK(ibv_dereg_mr(relaxed) == 0);
  errno = 0;
  CHECK(ibv_reg_dmabuf_mr(pd, 0, 64, 0, 3, IBV_ACCESS_LOCAL_WRITE) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  errno = 0;
  CHECK(ibv_import_device(opened.context->cmd_fd) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  errno = 0;
  CHECK(ibv_import_pd(opened.context, 1) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  errno = 0;
  CHECK(ibv_import_mr(pd, 1) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  CHECK(ibv_rereg_mr(nullptr, 0, nullptr, nullptr, 0, 0) == IBV_REREG_MR_ERR_INPUT);

  ibv_cq_init_attr_ex cq_attr{};
  cq_attr.cqe = 4;
  cq_attr.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  errno = 0;
  CHECK(ibv_create_cq_ex(opened.context, &cq_attr) == nullptr);
  CHECK(errno == EOPNOTSUPP);

  ibv_cq* cq = ibv_create_cq(opened.context, 4, nullptr, nullptr, 0);
  REQUIRE(cq != nullptr);
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RAW_PACKET;
  init.cap = {1, 1, 1, 1, 0};
  errno = 0;
  CHECK(ibv_create_qp(pd, &init) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  ibv_gid gid{};
  init.qp_type = IBV_QPT_UD;
  ibv_qp* qp = ibv_create_qp(pd, &init);
  REQUIRE(qp != nullptr);
  CHECK(ibv_attach_mcast(qp, &gid, 0) == EOPNOTSUPP);
  ibv_ece ece{};
  CHECK(ibv_query_ece(qp, &ece) == EOPNOTSUPP);

  ibv_xrcd_init_attr xrcd{};  // verbs_context.open_xrcd is NULL: verbs.h refuses it
  errno = 0;
  CHECK(ibv_open_xrcd(opened.context, &xrcd) == nullptr);
  CHECK(errno == EOPNOTSUPP);

  CHECK(ibv_destroy_qp(qp) == 0);
  CHECK(ibv_destroy_cq(cq) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);
}

TEST_CASE("ibverbs: ibv_init_ah_from_wc takes the sender from the IPv4 header in the GRH", "[ibverbs]") {
  FakeVnic vnic;
  Opened opened;
  std::uint8_t grh[40] = {};
  grh[20] = 0x45;                                  // IPv4, 20-byte header
  const std::uint8_t source[4] = {10, 9, 8, 7};
  std::memcpy(grh + 20 + 12, source, 4);           // the source address
  ibv_wc wc{};
  wc.wc_flags = IBV_WC_GRH;
  ibv_ah_attr ah{};
  REQUIRE(ibv_init_ah_from_wc(opened.context, 1, &wc, reinterpret_cast<ibv_grh*>(grh), &ah) == 0);
  CHECK(ah.is_global == 1);
  const std::uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 9, 8, 7};
  CHECK(std::memcmp(ah.grh.dgid.raw, mapped, 16) == 0);
  wc.wc_flags = 0;
  CHECK(ibv_init_ah_from_wc(opened.context, 1, &wc, reinterpret_cast<ibv_grh*>(grh), &ah) == -1);
}

// Our names come from one table (rocev2/verbs_codes.h); Debian's own libibverbs is the
// reference for every status and event, loaded into a namespace of its own so that it does
// not meet ours.
TEST_CASE("ibverbs: every status and event text is the one Debian's libibverbs gives", "[ibverbs]") {
  const char* const debian = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1";
  void* real = dlmopen(LM_ID_NEWLM, debian, RTLD_NOW | RTLD_LOCAL);
  // Not a skip: Debian's libibverbs1 comes with the packages scripts/deps installs, and a
  // test that passed without its reference would check nothing.
  INFO("cannot load Debian's libibverbs for reference: install libibverbs1 (scripts/deps)");
  REQUIRE(real != nullptr);
  using StatusStr = const char* (*)(ibv_wc_status);
  using EventStr = const char* (*)(ibv_event_type);
  const auto real_status = reinterpret_cast<StatusStr>(dlsym(real, "ibv_wc_status_str"));
  const auto real_event = reinterpret_cast<EventStr>(dlsym(real, "ibv_event_type_str"));
  REQUIRE(real_status != nullptr);
  REQUIRE(real_event != nullptr);
  for (int code = 0; code <= IBV_WC_TM_RNDV_INCOMPLETE + 1; ++code) {
    const auto status = static_cast<ibv_wc_status>(code);
    INFO("status " << code);
    CHECK(std::string(ibv_wc_status_str(status)) == real_status(status));
  }
  for (int code = 0; code <= IBV_EVENT_WQ_FATAL + 1; ++code) {
    const auto event = static_cast<ibv_event_type>(code);
    INFO("event " << code);
    CHECK(std::string(ibv_event_type_str(event)) == real_event(event));
  }
  dlclose(real);
}

TEST_CASE("ibverbs: MRs by IOVA, on-demand and implicit on-demand reach the daemon as asked", "[ibverbs][mr]") {
  FakeVnic vnic;
  Opened opened;
  ibv_pd* pd = ibv_alloc_pd(opened.context);
  REQUIRE(pd != nullptr);
  std::vector<std::uint8_t> buffer(8192);
  const auto address = reinterpret_cast<std::uintptr_t>(buffer.data());
  constexpr int kRights = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

  // ibv_reg_mr: the IOVA is the address.
  ibv_mr* plain = ibv_reg_mr(pd, buffer.data(), buffer.size(), kRights);
  REQUIRE(plain != nullptr);
  CHECK(vnic.last(MessageType::RegMr).words[field::kMrIova] == address);

  // ibv_reg_mr_iova (verbs.h: ibv_reg_mr_iova2) names the IOVA the daemon translates.
  const std::uint64_t iova = 0x7700'0000'0000 + (address & 0xFFF);
  ibv_mr* by_iova = ibv_reg_mr_iova(pd, buffer.data(), buffer.size(), iova, kRights);
  REQUIRE(by_iova != nullptr);
  control::Message reg = vnic.last(MessageType::RegMr);
  CHECK(reg.words[field::kMrAddress] == address);
  CHECK(reg.words[field::kMrLength] == buffer.size());
  CHECK(reg.words[field::kMrIova] == iova);
  CHECK(by_iova->addr == buffer.data());  // ibv_mr.addr stays the process address
  CHECK(by_iova->lkey == 0x1000 + by_iova->handle);

  // Explicit and implicit on-demand paging (ibv_reg_mr(3): addr 0, length SIZE_MAX).
  ibv_mr* odp = ibv_reg_mr(pd, buffer.data(), buffer.size(), kRights | IBV_ACCESS_ON_DEMAND);
  REQUIRE(odp != nullptr);
  CHECK(vnic.last(MessageType::RegMr).words[field::kMrAccess] == (kRights | IBV_ACCESS_ON_DEMAND));
  ibv_mr* implicit = ibv_reg_mr(pd, nullptr, SIZE_MAX, kRights | IBV_ACCESS_ON_DEMAND);
  REQUIRE(implicit != nullptr);
  reg = vnic.last(MessageType::RegMr);
  CHECK(reg.words[field::kMrAddress] == 0);
  CHECK(reg.words[field::kMrLength] == SIZE_MAX);
  CHECK(reg.words[field::kMrIova] == 0);
  CHECK(implicit->length == SIZE_MAX);

  // The daemon's refusal is the call's.
  vnic.refuse_next(MessageType::RegMr, EINVAL);
  errno = 0;
  CHECK(ibv_reg_mr_iova(pd, buffer.data(), buffer.size(), iova + 1, kRights) == nullptr);
  CHECK(errno == EINVAL);

  for (ibv_mr* mr : {plain, by_iova, odp, implicit}) CHECK(ibv_dereg_mr(mr) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);
}

TEST_CASE("ibverbs: ibv_rereg_mr returns ibv_rereg_mr(3)'s codes and takes the daemon's keys", "[ibverbs][mr]") {
  FakeVnic vnic;
  Opened opened;
  Opened other;
  ibv_pd* pd = ibv_alloc_pd(opened.context);
  ibv_pd* pd2 = ibv_alloc_pd(opened.context);
  ibv_pd* foreign = ibv_alloc_pd(other.context);
  REQUIRE((pd != nullptr && pd2 != nullptr && foreign != nullptr));
  std::vector<std::uint8_t> first(4096), second(8192);
  ibv_mr* mr = ibv_reg_mr(pd, first.data(), first.size(), IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(mr != nullptr);
  const std::uint32_t handle = mr->handle;

  // Input errors libibverbs itself detects: the MR is untouched.
  const auto input_error = [&](int flags, ibv_pd* to, void* addr, size_t length) {
    errno = 0;
    const int result = ibv_rereg_mr(mr, flags, to, addr, length, 0);
    return result == IBV_REREG_MR_ERR_INPUT && errno == EINVAL;
  };
  CHECK(input_error(IBV_REREG_MR_FLAGS_SUPPORTED + 1, nullptr, nullptr, 0));
  CHECK(input_error(IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, nullptr, 64));
  CHECK(input_error(IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, second.data(), 0));
  CHECK(input_error(IBV_REREG_MR_CHANGE_PD, nullptr, nullptr, 0));
  CHECK(input_error(IBV_REREG_MR_CHANGE_PD, foreign, nullptr, 0));
  CHECK(mr->pd == pd);
  CHECK(mr->addr == first.data());

  // All three changes at once: the request carries them, the MR shows them and the keys the
  // daemon answered.
  REQUIRE(ibv_rereg_mr(mr, IBV_REREG_MR_FLAGS_SUPPORTED, pd2, second.data(), second.size(),
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_RELAXED_ORDERING) == 0);
  const control::Message rereg = vnic.last(MessageType::ReregMr);
  CHECK(rereg.words[field::kReregMr] == handle);
  CHECK(rereg.words[field::kReregFlags] == IBV_REREG_MR_FLAGS_SUPPORTED);
  CHECK(rereg.words[field::kReregPd] == pd2->handle);
  CHECK(rereg.words[field::kReregAddress] == reinterpret_cast<std::uintptr_t>(second.data()));
  CHECK(rereg.words[field::kReregLength] == second.size());
  CHECK(rereg.words[field::kReregAccess] == (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));  // hint dropped
  CHECK(mr->pd == pd2);
  CHECK(mr->addr == second.data());
  CHECK(mr->length == second.size());
  CHECK(mr->lkey == 0x3000 + handle);
  CHECK(mr->rkey == 0x4000 + handle);

  // Command errors: IBV_REREG_MR_ERR_CMD with errno the reason.
  errno = 0;
  CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_HUGETLB) == IBV_REREG_MR_ERR_CMD);
  CHECK(errno == EOPNOTSUPP);
  vnic.refuse_next(MessageType::ReregMr, EINVAL);
  errno = 0;
  CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd, nullptr, 0, 0) == IBV_REREG_MR_ERR_CMD);
  CHECK(errno == EINVAL);
  CHECK(mr->pd == pd2);

  CHECK(ibv_dereg_mr(mr) == 0);
  for (ibv_pd* p : {pd, pd2, foreign}) CHECK(ibv_dealloc_pd(p) == 0);
}

TEST_CASE("ibverbs: ibv_advise_mr prefetches on-demand regions and refuses as its man page says", "[ibverbs][mr]") {
  FakeVnic vnic;
  Opened opened;
  ibv_pd* pd = ibv_alloc_pd(opened.context);
  ibv_pd* pd2 = ibv_alloc_pd(opened.context);
  REQUIRE((pd != nullptr && pd2 != nullptr));
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  constexpr std::size_t kPages = 16;
  auto* untouched = static_cast<std::uint8_t*>(
      ::mmap(nullptr, kPages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  REQUIRE(untouched != MAP_FAILED);
  const auto resident = [&](std::size_t first, std::size_t count) {
    std::vector<unsigned char> in_core(kPages);
    REQUIRE(::mincore(untouched, kPages * page, in_core.data()) == 0);
    std::size_t n = 0;
    for (std::size_t i = first; i < first + count; ++i) n += in_core[i] & 1;
    return n;
  };
  constexpr int kOdp = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND;
  // Known by an IOVA: the SGEs of ibv_advise_mr address the region as every SGE does.
  const std::uint64_t iova = 0x5500'0000'0000;
  ibv_mr* odp = ibv_reg_mr_iova(pd, untouched, kPages * page, iova, kOdp);
  ibv_mr* read_only = ibv_reg_mr(pd, untouched, kPages * page, IBV_ACCESS_ON_DEMAND);
  std::vector<std::uint8_t> ordinary_buffer(64);
  ibv_mr* ordinary = ibv_reg_mr(pd, ordinary_buffer.data(), ordinary_buffer.size(), IBV_ACCESS_LOCAL_WRITE);
  REQUIRE((odp != nullptr && read_only != nullptr && ordinary != nullptr));
  CHECK(resident(0, kPages) == 0);

  ibv_sge sge{iova + 2 * page, static_cast<std::uint32_t>(4 * page), odp->lkey};
  REQUIRE(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1) == 0);
  CHECK(resident(2, 4) == 4);
  CHECK(resident(0, 2) + resident(6, kPages - 6) == 0);
  sge.addr = iova + 8 * page;
  sge.length = static_cast<std::uint32_t>(page);
  REQUIRE(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1) == 0);
  CHECK(resident(8, 1) == 1);
  sge.addr = iova + 12 * page;
  CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &sge, 1) == 0);
  CHECK(resident(12, 1) == 0);  // "without faulting"

  sge.addr = iova;
  CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 1u << 5, &sge, 1) == EINVAL);   // flags
  CHECK(ibv_advise_mr(pd, static_cast<ibv_advise_mr_advice>(3), 0, &sge, 1) == EOPNOTSUPP);
  CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 0) == EINVAL);
  CHECK(ibv_advise_mr(pd2, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1) == ENOENT);       // another PD's
  ibv_sge unknown{iova, 64, odp->lkey ^ 0x8000'0000u};
  CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &unknown, 1) == ENOENT);
  ibv_sge not_odp{reinterpret_cast<std::uintptr_t>(ordinary_buffer.data()), 64, ordinary->lkey};
  CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &not_odp, 1) == EINVAL);
  ibv_sge beyond{iova + (kPages - 1) * page, static_cast<std::uint32_t>(page + 1), odp->lkey};
  CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &beyond, 1) == EFAULT);
  ibv_sge before{iova - 1, 2, odp->lkey};
  CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &before, 1) == EFAULT);
  ibv_sge no_write{reinterpret_cast<std::uintptr_t>(untouched), 64, read_only->lkey};
  CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &no_write, 1) == EPERM);
  // A hole in the process's address space.
  REQUIRE(::munmap(untouched + 14 * page, page) == 0);
  ibv_sge hole{iova + 13 * page, static_cast<std::uint32_t>(2 * page), odp->lkey};
  CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &hole, 1) == EFAULT);
  // An implicit region reaches the top of the address space, which no process maps.
  ibv_mr* implicit = ibv_reg_mr(pd, nullptr, SIZE_MAX, kOdp);
  REQUIRE(implicit != nullptr);
  ibv_sge top{UINT64_MAX - 4096, 4096, implicit->lkey};
  CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &top, 1) == EFAULT);
  CHECK(ibv_dereg_mr(implicit) == 0);
  // After deregistration the key names nothing.
  const std::uint32_t old_lkey = odp->lkey;
  REQUIRE(ibv_dereg_mr(odp) == 0);
  ibv_sge stale{iova, 64, old_lkey};
  CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &stale, 1) == ENOENT);

  CHECK(ibv_dereg_mr(read_only) == 0);
  CHECK(ibv_dereg_mr(ordinary) == 0);
  ::munmap(untouched, kPages * page);
  CHECK(ibv_dealloc_pd(pd) == 0);
  CHECK(ibv_dealloc_pd(pd2) == 0);
}

TEST_CASE("ibverbs: ibv_query_device_ex reports on-demand paging", "[ibverbs][mr]") {
  FakeVnic vnic;
  Opened opened;
  ibv_device_attr_ex attr{};
  REQUIRE(ibv_query_device_ex(opened.context, nullptr, &attr) == 0);
  CHECK(attr.odp_caps.general_caps == (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT));
  constexpr std::uint32_t kUd = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV;
  CHECK(attr.odp_caps.per_transport_caps.ud_odp_caps == kUd);
  CHECK(attr.odp_caps.per_transport_caps.uc_odp_caps == (kUd | IBV_ODP_SUPPORT_WRITE));
  CHECK(attr.odp_caps.per_transport_caps.rc_odp_caps == (kUd | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                                                         IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV));
  CHECK(attr.xrc_odp_caps == 0);
}

TEST_CASE("ibverbs: the command fd is a real descriptor a program may poll or close", "[ibverbs]") {
  FakeVnic vnic;
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  REQUIRE(count == 1);
  ibv_context* context = ibv_open_device(list[0]);
  REQUIRE(context != nullptr);
  const int cmd_fd = context->cmd_fd;
  REQUIRE(cmd_fd >= 0);
  CHECK((::fcntl(cmd_fd, F_GETFD) & FD_CLOEXEC) != 0);
  pollfd p{cmd_fd, POLLIN, 0};
  CHECK(::poll(&p, 1, 0) >= 0);  // answers at once, never blocks the program
  char byte = 0;
  CHECK(::read(cmd_fd, &byte, 1) == 0);
  errno = 0;
  CHECK(ibv_import_device(cmd_fd) == nullptr);
  CHECK(errno == EOPNOTSUPP);

  // The program closes it and the number goes to one of its own files: closing the device
  // must leave that file alone, and the context keeps working meanwhile.
  REQUIRE(::close(cmd_fd) == 0);
  const int reused = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(reused >= 0);
  ibv_pd* pd = ibv_alloc_pd(context);
  REQUIRE(pd != nullptr);
  CHECK(ibv_dealloc_pd(pd) == 0);
  CHECK(ibv_close_device(context) == 0);
  CHECK(::fcntl(reused, F_GETFD) >= 0);
  ::close(reused);

  // Left open, it is closed with the device.
  context = ibv_open_device(list[0]);
  REQUIRE(context != nullptr);
  const int second = context->cmd_fd;
  REQUIRE(second >= 0);
  CHECK(ibv_close_device(context) == 0);
  CHECK(::fcntl(second, F_GETFD) == -1);
  ibv_free_device_list(list);
}

TEST_CASE("ibverbs: ibv_create_qp_ex takes what rxe takes, for RC, UC and UD", "[ibverbs][qp]") {
  FakeVnic vnic;
  Opened opened;
  ibv_pd* pd = ibv_alloc_pd(opened.context);
  ibv_cq* cq = ibv_create_cq(opened.context, 8, nullptr, nullptr, 0);
  REQUIRE((pd != nullptr && cq != nullptr));
  const auto attributes = [&](ibv_qp_type type, std::uint32_t mask) {
    ibv_qp_init_attr_ex attr{};
    attr.send_cq = cq;
    attr.recv_cq = cq;
    attr.qp_type = type;
    attr.cap = {4, 4, 1, 1, 0};
    attr.comp_mask = mask;
    attr.pd = pd;
    return attr;
  };
  // 0 when created (and destroyed again), else errno.
  const auto create = [&](ibv_qp_init_attr_ex attr) {
    errno = 0;
    ibv_qp* qp = ibv_create_qp_ex(opened.context, &attr);
    if (qp == nullptr) return errno;
    CHECK(qp->qp_type == attr.qp_type);
    CHECK(ibv_destroy_qp(qp) == 0);
    return 0;
  };
  constexpr std::uint64_t kSends = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
  constexpr std::uint64_t kWrites = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
  constexpr std::uint64_t kRcOnly = IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                                    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
  for (const ibv_qp_type type : {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD}) {
    INFO("qp type " << type);
    CHECK(create(attributes(type, IBV_QP_INIT_ATTR_PD)) == 0);
    ibv_qp_init_attr_ex attr = attributes(type, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS);
    CHECK(create(attr) == 0);  // no flags: rxe's kernel takes that
    attr.create_flags = IBV_QP_CREATE_SCATTER_FCS;
    CHECK(create(attr) == EOPNOTSUPP);
    attr = attributes(type, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS);
    attr.send_ops_flags = kSends;
    CHECK(create(attr) == 0);
    attr.send_ops_flags = kSends | kWrites;
    CHECK(create(attr) == (type == IBV_QPT_UD ? EOPNOTSUPP : 0));
    attr.send_ops_flags = kSends | kWrites | kRcOnly;
    CHECK(create(attr) == (type == IBV_QPT_RC ? 0 : EOPNOTSUPP));
    attr.send_ops_flags = IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;  // RC and UC, as rxe
    CHECK(create(attr) == (type == IBV_QPT_UD ? EOPNOTSUPP : 0));
    attr.send_ops_flags = IBV_QP_EX_WITH_TSO;
    CHECK(create(attr) == EOPNOTSUPP);
    attr = attributes(type, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_MAX_TSO_HEADER);
    attr.max_tso_header = 64;
    CHECK(create(attr) == EOPNOTSUPP);
    CHECK(create(attributes(type, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD)) == EOPNOTSUPP);
    CHECK(create(attributes(type, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_RX_HASH)) == EOPNOTSUPP);
    CHECK(create(attributes(type, 0)) == EINVAL);  // no PD
  }
  CHECK(create(attributes(IBV_QPT_RAW_PACKET, IBV_QP_INIT_ATTR_PD)) == EOPNOTSUPP);
  CHECK(create(attributes(IBV_QPT_XRC_SEND, IBV_QP_INIT_ATTR_PD)) == EOPNOTSUPP);
  CHECK(ibv_destroy_cq(cq) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);
}

TEST_CASE("ibverbs: memory windows: alloc, ibv_bind_mw, BIND_MW and LOCAL_INV WQEs, dealloc", "[ibverbs][mw]") {
  FakeVnic vnic;
  Opened opened;
  ibv_device_attr device{};
  REQUIRE(ibv_query_device(opened.context, &device) == 0);
  CHECK(device.max_mw == 77);
  ibv_pd* pd = ibv_alloc_pd(opened.context);
  REQUIRE(pd != nullptr);
  std::vector<std::uint8_t> buffer(4096);
  ibv_mr* mr = ibv_reg_mr(pd, buffer.data(), buffer.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  REQUIRE(mr != nullptr);
  CHECK(vnic.last(MessageType::RegMr).words[field::kMrAccess] == (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND));
  ibv_cq* cq = ibv_create_cq(opened.context, 16, nullptr, nullptr, 0);
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {8, 8, 1, 1, 0};
  ibv_qp* qp = ibv_create_qp(pd, &init);
  REQUIRE(qp != nullptr);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  REQUIRE(ibv_modify_qp(qp, &attr, IBV_QP_STATE) == 0);
  attr.qp_state = IBV_QPS_RTS;  // the fake accepts anything
  REQUIRE(ibv_modify_qp(qp, &attr, IBV_QP_STATE) == 0);
  RingConsumer sq(vnic.region(qp->handle), vnic.geometry(qp->handle));

  ibv_mw* one = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
  REQUIRE(one != nullptr);
  CHECK(vnic.last(MessageType::AllocMw).words[field::kMwPd] == pd->handle);
  CHECK(vnic.last(MessageType::AllocMw).words[field::kMwType] == IBV_MW_TYPE_1);
  CHECK(one->type == IBV_MW_TYPE_1);
  CHECK(one->pd == pd);
  CHECK(one->rkey == (one->handle | 0x40));
  ibv_mw* two = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
  REQUIRE(two != nullptr);

  // ibv_bind_mw: a BIND_MW WQE with the next key; mw->rkey takes it at once.
  const std::uint32_t first_key = one->rkey;
  ibv_mw_bind bind{};
  bind.wr_id = 11;
  bind.send_flags = IBV_SEND_SIGNALED;
  bind.bind_info = {mr, reinterpret_cast<std::uintptr_t>(buffer.data()) + 64, 512, IBV_ACCESS_REMOTE_READ};
  REQUIRE(ibv_bind_mw(qp, one, &bind) == 0);
  CHECK(one->rkey == ibv_inc_rkey(first_key));
  SendWqe wqe = consume_send_wqe(vnic, qp->handle, sq);
  CHECK(wqe.wr_id == 11);
  CHECK(wqe.opcode == IBV_WR_BIND_MW);
  CHECK(wqe.send_flags == IBV_SEND_SIGNALED);
  CHECK(wqe.invalidate_rkey == first_key);
  CHECK(wqe.rkey == one->rkey);
  CHECK(wqe.remote_addr == reinterpret_cast<std::uintptr_t>(buffer.data()) + 64);
  CHECK(wqe.compare_add == 512);
  CHECK(wqe.swap == (std::uint64_t{mr->lkey} << 32 | IBV_ACCESS_REMOTE_READ));
  CHECK(wqe.num_sge == 0);
  // verbs.h and the provider's own refusals.
  CHECK(ibv_bind_mw(qp, two, &bind) == EINVAL);
  bind.bind_info.mw_access_flags |= IBV_ACCESS_ZERO_BASED;
  CHECK(ibv_bind_mw(qp, one, &bind) == EINVAL);
  CHECK(one->rkey == ibv_inc_rkey(first_key));

  // IBV_WR_BIND_MW through ibv_post_send: mw->rkey stays the program's business.
  ibv_send_wr wr{};
  wr.wr_id = 12;
  wr.opcode = IBV_WR_BIND_MW;
  wr.bind_mw.mw = two;
  wr.bind_mw.rkey = ibv_inc_rkey(two->rkey);
  wr.bind_mw.bind_info = {mr, reinterpret_cast<std::uintptr_t>(buffer.data()), 4096, IBV_ACCESS_REMOTE_WRITE};
  ibv_send_wr* bad = nullptr;
  REQUIRE(ibv_post_send(qp, &wr, &bad) == 0);
  wqe = consume_send_wqe(vnic, qp->handle, sq);
  CHECK(wqe.opcode == IBV_WR_BIND_MW);
  CHECK(wqe.invalidate_rkey == two->rkey);
  CHECK(wqe.rkey == ibv_inc_rkey(two->rkey));
  CHECK(wqe.compare_add == 4096);
  CHECK(wqe.swap == (std::uint64_t{mr->lkey} << 32 | IBV_ACCESS_REMOTE_WRITE));
  ibv_send_wr inv{};
  inv.wr_id = 13;
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.invalidate_rkey = 0xABCD01;
  REQUIRE(ibv_post_send(qp, &inv, &bad) == 0);
  wqe = consume_send_wqe(vnic, qp->handle, sq);
  CHECK(wqe.opcode == IBV_WR_LOCAL_INV);
  CHECK(wqe.invalidate_rkey == 0xABCD01);

  // The same through ibv_wr_bind_mw / ibv_wr_local_inv.
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(qp);
  ibv_wr_start(qpx);
  qpx->wr_id = 14;
  const ibv_mw_bind_info info{mr, reinterpret_cast<std::uintptr_t>(buffer.data()) + 8, 8, IBV_ACCESS_REMOTE_READ};
  ibv_wr_bind_mw(qpx, two, 0x123456, &info);
  ibv_wr_local_inv(qpx, 0x123456);
  REQUIRE(ibv_wr_complete(qpx) == 0);
  wqe = consume_send_wqe(vnic, qp->handle, sq);
  CHECK(wqe.wr_id == 14);
  CHECK(wqe.opcode == IBV_WR_BIND_MW);
  CHECK(wqe.invalidate_rkey == two->rkey);
  CHECK(wqe.rkey == 0x123456);
  CHECK(wqe.remote_addr == reinterpret_cast<std::uintptr_t>(buffer.data()) + 8);
  CHECK(wqe.compare_add == 8);
  wqe = consume_send_wqe(vnic, qp->handle, sq);
  CHECK(wqe.opcode == IBV_WR_LOCAL_INV);
  CHECK(wqe.invalidate_rkey == 0x123456);

  const std::uint32_t handle = two->handle;
  CHECK(ibv_dealloc_mw(two) == 0);
  CHECK(vnic.last(MessageType::DeallocMw).words[field::kDestroyHandle] == handle);
  vnic.refuse_next(MessageType::DeallocMw, EINVAL);
  CHECK(ibv_dealloc_mw(one) == EINVAL);
  CHECK(ibv_dealloc_mw(one) == 0);
  CHECK(ibv_destroy_qp(qp) == 0);
  CHECK(ibv_destroy_cq(cq) == 0);
  CHECK(ibv_dereg_mr(mr) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);
}
