// Values (parsed, host-order forms) of the IB transport headers carried by RoCE v2
// (IBA ch. 9; field layout in ../shared/PROTOCOL.md). Views over bytes and
// parse/emit live in wire.h.
#pragma once

#include <cstdint>

#include "rocev2/types.h"

namespace rrdma::rocev2 {

struct Bth {                      // Base Transport Header, 12 bytes
  Opcode opcode{};
  bool solicited = false;         // SE
  bool mig_req = false;           // M: rxe sends 0, hardware 1; accept both
  std::uint8_t pad_count = 0;     // 0..3 bytes of pad before the ICRC
  std::uint8_t transport_version = 0;
  Pkey pkey = kDefaultPkey;
  bool fecn = false;
  bool becn = false;
  Qpn dest_qp{};
  bool ack_req = false;           // A
  Psn psn{};
  bool operator==(const Bth&) const = default;
};

struct Reth {                     // RDMA Extended Transport Header, 16 bytes
  std::uint64_t virtual_address = 0;
  Rkey rkey{};
  std::uint32_t dma_length = 0;
  bool operator==(const Reth&) const = default;
};

struct Aeth {                     // ACK Extended Transport Header, 4 bytes
  std::uint8_t syndrome = 0;
  Msn msn{};
  bool operator==(const Aeth&) const = default;
};

struct AtomicEth {                // Atomic Extended Transport Header, 28 bytes
  std::uint64_t virtual_address = 0;
  Rkey rkey{};
  std::uint64_t swap_add = 0;     // swap data (CmpSwap) or add data (FetchAdd)
  std::uint64_t compare = 0;
  bool operator==(const AtomicEth&) const = default;
};

struct AtomicAckEth {             // Atomic ACK Extended Transport Header, 8 bytes
  std::uint64_t original_data = 0;
  bool operator==(const AtomicAckEth&) const = default;
};

struct Deth {                     // Datagram Extended Transport Header, 8 bytes
  Qkey qkey{};
  Qpn src_qp{};
  bool operator==(const Deth&) const = default;
};

struct ImmDt {                    // Immediate data, 4 bytes, opaque (kept in wire order value)
  std::uint32_t value = 0;
  bool operator==(const ImmDt&) const = default;
};

struct Ieth {                     // Invalidate Extended Transport Header, 4 bytes
  Rkey rkey{};
  bool operator==(const Ieth&) const = default;
};

struct Feth {                     // FLUSH Extended Transport Header (IBA 1.5), 4 bytes, kept whole
  std::uint32_t bits = 0;         // selectivity level and placement type, not interpreted here
  bool operator==(const Feth&) const = default;
};

}  // namespace rrdma::rocev2
