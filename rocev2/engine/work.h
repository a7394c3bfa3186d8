// The verbs-level values the engine works with: QP types and states, QP attributes, send and
// receive work requests, completions and async events. Numeric values of the enums follow
// libibverbs (verbs.h) so that the verbs layer can pass them through unchanged.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "rocev2/types.h"
#include "stack/addresses.h"

namespace rrdma::rocev2 {

enum class QpType : std::uint8_t { Rc = 2, Uc = 3, Ud = 4 };  // IBV_QPT_*

// IBA ch. 10 QP states (IBV_QPS_*).
enum class QpState : std::uint8_t { Reset = 0, Init = 1, Rtr = 2, Rts = 3, Sqd = 4, Sqe = 5, Err = 6 };

// Memory access rights of an MR and of a QP's responder (IBV_ACCESS_*).
namespace access {
inline constexpr std::uint32_t kLocalWrite = 1u << 0;
inline constexpr std::uint32_t kRemoteWrite = 1u << 1;
inline constexpr std::uint32_t kRemoteRead = 1u << 2;
inline constexpr std::uint32_t kRemoteAtomic = 1u << 3;
}  // namespace access

// Which fields of QpAttr a modify_qp() call sets (the subset of IBV_QP_* the engine uses,
// same bit values).
namespace qp_attr {
inline constexpr std::uint32_t kState = 1u << 0;
inline constexpr std::uint32_t kAccessFlags = 1u << 3;
inline constexpr std::uint32_t kPkeyIndex = 1u << 4;
inline constexpr std::uint32_t kQkey = 1u << 6;
inline constexpr std::uint32_t kAv = 1u << 7;            // the peer's address (dest_ip)
inline constexpr std::uint32_t kPathMtu = 1u << 8;
inline constexpr std::uint32_t kTimeout = 1u << 9;
inline constexpr std::uint32_t kRetryCnt = 1u << 10;
inline constexpr std::uint32_t kRnrRetry = 1u << 11;
inline constexpr std::uint32_t kRqPsn = 1u << 12;
inline constexpr std::uint32_t kMaxQpRdAtomic = 1u << 13;
inline constexpr std::uint32_t kMinRnrTimer = 1u << 15;
inline constexpr std::uint32_t kSqPsn = 1u << 16;
inline constexpr std::uint32_t kMaxDestRdAtomic = 1u << 17;
inline constexpr std::uint32_t kDestQpn = 1u << 20;
}  // namespace qp_attr

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
  std::uint32_t access_flags = 0;    // access:: bits the responder grants
};

struct Sge {
  std::uint64_t addr = 0;
  std::uint32_t length = 0;
  Lkey lkey{};
};

enum class WrOpcode : std::uint8_t {  // IBV_WR_*
  RdmaWrite = 0, RdmaWriteWithImm = 1, Send = 2, SendWithImm = 3, RdmaRead = 4,
  AtomicCmpSwp = 5, AtomicFetchAdd = 6, SendWithInv = 9,
};

namespace send_flags {  // IBV_SEND_*
inline constexpr std::uint32_t kFence = 1u << 0;
inline constexpr std::uint32_t kSignaled = 1u << 1;
inline constexpr std::uint32_t kSolicited = 1u << 2;
inline constexpr std::uint32_t kInline = 1u << 3;
}  // namespace send_flags

struct SendWr {
  std::uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::Send;
  std::uint32_t flags = 0;              // send_flags::
  std::vector<Sge> sg_list;
  // With send_flags::kInline the payload is these bytes, copied by the poster at post time
  // (the verbs layer puts them into the WQE); sg_list is then ignored.
  std::vector<std::uint8_t> inline_data;
  std::uint32_t imm_data = 0;           // as in ibv_send_wr: network byte order value
  Rkey invalidate_rkey{};               // SendWithInv
  std::uint64_t remote_addr = 0;        // RDMA and atomic operations
  Rkey rkey{};
  std::uint64_t compare_add = 0;        // CmpSwp: compare; FetchAdd: add
  std::uint64_t swap = 0;               // CmpSwp: swap
  // UD only: the address handle and the remote QP.
  stack::Ipv4Address ud_dest_ip{};
  Qpn ud_remote_qpn{};
  Qkey ud_remote_qkey{};
};

struct RecvWr {
  std::uint64_t wr_id = 0;
  std::vector<Sge> sg_list;
};

enum class WcStatus : std::uint8_t {  // IBV_WC_*
  Success = 0, LocLenErr = 1, LocQpOpErr = 2, LocProtErr = 4, WrFlushErr = 5,
  BadRespErr = 7, LocAccessErr = 8, RemInvReqErr = 9, RemAccessErr = 10, RemOpErr = 11,
  RetryExcErr = 12, RnrRetryExcErr = 13, FatalErr = 19, GeneralErr = 21,
};

enum class WcOpcode : std::uint8_t {  // IBV_WC_*
  Send = 0, RdmaWrite = 1, RdmaRead = 2, CompSwap = 3, FetchAdd = 4,
  Recv = 128, RecvRdmaWithImm = 129,
};

namespace wc_flags {  // IBV_WC_*
inline constexpr std::uint32_t kGrh = 1u << 0;
inline constexpr std::uint32_t kWithImm = 1u << 1;
inline constexpr std::uint32_t kWithInv = 1u << 3;
}  // namespace wc_flags

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

enum class AsyncEventType : std::uint8_t {  // IBV_EVENT_*
  QpFatal = 1, QpReqErr = 2, QpAccessErr = 3, CommEstablished = 4, SqDrained = 5,
  LastWqeReached = 16,
};

struct AsyncEvent {
  Qpn qpn{};
  AsyncEventType type = AsyncEventType::QpFatal;
};

}  // namespace rrdma::rocev2
