#include "stack/addresses.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cstdio>

namespace rrdma::stack {
namespace {

// Parses an unsigned decimal or hex number that must fill `text` exactly.
template <typename T>
std::optional<T> parse_number(std::string_view text, int base) {
  if (text.empty()) return std::nullopt;
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

MacAddress load_mac(ByteSpan bytes, std::size_t at) {
  assert(at + 6 <= bytes.size());
  MacAddress mac;
  std::copy_n(bytes.begin() + static_cast<std::ptrdiff_t>(at), mac.bytes.size(), mac.bytes.begin());
  return mac;
}

void store_mac(MutableByteSpan bytes, std::size_t at, const MacAddress& mac) {
  assert(at + 6 <= bytes.size());
  std::copy(mac.bytes.begin(), mac.bytes.end(), bytes.begin() + static_cast<std::ptrdiff_t>(at));
}

std::optional<MacAddress> MacAddress::parse(std::string_view text) {
  // Exactly six two-digit hex groups separated by ':' (17 characters).
  if (text.size() != 17) return std::nullopt;
  MacAddress mac;
  for (std::size_t i = 0; i < 6; ++i) {
    if (i > 0 && text[i * 3 - 1] != ':') return std::nullopt;
    const auto byte = parse_number<unsigned>(text.substr(i * 3, 2), 16);
    if (!byte) return std::nullopt;
    mac.bytes[i] = static_cast<std::uint8_t>(*byte);
  }
  return mac;
}

std::string MacAddress::to_string() const {
  char text[18];
  std::snprintf(text, sizeof text, "%02x:%02x:%02x:%02x:%02x:%02x", bytes[0], bytes[1],
                bytes[2], bytes[3], bytes[4], bytes[5]);
  return text;
}

std::optional<Ipv4Address> Ipv4Address::parse(std::string_view text) {
  std::uint32_t value = 0;
  for (int i = 0; i < 4; ++i) {
    const std::size_t dot = text.find('.');
    const bool last = i == 3;
    if (last != (dot == std::string_view::npos)) return std::nullopt;
    const std::string_view part = last ? text : text.substr(0, dot);
    // No leading zeros ("010" is octal to inet_aton, so refuse the ambiguity), at most 3 digits.
    if (part.size() > 3 || (part.size() > 1 && part[0] == '0')) return std::nullopt;
    const auto octet = parse_number<unsigned>(part, 10);
    if (!octet || *octet > 255) return std::nullopt;
    value = (value << 8) | *octet;
    if (!last) text.remove_prefix(dot + 1);
  }
  return Ipv4Address{value};
}

std::string Ipv4Address::to_string() const {
  return std::to_string(value >> 24) + '.' + std::to_string((value >> 16) & 0xff) + '.' +
         std::to_string((value >> 8) & 0xff) + '.' + std::to_string(value & 0xff);
}

std::optional<Ipv4Cidr> Ipv4Cidr::parse(std::string_view text) {
  const std::size_t slash = text.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  const auto address = Ipv4Address::parse(text.substr(0, slash));
  const std::string_view prefix_text = text.substr(slash + 1);
  if (prefix_text.size() > 2) return std::nullopt;
  const auto prefix = parse_number<unsigned>(prefix_text, 10);
  if (!address || !prefix || *prefix > 32) return std::nullopt;
  return Ipv4Cidr{*address, static_cast<std::uint8_t>(*prefix)};
}

bool Ipv4Cidr::contains(Ipv4Address a) const {
  // A shift by 32 is undefined, so /0 is its own case (and /32 or more an exact match).
  if (prefix_len == 0) return true;
  if (prefix_len >= 32) return a == address;
  const std::uint32_t mask = ~std::uint32_t{0} << (32 - prefix_len);
  return (a.value & mask) == (address.value & mask);
}

}  // namespace rrdma::stack
