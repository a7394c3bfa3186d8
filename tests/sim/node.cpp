#include "tests/sim/node.h"

#include <utility>

namespace rrdma::sim {

Node::Node(std::string name, Endpoint self, std::uint64_t address_space, std::uint32_t key_salt)
    : name_(std::move(name)), self_(self), memory_(address_space, key_salt), engine_(*this, memory_, memory_) {}

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
  if (!decoded) {
    ++counters_.frames_dropped;
    return;
  }
  engine_.receive(decoded->packet, decoded->source, now);
}

std::vector<rocev2::Completion> Node::take_completions() { return std::exchange(completions_, {}); }
std::vector<rocev2::AsyncEvent> Node::take_async_events() { return std::exchange(events_, {}); }

}  // namespace rrdma::sim
