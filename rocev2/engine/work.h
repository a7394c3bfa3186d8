// The engine's shapes of verbs work: QP attributes, send and receive work requests,
// completions and async events. The codes in them (QP types and states, opcodes, statuses,
// flags) are the shared verbs vocabulary of rocev2/verbs_codes.h.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "rocev2/types.h"
#include "rocev2/verbs_codes.h"
#include "stack/addresses.h"

namespace rrdma::rocev2 {

// READs and atomics a responder keeps answers for (IBA ch. 9 "responder resources"): the
// engine's replay cache per QP, and so the largest max_dest_rd_atomic a device may offer.
// rxe offers 128, and perftest copies the peer's max_qp_rd_atom into its own max_rd_atomic.
inline constexpr std::uint8_t kMaxResponderResources = 128;

struct QpAttr {
  QpState state = QpState::Reset;
  std::uint32_t path_mtu = 1024;     // bytes: 256, 512, 1024, 2048 or 4096
  std::uint8_t timeout = 14;         // local ACK timeout 4.096 us * 2^timeout; 0 = infinite
  std::uint8_t retry_cnt = 7;        // 3 bits
  std::uint8_t rnr_retry = 7;        // 3 bits; 7 = retry forever
  std::uint8_t min_rnr_timer = 12;   // RNR timer code we put in our RNR NAKs (0..31)
  std::uint8_t max_rd_atomic = 1;    // READs/atomics we may have outstanding as requester
  std::uint8_t max_dest_rd_atomic = 1;  // READs/atomics we accept outstanding as responder
  Psn sq_psn{};
  Psn rq_psn{};
  Qpn dest_qpn{};
  Qkey qkey{};
  stack::Ipv4Address dest_ip{};      // the address vector: RoCE v2 over IPv4
  std::uint8_t traffic_class = 0;    // its GRH traffic class (set with dest_ip, qp_attr::kAv)
  std::uint32_t access_flags = 0;    // access:: bits the responder grants
};

struct Sge {
  std::uint64_t addr = 0;
  std::uint32_t length = 0;
  Lkey lkey{};
};
// A work request's scatter/gather list. Almost every WR has one or two SGEs: they live in the
// WR itself, and posting one allocates nothing (bench/instructions counted malloc and free
// among the sender's top functions per packet when this was a std::vector).
using SgeList = boost::container::small_vector<Sge, 2>;

// IBV_WR_BIND_MW (ibv_post_send(3) bind_mw, ibv_bind_mw(3)): bind the window whose R_Key is
// `mw_rkey` to [addr, addr + length) of the region `mr_lkey` names, with `access` rights
// (IBV_ACCESS_* bits), and give it `new_rkey` (only its low 8 bits, the consumer-owned key
// portion, count: IBA 10.6.7). length 0 unbinds a type 1 window.
struct MwBind {
  Rkey mw_rkey{};
  Rkey new_rkey{};
  Lkey mr_lkey{};
  std::uint64_t addr = 0;
  std::uint64_t length = 0;
  std::uint32_t access = 0;
};

struct SendWr {
  std::uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::Send;
  std::uint32_t flags = 0;              // send_flags::
  SgeList sg_list;
  // With send_flags::kInline the payload is these bytes, copied by the poster at post time
  // (the verbs layer puts them into the WQE); sg_list is then ignored.
  std::vector<std::uint8_t> inline_data;
  std::uint32_t imm_data = 0;           // as in ibv_send_wr: network byte order value
  Rkey invalidate_rkey{};               // SendWithInv, LocalInv
  MwBind bind;                          // BindMw
  std::uint64_t remote_addr = 0;        // RDMA and atomic operations
  Rkey rkey{};
  std::uint64_t compare_add = 0;        // CmpSwp: compare; FetchAdd: add; ATOMIC_WRITE: its
                                        // 8 bytes as they lay in the poster's memory
  std::uint64_t swap = 0;               // CmpSwp: swap
  // FLUSH (IBA 1.5 A19.4.1; ibv_wr_flush(3)): the RETH length, and the FETH's placement type
  // (flush::kGlobal / kPersistent) and selectivity level (flush::kLevelRange / kLevelMr).
  std::uint32_t flush_length = 0;
  std::uint8_t flush_type = 0;
  std::uint8_t flush_level = 0;
  // UD only: the address handle (its IPv4 address and GRH traffic class) and the remote QP.
  stack::Ipv4Address ud_dest_ip{};
  std::uint8_t ud_traffic_class = 0;
  Qpn ud_remote_qpn{};
  Qkey ud_remote_qkey{};
};

struct RecvWr {
  std::uint64_t wr_id = 0;
  SgeList sg_list;
};

// One work completion. `send_queue` says which CQ it belongs to (the QP's send or receive CQ).
struct Completion {
  Qpn qpn{};
  bool send_queue = true;
  std::uint64_t wr_id = 0;
  WcStatus status = WcStatus::Success;
  WcOpcode opcode = WcOpcode::Send;
  std::uint32_t byte_len = 0;
  std::uint32_t flags = 0;          // wc_flags::
  std::uint32_t imm_data = 0;       // with kWithImm (network byte order value)
  Rkey invalidated_rkey{};          // with kWithInv
  Qpn src_qp{};                     // UD receives
  stack::Ipv4Address src_ip{};      // UD receives
  bool solicited = false;           // the message had the SE bit (for solicited-only CQ events)
};

struct AsyncEvent {
  Qpn qpn{};
  EventType type = EventType::QpFatal;
};

}  // namespace rrdma::rocev2
