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
inline constexpr std::uint32_t kPacketsPerAckReq = 64;
// The responder acknowledges at least every this many packets even without AckReq.
inline constexpr std::uint32_t kPacketsPerAck = 64;

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
  AsyncEventType event = AsyncEventType::QpReqErr;
  std::string_view why;

  static Verdict ok() { return {}; }
  static Verdict rnr() { return {Kind::Rnr, NakCode::InvalidRequest, WcStatus::Success, AsyncEventType::QpReqErr, "no receive WQE"}; }
  static Verdict drop(std::string_view why) { return {Kind::Drop, NakCode::InvalidRequest, WcStatus::Success, AsyncEventType::QpReqErr, why}; }
  static Verdict invalid_request(std::string_view why, WcStatus s = WcStatus::RemInvReqErr) {
    return {Kind::Nak, NakCode::InvalidRequest, s, AsyncEventType::QpReqErr, why};
  }
  static Verdict access_error(std::string_view why) {
    return {Kind::Nak, NakCode::RemoteAccessError, WcStatus::RemAccessErr, AsyncEventType::QpAccessErr, why};
  }
  static Verdict operational_error(std::string_view why, WcStatus s = WcStatus::LocProtErr) {
    return {Kind::Nak, NakCode::RemoteOperationalError, s, AsyncEventType::QpFatal, why};
  }
};

// Payload bytes of one message read ahead for the packets the engine is about to send.
// Valid only inside the engine call that filled it (ReadAheadScope): the application may
// rewrite its buffer between two WQEs, and a retransmission must read memory again.
class ReadAhead {
 public:
  // Whose message the bytes belong to: a send WQE or a READ's responses, by QP and first PSN.
  struct Owner {
    const Qp* qp = nullptr;
    Psn first_psn{};
    bool read_response = false;
    bool operator==(const Owner&) const = default;
  };

  ReadAhead() : bytes_(kReadAheadBytes) {}

  // Bytes [offset, offset + size) of `owner`'s message (size <= window <= kReadAheadBytes).
  // When not held, `read(room)` first fills `window` bytes from `offset` on; nullopt (and
  // nothing held) if that read failed.
  template <typename Read>
  std::optional<std::span<const std::uint8_t>> get(const Owner& owner, std::uint64_t offset,
                                                   std::size_t size, std::size_t window, Read read) {
    if (!holds(owner, offset, size)) {
      held_ = false;
      if (size > window || window > bytes_.size()) return std::nullopt;
      if (!read(std::span<std::uint8_t>(bytes_.data(), window))) return std::nullopt;
      held_ = true;
      owner_ = owner;
      begin_ = offset;
      length_ = window;
    }
    return std::span<const std::uint8_t>(bytes_).subspan(static_cast<std::size_t>(offset - begin_), size);
  }
  void clear() { held_ = false; }

 private:
  bool holds(const Owner& owner, std::uint64_t offset, std::size_t size) const {
    return held_ && owner == owner_ && offset >= begin_ && offset - begin_ <= length_ &&
           size <= length_ - (offset - begin_);
  }

  std::vector<std::uint8_t> bytes_;  // allocated once
  bool held_ = false;
  Owner owner_;
  std::uint64_t begin_ = 0;   // message offset of bytes_[0]
  std::size_t length_ = 0;
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
  VerbResult post_recv(Qpn qpn, RecvWr wr);
  void receive(const TransportPacket& packet, const PacketSource& from, Instant now);
  void advance(Instant now);
  void hold_acks(bool on);
  void release_acks();
  std::optional<Instant> next_deadline() const;
  const EngineCounters& counters() const { return counters_; }

 private:
  Qp* find(Qpn qpn);
  const Qp* find(Qpn qpn) const;
  bool headers_present(const TransportPacket& p, OpcodeFlags flags) const;
  void set_state(Qp& qp, QpState to, std::string_view cause);
  void enter_error(Qp& qp, std::string_view cause, std::optional<AsyncEventType> event);
  void enter_send_queue_error(Qp& qp, std::string_view cause);
  void flush(Qp& qp);
  void flush_send_queue(Qp& qp);
  void reset(Qp& qp);
  void observe(const Qp& qp, const Bth& bth, PacketDecision d, std::string_view detail);
  void emit(Qp& qp, stack::Ipv4Address dest, const TransportPacket& p, PacketDecision d,
            std::string_view detail);
  void complete_send(Qp& qp, const SendWqe& w, WcStatus status);
  void complete_recv(Qp& qp, Completion c);

  // requester.cpp
  void pump(Qp& qp, Instant now);
  bool may_start(const Qp& qp, const SendWqe& w) const;
  bool start_wqe(Qp& qp, SendWqe& w);
  bool send_next_packet(Qp& qp, SendWqe& w, Instant now);
  void send_read_request(Qp& qp, SendWqe& w, TransportPacket& p);
  void send_atomic_request(Qp& qp, SendWqe& w, TransportPacket& p);
  bool fill_segment(Qp& qp, SendWqe& w, TransportPacket& p);
  std::size_t read_ahead_window(const Qp& qp, const SendWqe& w, std::uint64_t offset, std::size_t size) const;
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
  void retry_missing_response(Qp& qp, Instant now);
  void on_ack(Qp& qp, const TransportPacket& p, Instant now);
  void on_nak(Qp& qp, const TransportPacket& p, Instant now);
  void on_rnr_nak(Qp& qp, const TransportPacket& p, Instant now);
  void on_read_response(Qp& qp, const TransportPacket& p, Instant now);
  void on_atomic_ack(Qp& qp, const TransportPacket& p, Instant now);
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
  Verdict take_receive_wqe(Qp& qp);
  bool send_read_responses(Qp& qp, const MrFacts* mr, std::uint64_t va, std::uint32_t length,
                           Psn first, bool duplicate);
  void send_atomic_ack(Qp& qp, Psn psn, std::uint64_t original, bool duplicate);
  void send_ack(Qp& qp, Psn psn, std::uint8_t syndrome, PacketDecision d, std::string_view why);
  void owe_ack(Qp& qp, Psn psn);
  void answered(Qp& qp, Psn last);
  void refuse(Qp& qp, const TransportPacket& p, const Verdict& v);
  void remember(Qp& qp, ReplayEntry e);
  const ReplayEntry* recall(const Qp& qp, Psn psn) const;
  void abort_uc_message(Qp& qp);

  EngineHost& host_;
  MrTable& mrs_;
  Dma& dma_;
  EngineObserver default_observer_;
  EngineObserver* observer_;
  std::unordered_map<std::uint32_t, std::unique_ptr<Qp>> qps_;
  std::uint32_t next_qpn_ = 17;  // rxe's first QP number as well (0x11 in every capture)
  EngineCounters counters_;
  std::vector<std::uint8_t> scratch_;  // inline payloads
  ReadAhead read_ahead_;               // payloads from registered memory
  bool hold_acks_ = false;
  std::vector<Qpn> acks_held_;         // QPs whose responder holds an ACK (Responder::held_ack)
};

}  // namespace rrdma::rocev2
