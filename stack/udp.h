// UDP (RFC 768). The length field covers header and data and must fit in what IPv4
// delivered; the view's payload ends at that length. A checksum of 0 means "not computed"
// (allowed over IPv4; RoCE v2 sends 0), and a computed 0 is sent as 0xffff.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "stack/addresses.h"
#include "stack/bytes.h"

namespace rrdma::stack {

enum class UdpError {
  none,
  truncated,   // shorter than the 8-byte header
  bad_length,  // length field < 8 or larger than the IP payload
};

class UdpView {
 public:
  static constexpr std::size_t header_length = 8;

  static UdpError validate(ByteSpan datagram);
  static std::optional<UdpView> check(ByteSpan datagram);

  std::uint16_t source_port() const { return load_be16(bytes_, 0); }
  std::uint16_t destination_port() const { return load_be16(bytes_, 2); }
  std::uint16_t length() const { return load_be16(bytes_, 4); }
  std::uint16_t checksum() const { return load_be16(bytes_, 6); }
  // True when the checksum is 0 (not computed) or verifies over the pseudo-header
  // (RFC 768) built from the IPv4 source and destination.
  bool checksum_valid(Ipv4Address source, Ipv4Address destination) const;
  ByteSpan header() const { return bytes_.first(header_length); }
  ByteSpan payload() const { return bytes_.subspan(header_length); }
  ByteSpan bytes() const { return bytes_; }

 private:
  explicit UdpView(ByteSpan datagram) : bytes_(datagram) {}
  ByteSpan bytes_;  // trimmed to length()
};

// The parsed UDP header. The checksum is not part of the value: emit() writes 0 and
// fill_checksum() computes it once the payload is in place.
struct UdpHeader {
  std::uint16_t source_port = 0;
  std::uint16_t destination_port = 0;
  std::uint16_t payload_length = 0;

  static UdpHeader parse(const UdpView& view);
  static constexpr std::size_t length() { return UdpView::header_length; }
  std::size_t total_length() const { return length() + payload_length; }
  // Writes the 8 header bytes with checksum 0 at the start of `out`.
  void emit(MutableByteSpan out) const;
  // Computes and stores the checksum of a complete datagram (header and payload).
  static void fill_checksum(MutableByteSpan datagram, Ipv4Address source,
                            Ipv4Address destination);

  bool operator==(const UdpHeader&) const = default;
};

}  // namespace rrdma::stack
