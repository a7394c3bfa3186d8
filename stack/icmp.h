// ICMP for IPv4 (RFC 792): echo request and reply, destination unreachable. Every ICMP
// message starts with type, code, checksum and four type-specific bytes; the checksum
// covers the whole message. Other types parse to nullopt (the interface counts them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "stack/bytes.h"

namespace rrdma::stack {

enum class IcmpType : std::uint8_t {
  echo_reply = 0,
  destination_unreachable = 3,
  echo_request = 8,
};

// Codes of destination unreachable (RFC 792, RFC 1191 for code 4).
enum class UnreachableCode : std::uint8_t {
  net = 0,
  host = 1,
  protocol = 2,
  port = 3,
  fragmentation_needed = 4,
};

enum class IcmpError {
  none,
  truncated,  // shorter than the 8-byte header
};

class IcmpView {
 public:
  static constexpr std::size_t header_length = 8;

  static IcmpError validate(ByteSpan message);
  static std::optional<IcmpView> check(ByteSpan message);

  IcmpType type() const { return IcmpType{bytes_[0]}; }
  std::uint8_t code() const { return bytes_[1]; }
  std::uint16_t checksum() const { return load_be16(bytes_, 2); }
  // Echo request/reply: bytes 4-7 (RFC 792 "Echo or Echo Reply Message").
  std::uint16_t identifier() const { return load_be16(bytes_, 4); }
  std::uint16_t sequence() const { return load_be16(bytes_, 6); }
  // Destination unreachable, code 4: the MTU of the next hop (RFC 1191 section 4).
  std::uint16_t next_hop_mtu() const { return load_be16(bytes_, 6); }
  bool checksum_valid() const;
  // Echo data, or the quoted IP header and leading bytes of an unreachable datagram.
  ByteSpan data() const { return bytes_.subspan(header_length); }
  ByteSpan bytes() const { return bytes_; }

 private:
  explicit IcmpView(ByteSpan message) : bytes_(message) {}
  ByteSpan bytes_;  // the IPv4 payload: ICMP has no length field of its own
};

// The parsed ICMP message. `data` refers to bytes the caller keeps alive.
struct IcmpMessage {
  IcmpType type = IcmpType::echo_request;
  std::uint8_t code = 0;
  std::uint16_t identifier = 0;    // echo only
  std::uint16_t sequence = 0;      // echo only
  std::uint16_t next_hop_mtu = 0;  // destination unreachable only
  ByteSpan data;

  static std::optional<IcmpMessage> parse(const IcmpView& view);
  std::size_t length() const { return IcmpView::header_length + data.size(); }
  // Writes header, data and checksum at the start of `out` (out.size() >= length()).
  void emit(MutableByteSpan out) const;
};

}  // namespace rrdma::stack
