// One IB transport packet as the engine sees it: the BTH, whichever extension headers
// its opcode carries, and the payload (without pad and ICRC). Produced by the wire
// parser (wire.h) from a verified frame, consumed and produced by the engine.
#pragma once

#include <optional>
#include <span>

#include "rocev2/headers.h"

namespace rrdma::rocev2 {

struct TransportPacket {
  Bth bth;
  std::optional<Deth> deth;
  std::optional<Reth> reth;
  std::optional<AtomicEth> atomic_eth;
  std::optional<Aeth> aeth;
  std::optional<AtomicAckEth> atomic_ack_eth;
  std::optional<ImmDt> imm;
  std::optional<Ieth> ieth;
  std::span<const std::uint8_t> payload;  // borrowed; valid while the frame is
  std::optional<Feth> feth;               // FLUSH only (IBA 1.5); between the BTH and the RETH
};

}  // namespace rrdma::rocev2
