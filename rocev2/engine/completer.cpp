// The completer (IBA ch. 9, requester side): takes ACKs, NAKs, RDMA READ responses and atomic
// ACKs, turns them into completions in posting order, and drives the requester's retries.
// ACKs are cumulative and a response implicitly acknowledges every earlier request
// (IBA 9.7.5.1.2); a response that skips an outstanding READ or atomic means that
// response was lost, so the READ / atomic is asked for again.
#include <algorithm>
#include <cstring>

#include "rocev2/engine/engine_impl.h"

namespace rrdma::rocev2 {

bool Engine::Impl::response_in_window(const Requester& r, Psn psn) const {
  return psn.distance_from(r.comp_psn) < r.high_psn.distance_from(r.comp_psn);
}

void Engine::Impl::on_response(Qp& qp, const TransportPacket& p, Instant now) {
  const OpcodeFlags f = opcode_info(p.bth.opcode).flags;
  if (!response_in_window(qp.req, p.bth.psn)) {
    ++counters_.ghost_responses;
    observe(qp, p.bth, PacketDecision::Ignored, "PSN outside the outstanding window");
    return;
  }
  if (f.has(OpcodeFlags::kReadResponse)) {
    keep_ack_timer_alive(qp, now);
    on_read_response(qp, p, now);
  } else if (f.has(OpcodeFlags::kAtomicAck)) {
    on_atomic_ack(qp, p, now);
  } else {
    switch (syndrome_kind(p.aeth->syndrome)) {
      case SyndromeKind::Ack: on_ack(qp, p, now); break;
      case SyndromeKind::RnrNak: on_rnr_nak(qp, p, now); break;
      case SyndromeKind::Nak: on_nak(qp, p, now); break;
      case SyndromeKind::Reserved:
        ++counters_.bad_header;
        observe(qp, p.bth, PacketDecision::Dropped, "reserved AETH syndrome");
        return;
    }
  }
  pump(qp, now);
}

// A READ response for an outstanding PSN shows the responder alive, whether or not it is
// the one awaited: the ACK timer starts again (rxe re-arms its retransmit timer after every
// batch of responses it takes, useful or not). On a loaded host the responses that answer
// a re-request can sit behind thousands of older ones, past the same gap, in the TAP's
// queue; a timer counting from the last useful response then expired while the answer was
// already on its way, spent a retry, and restarted the stream again: seven of those in a
// row ended an 8 MiB READ under 5% loss in RETRY_EXC_ERR (issue 27). A stream that stops
// (the responder died, or its last responses were lost) still times out a period later;
// one that keeps coming is bounded by the READ's length.
void Engine::Impl::keep_ack_timer_alive(Qp& qp, Instant now) {
  Requester& r = qp.req;
  r.read_response_heard = true;
  if (r.retransmit_deadline && !r.rnr_deadline) restart_ack_timer(qp, now);
}

// Completes, in order, every WQE wholly acknowledged by `last`. Stops at a READ or atomic
// whose response has not arrived: if `last` covers it, that response was lost.
Engine::Impl::AckStop Engine::Impl::ack_through(Qp& qp, Psn last, bool& progressed) {
  Requester& r = qp.req;
  while (!r.sq.empty()) {
    SendWqe& w = r.sq.front();
    if (!w.started) break;
    if (w.is_local()) {  // executed, and everything before it is complete now
      pop_front(qp, WcStatus::Success);
      continue;
    }
    if (last.before(w.last_psn())) {
      if (w.needs_response_data()) {
        return last.before(w.first_psn + w.responses_received) ? AckStop::Done : AckStop::MissingResponse;
      }
      if (!last.before(w.first_psn) && r.comp_psn.before(last + 1)) {
        r.comp_psn = last + 1;
        progressed = true;
      }
      return AckStop::Done;
    }
    if (w.needs_response_data()) return AckStop::MissingResponse;
    r.comp_psn = w.last_psn() + 1;
    pop_front(qp, WcStatus::Success);
    progressed = true;
  }
  return AckStop::Done;
}

// The responder is alive: restore the retry counters (IBA ch. 9 counts consecutive
// failures), pull the send point forward past what is acknowledged, restart the timer.
void Engine::Impl::after_progress(Qp& qp, Instant now) {
  Requester& r = qp.req;
  if (transmit_budget_ < kTransmitBudget) ++transmit_budget_;
  r.retries_left = qp.attr.retry_cnt;
  r.rnr_retries_left = qp.attr.rnr_retry;
  if (r.gap_retry_psn) note_answer_began(r);
  r.gap_retry_psn.reset();
  if (r.next_psn.before(r.comp_psn)) {
    r.next_send = 0;
    r.next_psn = r.comp_psn;
    if (!r.sq.empty() && r.sq.front().started) {
      SendWqe& w = r.sq.front();
      w.next_packet = r.comp_psn.distance_from(w.first_psn);
    }
  }
  // During an RNR wait the RNR timer alone decides when to send again.
  if (r.comp_psn == r.high_psn || r.rnr_deadline) r.retransmit_deadline.reset();
  else restart_ack_timer(qp, now);
}

void Engine::Impl::pop_front(Qp& qp, WcStatus status) {
  Requester& r = qp.req;
  const SendWqe& w = r.sq.front();
  if (w.started && w.holds_responder_resource()) --r.rd_atomic_in_flight;
  complete_send(qp, w, status);
  r.sq.pop_front();
  if (r.next_send > 0) --r.next_send;
}

void Engine::Impl::fail_front(Qp& qp, WcStatus status, std::string_view cause) {
  if (!qp.req.sq.empty()) pop_front(qp, status);
  enter_error(qp, cause, std::nullopt);
}

// Ask again for the first missing response of the READ / atomic at the front, once per gap:
// the responses past the same gap that the responder sent before it had the new request
// keep coming, with rising PSNs, and must not trigger more retries. The answer starts again
// at the gap, so a response at a PSN below one already seen past it means the answer has
// begun without the missing response (lost again, or the request was, after a timeout):
// ask again at once, a retry like any other. Only a clear sign counts: this READ's own
// response right after the gap, when its responses had already reached kReorderMargin
// further. The answers to later requests, resent behind the READ, come in any PSN order,
// and a response merely reordered or duplicated on the way is behind the others too (the
// simulation's reordering link found both, each spending retries). `seen` is the PSN that
// showed the gap (a response's, or an ACK's + 1).
// The request itself may be lost too; the responses past the gap then go on to the end of
// the READ (and keep the ACK timer alive: keep_ack_timer_alive). So once more of them than
// an answer usually trails by have come (twice the estimate, and at least
// kMinLateResponses), it is asked for again, without spending a retry (the responder is
// answering; nothing says it failed), and the estimate doubles, so that a requester merely
// behind its queue does not ask again and again (each request restarts the answer).
void Engine::Impl::retry_missing_response(Qp& qp, Psn seen, Instant now) {
  Requester& r = qp.req;
  const SendWqe& w = r.sq.front();
  const Psn from = w.first_psn + w.responses_received;
  bool spend_retry = true;
  const bool own = w.contains(seen);  // a response of this READ, not of a later request
  if (r.gap_retry_psn && *r.gap_retry_psn == from) {
    if (own && seen == from + 1 && seen.before(r.gap_seen_psn) &&
        r.gap_seen_psn.distance_from(seen) >= kReorderMargin) {
      note_answer_began(r);
    } else {
      if (own && r.gap_seen_psn.before(seen)) r.gap_seen_psn = seen;
      if (++r.gap_late <= 2 * r.late_estimate + kMinLateResponses) return;
      r.late_estimate = 2 * r.late_estimate + kMinLateResponses;
      spend_retry = false;
    }
  }
  if (spend_retry && r.retries_left == 0) {
    fail_front(qp, WcStatus::RetryExcErr, "transport retry counter exceeded");
    return;
  }
  if (spend_retry) --r.retries_left;
  r.gap_retry_psn = from;
  r.gap_seen_psn = own ? seen : from;
  r.gap_late = 0;
  retransmit_from(qp, from, now, "response missing");
}

// The answer to a re-request began (its first response arrived, or one past it did): the
// responses that came past the gap meanwhile are what an answer trails by. The estimate
// follows a larger count at once and a smaller one by an eighth at a time.
void Engine::Impl::note_answer_began(Requester& r) {
  r.late_estimate = std::max(r.gap_late, r.late_estimate - r.late_estimate / 8);
}

// Takes the acknowledgement of everything through `last` that every response carries. False
// when a READ / atomic response before `last` is missing (it has been asked for again): the
// rest of the response must then be left alone.
bool Engine::Impl::acknowledge_through(Qp& qp, Psn last, Instant now) {
  bool progressed = false;
  const AckStop stop = ack_through(qp, last, progressed);
  if (progressed) after_progress(qp, now);
  if (stop == AckStop::Done) return true;
  retry_missing_response(qp, last + 1, now);
  return false;
}

void Engine::Impl::on_ack(Qp& qp, const TransportPacket& p, Instant now) {
  observe(qp, p.bth, PacketDecision::AckReceived, "ACK");
  acknowledge_through(qp, p.bth.psn, now);
}

// RNR NAK (IBA ch. 9): the responder had no receive WQE. Wait the time it asked for, then
// resend from the NAKed PSN; rnr_retry 7 means forever (the IBA RNR retry counter).
void Engine::Impl::on_rnr_nak(Qp& qp, const TransportPacket& p, Instant now) {
  ++counters_.rnr_naks_received;
  observe(qp, p.bth, PacketDecision::NakReceived, "RNR NAK");
  Requester& r = qp.req;
  if (!acknowledge_through(qp, p.bth.psn - 1, now)) return;
  if (r.sq.empty() || !r.sq.front().contains(p.bth.psn)) return;
  if (r.rnr_retries_left == 0) {
    fail_front(qp, WcStatus::RnrRetryExcErr, "RNR retry counter exceeded");
    return;
  }
  if (qp.attr.rnr_retry != 7) --r.rnr_retries_left;
  r.rnr_deadline = now + rnr_delay(syndrome_value(p.aeth->syndrome));
  r.rnr_resume_psn = p.bth.psn;
  r.retransmit_deadline.reset();
}

namespace {

WcStatus status_for_nak(std::uint8_t code) {
  switch (static_cast<NakCode>(code)) {
    case NakCode::InvalidRequest: return WcStatus::RemInvReqErr;
    case NakCode::RemoteAccessError: return WcStatus::RemAccessErr;
    case NakCode::RemoteOperationalError: return WcStatus::RemOpErr;
    default: return WcStatus::BadRespErr;  // reserved codes; RD is not supported
  }
}

// Whether `op` is the right READ response opcode for packet k of n.
bool read_response_fits(Opcode op, std::uint32_t k, std::uint32_t n) { return op == read_response_opcode(k, n); }

}  // namespace

void Engine::Impl::on_nak(Qp& qp, const TransportPacket& p, Instant now) {
  ++counters_.naks_received;
  observe(qp, p.bth, PacketDecision::NakReceived, "NAK");
  Requester& r = qp.req;
  // The NAK's PSN is the request it refers to; everything before it arrived (IBA 9.7.5.1.2).
  if (!acknowledge_through(qp, p.bth.psn - 1, now)) return;
  if (r.sq.empty() || !r.sq.front().contains(p.bth.psn)) return;
  const std::uint8_t code = syndrome_value(p.aeth->syndrome);
  if (code == static_cast<std::uint8_t>(NakCode::PsnSequenceError)) {
    // During an RNR wait the RNR timer decides when to resend (a peer may NAK the rest
    // of the burst that followed the RNR-NAKed packet).
    if (!r.rnr_deadline) retransmit_from(qp, p.bth.psn, now, "NAK PSN sequence error");
    return;
  }
  fail_front(qp, status_for_nak(code), "NAK from the responder");
}

void Engine::Impl::on_read_response(Qp& qp, const TransportPacket& p, Instant now) {
  Requester& r = qp.req;
  const Psn psn = p.bth.psn;
  if (!acknowledge_through(qp, psn - 1, now)) return;
  if (!r.sq.empty() && r.sq.front().empty_read_response() && r.sq.front().contains(psn)) {
    on_empty_read_response(qp, p, now);
    return;
  }
  if (r.sq.empty() || !r.sq.front().is_read() || !r.sq.front().contains(psn)) {
    ++counters_.ghost_responses;
    observe(qp, p.bth, PacketDecision::Ignored, "READ response for no outstanding READ");
    return;
  }
  SendWqe& w = r.sq.front();
  if (psn.before(w.first_psn + w.responses_received)) {
    observe(qp, p.bth, PacketDecision::Duplicate, "READ response already taken");
    return;
  }
  const std::uint32_t k = w.responses_received;
  const std::uint32_t mtu = qp.attr.path_mtu;
  const bool last = k + 1 == w.packets;
  const std::uint64_t offset = std::uint64_t{k} * mtu;
  const std::uint64_t want_size = last ? w.length - offset : mtu;
  // A re-requested READ is answered as a READ of its own, FIRST..LAST from the restart
  // point (IBA ch. 9), while late responses to the original request may still arrive:
  // accept the packet's place in either.
  const bool fits = read_response_fits(p.bth.opcode, k, w.packets) ||
                    (k >= w.read_restart && read_response_fits(p.bth.opcode, k - w.read_restart, w.packets - w.read_restart));
  if (!fits || p.payload.size() != want_size) {
    fail_front(qp, WcStatus::BadRespErr, "READ response out of order or of the wrong length");
    return;
  }
  if (!scatter(dma_, w.sges, offset, p.payload)) {
    fail_front(qp, WcStatus::LocProtErr, "local memory unwritable");
    return;
  }
  ++w.responses_received;
  r.comp_psn = psn + 1;
  observe(qp, p.bth, PacketDecision::Accepted, "READ response");
  if (last) pop_front(qp, WcStatus::Success);
  after_progress(qp, now);
}

// IBA 1.5 A19: FLUSH and ATOMIC_WRITE are answered by an RDMA READ response ONLY with no
// data (rxe: send_read_response_ack); anything else there is a bad response (rxe's
// completer fails the WQE with a fatal error; IBV_WC_BAD_RESP_ERR is ours for a malformed
// response, as for a READ response of the wrong length).
void Engine::Impl::on_empty_read_response(Qp& qp, const TransportPacket& p, Instant now) {
  if (p.bth.opcode != Opcode::RcReadResponseOnly || !p.payload.empty()) {
    fail_front(qp, WcStatus::BadRespErr, "FLUSH / ATOMIC_WRITE answered by a READ response with data");
    return;
  }
  observe(qp, p.bth, PacketDecision::Accepted, "empty READ response (FLUSH / ATOMIC_WRITE done)");
  acknowledge_through(qp, p.bth.psn, now);
}

void Engine::Impl::on_atomic_ack(Qp& qp, const TransportPacket& p, Instant now) {
  Requester& r = qp.req;
  const Psn psn = p.bth.psn;
  if (!acknowledge_through(qp, psn - 1, now)) return;
  if (r.sq.empty() || !r.sq.front().is_atomic() || !r.sq.front().contains(psn)) {
    ++counters_.ghost_responses;
    observe(qp, p.bth, PacketDecision::Ignored, "atomic ACK for no outstanding atomic");
    return;
  }
  SendWqe& w = r.sq.front();
  // The original value lands in the local buffer as a host-order 64-bit integer, as the
  // verbs API reads it (IBA ch. 9: the operand is a 64-bit integer in the responder's memory).
  std::uint8_t bytes[8];
  const std::uint64_t original = p.atomic_ack_eth->original_data;
  std::memcpy(bytes, &original, sizeof bytes);
  if (!scatter(dma_, w.sges, 0, bytes)) {
    fail_front(qp, WcStatus::LocProtErr, "local memory unwritable");
    return;
  }
  w.responses_received = 1;
  r.comp_psn = psn + 1;
  observe(qp, p.bth, PacketDecision::Accepted, "atomic ACK");
  pop_front(qp, WcStatus::Success);
  after_progress(qp, now);
}

}  // namespace rrdma::rocev2
