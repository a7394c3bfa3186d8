// One simulated host: a transport engine, its registered memory, and the host side of
// the engine (EngineHost) that turns outgoing packets into whole frames on a Link and
// received frames back into verified transport packets, as the daemon will.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "rocev2/engine/engine.h"
#include "tests/sim/frames.h"
#include "tests/sim/link.h"
#include "tests/sim/memory.h"

namespace rrdma::sim {

struct NodeCounters {
  std::uint64_t frames_sent = 0;
  std::uint64_t frames_received = 0;
  std::uint64_t frames_dropped = 0;   // failed the frame checks or the ICRC, as the daemon drops them
  std::uint64_t frames_misaddressed = 0;
};

// Keeps the engine's last decisions, to print with a failing seed.
class TraceRing final : public rocev2::EngineObserver {
 public:
  explicit TraceRing(std::size_t capacity) : capacity_(capacity) {}
  void set_now(Instant now) { now_ = now; }
  void on_state_change(rocev2::Qpn qpn, rocev2::QpState from, rocev2::QpState to, std::string_view cause) override;
  void on_packet(rocev2::Qpn qpn, const rocev2::Bth& bth, rocev2::PacketDecision decision,
                 std::string_view detail) override;
  const std::deque<std::string>& lines() const { return lines_; }

 private:
  void add(std::string line);
  std::size_t capacity_;
  Instant now_{};
  std::deque<std::string> lines_;
};

class Node final : public rocev2::EngineHost {
 public:
  Node(std::string name, Endpoint self, std::uint64_t address_space, std::uint32_t key_salt);
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  void connect(Link& outgoing, Endpoint peer) {
    out_ = &outgoing;
    peer_ = peer;
  }
  // Every engine call is made at some instant; the host remembers it to time-stamp frames.
  void set_now(Instant now) {
    now_ = now;
    trace_.set_now(now);
  }
  void deliver(const Frame& frame, Instant now);
  // Sabotage for the tests of the checks (simulation.h).
  void accept_bad_frames() { accept_bad_frames_ = true; }
  void lose_completion(std::uint64_t n) { lose_completion_ = n; }

  rocev2::Engine& engine() { return engine_; }
  SimMemory& memory() { return memory_; }
  const Endpoint& self() const { return self_; }
  const std::string& name() const { return name_; }
  const NodeCounters& counters() const { return counters_; }
  const std::deque<std::string>& trace() const { return trace_.lines(); }

  // Completions and async events since the last call, in the order the engine made them.
  std::vector<rocev2::Completion> take_completions();
  std::vector<rocev2::AsyncEvent> take_async_events();

  // EngineHost
  void send_packet(const rocev2::OutgoingPacket& out) override;
  void complete(const rocev2::Completion& cqe) override;
  void async_event(const rocev2::AsyncEvent& event) override { events_.push_back(event); }

 private:
  std::string name_;
  Endpoint self_;
  Endpoint peer_{};
  Link* out_ = nullptr;
  Instant now_{};
  TraceRing trace_{5000};
  SimMemory memory_;
  rocev2::Engine engine_;
  std::vector<rocev2::Completion> completions_;
  std::vector<rocev2::AsyncEvent> events_;
  NodeCounters counters_;
  bool accept_bad_frames_ = false;
  std::uint64_t completions_made_ = 0;
  std::uint64_t lose_completion_ = 0;
};

}  // namespace rrdma::sim
