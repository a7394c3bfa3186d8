#include "vnic/capture.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace rrdma::vnic {
namespace {

using namespace std::chrono_literals;

// How long a finished session's summary may wait for room in a slow client's queue.
constexpr auto kSummaryPatience = 2000ms;
constexpr auto kSummaryRetry = 10ms;

std::uint64_t realtime_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(now.tv_nsec);
}

bool send_text(int fd, const std::string& text) {
  return ::send(fd, text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(text.size());
}

}  // namespace

std::vector<std::uint8_t> encode_capture_header(FrameDirection direction, std::uint64_t realtime_ns,
                                                std::size_t frame_length) {
  std::vector<std::uint8_t> header(kCaptureRecordHeader, 0);
  header[0] = kCaptureRecordTag;
  header[1] = static_cast<std::uint8_t>(direction);
  const auto length = static_cast<std::uint32_t>(frame_length);
  std::memcpy(header.data() + 4, &length, sizeof(length));
  std::memcpy(header.data() + 8, &realtime_ns, sizeof(realtime_ns));
  return header;
}

std::optional<CaptureRecord> parse_capture_record(ByteSpan message) {
  if (message.size() < kCaptureRecordHeader || message[0] != kCaptureRecordTag) return std::nullopt;
  if (message[2] != 0 || message[3] != 0) return std::nullopt;
  CaptureRecord record;
  if (message[1] == static_cast<std::uint8_t>(FrameDirection::Received)) {
    record.direction = FrameDirection::Received;
  } else if (message[1] == static_cast<std::uint8_t>(FrameDirection::Sent)) {
    record.direction = FrameDirection::Sent;
  } else {
    return std::nullopt;
  }
  std::uint32_t length = 0;
  std::memcpy(&length, message.data() + 4, sizeof(length));
  std::memcpy(&record.realtime_ns, message.data() + 8, sizeof(record.realtime_ns));
  if (length > kCaptureMaxFrame || length != message.size() - kCaptureRecordHeader) return std::nullopt;
  record.frame = message.subspan(kCaptureRecordHeader, length);
  return record;
}

FrameTotals frame_totals(const std::vector<stack::Counter>& counters) {
  FrameTotals totals;
  for (const stack::Counter& counter : counters) {
    // A frame looped back to our own address (docs/STACK.md) is seen once, as received.
    if (counter.layer == "ipv4" && counter.name == "rx_loopback") totals.received += counter.value;
    if (counter.layer != "ethernet") continue;
    if (counter.name == "rx_frames") totals.received += counter.value;
    if (counter.name == "tx_frames") totals.sent += counter.value;
  }
  return totals;
}

std::vector<std::pair<std::string_view, std::uint64_t>> named(const CaptureCounters& counters) {
  return {{"sessions", counters.sessions},
          {"frames_forwarded", counters.frames_forwarded},
          {"frames_dropped", counters.frames_dropped},
          {"clients_lost", counters.clients_lost}};
}

FrameCapture::FrameCapture(EventLoop& loop, std::function<FrameTotals()> totals)
    : loop_(loop), totals_(std::move(totals)) {
  loop_.add_timer_source([this](Instant now) { return flush_summary(now); });
}

FrameCapture::~FrameCapture() {
  if (session_fd_ >= 0) {
    loop_.unwatch(session_fd_);
    ::close(session_fd_);
  }
  if (closing_fd_ >= 0) ::close(closing_fd_);
}

void FrameCapture::start(int fd, const nlohmann::json& request) {
  (void)request;
  if (session_fd_ >= 0 || closing_fd_ >= 0) {
    send_text(fd, nlohmann::json{{"error", "a capture is already running on this vnic"}}.dump());
    ::close(fd);
    return;
  }
  // Room for a few thousand frames; SO_SNDBUFFORCE (we are root) goes past wmem_max.
  if (::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &kCaptureSendBuffer, sizeof(kCaptureSendBuffer)) != 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &kCaptureSendBuffer, sizeof(kCaptureSendBuffer));
  }
  if (!send_text(fd, nlohmann::json{{"capturing", true}, {"record_header", kCaptureRecordHeader}}.dump())) {
    ::close(fd);
    return;
  }
  ++counters_.sessions;
  session_fd_ = fd;
  at_start_ = totals_();
  session_forwarded_ = session_dropped_ = session_seen_received_ = session_seen_sent_ = 0;
  update_watching();
  loop_.watch(fd, [this](Instant) { on_client_message(); });
}

void FrameCapture::forward(ByteSpan frame, FrameDirection direction) {
  if (hook_active_) hook_(frame, direction);
  if (session_fd_ < 0) return;
  ++(direction == FrameDirection::Received ? session_seen_received_ : session_seen_sent_);
  const auto header = encode_capture_header(direction, realtime_ns(), frame.size());
  iovec parts[2] = {{const_cast<std::uint8_t*>(header.data()), header.size()},
                    {const_cast<std::uint8_t*>(frame.data()), frame.size()}};
  msghdr message{};
  message.msg_iov = parts;
  message.msg_iovlen = 2;
  if (::sendmsg(session_fd_, &message, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0) {
    ++session_forwarded_;
    ++counters_.frames_forwarded;
    return;
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) {
    ++session_dropped_;
    ++counters_.frames_dropped;
    return;
  }
  ++counters_.clients_lost;
  loop_.unwatch(session_fd_);
  ::close(std::exchange(session_fd_, -1));
  update_watching();
}

// Any message ends the capture; so does the end of the connection (no summary then).
void FrameCapture::on_client_message() {
  char byte = 0;
  const ssize_t got = ::recv(session_fd_, &byte, sizeof(byte), MSG_DONTWAIT | MSG_TRUNC);
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
  if (got <= 0) {
    loop_.unwatch(session_fd_);
    ::close(std::exchange(session_fd_, -1));
    update_watching();
    return;
  }
  end_session();
}

void FrameCapture::end_session() {
  const FrameTotals at_end = totals_();
  const nlohmann::json summary = {
      {"end", true},
      {"frames_forwarded", session_forwarded_},
      {"frames_dropped", session_dropped_},
      {"seen_received", session_seen_received_},
      {"seen_sent", session_seen_sent_},
      {"nic_received", at_end.received - at_start_.received},
      {"nic_sent", at_end.sent - at_start_.sent},
  };
  loop_.unwatch(session_fd_);
  closing_fd_ = std::exchange(session_fd_, -1);
  update_watching();
  pending_summary_ = summary.dump();
  closing_since_ = Clock::now();
  flush_summary(closing_since_);
}

std::optional<Instant> FrameCapture::flush_summary(Instant now) {
  if (closing_fd_ < 0) return std::nullopt;
  const bool sent = send_text(closing_fd_, pending_summary_);
  if (!sent && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) &&
      now - closing_since_ < kSummaryPatience) {
    return now + kSummaryRetry;
  }
  // Sent, or given up: the frames and the summary stay readable after our close.
  ::close(std::exchange(closing_fd_, -1));
  return std::nullopt;
}

}  // namespace rrdma::vnic
