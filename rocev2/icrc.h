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
#include "stack/addresses.h"
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

// ---- Receiving through the kernel's UDP socket (rrdma-vnic up --netdev) ----
//
// A UDP socket hands its reader the payload, the addresses and the ports, but never the
// IPv4 header, and the ICRC covers some of what only that header says. The receiver
// rebuilds the header as a RoCE sender writes it: version 4, IHL 5, total length
// 28 + UDP payload, DF set, fragment offset 0, protocol 17, the addresses it was given (TOS,
// TTL and checksum are masked, so they do not matter to the ICRC). The one covered field it
// cannot know is the 16-bit identification: our own netdev peers send 0, Linux rdma_rxe
// sends hashed values nobody can predict (docs/WIRE.md, "Receiving through the kernel's
// UDP: what of the ICRC is verified").
//
// CRC-32 is affine over GF(2), so the ICRC of the packet with the true ID differs from the
// ICRC computed with ID 0 by the CRC of the ID's two bytes alone, carried through the k
// bytes that follow them (a multiplication by x^(8k) modulo the polynomial).
// verify_icrc_hidden_id undoes that multiplication and accepts when what remains is what
// two bytes fed into a zero CRC register can give, which also names the ID. The cost of
// not knowing the ID: of the 2^32 ICRC values, 2^16 now pass, so a random corruption of a
// covered field goes undetected with probability 2^-16 (1 in 65536) instead of 2^-32.
// Which patterns slip through depends on their distance from the ID only: every single-bit
// error is still caught in payloads of up to 26,744 bytes, bursts no longer all are. A
// packet whose ID is 0 checks with one CRC as verify_icrc does; only on a mismatch is the
// ID solved for (a few table look-ups and two GF(2) multiplications; bench/icrc_bench.cpp).
// A sender that leaves DF clear (no RoCE sender we know) or sends IPv4 options fails.

struct HiddenHeaderFields {
  stack::Ipv4Address source, destination;
  std::uint16_t source_port = 0, destination_port = 0;
  // Masked by the ICRC: only written into the rebuilt header (IP_RECVTOS, IP_RECVTTL give
  // them), where UD receivers see them in the GRH.
  std::uint8_t tos = 0, ttl = 64;
};

// The largest UDP payload an IPv4 datagram can carry (its total length is 16 bits).
inline constexpr std::size_t kMaxIpv4UdpPayload = 65535 - 20 - 8;

using Ipv4HeaderBytes = std::array<std::uint8_t, 20>;
using UdpHeaderBytes = std::array<std::uint8_t, 8>;

// The IPv4 header a RoCE sender wrote for this datagram, as above, with the given
// identification and a correct header checksum (libibverbs' ibv_init_ah_from_wc and the
// kernel's ib_get_rdma_header_version check it to tell IPv4 from IPv6 in a UD GRH).
// nullopt if `udp_payload_length` exceeds kMaxIpv4UdpPayload. The one definition of the reconstruction: the ICRC check uses it, and
// the netdev port passes it on as the packet's IPv4 header (PacketSource::ipv4_header).
std::optional<Ipv4HeaderBytes> reconstructed_ipv4_header(const HiddenHeaderFields& fields,
                                                         std::size_t udp_payload_length,
                                                         std::uint16_t identification);
// The UDP header (checksum 0: masked by the ICRC, and the kernel has checked it). Same limit.
std::optional<UdpHeaderBytes> reconstructed_udp_header(const HiddenHeaderFields& fields,
                                                       std::size_t udp_payload_length);

struct HiddenIdIcrc {
  IcrcError error = IcrcError::mismatch;
  // When error is none: the identification the sender must have used (0 on the fast path).
  std::uint16_t identification = 0;
};

// Checks the ICRC at the end of `udp_payload` (one datagram's payload: BTH .. ICRC) for the
// reconstructed headers and every 16-bit identification. `truncated` if the payload cannot
// hold a BTH and an ICRC or is longer than kMaxIpv4UdpPayload (nothing outside it is read);
// `mismatch` if no identification makes the ICRC check; else none and the identification.
// A GRO batch must be split into its datagrams first: each has its own IPv4 header.
HiddenIdIcrc verify_icrc_hidden_id(const HiddenHeaderFields& fields, ByteSpan udp_payload);

}  // namespace rrdma::rocev2
