#include "rocev2/gsi.h"

#include "stack/bytes.h"

namespace rrdma::rocev2 {
namespace {

// rxe compares a packet's P_Key with the port's one entry, 0xFFFF, by pkey_match
// (rxe_verbs.h): the low 15 bits equal and not zero, and at least one of the two a full
// member (bit 15). Against 0xFFFF that admits 0xFFFF and 0x7FFF.
constexpr bool pkey_matches_port(Pkey pkey) {
  const std::uint16_t key = pkey.value();
  const std::uint16_t port = kDefaultPkey.value();
  return (key & 0x7FFF) != 0 && (key & 0x7FFF) == (port & 0x7FFF) && ((key & 0x8000) != 0 || (port & 0x8000) != 0);
}
static_assert(pkey_matches_port(Pkey(0xFFFF)) && pkey_matches_port(Pkey(0x7FFF)));
static_assert(!pkey_matches_port(Pkey(0x8000)) && !pkey_matches_port(Pkey(0)) && !pkey_matches_port(Pkey(0xFFFE)));

}  // namespace

std::string_view to_string(GsiDrop drop) {
  switch (drop) {
    case GsiDrop::none: return "none";
    case GsiDrop::smi_qp: return "smi_qp";
    case GsiDrop::not_gsi_qp: return "not_gsi_qp";
    case GsiDrop::bad_opcode: return "bad_opcode";
    case GsiDrop::bad_pkey: return "bad_pkey";
    case GsiDrop::bad_qkey: return "bad_qkey";
    case GsiDrop::short_mad: return "short_mad";
    case GsiDrop::long_mad: return "long_mad";
  }
  return "unknown";
}

// The order of rxe's receive path: the QPN (rxe_recv.c hdr_check), the opcode against the
// QP's type (check_type_state: UD opcodes only on the GSI QP), the P_Key and the Q_Key
// (check_keys), then the length (a MAD longer than the MAD layer's 256-byte receive buffer
// fails rxe_resp.c send_data_in and is dropped). We also drop SEND ONLY with Immediate
// (rxe's transport would take it; no MAD sender uses it) and MADs shorter than 256 bytes
// (the MAD layer would read the rest of its buffer as if it had come with them).
GsiDrop check_gsi_packet(const TransportPacket& packet) {
  if (packet.bth.dest_qp == kSmiQpn) return GsiDrop::smi_qp;
  if (packet.bth.dest_qp != kGsiQpn) return GsiDrop::not_gsi_qp;
  if (packet.bth.opcode != Opcode::UdSendOnly || !packet.deth) return GsiDrop::bad_opcode;
  if (!pkey_matches_port(packet.bth.pkey)) return GsiDrop::bad_pkey;
  if (packet.deth->qkey != kGsiQkey) return GsiDrop::bad_qkey;
  if (packet.payload.size() < kMadLength) return GsiDrop::short_mad;
  if (packet.payload.size() > kMadLength) return GsiDrop::long_mad;
  return GsiDrop::none;
}

TransportPacket gsi_packet(Psn psn, MadSpan mad) {
  TransportPacket p;
  p.bth.opcode = Opcode::UdSendOnly;
  p.bth.pkey = kDefaultPkey;
  p.bth.dest_qp = kGsiQpn;
  // rxe_req.c init_req_packet leaves AckReq 0 only for IB_QPT_UD and IB_QPT_UC; the GSI QP
  // is IB_QPT_GSI, so a MAD, the end of its message, goes with AckReq set (UD ignores it).
  p.bth.ack_req = true;
  p.bth.psn = psn;
  // rxe_req.c: "if (qp->ibqp.qp_num == 1) deth_set_qkey(pkt, GSI_QKEY)", source QP 1.
  p.deth = Deth{kGsiQkey, kGsiQpn};
  p.payload = mad;
  return p;
}

MadHeaderPeek peek_mad_header(MadSpan mad) {
  return MadHeaderPeek{mad[0], mad[1], mad[2], mad[3], load_be16(mad, 16)};
}

std::vector<std::pair<std::string_view, std::uint64_t>> named(const GsiCounters& c) {
  return {{"rx_packets", c.rx_packets},
          {"rx_mads", c.rx_mads},
          {"rx_no_handler", c.rx_no_handler},
          {"rx_dropped_smi_qp", c.dropped(GsiDrop::smi_qp)},
          {"rx_dropped_not_gsi_qp", c.dropped(GsiDrop::not_gsi_qp)},
          {"rx_dropped_bad_opcode", c.dropped(GsiDrop::bad_opcode)},
          {"rx_dropped_bad_pkey", c.dropped(GsiDrop::bad_pkey)},
          {"rx_dropped_bad_qkey", c.dropped(GsiDrop::bad_qkey)},
          {"rx_dropped_short_mad", c.dropped(GsiDrop::short_mad)},
          {"rx_dropped_long_mad", c.dropped(GsiDrop::long_mad)},
          {"tx_mads", c.tx_mads},
          {"tx_not_sent", c.tx_not_sent}};
}

GsiDrop GsiEndpoint::drop(GsiDrop reason, const TransportPacket& packet) {
  ++counters_.rx_dropped[static_cast<std::size_t>(reason)];
  if (observer_ != nullptr) observer_->on_gsi_received(packet, reason);
  return reason;
}

GsiDrop GsiEndpoint::receive(const TransportPacket& packet, const PacketSource& from, Instant now) {
  ++counters_.rx_packets;
  if (const GsiDrop reason = check_gsi_packet(packet); reason != GsiDrop::none) return drop(reason, packet);
  if (observer_ != nullptr) observer_->on_gsi_received(packet, GsiDrop::none);
  if (handler_ == nullptr) {
    ++counters_.rx_no_handler;
    return GsiDrop::none;
  }
  ++counters_.rx_mads;
  const ReceivedMad mad{from.ip,     from.udp_source_port, packet.deth->src_qp,
                        packet.bth.pkey, packet.bth.psn,   MadSpan(packet.payload.data(), kMadLength),
                        from.ipv4_header};
  handler_->on_mad(mad, now);
  return GsiDrop::none;
}

bool GsiEndpoint::send(stack::Ipv4Address destination, MadSpan mad, Instant now) {
  const OutgoingPacket out{destination, kGsiQpn, gsi_packet(next_psn_, mad)};
  const bool accepted = link_.send_gsi(out, kGsiUdpSourcePort, now);
  // rxe advances the PSN once the packet is built and routed (rxe_req.c update_wqe_psn) and
  // rolls it back when rxe_xmit_packet fails; a destination with no route fails before.
  if (accepted) {
    ++next_psn_;
    ++counters_.tx_mads;
  } else {
    ++counters_.tx_not_sent;
  }
  if (observer_ != nullptr) observer_->on_gsi_sent(out.packet, accepted);
  return accepted;
}

}  // namespace rrdma::rocev2
