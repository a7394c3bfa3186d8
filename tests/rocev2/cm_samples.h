// CM messages with the values Linux 6.1's rdma_cm puts in them for rping (RC, TCP port space,
// port 7174) and udaddy (UD, UDP port space) over RoCE v2 / IPv4, as docs/RDMA_CM_RESEARCH.md
// §3 reads them from cm.c and cma.c, checked against rxe's own capture
// (tests/rocev2/cm_capture_test.cpp: the REQ, REP, REJ 8 and SIDR_REQ rxe sent are these
// messages with the capture's identities put in; docs/RDMA_CM.md, "Checked against rxe's
// capture"). The MRA, RTU, DREQ, DREP and SIDR_REP are not in that capture. Shared by the
// codec's tests, the tshark cross-check and the CM MAD fuzzer's seeds. The private data lives
// in function-local statics, so the messages' spans stay valid for the whole program.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "rocev2/cm/cma.h"
#include "rocev2/cm/mad.h"

namespace rrdma::rocev2::cm::test {

// The active side (10.66.0.2, MAC 02:00:0a:42:00:02) connects from an ephemeral port to
// the passive side (10.66.0.1) listening on rping's port.
inline constexpr stack::Ipv4Address kActiveIp{0x0A420002};
inline constexpr stack::Ipv4Address kPassiveIp{0x0A420001};
inline constexpr std::uint16_t kActivePort = 40000;
inline constexpr std::uint16_t kRpingPort = 7174;
// Node GUIDs: the EUI-64 of each side's MAC (U/L bit flipped, FF:FE in the middle).
inline constexpr std::uint64_t kActiveGuid = 0x00000AFFFE420002;
inline constexpr std::uint64_t kPassiveGuid = 0x00000AFFFE420001;
inline constexpr CommId kActiveCommId{0x92C45E71};
inline constexpr CommId kPassiveCommId{0x1F2E3D4C};
// cm_form_tid: the MAD agent's hi_tid above the sender's local comm ID as the kernel holds it,
// a __be32 read as a little-endian u32: on the wire its bytes come reversed (rxe's capture:
// comm ID 0x76700d15, TID 0x00000002150d7076).
inline constexpr std::uint64_t kReqTid = (std::uint64_t{1} << 32) | 0x715EC492;
inline constexpr std::uint64_t kDreqTid = (std::uint64_t{1} << 32) | 0x4C3D2E1F;
inline constexpr Qpn kActiveQpn{0x11};
inline constexpr Qpn kPassiveQpn{0x12};
inline constexpr Qkey kRdmaUdpQkey{0x01234567};  // RDMA_UDP_QKEY

// ::ffff:a.b.c.d, the GID of an IPv4 address.
inline Gid ipv4_gid(stack::Ipv4Address a) {
  Gid g{};
  g[10] = g[11] = 0xFF;
  store_be32(g, 12, a.value);
  return g;
}

// A private-data field of N bytes starting with the CMA header of this connection.
template <std::size_t N>
std::array<std::uint8_t, N> cma_private_data() {
  std::array<std::uint8_t, N> b{};
  emit_cma_private_data(cma_header_ipv4(kActiveIp, kActivePort, kPassiveIp), {}, b);
  return b;
}

// REQ (cm_format_req via cma_connect_ib): CM response timeouts 20, 15 CM retries, P_Key
// 0xFFFF, MTU 1024 for a 1500-byte netdev, both LIDs permissive since the hop limit (64) is
// above 1, the flow label (sport * 31 + dport) & 0xFFFFF, local ACK timeout 19; rping's
// responder resources and initiator depth 1, retry and RNR retry 7.
inline CmMessage kernel_req() {
  static const auto private_data = cma_private_data<Req::kPrivateDataLength>();
  Req r;
  r.local_comm_id = kActiveCommId;
  r.service_id = ip_service_id(PortSpace::Tcp, kRpingPort);
  r.local_ca_guid = kActiveGuid;
  r.local_qpn = kActiveQpn;
  r.responder_resources = 1;
  r.initiator_depth = 1;
  r.remote_cm_response_timeout = 20;
  r.transport_service_type = TransportServiceType::Rc;
  r.starting_psn = Psn{0x6B8B45};
  r.local_cm_response_timeout = 20;
  r.retry_count = 7;
  r.partition_key = kDefaultPkey;
  r.path_packet_payload_mtu = PathMtu::Mtu1024;
  r.rnr_retry_count = 7;
  r.max_cm_retries = 15;
  r.primary_path = CmPath{.local_port_lid = 0xFFFF,
                          .remote_port_lid = 0xFFFF,
                          .local_port_gid = ipv4_gid(kActiveIp),
                          .remote_port_gid = ipv4_gid(kPassiveIp),
                          .flow_label = (std::uint32_t{kActivePort} * 31 + kRpingPort) & 0xFFFFF,
                          .hop_limit = 64,
                          .local_ack_timeout = 19};
  r.private_data = OpaqueBytes{private_data};
  return CmMessage{.transaction_id = kReqTid, .body = r};
}

// REP (cm_format_rep): the passive side's QPN and PSN, target ACK delay 15 (rxe's ack_delay),
// end-to-end flow control 0 (rdma_cm passes conn_param.flow_control, which rping leaves 0;
// rxe's capture).
inline CmMessage kernel_rep() {
  static const std::array<std::uint8_t, Rep::kPrivateDataLength> private_data{};
  Rep r;
  r.local_comm_id = kPassiveCommId;
  r.remote_comm_id = kActiveCommId;
  r.local_qpn = kPassiveQpn;
  r.starting_psn = Psn{0x2A5F01};
  r.responder_resources = 1;
  r.initiator_depth = 1;
  r.target_ack_delay = 15;
  r.rnr_retry_count = 7;
  r.local_ca_guid = kPassiveGuid;
  r.private_data = OpaqueBytes{private_data};
  return CmMessage{.transaction_id = kReqTid, .body = r};
}

inline CmMessage kernel_rtu() {
  static const std::array<std::uint8_t, Rtu::kPrivateDataLength> private_data{};
  return CmMessage{.transaction_id = kReqTid,
                   .body = Rtu{.local_comm_id = kActiveCommId, .remote_comm_id = kPassiveCommId,
                               .private_data = OpaqueBytes{private_data}}};
}

// The delayed MRA of a duplicate REP (CMA_CM_MRA_SETTING: service timeout 24).
inline CmMessage kernel_mra() {
  static const std::array<std::uint8_t, Mra::kPrivateDataLength> private_data{};
  return CmMessage{.transaction_id = kReqTid,
                   .body = Mra{.local_comm_id = kActiveCommId, .remote_comm_id = kPassiveCommId,
                               .message_mraed = MessageMraed::Rep, .service_timeout = 24,
                               .private_data = OpaqueBytes{private_data}}};
}

// cm_issue_rej for a REQ nobody listens for: no local comm ID yet, the REQ's TID echoed.
inline CmMessage kernel_rej_no_listener() {
  static const std::array<std::uint8_t, Rej::kPrivateDataLength> private_data{};
  return CmMessage{.transaction_id = kReqTid,
                   .body = Rej{.local_comm_id = CommId{0}, .remote_comm_id = kActiveCommId,
                               .message_rejected = MessageRejected::Req, .reason = RejectReason::InvalidServiceId,
                               .ari = {}, .private_data = OpaqueBytes{private_data}}};
}

inline CmMessage kernel_dreq() {
  static const std::array<std::uint8_t, Dreq::kPrivateDataLength> private_data{};
  return CmMessage{.transaction_id = kDreqTid,
                   .body = Dreq{.local_comm_id = kPassiveCommId, .remote_comm_id = kActiveCommId,
                                .remote_qpn_eecn = kActiveQpn, .private_data = OpaqueBytes{private_data}}};
}

inline CmMessage kernel_drep() {
  static const std::array<std::uint8_t, Drep::kPrivateDataLength> private_data{};
  return CmMessage{.transaction_id = kDreqTid,
                   .body = Drep{.local_comm_id = kActiveCommId, .remote_comm_id = kPassiveCommId,
                                .private_data = OpaqueBytes{private_data}}};
}

// udaddy: SIDR in the UDP port space, the CMA header first in the private data.
inline CmMessage kernel_sidr_req() {
  static const auto private_data = cma_private_data<SidrReq::kPrivateDataLength>();
  return CmMessage{.transaction_id = kReqTid,
                   .body = SidrReq{.request_id = kActiveCommId.value(), .partition_key = kDefaultPkey,
                                   .service_id = ip_service_id(PortSpace::Udp, kRpingPort),
                                   .private_data = OpaqueBytes{private_data}}};
}

inline CmMessage kernel_sidr_rep() {
  static const std::array<std::uint8_t, SidrRep::kPrivateDataLength> private_data{};
  return CmMessage{.transaction_id = kReqTid,
                   .body = SidrRep{.request_id = kActiveCommId.value(), .status = SidrStatus::Valid,
                                   .additional_information = {}, .vendor_id = 0, .qpn = kPassiveQpn,
                                   .service_id = ip_service_id(PortSpace::Udp, kRpingPort), .qkey = kRdmaUdpQkey,
                                   .private_data = OpaqueBytes{private_data}}};
}

// One of each message, in the order of CmBody's alternatives.
inline std::vector<CmMessage> kernel_samples() {
  return {kernel_req(), kernel_mra(), kernel_rej_no_listener(), kernel_rep(), kernel_rtu(),
          kernel_dreq(), kernel_drep(), kernel_sidr_req(), kernel_sidr_rep()};
}

}  // namespace rrdma::rocev2::cm::test
