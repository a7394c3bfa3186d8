#include "vnic/ports/netdev_port.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "rocev2/encap.h"
#include "rocev2/icrc.h"
#include "rocev2/types.h"

namespace rrdma::vnic {
namespace {

// As large as the kernel lets this user have (SO_RCVBUFFORCE needs CAP_NET_ADMIN; an
// ordinary user gets net.core.rmem_max): a READ response burst arrives all at once.
constexpr int kSocketBufferBytes = 32 << 20;

void set_option(int fd, int level, int name, int value, const char* what) {
  if (::setsockopt(fd, level, name, &value, sizeof(value)) != 0) {
    throw std::system_error(errno, std::generic_category(), what);
  }
}

void set_buffer(int fd, int force, int plain) {
  if (::setsockopt(fd, SOL_SOCKET, force, &kSocketBufferBytes, sizeof(kSocketBufferBytes)) == 0) return;
  ::setsockopt(fd, SOL_SOCKET, plain, &kSocketBufferBytes, sizeof(kSocketBufferBytes));
}

std::string bind_error(const std::string& netdev, int error) {
  if (error == EADDRINUSE) {
    return "UDP port 4791 on " + netdev +
           " is taken: rdma_rxe may be loaded in this network namespace (see `rdma link`), or "
           "another rrdma-vnic serves " + netdev + " (see `rrdma-vnic list`)";
  }
  return "cannot bind UDP port 4791 on " + netdev + ": " + std::strerror(error);
}

stack::Ipv4Address from_in_addr(in_addr address) { return stack::Ipv4Address{ntohl(address.s_addr)}; }

in_addr to_in_addr(stack::Ipv4Address address) { return in_addr{htonl(address.value)}; }

}  // namespace

RoceSocket open_roce_socket(const std::string& netdev, bool udp_offload) {
  if (netdev.empty() || netdev.size() >= IFNAMSIZ || ::if_nametoindex(netdev.c_str()) == 0) {
    throw std::runtime_error("no interface named " + netdev);
  }
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "UDP socket");
  bool segmentation = false;
  bool gro = false;
  try {
    if (::setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, netdev.c_str(), static_cast<socklen_t>(netdev.size())) != 0) {
      throw std::system_error(errno, std::generic_category(), "SO_BINDTODEVICE " + netdev + " (Linux 5.7 allows it without privilege)");
    }
    set_option(fd, IPPROTO_IP, IP_PKTINFO, 1, "IP_PKTINFO");
    set_option(fd, IPPROTO_IP, IP_RECVTOS, 1, "IP_RECVTOS");
    set_option(fd, IPPROTO_IP, IP_RECVTTL, 1, "IP_RECVTTL");
    // DF on every datagram, as RoCE v2 sends it; an unconnected socket then sends IPv4 ID 0.
    set_option(fd, IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO, "IP_MTU_DISCOVER");
    // Runs of datagrams in one sendmsg (UDP_SEGMENT; 0 here: no default size, each run
    // gives its own). Without it, UDP checksum 0, as rdma_rxe and RoCE v2 NICs send it: the
    // ICRC covers the datagram.
    const int no_default_segment = 0;
    segmentation = udp_offload &&
                   ::setsockopt(fd, SOL_UDP, UDP_SEGMENT, &no_default_segment, sizeof(no_default_segment)) == 0;
    if (!segmentation) set_option(fd, SOL_SOCKET, SO_NO_CHECK, 1, "SO_NO_CHECK");
    // Runs received whole (UDP_GRO, Linux 5.0): one completion for a run its sender's kernel
    // kept whole. Optional: without it the kernel cuts runs into datagrams before the socket.
    const int on = 1;
    gro = udp_offload && ::setsockopt(fd, SOL_UDP, UDP_GRO, &on, sizeof(on)) == 0;
    set_buffer(fd, SO_RCVBUFFORCE, SO_RCVBUF);
    set_buffer(fd, SO_SNDBUFFORCE, SO_SNDBUF);
    sockaddr_in any{};
    any.sin_family = AF_INET;
    any.sin_port = htons(rocev2::kRoceV2Port);
    any.sin_addr.s_addr = htonl(INADDR_ANY);
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&any), sizeof(any)) != 0) throw std::runtime_error(bind_error(netdev, errno));
  } catch (...) {
    ::close(fd);
    throw;
  }
  return {fd, segmentation, gro};
}

KernelUdpHeaders kernel_udp_headers(const rocev2::HiddenHeaderFields& fields, std::size_t udp_payload_length,
                                    std::uint16_t id) {
  // The caller keeps datagrams below the MTU, far below the 16-bit length these refuse.
  return {rocev2::reconstructed_ipv4_header(fields, udp_payload_length, id).value_or(rocev2::Ipv4HeaderBytes{}),
          rocev2::reconstructed_udp_header(fields, udp_payload_length).value_or(rocev2::UdpHeaderBytes{})};
}

NetdevPort::NetdevPort(EventLoop& loop, RoceSocket socket, std::size_t unpaced_reserve)
    : loop_(loop), socket_(socket.fd), unpaced_reserve_(unpaced_reserve) {}

NetdevPort::~NetdevPort() { ::close(socket_); }

bool NetdevPort::is_ours(stack::Ipv4Address address) const {
  return std::find(addresses_.begin(), addresses_.end(), address) != addresses_.end();
}

std::size_t NetdevPort::transmit_room() const {
  const std::size_t room = loop_.transmit_room();
  return room > unpaced_reserve_ ? room - unpaced_reserve_ : 0;
}

// The kernel checked the IPv4 header and the UDP checksum (if not 0) and hid the header; the
// ICRC is checked over the header the sender's kernel must have built (docs/WIRE.md).
void NetdevPort::receive(const Datagram& datagram, Instant now) {
  const std::size_t segment = datagram.segment_size;
  if (segment == 0 || datagram.payload.size() <= segment) {
    receive_one(datagram, datagram.payload, now);
    return;
  }
  // UDP_GRO: datagrams of one sender to one destination, back to back, each `segment`
  // bytes but the last; each carries its own BTH and ICRC, checked on its own.
  for (std::size_t offset = 0; offset < datagram.payload.size(); offset += segment) {
    ++counters_.rx_coalesced;
    receive_one(datagram, datagram.payload.subspan(offset, std::min(segment, datagram.payload.size() - offset)), now);
  }
}

void NetdevPort::receive_one(const Datagram& datagram, ByteSpan transport, Instant now) {
  ++counters_.rx_packets;
  const stack::Ipv4Address destination = from_in_addr(datagram.destination);
  if (!is_ours(destination)) {
    ++counters_.rx_not_ours;
    return;
  }
  if (transport.size() < rocev2::kBthLength + rocev2::kIcrcLength) {
    ++counters_.rx_malformed;
    return;
  }
  rocev2::HiddenHeaderFields fields;
  fields.source = from_in_addr(datagram.source.sin_addr);
  fields.destination = destination;
  fields.source_port = ntohs(datagram.source.sin_port);
  fields.destination_port = rocev2::kRoceV2Port;
  fields.tos = datagram.tos;
  fields.ttl = datagram.ttl;
  const rocev2::HiddenIdIcrc verdict = rocev2::verify_icrc_hidden_id(fields, transport);
  switch (verdict.error) {
    case rocev2::IcrcError::none: break;
    case rocev2::IcrcError::truncated: ++counters_.rx_malformed; return;
    case rocev2::IcrcError::mismatch: ++counters_.rx_bad_icrc; return;
  }
  if (verdict.identification != 0) ++counters_.rx_icrc_id_recovered;
  const KernelUdpHeaders headers = kernel_udp_headers(fields, transport.size(), verdict.identification);
  if (tap_) tap_(headers, transport, false);
  received_ipv4_ = headers.ipv4;
  deliver(transport, rocev2::PacketSource{fields.source, fields.source_port, received_ipv4_}, now);
}

bool NetdevPort::transmit(const rocev2::OutgoingPacket& out, std::uint16_t, Instant now) {
  (void)now;
  std::optional<rocev2::TransportPayload> payload = checked_payload(out);
  if (!payload) return false;
  if (addresses_.empty()) {
    ++counters_.tx_unroutable;
    return false;
  }
  const std::size_t length = payload->length() + rocev2::kIcrcLength;
  if (mtu_ != 0 && length + 28 > mtu_) {
    ++counters_.tx_too_big;
    return false;
  }
  // Every datagram leaves from port 4791, the socket's: the engine's per-QP flow port would
  // need a socket per port (docs/WIRE.md).
  const stack::Ipv4Address source = addresses_.front();
  MutableByteSpan slot = loop_.prepare_transmit(length);
  const bool in_slot = !slot.empty();
  if (!in_slot) {
    scratch_.resize(length);
    slot = MutableByteSpan(scratch_.data(), length);
  }
  const MutableByteSpan datagram = slot.first(length);
  payload->write(datagram.first(payload->length()));
  DatagramDestination destination;
  destination.to.sin_family = AF_INET;
  destination.to.sin_port = htons(rocev2::kRoceV2Port);
  destination.to.sin_addr = to_in_addr(out.dest);
  destination.from = to_in_addr(source);
  destination.tos = out.traffic_class;
  destination.ttl = rocev2::kRoceTtl;
  // A datagram that joins a run of UDP_SEGMENT leaves with the IPv4 ID of its place in the
  // run (EventLoop::run_position); the ICRC covers the ID, so it is sealed with that one.
  const auto id = static_cast<std::uint16_t>(in_slot ? loop_.run_position(length, destination) : 0);
  rocev2::HiddenHeaderFields fields;
  fields.source = source;
  fields.destination = out.dest;
  fields.source_port = rocev2::kRoceV2Port;
  fields.destination_port = rocev2::kRoceV2Port;
  fields.tos = out.traffic_class;
  fields.ttl = rocev2::kRoceTtl;
  const KernelUdpHeaders headers = kernel_udp_headers(fields, length, id);
  const auto icrc = rocev2::compute_icrc(headers.ipv4, headers.udp, datagram.first(payload->length()));
  const auto bytes = rocev2::icrc_bytes(icrc.value_or(0));
  std::copy(bytes.begin(), bytes.end(), datagram.begin() + static_cast<std::ptrdiff_t>(payload->length()));
  if (tap_) tap_(headers, datagram, true);
  if (in_slot) {
    loop_.transmit_prepared_to(length, destination);
  } else if (!loop_.transmit_to(datagram, destination)) {
    ++counters_.tx_queue_drops;
    return false;
  }
  ++counters_.tx_packets;
  return true;
}

}  // namespace rrdma::vnic
