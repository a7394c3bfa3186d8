// What the engine needs from the world, as interfaces the host implements: the link and the
// completion queues (EngineHost), the memory region table (MrTable), memory itself (Dma),
// receive queues (ReceiveQueue, so that an SRQ can stand in for a QP's RQ) and an observer
// of every decision (EngineObserver, no-op by default). The daemon implements them over the
// TAP, process_vm_readv/writev and shared-memory rings; the tests over plain memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string_view>
#include <utility>

#include "rocev2/engine/work.h"
#include "rocev2/packet.h"
#include "stack/addresses.h"

namespace rrdma::rocev2 {

// One outgoing transport packet. `packet.payload` (and the spans inside) are valid only
// during the send_packet() call: the host copies or encapsulates them before returning.
struct OutgoingPacket {
  stack::Ipv4Address dest{};   // the peer's IPv4 address (the GID of RoCE v2)
  Qpn src_qpn{};               // the sending QP: the host derives the UDP source port from it
  TransportPacket packet;
  // The GRH traffic class of the address vector the packet follows (the QP's for RC and UC,
  // responses included; the WR's AH for UD): RoCE v2 carries it as the IPv4 TOS byte.
  std::uint8_t traffic_class = 0;
};

// Facts about a registered memory region, as the host's MR table knows them.
struct MrFacts {
  std::uint32_t pd = 0;          // protection domain handle
  std::uint32_t access = 0;      // access:: bits
  std::uint64_t base = 0;        // first virtual address of the region
  std::uint64_t length = 0;      // bytes
  std::uint64_t handle = 0;      // opaque to the engine; handed back to Dma
  Lkey lkey{};
  Rkey rkey{};
  // A type 2 memory window is used only through the QP it was bound through (IBA 10.6.7.2.2;
  // rxe_lookup_mw compares mw->qp): that QP's number. Empty for regions and type 1 windows.
  std::optional<Qpn> bound_qp;
};

// A BIND_MW work request as the requester executes it: the WR's fields and the QP it came
// through (its PD and number).
struct MwBindRequest {
  MwBind bind;
  std::uint32_t qp_pd = 0;
  Qpn qpn{};
};

class MrTable {
 public:
  virtual ~MrTable() = default;
  virtual std::optional<MrFacts> find_lkey(Lkey key) const = 0;
  virtual std::optional<MrFacts> find_rkey(Rkey key) const = 0;
  // SEND with Invalidate (IBA ch. 10): invalidate `key` if it belongs to `pd` and may
  // be remotely invalidated. False if it may not (the message then fails).
  virtual bool invalidate_rkey(Rkey key, std::uint32_t pd) = 0;
  // The local operations (IBA 10.6.7, 10.6.8), executed by the requester in send-queue order.
  // A table without memory windows has nothing to bind or invalidate: it refuses both, and
  // the WR completes in error (IBV_WC_MW_BIND_ERR / IBV_WC_LOC_QP_OP_ERR).
  // BIND_MW: true if the window is now bound as asked.
  virtual bool bind_mw(const MwBindRequest& /*request*/) { return false; }
  // LOCAL_INV of `key` through a QP of `pd`: true if it was invalidated.
  virtual bool invalidate_local(Rkey /*key*/, std::uint32_t /*pd*/) { return false; }
};

// One piece of a scatter/gather list: `length` bytes at virtual address `addr` of `mr`.
struct DmaPiece {
  MrFacts mr;
  std::uint64_t addr = 0;
  std::uint64_t length = 0;
};

// Moves bytes between the engine and registered memory. The engine has already checked
// key, PD, access and bounds; `addr` is a virtual address inside `mr`. A false / nullopt
// return means the memory could not be reached (e.g. the owning process is gone).
class Dma {
 public:
  virtual ~Dma() = default;
  virtual bool read(const MrFacts& mr, std::uint64_t addr, std::span<std::uint8_t> out) = 0;
  virtual bool write(const MrFacts& mr, std::uint64_t addr, std::span<const std::uint8_t> in) = 0;
  // Reads the concatenation of `pieces` into `out` (its size is their total length). The
  // default reads piece by piece; a host that can move many pieces in one call (a vectored
  // system call) overrides it, which is what the read-ahead's gathers are for.
  virtual bool read_gather(std::span<const DmaPiece> pieces, std::span<std::uint8_t> out);
  // 8-byte atomics at an 8-byte aligned address; return the original value (IBA ch. 9).
  virtual std::optional<std::uint64_t> compare_swap(const MrFacts& mr, std::uint64_t addr,
                                                    std::uint64_t compare, std::uint64_t swap) = 0;
  virtual std::optional<std::uint64_t> fetch_add(const MrFacts& mr, std::uint64_t addr,
                                                 std::uint64_t add) = 0;
  // IBA 1.5 A19.4.2 ATOMIC_WRITE: the 8 bytes land whole, at an 8-byte aligned address,
  // after every write before them. The default is write(); a host that defers writes
  // (combining) places the deferred ones first and stores these 8 bytes in one piece.
  virtual bool atomic_write(const MrFacts& mr, std::uint64_t addr, std::uint64_t value);
  // IBA 1.5 A19.4.1 FLUSH: every write made so far into `mr` has landed where the owner's
  // CPUs see it (global visibility). True when they have; the default has nothing to do
  // (its writes land when write() returns). False if the memory could not be reached.
  virtual bool place_writes(const MrFacts& mr);
  // True when `mr`'s owner no longer exists (its process exited): the host is about to
  // destroy the owner's QPs. The responder then drops a request whose memory failed, as it
  // drops one for a QP that does not exist, instead of NAKing it (Engine::Impl::unreachable).
  virtual bool owner_gone(const MrFacts& mr) const;
};

// A FIFO of receive WQEs. The engine gives each QP its own; an SRQ implements this too and
// is shared by several QPs (create_qp's QpInit::srq).
class ReceiveQueue {
 public:
  virtual ~ReceiveQueue() = default;
  virtual const RecvWr* front() const = 0;  // nullptr when empty
  virtual void pop() = 0;
  virtual bool push(RecvWr wr) = 0;        // false when full
  virtual std::size_t size() const = 0;
};

// The plain bounded FIFO every QP gets as its RQ; usable as an SRQ too.
class FifoReceiveQueue final : public ReceiveQueue {
 public:
  explicit FifoReceiveQueue(std::size_t capacity) : capacity_(capacity) {}
  const RecvWr* front() const override { return wrs_.empty() ? nullptr : &wrs_.front(); }
  void pop() override { wrs_.pop_front(); }
  bool push(RecvWr wr) override {
    if (wrs_.size() >= capacity_) return false;
    wrs_.push_back(std::move(wr));
    return true;
  }
  std::size_t size() const override { return wrs_.size(); }

 private:
  std::size_t capacity_;
  std::deque<RecvWr> wrs_;
};

// transmit_room() of a host with no transmit queue to fill (tests, simulations).
inline constexpr std::size_t kUnlimitedTransmitRoom = static_cast<std::size_t>(-1);

class EngineHost {
 public:
  virtual ~EngineHost() = default;
  virtual void send_packet(const OutgoingPacket& out) = 0;
  // Packets the host can put on its wire now without holding them back: the engine's pacing
  // (docs/TRANSPORT.md, "Pacing"). Requests of every QP type and READ responses go out only
  // while this is above zero; the rest waits until advance() finds room again, as a NIC
  // stops taking work when its transmit ring is full. ACKs, NAKs and atomic responses never
  // wait: each answers a packet received, so they cannot outrun what arrives. A host whose
  // room can run out calls Engine::advance() when room returns (next_deadline() does not
  // count on room it has not got).
  virtual std::size_t transmit_room() { return kUnlimitedTransmitRoom; }
  virtual void complete(const Completion& cqe) = 0;
  virtual void async_event(const AsyncEvent& event) = 0;
};

// What the engine decided about a packet, for tracing (`rrdma-vnic trace`) and tests.
enum class PacketDecision : std::uint8_t {
  Sent,                // a new request, response or ACK went out
  Retransmitted,       // a request sent again (detail: timeout / NAK sequence / RNR)
  Accepted,            // a request executed, or a response that completed work
  Duplicate,           // an old request: re-ACKed, READ re-executed, atomic replayed
  OutOfSequenceNak,    // first packet after a PSN gap: NAK sent (PSN sequence-error NAK rules)
  OutOfSequenceDrop,   // later packets of the same gap: silently dropped
  RnrNak,              // no receive WQE posted
  InvalidRequestNak,   // NAK 0x61
  AccessErrorNak,      // NAK 0x62
  OperationalErrorNak, // NAK 0x63
  AckReceived,         // an ACK / response advanced the completer
  NakReceived,         // a NAK or RNR NAK arrived
  Ignored,             // a response for nothing outstanding, a stale ACK, a CNP
  Dropped,             // unknown QPN, bad opcode for the QP type, wrong state, bad header
  UcMessageDropped,    // UC: the message in progress was dropped after a gap (IBA UC rules)
};

std::string_view to_string(PacketDecision d);
std::string_view to_string(QpState s);

// Reports every QP state transition and every packet decision. Default: nothing.
class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  virtual void on_state_change(Qpn /*qpn*/, QpState /*from*/, QpState /*to*/,
                               std::string_view /*cause*/) {}
  virtual void on_packet(Qpn /*qpn*/, const Bth& /*bth*/, PacketDecision /*decision*/,
                         std::string_view /*detail*/) {}
  // Every completion the engine hands to the host, as it hands it over.
  virtual void on_completion(const Completion& /*cqe*/) {}
};

}  // namespace rrdma::rocev2
