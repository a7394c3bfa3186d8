// The General Services Interface's QP 1 (IBA 13.5, and Annex A17 for RoCE) as a transport
// endpoint for management datagrams (MADs): what Linux rdma_rxe puts on the wire when its
// MAD layer sends from QP 1, and what it accepts there. The connection manager (CM) speaks
// to its peers through it; this file knows nothing of MAD contents beyond the first bytes of
// the common header, read for a trace line (the CM's codec interprets MADs).
//
// Received: a packet the RoCE port verified (ICRC, transport headers) and found addressed
// to QP 0 or 1. QP 0 is the SMI's, which RoCE has none of (rxe_recv.c hdr_check drops QPN
// 0); on QP 1 only a UD SEND ONLY with the port's P_Key, the GSI Q_Key and exactly one
// 256-byte MAD is handed to the MadHandler. Everything else is counted under its reason and
// dropped. Sent: a MAD from QP 1 to QP 1 of a peer, as rxe's GSI QP sends it (docs/GSI.md
// has the rxe source lines for each field). Pure: no I/O; packets leave through a GsiLink
// the daemon implements (vnic/ports/roce_port.h), time is passed in.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "rocev2/encap.h"
#include "rocev2/engine/engine.h"  // PacketSource, OutgoingPacket
#include "rocev2/packet.h"
#include "rocev2/types.h"
#include "stack/addresses.h"
#include "stack/time.h"

namespace rrdma::rocev2 {

inline constexpr Qpn kSmiQpn{0};
inline constexpr Qpn kGsiQpn{1};
// The well-known Q_Key of QP 1 (IBA 13.5.1; IB_QP1_QKEY in ib_mad.h, GSI_QKEY in rxe_hdr.h).
inline constexpr Qkey kGsiQkey{0x8001'0000};
// Every MAD is 256 bytes (IBA 13.4.1); RMPP splits larger messages into 256-byte MADs.
inline constexpr std::size_t kMadLength = 256;
using MadSpan = std::span<const std::uint8_t, kMadLength>;
// rxe sets a QP's UDP source port at creation from its QP number (rxe_qp.c rxe_qp_init_req)
// and its GSI QP, numbered 1 before that (rxe_qp_init_misc), never gets an address vector
// that would change it: so every MAD rxe sends leaves from this port.
inline constexpr std::uint16_t kGsiUdpSourcePort = udp_source_port_datagram(kGsiQpn);
static_assert(kGsiUdpSourcePort == 0xD872);  // 0xC000 + (0x61C88647 >> 18)

// QP 0 and QP 1 are the management QPs: their packets go to the GSI endpoint, never to the
// transport engine, whose QP numbers start at 17.
constexpr bool is_management_qp(Qpn qpn) { return qpn.value() <= kGsiQpn.value(); }

// Why a packet for a management QP was dropped, in the order the checks run.
enum class GsiDrop : std::uint8_t {
  none,
  smi_qp,        // addressed to QP 0: RoCE has no subnet management interface
  not_gsi_qp,    // addressed to neither QP 0 nor QP 1 (a caller's mistake)
  bad_opcode,    // anything but UD SEND ONLY (0x64)
  bad_pkey,      // not the port's one P_Key, 0xFFFF (or its limited form 0x7FFF, as rxe)
  bad_qkey,      // DETH Q_Key other than 0x80010000
  short_mad,     // payload shorter than 256 bytes
  long_mad,      // payload longer than 256 bytes
};
inline constexpr std::size_t kGsiDropReasons = 8;
std::string_view to_string(GsiDrop drop);

// Whether a verified transport packet addressed to a management QP is a MAD rxe's GSI QP
// would take, and if not, why.
GsiDrop check_gsi_packet(const TransportPacket& packet);

// The transport packet of one MAD sent from QP 1 to QP 1, as rxe's GSI QP sends it: UD SEND
// ONLY, P_Key 0xFFFF, AckReq set, DETH Q_Key 0x80010000 and source QP 1. `packet.payload`
// borrows `mad`.
TransportPacket gsi_packet(Psn psn, MadSpan mad);

// The first fields of the MAD common header (IBA 13.4.2), for counters and trace lines only.
// The CM's codec (rocev2/cm/) is what reads MADs; this is the one other place that looks.
struct MadHeaderPeek {
  std::uint8_t base_version = 0;
  std::uint8_t mgmt_class = 0;
  std::uint8_t class_version = 0;
  std::uint8_t method = 0;        // with the R (response) bit, bit 7
  std::uint16_t attribute_id = 0;
};
MadHeaderPeek peek_mad_header(MadSpan mad);

// A MAD the endpoint accepted, with what the CM needs to answer it. The spans borrow the
// received frame: valid only during MadHandler::on_mad.
struct ReceivedMad {
  stack::Ipv4Address source{};         // the sender: the kernel CM answers to the IPv4 source
                                       // in the GRH area (cm.c cm_init_av_for_response)
  std::uint16_t udp_source_port = 0;   // the sender's flow port (0xD872 from rxe)
  Qpn source_qp{};                     // DETH source QP (1 from any Linux peer)
  Pkey pkey{};                         // BTH P_Key as received (0xFFFF or 0x7FFF)
  Psn psn{};
  MadSpan mad;
  ByteSpan ipv4_header;                // as received: what rxe puts in the GRH area
};

// Where accepted MADs go: the CM, when it exists.
class MadHandler {
 public:
  virtual ~MadHandler() = default;
  virtual void on_mad(const ReceivedMad& mad, Instant now) = 0;
};

// Where the endpoint's packets go (the daemon: vnic/ports/roce_port.h, through the one frame path
// with ARP as for any packet). True if the packet was taken: sent, or waiting for ARP.
class GsiLink {
 public:
  virtual ~GsiLink() = default;
  virtual bool send_gsi(const OutgoingPacket& packet, std::uint16_t udp_source_port, Instant now) = 0;
};

// Sees every packet the endpoint receives (with its verdict) and sends: `rrdma-vnic trace`.
class GsiObserver {
 public:
  virtual ~GsiObserver() = default;
  // Called before the handler, so that what the handler sends in answer comes after it.
  virtual void on_gsi_received(const TransportPacket& packet, GsiDrop drop) = 0;
  // Called once the link has taken (`accepted`) or refused the packet.
  virtual void on_gsi_sent(const TransportPacket& packet, bool accepted) = 0;
};

struct GsiCounters {
  std::uint64_t rx_packets = 0;      // every packet for QP 0 or 1
  std::uint64_t rx_mads = 0;         // accepted and handed to the handler
  std::uint64_t rx_no_handler = 0;   // accepted, but no handler was set
  std::array<std::uint64_t, kGsiDropReasons> rx_dropped{};  // by GsiDrop (none stays 0)
  std::uint64_t tx_mads = 0;         // taken by the link (sent or waiting for ARP)
  std::uint64_t tx_not_sent = 0;     // refused by the link (no route, too big)
  std::uint64_t dropped(GsiDrop drop) const { return rx_dropped[static_cast<std::size_t>(drop)]; }
};
// "rx_packets", "rx_mads", "rx_no_handler", "rx_dropped_<reason>" for each reason,
// "tx_mads", "tx_not_sent".
std::vector<std::pair<std::string_view, std::uint64_t>> named(const GsiCounters& counters);

class GsiEndpoint {
 public:
  explicit GsiEndpoint(GsiLink& link) : link_(link) {}
  GsiEndpoint(const GsiEndpoint&) = delete;
  GsiEndpoint& operator=(const GsiEndpoint&) = delete;

  // Both may be nullptr (none); each must outlive the endpoint or be reset first.
  void set_handler(MadHandler* handler) { handler_ = handler; }
  void set_observer(GsiObserver* observer) { observer_ = observer; }

  // A verified packet addressed to QP 0 or 1 (is_management_qp). Hands an accepted MAD to
  // the handler and returns none, or returns why it was dropped.
  GsiDrop receive(const TransportPacket& packet, const PacketSource& from, Instant now);

  // Sends `mad` from QP 1 to QP 1 at `destination` (the kernel CM always answers to QP 1:
  // cm.c cm_alloc_response_msg). The PSN counts up from 0, as rxe's GSI QP, by one for each
  // packet the link takes. False if the link refused it.
  bool send(stack::Ipv4Address destination, MadSpan mad, Instant now);

  Psn next_psn() const { return next_psn_; }
  const GsiCounters& counters() const { return counters_; }

 private:
  GsiDrop drop(GsiDrop reason, const TransportPacket& packet);

  GsiLink& link_;
  MadHandler* handler_ = nullptr;
  GsiObserver* observer_ = nullptr;
  // IB_MAD_SEND_Q_PSN (mad_priv.h), the sq_psn the MAD layer gives QP 1 on its way to RTS.
  Psn next_psn_{0};
  GsiCounters counters_;
};

// The handler until the CM exists: every MAD the endpoint accepts is counted here and
// dropped, so that the path from the wire to a handler is complete and testable.
class DiscardingMadHandler final : public MadHandler {
 public:
  void on_mad(const ReceivedMad&, Instant) override { ++discarded_; }
  std::uint64_t discarded() const { return discarded_; }

 private:
  std::uint64_t discarded_ = 0;
};

}  // namespace rrdma::rocev2
