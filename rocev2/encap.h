// RoCE v2 over UDP/IPv4 (IBA Annex A17.3, packet format): how an IB transport packet travels in an
// Ethernet frame; the pieces that put it there (the same for the daemon and for tests), and
// the whole-frame parser/verifier.
//
//   Ethernet (0x0800) | IPv4 (20 B, DF, TTL 64, TOS = traffic class, protocol 17) |
//   UDP (destination 4791, checksum 0, source port chosen per QP pair) |
//   BTH | extension headers | payload | pad | ICRC (4 B, little-endian)
//
// The Ethernet, IPv4 and UDP layers are the stack's views and values (stack/), written by the
// stack's own code; this file only fixes the values RoCE v2 puts in them and checks them on
// receive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "rocev2/icrc.h"
#include "rocev2/packet.h"
#include "rocev2/wire.h"
#include "stack/addresses.h"
#include "stack/ethernet.h"
#include "stack/ipv4.h"
#include "stack/udp.h"

namespace rrdma::rocev2 {

inline constexpr std::uint8_t kRoceTtl = 64;
// The source port is a flow identifier (Annex A17.3.2.1, A17.9.4); 0xC000-0xFFFF is not
// from IBA but Linux's range for it (IB_ROCE_UDP_ENCAP_VALID_PORT_MIN/MAX, IANA ephemeral).
inline constexpr std::uint16_t kUdpSourcePortMin = 0xC000;
inline constexpr std::size_t kFrameHeadersLength =
    stack::EthernetHeader::length() + stack::Ipv4Header::length() + stack::UdpHeader::length();

// --- The UDP source port -------------------------------------------------------------
// Routers hash the 5-tuple to pick among equal-cost paths (ECMP); RoCE v2 varies the
// source port per flow for that, and keeps it fixed within a QP pair so that a connection's
// packets stay in order on one path. We follow Linux 6.1 rxe, checked against the captures
// (docs/WIRE.md):

// The IPv6 flow label rdma-core/Linux derive from a QP pair when the AH gives none
// (rdma_calc_flow_label in include/rdma/ib_verbs.h): the 20-bit fold of lqpn * rqpn.
// Symmetric, so both ends of an RC/UC connection compute the same label.
constexpr std::uint32_t flow_label_for(Qpn local, Qpn remote) {
  std::uint64_t fl = std::uint64_t{local.value()} * remote.value();
  fl ^= fl >> 20;
  fl ^= fl >> 40;
  return static_cast<std::uint32_t>(fl & 0xF'FFFF);
}

// The 20-bit flow label folded into a port in 0xC000-0xFFFF: the low 14 bits XOR the high
// 6 (rdma_flow_label_to_udp_sport).
constexpr std::uint16_t udp_source_port_for_flow_label(std::uint32_t flow_label) {
  const std::uint32_t low = flow_label & 0x3FFF;
  const std::uint32_t high = (flow_label & 0xF'C000) >> 14;
  return static_cast<std::uint16_t>((low ^ high) | kUdpSourcePortMin);
}

// RC and UC: what rxe sets when the QP is given its address vector (modify to RTR):
// the AH's flow label if non-zero, else the label of the QP pair (rdma_get_udp_sport).
constexpr std::uint16_t udp_source_port_connected(Qpn local, Qpn remote, std::uint32_t ah_flow_label = 0) {
  return udp_source_port_for_flow_label(ah_flow_label != 0 ? ah_flow_label : flow_label_for(local, remote));
}

// UD (and any QP before it has an address vector): rxe picks the port at QP creation as
// 0xC000 + the 14-bit multiplicative hash of the QPN (hash_32(qpn, 14), golden ratio 2^32/phi).
constexpr std::uint16_t udp_source_port_datagram(Qpn local) {
  constexpr std::uint32_t kGoldenRatio32 = 0x61C88647;
  const std::uint32_t hash = (local.value() * kGoldenRatio32) >> (32 - 14);
  return static_cast<std::uint16_t>(kUdpSourcePortMin + (hash & 0x3FFF));
}

// --- The headers below the BTH -------------------------------------------------------

// Everything below the BTH. The length fields of ipv4 and udp are ignored on emit (the
// packet decides them) and set on parse.
struct RoceHeaders {
  stack::EthernetHeader ethernet;
  stack::Ipv4Header ipv4;
  stack::UdpHeader udp;
  bool operator==(const RoceHeaders&) const = default;
};

// The IPv4 TOS byte of a RoCE v2 packet is the GRH traffic class of the address vector it
// follows (the QP's path, or a UD work request's AH), as rxe sends it (rxe_net.c, prepare4:
// av->grh.traffic_class as the TOS): its high six bits the DSCP, its low two the ECN field,
// both as the application set them. We do not react to Congestion Experienced (CNPs are
// counted and ignored), so a traffic class with ECT set is the caller's choice.
struct Ipv4Tos {
  std::uint8_t dscp = 0;
  std::uint8_t ecn = 0;
};
constexpr Ipv4Tos ipv4_tos(std::uint8_t traffic_class) {
  return {static_cast<std::uint8_t>(traffic_class >> 2), static_cast<std::uint8_t>(traffic_class & 0x03)};
}

// The headers RoCE v2 prescribes between two endpoints: DF, TTL 64, UDP/4791, and the TOS
// of `traffic_class` (ipv4_tos). `identification` is the IPv4 ID; with DF set it only needs
// to differ between packets in flight (RFC 6864), rxe (through Linux's IP layer) counts it
// up per packet.
RoceHeaders roce_headers(stack::MacAddress source_mac, stack::MacAddress destination_mac,
                         stack::Ipv4Address source_ip, stack::Ipv4Address destination_ip,
                         std::uint16_t udp_source_port, std::uint16_t identification = 0,
                         std::uint8_t traffic_class = 0);

// --- Building frames: one path -------------------------------------------------------
//
// Every RoCE v2 frame we build is written in one pass, each header once, by three pieces:
//   stack::emit_udp_packet  writes the IPv4 and UDP headers (the stack's own writers), then
//   TransportPayload        writes the transport packet in place as the UDP payload
//                           (write_transport: headers, payload, pad), and then
//   IcrcFinalizer           writes the ICRC, the datagram's trailer, over the finished packet.
// The daemon's RocePort (vnic/roce_port.cpp) hands the last two to Interface::send_udp, which
// decides the header values (route, ARP, IPv4 identification) and the buffer (a transmit
// slot); build_frame hands them to emit_udp_packet with header values of the caller's, for
// tests, the fuzzer and tools. A frame a test builds is therefore the frame the daemon sends
// for the same header values (tests/vnic/roce_port_test.cpp compares them byte for byte).

// A transport packet as the UDP payload of a frame about to be built. Made before the frame
// is started: it takes the packet as it goes on the wire (the BTH pad count set from the
// payload length: the engine leaves it to the wire layer) and checks it, so that a packet
// the wire format refuses (an engine bug) never gets a frame. The stack then calls write()
// once, with length() bytes of room; only when error() is none.
class TransportPayload final : public stack::PayloadWriter {
 public:
  explicit TransportPayload(const TransportPacket& packet);
  EmitError error() const { return error_; }
  // The packet as it is written (pad count included), for a trace.
  const TransportPacket& packet() const { return packet_; }
  // Headers, payload and pad: the UDP payload up to the ICRC, which is the trailer.
  std::size_t length() const { return transport_length(packet_) - kIcrcLength; }
  void write(MutableByteSpan out) override { write_transport(packet_, out); }

 private:
  TransportPacket packet_;
  EmitError error_;
};

// Writes the ICRC (seal_icrc, icrc.h) as the last 4 bytes of the finished IPv4 packet: only
// then are the IPv4 header's identification, length and checksum final, and the ICRC covers
// them. A packet laid out from a TransportPayload always has room for it.
class IcrcFinalizer final : public stack::PacketFinalizer {
 public:
  void finalize(MutableByteSpan ip_packet) override;
};

// The frame length of a packet (pad and ICRC included).
std::size_t frame_length(const TransportPacket& p);

// Builds a whole frame at the start of `out` (frame_length(p) bytes) through the pieces above,
// with the header values of `h`: Ethernet header, then emit_udp_packet (IPv4 header checksum
// computed, UDP checksum 0). p.bth.pad_count is ignored: the pad count follows the payload.
EmitError build_frame(const RoceHeaders& h, const TransportPacket& p, MutableByteSpan out);

// Writes the ICRC again into a whole frame (Ethernet header first, the frame ending with the
// ICRC) whose bytes a test or tool has changed: seal_icrc of its IPv4 packet. False, and
// nothing written, if the frame is too short for its headers, the pad its BTH announces and
// the ICRC.
bool seal_frame(MutableByteSpan frame);

// --- Parsing frames ------------------------------------------------------------------

// Why a frame is not an acceptable RoCE v2 packet, in the order the checks run.
enum class FrameError : std::uint8_t {
  none,
  not_ipv4,            // truncated Ethernet header or EtherType other than IPv4
  bad_ipv4,            // stack::Ipv4View refused it (truncated, version, IHL, total length)
  bad_ipv4_checksum,
  ipv4_fragment,       // RoCE v2 is never fragmented (DF); we do not reassemble
  not_udp,
  bad_udp,             // stack::UdpView refused it (truncated, length)
  not_roce_port,       // UDP destination port other than 4791
  bad_transport,       // parse_transport refused it: see RoceFrameCheck::transport
  bad_icrc,
};
std::string_view to_string(FrameError e);

struct RoceFrame {
  RoceHeaders headers;
  TransportPacket packet;  // payload borrows from the frame
  std::uint32_t icrc = 0;
  // The IPv4 header as received (options included), borrowed from the frame: a UD receive
  // copies it into the GRH area of the receive buffer (see PROTOCOL.md, "UD receive").
  ByteSpan ipv4_header;
};

struct RoceFrameCheck {
  FrameError error = FrameError::none;
  TransportError transport = TransportError::none;  // the reason when error == bad_transport
  bool ok() const { return error == FrameError::none; }
};

// Parses and verifies one Ethernet frame (Ethernet padding allowed; the UDP checksum is
// not checked: RoCE v2 senders put 0 there and the ICRC covers the datagram). On success
// `out` holds every layer; otherwise it is unspecified.
RoceFrameCheck parse_frame(ByteSpan frame, RoceFrame& out);

}  // namespace rrdma::rocev2
