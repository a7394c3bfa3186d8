// What rdma_cm puts in the CM's messages (rocev2/cm/cma.h): IP-based service IDs, and the CMA
// header at the start of a REQ's or SIDR_REQ's private data, byte for byte as cma.c lays out
// struct cma_hdr, with the inputs it must refuse.
#include <catch2/catch.hpp>

#include <vector>

#include "rocev2/cm/cma.h"
#include "tests/rocev2/cm_samples.h"

namespace rrdma::rocev2::cm {
namespace {

using Bytes = std::vector<std::uint8_t>;

TEST_CASE("Service IDs: (port space << 16) + port, and back", "[cm]") {
  CHECK(ip_service_id(PortSpace::Tcp, 7174) == 0x0000000001061C06);  // rping's default
  CHECK(ip_service_id(PortSpace::Udp, 7174) == 0x0000000001111C06);
  CHECK(ip_service_id(PortSpace::Ib, 0) == 0x00000000013F0000);
  CHECK(ip_service_id(PortSpace::Ipoib, 0xFFFF) == 0x000000000002FFFF);
  for (PortSpace ps : {PortSpace::Tcp, PortSpace::Udp, PortSpace::Ib, PortSpace::Ipoib}) {
    for (std::uint16_t port : {std::uint16_t{0}, std::uint16_t{1}, std::uint16_t{7174}, std::uint16_t{0xFFFF}}) {
      const auto back = parse_ip_service_id(ip_service_id(ps, port));
      REQUIRE(back);
      CHECK(*back == IpServiceId{ps, port});
    }
  }
  CHECK(port_space_name(PortSpace::Tcp) == "TCP");
  CHECK(port_space_name(PortSpace::Udp) == "UDP");
  CHECK(port_space_name(PortSpace::Ib) == "IB");
  CHECK(port_space_name(PortSpace{0x0107}) == "?");
}

TEST_CASE("Service IDs: anything but a known port space with the top 32 bits zero is not IP-based", "[cm][hostile]") {
  CHECK_FALSE(parse_ip_service_id(0));
  CHECK_FALSE(parse_ip_service_id(0x0000000001071C06));  // port space 0x0107
  CHECK_FALSE(parse_ip_service_id(0x0000000100061C06));
  CHECK_FALSE(parse_ip_service_id(0x0000000101061C06));  // a TCP ID with a bit above the port space
  CHECK_FALSE(parse_ip_service_id(0x8000000001061C06));
  CHECK_FALSE(parse_ip_service_id(~0ull));
  CHECK_FALSE(parse_ip_service_id(0x0002C90300001234));  // an IB service ID
}

TEST_CASE("CMA header: IPv4 as cma_format_hdr writes it, byte for byte", "[cm][wire]") {
  const CmaHeader h = cma_header_ipv4(test::kActiveIp, 40000, test::kPassiveIp);
  const std::array<std::uint8_t, 3> user{0xAA, 0xBB, 0xCC};
  Bytes out(92, 0xEE);
  REQUIRE(emit_cma_private_data(h, user, out) == CmaError::none);
  Bytes expected(92, 0);
  expected[0] = 0x00;                                      // 0: CMA version 0
  expected[1] = 0x40;                                      // 1: IP version 4 in the high nibble
  expected[2] = 0x9C, expected[3] = 0x40;                  // 2: the active side's source port, 40000
  expected[16] = 0x0A, expected[17] = 0x42, expected[18] = 0x00, expected[19] = 0x02;  // 4: 12 zero bytes,
                                                                                      //   then 10.66.0.2
  expected[32] = 0x0A, expected[33] = 0x42, expected[34] = 0x00, expected[35] = 0x01;  // 20: 10.66.0.1
  expected[36] = 0xAA, expected[37] = 0xBB, expected[38] = 0xCC;                      // 36: user data
  CHECK(out == expected);

  const auto back = parse_cma_header(out);
  REQUIRE(back);
  CHECK(*back == h);
  CHECK(cma_source_ipv4(*back) == test::kActiveIp);
  CHECK(cma_destination_ipv4(*back) == test::kPassiveIp);
  CHECK(cma_user_data(out).size() == kReqUserDataLength);
  CHECK(cma_user_data(out).data() == out.data() + 36);
  CHECK(kReqUserDataLength == 56);
  CHECK(kSidrReqUserDataLength == 180);
}

TEST_CASE("CMA header: IPv6 keeps all 16 bytes of each address", "[cm][wire]") {
  CmaHeader h{.ip_version = 6, .source_port = 0xFFFF, .source_address = {}, .destination_address = {}};
  for (std::uint8_t i = 0; i < 16; ++i) {
    h.source_address[i] = static_cast<std::uint8_t>(0xF0 + i);
    h.destination_address[i] = static_cast<std::uint8_t>(i + 1);
  }
  std::array<std::uint8_t, 216> out{};
  REQUIRE(emit_cma_private_data(h, {}, out) == CmaError::none);
  CHECK(out[1] == 0x60);
  CHECK(out[4] == 0xF0);
  CHECK(out[35] == 16);
  const auto back = parse_cma_header(out);
  REQUIRE(back);
  CHECK(*back == h);
  CHECK_FALSE(cma_source_ipv4(*back));
  CHECK_FALSE(cma_destination_ipv4(*back));
}

TEST_CASE("CMA header hostile: short, wrong version, wrong IP version", "[cm][hostile]") {
  std::array<std::uint8_t, 92> good{};
  REQUIRE(emit_cma_private_data(cma_header_ipv4(test::kActiveIp, 1, test::kPassiveIp), {}, good) == CmaError::none);
  CmaHeader h;
  for (std::size_t n = 0; n < kCmaHeaderLength; ++n)
    CHECK(parse_cma_header(ByteSpan(good).first(n), h) == CmaError::truncated);
  CHECK(parse_cma_header(ByteSpan(good).first(kCmaHeaderLength), h) == CmaError::none);
  CHECK(cma_user_data(ByteSpan(good).first(10)).empty());
  for (std::uint8_t v = 1; v != 0; ++v) {
    auto b = good;
    b[0] = v;
    CHECK(parse_cma_header(b, h) == CmaError::bad_version);
  }
  for (unsigned ip = 0; ip < 16; ++ip) {
    auto b = good;
    b[1] = static_cast<std::uint8_t>(ip << 4);
    INFO(ip);
    CHECK(parse_cma_header(b, h) == (ip == 4 || ip == 6 ? CmaError::none : CmaError::bad_ip_version));
  }
}

TEST_CASE("CMA header: what Linux ignores is ignored, and comes back zero", "[cm][hostile]") {
  std::array<std::uint8_t, 92> b{};
  REQUIRE(emit_cma_private_data(cma_header_ipv4(test::kActiveIp, 40000, test::kPassiveIp), {}, b) == CmaError::none);
  const auto clean = b;
  b[1] |= 0x0F;                                         // the low nibble of the IP version byte
  std::fill(b.begin() + 4, b.begin() + 16, 0x77);       // the 12 bytes before the source IPv4 address
  std::fill(b.begin() + 20, b.begin() + 32, 0x88);      // ... and before the destination
  const auto h = parse_cma_header(b);
  REQUIRE(h);
  CHECK(cma_source_ipv4(*h) == test::kActiveIp);
  std::array<std::uint8_t, 92> again{};
  REQUIRE(emit_cma_private_data(*h, cma_user_data(b), again) == CmaError::none);
  CHECK(again == clean);
}

TEST_CASE("CMA header emit: refuses what the parser would, and user data that does not fit", "[cm][hostile]") {
  const CmaHeader h = cma_header_ipv4(test::kActiveIp, 40000, test::kPassiveIp);
  std::array<std::uint8_t, 92> out{};
  const std::array<std::uint8_t, 57> too_much{};
  CHECK(emit_cma_private_data(h, ByteSpan(too_much).first(56), out) == CmaError::none);
  CHECK(emit_cma_private_data(h, too_much, out) == CmaError::user_data_too_long);
  CHECK(emit_cma_private_data(h, {}, MutableByteSpan(out).first(35)) == CmaError::buffer_too_small);
  CHECK(emit_cma_private_data(h, {}, MutableByteSpan(out).first(36)) == CmaError::none);
  CmaHeader bad = h;
  bad.ip_version = 5;
  CHECK(emit_cma_private_data(bad, {}, out) == CmaError::bad_ip_version);
  bad = h;
  bad.source_address[0] = 1;  // an IPv4 header whose field is not 12 zero bytes + address
  CHECK(emit_cma_private_data(bad, {}, out) == CmaError::address_out_of_range);
  for (auto e = static_cast<int>(CmaError::none); e <= static_cast<int>(CmaError::buffer_too_small); ++e)
    CHECK(to_string(static_cast<CmaError>(e)) != "?");
}

}  // namespace
}  // namespace rrdma::rocev2::cm
