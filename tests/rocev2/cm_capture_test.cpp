// rxe's own CM traffic as golden vectors (tests/data/rxe_cm.pcapng, made by
// tests/interop/capture_rxe_cm.sh; tests/data/CAPTURES.md lists the frames). Linux 6.1.192's
// rdma_rxe in a qemu guest at 10.201.249.2 (MAC 02:52:44:07:ce:59) talks to
//   - 10.201.249.20, a kernel veth from which rrdma_frame_sender sent two REQs as rdma_cm makes
//     them: one for TCP port 7999 (nobody listens: REJ 8) and one for 7174, where `rping -s`
//     listened (REP, resent every 4 s since no RTU came);
//   - 10.201.249.10, a vnic whose daemon discards MADs: `rping -c` (REQs every 6 s, then REJ 4
//     when it was killed in REQ_SENT) and `udaddy -s` (SIDR_REQs every 4 s).
// Every frame must be a GSI datagram exactly as rocev2::gsi_packet builds it, every MAD must
// parse and re-emit byte for byte, and each message must hold what docs/RDMA_CM_RESEARCH.md §3
// and tests/rocev2/cm_samples.h say Linux puts in it (docs/RDMA_CM.md, "Checked against rxe's
// capture").
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <variant>
#include <vector>

#include "rocev2/cm/cma.h"
#include "rocev2/cm/mad.h"
#include "rocev2/encap.h"
#include "rocev2/gsi.h"
#include "tests/capture_file.h"
#include "tests/rocev2/cm_samples.h"

namespace {

using namespace rrdma;
using namespace rrdma::rocev2;
using namespace rrdma::rocev2::cm;

constexpr stack::Ipv4Address kGuest{0x0AC9F902};   // rxe
constexpr stack::Ipv4Address kVnic{0x0AC9F90A};    // discards MADs
constexpr stack::Ipv4Address kSender{0x0AC9F914};  // rrdma_frame_sender's REQs
// rxe's node GUID: the EUI-64 of the guest's MAC 02:52:44:07:ce:59 (U/L bit flipped).
constexpr std::uint64_t kGuestGuid = 0x005244FFFE07CE59;
constexpr std::uint16_t kRpingPort = 7174;

struct CapturedMad {
  std::size_t number = 0;  // tshark's frame.number
  RoceFrame frame;
  CmMessage message;
  MadSpan mad() const { return frame.packet.payload.first<rocev2::kMadLength>(); }
  AttributeId attribute() const { return attribute_id(message.body); }
};

const std::vector<rrdma::test::Frame>& frames() {
  static const std::vector<rrdma::test::Frame> all = rrdma::test::read_capture(rrdma::test::data_path("rxe_cm.pcapng"));
  return all;
}

// Every frame parsed (frame and MAD); a frame that does not parse fails the test that asks.
std::vector<CapturedMad> captured() {
  std::vector<CapturedMad> out;
  for (std::size_t i = 0; i < frames().size(); ++i) {
    CapturedMad c;
    c.number = i + 1;
    INFO("frame " << c.number);
    REQUIRE(parse_frame(frames()[i], c.frame).ok());
    REQUIRE(c.frame.packet.payload.size() == rocev2::kMadLength);
    REQUIRE(parse_cm_mad(c.frame.packet.payload, c.message) == CmError::none);
    out.push_back(c);
  }
  return out;
}

std::vector<CapturedMad> select(stack::Ipv4Address from, stack::Ipv4Address to, AttributeId attribute) {
  std::vector<CapturedMad> out;
  for (const CapturedMad& c : captured())
    if (c.frame.headers.ipv4.source == from && c.frame.headers.ipv4.destination == to && c.attribute() == attribute)
      out.push_back(c);
  return out;
}

std::uint32_t byteswap32(std::uint32_t v) {
  return (v >> 24) | ((v >> 8) & 0xFF00) | ((v << 8) & 0xFF0000) | (v << 24);
}

Gid ipv4_gid(stack::Ipv4Address a) { return cm::test::ipv4_gid(a); }

}  // namespace

TEST_CASE("cm capture: rxe's 18 frames, from rxe and to it", "[cm][capture]") {
  const auto all = captured();
  REQUIRE(all.size() == 18);
  std::size_t from_guest = 0;
  for (const CapturedMad& c : all) from_guest += c.frame.headers.ipv4.source == kGuest ? 1 : 0;
  CHECK(from_guest == 16);
  CHECK(select(kSender, kGuest, AttributeId::Req).size() == 2);
  CHECK(select(kGuest, kSender, AttributeId::Rej).size() == 1);
  CHECK(select(kGuest, kSender, AttributeId::Rep).size() == 8);
  CHECK(select(kGuest, kVnic, AttributeId::Req).size() == 3);
  CHECK(select(kGuest, kVnic, AttributeId::Rej).size() == 1);
  CHECK(select(kGuest, kVnic, AttributeId::SidrReq).size() == 3);
}

// The GSI encapsulation: what docs/GSI.md read in rxe's source, now seen on the wire.
TEST_CASE("cm capture: every frame is the GSI datagram rocev2::gsi_packet builds, byte for byte",
          "[cm][capture][gsi]") {
  for (const CapturedMad& c : captured()) {
    INFO("frame " << c.number << " from " << c.frame.headers.ipv4.source.to_string());
    const Bth& bth = c.frame.packet.bth;
    CHECK(bth.opcode == Opcode::UdSendOnly);
    CHECK(bth.dest_qp == kGsiQpn);
    CHECK(bth.pkey == Pkey{0xFFFF});
    CHECK(bth.ack_req);  // IB_QPT_GSI is not IB_QPT_UD: rxe_req.c asks for an ACK
    CHECK_FALSE(bth.solicited);
    CHECK_FALSE(bth.mig_req);
    CHECK(bth.pad_count == 0);
    CHECK(bth.transport_version == 0);
    REQUIRE(c.frame.packet.deth);
    CHECK(c.frame.packet.deth->qkey == kGsiQkey);
    CHECK(c.frame.packet.deth->src_qp == kGsiQpn);
    CHECK(check_gsi_packet(c.frame.packet) == GsiDrop::none);
    // rxe's QP 1 leaves from udp_source_port_datagram(1) = 0xD872, TTL 64, TOS 0, DF.
    CHECK(c.frame.headers.udp.source_port == kGsiUdpSourcePort);
    CHECK(c.frame.headers.udp.source_port == 0xD872);
    CHECK(c.frame.headers.ipv4.ttl == 64);
    CHECK(c.frame.headers.ipv4.dscp == 0);
    CHECK(c.frame.headers.ipv4.ecn == 0);
    CHECK(c.frame.headers.ipv4.dont_fragment);
    // The whole frame, ICRC included, as we would send this MAD with this PSN and IPv4 ID.
    const RoceHeaders h = roce_headers(c.frame.headers.ethernet.source, c.frame.headers.ethernet.destination,
                                       c.frame.headers.ipv4.source, c.frame.headers.ipv4.destination,
                                       kGsiUdpSourcePort, c.frame.headers.ipv4.identification);
    const TransportPacket p = gsi_packet(bth.psn, c.mad());
    std::vector<std::uint8_t> ours(frame_length(p));
    REQUIRE(build_frame(h, p, ours) == EmitError::none);
    const rrdma::test::Frame& theirs = frames()[c.number - 1];
    CHECK(std::ranges::equal(ours, theirs));
  }
}

TEST_CASE("cm capture: rxe's GSI PSNs count up from 0, one per MAD, whoever it sends to", "[cm][capture][gsi]") {
  std::uint32_t expected = 0;
  for (const CapturedMad& c : captured()) {
    if (c.frame.headers.ipv4.source != kGuest) continue;
    INFO("frame " << c.number);
    CHECK(c.frame.packet.bth.psn == Psn{expected});
    ++expected;
  }
  CHECK(expected == 16);
}

TEST_CASE("cm capture: every MAD parses and re-emits byte for byte, with the CM's header", "[cm][capture]") {
  for (const CapturedMad& c : captured()) {
    INFO("frame " << c.number << ": " << describe(c.message));
    std::array<std::uint8_t, rocev2::kMadLength> again{};
    REQUIRE(emit_cm_mad(c.message, again) == CmError::none);
    CHECK(std::ranges::equal(again, c.mad()));
    const MadSpan mad = c.mad();
    CHECK(mad[0] == 1);     // base version
    CHECK(mad[1] == 0x07);  // CM
    CHECK(mad[2] == 2);     // class version
    CHECK(mad[3] == 0x03);  // Send
    CHECK(c.message.status == 0);
    CHECK(c.message.class_specific == 0);
    CHECK(c.message.attribute_modifier == 0);  // no ECE
  }
}

// rping's REQ (rxe the active side, to the vnic): cm_samples.h's kernel_req() with this
// connection's identities put in is the captured message, field for field; and the
// identities are what §3.4 says they are.
TEST_CASE("cm capture: rping's REQ is cm_samples' kernel_req with this connection's identities", "[cm][capture]") {
  const auto reqs = select(kGuest, kVnic, AttributeId::Req);
  REQUIRE(reqs.size() == 3);
  const CmMessage& m = reqs[0].message;
  const Req& got = std::get<Req>(m.body);
  INFO(describe(m));
  // The CMA header: version 0, IPv4, rping's ephemeral source port, the addresses.
  const auto cma = parse_cma_header(got.private_data.bytes);
  REQUIRE(cma);
  CHECK(cma->ip_version == 4);
  CHECK(cma_source_ipv4(*cma) == kGuest);
  CHECK(cma_destination_ipv4(*cma) == kVnic);
  CHECK(cma->source_port >= 32768);  // ip_local_port_range
  CHECK(cma->source_port <= 60999);
  // IPv4 in the CMA header: 12 zero bytes, then the address (not ::ffff:).
  CHECK(std::ranges::all_of(got.private_data.bytes.subspan(4, 12), [](std::uint8_t b) { return b == 0; }));
  CHECK(std::ranges::all_of(got.private_data.bytes.subspan(20, 12), [](std::uint8_t b) { return b == 0; }));
  CHECK(std::ranges::all_of(cma_user_data(got.private_data.bytes), [](std::uint8_t b) { return b == 0; }));

  CHECK(got.service_id == 0x0000000001061C06);
  CHECK(got.local_ca_guid == kGuestGuid);
  CHECK(got.primary_path.flow_label == ((std::uint32_t{cma->source_port} * 31 + kRpingPort) & 0xFFFFF));
  CHECK(got.primary_path.local_port_gid == ipv4_gid(kGuest));
  CHECK(got.primary_path.remote_port_gid == ipv4_gid(kVnic));
  // cm_form_tid: the MAD agent's hi_tid, then the comm ID as the kernel holds it (a __be32
  // read as a little-endian u32): its bytes reversed on the wire.
  CHECK((m.transaction_id & 0xFFFF'FFFF) == byteswap32(got.local_comm_id.value()));

  CmMessage expected = cm::test::kernel_req();
  expected.transaction_id = m.transaction_id;
  Req& r = std::get<Req>(expected.body);
  r.local_comm_id = got.local_comm_id;
  r.local_ca_guid = kGuestGuid;
  r.local_qpn = got.local_qpn;
  r.starting_psn = got.starting_psn;
  r.primary_path.local_port_gid = ipv4_gid(kGuest);
  r.primary_path.remote_port_gid = ipv4_gid(kVnic);
  r.primary_path.flow_label = got.primary_path.flow_label;
  r.private_data = got.private_data;
  CHECK(expected == m);
  // Field by field too, so that a difference names itself.
  CHECK(got.remote_cm_response_timeout == 20);
  CHECK(got.local_cm_response_timeout == 20);
  CHECK(got.max_cm_retries == 15);
  CHECK(got.primary_path.local_ack_timeout == 19);
  CHECK(got.primary_path.local_port_lid == 0xFFFF);
  CHECK(got.primary_path.remote_port_lid == 0xFFFF);
  CHECK_FALSE(got.primary_path.subnet_local);
  CHECK(got.primary_path.hop_limit == 64);
  CHECK(got.primary_path.traffic_class == 0);
  CHECK(got.primary_path.sl == 0);
  CHECK(got.primary_path.packet_rate == 0);
  CHECK(got.partition_key == Pkey{0xFFFF});
  CHECK(got.path_packet_payload_mtu == PathMtu::Mtu1024);
  CHECK(got.transport_service_type == TransportServiceType::Rc);
  CHECK(got.local_qkey == Qkey{0});
  CHECK(got.responder_resources == 1);
  CHECK(got.initiator_depth == 1);
  CHECK(got.retry_count == 7);
  CHECK(got.rnr_retry_count == 7);
  CHECK(got.vendor_id == 0);
  CHECK(got.alternate_path == CmPath{});
  // The resends are the same MAD (the same TID too), about 6144 ms apart (frames 6, 8, 11).
  for (std::size_t i = 1; i < reqs.size(); ++i) CHECK(std::ranges::equal(reqs[i].mad(), reqs[0].mad()));
}

TEST_CASE("cm capture: a REQ nobody listens for gets REJ 8, as cm_samples' kernel_rej_no_listener", "[cm][capture]") {
  const auto reqs = select(kSender, kGuest, AttributeId::Req);
  const auto rejs = select(kGuest, kSender, AttributeId::Rej);
  REQUIRE(reqs.size() == 2);
  REQUIRE(rejs.size() == 1);
  const CmMessage& req = reqs[0].message;  // service TCP 7999
  CHECK(std::get<Req>(req.body).service_id == ip_service_id(PortSpace::Tcp, 7999));
  CmMessage expected = cm::test::kernel_rej_no_listener();
  expected.transaction_id = req.transaction_id;  // echoed
  std::get<Rej>(expected.body).remote_comm_id = std::get<Req>(req.body).local_comm_id;
  INFO(describe(rejs[0].message));
  CHECK(expected == rejs[0].message);
  const Rej& rej = std::get<Rej>(rejs[0].message.body);
  CHECK(rej.reason == RejectReason::InvalidServiceId);
  CHECK(rej.message_rejected == MessageRejected::Req);
  CHECK(rej.local_comm_id == CommId{0});
  CHECK(rej.ari.bytes.empty());
}

// The passive side: rping -s accepts the REQ for 7174; rxe's REP. cm_samples' kernel_rep has
// the end-to-end flow control bit set, which rping's rxe does not (rdma_cm passes the
// application's conn_param.flow_control, 0 from rping): the sample now says 0.
TEST_CASE("cm capture: rping -s answers with the REP of cm_samples' kernel_rep", "[cm][capture]") {
  const auto reqs = select(kSender, kGuest, AttributeId::Req);
  const auto reps = select(kGuest, kSender, AttributeId::Rep);
  REQUIRE(reqs.size() == 2);
  REQUIRE(reps.size() == 8);
  const CmMessage& req = reqs[1].message;  // service TCP 7174
  const Req& q = std::get<Req>(req.body);
  CHECK(q.service_id == ip_service_id(PortSpace::Tcp, kRpingPort));
  const CmMessage& m = reps[0].message;
  const Rep& got = std::get<Rep>(m.body);
  INFO(describe(m));
  CHECK(m.transaction_id == req.transaction_id);
  CHECK(got.remote_comm_id == q.local_comm_id);
  CHECK(got.local_ca_guid == kGuestGuid);
  CHECK(got.local_qpn == Qpn{0x11});  // rping's QP, rxe's first
  CHECK(got.target_ack_delay == 15);  // rxe's ack_delay
  CHECK_FALSE(got.end_to_end_flow_control);
  CHECK(got.failover_accepted == FailoverAccepted::Accepted);
  CHECK(got.rnr_retry_count == 7);
  CHECK(got.responder_resources == 1);
  CHECK(got.initiator_depth == 1);
  CHECK_FALSE(got.srq);

  CmMessage expected = cm::test::kernel_rep();
  expected.transaction_id = m.transaction_id;
  Rep& r = std::get<Rep>(expected.body);
  r.local_comm_id = got.local_comm_id;
  r.remote_comm_id = q.local_comm_id;
  r.local_qpn = got.local_qpn;
  r.starting_psn = got.starting_psn;
  r.local_ca_guid = kGuestGuid;
  CHECK(expected == m);
  // The resends (no RTU ever came) are the same MAD.
  for (const CapturedMad& again : reps) CHECK(std::ranges::equal(again.mad(), reps[0].mad()));
}

// rping -c killed while its REQ waited for an answer: rdma_destroy_id in REQ_SENT sends
// REJ 4 (timeout) with the node GUID as ARI, message "other", the remote comm ID unknown (0).
TEST_CASE("cm capture: an active id destroyed in REQ_SENT sends REJ 4 with its GUID", "[cm][capture]") {
  const auto reqs = select(kGuest, kVnic, AttributeId::Req);
  const auto rejs = select(kGuest, kVnic, AttributeId::Rej);
  REQUIRE(reqs.size() == 3);
  REQUIRE(rejs.size() == 1);
  const Req& q = std::get<Req>(reqs[0].message.body);
  const Rej& rej = std::get<Rej>(rejs[0].message.body);
  INFO(describe(rejs[0].message));
  CHECK(rejs[0].message.transaction_id == reqs[0].message.transaction_id);
  CHECK(rej.local_comm_id == q.local_comm_id);
  CHECK(rej.remote_comm_id == CommId{0});
  CHECK(rej.message_rejected == MessageRejected::Other);
  CHECK(rej.reason == RejectReason::Timeout);
  REQUIRE(rej.ari.bytes.size() == 8);
  CHECK(load_be64(rej.ari.bytes, 0) == kGuestGuid);
  CHECK(std::ranges::all_of(rej.private_data.bytes, [](std::uint8_t b) { return b == 0; }));
}

// udaddy's SIDR_REQ: cm_samples' kernel_sidr_req with this request's identities.
TEST_CASE("cm capture: udaddy's SIDR_REQ is cm_samples' kernel_sidr_req", "[cm][capture]") {
  const auto sidrs = select(kGuest, kVnic, AttributeId::SidrReq);
  REQUIRE(sidrs.size() == 3);
  const CmMessage& m = sidrs[0].message;
  const SidrReq& got = std::get<SidrReq>(m.body);
  INFO(describe(m));
  const auto cma = parse_cma_header(got.private_data.bytes);
  REQUIRE(cma);
  CHECK(cma->ip_version == 4);
  CHECK(cma_source_ipv4(*cma) == kGuest);
  CHECK(cma_destination_ipv4(*cma) == kVnic);
  CHECK(std::ranges::all_of(cma_user_data(got.private_data.bytes), [](std::uint8_t b) { return b == 0; }));
  CHECK(got.service_id == ip_service_id(PortSpace::Udp, kRpingPort));  // udaddy's default port is 7174 too
  CHECK(got.partition_key == Pkey{0xFFFF});
  CHECK((m.transaction_id & 0xFFFF'FFFF) == byteswap32(got.request_id));

  CmMessage expected = cm::test::kernel_sidr_req();
  expected.transaction_id = m.transaction_id;
  SidrReq& r = std::get<SidrReq>(expected.body);
  r.request_id = got.request_id;
  r.private_data = got.private_data;
  CHECK(expected == m);
  for (const CapturedMad& again : sidrs) CHECK(std::ranges::equal(again.mad(), sidrs[0].mad()));
}
