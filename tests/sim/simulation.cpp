#include "tests/sim/simulation.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <sstream>

#include "rocev2/engine/engine.h"
#include "tests/sim/event_queue.h"
#include "tests/sim/node.h"
#include "tests/sim/random.h"

namespace rrdma::sim {
namespace {

using rocev2::Completion;
using rocev2::MrFacts;
using rocev2::Qpn;
using rocev2::QpType;
using rocev2::Sge;
using rocev2::WcOpcode;
using rocev2::WcStatus;
using rocev2::WrOpcode;
namespace access = rocev2::access;
namespace qp_attr = rocev2::qp_attr;

constexpr std::uint32_t kPd = 1;
constexpr std::uint32_t kMtus[] = {256, 512, 1024, 2048, 4096};
constexpr std::uint32_t kUdMtu = 1024;
constexpr std::size_t kGrhLength = 40;   // the GRH area at the head of a UD receive buffer
constexpr std::size_t kAtomicWords = 4;
constexpr std::uint32_t kSgeGap = 16;    // up to this many unused bytes between two SGEs
constexpr int kMaxSges = 4;
constexpr std::uint32_t kQkey = 0x1111'2222;
constexpr std::uint64_t kRecvTag = 1ull << 31;
// WRITE targets: each op in a slot of its own, reused only this many ops later.
constexpr std::size_t kMaxTargetSlots = 64;
constexpr std::uint32_t kLongMessagePackets = 140;  // beyond rxe's AckReq-every-64 policy, a READ step (64) and the RC window (128)

const char* name_of(QpType t) {
  switch (t) {
    case QpType::Rc: return "RC";
    case QpType::Uc: return "UC";
    case QpType::Ud: return "UD";
  }
  return "?";
}

const char* name_of(WrOpcode op) { return rocev2::name(op).data(); }

// The model's expectations, stated from verbs.h and the IBA OpCode table on their own, not
// read from rocev2/verbs_codes.h: the simulation checks the table instead of trusting it.
WcOpcode completion_opcode_of(WrOpcode op) {
  switch (op) {
    case WrOpcode::RdmaWrite:
    case WrOpcode::RdmaWriteWithImm: return WcOpcode::RdmaWrite;
    case WrOpcode::RdmaRead: return WcOpcode::RdmaRead;
    case WrOpcode::AtomicCmpSwp: return WcOpcode::CompSwap;
    case WrOpcode::AtomicFetchAdd: return WcOpcode::FetchAdd;
    default: return WcOpcode::Send;
  }
}

bool is_write(WrOpcode op) { return op == WrOpcode::RdmaWrite || op == WrOpcode::RdmaWriteWithImm; }
bool is_atomic(WrOpcode op) { return op == WrOpcode::AtomicCmpSwp || op == WrOpcode::AtomicFetchAdd; }
bool has_imm(WrOpcode op) { return op == WrOpcode::SendWithImm || op == WrOpcode::RdmaWriteWithImm; }
bool consumes_receive(WrOpcode op) {
  return op == WrOpcode::Send || op == WrOpcode::SendWithImm || op == WrOpcode::SendWithInv ||
         op == WrOpcode::RdmaWriteWithImm;
}

// What the responder's receive queue should see for one message.
struct ExpectedRecv {
  WcOpcode opcode = WcOpcode::Recv;
  std::size_t op = 0;                // index into Flow::ops
  bool with_imm = false;
  std::uint32_t imm = 0;
  bool with_inv = false;
  rocev2::Rkey inv{};
  bool solicited = false;
};

struct Op {
  std::uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::Send;
  std::vector<std::uint8_t> data;    // sent or written; for READ, what should come back
  rocev2::SgeList local;
  std::uint64_t remote_addr = 0;
  std::vector<std::uint8_t> target_before;   // WRITE: the target bytes before the op
  std::uint64_t expected_original = 0;       // atomics
  std::uint32_t imm = 0;
  rocev2::Rkey inv{};
  bool signaled = true;
  bool completed_ok = false;
  bool local_in_src = false;   // READ of a READ-then-SEND pair: lands in the SEND's buffer
  bool fenced = false;         // SEND of such a pair: must wait for the READ (IBA 10.8.3.3)
  bool bad_rkey = false;       // sent with an R_Key that names no region
};

struct PostedRecv {
  std::uint64_t wr_id = 0;
  std::size_t slot = 0;
  rocev2::SgeList sges;
};

struct Flow {
  int id = 0;
  QpType type = QpType::Rc;
  Node* req = nullptr;
  Node* resp = nullptr;
  Qpn req_qpn{}, resp_qpn{};
  std::uint32_t mtu = 1024;
  std::uint32_t max_message = 0;
  std::size_t window = 1;
  std::size_t recv_window = 1;
  std::uint64_t slot_size = 0;
  std::uint64_t recv_slot_size = 0;
  std::uint64_t target_stride = 0;
  std::size_t target_slots = 1;
  MrFacts src, sink;                              // on the requester
  MrFacts recv, target, readable, atomics;        // on the responder
  std::vector<std::uint64_t> atomic_model;
  std::vector<Op> ops;
  std::size_t next_completion = 0;
  std::vector<ExpectedRecv> expected_recvs;
  std::size_t recv_matched = 0;
  std::deque<PostedRecv> posted_recvs;
  std::uint64_t next_recv_id = 0;
  std::vector<std::uint64_t> idle_recvs;          // posted on the requester, never consumed
  std::size_t idle_flushed = 0;
  bool failed = false;                            // RC: retry exceeded seen
  std::uint64_t received = 0;                     // UC/UD messages that arrived
  std::vector<std::uint32_t> deliveries;          // UC/UD: times each expected receive arrived
  std::uint64_t repeated = 0;                     // UC/UD: deliveries beyond the first
  std::uint64_t frames_duplicated = 0;            // by the link, towards the responder QP
  std::optional<std::size_t> twin;                // the flow the other way over the same QPs
  std::optional<Op> queued;                       // the SEND half of a READ-then-SEND pair
};

std::string hex_diff(std::span<const std::uint8_t> got, std::span<const std::uint8_t> want) {
  std::ostringstream s;
  s << "got " << got.size() << " bytes, want " << want.size();
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    if (got[i] != want[i]) {
      s << "; first difference at byte " << i << ": 0x" << std::hex << int{got[i]} << " != 0x" << int{want[i]};
      break;
    }
  }
  return s.str();
}

class Simulation {
 public:
  explicit Simulation(const SimConfig& config);
  SimReport run();

 private:
  // set-up
  void create_flows();
  Flow lay_out_flow(int id, QpType type, Node* req, Node* resp, std::uint32_t mtu);
  void create_flow(int& id, QpType type);
  void bring_up(Node& node, Qpn qpn, QpType type, const rocev2::QpAttr& attr);
  void post_recv(Flow& f, std::size_t slot);
  void post_idle_recvs(Flow& f);
  // work
  void pump();
  void post_work(Flow& f);
  Op make_op(Flow& f, std::size_t index);
  bool make_read_then_send(Flow& f, std::size_t index, Op& read);
  WrOpcode pick_opcode(QpType type);
  std::uint32_t pick_length(std::uint32_t limit_mtu, std::uint32_t max);
  rocev2::SgeList scatter(const MrFacts& mr, std::uint64_t base, std::uint32_t length);
  std::vector<std::uint8_t> gather(SimMemory& mem, const MrFacts& mr, const rocev2::SgeList& sges,
                                   std::size_t length);
  // checks
  void on_completion(Node& node, const Completion& wc);
  void on_send_completion(Flow& f, const Completion& wc);
  void on_recv_completion(Flow& f, const Completion& wc);
  std::string recv_mismatch(const Flow& f, const ExpectedRecv& e, const Completion& wc,
                            std::span<const std::uint8_t> content);
  void check_send_data(Flow& f, const Op& op);
  void final_checks();
  bool match_unreliable(Flow& f, const Completion& wc, std::span<const std::uint8_t> content);
  bool ordered_link() const;
  void count_duplicate(Node& to, const Frame& frame);
  void check_final_write(Flow& f, std::size_t index);
  bool flow_done(const Flow& f) const;
  bool all_done() const;
  void fail(const std::string& what);
  // loop
  std::optional<Instant> next_event() const;
  void step(Instant now);

  SimConfig config_;
  Rng rng_;
  Instant start_{std::chrono::seconds(1)};
  Instant now_ = start_;
  Link a_to_b_, b_to_a_;
  std::unique_ptr<Node> a_, b_;
  std::vector<Flow> flows_;
  EventQueue<std::function<void()>> actions_;
  SimReport report_;
};

Simulation::Simulation(const SimConfig& config)
    : config_(config),
      rng_(config.seed),
      a_to_b_(config.faults, rng_.fork()),
      b_to_a_(config.faults, rng_.fork()) {
  const Endpoint a{{{0x02, 0, 0, 0, 0, 0x0A}}, stack::Ipv4Address{0x0A00'0001}};
  const Endpoint b{{{0x02, 0, 0, 0, 0, 0x0B}}, stack::Ipv4Address{0x0A00'0002}};
  a_ = std::make_unique<Node>("A", a, 0x1000'0000'0000, 0x11);
  b_ = std::make_unique<Node>("B", b, 0x2000'0000'0000, 0x22);
  a_->connect(a_to_b_, b);
  b_->connect(b_to_a_, a);
  a_->set_now(now_);
  b_->set_now(now_);
  a_->engine().hold_acks(config.hold_acks);
  b_->engine().hold_acks(config.hold_acks);
  report_.seed = config.seed;
  switch (config.sabotage) {
    case Sabotage::None: break;
    case Sabotage::FlipDmaWrite:
      a_->memory().flip_bit_of_write(50);
      b_->memory().flip_bit_of_write(50);
      break;
    case Sabotage::AcceptBadIcrc:
      a_->accept_bad_frames();
      b_->accept_bad_frames();
      break;
    case Sabotage::LoseCompletion:
      a_->lose_completion(30);
      b_->lose_completion(30);
      break;
  }
  a_to_b_.on_duplicate([this](const Frame& frame) { count_duplicate(*b_, frame); });
  b_to_a_.on_duplicate([this](const Frame& frame) { count_duplicate(*a_, frame); });
  if (config.cut_after) {
    a_to_b_.cut(start_ + *config.cut_after);
    b_to_a_.cut(start_ + *config.cut_after);
  }
}

void Simulation::fail(const std::string& what) {
  std::ostringstream s;
  s << "[t=" << std::chrono::duration_cast<std::chrono::microseconds>(now_ - start_).count() << "us] " << what;
  report_.failures.push_back(s.str());
}

// ---------------------------------------------------------------- set-up

void Simulation::create_flows() {
  int id = 0;
  for (int i = 0; i < config_.rc_pairs; ++i) create_flow(id, QpType::Rc);
  for (int i = 0; i < config_.uc_pairs; ++i) create_flow(id, QpType::Uc);
  for (int i = 0; i < config_.ud_pairs; ++i) create_flow(id, QpType::Ud);
  for (const auto& f : flows_) report_.rc_flows += f.type == QpType::Rc ? 1 : 0;
}

rocev2::Psn random_psn(Rng& rng) {
  // A quarter of the QPs start just before the 2^24 wrap, to cross it.
  if (rng.below(4) == 0) return rocev2::Psn(0xFF'FFFF - static_cast<std::uint32_t>(rng.below(64)));
  return rocev2::Psn(static_cast<std::uint32_t>(rng.below(1u << 24)));
}

// The buffers of one direction of traffic: gather and scatter buffers on the requester,
// receive buffers, WRITE targets, READ sources and atomic words on the responder.
Flow Simulation::lay_out_flow(int id, QpType type, Node* req, Node* resp, std::uint32_t mtu) {
  Flow f;
  f.id = id;
  f.type = type;
  f.req = req;
  f.resp = resp;
  f.mtu = mtu;
  f.max_message = type == QpType::Ud ? f.mtu : f.mtu <= 512 ? kLongMessagePackets * f.mtu : 3 * f.mtu + 17;
  f.window = rng_.between(1, 24);
  f.recv_window = type == QpType::Rc ? rng_.between(1, 16) : rng_.between(8, 32);
  f.slot_size = f.max_message + kMaxSges * kSgeGap + 64;
  f.recv_slot_size = kGrhLength + f.slot_size;
  f.target_stride = f.max_message + kSgeGap;
  f.target_slots = std::min<std::size_t>(kMaxTargetSlots, static_cast<std::size_t>(config_.ops_per_pair));

  auto& rm = f.req->memory();
  auto& pm = f.resp->memory();
  f.src = rm.register_region(kPd, access::kLocalWrite, f.window * f.slot_size);
  f.sink = rm.register_region(kPd, access::kLocalWrite, f.window * f.slot_size);
  f.recv = pm.register_region(kPd, access::kLocalWrite, f.recv_window * f.recv_slot_size);
  f.target = pm.register_region(kPd, access::kLocalWrite | access::kRemoteWrite,
                                f.target_slots * f.target_stride + kSgeGap);
  f.readable = pm.register_region(kPd, access::kRemoteRead, 4ull * f.max_message);
  f.atomics = pm.register_region(kPd, access::kLocalWrite | access::kRemoteAtomic, kAtomicWords * 8);
  rng_.fill(pm.bytes(f.target));
  rng_.fill(pm.bytes(f.readable));
  rng_.fill(pm.bytes(f.atomics));
  for (std::size_t w = 0; w < kAtomicWords; ++w) f.atomic_model.push_back(pm.load_word(f.atomics, f.atomics.base + 8 * w));
  return f;
}

void Simulation::create_flow(int& id, QpType type) {
  const bool a_requests = rng_.below(2) == 0;
  Node* req = a_requests ? a_.get() : b_.get();
  Node* resp = a_requests ? b_.get() : a_.get();
  const std::uint32_t mtu = type == QpType::Ud ? kUdMtu : kMtus[rng_.below(std::size(kMtus))];
  Flow f = lay_out_flow(id++, type, req, resp, mtu);

  rocev2::QpInit init;
  init.type = type;
  init.pd = kPd;
  auto rq = f.req->engine().create_qp(init);
  auto pq = f.resp->engine().create_qp(init);
  if (!rq || !pq) {
    fail("create_qp refused");
    return;
  }
  f.req_qpn = *rq;
  f.resp_qpn = *pq;

  rocev2::QpAttr req_attr, resp_attr;
  const auto rd_atomic = static_cast<std::uint8_t>(rng_.between(1, 8));
  const auto ack_timeout = config_.ack_timeout ? *config_.ack_timeout : static_cast<std::uint8_t>(rng_.between(6, 9));
  const auto rnr_timer = static_cast<std::uint8_t>(rng_.between(1, 4));
  for (auto* attr : {&req_attr, &resp_attr}) {
    attr->path_mtu = f.mtu;
    attr->timeout = ack_timeout;
    attr->retry_cnt = config_.retry_cnt;
    attr->rnr_retry = config_.rnr_retry;
    attr->min_rnr_timer = rnr_timer;
    attr->max_rd_atomic = rd_atomic;
    attr->max_dest_rd_atomic = rd_atomic;
    attr->qkey = rocev2::Qkey(kQkey);
    attr->access_flags = access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;
  }
  const auto psn_req = random_psn(rng_), psn_resp = random_psn(rng_);
  req_attr.sq_psn = psn_req;
  resp_attr.rq_psn = psn_req;
  resp_attr.sq_psn = psn_resp;
  req_attr.rq_psn = psn_resp;
  req_attr.dest_qpn = f.resp_qpn;
  resp_attr.dest_qpn = f.req_qpn;
  req_attr.dest_ip = f.resp->self().ip;
  resp_attr.dest_ip = f.req->self().ip;
  bring_up(*f.req, f.req_qpn, type, req_attr);
  bring_up(*f.resp, f.resp_qpn, type, resp_attr);

  // Half the connected pairs carry traffic both ways, as rc_pingpong does: each QP is then
  // requester and responder at once, its ACKs and requests interleaved.
  const bool both_ways = type != QpType::Ud && config_.both_ways && rng_.below(2) == 0;
  flows_.push_back(std::move(f));
  const std::size_t first = flows_.size() - 1;
  if (both_ways) {
    Flow back = lay_out_flow(id++, type, resp, req, mtu);
    back.req_qpn = flows_[first].resp_qpn;
    back.resp_qpn = flows_[first].req_qpn;
    back.twin = first;
    flows_[first].twin = flows_.size();
    flows_.push_back(std::move(back));
  }
  for (std::size_t i = first; i < flows_.size(); ++i) {
    Flow& placed = flows_[i];
    for (std::size_t slot = 0; slot < placed.recv_window; ++slot) post_recv(placed, slot);
    if (type == QpType::Rc && !placed.twin) post_idle_recvs(placed);
  }
}

void Simulation::bring_up(Node& node, Qpn qpn, QpType type, const rocev2::QpAttr& attr) {
  auto to = [&](rocev2::QpState state, std::uint32_t mask) {
    rocev2::QpAttr a = attr;
    a.state = state;
    const auto result = node.engine().modify_qp(qpn, a, qp_attr::kState | mask, now_);
    if (result != rocev2::VerbResult::Ok)
      fail(std::string("modify_qp to state ") + std::to_string(static_cast<int>(state)) + " refused on " +
           name_of(type) + " QP " + std::to_string(qpn.value()) + ": " + std::to_string(static_cast<int>(result)));
  };
  const bool connected = type != QpType::Ud;
  to(rocev2::QpState::Init, qp_attr::kPkeyIndex | (connected ? qp_attr::kAccessFlags : qp_attr::kQkey));
  std::uint32_t rtr = 0;
  if (connected) rtr = qp_attr::kAv | qp_attr::kPathMtu | qp_attr::kDestQpn | qp_attr::kRqPsn;
  if (type == QpType::Rc) rtr |= qp_attr::kMaxDestRdAtomic | qp_attr::kMinRnrTimer;
  to(rocev2::QpState::Rtr, rtr);
  std::uint32_t rts = qp_attr::kSqPsn;
  if (type == QpType::Rc) rts |= qp_attr::kTimeout | qp_attr::kRetryCnt | qp_attr::kRnrRetry | qp_attr::kMaxQpRdAtomic;
  to(rocev2::QpState::Rts, rts);
}

rocev2::SgeList Simulation::scatter(const MrFacts& mr, std::uint64_t base, std::uint32_t length) {
  rocev2::SgeList sges;
  if (length == 0) return sges;
  const auto pieces = static_cast<std::uint32_t>(rng_.between(1, std::min<std::uint32_t>(kMaxSges, length)));
  std::uint64_t addr = base;
  std::uint32_t left = length;
  for (std::uint32_t i = 0; i < pieces; ++i) {
    const std::uint32_t still_to_place = pieces - 1 - i;
    const auto piece = i + 1 == pieces ? left : static_cast<std::uint32_t>(rng_.between(1, left - still_to_place));
    addr += rng_.below(kSgeGap);
    sges.push_back(Sge{addr, piece, mr.lkey});
    addr += piece;
    left -= piece;
  }
  return sges;
}

std::vector<std::uint8_t> Simulation::gather(SimMemory& mem, const MrFacts& mr, const rocev2::SgeList& sges,
                                             std::size_t length) {
  std::vector<std::uint8_t> out;
  for (const auto& sge : sges) {
    if (out.size() >= length) break;
    const auto take = std::min<std::size_t>(sge.length, length - out.size());
    auto bytes = mem.bytes(mr, sge.addr, take);
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  return out;
}

void Simulation::post_recv(Flow& f, std::size_t slot) {
  PostedRecv r;
  r.wr_id = (static_cast<std::uint64_t>(f.id) << 32) | kRecvTag | f.next_recv_id++;
  r.slot = slot;
  const std::uint64_t base = f.recv.base + slot * f.recv_slot_size;
  const auto capacity = static_cast<std::uint32_t>(f.max_message + (f.type == QpType::Ud ? kGrhLength : 0));
  r.sges = scatter(f.recv, base, capacity);
  auto area = f.resp->memory().bytes(f.recv, base, f.recv_slot_size);
  std::fill(area.begin(), area.end(), std::uint8_t{0xEE});
  rocev2::RecvWr wr{r.wr_id, r.sges};
  if (f.resp->engine().post_recv(f.resp_qpn, wr) != rocev2::VerbResult::Ok) {
    fail("post_recv refused on flow " + std::to_string(f.id));
    return;
  }
  f.posted_recvs.push_back(std::move(r));
}

// Receives on the requester's QP that no message will consume: they must be flushed (and
// only then complete) if the QP goes to the error state.
void Simulation::post_idle_recvs(Flow& f) {
  for (int i = 0; i < 2; ++i) {
    const std::uint64_t id = (static_cast<std::uint64_t>(f.id) << 32) | kRecvTag | (1u << 30) | i;
    rocev2::RecvWr wr{id, {Sge{f.sink.base, 8, f.sink.lkey}}};
    if (f.req->engine().post_recv(f.req_qpn, wr) != rocev2::VerbResult::Ok) fail("idle post_recv refused");
    f.idle_recvs.push_back(id);
  }
}

// ---------------------------------------------------------------- work

WrOpcode Simulation::pick_opcode(QpType type) {
  static constexpr WrOpcode kRc[] = {WrOpcode::Send, WrOpcode::Send, WrOpcode::SendWithImm, WrOpcode::SendWithInv,
                                     WrOpcode::RdmaWrite, WrOpcode::RdmaWrite, WrOpcode::RdmaWriteWithImm,
                                     WrOpcode::RdmaRead, WrOpcode::RdmaRead, WrOpcode::AtomicCmpSwp,
                                     WrOpcode::AtomicFetchAdd};
  static constexpr WrOpcode kUc[] = {WrOpcode::Send, WrOpcode::SendWithImm, WrOpcode::RdmaWrite,
                                     WrOpcode::RdmaWriteWithImm};
  static constexpr WrOpcode kUd[] = {WrOpcode::Send, WrOpcode::SendWithImm};
  switch (type) {
    case QpType::Rc: return kRc[rng_.below(std::size(kRc))];
    case QpType::Uc: return kUc[rng_.below(std::size(kUc))];
    case QpType::Ud: return kUd[rng_.below(std::size(kUd))];
  }
  return WrOpcode::Send;
}

// Sizes from 0 to a few MTUs, weighted towards the edges where segmentation goes wrong,
// and now and then (on QPs with a small MTU) a message of more than 64 packets, where the
// requester must ask for an ACK within the message.
std::uint32_t Simulation::pick_length(std::uint32_t mtu, std::uint32_t max) {
  const std::uint64_t few = 3ull * mtu + 17;
  const std::uint64_t r = rng_.below(20);
  std::uint64_t n = 0;
  if (r == 0) n = 0;
  else if (r <= 2) n = rng_.between(1, 64);
  else if (r <= 4) n = mtu * rng_.between(1, 3);                             // exact multiples
  else if (r <= 6) n = mtu * rng_.between(1, 3) + rng_.between(0, 2) - 1;    // one either side
  else if (r <= 10) n = rng_.between(0, mtu);
  else if (r == 11 && max > few) n = rng_.between(few, max);
  else n = rng_.between(0, few);
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(n, max));
}

// A READ into a local buffer, then a fenced SEND of that same buffer: the SEND must carry
// what the READ brought, which only holds if the fence held it back until the READ's
// response had landed. The READ lands in the SEND's own slot, so the pair needs the
// slot after it free: the window must have room for both.
bool Simulation::make_read_then_send(Flow& f, std::size_t index, Op& read) {
  const bool room = f.ops.size() + 2 - f.next_completion <= f.window &&
                    index + 2 <= static_cast<std::size_t>(config_.ops_per_pair);
  if (f.type != QpType::Rc || !room || rng_.below(16) != 0) return false;
  const auto length = pick_length(f.mtu, f.max_message);
  read.opcode = WrOpcode::RdmaRead;
  read.local_in_src = true;
  read.remote_addr = f.readable.base + rng_.below(f.readable.length - length + 1);
  auto remote = f.resp->memory().bytes(f.readable, read.remote_addr, length);
  read.data.assign(remote.begin(), remote.end());
  const std::uint64_t send_slot = ((index + 1) % f.window) * f.slot_size;
  read.local = scatter(f.src, f.src.base + send_slot, length);
  auto area = f.req->memory().bytes(f.src, f.src.base + send_slot, f.slot_size);
  std::fill(area.begin(), area.end(), std::uint8_t{0xEE});
  Op send;
  send.wr_id = (static_cast<std::uint64_t>(f.id) << 32) | (index + 1);
  send.opcode = WrOpcode::Send;
  send.fenced = true;
  send.data = read.data;
  send.local = read.local;
  f.queued = std::move(send);
  return true;
}

Op Simulation::make_op(Flow& f, std::size_t index) {
  if (f.queued) return *std::exchange(f.queued, std::nullopt);
  Op op;
  op.wr_id = (static_cast<std::uint64_t>(f.id) << 32) | index;
  if (make_read_then_send(f, index, op)) return op;
  op.opcode = pick_opcode(f.type);
  const std::uint64_t slot_base = (index % f.window) * f.slot_size;
  auto& pm = f.resp->memory();
  auto& rm = f.req->memory();
  if (op.opcode == WrOpcode::RdmaRead) {
    const auto length = pick_length(f.mtu, f.max_message);
    op.remote_addr = f.readable.base + rng_.below(f.readable.length - length + 1);
    auto remote = pm.bytes(f.readable, op.remote_addr, length);
    op.data.assign(remote.begin(), remote.end());
    op.local = scatter(f.sink, f.sink.base + slot_base, length);
    auto area = rm.bytes(f.sink, f.sink.base + slot_base, f.slot_size);
    std::fill(area.begin(), area.end(), std::uint8_t{0xEE});
    return op;
  }
  if (is_atomic(op.opcode)) {
    const auto word = rng_.below(kAtomicWords);
    op.remote_addr = f.atomics.base + 8 * word;
    op.local = {Sge{f.sink.base + slot_base, 8, f.sink.lkey}};
    std::uint64_t& model = f.atomic_model[word];
    op.expected_original = model;
    op.data.resize(16);
    const std::uint64_t operand = rng_.next();
    // Half the compare-swaps compare equal, so that both outcomes happen.
    const std::uint64_t compare = rng_.below(2) == 0 ? model : rng_.next();
    std::memcpy(op.data.data(), &operand, 8);
    std::memcpy(op.data.data() + 8, &compare, 8);
    if (op.opcode == WrOpcode::AtomicFetchAdd) model += operand;
    else if (model == compare) model = operand;
    return op;
  }
  const auto length = pick_length(f.mtu, f.max_message);
  op.data.resize(length);
  rng_.fill(op.data);
  op.local = scatter(f.src, f.src.base + slot_base, length);
  std::size_t at = 0;
  for (const auto& sge : op.local) {
    auto piece = rm.bytes(f.src, sge.addr, sge.length);
    std::copy_n(op.data.begin() + static_cast<std::ptrdiff_t>(at), sge.length, piece.begin());
    at += sge.length;
  }
  if (has_imm(op.opcode)) op.imm = static_cast<std::uint32_t>(rng_.next());
  if (is_write(op.opcode)) {
    op.remote_addr = f.target.base + (index % f.target_slots) * f.target_stride + rng_.below(kSgeGap);
    auto before = pm.bytes(f.target, op.remote_addr, length);
    op.target_before.assign(before.begin(), before.end());
  }
  if (op.opcode == WrOpcode::SendWithInv) {
    op.inv = pm.register_region(kPd, access::kRemoteRead | access::kRemoteWrite, 64, true).rkey;
  }
  return op;
}

void Simulation::post_work(Flow& f) {
  while (!f.failed && f.ops.size() < static_cast<std::size_t>(config_.ops_per_pair) &&
         f.ops.size() - f.next_completion < f.window && report_.failures.empty()) {
    const std::size_t index = f.ops.size();
    Op op = make_op(f, index);
    rocev2::SendWr wr;
    wr.wr_id = op.wr_id;
    wr.opcode = op.opcode;
    // Unsignaled now and then, but never the last of a window: some completion must come
    // back to free the window (and a successful unsignaled WR completes silently).
    const bool window_end = (index + 1) % f.window == 0 || index + 1 == static_cast<std::size_t>(config_.ops_per_pair);
    op.signaled = window_end || rng_.below(3) != 0;
    wr.flags = op.signaled ? rocev2::send_flags::kSignaled : 0;
    if (rng_.below(8) == 0) wr.flags |= rocev2::send_flags::kSolicited;
    if (op.fenced || (f.type == QpType::Rc && rng_.below(10) == 0)) wr.flags |= rocev2::send_flags::kFence;
    wr.sg_list = op.local;
    // Small SENDs and WRITEs go inline now and then (copied at post time).
    if (!is_atomic(op.opcode) && op.opcode != WrOpcode::RdmaRead && !op.fenced && op.data.size() <= 64 &&
        rng_.below(4) == 0) {
      wr.flags |= rocev2::send_flags::kInline;
      wr.inline_data = op.data;
    }
    wr.imm_data = op.imm;
    wr.invalidate_rkey = op.inv;
    wr.remote_addr = op.remote_addr;
    if (is_write(op.opcode)) wr.rkey = f.target.rkey;
    if (op.opcode == WrOpcode::RdmaRead) wr.rkey = f.readable.rkey;
    if (is_atomic(op.opcode)) {
      wr.rkey = f.atomics.rkey;
      std::uint64_t operand, compare;
      std::memcpy(&operand, op.data.data(), 8);
      std::memcpy(&compare, op.data.data() + 8, 8);
      wr.compare_add = op.opcode == WrOpcode::AtomicFetchAdd ? operand : compare;
      wr.swap = operand;
    }
    // Now and then (if the scenario asks) an R_Key that names no region: the responder must
    // refuse it with a remote access error NAK, and the requester's QP goes to ERR. Not on
    // zero-length READs and WRITEs: they touch no memory and their R_Key goes unchecked.
    const bool remote = is_atomic(op.opcode) ||
                        ((is_write(op.opcode) || op.opcode == WrOpcode::RdmaRead) && !op.data.empty());
    if (f.type == QpType::Rc && remote && !op.local_in_src && config_.bad_rkey_one_in != 0 &&
        rng_.below(config_.bad_rkey_one_in) == 0) {
      wr.rkey = rocev2::Rkey(wr.rkey.value() ^ 0x00F0'0000);
      op.bad_rkey = true;
    }
    if (f.type == QpType::Ud) {
      wr.ud_dest_ip = f.resp->self().ip;
      wr.ud_remote_qpn = f.resp_qpn;
      wr.ud_remote_qkey = rocev2::Qkey(kQkey);
    }
    if (consumes_receive(op.opcode)) {
      ExpectedRecv e;
      e.op = index;
      e.opcode = op.opcode == WrOpcode::RdmaWriteWithImm ? WcOpcode::RecvRdmaWithImm : WcOpcode::Recv;
      e.with_imm = has_imm(op.opcode);
      e.imm = op.imm;
      e.with_inv = op.opcode == WrOpcode::SendWithInv;
      e.inv = op.inv;
      e.solicited = (wr.flags & rocev2::send_flags::kSolicited) != 0;
      f.expected_recvs.push_back(e);
    }
    f.ops.push_back(std::move(op));
    f.req->set_now(now_);
    const auto result = f.req->engine().post_send(f.req_qpn, std::move(wr), now_);
    if (result != rocev2::VerbResult::Ok) {
      fail("post_send of " + std::string(name_of(f.ops.back().opcode)) + " refused on " + name_of(f.type) +
           " flow " + std::to_string(f.id) + ": " + std::to_string(static_cast<int>(result)));
    }
  }
}

void Simulation::pump() {
  for (Node* node : {a_.get(), b_.get()}) {
    for (const auto& wc : node->take_completions()) on_completion(*node, wc);
    node->take_async_events();
  }
  for (auto& f : flows_) post_work(f);
  // Posting may complete work at once (UC and UD complete when sent): collect those too.
  for (Node* node : {a_.get(), b_.get()}) {
    for (const auto& wc : node->take_completions()) on_completion(*node, wc);
  }
}

// ---------------------------------------------------------------- checks

void Simulation::on_completion(Node& node, const Completion& wc) {
  if (!report_.failures.empty()) return;   // the first failure is the one to read; the rest follow from it
  if (wc.send_queue) {
    for (auto& f : flows_)
      if (f.req == &node && f.req_qpn == wc.qpn) return on_send_completion(f, wc);
  } else {
    for (auto& f : flows_)
      if (f.resp == &node && f.resp_qpn == wc.qpn) return on_recv_completion(f, wc);
    // Only the idle receives live on the RQ of a requester with no traffic towards it.
    for (auto& f : flows_) {
      if (f.req != &node || f.req_qpn != wc.qpn) continue;
      if (std::find(f.idle_recvs.begin(), f.idle_recvs.end(), wc.wr_id) == f.idle_recvs.end())
        return fail("flow " + std::to_string(f.id) + ": unknown receive completion on the requester");
      if (wc.status != WcStatus::WrFlushErr)
        return fail("flow " + std::to_string(f.id) + ": idle receive completed, and not as flushed");
      ++f.idle_flushed;   // final_checks() demands the QP be in error then
      return;
    }
  }
  fail("completion for unknown QP " + std::to_string(wc.qpn.value()) + " on node " + node.name() +
       (wc.send_queue ? " (send queue)" : " (receive queue)"));
}

void Simulation::on_send_completion(Flow& f, const Completion& wc) {
  const std::string where = std::string(name_of(f.type)) + " flow " + std::to_string(f.id);
  if (f.next_completion >= f.ops.size())
    return fail(where + ": send completion wr_id " + std::to_string(wc.wr_id) + " with nothing outstanding");
  // Successful unsignaled WRs complete silently; a completion for a later WR says they are
  // done, since a send queue completes in order. Errors and flushes always complete.
  while (!f.failed && f.next_completion < f.ops.size() && f.ops[f.next_completion].wr_id != wc.wr_id &&
         !f.ops[f.next_completion].signaled) {
    Op& silent = f.ops[f.next_completion++];
    silent.completed_ok = true;
    ++report_.ops_completed;
    check_send_data(f, silent);
  }
  if (f.next_completion >= f.ops.size())
    return fail(where + ": send completion wr_id " + std::to_string(wc.wr_id) + " for nothing outstanding");
  Op& op = f.ops[f.next_completion];
  const std::string what = where + " op " + std::to_string(f.next_completion) + " " + name_of(op.opcode);
  if (wc.wr_id != op.wr_id)
    return fail(what + ": completed out of order or twice (got wr_id " + std::to_string(wc.wr_id & 0xFFFF'FFFF) + ")");
  ++f.next_completion;
  if (f.failed) {
    if (wc.status != WcStatus::WrFlushErr)
      fail(what + ": after retry-exceeded, status " + std::to_string(static_cast<int>(wc.status)) + " instead of flush");
    return;
  }
  // A bad R_Key: the responder NAKs it once and its QP goes to ERR. The requester then gets
  // the remote access error, or, when that NAK or the responses to an earlier READ or
  // atomic were lost, retries into the dead QP until retry-exceeded.
  const bool bad_key_ahead = std::any_of(f.ops.begin() + static_cast<std::ptrdiff_t>(f.next_completion - 1),
                                         f.ops.end(), [](const Op& o) { return o.bad_rkey; });
  if (bad_key_ahead) {
    const auto peer = f.resp->engine().query_qp(f.resp_qpn);
    const bool peer_dead = peer && peer->state == rocev2::QpState::Err;
    const bool access_error = op.bad_rkey && wc.status == WcStatus::RemAccessErr;
    if (access_error || (wc.status == WcStatus::RetryExcErr && peer_dead)) {
      f.failed = true;
      ++report_.rc_qps_failed;
      ++report_.rc_qps_access_failed;
      return;
    }
    if (op.bad_rkey)
      return fail(what + ": sent with a bad R_Key, completed with status " + std::to_string(static_cast<int>(wc.status)));
  }
  const bool retry_exceeded = wc.status == WcStatus::RetryExcErr && config_.allow_retry_exceeded;
  const bool rnr_exceeded = wc.status == WcStatus::RnrRetryExcErr && config_.stop_receives_after.has_value();
  if (f.type == QpType::Rc && (retry_exceeded || rnr_exceeded)) {
    f.failed = true;
    ++report_.rc_qps_failed;
    if (rnr_exceeded) ++report_.rc_qps_rnr_failed;
    return;
  }
  if (wc.status != WcStatus::Success)
    return fail(what + ": status " + std::to_string(static_cast<int>(wc.status)));
  if (wc.opcode != completion_opcode_of(op.opcode))
    return fail(what + ": completion opcode " + std::to_string(static_cast<int>(wc.opcode)));
  op.completed_ok = true;
  ++report_.ops_completed;
  check_send_data(f, op);
}

void Simulation::check_send_data(Flow& f, const Op& op) {
  const std::string what = std::string(name_of(f.type)) + " flow " + std::to_string(f.id) + " " + name_of(op.opcode) +
                           " wr " + std::to_string(op.wr_id & 0xFFFF'FFFF);
  if (op.opcode == WrOpcode::RdmaRead) {
    auto got = gather(f.req->memory(), op.local_in_src ? f.src : f.sink, op.local, op.data.size());
    if (got != op.data) fail(what + ": READ data in local buffers wrong: " + hex_diff(got, op.data));
  } else if (is_atomic(op.opcode)) {
    const std::uint64_t got = f.req->memory().load_word(f.sink, op.local[0].addr);
    if (got != op.expected_original)
      fail(what + ": atomic returned " + std::to_string(got) + ", the model says " + std::to_string(op.expected_original));
  } else if (is_write(op.opcode) && f.type == QpType::Rc) {
    auto got = f.resp->memory().bytes(f.target, op.remote_addr, op.data.size());
    if (!std::equal(got.begin(), got.end(), op.data.begin(), op.data.end()))
      fail(what + ": WRITE target differs at completion: " + hex_diff(got, op.data));
  }
}

std::string Simulation::recv_mismatch(const Flow& f, const ExpectedRecv& e, const Completion& wc,
                                      std::span<const std::uint8_t> content) {
  const Op& op = f.ops[e.op];
  if (wc.opcode != e.opcode) return "opcode " + std::to_string(static_cast<int>(wc.opcode));
  if (((wc.flags & rocev2::wc_flags::kWithImm) != 0) != e.with_imm) return "immediate flag";
  if (e.with_imm && wc.imm_data != e.imm) return "immediate data";
  if (((wc.flags & rocev2::wc_flags::kWithInv) != 0) != e.with_inv) return "invalidate flag";
  if (e.with_inv && wc.invalidated_rkey != e.inv) return "invalidated R_Key";
  if (wc.solicited != e.solicited) return "solicited event flag";
  if (e.opcode == WcOpcode::RecvRdmaWithImm) {
    // A UC WRITE may arrive after later ones (the link reorders, UC does not mind) and a
    // later WRITE may already have reused its target slot: its immediate identifies it then,
    // and final_checks() vets the bytes.
    if (f.type != QpType::Rc && e.op + f.target_slots < f.ops.size()) return {};
    auto target = f.resp->memory().bytes(f.target, op.remote_addr, op.data.size());
    if (!std::equal(target.begin(), target.end(), op.data.begin(), op.data.end()))
      return "WRITE target at its immediate: " + hex_diff(target, op.data);
    return {};
  }
  const std::size_t grh = f.type == QpType::Ud ? kGrhLength : 0;
  if (wc.byte_len != op.data.size() + grh)
    return "byte_len " + std::to_string(wc.byte_len) + " for a message of " + std::to_string(op.data.size());
  if (content.size() < grh || !std::equal(content.begin() + grh, content.end(), op.data.begin(), op.data.end()))
    return "data: " + hex_diff(content.subspan(std::min(grh, content.size())), op.data);
  if (f.type == QpType::Ud) {
    if ((wc.flags & rocev2::wc_flags::kGrh) == 0) return "no GRH flag";
    if (wc.src_qp != f.req_qpn) return "source QP " + std::to_string(wc.src_qp.value());
    // RoCE v2 over IPv4: 20 zero bytes, then the packet's IPv4 header (PROTOCOL.md).
    if (std::any_of(content.begin(), content.begin() + 20, [](std::uint8_t b) { return b != 0; }))
      return "GRH area: first 20 bytes not zero";
    if (content[20] != 0x45) return "GRH area: no IPv4 header at byte 20";
    if (load_be32(content, 20 + 12) != f.req->self().ip.value) return "GRH area: IPv4 source address";
  }
  return {};
}

void Simulation::on_recv_completion(Flow& f, const Completion& wc) {
  const std::string where = std::string(name_of(f.type)) + " flow " + std::to_string(f.id);
  if (f.posted_recvs.empty() || f.posted_recvs.front().wr_id != wc.wr_id)
    return fail(where + ": receive completed out of order or twice");
  PostedRecv r = std::move(f.posted_recvs.front());
  f.posted_recvs.pop_front();
  // Receives are flushed when the responder's QP is in error: when it failed as requester
  // of the other direction (a QP carrying traffic both ways dies as a whole), or after it
  // refused a bad R_Key.
  if (wc.status == WcStatus::WrFlushErr) {
    const auto attr = f.resp->engine().query_qp(f.resp_qpn);
    if (attr && attr->state == rocev2::QpState::Err) return;
  }
  if (wc.status != WcStatus::Success)
    return fail(where + ": receive status " + std::to_string(static_cast<int>(wc.status)));
  const auto content = gather(f.resp->memory(), f.recv, r.sges, wc.byte_len);
  if (f.type == QpType::Rc) {
    if (f.recv_matched >= f.expected_recvs.size()) return fail(where + ": a receive completed for no message");
    const ExpectedRecv& e = f.expected_recvs[f.recv_matched];
    auto why = recv_mismatch(f, e, wc, content);
    if (!why.empty())
      return fail(where + " message " + std::to_string(f.recv_matched) + " (op " + std::to_string(e.op) + " " +
                  name_of(f.ops[e.op].opcode) + "): " + why);
    if (e.with_inv && f.resp->memory().is_valid(e.inv)) return fail(where + ": R_Key not invalidated");
    ++f.recv_matched;
  } else if (!match_unreliable(f, wc, content)) {
    return;
  }
  // Put a receive back, sometimes late so that the requester meets RNR NAKs (RC) or drops (UC/UD).
  if (config_.stop_receives_after && now_ - start_ >= *config_.stop_receives_after) return;
  const std::size_t slot = r.slot;
  const int flow = f.id;
  if (rng_.below(f.type == QpType::Rc ? 4 : 16) == 0) {
    actions_.schedule(now_ + std::chrono::microseconds(rng_.between(1, 300)), [this, flow, slot] {
      post_recv(flows_[static_cast<std::size_t>(flow)], slot);
    });
  } else {
    post_recv(f, slot);
  }
}

// UC and UD may lose messages. Over a link that neither reorders nor duplicates, what
// arrives must be a subsequence of what was sent. Otherwise order is not promised (UD has
// no PSN check; UC starts a new message at any FIRST/ONLY whatever its PSN, IBA 9.8.3, as
// rxe does), and a message may arrive once more per copy the link made; never corrupted.
bool Simulation::match_unreliable(Flow& f, const Completion& wc, std::span<const std::uint8_t> content) {
  const std::string where = std::string(name_of(f.type)) + " flow " + std::to_string(f.id);
  f.deliveries.resize(f.expected_recvs.size(), 0);
  const std::size_t from = ordered_link() ? f.recv_matched : 0;
  std::optional<std::size_t> first_match, first_new;
  for (std::size_t i = from; i < f.expected_recvs.size() && !first_new; ++i) {
    if (!recv_mismatch(f, f.expected_recvs[i], wc, content).empty()) continue;
    if (!first_match) first_match = i;
    if (f.deliveries[i] == 0) first_new = i;
  }
  const auto chosen = first_new ? first_new : first_match;
  if (!chosen || (ordered_link() && !first_new)) {
    fail(where + ": a message that matches no message sent (corrupted, invented, reordered or repeated); "
                 "against the next expected: " +
         (f.recv_matched < f.expected_recvs.size() ? recv_mismatch(f, f.expected_recvs[f.recv_matched], wc, content)
                                                   : std::string("none left")));
    return false;
  }
  if (f.deliveries[*chosen]++ > 0) ++f.repeated;
  f.recv_matched = std::max(f.recv_matched, *chosen + 1);
  ++f.received;
  ++report_.uc_ud_received;
  return true;
}

bool Simulation::ordered_link() const {
  const auto& faults = config_.faults;
  return faults.reorder_ppm == 0 && faults.duplicate_ppm == 0 && faults.jitter == Duration{0};
}

void Simulation::count_duplicate(Node& to, const Frame& frame) {
  auto decoded = decode_frame(frame);
  if (!decoded) return;
  for (auto& f : flows_)
    if (f.resp == &to && f.resp_qpn == decoded->packet.bth.dest_qp) ++f.frames_duplicated;
}

// An RC WRITE that completed must still be there. Otherwise (UC, or RC that never
// completed) each byte must be one some WRITE into that slot put there, or what was there
// before: UC may deliver part of a message (IBA 9.8.3) but never invent bytes.
void Simulation::check_final_write(Flow& f, std::size_t index) {
  const Op& op = f.ops[index];
  const std::string where = std::string(name_of(f.type)) + " flow " + std::to_string(f.id) + " WRITE op " +
                            std::to_string(index);
  auto now_bytes = f.resp->memory().bytes(f.target, op.remote_addr, op.data.size());
  if (f.type == QpType::Rc && op.completed_ok) {
    if (!std::equal(now_bytes.begin(), now_bytes.end(), op.data.begin(), op.data.end()))
      fail(where + ": target changed after completion: " + hex_diff(now_bytes, op.data));
    return;
  }
  auto byte_explained = [&](std::uint64_t addr, std::uint8_t value) {
    for (std::size_t j = index % f.target_slots; j <= index; j += f.target_slots) {
      const Op& other = f.ops[j];
      if (!is_write(other.opcode) || addr < other.remote_addr || addr >= other.remote_addr + other.data.size()) continue;
      const std::size_t at = addr - other.remote_addr;
      if (other.data[at] == value || other.target_before[at] == value) return true;
    }
    return false;
  };
  for (std::size_t i = 0; i < now_bytes.size(); ++i) {
    if (!byte_explained(op.remote_addr + i, now_bytes[i])) {
      fail(where + ": target byte " + std::to_string(i) + " is neither old nor written data");
      return;
    }
  }
}

bool Simulation::flow_done(const Flow& f) const {
  if (f.failed) return f.next_completion == f.ops.size() && f.idle_flushed == f.idle_recvs.size();
  if (f.ops.size() < static_cast<std::size_t>(config_.ops_per_pair) || f.next_completion < f.ops.size()) return false;
  return f.type != QpType::Rc || f.recv_matched == f.expected_recvs.size();
}

bool Simulation::all_done() const {
  return std::all_of(flows_.begin(), flows_.end(), [this](const Flow& f) { return flow_done(f); }) &&
         !a_to_b_.next_delivery() && !b_to_a_.next_delivery();
}

void Simulation::final_checks() {
  for (Node* node : {a_.get(), b_.get()}) {
    for (const auto& v : node->memory().violations()) fail("node " + node->name() + ": memory " + v);
    // Every frame the link mangled failed its ICRC before the engine saw it, and both
    // engines speak the same protocol: nothing may look malformed or misaddressed.
    const auto& c = node->engine().counters();
    if (c.unknown_qpn + c.bad_opcode + c.bad_header + c.qkey_mismatch != 0)
      fail("node " + node->name() + ": engine counted malformed packets: unknown QPN " + std::to_string(c.unknown_qpn) +
           ", bad opcode " + std::to_string(c.bad_opcode) + ", bad header " + std::to_string(c.bad_header) +
           ", Q_Key mismatch " + std::to_string(c.qkey_mismatch));
  }
  for (auto& f : flows_) {
    const std::string where = std::string(name_of(f.type)) + " flow " + std::to_string(f.id);
    auto& pm = f.resp->memory();
    if (!f.failed) {
      for (std::size_t w = 0; w < kAtomicWords; ++w) {
        if (pm.load_word(f.atomics, f.atomics.base + 8 * w) != f.atomic_model[w])
          fail(where + ": atomic word " + std::to_string(w) + " differs from the model at the end");
      }
    }
    for (std::size_t i = 0; i < f.ops.size(); ++i) {
      // Only the last WRITE into each target slot is still there to check.
      if (is_write(f.ops[i].opcode) && i + f.target_slots >= f.ops.size()) check_final_write(f, i);
    }
    if (f.idle_flushed != (f.failed ? f.idle_recvs.size() : 0))
      fail(where + ": " + std::to_string(f.idle_flushed) + " of the requester's idle receives flushed");
    const auto state = f.req->engine().query_qp(f.req_qpn);
    const auto want = f.failed ? rocev2::QpState::Err : rocev2::QpState::Rts;
    if (!state || state->state != want)
      fail(where + ": requester QP in state " + (state ? std::to_string(static_cast<int>(state->state)) : "?") +
           ", want " + std::to_string(static_cast<int>(want)));
    if (f.type != QpType::Rc) report_.uc_ud_sent += f.expected_recvs.size();
    if (f.repeated > f.frames_duplicated)
      fail(where + ": " + std::to_string(f.repeated) + " messages delivered again, but the link made only " +
           std::to_string(f.frames_duplicated) + " copies");
  }
}

// ---------------------------------------------------------------- loop

std::optional<Instant> Simulation::next_event() const {
  std::optional<Instant> next;
  auto consider = [&next](std::optional<Instant> t) {
    if (t && (!next || *t < *next)) next = t;
  };
  consider(a_to_b_.next_delivery());
  consider(b_to_a_.next_delivery());
  consider(a_->engine().next_deadline());
  consider(b_->engine().next_deadline());
  consider(actions_.next_due());
  return next;
}

void Simulation::step(Instant now) {
  while (auto action = actions_.pop_due(now)) (*action)();
  while (auto frame = a_to_b_.receive(now)) b_->deliver(*frame, now);
  while (auto frame = b_to_a_.receive(now)) a_->deliver(*frame, now);
  b_->engine().release_acks();  // nothing is held unless config_.hold_acks
  a_->engine().release_acks();
  for (Node* node : {a_.get(), b_.get()}) {
    auto deadline = node->engine().next_deadline();
    if (deadline && *deadline <= now) {
      node->set_now(now);
      node->engine().advance(now);
    }
  }
}

SimReport Simulation::run() {
  create_flows();
  while (report_.failures.empty()) {
    pump();
    if (!report_.failures.empty()) break;
    if (all_done()) {
      final_checks();
      break;
    }
    const auto next = next_event();
    if (!next) {
      fail("stalled: work outstanding and nothing scheduled (no frame in flight, no engine deadline)");
      break;
    }
    if (*next - start_ > config_.time_limit) {
      fail("hang: simulated time limit reached");
      break;
    }
    if (++report_.steps > config_.step_limit) {
      fail("hang: step limit reached");
      break;
    }
    now_ = std::max(now_, *next);
    a_->set_now(now_);
    b_->set_now(now_);
    step(now_);
  }
  report_.simulated = now_ - start_;
  for (Node* node : {a_.get(), b_.get()}) {
    report_.frames += node->counters().frames_received;
    report_.frames_dropped_bad += node->counters().frames_dropped;
    report_.retransmits += node->engine().counters().retransmits;
  }
  if (!report_.failures.empty()) {
    for (const auto& f : flows_) {
      std::ostringstream s;
      s << "  " << name_of(f.type) << " flow " << f.id << ": " << f.req->name() << " qp " << f.req_qpn.value() << " -> "
        << f.resp->name() << " qp " << f.resp_qpn.value() << ", mtu " << f.mtu << ", posted " << f.ops.size()
        << ", completed " << f.next_completion << ", receives matched " << f.recv_matched << "/"
        << f.expected_recvs.size() << (f.failed ? ", failed" : "");
      if (auto attr = f.req->engine().query_qp(f.req_qpn))
        s << ", requester QP " << rocev2::to_string(attr->state);
      report_.failures.push_back(s.str());
    }
    if (std::getenv("RRDMA_SIM_TRACE") != nullptr) {
      for (Node* node : {a_.get(), b_.get()})
        for (const auto& line : node->trace()) report_.failures.push_back("  trace " + node->name() + ": " + line);
    }
  }
  return report_;
}

}  // namespace

std::string SimReport::summary() const {
  std::ostringstream s;
  s << "seed " << seed << ": " << (ok() ? "ok" : "FAILED") << ", " << steps << " steps, "
    << std::chrono::duration_cast<std::chrono::microseconds>(simulated).count() << " us simulated, " << frames
    << " frames delivered (" << frames_dropped_bad << " dropped as bad), " << ops_completed << " ops completed, "
    << retransmits << " retransmits, " << rc_qps_failed << " RC QPs ended in error (" << rc_qps_rnr_failed
    << " RNR retry-exceeded, " << rc_qps_access_failed << " after a bad R_Key), UC/UD " << uc_ud_received << "/"
    << uc_ud_sent << " messages arrived";
  for (const auto& f : failures) s << "\n  " << f;
  return s.str();
}

SimReport run_simulation(const SimConfig& config) { return Simulation(config).run(); }

}  // namespace rrdma::sim
