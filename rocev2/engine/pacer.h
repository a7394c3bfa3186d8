// The pace of one QP's READ responses (docs/TRANSPORT.md, "Pacing READ responses by time").
// IB gives READ responses no flow control: a requester with 128 READs outstanding gets them
// answered back to back, and a slow receiver (rxe in a TCG guest) drops the burst in its
// TAP's queue. The only sign the responder gets is the requester asking again (a duplicate
// READ). So a QP's responses go unpaced until that happens; then at most `rate` per second
// (a token bucket of kPacerBurst): kPacerFirstRate, halved on each later re-request (at most
// once per kPacerInterval, never below kPacerMinRate), and raised by 1/8 for every
// kPacerInterval without one; above kPacerMaxRate the pacer lets go again.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>

#include "stack/time.h"

namespace rrdma::rocev2 {

inline constexpr std::uint32_t kPacerBurst = 32;           // responses sent back to back at most
inline constexpr std::uint64_t kPacerFirstRate = 200'000;   // responses/s: 200 MB/s at MTU 1024
inline constexpr std::uint64_t kPacerMinRate = 25'000;      // 25 MB/s at MTU 1024
inline constexpr std::uint64_t kPacerMaxRate = 2'000'000;   // beyond this, unpaced again
inline constexpr Duration kPacerInterval = std::chrono::milliseconds(10);

class ResponsePacer {
 public:
  bool active() const { return rate_ != 0; }
  std::uint64_t rate() const { return rate_; }

  // Responses that may leave at `now` (unlimited while not paced).
  std::uint32_t allowance(Instant now) {
    raise_if_quiet(now);
    if (!active()) return std::numeric_limits<std::uint32_t>::max();
    refill(now);
    return static_cast<std::uint32_t>(tokens_);
  }

  void sent(std::uint32_t n) {
    if (active()) tokens_ -= std::min<double>(tokens_, n);
  }

  // The requester asked again for responses already sent. True if that cut the rate.
  bool on_rerequest(Instant now) {
    if (now < next_cut_) return false;
    next_cut_ = now + kPacerInterval;
    if (active()) {
      refill(now);  // what was earned at the old rate
      rate_ = std::max(kPacerMinRate, rate_ / 2);
    } else {
      rate_ = kPacerFirstRate;
      tokens_ = kPacerBurst;  // starting afresh: one burst may go
    }
    refilled_at_ = now;
    quiet_since_ = now;
    return true;
  }

  // When the next response may leave, while the pacer holds them back.
  Instant next_allowed(Instant now) const {
    if (!active() || tokens_ >= 1) return now;
    // Rounded up, and at least one tick: a wait that rounded to nothing would find the token
    // still short of one and ask again at the same instant, forever.
    const double seconds = (1 - tokens_) / static_cast<double>(rate_);
    const Duration wait = std::max(std::chrono::ceil<Duration>(std::chrono::duration<double>(seconds)), Duration(1));
    return std::max(now, refilled_at_ + wait);
  }

 private:
  void refill(Instant now) {
    if (now <= refilled_at_) return;
    const double seconds = std::chrono::duration<double>(now - refilled_at_).count();
    tokens_ = std::min<double>(kPacerBurst, tokens_ + seconds * static_cast<double>(rate_));
    refilled_at_ = now;
  }

  // Every kPacerInterval without a re-request raises the rate by an eighth, however long
  // ago the last call was (at most some 40 raises lead from the floor past kPacerMaxRate).
  void raise_if_quiet(Instant now) {
    while (active() && now >= quiet_since_ + kPacerInterval) {
      refill(quiet_since_ + kPacerInterval);
      rate_ += rate_ / 8;
      quiet_since_ += kPacerInterval;
      if (rate_ > kPacerMaxRate) rate_ = 0;
    }
  }

  std::uint64_t rate_ = 0;  // responses/s; 0: not paced
  double tokens_ = kPacerBurst;
  Instant refilled_at_{};
  Instant next_cut_{};
  Instant quiet_since_{};  // the last cut or raise
};

}  // namespace rrdma::rocev2
