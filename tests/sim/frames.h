// Whole frames for the simulated link: the engine's outgoing packets are encapsulated as the
// daemon will put them on the TAP (Ethernet, IPv4, UDP, transport headers, payload, pad,
// ICRC), and received frames are parsed and verified the same way, so that a frame the link
// corrupted fails its ICRC and is dropped before the engine sees it.
#pragma once

#include <optional>

#include "rocev2/engine/engine.h"
#include "stack/addresses.h"
#include "tests/sim/link.h"

namespace rrdma::sim {

struct Endpoint {
  stack::MacAddress mac;
  stack::Ipv4Address ip;
};

Frame encode_frame(const rocev2::OutgoingPacket& out, const Endpoint& from, const Endpoint& to);

// A verified frame taken apart; its spans borrow from the frame.
struct DecodedFrame {
  rocev2::TransportPacket packet;
  rocev2::PacketSource source;
};
std::optional<DecodedFrame> decode_frame(const Frame& frame);
// Sabotage only: the transport packet of a frame whatever its ICRC and IP checksum say.
std::optional<DecodedFrame> decode_frame_unchecked(const Frame& frame);

}  // namespace rrdma::sim
