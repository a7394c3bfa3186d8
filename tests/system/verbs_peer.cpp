// rrdma_verbs_peer: the program the verbs system tests (tests/system/verbs_*.sh) run on both
// sides, written against the C++ API (verbs/app/api.h) as an application would be.
//
// One program, two roles: `--server` (in namespace A, on vnic A) and `--connect IP` (in
// namespace B, on vnic B). They meet over TCP (the namespaces' veths), then run the same
// list of cases in the same order. For each case and size both sides make a fresh QP,
// swap (qpn, psn, gid) and, for one-sided operations, (addr, rkey, length) of the target
// buffer, connect, and move data; the side that receives or is the target checks every byte
// against a seeded pattern and the guard bytes around every buffer. Each side prints one
// line per case and size, `NAME SIZE ok` or `NAME SIZE FAIL reason`, and exits 1 if any
// failed. `--hold` transfers in a loop until killed (the kill -9 test); `--isolation`
// plays the owner or the intruder of the memory-isolation test. `--list` prints the cases.
//
// Roles within a case: the client is always the requester (it posts the SEND, WRITE, READ
// or atomic); the server receives, or owns the target memory. Exit status: 0 all passed,
// 1 a case failed, 2 usage, 3 --hold saw a failed completion, 4 --hold saw none in time.
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "tests/system/verbs_peer_support.h"
#include "verbs/app/api.h"

namespace rrdma::systest {
namespace {

namespace v = rrdma::verbs;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr std::byte kGuard{0xA5};       // around every buffer; what untouched memory holds
constexpr std::size_t kGuardBytes = 64;
constexpr std::size_t kGrhBytes = 40;   // UD receives start with a GRH (ibv_post_recv(3))
constexpr std::uint32_t kQkey = 0x11111111;

constexpr std::size_t kMaxSges = 16;   // max_sge the vnic reports

constexpr std::uint64_t kSendWrId = 0x5E2D0001;
constexpr std::uint64_t kRecvWrId = 0x2ECF0001;

// A buffer of `length` bytes between two guards of kGuardBytes, the whole registered as one
// MR: a write past the SGE lands in the MR, so only the guard check can catch it.
class GuardedBuffer {
 public:
  GuardedBuffer(v::ProtectionDomain& pd, std::size_t length, std::uint32_t access)
      : storage_(length + 2 * kGuardBytes, kGuard), length_(length), mr_(pd.register_memory(std::span(storage_), access)) {}

  std::span<std::byte> payload() { return std::span(storage_).subspan(kGuardBytes, length_); }
  std::span<const std::byte> payload() const { return std::span(storage_).subspan(kGuardBytes, length_); }
  std::size_t length() const { return length_; }
  v::Sge sge() const { return {mr_.address() + kGuardBytes, static_cast<std::uint32_t>(length_), mr_.lkey()}; }
  v::RemoteBuffer remote() const { return {mr_.address() + kGuardBytes, mr_.rkey(), length_}; }
  // The whole MR, guards included: where "past the MR's end" starts.
  v::RemoteBuffer whole_remote() const { return {mr_.address(), mr_.rkey(), mr_.length()}; }
  const v::MemoryRegion& mr() const { return mr_; }

  // "" when both guards hold kGuard; else where the first foreign byte is.
  std::string check_guards() const {
    const std::span<const std::byte> all(storage_);
    if (auto at = first_byte_not(all.first(kGuardBytes), kGuard)) {
      return "guard before the buffer overwritten at byte " + std::to_string(kGuardBytes - *at) + " before it";
    }
    if (auto at = first_byte_not(all.last(kGuardBytes), kGuard)) {
      return "guard after the buffer overwritten at byte " + std::to_string(*at) + " past its end";
    }
    return "";
  }

 private:
  std::vector<std::byte> storage_;  // declared before mr_: deregistered before it is freed
  std::size_t length_;
  v::MemoryRegion mr_;
};

// A message cut into uneven pieces, each in its own MR (the multi-SGE lists of the tests).
struct Pieces {
  std::vector<std::unique_ptr<GuardedBuffer>> buffers;
  std::vector<v::Sge> sges;

  Pieces(v::ProtectionDomain& pd, std::size_t total, std::size_t count, unsigned variant, std::uint32_t access) {
    for (std::size_t length : uneven_split(total, count, variant)) {
      buffers.push_back(std::make_unique<GuardedBuffer>(pd, length, access));
      sges.push_back(buffers.back()->sge());
    }
  }

  void fill(std::uint64_t seed) {
    std::uint64_t offset = 0;
    for (auto& b : buffers) {
      fill_pattern(b->payload(), seed, offset);
      offset += b->length();
    }
  }

  void clear(std::byte value) {
    for (auto& b : buffers) std::fill(b->payload().begin(), b->payload().end(), value);
  }

  // "" when the pieces hold message bytes [0, total) of `seed` and every guard holds.
  std::string check(std::uint64_t seed) const {
    std::uint64_t offset = 0;
    for (std::size_t k = 0; k < buffers.size(); ++k) {
      if (auto at = first_pattern_mismatch(buffers[k]->payload(), seed, offset)) {
        return "payload differs at message offset " + std::to_string(offset + *at) + " (SGE " + std::to_string(k) +
               " of " + std::to_string(buffers.size()) + ", byte " + std::to_string(*at) + ")";
      }
      if (auto guard = buffers[k]->check_guards(); !guard.empty()) return "SGE " + std::to_string(k) + ": " + guard;
      offset += buffers[k]->length();
    }
    return "";
  }

  std::string check_untouched(std::byte value) const {
    for (std::size_t k = 0; k < buffers.size(); ++k) {
      if (auto at = first_byte_not(buffers[k]->payload(), value)) {
        return "SGE " + std::to_string(k) + " was written at byte " + std::to_string(*at);
      }
      if (auto guard = buffers[k]->check_guards(); !guard.empty()) return "SGE " + std::to_string(k) + ": " + guard;
    }
    return "";
  }
};

std::uint32_t imm_for(std::uint64_t seed) { return static_cast<std::uint32_t>(seed * 0x9E3779B1u) | 1u; }

// The three 64-bit words around an atomic's target, derived from the seed on both sides.
std::uint64_t atomic_word(std::uint64_t seed, int index) {
  std::array<std::byte, 8> bytes{};
  fill_pattern(bytes, seed ^ 0xA70A1C, static_cast<std::uint64_t>(index) * 8);
  std::uint64_t word = 0;
  std::memcpy(&word, bytes.data(), 8);
  return word;
}

// ---------------------------------------------------------------------------------------
// The peer: options, side channel, device.

struct Peer {
  Options options;
  SideChannel side;
  v::Context context;
  v::ProtectionDomain pd;
  v::Mtu active_mtu;
  std::size_t mtu_bytes;

  bool server() const { return options.role == Role::Server; }
  std::chrono::milliseconds timeout() const { return options.timeout; }
};

// One side of one connection: its own CQ and QP, as a fresh application would make.
struct Link {
  v::CompletionQueue cq;
  v::QueuePair qp;
  v::Endpoint local;
};

v::QpType qp_type(Transport transport) {
  switch (transport) {
    case Transport::Rc: return v::QpType::Rc;
    case Transport::Uc: return v::QpType::Uc;
    case Transport::Ud: return v::QpType::Ud;
  }
  return v::QpType::Rc;
}

Link make_link(Peer& peer, Transport transport) {
  v::CompletionQueue cq = peer.context.create_cq(64);
  v::QpCapabilities caps;
  caps.max_send_wr = 16;
  caps.max_recv_wr = 16;
  caps.max_send_sge = static_cast<std::uint32_t>(peer.options.sges);
  // UD receives take one more SGE for the GRH, within the WQE's 16 (verbs/contract/abi.h).
  caps.max_recv_sge = static_cast<std::uint32_t>(std::min<std::size_t>(peer.options.sges + 1, kMaxSges));
  v::QueuePair qp = peer.pd.create_qp(qp_type(transport), cq, caps);
  const v::Endpoint local = qp.local_endpoint();
  return Link{std::move(cq), std::move(qp), local};
}

Fields endpoint_fields(const v::Endpoint& e) {
  return {{"step", "setup"}, {"qpn", std::to_string(e.qpn)}, {"psn", std::to_string(e.psn)}, {"gid", e.gid.to_string()}};
}

void add_remote(Fields& fields, const v::RemoteBuffer& r) {
  fields["addr"] = std::to_string(r.addr);
  fields["rkey"] = std::to_string(r.rkey);
  fields["length"] = std::to_string(r.length);
}

std::uint64_t require_number(const Fields& fields, std::string_view key) {
  const auto n = field_number(fields, key);
  if (!n) throw std::runtime_error("the peer's message lacks a number '" + std::string(key) + "'");
  return *n;
}

v::Endpoint endpoint_of(const Fields& fields) {
  v::Endpoint e;
  e.qpn = static_cast<std::uint32_t>(require_number(fields, "qpn"));
  e.psn = static_cast<std::uint32_t>(require_number(fields, "psn"));
  const auto gid_text = fields.find("gid");
  const auto gid = gid_text == fields.end() ? std::nullopt : v::Gid::parse(gid_text->second);
  if (!gid) throw std::runtime_error("the peer's setup has no valid gid");
  e.gid = *gid;
  return e;
}

v::RemoteBuffer remote_of(const Fields& fields) {
  return {require_number(fields, "addr"), static_cast<std::uint32_t>(require_number(fields, "rkey")),
          require_number(fields, "length")};
}

// Swaps setup lines (both sides send first, then read): the peer's fields.
Fields swap_setup(Peer& peer, Fields mine) {
  peer.side.send(mine);
  return peer.side.expect("setup", peer.timeout());
}

struct Rnr {
  std::uint8_t min_rnr_timer = 12;  // what our responder asks the requester to wait
  std::uint8_t rnr_retry = 7;       // 7: retry forever (ibv_modify_qp(3))
};

// RESET -> INIT -> RTR -> RTS. The helpers of the API for the common case; an RC QP whose
// RNR attributes (the RNR cases) or ACK timeout (--ack-timeout) differ from the helpers'
// is moved by hand (ibv_modify_qp(3): min_rnr_timer at RTR; timeout, retry_cnt and
// rnr_retry at RTS), with the helpers' other values.
void connect(const Peer& peer, Link& link, const v::Endpoint& remote, Transport transport, std::uint32_t remote_access,
             std::optional<Rnr> rnr = std::nullopt) {
  if (transport == Transport::Uc) remote_access &= v::access::kRemoteWrite;  // UC: no READ, no atomics
  if (transport == Transport::Ud) {
    link.qp.to_init(0, kQkey);
  } else {
    link.qp.to_init(remote_access);
  }
  if (transport != Transport::Rc || (!rnr && !peer.options.ack_timeout)) {
    link.qp.to_rtr(remote);
    link.qp.to_rts();
    return;
  }
  const Rnr rnr_attributes = rnr.value_or(Rnr{});
  v::QpAttributes rtr;
  rtr.state = v::QpState::Rtr;
  rtr.path_mtu = peer.active_mtu;
  rtr.dest_qp_num = remote.qpn;
  rtr.rq_psn = remote.psn;
  rtr.max_dest_rd_atomic = 16;
  rtr.min_rnr_timer = rnr_attributes.min_rnr_timer;
  rtr.dgid = remote.gid;
  link.qp.modify(rtr, v::qp_attr::kState | v::qp_attr::kAv | v::qp_attr::kPathMtu | v::qp_attr::kDestQpn |
                          v::qp_attr::kRqPsn | v::qp_attr::kMaxDestRdAtomic | v::qp_attr::kMinRnrTimer);
  v::QpAttributes rts;
  rts.state = v::QpState::Rts;
  rts.sq_psn = link.local.psn;
  rts.timeout = peer.options.ack_timeout.value_or(14);  // 4.096 us * 2^timeout; 14: ~67 ms
  rts.retry_cnt = 7;
  rts.rnr_retry = rnr_attributes.rnr_retry;
  rts.max_rd_atomic = 16;
  link.qp.modify(rts, v::qp_attr::kState | v::qp_attr::kSqPsn | v::qp_attr::kTimeout | v::qp_attr::kRetryCnt |
                          v::qp_attr::kRnrRetry | v::qp_attr::kMaxQpRdAtomic);
}

// ---------------------------------------------------------------------------------------
// Completions

std::string status_name(v::WcStatus status) { return v::to_string(status); }

// "" when the completion is the one expected; else a sentence with what it was instead.
// `opcode` and `byte_len` are checked when the expected status is success.
std::string check_completion(const std::optional<v::WorkCompletion>& wc, std::string_view what_view, v::WcStatus status,
                             std::optional<v::WcOpcode> opcode, std::uint64_t wr_id, std::uint32_t qp_num,
                             std::optional<std::uint32_t> byte_len = std::nullopt) {
  const std::string what(what_view);
  if (!wc) return what + ": none within the timeout";
  if (wc->wr_id() != wr_id) {
    // Another request's, or another process's: the isolation test relies on this check.
    char text[96];
    std::snprintf(text, sizeof text, ": wr_id 0x%" PRIx64 ", expected 0x%" PRIx64, wc->wr_id(), wr_id);
    return what + text + " (" + wc->describe() + ")";
  }
  if (wc->qp_num() != qp_num) {
    return what + ": qp_num " + std::to_string(wc->qp_num()) + ", expected " + std::to_string(qp_num);
  }
  if (wc->status() != status) {
    return what + ": status '" + wc->status_string() + "', expected '" + status_name(status) + "'";
  }
  if (status != v::WcStatus::Success) return "";
  if (opcode && wc->opcode() != *opcode) {
    return what + ": opcode " + v::to_string(wc->opcode()) + ", expected " + v::to_string(*opcode);
  }
  if (byte_len && wc->byte_len() != *byte_len) {
    return what + ": byte_len " + std::to_string(wc->byte_len()) + ", expected " + std::to_string(*byte_len);
  }
  return "";
}

// "" when the CQ holds nothing more (no duplicate, no stray completion of another QP or process).
std::string check_cq_empty(v::CompletionQueue& cq, std::string_view side) {
  if (auto extra = cq.poll_one()) return std::string(side) + " CQ holds an unexpected completion: " + extra->describe();
  return "";
}

// ---------------------------------------------------------------------------------------
// Cases. Each returns "" when its side passed, else the reason. Both sides exchange verdicts
// at the end (run_case), which keeps them in step.

struct Case {
  const CaseInfo& info;
  std::size_t size;
  std::uint64_t seed;
};

// The client's completion, told to the server ("sent" step).
void tell_sent(Peer& peer, const std::string& verdict, const std::optional<v::WorkCompletion>& wc) {
  peer.side.send({{"step", "sent"}, {"ok", verdict.empty() ? "1" : "0"},
                  {"status", wc ? wc->status_string() : "none"}});
}

bool peer_sent_ok(const Fields& sent) { return sent.count("ok") && sent.at("ok") == "1"; }

// Over RoCE v2 / IPv4 the 40-byte GRH area holds the packet's IPv4 header in its last 20
// bytes (IBA Annex A17.4.5.2; rxe and mlx5 do the same): version 4, IHL 5, and the two
// addresses that the GIDs map.
std::string check_ipv4_grh(std::span<const std::byte> grh, const v::Gid& source, const v::Gid& destination) {
  const auto ip = grh.subspan(20, 20);
  if (ip[0] != std::byte{0x45}) {
    return "GRH: no IPv4 header in bytes 20..39 (first byte " + std::to_string(std::to_integer<int>(ip[0])) + ")";
  }
  if (!std::equal(source.bytes.begin() + 12, source.bytes.end(), ip.begin() + 12,
                  [](std::uint8_t a, std::byte b) { return std::byte{a} == b; })) {
    return "GRH: the IPv4 source is not the sender's GID";
  }
  if (!std::equal(destination.bytes.begin() + 12, destination.bytes.end(), ip.begin() + 16,
                  [](std::uint8_t a, std::byte b) { return std::byte{a} == b; })) {
    return "GRH: the IPv4 destination is not our GID";
  }
  return "";
}

std::string send_case(Peer& peer, const Case& c) {
  const bool with_imm = c.info.kind == CaseKind::SendImm;
  const bool ud = c.info.transport == Transport::Ud;
  Link link = make_link(peer, c.info.transport);
  if (peer.server()) {
    // UD: the first SGE takes the 40-byte GRH the vnic writes before the payload.
    std::unique_ptr<GuardedBuffer> grh;
    if (ud) grh = std::make_unique<GuardedBuffer>(peer.pd, kGrhBytes, v::access::kLocalWrite);
    const std::size_t pieces = ud ? std::min(peer.options.sges, kMaxSges - 1) : peer.options.sges;
    Pieces in(peer.pd, c.size, pieces, 1, v::access::kLocalWrite);
    in.clear(std::byte{0});
    std::vector<v::Sge> sges;
    if (grh) sges.push_back(grh->sge());
    sges.insert(sges.end(), in.sges.begin(), in.sges.end());
    const v::Endpoint remote = endpoint_of(swap_setup(peer, endpoint_fields(link.local)));
    connect(peer, link, remote, c.info.transport, 0);
    link.qp.post_receive({kRecvWrId, sges});
    peer.side.send({{"step", "ready"}});
    if (!peer_sent_ok(peer.side.expect("sent", peer.timeout()))) return "the peer's send failed (see its line)";
    const auto wc = link.cq.wait(peer.timeout());
    std::string verdict = check_completion(wc, "receive completion", v::WcStatus::Success, v::WcOpcode::Recv, kRecvWrId, link.qp.qp_num(),
             static_cast<std::uint32_t>(c.size + (ud ? kGrhBytes : 0)));
    if (!verdict.empty()) return verdict;
    if (wc->has_imm() != with_imm) return with_imm ? "no immediate data flag" : "an immediate flag on a plain SEND";
    if (with_imm && wc->imm_data() != imm_for(c.seed)) {
      return "imm_data " + std::to_string(wc->imm_data()) + ", expected " + std::to_string(imm_for(c.seed));
    }
    if (ud && wc->src_qp() != remote.qpn) {
      return "src_qp " + std::to_string(wc->src_qp()) + ", expected the sender's " + std::to_string(remote.qpn);
    }
    if (ud && !(wc->flags() & v::wc_flags::kGrh)) return "a UD receive without IBV_WC_GRH";
    if (grh) {
      if (auto g = grh->check_guards(); !g.empty()) return "GRH buffer: " + g;
      if (auto g = check_ipv4_grh(grh->payload(), remote.gid, link.local.gid); !g.empty()) return g;
    }
    if (auto bad = in.check(c.seed); !bad.empty()) return bad;
    return check_cq_empty(link.cq, "receiver's");
  }
  Pieces out(peer.pd, c.size, peer.options.sges, 0, v::access::kLocalWrite);
  out.fill(c.seed);
  const v::Endpoint remote = endpoint_of(swap_setup(peer, endpoint_fields(link.local)));
  connect(peer, link, remote, c.info.transport, 0);
  peer.side.expect("ready", peer.timeout());
  std::optional<v::AddressHandle> ah;
  v::SendWorkRequest wr = v::SendWorkRequest::send(kSendWrId, out.sges);
  if (with_imm) {
    wr.opcode = v::Opcode::SendWithImm;
    wr.imm_data = imm_for(c.seed);
  }
  if (ud) {
    ah.emplace(peer.pd.create_ah(remote.gid));
    wr.ah = &*ah;
    wr.remote_qpn = remote.qpn;
    wr.remote_qkey = kQkey;
  }
  link.qp.post_send(wr);
  const auto wc = link.cq.wait(peer.timeout());
  std::string verdict =
      check_completion(wc, "send completion", v::WcStatus::Success, v::WcOpcode::Send, kSendWrId, link.qp.qp_num());
  if (verdict.empty()) verdict = out.check(c.seed);  // the NIC only reads what it sends
  if (verdict.empty()) verdict = check_cq_empty(link.cq, "sender's");
  tell_sent(peer, verdict, wc);
  return verdict;
}

// Polls the target memory until it holds the message (UC: no completion says it landed).
std::string wait_for_payload(const GuardedBuffer& target, std::uint64_t seed, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    const auto at = first_pattern_mismatch(target.payload(), seed);
    if (!at) return target.check_guards();
    if (Clock::now() >= deadline) return "payload differs at offset " + std::to_string(*at) + " (waited for it to land)";
    std::this_thread::sleep_for(5ms);
  }
}

std::string write_case(Peer& peer, const Case& c) {
  const bool with_imm = c.info.kind == CaseKind::WriteImm;
  Link link = make_link(peer, c.info.transport);
  if (peer.server()) {
    GuardedBuffer target(peer.pd, c.size, v::access::kLocalWrite | v::access::kRemoteWrite);
    std::fill(target.payload().begin(), target.payload().end(), std::byte{0});
    Fields setup = endpoint_fields(link.local);
    add_remote(setup, target.remote());
    const v::Endpoint remote = endpoint_of(swap_setup(peer, setup));
    connect(peer, link, remote, c.info.transport, v::access::kRemoteWrite);
    // WRITE with immediate consumes a receive WQE (no SGE needed: the data goes to the
    // RETH's address) and completes it with the immediate value.
    if (with_imm) link.qp.post_receive({kRecvWrId, {}});
    peer.side.send({{"step", "ready"}});
    if (!peer_sent_ok(peer.side.expect("sent", peer.timeout()))) return "the peer's write failed (see its line)";
    if (with_imm) {
      const auto wc = link.cq.wait(peer.timeout());
      std::string verdict = check_completion(wc, "receive completion", v::WcStatus::Success, v::WcOpcode::RecvRdmaWithImm,
                                                  kRecvWrId, link.qp.qp_num(), static_cast<std::uint32_t>(c.size));
      if (!verdict.empty()) return verdict;
      if (!wc->has_imm() || wc->imm_data() != imm_for(c.seed)) return "missing or wrong immediate data";
    }
    // RC: the ACK the requester got means the data is placed, and with immediate the
    // receive completion does; so check now. A UC WRITE tells the target nothing: wait
    // for the bytes (bounded).
    std::string verdict;
    if (c.info.transport == Transport::Rc || with_imm) {
      if (auto at = first_pattern_mismatch(target.payload(), c.seed)) {
        verdict = "payload differs at offset " + std::to_string(*at) + " although the WRITE completed";
      } else {
        verdict = target.check_guards();
      }
    } else {
      verdict = wait_for_payload(target, c.seed, peer.timeout());
    }
    if (verdict.empty()) verdict = check_cq_empty(link.cq, "target's");
    return verdict;
  }
  Pieces out(peer.pd, c.size, peer.options.sges, 0, v::access::kLocalWrite);
  out.fill(c.seed);
  const Fields setup = swap_setup(peer, endpoint_fields(link.local));
  const v::Endpoint remote = endpoint_of(setup);
  const v::RemoteBuffer target = remote_of(setup);
  connect(peer, link, remote, c.info.transport, v::access::kRemoteWrite);
  peer.side.expect("ready", peer.timeout());
  v::SendWorkRequest wr = v::SendWorkRequest::write(kSendWrId, out.sges, target);
  if (with_imm) {
    wr.opcode = v::Opcode::RdmaWriteWithImm;
    wr.imm_data = imm_for(c.seed);
  }
  link.qp.post_send(wr);
  const auto wc = link.cq.wait(peer.timeout());
  std::string verdict =
      check_completion(wc, "write completion", v::WcStatus::Success, v::WcOpcode::RdmaWrite, kSendWrId, link.qp.qp_num());
  if (verdict.empty()) verdict = out.check(c.seed);
  if (verdict.empty()) verdict = check_cq_empty(link.cq, "requester's");
  tell_sent(peer, verdict, wc);
  return verdict;
}

std::string read_case(Peer& peer, const Case& c) {
  Link link = make_link(peer, c.info.transport);
  if (peer.server()) {
    GuardedBuffer source(peer.pd, c.size, v::access::kLocalWrite | v::access::kRemoteRead);
    fill_pattern(source.payload(), c.seed);
    Fields setup = endpoint_fields(link.local);
    add_remote(setup, source.remote());
    const v::Endpoint remote = endpoint_of(swap_setup(peer, setup));
    connect(peer, link, remote, c.info.transport, v::access::kRemoteRead);
    peer.side.send({{"step", "ready"}});
    if (!peer_sent_ok(peer.side.expect("sent", peer.timeout()))) return "the peer's read failed (see its line)";
    if (auto at = first_pattern_mismatch(source.payload(), c.seed)) {
      return "the READ changed the source at offset " + std::to_string(*at);
    }
    if (auto g = source.check_guards(); !g.empty()) return g;
    return check_cq_empty(link.cq, "source's");
  }
  // Scattered with another cut than the sending cases use.
  Pieces in(peer.pd, c.size, peer.options.sges, 2, v::access::kLocalWrite);
  in.clear(std::byte{0});
  const Fields setup = swap_setup(peer, endpoint_fields(link.local));
  const v::Endpoint remote = endpoint_of(setup);
  const v::RemoteBuffer source = remote_of(setup);
  connect(peer, link, remote, c.info.transport, v::access::kRemoteRead);
  peer.side.expect("ready", peer.timeout());
  link.qp.post_send(v::SendWorkRequest::read(kSendWrId, in.sges, source));
  const auto wc = link.cq.wait(peer.timeout());
  std::string verdict =
      check_completion(wc, "read completion", v::WcStatus::Success, v::WcOpcode::RdmaRead, kSendWrId, link.qp.qp_num());
  if (verdict.empty()) verdict = in.check(c.seed);
  if (verdict.empty()) verdict = check_cq_empty(link.cq, "requester's");
  tell_sent(peer, verdict, wc);
  return verdict;
}

// Atomics on the middle one of three 64-bit words; the outer two must not change.
std::string atomic_case(Peer& peer, const Case& c) {
  const bool cas = c.info.kind == CaseKind::CompareSwap;
  const std::uint64_t before = atomic_word(c.seed, 1);
  const std::uint64_t swap_value = atomic_word(c.seed, 3);
  const std::array<std::uint64_t, 3> adds = {1, atomic_word(c.seed, 4), 0xFFFFFFFFFFFFFFFFull};  // the last wraps
  const std::uint64_t after = cas ? swap_value : before + adds[0] + adds[1] + adds[2];
  Link link = make_link(peer, Transport::Rc);
  if (peer.server()) {
    GuardedBuffer target(peer.pd, 24, v::access::kLocalWrite | v::access::kRemoteAtomic);
    for (int i = 0; i < 3; ++i) {
      const std::uint64_t w = atomic_word(c.seed, i);
      std::memcpy(target.payload().data() + 8 * i, &w, 8);
    }
    Fields setup = endpoint_fields(link.local);
    add_remote(setup, target.remote());
    const v::Endpoint remote = endpoint_of(swap_setup(peer, setup));
    connect(peer, link, remote, Transport::Rc, v::access::kRemoteAtomic);
    peer.side.send({{"step", "ready"}});
    if (!peer_sent_ok(peer.side.expect("sent", peer.timeout()))) return "the peer's atomics failed (see its line)";
    std::array<std::uint64_t, 3> words{};
    std::memcpy(words.data(), target.payload().data(), 24);
    if (words[0] != atomic_word(c.seed, 0) || words[2] != atomic_word(c.seed, 2)) return "a neighbouring word changed";
    if (words[1] != after) {
      return "target word " + std::to_string(words[1]) + ", expected " + std::to_string(after);
    }
    if (auto g = target.check_guards(); !g.empty()) return g;
    return check_cq_empty(link.cq, "target's");
  }
  GuardedBuffer result(peer.pd, 8, v::access::kLocalWrite);
  const Fields setup = swap_setup(peer, endpoint_fields(link.local));
  const v::Endpoint remote = endpoint_of(setup);
  const v::RemoteBuffer target = remote_of(setup);
  connect(peer, link, remote, Transport::Rc, v::access::kRemoteAtomic);
  peer.side.expect("ready", peer.timeout());
  // Each step: the request, the old value it must return.
  // The WR's sg_list is a span over this SGE: it must outlive the WRs.
  const v::Sge result_sge = result.sge();
  std::vector<std::pair<v::SendWorkRequest, std::uint64_t>> steps;
  if (cas) {
    // A compare that fails returns the value and changes nothing; then one that succeeds.
    steps.emplace_back(v::SendWorkRequest::compare_and_swap(kSendWrId, result_sge, target, before + 1, 0, 8), before);
    steps.emplace_back(v::SendWorkRequest::compare_and_swap(kSendWrId + 1, result_sge, target, before, swap_value, 8), before);
  } else {
    std::uint64_t value = before;
    for (std::size_t i = 0; i < adds.size(); ++i) {
      steps.emplace_back(v::SendWorkRequest::fetch_and_add(kSendWrId + i, result_sge, target, adds[i], 8), value);
      value += adds[i];
    }
  }
  std::string verdict;
  std::optional<v::WorkCompletion> wc;
  for (const auto& [wr, old_value] : steps) {
    std::memset(result.payload().data(), 0, 8);
    link.qp.post_send(wr);
    wc = link.cq.wait(peer.timeout());
    verdict = check_completion(wc, "atomic completion", v::WcStatus::Success,
                                    cas ? v::WcOpcode::CompSwap : v::WcOpcode::FetchAdd, wr.wr_id, link.qp.qp_num());
    if (!verdict.empty()) break;
    std::uint64_t got = 0;
    std::memcpy(&got, result.payload().data(), 8);
    if (got != old_value) {
      verdict = "wr_id " + std::to_string(wr.wr_id) + " returned " + std::to_string(got) + ", expected the old value " +
                std::to_string(old_value);
      break;
    }
    verdict = result.check_guards();
    if (!verdict.empty()) break;
  }
  if (verdict.empty()) verdict = check_cq_empty(link.cq, "requester's");
  tell_sent(peer, verdict, wc);
  return verdict;
}

// ---------------------------------------------------------------------------------------
// Error cases. Each checks the exact completion status and that nothing was written.

// WRITE refused by the target (wrong key, or an MR without REMOTE_WRITE): REM_ACCESS_ERR at
// the requester (IBA 9.7.5.2.2, NAK Remote Access Error), the target's memory untouched.
std::string refused_write_case(Peer& peer, const Case& c) {
  const bool wrong_key = c.info.kind == CaseKind::WrongRkey;
  constexpr std::size_t kLength = 4096;
  Link link = make_link(peer, Transport::Rc);
  if (peer.server()) {
    const std::uint32_t access =
        v::access::kLocalWrite | (wrong_key ? v::access::kRemoteWrite : v::access::kRemoteRead);
    GuardedBuffer target(peer.pd, kLength, access);
    Fields setup = endpoint_fields(link.local);
    add_remote(setup, target.remote());
    const v::Endpoint remote = endpoint_of(swap_setup(peer, setup));
    connect(peer, link, remote, Transport::Rc, v::access::kRemoteWrite | v::access::kRemoteRead);
    peer.side.send({{"step", "ready"}});
    peer.side.expect("sent", peer.timeout());
    if (auto at = first_byte_not(target.payload(), kGuard)) {
      return "the refused WRITE changed the target at offset " + std::to_string(*at);
    }
    if (auto g = target.check_guards(); !g.empty()) return g;
    return check_cq_empty(link.cq, "target's");
  }
  Pieces out(peer.pd, kLength, peer.options.sges, 0, v::access::kLocalWrite);
  out.fill(c.seed);
  const Fields setup = swap_setup(peer, endpoint_fields(link.local));
  const v::Endpoint remote = endpoint_of(setup);
  v::RemoteBuffer target = remote_of(setup);
  // Another key of the same shape: flip bits in both the index and the tag halves, so that
  // it names no MR of the target (a real key of another MR would be a different test).
  if (wrong_key) target.rkey ^= 0x00A5A500u;
  connect(peer, link, remote, Transport::Rc, v::access::kRemoteWrite);
  peer.side.expect("ready", peer.timeout());
  link.qp.post_send(v::SendWorkRequest::write(kSendWrId, out.sges, target));
  const auto wc = link.cq.wait(peer.timeout());
  const std::string verdict =
      check_completion(wc, "write completion", v::WcStatus::RemAccessErr, std::nullopt, kSendWrId, link.qp.qp_num());
  tell_sent(peer, verdict, wc);
  return verdict;
}

// READ of 64 bytes starting 32 bytes before the MR's end (the end of the whole MR, guards
// included): REM_ACCESS_ERR, the local buffer untouched (no partial response is placed).
std::string read_past_end_case(Peer& peer, const Case& c) {
  constexpr std::size_t kLength = 4096;
  Link link = make_link(peer, Transport::Rc);
  if (peer.server()) {
    GuardedBuffer source(peer.pd, kLength, v::access::kLocalWrite | v::access::kRemoteRead);
    fill_pattern(source.payload(), c.seed);
    Fields setup = endpoint_fields(link.local);
    add_remote(setup, source.whole_remote());
    const v::Endpoint remote = endpoint_of(swap_setup(peer, setup));
    connect(peer, link, remote, Transport::Rc, v::access::kRemoteRead);
    peer.side.send({{"step", "ready"}});
    peer.side.expect("sent", peer.timeout());
    if (auto g = source.check_guards(); !g.empty()) return g;
    return check_cq_empty(link.cq, "source's");
  }
  Pieces in(peer.pd, 64, 1, 0, v::access::kLocalWrite);
  in.clear(kGuard);
  const Fields setup = swap_setup(peer, endpoint_fields(link.local));
  const v::Endpoint remote = endpoint_of(setup);
  const v::RemoteBuffer source = remote_of(setup);
  connect(peer, link, remote, Transport::Rc, v::access::kRemoteRead);
  peer.side.expect("ready", peer.timeout());
  link.qp.post_send(v::SendWorkRequest::read(kSendWrId, in.sges, source, source.length - 32));
  const auto wc = link.cq.wait(peer.timeout());
  std::string verdict =
      check_completion(wc, "read completion", v::WcStatus::RemAccessErr, std::nullopt, kSendWrId, link.qp.qp_num());
  if (verdict.empty()) verdict = in.check_untouched(kGuard);
  tell_sent(peer, verdict, wc);
  return verdict;
}

// A 64-byte SEND into a 16-byte RECV: LOC_LEN_ERR in the receiver's completion
// (ibv_poll_cq(3)); the requester sees an error too (IBA: NAK Invalid Request ->
// REM_INV_REQ_ERR); nothing lands past the receive buffer.
std::string recv_too_small_case(Peer& peer, const Case& c) {
  Link link = make_link(peer, Transport::Rc);
  if (peer.server()) {
    Pieces in(peer.pd, 16, 1, 0, v::access::kLocalWrite);
    in.clear(kGuard);
    const v::Endpoint remote = endpoint_of(swap_setup(peer, endpoint_fields(link.local)));
    connect(peer, link, remote, Transport::Rc, 0);
    link.qp.post_receive({kRecvWrId, in.sges});
    peer.side.send({{"step", "ready"}});
    peer.side.expect("sent", peer.timeout());
    const auto wc = link.cq.wait(peer.timeout());
    std::string verdict =
        check_completion(wc, "receive completion", v::WcStatus::LocLenErr, std::nullopt, kRecvWrId, link.qp.qp_num());
    if (verdict.empty()) verdict = in.buffers[0]->check_guards();
    return verdict;
  }
  Pieces out(peer.pd, 64, 1, 0, v::access::kLocalWrite);
  out.fill(c.seed);
  const v::Endpoint remote = endpoint_of(swap_setup(peer, endpoint_fields(link.local)));
  connect(peer, link, remote, Transport::Rc, 0);
  peer.side.expect("ready", peer.timeout());
  link.qp.post_send(v::SendWorkRequest::send(kSendWrId, out.sges));
  const auto wc = link.cq.wait(peer.timeout());
  std::string verdict;
  if (!wc) {
    verdict = "send completion: none within the timeout";
  } else if (wc->ok()) {
    verdict = "send completion: success, although the receive was too small";
  } else if (wc->status() != v::WcStatus::RemInvReqErr) {
    // Not the status IBA prescribes; say so but do not fail the receiver's check for it.
    std::cout << "  note: the sender's status is '" << wc->status_string() << "' (IBA: remote invalid request error)\n";
  }
  tell_sent(peer, verdict, wc);
  return verdict;
}

// RNR: the SEND arrives before a receive is posted. With rnr_retry 7 (forever) the sender
// keeps retrying and succeeds once the server posts (late, after the peer says it sent);
// with rnr_retry 1 and no receive ever, RNR_RETRY_EXC_ERR and nothing written.
std::string rnr_case(Peer& peer, const Case& c) {
  const bool eventually = c.info.kind == CaseKind::RnrThenSuccess;
  constexpr std::size_t kLength = 4096;
  // Timer code 12 = 0.64 ms between retries while the receive is late; code 1 = 0.01 ms when
  // only the retry count matters (IBA table 45).
  const Rnr rnr{static_cast<std::uint8_t>(eventually ? 12 : 1), static_cast<std::uint8_t>(eventually ? 7 : 1)};
  Link link = make_link(peer, Transport::Rc);
  if (peer.server()) {
    Pieces in(peer.pd, kLength, peer.options.sges, 1, v::access::kLocalWrite);
    in.clear(kGuard);
    const v::Endpoint remote = endpoint_of(swap_setup(peer, endpoint_fields(link.local)));
    connect(peer, link, remote, Transport::Rc, 0, rnr);
    peer.side.send({{"step", "ready"}});
    if (!eventually) {
      peer.side.expect("sent", peer.timeout());
      if (auto bad = in.check_untouched(kGuard); !bad.empty()) return bad;
      return check_cq_empty(link.cq, "receiver's");
    }
    peer.side.expect("posted", peer.timeout());
    // The SEND is out and being RNR-NAKed; give it a few rounds before the receive appears.
    std::this_thread::sleep_for(300ms);
    link.qp.post_receive({kRecvWrId, in.sges});
    peer.side.expect("sent", peer.timeout());
    const auto wc = link.cq.wait(peer.timeout());
    std::string verdict = check_completion(wc, "receive completion", v::WcStatus::Success, v::WcOpcode::Recv, kRecvWrId,
                                                link.qp.qp_num(), static_cast<std::uint32_t>(kLength));
    if (verdict.empty()) verdict = in.check(c.seed);
    return verdict;
  }
  Pieces out(peer.pd, kLength, peer.options.sges, 0, v::access::kLocalWrite);
  out.fill(c.seed);
  const v::Endpoint remote = endpoint_of(swap_setup(peer, endpoint_fields(link.local)));
  connect(peer, link, remote, Transport::Rc, 0, rnr);
  peer.side.expect("ready", peer.timeout());
  link.qp.post_send(v::SendWorkRequest::send(kSendWrId, out.sges));
  if (eventually) peer.side.send({{"step", "posted"}});
  const auto wc = link.cq.wait(peer.timeout());
  const std::string verdict = check_completion(wc, "send completion", eventually ? v::WcStatus::Success : v::WcStatus::RnrRetryExcErr,
           v::WcOpcode::Send, kSendWrId, link.qp.qp_num());
  tell_sent(peer, verdict, wc);
  return verdict;
}

std::string run_one(Peer& peer, const Case& c) {
  switch (c.info.kind) {
    case CaseKind::Send:
    case CaseKind::SendImm: return send_case(peer, c);
    case CaseKind::Write:
    case CaseKind::WriteImm: return write_case(peer, c);
    case CaseKind::Read: return read_case(peer, c);
    case CaseKind::CompareSwap:
    case CaseKind::FetchAdd: return atomic_case(peer, c);
    case CaseKind::WrongRkey:
    case CaseKind::WriteNoRemoteWrite: return refused_write_case(peer, c);
    case CaseKind::ReadPastEnd: return read_past_end_case(peer, c);
    case CaseKind::RecvTooSmall: return recv_too_small_case(peer, c);
    case CaseKind::RnrThenSuccess:
    case CaseKind::RnrRetryExceeded: return rnr_case(peer, c);
  }
  return "unknown case kind";
}

// The sizes a case runs at: UD only up to the path MTU (a UD message is one packet), and
// the MTU itself.
std::vector<std::size_t> sizes_for(const Peer& peer, const CaseInfo& info) {
  if (!info.sized) return {0};
  if (info.transport != Transport::Ud) return peer.options.sizes;
  std::vector<std::size_t> out;
  for (std::size_t s : peer.options.sizes) {
    if (s <= peer.mtu_bytes) out.push_back(s);
  }
  if (std::find(out.begin(), out.end(), peer.mtu_bytes) == out.end()) out.push_back(peer.mtu_bytes);
  return out;
}

// Runs every case; a side-channel or API failure (an exception) ends the run, since the
// peers can no longer be in step. Returns the number of failed cases.
int run_cases(Peer& peer) {
  int failed = 0;
  std::uint64_t round = 0;
  for (const CaseInfo* info : peer.options.cases) {
    for (std::size_t size : sizes_for(peer, *info)) {
      const Case c{*info, size, peer.options.seed * 1000003 + round++};
      std::string verdict;
      try {
        verdict = run_one(peer, c);
      } catch (const std::exception& e) {
        std::cout << info->name << ' ' << size << " FAIL " << e.what() << std::endl;
        try {
          peer.side.send({{"step", "abort"}, {"reason", e.what()}});
        } catch (...) {
        }
        return failed + 1;
      }
      // Verdicts cross, so that neither side starts the next case before the other
      // finished checking this one.
      peer.side.send({{"step", "verdict"}, {"ok", verdict.empty() ? "1" : "0"}});
      const Fields theirs = peer.side.expect("verdict", peer.timeout());
      const bool peer_ok = theirs.count("ok") && theirs.at("ok") == "1";
      if (verdict.empty()) {
        std::cout << info->name << ' ' << size << " ok" << (peer_ok ? "" : " (the peer failed)") << std::endl;
      } else {
        std::cout << info->name << ' ' << size << " FAIL " << verdict << std::endl;
        ++failed;
      }
    }
  }
  return failed;
}

// ---------------------------------------------------------------------------------------
// --hold: RC SENDs and WRITEs of 64 KiB in a loop until killed. The server receives and
// checks each SEND; the client checks each completion. Either side reports the first
// failed completion (exit 3) or a completion that never comes (exit 4) and which.

int hold(Peer& peer) {
  constexpr std::size_t kLength = 64 * 1024;
  constexpr int kReceives = 8;
  Link link = make_link(peer, Transport::Rc);
  if (peer.server()) {
    std::vector<std::unique_ptr<GuardedBuffer>> in;
    for (int i = 0; i < kReceives; ++i) in.push_back(std::make_unique<GuardedBuffer>(peer.pd, kLength, v::access::kLocalWrite));
    GuardedBuffer target(peer.pd, kLength, v::access::kLocalWrite | v::access::kRemoteWrite);
    Fields setup = endpoint_fields(link.local);
    add_remote(setup, target.remote());
    const v::Endpoint remote = endpoint_of(swap_setup(peer, setup));
    connect(peer, link, remote, Transport::Rc, v::access::kRemoteWrite);
    std::vector<v::Sge> sges;
    for (const auto& buffer : in) sges.push_back(buffer->sge());
    for (int i = 0; i < kReceives; ++i) link.qp.post_receive({kRecvWrId + i, std::span(&sges[i], 1)});
    peer.side.send({{"step", "ready"}});
    for (std::uint64_t n = 0;; ++n) {
      const auto wc = link.cq.wait(peer.timeout());
      if (!wc) {
        std::cout << "hold " << n << " no completion within " << peer.timeout().count() << " ms" << std::endl;
        return 4;
      }
      if (!wc->ok()) {
        std::cout << "hold " << n << " error " << wc->status_string() << std::endl;
        return 3;
      }
      const std::size_t i = wc->wr_id() - kRecvWrId;
      if (i >= in.size()) {
        std::cout << "hold " << n << " error unexpected completion " << wc->describe() << std::endl;
        return 3;
      }
      if (auto at = first_pattern_mismatch(in[i]->payload(), peer.options.seed)) {
        std::cout << "hold " << n << " error payload differs at " << *at << std::endl;
        return 3;
      }
      std::fill(in[i]->payload().begin(), in[i]->payload().end(), std::byte{0});
      link.qp.post_receive({wc->wr_id(), std::span(&sges[i], 1)});
      if (n == 0) std::cout << "hold running" << std::endl;
    }
  }
  GuardedBuffer out(peer.pd, kLength, v::access::kLocalWrite);
  fill_pattern(out.payload(), peer.options.seed);
  const Fields setup = swap_setup(peer, endpoint_fields(link.local));
  const v::Endpoint remote = endpoint_of(setup);
  const v::RemoteBuffer target = remote_of(setup);
  connect(peer, link, remote, Transport::Rc, v::access::kRemoteWrite);
  peer.side.expect("ready", peer.timeout());
  const v::Sge sge = out.sge();
  for (std::uint64_t n = 0;; ++n) {
    // A SEND and a WRITE each round; the server reposts receives, so RNR waits are short.
    link.qp.post_send(v::SendWorkRequest::send(2 * n, std::span(&sge, 1)));
    link.qp.post_send(v::SendWorkRequest::write(2 * n + 1, std::span(&sge, 1), target));
    for (int k = 0; k < 2; ++k) {
      const auto wc = link.cq.wait(peer.timeout());
      if (!wc) {
        std::cout << "hold " << n << " no completion within " << peer.timeout().count() << " ms" << std::endl;
        return 4;
      }
      if (!wc->ok()) {
        std::cout << "hold " << n << " error " << wc->status_string() << std::endl;
        return 3;
      }
    }
    if (n == 0) std::cout << "hold running" << std::endl;
  }
}

// ---------------------------------------------------------------------------------------
// --isolation: two processes on one vnic (the owner and the intruder, both servers) and a
// remote client each. The owner registers a "secret" MR for local access only and writes
// its address and keys to --keys-file. Its client tries to WRITE and READ the secret with
// its R_Key: REM_ACCESS_ERR. The intruder, on the same vnic, uses the owner's L_Key in its
// own SGEs (a SEND from it, a RECV into it): the daemon must refuse (LOC_PROT_ERR, or the
// post is refused), since a key is valid only within the process that registered it. The
// owner then checks that the secret never changed.

constexpr std::size_t kSecretLength = 4096;

void write_keys_file(const std::string& path, const GuardedBuffer& secret) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << "addr=" << secret.remote().addr << " lkey=" << secret.mr().lkey() << " rkey=" << secret.mr().rkey()
        << " length=" << secret.length() << "\n";
    if (!out) throw std::runtime_error("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot rename " + tmp);
}

Fields read_file_fields(const std::string& path, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    std::ifstream in(path);
    std::string line;
    if (in && std::getline(in, line)) {
      auto fields = parse_fields(line);
      if (!fields) throw std::runtime_error("malformed " + path);
      return *fields;
    }
    if (Clock::now() >= deadline) throw std::runtime_error("no " + path + " within the timeout");
    std::this_thread::sleep_for(50ms);
  }
}

bool wait_file(const std::string& path, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (::access(path.c_str(), F_OK) != 0) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(50ms);
  }
  return true;
}

void report(int& failed, std::string_view name, const std::string& verdict) {
  if (verdict.empty()) {
    std::cout << name << " 0 ok" << std::endl;
  } else {
    std::cout << name << " 0 FAIL " << verdict << std::endl;
    ++failed;
  }
}

// One remote attempt at the owner's secret with its R_Key (client side), or the owner's
// side of it: both make a fresh QP per attempt, since the refused one goes to error.
std::string remote_attempt(Peer& peer, bool read, GuardedBuffer* secret) {
  Link link = make_link(peer, Transport::Rc);
  if (peer.server()) {
    Fields setup = endpoint_fields(link.local);
    add_remote(setup, secret->remote());
    const v::Endpoint remote = endpoint_of(swap_setup(peer, setup));
    connect(peer, link, remote, Transport::Rc, v::access::kRemoteWrite | v::access::kRemoteRead);
    peer.side.send({{"step", "ready"}});
    peer.side.expect("sent", peer.timeout());
    return check_cq_empty(link.cq, "owner's");
  }
  Pieces buffer(peer.pd, kSecretLength, 1, 0, v::access::kLocalWrite);
  buffer.clear(std::byte{0x3C});
  const Fields setup = swap_setup(peer, endpoint_fields(link.local));
  const v::RemoteBuffer secret_remote = remote_of(setup);
  connect(peer, link, endpoint_of(setup), Transport::Rc, v::access::kRemoteWrite | v::access::kRemoteRead);
  peer.side.expect("ready", peer.timeout());
  link.qp.post_send(read ? v::SendWorkRequest::read(kSendWrId, buffer.sges, secret_remote)
                         : v::SendWorkRequest::write(kSendWrId, buffer.sges, secret_remote));
  const auto wc = link.cq.wait(peer.timeout());
  std::string verdict = check_completion(wc, read ? "read of the secret" : "write to the secret", v::WcStatus::RemAccessErr, std::nullopt, kSendWrId,
           link.qp.qp_num());
  if (verdict.empty() && read) verdict = buffer.check_untouched(std::byte{0x3C});
  tell_sent(peer, verdict, wc);
  return verdict;
}

// The intruder's SEND gathering from the owner's memory with the owner's L_Key (its own
// address space at that address holds nothing of the owner's; the key must not work).
std::string intruder_send(Peer& peer, const Fields& keys) {
  Link link = make_link(peer, Transport::Rc);
  if (!peer.server()) {
    Pieces in(peer.pd, kSecretLength, 1, 0, v::access::kLocalWrite);
    in.clear(std::byte{0x3C});
    const v::Endpoint remote = endpoint_of(swap_setup(peer, endpoint_fields(link.local)));
    connect(peer, link, remote, Transport::Rc, 0);
    link.qp.post_receive({kRecvWrId, in.sges});
    peer.side.send({{"step", "ready"}});
    peer.side.expect("sent", peer.timeout());
    // The intruder's SEND must fail before anything leaves: nothing may arrive here.
    if (auto bad = in.check_untouched(std::byte{0x3C}); !bad.empty()) return "something arrived: " + bad;
    return check_cq_empty(link.cq, "intruder's peer's");
  }
  const v::Endpoint remote = endpoint_of(swap_setup(peer, endpoint_fields(link.local)));
  connect(peer, link, remote, Transport::Rc, 0);
  peer.side.expect("ready", peer.timeout());
  const v::Sge foreign{require_number(keys, "addr"), static_cast<std::uint32_t>(kSecretLength),
                       static_cast<std::uint32_t>(require_number(keys, "lkey"))};
  std::size_t posted = 0;
  const v::SendWorkRequest wr = v::SendWorkRequest::send(kSendWrId, std::span(&foreign, 1));
  const int error = link.qp.try_post_send(std::span(&wr, 1), posted);
  std::string verdict;
  std::optional<v::WorkCompletion> wc;
  if (error != 0) {
    std::cout << "  note: the post itself was refused: " << std::strerror(error) << std::endl;
  } else {
    wc = link.cq.wait(peer.timeout());
    verdict = check_completion(wc, "send with the owner's lkey", v::WcStatus::LocProtErr, std::nullopt, kSendWrId,
                                    link.qp.qp_num());
  }
  tell_sent(peer, verdict, wc);
  return verdict;
}

// The intruder's RECV scattering into the owner's memory with the owner's L_Key; its
// client SENDs 64 bytes.
std::string intruder_recv(Peer& peer, const Fields& keys, std::uint64_t seed) {
  Link link = make_link(peer, Transport::Rc);
  if (!peer.server()) {
    Pieces out(peer.pd, 64, 1, 0, v::access::kLocalWrite);
    out.fill(seed);
    const v::Endpoint remote = endpoint_of(swap_setup(peer, endpoint_fields(link.local)));
    connect(peer, link, remote, Transport::Rc, 0);
    const Fields ready = peer.side.expect("ready", peer.timeout());
    if (ready.count("skip")) {
      tell_sent(peer, "", std::nullopt);
      return "";
    }
    link.qp.post_send(v::SendWorkRequest::send(kSendWrId, out.sges));
    const auto wc = link.cq.wait(peer.timeout());
    std::string verdict;
    if (!wc) verdict = "send: no completion within the timeout";
    else if (wc->ok()) verdict = "send: success, although the receive named another process's memory";
    else std::cout << "  note: the sender's status is '" << wc->status_string() << "'" << std::endl;
    tell_sent(peer, verdict, wc);
    return verdict;
  }
  const v::Endpoint remote = endpoint_of(swap_setup(peer, endpoint_fields(link.local)));
  connect(peer, link, remote, Transport::Rc, 0);
  const v::Sge foreign{require_number(keys, "addr"), 64, static_cast<std::uint32_t>(require_number(keys, "lkey"))};
  std::string verdict;
  try {
    link.qp.post_receive({kRecvWrId, std::span(&foreign, 1)});
  } catch (const v::Error& e) {
    std::cout << "  note: the post itself was refused: " << e.what() << std::endl;
    peer.side.send({{"step", "ready"}, {"skip", "1"}});
    peer.side.expect("sent", peer.timeout());
    return "";
  }
  peer.side.send({{"step", "ready"}});
  peer.side.expect("sent", peer.timeout());
  const auto wc = link.cq.wait(peer.timeout());
  return check_completion(wc, "receive into the owner's lkey", v::WcStatus::LocProtErr, std::nullopt, kRecvWrId,
                               link.qp.qp_num());
}

int isolation(Peer& peer) {
  const bool owner = peer.options.isolation_role == "owner";
  const std::string& keys_path = peer.options.keys_file;
  int failed = 0;
  if (owner) {
    std::unique_ptr<GuardedBuffer> secret;
    if (peer.server()) {
      secret = std::make_unique<GuardedBuffer>(peer.pd, kSecretLength, v::access::kLocalWrite);
      fill_pattern(secret->payload(), peer.options.seed);
      write_keys_file(keys_path, *secret);
    }
    report(failed, "owner_remote_write", remote_attempt(peer, false, secret.get()));
    report(failed, "owner_remote_read", remote_attempt(peer, true, secret.get()));
    if (peer.server()) {
      // The intruder works on the same vnic meanwhile; it touches KEYS.done when finished.
      std::string verdict;
      if (!wait_file(keys_path + ".done", peer.timeout())) verdict = "the intruder did not finish in time";
      if (verdict.empty()) {
        if (auto at = first_pattern_mismatch(secret->payload(), peer.options.seed)) {
          verdict = "the secret changed at offset " + std::to_string(*at);
        } else {
          verdict = secret->check_guards();
        }
      }
      report(failed, "owner_secret_intact", verdict);
    }
    return failed;
  }
  Fields keys;
  if (peer.server()) keys = read_file_fields(keys_path, peer.timeout());
  report(failed, "intruder_send_foreign_lkey", intruder_send(peer, keys));
  report(failed, "intruder_recv_foreign_lkey", intruder_recv(peer, keys, peer.options.seed));
  if (peer.server()) std::ofstream(keys_path + ".done") << "done\n";
  return failed;
}

// ---------------------------------------------------------------------------------------

int run(const Options& options) {
  // The side channel first: a side that cannot open its device tells the other at once
  // instead of leaving it waiting for a connection.
  const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(options.timeout);
  SideChannel side = options.role == Role::Server ? SideChannel::accept_one(options.port, wait)
                                                  : SideChannel::connect_to(options.peer_address, options.port, wait);
  std::optional<v::Context> context;
  std::optional<v::ProtectionDomain> pd;
  try {
    context.emplace(v::Context::open(options.device));
    pd.emplace(context->alloc_pd());
  } catch (const std::exception& e) {
    side.send({{"step", "abort"}, {"reason", std::string("cannot open ") + options.device + ": " + e.what()}});
    throw;
  }
  const v::Mtu active_mtu = context->query_port().active_mtu;
  const std::size_t mtu = static_cast<std::size_t>(v::mtu_bytes(active_mtu));
  Peer peer{options, std::move(side), std::move(*context), std::move(*pd), active_mtu, mtu};
  if (options.hold) return hold(peer);
  if (!options.isolation_role.empty()) return isolation(peer) == 0 ? 0 : 1;
  return run_cases(peer) == 0 ? 0 : 1;
}

}  // namespace
}  // namespace rrdma::systest

int main(int argc, char** argv) {
  using namespace rrdma::systest;
  std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.size() == 1 && (args[0] == "--list" || args[0] == "--help")) {
    std::cout << usage();
    return 0;
  }
  auto parsed = parse_options(args);
  if (auto* error = std::get_if<std::string>(&parsed)) {
    std::cerr << "rrdma_verbs_peer: " << *error << "\n" << usage();
    return 2;
  }
  try {
    return run(std::get<Options>(parsed));
  } catch (const std::exception& e) {
    std::cout << "FAIL " << e.what() << std::endl;
    return 1;
  }
}
