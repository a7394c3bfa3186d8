// What rdma_cm (Linux's drivers/infiniband/core/cma.c) puts into the IB CM's messages when a
// connection is made over IP addresses: the IP-based service ID, and the CMA header at the
// start of a REQ's or SIDR_REQ's private data. The CM itself (mad.h) treats both as opaque.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "stack/addresses.h"
#include "stack/bytes.h"

namespace rrdma::rocev2::cm {

// --- IP-based service IDs (IBA Annex A11, "RDMA IP CM Service") -------------------------

// rdma_cm's port spaces (rdma_user_cm.h, enum rdma_ucm_port_space).
enum class PortSpace : std::uint16_t { Ipoib = 0x0002, Tcp = 0x0106, Udp = 0x0111, Ib = 0x013F };
// "TCP", "UDP", "IB", "IPoIB"; "?" otherwise.
std::string_view port_space_name(PortSpace ps);

// (port space << 16) + port, as rdma_get_service_id makes it: rping's default port 7174 in
// the TCP space is 0x0000000001061C06.
constexpr std::uint64_t ip_service_id(PortSpace ps, std::uint16_t port) {
  return (std::uint64_t{static_cast<std::uint16_t>(ps)} << 16) + port;
}

struct IpServiceId {
  PortSpace port_space{};
  std::uint16_t port = 0;
  bool operator==(const IpServiceId&) const = default;
};
// The port space and port of an IP-based service ID: the top 32 bits zero and a known port
// space above the port (RDMA_IB_IP_PS_MASK). nullopt for any other service ID.
std::optional<IpServiceId> parse_ip_service_id(std::uint64_t service_id);

// --- The CMA header ------------------------------------------------------------------------

inline constexpr std::size_t kCmaHeaderLength = 36;
inline constexpr std::uint8_t kCmaVersion = 0;
// What is left for the application after the header: 92 - 36 in a REQ, 216 - 36 in a SIDR_REQ
// (the private-data lengths rdma_cm reports in its events).
inline constexpr std::size_t kReqUserDataLength = 92 - kCmaHeaderLength;
inline constexpr std::size_t kSidrReqUserDataLength = 216 - kCmaHeaderLength;

using IpField = std::array<std::uint8_t, 16>;  // an IPv6 address, or 12 zero bytes + an IPv4 one

// struct cma_hdr (cma.c): byte 0 the CMA version (0); byte 1 the IP version in its high
// nibble; bytes 2-3 the active side's *source* port; 4-19 its source address; 20-35 the
// destination address. An IPv4 address sits in the last 4 bytes of its field after 12 zero
// bytes (not ::ffff:a.b.c.d). The passive side takes the destination port from the service ID.
struct CmaHeader {
  std::uint8_t ip_version = 4;  // 4 or 6
  std::uint16_t source_port = 0;
  IpField source_address{};
  IpField destination_address{};
  bool operator==(const CmaHeader&) const = default;
};

CmaHeader cma_header_ipv4(stack::Ipv4Address source, std::uint16_t source_port, stack::Ipv4Address destination);
// The IPv4 address in a field of an IPv4 header (ip_version 4); nullopt for IPv6.
std::optional<stack::Ipv4Address> cma_source_ipv4(const CmaHeader& h);
std::optional<stack::Ipv4Address> cma_destination_ipv4(const CmaHeader& h);

enum class CmaError : std::uint8_t {
  none,
  truncated,            // fewer than 36 bytes of private data
  bad_version,          // CMA version other than 0 (Linux: EINVAL)
  bad_ip_version,       // neither 4 nor 6 (Linux: EAFNOSUPPORT)
  address_out_of_range, // emit: an IPv4 header whose address fields are not 12 zero bytes + address
  user_data_too_long,   // emit: more user data than the private-data field has room for
  buffer_too_small,     // emit: fewer than 36 bytes to write into
};
std::string_view to_string(CmaError e);

// The header at the start of `private_data`. The low nibble of byte 1, and for IPv4 the 12
// bytes before each address, are ignored (Linux reads neither) and come back zero.
CmaError parse_cma_header(ByteSpan private_data, CmaHeader& out);
std::optional<CmaHeader> parse_cma_header(ByteSpan private_data);
// The application's bytes after the header (empty if there is no room for a header).
ByteSpan cma_user_data(ByteSpan private_data);

// Writes the header and then `user_data` at the start of `out` (a private-data buffer of the
// message's size, kept by the caller and given to the message as its private data), zeroing
// the rest of `out`. Refuses an IP version other than 4 or 6, as the parser does.
CmaError emit_cma_private_data(const CmaHeader& h, ByteSpan user_data, MutableByteSpan out);

}  // namespace rrdma::rocev2::cm
