// The ICRC (IBA A17.3.3): the CRC primitive against zlib, a ConnectX-4 Lx CNP, every rxe
// packet, and which bits it covers and which it masks.
#include <catch2/catch.hpp>
#include <zlib.h>

#include <random>
#include <string>
#include <vector>

#include "rocev2/icrc.h"
#include "tests/rocev2/rxe_captures.h"

namespace rrdma::rocev2 {
namespace {

using Bytes = std::vector<std::uint8_t>;

std::uint32_t zlib_crc(std::uint32_t crc, ByteSpan b) {
  return static_cast<std::uint32_t>(::crc32(crc, b.data(), static_cast<uInt>(b.size())));
}

Bytes from_hex(const std::string& hex) {
  Bytes out;
  std::string digits;
  for (char c : hex)
    if (std::isxdigit(static_cast<unsigned char>(c))) digits += c;
  for (std::size_t i = 0; i + 1 < digits.size(); i += 2) out.push_back(static_cast<std::uint8_t>(std::stoi(digits.substr(i, 2), nullptr, 16)));
  return out;
}

// tests/data/CAPTURES.md: a RoCE v2 CNP from a ConnectX-4 Lx (scapy's RoCE tests).
const Bytes kConnectXCnp = from_hex(
    "e41d2dab2bc27cfe90643b32080045c2003c718c400040119161"
    "0a0011010a0012010000" "12b700280000" "8100ffff400001180000000000000000000000000000000000000000"
    "82fd002a");

TEST_CASE("crc32 (ISA-L crc32_gzip_refl) computes what zlib's crc32 computes, and chains", "[icrc]") {
  std::mt19937 rng(17);
  for (std::size_t len : {0u, 1u, 3u, 8u, 15u, 16u, 63u, 64u, 65u, 1000u, 4096u, 9001u}) {
    Bytes b(len);
    for (auto& x : b) x = static_cast<std::uint8_t>(rng());
    INFO("length " << len);
    CHECK(crc32(0, b) == zlib_crc(0, b));
    const std::size_t half = len / 3;
    const ByteSpan s(b);
    CHECK(crc32(crc32(0, s.first(half)), s.subspan(half)) == zlib_crc(0, b));
  }
  const std::string check = "123456789";  // the CRC-32 check value of the catalogue
  CHECK(crc32(0, ByteSpan(reinterpret_cast<const std::uint8_t*>(check.data()), check.size())) == 0xCBF43926);
}

TEST_CASE("compute_icrc (one call or two) equals the calculator fed piece by piece", "[icrc]") {
  const Bytes cnp(kConnectXCnp.begin() + 14, kConnectXCnp.end());
  const ByteSpan ip = ByteSpan(cnp).first(20), udp = ByteSpan(cnp).subspan(20, 8);
  std::mt19937 rng(5);
  for (std::size_t rest : {0u, 1u, 4u, 100u, 1023u, 1024u, 1025u, 1028u, 4096u}) {
    Bytes transport(12 + rest);
    for (auto& x : transport) x = static_cast<std::uint8_t>(rng());
    const ByteSpan t(transport);
    auto calc = IcrcCalculator::start(ip, udp, t.first(12));
    REQUIRE(calc);
    const std::size_t cut = rest / 3;
    calc->add(t.subspan(12, cut));
    calc->add(t.subspan(12 + cut));
    INFO("rest " << rest);
    CHECK(compute_icrc(ip, udp, t) == calc->value());
    // And the definition, spelt out with zlib.
    Bytes masked(8, 0xFF);
    masked.insert(masked.end(), ip.begin(), ip.end());
    masked[8 + 1] = masked[8 + 8] = masked[8 + 10] = masked[8 + 11] = 0xFF;
    masked.insert(masked.end(), udp.begin(), udp.end());
    masked[28 + 6] = masked[28 + 7] = 0xFF;
    masked.insert(masked.end(), transport.begin(), transport.end());
    masked[36 + 4] = 0xFF;
    CHECK(compute_icrc(ip, udp, t) == zlib_crc(0, masked));
  }
}

TEST_CASE("ICRC bytes are little-endian on the wire", "[icrc]") {
  const auto b = icrc_bytes(0x2a00fd82);
  CHECK(b == std::array<std::uint8_t, 4>{0x82, 0xfd, 0x00, 0x2a});
  CHECK(load_icrc(b) == 0x2a00fd82);
}

TEST_CASE("The ConnectX-4 Lx CNP verifies (an ICRC not computed by rxe)", "[icrc]") {
  REQUIRE(kConnectXCnp.size() == 74);
  const ByteSpan ip = ByteSpan(kConnectXCnp).subspan(14);
  CHECK(verify_icrc(ip) == IcrcError::none);
  const auto icrc = compute_icrc(ip.first(20), ip.subspan(20, 8), ip.subspan(28, 12 + 16));
  REQUIRE(icrc);
  CHECK(*icrc == 0x2a00fd82);
}

TEST_CASE("Golden: the ICRC of every rxe packet verifies", "[icrc][golden]") {
  for (const test::RxeFrame& f : test::all_rxe_frames()) {
    INFO(f.capture << " frame " << f.index + 1);
    const test::Layers l = test::split_layers(f.bytes);
    REQUIRE(verify_icrc(l.ipv4_packet) == IcrcError::none);
    const ByteSpan transport = l.udp_payload.first(l.udp_payload.size() - kIcrcLength);
    const auto icrc = compute_icrc(l.ipv4_header, l.udp_header, transport);
    REQUIRE(icrc);
    CHECK(icrc_bytes(*icrc) == std::array<std::uint8_t, 4>{l.udp_payload[transport.size()],
                                                           l.udp_payload[transport.size() + 1],
                                                           l.udp_payload[transport.size() + 2],
                                                           l.udp_payload[transport.size() + 3]});
  }
}

// Which bits of an IPv4 packet (IHL 5) the ICRC leaves out (IBA A17.3.3): TOS, TTL, the
// IPv4 header checksum, the UDP checksum, and BTH byte 4 (FECN, BECN, reserved).
bool masked(std::size_t at) {
  return at == 1 || at == 8 || at == 10 || at == 11 || at == 26 || at == 27 || at == 28 + 4;
}

void check_every_bit(Bytes packet) {
  REQUIRE(verify_icrc(packet) == IcrcError::none);
  for (std::size_t at = 0; at < packet.size(); ++at) {
    if (at == 0) continue;  // the IHL nibble moves the headers: covered by the test below
    for (int b = 0; b < 8; ++b) {
      packet[at] ^= static_cast<std::uint8_t>(1u << b);
      const IcrcError e = verify_icrc(packet);
      packet[at] ^= static_cast<std::uint8_t>(1u << b);
      INFO("byte " << at << " bit " << b);
      REQUIRE(e == (masked(at) ? IcrcError::none : IcrcError::mismatch));
    }
  }
}

TEST_CASE("Every bit outside the masked fields is covered, and masked fields do not matter", "[icrc]") {
  SECTION("ConnectX CNP") { check_every_bit(Bytes(kConnectXCnp.begin() + 14, kConnectXCnp.end())); }
  SECTION("one packet of each rxe capture") {
    for (const char* name : test::kRxeCaptures) {
      INFO(name);
      const test::Layers l = test::split_layers(test::rxe_frame(name, 1));
      check_every_bit(Bytes(l.ipv4_packet.begin(), l.ipv4_packet.end()));
    }
  }
  SECTION("the IHL nibble") {
    Bytes p(kConnectXCnp.begin() + 14, kConnectXCnp.end());
    for (std::uint8_t ihl = 0; ihl < 16; ++ihl) {
      if (ihl == 5) continue;
      p[0] = static_cast<std::uint8_t>(0x40 | ihl);
      CHECK(verify_icrc(p) != IcrcError::none);
    }
  }
}

TEST_CASE("Rewriting the masked fields as a router would keeps the ICRC", "[icrc]") {
  const test::Layers l = test::split_layers(test::rxe_frame("rxe_write_bw.pcapng", 2));
  Bytes p(l.ipv4_packet.begin(), l.ipv4_packet.end());
  p[1] = 0x03;                    // ECN congestion experienced
  p[8] = 17;                      // TTL after some hops
  p[10] = 0x12, p[11] = 0x34;     // recomputed header checksum
  p[26] = 0xAB, p[27] = 0xCD;     // a UDP checksum
  p[28 + 4] = 0xC0;               // FECN and BECN
  CHECK(verify_icrc(p) == IcrcError::none);
}

TEST_CASE("verify_icrc refuses packets too short to hold the headers and the ICRC", "[icrc][hostile]") {
  const Bytes p(kConnectXCnp.begin() + 14, kConnectXCnp.end());
  for (std::size_t n = 0; n < 20 + 8 + 12 + 4; ++n) {
    const Bytes cut(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(n));
    CHECK(verify_icrc(cut) == IcrcError::truncated);
  }
  for (std::size_t n = 20 + 8 + 12 + 4; n < p.size(); ++n) {
    const Bytes cut(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(n));
    CHECK(verify_icrc(cut) == IcrcError::mismatch);
  }
  CHECK_FALSE(IcrcCalculator::start(ByteSpan(p).first(19), ByteSpan(p).subspan(20, 8), ByteSpan(p).subspan(28, 12)));
  CHECK_FALSE(IcrcCalculator::start(ByteSpan(p).first(20), ByteSpan(p).subspan(20, 7), ByteSpan(p).subspan(28, 12)));
  CHECK_FALSE(IcrcCalculator::start(ByteSpan(p).first(20), ByteSpan(p).subspan(20, 8), ByteSpan(p).subspan(28, 11)));
}

}  // namespace
}  // namespace rrdma::rocev2
