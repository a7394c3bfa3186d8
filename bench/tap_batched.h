// The batched ceiling: the most frames any program gets through two TAPs on a bridge on
// this machine, with what io_uring and the TAP driver offer (bench/tap_ceiling --mode
// batched). Each worker thread owns an io_uring; it keeps `depth` writes of whole frames
// queued on the sending TAP, submitted together in one io_uring_enter, and `reads` reads in
// flight on the receiving TAP (or one multishot read). Only frames read back from the
// receiving TAP count: a TAP drops what its full queue cannot take, and those drops are
// reported from the TAPs' own counters.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/tap_frames.h"

namespace rrdma::bench {

enum class RxBuffers {
  Plain,      // IORING_OP_READ into our memory
  Fixed,      // IORING_OP_READ_FIXED into buffers registered with the ring
  Provided,   // IORING_OP_READ with IOSQE_BUFFER_SELECT from a provided-buffer ring
  Multishot,  // one IORING_OP_READ_MULTISHOT (Linux 6.7+) from the provided-buffer ring
};

struct BatchedConfig {
  std::string tx_name;
  std::string rx_name;
  std::size_t frame_size = 1082;
  double seconds = 3;
  unsigned depth = 128;     // writes submitted per io_uring_enter, per sending queue
  unsigned reads = 128;     // reads in flight per receiving queue (buffers, for multishot)
  unsigned queues = 1;      // TAP queues on each side (more than 1 needs multi_queue TAPs)
  bool split = false;       // a writer thread and a reader thread per queue, not one for both
  bool fixed_files = true;  // the TAP fds in io_uring's registered file table
  bool fixed_tx = true;     // IORING_OP_WRITE_FIXED from registered transmit slots
  RxBuffers rx = RxBuffers::Fixed;
  TapFeatures features;
};

bool kernel_has_multishot_read();
// Runs the configuration and returns its figures as one JSON object.
nlohmann::json batched_bandwidth(const BatchedConfig& config);

}  // namespace rrdma::bench
