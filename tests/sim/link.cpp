#include "tests/sim/link.h"

#include <utility>

namespace rrdma::sim {

LinkFaults LinkFaults::uniform(std::uint32_t ppm) {
  LinkFaults f;
  f.loss_ppm = ppm;
  f.duplicate_ppm = ppm;
  f.reorder_ppm = ppm;
  f.corrupt_ppm = ppm;
  f.truncate_ppm = ppm / 4;
  f.long_delay_ppm = ppm / 10;
  f.jitter = ppm == 0 ? Duration{0} : std::chrono::microseconds(2);
  return f;
}

void Link::send(Frame frame, Instant now) {
  ++counters_.sent;
  if (cut_from_ && now >= *cut_from_) {
    ++counters_.cut;
    return;
  }
  if (rng_.chance(faults_.loss_ppm)) {
    ++counters_.lost;
    return;
  }
  if (rng_.chance(faults_.duplicate_ppm)) {
    ++counters_.duplicated;
    if (on_duplicate_) on_duplicate_(frame);
    put_in_flight(frame, now);
  }
  put_in_flight(std::move(frame), now);
}

void Link::put_in_flight(Frame frame, Instant now) {
  if (rng_.chance(faults_.corrupt_ppm)) corrupt(frame);
  if (rng_.chance(faults_.truncate_ppm) && !frame.empty()) {
    ++counters_.truncated;
    frame.resize(rng_.below(frame.size()));
  }
  Instant due = now + faults_.delay + random_up_to(faults_.jitter);
  if (rng_.chance(faults_.reorder_ppm)) {
    ++counters_.reordered;
    due += random_up_to(faults_.reorder_hold);
  }
  if (rng_.chance(faults_.long_delay_ppm)) {
    ++counters_.long_delayed;
    due += random_up_to(faults_.long_delay);
  }
  in_flight_.schedule(due, std::move(frame));
}

Duration Link::random_up_to(Duration limit) {
  if (limit <= Duration{0}) return Duration{0};
  return Duration{static_cast<Duration::rep>(rng_.below(static_cast<std::uint64_t>(limit.count()) + 1))};
}

void Link::corrupt(Frame& frame) {
  constexpr std::size_t kMaskedBthByte = kBthOffsetInFrame + 4;  // FECN, BECN, reserved
  if (frame.size() <= kBthOffsetInFrame + 1) return;
  std::size_t at = kBthOffsetInFrame + rng_.below(frame.size() - kBthOffsetInFrame - 1);
  if (at >= kMaskedBthByte) ++at;
  frame[at] ^= static_cast<std::uint8_t>(1u << rng_.below(8));
  ++counters_.corrupted;
}

std::optional<Frame> Link::receive(Instant now) {
  auto frame = in_flight_.pop_due(now);
  if (frame) ++counters_.delivered;
  return frame;
}

}  // namespace rrdma::sim
