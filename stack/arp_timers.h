// The ARP cache's timers and bounds, part of the interface's configuration.
#pragma once

#include <chrono>
#include <cstddef>

#include "stack/time.h"

namespace rrdma::stack {

struct ArpTimers {
  // How long a reply is trusted. Linux's base_reachable_time is 30 s (randomised to
  // 15-45 s); RFC 1122 2.3.2.1 asks only that stale entries time out.
  Duration reachable = std::chrono::seconds(30);
  // Between two requests for the same address (Linux retrans_time: 1 s).
  Duration retry_interval = std::chrono::seconds(1);
  // Requests sent before giving up (Linux mcast_solicit and ucast_solicit: 3).
  unsigned max_requests = 3;
  // Packets waiting per unresolved address; the oldest is dropped beyond this (Linux
  // keeps about 100 KB per neighbour; a few packets cover the start of a RoCE flow).
  std::size_t max_queued_per_address = 16;
  // Entries in the cache; the least recently used one is evicted beyond this.
  std::size_t max_entries = 256;
};

}  // namespace rrdma::stack
