#include "tests/sim/node.h"

#include <sstream>
#include <utility>

#include "rocev2/opcode.h"

namespace rrdma::sim {

Node::Node(std::string name, Endpoint self, std::uint64_t address_space, std::uint32_t key_salt)
    : name_(std::move(name)), self_(self), memory_(address_space, key_salt), engine_(*this, memory_, memory_, &trace_) {}

void TraceRing::add(std::string line) {
  std::ostringstream s;
  s << std::chrono::duration_cast<std::chrono::microseconds>(now_.time_since_epoch()).count() << "us " << line;
  lines_.push_back(s.str());
  if (lines_.size() > capacity_) lines_.pop_front();
}

void TraceRing::on_state_change(rocev2::Qpn qpn, rocev2::QpState from, rocev2::QpState to, std::string_view cause) {
  add("qp " + std::to_string(qpn.value()) + " " + std::string(rocev2::to_string(from)) + " -> " +
      std::string(rocev2::to_string(to)) + ": " + std::string(cause));
}

void TraceRing::on_packet(rocev2::Qpn qpn, const rocev2::Bth& bth, rocev2::PacketDecision decision,
                          std::string_view detail) {
  add("qp " + std::to_string(qpn.value()) + " " + std::string(rocev2::opcode_info(bth.opcode).name) + " psn " +
      std::to_string(bth.psn.value()) + " " + std::string(rocev2::to_string(decision)) + ": " + std::string(detail));
}

void Node::send_packet(const rocev2::OutgoingPacket& out) {
  ++counters_.frames_sent;
  // The simulation has one peer: a packet for any other address would have gone nowhere.
  if (out.dest != peer_.ip) {
    ++counters_.frames_misaddressed;
    return;
  }
  out_->send(encode_frame(out, self_, peer_), now_);
}

void Node::deliver(const Frame& frame, Instant now) {
  now_ = now;
  ++counters_.frames_received;
  auto decoded = decode_frame(frame);
  if (!decoded && accept_bad_frames_) decoded = decode_frame_unchecked(frame);
  if (!decoded) {
    ++counters_.frames_dropped;
    return;
  }
  engine_.receive(decoded->packet, decoded->source, now);
}

void Node::complete(const rocev2::Completion& cqe) {
  if (++completions_made_ == lose_completion_) return;
  completions_.push_back(cqe);
}

std::vector<rocev2::Completion> Node::take_completions() { return std::exchange(completions_, {}); }
std::vector<rocev2::AsyncEvent> Node::take_async_events() { return std::exchange(events_, {}); }

}  // namespace rrdma::sim
