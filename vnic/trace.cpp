#include "vnic/trace.h"

#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>

#include "rocev2/cm/mad.h"
#include "rocev2/gsi.h"
#include "rocev2/opcode.h"
#include "rocev2/types.h"
#include "rocev2/wire.h"
#include "stack/arp.h"
#include "stack/ethernet.h"
#include "stack/icmp.h"
#include "stack/ipv4.h"
#include "stack/udp.h"
#include "vnic/roce_stats.h"

namespace rrdma::vnic {
namespace {

// A MAD in one line: a CM message decoded (describe() includes the CMA header's addresses
// of a REQ or SIDR_REQ), any other class by its header fields.
std::string describe_mad(rocev2::MadSpan mad) {
  const auto header = rocev2::peek_mad_header(mad);
  if (const auto message = rocev2::cm::parse_cm_mad(ByteSpan(mad.data(), mad.size()))) {
    return rocev2::cm::describe(*message);
  }
  char text[128];
  std::snprintf(text, sizeof(text), "MAD base %u class 0x%02x version %u method 0x%02x attribute 0x%04x%s",
                unsigned{header.base_version}, unsigned{header.mgmt_class}, unsigned{header.class_version},
                unsigned{header.method}, unsigned{header.attribute_id},
                header.mgmt_class == 0x07 ? " (a CM MAD that does not parse)" : "");
  return text;
}

constexpr std::size_t kMaxSessions = 4;
constexpr int kTraceSendBuffer = 4 * 1024 * 1024;

constexpr std::string_view kLayerNames[] = {"eth", "arp", "ip", "udp", "roce", "qp", "verbs", "gsi", "cm", "rdma_cm"};
static_assert(std::size(kLayerNames) == static_cast<std::size_t>(TraceLayer::RdmaCm) + 1);
static_assert(kAllTraceLayers == (1u << std::size(kLayerNames)) - 1);

std::uint32_t bit(TraceLayer layer) { return 1u << static_cast<unsigned>(layer); }

std::string format(const char* pattern, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* pattern, ...) {
  char buffer[512];
  va_list args;
  va_start(args, pattern);
  const int n = std::vsnprintf(buffer, sizeof(buffer), pattern, args);
  va_end(args);
  return n < 0 ? std::string() : std::string(buffer, std::min<std::size_t>(static_cast<std::size_t>(n), sizeof(buffer) - 1));
}

// Local wall-clock time with microseconds: what a learner compares with tshark's.
std::string stamp_now() {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  std::tm local{};
  ::localtime_r(&now.tv_sec, &local);
  return format("%02d:%02d:%02d.%06ld", local.tm_hour, local.tm_min, local.tm_sec, now.tv_nsec / 1000);
}

// A line of a layer: its name padded so the fields line up under each other.
std::string layer_line(TraceLayer layer, const std::string& text) {
  return format("  %-5s %s", std::string(to_string(layer)).c_str(), text.c_str());
}
std::string labelled_line(std::string_view label, const std::string& text) {
  return format("  %-5.*s %s", static_cast<int>(label.size()), label.data(), text.c_str());
}

std::string qp_text(std::uint32_t qpn) { return format("0x%06x", qpn); }

std::string ack_text(std::uint8_t syndrome) {
  switch (ack_kind(syndrome)) {
    case AckKind::Ack: return "ACK";
    case AckKind::RnrNak: return format("RNR NAK (timer code %u)", syndrome & 0x1Fu);
    case AckKind::Nak: return "NAK " + nak_code_name(syndrome);
    case AckKind::Reserved: return "reserved syndrome";
  }
  return "?";
}

void describe_roce(TraceEvent& event, ByteSpan udp_payload, FrameDirection direction,
                   std::optional<std::uint32_t> local_qp) {
  rocev2::TransportPacket packet;
  const auto error = rocev2::parse_transport(udp_payload, packet);
  if (error != rocev2::TransportError::none) {
    event.lines.push_back({TraceLayer::Roce, layer_line(TraceLayer::Roce, "not a transport packet: " +
                                                                             std::string(rocev2::to_string(error)))});
    return;
  }
  std::string text = rocev2::describe(packet);
  if (packet.aeth) text += " = " + ack_text(packet.aeth->syndrome);
  event.lines.push_back({TraceLayer::Roce, layer_line(TraceLayer::Roce, text)});
  event.qpn = local_qp ? local_qp
                       : (direction == FrameDirection::Received ? std::optional<std::uint32_t>(packet.bth.dest_qp.value())
                                                                : std::nullopt);
}

void describe_ipv4(TraceEvent& event, ByteSpan bytes, FrameDirection direction, std::optional<std::uint32_t> local_qp) {
  const auto ip = stack::Ipv4View::check(bytes);
  if (!ip) {
    event.lines.push_back({TraceLayer::Ip, layer_line(TraceLayer::Ip, "malformed IPv4 header")});
    return;
  }
  event.lines.push_back({TraceLayer::Ip, layer_line(TraceLayer::Ip,
      format("%s > %s ttl %u id 0x%04x len %u dscp %u ecn %u%s", ip->source().to_string().c_str(),
             ip->destination().to_string().c_str(), unsigned{ip->ttl()}, unsigned{ip->identification()},
             unsigned{ip->total_length()}, unsigned{ip->dscp()}, unsigned{ip->ecn()},
             ip->dont_fragment() ? " DF" : ""))});
  if (ip->protocol() == stack::IpProtocol::icmp) {
    const ByteSpan icmp = ip->payload();
    std::string text = icmp.size() >= 2 ? format("type %u code %u", unsigned{icmp[0]}, unsigned{icmp[1]}) : "truncated";
    if (icmp.size() >= 8 && (icmp[0] == 8 || icmp[0] == 0)) {
      text = format("echo %s id %u seq %u", icmp[0] == 8 ? "request" : "reply", load_be16(icmp, 4), load_be16(icmp, 6));
    }
    event.lines.push_back({TraceLayer::Ip, format("  %-5s %s", "icmp", text.c_str())});
    return;
  }
  if (ip->protocol() != stack::IpProtocol::udp) {
    event.lines.push_back({TraceLayer::Ip, layer_line(TraceLayer::Ip, format("protocol %u", unsigned(ip->protocol())))});
    return;
  }
  const auto udp = stack::UdpView::check(ip->payload());
  if (!udp) {
    event.lines.push_back({TraceLayer::Udp, layer_line(TraceLayer::Udp, "malformed UDP header")});
    return;
  }
  const bool roce = udp->destination_port() == rocev2::kRoceV2Port;
  event.lines.push_back({TraceLayer::Udp, layer_line(TraceLayer::Udp,
      format("%u > %u len %u%s", unsigned{udp->source_port()}, unsigned{udp->destination_port()},
             unsigned{udp->length()}, roce ? " (RoCE v2)" : ""))});
  if (roce) describe_roce(event, udp->payload(), direction, local_qp);
}

}  // namespace

std::optional<TraceLayer> trace_layer_from(std::string_view name) {
  for (std::size_t i = 0; i < std::size(kLayerNames); ++i) {
    if (kLayerNames[i] == name) return static_cast<TraceLayer>(i);
  }
  return std::nullopt;
}

std::string_view to_string(TraceLayer layer) { return kLayerNames[static_cast<std::size_t>(layer)]; }

TraceEvent describe_frame(ByteSpan frame, FrameDirection direction, std::string_view stamp,
                          std::optional<std::uint32_t> local_qp) {
  TraceEvent event;
  event.lines.push_back({TraceLayer::Eth, format("%.*s %s frame %zu bytes", static_cast<int>(stamp.size()), stamp.data(),
                                                 direction == FrameDirection::Received ? "rx" : "tx", frame.size())});
  const auto eth = stack::EthernetView::check(frame);
  if (!eth) {
    event.lines.push_back({TraceLayer::Eth, layer_line(TraceLayer::Eth, "shorter than an Ethernet header")});
    return event;
  }
  const auto type = static_cast<unsigned>(eth->ethertype());
  const char* type_name = type == 0x0800 ? "IPv4" : type == 0x0806 ? "ARP" : type == 0x86DD ? "IPv6" : "other";
  event.lines.push_back({TraceLayer::Eth, layer_line(TraceLayer::Eth,
      format("%s > %s 0x%04x %s", eth->source().to_string().c_str(), eth->destination().to_string().c_str(), type,
             type_name))});
  if (eth->ethertype() == stack::EtherType::arp) {
    const auto arp = stack::ArpView::check(eth->payload());
    std::string text = "malformed ARP";
    if (arp && arp->operation() == stack::ArpOperation::request) {
      text = "who has " + arp->target_ip().to_string() + "? tell " + arp->sender_ip().to_string();
    } else if (arp && arp->operation() == stack::ArpOperation::reply) {
      text = arp->sender_ip().to_string() + " is at " + arp->sender_mac().to_string();
    } else if (arp) {
      text = format("operation %u", unsigned(arp->operation()));
    }
    event.lines.push_back({TraceLayer::Arp, layer_line(TraceLayer::Arp, text)});
  } else if (eth->ethertype() == stack::EtherType::ipv4) {
    describe_ipv4(event, eth->payload(), direction, local_qp);
  }
  return event;
}

std::optional<TraceFilter> parse_trace_filter(const nlohmann::json& request, std::string& error) {
  TraceFilter filter;
  if (const auto qp = request.find("qp"); qp != request.end()) {
    const bool in_range = qp->is_number_unsigned()  ? qp->get<std::uint64_t>() <= 0xFFFFFF
                          : qp->is_number_integer() ? qp->get<std::int64_t>() >= 0 && qp->get<std::int64_t>() <= 0xFFFFFF
                                                    : false;
    if (!in_range) {
      error = "\"qp\" must be a QP number (0 .. 0xffffff)";
      return std::nullopt;
    }
    filter.qpn = static_cast<std::uint32_t>(qp->get<std::int64_t>());
  }
  if (const auto layers = request.find("layers"); layers != request.end()) {
    if (!layers->is_array() || layers->empty()) {
      error = "\"layers\" must be a non-empty array of layer names";
      return std::nullopt;
    }
    filter.layers = 0;
    for (const auto& name : *layers) {
      const auto layer = name.is_string() ? trace_layer_from(name.get<std::string>()) : std::nullopt;
      if (!layer) {
        error = "unknown layer " + name.dump() + " (eth, arp, ip, udp, roce, qp, verbs, gsi, cm, rdma_cm)";
        return std::nullopt;
      }
      filter.layers |= bit(*layer);
    }
  }
  return filter;
}

// The first line goes with whatever passes beneath it: it holds the time.
std::string render(const TraceEvent& event, const TraceFilter& filter) {
  if (event.lines.empty()) return {};
  if (filter.qpn && (!event.qpn || *event.qpn != *filter.qpn)) return {};
  std::string text;
  bool any = false;
  for (std::size_t i = 0; i < event.lines.size(); ++i) {
    const TraceLine& line = event.lines[i];
    const bool passes = (filter.layers & bit(line.layer)) != 0;
    any = any || passes;
    if (i == 0 || passes) text += line.text + "\n";
  }
  return any ? text : std::string();
}

std::vector<std::pair<std::string_view, std::uint64_t>> named(const TraceCounters& c) {
  return {{"sessions", c.sessions},
          {"events_formatted", c.events_formatted},
          {"events_sent", c.events_sent},
          {"events_dropped", c.events_dropped}};
}

Tracer::Tracer(EventLoop& loop, FrameCapture& capture) : loop_(loop), capture_(capture) {
  capture_.set_frame_hook([this](ByteSpan frame, FrameDirection direction) { this->frame(frame, direction); });
  // Events are complete once the loop turns: the lines of one received packet (decision,
  // DMA, completion) all come from inside the one receive call.
  loop_.add_timer_source([this](Instant) -> std::optional<Instant> {
    if (open_) flush();
    return std::nullopt;
  });
}

Tracer::~Tracer() {
  capture_.set_hook_active(false);
  for (const Session& session : sessions_) {
    loop_.unwatch(session.fd);
    ::close(session.fd);
  }
}

void Tracer::start(int fd, const nlohmann::json& request) {
  std::string error;
  const auto filter = parse_trace_filter(request, error);
  if (!filter || sessions_.size() >= kMaxSessions) {
    if (filter) error = "already " + std::to_string(kMaxSessions) + " traces on this vnic";
    const std::string reply = nlohmann::json{{"error", error}}.dump();
    ::send(fd, reply.data(), reply.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    ::close(fd);
    return;
  }
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &kTraceSendBuffer, sizeof(kTraceSendBuffer));
  const std::string reply = nlohmann::json{{"tracing", true}}.dump();
  if (::send(fd, reply.data(), reply.size(), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
    ::close(fd);
    return;
  }
  ++counters_.sessions;
  sessions_.push_back({fd, *filter});
  loop_.watch(fd, [this, fd](Instant) { on_client_message(fd); });
  set_active(true);
}

void Tracer::set_active(bool active) {
  capture_.set_hook_active(active);
  if (!active) {
    open_.reset();
    tx_awaits_frame_ = false;
    pending_tx_qp_.reset();
    last_request_.reset();
    write_cursor_.clear();
  }
}

// Any message ends the trace with a summary; the end of the connection without one.
void Tracer::on_client_message(int fd) {
  char byte = 0;
  const ssize_t got = ::recv(fd, &byte, sizeof(byte), MSG_DONTWAIT | MSG_TRUNC);
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
  if (got > 0) {
    flush();
    const std::string summary = nlohmann::json{{"end", true}}.dump();
    ::send(fd, summary.data(), summary.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  end(fd);
}

void Tracer::end(int fd) {
  const auto it = std::find_if(sessions_.begin(), sessions_.end(), [fd](const Session& s) { return s.fd == fd; });
  if (it == sessions_.end()) return;
  loop_.unwatch(fd);
  ::close(fd);
  sessions_.erase(it);
  if (sessions_.empty()) set_active(false);
}

void Tracer::begin(TraceEvent event, bool received) {
  flush();
  open_ = std::move(event);
  open_is_received_ = received;
  nested_tx_ = false;
}

void Tracer::append(TraceLayer layer, std::string_view label, std::string text, std::optional<std::uint32_t> qpn) {
  if (!open_) {
    TraceEvent event;
    event.lines.push_back({layer, stamp_now() + " " + text});
    event.qpn = qpn;
    begin(std::move(event), false);
    return;
  }
  if (!open_->qpn) open_->qpn = qpn;
  open_->lines.push_back({layer, (nested_tx_ ? "  " : "") + labelled_line(label, text)});
}

void Tracer::flush() {
  if (!open_) return;
  TraceEvent event = std::move(*open_);
  open_.reset();
  nested_tx_ = false;
  send(event);
}

void Tracer::send(const TraceEvent& event) {
  ++counters_.events_formatted;
  std::vector<int> lost;
  for (const Session& session : sessions_) {
    const std::string text = render(event, session.filter);
    if (text.empty()) continue;
    if (::send(session.fd, text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL) >= 0) {
      ++counters_.events_sent;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) {
      ++counters_.events_dropped;
    } else {
      lost.push_back(session.fd);
    }
  }
  for (const int fd : lost) end(fd);
}

// The engine reports a packet it sent after the frame left (emit: send, then observe), so
// a sent frame's event stays open for that line. A frame sent while a received one is
// being handled (its ACK, a READ response) is its answer: nested inside its event.
void Tracer::frame(ByteSpan frame, FrameDirection direction) {
  if (!active()) return;
  if (direction == FrameDirection::Received) {
    begin(describe_frame(frame, direction, stamp_now(), std::nullopt), true);
    return;
  }
  const std::optional<std::uint32_t> local = tx_awaits_frame_ ? pending_tx_qp_ : std::nullopt;
  tx_awaits_frame_ = false;
  const std::string stamp = stamp_now();
  const std::size_t stamp_length = stamp.size();
  TraceEvent event = describe_frame(frame, direction, stamp, local);
  if (open_ && open_is_received_ && local && open_->qpn == local) {
    // Its first line without the time stamp, all of it one step further in.
    const std::string& first = event.lines.front().text;
    open_->lines.push_back({TraceLayer::Eth, "  " + first.substr(std::min(first.size(), stamp_length + 1))});
    for (std::size_t i = 1; i < event.lines.size(); ++i) {
      open_->lines.push_back({event.lines[i].layer, "  " + event.lines[i].text});
    }
    nested_tx_ = true;
    return;
  }
  begin(std::move(event), false);
}

void Tracer::transport(bool sent, const rocev2::TransportPacket& packet, rocev2::Qpn local_qp) {
  if (!active()) return;
  if (sent) {
    pending_tx_qp_ = local_qp.value();
    tx_awaits_frame_ = true;
    return;
  }
  ReceivedRequest request;
  request.qpn = local_qp.value();
  request.psn = packet.bth.psn.value();
  request.opcode = packet.bth.opcode;
  request.reth = packet.reth;
  request.payload = packet.payload.size();
  last_request_ = request;
}

std::string Tracer::dma_line(const rocev2::Bth& bth) {
  if (!last_request_ || last_request_->qpn != bth.dest_qp.value() || last_request_->psn != bth.psn.value()) return {};
  const ReceivedRequest& r = *last_request_;
  const auto flags = rocev2::opcode_info(r.opcode).flags;
  using F = rocev2::OpcodeFlags;
  if (flags.has(F::kWrite)) {
    std::uint64_t& cursor = write_cursor_[r.qpn];
    if (r.reth) cursor = r.reth->virtual_address;
    const std::uint64_t at = cursor;
    cursor += r.payload;
    return format("write %zu bytes at 0x%" PRIx64 "%s", r.payload, at,
                  r.reth ? format(" (rkey 0x%x)", r.reth->rkey.value()).c_str() : "");
  }
  if (flags.has(F::kSend)) return format("write %zu bytes into the receive WQE's buffers", r.payload);
  if (flags.has(F::kReadRequest) && r.reth) {
    return format("read %u bytes at 0x%" PRIx64 " (rkey 0x%x) for the READ response", r.reth->dma_length,
                  r.reth->virtual_address, r.reth->rkey.value());
  }
  if (flags.has(F::kReadResponse) && r.payload != 0) {
    return format("write %zu bytes of READ response into the local buffer", r.payload);
  }
  if (flags.has(F::kAtomic)) return "atomic on 8 bytes of the target";
  return {};
}

void Tracer::decision(rocev2::Qpn qpn, const rocev2::Bth& bth, rocev2::PacketDecision decision,
                      std::string_view detail) {
  if (!active()) return;
  const std::string what = format("%s %s (%.*s) psn %u", qp_text(qpn.value()).c_str(),
                                  std::string(rocev2::to_string(decision)).c_str(), static_cast<int>(detail.size()),
                                  detail.data(), bth.psn.value());
  const bool sent = decision == rocev2::PacketDecision::Sent || decision == rocev2::PacketDecision::Retransmitted;
  if (sent && tx_awaits_frame_) {
    // No frame came: the stack holds the packet until ARP resolves its next hop.
    tx_awaits_frame_ = false;
    note(TraceLayer::Qp, what + ", waiting for ARP", qpn.value());
    return;
  }
  if (!sent) nested_tx_ = false;
  append(TraceLayer::Qp, "qp", what, qpn.value());
  if (decision == rocev2::PacketDecision::Accepted) {
    if (std::string dma = dma_line(bth); !dma.empty()) append(TraceLayer::Qp, "dma", dma, qpn.value());
  }
}

void Tracer::state(rocev2::Qpn qpn, rocev2::QpState from, rocev2::QpState to, std::string_view cause) {
  if (!active()) return;
  flush();
  append(TraceLayer::Qp, "qp",
         format("qp %s state %s -> %s (%.*s)", qp_text(qpn.value()).c_str(), std::string(rocev2::to_string(from)).c_str(),
                std::string(rocev2::to_string(to)).c_str(), static_cast<int>(cause.size()), cause.data()),
         qpn.value());
  flush();
}

void Tracer::completion(const rocev2::Completion& cqe) {
  if (!active()) return;
  nested_tx_ = false;
  append(TraceLayer::Verbs, "verbs",
         format("cqe %s qp %s %s %s len %u wr_id 0x%" PRIx64, cqe.send_queue ? "send" : "recv",
                qp_text(cqe.qpn.value()).c_str(), std::string(rocev2::name(cqe.opcode)).c_str(),
                std::string(rocev2::name(cqe.status)).c_str(), cqe.byte_len, cqe.wr_id),
         cqe.qpn.value());
}

// The MAD's class and attribute as raw numbers: the CM's codec will say what they mean.
void Tracer::gsi(bool sent, const rocev2::TransportPacket& packet, rocev2::GsiDrop drop, bool accepted) {
  if (!active()) return;
  const std::uint32_t qpn = packet.bth.dest_qp.value();
  std::string what;
  if (drop != rocev2::GsiDrop::none) {
    what = "dropped by the GSI endpoint: " + std::string(rocev2::to_string(drop));
  } else {
    what = std::string(sent ? "sent by the GSI endpoint: " : "to the GSI endpoint: ") +
           describe_mad(rocev2::MadSpan(packet.payload.data(), rocev2::kMadLength));
  }
  if (sent && !accepted) {
    tx_awaits_frame_ = false;
    note(TraceLayer::Gsi, what + ", not sent (no route, or too big)", qpn);
    return;
  }
  if (sent && tx_awaits_frame_) {
    // No frame came: the stack holds the packet until ARP resolves its next hop.
    tx_awaits_frame_ = false;
    note(TraceLayer::Gsi, what + ", waiting for ARP", qpn);
    return;
  }
  append(TraceLayer::Gsi, "gsi", what, qpn);
}

void Tracer::note(TraceLayer layer, std::string text, std::optional<std::uint32_t> qpn) {
  if (!active()) return;
  flush();
  append(layer, to_string(layer), std::move(text), qpn);
  flush();
}

}  // namespace rrdma::vnic
