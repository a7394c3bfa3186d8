// UDP (RFC 768). The length field covers header and data and must fit in what IPv4
// delivered; the view's payload ends at that length. A checksum of 0 means "not computed"
// (allowed over IPv4; RoCE v2 sends 0), and a computed 0 is sent as 0xffff.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "stack/addresses.h"
#include "stack/bytes.h"
#include "stack/ipv4.h"

namespace rrdma::stack {

enum class UdpError {
  none,
  truncated,   // shorter than the 8-byte header
  bad_length,  // length field < 8 or larger than the IP payload
};

class UdpView {
 public:
  static constexpr std::size_t header_length = 8;

  static UdpError validate(ByteSpan datagram);
  static std::optional<UdpView> check(ByteSpan datagram);

  std::uint16_t source_port() const { return load_be16(bytes_, 0); }
  std::uint16_t destination_port() const { return load_be16(bytes_, 2); }
  std::uint16_t length() const { return load_be16(bytes_, 4); }
  std::uint16_t checksum() const { return load_be16(bytes_, 6); }
  // True when the checksum is 0 (not computed) or verifies over the pseudo-header
  // (RFC 768) built from the IPv4 source and destination.
  bool checksum_valid(Ipv4Address source, Ipv4Address destination) const;
  ByteSpan header() const { return bytes_.first(header_length); }
  ByteSpan payload() const { return bytes_.subspan(header_length); }
  ByteSpan bytes() const { return bytes_; }

 private:
  explicit UdpView(ByteSpan datagram) : bytes_(datagram) {}
  ByteSpan bytes_;  // trimmed to length()
};

// The parsed UDP header. The checksum is not part of the value: emit() writes 0 and
// fill_checksum() computes it once the payload is in place.
struct UdpHeader {
  std::uint16_t source_port = 0;
  std::uint16_t destination_port = 0;
  std::uint16_t payload_length = 0;

  static UdpHeader parse(const UdpView& view);
  static constexpr std::size_t length() { return UdpView::header_length; }
  std::size_t total_length() const { return length() + payload_length; }
  // Writes the 8 header bytes with checksum 0 at the start of `out`.
  void emit(MutableByteSpan out) const;
  // Computes and stores the checksum of a complete datagram (header and payload).
  static void fill_checksum(MutableByteSpan datagram, Ipv4Address source,
                            Ipv4Address destination);

  bool operator==(const UdpHeader&) const = default;
};

// --- Building a datagram in place ----------------------------------------------------

// Writes a UDP payload straight into the packet being built (RoCE: the transport headers,
// then the message bytes), so that nothing is copied twice.
class PayloadWriter {
 public:
  virtual ~PayloadWriter() = default;
  virtual void write(MutableByteSpan payload) = 0;  // exactly the announced length
};

// Completes an outgoing IPv4 packet: `ip_packet` is the whole packet as it will be sent
// (IPv4 header with identification, total length and checksum final; UDP header with
// checksum 0; payload), and the callee writes its last `trailer_length` bytes. If a UDP
// checksum was asked for, it is computed afterwards, over the trailer too.
class PacketFinalizer {
 public:
  virtual ~PacketFinalizer() = default;
  virtual void finalize(MutableByteSpan ip_packet) = 0;
};

// Lays out one IPv4/UDP packet in `ip_packet` (exactly ip.total_length() bytes, with
// ip.payload_length == udp.total_length()), in one pass, in order: the IPv4 header, the UDP
// header with checksum 0, the payload from `payload` (udp.payload_length - trailer_length
// bytes), `trailer_length` zero bytes that `finalizer` (if any) then writes over the
// finished packet, and last, if `compute_checksum`, the UDP checksum over all of it.
// Interface::send_udp builds every datagram with it, from the header values it decides
// (route, identification); a test that needs a packet with header values of its own builds
// it with the same function (rocev2::build_frame), so that both are the same bytes.
void emit_udp_packet(const Ipv4Header& ip, const UdpHeader& udp, PayloadWriter& payload, std::size_t trailer_length,
                     PacketFinalizer* finalizer, bool compute_checksum, MutableByteSpan ip_packet);

}  // namespace rrdma::stack
