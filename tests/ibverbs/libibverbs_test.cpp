// Our libibverbs.so.1 as a program sees it, without a vnic: this test links the library and
// calls the verbs.h API (its inline functions included) against a fake daemon listening on
// $RRDMA_RUN_DIR/fake0.sock, which answers control frames and adopts the rings, so the test
// can play the NIC: read the WQEs ibv_post_send / ibv_wr_* wrote, produce the CQEs
// ibv_poll_cq / ibv_start_poll read. Also the helpers that touch no device.
#include <catch2/catch.hpp>

#include <infiniband/verbs.h>
#include <dlfcn.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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
    control::Message reply = control::make_reply(type, request.request_id, 0);
    const std::uint32_t handle = ++next_handle_;
    const auto& w = request.words;
    const auto capacity = [](std::uint64_t entries) {
      return *client::ring_capacity_for(static_cast<std::uint32_t>(entries));
    };
    switch (type) {
      case MessageType::OpenDevice:
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
      case MessageType::ModifyQp:
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
    ibv_wr_local_inv(qpx, 1);  // not supported: the whole batch is refused
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

TEST_CASE("ibverbs: what a vnic cannot do fails with EOPNOTSUPP", "[ibverbs]") {
  FakeVnic vnic;
  Opened opened;
  ibv_pd* pd = ibv_alloc_pd(opened.context);
  REQUIRE(pd != nullptr);
  std::vector<std::uint8_t> buffer(64);

  errno = 0;
  CHECK(ibv_reg_mr_iova(pd, buffer.data(), buffer.size(), 0x1000, IBV_ACCESS_LOCAL_WRITE) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  errno = 0;
  CHECK(ibv_reg_mr(pd, buffer.data(), buffer.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  ibv_mr* relaxed = ibv_reg_mr(pd, buffer.data(), buffer.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
  CHECK(relaxed != nullptr);  // an optional hint, ignored
  if (relaxed != nullptr) CHECK(ibv_dereg_mr(relaxed) == 0);
  errno = 0;
  CHECK(ibv_reg_dmabuf_mr(pd, 0, 64, 0, 3, IBV_ACCESS_LOCAL_WRITE) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  CHECK(ibv_import_device(3) == nullptr);
  CHECK(ibv_import_pd(opened.context, 1) == nullptr);
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
