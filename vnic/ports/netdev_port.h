// RoCE v2 through the kernel's UDP (`rrdma-vnic up --netdev IF`): the daemon's port on an
// interface it does not own. The kernel does ARP, routing and IPv4 and owns the address,
// so TCP and RDMA share it, as with rdma_rxe; the daemon does everything from the BTH up,
// with the same engine, verbs device and CM as a TAP vnic (RoceEndpoint).
//
// One UDP socket, bound to port 4791 of every address and to the interface
// (SO_BINDTODEVICE, allowed to an ordinary user since Linux 5.7), read and written through
// the daemon's io_uring loop: multishot recvmsg into the loop's provided buffers, sendmsg
// from its transmit slots (EventLoop::attach_datagram_socket). What the kernel adds to a
// datagram and how the ICRC still holds: docs/WIRE.md, "RoCE v2 through the kernel's UDP".
//
// Runs in the daemon process.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rocev2/icrc.h"
#include "stack/addresses.h"
#include "vnic/event_loop.h"
#include "vnic/ports/roce_port.h"

namespace rrdma::vnic {

// The socket, bound and configured, and whether it sends runs of datagrams with UDP_SEGMENT
// (Linux 4.18; EventLoopConfig::udp_segmentation). The kernel refuses UDP_SEGMENT on a socket
// that sends checksum 0 (SO_NO_CHECK), so with segmentation the datagrams carry a UDP
// checksum, which RoCE v2 allows and the ICRC masks; without it, 0 as rdma_rxe sends
// (docs/WIRE.md). Throws with a sentence a user can act on (4791 taken by rdma_rxe or
// another daemon, no such interface...).
struct RoceSocket {
  int fd = -1;
  bool udp_segmentation = false;
  bool udp_gro = false;  // runs arrive whole: receive buffers must hold kMaxRunBytes
};
RoceSocket open_roce_socket(const std::string& netdev, bool udp_offload = true);

// The IPv4 and UDP headers a datagram of `udp_payload_length` bytes carries when the kernel
// sends it from an unconnected socket with DF set (identification 0; a peer such as rdma_rxe
// picks its own, which the ICRC check recovers): rocev2::reconstructed_ipv4_header and
// reconstructed_udp_header. What the ICRC is computed over, on both sides, and what
// `capture` shows.
struct KernelUdpHeaders {
  rocev2::Ipv4HeaderBytes ipv4{};
  rocev2::UdpHeaderBytes udp{};
};
KernelUdpHeaders kernel_udp_headers(const rocev2::HiddenHeaderFields& fields, std::size_t udp_payload_length,
                                    std::uint16_t id);

class NetdevPort final : public RoceEndpoint {
 public:
  // `socket` from open_roce_socket(); the port closes it. `unpaced_reserve`: transmit slots
  // kept out of transmit_room() for ACKs and MADs.
  NetdevPort(EventLoop& loop, RoceSocket socket, std::size_t unpaced_reserve);
  ~NetdevPort() override;

  // The interface's IPv4 addresses: the GIDs. A datagram to any other address is dropped.
  void set_addresses(std::vector<stack::Ipv4Address> addresses) { addresses_ = std::move(addresses); }
  // The interface's MTU: a datagram that would not fit is counted under tx_too_big.
  void set_mtu(std::size_t mtu) { mtu_ = mtu; }
  const std::vector<stack::Ipv4Address>& addresses() const { return addresses_; }
  // `rrdma-vnic capture` and `trace` see each datagram with the headers the kernel put on it
  // (sent) or must have (received), rebuilt: KernelUdpHeaders, with the received TOS and TTL.
  using PacketTap = std::function<void(const KernelUdpHeaders& headers, ByteSpan udp_payload, bool sent)>;
  void set_packet_tap(PacketTap tap) { tap_ = std::move(tap); }

  int fd() const { return socket_; }
  // One datagram, or with UDP_GRO a run of them (Datagram::segment_size).
  void receive(const Datagram& datagram, Instant now);
  std::size_t transmit_room() const override;

 private:
  bool transmit(const rocev2::OutgoingPacket& packet, std::uint16_t udp_source_port, Instant now) override;
  bool is_ours(stack::Ipv4Address address) const;
  void receive_one(const Datagram& datagram, ByteSpan transport, Instant now);

  EventLoop& loop_;
  int socket_;
  std::size_t unpaced_reserve_;
  std::vector<stack::Ipv4Address> addresses_;
  PacketTap tap_;
  std::size_t mtu_ = 0;
  std::vector<std::uint8_t> scratch_;        // a datagram waiting for a transmit slot
  rocev2::Ipv4HeaderBytes received_ipv4_{};  // PacketSource::ipv4_header of the packet delivered
};

}  // namespace rrdma::vnic
