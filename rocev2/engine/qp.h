// Internal: the state of one queue pair, split by role the way IBA chapter 9 and rxe split
// it: the requester (turns send WQEs into request packets), the completer (turns responses
// into completions, drives retries) and the responder (executes incoming requests).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "rocev2/engine/engine.h"
#include "rocev2/engine/memory.h"
#include "rocev2/engine/pacer.h"
#include "rocev2/engine/timers.h"

namespace rrdma::rocev2 {

// A posted send WQE and its progress through requester and completer.
struct SendWqe {
  SendWr wr;
  std::uint64_t serial = 0;        // unique in the engine, in posting order (the read-ahead's key)
  std::uint64_t length = 0;        // message length in bytes
  std::uint32_t packets = 1;       // PSNs the message occupies (READ: response packets)
  bool started = false;            // PSNs assigned, local SGEs resolved
  Psn first_psn{};
  std::uint32_t next_packet = 0;   // requester: next packet index to (re)send
  std::uint32_t responses_received = 0;  // completer: READ response packets taken in order
  std::uint32_t read_restart = 0;  // READ: first packet index the latest request asked for
  ResolvedSges sges;   // local memory (source of SEND/WRITE, sink of READ/atomic)
  bool signaled = false;

  Psn last_psn() const { return first_psn + (packets - 1); }
  bool fully_sent() const { return started && next_packet >= packets; }
  bool is_read() const { return wr_opcode_info(wr.opcode).read; }
  bool is_atomic() const { return wr_opcode_info(wr.opcode).atomic; }
  bool is_local() const { return wr_opcode_info(wr.opcode).local; }
  bool needs_response_data() const { return wr_opcode_info(wr.opcode).needs_response_data(); }
  bool empty_read_response() const { return wr_opcode_info(wr.opcode).empty_read_response(); }
  bool holds_responder_resource() const { return wr_opcode_info(wr.opcode).holds_responder_resource(); }
  bool contains(Psn p) const { return started && p.distance_from(first_psn) < packets; }
};

struct Requester {
  std::deque<SendWqe> sq;          // front: oldest not yet completed
  std::size_t next_send = 0;       // index in sq of the first WQE not fully sent
  Psn next_psn{};                  // PSN of the next packet to send
  Psn high_psn{};                  // one past the highest PSN ever sent
  Psn comp_psn{};                  // oldest PSN not yet acknowledged
  std::uint32_t rd_atomic_in_flight = 0;
  std::uint32_t packets_since_ack_req = 0;
  std::optional<Psn> ack_req_psn;      // the latest packet sent with AckReq
  bool force_ack_req = false;          // the next packet asks for an ACK (pump: window full)
  std::uint8_t retries_left = 7;
  std::uint8_t rnr_retries_left = 7;
  Deadline retransmit_deadline;        // the local ACK timeout (in the engine's TimerQueue)
  Deadline rnr_deadline;               // the end of an RNR wait (likewise)
  std::optional<Psn> rnr_resume_psn;   // where to resume when the RNR wait ends
  std::optional<Psn> gap_retry_psn;    // a read-response gap already retried from here
  Psn gap_seen_psn{};                  // the highest response PSN past it seen since
  std::uint32_t gap_late = 0;          // responses past it that arrived since it was asked for
  std::uint32_t late_estimate = 0;     // how many such responses an answer usually trails
  bool read_response_heard = false;    // a READ response arrived since the last ACK timeout
  bool drain_reported = false;         // SQD: SqDrained sent
  std::string_view retransmit_reason = "retransmission";  // for the observer (static text)
};

// A READ, atomic, FLUSH or ATOMIC_WRITE the responder executed, kept to answer duplicates
// (IBA ch. 9 duplicate rules; A19: a duplicate FLUSH or ATOMIC_WRITE is answered again, not
// executed again).
struct ReplayEntry {
  enum class Kind : std::uint8_t { Read, Atomic, EmptyReadResponse };
  Psn psn{};
  Kind kind = Kind::Read;
  std::uint64_t original = 0;  // atomic: the value returned the first time
};

// A READ being answered (IBA ch. 9). Its responses go out kReadResponsesPerStep at a time:
// the first step when the request is executed, the others from advance(). A duplicate of the
// same READ (the requester asking again from a lost response on) then replaces the rest
// instead of adding a second copy of it behind the first, and one large READ does not hold
// the engine for its whole length (docs/TRANSPORT.md, "Pacing READ responses").
struct ReadStream {
  Rkey rkey{};
  std::uint64_t va = 0;            // of response 0 of this stream
  std::uint32_t length = 0;
  Psn first{};                     // PSN of response 0: the request's PSN
  std::uint32_t mtu = 0;           // the path MTU when it started: offsets stay those of the
                                   // responses already sent, whatever modify_qp does meanwhile
  std::uint32_t packets = 1;
  std::uint32_t next = 0;          // index of the next response to send
  bool duplicate = false;          // answers a duplicate request (observed as retransmitted)
  Psn read_first{};                // the PSNs [read_first, read_end) of the READ executed:
  Psn read_end{};                  // a duplicate request in there restarts the stream
};

// A request that arrived while a READ was being answered, kept with a copy of its payload
// and run once the READ is done: the responder answers in PSN order (an ACK for a later PSN
// would tell the requester that the READ's responses were lost).
struct WaitingRequest {
  TransportPacket packet;          // payload: `bytes`, set again when the request runs
  std::vector<std::uint8_t> bytes;
};

struct Responder {
  ResponsePacer pacer;             // READ responses' pace, once the requester asked again
  Psn expected_psn{};
  Msn msn{};
  bool nak_sent_for_gap = false;   // one NAK per PSN gap (rxe: sent_psn_nak)
  std::uint32_t packets_since_ack = 0;
  bool duplicate_acked = false;    // a duplicate since the last new request was re-ACKed
  std::optional<Psn> held_ack;     // a positive ACK owed, sent by release_acks() (hold_acks)
  // The message in progress: SEND (a receive WQE being filled) or WRITE (a remote range).
  enum class InProgress : std::uint8_t { None, Send, Write } in_progress = InProgress::None;
  ResolvedSges recv_sges;
  std::uint64_t recv_wr_id = 0;
  std::uint64_t recv_offset = 0;
  std::optional<MrFacts> write_mr;
  std::uint64_t write_va = 0;
  std::uint64_t write_remaining = 0;
  std::uint64_t write_total = 0;
  bool recv_held = false;          // UC: a receive WQE kept from an aborted message
  bool uc_dropping = false;        // UC: drop until the next FIRST/ONLY (IBA UC rules)
  std::array<ReplayEntry, kMaxResponderResources> replay{};
  std::size_t replay_next = 0;
  std::size_t replay_count = 0;
  bool comm_established = false;
  std::optional<ReadStream> read_stream;
  std::deque<WaitingRequest> waiting;  // behind read_stream, in arrival order
};

struct Qp {
  Qpn qpn{};
  QpType type = QpType::Rc;
  std::uint32_t pd = 0;
  bool sq_sig_all = false;
  std::uint32_t max_send_wr = 0;
  QpAttr attr;
  std::unique_ptr<FifoReceiveQueue> own_rq;
  ReceiveQueue* rq = nullptr;      // own_rq or the SRQ
  bool uses_srq = false;
  Requester req;
  Responder resp;
  StreamingHook streaming;         // linked while resp.read_stream is (Engine::Impl::streaming_)
  RoomWaitHook room_wait;          // linked while the requester waits for transmit room (room_waiting_)
};

}  // namespace rrdma::rocev2
