// The round-trip time of one RC QP, estimated as RFC 6298 does for TCP, and the recovery
// timeout it gives. Go-back-N has one weak spot the IBA's own timer covers slowly: the
// responder NAKs a sequence error once, then drops everything until the missing PSN comes;
// if the resend of that PSN is lost too (1 in 20 at 5% loss), or the last packets of a
// burst are lost with nothing behind them, nothing comes back at all, and the requester
// waits out the local ACK timeout (67 ms at timeout 14, what perftest and rdma_cm ask for)
// for a round trip that takes a fraction of a millisecond. So the requester also resends
// from its oldest unacknowledged PSN after recovery_timeout() of silence: a resend the IBA
// allows at any time (the responder treats duplicates by the rules of ch. 9), that spends
// no retry, and that never moves the local ACK timeout, which alone still decides when a
// silent peer has failed (docs/TRANSPORT.md, "Recovery before the timeout").
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>

#include "stack/time.h"

namespace rrdma::rocev2 {

class RttEstimator {
 public:
  // No recovery timeout below this: a daemon descheduled for a few milliseconds on a loaded
  // machine must not resend a whole window for nothing each time.
  static constexpr Duration kMinRecoveryTimeout = std::chrono::milliseconds(4);
  // A timeout that expired doubles the next one (RFC 6298, 5.5), up to this many times.
  static constexpr std::uint32_t kMaxBackoffs = 6;

  // One measured round trip (a packet sent once, and the ACK that covered it).
  void sample(Duration rtt) {
    if (!srtt_) {
      srtt_ = rtt;
      rttvar_ = rtt / 2;
    } else {
      const Duration error = *srtt_ > rtt ? *srtt_ - rtt : rtt - *srtt_;
      rttvar_ = (3 * rttvar_ + error) / 4;
      srtt_ = (7 * *srtt_ + rtt) / 8;
    }
    backoffs_ = 0;
  }
  // Progress without a sample (an ACK for a resent packet: Karn's rule) ends the backoff.
  void progress() { backoffs_ = 0; }
  void backoff() { backoffs_ = std::min(backoffs_ + 1, kMaxBackoffs); }

  // nullopt until a round trip was measured: until then only the IBA timeout applies.
  std::optional<Duration> recovery_timeout() const {
    if (!srtt_) return std::nullopt;
    const Duration base = std::max(kMinRecoveryTimeout, *srtt_ + 4 * rttvar_);
    return base * (1u << backoffs_);
  }
  std::optional<Duration> smoothed() const { return srtt_; }

 private:
  std::optional<Duration> srtt_;
  Duration rttvar_{};
  std::uint32_t backoffs_ = 0;
};

}  // namespace rrdma::rocev2
