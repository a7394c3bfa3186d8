#include "rocev2/cm/cma.h"

#include <algorithm>

namespace rrdma::rocev2::cm {

std::string_view port_space_name(PortSpace ps) {
  switch (ps) {
    case PortSpace::Ipoib: return "IPoIB";
    case PortSpace::Tcp: return "TCP";
    case PortSpace::Udp: return "UDP";
    case PortSpace::Ib: return "IB";
  }
  return "?";
}

std::optional<IpServiceId> parse_ip_service_id(std::uint64_t service_id) {
  if (service_id >> 32 != 0) return std::nullopt;
  const auto ps = static_cast<PortSpace>(static_cast<std::uint16_t>(service_id >> 16));
  switch (ps) {
    case PortSpace::Ipoib:
    case PortSpace::Tcp:
    case PortSpace::Udp:
    case PortSpace::Ib:
      return IpServiceId{ps, static_cast<std::uint16_t>(service_id)};
  }
  return std::nullopt;
}

namespace {

// Offsets in struct cma_hdr (cma.c).
constexpr std::size_t kVersionAt = 0;
constexpr std::size_t kIpVersionAt = 1;  // in the high nibble
constexpr std::size_t kPortAt = 2;
constexpr std::size_t kSourceAt = 4;
constexpr std::size_t kDestinationAt = 20;
constexpr std::size_t kIpv4At = 12;  // an IPv4 address within a 16-byte field

IpField ipv4_field(stack::Ipv4Address a) {
  IpField f{};
  store_be32(f, kIpv4At, a.value);
  return f;
}

std::optional<stack::Ipv4Address> ipv4_in(const CmaHeader& h, const IpField& f) {
  if (h.ip_version != 4) return std::nullopt;
  return stack::Ipv4Address{load_be32(f, kIpv4At)};
}

IpField read_field(ByteSpan b, std::size_t at, std::uint8_t ip_version) {
  IpField f{};
  if (ip_version == 4)
    std::copy_n(b.begin() + static_cast<std::ptrdiff_t>(at + kIpv4At), 4, f.begin() + kIpv4At);
  else
    std::copy_n(b.begin() + static_cast<std::ptrdiff_t>(at), f.size(), f.begin());
  return f;
}

bool is_ipv4_field(const IpField& f) {
  return std::all_of(f.begin(), f.begin() + kIpv4At, [](std::uint8_t b) { return b == 0; });
}

}  // namespace

CmaHeader cma_header_ipv4(stack::Ipv4Address source, std::uint16_t source_port, stack::Ipv4Address destination) {
  return CmaHeader{.ip_version = 4,
                   .source_port = source_port,
                   .source_address = ipv4_field(source),
                   .destination_address = ipv4_field(destination)};
}

std::optional<stack::Ipv4Address> cma_source_ipv4(const CmaHeader& h) { return ipv4_in(h, h.source_address); }
std::optional<stack::Ipv4Address> cma_destination_ipv4(const CmaHeader& h) { return ipv4_in(h, h.destination_address); }

std::string_view to_string(CmaError e) {
  switch (e) {
    case CmaError::none: return "none";
    case CmaError::truncated: return "truncated";
    case CmaError::bad_version: return "bad CMA version";
    case CmaError::bad_ip_version: return "bad IP version";
    case CmaError::address_out_of_range: return "IPv4 address field not 12 zero bytes + address";
    case CmaError::user_data_too_long: return "user data too long";
    case CmaError::buffer_too_small: return "buffer too small";
  }
  return "?";
}

CmaError parse_cma_header(ByteSpan private_data, CmaHeader& out) {
  if (private_data.size() < kCmaHeaderLength) return CmaError::truncated;
  if (private_data[kVersionAt] != kCmaVersion) return CmaError::bad_version;
  const auto ip_version = static_cast<std::uint8_t>(private_data[kIpVersionAt] >> 4);
  if (ip_version != 4 && ip_version != 6) return CmaError::bad_ip_version;
  out = CmaHeader{.ip_version = ip_version,
                  .source_port = load_be16(private_data, kPortAt),
                  .source_address = read_field(private_data, kSourceAt, ip_version),
                  .destination_address = read_field(private_data, kDestinationAt, ip_version)};
  return CmaError::none;
}

std::optional<CmaHeader> parse_cma_header(ByteSpan private_data) {
  CmaHeader h;
  if (parse_cma_header(private_data, h) != CmaError::none) return std::nullopt;
  return h;
}

ByteSpan cma_user_data(ByteSpan private_data) {
  return private_data.size() < kCmaHeaderLength ? ByteSpan{} : private_data.subspan(kCmaHeaderLength);
}

CmaError emit_cma_private_data(const CmaHeader& h, ByteSpan user_data, MutableByteSpan out) {
  if (out.size() < kCmaHeaderLength) return CmaError::buffer_too_small;
  if (h.ip_version != 4 && h.ip_version != 6) return CmaError::bad_ip_version;
  if (h.ip_version == 4 && !(is_ipv4_field(h.source_address) && is_ipv4_field(h.destination_address)))
    return CmaError::address_out_of_range;
  if (user_data.size() > out.size() - kCmaHeaderLength) return CmaError::user_data_too_long;
  std::fill(out.begin(), out.end(), std::uint8_t{0});
  out[kVersionAt] = kCmaVersion;
  out[kIpVersionAt] = static_cast<std::uint8_t>(h.ip_version << 4);
  store_be16(out, kPortAt, h.source_port);
  std::copy(h.source_address.begin(), h.source_address.end(), out.begin() + kSourceAt);
  std::copy(h.destination_address.begin(), h.destination_address.end(), out.begin() + kDestinationAt);
  std::copy(user_data.begin(), user_data.end(), out.begin() + kCmaHeaderLength);
  return CmaError::none;
}

}  // namespace rrdma::rocev2::cm
