// The rxe captures of tests/data as golden vectors, split at the IPv4/UDP/transport
// boundaries with the stack's views (so that these tests lean on rocev2 code only above UDP).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "stack/bytes.h"
#include "tests/capture_file.h"

namespace rrdma::test {

inline constexpr std::array<const char*, 9> kRxeCaptures{
    "rxe_atomic_bw.pcapng",  "rxe_cas.pcapng",       "rxe_rc_pingpong.pcapng",
    "rxe_read_bw.pcapng",    "rxe_send_bw.pcapng",   "rxe_uc_pingpong.pcapng",
    "rxe_ud_pingpong.pcapng", "rxe_write_bw.pcapng", "rxe_write_loss.pcapng"};

struct RxeFrame {
  std::string capture;
  std::size_t index = 0;  // 0-based; tshark's frame.number is index + 1
  Frame bytes;
};

// Every frame of every rxe capture (read once, kept for the whole test run).
const std::vector<RxeFrame>& all_rxe_frames();

// The layers of a frame, as spans into it. Fails the current test if a layer is malformed.
struct Layers {
  ByteSpan ipv4_packet;  // trimmed to the IPv4 total length
  ByteSpan ipv4_header;
  ByteSpan udp_header;
  ByteSpan udp_payload;  // BTH .. ICRC
};
Layers split_layers(ByteSpan frame);

// The frame with the given tshark frame number.
const Frame& rxe_frame(const std::string& capture, std::size_t tshark_number);

}  // namespace rrdma::test
