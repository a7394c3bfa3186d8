// MAC and IPv4 addresses as values, with parsing from and formatting to text.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "stack/bytes.h"

namespace rrdma::stack {

struct MacAddress {
  std::array<std::uint8_t, 6> bytes{};
  static constexpr MacAddress broadcast() { return {{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}; }
  constexpr bool is_broadcast() const { return *this == broadcast(); }
  constexpr bool is_multicast() const { return (bytes[0] & 1) != 0; }
  static std::optional<MacAddress> parse(std::string_view text);  // "02:00:5e:aa:bb:cc"
  std::string to_string() const;
  constexpr auto operator<=>(const MacAddress&) const = default;
};

struct Ipv4Address {
  std::uint32_t value = 0;  // host order: 10.0.0.1 is 0x0A000001
  static std::optional<Ipv4Address> parse(std::string_view text);  // dotted quad only
  std::string to_string() const;
  constexpr auto operator<=>(const Ipv4Address&) const = default;
};

// "10.66.0.10/24" -> address and prefix length; nullopt for anything malformed.
struct Ipv4Cidr {
  Ipv4Address address;
  std::uint8_t prefix_len = 0;
  static std::optional<Ipv4Cidr> parse(std::string_view text);
  bool contains(Ipv4Address a) const;
};

// A MAC address at byte offset `at` of a wire buffer the caller has length-checked.
MacAddress load_mac(ByteSpan bytes, std::size_t at);
void store_mac(MutableByteSpan bytes, std::size_t at, const MacAddress& mac);

}  // namespace rrdma::stack
