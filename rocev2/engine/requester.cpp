// The requester (IBA ch. 9): turns send WQEs into request packets,
// segments at the path MTU, sets the AckReq bit, keeps to max_rd_atomic and the fence, and
// goes back N on a timeout, a PSN-sequence NAK or the end of an RNR wait.
#include <algorithm>
#include <cstring>
#include <limits>

#include "rocev2/engine/engine_impl.h"

namespace rrdma::rocev2 {

// Each RC QP may have rxe's 128 PSNs unacknowledged while few QPs send; when many do, they
// share kTransmitBudget packets (at least kMinUnackedPsns each). The QPs sending are those
// with an ACK timeout (or RNR wait) set, counted by the timer queue in O(1). Without the
// share, 256 QPs of ib_write_bw -q 256 put 32768 packets (128 MB) in flight at once; the
// receiver needed longer than the 67 ms ACK timeout to drain them, every QP timed out and
// went back N, and the duplicates took the rest: 19 MB/s against 556 with one QP
// (docs/TRANSPORT.md, "Sharing the wire").
// Up to 16 QPs sending, each keeps rxe's 128 whatever the budget (so that one QP timing out
// on a dead peer does not shrink the windows of a few healthy ones); beyond, the share. The
// budget is a target, not a cap: a QP that started while fewer QPs sent keeps what it has in
// flight until its ACKs come back.
std::uint32_t Engine::Impl::unacked_limit() const {
  const std::size_t sending = std::max<std::size_t>(timers_.size(), 1);
  if (sending * kMaxUnackedPsns <= kTransmitBudget) return kMaxUnackedPsns;
  return static_cast<std::uint32_t>(std::clamp<std::size_t>(transmit_budget_ / sending, kMinUnackedPsns, kMaxUnackedPsns));
}

// Transmit room (EngineHost::transmit_room), in packets, capped to a PSN count.
std::uint32_t Engine::Impl::transmit_room_packets() const {
  return static_cast<std::uint32_t>(std::min<std::size_t>(host_.transmit_room(), std::numeric_limits<std::uint32_t>::max()));
}

// The host's transmit queue is full: the requester stops where it is (nothing is built, no
// PSN taken) and advance() pumps it again once there is room.
void Engine::Impl::wait_for_room(Qp& qp) {
  ++counters_.transmit_room_waits;
  if (!qp.room_wait.is_linked()) room_waiting_.push_back(qp);
}

// Oldest waiter first, each until the room runs out again (it then waits at the back) or
// it has nothing more to send. A QP that left RTS meanwhile sends nothing and drops out.
void Engine::Impl::resume_waiting_for_room(Instant now) {
  while (!room_waiting_.empty() && has_transmit_room()) {
    Qp& qp = room_waiting_.front();
    room_waiting_.pop_front();
    pump(qp, now);
  }
}

// A packet in flight asked for an ACK: its ACK will reopen the window.
bool Engine::Impl::ack_requested_in_flight(const Requester& r) {
  return r.ack_req_psn && !r.ack_req_psn->before(r.comp_psn) && r.ack_req_psn->before(r.next_psn);
}

void Engine::Impl::cut_transmit_budget(Instant now) {
  if (now < next_budget_cut_) return;
  next_budget_cut_ = now + kBudgetCutInterval;
  transmit_budget_ = std::max(kMinTransmitBudget, transmit_budget_ / 2);
  ++counters_.transmit_budget_cuts;
}

void Engine::Impl::pump(Qp& qp, Instant now) {
  const ReadAheadScope read_ahead(read_ahead_);
  Requester& r = qp.req;
  const QpState s = qp.attr.state;
  if (s != QpState::Rts && s != QpState::Sqd) return;
  if (r.rnr_deadline) return;  // waiting out an RNR NAK (IBA ch. 9)
  while (r.next_send < r.sq.size()) {
    // Before the WQE starts (its SGEs resolved, its READ counted): a WQE waiting for room
    // has not begun, and SQD does not start it.
    if (!has_transmit_room()) {
      wait_for_room(qp);
      break;
    }
    SendWqe& w = r.sq[r.next_send];
    if (!w.started) {
      if (s == QpState::Sqd) break;  // SQD: finish what has started, start nothing new
      if (qp.type == QpType::Rc && !may_start(qp, w)) break;
      if (w.is_local() ? !run_local(qp, w) : !start_wqe(qp, w)) return;
    }
    if (w.is_local()) {
      ++r.next_send;
      complete_local_front(qp);
      continue;
    }
    if (qp.type == QpType::Rc && r.next_psn.distance_from(r.comp_psn) >= unacked_limit()) {
      // The window is full. If no packet in flight asked for an ACK (the limit shrank below
      // what went out earlier: more QPs sending, or a budget cut), nothing would reopen it
      // but the ACK timeout (and with timeout 0, nothing at all): one more packet goes, and
      // asks for the ACK.
      if (ack_requested_in_flight(r)) break;
      r.force_ack_req = true;
    }
    if (!send_next_packet(qp, w, now)) return;
    if (!w.fully_sent()) continue;
    ++r.next_send;
    if (qp.type != QpType::Rc) {
      // UC and UD have no acknowledgements: a WQE is done once its last packet is out.
      complete_send(qp, r.sq.front(), WcStatus::Success);
      r.sq.pop_front();
      --r.next_send;
      r.comp_psn = r.next_psn;
    }
  }
  report_drained(qp);
}

// The fence (IBA ch. 10): a fenced WQE waits until every earlier READ and atomic has
// completed; and (IBA ch. 9) never more READs and atomics outstanding than max_rd_atomic.
bool Engine::Impl::may_start(const Qp& qp, const SendWqe& w) const {
  const Requester& r = qp.req;
  if ((w.wr.flags & send_flags::kFence) && r.rd_atomic_in_flight > 0) return false;
  // FLUSH and ATOMIC_WRITE hold a responder resource too (IBA 1.5 A19: the responder keeps
  // them to answer a duplicate; rxe checks max_dest_rd_atomic for ATOMIC_WRITE).
  const std::uint32_t limit = std::max<std::uint32_t>(1, qp.attr.max_rd_atomic);
  return !w.holds_responder_resource() || r.rd_atomic_in_flight < limit;
}

// A local operation (BIND_MW, LOCAL_INV) runs when the requester reaches it, so after every
// earlier WQE has been sent (IBA 10.6.7.2: binds are ordered with the other WRs of the send
// queue); it completes once every earlier WQE has (complete_local_front). Failure completes
// it in error and moves the QP to ERR, as rxe does (rxe_req.c: IB_WC_MW_BIND_ERR for a bind,
// IB_WC_LOC_QP_OP_ERR for an invalidation, then the QP errors).
bool Engine::Impl::run_local(Qp& qp, SendWqe& w) {
  Requester& r = qp.req;
  const bool bind = w.wr.opcode == WrOpcode::BindMw;
  const bool done = bind ? mrs_.bind_mw({w.wr.bind, qp.pd, qp.qpn}) : mrs_.invalidate_local(w.wr.invalidate_rkey, qp.pd);
  if (!done) {
    complete_send(qp, w, bind ? WcStatus::MwBindErr : WcStatus::LocQpOpErr);
    r.sq.erase(r.sq.begin() + static_cast<std::ptrdiff_t>(r.next_send));
    enter_error(qp, bind ? "memory window bind failed" : "local invalidate failed", std::nullopt);
    return false;
  }
  w.started = true;
  w.length = 0;
  w.packets = 0;  // no PSN: contains() is false for every PSN, fully_sent() is true
  w.first_psn = r.next_psn;
  w.next_packet = 0;
  return true;
}

// Local operations at the front of the send queue have nothing left to wait for.
void Engine::Impl::complete_local_front(Qp& qp) {
  Requester& r = qp.req;
  while (!r.sq.empty() && r.sq.front().is_local() && r.sq.front().started) pop_front(qp, WcStatus::Success);
}

// Resolves the WQE's local memory and assigns its PSNs. False if it failed (it has then
// been completed in error and the QP moved to the error state).
bool Engine::Impl::start_wqe(Qp& qp, SendWqe& w) {
  Requester& r = qp.req;
  const std::uint32_t mtu = qp.attr.path_mtu;
  WcStatus failure = WcStatus::Success;
  if (w.empty_read_response()) {
    // No local memory: ATOMIC_WRITE's 8 bytes travel in the WQE, FLUSH carries no payload.
    w.length = w.wr.opcode == WrOpcode::AtomicWrite ? 8 : 0;
  } else if (w.wr.flags & send_flags::kInline && !w.needs_response_data()) {
    w.length = w.wr.inline_data.size();
  } else {
    const LocalCheck c = resolve_sges(mrs_, qp.pd, w.wr.sg_list, w.needs_response_data(), w.sges);
    if (c == LocalCheck::ProtectionError) failure = WcStatus::LocProtErr;
    if (c == LocalCheck::LengthError) failure = WcStatus::LocLenErr;
    w.length = total_length(w.sges);
  }
  if (failure == WcStatus::Success) {
    if (w.is_atomic() && w.length < 8) failure = WcStatus::LocLenErr;
    if (qp.type == QpType::Ud && w.length > mtu) failure = WcStatus::LocLenErr;
  }
  if (failure != WcStatus::Success) {
    complete_send(qp, w, failure);
    r.sq.erase(r.sq.begin() + static_cast<std::ptrdiff_t>(r.next_send));
    // IBA ch. 10 QP states: a local send error puts RC in ERR, but UC and UD only in SQE, where the
    // receive side keeps working.
    if (qp.type == QpType::Rc) enter_error(qp, "local error in a send WQE", std::nullopt);
    else enter_send_queue_error(qp, "local error in a send WQE");
    return false;
  }
  w.packets = w.is_atomic() || w.empty_read_response() ? 1 : packets_for(w.length, mtu);
  w.started = true;
  w.first_psn = r.next_psn;
  w.next_packet = 0;
  if (w.holds_responder_resource()) ++r.rd_atomic_in_flight;
  return true;
}

bool Engine::Impl::send_next_packet(Qp& qp, SendWqe& w, Instant now) {
  Requester& r = qp.req;
  TransportPacket p;
  p.bth.dest_qp = qp.type == QpType::Ud ? w.wr.ud_remote_qpn : qp.attr.dest_qpn;
  p.bth.psn = r.next_psn;
  const bool retransmission = r.next_psn.before(r.high_psn);
  if (w.is_read()) {
    send_read_request(qp, w, p);
  } else if (w.is_atomic()) {
    send_atomic_request(qp, w, p);
  } else if (w.empty_read_response()) {
    send_placement_request(qp, w, p);
  } else if (!fill_segment(qp, w, p)) {
    return false;
  }
  if (qp.type == QpType::Rc) {
    if (std::exchange(r.force_ack_req, false)) {
      p.bth.ack_req = true;
      r.packets_since_ack_req = 0;
    }
    if (p.bth.ack_req) r.ack_req_psn = p.bth.psn;
  }
  if (r.high_psn.before(r.next_psn)) r.high_psn = r.next_psn;
  const Destination to = qp.type == QpType::Ud ? Destination{w.wr.ud_dest_ip, w.wr.ud_traffic_class} : path_of(qp);
  emit(qp, to, p, retransmission ? PacketDecision::Retransmitted : PacketDecision::Sent,
       retransmission ? r.retransmit_reason : opcode_info(p.bth.opcode).name);
  if (retransmission) ++counters_.retransmits;
  if (qp.type == QpType::Rc && !r.retransmit_deadline) restart_ack_timer(qp, now);
  return true;
}

// A READ request asks for the rest of the message from next_packet on: a retry after a
// lost response re-requests only the missing part, at the PSN of the first missing
// response packet (IBA ch. 9: the responder treats it as a duplicate and re-reads).
void Engine::Impl::send_read_request(Qp& qp, SendWqe& w, TransportPacket& p) {
  const std::uint64_t offset = std::uint64_t{w.next_packet} * qp.attr.path_mtu;
  p.bth.opcode = wr_opcode_info(w.wr.opcode).only;
  p.bth.ack_req = true;
  w.read_restart = w.next_packet;
  p.reth = Reth{w.wr.remote_addr + offset, w.wr.rkey, static_cast<std::uint32_t>(w.length - std::min(offset, w.length))};
  qp.req.next_psn += w.packets - w.next_packet;
  w.next_packet = w.packets;
}

void Engine::Impl::send_atomic_request(Qp& qp, SendWqe& w, TransportPacket& p) {
  const bool cas = w.wr.opcode == WrOpcode::AtomicCmpSwp;
  p.bth.opcode = wr_opcode_info(w.wr.opcode).only;
  p.bth.ack_req = true;
  p.atomic_eth = AtomicEth{w.wr.remote_addr, w.wr.rkey, cas ? w.wr.swap : w.wr.compare_add,
                           cas ? w.wr.compare_add : 0};
  ++qp.req.next_psn;
  w.next_packet = 1;
}

// IBA 1.5 Annex A19, as rxe builds them: ATOMIC_WRITE is a RETH (length 8) and the 8 bytes;
// FLUSH is a FETH (placement type, selectivity level) and a RETH (the range), no payload.
// Both ask for an answer (AckReq), which is an empty RDMA READ response.
void Engine::Impl::send_placement_request(Qp& qp, SendWqe& w, TransportPacket& p) {
  p.bth.opcode = wr_opcode_info(w.wr.opcode).only;
  p.bth.ack_req = true;
  if (w.wr.opcode == WrOpcode::AtomicWrite) {
    p.reth = Reth{w.wr.remote_addr, w.wr.rkey, 8};
    std::memcpy(scratch_.data(), &w.wr.compare_add, 8);
    p.payload = std::span<const std::uint8_t>(scratch_.data(), 8);
  } else {
    p.feth = Feth{flush::feth_bits(w.wr.flush_type, w.wr.flush_level)};
    p.reth = Reth{w.wr.remote_addr, w.wr.rkey, w.wr.flush_length};
  }
  ++qp.req.next_psn;
  w.next_packet = 1;
}

// One SEND or WRITE segment: every packet but the last carries exactly one path MTU
// (IBA ch. 9); the RETH rides on the first, ImmDt and IETH on the last.
bool Engine::Impl::fill_segment(Qp& qp, SendWqe& w, TransportPacket& p) {
  Requester& r = qp.req;
  const std::uint32_t mtu = qp.attr.path_mtu;
  const std::uint64_t offset = std::uint64_t{w.next_packet} * mtu;
  const std::size_t size = static_cast<std::size_t>(std::min<std::uint64_t>(mtu, w.length - offset));
  const bool first = w.next_packet == 0;
  const bool last = w.next_packet + 1 >= w.packets;
  const WrOpcodeInfo& op = wr_opcode_info(w.wr.opcode);
  p.bth.opcode = op.request_opcode(qp.type, first, last);
  if (qp.type == QpType::Ud) {
    // IBA ch. 10 (Q_Keys): a WR Q_Key with the high bit set means "use the QP's own Q_Key".
    const Qkey qkey = (w.wr.ud_remote_qkey.value() & 0x8000'0000u) ? qp.attr.qkey : w.wr.ud_remote_qkey;
    p.deth = Deth{qkey, qp.qpn};
  } else if (first && op.reth) {
    p.reth = Reth{w.wr.remote_addr, w.wr.rkey, static_cast<std::uint32_t>(w.length)};
  }
  if (last && op.imm) p.imm = ImmDt{w.wr.imm_data};
  if (last && op.ieth) p.ieth = Ieth{w.wr.invalidate_rkey};
  p.bth.solicited = last && (w.wr.flags & send_flags::kSolicited) != 0;
  if (qp.type == QpType::Rc) {
    // rxe's policy, seen in every capture: AckReq on the last packet of a message, and
    // at least every 64 packets within a long one; and at least once per unacknowledged-PSN
    // window, so that a QP whose window is smaller (many QPs sending) is never stalled with
    // no ACK asked for.
    p.bth.ack_req = last || ++r.packets_since_ack_req >= std::min(kPacketsPerAckReq, unacked_limit());
    if (p.bth.ack_req) r.packets_since_ack_req = 0;
  }
  if (w.wr.flags & send_flags::kInline) {
    std::span<std::uint8_t> payload(scratch_.data(), size);
    // An empty inline payload has no data(): memcpy from a null pointer is UB even for 0 bytes.
    if (size != 0) std::memcpy(payload.data(), w.wr.inline_data.data() + offset, size);
    p.payload = payload;
  } else if (size != 0) {
    std::optional<std::span<const std::uint8_t>> payload = read_ahead_.find({&qp, w.serial, false}, offset, size);
    if (!payload) payload = read_payload(qp, w, offset, size);
    if (!payload) {
      // The memory behind a checked SGE vanished (its process is gone): nothing sensible
      // remains for this QP. The WQE fails first, then the error state flushes the rest.
      complete_send(qp, w, WcStatus::LocProtErr);
      r.sq.erase(r.sq.begin() + static_cast<std::ptrdiff_t>(r.next_send));
      enter_error(qp, "local memory unreadable", std::nullopt);
      return false;
    }
    p.payload = *payload;
  }
  ++r.next_psn;
  ++w.next_packet;
  return true;
}

// The bytes of `w` from `offset` on that this pump() will certainly send, for the
// read-ahead: the rest of the message, on RC only as many packets as the unacknowledged-PSN
// window still admits, and at most kReadAheadBytes. Never less than the packet itself.
std::size_t Engine::Impl::read_ahead_window(const Qp& qp, const SendWqe& w, std::uint64_t offset,
                                            std::size_t size) const {
  std::uint64_t window = std::min<std::uint64_t>(w.length - offset, kReadAheadBytes);
  window = std::min<std::uint64_t>(window, std::uint64_t{transmit_room_packets()} * qp.attr.path_mtu);
  if (qp.type == QpType::Rc) {
    const std::uint32_t limit = unacked_limit();
    const std::uint32_t in_flight = std::min(qp.req.next_psn.distance_from(qp.req.comp_psn), limit);
    window = std::min<std::uint64_t>(window, std::uint64_t{limit - in_flight} * qp.attr.path_mtu);
  }
  return static_cast<std::size_t>(std::max<std::uint64_t>(window, size));
}

// Fills the read-ahead with `w` from `offset` on (read_ahead_window) and, when that reaches
// the end of `w`, with the WQEs after it that this pump will send too; one Dma gather reads
// them all. If that gather fails, `w`'s own window is read alone, so that unreadable memory
// fails the WQE it belongs to, when its turn comes, and no other.
std::optional<std::span<const std::uint8_t>> Engine::Impl::read_payload(Qp& qp, const SendWqe& w,
                                                                        std::uint64_t offset, std::size_t size) {
  const ReadAhead::Owner owner{&qp, w.serial, false};
  const std::size_t window = read_ahead_window(qp, w, offset, size);
  read_ahead_.clear();
  gather_pieces_.clear();
  read_ahead_.add(owner, offset, window);  // fits: the read-ahead is empty, window <= its size
  append_pieces(w.sges, offset, window, gather_pieces_);
  const std::size_t own_pieces = gather_pieces_.size();
  if (offset + window == w.length) {
    // The WQEs after `w` fit in what room is left once `w`'s packets have gone.
    const std::uint32_t room = transmit_room_packets();
    std::uint32_t psns_left = room - std::min(room, w.packets - w.next_packet);
    if (qp.type == QpType::Rc) {
      const std::uint32_t limit = unacked_limit();
      const std::uint32_t in_flight = std::min(qp.req.next_psn.distance_from(qp.req.comp_psn), limit);
      psns_left = std::min(psns_left, limit - in_flight - std::min(limit - in_flight, w.packets - w.next_packet));
    }
    read_ahead_following(qp, psns_left);
  }
  bool read = dma_.read_gather(gather_pieces_, read_ahead_.filled());
  if (!read && read_ahead_.segments() > 1) {
    read_ahead_.keep_first(1);
    read = dma_.read_gather(std::span(gather_pieces_).first(own_pieces), read_ahead_.filled());
  }
  if (!read) {
    read_ahead_.clear();
    return std::nullopt;
  }
  return read_ahead_.find(owner, offset, size);
}

// Adds to the read-ahead the WQEs after the one being sent that pump() will send next, as
// long as each fits whole (in the read-ahead's room and, on RC, in `psns_left` PSNs): SENDs
// and WRITEs from registered memory that may start. It stops at the first that does not
// qualify; a WQE whose SGEs do not resolve is left for start_wqe() to fail.
void Engine::Impl::read_ahead_following(Qp& qp, std::uint32_t psns_left) {
  const Requester& r = qp.req;
  for (std::size_t i = r.next_send + 1; i < r.sq.size() && read_ahead_.room() > 0; ++i) {
    const SendWqe& next = r.sq[i];
    if (next.holds_responder_resource() || next.is_local() || (next.wr.flags & send_flags::kInline)) return;
    const ResolvedSges* sges = &next.sges;
    if (next.started) {
      if (next.next_packet != 0) return;
    } else {
      if (qp.attr.state == QpState::Sqd || (qp.type == QpType::Rc && !may_start(qp, next))) return;
      if (resolve_sges(mrs_, qp.pd, next.wr.sg_list, false, following_sges_) != LocalCheck::Ok) return;
      sges = &following_sges_;
    }
    const std::uint64_t length = total_length(*sges);
    if (qp.type == QpType::Ud && length > qp.attr.path_mtu) return;
    const std::uint32_t packets = packets_for(length, qp.attr.path_mtu);
    if (packets > psns_left || length > read_ahead_.room()) return;
    psns_left -= packets;
    if (length == 0) continue;
    const std::size_t n = static_cast<std::size_t>(length);
    read_ahead_.add({&qp, next.serial, false}, 0, n);  // fits: room checked above
    append_pieces(*sges, 0, n, gather_pieces_);
  }
}

// Go back N (IBA ch. 9, requester retry): resend every packet from `psn` on, with the same PSNs.
void Engine::Impl::retransmit_from(Qp& qp, Psn psn, Instant now, std::string_view reason) {
  Requester& r = qp.req;
  std::size_t i = 0;
  while (i < r.sq.size() && r.sq[i].started && !r.sq[i].contains(psn)) ++i;
  if (i >= r.sq.size() || !r.sq[i].started) {
    pump(qp, now);
    return;
  }
  for (std::size_t j = i + 1; j < r.sq.size() && r.sq[j].started; ++j) r.sq[j].next_packet = 0;
  SendWqe& w = r.sq[i];
  w.next_packet = psn.distance_from(w.first_psn);
  if (w.is_read()) w.responses_received = std::min(w.responses_received, w.next_packet);
  r.next_send = i;
  r.next_psn = psn;
  r.retransmit_reason = reason;
  restart_ack_timer(qp, now);
  pump(qp, now);
}

// IBA ch. 9: no response within the local ACK timeout. retry_cnt bounds the number of
// attempts; the counter is restored whenever the responder shows progress.
// A READ response taken since the last timeout (each restarts the timer) means the period
// that just ended began with the responder answering: the silence may be ours, a daemon
// descheduled on a loaded host with the next responses waiting in its TAP queue (seen in
// verbs_loss, issue 27: 19 timeouts, the last eight in a row, no silence of the peer's). The
// timer is armed once more, with nothing sent and no retry spent; a second period with
// nothing at all retries as before.
void Engine::Impl::on_timeout(Qp& qp, Instant now) {
  Requester& r = qp.req;
  r.retransmit_deadline.reset();
  if (r.comp_psn == r.high_psn || r.sq.empty()) return;
  ++counters_.timeouts;
  if (std::exchange(r.read_response_heard, false)) {
    restart_ack_timer(qp, now);
    return;
  }
  cut_transmit_budget(now);
  if (r.retries_left == 0) {
    fail_front(qp, WcStatus::RetryExcErr, "transport retry counter exceeded");
    return;
  }
  --r.retries_left;
  // After a silence, whatever arrives answers this request: the first response past a gap
  // in it shows a new gap, to be asked for at once.
  r.gap_retry_psn.reset();
  retransmit_from(qp, r.comp_psn, now, "local ACK timeout");
}

void Engine::Impl::on_rnr_wait_over(Qp& qp, Instant now) {
  Requester& r = qp.req;
  r.rnr_deadline.reset();
  std::optional<Psn> resume = std::exchange(r.rnr_resume_psn, std::nullopt);
  // ACKs that arrived during the wait may have covered the NAKed PSN already.
  if (resume && resume->before(r.comp_psn)) resume = r.comp_psn;
  if (resume && r.comp_psn != r.high_psn) retransmit_from(qp, *resume, now, "RNR wait over");
  else pump(qp, now);
}

void Engine::Impl::restart_ack_timer(Qp& qp, Instant now) {
  const std::optional<Duration> t = ack_timeout(qp.attr.timeout);
  if (t) qp.req.retransmit_deadline = now + *t;
  else qp.req.retransmit_deadline.reset();
}

// IBA ch. 10 (SQD state): in SQD, once nothing is outstanding, the QP reports "send queue drained".
void Engine::Impl::report_drained(Qp& qp) {
  Requester& r = qp.req;
  if (qp.attr.state != QpState::Sqd || r.drain_reported) return;
  const bool outstanding = std::any_of(r.sq.begin(), r.sq.end(), [](const SendWqe& w) { return w.started; });
  if (outstanding) return;
  r.drain_reported = true;
  host_.async_event({qp.qpn, EventType::SqDrained});
}

}  // namespace rrdma::rocev2
