// The AETH syndrome (IBA ch. 9) and the two transport timers (IBA ch. 9: local ACK
// timeout, RNR NAK timer), as pure functions.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>

#include "stack/time.h"

namespace rrdma::rocev2 {

enum class NakCode : std::uint8_t {  // the low 5 bits of a NAK syndrome (IBA ch. 9)
  PsnSequenceError = 0,
  InvalidRequest = 1,
  RemoteAccessError = 2,
  RemoteOperationalError = 3,
  InvalidRdRequest = 4,
};

enum class SyndromeKind : std::uint8_t { Ack, RnrNak, Nak, Reserved };

// Bits 7..5 choose the kind; bit 7 itself is reserved (0) in every valid syndrome.
constexpr SyndromeKind syndrome_kind(std::uint8_t syndrome) {
  switch (syndrome >> 5) {
    case 0b000: return SyndromeKind::Ack;
    case 0b001: return SyndromeKind::RnrNak;
    case 0b011: return SyndromeKind::Nak;
    default: return SyndromeKind::Reserved;
  }
}
constexpr std::uint8_t syndrome_value(std::uint8_t syndrome) { return syndrome & 0x1F; }

// rxe sends credit count 31, "invalid": end-to-end flow control is not used (IBA ch. 9).
inline constexpr std::uint8_t kAckCreditsInvalid = 0x1F;
constexpr std::uint8_t ack_syndrome() { return kAckCreditsInvalid; }
constexpr std::uint8_t rnr_nak_syndrome(std::uint8_t timer_code) {
  return static_cast<std::uint8_t>(0x20 | (timer_code & 0x1F));
}
constexpr std::uint8_t nak_syndrome(NakCode code) {
  return static_cast<std::uint8_t>(0x60 | static_cast<std::uint8_t>(code));
}

static_assert(nak_syndrome(NakCode::RemoteAccessError) == 0x62);
static_assert(syndrome_kind(0x1F) == SyndromeKind::Ack);
static_assert(syndrome_kind(0x2C) == SyndromeKind::RnrNak);
static_assert(syndrome_kind(0x61) == SyndromeKind::Nak);

// RNR NAK timer field → minimum wait, in units of 10 µs (IBA RNR NAK timer table; code 0 is the
// longest, 655.36 ms).
inline constexpr std::array<std::uint32_t, 32> kRnrDelayTensOfMicros{
    65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
    256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152};

constexpr Duration rnr_delay(std::uint8_t timer_code) {
  return std::chrono::microseconds(10 * kRnrDelayTensOfMicros[timer_code & 0x1F]);
}

// Local ACK timeout: 4.096 µs × 2^timeout; 0 disables the timer (IBA ch. 9).
constexpr std::optional<Duration> ack_timeout(std::uint8_t timeout) {
  if (timeout == 0) return std::nullopt;
  const std::uint8_t t = timeout > 31 ? 31 : timeout;
  return std::chrono::nanoseconds(std::int64_t{4096} << t);
}

}  // namespace rrdma::rocev2
