// IPv4 (RFC 791, host requirements of RFC 1122 3.2.1), ICMP (RFC 792, RFC 1122 3.2.2)
// and UDP (RFC 768, RFC 1122 4.1) on the interface: validate and dispatch what arrives,
// build, route and send what leaves.
#include <algorithm>

#include "stack/checksum.h"
#include "stack/icmp.h"
#include "stack/interface_impl.h"
#include "stack/udp.h"

namespace rrdma::stack {
namespace {

constexpr std::size_t headroom = EthernetHeader::length() + Ipv4Header::length();

bool is_multicast(Ipv4Address address) { return (address.value >> 28) == 0xe; }  // 224.0.0.0/4

// A payload given as bytes (UdpSend::payload), copied into place.
class CopiedPayload final : public PayloadWriter {
 public:
  explicit CopiedPayload(ByteSpan bytes) : bytes_(bytes) {}
  void write(MutableByteSpan payload) override { std::copy(bytes_.begin(), bytes_.end(), payload.begin()); }

 private:
  ByteSpan bytes_;
};

// Linux sends ICMP errors with DSCP CS6 (TOS 0xc0), the precedence RFC 1812 4.3.2.5
// asks of ICMP error messages; we do the same.
constexpr std::uint8_t icmp_error_dscp = 48;

Stat ipv4_error_stat(Ipv4Error error) {
  switch (error) {
    case Ipv4Error::truncated: return Stat::ip_drop_truncated;
    case Ipv4Error::bad_version: return Stat::ip_drop_bad_version;
    case Ipv4Error::bad_ihl: return Stat::ip_drop_bad_ihl;
    case Ipv4Error::bad_length:
    case Ipv4Error::none: break;
  }
  return Stat::ip_drop_bad_length;
}

}  // namespace

void Interface::Impl::receive_ipv4(const EthernetView& frame, Instant now, bool looped_back) {
  count(Stat::ip_rx_packets);
  const Ipv4Error error = Ipv4View::validate(frame.payload());
  if (error != Ipv4Error::none) return drop(ipv4_error_stat(error), frame.bytes());
  const Ipv4View ip = *Ipv4View::check(frame.payload());
  if (!ip.header_checksum_valid()) return drop(Stat::ip_drop_bad_checksum, frame.bytes());
  if (ip.total_length() > config.mtu) return drop(Stat::ip_drop_too_big, frame.bytes());
  // No reassembly (RFC 1122 3.3.2 makes it a MUST for general hosts; RoCE v2 sets DF and
  // the vnic has no other IP users).
  if (ip.is_fragment()) return drop(Stat::ip_drop_fragment, frame.bytes());
  // RFC 1122 3.2.1.3: a source is one host, never a broadcast or multicast address (a
  // remote subnet's directed broadcast cannot be told from a host, so it passes).
  if (is_multicast(ip.source()) || is_broadcast(ip.source())) {
    return drop(Stat::ip_drop_bad_source, frame.bytes());
  }
  // Our own address as the source of a frame from the link is a spoof (or our own frame
  // reflected): Linux drops it too unless accept_local is set. Answering it would now send
  // to ourselves through the loopback queue, and it could reach QPs of this vnic that are
  // connected to each other.
  if (ip.source() == config.address && !looped_back) return drop(Stat::ip_drop_bad_source, frame.bytes());
  if (ip.destination() != config.address && !is_broadcast(ip.destination())) {
    return drop(Stat::ip_drop_not_for_us, frame.bytes());
  }
  // TTL is not checked: a host MUST NOT discard a datagram for a TTL below 2 (RFC 1122
  // 3.2.1.7); only routers decrement it.
  switch (ip.protocol()) {
    case IpProtocol::icmp:
      return receive_icmp(frame, ip, now);
    case IpProtocol::udp:
      return receive_udp(frame, ip, now);
  }
  drop(Stat::ip_drop_unknown_protocol, frame.bytes());
}

void Interface::Impl::receive_icmp(const EthernetView& frame, const Ipv4View& ip, Instant now) {
  const auto view = IcmpView::check(ip.payload());
  if (!view) return drop(Stat::icmp_drop_malformed, frame.bytes());
  if (!view->checksum_valid()) return drop(Stat::icmp_drop_bad_checksum, frame.bytes());
  const auto message = IcmpMessage::parse(*view);
  if (!message) return drop(Stat::icmp_drop_unknown_type, frame.bytes());
  switch (message->type) {
    case IcmpType::echo_reply:
      return count(Stat::icmp_rx_echo_replies);
    case IcmpType::destination_unreachable:
      return count(Stat::icmp_rx_unreachable);
    case IcmpType::echo_request:
      break;
  }
  count(Stat::icmp_rx_echo_requests);
  // Echo to a broadcast address may be ignored (RFC 1122 3.2.2.6); Linux ignores it by
  // default (icmp_echo_ignore_broadcasts), and it is a classic amplifier.
  if (ip.destination() != config.address) return drop(Stat::icmp_drop_broadcast_echo, frame.bytes());
  answer_echo(ip, *message, now);
}

void Interface::Impl::answer_echo(const Ipv4View& ip, const IcmpMessage& request, Instant now) {
  // RFC 792: the reply carries the request's identifier, sequence number and data.
  IcmpMessage reply = request;
  reply.type = IcmpType::echo_reply;
  reply.code = 0;
  send_icmp(ip.source(), reply, 0, Stat::icmp_tx_echo_replies, now);
}

void Interface::Impl::receive_udp(const EthernetView& frame, const Ipv4View& ip, Instant now) {
  count(Stat::udp_rx_datagrams);
  const UdpError error = UdpView::validate(ip.payload());
  if (error == UdpError::truncated) return drop(Stat::udp_drop_truncated, frame.bytes());
  if (error == UdpError::bad_length) return drop(Stat::udp_drop_bad_length, frame.bytes());
  const UdpView udp = *UdpView::check(ip.payload());
  if (!udp.checksum_valid(ip.source(), ip.destination())) {
    return drop(Stat::udp_drop_bad_checksum, frame.bytes());
  }
  const auto port = udp_ports.find(udp.destination_port());
  if (port == udp_ports.end()) {
    drop(Stat::udp_drop_no_port, frame.bytes());
    // Never an ICMP error about a broadcast (RFC 1122 3.2.2).
    if (ip.destination() == config.address) send_port_unreachable(ip, now);
    return;
  }
  const Ipv4Header header = Ipv4Header::parse(ip);
  port->second->receive_udp(UdpDatagram{header, ip.header(), udp.header(), frame.source(),
                                        udp.source_port(), udp.destination_port(),
                                        udp.payload()},
                            now);
}

void Interface::Impl::send_port_unreachable(const Ipv4View& ip, Instant now) {
  if (!icmp_errors.try_take(now)) return count(Stat::icmp_port_unreachable_rate_limited);
  // RFC 792: the internet header plus the first 64 bits of the original data. (Linux
  // quotes as much as fits in 576 bytes, RFC 1812 4.3.2.3; 8 bytes are what RFC 1122
  // 3.2.2 requires and all UDP needs: both ports.)
  IcmpMessage message;
  message.type = IcmpType::destination_unreachable;
  message.code = static_cast<std::uint8_t>(UnreachableCode::port);
  message.data = ip.bytes().first(ip.header_length() + std::min<std::size_t>(8, ip.payload().size()));
  send_icmp(ip.source(), message, icmp_error_dscp, Stat::icmp_tx_port_unreachable, now);
}

void Interface::Impl::send_icmp(Ipv4Address destination, const IcmpMessage& message, std::uint8_t dscp,
                                Stat sent, Instant now) {
  Ipv4Header header;
  header.source = config.address;
  header.destination = destination;
  header.protocol = IpProtocol::icmp;
  header.payload_length = static_cast<std::uint16_t>(message.length());
  header.dont_fragment = false;  // as Linux sends ICMP (its echo replies in tests/data/kernel_arp_icmp.pcapng)
  header.dscp = dscp;
  PendingPacket packet = start_ipv4_packet(header);
  message.emit(MutableByteSpan(packet).subspan(headroom));
  if (send_ipv4(destination, std::move(packet), now) != SendResult::unroutable) count(sent);
}

PendingPacket Interface::Impl::start_ipv4_packet(Ipv4Header& header) {
  // RFC 6864: the identification only matters for fragments; a counter is enough.
  header.identification = next_identification++;
  PendingPacket frame(EthernetHeader::length() + header.total_length());
  header.emit(MutableByteSpan(frame).subspan(EthernetHeader::length()));
  return frame;
}

std::optional<Interface::Impl::LinkHop> Interface::Impl::link_hop(Ipv4Address destination, Instant now) {
  const auto hop = next_hop(destination);
  // Our own address has no link hop: send_ipv4() and send_udp() loop it back before this.
  if (!hop || destination == config.address) return std::nullopt;
  if (is_broadcast(destination)) return LinkHop{*hop, MacAddress::broadcast()};
  return LinkHop{*hop, arp.lookup(*hop, now)};
}

SendResult Interface::Impl::send_ipv4(Ipv4Address destination, PendingPacket frame, Instant now) {
  if (destination == config.address) {
    count(Stat::ip_tx_packets);
    loop_back(std::move(frame));
    return SendResult::sent;
  }
  const auto link = link_hop(destination, now);
  if (!link) {
    count(Stat::ip_drop_unroutable);
    return SendResult::unroutable;
  }
  count(Stat::ip_tx_packets);
  if (link->mac) {
    transmit_to(*link->mac, EtherType::ipv4, frame);
    return SendResult::sent;
  }
  arp.enqueue(link->hop, std::move(frame), now);
  return SendResult::queued;
}

void Interface::Impl::build_udp(const UdpSend& request, const Ipv4Header& header, MutableByteSpan frame,
                                PacketFinalizer* finalizer) {
  const UdpHeader udp{request.source_port, request.destination_port,
                      static_cast<std::uint16_t>(header.payload_length - UdpHeader::length())};
  CopiedPayload copied(request.payload);
  emit_udp_packet(header, udp, request.payload_writer ? *request.payload_writer : copied, request.trailer_length,
                  finalizer, request.compute_checksum, frame.subspan(EthernetHeader::length()));
}

// Built straight into the sink's transmit memory when the next hop's MAC is known and the
// sink has room: no allocation and one copy of the payload. Otherwise in a frame of its own
// (which the ARP queue keeps, or which transmit() copies).
SendResult Interface::Impl::send_udp(const UdpSend& request, Instant now,
                                     PacketFinalizer* finalizer) {
  const std::size_t payload_length = request.payload_writer ? request.payload_length : request.payload.size();
  const std::size_t udp_length = UdpHeader::length() + payload_length + request.trailer_length;
  if (Ipv4Header::length() + udp_length > config.mtu) {
    count(Stat::ip_tx_too_big);
    return SendResult::too_big;
  }
  const bool local = request.destination == config.address;
  const auto link = local ? std::nullopt : link_hop(request.destination, now);
  if (!local && !link) {
    count(Stat::ip_drop_unroutable);
    return SendResult::unroutable;
  }
  Ipv4Header header;
  header.source = config.address;
  header.destination = request.destination;
  header.protocol = IpProtocol::udp;
  header.payload_length = static_cast<std::uint16_t>(udp_length);
  header.dont_fragment = request.dont_fragment;
  header.ttl = request.ttl;
  header.dscp = request.dscp;
  header.ecn = request.ecn;
  // RFC 6864: the identification only matters for fragments; a counter is enough.
  header.identification = next_identification++;
  const std::size_t frame_length = EthernetHeader::length() + header.total_length();
  count(Stat::ip_tx_packets);
  count(Stat::udp_tx_datagrams);
  if (!local && link->mac) {
    if (const MutableByteSpan slot = sink.prepare(frame_length); slot.size() >= frame_length) {
      const MutableByteSpan frame = slot.first(frame_length);
      build_udp(request, header, frame, finalizer);
      EthernetHeader{*link->mac, config.mac, EtherType::ipv4}.emit(frame);
      count(Stat::eth_tx_frames);
      count(Stat::eth_tx_bytes, frame.size());
      sink.transmit_prepared(frame);
      return SendResult::sent;
    }
  }
  PendingPacket frame(frame_length);
  build_udp(request, header, MutableByteSpan(frame), finalizer);
  if (local) {
    loop_back(std::move(frame));
    return SendResult::sent;
  }
  if (link->mac) {
    transmit_to(*link->mac, EtherType::ipv4, frame);
    return SendResult::sent;
  }
  arp.enqueue(link->hop, std::move(frame), now);
  return SendResult::queued;
}

// A frame to ourselves, as Linux's loopback device takes one: never on the wire, so no ARP
// and no Ethernet counters; it comes back through the IPv4 input with every check of a
// received packet (header checksum, UDP checksum, RoCE's ICRC), so what a QP connected to
// its own vnic sees is what a remote peer would have sent.
void Interface::Impl::loop_back(PendingPacket frame) {
  if (loopback.size() >= kLoopbackQueueLimit) return count(Stat::ip_tx_loopback_full);
  EthernetHeader{config.mac, config.mac, EtherType::ipv4}.emit(MutableByteSpan(frame));
  count(Stat::ip_tx_loopback);
  if (observer) observer->frame_looped_back(frame);
  loopback.push_back(std::move(frame));
}

std::size_t Interface::Impl::run_loopback(Instant now, const LoopbackObserver& observe) {
  std::deque<PendingPacket> batch;
  batch.swap(loopback);  // what these packets' handling sends to us goes to the next call
  for (const PendingPacket& frame : batch) {
    count(Stat::ip_rx_loopback);
    if (observe) observe(frame);
    if (const auto view = EthernetView::check(frame)) receive_ipv4(*view, now, true);
  }
  return batch.size();
}

}  // namespace rrdma::stack
