// Simulated time: events ordered by the instant they are due and, among events due at
// the same instant, by the order they were scheduled, so that a run never depends on the
// internals of a heap.
#pragma once

#include <cstdint>
#include <optional>
#include <queue>
#include <utility>
#include <vector>

#include "stack/time.h"

namespace rrdma::sim {

template <typename Event>
class EventQueue {
 public:
  void schedule(Instant due, Event event) { heap_.push(Entry{due, next_sequence_++, std::move(event)}); }

  std::optional<Instant> next_due() const {
    if (heap_.empty()) return std::nullopt;
    return heap_.top().due;
  }

  // The earliest event if it is due at or before `now`.
  std::optional<Event> pop_due(Instant now) {
    if (heap_.empty() || heap_.top().due > now) return std::nullopt;
    Event e = std::move(const_cast<Entry&>(heap_.top()).event);  // moved out just before pop
    heap_.pop();
    return e;
  }

  std::size_t size() const { return heap_.size(); }
  bool empty() const { return heap_.empty(); }

 private:
  struct Entry {
    Instant due;
    std::uint64_t sequence;
    Event event;
    // std::priority_queue keeps the greatest on top: invert to get the earliest.
    bool operator<(const Entry& other) const {
      if (due != other.due) return due > other.due;
      return sequence > other.sequence;
    }
  };
  std::priority_queue<Entry> heap_;
  std::uint64_t next_sequence_ = 0;
};

}  // namespace rrdma::sim
