// The connection manager (rocev2/cm/cm.h) at the value level: two managers joined by a
// deterministic, seeded, lossy MAD link that carries every MAD as bytes (emit, then parse on
// the other side), and one manager alone fed hand-made MADs for the bad cases. Timers are
// the kernel's (memo §3.7): REQ 6144 ms x15, REP 4096 ms x15, DREQ 6144/4096 ms x15,
// timewait 2048 ms.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "rocev2/cm/cm.h"
#include "rocev2/cm/cma.h"
#include "tests/sim/random.h"
#include "tests/sim/seeds.h"

namespace rrdma::rocev2::cm {
namespace {

using std::chrono::milliseconds;

const stack::Ipv4Address kAddressA{0x0A420001};  // 10.66.0.1
const stack::Ipv4Address kAddressB{0x0A420002};  // 10.66.0.2
constexpr std::uint64_t kGuidA = 0x0200'5EFF'FE00'0001;
constexpr std::uint64_t kGuidB = 0x0200'5EFF'FE00'0002;
constexpr std::uint64_t kService = ip_service_id(PortSpace::Tcp, 7174);  // rping's

Instant at_ms(std::int64_t ms) { return Instant{} + milliseconds(ms); }

// A MAD as it left a manager, kept as bytes and parsed back.
struct SentMad {
  stack::Ipv4Address to{};
  Instant at{};
  std::array<std::uint8_t, kMadLength> bytes{};
  CmMessage parsed() const {
    CmMessage m;
    REQUIRE(parse_cm_mad(ByteSpan{bytes}, m) == CmError::none);
    return m;
  }
  AttributeId attribute() const { return attribute_id(parsed().body); }
};

// Parses bytes the caller keeps alive (the message borrows them).
CmMessage parse_owned(const std::array<std::uint8_t, kMadLength>& bytes) {
  CmMessage m;
  REQUIRE(parse_cm_mad(ByteSpan{bytes}, m) == CmError::none);
  return m;
}

struct Recorder final : CmMadSink, CmEventSink {
  std::deque<SentMad> sent;
  std::vector<CmEvent> events;
  std::function<void(const CmEvent&)> on_event;
  std::function<void(const SentMad&)> on_send;

  void send_cm_mad(stack::Ipv4Address to, MadSpan mad, Instant now) override {
    SentMad s{.to = to, .at = now};
    std::copy(mad.begin(), mad.end(), s.bytes.begin());
    sent.push_back(s);
    if (on_send) on_send(sent.back());
  }
  void on_cm_event(const CmEvent& e) override {
    events.push_back(e);
    if (on_event) on_event(e);
  }
  std::vector<CmEventType> event_types() const {
    std::vector<CmEventType> t;
    for (const auto& e : events) t.push_back(e.type);
    return t;
  }
  std::size_t count(AttributeId id) const {
    std::size_t n = 0;
    for (const auto& s : sent) n += s.attribute() == id;
    return n;
  }
};

CmConfig config(std::uint64_t guid, stack::Ipv4Address address, std::uint32_t first_id, bool delayed_mra = true) {
  return CmConfig{.local_ca_guid = guid,
                  .local_address = address,
                  .tid_high = 0x4711,
                  .first_comm_id = first_id,
                  .delayed_mra = delayed_mra};
}

const std::array<std::uint8_t, 4> kReqData{1, 2, 3, 4};
const std::array<std::uint8_t, 3> kRepData{9, 8, 7};

ConnectParams connect_params() {
  return ConnectParams{.destination = kAddressB,
                       .service_id = kService,
                       .local_qpn = Qpn{0x11},
                       .starting_psn = Psn{1000},
                       .responder_resources = 4,
                       .initiator_depth = 2,
                       .retry_count = 7,
                       .rnr_retry_count = 6,
                       .path_mtu = PathMtu::Mtu1024,
                       .flow_label = 0x12345,
                       .private_data = ByteSpan{kReqData}};
}

AcceptParams accept_params_b() {
  return AcceptParams{.local_qpn = Qpn{0x22},
                      .starting_psn = Psn{5000},
                      .responder_resources = 3,
                      .initiator_depth = 1,
                      .rnr_retry_count = 5,
                      .private_data = ByteSpan{kRepData}};
}

// Two managers, A (active) and B (passive), and a link that delays each MAD by 1 ms and loses
// it with the given probability, driven by one clock over the link's queue and both
// managers' deadlines.
class Pair {
 public:
  explicit Pair(std::uint64_t seed, std::uint32_t loss_per_million = 0, bool auto_answer = true)
      : rng_(seed),
        loss_(loss_per_million),
        a_(config(kGuidA, kAddressA, 0x1000'0000), wire_a, wire_a),
        b_(config(kGuidB, kAddressB, 0x2000'0000), wire_b, wire_b) {
    wire_a.on_send = [this](const SentMad& s) { carry(s, b_, kAddressA); };
    wire_b.on_send = [this](const SentMad& s) { carry(s, a_, kAddressB); };
    if (auto_answer) {
      wire_b.on_event = [this](const CmEvent& e) {
        if (e.type == CmEventType::ConnectRequest) REQUIRE(b_.accept(e.connection, accept_params_b(), now_) == CmResult::ok);
        if (e.type == CmEventType::Disconnected && b_.state(e.connection) == CmState::DreqRcvd) {
          REQUIRE(b_.disconnect(e.connection, {}, now_) == CmResult::ok);
        }
      };
      wire_a.on_event = [this](const CmEvent& e) {
        if (e.type == CmEventType::ConnectResponse) REQUIRE(a_.accept(e.connection, AcceptParams{}, now_) == CmResult::ok);
      };
    }
  }

  ConnectionManager& a() { return a_; }
  ConnectionManager& b() { return b_; }
  Instant now() const { return now_; }
  void set_loss(std::uint32_t per_million) { loss_ = per_million; }

  // Runs until `done` holds or the clock passes `limit`; true if `done`.
  bool run_until(const std::function<bool()>& done, Instant limit) {
    while (!done()) {
      std::optional<Instant> next;
      const auto consider = [&](std::optional<Instant> t) {
        if (t && (!next || *t < *next)) next = t;
      };
      if (!in_flight_.empty()) consider(in_flight_.front().at);
      consider(a_.next_deadline());
      consider(b_.next_deadline());
      if (!next || *next > limit) return false;
      now_ = std::max(now_, *next);
      if (!in_flight_.empty() && in_flight_.front().at <= now_) {
        Flight f = in_flight_.front();
        in_flight_.pop_front();
        CmMessage m;
        REQUIRE(parse_cm_mad(ByteSpan{f.bytes}, m) == CmError::none);
        f.to->receive(f.from, m, now_);
      } else {
        a_.advance(now_);
        b_.advance(now_);
      }
    }
    return true;
  }

  Recorder wire_a;
  Recorder wire_b;

 private:
  struct Flight {
    Instant at;
    ConnectionManager* to;
    stack::Ipv4Address from;
    std::array<std::uint8_t, kMadLength> bytes;
  };

  void carry(const SentMad& s, ConnectionManager& to, stack::Ipv4Address from) {
    if (rng_.chance(loss_)) return;
    in_flight_.push_back(Flight{s.at + milliseconds(1), &to, from, s.bytes});
  }

  sim::Rng rng_;
  std::uint32_t loss_;
  Instant now_{};
  ConnectionManager a_;
  ConnectionManager b_;
  std::deque<Flight> in_flight_;  // constant latency: already in delivery order
};

bool has(const Recorder& r, CmEventType t) {
  for (const auto& e : r.events) if (e.type == t) return true;
  return false;
}

TEST_CASE("cm: connect, accept, RTU, DREQ, DREP and timewait end to end, MADs as bytes", "[cm]") {
  Pair p(1);
  REQUIRE(p.b().listen(kService) == CmResult::ok);
  ConnectionId ca;
  REQUIRE(p.a().connect(connect_params(), p.now(), ca) == CmResult::ok);
  REQUIRE(p.run_until([&] { return p.b().connection_count() == 1 && has(p.wire_b, CmEventType::Established); },
                      at_ms(100)));
  CHECK(p.a().state(ca) == CmState::Established);
  const ConnectionId cb = p.wire_b.events.at(0).connection;
  CHECK(p.b().state(cb) == CmState::Established);
  // REQ, REP, RTU and nothing else: no MRA in a clean run.
  CHECK(p.wire_a.sent.size() == 2);
  CHECK(p.wire_b.sent.size() == 1);
  CHECK(p.wire_a.sent[0].attribute() == AttributeId::Req);
  CHECK(p.wire_b.sent[0].attribute() == AttributeId::Rep);
  CHECK(p.wire_a.sent[1].attribute() == AttributeId::Rtu);

  // The REQ as the kernel's cm_format_req fills it over RoCE.
  const CmMessage req_msg = p.wire_a.sent[0].parsed();
  const auto& req = std::get<Req>(req_msg.body);
  // cm_form_tid on a little-endian kernel: the comm ID's bytes reversed (rxe's capture).
  const std::uint32_t id = ca.value();
  CHECK(req_msg.transaction_id ==
        ((std::uint64_t{0x4711} << 32) | (id >> 24 | (id >> 8 & 0xFF00) | (id << 8 & 0xFF0000) | id << 24)));
  CHECK(req.local_comm_id == ca);
  CHECK(req.local_ca_guid == kGuidA);
  CHECK(req.remote_cm_response_timeout == 20);
  CHECK(req.local_cm_response_timeout == 20);
  CHECK(req.max_cm_retries == 15);
  CHECK(req.primary_path.local_port_lid == 0xFFFF);
  CHECK(req.primary_path.local_ack_timeout == 19);
  CHECK(req.primary_path.flow_label == 0x12345);
  CHECK(req.primary_path.local_port_gid[15] == 1);
  CHECK(req.primary_path.remote_port_gid[10] == 0xFF);
  // REP and RTU echo the REQ's TID; matching is by comm IDs.
  const CmMessage rep_msg = p.wire_b.sent[0].parsed();
  CHECK(rep_msg.transaction_id == req_msg.transaction_id);
  CHECK(std::get<Rep>(rep_msg.body).remote_comm_id == ca);
  CHECK(std::get<Rep>(rep_msg.body).local_comm_id == cb);
  CHECK(p.wire_a.sent[1].parsed().transaction_id == req_msg.transaction_id);

  // The events carry the peer's QPN, PSN and private data.
  const CmEvent& request = p.wire_b.events.at(0);
  CHECK(request.type == CmEventType::ConnectRequest);
  CHECK(request.service_id == kService);
  CHECK(request.peer == kAddressA);
  CHECK(request.peer_qpn == Qpn{0x11});
  CHECK(request.peer_starting_psn == Psn{1000});
  CHECK(std::equal(kReqData.begin(), kReqData.end(), request.private_data.begin()));
  CHECK(request.private_data.size() == Req::kPrivateDataLength);
  const CmEvent& response = p.wire_a.events.at(0);
  CHECK(response.type == CmEventType::ConnectResponse);
  CHECK(response.peer_qpn == Qpn{0x22});
  CHECK(response.peer_starting_psn == Psn{5000});
  CHECK(std::equal(kRepData.begin(), kRepData.end(), response.private_data.begin()));

  // Data would flow here. Then A disconnects; B answers the DREQ with a DREP.
  REQUIRE(p.a().disconnect(ca, {}, p.now()) == CmResult::ok);
  CHECK(p.a().state(ca) == CmState::DreqSent);
  const Instant disconnect_at = p.now();
  REQUIRE(p.run_until([&] { return p.a().connection_count() == 0 && p.b().connection_count() == 0; }, at_ms(10'000)));
  CHECK(p.wire_a.event_types() == std::vector{CmEventType::ConnectResponse, CmEventType::Established,
                                              CmEventType::Disconnected, CmEventType::TimewaitExit});
  CHECK(p.wire_b.event_types() == std::vector{CmEventType::ConnectRequest, CmEventType::Established,
                                              CmEventType::Disconnected, CmEventType::TimewaitExit});
  const CmMessage dreq = p.wire_a.sent.at(2).parsed();
  CHECK(std::get<Dreq>(dreq.body).remote_qpn_eecn == Qpn{0x22});
  const CmMessage drep = p.wire_b.sent.at(1).parsed();
  CHECK(attribute_id(drep.body) == AttributeId::Drep);
  CHECK(drep.transaction_id == dreq.transaction_id);  // the DREP echoes the DREQ's TID
  // Both sides leave timewait 2048 ms after entering it (A on the DREP, B on sending it).
  CHECK(p.now() == disconnect_at + milliseconds(2 + 2048));
  // Counted by message, as `stats` will show them.
  const CmCounters& ac = p.a().counters();
  CHECK(ac.tx_by_message[*message_index(AttributeId::Req)] == 1);
  CHECK(ac.tx_by_message[*message_index(AttributeId::Rtu)] == 1);
  CHECK(ac.tx_by_message[*message_index(AttributeId::Dreq)] == 1);
  CHECK(ac.rx_by_message[*message_index(AttributeId::Rep)] == 1);
  CHECK(ac.rx_by_message[*message_index(AttributeId::Drep)] == 1);
  CHECK(ac.tx_mads == 3);
  CHECK(ac.rx_mads == 2);
  const auto names = named(ac);
  CHECK(std::ranges::find(names, std::pair<std::string, std::uint64_t>{"tx_req", 1}) != names.end());
  CHECK(std::ranges::find(names, std::pair<std::string, std::uint64_t>{"rx_sidr_rep", 0}) != names.end());
}

TEST_CASE("cm: the starting-PSN convention and the QP attributes of cm_init_qp_*_attr", "[cm]") {
  Pair p(2);
  REQUIRE(p.b().listen(kService) == CmResult::ok);
  ConnectionId ca;
  REQUIRE(p.a().connect(connect_params(), p.now(), ca) == CmResult::ok);
  REQUIRE(p.run_until([&] { return has(p.wire_b, CmEventType::Established); }, at_ms(100)));
  const ConnectionId cb = p.wire_b.events.at(0).connection;

  // Each side's starting PSN is the PSN it expects to receive.
  const auto a_rtr = p.a().qp_attributes(ca, QpState::Rtr);
  const auto a_rts = p.a().qp_attributes(ca, QpState::Rts);
  const auto b_rtr = p.b().qp_attributes(cb, QpState::Rtr);
  const auto b_rts = p.b().qp_attributes(cb, QpState::Rts);
  REQUIRE((a_rtr && a_rts && b_rtr && b_rts));
  CHECK(a_rtr->rq_psn == Psn{1000});
  CHECK(b_rts->sq_psn == Psn{1000});
  CHECK(b_rtr->rq_psn == Psn{5000});
  CHECK(a_rts->sq_psn == Psn{5000});
  CHECK(a_rtr->dest_qpn == Qpn{0x22});
  CHECK(b_rtr->dest_qpn == Qpn{0x11});
  CHECK(a_rtr->path_mtu == PathMtu::Mtu1024);
  CHECK(b_rtr->path_mtu == PathMtu::Mtu1024);
  CHECK(a_rtr->min_rnr_timer == 0);
  // Resources: B accepted with responder 3, initiator 1; A takes the REP's as the kernel does.
  CHECK(b_rtr->max_dest_rd_atomic == 3);
  CHECK(b_rts->max_rd_atomic == 1);
  CHECK(a_rtr->max_dest_rd_atomic == 1);  // REP initiator depth
  CHECK(a_rts->max_rd_atomic == 3);       // REP responder resources
  // Retries: A's own from the REQ, RNR retry from the REP; B's from the REQ.
  CHECK(a_rts->retry_count == 7);
  CHECK(a_rts->rnr_retry_count == 5);
  CHECK(b_rts->retry_count == 7);
  CHECK(b_rts->rnr_retry_count == 6);
  CHECK(a_rts->timeout == 19);
  CHECK(b_rts->timeout == 19);
  // INIT: REMOTE_WRITE, and READ | ATOMIC with responder resources.
  const auto a_init = p.a().qp_attributes(ca, QpState::Init);
  REQUIRE(a_init);
  CHECK(a_init->access == (access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic));
  CHECK(!p.a().qp_attributes(ca, QpState::Sqd));
}

TEST_CASE("cm: INIT access is REMOTE_WRITE alone without responder resources, RTR unknown before the REP", "[cm]") {
  Recorder wire;
  ConnectionManager a(config(kGuidA, kAddressA, 7), wire, wire);
  ConnectParams params = connect_params();
  params.responder_resources = 0;
  ConnectionId ca;
  REQUIRE(a.connect(params, at_ms(0), ca) == CmResult::ok);
  const auto init = a.qp_attributes(ca, QpState::Init);
  REQUIRE(init);
  CHECK(init->access == access::kRemoteWrite);
  CHECK(!a.qp_attributes(ca, QpState::Rtr));
  CHECK(!a.qp_attributes(ca, QpState::Rts));
}

TEST_CASE("cm: 30% MAD loss, the handshake and the disconnect finish by retries", "[cm][loss]") {
  std::uint64_t resends = 0;
  for (std::uint64_t seed : sim::seeds_to_run(18, 20)) {
    INFO(sim::replay_hint(seed));
    Pair p(seed, 300'000);
    REQUIRE(p.b().listen(kService) == CmResult::ok);
    ConnectionId ca;
    REQUIRE(p.a().connect(connect_params(), p.now(), ca) == CmResult::ok);
    REQUIRE(p.run_until([&] { return p.a().state(ca) == CmState::Established && has(p.wire_b, CmEventType::Established); },
                        at_ms(200'000)));
    REQUIRE(p.a().disconnect(ca, {}, p.now()) == CmResult::ok);
    REQUIRE(p.run_until([&] { return p.a().connection_count() == 0 && p.b().connection_count() == 0; },
                        p.now() + milliseconds(200'000)));
    CHECK(p.wire_a.event_types() == std::vector{CmEventType::ConnectResponse, CmEventType::Established,
                                                CmEventType::Disconnected, CmEventType::TimewaitExit});
    CHECK(p.wire_a.events[2].status == 0);
    CHECK(has(p.wire_b, CmEventType::TimewaitExit));
    CHECK(!has(p.wire_a, CmEventType::Unreachable));
    CHECK(!has(p.wire_b, CmEventType::Unreachable));
    CHECK(p.a().counters().timeouts == 0);
    CHECK(p.b().counters().timeouts == 0);
    resends += p.a().counters().resends + p.b().counters().resends;
  }
  CHECK(resends > 0);  // the losses were real, and retries recovered them
}

TEST_CASE("cm: a REQ for a service nobody listens on gets REJ 8, the active side REJECTED 8", "[cm]") {
  Pair p(3);
  ConnectionId ca;
  REQUIRE(p.a().connect(connect_params(), p.now(), ca) == CmResult::ok);
  REQUIRE(p.run_until([&] { return has(p.wire_a, CmEventType::Rejected); }, at_ms(10'000)));
  // Held for a listener for kNoListenerHold (1 s), then refused: no REQ resend meanwhile.
  CHECK(p.now() == at_ms(1) + kNoListenerHold + milliseconds(1));
  CHECK(p.wire_a.count(AttributeId::Req) == 1);
  CHECK(p.b().counters().req_held == 1);
  CHECK(p.b().held_request_count() == 0);
  REQUIRE(p.wire_b.sent.size() == 1);
  const CmMessage rej_msg = p.wire_b.sent[0].parsed();
  const auto& rej = std::get<Rej>(rej_msg.body);
  CHECK(rej.reason == RejectReason::InvalidServiceId);
  CHECK(rej.message_rejected == MessageRejected::Req);
  CHECK(rej.remote_comm_id == ca);
  CHECK(rej_msg.transaction_id == p.wire_a.sent[0].parsed().transaction_id);  // echoed
  CHECK(p.b().connection_count() == 0);
  CHECK(p.wire_a.events.at(0).reason == RejectReason::InvalidServiceId);
  CHECK(p.a().state(ca) == CmState::Idle);
  CHECK(!p.a().next_deadline());  // the REQ's resend timer is cancelled
  CHECK(p.a().destroy(ca, p.now()) == CmResult::ok);
  CHECK(p.a().connection_count() == 0);
}

TEST_CASE("cm: listen on a taken service ID is EADDRINUSE, reject sends REJ 28", "[cm]") {
  Pair p(4, 0, false);
  CHECK(p.b().listen(kService) == CmResult::ok);
  CHECK(p.b().listen(kService) == CmResult::address_in_use);
  ConnectionId ca;
  REQUIRE(p.a().connect(connect_params(), p.now(), ca) == CmResult::ok);
  REQUIRE(p.run_until([&] { return has(p.wire_b, CmEventType::ConnectRequest); }, at_ms(100)));
  const ConnectionId cb = p.wire_b.events.at(0).connection;
  CHECK(p.b().state(cb) == CmState::MraReqSent);  // the delayed MRA is armed, not sent
  CHECK(p.wire_b.sent.empty());
  REQUIRE(p.b().reject(cb, {}, p.now()) == CmResult::ok);
  REQUIRE(p.run_until([&] { return has(p.wire_a, CmEventType::Rejected); }, at_ms(100)));
  CHECK(p.wire_a.events.at(0).reason == RejectReason::ConsumerDefined);
  // The REJ lost, the REQ comes again: the rejected connection has forgotten it, so it is a
  // new request, as in the kernel.
  const std::array<std::uint8_t, kMadLength> req_bytes = p.wire_a.sent.at(0).bytes;
  p.b().receive(kAddressA, parse_owned(req_bytes), p.now());
  CHECK(p.wire_b.event_types() == std::vector{CmEventType::ConnectRequest, CmEventType::ConnectRequest});
  CHECK(p.wire_b.events[1].connection != cb);
  CHECK(p.b().unlisten(kService) == CmResult::ok);
  CHECK(p.b().unlisten(kService) == CmResult::not_listening);
}

TEST_CASE("cm: the REQ is resent every 6144 ms 15 times, then UNREACHABLE -110", "[cm][timers]") {
  Recorder wire;
  ConnectionManager a(config(kGuidA, kAddressA, 7), wire, wire);
  ConnectionId ca;
  REQUIRE(a.connect(connect_params(), at_ms(0), ca) == CmResult::ok);
  for (int k = 1; k <= 15; ++k) {
    REQUIRE(a.next_deadline() == at_ms(6144 * k));
    a.advance(at_ms(6144 * k) - milliseconds(1));
    CHECK(wire.sent.size() == static_cast<std::size_t>(k));
    a.advance(at_ms(6144 * k));
    CHECK(wire.sent.size() == static_cast<std::size_t>(k + 1));
    CHECK(wire.sent.back().bytes == wire.sent.front().bytes);  // the very same MAD
  }
  CHECK(wire.events.empty());
  REQUIRE(a.next_deadline() == at_ms(6144 * 16));
  a.advance(at_ms(6144 * 16));
  CHECK(wire.sent.size() == 16);
  REQUIRE(wire.events.size() == 1);
  CHECK(wire.events[0].type == CmEventType::Unreachable);
  CHECK(wire.events[0].status == kStatusTimedOut);
  CHECK(a.state(ca) == CmState::Idle);
  CHECK(!a.next_deadline());
}


// A REQ as a peer (comm ID 0x5000, GUID B) would send it, for feeding one manager by hand.
CmMessage peer_req(std::uint64_t tid = 0x99'0000'5000) {
  return CmMessage{.transaction_id = tid,
                   .body = Req{.local_comm_id = CommId{0x5000},
                               .service_id = kService,
                               .local_ca_guid = kGuidB,
                               .local_qpn = Qpn{0x33},
                               .responder_resources = 1,
                               .initiator_depth = 1,
                               .remote_cm_response_timeout = 20,
                               .starting_psn = Psn{77},
                               .local_cm_response_timeout = 20,
                               .retry_count = 7,
                               .path_packet_payload_mtu = PathMtu::Mtu4096,
                               .rnr_retry_count = 7,
                               .max_cm_retries = 15}};
}

TEST_CASE("cm: the REP is resent every 4096 ms 15 times without an RTU, then UNREACHABLE", "[cm][timers]") {
  Recorder wire;
  ConnectionManager b(config(kGuidA, kAddressA, 7), wire, wire);
  REQUIRE(b.listen(kService) == CmResult::ok);
  b.receive(kAddressB, peer_req(), at_ms(0));
  REQUIRE(wire.events.size() == 1);
  const ConnectionId cb = wire.events[0].connection;
  CHECK(wire.events[0].path_mtu == PathMtu::Mtu4096);
  REQUIRE(b.accept(cb, accept_params_b(), at_ms(10)) == CmResult::ok);
  CHECK(b.state(cb) == CmState::RepSent);
  for (int k = 1; k <= 15; ++k) {
    REQUIRE(b.next_deadline() == at_ms(10 + 4096 * k));
    b.advance(at_ms(10 + 4096 * k));
    CHECK(wire.count(AttributeId::Rep) == static_cast<std::size_t>(k + 1));
  }
  b.advance(at_ms(10 + 4096 * 16));
  CHECK(wire.count(AttributeId::Rep) == 16);
  REQUIRE(wire.events.size() == 2);
  CHECK(wire.events[1].type == CmEventType::Unreachable);
  CHECK(wire.events[1].status == kStatusTimedOut);
  CHECK(b.state(cb) == CmState::Idle);
}

TEST_CASE("cm: a duplicate REQ is dropped in REQ_RCVD, MRAed in MRA_REQ_SENT, REJ 10 in TIMEWAIT", "[cm][duplicates]") {
  SECTION("REQ_RCVD (no delayed MRA): dropped") {
    Recorder wire;
    ConnectionManager b(config(kGuidA, kAddressA, 7, /*delayed_mra=*/false), wire, wire);
    REQUIRE(b.listen(kService) == CmResult::ok);
    b.receive(kAddressB, peer_req(), at_ms(0));
    const ConnectionId cb = wire.events.at(0).connection;
    CHECK(b.state(cb) == CmState::ReqRcvd);
    b.receive(kAddressB, peer_req(), at_ms(6144));
    CHECK(wire.sent.empty());
    CHECK(wire.events.size() == 1);  // no second CONNECT_REQUEST
    CHECK(b.connection_count() == 1);
    CHECK(b.counters().rx_duplicates == 1);
  }
  SECTION("MRA_REQ_SENT: the delayed MRA goes out only on the duplicate") {
    Recorder wire;
    ConnectionManager b(config(kGuidA, kAddressA, 7), wire, wire);
    REQUIRE(b.listen(kService) == CmResult::ok);
    b.receive(kAddressB, peer_req(), at_ms(0));
    const ConnectionId cb = wire.events.at(0).connection;
    CHECK(b.state(cb) == CmState::MraReqSent);
    CHECK(wire.sent.empty());
    b.receive(kAddressB, peer_req(), at_ms(6144));
    REQUIRE(wire.sent.size() == 1);
    const CmMessage m = wire.sent[0].parsed();
    const auto& mra = std::get<Mra>(m.body);
    CHECK(mra.message_mraed == MessageMraed::Req);
    CHECK(mra.service_timeout == 24);
    CHECK(mra.remote_comm_id == CommId{0x5000});
    CHECK(mra.local_comm_id == cb);
    CHECK(m.transaction_id == 0x99'0000'5000);
    CHECK(wire.events.size() == 1);
    // The user answers late: the REP goes out all the same.
    REQUIRE(b.accept(cb, accept_params_b(), at_ms(7000)) == CmResult::ok);
    CHECK(wire.count(AttributeId::Rep) == 1);
  }
  SECTION("TIMEWAIT: REJ 10, stale connection") {
    Recorder wire;
    ConnectionManager b(config(kGuidA, kAddressA, 7), wire, wire);
    REQUIRE(b.listen(kService) == CmResult::ok);
    b.receive(kAddressB, peer_req(), at_ms(0));
    const ConnectionId cb = wire.events.at(0).connection;
    REQUIRE(b.accept(cb, accept_params_b(), at_ms(1)) == CmResult::ok);
    const CmMessage rtu{.transaction_id = 0x99'0000'5000,
                        .body = Rtu{.local_comm_id = CommId{0x5000}, .remote_comm_id = cb}};
    b.receive(kAddressB, rtu, at_ms(2));
    REQUIRE(b.state(cb) == CmState::Established);
    REQUIRE(b.disconnect(cb, {}, at_ms(3)) == CmResult::ok);
    const CmMessage drep{.transaction_id = 1, .body = Drep{.local_comm_id = CommId{0x5000}, .remote_comm_id = cb}};
    b.receive(kAddressB, drep, at_ms(4));
    REQUIRE(b.state(cb) == CmState::Timewait);
    wire.sent.clear();
    b.receive(kAddressB, peer_req(0x1234), at_ms(5));
    REQUIRE(wire.sent.size() == 1);
    const CmMessage m = wire.sent[0].parsed();
    CHECK(std::get<Rej>(m.body).reason == RejectReason::StaleConnection);
    CHECK(std::get<Rej>(m.body).remote_comm_id == CommId{0x5000});
    CHECK(std::get<Rej>(m.body).local_comm_id == cb);
    CHECK(std::get<Rej>(m.body).message_rejected == MessageRejected::Other);  // cm_format_rej in TIMEWAIT
    CHECK(m.transaction_id == 0x1234);
  }
}

TEST_CASE("cm: a duplicate REP when established gets the RTU again", "[cm][duplicates]") {
  Pair p(5);
  REQUIRE(p.b().listen(kService) == CmResult::ok);
  ConnectionId ca;
  REQUIRE(p.a().connect(connect_params(), p.now(), ca) == CmResult::ok);
  REQUIRE(p.run_until([&] { return has(p.wire_b, CmEventType::Established); }, at_ms(100)));
  const std::array<std::uint8_t, kMadLength> rep_bytes = p.wire_b.sent.at(0).bytes;
  REQUIRE(p.wire_a.count(AttributeId::Rtu) == 1);
  p.a().receive(kAddressB, parse_owned(rep_bytes), p.now());
  CHECK(p.wire_a.count(AttributeId::Rtu) == 2);
  CHECK(p.wire_a.sent.back().bytes == p.wire_a.sent.at(1).bytes);
  CHECK(p.a().state(ca) == CmState::Established);
  CHECK(p.wire_a.events.size() == 2);  // no second CONNECT_RESPONSE
}

TEST_CASE("cm: a duplicate REP before the user answered gets the delayed MRA", "[cm][duplicates]") {
  Pair p(6, 0, false);
  REQUIRE(p.b().listen(kService) == CmResult::ok);
  p.wire_b.on_event = [&](const CmEvent& e) {
    if (e.type == CmEventType::ConnectRequest) REQUIRE(p.b().accept(e.connection, accept_params_b(), p.now()) == CmResult::ok);
  };
  ConnectionId ca;
  REQUIRE(p.a().connect(connect_params(), p.now(), ca) == CmResult::ok);
  REQUIRE(p.run_until([&] { return has(p.wire_a, CmEventType::ConnectResponse); }, at_ms(100)));
  CHECK(p.a().state(ca) == CmState::MraRepSent);
  // B resends its REP at 4096 ms: A, still unanswered, sends an MRA for the REP; B then waits
  // 2^(24-8) + 2048 ms before its next resend.
  REQUIRE(p.run_until([&] { return p.wire_a.count(AttributeId::Mra) == 1; }, at_ms(5000)));
  const CmMessage mra = p.wire_a.sent.back().parsed();
  CHECK(std::get<Mra>(mra.body).message_mraed == MessageMraed::Rep);
  REQUIRE(p.run_until([&] { return p.b().state(p.wire_b.events.at(0).connection) == CmState::MraRepRcvd; }, at_ms(5000)));
  const Instant mra_at = p.now();
  CHECK(p.b().next_deadline() == mra_at + milliseconds(65'536 + 2'048));
  REQUIRE(p.a().accept(ca, AcceptParams{}, p.now()) == CmResult::ok);
  REQUIRE(p.run_until([&] { return has(p.wire_b, CmEventType::Established); }, at_ms(10'000)));
}

TEST_CASE("cm: an MRA for our REQ stretches its timer to the service timeout", "[cm][timers]") {
  Recorder wire;
  ConnectionManager a(config(kGuidA, kAddressA, 7), wire, wire);
  ConnectionId ca;
  REQUIRE(a.connect(connect_params(), at_ms(0), ca) == CmResult::ok);
  const CmMessage mra{.transaction_id = 0,
                      .body = Mra{.local_comm_id = CommId{0x5000},
                                  .remote_comm_id = ca,
                                  .message_mraed = MessageMraed::Req,
                                  .service_timeout = 24}};
  a.receive(kAddressB, mra, at_ms(100));
  CHECK(a.state(ca) == CmState::MraReqRcvd);
  CHECK(a.next_deadline() == at_ms(100 + 65'536 + 2'048));
  a.advance(at_ms(6144));
  CHECK(wire.sent.size() == 1);
}

TEST_CASE("cm: the DREQ is resent 15 times, then DISCONNECTED -110 and timewait", "[cm][timers]") {
  Pair p(7);
  REQUIRE(p.b().listen(kService) == CmResult::ok);
  ConnectionId ca;
  REQUIRE(p.a().connect(connect_params(), p.now(), ca) == CmResult::ok);
  REQUIRE(p.run_until([&] { return has(p.wire_b, CmEventType::Established); }, at_ms(100)));
  p.set_loss(1'000'000);  // the peer is gone
  const Instant t0 = p.now();
  SECTION("active side: 6144 ms") {
    REQUIRE(p.a().disconnect(ca, {}, t0) == CmResult::ok);
    REQUIRE(p.run_until([&] { return has(p.wire_a, CmEventType::Disconnected); }, t0 + milliseconds(200'000)));
    CHECK(p.now() == t0 + 16 * milliseconds(6144));
    CHECK(p.wire_a.count(AttributeId::Dreq) == 16);
    CHECK(p.wire_a.events.back().status == kStatusTimedOut);
    CHECK(p.a().state(ca) == CmState::Timewait);
    REQUIRE(p.run_until([&] { return p.a().connection_count() == 0; }, t0 + milliseconds(300'000)));
    CHECK(p.now() == t0 + 16 * milliseconds(6144) + milliseconds(2048));
    CHECK(p.wire_a.events.back().type == CmEventType::TimewaitExit);
  }
  SECTION("passive side: the REQ's response timeout, 4096 ms") {
    const ConnectionId cb = p.wire_b.events.at(0).connection;
    REQUIRE(p.b().disconnect(cb, {}, t0) == CmResult::ok);
    REQUIRE(p.run_until([&] { return has(p.wire_b, CmEventType::Disconnected); }, t0 + milliseconds(200'000)));
    CHECK(p.now() == t0 + 16 * milliseconds(4096));
    CHECK(p.wire_b.count(AttributeId::Dreq) == 16);
  }
}

TEST_CASE("cm: a DREQ whose remote QPN is not ours is ignored", "[cm]") {
  Pair p(8);
  REQUIRE(p.b().listen(kService) == CmResult::ok);
  ConnectionId ca;
  REQUIRE(p.a().connect(connect_params(), p.now(), ca) == CmResult::ok);
  REQUIRE(p.run_until([&] { return has(p.wire_b, CmEventType::Established); }, at_ms(100)));
  const ConnectionId cb = p.wire_b.events.at(0).connection;
  const std::size_t sent_before = p.wire_a.sent.size();
  const CmMessage wrong{.transaction_id = 5,
                        .body = Dreq{.local_comm_id = cb, .remote_comm_id = ca, .remote_qpn_eecn = Qpn{0x99}}};
  p.a().receive(kAddressB, wrong, p.now());
  CHECK(p.a().state(ca) == CmState::Established);
  CHECK(p.a().counters().rx_wrong_qpn == 1);
  CHECK(p.wire_a.sent.size() == sent_before);
  CHECK(p.wire_a.events.size() == 2);
  const CmMessage right{.transaction_id = 5,
                        .body = Dreq{.local_comm_id = cb, .remote_comm_id = ca, .remote_qpn_eecn = Qpn{0x11}}};
  p.a().receive(kAddressB, right, p.now());
  CHECK(p.a().state(ca) == CmState::DreqRcvd);
  CHECK(p.wire_a.events.back().type == CmEventType::Disconnected);
}

TEST_CASE("cm: timewait lasts 2048 ms, then TIMEWAIT_EXIT and the comm ID is free", "[cm][timers]") {
  Recorder wire;
  ConnectionManager b(config(kGuidA, kAddressA, 7), wire, wire);
  REQUIRE(b.listen(kService) == CmResult::ok);
  b.receive(kAddressB, peer_req(), at_ms(0));
  const ConnectionId cb = wire.events.at(0).connection;
  CHECK(cb == CommId{7});
  REQUIRE(b.accept(cb, accept_params_b(), at_ms(1)) == CmResult::ok);
  b.receive(kAddressB, CmMessage{.body = Rtu{.local_comm_id = CommId{0x5000}, .remote_comm_id = cb}}, at_ms(2));
  b.receive(kAddressB,
            CmMessage{.transaction_id = 42,
                      .body = Dreq{.local_comm_id = CommId{0x5000}, .remote_comm_id = cb, .remote_qpn_eecn = Qpn{0x22}}},
            at_ms(3));
  REQUIRE(b.state(cb) == CmState::DreqRcvd);
  REQUIRE(b.disconnect(cb, {}, at_ms(4)) == CmResult::ok);
  const CmMessage drep = wire.sent.back().parsed();
  CHECK(attribute_id(drep.body) == AttributeId::Drep);
  CHECK(drep.transaction_id == 42);
  CHECK(b.state(cb) == CmState::Timewait);
  // A duplicate DREQ in timewait gets the DREP again.
  b.receive(kAddressB,
            CmMessage{.transaction_id = 42,
                      .body = Dreq{.local_comm_id = CommId{0x5000}, .remote_comm_id = cb, .remote_qpn_eecn = Qpn{0x22}}},
            at_ms(5));
  CHECK(wire.count(AttributeId::Drep) == 2);
  b.advance(at_ms(4 + 2047));
  CHECK(b.state(cb) == CmState::Timewait);
  CHECK(b.next_deadline() == at_ms(4 + 2048));
  b.advance(at_ms(4 + 2048));
  CHECK(!b.state(cb));
  CHECK(b.connection_count() == 0);
  CHECK(wire.events.back().type == CmEventType::TimewaitExit);
  CHECK(wire.events.back().connection == cb);
  // A DREQ after timewait still gets a DREP (cm_issue_drep), from no connection.
  b.receive(kAddressB,
            CmMessage{.transaction_id = 43,
                      .body = Dreq{.local_comm_id = CommId{0x5000}, .remote_comm_id = cb, .remote_qpn_eecn = Qpn{0x22}}},
            at_ms(3000));
  CHECK(wire.count(AttributeId::Drep) == 3);
  CHECK(std::get<Drep>(wire.sent.back().parsed().body).local_comm_id == cb);
}

TEST_CASE("cm: comm IDs count up from a random start, cyclic, skipping 0 and IDs in use", "[cm]") {
  Recorder wire;
  ConnectionManager a(config(kGuidA, kAddressA, 0xFFFF'FFFF), wire, wire);
  ConnectionId c1, c2, c3;
  REQUIRE(a.connect(connect_params(), at_ms(0), c1) == CmResult::ok);
  REQUIRE(a.connect(connect_params(), at_ms(0), c2) == CmResult::ok);
  REQUIRE(a.destroy(c2, at_ms(0)) == CmResult::ok);  // REJ 4 (timeout), freed at once
  CHECK(std::get<Rej>(wire.sent.back().parsed().body).reason == RejectReason::Timeout);
  REQUIRE(a.connect(connect_params(), at_ms(0), c3) == CmResult::ok);
  CHECK(c1 == CommId{0xFFFF'FFFF});
  CHECK(c2 == CommId{1});
  CHECK(c3 == CommId{2});
  CHECK(a.connection_count() == 2);
}

TEST_CASE("cm: a REQ from a QP that a live connection has as its peer gets REJ 10, the old connection a DREQ", "[cm]") {
  Recorder wire;
  ConnectionManager b(config(kGuidA, kAddressA, 7), wire, wire);
  REQUIRE(b.listen(kService) == CmResult::ok);
  b.receive(kAddressB, peer_req(), at_ms(0));
  const ConnectionId cb = wire.events.at(0).connection;
  REQUIRE(b.accept(cb, accept_params_b(), at_ms(1)) == CmResult::ok);
  b.receive(kAddressB, CmMessage{.body = Rtu{.local_comm_id = CommId{0x5000}, .remote_comm_id = cb}}, at_ms(2));
  REQUIRE(b.state(cb) == CmState::Established);
  // The peer restarted: a new comm ID, the same QPN and GUID.
  CmMessage again = peer_req(0x77);
  std::get<Req>(again.body).local_comm_id = CommId{0x6000};
  wire.sent.clear();
  b.receive(kAddressB, again, at_ms(3));
  REQUIRE(wire.sent.size() == 2);
  const CmMessage rej = wire.sent[0].parsed();
  CHECK(std::get<Rej>(rej.body).reason == RejectReason::StaleConnection);
  CHECK(std::get<Rej>(rej.body).remote_comm_id == CommId{0x6000});
  CHECK(rej.transaction_id == 0x77);
  const CmMessage dreq = wire.sent[1].parsed();
  CHECK(std::get<Dreq>(dreq.body).remote_comm_id == CommId{0x5000});
  CHECK(std::get<Dreq>(dreq.body).remote_qpn_eecn == Qpn{0x33});
  CHECK(b.state(cb) == CmState::DreqSent);
  CHECK(b.connection_count() == 1);
  CHECK(wire.events.size() == 2);  // CONNECT_REQUEST, ESTABLISHED: none for the stale REQ
}

TEST_CASE("cm: an active side destroyed in REQ_SENT sends REJ 4 with its GUID, the passive side finds it by that", "[cm]") {
  Pair p(9, 0, false);
  REQUIRE(p.b().listen(kService) == CmResult::ok);
  ConnectionId ca;
  REQUIRE(p.a().connect(connect_params(), p.now(), ca) == CmResult::ok);
  REQUIRE(p.run_until([&] { return has(p.wire_b, CmEventType::ConnectRequest); }, at_ms(100)));
  const ConnectionId cb = p.wire_b.events.at(0).connection;
  REQUIRE(p.a().destroy(ca, p.now()) == CmResult::ok);
  CHECK(p.a().connection_count() == 0);
  const CmMessage rej = p.wire_a.sent.back().parsed();
  CHECK(std::get<Rej>(rej.body).reason == RejectReason::Timeout);
  CHECK(std::get<Rej>(rej.body).remote_comm_id == CommId{0});  // it never learnt ours
  CHECK(std::get<Rej>(rej.body).message_rejected == MessageRejected::Other);
  REQUIRE(std::get<Rej>(rej.body).ari.bytes.size() == 8);
  CHECK(std::get<Rej>(rej.body).ari.bytes[7] == 0x01);
  REQUIRE(p.run_until([&] { return has(p.wire_b, CmEventType::Rejected); }, at_ms(100)));
  CHECK(p.wire_b.events.back().reason == RejectReason::Timeout);
  CHECK(p.b().state(cb) == CmState::Idle);
  CHECK(!p.b().next_deadline());
  CHECK(p.wire_a.events.empty());  // destroyed: no events
}

TEST_CASE("cm: the first packet before the RTU (COMM_EST) establishes the passive side", "[cm]") {
  Recorder wire;
  ConnectionManager b(config(kGuidA, kAddressA, 7), wire, wire);
  REQUIRE(b.listen(kService) == CmResult::ok);
  b.receive(kAddressB, peer_req(), at_ms(0));
  const ConnectionId cb = wire.events.at(0).connection;
  CHECK(b.notify_communication_established(cb, at_ms(1)) == CmResult::invalid_state);  // no REP yet
  REQUIRE(b.accept(cb, accept_params_b(), at_ms(1)) == CmResult::ok);
  REQUIRE(b.notify_communication_established(cb, at_ms(2)) == CmResult::ok);
  CHECK(b.state(cb) == CmState::Established);
  CHECK(wire.events.back().type == CmEventType::Established);
  CHECK(!b.next_deadline());  // no more REP resends
  // The late RTU changes nothing.
  b.receive(kAddressB, CmMessage{.body = Rtu{.local_comm_id = CommId{0x5000}, .remote_comm_id = cb}}, at_ms(3));
  CHECK(wire.events.size() == 2);
}

TEST_CASE("cm: both ends on one manager (one vnic): connect, accept, disconnect", "[cm]") {
  // One manager that sends to itself, through a queue so that no call re-enters it.
  Recorder wire;
  ConnectionManager m(config(kGuidA, kAddressA, 100), wire, wire);
  std::deque<std::array<std::uint8_t, kMadLength>> queue;
  wire.on_send = [&](const SentMad& s) {
    CHECK(s.to == kAddressA);
    queue.push_back(s.bytes);
  };
  Instant now = at_ms(0);
  wire.on_event = [&](const CmEvent& e) {
    if (e.type == CmEventType::ConnectRequest) REQUIRE(m.accept(e.connection, accept_params_b(), now) == CmResult::ok);
    if (e.type == CmEventType::ConnectResponse) REQUIRE(m.accept(e.connection, AcceptParams{}, now) == CmResult::ok);
    if (e.type == CmEventType::Disconnected && m.state(e.connection) == CmState::DreqRcvd) {
      REQUIRE(m.disconnect(e.connection, {}, now) == CmResult::ok);
    }
  };
  const auto pump = [&] {
    while (!queue.empty()) {
      const auto bytes = queue.front();
      queue.pop_front();
      now += milliseconds(1);
      m.receive(kAddressA, parse_owned(bytes), now);
    }
  };
  REQUIRE(m.listen(kService) == CmResult::ok);
  ConnectParams params = connect_params();
  params.destination = kAddressA;
  ConnectionId active;
  REQUIRE(m.connect(params, now, active) == CmResult::ok);
  pump();
  REQUIRE(m.connection_count() == 2);
  const ConnectionId passive = wire.events.at(0).connection;
  CHECK(passive != active);
  CHECK(m.state(active) == CmState::Established);
  CHECK(m.state(passive) == CmState::Established);
  CHECK(m.qp_attributes(active, QpState::Rtr)->dest_qpn == Qpn{0x22});
  CHECK(m.qp_attributes(passive, QpState::Rtr)->dest_qpn == Qpn{0x11});
  REQUIRE(m.disconnect(active, {}, now) == CmResult::ok);
  pump();
  CHECK(m.state(active) == CmState::Timewait);
  CHECK(m.state(passive) == CmState::Timewait);
  m.advance(now + milliseconds(2048));
  CHECK(m.connection_count() == 0);
  CHECK(m.counters().rx_unmatched == 0);
}

TEST_CASE("cm: every state change is reported once, as a trace line", "[cm][trace]") {
  struct Transitions final : CmObserver {
    std::vector<std::string> lines;
    void on_cm_transition(ConnectionId c, CmState from, CmState to) override {
      lines.push_back(describe_transition(c, from, to));
    }
  } a_trace, b_trace;
  Pair p(10);
  p.a().set_observer(&a_trace);
  p.b().set_observer(&b_trace);
  REQUIRE(p.b().listen(kService) == CmResult::ok);
  ConnectionId ca;
  REQUIRE(p.a().connect(connect_params(), p.now(), ca) == CmResult::ok);
  REQUIRE(p.run_until([&] { return has(p.wire_b, CmEventType::Established); }, at_ms(100)));
  REQUIRE(p.a().disconnect(ca, {}, p.now()) == CmResult::ok);
  REQUIRE(p.run_until([&] { return p.a().connection_count() == 0 && p.b().connection_count() == 0; }, at_ms(10'000)));
  CHECK(a_trace.lines == std::vector<std::string>{
                             "CM conn 0x10000000 IDLE -> REQ_SENT",
                             "CM conn 0x10000000 REQ_SENT -> MRA_REP_SENT",
                             "CM conn 0x10000000 MRA_REP_SENT -> ESTABLISHED",
                             "CM conn 0x10000000 ESTABLISHED -> DREQ_SENT",
                             "CM conn 0x10000000 DREQ_SENT -> TIMEWAIT",
                             "CM conn 0x10000000 TIMEWAIT -> IDLE",
                         });
  CHECK(b_trace.lines == std::vector<std::string>{
                             "CM conn 0x20000000 IDLE -> REQ_RCVD",
                             "CM conn 0x20000000 REQ_RCVD -> MRA_REQ_SENT",
                             "CM conn 0x20000000 MRA_REQ_SENT -> REP_SENT",
                             "CM conn 0x20000000 REP_SENT -> ESTABLISHED",
                             "CM conn 0x20000000 ESTABLISHED -> DREQ_RCVD",
                             "CM conn 0x20000000 DREQ_RCVD -> TIMEWAIT",
                             "CM conn 0x20000000 TIMEWAIT -> IDLE",
                         });
}

// --- SIDR (UD) ---------------------------------------------------------------------------------

constexpr std::uint64_t kUdpService = ip_service_id(PortSpace::Udp, 7174);
const std::array<std::uint8_t, 5> kSidrData{5, 4, 3, 2, 1};

SidrParams sidr_params() {
  return SidrParams{.destination = kAddressB, .service_id = kUdpService, .private_data = ByteSpan{kSidrData}};
}

TEST_CASE("cm: SIDR_REQ and SIDR_REP resolve a UD service: QPN and Q_Key", "[cm][sidr]") {
  Pair p(11, 0, false);
  REQUIRE(p.b().listen(kUdpService) == CmResult::ok);
  p.wire_b.on_event = [&](const CmEvent& e) {
    if (e.type != CmEventType::SidrRequest) return;
    REQUIRE(p.b().sidr_reply(e.connection,
                             SidrReplyParams{.qpn = Qpn{0x44}, .qkey = Qkey{0x0123'4567}, .private_data = ByteSpan{kRepData}},
                             p.now()) == CmResult::ok);
  };
  ConnectionId ca;
  REQUIRE(p.a().sidr_request(sidr_params(), p.now(), ca) == CmResult::ok);
  CHECK(p.a().state(ca) == CmState::SidrReqSent);
  REQUIRE(p.run_until([&] { return has(p.wire_a, CmEventType::SidrResponse); }, at_ms(100)));
  const CmEvent& request = p.wire_b.events.at(0);
  CHECK(request.service_id == kUdpService);
  CHECK(request.peer == kAddressA);
  CHECK(std::equal(kSidrData.begin(), kSidrData.end(), request.private_data.begin()));
  const CmEvent& response = p.wire_a.events.at(0);
  CHECK(response.sidr_status == SidrStatus::Valid);
  CHECK(response.peer_qpn == Qpn{0x44});
  CHECK(response.qkey == Qkey{0x0123'4567});
  CHECK(std::equal(kRepData.begin(), kRepData.end(), response.private_data.begin()));
  const CmMessage req = p.wire_a.sent.at(0).parsed();
  CHECK(std::get<SidrReq>(req.body).request_id == ca.value());
  const CmMessage rep = p.wire_b.sent.at(0).parsed();
  CHECK(rep.transaction_id == req.transaction_id);
  CHECK(std::get<SidrRep>(rep.body).request_id == ca.value());
  CHECK(p.a().state(ca) == CmState::Idle);
  CHECK(!p.a().next_deadline());
  CHECK(!p.a().qp_attributes(ca, QpState::Init));
  CHECK(p.a().destroy(ca, p.now()) == CmResult::ok);
  CHECK(p.b().destroy(request.connection, p.now()) == CmResult::ok);
  CHECK(p.a().connection_count() == 0);
  CHECK(p.b().connection_count() == 0);
}

TEST_CASE("cm: a SIDR_REQ nobody listens for gets SIDR_REP status 1", "[cm][sidr]") {
  Pair p(12);
  ConnectionId ca;
  REQUIRE(p.a().sidr_request(sidr_params(), p.now(), ca) == CmResult::ok);
  REQUIRE(p.run_until([&] { return has(p.wire_a, CmEventType::SidrResponse); }, at_ms(100)));
  CHECK(p.wire_a.events.at(0).sidr_status == SidrStatus::ServiceIdNotSupported);
  CHECK(p.b().connection_count() == 0);
}

TEST_CASE("cm: the SIDR_REQ is resent every 4096 ms 15 times, then UNREACHABLE", "[cm][sidr][timers]") {
  Recorder wire;
  ConnectionManager a(config(kGuidA, kAddressA, 7), wire, wire);
  ConnectionId ca;
  REQUIRE(a.sidr_request(sidr_params(), at_ms(0), ca) == CmResult::ok);
  for (int k = 1; k <= 15; ++k) {
    REQUIRE(a.next_deadline() == at_ms(4096 * k));
    a.advance(at_ms(4096 * k));
  }
  CHECK(wire.count(AttributeId::SidrReq) == 16);
  a.advance(at_ms(4096 * 16));
  REQUIRE(wire.events.size() == 1);
  CHECK(wire.events[0].type == CmEventType::Unreachable);
  CHECK(wire.events[0].status == kStatusTimedOut);
}

TEST_CASE("cm: a duplicate SIDR_REQ before the answer is dropped, destroy answers status 2", "[cm][sidr]") {
  Recorder wire;
  ConnectionManager b(config(kGuidB, kAddressB, 7), wire, wire);
  REQUIRE(b.listen(kUdpService) == CmResult::ok);
  const CmMessage req{.transaction_id = 0x55,
                      .body = SidrReq{.request_id = 0x900, .service_id = kUdpService}};
  b.receive(kAddressA, req, at_ms(0));
  b.receive(kAddressA, req, at_ms(4096));
  CHECK(wire.events.size() == 1);
  CHECK(wire.sent.empty());
  const ConnectionId cb = wire.events.at(0).connection;
  CHECK(b.state(cb) == CmState::SidrReqRcvd);
  REQUIRE(b.destroy(cb, at_ms(5000)) == CmResult::ok);
  REQUIRE(wire.sent.size() == 1);
  const CmMessage rep = wire.sent[0].parsed();
  CHECK(std::get<SidrRep>(rep.body).status == SidrStatus::Rejected);
  CHECK(std::get<SidrRep>(rep.body).request_id == 0x900);
  CHECK(rep.transaction_id == 0x55);
}

TEST_CASE("cm: SIDR at 30% MAD loss finishes by retries", "[cm][sidr][loss]") {
  for (std::uint64_t seed : sim::seeds_to_run(19, 20)) {
    INFO(sim::replay_hint(seed));
    Pair p(seed, 300'000, false);
    REQUIRE(p.b().listen(kUdpService) == CmResult::ok);
    p.wire_b.on_event = [&](const CmEvent& e) {
      if (e.type == CmEventType::SidrRequest) {
        REQUIRE(p.b().sidr_reply(e.connection, SidrReplyParams{.qpn = Qpn{0x44}, .qkey = Qkey{1}}, p.now()) == CmResult::ok);
      }
    };
    ConnectionId ca;
    REQUIRE(p.a().sidr_request(sidr_params(), p.now(), ca) == CmResult::ok);
    REQUIRE(p.run_until([&] { return has(p.wire_a, CmEventType::SidrResponse); }, at_ms(100'000)));
    CHECK(p.wire_a.events.size() == 1);
    CHECK(p.wire_a.events[0].peer_qpn == Qpn{0x44});
  }
}

// A REP from B's QP 0x22 (GUID kGuidB), answering A's connection `remote`.
CmMessage rep_from_qp22(CommId local, ConnectionId remote) {
  return CmMessage{.transaction_id = 0x66,
                   .body = Rep{.local_comm_id = local,
                               .remote_comm_id = remote,
                               .local_qpn = Qpn{0x22},
                               .starting_psn = Psn{5},
                               .local_ca_guid = kGuidB}};
}

// A's connection `first` established with B's QP 0x22, then a second REQ (`second`) sent:
// the REP that answers it from the same QP makes `first` stale.
void establish_then_connect_again(ConnectionManager& a, ConnectionId& first, ConnectionId& second) {
  REQUIRE(a.connect(connect_params(), at_ms(0), first) == CmResult::ok);
  a.receive(kAddressB, rep_from_qp22(CommId{0x5000}, first), at_ms(1));
  REQUIRE(a.accept(first, AcceptParams{}, at_ms(2)) == CmResult::ok);
  REQUIRE(a.state(first) == CmState::Established);
  REQUIRE(a.connect(connect_params(), at_ms(3), second) == CmResult::ok);
}

TEST_CASE("cm: a REP from a QP that a live connection has as its peer gets REJ 10, the old connection a DREQ", "[cm]") {
  Recorder wire;
  ConnectionManager a(config(kGuidA, kAddressA, 7), wire, wire);
  ConnectionId first, second;
  establish_then_connect_again(a, first, second);
  wire.sent.clear();
  a.receive(kAddressB, rep_from_qp22(CommId{0x6000}, second), at_ms(4));
  REQUIRE(wire.sent.size() == 2);
  const CmMessage rej = wire.sent[0].parsed();
  CHECK(std::get<Rej>(rej.body).reason == RejectReason::StaleConnection);
  CHECK(std::get<Rej>(rej.body).message_rejected == MessageRejected::Rep);
  CHECK(std::get<Rej>(rej.body).remote_comm_id == CommId{0x6000});
  CHECK(attribute_id(wire.sent[1].parsed().body) == AttributeId::Dreq);
  CHECK(a.state(first) == CmState::DreqSent);
  CHECK(a.state(second) == CmState::ReqSent);
}


// Issue 27 item 13: the (GUID, QPN) of a stale-connection REQ is easy to guess; only the
// connection's own peer address may tear the connection down with one.
TEST_CASE("cm: a stale-connection REQ from another address is refused and leaves the connection up", "[cm][hostile]") {
  const stack::Ipv4Address forger{0x0A420063};  // 10.66.0.99, elsewhere on the bridge
  Recorder wire;
  ConnectionManager b(config(kGuidA, kAddressA, 7), wire, wire);
  REQUIRE(b.listen(kService) == CmResult::ok);
  b.receive(kAddressB, peer_req(), at_ms(0));
  const ConnectionId cb = wire.events.at(0).connection;
  REQUIRE(b.accept(cb, accept_params_b(), at_ms(1)) == CmResult::ok);
  b.receive(kAddressB, CmMessage{.body = Rtu{.local_comm_id = CommId{0x5000}, .remote_comm_id = cb}}, at_ms(2));
  REQUIRE(b.state(cb) == CmState::Established);
  // The forger knows B's GUID (from its MAC) and guessed the QPN: a new comm ID, the same pair.
  CmMessage forged = peer_req(0x77);
  std::get<Req>(forged.body).local_comm_id = CommId{0x6000};
  wire.sent.clear();
  b.receive(forger, forged, at_ms(3));
  REQUIRE(wire.sent.size() == 1);  // the REJ 10 to the forger, no DREQ to the peer
  CHECK(wire.sent[0].to == forger);
  CHECK(std::get<Rej>(wire.sent[0].parsed().body).reason == RejectReason::StaleConnection);
  CHECK(b.state(cb) == CmState::Established);
  CHECK(b.counters().rx_stale_foreign == 1);
  CHECK(wire.events.size() == 2);  // CONNECT_REQUEST, ESTABLISHED: nothing for the forgery
  // The peer itself, restarted, still ends it (the IBA rule, as before).
  wire.sent.clear();
  b.receive(kAddressB, forged, at_ms(4));
  REQUIRE(wire.sent.size() == 2);
  CHECK(attribute_id(wire.sent[1].parsed().body) == AttributeId::Dreq);
  CHECK(b.state(cb) == CmState::DreqSent);
  CHECK(b.counters().rx_stale_foreign == 1);
}

TEST_CASE("cm: a stale-connection REP from another address leaves the live connection up", "[cm][hostile]") {
  const stack::Ipv4Address forger{0x0A420063};
  Recorder wire;
  ConnectionManager a(config(kGuidA, kAddressA, 7), wire, wire);
  ConnectionId first, second;
  establish_then_connect_again(a, first, second);
  wire.sent.clear();
  a.receive(forger, rep_from_qp22(CommId{0x6000}, second), at_ms(4));
  REQUIRE(wire.sent.size() == 1);
  CHECK(std::get<Rej>(wire.sent[0].parsed().body).reason == RejectReason::StaleConnection);
  CHECK(a.state(first) == CmState::Established);
  CHECK(a.state(second) == CmState::ReqSent);
  CHECK(a.counters().rx_stale_foreign == 1);
}

// Issue 27 item 9: what a received REQ, REJ or SIDR_REQ is matched against is an index, kept
// exact through every state; nothing stays in it once a connection is gone.
TEST_CASE("cm: the lookup indexes hold exactly the connections each lookup may find, and empty out", "[cm][hostile]") {
  Recorder wire;
  ConnectionManager b(config(kGuidA, kAddressA, 7), wire, wire);
  REQUIRE(b.listen(kService) == CmResult::ok);
  constexpr std::uint32_t kMany = 2000;
  const auto req_from = [](std::uint32_t i) {
    CmMessage m = peer_req(0x1000 + i);
    std::get<Req>(m.body).local_comm_id = CommId{0x10000 + i};
    std::get<Req>(m.body).local_qpn = Qpn{0x100 + i};
    return m;
  };
  for (std::uint32_t i = 0; i < kMany; ++i) b.receive(kAddressB, req_from(i), at_ms(0));
  REQUIRE(b.connection_count() == kMany);
  // MRA_REQ_SENT: by peer comm ID (duplicates) and by peer QP (stale connections).
  CHECK(b.index_entries() == 2 * kMany);
  // Each duplicate finds its own connection among the 2,000: its delayed MRA names it.
  for (std::uint32_t i = 0; i < kMany; i += 397) {
    wire.sent.clear();
    b.receive(kAddressB, req_from(i), at_ms(1));
    REQUIRE(wire.sent.size() == 1);
    const auto mra = std::get<Mra>(wire.sent[0].parsed().body);
    CHECK(mra.remote_comm_id == CommId{0x10000 + i});
    CHECK(mra.local_comm_id == wire.events.at(i).connection);
  }
  for (const CmEvent& e : wire.events) REQUIRE(b.destroy(e.connection, at_ms(2)) == CmResult::ok);
  CHECK(b.connection_count() == 0);
  CHECK(b.index_entries() == 0);

  // SIDR_REQs: indexed by (address, request ID) while unanswered, out once answered.
  for (std::uint32_t i = 0; i < 100; ++i) {
    b.receive(kAddressB, CmMessage{.transaction_id = i, .body = SidrReq{.request_id = i, .service_id = kService}}, at_ms(3));
  }
  CHECK(b.index_entries() == 100);
  const std::size_t events = wire.events.size();
  b.receive(kAddressB, CmMessage{.transaction_id = 5, .body = SidrReq{.request_id = 5, .service_id = kService}}, at_ms(4));
  CHECK(wire.events.size() == events);  // a duplicate
  for (std::size_t i = events - 100; i < events; ++i) {
    REQUIRE(b.sidr_reply(wire.events[i].connection, SidrReplyParams{}, at_ms(5)) == CmResult::ok);
  }
  CHECK(b.index_entries() == 0);

  // An established connection, disconnected: indexed until timewait, then gone.
  ConnectionId ca;
  Pair p(27);
  REQUIRE(p.b().listen(kService) == CmResult::ok);
  REQUIRE(p.a().connect(connect_params(), p.now(), ca) == CmResult::ok);
  REQUIRE(p.run_until([&] { return has(p.wire_b, CmEventType::Established); }, at_ms(100)));
  CHECK(p.a().index_entries() == 1);  // active: by peer QP only
  CHECK(p.b().index_entries() == 2);
  REQUIRE(p.a().disconnect(ca, {}, p.now()) == CmResult::ok);
  REQUIRE(p.run_until([&] { return p.a().connection_count() == 0 && p.b().connection_count() == 0; }, at_ms(10'000)));
  CHECK(p.a().index_entries() == 0);
  CHECK(p.b().index_entries() == 0);
}

// Issue 27 item 2: perftest -R accepts its control connection, destroys that listener, and
// listens again on the same port for the test's connection; a REQ in between met no
// listener. It now waits for one, a bounded time, in bounded number.
TEST_CASE("cm: a REQ just before its listener is served by the listener, not refused", "[cm][listen]") {
  Pair p(31);
  ConnectionId ca;
  REQUIRE(p.a().connect(connect_params(), p.now(), ca) == CmResult::ok);
  REQUIRE(p.run_until([&] { return p.b().held_request_count() == 1; }, at_ms(100)));
  CHECK(p.wire_b.sent.empty());  // no REJ 8 yet
  // The server listens 300 ms later: its CONNECT_REQUEST comes at once, the handshake ends.
  REQUIRE_FALSE(p.run_until([] { return false; }, at_ms(300)));
  REQUIRE(p.b().listen(kService, at_ms(300)) == CmResult::ok);
  CHECK(p.b().held_request_count() == 0);
  REQUIRE(p.wire_b.events.size() == 1);
  CHECK(p.wire_b.events[0].type == CmEventType::ConnectRequest);
  CHECK(p.wire_b.events[0].peer_qpn == Qpn{0x11});
  REQUIRE(p.run_until([&] { return has(p.wire_b, CmEventType::Established); }, at_ms(1000)));
  CHECK(p.a().state(ca) == CmState::Established);
  CHECK(p.wire_a.count(AttributeId::Req) == 1);  // no resend was needed
  CHECK(p.wire_b.count(AttributeId::Rej) == 0);
  CHECK(p.b().counters().req_held_served == 1);
}

TEST_CASE("cm: held REQs are bounded, a resent one is not held twice, each expires with REJ 8", "[cm][listen][hostile]") {
  Recorder wire;
  ConnectionManager b(config(kGuidA, kAddressA, 7), wire, wire);
  const auto req_from = [](std::uint32_t i) {
    CmMessage m = peer_req(0x1000 + i);
    std::get<Req>(m.body).local_comm_id = CommId{0x10000 + i};
    std::get<Req>(m.body).local_qpn = Qpn{0x100 + i};
    return m;
  };
  for (std::uint32_t i = 0; i < kMaxHeldReqs + 10; ++i) b.receive(kAddressB, req_from(i), at_ms(i));
  CHECK(b.held_request_count() == kMaxHeldReqs);
  CHECK(wire.count(AttributeId::Rej) == 10);  // past the bound: refused at once
  b.receive(kAddressB, req_from(0), at_ms(100));  // a resend of a held one
  CHECK(b.held_request_count() == kMaxHeldReqs);
  CHECK(b.connection_count() == 0);  // held as bytes, not as connections
  REQUIRE(b.next_deadline() == at_ms(0) + kNoListenerHold);
  b.advance(at_ms(0) + kNoListenerHold);
  CHECK(b.held_request_count() == kMaxHeldReqs - 1);
  const CmMessage first = wire.sent.back().parsed();
  CHECK(std::get<Rej>(first.body).reason == RejectReason::InvalidServiceId);
  CHECK(std::get<Rej>(first.body).remote_comm_id == CommId{0x10000});
  CHECK(first.transaction_id == 0x1000);  // the REQ's TID, echoed
  b.advance(at_ms(10'000));
  CHECK(b.held_request_count() == 0);
  CHECK(wire.count(AttributeId::Rej) == kMaxHeldReqs + 10);
  CHECK(!b.next_deadline());
  // A listener for another service takes none of them.
  b.receive(kAddressB, req_from(500), at_ms(10'001));
  REQUIRE(b.listen(ip_service_id(PortSpace::Tcp, 1), at_ms(10'002)) == CmResult::ok);
  CHECK(b.held_request_count() == 1);
  CHECK(wire.events.empty());
}

TEST_CASE("cm: a held REQ whose sender gave up (REJ 4) is not handed to a later listener", "[cm][listen]") {
  Pair p(32, 0, false);
  ConnectionId ca;
  REQUIRE(p.a().connect(connect_params(), p.now(), ca) == CmResult::ok);
  REQUIRE(p.run_until([&] { return p.b().held_request_count() == 1; }, at_ms(100)));
  REQUIRE(p.a().destroy(ca, p.now()) == CmResult::ok);  // REJ 4 with A's GUID in the ARI
  REQUIRE(p.run_until([&] { return p.b().held_request_count() == 0; }, at_ms(200)));
  CHECK(p.now() < at_ms(200));
  REQUIRE(p.b().listen(kService, p.now()) == CmResult::ok);
  CHECK(p.wire_b.events.empty());
  CHECK(p.wire_b.sent.empty());  // no REJ 8 either: the sender is gone
}

// Issue 27 item 1, the suspected mechanism: a connection in TIMEWAIT is no longer matched
// by its peer's QPN (cm_enter_timewait -> cm_remove_remote), so a new REQ from that QP, with
// a new comm ID, is a new connection, not a stale one.
TEST_CASE("cm: a REQ from the QP of a connection in timewait is a new connection, not stale", "[cm]") {
  Recorder wire;
  ConnectionManager b(config(kGuidA, kAddressA, 7), wire, wire);
  REQUIRE(b.listen(kService) == CmResult::ok);
  b.receive(kAddressB, peer_req(), at_ms(0));
  const ConnectionId cb = wire.events.at(0).connection;
  REQUIRE(b.accept(cb, accept_params_b(), at_ms(1)) == CmResult::ok);
  b.receive(kAddressB, CmMessage{.body = Rtu{.local_comm_id = CommId{0x5000}, .remote_comm_id = cb}}, at_ms(2));
  b.receive(kAddressB, CmMessage{.body = Dreq{.local_comm_id = CommId{0x5000}, .remote_comm_id = cb,
                                              .remote_qpn_eecn = Qpn{0x22}}},
            at_ms(3));
  REQUIRE(b.disconnect(cb, {}, at_ms(4)) == CmResult::ok);  // the DREP: TIMEWAIT
  REQUIRE(b.state(cb) == CmState::Timewait);
  CmMessage next = peer_req(0x78);
  std::get<Req>(next.body).local_comm_id = CommId{0x6000};  // same QPN 0x33, same GUID
  wire.sent.clear();
  b.receive(kAddressB, next, at_ms(5));
  CHECK(wire.count(AttributeId::Rej) == 0);
  REQUIRE(wire.events.back().type == CmEventType::ConnectRequest);
  CHECK(wire.events.back().connection != cb);
  CHECK(b.state(cb) == CmState::Timewait);
}
}  // namespace
}  // namespace rrdma::rocev2::cm
