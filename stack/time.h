// Time in the pure layers is an argument, never read from a clock inside the logic:
// the daemon passes steady_clock::now(), the tests pass whatever instant they like.
#pragma once

#include <chrono>

namespace rrdma {

using Clock = std::chrono::steady_clock;
using Instant = Clock::time_point;
using Duration = Clock::duration;

}  // namespace rrdma
