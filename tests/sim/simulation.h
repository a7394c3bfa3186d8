// The deterministic simulation: two engines (nodes A and B) joined by two lossy links,
// driven in simulated time by one event loop, running a random mix of RC, UC and UD
// operations over many QP pairs and checking every outcome against a model:
// - RC: every work request completes exactly once, in order, successfully; SEND data lands
//   in the receive buffers, WRITE data in the target region, READ data in the local
//   buffers, atomics return what a model of the remote 8-byte words says and leave those
//   words as the model says; receives complete exactly once, in order;
// - UC / UD: messages may be lost, never corrupted, reordered nor delivered twice;
// - a peer that vanishes (both links cut) ends each RC QP with outstanding work in
//   retry-exceeded, the QP in ERR and the rest flushed, within bounded simulated time.
// Everything random comes from one seed; the same seed replays the same run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tests/sim/link.h"

namespace rrdma::sim {

// Deliberate faults in the harness itself, so that a test can show the checks do fail
// when something goes wrong (a check that cannot fail proves nothing).
enum class Sabotage : std::uint8_t {
  None,
  FlipDmaWrite,     // one bit of the 50th DMA write on each node lands flipped
  AcceptBadIcrc,    // frames that fail the frame checks reach the engine anyway, if they parse
  LoseCompletion,   // the 30th completion on each node vanishes
};

struct SimConfig {
  std::uint64_t seed = 1;
  LinkFaults faults;
  int rc_pairs = 4;
  int uc_pairs = 1;
  int ud_pairs = 1;
  int ops_per_pair = 40;
  // Half the RC and UC pairs carry traffic both ways over the same two QPs.
  bool both_ways = true;
  // RC QPs may end in retry-exceeded (very lossy links: 8 timeouts in a row do happen);
  // the error path is then checked instead of the success path.
  bool allow_retry_exceeded = false;
  // The peer vanishes: both links drop everything from this long after the start.
  std::optional<Duration> cut_after;
  // Local ACK timeout 4.096 us * 2^t; by default each QP pair draws t in 6..9 (262 us to
  // 2.1 ms), against link delays of 5 us to 1 ms: spurious retransmissions happen.
  std::optional<std::uint8_t> ack_timeout;
  std::uint8_t retry_cnt = 7;
  std::uint8_t rnr_retry = 7;        // 7: forever
  // The responders stop posting receives this long after the start (a receiver that
  // stalls): with rnr_retry < 7, RC QPs then end in RNR-retry-exceeded.
  std::optional<Duration> stop_receives_after;
  Duration time_limit = std::chrono::seconds(20);   // simulated
  std::uint64_t step_limit = 5'000'000;
  // One RC READ/WRITE/atomic in this many (0: none) carries an R_Key that names no region.
  std::uint32_t bad_rkey_one_in = 0;
  Sabotage sabotage = Sabotage::None;
  // The daemon's ACK coalescing (Engine::hold_acks): both engines hold ACKs and release
  // them after each batch of frames delivered at one instant.
  bool hold_acks = false;
};

struct SimReport {
  std::uint64_t seed = 0;
  std::vector<std::string> failures;   // empty when every check held
  std::uint64_t steps = 0;
  Duration simulated{0};
  std::uint64_t frames = 0;
  std::uint64_t frames_dropped_bad = 0;   // failed frame / ICRC checks at a receiver
  std::uint64_t ops_completed = 0;
  std::uint64_t retransmits = 0;
  std::uint64_t rc_flows = 0;             // one per direction of traffic over an RC QP pair
  std::uint64_t rc_qps_failed = 0;        // ended in an error (checked error path)
  std::uint64_t rc_qps_rnr_failed = 0;    // of which RNR retry-exceeded
  std::uint64_t rc_qps_access_failed = 0; // of which remote access error (a bad R_Key)
  std::uint64_t uc_ud_received = 0;
  std::uint64_t uc_ud_sent = 0;
  bool ok() const { return failures.empty(); }
  std::string summary() const;
};

SimReport run_simulation(const SimConfig& config);

}  // namespace rrdma::sim
