// The client library's data path towards the daemon: work requests become WQEs in the
// QP's and SRQ's rings (docs/VERBS_DATAPATH.md, "Posting"), and the QP and SRQ objects
// that own those rings.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "verbs/app/client.h"
#include "verbs/app/client_internal.h"

namespace rrdma::verbs::client {

namespace field = control::field;
using control::MessageType;

// ---------------------------------------------------------------------------------------
// WR -> WQE

namespace {

// READs, atomics, FLUSH and ATOMIC_WRITE have no payload to take inline.
bool is_read_or_atomic(std::uint32_t opcode) {
  return rocev2::wr_opcode_info(static_cast<rocev2::WrOpcode>(opcode)).holds_responder_resource();
}
// Copies the payload of an inline WR out of the application's buffers now, as
// IBV_SEND_INLINE promises: the buffers may be reused as soon as post_send returns.
void copy_inline(std::span<const Sge> sges, SendWqe& wqe) {
  std::size_t at = 0;
  for (const Sge& sge : sges) {
    if (sge.length == 0) continue;
    std::memcpy(wqe.inline_data + at, reinterpret_cast<const void*>(static_cast<std::uintptr_t>(sge.addr)),
                sge.length);
    at += sge.length;
  }
}

}  // namespace

int build_send_wqe(const SendWr& wr, const SendShape& shape, SendWqe& out) {
  out = SendWqe{};
  if (wr.opcode > 0xFF) return EINVAL;
  if (wr.sg_list.size() > shape.max_send_sge || wr.sg_list.size() > kMaxSge) return EINVAL;
  out.wr_id = wr.wr_id;
  out.opcode = static_cast<std::uint8_t>(wr.opcode);
  out.send_flags = wr.send_flags | (shape.sig_all ? rocev2::send_flags::kSignaled : 0);
  out.remote_addr = wr.remote_addr;
  out.rkey = wr.rkey;
  out.imm_data = wr.imm_data;
  out.compare_add = wr.compare_add;
  out.swap = wr.swap;
  out.invalidate_rkey = wr.invalidate_rkey;
  if (shape.type == rocev2::QpType::Ud) {
    if (wr.ah == nullptr) return EINVAL;
    out.ah_handle = wr.ah->handle();
    out.remote_qpn = wr.remote_qpn;
    out.remote_qkey = wr.remote_qkey;
  }
  const bool inline_data = (wr.send_flags & rocev2::send_flags::kInline) != 0;
  if (inline_data && !is_read_or_atomic(wr.opcode)) {
    std::uint64_t total = 0;
    for (const Sge& sge : wr.sg_list) total += sge.length;
    if (total > shape.max_inline || total > kMaxInlineData) return EINVAL;
    out.inline_length = static_cast<std::uint16_t>(total);
  } else {
    out.num_sge = static_cast<std::uint8_t>(wr.sg_list.size());
    for (std::size_t i = 0; i < wr.sg_list.size(); ++i) {
      out.sge[i] = WqeSge{wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
    }
  }
  // The daemon checks again (it trusts nothing in the ring); checking here gives the
  // application its EINVAL at post time, as verbs does, instead of a failed completion.
  if (check_send_wqe(out, shape.type).error != WqeError::None) return EINVAL;
  if (inline_data) copy_inline(wr.sg_list, out);
  return 0;
}

int build_recv_wqe(const RecvWr& wr, std::uint32_t max_recv_sge, RecvWqe& out) {
  out = RecvWqe{};
  if (wr.sg_list.size() > max_recv_sge || wr.sg_list.size() > kMaxSge) return EINVAL;
  out.wr_id = wr.wr_id;
  out.num_sge = static_cast<std::uint32_t>(wr.sg_list.size());
  for (std::size_t i = 0; i < wr.sg_list.size(); ++i) {
    out.sge[i] = WqeSge{wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
  }
  return check_recv_wqe(out).error == WqeError::None ? 0 : EINVAL;
}

int send_state_error(QpState state) {
  switch (state) {
    case QpState::Reset:
    case QpState::Init:
    case QpState::Rtr:
      return EINVAL;
    default:
      return 0;
  }
}

int recv_state_error(QpState state, bool has_srq) {
  if (has_srq) return EINVAL;  // receives go to the SRQ (ibv_post_recv(3))
  return state == QpState::Reset ? EINVAL : 0;
}

// ---------------------------------------------------------------------------------------
// Rings and batches

WorkRing::WorkRing(SharedRegion region, RingGeometry geometry, int doorbell_fd)
    : region_(std::move(region)), geometry_(geometry), producer_(region_.bytes(), geometry), doorbell_fd_(doorbell_fd) {}

int WorkRing::push(ByteSpan entry) {
  switch (producer_.try_push(entry)) {
    case PushResult::Pushed:
      pushed_ = true;
      return 0;
    case PushResult::Full:
      return ENOMEM;
    case PushResult::Broken:
      return EIO;
  }
  return EIO;
}

void WorkRing::publish() {
  if (!pushed_) return;
  pushed_ = false;
  if (!producer_.publish()) return;
  // The daemon asked to be woken (it had found the ring empty). A full counter (EAGAIN)
  // means it has a wake-up pending anyway.
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t ignored = ::write(doorbell_fd_, &one, sizeof(one));
}

SendBatch::SendBatch(WorkRing& ring, const SendShape& shape, int state_error, WorkLog* log)
    : ring_(&ring), lock_(ring.mutex()), shape_(shape), error_(state_error), log_(log) {}

int SendBatch::push(const SendWr& wr) {
  if (error_ != 0) return error_;
  SendWqe wqe;
  error_ = build_send_wqe(wr, shape_, wqe);
  if (error_ == 0) error_ = ring_->push(ByteSpan(reinterpret_cast<const std::uint8_t*>(&wqe), sizeof(wqe)));
  if (error_ == 0 && log_ != nullptr) {
    log_->posted_send(wqe.wr_id, wqe.opcode, (wqe.send_flags & rocev2::send_flags::kSignaled) != 0);
  }
  return error_;
}

void SendBatch::finish() {
  if (!lock_.owns_lock()) return;
  ring_->publish();
  lock_.unlock();
}

RecvBatch::RecvBatch(WorkRing& ring, std::uint32_t max_recv_sge, int state_error, WorkLog* log)
    : ring_(&ring), lock_(ring.mutex()), max_recv_sge_(max_recv_sge), error_(state_error), log_(log) {}

int RecvBatch::push(const RecvWr& wr) {
  if (error_ != 0) return error_;
  RecvWqe wqe;
  error_ = build_recv_wqe(wr, max_recv_sge_, wqe);
  if (error_ == 0) error_ = ring_->push(ByteSpan(reinterpret_cast<const std::uint8_t*>(&wqe), sizeof(wqe)));
  if (error_ == 0 && log_ != nullptr) log_->posted_recv(wqe.wr_id);
  return error_;
}

void RecvBatch::finish() {
  if (!lock_.owns_lock()) return;
  ring_->publish();
  lock_.unlock();
}

namespace {

template <typename Batch, typename Wr>
int post_all(Batch batch, std::span<const Wr> wrs, std::size_t& posted) {
  posted = 0;
  for (const Wr& wr : wrs) {
    if (const int error = batch.push(wr); error != 0) return error;
    ++posted;
  }
  return 0;
}

// A non-blocking eventfd for a queue's doorbell: the daemon only reads it, we only write.
Result<UniqueFd> make_doorbell_fd() {
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) return {errno, {}};
  return {0, UniqueFd(fd)};
}

}  // namespace

// ---------------------------------------------------------------------------------------
// SRQ

Result<std::shared_ptr<SharedReceiveQueue>> ProtectionDomain::create_srq(std::uint32_t max_wr, std::uint32_t max_sge,
                                                                         std::uint32_t limit) {
  const auto capacity = ring_capacity_for(max_wr);
  if (max_wr == 0 || !capacity || max_sge > kMaxSge) return {EINVAL, nullptr};
  const RingGeometry geometry = recv_ring_geometry(*capacity);
  SharedRegion region;
  if (const int error = make_ring("rrdma-srq", geometry, region); error != 0) return {error, nullptr};
  auto doorbell = make_doorbell_fd();
  if (!doorbell.ok()) return {doorbell.error, nullptr};

  control::Message request = context_->new_request(MessageType::CreateSrq);
  request.words[field::kSrqPd] = handle_;
  request.words[field::kSrqMaxWr] = max_wr;
  request.words[field::kSrqMaxSge] = max_sge;
  request.words[field::kSrqLimit] = limit;
  request.words[field::kSrqRingBytes] = geometry.region_size();
  const int fds[] = {region.fd(), doorbell.value.get()};
  control::Message reply;
  if (const int error = context_->call(request, fds, reply); error != 0) return {error, nullptr};
  auto ring = std::make_unique<WorkRing>(std::move(region), geometry, doorbell.value.get());
  return {0, std::make_shared<SharedReceiveQueue>(shared_from_this(), handle_word(reply.words[field::kHandle]),
                                                  std::move(ring), std::move(doorbell.value), max_sge)};
}

SharedReceiveQueue::~SharedReceiveQueue() { destroy(); }

int SharedReceiveQueue::destroy() {
  if (destroyed_.exchange(true)) return 0;
  const int error = destroy_handle(pd_->context(), MessageType::DestroySrq, handle_);
  if (error != 0 && error != EIO) destroyed_ = false;
  return error;
}

// ibv_post_srq_recv after the daemon died is EIO, like every post. (An SRQ's receives are
// not flushed: verbs never flushes an SRQ's WQEs when its QPs fail.)
RecvBatch SharedReceiveQueue::begin_recv() {
  return RecvBatch(*ring_, max_sge_, pd_->context().check_device_fatal() ? EIO : 0);
}

int SharedReceiveQueue::post_recv(std::span<const RecvWr> wrs, std::size_t& posted) {
  return post_all(begin_recv(), wrs, posted);
}

int SharedReceiveQueue::modify(const SrqAttributes& attributes, int mask) {
  control::Message request = pd_->context().new_request(MessageType::ModifySrq);
  request.words[field::kModSrq] = handle_;
  request.words[field::kModSrqMask] = static_cast<std::uint32_t>(mask);
  request.words[field::kModSrqMaxWr] = attributes.max_wr;
  request.words[field::kModSrqLimit] = attributes.srq_limit;
  control::Message reply;
  return pd_->context().call(request, {}, reply);
}

int SharedReceiveQueue::query(SrqAttributes& out) {
  control::Message request = pd_->context().new_request(MessageType::QuerySrq);
  request.words[field::kQuerySrqHandle] = handle_;
  control::Message reply;
  if (const int error = pd_->context().call(request, {}, reply); error != 0) return error;
  out.max_wr = static_cast<std::uint32_t>(reply.words[field::kQuerySrqMaxWr]);
  out.max_sge = static_cast<std::uint32_t>(reply.words[field::kQuerySrqMaxSge]);
  out.srq_limit = static_cast<std::uint32_t>(reply.words[field::kQuerySrqLimit]);
  return 0;
}

// ---------------------------------------------------------------------------------------
// QP

QueuePair::QueuePair(std::shared_ptr<ProtectionDomain> pd, QpInit init) : pd_(std::move(pd)), init_(std::move(init)) {}

QueuePair::~QueuePair() {
  destroy();
  detach_logs();
}

// A destroyed QP's work completes no more (ibv_destroy_qp(3)); its log leaves the CQs.
int QueuePair::destroy() {
  if (handle_ == 0 || destroyed_.exchange(true)) return 0;
  const int error = destroy_handle(pd_->context(), MessageType::DestroyQp, handle_);
  if (error != 0 && error != EIO) {
    destroyed_ = false;
    return error;
  }
  detach_logs();
  return error;
}

void QueuePair::detach_logs() {
  if (!log_) return;
  init_.send_cq->detach_log(log_.get());
  init_.recv_cq->detach_log(log_.get());
}

QpState QueuePair::state() const {
  return pd_->context().device_fatal() ? QpState::Err : state_.load();
}

namespace {

bool valid_qp_type(QpType type) { return type == QpType::Rc || type == QpType::Uc || type == QpType::Ud; }

int check_qp_init(const QpInit& init) {
  if (!init.send_cq || !init.recv_cq || !valid_qp_type(init.type)) return EINVAL;
  const QpCapabilities& cap = init.cap;
  if (cap.max_send_sge > kMaxSge || cap.max_recv_sge > kMaxSge || cap.max_inline_data > kMaxInlineData) return EINVAL;
  if (!ring_capacity_for(cap.max_send_wr) || !ring_capacity_for(cap.max_recv_wr)) return EINVAL;
  return 0;
}

}  // namespace

Result<std::shared_ptr<QueuePair>> ProtectionDomain::create_qp(const QpInit& init) {
  if (const int error = check_qp_init(init); error != 0) return {error, nullptr};
  // With an SRQ the RQ ring is still passed (the fd count depends on the type only) and
  // stays empty: one entry.
  const std::uint32_t recv_wr = init.srq ? 0 : init.cap.max_recv_wr;
  const RingGeometry send_geometry = send_ring_geometry(*ring_capacity_for(init.cap.max_send_wr));
  const RingGeometry recv_geometry = recv_ring_geometry(*ring_capacity_for(recv_wr));
  SharedRegion send_region, recv_region;
  if (const int error = make_ring("rrdma-sq", send_geometry, send_region); error != 0) return {error, nullptr};
  if (const int error = make_ring("rrdma-rq", recv_geometry, recv_region); error != 0) return {error, nullptr};
  auto doorbell = make_doorbell_fd();
  if (!doorbell.ok()) return {doorbell.error, nullptr};

  control::Message request = context_->new_request(MessageType::CreateQp);
  request.words[field::kQpPd] = handle_;
  request.words[field::kQpType] = static_cast<std::uint32_t>(init.type);
  request.words[field::kQpSendCq] = init.send_cq->handle();
  request.words[field::kQpRecvCq] = init.recv_cq->handle();
  request.words[field::kQpSrq] = init.srq ? init.srq->handle() : 0;
  request.words[field::kQpMaxSendWr] = init.cap.max_send_wr;
  request.words[field::kQpMaxRecvWr] = recv_wr;
  request.words[field::kQpMaxSendSge] = init.cap.max_send_sge;
  request.words[field::kQpMaxRecvSge] = init.cap.max_recv_sge;
  request.words[field::kQpMaxInline] = init.cap.max_inline_data;
  request.words[field::kQpSqRingBytes] = send_geometry.region_size();
  request.words[field::kQpRqRingBytes] = recv_geometry.region_size();
  const int fds[] = {send_region.fd(), recv_region.fd(), doorbell.value.get()};
  control::Message reply;
  if (const int error = context_->call(request, fds, reply); error != 0) return {error, nullptr};

  std::shared_ptr<QueuePair> qp(new QueuePair(shared_from_this(), init));
  qp->handle_ = handle_word(reply.words[field::kQpHandle]);
  qp->qp_num_ = static_cast<std::uint32_t>(reply.words[field::kQpNum]);
  qp->doorbell_ = std::move(doorbell.value);
  qp->send_ring_ = std::make_unique<WorkRing>(std::move(send_region), send_geometry, qp->doorbell_.get());
  qp->recv_ring_ = std::make_unique<WorkRing>(std::move(recv_region), recv_geometry, qp->doorbell_.get());
  // What the QP really has (ibv_create_qp(3): at least what was asked): the rings'
  // capacities, and inline up to the WQE's inline area whatever was asked.
  QpCapabilities& cap = qp->init_.cap;
  cap.max_send_wr = send_geometry.capacity;
  cap.max_recv_wr = init.srq ? 0 : recv_geometry.capacity;
  cap.max_inline_data = kMaxInlineData;
  qp->attach_logs();
  return {0, std::move(qp)};
}

// A queue's outstanding WRs are at most those in its ring plus those the daemon took: its
// engine queue has the ring's capacity, and it holds one more WQE while the engine is full.
void QueuePair::attach_logs() {
  const std::size_t bound = 2 * std::size_t{std::max(send_ring_->capacity(), recv_ring_->capacity())} + 1;
  log_ = std::make_shared<WorkLog>(qp_num_, bound);
  init_.send_cq->attach_log(log_, CompletionQueue::Side::Send);
  if (!init_.srq) init_.recv_cq->attach_log(log_, CompletionQueue::Side::Recv);
}

SendBatch QueuePair::begin_send() {
  const SendShape shape{static_cast<rocev2::QpType>(init_.type), init_.cap.max_send_sge, init_.cap.max_inline_data,
                        init_.sq_sig_all};
  const int error = pd_->context().check_device_fatal() ? EIO : send_state_error(state_.load());
  return SendBatch(*send_ring_, shape, error, log_.get());
}

RecvBatch QueuePair::begin_recv() {
  const int error =
      pd_->context().check_device_fatal() ? EIO : recv_state_error(state_.load(), init_.srq != nullptr);
  return RecvBatch(*recv_ring_, init_.cap.max_recv_sge, error, log_.get());
}

int QueuePair::post_send(std::span<const SendWr> wrs, std::size_t& posted) {
  return post_all(begin_send(), wrs, posted);
}

int QueuePair::post_recv(std::span<const RecvWr> wrs, std::size_t& posted) {
  return post_all(begin_recv(), wrs, posted);
}

namespace {

// ibv_qp_attr <-> the ModifyQp / QueryQp reply words (VERBS_CONTROL.md).
void put_qp_attributes(const QpAttributes& attr, control::Message& message) {
  auto& w = message.words;
  w[field::kModState] = static_cast<std::uint32_t>(attr.state);
  w[field::kModCurState] = static_cast<std::uint32_t>(attr.cur_state);
  w[field::kModPathMtu] = static_cast<std::uint32_t>(attr.path_mtu);
  w[field::kModQkey] = attr.qkey;
  w[field::kModRqPsn] = attr.rq_psn;
  w[field::kModSqPsn] = attr.sq_psn;
  w[field::kModDestQpNum] = attr.dest_qp_num;
  w[field::kModAccessFlags] = attr.access_flags;
  w[field::kModPkeyIndex] = attr.pkey_index;
  w[field::kModPortNum] = attr.port_num;
  w[field::kModMaxRdAtomic] = attr.max_rd_atomic;
  w[field::kModMaxDestRdAtomic] = attr.max_dest_rd_atomic;
  w[field::kModMinRnrTimer] = attr.min_rnr_timer;
  w[field::kModTimeout] = attr.timeout;
  w[field::kModRetryCnt] = attr.retry_cnt;
  w[field::kModRnrRetry] = attr.rnr_retry;
  put_gid(message, field::kModDgidHigh, field::kModDgidLow, attr.dgid);
  w[field::kModSgidIndex] = attr.sgid_index;
  w[field::kModHopLimit] = attr.hop_limit;
  w[field::kModTrafficClass] = attr.traffic_class;
  w[field::kModFlowLabel] = attr.flow_label;
}

int take_qp_attributes(const control::Message& message, QpAttributes& attr) {
  const auto& w = message.words;
  if (w[field::kModState] > static_cast<std::uint32_t>(QpState::Err) ||
      w[field::kModCurState] > static_cast<std::uint32_t>(QpState::Err)) {
    return EPROTO;
  }
  const auto u8 = [&](std::size_t i) { return static_cast<std::uint8_t>(w[i]); };
  const auto u32 = [&](std::size_t i) { return static_cast<std::uint32_t>(w[i]); };
  attr.state = static_cast<QpState>(w[field::kModState]);
  attr.cur_state = static_cast<QpState>(w[field::kModCurState]);
  attr.path_mtu = static_cast<verbs::Mtu>(u32(field::kModPathMtu));
  attr.qkey = u32(field::kModQkey);
  attr.rq_psn = u32(field::kModRqPsn);
  attr.sq_psn = u32(field::kModSqPsn);
  attr.dest_qp_num = u32(field::kModDestQpNum);
  attr.access_flags = u32(field::kModAccessFlags);
  attr.pkey_index = static_cast<std::uint16_t>(w[field::kModPkeyIndex]);
  attr.port_num = u8(field::kModPortNum);
  attr.max_rd_atomic = u8(field::kModMaxRdAtomic);
  attr.max_dest_rd_atomic = u8(field::kModMaxDestRdAtomic);
  attr.min_rnr_timer = u8(field::kModMinRnrTimer);
  attr.timeout = u8(field::kModTimeout);
  attr.retry_cnt = u8(field::kModRetryCnt);
  attr.rnr_retry = u8(field::kModRnrRetry);
  attr.dgid = take_gid(message, field::kModDgidHigh, field::kModDgidLow);
  attr.sgid_index = u8(field::kModSgidIndex);
  attr.hop_limit = u8(field::kModHopLimit);
  attr.traffic_class = u8(field::kModTrafficClass);
  attr.flow_label = u32(field::kModFlowLabel);
  return 0;
}

}  // namespace

int QueuePair::modify(const QpAttributes& attributes, int mask) {
  control::Message request = pd_->context().new_request(MessageType::ModifyQp);
  request.words[field::kModQp] = handle_;
  request.words[field::kModAttrMask] = static_cast<std::uint32_t>(mask);
  put_qp_attributes(attributes, request);
  control::Message reply;
  if (const int error = pd_->context().call(request, {}, reply); error != 0) return error;
  if ((mask & verbs::qp_attr::kState) != 0) state_ = attributes.state;
  // RESET removes every WQE without a completion (the daemon emptied the rings before it
  // replied, and published what it completed before): what the CQs still hold of this QP
  // belongs to its past, and goes too (hardware providers clean their CQs here).
  if ((mask & verbs::qp_attr::kState) != 0 && attributes.state == QpState::Reset) {
    if (log_) log_->forget_all();
    send_cq().discard_completions_of(qp_num_);
    if (&recv_cq() != &send_cq()) recv_cq().discard_completions_of(qp_num_);
  }
  return 0;
}

int QueuePair::query(int mask, QpAttributes& out) {
  control::Message request = pd_->context().new_request(MessageType::QueryQp);
  request.words[field::kQueryQpHandle] = handle_;
  request.words[field::kQueryQpMask] = static_cast<std::uint32_t>(mask);
  control::Message reply;
  if (const int error = pd_->context().call(request, {}, reply); error != 0) return error;
  out = {};
  if (const int error = take_qp_attributes(reply, out); error != 0) return error;
  out.cap = init_.cap;
  state_ = out.state;
  return 0;
}

}  // namespace rrdma::verbs::client
