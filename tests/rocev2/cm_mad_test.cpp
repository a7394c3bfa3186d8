// The CM MAD codec (rocev2/cm/mad.h): byte-exact REQ and REP against images computed by hand
// from IBA ch. 12's layout tables, every message round-tripped with every field at its
// smallest and largest value (and the largest values' bytes checked, which pins every
// reserved bit), random MADs, every error hostile bytes or a bad value must produce, and the
// trace line.
#include <catch2/catch.hpp>

#include <initializer_list>
#include <random>
#include <vector>

#include "rocev2/cm/mad.h"
#include "tests/rocev2/cm_samples.h"

namespace rrdma::rocev2::cm {
namespace {

using Bytes = std::vector<std::uint8_t>;
using U8s = std::initializer_list<std::uint8_t>;
using U16s = std::initializer_list<std::uint16_t>;

Bytes emitted(const CmMessage& m) {
  Bytes out(kMadLength, 0xEE);
  const CmError e = emit_cm_mad(m, out);
  INFO(to_string(e));
  REQUIRE(e == CmError::none);
  return out;
}

CmMessage parsed(const Bytes& mad) {
  CmMessage m;
  const CmError e = parse_cm_mad(mad, m);
  INFO(to_string(e));
  REQUIRE(e == CmError::none);
  return m;
}

// A MAD written by hand: the common header of a CM Send, then body bytes set piece by piece
// at offsets counted, as in IBA's tables, from the end of the 24-byte MAD header.
struct Image {
  Bytes bytes = Bytes(kMadLength, 0);
  Image(std::uint16_t attribute, std::uint64_t tid) {
    bytes[0] = 0x01;  // base version
    bytes[1] = 0x07;  // management class: CM
    bytes[2] = 0x02;  // class version
    bytes[3] = 0x03;  // method: Send
    // 4-5 status, 6-7 class specific: 0
    for (int i = 0; i < 8; ++i) bytes[8 + i] = static_cast<std::uint8_t>(tid >> (56 - 8 * i));  // 8-15 TID
    bytes[16] = static_cast<std::uint8_t>(attribute >> 8);  // 16-17 attribute ID
    bytes[17] = static_cast<std::uint8_t>(attribute);
    // 18-19 reserved, 20-23 attribute modifier: 0
  }
  Image& at(std::size_t offset, std::initializer_list<std::uint8_t> b) {
    std::copy(b.begin(), b.end(), bytes.begin() + static_cast<std::ptrdiff_t>(kMadHeaderLength + offset));
    return *this;
  }
  Image& fill(std::size_t from, std::size_t to, std::uint8_t v) {  // body bytes [from, to)
    std::fill(bytes.begin() + static_cast<std::ptrdiff_t>(kMadHeaderLength + from),
              bytes.begin() + static_cast<std::ptrdiff_t>(kMadHeaderLength + to), v);
    return *this;
  }
};

TEST_CASE("CM REQ: Linux's REQ for rping, byte for byte from Table 106", "[cm][wire]") {
  Image expected(0x0010, 0x00000001715EC492);
  expected.at(0, {0x92, 0xC4, 0x5E, 0x71})                          // 0: local communication ID
      .at(4, {0x00, 0x00, 0x00, 0x00})                              // 4 reserved; 5-7 vendor ID
      .at(8, {0x00, 0x00, 0x00, 0x00, 0x01, 0x06, 0x1C, 0x06})      // 8: service ID, TCP space, port 7174
      .at(16, {0x00, 0x00, 0x0A, 0xFF, 0xFE, 0x42, 0x00, 0x02})     // 16: local CA GUID
      .at(28, {0x00, 0x00, 0x00, 0x00})                             // 24-27 reserved; 28: local Q_Key
      .at(32, {0x00, 0x00, 0x11, 0x01})                             // 32: local QPN; 35: responder resources
      .at(36, {0x00, 0x00, 0x00, 0x01})                             // 36: local EECN; 39: initiator depth
      .at(40, {0x00, 0x00, 0x00, 0xA0})                             // 40: remote EECN; 43: remote CM response
                                                                    //   timeout 20 << 3, RC 0 << 1, no E2E
      .at(44, {0x6B, 0x8B, 0x45, 0xA7})                             // 44: starting PSN; 47: local CM response
                                                                    //   timeout 20 << 3 | retry count 7
      .at(48, {0xFF, 0xFF})                                         // 48: P_Key
      .at(50, {0x37})                                               // 50: MTU 1024 (3) << 4, no RDC, RNR retry 7
      .at(51, {0xF0})                                               // 51: max CM retries 15 << 4, no SRQ, ext 0
      .at(52, {0xFF, 0xFF, 0xFF, 0xFF})                             // 52, 54: local and remote LID permissive
      .at(56, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0x0A, 0x42, 0x00, 0x02})  // 56: local GID
      .at(72, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0x0A, 0x42, 0x00, 0x01})  // 72: remote GID
      .at(88, {0x30, 0x7C, 0x60, 0x00})                             // 88: flow label 0x307C6 in the top 20 bits;
                                                                    //   91: packet rate 0 in the low 6
      .at(92, {0x00, 0x40, 0x00, 0x98})                             // 92: traffic class; 93: hop limit 64;
                                                                    //   94: SL 0, subnet local 0; 95: ACK timeout 19 << 3
                                                                    // 96-139: alternate path, all zero
      .at(140, {0x00, 0x40, 0x9C, 0x40})                            // 140: private data: CMA version 0, IPv4 << 4,
                                                                    //   source port 40000
      .at(156, {0x0A, 0x42, 0x00, 0x02})                            // 144: 12 zero bytes, source 10.66.0.2
      .at(172, {0x0A, 0x42, 0x00, 0x01});                           // 160: 12 zero bytes, destination 10.66.0.1
                                                                    // 176-231: user data, zero
  const CmMessage req = test::kernel_req();
  CHECK(emitted(req) == expected.bytes);
  CHECK(parsed(expected.bytes) == req);
}

TEST_CASE("CM REP: fields and the vendor ID split over three bytes, byte for byte from Table 110", "[cm][wire]") {
  CmMessage rep = test::kernel_rep();
  std::get<Rep>(rep.body).vendor_id = 0xA1B2C3;
  std::get<Rep>(rep.body).end_to_end_flow_control = true;  // rping's is 0; set here to pin the bit
  Image expected(0x0013, 0x00000001715EC492);
  expected.at(0, {0x1F, 0x2E, 0x3D, 0x4C})                       // 0: local communication ID
      .at(4, {0x92, 0xC4, 0x5E, 0x71})                           // 4: remote communication ID
      .at(8, {0x00, 0x00, 0x00, 0x00})                           // 8: local Q_Key
      .at(12, {0x00, 0x00, 0x12, 0xA1})                          // 12: local QPN; 15: vendor ID bits 23-16
      .at(16, {0x00, 0x00, 0x00, 0xB2})                          // 16: local EECN; 19: vendor ID bits 15-8
      .at(20, {0x2A, 0x5F, 0x01, 0xC3})                          // 20: starting PSN; 23: vendor ID bits 7-0
      .at(24, {0x01, 0x01})                                      // 24: responder resources; 25: initiator depth
      .at(26, {0x79})                                            // 26: target ACK delay 15 << 3, failover
                                                                 //   accepted 0 << 1, E2E flow control 1
      .at(27, {0xE0})                                            // 27: RNR retry 7 << 5, SRQ 0 << 4, 4 reserved
      .at(28, {0x00, 0x00, 0x0A, 0xFF, 0xFE, 0x42, 0x00, 0x01});  // 28: local CA GUID; 36-231 private data
  CHECK(emitted(rep) == expected.bytes);
  CHECK(parsed(expected.bytes) == rep);
}

TEST_CASE("CM: the MAD header's fields at their IBA 13.4.3 offsets", "[cm][wire]") {
  CmMessage m = test::kernel_rtu();
  m.transaction_id = 0x0102030405060708;
  m.status = 0xA1A2;
  m.class_specific = 0xB1B2;
  m.attribute_modifier = 0xC1C2C3C4;
  const Bytes mad = emitted(m);
  CHECK(Bytes(mad.begin(), mad.begin() + 24) == Bytes{0x01, 0x07, 0x02, 0x03, 0xA1, 0xA2, 0xB1, 0xB2, 1, 2, 3, 4,
                                                       5, 6, 7, 8, 0x00, 0x14, 0x00, 0x00, 0xC1, 0xC2, 0xC3, 0xC4});
  CHECK(parsed(mad) == m);
  const MadHeader h = parse(*MadHeaderView::check(mad));
  CHECK(h == mad_header(m));
  CHECK(h.attribute_id == AttributeId::Rtu);
  Bytes again(24, 0xEE);
  emit(h, again);
  CHECK(again == Bytes(mad.begin(), mad.begin() + 24));
}

TEST_CASE("CM: every Linux sample message round-trips, with private data where Table 106-120 put it", "[cm][wire]") {
  const std::vector<std::size_t> private_at = {140, 10, 84, 36, 8, 12, 8, 16, 96};  // CmBody's order
  const std::vector<CmMessage> samples = test::kernel_samples();
  REQUIRE(samples.size() == private_at.size());
  for (std::size_t i = 0; i < samples.size(); ++i) {
    INFO(attribute_name(attribute_id(samples[i].body)));
    const Bytes mad = emitted(samples[i]);
    const CmMessage back = parsed(mad);
    CHECK(back == samples[i]);
    std::visit(
        [&](const auto& body) {
          CHECK(body.private_data.bytes.data() == mad.data() + kMadHeaderLength + private_at[i]);
          CHECK(private_at[i] + body.private_data.bytes.size() == kCmDataLength);
        },
        back.body);
  }
}

// --- Boundary values ------------------------------------------------------------------

const std::array<std::uint8_t, kCmDataLength> kOnes = [] {
  std::array<std::uint8_t, kCmDataLength> a{};
  a.fill(0xFF);
  return a;
}();
const std::array<std::uint8_t, kCmDataLength> kZeros{};

template <typename M>
OpaqueBytes full(const std::array<std::uint8_t, kCmDataLength>& pattern) {
  return OpaqueBytes{ByteSpan(pattern).first(M::kPrivateDataLength)};
}

CmPath max_path() {
  Gid ones;
  ones.fill(0xFF);
  return CmPath{0xFFFF, 0xFFFF, ones, ones, 0xFFFFF, 0x3F, 0xFF, 0xFF, 0xF, true, 0x1F};
}

// Every field at its largest value the codec accepts (reserved codes excluded).
std::vector<CmMessage> max_messages() {
  Req req{.local_comm_id = CommId{0xFFFFFFFF}, .vendor_id = 0xFFFFFF, .service_id = ~0ull, .local_ca_guid = ~0ull,
          .local_qkey = Qkey{0xFFFFFFFF}, .local_qpn = Qpn{0xFFFFFF}, .responder_resources = 0xFF,
          .local_eecn = 0xFFFFFF, .initiator_depth = 0xFF, .remote_eecn = 0xFFFFFF, .remote_cm_response_timeout = 31,
          .transport_service_type = TransportServiceType::Extended, .end_to_end_flow_control = true,
          .starting_psn = Psn{0xFFFFFF}, .local_cm_response_timeout = 31, .retry_count = 7,
          .partition_key = Pkey{0xFFFF}, .path_packet_payload_mtu = PathMtu::Mtu4096, .rdc_exists = true,
          .rnr_retry_count = 7, .max_cm_retries = 15, .srq = true, .extended_transport_type = kExtendedTransportXrc,
          .primary_path = max_path(), .alternate_path = max_path(), .sap_supported = true,
          .private_data = full<Req>(kOnes)};
  const CommId all{0xFFFFFFFF};
  Mra mra{all, all, MessageMraed::Lap, 31, full<Mra>(kOnes)};
  Rej rej{all, all, MessageRejected::Other, RejectReason{0xFFFF}, OpaqueBytes{ByteSpan(kOnes).first(72)},
          full<Rej>(kOnes)};
  Rep rep{all, all, Qkey{0xFFFFFFFF}, Qpn{0xFFFFFF}, 0xFFFFFF, 0xFFFFFF, Psn{0xFFFFFF}, 0xFF, 0xFF, 31,
          FailoverAccepted::Rejected, true, 7, true, ~0ull, full<Rep>(kOnes)};
  SidrRep sidr_rep{0xFFFFFFFF, SidrStatus::VersionNotSupported, OpaqueBytes{ByteSpan(kOnes).first(72)}, 0xFFFFFF,
                   Qpn{0xFFFFFF}, ~0ull, Qkey{0xFFFFFFFF}, full<SidrRep>(kOnes)};
  auto message = [](CmBody body) {
    return CmMessage{.transaction_id = ~0ull, .status = 0xFFFF, .class_specific = 0xFFFF,
                     .attribute_modifier = 0xFFFFFFFF, .body = body};
  };
  return {message(req), message(mra), message(rej), message(rep), message(Rtu{all, all, full<Rtu>(kOnes)}),
          message(Dreq{all, all, Qpn{0xFFFFFF}, full<Dreq>(kOnes)}), message(Drep{all, all, full<Drep>(kOnes)}),
          message(SidrReq{0xFFFFFFFF, Pkey{0xFFFF}, ~0ull, full<SidrReq>(kOnes)}), message(sidr_rep)};
}

// The bytes of max_messages(), by hand from the tables: every bit a field owns is 1, every
// reserved bit 0, and a field that strayed into a neighbour's bits would show here.
std::vector<Bytes> max_images() {
  auto image = [](std::uint16_t attribute) {
    Image i(attribute, ~0ull);
    std::fill(i.bytes.begin() + 4, i.bytes.begin() + 8, 0xFF);     // status, class specific
    std::fill(i.bytes.begin() + 20, i.bytes.begin() + 24, 0xFF);   // attribute modifier
    return i.fill(0, kCmDataLength, 0xFF);
  };
  Image req = image(0x10);
  req.at(4, {0x00})                         // reserved
      .fill(24, 28, 0x00)                   // reserved
      .at(50, {0x5F})                       // MTU 5 << 4 | RDC | RNR retry 7
      .at(51, {0xF9})                       // max CM retries 15 << 4 | SRQ | extended type 1
      .at(90, {0xF0, 0x3F})                 // flow label's last 4 bits, 4 reserved; 2 reserved, rate
      .at(94, {0xF8, 0xF8})                 // SL, subnet local, 3 reserved; ACK timeout, 3 reserved
      .at(134, {0xF0, 0x3F})                // the same for the alternate path
      .at(138, {0xF8, 0xFC});               // ... and SAP supported beside its ACK timeout
  Image mra = image(0x11);
  mra.at(8, {0x80, 0xF8});                  // MRAed LAP (2) << 6; service timeout << 3
  Image rej = image(0x12);
  rej.at(8, {0x80, 0x90});                  // message rejected: other (2) << 6; reject info length 72 << 1
  Image rep = image(0x13);
  rep.at(26, {0xFD, 0xF0});                 // ACK delay << 3 | failover 2 << 1 | E2E; RNR retry << 5 | SRQ << 4
  Image dreq = image(0x15);
  dreq.at(11, {0x00});                      // reserved after the 24-bit remote QPN
  Image sidr_req = image(0x17);
  sidr_req.at(6, {0x00, 0x00});             // reserved after the P_Key
  Image sidr_rep = image(0x18);
  sidr_rep.at(4, {0x05, 0x48});             // status 5; additional information length 72
  return {req.bytes, mra.bytes, rej.bytes, rep.bytes, image(0x14).bytes, dreq.bytes,
          image(0x16).bytes, sidr_req.bytes, sidr_rep.bytes};
}

// Every field at zero, or at its smallest defined code (the path MTU's is 1), with private data.
std::vector<CmMessage> min_messages() {
  std::vector<CmMessage> out;
  for (const CmMessage& m : max_messages()) {
    CmMessage zero{.body = m.body};
    std::visit(
        [&](auto& body) {
          using M = std::remove_cvref_t<decltype(body)>;
          body = M{};
          body.private_data = full<M>(kZeros);
          if constexpr (std::is_same_v<M, Req>) {
            body.partition_key = Pkey{0};
            body.path_packet_payload_mtu = PathMtu::Mtu256;
          }
          if constexpr (std::is_same_v<M, SidrReq>) body.partition_key = Pkey{0};
        },
        zero.body);
    out.push_back(zero);
  }
  return out;
}

TEST_CASE("CM: every message with every field at its largest value, byte for byte", "[cm][wire]") {
  const std::vector<CmMessage> messages = max_messages();
  const std::vector<Bytes> images = max_images();
  REQUIRE(messages.size() == std::variant_size_v<CmBody>);
  for (std::size_t i = 0; i < messages.size(); ++i) {
    INFO(attribute_name(attribute_id(messages[i].body)));
    CHECK(messages[i].body.index() == i);
    CHECK(emitted(messages[i]) == images[i]);
    CHECK(parsed(images[i]) == messages[i]);
  }
}

TEST_CASE("CM: every message with every field at its smallest value round-trips to zeros", "[cm][wire]") {
  for (const CmMessage& m : min_messages()) {
    INFO(attribute_name(attribute_id(m.body)));
    const Bytes mad = emitted(m);
    CHECK(parsed(mad) == m);
    // Nothing but the header and a REQ's MTU code 1 (byte 50) is non-zero.
    for (std::size_t i = kMadHeaderLength; i < kMadLength; ++i) {
      const bool mtu = std::holds_alternative<Req>(m.body) && i == kMadHeaderLength + 50;
      CHECK(mad[i] == (mtu ? 0x10 : 0x00));
    }
  }
}

TEST_CASE("CM: reserved bits are ignored on parse and written back as zero", "[cm][wire]") {
  const Bytes max_req = max_images()[0];
  Bytes all_ones = max_req;
  for (std::size_t i = 18; i < 20; ++i) all_ones[i] = 0xFF;  // the MAD header's reserved bytes
  // Every body bit of the REQ set, but the MTU, the extended transport type (bytes 50-51)
  // whose codes must be defined.
  std::fill(all_ones.begin() + kMadHeaderLength, all_ones.end(), 0xFF);
  all_ones[kMadHeaderLength + 50] = 0x5F;
  all_ones[kMadHeaderLength + 51] = 0xF9;
  CHECK(emitted(parsed(all_ones)) == max_req);
}

TEST_CASE("CM: a short private data is zero-padded, and opaque areas keep their exact size", "[cm][wire]") {
  const std::array<std::uint8_t, 3> user{0xAA, 0xBB, 0xCC};
  CmMessage m = test::kernel_rej_no_listener();
  auto& rej = std::get<Rej>(m.body);
  rej.private_data = OpaqueBytes{user};
  rej.ari = OpaqueBytes{user};
  const Bytes mad = emitted(m);
  CHECK(mad[kMadHeaderLength + 9] == 3 << 1);  // reject info length
  const Rej back = std::get<Rej>(parsed(mad).body);
  CHECK(back.ari == OpaqueBytes{user});
  CHECK(back.private_data.bytes.size() == Rej::kPrivateDataLength);
  CHECK(std::equal(user.begin(), user.end(), back.private_data.bytes.begin()));
  CHECK(std::all_of(back.private_data.bytes.begin() + 3, back.private_data.bytes.end(), [](auto b) { return b == 0; }));
}

TEST_CASE("CM: random MADs that parse re-emit to bytes they contained, and parse the same", "[cm][wire][hostile]") {
  std::mt19937 rng(18);
  for (const CmMessage& sample : test::kernel_samples()) {
    const AttributeId id = attribute_id(sample.body);
    INFO(attribute_name(id));
    std::size_t accepted = 0;
    const Bytes header = emitted(sample);
    for (int n = 0; n < 4000; ++n) {
      Bytes x(kMadLength);
      for (auto& b : x) b = static_cast<std::uint8_t>(rng());
      std::copy_n(header.begin(), 4, x.begin());  // a CM Send ...
      store_be16(x, 16, static_cast<std::uint16_t>(id));  // ... of this attribute
      CmMessage m;
      if (parse_cm_mad(x, m) != CmError::none) continue;
      ++accepted;
      const Bytes y = emitted(m);
      CHECK(parsed(y) == m);
      for (std::size_t i = 0; i < kMadLength; ++i)
        if ((y[i] & ~x[i]) != 0) FAIL_CHECK("emitted a bit the input did not have at byte " << i);
    }
    CHECK(accepted > 10);
  }
}

// --- Hostile bytes: each is refused with its own error ------------------------------

CmError parse_error(const Bytes& mad) {
  CmMessage m;
  return parse_cm_mad(mad, m);
}

Bytes sample_mad(const CmMessage& m) { return emitted(m); }

TEST_CASE("CM hostile: any length but 256 is refused, before the header is looked at", "[cm][hostile]") {
  const Bytes good = sample_mad(test::kernel_req());
  for (std::size_t n : {0, 1, 3, 23, 24, 25, 140, 255}) {
    INFO(n);
    CHECK(parse_error(Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n))) == CmError::truncated);
  }
  Bytes longer = good;
  longer.push_back(0);
  CHECK(parse_error(longer) == CmError::too_long);
  longer.resize(4096, 0);
  CHECK(parse_error(longer) == CmError::too_long);
  CHECK(parse_error(Bytes(255, 0xFF)) == CmError::truncated);  // wrong everything, but short first
  CHECK_FALSE(parse_cm_mad(ByteSpan{}));
}

TEST_CASE("CM hostile: base version, class, class version and method", "[cm][hostile]") {
  const Bytes good = sample_mad(test::kernel_req());
  auto with = [&](std::size_t at, std::uint8_t v) {
    Bytes b = good;
    b[at] = v;
    return b;
  };
  for (std::uint8_t v : U8s{0x00, 0x02, 0x80, 0xFF}) CHECK(parse_error(with(0, v)) == CmError::bad_base_version);
  // Subnet management (0x01, 0x81), subnet administration (0x03), performance (0x04).
  for (std::uint8_t v : U8s{0x00, 0x01, 0x03, 0x04, 0x81, 0x87}) CHECK(parse_error(with(1, v)) == CmError::wrong_class);
  for (std::uint8_t v : U8s{0x00, 0x01, 0x03, 0xFF}) CHECK(parse_error(with(2, v)) == CmError::bad_class_version);
  // Get, Set, GetResp, a Send with the response bit, Trap, Report.
  for (std::uint8_t v : U8s{0x01, 0x02, 0x81, 0x83, 0x05, 0x06, 0x00})
    CHECK(parse_error(with(3, v)) == CmError::bad_method);
  // The first check that fails is the one reported.
  Bytes two = with(1, 0x03);
  two[0] = 2;
  CHECK(parse_error(two) == CmError::bad_base_version);
}

TEST_CASE("CM hostile: unknown attributes, and LAP, APR, ClassPortInfo as unsupported", "[cm][hostile]") {
  Bytes b = sample_mad(test::kernel_rtu());
  for (std::uint16_t id : U16s{0x0000, 0x0002, 0x000F, 0x001B, 0x0020, 0x1000, 0xFFFF}) {
    store_be16(b, 16, id);
    INFO(id);
    CHECK(parse_error(b) == CmError::unknown_attribute);
    CHECK(attribute_name(AttributeId{id}) == "UNKNOWN");
  }
  for (AttributeId id : {AttributeId::Lap, AttributeId::Apr, AttributeId::ClassPortInfo}) {
    store_be16(b, 16, static_cast<std::uint16_t>(id));
    CHECK(parse_error(b) == CmError::unsupported_attribute);
  }
}

TEST_CASE("CM hostile: reserved values of fields with a meaning", "[cm][hostile]") {
  const Bytes req = sample_mad(test::kernel_req());
  auto req_with = [&](std::size_t body_at, std::uint8_t v) {
    Bytes b = req;
    b[kMadHeaderLength + body_at] = v;
    return b;
  };
  // Byte 43: timeout 20 << 3 | transport << 1; byte 51: retries 15 << 4 | extended type.
  CHECK(parsed(req_with(43, 0xA0 | 1 << 1)).body.index() == 0);  // UC
  CHECK(parsed(req_with(43, 0xA0 | 2 << 1)).body.index() == 0);  // RD: defined, though nobody uses it
  for (std::uint8_t ext = 0; ext < 8; ++ext) {
    Bytes b = req_with(43, 0xA0 | 3 << 1);
    b[kMadHeaderLength + 51] = static_cast<std::uint8_t>(0xF0 | ext);
    INFO(unsigned{ext});
    CHECK(parse_error(b) == (ext == kExtendedTransportXrc ? CmError::none : CmError::reserved_transport_type));
  }
  // Byte 50: MTU << 4 | RNR retry 7.
  for (unsigned mtu = 0; mtu < 16; ++mtu) {
    INFO(mtu);
    const bool defined = mtu >= 1 && mtu <= 5;
    CHECK(parse_error(req_with(50, static_cast<std::uint8_t>(mtu << 4 | 7))) ==
          (defined ? CmError::none : CmError::reserved_mtu));
  }

  Bytes mra = sample_mad(test::kernel_mra());
  mra[kMadHeaderLength + 8] = 0xC0;  // message MRAed 3
  CHECK(parse_error(mra) == CmError::reserved_message_code);
  mra[kMadHeaderLength + 8] = 0x3F;  // REQ (0), with the 6 reserved bits set
  CHECK(std::get<Mra>(parsed(mra).body).message_mraed == MessageMraed::Req);

  Bytes rej = sample_mad(test::kernel_rej_no_listener());
  rej[kMadHeaderLength + 8] = 0xC0;  // message rejected 3
  CHECK(parse_error(rej) == CmError::reserved_message_code);

  Bytes rep = sample_mad(test::kernel_rep());
  rep[kMadHeaderLength + 26] = 15 << 3 | 3 << 1;  // failover accepted 3
  CHECK(parse_error(rep) == CmError::reserved_failover);

  Bytes sidr_rep = sample_mad(test::kernel_sidr_rep());
  for (unsigned status = 0; status < 256; ++status) {
    sidr_rep[kMadHeaderLength + 4] = static_cast<std::uint8_t>(status);
    INFO(status);
    CHECK(parse_error(sidr_rep) == (status <= 5 ? CmError::none : CmError::reserved_sidr_status));
  }
}

TEST_CASE("CM hostile: a length beyond its field (REJ reject info, SIDR_REP additional info)", "[cm][hostile]") {
  Bytes rej = sample_mad(test::kernel_rej_no_listener());
  for (unsigned length = 0; length < 128; ++length) {  // 7 bits, over a 72-byte ARI field
    rej[kMadHeaderLength + 9] = static_cast<std::uint8_t>(length << 1 | 1);  // and the reserved bit set
    INFO(length);
    CmMessage m;
    const CmError e = parse_cm_mad(rej, m);
    CHECK(e == (length <= 72 ? CmError::none : CmError::reject_info_too_long));
    if (e == CmError::none) {
      const Rej& r = std::get<Rej>(m.body);
      CHECK(r.ari.bytes.size() == length);
      CHECK(r.ari.bytes.data() == rej.data() + kMadHeaderLength + 12);
    }
  }
  Bytes sidr_rep = sample_mad(test::kernel_sidr_rep());
  for (unsigned length = 0; length < 256; ++length) {  // 8 bits, over a 72-byte field
    sidr_rep[kMadHeaderLength + 5] = static_cast<std::uint8_t>(length);
    INFO(length);
    CmMessage m;
    const CmError e = parse_cm_mad(sidr_rep, m);
    CHECK(e == (length <= 72 ? CmError::none : CmError::additional_info_too_long));
    if (e == CmError::none) CHECK(std::get<SidrRep>(m.body).additional_information.bytes.size() == length);
  }
}

TEST_CASE("CM hostile: what is parsed borrows only from the 256 bytes given", "[cm][hostile]") {
  Bytes buffer(1024, 0x5A);
  for (const CmMessage& sample : test::kernel_samples()) {
    const Bytes mad = sample_mad(sample);
    std::copy(mad.begin(), mad.end(), buffer.begin() + 100);
    const ByteSpan span(buffer.data() + 100, kMadLength);
    const auto m = parse_cm_mad(span);
    REQUIRE(m);
    std::visit(
        [&](const auto& body) {
          CHECK(body.private_data.bytes.data() >= span.data());
          CHECK(body.private_data.bytes.data() + body.private_data.bytes.size() == span.data() + span.size());
        },
        m->body);
  }
}

// --- Emitting bad values ----------------------------------------------------------------

CmError emit_error(const CmMessage& m, std::size_t room = kMadLength) {
  Bytes out(room);
  return emit_cm_mad(m, out);
}

template <typename M, typename F>
CmMessage changed(CmMessage m, F f) {
  f(std::get<M>(m.body));
  return m;
}

TEST_CASE("CM emit: values that do not fit their field, or reserved codes, are refused", "[cm][hostile]") {
  const CmMessage req = test::kernel_req();
  CHECK(emit_error(req, 255) == CmError::buffer_too_small);
  CHECK(emit_error(req, 0) == CmError::buffer_too_small);
  CHECK(emit_error(req, 300) == CmError::none);
  CHECK(emit_error(changed<Req>(req, [](Req& r) { r.remote_cm_response_timeout = 32; })) == CmError::field_out_of_range);
  CHECK(emit_error(changed<Req>(req, [](Req& r) { r.local_cm_response_timeout = 32; })) == CmError::field_out_of_range);
  CHECK(emit_error(changed<Req>(req, [](Req& r) { r.retry_count = 8; })) == CmError::field_out_of_range);
  CHECK(emit_error(changed<Req>(req, [](Req& r) { r.rnr_retry_count = 8; })) == CmError::field_out_of_range);
  CHECK(emit_error(changed<Req>(req, [](Req& r) { r.max_cm_retries = 16; })) == CmError::field_out_of_range);
  CHECK(emit_error(changed<Req>(req, [](Req& r) { r.vendor_id = 0x1000000; })) == CmError::field_out_of_range);
  CHECK(emit_error(changed<Req>(req, [](Req& r) { r.local_eecn = 0x1000000; })) == CmError::field_out_of_range);
  CHECK(emit_error(changed<Req>(req, [](Req& r) { r.extended_transport_type = 8; })) == CmError::field_out_of_range);
  CHECK(emit_error(changed<Req>(req, [](Req& r) { r.primary_path.flow_label = 0x100000; })) ==
        CmError::field_out_of_range);
  CHECK(emit_error(changed<Req>(req, [](Req& r) { r.alternate_path.packet_rate = 64; })) ==
        CmError::field_out_of_range);
  CHECK(emit_error(changed<Req>(req, [](Req& r) { r.primary_path.sl = 16; })) == CmError::field_out_of_range);
  CHECK(emit_error(changed<Req>(req, [](Req& r) { r.primary_path.local_ack_timeout = 32; })) ==
        CmError::field_out_of_range);
  CHECK(emit_error(changed<Req>(req, [](Req& r) { r.path_packet_payload_mtu = PathMtu{0}; })) == CmError::reserved_mtu);
  CHECK(emit_error(changed<Req>(req, [](Req& r) { r.path_packet_payload_mtu = PathMtu{16}; })) ==
        CmError::reserved_mtu);
  CHECK(emit_error(changed<Req>(req, [](Req& r) { r.transport_service_type = TransportServiceType::Extended; })) ==
        CmError::reserved_transport_type);
  CHECK(emit_error(changed<Req>(req, [](Req& r) { r.transport_service_type = TransportServiceType{4}; })) ==
        CmError::field_out_of_range);

  const std::array<std::uint8_t, 256> big{};
  CHECK(emit_error(changed<Req>(req, [&](Req& r) { r.private_data = OpaqueBytes{ByteSpan(big).first(93)}; })) ==
        CmError::private_data_too_long);
  CHECK(emit_error(changed<Req>(req, [&](Req& r) { r.private_data = OpaqueBytes{ByteSpan(big).first(92)}; })) ==
        CmError::none);
  CHECK(emit_error(changed<Rep>(test::kernel_rep(), [&](Rep& r) { r.private_data = OpaqueBytes{big}; })) ==
        CmError::private_data_too_long);
  CHECK(emit_error(changed<Rep>(test::kernel_rep(), [](Rep& r) { r.target_ack_delay = 32; })) ==
        CmError::field_out_of_range);
  CHECK(emit_error(changed<Rep>(test::kernel_rep(), [](Rep& r) { r.failover_accepted = FailoverAccepted{3}; })) ==
        CmError::reserved_failover);
  CHECK(emit_error(changed<Mra>(test::kernel_mra(), [](Mra& r) { r.service_timeout = 32; })) ==
        CmError::field_out_of_range);
  CHECK(emit_error(changed<Mra>(test::kernel_mra(), [](Mra& r) { r.message_mraed = MessageMraed{3}; })) ==
        CmError::reserved_message_code);
  CHECK(emit_error(changed<Rej>(test::kernel_rej_no_listener(), [](Rej& r) { r.message_rejected = MessageRejected{3}; })) ==
        CmError::reserved_message_code);
  CHECK(emit_error(changed<Rej>(test::kernel_rej_no_listener(), [&](Rej& r) { r.ari = OpaqueBytes{ByteSpan(big).first(73)}; })) ==
        CmError::reject_info_too_long);
  CHECK(emit_error(changed<SidrRep>(test::kernel_sidr_rep(),
                                    [&](SidrRep& r) { r.additional_information = OpaqueBytes{ByteSpan(big).first(73)}; })) ==
        CmError::additional_info_too_long);
  CHECK(emit_error(changed<SidrRep>(test::kernel_sidr_rep(), [](SidrRep& r) { r.status = SidrStatus{6}; })) ==
        CmError::reserved_sidr_status);
  CHECK(emit_error(changed<SidrRep>(test::kernel_sidr_rep(), [](SidrRep& r) { r.vendor_id = 0x1000000; })) ==
        CmError::field_out_of_range);
}

// --- Names and the trace line --------------------------------------------------------

TEST_CASE("CM names: attributes, the REJ reasons rdma_cm uses, SIDR statuses", "[cm]") {
  CHECK(attribute_name(AttributeId::Req) == "REQ");
  CHECK(attribute_name(AttributeId::SidrRep) == "SIDR_REP");
  CHECK(attribute_name(AttributeId::Lap) == "LAP");
  CHECK(attribute_name(AttributeId::Apr) == "APR");
  CHECK(reject_reason_name(RejectReason::InvalidServiceId) == "invalid service ID");
  CHECK(reject_reason_name(RejectReason::StaleConnection) == "stale connection");
  CHECK(reject_reason_name(RejectReason::ConsumerDefined) == "consumer reject");
  CHECK(reject_reason_name(RejectReason::Timeout) == "timeout");
  CHECK(reject_reason_name(RejectReason::VendorOptionNotSupported) == "vendor option not supported");
  for (std::uint16_t r = 1; r <= 33; ++r) CHECK_FALSE(reject_reason_name(RejectReason{r}).empty());
  for (std::uint16_t r : U16s{0, 34, 36, 0xFFFF}) CHECK(reject_reason_name(RejectReason{r}).empty());
  CHECK(sidr_status_name(SidrStatus::ServiceIdNotSupported) == "service ID not supported");
  CHECK(sidr_status_name(SidrStatus{9}).empty());
  for (auto e = static_cast<int>(CmError::none); e <= static_cast<int>(CmError::buffer_too_small); ++e)
    CHECK(to_string(static_cast<CmError>(e)) != "?");
}

TEST_CASE("CM describe: one line per message, with what a trace reader looks for", "[cm]") {
  CHECK(describe(test::kernel_req()) ==
        "CM REQ tid 0x00000001715ec492 local_comm 0x92c45e71 qpn 0x000011 psn 7048005 mtu 1024 "
        "sid 0x0000000001061c06 (TCP 7174) cma{10.66.0.2:40000 > 10.66.0.1:7174}");
  CHECK(describe(test::kernel_rep()) ==
        "CM REP tid 0x00000001715ec492 local_comm 0x1f2e3d4c remote_comm 0x92c45e71 qpn 0x000012 psn 2776833");
  CHECK(describe(test::kernel_rej_no_listener()) ==
        "CM REJ tid 0x00000001715ec492 local_comm 0x00000000 remote_comm 0x92c45e71 reason 8 (invalid service ID) "
        "rejected REQ");
  CHECK(describe(test::kernel_mra()) ==
        "CM MRA tid 0x00000001715ec492 local_comm 0x92c45e71 remote_comm 0x1f2e3d4c mraed REP service_timeout 24");
  CHECK(describe(test::kernel_rtu()) == "CM RTU tid 0x00000001715ec492 local_comm 0x92c45e71 remote_comm 0x1f2e3d4c");
  CHECK(describe(test::kernel_dreq()) ==
        "CM DREQ tid 0x000000014c3d2e1f local_comm 0x1f2e3d4c remote_comm 0x92c45e71 remote_qpn 0x000011");
  CHECK(describe(test::kernel_drep()) == "CM DREP tid 0x000000014c3d2e1f local_comm 0x92c45e71 remote_comm 0x1f2e3d4c");
  CHECK(describe(test::kernel_sidr_req()) ==
        "CM SIDR_REQ tid 0x00000001715ec492 request_id 0x92c45e71 sid 0x0000000001111c06 (UDP 7174) "
        "cma{10.66.0.2:40000 > 10.66.0.1:7174}");
  CHECK(describe(test::kernel_sidr_rep()) ==
        "CM SIDR_REP tid 0x00000001715ec492 request_id 0x92c45e71 status 0 (valid) qpn 0x000012 qkey 0x01234567 "
        "sid 0x0000000001111c06 (UDP 7174)");

  // An IPv6 CMA header.
  CmaHeader v6{.ip_version = 6, .source_port = 40000, .source_address = {0xFE, 0x80}, .destination_address = {0xFE, 0x80}};
  v6.source_address[15] = 1;
  v6.destination_address[15] = 2;
  std::array<std::uint8_t, Req::kPrivateDataLength> v6_data{};
  REQUIRE(emit_cma_private_data(v6, {}, v6_data) == CmaError::none);
  CHECK(describe(changed<Req>(test::kernel_req(), [&](Req& r) { r.private_data = OpaqueBytes{v6_data}; }))
            .ends_with("(TCP 7174) cma{[fe80::1]:40000 > [fe80::2]:7174}"));

  // Unknown codes by number, bad CMA headers named, non-IP service IDs plain.
  CmMessage rej = changed<Rej>(test::kernel_rej_no_listener(), [](Rej& r) { r.reason = RejectReason{34}; });
  CHECK(describe(rej).find("reason 34 rejected REQ") != std::string::npos);
  const std::array<std::uint8_t, Req::kPrivateDataLength> junk{0x07};
  CmMessage req = changed<Req>(test::kernel_req(), [&](Req& r) { r.private_data = OpaqueBytes{junk}; });
  CHECK(describe(req).find("(TCP 7174) cma{bad CMA version}") != std::string::npos);
  req = changed<Req>(req, [](Req& r) { r.service_id = 0x0002C90300001234; });
  CHECK(describe(req).find("sid 0x0002c90300001234") != std::string::npos);
  CHECK(describe(req).find("cma{") == std::string::npos);
  req.status = 0x1C;
  req.attribute_modifier = 0x7;
  CHECK(describe(req).ends_with(" status 0x001c attr_mod 0x00000007"));
  // Out-of-range codes in a value built by hand are printed, not indexed.
  CHECK(describe(changed<Mra>(test::kernel_mra(), [](Mra& m) { m.message_mraed = MessageMraed{9}; }))
            .find("mraed reserved") != std::string::npos);
  CHECK(describe(changed<Req>(test::kernel_req(), [](Req& r) { r.path_packet_payload_mtu = PathMtu{200}; }))
            .find(" mtu") == std::string::npos);
}

}  // namespace
}  // namespace rrdma::rocev2::cm
