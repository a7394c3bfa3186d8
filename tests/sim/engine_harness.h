// Value-level harness for the engine's unit tests (tests/sim/engine_*_test.cpp): plain
// memory behind MrTable and Dma, a host that records every packet, completion and event,
// an observer that records every decision, and two engines wired as an RC/UC/UD pair.
// Packets move between the engines only when a test says so, so that a test can drop,
// duplicate or reorder any of them by hand.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "rocev2/engine/engine.h"

namespace rrdma::test {

using namespace rrdma::rocev2;

class PlainMemory final : public MrTable, public Dma {
 public:
  // Regions get disjoint virtual addresses; keys are distinct per region and per memory.
  MrFacts add(std::uint32_t pd, std::uint32_t access, std::size_t length, std::uint64_t base) {
    MrFacts f;
    f.pd = pd;
    f.access = access;
    f.base = base;
    f.length = length;
    f.handle = regions_.size();
    f.lkey = Lkey(0x1000u + static_cast<std::uint32_t>(regions_.size()));
    f.rkey = Rkey(0x2000u + static_cast<std::uint32_t>(regions_.size()));
    regions_.push_back({f, std::vector<std::uint8_t>(length), true});
    return f;
  }
  std::span<std::uint8_t> bytes(const MrFacts& mr) { return regions_.at(mr.handle).bytes; }
  std::uint64_t word(const MrFacts& mr, std::uint64_t addr) {
    std::uint64_t v;
    std::memcpy(&v, bytes(mr).data() + (addr - mr.base), 8);
    return v;
  }
  void set_word(const MrFacts& mr, std::uint64_t addr, std::uint64_t v) {
    std::memcpy(bytes(mr).data() + (addr - mr.base), &v, 8);
  }
  int out_of_bounds = 0;  // accesses the engine should have refused
  // Every Dma::read the engine made, to count them (tests/sim/engine_readahead_test.cpp).
  struct Read {
    std::uint64_t addr;
    std::size_t size;
    bool operator==(const Read&) const = default;
  };
  std::vector<Read> reads;
  // Every Dma::read_gather, by its number of pieces (the default implementation then makes
  // one Dma::read per piece, recorded in `reads` too).
  std::vector<std::size_t> gathers;
  bool reads_fail = false;  // Dma::read finds the memory unreachable (its process is gone)
  // Dma::read finds this region's memory unreachable (one buffer of a process unmapped).
  void make_unreadable(const MrFacts& mr) { regions_.at(mr.handle).readable = false; }

  std::optional<MrFacts> find_lkey(Lkey key) const override {
    for (const Region& r : regions_)
      if (r.valid && r.facts.lkey == key) return r.facts;
    return std::nullopt;
  }
  std::optional<MrFacts> find_rkey(Rkey key) const override {
    for (const Region& r : regions_)
      if (r.valid && r.facts.rkey == key) return r.facts;
    return std::nullopt;
  }
  bool invalidate_rkey(Rkey key, std::uint32_t pd) override {
    for (Region& r : regions_)
      if (r.valid && r.facts.rkey == key && r.facts.pd == pd) {
        r.valid = false;
        return true;
      }
    return false;
  }
  // The local operations as the engine hands them over, in order; each answers `local_ok`.
  std::vector<MwBindRequest> binds;
  std::vector<std::pair<Rkey, std::uint32_t>> local_invalidations;
  bool local_ok = true;
  bool bind_mw(const MwBindRequest& request) override {
    binds.push_back(request);
    return local_ok;
  }
  bool invalidate_local(Rkey key, std::uint32_t pd) override {
    local_invalidations.emplace_back(key, pd);
    return local_ok;
  }
  // A type 2 window's facts: only the QP `qpn` may use the region's R_Key.
  void bind_to_qp(const MrFacts& mr, Qpn qpn) { regions_.at(mr.handle).facts.bound_qp = qpn; }

  bool read(const MrFacts& mr, std::uint64_t addr, std::span<std::uint8_t> out) override {
    reads.push_back({addr, out.size()});
    if (reads_fail || !regions_.at(mr.handle).readable) return false;
    std::uint8_t* p = reach(mr, addr, out.size());
    if (!p) return false;
    std::memcpy(out.data(), p, out.size());
    return true;
  }
  bool read_gather(std::span<const DmaPiece> pieces, std::span<std::uint8_t> out) override {
    gathers.push_back(pieces.size());
    return Dma::read_gather(pieces, out);
  }
  bool write(const MrFacts& mr, std::uint64_t addr, std::span<const std::uint8_t> in) override {
    std::uint8_t* p = reach(mr, addr, in.size());
    if (!p) return false;
    std::memcpy(p, in.data(), in.size());
    return true;
  }
  std::optional<std::uint64_t> compare_swap(const MrFacts& mr, std::uint64_t addr, std::uint64_t compare,
                                            std::uint64_t swap) override {
    if (!reach(mr, addr, 8)) return std::nullopt;
    const std::uint64_t old = word(mr, addr);
    if (old == compare) set_word(mr, addr, swap);
    return old;
  }
  int atomic_writes = 0;  // ATOMIC_WRITEs executed (IBA 1.5 A19: never twice for one request)
  bool atomic_write(const MrFacts& mr, std::uint64_t addr, std::uint64_t value) override {
    ++atomic_writes;
    return Dma::atomic_write(mr, addr, value);
  }
  std::optional<std::uint64_t> fetch_add(const MrFacts& mr, std::uint64_t addr, std::uint64_t add) override {
    if (!reach(mr, addr, 8)) return std::nullopt;
    const std::uint64_t old = word(mr, addr);
    set_word(mr, addr, old + add);
    return old;
  }

 private:
  struct Region {
    MrFacts facts;
    std::vector<std::uint8_t> bytes;
    bool valid;
    bool readable = true;
  };
  std::uint8_t* reach(const MrFacts& mr, std::uint64_t addr, std::size_t n) {
    Region& r = regions_.at(mr.handle);
    if (addr < r.facts.base || addr - r.facts.base + n > r.bytes.size()) {
      ++out_of_bounds;
      return nullptr;
    }
    return r.bytes.data() + (addr - r.facts.base);
  }
  std::vector<Region> regions_;
};

// A sent packet with its own copy of the payload.
struct Captured {
  stack::Ipv4Address dest;
  Qpn src_qpn;
  TransportPacket packet;
  std::vector<std::uint8_t> payload;
  TransportPacket view() const {
    TransportPacket p = packet;
    p.payload = payload;
    return p;
  }
};

class RecordingHost final : public EngineHost {
 public:
  std::vector<Captured> sent;
  std::vector<Completion> completions;
  std::vector<AsyncEvent> events;
  void send_packet(const OutgoingPacket& out) override {
    Captured c{out.dest, out.src_qpn, out.packet, {out.packet.payload.begin(), out.packet.payload.end()}};
    c.packet.payload = {};
    sent.push_back(std::move(c));
  }
  void complete(const Completion& cqe) override { completions.push_back(cqe); }
  void async_event(const AsyncEvent& e) override { events.push_back(e); }
  // A transmit queue of this many packets, drained by take_sent(): the engine's pacing
  // (transmit_room). Unset: no limit.
  std::optional<std::size_t> queue_capacity;
  std::size_t transmit_room() override {
    if (!queue_capacity) return kUnlimitedTransmitRoom;
    return *queue_capacity - std::min(*queue_capacity, sent.size());
  }
  std::vector<Captured> take_sent() { return std::exchange(sent, {}); }
  std::vector<Completion> take_completions() { return std::exchange(completions, {}); }
};

struct Decision {
  Qpn qpn;
  Bth bth;
  PacketDecision decision;
  std::string detail;
};

class RecordingObserver final : public EngineObserver {
 public:
  std::vector<Decision> decisions;
  std::vector<std::pair<QpState, QpState>> transitions;
  std::vector<Completion> completions;
  void on_completion(const Completion& c) override { completions.push_back(c); }
  void on_state_change(Qpn, QpState from, QpState to, std::string_view) override { transitions.emplace_back(from, to); }
  void on_packet(Qpn qpn, const Bth& bth, PacketDecision d, std::string_view detail) override {
    decisions.push_back({qpn, bth, d, std::string(detail)});
  }
  int count(PacketDecision d) const {
    int n = 0;
    for (const Decision& x : decisions) n += x.decision == d;
    return n;
  }
};

struct Side {
  explicit Side(stack::Ipv4Address address) : ip(address), engine(host, memory, memory, &observer) {}
  stack::Ipv4Address ip;
  PlainMemory memory;
  RecordingHost host;
  RecordingObserver observer;
  Engine engine;
  Qpn qpn{};
  std::uint32_t pd = 1;

  QpState state() const { return engine.query_qp(qpn)->state; }
};

inline constexpr std::uint32_t kAllRemote = access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead |
                                            access::kRemoteAtomic;

// Two engines, one QP each, connected and in RTS.
struct Pair {
  Side a{stack::Ipv4Address{0x0A4D0003}};  // 10.77.0.3, as in the captures
  Side b{stack::Ipv4Address{0x0A4D0002}};
  Instant now{};
  Psn a_psn{9444582};
  Psn b_psn{12871149};

  explicit Pair(QpType type = QpType::Rc, std::uint32_t mtu = 1024, QpAttr tweak = {}, std::uint32_t tweak_mask = 0) {
    add_connected_qps(type, mtu, tweak, tweak_mask);
  }

  // A new QP on each side, connected to each other in RTS; a.qpn and b.qpn become theirs.
  std::pair<Qpn, Qpn> add_connected_qps(QpType type, std::uint32_t mtu, const QpAttr& tweak = {},
                                        std::uint32_t tweak_mask = 0) {
    QpInit init;
    init.type = type;
    init.pd = a.pd;
    a.qpn = *a.engine.create_qp(init);
    init.pd = b.pd;
    b.qpn = *b.engine.create_qp(init);
    connect(a, b, a_psn, b_psn, type, mtu, tweak, tweak_mask);
    connect(b, a, b_psn, a_psn, type, mtu, tweak, tweak_mask);
    return {a.qpn, b.qpn};
  }

  void connect(Side& self, Side& peer, Psn sq, Psn rq, QpType type, std::uint32_t mtu, const QpAttr& tweak,
               std::uint32_t tweak_mask) {
    using namespace qp_attr;
    QpAttr at;
    at.state = QpState::Init;
    at.access_flags = kAllRemote;
    at.qkey = Qkey(0x11111111);
    REQUIRE(self.engine.modify_qp(self.qpn, at, kState | kAccessFlags | kQkey, now) == VerbResult::Ok);
    at.state = QpState::Rtr;
    at.path_mtu = mtu;
    at.dest_qpn = peer.qpn;
    at.rq_psn = rq;
    at.dest_ip = peer.ip;
    at.max_dest_rd_atomic = 4;
    at.min_rnr_timer = 12;
    std::uint32_t mask = kState | kPathMtu | kAv | kMinRnrTimer;
    if (type != QpType::Ud) mask |= kDestQpn | kRqPsn;
    if (type == QpType::Rc) mask |= kMaxDestRdAtomic;
    REQUIRE(self.engine.modify_qp(self.qpn, at, mask, now) == VerbResult::Ok);
    at.state = QpState::Rts;
    at.sq_psn = sq;
    at.timeout = 14;
    at.retry_cnt = 7;
    at.rnr_retry = 7;
    at.max_rd_atomic = 4;
    mask = kState | kSqPsn;
    if (type == QpType::Rc) mask |= kTimeout | kRetryCnt | kRnrRetry | kMaxQpRdAtomic;
    REQUIRE(self.engine.modify_qp(self.qpn, at, mask, now) == VerbResult::Ok);
    if (tweak_mask) REQUIRE(self.engine.modify_qp(self.qpn, tweak, tweak_mask, now) == VerbResult::Ok);
  }

  // Delivers packets to `to`, from `from`'s address.
  void deliver(Side& from, Side& to, const std::vector<Captured>& packets) {
    for (const Captured& c : packets) {
      const TransportPacket p = c.view();
      to.engine.receive(p, PacketSource{from.ip, 0xC000, {}}, now);
    }
  }
  // Runs what an engine has due now, as the daemon's loop does on every turn: the later
  // steps of a READ being answered (timers due at `now` too).
  void run_due(Side& s) {
    for (int i = 0; i < 100000; ++i) {
      const std::optional<Instant> t = s.engine.next_deadline();
      if (!t || *t > now) return;
      s.engine.advance(now);
    }
    FAIL("an engine had work due forever");
  }
  // As run_due(), and lets time pass while `s` has work due later (READ responses paced after
  // a re-request): `now` moves to each of its deadlines in turn, up to `limit` from now.
  void run_paced(Side& s, Duration limit = std::chrono::milliseconds(10)) {
    const Instant until = now + limit;
    for (int i = 0; i < 100000; ++i) {
      run_due(s);
      const std::optional<Instant> t = s.engine.next_deadline();
      if (!t || *t > until) return;
      now = *t;
    }
    FAIL("an engine had work due forever");
  }
  // Moves time on to the earlier of the two engines' next deadlines and lets both act on it
  // (a retransmission, an ACK timer); false when neither engine waits for anything.
  bool advance_to_next_deadline() {
    std::optional<Instant> t = a.engine.next_deadline();
    const std::optional<Instant> tb = b.engine.next_deadline();
    if (tb && (!t || *tb < *t)) t = tb;
    if (!t) return false;
    now = std::max(now, *t);
    a.engine.advance(now);
    b.engine.advance(now);
    return true;
  }
  // Moves everything sent, back and forth, until both are quiet.
  void exchange() {
    for (int round = 0; round < 1000; ++round) {
      run_due(a);
      run_due(b);
      std::vector<Captured> ab = a.host.take_sent();
      std::vector<Captured> ba = b.host.take_sent();
      if (ab.empty() && ba.empty()) return;
      deliver(a, b, ab);
      deliver(b, a, ba);
    }
    FAIL("the engines never went quiet");
  }
};

inline std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 7 + (i >> 8));
  return v;
}

inline SendWr send_wr(std::uint64_t id, WrOpcode op, const MrFacts& mr, std::uint32_t length,
                      std::uint32_t flags = send_flags::kSignaled) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = op;
  wr.flags = flags;
  wr.sg_list = {Sge{mr.base, length, mr.lkey}};
  return wr;
}

inline RecvWr recv_wr(std::uint64_t id, const MrFacts& mr, std::uint32_t length) {
  return RecvWr{id, {Sge{mr.base, length, mr.lkey}}};
}

}  // namespace rrdma::test
