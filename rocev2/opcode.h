// The opcode table (the BTH OpCode table of IBA ch. 9, plus the release 1.5 FLUSH /
// ATOMIC_WRITE extensions and the RoCE v2 CNP of Annex A17.9.3): for each of the 256 BTH
// opcodes, its name, which extension headers follow the BTH and in what order, and what the
// packet means. Code asks the table ("does it carry a RETH?") instead of switching on
// opcodes. Built at compile time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "rocev2/types.h"

namespace rrdma::rocev2 {

// Properties of an opcode, as a set of bits.
class OpcodeFlags {
 public:
  enum Bit : std::uint32_t {
    kValid = 1u << 0,
    // Transport service (the high 3 bits of the opcode).
    kRc = 1u << 1, kUc = 1u << 2, kUd = 1u << 3, kCnp = 1u << 4,
    // Headers after the BTH.
    kDeth = 1u << 5, kReth = 1u << 6, kAtomicEth = 1u << 7, kAeth = 1u << 8,
    kAtomicAckEth = 1u << 9, kImm = 1u << 10, kIeth = 1u << 11,
    kPayload = 1u << 12,
    // Direction: a request (requester → responder) or a response (responder → requester).
    kRequest = 1u << 13, kResponse = 1u << 14,
    // Operation.
    kSend = 1u << 15, kWrite = 1u << 16, kReadRequest = 1u << 17, kReadResponse = 1u << 18,
    kAtomic = 1u << 19, kAck = 1u << 20, kAtomicAck = 1u << 21, kFlush = 1u << 22,
    kAtomicWrite = 1u << 23,
    // Place in the message.
    kStart = 1u << 24, kMiddle = 1u << 25, kEnd = 1u << 26,
    // The responder consumes a receive WQE for the message (SEND, WRITE with immediate).
    kConsumesReceive = 1u << 27,
    // FLUSH Extended Transport Header (IBA 1.5, 4 bytes), between the BTH and the RETH.
    kFeth = 1u << 28,
  };
  constexpr OpcodeFlags() = default;
  constexpr OpcodeFlags(std::uint32_t bits) : bits_(bits) {}  // NOLINT: built from Bit sets
  constexpr bool has(Bit b) const { return (bits_ & b) != 0; }
  constexpr bool has_all(std::uint32_t bits) const { return (bits_ & bits) == bits; }
  constexpr std::uint32_t bits() const { return bits_; }

 private:
  std::uint32_t bits_ = 0;
};

struct OpcodeInfo {
  std::string_view name;        // as the IB spec and Wireshark name it, e.g. "RC SEND_FIRST"
  OpcodeFlags flags;
  std::uint8_t header_length;   // BTH and every extension header, in bytes
};

// Sizes of the headers, in bytes (IBA ch. 9).
inline constexpr std::size_t kBthLength = 12;
inline constexpr std::size_t kDethLength = 8;
inline constexpr std::size_t kRethLength = 16;
inline constexpr std::size_t kAtomicEthLength = 28;
inline constexpr std::size_t kAethLength = 4;
inline constexpr std::size_t kAtomicAckEthLength = 8;
inline constexpr std::size_t kImmLength = 4;
inline constexpr std::size_t kIethLength = 4;
inline constexpr std::size_t kFethLength = 4;
inline constexpr std::size_t kIcrcLength = 4;
inline constexpr std::size_t kCnpPayloadLength = 16;

namespace detail {

using F = OpcodeFlags;

constexpr std::uint8_t header_length_of(std::uint32_t f) {
  std::size_t n = kBthLength;
  if (f & F::kDeth) n += kDethLength;
  if (f & F::kFeth) n += kFethLength;
  if (f & F::kReth) n += kRethLength;
  if (f & F::kAtomicEth) n += kAtomicEthLength;
  if (f & F::kAeth) n += kAethLength;
  if (f & F::kAtomicAckEth) n += kAtomicAckEthLength;
  if (f & F::kImm) n += kImmLength;
  if (f & F::kIeth) n += kIethLength;
  return static_cast<std::uint8_t>(n);
}

struct Row {
  std::uint8_t low5;  // operation bits, shared by RC and UC where both have it
  std::string_view name;
  std::uint32_t flags;
  bool in_uc;         // UC has the SEND and RDMA WRITE rows only
};

constexpr std::uint32_t kSendReq = F::kRequest | F::kSend | F::kPayload | F::kConsumesReceive;
constexpr std::uint32_t kWriteReq = F::kRequest | F::kWrite | F::kPayload;
constexpr std::uint32_t kReadResp = F::kResponse | F::kReadResponse | F::kPayload;

// RC and UC operations (the IBA OpCode table). WRITE_LAST_WITH_IMMEDIATE and
// WRITE_ONLY_WITH_IMMEDIATE consume a receive WQE (IBA ch. 9: the immediate data is
// delivered in a completion).
constexpr std::array<Row, 25> kConnectedRows{{
    {0x00, "SEND_FIRST", kSendReq | F::kStart, true},
    {0x01, "SEND_MIDDLE", kSendReq | F::kMiddle, true},
    {0x02, "SEND_LAST", kSendReq | F::kEnd, true},
    {0x03, "SEND_LAST_WITH_IMMEDIATE", kSendReq | F::kEnd | F::kImm, true},
    {0x04, "SEND_ONLY", kSendReq | F::kStart | F::kEnd, true},
    {0x05, "SEND_ONLY_WITH_IMMEDIATE", kSendReq | F::kStart | F::kEnd | F::kImm, true},
    {0x06, "RDMA_WRITE_FIRST", kWriteReq | F::kStart | F::kReth, true},
    {0x07, "RDMA_WRITE_MIDDLE", kWriteReq | F::kMiddle, true},
    {0x08, "RDMA_WRITE_LAST", kWriteReq | F::kEnd, true},
    {0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", kWriteReq | F::kEnd | F::kImm | F::kConsumesReceive, true},
    {0x0A, "RDMA_WRITE_ONLY", kWriteReq | F::kStart | F::kEnd | F::kReth, true},
    {0x0B, "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
     kWriteReq | F::kStart | F::kEnd | F::kReth | F::kImm | F::kConsumesReceive, true},
    {0x0C, "RDMA_READ_REQUEST", F::kRequest | F::kReadRequest | F::kStart | F::kEnd | F::kReth, false},
    {0x0D, "RDMA_READ_RESPONSE_FIRST", kReadResp | F::kStart | F::kAeth, false},
    {0x0E, "RDMA_READ_RESPONSE_MIDDLE", kReadResp | F::kMiddle, false},
    {0x0F, "RDMA_READ_RESPONSE_LAST", kReadResp | F::kEnd | F::kAeth, false},
    {0x10, "RDMA_READ_RESPONSE_ONLY", kReadResp | F::kStart | F::kEnd | F::kAeth, false},
    {0x11, "ACKNOWLEDGE", F::kResponse | F::kAck | F::kStart | F::kEnd | F::kAeth, false},
    {0x12, "ATOMIC_ACKNOWLEDGE",
     F::kResponse | F::kAtomicAck | F::kStart | F::kEnd | F::kAeth | F::kAtomicAckEth, false},
    {0x13, "COMPARE_SWAP", F::kRequest | F::kAtomic | F::kStart | F::kEnd | F::kAtomicEth, false},
    {0x14, "FETCH_ADD", F::kRequest | F::kAtomic | F::kStart | F::kEnd | F::kAtomicEth, false},
    {0x16, "SEND_LAST_WITH_INVALIDATE", kSendReq | F::kEnd | F::kIeth, false},
    {0x17, "SEND_ONLY_WITH_INVALIDATE", kSendReq | F::kStart | F::kEnd | F::kIeth, false},
    // IBA 1.5 Annex A19 (Memory Placement Extensions): FLUSH (FETH then RETH, no payload) and
    // ATOMIC_WRITE (RETH and 8 bytes), RC only; each answered by an empty READ response.
    {0x1C, "FLUSH", F::kRequest | F::kFlush | F::kStart | F::kEnd | F::kFeth | F::kReth, false},
    {0x1D, "ATOMIC_WRITE", F::kRequest | F::kAtomicWrite | F::kStart | F::kEnd | F::kReth | F::kPayload, false},
}};

// The names carry the transport as a prefix so that a trace line reads "RC SEND_FIRST".
// string_view cannot be concatenated at compile time, so the prefixed names are spelled out
// by a small fixed-capacity buffer per table entry.
struct Name {
  std::array<char, 40> text{};
  std::size_t size = 0;
  constexpr void append(std::string_view s) {
    for (char c : s) text[size++] = c;
  }
};

constexpr std::array<std::uint32_t, 256> make_flags() {
  std::array<std::uint32_t, 256> flags{};
  for (const Row& r : kConnectedRows) {
    flags[r.low5] = r.flags | F::kValid | F::kRc;
    if (r.in_uc) flags[0x20 | r.low5] = r.flags | F::kValid | F::kUc;
  }
  // UD: only SEND_ONLY and SEND_ONLY_WITH_IMMEDIATE, each with a DETH (the IBA OpCode table).
  flags[0x64] = kSendReq | F::kStart | F::kEnd | F::kDeth | F::kValid | F::kUd;
  flags[0x65] = kSendReq | F::kStart | F::kEnd | F::kDeth | F::kImm | F::kValid | F::kUd;
  // CNP (Annex A17.9.3, figure 6): BTH and 16 reserved bytes, consumed by congestion control only.
  flags[0x81] = F::kValid | F::kCnp | F::kPayload;
  return flags;
}

constexpr std::array<Name, 256> make_names() {
  std::array<Name, 256> names{};
  for (const Row& r : kConnectedRows) {
    names[r.low5].append("RC ");
    names[r.low5].append(r.name);
    if (r.in_uc) {
      names[0x20 | r.low5].append("UC ");
      names[0x20 | r.low5].append(r.name);
    }
  }
  names[0x64].append("UD SEND_ONLY");
  names[0x65].append("UD SEND_ONLY_WITH_IMMEDIATE");
  names[0x81].append("CNP");
  for (Name& n : names)
    if (n.size == 0) n.append("UNKNOWN");
  return names;
}

inline constexpr std::array<std::uint32_t, 256> kFlags = make_flags();
inline constexpr std::array<Name, 256> kNames = make_names();

}  // namespace detail

constexpr OpcodeInfo opcode_info(Opcode op) {
  const auto i = static_cast<std::uint8_t>(op);
  const detail::Name& n = detail::kNames[i];
  return {std::string_view(n.text.data(), n.size), OpcodeFlags(detail::kFlags[i]),
          detail::header_length_of(detail::kFlags[i])};
}

constexpr bool is_valid(Opcode op) { return opcode_info(op).flags.has(OpcodeFlags::kValid); }

// The table answers what the spec says; these pin a few of its rows.
static_assert(opcode_info(Opcode::RcSendFirst).header_length == 12);
static_assert(opcode_info(Opcode::RcWriteOnlyImm).header_length == 12 + 16 + 4);
static_assert(opcode_info(Opcode::RcAtomicAck).header_length == 12 + 4 + 8);
static_assert(opcode_info(Opcode::RcCompareSwap).header_length == 12 + 28);
static_assert(opcode_info(Opcode::UdSendOnlyImm).header_length == 12 + 8 + 4);
static_assert(opcode_info(Opcode::RcSendOnlyInv).flags.has(OpcodeFlags::kIeth));
static_assert(!opcode_info(Opcode::RcReadResponseMiddle).flags.has(OpcodeFlags::kAeth));
static_assert(opcode_info(Opcode::UcWriteFirst).flags.has(OpcodeFlags::kReth));
static_assert(!is_valid(static_cast<Opcode>(0x15)) && !is_valid(static_cast<Opcode>(0x2C)));
static_assert(!is_valid(static_cast<Opcode>(0x30)));  // UC has no READ request
static_assert(opcode_info(Opcode::RcFlush).header_length == 12 + 4 + 16);
static_assert(opcode_info(Opcode::UdSendOnly).name == "UD SEND_ONLY");

}  // namespace rrdma::rocev2
