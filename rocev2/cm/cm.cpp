// The CM state machine. Comments name the Linux 6.1 cm.c function whose behaviour each
// branch follows; the memo (/work/research/rdma_cm.md §3.5-3.8) has the details.
#include "rocev2/cm/cm.h"

#include <algorithm>

namespace rrdma::rocev2::cm {

namespace {

constexpr std::uint16_t kRoceLid = 0xFFFF;        // hop limit > 1: both LIDs 0xFFFF (cm_format_req)
constexpr std::uint8_t kHopLimit = 64;
constexpr std::uint8_t kCaAckDelay = 15;          // rxe's local_ca_ack_delay, and ours
constexpr std::uint8_t kLocalAckTimeout = kAvTimeout;  // cm_ack_timeout(15, 18) = 19

Gid ipv4_mapped_gid(stack::Ipv4Address a) {
  Gid g{};
  g[10] = 0xFF;
  g[11] = 0xFF;
  g[12] = static_cast<std::uint8_t>(a.value >> 24);
  g[13] = static_cast<std::uint8_t>(a.value >> 16);
  g[14] = static_cast<std::uint8_t>(a.value >> 8);
  g[15] = static_cast<std::uint8_t>(a.value);
  return g;
}

std::vector<std::uint8_t> copy(const OpaqueBytes& o) { return {o.bytes.begin(), o.bytes.end()}; }

bool waiting_for_rep(CmState s) { return s == CmState::ReqSent || s == CmState::MraReqRcvd; }
bool waiting_for_rtu(CmState s) { return s == CmState::RepSent || s == CmState::MraRepRcvd; }
bool req_received(CmState s) { return s == CmState::ReqRcvd || s == CmState::MraReqSent; }
bool rep_received(CmState s) { return s == CmState::RepRcvd || s == CmState::MraRepSent; }

}  // namespace

std::string_view to_string(CmState s) {
  switch (s) {
    case CmState::Idle: return "IDLE";
    case CmState::ReqSent: return "REQ_SENT";
    case CmState::ReqRcvd: return "REQ_RCVD";
    case CmState::MraReqSent: return "MRA_REQ_SENT";
    case CmState::MraReqRcvd: return "MRA_REQ_RCVD";
    case CmState::RepSent: return "REP_SENT";
    case CmState::MraRepRcvd: return "MRA_REP_RCVD";
    case CmState::RepRcvd: return "REP_RCVD";
    case CmState::MraRepSent: return "MRA_REP_SENT";
    case CmState::Established: return "ESTABLISHED";
    case CmState::DreqSent: return "DREQ_SENT";
    case CmState::DreqRcvd: return "DREQ_RCVD";
    case CmState::Timewait: return "TIMEWAIT";
    case CmState::SidrReqSent: return "SIDR_REQ_SENT";
    case CmState::SidrReqRcvd: return "SIDR_REQ_RCVD";
  }
  return "?";
}

std::string describe_transition(ConnectionId c, CmState from, CmState to) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string line = "CM conn 0x";
  for (int shift = 28; shift >= 0; shift -= 4) line += kHex[(c.value() >> shift) & 0xF];
  line += ' ';
  line += to_string(from);
  line += " -> ";
  line += to_string(to);
  return line;
}

std::string_view to_string(CmEventType t) {
  switch (t) {
    case CmEventType::ConnectRequest: return "CONNECT_REQUEST";
    case CmEventType::ConnectResponse: return "CONNECT_RESPONSE";
    case CmEventType::Established: return "ESTABLISHED";
    case CmEventType::Rejected: return "REJECTED";
    case CmEventType::Unreachable: return "UNREACHABLE";
    case CmEventType::Disconnected: return "DISCONNECTED";
    case CmEventType::TimewaitExit: return "TIMEWAIT_EXIT";
    case CmEventType::SidrRequest: return "SIDR_REQUEST";
    case CmEventType::SidrResponse: return "SIDR_RESPONSE";
  }
  return "?";
}

std::optional<std::size_t> message_index(AttributeId id) {
  const auto v = static_cast<std::uint16_t>(id);
  if (v < static_cast<std::uint16_t>(AttributeId::Req) || v > static_cast<std::uint16_t>(AttributeId::SidrRep)) {
    return std::nullopt;
  }
  return std::size_t{v} - static_cast<std::size_t>(AttributeId::Req);
}

std::vector<std::pair<std::string, std::uint64_t>> named(const CmCounters& c) {
  std::vector<std::pair<std::string, std::uint64_t>> out = {
      {"rx_mads", c.rx_mads},
      {"rx_unparsable", c.rx_unparsable},
      {"rx_unmatched", c.rx_unmatched},
      {"rx_duplicates", c.rx_duplicates},
      {"rx_wrong_qpn", c.rx_wrong_qpn},
      {"rx_unsupported", c.rx_unsupported},
      {"rx_stale_foreign", c.rx_stale_foreign},
      {"req_held", c.req_held},
      {"req_held_served", c.req_held_served},
      {"tx_mads", c.tx_mads},
      {"resends", c.resends},
      {"timeouts", c.timeouts}};
  for (std::size_t i = 0; i < kCmMessageKinds; ++i) {
    std::string name{attribute_name(AttributeId{static_cast<std::uint16_t>(0x10 + i)})};
    for (char& ch : name) {
      if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
    }
    out.emplace_back("rx_" + name, c.rx_by_message[i]);
    out.emplace_back("tx_" + name, c.tx_by_message[i]);
  }
  return out;
}

std::string_view to_string(CmResult r) {
  switch (r) {
    case CmResult::ok: return "ok";
    case CmResult::address_in_use: return "address in use";
    case CmResult::not_listening: return "not listening";
    case CmResult::no_such_connection: return "no such connection";
    case CmResult::invalid_state: return "invalid state";
    case CmResult::private_data_too_long: return "private data too long";
    case CmResult::no_comm_id: return "no comm ID left";
  }
  return "?";
}

ConnectionManager::ConnectionManager(const CmConfig& config, CmMadSink& mads, CmEventSink& events)
    : config_(config), mads_(mads), events_(events), next_comm_id_(config.first_comm_id) {}

// --- Helpers ---------------------------------------------------------------------------------

// cm_form_tid: hi_tid << 32 | the comm ID as the kernel holds it, a __be32 read as a
// little-endian u32, so that its bytes come reversed on the wire (rxe's capture: comm ID
// 0x76700d15 in TID 0x00000002150d7076; docs/RDMA_CM.md, "Checked against rxe's capture").
std::uint64_t ConnectionManager::own_tid(const Connection& c) const {
  const std::uint32_t id = c.local_id.value();
  const std::uint32_t reversed = (id >> 24) | ((id >> 8) & 0xFF00) | ((id << 8) & 0xFF0000) | (id << 24);
  return (std::uint64_t{config_.tid_high} << 32) | reversed;
}

// Cyclic from a random start, skipping 0 and IDs in use (timewait included), so that an ID
// is unique for this GUID for as long as a peer may still hold it (cm_alloc_id_priv).
std::optional<CommId> ConnectionManager::allocate_comm_id() {
  // Among connections_.size() + 2 consecutive values at least one is neither 0 nor in use,
  // unless all 2^32 - 1 are taken.
  for (std::size_t tries = 0; tries < connections_.size() + 2; ++tries) {
    const std::uint32_t id = next_comm_id_++;
    if (id != 0 && !connections_.contains(id)) return CommId{id};
  }
  return std::nullopt;
}

ConnectionManager::Connection* ConnectionManager::find(ConnectionId c) {
  auto it = connections_.find(c.value());
  return it == connections_.end() ? nullptr : &it->second;
}

const ConnectionManager::Connection* ConnectionManager::find(ConnectionId c) const {
  auto it = connections_.find(c.value());
  return it == connections_.end() ? nullptr : &it->second;
}

// The duplicate key: (remote comm ID, remote CA GUID) (cm_insert_remote_id). A connection
// back in IDLE (rejected, timed out) has forgotten its REQ, as the kernel's (cm_reset_to_idle
// removes it from the table): a REQ resent after our lost REJ is a new one.
ConnectionManager::Connection* ConnectionManager::find_remote(CommId remote_id, std::uint64_t guid) {
  return lookup(by_remote_, {guid, remote_id.value()});
}

ConnectionManager::Connection* ConnectionManager::find_live_peer_qp(Qpn qpn, std::uint64_t guid) {
  return lookup(by_peer_qp_, {guid, qpn.value()});
}

ConnectionManager::Connection* ConnectionManager::find_sidr(std::uint32_t request_id, stack::Ipv4Address source) {
  return lookup(by_sidr_, {source.value, request_id});
}

// The first entry with `key`: the lowest local comm ID, as the scan of connections_ it
// replaces found.
ConnectionManager::Connection* ConnectionManager::lookup(const Index& index, IndexKey key) {
  const auto it = index.lower_bound({key, 0});
  if (it == index.end() || it->first != key) return nullptr;
  return find(CommId{it->second});
}

void ConnectionManager::move_key(Index& index, std::optional<IndexKey>& held, std::optional<IndexKey> wanted,
                                 std::uint32_t id) {
  if (held == wanted) return;
  if (held) index.erase({*held, id});
  if (wanted) index.insert({*wanted, id});
  held = wanted;
}

// The three lookups of a received MAD: which connections each must find, by state.
void ConnectionManager::reindex(Connection& c) {
  const CmState s = c.state;
  const bool rc_passive = !c.active && s != CmState::Idle && s != CmState::SidrReqRcvd;
  const bool peer_qp_known = req_received(s) || rep_received(s) || waiting_for_rtu(s) || s == CmState::Established ||
                             s == CmState::DreqSent || s == CmState::DreqRcvd;
  const std::uint32_t id = c.local_id.value();
  move_key(by_remote_, c.remote_key,
           rc_passive ? std::optional<IndexKey>({c.remote_ca_guid, c.remote_id.value()}) : std::nullopt, id);
  move_key(by_peer_qp_, c.peer_qp_key,
           peer_qp_known ? std::optional<IndexKey>({c.remote_ca_guid, c.remote_qpn.value()}) : std::nullopt, id);
  move_key(by_sidr_, c.sidr_key,
           s == CmState::SidrReqRcvd ? std::optional<IndexKey>({c.peer.value, c.remote_id.value()}) : std::nullopt, id);
}

ConnectionManager::Connection& ConnectionManager::add_connection(CommId id) {
  Connection& c = connections_[id.value()];
  c.local_id = id;
  return c;
}

// Every connection leaves through here, so that no index entry outlives it.
void ConnectionManager::erase_connection(std::uint32_t id) {
  const auto it = connections_.find(id);
  if (it == connections_.end()) return;
  Connection& c = it->second;
  move_key(by_remote_, c.remote_key, std::nullopt, id);
  move_key(by_peer_qp_, c.peer_qp_key, std::nullopt, id);
  move_key(by_sidr_, c.sidr_key, std::nullopt, id);
  connections_.erase(it);
}

// cm_acquire_id(local_id, remote_id): by comm IDs, never by TID.
ConnectionManager::Connection* ConnectionManager::match(CommId our_id, std::optional<CommId> their_id) {
  Connection* c = find(our_id);
  if (c == nullptr) return nullptr;
  if (their_id && c->remote_id.value() != 0 && c->remote_id != *their_id) return nullptr;
  return c;
}

bool ConnectionManager::send(stack::Ipv4Address to, const CmMessage& m, std::array<std::uint8_t, kMadLength>& buffer,
                             Instant now) {
  if (emit_cm_mad(m, buffer) != CmError::none) return false;
  transmit(to, MadSpan{buffer}, now);
  return true;
}

void ConnectionManager::transmit(stack::Ipv4Address to, MadSpan mad, Instant now) {
  ++counters_.tx_mads;
  if (const auto i = message_index(AttributeId{load_be16(mad, MadHeaderView::kAttributeIdAt)})) ++counters_.tx_by_message[*i];
  mads_.send_cm_mad(to, mad, now);
}

void ConnectionManager::send_once(stack::Ipv4Address to, const CmMessage& m, Instant now) {
  std::array<std::uint8_t, kMadLength> buffer{};
  send(to, m, buffer, now);
}

void ConnectionManager::arm_resend(Connection& c, Duration interval, std::uint8_t retries, Instant now) {
  c.interval = interval;
  c.retries_left = retries;
  arm(c, now + interval);
}

// Every deadline set goes into due_ as well; entries a later change made stale (the
// deadline moved or cleared, the connection gone) are dropped when they reach the front.
void ConnectionManager::arm(Connection& c, Instant when) {
  c.deadline = when;
  due_.emplace(when, c.local_id.value());
}

bool ConnectionManager::stale(const Due& entry) const {
  const auto it = connections_.find(entry.second);
  return it == connections_.end() || it->second.deadline != entry.first;
}

// cm_enter_timewait: the comm ID stays taken for timewait (av.timeout, 2048 ms) so that a
// late duplicate finds it and is answered (REJ stale, DREP).
void ConnectionManager::enter_timewait(Connection& c, Instant now) {
  set_state(c, CmState::Timewait);
  arm(c, now + kTimewait);
}

void ConnectionManager::set_state(Connection& c, CmState to) {
  const CmState from = c.state;
  c.state = to;
  reindex(c);
  if (observer_ != nullptr && from != to) observer_->on_cm_transition(c.local_id, from, to);
}

void ConnectionManager::to_idle(Connection& c) {
  set_state(c, CmState::Idle);
  c.deadline.reset();
}

void ConnectionManager::emit_event(const Connection& c, CmEvent event) {
  if (c.destroyed) return;
  event.connection = c.local_id;
  event.peer = c.peer;
  events_.on_cm_event(event);
}

void ConnectionManager::send_mra(Connection& c, MessageMraed what, Instant now) {
  CmMessage m{.transaction_id = c.req_tid,
              .body = Mra{.local_comm_id = c.local_id,
                          .remote_comm_id = c.remote_id,
                          .message_mraed = what,
                          .service_timeout = kMraServiceTimeout}};
  if (send(c.peer, m, c.reply_mad, now)) c.have_reply = true;
}

// cm_format_rej: which message the REJ names, and our comm ID in it, follow the state (in
// REQ_RCVD the kernel leaves its own comm ID 0).
Rej ConnectionManager::rej_for(const Connection& c, RejectReason reason) const {
  Rej rej{.local_comm_id = c.local_id, .remote_comm_id = c.remote_id, .message_rejected = MessageRejected::Other,
          .reason = reason};
  if (c.state == CmState::ReqRcvd) rej.local_comm_id = CommId{0};
  if (req_received(c.state)) rej.message_rejected = MessageRejected::Req;
  if (rep_received(c.state)) rej.message_rejected = MessageRejected::Rep;
  return rej;
}

// cm_issue_rej: a REJ without a connection, echoing the received TID.
void ConnectionManager::issue_rej(stack::Ipv4Address to, const CmMessage& received, CommId remote,
                                  RejectReason reason, MessageRejected what, Instant now) {
  send_once(to,
            CmMessage{.transaction_id = received.transaction_id,
                      .body = Rej{.remote_comm_id = remote, .message_rejected = what, .reason = reason}},
            now);
}

// cm_match_req / cm_rep_handler's stale connection: REJ 10 for the message, and a DREQ for
// the live connection whose peer QP it names (ib_send_cm_dreq). The IBA and Linux take the
// (CA GUID, QPN) pair alone as proof that the peer lost the connection; both are easy to
// know (the GUID is the MAC's, the QPNs count up from 17), so a host elsewhere on the bridge
// could end any connection. The teardown is honoured only when the message comes from the
// address the connection's peer has: the peer itself, restarted, always does.
void ConnectionManager::refuse_stale(stack::Ipv4Address source, const CmMessage& m, CommId remote,
                                     MessageRejected what, Connection& old, Instant now) {
  issue_rej(source, m, remote, RejectReason::StaleConnection, what, now);
  if (source != old.peer) {
    ++counters_.rx_stale_foreign;
    return;
  }
  if (old.state == CmState::Established) disconnect(old.local_id, {}, now);
}

// --- From the wire -------------------------------------------------------------------------------

void ConnectionManager::on_mad(const ReceivedMad& mad, Instant now) {
  CmMessage m;
  if (parse_cm_mad(mad.mad, m) != CmError::none) {
    ++counters_.rx_unparsable;
    return;
  }
  receive(mad.source, m, now);
}

void ConnectionManager::receive(stack::Ipv4Address source, const CmMessage& m, Instant now) {
  ++counters_.rx_mads;
  ++counters_.rx_by_message[m.body.index()];
  std::visit(
      [&](const auto& body) {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, Req>) on_req(source, m, body, now);
        else if constexpr (std::is_same_v<T, Mra>) on_mra(body, now);
        else if constexpr (std::is_same_v<T, Rej>) on_rej(body, now);
        else if constexpr (std::is_same_v<T, Rep>) on_rep(source, m, body, now);
        else if constexpr (std::is_same_v<T, Rtu>) on_rtu(body, now);
        else if constexpr (std::is_same_v<T, Dreq>) on_dreq(source, m, body, now);
        else if constexpr (std::is_same_v<T, Drep>) on_drep(body, now);
        else if constexpr (std::is_same_v<T, SidrReq>) on_sidr_req(source, m, body, now);
        else if constexpr (std::is_same_v<T, SidrRep>) on_sidr_rep(body, now);
      },
      m.body);
}

// cm_req_handler, cm_dup_req_handler.
void ConnectionManager::on_req(stack::Ipv4Address source, const CmMessage& m, const Req& req, Instant now) {
  if (Connection* dup = find_remote(req.local_comm_id, req.local_ca_guid)) {
    ++counters_.rx_duplicates;
    if (dup->state == CmState::MraReqSent) {
      send_mra(*dup, MessageMraed::Req, now);  // the delayed MRA: only now is one sent
    } else if (dup->state == CmState::Timewait) {  // formatted by the connection, the REQ's TID
      send_once(source, CmMessage{.transaction_id = m.transaction_id, .body = rej_for(*dup, RejectReason::StaleConnection)},
                now);
    }
    return;  // REQ_RCVD and the rest: dropped
  }
  if (req.transport_service_type != TransportServiceType::Rc) {
    ++counters_.rx_unsupported;
    issue_rej(source, m, req.local_comm_id, RejectReason::InvalidTransportType, MessageRejected::Req, now);
    return;
  }
  // cm_match_req: a REQ from a QP that a live connection already has as its peer means the
  // peer lost that connection (a restart reusing the QPN): refuse the REQ as stale, and
  // disconnect the old connection (only when the REQ comes from its peer: refuse_stale).
  if (Connection* old = find_live_peer_qp(req.local_qpn, req.local_ca_guid)) {
    refuse_stale(source, m, req.local_comm_id, MessageRejected::Req, *old, now);
    return;
  }
  if (!listeners_.contains(req.service_id)) {  // cm_match_req: no listener (yet)
    if (!hold(source, m, req, now)) reject_no_listener(source, m, req, now);
    return;
  }
  const std::optional<CommId> id = allocate_comm_id();
  if (!id) return;  // as a full backlog: no REJ, the peer will retry
  Connection& c = add_connection(*id);
  c.active = false;
  c.remote_id = req.local_comm_id;
  c.remote_ca_guid = req.local_ca_guid;
  c.peer = source;
  c.service_id = req.service_id;
  c.remote_qpn = req.local_qpn;
  c.remote_psn = req.starting_psn;                   // our sq_psn
  c.initiator_depth = req.responder_resources;       // until accept() says otherwise
  c.responder_resources = req.initiator_depth;
  c.retry_count = req.retry_count;
  c.rnr_retry_count = req.rnr_retry_count;
  c.path_mtu = req.path_packet_payload_mtu;          // the passive side adopts the REQ's MTU
  c.req_tid = m.transaction_id;
  c.timeout = cm_timeout_ms(req.local_cm_response_timeout);
  c.max_cm_retries = req.max_cm_retries;
  set_state(c, CmState::ReqRcvd);  // with its peer fields set: indexed by them
  if (config_.delayed_mra) set_state(c, CmState::MraReqSent);  // ib_send_cm_mra(IB_CM_MRA_FLAG_DELAY)

  CmEvent e{.type = CmEventType::ConnectRequest,
            .service_id = req.service_id,
            .peer_qpn = req.local_qpn,
            .peer_starting_psn = req.starting_psn,
            .responder_resources = req.responder_resources,
            .initiator_depth = req.initiator_depth,
            .retry_count = req.retry_count,
            .rnr_retry_count = req.rnr_retry_count,
            .path_mtu = req.path_packet_payload_mtu,
            .private_data = copy(req.private_data)};
  emit_event(c, std::move(e));
}

// The kernel refuses a REQ that finds no listener at once (REJ 8). A program that listens
// again on a port right after accepting on it (perftest -R: control connection, then the
// test's) leaves a window in which its peer's next REQ finds none; the kernel's window is
// the few microseconds of two system calls, ours several round trips to a daemon on a busy
// host, which the peer's REQ wins often enough to matter (perftest 4.5 crashes on the REJ).
// So such a REQ waits up to kNoListenerHold for a listener; without one it gets the REJ 8.
bool ConnectionManager::hold(stack::Ipv4Address source, const CmMessage& m, const Req& req, Instant now) {
  for (const HeldReq& h : held_) {  // kMaxHeldReqs at most
    if (h.remote_id == req.local_comm_id && h.remote_ca_guid == req.local_ca_guid) {
      ++counters_.rx_duplicates;  // a resend of a held REQ: it waits already
      return true;
    }
  }
  if (held_.size() >= kMaxHeldReqs) return false;
  HeldReq h{.until = now + kNoListenerHold,
            .source = source,
            .service_id = req.service_id,
            .remote_ca_guid = req.local_ca_guid,
            .remote_id = req.local_comm_id,
            .mad = {}};
  if (emit_cm_mad(m, h.mad) != CmError::none) return false;
  held_.push_back(h);
  ++counters_.req_held;
  return true;
}

// The active side destroyed its id while its REQ waited here (REJ 4 names it by its comm ID
// and GUID): a listener that comes later must not get a request nobody waits for.
bool ConnectionManager::forget_held(CommId remote_id, std::uint64_t guid) {
  return std::erase_if(held_, [&](const HeldReq& h) { return h.remote_id == remote_id && h.remote_ca_guid == guid; }) > 0;
}

void ConnectionManager::reject_no_listener(stack::Ipv4Address source, const CmMessage& m, const Req& req,
                                           Instant now) {
  issue_rej(source, m, req.local_comm_id, RejectReason::InvalidServiceId, MessageRejected::Req, now);
}

void ConnectionManager::expire_held(Instant now) {
  while (!held_.empty() && held_.front().until <= now) {
    const HeldReq h = held_.front();
    held_.pop_front();
    CmMessage m;
    if (parse_cm_mad(ByteSpan{h.mad}, m) == CmError::none) {
      if (const Req* req = std::get_if<Req>(&m.body)) reject_no_listener(h.source, m, *req, now);
    }
  }
}

// cm_mra_handler: the peer needs longer; wait its service timeout plus the packet lifetime.
void ConnectionManager::on_mra(const Mra& mra, Instant now) {
  Connection* c = match(mra.remote_comm_id, mra.local_comm_id);
  if (c == nullptr) {
    ++counters_.rx_unmatched;
    return;
  }
  const Duration extended = cm_timeout_ms(mra.service_timeout) + cm_timeout_ms(kAvTimeout);
  if (mra.message_mraed == MessageMraed::Req && c->state == CmState::ReqSent) {
    set_state(*c, CmState::MraReqRcvd);
    c->remote_id = mra.local_comm_id;
  } else if (mra.message_mraed == MessageMraed::Rep && c->state == CmState::RepSent) {
    set_state(*c, CmState::MraRepRcvd);
  } else {
    ++counters_.rx_unmatched;
    return;
  }
  c->interval = extended;  // ib_modify_mad: the new timeout holds for the remaining retries
  arm(*c, now + extended);
}

// cm_rej_handler.
void ConnectionManager::on_rej(const Rej& rej, Instant now) {
  // cm_acquire_rejected_id: an active side that gives up in REQ_SENT does not know our comm
  // ID; its REJ 4 names it by its own comm ID and, in the ARI, its CA GUID.
  Connection* c = nullptr;
  if (rej.reason == RejectReason::Timeout && rej.ari.bytes.size() >= 8) {
    const std::uint64_t guid = load_be64(rej.ari.bytes, 0);
    c = find_remote(rej.local_comm_id, guid);
    if (c == nullptr && forget_held(rej.local_comm_id, guid)) return;  // it gave up waiting for a listener
  } else {
    c = match(rej.remote_comm_id, std::nullopt);
  }
  if (c == nullptr) {
    ++counters_.rx_unmatched;
    return;
  }
  const bool stale = rej.reason == RejectReason::StaleConnection;
  switch (c->state) {
    case CmState::ReqSent:
    case CmState::MraReqRcvd:
    case CmState::RepSent:
    case CmState::MraRepRcvd:
    case CmState::ReqRcvd:
    case CmState::MraReqSent:
      if (stale) enter_timewait(*c, now);
      else to_idle(*c);
      break;
    case CmState::DreqSent:
    case CmState::RepRcvd:
    case CmState::MraRepSent:
      enter_timewait(*c, now);
      break;
    default:
      ++counters_.rx_unmatched;
      return;
  }
  emit_event(*c, CmEvent{.type = CmEventType::Rejected, .reason = rej.reason, .private_data = copy(rej.private_data)});
}

// cm_rep_handler, cm_dup_rep_handler.
void ConnectionManager::on_rep(stack::Ipv4Address source, const CmMessage& m, const Rep& rep, Instant now) {
  Connection* c = match(rep.remote_comm_id, std::nullopt);
  if (c == nullptr || !c->active) {
    ++counters_.rx_unmatched;
    issue_rej(source, m, rep.local_comm_id, RejectReason::InvalidCommId, MessageRejected::Rep, now);
    return;
  }
  if (!waiting_for_rep(c->state)) {
    if (c->remote_id != rep.local_comm_id) {
      ++counters_.rx_unmatched;
      return;
    }
    ++counters_.rx_duplicates;
    if (c->state == CmState::Established && c->have_reply) {
      transmit(c->peer, MadSpan{c->reply_mad}, now);  // the RTU again
    } else if (c->state == CmState::MraRepSent) {
      send_mra(*c, MessageMraed::Rep, now);
    }
    return;
  }
  // cm_rep_handler: a REP from a QP that a live connection already has as its peer is stale:
  // REJ 10 for it, a DREQ for the old connection; ours keeps waiting (its REQ is resent).
  if (Connection* old = find_live_peer_qp(rep.local_qpn, rep.local_ca_guid)) {
    refuse_stale(source, m, rep.local_comm_id, MessageRejected::Rep, *old, now);
    return;
  }
  c->deadline.reset();
  c->remote_id = rep.local_comm_id;
  c->remote_ca_guid = rep.local_ca_guid;
  c->remote_qpn = rep.local_qpn;
  c->remote_psn = rep.starting_psn;            // our sq_psn
  c->initiator_depth = rep.responder_resources;
  c->responder_resources = rep.initiator_depth;
  c->rnr_retry_count = rep.rnr_retry_count;
  c->have_reply = false;
  set_state(*c, config_.delayed_mra ? CmState::MraRepSent : CmState::RepRcvd);  // the peer fields first
  emit_event(*c, CmEvent{.type = CmEventType::ConnectResponse,
                         .peer_qpn = rep.local_qpn,
                         .peer_starting_psn = rep.starting_psn,
                         .responder_resources = rep.responder_resources,
                         .initiator_depth = rep.initiator_depth,
                         .rnr_retry_count = rep.rnr_retry_count,
                         .private_data = copy(rep.private_data)});
}

// cm_rtu_handler.
void ConnectionManager::on_rtu(const Rtu& rtu, Instant) {
  Connection* c = match(rtu.remote_comm_id, rtu.local_comm_id);
  if (c == nullptr || !waiting_for_rtu(c->state)) {
    ++counters_.rx_unmatched;
    return;
  }
  set_state(*c, CmState::Established);
  c->deadline.reset();
  emit_event(*c, CmEvent{.type = CmEventType::Established, .private_data = copy(rtu.private_data)});
}

// cm_dreq_handler.
void ConnectionManager::on_dreq(stack::Ipv4Address source, const CmMessage& m, const Dreq& dreq, Instant now) {
  Connection* c = match(dreq.remote_comm_id, dreq.local_comm_id);
  if (c == nullptr) {  // cm_issue_drep: timewait is over here, the peer still waits for a DREP
    ++counters_.rx_unmatched;
    send_once(source,
              CmMessage{.transaction_id = m.transaction_id,
                        .body = Drep{.local_comm_id = dreq.remote_comm_id, .remote_comm_id = dreq.local_comm_id}},
              now);
    return;
  }
  if (dreq.remote_qpn_eecn != c->local_qpn) {
    ++counters_.rx_wrong_qpn;
    return;
  }
  switch (c->state) {
    case CmState::RepSent:      // the RTU was lost: the DREQ says the peer was established
    case CmState::MraRepRcvd:
    case CmState::DreqSent:     // both sides disconnect at once
    case CmState::Established:
      break;
    case CmState::Timewait:     // our DREP was lost: send it again
      ++counters_.rx_duplicates;
      send_once(source,
                CmMessage{.transaction_id = m.transaction_id,
                          .body = Drep{.local_comm_id = c->local_id, .remote_comm_id = c->remote_id}},
                now);
      return;
    case CmState::DreqRcvd:
      ++counters_.rx_duplicates;
      return;
    default:
      ++counters_.rx_unmatched;
      return;
  }
  set_state(*c, CmState::DreqRcvd);
  c->deadline.reset();
  c->dreq_tid = m.transaction_id;
  emit_event(*c, CmEvent{.type = CmEventType::Disconnected, .private_data = copy(dreq.private_data)});
}

// cm_drep_handler.
void ConnectionManager::on_drep(const Drep& drep, Instant now) {
  Connection* c = match(drep.remote_comm_id, drep.local_comm_id);
  if (c == nullptr || (c->state != CmState::DreqSent && c->state != CmState::DreqRcvd)) {
    ++counters_.rx_unmatched;
    return;
  }
  const bool was_sent = c->state == CmState::DreqSent;
  enter_timewait(*c, now);
  if (was_sent) emit_event(*c, CmEvent{.type = CmEventType::Disconnected, .private_data = copy(drep.private_data)});
}

// cm_sidr_req_handler. A duplicate (same request ID from the same address) while the user
// has not answered is dropped; once answered, the kernel has forgotten the request and a
// resent SIDR_REQ is a new one.
void ConnectionManager::on_sidr_req(stack::Ipv4Address source, const CmMessage& m, const SidrReq& req, Instant now) {
  if (find_sidr(req.request_id, source) != nullptr) {
    ++counters_.rx_duplicates;
    return;
  }
  if (!listeners_.contains(req.service_id)) {  // status 1: nobody listens
    send_once(source,
              CmMessage{.transaction_id = m.transaction_id,
                        .body = SidrRep{.request_id = req.request_id,
                                        .status = SidrStatus::ServiceIdNotSupported,
                                        .service_id = req.service_id}},
              now);
    return;
  }
  const std::optional<CommId> id = allocate_comm_id();
  if (!id) return;
  Connection& c = add_connection(*id);
  c.active = false;
  c.remote_id = CommId{req.request_id};
  c.peer = source;
  c.service_id = req.service_id;
  c.req_tid = m.transaction_id;
  set_state(c, CmState::SidrReqRcvd);
  emit_event(c, CmEvent{.type = CmEventType::SidrRequest,
                        .service_id = req.service_id,
                        .private_data = copy(req.private_data)});
}

// cm_sidr_rep_handler: matched by the request ID, which is our comm ID.
void ConnectionManager::on_sidr_rep(const SidrRep& rep, Instant) {
  Connection* c = find(CommId{rep.request_id});
  if (c == nullptr || c->state != CmState::SidrReqSent) {
    ++counters_.rx_unmatched;
    return;
  }
  to_idle(*c);
  emit_event(*c, CmEvent{.type = CmEventType::SidrResponse,
                         .service_id = rep.service_id,
                         .peer_qpn = rep.qpn,
                         .sidr_status = rep.status,
                         .qkey = rep.qkey,
                         .private_data = copy(rep.private_data)});
}

// --- From the application ------------------------------------------------------------------------

CmResult ConnectionManager::listen(std::uint64_t service_id, Instant now) {
  if (!listeners_.insert(service_id).second) return CmResult::address_in_use;
  std::vector<HeldReq> waiting;
  std::erase_if(held_, [&](const HeldReq& h) {
    if (h.service_id != service_id) return false;
    waiting.push_back(h);
    return true;
  });
  // Taken out first: what the new listener's events do may hold or listen again.
  for (const HeldReq& h : waiting) {
    CmMessage m;
    if (parse_cm_mad(ByteSpan{h.mad}, m) != CmError::none) continue;
    ++counters_.req_held_served;
    if (const Req* req = std::get_if<Req>(&m.body)) on_req(h.source, m, *req, now);
  }
  return CmResult::ok;
}

CmResult ConnectionManager::unlisten(std::uint64_t service_id) {
  return listeners_.erase(service_id) != 0 ? CmResult::ok : CmResult::not_listening;
}

// ib_send_cm_req with what rdma_cm puts in (cma_connect_ib, memo §3.4).
CmResult ConnectionManager::connect(const ConnectParams& p, Instant now, ConnectionId& out) {
  if (p.private_data.size() > Req::kPrivateDataLength) return CmResult::private_data_too_long;
  const std::optional<CommId> id = allocate_comm_id();
  if (!id) return CmResult::no_comm_id;
  Connection& c = add_connection(*id);
  c.active = true;
  set_state(c, CmState::ReqSent);
  c.peer = p.destination;
  c.service_id = p.service_id;
  c.local_qpn = p.local_qpn;
  c.local_psn = p.starting_psn;
  c.responder_resources = p.responder_resources;
  c.initiator_depth = p.initiator_depth;
  c.retry_count = p.retry_count;
  c.rnr_retry_count = p.rnr_retry_count;
  c.path_mtu = p.path_mtu;
  c.req_tid = own_tid(c);
  c.timeout = kReqResendInterval;  // also the DREQ's, on this side
  c.max_cm_retries = kMaxCmRetries;

  const CmPath path{.local_port_lid = kRoceLid,
                    .remote_port_lid = kRoceLid,
                    .local_port_gid = ipv4_mapped_gid(config_.local_address),
                    .remote_port_gid = ipv4_mapped_gid(p.destination),
                    .flow_label = p.flow_label & 0xFFFFF,
                    .hop_limit = kHopLimit,
                    .local_ack_timeout = kLocalAckTimeout};
  const CmMessage m{.transaction_id = c.req_tid,
                    .body = Req{.local_comm_id = c.local_id,
                                .service_id = p.service_id,
                                .local_ca_guid = config_.local_ca_guid,
                                .local_qpn = p.local_qpn,
                                .responder_resources = p.responder_resources,
                                .initiator_depth = p.initiator_depth,
                                .remote_cm_response_timeout = kCmResponseTimeout,
                                .starting_psn = p.starting_psn,
                                .local_cm_response_timeout = kCmResponseTimeout,
                                .retry_count = static_cast<std::uint8_t>(p.retry_count & 7),
                                .path_packet_payload_mtu = p.path_mtu,
                                .rnr_retry_count = static_cast<std::uint8_t>(p.rnr_retry_count & 7),
                                .max_cm_retries = kMaxCmRetries,
                                .primary_path = path,
                                .private_data = OpaqueBytes{p.private_data}}};
  if (!send(c.peer, m, c.resend_mad, now)) {
    erase_connection(id->value());
    return CmResult::invalid_state;
  }
  arm_resend(c, kReqResendInterval, kMaxCmRetries, now);
  out = *id;
  return CmResult::ok;
}

CmResult ConnectionManager::accept(ConnectionId id, const AcceptParams& p, Instant now) {
  Connection* c = find(id);
  if (c == nullptr || c->destroyed) return CmResult::no_such_connection;
  if (!c->active) {  // ib_send_cm_rep
    if (!req_received(c->state)) return CmResult::invalid_state;
    if (p.private_data.size() > Rep::kPrivateDataLength) return CmResult::private_data_too_long;
    c->local_qpn = p.local_qpn;
    c->local_psn = p.starting_psn;
    c->responder_resources = p.responder_resources;
    c->initiator_depth = p.initiator_depth;
    const CmMessage m{.transaction_id = c->req_tid,
                      .body = Rep{.local_comm_id = c->local_id,
                                  .remote_comm_id = c->remote_id,
                                  .local_qpn = p.local_qpn,
                                  .starting_psn = p.starting_psn,
                                  .responder_resources = p.responder_resources,
                                  .initiator_depth = p.initiator_depth,
                                  .target_ack_delay = kCaAckDelay,
                                  .rnr_retry_count = static_cast<std::uint8_t>(p.rnr_retry_count & 7),
                                  .local_ca_guid = config_.local_ca_guid,
                                  .private_data = OpaqueBytes{p.private_data}}};
    if (!send(c->peer, m, c->resend_mad, now)) return CmResult::invalid_state;
    set_state(*c, CmState::RepSent);
    c->have_reply = false;
    arm_resend(*c, c->timeout, c->max_cm_retries, now);
    return CmResult::ok;
  }
  // ib_send_cm_rtu
  if (!rep_received(c->state)) return CmResult::invalid_state;
  if (p.private_data.size() > Rtu::kPrivateDataLength) return CmResult::private_data_too_long;
  const CmMessage m{.transaction_id = c->req_tid,
                    .body = Rtu{.local_comm_id = c->local_id,
                                .remote_comm_id = c->remote_id,
                                .private_data = OpaqueBytes{p.private_data}}};
  if (!send(c->peer, m, c->reply_mad, now)) return CmResult::invalid_state;
  c->have_reply = true;  // a duplicate REP gets this RTU again
  set_state(*c, CmState::Established);
  emit_event(*c, CmEvent{.type = CmEventType::Established});
  return CmResult::ok;
}

// ib_send_cm_rej with IB_CM_REJ_CONSUMER_DEFINED, as rdma_reject.
CmResult ConnectionManager::reject(ConnectionId id, ByteSpan private_data, Instant now) {
  Connection* c = find(id);
  if (c == nullptr || c->destroyed) return CmResult::no_such_connection;
  if (!req_received(c->state) && !rep_received(c->state)) return CmResult::invalid_state;
  if (private_data.size() > Rej::kPrivateDataLength) return CmResult::private_data_too_long;
  Rej rej = rej_for(*c, RejectReason::ConsumerDefined);
  rej.private_data = OpaqueBytes{private_data};
  const CmMessage m{.transaction_id = c->req_tid, .body = rej};
  send_once(c->peer, m, now);
  to_idle(*c);
  return CmResult::ok;
}

// ib_send_cm_dreq, or ib_send_cm_drep when a DREQ came first (rdma_disconnect).
CmResult ConnectionManager::disconnect(ConnectionId id, ByteSpan private_data, Instant now) {
  Connection* c = find(id);
  if (c == nullptr || c->destroyed) return CmResult::no_such_connection;
  if (c->state == CmState::DreqRcvd) {
    if (private_data.size() > Drep::kPrivateDataLength) return CmResult::private_data_too_long;
    send_once(c->peer,
              CmMessage{.transaction_id = c->dreq_tid,
                        .body = Drep{.local_comm_id = c->local_id,
                                     .remote_comm_id = c->remote_id,
                                     .private_data = OpaqueBytes{private_data}}},
              now);
    enter_timewait(*c, now);
    return CmResult::ok;
  }
  if (c->state != CmState::Established) return CmResult::invalid_state;
  if (private_data.size() > Dreq::kPrivateDataLength) return CmResult::private_data_too_long;
  const CmMessage m{.transaction_id = own_tid(*c),
                    .body = Dreq{.local_comm_id = c->local_id,
                                 .remote_comm_id = c->remote_id,
                                 .remote_qpn_eecn = c->remote_qpn,
                                 .private_data = OpaqueBytes{private_data}}};
  if (!send(c->peer, m, c->resend_mad, now)) return CmResult::invalid_state;
  set_state(*c, CmState::DreqSent);
  arm_resend(*c, c->timeout, c->max_cm_retries, now);
  return CmResult::ok;
}

// ib_send_cm_sidr_req, with rdma_cm's timeout (cma_resolve_ib_udp): 4096 ms, 15 retries.
CmResult ConnectionManager::sidr_request(const SidrParams& p, Instant now, ConnectionId& out) {
  if (p.private_data.size() > SidrReq::kPrivateDataLength) return CmResult::private_data_too_long;
  const std::optional<CommId> id = allocate_comm_id();
  if (!id) return CmResult::no_comm_id;
  Connection& c = add_connection(*id);
  c.active = true;
  c.peer = p.destination;
  c.service_id = p.service_id;
  c.req_tid = own_tid(c);
  set_state(c, CmState::SidrReqSent);
  const CmMessage m{.transaction_id = c.req_tid,
                    .body = SidrReq{.request_id = c.local_id.value(),
                                    .service_id = p.service_id,
                                    .private_data = OpaqueBytes{p.private_data}}};
  if (!send(c.peer, m, c.resend_mad, now)) {
    erase_connection(id->value());
    return CmResult::invalid_state;
  }
  arm_resend(c, cm_timeout_ms(kCmResponseTimeout), kMaxCmRetries, now);
  out = *id;
  return CmResult::ok;
}

// ib_send_cm_sidr_rep: the request ID and TID echoed.
CmResult ConnectionManager::sidr_reply(ConnectionId id, const SidrReplyParams& p, Instant now) {
  Connection* c = find(id);
  if (c == nullptr || c->destroyed) return CmResult::no_such_connection;
  if (c->state != CmState::SidrReqRcvd) return CmResult::invalid_state;
  if (p.private_data.size() > SidrRep::kPrivateDataLength) return CmResult::private_data_too_long;
  send_once(c->peer,
            CmMessage{.transaction_id = c->req_tid,
                      .body = SidrRep{.request_id = c->remote_id.value(),
                                      .status = p.status,
                                      .qpn = p.qpn,
                                      .service_id = c->service_id,
                                      .qkey = p.qkey,
                                      .private_data = OpaqueBytes{p.private_data}}},
            now);
  to_idle(*c);
  return CmResult::ok;
}

// cm_destroy_id: what each state sends on the way out.
CmResult ConnectionManager::destroy(ConnectionId id, Instant now) {
  Connection* c = find(id);
  if (c == nullptr || c->destroyed) return CmResult::no_such_connection;
  std::array<std::uint8_t, 8> guid{};
  for (std::size_t i = 0; i < guid.size(); ++i) guid[i] = static_cast<std::uint8_t>(config_.local_ca_guid >> (56 - 8 * i));
  const auto rej = [&](RejectReason reason) {
    Rej r = rej_for(*c, reason);
    // REJ 4 from REQ_SENT: the node GUID, big-endian (cm_destroy_id)
    if (reason == RejectReason::Timeout) r.ari = OpaqueBytes{ByteSpan{guid}};
    send_once(c->peer, CmMessage{.transaction_id = c->req_tid, .body = r}, now);
  };

  c->destroyed = true;
  switch (c->state) {
    case CmState::ReqSent:
    case CmState::MraReqRcvd:
      rej(RejectReason::Timeout);
      break;
    case CmState::ReqRcvd:
    case CmState::MraReqSent:
    case CmState::RepRcvd:
    case CmState::MraRepSent:
      rej(RejectReason::ConsumerDefined);
      break;
    case CmState::RepSent:
    case CmState::MraRepRcvd:
      rej(RejectReason::ConsumerDefined);
      enter_timewait(*c, now);
      return CmResult::ok;
    case CmState::Established:
      send_once(c->peer,
                CmMessage{.transaction_id = own_tid(*c),
                          .body = Dreq{.local_comm_id = c->local_id,
                                       .remote_comm_id = c->remote_id,
                                       .remote_qpn_eecn = c->remote_qpn}},
                now);
      enter_timewait(*c, now);
      return CmResult::ok;
    case CmState::DreqSent:
      enter_timewait(*c, now);
      return CmResult::ok;
    case CmState::DreqRcvd:
      send_once(c->peer,
                CmMessage{.transaction_id = c->dreq_tid,
                          .body = Drep{.local_comm_id = c->local_id, .remote_comm_id = c->remote_id}},
                now);
      enter_timewait(*c, now);
      return CmResult::ok;
    case CmState::Timewait:
      return CmResult::ok;  // freed when timewait ends
    case CmState::SidrReqRcvd:  // cm_reject_sidr_req
      send_once(c->peer,
                CmMessage{.transaction_id = c->req_tid,
                          .body = SidrRep{.request_id = c->remote_id.value(),
                                          .status = SidrStatus::Rejected,
                                          .service_id = c->service_id}},
                now);
      break;
    case CmState::SidrReqSent:
    case CmState::Idle:
      break;
  }
  erase_connection(id.value());
  return CmResult::ok;
}

// cm_destroy_id(-ENOMEM) in REQ_RCVD: the passive side had no room for the request (a full
// listen backlog) and sends no REJ, so that the peer's resend of the REQ may find room.
CmResult ConnectionManager::abandon(ConnectionId id, Instant now) {
  Connection* c = find(id);
  if (c == nullptr || c->destroyed) return CmResult::no_such_connection;
  if (!req_received(c->state)) return destroy(id, now);
  c->destroyed = true;
  to_idle(*c);
  erase_connection(id.value());
  return CmResult::ok;
}

// ib_cm_notify(IB_EVENT_COMM_EST): in REP_SENT as good as the RTU; elsewhere nothing to do.
CmResult ConnectionManager::notify_communication_established(ConnectionId id, Instant) {
  Connection* c = find(id);
  if (c == nullptr) return CmResult::no_such_connection;
  if (!waiting_for_rtu(c->state)) return c->state == CmState::Established ? CmResult::ok : CmResult::invalid_state;
  set_state(*c, CmState::Established);
  c->deadline.reset();
  emit_event(*c, CmEvent{.type = CmEventType::Established});
  return CmResult::ok;
}

// --- Time ----------------------------------------------------------------------------------------

// O(log n) per deadline, nothing per connection without one (an established connection
// has none): connections_ is never scanned.
std::optional<Instant> ConnectionManager::next_deadline() const {
  while (!due_.empty() && stale(due_.top())) due_.pop();
  std::optional<Instant> next;
  if (!due_.empty()) next = due_.top().first;
  if (!held_.empty() && (!next || held_.front().until < *next)) next = held_.front().until;
  return next;
}

void ConnectionManager::advance(Instant now) {
  expire_held(now);
  std::vector<std::uint32_t> due;
  while (!due_.empty() && due_.top().first <= now) {
    if (!stale(due_.top())) due.push_back(due_.top().second);
    due_.pop();
  }
  // Each looked up again: an event handler may have destroyed one meanwhile.
  for (std::uint32_t id : due) {
    auto it = connections_.find(id);
    if (it == connections_.end() || !it->second.deadline || *it->second.deadline > now) continue;
    Connection& c = it->second;
    if (c.state == CmState::Timewait) {
      const Connection leaving = c;
      erase_connection(id);  // the comm ID is free
      if (observer_ != nullptr) observer_->on_cm_transition(leaving.local_id, CmState::Timewait, CmState::Idle);
      emit_event(leaving, CmEvent{.type = CmEventType::TimewaitExit});
      continue;
    }
    if (c.retries_left > 0) {  // the MAD layer's retry: the same bytes again
      --c.retries_left;
      ++counters_.resends;
      arm(c, now + c.interval);
      transmit(c.peer, MadSpan{c.resend_mad}, now);
      continue;
    }
    on_timeout(c, now);
  }
}

// cm_process_send_error: out of retries.
void ConnectionManager::on_timeout(Connection& c, Instant now) {
  ++counters_.timeouts;
  c.deadline.reset();
  switch (c.state) {
    case CmState::ReqSent:
    case CmState::MraReqRcvd:
    case CmState::RepSent:
    case CmState::MraRepRcvd:
    case CmState::SidrReqSent:
      to_idle(c);
      emit_event(c, CmEvent{.type = CmEventType::Unreachable, .status = kStatusTimedOut});
      break;
    case CmState::DreqSent:
      enter_timewait(c, now);
      emit_event(c, CmEvent{.type = CmEventType::Disconnected, .status = kStatusTimedOut});
      break;
    default:
      break;
  }
}

// --- Queries -------------------------------------------------------------------------------------

std::optional<CmState> ConnectionManager::state(ConnectionId id) const {
  const Connection* c = find(id);
  if (c == nullptr) return std::nullopt;
  return c->state;
}

// cm_init_qp_init_attr, cm_init_qp_rtr_attr, cm_init_qp_rts_attr.
std::optional<CmQpAttributes> ConnectionManager::qp_attributes(ConnectionId id, QpState qp_state) const {
  const Connection* c = find(id);
  if (c == nullptr) return std::nullopt;
  const CmState s = c->state;
  const bool handshake_or_up = req_received(s) || rep_received(s) || waiting_for_rtu(s) ||
                               s == CmState::Established;
  CmQpAttributes a{.state = qp_state};
  switch (qp_state) {
    case QpState::Init:
      if (s == CmState::Idle || s == CmState::Timewait || s == CmState::DreqSent || s == CmState::DreqRcvd ||
          s == CmState::SidrReqSent || s == CmState::SidrReqRcvd) {
        return std::nullopt;
      }
      a.access = access::kRemoteWrite;
      if (c->responder_resources > 0) a.access |= access::kRemoteRead | access::kRemoteAtomic;
      return a;
    case QpState::Rtr:
      if (!handshake_or_up) return std::nullopt;
      a.path_mtu = c->path_mtu;
      a.dest_qpn = c->remote_qpn;
      a.rq_psn = c->local_psn;
      a.max_dest_rd_atomic = c->responder_resources;
      a.min_rnr_timer = 0;
      return a;
    case QpState::Rts:
      if (!handshake_or_up) return std::nullopt;
      a.sq_psn = c->remote_psn;
      a.retry_count = c->retry_count;
      a.rnr_retry_count = c->rnr_retry_count;
      a.max_rd_atomic = c->initiator_depth;
      a.timeout = kAvTimeout;
      return a;
    default:
      return std::nullopt;
  }
}

}  // namespace rrdma::rocev2::cm
