// The communication manager's messages on the wire (IBA Vol 1 ch. 12, as Linux 6.1's
// include/rdma/ibta_vol1_c12.h lays them out and drivers/infiniband/core/cm.c sends them):
// a 256-byte MAD, the 24-byte common MAD header (IBA 13.4.3) and then one CM message. They
// travel as the payload of a UD SEND_ONLY to and from QP 1 (PROTOCOL.md, "Connection
// management over GSI"); that encapsulation is not this file's business.
//
// For each message a value (the fields under their IBA names, host order; private data and
// the other opaque areas borrowed from the MAD) and one field table in mad.cpp that both
// parse_cm_mad and emit_cm_mad walk, so the two cannot disagree on an offset. The table's
// entries are checked at compile time to lie inside the message, and the parser only ever
// reads through a view whose length was checked first: no input can make it read outside the
// span it was given. Layouts, in our words, are in docs/RDMA_CM.md.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "rocev2/types.h"
#include "rocev2/wire.h"
#include "stack/bytes.h"

namespace rrdma::rocev2::cm {

// --- The MAD and its common header (IBA 13.4.3) ------------------------------------------

inline constexpr std::size_t kMadLength = 256;
inline constexpr std::size_t kMadHeaderLength = 24;
inline constexpr std::size_t kCmDataLength = kMadLength - kMadHeaderLength;  // 232

inline constexpr std::uint8_t kMadBaseVersion = 1;
inline constexpr std::uint8_t kCmClass = 0x07;        // management class of the CM
inline constexpr std::uint8_t kCmClassVersion = 2;    // IBA 1.2 and later; the only one Linux registers
inline constexpr std::uint8_t kMethodSend = 0x03;     // every CM message is a Send (IBA 12.6.1)

// The attribute ID names the message (IBA Table 104). Unknown values survive a round trip.
enum class AttributeId : std::uint16_t {
  ClassPortInfo = 0x0001,
  Req = 0x0010,
  Mra = 0x0011,
  Rej = 0x0012,
  Rep = 0x0013,
  Rtu = 0x0014,
  Dreq = 0x0015,
  Drep = 0x0016,
  SidrReq = 0x0017,
  SidrRep = 0x0018,
  Lap = 0x0019,  // load alternate path: alternate paths are not supported
  Apr = 0x001A,  // alternate path response: likewise
};
// "REQ", "SIDR_REP", "LAP", ...; "UNKNOWN" for a value IBA does not define.
std::string_view attribute_name(AttributeId id);

struct MadHeader {
  std::uint8_t base_version = kMadBaseVersion;
  std::uint8_t mgmt_class = kCmClass;
  std::uint8_t class_version = kCmClassVersion;
  std::uint8_t method = kMethodSend;
  std::uint16_t status = 0;
  std::uint16_t class_specific = 0;
  std::uint64_t transaction_id = 0;
  AttributeId attribute_id{};
  // 16 reserved bits here
  std::uint32_t attribute_modifier = 0;  // the CM puts ECE options here (Linux: 0 for rxe)
  bool operator==(const MadHeader&) const = default;
};

// The common MAD header, 24 bytes, of any management class.
class MadHeaderView : public FixedLengthView<MadHeaderView, kMadHeaderLength> {
 public:
  // Field offsets (IBA 13.4.3, Figure 145).
  static constexpr std::size_t kBaseVersionAt = 0;
  static constexpr std::size_t kMgmtClassAt = 1;
  static constexpr std::size_t kClassVersionAt = 2;
  static constexpr std::size_t kMethodAt = 3;
  static constexpr std::size_t kStatusAt = 4;
  static constexpr std::size_t kClassSpecificAt = 6;
  static constexpr std::size_t kTransactionIdAt = 8;
  static constexpr std::size_t kAttributeIdAt = 16;
  static constexpr std::size_t kAttributeModifierAt = 20;

  std::uint8_t base_version() const { return b_[kBaseVersionAt]; }
  std::uint8_t mgmt_class() const { return b_[kMgmtClassAt]; }
  std::uint8_t class_version() const { return b_[kClassVersionAt]; }
  std::uint8_t method() const { return b_[kMethodAt]; }
  std::uint16_t status() const { return load_be16(b_, kStatusAt); }
  std::uint16_t class_specific() const { return load_be16(b_, kClassSpecificAt); }
  std::uint64_t transaction_id() const { return load_be64(b_, kTransactionIdAt); }
  AttributeId attribute_id() const { return AttributeId{load_be16(b_, kAttributeIdAt)}; }
  std::uint32_t attribute_modifier() const { return load_be32(b_, kAttributeModifierAt); }

 private:
  friend FixedLengthView;
  explicit MadHeaderView(ByteSpan b) : FixedLengthView(b) {}
};

MadHeader parse(const MadHeaderView& v);
// At the start of `out` (24 bytes); the reserved bytes 18-19 written as zero.
void emit(const MadHeader& h, MutableByteSpan out);

// --- Values of the CM messages (IBA 12.6) -----------------------------------------------

using CommId = Id<struct CommIdTag, std::uint32_t>;  // local/remote communication ID
using Gid = std::array<std::uint8_t, 16>;

// Bytes borrowed from a MAD (or, to emit, from the caller), compared by content: a message's
// private data, a REJ's ARI, a SIDR_REP's additional information. Valid while what they
// borrow from is.
struct OpaqueBytes {
  ByteSpan bytes;
  bool operator==(const OpaqueBytes& o) const { return std::ranges::equal(bytes, o.bytes); }
};

// REQ's Transport Service Type (2 bits). 3 means "see the extended transport type", of which
// only 1 (XRC) is defined.
enum class TransportServiceType : std::uint8_t { Rc = 0, Uc = 1, Rd = 2, Extended = 3 };
inline constexpr std::uint8_t kExtendedTransportXrc = 1;

// Path MTU codes (IBA 9.7.2 / ibv_mtu); 0 and 6-15 are reserved.
enum class PathMtu : std::uint8_t { Mtu256 = 1, Mtu512 = 2, Mtu1024 = 3, Mtu2048 = 4, Mtu4096 = 5 };

// One path of a REQ (the primary, and the alternate that Linux leaves zero for RoCE).
struct CmPath {
  std::uint16_t local_port_lid = 0;
  std::uint16_t remote_port_lid = 0;
  Gid local_port_gid{};
  Gid remote_port_gid{};
  std::uint32_t flow_label = 0;        // 20 bits
  std::uint8_t packet_rate = 0;        // 6 bits
  std::uint8_t traffic_class = 0;
  std::uint8_t hop_limit = 0;
  std::uint8_t sl = 0;                 // 4 bits
  bool subnet_local = false;
  std::uint8_t local_ack_timeout = 0;  // 5 bits: 4.096 us * 2^n
  bool operator==(const CmPath&) const = default;
};

// Connection request (IBA Table 106).
struct Req {
  static constexpr AttributeId kAttribute = AttributeId::Req;
  static constexpr std::size_t kPrivateDataLength = 92;
  CommId local_comm_id{};
  std::uint32_t vendor_id = 0;                   // 24 bits (ECE)
  std::uint64_t service_id = 0;
  std::uint64_t local_ca_guid = 0;
  Qkey local_qkey{};                             // 0 for RC
  Qpn local_qpn{};
  std::uint8_t responder_resources = 0;
  std::uint32_t local_eecn = 0;                  // 24 bits
  std::uint8_t initiator_depth = 0;
  std::uint32_t remote_eecn = 0;                 // 24 bits
  std::uint8_t remote_cm_response_timeout = 0;   // 5 bits
  TransportServiceType transport_service_type = TransportServiceType::Rc;
  bool end_to_end_flow_control = false;
  Psn starting_psn{};
  std::uint8_t local_cm_response_timeout = 0;    // 5 bits
  std::uint8_t retry_count = 0;                  // 3 bits
  Pkey partition_key = kDefaultPkey;
  PathMtu path_packet_payload_mtu = PathMtu::Mtu1024;
  bool rdc_exists = false;
  std::uint8_t rnr_retry_count = 0;              // 3 bits
  std::uint8_t max_cm_retries = 0;               // 4 bits
  bool srq = false;
  std::uint8_t extended_transport_type = 0;      // 3 bits
  CmPath primary_path{};
  CmPath alternate_path{};
  bool sap_supported = false;
  OpaqueBytes private_data{};                      // up to 92 bytes
  bool operator==(const Req&) const = default;
};

// Which message an MRA acknowledges (2 bits; 3 is reserved).
enum class MessageMraed : std::uint8_t { Req = 0, Rep = 1, Lap = 2 };

// Message receipt acknowledgement (IBA Table 107).
struct Mra {
  static constexpr AttributeId kAttribute = AttributeId::Mra;
  static constexpr std::size_t kPrivateDataLength = 222;
  CommId local_comm_id{};
  CommId remote_comm_id{};
  MessageMraed message_mraed = MessageMraed::Req;
  std::uint8_t service_timeout = 0;  // 5 bits
  OpaqueBytes private_data{};
  bool operator==(const Mra&) const = default;
};

// Which message a REJ rejects (2 bits; 3 is reserved).
enum class MessageRejected : std::uint8_t { Req = 0, Rep = 1, Other = 2 };

// Rejection reasons (IBA Table 109). Unknown values survive a round trip.
enum class RejectReason : std::uint16_t {
  NoQp = 1,
  NoEec = 2,
  NoResources = 3,
  Timeout = 4,
  Unsupported = 5,
  InvalidCommId = 6,
  InvalidCommInstance = 7,
  InvalidServiceId = 8,          // nobody listens on the service ID
  InvalidTransportType = 9,
  StaleConnection = 10,
  RdcNotExist = 11,
  InvalidGid = 12,
  InvalidLid = 13,
  InvalidSl = 14,
  InvalidTrafficClass = 15,
  InvalidHopLimit = 16,
  InvalidPacketRate = 17,
  InvalidAltGid = 18,
  InvalidAltLid = 19,
  InvalidAltSl = 20,
  InvalidAltTrafficClass = 21,
  InvalidAltHopLimit = 22,
  InvalidAltPacketRate = 23,
  PortCmRedirect = 24,
  PortRedirect = 25,
  InvalidMtu = 26,
  InsufficientResponderResources = 27,
  ConsumerDefined = 28,          // rdma_reject
  InvalidRnrRetry = 29,
  DuplicateLocalCommId = 30,
  InvalidClassVersion = 31,
  InvalidFlowLabel = 32,
  InvalidAltFlowLabel = 33,
  VendorOptionNotSupported = 35,  // rdma_reject_ece
};
// "invalid service ID", ...; an empty view for a code without a name (print it by number).
std::string_view reject_reason_name(RejectReason r);

// Connection reject (IBA Table 108).
struct Rej {
  static constexpr AttributeId kAttribute = AttributeId::Rej;
  static constexpr std::size_t kPrivateDataLength = 148;
  static constexpr std::size_t kAriLength = 72;
  CommId local_comm_id{};
  CommId remote_comm_id{};
  MessageRejected message_rejected = MessageRejected::Req;
  RejectReason reason{};
  OpaqueBytes ari{};  // additional rejection information: its size is the Reject Info Length (<= 72)
  OpaqueBytes private_data{};
  bool operator==(const Rej&) const = default;
};

// REP's Failover Accepted (2 bits; 3 is reserved).
enum class FailoverAccepted : std::uint8_t { Accepted = 0, NotSupported = 1, Rejected = 2 };

// Connection reply (IBA Table 110).
struct Rep {
  static constexpr AttributeId kAttribute = AttributeId::Rep;
  static constexpr std::size_t kPrivateDataLength = 196;
  CommId local_comm_id{};
  CommId remote_comm_id{};
  Qkey local_qkey{};
  Qpn local_qpn{};
  std::uint32_t vendor_id = 0;  // 24 bits, in three bytes spread over the message
  std::uint32_t local_eecn = 0; // 24 bits
  Psn starting_psn{};
  std::uint8_t responder_resources = 0;
  std::uint8_t initiator_depth = 0;
  std::uint8_t target_ack_delay = 0;  // 5 bits
  FailoverAccepted failover_accepted = FailoverAccepted::Accepted;
  bool end_to_end_flow_control = false;
  std::uint8_t rnr_retry_count = 0;   // 3 bits
  bool srq = false;
  std::uint64_t local_ca_guid = 0;
  OpaqueBytes private_data{};
  bool operator==(const Rep&) const = default;
};

// The RTU (ready to use, IBA Table 111) and the DREP (disconnection reply, Table 113) have
// the same layout under two attributes: the comm IDs and 224 bytes of private data.
template <AttributeId kId>
struct CommIdsAndPrivateData {
  static constexpr AttributeId kAttribute = kId;
  static constexpr std::size_t kPrivateDataLength = 224;
  CommId local_comm_id{};
  CommId remote_comm_id{};
  OpaqueBytes private_data{};
  bool operator==(const CommIdsAndPrivateData&) const = default;
};
using Rtu = CommIdsAndPrivateData<AttributeId::Rtu>;
using Drep = CommIdsAndPrivateData<AttributeId::Drep>;

// Disconnection request (IBA Table 112).
struct Dreq {
  static constexpr AttributeId kAttribute = AttributeId::Dreq;
  static constexpr std::size_t kPrivateDataLength = 220;
  CommId local_comm_id{};
  CommId remote_comm_id{};
  Qpn remote_qpn_eecn{};  // Linux ignores a DREQ whose value is not its QPN
  OpaqueBytes private_data{};
  bool operator==(const Dreq&) const = default;
};

// Service ID resolution request, for UD (IBA Table 119).
struct SidrReq {
  static constexpr AttributeId kAttribute = AttributeId::SidrReq;
  static constexpr std::size_t kPrivateDataLength = 216;
  std::uint32_t request_id = 0;
  Pkey partition_key = kDefaultPkey;
  std::uint64_t service_id = 0;
  OpaqueBytes private_data{};
  bool operator==(const SidrReq&) const = default;
};

// SIDR_REP status (IBA Table 121); 6-255 are reserved.
enum class SidrStatus : std::uint8_t {
  Valid = 0,
  ServiceIdNotSupported = 1,  // Linux: nobody listens
  Rejected = 2,
  NoQp = 3,
  Redirect = 4,
  VersionNotSupported = 5,
};
std::string_view sidr_status_name(SidrStatus s);

// Service ID resolution response (IBA Table 120).
struct SidrRep {
  static constexpr AttributeId kAttribute = AttributeId::SidrRep;
  static constexpr std::size_t kPrivateDataLength = 136;
  static constexpr std::size_t kAdditionalInformationLength = 72;
  std::uint32_t request_id = 0;
  SidrStatus status = SidrStatus::Valid;
  OpaqueBytes additional_information{};  // its size is the Additional Information Length (<= 72)
  std::uint32_t vendor_id = 0;         // 24 bits, in two pieces
  Qpn qpn{};
  std::uint64_t service_id = 0;
  Qkey qkey{};
  OpaqueBytes private_data{};
  bool operator==(const SidrRep&) const = default;
};

using CmBody = std::variant<Req, Mra, Rej, Rep, Rtu, Dreq, Drep, SidrReq, SidrRep>;

// One CM MAD. The base version, class, class version and method are the CM's (1, 0x07, 2,
// Send) and the attribute ID is the body's, so they are not stored.
struct CmMessage {
  std::uint64_t transaction_id = 0;
  std::uint16_t status = 0;
  std::uint16_t class_specific = 0;
  std::uint32_t attribute_modifier = 0;
  CmBody body;
  bool operator==(const CmMessage&) const = default;
};

AttributeId attribute_id(const CmBody& body);
// The common header `m` goes out with.
MadHeader mad_header(const CmMessage& m);

// --- Parse and emit -----------------------------------------------------------------------

// Why bytes are not a CM message we take, or a value cannot be emitted; parse checks in this
// order. Reserved bits are ignored on parse and written as zero; reserved *values* of a
// field with a meaning are refused both ways, so that whatever we emit we also accept.
enum class CmError : std::uint8_t {
  none,
  truncated,                 // shorter than a MAD (256 bytes)
  too_long,                  // longer than a MAD: rxe refuses a UD SEND longer than the receive buffer
  bad_base_version,          // not 1
  wrong_class,               // management class other than the CM's (0x07)
  bad_class_version,         // not 2
  bad_method,                // not Send (0x03): the CM neither sends nor answers anything else
  unknown_attribute,         // an attribute ID the CM does not define
  unsupported_attribute,     // LAP, APR (alternate paths) and ClassPortInfo: known, not handled
  reserved_transport_type,   // REQ: transport type 3 with an extended type other than XRC
  reserved_mtu,              // REQ: path MTU code 0 or 6-15
  reserved_message_code,     // REJ message rejected / MRA message MRAed = 3
  reserved_failover,         // REP: failover accepted = 3
  reserved_sidr_status,      // SIDR_REP: status above 5
  reject_info_too_long,      // REJ: reject info length above 72 (the ARI field)
  additional_info_too_long,  // SIDR_REP: additional information length above 72
  // emit only
  field_out_of_range,        // a value wider than its field (a 5-bit timeout of 32, ...)
  private_data_too_long,     // more private data than the message's field holds
  buffer_too_small,          // fewer than 256 bytes to emit into
};
std::string_view to_string(CmError e);

// Takes apart one MAD (exactly kMadLength bytes). On success `out` holds the message, its
// opaque areas borrowing from `mad`; on failure `out` is unspecified.
CmError parse_cm_mad(ByteSpan mad, CmMessage& out);
std::optional<CmMessage> parse_cm_mad(ByteSpan mad);

// Writes the MAD into the first kMadLength bytes of `out`: header, fields, private data (the
// rest of its field zero), reserved bits zero. `out` must not overlap the bytes `m` borrows.
// On failure the bytes of `out` are unspecified.
CmError emit_cm_mad(const CmMessage& m, MutableByteSpan out);

// One line for `rrdma-vnic trace`: attribute, transaction ID, comm IDs, service ID (with its
// port space and port when IP-based), QPN, PSN, the CMA header's addresses and ports, a REJ's
// reason. E.g. "CM REQ tid 0x0000000112345678 local_comm 0x12345678 sid 0x0000000001061c06
// (TCP 7174) qpn 0x000011 psn 12345 mtu 1024 cma{10.66.0.2:40000 > 10.66.0.1:7174}".
std::string describe(const CmMessage& m);

}  // namespace rrdma::rocev2::cm
