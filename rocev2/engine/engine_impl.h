// Internal: the engine's implementation, shared by engine.cpp (QP lifetime, state machine,
// dispatch, timers), requester.cpp, completer.cpp and responder.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "rocev2/engine/engine.h"
#include "rocev2/engine/qp.h"
#include "rocev2/engine/syndrome.h"
#include "rocev2/opcode.h"

namespace rrdma::rocev2 {

// rxe's limits, kept so that our traffic looks like its: at most 128 PSNs unacknowledged
// (RXE_MAX_UNACKED_PSNS) and an AckReq at least every 64 packets (RXE_MAX_PKT_PER_ACK).
inline constexpr std::uint32_t kMaxUnackedPsns = 128;
// What all RC QPs of an engine together may have unacknowledged before each is held to its
// share (Engine::Impl::unacked_limit): at most kTransmitBudget packets, a few milliseconds of
// queue at a receiver on this machine, far below the shortest ACK timeout programs use
// (timeout 14: 67 ms). A timeout halves the budget (at most once per kBudgetCutInterval, down
// to kMinTransmitBudget); each ACK that acknowledges something gives one packet back: a
// receiver slower than that (a loaded machine) is not buried in go-back-N duplicates. The
// smallest share is one packet.
inline constexpr std::size_t kTransmitBudget = 2048;
inline constexpr std::size_t kMinTransmitBudget = 128;
inline constexpr Duration kBudgetCutInterval = std::chrono::milliseconds(10);
inline constexpr std::size_t kMinUnackedPsns = 1;
inline constexpr std::uint32_t kPacketsPerAckReq = 64;
// The responder acknowledges at least every this many packets even without AckReq.
inline constexpr std::uint32_t kPacketsPerAck = 64;

// A READ is answered this many response packets per step (ReadStream): 256 KiB at path
// MTU 4096, so an ib_read_bw message of 64 KiB still goes out in one step.
inline constexpr std::uint32_t kReadResponsesPerStep = 64;
// A re-requested READ response whose answer has not begun after 2 * late_estimate +
// kMinLateResponses later responses past the same gap is asked for again (completer.cpp,
// retry_missing_response).
inline constexpr std::uint32_t kMinLateResponses = 128;
// A READ's own response right after a re-requested gap, arriving once its responses had
// reached this far past it, shows the answer begun without the missing one.
inline constexpr std::uint32_t kReorderMargin = 8;
// Requests kept behind a READ being answered, per QP (each with up to a path MTU of
// payload). More are dropped, as a full link would drop them; the requester resends.
inline constexpr std::size_t kMaxWaitingRequests = 256;

// The most payload bytes the engine reads from registered memory in one gather (the
// read-ahead, docs/TRANSPORT.md). Each Dma call has a fixed cost (the daemon's is a
// process_vm_readv: a system call, a ptrace check, the pages looked up and pinned), so
// one call per window instead of one per packet. 64 KiB is 16 packets at MTU 4096 (one
// ib_write_bw message), cuts that cost by 16 and still sits in a core's L2 cache with
// the frames it is copied into; larger windows would save little more. A multiple of
// every path MTU, so that a window always ends on a packet boundary.
inline constexpr std::size_t kReadAheadBytes = 64 * 1024;
static_assert(kReadAheadBytes % 4096 == 0);

// Packets of a message of `length` bytes at path MTU `mtu`; a zero-length message takes one.
inline std::uint32_t packets_for(std::uint64_t length, std::uint32_t mtu) {
  return length == 0 ? 1 : static_cast<std::uint32_t>((length + mtu - 1) / mtu);
}

// The opcode of READ response k of n: FIRST MIDDLE* LAST, or ONLY (IBA ch. 9).
inline Opcode read_response_opcode(std::uint32_t k, std::uint32_t n) {
  return n == 1 ? Opcode::RcReadResponseOnly
       : k == 0     ? Opcode::RcReadResponseFirst
       : k + 1 == n ? Opcode::RcReadResponseLast
                    : Opcode::RcReadResponseMiddle;
}

// Why the responder refuses a request (the IBA ch. 9 responder error classes, as rxe
// names them: A, C, D, D1, E).
struct Verdict {
  enum class Kind : std::uint8_t { Ok, Rnr, Nak, Drop } kind = Kind::Ok;
  NakCode code = NakCode::InvalidRequest;
  WcStatus recv_status = WcStatus::RemInvReqErr;  // for a receive WQE consumed by the message
  EventType event = EventType::QpReqErr;
  std::string_view why;

  static Verdict ok() { return {}; }
  static Verdict rnr() { return {Kind::Rnr, NakCode::InvalidRequest, WcStatus::Success, EventType::QpReqErr, "no receive WQE"}; }
  static Verdict drop(std::string_view why) { return {Kind::Drop, NakCode::InvalidRequest, WcStatus::Success, EventType::QpReqErr, why}; }
  static Verdict invalid_request(std::string_view why, WcStatus s = WcStatus::RemInvReqErr) {
    return {Kind::Nak, NakCode::InvalidRequest, s, EventType::QpReqErr, why};
  }
  static Verdict access_error(std::string_view why) {
    return {Kind::Nak, NakCode::RemoteAccessError, WcStatus::RemAccessErr, EventType::QpAccessErr, why};
  }
  static Verdict operational_error(std::string_view why, WcStatus s = WcStatus::LocProtErr) {
    return {Kind::Nak, NakCode::RemoteOperationalError, s, EventType::QpFatal, why};
  }
};

// Payload bytes read ahead for the packets the engine is about to send: one or more
// segments, each a part of one message, filled together by one gather (docs/TRANSPORT.md,
// "Read-ahead"). Valid only inside the engine call that filled it (ReadAheadScope): the
// application may rewrite a buffer once its WQE has completed, and a retransmission must
// read memory again.
class ReadAhead {
 public:
  // Whose message the bytes belong to: a send WQE (key: its serial) or a READ's responses
  // (key: the READ's first PSN), on one QP.
  struct Owner {
    const Qp* qp = nullptr;
    std::uint64_t key = 0;
    bool read_response = false;
    bool operator==(const Owner&) const = default;
  };

  ReadAhead() : bytes_(kReadAheadBytes) {}

  // Bytes [offset, offset + size) of `owner`'s message, if a segment holds them.
  std::optional<std::span<const std::uint8_t>> find(const Owner& owner, std::uint64_t offset, std::size_t size) {
    // Packets go out in the order the segments were added: try the last hit and the next first.
    for (std::size_t i = last_hit_; i < segments_.size() && i <= last_hit_ + 1; ++i)
      if (segments_[i].holds(owner, offset, size)) return hit(i, offset, size);
    for (std::size_t i = 0; i < segments_.size(); ++i)
      if (segments_[i].holds(owner, offset, size)) return hit(i, offset, size);
    return std::nullopt;
  }

  // Filling: clear(), then add() a segment per message part (`length` bytes of `owner`'s
  // message from `offset`), which returns where its bytes go, empty if there is no room;
  // then read all of them into filled(). keep_first(n) forgets all but the first n segments.
  void clear() {
    segments_.clear();
    used_ = 0;
    last_hit_ = 0;
  }
  std::span<std::uint8_t> add(const Owner& owner, std::uint64_t offset, std::size_t length) {
    if (length > room()) return {};
    segments_.push_back({owner, offset, length, used_});
    used_ += length;
    return {bytes_.data() + (used_ - length), length};
  }
  std::size_t room() const { return bytes_.size() - used_; }
  std::size_t segments() const { return segments_.size(); }
  std::span<std::uint8_t> filled() { return {bytes_.data(), used_}; }
  void keep_first(std::size_t n) {
    if (n >= segments_.size()) return;
    used_ = segments_[n].at;
    segments_.resize(n);
    last_hit_ = 0;
  }

  // One segment, `window` bytes from `offset`, filled by `read(room)` when the bytes asked
  // for are not held already (size <= window <= kReadAheadBytes). nullopt, and nothing
  // held, if that read failed.
  template <typename Read>
  std::optional<std::span<const std::uint8_t>> get(const Owner& owner, std::uint64_t offset,
                                                   std::size_t size, std::size_t window, Read read) {
    if (auto held = find(owner, offset, size)) return held;
    clear();
    if (size > window) return std::nullopt;
    const std::span<std::uint8_t> room = add(owner, offset, window);
    if (room.size() != window || !read(room)) {
      clear();
      return std::nullopt;
    }
    return find(owner, offset, size);
  }

 private:
  struct Segment {
    Owner owner;
    std::uint64_t offset;  // message offset of the segment's first byte
    std::size_t length;
    std::size_t at;        // where it starts in bytes_
    bool holds(const Owner& o, std::uint64_t from, std::size_t size) const {
      return owner == o && from >= offset && from - offset <= length && size <= length - (from - offset);
    }
  };
  std::span<const std::uint8_t> hit(std::size_t i, std::uint64_t offset, std::size_t size) {
    last_hit_ = i;
    const Segment& s = segments_[i];
    return std::span<const std::uint8_t>(bytes_).subspan(s.at + static_cast<std::size_t>(offset - s.offset), size);
  }

  std::vector<std::uint8_t> bytes_;  // allocated once
  std::vector<Segment> segments_;    // keeps its capacity across clear()
  std::size_t used_ = 0;
  std::size_t last_hit_ = 0;
};

// Forgets the read-ahead when the engine call that may fill it returns, however it returns.
class ReadAheadScope {
 public:
  explicit ReadAheadScope(ReadAhead& r) : r_(r) {}
  ReadAheadScope(const ReadAheadScope&) = delete;
  ReadAheadScope& operator=(const ReadAheadScope&) = delete;
  ~ReadAheadScope() { r_.clear(); }

 private:
  ReadAhead& r_;
};

class Engine::Impl {
 public:
  Impl(EngineHost& host, MrTable& mrs, Dma& dma, EngineObserver* observer);

  // engine.cpp
  std::optional<Qpn> create_qp(const QpInit& init);
  VerbResult destroy_qp(Qpn qpn);
  VerbResult modify_qp(Qpn qpn, const QpAttr& attr, std::uint32_t mask, Instant now);
  std::optional<QpAttr> query_qp(Qpn qpn) const;
  VerbResult post_send(Qpn qpn, SendWr wr, Instant now);
  VerbResult queue_send(Qpn qpn, SendWr wr);
  void start_sends(Qpn qpn, Instant now);
  VerbResult post_recv(Qpn qpn, RecvWr wr);
  void receive(const TransportPacket& packet, const PacketSource& from, Instant now);
  void advance(Instant now);
  void hold_acks(bool on);
  void release_acks();
  void write_not_placed(Qpn qpn, Psn psn);
  std::optional<Instant> next_deadline() const;
  std::size_t deadlines_set() const { return timers_.size(); }
  std::uint32_t unacked_limit() const;
  static bool ack_requested_in_flight(const Requester& r);
  void cut_transmit_budget(Instant now);
  const EngineCounters& counters() const { return counters_; }

 private:
  Qp* find(Qpn qpn);
  const Qp* find(Qpn qpn) const;
  bool headers_present(const TransportPacket& p, OpcodeFlags flags) const;
  void set_state(Qp& qp, QpState to, std::string_view cause);
  void enter_error(Qp& qp, std::string_view cause, std::optional<EventType> event);
  void enter_send_queue_error(Qp& qp, std::string_view cause);
  void flush(Qp& qp);
  void flush_send_queue(Qp& qp);
  void reset(Qp& qp);
  void observe(const Qp& qp, const Bth& bth, PacketDecision d, std::string_view detail);
  // Where a packet goes: the IPv4 address and GRH traffic class of an address vector.
  struct Destination {
    stack::Ipv4Address ip{};
    std::uint8_t traffic_class = 0;
  };
  // The QP's own path (modify_qp's address vector): RC and UC requests, every response.
  static Destination path_of(const Qp& qp) { return {qp.attr.dest_ip, qp.attr.traffic_class}; }
  void emit(Qp& qp, Destination to, const TransportPacket& p, PacketDecision d, std::string_view detail);
  void complete_send(Qp& qp, const SendWqe& w, WcStatus status);
  void complete_recv(Qp& qp, Completion c);

  // requester.cpp
  void pump(Qp& qp, Instant now);
  bool may_start(const Qp& qp, const SendWqe& w) const;
  bool start_wqe(Qp& qp, SendWqe& w);
  bool run_local(Qp& qp, SendWqe& w);
  void complete_local_front(Qp& qp);
  bool send_next_packet(Qp& qp, SendWqe& w, Instant now);
  void send_read_request(Qp& qp, SendWqe& w, TransportPacket& p);
  void send_atomic_request(Qp& qp, SendWqe& w, TransportPacket& p);
  void send_placement_request(Qp& qp, SendWqe& w, TransportPacket& p);
  bool fill_segment(Qp& qp, SendWqe& w, TransportPacket& p);
  std::size_t read_ahead_window(const Qp& qp, const SendWqe& w, std::uint64_t offset, std::size_t size) const;
  std::optional<std::span<const std::uint8_t>> read_payload(Qp& qp, const SendWqe& w, std::uint64_t offset,
                                                            std::size_t size);
  void read_ahead_following(Qp& qp, std::uint32_t psns_left);
  void retransmit_from(Qp& qp, Psn psn, Instant now, std::string_view reason);
  void on_timeout(Qp& qp, Instant now);
  void on_rnr_wait_over(Qp& qp, Instant now);
  void restart_ack_timer(Qp& qp, Instant now);
  void report_drained(Qp& qp);

  // completer.cpp
  void on_response(Qp& qp, const TransportPacket& p, Instant now);
  bool response_in_window(const Requester& r, Psn psn) const;
  enum class AckStop : std::uint8_t { Done, MissingResponse };
  AckStop ack_through(Qp& qp, Psn last, bool& progressed);
  bool acknowledge_through(Qp& qp, Psn last, Instant now);
  void after_progress(Qp& qp, Instant now);
  void pop_front(Qp& qp, WcStatus status);
  void retry_missing_response(Qp& qp, Psn seen, Instant now);
  void keep_ack_timer_alive(Qp& qp, Instant now);
  void note_answer_began(Requester& r);
  void on_ack(Qp& qp, const TransportPacket& p, Instant now);
  void on_nak(Qp& qp, const TransportPacket& p, Instant now);
  void on_rnr_nak(Qp& qp, const TransportPacket& p, Instant now);
  void on_read_response(Qp& qp, const TransportPacket& p, Instant now);
  void on_atomic_ack(Qp& qp, const TransportPacket& p, Instant now);
  void on_empty_read_response(Qp& qp, const TransportPacket& p, Instant now);
  void fail_front(Qp& qp, WcStatus status, std::string_view cause);

  // responder.cpp
  void on_request(Qp& qp, const TransportPacket& p, const PacketSource& from);
  void rc_request(Qp& qp, const TransportPacket& p);
  void uc_request(Qp& qp, const TransportPacket& p);
  void ud_request(Qp& qp, const TransportPacket& p, const PacketSource& from);
  void rc_duplicate(Qp& qp, const TransportPacket& p);
  Verdict check_sequence(const Qp& qp, OpcodeFlags flags) const;
  Verdict check_length(const Qp& qp, const TransportPacket& p, OpcodeFlags flags) const;
  Verdict execute(Qp& qp, const TransportPacket& p);
  Verdict execute_send(Qp& qp, const TransportPacket& p, OpcodeFlags flags);
  Verdict execute_write(Qp& qp, const TransportPacket& p, OpcodeFlags flags);
  Verdict execute_read(Qp& qp, const TransportPacket& p);
  Verdict execute_atomic(Qp& qp, const TransportPacket& p);
  Verdict execute_atomic_write(Qp& qp, const TransportPacket& p);
  Verdict execute_flush(Qp& qp, const TransportPacket& p);
  std::optional<MrFacts> flush_target(const Qp& qp, const Reth& reth, std::uint8_t type, std::uint8_t level) const;
  void finish_placement(Qp& qp, Psn psn);
  Verdict take_receive_wqe(Qp& qp);
  bool remote_readable(const Qp& qp, const Reth& reth) const;
  Verdict start_read_stream(Qp& qp, const Reth& reth, Psn psn, bool duplicate);
  Verdict step_read_stream(Qp& qp);
  void abort_read_stream(Qp& qp, const Verdict& v);
  void end_read_stream(Qp& qp);
  void run_expired_timers(Instant now);
  void step_read_streams();
  bool has_transmit_room() const { return host_.transmit_room() > 0; }
  std::uint32_t transmit_room_packets() const;
  void wait_for_room(Qp& qp);
  void resume_waiting_for_room(Instant now);
  void wait_behind_read(Qp& qp, const TransportPacket& p);
  void run_waiting(Qp& qp);
  void send_atomic_ack(Qp& qp, Psn psn, std::uint64_t original, bool duplicate);
  void send_empty_read_response(Qp& qp, Psn psn, bool duplicate);
  void send_ack(Qp& qp, Psn psn, std::uint8_t syndrome, PacketDecision d, std::string_view why);
  void owe_ack(Qp& qp, Psn psn);
  void answered(Qp& qp, Psn last);
  Verdict unreachable(const MrFacts& mr, std::string_view why, WcStatus status);
  void refuse(Qp& qp, const TransportPacket& p, const Verdict& v);
  void remember(Qp& qp, ReplayEntry e);
  const ReplayEntry* recall(const Qp& qp, Psn psn, ReplayEntry::Kind kind) const;
  void fail_receive_wqe(Qp& qp, const TransportPacket& p, const Verdict& v);
  void abort_uc_message(Qp& qp);

  EngineHost& host_;
  MrTable& mrs_;
  Dma& dma_;
  EngineObserver default_observer_;
  EngineObserver* observer_;
  // Before qps_, so that they outlive the QPs whose hooks they hold.
  TimerQueue timers_;              // every set Deadline of every QP, by time
  boost::intrusive::list<Qp, boost::intrusive::member_hook<Qp, StreamingHook, &Qp::streaming>,
                         boost::intrusive::constant_time_size<false>>
      streaming_;                  // QPs answering a READ a step at a time
  boost::intrusive::list<Qp, boost::intrusive::member_hook<Qp, RoomWaitHook, &Qp::room_wait>,
                         boost::intrusive::constant_time_size<false>>
      room_waiting_;               // requesters stopped for want of transmit room, oldest first
  std::vector<std::pair<Qp*, TimerKind>> due_;  // advance(): the expired deadlines (capacity kept)
  std::vector<Qp*> stepping_;      // advance(): the streaming QPs of this call (capacity kept)
  std::optional<Instant> streams_due_;  // when the earliest unfinished READ may send again
  std::unordered_map<std::uint32_t, std::unique_ptr<Qp>> qps_;
  std::uint32_t next_qpn_ = 17;  // rxe's first QP number as well (0x11 in every capture)
  EngineCounters counters_;
  std::vector<std::uint8_t> scratch_;  // inline payloads
  ReadAhead read_ahead_;               // payloads from registered memory
  std::vector<DmaPiece> gather_pieces_;     // the read-ahead's gather list (capacity kept)
  ResolvedSges following_sges_; // SGEs of a WQE read ahead before it starts
  std::uint64_t next_wqe_serial_ = 1;
  Instant last_now_{};                 // the latest time given: "now" for next_deadline()
  std::size_t transmit_budget_ = kTransmitBudget;  // unacked_limit(): shared by the QPs sending
  Instant next_budget_cut_{};          // a timeout before this does not halve the budget again
  bool hold_acks_ = false;
  std::vector<Qpn> acks_held_;         // QPs whose responder holds an ACK (Responder::held_ack)
};

}  // namespace rrdma::rocev2
