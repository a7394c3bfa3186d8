// The interface's core: construction, counters, routing, and Ethernet in and out
// (IEEE 802.3 framing; we are an ordinary host: our MAC and broadcast only).
#include "stack/interface.h"

#include "stack/interface_impl.h"

namespace rrdma::stack {

Interface::Impl::Impl(InterfaceConfig cfg, FrameSink& frame_sink)
    : config(cfg),
      subnet{cfg.address, cfg.prefix_len},
      sink(frame_sink),
      arp(cfg.arp, *this),
      icmp_errors(cfg.icmp_rate_limit.burst, cfg.icmp_rate_limit.refill_interval) {}

void Interface::Impl::drop(Stat stat, ByteSpan frame) {
  count(stat);
  if (observer) observer->frame_dropped(stat_name(stat).layer, stat_name(stat).name, frame);
}

bool Interface::Impl::on_link(Ipv4Address address) const { return subnet.contains(address); }

bool Interface::Impl::is_broadcast(Ipv4Address address) const {
  if (address.value == 0xffffffff) return true;
  // The directed broadcast of our subnet: host part all ones (RFC 919, RFC 922). A /31 or
  // /32 has no broadcast address (RFC 3021).
  if (config.prefix_len >= 31) return false;
  const std::uint32_t host_mask = ~std::uint32_t{0} >> config.prefix_len;
  return on_link(address) && (address.value & host_mask) == host_mask;
}

std::optional<Ipv4Address> Interface::Impl::next_hop(Ipv4Address destination) const {
  if (on_link(destination) || destination.value == 0xffffffff) return destination;
  return config.gateway;
}

void Interface::Impl::receive_frame(ByteSpan bytes, Instant now) {
  count(Stat::eth_rx_frames);
  count(Stat::eth_rx_bytes, bytes.size());
  const auto frame = EthernetView::check(bytes);
  if (!frame) return drop(Stat::eth_drop_short, bytes);
  const MacAddress destination = frame->destination();
  if (destination != config.mac && !destination.is_broadcast()) {
    // Multicast (IPv6 neighbour discovery, mDNS...) is not ours to handle yet.
    return drop(destination.is_multicast() ? Stat::eth_drop_multicast : Stat::eth_drop_not_for_us,
                bytes);
  }
  switch (frame->ethertype()) {
    case EtherType::ipv4:
      return receive_ipv4(*frame, now);
    case EtherType::arp:
      return receive_arp(*frame, now);
  }
  drop(Stat::eth_drop_unknown_ethertype, bytes);
}

void Interface::Impl::transmit(ByteSpan frame) {
  count(Stat::eth_tx_frames);
  count(Stat::eth_tx_bytes, frame.size());
  sink.transmit(frame);
}

void Interface::Impl::transmit_to(const MacAddress& destination, EtherType type,
                                  MutableByteSpan frame) {
  EthernetHeader{destination, config.mac, type}.emit(frame);
  transmit(frame);
}

// --- the public face

Interface::Interface(InterfaceConfig config, FrameSink& sink)
    : impl_(std::make_unique<Impl>(config, sink)) {}

Interface::~Interface() = default;

void Interface::receive_frame(ByteSpan frame, Instant now) { impl_->receive_frame(frame, now); }

std::optional<Instant> Interface::poll(Instant now) {
  impl_->arp.poll(now);
  // The ICMP token bucket refills lazily when used: it needs no timer.
  return impl_->arp.next_deadline();
}

void Interface::announce(Instant) { impl_->announce(); }

void Interface::bind_udp(std::uint16_t port, UdpHandler& handler) {
  impl_->udp_ports[port] = &handler;
}

void Interface::unbind_udp(std::uint16_t port) { impl_->udp_ports.erase(port); }

SendResult Interface::send_udp(const UdpSend& request, Instant now, PacketFinalizer* finalizer) {
  return impl_->send_udp(request, now, finalizer);
}

std::size_t Interface::run_loopback(Instant now, const LoopbackObserver& observe) {
  return impl_->run_loopback(now, observe);
}

Reach Interface::reach(Ipv4Address destination, Instant now) {
  if (destination == impl_->config.address) return Reach::reachable;
  const auto hop = impl_->next_hop(destination);
  if (!hop) return Reach::unroutable;
  return impl_->arp.solicit(*hop, now) ? Reach::reachable : Reach::resolving;
}

bool Interface::loopback_pending() const { return !impl_->loopback.empty(); }

std::size_t Interface::transmit_room() const {
  const std::size_t held = impl_->loopback.size() + kLoopbackUnpacedReserve;
  const std::size_t loopback_room = kLoopbackQueueLimit - std::min(kLoopbackQueueLimit, held);
  return std::min(impl_->sink.transmit_room(), loopback_room);
}

void Interface::set_observer(StackObserver* observer) { impl_->observer = observer; }

const InterfaceConfig& Interface::config() const { return impl_->config; }

std::vector<Counter> Interface::counters() const {
  std::vector<Counter> result;
  result.reserve(stat_names.size());
  for (std::size_t i = 0; i < stat_names.size(); ++i) {
    std::uint64_t value = impl_->stats[i];
    // The cache counts its own overflows: it drops without calling back.
    if (static_cast<Stat>(i) == Stat::arp_queue_overflow) value = impl_->arp.queue_overflows();
    result.push_back({stat_names[i].layer, stat_names[i].name, value});
  }
  return result;
}

std::vector<ArpEntry> Interface::arp_entries(Instant now) const { return impl_->arp.entries(now); }

}  // namespace rrdma::stack
