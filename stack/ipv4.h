// IPv4 (RFC 791). We parse headers with options (and skip them) but never emit options;
// we do not reassemble: fragments are recognised so that the interface can count and drop
// them. The view trims Ethernet padding: its payload ends at the header's total length.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "stack/addresses.h"
#include "stack/bytes.h"

namespace rrdma::stack {

// IP protocol numbers (IANA) the stack dispatches on; any other value is representable.
enum class IpProtocol : std::uint8_t {
  icmp = 1,
  udp = 17,
};

// Why a buffer is not a well-formed IPv4 header, in the order the checks run.
enum class Ipv4Error {
  none,
  truncated,    // shorter than the fixed 20-byte header
  bad_version,  // version field is not 4
  bad_ihl,      // IHL < 5, or the header it announces does not fit in the buffer
  bad_length,   // total length < header length, or larger than the buffer
};

// A checked view over one IPv4 packet. After check() no accessor reads past the header
// length or the total length, whatever the bytes say.
class Ipv4View {
 public:
  static constexpr std::size_t min_header_length = 20;

  static Ipv4Error validate(ByteSpan packet);
  static std::optional<Ipv4View> check(ByteSpan packet);

  std::uint8_t version() const { return bytes_[0] >> 4; }
  std::size_t header_length() const { return std::size_t{bytes_[0] & 0x0fu} * 4; }
  std::uint8_t dscp() const { return bytes_[1] >> 2; }
  std::uint8_t ecn() const { return bytes_[1] & 0x03; }
  std::uint16_t total_length() const { return load_be16(bytes_, 2); }
  std::uint16_t identification() const { return load_be16(bytes_, 4); }
  bool dont_fragment() const { return (bytes_[6] & 0x40) != 0; }
  bool more_fragments() const { return (bytes_[6] & 0x20) != 0; }
  // In units of 8 bytes (RFC 791 section 3.1).
  std::uint16_t fragment_offset() const { return load_be16(bytes_, 6) & 0x1fff; }
  bool is_fragment() const { return more_fragments() || fragment_offset() != 0; }
  std::uint8_t ttl() const { return bytes_[8]; }
  IpProtocol protocol() const { return IpProtocol{bytes_[9]}; }
  std::uint16_t header_checksum() const { return load_be16(bytes_, 10); }
  Ipv4Address source() const { return Ipv4Address{load_be32(bytes_, 12)}; }
  Ipv4Address destination() const { return Ipv4Address{load_be32(bytes_, 16)}; }

  // True when the one's complement sum over the header, checksum included, is all ones.
  bool header_checksum_valid() const;
  ByteSpan header() const { return bytes_.first(header_length()); }
  ByteSpan options() const { return header().subspan(min_header_length); }
  // The data after the header, up to the total length (Ethernet padding excluded).
  ByteSpan payload() const { return bytes_.subspan(header_length()); }
  // The packet up to its total length.
  ByteSpan bytes() const { return bytes_; }

 private:
  explicit Ipv4View(ByteSpan packet) : bytes_(packet) {}
  ByteSpan bytes_;  // trimmed to total_length()
};

// The parsed IPv4 header. Options are dropped on parse and never emitted, so length()
// is always 20; emit() computes the header checksum.
struct Ipv4Header {
  Ipv4Address source;
  Ipv4Address destination;
  IpProtocol protocol = IpProtocol::udp;
  std::uint16_t payload_length = 0;
  std::uint16_t identification = 0;
  bool dont_fragment = true;
  bool more_fragments = false;
  std::uint16_t fragment_offset = 0;  // units of 8 bytes
  std::uint8_t ttl = 64;
  std::uint8_t dscp = 0;
  std::uint8_t ecn = 0;

  static Ipv4Header parse(const Ipv4View& view);
  static constexpr std::size_t length() { return Ipv4View::min_header_length; }
  std::size_t total_length() const { return length() + payload_length; }
  // Writes the 20 header bytes at the start of `out` (out.size() >= length()).
  void emit(MutableByteSpan out) const;

  bool operator==(const Ipv4Header&) const = default;
};

}  // namespace rrdma::stack
