// The Nic's data path: doorbells, the SQ ring drained into the engine, receive queues over
// the RQ/SRQ rings, completions into CQ rings, async events into the context's event ring
// (docs/VERBS_DATAPATH.md). The engine's callbacks (EngineHost) must not call back into the
// engine, so whatever needs the engine (moving a QP to error, pumping its SQ ring) is noted
// on the QP and done by settle() after the engine returns (docs/ARCHITECTURE.md, "Deferred
// work in the Nic").
#include <infiniband/verbs.h>
#include <sys/uio.h>

#include <utility>

#include "rocev2/encap.h"
#include "rocev2/opcode.h"
#include "verbs/device/device_caps.h"
#include "verbs/device/nic.h"
#include "verbs/device/nic_state.h"
#include "verbs/device/wqe_translate.h"

namespace rrdma::verbs {
namespace {

// settle() stops after this many rounds of deferred work (a round settles the QPs listed
// when it starts); the rest waits for the next turn of the loop (next_deadline() says
// "now"), so one busy client cannot hold the loop.
constexpr int kSettleRounds = 8;

// Clears a doorbell eventfd. preadv2(RWF_NOWAIT), not read(): the client shares the open
// file description and may have cleared O_NONBLOCK on it (docs/VERBS_DATAPATH.md).
void clear_eventfd(int fd) {
  std::uint64_t count = 0;
  iovec piece{&count, sizeof(count)};
  [[maybe_unused]] const ssize_t n = ::preadv2(fd, &piece, 1, -1, RWF_NOWAIT);
}

rocev2::WcOpcode completion_opcode(std::uint8_t wr_opcode) {
  return rocev2::wr_opcode_info(static_cast<rocev2::WrOpcode>(wr_opcode)).completion;
}
Cqe error_cqe(rocev2::Qpn qpn, std::uint64_t wr_id, rocev2::WcStatus status, rocev2::WcOpcode opcode) {
  rocev2::Completion c;
  c.qpn = qpn;
  c.wr_id = wr_id;
  c.status = status;
  c.opcode = opcode;
  return to_cqe(c);
}

rocev2::WcStatus status_for(WqeError error) {
  return error == WqeError::MessageTooLong ? rocev2::WcStatus::LocLenErr : rocev2::WcStatus::LocQpOpErr;
}

}  // namespace

// ------------------------------------------------------------------ receive queue adapter

const rocev2::RecvWr* Nic::RingReceiveQueue::front() const {
  if (head_) return &*head_;
  if (failed_) return nullptr;
  RecvWqe wqe{};
  switch (ring_.try_pop_value(wqe)) {
    case PopResult::Empty: return nullptr;
    case PopResult::Broken: fail(); return nullptr;
    case PopResult::Popped: break;
  }
  const WqeCheck check = check_recv_wqe(wqe);
  if (check.error != WqeError::None) {
    refused_ = wqe;
    refusal_ = check.error;
    fail();
    return nullptr;
  }
  // Built in place: moving a RecvWr in (its small_vector's inline buffer) makes GCC 12 warn
  // that the copy may read past that buffer (-Wstringop-overread), since it cannot see that
  // an inline buffer holds at most its 2 elements.
  fill_recv_wr(wqe, head_.emplace());
  return &*head_;
}

void Nic::RingReceiveQueue::pop() {
  head_.reset();
  on_pop_();
}

std::size_t Nic::RingReceiveQueue::size() const {
  return (head_ ? 1 : 0) + (failed_ ? 0 : ring_.available());
}

void Nic::RingReceiveQueue::fail() const {
  if (failed_) return;
  failed_ = true;
  on_failure_();
}

// ------------------------------------------------------------------ send path

void Nic::on_doorbell(Handle handle, Instant now) {
  auto it = qps_.find(handle);
  if (it == qps_.end()) return;
  now_ = now;
  ++counters_.doorbells;
  clear_eventfd(it->second->doorbell.fd());
  pump(*it->second, now);
  settle(now);
}

// Moves WQEs from the SQ ring into the engine, then lets the engine send them all at once
// (one gather reads their payloads). WQEs posted before RTS wait in the ring; in the error
// state the engine flushes them.
void Nic::pump(Qp& qp, Instant now) {
  const rocev2::QpState state = engine_state(qp);
  if (state == rocev2::QpState::Err) flush_receive_ring(qp);
  if (state == rocev2::QpState::Reset || state == rocev2::QpState::Init || state == rocev2::QpState::Rtr) return;
  if (qp.sq_broken || qp.refused) return;
  take_send_ring(qp);
  engine_.start_sends(qp.qpn, now);
}

// Takes WQEs until the ring is empty (then asks for the doorbell), the engine is full (one
// WQE is held), a WQE is refused, or the budget is spent (then comes back later).
void Nic::take_send_ring(Qp& qp) {
  if (qp.held && !post_one(qp, *qp.held)) return;
  for (std::uint32_t budget = qp.sq->capacity(); budget > 0; --budget) {
    SendWqe wqe{};
    const PopResult popped = qp.sq->try_pop_value(wqe);
    if (popped == PopResult::Empty) {
      if (qp.sq->request_doorbell()) return;
      continue;
    }
    if (popped == PopResult::Broken) {
      ++counters_.broken_rings;
      qp.sq_broken = true;
      fail_later(qp);
      return;
    }
    const WqeCheck check = check_send_wqe(wqe, qp.type);
    if (check.error != WqeError::None) {
      refuse_wqe(qp, wqe, status_for(check.error));
      return;
    }
    rocev2::SendWr wr = to_send_wr(wqe);
    if (qp.type == rocev2::QpType::Ud) {
      // The AH is looked up in the client's own table: another client's handle is refused.
      auto ah = ahs_.find(wqe.ah_handle);
      if (ah == ahs_.end() || ah->second->client != qp.client) {
        refuse_wqe(qp, wqe, rocev2::WcStatus::LocQpOpErr);
        return;
      }
      wr.ud_dest_ip = ah->second->dest;
      wr.ud_traffic_class = ah->second->traffic_class;
    }
    ++counters_.send_wqes;
    if (!post_one(qp, std::move(wr))) return;
  }
  pump_later(qp);
}

// False when the engine has no room (or the QP left the states that send): the WQE waits.
bool Nic::post_one(Qp& qp, rocev2::SendWr wr) {
  switch (engine_.queue_send(qp.qpn, wr)) {
    case rocev2::VerbResult::Ok: qp.held.reset(); return true;
    case rocev2::VerbResult::QueueFull:
    case rocev2::VerbResult::InvalidState:
    case rocev2::VerbResult::NoSuchQp: qp.held = std::move(wr); return false;
    case rocev2::VerbResult::InvalidArgument: break;
  }
  qp.held.reset();
  ++counters_.bad_send_wqes;
  qp.refused_status = rocev2::WcStatus::LocQpOpErr;
  qp.refused = SendWqe{};
  qp.refused->wr_id = wr.wr_id;
  qp.refused->opcode = static_cast<std::uint8_t>(wr.opcode);
  fail_later(qp);
  return false;
}

// A malformed WQE completes in error and takes the QP with it, as a NIC does (abi.h).
void Nic::refuse_wqe(Qp& qp, const SendWqe& wqe, rocev2::WcStatus status) {
  ++counters_.bad_send_wqes;
  qp.refused = wqe;
  qp.refused_status = status;
  fail_later(qp);
}

// In the error state receive WQEs complete at once, flushed (IBA ch. 10). The engine
// flushed what it had; this takes what the client posted since.
void Nic::flush_receive_ring(Qp& qp) {
  if (qp.srq != 0) return;
  auto cq = cqs_.find(qp.recv_cq);
  RecvWqe wqe{};
  PopResult popped;
  while ((popped = qp.rq->try_pop_value(wqe)) == PopResult::Popped) {
    if (cq != cqs_.end()) {
      push_completion(*cq->second, error_cqe(qp.qpn, wqe.wr_id, rocev2::WcStatus::WrFlushErr, rocev2::WcOpcode::Recv),
                      true);
    }
  }
  if (popped == PopResult::Empty) qp.rq->request_doorbell();
}

// For settle(): the QP's SQ ring is pumped (after a send completion, a change of state, a
// budget spent), or before that the QP goes to ERR (fail_later).
void Nic::pump_later(Qp& qp) {
  if (qp.queued) return;
  qp.queued = true;
  qps_to_settle_.push_back(qp.handle);
}

void Nic::fail_later(Qp& qp) {
  qp.must_fail = true;
  pump_later(qp);
}

// A bad WQE, a broken ring or an overrun CQ: the QP goes to ERR with IBV_EVENT_QP_FATAL, and
// the refused WQE completes in error.
void Nic::fail_qp(Qp& qp, Instant now) {
  if (engine_state(qp) != rocev2::QpState::Err) {
    rocev2::QpAttr attr;
    attr.state = rocev2::QpState::Err;
    engine_.modify_qp(qp.qpn, attr, rocev2::qp_attr::kState, now);
    post_event(qp.context, IBV_EVENT_QP_FATAL, qp.handle);
  }
  if (qp.refused) {
    if (auto cq = cqs_.find(qp.send_cq); cq != cqs_.end()) {
      push_completion(*cq->second,
                      error_cqe(qp.qpn, qp.refused->wr_id, qp.refused_status, completion_opcode(qp.refused->opcode)),
                      true);
    }
    qp.refused.reset();
  }
  if (qp.rq_queue && qp.rq_queue->refused() && !qp.rq_failure_reported) {
    qp.rq_failure_reported = true;
    ++counters_.bad_recv_wqes;
    if (auto cq = cqs_.find(qp.recv_cq); cq != cqs_.end()) {
      push_completion(*cq->second,
                      error_cqe(qp.qpn, qp.rq_queue->refused()->wr_id, status_for(qp.rq_queue->refusal()),
                                rocev2::WcOpcode::Recv),
                      true);
    }
  }
}

// ------------------------------------------------------------------ completions and events

void Nic::push_completion(Cq& cq, const Cqe& cqe, bool solicited) {
  if (cq.error) {
    ++counters_.completions_dropped;
    return;
  }
  switch (cq.ring->try_push_value(cqe)) {
    case PushResult::Pushed:
      ++counters_.completions;
      cq.solicited = cq.solicited || solicited;
      if (!cq.unpublished) {
        cq.unpublished = true;
        cqs_to_publish_.push_back(cq.handle);
      }
      return;
    case PushResult::Full: ++counters_.cq_overruns; break;
    case PushResult::Broken: ++counters_.broken_rings; break;
  }
  // A CQ overrun (or a corrupted CQ ring): IBV_EVENT_CQ_ERR, and every QP that completes into
  // the CQ goes to the error state with IBV_EVENT_QP_FATAL, as rxe does.
  ++counters_.completions_dropped;
  cq.error = true;
  post_event(cq.context, IBV_EVENT_CQ_ERR, cq.handle);
  for (auto& [handle, qp] : qps_)
    if (qp->send_cq == cq.handle || qp->recv_cq == cq.handle) fail_later(*qp);
}

void Nic::post_event(Handle context, std::uint32_t type, std::uint64_t element) {
  auto it = contexts_.find(context);
  if (it == contexts_.end()) return;
  AsyncEventEntry entry{};
  entry.event_type = type;
  entry.element = element;
  if (it->second->events->try_push_value(entry) != PushResult::Pushed) {
    ++counters_.async_events_dropped;
    return;
  }
  ++counters_.async_events;
  if (!it->second->unpublished) {
    it->second->unpublished = true;
    contexts_to_publish_.push_back(context);
  }
}

// ibv_modify_srq(3): the event fires once when the WQEs left drop below the limit, then
// the limit must be armed again.
void Nic::check_srq_limit(Srq& srq) {
  if (!srq.armed || srq.ring->available() >= srq.limit) return;
  srq.armed = false;
  ++counters_.srq_limit_events;
  post_event(srq.context, IBV_EVENT_SRQ_LIMIT_REACHED, srq.handle);
}

void Nic::srq_failed(Srq& srq) {
  ++counters_.bad_recv_wqes;
  if (!srq.error_reported) post_event(srq.context, IBV_EVENT_SRQ_ERR, srq.handle);
  srq.error_reported = true;
  for (const auto& [handle, qp] : qps_)
    if (qp->srq == srq.handle) fail_later(*qp);
}

void Nic::settle(Instant now) {
  run_deferred(now);
  publish();
}

// Each QP listed goes to ERR if it must, then is pumped. What that lists (a QP whose pump
// spent its budget, the QPs of a CQ that overran meanwhile) waits for the next round.
void Nic::run_deferred(Instant now) {
  for (int round = 0; round < kSettleRounds && !qps_to_settle_.empty(); ++round) {
    const std::size_t listed = qps_to_settle_.size();
    for (std::size_t i = 0; i < listed; ++i) {
      auto it = qps_.find(qps_to_settle_[i]);
      if (it == qps_.end()) continue;
      Qp& qp = *it->second;
      qp.queued = false;
      if (std::exchange(qp.must_fail, false)) fail_qp(qp, now);
      pump(qp, now);
    }
    qps_to_settle_.erase(qps_to_settle_.begin(), qps_to_settle_.begin() + static_cast<std::ptrdiff_t>(listed));
  }
  work_left_ = !qps_to_settle_.empty();
}

// Makes the pushed CQEs and events visible and signals whoever asked: a CQ's channel when
// its arm matches (publish_completions), a context's async fd after every batch of events.
void Nic::publish() {
  // What a completion or event announces must be in memory before anyone can see it.
  if (!cqs_to_publish_.empty() || !contexts_to_publish_.empty()) dma_.flush();
  for (Handle handle : cqs_to_publish_) {
    auto it = cqs_.find(handle);
    if (it == cqs_.end()) continue;
    Cq& cq = *it->second;
    cq.unpublished = false;
    if (cq.ring->publish_completions(std::exchange(cq.solicited, false))) {
      ++counters_.cq_notifications;
      watcher_.signal(cq.notify.fd());
    }
  }
  cqs_to_publish_.clear();
  for (Handle handle : contexts_to_publish_) {
    auto it = contexts_.find(handle);
    if (it == contexts_.end()) continue;
    it->second->unpublished = false;
    it->second->events->publish();
    watcher_.signal(it->second->event_fd.fd());
  }
  contexts_to_publish_.clear();
}

// ------------------------------------------------------------------ the engine's host

void Nic::send_packet(const rocev2::OutgoingPacket& out) {
  // An ACK (or any response) tells the peer its data has landed.
  dma_.flush();
  // Not if a write of this QP was just lost: the engine NAKs it (fail_lost_writes) once
  // this engine call has returned, and until then the QP says nothing.
  if (dma_.write_lost_for(out.src_qpn.value())) {
    ++counters_.sends_after_lost_write;
    return;
  }
  const Qp* qp = qp_by_qpn(out.src_qpn);
  // Nor may it say so when the data was lost because the client's address space is gone (it
  // exec'd or exited): the client is evicted at the next advance(), and until then its QPs
  // say nothing, as they will say nothing after. The peer sees a QP that stopped answering.
  if (qp != nullptr && memory_lost(qp->client)) {
    ++counters_.sends_of_lost_clients;
    return;
  }
  port_.send(out, qp ? qp->udp_source_port : rocev2::udp_source_port_datagram(out.src_qpn), now_);
}

void Nic::complete(const rocev2::Completion& completion) {
  Qp* qp = qp_by_qpn(completion.qpn);
  auto cq = qp ? cqs_.find(completion.send_queue ? qp->send_cq : qp->recv_cq) : cqs_.end();
  if (cq == cqs_.end()) {
    ++counters_.completions_dropped;
    return;
  }
  push_completion(*cq->second, to_cqe(completion),
                  completion.solicited || completion.status != rocev2::WcStatus::Success);
  // A send completion frees room in the engine: work may wait in the ring or be held.
  if (completion.send_queue) pump_later(*qp);
}

void Nic::async_event(const rocev2::AsyncEvent& event) {
  if (const Qp* qp = qp_by_qpn(event.qpn)) post_event(qp->context, static_cast<std::uint32_t>(event.type), qp->handle);
}

void Nic::on_state_change(rocev2::Qpn qpn, rocev2::QpState from, rocev2::QpState to, std::string_view cause) {
  if (extra_observer_ != nullptr) extra_observer_->on_state_change(qpn, from, to, cause);
  Qp* qp = qp_by_qpn(qpn);
  if (qp == nullptr) return;
  registry_.set_qp_state(qp->client, qp->handle, static_cast<ibv_qp_state>(to));
  if (to == rocev2::QpState::Err) pump_later(*qp);
}

Nic::Qp* Nic::qp_by_qpn(rocev2::Qpn qpn) {
  auto it = qp_by_qpn_.find(qpn.value());
  if (it == qp_by_qpn_.end()) return nullptr;
  auto qp = qps_.find(it->second);
  return qp == qps_.end() ? nullptr : qp->second.get();
}

rocev2::QpState Nic::engine_state(const Qp& qp) const {
  const auto attr = engine_.query_qp(qp.qpn);
  return attr ? attr->state : rocev2::QpState::Err;
}

// ------------------------------------------------------------------ the loop's entries

void Nic::receive(const rocev2::TransportPacket& packet, const rocev2::PacketSource& from, Instant now) {
  now_ = now;
  // The writes a request queues are answered for by its QP at its PSN (fail_lost_writes). A
  // READ response's payload has no one to NAK: a loss there is counted, not answered
  // (docs/VERBS_MEMORY.md).
  const bool request = rocev2::opcode_info(packet.bth.opcode).flags.has(rocev2::OpcodeFlags::kRequest);
  if (request) dma_.set_origin(WriteOrigin{packet.bth.dest_qp.value(), packet.bth.psn.value()});
  engine_.receive(packet, from, now);
  dma_.set_origin(std::nullopt);
  run_deferred(now);
  if (!batched_frames_) publish();
}

// The batch's writes land before its ACKs leave: a write lost now is NAKed instead, and a
// client whose process is gone loses its QPs before their held ACKs could cover its writes.
void Nic::end_of_frames() {
  dma_.flush();
  fail_lost_writes();
  if (dma_.any_lost()) evict_lost_clients({}, now_);
  engine_.release_acks();
  publish();
  dma_.flush();
}

// Queued writes that flush() lost (the owner unmapped or write-protected the range after the
// packet was accepted, or it was never writable: ProcessDma checks the owner's maps at
// flush): their QPs NAK at the packet's PSN and go to ERR (Engine::write_not_placed). A QP
// whose owner has exited says nothing: it is about to be destroyed with its owner, and rxe
// (whose pages stay pinned until then) never NAKs here either (Engine::Impl::unreachable).
void Nic::fail_lost_writes() {
  for (const WriteOrigin& origin : dma_.take_lost_origins()) {
    const Qp* qp = qp_by_qpn(rocev2::Qpn(origin.qpn));
    if (qp != nullptr && memory_lost(qp->client)) {
      ++counters_.lost_writes_of_gone_owners;
      continue;
    }
    engine_.write_not_placed(rocev2::Qpn(origin.qpn), rocev2::Psn(origin.psn));
  }
}

void Nic::advance(Instant now) {
  now_ = now;
  engine_.advance(now);
  fail_lost_writes();
  settle(now);
  evict_lost_clients(check_address_spaces(now), now);
}

std::optional<Instant> Nic::next_deadline() const {
  // A client whose memory a transfer found gone loses its resources at the next advance().
  if (work_left_ || dma_.any_lost()) return now_;
  std::optional<Instant> deadline = engine_.next_deadline();
  if (!clients_.empty() && (!deadline || next_address_check_ < *deadline)) deadline = next_address_check_;
  return deadline;
}

void Nic::set_link(bool up, Instant now) {
  now_ = now;
  if (config_.link_up == up) return;
  config_.link_up = up;
  for (const auto& [handle, context] : contexts_)
    post_event(handle, up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR, caps::kPortNum);
  publish();
}

void Nic::set_address_and_mtu(stack::Ipv4Address address, int netdev_mtu, Instant now) {
  now_ = now;
  config_.netdev_mtu = netdev_mtu;
  if (config_.address == address) return;
  config_.address = address;
  for (const auto& [handle, context] : contexts_) post_event(handle, IBV_EVENT_GID_CHANGE, caps::kPortNum);
  publish();
}

}  // namespace rrdma::verbs
