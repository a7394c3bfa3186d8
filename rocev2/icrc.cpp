#include "rocev2/icrc.h"

#include <isa-l/crc.h>

#include <algorithm>

namespace rrdma::rocev2 {

namespace {

// Offsets of the fields the ICRC masks (IBA A17.3.3 for IPv4; RFC 791, RFC 768).
constexpr std::size_t kIpv4TosAt = 1;
constexpr std::size_t kIpv4TtlAt = 8;
constexpr std::size_t kIpv4ChecksumAt = 10;
constexpr std::size_t kUdpChecksumAt = 6;
constexpr std::size_t kMaskedLrhLength = 8;

constexpr std::size_t kMaxPrefix =
    kMaskedLrhLength + IcrcCalculator::kMaxIpv4HeaderLength + IcrcCalculator::kUdpHeaderLength + kBthLength;

}  // namespace

std::uint32_t crc32(std::uint32_t crc, ByteSpan bytes) {
  // crc32_gzip_refl inverts on entry and exit, like zlib, so results chain.
  return crc32_gzip_refl(crc, bytes.data(), bytes.size());
}

std::optional<IcrcCalculator> IcrcCalculator::start(ByteSpan ipv4_header, ByteSpan udp_header, ByteSpan bth) {
  if (ipv4_header.size() < kMinIpv4HeaderLength || ipv4_header.size() > kMaxIpv4HeaderLength ||
      udp_header.size() != kUdpHeaderLength || bth.size() != kBthLength)
    return std::nullopt;
  // One contiguous copy of the masked headers, so that the CRC runs once over them.
  std::array<std::uint8_t, kMaxPrefix> prefix;
  auto out = prefix.begin();
  out = std::fill_n(out, kMaskedLrhLength, std::uint8_t{0xFF});
  const auto ip = out;
  out = std::copy(ipv4_header.begin(), ipv4_header.end(), out);
  ip[kIpv4TosAt] = 0xFF;
  ip[kIpv4TtlAt] = 0xFF;
  ip[kIpv4ChecksumAt] = ip[kIpv4ChecksumAt + 1] = 0xFF;
  const auto udp = out;
  out = std::copy(udp_header.begin(), udp_header.end(), out);
  udp[kUdpChecksumAt] = udp[kUdpChecksumAt + 1] = 0xFF;
  const auto b = out;
  out = std::copy(bth.begin(), bth.end(), out);
  b[4] = 0xFF;  // FECN, BECN, reserved
  const auto used = static_cast<std::size_t>(out - prefix.begin());
  return IcrcCalculator(crc32(0, ByteSpan(prefix.data(), used)));
}

std::optional<std::uint32_t> compute_icrc(ByteSpan ipv4_header, ByteSpan udp_header, ByteSpan transport) {
  if (transport.size() < kBthLength) return std::nullopt;
  auto calc = IcrcCalculator::start(ipv4_header, udp_header, transport.first(kBthLength));
  if (!calc) return std::nullopt;
  calc->add(transport.subspan(kBthLength));
  return calc->value();
}

std::array<std::uint8_t, kIcrcLength> icrc_bytes(std::uint32_t icrc) {
  return {static_cast<std::uint8_t>(icrc), static_cast<std::uint8_t>(icrc >> 8),
          static_cast<std::uint8_t>(icrc >> 16), static_cast<std::uint8_t>(icrc >> 24)};
}

std::uint32_t load_icrc(ByteSpan b) {
  return std::uint32_t{b[0]} | (std::uint32_t{b[1]} << 8) | (std::uint32_t{b[2]} << 16) |
         (std::uint32_t{b[3]} << 24);
}

IcrcError verify_icrc(ByteSpan ipv4_packet) {
  if (ipv4_packet.empty()) return IcrcError::truncated;
  const std::size_t ihl = std::size_t{ipv4_packet[0] & 0x0Fu} * 4;
  const std::size_t headers = ihl + IcrcCalculator::kUdpHeaderLength;
  if (ihl < IcrcCalculator::kMinIpv4HeaderLength || ipv4_packet.size() < headers + kBthLength + kIcrcLength)
    return IcrcError::truncated;
  const ByteSpan transport = ipv4_packet.subspan(headers, ipv4_packet.size() - headers - kIcrcLength);
  const auto computed = compute_icrc(ipv4_packet.first(ihl), ipv4_packet.subspan(ihl, 8), transport);
  if (!computed) return IcrcError::truncated;
  return *computed == load_icrc(ipv4_packet.last(kIcrcLength)) ? IcrcError::none : IcrcError::mismatch;
}

}  // namespace rrdma::rocev2
