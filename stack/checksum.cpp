#include "stack/checksum.h"

namespace rrdma::stack {

void InternetChecksum::add(ByteSpan bytes) {
  for (std::uint8_t byte : bytes) {
    // Even positions are the high half of a word (RFC 1071 section 1: big-endian words).
    sum_ += odd_ ? std::uint64_t{byte} : std::uint64_t{byte} << 8;
    odd_ = !odd_;
  }
}

void InternetChecksum::add_u16(std::uint16_t word) {
  const std::uint8_t bytes[2] = {static_cast<std::uint8_t>(word >> 8),
                                 static_cast<std::uint8_t>(word)};
  add(bytes);
}

void InternetChecksum::add_u32(std::uint32_t word) {
  add_u16(static_cast<std::uint16_t>(word >> 16));
  add_u16(static_cast<std::uint16_t>(word));
}

std::uint16_t InternetChecksum::finish() const {
  // End-around carry folding (RFC 1071 section 4.1); a trailing odd byte already sits in
  // the high half, i.e. it was padded with zero.
  std::uint64_t sum = sum_;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

std::uint16_t internet_checksum(ByteSpan bytes) {
  InternetChecksum sum;
  sum.add(bytes);
  return sum.finish();
}

void add_pseudo_header(InternetChecksum& sum, Ipv4Address source, Ipv4Address destination,
                       std::uint8_t protocol, std::uint16_t length) {
  sum.add_u32(source.value);
  sum.add_u32(destination.value);
  sum.add_u16(protocol);
  sum.add_u16(length);
}

}  // namespace rrdma::stack
