// `rrdma-vnic capture`: the daemon's side. Every frame the NIC receives from or sends to
// its TAP, copied to one client over its control connection (SOCK_SEQPACKET), one frame
// per message, while a capture runs.
//
// The session: the client sends {"cmd":"capture"}; the control server hands the connection
// over (ControlServer::add_stream_command); the daemon answers {"capturing":...}; then each
// frame travels as one CaptureRecord message; any message from the client (or its closing
// the connection) ends the capture, and the daemon's last message is a JSON summary with
// its own counts for the window (see CaptureSummary), after which it closes its end.
//
// Never blocking the NIC: the queue between the NIC and the client is the connection's
// send buffer (bounded: kCaptureSendBuffer); a frame that does not fit is dropped and
// counted, not waited for. With nobody capturing, on_frame() is one predictable branch.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stack/bytes.h"
#include "stack/interface.h"
#include "stack/time.h"
#include "vnic/event_loop.h"

namespace rrdma::vnic {

enum class FrameDirection : std::uint8_t { Received = 1, Sent = 2 };

// One frame on the wire between daemon and CLI: a 16-byte header, then the frame's bytes.
//   0  u8   kCaptureRecordTag (JSON messages start with '{': never confused)
//   1  u8   FrameDirection
//   2  u16  zero
//   4  u32  the frame's length
//   8  u64  CLOCK_REALTIME in nanoseconds when the daemon saw it
// Host byte order: both ends are on the same host.
inline constexpr std::uint8_t kCaptureRecordTag = 0xCF;
inline constexpr std::size_t kCaptureRecordHeader = 16;
// The largest frame a vnic moves (MTU 9000 + Ethernet header and one VLAN tag).
inline constexpr std::size_t kCaptureMaxFrame = 9000 + 18;
inline constexpr int kCaptureSendBuffer = 8 * 1024 * 1024;

struct CaptureRecord {
  FrameDirection direction = FrameDirection::Received;
  std::uint64_t realtime_ns = 0;
  ByteSpan frame;  // points into the buffer it was parsed from
};

std::vector<std::uint8_t> encode_capture_header(FrameDirection direction, std::uint64_t realtime_ns,
                                                std::size_t frame_length);
// Hostile input (a message of unknown origin): nullopt unless the tag, direction and length
// agree with the message's size.
std::optional<CaptureRecord> parse_capture_record(ByteSpan message);

// The NIC's own frame counts (the stack's ethernet rx_frames / tx_frames), read at the
// start and at the end of a capture.
struct FrameTotals {
  std::uint64_t received = 0;
  std::uint64_t sent = 0;
};

// From the stack's counters (ethernet.rx_frames and ethernet.tx_frames; a frame looped back to our
// own address, ipv4.rx_loopback, is seen once, as received).
FrameTotals frame_totals(const std::vector<stack::Counter>& counters);

struct CaptureCounters {
  std::uint64_t sessions = 0;
  std::uint64_t frames_forwarded = 0;
  std::uint64_t frames_dropped = 0;   // the client's queue was full
  std::uint64_t clients_lost = 0;     // the connection failed mid-capture
};

// For `rrdma-vnic stats` (the "capture" layer).
std::vector<std::pair<std::string_view, std::uint64_t>> named(const CaptureCounters& counters);

class FrameCapture {
 public:
  FrameCapture(EventLoop& loop, std::function<FrameTotals()> totals);
  ~FrameCapture();
  FrameCapture(const FrameCapture&) = delete;
  FrameCapture& operator=(const FrameCapture&) = delete;

  // Takes `fd` (a connection the control server released). One capture at a time: a second
  // client is told so and its connection closed.
  void start(int fd, const nlohmann::json& request);

  // Every frame, both directions. The span is valid only during the call.
  void on_frame(ByteSpan frame, FrameDirection direction) {
    if (watching_) [[unlikely]] forward(frame, direction);
  }

  // The tracer's view of the same frames (vnic/trace.h), while it says it is active.
  using FrameHook = std::function<void(ByteSpan frame, FrameDirection direction)>;
  void set_frame_hook(FrameHook hook) { hook_ = std::move(hook); }
  void set_hook_active(bool active) {
    hook_active_ = active;
    update_watching();
  }

  bool capturing() const { return session_fd_ >= 0; }
  // A capture or the tracer wants frames (on_frame does nothing otherwise).
  bool watching() const { return watching_; }
  const CaptureCounters& counters() const { return counters_; }

 private:
  void forward(ByteSpan frame, FrameDirection direction);
  void on_client_message();
  std::optional<Instant> flush_summary(Instant now);
  void end_session();
  void update_watching() { watching_ = session_fd_ >= 0 || hook_active_; }

  EventLoop& loop_;
  std::function<FrameTotals()> totals_;
  int session_fd_ = -1;
  bool watching_ = false;  // a capture or the tracer wants frames
  bool hook_active_ = false;
  FrameHook hook_;
  // A session that ended but whose summary did not fit the send buffer yet: retried from
  // the loop's timer until kSummaryPatience has passed.
  int closing_fd_ = -1;
  std::string pending_summary_;
  Instant closing_since_{};
  FrameTotals at_start_;
  std::uint64_t session_forwarded_ = 0;
  std::uint64_t session_dropped_ = 0;
  std::uint64_t session_seen_received_ = 0;
  std::uint64_t session_seen_sent_ = 0;
  CaptureCounters counters_;
};

}  // namespace rrdma::vnic
