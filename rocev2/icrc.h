// The Invariant CRC of RoCE v2 (IBA Annex A17.3.3): CRC-32 with the reflected IEEE
// polynomial, exactly as zlib's crc32() computes it (initial value all ones, final
// inversion), over
//   8 bytes of 0xFF (standing for the masked IB LRH),
//   the IPv4 header with TOS, TTL and header checksum set to all ones,
//   the UDP header with its checksum set to all ones,
//   the BTH with byte 4 (FECN, BECN, reserved) set to all ones,
//   the extension headers, the payload and the pad,
// and appended to the packet little-endian (least significant byte first). The masked
// fields are the ones routers may rewrite on the way; everything else is end to end.
// The CRC itself is ISA-L's crc32_gzip_refl (carry-less multiply where the CPU has it).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "rocev2/opcode.h"
#include "stack/bytes.h"

namespace rrdma::rocev2 {

// CRC-32 continuing from `crc` (0 to start), with zlib's crc32() semantics.
std::uint32_t crc32(std::uint32_t crc, ByteSpan bytes);

// Accumulates an ICRC: the masked headers first, then any number of spans (more transport
// headers, payload pieces gathered from memory, the pad).
class IcrcCalculator {
 public:
  static constexpr std::size_t kMinIpv4HeaderLength = 20;
  static constexpr std::size_t kMaxIpv4HeaderLength = 60;
  static constexpr std::size_t kUdpHeaderLength = 8;

  // nullopt unless the IPv4 header is 20..60 bytes, the UDP header 8 and the BTH 12.
  static std::optional<IcrcCalculator> start(ByteSpan ipv4_header, ByteSpan udp_header, ByteSpan bth);
  void add(ByteSpan bytes) { crc_ = crc32(crc_, bytes); }
  std::uint32_t value() const { return crc_; }

 private:
  explicit IcrcCalculator(std::uint32_t crc) : crc_(crc) {}
  std::uint32_t crc_;
};

// The ICRC over `transport` (BTH, extension headers, payload, pad; without the ICRC).
std::optional<std::uint32_t> compute_icrc(ByteSpan ipv4_header, ByteSpan udp_header, ByteSpan transport);

// The 4 bytes the ICRC occupies on the wire (little-endian), and back (`four_bytes` must
// hold at least 4).
std::array<std::uint8_t, kIcrcLength> icrc_bytes(std::uint32_t icrc);
std::uint32_t load_icrc(ByteSpan four_bytes);

// Why a packet's ICRC does not check.
enum class IcrcError : std::uint8_t {
  none,
  truncated,  // the IPv4 header, UDP header, BTH or ICRC does not fit
  mismatch,   // the ICRC received is not the ICRC computed
};

// Checks one IPv4 packet: IPv4 header (its IHL says how long), UDP header, transport packet
// ending with the ICRC. The span must end where the IPv4 total length ends (Ethernet
// padding removed: stack::Ipv4View::bytes() does that); IPv4 and UDP fields other than
// the IHL are not validated here.
IcrcError verify_icrc(ByteSpan ipv4_packet);

// Writes the ICRC as the last 4 bytes of one IPv4 packet laid out as verify_icrc reads it,
// over the bytes as they are (the IPv4 header must be final: its identification, length and
// checksum are covered). False, and nothing written, if the packet is too short for its
// headers, the pad its BTH announces and the ICRC. The sender's last step (encap.h).
bool seal_icrc(MutableByteSpan ipv4_packet);

}  // namespace rrdma::rocev2
