#include "rocev2/icrc.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <cassert>

#include "rocev2/wire.h"
#include "stack/checksum.h"

namespace rrdma::rocev2 {

namespace {

// Offsets of the fields the ICRC masks (IBA A17.3.3 for IPv4; RFC 791, RFC 768).
constexpr std::size_t kIpv4TosAt = 1;
constexpr std::size_t kIpv4TtlAt = 8;
constexpr std::size_t kIpv4ChecksumAt = 10;
constexpr std::size_t kUdpChecksumAt = 6;
constexpr std::size_t kBthEcnAt = BthView::kEcnAt;
constexpr std::size_t kMaskedLrhLength = 8;

constexpr std::size_t kMaxPrefix =
    kMaskedLrhLength + IcrcCalculator::kMaxIpv4HeaderLength + IcrcCalculator::kUdpHeaderLength + kBthLength;

}  // namespace

std::uint32_t crc32(std::uint32_t crc, ByteSpan bytes) {
  // crc32_gzip_refl inverts on entry and exit, like zlib, so results chain.
  return crc32_gzip_refl(crc, bytes.data(), bytes.size());
}

namespace {

// Writes the masked headers (8 x 0xFF, IPv4, UDP, BTH) to `out`; returns the bytes written.
// The caller has checked the sizes and that `out` holds kMaxPrefix bytes.
std::size_t write_masked_prefix(ByteSpan ipv4_header, ByteSpan udp_header, ByteSpan bth, std::uint8_t* out) {
  std::uint8_t* const start = out;
  out = std::fill_n(out, kMaskedLrhLength, std::uint8_t{0xFF});
  std::uint8_t* const ip = out;
  out = std::copy(ipv4_header.begin(), ipv4_header.end(), out);
  ip[kIpv4TosAt] = 0xFF;
  ip[kIpv4TtlAt] = 0xFF;
  ip[kIpv4ChecksumAt] = ip[kIpv4ChecksumAt + 1] = 0xFF;
  std::uint8_t* const udp = out;
  out = std::copy(udp_header.begin(), udp_header.end(), out);
  udp[kUdpChecksumAt] = udp[kUdpChecksumAt + 1] = 0xFF;
  std::uint8_t* const b = out;
  out = std::copy(bth.begin(), bth.end(), out);
  b[kBthEcnAt] = 0xFF;  // FECN, BECN, reserved
  return static_cast<std::size_t>(out - start);
}

bool sizes_ok(ByteSpan ipv4_header, ByteSpan udp_header, ByteSpan bth) {
  return ipv4_header.size() >= IcrcCalculator::kMinIpv4HeaderLength &&
         ipv4_header.size() <= IcrcCalculator::kMaxIpv4HeaderLength &&
         udp_header.size() == IcrcCalculator::kUdpHeaderLength && bth.size() == kBthLength;
}

// Each crc32_gzip_refl call costs some 50-60 ns whatever its length (folding set-up and the
// final reduction; and more per byte below 256 bytes), more than copying a
// kilobyte. So the rest of a packet up to this size is copied behind the masked prefix and
// the whole CRC is one call (measured with bench/icrc_bench.cpp: 1 KiB went from 3.5 to
// 6-7 GB/s); longer packets take two calls and no copy.
constexpr std::size_t kOneCallRest = 1024;

}  // namespace

std::optional<IcrcCalculator> IcrcCalculator::start(ByteSpan ipv4_header, ByteSpan udp_header, ByteSpan bth) {
  if (!sizes_ok(ipv4_header, udp_header, bth)) return std::nullopt;
  std::array<std::uint8_t, kMaxPrefix> prefix;
  const std::size_t used = write_masked_prefix(ipv4_header, udp_header, bth, prefix.data());
  return IcrcCalculator(crc32(0, ByteSpan(prefix.data(), used)));
}

std::optional<std::uint32_t> compute_icrc(ByteSpan ipv4_header, ByteSpan udp_header, ByteSpan transport) {
  if (transport.size() < kBthLength) return std::nullopt;
  const ByteSpan bth = transport.first(kBthLength);
  const ByteSpan rest = transport.subspan(kBthLength);
  if (!sizes_ok(ipv4_header, udp_header, bth)) return std::nullopt;
  if (rest.size() > kOneCallRest) {
    auto calc = IcrcCalculator::start(ipv4_header, udp_header, bth);
    calc->add(rest);
    return calc->value();
  }
  std::array<std::uint8_t, kMaxPrefix + kOneCallRest> all;
  const std::size_t used = write_masked_prefix(ipv4_header, udp_header, bth, all.data());
  std::copy(rest.begin(), rest.end(), all.begin() + static_cast<std::ptrdiff_t>(used));
  return crc32(0, ByteSpan(all.data(), used + rest.size()));
}

std::array<std::uint8_t, kIcrcLength> icrc_bytes(std::uint32_t icrc) {
  return {static_cast<std::uint8_t>(icrc), static_cast<std::uint8_t>(icrc >> 8),
          static_cast<std::uint8_t>(icrc >> 16), static_cast<std::uint8_t>(icrc >> 24)};
}

std::uint32_t load_icrc(ByteSpan b) {
  assert(b.size() >= kIcrcLength);
  return std::uint32_t{b[0]} | (std::uint32_t{b[1]} << 8) | (std::uint32_t{b[2]} << 16) |
         (std::uint32_t{b[3]} << 24);
}

namespace {

// What the ICRC of an IPv4 packet covers: its header (IHL x 4 bytes), the UDP header and the
// transport packet up to the ICRC (BTH .. pad). nullopt if the IHL is below 5 or the packet
// is too short for these headers, a BTH and the ICRC.
struct IcrcCover {
  ByteSpan ipv4_header;
  ByteSpan udp_header;
  ByteSpan transport;
};

std::optional<IcrcCover> icrc_cover(ByteSpan ipv4_packet) {
  if (ipv4_packet.empty()) return std::nullopt;
  const std::size_t ihl = std::size_t{ipv4_packet[0] & 0x0Fu} * 4;
  const std::size_t headers = ihl + IcrcCalculator::kUdpHeaderLength;
  if (ihl < IcrcCalculator::kMinIpv4HeaderLength || ipv4_packet.size() < headers + kBthLength + kIcrcLength)
    return std::nullopt;
  return IcrcCover{ipv4_packet.first(ihl), ipv4_packet.subspan(ihl, IcrcCalculator::kUdpHeaderLength),
                   ipv4_packet.subspan(headers, ipv4_packet.size() - headers - kIcrcLength)};
}

}  // namespace

IcrcError verify_icrc(ByteSpan ipv4_packet) {
  const auto cover = icrc_cover(ipv4_packet);
  if (!cover) return IcrcError::truncated;
  const auto computed = compute_icrc(cover->ipv4_header, cover->udp_header, cover->transport);
  if (!computed) return IcrcError::truncated;
  return *computed == load_icrc(ipv4_packet.last(kIcrcLength)) ? IcrcError::none : IcrcError::mismatch;
}

bool seal_icrc(MutableByteSpan ipv4_packet) {
  const auto cover = icrc_cover(ipv4_packet);
  if (!cover || cover->transport.size() < kBthLength + BthView::check(cover->transport)->pad_count()) return false;
  const auto computed = compute_icrc(cover->ipv4_header, cover->udp_header, cover->transport);
  if (!computed) return false;
  const auto bytes = icrc_bytes(*computed);
  std::copy(bytes.begin(), bytes.end(), ipv4_packet.end() - static_cast<std::ptrdiff_t>(kIcrcLength));
  return true;
}

// ---- The hidden IPv4 identification ----

namespace {

// Arithmetic modulo the CRC-32 polynomial P, on values as the reflected CRC register holds
// them: bit 31 is the coefficient of x^0, bit 0 that of x^31 (so shifting right multiplies
// by x, and 0xEDB88320 is P without its x^32 term).
namespace gf2 {

constexpr std::uint32_t kPolynomial = 0xEDB88320;
constexpr std::uint32_t kOne = 0x80000000;

constexpr std::uint32_t all_if(std::uint32_t bit) { return 0u - (bit & 1u); }

constexpr std::uint32_t times_x(std::uint32_t a) { return (a >> 1) ^ (kPolynomial & all_if(a)); }

// a / x: x is invertible because P has a constant term. If a has an x^0 term, add P first
// (which cancels it), then every coefficient moves one degree down, P's x^32 landing on x^31.
constexpr std::uint32_t over_x(std::uint32_t a) {
  const std::uint32_t has_constant = a >> 31;
  return ((a ^ (kPolynomial & all_if(has_constant))) << 1) | has_constant;
}

// One coefficient of a at a time: the definition, for the static_assert below.
constexpr std::uint32_t multiply_bitwise(std::uint32_t a, std::uint32_t b) {
  std::uint32_t product = 0;
  for (int degree = 0; degree < 32; ++degree) {  // b runs through b * x^degree
    product ^= b & all_if(a >> (31 - degree));
    b = times_x(b);
  }
  return product;
}

// a * x^4: the low 4 bits (x^28..x^31) overflow and come back reduced.
constexpr std::array<std::uint32_t, 16> make_times_x4_overflow() {
  std::array<std::uint32_t, 16> t{};
  for (std::uint32_t n = 0; n < 16; ++n) t[n] = times_x(times_x(times_x(times_x(n))));
  return t;
}
constexpr std::array<std::uint32_t, 16> kTimesX4Overflow = make_times_x4_overflow();
constexpr std::uint32_t times_x4(std::uint32_t a) { return (a >> 4) ^ kTimesX4Overflow[a & 0xF]; }

// Four coefficients of a at a time (Horner, highest degree first: a's low nibble), against
// the 16 multiples of b by polynomials of degree < 4 (in a nibble, bit m stands for x^(3-m)).
// A quarter of the bitwise loop's dependent steps: this is the solve's main cost.
constexpr std::uint32_t multiply(std::uint32_t a, std::uint32_t b) {
  const std::array<std::uint32_t, 4> b_times_bit{times_x(times_x(times_x(b))), times_x(times_x(b)), times_x(b), b};
  std::array<std::uint32_t, 16> b_times{};
  for (unsigned m = 0; m < 4; ++m)  // the entries below bit m are complete: add bit m to each
    for (unsigned n = 0; n < (1u << m); ++n) b_times[(1u << m) | n] = b_times[n] ^ b_times_bit[m];
  std::uint32_t product = 0;
  for (int shift = 0; shift < 32; shift += 4) product = times_x4(product) ^ b_times[(a >> shift) & 0xF];
  return product;
}
static_assert(multiply(0x12345678, 0x9ABCDEF0) == multiply_bitwise(0x12345678, 0x9ABCDEF0) &&
              multiply(0xFFFFFFFF, 0x80000001) == multiply_bitwise(0xFFFFFFFF, 0x80000001) &&
              multiply(0xDB710641, 0x00000002) == multiply_bitwise(0xDB710641, 0x00000002));

// x^(-8k) for k = 0..65535, as two tables of 256: k = 256 * high + low.
struct InversePowers {
  std::array<std::uint32_t, 256> low{}, high{};
};

constexpr InversePowers make_inverse_powers() {
  InversePowers t;
  std::uint32_t p = kOne;
  for (std::size_t k = 0; k < 256; ++k) {
    t.low[k] = p;
    for (int i = 0; i < 8; ++i) p = over_x(p);
  }
  const std::uint32_t step = p;  // x^(-8 * 256)
  t.high[0] = kOne;
  for (std::size_t h = 1; h < 256; ++h) t.high[h] = multiply(t.high[h - 1], step);
  return t;
}

constexpr InversePowers kInversePowers = make_inverse_powers();

constexpr std::uint32_t times_inverse_x8(std::uint32_t a, std::size_t k) {
  return multiply(multiply(a, kInversePowers.low[k & 0xFF]), kInversePowers.high[(k >> 8) & 0xFF]);
}

}  // namespace gf2

// The byte-wise CRC table: the register a byte n leaves when fed into a zero register
// (n * x^8 mod P). Its entries' top bytes are all different (the top byte of n * x^8 is
// n times a unit lower-triangular matrix), so `by_top_byte` inverts them.
struct ByteTables {
  std::array<std::uint32_t, 256> crc{};
  std::array<std::uint8_t, 256> by_top_byte{};
};

constexpr ByteTables make_byte_tables() {
  ByteTables t;
  for (std::uint32_t n = 0; n < 256; ++n) {
    std::uint32_t r = n;
    for (int i = 0; i < 8; ++i) r = gf2::times_x(r);
    t.crc[n] = r;
    t.by_top_byte[r >> 24] = static_cast<std::uint8_t>(n);
  }
  return t;
}

constexpr ByteTables kByteTables = make_byte_tables();

constexpr bool top_bytes_distinct() {
  std::array<bool, 256> seen{};
  for (std::uint32_t r : kByteTables.crc) {
    if (seen[r >> 24]) return false;
    seen[r >> 24] = true;
  }
  return true;
}
static_assert(top_bytes_distinct());
static_assert(kByteTables.crc[1] == 0x77073096 && kByteTables.crc[255] == 0x2D02EF8D);  // zlib's table
static_assert(gf2::times_x(gf2::over_x(0x12345678)) == 0x12345678);
// Undoing k zero bytes, for k on both sides of the tables' seam.
constexpr bool undoes_zero_bytes(std::uint32_t a, std::size_t k) {
  std::uint32_t shifted = a;
  for (std::size_t i = 0; i < 8 * k; ++i) shifted = gf2::times_x(shifted);
  return gf2::times_inverse_x8(shifted, k) == a;
}
static_assert(undoes_zero_bytes(0x12345678, 1) && undoes_zero_bytes(0x9ABCDEF0, 255) &&
              undoes_zero_bytes(0x0F1E2D3C, 256) && undoes_zero_bytes(0x80000001, 1500));

// The two bytes (b0, then b1) that take a zero CRC register to `r`, if any: fed in,
// r = (T[b0] >> 8) ^ T[(T[b0] ^ b1) & 0xFF]. The first term's top byte is 0, so r's top byte
// names the second table entry; removing it leaves T[b0] >> 8, whose top byte names b0.
// The 16 remaining bits must agree: a random r passes with probability 2^-16.
std::optional<std::uint16_t> two_bytes_from_zero(std::uint32_t r) {
  const std::uint8_t second = kByteTables.by_top_byte[r >> 24];
  const std::uint32_t first_shifted = r ^ kByteTables.crc[second];
  const std::uint8_t b0 = kByteTables.by_top_byte[(first_shifted >> 16) & 0xFF];
  if ((kByteTables.crc[b0] >> 8) != first_shifted) return std::nullopt;
  const auto b1 = static_cast<std::uint8_t>(second ^ kByteTables.crc[b0]);
  return static_cast<std::uint16_t>((b0 << 8) | b1);
}

constexpr std::size_t kIpv4IdentificationAt = 4;
constexpr std::uint16_t kIpv4DontFragment = 0x4000;
constexpr std::uint8_t kIpProtocolUdp = 17;
constexpr std::uint8_t kIpv4VersionIhl5 = 0x45;

}  // namespace

std::optional<Ipv4HeaderBytes> reconstructed_ipv4_header(const HiddenHeaderFields& fields,
                                                         std::size_t udp_payload_length,
                                                         std::uint16_t identification) {
  if (udp_payload_length > kMaxIpv4UdpPayload) return std::nullopt;
  Ipv4HeaderBytes h{};
  h[0] = kIpv4VersionIhl5;
  h[kIpv4TosAt] = fields.tos;
  store_be16(h, 2, static_cast<std::uint16_t>(udp_payload_length + 28));
  store_be16(h, kIpv4IdentificationAt, identification);
  store_be16(h, 6, kIpv4DontFragment);
  h[kIpv4TtlAt] = fields.ttl;
  h[9] = kIpProtocolUdp;
  store_be32(h, 12, fields.source.value);
  store_be32(h, 16, fields.destination.value);
  store_be16(h, kIpv4ChecksumAt, stack::internet_checksum(h));
  return h;
}

std::optional<UdpHeaderBytes> reconstructed_udp_header(const HiddenHeaderFields& fields,
                                                       std::size_t udp_payload_length) {
  if (udp_payload_length > kMaxIpv4UdpPayload) return std::nullopt;
  UdpHeaderBytes h{};
  store_be16(h, 0, fields.source_port);
  store_be16(h, 2, fields.destination_port);
  store_be16(h, 4, static_cast<std::uint16_t>(udp_payload_length + 8));
  return h;
}

HiddenIdIcrc verify_icrc_hidden_id(const HiddenHeaderFields& fields, ByteSpan udp_payload) {
  if (udp_payload.size() < kBthLength + kIcrcLength) return {IcrcError::truncated};
  const auto ip = reconstructed_ipv4_header(fields, udp_payload.size(), 0);
  const auto udp = reconstructed_udp_header(fields, udp_payload.size());
  if (!ip || !udp) return {IcrcError::truncated};
  const ByteSpan transport = udp_payload.first(udp_payload.size() - kIcrcLength);
  const std::uint32_t with_zero_id = *compute_icrc(*ip, *udp, transport);
  const std::uint32_t difference = with_zero_id ^ load_icrc(udp_payload.last(kIcrcLength));
  if (difference == 0) return {IcrcError::none, 0};
  // The bytes the CRC covers after the identification: the rest of the IPv4 header, the UDP
  // header, the transport (the masked LRH comes before it).
  const std::size_t after_id = (ip->size() - kIpv4IdentificationAt - 2) + udp->size() + transport.size();
  const auto id = two_bytes_from_zero(gf2::times_inverse_x8(difference, after_id));
  if (!id) return {IcrcError::mismatch};
  return {IcrcError::none, *id};
}

}  // namespace rrdma::rocev2
