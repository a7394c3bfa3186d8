// `rrdma-vnic trace`: a live, human-readable account of what the NIC does, streamed to
// each watching client over its control connection (one SEQPACKET message per event).
// An event is one line (time, what happened) and an indented line per layer it went
// through, e.g. a received RDMA WRITE:
//   05:40:01.123456 rx frame 1082 bytes
//     eth   52:44:00:00:00:02 > 52:44:00:00:00:01 IPv4
//     ip    10.1.0.11 > 10.1.0.10 ttl 64 id 0x0007 len 1068 ecn 0
//     udp   51966 > 4791 len 1048 (RoCE v2)
//     roce  RC RDMA_WRITE_FIRST qp 0x000011 psn 7 A=0 reth{va 0x7f.. rkey 0x2ff len 4096} payload 1024
//     qp    0x000011 accepted (RC RDMA_WRITE_FIRST)
//     dma   write 1024 bytes at 0x7f.. (rkey 0x2ff)
// A packet for QP 0 or 1 has a `gsi` line instead of the engine's: what the GSI endpoint
// did with it (and the MAD header's class and attribute, as raw numbers).
// Also QP state transitions with their cause, completions, ARP resolutions, drops and
// retransmissions with their reason.
//
// Nothing is formatted while nobody watches: every hook starts with active(), and the
// counters (events_formatted) show it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocev2/engine/ports.h"
#include "rocev2/gsi.h"
#include "rocev2/packet.h"
#include "stack/addresses.h"
#include "stack/bytes.h"
#include "vnic/capture.h"
#include "vnic/event_loop.h"

namespace rrdma::vnic {

// The layers a client may ask for (`--layer`), one bit each.
enum class TraceLayer : std::uint8_t { Eth, Arp, Ip, Udp, Roce, Qp, Verbs, Gsi, Cm, RdmaCm };
inline constexpr std::uint32_t kAllTraceLayers = 0x3FF;
std::optional<TraceLayer> trace_layer_from(std::string_view name);
std::string_view to_string(TraceLayer layer);

struct TraceLine {
  TraceLayer layer;
  std::string text;
};

// One event: its first line and the layers under it. `qpn` is the local QP it concerns.
struct TraceEvent {
  std::vector<TraceLine> lines;
  std::optional<std::uint32_t> qpn;
};

// The layers of one frame as lines (pure, for the tests): Ethernet, then ARP, or IPv4 and
// ICMP / UDP and, on port 4791, the transport headers. Hostile bytes: whatever does not
// parse is said so and decoding stops there. `local_qp` (when the caller knows it) is
// returned for RoCE frames, else the BTH's destination QP of a received one.
TraceEvent describe_frame(ByteSpan frame, FrameDirection direction, std::string_view stamp,
                          std::optional<std::uint32_t> local_qp);

// What a client asked for: {"cmd":"trace","qp":N,"layers":["roce","qp"]}.
struct TraceFilter {
  std::optional<std::uint32_t> qpn;
  std::uint32_t layers = kAllTraceLayers;
};
// nullopt and `error` set when the request is malformed.
std::optional<TraceFilter> parse_trace_filter(const nlohmann::json& request, std::string& error);
// The event's text for this filter, or empty when nothing of it passes.
std::string render(const TraceEvent& event, const TraceFilter& filter);

struct TraceCounters {
  std::uint64_t sessions = 0;
  std::uint64_t events_formatted = 0;
  std::uint64_t events_sent = 0;
  std::uint64_t events_dropped = 0;  // a client's queue was full
};

class Tracer {
 public:
  Tracer(EventLoop& loop, FrameCapture& capture);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  void start(int fd, const nlohmann::json& request);
  bool active() const { return !sessions_.empty(); }
  const TraceCounters& counters() const { return counters_; }

  // The hooks; each does nothing unless active().
  void frame(ByteSpan frame, FrameDirection direction);
  void transport(bool sent, const rocev2::TransportPacket& packet, rocev2::Qpn local_qp);
  void decision(rocev2::Qpn qpn, const rocev2::Bth& bth, rocev2::PacketDecision decision, std::string_view detail);
  void state(rocev2::Qpn qpn, rocev2::QpState from, rocev2::QpState to, std::string_view cause);
  void completion(const rocev2::Completion& cqe);
  // A packet the GSI endpoint received (`drop`: what it did with it) or sent (`accepted` by
  // the link: sent or waiting for ARP).
  void gsi(bool sent, const rocev2::TransportPacket& packet, rocev2::GsiDrop drop, bool accepted);
  void note(TraceLayer layer, std::string text, std::optional<std::uint32_t> qpn = std::nullopt);

 private:
  struct Session {
    int fd;
    TraceFilter filter;
  };
  // What the last received RoCE packet asked for, to say what DMA its acceptance did.
  struct ReceivedRequest {
    std::uint32_t qpn = 0;
    std::uint32_t psn = 0;
    rocev2::Opcode opcode{};
    std::optional<rocev2::Reth> reth;
    std::size_t payload = 0;
  };

  void set_active(bool active);
  void begin(TraceEvent event, bool received);
  void append(TraceLayer layer, std::string_view label, std::string text, std::optional<std::uint32_t> qpn);
  void flush();
  void send(const TraceEvent& event);
  void on_client_message(int fd);
  void end(int fd);
  std::string dma_line(const rocev2::Bth& bth);

  EventLoop& loop_;
  FrameCapture& capture_;
  std::vector<Session> sessions_;
  std::optional<TraceEvent> open_;  // lines still to come (flushed each loop turn)
  bool open_is_received_ = false;
  bool nested_tx_ = false;          // the open event's last lines are a nested sent frame
  bool tx_awaits_frame_ = false;    // RocePort handed a packet to the stack, no frame yet
  std::optional<std::uint32_t> pending_tx_qp_;
  std::optional<ReceivedRequest> last_request_;
  std::map<std::uint32_t, std::uint64_t> write_cursor_;  // QP -> next address of its WRITE
  TraceCounters counters_;
};

std::vector<std::pair<std::string_view, std::uint64_t>> named(const TraceCounters& counters);

}  // namespace rrdma::vnic
