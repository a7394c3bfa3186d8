#include "rocev2/icrc.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <cassert>

#include "rocev2/wire.h"

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

}  // namespace rrdma::rocev2
