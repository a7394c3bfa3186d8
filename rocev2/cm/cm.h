// The communication manager (IBA Vol 1 ch. 12, as Linux 6.1's drivers/infiniband/core/cm.c
// behaves) as a pure state machine: one ConnectionManager per vnic takes the CM MADs that
// arrive on QP 1 (already parsed, with their source address), the calls of the application
// side (listen, connect, accept, reject, disconnect, destroy) and time; it answers with MADs
// (through CmMadSink, which the daemon wires to GsiEndpoint::send) and events (through
// CmEventSink, which the daemon will turn into rdma_cm events). No clock is read and nothing
// is sent directly: timers are "call me again at" deadlines (next_deadline, advance).
//
// RC connections, and SIDR for UD; LAP/APR (alternate paths) are not done (docs/RDMA_CM.md,
// "The connection manager"). The private data is opaque here: the CMA header inside it belongs to
// the rdma_cm layer above (cma.h).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "rocev2/cm/mad.h"
#include "rocev2/gsi.h"
#include "rocev2/types.h"
#include "rocev2/verbs_codes.h"
#include "stack/addresses.h"
#include "stack/time.h"

namespace rrdma::rocev2::cm {

// --- Timers (memo §3.7, Linux 6.1 cm.c and cma.c) -----------------------------------------

// cm_convert_to_ms: 4.096 us * 2^t, rounded the kernel's way to 2^(t-8) ms.
constexpr std::chrono::milliseconds cm_timeout_ms(std::uint8_t t) {
  return std::chrono::milliseconds{std::int64_t{1} << (t > 8 ? t - 8 : 0)};
}
inline constexpr std::uint8_t kCmResponseTimeout = 20;  // CMA_CM_RESPONSE_TIMEOUT
inline constexpr std::uint8_t kMaxCmRetries = 15;       // CMA_MAX_CM_RETRIES
inline constexpr std::uint8_t kPacketLifetime = 18;     // CMA_IBOE_PACKET_LIFETIME
// av.timeout = packet lifetime + 1 (cm_init_av_by_path): the QP's ACK timeout, and timewait.
inline constexpr std::uint8_t kAvTimeout = kPacketLifetime + 1;
// The REQ's resend interval: the remote response timeout plus twice the packet lifetime.
inline constexpr Duration kReqResendInterval =
    2 * cm_timeout_ms(kPacketLifetime) + cm_timeout_ms(kCmResponseTimeout);  // 6144 ms
inline constexpr Duration kTimewait = cm_timeout_ms(kAvTimeout);                 // 2048 ms
// The MRA the delayed-MRA scheme sends: rdma_cm's CMA_CM_MRA_SETTING (IB_CM_MRA_FLAG_DELAY | 24).
inline constexpr std::uint8_t kMraServiceTimeout = 24;
// rdma_cm's status for a handshake or DREQ that ran out of retries (-ETIMEDOUT).
inline constexpr int kStatusTimedOut = -110;
// A REQ for a service nobody listens on waits this long for a listener before its REJ 8
// (docs/RDMA_CM.md, "A REQ just before its listener"), at most kMaxHeldReqs at a time.
inline constexpr Duration kNoListenerHold = std::chrono::milliseconds(1000);
inline constexpr std::size_t kMaxHeldReqs = 64;

// --- States and events --------------------------------------------------------------------

// One connection's state, named as IBA ch. 12 and enum ib_cm_state (ib_cm.h) name them.
enum class CmState : std::uint8_t {
  Idle,
  ReqSent,      // active: REQ out, waiting for REP
  ReqRcvd,      // passive: REQ in, the user has not answered
  MraReqSent,   // passive: as ReqRcvd, with a (delayed) MRA armed or sent
  MraReqRcvd,   // active: the peer MRAed our REQ: waiting longer
  RepSent,      // passive: REP out, waiting for RTU
  MraRepRcvd,   // passive: the peer MRAed our REP
  RepRcvd,      // active: REP in, the user has not answered
  MraRepSent,   // active: as RepRcvd, with a (delayed) MRA armed or sent
  Established,
  DreqSent,
  DreqRcvd,
  Timewait,
  SidrReqSent,  // UD: SIDR_REQ out, waiting for the SIDR_REP
  SidrReqRcvd,  // UD: SIDR_REQ in, the user has not answered
};
std::string_view to_string(CmState s);

enum class CmEventType : std::uint8_t {
  ConnectRequest,   // passive: a REQ for a service we listen on
  ConnectResponse,  // active: the REP
  Established,      // passive: the RTU; active: once accept() sent the RTU
  Rejected,         // a REJ (reason)
  Unreachable,      // REQ or REP out of retries (status -110)
  Disconnected,     // a DREQ or DREP arrived, or our DREQ ran out of retries (status -110)
  TimewaitExit,     // timewait is over: the comm ID is free again
  SidrRequest,      // passive, UD: a SIDR_REQ for a service we listen on
  SidrResponse,     // active, UD: the SIDR_REP (status, QPN, Q_Key)
};
std::string_view to_string(CmEventType t);

// What the handle of a connection is: its local communication ID.
using ConnectionId = CommId;

struct CmEvent {
  CmEventType type{};
  ConnectionId connection{};
  int status = 0;                        // kStatusTimedOut for the timeouts, else 0
  RejectReason reason{};                 // Rejected
  std::uint64_t service_id = 0;          // ConnectRequest: the listener's service ID
  stack::Ipv4Address peer{};
  // ConnectRequest (from the REQ) and ConnectResponse (from the REP): the peer's side.
  Qpn peer_qpn{};
  Psn peer_starting_psn{};
  std::uint8_t responder_resources = 0;  // the peer's
  std::uint8_t initiator_depth = 0;      // the peer's
  std::uint8_t retry_count = 0;          // ConnectRequest
  std::uint8_t rnr_retry_count = 0;
  PathMtu path_mtu = PathMtu::Mtu1024;   // ConnectRequest
  SidrStatus sidr_status = SidrStatus::Valid;  // SidrResponse
  Qkey qkey{};                           // SidrResponse: the peer QP's (peer_qpn)
  std::vector<std::uint8_t> private_data{};  // the whole field of the message, as received
};

// Where MADs go: the daemon calls GsiEndpoint::send. The sink must not call back into the
// manager (a MAD to ourselves, both ends on one vnic, is queued and received later).
class CmMadSink {
 public:
  virtual ~CmMadSink() = default;
  virtual void send_cm_mad(stack::Ipv4Address destination, MadSpan mad, Instant now) = 0;
};

// Where events go. A sink may call back into the manager (accept from ConnectRequest, ...).
class CmEventSink {
 public:
  virtual ~CmEventSink() = default;
  virtual void on_cm_event(const CmEvent& event) = 0;
};

// Sees each state change of a connection: a trace line for `rrdma-vnic trace`. A connection
// whose timewait ends is reported as TIMEWAIT -> IDLE as it is freed.
class CmObserver {
 public:
  virtual ~CmObserver() = default;
  virtual void on_cm_transition(ConnectionId c, CmState from, CmState to) = 0;
};
// "CM conn 0x10000000 REQ_SENT -> MRA_REP_SENT"
std::string describe_transition(ConnectionId c, CmState from, CmState to);

// --- The application's calls --------------------------------------------------------------

enum class CmResult : std::uint8_t {
  ok,
  address_in_use,         // listen: the service ID is taken (EADDRINUSE)
  not_listening,          // unlisten
  no_such_connection,     // an unknown (or already freed) connection ID
  invalid_state,          // the call makes no sense in the connection's state (EINVAL)
  private_data_too_long,  // more than the message's field holds
  no_comm_id,             // every comm ID is in use
};
std::string_view to_string(CmResult r);

struct ConnectParams {
  stack::Ipv4Address destination{};
  std::uint64_t service_id = 0;
  Qpn local_qpn{};
  Psn starting_psn{};                 // the PSN we expect to receive (our rq_psn)
  std::uint8_t responder_resources = 0;
  std::uint8_t initiator_depth = 0;
  std::uint8_t retry_count = 7;       // 3 bits
  std::uint8_t rnr_retry_count = 7;   // 3 bits
  PathMtu path_mtu = PathMtu::Mtu1024;
  std::uint32_t flow_label = 0;       // rdma_cm: (sport * 31 + dport) & 0xFFFFF
  ByteSpan private_data{};              // up to 92 bytes (the CMA header included)
};

// Service ID resolution, for UD (IBA 12.11): one SIDR_REQ, one SIDR_REP.
struct SidrParams {
  stack::Ipv4Address destination{};
  std::uint64_t service_id = 0;
  ByteSpan private_data{};              // up to 216 bytes (the CMA header included)
};

struct SidrReplyParams {
  SidrStatus status = SidrStatus::Valid;
  Qpn qpn{};
  Qkey qkey{};                        // rdma_cm: RDMA_UDP_QKEY 0x01234567
  ByteSpan private_data{};              // up to 136 bytes
};

struct AcceptParams {
  Qpn local_qpn{};                    // passive only
  Psn starting_psn{};                 // passive only: the PSN we expect to receive
  std::uint8_t responder_resources = 0;
  std::uint8_t initiator_depth = 0;
  std::uint8_t rnr_retry_count = 7;   // passive only
  ByteSpan private_data{};              // REP: up to 196 bytes; RTU: up to 224
};

// The attributes the kernel's cm_init_qp_{init,rtr,rts}_attr give a QP (memo §3.8). Only
// the fields of the asked state mean anything.
struct CmQpAttributes {
  QpState state{};
  std::uint32_t access = 0;               // INIT
  PathMtu path_mtu = PathMtu::Mtu1024;    // RTR
  Qpn dest_qpn{};                         // RTR
  Psn rq_psn{};                           // RTR: our own starting PSN
  std::uint8_t max_dest_rd_atomic = 0;    // RTR: our responder resources
  std::uint8_t min_rnr_timer = 0;         // RTR
  Psn sq_psn{};                           // RTS: the peer's starting PSN
  std::uint8_t retry_count = 0;           // RTS
  std::uint8_t rnr_retry_count = 0;       // RTS
  std::uint8_t max_rd_atomic = 0;         // RTS: our initiator depth
  std::uint8_t timeout = 0;               // RTS: av.timeout, 19
  bool operator==(const CmQpAttributes&) const = default;
};

struct CmConfig {
  std::uint64_t local_ca_guid = 0;     // the node GUID
  stack::Ipv4Address local_address{};  // for the REQ's GIDs (set_local_address follows a netdev's)
  std::uint32_t tid_high = 0;          // the MAD agent's hi_tid: TID = hi_tid << 32 | local comm ID, its bytes reversed (as Linux on x86)
  std::uint32_t first_comm_id = 1;     // random in the daemon; the IDs count up from it, cyclic
  bool delayed_mra = true;             // rdma_cm's IB_CM_MRA_FLAG_DELAY: MRA only on a duplicate
};

// The nine CM messages, in the order of CmBody and of their attribute IDs (0x10-0x18).
inline constexpr std::size_t kCmMessageKinds = std::variant_size_v<CmBody>;
static_assert(kCmMessageKinds == 9);
// 0 for REQ ... 8 for SIDR_REP; nullopt for any other attribute.
std::optional<std::size_t> message_index(AttributeId id);

struct CmCounters {
  std::uint64_t rx_mads = 0;
  std::uint64_t rx_unparsable = 0;
  std::uint64_t rx_unmatched = 0;      // no connection with those comm IDs, or a wrong state
  std::uint64_t rx_duplicates = 0;     // duplicate REQ/REP/DREQ, answered or dropped
  std::uint64_t rx_wrong_qpn = 0;      // DREQ whose remote QPN is not ours
  std::uint64_t rx_unsupported = 0;    // SIDR and the rest of what is not done
  std::uint64_t req_held = 0;          // REQs that found no listener and waited for one
  std::uint64_t req_held_served = 0;   // ... and found it within kNoListenerHold
  // A REQ or REP naming the QP of a live connection (a stale connection) from an address
  // that is not that connection's peer: refused, the live connection left alone.
  std::uint64_t rx_stale_foreign = 0;
  std::uint64_t tx_mads = 0;
  std::uint64_t resends = 0;
  std::uint64_t timeouts = 0;
  std::array<std::uint64_t, kCmMessageKinds> rx_by_message{};  // by message_index
  std::array<std::uint64_t, kCmMessageKinds> tx_by_message{};  // resends included
};
// "rx_mads", ..., "timeouts", then "rx_req", "tx_req", ... "rx_sidr_rep", "tx_sidr_rep".
std::vector<std::pair<std::string, std::uint64_t>> named(const CmCounters& counters);

class ConnectionManager final : public MadHandler {
 public:
  ConnectionManager(const CmConfig& config, CmMadSink& mads, CmEventSink& events);
  // The port's address changed (a netdev's): REQs from now on carry it in their GIDs.
  void set_local_address(stack::Ipv4Address address) { config_.local_address = address; }
  ConnectionManager(const ConnectionManager&) = delete;
  ConnectionManager& operator=(const ConnectionManager&) = delete;

  // nullptr for none; must outlive the manager or be reset first.
  void set_observer(CmObserver* observer) { observer_ = observer; }

  // --- from the wire
  // A MAD from GsiEndpoint: parsed here; one that does not parse is counted and dropped.
  void on_mad(const ReceivedMad& mad, Instant now) override;
  void receive(stack::Ipv4Address source, const CmMessage& message, Instant now);

  // --- from the application
  // Also hands the REQs held for `service_id` (kNoListenerHold) to the new listener, now.
  CmResult listen(std::uint64_t service_id, Instant now = Instant{});
  CmResult unlisten(std::uint64_t service_id);
  // Sends a REQ; the connection's ID is written to `out`.
  CmResult connect(const ConnectParams& params, Instant now, ConnectionId& out);
  // Passive, after ConnectRequest: sends the REP. Active, after ConnectResponse: sends the RTU
  // (rdma_accept on the active side, as librdmacm calls it once its QP is in RTS).
  CmResult accept(ConnectionId c, const AcceptParams& params, Instant now);
  // Rejects a REQ (passive) or a REP (active) with reason 28, consumer defined.
  CmResult reject(ConnectionId c, ByteSpan private_data, Instant now);
  // Established: sends a DREQ. After a DREQ arrived: sends the DREP and enters timewait.
  CmResult disconnect(ConnectionId c, ByteSpan private_data, Instant now);
  // The application lets go of the connection: what the kernel's cm_destroy_id sends in each
  // state (REJ, DREQ, DREP) is sent, no event follows, and the comm ID is freed now, or when
  // timewait ends.
  CmResult destroy(ConnectionId c, Instant now);
  // A REQ the application side has no room for (a full backlog): forgotten without a REJ, as
  // the kernel does, so that the peer's resend may find room. In any other state: destroy().
  CmResult abandon(ConnectionId c, Instant now);
  // UD: sends a SIDR_REQ (resent every 4096 ms, 15 times, then UNREACHABLE -110); the
  // SIDR_REP comes back as SidrResponse.
  CmResult sidr_request(const SidrParams& params, Instant now, ConnectionId& out);
  // UD, after SidrRequest: sends the SIDR_REP.
  CmResult sidr_reply(ConnectionId c, const SidrReplyParams& params, Instant now);

  // The QP of a connection in REP_SENT received its first packet before the RTU did (the
  // IBV_EVENT_COMM_EST that ib_cm_notify turns into ESTABLISHED): the RTU was lost or is late.
  CmResult notify_communication_established(ConnectionId c, Instant now);

  // --- time
  std::optional<Instant> next_deadline() const;
  void advance(Instant now);

  // --- queries
  std::optional<CmState> state(ConnectionId c) const;
  // What cm_init_qp_*_attr returns for a QP going to `qp_state` (Init, Rtr or Rts); nullopt
  // where the kernel answers EINVAL (a state in which the value is not known yet).
  std::optional<CmQpAttributes> qp_attributes(ConnectionId c, QpState qp_state) const;
  std::size_t connection_count() const { return connections_.size(); }
  std::size_t held_request_count() const { return held_.size(); }
  const CmCounters& counters() const { return counters_; }
  // Entries of the lookup indexes (by peer comm ID, by peer QP, by SIDR request): what a
  // received MAD is matched against instead of every connection.
  std::size_t index_entries() const { return by_remote_.size() + by_peer_qp_.size() + by_sidr_.size(); }

 private:
  // An index key: (the peer's CA GUID or address, its comm ID, QPN or request ID). An index
  // is a set of (key, local comm ID), so that a lookup is one lower_bound, O(log n), and two
  // connections with one key (never in a run that follows the rules) both stay findable.
  using IndexKey = std::pair<std::uint64_t, std::uint32_t>;
  using Index = std::set<std::pair<IndexKey, std::uint32_t>>;

  struct Connection {
    CmState state = CmState::Idle;
    bool active = false;
    bool destroyed = false;            // no more events; freed at the end of timewait
    CommId local_id{};
    CommId remote_id{};
    std::uint64_t remote_ca_guid = 0;
    stack::Ipv4Address peer{};
    std::uint64_t service_id = 0;
    Qpn local_qpn{};
    Qpn remote_qpn{};
    Psn local_psn{};                   // ours: what we expect to receive
    Psn remote_psn{};                  // the peer's: what we send from
    std::uint8_t responder_resources = 0;
    std::uint8_t initiator_depth = 0;
    std::uint8_t retry_count = 0;
    std::uint8_t rnr_retry_count = 0;
    PathMtu path_mtu = PathMtu::Mtu1024;
    std::uint64_t req_tid = 0;         // REP, RTU, REJ, MRA echo it
    std::uint64_t dreq_tid = 0;        // the DREP echoes it
    Duration timeout{};                // the response timeout: resends of REP and DREQ
    std::uint8_t max_cm_retries = kMaxCmRetries;
    // The message being resent (REQ, REP or DREQ), and the last reply to repeat on a
    // duplicate (the RTU, the MRA, the DREP).
    std::array<std::uint8_t, kMadLength> resend_mad{};
    std::array<std::uint8_t, kMadLength> reply_mad{};
    bool have_reply = false;
    std::optional<Instant> deadline;
    Duration interval{};
    std::uint8_t retries_left = 0;
    // Where the connection is in the indexes now (reindex keeps these true).
    std::optional<IndexKey> remote_key;
    std::optional<IndexKey> peer_qp_key;
    std::optional<IndexKey> sidr_key;
  };

  std::uint64_t own_tid(const Connection& c) const;
  std::optional<CommId> allocate_comm_id();
  Connection* find(ConnectionId c);
  const Connection* find(ConnectionId c) const;
  Connection* find_remote(CommId remote_id, std::uint64_t remote_ca_guid);
  // A connection whose peer QP (QPN, CA GUID) is known and not yet in timewait.
  Connection* find_live_peer_qp(Qpn qpn, std::uint64_t guid);
  // An unanswered SIDR_REQ: its request ID from that address.
  Connection* find_sidr(std::uint32_t request_id, stack::Ipv4Address source);
  Connection* lookup(const Index& index, IndexKey key);
  // Puts `c` in the indexes its state and peer fields call for, and out of the others; called
  // on every state change (set_state), so the peer fields are set before the state.
  void reindex(Connection& c);
  static void move_key(Index& index, std::optional<IndexKey>& held, std::optional<IndexKey> wanted, std::uint32_t id);
  Connection& add_connection(CommId id);
  void erase_connection(std::uint32_t id);
  // A REQ or REP from `source` names the QP of `old`, a live connection: the IBA's stale
  // connection. Refused (REJ 10, counted) in any case; `old` is disconnected only when
  // `source` is its peer's address.
  void refuse_stale(stack::Ipv4Address source, const CmMessage& m, CommId remote, MessageRejected what, Connection& old,
                    Instant now);
  // The connection a reply is for: its remote comm ID field names us, and, when the message
  // says who sent it (`local`, non-zero), that is our peer.
  Connection* match(CommId our_id, std::optional<CommId> their_id);

  // Emits `m` into `buffer` and sends it; false (counted) if the value cannot be emitted.
  bool send(stack::Ipv4Address to, const CmMessage& m, std::array<std::uint8_t, kMadLength>& buffer, Instant now);
  void transmit(stack::Ipv4Address to, MadSpan mad, Instant now);  // every MAD leaves here
  void send_once(stack::Ipv4Address to, const CmMessage& m, Instant now);
  void arm_resend(Connection& c, Duration interval, std::uint8_t retries, Instant now);
  using Due = std::pair<Instant, std::uint32_t>;  // a deadline and the local comm ID it is of
  void arm(Connection& c, Instant when);
  bool stale(const Due& entry) const;
  void enter_timewait(Connection& c, Instant now);
  void set_state(Connection& c, CmState to);
  void to_idle(Connection& c);
  void emit_event(const Connection& c, CmEvent event);
  void send_mra(Connection& c, MessageMraed what, Instant now);
  Rej rej_for(const Connection& c, RejectReason reason) const;
  void issue_rej(stack::Ipv4Address to, const CmMessage& received, CommId remote, RejectReason reason,
                 MessageRejected what, Instant now);

  void on_req(stack::Ipv4Address source, const CmMessage& m, const Req& req, Instant now);
  // A REQ nobody listens for: held (true) or, when kMaxHeldReqs are, not (the REJ 8 then).
  bool hold(stack::Ipv4Address source, const CmMessage& m, const Req& req, Instant now);
  void reject_no_listener(stack::Ipv4Address source, const CmMessage& m, const Req& req, Instant now);
  void expire_held(Instant now);
  bool forget_held(CommId remote_id, std::uint64_t guid);
  void on_mra(const Mra& mra, Instant now);
  void on_rej(const Rej& rej, Instant now);
  void on_rep(stack::Ipv4Address source, const CmMessage& m, const Rep& rep, Instant now);
  void on_rtu(const Rtu& rtu, Instant now);
  void on_dreq(stack::Ipv4Address source, const CmMessage& m, const Dreq& dreq, Instant now);
  void on_drep(const Drep& drep, Instant now);
  void on_sidr_req(stack::Ipv4Address source, const CmMessage& m, const SidrReq& req, Instant now);
  void on_sidr_rep(const SidrRep& rep, Instant now);
  void on_timeout(Connection& c, Instant now);

  CmConfig config_;
  CmMadSink& mads_;
  CmEventSink& events_;
  CmObserver* observer_ = nullptr;
  std::set<std::uint64_t> listeners_;
  // REQs waiting for a listener, as received (bytes), oldest first: one hold time for all,
  // so the front expires first.
  struct HeldReq {
    Instant until{};
    stack::Ipv4Address source{};
    std::uint64_t service_id = 0;
    std::uint64_t remote_ca_guid = 0;
    CommId remote_id{};
    std::array<std::uint8_t, kMadLength> mad{};
  };
  std::deque<HeldReq> held_;
  std::map<std::uint32_t, Connection> connections_;  // by local comm ID
  Index by_remote_;   // passive RC connections not IDLE: (peer CA GUID, peer comm ID)
  Index by_peer_qp_;  // connections whose peer QP is known, not yet in timewait: (GUID, QPN)
  Index by_sidr_;     // SIDR_REQ_RCVD: (peer address, request ID)
  // Every deadline set, earliest first (arm); stale entries are dropped at the front.
  mutable std::priority_queue<Due, std::vector<Due>, std::greater<>> due_;
  std::uint32_t next_comm_id_;
  CmCounters counters_;
};

}  // namespace rrdma::rocev2::cm
