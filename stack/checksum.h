// The Internet checksum (RFC 1071): the one's complement of the one's complement sum of
// 16-bit big-endian words. IPv4 (RFC 791), ICMP (RFC 792) and UDP (RFC 768) all use it;
// this is the only implementation in the stack.
#pragma once

#include <cstdint>

#include "stack/addresses.h"
#include "stack/bytes.h"

namespace rrdma::stack {

// Accumulates over several spans (a pseudo-header, then a datagram). A span of odd
// length is padded with a zero byte only when it is the last one added: an odd byte left
// over is paired with the first byte of the next span, as if the spans were contiguous.
class InternetChecksum {
 public:
  void add(ByteSpan bytes);
  void add_u16(std::uint16_t word);
  void add_u32(std::uint32_t word);
  // The checksum to store in the header (already complemented).
  std::uint16_t finish() const;

 private:
  std::uint64_t sum_ = 0;
  bool odd_ = false;  // an odd byte is waiting for its low half
};

std::uint16_t internet_checksum(ByteSpan bytes);

// The UDP pseudo-header (RFC 768): source, destination, zero, protocol, UDP length.
void add_pseudo_header(InternetChecksum& sum, Ipv4Address source, Ipv4Address destination,
                       std::uint8_t protocol, std::uint16_t length);

}  // namespace rrdma::stack
