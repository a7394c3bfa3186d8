// The engine's front: QP lifetime, the QP state machine (IBA ch. 10), validation of posted
// work, dispatch of received packets to responder or completer, and the timers.
#include "rocev2/engine/engine.h"

#include <algorithm>
#include <utility>

#include "rocev2/engine/engine_impl.h"

namespace rrdma::rocev2 {

std::string_view to_string(PacketDecision d) {
  switch (d) {
    case PacketDecision::Sent: return "sent";
    case PacketDecision::Retransmitted: return "retransmitted";
    case PacketDecision::Accepted: return "accepted";
    case PacketDecision::Duplicate: return "duplicate";
    case PacketDecision::OutOfSequenceNak: return "out of sequence, NAK sent";
    case PacketDecision::OutOfSequenceDrop: return "out of sequence, dropped";
    case PacketDecision::RnrNak: return "RNR NAK";
    case PacketDecision::InvalidRequestNak: return "NAK invalid request";
    case PacketDecision::AccessErrorNak: return "NAK remote access error";
    case PacketDecision::OperationalErrorNak: return "NAK remote operational error";
    case PacketDecision::AckReceived: return "ACK received";
    case PacketDecision::NakReceived: return "NAK received";
    case PacketDecision::Ignored: return "ignored";
    case PacketDecision::Dropped: return "dropped";
    case PacketDecision::UcMessageDropped: return "UC message dropped";
  }
  return "?";
}

std::string_view to_string(QpState s) { return name(s); }

Engine::Engine(EngineHost& host, MrTable& mrs, Dma& dma, EngineObserver* observer)
    : impl_(std::make_unique<Impl>(host, mrs, dma, observer)) {}
Engine::~Engine() = default;
std::optional<Qpn> Engine::create_qp(const QpInit& init) { return impl_->create_qp(init); }
VerbResult Engine::destroy_qp(Qpn qpn) { return impl_->destroy_qp(qpn); }
VerbResult Engine::modify_qp(Qpn qpn, const QpAttr& attr, std::uint32_t mask, Instant now) {
  return impl_->modify_qp(qpn, attr, mask, now);
}
std::optional<QpAttr> Engine::query_qp(Qpn qpn) const { return impl_->query_qp(qpn); }
VerbResult Engine::post_send(Qpn qpn, SendWr wr, Instant now) { return impl_->post_send(qpn, std::move(wr), now); }
VerbResult Engine::queue_send(Qpn qpn, SendWr wr) { return impl_->queue_send(qpn, std::move(wr)); }
void Engine::start_sends(Qpn qpn, Instant now) { impl_->start_sends(qpn, now); }
VerbResult Engine::post_recv(Qpn qpn, RecvWr wr) { return impl_->post_recv(qpn, std::move(wr)); }
void Engine::receive(const TransportPacket& packet, const PacketSource& from, Instant now) {
  impl_->receive(packet, from, now);
}
void Engine::advance(Instant now) { impl_->advance(now); }
void Engine::hold_acks(bool on) { impl_->hold_acks(on); }
void Engine::release_acks() { impl_->release_acks(); }
void Engine::write_not_placed(Qpn qpn, Psn psn) { impl_->write_not_placed(qpn, psn); }
std::optional<Instant> Engine::next_deadline() const { return impl_->next_deadline(); }
std::size_t Engine::deadlines_set() const { return impl_->deadlines_set(); }
const EngineCounters& Engine::counters() const { return impl_->counters(); }

Engine::Impl::Impl(EngineHost& host, MrTable& mrs, Dma& dma, EngineObserver* observer)
    : host_(host), mrs_(mrs), dma_(dma), observer_(observer ? observer : &default_observer_) {
  scratch_.resize(4096);
}

Qp* Engine::Impl::find(Qpn qpn) {
  auto it = qps_.find(qpn.value());
  return it == qps_.end() ? nullptr : it->second.get();
}

const Qp* Engine::Impl::find(Qpn qpn) const {
  auto it = qps_.find(qpn.value());
  return it == qps_.end() ? nullptr : it->second.get();
}

std::optional<Qpn> Engine::Impl::create_qp(const QpInit& init) {
  Qpn qpn;
  if (init.qpn) {
    qpn = *init.qpn;
    // QPN 0 and 1 are the SMI and GSI QPs (Annex A17.5.8, A17.6); 0xFFFFFF is the multicast QPN.
    if (qpn.value() < 2 || qpn.value() == 0xFF'FFFF || find(qpn)) return std::nullopt;
  } else {
    do {
      qpn = Qpn(next_qpn_);
      next_qpn_ = next_qpn_ + 1 >= 0xFF'FFFF ? 17 : next_qpn_ + 1;
    } while (find(qpn));
  }
  auto qp = std::make_unique<Qp>();
  qp->qpn = qpn;
  qp->type = init.type;
  qp->pd = init.pd;
  qp->sq_sig_all = init.sq_sig_all;
  qp->max_send_wr = init.max_send_wr;
  if (init.srq) {
    qp->rq = init.srq;
    qp->uses_srq = true;
  } else if (init.rq) {
    qp->rq = init.rq;
  } else {
    qp->own_rq = std::make_unique<FifoReceiveQueue>(init.max_recv_wr);
    qp->rq = qp->own_rq.get();
  }
  qp->req.retransmit_deadline.bind(timers_, *qp, TimerKind::AckTimeout);
  qp->req.rnr_deadline.bind(timers_, *qp, TimerKind::RnrWait);
  qps_.emplace(qpn.value(), std::move(qp));
  return qpn;
}

VerbResult Engine::Impl::destroy_qp(Qpn qpn) {
  return qps_.erase(qpn.value()) ? VerbResult::Ok : VerbResult::NoSuchQp;
}

namespace {

// The transitions of the IBA ch. 10 QP state diagram that a modify can ask for (RESET and ERR are
// reachable from every state).
bool transition_allowed(QpState from, QpState to) {
  if (to == QpState::Reset || to == QpState::Err) return true;
  switch (from) {
    case QpState::Reset: return to == QpState::Init;
    case QpState::Init: return to == QpState::Init || to == QpState::Rtr;
    case QpState::Rtr: return to == QpState::Rts;
    case QpState::Rts: return to == QpState::Rts || to == QpState::Sqd;
    case QpState::Sqd: return to == QpState::Sqd || to == QpState::Rts;
    case QpState::Sqe: return to == QpState::Rts;
    case QpState::Err: return false;
  }
  return false;
}

bool valid_mtu(std::uint32_t mtu) {
  return mtu == 256 || mtu == 512 || mtu == 1024 || mtu == 2048 || mtu == 4096;
}

bool attributes_valid(const QpAttr& a, std::uint32_t mask) {
  using namespace qp_attr;
  if ((mask & kPathMtu) && !valid_mtu(a.path_mtu)) return false;
  if ((mask & kTimeout) && a.timeout > 31) return false;
  if ((mask & kRetryCnt) && a.retry_cnt > 7) return false;
  if ((mask & kRnrRetry) && a.rnr_retry > 7) return false;
  if ((mask & kMinRnrTimer) && a.min_rnr_timer > 31) return false;
  return true;
}

void apply_attributes(QpAttr& to, const QpAttr& from, std::uint32_t mask) {
  using namespace qp_attr;
  if (mask & kPathMtu) to.path_mtu = from.path_mtu;
  if (mask & kTimeout) to.timeout = from.timeout;
  if (mask & kRetryCnt) to.retry_cnt = from.retry_cnt;
  if (mask & kRnrRetry) to.rnr_retry = from.rnr_retry;
  if (mask & kMinRnrTimer) to.min_rnr_timer = from.min_rnr_timer;
  if (mask & kMaxQpRdAtomic) to.max_rd_atomic = from.max_rd_atomic;
  if (mask & kMaxDestRdAtomic) to.max_dest_rd_atomic = from.max_dest_rd_atomic;
  if (mask & kSqPsn) to.sq_psn = from.sq_psn;
  if (mask & kRqPsn) to.rq_psn = from.rq_psn;
  if (mask & kDestQpn) to.dest_qpn = from.dest_qpn;
  if (mask & kQkey) to.qkey = from.qkey;
  if (mask & kAv) {
    to.dest_ip = from.dest_ip;
    to.traffic_class = from.traffic_class;
  }
  if (mask & kAccessFlags) to.access_flags = from.access_flags;
}

}  // namespace

VerbResult Engine::Impl::modify_qp(Qpn qpn, const QpAttr& attr, std::uint32_t mask, Instant now) {
  Qp* qp = find(qpn);
  if (!qp) return VerbResult::NoSuchQp;
  const QpState from = qp->attr.state;
  const QpState to = (mask & qp_attr::kState) ? attr.state : from;
  if ((mask & qp_attr::kState) && !transition_allowed(from, to)) return VerbResult::InvalidState;
  if (!attributes_valid(attr, mask)) return VerbResult::InvalidArgument;
  apply_attributes(qp->attr, attr, mask);
  if (mask & qp_attr::kRqPsn) qp->resp.expected_psn = qp->attr.rq_psn;
  if (mask & qp_attr::kSqPsn) {
    qp->req.next_psn = qp->req.high_psn = qp->req.comp_psn = qp->attr.sq_psn;
  }
  if (mask & qp_attr::kRetryCnt) qp->req.retries_left = qp->attr.retry_cnt;
  if (mask & qp_attr::kRnrRetry) qp->req.rnr_retries_left = qp->attr.rnr_retry;
  if (to == from) return VerbResult::Ok;
  if (to == QpState::Reset) {
    reset(*qp);
    set_state(*qp, to, "modify_qp");
    return VerbResult::Ok;
  }
  if (to == QpState::Err) {
    enter_error(*qp, "modify_qp", std::nullopt);
    return VerbResult::Ok;
  }
  set_state(*qp, to, "modify_qp");
  if (to == QpState::Sqd) qp->req.drain_reported = false;
  if (to == QpState::Rts || to == QpState::Sqd) pump(*qp, now);
  return VerbResult::Ok;
}

std::optional<QpAttr> Engine::Impl::query_qp(Qpn qpn) const {
  const Qp* qp = find(qpn);
  if (!qp) return std::nullopt;
  return qp->attr;
}

void Engine::Impl::set_state(Qp& qp, QpState to, std::string_view cause) {
  const QpState from = qp.attr.state;
  qp.attr.state = to;
  observer_->on_state_change(qp.qpn, from, to, cause);
}

void Engine::Impl::reset(Qp& qp) {
  end_read_stream(qp);
  if (qp.room_wait.is_linked()) qp.room_wait.unlink();
  qp.req = Requester{};
  qp.resp = Responder{};
  qp.req.retries_left = qp.attr.retry_cnt;
  qp.req.rnr_retries_left = qp.attr.rnr_retry;
  if (!qp.uses_srq)
    while (qp.rq->front()) qp.rq->pop();
}

// IBA ch. 10 / ch. 11: in the error state every outstanding WQE completes with
// "flushed in error", whether it asked for a completion or not.
void Engine::Impl::enter_error(Qp& qp, std::string_view cause, std::optional<EventType> event) {
  if (qp.attr.state == QpState::Err) return;
  set_state(qp, QpState::Err, cause);
  if (event) host_.async_event({qp.qpn, *event});
  flush(qp);
  if (qp.uses_srq) host_.async_event({qp.qpn, EventType::QpLastWqeReached});
}

void Engine::Impl::enter_send_queue_error(Qp& qp, std::string_view cause) {
  set_state(qp, QpState::Sqe, cause);
  flush_send_queue(qp);
}

void Engine::Impl::flush_send_queue(Qp& qp) {
  Requester& r = qp.req;
  while (!r.sq.empty()) {
    complete_send(qp, r.sq.front(), WcStatus::WrFlushErr);
    r.sq.pop_front();
  }
  r.next_send = 0;
  r.rd_atomic_in_flight = 0;
  r.comp_psn = r.high_psn = r.next_psn;
  r.retransmit_deadline.reset();
  r.rnr_deadline.reset();
  r.rnr_resume_psn.reset();
}

void Engine::Impl::flush(Qp& qp) {
  flush_send_queue(qp);
  Responder& s = qp.resp;
  if (s.in_progress == Responder::InProgress::Send || s.recv_held) {
    Completion c;
    c.wr_id = s.recv_wr_id;
    c.status = WcStatus::WrFlushErr;
    c.opcode = WcOpcode::Recv;
    complete_recv(qp, c);
  }
  s.in_progress = Responder::InProgress::None;
  s.recv_held = false;
  end_read_stream(qp);
  s.waiting.clear();
  if (qp.uses_srq) return;  // an SRQ's WQEs belong to no single QP
  while (const RecvWr* wr = qp.rq->front()) {
    Completion c;
    c.wr_id = wr->wr_id;
    c.status = WcStatus::WrFlushErr;
    c.opcode = WcOpcode::Recv;
    qp.rq->pop();
    complete_recv(qp, c);
  }
}

void Engine::Impl::complete_send(Qp& qp, const SendWqe& w, WcStatus status) {
  // IBA ch. 10 (completions): unsignaled WQEs complete silently, unless in error.
  if (status == WcStatus::Success && !w.signaled && !qp.sq_sig_all &&
      (w.wr.flags & send_flags::kSignaled) == 0)
    return;
  Completion c;
  c.qpn = qp.qpn;
  c.send_queue = true;
  c.wr_id = w.wr.wr_id;
  c.status = status;
  c.opcode = wr_opcode_info(w.wr.opcode).completion;
  // rxe reports a WQE's DMA length: 8 for atomics and ATOMIC_WRITE, a FLUSH's range length.
  c.byte_len = static_cast<std::uint32_t>(w.is_atomic() ? 8 : w.wr.opcode == WrOpcode::Flush ? w.wr.flush_length : w.length);
  observer_->on_completion(c);
  host_.complete(c);
}

void Engine::Impl::complete_recv(Qp& qp, Completion c) {
  c.qpn = qp.qpn;
  c.send_queue = false;
  observer_->on_completion(c);
  host_.complete(c);
}

void Engine::Impl::observe(const Qp& qp, const Bth& bth, PacketDecision d, std::string_view detail) {
  observer_->on_packet(qp.qpn, bth, d, detail);
}

void Engine::Impl::emit(Qp& qp, Destination to, const TransportPacket& p, PacketDecision d,
                        std::string_view detail) {
  host_.send_packet({to.ip, qp.qpn, p, to.traffic_class});
  ++counters_.packets_sent;
  observe(qp, p.bth, d, detail);
}

VerbResult Engine::Impl::post_send(Qpn qpn, SendWr wr, Instant now) {
  const VerbResult r = queue_send(qpn, std::move(wr));
  if (r == VerbResult::Ok) start_sends(qpn, now);
  return r;
}

void Engine::Impl::start_sends(Qpn qpn, Instant now) {
  if (Qp* qp = find(qpn)) pump(*qp, now);
}

VerbResult Engine::Impl::queue_send(Qpn qpn, SendWr wr) {
  Qp* qp = find(qpn);
  if (!qp) return VerbResult::NoSuchQp;
  const WrOpcodeInfo& op = wr_opcode_info(wr.opcode);
  if (!op.implemented || !op.allowed_on(qp->type)) return VerbResult::InvalidArgument;
  const QpState s = qp->attr.state;
  if (s == QpState::Reset || s == QpState::Init || s == QpState::Rtr) return VerbResult::InvalidState;
  if (qp->req.sq.size() >= qp->max_send_wr) return VerbResult::QueueFull;
  SendWqe w;
  w.wr = std::move(wr);
  w.serial = next_wqe_serial_++;
  w.signaled = qp->sq_sig_all || (w.wr.flags & send_flags::kSignaled) != 0;
  if (s == QpState::Err || s == QpState::Sqe) {
    // Work posted to a QP in error completes at once, flushed (IBA ch. 10).
    complete_send(*qp, w, WcStatus::WrFlushErr);
    return VerbResult::Ok;
  }
  qp->req.sq.push_back(std::move(w));
  return VerbResult::Ok;
}

VerbResult Engine::Impl::post_recv(Qpn qpn, RecvWr wr) {
  Qp* qp = find(qpn);
  if (!qp) return VerbResult::NoSuchQp;
  if (qp->uses_srq) return VerbResult::InvalidArgument;
  if (qp->attr.state == QpState::Reset) return VerbResult::InvalidState;
  if (qp->attr.state == QpState::Err) {
    Completion c;
    c.wr_id = wr.wr_id;
    c.status = WcStatus::WrFlushErr;
    c.opcode = WcOpcode::Recv;
    complete_recv(*qp, c);
    return VerbResult::Ok;
  }
  return qp->rq->push(std::move(wr)) ? VerbResult::Ok : VerbResult::QueueFull;
}

bool Engine::Impl::headers_present(const TransportPacket& p, OpcodeFlags f) const {
  using F = OpcodeFlags;
  return (!f.has(F::kDeth) || p.deth) && (!f.has(F::kReth) || p.reth) &&
         (!f.has(F::kAtomicEth) || p.atomic_eth) && (!f.has(F::kAeth) || p.aeth) &&
         (!f.has(F::kAtomicAckEth) || p.atomic_ack_eth) && (!f.has(F::kImm) || p.imm) &&
         (!f.has(F::kIeth) || p.ieth);
}

namespace {

bool transport_matches(QpType type, OpcodeFlags f) {
  switch (type) {
    case QpType::Rc: return f.has(OpcodeFlags::kRc);
    case QpType::Uc: return f.has(OpcodeFlags::kUc);
    case QpType::Ud: return f.has(OpcodeFlags::kUd);
  }
  return false;
}

}  // namespace

void Engine::Impl::receive(const TransportPacket& p, const PacketSource& from, Instant now) {
  last_now_ = now;
  ++counters_.packets_received;
  const OpcodeFlags f = opcode_info(p.bth.opcode).flags;
  if (!f.has(OpcodeFlags::kValid)) {
    ++counters_.bad_opcode;
    return;
  }
  // Annex A17.9.3: a CNP asks the sender to slow down. No congestion control yet: count it.
  if (f.has(OpcodeFlags::kCnp)) {
    ++counters_.cnp_received;
    return;
  }
  Qp* qp = find(p.bth.dest_qp);
  if (!qp) {
    ++counters_.unknown_qpn;
    return;
  }
  if (!transport_matches(qp->type, f)) {
    ++counters_.bad_opcode;
    observe(*qp, p.bth, PacketDecision::Dropped, "opcode not valid for the QP type");
    return;
  }
  if (!headers_present(p, f)) {
    ++counters_.bad_header;
    observe(*qp, p.bth, PacketDecision::Dropped, "missing extension header");
    return;
  }
  if (f.has(OpcodeFlags::kRequest)) {
    const QpState s = qp->attr.state;
    if (s == QpState::Reset || s == QpState::Init || s == QpState::Err) {
      ++counters_.wrong_state;
      observe(*qp, p.bth, PacketDecision::Dropped, "QP cannot receive in this state");
      return;
    }
    on_request(*qp, p, from);
    return;
  }
  const QpState s = qp->attr.state;
  if (qp->type != QpType::Rc || (s != QpState::Rts && s != QpState::Sqd && s != QpState::Sqe)) {
    ++counters_.wrong_state;
    observe(*qp, p.bth, PacketDecision::Dropped, "no requester to take a response");
    return;
  }
  on_response(*qp, p, now);
}

// Only the QPs with an expired deadline or a READ being answered are visited: the cost does
// not grow with idle QPs (rocev2/engine/timers.h).
void Engine::Impl::advance(Instant now) {
  last_now_ = now;
  run_expired_timers(now);
  const bool stepped = !streaming_.empty();
  step_read_streams();
  resume_waiting_for_room(now);
  // Requests that waited behind a finished READ ran here, outside the caller's batch: the
  // ACKs they owe go now.
  if (stepped && hold_acks_) release_acks();
}

// The expired deadlines are collected first: their handlers set and clear deadlines, which
// moves them in the queue. Each is checked again before it runs (an earlier handler of the
// same QP may have cleared or moved it).
void Engine::Impl::run_expired_timers(Instant now) {
  due_.clear();
  for (auto it = timers_.begin(); it != timers_.end() && **it <= now; ++it) due_.emplace_back(&it->owner(), it->kind());
  for (const auto& [qp, kind] : due_) {
    Requester& r = qp->req;
    if (kind == TimerKind::RnrWait) {
      if (r.rnr_deadline && *r.rnr_deadline <= now) on_rnr_wait_over(*qp, now);
    } else if (r.retransmit_deadline && *r.retransmit_deadline <= now) {
      on_timeout(*qp, now);
    }
  }
}

// One step of each READ being answered. A step that ends a stream may start the next one on
// the same QP (a READ that waited behind it): that one steps in the next call, as before.
// Round robin: a stream that had room to step goes to the back, so that when the room runs
// out the streams not served this time are first the next time (without it the first few
// long READs took every turn's room and later ones waited past their requesters' timeouts).
void Engine::Impl::step_read_streams() {
  stepping_.clear();
  streams_due_.reset();  // each stream left unfinished sets it again (step_read_stream)
  for (Qp& qp : streaming_) stepping_.push_back(&qp);
  for (Qp* qp : stepping_) {
    if (!qp->resp.read_stream) continue;
    if (!has_transmit_room()) break;  // the rest keep their places at the front
    const Verdict v = step_read_stream(*qp);
    if (v.kind != Verdict::Kind::Ok) {
      abort_read_stream(*qp, v);
    } else if (qp->streaming.is_linked()) {
      qp->streaming.unlink();
      streaming_.push_back(*qp);
    }
  }
}

std::optional<Instant> Engine::Impl::next_deadline() const {
  std::optional<Instant> earliest;
  if (!timers_.empty()) earliest = **timers_.begin();
  // A READ being answered, or a requester waiting for room, has work at once; with no room
  // at all, neither has: the host calls advance() when room returns (EngineHost::transmit_room).
  std::optional<Instant> more;
  if (has_transmit_room()) {
    if (!streaming_.empty()) more = streams_due_.value_or(last_now_);  // paced: when its pacer allows
    if (!room_waiting_.empty()) more = last_now_;
  }
  if (more && (!earliest || *more < *earliest)) earliest = *more;
  return earliest;
}

}  // namespace rrdma::rocev2
