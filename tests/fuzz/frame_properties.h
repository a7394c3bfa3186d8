// What must hold for any byte string handed to the whole-frame parser, shared by the
// libFuzzer target (fuzz_frame.cpp) and the ctest replay of its findings
// (tests/rocev2/fuzz_regressions_test.cpp):
//  - parse_frame, parse_transport and verify_icrc return (no crash, no read outside the
//    input: the sanitizers see to that);
//  - an accepted frame's payload lies inside the input;
//  - rebuilding an accepted frame from its parsed values (build_frame: the daemon's own frame
//    writers, encap.h) gives a frame that parses to the same values (the bytes may differ
//    only where the parser normalises: reserved bits, IPv4 options, a non-zero UDP checksum,
//    Ethernet padding, pad contents);
//  - the GSI endpoint's check (rocev2/gsi.h) takes from an accepted frame for QP 0 or 1 only
//    a 256-byte MAD, and takes the packet it would send with that MAD itself;
//  - the ICRC check without the IPv4 header (verify_icrc_hidden_id, the netdev port's) returns,
//    refuses payloads shorter than a BTH and an ICRC, and an identification it accepts is
//    one with which the rebuilt IPv4 packet verifies with verify_icrc.
// Returns a description of the first property that fails, or nullptr. gsi_seed_frame() is a
// MAD to QP 1 for the seed corpus: no capture in tests/data has GSI traffic yet.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "rocev2/encap.h"
#include "rocev2/gsi.h"
#include "rocev2/icrc.h"
#include "rocev2/wire.h"
#include "stack/checksum.h"
#include "tests/sample_mad.h"

namespace rrdma::fuzz {

inline bool same_packet(const rocev2::TransportPacket& a, const rocev2::TransportPacket& b) {
  return a.bth == b.bth && a.deth == b.deth && a.reth == b.reth && a.atomic_eth == b.atomic_eth &&
         a.aeth == b.aeth && a.atomic_ack_eth == b.atomic_ack_eth && a.imm == b.imm && a.ieth == b.ieth &&
         a.feth == b.feth && std::equal(a.payload.begin(), a.payload.end(), b.payload.begin(), b.payload.end());
}

inline bool inside(ByteSpan part, ByteSpan whole) {
  return part.empty() || (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

inline const char* check_hidden_id(const rocev2::HiddenHeaderFields& fields, ByteSpan udp_payload) {
  using namespace rocev2;
  const HiddenIdIcrc verdict = verify_icrc_hidden_id(fields, udp_payload);
  if (udp_payload.size() < kBthLength + kIcrcLength && verdict.error != IcrcError::truncated)
    return "hidden_id: a payload too short for a BTH and an ICRC is not refused";
  if (verdict.error != IcrcError::none) return nullptr;
  const auto ip = reconstructed_ipv4_header(fields, udp_payload.size(), verdict.identification);
  const auto udp = reconstructed_udp_header(fields, udp_payload.size());
  if (!ip || !udp) return "hidden_id: verified a payload whose headers cannot be rebuilt";
  std::vector<std::uint8_t> packet(ip->size() + udp->size() + udp_payload.size());
  const auto at_udp = std::copy(ip->begin(), ip->end(), packet.begin());
  std::copy(udp_payload.begin(), udp_payload.end(), std::copy(udp->begin(), udp->end(), at_udp));
  if (verify_icrc(packet) != IcrcError::none) return "hidden_id: the identification found does not verify";
  return nullptr;
}

// The addresses, ports, TOS and TTL from where an Ethernet + IPv4 (IHL 5) + UDP frame keeps
// them, and what follows as the UDP payload: the capture seeds then reach the solve with
// rxe's hashed IDs. Shorter inputs are taken whole as a payload.
inline const char* check_hidden_id_properties(ByteSpan input) {
  constexpr std::size_t kIp = 14, kUdp = kIp + 20, kPayload = kUdp + 8;
  if (input.size() < kPayload) return check_hidden_id({}, input);
  rocev2::HiddenHeaderFields f;
  f.source = stack::Ipv4Address{load_be32(input, kIp + 12)};
  f.destination = stack::Ipv4Address{load_be32(input, kIp + 16)};
  f.source_port = load_be16(input, kUdp);
  f.destination_port = load_be16(input, kUdp + 2);
  f.tos = input[kIp + 1];
  f.ttl = input[kIp + 8];
  return check_hidden_id(f, input.subspan(kPayload));
}

inline const char* check_frame_properties(ByteSpan input) {
  using namespace rocev2;
  if (const char* failed = check_hidden_id_properties(input)) return failed;
  // The layers below on their own, whatever the bytes.
  TransportPacket loose;
  if (parse_transport(input, loose) == TransportError::none && !inside(loose.payload, input))
    return "parse_transport: payload outside the input";
  (void)verify_icrc(input);

  RoceFrame frame;
  if (!parse_frame(input, frame).ok()) return nullptr;
  if (!inside(frame.packet.payload, input)) return "parse_frame: payload outside the input";

  std::vector<std::uint8_t> rebuilt(frame_length(frame.packet));
  if (build_frame(frame.headers, frame.packet, rebuilt) != EmitError::none) return "accepted frame cannot be rebuilt";
  RoceFrame again;
  if (!parse_frame(rebuilt, again).ok()) return "rebuilt frame is refused";
  if (!same_packet(frame.packet, again.packet)) return "rebuilt frame parses to a different packet";
  // Lengths are the packet's business on emit (IPv4 options and bytes after the UDP
  // length are dropped); every other header field must survive.
  RoceHeaders before = frame.headers, after = again.headers;
  before.ipv4.payload_length = after.ipv4.payload_length = 0;
  before.udp.payload_length = after.udp.payload_length = 0;
  if (!(before == after)) return "rebuilt frame parses to different headers";

  if (is_management_qp(frame.packet.bth.dest_qp) && check_gsi_packet(frame.packet) == GsiDrop::none) {
    if (frame.packet.payload.size() != kMadLength) return "gsi: accepted a MAD that is not 256 bytes";
    const MadSpan mad(frame.packet.payload.data(), kMadLength);
    if (check_gsi_packet(gsi_packet(frame.packet.bth.psn, mad)) != GsiDrop::none) return "gsi: refuses its own packet";
  }
  return nullptr;
}

// A CM REQ's MAD header and counting bytes (tests/sample_mad.h), from QP 1 of 10.77.0.3 to
// QP 1 of 10.77.0.2, as the GSI endpoint sends it.
inline std::vector<std::uint8_t> gsi_seed_frame() {
  using namespace rocev2;
  const auto mad = test::sample_mad();
  const TransportPacket packet = gsi_packet(Psn(0), mad);
  std::vector<std::uint8_t> frame(frame_length(packet));
  const RoceHeaders headers =
      roce_headers(stack::MacAddress{{2, 0, 0, 0, 0, 3}}, stack::MacAddress{{2, 0, 0, 0, 0, 2}},
                   stack::Ipv4Address{0x0A4D0003}, stack::Ipv4Address{0x0A4D0002}, kGsiUdpSourcePort, 1);
  if (build_frame(headers, packet, frame) != EmitError::none) frame.clear();
  return frame;
}

// A copy of `input` with the IPv4 header checksum and the ICRC made right for whatever the
// other bytes say (when the IPv4 header and total length leave room for them), so that
// mutations reach the transport parser instead of stopping at a checksum.
inline std::vector<std::uint8_t> with_valid_checksums(ByteSpan input) {
  std::vector<std::uint8_t> f(input.begin(), input.end());
  constexpr std::size_t kIp = 14, kUdp = kIp + 20, kBth = kUdp + 8;
  if (f.size() < kUdp || f[kIp] != 0x45) return f;
  f[kIp + 10] = f[kIp + 11] = 0;
  const std::uint16_t sum = stack::internet_checksum(ByteSpan(f).subspan(kIp, 20));
  store_be16(f, kIp + 10, sum);
  const std::size_t end = kIp + load_be16(f, kIp + 2);
  if (end > f.size() || end < kBth + rocev2::kBthLength + rocev2::kIcrcLength) return f;
  const ByteSpan b(f);
  const auto icrc = rocev2::compute_icrc(b.subspan(kIp, 20), b.subspan(kUdp, 8),
                                         b.subspan(kBth, end - rocev2::kIcrcLength - kBth));
  const auto bytes = rocev2::icrc_bytes(*icrc);
  std::copy(bytes.begin(), bytes.end(), f.begin() + static_cast<std::ptrdiff_t>(end - rocev2::kIcrcLength));
  return f;
}

// Both the input as it is and its checksum-corrected copy.
inline const char* check_frame_and_resealed(ByteSpan input) {
  if (const char* failed = check_frame_properties(input)) return failed;
  const std::vector<std::uint8_t> resealed = with_valid_checksums(input);
  return check_frame_properties(resealed);
}

}  // namespace rrdma::fuzz
