// The RoCE v2 transport engine: RC requester, responder and completer, UC and UD, as one
// pure state machine (docs/TRANSPORT.md). Events in: a received transport packet with its
// source, a posted work request, time passing. Actions out, through the ports (ports.h):
// packets to send, memory reads and writes, completions, async events. Time is always an
// argument; next_deadline() says when advance() must next be called. No sockets, no clocks,
// no threads: the caller serialises all calls, and the host's callbacks (ports.h) must not
// call back into the same engine (queue the work and do it after the call returns).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "rocev2/engine/ports.h"
#include "rocev2/engine/work.h"
#include "rocev2/packet.h"
#include "stack/addresses.h"
#include "stack/time.h"

namespace rrdma::rocev2 {

struct QpInit {
  QpType type = QpType::Rc;
  std::uint32_t pd = 0;
  std::optional<Qpn> qpn;            // the verbs layer may choose; otherwise the engine does
  std::uint32_t max_send_wr = 1024;
  std::uint32_t max_recv_wr = 1024;
  bool sq_sig_all = false;           // every send WQE completes, signaled or not
  ReceiveQueue* srq = nullptr;       // if set, receives come from it (not owned; not flushed)
  // If set (and no srq), the QP's own receive queue is this one instead of an engine FIFO:
  // the daemon's adapter over a shared-memory ring. Not owned, but the QP's alone, so it is
  // flushed on error and emptied on reset like the engine's own.
  ReceiveQueue* rq = nullptr;
};

// Where a received packet came from. `ipv4_header` (the 20+ header bytes of the IPv4
// packet) is needed for UD only: rxe puts it in the GRH area of the receive buffer.
struct PacketSource {
  stack::Ipv4Address ip{};
  std::uint16_t udp_source_port = 0;
  std::span<const std::uint8_t> ipv4_header;
};

enum class VerbResult : std::uint8_t {
  Ok,
  NoSuchQp,
  InvalidState,      // wrong QP state for the call or the requested transition
  InvalidArgument,   // bad attribute value, opcode not valid for the QP type, ...
  QueueFull,
};

// Per-engine counters; every dropped packet is counted under one reason.
struct EngineCounters {
  std::uint64_t packets_received = 0;
  std::uint64_t packets_sent = 0;
  std::uint64_t unknown_qpn = 0;
  std::uint64_t bad_opcode = 0;        // invalid, or not valid for the QP's type
  std::uint64_t bad_header = 0;        // a header the opcode needs is missing, lengths lie
  std::uint64_t wrong_state = 0;       // the QP cannot receive in its state
  std::uint64_t cnp_received = 0;      // counted and ignored: no congestion control yet
  std::uint64_t duplicate_requests = 0;
  std::uint64_t out_of_sequence = 0;
  std::uint64_t naks_sent = 0;
  std::uint64_t rnr_naks_sent = 0;
  std::uint64_t writes_not_placed = 0;  // write_not_placed(): NAKed after the host lost a write
  std::uint64_t owner_gone_drops = 0;   // requests dropped: their memory's owner had exited
  std::uint64_t naks_received = 0;
  std::uint64_t rnr_naks_received = 0;
  std::uint64_t retransmits = 0;
  std::uint64_t timeouts = 0;
  std::uint64_t ghost_responses = 0;   // responses / ACKs for nothing outstanding
  std::uint64_t qkey_mismatch = 0;
  std::uint64_t uc_messages_dropped = 0;
  std::uint64_t read_streams_restarted = 0;       // a duplicate READ replaced the rest of its answer
  std::uint64_t requests_dropped_behind_read = 0; // the queue behind a READ being answered was full
  std::uint64_t transmit_budget_cuts = 0;  // a timeout halved what the QPs may have unacknowledged
  std::uint64_t transmit_room_waits = 0;  // a requester stopped: the host's transmit queue was full
  std::uint64_t read_pace_cuts = 0;  // a re-requested READ slowed its QP's responses
};

class Engine {
 public:
  Engine(EngineHost& host, MrTable& mrs, Dma& dma, EngineObserver* observer = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  std::optional<Qpn> create_qp(const QpInit& init);
  VerbResult destroy_qp(Qpn qpn);
  // The engine's part of ibv_modify_qp: the state transition (IBA ch. 10) and the attributes
  // in `mask` (qp_attr::). Moving to ERR flushes outstanding work with WR_FLUSH_ERR.
  VerbResult modify_qp(Qpn qpn, const QpAttr& attr, std::uint32_t mask, Instant now);
  std::optional<QpAttr> query_qp(Qpn qpn) const;

  // Posts a send WR and sends at once what the QP may send.
  VerbResult post_send(Qpn qpn, SendWr wr, Instant now);
  // Posts without sending, until start_sends(). A caller that takes many WRs at once (the
  // daemon, a doorbell's worth) queues them all and starts once, so that the requester
  // sees them together: one gather then reads the payloads of all of them.
  VerbResult queue_send(Qpn qpn, SendWr wr);
  void start_sends(Qpn qpn, Instant now);
  VerbResult post_recv(Qpn qpn, RecvWr wr);

  // A packet the wire layer parsed and verified (ICRC), addressed to this engine.
  void receive(const TransportPacket& packet, const PacketSource& from, Instant now);
  // ACK coalescing across a batch of received packets (IBA 9.7.5.1.2: an ACK acknowledges
  // every earlier PSN). While held, the positive ACK a QP's responder owes is kept, one per
  // QP and always the latest, until release_acks(). A caller that receives frames in
  // batches (the daemon) holds ACKs and releases them after each batch, so a burst of N
  // requests costs one ACK instead of N. A NAK, READ response or atomic ACK the QP sends
  // meanwhile acknowledges the same PSNs and replaces the held ACK. Off by default.
  void hold_acks(bool on);
  // Sends every held ACK (of QPs that still exist and are not in RESET or ERR).
  void release_acks();
  // The host could not place a write it accepted for packet `psn` of QP `qpn`: it queues
  // writes and performs them after the packet (the daemon's write combining), so a write can
  // fail after Dma::write said yes. The requester must not learn that its data landed: an
  // RC responder NAKs with remote operational error at `psn` (as for a write refused at
  // once), forgets the ACK it held, and the QP goes to ERR. The host calls this before any
  // packet of the QP leaves, and never from inside an engine call.
  void write_not_placed(Qpn qpn, Psn psn);
  // Runs the timers due at `now` (retransmission, RNR waits), the next step of every READ
  // being answered (its responses go out a step at a time: docs/TRANSPORT.md), and the
  // requesters that stopped for want of transmit room (EngineHost::transmit_room).
  void advance(Instant now);
  // The earliest instant at which advance() has work, if any: the latest `now` given while a
  // READ is being answered or a requester waits for room. O(1): neither this nor advance()
  // visits QPs with nothing due (rocev2/engine/timers.h).
  std::optional<Instant> next_deadline() const;
  // Deadlines set across all QPs (ACK timeouts, RNR waits): what advance() keeps ordered.
  // O(1) (the queue counts them): the number of QPs sharing the transmit budget.
  std::size_t deadlines_set() const;

  const EngineCounters& counters() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace rrdma::rocev2
