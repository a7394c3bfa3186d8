// The responder (IBA ch. 9): checks each request's PSN, opcode sequence,
// length and access rights, executes it against memory, and answers: ACKs (coalesced, at
// AckReq), READ responses, atomic ACKs, NAKs and RNR NAKs. UC executes the same way but
// never answers; UD checks the Q_Key and fills the GRH area.
#include <algorithm>
#include <cstring>

#include "rocev2/engine/engine_impl.h"

namespace rrdma::rocev2 {

namespace {

Msn next(Msn m) { return Msn(m.value() + 1); }

// IBA ch. 9: a message carries at most 2^31 bytes.
constexpr std::uint64_t kMaxMessage = std::uint64_t{1} << 31;

}  // namespace

void Engine::Impl::on_request(Qp& qp, const TransportPacket& p, const PacketSource& from) {
  if (qp.type == QpType::Ud) {
    ud_request(qp, p, from);
    return;
  }
  if (!qp.resp.comm_established) {
    // IBA ch. 11 (async events): the first packet received in RTR raises "communication
    // established".
    qp.resp.comm_established = true;
    if (qp.attr.state == QpState::Rtr) host_.async_event({qp.qpn, EventType::CommEst});
  }
  if (qp.type == QpType::Rc) rc_request(qp, p);
  else uc_request(qp, p);
}

void Engine::Impl::rc_request(Qp& qp, const TransportPacket& p) {
  Responder& s = qp.resp;
  const Psn psn = p.bth.psn;
  if (s.read_stream) {
    // A request for the rest of the READ being answered replaces that rest, unless requests
    // that arrived before it still wait: they are answered first, in arrival order (the
    // requester asks again from its oldest gap, so a waiting re-request for an older READ
    // or atomic is what it needs next; answering the newer READ first would only be
    // thrown away).
    const ReadStream& r = *s.read_stream;
    const bool restarts = p.bth.opcode == Opcode::RcReadRequest && !psn.before(r.read_first) &&
                          psn.before(r.read_end) && s.waiting.empty();
    if (!restarts) {
      wait_behind_read(qp, p);
      return;
    }
  }
  if (psn.after(s.expected_psn)) {
    // Sequence-error NAK (IBA ch. 9; rxe: sent_psn_nak): a PSN beyond the expected one means
    // packets were lost. NAK once per gap with the expected PSN, then drop silently until
    // it arrives, so one loss costs one NAK and one go-back-N.
    ++counters_.out_of_sequence;
    if (s.nak_sent_for_gap) {
      observe(qp, p.bth, PacketDecision::OutOfSequenceDrop, "PSN gap already NAKed");
      return;
    }
    s.nak_sent_for_gap = true;
    ++counters_.naks_sent;
    observe(qp, p.bth, PacketDecision::OutOfSequenceNak, "PSN beyond the expected one");
    send_ack(qp, s.expected_psn, nak_syndrome(NakCode::PsnSequenceError), PacketDecision::Sent, "NAK PSN sequence error");
    return;
  }
  if (psn.before(s.expected_psn)) {
    ++counters_.duplicate_requests;
    rc_duplicate(qp, p);
    return;
  }
  s.nak_sent_for_gap = false;
  s.duplicate_acked = false;
  const Verdict v = execute(qp, p);
  switch (v.kind) {
    case Verdict::Kind::Ok: break;
    case Verdict::Kind::Rnr:
      // RNR NAK (IBA ch. 9): the NAK carries our minimum RNR timer; the PSN stays expected.
      ++counters_.rnr_naks_sent;
      // The rest of the burst behind this packet is now out of sequence; the RNR NAK
      // stands for the NAK of that gap, so that no sequence NAK cuts the RNR wait short.
      s.nak_sent_for_gap = true;
      observe(qp, p.bth, PacketDecision::RnrNak, v.why);
      send_ack(qp, psn, rnr_nak_syndrome(qp.attr.min_rnr_timer), PacketDecision::Sent, "RNR NAK");
      return;
    case Verdict::Kind::Nak: refuse(qp, p, v); return;
    case Verdict::Kind::Drop:
      if (s.read_stream) end_read_stream(qp);  // a READ whose first step found the owner gone
      observe(qp, p.bth, PacketDecision::Dropped, v.why);
      return;
  }
  const OpcodeFlags f = opcode_info(p.bth.opcode).flags;
  observe(qp, p.bth, PacketDecision::Accepted, opcode_info(p.bth.opcode).name);
  if (!f.has(OpcodeFlags::kSend) && !f.has(OpcodeFlags::kWrite)) return;  // answered already
  // IBA 9.7.5.1.2 allows coalescing: one ACK covers every earlier PSN. We answer AckReq and
  // otherwise at least every kPacketsPerAck packets; when ACKs are held, once per batch.
  ++s.packets_since_ack;
  if (!p.bth.ack_req && s.packets_since_ack < kPacketsPerAck) return;
  if (hold_acks_) owe_ack(qp, psn);
  else send_ack(qp, psn, ack_syndrome(), PacketDecision::Sent, "ACK");
}

void Engine::Impl::owe_ack(Qp& qp, Psn psn) {
  if (!qp.resp.held_ack) acks_held_.push_back(qp.qpn);
  qp.resp.held_ack = psn;
}

void Engine::Impl::hold_acks(bool on) {
  hold_acks_ = on;
  if (!on) release_acks();
}

void Engine::Impl::release_acks() {
  // send_ack() reaches the host only, never back into the engine: acks_held_ stays as it is.
  std::vector<Qpn> still_owed;
  for (const Qpn qpn : acks_held_) {
    Qp* qp = find(qpn);
    if (qp == nullptr || !qp->resp.held_ack) continue;  // destroyed, or answered since
    const QpState state = qp->attr.state;
    if (state == QpState::Reset || state == QpState::Err) continue;
    if (qp->resp.read_stream) {
      // Its ACK would pass the READ's PSNs; the READ's last response acknowledges as much.
      still_owed.push_back(qpn);
      continue;
    }
    // Everything received in order so far, not just the held PSN: a message that ended
    // after it without AckReq is covered too, and PSN and MSN describe the same point.
    send_ack(*qp, qp->resp.expected_psn - 1, ack_syndrome(), PacketDecision::Sent, "ACK");
  }
  acks_held_ = std::move(still_owed);
}

// A UC write that did not land is as lost as a UC packet that did not arrive: UC keeps no
// state to answer with, and its QP stays as it is.
void Engine::Impl::write_not_placed(Qpn qpn, Psn psn) {
  Qp* qp = find(qpn);
  if (qp == nullptr || qp->type != QpType::Rc) return;
  if (qp->attr.state == QpState::Reset || qp->attr.state == QpState::Err) return;
  Responder& s = qp->resp;
  s.held_ack.reset();
  ++counters_.writes_not_placed;
  ++counters_.naks_sent;
  send_ack(*qp, psn, nak_syndrome(NakCode::RemoteOperationalError), PacketDecision::Sent, "NAK write not placed");
  if (s.in_progress == Responder::InProgress::Send) {
    Completion c;
    c.wr_id = s.recv_wr_id;
    c.status = WcStatus::LocProtErr;
    c.opcode = WcOpcode::Recv;
    complete_recv(*qp, c);
  }
  s.in_progress = Responder::InProgress::None;
  enter_error(*qp, "a write was not placed", EventType::QpFatal);
}

// The responder sent a packet that acknowledges every PSN up to `last` (an ACK, a NAK's
// PSN - 1 and below, the last READ response, an atomic ACK): the count towards the next
// unrequested ACK restarts, and a held ACK it covers is no longer owed. A duplicate READ's
// responses carry old PSNs and cover nothing new.
void Engine::Impl::answered(Qp& qp, Psn last) {
  qp.resp.packets_since_ack = 0;
  if (qp.resp.held_ack && !last.before(*qp.resp.held_ack)) qp.resp.held_ack.reset();
}

// IBA ch. 9 duplicate rules: a duplicate request is answered again and never executed twice for its
// side effects: SEND/WRITE are re-ACKed (C9-105), a READ is read again (it has none), an
// atomic gets the result it had the first time from the replay cache.
void Engine::Impl::rc_duplicate(Qp& qp, const TransportPacket& p) {
  Responder& s = qp.resp;
  const OpcodeFlags f = opcode_info(p.bth.opcode).flags;
  if (f.has(OpcodeFlags::kSend) || f.has(OpcodeFlags::kWrite)) {
    // rxe re-ACKs every duplicate packet; we answer the first of a run (so that a resent
    // burst whose AckReq packets got lost still learns where we are) and each AckReq.
    if (!p.bth.ack_req && s.duplicate_acked) {
      observe(qp, p.bth, PacketDecision::Duplicate, "duplicate: already re-ACKed");
      return;
    }
    s.duplicate_acked = true;
    observe(qp, p.bth, PacketDecision::Duplicate, "duplicate: ACK again");
    send_ack(qp, s.expected_psn - 1, ack_syndrome(), PacketDecision::Sent, "ACK (duplicate)");
    return;
  }
  if (f.has(OpcodeFlags::kReadRequest)) {
    const Reth& reth = *p.reth;
    const std::uint32_t n = packets_for(reth.dma_length, qp.attr.path_mtu);
    if (reth.dma_length > kMaxMessage || !(p.bth.psn + (n - 1)).before(s.expected_psn) ||
        !remote_readable(qp, reth)) {
      observe(qp, p.bth, PacketDecision::Dropped, "duplicate READ does not fit a past one");
      return;
    }
    observe(qp, p.bth, PacketDecision::Duplicate,
            s.read_stream ? "duplicate READ: the READ being answered restarts here" : "duplicate READ: executed again");
    const Verdict v = start_read_stream(qp, reth, p.bth.psn, true);
    if (v.kind != Verdict::Kind::Ok) refuse(qp, p, v);
    return;
  }
  if (f.has(OpcodeFlags::kFlush) || f.has(OpcodeFlags::kAtomicWrite)) {
    // IBA 1.5 A19 (rxe: process_flush / atomic_write_reply with res->replay): answered
    // again, never executed again: a second ATOMIC_WRITE would overwrite what was stored
    // after the first.
    if (!recall(qp, p.bth.psn, ReplayEntry::Kind::EmptyReadResponse)) {
      observe(qp, p.bth, PacketDecision::Dropped, "duplicate FLUSH / ATOMIC_WRITE no longer remembered");
      return;
    }
    observe(qp, p.bth, PacketDecision::Duplicate, "duplicate FLUSH / ATOMIC_WRITE: answered again");
    send_empty_read_response(qp, p.bth.psn, true);
    return;
  }
  if (f.has(OpcodeFlags::kAtomic)) {
    const ReplayEntry* e = recall(qp, p.bth.psn, ReplayEntry::Kind::Atomic);
    if (!e) {
      observe(qp, p.bth, PacketDecision::Dropped, "duplicate atomic no longer in the replay cache");
      return;
    }
    observe(qp, p.bth, PacketDecision::Duplicate, "duplicate atomic: saved result sent again");
    send_atomic_ack(qp, p.bth.psn, e->original, true);
    return;
  }
  observe(qp, p.bth, PacketDecision::Dropped, "duplicate of an unsupported request");
}

namespace {

// The access:: bits a FLUSH of placement `type` needs (IBA 1.5 A19.4.1; rxe check_rkey).
std::uint32_t flush_access(std::uint8_t type) {
  return ((type & flush::kGlobal) ? access::kFlushGlobal : 0u) | ((type & flush::kPersistent) ? access::kFlushPersistent : 0u);
}

// IBA ch. 9 responder checks (rxe: check_qp_attr_access): the QP itself must allow the
// operation. ATOMIC_WRITE is a write; a FLUSH needs the QP's FLUSH access bit of each
// placement type it asks for (rxe checks qp_access_flags too, not only the MR's).
bool granted_by_qp(std::uint32_t granted, const TransportPacket& p, OpcodeFlags f) {
  if (f.has(OpcodeFlags::kReadRequest) && !(granted & access::kRemoteRead)) return false;
  if ((f.has(OpcodeFlags::kWrite) || f.has(OpcodeFlags::kAtomicWrite)) && !(granted & access::kRemoteWrite)) return false;
  if (f.has(OpcodeFlags::kAtomic) && !(granted & access::kRemoteAtomic)) return false;
  if (f.has(OpcodeFlags::kFlush)) {
    const std::uint32_t need = flush_access(flush::feth_type(p.feth->bits));
    if ((granted & need) != need) return false;
  }
  return true;
}

}  // namespace

Verdict Engine::Impl::execute(Qp& qp, const TransportPacket& p) {
  const OpcodeFlags f = opcode_info(p.bth.opcode).flags;
  if (Verdict v = check_sequence(qp, f); v.kind != Verdict::Kind::Ok) return v;
  if (!granted_by_qp(qp.attr.access_flags, p, f)) return Verdict::invalid_request("operation not enabled on the QP");
  if (Verdict v = check_length(qp, p, f); v.kind != Verdict::Kind::Ok) return v;
  if (f.has(OpcodeFlags::kSend)) return execute_send(qp, p, f);
  if (f.has(OpcodeFlags::kWrite)) return execute_write(qp, p, f);
  if (f.has(OpcodeFlags::kReadRequest)) return execute_read(qp, p);
  if (f.has(OpcodeFlags::kAtomic)) return execute_atomic(qp, p);
  if (f.has(OpcodeFlags::kAtomicWrite)) return execute_atomic_write(qp, p);
  if (f.has(OpcodeFlags::kFlush)) return execute_flush(qp, p);
  return Verdict::invalid_request("not a request this QP executes");
}

// IBA ch. 9 opcode sequence check: a message is FIRST MIDDLE* LAST or ONLY, never interleaved.
Verdict Engine::Impl::check_sequence(const Qp& qp, OpcodeFlags f) const {
  bool ok = false;
  switch (qp.resp.in_progress) {
    case Responder::InProgress::None: ok = f.has(OpcodeFlags::kStart); break;
    case Responder::InProgress::Send: ok = f.has(OpcodeFlags::kSend) && !f.has(OpcodeFlags::kStart); break;
    case Responder::InProgress::Write: ok = f.has(OpcodeFlags::kWrite) && !f.has(OpcodeFlags::kStart); break;
  }
  return ok ? Verdict::ok() : Verdict::invalid_request("opcode out of sequence");
}

// Every packet but the last of a message carries exactly one path MTU; the last carries
// 1..MTU bytes, an ONLY 0..MTU (IBA ch. 9, rxe: check_length).
Verdict Engine::Impl::check_length(const Qp& qp, const TransportPacket& p, OpcodeFlags f) const {
  if (!f.has(OpcodeFlags::kSend) && !f.has(OpcodeFlags::kWrite)) return Verdict::ok();
  const std::size_t size = p.payload.size();
  const std::size_t mtu = qp.attr.path_mtu;
  const bool start = f.has(OpcodeFlags::kStart);
  const bool end = f.has(OpcodeFlags::kEnd);
  bool ok;
  if (start && end) ok = size <= mtu;
  else if (!end) ok = size == mtu;
  else ok = size > 0 && size <= mtu;
  return ok ? Verdict::ok() : Verdict::invalid_request("payload length breaks the MTU rule");
}

// Takes the next receive WQE (or the one a dropped UC message left behind) for a message.
Verdict Engine::Impl::take_receive_wqe(Qp& qp) {
  Responder& s = qp.resp;
  LocalCheck c = LocalCheck::Ok;
  if (s.recv_held) {
    s.recv_held = false;
  } else {
    const RecvWr* wr = qp.rq->front();
    if (!wr) return Verdict::rnr();
    s.recv_wr_id = wr->wr_id;
    c = resolve_sges(mrs_, qp.pd, wr->sg_list, true, s.recv_sges);
    qp.rq->pop();
  }
  // The message owns the WQE from here on, even when refused: refuse() fails it.
  s.in_progress = Responder::InProgress::Send;
  s.recv_offset = 0;
  if (c != LocalCheck::Ok) {
    s.recv_sges.clear();
    return Verdict::operational_error("receive WQE's memory not accessible", WcStatus::LocProtErr);
  }
  return Verdict::ok();
}

Verdict Engine::Impl::execute_send(Qp& qp, const TransportPacket& p, OpcodeFlags f) {
  Responder& s = qp.resp;
  if (f.has(OpcodeFlags::kStart)) {
    if (Verdict v = take_receive_wqe(qp); v.kind != Verdict::Kind::Ok) return v;
  }
  if (s.recv_offset + p.payload.size() > total_length(s.recv_sges))
    return Verdict::invalid_request("message longer than the receive buffer", WcStatus::LocLenErr);
  if (!scatter(dma_, s.recv_sges, s.recv_offset, p.payload))
    return unreachable(s.recv_sges.front().mr, "receive buffer unwritable", WcStatus::LocProtErr);
  s.recv_offset += p.payload.size();
  s.expected_psn = p.bth.psn + 1;
  if (!f.has(OpcodeFlags::kEnd)) return Verdict::ok();
  Completion c;
  c.wr_id = s.recv_wr_id;
  c.opcode = WcOpcode::Recv;
  c.byte_len = static_cast<std::uint32_t>(s.recv_offset);
  c.solicited = p.bth.solicited;
  if (p.imm) {
    c.flags |= wc_flags::kWithImm;
    c.imm_data = p.imm->value;
  }
  if (p.ieth) {
    // IBA ch. 10 / ch. 9: SEND with Invalidate names an R_Key of our PD to retire.
    if (!mrs_.invalidate_rkey(p.ieth->rkey, qp.pd))
      return Verdict::invalid_request("R_Key cannot be invalidated");
    c.flags |= wc_flags::kWithInv;
    c.invalidated_rkey = p.ieth->rkey;
  }
  s.in_progress = Responder::InProgress::None;
  s.msn = next(s.msn);
  complete_recv(qp, c);
  return Verdict::ok();
}

Verdict Engine::Impl::execute_write(Qp& qp, const TransportPacket& p, OpcodeFlags f) {
  Responder& s = qp.resp;
  const bool with_imm = f.has(OpcodeFlags::kConsumesReceive);
  // A WRITE with immediate needs a receive WQE: look before writing, so that an RNR NAK
  // leaves no trace and the retried packet finds everything as it was.
  if (with_imm && !s.recv_held && !qp.rq->front()) return Verdict::rnr();
  if (f.has(OpcodeFlags::kStart)) {
    const Reth& reth = *p.reth;
    if (reth.dma_length > kMaxMessage) return Verdict::invalid_request("DMA length above 2^31");
    s.write_mr.reset();
    // A zero-length WRITE needs no valid R_Key (rxe check_rkey).
    if (reth.dma_length > 0) {
      s.write_mr = check_remote(mrs_, qp.pd, qp.qpn, reth.rkey, access::kRemoteWrite, reth.virtual_address, reth.dma_length);
      if (!s.write_mr) return Verdict::access_error("R_Key, PD, access or bounds check failed");
    }
    s.write_va = reth.virtual_address;
    s.write_remaining = s.write_total = reth.dma_length;
    s.in_progress = Responder::InProgress::Write;
  }
  const std::size_t size = p.payload.size();
  if (size > s.write_remaining || (f.has(OpcodeFlags::kEnd) && size != s.write_remaining))
    return Verdict::invalid_request("payload does not add up to the RETH length");
  if (size > 0 && !dma_.write(*s.write_mr, s.write_va, p.payload))
    return unreachable(*s.write_mr, "target memory unwritable", WcStatus::RemOpErr);
  s.write_va += size;
  s.write_remaining -= size;
  s.expected_psn = p.bth.psn + 1;
  if (!f.has(OpcodeFlags::kEnd)) return Verdict::ok();
  s.in_progress = Responder::InProgress::None;
  s.msn = next(s.msn);
  if (!with_imm) return Verdict::ok();
  Completion c;
  if (s.recv_held) {
    s.recv_held = false;
    c.wr_id = s.recv_wr_id;
  } else {
    c.wr_id = qp.rq->front()->wr_id;
    qp.rq->pop();
  }
  c.opcode = WcOpcode::RecvRdmaWithImm;
  c.byte_len = static_cast<std::uint32_t>(s.write_total);
  c.flags = wc_flags::kWithImm;
  c.imm_data = p.imm->value;
  c.solicited = p.bth.solicited;
  complete_recv(qp, c);
  return Verdict::ok();
}

Verdict Engine::Impl::execute_read(Qp& qp, const TransportPacket& p) {
  Responder& s = qp.resp;
  if (qp.attr.max_dest_rd_atomic == 0) return Verdict::invalid_request("no responder resources for READ");
  const Reth& reth = *p.reth;
  if (reth.dma_length > kMaxMessage) return Verdict::invalid_request("DMA length above 2^31");
  if (!remote_readable(qp, reth)) return Verdict::access_error("R_Key, PD, access or bounds check failed");
  // The READ occupies one PSN per response packet (IBA ch. 9, RDMA READ).
  s.expected_psn = p.bth.psn + packets_for(reth.dma_length, qp.attr.path_mtu);
  s.msn = next(s.msn);  // counted when executed, so the responses carry it (C9-148)
  remember(qp, {p.bth.psn, ReplayEntry::Kind::Read, 0});
  return start_read_stream(qp, reth, p.bth.psn, false);
}

Verdict Engine::Impl::execute_atomic(Qp& qp, const TransportPacket& p) {
  Responder& s = qp.resp;
  if (qp.attr.max_dest_rd_atomic == 0) return Verdict::invalid_request("no responder resources for atomics");
  const AtomicEth& a = *p.atomic_eth;
  // IBA ch. 9 atomics: the target of an atomic is a naturally aligned 64-bit word.
  if (a.virtual_address % 8 != 0) return Verdict::invalid_request("atomic address not 8-byte aligned");
  const std::optional<MrFacts> mr = check_remote(mrs_, qp.pd, qp.qpn, a.rkey, access::kRemoteAtomic, a.virtual_address, 8);
  if (!mr) return Verdict::access_error("R_Key, PD, access or bounds check failed");
  // The engine runs one request at a time, so atomics are atomic with respect to each other
  // on this responder. Whether they are also atomic with respect to the target CPU's own
  // stores is the Dma's business (the daemon's process_vm_* Dma is not: docs/VERBS_MEMORY.md).
  const std::optional<std::uint64_t> original =
      p.bth.opcode == Opcode::RcCompareSwap ? dma_.compare_swap(*mr, a.virtual_address, a.compare, a.swap_add)
                                            : dma_.fetch_add(*mr, a.virtual_address, a.swap_add);
  if (!original) return unreachable(*mr, "target memory unreachable", WcStatus::RemOpErr);
  s.expected_psn = p.bth.psn + 1;
  s.msn = next(s.msn);
  remember(qp, {p.bth.psn, ReplayEntry::Kind::Atomic, *original});
  send_atomic_ack(qp, p.bth.psn, *original, false);
  return Verdict::ok();
}

// IBA 1.5 A19.4.2 ATOMIC_WRITE, checked in rxe's order: responder resources, then the R_Key
// (REMOTE_WRITE over the RETH's range: a remote access error), then the length (the RETH
// and the payload both 8 bytes), then the alignment (rxe: RESPST_ERR_MISALIGNED_ATOMIC,
// an invalid request). Executed once: a duplicate is answered from the replay cache.
Verdict Engine::Impl::execute_atomic_write(Qp& qp, const TransportPacket& p) {
  if (qp.attr.max_dest_rd_atomic == 0) return Verdict::invalid_request("no responder resources for ATOMIC_WRITE");
  const Reth& reth = *p.reth;
  const std::optional<MrFacts> mr =
      check_remote(mrs_, qp.pd, qp.qpn, reth.rkey, access::kRemoteWrite, reth.virtual_address, reth.dma_length);
  if (!mr) return Verdict::access_error("R_Key, PD, access or bounds check failed");
  if (reth.dma_length != 8 || p.payload.size() != 8)
    return Verdict::invalid_request("ATOMIC_WRITE carries other than 8 bytes");
  if (reth.virtual_address % 8 != 0) return Verdict::invalid_request("ATOMIC_WRITE address not 8-byte aligned");
  std::uint64_t value = 0;
  std::memcpy(&value, p.payload.data(), sizeof value);  // the bytes as sent: no byte order
  if (!dma_.atomic_write(*mr, reth.virtual_address, value))
    return unreachable(*mr, "target memory unwritable", WcStatus::RemOpErr);
  finish_placement(qp, p.bth.psn);
  return Verdict::ok();
}

// IBA 1.5 A19.4.1 FLUSH: the FETH names the placement type and the selectivity level; the
// MR behind the R_Key must grant the FLUSH access of every type asked for (a remote access
// error otherwise). The engine executes requests in PSN order, so every WRITE and atomic
// before the FLUSH has been handed to the Dma; place_writes() makes them land.
Verdict Engine::Impl::execute_flush(Qp& qp, const TransportPacket& p) {
  const std::uint8_t type = flush::feth_type(p.feth->bits);
  const std::uint8_t level = flush::feth_level(p.feth->bits);
  // rxe takes any level but RANGE as MR and any type bits as given; we refuse what the
  // annex does not define rather than guess (docs/TRANSPORT.md).
  if (type == 0 || (type & ~(flush::kGlobal | flush::kPersistent)) != 0 || level > flush::kLevelMr)
    return Verdict::invalid_request("FETH placement type or selectivity level undefined");
  const Reth& reth = *p.reth;
  if (reth.dma_length > kMaxMessage) return Verdict::invalid_request("DMA length above 2^31");
  const std::optional<MrFacts> mr = flush_target(qp, reth, type, level);
  if (!mr) return Verdict::access_error("R_Key, PD, FLUSH access or bounds check failed");
  if (!dma_.place_writes(*mr)) return unreachable(*mr, "target memory unreachable", WcStatus::RemOpErr);
  finish_placement(qp, p.bth.psn);
  return Verdict::ok();
}

// The region a FLUSH applies to: the RETH's range, or (level MR) the whole region, whose
// VA and length the request need not give (rxe: skip_check_range).
std::optional<MrFacts> Engine::Impl::flush_target(const Qp& qp, const Reth& reth, std::uint8_t type,
                                                  std::uint8_t level) const {
  std::uint64_t va = reth.virtual_address;
  std::uint64_t length = reth.dma_length;
  if (level == flush::kLevelMr) {
    const std::optional<MrFacts> whole = mrs_.find_rkey(reth.rkey);
    if (!whole) return std::nullopt;
    va = whole->base;
    length = whole->length;
  }
  return check_remote(mrs_, qp.pd, qp.qpn, reth.rkey, flush_access(type), va, length);
}

// An executed FLUSH or ATOMIC_WRITE: one PSN, one message, remembered for its duplicates,
// answered by an empty READ response.
void Engine::Impl::finish_placement(Qp& qp, Psn psn) {
  qp.resp.expected_psn = psn + 1;
  qp.resp.msn = next(qp.resp.msn);
  remember(qp, {psn, ReplayEntry::Kind::EmptyReadResponse, 0});
  send_empty_read_response(qp, psn, false);
}

// The memory a READ names may be read by the peer: R_Key, PD, REMOTE_READ and bounds. A READ
// of no bytes reads nothing and needs no key.
bool Engine::Impl::remote_readable(const Qp& qp, const Reth& reth) const {
  return reth.dma_length == 0 ||
         check_remote(mrs_, qp.pd, qp.qpn, reth.rkey, access::kRemoteRead, reth.virtual_address, reth.dma_length).has_value();
}

// Answers a READ request (executed, or a duplicate of one executed before) with a stream of
// responses, FIRST (AETH) MIDDLE* LAST (AETH) or ONLY (AETH) as rxe sends them, and sends
// its first step. A stream in progress is replaced: the request is then a duplicate of the
// READ it answers, asking again from a lost response on.
Verdict Engine::Impl::start_read_stream(Qp& qp, const Reth& reth, Psn psn, bool duplicate) {
  Responder& s = qp.resp;
  ReadStream r;
  r.rkey = reth.rkey;
  r.va = reth.virtual_address;
  r.length = reth.dma_length;
  r.first = psn;
  r.mtu = qp.attr.path_mtu;
  r.packets = packets_for(reth.dma_length, r.mtu);
  r.duplicate = duplicate;
  r.read_first = psn;
  r.read_end = psn + r.packets;
  // A READ asked for again: responses were lost (or its request was, after a NAK). A slow
  // receiver shows itself no other way.
  if (duplicate && s.pacer.on_rerequest(last_now_)) ++counters_.read_pace_cuts;
  if (s.read_stream) {
    ++counters_.read_streams_restarted;
    r.read_first = s.read_stream->read_first;
    r.read_end = s.read_stream->read_end;
  }
  s.read_stream = r;
  if (!qp.streaming.is_linked()) streaming_.push_back(qp);
  return step_read_stream(qp);
}

// Sends the next kReadResponsesPerStep responses of the READ being answered. The R_Key is
// checked again at every step: memory deregistered meanwhile is not read. The last step
// ends the stream and runs the requests that waited behind it.
Verdict Engine::Impl::step_read_stream(Qp& qp) {
  ReadStream& r = *qp.resp.read_stream;
  const ReadAheadScope read_ahead(read_ahead_);
  const std::uint32_t mtu = r.mtu;
  // At most a step, and no more than the host can send now: the rest waits for the next
  // advance() (docs/TRANSPORT.md, "Pacing").
  const std::uint32_t end =
      r.next + std::min({r.packets - r.next, kReadResponsesPerStep, transmit_room_packets(), qp.resp.pacer.allowance(last_now_)});
  qp.resp.pacer.sent(end - r.next);
  std::optional<MrFacts> mr;
  if (r.length > 0) {
    const std::uint64_t from = std::uint64_t{r.next} * mtu;
    mr = check_remote(mrs_, qp.pd, qp.qpn, r.rkey, access::kRemoteRead, r.va + from, r.length - from);
    if (!mr) return Verdict::access_error("R_Key, PD, access or bounds check failed");
  }
  for (; r.next < end; ++r.next) {
    const std::uint32_t k = r.next;
    TransportPacket out;
    out.bth.opcode = read_response_opcode(k, r.packets);
    out.bth.dest_qp = qp.attr.dest_qpn;
    out.bth.psn = r.first + k;
    if (opcode_info(out.bth.opcode).flags.has(OpcodeFlags::kAeth)) out.aeth = Aeth{ack_syndrome(), qp.resp.msn};
    const std::uint64_t offset = std::uint64_t{k} * mtu;
    const std::size_t size = static_cast<std::size_t>(std::min<std::uint64_t>(mtu, r.length - offset));
    if (size > 0) {
      // Read ahead what this step sends (every path MTU divides kReadAheadBytes).
      const std::uint64_t step_rest = std::min<std::uint64_t>(r.length, std::uint64_t{end} * mtu) - offset;
      const std::size_t window = static_cast<std::size_t>(std::min<std::uint64_t>(step_rest, kReadAheadBytes));
      const std::optional<std::span<const std::uint8_t>> payload =
          read_ahead_.get({&qp, r.first.value(), true}, offset, size, window,
                          [&](std::span<std::uint8_t> room) { return dma_.read(*mr, r.va + offset, room); });
      if (!payload) return unreachable(*mr, "source memory unreadable", WcStatus::RemOpErr);
      out.payload = *payload;
    }
    emit(qp, path_of(qp), out, r.duplicate ? PacketDecision::Retransmitted : PacketDecision::Sent,
         opcode_info(out.bth.opcode).name);
  }
  if (r.next < r.packets) {
    streams_due_ = std::min(streams_due_.value_or(Instant::max()), qp.resp.pacer.next_allowed(last_now_));
    return Verdict::ok();
  }
  const Psn last = r.first + (r.packets - 1);
  end_read_stream(qp);
  answered(qp, last);
  run_waiting(qp);
  return Verdict::ok();
}

void Engine::Impl::end_read_stream(Qp& qp) {
  qp.resp.read_stream.reset();
  if (qp.streaming.is_linked()) qp.streaming.unlink();
}

// A later step of a READ could not read its memory: NAK the PSN of the first response not
// sent (the requester has taken those before it and fails the READ) and enter the error
// state, as for a request refused when it arrived.
void Engine::Impl::abort_read_stream(Qp& qp, const Verdict& v) {
  const Psn psn = qp.resp.read_stream->first + qp.resp.read_stream->next;
  end_read_stream(qp);
  if (v.kind == Verdict::Kind::Drop) return;  // the owner is gone (unreachable): no answer
  ++counters_.naks_sent;
  send_ack(qp, psn, nak_syndrome(v.code), PacketDecision::Sent, "NAK");
  enter_error(qp, v.why, v.event);
}

void Engine::Impl::wait_behind_read(Qp& qp, const TransportPacket& p) {
  Responder& s = qp.resp;
  if (s.waiting.size() >= kMaxWaitingRequests) {
    ++counters_.requests_dropped_behind_read;
    observe(qp, p.bth, PacketDecision::Dropped, "behind a READ being answered, and the queue is full");
    return;
  }
  WaitingRequest& w = s.waiting.emplace_back();
  w.packet = p;
  w.bytes.assign(p.payload.begin(), p.payload.end());
  w.packet.payload = {};
}

// Runs the requests that waited behind a READ, in order, until one starts another READ
// stream (the rest wait behind that one) or the QP leaves the states that receive.
void Engine::Impl::run_waiting(Qp& qp) {
  Responder& s = qp.resp;
  while (!s.read_stream && !s.waiting.empty()) {
    const QpState state = qp.attr.state;
    if (state == QpState::Reset || state == QpState::Init || state == QpState::Err) {
      s.waiting.clear();
      return;
    }
    WaitingRequest w = std::move(s.waiting.front());
    s.waiting.pop_front();
    w.packet.payload = w.bytes;
    rc_request(qp, w.packet);
  }
}

void Engine::Impl::send_atomic_ack(Qp& qp, Psn psn, std::uint64_t original, bool duplicate) {
  TransportPacket out;
  out.bth.opcode = Opcode::RcAtomicAck;
  out.bth.dest_qp = qp.attr.dest_qpn;
  out.bth.psn = psn;
  out.aeth = Aeth{ack_syndrome(), qp.resp.msn};
  out.atomic_ack_eth = AtomicAckEth{original};
  emit(qp, path_of(qp), out, duplicate ? PacketDecision::Retransmitted : PacketDecision::Sent, "ATOMIC_ACKNOWLEDGE");
  answered(qp, psn);
}

// IBA 1.5 A19: the answer to a FLUSH or an ATOMIC_WRITE is an RDMA READ response ONLY with
// an AETH and no data, at the request's PSN (rxe: send_read_response_ack).
void Engine::Impl::send_empty_read_response(Qp& qp, Psn psn, bool duplicate) {
  TransportPacket out;
  out.bth.opcode = Opcode::RcReadResponseOnly;
  out.bth.dest_qp = qp.attr.dest_qpn;
  out.bth.psn = psn;
  out.aeth = Aeth{ack_syndrome(), qp.resp.msn};
  emit(qp, path_of(qp), out, duplicate ? PacketDecision::Retransmitted : PacketDecision::Sent,
       "RDMA_READ_RESPONSE_ONLY (empty)");
  answered(qp, psn);
}

void Engine::Impl::send_ack(Qp& qp, Psn psn, std::uint8_t syndrome, PacketDecision d, std::string_view why) {
  TransportPacket out;
  out.bth.opcode = Opcode::RcAck;
  out.bth.dest_qp = qp.attr.dest_qpn;
  out.bth.psn = psn;
  out.aeth = Aeth{syndrome, qp.resp.msn};
  emit(qp, path_of(qp), out, d, why);
  // A NAK's PSN is the one not executed: it acknowledges those before it.
  answered(qp, syndrome == ack_syndrome() ? psn : psn - 1);
}

// Memory a request needed could not be reached. rxe pins a process's pages at registration
// and keeps them until its QPs are destroyed, so a peer never learns of that process's death
// from its memory: its requests are served until the QP goes, then dropped as for any QP
// that does not exist. Here a dead owner's memory fails at once, before the host has
// destroyed its QPs; a NAK would tell the peer of an operational error rxe never reports
// (and rping, seeing it before the DREQ, fails instead of disconnecting). So the request is
// dropped, as rxe drops it a moment later. Memory that fails while its owner lives (unmapped,
// read-only) is an operational error: NAKed, and the QP goes to ERR.
Verdict Engine::Impl::unreachable(const MrFacts& mr, std::string_view why, WcStatus status) {
  if (!dma_.owner_gone(mr)) return Verdict::operational_error(why, status);
  ++counters_.owner_gone_drops;
  return Verdict::drop("the memory's owner has exited: dropped, as for a destroyed QP");
}

// A request the responder cannot execute (IBA ch. 9 responder error classes): NAK it with
// its own PSN, fail the receive WQE it consumed, and put the QP in the error state.
void Engine::Impl::refuse(Qp& qp, const TransportPacket& p, const Verdict& v) {
  Responder& s = qp.resp;
  const PacketDecision d = v.code == NakCode::RemoteAccessError        ? PacketDecision::AccessErrorNak
                           : v.code == NakCode::RemoteOperationalError ? PacketDecision::OperationalErrorNak
                                                                       : PacketDecision::InvalidRequestNak;
  ++counters_.naks_sent;
  observe(qp, p.bth, d, v.why);
  send_ack(qp, p.bth.psn, nak_syndrome(v.code), PacketDecision::Sent, "NAK");
  if (s.in_progress == Responder::InProgress::Send) {
    Completion c;
    c.wr_id = s.recv_wr_id;
    c.status = v.recv_status;
    c.opcode = WcOpcode::Recv;
    complete_recv(qp, c);
  }
  s.in_progress = Responder::InProgress::None;
  enter_error(qp, v.why, v.event);
}

void Engine::Impl::remember(Qp& qp, ReplayEntry e) {
  Responder& s = qp.resp;
  s.replay[s.replay_next] = e;
  s.replay_next = (s.replay_next + 1) % s.replay.size();
  s.replay_count = std::min(s.replay_count + 1, s.replay.size());
}

const ReplayEntry* Engine::Impl::recall(const Qp& qp, Psn psn, ReplayEntry::Kind kind) const {
  const Responder& s = qp.resp;
  for (std::size_t i = 0; i < s.replay_count; ++i) {
    const ReplayEntry& e = s.replay[i];
    if (e.kind == kind && e.psn == psn) return &e;
  }
  return nullptr;
}

// A receive WQE whose memory cannot take the message (its L_Key no longer covers it, the
// pages are gone): a class A error for every transport (IBA ch. 10 responder errors; rxe's
// RESPST_ERR_MALFORMED_WQE). The WQE completes in error and the QP goes to ERR, flushing the
// rest; unlike RC, UC and UD tell the requester nothing. Kept for the next message instead,
// the WQE would never complete and the QP would go on as if nothing had happened.
void Engine::Impl::fail_receive_wqe(Qp& qp, const TransportPacket& p, const Verdict& v) {
  observe(qp, p.bth, PacketDecision::Dropped, v.why);
  Completion c;
  c.wr_id = qp.resp.recv_wr_id;
  c.status = v.recv_status;
  c.opcode = WcOpcode::Recv;
  complete_recv(qp, c);
  qp.resp.in_progress = Responder::InProgress::None;
  enter_error(qp, v.why, v.event);
}

// IBA UC rules (ch. 9): UC keeps no retry state. A PSN gap or any error loses the message in
// progress; the receive WQE it was filling is kept for the next message.
void Engine::Impl::abort_uc_message(Qp& qp) {
  Responder& s = qp.resp;
  if (s.in_progress == Responder::InProgress::None) return;
  ++counters_.uc_messages_dropped;
  if (s.in_progress == Responder::InProgress::Send) s.recv_held = true;
  s.in_progress = Responder::InProgress::None;
}

void Engine::Impl::uc_request(Qp& qp, const TransportPacket& p) {
  Responder& s = qp.resp;
  const OpcodeFlags f = opcode_info(p.bth.opcode).flags;
  const Psn psn = p.bth.psn;
  // The IBA UC rules let any FIRST/ONLY restart UC reception at its PSN. An IB fabric never
  // reorders or duplicates, Ethernet may: a PSN behind the expected one can only be a
  // duplicate or a late packet, and taking it would deliver a message twice or out of
  // order (rxe does). We drop it; only a forward jump resynchronises.
  if (psn.before(s.expected_psn)) {
    ++counters_.duplicate_requests;
    observe(qp, p.bth, PacketDecision::Duplicate, "UC: PSN behind the expected one, dropped");
    return;
  }
  if (psn != s.expected_psn || s.uc_dropping) {
    if (psn != s.expected_psn) abort_uc_message(qp);
    s.expected_psn = psn + 1;
    if (!f.has(OpcodeFlags::kStart)) {
      s.uc_dropping = true;
      observe(qp, p.bth, PacketDecision::UcMessageDropped, "UC: rest of a broken message");
      return;
    }
    s.uc_dropping = false;
    s.expected_psn = psn;
  }
  // An opcode out of sequence at the expected PSN also loses the message (IBA UC rules).
  // A FIRST/ONLY while a message is open means its end was lost: drop the open one.
  if (f.has(OpcodeFlags::kStart)) abort_uc_message(qp);
  const Verdict v = execute(qp, p);
  if (v.kind == Verdict::Kind::Ok) {
    observe(qp, p.bth, PacketDecision::Accepted, opcode_info(p.bth.opcode).name);
    return;
  }
  if (v.kind == Verdict::Kind::Nak && v.code == NakCode::RemoteOperationalError &&
      s.in_progress == Responder::InProgress::Send) {
    fail_receive_wqe(qp, p, v);
    return;
  }
  // UC never answers: what RC would NAK or RNR-NAK silently drops the message.
  abort_uc_message(qp);
  s.uc_dropping = !f.has(OpcodeFlags::kEnd);
  s.expected_psn = psn + 1;
  ++counters_.uc_messages_dropped;
  observe(qp, p.bth, PacketDecision::UcMessageDropped, v.why);
}

// UD (IBA ch. 9 and 10): one-packet messages, Q_Key checked, no answer ever. The first 40
// bytes of the receive buffer take the GRH (IBA 11.4.1.2, Annex A17.4.5.2); over RoCE
// v2/IPv4, rxe writes 20 zero bytes and the packet's IPv4 header there and reports
// IBV_WC_GRH.
void Engine::Impl::ud_request(Qp& qp, const TransportPacket& p, const PacketSource& from) {
  constexpr std::size_t kGrhLength = 40;
  constexpr std::size_t kIpv4HeaderLength = 20;
  if (p.deth->qkey != qp.attr.qkey) {
    ++counters_.qkey_mismatch;
    observe(qp, p.bth, PacketDecision::Dropped, "Q_Key mismatch");
    return;
  }
  if (p.payload.size() > qp.attr.path_mtu) {
    ++counters_.bad_header;
    observe(qp, p.bth, PacketDecision::Dropped, "UD payload above the path MTU");
    return;
  }
  const RecvWr* wr = qp.rq->front();
  if (!wr) {
    observe(qp, p.bth, PacketDecision::Dropped, "no receive WQE (UD drops silently)");
    return;
  }
  Completion c;
  c.wr_id = wr->wr_id;
  c.opcode = WcOpcode::Recv;
  ResolvedSges sges;
  const LocalCheck check = resolve_sges(mrs_, qp.pd, wr->sg_list, true, sges);
  qp.rq->pop();
  const std::size_t need = kGrhLength + p.payload.size();
  std::array<std::uint8_t, kGrhLength> grh{};
  if (from.ipv4_header.size() >= kIpv4HeaderLength)
    std::copy_n(from.ipv4_header.begin(), kIpv4HeaderLength, grh.begin() + (kGrhLength - kIpv4HeaderLength));
  if (check != LocalCheck::Ok) {
    c.status = WcStatus::LocProtErr;
  } else if (total_length(sges) < need) {
    c.status = WcStatus::LocLenErr;
  } else if (!scatter(dma_, sges, 0, grh) || !scatter(dma_, sges, kGrhLength, p.payload)) {
    c.status = WcStatus::LocProtErr;
  }
  c.byte_len = static_cast<std::uint32_t>(need);
  c.flags = wc_flags::kGrh;
  if (p.imm) {
    c.flags |= wc_flags::kWithImm;
    c.imm_data = p.imm->value;
  }
  c.src_qp = p.deth->src_qp;
  c.src_ip = from.ip;
  c.solicited = p.bth.solicited;
  observe(qp, p.bth, c.status == WcStatus::Success ? PacketDecision::Accepted : PacketDecision::Dropped, "UD SEND");
  complete_recv(qp, c);
  // A length error only loses this message (class D); memory the WQE cannot reach is class
  // A, as on the connected transports (fail_receive_wqe).
  if (c.status == WcStatus::LocProtErr) enter_error(qp, "receive WQE's memory not accessible", EventType::QpFatal);
}

}  // namespace rrdma::rocev2
