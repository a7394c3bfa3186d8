// ARP on the interface (RFC 826): answering requests for our address, learning, asking
// for next hops through the ArpCache, announcing ourselves and noticing conflicts
// (RFC 5227).
#include "stack/interface_impl.h"

namespace rrdma::stack {
namespace {

constexpr std::size_t arp_frame_length = EthernetHeader::length() + ArpPacket::length();
// RFC 5227 section 1.1 DEFEND_INTERVAL: at most one defensive announcement per 10 s.
constexpr Duration defend_interval = std::chrono::seconds(10);

}  // namespace

void Interface::Impl::receive_arp(const EthernetView& frame, Instant now) {
  const auto view = ArpView::check(frame.payload());
  if (!view) return drop(Stat::arp_drop_malformed, frame.bytes());
  const ArpPacket packet = ArpPacket::parse(*view);
  const bool is_request = packet.operation == ArpOperation::request;
  if (!is_request && packet.operation != ArpOperation::reply) {
    return drop(Stat::arp_drop_malformed, frame.bytes());
  }
  // A group address cannot be a host's hardware address.
  if (packet.sender_mac.is_multicast()) return drop(Stat::arp_drop_malformed, frame.bytes());
  count(is_request ? Stat::arp_rx_requests : Stat::arp_rx_replies);
  // Our own frame reflected back (a bridge flooding our broadcast to us): nothing to
  // learn or answer.
  if (packet.sender_mac == config.mac) return;

  if (packet.sender_ip == config.address && packet.sender_mac != config.mac) {
    // Someone else uses our address (RFC 5227 2.4): report it, never learn it, and
    // defend the address (option (b)) with an announcement, at most once per interval.
    count(Stat::arp_conflicts);
    if (observer) observer->arp_conflict(config.address, packet.sender_mac);
    if (!last_defense || now - *last_defense >= defend_interval) {
      last_defense = now;
      announce();
    }
    return;
  }
  const bool for_us = packet.target_ip == config.address;
  // Sender 0.0.0.0 is an RFC 5227 probe: nothing to learn, but it is answered (so the
  // prober sees the address is taken). Off-link senders are not our neighbours.
  if (packet.sender_ip.value != 0 && on_link(packet.sender_ip)) {
    arp.update(packet.sender_ip, packet.sender_mac, now, for_us);
  }
  if (is_request && for_us) {
    send_arp(ArpOperation::reply, packet.sender_mac, packet.sender_mac, packet.sender_ip);
  }
}

void Interface::Impl::send_arp(ArpOperation operation, const MacAddress& ethernet_destination,
                               const MacAddress& target_mac, Ipv4Address target_ip) {
  std::array<std::uint8_t, arp_frame_length> frame{};
  ArpPacket{operation, config.mac, config.address, target_mac, target_ip}.emit(
      MutableByteSpan(frame).subspan(EthernetHeader::length()));
  count(operation == ArpOperation::request ? Stat::arp_tx_requests : Stat::arp_tx_replies);
  transmit_to(ethernet_destination, EtherType::arp, frame);
}

void Interface::Impl::announce() {
  // RFC 5227 2.3 announcement: a broadcast request with our address as both sender and
  // target, target MAC zero; it also refreshes stale caches of our neighbours.
  count(Stat::arp_tx_announcements);
  send_arp(ArpOperation::request, MacAddress::broadcast(), MacAddress{}, config.address);
}

void Interface::Impl::send_arp_request(Ipv4Address target, std::optional<MacAddress> known_mac) {
  send_arp(ArpOperation::request, known_mac.value_or(MacAddress::broadcast()), MacAddress{},
           target);
}

void Interface::Impl::send_pending(Ipv4Address, const MacAddress& mac, PendingPacket packet) {
  transmit_to(mac, EtherType::ipv4, packet);
}

void Interface::Impl::arp_resolved(Ipv4Address target, const MacAddress& mac) {
  if (observer) observer->arp_resolved(target, mac);
}

void Interface::Impl::arp_failed(Ipv4Address target, std::size_t dropped_packets) {
  count(Stat::arp_resolve_failed);
  if (observer) observer->arp_failed(target, dropped_packets);
}

}  // namespace rrdma::stack
