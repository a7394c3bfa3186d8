// What sending one RoCE v2 packet costs the daemon's CPU, frame building only: the RoCE port's
// send (check, stack::Interface::send_udp, transport headers and payload written in place,
// ICRC) into a frame sink that builds in place, as the daemon's transmit slots do. No TAP, no
// engine. Meant for callgrind, whose instruction counts do not depend on the machine's load:
//
//   valgrind --tool=callgrind --callgrind-out-file=cg.out build/bench/rrdma_roce_send_bench
//   callgrind_annotate --inclusive=yes cg.out | grep RocePort::send
//
// and divide by the packets sent (printed). It also prints nanoseconds per packet, which
// on this shared machine are only indicative. Usage: rrdma_roce_send_bench [pairs, default
// 20000] — each pair is a 1023-byte RDMA WRITE ONLY (3 bytes of pad) and its ACK.
// Figures in docs/ARCHITECTURE.md ("One frame path").
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "rocev2/engine/ports.h"
#include "stack/arp.h"
#include "stack/ethernet.h"
#include "stack/interface.h"
#include "vnic/ports/roce_port.h"

namespace {

using namespace rrdma;

// One transmit slot, reused for every frame, as the daemon's registered slots are.
class SlotSink final : public stack::FrameSink {
 public:
  void transmit(ByteSpan) override { ++copied_; }
  MutableByteSpan prepare(std::size_t) override { return MutableByteSpan(slot_); }
  void transmit_prepared(MutableByteSpan frame) override { last_byte_sum_ += frame.back(); }
  std::size_t copied() const { return copied_; }
  std::uint32_t last_byte_sum() const { return last_byte_sum_; }

 private:
  std::array<std::uint8_t, 9216> slot_{};
  std::size_t copied_ = 0;
  std::uint32_t last_byte_sum_ = 0;  // keeps the frames from being optimised away
};

}  // namespace

int main(int argc, char** argv) {
  const long pairs = argc > 1 ? std::atol(argv[1]) : 20000;
  const stack::MacAddress our_mac{{2, 0, 0, 0, 0, 1}}, peer_mac{{2, 0, 0, 0, 0, 2}};
  const stack::Ipv4Address peer_ip{0x0A000002};
  stack::InterfaceConfig config;
  config.mac = our_mac;
  config.address = stack::Ipv4Address{0x0A000001};
  SlotSink sink;
  stack::Interface interface(config, sink);
  const Instant now{};

  // The peer's MAC, learnt from its ARP reply, so that every send is built in the slot.
  std::vector<std::uint8_t> arp(stack::EthernetHeader::length() + stack::ArpPacket::length());
  stack::EthernetHeader{our_mac, peer_mac, stack::EtherType::arp}.emit(arp);
  stack::ArpPacket{stack::ArpOperation::reply, peer_mac, peer_ip, our_mac, config.address}.emit(
      MutableByteSpan(arp).subspan(stack::EthernetHeader::length()));
  interface.receive_frame(arp, now);

  vnic::RocePort port(interface);
  const std::vector<std::uint8_t> payload(1023, 0x5A);
  rocev2::OutgoingPacket write;
  write.dest = peer_ip;
  write.src_qpn = rocev2::Qpn{0x11};
  write.packet.bth.opcode = rocev2::Opcode::RcWriteOnly;
  write.packet.bth.dest_qp = rocev2::Qpn{0x12};
  write.packet.reth = rocev2::Reth{0x1000, rocev2::Rkey{0x42}, static_cast<std::uint32_t>(payload.size())};
  write.packet.payload = payload;
  rocev2::OutgoingPacket ack;
  ack.dest = peer_ip;
  ack.src_qpn = rocev2::Qpn{0x11};
  ack.packet.bth.opcode = rocev2::Opcode::RcAck;
  ack.packet.bth.dest_qp = rocev2::Qpn{0x12};
  ack.packet.aeth = rocev2::Aeth{0, rocev2::Msn{1}};

  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < pairs; ++i) {
    port.send(write, 0xC121, now);
    port.send(ack, 0xC121, now);
  }
  const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
  const auto& c = port.counters();
  std::printf("packets %llu (built in the slot: %llu), emit errors %llu, %.0f ns per packet [%u]\n",
              static_cast<unsigned long long>(c.tx_packets),
              static_cast<unsigned long long>(c.tx_packets - sink.copied()),
              static_cast<unsigned long long>(c.tx_emit_errors), took.count() / static_cast<double>(2 * pairs),
              sink.last_byte_sum());
  return c.tx_emit_errors == 0 && c.tx_packets == static_cast<unsigned long long>(2 * pairs) ? 0 : 1;
}
