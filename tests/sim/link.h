// One direction of the simulated wire between two engines. It carries whole Ethernet
// frames (bytes, ICRC included) and mangles them the way a bad network would: loss,
// reordering, duplication, corruption and delay, each drawn from a seeded Rng. A `cut`
// makes the link drop everything sent from some instant on (the peer vanished).
//
// Corruption flips one bit among the bytes the ICRC covers and does not mask (BTH to the
// ICRC itself, BTH byte 4 excepted): a flip elsewhere would be caught by the Ethernet FCS
// or the IPv4 checksum before RoCE ever saw the frame, which is not what we test here.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "stack/time.h"
#include "tests/sim/event_queue.h"
#include "tests/sim/random.h"

namespace rrdma::sim {

using Frame = std::vector<std::uint8_t>;

struct LinkFaults {
  std::uint32_t loss_ppm = 0;       // per million frames
  std::uint32_t duplicate_ppm = 0;
  std::uint32_t reorder_ppm = 0;    // held back by up to reorder_hold, so later frames pass it
  std::uint32_t corrupt_ppm = 0;
  std::uint32_t truncate_ppm = 0;   // cut short at a random length (a lying IP length, a runt)
  Duration delay = std::chrono::microseconds(5);
  Duration jitter{0};               // added uniformly in [0, jitter]; reorders on its own
  Duration reorder_hold = std::chrono::microseconds(50);
  std::uint32_t long_delay_ppm = 0;  // held up to long_delay: a stale copy turns up much later
  Duration long_delay = std::chrono::milliseconds(1);

  // The same rate for every kind of fault, as the sim tests' "loss levels" use it.
  static LinkFaults uniform(std::uint32_t ppm);
};

struct LinkCounters {
  std::uint64_t sent = 0;
  std::uint64_t lost = 0;
  std::uint64_t cut = 0;
  std::uint64_t duplicated = 0;
  std::uint64_t reordered = 0;
  std::uint64_t corrupted = 0;
  std::uint64_t truncated = 0;
  std::uint64_t long_delayed = 0;
  std::uint64_t delivered = 0;
};

// Offset of the BTH in an Ethernet + IPv4 (no options) + UDP frame.
inline constexpr std::size_t kBthOffsetInFrame = 14 + 20 + 8;

class Link {
 public:
  Link(LinkFaults faults, Rng rng) : faults_(faults), rng_(rng) {}

  void send(Frame frame, Instant now);
  // Frames sent at or after `from` vanish.
  void cut(Instant from) { cut_from_ = from; }

  std::optional<Instant> next_delivery() const { return in_flight_.next_due(); }
  // The next frame due at or before `now`, in delivery order.
  std::optional<Frame> receive(Instant now);

  // Told of every frame the link duplicates (UD and UC may then deliver a message twice,
  // legitimately: neither can tell a copy from a new message; the simulation counts them).
  void on_duplicate(std::function<void(const Frame&)> hook) { on_duplicate_ = std::move(hook); }

  const LinkCounters& counters() const { return counters_; }
  const LinkFaults& faults() const { return faults_; }
  void set_faults(LinkFaults faults) { faults_ = faults; }

 private:
  void put_in_flight(Frame frame, Instant now);
  Duration random_up_to(Duration limit);
  void corrupt(Frame& frame);

  LinkFaults faults_;
  Rng rng_;
  std::optional<Instant> cut_from_;
  EventQueue<Frame> in_flight_;
  LinkCounters counters_;
  std::function<void(const Frame&)> on_duplicate_;
};

}  // namespace rrdma::sim
