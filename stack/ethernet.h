// Ethernet II framing (IEEE 802.3 clause 3.2.6 "type" interpretation): destination MAC,
// source MAC, EtherType, payload. Frames arrive without preamble or FCS (the TAP device
// strips them), and may carry padding up to the 60-byte minimum: the payload span here
// includes that padding; the network layer trims it using its own length field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "stack/addresses.h"
#include "stack/bytes.h"

namespace rrdma::stack {

// EtherType values we speak (IEEE registry). Any other 16-bit value is representable
// in the enum and kept through a parse/emit round trip.
enum class EtherType : std::uint16_t {
  ipv4 = 0x0800,
  arp = 0x0806,
};

// A checked view over the bytes of one Ethernet frame.
class EthernetView {
 public:
  static constexpr std::size_t header_length = 14;
  static constexpr std::size_t destination_at = 0;
  static constexpr std::size_t source_at = 6;
  static constexpr std::size_t ethertype_at = 12;

  // nullopt if the buffer cannot hold the 14-byte header.
  static std::optional<EthernetView> check(ByteSpan frame);

  MacAddress destination() const;
  MacAddress source() const;
  EtherType ethertype() const { return EtherType{load_be16(bytes_, ethertype_at)}; }
  ByteSpan header() const { return bytes_.first(header_length); }
  ByteSpan payload() const { return bytes_.subspan(header_length); }
  ByteSpan bytes() const { return bytes_; }

 private:
  explicit EthernetView(ByteSpan frame) : bytes_(frame) {}
  ByteSpan bytes_;
};

// The parsed Ethernet header.
struct EthernetHeader {
  MacAddress destination;
  MacAddress source;
  EtherType ethertype = EtherType::ipv4;

  static EthernetHeader parse(const EthernetView& view);
  static constexpr std::size_t length() { return EthernetView::header_length; }
  // Writes the 14 header bytes at the start of `out` (out.size() >= length()).
  void emit(MutableByteSpan out) const;

  bool operator==(const EthernetHeader&) const = default;
};

}  // namespace rrdma::stack
