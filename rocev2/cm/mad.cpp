#include "rocev2/cm/mad.h"

#include <arpa/inet.h>

#include <cassert>
#include <concepts>
#include <type_traits>
#include <utility>

#include "rocev2/cm/cma.h"
#include "rocev2/text.h"

namespace rrdma::rocev2::cm {

MadHeader parse(const MadHeaderView& v) {
  return MadHeader{.base_version = v.base_version(),
                   .mgmt_class = v.mgmt_class(),
                   .class_version = v.class_version(),
                   .method = v.method(),
                   .status = v.status(),
                   .class_specific = v.class_specific(),
                   .transaction_id = v.transaction_id(),
                   .attribute_id = v.attribute_id(),
                   .attribute_modifier = v.attribute_modifier()};
}

void emit(const MadHeader& h, MutableByteSpan out) {
  out[MadHeaderView::kBaseVersionAt] = h.base_version;
  out[MadHeaderView::kMgmtClassAt] = h.mgmt_class;
  out[MadHeaderView::kClassVersionAt] = h.class_version;
  out[MadHeaderView::kMethodAt] = h.method;
  store_be16(out, MadHeaderView::kStatusAt, h.status);
  store_be16(out, MadHeaderView::kClassSpecificAt, h.class_specific);
  store_be64(out, MadHeaderView::kTransactionIdAt, h.transaction_id);
  store_be16(out, MadHeaderView::kAttributeIdAt, static_cast<std::uint16_t>(h.attribute_id));
  store_be16(out, MadHeaderView::kAttributeIdAt + 2, 0);
  store_be32(out, MadHeaderView::kAttributeModifierAt, h.attribute_modifier);
}

AttributeId attribute_id(const CmBody& body) {
  return std::visit([](const auto& m) { return std::remove_cvref_t<decltype(m)>::kAttribute; }, body);
}

MadHeader mad_header(const CmMessage& m) {
  return MadHeader{.status = m.status,
                   .class_specific = m.class_specific,
                   .transaction_id = m.transaction_id,
                   .attribute_id = attribute_id(m.body),
                   .attribute_modifier = m.attribute_modifier};
}

namespace {

// --- Fields as the IBA ch. 12 tables give them -----------------------------------------

// `width` bits from bit `bit` of byte `at` (bit 0 the most significant: the tables'
// Byte[Bit] notation), bytes counted from the end of the MAD header. Made at compile time
// only, and only inside the 232 bytes of a CM message: a table entry outside fails the build.
struct Field {
  std::size_t at, bit, width;
  consteval Field(std::size_t at_, std::size_t bit_, std::size_t width_) : at(at_), bit(bit_), width(width_) {
    if (bit >= 8 || width == 0 || bit + width > 64) throw "a field is 1 to 64 bits within 8 bytes";
    if (at + bytes() > kCmDataLength) throw "a field outside the CM message";
  }
  constexpr std::size_t bytes() const { return (bit + width + 7) / 8; }
  constexpr std::size_t shift() const { return bytes() * 8 - bit - width; }  // bits after it
  constexpr std::uint64_t mask() const { return width == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << width) - 1; }
};

// A field IBA splits in pieces (a REP's vendor ID), most significant piece first.
template <std::size_t N>
struct SplitField {
  std::array<Field, N> parts;
  constexpr std::size_t width() const {
    std::size_t w = 0;
    for (const Field& p : parts) w += p.width;
    return w;
  }
};

// Whole bytes: a GID, or an area of opaque bytes.
struct Area {
  std::size_t at, length;
  consteval Area(std::size_t at_, std::size_t length_) : at(at_), length(length_) {
    if (at + length > kCmDataLength) throw "an area outside the CM message";
  }
};

std::uint64_t read_bits(ByteSpan data, const Field& f) { return (load_be(data, f.at, f.bytes()) >> f.shift()) & f.mask(); }

void write_bits(MutableByteSpan data, const Field& f, std::uint64_t value) {
  const std::uint64_t mask = f.mask() << f.shift();
  const std::uint64_t word = load_be(data, f.at, f.bytes());
  store_be(data, f.at, f.bytes(), (word & ~mask) | ((value << f.shift()) & mask));
}

// A field's value as bits, and back: integers, bools, enums over their wire type, and the
// strong types of types.h (Qpn, Psn, Qkey, Pkey, CommId).
template <typename T>
std::uint64_t to_bits(const T& v) {
  if constexpr (std::is_enum_v<T>) {
    return static_cast<std::underlying_type_t<T>>(v);
  } else if constexpr (std::is_integral_v<T>) {
    return v;
  } else {
    return v.value();
  }
}

template <typename T>
T from_bits(std::uint64_t bits) {
  if constexpr (std::is_same_v<T, bool>) {
    return bits != 0;
  } else if constexpr (std::is_enum_v<T>) {
    return static_cast<T>(static_cast<std::underlying_type_t<T>>(bits));
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(bits);
  } else {
    return T(static_cast<decltype(std::declval<T>().value())>(bits));
  }
}

constexpr bool fits(std::uint64_t bits, std::size_t width) { return width == 64 || bits >> width == 0; }

void keep_first(CmError& slot, CmError e) {
  if (slot == CmError::none) slot = e;
}

// Reads the fields of a message from the 232 bytes after the MAD header (the parser checks
// the MAD's length before it makes one; every Field and Area lies inside them).
class FieldReader {
 public:
  explicit FieldReader(ByteSpan data) : data_(data) { assert(data.size() == kCmDataLength); }
  CmError error() const { return error_; }

  template <typename T>
  void operator()(const Field& f, T& out) {
    out = from_bits<T>(read_bits(data_, f));
  }
  template <std::size_t N, typename T>
  void operator()(const SplitField<N>& f, T& out) {
    std::uint64_t bits = 0;
    for (const Field& p : f.parts) bits = (bits << p.width) | read_bits(data_, p);
    out = from_bits<T>(bits);
  }
  void operator()(const Area& a, Gid& out) {
    assert(a.length == out.size());
    std::copy_n(data_.begin() + static_cast<std::ptrdiff_t>(a.at), out.size(), out.begin());
  }
  void operator()(const Area& a, OpaqueBytes& out) { out.bytes = data_.subspan(a.at, a.length); }
  // Bytes at the start of `a` whose count is the value of `length`, refused as `too_long`
  // when it says more than `a` holds.
  void counted(const Field& length, const Area& a, OpaqueBytes& out, CmError too_long) {
    const std::uint64_t n = read_bits(data_, length);
    if (n > a.length) return keep_first(error_, too_long);
    out.bytes = data_.subspan(a.at, static_cast<std::size_t>(n));
  }

 private:
  ByteSpan data_;
  CmError error_ = CmError::none;
};

// Writes the fields of a message into the 232 bytes after the MAD header, which are zero
// beforehand (reserved bits, and what private data leaves of its field, stay zero).
class FieldWriter {
 public:
  explicit FieldWriter(MutableByteSpan data) : data_(data) { assert(data.size() == kCmDataLength); }
  CmError error() const { return error_; }

  template <typename T>
  void operator()(const Field& f, const T& v) {
    const std::uint64_t bits = to_bits(v);
    if (!fits(bits, f.width)) return keep_first(error_, CmError::field_out_of_range);
    write_bits(data_, f, bits);
  }
  template <std::size_t N, typename T>
  void operator()(const SplitField<N>& f, const T& v) {
    std::uint64_t bits = to_bits(v);
    if (!fits(bits, f.width())) return keep_first(error_, CmError::field_out_of_range);
    for (std::size_t i = N; i-- > 0; bits >>= f.parts[i].width) write_bits(data_, f.parts[i], bits & f.parts[i].mask());
  }
  void operator()(const Area& a, const Gid& g) {
    assert(a.length == g.size());
    std::copy(g.begin(), g.end(), data_.begin() + static_cast<std::ptrdiff_t>(a.at));
  }
  void operator()(const Area& a, const OpaqueBytes& d) {
    if (d.bytes.size() > a.length) return keep_first(error_, CmError::private_data_too_long);
    std::copy(d.bytes.begin(), d.bytes.end(), data_.begin() + static_cast<std::ptrdiff_t>(a.at));
  }
  void counted(const Field& length, const Area& a, const OpaqueBytes& d, CmError too_long) {
    if (d.bytes.size() > a.length) return keep_first(error_, too_long);
    write_bits(data_, length, d.bytes.size());
    std::copy(d.bytes.begin(), d.bytes.end(), data_.begin() + static_cast<std::ptrdiff_t>(a.at));
  }

 private:
  MutableByteSpan data_;
  CmError error_ = CmError::none;
};

// --- The field tables: one per message, walked by the parser (M a message) and the emitter
// (M a const message). Offsets after the MAD header; IBA Vol 1 ch. 12 table numbers. -----

template <typename M, typename T>
concept Message = std::same_as<std::remove_const_t<M>, T>;

// One path of a REQ, from byte kAt (52 for the primary path, 96 for the alternate). Static
// members, not Field{kAt + n, ...} in path_fields: clang 14 refuses a consteval call whose
// arguments depend on a template parameter inside a function template.
template <std::size_t kAt>
struct PathLayout {
  static constexpr Field local_port_lid{kAt + 0, 0, 16};
  static constexpr Field remote_port_lid{kAt + 2, 0, 16};
  static constexpr Area local_port_gid{kAt + 4, 16};
  static constexpr Area remote_port_gid{kAt + 20, 16};
  static constexpr Field flow_label{kAt + 36, 0, 20};  // then 4 reserved bits
  static constexpr Field packet_rate{kAt + 39, 2, 6};  // after 2 reserved bits
  static constexpr Field traffic_class{kAt + 40, 0, 8};
  static constexpr Field hop_limit{kAt + 41, 0, 8};
  static constexpr Field sl{kAt + 42, 0, 4};
  static constexpr Field subnet_local{kAt + 42, 4, 1};  // then 3 reserved bits
  static constexpr Field local_ack_timeout{kAt + 43, 0, 5};
};

template <std::size_t kAt, typename Io, typename P>
void path_fields(Io& io, P& p) {
  using L = PathLayout<kAt>;
  io(L::local_port_lid, p.local_port_lid);
  io(L::remote_port_lid, p.remote_port_lid);
  io(L::local_port_gid, p.local_port_gid);
  io(L::remote_port_gid, p.remote_port_gid);
  io(L::flow_label, p.flow_label);
  io(L::packet_rate, p.packet_rate);
  io(L::traffic_class, p.traffic_class);
  io(L::hop_limit, p.hop_limit);
  io(L::sl, p.sl);
  io(L::subnet_local, p.subnet_local);
  io(L::local_ack_timeout, p.local_ack_timeout);
}

template <typename Io, Message<Req> M>
void fields(Io& io, M& m) {  // Table 106
  io(Field{0, 0, 32}, m.local_comm_id);
  io(Field{5, 0, 24}, m.vendor_id);  // byte 4 reserved
  io(Field{8, 0, 64}, m.service_id);
  io(Field{16, 0, 64}, m.local_ca_guid);
  io(Field{28, 0, 32}, m.local_qkey);  // bytes 24-27 reserved
  io(Field{32, 0, 24}, m.local_qpn);
  io(Field{35, 0, 8}, m.responder_resources);
  io(Field{36, 0, 24}, m.local_eecn);
  io(Field{39, 0, 8}, m.initiator_depth);
  io(Field{40, 0, 24}, m.remote_eecn);
  io(Field{43, 0, 5}, m.remote_cm_response_timeout);
  io(Field{43, 5, 2}, m.transport_service_type);
  io(Field{43, 7, 1}, m.end_to_end_flow_control);
  io(Field{44, 0, 24}, m.starting_psn);
  io(Field{47, 0, 5}, m.local_cm_response_timeout);
  io(Field{47, 5, 3}, m.retry_count);
  io(Field{48, 0, 16}, m.partition_key);
  io(Field{50, 0, 4}, m.path_packet_payload_mtu);
  io(Field{50, 4, 1}, m.rdc_exists);
  io(Field{50, 5, 3}, m.rnr_retry_count);
  io(Field{51, 0, 4}, m.max_cm_retries);
  io(Field{51, 4, 1}, m.srq);
  io(Field{51, 5, 3}, m.extended_transport_type);
  path_fields<52>(io, m.primary_path);
  path_fields<96>(io, m.alternate_path);
  io(Field{139, 5, 1}, m.sap_supported);  // beside the alternate local ACK timeout
  io(Area{140, Req::kPrivateDataLength}, m.private_data);
}

template <typename Io, Message<Mra> M>
void fields(Io& io, M& m) {  // Table 107
  io(Field{0, 0, 32}, m.local_comm_id);
  io(Field{4, 0, 32}, m.remote_comm_id);
  io(Field{8, 0, 2}, m.message_mraed);
  io(Field{9, 0, 5}, m.service_timeout);
  io(Area{10, Mra::kPrivateDataLength}, m.private_data);
}

template <typename Io, Message<Rej> M>
void fields(Io& io, M& m) {  // Table 108
  io(Field{0, 0, 32}, m.local_comm_id);
  io(Field{4, 0, 32}, m.remote_comm_id);
  io(Field{8, 0, 2}, m.message_rejected);
  io.counted(Field{9, 0, 7}, Area{12, Rej::kAriLength}, m.ari, CmError::reject_info_too_long);
  io(Field{10, 0, 16}, m.reason);
  io(Area{84, Rej::kPrivateDataLength}, m.private_data);
}

template <typename Io, Message<Rep> M>
void fields(Io& io, M& m) {  // Table 110
  io(Field{0, 0, 32}, m.local_comm_id);
  io(Field{4, 0, 32}, m.remote_comm_id);
  io(Field{8, 0, 32}, m.local_qkey);
  io(Field{12, 0, 24}, m.local_qpn);
  io(SplitField<3>{{Field{15, 0, 8}, Field{19, 0, 8}, Field{23, 0, 8}}}, m.vendor_id);
  io(Field{16, 0, 24}, m.local_eecn);
  io(Field{20, 0, 24}, m.starting_psn);
  io(Field{24, 0, 8}, m.responder_resources);
  io(Field{25, 0, 8}, m.initiator_depth);
  io(Field{26, 0, 5}, m.target_ack_delay);
  io(Field{26, 5, 2}, m.failover_accepted);
  io(Field{26, 7, 1}, m.end_to_end_flow_control);
  io(Field{27, 0, 3}, m.rnr_retry_count);
  io(Field{27, 3, 1}, m.srq);  // then 4 reserved bits
  io(Field{28, 0, 64}, m.local_ca_guid);
  io(Area{36, Rep::kPrivateDataLength}, m.private_data);
}

template <typename Io, typename M>
  requires Message<M, Rtu> || Message<M, Drep>
void fields(Io& io, M& m) {  // Tables 111 and 113
  io(Field{0, 0, 32}, m.local_comm_id);
  io(Field{4, 0, 32}, m.remote_comm_id);
  io(Area{8, 224}, m.private_data);
}

template <typename Io, Message<Dreq> M>
void fields(Io& io, M& m) {  // Table 112
  io(Field{0, 0, 32}, m.local_comm_id);
  io(Field{4, 0, 32}, m.remote_comm_id);
  io(Field{8, 0, 24}, m.remote_qpn_eecn);
  io(Area{12, Dreq::kPrivateDataLength}, m.private_data);
}

template <typename Io, Message<SidrReq> M>
void fields(Io& io, M& m) {  // Table 119
  io(Field{0, 0, 32}, m.request_id);
  io(Field{4, 0, 16}, m.partition_key);  // then 2 reserved bytes
  io(Field{8, 0, 64}, m.service_id);
  io(Area{16, SidrReq::kPrivateDataLength}, m.private_data);
}

template <typename Io, Message<SidrRep> M>
void fields(Io& io, M& m) {  // Table 120
  io(Field{0, 0, 32}, m.request_id);
  io(Field{4, 0, 8}, m.status);
  io.counted(Field{5, 0, 8}, Area{24, SidrRep::kAdditionalInformationLength}, m.additional_information,
             CmError::additional_info_too_long);
  io(SplitField<2>{{Field{6, 0, 16}, Field{11, 0, 8}}}, m.vendor_id);
  io(Field{8, 0, 24}, m.qpn);
  io(Field{12, 0, 64}, m.service_id);
  io(Field{20, 0, 32}, m.qkey);
  io(Area{96, SidrRep::kPrivateDataLength}, m.private_data);
}

// --- Reserved values: refused on parse and on emit --------------------------------------

template <typename T>
constexpr auto code(T e) {
  return static_cast<std::underlying_type_t<T>>(e);
}

constexpr bool defined(PathMtu mtu) { return code(mtu) >= code(PathMtu::Mtu256) && code(mtu) <= code(PathMtu::Mtu4096); }

CmError check(const Req& m) {
  if (m.transport_service_type == TransportServiceType::Extended && m.extended_transport_type != kExtendedTransportXrc)
    return CmError::reserved_transport_type;
  if (!defined(m.path_packet_payload_mtu)) return CmError::reserved_mtu;
  return CmError::none;
}
CmError check(const Mra& m) {
  return code(m.message_mraed) > code(MessageMraed::Lap) ? CmError::reserved_message_code : CmError::none;
}
CmError check(const Rej& m) {
  return code(m.message_rejected) > code(MessageRejected::Other) ? CmError::reserved_message_code : CmError::none;
}
CmError check(const Rep& m) {
  return code(m.failover_accepted) > code(FailoverAccepted::Rejected) ? CmError::reserved_failover : CmError::none;
}
CmError check(const SidrRep& m) {
  return code(m.status) > code(SidrStatus::VersionNotSupported) ? CmError::reserved_sidr_status : CmError::none;
}
template <typename M>
CmError check(const M&) {
  return CmError::none;
}

// The body of the alternative of CmBody whose attribute is `id`, from the 232 bytes after the
// header.
template <std::size_t I = 0>
CmError parse_body(AttributeId id, ByteSpan data, CmBody& out) {
  if constexpr (I == std::variant_size_v<CmBody>) {
    const bool known = id == AttributeId::Lap || id == AttributeId::Apr || id == AttributeId::ClassPortInfo;
    return known ? CmError::unsupported_attribute : CmError::unknown_attribute;
  } else {
    using M = std::variant_alternative_t<I, CmBody>;
    if (id != M::kAttribute) return parse_body<I + 1>(id, data, out);
    M m;
    FieldReader reader(data);
    fields(reader, m);
    if (reader.error() != CmError::none) return reader.error();
    if (const CmError e = check(m); e != CmError::none) return e;
    out = m;
    return CmError::none;
  }
}

}  // namespace

CmError parse_cm_mad(ByteSpan mad, CmMessage& out) {
  if (mad.size() < kMadLength) return CmError::truncated;
  if (mad.size() > kMadLength) return CmError::too_long;
  const MadHeader h = parse(*MadHeaderView::check(mad));
  if (h.base_version != kMadBaseVersion) return CmError::bad_base_version;
  if (h.mgmt_class != kCmClass) return CmError::wrong_class;
  if (h.class_version != kCmClassVersion) return CmError::bad_class_version;
  if (h.method != kMethodSend) return CmError::bad_method;
  out.transaction_id = h.transaction_id;
  out.status = h.status;
  out.class_specific = h.class_specific;
  out.attribute_modifier = h.attribute_modifier;
  return parse_body(h.attribute_id, mad.subspan(kMadHeaderLength), out.body);
}

std::optional<CmMessage> parse_cm_mad(ByteSpan mad) {
  CmMessage m;
  if (parse_cm_mad(mad, m) != CmError::none) return std::nullopt;
  return m;
}

CmError emit_cm_mad(const CmMessage& m, MutableByteSpan out) {
  if (out.size() < kMadLength) return CmError::buffer_too_small;
  const MutableByteSpan mad = out.first(kMadLength);
  return std::visit(
      [&](const auto& body) {
        if (const CmError e = check(body); e != CmError::none) return e;
        std::fill(mad.begin(), mad.end(), std::uint8_t{0});
        emit(mad_header(m), mad);
        FieldWriter writer(mad.subspan(kMadHeaderLength));
        fields(writer, body);
        return writer.error();
      },
      m.body);
}

// --- Names ------------------------------------------------------------------------------

std::string_view attribute_name(AttributeId id) {
  switch (id) {
    case AttributeId::ClassPortInfo: return "ClassPortInfo";
    case AttributeId::Req: return "REQ";
    case AttributeId::Mra: return "MRA";
    case AttributeId::Rej: return "REJ";
    case AttributeId::Rep: return "REP";
    case AttributeId::Rtu: return "RTU";
    case AttributeId::Dreq: return "DREQ";
    case AttributeId::Drep: return "DREP";
    case AttributeId::SidrReq: return "SIDR_REQ";
    case AttributeId::SidrRep: return "SIDR_REP";
    case AttributeId::Lap: return "LAP";
    case AttributeId::Apr: return "APR";
  }
  return "UNKNOWN";
}

std::string_view reject_reason_name(RejectReason r) {
  using R = RejectReason;
  switch (r) {
    case R::NoQp: return "no QP available";
    case R::NoEec: return "no EEC available";
    case R::NoResources: return "no resources available";
    case R::Timeout: return "timeout";
    case R::Unsupported: return "unsupported request";
    case R::InvalidCommId: return "invalid communication ID";
    case R::InvalidCommInstance: return "invalid communication instance";
    case R::InvalidServiceId: return "invalid service ID";
    case R::InvalidTransportType: return "invalid transport service type";
    case R::StaleConnection: return "stale connection";
    case R::RdcNotExist: return "RDC does not exist";
    case R::InvalidGid: return "primary remote port GID rejected";
    case R::InvalidLid: return "primary remote port LID rejected";
    case R::InvalidSl: return "invalid primary SL";
    case R::InvalidTrafficClass: return "invalid primary traffic class";
    case R::InvalidHopLimit: return "invalid primary hop limit";
    case R::InvalidPacketRate: return "invalid primary packet rate";
    case R::InvalidAltGid: return "alternate remote port GID rejected";
    case R::InvalidAltLid: return "alternate remote port LID rejected";
    case R::InvalidAltSl: return "invalid alternate SL";
    case R::InvalidAltTrafficClass: return "invalid alternate traffic class";
    case R::InvalidAltHopLimit: return "invalid alternate hop limit";
    case R::InvalidAltPacketRate: return "invalid alternate packet rate";
    case R::PortCmRedirect: return "port and CM redirection";
    case R::PortRedirect: return "port redirection";
    case R::InvalidMtu: return "invalid path MTU";
    case R::InsufficientResponderResources: return "insufficient responder resources";
    case R::ConsumerDefined: return "consumer reject";
    case R::InvalidRnrRetry: return "invalid RNR NAK retry count";
    case R::DuplicateLocalCommId: return "duplicate local communication ID";
    case R::InvalidClassVersion: return "unsupported class version";
    case R::InvalidFlowLabel: return "invalid primary flow label";
    case R::InvalidAltFlowLabel: return "invalid alternate flow label";
    case R::VendorOptionNotSupported: return "vendor option not supported";
  }
  return {};
}

std::string_view sidr_status_name(SidrStatus s) {
  switch (s) {
    case SidrStatus::Valid: return "valid";
    case SidrStatus::ServiceIdNotSupported: return "service ID not supported";
    case SidrStatus::Rejected: return "rejected";
    case SidrStatus::NoQp: return "no QP";
    case SidrStatus::Redirect: return "redirect";
    case SidrStatus::VersionNotSupported: return "version not supported";
  }
  return {};
}

std::string_view to_string(CmError e) {
  switch (e) {
    case CmError::none: return "none";
    case CmError::truncated: return "truncated";
    case CmError::too_long: return "too long";
    case CmError::bad_base_version: return "bad base version";
    case CmError::wrong_class: return "wrong management class";
    case CmError::bad_class_version: return "bad class version";
    case CmError::bad_method: return "bad method";
    case CmError::unknown_attribute: return "unknown attribute";
    case CmError::unsupported_attribute: return "unsupported attribute";
    case CmError::reserved_transport_type: return "reserved transport type";
    case CmError::reserved_mtu: return "reserved MTU";
    case CmError::reserved_message_code: return "reserved message code";
    case CmError::reserved_failover: return "reserved failover code";
    case CmError::reserved_sidr_status: return "reserved SIDR status";
    case CmError::reject_info_too_long: return "reject info too long";
    case CmError::additional_info_too_long: return "additional info too long";
    case CmError::field_out_of_range: return "field out of range";
    case CmError::private_data_too_long: return "private data too long";
    case CmError::buffer_too_small: return "buffer too small";
  }
  return "?";
}

// --- One line for a trace ---------------------------------------------------------------

namespace {

void describe_comm_ids(std::string& out, CommId local, CommId remote) {
  append(out, " local_comm 0x%08x remote_comm 0x%08x", local.value(), remote.value());
}

void describe_address(std::string& out, std::uint8_t ip_version, const IpField& field, unsigned port) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (ip_version == 4) {
    inet_ntop(AF_INET, field.data() + 12, text, sizeof text);
    append(out, "%s:%u", text, port);
  } else {
    inet_ntop(AF_INET6, field.data(), text, sizeof text);
    append(out, "[%s]:%u", text, port);
  }
}

// The service ID, and for an IP-based one its port space and port and the CMA header at the
// start of the private data (from the active side's address and port to the passive side's
// address and the service ID's port).
void describe_service(std::string& out, std::uint64_t service_id, const OpaqueBytes* private_data) {
  append(out, " sid 0x%016llx", static_cast<unsigned long long>(service_id));
  const auto ip = parse_ip_service_id(service_id);
  if (!ip) return;
  append(out, " (%s %u)", port_space_name(ip->port_space).data(), unsigned{ip->port});
  if (!private_data) return;
  CmaHeader h;
  if (const CmaError e = parse_cma_header(private_data->bytes, h); e != CmaError::none) {
    append(out, " cma{%s}", to_string(e).data());
    return;
  }
  out.append(" cma{");
  describe_address(out, h.ip_version, h.source_address, h.source_port);
  out.append(" > ");
  describe_address(out, h.ip_version, h.destination_address, ip->port);
  out.append("}");
}

// What an MRA or a REJ answers: 0 REQ, 1 REP, 2 `two` (LAP for an MRA, "other" for a REJ).
const char* message_name(std::uint8_t code, const char* two) {
  switch (code) {
    case 0: return "REQ";
    case 1: return "REP";
    case 2: return two;
  }
  return "reserved";
}

void describe_body(std::string& out, const Req& m) {
  append(out, " local_comm 0x%08x", m.local_comm_id.value());
  append(out, " qpn 0x%06x psn %u", m.local_qpn.value(), m.starting_psn.value());
  if (m.transport_service_type != TransportServiceType::Rc)
    append(out, " transport %u", unsigned{code(m.transport_service_type)});
  if (defined(m.path_packet_payload_mtu)) append(out, " mtu %u", 128u << code(m.path_packet_payload_mtu));
  describe_service(out, m.service_id, &m.private_data);
}
void describe_body(std::string& out, const Mra& m) {
  describe_comm_ids(out, m.local_comm_id, m.remote_comm_id);
  append(out, " mraed %s service_timeout %u", message_name(code(m.message_mraed), "LAP"), unsigned{m.service_timeout});
}
void describe_body(std::string& out, const Rej& m) {
  describe_comm_ids(out, m.local_comm_id, m.remote_comm_id);
  const std::string_view name = reject_reason_name(m.reason);
  append(out, " reason %u", unsigned{code(m.reason)});
  if (!name.empty()) append(out, " (%s)", name.data());
  append(out, " rejected %s", message_name(code(m.message_rejected), "other"));
  if (!m.ari.bytes.empty()) append(out, " ari %zu bytes", m.ari.bytes.size());
}
void describe_body(std::string& out, const Rep& m) {
  describe_comm_ids(out, m.local_comm_id, m.remote_comm_id);
  append(out, " qpn 0x%06x psn %u", m.local_qpn.value(), m.starting_psn.value());
}
void describe_body(std::string& out, const Dreq& m) {
  describe_comm_ids(out, m.local_comm_id, m.remote_comm_id);
  append(out, " remote_qpn 0x%06x", m.remote_qpn_eecn.value());
}
template <AttributeId kId>
void describe_body(std::string& out, const CommIdsAndPrivateData<kId>& m) {
  describe_comm_ids(out, m.local_comm_id, m.remote_comm_id);
}
void describe_body(std::string& out, const SidrReq& m) {
  append(out, " request_id 0x%08x", m.request_id);
  if (m.partition_key != kDefaultPkey) append(out, " pkey 0x%04x", unsigned{m.partition_key.value()});
  describe_service(out, m.service_id, &m.private_data);
}
void describe_body(std::string& out, const SidrRep& m) {
  append(out, " request_id 0x%08x status %u", m.request_id, unsigned{code(m.status)});
  if (const std::string_view name = sidr_status_name(m.status); !name.empty()) append(out, " (%s)", name.data());
  append(out, " qpn 0x%06x qkey 0x%08x", m.qpn.value(), m.qkey.value());
  describe_service(out, m.service_id, nullptr);
}

}  // namespace

std::string describe(const CmMessage& m) {
  std::string out = "CM ";
  out.append(attribute_name(attribute_id(m.body)));
  append(out, " tid 0x%016llx", static_cast<unsigned long long>(m.transaction_id));
  std::visit([&out](const auto& body) { describe_body(out, body); }, m.body);
  if (m.status != 0) append(out, " status 0x%04x", unsigned{m.status});
  if (m.class_specific != 0) append(out, " class_specific 0x%04x", unsigned{m.class_specific});
  if (m.attribute_modifier != 0) append(out, " attr_mod 0x%08x", m.attribute_modifier);
  return out;
}

}  // namespace rrdma::rocev2::cm
