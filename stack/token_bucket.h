// A token bucket with time passed in: `burst` tokens at most, one added every
// `refill_interval`. Used to rate-limit ICMP errors (RFC 1812 4.3.2.8).
#pragma once

#include <cstdint>
#include <optional>

#include "stack/time.h"

namespace rrdma::stack {

class TokenBucket {
 public:
  TokenBucket(std::uint32_t burst, Duration refill_interval);

  // Takes one token if there is one. Starts full at the first call.
  bool try_take(Instant now);

 private:
  void refill(Instant now);

  std::uint32_t burst_;
  Duration refill_interval_;
  std::uint32_t tokens_;
  std::optional<Instant> last_refill_;  // the instant the current partial token started
};

}  // namespace rrdma::stack
