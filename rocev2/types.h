// Distinct types for the numbers of the IB transport, so that a PSN cannot be compared
// with a QPN, nor an R_Key passed where an L_Key is expected (rxe once had a length
// check that compared an 8-bit opcode with masks above bit 8; these would not compile it).
#pragma once

#include <compare>
#include <cstdint>

namespace rrdma::rocev2 {

// A 24-bit number that wraps (IBA ch. 9: PSNs are compared modulo 2^24).
class Psn {
 public:
  static constexpr std::uint32_t kMask = 0xFF'FFFF;
  constexpr Psn() = default;
  constexpr explicit Psn(std::uint32_t v) : v_(v & kMask) {}
  constexpr std::uint32_t value() const { return v_; }

  constexpr Psn operator+(std::uint32_t n) const { return Psn(v_ + n); }
  constexpr Psn operator-(std::uint32_t n) const { return Psn(v_ - n); }
  constexpr Psn& operator+=(std::uint32_t n) { return *this = *this + n; }
  constexpr Psn& operator++() { return *this += 1; }
  // Forward distance from `from` to this PSN, modulo 2^24.
  constexpr std::uint32_t distance_from(Psn from) const { return (v_ - from.v_) & kMask; }
  constexpr bool operator==(const Psn&) const = default;
  // "a before b" iff (a - b) mod 2^24 >= 2^23: a half-window comparison.
  constexpr bool before(Psn other) const { return v_ != other.v_ && distance_from(other) >= (1u << 23); }
  constexpr bool after(Psn other) const { return other.before(*this); }

 private:
  std::uint32_t v_ = 0;
};

// A plain strong wrapper for numbers that are only compared for identity.
template <typename Tag, typename Rep, Rep kMask = static_cast<Rep>(~Rep{0})>
class Id {
 public:
  constexpr Id() = default;
  constexpr explicit Id(Rep v) : v_(static_cast<Rep>(v & kMask)) {}
  constexpr Rep value() const { return v_; }
  constexpr auto operator<=>(const Id&) const = default;

 private:
  Rep v_ = 0;
};

using Qpn = Id<struct QpnTag, std::uint32_t, 0xFF'FFFF>;   // 24-bit queue pair number
using Rkey = Id<struct RkeyTag, std::uint32_t>;
using Lkey = Id<struct LkeyTag, std::uint32_t>;
using Qkey = Id<struct QkeyTag, std::uint32_t>;
using Msn = Id<struct MsnTag, std::uint32_t, 0xFF'FFFF>;   // 24-bit message sequence number
using Pkey = Id<struct PkeyTag, std::uint16_t>;

inline constexpr Pkey kDefaultPkey{0xFFFF};
inline constexpr std::uint16_t kRoceV2Port = 4791;

// The BTH OpCode: high 3 bits are the transport (the IBA OpCode table), low 5 the operation.
enum class Opcode : std::uint8_t {
  RcSendFirst = 0x00, RcSendMiddle = 0x01, RcSendLast = 0x02, RcSendLastImm = 0x03,
  RcSendOnly = 0x04, RcSendOnlyImm = 0x05,
  RcWriteFirst = 0x06, RcWriteMiddle = 0x07, RcWriteLast = 0x08, RcWriteLastImm = 0x09,
  RcWriteOnly = 0x0A, RcWriteOnlyImm = 0x0B,
  RcReadRequest = 0x0C, RcReadResponseFirst = 0x0D, RcReadResponseMiddle = 0x0E,
  RcReadResponseLast = 0x0F, RcReadResponseOnly = 0x10,
  RcAck = 0x11, RcAtomicAck = 0x12, RcCompareSwap = 0x13, RcFetchAdd = 0x14,
  RcSendLastInv = 0x16, RcSendOnlyInv = 0x17,
  RcFlush = 0x1C, RcAtomicWrite = 0x1D,
  UcSendFirst = 0x20, UcSendMiddle = 0x21, UcSendLast = 0x22, UcSendLastImm = 0x23,
  UcSendOnly = 0x24, UcSendOnlyImm = 0x25,
  UcWriteFirst = 0x26, UcWriteMiddle = 0x27, UcWriteLast = 0x28, UcWriteLastImm = 0x29,
  UcWriteOnly = 0x2A, UcWriteOnlyImm = 0x2B,
  UdSendOnly = 0x64, UdSendOnlyImm = 0x65,
  Cnp = 0x81,
};

}  // namespace rrdma::rocev2
