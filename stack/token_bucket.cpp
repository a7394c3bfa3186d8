#include "stack/token_bucket.h"

#include <algorithm>

namespace rrdma::stack {

TokenBucket::TokenBucket(std::uint32_t burst, Duration refill_interval)
    : burst_(burst), refill_interval_(refill_interval), tokens_(burst) {}

void TokenBucket::refill(Instant now) {
  if (!last_refill_) {
    last_refill_ = now;
    return;
  }
  // Time going backwards (a caller's bug) earns nothing, and moves no anchor.
  if (now < *last_refill_) return;
  if (refill_interval_ <= Duration::zero()) {
    tokens_ = burst_;
    return;
  }
  const auto earned = (now - *last_refill_) / refill_interval_;
  if (tokens_ + static_cast<std::uint64_t>(earned) >= burst_) {
    tokens_ = burst_;
    last_refill_ = now;  // a full bucket does not bank time
  } else {
    tokens_ += static_cast<std::uint32_t>(earned);
    *last_refill_ += earned * refill_interval_;  // keep the partial token's progress
  }
}

bool TokenBucket::try_take(Instant now) {
  refill(now);
  if (tokens_ == 0) return false;
  --tokens_;
  return true;
}

}  // namespace rrdma::stack
