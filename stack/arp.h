// ARP for IPv4 over Ethernet (RFC 826): the only hardware/protocol pair we accept is
// Ethernet (1) / IPv4 (0x0800) with 6-byte and 4-byte addresses; anything else is
// malformed for us.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "stack/addresses.h"
#include "stack/bytes.h"

namespace rrdma::stack {

enum class ArpOperation : std::uint16_t {
  request = 1,
  reply = 2,
};

enum class ArpError {
  none,
  truncated,    // shorter than the 28 bytes of an Ethernet/IPv4 ARP packet
  unsupported,  // another hardware or protocol type, or other address lengths
};

class ArpView {
 public:
  static constexpr std::size_t packet_length = 28;

  static ArpError validate(ByteSpan packet);
  static std::optional<ArpView> check(ByteSpan packet);

  std::uint16_t hardware_type() const { return load_be16(bytes_, 0); }
  std::uint16_t protocol_type() const { return load_be16(bytes_, 2); }
  std::uint8_t hardware_length() const { return bytes_[4]; }
  std::uint8_t protocol_length() const { return bytes_[5]; }
  ArpOperation operation() const { return ArpOperation{load_be16(bytes_, 6)}; }
  MacAddress sender_mac() const;
  Ipv4Address sender_ip() const { return Ipv4Address{load_be32(bytes_, 14)}; }
  MacAddress target_mac() const;
  Ipv4Address target_ip() const { return Ipv4Address{load_be32(bytes_, 24)}; }
  ByteSpan bytes() const { return bytes_; }

 private:
  explicit ArpView(ByteSpan packet) : bytes_(packet) {}
  ByteSpan bytes_;  // exactly packet_length bytes: Ethernet padding is cut off
};

struct ArpPacket {
  ArpOperation operation = ArpOperation::request;
  MacAddress sender_mac;
  Ipv4Address sender_ip;
  MacAddress target_mac;  // ignored in a request; Linux and RFC 5227 send zeros
  Ipv4Address target_ip;

  static ArpPacket parse(const ArpView& view);
  static constexpr std::size_t length() { return ArpView::packet_length; }
  void emit(MutableByteSpan out) const;

  bool operator==(const ArpPacket&) const = default;
};

}  // namespace rrdma::stack
